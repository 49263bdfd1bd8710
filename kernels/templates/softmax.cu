/*
 * softmax.cu - ktune's softmax over the last dimension of [rows, cols], and
 * its gradient:
 *
 *     BACKWARD=0:  y[r,c]  = exp(x[r,c] - max_r x) / sum_c' exp(x[r,c'] - max_r x)
 *     BACKWARD=1:  dx[r,c] = y[r,c] * (dy[r,c] - sum_c' y[r,c'] dy[r,c'])
 *
 * in fp32, rounded to the element type.  Element (r, c) of a tensor t is
 * t[r * ld_t + c].  A row whose elements are all -inf gives zeros (not the
 * NaN of 0/0).  An output may be its row's input (y = x, dx = dy), not
 * overlap it otherwise.
 *
 * Entry point:
 *     softmax_kernel(const elem *in, const elem *dy, elem *out, long long rows, long long cols,
 *                    long long ld_in, long long ld_dy, long long ld_out)
 * forward: in = x, out = y, dy unused; backward: in = y, out = dx.
 *
 * Tunables: BACKWARD (the op's variant) below; DTYPE, ALIGNED, VEC, THREADS,
 * CACHE, MIN_WARPS (prelude.cuh); COLS, ROW_THREADS, CLUSTER (rowwise.cuh).
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * min(ceil(rows / ROWS_PER_BLOCK), SMs * BLOCKS_PER_SM), 1, 1),
 *             no cap when BLOCKS_PER_SM = 0 (a launch parameter); any
 *             multiple of CLUSTER is correct (the blocks walk the rows)
 *
 * Limits: 1 <= cols <= COLS; ALIGNED=1 requires 16-byte aligned pointers
 * and row strides; sm_90 for CLUSTER > 1.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BACKWARD
#define BACKWARD 0 /* 0: y = softmax(x); 1: dx from y and dy */
#endif

#include "prelude.cuh"
#include "rowwise.cuh"

static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");

#define LOG2E 1.4426950408889634f

static __device__ __forceinline__ float exp2_approx(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
softmax_kernel(const elem *in, const elem *dy, elem *out, long long rows, long long cols,
	       long long ld_in, long long ld_dy, long long ld_out)
{
	const row_place p = row_place_here();
	int parity = 0;

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0; /* past the last row: an empty row */
		row_regs v;
#if !BACKWARD
		/* load, max, exp and sum, scale, store */
		row_load(in + row * ld_in, n, p, v, op_max::identity());
		float m = op_max::identity();
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				m = fmaxf(m, v[i][j]);
		m = row_reduce<op_max>(m, parity);
		const float shift = m == op_max::identity() ? 0.0f : m * LOG2E; /* all -inf: zeros */
		float s = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				v[i][j] = exp2_approx(v[i][j] * LOG2E - shift);
				s += v[i][j];
			}
		s = row_reduce<op_sum>(s, parity);
		const float scale = s > 0 ? __fdividef(1.0f, s) : 0.0f;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				v[i][j] *= scale;
		row_store(out + row * ld_out, n, p, v);
#else
		/* load y and dy, their dot product, store y (dy - dot) */
		row_regs g;
		row_load(in + row * ld_in, n, p, v, 0.0f);
		row_load(dy + row * ld_dy, n, p, g, 0.0f);
		float d = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				d += v[i][j] * g[i][j];
		d = row_reduce<op_sum>(d, parity);
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				v[i][j] *= g[i][j] - d;
		row_store(out + row * ld_out, n, p, v);
#endif
	}
	row_done();
}
