/*
 * test-dispatch.c - which config (or cuBLAS) serves a key, on a hand-built
 * context and without a GPU: the decision is a pure function of the key,
 * the loaded entries, the device's figures and the fallback policy
 * (src/runtime/dispatch.c).  Tuned entries first (exact -> arch ->
 * shipped), then a neighbour of the same regime, then cuBLAS where ktune
 * has no good answer, then the performance model's pick; another op's
 * neighbour only where its prune keeps it for the key.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/gemm-model.h"
#include "ops/gemm.h"
#include "runtime/context.h"

#define SMS 132
#define SMEM_LIMIT (227 * 1024) /* H100's opt-in shared memory per block */

static struct ktune_key make_key(ktune_dtype dtype, const char *layout, int64_t m, int64_t n, int64_t k)
{
	struct ktune_key key = { .op = "gemm", .dtype = dtype, .m = m, .n = n, .k = k, .aligned = 1 };
	assert_int_equal(ktune__layout_parse(layout, &key), 0);
	return key;
}

static struct ktune_key unaligned(struct ktune_key key)
{
	key.aligned = 0;
	return key;
}

static int config_equal(const struct ktune_config *a, const struct ktune_config *b)
{
	return a->block_m == b->block_m && a->block_n == b->block_n && a->block_k == b->block_k &&
	       a->warps_m == b->warps_m && a->warps_n == b->warps_n && a->stages == b->stages &&
	       a->group_size == b->group_size && a->split_k == b->split_k &&
	       a->family == b->family && a->consumers == b->consumers && a->cluster_m == b->cluster_m;
}

static void assert_config_equal(const struct ktune_config *a, const struct ktune_config *b)
{
	char ta[256], tb[256];
	if (config_equal(a, b))
		return;
	ktune__gemm_config_format(a, ta, sizeof(ta));
	ktune__gemm_config_format(b, tb, sizeof(tb));
	fail_msg("configs differ:\n  %s\n  %s", ta, tb);
}

/* mma.sync configs */
static const struct ktune_config cfg_a = { 128, 128, 32, 2, 2, 4, 8, 1 };
static const struct ktune_config cfg_b = { 64, 128, 32, 2, 2, 4, 1, 1 };
static const struct ktune_config cfg_c = { 128, 256, 32, 2, 4, 3, 8, 1 };
static const struct ktune_config cfg_split = { 16, 128, 64, 1, 4, 3, 1, 16 };
static const struct ktune_config cfg_gemv = { 16, 64, 128, 1, 4, 4, 1, 1 };
/* wgmma configs: 128x256 with clusters of 2 (the H100's best at 4096^3), and 256x128 */
static const struct ktune_config wg_a = { .block_m = 128, .block_n = 256, .block_k = 64, .stages = 4,
					  .group_size = 8, .split_k = 1, .family = KTUNE_GEMM_WGMMA,
					  .consumers = 2, .cluster_m = 2 };
static const struct ktune_config wg_b = { .block_m = 256, .block_n = 128, .block_k = 64, .stages = 4,
					  .group_size = 8, .split_k = 1, .family = KTUNE_GEMM_WGMMA,
					  .consumers = 2, .cluster_m = 1 };
static const struct ktune_config wg_128 = { .block_m = 128, .block_n = 128, .block_k = 64, .stages = 6,
					    .group_size = 1, .split_k = 1, .family = KTUNE_GEMM_WGMMA,
					    .consumers = 2, .cluster_m = 1 };

/*
 * The keys decided since the last make_ctx that resolve.c would count as
 * misses: those without a tuned entry of their own, whatever serves them.
 */
static long misses;

/* An H100 as ktune_open reads it, with the entries loaded; cuBLAS not tried yet (allowed). */
static ktune_ctx *make_ctx(const struct ktune_entry *entries, int n)
{
	ktune_ctx *ctx = calloc(1, sizeof(*ctx));
	misses = 0;
	assert_non_null(ctx);
	snprintf(ctx->id.name, sizeof(ctx->id.name), "NVIDIA H100 80GB HBM3");
	snprintf(ctx->id.arch, sizeof(ctx->id.arch), "sm_90");
	ctx->id.sm_count = SMS;
	ctx->smem_optin = SMEM_LIMIT;
	ctx->mem_gbps = 3015;
	if (n) {
		ctx->entries = malloc((size_t)n * sizeof(*entries));
		assert_non_null(ctx->entries);
		memcpy(ctx->entries, entries, (size_t)n * sizeof(*entries));
	}
	ctx->nentries = n;
	return ctx;
}

/* The same where cuBLAS is not there (or KTUNE_FALLBACK=model): ktune serves everything. */
static ktune_ctx *make_ctx_no_blas(const struct ktune_entry *entries, int n)
{
	ktune_ctx *ctx = make_ctx(entries, n);
	ctx->blas_state = -1;
	return ctx;
}

static void free_ctx(ktune_ctx *ctx)
{
	free(ctx->entries);
	free(ctx);
}

static void decide(ktune_ctx *ctx, const struct ktune_key *key, struct ktune_choice *c)
{
	ktune__dispatch_decide(ctx, key, c);
	assert_non_null(c->source);
	assert_non_null(c->own);
	misses += !ktune__source_tuned(c->own);
}

static const char *choose(ktune_ctx *ctx, struct ktune_key key, struct ktune_config *cfg)
{
	struct ktune_choice c;
	decide(ctx, &key, &c);
	*cfg = c.cfg;
	return c.source;
}

static struct ktune_entry entry(struct ktune_key key, struct ktune_config cfg, int same)
{
	struct ktune_entry e = { .key = key, .cfg = cfg, .same_device = same };
	return e;
}

