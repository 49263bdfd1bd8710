/*
 * measure.c - the measurement protocol of the tune loop and the group pick:
 * finalists timed by the full protocol twice (in order, then in reverse),
 * the fastest in turns with cuBLAS, the runoff with the fastest of another
 * tile, all of it again while NVML says the GPU was disturbed (another
 * process on it, clocks braked by heat or power).  Every run goes through
 * the worker (client.h); nothing here stores anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuner/client.h"
#include "tuner/nvml.h"
#include "tuner/tune-internal.h"

/* Full measurements repeated while NVML says the GPU was disturbed. */
#define MEASURE_ATTEMPTS 3

/*
 * Measurement hygiene through NVML: another process on the GPU or clocks
 * pulled down by heat or power brakes make a measurement disturbed.
 */
void ktune__hygiene_open(struct ktune_tuner *t)
{
	struct ktune_err e;
	struct ktune_gpu_sample s;
	static int said;
	if (ktune__nvml_open(ktune__client_hello(t->client)->uuid, &t->nvml, &e)) {
		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			fprintf(stderr, "ktune: %s: measurements are not checked for other processes "
				"or throttling\n", e.msg);
		t->nvml = NULL;
		return;
	}
	/* pids match unless NVML sees another pid namespace (containers) */
	if (!ktune__nvml_sample(t->nvml, &s, &e))
		t->pids_match = ktune__nvml_sample_has_pid(&s, ktune__client_pid(t->client));
}

static int hygiene_sample(struct ktune_tuner *t, struct ktune_gpu_sample *s)
{
	return t->nvml && ktune__nvml_sample(t->nvml, s, NULL) == KTUNE_OK;
}

static int hygiene_verdict(struct ktune_tuner *t, const struct ktune_gpu_sample *before,
			   const struct ktune_gpu_sample *after, struct ktune_nvml_verdict *v)
{
	pid_t ours = ktune__client_pid(t->client);
	return ktune__nvml_verdict(before, after, t->pids_match ? &ours : NULL, 1, v);
}

int ktune__candidate_by_time(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;
	int xo = !strcmp(x->trial.status, KTUNE_TRIAL_OK), yo = !strcmp(y->trial.status, KTUNE_TRIAL_OK);
	if (xo != yo)
		return yo - xo;
	return x->timing.median_us < y->timing.median_us ? -1 : x->timing.median_us > y->timing.median_us;
}

static int by_median(const void *a, const void *b)
{
	const struct ktune_timing *x = a, *y = b;
	return x->median_us < y->median_us ? -1 : x->median_us > y->median_us;
}

/* The median of n timings (the mean of the middle two for even n), field by field. */
static struct ktune_timing middle_timing(struct ktune_timing *x, int n)
{
	qsort(x, (size_t)n, sizeof(*x), by_median);
	const struct ktune_timing *lo = &x[(n - 1) / 2], *hi = &x[n / 2];
	struct ktune_timing m = { (lo->median_us + hi->median_us) / 2, (lo->p20_us + hi->p20_us) / 2,
				  (lo->p80_us + hi->p80_us) / 2, lo->reps + hi->reps };
	return m;
}

/*
 * The winner against cuBLAS, in turns: winner, cuBLAS, cuBLAS, winner, ...
 * (PAIRED_RUNS each), and each side's time the median of its runs.  A GPU
 * under minutes of GEMM heats up and slows down (cuBLAS at 8192^3 measured
 * 1.35 ms cool and 1.64 ms hot on the H100), so whatever runs later looks
 * slower; in this order a steady drift weighs on both sides alike.  A winner
 * that fails a run is left with that trial for the caller to report.
 */
#define PAIRED_RUNS 4
int ktune__measure_in_turns(struct ktune_tuner *t, struct candidate *w, double timeout, int *has_cublas,
			    struct ktune_check *cb_check, struct ktune_timing *cb_time, struct ktune_err *e)
{
	struct ktune_timing wt[PAIRED_RUNS], ct[PAIRED_RUNS];
	int nw = 0, nc = 0, rc;
	*has_cublas = 1;
	for (int turn = 0; turn < 2 * PAIRED_RUNS; turn++) {
		if (turn % 4 == 0 || turn % 4 == 3) {
			struct ktune_trial tr = w->trial;
			if ((rc = ktune__client_run(t->client, w->job, &w->cfg, KTUNE_RUN_MEASURE, timeout, &tr,
						    &wt[nw], e)))
				return rc;
			ktune__log_measure(t, w->trial.config, tr.status, &wt[nw]);
			if (strcmp(tr.status, KTUNE_TRIAL_OK)) {
				w->trial = tr;
				return KTUNE_OK;
			}
			w->trial.err_fro = tr.err_fro; /* each run checks the result first */
			w->trial.err_max = tr.err_max;
			nw++;
		} else if (*has_cublas) {
			if (ktune__client_cublas(t->client, timeout, cb_check, &ct[nc], NULL) == KTUNE_OK) {
				ktune__log_measure(t, "", KTUNE_TRIAL_OK, &ct[nc]);
				nc++;
			} else {
				ktune__log_measure(t, "", KTUNE_TRIAL_LAUNCH_ERROR, NULL);
				*has_cublas = 0;
			}
		}
	}
	w->timing = middle_timing(wt, nw);
	w->trial.time_us = w->timing.median_us;
	if (*has_cublas)
		*cb_time = middle_timing(ct, nc);
	return KTUNE_OK;
}

