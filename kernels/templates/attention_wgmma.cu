/*
 * attention_wgmma.cu - flash attention forward for Hopper (sm_90a only):
 * FlashAttention-3's recipe, kept as simple as correct allows.  Computes,
 * for one (batch, head) and BLOCK_M = 64 CONSUMERS query rows per block,
 *
 *     O = softmax(scale * Q K^T + mask) V,   lse = log(sum_j exp(scale * q.k_j))
 *
 * with the same contract as attention.cu (the mma.sync family): Q is [B,
 * Sq, Hq, D], K and V [B, Sk, Hkv, D], O like Q, each a pointer and strides
 * (in elements) of its batch, sequence and head dimensions, D contiguous;
 * query head h reads K/V head h / ratio (GQA); lse fp32 [B, Hq, Sq],
 * contiguous; causal masking aligned bottom-right (query i sees key j when
 * j <= i + Sk - Sq); a row that sees no key gets O = 0 and lse = -inf.
 *
 * Warp specialisation (NTHREADS = 128 (CONSUMERS + 1)):
 *
 *   warpgroup 0: producer (setmaxnreg down to PRODUCER_REGS)
 *     all 128 threads copy with cp.async, 16 bytes each, into the 128-byte
 *     swizzled layout the wgmma descriptors read (zeros past Sq or Sk); a
 *     thread's cp.async.mbarrier.arrive.noinc on the tile's "full" barrier
 *     fires when its copies have landed (the barrier expects 128 arrivals):
 *       Q's tile once (q_full), then for each K/V tile j, slot j % STAGES:
 *       wait k_empty, copy K_j, arrive k_full; wait v_empty, copy V_j,
 *       arrive v_full
 *   warpgroups 1..CONSUMERS: consumers (setmaxnreg up to CONSUMER_REGS),
 *     consumer c owns query rows 64 c .. 64 c + 63 of the block:
 *       S = Q K_j^T   wgmma m64 n BLOCK_N k16, Q and K from shared memory
 *       mask the last tile (keys past Sk) and causal tiles; online softmax
 *       in fp32 registers (exp2, scale * log2(e) folded into one FMA)
 *       P = S rounded to 16 bits in registers: the accumulator layout of S
 *           is, pair for pair, the A fragment of the RS wgmma
 *       O += P V_j    wgmma m64 n HEAD_DIM k16, A (P) from registers, V from
 *                     shared memory, MN-major (the transpose bit)
 *       each warp's lane 0 arrives on k_empty / v_empty once its warpgroup's
 *       wgmma that read the slot are done (the barriers expect 4 CONSUMERS)
 *     OVERLAP=1 (FlashAttention-3's intra-warpgroup overlap): S_j = Q K_j^T
 *     is issued before O += P_{j-1} V_{j-1}, and tile j's softmax runs while
 *     the latter is in flight; O is rescaled once it has landed.
 *     epilogue: O / rowsum rounded into the warpgroup's own rows of Q's tile
 *     (its Q is no longer read), then 16-byte rows to global memory; lse.
 *
 * Ring phases: tile j uses slot j % STAGES in its (j / STAGES)-th round;
 * the consumers wait on the full barriers with parity (j / STAGES) & 1, the
 * producer on the empty ones with the opposite parity (a fresh barrier's
 * "previous" phase counts as complete, so the first round does not wait).
 *
 * Why cp.async and not TMA: a tensor map (CUtensorMap, 128 bytes) would
 * have to be encoded on the host per call and passed by value, which the
 * op registry's argument slots (8 bytes each) do not carry; 1D bulk copies
 * write contiguous bytes, which the swizzled layout is not, and do not
 * zero-fill past the end.  cp.async writes through the generic proxy, and
 * wgmma reads through the async proxy, so each consumer thread fences
 * (fence.proxy.async) after its wait on a full barrier.
 *
 * Shared memory (dynamic, the base aligned up to 1024 bytes, as the 128-byte
 * swizzle's 8-row atoms need): Q's tile (BLOCK_M rows), STAGES K tiles,
 * STAGES V tiles (BLOCK_N rows each), then the barriers.  A tile of R rows
 * of HEAD_DIM elements is HEAD_DIM / 64 panels of 64 columns; a panel is R
 * rows of 128 bytes, 16-byte chunk c of row r stored at chunk (c ^ (r % 8))
 * of the row: the 128-byte swizzle.  The same layout is K-major for Q (A)
 * and K (B of S = Q K^T: rows are keys, n) and MN-major for V (B of P V:
 * rows are keys, k; each 128-byte row holds 64 consecutive n).
 *
 * Entry point and arguments (attention.cu's, unchanged):
 *     attention_wgmma_fwd_kernel(const elem *q, const elem *k, const elem *v, elem *o, float *lse,
 *                                int sq, int sk, int ratio,
 *                                i64 q_sb, i64 q_ss, i64 q_sh, i64 k_sb, i64 k_ss, i64 k_sh,
 *                                i64 v_sb, i64 v_ss, i64 v_sh, i64 o_sb, i64 o_ss, i64 o_sh,
 *                                float scale_log2)
 * Launch:
 *     grid  = (ceil(Sq / BLOCK_M), Hq, B), block = (NTHREADS)
 *     dynamic shared memory = SMEM_BYTES
 *         = 1024 + (BLOCK_M + 2 STAGES BLOCK_N) HEAD_DIM 2 + (1 + 4 STAGES) 8
 *     (a launch with less traps)
 *
 * Tunables (NVRTC -D): BLOCK_N, STAGES, CONSUMERS, OVERLAP below; from the
 * key: DTYPE_BF16, HEAD_DIM, CAUSAL.
 *
 * Limits: q, k, v, o 16-byte aligned, every stride a multiple of 8
 * elements (the host checks it); Sq, Sk >= 1 and below 2^30; Hq, B <=
 * 65535; sm_90a (wgmma, setmaxnreg): compiled with -arch=sm_90a, runs on
 * sm_90 devices only.
 *
 * ATTENTION_HOST: tests/unit/test-attention-sim.cc compiles this file on
 * the host, with the PTX of attention.cuh and attention_wgmma.cuh done by
 * its simulation (wgmma from the descriptors as the PTX ISA lays out
 * shared memory, mbarrier phases, copies that land late), to run the
 * kernel's logic against a float64 reference without a GPU.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_N
#define BLOCK_N 128 /* keys per K/V tile, the N of S = Q K^T: 64, 80, 128 or 176 */
#endif
#ifndef STAGES
#define STAGES 2 /* K/V tiles in the shared-memory ring */
#endif
#ifndef CONSUMERS
#define CONSUMERS 2 /* consumer warpgroups, 64 query rows each (BLOCK_M = 64 CONSUMERS) */
#endif
#ifndef OVERLAP
#define OVERLAP 1 /* 1: S of tile j+1 is computed while P V of tile j is (FlashAttention-3's overlap) */
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0 /* element type: 0 = f16, 1 = bf16 */
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128 /* D: 64, 128 or 256 */
#endif
#ifndef CAUSAL
#define CAUSAL 0 /* 1: query i sees keys j <= i + Sk - Sq */
#endif
/*
 * > 0: trap after this many failed polls of one mbarrier wait (debugging a
 * hang: a wait here is for a tile's copies or a tile's wgmma, microseconds,
 * and no block waits for another); 0: wait forever.  Off, because the trap
 * path costs registers: with it, ptxas spilled 1-3 KB in configs that fit
 * without (nvcc 13.0).
 */
