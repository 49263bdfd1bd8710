/*
 * elementwise-ref.h - float64 CPU references of the elementwise family
 * (kernels/templates/{add,gelu,glu,dropout}.cu), for the tests: the same
 * definitions as the kernels, in double precision, and a Philox4x32-10
 * bit-identical to the kernels' (prelude.cuh).
 *
 * Every function takes arrays of n elements (n >= 0) and is thread-safe.
 */
#ifndef KTUNE_ELEMENTWISE_REF_H
#define KTUNE_ELEMENTWISE_REF_H

#include <stdint.h>

/* z[i] = x[i] + y[i].  z may be x or y. */
void ktune__ref_add(const double *x, const double *y, double *z, long n);

/*
 * backward 0: out[i] = gelu(x[i]); 1: out[i] = dy[i] * gelu'(x[i]) (dy is
 * not read forward and may be NULL).  approx 0: gelu(x) = x Phi(x), with
 * erf; 1: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 */
void ktune__ref_gelu(const double *x, const double *dy, double *out, long n, int approx,
		     int backward);

/*
 * Elementwise over n (a, b) pairs; act 0: silu (SwiGLU), 1: erf GELU,
 * 2: tanh GELU (GeGLU).  backward 0: out_a = act(a) * b (dout and out_b
 * are not used and may be NULL); 1: out_a = dout * b * act'(a),
 * out_b = dout * act(a).
 */
void ktune__ref_glu(const double *a, const double *b, const double *dout, double *out_a,
		    double *out_b, long n, int act, int backward);

/*
 * Philox4x32-10 (Random123's philox4x32_R(10, ctr, key)): out = the four
 * words for the 128-bit counter ctr (ctr[0] least significant) and the
 * 64-bit key (key[0] low).  out may be ctr.
 */
void ktune__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/*
 * Whether dropout keeps element i: word i % 4 of Philox4x32-10 with
 * counter offset + i / 4 (mod 2^64, high 64 bits 0) and key seed, times
 * 2^-32, is >= p.  Pass the p the kernel gets ((double)(float)p) for
 * the same mask.
 */
int ktune__ref_dropout_keep(uint64_t seed, uint64_t offset, int64_t i, double p);

/* y[i] = keep(i) ? x[i] / (1 - p) : 0, for 0 <= p < 1.  y may be x. */
void ktune__ref_dropout(const double *x, double *y, long n, double p, uint64_t seed,
			uint64_t offset);

#endif
