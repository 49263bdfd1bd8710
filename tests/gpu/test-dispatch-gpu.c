/*
 * test-dispatch-gpu.c - tune a few keys into a fresh database, then call
 * ktune_gemm through the public runtime: tuned keys dispatch exactly,
 * others take a neighbour or the model's pick, keys ktune has no good
 * answer for go to cuBLAS (where it is installed), all compute the right
 * result, also from several threads on their own streams.  Skipped where
 * no GPU is present.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "templates.h"
#include "tuner/candidates.h"
#include "tuner/protocol.h"
#include "tuner/tuner.h"

static char db_path[4200];

static const struct ktune_key tuned[] = {
	{ "gemm", KTUNE_F16, "nt", 16, 4096, 4096, 1 },
	{ "gemm", KTUNE_BF16, "nn", 128, 1024, 512, 1 },
	{ "gemm", KTUNE_F16, "tn", 33, 100, 200, 0 }, /* ldb = 100: the unaligned class */
};
#define NTUNED (int)(sizeof(tuned) / sizeof(tuned[0]))

/* Opens a context with KTUNE_FALLBACK set to `policy` (read by ktune_open), then restores it. */
static ktune_ctx *open_with(const char *db, const char *policy)
{
	ktune_ctx *ctx = NULL;
	char err[512];
	const char *was = getenv("KTUNE_FALLBACK");
	char *saved = was ? strdup(was) : NULL;
	setenv("KTUNE_FALLBACK", policy, 1);
	int rc = ktune_open(db, 0, &ctx, err, sizeof(err));
	if (saved)
		setenv("KTUNE_FALLBACK", saved, 1);
	else
		unsetenv("KTUNE_FALLBACK");
	free(saved);
	if (rc)
		fail_msg("ktune_open with KTUNE_FALLBACK=%s: %s", policy, err);
	return ctx;
}

static int setup(void **state)
{
	char dir[4096];
	(void)state;
	if (test_tmp_dir("dispatch", dir, sizeof(dir)))
		return -1;
	snprintf(db_path, sizeof(db_path), "%s/tuned.db", dir);
	return 0;
}

static void test_dispatch__tune_then_call_through_runtime(void **state)
{
	struct ktune_tuner *t;
	struct ktune_err e;
	struct ktune_tune_options o = { .budget = 24, .seed = 3, .finalists = 3 };
	(void)state;

	assert_int_equal(ktune__tuner_open(db_path, 0, test_program("../ktune"), &t, &e), KTUNE_OK);
	for (int i = 0; i < NTUNED; i++) {
		struct ktune_tune_report r;
		int rc = ktune__tune_key(t, &tuned[i], &o, &r, &e);
		if (rc)
			fail_msg("tuning key %d: %s", i, e.msg);
		assert_int_equal(r.result.key.aligned, tuned[i].aligned);
		assert_true(r.result.time_us > 0);
		assert_true(r.ok > 0);
	}
	ktune__tuner_close(t);

	/*
	 * A new context loads what was stored.  KTUNE_FALLBACK=model: the
	 * tuned keys dispatch exactly whatever they measured against cuBLAS
	 * (an unaligned key's element loads may lose to it, which would send it
	 * to cuBLAS under the default policy: the next test).
	 */
	struct ktune_worker *w = NULL;
	int pushed;
	ktune_ctx *ctx = open_with(db_path, "model");
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);

	struct {
		struct ktune_key key;
		const char *source, *or;
	} calls[] = {
		{ tuned[0], "exact", "exact" },
		{ tuned[1], "exact", "exact" },
		{ tuned[2], "exact", "exact" },
		/* M = 20 is not the GEMV class of the M = 16 entry: the model's pick */
		{ { "gemm", KTUNE_F16, "nt", 20, 4000, 4096, 1 }, "model", "model" },
		/* the M = 128 entry is of the class; the model decides whether its tile suits this key */
		{ { "gemm", KTUNE_BF16, "nn", 100, 1000, 500, 1 }, "nearest", "model" },
		{ { "gemm", KTUNE_BF16, "tt", 50, 60, 70, 1 }, "model", "model" },
		{ { "gemm", KTUNE_BF16, "tn", 1, 1, 1, 1 }, "model", "model" }, /* nothing tuned or shipped for bf16 tn */
	};
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		struct ktune_problem p = { .key = calls[i].key, .alpha = 1, .beta = i % 2 ? 0.5f : 0,
					   .seed = (unsigned)(40 + i) };
		struct ktune_check check;
		const char *source = NULL;
		assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
		if (ktune__worker_run_public(w, &check, &source, &e))
			fail_msg("call %zu: %s", i, e.msg);
		if (!check.pass || (strcmp(source, calls[i].source) && strcmp(source, calls[i].or)))
			fail_msg("call %zu: pass %d err %.3g, served by '%s', expected '%s'", i, check.pass,
				 check.err_fro, source, calls[i].source);
	}
	ktune__worker_close(w);
	ktune_close(ctx);
}

