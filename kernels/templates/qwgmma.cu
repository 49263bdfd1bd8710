/*
 * qwgmma.cu - ktune's weight-quantized GEMM on Hopper's warpgroup MMA
 * (sm_90a only), for the M where the tensor cores, not the weights' bytes,
 * set the time (M of 32 and more).  The weights are the wgmma's A operand,
 * dequantised in registers (no shared-memory round trip of the bf16
 * weights), the rows of a its B operand from shared memory:
 *
 *     c[i, j] = sum over l of a[i, l] * w[j, l]  (+ bias[j]),  0 <= i < m, 0 <= j < n
 *     computed as its transpose: c^T (BLOCK_N x BLOCK_M a block) = w a^T
 *
 * with w the dequantised packed weight (quant.cuh), fp32 accumulation, one
 * rounding of each dequantised weight to the element type (the wgmma's
 * operand, as qgemm.cu and qmma.cu; two under scale_shift with a zero
 * that is not an integer: below) and one of the result.
 *
 * Entry points:
 *     qwgmma_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros,
 *                   const elem *bias, elem *c, float *partials, long long m, long long n,
 *                   long long k, long long lda, long long ldc, int zero_per_group)
 *     quant_sum_kernel (quant_sum.cuh)
 * as qgemv.cu's.
 *
 * Launch (BLOCK_N = WGS * SLABS * 64 rows of w a block):
 *     block = (WGS * 128, 1, 1)
 *     grid  = (ceil(n / BLOCK_N), min(ceil(m / BLOCK_M), 65535), split); a
 *             block walks the tiles of rows of a in steps of gridDim.y
 *     dynamic shared memory SMEM_BYTES (below; over 48 KiB: the host sets
 *             the function's limit)
 *     split = 1: the block writes c (plus bias); split > 1: blockIdx.z takes
 *             the split'th part of the k-stages and writes partials[z][i][j]
 *             (fp32 [split][m][n]); quant_sum_kernel adds them in order
 *     CLUSTER_K > 1 (compiled in): grid.z = CLUSTER_K blocks of a cluster
 *             (__cluster_dims__) take the parts of k and add their sums
 *             through distributed shared memory in rank order, each writing
 *             its share of the rows of c (plus bias); no partials
 *
 * The pipeline.  A stage is BK = 64 of k: BLOCK_M rows of a (128 bytes
 * each, in the 128-byte swizzle the wgmma descriptor reads: 16-byte chunk
 * ch of row r at chunk ch ^ (r % 8)) and the block's BLOCK_N rows of packed
 * weights (8 * BITS bytes each), both copied by every thread with cp.async
 * (zeros past m, n and k) into a ring of STAGES slots, STAGES - 2 stages
 * ahead.  Each stage: wait for its copies, fence them to the async proxy,
 * one barrier; issue the copies of the stage STAGES - 2 ahead, into the
 * slot of the stage two back, whose wgmma every warpgroup has waited for;
 * dequantise the stage's weights from shared memory into A fragments;
 * issue its wgmma (4 k16 steps a slab) and (OVERLAP 1) wait for the
 * previous stage's, so that one stage's tensor-core work runs under the
 * next one's dequantisation, or (OVERLAP 0) for its own.  The A fragments
 * alternate between two sets of registers (a wgmma reads its A registers
 * until it completes; one set with OVERLAP 0).
 *
 * The fragments.  Warp w of a warpgroup holds rows 16 w .. + 15 of each of
 * its 64-row slabs; lane (g = lane / 4, t = lane % 4) needs, for k16 step s,
 * codes 16 s + 2t, +1 (a[0] row g, a[1] row g + 8) and 16 s + 2t + 8, +9
 * (a[2], a[3]): two adjacent codes of one word each time.  A lane reads
 * its two rows' words of the stage with 16-byte loads and turns each pair
 * of codes into a pair of 16-bit values at once, by a magic number and
 * packed arithmetic (PACKED, at "dequantise" below); 8-bit codes in bf16
 * go through fp32 as quant.cuh's fma(q, mul, add), the second code in
 * place (q 2^BITS, with mul 2^-BITS: exact).  The scales and zeros of the
 * next stage are loaded into registers while this one computes.
 *
 * Tunables: BLOCK_M, WGS, SLABS, STAGES, OVERLAP, CLUSTER_K (below); DTYPE, BITS, GROUP, MODE
 * (quant.cuh).
 *
 * Limits: a and wq 16-byte aligned, lda a multiple of 8; k a multiple of 32
 * and of GROUP; any m, n; c must not overlap an input; sm_90a.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 128 /* rows of a (and c) a block: the wgmma's N, 64, 128 or 256 */
