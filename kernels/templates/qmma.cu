/*
 * qmma.cu - ktune's weight-quantized GEMM streamed through registers onto
 * tensor cores: each lane loads its own 16-byte chunks of the packed weights
 * straight from global memory (no shared memory), several k-blocks in
 * flight, dequantises them in registers into mma.sync B fragments and uses
 * each fragment for every m16 tile of the block (M of 1 to 128).
 *
 *     c[i, j] = sum over l of a[i, l] * w[j, l]  (+ bias[j]),  0 <= i < m, 0 <= j < n
 *
 * with w the dequantised packed weight (quant.cuh), fp32 accumulation, one
 * rounding of each dequantised weight to the element type (the mma's
 * operand, as qgemm.cu) and one of the result.
 *
 * Entry points:
 *     qmma_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros,
 *                 const elem *bias, elem *c, float *partials, long long m, long long n,
 *                 long long k, long long lda, long long ldc, int zero_per_group)
 *     quant_reduce_kernel (quant.cuh)
 * as qgemv.cu's.
 *
 * Launch (qgemm.cu's contract, with BLOCK_N = WARPS_N * NFRAG * 8):
 *     block = (WARPS_N * WARPS_K * 32, 1, 1)
 *     grid  = (ceil(n / BLOCK_N), min(ceil(m / BLOCK_M), 65535), split); a
 *             block walks the tiles of rows in steps of gridDim.y
 *     split = 1: the block writes c (plus bias); split > 1: blockIdx.z takes
 *             the split'th part of the k-blocks and writes partials[z][i][j]
 *             (fp32 [split][m][n]); quant_reduce_kernel adds them in order
 *     static shared memory only, and only for WARPS_K > 1 (RED_BYTES)
 *
 * The k-permutation.  A dot product over k does not care about the order of
 * k as long as A and w share it.  In mma.m16n8k16 lane (g = lane / 4, t =
 * lane % 4) holds B[k][n = g] and A[g and g + 8][k] for the same four k of
 * the step: 2t, 2t + 1, 2t + 8, 2t + 9.  So lane t of a quad loads VEC words
 * of w's row n0 + g: CH = VEC * PER_WORD consecutive weights starting at
 * CH * t of a k-block of KB = 4 * CH weights (the natural v1 layout, no
 * repacking), and in the block's s'th k16 step uses its weights CH * t + 4s
 * .. + 3 as those four slots, in that order; it loads A[row][the same four
 * k] for its A fragment.  CH / 4 steps consume the k-block without a
 * shuffle, and the four codes of a step always lie in one word.
 *
 * A straight from global memory (L1), not staged in shared memory: it is
 * small (m x k elements, at most 1 MiB at m = 128, k = 4096, against 8 MiB
 * of 4-bit weights at n = 4096) and L2-resident, every warp of a block reads
 * the same rows at the same k (L1 hits after the first), and with no shared
 * memory there are no barriers in the loop and L1 keeps its whole capacity.
 * A lane loads 16 to 64 bytes a row (TURN_K k) each turn of the k-block's
 * loop, just before it uses them; the weights, which come from DRAM, are
 * the loads kept in flight.  Rows of A past m load row m - 1 (their
 * products are never stored); k past the end uses zeros.  Not yet measured
 * against a staged A: a GPU run should say (docs/quant.md).
 *
 * Dequantisation: four codes of a step lie at bits pos_j = j * BITS of x
 * (the word shifted to the step's first code; 8 bits: codes 2, 3 from x >>
 * 16); (x & QMASK << pos_j) | 0x4B000000 is the float 2^23 + q * 2^pos_j,
 * less 2^23 exactly q * 2^pos_j, and fma(that, mul * 2^-pos_j, add) the
 * weight fma(q, mul, add) of quant.cuh, rounded once to fp32, then to the
 * element type: an AND-OR, an add and an fma a weight, no shift.
 *
 * Warps: WARPS_N x NFRAG n8 tiles across the block; each warp holds all
 * BLOCK_M / 16 m16 tiles.  WARPS_K warps share each part of N, taking every
 * WARPS_K'th k-block of the block's range, and add their sums through
 * shared memory at the end in a fixed order (deterministic).
 *
 * Registers: the k-block's loop is rolled, a turn of TURN_K k (8 codes or
 * a word of each row) at a time; unrolled, ptxas hoists every load of A in
 * the k-block to its top and spills from 2 n8 tiles on.  gemm_quant.c's
 * prune holds a fit of ptxas's counts, so that no admitted config spills.
 *
 * Tunables: BLOCK_M, NFRAG, WARPS_N, WARPS_K, VEC, UNROLL (below); DTYPE,
 * BITS, GROUP, MODE (quant.cuh).
 *
 * Limits: a and wq 16-byte aligned, lda a multiple of 8; k a multiple of 32
 * and of GROUP (the k-block past k reads no weight it uses); any m, n; c
 * must not overlap an input; sm_80 or newer.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 16 /* rows of c per block: BLOCK_M / 16 m16 tiles a warp, all fed by each B fragment */
