/*
 * gelu.cu - ktune's GELU activation and its gradient, elementwise:
 *
 *     BACKWARD=0:  out[i] = gelu(x[i])
 *     BACKWARD=1:  out[i] = dy[i] * gelu'(x[i])
 *
 *     APPROX=0:    gelu(x) = 0.5 x (1 + erf(x / sqrt 2))
 *     APPROX=1:    gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *
 * in fp32 (the erf form through Abramowitz and Stegun's erfc, |error| <
 * 1.5e-7; the tanh form as x sigmoid(2u); prelude.cuh), rounded to the
 * element type.  x, dy and out hold n elements of DTYPE (prelude.cuh);
 * dy is not read forward (it may be 0).  out may be x or dy (in place),
 * but must not overlap them otherwise.
 *
 * Entry point:
 *     gelu_kernel(const elem *x, const elem *dy, elem *out, long long n)
 *
 * Tunables: APPROX and BACKWARD (the op's variant) below; DTYPE, ALIGNED,
 * VEC, UNROLL, THREADS, CACHE (prelude.cuh).
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (min(ceil(n / (VEC_W * THREADS * UNROLL)), SMs * BLOCKS_PER_SM), 1, 1),
 *             no cap when BLOCKS_PER_SM = 0 (a launch parameter, not
 *             compiled in); any grid is correct
 *     VEC_W = VEC when ALIGNED, else 1
 *
 * Limits:
 *   - any n >= 0 (64-bit); the last, shorter vector goes element by element
 *   - ALIGNED=1 requires x, out and (backward) dy 16-byte aligned
 */

/* ---------------------------------------------------------------- tunables */

#ifndef APPROX
#define APPROX 0 /* 0: exact GELU (erf); 1: the tanh approximation */
#endif
#ifndef BACKWARD
#define BACKWARD 0 /* 0: out = gelu(x); 1: out = dy * gelu'(x) */
#endif

#include "prelude.cuh"

static_assert(APPROX == 0 || APPROX == 1, "APPROX is 0 or 1");
static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");

/* ----------------------------------------------------------------- compute */

static __device__ __forceinline__ float gelu_op(float x, float dy)
{
#if BACKWARD
	return dy * (APPROX ? gelu_tanh_grad(x) : gelu_erf_grad(x));
#else
	(void)dy;
	return APPROX ? gelu_tanh(x) : gelu_erf(x);
#endif
}

/* ------------------------------------------------------------------ kernel */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gelu_kernel(const elem *x, const elem *dy, elem *out, long long n)
{
	const i64 nvec = (n + VEC_W - 1) / VEC_W;

	for (i64 v0 = walk_first(); v0 < nvec; v0 += walk_step()) {
		vec xv[UNROLL], dyv[UNROLL];

		/* load: UNROLL independent vectors in flight */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 v = v0 + u * THREADS;
			if (vec_whole(v, n)) {
				xv[u] = load_vec(x + v * VEC_W);
				if (BACKWARD)
					dyv[u] = load_vec(dy + v * VEC_W);
			}
		}

		/* compute and store */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 v = v0 + u * THREADS;
			if (vec_whole(v, n)) {
				vec ov = {};
#pragma unroll
				for (int j = 0; j < VEC_W; j++)
					vec_set(ov, j, gelu_op(vec_get(xv[u], j),
							       BACKWARD ? vec_get(dyv[u], j) : 0.0f));
				store_vec(out + v * VEC_W, ov);
			} else if (v < nvec) {
				for (i64 i = v * VEC_W; i < n; i++)
					store_elem(out + i, gelu_op(load_elem(x + i),
								    BACKWARD ? load_elem(dy + i) : 0.0f));
			}
		}
	}
}
