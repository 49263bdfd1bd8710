/*
 * quant_sum.cuh - the split-K sum of the weight-quantized GEMM, four
 * columns a thread: quant.cuh's quant_reduce_kernel with its loads in
 * 16 bytes and its row and column found once for four elements.
 *
 * c[i, j] = sum over s = 0, 1, ..., splits-1 (in this order) of
 * partials[s][i][j], plus bias[j] when bias is not NULL, rounded to the
 * element type: the same additions in the same order as
 * quant_reduce_kernel, so the same bits (tests/emu/quant-emu.cc checks
 * both against each other).  partials is fp32 [splits][m][n], packed, 16-byte
 * aligned.
 *
 * Why a second kernel: at m = 128 quant_reduce_kernel took 5.4 us of
 * qwgmma's 25.9 (ncu, bench/results/h200-quant-qwgmma-ncu.log): a 64-bit
 * division a column and at most four 4-byte loads in flight a thread.
 * It lives in its own header so that a family moves to it when its
 * entries are next swept (a header a template names is part of its
 * hash), and quant_reduce_kernel goes when none is left.
 *
 * Launch: any grid of 256-thread blocks; a thread takes units of four
 * columns of a row (one column when n is not a multiple of 4) in a
 * grid-stride walk.
 */
#ifndef KTUNE_QUANT_SUM_CUH
#define KTUNE_QUANT_SUM_CUH

#define SUM_LOADS 8 /* partials a thread has in flight before it adds them */

struct __align__(16) sum_f4 {
	float v[4];
};
struct __align__(8) sum_e4 {
	elem v[4];
};

/* c[row, col] and its bias: one column's sum, in order (n not a multiple of 4). */
static __device__ __forceinline__ void sum_one(const float *partials, int splits, const elem *bias, elem *c, i64 i,
					       i64 total, i64 n, i64 ldc)
{
	float s = 0.0f;
	for (int z = 0; z < splits; z++)
		s += partials[(i64)z * total + i];
	const i64 row = i / n, col = i % n;
	if (bias)
		s += to_float(bias[col]);
	c[row * ldc + col] = from_float(s);
}

extern "C" __global__ void __launch_bounds__(256)
quant_sum_kernel(const float *partials, int splits, const elem *bias, elem *c, long long m, long long n,
		 long long ldc)
{
	const i64 total = m * n, stride = (i64)gridDim.x * 256;
	if (n % 4) {
		for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < total; i += stride)
			sum_one(partials, splits, bias, c, i, total, n, ldc);
		return;
	}
	/* 8-byte stores where every row of c starts 8-byte aligned */
	const bool wide = ldc % 4 == 0 && (unsigned long long)c % 8 == 0;
	for (i64 u = (i64)blockIdx.x * 256 + threadIdx.x; u < total / 4; u += stride) {
		const i64 i = u * 4, row = i / n, col = i % n;
		float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
		for (int z0 = 0; z0 < splits; z0 += SUM_LOADS) {
			sum_f4 p[SUM_LOADS];
#pragma unroll
			for (int z = 0; z < SUM_LOADS; z++)
				if (z0 + z < splits)
					p[z] = *(const sum_f4 *)(partials + (i64)(z0 + z) * total + i);
#pragma unroll
			for (int z = 0; z < SUM_LOADS; z++)
				if (z0 + z < splits)
#pragma unroll
					for (int e = 0; e < 4; e++)
						s[e] += p[z].v[e];
		}
		sum_e4 out;
#pragma unroll
		for (int e = 0; e < 4; e++)
			out.v[e] = from_float(bias ? s[e] + to_float(bias[col + e]) : s[e]);
		elem *dst = c + row * ldc + col;
		if (wide) {
			*(sum_e4 *)dst = out;
		} else {
#pragma unroll
			for (int e = 0; e < 4; e++)
				dst[e] = out.v[e];
		}
	}
}

#endif
