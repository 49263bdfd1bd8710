/*
 * quant_wgmma.cuh - the Hopper (sm_90a) PTX of qwgmma.cu beyond quant.cuh's
 * and wgmma.cuh's (which has the wgmma with A from registers): its
 * K-major shared-memory descriptor, the cluster's barrier and distributed
 * shared memory, and the byte permute and packed arithmetic of its
 * dequantisation.  qwgmma.cu alone includes it, so that quant.cuh (and the
 * cubins of the families compiled for sm_80 and up) stay as they are.
 *
 * The including template includes quant.cuh before it (DTYPE, u32, u64).
 *
 * PTX ISA sections relied on (by title): "barrier.cluster", "mapa", "ld"
 * (.shared::cluster), "prmt", "Half Precision Floating Point Instructions"
 * (sub, mul, fma of .f16x2 and .bf16x2), and of "Asynchronous Warpgroup Level Matrix
 * Multiply-Accumulate Instructions" its "Shared Memory Matrix Layout" with
 * the 128-byte swizzle and "Matrix Descriptor Format".
 *
 * NVRTC gets this file as an in-memory header (src/runtime/compile.c);
 * editing it changes qwgmma's cubin cache keys and template hash.
 */
#ifndef KTUNE_QUANT_WGMMA_CUH
#define KTUNE_QUANT_WGMMA_CUH

#if DTYPE == 1
#define WG_TYPE "bf16"
#else
#define WG_TYPE "f16"
#endif

#include "wgmma.cuh" /* the async-proxy fence; wgmma's fence, commit, wait; fence_regs; wgmma_rs_n */

/*
 * A shared-memory matrix descriptor of a K-major operand in the 128-byte
 * swizzle ("Matrix Descriptor Format"): start address >> 4, LBO 16 (unused
 * when K-major and swizzled), SBO 1024 (between 8-row groups), base offset
 * 0 (the tile is 1024-byte aligned), swizzle mode 1 (128B) in bits 62-63.
 */
static __device__ __forceinline__ u64 kmajor_desc(u32 addr)
{
	return (u64)((addr & 0x3ffff) >> 4) | (u64)(16 >> 4) << 16 | (u64)(1024 >> 4) << 32 | 1ull << 62;
}

/*
 * Bytes of {b, a} (a's bytes 0-3, b's 4-7) picked by the nibbles of sel,
 * byte i of the result by nibble i ("prmt").
 */
static __device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel)
{
	u32 r;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
	return r;
}

/*
 * x - y, x * y and x * y + z on two packed values of the element type,
 * each rounded to nearest once (sub and mul of bf16x2: sm_90).
 */
static __device__ __forceinline__ u32 hsub2(u32 x, u32 y)
{
	u32 r;
	asm("sub.rn." WG_TYPE "x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
	return r;
}

static __device__ __forceinline__ u32 hmul2(u32 x, u32 y)
{
	u32 r;
	asm("mul.rn." WG_TYPE "x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
	return r;
}

static __device__ __forceinline__ u32 hfma2(u32 x, u32 y, u32 z)
{
	u32 r;
	asm("fma.rn." WG_TYPE "x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(z));
	return r;
}

/* All threads of every block of the cluster; release what was written, acquire what others wrote. */
static __device__ __forceinline__ void cluster_sync(void)
{
	asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* The address in block `rank` of the cluster of a shared-memory address of this block's. */
static __device__ __forceinline__ u32 cluster_addr(u32 addr, u32 rank)
{
	u32 remote;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
	return remote;
}

/* Four floats (16-byte aligned) from distributed shared memory. */
static __device__ __forceinline__ void ld_cluster_v4(float (&v)[4], u32 remote)
{
	asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
		     : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(remote) : "memory");
}

#endif
