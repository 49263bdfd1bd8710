/*
 * explain.c - what ktune explain shows of a key (explain.h): dispatch's
 * answer (runtime/explain.c), then the database's record of the key on the
 * device, read-only, and the pruning of its spaces recomputed with the
 * registry's own prune functions.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/op.h"
#include "search/space.h"
#include "tuner/explain.h"

void ktune__explain_free(struct ktune_explain *x)
{
	if (!x)
		return;
	free(x->tuning.m);
	free(x->trials);
	for (int i = 0; i < x->ngroups; i++)
		free(x->groups[i].m);
	free(x->groups);
	memset(x, 0, sizeof(*x));
}

/* "needs 123 bytes, the device allows 99" -> "needs N bytes, the device allows N": one class of reason. */
static void reason_class(const char *why, char *out, size_t len)
{
	size_t n = 0;
	for (const char *p = why; *p && n + 1 < len;) {
		if (isdigit((unsigned char)*p)) {
			out[n++] = 'N';
			while (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1])))
				p++;
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = 0;
}

struct prune_walk {
	struct ktune_explain *x;
	const struct ktune_op *op; /* NULL: GEMM */
	const struct ktune_space *space;
	int family;
	int failed;
};

static void note_pruned(struct ktune_explain *x, const char *why, const char *config)
{
	char cls[160];
	int i;
	reason_class(why, cls, sizeof(cls));
	for (i = 0; i < x->nprunes && strcmp(x->prunes[i].reason, cls); i++)
		;
	if (i == x->nprunes) {
		/* the last slot gathers the reasons there is no room for */
		int other = x->nprunes >= KTUNE_EXPLAIN_PRUNES - 1;
		i = other ? KTUNE_EXPLAIN_PRUNES - 1 : x->nprunes;
		if (i == x->nprunes) {
			x->nprunes++;
			snprintf(x->prunes[i].reason, sizeof(x->prunes[i].reason), "%s", other ? "other reasons" : cls);
			snprintf(x->prunes[i].example, sizeof(x->prunes[i].example), "%s", config);
			snprintf(x->prunes[i].why, sizeof(x->prunes[i].why), "%s", why);
		}
	}
	x->prunes[i].count++;
	x->pruned_now++;
}

static int walk_config(const long *values, void *arg)
{
	struct prune_walk *w = arg;
	struct ktune_explain *x = w->x;
	struct ktune_config cfg = { .family = w->family };
	char why[160] = "", text[256];
	int pruned;

	if (w->op) {
		memcpy(cfg.v, values, (size_t)w->space->nparams * sizeof(long));
		pruned = w->op->prune && w->op->prune(&x->key, &cfg, x->device.id.sm_count, why, sizeof(why));
		if (pruned)
			ktune__op_config_format(w->op, &cfg, text, sizeof(text));
	} else {
		if (ktune__gemm_config_from_values(w->space, values, &cfg, NULL)) {
			w->failed = 1;
			return 1;
		}
		pruned = ktune__gemm_prune(&x->key, &cfg, x->device.id.sm_count, x->device.smem_optin, why, sizeof(why));
		if (pruned)
			ktune__gemm_config_format(&cfg, text, sizeof(text));
	}
	x->space++;
	if (pruned)
		note_pruned(x, why, text);
	return 0;
}

/* The commonest reason first; "other reasons", if any, last. */
static int by_count(const void *pa, const void *pb)
{
	const struct ktune_explain_prune *a = pa, *b = pb;
	int ao = !strcmp(a->reason, "other reasons"), bo = !strcmp(b->reason, "other reasons");
	if (ao != bo)
		return ao - bo;
	return b->count - a->count;
}

/* Every config of the key's spaces that runs here, pruned or not, as the tuner's candidates see them. */
static int recompute_pruning(struct ktune_explain *x, struct ktune_err *e)
{
	const struct ktune_op *op = ktune__op_of(&x->key);
	int gemm = ktune__op_is_gemm(op);
	int nfam = gemm ? KTUNE_GEMM_NFAMILIES : op->nfamilies;

	for (int f = 0; f < nfam; f++) {
		struct prune_walk w = { x, gemm ? NULL : op, NULL, f, 0 };
		if (gemm ? !ktune__gemm_family_runs(f, x->device.id.arch, x->key.aligned)
			 : !ktune__op_family_runs(op, f, x->device.id.arch))
			continue; /* the tuner does not offer it here (wgmma: aligned keys on sm_90) */
		w.space = gemm ? ktune__gemm_family_space(f, e) : ktune__op_space(op, f, e);
		if (!w.space)
			return KTUNE_ERR_PARSE;
		ktune__space_enumerate(w.space, walk_config, &w);
		if (w.failed)
			return ktune__fail(e, KTUNE_ERR_INVALID, "a config of the %s space does not parse", op->name);
	}
	qsort(x->prunes, (size_t)x->nprunes, sizeof(*x->prunes), by_count);
	return KTUNE_OK;
}

