/*
 * add.cu - ktune's elementwise addition:
 *
 *     z[i] = x[i] + y[i],  0 <= i < n
 *
 * in fp32, rounded to the element type.  x, y and z hold n elements of
 * DTYPE (prelude.cuh).  z may be x or y (in place), but must not overlap
 * them otherwise.
 *
 * Entry point:
 *     add_kernel(const elem *x, const elem *y, elem *z, long long n)
 *
 * Tunables (prelude.cuh): DTYPE, ALIGNED, VEC, UNROLL, THREADS, MIN_WARPS, CACHE.
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (min(ceil(n / (VEC_W * THREADS * UNROLL)), SMs * BLOCKS_PER_SM), 1, 1),
 *             no cap when BLOCKS_PER_SM = 0 (a launch parameter of the
 *             search space, not compiled in); any grid is correct
 *     VEC_W = VEC when ALIGNED, else 1
 *
 * Limits:
 *   - any n >= 0 (64-bit); the last, shorter vector goes element by element
 *   - ALIGNED=1 requires x, y and z 16-byte aligned
 */
#include "prelude.cuh"

/* ----------------------------------------------------------------- compute */

static __device__ __forceinline__ float add_op(float x, float y)
{
	return x + y;
}

/* ------------------------------------------------------------------ kernel */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
add_kernel(const elem *x, const elem *y, elem *z, long long n)
{
	const i64 nvec = (n + VEC_W - 1) / VEC_W;

	for (i64 v0 = walk_first(); v0 < nvec; v0 += walk_step()) {
		vec xv[UNROLL], yv[UNROLL];

		/* load: UNROLL independent vectors in flight */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 v = v0 + u * THREADS;
			if (vec_whole(v, n)) {
				xv[u] = load_vec(x + v * VEC_W);
				yv[u] = load_vec(y + v * VEC_W);
			}
		}

		/* compute and store */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 v = v0 + u * THREADS;
			if (vec_whole(v, n)) {
				vec zv = {};
#pragma unroll
				for (int j = 0; j < VEC_W; j++)
					vec_set(zv, j, add_op(vec_get(xv[u], j), vec_get(yv[u], j)));
				store_vec(z + v * VEC_W, zv);
			} else if (v < nvec) {
				for (i64 i = v * VEC_W; i < n; i++)
					store_elem(z + i, add_op(load_elem(x + i), load_elem(y + i)));
			}
		}
	}
}
