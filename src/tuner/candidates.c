/*
 * candidates.c - enumerate, prune and sample; compile in parallel.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "ops/op.h"
#include "tuner/candidates.h"

struct collect {
	const struct ktune_space *space;
	const struct ktune_key *key;
	int sm_count, smem_limit;
	struct ktune_config *cfgs;
	int n, cap, pruned, failed;
	struct ktune_err *e;
};

static int collect(const long *values, void *arg)
{
	struct collect *c = arg;
	struct ktune_config cfg;
	char why[256];

	if (ktune__gemm_config_from_values(c->space, values, &cfg, c->e)) {
		c->failed = 1;
		return 1;
	}
	if (ktune__gemm_prune(c->key, &cfg, c->sm_count ? c->sm_count : 1 << 20,
			      c->smem_limit, why, sizeof(why))) {
		c->pruned++;
		return 0;
	}
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 256;
		struct ktune_config *grown = realloc(c->cfgs, (size_t)cap * sizeof(*grown));
		if (!grown) {
			ktune__fail(c->e, KTUNE_ERR_NOMEM, "out of memory");
			c->failed = 1;
			return 1;
		}
		c->cfgs = grown;
		c->cap = cap;
	}
	c->cfgs[c->n++] = cfg;
	return 0;
}

/* Keeps a seeded random sample of `keep` of the collected configs (the first `keep` after a partial shuffle). */
static void sample(struct collect *c, int keep, unsigned seed)
{
	if (keep >= c->n)
		return;
	ktune__sample_configs(c->cfgs, c->n, keep, seed);
	c->pruned += c->n - keep;
	c->n = keep;
}

/*
 * How many wgmma configs a budget keeps, of nm mma.sync and nw wgmma ones:
 * the family's share of the budget, but at least a quarter of the budget
 * (when it has that many), since the mma.sync space is several times
 * larger and a proportional draw could leave the family that wins the big
 * keys with two or three tries; whatever one family cannot use goes to the
 * other.
 */
static int wgmma_share(int budget, int nm, int nw)
{
	int w = (int)(((long)budget * nw + (nm + nw) / 2) / (nm + nw));
	int floor = (budget + 3) / 4;
	if (w < floor)
		w = floor;
	if (w > nw)
		w = nw;
	if (budget - w > nm)
		w = budget - nm < nw ? budget - nm : nw;
	return w;
}

/* Moves from's configs (and its pruned count) to the end of to's. */
static int append(struct collect *to, struct collect *from)
{
	to->pruned += from->pruned;
	from->pruned = 0;
	if (!from->n)
		return KTUNE_OK;
	struct ktune_config *all = realloc(to->cfgs, (size_t)(to->n + from->n) * sizeof(*all));
	if (!all)
		return ktune__fail(to->e, KTUNE_ERR_NOMEM, "out of memory");
	memcpy(all + to->n, from->cfgs, (size_t)from->n * sizeof(*all));
	to->cfgs = all;
	to->n += from->n;
	from->n = 0;
	return KTUNE_OK;
}

int ktune__gemm_candidates(const struct ktune_key *key, const char *arch, int sm_count,
			   int smem_limit, int budget, unsigned seed,
			   struct ktune_config **out, int *n, int *npruned, struct ktune_err *e)
{
	struct collect c[KTUNE_GEMM_NFAMILIES];
	int rc = KTUNE_OK;

	*out = NULL;
	*n = 0;
	memset(c, 0, sizeof(c));
	for (int f = 0; f < KTUNE_GEMM_NFAMILIES; f++) {
		/* without an arch, the families that need none: mma.sync, and gemv for aligned keys */
		if (f == KTUNE_GEMM_WGMMA ? !arch || !ktune__gemm_family_runs(f, arch, key->aligned)
					  : !ktune__gemm_family_runs(f, arch ? arch : "", key->aligned))
			continue;
		c[f] = (struct collect){ ktune__gemm_family_space(f, e), key, sm_count, smem_limit,
					 NULL, 0, 0, 0, 0, e };
		if (!c[f].space) {
			rc = KTUNE_ERR_PARSE;
			goto out;
		}
		/* Without a device, keep only the checks that depend on the key. */
		ktune__space_enumerate(c[f].space, collect, &c[f]);
		if (c[f].failed) {
			rc = KTUNE_ERR_NOMEM;
			goto out;
		}
	}
	/* gemv's configs join mma.sync's: the budget's share of wgmma is as it was */
	struct collect *m = &c[KTUNE_GEMM_MMA], *w = &c[KTUNE_GEMM_WGMMA];
	if ((rc = append(m, &c[KTUNE_GEMM_GEMV])))
		goto out;
	if (budget > 0 && m->n + w->n > budget) {
		int share = w->space ? wgmma_share(budget, m->n, w->n) : 0;
		sample(m, budget - share, seed);
		if (w->space)
			sample(w, share, seed);
	}
	/* mma.sync and gemv first, then wgmma, each in space order (or sample order) */
	if ((rc = append(m, w)))
		goto out;
	*out = m->cfgs;
	*n = m->n;
	m->cfgs = NULL;
	if (npruned)
		*npruned = m->pruned;
out:
	for (int f = 0; f < KTUNE_GEMM_NFAMILIES; f++)
		free(c[f].cfgs);
	return rc;
}

