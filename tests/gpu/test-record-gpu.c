/*
 * test-record-gpu.c - tune what is used and a cold start without NVRTC,
 * through real calls: keys served without a tuned entry, called from
 * several threads, are counted and saved by ktune_close (KTUNE_RECORD) to a
 * file and to the database; a warmed key's first call compiles nothing
 * (ktune_get_stats), where a cold one compiles once, and the figures of
 * both are printed.  Skipped where no GPU is present.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "db/misses.h"
#include "gpu_test.h"
#include "runtime/context.h"
#include "tuner/tuner.h"

static char dir[4096];

static int setup(void **state)
{
	(void)state;
	return test_tmp_dir("record-gpu", dir, sizeof(dir));
}

static int teardown(void **state)
{
	(void)state;
	test_remove_tree(dir);
	return 0;
}

/* A fresh cubin cache under the scratch: what a new machine has. */
static void fresh_cache(const char *name)
{
	char path[4300];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	setenv("XDG_CACHE_HOME", path, 1);
}

static CUdeviceptr zeros(size_t bytes)
{
	CUdeviceptr p;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemsetD8_v2(p, 0, bytes), CUDA_SUCCESS);
	return p;
}

/* A GEMM of a shape nobody tunes: 37x123x77, unaligned (its leading dimensions are odd). */
#define GM 37
#define GN 123
#define GK 77
#define CALLS 25
#define THREADS 4

struct caller {
	ktune_ctx *ctx;
	CUdeviceptr a, b, c;
	int failures;
};

static void *call_gemm(void *arg)
{
	struct caller *c = arg;
	if (ktune_cu.cuCtxSetCurrent(c->ctx->cu)) {
		c->failures++;
		return NULL;
	}
	for (int i = 0; i < CALLS; i++)
		c->failures += ktune_gemm(c->ctx, 'n', 't', GM, GN, GK, 1.0f, (void *)c->a, GK, (void *)c->b, GK, 0.0f,
					  (void *)c->c, GN, KTUNE_F16, NULL) != KTUNE_OK;
	return NULL;
}

/* Calls that miss: a GEMM from several threads, and a GeLU of an untuned size. */
static void call_misses(ktune_ctx *ctx)
{
	struct caller callers[THREADS];
	pthread_t tid[THREADS];
	struct ktune_err e;
	int pushed;

	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	CUdeviceptr a = zeros(GM * GK * 2), b = zeros(GN * GK * 2), x = zeros(1000 * 2), y = zeros(1000 * 2);
	for (int i = 0; i < THREADS; i++) {
		callers[i] = (struct caller){ ctx, a, b, zeros(GM * GN * 2), 0 };
		assert_int_equal(pthread_create(&tid[i], NULL, call_gemm, &callers[i]), 0);
	}
	for (int i = 0; i < 10; i++)
		assert_int_equal(ktune_gelu(ctx, 1000, (void *)x, (void *)y, KTUNE_GELU_TANH, KTUNE_BF16, NULL), KTUNE_OK);
	printf("gelu bf16 tanh,fwd 1000: served by %s\n", ktune_last_dispatch(ctx));
	for (int i = 0; i < THREADS; i++) {
		pthread_join(tid[i], NULL);
		assert_int_equal(callers[i].failures, 0);
		ktune_cu.cuMemFree_v2(callers[i].c);
	}
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	ktune_cu.cuMemFree_v2(a);
	ktune_cu.cuMemFree_v2(b);
	ktune_cu.cuMemFree_v2(x);
	ktune_cu.cuMemFree_v2(y);
	ktune__ctx_leave(ctx, pushed);
}

static const struct ktune_miss *find(const struct ktune_miss *m, int n, const char *op)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(m[i].key.op, op))
			return &m[i];
	return NULL;
}

