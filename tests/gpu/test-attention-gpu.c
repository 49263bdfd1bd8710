/*
 * test-attention-gpu.c - the flash attention forward kernels on a GPU
 * against the float64 CPU reference (src/ops/attention-ref.c).  Skipped
 * where no GPU is present.
 *
 * Every config: for each variant (f16 and bf16, head dim 64, 128 and 256,
 * causal and not), every candidate the prune keeps for a long key (both
 * forward families on sm_90: the mma.sync one and attention_wgmma, which
 * runs nowhere else), and each case's default, on six cases: GQA 4 with sq < sk; GQA 8 with sq > sk
 * (causal rows that see no key) in [B, H, S, D] with padded rows; one query
 * row; one key; a square 1000 x 1000 with another scale, in an interleaved
 * (non-contiguous) layout; sq - sk = 63, which puts the causal edge on the
 * last row of a 32-, 64- or 128-row block.  Every element of O and lse is compared, and the
 * gaps between rows must stay untouched; a failure names the config, the
 * case and the element, with the value got and wanted.
 *
 * Through the public API: lengths of 4097 (and 4097 x 1000, 1000 x 4097),
 * checked on a sample of rows (the first, the last, those at the causal
 * edge and 48 random ones), and on sm_90 the same through two wgmma
 * configs of each head dim; packed tensors (NULL strides); rows that see no
 * key (zeros, lse -inf, no NaN); bad arguments.  And the tuner's own
 * problem (src/tuner/worker-op.c: its layout, reference and on-GPU check),
 * with a causal key of sq > sk, whose lse of -inf the check accepts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "attention_gpu.h"
#include "tuner/worker-op.h"

/* ------------------------------------------------------------ every config */

static const struct gcase cases[] = {
	{ 2, 127, 1000, 4, 1, BSHD, 0 },
	{ 1, 1000, 127, 8, 1, BHSD_PADDED, 0 },
	{ 3, 1, 17, 2, 2, BSHD, 0 },
	{ 1, 17, 1, 2, 2, INTERLEAVED, 0 },
	{ 1, 1000, 1000, 1, 1, INTERLEAVED, 0.2 },
	{ 1, 159, 96, 2, 1, BSHD, 0 }, /* sq - sk = 63: the causal edge on the last row of a block */
};
#define NCASES (int)(sizeof(cases) / sizeof(cases[0]))

static int run_variant(ktune_dtype dtype, int d, int causal)
{
	const struct ktune_op *op = ktune__op_find("attention");
	struct problem p[NCASES];
	struct ktune_config *cfgs = NULL;
	struct ktune_err e;
	int n = 0, failures = 0;

	for (int c = 0; c < NCASES; c++)
		problem_make(&p[c], &cases[c], d, causal, dtype, NULL, (uint64_t)(c + 1));
	/* the candidates of a long key (the most the prune admits), and each case's default */
	struct ktune_key rep = key_of(&p[0]);
	rep.m = rep.n = 4096;
	rep.k = 64;
	assert_int_equal(ktune__op_candidates(op, &rep, ctx->id.arch, sm_count, 0, 1, &cfgs, &n, NULL, &e), 0);
	int wgmma = 0;
	for (int i = 0; i < n; i++)
		wgmma += cfgs[i].family == KTUNE_ATTN_FAMILY_WGMMA;
	/* the wgmma family on sm_90, and only there */
	if (ktune__op_family_runs(op, KTUNE_ATTN_FAMILY_WGMMA, ctx->id.arch))
		assert_true(wgmma > 0);
	else
		assert_int_equal(wgmma, 0);
	struct job *jobs = calloc((size_t)(n + NCASES), sizeof(*jobs));
	assert_non_null(jobs);
	for (int i = 0; i < n; i++)
		jobs[i] = (struct job){ .key = rep, .cfg = cfgs[i] };
	for (int c = 0; c < NCASES; c++) {
		struct ktune_key k = key_of(&p[c]);
		op->key_bucket(&k);
		jobs[n + c] = (struct job){ .key = rep, .cfg = op->default_config(&k, sm_count) };
	}
	ktune__parallel_for(n + NCASES, 0, compile_job, jobs);

	for (int i = 0; i < n + NCASES; i++) {
		struct job *j = &jobs[i];
		struct ktune_kernel *kernel;
		char cfg[160], what[400], name[160];
		ktune__op_config_format(op, &j->cfg, cfg, sizeof(cfg));
		if (!j->compiled) {
			fprintf(stderr, "FAIL attention %s: %s\n", cfg, j->err);
			failures++;
			continue;
		}
		pthread_mutex_lock(&ctx->lock);
		int rc = ktune__kernel_get(ctx, &j->key, &j->cfg, &j->cubin, &kernel, &e);
		pthread_mutex_unlock(&ctx->lock);
		ktune__cubin_free(&j->cubin);
		if (rc) {
			fprintf(stderr, "FAIL attention %s: %s\n", cfg, e.msg);
			failures++;
			continue;
		}
		/* a new family's kernel that hangs is named by the last line before the timeout */
		if (j->cfg.family == KTUNE_ATTN_FAMILY_WGMMA) {
			fprintf(stderr, "attention_wgmma %s d%d%s %s\n", dtype == KTUNE_BF16 ? "bf16" : "f16", d,
				causal ? " causal" : "", cfg);
			fflush(stderr);
		}
		for (int c = 0; c < NCASES; c++) {
			struct ktune_attention_args a = args_of(&p[c]);
			struct ktune_key key;
			struct ktune_op_call call;
			case_name(&p[c], name, sizeof(name));
			snprintf(what, sizeof(what), "attention %s%s: %s", cfg, i >= n ? " (a default)" : "", name);
			assert_int_equal(ktune__attention_fwd_call(&a, &key, &call, &e), 0);
			problem_poison(&p[c]);
			if (ktune__op_launch(ctx, kernel, &key, &j->cfg, &call, NULL, &e) ||
			    ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS) {
				fprintf(stderr, "FAIL %s: %s\n", what, e.msg);
				fail_msg("%s: the launch failed; the GPU may be in an error state", what);
			}
			failures += problem_check(&p[c], what) > 0;
		}
	}
	printf("attention %s d%d%s: %d configs (%d of them wgmma) x %d cases, %d failed\n",
	       dtype == KTUNE_BF16 ? "bf16" : "f16", d, causal ? " causal" : "", n + NCASES, wgmma, NCASES, failures);
	for (int c = 0; c < NCASES; c++)
		problem_free(&p[c]);
	free(jobs);
	free(cfgs);
	return failures;
}

