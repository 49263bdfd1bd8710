/*
 * test-quant-gpu.c - the weight-quantized GEMM (gemm_quant: qgemv.cu,
 * qgemm.cu, qmma.cu, qcode.cu, qwgmma.cu, qfrag.cu and the split-K sum) on a GPU against its float64 reference
 * (src/ops/quant-ref.c).  Skipped where no GPU is present.
 *
 * Every config: through the tuner's own problem (src/tuner/worker-op.c:
 * seeded inputs, random packed words, padding included, the reference,
 * outputs poisoned with NaN, the on-GPU check against the tolerance):
 *   - every candidate the prune keeps, with the default, for three keys of
 *     4-bit, group-128 weights: m = 1 (the GEMV's), 16 and 128 (the tiled
 *     kernel's) on a 4104 x 4096 weight (4104 x 384 at m = 128);
 *   - the default alone, every bits x mode x group, bf16 and f16 in
 *     turns, m in {1, 3, 8, 16, 33} on n = 8 (k = three groups) and 4104
 *     (k = 4096);
 *   - every bits x mode x group in bf16, a quarter of them in f16 too, on
 *     m in {1, 3, 16, 33, 128} x n in {1, 8, 4104}, k = three groups (160
 *     per channel): the default and a seeded sample of 2 candidates each.
 *     KTUNE_TEST_FULL=1: every candidate of every one of those keys.
 *   - the qmma family alone (its fragments' k-permutation, tails of
 *     k-blocks, clamped rows): every bits x mode, groups of 32, 128 and per
 *     channel, bf16 and f16 in turns, on m in {1, 3, 16, 33, 128} x n in
 *     {8, 4104}, k = 3 groups and 4096: a seeded sample of
 *     KTUNE_TEST_QMMA_SAMPLE (default 8) of its candidates a key, all of
 *     them with KTUNE_TEST_QMMA_SAMPLE=0 (or KTUNE_TEST_FULL=1);
 *   - the qcode family alone the same way (KTUNE_TEST_QCODE_SAMPLE), the
 *     qfrag family on m in {1, 3, 8, 16} (KTUNE_TEST_QFRAG_SAMPLE), and
 *     the qwgmma family on m in {33, 64, 128, 200}
 *     (KTUNE_TEST_QWGMMA_SAMPLE; sm_90 only: elsewhere it has no
 *     candidate and the test says so).
 * Through the public API: weights quantised on the host by
 * ktune_quant_pack, uploaded and multiplied with strides past the rows
 * (lda, ldc), every mode with a zero per group and a scalar zero, with and
 * without bias, against the float64 product of the dequantised weights;
 * twice, bit-identical (the split partials are added in order), and
 * captured in a CUDA graph and replayed, bit-identical again; the
 * argument errors (bad format, k not a multiple of the group, misaligned
 * buffers and strides, NULL buffers the mode needs) with their reasons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "ops/quant-ref.h"
#include "runtime/context.h"
#include "tuner/worker-op.h"

static ktune_ctx *ctx;
static int sm_count;
static int failures;

static const char *const bits_names[] = { "8", "4", "2", "1" };
static const char *const group_names[] = { "32", "64", "128", "chan" };
static const int group_sizes[] = { 32, 64, 128, 0 };
static const char *const mode_names[] = { "scale_shift", "scale", "shift", "fma" };

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	struct ktune_cubin cubin;
	int compiled;
	char err[512];
};

static void compile_job(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	struct ktune_err e;
	if (ktune__kernel_compile(&j->key, &j->cfg, ctx->id.arch, NULL, &j->cubin, &e))
		snprintf(j->err, sizeof(j->err), "%.500s", e.msg);
	else
		j->compiled = 1;
}

/*
 * One key's problem, and `budget` of its candidates (0: all, -1: none)
 * with the default, each run and checked; family >= 0: only that family's
 * candidates (a seeded sample of `budget` of them), without the default.
 */
