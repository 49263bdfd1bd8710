/*
 * attention_wgmma_bwd.cu - flash attention backward for Hopper (sm_90a
 * only) on warpgroup MMA: attention_bwd.cu's algorithm and contract
 * (FlashAttention-2's, three kernels, the same workspace), with its main
 * kernel's products on wgmma and a producer warpgroup streaming the query
 * tiles through an mbarrier ring, as attention_wgmma.cu does for the
 * forward.  Of FlashAttention-3's backward overlap it has the order of a
 * tile's own products (OVERLAP, below), none across tiles.
 *
 *   attention_bwd_pre_kernel    attention_bwd.cu's, copied unchanged (that
 *   attention_bwd_dq_kernel     file's hash keys its shipped tuning): delta,
 *                               lse2 and zeroed dQ accumulators; dQ from them
 *   attention_wgmma_bwd_kernel  per block of BLOCK_N = 64 CONSUMERS keys of
 *                               one K/V head, below
 *
 * Warp specialisation (NTHREADS = 128 (CONSUMERS + 1)):
 *
 *   warpgroup 0: producer (setmaxnreg down): cp.async, 16 bytes a thread,
 *     into the 128-byte swizzled layout the descriptors read (zeros past Sq
 *     or Sk), each thread's cp.async.mbarrier.arrive.noinc on the tile's full
 *     barrier (128 arrivals): per key block, K and V once the consumers freed
 *     the last block's (kv_empty), then for each query tile t (a query head
 *     of the GQA group and BLOCK_M rows) Q_t and dO_t into slot t % STAGES
 *     once freed (q_empty)
 *   warpgroups 1..CONSUMERS: consumer c owns keys 64 c .. 64 c + 63 of the
 *     block; per query tile:
 *       S^T  = K Q^T, dP^T = V dO^T     SS wgmma m64 n BLOCK_M, K-major both
 *       P^T  = 2^(S^T scale log2(e) - lse2), 0 where masked (keys past Sk,
 *              causal); dS^T = P^T (dP^T - delta); lse2 and delta from the
 *              workspace, or STAGING=1 the slot (+inf lse2 past Sq or for a
 *              row that saw no key: P 0)
 *       dV  += P^T dO, dK += dS^T Q     RS wgmma m64 n HEAD_DIM: the
 *              accumulators of P^T and dS^T are, pair for pair, the A
 *              fragment (as P in the forward); dO and Q MN-major
 *       dS^T rounded into shared memory (rows of keys, 64-query panels,
 *              swizzled), then a barrier of the consumers, then
 *       dQ  += dS K for the tile: 64 x 64 pieces (query slab, head-dim
 *              panel) split over the consumers, SS wgmma with both operands
 *              MN-major (attention_wgmma_bwd.cuh), K = the block's BLOCK_N
 *              keys; added to the fp32 accumulators: red.add
 *              (DETERMINISTIC=0) or, DETERMINISTIC=1, as the only writer of
 *              the block's slice (a piece's thread is the same for every
 *              tile and key block: program order, the same bits every run);
 *              STAGING=1: stored to shared memory as the threads hold it,
 *              and one thread of the consumer adds each 16 KiB piece with a
 *              bulk reduce (cp.reduce.async.bulk, the TMA unit's: 8 stores
 *              a thread instead of 32 red.add, and no wait on the L2), the
 *              deterministic pass waiting for its last adds before a key
 *              block adds to the same accumulators again
 *     each warp's lane 0 arrives on q_empty once its warpgroup's wgmma read
 *     the slot (4 CONSUMERS arrivals), on kv_empty after the block's last
 *     (dQ's read K);
 *     epilogue: dK (scaled) and dV from registers, 4 bytes a store.
 *
 * Why the dQ product reads dS from shared memory: its M is queries, which
 * the consumers hold along N (their M is keys); and it needs every
 * consumer's keys.  Two barriers of the consumers a tile: dS whole before
 * dQ, and every consumer's dQ done before the next tile's dS overwrites it.
 *
 * OVERLAP=1 (with STAGING) orders a tile's products as FlashAttention-3's
 * backward does: S^T and dP^T in two groups, P^T computed while dP^T's
 * runs, dV's issued before dS^T is computed, dK's right after it (the
 * consumer's softmax under its own products; the H200's sweep: faster at
 * D = 64, slower for causal D = 128).
 *
 * STAGING=1 also has the producer copy each tile's lse2 and delta (BLOCK_M
 * floats each, 16 bytes a thread) into its slot, read by the consumers from
 * shared memory instead of global memory per element; and it changes the
 * accumulators' order within each 64-row slab to the consumers' (the dq
 * kernel's reads follow; the pre kernel's zeroing does not care).
 *
 * Shared memory (dynamic, based 1024-aligned): K, V (BLOCK_N rows each),
 * STAGES Q slots and STAGES dO slots (BLOCK_M rows), dS^T (BLOCK_N rows of
 * BLOCK_M queries, in 64-query panels), STAGING=1: dQ's pieces (16 KiB
 * each) and each slot's lse2 and delta, then the barriers.  A tile of R rows
 * of HEAD_DIM elements is HEAD_DIM / 64 panels of R rows of 128 bytes,
 * chunk c of row r at chunk (c ^ (r % 8)): attention_wgmma.cu's layout.
 *
 * Ring phases: query tile it (counted over the block's whole walk) uses slot
 * it % STAGES, parity (it / STAGES) & 1; key block kb (of the walk) parity
 * kb & 1 on kv_full / kv_empty.  The waits on empty barriers take the
 * opposite parity (a fresh barrier's previous phase counts as complete).
 *
 * Workspace, entry points, arguments and grids: attention_bwd.cu's, with
 * attention_wgmma_bwd_kernel in attention_bwd_kernel's place (same
 * arguments), block = (NTHREADS), SMEM_BYTES
 *     = 1024 + (2 BLOCK_N + 2 STAGES BLOCK_M) HEAD_DIM 2 + BLOCK_N BLOCK_M 2 + (2 + 2 STAGES) 8
 *       (STAGING=1: + BLOCK_M HEAD_DIM 4 + 2 STAGES BLOCK_M 4)
 * (a launch with less traps).  SQ_PAD = Sq rounded up to BLOCK_M.
 *
 * Tunables (NVRTC -D): BLOCK_M, CONSUMERS, STAGES, STAGING, OVERLAP below; from the key:
 * DTYPE_BF16, HEAD_DIM (64 or 128), CAUSAL, DETERMINISTIC.
 *
 * Limits: as attention_bwd.cu's; sm_90a (wgmma, setmaxnreg): compiled with
 * -arch=sm_90a, runs on sm_90 devices only.
 *
 * ATTENTION_HOST: tests/unit/test-attention-sim.cc runs this file on the
 * host (attention-sim-wgmma-bwd.inc), wgmma and mbarriers simulated.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 64 /* query rows per tile: 64 or 128 (the N of S^T and dP^T) */
