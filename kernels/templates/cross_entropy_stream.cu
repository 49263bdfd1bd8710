/*
 * cross_entropy_stream.cu - ktune's cross-entropy loss and its gradient
 * (cross_entropy.cu's op: the same math, arguments, passes and numerics)
 * with each row streamed rather than held: a row belongs to one block, or
 * to the CLUSTER blocks of a cluster, each taking a contiguous chunk of it,
 * and a thread walks its vectors of the chunk UNROLL at a time keeping a
 * running max and the sum of exponentials under it (the online softmax).
 * Registers do not grow with the row, so any vocabulary runs at full
 * occupancy with UNROLL loads in flight a thread, and the reduction's
 * barriers cost once a row instead of stalling a block that holds it.
 *
 * The fused pass reads the chunk a second time for the gradient: from
 * shared memory where the first read left it (RELOAD=1, when the call's
 * chunk fits the launch's dynamic shared memory, keep_bytes), else from
 * global memory, where L2 mostly still holds it.  RELOAD=2 makes the first
 * read a copy into that shared memory too (cp.async, AHEAD groups of
 * UNROLL vectors a thread in flight, no registers held for them), which the
 * running sums then read.
 *
 * A thread's running sums: m, the max of z so far; s = sum exp(z - m);
 * with SMOOTHING, zs = sum (z - m) and n, the elements taken (zs moves
 * by n (m_old - m_new) when m rises, so that it never holds the large
 * sum of z at logits of 1e4).  Threads combine them by the same rule, in
 * a fixed order: every output is bit-identical run to run.
 *
 * The chunk's vectors are aligned: a row of the unaligned class starts
 * with `head` elements (0 to VEC - 1) before its first aligned vector and
 * ends with a tail of fewer than VEC; those, at most 2 (VEC - 1), are
 * taken one each by the first threads of rank 0.  A gradient row of
 * another misalignment than its logits' is stored element by element.
 *
 * Entry points (cross_entropy.cu's, the row kernel with one argument more):
 *     ce_stream_kernel(const elem *x, const long long *targets, float *lse, const float *dloss,
 *                      float *loss_rows, elem *dx, const long long *count, long long rows,
 *                      long long cols, long long ld_x, long long ld_dx, long long ignore_index,
 *                      float smoothing, float cap, float inv_cap, float grad_scale,
 *                      long long keep_bytes)
 *     ce_count_kernel, ce_reduce_kernel (cross_entropy.cuh)
 * The running sums, their reduction, the copies ahead (RELOAD=2) and the
 * row's chunks and ends are rowstream.cuh's, shared with softmax_stream.cu.
 *
 * Tunables: UNROLL (vectors a thread loads at once), THREADS, MIN_WARPS
 * (prelude.cuh); CLUSTER (blocks a row); RELOAD (below).  VEC is 16 bytes'
 * worth of elements, always.
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * clusters, 1, 1), any clusters >= 1 (they walk the rows)
 *     dynamic shared memory keep_bytes (RELOAD: the chunk's vectors; 0 otherwise)
 *
 * Limits: 1 <= cols < 2^31; x, dx and their row strides element-aligned
 * (ALIGNED=1: 16-byte aligned); dx is x or does not overlap it; cap > 0
 * with SOFTCAP; sm_90 for CLUSTER > 1.
 */

#ifndef RELOAD
#define RELOAD 0 /* fused: 1 reads the chunk again from shared memory, 2 also copies it there first (cp.async), 0 reads global memory twice */
#endif

/*
 * Every row is streamed in aligned vectors, its unaligned ends one element
 * at a time: prelude.cuh's vectors (its ALIGNED=1) whatever the class,
 * which ROW_ALIGNED keeps.
 */
#if defined(ALIGNED) && !ALIGNED
#define ROW_ALIGNED 0
#undef ALIGNED
#define ALIGNED 1
#else
#define ROW_ALIGNED 1
#endif
#ifndef VEC
#if defined(DTYPE) && DTYPE == 2
#define VEC 4
#else
#define VEC 8
#endif
#endif

/* rowwise.cuh's place and walk, one row a block (a cluster): its groups are whole blocks */
#define ROW_THREADS THREADS
#define COLS 1

#include "prelude.cuh"
#include "rowwise.cuh"
#include "cross_entropy.cuh"
#include "rowstream.cuh"