static void run_key_family(struct ktune_key key, int budget, int family)
{
	const struct ktune_op *op = ktune__op_of(&key);
	struct ktune_op_problem *p;
	struct ktune_config *cfgs = NULL;
	struct ktune_err e;
	char what[128];
	int n = 0, npruned = 0;

	ktune__key_format(&key, what, sizeof(what));
	if (ktune__op_problem_open(ctx, &key, 1, 0, &p, &e))
		fail_msg("%s: %s", what, e.msg);
	key = p->key;
	if (budget >= 0)
		assert_int_equal(ktune__op_candidates(op, &key, ctx->id.arch, sm_count, family >= 0 ? 0 : budget, 7, &cfgs,
						      &n, &npruned, &e), 0);
	if (family >= 0) {
		int kept = 0;
		for (int i = 0; i < n; i++)
			if (cfgs[i].family == family)
				cfgs[kept++] = cfgs[i];
		n = kept;
		if (budget > 0 && n > budget) {
			ktune__sample_configs(cfgs, n, budget, 7);
			n = budget;
		}
	}
	int first = family >= 0; /* jobs[0], the default, is skipped for one family */
	struct job *jobs = calloc((size_t)n + 1, sizeof(*jobs));
	assert_non_null(jobs);
	jobs[0] = (struct job){ .key = key, .cfg = op->default_config(&key, sm_count) };
	for (int i = 0; i < n; i++)
		jobs[i + 1] = (struct job){ .key = key, .cfg = cfgs[i] };
	ktune__parallel_for(n + 1 - first, 0, compile_job, jobs + first);
	for (int i = first; i <= n; i++) {
		struct job *j = &jobs[i];
		struct ktune_kernel *k;
		struct ktune_check check;
		char cfg[200];
		snprintf(cfg, sizeof(cfg), "%s ", op->families[j->cfg.family].name);
		ktune__op_config_format(op, &j->cfg, cfg + strlen(cfg), sizeof(cfg) - strlen(cfg));
		if (!j->compiled) {
			fprintf(stderr, "FAIL %s %s: %s\n", what, cfg, j->err);
			failures++;
			continue;
		}
		pthread_mutex_lock(&ctx->lock);
		int rc = ktune__kernel_get(ctx, &key, &j->cfg, &j->cubin, &k, &e);
		pthread_mutex_unlock(&ctx->lock);
		ktune__cubin_free(&j->cubin);
		if (rc || ktune__op_problem_poison(p, &e) ||
		    ktune__op_launch(ctx, k, &key, &j->cfg, &p->call, NULL, &e) ||
		    ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS || ktune__op_problem_check(p, &check, &e)) {
			fprintf(stderr, "FAIL %s %s: %s\n", what, cfg, rc ? e.msg : "launch or check failed");
			failures++;
			fail_msg("%s: the GPU may be in an error state", what);
		}
		if (!check.pass) {
			fprintf(stderr, "FAIL %s %s: err_fro %.3g, worst %.3g, %llu NaN/Inf\n", what, cfg, check.err_fro,
				check.err_max, check.bad);
			failures++;
		}
	}
	printf("%s: %d configs%s (%d pruned)\n", what, n + 1 - first, first ? " of one family" : "", npruned);
	free(jobs);
	free(cfgs);
	ktune__op_problem_close(p);
}

static void run_key(struct ktune_key key, int budget)
{
	run_key_family(key, budget, -1);
}

static struct ktune_key quant_key(ktune_dtype d, int b, int g, int mode, int64_t m, int64_t n, int64_t k)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	struct ktune_key key = { .op = "gemm_quant", .dtype = d, .m = m, .n = n, .k = k, .aligned = 1 };
	const char *values[] = { bits_names[b], group_names[g], mode_names[mode], NULL, NULL, NULL, NULL };
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), KTUNE_OK);
	op->key_bucket(&key);
	key.m = m; /* the call's own rows: the tuned bucket's config on an awkward m */
	return key;
}

static void test_quant_gpu__every_candidate(void **state)
{
	(void)state;
	failures = 0;
	run_key(quant_key(KTUNE_BF16, 1, 2, 0, 1, 4104, 4096), 0);
	run_key(quant_key(KTUNE_BF16, 1, 2, 0, 16, 4104, 4096), 0);
	run_key(quant_key(KTUNE_BF16, 1, 2, 0, 128, 4104, 384), 0);
	assert_int_equal(failures, 0);
}

