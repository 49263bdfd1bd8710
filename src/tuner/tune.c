/*
 * tune.c - tuning one key: candidates, compile, screen, measure, store.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/templates.h"
#include "tuner/candidates.h"
#include "tuner/client.h"
#include "tuner/nvml.h"
#include "tuner/tuner.h"

struct ktune_tuner {
	struct ktune_db *db;
	struct ktune_client *client;
	char driver[32]; /* "13.0" */
	struct ktune_nvml *nvml; /* NULL: NVML absent, measurements unchecked */
	int pids_match;          /* NVML lists our worker under its own pid */
};

/*
 * What the tune loop asks of a key's op.  GEMM's families, config texts and
 * cost model predate the op registry (ops/gemm.h); every other op answers
 * through its struct ktune_op.
 */
static const struct ktune_op *other_op(const struct ktune_key *key)
{
	const struct ktune_op *op = ktune__op_of(key);
	return op && !ktune__op_is_gemm(op) ? op : NULL;
}

static const char *family_name(const struct ktune_key *key, int family)
{
	const struct ktune_op *op = other_op(key);
	return op ? op->families[family].name : ktune__gemm_family_name(family);
}

static const char *family_hash(const struct ktune_key *key, int family)
{
	const struct ktune_op *op = other_op(key);
	return op ? ktune__op_family_hash(op, family) : ktune__gemm_family_hash(family);
}

static int nfamilies(const struct ktune_key *key)
{
	const struct ktune_op *op = other_op(key);
	return op ? op->nfamilies : KTUNE_GEMM_NFAMILIES;
}

static void config_text(const struct ktune_key *key, const struct ktune_config *c, char *buf, size_t len)
{
	const struct ktune_op *op = other_op(key);
	if (op)
		ktune__op_config_format(op, c, buf, len);
	else
		ktune__gemm_config_format(c, buf, len);
}

static int same_kernel(const struct ktune_key *key, const struct ktune_config *a, const struct ktune_config *b)
{
	const struct ktune_op *op = other_op(key);
	return op ? op->same_kernel(a, b) : ktune__gemm_same_kernel(a, b);
}

static double key_flops(const struct ktune_key *key)
{
	const struct ktune_op *op = other_op(key);
	return op ? op->flops(key) : ktune__gemm_flops(key);
}

static double key_bytes(const struct ktune_key *key)
{
	const struct ktune_op *op = other_op(key);
	return op ? op->bytes(key) : ktune__gemm_bytes(key);
}

/* Full measurements repeated while NVML says the GPU was disturbed. */
#define MEASURE_ATTEMPTS 3

/*
 * Measurement hygiene through NVML: another process on the GPU or clocks
 * pulled down by heat or power brakes make a measurement disturbed.
 */
static void hygiene_open(struct ktune_tuner *t)
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

int ktune__tuner_open(const char *db_path, int device, const char *worker_exe,
		      struct ktune_tuner **out, struct ktune_err *e)
{
	struct ktune_tuner *t = calloc(1, sizeof(*t));
	char path[4096];
	int rc;

	*out = NULL;
	if (!t)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	if (db_path)
		snprintf(path, sizeof(path), "%s", db_path);
	else
		ktune__default_db_path(path, sizeof(path));
	if ((rc = ktune__db_open(path, 1, &t->db, e)))
		goto fail;
	if ((rc = ktune__client_open(worker_exe, device, NULL, &t->client, e)))
		goto fail;
	const struct ktune_hello *h = ktune__client_hello(t->client);
	snprintf(t->driver, sizeof(t->driver), "%d.%d", h->driver_version / 1000,
		 h->driver_version % 1000 / 10);
	hygiene_open(t);
	*out = t;
	return KTUNE_OK;
fail:
	ktune__tuner_close(t);
	return rc;
}

void ktune__tuner_close(struct ktune_tuner *t)
{
	if (!t)
		return;
	ktune__client_close(t->client);
	ktune__nvml_close(t->nvml);
	ktune__db_close(t->db);
	free(t);
}

const struct ktune_hello *ktune__tuner_device(struct ktune_tuner *t)
{
	return ktune__client_hello(t->client);
}

struct ktune_db *ktune__tuner_db(struct ktune_tuner *t)
{
	return t->db;
}

int ktune__tuner_worker_starts(struct ktune_tuner *t)
{
	return ktune__client_starts(t->client);
}

