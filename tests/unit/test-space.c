/*
 * test-space.c - search spaces: constraint expressions, the YAML reader
 * and its errors, enumeration, and the real gemm.yaml.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/space.h"
#include "search/expr.h"

#ifndef KTUNE_SOURCE_DIR
#error "KTUNE_SOURCE_DIR must name the source tree"
#endif

static const char *const names[] = { "a", "b", "c" };

/* Evaluates text with a, b, c = va, vb, vc; fails the test if it does not parse. */
static int eval(const char *text, long va, long vb, long vc, long *result)
{
	struct ktune_expr *x;
	struct ktune_err e;
	long values[3] = { va, vb, vc };
	int rc;

	rc = ktune__expr_parse(text, names, 3, &x, &e);
	if (rc)
		fail_msg("'%s': %s", text, e.msg);
	rc = ktune__expr_eval(x, values, result);
	ktune__expr_free(x);
	return rc;
}

static long value(const char *text, long va, long vb, long vc)
{
	long v = 0;

	assert_int_equal(eval(text, va, vb, vc, &v), 0);
	return v;
}

/* Parses text expecting failure; returns the message. */
static const char *parse_error(const char *text)
{
	static struct ktune_err e;
	struct ktune_expr *x = (struct ktune_expr *)1;

	assert_int_equal(ktune__expr_parse(text, names, 3, &x, &e), KTUNE_ERR_PARSE);
	assert_null(x);
	return e.msg;
}

static void test_space__expr_precedence(void **state)
{
	(void)state;
	assert_int_equal(value("1 + 2 * 3", 0, 0, 0), 7);
	assert_int_equal(value("(1 + 2) * 3", 0, 0, 0), 9);
	assert_int_equal(value("10 - 2 - 3", 0, 0, 0), 5);
	assert_int_equal(value("a / b * b", 10, 3, 0), 9);
	assert_int_equal(value("a % b * 2", 7, 3, 0), 2);
	assert_int_equal(value("-2 * 3 + 10 % 4", 0, 0, 0), -4);
	assert_int_equal(value("- -3", 0, 0, 0), 3);
	assert_int_equal(value("-7 / 2", 0, 0, 0), -3); /* C truncation */
	assert_int_equal(value("-7 % 2", 0, 0, 0), -1);
	assert_int_equal(value("!0 + 1", 0, 0, 0), 2);
	assert_int_equal(value("!a == 0", 5, 0, 0), 1); /* (!a) == 0 */
	assert_int_equal(value("1 < 2 == 1", 0, 0, 0), 1);
	assert_int_equal(value("2 + 3 < 6 && 6 > 5", 0, 0, 0), 1);
	assert_int_equal(value("1 || 0 && 0", 0, 0, 0), 1); /* && binds tighter */
	assert_int_equal(value("(1 || 0) && 0", 0, 0, 0), 0);
	assert_int_equal(value("a <= b != b >= c", 1, 2, 3), 1);
	assert_int_equal(value("3 && 4", 0, 0, 0), 1);
	assert_int_equal(value("0 || 7", 0, 0, 0), 1);
	assert_int_equal(value("a*b+c", 4, 5, 6), 26);
	assert_int_equal(value("a-b*c", 4, 5, 6), -26);
}

static void test_space__expr_division_by_zero_is_false(void **state)
{
	struct ktune_expr *x;
	struct ktune_err e;
	long v, zero[3] = { 8, 0, 0 };

	(void)state;
	assert_int_equal(eval("a / b", 8, 0, 0, &v), -1);
	assert_int_equal(eval("a % b", 8, 0, 0, &v), -1);
	/* the whole constraint fails, even under ! */
	assert_int_equal(ktune__expr_parse("!(a / b == 1)", names, 3, &x, &e), 0);
	assert_int_equal(ktune__expr_true(x, zero), 0);
	ktune__expr_free(x);
	/* parts that && and || skip are not evaluated, as in C */
	assert_int_equal(value("b == 0 || a / b > 1", 8, 0, 0), 1);
	assert_int_equal(value("b != 0 && a / b > 1", 8, 0, 0), 0);
	assert_int_equal(value("b != 0 && a / b > 1", 8, 2, 0), 1);
}

static void test_space__expr_overflow_is_false(void **state)
{
	long v;

	(void)state;
	assert_int_equal(eval("a + 1", 9223372036854775807L, 0, 0, &v), -1);
	assert_int_equal(eval("a * a", 4294967296L, 0, 0, &v), -1);
	assert_int_equal(eval("-a - 2", 9223372036854775807L, 0, 0, &v), -1);
	assert_string_equal(parse_error("99999999999999999999 > 0"),
			    "column 1: '99999999999999999999' is too large");
}

