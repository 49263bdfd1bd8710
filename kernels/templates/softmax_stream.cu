/*
 * softmax_stream.cu - ktune's softmax and its gradient (softmax.cu's op:
 * the same math, arguments and entry signature) with each row streamed
 * rather than held in registers, for rows too long for a block's (or a
 * cluster's) registers:
 *
 *     BACKWARD=0:  y[r,c]  = exp(x[r,c] - max_r x) / sum_c' exp(x[r,c'] - max_r x)
 *     BACKWARD=1:  dx[r,c] = y[r,c] * (dy[r,c] - sum_c' y[r,c'] dy[r,c'])
 *
 * A row belongs to one block, or to the CLUSTER blocks of a cluster, each
 * taking a contiguous chunk of its 16-byte vectors (rowstream.cuh).  The
 * forward pass walks its chunk UNROLL vectors at a time with a running max
 * and the sum of exponentials under it (the online softmax: one reduction
 * a row); the backward pass with the sum of y dy.  Both then read the
 * chunk a second time for the output: from shared memory where the first
 * read left it (RELOAD=1; backward, y's chunk and then dy's), or from
 * global memory, where L2 mostly still holds it (RELOAD=0, or a call
 * whose chunk does not fit the launch's dynamic shared memory).  RELOAD=2
 * (forward) makes the first read a cp.async into that shared memory, AHEAD
 * groups of UNROLL vectors a thread in flight without registers.
 *
 * A row of -inf alone gives zeros (softmax.cu's rule), and the sums are
 * combined in a fixed order: every output is bit-identical run to run.
 *
 * Entry point (softmax.cu's):
 *     softmax_stream_kernel(const elem *in, const elem *dy, elem *out, long long rows,
 *                           long long cols, long long ld_in, long long ld_dy, long long ld_out)
 * forward: in = x, out = y, dy unused; backward: in = y, out = dx.
 *
 * Tunables: UNROLL, THREADS, MIN_WARPS (prelude.cuh); CLUSTER (blocks a
 * row); RELOAD (below).  VEC is 16 bytes' worth of elements, always.
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * clusters, 1, 1), any clusters >= 1 (they walk the rows)
 *     dynamic shared memory: RELOAD's chunk (forward: ceil(vectors / CLUSTER)
 *     * 16 bytes; backward twice that), or 0; the kernel reads its size
 *
 * Limits: the aligned class alone (in, dy, out and their row strides
 * 16-byte aligned; the register family takes the rest); 1 <= cols < 2^31;
 * an output may be its row's input (y = x, dx = dy), not overlap it
 * otherwise; sm_90 for CLUSTER > 1.
 */

#ifndef BACKWARD
#define BACKWARD 0 /* 0: y = softmax(x); 1: dx from y and dy */
#endif
#ifndef UNROLL
#define UNROLL 4 /* vectors a thread loads at once */
#endif
#ifndef RELOAD
#define RELOAD 1 /* the second read from shared memory (1; 2, forward: the first a cp.async there too) or global (0) */
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
#define ROW_ALIGNED 1

#include "prelude.cuh"
#include "rowwise.cuh"
#include "rowstream.cuh"

static_assert(ALIGNED == 1, "the stream family takes the aligned class");
static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");
static_assert(UNROLL == 2 || UNROLL == 4 || UNROLL == 8, "UNROLL is 2, 4 or 8");
static_assert(RELOAD == 0 || RELOAD == 1 || (RELOAD == 2 && !BACKWARD), "RELOAD is 0, 1, or 2 forward");

#define TENSORS (BACKWARD ? 2 : 1) /* the row's tensors a block keeps: x; y and dy */

#if !BACKWARD
/*
 * Vectors v, v + THREADS, ... (those under v1) of a thread's walk into its
 * running max and sum: the max of the vectors first, then each exponential
 * under it.  While every element so far is -inf the sum stays 0 (their
 * exponentials), rather than taking exp(-inf - -inf).
 */
static __device__ __forceinline__ void part_take(part_t &p, const vec (&b)[UNROLL], int v, int v1)
{
	float mx = -__int_as_float(0x7f800000);
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		if (v + u * THREADS < v1)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				mx = fmaxf(mx, vec_get(b[u], j));
	part_lift(p, mx);
	if (p[0] == -__int_as_float(0x7f800000))
		return;
	const float ml = p[0] * LOG2E;
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		if (v + u * THREADS < v1)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				p[1] += exp2_approx(fmaf(vec_get(b[u], j), LOG2E, -ml));
}
#endif