/*
 * How long one candidate may run before it counts as hung: 1000 times the
 * key's roofline time (bytes / 3 TB/s or FLOPs / 800 TFLOP/s), at least 2 s
 * (a launch, a check and a few timed runs of anything reasonable) and at most
 * 60 s; --timeout overrides it.
 */
double ktune__run_timeout(const struct ktune_key *key, double override_s)
{
	if (override_s > 0)
		return override_s;
	double floor_s = key_flops(key) / 800e12, mem_s = key_bytes(key) / 3e12;
	double t = 1000 * (floor_s > mem_s ? floor_s : mem_s);
	return t < 2 ? 2 : t > 60 ? 60 : t;
}

/* One candidate's state through screening and measurement. */
struct candidate {
	struct ktune_config cfg;
	int job;      /* its compile job */
	struct ktune_trial trial;
	struct ktune_timing timing;
};

static int by_time(const void *a, const void *b)
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
static int measure_in_turns(struct ktune_tuner *t, struct candidate *w, double timeout, int *has_cublas,
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
			if (strcmp(tr.status, KTUNE_TRIAL_OK)) {
				w->trial = tr;
				return KTUNE_OK;
			}
			w->trial.err_fro = tr.err_fro; /* each run checks the result first */
			w->trial.err_max = tr.err_max;
			nw++;
		} else if (*has_cublas) {
			if (ktune__client_cublas(t->client, timeout, cb_check, &ct[nc], NULL) == KTUNE_OK)
				nc++;
			else
				*has_cublas = 0;
		}
	}
	w->timing = middle_timing(wt, nw);
	w->trial.time_us = w->timing.median_us;
	if (*has_cublas)
		*cb_time = middle_timing(ct, nc);
	return KTUNE_OK;
}

static void progress(const struct ktune_tune_options *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void progress(const struct ktune_tune_options *o, const char *fmt, ...)
{
	char line[640];
	va_list ap;
	if (!o->progress)
		return;
	va_start(ap, fmt);
	if (vsnprintf(line, sizeof(line), fmt, ap) >= (int)sizeof(line))
		line[sizeof(line) - 2] = '\n'; /* cut short: still a whole line */
	va_end(ap);
	if (!o->progress_prefix) {
		fputs(line, o->progress);
	} else {
		/* whole lines only, each in one call, so that the GPUs' lines do not run into each other */
		const char *text = line + (line[0] == '\r');
		size_t len = strlen(text);
		if (len <= 1 || text[len - 1] != '\n')
			return;
		fprintf(o->progress, "%s%s", o->progress_prefix, text);
	}
	fflush(o->progress);
}

/* The n candidates by the full protocol, in order, then (n > 1) in reverse: each one's timing the mean of its two. */
static int measure_twice(struct ktune_tuner *t, struct candidate *c, int n, double timeout, struct ktune_err *e)
{
	int rc;
	for (int i = 0; i < n; i++)
		if ((rc = ktune__client_run(t->client, c[i].job, &c[i].cfg, KTUNE_RUN_MEASURE, timeout, &c[i].trial,
					    &c[i].timing, e)))
			return rc;
	if (n < 2)
		return KTUNE_OK; /* nothing to rank */
	for (int i = n - 1; i >= 0; i--) {
		struct ktune_timing runs[2] = { c[i].timing };
		if (strcmp(c[i].trial.status, KTUNE_TRIAL_OK))
			continue; /* failed its first run */
		if ((rc = ktune__client_run(t->client, c[i].job, &c[i].cfg, KTUNE_RUN_MEASURE, timeout, &c[i].trial,
					    &runs[1], e)))
			return rc;
		if (strcmp(c[i].trial.status, KTUNE_TRIAL_OK))
			continue;
		c[i].timing = middle_timing(runs, 2);
		c[i].trial.time_us = c[i].timing.median_us;
	}
	return KTUNE_OK;
}

/* Whether two configs differ in more than the order of the tiles (GROUP_SIZE, a kernel argument). */
static int other_tile(const struct ktune_config *a, const struct ktune_config *b)
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
	if (other_op(&c[0].trial.key))
		return KTUNE_OK; /* tiles and cuBLAS ratios: GEMM's */
	while (rival < n &&
	       (strcmp(c[rival].trial.status, KTUNE_TRIAL_OK) || !other_tile(&c[rival].cfg, &c[0].cfg)))
		rival++;
	if (!*has_cublas || rival == n || strcmp(c[0].trial.status, KTUNE_TRIAL_OK))
		return KTUNE_OK;
	struct ktune_check rival_check;
	struct ktune_timing rival_cublas;
	if ((rc = measure_in_turns(t, &c[rival], timeout, &cublas, &rival_check, &rival_cublas, e)))
		return rc;
	if (!cublas || strcmp(c[rival].trial.status, KTUNE_TRIAL_OK))
		return KTUNE_OK; /* the rival failed a run, or cuBLAS did: c[0] stays */
	double first = cb_time->median_us / c[0].timing.median_us;
	double second = rival_cublas.median_us / c[rival].timing.median_us;
	progress(o, "  runoff: %s %.3f, %s %.3f\n", c[0].trial.config, first, c[rival].trial.config, second);
	if (second > first) {
		struct candidate w = c[rival];
		memmove(&c[1], &c[0], (size_t)rival * sizeof(*c));
		c[0] = w;
	}
	return measure_in_turns(t, &c[0], timeout, has_cublas, cb_check, cb_time, e);
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
static int measure_finalists(struct ktune_tuner *t, struct candidate *c, int finalists, double timeout,
			     const struct ktune_tune_options *o, int *has_cublas, struct ktune_check *cb_check,
			     struct ktune_timing *cb_time, char *disturbed, size_t disturbed_size,
			     struct ktune_err *e)
{
	int rc;
	disturbed[0] = 0;
	for (int attempt = 1;; attempt++) {
		struct ktune_gpu_sample before, after;
		int sampled = hygiene_sample(t, &before);
		if ((rc = measure_twice(t, c, finalists, timeout, e)))
			return rc;
		qsort(c, (size_t)finalists, sizeof(*c), by_time);
		if (!strcmp(c[0].trial.status, KTUNE_TRIAL_OK) &&
		    (rc = measure_in_turns(t, &c[0], timeout, has_cublas, cb_check, cb_time, e)))
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
			progress(o, "  measured %d times, disturbed each time: %s\n", attempt, v.reason);
			return KTUNE_OK;
		}
		progress(o, "  measurement disturbed (%s): measuring again\n", v.reason);
		if (v.throttle)
			sleep(2); /* let the clocks recover */
	}
}

