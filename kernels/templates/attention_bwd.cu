/*
 * attention_bwd.cu - flash attention backward, FlashAttention-2's algorithm
 * on tensor cores through mma.sync (sm_80 or newer): dQ, dK and dV of
 * O = softmax(scale Q K^T + mask) V from Q, K, V, O, dO and the forward's
 * log-sum-exp (attention.cu's lse), in three kernels:
 *
 *   attention_bwd_pre_kernel   per query row: delta = rowsum(dO * O) and
 *                              lse2 = lse * log2(e) (+inf for a row past Sq
 *                              or one that saw no key, so that its P is 0),
 *                              and the fp32 dQ accumulators zeroed
 *   attention_bwd_kernel       per block of BLOCK_N keys of one K/V head: K
 *                              and V stay in shared memory while the query
 *                              tiles of every query head that reads them
 *                              stream by; P = 2^(scale log2(e) q.k - lse2),
 *                              dV += P^T dO, dP = dO V^T, dS = P (dP -
 *                              delta), dK += dS^T Q in registers; dS goes
 *                              through shared memory for dQ += dS K, added
 *                              into the fp32 accumulators
 *   attention_bwd_dq_kernel    dQ = scale * the accumulators, summed over
 *                              their slices in order, to the element type
 *
 * dK and dV of a block's keys are summed over the query heads of its GQA
 * group in registers, and written once (scaled): no atomics.  dQ:
 * DETERMINISTIC=0 adds into one slice of accumulators with fp32 atomics
 * (one block per key block: order not fixed); DETERMINISTIC=1 gives block
 * x of the grid its own slice, which it alone reads and writes, walking the
 * key blocks x, x + gridDim.x, ... in order, and the last kernel sums the
 * slices in order: the same bits on every run.
 *
 * Tensors as attention.cu's: Q, O, dO, dQ [B, Sq, Hq, D], K, V, dK, dV
 * [B, Sk, Hkv, D], each a pointer and the strides of its batch, sequence
 * and head dimensions (D contiguous); lse fp32 [B, Hq, Sq] with the strides
 * of its batch and head dimensions (the forward's: Hq Sq and Sq).  Causal
 * masking is aligned bottom-right.
 *
 * Workspace (fp32, rows = B * Hq * SQ_PAD, SQ_PAD = Sq rounded up to
 * BLOCK_M): lse2 [rows], delta [rows], then the dQ accumulators
 * [slices][rows][D] (row (b * Hq + h) * SQ_PAD + i).
 *
 * Entry points and launches (block = NTHREADS = BLOCK_N / 16 warps for the
 * main kernel, 256 threads for the others):
 *   attention_bwd_pre_kernel(const elem *o, const elem *dout, const float *lse, float *ws, int sq, int sq_pad,
 *                            int slices, i64 o_sb, i64 o_ss, i64 o_sh, i64 do_sb, i64 do_ss, i64 do_sh,
 *                            i64 lse_sb, i64 lse_sh)
 *       grid (SQ_PAD / 8, Hq, B)
 *   attention_bwd_kernel(const elem *q, const elem *k, const elem *v, const elem *dout, elem *dk, elem *dv,
 *                        float *ws, int sq, int sk, int ratio, int sq_pad, q, k, v, dO, dK, dV strides
 *                        (batch, sequence, head each), float scale_log2)
 *       grid (key blocks, or the slices when DETERMINISTIC, Hkv, B); SMEM_BYTES of dynamic shared memory
 *   attention_bwd_dq_kernel(const float *ws, elem *dq, int sq, int sq_pad, int slices, i64 dq_sb, i64 dq_ss,
 *                           i64 dq_sh, float scale)
 *       grid (ceil(Sq / 8), Hq, B)
 *
 * Tunables (NVRTC -D): BLOCK_M, BLOCK_N, STAGES, SWIZZLE below; from the
 * key: DTYPE_BF16, HEAD_DIM (64 or 128), CAUSAL, DETERMINISTIC.
 *
 * Each warp owns 16 keys: its S^T, dP^T and dS^T are [16 keys x BLOCK_M
 * queries] and its dK, dV [16 x D], all in registers; for dQ the warps split
 * the [BLOCK_M x D] tile into BLOCK_M / 16 row tiles of DQ_COLS columns.
 *
 * Limits: as attention.cu's (16-byte aligned rows, Sq, Sk < 2^30, Hq and B
 * at most 65535); HEAD_DIM 64 or 128 (the accumulators of dK and dV take D
 * registers a thread).
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 64 /* query rows per tile streamed past a block's keys */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64 /* keys per block: BLOCK_N / 16 warps */
#endif
#ifndef STAGES
#define STAGES 2 /* query tiles (Q and dO) in shared memory: the one in use and STAGES - 1 in flight */
#endif
#ifndef SWIZZLE
#define SWIZZLE 1 /* 1: tiles of HEAD_DIM-element rows, 16-byte chunks XOR-swizzled; 0: rows padded by 16 bytes */
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

