/*
 * gemm_wgmma.cu - ktune's second GEMM family, for sm_90a (H100): tiles move
 * by TMA (cp.async.bulk.tensor) into a ring of shared-memory stages, and
 * warpgroup MMAs (wgmma.mma_async) read them straight from shared memory into
 * fp32 accumulators in registers.  One producer warpgroup feeds CONSUMERS
 * consumer warpgroups; the grid is persistent (one block per SM) and walks
 * the tiles of C in Triton's grouped order.  With CLUSTER_M=2, two blocks
 * of a cluster take vertically adjacent tiles and share the B tile through
 * TMA multicast (each loads half of it, for both).
 *
 * Computes, for a row-major C[M,N] and fp32 accumulation,
 *
 *     C = alpha * op(A) * op(B) + beta * C
 *
 * A, B and C hold f16 (DTYPE_BF16=0) or bf16 (DTYPE_BF16=1) values; C is
 * passed as their 16-bit patterns (unsigned short), so the file needs no
 * header.  Layouts, as in gemm.cu:
 *
 *     TRANS_A=0: A is [M,K], element (m,k) at A[m*lda + k]   (K-major for wgmma)
 *     TRANS_A=1: A is [K,M], element (m,k) at A[k*lda + m]   (M-major)
 *     TRANS_B=0: B is [K,N], element (k,n) at B[k*ldb + n]   (N-major)
 *     TRANS_B=1: B is [N,K], element (k,n) at B[n*ldb + k]   (K-major; nn.Linear weights)
 *     C:                     element (m,n) at C[m*ldc + n]
 *
 * Pipeline (one block, NTHREADS = (CONSUMERS + 1) * 128 threads):
 *
 *   warpgroup 0: producer            shared memory: ring of STAGES slots       warpgroups 1..CONSUMERS
 *   (one thread issues TMA,          slot s = A tile s | B tile s              (consumer c owns rows
 *   two for 64x64 tiles)                                                        c*BLOCK_M/CONSUMERS ..
 *   for each tile of this block:                                                of the block's tile)
 *     for each k-tile kt:            +-------+-------+-----+---------+
 *       wait empty[s] ------------>  | slot0 | slot1 | ... | slotS-1 |  ---->  wait full[s]
 *       expect_tx(full[s], bytes)    +-------+-------+-----+---------+         wgmma x (BLOCK_K/16) per slab
 *       TMA A, B -> slot s  ---------- complete_tx on full[s] ---------->      commit; wait_group 1
 *                                  <----- arrive empty[s-1] (4 per consumer)   (slot s-1 is free)
 *       s = (s + 1) % STAGES                                                  end of tile: wait_group 0,
 *                                                                             free the last slot, then
 *                                                                  epilogue, per 64 x 64 chunk:
 *                                                                    alpha*acc (+ beta*C) -> 16-bit
 *                                                                    -> staging buffer (2 a consumer)
 *                                                                    -> TMA store (bulk, async)
 *
 *   Every block runs units of work blockIdx.x, blockIdx.x + gridDim.x, ...;
 *   a unit is a tile in the grouped order, or with split-K one split of a
 *   tile of the last wave: with G blocks (clusters) at once and T tiles, the
 *   first T - T % G tiles are whole units and each of the T % G after them
 *   split_k units (all T when T < G), so that a partial last wave is cut
 *   finer instead of leaving SMs idle.  Producer and consumers walk the
 *   same list, and one counter `it` (k-tiles seen by this block so far)
 *   gives the slot (it % STAGES) and the barrier phase ((it / STAGES) & 1)
 *   on both sides; 64x64 tiles (SMALL_TILE) keep slot and phase as they go
 *   instead, and their two producer threads take even and odd `it`.
 *   The producer runs up to STAGES k-tiles ahead, across tile boundaries, so
 *   the next tile's loads overlap this tile's epilogue.  The epilogue goes
 *   through shared memory because stores straight from the accumulator
 *   layout (16 bytes of a row per four threads) ran at a fraction of the
 *   memory's speed on the H100: at 2048^3 they took 40% of the kernel's time
 *   (docs/gemm-experiments.md, "the epilogue").  TMA stores write whole lines
 *   and clip to M x N themselves.
 *
 *   CLUSTER_M=2: the list is of cluster tiles (2 * BLOCK_M rows); block rank
 *   r takes rows r * BLOCK_M ... of each.  Its producer loads its own A and
 *   half of the B boxes, multicast into the same slot of both blocks (each
 *   full[s] still expects all STAGE_BYTES); each consumer warp arrives on
 *   empty[s] of both blocks, so a producer refills slot s only when the
 *   consumers of both blocks are done with it.  Both blocks meet at a
 *   cluster barrier after setting up their mbarriers; before exiting, each
 *   producer waits until its ring is free, i.e. until the peer's last
 *   remote arrives have landed.
 *
 * Launch contract:
 *     block  = (NTHREADS, 1, 1), NTHREADS = (CONSUMERS + 1) * 128
 *     grid   = (CLUSTER_M * min(tiles * split_k, max_resident), 1, 1),
 *              tiles = ceil(M / (CLUSTER_M * BLOCK_M)) * ceil(N / BLOCK_N);
 *              max_resident = the number of SMs when CLUSTER_M=1, else what
 *              cuOccupancyMaxActiveClusters says for this kernel (66 on the
 *              H100 SXM for every CLUSTER_M=2 config measured).  Any grid that
 *              is a multiple of CLUSTER_M is correct (clusters stride over the
 *              units; with split-K no block waits for another: the last
 *              split of a tile to finish sums the others' partials); more
 *              than fit at once is slow (a second wave).
 *     clusters: CLUSTER_M=2 compiles __cluster_dims__(2, 1, 1) into the
 *              kernel, so a plain cuLaunchKernel launches clusters; no launch
 *              attribute is needed
 *     dynamic shared memory = SMEM_BYTES
 *              = 1024 + STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2
 *                + CONSUMERS * 2 * 8192 + STAGES * 16
 *              (1024: the kernel aligns the ring to 1024 bytes, as the 128-byte
 *              swizzle needs; 8192: a 64 x 64 staging chunk of C, two per
 *              consumer; 16 per stage: two mbarriers).  The host raises
 *              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it; no static
 *              shared memory.  A launch with less traps.
 *     one block per SM: __launch_bounds__(NTHREADS, 1)
 *
 * Parameters:
 *     tmap_a, tmap_b, tmap_c  CUtensorMap (128 bytes, by value) encoded by the
 *                     host with cuTensorMapEncodeTiled, below
 *     C               device pointer to C, 16-byte aligned (read when beta != 0,
 *                     written directly in the chunks holding column N - 1 when
 *                     N % 8 != 0, through tmap_c everywhere else)
 *     M, N, K         >= 1
 *     ldc             elements between rows of C, a multiple of 8, >= N
 *     alpha, beta     beta == 0 never reads C (it may hold NaN)
 *     group_size      rows of tiles per group in the grouped order (Triton's
 *                     GROUP_SIZE_M); values < 1 act as 1
 *     split_k         splits of the K range of each tile of the last wave
 *                     (above; values < 1 act as 1, values over the k-tiles
 *                     kt = ceil(K / 64) as kt); split s of S takes k-tiles
 *                     [s * kt / S, (s + 1) * kt / S).  CLUSTER_M=2 kernels
 *                     ignore it (HAS_SPLIT_K)
 *     partials        split_k > 1: fp32 scratch, split_tiles * CLUSTER_M *
 *                     BLOCK_M * BLOCK_N * split_k floats, 16-byte aligned,
 *                     split_tiles = tiles % (gridDim.x / CLUSTER_M); else unused
 *     tile_counters   split_k > 1: int[split_tiles * CLUSTER_M * CONSUMERS], all
 *                     zero before the launch, left zero after it; else unused
 *
 * Tensor maps (cuTensorMapEncodeTiled; the same for A and B, only the
 * dimensions differ): rank 2; data type CU_TENSOR_MAP_DATA_TYPE_FLOAT16
 * (DTYPE_BF16=0) or CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 (DTYPE_BF16=1);
 * globalAddress = the matrix's base pointer (16-byte aligned);
 * globalDim = {contiguous extent, other extent}; globalStrides = {ld * 2}
 * (bytes, a multiple of 16); elementStrides = {1, 1};
 * CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
 * CU_TENSOR_MAP_L2_PROMOTION_L2_256B (any promotion is correct),
 * CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (out-of-bounds elements load as zero,
 * which the K tail and the M/N edges rely on).
 *
 *     A, TRANS_A=0: globalDim = {K, M}, globalStrides = {lda*2}, boxDim = {64, BLOCK_M}
 *     A, TRANS_A=1: globalDim = {M, K}, globalStrides = {lda*2}, boxDim = {64, BLOCK_K}
 *     B, TRANS_B=0: globalDim = {N, K}, globalStrides = {ldb*2}, boxDim = {64, BLOCK_K}
 *     B, TRANS_B=1: globalDim = {K, N}, globalStrides = {ldb*2}, boxDim = {64, BLOCK_N / CLUSTER_M}
 *     C:               globalDim = {N, M}, globalStrides = {ldc*2}, boxDim = {64, 64}
 *                      (TMA stores write only the part of a box inside the tensor)
 *
 * Shared-memory layout of one slot (what TMA writes and the wgmma
 * descriptors describe), all with the 128-byte swizzle, i.e. 8 rows of
 * 128 bytes = 1024-byte atoms whose 16-byte chunks are permuted by row % 8:
 *     K-major operand (A with TRANS_A=0, B with TRANS_B=1): one box of
 *         ROWS x 64 k, row r at byte r*128; 8-row groups 1024 bytes apart (SBO)
 *     MN-major operand (A with TRANS_A=1, B with TRANS_B=0): ROWS/64 boxes
 *         of 64 (m or n) x BLOCK_K k, each 8192 bytes (LBO between them), k-row
 *         at byte k*128 of its box; 8-k groups 1024 bytes apart (SBO)
 *
 * Limits:
 *   - any M, N, K >= 1 (TMA zero-fills loads outside the matrices; stores
 *     are clipped)
 *   - "aligned" problems only: A, B, C 16-byte aligned, lda, ldb, ldc
 *     multiples of 8 elements (TMA's 16-byte stride rule); the host takes the
 *     mma.sync family (gemm.cu) otherwise
 *   - M, N, K < 2^31; tensor-map coordinates are 32-bit
 *   - no A multicast (clusters along N)
 *   - sm_90a only (wgmma, setmaxnreg); compile with -arch=sm_90a
 *   - the tile shape must satisfy the static_asserts below
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 128 /* rows of C per tile; a multiple of 64 * CONSUMERS, <= 256 */
#endif
#ifndef BLOCK_N
#define BLOCK_N 256 /* columns of C per tile = the wgmma N: 64, 128, 192 or 256 */
#endif
#ifndef BLOCK_K
#define BLOCK_K 64 /* depth of one stage: 64 16-bit values = one 128-byte swizzle row */
#endif
#ifndef STAGES
#define STAGES 4 /* slots in the shared-memory ring, >= 2 */
#endif
#ifndef CONSUMERS
#define CONSUMERS 2 /* consumer warpgroups (1..3); each owns BLOCK_M / CONSUMERS rows of the tile */
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1 /* blocks per cluster (1 or 2): a cluster takes CLUSTER_M vertically adjacent tiles that share B; each block loads 1/CLUSTER_M of B and multicasts it */
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0 /* element type: 0 = f16, 1 = bf16 */
#endif
#ifndef TRANS_A
#define TRANS_A 0 /* 0: A stored [M,K]; 1: A stored [K,M] */
#endif
#ifndef TRANS_B
#define TRANS_B 0 /* 0: B stored [K,N]; 1: B stored [N,K] */
#endif
#ifndef MBAR_SPIN_LIMIT
#define MBAR_SPIN_LIMIT 0 /* > 0: trap after this many failed mbarrier polls (debugging hangs); 0: wait forever */
#endif

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS ((CONSUMERS + 1) * 128)
#define WG_ROWS (BLOCK_M / CONSUMERS) /* rows of the tile per consumer warpgroup */
#define M_SLABS (WG_ROWS / 64)        /* m64 wgmma rows per consumer */
#define K_STEPS (BLOCK_K / 16)        /* k16 wgmma steps per stage */
#define ACC_N (BLOCK_N / 2)           /* fp32 accumulators per thread per m64 slab */

