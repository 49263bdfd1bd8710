/*
 * layernorm.cu - ktune's LayerNorm over the last dimension of [rows, cols],
 * with a weight and a bias, and its gradient:
 *
 *   forward (BACKWARD=0):
 *     mean[r]  = sum_c x[r,c] / cols                                    (fp32, saved)
 *     rstd[r]  = 1 / sqrt(sum_c (x[r,c] - mean[r])^2 / cols + eps)       (fp32, saved)
 *     y[r,c]   = (x[r,c] - mean[r]) * rstd[r] * w[c] + b[c]
 *   two passes over the row held in registers (the sum, then the sum of
 *   squared deviations): no E[x^2] - mean^2 cancellation.  A row of one
 *   value has variance 0: rstd = 1 / sqrt(eps) and y = b.
 *
 *   backward (BACKWARD=1), from x, w, the forward's mean and rstd, and dy:
 *     xhat[r,c] = (x[r,c] - mean[r]) * rstd[r],  g[r,c] = dy[r,c] * w[c]
 *     dx[r,c]  = rstd[r] * (g[r,c] - sum_c' g[r,c'] / cols - xhat[r,c] * sum_c' g[r,c'] xhat[r,c'] / cols)
 *     dw[c]    = sum_r dy[r,c] * xhat[r,c]
 *     db[c]    = sum_r dy[r,c]
 *   dw and db in two kernels, deterministic: layernorm_bwd_kernel writes one
 *   fp32 partial row of dw and one of db per cluster of its (capped) grid
 *   into `partials` (row q: dw's cols floats, then db's), each summed over
 *   the rows that cluster walked; layernorm_dwb_kernel sums the partials of
 *   each of the 2 * cols columns in a fixed order.
 *
 * fp32 math, rounded to the element type.  Element (r, c) of a tensor t is
 * t[r * ld_t + c]; w, b, mean, rstd, dw and db are contiguous.  y may be x
 * (in place); dx may be dy.  Weight and bias are required.
 *
 * Entry points:
 *     layernorm_kernel(const elem *x, const elem *w, const elem *b, elem *y, float *mean, float *rstd,
 *                      long long rows, long long cols, long long ld_x, long long ld_y, float eps)
 *     layernorm_bwd_kernel(const elem *x, const elem *w, const float *mean, const float *rstd,
 *                          const elem *dy, elem *dx, float *partials, long long rows, long long cols,
 *                          long long ld_x, long long ld_dy, long long ld_dx)
 *     layernorm_dwb_kernel(const float *partials, long long nparts, elem *dw, elem *db, long long cols)
 *
 * Tunables: BACKWARD (the op's variant) below; DTYPE, ALIGNED, VEC,
 * THREADS, CACHE, MIN_WARPS (prelude.cuh); COLS, ROW_THREADS, CLUSTER,
 * PREFETCH (rowwise.cuh); RING (rowring.cuh: x, and dy backward, through
 * shared memory, RING rows ahead).
 *
 * Launch:
 *   layernorm_kernel, layernorm_bwd_kernel:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * P, 1, 1), P = min(ceil(rows / ROWS_PER_BLOCK), SMs * BLOCKS_PER_SM)
 *             (forward: no cap when BLOCKS_PER_SM = 0)
 *     layernorm_bwd_kernel: dynamic shared memory 2 * ROW_THREADS * ITEMS * VEC_W * 4
 *             bytes when ROWS_PER_BLOCK > 1 (the block's groups add up
 *             their partials there), else 0; partials holds P * 2 * cols floats
 *     with RING > 0: dynamic shared memory RING_BYTES more a ringed tensor
 *             (forward x, backward x and dy), after the partials
 *   layernorm_dwb_kernel:
 *     block = (256, 1, 1), grid = (ceil(2 * cols / 32), 1, 1)
 *
 * Limits: 1 <= cols <= COLS; ALIGNED=1 requires 16-byte aligned pointers
 * and row strides; sm_90 for CLUSTER > 1.
 *
 * The block's sum of its groups' partial rows and the fixed-order column sum
 * (layernorm_dwb_kernel) mirror rmsnorm.cu's (rmsnorm_bwd_kernel's tail and
 * rmsnorm_dw_kernel), for two partial rows.  They are copied, not shared,
 * because rowwise.cuh and rmsnorm.cu are hashed into the shipped H100
 * tuning: they should move into rowwise.cuh when the row-wise tuning is
 * next re-swept.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BACKWARD
#define BACKWARD 0 /* 0: y, mean and rstd from x; 1: dx and the partials of dw and db from x, mean, rstd and dy */
#endif

