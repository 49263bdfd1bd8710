/*
 * test-spec.c - sweep specs: expansion of shapes into keys, the default
 * suite, every error with its line, and hostile input; and the key helpers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/op.h"
#include "search/spec.h"
#include "key.h"

static void parse_ok(const char *text, struct ktune_spec *s)
{
	struct ktune_err e;

	if (ktune__spec_parse(text, strlen(text), "spec.yaml", s, &e))
		fail_msg("%s", e.msg);
}

static void expect_error(const char *text, const char *want)
{
	struct ktune_spec s;
	struct ktune_err e;

	memset(&e, 0, sizeof(e));
	assert_int_equal(ktune__spec_parse(text, strlen(text), "spec.yaml", &s, &e),
			 KTUNE_ERR_PARSE);
	assert_string_equal(e.msg, want);
	assert_int_equal(s.nkeys, 0);
	assert_null(s.keys);
}

/* The key as one line, for comparing. */
static const char *fmt(const struct ktune_key *k)
{
	static char buf[8][64];
	static int i;

	i = (i + 1) % 8;
	ktune__key_format(k, buf[i], sizeof(buf[i]));
	return buf[i];
}

/* Asserts that s's keys are, in order, the m of each (n and k fixed). */
static void assert_ms(const struct ktune_spec *s, const long *ms, int n)
{
	int i;

	assert_int_equal(s->nkeys, n);
	for (i = 0; i < n; i++)
		assert_int_equal(s->keys[i].m, ms[i]);
}

static void test_spec__expands_in_order(void **state)
{
	struct ktune_spec s;

	(void)state;
	parse_ok("budget: 64\n"
		 "gemm:\n"
		 "  dtypes: [f16, bf16]\n"
		 "  layouts: [nn, nt]\n"
		 "  shapes:\n"
		 "    - {m: [1, 16], n: [4096, 8192], k: 7}\n", &s);
	assert_int_equal(s.budget, 64);
	assert_int_equal(s.nkeys, 16);
	assert_string_equal(fmt(&s.keys[0]), "gemm f16 nn 1x4096x7 aligned");
	assert_string_equal(fmt(&s.keys[1]), "gemm f16 nn 1x8192x7 aligned");
	assert_string_equal(fmt(&s.keys[2]), "gemm f16 nn 16x4096x7 aligned");
	assert_string_equal(fmt(&s.keys[4]), "gemm f16 nt 1x4096x7 aligned");
	assert_string_equal(fmt(&s.keys[8]), "gemm bf16 nn 1x4096x7 aligned");
	assert_string_equal(fmt(&s.keys[15]), "gemm bf16 nt 16x8192x7 aligned");
	assert_string_equal(s.keys[15].op, "gemm");
	assert_int_equal(s.keys[15].aligned, 1);
	ktune__spec_free(&s);

	/* a single name for dtypes and layouts; budget defaults to 0 */
	parse_ok("gemm: {dtypes: bf16, layouts: tt, shapes: [{m: 2, n: 3, k: 4}]}\n", &s);
	assert_int_equal(s.budget, 0);
	assert_int_equal(s.nkeys, 1);
	assert_string_equal(fmt(&s.keys[0]), "gemm bf16 tt 2x3x4 aligned");
	ktune__spec_free(&s);
}

static void test_spec__range_step_includes_end_when_reached(void **state)
{
	static const long a[] = { 100, 200, 300 }, b[] = { 100, 200, 300 }, c[] = { 5 };
	struct ktune_spec s;

	(void)state;
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 100, to: 300, step: 100}, n: 512, k: 512}\n", &s);
	assert_ms(&s, a, 3);
	ktune__spec_free(&s);
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 100, to: 399, step: 100}, n: 512, k: 512}\n", &s);
	assert_ms(&s, b, 3);
	ktune__spec_free(&s);
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 5, to: 5, step: 100}, n: 512, k: 512}\n", &s);
	assert_ms(&s, c, 1);
	ktune__spec_free(&s);
}

