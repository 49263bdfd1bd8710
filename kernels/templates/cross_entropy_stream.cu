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

static_assert(VEC_BYTES == 16, "a vector is 16 bytes");
static_assert(RELOAD == 0 || ((RELOAD == 1 || RELOAD == 2) && PASS == 2), "RELOAD is for the fused pass");

#define SPAN (THREADS * UNROLL)   /* vectors of its chunk a block takes in one step */
#define WARPS (THREADS / 32)
#define NPART (SMOOTHING ? 4 : 2) /* m, s, and with smoothing zs, n */

/* ------------------------------------------------------------ the running sums */

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
 * A thread's (or a block's) running sums: p[0] = m, p[1] = sum exp(z - m),
 * and with SMOOTHING p[2] = sum (z - m), p[3] = n.
 */
typedef float part_t[NPART];

#if SMOOTHING
/* sum (z - m) of n elements as sum (z - to) when m = from; 0 for none (whose m may be -inf) */
static __device__ __forceinline__ float zs_moved(float zs, float n, float from, float to)
{
	return n > 0.0f ? zs + n * (from - to) : 0.0f;
}
#endif

/* Lifts p's max to mm when mm is above it. */
static __device__ __forceinline__ void part_lift(part_t &p, float mm)
{
	if (mm > p[0]) {
		p[1] *= exp2_approx((p[0] - mm) * LOG2E);
#if SMOOTHING
		p[2] = zs_moved(p[2], p[3], p[0], mm);
#endif
		p[0] = mm;
	}
}

/*
 * p += q; symmetric (no product fused into the sum), so that a butterfly
 * leaves every lane the same bits.
 */
static __device__ __forceinline__ void part_add(part_t &p, const part_t &q)
{
	const float mm = fmaxf(p[0], q[0]);
	if (mm == -__int_as_float(0x7f800000))
		return; /* both empty */
	const float a = exp2_approx((p[0] - mm) * LOG2E), b = exp2_approx((q[0] - mm) * LOG2E);
	p[1] = __fadd_rn(__fmul_rn(p[1], a), __fmul_rn(q[1], b));
#if SMOOTHING
	p[2] = zs_moved(p[2], p[3], p[0], mm) + zs_moved(q[2], q[3], q[0], mm);
	p[3] = p[3] + q[3];
#endif
	p[0] = mm;
}

static __device__ __forceinline__ void part_empty(part_t &p)
{
	p[0] = -__int_as_float(0x7f800000);
#pragma unroll
	for (int k = 1; k < NPART; k++)
		p[k] = 0.0f;
}

/*
 * The row's sums in every thread of its block (cluster), in a fixed
 * order: a butterfly over the warp, each lane of every warp taking one
 * warp's sums for a second butterfly, then the cluster's blocks' in rank
 * order.  Double-buffered by parity: one barrier (and one cluster barrier)
 * a row.
 */
