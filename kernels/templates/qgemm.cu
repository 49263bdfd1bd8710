/*
 * qgemm.cu - ktune's weight-quantized GEMM on tensor cores: a multistage
 * cp.async pipeline brings tiles of A and of the packed weights into shared
 * memory; each warp dequantises its weights from there straight into mma
 * fragments (fp32, then rounded to the element type) and runs mma.sync.
 *
 *     c[i, j] = sum over l of a[i, l] * w[j, l]  (+ bias[j]),  0 <= i < m, 0 <= j < n
 *
 * with w the dequantised packed weight (quant.cuh), fp32 accumulation, one
 * rounding of each dequantised weight to the element type (the mma's
 * operand) and one of the result.
 *
 * Entry points:
 *     qgemm_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros,
 *                  const elem *bias, elem *c, float *partials, long long m, long long n,
 *                  long long k, long long lda, long long ldc, int zero_per_group)
 *     quant_reduce_kernel (quant.cuh)
 * as qgemv.cu's.
 *
 * Launch:
 *     block = (WARPS_M * WARPS_N * WARPS_K * 32, 1, 1)
 *     grid  = (ceil(n / BLOCK_N), min(ceil(m / BLOCK_M), 65535), split); a
 *             block walks the tiles of rows in steps of gridDim.y
 *     split = 1: the block writes c (plus bias); split > 1: blockIdx.z takes
 *             the split'th part of the k-tiles and writes partials[z][i][j]
 *             (fp32 [split][m][n]); quant_reduce_kernel adds them in order
 *     static shared memory only (SMEM_BYTES <= 48 KiB)
 *
 * Warps: WARPS_M x WARPS_N own BLOCK_M / WARPS_M x BLOCK_N / WARPS_N of the
 * tile each; WARPS_K of them share each such part, taking every WARPS_K'th
 * k16 step of a stage, and add their sums through shared memory at the end
 * in a fixed order (many bytes in flight for a short M, deterministically).
 *
 * Shared memory per stage: the A tile [BLOCK_M][BLOCK_K + 8] (padded: each
 * ldmatrix conflict-free), the packed tile [BLOCK_N][W_LD bytes] (a row's
 * BLOCK_K * BITS / 8 bytes, padded so that the 8 rows a fragment reads fall
 * in distinct banks), and each row's (mul, add) per group of the stage
 * (qpair, 8 bytes), which the threads load into registers while the stage before
 * it computes and store just before the barrier.
 *
 * Tunables: BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, WARPS_K, STAGES
 * (below); DTYPE, BITS, GROUP, MODE (quant.cuh).
 *
 * Limits: a and wq 16-byte aligned, lda a multiple of 8; k a multiple of 32
 * and of GROUP (a k-tile past k reads zeros); any m, n; c must not overlap
 * an input; sm_80 or newer.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 16 /* rows of c per block */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64 /* columns of c (rows of w) per block */
#endif
#ifndef BLOCK_K
#define BLOCK_K 64 /* depth of one pipeline stage */
#endif
#ifndef WARPS_M
#define WARPS_M 1 /* warps along M */
#endif
#ifndef WARPS_N
#define WARPS_N 2 /* warps along N */
#endif
#ifndef WARPS_K
#define WARPS_K 2 /* warps sharing a part of the tile, splitting each stage's k16 steps */
#endif
#ifndef STAGES
#define STAGES 3 /* shared-memory buffers in the cp.async pipeline, >= 2 */
#endif

#include "quant.cuh"

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WARPS_M * WARPS_N * WARPS_K * 32)
#define WARP_M (BLOCK_M / WARPS_M) /* rows of c per warp */
#define WARP_N (BLOCK_N / WARPS_N) /* columns of c per warp */
#define MMA_M (WARP_M / 16)
#define MMA_N (WARP_N / 8)
#define K_STEPS (BLOCK_K / 16)

