/*
 * qgemv.cu - ktune's weight-quantized GEMM for few rows of A (decode, M up
 * to 16): a GEMV that streams the packed weights with wide loads, splits K
 * over a block's threads (and, for few rows of W, over blocks), and keeps
 * everything else in fp32 registers.
 *
 *     c[i, j] = sum over l of a[i, l] * w[j, l]  (+ bias[j]),  0 <= i < m, 0 <= j < n
 *
 * with w the dequantised packed weight (quant.cuh: format, modes), fp32
 * accumulation, one rounding to the element type at the end.
 *
 * Entry points:
 *     qgemv_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros,
 *                  const elem *bias, elem *c, float *partials, long long m, long long n,
 *                  long long k, long long lda, long long ldc, int zero_per_group)
 *     quant_reduce_kernel (quant.cuh)
 * a[i * lda + l]; c[i * ldc + j]; bias may be NULL.  A block owns ROWS rows
 * of w (j = blockIdx.x * ROWS + r) and MAX_M rows of a at a time; its
 * THREADS threads take its chunks of VEC words of each row in turn, UNROLL
 * chunks of every row in flight, and the block adds their sums in a fixed
 * order (warp shuffles, then the warps in order).
 *
 * Launch:
 *     block = (THREADS, 1, 1)
 *     grid  = (ceil(n / ROWS), split, min(ceil(m / MAX_M), 65535)); a block
 *             walks the rows of a in steps of gridDim.z * MAX_M
 *     split = 1: the block writes c (plus bias)
 *     split > 1: blockIdx.y takes the split'th part of each row's chunks and
 *             writes its sums to partials[blockIdx.y][i][j] (fp32, packed
 *             [split][m][n]); quant_reduce_kernel(partials, split, bias, c,
 *             m, n, ldc) then adds them in order
 *     no dynamic shared memory
 *
 * Tunables: THREADS, ROWS, VEC, UNROLL, CACHE, MIN_WARPS (below); MAX_M (the key's
 * rows of a, at most 16); DTYPE, BITS, GROUP, MODE (quant.cuh).
 *
 * Limits: a and wq 16-byte aligned, lda a multiple of 8 elements; k a
 * multiple of 32 and of GROUP; c must not overlap an input.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef THREADS
#define THREADS 128 /* threads per block: they split the row's chunks */
#endif
#ifndef ROWS
#define ROWS 4 /* rows of w per block: each thread reads its activations once for all of them */
#endif
#ifndef VEC
#define VEC 4 /* words per load of a row: 4 = 128-bit loads */
#endif
#ifndef UNROLL
#define UNROLL 2 /* chunks of each row a thread loads before using any: loads in flight */
#endif
#ifndef CACHE
#define CACHE 1 /* 1: the weights bypass L1 and go first out of L2 (each is read once) */
#endif
#ifndef MIN_WARPS
#define MIN_WARPS 0 /* warps an SM must hold at once: registers are capped to fit them; 0: one block */
#endif
#ifndef MAX_M
#define MAX_M 1 /* rows of a a block handles at a time (accumulators per row of w) */
#endif

#include "quant.cuh"

static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS is whole warps");
static_assert(ROWS >= 1 && ROWS <= 16, "ROWS is 1 to 16");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 words");
static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL is 1 to 8");
static_assert(CACHE == 0 || CACHE == 1, "CACHE is 0 or 1");
static_assert(MAX_M >= 1 && MAX_M <= 16, "MAX_M is 1 to 16");
static_assert(MIN_WARPS >= 0 && MIN_WARPS <= 64, "MIN_WARPS is 0 to 64");

/*
 * Blocks an SM must hold, for __launch_bounds__: unbounded, ptxas keeps
 * every unrolled load and activation in flight in up to 255 registers;
 * MIN_WARPS trades that for more warps, each with its own loads in flight.
 */
#define MIN_BLOCKS (MIN_WARPS * 32 / THREADS > 1 ? MIN_WARPS * 32 / THREADS : 1)