/* ---------------------------------------------------------- derived sizes */

#define WARPS (BLOCK_N / 16)                    /* each owns 16 keys */
#define NTHREADS (WARPS * 32)
#define CHUNKS (HEAD_DIM / 8)                   /* 16-byte chunks per row of a tile */
#define ROW_ELEMS (SWIZZLE ? HEAD_DIM : HEAD_DIM + 8)
#define Q_TILE (BLOCK_M * ROW_ELEMS)            /* elements, and dO's */
#define KV_TILE (BLOCK_N * ROW_ELEMS)           /* elements, and V's */
#define DS_LD (BLOCK_M + 8)                     /* dS^T's rows (keys) of BLOCK_M queries, padded by 16 bytes */
#define DS_TILE (BLOCK_N * DS_LD)
#define SMEM_BYTES ((2 * KV_TILE + 2 * STAGES * Q_TILE + DS_TILE) * 2)
#define DQ_SPLIT (BLOCK_N / BLOCK_M)            /* warps per 16-row tile of dQ */
#define DQ_COLS (HEAD_DIM / DQ_SPLIT)           /* columns of dQ per warp */

static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 32 && BLOCK_N <= 128, "BLOCK_N is 32, 64 or 128");
static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= BLOCK_N && BLOCK_N % BLOCK_M == 0,
	      "the warps split dQ's tile into whole 16-row tiles");
static_assert(DQ_COLS % 16 == 0, "a warp's dQ columns are whole pairs of n8 tiles");
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM is 64 or 128");
static_assert(NTHREADS % CHUNKS == 0, "a load pass covers whole rows");
static_assert(STAGES >= 2 && STAGES <= 3, "STAGES is 2 or 3");
static_assert(SWIZZLE == 0 || SWIZZLE == 1, "SWIZZLE is 0 or 1");
static_assert(CAUSAL == 0 || CAUSAL == 1, "CAUSAL is 0 or 1");
static_assert(DETERMINISTIC == 0 || DETERMINISTIC == 1, "DETERMINISTIC is 0 or 1");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");

#include "attention.cuh"

static __device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

/* Offset (elements) of dS^T's (key, query) in its tile: rows of BLOCK_M + 8. */
static __device__ __forceinline__ int ds_off(int key, int query) { return key * DS_LD + query; }

/* ------------------------------------------------------- pre: delta, lse2 */

#define LOG2E 1.4426950408889634f

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

/* ------------------------------------------------------------ main kernel */

/*
 * acc[ni] (m16n8 tiles of [16 rows x 8 ni + 8 columns]) += A (16 x 16 k-step
 * kk of the rows, given) times the B of a tile whose rows are the k
 * dimension: ldmatrix .trans of rows 16 kk .. of `tile`, columns c0 ..
 * c0 + 8 * NT (B stored [k][n], row-major, as V in the forward).
 */
template <int NT>
static __device__ __forceinline__ void mma_a_bt(float (&acc)[NT][4], const u32 (&a)[4], u32 tile, int kk, int c0,
						int lane)
{
	const int i = lane >> 3, j = lane & 7;
#pragma unroll
	for (int dj = 0; dj < NT / 2; dj++) {
		u32 b[4];
		ldmatrix_x4<true>(b, tile + (u32)tile_off(kk * 16 + (i & 1) * 8 + j, c0 / 8 + dj * 2 + (i >> 1)) * 2);
		mma_16816(acc[2 * dj], a, b[0], b[1]);
		mma_16816(acc[2 * dj + 1], a, b[2], b[3]);
	}
}

/*
 * acc (m16n8 tiles of 16 rows x BLOCK_M columns) = rows 16 warp .. of
 * `rows` (A, [row][d], no .trans) times `cols`^T (B: its rows 0 ..
 * BLOCK_M - 1 are the n dimension, [n][d], no .trans), over D.
 */