static_assert(RELOAD == 0 || ((RELOAD == 1 || RELOAD == 2) && PASS == 2), "RELOAD is for the fused pass");

/* ------------------------------------------------------------ the running sums (rowstream.cuh's) of z */

/* z from a logit, as the variant caps it. */
static __device__ __forceinline__ float ce_z(float x, float cap, float inv_cap)
{
#if SOFTCAP
	return softcap(x, cap, inv_cap);
#else
	(void)cap, (void)inv_cap;
	return x;
#endif
}

/*
 * Vectors v, v + THREADS, ... (those under v1) of a thread's walk into its
 * running sums: the max of their x first (tanh is increasing: z's after),
 * then each exponential under it.
 */
static __device__ __forceinline__ void part_take(part_t &p, const vec (&b)[UNROLL], int v, int v1, float cap,
						 float inv_cap)
{
	float mx = -__int_as_float(0x7f800000);
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		if (v + u * THREADS < v1)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				mx = fmaxf(mx, vec_get(b[u], j));
	part_lift(p, ce_z(mx, cap, inv_cap));
	const float ml = p[0] * LOG2E;
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		if (v + u * THREADS < v1)
#pragma unroll
			for (int j = 0; j < VEC_W; j++) {
				const float z = ce_z(vec_get(b[u], j), cap, inv_cap);
				p[1] += exp2_approx(fmaf(z, LOG2E, -ml));
#if SMOOTHING
				p[2] += z - p[0];
				p[3] += 1.0f;
#endif
			}
}

/* ------------------------------------------------------------ a row's pieces */

/* Whether this thread takes column col (>= 0) of the row: as an edge element or in one of its vectors. */
static __device__ __forceinline__ bool takes_col(const row_cut &c, int rank, int col)
{
	if (col < c.head || col >= c.head + c.nb * VEC_W) {
		const int e = col < c.head ? col : c.head + (col - c.head - c.nb * VEC_W);
		return rank == 0 && e == (int)threadIdx.x;
	}
	const int q = (col - c.head) / VEC_W;
	return q / c.chunk == rank && (q - rank * c.chunk) % THREADS == (int)threadIdx.x;
}

#if PASS != 0
/* A vector of a row's gradient: whole where dx is aligned as x is, else element by element. */
static __device__ __forceinline__ void store_grad(elem *at, const vec &d, bool whole)
{
	if (whole) {
		store_vec(at, d);
	} else {
#pragma unroll
		for (int j = 0; j < VEC_W; j++)
			store_elem(at + j, vec_get(d, j));
	}
}
#endif