#endif
#ifndef CONSUMERS
#define CONSUMERS 2 /* consumer warpgroups, 64 keys each (BLOCK_N = 64 CONSUMERS) */
#endif
#ifndef STAGES
#define STAGES 2 /* query tiles (Q and dO) in the shared-memory ring */
#endif
#ifndef STAGING
#define STAGING 0 /* 1: lse2 and delta staged with each query tile, dQ added from shared memory by bulk reduce; 0: neither */
#endif
#ifndef OVERLAP
#define OVERLAP 0 /* 1 (with STAGING): P^T computed under dP^T's product, dS^T under dV's; 0: after both */
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0 /* element type: 0 = f16, 1 = bf16 */
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128 /* D: 64 or 128 */
#endif
#ifndef CAUSAL
#define CAUSAL 0 /* 1: query i sees keys j <= i + Sk - Sq */
#endif
#ifndef DETERMINISTIC
#define DETERMINISTIC 0 /* 1: dQ through per-block slices summed in order; 0: fp32 atomics */
#endif
/* > 0: trap after this many failed polls of one mbarrier wait (a hang, debugging); 0: wait forever */
#ifndef MBAR_SPIN_LIMIT
#define MBAR_SPIN_LIMIT 0
#endif

/* ---------------------------------------------------------- derived sizes */

#define BLOCK_N (64 * CONSUMERS)              /* keys per block */
#define NTHREADS (128 * (CONSUMERS + 1))      /* the producer warpgroup and the consumers */
#define CHUNKS (HEAD_DIM / 8)                 /* 16-byte chunks per row */
#define SWIZZLE 1                             /* attention.cuh's tile_off (unused here) */
#define Q_BYTES (BLOCK_M * HEAD_DIM * 2)      /* one Q or dO slot */
#define KV_BYTES (BLOCK_N * HEAD_DIM * 2)     /* K's tile, and V's */
#define DS_BYTES (BLOCK_N * BLOCK_M * 2)      /* dS^T */
#define BAR_BYTES ((2 + 2 * STAGES) * 8)      /* kv_full, kv_empty; q_full, q_empty per slot */
#define DQ_PIECES ((BLOCK_M / 64) * (HEAD_DIM / 64)) /* 64 x 64 pieces of a tile's dQ */
#if STAGING
#define ROW_BYTES (BLOCK_M * 4)               /* a tile's lse2, and its delta */
#define STAGE_BYTES (DQ_PIECES * 16384 + 2 * STAGES * ROW_BYTES) /* dQ's pieces (fp32); lse2 and delta per slot */
#else
#define STAGE_BYTES 0
#endif
#define SMEM_BYTES (1024 + 2 * KV_BYTES + 2 * STAGES * Q_BYTES + DS_BYTES + STAGE_BYTES + BAR_BYTES)
#define S_ACC (BLOCK_M / 2)                   /* fp32 accumulators of S^T (and dP^T) per thread */
#define KV_ACC (HEAD_DIM / 2)                 /* of dK (and dV) */
#define P_REGS (BLOCK_M / 4)                  /* 32-bit registers of P^T (and dS^T), rounded */
#define WGMMA_SS_N BLOCK_M
#define WGMMA_RS_N HEAD_DIM

