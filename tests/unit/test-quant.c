/*
 * test-quant.c - the weight-quantized format and op on the host (no GPU):
 * sizes and the errors of bad formats; packing into words against
 * hand-packed words and back, exactly, for every bits and group; the
 * round-to-nearest quantisation of ktune_quant_pack (each weight within
 * half a step of its code's value, and weights already on a grid come
 * back exactly) for every mode; the float64 reference against a direct
 * sum from the unpacked codes for every bits x mode x group on awkward
 * shapes (m in {1, 3, 16, 33}, n in {1, 8, 37}, k of one and three groups;
 * m = 128 on n = 4104 once a bits); the tolerance against the kernels' own numerics simulated in
 * fp32 (weights rounded to the dtype for the tiled kernel); and the op's
 * key check, bucketing, prune, launch steps and workspace.
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

#include "ops/op.h"
#include "ops/quant-ref.h"

static const int all_bits[] = { 8, 4, 2, 1 };
static const int all_groups[] = { 32, 64, 128, 0 };
static const ktune_quant_mode all_modes[] = { KTUNE_QUANT_SCALE_SHIFT, KTUNE_QUANT_SCALE, KTUNE_QUANT_SHIFT,
					      KTUNE_QUANT_FMA };

/* xorshift64*, uniform in [0, 1) */
static double uniform(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

/* v rounded to dtype */
static double rnd(double v, ktune_dtype d)
{
	return ktune__quant_from_elem(ktune__quant_to_elem(v, d), d);
}

/* ------------------------------------------------------------ elements */

static void test_quant__element_rounding(void **state)
{
	(void)state;
	/* f16: 1 + 2^-10 is the next after 1; a tie rounds to even */
	assert_int_equal(ktune__quant_to_elem(1.0, KTUNE_F16), 0x3c00);
	assert_int_equal(ktune__quant_to_elem(1.0 + ldexp(1, -10), KTUNE_F16), 0x3c01);
	assert_int_equal(ktune__quant_to_elem(1.0 + ldexp(1, -11), KTUNE_F16), 0x3c00);
	assert_int_equal(ktune__quant_to_elem(1.0 + 3 * ldexp(1, -11), KTUNE_F16), 0x3c02);
	assert_int_equal(ktune__quant_to_elem(-2.5, KTUNE_F16), 0xc100);
	assert_int_equal(ktune__quant_to_elem(65504, KTUNE_F16), 0x7bff);
	assert_int_equal(ktune__quant_to_elem(1e6, KTUNE_F16), 0x7c00);
	assert_int_equal(ktune__quant_to_elem(ldexp(1, -24), KTUNE_F16), 0x0001); /* the least subnormal */
	assert_int_equal(ktune__quant_to_elem(ldexp(3, -25), KTUNE_F16), 0x0002); /* 1.5 ulp: to even */
	/* bf16: 8 significant bits, one rounding from double (not through float) */
	assert_int_equal(ktune__quant_to_elem(1.0, KTUNE_BF16), 0x3f80);
	assert_int_equal(ktune__quant_to_elem(1.0 + ldexp(1, -8), KTUNE_BF16), 0x3f80); /* tie: even */
	assert_int_equal(ktune__quant_to_elem(1.0 + ldexp(1, -8) + ldexp(1, -40), KTUNE_BF16), 0x3f81);
	assert_int_equal(ktune__quant_to_elem(-3.0, KTUNE_BF16), 0xc040);
	for (int i = 0; i < 65536; i++) { /* every finite value converts back to itself */
		double v = ktune__quant_from_elem((uint16_t)i, KTUNE_F16);
		if (isfinite(v) && ktune__quant_to_elem(v, KTUNE_F16) != i && !(v == 0 && (i & 0x7fff) == 0))
			fail_msg("f16 %#x -> %g -> %#x", i, v, ktune__quant_to_elem(v, KTUNE_F16));
		v = ktune__quant_from_elem((uint16_t)i, KTUNE_BF16);
		if (isfinite(v) && ktune__quant_to_elem(v, KTUNE_BF16) != i && !(v == 0 && (i & 0x7fff) == 0))
			fail_msg("bf16 %#x -> %g -> %#x", i, v, ktune__quant_to_elem(v, KTUNE_BF16));
	}
}

/* ------------------------------------------------------------ sizes and errors */

static void test_quant__sizes(void **state)
{
	(void)state;
	int64_t words, scales, zeros;
	char err[256];
	ktune_quant_format f = { 4, 128, KTUNE_QUANT_SCALE_SHIFT, 0 };
	assert_int_equal(ktune_quant_sizes(&f, 4096, 4096, &words, &scales, &zeros, err, sizeof(err)), KTUNE_OK);
	assert_int_equal(words, 4096 * 512);
	assert_int_equal(scales, 4096 * 32);
	assert_int_equal(zeros, 4096 * 32);
	assert_string_equal(err, "");
	/* 1 bit, k = 32: one word of weights, padded to 4 (16 bytes) a row */
	f = (ktune_quant_format){ 1, 32, KTUNE_QUANT_SCALE, 0 };
	assert_int_equal(ktune_quant_sizes(&f, 3, 32, &words, &scales, &zeros, NULL, 0), KTUNE_OK);
	assert_int_equal(words, 3 * 4);
	assert_int_equal(scales, 3);
	assert_int_equal(zeros, 0); /* no zero in this mode */
	/* per channel, one zero for all, no scale */
	f = (ktune_quant_format){ 8, 0, KTUNE_QUANT_SHIFT, 1 };
	assert_int_equal(ktune_quant_sizes(&f, 5, 96, &words, &scales, &zeros, NULL, 0), KTUNE_OK);
	assert_int_equal(words, 5 * 24);
	assert_int_equal(scales, 0);
	assert_int_equal(zeros, 1);
	f = (ktune_quant_format){ 2, 0, KTUNE_QUANT_FMA, 0 };
	assert_int_equal(ktune_quant_sizes(&f, 5, 96, &words, &scales, &zeros, NULL, 0), KTUNE_OK);
	assert_int_equal(words, 5 * 8); /* 6 words of weights, 8 with the padding */
	assert_int_equal(scales, 5);
	assert_int_equal(zeros, 5);
}

static void expect_error(const ktune_quant_format *f, int64_t n, int64_t k, const char *words)
{
	char err[256];
	assert_int_equal(ktune_quant_sizes(f, n, k, NULL, NULL, NULL, err, sizeof(err)), KTUNE_ERR_INVALID);
	if (!strstr(err, words))
		fail_msg("'%s' does not say '%s'", err, words);
}

static void test_quant__bad_formats(void **state)
{
	(void)state;
	ktune_quant_format f = { 3, 128, KTUNE_QUANT_SCALE_SHIFT, 0 };
	expect_error(&f, 8, 256, "bits 3 is not one of 8, 4, 2, 1");
	f = (ktune_quant_format){ 4, 48, KTUNE_QUANT_SCALE_SHIFT, 0 };
	expect_error(&f, 8, 256, "group size 48 is not one of 32, 64, 128 or 0");
	f = (ktune_quant_format){ 4, 256, KTUNE_QUANT_SCALE_SHIFT, 0 };
	expect_error(&f, 8, 256, "group size 256");
	f = (ktune_quant_format){ 4, 128, (ktune_quant_mode)7, 0 };
	expect_error(&f, 8, 256, "mode 7");
	f = (ktune_quant_format){ 4, 128, KTUNE_QUANT_SCALE_SHIFT, 2 };
	expect_error(&f, 8, 256, "zero_scalar is 2");
	f = (ktune_quant_format){ 4, 64, KTUNE_QUANT_SCALE_SHIFT, 0 };
	expect_error(&f, 8, 96, "k = 96 is not a multiple of the group size 64");
	f = (ktune_quant_format){ 8, 0, KTUNE_QUANT_SCALE_SHIFT, 0 };
	expect_error(&f, 8, 100, "k = 100 is not a multiple of 32");
	expect_error(&f, 0, 128, "[n, k] = [0, 128]");
	assert_int_equal(ktune_quant_sizes(NULL, 8, 128, NULL, NULL, NULL, NULL, 0), KTUNE_ERR_INVALID);
}

/* ------------------------------------------------------------ packing */

static void test_quant__packing_by_hand(void **state)
{
	(void)state;
	struct ktune_quant_shape s;
	uint8_t q[64], back[64];
	uint32_t words[8];
	/* 4 bits: codes 1..8 then 9..15, 0: the first weight in the lowest bits */
	ktune_quant_format f = { 4, 32, KTUNE_QUANT_SCALE, 0 };
	assert_int_equal(ktune__quant_shape(&f, 1, 32, &s, NULL), KTUNE_OK);
	for (int i = 0; i < 32; i++)
		q[i] = (uint8_t)((i + 1) & 15);
	ktune__quant_pack_q(&s, q, words);
	assert_int_equal(words[0], 0x87654321u);
	assert_int_equal(words[1], 0x0fedcba9u);
	assert_int_equal(words[2], 0x87654321u);
	assert_int_equal(words[3], 0x0fedcba9u);
	ktune__quant_unpack_q(&s, words, back);
	assert_memory_equal(q, back, 32);
	/* 8 bits: bytes in order (little-endian words) */
	f.bits = 8;
	assert_int_equal(ktune__quant_shape(&f, 1, 32, &s, NULL), KTUNE_OK);
	for (int i = 0; i < 32; i++)
		q[i] = (uint8_t)(0x10 + i);
	ktune__quant_pack_q(&s, q, words);
	assert_int_equal(words[0], 0x13121110u);
	assert_int_equal(words[7], 0x2f2e2d2cu);
	/* 1 bit: 32 a word, then three words of padding, zero */
	f.bits = 1;
	assert_int_equal(ktune__quant_shape(&f, 2, 32, &s, NULL), KTUNE_OK);
	for (int i = 0; i < 64; i++)
		q[i] = (uint8_t)(i < 32 ? (i == 0 || i == 31) : i % 2);
	memset(words, 0xaa, sizeof(words));
	ktune__quant_pack_q(&s, q, words);
	assert_int_equal(words[0], 0x80000001u);
	assert_int_equal(words[1], 0);
	assert_int_equal(words[2], 0);
	assert_int_equal(words[3], 0);
	assert_int_equal(words[4], 0xaaaaaaaau);
	assert_int_equal(words[5], 0);
	/* 2 bits */
	f.bits = 2;
	assert_int_equal(ktune__quant_shape(&f, 1, 32, &s, NULL), KTUNE_OK);
	for (int i = 0; i < 32; i++)
		q[i] = (uint8_t)(i % 4);
	ktune__quant_pack_q(&s, q, words);
	assert_int_equal(words[0], 0xe4e4e4e4u);
	assert_int_equal(words[1], 0xe4e4e4e4u);
}

static void test_quant__pack_unpack_round_trip(void **state)
{
	(void)state;
	static const int64_t ks[] = { 32, 64, 96, 128, 160, 384, 4096 };
	uint64_t seed = 7;
	for (int b = 0; b < 4; b++)
		for (int g = 0; g < 4; g++)
			for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
				ktune_quant_format f = { all_bits[b], all_groups[g], KTUNE_QUANT_SCALE_SHIFT, 0 };
				struct ktune_quant_shape s;
				const int64_t n = 3, k = ks[ki];
				if (ktune__quant_shape(&f, n, k, &s, NULL))
					continue; /* k not a multiple of the group */
				uint8_t *q = malloc((size_t)(n * k)), *back = malloc((size_t)(n * k));
				uint32_t *words = malloc((size_t)s.words * 4);
				for (int64_t i = 0; i < n * k; i++)
					q[i] = (uint8_t)(uniform(&seed) * (1 << s.bits));
				ktune__quant_pack_q(&s, q, words);
				ktune__quant_unpack_q(&s, words, back);
				assert_memory_equal(q, back, (size_t)(n * k));
				for (int64_t r = 0; r < n; r++) /* the padding is zero */
					for (int64_t w = k / s.per_word; w < s.row_words; w++)
						assert_int_equal(words[r * s.row_words + w], 0);
				assert_int_equal(s.row_words % 4, 0);
				free(q);
				free(back);
				free(words);
			}
}