/*
 * Keys ktune has no good answer for -- odd leading dimensions, whose
 * element-load kernels run several times slower -- go to cuBLAS where it is
 * installed, and compute the right result with beta 0 and beta != 0;
 * KTUNE_FALLBACK=model serves them with ktune's kernels, right too;
 * KTUNE_FALLBACK=measure times both at the first call and keeps one.
 */
static void test_dispatch__cublas_serves_what_ktune_cannot(void **state)
{
	static const struct ktune_key slow[] = {
		{ "gemm", KTUNE_BF16, "nt", 1024, 50257, 768, 0 }, /* an LM head: ldc = 50257 */
		{ "gemm", KTUNE_F16, "nn", 4096, 1, 4096, 0 },     /* N = 1 */
		{ "gemm", KTUNE_F16, "tt", 512, 512, 511, 0 },
	};
	struct ktune_worker *w = NULL;
	struct ktune_err e;
	int pushed;
	(void)state;

	ktune_ctx *ctx = open_with("", "auto");
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);
	int blas = *ktune__worker_cublas_version(w) != 0;
	printf("cuBLAS %s\n", blas ? ktune__worker_cublas_version(w) : "not installed: ktune's kernels serve");
	for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++)
		for (int b = 0; b < 2; b++) {
			struct ktune_problem p = { .key = slow[i], .alpha = 1, .beta = b ? 0.5f : 0,
						   .seed = (unsigned)(60 + i) };
			struct ktune_check check;
			const char *source = NULL;
			assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
			assert_int_equal(ktune__worker_problem(w)->key.aligned, 0);
			if (ktune__worker_run_public(w, &check, &source, &e))
				fail_msg("key %zu: %s", i, e.msg);
			if (!check.pass || strcmp(source, blas ? "cublas" : "model"))
				fail_msg("key %zu beta %d: pass %d err %.3g, served by '%s'", i, b, check.pass,
					 check.err_fro, source);
		}
	/* the same shape in the aligned class is ktune's */
	struct ktune_problem aligned = { .key = { "gemm", KTUNE_BF16, "nt", 1024, 50264, 768, 1 }, .alpha = 1,
					 .seed = 70 };
	struct ktune_check check;
	const char *source = NULL;
	assert_int_equal(ktune__worker_set_problem(w, &aligned, &e), KTUNE_OK);
	if (ktune__worker_run_public(w, &check, &source, &e))
		fail_msg("%s", e.msg);
	assert_true(check.pass);
	assert_string_equal(source, "model");
	ktune__worker_close(w);
	ktune_close(ctx);

	/* KTUNE_FALLBACK=model, then measure: the LM head again */
	static const char *const policies[] = { "model", "measure" };
	for (int pol = 0; pol < 2; pol++) {
		ctx = open_with("", policies[pol]);
		assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
		assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);
		struct ktune_problem p = { .key = slow[0], .alpha = 1, .seed = 80 };
		const char *first = NULL;
		assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
		for (int call = 0; call < 3; call++) {
			if (ktune__worker_run_public(w, &check, &source, &e))
				fail_msg("%s call %d: %s", policies[pol], call, e.msg);
			if (!check.pass)
				fail_msg("%s call %d: error %.3g", policies[pol], call, check.err_fro);
			if (pol == 0)
				assert_string_equal(source, "model");
			else if (strcmp(source, "model") && strcmp(source, "cublas"))
				fail_msg("measure: served by '%s'", source);
			if (call && strcmp(source, first))
				fail_msg("%s: '%s', then '%s'", policies[pol], first, source);
			first = source;
		}
		printf("KTUNE_FALLBACK=%s: the LM head served by %s\n", policies[pol], source);
		ktune__worker_close(w);
		ktune_close(ctx);
	}
}

