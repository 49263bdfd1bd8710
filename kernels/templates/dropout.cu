/*
 * dropout.cu - ktune's dropout, with a mask that is a pure function of
 * (seed, offset, i):
 *
 *     y[i] = keep(i) ? x[i] / (1 - p) : 0,  0 <= i < n
 *
 *     keep(i) = (word (i % 4) of Philox4x32-10(counter, seed)) * 2^-32 >= p,
 *     counter = offset + i / 4 as a 128-bit integer (its high 64 bits 0),
 *     the key's low word the low 32 bits of seed
 *
 * so every config, grid and vector width drops the same elements, and the
 * backward pass (dx = dy * mask / (1 - p)) is this kernel run on dy with
 * the same seed and offset.  A caller that draws n elements per call
 * advances offset by ceil(n / 4) to get fresh masks.  The scale multiplies
 * in fp32 (x * (1 / (1 - p)), exact for p = 0 and 0.5); the result rounds
 * to the element type.  x and y hold n elements of DTYPE (prelude.cuh); y
 * may be x (in place), but must not overlap it otherwise.
 *
 * Entry point:
 *     dropout_kernel(const elem *x, elem *y, long long n, float p,
 *                    unsigned long long seed, unsigned long long offset)
 *
 * Tunables (prelude.cuh): DTYPE, ALIGNED, VEC, UNROLL, THREADS, MIN_WARPS, CACHE.
 *
 * Launch: the items are chunks of CHUNK = max(VEC_W, 4) elements, whole
 * Philox draws (VEC_W = VEC when ALIGNED, else 1):
 *     block = (THREADS, 1, 1)
 *     grid  = (min(ceil(n / (CHUNK * THREADS * UNROLL)), SMs * BLOCKS_PER_SM), 1, 1),
 *             no cap when BLOCKS_PER_SM = 0 (a launch parameter, not
 *             compiled in); any grid is correct
 *
 * Limits:
 *   - any n >= 0 (64-bit); the last, shorter chunk goes element by element
 *   - 0 <= p < 1; p = 0 copies x
 *   - ALIGNED=1 requires x and y 16-byte aligned
 */
#include "prelude.cuh"

/* elements per item: whole vectors and whole Philox draws of 4 words */
#define CHUNK (VEC_W > 4 ? VEC_W : 4)
#define CHUNK_VECS (CHUNK / VEC_W)
#define CHUNK_DRAWS (CHUNK / 4)

/* ----------------------------------------------------------------- compute */

/*
 * keep(i) compares word * 2^-32 >= p exactly, in integers: word >= p * 2^32,
 * that is word >= ceil(p * 2^32) (p * 2^32 is exact in fp32; below 2^32
 * for p < 1).
 */
static __device__ __forceinline__ u32 keep_threshold(float p)
{
	return __float2uint_ru(p * 4294967296.0f);
}

/* The Philox draw for elements 4d ... 4d + 3. */
static __device__ __forceinline__ philox4 draw(u64 seed, u64 offset, i64 d)
{
	const u64 counter = offset + (u64)d;
	return philox4x32_10((u32)counter, (u32)(counter >> 32), 0, 0, (u32)seed, (u32)(seed >> 32));
}

/* ------------------------------------------------------------------ kernel */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
dropout_kernel(const elem *x, elem *y, long long n, float p, unsigned long long seed,
	       unsigned long long offset)
{
	const u32 threshold = keep_threshold(p);
	const float scale = 1.0f / (1.0f - p);
	const i64 nchunks = (n + CHUNK - 1) / CHUNK;

	for (i64 c0 = walk_first(); c0 < nchunks; c0 += walk_step()) {
		vec xv[UNROLL][CHUNK_VECS];

		/* load: UNROLL independent chunks in flight */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 c = c0 + u * THREADS;
			if ((c + 1) * CHUNK <= n) {
#pragma unroll
				for (int k = 0; k < CHUNK_VECS; k++)
					xv[u][k] = load_vec(x + c * CHUNK + k * VEC_W);
			}
		}

		/* compute (draw the mask, scale) and store */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 c = c0 + u * THREADS;
			if (c >= nchunks)
				continue;
			philox4 r[CHUNK_DRAWS];
#pragma unroll
			for (int d = 0; d < CHUNK_DRAWS; d++)
				r[d] = draw(seed, offset, c * CHUNK_DRAWS + d);
			if ((c + 1) * CHUNK <= n) {
#pragma unroll
				for (int k = 0; k < CHUNK_VECS; k++) {
					vec yv = {};
#pragma unroll
					for (int j = 0; j < VEC_W; j++) {
						const int e = k * VEC_W + j; /* element of the chunk */
						const bool keep = r[e / 4].w[e % 4] >= threshold;
						vec_set(yv, j, keep ? vec_get(xv[u][k], j) * scale : 0.0f);
					}
					store_vec(y + c * CHUNK + k * VEC_W, yv);
				}
			} else {
				/* the last, shorter chunk: element by element, unrolled so that r
				   stays in registers */
#pragma unroll
				for (int e = 0; e < CHUNK; e++) {
					const i64 i = c * CHUNK + e;
					const bool keep = r[e / 4].w[e % 4] >= threshold;
					if (i < n)
						store_elem(y + i, keep ? load_elem(x + i) * scale : 0.0f);
				}
			}
		}
	}
}