/*
 * As attention_wgmma.cu: within what the block is launched with, NTHREADS x
 * (65536 / NTHREADS, to 8).  The producer keeps more than the forward's
 * (its walk and four tensors' pointers and strides): at 40, ptxas spilled
 * a few bytes in it (nvcc 13.0, one consumer); 56 where that fits, and 96
 * for STAGING's copies of lse2 and delta (at 56 it spilled, D = 64).
 */
#define PRODUCER_REGS (CONSUMERS == 1 ? (STAGING ? 96 : 56) : 40)
#define CONSUMER_REGS (CONSUMERS == 1 ? 240 : 232)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM is 64 or 128");
static_assert(BLOCK_M == 64 || BLOCK_M == 128, "BLOCK_M is 64 or 128 (attention_wgmma.cuh has those wgmma shapes)");
static_assert(CONSUMERS == 1 || CONSUMERS == 2, "1 or 2 consumer warpgroups");
static_assert(STAGES >= 2 && STAGES <= 3, "STAGES is 2 or 3");
static_assert(CAUSAL == 0 || CAUSAL == 1, "CAUSAL is 0 or 1");
static_assert(DETERMINISTIC == 0 || DETERMINISTIC == 1, "DETERMINISTIC is 0 or 1");
static_assert(STAGING == 0 || STAGING == 1, "STAGING is 0 or 1");
static_assert(OVERLAP == 0 || (OVERLAP == 1 && STAGING), "OVERLAP is 0, or 1 with STAGING");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");
static_assert(SMEM_BYTES <= 232448, "227 KiB of shared memory per block on sm_90");
static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= NTHREADS * ((65536 / NTHREADS) / 8 * 8),
	      "setmaxnreg: the warpgroups' registers fit what the block is launched with");

#include "attention.cuh"
#include "attention_wgmma.cuh"
#include "attention_wgmma_bwd.cuh"

static __device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

#define LOG2E 1.4426950408889634f

/* ------------------------------------------- pre and dq: attention_bwd.cu's */

extern "C" __global__ void __launch_bounds__(256)
attention_bwd_pre_kernel(const elem *o, const elem *dout, const float *lse, float *ws, int sq, int sq_pad, int slices,
			 i64 o_sb, i64 o_ss, i64 o_sh, i64 do_sb, i64 do_ss, i64 do_sh, i64 lse_sb, i64 lse_sh)
{
	const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5);
	const int head = blockIdx.y, batch = blockIdx.z, hq = gridDim.y;
	const i64 rows = (i64)gridDim.z * hq * sq_pad, r = ((i64)batch * hq + head) * sq_pad + row;
	if (row >= sq_pad)
		return;
	float sum = 0.0f;
	if (row < sq) {
		const elem *orow = o + batch * o_sb + row * o_ss + head * o_sh;
		const elem *drow = dout + batch * do_sb + row * do_ss + head * do_sh;
#pragma unroll
		for (int x = lane; x < HEAD_DIM; x += 32)
			sum += elem_to_float(orow[x]) * elem_to_float(drow[x]);
	}
	sum += shfl_xor(sum, 16);
	sum += shfl_xor(sum, 8);
	sum += shfl_xor(sum, 4);
	sum += shfl_xor(sum, 2);
	sum += shfl_xor(sum, 1);
	if (lane == 0) {
		const float l = row < sq ? lse[batch * lse_sb + head * lse_sh + row] : neg_inf();
		ws[r] = l == neg_inf() ? -neg_inf() : l * LOG2E; /* no key (or no row): +inf, so P = 2^-inf = 0 */
		ws[rows + r] = sum;
	}
	for (int s = 0; s < slices; s++) {
		float *acc = ws + 2 * rows + ((i64)s * rows + r) * HEAD_DIM;
#pragma unroll
		for (int x = lane; x < HEAD_DIM; x += 32)
			acc[x] = 0.0f;
	}
}

extern "C" __global__ void __launch_bounds__(256)
attention_bwd_dq_kernel(const float *ws, elem *dq, int sq, int sq_pad, int slices, i64 dq_sb, i64 dq_ss, i64 dq_sh,
			float scale)
{
	const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5);
	const int head = blockIdx.y, batch = blockIdx.z, hq = gridDim.y;
	const i64 rows = (i64)gridDim.z * hq * sq_pad, r = ((i64)batch * hq + head) * sq_pad + row;
	if (row >= sq)
		return;
	elem *out = dq + batch * dq_sb + row * dq_ss + head * dq_sh;