/* ------------------------------------------------------------ the rows */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
ce_stream_kernel(const elem *x, const long long *targets, float *lse, const float *dloss, float *loss_rows,
		 elem *dx, const long long *count, long long rows, long long cols, long long ld_x, long long ld_dx,
		 long long ignore_index, float smoothing, float cap, float inv_cap, float grad_scale,
		 long long keep_bytes)
{
	const int rank = row_place_here().rank, n = (int)cols;
#if PASS != 1
	int parity = 0;
#endif
#if RELOAD
	extern __shared__ uint4 keep[]; /* this block's chunk of the row, vector q at q - v0 */
#else
	uint4 *const keep = nullptr; /* nothing kept */
#endif
	(void)cap, (void)inv_cap, (void)smoothing, (void)grad_scale, (void)count, (void)dloss, (void)keep_bytes;
	(void)lse, (void)loss_rows, (void)dx, (void)ld_dx;

#if SMOOTHING
	const float eps_v = __fdividef(smoothing, (float)cols), hit = 1.0f - smoothing;
#endif
#if CE_ONE_SCALE
	const float g0 = ce_grad_scale(dloss, count, grad_scale);
#endif

	for (i64 row = rows_first(); row < rows; row += rows_step()) {
		const i64 t = targets[row];
		const elem *xr = x + row * ld_x;
		const row_cut c = row_cut_of(xr, n, rank);
		const int ecol = edge_col(c, rank, threadIdx.x);

		if (t == ignore_index) { /* nothing read; the loss 0, the gradient 0 (uniform over the cluster) */
#if PASS != 1
			if (rank == 0 && threadIdx.x == 0) {
				loss_rows[row] = 0.0f;
#if PASS == 0
				lse[row] = 0.0f;
#endif
			}
#endif
#if PASS != 0
			elem *dr = dx + row * ld_dx;
			const bool whole = ROW_ALIGNED || ((u64)dr - (u64)xr) % VEC_BYTES == 0;
			vec zero;
#pragma unroll
			for (int k = 0; k < VEC_WORDS; k++)
				zero.w[k] = 0;
			for (int q = c.v0 + threadIdx.x; q < c.v1; q += THREADS)
				store_grad(dr + c.head + q * VEC_W, zero, whole);
			if (ecol >= 0)
				store_elem(dr + ecol, 0.0f);
#endif
			continue;
		}
		const bool bad = t < 0 || t >= cols;
		const int tcol = bad ? -1 : (int)t;
		/* z at the target, read before any gradient of the row is stored (in place: by another block) */
		const bool own = tcol >= 0 && takes_col(c, rank, tcol);
		const bool writer = PASS != 1 && rank == 0 && threadIdx.x == 0; /* of the loss */
		const float zt = (own || writer) && tcol >= 0 ? ce_z(load_elem(xr + tcol), cap, inv_cap) : 0.0f;

#if PASS != 1
		/* ---- the running sums over the thread's elements */
		part_t p;
		part_empty(p);
		if (ecol >= 0) {
			p[0] = ce_z(load_elem(xr + ecol), cap, inv_cap);
			p[1] = 1.0f;
#if SMOOTHING
			p[3] = 1.0f;
#endif
		}
		chunk_first_read(c, xr + c.head, keep, (i64)c.chunk * VEC_BYTES <= keep_bytes,
				 [&](const vec (&b)[UNROLL], int v) { part_take(p, b, v, c.v1, cap, inv_cap); });
		part_reduce(p, parity);

		/* ---- the row's loss (and lse): log sum exp(z - m) - (z_t - m) */
		const float ls = logf(p[1]);
		if (writer) {
#if SMOOTHING
			float loss = ls - hit * (zt - p[0]) - eps_v * p[2];
#else
			float loss = ls - (zt - p[0]);
#endif
			loss_rows[row] = bad ? __int_as_float(0x7fc00000) : loss;
#if PASS == 0
			lse[row] = p[0] + ls;
#endif
		}
#endif /* PASS != 1 */

#if PASS != 0
		/* ---- the gradient, g (p - eps / V) (1 - (z / cap)^2), the target's element again after */
#if PASS == 1
		const float base = lse[row]; /* p = exp(z - lse) */
#if REDUCTION == 2
		const float g = dloss[row];
#else
		const float g = g0;
#endif
		const float a = g;
#else
		const float base = p[0]; /* p = exp(z - m) / s */
		const float g = g0, a = __fdividef(g, p[1]);
#endif
		const float bl = base * LOG2E;
#if SMOOTHING
		const float off = g * eps_v, gt = g * hit;
#else
		const float off = 0.0f, gt = g;
#endif
		elem *dr = dx + row * ld_dx;
		const bool whole = ROW_ALIGNED || ((u64)dr - (u64)xr) % VEC_BYTES == 0;
		const bool kept = RELOAD && (i64)c.chunk * VEC_BYTES <= keep_bytes;
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL];
			chunk_reread(b, c, v, xr + c.head, keep, kept);
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
#pragma unroll
					for (int j = 0; j < VEC_W; j++) {
						const float z = ce_z(vec_get(b[u], j), cap, inv_cap);
						float d = a * exp2_approx(fmaf(z, LOG2E, -bl)) - off;
#if SOFTCAP
						const float w = z * inv_cap;
						d *= 1.0f - w * w;
#endif
						vec_set(b[u], j, d);
					}
					store_grad(dr + c.head + (v + u * THREADS) * VEC_W, b[u], whole);
				}
		}
		if (ecol >= 0) {
			const float z = ce_z(load_elem(xr + ecol), cap, inv_cap);
			float d = a * exp2_approx(fmaf(z, LOG2E, -bl)) - off;
#if SOFTCAP
			const float w = z * inv_cap;
			d *= 1.0f - w * w;
#endif
			store_elem(dr + ecol, d);
		}
		if (own) { /* after its own store of the same element */
			float d = a * exp2_approx(fmaf(zt, LOG2E, -bl)) - off - gt;
#if SOFTCAP
			const float w = zt * inv_cap;
			d *= 1.0f - w * w;
#endif
			store_elem(dr + tcol, d);
		}
#endif /* PASS != 0 */
	}
	row_done();
}
