/*
 * quant-emu.cc - the weight-quantized GEMM templates (qgemv.cu, qgemm.cu, qmma.cu, qcode.cu)
 * and qwgmma's split-K sum (quant_sum.cuh, against quant_reduce_kernel's
 * bits) compiled for the host and run on the CPU, one thread per CUDA
 * thread, against a float64 reference: their index arithmetic, bounds, pipeline,
 * split and reductions checked where no GPU is.  Not a GPU test: the
 * PTX behind quant.cuh's small functions is replaced (KTUNE_QUANT_HOST) by
 * what the PTX ISA says it does, as this file reads it (mma.sync's and
 * ldmatrix's fragments, cp.async's groups landing at the wait), so it
 * cannot find a misreading shared by the kernels and this file, nor
 * anything about timing, caches or registers.
 *
 * Built per configuration by tests/emu/run.sh:
 *     g++ -std=c++17 -O1 -DKERNEL='"qgemm.cu"' -DBITS=4 ... quant-emu.cc
 * and run as  quant-emu M N K SPLIT ZERO_SCALAR BIAS [SEED]:  exit 0 when
 * every element of C is within the op's tolerance (4 ulps of the dtype at
 * 1, relative to max(1, |reference|)), 1 otherwise.
 *
 * Emulation: blocks run one after another; a block's threads are fibers
 * (ucontext) on one host thread, each running until it reaches a barrier;
 * __syncthreads is a barrier of the block, and each warp-wide instruction
 * (shuffle, ldmatrix, mma) a barrier of the warp after an exchange of the
 * lanes' operands.  __shared__ arrays are static (one block at a time).
 * cp.async copies wait in their thread's groups and land at
 * cp_async_wait, so a stage read before its wait reads stale data.
 */
#include <math.h>
#include <ucontext.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

/* ------------------------------------------------------------ CUDA on the host */

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define KTUNE_QUANT_HOST "quant-host.h" /* quant.cuh's PTX, emulated */

struct dim3 {
	unsigned x, y, z;
};

/* A CUDA thread: its context, its place in the block, and what the emulated PTX keeps per thread. */
struct copy {
	char *dst;
	const char *src;
	int bytes, src_bytes;
};
struct fiber {
	ucontext_t ctx;
	char *stack;
	dim3 tid;
	int waiting, done;
	int exchange_turn;
	std::vector<copy> open_group;
	std::vector<std::vector<copy>> groups;
};

static ucontext_t scheduler;
static fiber *fibers, *cur;
static dim3 blockIdx, gridDim, blockDim;
#define threadIdx (cur->tid)

/* A barrier of `count` fibers starting at `first`: the last to arrive wakes the others. */
struct barrier {
	int first, count, arrived;
};
static barrier block_barrier, warp_barrier[32];

static void barrier_wait(barrier *b)
{
	if (++b->arrived < b->count) {
		cur->waiting = 1;
		swapcontext(&cur->ctx, &scheduler);
		return;
	}
	b->arrived = 0;
	for (int i = b->first; i < b->first + b->count; i++)
		fibers[i].waiting = 0;
}

static void __syncthreads(void)
{
	barrier_wait(&block_barrier);
}

/*
 * The lanes' operands of a warp-wide instruction: each lane writes its own,
 * the warp waits, each reads.  Two sets, used in turns, so that one
 * barrier an instruction suffices: a lane writes set s again only after
 * the next instruction's barrier, which every lane reaches done reading set s.
 */
struct lane_slot {
	uint64_t v[8];
};
static lane_slot exchange_sets[2][32][32];

static int my_warp(void)
{
	return (int)threadIdx.x / 32;
}

static int my_lane(void)
{
	return (int)threadIdx.x % 32;
}

static void warp_sync(void)
{
	barrier_wait(&warp_barrier[my_warp()]);
}

/* This lane's slots of the next warp-wide instruction, and (after warp_sync) its lanes'. */
static lane_slot (*exchange_next(void))[32]
{
	cur->exchange_turn ^= 1;
	return exchange_sets[cur->exchange_turn];
}

static float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static float __fmaf_rn(float a, float b, float c)
{
	return fmaf(a, b, c);
}

static float __shfl_xor_sync(unsigned mask, float v, int d)
{
	(void)mask;
	lane_slot(*x)[32] = exchange_next();
	x[my_warp()][my_lane()].v[0] = __float_as_uint(v);
	warp_sync();
	return __uint_as_float((unsigned)x[my_warp()][my_lane() ^ d].v[0]);
}