static void test_quant_gpu__every_format_awkward_shapes(void **state)
{
	(void)state;
	static const int64_t ms[] = { 1, 3, 16, 33, 128 }, ns[] = { 1, 8, 4104 };
	int full = getenv("KTUNE_TEST_FULL") && !strcmp(getenv("KTUNE_TEST_FULL"), "1"), f = 0;
	failures = 0;
	for (int b = 0; b < 4; b++)
		for (int g = 0; g < 4; g++)
			for (int mode = 0; mode < 4; mode++, f++)
				for (int d = 0; d < (f % 4 == 0 ? 2 : 1); d++)
					for (int mi = 0; mi < 5; mi++)
						for (int ni = 0; ni < 3; ni++) {
							int64_t k = group_sizes[g] ? 3 * group_sizes[g] : 160;
							run_key(quant_key(d ? KTUNE_F16 : KTUNE_BF16, b, g, mode, ms[mi], ns[ni], k),
								full ? 0 : 2);
						}
	assert_int_equal(failures, 0);
}

/*
 * The untuned default alone (qfrag's up to 16 rows of A, where k holds its
 * steps): every bits x mode x group, bf16 and f16 in turns, m in {1, 3, 8,
 * 16, 33} on n = 8 with k of three groups (160 per channel) and n = 4104
 * with k = 4096.
 */
static void test_quant_gpu__default_every_format(void **state)
{
	(void)state;
	static const int64_t ms[] = { 1, 3, 8, 16, 33 };
	int f = 0;
	failures = 0;
	for (int b = 0; b < 4; b++)
		for (int g = 0; g < 4; g++)
			for (int mode = 0; mode < 4; mode++, f++)
				for (int mi = 0; mi < 5; mi++)
					for (int big = 0; big < 2; big++) {
						int64_t k = big ? 4096 : group_sizes[g] ? 3 * group_sizes[g] : 160;
						run_key(quant_key(f % 2 ? KTUNE_F16 : KTUNE_BF16, b, g, mode, ms[mi], big ? 4104 : 8, k),
							-1);
					}
	assert_int_equal(failures, 0);
}

/* The rows of A of the one-family tests: one, odd, a tile, odd past a tile, many. */
static const int64_t few_and_many[] = { 1, 3, 16, 33, 128 };

/*
 * One family alone on awkward and full-size shapes (rows of A: ms): every bits x mode,
 * groups of 32, 128 and per channel, bf16 and f16 in turns; a seeded
 * sample of the family's candidates a key, its size from the environment
 * variable `sample_env` (default 8; 0 or KTUNE_TEST_FULL=1: all).
 */
static void one_family_every_format(const char *name, const char *sample_env, const int64_t *ms, int nms)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	static const int64_t ns[] = { 8, 4104 };
	static const int gs[] = { 0, 2, 3 }; /* groups of 32, 128, per channel */
	const char *env = getenv(sample_env), *full = getenv("KTUNE_TEST_FULL");
	int budget = full && !strcmp(full, "1") ? 0 : env ? atoi(env) : 8, family = -1, f = 0;
	for (int i = 0; i < op->nfamilies; i++)
		if (!strcmp(op->families[i].name, name))
			family = i;
	assert_true(family >= 0);
	failures = 0;
	for (int b = 0; b < 4; b++)
		for (int mode = 0; mode < 4; mode++)
			for (int gi = 0; gi < 3; gi++, f++)
				for (int mi = 0; mi < nms; mi++)
					for (int ni = 0; ni < 2; ni++) {
						int64_t k = (ni == 1 && mi % 2 == 0) ? 4096 : group_sizes[gs[gi]] ? 3 * group_sizes[gs[gi]] : 160;
						run_key_family(quant_key(f % 2 ? KTUNE_F16 : KTUNE_BF16, b, gs[gi], mode, ms[mi], ns[ni], k),
							       budget, family);
					}
	assert_int_equal(failures, 0);
}

/* qmma: its k-permutation, k-block tails and clamped rows. */
static void test_quant_gpu__qmma_every_format(void **state)
{
	(void)state;
	one_family_every_format("qmma", "KTUNE_TEST_QMMA_SAMPLE", few_and_many, 5);
}

