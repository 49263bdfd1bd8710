/*
 * qcode.cu - ktune's weight-quantized GEMM for few rows of A (decode, M up
 * to 16) with the codes themselves on the tensor cores: the weights are the
 * mma's A operand (16 rows of w a tile), the rows of A its B operand (8 a
 * tile), and each code enters the mma as the exact small integer q, so
 * that the scale and zero of a group are applied once per k-block to the
 * sums instead of once per weight.
 *
 *     c[i, j] = sum over l of a[i, l] * w[j, l]  (+ bias[j]),  0 <= i < m, 0 <= j < n
 *     w = q mul + add (quant.cuh), so over a k-block inside one group
 *     sum w a = mul * (sum q a) + add * (sum a)
 *
 * with fp32 accumulation and one rounding of the result; no weight is ever
 * rounded (q is exact in f16 and bf16), nor any activation.
 *
 * Entry points:
 *     qcode_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros,
 *                  const elem *bias, elem *c, float *partials, long long m, long long n,
 *                  long long k, long long lda, long long ldc, int zero_per_group)
 *     quant_reduce_kernel (quant.cuh)
 * as qgemv.cu's.
 *
 * Launch (BLOCK_N = WARPS_N * MFRAG * 16 rows of w a block, TOK = NT * 8
 * rows of a a pass):
 *     block = (WARPS_N * WARPS_K * 32, 1, 1)
 *     grid  = (ceil(n / BLOCK_N), min(ceil(m / TOK), 65535), split); a block
 *             walks the passes of rows of a in steps of gridDim.y
 *     split = 1: the block writes c (plus bias); split > 1: blockIdx.z takes
 *             the split'th part of the k-blocks and writes partials[z][i][j]
 *             (fp32 [split][m][n]); quant_reduce_kernel adds them in order
 *     static shared memory only, and only for WARPS_K > 1 (RED_BYTES)
 *
 * The k-permutation (qmma.cu's, with the operands swapped).  In
 * mma.m16n8k16 lane (g = lane / 4, t = lane % 4) holds A[g and g + 8][k]
 * and B[k][n = g] for the same k slots 2t, 2t + 1, 2t + 8, 2t + 9, and a
 * dot product does not care about the order of k if both operands share
 * it.  So lane t of a quad loads VEC words of rows g and g + 8 of each
 * tile: CH = VEC * PER_WORD consecutive codes from CH * t of a k-block of
 * KB = 4 * CH.  A word's codes e and e + HALF (HALF = PER_WORD / 2) lie at
 * the same place of its two 16-bit halves, so one AND-OR with the
 * exponent of M (M = 128 in bf16, 1024 in f16) makes the pair of values
 * M + q (a "magic number"), and one packed subtraction the exact pair of
 * codes: an AND-OR and half a subtraction a weight, and a shift every
 * pair but the first.  Step h of a word takes the pairs (2h, 2h + HALF) as
 * slots 2t, 2t + 1 and (2h + 1, 2h + 1 + HALF) as slots 2t + 8, 2t + 9;
 * the B fragment takes the same k of its row of a, from the word's
 * PER_WORD activations loaded at once (two halves moved a register).
 * 8-bit codes in bf16 do not fit M's 7 mantissa bits: they go through
 * fp32 (quant.cuh's code_float) and are packed exactly.
 *
 * sum a: an mma of a tile of ones with the same B fragment, one a step
 * for all the warp's tiles (the tensor cores are idle at this M).  A k-block
 * lies in one group (KB <= GROUP, the prune's rule), so each k-block's two
 * sums start at zero and are folded into the result with the group's mul
 * and add: 2 FMAs a sum a k-block.  Modes without a zero (scale) skip sum a.
 *
 * A from global memory through L1 (qmma.cu's reasons: small, L2-resident,
 * the same rows for every warp); rows of a past m read row m - 1 (never
 * stored), k past the end zeros; rows of w past n read row n - 1 (never
 * stored).  Warps: WARPS_N x MFRAG m16 tiles across the block; WARPS_K
 * warps share each part, taking every WARPS_K'th k-block, and add their
 * sums through shared memory in a fixed order (deterministic).
 *
 * Tunables: MFRAG, WARPS_N, WARPS_K, VEC, UNROLL, MIN_WARPS (below); MAX_M (the key's
 * rows of a, at most 16: NT = ceil(MAX_M / 8) n8 tiles of them a pass);
 * DTYPE, BITS, GROUP, MODE (quant.cuh).
 *
 * Limits: a and wq 16-byte aligned, lda a multiple of 8; k a multiple of 32
 * and of GROUP; GROUP 0 (per channel) or a multiple of KB; any m, n; c
 * must not overlap an input; sm_80 or newer.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef MFRAG
#define MFRAG 2 /* m16 tiles (16 rows of w each) a warp */
#endif
#ifndef WARPS_N
#define WARPS_N 1 /* warps along N */
#endif
#ifndef WARPS_K
#define WARPS_K 4 /* warps sharing a part of N, taking every WARPS_K'th k-block */
#endif
#ifndef VEC
#define VEC 4 /* words of a row a lane loads per k-block: 4 = 128-bit loads */
#endif
#ifndef UNROLL
#define UNROLL 2 /* k-blocks of weights in flight a warp while it computes one */
#endif
#ifndef MIN_WARPS
#define MIN_WARPS 0 /* warps an SM must hold at once: registers are capped to fit them; 0: one block */
#endif
#ifndef MAX_M
#define MAX_M 1 /* rows of a a block holds at a time (the key's, at most 16) */
#endif