#if STAGING
	/*
	 * The main kernel's staged order: per 64 rows, 64 x 64 pieces (by
	 * columns), each 8 runs of its 128 threads' 16 bytes: value (r, x) is
	 * d[4 j + 2 (r / 8 % 2) + x % 2] of thread 32 (r / 16 % 4) + 4 (r % 8) + x / 2 % 4
	 * of the piece, j = x / 8 % 8 (the wgmma accumulator layout)
	 */
	const int rr = (int)(r % 64);
	const i64 slab = (r - rr) * HEAD_DIM + 32 * (rr / 16 % 4) * 4 + 4 * (rr % 8) * 4 + 2 * (rr / 8 % 2);
#endif
#pragma unroll
	for (int x = 2 * lane; x < HEAD_DIM; x += 64) {
		float s0 = 0.0f, s1 = 0.0f;
		for (int s = 0; s < slices; s++) { /* in slice order: the same sum every run */
#if STAGING
			const float *acc = ws + 2 * rows + (i64)s * rows * HEAD_DIM + slab + 4096 * (x / 64) +
					   (128 * (x / 8 % 8) + x / 2 % 4) * 4;
			s0 += acc[0];
			s1 += acc[1];
#else
			const float *acc = ws + 2 * rows + ((i64)s * rows + r) * HEAD_DIM;
			s0 += acc[x];
			s1 += acc[x + 1];
#endif
		}
		store_u32(out + x, pack_f2(s0 * scale, s1 * scale));
	}
}

/* ------------------------------------------------------- index arithmetic */