/* qwgmma: its fragments from the packed rows, the swizzled ring, half stages at the end of k, tiles of rows past m. */
static void test_quant_gpu__qwgmma_every_format(void **state)
{
	(void)state;
	static const int64_t many[] = { 33, 64, 128, 200 }; /* its tiles hold 64 rows of A or more */
	one_family_every_format("qwgmma", "KTUNE_TEST_QWGMMA_SAMPLE", many, 4);
}

/* qcode: its swapped k-permutation, codes as integers, the per-k-block fold of the sums, passes of rows of A. */
static void test_quant_gpu__qcode_every_format(void **state)
{
	(void)state;
	one_family_every_format("qcode", "KTUNE_TEST_QCODE_SAMPLE", few_and_many, 5);
}

/* qfrag: its k-permutation of pairs, chunks past k, clamped rows of W, passes of rows of A. */
static void test_quant_gpu__qfrag_every_format(void **state)
{
	(void)state;
	static const int64_t few[] = { 1, 3, 8, 16 }; /* it holds 16 rows of A at most */
	one_family_every_format("qfrag", "KTUNE_TEST_QFRAG_SAMPLE", few, 4);
}

/* ------------------------------------------------------------ the public API */

static CUdeviceptr upload(const void *host, size_t bytes)
{
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, bytes + 64), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d, host, bytes), CUDA_SUCCESS);
	return d;
}

static void download(void *host, CUdeviceptr d, size_t bytes)
{
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(host, d, bytes), CUDA_SUCCESS);
}