static void test_spec__range_mul_includes_end_when_reached(void **state)
{
	static const long a[] = { 128, 256, 512, 1024 }, b[] = { 3, 9, 27 };
	struct ktune_spec s;

	(void)state;
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 128, to: 1024, mul: 2}, n: 4096, k: 4096}\n", &s);
	assert_ms(&s, a, 4);
	ktune__spec_free(&s);
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 3, to: 80, mul: 3}, n: 4096, k: 4096}\n", &s);
	assert_ms(&s, b, 3);
	ktune__spec_free(&s);
	/* the largest mul does not overflow */
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 1048576, to: 1048576, mul: 1048576}, n: 1, k: 1}\n", &s);
	assert_int_equal(s.nkeys, 1);
	ktune__spec_free(&s);
}

static void test_spec__mnk_is_square(void **state)
{
	struct ktune_spec s;

	(void)state;
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nt]\n  shapes:\n"
		 "    - {mnk: [512, 1024]}\n"
		 "    - mnk: {from: 2048, to: 4096, mul: 2}\n", &s);
	assert_int_equal(s.nkeys, 4);
	assert_string_equal(fmt(&s.keys[0]), "gemm f16 nt 512x512x512 aligned");
	assert_string_equal(fmt(&s.keys[1]), "gemm f16 nt 1024x1024x1024 aligned");
	assert_string_equal(fmt(&s.keys[3]), "gemm f16 nt 4096x4096x4096 aligned");
	ktune__spec_free(&s);
}

static void test_spec__drops_duplicates_keeping_first(void **state)
{
	static const long ms[] = { 2, 1, 3 };
	struct ktune_spec s;

	(void)state;
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: [2, 1, 2], n: 1, k: 1}\n"
		 "    - {m: [1, 3], n: 1, k: 1}\n", &s);
	assert_ms(&s, ms, 3);
	ktune__spec_free(&s);
	parse_ok("gemm:\n  dtypes: [f16, bf16, f16]\n  layouts: [nt, nt]\n  shapes:\n"
		 "    - {mnk: 512}\n"
		 "    - {m: 512, n: 512, k: 512}\n"
		 "    - {m: {from: 256, to: 512, step: 256}, n: 512, k: 512}\n", &s);
	assert_int_equal(s.nkeys, 4);
	assert_string_equal(fmt(&s.keys[0]), "gemm f16 nt 512x512x512 aligned");
	assert_string_equal(fmt(&s.keys[1]), "gemm f16 nt 256x512x512 aligned");
	assert_string_equal(fmt(&s.keys[2]), "gemm bf16 nt 512x512x512 aligned");
	ktune__spec_free(&s);
}

/* An op's section may be a list of sections: the union of their keys in order, repeats dropped. */
static void test_spec__op_sections_list(void **state)
{
	struct ktune_spec s;

	(void)state;
	parse_ok("gemm_quant:\n"
		 "  - dtypes: [bf16]\n    bits: [4]\n    shapes:\n      - {m: [1, 2], n: 4096, k: 4096}\n"
		 "  - dtypes: [bf16]\n    bits: [8, 4]\n    shapes:\n      - {m: 2, n: 4096, k: 4096}\n", &s);
	assert_int_equal(s.nkeys, 3);
	assert_string_equal(fmt(&s.keys[0]), "gemm_quant bf16 4,128,scale_shift,v1 1x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[1]), "gemm_quant bf16 4,128,scale_shift,v1 2x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[2]), "gemm_quant bf16 8,128,scale_shift,v1 2x4096x4096 aligned");
	ktune__spec_free(&s);
	expect_error("gemm_quant: []\n", "spec.yaml:1: gemm_quant: an empty list of sections");
	expect_error("gemm_quant:\n"
		     "  - dtypes: [bf16]\n    shapes:\n      - {m: 1, n: 4096, k: 4096}\n"
		     "  - dtypes: [bf16]\n",
		     "spec.yaml:5: gemm_quant: missing 'shapes'");
}

