/*
 * qfrag.cu - ktune's weight-quantized GEMM for few rows of A (M up to 16),
 * on tensor cores with the weights as the mma's 16-row A operand: each lane
 * loads its own VEC words of two rows of w straight from global memory,
 * dequantises them in pairs of the element type (f16x2, bf16x2) and hands
 * them to mma.m16n8k16 as they are; the rows of A are the mma's 8 columns,
 * so M = 1 pads 8 columns, not 16 rows.
 *
 *     c[i, j] = sum over l of a[i, l] * w[j, l]  (+ bias[j]),  0 <= i < m, 0 <= j < n
 *
 * with w the dequantised packed weight (quant.cuh), each weight rounded
 * once to the element type, but twice for scale_shift in bf16 (-z s
 * rounds first, as in quant.cuh's fp32 path) and for f16's scale_shift
 * and either type's shift with a zero that is not an integer (q - z
 * rounds first); fp32 accumulation, one rounding of the result.
 *
 * Entry points:
 *     qfrag_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros,
 *                  const elem *bias, elem *c, float *partials, long long m, long long n,
 *                  long long k, long long lda, long long ldc, int zero_per_group)
 *     quant_reduce_kernel (quant.cuh)
 * as qgemv.cu's.
 *
 * Launch:
 *     block = (WARPS_K * 32, 1, 1)
 *     grid  = (ceil(n / (16 * ROW_TILES)), split, min(ceil(m / MAX_M), 65535));
 *             a block walks the rows of a in steps of gridDim.z * MAX_M
 *     split = 1: the block writes c (plus bias); split > 1: blockIdx.y takes
 *             the split'th part of the steps and writes partials[y][i][j]
 *             (fp32 [split][m][n]); quant_reduce_kernel adds them in order
 *     static shared memory only (the warps' sums)
 *
 * The k-permutation.  A step is KB = 4 * CH weights of a row, CH = VEC *
 * PER_WORD; lane (g = lane / 4, t = lane % 4) loads the t'th CH of rows g
 * and g + 8 of each 16-row tile.  A word's P = PER_WORD codes come out in
 * pairs (e, e + P / 2), e < P / 2: one shift and one AND-OR with the magic
 * number M (128 in bf16, 1024 in f16, whose ulp is 1) make the exact pair
 * (M + q_e, M + q_{e+P/2}), and two or three fma.rn.{bf16x2,f16x2} take it
 * to weights (weight_pair).
 * mma h of a word (h < P / 4) takes pairs 2h (its k slots 2t, 2t + 1) and
 * 2h + 1 (2t + 8, 2t + 9); the lane builds A's pairs of the same k with a
 * byte permute of the activations it loaded.  The order of K within a
 * product is free, so nothing is shuffled and no code crosses a word.
 *
 * Warps: WARPS_K warps share the block's ROW_TILES x 16 rows of w, taking
 * its batches of STAGES steps in turn (every load of a batch out before
 * its first mma), and add their sums in warp order through shared memory.
 *
 * Tunables: ROW_TILES, WARPS_K, STAGES, VEC (below); MAX_M (the key's rows
 * of a, at most 16); DTYPE, BITS, GROUP, MODE (quant.cuh).
 *
 * Limits: a and wq 16-byte aligned, lda a multiple of 8 elements; k a
 * multiple of CH, and CH at most GROUP (a lane's chunk lies in one group);
 * c must not overlap an input.  The host's prune holds these.  8-bit codes
 * in bf16 (M + q is not exact past 128) take quant.cuh's fp32 path: an
 * AND, a float trick and an fma a weight, and a conversion a pair.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef ROW_TILES
#define ROW_TILES 1 /* 16-row tiles of w a block (and each of its warps) owns */
#endif
#ifndef WARPS_K
#define WARPS_K 8 /* warps sharing the block's rows, taking its batches of steps in turn */
#endif
#ifndef STAGES
#define STAGES 2 /* steps a warp has in flight: their loads go out together */
#endif
#ifndef VEC
#define VEC 4 /* words of a row a lane loads a step: 4 = 128-bit loads */
#endif
#ifndef MAX_M
#define MAX_M 1 /* rows of a a block handles at a time: 1 to 16 */
#endif

#include "quant.cuh"

#define CH (VEC * PER_WORD)          /* weights of a row a lane holds a step */
#define KB (4 * CH)                  /* weights of a row a step */
#define PAIRS (PER_WORD / 2)         /* pairs a word */
#define M_TILES ((MAX_M + 7) / 8)    /* the mma's 8-column tiles of rows of a */
#define NACC (ROW_TILES * M_TILES * 4)
#if DTYPE == 1
#define MAGIC 0x4300u /* 128.0 in bf16: M + q is exact for q < 128 */
#else
#define MAGIC 0x6400u /* 1024.0 in f16: M + q is exact for q < 1024 */
#endif
#define MAGIC2 (MAGIC | MAGIC << 16)
#define QMASK2 (QMASK | QMASK << 16)

