/*
 * group.c - the group pick (ktune__group_pick, tuner.h): after a sweep, the
 * config most of a group of related keys won with is weighed at the group's
 * other keys against their own picks, by ratios to cuBLAS measured in turns
 * (measure.c), and stored where it wins.  At every key of a group weighed,
 * what it measured and decided is stored for explain (kind "group").
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/candidates.h"
#include "tuner/client.h"
#include "tuner/tune-internal.h"

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
	struct ktune_tune_log log; /* what explain shows of the pick at this key */
	char outcome[16];          /* struct ktune_tuning's: own_tile, unfit, failed, outvoted, kept, switched */
};

/* Sets m's outcome (unless "") and says why in its log. */
static void decide(struct ktune_tuner *t, struct group_member *m, const char *outcome, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void decide(struct ktune_tuner *t, struct group_member *m, const char *outcome, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (*outcome) /* "": a figure, not a decision */
		snprintf(m->outcome, sizeof(m->outcome), "%s", outcome);
	struct ktune_tune_log *saved = t->log;
	t->log = &m->log;
	ktune__log_note(t, "group pick: %s", why);
	t->log = saved;
}

/*
 * Whether a and b differ in more than GROUP_SIZE and SPLIT_K: the group
 * pick weighs tiles, and a key keeps its own split, which answers its shape
 * (how full its last wave is, how long K is) and not the GPU's regime.
 */
static int other_group_tile(const struct ktune_config *a, const struct ktune_config *b)
{
	struct ktune_config x = *a;
	x.split_k = b->split_k;
	return ktune__other_tile(&x, b);
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
	if ((rc = ktune__stored_problem(t, r, o->seed, &m->own.cfg, &set, e)))
		return rc;
	if (!other_group_tile(&m->own.cfg, cand)) {
		decide(t, m, "own_tile", "this key's pick is the group's tile");
		return KTUNE_OK; /* its own pick already, GROUP_SIZE and SPLIT_K aside */
	}
	m->cand.cfg = *cand;
	m->cand.cfg.split_k = m->own.cfg.split_k;
	if (ktune__gemm_prune(&set.key, &m->cand.cfg, dev->id.sm_count, dev->smem_optin, why, sizeof(why))) {
		decide(t, m, "unfit", "the group's tile with this key's SPLIT_K is pruned here: %s", why);
		return KTUNE_OK;
	}
	m->own.job = 0;
	m->cand.job = 1;
	m->jobs[0] = (struct ktune_compile_job){ .key = set.key, .cfg = m->own.cfg };
	m->jobs[1] = (struct ktune_compile_job){ .key = set.key, .cfg = m->cand.cfg };
	if ((rc = ktune__client_compile(t->client, m->jobs, 2, o->jobs, e)))
		return rc;
	if (m->jobs[0].status || m->jobs[1].status) {
		decide(t, m, "unfit", "%s failed to compile: %.200s", m->jobs[0].status ? "its own pick" : "the group's tile",
		       m->jobs[m->jobs[0].status ? 0 : 1].log ? m->jobs[m->jobs[0].status ? 0 : 1].log : "");
		return KTUNE_OK;
	}
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
	int has_cublas = 1, rc = KTUNE_OK;
	t->log = &m->log;
	for (int round = 0; round < GROUP_ROUNDS && m->valid; round++)
		for (int j = 0; j < 2; j++) {
			int cand = (j + round) % 2 == 1;
			struct candidate *c = cand ? &m->cand : &m->own;
			ktune__log_stage(t, cand ? KTUNE_STAGE_GROUP_TILE : KTUNE_STAGE_GROUP_OWN, round);
			if ((rc = ktune__measure_in_turns(t, c, timeout, &has_cublas, &cb_check, &cb_time, e)))
				goto out;
			if (!has_cublas || strcmp(c->trial.status, KTUNE_TRIAL_OK)) {
				m->valid = 0;
				decide(t, m, "failed", "%s %s in round %d", cand ? "the group's tile" : "its own pick",
				       !has_cublas ? "lost its baseline" : c->trial.status, round);
				break;
			}
			(cand ? m->cand_ratio : m->own_ratio)[round] = cb_time.median_us / c->timing.median_us;
		}
out:
	t->log = NULL;
	return rc;
}

/*
 * The group pick's record at key r (kind "group"): with res, the result it
 * stores now, in the same transaction.
 */
static int store(struct ktune_tuner *t, const struct ktune_result *r, const struct ktune_result *res,
		 struct group_member *m, double seconds, struct ktune_err *e)
{
	struct ktune_tuning tuning = { .key = r->key, .kind = "group", .smem_optin = ktune__tuner_device(t)->smem_optin,
				       .tune_s = seconds };
	snprintf(tuning.outcome, sizeof(tuning.outcome), "%s", m->outcome);
	snprintf(tuning.winner, sizeof(tuning.winner), "%s", res ? res->config : r->config);
	tuning.baseline_us = res ? res->cublas_us : r->cublas_us;
	ktune__log_tuning(&m->log, &tuning);
	return ktune__db_put_tuning(t->db, res, &r->device, NULL, 0, &tuning, e);
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
	ktune__tune_progress(o, "  %s at %d other keys %.3f, their own picks %.3f\n", r[c].config, weighed, mine,
			     own);
	for (int i = 0; i < n; i++) {
		struct ktune_check cb_check;
		struct ktune_timing cb_time;
		int has_cublas = 1, beaten = 1;
		if (!m[i].valid)
			continue;
		/* the figures of the decision, at every key weighed */
		for (int k = 0; k < GROUP_ROUNDS; k++)
			decide(t, &m[i], "", "round %d: own pick %.3f, group's tile %.3f (baseline time / time)", k,
			       m[i].own_ratio[k], m[i].cand_ratio[k]);
		if (mine <= own) {
			decide(t, &m[i], "outvoted", "%s at %d keys %.3f, their own picks %.3f: each keeps its own",
			       r[c].config, weighed, mine, own);
			continue;
		}
		for (int k = 0; k < GROUP_ROUNDS; k++)
			beaten &= m[i].own_ratio[k] > m[i].cand_ratio[k] * GROUP_KEEP_MARGIN;
		if (beaten) {
			decide(t, &m[i], "kept", "%s won over the group (%.3f vs %.3f), but this key's own pick beat it "
			       "by %.0f%% in every round: kept", r[c].config, mine, own, (GROUP_KEEP_MARGIN - 1) * 100);
			continue; /* its own pick won every round here */
		}
		/* measured once more for the figures stored, not the rounds that made the choice: its inputs
		 * and kernels again, the worker holding another key's */
		ktune__compile_jobs_free(m[i].jobs, 2);
		if ((rc = group_prepare(t, &r[i], &cand, o, &m[i], e)))
			goto out;
		if (!m[i].valid)
			continue;
		t->log = &m[i].log;
		ktune__log_stage(t, KTUNE_STAGE_GROUP_FINAL, 0);
		rc = ktune__measure_in_turns(t, &m[i].cand, ktune__run_timeout(&r[i].key, 0), &has_cublas, &cb_check,
					     &cb_time, e);
		t->log = NULL;
		if (rc)
			goto out;
		if (!has_cublas || strcmp(m[i].cand.trial.status, KTUNE_TRIAL_OK)) {
			decide(t, &m[i], "failed", "measured again, the group's tile %s: the key keeps its own",
			       !has_cublas ? "lost its baseline" : m[i].cand.trial.status);
			continue;
		}
		struct ktune_result res = r[i];
		ktune__fill_winner(t, &m[i].cand, &res);
		res.cublas_us = cb_time.median_us;
		res.tune_s += (ktune__now() - t0) / weighed;
		res.measure_note[0] = 0;
		decide(t, &m[i], "switched", "%s won over the group (%.3f vs %.3f) and here: it is stored", r[c].config,
		       mine, own);
		if ((rc = store(t, &r[i], &res, &m[i], ktune__now() - t0, e)))
			goto out;
		r[i] = res;
		(*switched)++;
	}
out:
	/* what explain shows: the pick at every key of the group, whatever it decided */
	for (int i = 0; m && i < n; i++) {
		struct ktune_err se;
		if (m[i].outcome[0] && strcmp(m[i].outcome, "switched") &&
		    store(t, &r[i], NULL, &m[i], ktune__now() - t0, &se) && !rc)
			rc = ktune__fail(e, KTUNE_ERR_DB, "%s", se.msg);
		ktune__compile_jobs_free(m[i].jobs, 2);
		ktune__log_free(&m[i].log);
	}
	free(m);
	return rc;
}
