/*
 * attention.cu - flash attention forward, FlashAttention-2's algorithm on
 * tensor cores through mma.sync (sm_80 or newer), for one (batch, head) and
 * BLOCK_M query rows per block:
 *
 *     O = softmax(scale * Q K^T + mask) V,   lse = log(sum_j exp(scale * q.k_j))
 *
 * Q is [B, Sq, Hq, D], K and V [B, Sk, Hkv, D], O like Q, each given by a
 * pointer and strides (in elements) of its batch, sequence and head
 * dimensions; D is contiguous.  Query head h reads K/V head h / ratio
 * (grouped-query attention, ratio = Hq / Hkv).  lse is fp32 [B, Hq, Sq],
 * contiguous.  Causal masking is aligned bottom-right (FlashAttention-2):
 * query i sees key j when j <= i + Sk - Sq.  A row that sees no key (causal
 * with Sq > Sk) gets O = 0 and lse = -inf, never NaN.
 *
 * The algorithm: Q's tile is loaded once; K and V tiles of BLOCK_N keys
 * stream through STAGES shared-memory buffers by cp.async (K and V in
 * commit groups of their own, so the scores of tile j wait only for K_j);
 * each warp owns WARP_ROWS = BLOCK_M / WARPS rows, computes S = Q K^T for
 * them with m16n8k16 mma (fragments through ldmatrix), keeps the running
 * row max and sum in fp32 registers (exp2 with scale * log2(e) folded in),
 * rescales its O accumulators when the max grows, rounds P to the element
 * type in registers (the S accumulators of two n8 tiles are exactly the A
 * fragment of a k16 step) and accumulates O += P V.  The epilogue divides
 * by the row sum, stages O through Q's shared tile and stores 16-byte rows.
 *
 * Entry point and arguments:
 *     attention_fwd_kernel(const elem *q, const elem *k, const elem *v, elem *o, float *lse,
 *                          int sq, int sk, int ratio,
 *                          i64 q_sb, i64 q_ss, i64 q_sh, i64 k_sb, i64 k_ss, i64 k_sh,
 *                          i64 v_sb, i64 v_ss, i64 v_sh, i64 o_sb, i64 o_ss, i64 o_sh,
 *                          float scale_log2)
 *     (strides: batch, sequence, head; scale_log2 = scale * log2(e), > 0)
 * Launch:
 *     grid  = (ceil(Sq / BLOCK_M), Hq, B), block = (WARPS * 32)
 *     dynamic shared memory = SMEM_BYTES = (BLOCK_M + 2 * STAGES * BLOCK_N) * ROW_ELEMS * 2
 *
 * Tunables (NVRTC -D): BLOCK_M, BLOCK_N, WARPS, STAGES, Q_REGS, SWIZZLE
 * below; from the key: DTYPE_BF16, HEAD_DIM, CAUSAL.
 *
 * Limits: q, k, v, o 16-byte aligned and every stride a multiple of 8
 * elements (the host checks it); Sq, Sk >= 1 and below 2^30; Hq <= 65535,
 * B <= 65535 (grid y, z); sm_80 or newer (cp.async, ldmatrix, bf16 mma).
 *
 * The PTX helpers and the tile loads are attention.cuh's (shared with the
 * backward).  ATTENTION_HOST: tests/unit/test-attention-sim.cc compiles
 * this file on the host, with its own versions of the few helpers that are
 * PTX, to run the kernel's logic lane by lane against a float64 reference
 * without a GPU.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 128 /* query rows per block */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64 /* keys per K/V tile */