static void test_spec__default_suite(void **state)
{
	struct ktune_spec s;
	struct ktune_err e;
	int i, j;

	(void)state;
	assert_int_equal(ktune__spec_default(&s, &e), 0);
	/*
	 * GEMM: 2 dtypes x 2 layouts x 25 shapes, less the repeat of 4096^3: it
	 * is both a square and M=4096 with (N, K) = (4096, 4096).  Then add (3
	 * dtypes x 3 sizes), gelu (2 x 2 variants x 3 sizes), glu (6 variants
	 * x 3 shapes), dropout (3 sizes), softmax (2 directions x 5 shapes),
	 * rmsnorm (3 passes x 4 shapes), layernorm (2 passes x 4 shapes) and
	 * cross_entropy (2 passes x 4 shapes), gemm_quant (a list of sections: 2
	 * bits x 13 shapes, 4 bits x 20 shapes less the first's 1 x 14336 x 4096,
	 * 4 formats x 4 shapes) and
	 * attention (3 passes x 2 head dims x 2 masks x 2 shapes).
	 */
	assert_int_equal(s.nkeys, 2 * 2 * 24 + 9 + 12 + 18 + 3 + 10 + 12 + 8 + 8 + 57 + 24);
	assert_int_equal(s.budget, 0);
	assert_string_equal(fmt(&s.keys[0]), "gemm f16 nn 512x512x512 aligned");
	assert_string_equal(fmt(&s.keys[4]), "gemm f16 nn 8192x8192x8192 aligned");
	assert_string_equal(fmt(&s.keys[5]), "gemm f16 nn 1x6144x4096 aligned");
	assert_string_equal(fmt(&s.keys[23]), "gemm f16 nn 4096x4096x14336 aligned");
	assert_string_equal(fmt(&s.keys[24]), "gemm f16 nt 512x512x512 aligned");
	assert_string_equal(fmt(&s.keys[48]), "gemm bf16 nn 512x512x512 aligned");
	assert_string_equal(fmt(&s.keys[95]), "gemm bf16 nt 4096x4096x14336 aligned");
	assert_string_equal(fmt(&s.keys[96]), "add f32 1048576 aligned");
	assert_string_equal(fmt(&s.keys[105]), "gelu bf16 erf,fwd 1048576 aligned");
	assert_string_equal(fmt(&s.keys[118]), "glu bf16 swiglu,fwd 4096x16384 aligned"); /* 14336 -> its bucket */
	assert_string_equal(fmt(&s.keys[137]), "dropout bf16 67108864 aligned");
	assert_string_equal(fmt(&s.keys[138]), "softmax bf16 fwd 4096x1024 aligned");
	assert_string_equal(fmt(&s.keys[159]), "rmsnorm bf16 bwd 1024x32768 aligned");
	assert_string_equal(fmt(&s.keys[160]), "layernorm bf16 fwd 4096x1024 aligned");
	assert_string_equal(fmt(&s.keys[167]), "layernorm bf16 bwd 1024x32768 aligned");
	assert_string_equal(fmt(&s.keys[168]), "cross_entropy bf16 fwd,mean,off,off 8192x32000 aligned");
	assert_string_equal(fmt(&s.keys[170]), "cross_entropy bf16 fwd,mean,off,off 8192x131072 aligned"); /* 128256 */
	assert_string_equal(fmt(&s.keys[175]), "cross_entropy bf16 fused,mean,off,off 4096x262144 aligned");
	assert_string_equal(fmt(&s.keys[176]), "gemm_quant bf16 4,128,scale_shift,v1 1x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[177]), "gemm_quant bf16 4,128,scale_shift,v1 2x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[178]), "gemm_quant bf16 4,128,scale_shift,v1 4x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[184]), "gemm_quant bf16 4,128,scale_shift,v1 1x14336x4096 aligned");
	assert_string_equal(fmt(&s.keys[188]), "gemm_quant bf16 4,128,scale_shift,v1 128x4096x14336 aligned");
	assert_string_equal(fmt(&s.keys[189]), "gemm_quant bf16 8,128,scale_shift,v1 1x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[201]), "gemm_quant bf16 8,128,scale_shift,v1 128x4096x14336 aligned");
	assert_string_equal(fmt(&s.keys[202]), "gemm_quant bf16 4,128,scale_shift,v1 1x6144x4096 aligned");
	assert_string_equal(fmt(&s.keys[203]), "gemm_quant bf16 4,128,scale_shift,v1 1x28672x4096 aligned");
	assert_string_equal(fmt(&s.keys[220]), "gemm_quant bf16 4,128,scale_shift,v1 16x4096x14336 aligned");
	assert_string_equal(fmt(&s.keys[221]), "gemm_quant bf16 8,chan,scale_shift,v1 1x4096x4096 aligned");
	assert_string_equal(fmt(&s.keys[232]), "gemm_quant bf16 1,128,scale_shift,v1 16x14336x4096 aligned");
	assert_string_equal(fmt(&s.keys[233]), "attention bf16 fwd,128,none,1 1024x1024x256 aligned");
	assert_string_equal(fmt(&s.keys[240]), "attention bf16 fwd,64,causal,1 4096x4096x64 aligned");
	assert_string_equal(fmt(&s.keys[248]), "attention bf16 bwd,64,causal,1 4096x4096x64 aligned");
	assert_string_equal(fmt(&s.keys[256]), "attention bf16 bwd_det,64,causal,1 4096x4096x64 aligned");
	for (i = 0; i < s.nkeys; i++) {
		for (j = 0; j < i; j++)
			assert_string_not_equal(fmt(&s.keys[i]), fmt(&s.keys[j]));
	}
	ktune__spec_free(&s);
}

/* bench/suite-default.yaml spells out the built-in suite: the same keys. */
static void test_spec__bench_suite_file_is_the_default(void **state)
{
	const char *path = KTUNE_SOURCE_DIR "/bench/suite-default.yaml";
	struct ktune_spec def, file;
	struct ktune_err e;
	char *text;
	size_t len;
	(void)state;

	assert_int_equal(ktune__read_file(path, 1 << 20, &text, &len, &e), 0);
	if (ktune__spec_parse(text, len, path, &file, &e))
		fail_msg("%s", e.msg);
	free(text);
	assert_int_equal(ktune__spec_default(&def, &e), 0);
	assert_int_equal(file.nkeys, def.nkeys);
	for (int i = 0; i < file.nkeys; i++) {
		int found = 0;
		for (int j = 0; j < def.nkeys && !found; j++)
			found = !strcmp(fmt(&file.keys[i]), fmt(&def.keys[j]));
		if (!found)
			fail_msg("%s is not in the built-in suite", fmt(&file.keys[i]));
	}
	ktune__spec_free(&def);
	ktune__spec_free(&file);
}

static void test_spec__key_count_limit(void **state)
{
	struct ktune_spec s;
	clock_t t0 = clock();

	(void)state;
	/* exactly the limit is fine */
	parse_ok("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		 "    - {m: {from: 1, to: 100000, step: 1}, n: 1, k: 1}\n", &s);
	assert_int_equal(s.nkeys, KTUNE_SPEC_MAX_KEYS);
	assert_int_equal(s.keys[99999].m, 100000);
	ktune__spec_free(&s);
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 50000, step: 1}, n: 1, k: 1}\n"
		     "    - {m: {from: 50001, to: 100001, step: 1}, n: 1, k: 1}\n",
		     "spec.yaml:6: gemm.shapes[1]: the spec expands to more than 100000 keys");
	expect_error("gemm:\n  dtypes: [f16, bf16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 50001, step: 1}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0]: the spec expands to more than 100000 keys");
	/* 10^18 keys are refused without being made */
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - m: {from: 1, to: 1000000, step: 1}\n"
		     "      n: {from: 1, to: 1000000, step: 1}\n"
		     "      k: {from: 1, to: 1000000, step: 1}\n",
		     "spec.yaml:5: gemm.shapes[0]: the spec expands to more than 100000 keys");
	assert_true((double)(clock() - t0) / CLOCKS_PER_SEC < 5.0);
}

