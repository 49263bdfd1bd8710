/*
 * check.cu - the tuner's check of an elementwise op's output against its
 * reference, on the GPU (the outputs of a large key are too many to bring
 * to the host for every candidate):
 *
 *     for 0 <= i < n:  x = x[i] (DTYPE), r = ref[i] (fp32, the float64
 *                      reference rounded once)
 *         x or r NaN or Inf     -> out->bad += 1, unless x == r (the same infinity)
 *         |x - r| / max(1, |r|) -> out->worst = max; > tol: out->over += 1
 *         out->sq_err += (x - r)^2, out->sq_ref += r^2   (double)
 *
 * Entry point:
 *     check_kernel(const elem *x, const float *ref, long long n, float tol, struct check_out *out)
 * The host zeroes *out before the launch.  Any grid; THREADS per block.
 *
 * Tunables: DTYPE (prelude.cuh); nothing else, it is not tuned.
 */
#include "prelude.cuh"

struct check_out {
	double sq_err, sq_ref;
	unsigned long long bad, over;
	unsigned worst_bits; /* a non-negative float's bits order as the float does */
};

extern "C" __global__ void __launch_bounds__(THREADS)
check_kernel(const elem *x, const float *ref, long long n, float tol, check_out *out)
{
	double sq_err = 0, sq_ref = 0;
	unsigned long long bad = 0, over = 0;
	float worst = 0;

	for (i64 i = (i64)blockIdx.x * THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * THREADS) {
		const float v = to_float(x[i]), r = ref[i];
		if (((__float_as_uint(v) >> 23) & 0xff) == 0xff || ((__float_as_uint(r) >> 23) & 0xff) == 0xff) {
			/* NaN or Inf: bad, but for the infinity the reference has too (attention's lse of a row with no key) */
			bad += v != r;
			continue;
		}
		const float d = fabsf(v - r), rel = d / fmaxf(1.0f, fabsf(r));
		over += rel > tol;
		worst = fmaxf(worst, rel);
		sq_err += (double)d * d;
		sq_ref += (double)r * r;
	}

	/* one atomic of each per warp */
	for (int s = 16; s > 0; s >>= 1) {
		sq_err += __shfl_xor_sync(0xffffffffu, sq_err, s);
		sq_ref += __shfl_xor_sync(0xffffffffu, sq_ref, s);
		bad += __shfl_xor_sync(0xffffffffu, bad, s);
		over += __shfl_xor_sync(0xffffffffu, over, s);
		worst = fmaxf(worst, __shfl_xor_sync(0xffffffffu, worst, s));
	}
	if (threadIdx.x % 32 == 0) {
		atomicAdd(&out->sq_err, sq_err);
		atomicAdd(&out->sq_ref, sq_ref);
		atomicAdd(&out->bad, bad);
		atomicAdd(&out->over, over);
		atomicMax(&out->worst_bits, __float_as_uint(worst));
	}
}