#endif
#ifndef WGS
#define WGS 2 /* warpgroups a block, each with its own rows of w: 1, 2 or 4 */
#endif
#ifndef SLABS
#define SLABS 1 /* 64-row slabs of w a warpgroup */
#endif
#ifndef STAGES
#define STAGES 4 /* slots of the shared-memory ring: STAGES - 2 stages in flight */
#endif
#ifndef OVERLAP
#define OVERLAP 1 /* 1: a stage's wgmma runs under the next one's dequantisation; 0: waited for at once */
#endif
#ifndef CLUSTER_K
#define CLUSTER_K 1 /* blocks of a cluster splitting k, their sums added through distributed shared memory */
#endif

#include "quant.cuh"
#include "quant_wgmma.cuh"
#include "quant_sum.cuh"

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WGS * 128)
#define BLOCK_N (WGS * SLABS * 64)  /* rows of w (columns of c) a block */
#define BK 64                       /* k a stage: a 128-byte swizzle row of activations */
#define X_BYTES (BLOCK_M * 128)     /* a stage's rows of a */
#define W_ROW_BYTES (BK * BITS / 8) /* a stage's bytes of a row of w: 8, 16, 32 or 64 */
#define W_CHUNK (W_ROW_BYTES >= 32 ? 16 : W_ROW_BYTES / 2) /* at least two a row: a chunk for every thread */
#define W_BYTES (BLOCK_N * W_ROW_BYTES)
#define RING_BYTES (STAGES * (X_BYTES + W_BYTES))
#define T_STRIDE (BLOCK_N + 4) /* floats a row of the sums' tile: rows 2 apart land 8 banks apart */
#define T_BYTES (CLUSTER_K > 1 ? BLOCK_M * T_STRIDE * 4 : 0)
#define SMEM_BYTES (1024 + (RING_BYTES > T_BYTES ? RING_BYTES : T_BYTES)) /* 1024: the base aligned for the swizzle */
#define ACC (BLOCK_M / 2)                                 /* accumulators a slab, a thread */
#define GPS (GROUP == 32 ? 2 : 1)                          /* groups a stage spans */

static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 256, "BLOCK_M is a wgmma N: 64, 128 or 256");
/* every thread has a chunk of each stage to copy: no warp leaves the copies diverged */
static_assert(BLOCK_M * 8 % NTHREADS == 0 && BLOCK_N * (W_ROW_BYTES / W_CHUNK) % NTHREADS == 0,
	      "whole chunks a thread");
static_assert(WGS == 1 || WGS == 2 || WGS == 4, "1, 2 or 4 warpgroups");
static_assert(SLABS == 1 || SLABS == 2, "1 or 2 slabs a warpgroup");
static_assert(STAGES >= 3 && STAGES <= 8, "3 to 8 slots");
static_assert(OVERLAP == 0 || OVERLAP == 1, "OVERLAP is 0 or 1");
static_assert(CLUSTER_K == 1 || CLUSTER_K == 2 || CLUSTER_K == 4 || CLUSTER_K == 8, "CLUSTER_K is 1, 2, 4 or 8");
static_assert(SLABS * ACC <= 128, "accumulators: at most 128 registers a thread");
static_assert(SMEM_BYTES <= 232448, "227 KiB of shared memory a block on sm_90");

/* ------------------------------------------------------------------- load */

/*
 * This thread's part of the copies: its chunks of rows of a are rows
 * xrow0, + NTHREADS / 8, ... at chunk tid % 8; of rows of w, rows wrow0, +
 * NTHREADS / W_PER_ROW, ... at chunk tid % W_PER_ROW (NTHREADS is a
 * multiple of 128, so a thread's chunk column never changes).
 */