/* ------------------------------------------------------------ quantisation */

/* A group's [lo, hi] and its step as ktune_quant_pack chose them: each weight within half a step. */
static void check_rtn(const ktune_quant_format *f, int64_t n, int64_t k, const double *w, ktune_dtype d)
{
	struct ktune_quant_shape s;
	int64_t nw, ns, nz;
	assert_int_equal(ktune__quant_shape(f, n, k, &s, NULL), KTUNE_OK);
	assert_int_equal(ktune_quant_sizes(f, n, k, &nw, &ns, &nz, NULL, 0), KTUNE_OK);
	uint16_t *in = malloc((size_t)(n * k) * 2), *out = malloc((size_t)(n * k) * 2);
	uint16_t *sc = malloc((size_t)(ns + 1) * 2), *ze = malloc((size_t)(nz + 1) * 2);
	uint32_t *wq = malloc((size_t)nw * 4);
	for (int64_t i = 0; i < n * k; i++)
		in[i] = ktune__quant_to_elem(w[i], d);
	assert_int_equal(ktune_quant_pack(f, n, k, in, k, d, wq, sc, ze), KTUNE_OK);
	assert_int_equal(ktune_quant_unpack(f, n, k, wq, sc, ze, d, out, k), KTUNE_OK);
	const double top = (1 << f->bits) - 1;
	for (int64_t r = 0; r < n; r++)
		for (int64_t c = 0; c < k; c++) {
			int64_t g = r * s.groups + c / s.group;
			double x = ktune__quant_from_elem(in[r * k + c], d), got = ktune__quant_from_elem(out[r * k + c], d);
			double scale = s.has_scale ? ktune__quant_from_elem(sc[g], d) : 1;
			double zero = s.has_zero ? ktune__quant_from_elem(ze[s.zero_scalar ? 0 : g], d) : 0;
			double step = fabs(scale);
			/* the grid's ends: weights outside it are clamped to them */
			double e0 = ktune__quant_dequant(f->mode, 0, scale, zero), e1 = ktune__quant_dequant(f->mode, top, scale, zero);
			double lo = e0 < e1 ? e0 : e1, hi = e0 < e1 ? e1 : e0;
			double want = x < lo ? lo : x > hi ? hi : x;
			/* half a step, the scale's and zero's rounding to dtype over the codes, the result's rounding */
			double slack = 0.5 * step + 3 * top * step * ldexp(1, d == KTUNE_F16 ? -11 : -8) + fabs(want) * ldexp(1, -7);
			if (!(fabs(got - want) <= slack))
				fail_msg("bits %d group %d mode %d zero_scalar %d: w[%lld, %lld] = %g came back %g "
					 "(grid [%g, %g], step %g)", f->bits, f->group_size, (int)f->mode, f->zero_scalar,
					 (long long)r, (long long)c, x, got, lo, hi, step);
			/* within the grid (or on the side SCALE keeps), the clamp costs nothing */
			if (f->mode != KTUNE_QUANT_SHIFT && x >= lo && x <= hi && !(fabs(got - x) <= slack))
				fail_msg("mode %d: %g came back %g", (int)f->mode, x, got);
		}
	free(in);
	free(out);
	free(sc);
	free(ze);
	free(wq);
}