#endif
#ifndef WARPS
#define WARPS 8 /* warps per block; each owns BLOCK_M / WARPS query rows (16 or 32) */
#endif
#ifndef STAGES
#define STAGES 2 /* K/V tiles in shared memory: the one in use and STAGES - 1 in flight */
#endif
#ifndef Q_REGS
#define Q_REGS 1 /* 1: Q's fragments stay in registers; 0: read again from shared memory each tile */
#endif
#ifndef SWIZZLE
#define SWIZZLE 1 /* 1: tiles of HEAD_DIM-element rows, 16-byte chunks XOR-swizzled; 0: rows padded by 16 bytes */
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

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WARPS * 32)
#define WARP_ROWS (BLOCK_M / WARPS)          /* query rows per warp */
#define MMA_M (WARP_ROWS / 16)               /* m16 tiles per warp */
#define CHUNKS (HEAD_DIM / 8)                /* 16-byte chunks per row of a tile */
#define ROW_ELEMS (SWIZZLE ? HEAD_DIM : HEAD_DIM + 8)
#define Q_TILE (BLOCK_M * ROW_ELEMS)         /* elements */
#define KV_TILE (BLOCK_N * ROW_ELEMS)        /* elements */
#define SMEM_BYTES ((Q_TILE + 2 * STAGES * KV_TILE) * 2)

static_assert(WARP_ROWS == 16 || WARP_ROWS == 32, "a warp owns one or two m16 tiles of rows");
static_assert(BLOCK_M % WARPS == 0, "the warps split the rows evenly");
static_assert(BLOCK_N % 16 == 0, "a K/V tile is whole k16 steps of P V");
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128 || HEAD_DIM == 256, "HEAD_DIM is 64, 128 or 256");
static_assert(NTHREADS % CHUNKS == 0, "a load pass covers whole rows");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES is 2 to 4");
static_assert(Q_REGS == 0 || Q_REGS == 1, "Q_REGS is 0 or 1");
static_assert(SWIZZLE == 0 || SWIZZLE == 1, "SWIZZLE is 0 or 1");
static_assert(CAUSAL == 0 || CAUSAL == 1, "CAUSAL is 0 or 1");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");

#include "attention.cuh"

/* ----------------------------------------------------------------- S = Q K^T */

/*
 * This warp's scores for one K tile: s[mi][ni] is the m16n8 tile of rows
 * wrow + 16 mi .. and keys 8 ni .. of the tile.  A fragments: Q (row-major,
 * no .trans); B fragments: K stored [key][d] is B = K^T column-major, so
 * ldmatrix without .trans gives {b0, b1} of two n8 tiles at once.
 */
static __device__ __forceinline__ void scores(float (&s)[MMA_M][BLOCK_N / 8][4],
					      const u32 (&qf)[Q_REGS ? MMA_M : 1][Q_REGS ? HEAD_DIM / 16 : 1][4],
					      u32 q_tile, u32 k_tile, int wrow, int lane)
{
	const int i = lane >> 3, j = lane & 7;
#if Q_REGS
	(void)q_tile, (void)wrow;
#else
	(void)qf;
#endif
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int ni = 0; ni < BLOCK_N / 8; ni++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				s[mi][ni][e] = 0.0f;
#pragma unroll
	for (int ks = 0; ks < HEAD_DIM / 16; ks++) {
		u32 a[MMA_M][4];
#pragma unroll
		for (int mi = 0; mi < MMA_M; mi++) {
#if Q_REGS
#pragma unroll
			for (int x = 0; x < 4; x++)
				a[mi][x] = qf[mi][ks][x];
#else
			/* matrix i: rows + (i % 2) * 8, chunk 2 ks + i / 2: a0..a3 of the m16k16 tile */
			ldmatrix_x4<false>(a[mi], q_tile + (u32)tile_off(wrow + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)) * 2);
#endif
		}
#pragma unroll
		for (int nj = 0; nj < BLOCK_N / 16; nj++) {
			u32 b[4];
			/* matrix i: keys 16 nj + (i / 2) * 8 + j, chunk 2 ks + i % 2 */
			ldmatrix_x4<false>(b, k_tile + (u32)tile_off(nj * 16 + (i >> 1) * 8 + j, ks * 2 + (i & 1)) * 2);
#pragma unroll
			for (int mi = 0; mi < MMA_M; mi++) {
				mma_16816(s[mi][2 * nj], a[mi], b[0], b[1]);
				mma_16816(s[mi][2 * nj + 1], a[mi], b[2], b[3]);
			}
		}
	}
}