/* What a config served for a key must be: admitted, kept by the key's prune, within shared memory. */
static void assert_servable(ktune_ctx *ctx, const struct ktune_key *key, const struct ktune_config *cfg)
{
	struct ktune_err e;
	char why[256] = "", text[256];
	ktune__gemm_config_format(cfg, text, sizeof(text));
	if (!ktune__gemm_config_admitted(cfg, &e))
		fail_msg("%s: not admitted: %s", text, e.msg);
	if (ktune__gemm_prune(key, cfg, ctx->id.sm_count, ctx->smem_optin, why, sizeof(why)))
		fail_msg("%s: pruned for %lldx%lldx%lld: %s", text, (long long)key->m, (long long)key->n,
			 (long long)key->k, why);
	assert_true(ktune__gemm_family_runs(cfg->family, ctx->id.arch, key->aligned));
}

/* ------------------------------------------------------------ tuned entries */

static void test_dispatch__exact_beats_arch(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nt", 16, 4096, 4096);
	struct ktune_config cfg;
	(void)state;

	/* the other device's entry first, so order does not decide */
	struct ktune_entry both[] = { entry(key, cfg_a, 0), entry(key, cfg_b, 1) };
	ktune_ctx *ctx = make_ctx(both, 2);
	assert_string_equal(choose(ctx, key, &cfg), "exact");
	assert_config_equal(&cfg, &cfg_b);
	assert_int_equal(misses, 0);
	free_ctx(ctx);

	struct ktune_entry reversed[] = { entry(key, cfg_b, 1), entry(key, cfg_a, 0) };
	ctx = make_ctx(reversed, 2);
	assert_string_equal(choose(ctx, key, &cfg), "exact");
	assert_config_equal(&cfg, &cfg_b);
	/* another device's exact key beats this device's neighbour */
	free_ctx(ctx);
	struct ktune_entry ents[] = { entry(make_key(KTUNE_F16, "nt", 12, 4096, 4096), cfg_gemv, 1),
				      entry(key, cfg_split, 0) };
	ctx = make_ctx(ents, 2);
	assert_string_equal(choose(ctx, key, &cfg), "arch");
	assert_config_equal(&cfg, &cfg_split); /* taken as tuned */
	assert_int_equal(misses, 0);
	free_ctx(ctx);
}

/* A config from a GPU or layout with more shared memory is cut down to fit, or not taken. */
static void test_dispatch__fits_shared_memory(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nn", 4096, 4096, 4096);
	struct ktune_config cfg, big = { 128, 256, 32, 2, 4, 4, 8, 1 };
	(void)state;

	struct ktune_entry ents[] = { entry(key, big, 0) };
	ktune_ctx *ctx = make_ctx_no_blas(ents, 1);
	ctx->smem_optin = 100 * 1024; /* 4 stages need 108544 bytes here, 3 need 81408 */
	assert_true(ktune__gemm_smem_bytes(&key, &big) > (size_t)ctx->smem_optin);
	assert_string_equal(choose(ctx, key, &cfg), "arch");
	assert_int_equal(cfg.stages, 3);
	assert_int_equal(cfg.block_n, 256);
	assert_true(ktune__gemm_smem_bytes(&key, &cfg) <= (size_t)ctx->smem_optin);
	assert_int_equal(misses, 0);

	/* not even 2 stages fit: the key is served as untuned, by the model's pick for this device */
	ctx->smem_optin = 20 * 1024;
	assert_string_equal(choose(ctx, key, &cfg), "model");
	assert_true(ktune__gemm_smem_bytes(&key, &cfg) <= (size_t)ctx->smem_optin);
	assert_servable(ctx, &key, &cfg);
	assert_int_equal(misses, 1);
	free_ctx(ctx);
}

/* Entries of the files shipped in the library rank below the database. */
static void test_dispatch__shipped_is_lowest(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nt", 16, 4096, 4096);
	struct ktune_key near = make_key(KTUNE_F16, "nt", 12, 4096, 4096);
	struct ktune_config cfg;
	(void)state;

	struct ktune_entry shipped = entry(key, cfg_split, 1);
	shipped.shipped = 1;
	/* alone, a shipped entry for the very key serves it */
	ktune_ctx *ctx = make_ctx(&shipped, 1);
	assert_string_equal(choose(ctx, key, &cfg), "shipped");
	assert_config_equal(&cfg, &cfg_split);
	assert_int_equal(misses, 0);
	free_ctx(ctx);

	/* another GPU's database entry for the key comes first */
	struct ktune_entry with_arch[] = { shipped, entry(key, cfg_gemv, 0) };
	ctx = make_ctx(with_arch, 2);
	assert_string_equal(choose(ctx, key, &cfg), "arch");
	assert_config_equal(&cfg, &cfg_gemv);
	free_ctx(ctx);

	/* for another key of the regime at equal distance, the database's neighbour beats the shipped one */
	struct ktune_entry s2 = entry(near, cfg_split, 1), d2 = entry(near, cfg_gemv, 1);
	s2.shipped = 1;
	struct ktune_entry both[] = { s2, d2 };
	ctx = make_ctx(both, 2);
	assert_string_equal(choose(ctx, key, &cfg), "nearest");
	assert_config_equal(&cfg, &cfg_gemv);
	assert_int_equal(misses, 1);
	free_ctx(ctx);
}

/* Shipped files of several GPUs of the arch: this GPU's entry serves, in whichever order they load. */
static void test_dispatch__shipped_prefers_this_gpu(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nt", 4096, 4096, 4096);
	struct ktune_key near = make_key(KTUNE_F16, "nt", 4000, 4096, 4096);
	struct ktune_config cfg;
	(void)state;

	struct ktune_entry other = entry(key, wg_b, 0), mine = entry(key, wg_a, 1);
	other.shipped = mine.shipped = 1;
	struct ktune_entry orders[2][2] = { { other, mine }, { mine, other } };
	for (int i = 0; i < 2; i++) {
		ktune_ctx *ctx = make_ctx(orders[i], 2);
		assert_string_equal(choose(ctx, key, &cfg), "shipped");
		assert_config_equal(&cfg, &wg_a);
		/* and as the neighbour of a key neither file has */
		assert_string_equal(choose(ctx, near, &cfg), "nearest");
		assert_config_equal(&cfg, &wg_a);
		free_ctx(ctx);
	}
}

