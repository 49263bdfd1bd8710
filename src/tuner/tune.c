/*
 * tune.c - the tuner and tuning one key: opening the tuner (database,
 * worker, NVML), the tune loop (candidates, negative cache, compile,
 * screen, then measure.c's protocol, store), and a stored result verified
 * or timed again (ktune verify, ktune bench).  The group pick: group.c.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "templates.h"
#include "tuner/candidates.h"
#include "tuner/client.h"
#include "tuner/nvml.h"
#include "tuner/tune-internal.h"

/* What the tune loop asks of a key's op (GEMM's answers predate the op registry: ktune__other_op). */

static const char *family_name(const struct ktune_key *key, int family)
{
	const struct ktune_op *op = ktune__other_op(key);
	return op ? op->families[family].name : ktune__gemm_family_name(family);
}

static const char *family_hash(const struct ktune_key *key, int family)
{
	const struct ktune_op *op = ktune__other_op(key);
	return op ? ktune__op_family_hash(op, family) : ktune__gemm_family_hash(family);
}

static int nfamilies(const struct ktune_key *key)
{
	const struct ktune_op *op = ktune__other_op(key);
	return op ? op->nfamilies : KTUNE_GEMM_NFAMILIES;
}

static void config_text(const struct ktune_key *key, const struct ktune_config *c, char *buf, size_t len)
{
	const struct ktune_op *op = ktune__other_op(key);
	if (op)
		ktune__op_config_format(op, c, buf, len);
	else
		ktune__gemm_config_format(c, buf, len);
}

static int same_kernel(const struct ktune_key *key, const struct ktune_config *a, const struct ktune_config *b)
{
	const struct ktune_op *op = ktune__other_op(key);
	return op ? ktune__op_same_kernel(op, key, a, key, b) : ktune__gemm_same_kernel(a, b);
}

static double key_flops(const struct ktune_key *key)
{
	const struct ktune_op *op = ktune__other_op(key);
	return op ? op->flops(key) : ktune__gemm_flops(key);
}

static double key_bytes(const struct ktune_key *key)
{
	const struct ktune_op *op = ktune__other_op(key);
	return op ? op->bytes(key) : ktune__gemm_bytes(key);
}

int ktune__tuner_open(const char *db_path, int device, const char *worker_exe,
		      struct ktune_tuner **out, struct ktune_err *e)
{
	struct ktune_tuner *t = calloc(1, sizeof(*t));
	char *path = NULL;
	int rc;

