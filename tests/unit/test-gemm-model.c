/*
 * test-gemm-model.c - the GEMM performance model (src/ops/gemm-model.c)
 * against what the GPUs measured: the tuning shipped in the library holds
 * each suite key's winner and its time on the H100 and the H200, so the
 * model's estimate of the winner, its bound, and the rank it gives the
 * winner among every candidate are checked against them; then the model's
 * order and cut for the tuner (candidates.c), and its picks by regime.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "db/share.h"
#include "ops/gemm-model.h"
#include "ops/gemm.h"
#include "templates.h"
#include "tuner/candidates.h"

#define SMS 132
#define SMEM_LIMIT 232448

static struct ktune_key make_key(ktune_dtype dtype, const char *layout, int64_t m, int64_t n, int64_t k)
{
	struct ktune_key key = { .op = "gemm", .dtype = dtype, .m = m, .n = n, .k = k, .aligned = 1 };
	assert_int_equal(ktune__layout_parse(layout, &key), 0);
	return key;
}

static const struct ktune_gemm_device h100 = { "sm_90", SMS, SMEM_LIMIT, 3015 };
/* HBM3e: 4.8 TB/s, of which a copy reaches 90% */
static const struct ktune_gemm_device h200 = { "sm_90", SMS, SMEM_LIMIT, 4320 };

/* The shipped file `name` (db/sm_90/h100.yaml), parsed. */
static void shipped(const char *name, struct ktune_share *share)
{
	struct ktune_err e;
	for (const struct ktune_template_file *f = ktune__shipped_files; f->name; f++)
		if (!strcmp(f->name, name)) {
			if (ktune__share_parse(f->text, f->len, f->name, share, &e))
				fail_msg("%s", e.msg);
			return;
		}
	fail_msg("no shipped file %s", name);
}

/*
 * Every GEMM entry of a shipped file, tuned on `gpu`: the bound of the
 * winner never above its measured time (a bound that was would stop a
 * tune before its winner); the estimate within a factor 1.5 of it for at
 * least 90% of the keys; and the winner's kernel within what the tuner's
 * default cut keeps (--top 32 and the best of each tile) for at least
 * `in_cut` of them.  Where the winner is outside the cut, the model has
 * its tile at least once: the cut keeps the best kernel of each shape.
 */
static void against_a_sweep(const char *file, const char *gpu, const struct ktune_gemm_device *dev,
			    double in_cut)
{
	struct ktune_share share;
	struct ktune_err e;
	int keys = 0, close = 0, cut = 0;

	shipped(file, &share);
	for (long i = 0; i < share.count; i++) {
		const struct ktune_result *r = &share.entries[i];
		struct ktune_config win, *cfgs;
		struct ktune_gemm_estimate est;
		int n, pruned;
		if (strcmp(r->key.op, "gemm") || strcmp(r->device.name, gpu))
			continue;
		keys++;
		assert_int_equal(ktune__gemm_config_parse(r->config, &win, &e), KTUNE_OK);
		ktune__gemm_model(&r->key, &win, dev, &est);
		if (est.bound_us > r->time_us)
			fail_msg("%s %lldx%lldx%lld: bound %.1f us above the measured %.1f us", file,
				 (long long)r->key.m, (long long)r->key.n, (long long)r->key.k, est.bound_us,
				 r->time_us);
		assert_true(est.bound_us <= est.time_us);
		close += est.time_us > r->time_us / 1.5 && est.time_us < r->time_us * 1.5;

		assert_int_equal(ktune__gemm_candidates(&r->key, dev->arch, dev->sm_count, dev->smem_optin, 0, 1,
							&cfgs, &n, &pruned, &e), KTUNE_OK);
		int kept = ktune__gemm_model_order(&r->key, dev, cfgs, n, KTUNE_TUNE_TOP, NULL);
		int found = 0, shape = 0;
		for (int j = 0; j < kept; j++) {
			found |= ktune__gemm_same_kernel(&cfgs[j], &win);
			shape |= cfgs[j].family == win.family && cfgs[j].block_m == win.block_m &&
				 cfgs[j].block_n == win.block_n;
		}
		cut += found;
		assert_true(shape);
		free(cfgs);
	}
	ktune__share_free(&share);
	printf("%s: %d keys, %d estimates within 1.5x, %d winners within the cut\n", file, keys, close, cut);
	assert_int_equal(keys, 96);
	assert_true(close >= 0.9 * keys);
	assert_true(cut >= in_cut * keys);
}

static void test_gemm_model__h100_sweep(void **state)
{
	(void)state;
	against_a_sweep("sm_90/h100.yaml", "NVIDIA H100 80GB HBM3", &h100, 0.85);
}