/* Compiles each distinct kernel of the candidates once; c[i].job points at its job. */
static int compile_candidates(struct ktune_tuner *t, const struct ktune_key *key,
			      struct candidate *c, int n, const struct ktune_tune_options *o,
			      struct ktune_compile_job **jobs_out, int *njobs_out, struct ktune_err *e)
{
	struct ktune_compile_job *jobs = calloc((size_t)n + 1, sizeof(*jobs));
	int njobs = 0;
	if (!jobs)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		int j;
		for (j = 0; j < njobs; j++)
			if (same_kernel(key, &jobs[j].cfg, &c[i].cfg))
				break;
		if (j == njobs) {
			jobs[njobs].key = *key;
			jobs[njobs].cfg = c[i].cfg;
			njobs++;
		}
		c[i].job = j;
	}
	double t0 = ktune__now();
	int rc = ktune__client_compile(t->client, jobs, njobs, o->jobs, e);
	if (rc) {
		ktune__compile_jobs_free(jobs, njobs);
		free(jobs);
		return rc;
	}
	int failed = 0;
	for (int j = 0; j < njobs; j++)
		failed += jobs[j].status != KTUNE_OK;
	progress(o, "  compiled %d kernels (%d failed) in %.1f s\n", njobs, failed,
		 ktune__now() - t0);
	*jobs_out = jobs;
	*njobs_out = njobs;
	return KTUNE_OK;
}

/* The configs that failed before for this key, as text (the negative cache). */
struct known_bad {
	char (*configs)[256];
	int n, cap;
};

static int note_bad(const char *config, const char *status, void *arg)
{
	struct known_bad *kb = arg;
	(void)status;
	if (kb->n == kb->cap) {
		int cap = kb->cap ? 2 * kb->cap : 16;
		char(*grown)[256] = realloc(kb->configs, (size_t)cap * sizeof(*grown));
		if (!grown)
			return 1;
		kb->configs = grown;
		kb->cap = cap;
	}
	snprintf(kb->configs[kb->n++], sizeof(kb->configs[0]), "%s", config);
	return 0;
}

/* Drops the candidates that failed before; returns how many are left. */
static int drop_known_bad(struct ktune_tuner *t, const struct ktune_key *key,
			  struct ktune_config *cfgs, int n, int *dropped, struct ktune_err *e)
{
	struct known_bad kb = { 0 };
	char driver[32], text[256];
	int kept = 0;

