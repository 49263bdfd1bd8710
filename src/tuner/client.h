/*
 * client.h - the tuner's end of its worker process: spawns it, sends it
 * work with a deadline, and when the worker crashes, hangs or dies, records
 * that against the candidate it was running, kills it and starts a fresh
 * one (which gets the current problem again before its next run).
 */
#ifndef KTUNE_CLIENT_H
#define KTUNE_CLIENT_H

#include <sys/types.h>

#include "tuner/candidates.h"
#include "tuner/protocol.h"

struct ktune_client;

/*
 * Spawns `exe __worker --fd 3` (posix_spawn: the tuner never forks itself)
 * and says hello on `device`.  cache_dir NULL: the worker's default cubin cache.
 */
int ktune__client_open(const char *exe, int device, const char *cache_dir,
		       struct ktune_client **out, struct ktune_err *e);
/* Asks the worker to quit, then kills what is left.  NULL is a no-op. */
void ktune__client_close(struct ktune_client *c);

/* The worker's device and toolchain, from its hello. */
const struct ktune_hello *ktune__client_hello(const struct ktune_client *c);
/* The current worker's pid (0 while none runs), and how many were started. */
pid_t ktune__client_pid(const struct ktune_client *c);
int ktune__client_starts(const struct ktune_client *c);

/* The deadline of one NVRTC compile (0: 120 s), also for a RUN that must compile first. */
void ktune__client_set_compile_timeout(struct ktune_client *c, double s);

/* Sets the problem (kept, and sent again to every fresh worker); *out is it filled in. */
int ktune__client_problem(struct ktune_client *c, const struct ktune_problem *p,
			  struct ktune_problem *out, struct ktune_err *e);

/*
 * Compiles the jobs in the worker on `threads` threads.  A job still
 * compiling after the compile timeout gets status KTUNE_ERR_COMPILE with timed_out set
 * (the worker is killed and a fresh one compiles the rest); a crash of the
 * worker marks the jobs it was compiling failed.  Fails as a whole only when
 * no worker can be started.  Each job's cubin stays in the worker for RUN
 * (job i as RUN's job i) until the next PROBLEM.
 */
int ktune__client_compile(struct ktune_client *c, struct ktune_compile_job *jobs, int n,
			  int threads, struct ktune_err *e);
/*
 * The same for jobs[first] .. jobs[first + n - 1] alone: RUN's job numbers
 * stay those of the whole array, so that a tune can compile its kernels in
 * batches and run any of them after.
 */
int ktune__client_compile_range(struct ktune_client *c, struct ktune_compile_job *jobs, int first, int n,
				int threads, struct ktune_err *e);

/*
 * Runs a candidate (job: its compile job, or -1 to compile in the worker) as
 * `mode` says, within timeout_s.  The outcome is in trial->status: besides
 * worker.h's, "crashed" (the context was lost, or the worker died twice on
 * it) and "timeout" (killed at the deadline).  Returns non-zero only when
 * no worker can be started or the problem cannot be set again.
 */
int ktune__client_run(struct ktune_client *c, int job, const struct ktune_config *cfg,
		      enum ktune_run_mode mode, double timeout_s, struct ktune_trial *trial,
		      struct ktune_timing *timing, struct ktune_err *e);

/* Times cuBLAS on the problem; KTUNE_ERR_NOT_FOUND without it. */
int ktune__client_cublas(struct ktune_client *c, double timeout_s, struct ktune_check *check,
			 struct ktune_timing *timing, struct ktune_err *e);

#endif