#define W_PER_ROW (W_ROW_BYTES / W_CHUNK)
struct copier {
	const elem *xsrc; /* this thread's first chunk of rows of a, at k = 0 */
	const u32 *wsrc;  /* and of rows of w */
	int xrows, wrows; /* rows of a past xsrc's (itself included) within m, of w within n; <= 0: none */
	int xcol, wword;  /* the chunk's first k, its first word of a row of w */
	int xr, wr;       /* the tile's rows of the first chunks */
};

static __device__ __forceinline__ copier copier_of(int tid, const elem *a, const u32 *wq, i64 m, i64 n, i64 lda,
						   i64 rw, i64 m0, i64 n0)
{
	copier c;
	c.xr = tid / 8;
	c.wr = tid / W_PER_ROW;
	c.xcol = tid % 8 * 8;
	c.wword = tid % W_PER_ROW * (W_CHUNK / 4);
	c.xsrc = a + (m0 + c.xr) * lda + c.xcol;
	c.wsrc = wq + (n0 + c.wr) * rw + c.wword;
	const i64 xl = m - (m0 + c.xr), wl = n - (n0 + c.wr);
	c.xrows = (int)(xl < BLOCK_M ? xl : BLOCK_M);
	c.wrows = (int)(wl < BLOCK_N ? wl : BLOCK_N);
	return c;
}

/*
 * Issues this thread's copies of stage kt into slot (xs: rows of a, ws:
 * rows of w): zeros past m and k (a), past n and the row's words (w): a
 * copy of 0 bytes of its 16 reads nothing, so its address (past the
 * buffer) is left as it is, which saves the registers of a select.  Rows
 * NTHREADS / 8 apart keep their swizzle (NTHREADS / 8 is a multiple of 8),
 * so only the row moves.
 */
static __device__ __forceinline__ void load_stage(u32 xs, u32 ws, i64 kt, const copier &c, i64 k, i64 lda, i64 kw,
						  i64 rw, u64 policy)
{
	const i64 k0 = kt * BK, w0 = kt * (BK / PER_WORD);
	const bool kx = k0 + c.xcol < k, kww = w0 + c.wword < kw; /* k is a multiple of 32: a chunk is in or out */
	const u32 xdst = xs + c.xr * 128 + (((c.xcol / 8) ^ (c.xr & 7)) * 16);
	const u32 wdst = ws + c.wr * W_ROW_BYTES + c.wword * 4;
	if (c.xrows >= BLOCK_M) { /* every row of the tile within m: one test for all, not one a row */
		const int bytes = kx ? 16 : 0;
#pragma unroll
		for (int it = 0; it < BLOCK_M * 8 / NTHREADS; it++)
			cp_async<16>(xdst + it * (NTHREADS / 8) * 128, c.xsrc + it * (NTHREADS / 8) * lda + k0, bytes);
	} else {
#pragma unroll
		for (int it = 0; it < BLOCK_M * 8 / NTHREADS; it++) {
			const bool ok = kx && it * (NTHREADS / 8) < c.xrows;
			cp_async<16>(xdst + it * (NTHREADS / 8) * 128, c.xsrc + it * (NTHREADS / 8) * lda + k0, ok ? 16 : 0);
		}
	}
#pragma unroll
	for (int it = 0; it < BLOCK_N * W_PER_ROW / NTHREADS; it++) {
		const bool ok = kww && it * (NTHREADS / W_PER_ROW) < c.wrows; /* a chunk that starts in the row ends within its stride */
		const u32 *src = c.wsrc + it * (NTHREADS / W_PER_ROW) * rw + w0;
		const u32 dst = wdst + it * (NTHREADS / W_PER_ROW) * W_ROW_BYTES;
		if constexpr (W_CHUNK == 16)
			cp_async_16_policy(dst, src, ok ? 16 : 0, policy);
		else
			cp_async<W_CHUNK>(dst, src, ok ? W_CHUNK : 0);
	}
}

/* The raw scales and zeros of a stage for this lane's rows: [slab][row g, g + 8][group of the stage]. */
struct sraw {
	elem s[SLABS][2][GPS], z[SLABS][2][GPS];
};