	*dropped = 0;
	snprintf(driver, sizeof(driver), "%s", t->driver);
	/*
	 * Each family's failures count while its own source is unchanged; the
	 * texts of the two families differ (FAMILY=), so one list serves both.
	 */
	for (int f = 0; f < nfamilies(key); f++) {
		int rc = ktune__db_failed_configs(t->db, &ktune__tuner_device(t)->id, key,
						  family_hash(key, f), ktune__nvrtc_version(),
						  driver, note_bad, &kb, e);
		if (rc) {
			free(kb.configs);
			return rc > 0 ? ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory") : rc;
		}
	}
	for (int i = 0; i < n; i++) {
		int bad = 0;
		config_text(key, &cfgs[i], text, sizeof(text));
		for (int j = 0; j < kb.n && !bad; j++)
			bad = !strcmp(text, kb.configs[j]);
		if (bad)
			(*dropped)++;
		else
			cfgs[kept++] = cfgs[i];
	}
	free(kb.configs);
	return kept;
}

/* Provenance of a result whose winner is of `family`. */
static void fill_provenance(struct ktune_tuner *t, int family, struct ktune_result *res)
{
	snprintf(res->family, sizeof(res->family), "%s", family_name(&res->key, family));
	snprintf(res->template_hash, sizeof(res->template_hash), "%s",
		 family_hash(&res->key, family));
	snprintf(res->nvrtc_version, sizeof(res->nvrtc_version), "%s", ktune__nvrtc_version());
	snprintf(res->driver_version, sizeof(res->driver_version), "%s", t->driver);
	snprintf(res->ktune_version, sizeof(res->ktune_version), "%s", ktune_version());
	snprintf(res->protocol, sizeof(res->protocol), "%s", KTUNE_PROTOCOL);
	res->device = ktune__tuner_device(t)->id;
}

/* A result's winner: c's config, its measured times and check, and their provenance (res->key set). */
static void fill_winner(struct ktune_tuner *t, const struct candidate *c, struct ktune_result *res)
{
	fill_provenance(t, c->cfg.family, res);
	snprintf(res->config, sizeof(res->config), "%s", c->trial.config);
	res->time_us = c->timing.median_us;
	res->p20_us = c->timing.p20_us;
	res->p80_us = c->timing.p80_us;
	res->tflops = key_flops(&res->key) / (res->time_us * 1e-6) / 1e12;
	res->err_fro = c->trial.err_fro;
	res->err_max = c->trial.err_max;
}

int ktune__tune_key(struct ktune_tuner *t, const struct ktune_key *key_in,
		    const struct ktune_tune_options *o, struct ktune_tune_report *r,
		    struct ktune_err *e)
{
	struct ktune_config *cfgs = NULL;
	struct candidate *c = NULL;
	struct ktune_compile_job *jobs = NULL;
	struct ktune_trial *trials = NULL;
	struct ktune_problem prob = { .key = *key_in, .alpha = 1, .beta = 0, .seed = o->seed }, set;
	const struct ktune_hello *dev = ktune__tuner_device(t);
	int n = 0, njobs = 0, rc, starts = ktune__client_starts(t->client);
	double t0 = ktune__now();
	char keytext[128];

	memset(r, 0, sizeof(*r));
	ktune__client_set_compile_timeout(t->client, o->compile_timeout_s);
	/* The tuner's buffers are packed and aligned, so the key must be the aligned class. */
	if ((rc = ktune__client_problem(t->client, &prob, &set, e)))
		goto out;
	const struct ktune_key *key = &set.key;
	double timeout = ktune__run_timeout(key, o->timeout_s);
	ktune__key_format(key, keytext, sizeof(keytext));

