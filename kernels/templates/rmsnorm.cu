/*
 * rmsnorm.cu - ktune's RMSNorm over the last dimension of [rows, cols],
 * with an optional residual add fused in, and its gradient:
 *
 *   forward (BACKWARD=0):
 *     h[r,c]   = x[r,c] + res[r,c] rounded to elem, written to h_out   (RESIDUAL=1)
 *     h[r,c]   = x[r,c]                                                 (RESIDUAL=0)
 *     rstd[r]  = 1 / sqrt(sum_c h[r,c]^2 / cols + eps)                  (fp32, saved)
 *     y[r,c]   = h[r,c] * rstd[r] * w[c]
 *
 *   backward (BACKWARD=1), from h (x, or the forward's h_out), w, rstd, dy:
 *     g[r,c]   = dy[r,c] * w[c]
 *     dx[r,c]  = rstd[r] * (g[r,c] - h[r,c] * rstd[r]^2 * sum_c' g[r,c'] h[r,c'] / cols)
 *     dw[c]    = sum_r dy[r,c] * h[r,c] * rstd[r]
 *   dw in two kernels, deterministic: rmsnorm_bwd_kernel writes one fp32
 *   partial row per cluster of its (capped) grid into `partials`, each
 *   summed over the rows that cluster walked; rmsnorm_dw_kernel sums the
 *   partials of each column in a fixed order.
 *
 * fp32 math, rounded to the element type.  Element (r, c) of a tensor t is
 * t[r * ld_t + c]; w, rstd and dw are contiguous.  y may be x (in place),
 * h_out may be res; dx may be dy.
 *
 * Entry points:
 *     rmsnorm_kernel(const elem *x, const elem *res, const elem *w, elem *y, float *rstd, elem *h_out,
 *                    long long rows, long long cols, long long ld_x, long long ld_res,
 *                    long long ld_y, long long ld_h, float eps)
 *     rmsnorm_bwd_kernel(const elem *h, const elem *w, const float *rstd, const elem *dy, elem *dx,
 *                        float *partials, long long rows, long long cols, long long ld_h,
 *                        long long ld_dy, long long ld_dx)
 *     rmsnorm_dw_kernel(const float *partials, long long nparts, elem *dw, long long cols)
 *
 * Tunables: RESIDUAL, BACKWARD (the op's variant) below; DTYPE, ALIGNED,
 * VEC, THREADS, CACHE, MIN_WARPS (prelude.cuh); COLS, ROW_THREADS, CLUSTER
 * (rowwise.cuh).
 *
 * Launch:
 *   rmsnorm_kernel, rmsnorm_bwd_kernel:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * P, 1, 1), P = min(ceil(rows / ROWS_PER_BLOCK), SMs * BLOCKS_PER_SM)
 *             (forward: no cap when BLOCKS_PER_SM = 0)
 *     rmsnorm_bwd_kernel: dynamic shared memory ROW_THREADS * ITEMS * VEC_W * 4
 *             bytes when ROWS_PER_BLOCK > 1 (the block's groups add up
 *             their partials there), else 0; partials holds P * cols floats
 *   rmsnorm_dw_kernel:
 *     block = (256, 1, 1), grid = (ceil(cols / 32), 1, 1)
 *
 * Limits: 1 <= cols <= COLS; ALIGNED=1 requires 16-byte aligned pointers
 * and row strides; sm_90 for CLUSTER > 1.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef RESIDUAL
#define RESIDUAL 0 /* 1: the forward adds res to x first, and writes the sum to h_out */
#endif
#ifndef BACKWARD
#define BACKWARD 0 /* 0: y and rstd from x; 1: dx and dw's partials from h, rstd and dy */
#endif

#include "prelude.cuh"
#include "rowwise.cuh"

static_assert(RESIDUAL == 0 || RESIDUAL == 1, "RESIDUAL is 0 or 1");
static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");

/* A variant compiles only the kernels it launches. */
#if !BACKWARD