/* ktune bench: each tuned key, timed again against cuBLAS, runs right and near its stored ratio. */
static void test_dispatch__bench_times_the_tuned_keys_again(void **state)
{
	struct ktune_tuner *t;
	struct ktune_err e;
	(void)state;

	assert_int_equal(ktune__tuner_open(db_path, 0, test_program("../ktune"), &t, &e), KTUNE_OK);
	for (int i = 0; i < NTUNED; i++) {
		struct ktune_result stored;
		struct ktune_bench_report b;
		assert_int_equal(ktune__db_get_result(ktune__tuner_db(t), &ktune__tuner_device(t)->id, &tuned[i],
						      &stored, &e), 1);
		if (ktune__bench_result(t, &stored, (unsigned)(70 + i), &b, &e))
			fail_msg("key %d: %s", i, e.msg);
		if (strcmp(b.status, KTUNE_TRIAL_OK))
			fail_msg("key %d: %s: %s: %s", i, stored.config, b.status, b.message);
		assert_true(b.has_cublas);
		assert_true(b.time_us > 0 && b.cublas_us > 0);
		/* microseconds-long keys: only a gross change of speed is a failure */
		double ratio = b.cublas_us / b.time_us, was = stored.cublas_us / stored.time_us;
		if (ratio < was / 3 || ratio > was * 3)
			fail_msg("key %d: ratio %.3f now, %.3f stored", i, ratio, was);
	}
	ktune__tuner_close(t);
}

/* The key's state in the context's table of resolved keys. */
static int measure_state(ktune_ctx *ctx, const struct ktune_key *key)
{
	struct ktune_resolved *r = NULL;
	struct ktune_err e;
	pthread_mutex_lock(&ctx->lock);
	int rc = ktune__resolve(ctx, key, &r, &e);
	pthread_mutex_unlock(&ctx->lock);
	assert_int_equal(rc, KTUNE_OK);
	return __atomic_load_n(&r->measure, __ATOMIC_ACQUIRE);
}

/*
 * KTUNE_FALLBACK=auto: a key ktune's kernel serves untuned races cuBLAS
 * once without the caller waiting: its first call is served by the model
 * (or a neighbour) and enqueues the runs; a call after they are done keeps
 * the faster, for good.  A key decided for cuBLAS does not race.  Which
 * side wins is the GPU's business (a benchmark's, not a test's): the test
 * asks that the race is run, settles, stays and computes right.
 */
static void test_dispatch__auto_races_untuned_keys_against_cublas(void **state)
{
	static const struct ktune_key keys[] = {
		{ "gemm", KTUNE_BF16, "tn", 4869, 408, 24335, 1 }, /* the model splits K 8 ways: 0.66 of cuBLAS on the H100 */
		{ "gemm", KTUNE_F16, "nt", 20, 4000, 4096, 1 },
		{ "gemm", KTUNE_BF16, "tt", 50, 60, 70, 1 },
	};
	struct ktune_worker *w = NULL;
	struct ktune_err e;
	int pushed, raced = 0;
	(void)state;

	ktune_ctx *ctx = open_with("", "auto");
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);
	int blas = *ktune__worker_cublas_version(w) != 0;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		struct ktune_problem p = { .key = keys[i], .alpha = 1, .seed = (unsigned)(90 + i) };
		const char *source = NULL, *first = NULL, *settled = NULL;
		assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
		const struct ktune_key *key = &ktune__worker_problem(w)->key;
		for (int call = 0; call < 4; call++) {
			struct ktune_check check;
			/* run_public waits for the device after each call: the race is done by the next */
			if (ktune__worker_run_public(w, &check, &source, &e))
				fail_msg("key %zu call %d: %s", i, call, e.msg);
			if (!check.pass)
				fail_msg("key %zu call %d (%s): error %.3g", i, call, source, check.err_fro);
			int st = measure_state(ctx, key);
			if (call == 0) {
				first = source;
				/* ktune's kernel: the race is on the stream, unread; cuBLAS decided: none */
				int own = !strcmp(first, "model") || !strcmp(first, "nearest");
				if (!own && strcmp(first, "cublas"))
					fail_msg("key %zu served first by '%s'", i, first);
				assert_int_equal(st, own && blas ? KTUNE_MEASURE_RUNNING : KTUNE_MEASURE_NONE);
				raced += own && blas;
			} else {
				assert_int_equal(st, KTUNE_MEASURE_NONE);
				if (call == 1)
					settled = source;
				else
					assert_string_equal(source, settled);
			}
		}
		if (strcmp(settled, first) && (!blas || strcmp(settled, "cublas")))
			fail_msg("key %zu: first '%s', settled on '%s'", i, first, settled);
		printf("auto: %s %s %lldx%lldx%lld first %s, settled on %s\n",
		       keys[i].dtype == KTUNE_BF16 ? "bf16" : "f16", keys[i].variant, (long long)keys[i].m,
		       (long long)keys[i].n, (long long)keys[i].k, first, settled);
	}
	if (blas)
		assert_true(raced > 0);
	ktune__worker_close(w);
	ktune_close(ctx);
}