#endif
#ifndef NFRAG
#define NFRAG 4 /* n8 tiles (8 rows of w each) a warp */
#endif
#ifndef WARPS_N
#define WARPS_N 2 /* warps along N */
#endif
#ifndef WARPS_K
#define WARPS_K 1 /* warps sharing a part of N, taking every WARPS_K'th k-block */
#endif
#ifndef VEC
#define VEC 4 /* words of a row a lane loads per k-block: 4 = 128-bit loads */
#endif
#ifndef UNROLL
#define UNROLL 2 /* k-blocks of weights in flight a warp while it computes one */
#endif

#include "quant.cuh"

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WARPS_N * WARPS_K * 32)
#define MT (BLOCK_M / 16)             /* m16 tiles a warp */
#define BLOCK_N (WARPS_N * NFRAG * 8) /* columns of c (rows of w) per block */
#define CH (VEC * PER_WORD)           /* weights of a row a lane loads per k-block */
#define KB (4 * CH)                   /* a k-block: the 4 lanes of a quad */
/* groups a lane's chunk spans: CH and GROUP are powers of two, aligned */
#define CG (GROUP != 0 && CH > GROUP ? CH / GROUP : 1)
/* words of each row a turn of the k-block's loop: at least 8 codes (2 k16 steps) */
#define WPI (PER_WORD < 8 ? 8 / PER_WORD : 1)
#define TURN_K (WPI * PER_WORD) /* k a turn: 8, 8, 16, 32 at 8, 4, 2, 1 bits */
#define ACC (MT * NFRAG * 4)          /* accumulators per lane */
#define RED_FLOATS ((WARPS_K - 1) * WARPS_N * 32 * ACC)

static_assert(BLOCK_M % 16 == 0 && BLOCK_M >= 16 && BLOCK_M <= 128, "BLOCK_M is 1 to 8 m16 tiles");
static_assert(NFRAG >= 1 && NFRAG <= 8, "NFRAG is 1 to 8 n8 tiles");
static_assert(WARPS_N * WARPS_K >= 1 && WARPS_N * WARPS_K <= 8, "1 to 8 warps a block");
static_assert(VEC == 2 || VEC == 4, "VEC is 2 or 4 words");
static_assert(UNROLL >= 1 && UNROLL <= 4, "UNROLL is 1 to 4");
static_assert(VEC % WPI == 0 && TURN_K <= 32, "a turn is whole words, within a group");
static_assert(RED_FLOATS * 4 <= 48 * 1024, "static shared memory is at most 48 KiB");

/* ------------------------------------------------------------------- load */

/* One k-block of the warp's NFRAG rows of w (this lane's), with its groups' raw scales and zeros. */
struct stage {
	u32 w[NFRAG][VEC];
	elem s[NFRAG][CG], z[NFRAG][CG];
};

/*
 * Issues this lane's loads of k-block kt for rows nw0 + 8 nj + g: VEC words
 * streamed (not kept in L1, first out of L2), and the scales and zeros.
 * Rows past n load row n - 1, a chunk past the row's weights the row's
 * first (compute gives them zero activations).
 */
static __device__ __forceinline__ void load_stage(stage &st, i64 kt, const u32 *wq, const elem *scales,
						  const elem *zeros, i64 n, i64 kw, i64 rw, i64 groups,
						  int zero_per_group, i64 nw0, int g, int t, u64 policy)
{
	const i64 word = kt * (4 * VEC) + t * VEC; /* this lane's first word of the row */
	const bool live = word < kw;
	const i64 grp0 = GROUP && live ? (word * PER_WORD) / (GROUP ? GROUP : 1) : 0;
#pragma unroll
	for (int nj = 0; nj < NFRAG; nj++) {
		const i64 r = nw0 + nj * 8 + g, row = r < n ? r : n - 1;
		ld_words_stream<VEC>(st.w[nj], wq + row * rw + (live ? word : 0), policy);
#pragma unroll
		for (int cg = 0; cg < CG; cg++) {
			const i64 grp = grp0 + cg < groups ? grp0 + cg : groups - 1; /* a chunk cut short by k */
			st.s[nj][cg] = HAS_SCALE ? scales[row * groups + grp] : (elem)0;
			st.z[nj][cg] = HAS_ZERO ? zeros[zero_per_group ? row * groups + grp : 0] : (elem)0;
		}
	}
}

/* ------------------------------------------------------------ dequantise */

/* The bit of code j (0..3) of a step in the word x or, where it would reach 2^23, in x >> 16. */
static __device__ __forceinline__ constexpr int code_pos(int j)
{
	return j * BITS + BITS > 23 ? j * BITS - 16 : j * BITS;
}

