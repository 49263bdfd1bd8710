/*
 * candidates.c - enumerate, prune and sample; compile in parallel.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/context.h"
#include "tuner/candidates.h"

struct collect {
	const struct ktune_key *key;
	int sm_count, smem_limit;
	struct ktune_gemm_config *cfgs;
	int n, cap, pruned, failed;
	struct ktune_err *e;
};

static int collect(const long *values, void *arg)
{
	struct collect *c = arg;
	struct ktune_gemm_config cfg;
	char why[256];
	const struct ktune_space *s = ktune__gemm_space(NULL);

	if (ktune__gemm_config_from_values(s, values, &cfg, c->e)) {
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
		struct ktune_gemm_config *grown = realloc(c->cfgs, (size_t)cap * sizeof(*grown));
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

/* xorshift: a small, seeded generator so a budgeted sweep is repeatable. */
static unsigned next_random(unsigned *state)
{
	unsigned x = *state ? *state : 2463534242u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

int ktune__gemm_candidates(const struct ktune_key *key, int sm_count, int smem_limit,
			   int budget, unsigned seed, struct ktune_gemm_config **out, int *n,
			   int *npruned, struct ktune_err *e)
{
	struct collect c = { key, sm_count, smem_limit, NULL, 0, 0, 0, 0, e };
	const struct ktune_space *s = ktune__gemm_space(e);

	*out = NULL;
	*n = 0;
	if (!s)
		return KTUNE_ERR_PARSE;
	/* Without a device, keep only the checks that depend on the key. */
	ktune__space_enumerate(s, collect, &c);
	if (c.failed) {
		free(c.cfgs);
		return KTUNE_ERR_NOMEM;
	}
	if (budget > 0 && c.n > budget) {
		unsigned state = seed * 2654435761u + 1;
		for (int i = 0; i < budget; i++) {
			int j = i + (int)(next_random(&state) % (unsigned)(c.n - i));
			struct ktune_gemm_config t = c.cfgs[i];
			c.cfgs[i] = c.cfgs[j];
			c.cfgs[j] = t;
		}
		c.pruned += c.n - budget;
		c.n = budget;
	}
	*out = c.cfgs;
	*n = c.n;
	if (npruned)
		*npruned = c.pruned;
	return KTUNE_OK;
}

struct kernels {
	struct ktune_gemm_config *cfg;
	int n, cap, failed;
};

static int add_kernel(const long *values, void *arg)
{
	struct kernels *k = arg;
	struct ktune_gemm_config cfg;
	if (ktune__gemm_config_from_values(ktune__gemm_space(NULL), values, &cfg, NULL))
		return k->failed = 1;
	for (int i = 0; i < k->n; i++)
		if (ktune__gemm_same_kernel(&k->cfg[i], &cfg))
			return 0;
	if (k->n == k->cap) {
		int cap = k->cap ? 2 * k->cap : 256;
		struct ktune_gemm_config *grown = realloc(k->cfg, (size_t)cap * sizeof(*grown));
		if (!grown)
			return k->failed = 1;
		k->cfg = grown;
		k->cap = cap;
	}
	cfg.group_size = 1;
	cfg.split_k = 1;
	k->cfg[k->n++] = cfg;
	return 0;
}

int ktune__gemm_space_kernels(struct ktune_gemm_config **out, int *n, struct ktune_err *e)
{
	struct kernels k = { 0 };
	const struct ktune_space *s = ktune__gemm_space(e);
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
	int n;
	int next; /* guarded by lock */
	const char *arch, *cache_dir;
	pthread_mutex_t lock;
};

static void *compile_worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		int i = p->next++;
		pthread_mutex_unlock(&p->lock);
		if (i >= p->n)
			return NULL;
		struct ktune_compile_job *j = &p->jobs[i];
		struct ktune_err e = { "" };
		j->status = ktune__kernel_compile(&j->key, &j->cfg, p->arch, p->cache_dir, &j->cubin, &e);
		if (j->status)
			j->log = strdup(e.msg);
	}
}

void ktune__compile_jobs(struct ktune_compile_job *jobs, int n, const char *arch,
			 const char *cache_dir, int threads)
{
	struct pool p = { jobs, n, 0, arch, cache_dir, PTHREAD_MUTEX_INITIALIZER };
	pthread_t tids[256];
	int started = 0;

	if (threads <= 0)
		threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (threads > 256)
		threads = 256;
	if (threads > n)
		threads = n;
	for (int i = 0; i < threads; i++)
		if (!pthread_create(&tids[started], NULL, compile_worker, &p))
			started++;
	if (!started)
		compile_worker(&p); /* no threads to be had: compile here */
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
}

void ktune__compile_jobs_free(struct ktune_compile_job *jobs, int n)
{
	for (int i = 0; i < n; i++) {
		ktune__cubin_free(&jobs[i].cubin);
		free(jobs[i].log);
		jobs[i].log = NULL;
	}
}