static void test_attention_gpu__every_config(void **state)
{
	(void)state;
	static const int dims[] = { 64, 128, 256 };
	int failures = 0;
	for (int t = 0; t < 2; t++)
		for (int d = 0; d < 3; d++)
			for (int causal = 0; causal <= 1; causal++)
				failures += run_variant(t ? KTUNE_F16 : KTUNE_BF16, dims[d], causal);
	assert_int_equal(failures, 0);
}

/* ------------------------------------------------------------ the public API */

/* Rows to check of a long case: the first and last, those at the causal edge, and 48 random ones. */
static unsigned char *sample_rows(const struct gcase *c, uint64_t seed)
{
	unsigned char *s = calloc((size_t)c->sq, 1);
	assert_non_null(s);
	s[0] = s[c->sq - 1] = 1;
	for (int64_t i = c->sq - c->sk - 2; i <= c->sq - c->sk + 2; i++)
		if (i >= 0 && i < c->sq)
			s[i] = 1;
	for (int r = 0; r < 48; r++)
		s[next(&seed) % (uint64_t)c->sq] = 1;
	return s;
}

static void test_attention_gpu__long_sampled(void **state)
{
	(void)state;
	static const struct gcase longs[] = {
		{ 1, 4097, 4097, 4, 2, BSHD, 0 },
		{ 2, 4097, 1000, 2, 1, BHSD_PADDED, 0 },
		{ 1, 1000, 4097, 2, 2, INTERLEAVED, 0 },
	};
	static const int dims[] = { 64, 128, 256 };
	int failures = 0;
	for (size_t c = 0; c < sizeof(longs) / sizeof(longs[0]); c++)
		for (int d = 0; d < 3; d++)
			for (int causal = 0; causal <= 1; causal++) {
				ktune_dtype dtype = (c + (size_t)d) % 2 ? KTUNE_F16 : KTUNE_BF16;
				struct problem p;
				char what[200];
				unsigned char *sample = sample_rows(&longs[c], c * 6 + (size_t)d * 2 + (size_t)causal + 1);
				problem_make(&p, &longs[c], dims[d], causal, dtype, sample, c + 11);
				case_name(&p, what, sizeof(what));
				problem_poison(&p);
				struct ktune_attention_args a = args_of(&p);
				int rc = ktune_attention_fwd(ctx, a.batch, a.sq, a.sk, a.hq, a.hkv, a.head_dim, a.q, a.q_strides,
							     a.k, a.k_strides, a.v, a.v_strides, a.o, a.o_strides, a.lse,
							     a.scale, a.causal, a.dtype, NULL);
				if (rc)
					fail_msg("%s: %s", what, ktune_errmsg(ctx));
				failures += problem_check(&p, what) > 0;
				problem_free(&p);
				free(sample);
			}
	assert_int_equal(failures, 0);
}

