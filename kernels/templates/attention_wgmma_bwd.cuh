/*
 * attention_wgmma_bwd.cuh - the one warpgroup MMA that the wgmma flash
 * attention backward (attention_wgmma_bwd.cu) needs beyond
 * attention_wgmma.cuh's: dQ = dS K, where both operands sit in shared
 * memory with their M or N dimension contiguous (dS^T as the consumers hold
 * it, rows of keys; K's tile, rows of keys), so A and B are both MN-major
 * (the transpose bits, which 16-bit types allow).  A header of its own
 * because attention_wgmma.cuh's hash keys the shipped forward tuning.
 *
 * Also the shared-memory and bulk-copy helpers of the template's STAGING = 1
 * (lse2 and delta staged with each query tile; dQ added from shared memory
 * by the TMA unit).
 *
 * The including template includes attention_wgmma.cuh first (WG_TYPE, u64).
 * Under ATTENTION_HOST the simulation (tests/unit/attention-sim-wgmma-bwd.inc)
 * gives these instead.
 *
 * NVRTC gets this file as an in-memory header (src/templates.c); editing it
 * changes the family's cubin cache keys and template hash.
 */

#ifndef ATTENTION_HOST
/*
 * d (64 x 64, fp32) = A (64 x 16) * B (16 x 64) + (scale_d ? d : 0),
 * asynchronously, A and B from shared memory through their descriptors,
 * both MN-major (transpose bits 1): A stored [k][m], B [k][n], each row of
 * 64 elements one 128-byte swizzled row; SBO the bytes between groups of 8
 * k.  Accumulator layout as attention_wgmma.cuh's wgmma_ss.
 */
static __device__ __forceinline__ void wgmma_ss_tt(float (&d)[32], u64 desc_a, u64 desc_b, int scale_d)
{
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
	    "}, %32, %33, p, 1, 1, 1, 1;\n}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
	      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
	      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* An fp32 add to global memory whose result nobody reads (red: no return value to wait for). */
static __device__ __forceinline__ void red_add_f32(float *p, float v)
{
	asm volatile("red.global.add.f32 [%0], %1;\n" :: "l"(p), "f"(v) : "memory");
}

/* ------------------------------------------- STAGING: shared-memory staging */

/* Two fp32 values from shared memory (8-byte aligned). */
static __device__ __forceinline__ void ld_shared_f2(u32 addr, float &x, float &y)
{
	asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(addr) : "memory");
}

/* Four fp32 values to shared memory (16-byte aligned). */
static __device__ __forceinline__ void st_shared_f4(u32 addr, float x, float y, float z, float w)
{
	asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "f"(x), "f"(y), "f"(z), "f"(w)
		     : "memory");
}

/*
 * dst[i] += src[i] for `bytes` / 4 fp32 values, src in shared memory, done
 * asynchronously by the TMA unit (each element's add atomic, as red's),
 * in this thread's current bulk group; both addresses 16-byte aligned,
 * bytes a multiple of 16.  The source must stay unchanged until
 * bulk_wait_read, and the stores are visible after bulk_wait.
 */
static __device__ __forceinline__ void bulk_reduce_add_f32(float *dst, u32 src, u32 bytes)
{
	asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
		     :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void bulk_commit(void)
{
	asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Until at most N of this thread's bulk groups still read their shared-memory sources. */
template <int N>
static __device__ __forceinline__ void bulk_wait_read(void)
{
	asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}

/* Until at most N of this thread's bulk groups are not complete (their writes visible). */
template <int N>
static __device__ __forceinline__ void bulk_wait(void)
{
	asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory");
}
#endif /* ATTENTION_HOST */