/* A tuned config that measured well below cuBLAS leaves its key to cuBLAS, where cuBLAS may serve. */
static void test_dispatch__tuned_but_slower_than_cublas(void **state)
{
	struct ktune_key key = make_key(KTUNE_BF16, "nn", 200, 3000, 5000);
	struct ktune_config cfg;
	struct ktune_choice c;
	(void)state;

	struct ktune_entry slow = entry(key, cfg_c, 1);
	slow.ratio = 0.80;
	ktune_ctx *ctx = make_ctx(&slow, 1);
	decide(ctx, &key, &c);
	assert_string_equal(c.source, "cublas");
	assert_string_equal(c.own, "exact"); /* its config is still what ktune would run */
	assert_config_equal(&c.cfg, &cfg_c);
	assert_int_equal(misses, 0); /* a tuned key */
	/* measured faster, or about as fast: ktune's */
	ctx->entries[0].ratio = 0.97;
	assert_string_equal(choose(ctx, key, &cfg), "exact");
	ctx->entries[0].ratio = 0; /* never measured against cuBLAS */
	assert_string_equal(choose(ctx, key, &cfg), "exact");
	/* without cuBLAS, or with KTUNE_FALLBACK=model, the tuned config serves whatever it measured */
	ctx->entries[0].ratio = 0.5;
	ctx->blas_state = -1;
	assert_string_equal(choose(ctx, key, &cfg), "exact");
	free_ctx(ctx);
}

/* -------------------------------------------------------------- neighbours */

static void test_dispatch__neighbour_of_the_same_regime(void **state)
{
	struct ktune_config cfg;
	(void)state;

	struct ktune_entry ents[] = {
		/* other dtypes and layouts at the very shape asked for: never taken */
		entry(make_key(KTUNE_BF16, "nt", 1024, 4096, 3600), wg_128, 1),
		entry(make_key(KTUNE_F16, "nn", 1024, 4096, 3600), wg_128, 1),
		entry(make_key(KTUNE_F16, "tt", 1024, 4096, 3600), wg_128, 1),
		entry(make_key(KTUNE_F16, "tn", 1024, 4096, 3600), wg_128, 0),
		/* same dtype and layout */
		entry(make_key(KTUNE_F16, "nt", 1024, 4096, 4096), wg_a, 1),
		entry(make_key(KTUNE_F16, "nt", 4096, 4096, 4096), wg_b, 1),
	};
	ktune_ctx *ctx = make_ctx(ents, (int)(sizeof(ents) / sizeof(ents[0])));
	assert_string_equal(choose(ctx, make_key(KTUNE_F16, "nt", 1024, 4096, 3600), &cfg), "nearest");
	assert_config_equal(&cfg, &wg_a);
	assert_int_equal(misses, 1);
	/* distance is in log space: M=3000 is nearer 4096 (0.10) than 1024 (1.15) */
	assert_string_equal(choose(ctx, make_key(KTUNE_F16, "nt", 3000, 4096, 4096), &cfg), "nearest");
	assert_config_equal(&cfg, &wg_b);
	/*
	 * M=1500 is near both, but neither tile divides it: 96 cluster tiles of
	 * 256x256 for 66 clusters, 192 tiles of 256x128 for 132 SMs, each a
	 * wave and a half, where the model's pick makes two whole waves.
	 */
	struct ktune_key m1500 = make_key(KTUNE_F16, "nt", 1500, 4096, 4096);
	assert_string_equal(choose(ctx, m1500, &cfg), "model");
	assert_servable(ctx, &m1500, &cfg);
	/* too far in N (a factor 16: 7.7) is another regime: the model's pick */
	struct ktune_key wide = make_key(KTUNE_F16, "nt", 1024, 65536, 4096);
	assert_string_equal(choose(ctx, wide, &cfg), "model");
	assert_servable(ctx, &wide, &cfg);
	assert_int_equal(misses, 4);
	free_ctx(ctx);
}

/* Borrowing by distance alone gave a deep K a config without split-K: the model refuses it. */
static void test_dispatch__deep_k_is_not_served_without_split_k(void **state)
{
	struct ktune_key tuned = make_key(KTUNE_BF16, "nn", 256, 256, 16384);
	struct ktune_key deep = make_key(KTUNE_BF16, "nn", 256, 256, 65536);
	struct ktune_config cfg;
	struct ktune_gemm_regime r;
	struct ktune_gemm_device dev;
	(void)state;

	/* a neighbour at squared distance 1.9, tuned with whole tiles */
	struct ktune_entry ents[] = { entry(tuned, wg_128, 1) };
	ktune_ctx *ctx = make_ctx_no_blas(ents, 1);
	ktune__ctx_model_device(ctx, &dev);
	ktune__gemm_regime(&deep, &dev, &r);
	assert_true(r.deep_k);
	assert_string_equal(choose(ctx, deep, &cfg), "model");
	assert_true(cfg.split_k > 1);
	assert_servable(ctx, &deep, &cfg);
	free_ctx(ctx);
}

/* M classes: a GEMV-like key never borrows from M=64, nor the reverse. */
static void test_dispatch__small_m_keeps_to_its_class(void **state)
{
	struct ktune_key gemv = make_key(KTUNE_F16, "nt", 8, 4096, 4096);
	struct ktune_key m64 = make_key(KTUNE_F16, "nt", 64, 4096, 4096);
	struct ktune_config cfg;
	(void)state;

	struct ktune_entry ents[] = { entry(m64, cfg_b, 1) };
	ktune_ctx *ctx = make_ctx_no_blas(ents, 1);
	assert_string_equal(choose(ctx, gemv, &cfg), "model");
	assert_int_equal(cfg.block_m, 16);
	assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
	free_ctx(ctx);
	struct ktune_entry small[] = { entry(gemv, cfg_gemv, 1) };
	ctx = make_ctx_no_blas(small, 1);
	assert_string_equal(choose(ctx, m64, &cfg), "model");
	assert_string_equal(choose(ctx, make_key(KTUNE_F16, "nt", 4, 4096, 4096), &cfg), "nearest");
	assert_config_equal(&cfg, &cfg_gemv);
	free_ctx(ctx);
}