/*
 * The long cases again through a wgmma config of each head dim (sm_90
 * only): thousands of keys go round the shared-memory ring many times, and
 * many blocks of query rows.  The configs are the ones FlashAttention-3
 * runs (two consumers, 128 keys a tile; 80 at D = 256), both overlaps.
 */
static void test_attention_gpu__long_sampled_wgmma(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("attention");
	if (!ktune__op_family_runs(op, KTUNE_ATTN_FAMILY_WGMMA, ctx->id.arch)) {
		printf("no wgmma on %s: skipped\n", ctx->id.arch);
		return;
	}
	static const struct gcase longs[] = {
		{ 1, 4097, 4097, 4, 2, BSHD, 0 },
		{ 2, 4097, 1000, 2, 1, BHSD_PADDED, 0 },
		{ 1, 1000, 4097, 2, 2, INTERLEAVED, 0 },
	};
	static const int dims[] = { 64, 128, 256 };
	static const char *const cfgs[][2] = { { "BLOCK_N=128,STAGES=2,CONSUMERS=2,OVERLAP=1",
						 "BLOCK_N=128,STAGES=3,CONSUMERS=2,OVERLAP=0" },
					       { "BLOCK_N=128,STAGES=2,CONSUMERS=2,OVERLAP=1",
						 "BLOCK_N=176,STAGES=2,CONSUMERS=2,OVERLAP=0" },
					       { "BLOCK_N=80,STAGES=2,CONSUMERS=2,OVERLAP=1",
						 "BLOCK_N=64,STAGES=2,CONSUMERS=1,OVERLAP=0" } };
	int failures = 0;
	for (size_t c = 0; c < sizeof(longs) / sizeof(longs[0]); c++)
		for (int d = 0; d < 3; d++)
			for (int causal = 0; causal <= 1; causal++)
				for (int v = 0; v < 2; v++) {
					ktune_dtype dtype = (c + (size_t)d + (size_t)v) % 2 ? KTUNE_F16 : KTUNE_BF16;
					struct problem p;
					struct ktune_config cfg;
					struct ktune_kernel *kernel;
					struct ktune_key key;
					struct ktune_op_call call;
					struct ktune_err e;
					char what[300], name[200];
					uint64_t seed = c * 12 + (size_t)d * 4 + (size_t)causal * 2 + (size_t)v + 1;
					unsigned char *sample = sample_rows(&longs[c], seed);
					problem_make(&p, &longs[c], dims[d], causal, dtype, sample, c + 21);
					case_name(&p, name, sizeof(name));
					snprintf(what, sizeof(what), "attention_wgmma %s: %s", cfgs[d][v], name);
					assert_int_equal(ktune__op_config_parse(op, "attention_wgmma", cfgs[d][v], &cfg, &e), 0);
					struct ktune_attention_args a = args_of(&p);
					assert_int_equal(ktune__attention_fwd_call(&a, &key, &call, &e), 0);
					pthread_mutex_lock(&ctx->lock);
					int rc = ktune__kernel_get(ctx, &key, &cfg, NULL, &kernel, &e);
					pthread_mutex_unlock(&ctx->lock);
					if (rc)
						fail_msg("%s: %s", what, e.msg);
					problem_poison(&p);
					fprintf(stderr, "%s\n", what);
					fflush(stderr);
					if (ktune__op_launch(ctx, kernel, &key, &cfg, &call, NULL, &e) ||
					    ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS)
						fail_msg("%s: the launch failed (%s); the GPU may be in an error state", what,
							 e.msg);
					failures += problem_check(&p, what) > 0;
					problem_free(&p);
					free(sample);
				}
	assert_int_equal(failures, 0);
}