static void test_quant__pack_rounds_to_nearest(void **state)
{
	(void)state;
	uint64_t seed = 11;
	const int64_t n = 5, k = 256;
	double *w = malloc((size_t)(n * k) * sizeof(double));
	for (int b = 0; b < 4; b++)
		for (int g = 0; g < 4; g++)
			for (int m = 0; m < 4; m++)
				for (int zs = 0; zs <= 1; zs++)
					for (int d = 0; d < 2; d++) {
						ktune_quant_format f = { all_bits[b], all_groups[g], all_modes[m], zs };
						ktune_dtype dt = d ? KTUNE_BF16 : KTUNE_F16;
						for (int64_t i = 0; i < n * k; i++) {
							double u = uniform(&seed);
							/* scale: one sign a row; shift: integers over the codes; else +-2 */
							w[i] = all_modes[m] == KTUNE_QUANT_SCALE ? ((i / k) % 2 ? -u : u) * 3
							       : all_modes[m] == KTUNE_QUANT_SHIFT ? floor(u * (1 << all_bits[b])) - 3
												   : 4 * u - 2;
						}
						check_rtn(&f, n, k, w, dt);
					}
	free(w);
}

/* Weights on a grid of power-of-two steps and integer zeros, every code used: they come back exactly. */
static void test_quant__pack_exact_on_the_grid(void **state)
{
	(void)state;
	const int64_t n = 4, k = 128;
	for (int b = 0; b < 4; b++)
		for (int m = 0; m < 4; m++) {
			ktune_quant_format f = { all_bits[b], 32, all_modes[m], 0 };
			const int top = (1 << all_bits[b]) - 1;
			uint16_t in[4 * 128], out[4 * 128], sc[16], ze[16];
			uint32_t wq[4 * 32];
			for (int64_t r = 0; r < n; r++)
				for (int64_t c = 0; c < k; c++) {
					int q = (int)((c * 7 + r) % (top + 1)), gi = (int)(c / 32);
					/* exact in bf16: at most 8 significant bits */
					double step = ldexp(1, (int)(r % 3) - 2), zero = (double)(gi % (top < 3 ? top + 1 : 4));
					if (c % 32 == 0)
						q = 0; /* every group holds both ends of the codes */
					if (c % 32 == 1)
						q = top;
					double v = all_modes[m] == KTUNE_QUANT_SCALE_SHIFT ? (q - zero) * step
						   : all_modes[m] == KTUNE_QUANT_SCALE   ? q * step
						   : all_modes[m] == KTUNE_QUANT_SHIFT   ? q - zero
											 : q * step - zero;
					in[r * k + c] = ktune__quant_to_elem(v, KTUNE_BF16);
					assert_true(ktune__quant_from_elem(in[r * k + c], KTUNE_BF16) == v);
				}
			assert_int_equal(ktune_quant_pack(&f, n, k, in, k, KTUNE_BF16, wq, sc, ze), KTUNE_OK);
			assert_int_equal(ktune_quant_unpack(&f, n, k, wq, sc, ze, KTUNE_BF16, out, k), KTUNE_OK);
			for (int i = 0; i < n * k; i++)
				if (in[i] != out[i])
					fail_msg("bits %d mode %d: element %d: %g came back %g", all_bits[b], (int)all_modes[m], i,
						 ktune__quant_from_elem(in[i], KTUNE_BF16), ktune__quant_from_elem(out[i], KTUNE_BF16));
		}
}