static_assert(ROW_TILES >= 1 && ROW_TILES <= 4, "ROW_TILES is 1 to 4");
static_assert(WARPS_K >= 1 && WARPS_K <= 16, "WARPS_K is 1 to 16");
static_assert(STAGES >= 1 && STAGES <= 8, "STAGES is 1 to 8");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 words");
static_assert(MAX_M >= 1 && MAX_M <= 16, "MAX_M is 1 to 16");

/* ------------------------------------------------- PTX beyond quant.cuh's */
/*
 * Here rather than in quant.cuh, whose every edit moves the template hash
 * of each family that includes it (and stales its shipped entries).
 */

/* fma of two packed pairs of the element type, rounded to nearest (sm_80: bf16x2 has fma, not sub or mul). */
static __device__ __forceinline__ u32 fma_pair(u32 x, u32 y, u32 z)
{
	u32 r;
#if DTYPE == 1
	asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(z));
#else
	asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(z));
#endif
	return r;
}

/* Bytes of x (0-3) and y (4-7) picked by sel. */
static __device__ __forceinline__ u32 prmt(u32 x, u32 y, u32 sel)
{
	u32 r;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(sel));
	return r;
}

/* (x & mask) | bits, one LOP3. */
static __device__ __forceinline__ u32 and_or(u32 x, u32 mask, u32 bits)
{
	u32 r;
	asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "r"(mask), "r"(bits));
	return r;
}

/* ------------------------------------------------------------ dequantisation */

#define ONE2 (DTYPE == 1 ? 0x3F803F80u : 0x3C003C00u)
#define NEG2 0x80008000u

/*
 * A group's dequantisation of pairs (M + q, M + q'): its zero negated, and
 * the final fma's mul and add.  In bf16, whose range is fp32's, scale_shift
 * is one fma past q, q s + (-z s) with -z s rounded once (as quant.cuh's
 * fp32 path does), and scale is one fma of M + q itself, (M + q) s - M s
 * (M s exact: M is a power of two).  f16 keeps q - z, then the product: z s
 * may pass f16's range where (q - z) s does not, and so may M s.
 */
#define FP32_PAIRS (DTYPE == 1 && BITS == 8) /* 8-bit codes in bf16: M + q is not exact past 128 */
#define FUSED_ZERO (DTYPE == 1 && MODE == 0) /* q s + (-z s) */
#define FUSED_MAGIC (DTYPE == 1 && MODE == 1) /* (M + q) s - M s */

struct gparams {
#if FP32_PAIRS
	qparams q; /* quant.cuh's fp32 dequantisation, each weight rounded once to bf16 */
#else
	u32 negz, mul, add;
#endif
};

static __device__ __forceinline__ u32 pair_of(elem x)
{
	return x | (u32)x << 16;
}

static __device__ __forceinline__ gparams gparams_of(elem scale, elem zero)
{
	gparams p;
#if FP32_PAIRS
	p.q = qparams_of(scale, zero);
#else
	p.negz = pair_of(zero) ^ NEG2;
	p.mul = MODE == 2 ? ONE2 : pair_of(scale);
	if (FUSED_ZERO)
		p.add = fma_pair(p.negz, p.mul, NEG2); /* -z s, rounded once */
	else if (FUSED_MAGIC)
		p.add = fma_pair(MAGIC2 ^ NEG2, p.mul, NEG2); /* -M s, exact */
	else
		p.add = MODE == 3 ? pair_of(zero) : NEG2;
#endif
	return p;
}

/*
 * The weights of codes e and e + P/2 of word w, as a pair: q exact (M + q
 * less M), then q - z (rounded once: exact for an integer zero), then
 * times the scale, or times the scale plus the zero (fma); in bf16 the
 * fused forms above.
 */
template <int E>
static __device__ __forceinline__ u32 weight_pair(u32 w, const gparams &p)
{
#if FP32_PAIRS
	return pack_pair(dequant((w >> (E * BITS)) & QMASK, p.q), dequant((w >> (E * BITS + 16)) & QMASK, p.q));
#else
	const u32 r = and_or(w >> (E * BITS), QMASK2, MAGIC2);
	if (FUSED_MAGIC)
		return fma_pair(r, p.mul, p.add);
	u32 d = fma_pair(r, ONE2, MAGIC2 ^ NEG2);
	if (!FUSED_ZERO && (MODE == 0 || MODE == 2))
		d = fma_pair(d, ONE2, p.negz);
	return MODE == 2 ? d : fma_pair(d, p.mul, p.add);
#endif
}