/*
 * A 64x64 tile's k-tile is 128 tensor-core cycles of work, less than one
 * producer thread's chain of empty wait, expect-tx and TMA issue per k-tile
 * (about 350 cycles on the H100) and than the consumer's loop when it
 * divides by STAGES and builds four descriptors from scratch.  So a small
 * tile gets two producer threads taking the k-tiles in turns, and loops that
 * keep the ring position incrementally and step the descriptors by
 * constants: 4-6% at 512^3, 1-3% at M = 128 in the sweep.  The same loops
 * made larger tiles slower, up to 8% (docs/gemm-experiments.md, probe 27).
 */
#define SMALL_TILE (BLOCK_M == 64 && BLOCK_N == 64 && CONSUMERS == 1)
#define PRODUCER_THREADS (SMALL_TILE ? 2 : 1) /* lane 0 of warps 0 .. PRODUCER_THREADS-1 */

#define A_STAGE_BYTES (BLOCK_M * BLOCK_K * 2)
#define B_STAGE_BYTES (BLOCK_N * BLOCK_K * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES) /* TMA bytes that complete one slot */
#define MN_BOX_BYTES (64 * BLOCK_K * 2)             /* one 64 x BLOCK_K box of an MN-major operand */
#define B_KMAJOR_BOX_ROWS (BLOCK_N / CLUSTER_M)     /* rows of one box of a K-major B (TRANS_B=1) */
#define EPI_CHUNK_BYTES (64 * 64 * 2)                      /* a 64 x 64 chunk of C: one TMA store */
#ifndef EPI_BUFS
#define EPI_BUFS 2                                        /* staging chunks per consumer */
#endif
#define EPI_BYTES (CONSUMERS * EPI_BUFS * EPI_CHUNK_BYTES)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + EPI_BYTES + STAGES * 16)