static __device__ __forceinline__ void mma_rows_colst(float (&acc)[BLOCK_M / 8][4], u32 rows, u32 cols, int warp,
						      int lane)
{
	const int i = lane >> 3, j = lane & 7;
#pragma unroll
	for (int ni = 0; ni < BLOCK_M / 8; ni++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[ni][e] = 0.0f;
#pragma unroll
	for (int ks = 0; ks < HEAD_DIM / 16; ks++) {
		u32 a[4];
		ldmatrix_x4<false>(a, rows + (u32)tile_off(warp * 16 + (lane & 15), ks * 2 + (lane >> 4)) * 2);
#pragma unroll
		for (int nj = 0; nj < BLOCK_M / 16; nj++) {
			u32 b[4];
			ldmatrix_x4<false>(b, cols + (u32)tile_off(nj * 16 + (i >> 1) * 8 + j, ks * 2 + (i & 1)) * 2);
			mma_16816(acc[2 * nj], a, b[0], b[1]);
			mma_16816(acc[2 * nj + 1], a, b[2], b[3]);
		}
	}
}

/* k16 step kk of a [16 x BLOCK_M] accumulator as an A fragment (rounded): as P in the forward. */
static __device__ __forceinline__ void a_fragment(u32 (&a)[4], const float (&acc)[BLOCK_M / 8][4], int kk)
{
	a[0] = pack_f2(acc[2 * kk][0], acc[2 * kk][1]);
	a[1] = pack_f2(acc[2 * kk][2], acc[2 * kk][3]);
	a[2] = pack_f2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
	a[3] = pack_f2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

/*
 * Adds v to an fp32 dQ accumulator: atomically, or (DETERMINISTIC) as the
 * only writer of its slice, in program order.
 */
static __device__ __forceinline__ void accumulate(float *p, float v)
{
#if DETERMINISTIC
	*p += v;
#else
	atomicAdd(p, v);
#endif
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
attention_bwd_kernel(const elem *q, const elem *k, const elem *v, const elem *dout, elem *dk, elem *dv, float *ws,
		     int sq, int sk, int ratio, int sq_pad, i64 q_sb, i64 q_ss, i64 q_sh, i64 k_sb, i64 k_ss, i64 k_sh,
		     i64 v_sb, i64 v_ss, i64 v_sh, i64 do_sb, i64 do_ss, i64 do_sh, i64 dk_sb, i64 dk_ss, i64 dk_sh,
		     i64 dv_sb, i64 dv_ss, i64 dv_sh, float scale_log2)
{
	unsigned char *smem = dynamic_smem();
	const u32 k_tile = smem_u32(smem);
	const u32 v_tile = k_tile + KV_TILE * 2;
	const u32 q_tiles = v_tile + KV_TILE * 2;
	const u32 do_tiles = q_tiles + STAGES * Q_TILE * 2;
	const u32 ds_tile = do_tiles + STAGES * Q_TILE * 2;

	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
	const int kv_head = blockIdx.y, batch = blockIdx.z, hq = gridDim.y * ratio;
	const i64 rows = (i64)gridDim.z * hq * sq_pad;
	const float *lse2 = ws, *delta = ws + rows;
	float *acc_q = ws + 2 * rows + (DETERMINISTIC ? (i64)blockIdx.x * rows * HEAD_DIM : 0);
	const elem *kb = k + batch * k_sb + kv_head * k_sh;
	const elem *vb = v + batch * v_sb + kv_head * v_sh;
	const int diag = sk - sq; /* causal: row i sees keys j <= i + diag */
	const int n_blocks = cdiv(sk, BLOCK_N), m_blocks = cdiv(sq, BLOCK_M);
	const int mt = warp % (BLOCK_M / 16), dc = warp / (BLOCK_M / 16); /* this warp's part of dQ's tile */

#pragma unroll 1
	for (int nb = blockIdx.x; nb < n_blocks; nb += gridDim.x) {
		const int n0 = nb * BLOCK_N;
		/* causal: rows before n0 - diag see none of these keys; their blocks are skipped */
		const int m_begin = CAUSAL ? imax(n0 - diag, 0) / BLOCK_M : 0;
		const int nm = m_begin < m_blocks ? m_blocks - m_begin : 0;
		const int n_tiles = nm * ratio; /* (query head of the group, query block) pairs */

		/* load: K and V (one commit group), then Q and dO of tiles 0 .. STAGES-2 (a group each) */
		__syncthreads(); /* every warp is done with the last key block's tiles */
		load_rows<BLOCK_N>(k_tile, kb, k_ss, n0, sk, tid);
		load_rows<BLOCK_N>(v_tile, vb, v_ss, n0, sk, tid);
		cp_async_commit();
#pragma unroll
		for (int t = 0; t < STAGES - 1; t++) {
			if (t < n_tiles) {
				const int h = kv_head * ratio + t / nm, m0 = (m_begin + t % nm) * BLOCK_M;
				load_rows<BLOCK_M>(q_tiles + (u32)(t * Q_TILE) * 2, q + batch * q_sb + h * q_sh, q_ss, m0, sq, tid);
				load_rows<BLOCK_M>(do_tiles + (u32)(t * Q_TILE) * 2, dout + batch * do_sb + h * do_sh, do_ss, m0,
						   sq, tid);
			}
			cp_async_commit();
		}

		float dk_acc[HEAD_DIM / 8][4], dv_acc[HEAD_DIM / 8][4];
#pragma unroll
		for (int dt = 0; dt < HEAD_DIM / 8; dt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				dk_acc[dt][e] = dv_acc[dt][e] = 0.0f;

		int slot = 0, refill = STAGES - 1;
#pragma unroll 1
		for (int t = 0; t < n_tiles; t++) {
			cp_async_wait<STAGES - 2>(); /* tile t (and K, V) landed for this thread ... */
			__syncthreads();             /* ... for all, and every warp is done with tile t-1 and dS */
			{
				const int tn = t + STAGES - 1;
				if (tn < n_tiles) {
					const int h = kv_head * ratio + tn / nm, m0 = (m_begin + tn % nm) * BLOCK_M;
					load_rows<BLOCK_M>(q_tiles + (u32)(refill * Q_TILE) * 2, q + batch * q_sb + h * q_sh, q_ss,
							   m0, sq, tid);
					load_rows<BLOCK_M>(do_tiles + (u32)(refill * Q_TILE) * 2, dout + batch * do_sb + h * do_sh,
							   do_ss, m0, sq, tid);
				}
				cp_async_commit();
			}
			const int h = kv_head * ratio + t / nm, m0 = (m_begin + t % nm) * BLOCK_M;
			const i64 row0 = ((i64)batch * hq + h) * sq_pad + m0; /* the workspace's row of query m0 */
			const u32 q_t = q_tiles + (u32)(slot * Q_TILE) * 2, do_t = do_tiles + (u32)(slot * Q_TILE) * 2;

			/* S^T = K Q^T for this warp's 16 keys, then P^T = 2^(S^T scale log2(e) - lse2), masked to 0 */
			float p[BLOCK_M / 8][4];
			mma_rows_colst(p, k_tile, q_t, warp, lane);
			const bool need_mask = n0 + BLOCK_N > sk || (CAUSAL && n0 + BLOCK_N - 1 - m0 > diag);
#pragma unroll
			for (int ni = 0; ni < BLOCK_M / 8; ni++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int query = m0 + ni * 8 + 2 * t4 + (e & 1), key = n0 + warp * 16 + g + (e >> 1) * 8;
					float x = exp2_approx(fmaf(p[ni][e], scale_log2, -lse2[row0 + ni * 8 + 2 * t4 + (e & 1)]));
					if (need_mask && (key >= sk || (CAUSAL && key - query > diag)))
						x = 0.0f;
					p[ni][e] = x;
				}

			/* dV += P^T dO */
#pragma unroll
			for (int kk = 0; kk < BLOCK_M / 16; kk++) {
				u32 a[4];
				a_fragment(a, p, kk);
				mma_a_bt<HEAD_DIM / 8>(dv_acc, a, do_t, kk, 0, lane);
			}

			/* dP^T = V dO^T, then dS^T = P^T (dP^T - delta) in place */
			float ds[BLOCK_M / 8][4];
			mma_rows_colst(ds, v_tile, do_t, warp, lane);
#pragma unroll
			for (int ni = 0; ni < BLOCK_M / 8; ni++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					ds[ni][e] = p[ni][e] * (ds[ni][e] - delta[row0 + ni * 8 + 2 * t4 + (e & 1)]);

			/* dK += dS^T Q, and dS^T into shared memory for dQ */
#pragma unroll
			for (int kk = 0; kk < BLOCK_M / 16; kk++) {
				u32 a[4];
				a_fragment(a, ds, kk);
				mma_a_bt<HEAD_DIM / 8>(dk_acc, a, q_t, kk, 0, lane);
			}
#pragma unroll
			for (int ni = 0; ni < BLOCK_M / 8; ni++)
#pragma unroll
				for (int h2 = 0; h2 < 2; h2++)
					st_shared_u32(ds_tile + (u32)ds_off(warp * 16 + g + h2 * 8, ni * 8 + 2 * t4) * 2,
						      pack_f2(ds[ni][2 * h2], ds[ni][2 * h2 + 1]));
			__syncthreads(); /* dS^T whole */

			/*
			 * dQ (the block's part) = dS K: this warp's 16 queries 16 mt .. and
			 * columns dc DQ_COLS ..; A = dS from dS^T [key][query] by ldmatrix
			 * .trans, B = K [key][d] (row-major: .trans).
			 */
			{
				const int i = lane >> 3, j = lane & 7;
				float dq[DQ_COLS / 8][4];
#pragma unroll
				for (int dt = 0; dt < DQ_COLS / 8; dt++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						dq[dt][e] = 0.0f;
#pragma unroll
				for (int ks = 0; ks < BLOCK_N / 16; ks++) {
					u32 a[4];
					ldmatrix_x4<true>(a, ds_tile + (u32)ds_off(ks * 16 + (i >> 1) * 8 + j, mt * 16 + (i & 1) * 8) * 2);
					mma_a_bt<DQ_COLS / 8>(dq, a, k_tile, ks, dc * DQ_COLS, lane);
				}
#pragma unroll
				for (int dt = 0; dt < DQ_COLS / 8; dt++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int r = mt * 16 + g + (e >> 1) * 8, x = dc * DQ_COLS + dt * 8 + 2 * t4 + (e & 1);
						accumulate(acc_q + (row0 + r) * HEAD_DIM + x, dq[dt][e]);
					}
			}
			slot = slot + 1 == STAGES ? 0 : slot + 1;
			refill = refill + 1 == STAGES ? 0 : refill + 1;
		}

		/*
		 * epilogue: dK (scaled) and dV of this warp's 16 keys, staged through
		 * its own rows of the K and V tiles, stored 16 bytes a lane
		 */
		cp_async_wait<0>();
		__syncthreads(); /* every warp is done with the K and V tiles */
		const float scale = scale_log2 * 0.6931471805599453f;
#pragma unroll
		for (int dt = 0; dt < HEAD_DIM / 8; dt++)
#pragma unroll
			for (int h2 = 0; h2 < 2; h2++) {
				const int r = warp * 16 + g + h2 * 8;
				st_shared_u32(k_tile + (u32)(tile_off(r, dt) + 2 * t4) * 2,
					      pack_f2(dk_acc[dt][2 * h2] * scale, dk_acc[dt][2 * h2 + 1] * scale));
				st_shared_u32(v_tile + (u32)(tile_off(r, dt) + 2 * t4) * 2,
					      pack_f2(dv_acc[dt][2 * h2], dv_acc[dt][2 * h2 + 1]));
			}
		__syncwarp();
		elem *dkb = dk + batch * dk_sb + kv_head * dk_sh, *dvb = dv + batch * dv_sb + kv_head * dv_sh;
		const int keys = imin(16, sk - (n0 + warp * 16));
#pragma unroll 4
		for (int x = lane; x < 16 * CHUNKS; x += 32) {
			const int r = x / CHUNKS, c = x % CHUNKS, key = n0 + warp * 16 + r;
			if (r < keys) {
				copy_16_shared_to_global(dkb + (i64)key * dk_ss + c * 8, k_tile + (u32)tile_off(warp * 16 + r, c) * 2);
				copy_16_shared_to_global(dvb + (i64)key * dv_ss + c * 8, v_tile + (u32)tile_off(warp * 16 + r, c) * 2);
			}
		}
	}
}

/* ------------------------------------------------------------ dQ */

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
#pragma unroll
	for (int x = 2 * lane; x < HEAD_DIM; x += 64) {
		float s0 = 0.0f, s1 = 0.0f;
		for (int s = 0; s < slices; s++) { /* in slice order: the same sum every run */
			const float *acc = ws + 2 * rows + ((i64)s * rows + r) * HEAD_DIM;
			s0 += acc[x];
			s1 += acc[x + 1];
		}
		store_u32(out + x, pack_f2(s0 * scale, s1 * scale));
	}
}