/* f16 or bf16 bit patterns (unsigned short) and float: round to nearest even. */
static float half_to_float(unsigned short h, int bf16)
{
	if (bf16)
		return __uint_as_float((unsigned)h << 16);
	int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
	float v = exp == 0 ? ldexpf((float)man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexpf((float)(man + 1024), exp - 25);
	return sign ? -v : v;
}

static unsigned short float_to_half(float f, int bf16)
{
	unsigned x = __float_as_uint(f);
	if (bf16) {
		if ((x & 0x7fffffff) > 0x7f800000)
			return (unsigned short)((x >> 16) | 0x40);
		return (unsigned short)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
	}
	unsigned sign = (x >> 16) & 0x8000;
	int exp = (int)((x >> 23) & 0xff) - 127 + 15;
	unsigned man = x & 0x7fffff;
	if (((x >> 23) & 0xff) == 0xff)
		return (unsigned short)(sign | 0x7c00 | (man ? 0x200 : 0));
	if (exp >= 31)
		return (unsigned short)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (unsigned short)sign;
		man |= 0x800000;
		unsigned shift = (unsigned)(14 - exp), half = 1u << (shift - 1);
		unsigned v = man >> shift, rest = man & ((1u << shift) - 1);
		if (rest > half || (rest == half && (v & 1)))
			v++;
		return (unsigned short)(sign | v);
	}
	unsigned v = ((unsigned)exp << 10) | (man >> 13), rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (v & 1)))
		v++;
	return (unsigned short)(sign | v);
}

#include KERNEL
#include "quant_sum.cuh" /* qwgmma's split-K sum: checked here against quant_reduce_kernel, bit for bit */

/* ------------------------------------------------------------ launches */

/*
 * Runs body on every thread of every block of the grid, a block at a time,
 * each thread a fiber: the scheduler resumes, in turn, every fiber neither
 * done nor waiting at a barrier, until all are done.  A barrier no fiber
 * can pass (a thread that left early) is a deadlock: reported, exit 3.
 */
static void (*fiber_body)(void *);
static void *fiber_args;

static void fiber_main(void)
{
	fiber_body(fiber_args);
	if (!cur->open_group.empty() || !cur->groups.empty()) /* every copy lands before the block ends */
		cp_async_wait<0>();
	cur->done = 1;
}

static void run_grid(dim3 grid, unsigned threads, void (*body)(void *), void *args)
{
	const size_t stack = 256 * 1024;
	gridDim = grid;
	blockDim = { threads, 1, 1 };
	fiber_body = body;
	fiber_args = args;
	fibers = new fiber[threads];
	for (unsigned t = 0; t < threads; t++)
		fibers[t].stack = (char *)malloc(stack);
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				blockIdx = { x, y, z };
				block_barrier = { 0, (int)threads, 0 };
				for (unsigned w = 0; w < threads / 32; w++)
					warp_barrier[w] = { (int)w * 32, 32, 0 };
				for (unsigned t = 0; t < threads; t++) {
					fiber *f = &fibers[t];
					getcontext(&f->ctx);
					f->ctx.uc_stack.ss_sp = f->stack;
					f->ctx.uc_stack.ss_size = stack;
					f->ctx.uc_link = &scheduler;
					makecontext(&f->ctx, fiber_main, 0);
					f->tid = { t, 0, 0 };
					f->waiting = f->done = 0;
					f->exchange_turn = 0;
					f->open_group.clear();
					f->groups.clear();
				}
				for (unsigned left = threads; left;) {
					int ran = 0;
					left = 0;
					for (unsigned t = 0; t < threads; t++) {
						fiber *f = &fibers[t];
						if (f->done)
							continue;
						left++;
						if (f->waiting)
							continue;
						cur = f;
						swapcontext(&scheduler, &f->ctx);
						ran = 1;
					}
					if (left && !ran) {
						fprintf(stderr, "deadlock in block (%u, %u, %u): threads wait at a barrier "
							"that others left\n", x, y, z);
						exit(3);
					}
				}
			}
	for (unsigned t = 0; t < threads; t++)
		free(fibers[t].stack);
	delete[] fibers;
	fibers = NULL;
}

struct gemm_args {
	const elem *a;
	const u32 *wq;
	const elem *scales, *zeros, *bias;
	elem *c;
	float *partials;
	long long m, n, k, lda, ldc;
	int zero_per_group;
};