/*
 * Registers per thread after setmaxnreg: the producer gives its registers
 * up, the consumers take them; 128 * (PRODUCER_REGS + CONSUMERS *
 * CONSUMER_REGS) stays within what the block was launched with,
 * NTHREADS * (65536 / NTHREADS rounded down to 8): setmaxnreg.inc waits
 * for registers that nobody frees otherwise.
 */
#define PRODUCER_REGS 40
#define CONSUMER_REGS (CONSUMERS == 1 ? 248 : CONSUMERS == 2 ? 232 : 152)

/*
 * Split-K is compiled into CLUSTER_M=1 kernels only: with a cluster, the
 * 256x128 tile with an M-major A spilled registers, and clusters are for
 * many tiles, split-K for few.
 */
#define HAS_SPLIT_K (CLUSTER_M == 1)

static_assert(BLOCK_K == 64, "a stage is one 128-byte swizzle row of 16-bit values deep");
static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "1 to 3 consumer warpgroups");
static_assert(BLOCK_M % (64 * CONSUMERS) == 0, "each consumer owns whole m64 slabs");
static_assert(BLOCK_M <= 256, "a TMA box has at most 256 rows");
static_assert(BLOCK_N % 64 == 0 && BLOCK_N <= 256, "BLOCK_N is 64, 128, 192 or 256 (wgmma N)");
static_assert(M_SLABS * ACC_N <= 128, "accumulators: at most 128 fp32 registers per thread");
static_assert(CONSUMERS < 3 || M_SLABS * ACC_N <= 96,
	      "3 consumers run under a 128-register cap: at most 96 accumulators (ptxas C7602 otherwise)");
static_assert(STAGES >= 2, "the ring needs at least two slots");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "CLUSTER_M is 1 or 2");
static_assert(SMEM_BYTES <= 232448, "227 KiB of shared memory per block on sm_90");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");
static_assert(TRANS_A == 0 || TRANS_A == 1, "TRANS_A is 0 or 1");
static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B is 0 or 1");

typedef unsigned short elem; /* one f16 or bf16 value, as its bit pattern */
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

/* The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned (cuda.h's layout). */
struct CUtensorMap_ {
	alignas(64) unsigned long long opaque[16];
};

/* ------------------------------------------------ PTX: conversions, smem */

static __device__ __forceinline__ float elem_to_float(elem x)
{
#if DTYPE_BF16
	return __uint_as_float((u32)x << 16);
#else
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
	return f;
#endif
}

/* Two values, rounded to nearest even, lo in the low half (the lower address). */
static __device__ __forceinline__ u32 float2_to_pair(float lo, float hi)
{
	u32 r;
#if DTYPE_BF16
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
	return r;
}

/* The shared-state-space address of a pointer into shared memory. */
static __device__ __forceinline__ u32 smem_u32(const void *p)
{
	return (u32)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ u32 dynamic_smem_size(void)
{
	u32 r;
	asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
	return r;
}

/* ---------------------------------------------------- PTX: mbarriers */

static __device__ __forceinline__ void mbar_init(u32 bar, u32 count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

/* Makes the initialised barriers visible to the other threads and to the async proxy (TMA). */
static __device__ __forceinline__ void mbar_init_fence(void)
{
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* Arrives once and adds `bytes` to the transaction count the phase waits for. */
static __device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
		     :: "r"(bar), "r"(bytes) : "memory");
}

#if CLUSTER_M == 1
static __device__ __forceinline__ void mbar_arrive(u32 bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
#else
/*
 * Arrives on the barrier at the same offset in block `cta` of this cluster
 * (maybe this one).  Default semantics (release at CTA scope), as CUTLASS's
 * ClusterBarrier: what it orders is the wgmma's reads of the slot, already
 * complete; an explicit .release.cluster made every slot release a
 * cluster-wide fence and the kernel 3x slower on the H100.
 */
static __device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 cta)
{
	asm volatile("{\n\t.reg .b32 remote;\n\t"
		     "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
		     "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}\n"
		     :: "r"(bar), "r"(cta) : "memory");
}

/*
 * All threads of all blocks of the cluster meet here, once, after thread 0
 * initialised the barriers.  The arrive is relaxed: the only writes the
 * peers must see are the barrier inits, which fence.mbarrier_init already
 * released to the cluster, and the release form's fences were a sixth of
 * the stall samples of a clustered 1024^3 (docs/gemm-experiments.md, probe 10).
 */
static __device__ __forceinline__ void cluster_start(void)
{
	asm volatile("barrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;\n" ::: "memory");
}

static __device__ __forceinline__ u32 cluster_rank(void)
{
	u32 r;
	asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}
#endif

/*
 * Waits until the phase of parity `parity` has completed.  A fresh barrier
 * is in phase 0, so waiting on parity 1 returns at once: the producer's
 * first pass over the ring does not wait for empty slots.
 */
static __device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
	u32 done;
#if MBAR_SPIN_LIMIT > 0
	long long spins = 0;
#endif
	do {
		asm volatile("{\n\t.reg .pred p;\n\t"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
			     "selp.u32 %0, 1, 0, p;\n\t}\n"
			     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#if MBAR_SPIN_LIMIT > 0
		if (!done && ++spins > (long long)MBAR_SPIN_LIMIT)
			asm volatile("trap;");
#endif
	} while (!done);
}

/* ------------------------------------------------------------ PTX: TMA */

/*
 * Copies the box at coordinates (c0 along the contiguous dimension, c1) of
 * the tensor map into shared memory at dst; its bytes count towards the
 * transaction of barrier bar.  Elements outside the tensor arrive as zero.
 */
static __device__ __forceinline__ void tma_load_2d(u32 dst, const CUtensorMap_ *map, u32 bar,
						   int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%3, %4}], [%2];\n"
		     :: "r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

#if CLUSTER_M > 1
/*
 * The same box, written to the same shared-memory offset (and completing on
 * the barrier at the same offset) in every block of the cluster in cta_mask.
 */
static __device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const CUtensorMap_ *map, u32 bar,
							     int c0, int c1, unsigned short cta_mask)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		     ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n"
		     :: "r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask) : "memory");
}
#endif

/*
 * Stores the box at (c0, c1) of the tensor map from shared memory at src,
 * clipped to the tensor, as one bulk asynchronous copy of this thread's
 * current bulk group.
 */
static __device__ __forceinline__ void tma_store_2d(const CUtensorMap_ *map, u32 src, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
		     :: "l"((u64)map), "r"(src), "r"(c0), "r"(c1) : "memory");
}

