/*
 * rowstream.cuh - what the streamed row-wise templates (cross_entropy_stream.cu,
 * softmax_stream.cu) share: a row that belongs to one block, or to the
 * CLUSTER blocks of a cluster each taking a contiguous chunk of its
 * 16-byte vectors, walked by a thread UNROLL vectors at a time with
 * running sums (the online softmax's max and sum of exponentials under
 * it), those sums combined over the block and the cluster in a fixed
 * order, the chunk copied into shared memory ahead of its use (RELOAD=2),
 * where the row's unaligned ends are, and a chunk's two reads (the second
 * from shared memory where the first left it: RELOAD).
 *
 * Include it after prelude.cuh and rowwise.cuh (with ROW_THREADS = THREADS:
 * a row takes whole blocks), once the includer has defined ROW_ALIGNED (1:
 * rows start 16-byte aligned) and RELOAD.  SMOOTHING 1 (cross-entropy's
 * label smoothing) adds two sums, zs and n.
 */
#ifndef KTUNE_ROWSTREAM_CUH
#define KTUNE_ROWSTREAM_CUH

#ifndef SMOOTHING
#define SMOOTHING 0
#endif

static_assert(VEC_BYTES == 16, "a vector is 16 bytes");

#ifndef LOG2E /* cross_entropy.cuh defines both */
#define LOG2E 1.4426950408889634f

static __device__ __forceinline__ float exp2_approx(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}
#endif

/* The bytes of dynamic shared memory this launch gave the block: where RELOAD's chunks fit. */
static __device__ __forceinline__ i64 dynamic_smem_bytes(void)
{
	u32 r;
	asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
	return (i64)r;
}

#define SPAN (THREADS * UNROLL)   /* vectors of its chunk a block takes in one step */
#define WARPS (THREADS / 32)
#define NPART (SMOOTHING ? 4 : 2) /* m, s, and with smoothing zs, n */

/* ------------------------------------------------------------ the running sums */

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


/* ------------------------------------------------------------ a chunk's two reads */

#if RELOAD
static __device__ __forceinline__ vec vec_of_word4(uint4 w)
{
	vec b;
	b.w[0] = w.x, b.w[1] = w.y, b.w[2] = w.z, b.w[3] = w.w;
	return b;
}
#endif

/*
 * The first read of this block's chunk of a row (its vectors from `row`,
 * the row's first aligned element), UNROLL vectors v, v + THREADS, ... of
 * a thread at a time, each batch handed to take(b, v) (those under c.v1
 * loaded).  With RELOAD, where the chunk is `kept` (it fits the launch's
 * shared memory), the vectors are stored in keep[] as they are read, or
 * (RELOAD 2) copied there first with cp.async and taken from there.
 */
template <class Take>
static __device__ __forceinline__ void chunk_first_read(const row_cut &c, const elem *row, uint4 *keep, bool kept,
							Take take)
{
	(void)keep, (void)kept;
#if RELOAD == 2
	if (kept) {
		/*
		 * the thread's vectors i = 0, 1, ... (column vector v0 + t + i
		 * THREADS, slot t + i THREADS) copied in groups of UNROLL, AHEAD
		 * groups in flight; every group committed, empty or not, so
		 * that wait_group counts alike in every thread
		 */
		const int t = threadIdx.x, mine = c.v0 + t < c.v1 ? (c.v1 - c.v0 - t + THREADS - 1) / THREADS : 0;
		const elem *src = row + (c.v0 + t) * VEC_W;
#pragma unroll
		for (int g = 0; g < AHEAD; g++)
			keep_issue(keep + t, src, g, mine);
		for (int g = 0; g * UNROLL < mine; g++) {
			keep_wait<AHEAD - 1>();
			vec b[UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (g * UNROLL + u < mine)
					b[u] = vec_of_word4(keep[t + (g * UNROLL + u) * THREADS]);
			take(b, c.v0 + t + g * UNROLL * THREADS);
			keep_issue(keep + t, src, g + AHEAD, mine);
		}
		keep_wait<0>();
		return;
	}
#endif
	for (int v = c.v0 + threadIdx.x; v < c.v1; v += SPAN) {
		vec b[UNROLL];
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			if (v + u * THREADS < c.v1)
				b[u] = load_vec(row + (v + u * THREADS) * VEC_W);
#if RELOAD
		if (kept)
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (v + u * THREADS < c.v1)
					keep[v + u * THREADS - c.v0] = make_uint4(b[u].w[0], b[u].w[1], b[u].w[2], b[u].w[3]);
#endif
		take(b, v);
	}
}

/* The second read: vectors v, v + THREADS, ... (those under c.v1) of a thread, from keep[] where the chunk is kept. */
static __device__ __forceinline__ void chunk_reread(vec (&b)[UNROLL], const row_cut &c, int v, const elem *row,
						    const uint4 *keep, bool kept)
{
	(void)keep, (void)kept;
#pragma unroll
	for (int u = 0; u < UNROLL; u++)
		if (v + u * THREADS < c.v1) {
#if RELOAD
			if (kept)
				b[u] = vec_of_word4(keep[v + u * THREADS - c.v0]);
			else
#endif
				b[u] = load_vec(row + (v + u * THREADS) * VEC_W);
		}
}

#endif
