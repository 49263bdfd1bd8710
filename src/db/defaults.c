/*
 * defaults.c - the config that is best on average across the devices that
 * tuned a key.
 *
 * Each device's time for a config is divided by that device's best time for
 * the key, so a fast GPU does not outvote a slow one; the config with the
 * lowest mean ratio over the devices that ran it wins.  Only configs that
 * every device ran can win, unless none did (budgeted sweeps sample
 * different configs): then those run on the most devices compete.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/defaults.h"

#define MAX_DEVICES 64

/* One config's times on the devices of a group. */
struct config_times {
	char config[256];
	double time[MAX_DEVICES]; /* 0: not run on that device */
	double err_fro, err_max;
	int ndevices;
};

struct group {
	struct config_times *c;
	int n, cap;
	int device;             /* the device being read */
	double best[MAX_DEVICES];
	int failed;
};

static int same_group(const struct ktune_result *a, const struct ktune_result *b)
{
	return !strcmp(a->device.arch, b->device.arch) &&
	       !strcmp(a->template_hash, b->template_hash) && !strcmp(a->key.op, b->key.op) &&
	       a->key.dtype == b->key.dtype && !strcmp(a->key.variant, b->key.variant) &&
	       a->key.m == b->key.m && a->key.n == b->key.n && a->key.k == b->key.k &&
	       a->key.aligned == b->key.aligned;
}

static int cmp_int64(int64_t a, int64_t b)
{
	return a < b ? -1 : a > b;
}

static int by_group(const void *pa, const void *pb)
{
	const struct ktune_result *a = pa, *b = pb;
	int c;
	if ((c = strcmp(a->device.arch, b->device.arch)) || (c = strcmp(a->key.op, b->key.op)) ||
	    (c = cmp_int64(a->key.dtype, b->key.dtype)) ||
	    (c = cmp_int64(a->key.variant[0], b->key.variant[0])) ||
	    (c = cmp_int64(a->key.variant[1], b->key.variant[1])) || (c = cmp_int64(a->key.m, b->key.m)) ||
	    (c = cmp_int64(a->key.n, b->key.n)) || (c = cmp_int64(a->key.k, b->key.k)) ||
	    (c = cmp_int64(a->key.aligned, b->key.aligned)) ||
	    (c = strcmp(a->template_hash, b->template_hash)) ||
	    (c = strcmp(a->device.name, b->device.name)))
		return c;
	return cmp_int64(a->device.sm_count, b->device.sm_count);
}

static int add_time(const char *config, double time_us, double err_fro, double err_max, void *arg)
{
	struct group *g = arg;
	int i;
	for (i = 0; i < g->n; i++)
		if (!strcmp(g->c[i].config, config))
			break;
	if (i == g->n) {
		if (g->n == g->cap) {
			int cap = g->cap ? 2 * g->cap : 64;
			struct config_times *grown = realloc(g->c, (size_t)cap * sizeof(*grown));
			if (!grown)
				return g->failed = 1;
			g->c = grown;
			g->cap = cap;
		}
		memset(&g->c[i], 0, sizeof(g->c[i]));
		snprintf(g->c[i].config, sizeof(g->c[i].config), "%s", config);
		g->n++;
	}
	struct config_times *c = &g->c[i];
	if (c->time[g->device] == 0)
		c->ndevices++;
	c->time[g->device] = time_us;
	c->err_fro = fmax(c->err_fro, err_fro);
	c->err_max = fmax(c->err_max, err_max);
	if (g->best[g->device] == 0 || time_us < g->best[g->device])
		g->best[g->device] = time_us;
	return 0;
}

/* The entry for one group of results (same arch, template and key, ndev devices). */
static int choose(struct ktune_db *db, const struct ktune_result *rs, int ndev,
		  struct ktune_result *out, struct ktune_err *e)
{
	struct group g = { 0 };
	int rc = KTUNE_OK, most = 0, pick = -1;
	double best_score = INFINITY;

	for (g.device = 0; g.device < ndev; g.device++)
		if ((rc = ktune__db_config_times(db, &rs[g.device].device, &rs[g.device].key,
						 rs[g.device].template_hash, add_time, &g, e)))
			goto out;
	if (g.failed) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory choosing defaults");
		goto out;
	}
	for (int i = 0; i < g.n; i++)
		most = g.c[i].ndevices > most ? g.c[i].ndevices : most;
	for (int i = 0; i < g.n; i++) {
		if (g.c[i].ndevices < most)
			continue;
		double score = 0;
		for (int d = 0; d < ndev; d++)
			if (g.c[i].time[d] > 0)
				score += g.c[i].time[d] / g.best[d];
		score /= g.c[i].ndevices;
		if (score < best_score) {
			best_score = score;
			pick = i;
		}
	}

	/* the first device's result lends what the trials do not hold */
	*out = rs[0];
	snprintf(out->device.name, sizeof(out->device.name), "ktune defaults (%d %s GPU%s)", ndev,
		 rs[0].device.arch, ndev == 1 ? "" : "s");
	if (pick < 0) /* no trials stored: the devices' own results are all there is */
		goto out;
	const struct config_times *c = &g.c[pick];
	double log_sum = 0, cublas = 0;
	for (int d = 0; d < ndev; d++) {
		if (c->time[d] > 0)
			log_sum += log(c->time[d]);
		cublas = cublas >= 0 && rs[d].cublas_us > 0 ? cublas + rs[d].cublas_us : -1;
	}
	snprintf(out->config, sizeof(out->config), "%s", c->config);
	out->time_us = out->p20_us = out->p80_us = exp(log_sum / c->ndevices);
	out->tflops = 2.0 * (double)out->key.m * out->key.n * out->key.k / out->time_us / 1e6;
	out->cublas_us = cublas > 0 ? cublas / ndev : 0;
	out->err_fro = c->err_fro;
	out->err_max = c->err_max;
	out->candidates = g.n;
out:
	free(g.c);
	return rc;
}

int ktune__db_defaults(struct ktune_db *db, const struct ktune_result *rs, long n,
		       struct ktune_result **out, long *nout, struct ktune_err *e)
{
	struct ktune_result *sorted = NULL, *res = NULL;
	long nres = 0;
	int rc = KTUNE_OK;

	*out = NULL;
	*nout = 0;
	if (n == 0)
		return KTUNE_OK;
	sorted = malloc((size_t)n * sizeof(*sorted));
	res = malloc((size_t)n * sizeof(*res));
	if (!sorted || !res) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory choosing defaults");
		goto out;
	}
	memcpy(sorted, rs, (size_t)n * sizeof(*sorted));
	qsort(sorted, (size_t)n, sizeof(*sorted), by_group);
	for (long i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && same_group(&sorted[i], &sorted[j]); j++)
			;
		if (j - i > MAX_DEVICES) {
			rc = ktune__fail(e, KTUNE_ERR_UNSUPPORTED,
					 "defaults over more than %d devices of one arch", MAX_DEVICES);
			goto out;
		}
		if ((rc = choose(db, &sorted[i], (int)(j - i), &res[nres], e)))
			goto out;
		nres++;
	}
	*out = res;
	*nout = nres;
	res = NULL;
out:
	free(sorted);
	free(res);
	return rc;
}
