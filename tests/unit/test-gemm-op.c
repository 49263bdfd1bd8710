/*
 * test-gemm-op.c - the GEMM op family without a GPU: configuration text,
 * the space's admission, the launch contract's shared memory, pruning,
 * the built-in default, split-K fitting, alignment and candidate sampling.
 * Dispatch is test-dispatch.c's, the performance model test-gemm-model.c's.
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

#include "ops/gemm.h"
#include "search/space.h"
#include "templates.h"
#include "tuner/candidates.h"

#define SMS 132
#define SMEM_LIMIT (227 * 1024) /* H100's opt-in shared memory per block */

static const char *const layouts[4] = { "nn", "nt", "tn", "tt" };

static struct ktune_key make_key(ktune_dtype dtype, const char *layout, int64_t m, int64_t n,
				 int64_t k)
{
	struct ktune_key key = { .op = "gemm", .dtype = dtype, .m = m, .n = n, .k = k, .aligned = 1 };
	assert_int_equal(ktune__layout_parse(layout, &key), 0);
	return key;
}

static int config_equal(const struct ktune_config *a, const struct ktune_config *b)
{
	return a->block_m == b->block_m && a->block_n == b->block_n && a->block_k == b->block_k &&
	       a->warps_m == b->warps_m && a->warps_n == b->warps_n && a->stages == b->stages &&
	       a->group_size == b->group_size && a->split_k == b->split_k &&
	       a->family == b->family && a->consumers == b->consumers && a->cluster_m == b->cluster_m &&
	       a->warps_k == b->warps_k;
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

/* Every admitted configuration of the space, in space order. */
struct all_configs {
	struct ktune_config *cfg;
	int n, cap;
};

static int collect_config(const long *values, void *arg)
{
	struct all_configs *a = arg;
	struct ktune_config cfg;
	struct ktune_err e;
	if (ktune__gemm_config_from_values(ktune__gemm_space(NULL), values, &cfg, &e))
		fail_msg("from_values: %s", e.msg);
	if (a->n == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 1024;
		a->cfg = realloc(a->cfg, (size_t)a->cap * sizeof(*a->cfg));
		assert_non_null(a->cfg);
	}
	a->cfg[a->n++] = cfg;
	return 0;
}

static struct all_configs all_configs(void)
{
	struct all_configs a = { 0 };
	struct ktune_err e;
	const struct ktune_space *s = ktune__gemm_space(&e);
	if (!s)
		fail_msg("gemm space: %s", e.msg);
	assert_int_equal(ktune__space_enumerate(s, collect_config, &a), 0);
	assert_int_equal(a.n, ktune__space_count(s));
	assert_true(a.n > 0);
	return a;
}

/* ------------------------------------------------------------ config text */

static void test_gemm_op__config_text_round_trip(void **state)
{
	struct all_configs a = all_configs();
	struct ktune_err e;
	char text[256];
	(void)state;

	for (int i = 0; i < a.n; i++) {
		struct ktune_config back;
		ktune__gemm_config_format(&a.cfg[i], text, sizeof(text));
		if (ktune__gemm_config_parse(text, &back, &e))
			fail_msg("'%s': %s", text, e.msg);
		assert_config_equal(&back, &a.cfg[i]);
	}
	free(a.cfg);

	struct ktune_config c = { 128, 256, 32, 2, 4, 3, 8, 16 }, back;
	ktune__gemm_config_format(&c, text, sizeof(text));
	assert_string_equal(text, "BLOCK_M=128,BLOCK_N=256,BLOCK_K=32,WARPS_M=2,WARPS_N=4,"
				  "STAGES=3,GROUP_SIZE=8,SPLIT_K=16");
	/* any order */
	assert_int_equal(ktune__gemm_config_parse("SPLIT_K=16,GROUP_SIZE=8,STAGES=3,WARPS_N=4,"
						  "WARPS_M=2,BLOCK_K=32,BLOCK_N=256,BLOCK_M=128",
						  &back, &e),
			 KTUNE_OK);
	assert_config_equal(&back, &c);

	/* a short buffer gets a terminated prefix */
	char small[12];
	memset(small, 'x', sizeof(small));
	ktune__gemm_config_format(&c, small, sizeof(small));
	assert_string_equal(small, "BLOCK_M=128");
}

/* Parses text expecting KTUNE_ERR_PARSE; returns the message. */
static const char *parse_error(const char *text)
{
	static struct ktune_err e;
	struct ktune_config c;
	e.msg[0] = 0;
	int rc = ktune__gemm_config_parse(text, &c, &e);
	if (rc != KTUNE_ERR_PARSE)
		fail_msg("'%s' parsed (%d)", text, rc);
	assert_non_null(strstr(e.msg, text)); /* the message quotes the input */
	return e.msg;
}

#define REST "BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_SIZE=8,SPLIT_K=1"

static void assert_contains(const char *msg, const char *part)
{
	if (!strstr(msg, part))
		fail_msg("'%s' does not contain '%s'", msg, part);
}

static void test_gemm_op__config_parse_errors(void **state)
{
	struct ktune_config c;
	struct ktune_err e;
	(void)state;

	assert_int_equal(ktune__gemm_config_parse("BLOCK_M=128," REST, &c, &e), KTUNE_OK);
	assert_int_equal(c.block_m, 128);
	assert_int_equal(c.group_size, 8);

	assert_contains(parse_error("BLOCK_X=128," REST), "unknown parameter 'BLOCK_X'");
	assert_contains(parse_error("BLOCK=128," REST), "unknown parameter 'BLOCK'");
	assert_contains(parse_error("BLOCK_MM=128," REST), "unknown parameter 'BLOCK_MM'");
	assert_contains(parse_error("block_m=128," REST), "unknown parameter 'block_m'");

	assert_contains(parse_error("BLOCK_M=128,BLOCK_M=64," REST), "'BLOCK_M' given twice");
	assert_contains(parse_error("BLOCK_M=128," REST ",SPLIT_K=1"), "'SPLIT_K' given twice");

	assert_contains(parse_error(REST), "'BLOCK_M' is missing");
	assert_contains(parse_error("BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,"
				    "STAGES=4,GROUP_SIZE=8"),
			"'SPLIT_K' is missing");
	assert_contains(parse_error(""), "is missing");

	assert_contains(parse_error("BLOCK_M=abc," REST), "'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=12x," REST), "'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=," REST), "'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=1.5," REST), "'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=99999999999999999999," REST),
			"'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=0," REST), "'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=-16," REST), "'BLOCK_M' is not a positive integer");
	assert_contains(parse_error("BLOCK_M=128," REST "=2"), "'SPLIT_K' is not a positive integer");

	assert_contains(parse_error("BLOCK_M," REST), "expected NAME=VALUE");
	assert_contains(parse_error("BLOCK_M=128,," REST), "expected NAME=VALUE");
}

/* -------------------------------------------------------------- admission */