/* attention_wgmma.cu's: byte offset of 16-byte chunk c of row r in a swizzled tile of ROWS rows. */
template <int ROWS>
static __device__ __forceinline__ u32 swizzled(int r, int c)
{
	return (u32)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

static __device__ __forceinline__ int ring_slot(int it) { return it % STAGES; }
static __device__ __forceinline__ u32 ring_parity(int it) { return (u32)(it / STAGES) & 1; }

struct smem_map {
	u32 k, v;                /* the block's K and V */
	u32 q, dout;             /* slot s of Q, of dO at + s * Q_BYTES */
	u32 ds;                  /* dS^T */
#if STAGING
	u32 dq;                  /* dQ's pieces of a tile, 16384 bytes each */
	u32 rows;                /* slot s's lse2 at + 2 s ROW_BYTES, its delta ROW_BYTES on */
#endif
	u32 kv_full, kv_empty;
	u32 q_full, q_empty;     /* slot s's at + 8 s */
};

/* The walk: which key blocks this block of the grid does, and its query tiles in each. */
struct walk {
	int sq, sk, ratio, kv_head, diag, n_blocks, m_blocks;

	/* query tiles of key block nb: the first query block m_begin, nm blocks of each of the ratio heads */
	__device__ __forceinline__ void tiles(int nb, int &m_begin, int &nm) const
	{
		const int n0 = nb * BLOCK_N;
		m_begin = CAUSAL ? imax(n0 - diag, 0) / BLOCK_M : 0; /* rows before n0 - diag see none of these keys */
		nm = m_begin < m_blocks ? m_blocks - m_begin : 0;
	}
};

/* ------------------------------------------------------------ the producer */

/* attention_wgmma.cu's load_tile: ROWS rows from row0 into the swizzled tile at dst, zeros from `valid` on. */
template <int ROWS>
static __device__ __forceinline__ void load_tile(u32 dst, const elem *src, i64 stride, int row0, int valid, int t)
{
	constexpr int ROWS_PER_PASS = 128 / CHUNKS;
	const int c = t % CHUNKS, r = t / CHUNKS;
	const elem *p = src + (i64)(row0 + r) * stride + c * 8;
	const i64 step = (i64)ROWS_PER_PASS * stride;
#pragma unroll 4
	for (int pass = 0; pass < ROWS / ROWS_PER_PASS; pass++) {
		const int rr = r + pass * ROWS_PER_PASS;
		const bool in = row0 + rr < valid;
		cp_async_16(dst + swizzled<ROWS>(rr, c), in ? p : src, in ? 16 : 0); /* a valid address either way */
		p += step;
	}
}

static __device__ __forceinline__ void producer(const smem_map &sm, const walk &w, const elem *qb, i64 q_sh,
						i64 q_ss, const elem *dob, i64 do_sh, i64 do_ss, const elem *kb,
						i64 k_ss, const elem *vb, i64 v_ss, const float *ws_rows, i64 rows,
						int sq_pad, int t)
{
	int it = 0, kb_i = 0;
#pragma unroll 1
	for (int nb = blockIdx.x; nb < w.n_blocks; nb += gridDim.x, kb_i++) {
		mbar_wait(sm.kv_empty, ((u32)kb_i & 1) ^ 1);
		load_tile<BLOCK_N>(sm.k, kb, k_ss, nb * BLOCK_N, w.sk, t);
		load_tile<BLOCK_N>(sm.v, vb, v_ss, nb * BLOCK_N, w.sk, t);
		cp_async_arrive_noinc(sm.kv_full);
		int m_begin, nm;
		w.tiles(nb, m_begin, nm);
#pragma unroll 1
		for (int x = 0; x < nm * w.ratio; x++, it++) {
			const u32 slot = (u32)ring_slot(it);
			const int h = w.kv_head * w.ratio + x / nm, m0 = (m_begin + x % nm) * BLOCK_M;
			mbar_wait(sm.q_empty + 8 * slot, ring_parity(it) ^ 1);
			load_tile<BLOCK_M>(sm.q + slot * Q_BYTES, qb + h * q_sh, q_ss, m0, w.sq, t);
			load_tile<BLOCK_M>(sm.dout + slot * Q_BYTES, dob + h * do_sh, do_ss, m0, w.sq, t);
#if STAGING
			/* the tile's lse2 (threads 0 ..) and delta (BLOCK_M / 4 ..), 16 bytes a thread */
			if (t < BLOCK_M / 2) {
				const float *src = ws_rows + (t >= BLOCK_M / 4 ? rows : 0) + (i64)h * sq_pad + m0 +
						   4 * (t % (BLOCK_M / 4));
				cp_async_16(sm.rows + slot * 2 * ROW_BYTES + 16 * t, src, 16);
			}
#else
			(void)ws_rows, (void)rows, (void)sq_pad;
#endif
			cp_async_arrive_noinc(sm.q_full + 8 * slot);
		}
	}
	cp_async_wait_all(); /* no thread leaves with copies in flight */
}

/* ------------------------------------------------------------ the products */

/*
 * Issues acc = rows^T-side product for this warpgroup's 64 keys: A = 64
 * rows of the key-side tile at a_rows (K or V, BLOCK_N-row panels), B = the
 * query-side slot (Q or dO, BLOCK_M-row panels), both K-major over D, one
 * wgmma per k16 step (32 bytes along a swizzled row of its panel).
 */
static __device__ __forceinline__ void issue_keys_by_queries(float (&acc)[S_ACC], u32 a_rows, u32 b_slot)
{
#pragma unroll
	for (int ks = 0; ks < HEAD_DIM / 16; ks++) {
		const u32 panel = (u32)(ks >> 2), col = (u32)(ks & 3) * 32;
		wgmma_ss(acc, smem_desc(a_rows + panel * (BLOCK_N * 128) + col, 16, 1024),
			 smem_desc(b_slot + panel * (BLOCK_M * 128) + col, 16, 1024), ks > 0);
	}
}

/*
 * Issues acc += A B with A (64 keys x BLOCK_M queries) from registers
 * (a[4 kk ..] the fragment of queries 16 kk ..) and B a query-side slot
 * (rows of queries: k; MN-major, LBO its 64-column panels' stride).
 */
static __device__ __forceinline__ void issue_by_slot(float (&acc)[KV_ACC], const u32 (&a)[P_REGS], u32 slot)
{
#pragma unroll
	for (int kk = 0; kk < BLOCK_M / 16; kk++)
		wgmma_rs(acc, &a[4 * kk], smem_desc(slot + (u32)kk * 16 * 128, BLOCK_M * 128, 1024), 1);
}

/*
 * Issues dq = dS K for query slab mq (64 queries) and head-dim panel dc:
 * A = dS^T's panel mq ([key][query]: MN-major), B = K's panel dc
 * ([key][d]: MN-major), one wgmma per 16 keys (2048 bytes, a whole atom).
 */
static __device__ __forceinline__ void issue_dq(float (&dq)[32], const smem_map &sm, int mq, int dc)
{
#pragma unroll
	for (int ks = 0; ks < BLOCK_N / 16; ks++)
		wgmma_ss_tt(dq, smem_desc(sm.ds + (u32)mq * (BLOCK_N * 128) + (u32)ks * 2048, BLOCK_N * 128, 1024),
			    smem_desc(sm.k + (u32)dc * (BLOCK_N * 128) + (u32)ks * 2048, BLOCK_N * 128, 1024), ks > 0);
}

/* ------------------------------------------------------------ the consumers */

struct block_args {
	float *acc_q;           /* this block's slice of dQ accumulators */
	const float *lse2, *delta;
	elem *dkb, *dvb;        /* this K/V head's dK, dV */
	i64 dk_ss, dv_ss;
	int batch, hq, sq_pad;
	float scale_log2;
};

template <int CI>
static __device__ __forceinline__ void consumer(const smem_map &sm, const walk &w, const block_args &b, int t)
{
	const int warp = t >> 5, lane = t & 31, g = lane >> 2, t4 = lane & 3;
	const bool leader = lane == 0;
	const u32 k_rows = sm.k + (u32)(64 * CI * 128), v_rows = sm.v + (u32)(64 * CI * 128);
	int it = 0, kb_i = 0;

#pragma unroll 1
	for (int nb = blockIdx.x; nb < w.n_blocks; nb += gridDim.x, kb_i++) {
		const int n0 = nb * BLOCK_N;
		const int key = n0 + 64 * CI + 16 * warp + g; /* this thread's first key (h = 0; h = 1: 8 on) */
		float dk[KV_ACC], dv[KV_ACC];
#pragma unroll
		for (int i = 0; i < KV_ACC; i++)
			dk[i] = dv[i] = 0.0f;
		mbar_wait(sm.kv_full, (u32)kb_i & 1);
		fence_proxy_async();
#if STAGING && DETERMINISTIC
		/*
		 * this key block adds to the same accumulators as the last: after
		 * its adds, in order (within a key block every tile's are its own)
		 */
		if (t == 0)
			bulk_wait<0>();
#endif
		int m_begin, nm;
		w.tiles(nb, m_begin, nm);
#pragma unroll 1
		for (int x = 0; x < nm * w.ratio; x++, it++) {
			const u32 slot = (u32)ring_slot(it);
			const int h = w.kv_head * w.ratio + x / nm, m0 = (m_begin + x % nm) * BLOCK_M;
			/* the workspace's row of query m0 */
			const i64 row0 = ((i64)b.batch * b.hq + h) * b.sq_pad + m0;
			const u32 q_slot = sm.q + slot * Q_BYTES, do_slot = sm.dout + slot * Q_BYTES;
			mbar_wait(sm.q_full + 8 * slot, ring_parity(it));
			fence_proxy_async();

			/* S^T = K Q^T and dP^T = V dO^T, one group (OVERLAP: two) */
			float s[S_ACC], dp[S_ACC];
#pragma unroll
			for (int i = 0; i < S_ACC; i++)
				s[i] = dp[i] = 0.0f; /* overwritten (scale_d 0); defined for the compiler */
			wgmma_fence();
			issue_keys_by_queries(s, k_rows, q_slot);
#if STAGING
			const u32 rows_slot = sm.rows + slot * 2 * ROW_BYTES; /* the tile's lse2, then its delta */
#endif
#if OVERLAP
			/*
			 * P^T (into s, and rounded into p) while dP^T is computed, then
			 * dV += P^T dO issued and dS^T computed while it runs, then dK +=
			 * dS^T Q issued (FlashAttention-3's order).  s[4 j + e] is key
			 * `key` + 8 (e / 2), query m0 + 8 j + 2 t4 + e % 2 (the
			 * accumulator layout).
			 */
			wgmma_commit();
			issue_keys_by_queries(dp, v_rows, do_slot);
			wgmma_commit();
			wgmma_wait<1>();
			fence_regs(s);

			const bool need_mask = n0 + BLOCK_N > w.sk || (CAUSAL && n0 + BLOCK_N - 1 - m0 > w.diag);
			u32 p[P_REGS], ds[P_REGS];
#pragma unroll
			for (int j = 0; j < BLOCK_M / 8; j++) {
				float l2[2]; /* of queries 8 j + 2 t4 and + 1 */
				ld_shared_f2(rows_slot + 4 * (8 * j + 2 * t4), l2[0], l2[1]);
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const int qi = 8 * j + 2 * t4 + e, kj = key + 8 * hh, i = 4 * j + 2 * hh + e;
						float x2 = exp2_approx(fmaf(s[i], b.scale_log2, -l2[e]));
						if (need_mask && (kj >= w.sk || (CAUSAL && kj - (m0 + qi) > w.diag)))
							x2 = 0.0f;
						s[i] = x2;
					}
					p[2 * j + hh] = pack_f2(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]);
				}
			}
			wgmma_fence();
			issue_by_slot(dv, p, do_slot);
			wgmma_commit();
			wgmma_wait<1>(); /* dP^T's group; dV's may still run */
			fence_regs(dp);
#pragma unroll
			for (int j = 0; j < BLOCK_M / 8; j++) {
				float dl[2];
				ld_shared_f2(rows_slot + ROW_BYTES + 4 * (8 * j + 2 * t4), dl[0], dl[1]);
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					const int i = 4 * j + 2 * hh;
					ds[2 * j + hh] = pack_f2(s[i] * (dp[i] - dl[0]), s[i + 1] * (dp[i + 1] - dl[1]));
				}
			}
			wgmma_fence();
			issue_by_slot(dk, ds, q_slot);
			wgmma_commit();