#include "quant.cuh"

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WARPS_N * WARPS_K * 32)
#define BLOCK_N (WARPS_N * MFRAG * 16) /* rows of w per block */
#define NT ((MAX_M + 7) / 8)           /* n8 tiles of rows of a a pass */
#define TOK (NT * 8)                   /* rows of a a pass */
#define CH (VEC * PER_WORD)            /* codes of a row a lane loads per k-block */
#define KB (4 * CH)                    /* a k-block: the 4 lanes of a quad */
#define HALF (PER_WORD / 2)            /* codes a 16-bit half of a word */
#define ACC (MFRAG * NT * 4)           /* sums a lane keeps */
#define RED_FLOATS ((WARPS_K - 1) * WARPS_N * 32 * ACC)
/* blocks an SM must hold, for __launch_bounds__ (qgemv.cu's MIN_WARPS) */
#define MIN_BLOCKS (MIN_WARPS * 32 / NTHREADS > 1 ? MIN_WARPS * 32 / NTHREADS : 1)
/* codes as M + q: every width in f16 (10 mantissa bits), up to 4 bits in bf16 (7) */
#define MAGIC (DTYPE == 0 || BITS <= 4)
#define MAGIC_PAIR (DTYPE == 1 ? 0x43004300u : 0x64006400u) /* M, M: 128 in bf16, 1024 in f16 */

static_assert(MFRAG == 1 || MFRAG == 2 || MFRAG == 4, "MFRAG is 1, 2 or 4 m16 tiles");
static_assert(WARPS_N * WARPS_K >= 1 && WARPS_N * WARPS_K <= 16, "1 to 16 warps a block");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 words");
static_assert(UNROLL >= 1 && UNROLL <= 4, "UNROLL is 1 to 4");
static_assert(MAX_M >= 1 && MAX_M <= 16, "MAX_M is 1 to 16");
static_assert(MIN_WARPS >= 0 && MIN_WARPS <= 64, "MIN_WARPS is 0 to 64");
static_assert(GROUP == 0 || GROUP % KB == 0, "a k-block lies in one group");
static_assert(RED_FLOATS * 4 <= 48 * 1024, "static shared memory is at most 48 KiB");

/* ------------------------------------------------------------------- load */

/* One k-block of the warp's rows of w (this lane's: g and g + 8 of each tile), with their group's scale and zero. */
struct stage {
	u32 w[MFRAG][2][VEC];
	elem s[MFRAG][2], z[MFRAG][2];
};

/*
 * Issues this lane's loads of k-block kt: VEC words streamed (not kept in
 * L1, first out of L2) of each of its rows, and their scales and zeros.
 * A chunk past the row's weights loads the row's first (its activations
 * are zeros).
 */
static __device__ __forceinline__ void load_stage(stage &st, i64 kt, const u32 *wq, const elem *scales,
						  const elem *zeros, i64 n, i64 kw, i64 rw, i64 groups,
						  int zero_per_group, i64 nw0, int g, int t, u64 policy)
{
	const i64 word = kt * (4 * VEC) + t * VEC; /* this lane's first word of the row */
	const i64 grp = GROUP ? kt * KB / (GROUP ? GROUP : 1) : 0;
#pragma unroll
	for (int f = 0; f < MFRAG; f++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const i64 r = nw0 + f * 16 + h * 8 + g, row = r < n ? r : n - 1;
			ld_words_stream<VEC>(st.w[f][h], wq + row * rw + (word < kw ? word : 0), policy);
			st.s[f][h] = HAS_SCALE ? scales[row * groups + grp] : (elem)0;
			st.z[f][h] = HAS_ZERO ? zeros[zero_per_group ? row * groups + grp : 0] : (elem)0;
		}
}

/* ---------------------------------------------------------------- codes */