/*
 * KTUNE_TUNE=background: an untuned key's first call queues it and returns;
 * the calls after it go on, each as fast as before, until the tune lands in
 * the database and a call is served by it ("exact"), computing right all
 * along.
 */
static void test_dispatch__background_tune_lands_while_calls_go_on(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_BF16, "nt", 48, 1536, 768, 1 };
	struct ktune_worker *w = NULL;
	struct ktune_err e;
	char db[4300];
	int pushed, calls = 0;
	double slowest = 0;
	(void)state;

	snprintf(db, sizeof(db), "%s.background.db", db_path);
	unlink(db);
	setenv("KTUNE_TUNE", "background", 1);
	setenv("KTUNE_CLI", test_program("../ktune"), 1);
	ktune_ctx *ctx = open_with(db, "model");
	unsetenv("KTUNE_TUNE");
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);
	struct ktune_problem p = { .key = key, .alpha = 1, .seed = 95 };
	assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
	const char *source = NULL;
	double until = ktune__now() + 120;
	do {
		struct ktune_check check;
		double t0 = ktune__now();
		if (ktune__worker_run_public(w, &check, &source, &e))
			fail_msg("call %d: %s", calls, e.msg);
		if (calls++ && ktune__now() - t0 > slowest) /* the first compiles the model's kernel */
			slowest = ktune__now() - t0;
		if (!check.pass)
			fail_msg("call %d (%s): error %.3g", calls, source, check.err_fro);
		if (calls == 1 && strcmp(source, "model") && strcmp(source, "nearest"))
			fail_msg("first call served by '%s'", source);
		usleep(20000);
	} while (strcmp(source, "exact") && ktune__now() < until);
	int queued, tuned, failed, skipped;
	ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
	printf("background: %d calls until 'exact' (tuned %d, failed %d), the slowest after the first %.1f ms\n",
	       calls, tuned, failed, slowest * 1e3);
	assert_string_equal(source, "exact");
	assert_int_equal(tuned, 1);
	/* the call that took the tuned entry loaded its kernel: no call waited for a compile of seconds */
	assert_true(slowest < 1.0);
	ktune__worker_close(w);
	ktune_close(ctx);
	unsetenv("KTUNE_CLI");
}

/* Several threads, each with its own stream and output, on one context. */
struct thread_arg {
	ktune_ctx *ctx;
	struct ktune_key key;
	CUdeviceptr a, b, c;
	int64_t lda, ldb, ldc;
	int calls, failures;
	char msg[256];
};