static void test_gemm_op__config_admitted(void **state)
{
	struct ktune_config c = { 128, 128, 32, 2, 2, 4, 8, 1 };
	struct ktune_err e;
	(void)state;

	e.msg[0] = 0;
	assert_int_equal(ktune__gemm_config_admitted(&c, &e), 1);

	c.block_m = 48; /* not in the list */
	assert_int_equal(ktune__gemm_config_admitted(&c, &e), 0);
	assert_contains(e.msg, "BLOCK_M=48 is not one of 16, 32, 64, 128, 256");

	c.block_m = 128;
	c.split_k = 3;
	assert_int_equal(ktune__gemm_config_admitted(&c, &e), 0);
	assert_contains(e.msg, "SPLIT_K=3");

	/* each value in its list, but a warp would hold half an m16 tile */
	struct ktune_config v = { 16, 128, 32, 2, 2, 3, 1, 1 };
	assert_int_equal(ktune__gemm_config_admitted(&v, &e), 0);
	assert_contains(e.msg, "violates 'BLOCK_M % (WARPS_M * 16) == 0 && BLOCK_N % (WARPS_N * 16) == 0'");

	/* BLOCK_K=64 only with up to 3 stages, unless the tile is a small-M one */
	struct ktune_config deep = { 64, 128, 64, 2, 2, 4, 1, 1 };
	assert_int_equal(ktune__gemm_config_admitted(&deep, &e), 0);
	assert_contains(e.msg, "violates 'BLOCK_K == 32 || STAGES <= 3 || BLOCK_M <= 32'");
	deep.stages = 3;
	assert_int_equal(ktune__gemm_config_admitted(&deep, &e), 1);
	struct ktune_config small = { 16, 128, 64, 1, 4, 6, 1, 4 };
	assert_int_equal(ktune__gemm_config_admitted(&small, &e), 1);
	small.block_m = 64;
	small.warps_m = 1;
	assert_int_equal(ktune__gemm_config_admitted(&small, &e), 0);
}

/* ---------------------------------------------------------- shared memory */

/*
 * gemm.cu's header, written out again:
 *   SMEM_BYTES = STAGES * (A_TILE + B_TILE) * 2 bytes,
 *   A_TILE = TRANS_A ? BLOCK_K * (BLOCK_M + 8) : BLOCK_M * (BLOCK_K + 8)
 *   B_TILE = TRANS_B ? BLOCK_N * (BLOCK_K + 8) : BLOCK_K * (BLOCK_N + 8)
 */
static size_t header_smem(int trans_a, int trans_b, const struct ktune_config *c)
{
	long bm = c->block_m, bn = c->block_n, bk = c->block_k;
	long a_rows = trans_a ? bk : bm, a_cols = trans_a ? bm : bk;
	long b_rows = trans_b ? bn : bk, b_cols = trans_b ? bk : bn;
	long a_tile = a_rows * (a_cols + 8), b_tile = b_rows * (b_cols + 8);
	return (size_t)(c->stages * (a_tile + b_tile) * 2);
}

static void test_gemm_op__smem_bytes_per_layout(void **state)
{
	struct ktune_config c = { 128, 128, 32, 2, 2, 4, 8, 1 };
	(void)state;

	/* the formula is still the one in gemm.cu's header */
	const struct ktune_template_file *f = ktune__template_file(KTUNE_GEMM_SOURCE);
	assert_non_null(f);
	assert_non_null(strstr(f->text, "SMEM_BYTES = STAGES * (A_TILE + B_TILE) * 2 bytes"));
	assert_non_null(strstr(f->text, "A_TILE = TRANS_A ? BLOCK_K * (BLOCK_M + 8) : BLOCK_M * (BLOCK_K + 8)"));
	assert_non_null(strstr(f->text, "B_TILE = TRANS_B ? BLOCK_N * (BLOCK_K + 8) : BLOCK_K * (BLOCK_N + 8)"));

	/* by hand, for 128x128x32 with 4 stages */
	static const size_t expect[4] = {
		4 * (128 * 40 + 32 * 136) * 2, /* nn: A [128][32+8], B [32][128+8] */
		4 * (128 * 40 + 128 * 40) * 2, /* nt: B [128][32+8] */
		4 * (32 * 136 + 32 * 136) * 2, /* tn: A [32][128+8] */
		4 * (32 * 136 + 128 * 40) * 2, /* tt */
	};
	for (int l = 0; l < 4; l++) {
		struct ktune_key key = make_key(KTUNE_F16, layouts[l], 4096, 4096, 4096);
		assert_int_equal(ktune__gemm_smem_bytes(&key, &c), expect[l]);
	}
	assert_int_equal(expect[0], 75776);
	assert_int_equal(expect[1], 81920);

	/* every config of the space, every layout, both dtypes (2-byte elements both) */
	struct all_configs a = all_configs();
	for (int i = 0; i < a.n; i++)
		for (int l = 0; l < 4; l++)
			for (int d = 0; d < 2; d++) {
				struct ktune_key key = make_key((ktune_dtype)d, layouts[l], 7, 33, 100);
				key.aligned = i & 1;
				assert_int_equal(ktune__gemm_smem_bytes(&key, &a.cfg[i]),
						 header_smem(l >> 1, l & 1, &a.cfg[i]));
			}
	free(a.cfg);
}

static void test_gemm_op__launch_contract(void **state)
{
	struct ktune_config c = { 128, 64, 32, 2, 2, 4, 8, 4 };
	struct ktune_key key = make_key(KTUNE_F16, "nt", 300, 130, 1000);
	unsigned grid[3];
	(void)state;

	assert_int_equal(ktune__gemm_threads(&c), 128);
	ktune__gemm_grid(&key, &c, grid);
	assert_int_equal(grid[0], 3 * 3); /* ceil(300/128) * ceil(130/64) */
	assert_int_equal(grid[1], 1);
	assert_int_equal(grid[2], 4);
	assert_int_equal(ktune__gemm_partials_bytes(&key, &c, SMS), 4 * 300 * 130 * 4);
	assert_int_equal(ktune__gemm_counters(&key, &c, SMS), 9);
	c.split_k = 1;
	assert_int_equal(ktune__gemm_partials_bytes(&key, &c, SMS), 0);
	assert_int_equal(ktune__gemm_counters(&key, &c, SMS), 0);

	char opts[KTUNE_MAX_OPTIONS][48];
	struct ktune_key bt = make_key(KTUNE_BF16, "tn", 1, 1, 1);
	bt.aligned = 0;
	int n = ktune__gemm_defines(&bt, &c, opts, KTUNE_MAX_OPTIONS);
	assert_int_equal(n, 12);
	static const char *const want[] = { "-DBLOCK_M=128", "-DBLOCK_N=64", "-DBLOCK_K=32",
					    "-DWARPS_M=2", "-DWARPS_N=2", "-DSTAGES=4",
					    "-DDTYPE_BF16=1", "-DTRANS_A=1", "-DTRANS_B=0",
					    "-DALIGNED=0", "-DREAD_ONCE_A=1", "-DREAD_ONCE_B=1" };
	for (int i = 0; i < n; i++)
		assert_string_equal(opts[i], want[i]);
	assert_int_equal(ktune__gemm_defines(&bt, &c, opts, 11), -1);

	/* an operand is streamed only when one block reads each of its elements */
	int once_a, once_b;
	ktune__gemm_read_once(&key, &c, &once_a, &once_b); /* 300 x 130: 3 x 3 tiles */
	assert_false(once_a);
	assert_false(once_b);
	struct ktune_key gemv = make_key(KTUNE_F16, "nt", 16, 4096, 4096);
	ktune__gemm_read_once(&gemv, &c, &once_a, &once_b);
	assert_false(once_a);
	assert_true(once_b);

	/* GROUP_SIZE and SPLIT_K are kernel arguments: they do not change the kernel */
	struct ktune_config d = c;
	d.group_size = 1;
	d.split_k = 16;
	assert_true(ktune__gemm_same_kernel(&c, &d));
	d.stages = 3;
	assert_false(ktune__gemm_same_kernel(&c, &d));
}