static void test_quant__pack_refuses(void **state)
{
	(void)state;
	uint16_t w[2 * 32] = { 0 };
	uint32_t wq[8];
	uint16_t sc[2], ze[2];
	ktune_quant_format f = { 4, 32, KTUNE_QUANT_SCALE_SHIFT, 0 };
	assert_int_equal(ktune_quant_pack(&f, 2, 32, w, 32, KTUNE_BF16, wq, sc, ze), KTUNE_OK);
	assert_int_equal(ktune_quant_pack(&f, 2, 32, w, 31, KTUNE_BF16, wq, sc, ze), KTUNE_ERR_INVALID);
	assert_int_equal(ktune_quant_pack(&f, 2, 32, w, 32, KTUNE_F32, wq, sc, ze), KTUNE_ERR_INVALID);
	assert_int_equal(ktune_quant_pack(&f, 2, 32, w, 32, KTUNE_BF16, wq, sc, NULL), KTUNE_ERR_INVALID);
	assert_int_equal(ktune_quant_pack(&f, 2, 48, w, 48, KTUNE_BF16, wq, sc, ze), KTUNE_ERR_INVALID);
	w[5] = 0x7fc0; /* NaN: no grid holds it */
	assert_int_equal(ktune_quant_pack(&f, 2, 32, w, 32, KTUNE_BF16, wq, sc, ze), KTUNE_ERR_INVALID);
	f.mode = KTUNE_QUANT_SCALE; /* no zeros needed */
	w[5] = 0;
	assert_int_equal(ktune_quant_pack(&f, 2, 32, w, 32, KTUNE_BF16, wq, sc, NULL), KTUNE_OK);
}

/* ------------------------------------------------------------ the reference */

/* A problem's inputs, drawn as the tuner draws them (gemm_quant's input_range), rounded to dtype. */
struct problem {
	struct ktune_quant_shape s;
	int64_t m;
	ktune_dtype dtype;
	double *a, *words, *scales, *zeros, *bias;
	uint8_t *q; /* the codes, unpacked */
};

static struct ktune_key key_of(const struct ktune_quant_shape *s, int64_t m, ktune_dtype d)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	struct ktune_key key = { .op = "gemm_quant", .dtype = d, .m = m, .n = s->n, .k = s->k, .aligned = 1 };
	const char *values[] = { ktune__quant_bits_name(s->bits), ktune__quant_group_name(s->channel ? 0 : (int)s->group),
				 ktune__quant_mode_name(s->mode), "v1", NULL, NULL, NULL };
	assert_non_null(op);
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), KTUNE_OK);
	return key;
}

static void problem_make(struct problem *p, const ktune_quant_format *f, int64_t m, int64_t n, int64_t k,
			 ktune_dtype d, uint64_t seed)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	double lo, hi;
	memset(p, 0, sizeof(*p));
	assert_int_equal(ktune__quant_shape(f, n, k, &p->s, NULL), KTUNE_OK);
	p->m = m;
	p->dtype = d;
	struct ktune_key key = key_of(&p->s, m, d);
	p->a = malloc((size_t)(m * k) * sizeof(double));
	p->words = malloc((size_t)p->s.words * sizeof(double));
	p->scales = malloc((size_t)(n * p->s.groups) * sizeof(double));
	p->zeros = malloc((size_t)(n * p->s.groups) * sizeof(double));
	p->bias = malloc((size_t)n * sizeof(double));
	p->q = malloc((size_t)(n * k));
	op->input_range(&key, 0, &lo, &hi);
	for (int64_t i = 0; i < m * k; i++)
		p->a[i] = rnd(lo + (hi - lo) * uniform(&seed), d);
	op->input_range(&key, 1, &lo, &hi);
	assert_true(lo == 0 && hi == 4294967296.0);
	for (int64_t i = 0; i < p->s.words; i++)
		p->words[i] = (uint32_t)floor(hi * uniform(&seed)); /* padding words too: nobody may read them */
	op->input_range(&key, 2, &lo, &hi);
	for (int64_t i = 0; i < n * p->s.groups; i++)
		p->scales[i] = rnd(lo + (hi - lo) * uniform(&seed), d);
	op->input_range(&key, 3, &lo, &hi);
	for (int64_t i = 0; i < n * p->s.groups; i++)
		p->zeros[i] = rnd(lo + (hi - lo) * uniform(&seed), d);
	op->input_range(&key, 4, &lo, &hi);
	for (int64_t i = 0; i < n; i++)
		p->bias[i] = rnd(lo + (hi - lo) * uniform(&seed), d);
	for (int64_t r = 0; r < n; r++)
		for (int64_t c = 0; c < k; c++) {
			uint32_t w = (uint32_t)p->words[r * p->s.row_words + c / p->s.per_word];
			p->q[r * k + c] = (uint8_t)((w >> (c % p->s.per_word * p->s.bits)) & ((1u << p->s.bits) - 1));
		}
}