static void *thread_main(void *p)
{
	struct thread_arg *ta = p;
	CUstream stream;
	if (ktune_cu.cuCtxSetCurrent(ta->ctx->cu) || ktune_cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
		ta->failures++;
		return NULL;
	}
	for (int i = 0; i < ta->calls; i++) {
		int rc = ktune_gemm(ta->ctx, ta->key.variant[0], ta->key.variant[1], ta->key.m, ta->key.n,
				    ta->key.k, 1.0f, (void *)ta->a, ta->lda, (void *)ta->b, ta->ldb, 0.0f,
				    (void *)ta->c, ta->ldc, ta->key.dtype, stream);
		if (rc) {
			snprintf(ta->msg, sizeof(ta->msg), "%s", ktune_errmsg(ta->ctx));
			ta->failures++;
			break;
		}
	}
	ktune_cu.cuStreamSynchronize(stream);
	ktune_cu.cuStreamDestroy_v2(stream);
	return NULL;
}

static void test_dispatch__concurrent_calls_from_threads(void **state)
{
	enum { THREADS = 4 };
	struct ktune_worker *w;
	struct ktune_err e;
	struct thread_arg args[THREADS];
	pthread_t tids[THREADS];
	int pushed;
	(void)state;

	ktune_ctx *ctx;
	assert_int_equal(ktune_open(db_path, 0, &ctx, e.msg, sizeof(e.msg)), KTUNE_OK);
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);
	/* the tuned split-K key, an untuned one, and one of odd rows (cuBLAS, where installed, on 4 streams) */
	struct ktune_key keys[3] = { tuned[0], { "gemm", KTUNE_F16, "nt", 8, 4096, 4096, 1 },
				     { "gemm", KTUNE_F16, "nt", 1000, 1001, 999, 0 } };
	for (int kk = 0; kk < 3; kk++) {
		struct ktune_problem p = { .key = keys[kk], .alpha = 1, .seed = 77 };
		assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
		const struct ktune_problem *q = ktune__worker_problem(w);
		CUdeviceptr a, b, c_init, c, ref;
		ktune__worker_buffers(w, &a, &b, &c_init, &c, &ref);
		size_t cbytes = (size_t)q->ldc * (size_t)q->key.m * 2;
		for (int i = 0; i < THREADS; i++) {
			args[i] = (struct thread_arg){ ctx, q->key, a, b, 0, q->lda, q->ldb, q->ldc, 50, 0, "" };
			assert_int_equal(ktune_cu.cuMemAlloc_v2(&args[i].c, cbytes), CUDA_SUCCESS);
			assert_int_equal(ktune_cu.cuMemsetD16_v2(args[i].c, 0x7e00, cbytes / 2), CUDA_SUCCESS);
		}
		for (int i = 0; i < THREADS; i++)
			assert_int_equal(pthread_create(&tids[i], NULL, thread_main, &args[i]), 0);
		for (int i = 0; i < THREADS; i++)
			pthread_join(tids[i], NULL);
		assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
		for (int i = 0; i < THREADS; i++) {
			struct ktune_check check;
			if (args[i].failures)
				fail_msg("thread %d: %s", i, args[i].msg);
			/* check each thread's output through the worker's C buffer */
			assert_int_equal(ktune_cu.cuMemcpyDtoD_v2(c, args[i].c, cbytes), CUDA_SUCCESS);
			assert_int_equal(ktune__worker_check(w, &check, &e), KTUNE_OK);
			if (!check.pass)
				fail_msg("key %d thread %d: error %.3g, %llu NaN", kk, i, check.err_fro, check.bad);
			ktune_cu.cuMemFree_v2(args[i].c);
		}
	}
	ktune__worker_close(w);
	ktune_close(ctx);
}