/* A neighbour that lost to cuBLAS says ktune has no good answer in its regime. */
static void test_dispatch__neighbour_slower_than_cublas(void **state)
{
	struct ktune_key query = make_key(KTUNE_F16, "nt", 12, 4096, 4096);
	struct ktune_config cfg;
	struct ktune_choice c;
	(void)state;

	struct ktune_entry near = entry(make_key(KTUNE_F16, "nt", 16, 4096, 4096), cfg_gemv, 1);
	near.ratio = 0.7;
	ktune_ctx *ctx = make_ctx(&near, 1);
	decide(ctx, &query, &c);
	assert_string_equal(c.source, "cublas");
	assert_string_equal(c.own, "nearest");
	assert_config_equal(&c.cfg, &cfg_gemv);
	ctx->entries[0].ratio = 1.1;
	assert_string_equal(choose(ctx, query, &cfg), "nearest");
	free_ctx(ctx);
}

/* ------------------------------------------------------- the model's pick */

static void test_dispatch__model_pick_by_regime(void **state)
{
	struct ktune_config cfg;
	(void)state;
	ktune_ctx *ctx = make_ctx_no_blas(NULL, 0);

	/* M = 1: the GEMV-like tiles of the mma.sync family */
	for (int l = 0; l < 4; l++) {
		static const char *const layouts[] = { "nn", "nt", "tn", "tt" };
		struct ktune_key gemv = make_key(KTUNE_F16, layouts[l], 1, 4096, 4096);
		assert_string_equal(choose(ctx, gemv, &cfg), "model");
		assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
		assert_int_equal(cfg.block_m, 16);
		assert_servable(ctx, &gemv, &cfg);
	}
	/* deep K with few tiles: split-K fills the SMs */
	struct ktune_key deep = make_key(KTUNE_BF16, "nt", 64, 128, 65536);
	assert_string_equal(choose(ctx, deep, &cfg), "model");
	assert_true(cfg.split_k >= 4);
	assert_servable(ctx, &deep, &cfg);
	/* a vocabulary-wide N at M = 1024: the wgmma family, big tiles, every SM busy */
	struct ktune_key head = make_key(KTUNE_BF16, "nt", 1024, 50264, 768);
	assert_string_equal(choose(ctx, head, &cfg), "model");
	assert_int_equal(cfg.family, KTUNE_GEMM_WGMMA);
	assert_true(cfg.block_m * cfg.block_n >= 128 * 128);
	int64_t tiles = (head.m + cfg.block_m - 1) / cfg.block_m * ((head.n + cfg.block_n - 1) / cfg.block_n);
	assert_true(tiles >= SMS);
	assert_servable(ctx, &head, &cfg);
	/* tiny everything: something that runs, no split */
	struct ktune_key tiny[] = { make_key(KTUNE_F16, "tn", 1, 1, 1), make_key(KTUNE_F16, "nt", 8, 8, 8),
				    unaligned(make_key(KTUNE_BF16, "tt", 3, 5, 7)) };
	for (size_t i = 0; i < sizeof(tiny) / sizeof(tiny[0]); i++) {
		assert_string_equal(choose(ctx, tiny[i], &cfg), "model");
		assert_int_equal(cfg.split_k, 1);
		assert_servable(ctx, &tiny[i], &cfg);
	}
	/* tt 512^3, both classes: each class's tiles fit its layout's shared memory */
	struct ktune_key tt = make_key(KTUNE_F16, "tt", 512, 512, 512);
	assert_string_equal(choose(ctx, tt, &cfg), "model");
	assert_servable(ctx, &tt, &cfg);
	assert_string_equal(choose(ctx, unaligned(tt), &cfg), "model");
	assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
	struct ktune_key utt = unaligned(tt);
	assert_servable(ctx, &utt, &cfg);
	/* unaligned keys: never wgmma */
	struct ktune_key odd = unaligned(make_key(KTUNE_F16, "nt", 3000, 3000, 3000));
	assert_string_equal(choose(ctx, odd, &cfg), "model");
	assert_servable(ctx, &odd, &cfg);
	/* another arch: mma.sync only, within its shared memory */
	snprintf(ctx->id.arch, sizeof(ctx->id.arch), "sm_80");
	ctx->smem_optin = 163 * 1024;
	struct ktune_key big = make_key(KTUNE_F16, "nt", 4096, 4096, 4096);
	assert_string_equal(choose(ctx, big, &cfg), "model");
	assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
	assert_true(cfg.block_m * cfg.block_n >= 128 * 128);
	assert_servable(ctx, &big, &cfg);
	assert_int_equal(misses, 13);
	free_ctx(ctx);
}

/* ------------------------------------------------------------------ cuBLAS */