#else
			issue_keys_by_queries(dp, v_rows, do_slot);
			wgmma_commit();
			wgmma_wait<0>();
			fence_regs(s);
			fence_regs(dp);

			/*
			 * P^T and dS^T: s[4 j + e] is key `key` + 8 (e / 2), query m0 + 8 j +
			 * 2 t4 + e % 2 (the accumulator layout), rounded in pairs of queries
			 */
			const bool need_mask = n0 + BLOCK_N > w.sk || (CAUSAL && n0 + BLOCK_N - 1 - m0 > w.diag);
			u32 p[P_REGS], ds[P_REGS];
#pragma unroll
			for (int j = 0; j < BLOCK_M / 8; j++) {
#if STAGING
				float l2[2], dl[2]; /* queries 8 j + 2 t4 and + 1 */
				ld_shared_f2(rows_slot + 4 * (8 * j + 2 * t4), l2[0], l2[1]);
				ld_shared_f2(rows_slot + ROW_BYTES + 4 * (8 * j + 2 * t4), dl[0], dl[1]);
#endif
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					float pv[2], dv2[2];
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const int qi = 8 * j + 2 * t4 + e, kj = key + 8 * hh;
						const float sc = s[4 * j + 2 * hh + e];
#if STAGING
						float x2 = exp2_approx(fmaf(sc, b.scale_log2, -l2[e]));
#else
						float x2 = exp2_approx(fmaf(sc, b.scale_log2, -b.lse2[row0 + qi]));
#endif
						if (need_mask && (kj >= w.sk || (CAUSAL && kj - (m0 + qi) > w.diag)))
							x2 = 0.0f;
						pv[e] = x2;
#if STAGING
						dv2[e] = x2 * (dp[4 * j + 2 * hh + e] - dl[e]);
#else
						dv2[e] = x2 * (dp[4 * j + 2 * hh + e] - b.delta[row0 + qi]);
#endif
					}
					p[2 * j + hh] = pack_f2(pv[0], pv[1]);
					ds[2 * j + hh] = pack_f2(dv2[0], dv2[1]);
				}
			}
