/*
 * tuner.h - tuning keys and sweeping specs: what the CLI's tune, sweep and
 * verify commands call.
 *
 * A key is tuned in four steps: candidates (the space pruned for the key and
 * device, sampled to the budget), compile (in parallel, through the disk
 * cache), screen (each candidate verified against the reference and timed
 * briefly), and measure (the fastest few, and cuBLAS, timed by the full
 * protocol).  The winner, every trial and the provenance go to the database
 * in one transaction.
 */
#ifndef KTUNE_TUNER_H
#define KTUNE_TUNER_H

#include <stdio.h>

#include "db/db.h"
#include "ops/gemm-model.h"
#include "runtime/device.h"
#include "search/spec.h"
#include "tuner/check.h"

struct ktune_tuner;
struct ktune_hello; /* tuner/protocol.h */

struct ktune_tune_options {
	int budget;      /* candidates per key; 0: all */
	/*
	 * GEMM: the kernels the performance model ranks best (and the best of
	 * each tile shape) are compiled and screened, the likeliest first and
	 * in batches, until the rest cannot win by the model's bound; 0: every
	 * candidate, compiled at once (the exhaustive search).
	 */
	int top;
	/*
	 * GEMM with top: no batch of kernels starts once the time spent
	 * compiling and screening, plus the last batch's, would pass this many
	 * seconds; the rest are left untried.  0: no limit.
	 */
	double deadline_s;
	int force;       /* retune keys already tuned with the current template */
	unsigned seed;   /* inputs and budget sampling */
	int jobs;        /* compile threads; 0: one per core */
	int finalists;   /* candidates re-timed by the full protocol; 0: 8 */
	int retry_failed; /* also try configs that failed before for the key (same template, toolchain) */
	double timeout_s; /* a candidate's run; 0: derived from the key (ktune__run_timeout) */
	double compile_timeout_s; /* one NVRTC compile; 0: 120 s */
	int group_pick;  /* sweep: weigh each group's most won config at its other keys (ktune__group_pick) */
	/*
	 * Tune each key in its own alignment class, as a program recorded it
	 * (sweep --misses): a key whose class the tuner cannot make fails with
	 * the reason.  Else another op's aligned key is tuned with packed
	 * operands, whatever class they fall in.  (GEMM's operands are always
	 * laid out in the key's class: ktune__gemm_problem_layout.)
	 */
	int as_recorded;
	FILE *progress;  /* where progress lines go; NULL: none */
	const char *progress_prefix; /* NULL: lines as they are; else put before each whole line, and
				      * the in-place updates ("\r...") left out: several GPUs share the stream */
};

/*
 * The messages of the candidates that the model's order (top) leaves
 * untried, stored as "pruned" trials so that explain lists them: beyond
 * the cut, or unable to win by the model's bound.
 */
#define KTUNE_UNTRIED_TOP "not in the model's top"
#define KTUNE_UNTRIED_BOUND "model bound"
#define KTUNE_UNTRIED_DEADLINE "the tune's deadline"


/* Whether a stored trial is a candidate the model's order left untried (tune.c). */
int ktune__trial_untried(const struct ktune_trial *tr);

struct ktune_tune_report {
	struct ktune_result result;
	int skipped;          /* already tuned: result is the stored one */
	int ok, wrong, failed, pruned; /* trial counts */
	int known_bad;        /* configs skipped: they failed before (negative cache) */
	int untried;          /* candidates the model left untried (o->top: beyond its rank, or unable to win) */
	int worker_restarts;  /* fresh workers started after crashes and timeouts */
	char disturbed[160];  /* "": clean; else why NVML saw every measurement disturbed */
	double cublas_err_fro;
	int has_cublas;
};

/*
 * Opens the database (created if missing) and starts a worker process,
 * `worker_exe __worker`, on the device.  The tuner itself never touches
 * CUDA: every GPU call and compile happens in the worker (see protocol.h).
 */
int ktune__tuner_open(const char *db_path, int device, const char *worker_exe,
		      struct ktune_tuner **out, struct ktune_err *e);
void ktune__tuner_close(struct ktune_tuner *t);
/* The device the worker runs on, and its toolchain. */
const struct ktune_hello *ktune__tuner_device(struct ktune_tuner *t);
/* The same device as device.h describes it (total_mem 0: the worker does not report it). */
void ktune__tuner_device_info(struct ktune_tuner *t, struct ktune_device_info *out);
struct ktune_db *ktune__tuner_db(struct ktune_tuner *t);
/* Workers started so far (1 + restarts). */
int ktune__tuner_worker_starts(struct ktune_tuner *t);