static void problem_free(struct problem *p)
{
	free(p->a);
	free(p->words);
	free(p->scales);
	free(p->zeros);
	free(p->bias);
	free(p->q);
}

/* The group's scale and zero as the format lays them out. */
static void meta(const struct problem *p, int64_t r, int64_t c, double *scale, double *zero)
{
	int64_t g = r * p->s.groups + c / p->s.group;
	*scale = p->s.has_scale ? p->scales[g] : 1;
	*zero = !p->s.has_zero ? 0 : p->zeros[p->s.zero_scalar ? 0 : g];
}

static void test_quant__reference_every_format(void **state)
{
	(void)state;
	static const int64_t ms[] = { 1, 3, 16, 33 }, ns[] = { 1, 8, 37 };
	int checked = 0;
	for (int b = 0; b < 4; b++)
		for (int m = 0; m < 4; m++)
			for (int g = 0; g < 4; g++)
				for (int zs = 0; zs <= 1; zs++) {
					ktune_quant_format f = { all_bits[b], all_groups[g], all_modes[m], zs };
					int64_t k = all_groups[g] ? 3 * all_groups[g] : 160;
					for (size_t mi = 0; mi < 4; mi++)
						for (size_t ni = 0; ni < 3; ni++) {
							struct problem p;
							int64_t M = ms[mi], N = ns[ni];
							problem_make(&p, &f, M, N, k, KTUNE_BF16, (uint64_t)(b * 1000 + m * 100 + g * 10 + zs + 1));
							double *c = malloc((size_t)(M * N) * sizeof(double));
							ktune__ref_gemm_quant(&p.s, M, p.a, k, p.words, p.scales, p.zeros,
									      zs ? NULL : p.bias, c, N);
							/* the direct sum from the unpacked codes, modes spelled out here */
							for (int64_t i = 0; i < M; i++)
								for (int64_t j = 0; j < N; j++) {
									double want = zs ? 0 : p.bias[j];
									for (int64_t l = 0; l < k; l++) {
										double s, z, q = p.q[j * k + l], w;
										meta(&p, j, l, &s, &z);
										switch (all_modes[m]) {
										case KTUNE_QUANT_SCALE_SHIFT: w = s * q - s * z; break;
										case KTUNE_QUANT_SCALE: w = q * s; break;
										case KTUNE_QUANT_SHIFT: w = q - z; break;
										default: w = s * q + z;
										}
										want += p.a[i * k + l] * w;
									}
									if (!(fabs(c[i * N + j] - want) <= 1e-12 * (1 + fabs(want))))
										fail_msg("bits %d mode %d group %d: c[%lld, %lld] = %.17g, want %.17g",
											 all_bits[b], m, all_groups[g], (long long)i,
											 (long long)j, c[i * N + j], want);
									checked++;
								}
							free(c);
							problem_free(&p);
						}
				}
	/* the large shape once a bits: m = 128 rows of A on 4104 rows of W */
	for (int b = 0; b < 4; b++) {
		ktune_quant_format f = { all_bits[b], 128, all_modes[b], b % 2 };
		struct problem p;
		const int64_t M = 128, N = 4104, k = 128;
		problem_make(&p, &f, M, N, k, KTUNE_F16, 77 + (uint64_t)b);
		double *c = malloc((size_t)(M * N) * sizeof(double));
		ktune__ref_gemm_quant(&p.s, M, p.a, k, p.words, p.scales, p.zeros, p.bias, c, N);
		for (int64_t i = 0; i < M; i += 7)
			for (int64_t j = 0; j < N; j += 5) {
				double want = p.bias[j];
				for (int64_t l = 0; l < k; l++) {
					double s, z;
					meta(&p, j, l, &s, &z);
					want += p.a[i * k + l] * ktune__quant_dequant(all_modes[b], p.q[j * k + l], s, z);
				}
				if (!(fabs(c[i * N + j] - want) <= 1e-12 * (1 + fabs(want))))
					fail_msg("bits %d: c[%lld, %lld] = %.17g, want %.17g", all_bits[b], (long long)i, (long long)j,
						 c[i * N + j], want);
				checked++;
			}
		free(c);
		problem_free(&p);
	}
	printf("%d elements checked\n", checked);
}

/* A hand-computed product: 8-bit codes 0..31, scale 0.5, zero 3, a = 1, 2, ... */
static void test_quant__reference_by_hand(void **state)
{
	(void)state;
	struct ktune_quant_shape s;
	ktune_quant_format f = { 8, 32, KTUNE_QUANT_SCALE_SHIFT, 0 };
	double a[32], words[8], scales[1] = { 0.5 }, zeros[1] = { 3 }, bias[1] = { 0.25 }, c[1];
	assert_int_equal(ktune__quant_shape(&f, 1, 32, &s, NULL), KTUNE_OK);
	for (int i = 0; i < 32; i++)
		a[i] = i + 1;
	for (int w = 0; w < 8; w++)
		words[w] = (double)((uint32_t)(4 * w) | (uint32_t)(4 * w + 1) << 8 | (uint32_t)(4 * w + 2) << 16 |
				    (uint32_t)(4 * w + 3) << 24);
	ktune__ref_gemm_quant(&s, 1, a, 32, words, scales, zeros, bias, c, 1);
	/* sum over i of (i + 1) (i - 3) / 2 = (sum i^2 - 2 sum i - 3 * 32) / 2, i = 0..31 */
	assert_true(c[0] == (10416.0 - 2 * 496 - 96) / 2 + 0.25);
}

/*
 * The kernels' numerics, simulated in fp32 on the tuner's inputs at a long
 * k: the GEMV dequantises in fp32, the tiled kernel rounds each weight to
 * the dtype for the mma.  Both stay within half the op's tolerance
 * relative to max(1, |reference|), the check the tuner and the GPU test make.
 */
