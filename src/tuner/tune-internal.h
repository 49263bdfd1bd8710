/*
 * tune-internal.h - what the tuner's files share and nobody else sees: the
 * tuner, a candidate's state, and the calls between them.  They build on
 * each other in one direction, none calling back:
 *
 *   progress.c  progress lines
 *   tune-log.c  the record of a tuning, for explain
 *   measure.c   the measurement protocol (and NVML hygiene)
 *   tune.c      the tuner, the tune loop, verify and bench of stored results
 *   group.c     the group pick
 *
 * Each uses only the files above it.
 */
#ifndef KTUNE_TUNE_INTERNAL_H
#define KTUNE_TUNE_INTERNAL_H

#include <stddef.h>

#include "ops/op.h"
#include "tuner/protocol.h"
#include "tuner/tuner.h"

struct ktune_client;
struct ktune_nvml;

/* What a tuning records for explain (tune-log.c): its full measurements and decisions. */
struct ktune_tune_log {
	struct ktune_measurement *m;
	int nm, cap, lost;
	const char *stage; /* of the measurements being taken: KTUNE_STAGE_* */
	int round;
	char note[960];    /* the decisions, a line each (room left in struct ktune_tuning.note) */
};

struct ktune_tuner {
	struct ktune_db *db;
	struct ktune_client *client;
	char driver[32]; /* "13.0" */
	struct ktune_nvml *nvml; /* NULL: NVML absent, measurements unchecked */
	int pids_match;          /* NVML lists our worker under its own pid */
	struct ktune_tune_log *log; /* the tuning being recorded; NULL: none */
};

/* One candidate's state through screening and measurement. */
struct candidate {
	struct ktune_config cfg;
	int job;      /* its compile job; -1: left untried (tune.c) */
	int screened; /* its trial holds a screen's outcome */
	double bound_us; /* GEMM in the model's order: no run of it can be faster (gemm-model.h) */
	struct ktune_trial trial;
	struct ktune_timing timing;
};

/*
 * The op of a key other than GEMM, or NULL for GEMM (and an unknown op).
 * GEMM's families, config texts and cost model predate the op registry
 * (ops/gemm.h); every other op answers through its struct ktune_op.
 */
static inline const struct ktune_op *ktune__other_op(const struct ktune_key *key)
{
	const struct ktune_op *op = ktune__op_of(key);
	return op && !ktune__op_is_gemm(op) ? op : NULL;
}

/*
 * A progress line to o->progress (nothing if NULL).  With a prefix (several
 * GPUs share the stream) only whole lines, each prefixed and written in one
 * call; in-place updates ("\r...") are left out.  (progress.c)
 */
void ktune__tune_progress(const struct ktune_tune_options *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* tune-log.c: the record of a tuning (nothing without t->log). */

/* The stage and round (-1: the same round) of the measurements that follow. */
void ktune__log_stage(struct ktune_tuner *t, const char *stage, int round);
/* One full measurement: config "" for the baseline; timing kept when status is ok. */
void ktune__log_measure(struct ktune_tuner *t, const char *config, const char *status,
			const struct ktune_timing *timing);
/* A decision, one line. */
void ktune__log_note(struct ktune_tuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ktune__log_free(struct ktune_tune_log *l);
/* Points out's measurements at the log's (valid while it lives) and copies its notes. */
void ktune__log_tuning(const struct ktune_tune_log *l, struct ktune_tuning *out);

/* measure.c: the measurement protocol. */

/* Opens NVML for t's GPU (t->nvml NULL where it cannot: then nothing is checked). */
void ktune__hygiene_open(struct ktune_tuner *t);

/* qsort order of struct candidate: those whose trial is ok first, then by median time. */
int ktune__candidate_by_time(const void *a, const void *b);

/* Whether two configs differ in more than the order of the tiles (GROUP_SIZE). */
int ktune__other_tile(const struct ktune_config *a, const struct ktune_config *b);

/*
 * w and cuBLAS timed in turns (w, cuBLAS, cuBLAS, w, ...): w->timing and its
 * trial's time and errors, *cb_check and *cb_time cuBLAS's; *has_cublas 0
 * where cuBLAS failed.  A run of w that fails leaves w->trial saying so.
 */
int ktune__measure_in_turns(struct ktune_tuner *t, struct candidate *w, double timeout, int *has_cublas,
			    struct ktune_check *cb_check, struct ktune_timing *cb_time, struct ktune_err *e);

/*
 * The measure step: the first `finalists` of c timed by the full protocol
 * twice and sorted, the fastest (c[0]) then in turns with cuBLAS, and the
 * runoff; repeated while NVML says the GPU was disturbed, and `disturbed`
 * says why when every attempt was ("" else).
 */
int ktune__measure_finalists(struct ktune_tuner *t, struct candidate *c, int finalists, double timeout,
			     const struct ktune_tune_options *o, int *has_cublas, struct ktune_check *cb_check,
			     struct ktune_timing *cb_time, char *disturbed, size_t disturbed_size,
			     struct ktune_err *e);

/* tune.c: stored results. */

/* A stored result's config, and fresh random inputs of its key (and alignment class) set in the worker. */
int ktune__stored_problem(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			  struct ktune_config *cfg, struct ktune_problem *set, struct ktune_err *e);

/* A result's winner: c's config, its measured times and check, and their provenance (res->key set). */
void ktune__fill_winner(struct ktune_tuner *t, const struct candidate *c, struct ktune_result *res);

#endif