static __device__ __forceinline__ void load_scales(sraw &o, i64 kt, const elem *scales, const elem *zeros, i64 n,
						   i64 groups, int zero_per_group, i64 row0)
{
#pragma unroll
	for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const i64 r = row0 + sl * 64 + h * 8, row = r < n ? r : n - 1;
#pragma unroll
			for (int gi = 0; gi < GPS; gi++) {
				i64 grp = GROUP ? (kt * BK + gi * 32) / (GROUP ? GROUP : 1) : 0;
				grp = grp < groups ? grp : groups - 1; /* the half stage past k */
				o.s[sl][h][gi] = HAS_SCALE ? scales[row * groups + grp] : (elem)0;
				o.z[sl][h][gi] = HAS_ZERO ? zeros[zero_per_group ? row * groups + grp : 0] : (elem)0;
			}
		}
}

/* ------------------------------------------------------------ dequantise */

/*
 * PACKED: the codes become 16-bit values by a magic number, two at a time
 * (all but 8-bit codes in bf16, whose 7 mantissa bits cannot hold them):
 * the pair of codes (c, c + 1) a fragment register takes, moved to bits 0
 * and 16 of a word and ORed with the bits of M (128 in bf16, 1024 in f16:
 * a unit in the last place of 1), is the exact pair (M + q_c, M + q_c+1).
 * Less M, then the mode's packed arithmetic (quant.cuh's w):
 *     scale_shift (q - z) s, scale q s, shift q - z, fma q s + z
 * so a pair costs 2 or 3 integer and 2 or 3 packed instructions where
 * the fp32 path costs 11.  Each weight is rounded once, to the element
 * type (the fp32 path rounds it to fp32 first), except under scale_shift
 * with a zero that is not an integer, where q - z may round before the
 * product does.
 */
#define PACKED (BITS < 8 || DTYPE == 0)
#define MAGIC2 (DTYPE == 1 ? 0x43004300u : 0x64006400u) /* M in both halves */

/*
 * This lane's constant for finding its pair in a word: the prmt selector
 * of byte t (4 bits) or of the half-word t % 2 with M's high bytes between
 * (8 bits), the shift of its nibble (2 bits) or bit pair (1 bit).
 */
static __device__ __forceinline__ u32 lane_pick(int t)
{
	if (BITS == 4)
		return (u32)t | 0x4440u; /* byte t, zeros above */
	if (BITS == 8)
		return (u32)(2 * (t % 2)) | 5u << 4 | (u32)(2 * (t % 2) + 1) << 8 | 7u << 12;
	return (u32)(2 * t * BITS);
}

/*
 * (M + q_c, M + q_c+1) for step s, half `half` of a row whose stage's
 * words are w (8 bits: the lane's own word of each half step).
 */
static __device__ __forceinline__ u32 code_pair(const u32 *w, int s, int half, u32 pick)
{
	if (BITS == 4) { /* word 2s + half, byte t: q_c in bits 0-3, q_c+1 in 4-7 */
		const u32 f = prmt(w[2 * s + half], 0u, pick);
		return ((f * 0x1001u) & 0x000F000Fu) | MAGIC2; /* f | f << 12: q_c+1 at bit 16 */
	}
	if (BITS == 8) /* bytes 2 (t % 2) and + 1 of the lane's word, M's high bytes between */
		return prmt(w[2 * s + half], MAGIC2, pick);
	if (BITS == 2) { /* word s, bits 16 half + 4t */
		const u32 f = (w[s] >> (16 * half + pick)) & 0xFu;
		return ((f * 0x4001u) & 0x00030003u) | MAGIC2;
	}
	/* 1 bit: word s / 2, bits 16 (s % 2) + 8 half + 2t */
	const u32 f = (w[s / 2] >> (16 * (s % 2) + 8 * half + pick)) & 0x3u;
	return ((f * 0x8001u) & 0x00010001u) | MAGIC2;
}

/* A pair of weights from their magic-number codes r; s2, z2: the group's scale and zero in both halves. */
static __device__ __forceinline__ u32 dequant_pair(u32 r, u32 s2, u32 z2)
{
	const u32 q = hsub2(r, MAGIC2); /* exact */
	if (MODE == 0)
		return hmul2(hsub2(q, z2), s2);
	if (MODE == 1)
		return hmul2(q, s2);
	if (MODE == 2)
		return hsub2(q, z2);
	return hfma2(q, s2, z2);
}

/* Words of a row's stage a lane reads: all of them, or at 8 bits its own half of them. */
#define ROW_WORDS (BITS == 8 ? 8 : W_ROW_BYTES / 4)