static void test_dispatch__cublas_where_ktune_has_no_good_answer(void **state)
{
	struct ktune_config cfg;
	struct ktune_choice c;
	(void)state;
	ktune_ctx *ctx = make_ctx(NULL, 0);

	/* odd leading dimensions: an LM head of vocabulary 50257, N = 1, a deep K */
	struct ktune_key slow[] = {
		unaligned(make_key(KTUNE_BF16, "nt", 1024, 50257, 768)),
		unaligned(make_key(KTUNE_F16, "nn", 4096, 1, 4096)),
		unaligned(make_key(KTUNE_F16, "nt", 7, 33, 65536)),
		unaligned(make_key(KTUNE_F16, "tt", 512, 512, 512)),
	};
	for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++) {
		decide(ctx, &slow[i], &c);
		if (strcmp(c.source, "cublas"))
			fail_msg("key %zu: served by %s", i, c.source);
		/* ktune's own answer is still there, for KTUNE_FALLBACK=measure */
		assert_string_equal(c.own, "model");
		assert_servable(ctx, &slow[i], &c.cfg);
	}
	assert_int_equal(misses, 4);
	/* the same shapes aligned: ktune's own kernels */
	struct ktune_key head = make_key(KTUNE_BF16, "nt", 1024, 50264, 768);
	assert_string_equal(choose(ctx, head, &cfg), "model");
	/*
	 * The rule: an unaligned key whose pick the model expects more than
	 * 15% and half a microsecond slower than the pick for the aligned
	 * class of the shape goes to cuBLAS.  A GEMV, which reads at the
	 * memory's pace even element by element, stays ktune's.
	 */
	struct ktune_key odd[] = { unaligned(make_key(KTUNE_F16, "nt", 1, 4096, 4095)),
				   unaligned(make_key(KTUNE_F16, "nn", 3, 5, 7)),
				   unaligned(make_key(KTUNE_BF16, "tn", 389, 186, 294)),
				   unaligned(make_key(KTUNE_BF16, "tt", 1024, 1024, 1023)) };
	int sides[2] = { 0, 0 };
	struct ktune_gemm_device dev;
	ktune__ctx_model_device(ctx, &dev);
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		struct ktune_key as_aligned = odd[i];
		struct ktune_config pick;
		struct ktune_gemm_estimate u, a;
		as_aligned.aligned = 1;
		assert_int_equal(ktune__gemm_model_pick(&odd[i], &dev, &pick, &u), 0);
		assert_int_equal(ktune__gemm_model_pick(&as_aligned, &dev, &pick, &a), 0);
		int blas = u.time_us > 1.15 * a.time_us + 0.5;
		assert_string_equal(choose(ctx, odd[i], &cfg), blas ? "cublas" : "model");
		sides[blas]++;
	}
	assert_true(sides[0] > 0 && sides[1] > 0);
	assert_string_equal(choose(ctx, odd[0], &cfg), "model");

	/* cuBLAS failed to load (resolve.c sets -1 and decides again) or KTUNE_FALLBACK=model */
	ctx->blas_state = -1;
	assert_string_equal(choose(ctx, slow[0], &cfg), "model");
	ctx->blas_state = 0;
	ctx->fallback = KTUNE_FALLBACK_MODEL;
	assert_string_equal(choose(ctx, slow[0], &cfg), "model");

	/* KTUNE_FALLBACK=cublas: every key without a tuned entry, while tuned keys stay ktune's */
	struct ktune_entry tuned = entry(head, wg_a, 1);
	free_ctx(ctx);
	ctx = make_ctx(&tuned, 1);
	ctx->fallback = KTUNE_FALLBACK_CUBLAS;
	assert_string_equal(choose(ctx, head, &cfg), "exact");
	assert_string_equal(choose(ctx, make_key(KTUNE_BF16, "nt", 8, 8, 8), &cfg), "cublas");
	/* measure: decided as auto; the first call times the two (fallback.c) */
	ctx->fallback = KTUNE_FALLBACK_MEASURE;
	assert_string_equal(choose(ctx, make_key(KTUNE_BF16, "nt", 8, 8, 8), &cfg), "model");
	assert_string_equal(choose(ctx, slow[0], &cfg), "cublas");
	free_ctx(ctx);
}

/* wgmma entries never serve an unaligned key or another arch, from any source. */
static void test_dispatch__never_wgmma_for_unaligned(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nt", 4096, 4096, 4096);
	struct ktune_key ukey = unaligned(key);
	struct ktune_config cfg;
	(void)state;

	/* an exact wgmma entry serves the aligned key ... */
	struct ktune_entry ents[] = { entry(key, wg_a, 1) };
	ktune_ctx *ctx = make_ctx_no_blas(ents, 1);
	assert_string_equal(choose(ctx, key, &cfg), "exact");
	assert_config_equal(&cfg, &wg_a);
	/* ... but never the unaligned one: the model's mma.sync pick */
	assert_string_equal(choose(ctx, ukey, &cfg), "model");
	assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
	free_ctx(ctx);

	/* exact, arch and shipped wgmma entries of the unaligned class are skipped as if absent */
	struct ktune_entry mixed[] = { entry(ukey, wg_a, 1), entry(ukey, wg_a, 0), entry(ukey, wg_b, 1),
				       entry(ukey, cfg_c, 1) };
	mixed[2].shipped = mixed[3].shipped = 1;
	ctx = make_ctx_no_blas(mixed, 4);
	assert_string_equal(choose(ctx, ukey, &cfg), "shipped");
	assert_config_equal(&cfg, &cfg_c);
	free_ctx(ctx);

	/* a device that is not sm_90 never takes wgmma, aligned or not */
	ctx = make_ctx_no_blas(ents, 1);
	snprintf(ctx->id.arch, sizeof(ctx->id.arch), "sm_100");
	assert_string_equal(choose(ctx, key, &cfg), "model");
	assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
	free_ctx(ctx);
}

/* The decision is a function of its inputs: the same key, the same answer, and no state left behind. */
static void test_dispatch__decision_is_pure(void **state)
{
	struct ktune_choice a, b;
	(void)state;
	ktune_ctx *ctx = make_ctx(NULL, 0);
	struct ktune_key keys[] = { make_key(KTUNE_F16, "nt", 777, 333, 4444),
				    unaligned(make_key(KTUNE_BF16, "tn", 1000, 2000, 3000)) };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		ktune__dispatch_decide(ctx, &keys[i], &a);
		ktune__dispatch_decide(ctx, &keys[i], &b);
		assert_string_equal(a.source, b.source);
		assert_string_equal(a.own, b.own);
		assert_config_equal(&a.cfg, &b.cfg);
	}
	assert_int_equal(ctx->blas_state, 0); /* deciding loads nothing */
	free_ctx(ctx);
}

/* --------------------------------------------------------- the other ops */

