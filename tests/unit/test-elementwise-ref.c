/*
 * test-elementwise-ref.c - the float64 references of the elementwise family
 * against hand-computed values, their derivatives against central finite
 * differences of the forward references, Philox4x32-10 against Random123's
 * known-answer vectors, and dropout's mask: its keep ratio, and that it is
 * a function of (seed, offset, i) alone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "ops/elementwise-ref.h"

static void assert_close(double got, double want, double tol, const char *what)
{
	if (!(fabs(got - want) <= tol))
		fail_msg("%s: %.17g, want %.17g (tolerance %g)", what, got, want, tol);
}

static void test_ref__add(void **state)
{
	double x[3] = { 1.5, -2, 0.25 }, y[3] = { 2.25, 2, -1 }, z[3];
	(void)state;
	ktune__ref_add(x, y, z, 3);
	assert_true(z[0] == 3.75 && z[1] == 0 && z[2] == -0.75);
	ktune__ref_add(x, y, x, 3); /* in place */
	assert_true(x[0] == 3.75 && x[1] == 0 && x[2] == -0.75);
	ktune__ref_add(x, y, z, 0);
}

static void test_ref__gelu_values(void **state)
{
	/* x Phi(x) and the tanh form at 1, -1 and 0; Phi(1) = 0.8413447460685429 */
	double x[4] = { 1, -1, 0, 3 }, out[4];
	(void)state;
	ktune__ref_gelu(x, NULL, out, 4, 0, 0);
	assert_close(out[0], 0.8413447460685429, 1e-15, "gelu(1)");
	assert_close(out[1], -0.15865525393145707, 1e-15, "gelu(-1)");
	assert_true(out[2] == 0);
	assert_close(out[3], 2.99595030590511, 1e-14, "gelu(3)");
	ktune__ref_gelu(x, NULL, out, 4, 1, 0);
	assert_close(out[0], 0.8411919906082768, 1e-15, "gelu_tanh(1)");
	assert_close(out[1], -0.15880800939172324, 1e-15, "gelu_tanh(-1)");
	assert_true(out[2] == 0);
}

static void test_ref__glu_values(void **state)
{
	/* silu(1) = 1 / (1 + e^-1) = 0.7310585786300049 */
	double a[2] = { 1, -1 }, b[2] = { 2, 3 }, out[2];
	(void)state;
	ktune__ref_glu(a, b, NULL, out, NULL, 2, 0, 0);
	assert_close(out[0], 2 * 0.7310585786300049, 1e-15, "swiglu(1, 2)");
	assert_close(out[1], 3 * -0.2689414213699951, 1e-15, "swiglu(-1, 3)");
	ktune__ref_glu(a, b, NULL, out, NULL, 2, 1, 0);
	assert_close(out[0], 2 * 0.8413447460685429, 1e-15, "geglu(1, 2)");
	ktune__ref_glu(a, b, NULL, out, NULL, 2, 2, 0);
	assert_close(out[0], 2 * 0.8411919906082768, 1e-15, "geglu_tanh(1, 2)");
}

/* Every backward against central differences of its forward, with dy scaling. */
static void test_ref__gradients_match_finite_differences(void **state)
{
	const double h = 1e-5;
	(void)state;
	for (double x = -4; x <= 4; x += 0.125) {
		double dy = 0.75 - x / 8;
		for (int approx = 0; approx < 2; approx++) {
			double xs[2] = { x + h, x - h }, f[2], g;
			ktune__ref_gelu(xs, NULL, f, 2, approx, 0);
			ktune__ref_gelu(&x, &dy, &g, 1, approx, 1);
			assert_close(g, dy * (f[0] - f[1]) / (2 * h), 1e-8,
				     approx ? "gelu_tanh'" : "gelu'");
		}
		for (int act = 0; act < 3; act++) {
			/* out = act(a) * b: d/da = b act'(a), d/db = act(a) */
			double as[2] = { x + h, x - h }, b = 1.5 - x / 4, bs[2] = { b, b }, f[2];
			double da, db, fa;
			ktune__ref_glu(as, bs, NULL, f, NULL, 2, act, 0);
			ktune__ref_glu(&x, &b, &dy, &da, &db, 1, act, 1);
			assert_close(da, dy * (f[0] - f[1]) / (2 * h), 1e-8, "glu da");
			double one = 1;
			ktune__ref_glu(&x, &one, NULL, &fa, NULL, 1, act, 0);
			assert_close(db, dy * fa, 1e-15, "glu db");
		}
	}
}

