/*
 * wgmma.cuh - the Hopper (sm_90a) PTX that every template on the warpgroup
 * MMA shares around it: the async-proxy fence, wgmma's fence, commit and
 * wait, and the compiler fence on registers a pending wgmma uses.  Included
 * by attention_wgmma.cuh and quant_wgmma.cuh (gemm_wgmma.cu is one file
 * with its own copies); the includer defines u32 first.
 *
 * PTX ISA sections relied on (by title): "membar/fence" (fence.proxy.async),
 * "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
 * (wgmma.fence, commit_group and wait_group).
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

#endif
