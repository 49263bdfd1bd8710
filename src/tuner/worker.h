/*
 * worker.h - the GPU side of tuning: a problem's buffers and reference
 * result, and running one candidate (poison, launch, verify, time).
 *
 * Everything that crosses this interface is plain data (a key, a config, a
 * CUBIN, timings and errors), so the worker can move into a child process
 * without changing the orchestration in tune.c.
 */
#ifndef KTUNE_WORKER_H
#define KTUNE_WORKER_H

#include "runtime/compile.h"
#include "runtime/context.h"
#include "tuner/bench.h"
#include "tuner/check.h"

/* One GEMM problem to run candidates on. */
struct ktune_problem {
	struct ktune_key key; /* key.aligned is derived from the fields below */
	int64_t lda, ldb, ldc; /* 0: packed */
	int offset;            /* elements added to every base pointer (1 misaligns them) */
	float alpha, beta;
	unsigned seed;
};

struct ktune_worker;

/* Opens a worker on a context: compiles the reference and helper kernels; cuBLAS if available. */
int ktune__worker_open(ktune_ctx *ctx, struct ktune_worker **out, struct ktune_err *e);
void ktune__worker_close(struct ktune_worker *w);

/* Allocates the problem, fills A, B and C with random numbers and computes the reference. */
int ktune__worker_set_problem(struct ktune_worker *w, const struct ktune_problem *p,
			      struct ktune_err *e);
/* The current problem (with lda/ldb/ldc filled in and key.aligned set). */
const struct ktune_problem *ktune__worker_problem(const struct ktune_worker *w);

/* How far ktune__worker_run goes with a candidate that computes the right result. */
enum ktune_run_mode {
	KTUNE_RUN_VERIFY,  /* no timing */
	KTUNE_RUN_SCREEN,  /* a brief timing */
	KTUNE_RUN_MEASURE, /* the full benchmark protocol */
};

/*
 * Runs one candidate: poisons C, launches once, verifies against the
 * reference; if right, times it as `mode` says.
 * Returns KTUNE_OK with the outcome in trial->status ("ok", "wrong",
 * "launch_error"); a non-zero return means the worker itself failed.
 */
int ktune__worker_run(struct ktune_worker *w, const struct ktune_config *cfg,
		      const struct ktune_cubin *cubin, enum ktune_run_mode mode, struct ktune_trial *trial,
		      struct ktune_timing *timing, struct ktune_err *e);

/* Verifies and times cuBLAS on the current problem; KTUNE_ERR_NOT_FOUND without cuBLAS. */
int ktune__worker_cublas(struct ktune_worker *w, struct ktune_check *check,
			 struct ktune_timing *timing, struct ktune_err *e);

/*
 * Poisons C, runs ktune_gemm through the public runtime on the current
 * problem, and verifies: for tests of dispatch.  *source says what served it.
 */
int ktune__worker_run_public(struct ktune_worker *w, struct ktune_check *check,
			     const char **source, struct ktune_err *e);

/*
 * The same, then ktune_gemm on `ctx` (any context of the worker's device:
 * one opened under another KTUNE_FALLBACK) timed by the full protocol on
 * the current problem, as the benchmarks time it; *source says what served
 * it.  A wrong result is reported in check->pass, untimed.
 */
int ktune__worker_time_public(struct ktune_worker *w, ktune_ctx *ctx, struct ktune_check *check,
			      struct ktune_timing *timing, const char **source, struct ktune_err *e);

/* Checks the current C against the reference. */
int ktune__worker_check(struct ktune_worker *w, struct ktune_check *out, struct ktune_err *e);

/*
 * Device pointers of the current problem (after the element offset): A, B,
 * the initial C and the fp32 reference [m][n]; for tests.
 */
void ktune__worker_buffers(const struct ktune_worker *w, CUdeviceptr *a, CUdeviceptr *b,
			   CUdeviceptr *c_init, CUdeviceptr *c, CUdeviceptr *ref);

const char *ktune__worker_cublas_version(const struct ktune_worker *w);

#endif