static void test_quant__kernel_numerics_within_tolerance(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	const int64_t M = 2, N = 48, K = 4096;
	for (int d = 0; d < 2; d++)
		for (int b = 0; b < 4; b++)
			for (int m = 0; m < 4; m++) {
				ktune_dtype dt = d ? KTUNE_BF16 : KTUNE_F16;
				ktune_quant_format f = { all_bits[b], 128, all_modes[m], 0 };
				struct problem p;
				problem_make(&p, &f, M, N, K, dt, 99 + (uint64_t)(d * 16 + b * 4 + m));
				struct ktune_key key = key_of(&p.s, M, dt);
				double tol = op->tolerance(&key, 5), worst[2] = { 0, 0 };
				double *c = malloc((size_t)(M * N) * sizeof(double));
				ktune__ref_gemm_quant(&p.s, M, p.a, K, p.words, p.scales, p.zeros, p.bias, c, N);
				for (int64_t i = 0; i < M; i++)
					for (int64_t j = 0; j < N; j++)
						for (int mma = 0; mma < 2; mma++) {
							float acc = 0;
							for (int64_t l = 0; l < K; l++) {
								double s, z;
								meta(&p, j, l, &s, &z);
								float mul = p.s.has_scale ? (float)s : 1.0f, zf = (float)z;
								float add = m == 0 ? -zf * mul : m == 1 ? 0.0f : m == 2 ? -zf : zf;
								float w = fmaf((float)p.q[j * K + l], mul, add);
								if (mma)
									w = (float)rnd(w, dt);
								acc = fmaf((float)p.a[i * K + l], w, acc);
							}
							double got = rnd((double)(acc + (float)p.bias[j]), dt), r = c[i * N + j];
							double err = fabs(got - r) / (fabs(r) > 1 ? fabs(r) : 1);
							worst[mma] = err > worst[mma] ? err : worst[mma];
						}
				printf("%s bits %d mode %d: worst error %.2g (GEMV), %.2g (mma), tolerance %g\n", d ? "bf16" : "f16",
				       all_bits[b], m, worst[0], worst[1], tol);
				if (!(worst[0] <= tol / 2 && worst[1] <= tol / 2))
					fail_msg("%s bits %d mode %d: worst error %.3g (GEMV), %.3g (mma) against tolerance %g",
						 d ? "bf16" : "f16", all_bits[b], m, worst[0], worst[1], tol);
				free(c);
				problem_free(&p);
			}
}

/* ------------------------------------------------------------ the op */

static void test_quant__key_check_and_bucket(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	struct ktune_err e;
	struct ktune_key key = { .op = "gemm_quant", .dtype = KTUNE_BF16, .m = 5, .n = 4096, .k = 4096, .aligned = 1 };
	const char *values[] = { "4", "64", "fma", NULL, NULL, NULL, NULL };
	assert_non_null(op);
	assert_int_equal(ktune__op_variant_set(op, &key, values, &e), KTUNE_OK);
	assert_string_equal(key.variant, "4,64,fma,v1");
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_OK);
	op->key_bucket(&key);
	assert_int_equal(key.m, 8);
	assert_int_equal(key.n, 4096); /* n and k exactly */
	assert_int_equal(key.k, 4096);
	key.m = 33;
	op->key_bucket(&key);
	assert_int_equal(key.m, 64);
	key.k = 96;
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "gemm_quant: k = 96 is not a multiple of the group size 64"));
	key.k = 4100;
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "not a multiple of 32"));
	snprintf(key.variant, sizeof(key.variant), "3,64,fma,v1");
	key.k = 4096;
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "bits"));
	snprintf(key.variant, sizeof(key.variant), "4,48,fma,v1");
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "group"));
	snprintf(key.variant, sizeof(key.variant), "4,chan,scale,v2");
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "pack"));
	snprintf(key.variant, sizeof(key.variant), "4,chan,scale,v1");
	key.dtype = KTUNE_F32;
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	/* no unaligned class: the tuner could not time it (the kernels take aligned a and wq only) */
	key.dtype = KTUNE_F16;
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_OK);
	key.aligned = 0;
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "unaligned class"));
	/* the tuner's problem is of the aligned class whatever n: c's rows are packed, ld 0 */
	struct ktune_op_layout l;
	key.aligned = 1;
	key.n = 7;
	op->layout(&key, &l);
	assert_int_equal(l.nbufs, 6);
	assert_int_equal(l.bufs[5].ld, 0);
	struct ktune_op_call call = { .buf = { 256, 512, 768, 1024, 0, 1280 }, .ld = { key.k } };
	assert_int_equal(ktune__op_call_aligned(&key, &l, &call), 1);
}

