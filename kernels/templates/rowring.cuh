/*
 * rowring.cuh - rows of a capped walk in flight in shared memory: RING rows
 * ahead of the one being reduced.  Include it after rowwise.cuh, in the
 * row-wise templates whose space has RING (layernorm.cu, rmsnorm.cu).
 *
 * Why: a walk is a chain of a row's loads, its block-wide reductions and
 * its stores.  With the row in registers the next row's loads wait for
 * this one's reductions (PREFETCH=1 starts one row early, at twice the
 * registers), so an SM holds too few bytes in flight to cover DRAM's
 * latency: a backward pass ran at 25-38% of DRAM bandwidth.  The ring
 * keeps RING rows' loads in flight without registers.  Each thread
 * cp.async's its own vectors of a row into slots of shared memory that no
 * other thread reads, so no barrier orders them: cp.async.wait_group alone
 * says the thread's row has landed.
 *
 * The ring of tensor t (0, 1: a kernel rings up to two) is slot-major:
 * vector i of a thread's share of the row in slot s is at
 *
 *     ring[((t * RING + s) * ITEMS + i) * THREADS + threadIdx.x]
 *
 * so that a warp's 16-byte accesses are consecutive (no bank conflicts).
 * A row's mean or rstd rides along in float slots after the rings
 * (RING_F32_BYTES each), so that no load waits at a row's start.  It all
 * lives in dynamic shared memory at the offset the kernel gives (after its
 * own); the op adds it to the launch.
 *
 * Every thread commits one group a row of its walk, an empty one for a row
 * past the last, so that "all but the RING - 1 newest" is always the
 * oldest row.  Only the aligned class rings (cp.async copies 4, 8 or 16
 * aligned bytes); a row's last, partial vector is copied in part and the
 * rest read as the fill, as row_load does.
 */
#ifndef KTUNE_ROWRING_CUH
#define KTUNE_ROWRING_CUH

#ifndef RING
#define RING 0 /* rows of the walk in flight in shared memory ahead of this one (0: none, 2, 4, 8) */
#endif

static_assert(RING == 0 || RING == 2 || RING == 4 || RING == 8, "RING is 0, 2, 4 or 8");
static_assert(RING == 0 || PREFETCH == 0, "RING and PREFETCH are two ways of loading ahead: one at a time");
static_assert(RING == 0 || (ALIGNED && VEC_BYTES >= 4), "the ring copies whole aligned vectors of 4, 8 or 16 bytes");

#if RING

#define RING_BYTES (RING * ITEMS * THREADS * VEC_BYTES) /* a tensor's ring */
#define RING_F32_BYTES (RING * THREADS * 4)          /* a per-row float's (mean, rstd) */

extern __shared__ __align__(16) unsigned char row_dynamic_smem[];

/* The ring, `offset` bytes (a multiple of 16) into the dynamic shared memory. */
static __device__ __forceinline__ vec *ring_at(unsigned offset)
{
	return (vec *)(row_dynamic_smem + offset);
}

static __device__ __forceinline__ vec *ring_slot(vec *ring, int t, int s, int i)
{
	return &ring[((t * RING + s) * ITEMS + i) * THREADS + threadIdx.x];
}

/*
 * Whether every vector of this thread's share of a row of n columns is
 * whole: then its loads, copies and stores go without a bound a vector (the
 * ring's kernels hold w in registers and take this path for all but a
 * row's last vectors; before it, a vector's bound checks and their branches
 * were most of a norm's instructions).
 */
static __device__ __forceinline__ bool share_whole(const row_place &p, i64 n)
{
	return item_col(p, ITEMS - 1) + VEC_W <= n;
}

/* This thread's slot s of per-row float k, after `tensors` tensors' rings. */
static __device__ __forceinline__ float *ring_f32_slot(vec *ring, int tensors, int k, int s)
{
	return (float *)(ring + tensors * RING * ITEMS * THREADS) + (k * RING + s) * THREADS + threadIdx.x;
}

/* Starts copying src[row] (a row's mean or rstd) into a float slot; nothing for a row past the last. */
static __device__ __forceinline__ void ring_issue_f32(float *slot, const float *src, i64 row, i64 rows)
{
	if (row < rows)
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((u32)__cvta_generic_to_shared(slot)),
			     "l"(src + row)
			     : "memory");
}

/*
 * Starts copying this thread's share of row `row` of a matrix with `rows`
 * rows, `cols` columns and row stride `ld` into slot s of tensor t's ring;
 * a row past the last copies nothing.  ring_commit() closes the row's group.
 */
static __device__ __forceinline__ void ring_issue(vec *ring, int t, int s, const elem *m, i64 row, i64 rows,
						  i64 cols, i64 ld, const row_place &p)
{
	const i64 n = row < rows ? cols : 0;
	const elem *r = m + (row < rows ? row : 0) * ld;
	if (share_whole(p, n)) {
		const elem *src = r + item_col(p, 0);
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
			const u32 dst = (u32)__cvta_generic_to_shared(ring_slot(ring, t, s, i));
#if VEC_BYTES == 16
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src + i * ROW_SPAN)
				     : "memory");
#else
			asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src + i * ROW_SPAN),
				     "n"(VEC_BYTES)
				     : "memory");
#endif
		}
		return;
	}
#pragma unroll
	for (int i = 0; i < ITEMS; i++) {
		const i64 c = item_col(p, i);
		if (c < n) {
			const u32 dst = (u32)__cvta_generic_to_shared(ring_slot(ring, t, s, i));
			const u32 bytes = c + VEC_W <= n ? VEC_BYTES : (u32)(n - c) * ELEM_BYTES;
#if VEC_BYTES == 16
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(r + c), "r"(bytes)
				     : "memory");
#else
			asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(r + c),
				     "n"(VEC_BYTES), "r"(bytes)
				     : "memory");
#endif
		}
	}
}

static __device__ __forceinline__ void ring_commit(void)
{
	asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Until this thread's oldest row in the ring has landed. */
static __device__ __forceinline__ void ring_wait(void)
{
	asm volatile("cp.async.wait_group %0;" ::"n"(RING - 1) : "memory");
}

/* This thread's share of the row in slot s of tensor t's ring, of n columns (0: empty); past n reads `fill`. */
static __device__ __forceinline__ void ring_take(vec *ring, int t, int s, i64 n, const row_place &p, row_raw &v,
						 float fill)
{
	if (share_whole(p, n)) {
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
			v[i] = *ring_slot(ring, t, s, i);
		return;
	}
#pragma unroll
	for (int i = 0; i < ITEMS; i++) {
		const i64 c = item_col(p, i);
		const vec x = *ring_slot(ring, t, s, i);
		if (c + VEC_W <= n) {
			v[i] = x;
		} else {
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(v[i], j, c + j < n ? vec_get(x, j) : fill);
		}
	}
}

/* row_store, without a bound a vector where the thread's share is whole. */
static __device__ __forceinline__ void ring_store(elem *row, i64 n, const row_place &p, const row_raw &v)
{
	if (share_whole(p, n)) {
		elem *dst = row + item_col(p, 0);
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
			store_vec(dst + i * ROW_SPAN, v[i]);
		return;
	}
	row_store(row, n, p, v);
}

#endif /* RING */

#endif