static void test_space__expr_reports_column_and_expectation(void **state)
{
	(void)state;
	assert_string_equal(parse_error("a + * b"),
			    "column 5: expected a number, a name or '(', found '*'");
	assert_string_equal(parse_error("(a + b"),
			    "column 7: expected ')', found end of expression");
	assert_string_equal(parse_error("a b"),
			    "column 3: expected an operator or the end of the expression, found 'b'");
	assert_string_equal(parse_error(""),
			    "column 1: expected a number, a name or '(', found end of expression");
	assert_string_equal(parse_error("a & b"), "column 3: unexpected character '&'");
	assert_string_equal(parse_error("a = b"), "column 3: unexpected character '='");
	assert_string_equal(parse_error("a \x01"), "column 3: unexpected byte 0x01");
	assert_string_equal(parse_error("a + 3x"), "column 5: malformed number");
	assert_string_equal(parse_error("BLOK_M > 1"), "unknown name 'BLOK_M'");
}

static void test_space__expr_nesting_is_bounded(void **state)
{
	char *text = malloc(200001);
	size_t i;

	(void)state;
	assert_non_null(text);
	/* deep parentheses are refused, not a stack overflow */
	memset(text, '(', 100000);
	strcpy(text + 100000, "1");
	assert_non_null(strstr(parse_error(text), "too deeply nested"));
	memset(text, '-', 100000);
	assert_non_null(strstr(parse_error(text), "too deeply nested"));
	/* a long flat chain is fine */
	for (i = 0; i < 100000; i++) {
		text[2 * i] = '1';
		text[2 * i + 1] = '+';
	}
	text[199999] = '\0';
	assert_int_equal(value(text, 0, 0, 0), 100000);
	free(text);
}

static const char small[] =
	"family: small\n"
	"params:\n"
	"  a: [1, 2]\n"
	"  b: [10, 20, 30]\n"
	"constraints:\n"
	"  - a + b != 21  # not (1, 20)\n";

static int collect(const long *values, void *arg)
{
	long *out = arg;
	long n = out[0]++;

	out[1 + 2 * n] = values[0];
	out[2 + 2 * n] = values[1];
	return 0;
}

static int stop_at_third(const long *values, void *arg)
{
	int *n = arg;

	(void)values;
	return ++*n == 3 ? 42 : 0;
}

static void test_space__enumerate_order_and_early_stop(void **state)
{
	static const long want[] = { 1, 10, 1, 30, 2, 10, 2, 20, 2, 30 };
	struct ktune_space s;
	struct ktune_err e;
	long got[1 + 2 * 6] = { 0 };
	int n = 0;

	(void)state;
	assert_int_equal(ktune__space_parse(&s, small, strlen(small), "small.yaml", &e), 0);
	assert_string_equal(s.family, "small");
	assert_int_equal(s.nparams, 2);
	assert_int_equal(ktune__space_param_index(&s, "b"), 1);
	assert_int_equal(ktune__space_param_index(&s, "c"), -1);
	assert_int_equal(ktune__space_enumerate(&s, collect, got), 0);
	assert_int_equal(got[0], 5);
	assert_memory_equal(got + 1, want, sizeof(want));
	assert_int_equal(ktune__space_count(&s), 5);
	assert_int_equal(ktune__space_enumerate(&s, stop_at_third, &n), 42);
	assert_int_equal(n, 3);
	ktune__space_free(&s);
	ktune__space_free(&s); /* freed twice: harmless */
}

static char *read_gemm_yaml(size_t *len)
{
	FILE *f = fopen(KTUNE_SOURCE_DIR "/kernels/templates/gemm.yaml", "rb");
	char *text;

	assert_non_null(f);
	text = calloc(1, 1 << 20);
	assert_non_null(text);
	*len = fread(text, 1, (1 << 20) - 1, f);
	fclose(f);
	return text;
}

/* gemm.yaml's constraints written out in C, to check the parsed ones against. */
static int gemm_ok(long bm, long bn, long bk, long wm, long wn, long st)
{
	long w = wm * wn, tile = (bm / wm) * (bn / wn);

	return bm % (wm * 16) == 0 && bn % (wn * 16) == 0 && (bn / wn >= 32 || bm <= 16) &&
	       w <= 8 && (w >= 2 || bm <= 16) && tile <= 4096 && (bm <= 32 || tile >= 2048) &&
	       (bk <= 64 || bm <= 16) && (bk == 32 || st <= 3 || bm <= 32) && (st <= 4 || bm <= 32);
}