struct __align__(16) words4 {
	u32 v[4];
};

static __device__ __forceinline__ void load_row(u32 (&w)[ROW_WORDS], const unsigned char *row, int tw)
{
	if constexpr (BITS == 8) { /* words 4s + 2 half + t / 2 */
#pragma unroll
		for (int i = 0; i < 8; i++)
			w[i] = ((const u32 *)row)[2 * i + tw];
	} else if constexpr (ROW_WORDS >= 4) {
#pragma unroll
		for (int i = 0; i < ROW_WORDS / 4; i++) {
			const words4 x = ((const words4 *)row)[i];
#pragma unroll
			for (int e = 0; e < 4; e++)
				w[4 * i + e] = x.v[e];
		}
	} else {
#pragma unroll
		for (int i = 0; i < ROW_WORDS; i++)
			w[i] = ((const u32 *)row)[i];
	}
}

/*
 * The A fragments of a stage's 4 k16 steps for each slab, from the packed
 * rows in slot ws (wrow: this lane's row g of slab 0, as bytes of the
 * slot).  tw, tb: the word and code within it of this lane's first code of
 * a step past the step's own (2t; a word only at 8 bits); pick: lane_pick.
 */
static __device__ __forceinline__ void dequant_stage(u32 (&fa)[SLABS][4][4], const unsigned char *wrow,
						     const sraw &sc, int tw, int tb, u32 pick)
{
#pragma unroll
	for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const unsigned char *row = wrow + (sl * 64 + h * 8) * W_ROW_BYTES;
#if PACKED
			(void)tb;
			u32 w[ROW_WORDS], s2[GPS], z2[GPS];
			load_row(w, row, tw);
#pragma unroll
			for (int gi = 0; gi < GPS; gi++) {
				s2[gi] = (u32)sc.s[sl][h][gi] * 0x10001u;
				z2[gi] = (u32)sc.z[sl][h][gi] * 0x10001u;
			}
#pragma unroll
			for (int s = 0; s < 4; s++)
#pragma unroll
				for (int half = 0; half < 2; half++) {
					const int gi = GPS == 2 ? s / 2 : 0;
					fa[sl][s][2 * half + h] = dequant_pair(code_pair(w, s, half, pick), s2[gi], z2[gi]);
				}
#else
			(void)pick;
			const u32 *rw = (const u32 *)row;
			qparams p[GPS];
			float mul1[GPS];
#pragma unroll
			for (int gi = 0; gi < GPS; gi++) {
				p[gi] = qparams_of(sc.s[sl][h][gi], sc.z[sl][h][gi]);
				mul1[gi] = p[gi].mul * (1.0f / (float)(1u << BITS)); /* a power of two: exact */
			}
#pragma unroll
			for (int s = 0; s < 4; s++)
#pragma unroll
				for (int half = 0; half < 2; half++) {
					const int c0 = 16 * s + 8 * half; /* the code of slot 0 of this half step */
					const int gi = GPS == 2 ? s / 2 : 0;
					const u32 x = rw[c0 / PER_WORD + tw] >> ((c0 % PER_WORD + tb) * BITS);
					const float f0 = code_float(x & QMASK);
					const float f1 = __uint_as_float((x & (QMASK << BITS)) | 0x4B000000u) - 8388608.0f;
					fa[sl][s][2 * half + h] = pack_pair(__fmaf_rn(f0, p[gi].mul, p[gi].add),
									    __fmaf_rn(f1, mul1[gi], p[gi].add));
				}
#endif
		}
}

/* ------------------------------------------------------------------ stage */

/* Everything a stage needs that does not change along k. */
struct ctx {
	const elem *scales, *zeros;
	i64 m, n, k, lda, kw, rw, groups, m0, n0, row0, kt0;
	int steps, tw, tb, zero_per_group;
	u32 pick; /* lane_pick */
	copier cp;
	u32 xbase, wbase;
	const unsigned char *wrow; /* this lane's row g of slab 0 in slot 0 */
	u64 policy;
};

/*
 * Stage i of the block's range: fa (its fragments) and sc (its scales) for
 * this stage, fa_prev (the previous stage's fragments, whose wgmma this
 * stage waits for), sc_next (filled for stage i + 1).
 */
