/*
 * rmsnorm_stream.cu - ktune's RMSNorm forward (rmsnorm.cu's op, its
 * forward passes: the same math, arguments and entry signature) with each
 * row streamed rather than held in registers, for long rows:
 *
 *     h[r,c]   = x[r,c] + res[r,c] rounded to elem, written to h_out   (RESIDUAL=1)
 *     h[r,c]   = x[r,c]                                                 (RESIDUAL=0)
 *     rstd[r]  = 1 / sqrt(sum_c h[r,c]^2 / cols + eps)                  (fp32, saved)
 *     y[r,c]   = h[r,c] * rstd[r] * w[c]
 *
 * A row belongs to one block, or to the CLUSTER blocks of a cluster, each
 * taking a contiguous chunk of its 16-byte vectors (rowstream.cuh).  The
 * first read walks the chunk UNROLL vectors at a time summing h^2 (one
 * reduction a row); the second reads h again for y: from shared memory
 * where the first read left it (RELOAD=1), or from global memory (RELOAD=0:
 * x, or the h just written to h_out), where L2 mostly still holds it.
 * RELOAD=2 (RESIDUAL=0) makes the first read a cp.async into that shared
 * memory, AHEAD groups of UNROLL vectors a thread in flight without
 * registers.  w passes through a vector at a time (L1- and L2-resident).
 *
 * Entry point (rmsnorm.cu's forward):
 *     rmsnorm_stream_kernel(const elem *x, const elem *res, const elem *w, elem *y, float *rstd,
 *                           elem *h_out, long long rows, long long cols, long long ld_x,
 *                           long long ld_res, long long ld_y, long long ld_h, float eps)
 *
 * Tunables: UNROLL, THREADS, MIN_WARPS (prelude.cuh); CLUSTER (blocks a
 * row); RELOAD (below).  VEC is 16 bytes' worth of elements, always.
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * clusters, 1, 1), any clusters >= 1 (they walk the rows)
 *     dynamic shared memory: RELOAD's chunk (ceil(vectors / CLUSTER) * 16
 *     bytes), or 0; the kernel reads its size
 *
 * Limits: the aligned class alone (every row and w 16-byte aligned; the
 * register family takes the rest); 1 <= cols < 2^31; y may be x, h_out may
 * be res (in place), no other overlap; sm_90 for CLUSTER > 1.
 */

#ifndef RESIDUAL
#define RESIDUAL 0 /* 1: h = x + res, written to h_out */
#endif
#ifndef UNROLL
#define UNROLL 4 /* vectors a thread loads at once */
#endif
#ifndef RELOAD
#define RELOAD 1 /* the second read from shared memory (1; 2, without RESIDUAL: the first a cp.async there too) or global (0) */
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
static_assert(RESIDUAL == 0 || RESIDUAL == 1, "RESIDUAL is 0 or 1");
static_assert(UNROLL == 2 || UNROLL == 4 || UNROLL == 8, "UNROLL is 2, 4 or 8");
static_assert(RELOAD == 0 || RELOAD == 1 || (RELOAD == 2 && !RESIDUAL), "RELOAD is 0, 1, or 2 without RESIDUAL");

/* The sum of squares of vectors v, v + THREADS, ... (those under v1) of a thread. */
static __device__ __forceinline__ void sum_squares(float &s, const vec (&b)[UNROLL], int v, int v1)
{
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		if (v + u * THREADS < v1)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				s += vec_get(b[u], j) * vec_get(b[u], j);
}

/* ------------------------------------------------------------ the rows */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
rmsnorm_stream_kernel(const elem *x, const elem *res, const elem *w, elem *y, float *rstd, elem *h_out,
		      long long rows, long long cols, long long ld_x, long long ld_res, long long ld_y,
		      long long ld_h, float eps)
{
	const int rank = row_place_here().rank, n = (int)cols;
	int parity = 0;
#if RELOAD
	extern __shared__ uint4 keep[]; /* this block's chunk of h, vector q at q - v0 */
#else
	uint4 *const keep = nullptr; /* nothing kept */
#endif
	const i64 keep_bytes = RELOAD ? dynamic_smem_bytes() : 0;
	(void)res, (void)h_out, (void)ld_res, (void)ld_h;

	for (i64 row = rows_first(); row < rows; row += rows_step()) {
		const elem *xr = x + row * ld_x;
		const row_cut c = row_cut_of(xr, n, rank);
		const int ecol = edge_col(c, rank, threadIdx.x); /* the tail's elements, one a thread of rank 0 */
		const bool kept = RELOAD && (i64)c.chunk * VEC_BYTES <= keep_bytes;
		float s = 0.0f, he = 0.0f;

		/* ---- h (with the residual: x + res, rounded and stored), and its sum of squares */
#if RESIDUAL
		const elem *rr = res + row * ld_res;
		elem *hr = h_out + row * ld_h;
		if (ecol >= 0) {
			vec t;
			vec_set(t, 0, load_elem(xr + ecol) + load_elem(rr + ecol)); /* rounded as it is stored */
			he = vec_get(t, 0);
			store_elem(hr + ecol, he);
		}
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL], a[UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
					b[u] = load_vec(xr + (v + u * THREADS) * VEC_W);
					a[u] = load_vec(rr + (v + u * THREADS) * VEC_W);
				}
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
#pragma unroll
					for (int j = 0; j < VEC_W; j++)
						vec_set(b[u], j, vec_get(b[u], j) + vec_get(a[u], j));
					store_vec(hr + (v + u * THREADS) * VEC_W, b[u]);
					if (kept)
						keep[v + u * THREADS - c.v0] = make_uint4(b[u].w[0], b[u].w[1], b[u].w[2],
											  b[u].w[3]);
				}
			sum_squares(s, b, v, c.v1);
		}
		const elem *h = hr; /* read again from h_out where not kept: this thread's own stores */
#else
		if (ecol >= 0)
			he = load_elem(xr + ecol);
		chunk_first_read(c, xr, keep, kept, [&](const vec (&b)[UNROLL], int v) { sum_squares(s, b, v, c.v1); });
		const elem *h = xr;
#endif
		s = row_reduce<op_sum>(s + he * he, parity);
		const float r = rsqrtf(s / (float)cols + eps);
		if (rank == 0 && threadIdx.x == 0)
			rstd[row] = r;

		/* ---- y = h rstd w: every vector read again, w a vector at a time */
		elem *yr = y + row * ld_y;
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL];
			chunk_reread(b, c, v, h, keep, kept);
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
					const vec wv = load_vec(w + (v + u * THREADS) * VEC_W);
#pragma unroll
					for (int j = 0; j < VEC_W; j++)
						vec_set(b[u], j, vec_get(b[u], j) * r * vec_get(wv, j));
					store_vec(yr + (v + u * THREADS) * VEC_W, b[u]);
				}
		}
		if (ecol >= 0)
			store_elem(yr + ecol, he * r * load_elem(w + ecol));
	}
	row_done();
}