struct variants {
	long count, distinct, last[6];
};

/* Counts distinct values of the first six parameters (the compiled-in ones). */
static int count_variants(const long *values, void *arg)
{
	struct variants *v = arg;

	if (v->count++ == 0 || memcmp(v->last, values, sizeof(v->last))) {
		v->distinct++;
		memcpy(v->last, values, sizeof(v->last));
	}
	if (!gemm_ok(values[0], values[1], values[2], values[3], values[4], values[5]))
		return -1;
	return 0;
}

static void test_space__gemm_yaml_count(void **state)
{
	static const long bms[] = { 16, 32, 64, 128, 256 }, bns[] = { 16, 32, 64, 128, 256 };
	static const long bks[] = { 32, 64, 128 }, ws[] = { 1, 2, 4 }, sts[] = { 2, 3, 4, 6 };
	struct ktune_space s;
	struct ktune_err e;
	struct variants v = { 0 };
	size_t len;
	char *text = read_gemm_yaml(&len);
	long ref = 0;
	int i0, i1, i2, i3, i4, i5;

	(void)state;
	assert_int_equal(ktune__space_parse(&s, text, len, "gemm.yaml", &e), 0);
	free(text);
	assert_string_equal(s.family, "gemm");
	assert_int_equal(s.nparams, 8);
	assert_int_equal(s.nconstraints, 9);
	assert_string_equal(s.params[7].name, "SPLIT_K");
	assert_string_equal(s.constraint_text[7], "BLOCK_K == 32 || STAGES <= 3 || BLOCK_M <= 32");

	for (i0 = 0; i0 < 5; i0++)
		for (i1 = 0; i1 < 5; i1++)
			for (i2 = 0; i2 < 3; i2++)
				for (i3 = 0; i3 < 3; i3++)
					for (i4 = 0; i4 < 3; i4++)
						for (i5 = 0; i5 < 4; i5++)
							ref += gemm_ok(bms[i0], bns[i1], bks[i2],
								       ws[i3], ws[i4], sts[i5]);
	assert_int_equal(ref, 411);
	/* GROUP_SIZE (2 values) and SPLIT_K (5) are unconstrained kernel arguments */
	assert_int_equal(ktune__space_count(&s), 411 * 2 * 5);
	assert_int_equal(ktune__space_enumerate(&s, count_variants, &v), 0);
	assert_int_equal(v.count, 4110);
	assert_int_equal(v.distinct, 411);
	ktune__space_free(&s);
}

static void test_space__admits_checks_values_and_constraints(void **state)
{
	struct ktune_space s;
	struct ktune_err e;
	size_t len;
	char *text = read_gemm_yaml(&len);
	/* BLOCK_M BLOCK_N BLOCK_K WARPS_M WARPS_N STAGES GROUP_SIZE SPLIT_K */
	long good[8] = { 128, 128, 32, 2, 2, 3, 8, 1 };
	long v[8];

	(void)state;
	assert_int_equal(ktune__space_parse(&s, text, len, "gemm.yaml", &e), 0);
	free(text);
	assert_int_equal(ktune__space_admits(&s, good, &e), 1);

	memcpy(v, good, sizeof(v));
	v[0] = 48;
	assert_int_equal(ktune__space_admits(&s, v, &e), 0);
	assert_string_equal(e.msg, "BLOCK_M=48 is not one of 16, 32, 64, 128, 256");

	memcpy(v, good, sizeof(v));
	v[0] = 16; /* 16 % (2 * 16) != 0 */
	assert_int_equal(ktune__space_admits(&s, v, &e), 0);
	assert_string_equal(e.msg, "violates 'BLOCK_M % (WARPS_M * 16) == 0 && BLOCK_N % (WARPS_N * 16) == 0'");

	memcpy(v, good, sizeof(v));
	v[2] = 64;
	v[5] = 4;
	assert_int_equal(ktune__space_admits(&s, v, &e), 0);
	assert_string_equal(e.msg, "violates 'BLOCK_K == 32 || STAGES <= 3 || BLOCK_M <= 32'");
	assert_int_equal(ktune__space_admits(&s, v, NULL), 0);
	ktune__space_free(&s);
}

/* Parses text expecting KTUNE_ERR_PARSE and the message want. */
static void expect_error(const char *text, const char *want)
{
	struct ktune_space s;
	struct ktune_err e;

	memset(&e, 0, sizeof(e));
	assert_int_equal(ktune__space_parse(&s, text, strlen(text), "t.yaml", &e),
			 KTUNE_ERR_PARSE);
	assert_string_equal(e.msg, want);
	assert_int_equal(s.nparams, 0);
	assert_int_equal(s.nconstraints, 0);
}

