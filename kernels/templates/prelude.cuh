/*
 * prelude.cuh - what the elementwise templates (add.cu, gelu.cu, glu.cu,
 * dropout.cu) share: the element type and its conversions, vector and
 * element loads and stores with cache hints, the grid-stride walk, the
 * activations, and the Philox4x32-10 random number generator.
 *
 * NVRTC gets this file as an in-memory header (src/runtime/compile.c), so
 * it needs no include path; like the templates it includes no CUDA header
 * and reaches the hardware through inline PTX.  Editing it changes every
 * including template's cubin cache key (compile.c) and its results'
 * template hash (ktune__op_family_hash, src/ops/op.h).
 *
 * Elements are f16, bf16 (their bit patterns, in unsigned short) or f32;
 * all arithmetic is fp32, and results round to nearest even.
 *
 * A vector is VEC_W consecutive elements (VEC_W * sizeof(elem) bytes, at
 * most 16) read or written by one instruction; it must be aligned to its
 * size, which ALIGNED=1 promises for every vector the kernels touch.
 *
 * The kernels declare __launch_bounds__(THREADS, 1): with the thread count
 * alone ptxas aims at full occupancy and spills (32 registers for 128
 * threads) rather than give up a block; one block per SM lets it keep the
 * UNROLL vectors in registers, and the tuner weighs the occupancy.
 *
 * Limits: sm_80 or newer (cvt.rn.bf16.f32); blockDim.x == THREADS.
 */
#ifndef KTUNE_PRELUDE_CUH
#define KTUNE_PRELUDE_CUH

/* ---------------------------------------------------------------- tunables */

#ifndef DTYPE
#define DTYPE 0 /* element type, as ktune_dtype: 0 = f16, 1 = bf16, 2 = f32 */
#endif
#ifndef ALIGNED
#define ALIGNED 1 /* 1: pointers (and GLU's row strides) 16-byte aligned: vectors; 0: elements */
#endif
#ifndef VEC
#define VEC 4 /* elements per vector access when ALIGNED (1, 2, 4, 8; VEC * sizeof(elem) <= 16) */
#endif
#ifndef UNROLL
#define UNROLL 2 /* vectors per thread per step of the walk: independent loads in flight */
#endif
#ifndef THREADS
#define THREADS 256 /* threads per block, = blockDim.x (128, 256, 512, 1024) */
#endif
#ifndef MIN_WARPS
#define MIN_WARPS 0 /* warps an SM must hold at once: registers are capped to fit them; 0: one block */
#endif
#ifndef CACHE
#define CACHE 0 /* 0: ordinary loads and stores; 1: streaming (evict first: touched once) */
#endif

static_assert(DTYPE == 0 || DTYPE == 1 || DTYPE == 2, "DTYPE is 0 (f16), 1 (bf16) or 2 (f32)");
static_assert(ALIGNED == 0 || ALIGNED == 1, "ALIGNED is 0 or 1");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC is 1, 2, 4 or 8");
static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL is 1 to 8");
static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024,
	      "THREADS is whole warps, at most 1024");
static_assert(CACHE == 0 || CACHE == 1, "CACHE is 0 or 1");
static_assert(MIN_WARPS >= 0 && MIN_WARPS <= 64, "MIN_WARPS is 0 to 64");

/*
 * The blocks an SM must be able to hold, for __launch_bounds__: with only a
 * thread count ptxas capped registers for full occupancy and spilled, so
 * the default asks for one block; MIN_WARPS trades registers for the warps
 * in flight that hide a memory-bound kernel's latency.
 */
#define MIN_BLOCKS (MIN_WARPS * 32 / THREADS > 1 ? MIN_WARPS * 32 / THREADS : 1)

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

/* ------------------------------------------------------------ element type */

#if DTYPE == 2
typedef float elem;
#define ELEM_BYTES 4
#else
typedef unsigned short elem; /* the bit pattern of an f16 or bf16 value */
#define ELEM_BYTES 2
#endif

static __device__ __forceinline__ float to_float(elem x)
{
#if DTYPE == 2
	return x;
#elif DTYPE == 1
	return __uint_as_float((u32)x << 16);
#else
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
	return f;
#endif
}

/* Rounds to nearest even. */
static __device__ __forceinline__ elem from_float(float f)
{
#if DTYPE == 2
	return f;
#else
	elem x;
#if DTYPE == 1
	asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
#else
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
#endif
	return x;
#endif
}

/* ------------------------------------------------------ loads and stores */

/*
 * Unaligned data can only be read element by element, whatever VEC says
 * (the search space's prune keeps VEC = 1 there; this keeps any other
 * choice correct).
 */
