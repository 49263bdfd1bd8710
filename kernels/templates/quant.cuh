/*
 * quant.cuh - what the weight-quantized GEMM templates (qgemv.cu, qgemm.cu)
 * share: the element type, the packed format (src/ops/quant.h, docs/quant.md),
 * dequantisation, and the kernel that sums split-K partials in order.
 *
 * NVRTC gets this file as an in-memory header (src/runtime/compile.c); like
 * the templates it includes no CUDA header.  Editing it changes both
 * families' cubin cache keys and their results' template hash.
 *
 * The format, version 1: b = BITS bits a weight, PER_WORD = 32 / b weights
 * a 32-bit word, element c of row r in word r * RW + c / PER_WORD at bit
 * (c % PER_WORD) * b; RW = k / PER_WORD rounded up to a multiple of 4.
 * scales and zeros [n][k / G] (G = GROUP, or k per channel), of the
 * element type; zeros[0] alone when zero_per_group is 0.
 *
 * Dequantisation in fp32: w = fma(q, mul, add) with, per group,
 *     MODE 0 (scale_shift)  mul = s, add = -z * s   (q - z) * s
 *     MODE 1 (scale)        mul = s, add = 0        q * s
 *     MODE 2 (shift)        mul = 1, add = -z       q - z
 *     MODE 3 (fma)          mul = s, add = z        q * s + z
 * z * s of two f16 (or bf16) values is exact in fp32, so w is the exact
 * value rounded once to fp32.
 *
 * Limits: sm_80 or newer; k a multiple of 32 and of GROUP (the host checks).
 */
#ifndef KTUNE_QUANT_CUH
#define KTUNE_QUANT_CUH

/* ---------------------------------------------------------------- the key */

#ifndef DTYPE
#define DTYPE 1 /* activations, scales, zeros and C: 0 = f16, 1 = bf16 */
#endif
#ifndef BITS
#define BITS 4 /* bits a weight: 8, 4, 2, 1 */
#endif
#ifndef GROUP
#define GROUP 128 /* weights of a row per scale and zero: 32, 64, 128; 0 = per channel (all k) */
#endif
#ifndef MODE
#define MODE 0 /* 0 scale_shift, 1 scale, 2 shift, 3 fma (ktune_quant_mode) */
#endif

static_assert(DTYPE == 0 || DTYPE == 1, "DTYPE is 0 (f16) or 1 (bf16)");
static_assert(BITS == 8 || BITS == 4 || BITS == 2 || BITS == 1, "BITS is 8, 4, 2 or 1");
static_assert(GROUP == 0 || GROUP == 32 || GROUP == 64 || GROUP == 128, "GROUP is 32, 64, 128 or 0");
static_assert(MODE >= 0 && MODE <= 3, "MODE is 0 to 3");

typedef unsigned short elem; /* an f16 or bf16 value, as its bit pattern */
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define PER_WORD (32 / BITS)     /* weights a word */
#define QMASK ((1u << BITS) - 1u) /* one weight's bits */
#define HAS_SCALE (MODE != 2)
#define HAS_ZERO (MODE != 1)

/* ------------------------------------------------- PTX: the only inline assembly */

/*
 * Every instruction the quantized templates reach through inline PTX is
 * here, behind a small function.  KTUNE_QUANT_HOST (never set for NVRTC)
 * names a header that emulates these functions instead, so that the
 * kernels' index arithmetic, pipeline and reductions run on the CPU
 * (tests/emu/quant-emu.cc).
 */
#ifdef KTUNE_QUANT_HOST
#include KTUNE_QUANT_HOST
#else

static __device__ __forceinline__ float to_float(elem x)
{
#if DTYPE == 1
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
	elem x;
#if DTYPE == 1
	asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
#else
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
#endif
	return x;
}

/* Two floats rounded to the element type in one word, lo in the low half (an mma operand). */
static __device__ __forceinline__ u32 pack_pair(float lo, float hi)
{
	u32 r;
#if DTYPE == 1
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
	return r;
}

/* An L2 policy for data read once: evict it first. */
static __device__ __forceinline__ u64 evict_first_policy(void)
{
	u64 policy;
	asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
	return policy;
}

/*
 * N (1, 2, 4) 32-bit words through the read-only path, N * 4-byte aligned;
 * with a policy, streaming: not kept in L1, first out of L2.  volatile:
 * issued in program order, all of a batch before the first is used.
 */
template <int N>
static __device__ __forceinline__ void ld_words(u32 (&r)[N], const void *p)
{
	if constexpr (N == 4)
		asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
	else if constexpr (N == 2)
		asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
	else
		asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r[0]) : "l"(p));
}

template <int N>
static __device__ __forceinline__ void ld_words_stream(u32 (&r)[N], const void *p, u64 policy)
{
#define KTUNE_LD_STREAM "ld.global.nc.L1::no_allocate.L2::cache_hint"
	if constexpr (N == 4)
		asm volatile(KTUNE_LD_STREAM ".v4.u32 {%0, %1, %2, %3}, [%4], %5;"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p), "l"(policy));
	else if constexpr (N == 2)
		asm volatile(KTUNE_LD_STREAM ".v2.u32 {%0, %1}, [%2], %3;" : "=r"(r[0]), "=r"(r[1]) : "l"(p), "l"(policy));
	else
		asm volatile(KTUNE_LD_STREAM ".u32 %0, [%1], %2;" : "=r"(r[0]) : "l"(p), "l"(policy));