#ifndef MBAR_SPIN_LIMIT
#define MBAR_SPIN_LIMIT 0
#endif

/* ---------------------------------------------------------- derived sizes */

#define BLOCK_M (64 * CONSUMERS)             /* query rows per block */
#define NTHREADS (128 * (CONSUMERS + 1))     /* the producer warpgroup and the consumers */
#define CHUNKS (HEAD_DIM / 8)                /* 16-byte chunks per row */
#define SWIZZLE 1                            /* attention.cuh's tile_off (unused here) */
#define Q_BYTES (BLOCK_M * HEAD_DIM * 2)
#define KV_BYTES (BLOCK_N * HEAD_DIM * 2)    /* one K or V slot */
#define BAR_BYTES ((1 + 4 * STAGES) * 8)     /* q_full; k_full, k_empty, v_full, v_empty per slot */
#define SMEM_BYTES (1024 + Q_BYTES + 2 * STAGES * KV_BYTES + BAR_BYTES)
#define S_ACC (BLOCK_N / 2)                  /* fp32 accumulators of S per thread */
#define O_ACC (HEAD_DIM / 2)                 /* fp32 accumulators of O per thread */
#define P_REGS (BLOCK_N / 4)                 /* 32-bit registers of P (two 16-bit values each) */
#define WGMMA_SS_N BLOCK_N
#define WGMMA_RS_N HEAD_DIM

