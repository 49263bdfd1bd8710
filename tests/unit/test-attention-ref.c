/*
 * test-attention-ref.c - the float64 attention reference (src/ops/attention-ref.c)
 * against values worked out by hand, its masking and head mapping, its
 * strides, and its backward pass against finite differences of the forward.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "ops/attention-ref.h"

#define CLOSE(a, b, tol) assert_true(fabs((a) - (b)) <= (tol))

/* One query, two keys, D = 2: the softmax of (1, 0) weighs v0 and v1. */
static void test_attention_ref__by_hand(void **state)
{
	(void)state;
	const double q[] = { 1, 0 }, k[] = { 1, 0, 0, 1 }, v[] = { 1, 2, 3, 4 };
	double o[2], lse;
	struct ktune_attn_shape s = { 1, 1, 2, 1, 1, 2, 0, 1.0 };
	ktune__ref_attention(&s, (struct ktune_attn_in){ q, 2, 2, 2 }, (struct ktune_attn_in){ k, 4, 2, 2 },
			     (struct ktune_attn_in){ v, 4, 2, 2 }, (struct ktune_attn_out){ o, 2, 2, 2 }, &lse);
	double e = exp(1), p0 = e / (e + 1), p1 = 1 / (e + 1);
	CLOSE(o[0], p0 * 1 + p1 * 3, 1e-15);
	CLOSE(o[1], p0 * 2 + p1 * 4, 1e-15);
	CLOSE(lse, log(e + 1), 1e-15);
	/* scale 2 is q = (2, 0) */
	s.scale = 2;
	ktune__ref_attention(&s, (struct ktune_attn_in){ q, 2, 2, 2 }, (struct ktune_attn_in){ k, 4, 2, 2 },
			     (struct ktune_attn_in){ v, 4, 2, 2 }, (struct ktune_attn_out){ o, 2, 2, 2 }, &lse);
	CLOSE(lse, log(exp(2) + 1), 1e-15);
}

/* Causal, aligned bottom-right: which keys each row sees, and rows that see none. */
static void test_attention_ref__causal_bottom_right(void **state)
{
	(void)state;
	struct ktune_attn_shape wide = { 1, 2, 3, 1, 1, 1, 1, 1 }, tall = { 1, 3, 2, 1, 1, 1, 1, 1 };
	assert_true(ktune__attn_visible(&wide, 0, 1) && !ktune__attn_visible(&wide, 0, 2));
	assert_true(ktune__attn_visible(&wide, 1, 2));
	assert_false(ktune__attn_visible(&tall, 0, 0));
	assert_true(ktune__attn_visible(&tall, 1, 0) && !ktune__attn_visible(&tall, 1, 1));
	assert_true(ktune__attn_visible(&tall, 2, 1));
	assert_false(ktune__attn_visible(&wide, 1, 3)); /* past sk */

	/* D = 1, all scores 0: each row averages the values it sees; row 0 of `tall` sees none */
	const double q[] = { 0, 0, 0 }, k[] = { 0, 0 }, v[] = { 2, 4 };
	double o[3] = { 9, 9, 9 }, lse[3];
	ktune__ref_attention(&tall, (struct ktune_attn_in){ q, 3, 1, 1 }, (struct ktune_attn_in){ k, 2, 1, 1 },
			     (struct ktune_attn_in){ v, 2, 1, 1 }, (struct ktune_attn_out){ o, 3, 1, 1 }, lse);
	assert_true(o[0] == 0 && isinf(lse[0]) && lse[0] < 0);
	CLOSE(o[1], 2, 1e-15);
	CLOSE(lse[1], 0, 1e-15);
	CLOSE(o[2], 3, 1e-15);
	CLOSE(lse[2], log(2), 1e-15);

	/* the visible pairs, in closed form, against counting them */
	for (int64_t sq = 1; sq <= 9; sq++)
		for (int64_t sk = 1; sk <= 9; sk++) {
			struct ktune_attn_shape s = { 1, sq, sk, 1, 1, 1, 1, 1 };
			double n = 0;
			for (int64_t i = 0; i < sq; i++)
				for (int64_t j = 0; j < sk; j++)
					n += ktune__attn_visible(&s, i, j);
			CLOSE(ktune__attn_visible_pairs(sq, sk, 1), n, 0);
			CLOSE(ktune__attn_visible_pairs(sq, sk, 0), (double)(sq * sk), 0);
		}
}