static __device__ __forceinline__ void stage(const ctx &x, int i, float (&acc)[SLABS][ACC], u32 (&fa)[SLABS][4][4],
					     u32 (&fa_prev)[SLABS][4][4], const sraw &sc, sraw &sc_next)
{
	cp_async_wait<STAGES - 3>();
	fence_proxy_async();
	__syncthreads();
	const int ahead = i + STAGES - 2, slot = i % STAGES;
	if (ahead < x.steps)
		load_stage(x.xbase + (ahead % STAGES) * X_BYTES, x.wbase + (ahead % STAGES) * W_BYTES, x.kt0 + ahead, x.cp,
			   x.k, x.lda, x.kw, x.rw, x.policy);
	cp_async_commit();
	if (i + 1 < x.steps)
		load_scales(sc_next, x.kt0 + i + 1, x.scales, x.zeros, x.n, x.groups, x.zero_per_group, x.row0);

	dequant_stage(fa, x.wrow + slot * W_BYTES, sc, x.tw, x.tb, x.pick);
#pragma unroll
	for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
		for (int s = 0; s < 4; s++)
			fence_regs(fa[sl][s]); /* every fragment written before the fence: none between the wgmma */
	__syncwarp(); /* wgmma is .aligned: the warp converged here whatever the compiler made of the loops above */
	wgmma_fence();
	const u32 xs = x.xbase + slot * X_BYTES;
#pragma unroll
	for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
		for (int s = 0; s < 4; s++)
			wgmma_rs_n<BLOCK_M, 0>(acc[sl], fa[sl][s], kmajor_desc(xs + 32 * s), 1); /* B K-major */
	wgmma_commit();
	/*
	 * OVERLAP 1: ptxas warns (C7513) that it serialises the wgmma, since the
	 * next stage's inputs are written while one is pending; which of the
	 * two is faster is the tuner's to measure.
	 */
	wgmma_wait<OVERLAP>();
#pragma unroll
	for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
		for (int s = 0; s < 4; s++)
			fence_regs(fa_prev[sl][s]);
}

/* ------------------------------------------------------- cluster's sum */

/*
 * CLUSTER_K > 1: the cluster's blocks took the parts of k in rank order
 * (blockIdx.z); each writes its sums as a tile [BLOCK_M][T_STRIDE] of
 * floats (row: a row of a; column: a row of w) over its ring, and block r
 * adds rows r, r + CLUSTER_K, ... of the tile of every block, in rank
 * order (the same bits every run), plus the bias, into c.  tile: the
 * 1024-aligned base of this block's shared memory.
 */
