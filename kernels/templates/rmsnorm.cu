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
 * VEC, THREADS, CACHE, MIN_WARPS (prelude.cuh); COLS, ROW_THREADS, CLUSTER,
 * PREFETCH (rowwise.cuh); RING (rowring.cuh: x and res forward, h and dy
 * backward, through shared memory, RING rows ahead).
 *
 * Launch:
 *   rmsnorm_kernel, rmsnorm_bwd_kernel:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * P, 1, 1), P = min(ceil(rows / ROWS_PER_BLOCK), SMs * BLOCKS_PER_SM)
 *             (forward: no cap when BLOCKS_PER_SM = 0)
 *     rmsnorm_bwd_kernel: dynamic shared memory ROW_THREADS * ITEMS * VEC_W * 4
 *             bytes when ROWS_PER_BLOCK > 1 (the block's groups add up
 *             their partials there), else 0; partials holds P * cols floats
 *     with RING > 0: dynamic shared memory RING_BYTES more a ringed tensor
 *             (x, and res with RESIDUAL, forward; h and dy backward), after
 *             the partials
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
#include "rowring.cuh"

static_assert(RESIDUAL == 0 || RESIDUAL == 1, "RESIDUAL is 0 or 1");
static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");

/*
 * With a ring, w is held in registers for the whole walk and a
 * thread's whole share is loaded and stored without a bound a vector
 * (rowring.cuh); without one, as before it.
 */
#if RING
#define W_VEC(i) wr[i]
#define STORE_ROW ring_store
#else
#define W_VEC(i) item_load(w, n, p, i, 0.0f)
#define STORE_ROW row_store
#endif

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

	row_raw h, a; /* x (then h), res */
#if RING
	vec *ring = ring_at(0);
	int slot = 0;
	row_raw wr;
	row_load(w, cols, p, wr, 0.0f);
	for (int s = 0; s < RING; s++) {
		ring_issue(ring, 0, s, x, rows_first() + s * rows_step() + p.group, rows, cols, ld_x, p);
#if RESIDUAL
		ring_issue(ring, 1, s, res, rows_first() + s * rows_step() + p.group, rows, cols, ld_res, p);
#endif
		ring_commit();
	}
#elif PREFETCH
	row_raw next_h, next_a;
	row_load_at(x, rows_first() + p.group, rows, cols, ld_x, p, next_h, 0.0f);
#if RESIDUAL
	row_load_at(res, rows_first() + p.group, rows, cols, ld_res, p, next_a, 0.0f);
#endif
#endif

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0;
#if RING
		ring_wait();
		ring_take(ring, 0, slot, n, p, h, 0.0f);
#if RESIDUAL
		ring_take(ring, 1, slot, n, p, a, 0.0f);
#endif
#elif PREFETCH
		row_copy(h, next_h);
		row_load_at(x, row + rows_step(), rows, cols, ld_x, p, next_h, 0.0f);
#if RESIDUAL
		row_copy(a, next_a);
		row_load_at(res, row + rows_step(), rows, cols, ld_res, p, next_a, 0.0f);
#endif
#else
		row_load(x + row * ld_x, n, p, h, 0.0f);
#if RESIDUAL
		row_load(res + row * ld_res, n, p, a, 0.0f);
#endif
#endif
#if RESIDUAL
		/* h = x + res, rounded as it is stored: what the backward pass reads */
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(h[i], j, vec_get(h[i], j) + vec_get(a[i], j));
		STORE_ROW(h_out + row * ld_h, n, p, h);
#endif
		float s = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				s += vec_get(h[i], j) * vec_get(h[i], j);
		s = row_reduce<op_sum>(s, parity);
		row_keep_raw(h);
		const float r = rsqrtf(s / (float)cols + eps);
#if RING /* the slot is read (its sum is taken): refill it RING rows on */
		ring_issue(ring, 0, slot, x, row + RING * rows_step(), rows, cols, ld_x, p);
#if RESIDUAL
		ring_issue(ring, 1, slot, res, row + RING * rows_step(), rows, cols, ld_res, p);
#endif
		ring_commit();
		slot = slot + 1 == RING ? 0 : slot + 1;
#endif
		if (n && p.lane == 0 && p.rank == 0)
			rstd[row] = r;
#pragma unroll
		for (int i = 0; i < ITEMS; i++) { /* w a vector at a time (L1-resident): no second row held */
			const vec wv = W_VEC(i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(h[i], j, vec_get(h[i], j) * r * vec_get(wv, j));
		}
		STORE_ROW(y + row * ld_y, n, p, h);
	}
	row_done();
}

#else

/* ----------------------------------------------------------------- backward */