/* Codes e and e + HALF of word x as two exact values of the element type, e's in the low half. */
static __device__ __forceinline__ u32 code_pair(u32 x, int e)
{
#if MAGIC
	const u32 y = e ? x >> (e * BITS) : x;
	return sub_pair((y & (QMASK | QMASK << 16)) | MAGIC_PAIR, MAGIC_PAIR);
#else
	return pack_pair(code_float((x >> (e * BITS)) & QMASK), code_float((x >> ((e + HALF) * BITS)) & QMASK));
#endif
}

/* --------------------------------------------------------------- compute */

/* A word's PER_WORD activations (8 to 64 bytes, aligned), as pairs. */
struct __align__(PER_WORD * 2 < 16 ? PER_WORD * 2 : 16) acts {
	u32 v[PER_WORD / 2];
};

/*
 * One k-block: for each word of the lane's chunk, the activations of its
 * k for each n8 tile of rows of a, then its PER_WORD / 4 k16 steps, the
 * codes of every tile through one B fragment each.  acc and sa start at
 * zero (the caller folds them in with the group's mul and add).
 */
static __device__ __forceinline__ void compute(float (&acc)[MFRAG][NT][4], float (&sa)[NT][4], const stage &st,
					       i64 kt, const elem *const (&a_row)[NT], i64 k, int t)
{
	const i64 kc = kt * KB + (i64)t * CH; /* this lane's first k of the k-block */
	const u32 ones[4] = { DTYPE == 1 ? 0x3F803F80u : 0x3C003C00u, DTYPE == 1 ? 0x3F803F80u : 0x3C003C00u,
			      DTYPE == 1 ? 0x3F803F80u : 0x3C003C00u, DTYPE == 1 ? 0x3F803F80u : 0x3C003C00u };
#pragma unroll
	for (int v = 0; v < VEC; v++) {
		const i64 l = kc + (i64)v * PER_WORD; /* the word's first k: all its codes past k or none */
		const bool in = l < k;
		acts x[NT];
#pragma unroll
		for (int j = 0; j < NT; j++) {
			x[j] = *(const acts *)(in ? a_row[j] + l : a_row[j]);
#pragma unroll
			for (int i = 0; i < PER_WORD / 2; i++)
				x[j].v[i] = in ? x[j].v[i] : 0u;
		}
#pragma unroll
		for (int h = 0; h < PER_WORD / 4; h++) {
			/* B: k of codes 2h, 2h + HALF (slots 2t, 2t + 1) and 2h + 1, 2h + 1 + HALF (2t + 8, 2t + 9) */
			u32 b[NT][2];
#pragma unroll
			for (int j = 0; j < NT; j++) {
				const u32 lo = x[j].v[h], hi = x[j].v[h + HALF / 2];
				b[j][0] = (lo & 0xFFFFu) | (hi << 16);
				b[j][1] = (lo >> 16) | (hi & 0xFFFF0000u);
				if (HAS_ZERO)
					mma_16816(sa[j], ones, b[j]);
			}
#pragma unroll
			for (int f = 0; f < MFRAG; f++) {
				const u32 af[4] = { code_pair(st.w[f][0][v], 2 * h), code_pair(st.w[f][1][v], 2 * h),
						    code_pair(st.w[f][0][v], 2 * h + 1), code_pair(st.w[f][1][v], 2 * h + 1) };
#pragma unroll
				for (int j = 0; j < NT; j++)
					mma_16816(acc[f][j], af, b[j]);
			}
		}
	}
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
qcode_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros, const elem *bias, elem *c,
	     float *partials, long long m, long long n, long long k, long long lda, long long ldc, int zero_per_group)
{
	__shared__ float red[WARPS_K > 1 ? RED_FLOATS : 1];

	const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const int wk = warp / WARPS_N, wn = warp % WARPS_N;
	const int g = lane / 4, t = lane % 4;

	const i64 kw = k / PER_WORD;              /* words of a row holding weights */
	const i64 rw = (kw + 3) / 4 * 4;          /* a row's stride in words */
	const i64 groups = GROUP ? k / GROUP : 1; /* scales a row */
	const i64 nw0 = (i64)blockIdx.x * BLOCK_N + wn * MFRAG * 16; /* the warp's first row of w */
	const int split = gridDim.z, z = blockIdx.z;
	const i64 k_blocks = (k + KB - 1) / KB;
	const i64 kb_begin = k_blocks * z / split, kb_end = k_blocks * (z + 1) / split;
	/* this warp's k-blocks: kb_begin + wk, + WARPS_K, ... */
	const int mine = kb_end - kb_begin > wk ? (int)((kb_end - kb_begin - wk + WARPS_K - 1) / WARPS_K) : 0;
	const i64 passes = (m + TOK - 1) / TOK;
	const u64 policy = evict_first_policy();

	for (i64 pass = blockIdx.y; pass < passes; pass += gridDim.y) {
		const i64 m0 = pass * TOK;
		const elem *a_row[NT];
#pragma unroll
		for (int j = 0; j < NT; j++) {
			const i64 r = m0 + j * 8 + g;
			a_row[j] = a + (r < m ? r : m - 1) * lda;
		}
		float tot[MFRAG][NT][4];
#pragma unroll
		for (int f = 0; f < MFRAG; f++)
#pragma unroll
			for (int j = 0; j < NT; j++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					tot[f][j][e] = 0.0f;

		/*
		 * The register pipeline (qmma.cu's): buf[u] holds k-block i + u
		 * in flight; each is copied out, refilled with k-block i + u +
		 * UNROLL, and computed while UNROLL loads are outstanding.
		 */
		stage buf[UNROLL];
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			if (u < mine)
				load_stage(buf[u], kb_begin + wk + (i64)u * WARPS_K, wq, scales, zeros, n, kw, rw, groups,
					   zero_per_group, nw0, g, t, policy);
#pragma unroll 1
		for (int i = 0; i < mine; i += UNROLL) {
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				if (i + u >= mine)
					break;
				const stage cur = buf[u];
				if (i + u + UNROLL < mine)
					load_stage(buf[u], kb_begin + wk + (i64)(i + u + UNROLL) * WARPS_K, wq, scales, zeros,
						   n, kw, rw, groups, zero_per_group, nw0, g, t, policy);
				float acc[MFRAG][NT][4], sa[NT][4];
#pragma unroll
				for (int j = 0; j < NT; j++) {
#pragma unroll
					for (int e = 0; e < 4; e++)
						sa[j][e] = 0.0f;
#pragma unroll
					for (int f = 0; f < MFRAG; f++)
#pragma unroll
						for (int e = 0; e < 4; e++)
							acc[f][j][e] = 0.0f;
				}
				compute(acc, sa, cur, kb_begin + wk + (i64)(i + u) * WARPS_K, a_row, k, t);
				/* fold the k-block in: row g + 8 h of a tile holds sums e = 2 h, 2 h + 1 */
#pragma unroll
				for (int f = 0; f < MFRAG; f++)
#pragma unroll
					for (int h = 0; h < 2; h++) {
						const qparams p = qparams_of(cur.s[f][h], cur.z[f][h]);
#pragma unroll
						for (int j = 0; j < NT; j++)
#pragma unroll
							for (int e = 2 * h; e < 2 * h + 2; e++) {
								tot[f][j][e] = __fmaf_rn(p.mul, acc[f][j][e], tot[f][j][e]);
								if (HAS_ZERO)
									tot[f][j][e] = __fmaf_rn(p.add, sa[j][e], tot[f][j][e]);
							}
					}
			}
		}

		/* the WARPS_K warps of a part add their sums: the first takes the others' in order */
		if (WARPS_K > 1) {
			if (wk > 0) {
#pragma unroll
				for (int f = 0; f < MFRAG; f++)
#pragma unroll
					for (int j = 0; j < NT; j++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const int idx = ((wk - 1) * WARPS_N + wn) * ACC + (f * NT + j) * 4 + e;
							red[idx * 32 + lane] = tot[f][j][e];
						}
			}
			__syncthreads();
			if (wk == 0) {
#pragma unroll 1
				for (int o = 1; o < WARPS_K; o++)
#pragma unroll
					for (int f = 0; f < MFRAG; f++)
#pragma unroll
						for (int j = 0; j < NT; j++)
#pragma unroll
							for (int e = 0; e < 4; e++) {
								const int idx = ((o - 1) * WARPS_N + wn) * ACC + (f * NT + j) * 4 + e;
								tot[f][j][e] += red[idx * 32 + lane];
							}
			}
		}

		/* epilogue: sum e of tile (f, j) is c[m0 + 8 j + 2 t + e % 2][nw0 + 16 f + g + 8 (e / 2)] */
		if (wk == 0) {
#pragma unroll
			for (int f = 0; f < MFRAG; f++)
#pragma unroll
				for (int j = 0; j < NT; j++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const i64 row = m0 + j * 8 + 2 * t + e % 2, col = nw0 + f * 16 + g + 8 * (e / 2);
						if (row >= m || col >= n)
							continue;
						store_sum(tot[f][j][e], row, col, c, ldc, partials, split, z, m, n, bias);
					}
		}
		if (WARPS_K > 1)
			__syncthreads(); /* red is the next pass's */
	}
}
