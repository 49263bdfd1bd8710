/*
 * warm.c - a cold start without NVRTC: the cubins of every tuned and
 * shipped entry of a context's device, compiled in parallel into the
 * cubin cache, so that a key's first call loads its kernel from the cache
 * instead of compiling it (ktune_warm, KTUNE_WARM=1, ktune warm).
 *
 * For each key of the entries, dispatch is asked which config it serves
 * (so that a config fitted to the device, or skipped for it, is what gets
 * compiled); keys whose configs compile to one kernel share one compile.
 * Compiles run without the context's lock, so calls go on meanwhile; one
 * that comes first compiles its kernel itself, as it would have.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/context.h"
#include "runtime/warm.h"

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	int status, cached;
	double seconds;
	char error[256];
};

struct pool {
	struct job *jobs;
	const char *arch, *cache_dir;
	const int *stop;
};

static int matches(const struct ktune_key *k, const struct ktune_filter *f)
{
	if (!f)
		return 1;
	if (f->op[0] && strcmp(k->op, f->op))
		return 0;
	if (f->has_dtype && k->dtype != f->dtype)
		return 0;
	if (f->layout[0] && strcmp(k->variant, f->layout))
		return 0;
	return (!f->m || k->m == f->m) && (!f->n || k->n == f->n) && (!f->k || k->k == f->k);
}

/* The distinct kernels that dispatch would run for the entries' keys; malloc'd. */
static int plan(ktune_ctx *ctx, const struct ktune_filter *f, struct job **out, int *njobs, int *nkeys,
		struct ktune_err *e)
{
	struct job *jobs = NULL;
	int n = 0, keys = 0;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->nentries && !(jobs = calloc((size_t)ctx->nentries, sizeof(*jobs)))) {
		pthread_mutex_unlock(&ctx->lock);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	}
	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_key *key = &ctx->entries[i].key;
		int seen = 0;
		if (!matches(key, f))
			continue;
		for (int j = 0; j < i && !seen; j++) /* several sources may hold the key */
			seen = ktune__key_same(&ctx->entries[j].key, key) && matches(&ctx->entries[j].key, f);
		if (seen)
			continue;
		keys++;
		struct ktune_config cfg;
		const char *source;
		ktune__dispatch_choose(ctx, key, &cfg, &source);
		int j;
		for (j = 0; j < n && !ktune__kernel_same(&jobs[j].key, &jobs[j].cfg, key, &cfg); j++)
			;
		if (j == n) {
			jobs[n].key = *key;
			jobs[n].cfg = cfg;
			n++;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	*out = jobs;
	*njobs = n;
	*nkeys = keys;
	return KTUNE_OK;
}

static void compile_one(int i, void *arg)
{
	struct pool *p = arg;
	struct job *j = &p->jobs[i];
	struct ktune_cubin cubin;
	struct ktune_err e = { "" };

	if (p->stop && __atomic_load_n(p->stop, __ATOMIC_RELAXED)) {
		j->status = KTUNE_ERR_INVALID; /* not done: the context is closing */
		snprintf(j->error, sizeof(j->error), "stopped");
		return;
	}
	j->status = ktune__kernel_compile(&j->key, &j->cfg, p->arch, p->cache_dir, &cubin, &e);
	if (j->status) {
		snprintf(j->error, sizeof(j->error), "%.255s", e.msg);
		return;
	}
	j->cached = cubin.cached;
	j->seconds = cubin.seconds;
	ktune__cubin_free(&cubin);
}

int ktune__warm(ktune_ctx *ctx, const struct ktune_filter *f, int threads, const int *stop,
		struct ktune_warm_report *r, struct ktune_err *e)
{
	struct job *jobs = NULL;
	int n = 0, rc;
	double t0 = ktune__now();

	memset(r, 0, sizeof(*r));
	/* compiling into no cache, or one not used, would warm nothing */
	if (!ctx->cache_dir[0])
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED, "no cubin cache to warm (KTUNE_NO_CACHE is set)");
	if (!ktune__dir_trusted(ctx->cache_dir))
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED, "the cubin cache '%s' is not used: another user owns it "
				   "or others may write to it", ctx->cache_dir);
	snprintf(r->cache_dir, sizeof(r->cache_dir), "%s", ctx->cache_dir);
	if ((rc = plan(ctx, f, &jobs, &n, &r->keys, e)))
		return rc;
	struct pool p = { jobs, ctx->id.arch, ctx->cache_dir, stop };
	ktune__parallel_for(n, threads, compile_one, &p);
	r->kernels = n;
	for (int i = 0; i < n; i++) {
		if (jobs[i].status == KTUNE_ERR_INVALID && !strcmp(jobs[i].error, "stopped")) {
			continue; /* not tried: neither compiled nor failed */
		} else if (jobs[i].status) {
			r->failed++;
			if (!r->first_error[0]) {
				char key[128];
				ktune__key_format(&jobs[i].key, key, sizeof(key));
				snprintf(r->first_error, sizeof(r->first_error), "%s: %.380s", key, jobs[i].error);
			}
		} else if (jobs[i].cached) {
			r->cached++;
		} else {
			r->compiled++;
			r->compile_seconds += jobs[i].seconds;
		}
	}
	r->seconds = ktune__now() - t0;
	free(jobs);
	return KTUNE_OK;
}