static void test_record_gpu__misses_of_real_calls_are_saved(void **state)
{
	char path[4300], db[4300], err[512];
	struct ktune_misses_file f;
	struct ktune_err e;
	ktune_stats s;
	ktune_ctx *ctx;
	(void)state;

	fresh_cache("cache-record");
	snprintf(path, sizeof(path), "%s/misses.yaml", dir);
	setenv("KTUNE_RECORD", path, 1);
	assert_int_equal(ktune_open("", 0, &ctx, err, sizeof(err)), KTUNE_OK);
	unsetenv("KTUNE_RECORD");
	struct ktune_device_id dev = ctx->id;
	call_misses(ctx);
	assert_int_equal(ktune_get_stats(ctx, &s, sizeof(s)), KTUNE_OK);
	printf("%lld calls, %lld keys; missed %lld keys, %lld calls\n", (long long)s.calls, (long long)s.keys,
	       (long long)s.missed_keys, (long long)s.missed_calls);
	assert_int_equal(s.missed_keys, 2);
	assert_int_equal(s.missed_calls, THREADS * CALLS + 10);
	ktune_close(ctx); /* saves them */

	assert_int_equal(ktune__misses_read(path, &f, &e), KTUNE_OK);
	assert_string_equal(f.device.name, dev.name);
	assert_int_equal(f.n, 2);
	const struct ktune_miss *g = find(f.m, f.n, "gemm"), *u = find(f.m, f.n, "gelu");
	assert_non_null(g);
	assert_non_null(u);
	assert_int_equal(g->key.m, GM);
	assert_int_equal(g->key.n, GN);
	assert_int_equal(g->key.k, GK);
	assert_int_equal(g->key.aligned, 0);
	assert_int_equal(g->calls, THREADS * CALLS);
	assert_int_equal(u->key.m, 1024); /* gelu's bucket of 1000 */
	assert_int_equal(u->calls, 10);
	ktune__misses_file_free(&f);

	/* the same into a database (KTUNE_RECORD=db), twice: the calls add up */
	snprintf(db, sizeof(db), "%s/fleet.db", dir);
	for (int run = 0; run < 2; run++) {
		setenv("KTUNE_RECORD", "db", 1);
		assert_int_equal(ktune_open(db, 0, &ctx, err, sizeof(err)), KTUNE_OK);
		unsetenv("KTUNE_RECORD");
		call_misses(ctx);
		ktune_close(ctx);
	}
	struct ktune_spec spec;
	struct ktune_db *h;
	assert_int_equal(ktune__db_open_read(db, &h, &e), KTUNE_OK);
	assert_int_equal(ktune__spec_from_db_misses(h, &dev, 1, &spec, &e), KTUNE_OK);
	ktune__db_close(h);
	assert_int_equal(spec.nkeys, 2);
	ktune__spec_free(&spec);
}

/* The first call of a key, timed to its end: what a service's first request waits. */
static double first_call(ktune_ctx *ctx, const struct ktune_key *k, ktune_stats *after)
{
	struct ktune_err e;
	int pushed;
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	CUdeviceptr a = zeros((size_t)(k->m * k->k * 2)), b = zeros((size_t)(k->n * k->k * 2)),
		    c = zeros((size_t)(k->m * k->n * 2));
	double t0 = ktune__now();
	assert_int_equal(ktune_gemm(ctx, 'n', 't', k->m, k->n, k->k, 1.0f, (void *)a, k->k, (void *)b, k->k, 0.0f,
				    (void *)c, k->n, k->dtype, NULL), KTUNE_OK);
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	double took = ktune__now() - t0;
	assert_string_equal(ktune_last_dispatch(ctx), "exact");
	ktune_cu.cuMemFree_v2(a);
	ktune_cu.cuMemFree_v2(b);
	ktune_cu.cuMemFree_v2(c);
	ktune__ctx_leave(ctx, pushed);
	assert_int_equal(ktune_get_stats(ctx, after, sizeof(*after)), KTUNE_OK);
	return took;
}