static void test_space__rejects_unknown_top_level_key(void **state)
{
	(void)state;
	expect_error("family: g\nparams:\n  A: [1]\nconstrains:\n  - A > 0\n",
		     "t.yaml:4: unknown key 'constrains'");
	expect_error("family: g\nfamily: h\nparams:\n  A: [1]\n",
		     "t.yaml:2: duplicate key 'family'");
}

static void test_space__rejects_missing_family_or_params(void **state)
{
	(void)state;
	expect_error("params:\n  A: [1]\n", "t.yaml:1: missing 'family'");
	expect_error("# a comment\nfamily: g\n", "t.yaml:2: missing 'params'");
	expect_error("family: g\nparams: {}\n", "t.yaml:2: params: no parameters");
	expect_error("family: 'no good'\nparams:\n  A: [1]\n",
		     "t.yaml:1: family: 'no good' is not a valid name");
}

static void test_space__rejects_duplicate_param(void **state)
{
	(void)state;
	expect_error("family: g\nparams:\n  A: [1]\n  B: [2]\n  A: [3]\n",
		     "t.yaml:5: params: duplicate parameter 'A'");
}

static void test_space__rejects_bad_values(void **state)
{
	(void)state;
	expect_error("family: g\nparams:\n  A: [1, 2]\n  B: []\n",
		     "t.yaml:4: params.B: empty list");
	expect_error("family: g\nparams:\n  A: [1, 2, 1]\n",
		     "t.yaml:3: params.A[2]: duplicate value 1");
	expect_error("family: g\nparams:\n  A:\n    - 1\n    - x\n",
		     "t.yaml:5: params.A[1]: 'x' is not an integer");
	expect_error("family: g\nparams:\n  A: [1, 2.5]\n",
		     "t.yaml:3: params.A[1]: '2.5' is not an integer");
	expect_error("family: g\nparams:\n  A: [99999999999999999999]\n",
		     "t.yaml:3: params.A[0]: '99999999999999999999' is out of range");
	expect_error("family: g\nparams:\n  A: 4\n",
		     "t.yaml:3: params.A: expected a list of integers");
	expect_error("family: g\nparams:\n  A: [1, [2]]\n",
		     "t.yaml:3: params.A[1]: expected an integer");
	expect_error("family: [g]\nparams:\n  A: [1]\n", "t.yaml:1: family: expected a name");
	expect_error("family: g\nparams:\n  1A: [1]\n",
		     "t.yaml:3: params: '1A' is not a valid name");
}

static void test_space__rejects_more_than_the_limits(void **state)
{
	char text[4096];
	size_t n;
	int i;

	(void)state;
	n = (size_t)sprintf(text, "family: g\nparams:\n");
	for (i = 0; i < KTUNE_SPACE_MAX_PARAMS + 1; i++)
		n += (size_t)sprintf(text + n, "  P%d: [1]\n", i);
	expect_error(text, "t.yaml:19: params: more than 16 parameters");

	n = (size_t)sprintf(text, "family: g\nparams:\n  A: [");
	for (i = 0; i < KTUNE_SPACE_MAX_VALUES + 1; i++)
		n += (size_t)sprintf(text + n, "%s%d", i ? ", " : "", i);
	sprintf(text + n, "]\n");
	expect_error(text, "t.yaml:3: params.A: more than 32 values");

	n = (size_t)sprintf(text, "family: g\nparams:\n  A: [1]\nconstraints:\n");
	for (i = 0; i < KTUNE_SPACE_MAX_CONSTRAINTS + 1; i++)
		n += (size_t)sprintf(text + n, "  - A > %d\n", -i);
	expect_error(text, "t.yaml:37: constraints: more than 32 constraints");
}

static void test_space__rejects_unknown_param_in_constraint(void **state)
{
	(void)state;
	expect_error("family: g\nparams:\n  BLOCK_M: [16]\nconstraints:\n"
		     "  - BLOCK_M > 0\n"
		     "  - BLOK_M % 16 == 0\n",
		     "t.yaml:6: constraints[1]: unknown name 'BLOK_M'");
}