/*
 * Random123's kat_vectors for philox4x32 10 rounds (counter, key, result);
 * confirmed against an independent implementation of the published
 * algorithm before they went in here.
 */
static void test_ref__philox_known_answers(void **state)
{
	static const struct {
		uint32_t ctr[4], key[2], want[4];
	} kat[] = {
		{ { 0, 0, 0, 0 }, { 0, 0 }, { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
		{ { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff },
		  { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
		{ { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 },
		  { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
		uint32_t out[4];
		ktune__philox4x32_10(kat[i].ctr, kat[i].key, out);
		for (int w = 0; w < 4; w++)
			if (out[w] != kat[i].want[w])
				fail_msg("vector %zu word %d: %08x, want %08x", i, w, out[w],
					 kat[i].want[w]);
		uint32_t in_place[4] = { kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3] };
		ktune__philox4x32_10(in_place, kat[i].key, in_place);
		assert_memory_equal(in_place, out, sizeof(out));
	}
}

/* The mask's words are Philox's: element i is word i % 4 of counter offset + i / 4. */
static void test_ref__dropout_mask_is_philox(void **state)
{
	const uint64_t seed = 0x0123456789abcdefull, offset = 0xfffffffffffffffeull; /* wraps */
	(void)state;
	for (int64_t i = 0; i < 64; i++) {
		uint64_t c = offset + (uint64_t)i / 4;
		uint32_t ctr[4] = { (uint32_t)c, (uint32_t)(c >> 32), 0, 0 };
		uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) }, r[4];
		ktune__philox4x32_10(ctr, key, r);
		double u = r[i % 4] / 4294967296.0;
		/* p just below and at u: kept; just above: dropped */
		assert_true(ktune__ref_dropout_keep(seed, offset, i, u));
		assert_true(ktune__ref_dropout_keep(seed, offset, i, nextafter(u, -1)));
		assert_false(ktune__ref_dropout_keep(seed, offset, i, nextafter(u, 2)));
		assert_true(ktune__ref_dropout_keep(seed, offset, i, 0));
	}
	/* a shift of the offset by one draw is a shift of the mask by four elements */
	for (int64_t i = 0; i < 1000; i++)
		assert_int_equal(ktune__ref_dropout_keep(7, 100, i + 4, 0.5),
				 ktune__ref_dropout_keep(7, 101, i, 0.5));
}

static void test_ref__dropout_keep_ratio(void **state)
{
	enum { N = 1000000 };
	static const double ps[] = { 0.1, 0.5, 0.9 };
	double *x = malloc(N * sizeof(double)), *y = malloc(N * sizeof(double));
	(void)state;
	assert_non_null(x);
	assert_non_null(y);
	for (long i = 0; i < N; i++)
		x[i] = 1 + (double)(i % 7);
	for (size_t k = 0; k < sizeof(ps) / sizeof(ps[0]); k++) {
		double p = (float)ps[k]; /* the p a kernel gets */
		ktune__ref_dropout(x, y, N, p, 42 + k, 1000 * k);
		long kept = 0;
		for (long i = 0; i < N; i++) {
			if (y[i] == 0)
				continue;
			kept++;
			assert_close(y[i], x[i] / (1 - p), 1e-12, "a kept element");
		}
		double want = N * (1 - p), sigma = sqrt(N * p * (1 - p));
		if (fabs(kept - want) > 4 * sigma)
			fail_msg("p = %g: kept %ld of %d, want %.0f +- %.0f", p, kept, N, want, 4 * sigma);
	}
	/* p = 0 copies */
	ktune__ref_dropout(x, y, 1000, 0, 1, 2);
	for (long i = 0; i < 1000; i++)
		assert_true(y[i] == x[i]);
	free(x);
	free(y);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ref__add),
		cmocka_unit_test(test_ref__gelu_values),
		cmocka_unit_test(test_ref__glu_values),
		cmocka_unit_test(test_ref__gradients_match_finite_differences),
		cmocka_unit_test(test_ref__philox_known_answers),
		cmocka_unit_test(test_ref__dropout_mask_is_philox),
		cmocka_unit_test(test_ref__dropout_keep_ratio),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
