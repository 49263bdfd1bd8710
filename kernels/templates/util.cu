/*
 * util.cu - helper kernels of the tuner: fill inputs with reproducible random
 * values, and compare a candidate's output against the reference GEMM's.
 *
 * fill_random(p, n, seed, dtype_bf16)
 *     p[i] = uniform value in [-1, 1) from a hash of (i, seed), as f16
 *     (dtype_bf16 = 0) or bf16 (dtype_bf16 = 1), rounded toward zero (so
 *     never 1.0).  The same (n, seed) always gives the same values, whatever
 *     the launch shape.  Any grid and block (grid-stride loop).
 *
 * compare_to_reference(x, ldx, ref, M, N, dtype_bf16, sums, max_abs_err_bits, nan_count)
 *     Over the M x N elements, x(m,n) = x[m*ldx + n] (f16/bf16) against
 *     ref[m*N + n] (fp32), accumulates
 *         sums[0]           += (x - ref)^2          (double)
 *         sums[1]           += ref^2                (double)
 *         *max_abs_err_bits  = max |x - ref|        (float bit pattern)
 *         *nan_count        += elements whose x is NaN or Inf
 *     Elements whose x is NaN or Inf are only counted, not added to the sums
 *     or the max.  The host zeroes the three outputs before the launch; the
 *     kernel only adds to them (several launches accumulate).  Any grid; the
 *     block size must be a multiple of 32, at most 1024.
 *
 * Tunables: none.
 */

typedef unsigned short elem; /* one f16 or bf16 value, as its bit pattern */
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

/* ------------------------------------------------------------ conversions */

static __device__ __forceinline__ float elem_to_float(elem x, int bf16)
{
	if (bf16)
		return __uint_as_float((u32)x << 16);
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
	return f;
}

/* Rounds toward zero, so |f| < 1 stays below 1. */
static __device__ __forceinline__ elem float_to_elem_rz(float f, int bf16)
{
	elem x;
	if (bf16)
		asm("cvt.rz.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
	else
		asm("cvt.rz.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
	return x;
}

/* ------------------------------------------------------------ fill_random */

/* splitmix64's finaliser: a bijection of 64-bit words that mixes every bit. */
static __device__ __forceinline__ u64 mix64(u64 z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1): the top 24 bits of the hash of (i, seed), as a multiple of 2^-23. */
static __device__ __forceinline__ float uniform_pm1(i64 i, u32 seed)
{
	u64 h = mix64((u64)i * 0x9e3779b97f4a7c15ULL + mix64((u64)seed + 1));
	return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

extern "C" __global__ void fill_random(unsigned short *p, long long n, unsigned int seed, int dtype_bf16)
{
	i64 stride = (i64)gridDim.x * blockDim.x;
	for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		p[i] = float_to_elem_rz(uniform_pm1(i, seed), dtype_bf16);
}

/* --------------------------------------------------- compare_to_reference */

static __device__ __forceinline__ bool is_finite(float f)
{
	return (__float_as_uint(f) & 0x7f800000u) != 0x7f800000u;
}

/* The sum over the warp, in every lane. */
static __device__ __forceinline__ double warp_sum(double v)
{
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ u32 warp_max(u32 v)
{
	for (int o = 16; o > 0; o /= 2) {
		u32 w = __shfl_xor_sync(0xffffffffu, v, o);
		v = w > v ? w : v;
	}
	return v;
}

static __device__ __forceinline__ u64 warp_sum_u64(u64 v)
{
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

extern "C" __global__ void compare_to_reference(const unsigned short *x, long long ldx, const float *ref,
						int M, int N, int dtype_bf16, double *sums,
						unsigned int *max_abs_err_bits,
						unsigned long long *nan_count)
{
	__shared__ double s_err2[32], s_ref2[32];
	__shared__ u32 s_max[32];
	__shared__ u64 s_nan[32];

	/* this thread's share: elements i, i + stride, ... of the M*N */
	double err2 = 0.0, ref2 = 0.0;
	u32 max_bits = 0; /* |err| as bits: non-negative floats order like their bit patterns */
	u64 nans = 0;
	const i64 total = (i64)M * N, stride = (i64)gridDim.x * blockDim.x;
	for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
		i64 m = i / N, n = i % N;
		float xv = elem_to_float(x[m * ldx + n], dtype_bf16), r = ref[i];
		if (!is_finite(xv)) {
			nans++;
			continue;
		}
		float d = xv - r;
		err2 += (double)d * d;
		ref2 += (double)r * r;
		u32 bits = __float_as_uint(d) & 0x7fffffffu; /* |d| */
		max_bits = bits > max_bits ? bits : max_bits;
	}

	/* reduce: warps through shuffles, then warp 0 over the warps' results */
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
	err2 = warp_sum(err2);
	ref2 = warp_sum(ref2);
	max_bits = warp_max(max_bits);
	nans = warp_sum_u64(nans);
	if (lane == 0) {
		s_err2[warp] = err2;
		s_ref2[warp] = ref2;
		s_max[warp] = max_bits;
		s_nan[warp] = nans;
	}
	__syncthreads();
	if (warp != 0)
		return;
	err2 = lane < nwarps ? s_err2[lane] : 0.0;
	ref2 = lane < nwarps ? s_ref2[lane] : 0.0;
	max_bits = lane < nwarps ? s_max[lane] : 0;
	nans = lane < nwarps ? s_nan[lane] : 0;
	err2 = warp_sum(err2);
	ref2 = warp_sum(ref2);
	max_bits = warp_max(max_bits);
	nans = warp_sum_u64(nans);
	if (lane == 0) {
		atomicAdd(&sums[0], err2);
		atomicAdd(&sums[1], ref2);
		atomicMax(max_abs_err_bits, max_bits);
		if (nans)
			atomicAdd(nan_count, nans);
	}
}