static void test_space__rejects_malformed_constraint(void **state)
{
	(void)state;
	expect_error("family: g\nparams:\n  A: [16]\nconstraints:\n  - (A > 0\n",
		     "t.yaml:5: constraints[0]: column 7: expected ')', found end of expression");
	expect_error("family: g\nparams:\n  A: [16]\nconstraints:\n  - [A]\n",
		     "t.yaml:5: constraints[0]: expected an expression");
	expect_error("family: g\nparams:\n  A: [16]\nconstraints: A > 0\n",
		     "t.yaml:4: constraints: expected a list of expressions");
}

static void test_space__rejects_garbage(void **state)
{
	static const char binary[] = "\xff\xfe\x00\x01garbage\x80\x81";
	struct ktune_space s;
	struct ktune_err e;
	char *deep;

	(void)state;
	expect_error("", "t.yaml: empty document");
	expect_error("# only a comment\n", "t.yaml: empty document");
	expect_error("just a scalar\n",
		     "t.yaml:1: expected a mapping with family, params and constraints");
	expect_error("- 1\n- 2\n", "t.yaml:1: expected a mapping with family, params and constraints");
	expect_error("family: g\nparams:\n  A: &v [1]\n  B: *v\n",
		     "t.yaml:4: aliases are not supported");
	expect_error("family: g\nparams: {A: [1]}\n---\nfamily: h\n",
		     "t.yaml:3: more than one document");
	expect_error("family: g\nparams: {A: [1, 2}\n",
		     "t.yaml:2: did not find expected ',' or ']'");
	assert_int_equal(ktune__space_parse(&s, binary, sizeof(binary) - 1, "t.yaml", &e),
			 KTUNE_ERR_PARSE);
	assert_int_equal(strncmp(e.msg, "t.yaml:1: ", 10), 0);

	deep = malloc(200001);
	assert_non_null(deep);
	memset(deep, '[', 100000);
	memset(deep + 100000, ']', 100000);
	deep[200000] = '\0';
	expect_error(deep, "t.yaml:1: nested more than 16 levels deep");
	free(deep);
}

/* Every prefix and many one-byte mutations of a valid file either parse or fail cleanly. */
static void test_space__survives_mutations(void **state)
{
	static const char bytes[] = "[]{}:,-#&*!|>'\"%@` \n\t0aZ\x80\xff";
	size_t len, i;
	char *text = read_gemm_yaml(&len);
	char *copy = malloc(len + 1);
	unsigned seed = 12345;
	int ok = 0, bad = 0;

	(void)state;
	assert_non_null(copy);
	for (i = 0; i <= len; i += 7) {
		struct ktune_space s;
		struct ktune_err e;
		int rc = ktune__space_parse(&s, text, i, "gemm.yaml", &e);

		assert_true(rc == 0 || rc == KTUNE_ERR_PARSE);
		ktune__space_free(&s);
	}
	for (i = 0; i < 3000; i++) {
		struct ktune_space s;
		struct ktune_err e;
		int rc;

		memcpy(copy, text, len + 1);
		seed = seed * 1103515245u + 12345u;
		copy[(seed >> 8) % len] = bytes[(seed >> 20) % (sizeof(bytes) - 1)];
		rc = ktune__space_parse(&s, copy, len, "gemm.yaml", &e);
		assert_true(rc == 0 || rc == KTUNE_ERR_PARSE);
		if (rc == 0) {
			ok++;
			ktune__space_count(&s);
		} else {
			bad++;
			assert_non_null(strstr(e.msg, "gemm.yaml:"));
		}
		ktune__space_free(&s);
	}
	assert_true(ok > 0 && bad > 0);
	free(copy);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_space__expr_precedence),
		cmocka_unit_test(test_space__expr_division_by_zero_is_false),
		cmocka_unit_test(test_space__expr_overflow_is_false),
		cmocka_unit_test(test_space__expr_reports_column_and_expectation),
		cmocka_unit_test(test_space__expr_nesting_is_bounded),
		cmocka_unit_test(test_space__enumerate_order_and_early_stop),
		cmocka_unit_test(test_space__gemm_yaml_count),
		cmocka_unit_test(test_space__admits_checks_values_and_constraints),
		cmocka_unit_test(test_space__rejects_unknown_top_level_key),
		cmocka_unit_test(test_space__rejects_missing_family_or_params),
		cmocka_unit_test(test_space__rejects_duplicate_param),
		cmocka_unit_test(test_space__rejects_bad_values),
		cmocka_unit_test(test_space__rejects_more_than_the_limits),
		cmocka_unit_test(test_space__rejects_unknown_param_in_constraint),
		cmocka_unit_test(test_space__rejects_malformed_constraint),
		cmocka_unit_test(test_space__rejects_garbage),
		cmocka_unit_test(test_space__survives_mutations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