	if (other_op(key))
		rc = ktune__op_candidates(other_op(key), key, dev->id.sm_count, o->budget, o->seed, &cfgs, &n,
					  &r->pruned, e);
	else
		rc = ktune__gemm_candidates(key, dev->id.arch, dev->id.sm_count, dev->smem_optin, o->budget,
					    o->seed, &cfgs, &n, &r->pruned, e);
	if (rc)
		goto out;
	if (!o->retry_failed) {
		int kept = drop_known_bad(t, key, cfgs, n, &r->known_bad, e);
		if (kept < 0) {
			rc = kept;
			goto out;
		}
		n = kept;
		if (r->known_bad)
			progress(o, "  skipped %d configs that failed before (--retry-failed tries them)\n",
				 r->known_bad);
	}
	if (n == 0) {
		rc = ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no candidate for %s survives pruning%s",
				 keytext, r->known_bad ? " and the failures of earlier sweeps" : "");
		goto out;
	}
	c = calloc((size_t)n, sizeof(*c));
	trials = calloc((size_t)n, sizeof(*trials));
	if (!c || !trials) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++)
		c[i].cfg = cfgs[i];
	if ((rc = compile_candidates(t, key, c, n, o, &jobs, &njobs, e)))
		goto out;

	/* Screen: verify every candidate, time it briefly. */
	for (int i = 0; i < n; i++) {
		struct ktune_trial *tr = &c[i].trial;
		struct ktune_compile_job *job = &jobs[c[i].job];
		tr->key = *key;
		snprintf(tr->family, sizeof(tr->family), "%s", family_name(key, c[i].cfg.family));
		snprintf(tr->template_hash, sizeof(tr->template_hash), "%s",
			 family_hash(key, c[i].cfg.family));
		config_text(key, &c[i].cfg, tr->config, sizeof(tr->config));
		snprintf(tr->nvrtc_version, sizeof(tr->nvrtc_version), "%s", ktune__nvrtc_version());
		snprintf(tr->driver_version, sizeof(tr->driver_version), "%s", t->driver);
		if (job->status) {
			snprintf(tr->status, sizeof(tr->status), "%s",
				 job->timed_out ? KTUNE_TRIAL_TIMEOUT : KTUNE_TRIAL_COMPILE_ERROR);
			snprintf(tr->message, sizeof(tr->message), "%.500s", job->log ? job->log : "");
		} else if (job->cubin.res.spill_stores || job->cubin.res.spill_loads) {
			snprintf(tr->status, sizeof(tr->status), "%s", KTUNE_TRIAL_PRUNED);
			snprintf(tr->message, sizeof(tr->message), "spills %d bytes of registers",
				 job->cubin.res.spill_stores + job->cubin.res.spill_loads);
		} else if ((rc = ktune__client_run(t->client, c[i].job, &c[i].cfg, KTUNE_RUN_SCREEN,
						   timeout, tr, &c[i].timing, e))) {
			goto out;
		}
		if (!strcmp(tr->status, KTUNE_TRIAL_CRASHED) || !strcmp(tr->status, KTUNE_TRIAL_TIMEOUT))
			progress(o, "\r  candidate %d/%d %s: %s: %s\n", i + 1, n, tr->config, tr->status,
				 tr->message);
		if (o->progress && (i % 16 == 15 || i == n - 1)) {
			double best = 0;
			for (int j = 0; j <= i; j++)
				if (!strcmp(c[j].trial.status, KTUNE_TRIAL_OK) &&
				    (best == 0 || c[j].timing.median_us < best))
					best = c[j].timing.median_us;
			progress(o, "\r  candidate %d/%d, best so far %.1f us", i + 1, n, best);
		}
	}
	progress(o, "\n");
	for (int i = 0; i < n; i++) {
		const char *s = c[i].trial.status;
		if (!strcmp(s, KTUNE_TRIAL_OK))
			r->ok++;
		else if (!strcmp(s, KTUNE_TRIAL_WRONG))
			r->wrong++;
		else if (!strcmp(s, KTUNE_TRIAL_PRUNED))
			r->pruned++;
		else
			r->failed++;
	}
	if (r->ok == 0) {
		/* no result, but the failures are remembered so that the next sweep skips them */
		for (int i = 0; i < n; i++)
			trials[i] = c[i].trial;
		struct ktune_err te;
		if (ktune__db_put_trials(t->db, &dev->id, trials, n, &te))
			progress(o, "  cannot store the trials: %s\n", te.msg);
		rc = ktune__fail(e, KTUNE_ERR_VERIFY, "%s: none of %d candidates computed the right result "
				 "(%d wrong, %d failed)", keytext, n, r->wrong, r->failed);
		goto out;
	}

	/* Measure: the fastest few by the full protocol, then the fastest and cuBLAS in turns. */
	qsort(c, (size_t)n, sizeof(*c), by_time);
	int finalists = o->finalists > 0 ? o->finalists : 8;
	if (finalists > r->ok)
		finalists = r->ok;
	struct ktune_check cb_check;
	struct ktune_timing cb_time;
	if ((rc = measure_finalists(t, c, finalists, timeout, o, &r->has_cublas, &cb_check, &cb_time,
				    r->disturbed, sizeof(r->disturbed), e)))
		goto out;
	if (strcmp(c[0].trial.status, KTUNE_TRIAL_OK)) {
		rc = ktune__fail(e, KTUNE_ERR_VERIFY, "%s: measured again, the fastest finalist failed: %s",
				 keytext, c[0].trial.message);
		goto out;
	}

	struct ktune_result *res = &r->result;
	res->key = *key;
	fill_winner(t, &c[0], res);
	res->candidates = n;

	if (r->has_cublas) {
		res->cublas_us = cb_time.median_us;
		r->cublas_err_fro = cb_check.err_fro;
	}
	res->tune_s = ktune__now() - t0;
	snprintf(res->measure_note, sizeof(res->measure_note), "%s%.115s", r->disturbed[0] ? "disturbed: " : "",
		 r->disturbed);
	for (int i = 0; i < n; i++)
		trials[i] = c[i].trial;
	rc = ktune__db_put_result(t->db, res, trials, n, e);
	r->worker_restarts = ktune__client_starts(t->client) - starts;