static __device__ __forceinline__ void bulk_commit(void)
{
	asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's bulk groups still read their shared memory. */
template <int N>
static __device__ __forceinline__ void bulk_wait_read(void)
{
	asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}

/* Makes this thread's shared-memory writes visible to the async proxy (the TMA store). */
static __device__ __forceinline__ void fence_proxy_async(void)
{
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* A barrier among the `count` threads that use hardware barrier `id` (0 is __syncthreads'). */
static __device__ __forceinline__ void named_barrier(u32 id, u32 count)
{
	asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}

/*
 * named_barrier that also returns whether v was true in any of the threads.
 * Every thread gets the same answer, but the compiler cannot see that: the
 * vote says so, so that a branch on it leaves the code after it uniform (and
 * the wgmma descriptors there in uniform registers).
 */
static __device__ __forceinline__ bool barrier_or(u32 id, u32 count, bool v)
{
	u32 r;
	asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
		     "bar.red.or.pred p, %2, %3, q;\n\tselp.u32 %0, 1, 0, p;\n\t}\n"
		     : "=r"(r) : "r"((u32)v), "r"(id), "r"(count) : "memory");
	return __any_sync(0xffffffffu, r != 0);
}

static __device__ __forceinline__ void st_global_v4(float *p, float a, float b, float c, float d)
{
	asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
		     : "memory");
}

/* Adds four floats loaded past L1 (other blocks' partial sums were written after any L1 copy). */
static __device__ __forceinline__ void add_global_cg_v4(const float *p, float &a, float &b, float &c, float &d)
{
	float w, x, y, z;
	asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(w), "=f"(x), "=f"(y), "=f"(z) : "l"(p));
	a += w, b += x, c += y, d += z;
}

/*
 * Stores four 8 x 8 matrices of 16-bit values: lane l holds, in register
 * i, its pair (row l / 4, columns 2 * (l % 4), +1) of matrix i, and gives
 * the address of row l % 8 of matrix l / 8: the accumulators' own layout,
 * 16 bytes a row in one instruction where st.shared moves 4.
 */
static __device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3)
{
	asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
		     :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

/* Starts fetching a tensor map (a __grid_constant__ parameter) before its first use. */
static __device__ __forceinline__ void prefetch_tensormap(const CUtensorMap_ *map)
{
	asm volatile("prefetch.tensormap [%0];\n" :: "l"((u64)map) : "memory");
}

/* -------------------------------------------------- PTX: warpgroup MMA */

/* Orders this warpgroup's register accesses before the wgmma.mma_async that follow. */
static __device__ __forceinline__ void wgmma_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until at most N of this warpgroup's committed wgmma groups are pending. */
template <int N>
static __device__ __forceinline__ void wgmma_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

/*
 * Tells the compiler that the accumulators may have changed here (after a
 * wgmma_wait), so no read of them moves above it.
 */
static __device__ __forceinline__ void fence_acc(float (&acc)[M_SLABS][ACC_N])
{
#pragma unroll
	for (int s = 0; s < M_SLABS; s++)
#pragma unroll
		for (int i = 0; i < ACC_N; i++)
			asm volatile("" : "+f"(acc[s][i]) :: "memory");
}

/* setmaxnreg: give registers back (producer) or take them (consumers). */
template <int N>
static __device__ __forceinline__ void regs_release(void)
{
	asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N));
}

template <int N>
static __device__ __forceinline__ void regs_claim(void)
{
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N));
}

/*
 * A wgmma shared-memory matrix descriptor with the 128-byte swizzle: start
 * address, leading-dimension byte offset (LBO) and stride-dimension byte
 * offset (SBO), each >> 4, swizzle mode 1 (128B) in bits 62-63.
 *   K-major:  SBO = 1024 (8-row groups); LBO unused (16)
 *   MN-major: SBO = 1024 (8-k groups); LBO = MN_BOX_BYTES (64-wide MN boxes)
 */
static __device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo, u32 sbo)
{
	return (u64)((addr & 0x3ffff) >> 4) | (u64)(lbo >> 4) << 16 | (u64)(sbo >> 4) << 32 |
	       1ull << 62;
}

#if DTYPE_BF16
#define WG_TYPE "bf16"
#else
#define WG_TYPE "f16"
#endif
/* wgmma's transpose bits: 0 = K-major, 1 = MN-major (16-bit types only). */
#if TRANS_A
#define WG_TRANS_A "1" /* A stored [K,M]: M-major */
#else
#define WG_TRANS_A "0" /* A stored [M,K]: K-major */
#endif
#if TRANS_B
#define WG_TRANS_B "0" /* B stored [N,K]: K-major */
#else
#define WG_TRANS_B "1" /* B stored [K,N]: N-major */
#endif
#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
		"+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

/*
 * d (one m64 x BLOCK_N slab, fp32) = A(64 x 16) * B(16 x BLOCK_N) + (scale_d ? d : 0),
 * asynchronously; A and B from shared memory through their descriptors.
 * The operand lists below were written by a script: one variant per wgmma N.
 */
static __device__ __forceinline__ void wgmma_tile(float (&d)[ACC_N], u64 desc_a, u64 desc_b,
						  int scale_d)
{
#if BLOCK_N == 64
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
	    "}, %32, %33, p, 1, 1, " WG_TRANS_A ", " WG_TRANS_B ";\n}\n"
	    : ACC8(0), ACC8(8), ACC8(16), ACC8(24)
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#elif BLOCK_N == 128
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
	    "}, %64, %65, p, 1, 1, " WG_TRANS_A ", " WG_TRANS_B ";\n}\n"
	    : ACC8(0), ACC8(8), ACC8(16), ACC8(24),
	      ACC8(32), ACC8(40), ACC8(48), ACC8(56)
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#elif BLOCK_N == 192
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %98, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n192k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
	    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
	    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
	    "}, %96, %97, p, 1, 1, " WG_TRANS_A ", " WG_TRANS_B ";\n}\n"
	    : ACC8(0), ACC8(8), ACC8(16), ACC8(24),
	      ACC8(32), ACC8(40), ACC8(48), ACC8(56),
	      ACC8(64), ACC8(72), ACC8(80), ACC8(88)
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#elif BLOCK_N == 256
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %130, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n256k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
	    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
	    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
	    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
	    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
	    "}, %128, %129, p, 1, 1, " WG_TRANS_A ", " WG_TRANS_B ";\n}\n"
	    : ACC8(0), ACC8(8), ACC8(16), ACC8(24),
	      ACC8(32), ACC8(40), ACC8(48), ACC8(56),
	      ACC8(64), ACC8(72), ACC8(80), ACC8(88),
	      ACC8(96), ACC8(104), ACC8(112), ACC8(120)
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

/* ------------------------------------------------------- index arithmetic */

static __device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }
static __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

/*
 * Triton's grouped order: consecutive tile ids walk down a group of
 * group_size tile rows before moving one tile column right, so the blocks
 * running together share rows of A and columns of B in L2.
 */
static __device__ __forceinline__ void grouped_tile(int tile, int num_pid_m, int num_pid_n,
						    int group_size, int *pid_m, int *pid_n)
{
	group_size = imin(imax(group_size, 1), num_pid_m);
	int num_pid_in_group = group_size * num_pid_n;
	int group_id = tile / num_pid_in_group;
	int first_pid_m = group_id * group_size;
	int group_size_m = imin(num_pid_m - first_pid_m, group_size);
	*pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m;
	*pid_n = (tile % num_pid_in_group) / group_size_m;
}

/* The ring slot and barrier parity of the it-th k-tile this block handles. */
static __device__ __forceinline__ int ring_slot(int it) { return it % STAGES; }
static __device__ __forceinline__ u32 ring_parity(int it) { return (u32)(it / STAGES) & 1; }

/* The same, kept incrementally (SMALL_TILE): the slot and parity of the next k-tile. */
struct ring_pos {
	int slot;
	u32 parity;
};