#undef KTUNE_LD_STREAM
}

/* The shared-state-space address of a pointer into shared memory. */
static __device__ __forceinline__ u32 smem_u32(const void *p)
{
	return (u32)__cvta_generic_to_shared(p);
}

/* BYTES (4, 8 or 16) from global src to shared dst, the first src_bytes of them read, zeros after. */
template <int BYTES>
static __device__ __forceinline__ void cp_async(u32 dst, const void *src, int src_bytes)
{
	if constexpr (BYTES == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
			     : "memory");
	else
		asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES),
			     "r"(src_bytes)
			     : "memory");
}

/* 16 bytes as cp_async, through L2 under policy (evict_first for data read once). */
static __device__ __forceinline__ void cp_async_16_policy(u32 dst, const void *src, int src_bytes, u64 policy)
{
	asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
		     "r"(src_bytes), "l"(policy)
		     : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ldmatrix .x4: lane gives a row address of matrix lane / 8; r[i] is this lane's part of matrix i. */
static __device__ __forceinline__ void ldmatrix_x4(u32 r[4], u32 addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

/* d += a * b for one m16n8k16 tile (fragments as in the PTX ISA), fp32 accumulation. */
static __device__ __forceinline__ void mma_16816(float d[4], const u32 a[4], const u32 b[2])
{
#if DTYPE == 1
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
	    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* x - y on two packed f16 or bf16 values (as fma(x, 1, -y): sm_80 has no bf16x2 subtraction), rounded to nearest. */
static __device__ __forceinline__ u32 sub_pair(u32 x, u32 y)
{
	u32 r;
#if DTYPE == 1
	asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(0x3F803F80u), "r"(y ^ 0x80008000u));
#else
	asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(0x3C003C00u), "r"(y ^ 0x80008000u));
#endif
	return r;
}

#endif /* KTUNE_QUANT_HOST */

/* ------------------------------------------------------------ dequantisation */

/* A group's dequantisation: w = fma(q, mul, add). */
struct qparams {
	float mul, add;
};

/* From the group's raw scale and zero (either ignored where the mode has none). */
static __device__ __forceinline__ qparams qparams_of(elem scale, elem zero)
{
	qparams p;
	const float s = HAS_SCALE ? to_float(scale) : 1.0f, z = HAS_ZERO ? to_float(zero) : 0.0f;
	p.mul = s;
	p.add = MODE == 0 ? -z * s : MODE == 1 ? 0.0f : MODE == 2 ? -z : z;
	return p;
}

/*
 * A code (q < 2^23) as a float without a conversion instruction: the bits
 * of 2^23 + q, less 2^23 (exact).
 */
static __device__ __forceinline__ float code_float(u32 q)
{
	return __uint_as_float(0x4B000000u | q) - 8388608.0f;
}

/* The weight of code q (already masked). */
static __device__ __forceinline__ float dequant(u32 q, qparams p)
{
	return __fmaf_rn(code_float(q), p.mul, p.add);
}

/* ---------------------------------------------------------- the way out */

/*
 * A sum of c[row, col]'s: into this split's partials (split > 1: fp32
 * [split][m][n], packed), or plus bias[col] when bias is not NULL, rounded
 * into c.
 */
static __device__ __forceinline__ void store_sum(float v, i64 row, i64 col, elem *c, i64 ldc, float *partials,
						 int split, int z, i64 m, i64 n, const elem *bias)
{
	if (split > 1) {
		partials[((i64)z * m + row) * n + col] = v;
		return;
	}
	if (bias)
		v += to_float(bias[col]);
	c[row * ldc + col] = from_float(v);
}

/* ------------------------------------------------------ the split-K sum */

/*
 * c[i, j] = sum over s = 0, 1, ..., splits-1 (in this order) of
 * partials[s][i][j], plus bias[j] when bias is not NULL, rounded to the
 * element type: the second kernel of a split call, so that the result does
 * not depend on which block finished first.  partials is fp32
 * [splits][m][n], packed.  Any grid of 256-thread blocks.
 */
extern "C" __global__ void __launch_bounds__(256)
quant_reduce_kernel(const float *partials, int splits, const elem *bias, elem *c, long long m, long long n,
		    long long ldc)
{
	const i64 total = m * n;
	for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < total; i += (i64)gridDim.x * 256) {
		float s = 0.0f;
		int z = 0;
		for (; z + 4 <= splits; z += 4) { /* four loads in flight, added in order */
			const float v0 = partials[(i64)z * total + i], v1 = partials[(i64)(z + 1) * total + i];
			const float v2 = partials[(i64)(z + 2) * total + i], v3 = partials[(i64)(z + 3) * total + i];
			s = (((s + v0) + v1) + v2) + v3;
		}
		for (; z < splits; z++)
			s += partials[(i64)z * total + i];
		const i64 row = i / n, col = i % n;
		if (bias)
			s += to_float(bias[col]);
		c[row * ldc + col] = from_float(s);
	}
}

#endif