out:
	if (jobs)
		ktune__compile_jobs_free(jobs, njobs);
	free(jobs);
	free(trials);
	free(c);
	free(cfgs);
	return rc;
}

/* A stored result's config, and fresh random inputs of its key (and alignment class) set in the worker. */
static int stored_problem(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			  struct ktune_config *cfg, struct ktune_problem *set, struct ktune_err *e)
{
	struct ktune_problem prob = { .key = r->key, .alpha = 1, .beta = 0, .seed = seed };
	const struct ktune_op *op = other_op(&r->key);
	int rc;
	if ((rc = op ? ktune__op_config_parse(op, r->family, r->config, cfg, e)
		     : ktune__gemm_config_parse(r->config, cfg, e)))
		return rc;
	if (!r->key.aligned)
		prob.offset = 1; /* reproduce the unaligned class */
	return ktune__client_problem(t->client, &prob, set, e);
}

int ktune__verify_result(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			 struct ktune_check *check, struct ktune_err *e)
{
	struct ktune_config cfg;
	struct ktune_trial trial = { 0 };
	struct ktune_timing timing;
	struct ktune_problem set;
	int rc;

	memset(check, 0, sizeof(*check));
	if ((rc = stored_problem(t, r, seed, &cfg, &set, e)))
		return rc;
	if ((rc = ktune__client_run(t->client, -1, &cfg, KTUNE_RUN_VERIFY,
				    ktune__run_timeout(&set.key, 0), &trial, &timing, e)))
		return rc;
	check->err_fro = trial.err_fro;
	check->err_max = trial.err_max;
	check->pass = !strcmp(trial.status, KTUNE_TRIAL_OK);
	if (!check->pass)
		return ktune__fail(e, KTUNE_OK, "%s: %s", trial.status, trial.message);
	return KTUNE_OK;
}

int ktune__bench_result(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			struct ktune_bench_report *out, struct ktune_err *e)
{
	static const struct ktune_tune_options quiet;
	struct candidate c = { 0 }; /* its job: 0, the only one compiled */
	struct ktune_compile_job job = { 0 };
	struct ktune_problem set;
	struct ktune_check cb_check;
	struct ktune_timing cb_time;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = stored_problem(t, r, seed, &c.cfg, &set, e)))
		return rc;
	job.key = set.key;
	job.cfg = c.cfg;
	if ((rc = ktune__client_compile(t->client, &job, 1, 1, e)))
		goto out;
	if (job.status) {
		snprintf(out->status, sizeof(out->status), "%s",
			 job.timed_out ? KTUNE_TRIAL_TIMEOUT : KTUNE_TRIAL_COMPILE_ERROR);
		snprintf(out->message, sizeof(out->message), "%.500s", job.log ? job.log : "");
		goto out;
	}
	if ((rc = measure_finalists(t, &c, 1, ktune__run_timeout(&set.key, 0), &quiet, &out->has_cublas,
				    &cb_check, &cb_time, out->disturbed, sizeof(out->disturbed), e)))
		goto out;
	snprintf(out->status, sizeof(out->status), "%s", c.trial.status);
	snprintf(out->message, sizeof(out->message), "%.500s", c.trial.message);
	if (!strcmp(c.trial.status, KTUNE_TRIAL_OK)) {
		out->time_us = c.timing.median_us;
		out->cublas_us = out->has_cublas ? cb_time.median_us : 0;
	}