/* What the GEMM performance model needs of the worker's device. */
void ktune__tuner_model_device(struct ktune_tuner *t, struct ktune_gemm_device *out);

/* The deadline of one candidate run for a key (see tune.c); override_s > 0 wins. */
double ktune__run_timeout(const struct ktune_key *key, double override_s);

/* Tunes one key and stores the winner.  KTUNE_ERR_VERIFY if no candidate was right. */
int ktune__tune_key(struct ktune_tuner *t, const struct ktune_key *key,
		    const struct ktune_tune_options *o, struct ktune_tune_report *r,
		    struct ktune_err *e);

/*
 * The group pick, once a sweep has tuned every key: r holds the results of
 * n related keys (the sweep's keys of one M).  The tile most of them won
 * with (at least two; GROUP_SIZE and SPLIT_K aside), with each other key's
 * own SPLIT_K (a key whose split it cannot take keeps its pick), and that
 * key's own pick are measured at that key in turns with cuBLAS, in two
 * rounds; if the tile's geometric mean ratio cuBLAS time / time over those
 * keys beats their own picks', it replaces each own pick that did not beat
 * it by 3% in both rounds, measured in turns once more for the figures
 * stored.  A ratio at a long key scatters by 2-5% from one measurement to
 * the next, more than a tile is worth there, so per-key picks follow noise
 * where one config does better as a group (docs/gemm-experiments.md, probes
 * 53-57).  Updates r and the database;
 * *switched says at how many keys.
 */
int ktune__group_pick(struct ktune_tuner *t, struct ktune_result *r, int n, const struct ktune_tune_options *o,
		      int *switched, struct ktune_err *e);

/*
 * Tunes every key of the spec on each of the ndevices GPUs (a thread and a
 * worker per GPU, sharing the keys), skipping keys already tuned unless
 * o->force.  Keys are claimed in the database first, so other sweeps on the
 * same database never tune a key at the same time; keys they hold are
 * waited for at the end.  With o->group_pick, the keys it tuned then go
 * through the group pick, a group per M, on the first GPU.  Prints a
 * summary table to `out`.  Returns the number of keys that failed or were
 * not run (0: all tuned) or a negative status when nothing could be done.
 */
int ktune__sweep(const char *db_path, const char *worker_exe, const int *devices, int ndevices,
		 const struct ktune_spec *spec, const struct ktune_tune_options *o, FILE *out,
		 struct ktune_err *e);

/*
 * Tune what is used: a spec of exactly the keys a misses file lists (each
 * in its own alignment class; recorded_on, if not NULL, gets the GPU that
 * recorded them), or the misses the database holds for any of the devices
 * devs[0..ndevs) (a key recorded on several of them once).  (recorded.c)
 */
int ktune__spec_from_misses(const char *path, struct ktune_spec *out, struct ktune_device_id *recorded_on,
			    struct ktune_err *e);
int ktune__spec_from_db_misses(struct ktune_db *db, const struct ktune_device_id *devs, int ndevs,
			       struct ktune_spec *out, struct ktune_err *e);

/*
 * Re-runs a stored result's config on fresh random inputs against the
 * reference.  Fills *check; returns a negative status only if it could not run.
 */
int ktune__verify_result(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			 struct ktune_check *check, struct ktune_err *e);

/* A stored result timed again against cuBLAS (ktune bench). */
struct ktune_bench_report {
	char status[16];      /* the stored config's outcome: KTUNE_TRIAL_OK, _WRONG, _CRASHED, ... */
	char message[512];    /* why, when not ok */
	double time_us;       /* ok: the config's time, the median of its runs in turns with cuBLAS */
	double cublas_us;     /* cuBLAS's time in the same turns; 0 without cuBLAS */
	int has_cublas;
	char disturbed[160];  /* "": clean; else why NVML saw every measurement disturbed */
};

/*
 * Compiles a stored result's config (through the disk cache) and times it
 * on fresh random inputs as a sweep's last step does: by the full protocol,
 * then in turns with cuBLAS.  A config that fails or computes a wrong
 * result says so in out->status; returns a negative status only if it
 * could not run at all.
 */
int ktune__bench_result(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			struct ktune_bench_report *out, struct ktune_err *e);

/*
 * main() of the GPU worker process, `PROG __worker --fd N`: what the tuner
 * spawns (worker_exe above); serves the GPU worker's operations
 * (protocol.h) until the tuner quits or goes.  Returns the exit status.
 */
int ktune__gpu_worker_main(int argc, char **argv);

#endif