static __device__ __forceinline__ void cluster_reduce(const float (&acc)[SLABS][ACC], unsigned char *tile,
						      const ctx &x, int t, const elem *bias, elem *c, i64 ldc)
{
	float *T = (float *)tile;
	const int rloc = (int)(x.row0 - x.n0);
#pragma unroll
	for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
		for (int j = 0; j < BLOCK_M / 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				T[(8 * j + 2 * t + e % 2) * T_STRIDE + rloc + sl * 64 + 8 * (e / 2)] = acc[sl][4 * j + e];
	cluster_sync();
	const u32 me = (u32)blockIdx.z, tbase = smem_u32(tile);
	constexpr int quads = BLOCK_N / 4; /* four columns a thread at a time */
	for (int i = threadIdx.x; i < BLOCK_M / CLUSTER_K * quads; i += NTHREADS) {
		const int r = (i / quads) * CLUSTER_K + (int)me, q = (i % quads) * 4;
		const i64 row = x.m0 + r, col = x.n0 + q;
		if (row >= x.m || col >= x.n)
			continue;
		float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
		const u32 off = tbase + (u32)(r * T_STRIDE + q) * 4;
#pragma unroll
		for (int b = 0; b < CLUSTER_K; b++) {
			float v[4];
			ld_cluster_v4(v, cluster_addr(off, (u32)b));
#pragma unroll
			for (int e = 0; e < 4; e++)
				sum[e] += v[e];
		}
		elem *out = c + row * ldc + col;
#pragma unroll
		for (int e = 0; e < 4; e++)
			if (col + e < x.n)
				out[e] = from_float(bias ? sum[e] + to_float(bias[col + e]) : sum[e]);
	}
	cluster_sync(); /* no block leaves (or refills its ring) while another reads its tile */
}

/* ----------------------------------------------------------------- kernel */

#if CLUSTER_K > 1
#define CLUSTER_DIMS __cluster_dims__(1, 1, CLUSTER_K)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS, 1) CLUSTER_DIMS
qwgmma_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros, const elem *bias, elem *c,
	      float *partials, long long m, long long n, long long k, long long lda, long long ldc, int zero_per_group)
{
	extern __shared__ __align__(16) unsigned char smem[];
	const u32 raw = smem_u32(smem), base = (raw + 1023u) & ~1023u;

	const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
	const int g = lane / 4, t = lane % 4;
	const int rloc = wg * SLABS * 64 + warp * 16 + g; /* this lane's row g of slab 0, in the block */
	const int split = gridDim.z, z = blockIdx.z;
	const i64 n_k = (k + BK - 1) / BK;

	ctx x;
	x.scales = scales;
	x.zeros = zeros;
	x.m = m;
	x.n = n;
	x.k = k;
	x.lda = lda;
	x.kw = k / PER_WORD;
	x.rw = (x.kw + 3) / 4 * 4;
	x.groups = GROUP ? k / GROUP : 1;
	x.n0 = (i64)blockIdx.x * BLOCK_N;
	x.row0 = x.n0 + rloc;
	x.kt0 = n_k * z / split;
	x.steps = (int)(n_k * (z + 1) / split - x.kt0);
	x.tw = PER_WORD >= 8 ? 0 : t / 2;
	x.tb = (2 * t) % PER_WORD;
	x.pick = lane_pick(t);
	x.zero_per_group = zero_per_group;
	x.xbase = base;
	x.wbase = base + STAGES * X_BYTES;
	x.wrow = smem + (x.wbase - raw) + rloc * W_ROW_BYTES;
	x.policy = evict_first_policy();

	const i64 m_tiles = (m + BLOCK_M - 1) / BLOCK_M;
	for (i64 mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
		x.m0 = mt * BLOCK_M;
		x.cp = copier_of(tid, a, wq, m, n, lda, x.rw, x.m0, x.n0);
		float acc[SLABS][ACC];
#pragma unroll
		for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
			for (int e = 0; e < ACC; e++)
				acc[sl][e] = 0.0f;

#pragma unroll
		for (int s = 0; s < STAGES - 2; s++) {
			if (s < x.steps)
				load_stage(x.xbase + s * X_BYTES, x.wbase + s * W_BYTES, x.kt0 + s, x.cp, k, lda, x.kw, x.rw,
					   x.policy);
			cp_async_commit();
		}
		sraw sc[2];
		if (x.steps > 0)
			load_scales(sc[0], x.kt0, scales, zeros, n, x.groups, zero_per_group, x.row0);
		u32 fa[OVERLAP + 1][SLABS][4][4]; /* OVERLAP 0: each stage's wgmma is done before the next writes */
#pragma unroll 1
		for (int i = 0; i < x.steps; i += 2) {
			stage(x, i, acc, fa[0], fa[OVERLAP], sc[0], sc[1]);
			if (i + 1 < x.steps)
				stage(x, i + 1, acc, fa[OVERLAP], fa[0], sc[1], sc[0]);
		}
		wgmma_wait<0>();
#pragma unroll
		for (int sl = 0; sl < SLABS; sl++)
			fence_regs(acc[sl]);
		cp_async_wait<0>();
		__syncthreads(); /* every warpgroup is done with the ring: the next tile's prologue refills it */

		if (CLUSTER_K > 1) {
			cluster_reduce(acc, smem + (base - raw), x, t, bias, c, ldc);
			continue;
		}

		/* epilogue: d[4j + e] is row rloc + 64 sl + 8 (e / 2) of w, row 8j + 2t + e % 2 of a */
#pragma unroll
		for (int sl = 0; sl < SLABS; sl++)
#pragma unroll
			for (int j = 0; j < BLOCK_M / 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const i64 col = x.row0 + sl * 64 + 8 * (e / 2), row = x.m0 + 8 * j + 2 * t + e % 2;
					if (row >= m || col >= n)
						continue;
					store_sum(acc[sl][4 * j + e], row, col, c, ldc, partials, split, z, m, n, bias);
				}
	}
}
