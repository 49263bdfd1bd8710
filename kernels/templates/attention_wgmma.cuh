/*
 * attention_wgmma.cuh - the Hopper (sm_90a) PTX that the warp-specialised
 * flash attention forward (attention_wgmma.cu) uses beyond attention.cuh's:
 * mbarriers, cp.async's arrive on an mbarrier, setmaxnreg, named barriers,
 * and warpgroup MMA (wgmma.mma_async) with its shared-memory descriptors,
 * from shared memory (SS: S = Q K^T) and with A from registers (RS: O += P
 * V); the async-proxy fence and wgmma's fence, commit and wait come from
 * wgmma.cuh, which qwgmma.cu's header shares.  Taken from gemm_wgmma.cu's
 * helpers (the GEMM template is one file with its own copies; this header
 * keeps the attention templates' PTX in one place).
 *
 * The including template defines DTYPE_BF16, WGMMA_SS_N (the N of its SS
 * products: keys per tile) and WGMMA_RS_N (the N of its RS products: the
 * head dim), and MBAR_SPIN_LIMIT, first; attention.cuh gives the types.
 * Under ATTENTION_HOST (tests/unit/test-attention-sim.cc) every helper here
 * comes from the host simulation instead (tests/unit/wgmma-sim.h, and the
 * per-config wgmma_ss, wgmma_rs).
 *
 * PTX ISA sections relied on (by title; 8.x numbering moves): "mbarrier"
 * (init, arrive, try_wait.parity: phases and their parity; the arrive's
 * release and the wait's acquire at CTA scope), "cp.async.mbarrier.arrive"
 * (.noinc), "membar/fence" (fence.proxy.async, fence.mbarrier_init),
 * "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
 * (its "Register Fragments" of A and D, "Shared Memory Matrix Layout" with
 * the 128-byte swizzle, "Matrix Descriptor Format", wgmma.mma_async,
 * wgmma.fence, commit_group and wait_group), "setmaxnreg".
 *
 * NVRTC gets this file as an in-memory header (src/runtime/compile.c);
 * editing it changes the family's cubin cache keys and template hash.
 */

typedef unsigned long long u64;

#ifndef ATTENTION_HOST
/* ---------------------------------------------------------------- misc */

/* v as lane 0 of the warp has it: the compiler then knows it is the same in the whole warp. */
static __device__ __forceinline__ int warp_uniform(int v)
{
	return __shfl_sync(0xffffffffu, v, 0);
}

/* Ends the kernel with an error (a launch contract broken). */
static __device__ __forceinline__ void trap(void)
{
	asm volatile("trap;");
}

static __device__ __forceinline__ u32 dynamic_smem_size(void)
{
	u32 r;
	asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
	return r;
}

/* A barrier among the `count` threads that use hardware barrier `id` (0 is __syncthreads'). */
static __device__ __forceinline__ void named_barrier(u32 id, u32 count)
{
	asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}

/* ---------------------------------------------------------- mbarriers */

static __device__ __forceinline__ void mbar_init(u32 bar, u32 count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

/* Makes the initialised barriers visible to the other threads and to the async proxy. */
static __device__ __forceinline__ void mbar_init_fence(void)
{
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One arrive (release at CTA scope: this thread's earlier accesses happen before the phase completes). */
static __device__ __forceinline__ void mbar_arrive(u32 bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}

/*
 * Waits until the phase of parity `parity` has completed (acquire at CTA
 * scope).  A fresh barrier is in phase 0, so waiting on parity 1 returns at
 * once: a producer's first pass over a ring does not wait for empty slots.
 */
static __device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
	u32 done;
#if MBAR_SPIN_LIMIT > 0
	long long spins = 0;
#endif
	do {
		asm volatile("{\n\t.reg .pred p;\n\t"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
			     "selp.u32 %0, 1, 0, p;\n\t}\n"
			     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#if MBAR_SPIN_LIMIT > 0
		if (!done && ++spins > (long long)MBAR_SPIN_LIMIT)
			asm volatile("trap;");
#endif
	} while (!done);
}

/*
 * An arrive on bar that happens when every cp.async this thread issued so
 * far has landed.  .noinc: the arrive counts towards the phase's expected
 * arrivals (the barrier is initialised with one per issuing thread), where
 * the plain form would add one to the count first and cancel itself out.
 */
static __device__ __forceinline__ void cp_async_arrive_noinc(u32 bar)
{
	asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}

/* Waits until every cp.async this thread issued has landed. */
static __device__ __forceinline__ void cp_async_wait_all(void)
{
	asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* ------------------------------------------------------------ setmaxnreg */

/* Gives registers back (the producer) or takes them (the consumers); a warpgroup at a time. */
template <int N>
static __device__ __forceinline__ void regs_release(void)
{
	asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N));
}

template <int N>
static __device__ __forceinline__ void regs_claim(void)
{
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N));
}