static __device__ __forceinline__ void part_reduce(part_t &p, int &parity)
{
#pragma unroll
	for (int s = 16; s > 0; s >>= 1) {
		part_t q;
#pragma unroll
		for (int k = 0; k < NPART; k++)
			q[k] = __shfl_xor_sync(0xffffffffu, p[k], s);
		part_add(p, q);
	}
#if WARPS > 1
	__shared__ float warp_part[2][NPART][WARPS];
	const int lane = threadIdx.x % 32;
	if (lane == 0)
#pragma unroll
		for (int k = 0; k < NPART; k++)
			warp_part[parity][k][threadIdx.x / 32] = p[k];
	__syncthreads();
	if (lane < WARPS) {
#pragma unroll
		for (int k = 0; k < NPART; k++)
			p[k] = warp_part[parity][k][lane];
	} else {
		part_empty(p);
	}
#pragma unroll
	for (int s = 16; s > 0; s >>= 1) {
		part_t q;
#pragma unroll
		for (int k = 0; k < NPART; k++)
			q[k] = __shfl_xor_sync(0xffffffffu, p[k], s);
		part_add(p, q);
	}
#endif
#if CLUSTER > 1
	__shared__ float block_part[2][NPART];
	if (threadIdx.x == 0)
#pragma unroll
		for (int k = 0; k < NPART; k++)
			block_part[parity][k] = p[k];
	cluster_sync();
#pragma unroll
	for (int k = 0; k < NPART; k++)
		p[k] = cluster_load(&block_part[parity][k], 0);
#pragma unroll
	for (int r = 1; r < CLUSTER; r++) {
		part_t q;
#pragma unroll
		for (int k = 0; k < NPART; k++)
			q[k] = cluster_load(&block_part[parity][k], r);
		part_add(p, q);
	}
#endif
	parity ^= 1;
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

#if RELOAD == 2
#define AHEAD 4 /* groups of UNROLL vectors a thread has in flight */

/*
 * Group g of a thread's vectors (i = g UNROLL ... of `mine`), cp.async'd
 * from src + i THREADS VEC_W into slot[i THREADS]: its own slots, which no
 * other thread reads, so that wait_group alone says they have landed.
 */
static __device__ __forceinline__ void keep_issue(uint4 *slot, const elem *src, int g, int mine)
{
#pragma unroll
	for (int u = 0; u < UNROLL; u++) {
		const int i = g * UNROLL + u;
		if (i < mine)
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
				     ::"r"((u32)__cvta_generic_to_shared(slot + i * THREADS)), "l"(src + i * THREADS * VEC_W)
				     : "memory");
	}
	asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void keep_wait(void)
{
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

/* ------------------------------------------------------------ a row's pieces */

/*
 * Where a row's elements are: `head` elements before its first aligned
 * vector, `nb` whole vectors, a tail after them; rank's chunk [v0, v1) of
 * the vectors.
 */
struct row_cut {
	int head, nb, tail, chunk, v0, v1;
};

static __device__ __forceinline__ row_cut row_cut_of(const elem *row, int cols, int rank)
{
	row_cut c;
#if ROW_ALIGNED
	c.head = 0;
	(void)row;
#else
	c.head = (int)((VEC_BYTES - (u32)((u64)row % VEC_BYTES)) % VEC_BYTES / ELEM_BYTES);
	if (c.head > cols)
		c.head = cols;
#endif
	c.nb = (cols - c.head) / VEC_W;
	c.tail = cols - c.head - c.nb * VEC_W;
	c.chunk = (c.nb + CLUSTER - 1) / CLUSTER;
	c.v0 = rank * c.chunk;
	c.v1 = min(c.nb, c.v0 + c.chunk);
	return c;
}

/* Column of the edge element (head, then tail) that thread e of rank 0 takes; -1 for none. */
static __device__ __forceinline__ int edge_col(const row_cut &c, int rank, int e)
{
	if (rank != 0 || e >= c.head + c.tail)
		return -1;
	return e < c.head ? e : c.head + c.nb * VEC_W + (e - c.head);
}

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
#if RELOAD == 2
		if ((i64)c.chunk * VEC_BYTES <= keep_bytes) {
			/*
			 * the thread's vectors i = 0, 1, ... (column vector v0 + t + i
			 * THREADS, slot t + i THREADS) copied in groups of UNROLL, AHEAD
			 * groups in flight; every group committed, empty or not, so
			 * that wait_group counts alike in every thread
			 */
			const int t = threadIdx.x, mine = c.v0 + t < c.v1 ? (c.v1 - c.v0 - t + THREADS - 1) / THREADS : 0;
			const elem *src = xr + c.head + (c.v0 + t) * VEC_W;
#pragma unroll
			for (int g = 0; g < AHEAD; g++)
				keep_issue(keep + t, src, g, mine);
			for (int g = 0; g * UNROLL < mine; g++) {
				keep_wait<AHEAD - 1>();
				vec b[UNROLL];
#pragma unroll
				for (int u = 0; u < UNROLL; u++)
					if (g * UNROLL + u < mine) {
						const uint4 w = keep[t + (g * UNROLL + u) * THREADS];
						b[u].w[0] = w.x, b[u].w[1] = w.y, b[u].w[2] = w.z, b[u].w[3] = w.w;
					}
				part_take(p, b, c.v0 + t + g * UNROLL * THREADS, c.v1, cap, inv_cap);
				keep_issue(keep + t, src, g + AHEAD, mine);
			}
			keep_wait<0>();
		} else
#endif
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1)
					b[u] = load_vec(xr + c.head + (v + u * THREADS) * VEC_W);
#if RELOAD
			if ((i64)c.chunk * VEC_BYTES <= keep_bytes)
#pragma unroll
				for (int u = 0; u < UNROLL; u++)
					if (v + u * THREADS < c.v1)
						keep[v + u * THREADS - c.v0] = make_uint4(b[u].w[0], b[u].w[1], b[u].w[2],
											  b[u].w[3]);
#endif
			part_take(p, b, v, c.v1, cap, inv_cap);
		}
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
#if RELOAD
		const bool kept = (i64)c.chunk * VEC_BYTES <= keep_bytes;
#endif
		for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
			vec b[UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1) {
#if RELOAD
					if (kept) {
						const uint4 w = keep[v + u * THREADS - c.v0];
						b[u].w[0] = w.x, b[u].w[1] = w.y, b[u].w[2] = w.z, b[u].w[3] = w.w;
					} else
#endif
						b[u] = load_vec(xr + c.head + (v + u * THREADS) * VEC_W);
				}
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