/* A row-wise op borrows a neighbour's config only where its prune keeps it for the key. */
static void test_dispatch__op_neighbour_kept_by_prune(void **state)
{
	const struct ktune_op *op = ktune__op_find("softmax");
	struct ktune_key wide = { .op = "softmax", .dtype = KTUNE_BF16, .variant = "fwd", .m = 1024,
				  .n = 131072, .aligned = 1 };
	struct ktune_key mid = { .op = "softmax", .dtype = KTUNE_BF16, .variant = "fwd", .m = 4096,
				 .n = 4096, .aligned = 1 };
	struct ktune_config wide_cfg, mid_cfg, cfg;
	struct ktune_err e;
	char why[160];
	(void)state;

	assert_non_null(op);
	assert_int_equal(ktune__op_config_parse(op, "softmax", "VEC=8,ROW_THREADS=256,THREADS=256,CLUSTER=8,"
						"MIN_WARPS=0,PREFETCH=0,RING=0,KEEP_EXP=1,BLOCKS_PER_SM=0", &wide_cfg, &e), 0);
	assert_int_equal(ktune__op_config_parse(op, "softmax", "VEC=8,ROW_THREADS=128,THREADS=128,CLUSTER=1,"
						"MIN_WARPS=32,PREFETCH=0,RING=0,KEEP_EXP=0,BLOCKS_PER_SM=0", &mid_cfg, &e), 0);
	struct ktune_entry ents[] = { entry(wide, wide_cfg, 1), entry(mid, mid_cfg, 1) };
	ktune_ctx *ctx = make_ctx(ents, 2);
	/* 2048 columns: the 4096 neighbour's 128 threads of 8 fit; the cluster of 8 does not */
	struct ktune_key q = mid;
	q.n = 2048;
	assert_int_equal(op->prune(&q, &mid_cfg, SMS, why, sizeof(why)), 0);
	assert_string_equal(choose(ctx, q, &cfg), "nearest");
	assert_int_equal(ktune__op_param(op, &cfg, "CLUSTER", 0), 1);
	/* 1024 rows of 65536: nearest by distance is the 131072 entry, and its prune keeps it */
	q = wide;
	q.n = 65536;
	assert_int_equal(op->prune(&q, &wide_cfg, SMS, why, sizeof(why)), 0);
	assert_string_equal(choose(ctx, q, &cfg), "nearest");
	assert_int_equal(ktune__op_param(op, &cfg, "CLUSTER", 0), 8);
	/* 256 columns: both neighbours are sized for longer rows; the op's default, which its prune keeps */
	q = mid;
	q.n = 256;
	assert_int_equal(op->prune(&q, &wide_cfg, SMS, why, sizeof(why)), 1);
	ctx->entries[1] = ctx->entries[0]; /* only the wide one */
	assert_string_equal(choose(ctx, q, &cfg), "default");
	assert_int_equal(op->prune(&q, &cfg, SMS, why, sizeof(why)), 0);
	free_ctx(ctx);
}

/*
 * A quantized GEMM's neighbour whose split the key's prune refuses (m = 64
 * on 28672 x 4096 from 4096 x 4096's SPLIT_K 4: the grid is full without
 * it) is borrowed with its split lowered, the same kernel; one refused for
 * what it compiles in is not.
 */
static void test_dispatch__op_neighbour_fitted(void **state)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	struct ktune_key tuned = { .op = "gemm_quant", .dtype = KTUNE_BF16, .variant = "4,128,scale_shift,v1",
				   .m = 64, .n = 4096, .k = 4096, .aligned = 1 };
	struct ktune_config split4, cfg;
	struct ktune_choice c;
	struct ktune_err e;
	char why[160];
	(void)state;

	assert_non_null(op);
	assert_int_equal(ktune__op_config_parse(op, "qwgmma", "BLOCK_M=64,WGS=1,SLABS=1,STAGES=6,OVERLAP=0,"
						"CLUSTER_K=1,SPLIT_K=4", &split4, &e), 0);
	struct ktune_entry ents[] = { entry(tuned, split4, 1) };
	ktune_ctx *ctx = make_ctx_no_blas(ents, 1);
	struct ktune_key q = tuned;
	q.n = 28672;
	assert_int_equal(op->prune(&q, &split4, SMS, why, sizeof(why)), 1);
	decide(ctx, &q, &c);
	assert_string_equal(c.source, "nearest");
	assert_ptr_equal(c.near, &ctx->entries[0]);
	assert_int_equal(c.cfg.family, split4.family);
	assert_true(ktune__op_param(op, &c.cfg, "SPLIT_K", 0) < 4);
	assert_int_equal(op->prune(&q, &c.cfg, SMS, why, sizeof(why)), 0);
	for (const char *const *p = (const char *const[]){ "BLOCK_M", "WGS", "SLABS", "STAGES", "OVERLAP",
							  "CLUSTER_K", NULL }; *p; p++)
		assert_int_equal(ktune__op_param(op, &c.cfg, *p, -1), ktune__op_param(op, &split4, *p, -2));
	/* its own key keeps the split */
	assert_string_equal(choose(ctx, tuned, &cfg), "exact");
	assert_int_equal(ktune__op_param(op, &cfg, "SPLIT_K", 0), 4);
	/* 16 rows of A: a tile of 64 rows, compiled in, does not fit by a launch parameter */
	q = tuned;
	q.m = 16;
	assert_int_equal(op->prune(&q, &split4, SMS, why, sizeof(why)), 1);
	decide(ctx, &q, &c);
	assert_string_equal(c.source, "default");
	assert_null(c.near);
	free_ctx(ctx);
}

/*
 * A quantized GEMM of few rows of A borrows only from its own bucket of
 * rows: W8's GEMV tuned at m = 1 serves m = 1 on another weight, but m = 2
 * gets the default (qfrag's); m = 128 still borrows from m = 128.
 */