/* -------------------------------------------------- warpgroup MMA */

#if DTYPE_BF16
#define WG_TYPE "bf16"
#else
#define WG_TYPE "f16"
#endif

#include "wgmma.cuh" /* the async-proxy fence; wgmma's fence, commit, wait; fence_regs; wgmma_rs_n */

#endif /* ATTENTION_HOST */

/*
 * A wgmma shared-memory matrix descriptor with the 128-byte swizzle
 * ("Matrix Descriptor Format"): start address, leading-dimension byte
 * offset (LBO) and stride-dimension byte offset (SBO), each >> 4 in 14
 * bits, base offset 0 (every swizzle atom is 1024-byte aligned), swizzle
 * mode 1 (128B) in bits 62-63.  K-major: SBO = 1024 (8-row groups), LBO
 * unused (16).  MN-major: SBO = 1024 (8-k groups), LBO = the bytes between
 * 64-element panels of MN.  (Plain arithmetic: the host simulation decodes
 * what this encodes.)
 */
static __device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo, u32 sbo)
{
	return (u64)((addr & 0x3ffff) >> 4) | (u64)(lbo >> 4) << 16 | (u64)(sbo >> 4) << 32 | 1ull << 62;
}

#ifndef ATTENTION_HOST

/*
 * d (64 x WGMMA_SS_N, fp32) = A (64 x 16) * B (16 x WGMMA_SS_N) + (scale_d ? d : 0),
 * asynchronously, A and B from shared memory through their descriptors,
 * both K-major (transpose bits 0).  Accumulator layout ("Register
 * Fragments", wgmma .m64nNk16 D): thread t of the warpgroup holds d[4j + e] at row 16 (t / 32)
 * + (t % 32) / 4 + 8 (e / 2), column 8j + 2 (t % 4) + e % 2.  The operand
 * lists were written by a script, one variant per N.
 */
static __device__ __forceinline__ void wgmma_ss(float (&d)[WGMMA_SS_N / 2], u64 desc_a, u64 desc_b, int scale_d)
{
#if WGMMA_SS_N == 64
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
	    "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
	      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
	      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
#if WGMMA_SS_N == 80
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %42, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n80k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39"
	    "}, %40, %41, p, 1, 1, 0, 0;\n}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
	      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
	      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
	      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
#if WGMMA_SS_N == 128
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
	    "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
	      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
	      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
	      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
	      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
	      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
	      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
#if WGMMA_SS_N == 176
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %90, 0;\n\t"
	    "wgmma.mma_async.sync.aligned.m64n176k16.f32." WG_TYPE "." WG_TYPE " {"
	    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
	    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
	    "%80, %81, %82, %83, %84, %85, %86, %87"
	    "}, %88, %89, p, 1, 1, 0, 0;\n}\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
	      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
	      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
	      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
	      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
	      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
	      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
	      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
	      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
	      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
	    : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

/*
 * d (64 x WGMMA_RS_N, fp32) += A (64 x 16, registers) * B (16 x WGMMA_RS_N)
 * (wgmma.cuh's wgmma_rs_n), B MN-major: stored [k][n], n contiguous.
 */
static __device__ __forceinline__ void wgmma_rs(float (&d)[WGMMA_RS_N / 2], const u32 *a, u64 desc_b, int scale_d)
{
	wgmma_rs_n<WGMMA_RS_N, 1>(d, a, desc_b, scale_d);
}
#endif /* ATTENTION_HOST */