static void test_gemm_model__h200_sweep(void **state)
{
	(void)state;
	against_a_sweep("sm_90/h200.yaml", "NVIDIA H200", &h200, 0.85);
}

/* The rank: sorted by estimate, every candidate kept, each with its own estimate. */
static void test_gemm_model__rank_sorts_by_estimate(void **state)
{
	struct ktune_key key = make_key(KTUNE_BF16, "nt", 1000, 3000, 2000);
	struct ktune_config *cfgs;
	struct ktune_err e;
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, 0, 1, &cfgs, &n, &pruned, &e), 0);
	assert_true(n > 100);
	struct ktune_gemm_estimate *est = calloc((size_t)n, sizeof(*est));
	assert_non_null(est);
	ktune__gemm_model_rank(&key, &h100, cfgs, n, est);
	int wgmma = 0;
	for (int i = 0; i < n; i++) {
		struct ktune_gemm_estimate again;
		ktune__gemm_model(&key, &cfgs[i], &h100, &again);
		assert_true(again.time_us == est[i].time_us);
		assert_true(est[i].bound_us <= est[i].time_us);
		if (i)
			assert_true(est[i - 1].time_us <= est[i].time_us);
		wgmma += cfgs[i].family == KTUNE_GEMM_WGMMA;
	}
	assert_true(wgmma > 0);
	/* the pick is the first of the rank */
	struct ktune_config pick;
	struct ktune_gemm_estimate pe;
	assert_int_equal(ktune__gemm_model_pick(&key, &h100, &pick, &pe), 0);
	assert_true(pe.time_us == est[0].time_us);
	free(est);
	free(cfgs);
}

/* The tuner's cut: the top kernels and the best of each tile shape, every candidate of each kept kernel. */
static void test_gemm_model__order_cuts_by_kernel(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nn", 2048, 2048, 2048);
	struct ktune_config *cfgs, *all;
	struct ktune_err e;
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, 0, 1, &cfgs, &n, &pruned, &e), 0);
	all = malloc((size_t)n * sizeof(*all));
	assert_non_null(all);
	memcpy(all, cfgs, (size_t)n * sizeof(*all));
	struct ktune_gemm_estimate *est = calloc((size_t)n, sizeof(*est));
	assert_non_null(est);

	/* --top 0: everything, in the model's order */
	assert_int_equal(ktune__gemm_model_order(&key, &h100, cfgs, n, 0, est), n);
	for (int i = 1; i < n; i++)
		assert_true(est[i - 1].time_us <= est[i].time_us);

	memcpy(cfgs, all, (size_t)n * sizeof(*all));
	int kept = ktune__gemm_model_order(&key, &h100, cfgs, n, 8, est);
	assert_true(kept < n);
	int kernels = 0, shapes = 0;
	for (int i = 0; i < kept; i++) {
		int first = 1, new_shape = 1;
		for (int j = 0; j < i; j++) {
			first &= !ktune__gemm_same_kernel(&cfgs[j], &cfgs[i]);
			new_shape &= !(cfgs[j].family == cfgs[i].family && cfgs[j].block_m == cfgs[i].block_m &&
				       cfgs[j].block_n == cfgs[i].block_n);
		}
		kernels += first;
		shapes += new_shape;
		if (i)
			assert_true(est[i - 1].time_us <= est[i].time_us);
	}
	assert_true(kernels >= 8);
	assert_true(kernels <= 8 + shapes);
	/*
	 * every candidate of the first 8 kernels is kept, one of a kernel kept
	 * for its tile shape; every tile shape of the space has its kernel
	 */
	for (int i = 0; i < n; i++) {
		int kernel_kept = 0, in = 0, shape_kept = 0, top = 0, seen = 0, of_kernel = 0;
		for (int j = 0; j < kept; j++) {
			int same = ktune__gemm_same_kernel(&cfgs[j], &all[i]), first = 1;
			for (int l = 0; l < j && first; l++)
				first = !ktune__gemm_same_kernel(&cfgs[l], &cfgs[j]);
			seen += first;
			top |= same && first && seen <= 8;
			kernel_kept |= same;
			of_kernel += same;
			in |= !memcmp(&cfgs[j], &all[i], sizeof(all[i]));
			shape_kept |= cfgs[j].family == all[i].family && cfgs[j].block_m == all[i].block_m &&
				      cfgs[j].block_n == all[i].block_n;
		}
		if (top)
			assert_true(in);
		else if (kernel_kept)
			assert_int_equal(of_kernel, 1);
		assert_true(!in || kernel_kept);
		assert_true(shape_kept);
	}
	free(est);
	free(all);
	free(cfgs);
}