#endif

			/* every consumer's dQ of the last tile is done reading dS^T; this one's rows of it */
			named_barrier(1, 128 * CONSUMERS);
#pragma unroll
			for (int j = 0; j < BLOCK_M / 8; j++)
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					const int r = 64 * CI + 16 * warp + g + 8 * hh;
					st_shared_u32(sm.ds + swizzled<BLOCK_N>(r, j) + 4 * t4, ds[2 * j + hh]);
				}
			fence_proxy_async(); /* the stores, before the async proxy's reads (wgmma) */

#if !OVERLAP
			/* dV += P^T dO, dK += dS^T Q */
			wgmma_fence();
			issue_by_slot(dv, p, do_slot);
			issue_by_slot(dk, ds, q_slot);
			wgmma_commit();
#endif

#if STAGING
			if (t == 0)
				bulk_wait_read<0>(); /* the last tile's bulk reduce has read this consumer's dQ pieces */
#endif
			named_barrier(1, 128 * CONSUMERS); /* dS^T whole (and, STAGING, the dQ pieces free) */
			/* unrolled: with one consumer, two pieces of D = 128 in a loop spilled (ptxas, nvcc 13.0) */
#pragma unroll
			for (int piece = CI; piece < DQ_PIECES; piece += CONSUMERS) {
				const int mq = piece / (HEAD_DIM / 64), dc = piece % (HEAD_DIM / 64);
				float dq[32];
#pragma unroll
				for (int i = 0; i < 32; i++)
					dq[i] = 0.0f;
				wgmma_fence();
				issue_dq(dq, sm, mq, dc);
				wgmma_commit();
				wgmma_wait<0>();
				fence_regs(dq);
#if STAGING
				/*
				 * the piece into shared memory as it is held, 8 runs of the
				 * warpgroup's 16 bytes a thread (no bank conflict), then added
				 * by one bulk reduce to the accumulators, whose 64-row slabs
				 * keep that order (attention_bwd_dq_kernel reads it back)
				 */
				const u32 buf = sm.dq + (u32)piece * 16384;
#pragma unroll
				for (int i = 0; i < 8; i++)
					st_shared_f4(buf + (u32)(i * 128 + t) * 16, dq[4 * i], dq[4 * i + 1], dq[4 * i + 2],
						     dq[4 * i + 3]);
				fence_proxy_async(); /* the stores, before the bulk copy's reads */
				named_barrier(2 + CI, 128);
				if (t == 0) {
					bulk_reduce_add_f32(b.acc_q + (row0 + 64 * mq) * HEAD_DIM + 4096 * dc, buf, 16384);
					bulk_commit();
				}
#else
				/* dq[4 j + e]: query 64 mq + 16 warp + g + 8 (e / 2), d 64 dc + 8 j + 2 t4 + e % 2 */
				float *acc = b.acc_q + (row0 + 64 * mq + 16 * warp + g) * HEAD_DIM + 64 * dc + 2 * t4;
#pragma unroll
				for (int j = 0; j < 8; j++) {
#pragma unroll
					for (int e = 0; e < 4; e++) {
						float *a = acc + (e >> 1) * 8 * HEAD_DIM + 8 * j + (e & 1);
#if DETERMINISTIC
						*a += dq[4 * j + e];
#else
						red_add_f32(a, dq[4 * j + e]);
#endif
					}
#if DETERMINISTIC
					/*
					 * the next 4 loads not above these stores: hoisted all
					 * together, 32 loaded values would be live beside dK and dV
					 */
					asm volatile("" ::: "memory");
#endif
				}
#endif /* STAGING */
			}
			wgmma_wait<0>(); /* dV's and dK's, when this consumer has no piece of dQ */
			fence_regs(dv);
			fence_regs(dk);
			fence_regs(p);
			fence_regs(ds);
			if (leader)
				mbar_arrive(sm.q_empty + 8 * slot);
		}
		/* the block's last reads of K and V: this warpgroup's dQ wgmma (the others' arrive for theirs) */
		if (leader)
			mbar_arrive(sm.kv_empty);

		/* epilogue: dK (scaled) and dV of this thread's keys and columns */
		const float scale = b.scale_log2 * 0.6931471805599453f;
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			const int kj = key + 8 * hh;
			if (kj >= w.sk)
				continue;