#include "prelude.cuh"
#include "rowwise.cuh"
#include "rowring.cuh"

static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");

/*
 * With a ring, w (and b) are held in registers for the whole walk and a
 * thread's whole share is loaded and stored without a bound a vector
 * (rowring.cuh); without one, as before it.
 */
#if RING
#define W_VEC(i) wr[i]
#define B_VEC(i) br[i]
#define STORE_ROW ring_store
#else
#define W_VEC(i) item_load(w, n, p, i, 0.0f)
#define B_VEC(i) item_load(b, n, p, i, 0.0f)
#define STORE_ROW row_store
#endif

/* Whether element j of a thread's vector i is within a row of n columns (n = 0: an empty row). */
static __device__ __forceinline__ bool in_row(const row_place &p, int i, int j, i64 n)
{
	return item_col(p, i) + j < n;
}

/* A variant compiles only the kernels it launches. */
#if !BACKWARD

/* ----------------------------------------------------------------- forward */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
layernorm_kernel(const elem *x, const elem *w, const elem *b, elem *y, float *mean, float *rstd,
		 long long rows, long long cols, long long ld_x, long long ld_y, float eps)
{
	const row_place p = row_place_here();
	int parity = 0;

	row_raw h; /* x */
#if RING
	vec *ring = ring_at(0);
	int slot = 0;
	row_raw wr, br;
	row_load(w, cols, p, wr, 0.0f);
	row_load(b, cols, p, br, 0.0f);
	for (int s = 0; s < RING; s++) {
		ring_issue(ring, 0, s, x, rows_first() + s * rows_step() + p.group, rows, cols, ld_x, p);
		ring_commit();
	}
#elif PREFETCH
	row_raw next_h;
	row_load_at(x, rows_first() + p.group, rows, cols, ld_x, p, next_h, 0.0f);
#endif

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0;
#if RING
		ring_wait();
		ring_take(ring, 0, slot, n, p, h, 0.0f);
#elif PREFETCH
		row_copy(h, next_h);
		row_load_at(x, row + rows_step(), rows, cols, ld_x, p, next_h, 0.0f);
#else
		row_load(x + row * ld_x, n, p, h, 0.0f);
#endif
		/* the mean: elements past the row read as 0 */
		float s = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				s += vec_get(h[i], j);
		s = row_reduce<op_sum>(s, parity);
		row_keep_raw(h);
		const float m = s / (float)cols;
#if RING /* the slot is read (its sum is taken): refill it RING rows on */
		ring_issue(ring, 0, slot, x, row + RING * rows_step(), rows, cols, ld_x, p);
		ring_commit();
		slot = slot + 1 == RING ? 0 : slot + 1;
#endif

		/* the variance: squared deviations of the row's own elements only */
		float v = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const float d = vec_get(h[i], j) - m;
				v += in_row(p, i, j, n) ? d * d : 0.0f;
			}
		v = row_reduce<op_sum>(v, parity);
		row_keep_raw(h);
		const float r = rsqrtf(v / (float)cols + eps);
		if (n && p.lane == 0 && p.rank == 0) {
			mean[row] = m;
			rstd[row] = r;
		}

		/* y: w and b a vector at a time (L1-resident), no second row held */
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
			const vec wv = W_VEC(i), bv = B_VEC(i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(h[i], j, (vec_get(h[i], j) - m) * r * vec_get(wv, j) + vec_get(bv, j));
		}
		STORE_ROW(y + row * ld_y, n, p, h);
	}
	row_done();
}