#define A_LD (BLOCK_K + 8)                 /* elements */
#define A_STAGE (BLOCK_M * A_LD * 2)       /* bytes */
#define W_ROW (BLOCK_K * BITS / 8)         /* bytes of a row per stage */
#define W_CHUNK (W_ROW < 16 ? W_ROW : 16)  /* bytes per cp.async */
#define W_LD (W_ROW >= 32 ? W_ROW + 16 : W_ROW) /* bytes: 4 x an odd number of words from 32 up */
#define W_STAGE (BLOCK_N * W_LD)
/* groups a stage spans: GROUP and BLOCK_K are powers of two */
#define STAGE_GROUPS (GROUP != 0 && BLOCK_K > GROUP ? BLOCK_K / GROUP : 1)
#define S_STAGE (BLOCK_N * STAGE_GROUPS * 8)
#define STAGE_BYTES (A_STAGE + W_STAGE + S_STAGE)
#define PIPE_BYTES (STAGES * STAGE_BYTES)
#define ACC (MMA_M * MMA_N * 4) /* accumulators per lane */
#define RED_BYTES ((WARPS_K - 1) * WARPS_M * WARPS_N * 32 * ACC * 4)
#define SMEM_BYTES (PIPE_BYTES > RED_BYTES ? PIPE_BYTES : RED_BYTES)
/* (mul, add) pairs each thread loads per stage */
#define S_PER_THREAD ((BLOCK_N * STAGE_GROUPS + NTHREADS - 1) / NTHREADS)

static_assert(BLOCK_M % (WARPS_M * 16) == 0, "a warp owns whole m16 tiles");
static_assert(BLOCK_N % (WARPS_N * 8) == 0, "a warp owns whole n8 tiles");
static_assert(BLOCK_K % 32 == 0 && BLOCK_K <= 256, "a stage is 32 to 256 deep, whole words of every format");
static_assert(K_STEPS % WARPS_K == 0, "the k16 steps of a stage split evenly among WARPS_K");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES is 2 to 8");
static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory is at most 48 KiB");
static_assert(A_STAGE % 16 == 0 && W_STAGE % 16 == 0, "stages stay 16-byte aligned");

/* ------------------------------------------------------------------- load */

/* The raw scale and zero of one (row, group) of a stage, in flight in registers. */
struct meta {
	elem s, z;
};

/* A group's qparams as shared memory holds them: one 8-byte load. */
struct __align__(8) qpair {
	float mul, add;
};

/*
 * Issues the copies of k-tile kt into stage slot: A rows m0.. and w rows
 * n0.. (zeros past m, n and k), and loads the stage's scales and zeros into
 * mt (stored to shared memory later by store_meta).
 */
static __device__ __forceinline__ void load_stage(unsigned char *stage, int kt, const elem *a, const u32 *wq,
						  const elem *scales, const elem *zeros, i64 m, i64 n, i64 k,
						  i64 lda, i64 rw, i64 groups, int zero_per_group, i64 m0, i64 n0,
						  int tid, u64 policy, meta mt[S_PER_THREAD])
{
	const i64 k0 = (i64)kt * BLOCK_K;
	const u32 a_dst = smem_u32(stage), w_dst = a_dst + A_STAGE;

	/* A: BLOCK_M rows of BLOCK_K / 8 16-byte chunks */
	constexpr int A_CHUNKS = BLOCK_K / 8;
#pragma unroll
	for (int i = tid; i < BLOCK_M * A_CHUNKS; i += NTHREADS) {
		const int r = i / A_CHUNKS, ch = i % A_CHUNKS;
		const i64 row = m0 + r, col = k0 + ch * 8;
		const bool ok = row < m && col < k;
		cp_async<16>(a_dst + (u32)(r * A_LD + ch * 8) * 2, ok ? (const void *)(a + row * lda + col) : (const void *)a,
			     ok ? 16 : 0);
	}

	/* w: BLOCK_N rows of W_ROW bytes, in W_CHUNK-byte copies */
	constexpr int W_CHUNKS = W_ROW / W_CHUNK;
	const i64 row_bytes = k * BITS / 8; /* bytes of a row that hold weights */
#pragma unroll
	for (int i = tid; i < BLOCK_N * W_CHUNKS; i += NTHREADS) {
		const int r = i / W_CHUNKS, ch = i % W_CHUNKS;
		const i64 row = n0 + r, off = k0 * BITS / 8 + ch * W_CHUNK;
		const i64 left = row < n ? row_bytes - off : 0;
		const int bytes = left <= 0 ? 0 : left < W_CHUNK ? (int)left : W_CHUNK;
		const void *src = bytes ? (const void *)((const unsigned char *)(wq + row * rw) + off) : (const void *)wq;
		const u32 dst = w_dst + (u32)(r * W_LD + ch * W_CHUNK);
		if (W_CHUNK == 16)
			cp_async_16_policy(dst, src, bytes, policy);
		else
			cp_async<W_CHUNK>(dst, src, bytes);
	}

	/* scales and zeros of the stage's groups, into registers */
#pragma unroll
	for (int s = 0; s < S_PER_THREAD; s++) {
		const int i = tid + s * NTHREADS, r = i / STAGE_GROUPS, g = i % STAGE_GROUPS;
		const i64 row = n0 + r, grp = GROUP ? k0 / GROUP + g : 0;
		mt[s].s = mt[s].z = 0;
		if (i < BLOCK_N * STAGE_GROUPS && row < n && grp < groups) {
			if (HAS_SCALE)
				mt[s].s = scales[row * groups + grp];
			if (HAS_ZERO)
				mt[s].z = zeros[zero_per_group ? row * groups + grp : 0];
		}
	}
}

