/*
 * attention.cuh - what the flash attention templates (attention.cu, the
 * forward; attention_bwd.cu, the backward) share: the element type, the PTX
 * helpers (cp.async, ldmatrix, mma.sync, conversions, exp2 and lg2), and
 * the shared-memory tiles of HEAD_DIM-element rows with their loads.
 *
 * The including template defines DTYPE_BF16, HEAD_DIM, SWIZZLE, NTHREADS
 * and CHUNKS (HEAD_DIM / 8) first.  No include guard: the host simulation
 * (tests/unit/test-attention-sim.cc) includes a template once per config,
 * each in a namespace of its own, and this file with it.  Under
 * ATTENTION_HOST the PTX helpers come from the simulation instead.
 *
 * NVRTC gets this file as an in-memory header (src/runtime/compile.c);
 * editing it changes both templates' cubin cache keys and template hashes.
 */

typedef unsigned short elem; /* one f16 or bf16 value, as its bit pattern */
typedef unsigned int u32;
typedef long long i64;

/* ------------------------------------------- PTX: the only inline assembly */

#ifndef ATTENTION_HOST
/* The block's dynamic shared memory. */
static __device__ __forceinline__ unsigned char *dynamic_smem(void)
{
	extern __shared__ __align__(128) unsigned char smem_[];
	return smem_;
}

/* The shared-state-space address of a pointer into shared memory. */
static __device__ __forceinline__ u32 smem_u32(const void *p)
{
	return (u32)__cvta_generic_to_shared(p);
}

/* 16 bytes from global src to shared dst, asynchronously: src_bytes (0 or 16) of src, zeros for the rest. */
static __device__ __forceinline__ void cp_async_16(u32 dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
		     :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

/*
 * ldmatrix .x4: lanes 8i..8i+7 give the addresses of rows 0..7 of 8x8
 * matrix i (16 bytes each); r[i] receives this lane's part of matrix i:
 * without .trans, row lane/4, columns 2*(lane%4) and +1; with .trans, column
 * lane/4, rows 2*(lane%4) and +1 (the first in the low half in both cases).
 */
template <bool TRANS>
static __device__ __forceinline__ void ldmatrix_x4(u32 r[4], u32 addr)
{
	if (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

/* d += a * b for one m16n8k16 tile: a as in the PTX ISA, b = {b0, b1}. */
static __device__ __forceinline__ void mma_16816(float d[4], const u32 a[4], u32 b0, u32 b1)
{
#if DTYPE_BF16
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats rounded (to nearest even) into one word of elements, lo at the lower address. */
static __device__ __forceinline__ u32 pack_f2(float lo, float hi)
{
	u32 r;
#if DTYPE_BF16
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
	asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
	return r;
}

/* An element's value. */
static __device__ __forceinline__ float elem_to_float(elem x)
{
#if DTYPE_BF16
	return __uint_as_float((u32)x << 16);
#else
	float f;
	asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x));
	return f;
#endif
}

/* 2^x; 2^-inf = 0 (flushes subnormal results to zero). */
static __device__ __forceinline__ float exp2_approx(float x)
{
	float r;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
	return r;
}

/* log2(x) for x > 0. */
static __device__ __forceinline__ float log2_approx(float x)
{
	float r;
	asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
	return r;
}

static __device__ __forceinline__ void st_shared_u32(u32 addr, u32 v)
{
	asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}

/* 16 bytes from shared src to global dst (both 16-byte aligned). */
static __device__ __forceinline__ void copy_16_shared_to_global(void *dst, u32 src)
{
	u32 a, b, c, d;
	asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(src) : "memory");
	asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n"
		     :: "l"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

/* 4 bytes to global p (4-byte aligned). */
static __device__ __forceinline__ void store_u32(void *p, u32 v)
{
	asm volatile("st.global.u32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ float shfl_xor(float v, int mask)
{
	return __shfl_xor_sync(0xffffffffu, v, mask);
}

static __device__ __forceinline__ float neg_inf(void)
{
	return __int_as_float(0xff800000);
}
#endif /* ATTENTION_HOST */

/* ------------------------------------------------------- index arithmetic */

static __device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }
static __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/*
 * Element offset, in a tile, of 16-byte chunk c (elements 8c .. 8c+7) of
 * row r.  Swizzled: rows of HEAD_DIM elements, chunk c stored at c ^ (r % 8),
 * so the 8 rows an ldmatrix matrix reads (or a warp's stores of one chunk
 * column) fall on 8 different 16-byte bank groups; padded: rows of
 * HEAD_DIM + 8 elements, which shifts each row by 4 banks.
 */
static __device__ __forceinline__ int tile_off(int r, int c)
{
#if SWIZZLE
	return r * HEAD_DIM + ((c ^ (r & 7)) << 3);
#else
	return r * (HEAD_DIM + 8) + (c << 3);
#endif
}

/* ------------------------------------------------------------------- load */

/*
 * Starts the copy of ROWS rows of HEAD_DIM elements into the tile at dst:
 * tile row r is src[(row0 + r) * stride ...], zeros where row0 + r >= valid.
 * Thread tid copies chunk tid % CHUNKS of rows tid / CHUNKS, + NTHREADS / CHUNKS, ...
 */
template <int ROWS>
static __device__ __forceinline__ void load_rows(u32 dst, const elem *src, i64 stride, int row0, int valid,
						 int tid)
{
	constexpr int ROWS_PER_PASS = NTHREADS / CHUNKS;
	constexpr int PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
	const int r = tid / CHUNKS, c = tid % CHUNKS;
#pragma unroll
	for (int p = 0; p < PASSES; p++) {
		const int rr = r + p * ROWS_PER_PASS;
		if (ROWS % ROWS_PER_PASS != 0 && rr >= ROWS)
			break;
		const bool in = row0 + rr < valid;
		const elem *s = in ? src + (i64)(row0 + rr) * stride + c * 8 : src; /* a valid address either way */
		cp_async_16(dst + (u32)tile_off(rr, c) * 2, s, in ? 16 : 0);
	}
}