static void gemm_body(void *p)
{
	const gemm_args *g = (const gemm_args *)p;
#if defined(IS_QGEMM)
	qgemm_kernel(g->a, g->wq, g->scales, g->zeros, g->bias, g->c, g->partials, g->m, g->n, g->k, g->lda, g->ldc,
		     g->zero_per_group);
#elif defined(IS_QCODE)
	qcode_kernel(g->a, g->wq, g->scales, g->zeros, g->bias, g->c, g->partials, g->m, g->n, g->k, g->lda, g->ldc,
		     g->zero_per_group);
#elif defined(IS_QMMA)
	qmma_kernel(g->a, g->wq, g->scales, g->zeros, g->bias, g->c, g->partials, g->m, g->n, g->k, g->lda, g->ldc,
		    g->zero_per_group);
#else
	qgemv_kernel(g->a, g->wq, g->scales, g->zeros, g->bias, g->c, g->partials, g->m, g->n, g->k, g->lda, g->ldc,
		     g->zero_per_group);
#endif
}

struct reduce_args {
	const float *partials;
	int splits;
	const elem *bias;
	elem *c;
	long long m, n, ldc;
};

static void reduce_body(void *p)
{
	const reduce_args *r = (const reduce_args *)p;
	quant_reduce_kernel(r->partials, r->splits, r->bias, r->c, r->m, r->n, r->ldc);
}

static void sum_body(void *p)
{
	const reduce_args *r = (const reduce_args *)p;
	quant_sum_kernel(r->partials, r->splits, r->bias, r->c, r->m, r->n, r->ldc);
}

/* ------------------------------------------------------------ the problem */

static double uniform(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

static void *aligned(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 256, bytes ? bytes : 16))
		abort();
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: %s M N K SPLIT ZERO_SCALAR BIAS [SEED]\n", argv[0]);
		return 2;
	}
	const long long m = atoll(argv[1]), n = atoll(argv[2]), k = atoll(argv[3]);
	const int split = atoi(argv[4]), zero_scalar = atoi(argv[5]), with_bias = atoi(argv[6]);
	uint64_t seed = argc > 7 ? (uint64_t)atoll(argv[7]) : 1;
	if (m < 1 || n < 1 || k < 32 || k % 32 || (GROUP && k % GROUP) || split < 1) {
		fprintf(stderr, "%lld x %lld x %lld split %d: not a valid problem of this format\n", m, n, k, split);
		return 2;
	}
	const long long lda = k + 8, ldc = n + 3; /* strides past the rows: nothing may touch the gaps */
	const long long kw = k / PER_WORD, rw = (kw + 3) / 4 * 4, groups = GROUP ? k / GROUP : 1;
	const double top = (double)((1 << BITS) - 1);

	elem *a = (elem *)aligned((size_t)(m * lda) * 2), *scales = (elem *)aligned((size_t)(n * groups) * 2);
	elem *zeros = (elem *)aligned((size_t)(n * groups) * 2), *bias = (elem *)aligned((size_t)n * 2);
	elem *c = (elem *)aligned((size_t)(m * ldc) * 2);
	u32 *wq = (u32 *)aligned((size_t)(n * rw) * 4);
	float *partials = (float *)aligned((size_t)split * (size_t)(m * n) * 4);
	const double amp = 1.5 / (top * sqrt((double)k));
	for (long long i = 0; i < m * lda; i++)
		a[i] = from_float((float)(amp * (2 * uniform(&seed) - 1)));
	for (long long i = 0; i < n * rw; i++)
		wq[i] = (u32)(uniform(&seed) * 4294967296.0);
	for (long long i = 0; i < n * groups; i++) {
		scales[i] = from_float((float)(0.5 + 0.5 * uniform(&seed)));
		zeros[i] = from_float((float)(MODE == 3 ? -top / 2 * uniform(&seed) : top * uniform(&seed)));
	}
	for (long long i = 0; i < n; i++)
		bias[i] = from_float((float)(2 * uniform(&seed) - 1));
	for (long long i = 0; i < m * ldc; i++)
		c[i] = 0x7fff; /* NaN: every element of C must be written, the gaps never */
	for (long long i = 0; i < split * m * n; i++)
		partials[i] = NAN;

	gemm_args g = { a, wq, HAS_SCALE ? scales : NULL, HAS_ZERO ? zeros : NULL, with_bias ? bias : NULL, c,
			split > 1 ? partials : NULL, m, n, k, lda, ldc, !zero_scalar };
#if defined(IS_QCODE)
	const long long passes = (m + TOK - 1) / TOK;
	dim3 grid = { (unsigned)((n + BLOCK_N - 1) / BLOCK_N), (unsigned)(passes < 65535 ? passes : 65535), (unsigned)split };
	run_grid(grid, NTHREADS, gemm_body, &g);