#if ALIGNED
#define VEC_W VEC /* elements per access */
#else
#define VEC_W 1
#endif
#define VEC_BYTES (VEC_W * ELEM_BYTES)
#define VEC_WORDS (VEC_BYTES >= 4 ? VEC_BYTES / 4 : 1)
static_assert(VEC_BYTES <= 16, "VEC * sizeof(elem) is at most 16 bytes");

/*
 * .cs (evict first in L1 and L2) rather than ld.global.nc: the kernels may
 * run in place (output == input), and .nc needs memory the kernel does not
 * write.
 */
#if CACHE
#define LD_HINT ".cs"
#define ST_HINT ".cs"
#else
#define LD_HINT ""
#define ST_HINT ""
#endif

/* VEC_W elements as 32-bit words; a 2-byte vector (one f16) in the low half of w[0]. */
struct vec {
	u32 w[VEC_WORDS];
};

/*
 * The asm is volatile so that the compiler keeps each thread's loads before
 * its stores: with output == input the order is what makes it right.
 */
static __device__ __forceinline__ vec load_vec(const elem *p)
{
	vec v;
#if VEC_BYTES == 16
	asm volatile("ld.global" LD_HINT ".v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3]) : "l"(p));
#elif VEC_BYTES == 8
	asm volatile("ld.global" LD_HINT ".v2.u32 {%0, %1}, [%2];"
		     : "=r"(v.w[0]), "=r"(v.w[1]) : "l"(p));
#elif VEC_BYTES == 4
	asm volatile("ld.global" LD_HINT ".u32 %0, [%1];" : "=r"(v.w[0]) : "l"(p));
#else
	unsigned short h;
	asm volatile("ld.global" LD_HINT ".u16 %0, [%1];" : "=h"(h) : "l"(p));
	v.w[0] = h;
#endif
	return v;
}

static __device__ __forceinline__ void store_vec(elem *p, const vec &v)
{
#if VEC_BYTES == 16
	asm volatile("st.global" ST_HINT ".v4.u32 [%0], {%1, %2, %3, %4};"
		     :: "l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3]) : "memory");
#elif VEC_BYTES == 8
	asm volatile("st.global" ST_HINT ".v2.u32 [%0], {%1, %2};"
		     :: "l"(p), "r"(v.w[0]), "r"(v.w[1]) : "memory");
#elif VEC_BYTES == 4
	asm volatile("st.global" ST_HINT ".u32 [%0], %1;" :: "l"(p), "r"(v.w[0]) : "memory");
#else
	asm volatile("st.global" ST_HINT ".u16 [%0], %1;"
		     :: "l"(p), "h"((unsigned short)v.w[0]) : "memory");
#endif
}

/* Element j of v, as a float. */
static __device__ __forceinline__ float vec_get(const vec &v, int j)
{
#if DTYPE == 2
	return __uint_as_float(v.w[j]);
#else
	return to_float((elem)(v.w[j / 2] >> (16 * (j % 2))));
#endif
}

/* Sets element j of v to f, rounded; the other elements keep their value. */
static __device__ __forceinline__ void vec_set(vec &v, int j, float f)
{
#if DTYPE == 2
	v.w[j] = __float_as_uint(f);
#else
	u32 h = from_float(f), shift = 16 * (j % 2);
	v.w[j / 2] = (v.w[j / 2] & ~(0xffffu << shift)) | h << shift;
#endif
}

/* One element, for unaligned data and the short vector at the end of a row or array. */
static __device__ __forceinline__ float load_elem(const elem *p)
{
#if DTYPE == 2
	float f;
	asm volatile("ld.global" LD_HINT ".f32 %0, [%1];" : "=f"(f) : "l"(p));
	return f;
#else
	elem x;
	asm volatile("ld.global" LD_HINT ".u16 %0, [%1];" : "=h"(x) : "l"(p));
	return to_float(x);
#endif
}

static __device__ __forceinline__ void store_elem(elem *p, float f)
{
#if DTYPE == 2
	asm volatile("st.global" ST_HINT ".f32 [%0], %1;" :: "l"(p), "f"(f) : "memory");
#else
	asm volatile("st.global" ST_HINT ".u16 [%0], %1;" :: "l"(p), "h"(from_float(f)) : "memory");
#endif
}

/* ------------------------------------------------------ the grid-stride walk */

/*
 * The kernels walk their items (vectors, or dropout's chunks) in steps of
 * gridDim.x * THREADS * UNROLL items: in one step block b owns THREADS *
 * UNROLL consecutive items, and thread t the items t, t + THREADS, ...,
 * so that each of a warp's UNROLL loads reads consecutive memory.  Any
 * grid covers the data.
 */
static __device__ __forceinline__ i64 walk_first(void)
{
	return (i64)blockIdx.x * (THREADS * UNROLL) + threadIdx.x;
}

static __device__ __forceinline__ i64 walk_step(void)
{
	return (i64)gridDim.x * (THREADS * UNROLL);
}

/* Whether vector v (elements v * VEC_W ...) of an n-element array is whole, not cut short by n. */
static __device__ __forceinline__ bool vec_whole(i64 v, i64 n)
{
	return (v + 1) * VEC_W <= n;
}

/* ------------------------------------------------------------- activations */

#define GELU_SQRT1_2 0.70710678118654752f    /* 1 / sqrt(2) */
#define GELU_INV_SQRT_2PI 0.39894228040143268f /* 1 / sqrt(2 pi) */
#define GELU_TANH_K 0.79788456080286536f     /* sqrt(2 / pi) */
#define GELU_TANH_C 0.044715f

/*
 * Phi(x), the standard normal's CDF, and e = exp(-x^2 / 2) for the caller:
 * erfc of z = |x| / sqrt 2 by Abramowitz and Stegun 7.1.26 (absolute error
 * below 1.5e-7, under fp32's rounding of Phi near 1), one reciprocal and one
 * exponential.  erff's polynomial and branch made the GeLU kernel
 * compute-bound on the H100 (0.94 of a copy of the same bytes); the
 * gradient needs the same exponential for phi(x).
 */
static __device__ __forceinline__ float normal_cdf(float x, float *e)
{
	const float z = fabsf(x) * GELU_SQRT1_2;
	const float t = __fdividef(1.0f, 1.0f + 0.3275911f * z);
	const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
				t * (-1.453152027f + t * 1.061405429f))));
	*e = __expf(-z * z);
	const float half_erfc = 0.5f * poly * *e;
	return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