/* With no database, an sm_90 GPU dispatches the tuning shipped in the library. */
static void test_dispatch__shipped_serves_an_empty_database(void **state)
{
	ktune_ctx *ctx;
	struct ktune_worker *w;
	struct ktune_err e;
	char err[512];
	int pushed;
	(void)state;

	assert_int_equal(ktune_open("", 0, &ctx, err, sizeof(err)), KTUNE_OK);
	if (strcmp(ctx->id.arch, "sm_90") || ctx->from_shipped == 0) {
		printf("no shipped tuning for %s: nothing to check\n", ctx->id.arch);
		ktune_close(ctx);
		skip();
	}
	assert_int_equal(ctx->from_device + ctx->from_arch, 0);
	/* the GPUs with a file of their own (db/sm_90/): its 96 GEMM entries, which serve before the others' */
	int mine = 0;
	for (int i = 0; i < ctx->nentries; i++)
		mine += ctx->entries[i].shipped && ctx->entries[i].same_device &&
			!strcmp(ctx->entries[i].key.op, "gemm");
	printf("%s: %d of %d shipped entries tuned on this GPU (%s)\n", ctx->id.name, mine, ctx->from_shipped,
	       ctx->shipped_names);
	if (!strcmp(ctx->id.name, "NVIDIA H100 80GB HBM3") || !strcmp(ctx->id.name, "NVIDIA H200"))
		assert_int_equal(mine, 96);
	assert_int_equal(ktune__ctx_enter(ctx, &pushed, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_open(ctx, &w, &e), KTUNE_OK);
	static const struct ktune_key keys[] = {
		{ "gemm", KTUNE_F16, "nt", 16, 4096, 4096, 1 },
		{ "gemm", KTUNE_BF16, "nn", 4096, 4096, 4096, 1 },
	};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		struct ktune_problem p = { .key = keys[i], .alpha = 1, .seed = (unsigned)(90 + i) };
		struct ktune_check check;
		const char *source = NULL;
		assert_int_equal(ktune__worker_set_problem(w, &p, &e), KTUNE_OK);
		if (ktune__worker_run_public(w, &check, &source, &e))
			fail_msg("key %zu: %s", i, e.msg);
		if (!check.pass || strcmp(source, "shipped"))
			fail_msg("key %zu: pass %d, served by '%s'", i, check.pass, source);
		struct ktune_config cfg;
		char served[256], own[256];
		ktune__dispatch_choose(ctx, &keys[i], &cfg, &source);
		ktune__gemm_config_format(&cfg, served, sizeof(served));
		for (int j = 0; j < ctx->nentries; j++) {
			const struct ktune_entry *ent = &ctx->entries[j];
			if (!ent->shipped || !ent->same_device || !ktune__key_same(&ent->key, &keys[i]))
				continue;
			ktune__gemm_config_format(&ent->cfg, own, sizeof(own));
			if (strcmp(served, own))
				fail_msg("key %zu: served %s, not this GPU's shipped %s", i, served, own);
		}
	}
	ktune__worker_close(w);
	/* an elementwise op of the suite: the H100's file has it, and serves any sm_90 GPU without its own */
	CUdeviceptr x, y;
	const int64_t n = 1 << 20;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&x, (size_t)n * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&y, (size_t)n * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemsetD16_v2(x, 0x3f80, (size_t)n), CUDA_SUCCESS); /* bf16 1.0 */
	assert_int_equal(ktune_gelu(ctx, n, (void *)x, (void *)y, KTUNE_GELU_ERF, KTUNE_BF16, NULL), KTUNE_OK);
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	unsigned short got;
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(&got, y + 2 * (n - 1), 2), CUDA_SUCCESS);
	assert_int_equal(got, 0x3f57); /* gelu(1) = 0.8413, in bf16 */
	printf("gelu bf16 erf,fwd %lld: served by %s\n", (long long)n, ktune_last_dispatch(ctx));
	assert_string_equal(ktune_last_dispatch(ctx), "shipped"); /* the H100's entry on any sm_90 GPU */
	ktune_cu.cuMemFree_v2(x);
	ktune_cu.cuMemFree_v2(y);
	ktune_close(ctx);
}