/* Every admitted config of a few keys: launches within the grid's limits, two steps exactly when split. */
static void test_quant__steps_and_workspace(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	static const int64_t shapes[][3] = { { 1, 1, 32 }, { 3, 8, 96 }, { 16, 4104, 4096 }, { 128, 4104, 384 },
					     { 1, 28672, 4096 }, { 2000000, 1, 32 } };
	struct ktune_err e;
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct ktune_key key = { .op = "gemm_quant", .dtype = KTUNE_BF16, .m = shapes[i][0], .n = shapes[i][1],
					 .k = shapes[i][2], .aligned = 1 };
		const char *values[] = { "2", "32", "scale_shift", NULL, NULL, NULL, NULL };
		struct ktune_config *cfgs;
		int n, pruned;
		assert_int_equal(ktune__op_variant_set(op, &key, values, &e), KTUNE_OK);
		op->key_bucket(&key);
		assert_int_equal(ktune__op_candidates(op, &key, "sm_90", 132, 0, 1, &cfgs, &n, &pruned, &e), KTUNE_OK);
		assert_true(n > 0);
		struct ktune_config d = op->default_config(&key, 132);
		cfgs[0] = d; /* the default too, admitted or not */
		for (int c = 0; c < n; c++) {
			struct ktune_op_call call = { .size = { shapes[i][0], shapes[i][1], shapes[i][2] },
						      .ld = { shapes[i][2], 0, 0, 0, 0, shapes[i][1] } };
			struct ktune_op_step st[KTUNE_OP_MAX_KERNELS];
			long split = ktune__op_param(op, &cfgs[c], "SPLIT_K", 1);
			int steps = ktune__op_steps(op, &key, &cfgs[c], &call, 132, st);
			assert_int_equal(steps, split > 1 ? 2 : 1);
			assert_int_equal(op->workspace(&key, &cfgs[c], &call, 132),
					 split > 1 ? (size_t)split * (size_t)(shapes[i][0] * shapes[i][1]) * 4 : 0);
			for (int s = 0; s < steps; s++) {
				assert_true(st[s].launch.grid[0] >= 1 && st[s].launch.grid[0] <= 0x7fffffffu);
				assert_true(st[s].launch.grid[1] >= 1 && st[s].launch.grid[1] <= 65535);
				assert_true(st[s].launch.grid[2] >= 1 && st[s].launch.grid[2] <= 65535);
				assert_true(st[s].launch.block[0] >= 32 && st[s].launch.block[0] <= 1024);
				if (s == 0 && !strcmp(op->families[cfgs[c].family].name, "qwgmma")) /* its ring: dynamic */
					assert_true(st[s].launch.smem > 1024 && st[s].launch.smem <= 232448);
				else
					assert_int_equal(st[s].launch.smem, 0);
				assert_int_equal(st[s].entry, s);
				assert_int_equal(st[s].args.n, s ? 7 : 13);
			}
		}
		free(cfgs);
	}
}

/*
 * The prune keeps the GEMV to 16 rows of A, the tiled kernel's shared
 * memory to 48 KiB; the register-streamed qmma serves every M, its tiles of
 * rows within 4x of M (up to 128) and its registers in flight within the bound;
 * qcode serves M up to 64, each k-block (4 VEC words of 8-bit codes) inside a group,
 * its WARPS_K sums within 48 KiB; on sm_90 the wgmma family serves M from 64,
 * its tiles of rows as qmma's and its ring within 227 KiB.
 */
static void test_quant__prune(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	struct ktune_err e;
	for (int64_t m = 1; m <= 256; m *= 2) {
		struct ktune_key key = { .op = "gemm_quant", .dtype = KTUNE_F16, .m = m, .n = 4096, .k = 4096, .aligned = 1 };
		const char *values[] = { "8", "32", "fma", NULL, NULL, NULL, NULL };
		struct ktune_config *cfgs;
		int n, pruned, gemv = 0, qmma = 0, qcode = 0, qwgmma = 0;
		assert_int_equal(ktune__op_variant_set(op, &key, values, &e), KTUNE_OK);
		assert_int_equal(ktune__op_candidates(op, &key, "sm_90", 132, 0, 1, &cfgs, &n, &pruned, &e), KTUNE_OK);
		for (int c = 0; c < n; c++) {
			gemv += cfgs[c].family == 0;
			if (!strcmp(op->families[cfgs[c].family].name, "qmma")) {
				long bm = ktune__op_param(op, &cfgs[c], "BLOCK_M", 0);
				qmma++;
				assert_true(bm == 16 || bm <= m);
				assert_true(4 * bm >= (m < 128 ? m : 128));
			}
			if (!strcmp(op->families[cfgs[c].family].name, "qcode")) {
				long wn = ktune__op_param(op, &cfgs[c], "WARPS_N", 0), wk = ktune__op_param(op, &cfgs[c], "WARPS_K", 0);
				long mfrag = ktune__op_param(op, &cfgs[c], "MFRAG", 0), nt = m < 16 ? (m + 7) / 8 : 2;
				qcode++;
				assert_int_equal(32 % (4 * 4 * ktune__op_param(op, &cfgs[c], "VEC", 0)), 0);
				assert_true((wk - 1) * wn * 32 * mfrag * nt * 4 * 4 <= 48 * 1024); /* its WARPS_K sums */
			}
			if (!strcmp(op->families[cfgs[c].family].name, "qwgmma")) {
				long bm = ktune__op_param(op, &cfgs[c], "BLOCK_M", 0), stages = ktune__op_param(op, &cfgs[c], "STAGES", 0);
				long bn = 64 * ktune__op_param(op, &cfgs[c], "WGS", 0) * ktune__op_param(op, &cfgs[c], "SLABS", 0);
				qwgmma++;
				assert_true(bm <= m && 4 * bm >= (m < 128 ? m : 128));
				long cluster = ktune__op_param(op, &cfgs[c], "CLUSTER_K", 0), ring = stages * (bm * 128 + bn * 64);
				assert_true(cluster == 1 || ktune__op_param(op, &cfgs[c], "SPLIT_K", 0) == 1);
				assert_true(1024 + ring <= 232448); /* 8 bits: 64 bytes a row a stage */
				assert_true(cluster == 1 || 1024 + bm * (bn + 4) * 4 <= 232448); /* the cluster's tile of sums */
			}
		}
		if (m >= 64)
			assert_true(qwgmma > 0); /* sm_90: the wgmma family too, from its least tile of rows */
		else
			assert_int_equal(qwgmma, 0);
		assert_true(qmma > 0);
		if (m <= 64)
			assert_true(qcode > 0);
		else
			assert_int_equal(qcode, 0);
		if (m <= 16)
			assert_true(gemv > 0);
		else
			assert_int_equal(gemv, 0);
		assert_true(n - gemv > 0);
		free(cfgs);
		/* the default is a candidate's equal: admitted by its space and by the prune */
		struct ktune_config d = op->default_config(&key, 132);
		char text[256], why[256];
		assert_int_equal(ktune__op_config_format(op, &d, text, sizeof(text)), 0);
		struct ktune_config back;
		assert_int_equal(ktune__op_config_parse(op, op->families[d.family].name, text, &back, &e), KTUNE_OK);
		if (op->prune(&key, &d, 132, why, sizeof(why)))
			fail_msg("m %lld: default %s pruned: %s", (long long)m, text, why);
		/* sm_90: the wgmma family's from 64 rows of A, admitted too; nothing of it elsewhere */
		struct ktune_config w;
		int has = op->arch_default(&key, 132, "sm_90", &w);
		assert_int_equal(has, m >= 64);
		if (has) {
			assert_string_equal(op->families[w.family].name, "qwgmma");
			if (op->prune(&key, &w, 132, why, sizeof(why)))
				fail_msg("m %lld: sm_90's default pruned: %s", (long long)m, why);
		}
		assert_int_equal(op->arch_default(&key, 132, "sm_80", &w), 0);
	}
}