static __device__ __forceinline__ void ring_advance(ring_pos *p)
{
	if (++p->slot == STAGES) {
		p->slot = 0;
		p->parity ^= 1;
	}
}

/*
 * Byte offset, within one A slot, of the m64 slab at tile row `row` (a
 * multiple of 64) for k-step ks (16 k each).  K-major: rows of 128 bytes,
 * a k-step is 32 bytes along the (swizzled) row.  M-major: the slab is one
 * 64-wide box, a k-step is 16 k-rows of 128 bytes.
 */
static __device__ __forceinline__ u32 a_slab_offset(int row, int ks)
{
#if TRANS_A == 0
	return (u32)(row * 128 + ks * 32);
#else
	return (u32)((row / 64) * MN_BOX_BYTES + ks * 16 * 128);
#endif
}

/* Byte offset, within one B slot, of k-step ks (all BLOCK_N columns). */
static __device__ __forceinline__ u32 b_kstep_offset(int ks)
{
#if TRANS_B == 1
	return (u32)(ks * 32);
#else
	return (u32)(ks * 16 * 128);
#endif
}

#define A_LBO (TRANS_A ? MN_BOX_BYTES : 16)
#define B_LBO (TRANS_B ? 16 : MN_BOX_BYTES)

/*
 * Accumulator layout of wgmma m64nNk16 (fp32): thread t of the warpgroup
 * holds, for each n8 block j, d[4j + e] at row 16*(t/32) + (t%32)/4 + 8*(e/2)
 * and column 8j + 2*(t%4) + e%2 of the slab.
 */
static __device__ __forceinline__ int acc_row(int t, int e) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2); }
static __device__ __forceinline__ int acc_col(int t, int j) { return 8 * j + 2 * (t % 4); }

/* ------------------------------------------------------------------- load */

/*
 * One box of this block's share of B: box i of the slot (its offset and
 * coordinates), multicast to the whole cluster when CLUSTER_M > 1.
 */
static __device__ __forceinline__ void load_b_box(const CUtensorMap_ *tmap_b, u32 b_dst, u32 bar, int n0,
						  int k0, int i)
{
#if TRANS_B == 1
	const u32 dst = b_dst + i * B_KMAJOR_BOX_ROWS * 128;
	const int c0 = k0, c1 = n0 + i * B_KMAJOR_BOX_ROWS;
#else
	const u32 dst = b_dst + i * MN_BOX_BYTES;
	const int c0 = n0 + 64 * i, c1 = k0;
#endif
#if CLUSTER_M > 1
	tma_load_2d_multicast(dst, tmap_b, bar, c0, c1, (unsigned short)((1u << CLUSTER_M) - 1));
#else
	tma_load_2d(dst, tmap_b, bar, c0, c1);
#endif
}

/*
 * Producer: loads k-tile kt of the tile at (m0, n0) into slot `slot`, all
 * of it completing on barrier bar.  K-major A takes one box, M-major A one
 * 64-wide box per 64 rows.  B comes in B_BOXES boxes (CLUSTER_M boxes of
 * B_KMAJOR_BOX_ROWS rows if K-major, one per 64 columns if N-major); box i
 * is loaded by the block of cluster rank i % CLUSTER_M and multicast to all
 * of them, so each block's slot receives all of B.
 */
#define B_BOXES (TRANS_B ? CLUSTER_M : BLOCK_N / 64)
static __device__ __forceinline__ void load_stage(const CUtensorMap_ *tmap_a, const CUtensorMap_ *tmap_b,
						  u32 a_dst, u32 b_dst, u32 bar, int m0, int n0, int kt,
						  int rank)
{
	const int k0 = kt * BLOCK_K;
#if TRANS_A == 0
	tma_load_2d(a_dst, tmap_a, bar, k0, m0);
#else
#pragma unroll
	for (int c = 0; c < BLOCK_M / 64; c++)
		tma_load_2d(a_dst + c * MN_BOX_BYTES, tmap_a, bar, m0 + 64 * c, k0);
#endif
#pragma unroll
	for (int i = 0; i < B_BOXES; i++)
		if (i % CLUSTER_M == rank)
			load_b_box(tmap_b, b_dst, bar, n0, k0, i);
}

/* -------------------------------------------------------------------- mma */

/*
 * Consumer: acc (+)= this warpgroup's rows of slot `slot`'s A times its B,
 * K_STEPS wgmma per m64 slab, committed as one group.  first: the tile's
 * first k-tile, whose first k-step overwrites acc instead of adding.
 */
static __device__ __forceinline__ void mma_stage(float (&acc)[M_SLABS][ACC_N], u32 a_slot, u32 b_slot,
						 int wg_row0, bool first)
{
	wgmma_fence();
#pragma unroll
	for (int ks = 0; ks < K_STEPS; ks++) {
		u64 db = smem_desc(b_slot + b_kstep_offset(ks), B_LBO, 1024);
#pragma unroll
		for (int s = 0; s < M_SLABS; s++) {
			u64 da = smem_desc(a_slot + a_slab_offset(wg_row0 + 64 * s, ks), A_LBO, 1024);
			wgmma_tile(acc[s], da, db, !(first && ks == 0));
		}
	}
	wgmma_commit();
}

/*
 * mma_stage from the slot's first descriptors (SMALL_TILE): every k-step's
 * and slab's is the first plus a constant, the descriptor's low bits being
 * the address / 16 (which stays below 2^14 in 227 KiB of shared memory).
 */
static __device__ __forceinline__ void mma_stage_desc(float (&acc)[M_SLABS][ACC_N], u64 da0, u64 db0, bool first)
{
	wgmma_fence();
#pragma unroll
	for (int ks = 0; ks < K_STEPS; ks++) {
		const u64 db = db0 + (u64)(b_kstep_offset(ks) >> 4);
#pragma unroll
		for (int s = 0; s < M_SLABS; s++) {
			const u64 da = da0 + (u64)((a_slab_offset(64 * s, ks) - a_slab_offset(0, 0)) >> 4);
			wgmma_tile(acc[s], da, db, !(first && ks == 0));
		}
	}
	wgmma_commit();
}

/* --------------------------------------------------------------- epilogue */

/* One 64 x 64 chunk of C, alpha * acc (+ beta * C), row by row from registers: the ragged edge (below). */
static __device__ __forceinline__ void store_chunk_direct(const float (&d)[ACC_N], elem *C, i64 ldc, int M, int N,
							  int row0, int n0, int c, float alpha, float beta, int t)
{
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int row = row0 + acc_row(t, 2 * h);
		if (row >= M)
			continue;
		elem *crow = C + (i64)row * ldc;
#pragma unroll
		for (int q = 0; q < 8; q++) {
			const int j = 8 * c + q, col = n0 + acc_col(t, j);
			if (col >= N)
				continue;
			float v0 = alpha * d[4 * j + 2 * h], v1 = alpha * d[4 * j + 2 * h + 1];
			const bool pair = col + 1 < N;
			if (beta != 0.0f) {
				v0 += beta * elem_to_float(crow[col]);
				if (pair)
					v1 += beta * elem_to_float(crow[col + 1]);
			}
			const u32 v = float2_to_pair(v0, v1);
			crow[col] = (elem)(v & 0xffff);
			if (pair)
				crow[col + 1] = (elem)(v >> 16);
		}
	}
}