static void test_spec__rejects_bad_dtype_and_layout(void **state)
{
	(void)state;
	expect_error("gemm:\n  dtypes: [f16,\n    f32]\n  layouts: [nn]\n  shapes: [{mnk: 1}]\n",
		     "spec.yaml:3: gemm.dtypes[1]: 'f32' is not one of f16, bf16");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts:\n    - nn\n    - nx\n  shapes: [{mnk: 1}]\n",
		     "spec.yaml:5: gemm.layouts[1]: 'nx' is not one of nn, nt, tn, tt");
	expect_error("gemm:\n  dtypes: F16\n  layouts: [nn]\n  shapes: [{mnk: 1}]\n",
		     "spec.yaml:2: gemm.dtypes: 'F16' is not one of f16, bf16");
	expect_error("gemm:\n  dtypes: []\n  layouts: [nn]\n  shapes: [{mnk: 1}]\n",
		     "spec.yaml:2: gemm.dtypes: empty list");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [[nn]]\n  shapes: [{mnk: 1}]\n",
		     "spec.yaml:3: gemm.layouts[0]: expected one of nn, nt, tn, tt");
}

static void test_spec__rejects_bad_dims(void **state)
{
	(void)state;
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 0, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m: '0' is not between 1 and 1048576");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 1, n: 1, k: 1}\n    - {m: 1, n: [4, -5], k: 1}\n",
		     "spec.yaml:6: gemm.shapes[1].n[1]: '-5' is not between 1 and 1048576");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {mnk: 1048577}\n",
		     "spec.yaml:5: gemm.shapes[0].mnk: '1048577' is not between 1 and 1048576");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 1, n: 1, k: 1e3}\n",
		     "spec.yaml:5: gemm.shapes[0].k: '1e3' is not an integer");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 1, n: 1, k: []}\n",
		     "spec.yaml:5: gemm.shapes[0].k: empty list");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 1, n: 1, k: [[1]]}\n",
		     "spec.yaml:5: gemm.shapes[0].k[0]: expected a number");
}