/* ---------------------------------------------------------------- pruning */

static int prune(const struct ktune_key *key, const struct ktune_config *c, int smem_limit,
		 char *why, size_t len)
{
	why[0] = 0;
	return ktune__gemm_prune(key, c, SMS, smem_limit, why, len);
}

static void test_gemm_op__prune(void **state)
{
	struct ktune_key big = make_key(KTUNE_F16, "nt", 4096, 4096, 4096);
	struct ktune_config c = { 128, 128, 32, 2, 2, 4, 8, 1 };
	char why[256];
	(void)state;

	/* kept: a sensible tile for a big key */
	assert_int_equal(prune(&big, &c, SMEM_LIMIT, why, sizeof(why)), 0);
	assert_int_equal(prune(&big, &c, 0, why, sizeof(why)), 0); /* 0: no smem check */

	/* shared memory over the device's limit */
	assert_int_equal(prune(&big, &c, 48 * 1024, why, sizeof(why)), 1);
	assert_contains(why, "81920 bytes of shared memory");
	assert_contains(why, "49152");
	assert_int_equal(prune(&big, &c, 81920, why, sizeof(why)), 0); /* exactly at the limit */

	/* BLOCK_M far above M */
	struct ktune_key m16 = make_key(KTUNE_F16, "nt", 16, 4096, 4096);
	assert_int_equal(prune(&m16, &c, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "BLOCK_M=128");
	assert_contains(why, "M=16");
	struct ktune_config m32 = { 32, 128, 32, 2, 2, 4, 1, 1 };
	assert_int_equal(prune(&m16, &m32, SMEM_LIMIT, why, sizeof(why)), 1);
	struct ktune_key m17 = make_key(KTUNE_F16, "nt", 17, 4096, 4096);
	assert_int_equal(prune(&m17, &m32, SMEM_LIMIT, why, sizeof(why)), 0);
	struct ktune_config m16c = { 16, 128, 64, 1, 4, 3, 1, 1 };
	struct ktune_key m1 = make_key(KTUNE_F16, "nt", 1, 4096, 4096);
	assert_int_equal(prune(&m1, &m16c, SMEM_LIMIT, why, sizeof(why)), 0); /* the smallest tile stays */

	/* BLOCK_N far above N */
	struct ktune_key n32 = make_key(KTUNE_F16, "nt", 4096, 32, 4096);
	struct ktune_config n128 = { 128, 128, 32, 2, 2, 4, 1, 1 };
	assert_int_equal(prune(&n32, &n128, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "BLOCK_N=128");

	/* split-K where 32 x 32 = 1024 tiles already fill 132 SMs */
	struct ktune_config split = c;
	split.split_k = 2;
	assert_int_equal(prune(&big, &split, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "SPLIT_K=2");
	assert_contains(why, "1024 tiles");

	/* split-K that helps: 32 tiles for M=16, 64 K tiles, 4 splits */
	struct ktune_config skinny = { 16, 128, 64, 1, 4, 3, 1, 4 };
	assert_int_equal(prune(&m16, &skinny, SMEM_LIMIT, why, sizeof(why)), 0);
	/* ... but not so many splits that each gets under two K tiles */
	struct ktune_key shortk = make_key(KTUNE_F16, "nt", 16, 4096, 256); /* 4 K tiles */
	assert_int_equal(prune(&shortk, &skinny, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "under two K tiles");
	/* ... nor more than 8 blocks per SM: 127 tiles x 16 splits = 2032 > 8 x 132 */
	struct ktune_key wide = make_key(KTUNE_F16, "nt", 16, 4 * 4096 - 128, 65536); /* 127 tiles */
	struct ktune_config s16 = skinny;
	s16.split_k = 16;
	assert_int_equal(prune(&wide, &s16, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "blocks for 132 SMs");

	/* small tiles on a big problem: 64x64 on 8192^3 is 16384 tiles, over 32 per SM */
	struct ktune_key huge = make_key(KTUNE_F16, "nt", 8192, 8192, 8192);
	struct ktune_config small_tile = { 64, 64, 32, 2, 1, 4, 8, 1 };
	assert_int_equal(prune(&huge, &small_tile, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "too small");
	assert_int_equal(prune(&big, &small_tile, SMEM_LIMIT, why, sizeof(why)), 0); /* 4096 tiles */
	assert_int_equal(prune(&huge, &c, SMEM_LIMIT, why, sizeof(why)), 0);        /* 128x128 stays */

	/* GROUP_SIZE with one row of tiles */
	struct ktune_key m64 = make_key(KTUNE_F16, "nt", 64, 4096, 4096);
	struct ktune_config grouped = { 64, 128, 32, 2, 2, 4, 8, 1 };
	assert_int_equal(prune(&m64, &grouped, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_contains(why, "GROUP_SIZE=8");
	grouped.group_size = 1;
	assert_int_equal(prune(&m64, &grouped, SMEM_LIMIT, why, sizeof(why)), 0);
	struct ktune_key m65 = make_key(KTUNE_F16, "nt", 65, 4096, 4096); /* two rows */
	grouped.group_size = 8;
	assert_int_equal(prune(&m65, &grouped, SMEM_LIMIT, why, sizeof(why)), 0);
}

/* ---------------------------------------------------------------- default */

static void test_gemm_op__default_config_admitted(void **state)
{
	static const int64_t ms[] = { 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128,
				      129, 1000, 1024, 2047, 4096, 5000, 8191, 8192 };
	static const int64_t ns[] = { 1, 7, 64, 100, 1024, 4096, 6144, 14336, 28672 };
	static const int64_t ks[] = { 1, 7, 64, 100, 1024, 4096, 14336, 65536 };
	static const int sms[] = { 0, 1, 8, 108, 132, 1000 };
	struct ktune_err e;
	long checked = 0;
	(void)state;

	for (size_t a = 0; a < sizeof(ms) / sizeof(ms[0]); a++)
		for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
			for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++)
				for (size_t s = 0; s < sizeof(sms) / sizeof(sms[0]); s++) {
					struct ktune_key key = make_key(KTUNE_F16, layouts[(a + b + c) % 4],
									ms[a], ns[b], ks[c]);
					struct ktune_config cfg =
						ktune__gemm_default_config(&key, sms[s]);
					int sm = sms[s] > 0 ? sms[s] : SMS;
					unsigned grid[3];
					if (!ktune__gemm_config_admitted(&cfg, &e))
						fail_msg("default for %lldx%lldx%lld: %s", (long long)ms[a],
							 (long long)ns[b], (long long)ks[c], e.msg);
					ktune__gemm_grid(&key, &cfg, grid);
					assert_true(ktune__gemm_smem_bytes(&key, &cfg) <= 99 * 1024);
					if (cfg.split_k > 1) {
						/* split only to fill the GPU, each split with >= 2 K tiles */
						assert_true((long)grid[0] * cfg.split_k <= sm);
						assert_true((ks[c] + cfg.block_k - 1) / cfg.block_k >=
							    2 * cfg.split_k);
					}
					checked++;
				}
	assert_int_equal(checked, 23 * 9 * 8 * 6);

	/* a decode GEMV-like key: 32 tiles cannot fill 132 SMs, so K is split */
	struct ktune_key gemv = make_key(KTUNE_F16, "nt", 1, 4096, 4096);
	struct ktune_config cfg = ktune__gemm_default_config(&gemv, SMS);
	assert_int_equal(cfg.block_m, 16);
	assert_true(cfg.split_k > 1);
	char why[256] = "";
	if (ktune__gemm_prune(&gemv, &cfg, SMS, SMEM_LIMIT, why, sizeof(why)))
		fail_msg("the default for M=1 is pruned: %s", why);
	/* a big key needs no split */
	struct ktune_key big = make_key(KTUNE_BF16, "nn", 4096, 4096, 4096);
	cfg = ktune__gemm_default_config(&big, SMS);
	assert_int_equal(cfg.split_k, 1);
	assert_int_equal(ktune__gemm_prune(&big, &cfg, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
}

static void test_gemm_op__fit_split(void **state)
{
	struct ktune_config cfg = { 16, 128, 64, 1, 4, 3, 1, 16 }; /* tuned for M=1 */
	(void)state;

	/* 512 x 64 tiles: 16 splits would make 524288 blocks */
	struct ktune_key huge = make_key(KTUNE_F16, "nt", 8192, 8192, 65536);
	ktune__gemm_fit_split(&huge, &cfg, SMS);
	assert_int_equal(cfg.split_k, 1);

	/* a key like the one it was tuned for keeps its split */
	struct ktune_key gemv = make_key(KTUNE_F16, "nt", 2, 4096, 4096); /* 32 tiles */
	cfg.split_k = 16;
	ktune__gemm_fit_split(&gemv, &cfg, SMS);
	assert_int_equal(cfg.split_k, 16); /* 512 blocks <= 8 x 132 */

	/* in between: 96 tiles x 16 = 1536 blocks > 1056, 8 splits make 768 */
	struct ktune_key mid = make_key(KTUNE_F16, "nt", 48, 4096, 4096);
	cfg.split_k = 16;
	ktune__gemm_fit_split(&mid, &cfg, SMS);
	assert_int_equal(cfg.split_k, 8);

	/* fp32 scratch over 256 MiB is lowered too, even when the block count is fine */
	struct ktune_config tall = { 256, 256, 32, 4, 2, 3, 1, 16 };
	struct ktune_key square = make_key(KTUNE_F16, "nn", 4096, 4096, 1 << 20);
	ktune__gemm_fit_split(&square, &tall, 1000); /* 256 tiles: the block limit allows 16 */
	assert_true(ktune__gemm_partials_bytes(&square, &tall, 1000) <= (256u << 20));
	assert_int_equal(tall.split_k, 4);

	/* split_k = 1 is left alone */
	cfg.split_k = 1;
	ktune__gemm_fit_split(&huge, &cfg, SMS);
	assert_int_equal(cfg.split_k, 1);
}

static void test_gemm_op__aligned(void **state)
{
	char *base = (char *)(uintptr_t)0x10000;
	(void)state;

	assert_int_equal(ktune__gemm_aligned(base, 8, base + 4096, 16, base + 8192, 4096), 1);
	assert_int_equal(ktune__gemm_aligned(base + 2, 8, base + 4096, 16, base + 8192, 4096), 0);
	assert_int_equal(ktune__gemm_aligned(base, 8, base + 4104, 16, base + 8192, 4096), 0);
	assert_int_equal(ktune__gemm_aligned(base, 8, base + 4096, 16, base + 8200, 4096), 0);
	assert_int_equal(ktune__gemm_aligned(base, 7, base + 4096, 16, base + 8192, 4096), 0);
	assert_int_equal(ktune__gemm_aligned(base, 8, base + 4096, 12, base + 8192, 4096), 0);
	assert_int_equal(ktune__gemm_aligned(base, 8, base + 4096, 16, base + 8192, 4100), 0);
	assert_int_equal(ktune__gemm_aligned(base + 16, 4104, base + 32, 8, base + 48, 24), 1);
}

static void test_gemm_op__counts_and_tolerance(void **state)
{
	struct ktune_key key = make_key(KTUNE_BF16, "nt", 16, 4096, 1024);
	double fro16, max16, fro_bf, max_bf;
	(void)state;

	assert_true(ktune__gemm_flops(&key) == 2.0 * 16 * 4096 * 1024);
	assert_true(ktune__gemm_bytes(&key) == 2.0 * (16 * 1024 + 1024 * 4096 + 16 * 4096));
	ktune__gemm_tolerance(KTUNE_F16, &fro16, &max16);
	ktune__gemm_tolerance(KTUNE_BF16, &fro_bf, &max_bf);
	/* looser for bf16's 8-bit significand, far below the error of a wrong answer (~1) */
	assert_true(fro16 > 0 && fro16 < fro_bf && fro_bf < 0.1);
	assert_true(max16 >= fro16 && max_bf >= fro_bf && max_bf < 0.5);
}

/* ------------------------------------------------------------- candidates */

static int same_list(const struct ktune_config *a, const struct ktune_config *b, int n)
{
	for (int i = 0; i < n; i++)
		if (!config_equal(&a[i], &b[i]))
			return 0;
	return 1;
}

static void test_gemm_op__candidates(void **state)
{
	struct ktune_key key = make_key(KTUNE_F16, "nt", 4096, 4096, 4096);
	struct ktune_config *all, *s1, *s1again, *s2;
	int nall, n1, n1again, n2, pall, p1, p1again, p2;
	struct ktune_err e;
	char why[256];
	(void)state;

	/* an aligned key: gemv's space is drawn from too, all of it pruned at M = 4096 */
	const long total = ktune__space_count(ktune__gemm_space(NULL)) +
			   ktune__space_count(ktune__gemm_family_space(KTUNE_GEMM_GEMV, NULL));
	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, 0, 1, &all, &nall, &pall, &e),
			 KTUNE_OK);
	assert_true(nall > 10);
	assert_true(pall > 0); /* split-K is pointless for 1024 tiles */
	assert_int_equal(nall + pall, total);
	for (int i = 0; i < nall; i++) {
		if (!ktune__gemm_config_admitted(&all[i], &e))
			fail_msg("candidate %d not admitted: %s", i, e.msg);
		if (ktune__gemm_prune(&key, &all[i], SMS, SMEM_LIMIT, why, sizeof(why)))
			fail_msg("candidate %d pruned: %s", i, why);
		assert_int_equal(all[i].split_k, 1);
		for (int j = 0; j < i; j++)
			assert_false(config_equal(&all[i], &all[j]));
	}

	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, 10, 1, &s1, &n1, &p1, &e),
			 KTUNE_OK);
	assert_int_equal(n1, 10);
	assert_int_equal(n1 + p1, total);
	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, 10, 1, &s1again, &n1again,
						&p1again, &e),
			 KTUNE_OK);
	assert_int_equal(n1again, 10);
	assert_true(same_list(s1, s1again, 10));
	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, 10, 2, &s2, &n2, &p2, &e),
			 KTUNE_OK);
	assert_int_equal(n2, 10);
	assert_false(same_list(s1, s2, 10));

	/* a sample: distinct members of the full list */
	for (int i = 0; i < 10; i++) {
		int found = 0;
		for (int j = 0; j < nall && !found; j++)
			found = config_equal(&s1[i], &all[j]);
		assert_true(found);
		for (int j = 0; j < i; j++)
			assert_false(config_equal(&s1[i], &s1[j]));
		assert_int_equal(ktune__gemm_config_admitted(&s2[i], &e), 1);
		assert_int_equal(ktune__gemm_prune(&key, &s2[i], SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	}

	/* a budget at or above the count returns everything, in space order */
	struct ktune_config *big;
	int nbig, pbig;
	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, nall, 7, &big, &nbig, &pbig, &e),
			 KTUNE_OK);
	assert_int_equal(nbig, nall);
	assert_true(same_list(big, all, nall));

	/* a skinny key keeps split-K candidates; npruned may be NULL */
	struct ktune_key gemv = make_key(KTUNE_BF16, "nn", 1, 4096, 4096);
	struct ktune_config *sk;
	int nsk, splits = 0;
	assert_int_equal(ktune__gemm_candidates(&gemv, NULL, SMS, SMEM_LIMIT, 0, 1, &sk, &nsk, NULL, &e),
			 KTUNE_OK);
	assert_true(nsk > 0);
	for (int i = 0; i < nsk; i++) {
		splits += sk[i].split_k > 1;
		assert_true(sk[i].block_m <= 16);
		assert_int_equal(ktune__gemm_prune(&gemv, &sk[i], SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	}
	assert_true(splits > 0);

	free(all);
	free(s1);
	free(s1again);
	free(s2);
	free(big);
	free(sk);
}

/* ----------------------------------------------------------- wgmma family */

/* 128x256, 4 stages, 2 consumers: the family's best on large H100 keys. */
static const struct ktune_config wg_a = { .block_m = 128, .block_n = 256, .block_k = 64,
					       .stages = 4, .group_size = 8, .split_k = 1,
					       .family = KTUNE_GEMM_WGMMA, .consumers = 2, .cluster_m = 2 };

static void test_gemm_op__wgmma_text_round_trip(void **state)
{
	struct ktune_config c;
	char text[256];
	struct ktune_err e;
	(void)state;

	ktune__gemm_config_format(&wg_a, text, sizeof(text));
	assert_string_equal(text, "FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,"
				  "CONSUMERS=2,CLUSTER_M=2,GROUP_SIZE=8,SPLIT_K=1");
	assert_int_equal(ktune__gemm_config_parse(text, &c, &e), KTUNE_OK);
	assert_config_equal(&c, &wg_a);
	assert_true(ktune__gemm_config_admitted(&c, &e));
	/* fields in another order */
	assert_int_equal(ktune__gemm_config_parse("FAMILY=wgmma,SPLIT_K=1,GROUP_SIZE=8,CLUSTER_M=2,"
						  "CONSUMERS=2,STAGES=4,BLOCK_K=64,BLOCK_N=256,BLOCK_M=128",
						  &c, &e), KTUNE_OK);
	assert_config_equal(&c, &wg_a);
	/* a text without FAMILY is still the mma.sync family */
	assert_int_equal(ktune__gemm_config_parse("BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,"
						  "WARPS_N=2,STAGES=4,GROUP_SIZE=8,SPLIT_K=1", &c, &e),
			 KTUNE_OK);
	assert_int_equal(c.family, KTUNE_GEMM_MMA);
	assert_int_equal(c.consumers, 0);
	ktune__gemm_config_format(&c, text, sizeof(text));
	assert_null(strstr(text, "FAMILY"));

	/* every admitted wgmma config round-trips */
	struct ktune_config *k;
	int n;
	assert_int_equal(ktune__gemm_space_kernels(KTUNE_GEMM_WGMMA, &k, &n, &e), KTUNE_OK);
	assert_int_equal(n, 34);
	for (int i = 0; i < n; i++) {
		assert_int_equal(k[i].family, KTUNE_GEMM_WGMMA);
		ktune__gemm_config_format(&k[i], text, sizeof(text));
		assert_int_equal(ktune__gemm_config_parse(text, &c, &e), KTUNE_OK);
		assert_config_equal(&c, &k[i]);
		assert_true(ktune__gemm_config_admitted(&c, &e));
		/* what the space admits, the kernel's static_asserts accept */
		assert_true(ktune__gemm_smem_bytes(NULL, &c) <= 232448);
		assert_true(c.block_m % (64 * c.consumers) == 0);
		assert_true(c.block_m / c.consumers / 64 * c.block_n / 2 <= (c.consumers == 3 ? 96 : 128));
		/* each tile with the deepest ring that fits */
		struct ktune_config deeper = c;
		deeper.stages++;
		assert_true(c.stages == 16 || ktune__gemm_smem_bytes(NULL, &deeper) > 232448);
		if (c.block_m == 64 && c.block_n == 64)
			assert_int_equal(c.stages, 13);
		if (c.block_m == 64 && c.block_n == 128)
			assert_int_equal(c.stages, 8);
	}
	free(k);
}

static void test_gemm_op__wgmma_parse_is_strict(void **state)
{
	static const struct {
		const char *text, *error;
	} bad[] = {
		{ "FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=2,CLUSTER_M=1,"
		  "GROUP_SIZE=8,SPLIT_K=1,WARPS_M=2", "unknown parameter 'WARPS_M'" },
		{ "BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_SIZE=8,"
		  "SPLIT_K=1,CONSUMERS=2", "unknown parameter 'CONSUMERS'" },
		{ "FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=2,"
		  "GROUP_SIZE=8,SPLIT_K=1", "'CLUSTER_M' is missing" },
		{ "FAMILY=tcgen05,BLOCK_M=128", "unknown family 'tcgen05'" },
		{ "FAMILY=gemm,BLOCK_M=128", "unknown family 'gemm'" },
		{ "FAMILY=wgmma", "no fields after FAMILY" },
		{ "FAMILY=wgmma,", "no fields after FAMILY" },
		{ "BLOCK_M=128,FAMILY=wgmma,BLOCK_N=256", "FAMILY comes first" },
		{ "FAMILY=wgmma,FAMILY=wgmma,BLOCK_M=128", "FAMILY comes first" },
		{ "FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=2,CLUSTER_M=1,"
		  "GROUP_SIZE=8,SPLIT_K=1,", "trailing ','" },
	};
	struct ktune_config c;
	struct ktune_err e;
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ktune__gemm_config_parse(bad[i].text, &c, &e), KTUNE_ERR_PARSE);
		if (!strstr(e.msg, bad[i].error))
			fail_msg("'%s': got '%s', want '%s'", bad[i].text, e.msg, bad[i].error);
	}
	/* parsed but not admitted: outside the space or against the kernel's static_asserts */
	static const char *outside[] = {
		"FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=1,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1", /* 256 accumulators a thread */
		"FAMILY=wgmma,BLOCK_M=192,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=3,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1", /* 3 consumers over 96 accumulators */
		"FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=5,CONSUMERS=2,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1", /* over 227 KiB */
		"FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=32,STAGES=4,CONSUMERS=2,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1",
		"FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=2,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=3", /* SPLIT_K is 1, 2, 4 or 8 */
		"FAMILY=wgmma,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,STAGES=6,CONSUMERS=1,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1", /* not the deepest ring */
		"FAMILY=wgmma,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,STAGES=7,CONSUMERS=1,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1", /* nor this: 64 x 64 fits 13 */
		"FAMILY=wgmma,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,STAGES=14,CONSUMERS=1,CLUSTER_M=1,"
		"GROUP_SIZE=8,SPLIT_K=1", /* over 227 KiB */
	};
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		assert_int_equal(ktune__gemm_config_parse(outside[i], &c, &e), KTUNE_OK);
		if (ktune__gemm_config_admitted(&c, &e))
			fail_msg("'%s' admitted", outside[i]);
	}
}