/*
 * Chunk c of a slab, alpha * acc (+ beta * C when BETA), rounded into the
 * staging buffer: lane_row is this lane's stmatrix row (see store_tile).
 */
template <bool BETA>
static __device__ __forceinline__ void stage_chunk(const float (&d)[ACC_N], u32 lane_row, int swz, int q_lane,
						   const elem *C, i64 ldc, int M, int N, int row0, int n0, int c,
						   float alpha, float beta, int t)
{
#pragma unroll
	for (int q = 0; q < 8; q += 2) {
		u32 v[2][2]; /* blocks q, q + 1 of the chunk, rows h * 8 + (t % 32) / 4: rounded pairs */
#pragma unroll
		for (int b = 0; b < 2; b++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int j = 8 * c + q + b; /* n8 block within the tile */
				float v0 = alpha * d[4 * j + 2 * h], v1 = alpha * d[4 * j + 2 * h + 1];
				if (BETA) {
					const int row = row0 + acc_row(t, 2 * h);
					const int col = n0 + acc_col(t, j); /* col + 1 < N: N % 8 == 0 here */
					if (row < M && col < N) {
						const u32 old = *(const u32 *)(C + (i64)row * ldc + col);
						v0 += beta * elem_to_float((elem)(old & 0xffff));
						v1 += beta * elem_to_float((elem)(old >> 16));
					}
				}
				v[b][h] = float2_to_pair(v0, v1);
			}
		stmatrix_x4(lane_row + (u32)(((q + q_lane) ^ swz) * 16), v[0][0], v[0][1], v[1][0], v[1][1]);
	}
}

/*
 * Writes alpha * acc + beta * C for this warpgroup's rows of the tile at
 * (row0, n0), one 64 x 64 chunk at a time: the warpgroup rounds the chunk
 * into a staging buffer, thread 0 stores it with TMA, which clips it to
 * M x N.  The consumer's EPI_BUFS buffers take chunks in turn; before the
 * warpgroup writes chunk c, thread 0 waits until the store that last read
 * its buffer (chunk c - EPI_BUFS) is done with it.  `chunks` counts the
 * consumer's chunks across tiles, so the turns carry over.  The branch on
 * beta is taken per chunk, so that the usual beta == 0 chunk carries no
 * loads of C, not even predicated-off ones (a copy of the whole consumer
 * a value of beta spilled where 128 accumulators run under 240 registers).
 *
 * TMA clips rows at M exactly, but columns only at 16 bytes: where N is not
 * a multiple of 8 it would write up to 7 columns past N, into what may be
 * another matrix's data.  The chunk holding that edge goes out with plain
 * stores instead.
 *
 * A chunk's layout is what TMA's 128-byte swizzle expects: row r at byte
 * r * 128, its 16-byte piece q at piece q ^ (r % 8).  Piece q of a warp's
 * 16 rows is n8 block q of the chunk: two 8 x 8 matrices (rows 0-7 and
 * 8-15), so one stmatrix_x4 stores blocks q and q + 1.  Its 8 rows of a
 * matrix land in 8 different pieces, i.e. in all 32 banks once.
 */
static __device__ __forceinline__ void store_tile(const float (&acc)[M_SLABS][ACC_N], const CUtensorMap_ *tmap_c,
						  u32 bufs, int *chunks, elem *C, i64 ldc, int M, int N,
						  int row0, int n0, float alpha, float beta, int t, u32 barrier_id)
{
	/* this lane's row for stmatrix: matrix l / 8 is block q + l / 16, rows (l / 8) % 2 * 8 + l % 8 */
	const int lane = t % 32, mrow = 16 * (t / 32) + 8 * (lane / 8 % 2) + lane % 8;
	const u32 row_off = (u32)mrow * 128;
	const int q_lane = lane / 16, swz = lane % 8;
#pragma unroll
	for (int s = 0; s < M_SLABS; s++)
#pragma unroll
		for (int c = 0; c < BLOCK_N / 64; c++) {
			if (n0 + 64 * c >= N || row0 + 64 * s >= M)
				continue; /* wholly outside C */
			if (N % 8 != 0 && n0 + 64 * c + 64 > N) {
				store_chunk_direct(acc[s], C, ldc, M, N, row0 + 64 * s, n0, c, alpha, beta, t);
				continue;
			}
			const u32 buf = bufs + (u32)(*chunks % EPI_BUFS) * EPI_CHUNK_BYTES;
			if (t == 0)
				bulk_wait_read<EPI_BUFS - 1>(); /* the store of chunk c - EPI_BUFS has read buf */
			named_barrier(barrier_id, 128);
			if (beta != 0.0f) /* uniform: the beta == 0 copy carries no loads of C */
				stage_chunk<true>(acc[s], buf + row_off, swz, q_lane, C, ldc, M, N, row0 + 64 * s,
						  n0, c, alpha, beta, t);
			else
				stage_chunk<false>(acc[s], buf + row_off, swz, q_lane, C, ldc, M, N, row0 + 64 * s,
						   n0, c, alpha, beta, t);
			fence_proxy_async(); /* the TMA store reads what the generic proxy wrote */
			named_barrier(barrier_id, 128);
			if (t == 0) {
				tma_store_2d(tmap_c, buf, n0 + 64 * c, row0 + 64 * s);
				bulk_commit();
			}
			(*chunks)++;
		}
}

/*
 * Split-K (split_k > 1): writes this split's partial sums of the warpgroup's
 * rows of the tile to its slice of partials, counts the split in at the
 * warpgroup's counter, and in the warpgroup that arrives last loads into acc
 * the sum of all split_k partials, added in the order 0, 1, ... so that the
 * result does not depend on which block came last, and resets the counter
 * for the next launch.  Returns whether acc now holds the tile's sum.
 *
 * The partials are scratch, so they keep the accumulators' own layout: a
 * warpgroup's slice is WG_ROWS * BLOCK_N floats, value group g (acc[s][4g'
 * .. 4g' + 3], g = s * ACC_N / 4 + g') of thread t at float (g * 128 + t) * 4,
 * so that each warp writes and reads 512 contiguous bytes at a time.  (Rows
 * of C, 8 bytes a thread, were as slow as the old register epilogue.)  The
 * slice of (warpgroup w, split sp) is at (w * split_k + sp) * WG_ROWS * BLOCK_N.
 */