/* This warp's Q fragments, all k16 steps, into registers (Q_REGS). */
static __device__ __forceinline__ void load_q_fragments(u32 (&qf)[Q_REGS ? MMA_M : 1][Q_REGS ? HEAD_DIM / 16 : 1][4],
							u32 q_tile, int wrow, int lane)
{
#if Q_REGS
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int ks = 0; ks < HEAD_DIM / 16; ks++)
			ldmatrix_x4<false>(qf[mi][ks], q_tile + (u32)tile_off(wrow + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)) * 2);
#else
	(void)qf, (void)q_tile, (void)wrow, (void)lane;
#endif
}

/* ----------------------------------------------------------------- masking */

/*
 * -inf for the scores of keys past Sk and, causal, of keys j > i + diag.
 * Element e of s[mi][ni] is row row0 + 16 mi + lane/4 + 8 (e / 2), key
 * n0 + 8 ni + 2 (lane % 4) + e % 2.
 */
static __device__ __forceinline__ void mask_scores(float (&s)[MMA_M][BLOCK_N / 8][4], int row0, int n0, int sk,
						   int diag, int lane)
{
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int ni = 0; ni < BLOCK_N / 8; ni++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int row = row0 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
				const int col = n0 + ni * 8 + 2 * (lane & 3) + (e & 1);
				bool out = col >= sk;
#if CAUSAL
				out = out || col - row > diag;
#else
				(void)row, (void)diag;
#endif
				if (out)
					s[mi][ni][e] = neg_inf();
			}
}

/* ---------------------------------------------------------- online softmax */

/*
 * Folds one tile's scores into the running softmax of this thread's rows
 * (row_max in units of log2, scaled; row_sum this thread's share of the
 * row, summed over the quad at the end): the new max over the quad's four
 * lanes, O and the sum rescaled by 2^(old max - new max), and s replaced by
 * p = 2^(s * scale_log2 - max), in fp32.  A row that has seen only masked
 * keys keeps max -inf and subtracts 0 instead, so no -inf - -inf is formed.
 */
static __device__ __forceinline__ void softmax_update(float (&s)[MMA_M][BLOCK_N / 8][4],
						      float (&acc)[MMA_M][HEAD_DIM / 8][4],
						      float (&row_max)[MMA_M][2], float (&row_sum)[MMA_M][2],
						      float scale_log2)
{
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float mx = neg_inf();
#pragma unroll
			for (int ni = 0; ni < BLOCK_N / 8; ni++)
				mx = fmaxf(mx, fmaxf(s[mi][ni][2 * h], s[mi][ni][2 * h + 1]));
			mx = fmaxf(mx, shfl_xor(mx, 1));
			mx = fmaxf(mx, shfl_xor(mx, 2));
			const float m_new = fmaxf(row_max[mi][h], mx * scale_log2);
			const float m_use = m_new == neg_inf() ? 0.0f : m_new;
			const float alpha = exp2_approx(row_max[mi][h] - m_use);
			row_max[mi][h] = m_new;
			float sum = 0.0f;
#pragma unroll
			for (int ni = 0; ni < BLOCK_N / 8; ni++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const float p = exp2_approx(fmaf(s[mi][ni][2 * h + e], scale_log2, -m_use));
					s[mi][ni][2 * h + e] = p;
					sum += p;
				}
			row_sum[mi][h] = row_sum[mi][h] * alpha + sum;
#pragma unroll
			for (int dt = 0; dt < HEAD_DIM / 8; dt++) {
				acc[mi][dt][2 * h] *= alpha;
				acc[mi][dt][2 * h + 1] *= alpha;
			}
		}
}

/* ------------------------------------------------------------------ O += P V */

/*
 * P (the probabilities in s, rounded to elements) times the V tile.  The
 * accumulators of n8 tiles 2 kk and 2 kk + 1 are, element for element, the
 * A fragment of k16 step kk: {c0 c1 | c2 c3} of the first are a0 a1 | a2 a3
 * (rows g, g + 8, keys 2t..), the second's a4..a7 (keys 8 + 2t..).  V stored
 * [key][d] is B row-major: ldmatrix .trans gives {b0, b1} of two n8 tiles.
 */
