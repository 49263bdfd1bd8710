/*
 * cross_entropy.cuh - what the cross-entropy templates share: the variant's
 * compiled flags, the fast special functions, soft-capping, and the two
 * one-block kernels a call launches around its row kernel (the count of
 * rows not ignored before a mean's gradient, the fixed-order reduction of
 * the rows' losses after a mean or sum).  Include it after prelude.cuh and
 * before the row kernel: ptxas reports the kernels of a cubin in the
 * reverse order of their definitions, and the compile's resource figures
 * (what the tuner prunes by) are read from the first report, which must be
 * the row kernel's.
 *
 * The math, the passes and the numerics are cross_entropy.cu's header
 * comment.
 */
#ifndef KTUNE_CROSS_ENTROPY_CUH
#define KTUNE_CROSS_ENTROPY_CUH

#ifndef PASS
#define PASS 2 /* 0: forward; 1: backward; 2: forward and backward fused */
#endif
#ifndef REDUCTION
#define REDUCTION 0 /* 0: mean over the rows not ignored; 1: sum; 2: none (a loss a row) */
#endif
#ifndef SMOOTHING
#define SMOOTHING 0 /* 1: label smoothing eps (a kernel argument) */
#endif
#ifndef SOFTCAP
#define SOFTCAP 0 /* 1: logits soft-capped, z = cap tanh(x / cap) (cap a kernel argument) */
#endif

static_assert(PASS == 0 || PASS == 1 || PASS == 2, "PASS is 0, 1 or 2");
static_assert(REDUCTION == 0 || REDUCTION == 1 || REDUCTION == 2, "REDUCTION is 0, 1 or 2");
static_assert(SMOOTHING == 0 || SMOOTHING == 1, "SMOOTHING is 0 or 1");
static_assert(SOFTCAP == 0 || SOFTCAP == 1, "SOFTCAP is 0 or 1");

#define LOG2E 1.4426950408889634f
#define REDUCE_THREADS 1024 /* ce_count_kernel's and ce_reduce_kernel's one block */

static __device__ __forceinline__ float exp2_approx(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

#if SOFTCAP
static __device__ __forceinline__ float rcp_approx(float x)
{
	float y;
	asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/*
 * cap tanh(x / cap) as cap (1 - 2 / (1 + e^(2 x / cap))): two special
 * functions, absolute error about 1e-7 of cap (what exp(z - max) and the
 * loss see); e^(2y) = inf gives 1 (rcp of inf is 0), e^(2y) = 0 gives -1.
 */
static __device__ __forceinline__ float softcap(float x, float cap, float inv_cap)
{
	const float e = exp2_approx(x * inv_cap * (2.0f * LOG2E));
	return cap - 2.0f * cap * rcp_approx(1.0f + e);
}
#endif

/* The row's target, or ignore_index past the last row (an empty row). */
static __device__ __forceinline__ i64 target_at(const long long *targets, i64 row, i64 rows, i64 ignore_index)
{
	return row < rows ? targets[row] : ignore_index;
}

/* Whether every row's gradient has one scale (not the backward of none, whose rows take dloss[r]). */
#define CE_ONE_SCALE (PASS == 2 || (PASS == 1 && REDUCTION != 2))

#if CE_ONE_SCALE
/*
 * That scale g: the backward's dloss or the fused pass's grad_scale, over
 * the count of rows not ignored for a mean (0 when none is).
 */
static __device__ __forceinline__ float ce_grad_scale(const float *dloss, const long long *count, float grad_scale)
{
#if PASS == 1
	float g = dloss[0];
	(void)grad_scale;
#else
	float g = grad_scale;
	(void)dloss;
#endif
	(void)count;
#if REDUCTION == 0
	g = *count > 0 ? __fdividef(g, (float)*count) : 0.0f;
#endif
	return g;
}
#endif

/*
 * A sum over one block of REDUCE_THREADS threads in a fixed order: the warp
 * by shuffles (the same bits in every lane), then thread 0 adds the warps'
 * in warp order.  The result is thread 0's.
 */
template <class T>
static __device__ __forceinline__ T block_sum(T x)
{
	__shared__ T warp_total[REDUCE_THREADS / 32];
#pragma unroll
	for (int s = 16; s > 0; s >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, s);
	if (threadIdx.x % 32 == 0)
		warp_total[threadIdx.x / 32] = x;
	__syncthreads();
	if (threadIdx.x == 0)
		for (int w = 1; w < REDUCE_THREADS / 32; w++)
			x += warp_total[w];
	return x;
}

#if REDUCTION == 0 && PASS != 0
/* The rows whose target is not ignore_index, before the gradient is scaled by 1 / count. */
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
ce_count_kernel(const long long *targets, long long rows, long long ignore_index, long long *count)
{
	unsigned long long n = 0;
#pragma unroll 8
	for (i64 r = threadIdx.x; r < rows; r += REDUCE_THREADS)
		n += targets[r] != ignore_index;
	n = block_sum(n);
	if (threadIdx.x == 0)
		*count = (long long)n;
}
#endif

#if REDUCTION != 2 && PASS != 1
/*
 * The mean (over the rows not ignored; 0 when there are none) or the sum of
 * the rows' losses: thread k adds rows k, k + 1024, ... in order, then the
 * block's sums in a fixed order.  Ignored rows' losses are 0.
 */
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
ce_reduce_kernel(const float *loss_rows, const long long *targets, long long rows, long long ignore_index,
		 float *loss)
{
	float s = 0;
#if REDUCTION == 0
	unsigned long long n = 0;
#endif
	(void)targets, (void)ignore_index;
#pragma unroll 4
	for (i64 r = threadIdx.x; r < rows; r += REDUCE_THREADS) {
		s += loss_rows[r];
#if REDUCTION == 0
		n += targets[r] != ignore_index;
#endif
	}
	s = block_sum(s);
#if REDUCTION == 0
	n = block_sum(n); /* another type: block_sum's shared memory of its own */
	if (threadIdx.x == 0)
		*loss = n > 0 ? __fdividef(s, (float)n) : 0.0f;
#else
	if (threadIdx.x == 0)
		*loss = s;
#endif
}
#endif

#endif