static int keep_miss(const struct ktune_device_id *d, const struct ktune_miss *m, void *arg)
{
	struct ktune_explain *x = arg;
	(void)d;
	if (ktune__key_same(&m->key, &x->key)) {
		x->miss = *m;
		x->has_miss = 1;
		return 1; /* found: stop */
	}
	return 0;
}

/* A copy of t whose measurements the copy owns. */
static int copy_tuning(const struct ktune_tuning *t, struct ktune_tuning *out)
{
	*out = *t;
	out->m = NULL;
	if (t->nm && !(out->m = malloc((size_t)t->nm * sizeof(*t->m))))
		return 1;
	if (t->nm)
		memcpy(out->m, t->m, (size_t)t->nm * sizeof(*t->m));
	return 0;
}

/* Newest first: group picks until the newest tune, then the tune; older ones are counted. */
static int keep_tuning(const struct ktune_tuning *t, void *arg)
{
	struct ktune_explain *x = arg;
	x->ntunings++;
	if (x->has_tuning)
		return 0;
	if (!strcmp(t->kind, "tune")) {
		if (copy_tuning(t, &x->tuning))
			return 1;
		x->has_tuning = 1;
		return 0;
	}
	struct ktune_tuning *grown = realloc(x->groups, (size_t)(x->ngroups + 1) * sizeof(*grown));
	if (!grown)
		return 1;
	x->groups = grown;
	if (copy_tuning(t, &x->groups[x->ngroups]))
		return 1;
	x->ngroups++;
	return 0;
}

static int keep_trial(const struct ktune_trial *t, void *arg)
{
	struct ktune_explain *x = arg;
	struct ktune_trial *grown = realloc(x->trials, (size_t)(x->ntrials + 1) * sizeof(*grown));
	if (!grown)
		return 1;
	x->trials = grown;
	x->trials[x->ntrials++] = *t;
	return 0;
}

static void tolerance(struct ktune_explain *x)
{
	const struct ktune_op *op = ktune__op_of(&x->key);
	if (ktune__op_is_gemm(op)) {
		ktune__gemm_tolerance(x->key.dtype, &x->tol_fro, &x->tol_max);
		return;
	}
	struct ktune_op_layout layout;
	op->layout(&x->key, &layout);
	for (int i = 0; i < layout.nbufs; i++)
		if (layout.bufs[i].output && op->tolerance) {
			double t = op->tolerance(&x->key, i);
			if (t > x->tol_max)
				x->tol_max = t;
		}
	x->tol_fro = x->tol_max;
}

int ktune__explain(const char *db_path, const struct ktune_device_info *dev, const struct ktune_key *key,
		   struct ktune_explain *out, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	out->key = *key;
	out->device = *dev;
	if ((rc = ktune__op_key_check(key, e)))
		return rc;
	tolerance(out);
	if ((rc = ktune__dispatch_explain(dev, db_path ? db_path : "", key, &out->dispatch, e)))
		goto out;
	if (!db_path || !*db_path)
		goto prune;
	rc = ktune__db_open_read(db_path, &db, e);
	if (rc == KTUNE_ERR_NOT_FOUND) {
		rc = KTUNE_OK; /* nothing tuned yet: dispatch's answer is the whole story */
		goto prune;
	}
	if (rc)
		goto out;
	out->has_db = 1;
	if ((rc = ktune__db_get_result(db, &dev->id, key, &out->result, e)) < 0)
		goto out;
	out->has_result = rc == 1;
	out->result_fresh = out->has_result && ktune__result_fresh(key, out->result.family, out->result.template_hash);
	if ((rc = ktune__db_misses(db, &dev->id, keep_miss, out, e)) < 0)
		goto out;
	if ((rc = ktune__db_tunings(db, &dev->id, key, keep_tuning, out, e))) {
		if (rc > 0)
			rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (out->has_tuning && (rc = ktune__db_trials(db, &dev->id, key, out->tuning.id, keep_trial, out, e))) {
		if (rc > 0)
			rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
prune:
	/* with the shared memory the tuning pruned by, where it says */
	if (out->has_tuning && out->tuning.smem_optin > 0)
		out->device.smem_optin = out->tuning.smem_optin;
	rc = recompute_pruning(out, e);
	out->device.smem_optin = dev->smem_optin;
out:
	ktune__db_close(db);
	if (rc < 0)
		ktune__explain_free(out);
	return rc < 0 ? rc : KTUNE_OK;
}