#else

/* ----------------------------------------------------------------- backward */

/* Dynamic shared memory before the ring: the block's groups' partials of dw and db. */
#define PARTIAL_BYTES (ROWS_PER_BLOCK > 1 ? 2 * ROW_THREADS * ITEMS * VEC_W * 4 : 0)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
layernorm_bwd_kernel(const elem *x, const elem *w, const float *mean, const float *rstd, const elem *dy,
		     elem *dx, float *partials, long long rows, long long cols, long long ld_x, long long ld_dy,
		     long long ld_dx)
{
	const row_place p = row_place_here();
	int parity = 0;
	row_f32 acc_w, acc_b; /* this thread's share of dw and db over the rows its group walks */
#pragma unroll
	for (int i = 0; i < ITEMS; i++)
#pragma unroll
		for (int j = 0; j < VEC_W; j++)
			acc_w[i][j] = acc_b[i][j] = 0;

	row_raw h, d; /* x, dy */
#if RING
	vec *ring = ring_at(PARTIAL_BYTES);
	int slot = 0;
	row_raw wr;
	row_load(w, cols, p, wr, 0.0f);
	for (int s = 0; s < RING; s++) {
		const i64 row = rows_first() + s * rows_step() + p.group;
		ring_issue(ring, 0, s, x, row, rows, cols, ld_x, p);
		ring_issue(ring, 1, s, dy, row, rows, cols, ld_dy, p);
		ring_issue_f32(ring_f32_slot(ring, 2, 0, s), mean, row, rows);
		ring_issue_f32(ring_f32_slot(ring, 2, 1, s), rstd, row, rows);
		ring_commit();
	}
#elif PREFETCH
	row_raw next_h, next_d;
	row_load_at(x, rows_first() + p.group, rows, cols, ld_x, p, next_h, 0.0f);
	row_load_at(dy, rows_first() + p.group, rows, cols, ld_dy, p, next_d, 0.0f);
#endif

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0;
#if RING
		ring_wait();
		ring_take(ring, 0, slot, n, p, h, 0.0f);
		ring_take(ring, 1, slot, n, p, d, 0.0f);
#elif PREFETCH
		row_copy(h, next_h);
		row_copy(d, next_d);
		row_load_at(x, row + rows_step(), rows, cols, ld_x, p, next_h, 0.0f);
		row_load_at(dy, row + rows_step(), rows, cols, ld_dy, p, next_d, 0.0f);
#else
		row_load(x + row * ld_x, n, p, h, 0.0f);
		row_load(dy + row * ld_dy, n, p, d, 0.0f);
#endif
#if RING
		const float m = n ? *ring_f32_slot(ring, 2, 0, slot) : 0.0f, r = n ? *ring_f32_slot(ring, 2, 1, slot) : 0.0f;
#else
		const float m = n ? mean[row] : 0.0f, r = n ? rstd[row] : 0.0f;
#endif

		/* sum g and sum g xhat (dy reads as 0 past the row: no mask needed) */
		float sg = 0, sgx = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++) { /* w a vector at a time (L1-resident), here and below */
			const vec wv = W_VEC(i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const float xh = (vec_get(h[i], j) - m) * r, dv = vec_get(d[i], j);
				const float g = dv * vec_get(wv, j);
				acc_w[i][j] += dv * xh;
				acc_b[i][j] += dv;
				sg += g;
				sgx += g * xh;
			}
		}
		/* two reductions (rowwise.cuh reduces one float at a time) */
		sg = row_reduce<op_sum>(sg, parity);
		sgx = row_reduce<op_sum>(sgx, parity);
		row_keep_raw(h);
		row_keep_raw(d);