static void test_spec__rejects_bad_ranges(void **state)
{
	(void)state;
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 300, to: 100, step: 100}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m: 'from' (300) is greater than 'to' (100)");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 100, step: 0}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m.step: '0' must be 1 or more");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 100, step: -4}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m.step: '-4' must be 1 or more");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 100, mul: 1}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m.mul: '1' must be 2 or more");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 100, mul: 99999999999999999999}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m.mul: '99999999999999999999' is larger than 1048576");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 100, step: 1, mul: 2}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m: a range needs one of 'step' and 'mul'");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, step: 1}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m: a range needs 'from' and 'to'");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 1, to: 2, by: 1}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m: unknown key 'by'");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: {from: 0, to: 2, step: 1}, n: 1, k: 1}\n",
		     "spec.yaml:5: gemm.shapes[0].m.from: '0' is not between 1 and 1048576");
}

static void test_spec__rejects_bad_structure(void **state)
{
	(void)state;
	expect_error("budget: 8\ngemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shape: []\n",
		     "spec.yaml:5: gemm: unknown key 'shape'");
	expect_error("budget: 8\ngemm:\n  dtypes: [f16]\n  layouts: [nn]\n",
		     "spec.yaml:3: gemm: missing 'shapes'");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes: []\n",
		     "spec.yaml:4: gemm.shapes: empty list");
	char want[256];
	snprintf(want, sizeof(want), "spec.yaml:1: no op to tune: give one of %s", ktune__op_names());
	expect_error("budget: 8\n", want);
	snprintf(want, sizeof(want), "spec.yaml:2: unknown key 'conv' (ops: %s)", ktune__op_names());
	expect_error("budget: 8\nconv: {}\n", want);
	expect_error("budget: -1\ngemm: {}\n", "spec.yaml:1: budget: '-1' is negative");
	expect_error("budget: lots\ngemm: {}\n", "spec.yaml:1: budget: 'lots' is not an integer");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 1, n: 1}\n",
		     "spec.yaml:5: gemm.shapes[0]: missing 'k' (or give 'mnk')");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {mnk: 1, m: 1}\n",
		     "spec.yaml:5: gemm.shapes[0]: 'mnk' cannot be combined with 'm'");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n"
		     "    - {m: 1, n: 1, k: 1, x: 2}\n",
		     "spec.yaml:5: gemm.shapes[0]: unknown key 'x'");
	expect_error("gemm:\n  dtypes: [f16]\n  layouts: [nn]\n  shapes:\n    - 512\n",
		     "spec.yaml:5: gemm.shapes[0]: expected a mapping such as "
		     "{m: 16, n: 4096, k: 4096} or {mnk: 1024}");
	expect_error("gemm:\n  dtypes: [f16]\n  dtypes: [bf16]\n",
		     "spec.yaml:3: gemm: duplicate key 'dtypes'");
}