static void test_gemm_op__wgmma_same_kernel_and_contract(void **state)
{
	struct ktune_config b = wg_a;
	struct ktune_key key = make_key(KTUNE_BF16, "nt", 1000, 3000, 4096);
	unsigned grid[3];
	(void)state;

	b.group_size = 1;
	assert_true(ktune__gemm_same_kernel(&wg_a, &b));
	b.cluster_m = 1;
	assert_false(ktune__gemm_same_kernel(&wg_a, &b));
	b = wg_a;
	b.consumers = 1;
	assert_false(ktune__gemm_same_kernel(&wg_a, &b));
	/* the same tile numbers in the other family are another kernel */
	struct ktune_config mma = { 128, 256, 64, 0, 0, 4, 8, 1 };
	b = wg_a;
	b.consumers = b.cluster_m = 0;
	assert_false(ktune__gemm_same_kernel(&mma, &b));
	mma.family = KTUNE_GEMM_WGMMA;
	assert_true(ktune__gemm_same_kernel(&mma, &b));

	assert_int_equal(ktune__gemm_threads(&wg_a), 384);
	assert_int_equal(ktune__gemm_smem_bytes(&key, &wg_a), 1024 + 4 * 384 * 128 + 2 * 2 * 8192 + 4 * 16);
	char opts[16][48];
	int n = ktune__gemm_defines(&key, &wg_a, opts, 16);
	assert_int_equal(n, 9);
	assert_string_equal(opts[4], "-DCONSUMERS=2");
	assert_string_equal(opts[5], "-DCLUSTER_M=2");
	assert_string_equal(opts[8], "-DTRANS_B=1");
	/* persistent grid: 4 x 12 cluster tiles, at most 66 clusters resident */
	ktune__gemm_wgmma_grid(&key, &wg_a, 66, grid);
	assert_int_equal(grid[0], 2 * 48);
	assert_int_equal(grid[1] * grid[2], 1);
	struct ktune_key big = make_key(KTUNE_BF16, "nt", 8192, 8192, 8192);
	ktune__gemm_wgmma_grid(&big, &wg_a, 66, grid);
	assert_int_equal(grid[0], 132);
	b = wg_a;
	b.cluster_m = 1;
	ktune__gemm_wgmma_grid(&big, &b, SMS, grid);
	assert_int_equal(grid[0], SMS);

	assert_string_equal(ktune__gemm_entry(KTUNE_GEMM_WGMMA), "gemm_wgmma_kernel");
	assert_string_equal(ktune__gemm_entry(KTUNE_GEMM_MMA), "gemm_kernel");
	assert_string_equal(ktune__gemm_compile_arch(KTUNE_GEMM_WGMMA, "sm_90"), "sm_90a");
	assert_string_equal(ktune__gemm_compile_arch(KTUNE_GEMM_MMA, "sm_90"), "sm_90");
	assert_true(ktune__gemm_family_runs(KTUNE_GEMM_WGMMA, "sm_90", 1));
	assert_false(ktune__gemm_family_runs(KTUNE_GEMM_WGMMA, "sm_90", 0));
	assert_false(ktune__gemm_family_runs(KTUNE_GEMM_WGMMA, "sm_100", 1));
	assert_false(ktune__gemm_family_runs(KTUNE_GEMM_WGMMA, "sm_80", 1));
	assert_true(ktune__gemm_family_runs(KTUNE_GEMM_MMA, "sm_80", 0));
	assert_string_equal(ktune__gemm_family_name(KTUNE_GEMM_WGMMA), "gemm_wgmma");
	assert_int_equal(ktune__gemm_family_from_name("gemm_wgmma"), KTUNE_GEMM_WGMMA);
	assert_int_equal(ktune__gemm_family_from_name("wgmma"), -1);
	/* provenance: each family's results are fresh against their own source */
	const char *hw = ktune__gemm_family_hash(KTUNE_GEMM_WGMMA);
	assert_string_equal(hw, ktune__template_hash("gemm_wgmma.cu"));
	assert_true(ktune__gemm_result_fresh("gemm_wgmma", hw));
	assert_false(ktune__gemm_result_fresh("gemm", hw));
	assert_true(ktune__gemm_result_fresh("gemm", ktune__template_hash("gemm.cu")));
	char space[65];
	ktune__gemm_space_hash(space);
	assert_int_equal(strlen(space), 64);
	assert_string_not_equal(space, hw);
}