/* ----------------------------------------------------------------- forward */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
rmsnorm_kernel(const elem *x, const elem *res, const elem *w, elem *y, float *rstd, elem *h_out,
	       long long rows, long long cols, long long ld_x, long long ld_res, long long ld_y,
	       long long ld_h, float eps)
{
	const row_place p = row_place_here();
	int parity = 0;

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0;
		row_regs h, g;
		row_load(x + row * ld_x, n, p, h, 0.0f);
#if RESIDUAL
		/* h = x + res, rounded as it is stored: what the backward pass reads */
		row_load(res + row * ld_res, n, p, g, 0.0f);
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				h[i][j] = to_float(from_float(h[i][j] + g[i][j]));
		row_store(h_out + row * ld_h, n, p, h);
#endif
		float s = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				s += h[i][j] * h[i][j];
		s = row_reduce<op_sum>(s, parity);
		const float r = rsqrtf(s / (float)cols + eps);
		if (n && p.lane == 0 && p.rank == 0)
			rstd[row] = r;
		row_load(w, n, p, g, 0.0f);
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				h[i][j] = h[i][j] * r * g[i][j];
		row_store(y + row * ld_y, n, p, h);
	}
	row_done();
}

#else

/* ----------------------------------------------------------------- backward */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
rmsnorm_bwd_kernel(const elem *hx, const elem *w, const float *rstd, const elem *dy, elem *dx,
		   float *partials, long long rows, long long cols, long long ld_h, long long ld_dy,
		   long long ld_dx)
{
	const row_place p = row_place_here();
	int parity = 0;
	row_regs acc; /* this thread's share of dw over the rows its group walks */
#pragma unroll
	for (int i = 0; i < ITEMS; i++)
#pragma unroll
		for (int j = 0; j < VEC_W; j++)
			acc[i][j] = 0;

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0;
		row_regs h, d, g;
		row_load(hx + row * ld_h, n, p, h, 0.0f);
		row_load(dy + row * ld_dy, n, p, d, 0.0f);
		row_load(w, n, p, g, 0.0f);
		const float r = n ? rstd[row] : 0.0f;
		float s = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				acc[i][j] += d[i][j] * h[i][j] * r;
				g[i][j] *= d[i][j];
				s += g[i][j] * h[i][j];
			}
		s = row_reduce<op_sum>(s, parity);
		const float k = r * r * s / (float)cols;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				g[i][j] = r * (g[i][j] - h[i][j] * k);
		row_store(dx + row * ld_dx, n, p, g);
	}

	/* the block's partial row of dw: its groups' shares added in group order */
	float *out = partials + (i64)(blockIdx.x / CLUSTER) * cols;
#if ROWS_PER_BLOCK > 1
	extern __shared__ float sum[]; /* ROW_THREADS * ITEMS * VEC_W */
	for (int gr = 0; gr < ROWS_PER_BLOCK; gr++) {
		if (p.group == gr)
#pragma unroll
			for (int i = 0; i < ITEMS; i++)
#pragma unroll
				for (int j = 0; j < VEC_W; j++) {
					float *s = &sum[(i * ROW_THREADS + p.lane) * VEC_W + j];
					*s = gr ? *s + acc[i][j] : acc[i][j];
				}
		__syncthreads();
	}
	if (p.group == 0)
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				acc[i][j] = sum[(i * ROW_THREADS + p.lane) * VEC_W + j];
#endif
	if (p.group == 0)
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
			const i64 c = item_col(p, i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				if (c + j < cols)
					out[c + j] = acc[i][j];
		}
	row_done();
}

/* dw[c]: the partials of column c summed in order, 8 slices of them by 32 columns a block. */
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_dw_kernel(const float *partials, long long nparts, elem *dw, long long cols)
{
	__shared__ float slice_sum[8][32];
	const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
	const i64 c = (i64)blockIdx.x * 32 + lane;
	float s = 0;
	if (c < cols)
		for (i64 q = slice; q < nparts; q += 8)
			s += partials[q * cols + c];
	slice_sum[slice][lane] = s;
	__syncthreads();
	if (slice == 0 && c < cols) {
		for (int k = 1; k < 8; k++)
			s += slice_sum[k][lane];
		dw[c] = from_float(s);
	}
}

#endif