#define WG_ELEMS (WG_ROWS * BLOCK_N)
static __device__ __forceinline__ bool reduce_split(float (&acc)[M_SLABS][ACC_N], float *partials, int *counter,
						    int wg_slot, int split, int split_k, int t, u32 barrier_id)
{
	float *mine = partials + ((i64)wg_slot * split_k + split) * WG_ELEMS + 4 * t;
#pragma unroll
	for (int s = 0; s < M_SLABS; s++)
#pragma unroll
		for (int g = 0; g < ACC_N / 4; g++)
			st_global_v4(mine + (s * ACC_N / 4 + g) * 512, acc[s][4 * g], acc[s][4 * g + 1],
				     acc[s][4 * g + 2], acc[s][4 * g + 3]);
	__threadfence(); /* the partials, before the count that publishes them */
	named_barrier(barrier_id, 128);
	bool last = false;
	if (t == 0)
		last = atomicAdd(counter, 1) == split_k - 1;
	if (!barrier_or(barrier_id, 128, last))
		return false;
	__threadfence();
#pragma unroll
	for (int s = 0; s < M_SLABS; s++)
#pragma unroll
		for (int i = 0; i < ACC_N; i++)
			acc[s][i] = 0.0f;
	/* a slab at a time, so that the loads in flight stay within the registers left */
	const float *all = partials + (i64)wg_slot * split_k * WG_ELEMS + 4 * t;
#pragma unroll
	for (int s = 0; s < M_SLABS; s++)
		for (int sp = 0; sp < split_k; sp++) {
			const float *part = all + (i64)sp * WG_ELEMS + s * ACC_N / 4 * 512;
#pragma unroll
			for (int g = 0; g < ACC_N / 4; g++)
				add_global_cg_v4(part + g * 512, acc[s][4 * g], acc[s][4 * g + 1], acc[s][4 * g + 2],
						 acc[s][4 * g + 3]);
		}
	if (t == 0)
		*counter = 0;
	return true;
}

/*
 * Consumer warp: this warp is done with a slot.  With clusters, every
 * block's producer writes (its share of B) into every block's slot, so the
 * warp tells the empty barrier of each block in the cluster.
 */
static __device__ __forceinline__ void release_slot(u32 empty)
{
#if CLUSTER_M > 1
#pragma unroll
	for (int r = 0; r < CLUSTER_M; r++)
		mbar_arrive_cluster(empty, r);
#else
	mbar_arrive(empty);
#endif
}

/* --------------------------------------------------------- the two roles */

/* Shared-memory addresses of the ring and its barriers, and the tile walk, as both roles see them. */
struct ring {
	u32 a, b;        /* slot 0 of A and of B; slot s at + s * A_STAGE_BYTES, + s * B_STAGE_BYTES */
	u32 c;           /* staging chunks of C: consumer i's buffer b at + (i * EPI_BUFS + b) * EPI_CHUNK_BYTES */
	u32 full, empty; /* barrier of slot s at + 8 * s */
	int rank;        /* this block's rank in its cluster */
	int num_pid_m, num_pid_n, k_tiles;
	int split_k;                               /* <= k_tiles, so that no split is empty */
	int whole_tiles;                           /* units below this are whole tiles; then split_k a tile */
	int num_units, first_unit, unit_stride;    /* units of work: tiles, and splits of the last wave's */
};

/*
 * Unit u of the walk: its tile, and its split's k-tiles kt0 .. kt0 + nkt - 1
 * (split s of S takes [s * k_tiles / S, (s + 1) * k_tiles / S): at least one).
 */
static __device__ __forceinline__ void unit_range(const ring &r, int u, int *tile, int *split, int *kt0, int *nkt)
{
	if (u < r.whole_tiles) {
		*tile = u;
		*split = 0;
		*kt0 = 0;
		*nkt = r.k_tiles;
		return;
	}
	const int i = u - r.whole_tiles;
	*tile = r.whole_tiles + i / r.split_k;
	*split = i % r.split_k;
	*kt0 = *split * r.k_tiles / r.split_k;
	*nkt = (*split + 1) * r.k_tiles / r.split_k - *kt0;
}

/* Rows and columns of C where this block's part of cluster tile `tile` starts. */
static __device__ __forceinline__ void tile_origin(const ring &r, int tile, int group_size, int *m0, int *n0)
{
	int pid_m, pid_n;
	grouped_tile(tile, r.num_pid_m, r.num_pid_n, group_size, &pid_m, &pid_n);
	*m0 = (pid_m * CLUSTER_M + r.rank) * BLOCK_M;
	*n0 = pid_n * BLOCK_N;
}

/*
 * A producer thread (PRODUCER_THREADS of them, this one number `turn`): for
 * every k-tile of every tile of this block that is its turn, wait until its
 * slot is free in the whole cluster, announce the bytes on the slot's full
 * barrier, issue the TMA loads.
 */
static __device__ __forceinline__ void producer(const ring &r, const CUtensorMap_ *tmap_a,
						const CUtensorMap_ *tmap_b, int group_size, int turn)
{
	int it = 0;
#if SMALL_TILE
	ring_pos pos = { 0, 0 };
#else
	(void)turn;
#endif
	for (int u = r.first_unit; u < r.num_units; u += r.unit_stride) {
		int tile, split, kt0, nkt, m0, n0;
		unit_range(r, u, &tile, &split, &kt0, &nkt);
		tile_origin(r, tile, group_size, &m0, &n0);
		for (int kt = kt0; kt < kt0 + nkt; kt++, it++) {
#if SMALL_TILE
			const int slot = pos.slot;
			const u32 parity = pos.parity;
			ring_advance(&pos);
			if (it % PRODUCER_THREADS != turn)
				continue;
			mbar_wait(r.empty + 8 * slot, parity ^ 1);
#else
			const int slot = ring_slot(it);
			mbar_wait(r.empty + 8 * slot, ring_parity(it) ^ 1);
#endif
			mbar_arrive_expect_tx(r.full + 8 * slot, STAGE_BYTES);
			load_stage(tmap_a, tmap_b, r.a + slot * A_STAGE_BYTES, r.b + slot * B_STAGE_BYTES,
				   r.full + 8 * slot, m0, n0, kt, r.rank);
		}
	}
#if CLUSTER_M > 1
	/*
	 * The peers' consumers arrive on this block's empty barriers, remotely:
	 * the block must not leave before the last of those arrives has landed.
	 * Waiting until every slot is free again, as if to refill the ring once
	 * more, sees them all (and this block's multicasts have landed by then:
	 * the peers freed the slots after reading them).  Every block does the
	 * same, so no cluster barrier is needed at the end.
	 */
	for (int i = 0; i < STAGES; i++, it++)
		mbar_wait(r.empty + 8 * ring_slot(it), ring_parity(it) ^ 1);
#endif
}

/*
 * A consumer warpgroup: for every unit, wait for each slot, run its wgmma
 * (the previous slot's may still be running), free the previous slot; at
 * the end of the unit drain the wgmma, free the last slot, and store the
 * tile (with split-K, only the last split of the tile to arrive does).
 * consumer_index, its place among the consumers, is a constant (see the
 * kernel's roles).
 */