/* x * Phi(x). */
static __device__ __forceinline__ float gelu_erf(float x)
{
	float e;
	return x * normal_cdf(x, &e);
}

/* d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). */
static __device__ __forceinline__ float gelu_erf_grad(float x)
{
	float e;
	const float cdf = normal_cdf(x, &e);
	return cdf + x * GELU_INV_SQRT_2PI * e;
}

/*
 * 0.5 x (1 + tanh(u)), u = k (x + c x^3), computed as x sigmoid(2 u): the
 * same function (0.5 (1 + tanh(u)) = sigmoid(2 u)) without tanhf, whose
 * branches, division and two special-function calls made the kernel
 * compute-bound on the H100 (4% behind PyTorch's at 64M elements).  Where
 * exp(-2u) overflows (x < -9.2) the quotient is -0, the right limit.
 */
static __device__ __forceinline__ float gelu_tanh(float x)
{
	const float u = GELU_TANH_K * (x + GELU_TANH_C * x * x * x);
	return __fdividef(x, 1.0f + __expf(-2.0f * u));
}

/* d/dx x s(2u) = s + 2 x s (1 - s) u', s = sigmoid(2 u), u' = k (1 + 3 c x^2). */
static __device__ __forceinline__ float gelu_tanh_grad(float x)
{
	const float u = GELU_TANH_K * (x + GELU_TANH_C * x * x * x);
	const float s = __fdividef(1.0f, 1.0f + __expf(-2.0f * u));
	return s + 2.0f * x * s * (1.0f - s) * GELU_TANH_K * (1.0f + 3.0f * GELU_TANH_C * x * x);
}

/*
 * __fdividef (2 ulp) rather than '/': IEEE division calls a slow-path
 * subroutine whose saved registers ptxas counts as spills.  Where expf
 * overflows (x < -88) it gives 0, the right limit.
 */
static __device__ __forceinline__ float sigmoid(float x)
{
	return __fdividef(1.0f, 1.0f + expf(-x));
}

/* x * sigmoid(x). */
static __device__ __forceinline__ float silu(float x)
{
	return x * sigmoid(x);
}

/* s (1 + x (1 - s)), s = sigmoid(x). */
static __device__ __forceinline__ float silu_grad(float x)
{
	float s = sigmoid(x);
	return s * (1.0f + x * (1.0f - s));
}

/* ------------------------------------------------------------ Philox4x32-10 */

/*
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11; Random123's philox4x32_R(10, ...)): four 32-bit words, a
 * bijection of the 128-bit counter (c0 least significant) under the 64-bit
 * key.  The CPU twin is ktune__philox4x32_10 (src/ops/elementwise-ref.c).
 */
struct philox4 {
	u32 w[4];
};

static __device__ __forceinline__ philox4 philox4x32_10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0,
							u32 k1)
{
#pragma unroll
	for (int round = 0; round < 10; round++) {
		u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
		u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
		c0 = hi1 ^ c1 ^ k0;
		c1 = lo1;
		c2 = hi0 ^ c3 ^ k1;
		c3 = lo0;
		k0 += 0x9E3779B9u; /* the key schedule's Weyl sequence */
		k1 += 0xBB67AE85u;
	}
	philox4 r = { { c0, c1, c2, c3 } };
	return r;
}

#endif
