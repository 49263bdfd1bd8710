/*
 * wgmma.cuh - the Hopper (sm_90a) PTX that every template on the warpgroup
 * MMA shares: the async-proxy fence, wgmma's fence, commit and wait, the
 * compiler fence on registers a pending wgmma uses, and wgmma with A from
 * registers (RS).  Included
 * by attention_wgmma.cuh and quant_wgmma.cuh (gemm_wgmma.cu is one file
 * with its own copies); the includer defines u32, u64 and WG_TYPE first.
 *
 * PTX ISA sections relied on (by title): "membar/fence" (fence.proxy.async),
 * "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
 * (its "Register Fragments" of A and D, wgmma.mma_async, wgmma.fence,
 * commit_group and wait_group).
 *
 * NVRTC gets this file as an in-memory header (src/runtime/compile.c);
 * editing it changes the including families' cubin cache keys and template
 * hashes.
 */
#ifndef KTUNE_WGMMA_CUH
#define KTUNE_WGMMA_CUH

/*
 * Orders the generic proxy's view of shared memory before this thread's
 * later async-proxy accesses (wgmma reads its shared-memory operands through
 * the async proxy; cp.async writes them through the generic one).
 */
static __device__ __forceinline__ void fence_proxy_async(void)
{
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Orders this warpgroup's register accesses before the wgmma.mma_async that follow. */
static __device__ __forceinline__ void wgmma_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until at most N of this warpgroup's committed wgmma groups are pending. */
template <int N>
static __device__ __forceinline__ void wgmma_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

/*
 * Tells the compiler that registers an asynchronous wgmma reads or writes
 * may change here (after a wgmma_wait): no read of an accumulator moves
 * above the wait, and no register that a pending wgmma still reads (the
 * RS form's A) is reused before it.
 */
template <int N>
static __device__ __forceinline__ void fence_regs(float (&r)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(r[i]) :: "memory");
}

template <int N>
static __device__ __forceinline__ void fence_regs(u32 (&r)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+r"(r[i]) :: "memory");
}

/*
 * d (64 x N, fp32) += A (64 x 16, registers) * B (16 x N), N 64, 128 or
 * 256, asynchronously (scale_d 0: d = A B).  A's fragment ("Register
 * Fragments", mma.m16n8k16's per warp): thread t holds in a[0] row 16 (t /
 * 32) + (t % 32) / 4, columns 2 (t % 4) and +1 (the first in the low half);
 * a[1] the same columns 8 rows down; a[2], a[3] as a[0], a[1] 8 columns
 * right.  B from shared memory through desc_b: K-major (stored [n][k],
 * TRANS_B 0) or MN-major ([k][n], TRANS_B 1, which 16-bit types allow).
 * D: thread t holds d[4j + e] at row 16 (t / 32) + (t % 32) / 4 + 8 (e /
 * 2), column 8 j + 2 (t % 4) + e % 2.  WG_TYPE ("bf16" or "f16") is the
 * includer's, defined before it includes this file.  The operand lists
 * were written by a script: one variant per N.
 */
template <int N, int TRANS_B>
static __device__ __forceinline__ void wgmma_rs_n(float (&d)[N / 2], const u32 *a, u64 desc_b, int scale_d)
{
	static_assert(N == 64 || N == 128 || N == 256, "N is 64, 128 or 256");
	if constexpr (N == 64)
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
		    "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " {"
		    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
		    "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
		    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
	else if constexpr (N == 128)
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
		    "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TYPE "." WG_TYPE " {"
		    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
		    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
		    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
		    "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
		    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
		      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
		      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
		      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
		      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
	else if constexpr (N == 256)
		asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %133, 0;\n\t"
		    "wgmma.mma_async.sync.aligned.m64n256k16.f32." WG_TYPE "." WG_TYPE " {"
		    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
		    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
		    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
		    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
		    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
		    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
		    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
		    "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
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
		      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
		      "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
		      "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
		      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
		      "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
		      "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));
}

#endif