/* The untuned default of a bf16 scale_shift key of the format, as the registry serves it; its text in text. */
static struct ktune_key default_of(const struct ktune_op *op, const char *bits, const char *group, int64_t m,
				   int64_t n, int64_t k, struct ktune_config *d, char *text, size_t len)
{
	struct ktune_key key = { .op = "gemm_quant", .dtype = KTUNE_BF16, .m = m, .n = n, .k = k, .aligned = 1 };
	const char *values[] = { bits, group, "scale_shift", NULL, NULL, NULL, NULL };
	struct ktune_err e;
	assert_int_equal(ktune__op_variant_set(op, &key, values, &e), KTUNE_OK);
	op->key_bucket(&key);
	*d = op->default_config(&key, 132);
	assert_int_equal(ktune__op_config_format(op, d, text, len), 0);
	return key;
}

/*
 * The untuned default of every format, on awkward shapes and the LLM
 * weights: always a config the prune admits, qfrag's on m <= 16 wherever k
 * holds its steps, and on the H200's swept keys the config they picked or
 * its near kin (docs/quant.md).
 */
static void test_quant__default_every_format(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	static const char *const bits[] = { "8", "4", "2", "1" }, *const groups[] = { "32", "64", "128", "chan" };
	static const int64_t ms[] = { 1, 3, 8, 16, 33, 128 }, ns[] = { 1, 8, 4104, 28672 }, ks[] = { 96, 384, 4096 };
	int qfrag = 0, small = 0;
	for (int b = 0; b < 4; b++)
		for (int g = 0; g < 4; g++)
			for (int i = 0; i < 6; i++)
				for (int j = 0; j < 4; j++)
					for (int l = 0; l < 3; l++) {
						int64_t k = ks[l];
						struct ktune_config d;
						char text[256], why[256];
						if (g < 3 && k % atoi(groups[g]))
							continue;
						struct ktune_key key = default_of(op, bits[b], groups[g], ms[i], ns[j], k, &d,
										  text, sizeof(text));
						if (op->prune(&key, &d, 132, why, sizeof(why)))
							fail_msg("%s bits, group %s, %lldx%lldx%lld: default %s pruned: %s",
								 bits[b], groups[g], (long long)key.m, (long long)key.n,
								 (long long)k, text, why);
						int is_qfrag = !strcmp(op->families[d.family].name, "qfrag");
						if (ms[i] > 16)
							assert_false(is_qfrag);
						if (ms[i] <= 16 && k == 4096) {
							small++;
							qfrag += is_qfrag;
						}
					}
	assert_int_equal(qfrag, small); /* k = 4096 holds every format's steps */
	/* the H200's picks (bench/results/h200-qfrag-sweep.log, -formats-sweep.log) */
	static const struct {
		int64_t m, n, k;
		const char *want;
	} picks[] = {
		{ 1, 4096, 4096, "ROW_TILES=1,WARPS_K=16,STAGES=1,VEC=4,SPLIT_K=1" },
		{ 8, 6144, 4096, "ROW_TILES=1,WARPS_K=8,STAGES=1,VEC=4,SPLIT_K=1" },
		{ 4, 14336, 4096, "ROW_TILES=1,WARPS_K=4,STAGES=1,VEC=4,SPLIT_K=1" },
		{ 16, 14336, 4096, "ROW_TILES=2,WARPS_K=4,STAGES=1,VEC=4,SPLIT_K=1" },
		{ 16, 28672, 4096, "ROW_TILES=2,WARPS_K=2,STAGES=1,VEC=4,SPLIT_K=1" },
		{ 2, 4096, 14336, "ROW_TILES=1,WARPS_K=16,STAGES=1,VEC=4,SPLIT_K=1" },
		{ 16, 4096, 14336, "ROW_TILES=2,WARPS_K=16,STAGES=1,VEC=4,SPLIT_K=1" },
	};
	for (size_t i = 0; i < sizeof(picks) / sizeof(picks[0]); i++) {
		struct ktune_config d;
		char text[256];
		default_of(op, "4", "128", picks[i].m, picks[i].n, picks[i].k, &d, text, sizeof(text));
		assert_string_equal(op->families[d.family].name, "qfrag");
		assert_string_equal(text, picks[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quant__element_rounding),
		cmocka_unit_test(test_quant__sizes),
		cmocka_unit_test(test_quant__bad_formats),
		cmocka_unit_test(test_quant__packing_by_hand),
		cmocka_unit_test(test_quant__pack_unpack_round_trip),
		cmocka_unit_test(test_quant__pack_rounds_to_nearest),
		cmocka_unit_test(test_quant__pack_exact_on_the_grid),
		cmocka_unit_test(test_quant__pack_refuses),
		cmocka_unit_test(test_quant__reference_every_format),
		cmocka_unit_test(test_quant__reference_by_hand),
		cmocka_unit_test(test_quant__kernel_numerics_within_tolerance),
		cmocka_unit_test(test_quant__key_check_and_bucket),
		cmocka_unit_test(test_quant__steps_and_workspace),
		cmocka_unit_test(test_quant__prune),
		cmocka_unit_test(test_quant__default_every_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