#define WARPS (THREADS / 32)
#define CHUNK (VEC * PER_WORD) /* weights of a row per chunk */
/* groups a chunk spans: chunks and groups are powers of two, aligned */
#define CHUNK_GROUPS (GROUP != 0 && CHUNK > GROUP ? CHUNK / GROUP : 1)
/* activations per load: 8 (16 bytes), or a word's 4 at 8 bits */
#define SLICE (PER_WORD < 8 ? PER_WORD : 8)
#define SLICES (PER_WORD / SLICE)

/* ------------------------------------------------------------------ loads */

struct chunk {
	u32 w[VEC];
};

/* VEC words of a row, 4 * VEC-byte aligned: streamed (CACHE), or through the read-only path. */
static __device__ __forceinline__ chunk load_chunk(const u32 *p, u64 policy)
{
	chunk c;
#if CACHE
	ld_words_stream<VEC>(c.w, p, policy);
#else
	(void)policy;
	ld_words<VEC>(c.w, p);
#endif
	return c;
}

/* SLICE activations (16 or 8 bytes, aligned), as floats. */
static __device__ __forceinline__ void load_slice(const elem *p, float v[SLICE])
{
	u32 x[SLICE / 2];
	ld_words<SLICE / 2>(x, p);
#pragma unroll
	for (int e = 0; e < SLICE; e++)
		v[e] = to_float((elem)(x[e / 2] >> (16 * (e % 2))));
}

static __device__ __forceinline__ elem load_meta(const elem *p)
{
	return *p;
}

/*
 * The codes of a word, code e as q_e * 2^(j b) with j = e % HALF_CODES: each
 * read in place within its 16-bit half (no shift but the half's), so that
 * a code costs an AND-OR and an add (code_float); q 2^(j b) < 2^16 is exact.
 * code_unit(e) = 2^-(j b) scales the activation it meets instead.
 */
#define HALF_CODES (16 / BITS)

static __device__ __forceinline__ void codes_scaled(u32 x, float q[PER_WORD])
{
	const u32 hi = x >> 16;
#pragma unroll
	for (int e = 0; e < PER_WORD; e++)
		q[e] = code_float((e < HALF_CODES ? x : hi) & (QMASK << (e % HALF_CODES * BITS)));
}

static __device__ __forceinline__ constexpr float code_unit(int e)
{
	return 1.0f / (float)(1u << (e % HALF_CODES * BITS));
}