static void test_record_gpu__warmed_first_call_compiles_nothing(void **state)
{
	const struct ktune_key key = { "gemm", KTUNE_F16, "nt", 1000, 1000, 1000, 1 };
	char db[4300], err[512];
	struct ktune_err e;
	struct ktune_db *h;
	ktune_stats s;
	ktune_ctx *ctx;
	(void)state;

	/* a result for this GPU: the key's default config, which compiles for any arch ktune runs on */
	assert_int_equal(ktune_open("", 0, &ctx, err, sizeof(err)), KTUNE_OK);
	struct ktune_config cfg = ktune__gemm_default_config(&key, ctx->id.sm_count);
	struct ktune_result r = { .key = key, .device = ctx->id, .time_us = 1, .p20_us = 1, .p80_us = 1, .tflops = 1,
				  .cublas_us = 1, .candidates = 1, .tune_s = 1 };
	ktune_close(ctx);
	snprintf(r.family, sizeof(r.family), "%s", ktune__gemm_family_name(cfg.family));
	snprintf(r.template_hash, sizeof(r.template_hash), "%s", ktune__gemm_family_hash(cfg.family));
	ktune__gemm_config_format(&cfg, r.config, sizeof(r.config));
	snprintf(r.protocol, sizeof(r.protocol), "test");
	snprintf(db, sizeof(db), "%s/tuned.db", dir);
	assert_int_equal(ktune__db_open(db, 1, &h, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_result(h, &r, NULL, 0, &e), KTUNE_OK);
	ktune__db_close(h);

	/* warmed: every tuned and shipped kernel of this GPU into a fresh cache, then the call */
	fresh_cache("cache-warm");
	assert_int_equal(ktune_open(db, 0, &ctx, err, sizeof(err)), KTUNE_OK);
	double t0 = ktune__now();
	if (ktune_warm(ctx, 1))
		fail_msg("%s", ktune_errmsg(ctx));
	assert_int_equal(ktune_get_stats(ctx, &s, sizeof(s)), KTUNE_OK);
	printf("warm: %lld kernels compiled, %lld cached, %lld failed in %.1f s\n", (long long)s.warm_compiled,
	       (long long)s.warm_cached, (long long)s.warm_failed, ktune__now() - t0);
	assert_true(s.warm_compiled >= 1);
	assert_int_equal(s.warm_failed, 0);
	double warm_s = first_call(ctx, &key, &s);
	printf("first call, warmed: %.1f ms, %lld NVRTC compiles, %lld cache loads\n", warm_s * 1e3,
	       (long long)s.nvrtc_compiles, (long long)s.cache_loads);
	assert_int_equal(s.nvrtc_compiles, 0);
	assert_int_equal(s.cache_loads, 1);
	ktune_close(ctx);

	/* cold: a fresh cache, no warm: the first call compiles */
	fresh_cache("cache-cold");
	assert_int_equal(ktune_open(db, 0, &ctx, err, sizeof(err)), KTUNE_OK);
	double cold_s = first_call(ctx, &key, &s);
	printf("first call, cold:   %.1f ms, %lld NVRTC compiles (%.1f ms of NVRTC)\n", cold_s * 1e3,
	       (long long)s.nvrtc_compiles, s.nvrtc_seconds * 1e3);
	assert_int_equal(s.nvrtc_compiles, 1);
	assert_true(s.nvrtc_seconds > 0);
	ktune_close(ctx);

	/* KTUNE_WARM=1: warmed in the background at open (the cache is warm now: quick), then no compile */
	fresh_cache("cache-warm");
	setenv("KTUNE_WARM", "1", 1);
	assert_int_equal(ktune_open(db, 0, &ctx, err, sizeof(err)), KTUNE_OK);
	unsetenv("KTUNE_WARM");
	for (int i = 0; i < 3000; i++) {
		assert_int_equal(ktune_get_stats(ctx, &s, sizeof(s)), KTUNE_OK);
		if (s.warm_state == 2)
			break;
		usleep(100000);
	}
	assert_int_equal(s.warm_state, 2);
	assert_int_equal(s.warm_compiled, 0);
	assert_int_equal(s.warm_failed, 0);
	first_call(ctx, &key, &s);
	assert_int_equal(s.nvrtc_compiles, 0);
	ktune_close(ctx);
}

int main(void)
{
	if (gpu_test_available("test-record-gpu"))
		return GPU_TEST_SKIP;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record_gpu__misses_of_real_calls_are_saved),
		cmocka_unit_test(test_record_gpu__warmed_first_call_compiles_nothing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