/* A config that failed before for a key is skipped next time, unless --retry-failed. */
static void test_dispatch__negative_cache_skips_failed_configs(void **state)
{
	struct ktune_tuner *t;
	struct ktune_err e;
	struct ktune_tune_report r;
	struct ktune_tune_options o = { .budget = 12, .seed = 5, .finalists = 2 };
	struct ktune_key key = { "gemm", KTUNE_F16, "nt", 64, 512, 1024, 1 };
	struct ktune_config *cfgs;
	struct ktune_trial bad = { .key = key };
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__tuner_open(db_path, 0, test_program("../ktune"), &t, &e), KTUNE_OK);
	const struct ktune_hello *dev = ktune__tuner_device(t);
	/* the candidates the tuner will sample, and a failure recorded for the first */
	assert_int_equal(ktune__gemm_candidates(&key, dev->id.arch, dev->id.sm_count, dev->smem_optin, o.budget,
						o.seed, &cfgs, &n, &pruned, &e), KTUNE_OK);
	assert_int_equal(n, 12);
	snprintf(bad.family, sizeof(bad.family), "gemm");
	ktune__gemm_config_format(&cfgs[0], bad.config, sizeof(bad.config));
	snprintf(bad.template_hash, sizeof(bad.template_hash), "%s",
		 ktune__template_hash(KTUNE_GEMM_SOURCE));
	snprintf(bad.status, sizeof(bad.status), "%s", KTUNE_TRIAL_WRONG);
	snprintf(bad.nvrtc_version, sizeof(bad.nvrtc_version), "%s", ktune__nvrtc_version());
	snprintf(bad.driver_version, sizeof(bad.driver_version), "%d.%d",
		 dev->driver_version / 1000, dev->driver_version % 1000 / 10);
	assert_int_equal(ktune__db_put_trials(ktune__tuner_db(t), &dev->id, &bad, 1, &e), KTUNE_OK);
	free(cfgs);

	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.known_bad, 1);
	assert_int_equal(r.result.candidates, 11);
	assert_string_not_equal(r.result.config, bad.config);

	o.retry_failed = 1;
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.known_bad, 0);
	assert_int_equal(r.result.candidates, 12);
	ktune__tuner_close(t);
}

/* Bad arguments come back as statuses with a message, never a crash. */
static void test_dispatch__bad_arguments(void **state)
{
	ktune_ctx *ctx;
	char err[256];
	(void)state;
	assert_int_equal(ktune_open(db_path, 0, &ctx, err, sizeof(err)), KTUNE_OK);
	void *p = (void *)(uintptr_t)0x1000;
	assert_int_equal(ktune_gemm(ctx, 'x', 'n', 4, 4, 4, 1, p, 4, p, 4, 0, p, 4, KTUNE_F16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "trans_a"));
	assert_int_equal(ktune_gemm(ctx, 'n', 'n', 0, 4, 4, 1, p, 4, p, 4, 0, p, 4, KTUNE_F16, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_gemm(ctx, 'n', 'n', 4, 4, 8, 1, p, 4, p, 4, 0, p, 4, KTUNE_F16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "lda=4"));
	assert_int_equal(ktune_gemm(ctx, 'n', 'n', 4, 4, 4, 1, NULL, 4, p, 4, 0, p, 4, KTUNE_F16, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_gemm(ctx, 'n', 'n', 4, 4, 4, 1, p, 4, p, 4, 0, p, 4, (ktune_dtype)7, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_gemm(NULL, 'n', 'n', 4, 4, 4, 1, p, 4, p, 4, 0, p, 4, KTUNE_F16, NULL),
			 KTUNE_ERR_INVALID);
	ktune_close(ctx);
	ktune_close(NULL);
	assert_int_equal(ktune_open(db_path, 999, &ctx, err, sizeof(err)), KTUNE_ERR_INVALID);
	assert_null(ctx);
	assert_non_null(strstr(err, "device 999"));
	/* a policy that is not one is refused, not taken for another */
	setenv("KTUNE_FALLBACK", "fastest", 1);
	assert_int_equal(ktune_open(db_path, 0, &ctx, err, sizeof(err)), KTUNE_ERR_INVALID);
	unsetenv("KTUNE_FALLBACK");
	assert_null(ctx);
	assert_non_null(strstr(err, "KTUNE_FALLBACK='fastest'"));
}

int main(void)
{
	int skip = gpu_test_available("test-dispatch-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dispatch__tune_then_call_through_runtime),
		cmocka_unit_test(test_dispatch__bench_times_the_tuned_keys_again),
		cmocka_unit_test(test_dispatch__cublas_serves_what_ktune_cannot),
		cmocka_unit_test(test_dispatch__auto_races_untuned_keys_against_cublas),
		cmocka_unit_test(test_dispatch__background_tune_lands_while_calls_go_on),
		cmocka_unit_test(test_dispatch__concurrent_calls_from_threads),
		cmocka_unit_test(test_dispatch__shipped_serves_an_empty_database),
		cmocka_unit_test(test_dispatch__negative_cache_skips_failed_configs),
		cmocka_unit_test(test_dispatch__bad_arguments),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
