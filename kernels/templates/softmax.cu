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
 * Tunables: BACKWARD (the op's variant) and KEEP_EXP below; DTYPE, ALIGNED, VEC, THREADS,
 * CACHE, MIN_WARPS (prelude.cuh); RING (rowring.cuh: x forward, y and dy
 * backward through shared memory, RING rows ahead; its shared memory is
 * dynamic, RING_BYTES a tensor); COLS, ROW_THREADS, CLUSTER, PREFETCH
 * (rowwise.cuh).
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * min(ceil(rows / ROWS_PER_BLOCK), SMs * BLOCKS_PER_SM / CLUSTER), 1, 1),
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
#ifndef KEEP_EXP
#define KEEP_EXP 0 /* f16, bf16 forward: 1 keeps exp(x - max) in fp32 (twice the registers); 0 takes it twice */
#endif

#include "prelude.cuh"
#include "rowwise.cuh"
#include "rowring.cuh"

static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");
static_assert(KEEP_EXP == 0 || KEEP_EXP == 1, "KEEP_EXP is 0 or 1");

#define LOG2E 1.4426950408889634f

/* With a ring, a whole share is stored without a bound a vector (rowring.cuh); without one, as before it. */
#if RING
#define STORE_ROW ring_store
#else
#define STORE_ROW row_store
#endif

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

	row_raw v, g;
#if RING
	vec *ring = ring_at(0);
	int slot = 0;
	for (int s = 0; s < RING; s++) {
		const i64 row = rows_first() + s * rows_step() + p.group;
		ring_issue(ring, 0, s, in, row, rows, cols, ld_in, p);
#if BACKWARD
		ring_issue(ring, 1, s, dy, row, rows, cols, ld_dy, p);
#endif
		ring_commit();
	}
#elif PREFETCH
	row_raw next_v, next_g;
	row_load_at(in, rows_first() + p.group, rows, cols, ld_in, p, next_v, BACKWARD ? 0.0f : op_max::identity());
#if BACKWARD
	row_load_at(dy, rows_first() + p.group, rows, cols, ld_dy, p, next_g, 0.0f);
#endif
#endif

	for (i64 r0 = rows_first(); r0 < rows; r0 += rows_step()) {
		const i64 row = r0 + p.group;
		const i64 n = row < rows ? cols : 0; /* past the last row: an empty row */
#if !BACKWARD
		/* load (or take the prefetched row), max, exp and sum, scale, store */
#if RING
		ring_wait();
		ring_take(ring, 0, slot, n, p, v, op_max::identity());
#elif PREFETCH
		row_copy(v, next_v);
		row_load_at(in, row + rows_step(), rows, cols, ld_in, p, next_v, op_max::identity());
#else
		row_load(in + row * ld_in, n, p, v, op_max::identity());
#endif
		float m = op_max::identity();
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				m = fmaxf(m, vec_get(v[i], j));
		m = row_reduce<op_max>(m, parity);
		row_keep_raw(v);
#if RING /* the slot is read (its maximum is taken): refill it RING rows on */
		ring_issue(ring, 0, slot, in, row + RING * rows_step(), rows, cols, ld_in, p);
		ring_commit();
		slot = slot + 1 == RING ? 0 : slot + 1;
#endif
		const float shift = m == op_max::identity() ? 0.0f : m * LOG2E; /* all -inf: zeros */
		float s = 0;
#if DTYPE == 2
		/* fp32: the exponentials replace the row */
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const float e = exp2_approx(vec_get(v[i], j) * LOG2E - shift);
				vec_set(v[i], j, e);
				s += e;
			}
#elif KEEP_EXP
		/* 16-bit, the exponentials kept in fp32 */
		row_f32 e;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				e[i][j] = exp2_approx(vec_get(v[i], j) * LOG2E - shift);
				s += e[i][j];
			}
#else
		/* 16-bit: the row stays as loaded (half the registers), the exponentials are taken twice */
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				s += exp2_approx(vec_get(v[i], j) * LOG2E - shift);
#endif
		s = row_reduce<op_sum>(s, parity);
		const float scale = s > 0 ? __fdividef(1.0f, s) : 0.0f;
		row_keep_raw(v);
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
#if DTYPE == 2
				vec_set(v[i], j, vec_get(v[i], j) * scale);
#elif KEEP_EXP
				vec_set(v[i], j, e[i][j] * scale);
#else
				vec_set(v[i], j, exp2_approx(vec_get(v[i], j) * LOG2E - shift) * scale);
#endif
		STORE_ROW(out + row * ld_out, n, p, v);
#else
		/* load y and dy (or take the prefetched rows), their dot product, store y (dy - dot) */
#if RING
		ring_wait();
		ring_take(ring, 0, slot, n, p, v, 0.0f);
		ring_take(ring, 1, slot, n, p, g, 0.0f);
#elif PREFETCH
		row_copy(v, next_v);
		row_copy(g, next_g);
		row_load_at(in, row + rows_step(), rows, cols, ld_in, p, next_v, 0.0f);
		row_load_at(dy, row + rows_step(), rows, cols, ld_dy, p, next_g, 0.0f);
#else
		row_load(in + row * ld_in, n, p, v, 0.0f);
		row_load(dy + row * ld_dy, n, p, g, 0.0f);
#endif
		float d = 0;
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				d += vec_get(v[i], j) * vec_get(g[i], j);
		d = row_reduce<op_sum>(d, parity);
		row_keep_raw(v);
		row_keep_raw(g);
#if RING /* the slots are read (their dot product is taken): refill them RING rows on */
		ring_issue(ring, 0, slot, in, row + RING * rows_step(), rows, cols, ld_in, p);
		ring_issue(ring, 1, slot, dy, row + RING * rows_step(), rows, cols, ld_dy, p);
		ring_commit();
		slot = slot + 1 == RING ? 0 : slot + 1;
#endif
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(v[i], j, vec_get(v[i], j) * (vec_get(g[i], j) - d));
		STORE_ROW(out + row * ld_out, n, p, v);
#endif
	}
	row_done();
}