static void test_spec__rejects_garbage(void **state)
{
	static const char binary[] = "\x7f" "ELF\x02\x01\x01\x00\x00\x00\xff\xfe\x80";
	struct ktune_spec s;
	struct ktune_err e;
	char *deep;

	(void)state;
	expect_error("", "spec.yaml: empty document");
	char want[256];
	snprintf(want, sizeof(want), "spec.yaml:1: expected a mapping of ops (%s) and optionally 'budget'",
		 ktune__op_names());
	expect_error("42\n", want);
	expect_error("x: &a [1]\ny: *a\n", "spec.yaml:2: aliases are not supported");
	expect_error("gemm: {}\n...\n---\ngemm: {}\n", "spec.yaml:3: more than one document");
	expect_error("gemm: {dtypes: [f16\n", "spec.yaml:2: did not find expected ',' or ']'");
	expect_error("? [a]\n: 1\n", "spec.yaml:1: expected a key");
	assert_int_equal(ktune__spec_parse(binary, sizeof(binary) - 1, "spec.yaml", &s, &e),
			 KTUNE_ERR_PARSE);
	assert_int_equal(strncmp(e.msg, "spec.yaml:1: ", 13), 0);
	assert_null(s.keys);
	/* a NUL byte in the middle */
	assert_int_equal(ktune__spec_parse("gemm:\0{}\n", 9, "spec.yaml", &s, &e),
			 KTUNE_ERR_PARSE);

	deep = malloc(1 << 20);
	assert_non_null(deep);
	memset(deep, '[', 1 << 20);
	assert_int_equal(ktune__spec_parse(deep, 1 << 20, "spec.yaml", &s, &e), KTUNE_ERR_PARSE);
	assert_string_equal(e.msg, "spec.yaml:1: nested more than 16 levels deep");
	memset(deep, '-', 1 << 20);
	assert_int_equal(ktune__spec_parse(deep, 1 << 20, "spec.yaml", &s, &e), KTUNE_ERR_PARSE);
	free(deep);
}