/* ----------------------------------------------------------------- kernel */

/* Activations a lane holds a step: CH elements of each of its rows of a, in pairs. */
struct a_chunk {
	u32 r[M_TILES][CH / 2];
};

/* The pair (element u, element v) of a row's chunk (u, v < CH, compile-time). */
template <int U, int V>
static __device__ __forceinline__ u32 a_pair(const u32 (&r)[CH / 2])
{
	constexpr u32 lo = U % 2 ? 0x32u : 0x10u, hi = V % 2 ? 0x76u : 0x54u;
	return prmt(r[U / 2], r[V / 2], lo | hi << 8);
}

/* The mmas of word J of a step: its PAIRS / 2 k16 products for every row tile and 8 rows of a. */
template <int J, int H>
static __device__ __forceinline__ void word_mmas(float (&acc)[ROW_TILES][M_TILES][4], const u32 (&pw)[ROW_TILES][2][PAIRS],
						 const a_chunk &x)
{
	if constexpr (H < PAIRS / 2) {
		constexpr int base = J * PER_WORD;
#pragma unroll
		for (int mt = 0; mt < M_TILES; mt++) {
			const u32 b[2] = { a_pair<base + 2 * H, base + 2 * H + PAIRS>(x.r[mt]),
					   a_pair<base + 2 * H + 1, base + 2 * H + 1 + PAIRS>(x.r[mt]) };
#pragma unroll
			for (int t = 0; t < ROW_TILES; t++) {
				const u32 a[4] = { pw[t][0][2 * H], pw[t][1][2 * H], pw[t][0][2 * H + 1], pw[t][1][2 * H + 1] };
				mma_16816(acc[t][mt], a, b);
			}
		}
		word_mmas<J, H + 1>(acc, pw, x);
	}
}

/* Every pair of word J of each row (rows g and g + 8 of each tile). */
template <int J, int E>
static __device__ __forceinline__ void word_pairs(u32 (&pw)[ROW_TILES][2][PAIRS], const u32 (&w)[ROW_TILES][2][VEC],
						  const gparams (&p)[ROW_TILES][2])
{
	if constexpr (E < PAIRS) {
#pragma unroll
		for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				pw[t][h][E] = weight_pair<E>(w[t][h][J], p[t][h]);
		word_pairs<J, E + 1>(pw, w, p);
	}
}

/* A step's products: word by word, its pairs, then their mmas. */
template <int J>
static __device__ __forceinline__ void step_mmas(float (&acc)[ROW_TILES][M_TILES][4], const u32 (&w)[ROW_TILES][2][VEC],
						 const gparams (&p)[ROW_TILES][2], const a_chunk &x)
{
	if constexpr (J < VEC) {
		u32 pw[ROW_TILES][2][PAIRS];
		word_pairs<J, 0>(pw, w, p);
		word_mmas<J, 0>(acc, pw, x);
		step_mmas<J + 1>(acc, w, p, x);
	}
}

/* What a lane's batches need: its rows of w, where k and its split end, the rows of a it multiplies. */
struct lane_ctx {
	const elem *a;
	const u32 *wq;
	const elem *scales, *zeros;
	i64 rows[ROW_TILES][2]; /* this lane's rows of w (past n: row n - 1, loaded and never stored) */
	i64 m0, m, lda, k, rw, ngroups, group;
	int s_end, g, t4, zero_per_group;
	u64 policy;
};

/*
 * The batch of steps st .. st + STAGES - 1 of a warp: every load out
 * first, then each step's pairs and mmas.  A WHOLE batch lies in k and in
 * the split, so that nothing is masked; otherwise a chunk past either
 * (a lane's chunk lies in k or past it whole: k is a multiple of CH) has
 * zero activations.  Rows of a past m read row m0 and their columns of the
 * products are never stored.
 */
template <bool WHOLE>
static __device__ __forceinline__ void batch(float (&acc)[ROW_TILES][M_TILES][4], const lane_ctx &l, int st)
{
	u32 w[STAGES][ROW_TILES][2][VEC];
#pragma unroll
	for (int i = 0; i < STAGES; i++) {
		const i64 kc = (i64)(st + i) * KB + l.t4 * CH;
		const bool in = WHOLE || (st + i < l.s_end && kc < l.k);
#pragma unroll
		for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				if (in)
					ld_words_stream<VEC>(w[i][t][h], l.wq + l.rows[t][h] * l.rw + kc / PER_WORD, l.policy);
				else
#pragma unroll
					for (int v = 0; v < VEC; v++)
						w[i][t][h][v] = 0;
			}
	}