out:
	ktune__compile_jobs_free(&job, 1);
	return rc;
}

/* Keys a group needs before its pick is weighed, and the rounds each key is measured in. */
#define GROUP_MIN_KEYS 4
#define GROUP_ROUNDS 2

/*
 * How much higher a key's own ratio must be than the group config's, in
 * every round, for the key to keep its own pick.  Two ratios at a long key
 * scatter by 2-5%, so winning both rounds by less is as likely luck as a
 * better tile: in one sweep, 256x128 kept 4096x28672x4096 bf16 nt
 * that way and read 0.93-0.98 fresh (docs/gemm-experiments.md, probe 57).
 */
#define GROUP_KEEP_MARGIN 1.03

/* One key of a group: its own pick and the group's candidate, compiled for it. */
struct group_member {
	struct candidate own, cand;
	struct ktune_compile_job jobs[2];
	double own_ratio[GROUP_ROUNDS], cand_ratio[GROUP_ROUNDS];
	int valid; /* the candidate differs from its own pick, fits the key, compiled and ran right */
};

/*
 * Whether a and b differ in more than GROUP_SIZE and SPLIT_K: the group
 * pick weighs tiles, and a key keeps its own split, which answers its shape
 * (how full its last wave is, how long K is) and not the GPU's regime.
 */
static int other_group_tile(const struct ktune_config *a, const struct ktune_config *b)
{
	struct ktune_config x = *a;
	x.split_k = b->split_k;
	return other_tile(&x, b);
}

/*
 * The config most of the results won with (GROUP_SIZE and SPLIT_K aside),
 * if it won at least two; its index in r (the first of its wins), else -1.
 */
static int most_won(const struct ktune_result *r, int n)
{
	struct ktune_config *cfg = calloc((size_t)n, sizeof(*cfg));
	int best = -1, best_count = 1;
	if (!cfg)
		return -1;
	for (int i = 0; i < n; i++)
		if (ktune__gemm_config_parse(r[i].config, &cfg[i], NULL))
			cfg[i].family = -1; /* matches nothing */
	for (int i = 0; i < n; i++) {
		int count = 0;
		for (int j = 0; j < n && cfg[i].family >= 0; j++)
			count += !other_group_tile(&cfg[i], &cfg[j]);
		if (count > best_count) {
			best = i;
			best_count = count;
		}
	}
	free(cfg);
	return best;
}

/*
 * Sets key i's inputs and compiles its own pick and the candidate, the
 * group's tile with the key's own SPLIT_K; m->valid says whether to weigh
 * it.  A key whose split the group's tile cannot take (clusters do not
 * split; another tile count leaves another last wave) keeps its own pick:
 * at 4096x28672x4096 the group's unsplit tile, given to two of the four keys
 * that split their short last wave, read 0.980 and 0.996 fresh (probe 57).
 */
static int group_prepare(struct ktune_tuner *t, const struct ktune_result *r, const struct ktune_config *cand,
			 const struct ktune_tune_options *o, struct group_member *m, struct ktune_err *e)
{
	const struct ktune_hello *dev = ktune__tuner_device(t);
	struct ktune_problem set;
	char why[160];
	int rc;

	m->valid = 0;
	if ((rc = stored_problem(t, r, o->seed, &m->own.cfg, &set, e)))
		return rc;
	if (!other_group_tile(&m->own.cfg, cand))
		return KTUNE_OK; /* its own pick already, GROUP_SIZE and SPLIT_K aside */
	m->cand.cfg = *cand;
	m->cand.cfg.split_k = m->own.cfg.split_k;
	if (ktune__gemm_prune(&set.key, &m->cand.cfg, dev->id.sm_count, dev->smem_optin, why, sizeof(why)))
		return KTUNE_OK;
	m->own.job = 0;
	m->cand.job = 1;
	m->jobs[0] = (struct ktune_compile_job){ .key = set.key, .cfg = m->own.cfg };
	m->jobs[1] = (struct ktune_compile_job){ .key = set.key, .cfg = m->cand.cfg };
	if ((rc = ktune__client_compile(t->client, m->jobs, 2, o->jobs, e)))
		return rc;
	if (m->jobs[0].status || m->jobs[1].status)
		return KTUNE_OK;
	for (int i = 0; i < 2; i++) {
		struct candidate *c = i ? &m->cand : &m->own;
		ktune__gemm_config_format(&c->cfg, c->trial.config, sizeof(c->trial.config));
		snprintf(c->trial.status, sizeof(c->trial.status), "%s", KTUNE_TRIAL_OK);
	}
	m->valid = 1;
	return KTUNE_OK;
}