static double value(int i)
{
	return (double)((i * 7919) % 201 - 100) / 64;
}

/*
 * GQA (4 query heads over 2 K/V heads) in [B, S, H, D] and in [B, H, S, D]
 * with padded rows: the same numbers; query heads 2 and 3 read K/V head 1.
 */
static void test_attention_ref__layouts_and_heads(void **state)
{
	(void)state;
	enum { B = 2, SQ = 3, SK = 5, HQ = 4, HKV = 2, D = 4, PAD = 3 };
	double qa[B * SQ * HQ * D], ka[B * SK * HKV * D], va[B * SK * HKV * D], oa[B * SQ * HQ * D], la[B * HQ * SQ];
	double qb[B * HQ * SQ * (D + PAD)], kb[B * HKV * SK * (D + PAD)], vb[B * HKV * SK * (D + PAD)];
	double ob[B * HQ * SQ * (D + PAD)], lb[B * HQ * SQ];
	struct ktune_attn_shape s = { B, SQ, SK, HQ, HKV, D, 1, 0.7 };
	for (int b = 0; b < B; b++)
		for (int h = 0; h < HQ; h++)
			for (int i = 0; i < SQ; i++)
				for (int x = 0; x < D; x++) {
					int id = ((b * HQ + h) * SQ + i) * D + x;
					qa[((b * SQ + i) * HQ + h) * D + x] = qb[((b * HQ + h) * SQ + i) * (D + PAD) + x] = value(id);
				}
	for (int b = 0; b < B; b++)
		for (int h = 0; h < HKV; h++)
			for (int j = 0; j < SK; j++)
				for (int x = 0; x < D; x++) {
					int id = ((b * HKV + h) * SK + j) * D + x;
					ka[((b * SK + j) * HKV + h) * D + x] = kb[((b * HKV + h) * SK + j) * (D + PAD) + x] = value(id + 1000);
					va[((b * SK + j) * HKV + h) * D + x] = vb[((b * HKV + h) * SK + j) * (D + PAD) + x] = value(id + 2000);
				}
	ktune__ref_attention(&s, (struct ktune_attn_in){ qa, SQ * HQ * D, HQ * D, D },
			     (struct ktune_attn_in){ ka, SK * HKV * D, HKV * D, D },
			     (struct ktune_attn_in){ va, SK * HKV * D, HKV * D, D },
			     (struct ktune_attn_out){ oa, SQ * HQ * D, HQ * D, D }, la);
	ktune__ref_attention(&s, (struct ktune_attn_in){ qb, HQ * SQ * (D + PAD), D + PAD, SQ * (D + PAD) },
			     (struct ktune_attn_in){ kb, HKV * SK * (D + PAD), D + PAD, SK * (D + PAD) },
			     (struct ktune_attn_in){ vb, HKV * SK * (D + PAD), D + PAD, SK * (D + PAD) },
			     (struct ktune_attn_out){ ob, HQ * SQ * (D + PAD), D + PAD, SQ * (D + PAD) }, lb);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < HQ; h++)
			for (int i = 0; i < SQ; i++) {
				CLOSE(la[(b * HQ + h) * SQ + i], lb[(b * HQ + h) * SQ + i], 1e-14);
				for (int x = 0; x < D; x++)
					CLOSE(oa[((b * SQ + i) * HQ + h) * D + x], ob[((b * HQ + h) * SQ + i) * (D + PAD) + x], 1e-14);
			}
	/* head 3 of batch 1 by hand, row 2 (it sees keys 0..4): K/V head 1 */
	double mx = -INFINITY, sum = 0, want[D] = { 0 };
	for (int j = 0; j < SK; j++) {
		double sc = 0;
		for (int x = 0; x < D; x++)
			sc += qa[((1 * SQ + 2) * HQ + 3) * D + x] * ka[((1 * SK + j) * HKV + 1) * D + x];
		mx = fmax(mx, 0.7 * sc);
	}
	for (int j = 0; j < SK; j++) {
		double sc = 0;
		for (int x = 0; x < D; x++)
			sc += qa[((1 * SQ + 2) * HQ + 3) * D + x] * ka[((1 * SK + j) * HKV + 1) * D + x];
		double p = exp(0.7 * sc - mx);
		sum += p;
		for (int x = 0; x < D; x++)
			want[x] += p * va[((1 * SK + j) * HKV + 1) * D + x];
	}
	for (int x = 0; x < D; x++)
		CLOSE(oa[((1 * SQ + 2) * HQ + 3) * D + x], want[x] / sum, 1e-14);
	CLOSE(la[(1 * HQ + 3) * SQ + 2], mx + log(sum), 1e-14);
}