#pragma unroll
	for (int i = 0; i < STAGES; i++) {
		const i64 kc = (i64)(st + i) * KB + l.t4 * CH;
		const bool in = WHOLE || (st + i < l.s_end && kc < l.k);
		const i64 gi = (in ? kc : 0) / l.group;
		gparams p[ROW_TILES][2];
#pragma unroll
		for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				p[t][h] = gparams_of(HAS_SCALE ? l.scales[l.rows[t][h] * l.ngroups + gi] : (elem)0,
						     HAS_ZERO ? l.zeros[l.zero_per_group ? l.rows[t][h] * l.ngroups + gi : 0]
							      : (elem)0);
		a_chunk x;
#pragma unroll
		for (int mt = 0; mt < M_TILES; mt++) {
			const i64 row = l.m0 + mt * 8 + l.g;
			const elem *src = l.a + (row < l.m ? row : l.m0) * l.lda + (in ? kc : 0);
#pragma unroll
			for (int v = 0; v < CH / 8; v++) {
				u32 q[4];
				ld_words<4>(q, src + 8 * v);
#pragma unroll
				for (int j = 0; j < 4; j++)
					x.r[mt][4 * v + j] = in ? q[j] : 0u;
			}
			if constexpr (CH % 8) { /* 4 elements: 8-bit codes, VEC 1 */
				u32 q[2];
				ld_words<2>(q, src);
				x.r[mt][0] = in ? q[0] : 0u;
				x.r[mt][1] = in ? q[1] : 0u;
			}
		}
		step_mmas<0>(acc, w[i], p, x);
	}
}

extern "C" __global__ void __launch_bounds__(WARPS_K * 32)
qfrag_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros, const elem *bias, elem *c,
	     float *partials, long long m, long long n, long long k, long long lda, long long ldc, int zero_per_group)
{
	__shared__ float sums[WARPS_K > 1 ? WARPS_K - 1 : 1][NACC][32];
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4;
	const int split = gridDim.y, z = blockIdx.y;
	const i64 rw = (k / PER_WORD + 3) / 4 * 4; /* words a row (the format's padding) */
	const i64 group = GROUP ? GROUP : k, ngroups = k / group;
	const i64 n0 = (i64)blockIdx.x * 16 * ROW_TILES;
	const int steps = (int)((k + KB - 1) / KB), per_split = (steps + split - 1) / split;
	const int s_begin = z * per_split < steps ? z * per_split : steps;
	const int s_end = s_begin + per_split < steps ? s_begin + per_split : steps;
	const u64 policy = evict_first_policy();

	lane_ctx l;
	l.a = a;
	l.wq = wq;
	l.scales = scales;
	l.zeros = zeros;
#pragma unroll
	for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const i64 r = n0 + t * 16 + h * 8 + g;
			l.rows[t][h] = r < n ? r : n - 1;
		}
	l.m = m;
	l.lda = lda;
	l.k = k;
	l.rw = rw;
	l.ngroups = ngroups;
	l.group = group;
	l.s_end = s_end;
	l.g = g;
	l.t4 = t4;
	l.zero_per_group = zero_per_group;
	l.policy = policy;

	for (i64 m0 = (i64)blockIdx.z * MAX_M; m0 < m; m0 += (i64)gridDim.z * MAX_M) {
		l.m0 = m0;
		float acc[ROW_TILES][M_TILES][4];
#pragma unroll
		for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
			for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[t][mt][e] = 0.0f;

#pragma unroll 1
		for (int st = s_begin + warp * STAGES; st < s_end; st += WARPS_K * STAGES) {
			if (st + STAGES <= s_end && (i64)(st + STAGES) * KB <= k) /* the warp's choice, not a lane's */
				batch<true>(acc, l, st);
			else
				batch<false>(acc, l, st);
		}

		/* the warps add up in warp order */
		if (WARPS_K > 1) {
			if (warp > 0) {
#pragma unroll
				for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
					for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
						for (int e = 0; e < 4; e++)
							sums[warp - 1][(t * M_TILES + mt) * 4 + e][lane] = acc[t][mt][e];
			}
			__syncthreads();
			if (warp == 0)
				for (int w2 = 1; w2 < WARPS_K; w2++)
#pragma unroll
					for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
						for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
							for (int e = 0; e < 4; e++)
								acc[t][mt][e] += sums[w2 - 1][(t * M_TILES + mt) * 4 + e][lane];
			__syncthreads(); /* sums is free for the next rows of a */
		}
		if (warp == 0)
#pragma unroll
			for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
				for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const i64 col = n0 + t * 16 + g + (e >= 2 ? 8 : 0);
						const i64 row = m0 + mt * 8 + 2 * t4 + (e & 1);
						if (row < m && col < n)
							store_sum(acc[t][mt][e], row, col, c, ldc, partials, split, z, m, n, bias);
					}
	}
}