/* The background warm of a context (ktune_warm with wait 0): on its own thread, with half the cores. */
static void *warm_main(void *arg)
{
	ktune_ctx *ctx = arg;
	struct ktune_warm_report r;
	struct ktune_err e;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int rc = ktune__warm(ctx, NULL, cores > 1 ? (int)(cores / 2) : 1, &ctx->warm_stop, &r, &e);
	pthread_mutex_lock(&ctx->lock);
	ctx->warm = r;
	ctx->warm_status = rc;
	if (rc) /* for ktune_warm(ctx, 1) to report */
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "%s", e.msg);
	ctx->warm_state = KTUNE_WARM_DONE;
	pthread_mutex_unlock(&ctx->lock);
	return NULL;
}

ktune_status ktune_warm(ktune_ctx *ctx, int wait)
{
	struct ktune_warm_report r;
	struct ktune_err e;
	int rc;

	if (!ctx)
		return KTUNE_ERR_INVALID;
	pthread_mutex_lock(&ctx->lock);
	int state = ctx->warm_state;
	pthread_mutex_unlock(&ctx->lock);
	if (state == KTUNE_WARM_RUNNING && !wait)
		return KTUNE_OK; /* under way */
	ktune__warm_join(ctx); /* the one under way, waited for, or a finished one */
	if (state == KTUNE_WARM_RUNNING) {
		if (ctx->warm_status)
			return ctx->warm_status; /* its message is the context's already (warm_main) */
		rc = KTUNE_OK;
		r = ctx->warm;
		goto done;
	}
	if (!wait) {
		pthread_mutex_lock(&ctx->lock);
		ctx->warm_state = KTUNE_WARM_RUNNING;
		pthread_mutex_unlock(&ctx->lock);
		if (pthread_create(&ctx->warm_thread, NULL, warm_main, ctx)) {
			pthread_mutex_lock(&ctx->lock);
			ctx->warm_state = KTUNE_WARM_NONE;
			pthread_mutex_unlock(&ctx->lock);
			return ktune__ctx_error(ctx, ktune__fail(&e, KTUNE_ERR_NOMEM, "cannot start a thread to warm"), &e);
		}
		ctx->warm_started = 1;
		return KTUNE_OK;
	}
	rc = ktune__warm(ctx, NULL, 0, NULL, &r, &e);
	pthread_mutex_lock(&ctx->lock);
	ctx->warm = r;
	ctx->warm_status = rc;
	ctx->warm_state = KTUNE_WARM_DONE;
	pthread_mutex_unlock(&ctx->lock);
	if (rc)
		return ktune__ctx_error(ctx, rc, &e);
done:
	if (!rc && r.failed)
		rc = ktune__fail(&e, KTUNE_ERR_COMPILE, "%d of %d kernels failed to compile; the first: %s", r.failed,
				 r.kernels, r.first_error);
	return rc ? ktune__ctx_error(ctx, rc, &e) : KTUNE_OK;
}

void ktune__warm_join(ktune_ctx *ctx)
{
	if (!ctx->warm_started)
		return;
	pthread_join(ctx->warm_thread, NULL);
	ctx->warm_started = 0;
}

int ktune__warm_open(ktune_ctx *ctx, struct ktune_err *e)
{
	const char *env = getenv("KTUNE_WARM");
	if (!env || !*env || !strcmp(env, "0"))
		return KTUNE_OK;
	if (strcmp(env, "1"))
		return ktune__fail(e, KTUNE_ERR_INVALID, "KTUNE_WARM='%s' is not 0 or 1", env);
	if (!ctx->cache_dir[0])
		return KTUNE_OK; /* KTUNE_NO_CACHE wins: nothing to warm; ktune_get_stats says so */
	int rc = ktune_warm(ctx, 0);
	return rc ? ktune__fail(e, rc, "KTUNE_WARM: %s", ctx->errmsg) : KTUNE_OK;
}