/*
 * Registers per thread after setmaxnreg: the producer gives its registers
 * up, the consumers take them.  128 (PRODUCER_REGS + CONSUMERS
 * CONSUMER_REGS) stays within what the block is launched with, NTHREADS x
 * (65536 / NTHREADS, rounded down to 8): setmaxnreg.inc waits for registers
 * that nobody frees otherwise.  FlashAttention-3 runs 24 / 240 (two
 * consumers) and 32 / 160 (three); the producer here issues cp.async from
 * all its threads, so it keeps 40 where that fits.
 */
#define PRODUCER_REGS (CONSUMERS == 3 ? 32 : 40)
#define CONSUMER_REGS (CONSUMERS == 1 ? 240 : CONSUMERS == 2 ? 232 : 160)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128 || HEAD_DIM == 256, "HEAD_DIM is 64, 128 or 256");
static_assert(BLOCK_N == 64 || BLOCK_N == 80 || BLOCK_N == 128 || BLOCK_N == 176,
	      "BLOCK_N is 64, 80, 128 or 176 (attention_wgmma.cuh has those wgmma shapes)");
static_assert(BLOCK_N % 16 == 0, "a K/V tile is whole k16 steps of P V");
static_assert(BLOCK_N % (128 / CHUNKS) == 0, "the producer's passes cover whole tiles");
static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "1 to 3 consumer warpgroups");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES is 2 to 4");
static_assert(OVERLAP == 0 || OVERLAP == 1, "OVERLAP is 0 or 1");
static_assert(CAUSAL == 0 || CAUSAL == 1, "CAUSAL is 0 or 1");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");
static_assert(SMEM_BYTES <= 232448, "227 KiB of shared memory per block on sm_90");
static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= NTHREADS * ((65536 / NTHREADS) / 8 * 8),
	      "setmaxnreg: the warpgroups' registers fit what the block is launched with");

#include "attention.cuh"
#include "attention_wgmma.cuh"

/* ------------------------------------------------------- index arithmetic */

/*
 * Byte offset, in a tile of ROWS rows of HEAD_DIM elements, of 16-byte
 * chunk c (elements 8c .. 8c+7) of row r: panel c / 8 (64 columns: ROWS
 * rows of 128 bytes), row r at r * 128 in it, the chunk at position
 * (c % 8) ^ (r % 8) of the row.  This is the 128-byte swizzle of the PTX
 * ISA's "Shared Memory Matrix Layout" (address bits 4-6 XOR bits 7-9, the
 * tile being 1024-byte aligned), what TMA's SWIZZLE_128B writes and what a
 * descriptor of swizzle mode 1 reads.
 */