/* One-byte mutations of a valid spec either parse or fail cleanly. */
static void test_spec__survives_mutations(void **state)
{
	static const char text[] =
		"budget: 64\n"
		"gemm:\n"
		"  dtypes: [f16, bf16]\n"
		"  layouts: [nn, nt]\n"
		"  shapes:\n"
		"    - {mnk: [512, 1024]}\n"
		"    - {m: [1, 16], n: 4096, k: [4096, 14336]}\n"
		"    - {m: {from: 128, to: 1024, mul: 2}, n: 4096, k: 4096}\n"
		"    - {m: {from: 100, to: 300, step: 100}, n: 512, k: 512}\n";
	static const char bytes[] = "[]{}:,-#&*!|>'\"%@` \n\t09aZ\x80\xff";
	char copy[sizeof(text)];
	unsigned seed = 4321;
	size_t len = sizeof(text) - 1, i;
	int ok = 0, bad = 0;

	(void)state;
	for (i = 0; i < 5000; i++) {
		struct ktune_spec s;
		struct ktune_err e;
		int rc;

		memcpy(copy, text, sizeof(text));
		seed = seed * 1103515245u + 12345u;
		copy[(seed >> 8) % len] = bytes[(seed >> 20) % (sizeof(bytes) - 1)];
		rc = ktune__spec_parse(copy, (seed >> 4) % 8 ? len : (seed >> 9) % len,
				       "spec.yaml", &s, &e);
		assert_true(rc == 0 || rc == KTUNE_ERR_PARSE);
		if (rc == 0) {
			ok++;
			assert_true(s.nkeys > 0 && s.nkeys <= KTUNE_SPEC_MAX_KEYS);
		} else {
			bad++;
			assert_int_equal(strncmp(e.msg, "spec.yaml", 9), 0);
		}
		ktune__spec_free(&s);
	}
	assert_true(ok > 0 && bad > 0);
}

static void test_spec__key_helpers(void **state)
{
	struct ktune_key k = { "gemm", KTUNE_BF16, "nn", 16, 4096, 4096, 0 };
	ktune_dtype d = KTUNE_F16;
	char layout[3], buf[64];

	(void)state;
	assert_string_equal(ktune__dtype_name(KTUNE_F16), "f16");
	assert_string_equal(ktune__dtype_name(KTUNE_BF16), "bf16");
	assert_null(ktune__dtype_name((ktune_dtype)7));
	assert_int_equal(ktune__dtype_parse("bf16", &d), 0);
	assert_int_equal(d, KTUNE_BF16);
	assert_int_equal(ktune__dtype_parse("f32", &d), 0);
	assert_int_equal(d, KTUNE_F32);
	assert_int_equal(ktune__dtype_parse("f64", &d), -1);
	assert_int_equal(ktune__dtype_parse("F16", &d), -1);
	assert_int_equal(ktune__dtype_size(KTUNE_F16), 2);
	assert_int_equal(ktune__dtype_size(KTUNE_BF16), 2);
	assert_int_equal(ktune__layout_parse("tn", &k), 0);
	assert_int_equal(k.variant[0], 't');
	assert_int_equal(k.variant[1], 'n');
	assert_int_equal(ktune__layout_parse("nx", &k), -1);
	assert_int_equal(ktune__layout_parse("n", &k), -1);
	assert_int_equal(ktune__layout_parse("ntt", &k), -1);
	assert_int_equal(k.variant[1], 'n'); /* unchanged by a failed parse */
	ktune__layout_name(&k, layout);
	assert_string_equal(layout, "tn");
	ktune__key_format(&k, buf, sizeof(buf));
	assert_string_equal(buf, "gemm bf16 tn 16x4096x4096 unaligned");
	k.aligned = 1;
	ktune__key_format(&k, buf, 10);
	assert_string_equal(buf, "gemm bf16");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec__expands_in_order),
		cmocka_unit_test(test_spec__range_step_includes_end_when_reached),
		cmocka_unit_test(test_spec__range_mul_includes_end_when_reached),
		cmocka_unit_test(test_spec__mnk_is_square),
		cmocka_unit_test(test_spec__drops_duplicates_keeping_first),
		cmocka_unit_test(test_spec__op_sections_list),
		cmocka_unit_test(test_spec__default_suite),
		cmocka_unit_test(test_spec__bench_suite_file_is_the_default),
		cmocka_unit_test(test_spec__key_count_limit),
		cmocka_unit_test(test_spec__rejects_bad_dtype_and_layout),
		cmocka_unit_test(test_spec__rejects_bad_dims),
		cmocka_unit_test(test_spec__rejects_bad_ranges),
		cmocka_unit_test(test_spec__rejects_bad_structure),
		cmocka_unit_test(test_spec__rejects_garbage),
		cmocka_unit_test(test_spec__survives_mutations),
		cmocka_unit_test(test_spec__key_helpers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