template <int consumer_index>
static __device__ __forceinline__ void consumer(const ring &r, int t,
						const CUtensorMap_ *tmap_c, elem *C, i64 ldc, int M, int N,
						float alpha, float beta, int group_size, float *partials,
						int *tile_counters)
{
	const int wg_row0 = consumer_index * WG_ROWS; /* this consumer's first row in the tile */
	const bool warp_leader = t % 32 == 0;
	const u32 bufs = r.c + (u32)consumer_index * EPI_BUFS * EPI_CHUNK_BYTES;
	float acc[M_SLABS][ACC_N];
	int chunks = 0;
	const u32 barrier_id = 1 + (u32)consumer_index; /* 0 is __syncthreads' */
#if SMALL_TILE
	ring_pos pos = { 0, 0 };
	int prev_slot = 0; /* the slot of the previous k-tile, freed once its wgmma are done */
	const u64 da0 = smem_desc(r.a + a_slab_offset(wg_row0, 0), A_LBO, 1024); /* slot 0's first */
	const u64 db0 = smem_desc(r.b + b_kstep_offset(0), B_LBO, 1024);
#else
	int it = 0; /* k-tiles consumed so far: the ring position */
#endif
	for (int u = r.first_unit; u < r.num_units; u += r.unit_stride) {
		int tile, split, kt0, nkt, m0, n0;
		unit_range(r, u, &tile, &split, &kt0, &nkt);
		tile_origin(r, tile, group_size, &m0, &n0);

		/* mma */
#if SMALL_TILE
		for (int kt = kt0; kt < kt0 + nkt; kt++) {
			const int slot = pos.slot;
			mbar_wait(r.full + 8 * slot, pos.parity);
			ring_advance(&pos);
			mma_stage_desc(acc, da0 + (u64)((u32)slot * (A_STAGE_BYTES >> 4)),
				       db0 + (u64)((u32)slot * (B_STAGE_BYTES >> 4)), kt == kt0);
			wgmma_wait<1>(); /* the previous k-tile's group is done: free its slot */
			if (kt > kt0 && warp_leader)
				release_slot(r.empty + 8 * prev_slot);
			prev_slot = slot;
		}
#else
		for (int kt = kt0; kt < kt0 + nkt; kt++, it++) {
			const int slot = ring_slot(it);
			mbar_wait(r.full + 8 * slot, ring_parity(it));
			mma_stage(acc, r.a + slot * A_STAGE_BYTES, r.b + slot * B_STAGE_BYTES, wg_row0, kt == kt0);
			wgmma_wait<1>(); /* the previous k-tile's group is done: free its slot */
			if (kt > kt0 && warp_leader)
				release_slot(r.empty + 8 * ring_slot(it - 1));
		}
#endif
		wgmma_wait<0>();
		fence_acc(acc);
#if SMALL_TILE
		if (warp_leader)
			release_slot(r.empty + 8 * prev_slot);
#else
		if (warp_leader)
			release_slot(r.empty + 8 * ring_slot(it - 1));
#endif
		if (r.split_k > 1 && tile >= r.whole_tiles) {
			const int wg_slot = ((tile - r.whole_tiles) * CLUSTER_M + r.rank) * CONSUMERS + consumer_index;
			if (!reduce_split(acc, partials, tile_counters + wg_slot, wg_slot, split, r.split_k, t,
					  barrier_id))
				continue; /* another split of this tile stores it */
		}

		/* epilogue */
		store_tile(acc, tmap_c, bufs, &chunks, C, ldc, M, N, m0 + wg_row0, n0, alpha, beta, t,
			   barrier_id);
	}
	if (t == 0)
		bulk_wait_read<0>(); /* the staging buffers stay valid until the last store has read them */
}

/* ----------------------------------------------------------------- kernel */

#if CLUSTER_M > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER_M, 1, 1)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS, 1) CLUSTER_DIMS
gemm_wgmma_kernel(const __grid_constant__ CUtensorMap_ tmap_a, const __grid_constant__ CUtensorMap_ tmap_b,
		  const __grid_constant__ CUtensorMap_ tmap_c, unsigned short *C, int M, int N, int K,
		  long long ldc, float alpha, float beta, int group_size, int split_k, float *partials,
		  int *tile_counters)
{
	extern __shared__ unsigned char smem[];
	if (dynamic_smem_size() < SMEM_BYTES)
		asm volatile("trap;"); /* launched with less than the contract's shared memory */

	/* [A slot 0 .. STAGES-1][B slot 0 .. STAGES-1][C staging][full bars][empty bars], 1024-aligned */
	ring r;
	r.a = (smem_u32(smem) + 1023u) & ~1023u;
	r.b = r.a + STAGES * A_STAGE_BYTES;
	r.c = r.b + STAGES * B_STAGE_BYTES;
	r.full = r.c + EPI_BYTES;              /* TMA landed: the slot may be read */
	r.empty = r.full + STAGES * 8;         /* consumers done: the slot may be refilled */

	/* setup: barriers; the tensor maps start on their way (small problems wait on the first load) */
	if (threadIdx.x == 0) {
		prefetch_tensormap(&tmap_a);
		prefetch_tensormap(&tmap_b);
		prefetch_tensormap(&tmap_c);
		for (int s = 0; s < STAGES; s++) {
			mbar_init(r.full + 8 * s, 1); /* the producer's arrive, plus the bytes */
			/* one arrive per consumer warp of every block of the cluster */
			mbar_init(r.empty + 8 * s, CLUSTER_M * CONSUMERS * 4);
		}
		mbar_init_fence();
	}
#if CLUSTER_M > 1
	cluster_start(); /* the peers' barriers are initialised before any multicast or remote arrive */
	r.rank = (int)cluster_rank();
#else
	__syncthreads();
	r.rank = 0;
#endif

	/*
	 * setup: the tile walk.  A cluster takes "cluster tiles" of CLUSTER_M *
	 * BLOCK_M rows; this block the rows rank * BLOCK_M ... of each (loaded as
	 * zeros and never stored where they lie below M).
	 */
	r.num_pid_m = cdiv(M, BLOCK_M * CLUSTER_M);
	r.num_pid_n = cdiv(N, BLOCK_N);
	r.k_tiles = cdiv(K, BLOCK_K);
	r.split_k = HAS_SPLIT_K ? imin(imax(split_k, 1), r.k_tiles) : 1;
	r.first_unit = blockIdx.x / CLUSTER_M;
	r.unit_stride = gridDim.x / CLUSTER_M;
	const int tiles = r.num_pid_m * r.num_pid_n;
	r.whole_tiles = r.split_k > 1 ? tiles - tiles % r.unit_stride : tiles; /* 0 when tiles < blocks */
	r.num_units = r.whole_tiles + (tiles - r.whole_tiles) * r.split_k;

	/*
	 * The roles.  The warpgroup index is read from lane 0 so that the
	 * compiler knows it is the same in the whole warp: the branches on it
	 * are then uniform, and with each consumer a copy of its own (its index
	 * a constant) the wgmma descriptors are built in uniform registers, as
	 * the wgmma takes them, instead of being moved over before each one
	 * (docs/gemm-experiments.md, probe 43).
	 */
	const int warpgroup = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0), t = threadIdx.x % 128;
	if (warpgroup == 0) {
		regs_release<PRODUCER_REGS>();
		if (t % 32 == 0 && t / 32 < PRODUCER_THREADS)
			producer(r, &tmap_a, &tmap_b, group_size, t / 32);
		return;
	}
	regs_claim<CONSUMER_REGS>();
	if (warpgroup == 1)
		consumer<0>(r, t, &tmap_c, C, ldc, M, N, alpha, beta, group_size, partials, tile_counters);
#if CONSUMERS >= 2
	else if (warpgroup == 2)
		consumer<1>(r, t, &tmap_c, C, ldc, M, N, alpha, beta, group_size, partials, tile_counters);
#endif
#if CONSUMERS >= 3
	else
		consumer<2>(r, t, &tmap_c, C, ldc, M, N, alpha, beta, group_size, partials, tile_counters);
#endif
}