#elif defined(IS_QGEMM) || defined(IS_QMMA)
	const long long mtiles = (m + BLOCK_M - 1) / BLOCK_M;
	dim3 grid = { (unsigned)((n + BLOCK_N - 1) / BLOCK_N), (unsigned)(mtiles < 65535 ? mtiles : 65535), (unsigned)split };
	run_grid(grid, NTHREADS, gemm_body, &g);
#else
	const long long mblocks = (m + MAX_M - 1) / MAX_M;
	dim3 grid = { (unsigned)((n + ROWS - 1) / ROWS), (unsigned)split, (unsigned)(mblocks < 65535 ? mblocks : 65535) };
	run_grid(grid, THREADS, gemm_body, &g);
#endif
	if (split > 1) {
		reduce_args r = { partials, split, with_bias ? bias : NULL, c, m, n, ldc };
		long long blocks = (m * n + 255) / 256;
		run_grid({ (unsigned)(blocks < 3 ? blocks : 3), 1, 1 }, 256, reduce_body, &r); /* a short grid: it walks */
	}

	/*
	 * quant_sum_kernel on the same partials, into rows of c whose stride is
	 * a multiple of 4 (its 8-byte stores where n is one too) and into c's
	 * own (n + 3: its 2-byte stores): the same bits as quant_reduce_kernel,
	 * and nothing written past a row.
	 */
	long long bad_sum = 0;
	for (int pass = 0; split > 1 && pass < 2; pass++) {
		const long long ld2 = pass ? ldc : (n + 3) / 4 * 4;
		elem *c2 = (elem *)aligned((size_t)(m * ld2) * 2);
		for (long long i = 0; i < m * ld2; i++)
			c2[i] = 0x7fff;
		reduce_args r = { partials, split, with_bias ? bias : NULL, c2, m, n, ld2 };
		long long blocks = (m * n + 1023) / 1024;
		run_grid({ (unsigned)(blocks < 3 ? blocks : 3), 1, 1 }, 256, sum_body, &r);
		for (long long i = 0; i < m; i++)
			for (long long j = 0; j < ld2; j++) {
				const elem want = j < n ? c[i * ldc + j] : (elem)0x7fff;
				if (c2[i * ld2 + j] != want && bad_sum++ < 5)
					fprintf(stderr, "quant_sum_kernel: c[%lld, %lld] (stride %lld) = 0x%04x, want 0x%04x\n", i,
						j, ld2, c2[i * ld2 + j], want);
			}
		free(c2);
	}

	/* the float64 reference, from the codes as the format lays them out */
	const double tol = DTYPE == 1 ? 1.6e-2 : 2e-3;
	double worst = 0;
	long long bad = 0;
	std::vector<double> w((size_t)k);
	for (long long j = 0; j < n; j++) {
		for (long long l = 0; l < k; l++) {
			u32 q = (wq[j * rw + l / PER_WORD] >> (l % PER_WORD * BITS)) & QMASK;
			long long gi = j * groups + (GROUP ? l / GROUP : 0);
			double s = to_float(scales[gi]), z = to_float(zeros[zero_scalar ? 0 : gi]);
			w[(size_t)l] = MODE == 0 ? (q - z) * s : MODE == 1 ? q * s : MODE == 2 ? q - z : q * s + z;
		}
		for (long long i = 0; i < m; i++) {
			double want = with_bias ? to_float(bias[j]) : 0;
			for (long long l = 0; l < k; l++)
				want += to_float(a[i * lda + l]) * w[(size_t)l];
			double got = to_float(c[i * ldc + j]), err = fabs(got - want) / (fabs(want) > 1 ? fabs(want) : 1);
			if (getenv("EMU_VERBOSE"))
				printf("c[%lld, %lld] = %.6g, want %.6g\n", i, j, got, want);
			if (!(err <= tol)) {
				if (bad++ < 5)
					fprintf(stderr, "c[%lld, %lld] = %g, want %g\n", i, j, got, want);
				worst = isnan(err) ? INFINITY : err > worst ? err : worst;
			} else if (err > worst) {
				worst = err;
			}
		}
	}
	for (long long i = 0; i < m; i++) /* the gaps between rows of C are untouched */
		for (long long j = n; j < ldc; j++)
			if (c[i * ldc + j] != 0x7fff) {
				if (bad++ < 5)
					fprintf(stderr, "c[%lld, %lld] past the row was written\n", i, j);
			}
	bad += bad_sum;
	printf("%lld x %lld x %lld split %d zero %s bias %d: worst error %.3g, %lld bad\n", m, n, k, split,
	       zero_scalar ? "scalar" : "per group", with_bias, worst, bad);
	return bad ? 1 : 0;
}