/* The n candidates by the full protocol, in order, then (n > 1) in reverse: each one's timing the mean of its two. */
static int measure_twice(struct ktune_tuner *t, struct candidate *c, int n, double timeout, struct ktune_err *e)
{
	int rc;
	ktune__log_stage(t, KTUNE_STAGE_FINAL, -1);
	for (int i = 0; i < n; i++) {
		if ((rc = ktune__client_run(t->client, c[i].job, &c[i].cfg, KTUNE_RUN_MEASURE, timeout, &c[i].trial,
					    &c[i].timing, e)))
			return rc;
		ktune__log_measure(t, c[i].trial.config, c[i].trial.status, &c[i].timing);
	}
	if (n < 2)
		return KTUNE_OK; /* nothing to rank */
	ktune__log_stage(t, KTUNE_STAGE_FINAL_REV, -1);
	for (int i = n - 1; i >= 0; i--) {
		struct ktune_timing runs[2] = { c[i].timing };
		if (strcmp(c[i].trial.status, KTUNE_TRIAL_OK))
			continue; /* failed its first run */
		if ((rc = ktune__client_run(t->client, c[i].job, &c[i].cfg, KTUNE_RUN_MEASURE, timeout, &c[i].trial,
					    &runs[1], e)))
			return rc;
		ktune__log_measure(t, c[i].trial.config, c[i].trial.status, &runs[1]);
		if (strcmp(c[i].trial.status, KTUNE_TRIAL_OK))
			continue;
		c[i].timing = middle_timing(runs, 2);
		c[i].trial.time_us = c[i].timing.median_us;
	}
	return KTUNE_OK;
}

/* Whether two configs differ in more than the order of the tiles (GROUP_SIZE, a kernel argument). */
int ktune__other_tile(const struct ktune_config *a, const struct ktune_config *b)
{
	return a->block_m != b->block_m || a->block_n != b->block_n || a->block_k != b->block_k ||
	       a->warps_m != b->warps_m || a->warps_n != b->warps_n || a->stages != b->stages ||
	       a->split_k != b->split_k || a->family != b->family || a->consumers != b->consumers ||
	       a->cluster_m != b->cluster_m;
}

/*
 * The runoff, once c[0] (the fastest finalist by raw time) has been measured
 * in turns with cuBLAS: the fastest finalist of another tile is measured in
 * turns too, the one with the higher ratio cuBLAS time / time goes first,
 * and it is measured in turns once more for the figures stored, so that
 * they are not the larger of two noisy ratios.  Raw times taken seconds apart
 * compare GPU states as much as configs (on the H100 the same GEMM read 15%
 * apart from one `ktune bench` run to the next, cuBLAS with it), while each
 * ratio is taken in one state (docs/gemm-experiments.md, probe 51, which also
 * says what it did not win).  Without cuBLAS there is no runoff.
 */