/* The stage's (mul, add) pairs into shared memory, from what load_stage brought. */
static __device__ __forceinline__ void store_meta(unsigned char *stage, int tid, const meta mt[S_PER_THREAD])
{
	qpair *dst = (qpair *)(stage + A_STAGE + W_STAGE);
#pragma unroll
	for (int s = 0; s < S_PER_THREAD; s++) {
		const int i = tid + s * NTHREADS;
		if (i < BLOCK_N * STAGE_GROUPS) {
			const qparams p = qparams_of(mt[s].s, mt[s].z);
			dst[i].mul = p.mul;
			dst[i].add = p.add;
		}
	}
}

/* -------------------------------------------------------------------- mma */

/*
 * The B fragment of row `row` (of the stage's w tile) for k16 step ks: b[0]
 * = weights 2t, 2t+1 and b[1] = 2t+8, 2t+9 of the step (t = lane % 4), low
 * half first, dequantised and rounded to the element type.
 */
static __device__ __forceinline__ void b_fragment(const unsigned char *stage, int row, int ks, int t, u32 b[2])
{
	const u32 *w = (const u32 *)(stage + A_STAGE + row * W_LD);
	const qpair *sm = (const qpair *)(stage + A_STAGE + W_STAGE);
	const int g = STAGE_GROUPS > 1 ? ks * 16 / GROUP : 0;
	const qpair mp = sm[row * STAGE_GROUPS + g];
	const qparams p = { mp.mul, mp.add };
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int bit = (ks * 16 + 2 * t + 8 * h) * BITS; /* of the pair's first weight, in the stage's row */
		const u32 x = w[bit / 32] >> (bit % 32);
		b[h] = pack_pair(dequant(x & QMASK, p), dequant((x >> BITS) & QMASK, p));
	}
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
qgemm_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros, const elem *bias, elem *c,
	     float *partials, long long m, long long n, long long k, long long lda, long long ldc,
	     int zero_per_group)
{
	__shared__ __align__(16) unsigned char smem[SMEM_BYTES];

	const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const int wk = warp / (WARPS_M * WARPS_N), wmn = warp % (WARPS_M * WARPS_N);
	const int wm = wmn / WARPS_N, wn = wmn % WARPS_N;
	const int g = lane / 4, t = lane % 4;

	const i64 rw = (k / PER_WORD + 3) / 4 * 4;
	const i64 groups = GROUP ? k / GROUP : 1;
	const i64 n0 = (i64)blockIdx.x * BLOCK_N;
	const int split = gridDim.z, z = blockIdx.z;
	const int k_tiles = (int)((k + BLOCK_K - 1) / BLOCK_K);
	const int kt_begin = (int)((i64)k_tiles * z / split), kt_end = (int)((i64)k_tiles * (z + 1) / split);
	const int nkt = kt_end - kt_begin;
	const i64 m_tiles = (m + BLOCK_M - 1) / BLOCK_M;
	const u64 policy = evict_first_policy();

	for (i64 mt_i = blockIdx.y; mt_i < m_tiles; mt_i += gridDim.y) {
		const i64 m0 = mt_i * BLOCK_M;
		float acc[MMA_M][MMA_N][4];
#pragma unroll
		for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
			for (int nj = 0; nj < MMA_N; nj++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[mi][nj][e] = 0.0f;

		/* prologue: stages 0 .. STAGES-2, one commit group each */
		meta mt[S_PER_THREAD];
#pragma unroll 1
		for (int s = 0; s < STAGES - 1; s++) {
			if (s < nkt) {
				load_stage(smem + s * STAGE_BYTES, kt_begin + s, a, wq, scales, zeros, m, n, k, lda, rw,
					   groups, zero_per_group, m0, n0, tid, policy, mt);
				store_meta(smem + s * STAGE_BYTES, tid, mt);
			}
			cp_async_commit();
		}

		/*
		 * main loop: at the top of iteration it, tile it has landed for
		 * everyone and the slot of tile it-1 is free; refill it with tile
		 * it + STAGES - 1, whose scales go to shared memory at the bottom,
		 * before the next barrier.
		 */
#pragma unroll 1
		for (int it = 0; it < nkt; it++) {
			cp_async_wait<STAGES - 2>();
			__syncthreads();
			const int next = it + STAGES - 1;
			unsigned char *refill = smem + (next % STAGES) * STAGE_BYTES;
			if (next < nkt)
				load_stage(refill, kt_begin + next, a, wq, scales, zeros, m, n, k, lda, rw, groups,
					   zero_per_group, m0, n0, tid, policy, mt);
			cp_async_commit();

			const unsigned char *stage = smem + (it % STAGES) * STAGE_BYTES;
			const u32 a_stage = smem_u32(stage);
#pragma unroll
			for (int ks = wk; ks < K_STEPS; ks += WARPS_K) {
				u32 af[MMA_M][4], bf[MMA_N][2];
#pragma unroll
				for (int mi = 0; mi < MMA_M; mi++) {
					/* matrix lane/8: rows (lane%16) of the m16 tile, k 0-7 or 8-15 */
					const int r = wm * WARP_M + mi * 16 + lane % 16, col = ks * 16 + (lane / 16) * 8;
					ldmatrix_x4(af[mi], a_stage + (u32)(r * A_LD + col) * 2);
				}
#pragma unroll
				for (int nj = 0; nj < MMA_N; nj++)
					b_fragment(stage, wn * WARP_N + nj * 8 + g, ks, t, bf[nj]);
#pragma unroll
				for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
					for (int nj = 0; nj < MMA_N; nj++)
						mma_16816(acc[mi][nj], af[mi], bf[nj]);
			}
			if (next < nkt)
				store_meta(refill, tid, mt);
		}
		cp_async_wait<0>();
		__syncthreads(); /* the pipeline's buffers are free: the warps' sums go through them */

		/* the WARPS_K warps of a part add their sums: the first takes the others' in order */
		float *red = (float *)smem;
		if (WARPS_K > 1 && wk > 0) {
#pragma unroll
			for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
				for (int nj = 0; nj < MMA_N; nj++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int idx = ((wk - 1) * WARPS_M * WARPS_N + wmn) * ACC + (mi * MMA_N + nj) * 4 + e;
						red[idx * 32 + lane] = acc[mi][nj][e];
					}
		}
		__syncthreads();
		if (wk == 0) {
#pragma unroll 1
			for (int o = 1; o < WARPS_K; o++)
#pragma unroll
				for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
					for (int nj = 0; nj < MMA_N; nj++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const int idx = ((o - 1) * WARPS_M * WARPS_N + wmn) * ACC + (mi * MMA_N + nj) * 4 + e;
							acc[mi][nj][e] += red[idx * 32 + lane];
						}

			/* epilogue: c (plus bias), or this split's partials */
			const bool pairs = ((unsigned long long)c & 3) == 0 && (ldc & 1) == 0;
#pragma unroll
			for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
				for (int nj = 0; nj < MMA_N; nj++)
#pragma unroll
					for (int h = 0; h < 2; h++) {
						const i64 row = m0 + wm * WARP_M + mi * 16 + h * 8 + g;
						const i64 col = n0 + wn * WARP_N + nj * 8 + 2 * t;
						float v0 = acc[mi][nj][2 * h], v1 = acc[mi][nj][2 * h + 1];
						if (row >= m || col >= n)
							continue;
						if (split > 1) {
							float *p = partials + ((i64)z * m + row) * n + col;
							p[0] = v0;
							if (col + 1 < n)
								p[1] = v1;
							continue;
						}
						if (bias) {
							v0 += to_float(bias[col]);
							if (col + 1 < n)
								v1 += to_float(bias[col + 1]);
						}
						elem *p = c + row * ldc + col;
						if (pairs && col + 1 < n) {
							*(u32 *)p = (u32)from_float(v0) | (u32)from_float(v1) << 16;
						} else {
							p[0] = from_float(v0);
							if (col + 1 < n)
								p[1] = from_float(v1);
						}
					}
		}
		__syncthreads(); /* red is the next tile's pipeline */
	}
}