#if RING /* the slot is read (its sums are taken): refill it RING rows on */
		ring_issue(ring, 0, slot, x, row + RING * rows_step(), rows, cols, ld_x, p);
		ring_issue(ring, 1, slot, dy, row + RING * rows_step(), rows, cols, ld_dy, p);
		ring_issue_f32(ring_f32_slot(ring, 2, 0, slot), mean, row + RING * rows_step(), rows);
		ring_issue_f32(ring_f32_slot(ring, 2, 1, slot), rstd, row + RING * rows_step(), rows);
		ring_commit();
		slot = slot + 1 == RING ? 0 : slot + 1;
#endif
		const float a = sg / (float)cols, k = sgx / (float)cols;

		/* dx */
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
			const vec wv = W_VEC(i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const float xh = (vec_get(h[i], j) - m) * r;
				vec_set(d[i], j, r * (vec_get(d[i], j) * vec_get(wv, j) - a - xh * k));
			}
		}
		STORE_ROW(dx + row * ld_dx, n, p, d);
	}

	/*
	 * The block's partial rows of dw and db: its groups' shares added in
	 * group order (as rmsnorm_bwd_kernel's, for two rows).
	 */
	float *out = partials + (i64)(blockIdx.x / CLUSTER) * 2 * cols;
#if ROWS_PER_BLOCK > 1
	extern __shared__ float sum[]; /* 2 x ROW_THREADS * ITEMS * VEC_W: dw's, then db's */
	float *sum_b = sum + ROW_THREADS * ITEMS * VEC_W;
	for (int gr = 0; gr < ROWS_PER_BLOCK; gr++) {
		if (p.group == gr)
#pragma unroll
			for (int i = 0; i < ITEMS; i++)
#pragma unroll
				for (int j = 0; j < VEC_W; j++) {
					const int at = (i * ROW_THREADS + p.lane) * VEC_W + j;
					sum[at] = gr ? sum[at] + acc_w[i][j] : acc_w[i][j];
					sum_b[at] = gr ? sum_b[at] + acc_b[i][j] : acc_b[i][j];
				}
		__syncthreads();
	}
	if (p.group == 0)
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const int at = (i * ROW_THREADS + p.lane) * VEC_W + j;
				acc_w[i][j] = sum[at];
				acc_b[i][j] = sum_b[at];
			}
#endif
	if (p.group == 0)
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
			const i64 c = item_col(p, i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				if (c + j < cols) {
					out[c + j] = acc_w[i][j];
					out[cols + c + j] = acc_b[i][j];
				}
		}
	row_done();
}

/*
 * dw[c] and db[c]: the partials of column c of the 2 * cols (dw's, then
 * db's) summed in a fixed order, 8 slices of them by 32 columns a block;
 * each thread keeps 8 sums (partials q, q + 8, ... round robin) so that 8 of
 * its loads are in flight, not one after another.  rmsnorm_dw_kernel's sum.
 */
extern "C" __global__ void __launch_bounds__(256)
layernorm_dwb_kernel(const float *partials, long long nparts, elem *dw, elem *db, long long cols)
{
	__shared__ float slice_sum[8][32];
	const i64 width = 2 * cols;
	const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
	const i64 c = (i64)blockIdx.x * 32 + lane;
	float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
	if (c < width) {
		i64 q = slice;
		for (; q + 7 * 8 < nparts; q += 8 * 8)
#pragma unroll
			for (int k = 0; k < 8; k++)
				acc[k] += partials[(q + 8 * k) * width + c];
#pragma unroll
		for (int k = 0; k < 7; k++) /* the last fewer than 8 x 8 */
			if (q + 8 * k < nparts)
				acc[k] += partials[(q + 8 * k) * width + c];
	}
	float s = 0;
#pragma unroll
	for (int k = 0; k < 8; k++)
		s += acc[k];
	slice_sum[slice][lane] = s;
	__syncthreads();
	if (slice == 0 && c < width) {
		for (int k = 1; k < 8; k++)
			s += slice_sum[k][lane];
		if (c < cols)
			dw[c] = from_float(s);
		else
			db[c - cols] = from_float(s);
	}
}

#endif