int ktune__gemm_model_order(const struct ktune_key *key, const struct ktune_gemm_device *dev,
			    struct ktune_config *cfgs, int n, int top, struct ktune_gemm_estimate *est)
{
	struct ktune_gemm_estimate *e = malloc((size_t)(n > 0 ? n : 1) * sizeof(*e));
	struct ktune_gemm_estimate *rest_e = malloc((size_t)(n > 0 ? n : 1) * sizeof(*rest_e));
	struct ktune_config *rest = malloc((size_t)(n > 0 ? n : 1) * sizeof(*rest));
	char *keep = calloc((size_t)(n > 0 ? n : 1), 1);
	int kept = 0, nrest = 0;

	if (!e || !rest_e || !rest || !keep) { /* out of memory: every candidate in its order, still correct */
		free(e);
		free(rest_e);
		free(rest);
		free(keep);
		return n;
	}
	ktune__gemm_model_rank(key, dev, cfgs, n, e);
	/*
	 * The kernels in rank order: the first candidate of each.  A kernel
	 * among the first `top` is kept with every candidate (GROUP_SIZE and
	 * SPLIT_K are kernel arguments: no compile of their own); the first
	 * kernel of a tile shape not seen yet is kept with its best-ranked
	 * candidate alone: it is there so that no shape goes unmeasured, and
	 * its every variant made a tune of the many wgmma shapes run 320
	 * screens (11 s) where 32 kernels' worth took 4.
	 */
	enum { LEFT_OUT, SHAPE_ONLY, WHOLE };
	int kernels = 0;
	for (int i = 0; i < n; i++) {
		int first = 1, shape_seen = 0;
		for (int j = 0; j < i && first; j++)
			if (ktune__gemm_same_kernel(&cfgs[j], &cfgs[i])) {
				first = 0;
				keep[i] = keep[j] == WHOLE ? WHOLE : LEFT_OUT;
			}
		if (!first)
			continue;
		for (int j = 0; j < i && !shape_seen; j++)
			shape_seen = cfgs[j].family == cfgs[i].family && cfgs[j].block_m == cfgs[i].block_m &&
				     cfgs[j].block_n == cfgs[i].block_n;
		keep[i] = top <= 0 || ++kernels <= top ? WHOLE : !shape_seen ? SHAPE_ONLY : LEFT_OUT;
	}
	/* the kept first, then the left out, each in rank order */
	for (int i = 0; i < n; i++)
		if (keep[i]) {
			cfgs[kept] = cfgs[i];
			e[kept] = e[i];
			kept++;
		} else {
			rest[nrest] = cfgs[i];
			rest_e[nrest] = e[i];
			nrest++;
		}
	memcpy(cfgs + kept, rest, (size_t)nrest * sizeof(*rest));
	memcpy(e + kept, rest_e, (size_t)nrest * sizeof(*rest_e));
	if (est)
		memcpy(est, e, (size_t)n * sizeof(*e));
	free(e);
	free(rest_e);
	free(rest);
	free(keep);
	return kept;
}

struct kernels {
	const struct ktune_space *space;
	struct ktune_config *cfg;
	int n, cap, failed;
};

static int add_kernel(const long *values, void *arg)
{
	struct kernels *k = arg;
	struct ktune_config cfg;
	if (ktune__gemm_config_from_values(k->space, values, &cfg, NULL))
		return k->failed = 1;
	for (int i = 0; i < k->n; i++)
		if (ktune__gemm_same_kernel(&k->cfg[i], &cfg))
			return 0;
	if (k->n == k->cap) {
		int cap = k->cap ? 2 * k->cap : 256;
		struct ktune_config *grown = realloc(k->cfg, (size_t)cap * sizeof(*grown));
		if (!grown)
			return k->failed = 1;
		k->cfg = grown;
		k->cap = cap;
	}
	if (cfg.group_size) /* gemv has none */
		cfg.group_size = 1;
	cfg.split_k = 1;
	k->cfg[k->n++] = cfg;
	return 0;
}

int ktune__gemm_space_kernels(int family, struct ktune_config **out, int *n,
			      struct ktune_err *e)
{
	struct kernels k = { 0 };
	const struct ktune_space *s = ktune__gemm_family_space(family, e);
	k.space = s;
	*out = NULL;
	*n = 0;
	if (!s)
		return KTUNE_ERR_PARSE;
	ktune__space_enumerate(s, add_kernel, &k);
	if (k.failed) {
		free(k.cfg);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory listing the GEMM kernels");
	}
	*out = k.cfg;
	*n = k.n;
	return KTUNE_OK;
}

struct pool {
	struct ktune_compile_job *jobs;
	const char *arch, *cache_dir;
};

static void compile_one(int i, void *arg)
{
	struct pool *p = arg;
	struct ktune_compile_job *j = &p->jobs[i];
	struct ktune_err e = { "" };
	j->status = ktune__kernel_compile(&j->key, &j->cfg, p->arch, p->cache_dir, &j->cubin, &e);
	if (j->status)
		j->log = strdup(e.msg);
}

void ktune__compile_jobs(struct ktune_compile_job *jobs, int n, const char *arch,
			 const char *cache_dir, int threads)
{
	struct pool p = { jobs, arch, cache_dir };
	ktune__parallel_for(n, threads, compile_one, &p);
}

void ktune__compile_jobs_free(struct ktune_compile_job *jobs, int n)
{
	for (int i = 0; i < n; i++) {
		ktune__cubin_free(&jobs[i].cubin);
		free(jobs[i].log);
		jobs[i].log = NULL;
	}
}