	*out = NULL;
	if (!t)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	if (!db_path && (rc = ktune__default_db_path(&path, e)))
		goto fail;
	rc = ktune__db_open(db_path ? db_path : path, 1, &t->db, e);
	free(path);
	if (rc)
		goto fail;
	if ((rc = ktune__client_open(worker_exe, device, NULL, &t->client, e)))
		goto fail;
	const struct ktune_hello *h = ktune__client_hello(t->client);
	snprintf(t->driver, sizeof(t->driver), "%d.%d", h->driver_version / 1000,
		 h->driver_version % 1000 / 10);
	ktune__hygiene_open(t);
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

void ktune__tuner_device_info(struct ktune_tuner *t, struct ktune_device_info *out)
{
	const struct ktune_hello *h = ktune__tuner_device(t);
	memset(out, 0, sizeof(*out));
	out->id = h->id;
	out->smem_optin = h->smem_optin;
	out->l2_bytes = h->l2_bytes;
	out->driver_version = h->driver_version;
	out->mem_gbps = h->mem_gbps;
}

void ktune__tuner_model_device(struct ktune_tuner *t, struct ktune_gemm_device *out)
{
	const struct ktune_hello *h = ktune__tuner_device(t);
	memset(out, 0, sizeof(*out));
	snprintf(out->arch, sizeof(out->arch), "%s", h->id.arch);
	out->sm_count = h->id.sm_count;
	out->smem_optin = h->smem_optin;
	out->mem_gbps = h->mem_gbps;
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

/* One job per distinct kernel of the candidates, in order of first use; c[i].job is its job. */
static int assign_jobs(const struct ktune_key *key, struct candidate *c, int n,
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
	*jobs_out = jobs;
	*njobs_out = njobs;
	return KTUNE_OK;
}

/* Compiles jobs[first] .. jobs[first + count - 1] in the worker. */
static int compile_jobs(struct ktune_tuner *t, struct ktune_compile_job *jobs, int first, int count,
			const struct ktune_tune_options *o, struct ktune_err *e)
{
	double t0 = ktune__now();
	int rc = ktune__client_compile_range(t->client, jobs, first, count, o->jobs, e);
	if (rc)
		return rc;
	int failed = 0;
	for (int j = first; j < first + count; j++)
		failed += jobs[j].status != KTUNE_OK;
	ktune__tune_progress(o, "  compiled %d kernels (%d failed) in %.1f s\n", count, failed,
			     ktune__now() - t0);
	return KTUNE_OK;
}

/* A trial of cfg for the key, before it says how it went: what it is and what built it. */
static void trial_of(struct ktune_tuner *t, const struct ktune_key *key, const struct ktune_config *cfg,
		     struct ktune_trial *tr)
{
	memset(tr, 0, sizeof(*tr));
	tr->key = *key;
	snprintf(tr->family, sizeof(tr->family), "%s", family_name(key, cfg->family));
	snprintf(tr->template_hash, sizeof(tr->template_hash), "%s", family_hash(key, cfg->family));
	config_text(key, cfg, tr->config, sizeof(tr->config));
	snprintf(tr->nvrtc_version, sizeof(tr->nvrtc_version), "%s", ktune__nvrtc_version());
	snprintf(tr->driver_version, sizeof(tr->driver_version), "%s", t->driver);
}

/*
 * A candidate the model's order leaves untried (--top): a "pruned" trial
 * whose message says why, so that explain lists it.  Not a failure: the
 * negative cache does not skip it next time.
 */
static void trial_untried(struct ktune_tuner *t, const struct ktune_key *key, const struct ktune_config *cfg,
			  struct ktune_trial *tr, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void trial_untried(struct ktune_tuner *t, const struct ktune_key *key, const struct ktune_config *cfg,
			  struct ktune_trial *tr, const char *fmt, ...)
{
	va_list ap;
	trial_of(t, key, cfg, tr);
	snprintf(tr->status, sizeof(tr->status), "%s", KTUNE_TRIAL_PRUNED);
	va_start(ap, fmt);
	vsnprintf(tr->message, sizeof(tr->message), fmt, ap);
	va_end(ap);
}

int ktune__trial_untried(const struct ktune_trial *tr)
{
	return !strcmp(tr->status, KTUNE_TRIAL_PRUNED) &&
	       (!strncmp(tr->message, KTUNE_UNTRIED_TOP, strlen(KTUNE_UNTRIED_TOP)) ||
		!strncmp(tr->message, KTUNE_UNTRIED_BOUND, strlen(KTUNE_UNTRIED_BOUND)) ||
		!strncmp(tr->message, KTUNE_UNTRIED_DEADLINE, strlen(KTUNE_UNTRIED_DEADLINE)));
}

/* Verifies candidate i and times it briefly (its kernel compiled): its trial says how it went. */
static int screen(struct ktune_tuner *t, const struct ktune_key *key, struct candidate *c, int i, int n,
		  const struct ktune_compile_job *jobs, double timeout, const struct ktune_tune_options *o,
		  struct ktune_err *e)
{
	struct ktune_trial *tr = &c[i].trial;
	const struct ktune_compile_job *job = &jobs[c[i].job];
	int rc;
	trial_of(t, key, &c[i].cfg, tr);
	if (job->status) {
		snprintf(tr->status, sizeof(tr->status), "%s",
			 job->timed_out ? KTUNE_TRIAL_TIMEOUT : KTUNE_TRIAL_COMPILE_ERROR);
		snprintf(tr->message, sizeof(tr->message), "%.500s", job->log ? job->log : "");
	} else if (job->cubin.res.spill_stores || job->cubin.res.spill_loads) {
		snprintf(tr->status, sizeof(tr->status), "%s", KTUNE_TRIAL_PRUNED);
		snprintf(tr->message, sizeof(tr->message), "spills %d bytes of registers",
			 job->cubin.res.spill_stores + job->cubin.res.spill_loads);
	} else if ((rc = ktune__client_run(t->client, c[i].job, &c[i].cfg, KTUNE_RUN_SCREEN, timeout, tr,
					   &c[i].timing, e))) {
		return rc;
	} else if (!strcmp(tr->status, KTUNE_TRIAL_OK)) {
		tr->screen_us = c[i].timing.median_us; /* explain ranks by it */
	}
	if (!strcmp(tr->status, KTUNE_TRIAL_CRASHED) || !strcmp(tr->status, KTUNE_TRIAL_TIMEOUT))
		ktune__tune_progress(o, "\r  candidate %d/%d %s: %s: %s\n", i + 1, n, tr->config, tr->status,
				     tr->message);
	return KTUNE_OK;
}

/* The fastest screen time among the candidates screened so far (0: none right yet). */
static double best_screened(const struct candidate *c, int n)
{
	double best = 0;
	for (int j = 0; j < n; j++)
		if (c[j].screened && !strcmp(c[j].trial.status, KTUNE_TRIAL_OK) &&
		    (best == 0 || c[j].timing.median_us < best))
			best = c[j].timing.median_us;
	return best;
}

static void screen_progress(const struct ktune_tune_options *o, const struct candidate *c, int i, int n)
{
	if (o->progress && (i % 16 == 15 || i == n - 1))
		ktune__tune_progress(o, "\r  candidate %d/%d, best so far %.1f us", i + 1, n, best_screened(c, n));
}

/*
 * Every candidate: its kernels compiled at once, each screened (the
 * exhaustive search: --top 0).
 */
static int compile_and_screen_all(struct ktune_tuner *t, const struct ktune_key *key, struct candidate *c,
				  int n, struct ktune_compile_job *jobs, int njobs, double timeout,
				  const struct ktune_tune_options *o, struct ktune_err *e)
{
	int rc = compile_jobs(t, jobs, 0, njobs, o, e);
	for (int i = 0; i < n && !rc; i++) {
		rc = screen(t, key, c, i, n, jobs, timeout, o, e);
		c[i].screened = 1;
		screen_progress(o, c, i, n);
	}
	return rc;
}

/* Kernels compiled at a time in the model's order: a 16-core machine's compile round. */
#define MODEL_BATCH 16
/* A candidate whose lower bound is this far above the best screen time cannot win. */
#define BOUND_MARGIN 1.05

/*
 * The model's order (--top N): the candidates come sorted by the
 * performance model, so their kernels are compiled in batches, the
 * likeliest first, and the candidates of each batch screened before the
 * next batch compiles.  Before each batch, a candidate whose lower bound
 * (peak rates over its waves of tiles: gemm-model.h) is above the best
 * screen time so far is dropped: it cannot win.  A batch holds only
 * kernels with a live candidate (the jobs array is compacted so); the
 * dropped are counted in *untried, their trials say why (not screened).
 */
static int compile_and_screen_ranked(struct ktune_tuner *t, const struct ktune_key *key, struct candidate *c,
				     int n, struct ktune_compile_job *jobs, int njobs, double timeout,
				     const struct ktune_tune_options *o, int *untried, struct ktune_err *e)
{
	int batch = o->jobs > 0 ? o->jobs : MODEL_BATCH;
	int first = 0, done = 0, rc = KTUNE_OK;
	int *move = malloc((size_t)(njobs + 1) * sizeof(*move));
	if (!move)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	double started = ktune__now(), last_batch = 0;
	while (first < njobs && !rc) {
		/* drop what cannot win, then keep only the jobs someone still needs */
		double best = best_screened(c, n);
		double spent = ktune__now() - started;
		if (o->deadline_s > 0 && best > 0 && spent + last_batch > o->deadline_s) {
			for (int i = 0; i < n; i++)
				if (!c[i].screened && c[i].job >= first) {
					trial_untried(t, key, &c[i].cfg, &c[i].trial,
						      KTUNE_UNTRIED_DEADLINE " %.1f s: %.1f s spent, the last batch took %.1f s",
						      o->deadline_s, spent, last_batch);
					c[i].job = -1;
					(*untried)++;
				}
			break;
		}
		for (int i = 0; i < n; i++)
			if (!c[i].screened && c[i].job >= first && best > 0 && c[i].bound_us > BOUND_MARGIN * best) {
				trial_untried(t, key, &c[i].cfg, &c[i].trial,
					      KTUNE_UNTRIED_BOUND " %.2f us, above %.2f x the best screen time %.2f us",
					      c[i].bound_us, BOUND_MARGIN, best);
				c[i].job = -1;
				(*untried)++;
			}
		for (int j = first; j < njobs; j++)
			move[j] = -1;
		for (int i = 0; i < n; i++)
			if (c[i].job >= first)
				move[c[i].job] = 0;
		int live = first;
		for (int j = first; j < njobs; j++)
			if (move[j] == 0) {
				move[j] = live;
				jobs[live++] = jobs[j]; /* nothing compiled yet from here on: plain structs */
			}
		for (int i = 0; i < n; i++)
			if (c[i].job >= first)
				c[i].job = move[c[i].job];
		njobs = live;
		int count = njobs - first < batch ? njobs - first : batch;
		if (count == 0)
			break;
		if ((rc = compile_jobs(t, jobs, first, count, o, e)))
			break;
		for (int i = 0; i < n && !rc; i++)
			if (c[i].job >= first && c[i].job < first + count) {
				rc = screen(t, key, c, i, n, jobs, timeout, o, e);
				c[i].screened = 1;
				screen_progress(o, c, done++, n);
			}
		first += count;
		last_batch = ktune__now() - started - spent;
	}
	free(move);
	return rc;
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
void ktune__fill_winner(struct ktune_tuner *t, const struct candidate *c, struct ktune_result *res)
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
	struct ktune_trial *trials = NULL, *untried = NULL;
	struct ktune_gemm_estimate *est = NULL;
	struct ktune_problem prob = { .key = *key_in, .alpha = 1, .beta = 0, .seed = o->seed }, set;
	const struct ktune_hello *dev = ktune__tuner_device(t);
	int n = 0, njobs = 0, rc, starts = ktune__client_starts(t->client), pruned = 0;
	int nuntried = 0; /* untried[0..nuntried): candidates the model's order left untried */
	int ncut = 0;     /* cfgs[n .. n + ncut) after the model's cut: those beyond it, in rank order */
	double t0 = ktune__now();
	char keytext[128];
	struct ktune_tune_log log = { 0 };

	memset(r, 0, sizeof(*r));
	t->log = &log; /* what explain shows: every full measurement, every decision */
	ktune__client_set_compile_timeout(t->client, o->compile_timeout_s);
	/*
	 * The operands in the key's alignment class: GEMM's laid out for it
	 * (rows padded to multiples of 8, or pointers one element off:
	 * ktune__gemm_problem_layout); another op's packed, offset by one
	 * element for an unaligned key (a recorded miss), as a stored result of
	 * that class is run again.
	 */
	if (ktune__other_op(key_in))
		prob.offset = key_in->aligned ? 0 : 1;
	else
		ktune__gemm_problem_layout(key_in, &prob.lda, &prob.ldb, &prob.ldc, &prob.offset);
	if ((rc = ktune__client_problem(t->client, &prob, &set, e)))
		goto out;
	const struct ktune_key *key = &set.key;
	double timeout = ktune__run_timeout(key, o->timeout_s);
	ktune__key_format(key, keytext, sizeof(keytext));
	if (o->as_recorded && key->aligned != key_in->aligned) {
		rc = ktune__fail(e, KTUNE_ERR_UNSUPPORTED, "%s: the tuner cannot make the aligned class of this key "
				 "(its packed rows are not multiples of 16 bytes)", keytext);
		goto out;
	}

	if (ktune__other_op(key))
		rc = ktune__op_candidates(ktune__other_op(key), key, dev->id.arch, dev->id.sm_count, o->budget, o->seed,
					  &cfgs, &n, &r->pruned, e);
	else
		rc = ktune__gemm_candidates(key, dev->id.arch, dev->id.sm_count, dev->smem_optin, o->budget,
					    o->seed, &cfgs, &n, &r->pruned, e);
	if (rc)
		goto out;
	pruned = r->pruned; /* before compiling; spills add to r->pruned below */
	if (!o->retry_failed) {
		int kept = drop_known_bad(t, key, cfgs, n, &r->known_bad, e);
		if (kept < 0) {
			rc = kept;
			goto out;
		}
		n = kept;
		if (r->known_bad)
			ktune__tune_progress(o, "  skipped %d configs that failed before (--retry-failed tries them)\n",
					     r->known_bad);
	}
	if (n == 0) {
		rc = ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no candidate for %s survives pruning%s",
				 keytext, r->known_bad ? " and the failures of earlier sweeps" : "");
		goto out;
	}
	/*
	 * --top N (GEMM): the candidates in the performance model's order, cut
	 * to the kernels it ranks best (candidates.h), compiled and screened
	 * in batches until the rest cannot win by its bound.
	 */
	int ranked = o->top > 0 && !ktune__other_op(key);
	c = calloc((size_t)n, sizeof(*c));
	trials = calloc((size_t)n, sizeof(*trials)); /* the tried, then the untried */
	untried = ranked ? calloc((size_t)n, sizeof(*untried)) : NULL;
	if (!c || !trials || (ranked && !untried)) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (ranked) {
		struct ktune_gemm_device gd;
		ktune__tuner_model_device(t, &gd);
		if (!(est = calloc((size_t)n, sizeof(*est)))) {
			rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
			goto out;
		}
		int kept = ktune__gemm_model_order(key, &gd, cfgs, n, o->top, est);
		r->untried = n - kept;
		ktune__tune_progress(o, "  the model's order: %d of %d candidates, the best %d kernels and the "
				     "best of each tile (--top 0 tries every one)\n", kept, n, o->top);
		if (kept < n)
			ktune__log_note(t, "the model's order (--top %d): %d of %d candidates, of its best %d kernels "
					"and the best of each tile", o->top, kept, n, o->top);
		ncut = n - kept; /* they follow the kept in cfgs and est: recorded after the screen, below */
		n = kept;
	}
	for (int i = 0; i < n; i++) {
		c[i].cfg = cfgs[i];
		c[i].bound_us = est ? est[i].bound_us : 0;
	}
	if ((rc = assign_jobs(key, c, n, &jobs, &njobs, e)))
		goto out;
	if (ranked) {
		int cut = r->untried;
		rc = compile_and_screen_ranked(t, key, c, n, jobs, njobs, timeout, o, &r->untried, e);
		if (r->untried > cut) {
			ktune__tune_progress(o, "\n  %d candidates could not win by the model's bound, or were "
					     "past the deadline: not tried\n", r->untried - cut);
			ktune__log_note(t, "the model's bound and the deadline: %d candidates left untried",
					r->untried - cut);
		}
		/*
		 * The trials are the candidates tried; the untried are recorded
		 * too, the likeliest first: those the bound stopped, then those
		 * beyond the cut, each with the model's reason (for explain).
		 */
		int tried = 0;
		for (int i = 0; i < n; i++)
			if (c[i].screened)
				c[tried++] = c[i];
			else if (c[i].job < 0)
				untried[nuntried++] = c[i].trial;
		for (int i = n; i < n + ncut; i++)
			trial_untried(t, key, &cfgs[i], &untried[nuntried++],
				      KTUNE_UNTRIED_TOP " %d kernels nor the best of its tile (estimate %.2f us)", o->top,
				      est[i].time_us);
		n = tried;
	} else {
		rc = compile_and_screen_all(t, key, c, n, jobs, njobs, timeout, o, e);
	}
	if (rc)
		goto out;
	ktune__tune_progress(o, "\n");
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
	struct ktune_tuning tuning = { .key = *key, .kind = "tune", .outcome = KTUNE_TUNED, .candidates = n,
				       .pruned = pruned, .known_bad = r->known_bad, .budget = o->budget,
				       .seed = (long)o->seed, .smem_optin = dev->smem_optin };
	/* every candidate's fate: the tried in the order tried, then those the model left untried */
	if (nuntried)
		memcpy(trials + n, untried, (size_t)nuntried * sizeof(*untried));
	if (r->ok == 0) {
		/* no result, but the failures are remembered so that the next sweep skips them */
		for (int i = 0; i < n; i++)
			trials[i] = c[i].trial;
		struct ktune_err te;
		snprintf(tuning.outcome, sizeof(tuning.outcome), "%s", KTUNE_NONE_RIGHT);
		tuning.tune_s = ktune__now() - t0;
		ktune__log_tuning(&log, &tuning);
		if (ktune__db_put_tuning(t->db, NULL, &dev->id, trials, n + nuntried, &tuning, &te))
			ktune__tune_progress(o, "  cannot store the trials: %s\n", te.msg);
		rc = ktune__fail(e, KTUNE_ERR_VERIFY, "%s: none of %d candidates computed the right result "
				 "(%d wrong, %d failed)", keytext, n, r->wrong, r->failed);
		goto out;
	}

	/* Measure: the fastest few by the full protocol, then the fastest and cuBLAS in turns. */
	qsort(c, (size_t)n, sizeof(*c), ktune__candidate_by_time);
	int finalists = o->finalists > 0 ? o->finalists : 8;
	if (finalists > r->ok)
		finalists = r->ok;
	struct ktune_check cb_check;
	struct ktune_timing cb_time;
	if ((rc = ktune__measure_finalists(t, c, finalists, timeout, o, &r->has_cublas, &cb_check, &cb_time,
					   r->disturbed, sizeof(r->disturbed), e)))
		goto out;
	if (strcmp(c[0].trial.status, KTUNE_TRIAL_OK)) {
		rc = ktune__fail(e, KTUNE_ERR_VERIFY, "%s: measured again, the fastest finalist failed: %s",
				 keytext, c[0].trial.message);
		goto out;
	}

	struct ktune_result *res = &r->result;
	res->key = *key;
	ktune__fill_winner(t, &c[0], res);
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
	snprintf(tuning.winner, sizeof(tuning.winner), "%s", res->config);
	tuning.baseline_us = res->cublas_us;
	tuning.tune_s = res->tune_s;
	ktune__log_tuning(&log, &tuning);
	rc = ktune__db_put_tuning(t->db, res, &res->device, trials, n + nuntried, &tuning, e);
	r->worker_restarts = ktune__client_starts(t->client) - starts;
out:
	t->log = NULL;
	ktune__log_free(&log);
	if (jobs)
		ktune__compile_jobs_free(jobs, njobs);
	free(jobs);
	free(trials);
	free(untried);
	free(c);
	free(est);
	free(cfgs);
	return rc;
}

/* A stored result's config, and fresh random inputs of its key (and alignment class) set in the worker. */
int ktune__stored_problem(struct ktune_tuner *t, const struct ktune_result *r, unsigned seed,
			  struct ktune_config *cfg, struct ktune_problem *set, struct ktune_err *e)
{
	struct ktune_problem prob = { .key = r->key, .alpha = 1, .beta = 0, .seed = seed };
	const struct ktune_op *op = ktune__other_op(&r->key);
	int rc;
	if ((rc = op ? ktune__op_config_parse(op, r->family, r->config, cfg, e)
		     : ktune__gemm_config_parse(r->config, cfg, e)))
		return rc;
	if (!op)
		ktune__gemm_problem_layout(&r->key, &prob.lda, &prob.ldb, &prob.ldc, &prob.offset);
	else if (!r->key.aligned)
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
	if ((rc = ktune__stored_problem(t, r, seed, &cfg, &set, e)))
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
	if ((rc = ktune__stored_problem(t, r, seed, &c.cfg, &set, e)))
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
	if ((rc = ktune__measure_finalists(t, &c, 1, ktune__run_timeout(&set.key, 0), &quiet,
					   &out->has_cublas, &cb_check, &cb_time, out->disturbed,
					   sizeof(out->disturbed), e)))
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