#pragma unroll
			for (int j = 0; j < HEAD_DIM / 8; j++) {
				const int col = 8 * j + 2 * t4;
				store_u32(b.dkb + (i64)kj * b.dk_ss + col,
					  pack_f2(dk[4 * j + 2 * hh] * scale, dk[4 * j + 2 * hh + 1] * scale));
				store_u32(b.dvb + (i64)kj * b.dv_ss + col,
					  pack_f2(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]));
			}
		}
	}
#if STAGING
	if (t == 0)
		bulk_wait<0>(); /* no block leaves with its shared memory still being read */
#endif
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
attention_wgmma_bwd_kernel(const elem *q, const elem *k, const elem *v, const elem *dout, elem *dk, elem *dv,
			   float *ws, int sq, int sk, int ratio, int sq_pad, i64 q_sb, i64 q_ss, i64 q_sh, i64 k_sb,
			   i64 k_ss, i64 k_sh, i64 v_sb, i64 v_ss, i64 v_sh, i64 do_sb, i64 do_ss, i64 do_sh,
			   i64 dk_sb, i64 dk_ss, i64 dk_sh, i64 dv_sb, i64 dv_ss, i64 dv_sh, float scale_log2)
{
	if (dynamic_smem_size() < SMEM_BYTES)
		trap(); /* launched with less than the contract's shared memory */

	/* [K][V][Q slots][dO slots][dS^T][barriers], 1024-aligned */
	smem_map sm;
	sm.k = (smem_u32(dynamic_smem()) + 1023u) & ~1023u;
	sm.v = sm.k + KV_BYTES;
	sm.q = sm.v + KV_BYTES;
	sm.dout = sm.q + STAGES * Q_BYTES;
	sm.ds = sm.dout + STAGES * Q_BYTES;
#if STAGING
	sm.dq = sm.ds + DS_BYTES;
	sm.rows = sm.dq + DQ_PIECES * 16384;
#endif
	sm.kv_full = sm.ds + DS_BYTES + STAGE_BYTES;
	sm.kv_empty = sm.kv_full + 8;
	sm.q_full = sm.kv_empty + 8;
	sm.q_empty = sm.q_full + 8 * STAGES;

	const int kv_head = blockIdx.y, batch = blockIdx.z, hq = gridDim.y * ratio;
	const walk w = { sq, sk, ratio, kv_head, sk - sq, cdiv(sk, BLOCK_N), cdiv(sq, BLOCK_M) };

	/* full: an arrive from each producer thread; empty: one from each consumer warp */
	if (threadIdx.x == 0) {
		mbar_init(sm.kv_full, 128);
		mbar_init(sm.kv_empty, 4 * CONSUMERS);
		for (int s = 0; s < STAGES; s++) {
			mbar_init(sm.q_full + 8 * s, 128);
			mbar_init(sm.q_empty + 8 * s, 4 * CONSUMERS);
		}
		mbar_init_fence();
	}
	__syncthreads();

	const int warpgroup = warp_uniform((int)(threadIdx.x / 128)), t = threadIdx.x % 128;
	if (warpgroup == 0) {
		regs_release<PRODUCER_REGS>();
		const i64 rows = (i64)gridDim.z * hq * sq_pad;
		producer(sm, w, q + batch * q_sb, q_sh, q_ss, dout + batch * do_sb, do_sh, do_ss,
			 k + batch * k_sb + kv_head * k_sh, k_ss, v + batch * v_sb + kv_head * v_sh, v_ss,
			 ws + (i64)batch * hq * sq_pad, rows, sq_pad, t);
		return;
	}
	regs_claim<CONSUMER_REGS>();
	const i64 rows = (i64)gridDim.z * hq * sq_pad;
	const block_args b = { ws + 2 * rows + (DETERMINISTIC ? (i64)blockIdx.x * rows * HEAD_DIM : 0), ws, ws + rows,
			       dk + batch * dk_sb + kv_head * dk_sh, dv + batch * dv_sb + kv_head * dv_sh, dk_ss, dv_ss,
			       batch, hq, sq_pad, scale_log2 };
	if (warpgroup == 1)
		consumer<0>(sm, w, b, t);
#if CONSUMERS >= 2
	else
		consumer<1>(sm, w, b, t);
#endif
}