template <int ROWS>
static __device__ __forceinline__ u32 swizzled(int r, int c)
{
	return (u32)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* The ring position of tile j: its slot, and the parity of its round. */
static __device__ __forceinline__ int ring_slot(int j) { return j % STAGES; }
static __device__ __forceinline__ u32 ring_parity(int j) { return (u32)(j / STAGES) & 1; }

/* Shared-memory addresses of the tiles and barriers. */
struct smem_map {
	u32 q;                                /* Q's tile, BLOCK_M rows */
	u32 k, v;                             /* slot s of K, of V at + s * KV_BYTES */
	u32 q_full;                           /* Q landed */
	u32 k_full, k_empty, v_full, v_empty; /* slot s's at + 8 s */
};

/* ------------------------------------------------------------ the producer */

/*
 * Starts the copy of ROWS rows of HEAD_DIM elements into the tile at dst:
 * tile row r is src[(row0 + r) * stride ...], zeros where row0 + r >=
 * valid.  Producer thread t copies chunk t % CHUNKS of rows t / CHUNKS,
 * + 128 / CHUNKS, ...
 */
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

/*
 * Warpgroup 0: Q's tile, then every K and V tile of the block in order,
 * each into its slot once the consumers have freed it.  Every thread
 * arrives (asynchronously, when its copies land) on each full barrier.
 */
static __device__ __forceinline__ void producer(const smem_map &sm, const elem *qb, i64 q_ss, const elem *kb,
						i64 k_ss, const elem *vb, i64 v_ss, int m0, int sq, int sk,
						int n_tiles, int t)
{
	load_tile<BLOCK_M>(sm.q, qb, q_ss, m0, sq, t);
	cp_async_arrive_noinc(sm.q_full);
#pragma unroll 1
	for (int j = 0; j < n_tiles; j++) {
		const u32 slot = (u32)ring_slot(j), parity = ring_parity(j);
		mbar_wait(sm.k_empty + 8 * slot, parity ^ 1);
		load_tile<BLOCK_N>(sm.k + slot * KV_BYTES, kb, k_ss, j * BLOCK_N, sk, t);
		cp_async_arrive_noinc(sm.k_full + 8 * slot);
		mbar_wait(sm.v_empty + 8 * slot, parity ^ 1);
		load_tile<BLOCK_N>(sm.v + slot * KV_BYTES, vb, v_ss, j * BLOCK_N, sk, t);
		cp_async_arrive_noinc(sm.v_full + 8 * slot);
	}
	cp_async_wait_all(); /* no thread leaves with copies in flight */
}

/* ------------------------------------------------------------ the products */

/*
 * Issues S = Q K^T for this warpgroup's 64 rows of Q (q_slab: row 64 c of
 * Q's tile, panel 0) and the K tile at k_slot, one wgmma per k16 step of D
 * (a step is 32 bytes along a swizzled row of its panel; the first
 * overwrites S), committed as one group.  Both K-major: LBO unused, SBO
 * 1024 (the next 8 rows).
 */
static __device__ __forceinline__ void issue_qk(float (&s)[S_ACC], u32 q_slab, u32 k_slot)
{
	wgmma_fence(); /* s was last read by the previous tile's softmax */
#pragma unroll
	for (int ks = 0; ks < HEAD_DIM / 16; ks++) {
		const u32 panel = (u32)(ks >> 2), col = (u32)(ks & 3) * 32;
		wgmma_ss(s, smem_desc(q_slab + panel * (BLOCK_M * 128) + col, 16, 1024),
			 smem_desc(k_slot + panel * (BLOCK_N * 128) + col, 16, 1024), ks > 0);
	}
	wgmma_commit();
}

/*
 * Issues O += P V for the V tile at v_slot, one wgmma per k16 step of
 * keys (16 rows of 128 bytes: 2048 bytes on, so every step starts on a
 * 1024-byte atom), committed as one group.  V is MN-major: SBO 1024 (the
 * next 8 keys), LBO the bytes between its 64-column panels.  Registers
 * p[4 kk .. 4 kk + 3] are the A fragment of step kk (pack_p).
 */
static __device__ __forceinline__ void issue_pv(float (&o)[O_ACC], const u32 (&p)[P_REGS], u32 v_slot)
{
	wgmma_fence(); /* o was rescaled and p written since the last wgmma */
#pragma unroll
	for (int kk = 0; kk < BLOCK_N / 16; kk++)
		wgmma_rs(o, &p[4 * kk], smem_desc(v_slot + (u32)kk * 16 * 128, BLOCK_N * 128, 1024), 1);
	wgmma_commit();
}

/* ------------------------------------------------------- masking, softmax */

/*
 * -inf for the scores of keys past Sk and, causal, of keys j > i + diag.
 * s[4 jn + e] is row `row` + 8 (e / 2) (row: this thread's first, 16 warp
 * + lane / 4 of the warpgroup's, as a query index) and key n0 + 8 jn +
 * 2 (lane % 4) + e % 2.
 */
static __device__ __forceinline__ void mask_scores(float (&s)[S_ACC], int row, int n0, int sk, int diag, int t4)
{
#pragma unroll
	for (int jn = 0; jn < BLOCK_N / 8; jn++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int col = n0 + jn * 8 + 2 * t4 + (e & 1);
			bool out = col >= sk;
#if CAUSAL
			out = out || col - (row + 8 * (e >> 1)) > diag;
#else
			(void)row, (void)diag;
#endif
			if (out)
				s[4 * jn + e] = neg_inf();
		}
}

/*
 * Folds one tile's scores into the running softmax of this thread's two
 * rows (h = 0: row lane / 4 of its warp's 16, h = 1: 8 below; row_max in
 * units of log2, scaled; row_sum this thread's share of the row, summed over
 * the quad at the end): the new max over the quad's four lanes (the four
 * threads that hold a row), alpha = 2^(old max - new max) by which O and
 * the sum are rescaled, and s replaced by p = 2^(s * scale_log2 - max).  A
 * row that has seen only masked keys keeps max -inf and subtracts 0
 * instead, so no -inf - -inf is formed.  O is not touched here (with
 * OVERLAP it is still being written by a wgmma): rescale_o does that.
 */
static __device__ __forceinline__ void softmax_update(float (&s)[S_ACC], float (&row_max)[2], float (&row_sum)[2],
						      float (&alpha)[2], float scale_log2)
{
#pragma unroll
	for (int h = 0; h < 2; h++) {
		float mx = neg_inf();
#pragma unroll
		for (int jn = 0; jn < BLOCK_N / 8; jn++)
			mx = fmaxf(mx, fmaxf(s[4 * jn + 2 * h], s[4 * jn + 2 * h + 1]));
		mx = fmaxf(mx, shfl_xor(mx, 1));
		mx = fmaxf(mx, shfl_xor(mx, 2));
		const float m_new = fmaxf(row_max[h], mx * scale_log2);
		const float m_use = m_new == neg_inf() ? 0.0f : m_new;
		alpha[h] = exp2_approx(row_max[h] - m_use);
		row_max[h] = m_new;
		float sum = 0.0f;
#pragma unroll
		for (int jn = 0; jn < BLOCK_N / 8; jn++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const float p = exp2_approx(fmaf(s[4 * jn + 2 * h + e], scale_log2, -m_use));
				s[4 * jn + 2 * h + e] = p;
				sum += p;
			}
		row_sum[h] = row_sum[h] * alpha[h] + sum;
	}
}

/* O's rows times alpha: o[4 jd + e] is row h = e / 2, like s. */
static __device__ __forceinline__ void rescale_o(float (&o)[O_ACC], const float (&alpha)[2])
{
#pragma unroll
	for (int jd = 0; jd < HEAD_DIM / 8; jd++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			o[4 * jd + e] *= alpha[e >> 1];
}

/*
 * P rounded to the element type, as the RS wgmma's A: step kk (keys 16 kk
 * ..) takes, in a[0], row g keys 16 kk + 2 (lane % 4) and +1: s[8 kk],
 * s[8 kk + 1]; a[1] row g + 8: s[8 kk + 2, + 3]; a[2], a[3] the same 8
 * keys on: s[8 kk + 4 .. 7].  So p[i] = (s[2 i], s[2 i + 1]), low half
 * first.
 */
static __device__ __forceinline__ void pack_p(u32 (&p)[P_REGS], const float (&s)[S_ACC])
{
#pragma unroll
	for (int i = 0; i < P_REGS; i++)
		p[i] = pack_f2(s[2 * i], s[2 * i + 1]);
}

/* ------------------------------------------------------------ the consumers */

/* What the consumers share of the block. */
struct block_info {
	int m0;           /* the block's first query row */
	int sq, sk, diag; /* diag = sk - sq: causal, row i sees keys j <= i + diag */
	int n_tiles;      /* K/V tiles the producer loads */
	float scale_log2;
};

/*
 * Consumer warpgroup CI (a constant, so that its descriptors are uniform):
 * query rows r0 = m0 + 64 CI .. r0 + 63.  It computes the tiles its rows
 * see (causal: up to its last row's diagonal, at most the block's) and
 * only waits for and frees the block's tiles past those, so that every
 * barrier phase gets all its arrivals in order.
 */
template <int CI>
static __device__ __forceinline__ void consumer(const smem_map &sm, const block_info &b, elem *ob, i64 o_ss,
						float *lse_rows, int t)
{
	const int warp = t >> 5, lane = t & 31, g = lane >> 2, t4 = lane & 3;
	const bool leader = lane == 0; /* arrives on the empty barriers for its warp */
	const int r0 = b.m0 + 64 * CI;
	const int rows = imin(64, b.sq - r0); /* rows of the problem (<= 0: none) */
	const int row = r0 + 16 * warp + g;   /* this thread's first row (h = 0) */
	int my_tiles = 0;
	if (rows > 0) {
		i64 n_end = b.sk;
#if CAUSAL
		if ((i64)r0 + rows + b.diag < n_end)
			n_end = (i64)r0 + rows + b.diag;
		if (n_end < 0)
			n_end = 0;
#endif
		my_tiles = cdiv((int)n_end, BLOCK_N);
	}
	const u32 q_slab = sm.q + (u32)(64 * CI * 128);

	float o[O_ACC], s[S_ACC], row_max[2], row_sum[2], alpha[2];
	u32 p[P_REGS];
#pragma unroll
	for (int i = 0; i < O_ACC; i++)
		o[i] = 0.0f;
#pragma unroll
	for (int i = 0; i < S_ACC; i++)
		s[i] = 0.0f; /* overwritten by each tile's first wgmma (scale_d 0) */
	row_max[0] = row_max[1] = neg_inf();
	row_sum[0] = row_sum[1] = 0.0f;

	/* Q landed (always awaited: the epilogue writes into its tile) */
	mbar_wait(sm.q_full, 0);
	fence_proxy_async();

#if OVERLAP
	if (my_tiles > 0) {
		/* tile 0: S, softmax, P; O is still 0, so its alpha is not applied */
		mbar_wait(sm.k_full, 0);
		fence_proxy_async();
		issue_qk(s, q_slab, sm.k);
		wgmma_wait<0>();
		fence_regs(s);
		if (leader)
			mbar_arrive(sm.k_empty);
		if (BLOCK_N > b.sk || (CAUSAL && BLOCK_N - 1 - r0 > b.diag))
			mask_scores(s, row, 0, b.sk, b.diag, t4);
		softmax_update(s, row_max, row_sum, alpha, b.scale_log2);
		pack_p(p, s);
	}
	/*
	 * tile j: S_j = Q K_j^T and O += P_{j-1} V_{j-1} in flight together;
	 * S_j's group was committed first, so wait<1> sees it done, and tile
	 * j's softmax runs while P V does.  Finishing P V (wait<0>, free V_{j-1},
	 * O rescaled by tile j's alpha: O then holds tiles < j relative to the
	 * new max, P_j packed) is done at the top of the next iteration, not
	 * after the softmax: in one basic block with it, ptxas hoisted the
	 * WARPGROUP.DEPBAR above the whole softmax (checked in the SASS of
	 * nvcc 13.0), which undid the overlap; it does not move it back across
	 * the loop's back edge.
	 */
#pragma unroll 1
	for (int j = 1; j < my_tiles; j++) {
		if (j > 1) {
			/* P_{j-2} V_{j-2} landed: free its V, rescale O by tile j-1's alpha, pack P_{j-1} */
			wgmma_wait<0>();
			fence_regs(o);
			fence_regs(p);
			if (leader)
				mbar_arrive(sm.v_empty + 8 * (u32)ring_slot(j - 2));
			rescale_o(o, alpha);
			pack_p(p, s);
		}
		const u32 ks = (u32)ring_slot(j), vs = (u32)ring_slot(j - 1);
		mbar_wait(sm.k_full + 8 * ks, ring_parity(j));
		fence_proxy_async();
		issue_qk(s, q_slab, sm.k + ks * KV_BYTES);
		mbar_wait(sm.v_full + 8 * vs, ring_parity(j - 1));
		fence_proxy_async();
		issue_pv(o, p, sm.v + vs * KV_BYTES);
		wgmma_wait<1>();
		fence_regs(s);
		if (leader)
			mbar_arrive(sm.k_empty + 8 * ks);
		const int n0 = j * BLOCK_N;
		if (n0 + BLOCK_N > b.sk || (CAUSAL && n0 + BLOCK_N - 1 - r0 > b.diag))
			mask_scores(s, row, n0, b.sk, b.diag, t4);
		softmax_update(s, row_max, row_sum, alpha, b.scale_log2);
	}
	if (my_tiles > 1) {
		/* the last loop iteration's P V landed; rescale by the last tile's alpha and pack its P */
		wgmma_wait<0>();
		fence_regs(o);
		fence_regs(p);
		if (leader)
			mbar_arrive(sm.v_empty + 8 * (u32)ring_slot(my_tiles - 2));
		rescale_o(o, alpha);
		pack_p(p, s);
	}
	if (my_tiles > 0) {
		/* the last tile's P V */
		const u32 vs = (u32)ring_slot(my_tiles - 1);
		mbar_wait(sm.v_full + 8 * vs, ring_parity(my_tiles - 1));
		fence_proxy_async();
		issue_pv(o, p, sm.v + vs * KV_BYTES);
		wgmma_wait<0>();
		fence_regs(o);
		fence_regs(p);
		if (leader)
			mbar_arrive(sm.v_empty + 8 * vs);
	}
#else
	/* tile j: S = Q K_j^T, softmax, O rescaled, O += P V_j, one after the other */
#pragma unroll 1
	for (int j = 0; j < my_tiles; j++) {
		const u32 slot = (u32)ring_slot(j), parity = ring_parity(j);
		mbar_wait(sm.k_full + 8 * slot, parity);
		fence_proxy_async();
		issue_qk(s, q_slab, sm.k + slot * KV_BYTES);
		wgmma_wait<0>();
		fence_regs(s);
		if (leader)
			mbar_arrive(sm.k_empty + 8 * slot);
		const int n0 = j * BLOCK_N;
		if (n0 + BLOCK_N > b.sk || (CAUSAL && n0 + BLOCK_N - 1 - r0 > b.diag))
			mask_scores(s, row, n0, b.sk, b.diag, t4);
		softmax_update(s, row_max, row_sum, alpha, b.scale_log2);
		rescale_o(o, alpha);
		pack_p(p, s);
		mbar_wait(sm.v_full + 8 * slot, parity);
		fence_proxy_async();
		issue_pv(o, p, sm.v + slot * KV_BYTES);
		wgmma_wait<0>();
		fence_regs(o);
		fence_regs(p);
		if (leader)
			mbar_arrive(sm.v_empty + 8 * slot);
	}
#endif
	/*
	 * The block's tiles past this warpgroup's (causal: its rows end before
	 * the block's last; or it has no rows): wait for each, as if to read
	 * it, and free it.  Waiting first keeps the arrivals in phase order: a
	 * slot's full phase of round u completes only after its empty phase of
	 * round u - 1 did.
	 */
#pragma unroll 1
	for (int j = my_tiles; j < b.n_tiles; j++) {
		const u32 slot = (u32)ring_slot(j), parity = ring_parity(j);
		mbar_wait(sm.k_full + 8 * slot, parity);
		if (leader)
			mbar_arrive(sm.k_empty + 8 * slot);
		mbar_wait(sm.v_full + 8 * slot, parity);
		if (leader)
			mbar_arrive(sm.v_empty + 8 * slot);
	}
	if (rows <= 0)
		return;

	/*
	 * epilogue: O / rowsum, rounded, into this warpgroup's rows of Q's tile
	 * (only its own wgmma read them, and they are done), in the same
	 * swizzled layout: a warp's 4-byte stores of one n8 block fall in 8
	 * different 16-byte chunks of 8 rows, all 32 banks.  Then 16-byte rows
	 * to O.  lse = (max + log2(sum)) ln 2; a row that saw no key has sum 0:
	 * zeros, lse -inf.
	 */
#pragma unroll
	for (int h = 0; h < 2; h++) {
		float sum = row_sum[h];
		sum += shfl_xor(sum, 1);
		sum += shfl_xor(sum, 2);
		const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
		const int r = 64 * CI + 16 * warp + 8 * h + g; /* row of Q's tile */
#pragma unroll
		for (int jd = 0; jd < HEAD_DIM / 8; jd++)
			st_shared_u32(sm.q + swizzled<BLOCK_M>(r, jd) + 4 * t4,
				      pack_f2(o[4 * jd + 2 * h] * inv, o[4 * jd + 2 * h + 1] * inv));
		if (t4 == 0 && row + 8 * h < b.sq) {
			const float ln2 = 0.6931471805599453f;
			lse_rows[row + 8 * h] = sum > 0.0f ? (row_max[h] + log2_approx(sum)) * ln2 : neg_inf();
		}
	}
	named_barrier(1 + CI, 128); /* the warpgroup's rows are in Q's tile */
#pragma unroll 4
	for (int x = t; x < 64 * CHUNKS; x += 128) {
		const int r = x / CHUNKS, c = x % CHUNKS;
		if (r < rows)
			copy_16_shared_to_global(ob + (i64)(r0 + r) * o_ss + c * 8, sm.q + swizzled<BLOCK_M>(64 * CI + r, c));
	}
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
attention_wgmma_fwd_kernel(const elem *q, const elem *k, const elem *v, elem *o, float *lse, int sq, int sk,
			   int ratio, i64 q_sb, i64 q_ss, i64 q_sh, i64 k_sb, i64 k_ss, i64 k_sh, i64 v_sb, i64 v_ss,
			   i64 v_sh, i64 o_sb, i64 o_ss, i64 o_sh, float scale_log2)
{
	if (dynamic_smem_size() < SMEM_BYTES)
		trap(); /* launched with less than the contract's shared memory */

	/* [Q][K slot 0 .. STAGES-1][V slot 0 .. STAGES-1][barriers], 1024-aligned */
	smem_map sm;
	sm.q = (smem_u32(dynamic_smem()) + 1023u) & ~1023u;
	sm.k = sm.q + Q_BYTES;
	sm.v = sm.k + STAGES * KV_BYTES;
	sm.q_full = sm.v + STAGES * KV_BYTES;
	sm.k_full = sm.q_full + 8;
	sm.k_empty = sm.k_full + 8 * STAGES;
	sm.v_full = sm.k_empty + 8 * STAGES;
	sm.v_empty = sm.v_full + 8 * STAGES;

	/* causal: the longest blocks (the last rows) first, so the short ones fill the tail */
	const int m_block = CAUSAL ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
	const int m0 = m_block * BLOCK_M;
	const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / ratio;
	const int diag = sk - sq;

	/* K/V tiles of the block: causal, up to its last row's diagonal (none when that is before key 0) */
	i64 n_end = sk;
#if CAUSAL
	if ((i64)imin(m0 + BLOCK_M, sq) + diag < n_end)
		n_end = (i64)imin(m0 + BLOCK_M, sq) + diag;
	if (n_end < 0)
		n_end = 0;
#endif
	const int n_tiles = cdiv((int)n_end, BLOCK_N);

	/* setup: the barriers (full: an arrive from each producer thread; empty: one from each consumer warp) */
	if (threadIdx.x == 0) {
		mbar_init(sm.q_full, 128);
		for (int s = 0; s < STAGES; s++) {
			mbar_init(sm.k_full + 8 * s, 128);
			mbar_init(sm.v_full + 8 * s, 128);
			mbar_init(sm.k_empty + 8 * s, 4 * CONSUMERS);
			mbar_init(sm.v_empty + 8 * s, 4 * CONSUMERS);
		}
		mbar_init_fence();
	}
	__syncthreads();

	/*
	 * The roles.  The warpgroup index is read from lane 0 so that the
	 * compiler knows it is the same in the whole warp: the branches on it
	 * are uniform, and each consumer is a copy of its own (its index a
	 * constant), as in gemm_wgmma.cu.
	 */
	const int warpgroup = warp_uniform((int)(threadIdx.x / 128)), t = threadIdx.x % 128;
	if (warpgroup == 0) {
		regs_release<PRODUCER_REGS>();
		producer(sm, q + batch * q_sb + head * q_sh, q_ss, k + batch * k_sb + kv_head * k_sh, k_ss,
			 v + batch * v_sb + kv_head * v_sh, v_ss, m0, sq, sk, n_tiles, t);
		return;
	}
	regs_claim<CONSUMER_REGS>();
	const block_info b = { m0, sq, sk, diag, n_tiles, scale_log2 };
	elem *ob = o + batch * o_sb + head * o_sh;
	float *lse_rows = lse + ((i64)batch * gridDim.y + head) * sq;
	if (warpgroup == 1)
		consumer<0>(sm, b, ob, o_ss, lse_rows, t);
#if CONSUMERS >= 2
	else if (warpgroup == 2)
		consumer<1>(sm, b, ob, o_ss, lse_rows, t);
#endif
#if CONSUMERS >= 3
	else
		consumer<2>(sm, b, ob, o_ss, lse_rows, t);
#endif
}