static void test_dispatch__quant_neighbour_same_rows(void **state)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	struct ktune_key one = { .op = "gemm_quant", .dtype = KTUNE_BF16, .variant = "8,chan,scale_shift,v1", .m = 1,
				 .n = 4096, .k = 4096, .aligned = 1 };
	struct ktune_key many = one;
	struct ktune_config gemv, wide, cfg;
	struct ktune_err e;
	(void)state;

	many.m = 128;
	assert_int_equal(ktune__op_config_parse(op, "qgemv", "THREADS=128,ROWS=8,VEC=4,UNROLL=1,CACHE=0,MIN_WARPS=0,"
						"SPLIT_K=1", &gemv, &e), 0);
	assert_int_equal(ktune__op_config_parse(op, "qwgmma", "BLOCK_M=128,WGS=1,SLABS=1,STAGES=6,OVERLAP=0,"
						"CLUSTER_K=1,SPLIT_K=1", &wide, &e), 0);
	struct ktune_entry ents[] = { entry(one, gemv, 1), entry(many, wide, 1) };
	ktune_ctx *ctx = make_ctx_no_blas(ents, 2);
	struct ktune_key q = one;
	q.n = 6144;
	assert_string_equal(choose(ctx, q, &cfg), "nearest");
	assert_string_equal(op->families[cfg.family].name, "qgemv");
	q.m = 2;
	assert_string_equal(choose(ctx, q, &cfg), "default");
	assert_string_equal(op->families[cfg.family].name, "qfrag");
	q.m = 16;
	assert_string_equal(choose(ctx, q, &cfg), "default");
	q = many;
	q.n = 6144;
	assert_string_equal(choose(ctx, q, &cfg), "nearest");
	assert_string_equal(op->families[cfg.family].name, "qwgmma");
	free_ctx(ctx);
}

/*
 * An attention key nobody tuned: on sm_90 the forward's default is the wgmma
 * family's, kept by the key's prune (D = 256 too); short lengths and other
 * archs keep the mma.sync defaults (the backward's: the test below).
 */
static void test_dispatch__attention_default_by_arch(void **state)
{
	const struct ktune_op *op = ktune__op_find("attention");
	struct ktune_key fwd = { .op = "attention", .dtype = KTUNE_F16, .variant = "fwd,128,causal,4", .m = 2048,
				 .n = 2048, .k = 32, .aligned = 1 };
	struct ktune_key d256 = fwd, tiny = fwd, bwd = fwd;
	struct ktune_config cfg;
	char why[160];
	(void)state;

	snprintf(d256.variant, sizeof(d256.variant), "fwd,256,none,1");
	tiny.m = 1;
	tiny.n = 16;
	snprintf(bwd.variant, sizeof(bwd.variant), "bwd,128,causal,4");
	ktune_ctx *ctx = make_ctx(NULL, 0);
	const struct ktune_key *wgmma[] = { &fwd, &d256 };
	for (int i = 0; i < 2; i++) {
		assert_string_equal(choose(ctx, *wgmma[i], &cfg), "default");
		assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_WGMMA);
		assert_int_equal(op->prune(wgmma[i], &cfg, SMS, why, sizeof(why)), 0);
	}
	assert_int_equal(ktune__op_param(op, &cfg, "CONSUMERS", 0), 2); /* D = 256: Q's tile of 3 does not fit */
	assert_string_equal(choose(ctx, tiny, &cfg), "default");
	assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_FWD);
	assert_string_equal(choose(ctx, bwd, &cfg), "default");
	assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_WGMMA_BWD);
	snprintf(ctx->id.arch, sizeof(ctx->id.arch), "sm_80");
	assert_string_equal(choose(ctx, fwd, &cfg), "default");
	assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_FWD);
	free_ctx(ctx);
}

/* Whether cfg is one of the key's candidates on the device: admitted by its family's space, kept by the prune. */
static int attention_candidate(ktune_ctx *ctx, const struct ktune_key *key, const struct ktune_config *cfg)
{
	const struct ktune_op *op = ktune__op_find("attention");
	struct ktune_config *cands = NULL;
	struct ktune_err e;
	char want[160], got[160];
	int n = 0, found = 0;
	assert_int_equal(ktune__op_candidates(op, key, ctx->id.arch, ctx->id.sm_count, 0, 1, &cands, &n, NULL, &e), 0);
	ktune__op_config_format(op, cfg, want, sizeof(want));
	for (int i = 0; i < n && !found; i++) {
		ktune__op_config_format(op, &cands[i], got, sizeof(got));
		found = cands[i].family == cfg->family && !strcmp(got, want);
	}
	free(cands);
	return found;
}

/*
 * The backward's default on sm_90: attention_wgmma_bwd for every pass
 * (bwd, bwd_det), head dim, dtype and mask at 128 queries and keys or
 * more: BLOCK_M 64, two consumers, two stages, as the H100's sweep chose;
 * the deterministic pass's SPLITS by the grid's K/V heads against the SMs.
 */
static void test_dispatch__attention_bwd_default_is_wgmma_on_sm90(void **state)
{
	static const char *const passes[] = { "bwd", "bwd_det" }, *const masks[] = { "none", "causal" };
	const struct ktune_op *op = ktune__op_find("attention");
	struct ktune_config cfg;
	char why[160];
	(void)state;

	ktune_ctx *ctx = make_ctx(NULL, 0);
	for (int p = 0; p < 2; p++)
		for (int d = 64; d <= 128; d *= 2)
			for (int t = 0; t < 2; t++)
				for (int mk = 0; mk < 2; mk++) {
					struct ktune_key key = { .op = "attention", .dtype = t ? KTUNE_F16 : KTUNE_BF16,
								 .m = 1024, .n = 1024, .k = 256, .aligned = 1 };
					snprintf(key.variant, sizeof(key.variant), "%s,%d,%s,1", passes[p], d, masks[mk]);
					assert_string_equal(choose(ctx, key, &cfg), "default");
					assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_WGMMA_BWD);
					assert_int_equal(op->prune(&key, &cfg, SMS, why, sizeof(why)), 0);
					assert_true(attention_candidate(ctx, &key, &cfg));
					assert_int_equal(ktune__op_param(op, &cfg, "BLOCK_M", 0), 64);
					assert_int_equal(ktune__op_param(op, &cfg, "CONSUMERS", 0), 2);
					assert_int_equal(ktune__op_param(op, &cfg, "STAGES", 0), 2);
					assert_int_equal(ktune__op_param(op, &cfg, "SPLITS", 0), 1); /* 256 heads: a wave */
					key.m = key.n = 4096;
					key.k = 64;
					assert_string_equal(choose(ctx, key, &cfg), "default");
					assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_WGMMA_BWD);
					assert_true(attention_candidate(ctx, &key, &cfg));
					/* 64 K/V heads: two slices each to fill the 132 SMs, as the sweep chose */
					assert_int_equal(ktune__op_param(op, &cfg, "SPLITS", 0), p ? 2 : 1);
				}
	/* the slices count K/V heads: 64 query heads in groups of 8 are 8 of them, 16 slices' worth */
	struct ktune_key gqa = { .op = "attention", .dtype = KTUNE_BF16, .variant = "bwd_det,128,causal,8", .m = 4096,
				 .n = 4096, .k = 64, .aligned = 1 };
	assert_string_equal(choose(ctx, gqa, &cfg), "default");
	assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_WGMMA_BWD);
	assert_int_equal(ktune__op_param(op, &cfg, "SPLITS", 0), 8);
	free_ctx(ctx);
}