/* The regimes dispatch keeps neighbours within. */
static void test_gemm_model__regimes(void **state)
{
	struct ktune_gemm_regime r;
	(void)state;

	struct ktune_key gemv = make_key(KTUNE_F16, "nt", 1, 4096, 4096);
	ktune__gemm_regime(&gemv, &h100, &r);
	assert_true(r.small_m);
	assert_int_equal(r.m_class, 0);
	assert_true(r.memory_bound);
	assert_false(r.deep_k);
	/* the floor: 33.6 MB at 3.015 TB/s */
	assert_true(r.ideal_us > 10.5 && r.ideal_us < 11.7);

	struct ktune_key deep = make_key(KTUNE_F16, "nt", 128, 256, 65536);
	ktune__gemm_regime(&deep, &h100, &r);
	assert_true(r.deep_k);
	assert_int_equal(r.m_class, 2);

	struct ktune_key square = make_key(KTUNE_BF16, "nn", 8192, 8192, 8192);
	ktune__gemm_regime(&square, &h100, &r);
	assert_false(r.memory_bound);
	assert_false(r.deep_k);
	assert_int_equal(r.m_class, 3);
	/* 1.1 PFLOP at 871 TFLOP/s */
	assert_true(r.ideal_us > 1200 && r.ideal_us < 1300);
	struct ktune_key m40 = make_key(KTUNE_BF16, "nn", 40, 8192, 8192);
	ktune__gemm_regime(&m40, &h100, &r);
	assert_int_equal(r.m_class, 1);
}

/* Each estimate answers the effect it models. */
static void test_gemm_model__effects(void **state)
{
	struct ktune_gemm_estimate a, b;
	(void)state;

	/* a short last wave: 132 tiles of 128x256 take one wave, 133 two */
	struct ktune_config wg = { .block_m = 128, .block_n = 256, .block_k = 64, .stages = 4, .group_size = 1,
				   .split_k = 1, .family = KTUNE_GEMM_WGMMA, .consumers = 2, .cluster_m = 1 };
	struct ktune_key one = make_key(KTUNE_F16, "nt", 128 * 12, 256 * 11, 4096);
	struct ktune_key two = make_key(KTUNE_F16, "nt", 128 * 12 + 1, 256 * 11, 4096);
	ktune__gemm_model(&one, &wg, &h100, &a);
	ktune__gemm_model(&two, &wg, &h100, &b);
	assert_int_equal(a.waves, 1);
	assert_int_equal(b.waves, 2);
	assert_true(b.time_us > 1.8 * (a.time_us - 5));

	/* split-K: a deep K with 4 tiles runs faster split 8 ways than not */
	struct ktune_config mma = { 64, 64, 64, 2, 2, 4, 1, 1 };
	struct ktune_key deep = make_key(KTUNE_F16, "nn", 128, 128, 65536);
	ktune__gemm_model(&deep, &mma, &h100, &a);
	mma.split_k = 8;
	ktune__gemm_model(&deep, &mma, &h100, &b);
	assert_true(b.time_us < a.time_us / 2);

	/* the unaligned class's element loads cost a compute-bound key several times the aligned time */
	struct ktune_config big = { 128, 256, 32, 2, 4, 3, 8, 1 };
	struct ktune_key key = make_key(KTUNE_F16, "nt", 4096, 4096, 4096);
	ktune__gemm_model(&key, &big, &h100, &a);
	key.aligned = 0;
	ktune__gemm_model(&key, &big, &h100, &b);
	assert_true(b.time_us > 2 * a.time_us);

	/* a GEMV is memory-bound: at least the bytes at the bandwidth, and not far above */
	struct ktune_config gemv = { 16, 64, 128, 1, 4, 4, 1, 1 };
	struct ktune_key m1 = make_key(KTUNE_F16, "nt", 1, 8192, 8192);
	ktune__gemm_model(&m1, &gemv, &h100, &a);
	double floor_us = 2.0 * 8192 * 8193 / 3015e3;
	assert_true(a.memory_us >= floor_us && a.time_us < 1.6 * floor_us + 5);
	/* a faster memory makes it faster */
	ktune__gemm_model(&m1, &gemv, &h200, &b);
	assert_true(b.time_us < a.time_us);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_model__h100_sweep),
		cmocka_unit_test(test_gemm_model__h200_sweep),
		cmocka_unit_test(test_gemm_model__rank_sorts_by_estimate),
		cmocka_unit_test(test_gemm_model__order_cuts_by_kernel),
		cmocka_unit_test(test_gemm_model__regimes),
		cmocka_unit_test(test_gemm_model__effects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