static double uniform(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

/*
 * A weight quantised on the host (ktune_quant_pack), multiplied on the GPU
 * with row strides past the rows, against the float64 product of its
 * dequantised values; twice and in a CUDA graph, bit-identical.
 */
static void api_case(ktune_quant_mode mode, int zero_scalar, int with_bias, ktune_dtype dt)
{
	enum { M = 5, N = 37, K = 256, LDA = K + 8, LDC = N + 3 };
	ktune_quant_format f = { 4, 64, mode, zero_scalar };
	int64_t nw, ns, nz;
	uint64_t seed = 5 + (uint64_t)mode * 4 + (uint64_t)zero_scalar * 2 + (uint64_t)with_bias;
	assert_int_equal(ktune_quant_sizes(&f, N, K, &nw, &ns, &nz, NULL, 0), KTUNE_OK);
	uint16_t w[N * K], a[M * LDA], bias[N], c1[M * LDC], c2[M * LDC], sc[N * 4 + 1], ze[N * 4 + 1];
	uint32_t *wq = malloc((size_t)nw * 4);
	assert_non_null(wq);
	for (int i = 0; i < N * K; i++) /* shift: integer weights the codes hold */
		w[i] = ktune__quant_to_elem(mode == KTUNE_QUANT_SHIFT ? floor(16 * uniform(&seed)) - 8 : 2 * uniform(&seed) - 1, dt);
	for (int i = 0; i < M * LDA; i++)
		a[i] = ktune__quant_to_elem((2 * uniform(&seed) - 1) / 32, dt);
	for (int i = 0; i < N; i++)
		bias[i] = ktune__quant_to_elem(uniform(&seed) - 0.5, dt);
	assert_int_equal(ktune_quant_pack(&f, N, K, w, K, dt, wq, sc, ze), KTUNE_OK);

	CUdeviceptr d_a = upload(a, sizeof(a)), d_wq = upload(wq, (size_t)nw * 4), d_s = upload(sc, sizeof(sc));
	CUdeviceptr d_z = upload(ze, sizeof(ze)), d_b = upload(bias, sizeof(bias)), d_c;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d_c, sizeof(c1)), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemsetD8_v2(d_c, 0xff, sizeof(c1)), CUDA_SUCCESS);
	const void *scales = ns ? (void *)d_s : NULL, *zeros = nz ? (void *)d_z : NULL, *b = with_bias ? (void *)d_b : NULL;
	assert_int_equal(ktune_gemm_quant(ctx, &f, M, N, K, (void *)d_a, LDA, (uint32_t *)d_wq, scales, zeros, b,
					  (void *)d_c, LDC, dt, NULL), KTUNE_OK);
	download(c1, d_c, sizeof(c1));

	/* the reference: the packed weight dequantised (float64), times a */
	struct ktune_quant_shape s;
	assert_int_equal(ktune__quant_shape(&f, N, K, &s, NULL), KTUNE_OK);
	double *ad = malloc(sizeof(double) * M * LDA), *wd = malloc(sizeof(double) * (size_t)nw);
	double sd[N * 4 + 1], zd[N * 4 + 1], bd[N], want[M * LDC];
	assert_true(ad && wd);
	for (int i = 0; i < M * LDA; i++)
		ad[i] = ktune__quant_from_elem(a[i], dt);
	for (int64_t i = 0; i < nw; i++)
		wd[i] = wq[i];
	for (int i = 0; i < N * 4 + 1; i++) {
		sd[i] = ktune__quant_from_elem(sc[i], dt);
		zd[i] = ktune__quant_from_elem(ze[i], dt);
	}
	for (int i = 0; i < N; i++)
		bd[i] = ktune__quant_from_elem(bias[i], dt);
	ktune__ref_gemm_quant(&s, M, ad, LDA, wd, sd, zd, with_bias ? bd : NULL, want, LDC);
	double tol = dt == KTUNE_BF16 ? 1.6e-2 : 2e-3;
	for (int i = 0; i < M; i++)
		for (int j = 0; j < LDC; j++) {
			uint16_t got = c1[i * LDC + j];
			if (j >= N) { /* past the row: untouched */
				assert_int_equal(got, 0xffff);
				continue;
			}
			double g = ktune__quant_from_elem(got, dt), r = want[i * LDC + j];
			if (!(fabs(g - r) <= tol * (fabs(r) > 1 ? fabs(r) : 1)))
				fail_msg("mode %d zero %s bias %d %s: c[%d, %d] = %g, want %g", (int)mode,
					 zero_scalar ? "scalar" : "per group", with_bias, dt == KTUNE_BF16 ? "bf16" : "f16", i, j, g, r);
		}

	/* again: the same bits */
	assert_int_equal(ktune_cu.cuMemsetD8_v2(d_c, 0xff, sizeof(c1)), CUDA_SUCCESS);
	assert_int_equal(ktune_gemm_quant(ctx, &f, M, N, K, (void *)d_a, LDA, (uint32_t *)d_wq, scales, zeros, b,
					  (void *)d_c, LDC, dt, NULL), KTUNE_OK);
	download(c2, d_c, sizeof(c2));
	assert_memory_equal(c1, c2, sizeof(c1));

	/* captured in a CUDA graph (a split call's scratch from the graph's memory nodes), replayed */
	{
		CUstream st;
		CUgraph g;
		CUgraphExec x;
		assert_int_equal(ktune_cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuMemsetD8_v2(d_c, 0xff, sizeof(c1)), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
		int rc = ktune_gemm_quant(ctx, &f, M, N, K, (void *)d_a, LDA, (uint32_t *)d_wq, scales, zeros, b,
					  (void *)d_c, LDC, dt, st);
		assert_int_equal(ktune_cu.cuStreamEndCapture(st, &g), CUDA_SUCCESS);
		assert_int_equal(rc, KTUNE_OK);
		assert_int_equal(ktune_cu.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
		for (int replay = 0; replay < 2; replay++) {
			assert_int_equal(ktune_cu.cuGraphLaunch(x, st), CUDA_SUCCESS);
			assert_int_equal(ktune_cu.cuStreamSynchronize(st), CUDA_SUCCESS);
			download(c2, d_c, sizeof(c2));
			assert_memory_equal(c1, c2, sizeof(c1));
		}
		ktune_cu.cuGraphExecDestroy(x);
		ktune_cu.cuGraphDestroy(g);
		ktune_cu.cuStreamDestroy_v2(st);
	}
	CUdeviceptr all[] = { d_a, d_wq, d_s, d_z, d_b, d_c };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
	free(wq);
	free(ad);
	free(wd);
}

static void test_quant_gpu__packed_on_the_host_every_mode(void **state)
{
	(void)state;
	for (int mode = 0; mode < 4; mode++)
		for (int zs = 0; zs <= 1; zs++)
			for (int bias = 0; bias <= 1; bias++)
				api_case((ktune_quant_mode)mode, zs, bias, mode % 2 ? KTUNE_F16 : KTUNE_BF16);
}

static void expect_invalid(int rc, const char *words)
{
	assert_int_equal(rc, KTUNE_ERR_INVALID);
	if (!strstr(ktune_errmsg(ctx), words))
		fail_msg("'%s' does not say '%s'", ktune_errmsg(ctx), words);
}

static void test_quant_gpu__bad_arguments(void **state)
{
	(void)state;
	CUdeviceptr buf;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&buf, 1 << 20), CUDA_SUCCESS);
	char *p = (char *)(uintptr_t)buf;
	ktune_quant_format f = { 4, 128, KTUNE_QUANT_SCALE_SHIFT, 0 };
	void *a = p, *s = p + 65536, *z = p + 131072, *c = p + 196608;
	uint32_t *wq = (uint32_t *)(p + 262144);

	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 96, a, 96, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "k = 96 is not a multiple of the group size 128");
	f.group_size = 48;
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "group size 48 is not one of 32, 64, 128 or 0");
	f.group_size = 128;
	f.bits = 3;
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "bits 3");
	f.bits = 4;
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 400, a, 400, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "not a multiple of 32");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, p + 2, 384, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "a (");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 388, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "lda = 388 is not a multiple of 8");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, (uint32_t *)(p + 262148), s, z, NULL, c, 64,
					KTUNE_BF16, NULL),
		       "wq (");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, p + 65537, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "scales (");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, NULL, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "scales is NULL");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, s, NULL, NULL, c, 64, KTUNE_BF16, NULL),
		       "zeros is NULL");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 100, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "lda = 100 or ldc = 64 is less than");
	expect_invalid(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, s, z, NULL, c, 64, KTUNE_F32, NULL),
		       "dtype 2 is not f16 or bf16");
	expect_invalid(ktune_gemm_quant(ctx, NULL, 4, 64, 384, a, 384, wq, s, z, NULL, c, 64, KTUNE_BF16, NULL),
		       "the format is NULL");
	/* the modes without a scale or a zero take NULL for it */
	f.mode = KTUNE_QUANT_SCALE;
	assert_int_equal(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, s, NULL, NULL, c, 64, KTUNE_BF16, NULL), KTUNE_OK);
	f.mode = KTUNE_QUANT_SHIFT;
	assert_int_equal(ktune_gemm_quant(ctx, &f, 4, 64, 384, a, 384, wq, NULL, z, NULL, c, 64, KTUNE_BF16, NULL), KTUNE_OK);
	/* nothing to do */
	assert_int_equal(ktune_gemm_quant(ctx, &f, 0, 64, 384, NULL, 384, NULL, NULL, NULL, NULL, NULL, 64, KTUNE_BF16,
					  NULL), KTUNE_OK);
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	ktune_cu.cuMemFree_v2(buf);
}

static int setup(void **state)
{
	struct ktune_err e;
	char err[4096];
	int pushed;
	(void)state;
	if (ktune_open("", 0, &ctx, err, sizeof(err))) { /* an empty path: no database */
		fprintf(stderr, "ktune_open: %s\n", err);
		return -1;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e)) {
		fprintf(stderr, "context: %s\n", e.msg);
		return -1;
	}
	sm_count = ctx->id.sm_count;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktune_close(ctx);
	return 0;
}

int main(void)
{
	int skip = gpu_test_available("test-quant-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quant_gpu__bad_arguments),
		cmocka_unit_test(test_quant_gpu__packed_on_the_host_every_mode),
		cmocka_unit_test(test_quant_gpu__every_candidate),
		cmocka_unit_test(test_quant_gpu__default_every_format),
		cmocka_unit_test(test_quant_gpu__qmma_every_format),
		cmocka_unit_test(test_quant_gpu__qcode_every_format),
		cmocka_unit_test(test_quant_gpu__qfrag_every_format),
		cmocka_unit_test(test_quant_gpu__qwgmma_every_format),
		cmocka_unit_test(test_quant_gpu__every_format_awkward_shapes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