/* ------------------------------------------------------------ the rows */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
softmax_stream_kernel(const elem *in, const elem *dy, elem *out, long long rows, long long cols, long long ld_in,
		      long long ld_dy, long long ld_out)
{
	const int rank = row_place_here().rank, n = (int)cols;
	int parity = 0;
#if RELOAD
	extern __shared__ uint4 keep[]; /* this block's chunk of the row, vector q at q - v0 (dy's after y's) */
#else
	uint4 *const keep = nullptr; /* nothing kept */
#endif
	const i64 keep_bytes = RELOAD ? dynamic_smem_bytes() : 0;
	(void)dy, (void)ld_dy;

	for (i64 row = rows_first(); row < rows; row += rows_step()) {
		const elem *xr = in + row * ld_in;
		const row_cut c = row_cut_of(xr, n, rank);
		const int ecol = edge_col(c, rank, threadIdx.x); /* the tail's elements, one a thread of rank 0 */
		elem *yr = out + row * ld_out;
		const bool kept = RELOAD && (i64)c.chunk * VEC_BYTES * TENSORS <= keep_bytes;
#if !BACKWARD
		/* ---- the running max and sum over the thread's elements */
		part_t p;
		part_empty(p);
		const float xe = ecol >= 0 ? load_elem(xr + ecol) : 0.0f;
		if (ecol >= 0 && xe != -__int_as_float(0x7f800000)) {
			p[0] = xe;
			p[1] = 1.0f;
		}
		chunk_first_read(c, xr, keep, kept, [&](const vec (&b)[UNROLL], int v) { part_take(p, b, v, c.v1); });
		part_reduce(p, parity);

		/* ---- y = exp(x - m) / s: every vector read again */
		const float shift = p[0] == -__int_as_float(0x7f800000) ? 0.0f : p[0] * LOG2E; /* all -inf: zeros */
		const float scale = p[1] > 0.0f ? __fdividef(1.0f, p[1]) : 0.0f;
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL];
			chunk_reread(b, c, v, xr, keep, kept);
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
#pragma unroll
					for (int j = 0; j < VEC_W; j++)
						vec_set(b[u], j, exp2_approx(vec_get(b[u], j) * LOG2E - shift) * scale);
					store_vec(yr + (v + u * THREADS) * VEC_W, b[u]);
				}
		}
		if (ecol >= 0)
			store_elem(yr + ecol, exp2_approx(xe * LOG2E - shift) * scale);
#else
		/* ---- sum y dy over the thread's elements */
		const elem *gr = dy + row * ld_dy;
		const float ye = ecol >= 0 ? load_elem(xr + ecol) : 0.0f, ge = ecol >= 0 ? load_elem(gr + ecol) : 0.0f;
		float d = ye * ge;
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL], g[UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
					b[u] = load_vec(xr + (v + u * THREADS) * VEC_W);
					g[u] = load_vec(gr + (v + u * THREADS) * VEC_W);
				}
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
#if RELOAD
					if (kept) {
						const int q = v + u * THREADS - c.v0;
						keep[q] = make_uint4(b[u].w[0], b[u].w[1], b[u].w[2], b[u].w[3]);
						keep[c.chunk + q] = make_uint4(g[u].w[0], g[u].w[1], g[u].w[2], g[u].w[3]);
					}
#endif
#pragma unroll
					for (int j = 0; j < VEC_W; j++)
						d += vec_get(b[u], j) * vec_get(g[u], j);
				}
		}
		d = row_reduce<op_sum>(d, parity);

		/* ---- dx = y (dy - d): every vector read again */
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL], g[UNROLL];
			chunk_reread(b, c, v, xr, keep, kept);
			chunk_reread(g, c, v, gr, keep + (RELOAD ? c.chunk : 0), kept);
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
#pragma unroll
					for (int j = 0; j < VEC_W; j++)
						vec_set(b[u], j, vec_get(b[u], j) * (vec_get(g[u], j) - d));
					store_vec(yr + (v + u * THREADS) * VEC_W, b[u]);
				}
		}
		if (ecol >= 0)
			store_elem(yr + ecol, ye * (ge - d));
#endif
	}
	row_done();
}