/* Key m's own pick and the candidate, each in turns with cuBLAS, GROUP_ROUNDS times in ABBA order. */
static int group_measure(struct ktune_tuner *t, const struct ktune_result *r, struct group_member *m,
			 struct ktune_err *e)
{
	double timeout = ktune__run_timeout(&r->key, 0);
	struct ktune_check cb_check;
	struct ktune_timing cb_time;
	int has_cublas = 1, rc;
	for (int round = 0; round < GROUP_ROUNDS; round++)
		for (int j = 0; j < 2; j++) {
			int cand = (j + round) % 2 == 1;
			struct candidate *c = cand ? &m->cand : &m->own;
			if ((rc = measure_in_turns(t, c, timeout, &has_cublas, &cb_check, &cb_time, e)))
				return rc;
			if (!has_cublas || strcmp(c->trial.status, KTUNE_TRIAL_OK)) {
				m->valid = 0;
				return KTUNE_OK;
			}
			(cand ? m->cand_ratio : m->own_ratio)[round] = cb_time.median_us / c->timing.median_us;
		}
	return KTUNE_OK;
}

int ktune__group_pick(struct ktune_tuner *t, struct ktune_result *r, int n, const struct ktune_tune_options *o,
		      int *switched, struct ktune_err *e)
{
	struct group_member *m = NULL;
	struct ktune_config cand;
	double own_log = 0, cand_log = 0, t0 = ktune__now();
	int c = most_won(r, n), weighed = 0, rc = KTUNE_OK;

	*switched = 0;
	if (n < GROUP_MIN_KEYS || c < 0)
		return KTUNE_OK;
	if ((rc = ktune__gemm_config_parse(r[c].config, &cand, e)))
		return rc;
	if (!(m = calloc((size_t)n, sizeof(*m))))
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		if ((rc = group_prepare(t, &r[i], &cand, o, &m[i], e)) ||
		    (m[i].valid && (rc = group_measure(t, &r[i], &m[i], e))))
			goto out;
		for (int k = 0; m[i].valid && k < GROUP_ROUNDS; k++) {
			own_log += log(m[i].own_ratio[k]);
			cand_log += log(m[i].cand_ratio[k]);
		}
		weighed += m[i].valid;
	}
	if (!weighed)
		goto out;
	double own = exp(own_log / (weighed * GROUP_ROUNDS)), mine = exp(cand_log / (weighed * GROUP_ROUNDS));
	progress(o, "  %s at %d other keys %.3f, their own picks %.3f\n", r[c].config, weighed, mine, own);
	if (mine <= own)
		goto out;
	for (int i = 0; i < n; i++) {
		struct ktune_check cb_check;
		struct ktune_timing cb_time;
		int has_cublas = 1, beaten = 1;
		if (!m[i].valid)
			continue;
		for (int k = 0; k < GROUP_ROUNDS; k++)
			beaten &= m[i].own_ratio[k] > m[i].cand_ratio[k] * GROUP_KEEP_MARGIN;
		if (beaten)
			continue; /* its own pick won every round here */
		/* measured once more for the figures stored, not the rounds that made the choice: its inputs
		 * and kernels again, the worker holding another key's */
		ktune__compile_jobs_free(m[i].jobs, 2);
		if ((rc = group_prepare(t, &r[i], &cand, o, &m[i], e)))
			goto out;
		if (!m[i].valid)
			continue;
		if ((rc = measure_in_turns(t, &m[i].cand, ktune__run_timeout(&r[i].key, 0), &has_cublas, &cb_check,
					   &cb_time, e)))
			goto out;
		if (!has_cublas || strcmp(m[i].cand.trial.status, KTUNE_TRIAL_OK))
			continue;
		struct ktune_result res = r[i];
		fill_winner(t, &m[i].cand, &res);
		res.cublas_us = cb_time.median_us;
		res.tune_s += (ktune__now() - t0) / weighed;
		res.measure_note[0] = 0;
		if ((rc = ktune__db_put_result(t->db, &res, NULL, 0, e)))
			goto out;
		r[i] = res;
		(*switched)++;
	}
out:
	for (int i = 0; m && i < n; i++)
		ktune__compile_jobs_free(m[i].jobs, 2);
	free(m);
	return rc;
}