/* Packed tensors (NULL strides), causal with sq > sk: the first rows see no key. */
static void test_attention_gpu__packed_and_rows_without_keys(void **state)
{
	(void)state;
	const struct gcase c = { 2, 300, 100, 4, 2, BSHD, 0 };
	struct problem p;
	char what[200];
	problem_make(&p, &c, 128, 1, KTUNE_BF16, NULL, 5);
	case_name(&p, what, sizeof(what));
	problem_poison(&p);
	assert_int_equal(ktune_attention_fwd(ctx, 2, 300, 100, 4, 2, 128, (void *)p.q.dev, NULL, (void *)p.k.dev, NULL,
					     (void *)p.v.dev, NULL, (void *)p.o.dev, NULL, (float *)p.lse, (float)p.scale, 1,
					     KTUNE_BF16, NULL),
			 KTUNE_OK);
	assert_int_equal(problem_check(&p, what), 0);
	/* rows 0..199 see no key: exactly zero and -inf */
	assert_true(isinf(p.lse_got[0]) && p.lse_got[0] < 0 && isinf(p.lse_got[199]));
	assert_false(isinf(p.lse_got[200]));
	problem_free(&p);
}

static void test_attention_gpu__bad_arguments(void **state)
{
	(void)state;
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
	void *x = (void *)d;
	float *lse = (float *)(d + 65536);
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 3, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, lse, 0.125f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "hq = 3 is not a multiple of hkv = 2"));
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 2, 2, 96, x, NULL, x, NULL, x, NULL, x, NULL, lse, 0.125f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "head_dim 96"));
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, lse, -1.0f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "scale"));
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 2, 2, 64, (char *)x + 2, NULL, x, NULL, x, NULL, x, NULL,
					     lse, 0.125f, 0, KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "16-byte aligned"));
	const int64_t odd[3] = { 8 * 64 * 2, 2 * 64 + 4, 64 };
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 2, 2, 64, x, odd, x, NULL, x, NULL, x, NULL, lse, 0.125f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 0, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, lse, 0.125f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, NULL, 0.125f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "lse is NULL"));
	assert_int_equal(ktune_attention_fwd(ctx, 1, 8, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, lse, 0.125f, 0,
					     KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	/* nothing to do */
	assert_int_equal(ktune_attention_fwd(ctx, 0, 8, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, lse, 0.125f, 0,
					     KTUNE_BF16, NULL),
			 KTUNE_OK);
	ktune_cu.cuMemFree_v2(d);
}

/* The tuner's problem: q, k, v shared by every head, its reference and the on-GPU check, lse -inf included. */
static void test_attention_gpu__tuner_problem(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("attention");
	static const char *const masks[] = { "none", "causal" };
	for (int m = 0; m < 2; m++) {
		struct ktune_key key = { .op = "attention", .dtype = KTUNE_BF16, .m = 256, .n = 128, .k = 8, .aligned = 1 };
		const char *values[] = { "fwd", "128", masks[m], "4", NULL, NULL, NULL };
		struct ktune_op_problem *p;
		struct ktune_config *cfgs = NULL;
		struct ktune_err e;
		int n = 0;
		assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
		if (ktune__op_problem_open(ctx, &key, 1, 0, &p, &e))
			fail_msg("%s", e.msg);
		assert_int_equal(ktune__op_candidates(op, &p->key, ctx->id.arch, sm_count, 4, 3, &cfgs, &n, NULL, &e), 0);
		for (int i = -1; i < n; i++) {
			struct ktune_config cfg = i < 0 ? op->default_config(&p->key, sm_count) : cfgs[i];
			struct ktune_kernel *k;
			struct ktune_check check;
			char text[160];
			ktune__op_config_format(op, &cfg, text, sizeof(text));
			pthread_mutex_lock(&ctx->lock);
			int rc = ktune__kernel_get(ctx, &p->key, &cfg, NULL, &k, &e);
			pthread_mutex_unlock(&ctx->lock);
			if (rc || ktune__op_problem_poison(p, &e) || ktune__op_launch(ctx, k, &p->key, &cfg, &p->call, NULL, &e) ||
			    ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS || ktune__op_problem_check(p, &check, &e))
				fail_msg("attention %s %s: %s", masks[m], text, e.msg);
			if (!check.pass)
				fail_msg("attention %s %s (the tuner's problem): err_fro %.3g, worst %.3g, %llu NaN/Inf", masks[m],
					 text, check.err_fro, check.err_max, check.bad);
		}
		free(cfgs);
		ktune__op_problem_close(p);
	}
}

int main(void)
{
	int skip = gpu_test_available("test-attention-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attention_gpu__bad_arguments),
		cmocka_unit_test(test_attention_gpu__packed_and_rows_without_keys),
		cmocka_unit_test(test_attention_gpu__tuner_problem),
		cmocka_unit_test(test_attention_gpu__long_sampled),
		cmocka_unit_test(test_attention_gpu__long_sampled_wgmma),
		cmocka_unit_test(test_attention_gpu__every_config),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