static void test_gemm_op__wgmma_prune(void **state)
{
	char why[256];
	struct ktune_config c = wg_a;
	(void)state;

	struct ktune_key key = make_key(KTUNE_F16, "nn", 4096, 4096, 4096);
	assert_int_equal(ktune__gemm_prune(&key, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	/* never for an unaligned key */
	key.aligned = 0;
	assert_int_equal(ktune__gemm_prune(&key, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "aligned"));
	key.aligned = 1;
	/* shared memory over the device's limit */
	assert_int_equal(ktune__gemm_prune(&key, &c, SMS, 160 * 1024, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "shared memory"));
	/* tiles far larger than the problem */
	struct ktune_key small_m = make_key(KTUNE_F16, "nt", 16, 4096, 4096);
	assert_int_equal(ktune__gemm_prune(&small_m, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	struct ktune_key small_n = make_key(KTUNE_F16, "nt", 4096, 64, 4096);
	assert_int_equal(ktune__gemm_prune(&small_n, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "BLOCK_N"));
	/* a 64-row tile stays for M = 1 (nothing smaller exists), without a cluster */
	struct ktune_config small = { .block_m = 64, .block_n = 128, .block_k = 64, .stages = 7,
					   .group_size = 1, .split_k = 1, .family = KTUNE_GEMM_WGMMA,
					   .consumers = 1, .cluster_m = 1 };
	struct ktune_key gemv = make_key(KTUNE_F16, "nt", 1, 4096, 4096);
	assert_int_equal(ktune__gemm_prune(&gemv, &small, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	small.cluster_m = 2;
	assert_int_equal(ktune__gemm_prune(&gemv, &small, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "CLUSTER_M"));
	small.cluster_m = 1;
	/* split-K: where 32 tiles leave SMs idle, not where 1024 fill them */
	small.split_k = 4;
	assert_int_equal(ktune__gemm_prune(&gemv, &small, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	struct ktune_config split_big = c;
	split_big.split_k = 2;
	split_big.cluster_m = 1; /* 512 tiles of 128 x 256: a last wave of 116 is no use split */
	assert_int_equal(ktune__gemm_prune(&key, &split_big, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "116 in the last wave"));
	/* scratch in whole tiles (the accumulators' layout), a counter per block and consumer */
	assert_int_equal(ktune__gemm_partials_bytes(&gemv, &small, SMS), (size_t)4 * 32 * 64 * 128 * 4);
	assert_int_equal(ktune__gemm_counters(&gemv, &small, SMS), 32);
	/*
	 * Where the tiles outnumber the SMs, only the last wave's are split:
	 * 4096x28672 in 128 x 256 tiles is 3584 = 27 x 132 + 20 tiles, and 20 x 4
	 * splits fit in a wave where 20 x 8 do not.
	 */
	struct ktune_key llm = make_key(KTUNE_BF16, "nt", 4096, 28672, 4096);
	split_big.split_k = 4;
	assert_int_equal(ktune__gemm_prune(&llm, &split_big, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	assert_int_equal(ktune__gemm_partials_bytes(&llm, &split_big, SMS), (size_t)4 * 20 * 128 * 256 * 4);
	assert_int_equal(ktune__gemm_counters(&llm, &split_big, SMS), 20 * 2);
	unsigned llm_grid[3];
	ktune__gemm_wgmma_grid(&llm, &split_big, SMS, llm_grid);
	assert_int_equal(llm_grid[0], SMS);
	ktune__gemm_fit_split(&llm, &split_big, SMS); /* a borrowed config keeps it */
	assert_int_equal(split_big.split_k, 4);
	split_big.split_k = 8;
	assert_int_equal(ktune__gemm_prune(&llm, &split_big, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "20 in the last wave"));
	/* whole waves: nothing to split (4096 x 8448 in 128 x 256 tiles: 32 x 33 = 8 x 132) */
	struct ktune_key even = make_key(KTUNE_BF16, "nt", 4096, 8448, 4096);
	split_big.split_k = 2;
	assert_int_equal(ktune__gemm_prune(&even, &split_big, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "0 in the last wave"));
	assert_int_equal(ktune__gemm_partials_bytes(&even, &split_big, SMS), 0);
	struct ktune_config two = wg_a; /* 128 x 256, 2 consumers, clusters of 2 */
	two.split_k = 2;
	struct ktune_key m1k = make_key(KTUNE_F16, "nt", 1000, 1000, 4096);
	/* 4 x 4 cluster tiles of 256 x 256 rows */
	assert_int_equal(ktune__gemm_counters(&m1k, &two, 66), 4 * 4 * 2 * 2);
	assert_int_equal(ktune__gemm_partials_bytes(&m1k, &two, 66), (size_t)2 * 16 * 2 * 128 * 256 * 4);
	/* split-K is compiled into kernels without clusters only */
	assert_int_equal(ktune__gemm_prune(&m1k, &two, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "CLUSTER_M"));
	/* the persistent grid covers the units: tiles x splits, clusters whole */
	unsigned grid[3];
	ktune__gemm_wgmma_grid(&m1k, &two, 66, grid);
	assert_int_equal(grid[0], 2 * 32);
	ktune__gemm_wgmma_grid(&m1k, &two, 20, grid);
	assert_int_equal(grid[0], 2 * 20);
	/* a nearest entry's split is fitted as for mma.sync */
	small.split_k = 8;
	ktune__gemm_fit_split(&gemv, &small, SMS);
	assert_int_equal(small.split_k, 8);
	small.split_k = 1;
	/* candidates: wgmma ones only for aligned keys on sm_90, after the mma.sync ones */
	struct ktune_config *cfgs;
	int n, nmma, pruned;
	struct ktune_err e;
	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, 0, 1, &cfgs, &nmma,
						&pruned, &e), KTUNE_OK);
	free(cfgs);
	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, 0, 1, &cfgs, &n,
						&pruned, &e), KTUNE_OK);
	assert_true(n > nmma + 20);
	for (int i = 0; i < n; i++)
		assert_int_equal(cfgs[i].family, i < nmma ? KTUNE_GEMM_MMA : KTUNE_GEMM_WGMMA);
	free(cfgs);
	key.aligned = 0;
	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, 0, 1, &cfgs, &n,
						&pruned, &e), KTUNE_OK);
	assert_int_equal(n, nmma);
	free(cfgs);
	key.aligned = 1;
	assert_int_equal(ktune__gemm_candidates(&key, "sm_80", SMS, SMEM_LIMIT, 0, 1, &cfgs, &n,
						&pruned, &e), KTUNE_OK);
	assert_int_equal(n, nmma);
	free(cfgs);
	/* a small budget still tries a quarter of wgmma configs */
	for (int budget = 4; budget <= 64; budget *= 2) {
		int nw = 0;
		assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, budget, 3, &cfgs,
							&n, &pruned, &e), KTUNE_OK);
		assert_int_equal(n, budget);
		for (int i = 0; i < n; i++)
			nw += cfgs[i].family == KTUNE_GEMM_WGMMA;
		if (nw < (budget + 3) / 4 || nw == budget)
			fail_msg("budget %d: %d wgmma configs", budget, nw);
		free(cfgs);
	}
}

/* The gemv family: its text, space, launch contract, pruning and place among the candidates. */
static void test_gemm_op__gemv_family(void **state)
{
	const struct ktune_config gv = { .block_m = 8, .block_n = 64, .warps_n = 2, .warps_k = 4,
					 .stages = 4, .split_k = 4, .family = KTUNE_GEMM_GEMV };
	struct ktune_config c;
	char text[256], why[256];
	struct ktune_err e;
	(void)state;

	ktune__gemm_config_format(&gv, text, sizeof(text));
	assert_string_equal(text, "FAMILY=gemv,BLOCK_M=8,BLOCK_N=64,WARPS_N=2,WARPS_K=4,STAGES=4,SPLIT_K=4");
	assert_int_equal(ktune__gemm_config_parse(text, &c, &e), KTUNE_OK);
	assert_config_equal(&c, &gv);
	assert_true(ktune__gemm_config_admitted(&c, &e));
	/* another family's field is refused */
	assert_int_equal(ktune__gemm_config_parse("FAMILY=gemv,BLOCK_M=8,BLOCK_N=64,WARPS_N=2,WARPS_K=4,"
						  "STAGES=4,SPLIT_K=4,BLOCK_K=32", &c, &e), KTUNE_ERR_PARSE);
	assert_non_null(strstr(e.msg, "BLOCK_K"));
	/* a warp owns whole 32-column groups */
	c = gv;
	c.warps_n = 4;
	assert_false(ktune__gemm_config_admitted(&c, &e));

	struct ktune_config *k;
	int n;
	assert_int_equal(ktune__gemm_space_kernels(KTUNE_GEMM_GEMV, &k, &n, &e), KTUNE_OK);
	assert_int_equal(n, 119);
	for (int i = 0; i < n; i++) {
		assert_int_equal(k[i].family, KTUNE_GEMM_GEMV);
		ktune__gemm_config_format(&k[i], text, sizeof(text));
		assert_int_equal(ktune__gemm_config_parse(text, &c, &e), KTUNE_OK);
		assert_config_equal(&c, &k[i]);
		/* what the space admits, the kernel's static_asserts accept */
		assert_true(c.block_m == 8 || c.block_m == 16);
		assert_int_equal(c.block_n % (c.warps_n * 32), 0);
		assert_true(ktune__gemm_smem_bytes(NULL, &c) <= 64 * 1024 + 16);
	}
	free(k);

	/* the contract: gemm.cu's grid and scratch, its own block and shared memory */
	struct ktune_key key = make_key(KTUNE_BF16, "nt", 3, 4096, 4096);
	unsigned grid[3];
	ktune__gemm_grid(&key, &gv, grid);
	assert_int_equal(grid[0], 64);
	assert_int_equal(grid[2], 4);
	assert_int_equal(ktune__gemm_threads(&gv), 256);
	assert_int_equal(ktune__gemm_smem_bytes(&key, &gv), 3 * 64 * 8 * 4 + 16);
	assert_int_equal(ktune__gemm_partials_bytes(&key, &gv, 0), 4 * 3 * 4096 * 4);
	assert_int_equal(ktune__gemm_counters(&key, &gv, 0), 64);
	char opts[16][48];
	assert_int_equal(ktune__gemm_defines(&key, &gv, opts, 16), 8);
	assert_string_equal(opts[3], "-DWARPS_K=4");
	assert_string_equal(opts[7], "-DTRANS_B=1");
	assert_string_equal(ktune__gemm_entry(KTUNE_GEMM_GEMV), "gemv_kernel");
	assert_string_equal(ktune__gemm_family_name(KTUNE_GEMM_GEMV), "gemm_gemv");
	assert_string_equal(ktune__gemm_compile_arch(KTUNE_GEMM_GEMV, "sm_90"), "sm_90");
	assert_true(ktune__gemm_family_runs(KTUNE_GEMM_GEMV, "sm_80", 1));
	assert_false(ktune__gemm_family_runs(KTUNE_GEMM_GEMV, "sm_90", 0));
	assert_true(ktune__gemm_same_kernel(&gv, &(struct ktune_config){ .block_m = 8, .block_n = 64,
		.warps_n = 2, .warps_k = 4, .stages = 4, .split_k = 1, .family = KTUNE_GEMM_GEMV }));
	c = gv;
	c.warps_k = 2;
	assert_false(ktune__gemm_same_kernel(&gv, &c));
	assert_int_equal(ktune__gemv_kstep(&key), 32);

	/* pruning */
	assert_int_equal(ktune__gemm_prune(&key, &gv, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	struct ktune_key tall = make_key(KTUNE_BF16, "nt", 9, 4096, 4096);
	assert_int_equal(ktune__gemm_prune(&tall, &gv, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "reads B again"));
	c = gv;
	c.block_m = 16;
	assert_int_equal(ktune__gemm_prune(&key, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "padding"));
	assert_int_equal(ktune__gemm_prune(&tall, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 0);
	struct ktune_key shallow = make_key(KTUNE_BF16, "nn", 1, 4096, 512); /* 32 steps of 16 */
	assert_int_equal(ktune__gemm_prune(&shallow, &gv, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "steps of K"));
	c = gv;
	c.split_k = 16;
	c.block_n = 32;
	c.warps_n = 1;
	struct ktune_key wide = make_key(KTUNE_BF16, "nt", 1, 28672, 65536);
	assert_int_equal(ktune__gemm_prune(&wide, &c, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "blocks"));
	key.aligned = 0;
	assert_int_equal(ktune__gemm_prune(&key, &gv, SMS, SMEM_LIMIT, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "aligned"));
	key.aligned = 1;

	/* candidates: mma.sync, then gemv (aligned keys of few rows), then wgmma */
	struct ktune_config *cfgs;
	int total, first_gemv = -1, first_wgmma = -1, pruned;
	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, 0, 1, &cfgs, &total,
						&pruned, &e), KTUNE_OK);
	for (int i = 0; i < total; i++) {
		if (cfgs[i].family == KTUNE_GEMM_GEMV && first_gemv < 0)
			first_gemv = i;
		if (cfgs[i].family == KTUNE_GEMM_WGMMA && first_wgmma < 0)
			first_wgmma = i;
		if (first_gemv >= 0)
			assert_int_not_equal(cfgs[i].family, KTUNE_GEMM_MMA);
		if (first_wgmma >= 0)
			assert_int_equal(cfgs[i].family, KTUNE_GEMM_WGMMA);
	}
	assert_true(first_gemv > 0 && first_wgmma > first_gemv + 20);
	free(cfgs);
	/* no device: mma.sync and gemv */
	assert_int_equal(ktune__gemm_candidates(&key, NULL, SMS, SMEM_LIMIT, 0, 1, &cfgs, &n, &pruned, &e),
			 KTUNE_OK);
	assert_int_equal(n, first_wgmma);
	free(cfgs);
	key.aligned = 0;
	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", SMS, SMEM_LIMIT, 0, 1, &cfgs, &n, &pruned, &e),
			 KTUNE_OK);
	for (int i = 0; i < n; i++)
		assert_int_equal(cfgs[i].family, KTUNE_GEMM_MMA);
	free(cfgs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_op__config_text_round_trip),
		cmocka_unit_test(test_gemm_op__config_parse_errors),
		cmocka_unit_test(test_gemm_op__config_admitted),
		cmocka_unit_test(test_gemm_op__smem_bytes_per_layout),
		cmocka_unit_test(test_gemm_op__launch_contract),
		cmocka_unit_test(test_gemm_op__prune),
		cmocka_unit_test(test_gemm_op__default_config_admitted),
		cmocka_unit_test(test_gemm_op__fit_split),
		cmocka_unit_test(test_gemm_op__aligned),
		cmocka_unit_test(test_gemm_op__counts_and_tolerance),
		cmocka_unit_test(test_gemm_op__candidates),
		cmocka_unit_test(test_gemm_op__wgmma_text_round_trip),
		cmocka_unit_test(test_gemm_op__wgmma_parse_is_strict),
		cmocka_unit_test(test_gemm_op__wgmma_same_kernel_and_contract),
		cmocka_unit_test(test_gemm_op__wgmma_prune),
		cmocka_unit_test(test_gemm_op__gemv_family),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