/* ------------------------------------------------------------------ kernel */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
qgemv_kernel(const elem *a, const u32 *wq, const elem *scales, const elem *zeros, const elem *bias, elem *c,
	     float *partials, long long m, long long n, long long k, long long lda, long long ldc,
	     int zero_per_group)
{
	__shared__ float red[WARPS][ROWS * MAX_M];

	const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const i64 kw = k / PER_WORD;              /* words of a row holding weights */
	const i64 rw = (kw + 3) / 4 * 4;          /* a row's stride in words */
	const i64 groups = GROUP ? k / GROUP : 1; /* scales a row */
	const i64 nchunks = (kw + VEC - 1) / VEC;
	const int split = gridDim.y, z = blockIdx.y;
	const i64 c_begin = nchunks * z / split, c_end = nchunks * (z + 1) / split;
	const i64 j0 = (i64)blockIdx.x * ROWS;
	const u64 policy = CACHE ? evict_first_policy() : 0;

	for (i64 m0 = (i64)blockIdx.z * MAX_M; m0 < m; m0 += (i64)gridDim.z * MAX_M) {
		const int mcount = m - m0 < MAX_M ? (int)(m - m0) : MAX_M;
		const elem *a0 = a + m0 * lda;
		float acc[ROWS][MAX_M];
#pragma unroll
		for (int r = 0; r < ROWS; r++)
#pragma unroll
			for (int i = 0; i < MAX_M; i++)
				acc[r][i] = 0.0f;

		for (i64 base = c_begin + tid; base < c_end; base += (i64)THREADS * UNROLL) {
			/* load: UNROLL chunks of every row, and their groups' scales and zeros */
			chunk wv[UNROLL][ROWS];
			elem sc[UNROLL][ROWS][CHUNK_GROUPS], ze[UNROLL][ROWS][CHUNK_GROUPS];
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				const i64 ch = base + (i64)u * THREADS;
#pragma unroll
				for (int r = 0; r < ROWS; r++) {
					const i64 j = j0 + r;
					const bool live = ch < c_end && j < n;
#pragma unroll
					for (int v = 0; v < VEC; v++)
						wv[u][r].w[v] = 0;
					if (live)
						wv[u][r] = load_chunk(wq + j * rw + ch * VEC, policy);
#pragma unroll
					for (int g = 0; g < CHUNK_GROUPS; g++) {
						const i64 grp = GROUP ? ch * CHUNK / GROUP + g : 0;
						sc[u][r][g] = ze[u][r][g] = 0;
						if (live && grp < groups) {
							if (HAS_SCALE)
								sc[u][r][g] = load_meta(scales + j * groups + grp);
							if (HAS_ZERO)
								ze[u][r][g] = load_meta(zeros + (zero_per_group ? j * groups + grp : 0));
						}
					}
				}
			}

			/*
			 * compute: per word, every row's codes as floats, then for each
			 * row of a the word's two sums, sum q a and sum a, and acc +=
			 * mul * sum q a + add * sum a (= sum w a: w = q mul + add).
			 */
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				const i64 ch = base + (i64)u * THREADS;
				if (ch >= c_end)
					continue;
#pragma unroll
				for (int v = 0; v < VEC; v++) {
					const i64 word = ch * VEC + v;
					if (word >= kw) /* the row's last chunk, cut short */
						continue;
					const int g = CHUNK_GROUPS > 1 ? v * PER_WORD / GROUP : 0;
					float qf[ROWS][PER_WORD];
#pragma unroll
					for (int r = 0; r < ROWS; r++)
						codes_scaled(wv[u][r].w[v], qf[r]);
					const i64 l = word * PER_WORD;
#pragma unroll
					for (int i = 0; i < MAX_M; i++) {
						if (i >= mcount)
							break;
						float sqa[ROWS], sa = 0.0f;
#pragma unroll
						for (int r = 0; r < ROWS; r++)
							sqa[r] = 0.0f;
#pragma unroll
						for (int sl = 0; sl < SLICES; sl++) {
							float x[SLICE];
							load_slice(a0 + i * lda + l + sl * SLICE, x);
#pragma unroll
							for (int e = 0; e < SLICE; e++) {
								const int code = sl * SLICE + e;
								if (HAS_ZERO)
									sa += x[e];
								const float xs = x[e] * code_unit(code);
#pragma unroll
								for (int r = 0; r < ROWS; r++)
									sqa[r] = __fmaf_rn(qf[r][code], xs, sqa[r]);
							}
						}
#pragma unroll
						for (int r = 0; r < ROWS; r++) {
							const qparams p = qparams_of(sc[u][r][g], ze[u][r][g]);
							acc[r][i] = __fmaf_rn(p.mul, sqa[r], acc[r][i]);
							if (HAS_ZERO)
								acc[r][i] = __fmaf_rn(p.add, sa, acc[r][i]);
						}
					}
				}
			}
		}

		/* reduce: each warp's lanes by shuffles, then the warps in order */
#pragma unroll
		for (int r = 0; r < ROWS; r++)
#pragma unroll
			for (int i = 0; i < MAX_M; i++) {
				float s = acc[r][i];
#pragma unroll
				for (int d = 16; d > 0; d >>= 1)
					s += __shfl_xor_sync(0xffffffffu, s, d);
				if (lane == 0)
					red[warp][r * MAX_M + i] = s;
			}
		__syncthreads();
		for (int idx = tid; idx < ROWS * MAX_M; idx += THREADS) {
			const int r = idx / MAX_M, i = idx % MAX_M;
			const i64 j = j0 + r, row = m0 + i;
			if (j >= n || i >= mcount)
				continue;
			float s = red[0][idx];
#pragma unroll
			for (int w = 1; w < WARPS; w++)
				s += red[w][idx];
			store_sum(s, row, j, c, ldc, partials, split, z, m, n, bias);
		}
		__syncthreads(); /* red is reused by the next rows of a */
	}
}