static int runoff(struct ktune_tuner *t, struct candidate *c, int n, double timeout, int *has_cublas,
		  struct ktune_check *cb_check, struct ktune_timing *cb_time,
		  const struct ktune_tune_options *o, struct ktune_err *e)
{
	int rival = 1, cublas = 1, rc;
	if (ktune__other_op(&c[0].trial.key))
		return KTUNE_OK; /* tiles and cuBLAS ratios: GEMM's */
	while (rival < n &&
	       (strcmp(c[rival].trial.status, KTUNE_TRIAL_OK) || !ktune__other_tile(&c[rival].cfg, &c[0].cfg)))
		rival++;
	if (!*has_cublas || strcmp(c[0].trial.status, KTUNE_TRIAL_OK)) {
		ktune__log_note(t, "no runoff: %s", !*has_cublas ? "no baseline to take ratios with" : "the fastest failed");
		return KTUNE_OK;
	}
	if (rival == n) {
		ktune__log_note(t, "no runoff: no finalist of another tile");
		return KTUNE_OK;
	}
	struct ktune_check rival_check;
	struct ktune_timing rival_cublas;
	ktune__log_stage(t, KTUNE_STAGE_RUNOFF, -1);
	if ((rc = ktune__measure_in_turns(t, &c[rival], timeout, &cublas, &rival_check, &rival_cublas, e)))
		return rc;
	if (!cublas || strcmp(c[rival].trial.status, KTUNE_TRIAL_OK)) {
		/* the rival failed a run, or cuBLAS did: c[0] stays */
		ktune__log_note(t, "runoff: %s %s: %s stays", c[rival].trial.config,
				!cublas ? "lost its baseline" : "failed a run", c[0].trial.config);
		return KTUNE_OK;
	}
	double first = cb_time->median_us / c[0].timing.median_us;
	double second = rival_cublas.median_us / c[rival].timing.median_us;
	ktune__tune_progress(o, "  runoff: %s %.3f, %s %.3f\n", c[0].trial.config, first, c[rival].trial.config,
			     second);
	ktune__log_note(t, "runoff: %s %.3f, %s %.3f (baseline time / time, in turns): %s wins", c[0].trial.config,
			first, c[rival].trial.config, second, second > first ? c[rival].trial.config : c[0].trial.config);
	if (second > first) {
		struct candidate w = c[rival];
		memmove(&c[1], &c[0], (size_t)rival * sizeof(*c));
		c[0] = w;
	}
	ktune__log_stage(t, KTUNE_STAGE_AGAIN, -1);
	return ktune__measure_in_turns(t, &c[0], timeout, has_cublas, cb_check, cb_time, e);
}

/*
 * The measure step on an undisturbed GPU: the first `finalists` of c by the
 * full protocol, twice (in order, then in reverse order), sorted by the
 * mean of each one's two runs; then the fastest (c[0]) and cuBLAS in turns,
 * and the runoff with the fastest of another tile (above).
 * One run each, taken seconds apart while the clocks drift, did not rank
 * configs a percent or two apart (on the H100 at 4096x28672x4096 the same
 * config reads 3-5% apart from one run to the next, and the one measured
 * first had the cooler GPU); in the two orders a steady drift weighs on
 * every finalist alike.  A finalist that fails a run keeps that trial.
 * While NVML says another process or a clock brake disturbed it, all of it
 * again, at most MEASURE_ATTEMPTS times; then `disturbed` says why (else "").
 */
int ktune__measure_finalists(struct ktune_tuner *t, struct candidate *c, int finalists, double timeout,
			     const struct ktune_tune_options *o, int *has_cublas, struct ktune_check *cb_check,
			     struct ktune_timing *cb_time, char *disturbed, size_t disturbed_size,
			     struct ktune_err *e)
{
	int rc;
	disturbed[0] = 0;
	for (int attempt = 1;; attempt++) {
		struct ktune_gpu_sample before, after;
		int sampled = hygiene_sample(t, &before);
		ktune__log_stage(t, KTUNE_STAGE_FINAL, attempt - 1);
		if ((rc = measure_twice(t, c, finalists, timeout, e)))
			return rc;
		qsort(c, (size_t)finalists, sizeof(*c), ktune__candidate_by_time);
		ktune__log_stage(t, KTUNE_STAGE_TURNS, -1);
		if (!strcmp(c[0].trial.status, KTUNE_TRIAL_OK) &&
		    (rc = ktune__measure_in_turns(t, &c[0], timeout, has_cublas, cb_check, cb_time, e)))
			return rc;
		if ((rc = runoff(t, c, finalists, timeout, has_cublas, cb_check, cb_time, o, e)))
			return rc;
		if (!sampled || !hygiene_sample(t, &after))
			return KTUNE_OK;
		struct ktune_nvml_verdict v;
		if (!hygiene_verdict(t, &before, &after, &v))
			return KTUNE_OK;
		if (attempt == MEASURE_ATTEMPTS) {
			snprintf(disturbed, disturbed_size, "%s", v.reason);
			ktune__tune_progress(o, "  measured %d times, disturbed each time: %s\n", attempt,
					     v.reason);
			ktune__log_note(t, "measured %d times, disturbed each time: %s", attempt, v.reason);
			return KTUNE_OK;
		}
		ktune__tune_progress(o, "  measurement disturbed (%s): measuring again\n", v.reason);
		ktune__log_note(t, "round %d disturbed (%s): measured again", attempt - 1, v.reason);
		if (v.throttle)
			sleep(2); /* let the clocks recover */
	}
}