/* L = sum(dO * O): the backward's dQ, dK, dV against central differences of the forward, causal and GQA. */
static void test_attention_ref__backward_is_the_gradient(void **state)
{
	(void)state;
	enum { SQ = 4, SK = 3, HQ = 2, HKV = 1, D = 3 };
	double q[SQ * HQ * D], k[SK * HKV * D], v[SK * HKV * D], dout[SQ * HQ * D], o[SQ * HQ * D], lse[HQ * SQ];
	double dq[SQ * HQ * D], dk[SK * HKV * D], dv[SK * HKV * D];
	struct ktune_attn_shape s = { 1, SQ, SK, HQ, HKV, D, 1, 0.8 };
	for (int i = 0; i < SQ * HQ * D; i++) {
		q[i] = value(i);
		dout[i] = value(i + 500);
	}
	for (int i = 0; i < SK * HKV * D; i++) {
		k[i] = value(i + 100);
		v[i] = value(i + 300);
	}
	struct ktune_attn_in qi = { q, 0, HQ * D, D }, ki = { k, 0, HKV * D, D }, vi = { v, 0, HKV * D, D };
	struct ktune_attn_in di = { dout, 0, HQ * D, D };
	ktune__ref_attention_backward(&s, qi, ki, vi, di, (struct ktune_attn_out){ dq, 0, HQ * D, D },
				      (struct ktune_attn_out){ dk, 0, HKV * D, D }, (struct ktune_attn_out){ dv, 0, HKV * D, D });
	double *const params[] = { q, k, v }, *const grads[] = { dq, dk, dv };
	const int sizes[] = { SQ * HQ * D, SK * HKV * D, SK * HKV * D };
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < sizes[t]; i++) {
			double keep = params[t][i], l[2];
			for (int side = 0; side < 2; side++) {
				params[t][i] = keep + (side ? -1e-6 : 1e-6);
				ktune__ref_attention(&s, qi, ki, vi, (struct ktune_attn_out){ o, 0, HQ * D, D }, lse);
				l[side] = 0;
				for (int x = 0; x < SQ * HQ * D; x++)
					l[side] += dout[x] * o[x];
			}
			params[t][i] = keep;
			CLOSE(grads[t][i], (l[0] - l[1]) / 2e-6, 1e-7);
		}
	/* row 0 sees no key (sq > sk, causal): no gradient reaches q's row 0 */
	for (int h = 0; h < HQ; h++)
		for (int x = 0; x < D; x++)
			assert_true(dq[h * D + x] == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attention_ref__by_hand),
		cmocka_unit_test(test_attention_ref__causal_bottom_right),
		cmocka_unit_test(test_attention_ref__layouts_and_heads),
		cmocka_unit_test(test_attention_ref__backward_is_the_gradient),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