/*
 * Over awkward lengths (bucketed as dispatch buckets them), every head dim
 * the backward takes, both passes, masks, GQA ratios and head counts: the
 * sm_90 default is attention_wgmma_bwd at 128 queries and keys or more and
 * one of the key's candidates (its space, its prune), for the bucketed key
 * and the exact one; the mma.sync default below that, and on sm_80
 * everywhere; for head dim 256, which the backward refuses, no wgmma default.
 */
static void test_dispatch__attention_bwd_default_by_shape(void **state)
{
	static const int64_t lens[] = { 1, 63, 77, 128, 129, 1000, 4097 }, bhs[] = { 1, 12, 64, 300 };
	static const char *const variants[] = { "bwd,64,none,1",   "bwd,128,causal,1", "bwd_det,64,causal,2",
						"bwd_det,128,none,1", "bwd_det,128,causal,16", "bwd,64,causal,4" };
	const struct ktune_op *op = ktune__op_find("attention");
	const int nlens = (int)(sizeof(lens) / sizeof(lens[0])), nbhs = (int)(sizeof(bhs) / sizeof(bhs[0]));
	struct ktune_config cfg;
	char why[160];
	int wgmma = 0, mma = 0;
	(void)state;

	ktune_ctx *ctx = make_ctx(NULL, 0), *a100 = make_ctx(NULL, 0);
	snprintf(a100->id.arch, sizeof(a100->id.arch), "sm_80");
	a100->id.sm_count = 108;
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++)
		for (int i = 0; i < nlens; i++)
			for (int j = 0; j < nlens; j++)
				for (int h = 0; h < nbhs; h++) {
					struct ktune_key exact = { .op = "attention", .dtype = (i + j) % 2 ? KTUNE_F16 : KTUNE_BF16,
								   .m = lens[i], .n = lens[j], .k = bhs[h], .aligned = 1 };
					snprintf(exact.variant, sizeof(exact.variant), "%s", variants[v]);
					struct ktune_key key = exact;
					op->key_bucket(&key);
					assert_string_equal(choose(ctx, key, &cfg), "default");
					assert_int_equal(op->prune(&key, &cfg, SMS, why, sizeof(why)), 0);
					assert_int_equal(op->prune(&exact, &cfg, SMS, why, sizeof(why)), 0);
					assert_true(attention_candidate(ctx, &key, &cfg));
					if (key.m >= 128 && key.n >= 128) {
						assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_WGMMA_BWD);
						wgmma++;
					} else {
						assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_BWD);
						mma++;
					}
					assert_string_equal(choose(a100, key, &cfg), "default");
					assert_int_equal(cfg.family, KTUNE_ATTN_FAMILY_BWD);
					assert_int_equal(op->prune(&key, &cfg, 108, why, sizeof(why)), 0);
				}
	assert_true(wgmma > 0 && mma > 0);
	/* head dim 256: the backward's key check refuses it; the wgmma prune keeps no default for it either */
	struct ktune_key d256 = { .op = "attention", .dtype = KTUNE_BF16, .variant = "bwd,256,none,1", .m = 1024,
				  .n = 1024, .k = 64, .aligned = 1 };
	assert_int_equal(op->arch_default(&d256, SMS, "sm_90", &cfg), 0);
	snprintf(d256.variant, sizeof(d256.variant), "bwd_det,256,causal,1");
	assert_int_equal(op->arch_default(&d256, SMS, "sm_90", &cfg), 0);
	free_ctx(a100);
	free_ctx(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dispatch__exact_beats_arch),
		cmocka_unit_test(test_dispatch__fits_shared_memory),
		cmocka_unit_test(test_dispatch__shipped_is_lowest),
		cmocka_unit_test(test_dispatch__shipped_prefers_this_gpu),
		cmocka_unit_test(test_dispatch__tuned_but_slower_than_cublas),
		cmocka_unit_test(test_dispatch__neighbour_of_the_same_regime),
		cmocka_unit_test(test_dispatch__deep_k_is_not_served_without_split_k),
		cmocka_unit_test(test_dispatch__small_m_keeps_to_its_class),
		cmocka_unit_test(test_dispatch__neighbour_slower_than_cublas),
		cmocka_unit_test(test_dispatch__model_pick_by_regime),
		cmocka_unit_test(test_dispatch__cublas_where_ktune_has_no_good_answer),
		cmocka_unit_test(test_dispatch__never_wgmma_for_unaligned),
		cmocka_unit_test(test_dispatch__decision_is_pure),
		cmocka_unit_test(test_dispatch__op_neighbour_kept_by_prune),
		cmocka_unit_test(test_dispatch__op_neighbour_fitted),
		cmocka_unit_test(test_dispatch__quant_neighbour_same_rows),
		cmocka_unit_test(test_dispatch__attention_default_by_arch),
		cmocka_unit_test(test_dispatch__attention_bwd_default_is_wgmma_on_sm90),
		cmocka_unit_test(test_dispatch__attention_bwd_default_by_shape),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