/* A group's dequantisation with the multiplier of each code position: w = fma(q 2^pos, mul 2^-pos, add). */
struct qstep {
	float mul[4], add;
};

static __device__ __forceinline__ qstep qstep_of(elem scale, elem zero)
{
	const qparams p = qparams_of(scale, zero);
	qstep q;
#pragma unroll
	for (int j = 0; j < 4; j++)
		q.mul[j] = p.mul * (1.0f / (float)(1u << code_pos(j))); /* a power of two: exact */
	q.add = p.add;
	return q;
}

/*
 * The B fragment of k16 step `step` of a chunk: its codes 4 step .. + 3 as
 * slots 2t, 2t + 1 (b[0]) and 2t + 8, 2t + 9 (b[1]), dequantised and
 * rounded to the element type, low half first.
 */
static __device__ __forceinline__ void b_fragment(const u32 (&w)[VEC], int step, const qstep &q, u32 b[2])
{
	const int bit = 4 * step * BITS; /* of the step's first code in the chunk */
	const u32 x = w[bit / 32] >> (bit % 32);
	float v[4];
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const u32 xj = j * BITS + BITS > 23 ? x >> 16 : x;
		const float f = __uint_as_float((xj & (QMASK << code_pos(j))) | 0x4B000000u) - 8388608.0f;
		v[j] = __fmaf_rn(f, q.mul[j], q.add);
	}
	b[0] = pack_pair(v[0], v[1]);
	b[1] = pack_pair(v[2], v[3]);
}

/* ------------------------------------------------------------------- mma */

/* 8 activations of a row (16 bytes, aligned). */
struct __align__(16) aslice {
	u32 v[4];
};

/* The scale and zero of group cg of a chunk, by selects (an index into registers would go to local memory). */
static __device__ __forceinline__ qstep qstep_at(const stage &st, int nj, int cg)
{
	elem s = st.s[nj][0], z = st.z[nj][0];
#pragma unroll
	for (int i = 1; i < CG; i++) {
		s = cg == i ? st.s[nj][i] : s;
		z = cg == i ? st.z[nj][i] : z;
	}
	return qstep_of(s, z);
}

/*
 * One k-block, WPI words of each row a turn in a loop that is not
 * unrolled: unrolled, ptxas hoists every load of A in the k-block to its
 * top (twice the registers, and spills past 2 n8 tiles).  The words move
 * down the chunk (w[0] is the turn's), so no register array is indexed by
 * the loop's counter.  a_row[mi][h] is row 16 mi + 8 h + g of the tile
 * (clamped to m - 1).
 */