/* Dynamic shared memory before the ring: the block's groups' partials of dw. */
#define PARTIAL_BYTES (ROWS_PER_BLOCK > 1 ? ROW_THREADS * ITEMS * VEC_W * 4 : 0)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
rmsnorm_bwd_kernel(const elem *hx, const elem *w, const float *rstd, const elem *dy, elem *dx,
		   float *partials, long long rows, long long cols, long long ld_h, long long ld_dy,
		   long long ld_dx)
{
	const row_place p = row_place_here();
	int parity = 0;
	row_f32 acc; /* this thread's share of dw over the rows its group walks */
#pragma unroll
	for (int i = 0; i < ITEMS; i++)
#pragma unroll
		for (int j = 0; j < VEC_W; j++)
			acc[i][j] = 0;

	row_raw h, d; /* h, dy */
#if RING
	vec *ring = ring_at(PARTIAL_BYTES);
	int slot = 0;
	row_raw wr;
	row_load(w, cols, p, wr, 0.0f);
	for (int s = 0; s < RING; s++) {
		const i64 row = rows_first() + s * rows_step() + p.group;
		ring_issue(ring, 0, s, hx, row, rows, cols, ld_h, p);
		ring_issue(ring, 1, s, dy, row, rows, cols, ld_dy, p);
		ring_issue_f32(ring_f32_slot(ring, 2, 0, s), rstd, row, rows);
		ring_commit();
	}
#elif PREFETCH
	row_raw next_h, next_d;
	row_load_at(hx, rows_first() + p.group, rows, cols, ld_h, p, next_h, 0.0f);
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
		row_load_at(hx, row + rows_step(), rows, cols, ld_h, p, next_h, 0.0f);
		row_load_at(dy, row + rows_step(), rows, cols, ld_dy, p, next_d, 0.0f);
#else
		row_load(hx + row * ld_h, n, p, h, 0.0f);
		row_load(dy + row * ld_dy, n, p, d, 0.0f);
#endif
#if RING
		const float r = n ? *ring_f32_slot(ring, 2, 0, slot) : 0.0f;
#else
		const float r = n ? rstd[row] : 0.0f;
#endif
		float s = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++) { /* w a vector at a time (L1-resident), here and below */
			const vec wv = W_VEC(i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const float hv = vec_get(h[i], j), dv = vec_get(d[i], j);
				acc[i][j] += dv * hv * r;
				s += dv * vec_get(wv, j) * hv;
			}
		}
		s = row_reduce<op_sum>(s, parity);
		row_keep_raw(h);
		row_keep_raw(d);
		const float k = r * r * s / (float)cols;
#if RING /* the slot is read (its sum is taken): refill it RING rows on */
		ring_issue(ring, 0, slot, hx, row + RING * rows_step(), rows, cols, ld_h, p);
		ring_issue(ring, 1, slot, dy, row + RING * rows_step(), rows, cols, ld_dy, p);
		ring_issue_f32(ring_f32_slot(ring, 2, 0, slot), rstd, row + RING * rows_step(), rows);
		ring_commit();
		slot = slot + 1 == RING ? 0 : slot + 1;
#endif
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
			const vec wv = W_VEC(i);
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(d[i], j, r * (vec_get(d[i], j) * vec_get(wv, j) - vec_get(h[i], j) * k));
		}
		STORE_ROW(dx + row * ld_dx, n, p, d);
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

/*
 * dw[c]: the partials of column c summed in a fixed order, 8 slices of them
 * by 32 columns a block; each thread keeps 8 sums (partials q, q + 8, ...
 * round robin) so that 8 of its loads are in flight, not one after another.
 */
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_dw_kernel(const float *partials, long long nparts, elem *dw, long long cols)
{
	__shared__ float slice_sum[8][32];
	const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
	const i64 c = (i64)blockIdx.x * 32 + lane;
	float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
	if (c < cols) {
		i64 q = slice;
		for (; q + 7 * 8 < nparts; q += 8 * 8)
#pragma unroll
			for (int k = 0; k < 8; k++)
				acc[k] += partials[(q + 8 * k) * cols + c];
#pragma unroll
		for (int k = 0; k < 7; k++) /* the last fewer than 8 x 8 */
			if (q + 8 * k < nparts)
				acc[k] += partials[(q + 8 * k) * cols + c];
	}
	float s = 0;
#pragma unroll
	for (int k = 0; k < 8; k++)
		s += acc[k];
	slice_sum[slice][lane] = s;
	__syncthreads();
	if (slice == 0 && c < cols) {
		for (int k = 1; k < 8; k++)
			s += slice_sum[k][lane];
		dw[c] = from_float(s);
	}
}

#endif