static __device__ __forceinline__ void accumulate_pv(float (&acc)[MMA_M][HEAD_DIM / 8][4],
						     const float (&s)[MMA_M][BLOCK_N / 8][4], u32 v_tile, int lane)
{
	const int i = lane >> 3, j = lane & 7;
#pragma unroll
	for (int kk = 0; kk < BLOCK_N / 16; kk++) {
		u32 a[MMA_M][4];
#pragma unroll
		for (int mi = 0; mi < MMA_M; mi++) {
			a[mi][0] = pack_f2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
			a[mi][1] = pack_f2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
			a[mi][2] = pack_f2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
			a[mi][3] = pack_f2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
		}
#pragma unroll
		for (int dj = 0; dj < HEAD_DIM / 16; dj++) {
			u32 b[4];
			/* matrix i: keys 16 kk + (i % 2) * 8 + j, chunk 2 dj + i / 2 */
			ldmatrix_x4<true>(b, v_tile + (u32)tile_off(kk * 16 + (i & 1) * 8 + j, dj * 2 + (i >> 1)) * 2);
#pragma unroll
			for (int mi = 0; mi < MMA_M; mi++) {
				mma_16816(acc[mi][2 * dj], a[mi], b[0], b[1]);
				mma_16816(acc[mi][2 * dj + 1], a[mi], b[2], b[3]);
			}
		}
	}
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
attention_fwd_kernel(const elem *q, const elem *k, const elem *v, elem *o, float *lse, int sq, int sk, int ratio,
		     i64 q_sb, i64 q_ss, i64 q_sh, i64 k_sb, i64 k_ss, i64 k_sh, i64 v_sb, i64 v_ss, i64 v_sh,
		     i64 o_sb, i64 o_ss, i64 o_sh, float scale_log2)
{
	unsigned char *smem = dynamic_smem();
	const u32 q_tile = smem_u32(smem);
	const u32 k_tiles = q_tile + Q_TILE * 2;
	const u32 v_tiles = k_tiles + STAGES * KV_TILE * 2;

	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int wrow = warp * WARP_ROWS; /* this warp's first row in the block */

	/* causal: the longest blocks (the last rows) first, so the short ones fill the tail */
	const int m_block = CAUSAL ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
	const int m0 = m_block * BLOCK_M;
	const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / ratio;
	const elem *qb = q + batch * q_sb + head * q_sh;
	const elem *kb = k + batch * k_sb + kv_head * k_sh;
	const elem *vb = v + batch * v_sb + kv_head * v_sh;
	const int diag = sk - sq; /* causal: row i sees keys j <= i + diag */

	/* K/V tiles this block reads: causal, up to the last row's diagonal (none when it is before key 0) */
	i64 n_end = sk;
#if CAUSAL
	if ((i64)m0 + BLOCK_M + diag < n_end)
		n_end = (i64)m0 + BLOCK_M + diag;
	if (n_end < 0)
		n_end = 0;
#endif
	const int n_tiles = cdiv((int)n_end, BLOCK_N);

	/* load: Q, then K and V of tiles 0 .. STAGES-2, each its own commit group (empty past the last tile) */
	load_rows<BLOCK_M>(q_tile, qb, q_ss, m0, sq, tid);
	cp_async_commit();
#pragma unroll
	for (int t = 0; t < STAGES - 1; t++) {
		if (t < n_tiles)
			load_rows<BLOCK_N>(k_tiles + (u32)(t * KV_TILE) * 2, kb, k_ss, t * BLOCK_N, sk, tid);
		cp_async_commit();
		if (t < n_tiles)
			load_rows<BLOCK_N>(v_tiles + (u32)(t * KV_TILE) * 2, vb, v_ss, t * BLOCK_N, sk, tid);
		cp_async_commit();
	}

	float acc[MMA_M][HEAD_DIM / 8][4];
	float row_max[MMA_M][2], row_sum[MMA_M][2];
	u32 qf[Q_REGS ? MMA_M : 1][Q_REGS ? HEAD_DIM / 16 : 1][4];
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++) {
#pragma unroll
		for (int dt = 0; dt < HEAD_DIM / 8; dt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mi][dt][e] = 0.0f;
		row_max[mi][0] = row_max[mi][1] = neg_inf();
		row_sum[mi][0] = row_sum[mi][1] = 0.0f;
	}

	/*
	 * main loop.  Groups committed before tile j's K: Q, then K and V of
	 * every tile before it; after it, V_j and both of tiles j+1 .. j+STAGES-2
	 * (2 STAGES - 3 groups).  Refilling the slot of tile j-1 with tile
	 * j+STAGES-1 adds two more before V_j is awaited (2 STAGES - 2 after it).
	 */
	int slot = 0, refill_slot = STAGES - 1; /* j % STAGES and (j + STAGES - 1) % STAGES */
#pragma unroll 1
	for (int j = 0; j < n_tiles; j++) {
		cp_async_wait<2 * STAGES - 3>(); /* K_j (and Q) landed for this thread ... */
		__syncthreads();                 /* ... for every thread, and every warp is done with tile j-1 */
		if (j == 0)
			load_q_fragments(qf, q_tile, wrow, lane);
		{
			const int t = j + STAGES - 1;
			if (t < n_tiles)
				load_rows<BLOCK_N>(k_tiles + (u32)(refill_slot * KV_TILE) * 2, kb, k_ss, t * BLOCK_N, sk, tid);
			cp_async_commit();
			if (t < n_tiles)
				load_rows<BLOCK_N>(v_tiles + (u32)(refill_slot * KV_TILE) * 2, vb, v_ss, t * BLOCK_N, sk, tid);
			cp_async_commit();
		}

		float s[MMA_M][BLOCK_N / 8][4];
		scores(s, qf, q_tile, k_tiles + (u32)(slot * KV_TILE) * 2, wrow, lane);

		/* only tiles that reach past Sk or, causal, past this warp's first row's diagonal need a mask */
		const int n0 = j * BLOCK_N;
		bool need_mask = n0 + BLOCK_N > sk;
#if CAUSAL
		need_mask = need_mask || n0 + BLOCK_N - 1 - (m0 + wrow) > diag;
#endif
		if (need_mask)
			mask_scores(s, m0 + wrow, n0, sk, diag, lane);
		softmax_update(s, acc, row_max, row_sum, scale_log2);

		cp_async_wait<2 * STAGES - 2>(); /* V_j landed for this thread ... */
		__syncthreads();                 /* ... and for every thread */
		accumulate_pv(acc, s, v_tiles + (u32)(slot * KV_TILE) * 2, lane);

		slot = slot + 1 == STAGES ? 0 : slot + 1;
		refill_slot = refill_slot + 1 == STAGES ? 0 : refill_slot + 1;
	}

	/*
	 * epilogue: every copy landed (with no tile, Q's may still have been in
	 * flight) and every warp past its last read.  Each warp writes its rows
	 * of O into its own rows of Q's tile, then stores them 16 bytes a lane.
	 */
	cp_async_wait<0>();
	__syncthreads();
	const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float sum = row_sum[mi][h];
			sum += shfl_xor(sum, 1);
			sum += shfl_xor(sum, 2);
			/* sum is 0 only for a row that saw no key: its accumulators are 0 too */
			const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
			const int r = wrow + mi * 16 + h * 8 + g;
#pragma unroll
			for (int dt = 0; dt < HEAD_DIM / 8; dt++)
				st_shared_u32(q_tile + (u32)(tile_off(r, dt) + 2 * t4) * 2,
					      pack_f2(acc[mi][dt][2 * h] * inv, acc[mi][dt][2 * h + 1] * inv));
			if (t4 == 0 && m0 + r < sq) {
				const float ln2 = 0.6931471805599453f;
				lse[((i64)batch * gridDim.y + head) * sq + m0 + r] =
					sum > 0.0f ? (row_max[mi][h] + log2_approx(sum)) * ln2 : neg_inf();
			}
		}
	__syncwarp();
	elem *ob = o + batch * o_sb + head * o_sh;
	const int rows = imin(WARP_ROWS, sq - (m0 + wrow));
#pragma unroll 4
	for (int x = lane; x < WARP_ROWS * CHUNKS; x += 32) {
		const int r = x / CHUNKS, c = x % CHUNKS;
		if (r < rows)
			copy_16_shared_to_global(ob + (i64)(m0 + wrow + r) * o_ss + c * 8,
						 q_tile + (u32)tile_off(wrow + r, c) * 2);
	}
}