static __device__ __forceinline__ void compute(float (&acc)[MT][NFRAG][4], const stage &st, i64 kt,
					       const elem *const (&a_row)[MT][2], i64 k, int t)
{
	const i64 kc = kt * KB + (i64)t * CH; /* this lane's first k of the k-block */
	u32 w[NFRAG][VEC];
	qstep q[NFRAG];
#pragma unroll
	for (int nj = 0; nj < NFRAG; nj++) {
#pragma unroll
		for (int v = 0; v < VEC; v++)
			w[nj][v] = st.w[nj][v];
		if (CG == 1)
			q[nj] = qstep_of(st.s[nj][0], st.z[nj][0]);
	}
#pragma unroll 1
	for (int v = 0; v < VEC; v += WPI) {
		const i64 l = kc + (i64)v * PER_WORD; /* the turn's first k: all its TURN_K past k or none */
		const bool in = l < k;
		if (CG > 1) {
#pragma unroll
			for (int nj = 0; nj < NFRAG; nj++)
				q[nj] = qstep_at(st, nj, v * PER_WORD / (GROUP ? GROUP : 1));
		}
		/* A: TURN_K consecutive k of rows g and g + 8 of each tile, zeros past k */
		aslice av[MT][2][TURN_K / 8];
#pragma unroll
		for (int mi = 0; mi < MT; mi++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const elem *p = in ? a_row[mi][h] + l : a_row[mi][h];
#pragma unroll
				for (int e = 0; e < TURN_K / 8; e++) {
					av[mi][h][e] = *(const aslice *)(p + 8 * e);
#pragma unroll
					for (int x = 0; x < 4; x++)
						av[mi][h][e].v[x] = in ? av[mi][h][e].v[x] : 0u;
				}
			}
#pragma unroll
		for (int s = 0; s < TURN_K / 4; s++) {
			u32 bf[NFRAG][2];
#pragma unroll
			for (int nj = 0; nj < NFRAG; nj++)
				b_fragment(w[nj], s, q[nj], bf[nj]);
#pragma unroll
			for (int mi = 0; mi < MT; mi++) {
				/* slots 2t, 2t+1 are k l + 4s, +1; slots 2t+8, 2t+9 are l + 4s + 2, +3 */
				const aslice &r0 = av[mi][0][s / 2], &r1 = av[mi][1][s / 2];
				const int x = 2 * (s % 2);
				const u32 af[4] = { r0.v[x], r1.v[x], r0.v[x + 1], r1.v[x + 1] };
#pragma unroll
				for (int nj = 0; nj < NFRAG; nj++)
					mma_16816(acc[mi][nj], af, bf[nj]);
			}
		}
#pragma unroll
		for (int nj = 0; nj < NFRAG; nj++)
#pragma unroll
			for (int i = 0; i + WPI < VEC; i++)
				w[nj][i] = w[nj][i + WPI];
	}
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
qmma_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros, const elem *bias, elem *c,
	    float *partials, long long m, long long n, long long k, long long lda, long long ldc, int zero_per_group)
{
	__shared__ float red[WARPS_K > 1 ? RED_FLOATS : 1];

	const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const int wk = warp / WARPS_N, wn = warp % WARPS_N;
	const int g = lane / 4, t = lane % 4;

	const i64 kw = k / PER_WORD;              /* words of a row holding weights */
	const i64 rw = (kw + 3) / 4 * 4;          /* a row's stride in words */
	const i64 groups = GROUP ? k / GROUP : 1; /* scales a row */
	const i64 nw0 = (i64)blockIdx.x * BLOCK_N + wn * NFRAG * 8; /* the warp's first row of w */
	const int split = gridDim.z, z = blockIdx.z;
	const i64 k_blocks = (k + KB - 1) / KB;
	const i64 kb_begin = k_blocks * z / split, kb_end = k_blocks * (z + 1) / split;
	/* this warp's k-blocks: kb_begin + wk, + WARPS_K, ... */
	const int mine = kb_end - kb_begin > wk ? (int)((kb_end - kb_begin - wk + WARPS_K - 1) / WARPS_K) : 0;
	const i64 m_tiles = (m + BLOCK_M - 1) / BLOCK_M;
	const u64 policy = evict_first_policy();

	for (i64 mt_i = blockIdx.y; mt_i < m_tiles; mt_i += gridDim.y) {
		const i64 m0 = mt_i * BLOCK_M;
		const elem *a_row[MT][2];
#pragma unroll
		for (int mi = 0; mi < MT; mi++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const i64 r = m0 + mi * 16 + h * 8 + g;
				a_row[mi][h] = a + (r < m ? r : m - 1) * lda;
			}
		float acc[MT][NFRAG][4];
#pragma unroll
		for (int mi = 0; mi < MT; mi++)
#pragma unroll
			for (int nj = 0; nj < NFRAG; nj++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[mi][nj][e] = 0.0f;

		/*
		 * The register pipeline: buf[u] holds k-block i + u in flight;
		 * each is copied out, refilled with k-block i + u + UNROLL, and
		 * computed while UNROLL loads are outstanding.
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
				compute(acc, cur, kb_begin + wk + (i64)(i + u) * WARPS_K, a_row, k, t);
			}
		}

		/* the WARPS_K warps of a part add their sums: the first takes the others' in order */
		if (WARPS_K > 1) {
			if (wk > 0) {
#pragma unroll
				for (int mi = 0; mi < MT; mi++)
#pragma unroll
					for (int nj = 0; nj < NFRAG; nj++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const int idx = ((wk - 1) * WARPS_N + wn) * ACC + (mi * NFRAG + nj) * 4 + e;
							red[idx * 32 + lane] = acc[mi][nj][e];
						}
			}
			__syncthreads();
			if (wk == 0) {
#pragma unroll 1
				for (int o = 1; o < WARPS_K; o++)
#pragma unroll
					for (int mi = 0; mi < MT; mi++)
#pragma unroll
						for (int nj = 0; nj < NFRAG; nj++)
#pragma unroll
							for (int e = 0; e < 4; e++) {
								const int idx = ((o - 1) * WARPS_N + wn) * ACC + (mi * NFRAG + nj) * 4 + e;
								acc[mi][nj][e] += red[idx * 32 + lane];
							}
			}
		}

		/* epilogue: c (plus bias), or this split's partials */
		if (wk == 0) {
			const bool pairs = ((unsigned long long)c & 3) == 0 && (ldc & 1) == 0;
#pragma unroll
			for (int mi = 0; mi < MT; mi++)
#pragma unroll
				for (int nj = 0; nj < NFRAG; nj++)
#pragma unroll
					for (int h = 0; h < 2; h++) {
						const i64 row = m0 + mi * 16 + h * 8 + g, col = nw0 + nj * 8 + 2 * t;
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
		if (WARPS_K > 1)
			__syncthreads(); /* red is the next tile's */
	}
}
