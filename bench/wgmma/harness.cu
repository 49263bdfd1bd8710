/*
 * harness.cu - standalone check and benchmark of kernels/templates/gemm_wgmma.cu
 * against cuBLAS on one GPU.  Three modes:
 *
 *   harness compile OUTDIR [SRC]  NVRTC-compiles every variant the other modes
 *                                 use (-arch=sm_90a -default-device -std=c++17,
 *                                 no include paths) into OUTDIR/<name>.cubin and
 *                                 prints each one's registers and spills (ptxas
 *                                 -v); needs no GPU.  `survey` as OUTDIR compiles
 *                                 the tile grid instead and writes nothing.
 *   harness correct DIR           every correctness variant on awkward and large
 *                                 shapes, all four layouts, both dtypes, beta 0
 *                                 and not, against an fp32 reference GEMM
 *   harness time DIR              the timing shapes, every timing variant and
 *                                 cuBLAS, same inputs, same run
 *   harness compile-probe OUTDIR LIST [SRC]
 *                                 compiles the variants listed in LIST, one a
 *                                 line: "bm bn stages consumers cluster bf16 tb
 *                                 [-DNAME=VALUE ...]", into OUTDIR with
 *                                 OUTDIR/probe.list naming them
 *   harness probe DIR M N K       times those variants (each in its own dtype
 *                                 and layout) and cuBLAS at one shape; checks
 *                                 each against cuBLAS.  PROBE_RUNS=n times n
 *                                 runs after one warm-up (1 for a profiler);
 *                                 PROBE_SPLITS="1 2 4" the split-K values,
 *                                 PROBE_GROUPS="1 8 16" the group sizes
 *                                 (default 8 16); PROBE_WARM=1 runs each
 *                                 timed launch's kernel once on other
 *                                 operands right after the L2 flush (code
 *                                 warm), PROBE_WARM=2 on the same operands
 *                                 (code and data warm); variants compiled with
 *                                 probes/timeline.patch's PROBE_TIMELINE
 *                                 also print their blocks' timeline;
 *                                 PROBE_ENERGY=s also runs each variant and
 *                                 cuBLAS back to back for s seconds and
 *                                 prints their energy per GEMM (NVML);
 *                                 PROBE_SPACER=1 puts an empty kernel
 *                                 between those launches
 *
 * Build (see README.md):
 *   nvcc -O3 -arch=sm_90a -std=c++17 -o harness bench/wgmma/harness.cu \
 *        -lcublas -lnvrtc -L/usr/local/cuda/lib64/stubs -lcuda
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

typedef unsigned short u16;
typedef long long i64;

/* ------------------------------------------------------------- checking */

#define CU_CHECK(x) cu_check((x), #x, __FILE__, __LINE__)
#define RT_CHECK(x) rt_check((x), #x, __FILE__, __LINE__)
#define BLAS_CHECK(x) blas_check((x), #x, __FILE__, __LINE__)

static const char *g_current = ""; /* the variant under test, for error messages */

static void cu_check(CUresult r, const char *what, const char *file, int line)
{
	if (r == CUDA_SUCCESS)
		return;
	const char *s = "?";
	cuGetErrorString(r, &s);
	fprintf(stderr, "%s:%d: %s: %s (variant %s)\n", file, line, what, s, g_current);
	exit(1);
}

static void rt_check(cudaError_t r, const char *what, const char *file, int line)
{
	if (r == cudaSuccess)
		return;
	fprintf(stderr, "%s:%d: %s: %s\n", file, line, what, cudaGetErrorString(r));
	exit(1);
}

static void blas_check(cublasStatus_t r, const char *what, const char *file, int line)
{
	if (r == CUBLAS_STATUS_SUCCESS)
		return;
	fprintf(stderr, "%s:%d: %s: cublas status %d\n", file, line, what, (int)r);
	exit(1);
}

/* ------------------------------------------------------------- variants */

struct tile_cfg {
	int bm, bn, stages, consumers;
	int cluster; /* CLUSTER_M */
	int epi_bufs = 2; /* EPI_BUFS */
	int epi_cols = 64; /* EPI_COLS: columns of a staged chunk of C (32: a 64-byte swizzle) */
	int l2promo = 3;   /* L2PROMO: A's and B's L2 promotion, 0 none, 1 64B, 2 128B, 3 256B (the kernel ignores it) */
	int cluster_n = 1; /* probe 19's CLUSTER_N (blocks along N sharing A), from the variant's defines */
	int cluster_k = 1; /* probe 23's CLUSTER_K (blocks splitting a tile's k-tiles), likewise */
	int tile_m = 0;    /* probe 24's TILE_M (rows of C per tile, under BLOCK_M), likewise; 0: BLOCK_M */
};

/* The configurations checked and timed (each for both dtypes and the layouts used). */
static const tile_cfg CFGS[] = {
	{ 128, 256, 4, 2, 1 }, { 128, 128, 6, 2, 1 }, { 128, 128, 6, 1, 1 },
	{ 256, 128, 4, 2, 1 }, { 192, 128, 4, 3, 1 }, { 128, 192, 4, 2, 1 },
	{ 128, 256, 4, 2, 2 }, { 256, 128, 4, 2, 2 }, { 128, 192, 4, 2, 2 },
	{ 128, 128, 6, 1, 2 },
};
#define NCFGS ((int)(sizeof(CFGS) / sizeof(CFGS[0])))

struct variant {
	tile_cfg c;
	int bf16, ta, tb;
	int dbg; /* compiled with MBAR_SPIN_LIMIT: hangs trap instead */
	std::string extra; /* more -D options, space-separated (probe variants) */
	std::string name;
	CUmodule mod = nullptr;
	CUfunction fn = nullptr;
	int max_clusters = 0; /* cluster > 1: clusters that can run at once */
};

static const char *layout_name(int ta, int tb)
{
	static const char *n[4] = { "nn", "nt", "tn", "tt" };
	return n[ta * 2 + tb];
}

static std::string variant_name(const tile_cfg &c, int bf16, int ta, int tb, int dbg)
{
	char b[128];
	char k[16] = "";
	if (c.cluster > 1)
		snprintf(k, sizeof(k), "_k%d", c.cluster);
	snprintf(b, sizeof(b), "bm%d_bn%d_s%d_c%d%s_%s_%s%s", c.bm, c.bn, c.stages, c.consumers, k,
		 bf16 ? "bf16" : "f16", layout_name(ta, tb), dbg ? "_dbg" : "");
	return b;
}

/* The kernel's SMEM_BYTES: 1024 + STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 + CONSUMERS * 2 * 8192 + STAGES * 16. */
static size_t smem_bytes(const tile_cfg &c)
{
	return 1024 + (size_t)c.stages * (c.bm + c.bn) * 64 * 2 + (size_t)c.consumers * c.epi_bufs * 128 * c.epi_cols +
	       (size_t)c.stages * 16 + (c.cluster_k > 1 ? (size_t)c.consumers * 16 + (size_t)c.bm * c.bn * 4 : 0);
}

static int threads(const tile_cfg &c)
{
	return (c.consumers + 1) * 128;
}

/* *value = N where the defines hold -DNAME=N; left alone otherwise. */
static void define_int(const std::string &defines, const char *name, int *value)
{
	const std::string key = std::string("-D") + name + "=";
	const size_t at = defines.find(key);
	if (at != std::string::npos)
		*value = atoi(defines.c_str() + at + key.size());
}

/* Correctness variants: every config, dtype and layout, with the hang guard. */
static std::vector<variant> correct_variants()
{
	std::vector<variant> v;
	for (int i = 0; i < NCFGS; i++)
		for (int bf16 = 0; bf16 < 2; bf16++)
			for (int l = 0; l < 4; l++) {
				variant x;
				x.c = CFGS[i];
				x.bf16 = bf16;
				x.ta = l / 2;
				x.tb = l % 2;
				x.dbg = 1;
				x.name = variant_name(x.c, bf16, x.ta, x.tb, 1);
				v.push_back(x);
			}
	return v;
}

/* Timing variants: every config, both dtypes, nn and nt, exactly the template's defaults otherwise. */
static std::vector<variant> time_variants()
{
	std::vector<variant> v;
	for (int i = 0; i < NCFGS; i++)
		for (int bf16 = 0; bf16 < 2; bf16++)
			for (int tb = 0; tb < 2; tb++) {
				variant x;
				x.c = CFGS[i];
				x.bf16 = bf16;
				x.ta = 0;
				x.tb = tb;
				x.dbg = 0;
				x.name = variant_name(x.c, bf16, 0, tb, 0);
				v.push_back(x);
			}
	return v;
}

/* --------------------------------------------------------------- NVRTC */

static std::string read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "cannot open '%s'\n", path);
		exit(2);
	}
	std::string s;
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		s.append(buf, n);
	const bool failed = ferror(f);
	fclose(f);
	if (failed || s.empty()) { /* a directory opens, then reads nothing: an empty kernel source */
		fprintf(stderr, "cannot read '%s' (%s)\n", path, failed ? strerror(errno) : "empty");
		exit(2);
	}
	return s;
}

/* Compiles one variant; returns the cubin (empty on failure) and the log in *log. */
static std::string nvrtc_compile(const std::string &src, const tile_cfg &c, int bf16, int ta, int tb,
				 int dbg, const std::string &extra, std::string *log)
{
	char d[9][48];
	snprintf(d[0], 48, "-DBLOCK_M=%d", c.bm);
	snprintf(d[1], 48, "-DBLOCK_N=%d", c.bn);
	snprintf(d[2], 48, "-DSTAGES=%d", c.stages);
	snprintf(d[3], 48, "-DCONSUMERS=%d", c.consumers);
	snprintf(d[4], 48, "-DDTYPE_BF16=%d", bf16);
	snprintf(d[5], 48, "-DTRANS_A=%d", ta);
	snprintf(d[6], 48, "-DTRANS_B=%d", tb);
	snprintf(d[7], 48, "-DMBAR_SPIN_LIMIT=%d", dbg ? (1 << 20) : 0);
	snprintf(d[8], 48, "-DCLUSTER_M=%d", c.cluster);
	std::vector<const char *> opts = { "-arch=sm_90a", "-default-device", "-std=c++17", "-Xptxas=-v",
					   d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8] };
	std::vector<std::string> words;
	for (size_t i = 0; i < extra.size();) {
		size_t j = extra.find(' ', i);
		if (j == std::string::npos)
			j = extra.size();
		if (j > i)
			words.push_back(extra.substr(i, j - i));
		i = j + 1;
	}
	for (auto &w : words)
		opts.push_back(w.c_str());
	nvrtcProgram p;
	if (nvrtcCreateProgram(&p, src.c_str(), "gemm_wgmma.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
		*log = "nvrtcCreateProgram failed";
		return "";
	}
	nvrtcResult r = nvrtcCompileProgram(p, (int)opts.size(), opts.data());
	size_t n = 0;
	nvrtcGetProgramLogSize(p, &n);
	log->assign(n, '\0');
	if (n)
		nvrtcGetProgramLog(p, &(*log)[0]);
	std::string cubin;
	if (r == NVRTC_SUCCESS) {
		nvrtcGetCUBINSize(p, &n);
		cubin.assign(n, '\0');
		nvrtcGetCUBIN(p, &cubin[0]);
	}
	nvrtcDestroyProgram(&p);
	return cubin;
}

/* "Used 168 registers" and "N bytes spill stores" out of the ptxas log. */
static void ptxas_summary(const std::string &log, int *regs, int *spill_st, int *spill_ld, int *stack)
{
	*regs = *spill_st = *spill_ld = *stack = -1;
	const char *p = strstr(log.c_str(), "Used ");
	if (p)
		sscanf(p, "Used %d registers", regs);
	p = strstr(log.c_str(), "bytes stack frame");
	if (p) {
		while (p > log.c_str() && p[-1] != '\n')
			p--;
		sscanf(p, "%*[^0-9]%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", stack,
		       spill_st, spill_ld);
	}
}

/*
 * Probe variants, one a line: "bm bn stages consumers cluster bf16 tb
 * [-DNAME=VALUE ...]" (layout nn or nt); '#' starts a comment.  The name
 * carries the extra defines, so variants that differ only in them differ.
 */
static std::vector<variant> read_probe_list(const char *path)
{
	std::vector<variant> v;
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "cannot read '%s'\n", path);
		exit(1);
	}
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		variant x;
		int used = 0;
		if (sscanf(line, " %d %d %d %d %d %d %d %n", &x.c.bm, &x.c.bn, &x.c.stages, &x.c.consumers,
			   &x.c.cluster, &x.bf16, &x.tb, &used) < 7)
			continue;
		x.ta = 0;
		x.dbg = 0;
		x.extra = line + used;
		/* the defines that change the launch: shared memory, boxes, grid */
		define_int(x.extra, "EPI_BUFS", &x.c.epi_bufs);
		define_int(x.extra, "EPI_COLS", &x.c.epi_cols);
		define_int(x.extra, "L2PROMO", &x.c.l2promo);
		define_int(x.extra, "CLUSTER_N", &x.c.cluster_n);
		define_int(x.extra, "CLUSTER_K", &x.c.cluster_k);
		define_int(x.extra, "TILE_M", &x.c.tile_m);
		while (!x.extra.empty() && isspace((unsigned char)x.extra.back()))
			x.extra.pop_back();
		x.name = variant_name(x.c, x.bf16, 0, x.tb, 0);
		if (!x.extra.empty())
			x.name += '_';
		for (char ch : x.extra)
			if (isalnum((unsigned char)ch) || ch == '_')
				x.name += ch;
			else if (ch == ' ')
				x.name += '_';
		v.push_back(x);
	}
	fclose(f);
	return v;
}

static int cmd_compile(const char *outdir, const char *src_path, const char *list_path)
{
	std::string src = read_file(src_path);
	std::vector<variant> todo;
	bool survey = !strcmp(outdir, "survey");
	if (!survey)
		mkdir(outdir, 0777); /* may exist */
	if (list_path) {
		todo = read_probe_list(list_path);
		std::string copy = std::string(outdir) + "/probe.list";
		FILE *f = fopen(copy.c_str(), "w");
		for (auto &v : todo)
			fprintf(f, "%d %d %d %d %d %d %d %s\n", v.c.bm, v.c.bn, v.c.stages, v.c.consumers, v.c.cluster,
				v.bf16, v.tb, v.extra.c_str());
		fclose(f);
	} else if (survey) {
		/* the tile grid: the most stages that fit, bf16 nn and tt */
		for (int cons = 1; cons <= 3; cons++)
			for (int bm = 64; bm <= 256; bm += 64)
				for (int bn = 64; bn <= 256; bn += 64) {
					if (bm % (64 * cons) || (bm / cons / 64) * bn / 2 > 128)
						continue;
					tile_cfg c = { bm, bn, 2, cons, 1 };
					while (smem_bytes({ bm, bn, c.stages + 1, cons, 1 }) <= 232448)
						c.stages++;
					for (int l = 0; l < 4; l += 3) {
						variant x;
						x.c = c;
						x.bf16 = 1;
						x.ta = l / 2;
						x.tb = l % 2;
						x.dbg = 0;
						x.name = variant_name(c, 1, x.ta, x.tb, 0);
						todo.push_back(x);
					}
				}
	} else {
		todo = correct_variants();
		std::vector<variant> t = time_variants();
		todo.insert(todo.end(), t.begin(), t.end());
	}
	std::vector<std::string> lines(todo.size());
	std::atomic<int> next(0), failed(0);
	auto work = [&]() {
		for (int i; (i = next++) < (int)todo.size();) {
			const variant &v = todo[i];
			std::string log;
			std::string cubin = nvrtc_compile(src, v.c, v.bf16, v.ta, v.tb, v.dbg, v.extra, &log);
			int regs, st, ld, stack;
			ptxas_summary(log, &regs, &st, &ld, &stack);
			char b[256];
			bool warn = log.find("warning") != std::string::npos;
			snprintf(b, sizeof(b), "%-36s smem %6zu  regs %3d  stack %d  spill st %d ld %d%s%s",
				 v.name.c_str(), smem_bytes(v.c), regs, stack, st, ld,
				 cubin.empty() ? "  COMPILE FAILED" : "", warn ? "  (warnings)" : "");
			lines[i] = b;
			if (cubin.empty() || warn)
				lines[i] += "\n" + log;
			if (cubin.empty()) {
				failed++;
				continue;
			}
			if (!survey) {
				std::string path = std::string(outdir) + "/" + v.name + ".cubin";
				FILE *f = fopen(path.c_str(), "wb");
				if (!f || fwrite(cubin.data(), 1, cubin.size(), f) != cubin.size()) {
					fprintf(stderr, "cannot write '%s'\n", path.c_str());
					exit(1);
				}
				fclose(f);
			}
		}
	};
	unsigned nt = std::max(1u, std::thread::hardware_concurrency());
	std::vector<std::thread> pool;
	for (unsigned i = 0; i < nt; i++)
		pool.emplace_back(work);
	for (auto &t : pool)
		t.join();
	for (auto &l : lines)
		printf("%s\n", l.c_str());
	printf("%d variants, %d failed\n", (int)todo.size(), failed.load());
	return failed ? 1 : 0;
}

/* -------------------------------------------------------- device helpers */

__device__ __forceinline__ float to_f(u16 x, int bf16)
{
	return bf16 ? __uint_as_float((unsigned)x << 16) : __half2float(__ushort_as_half(x));
}

__device__ __forceinline__ u16 from_f(float f, int bf16)
{
	return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f)) : __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ unsigned hash32(unsigned x)
{
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	x ^= x >> 16;
	return x;
}

/* n values uniform in [-1, 1), from the seed. */
__global__ void fill_random(u16 *p, size_t n, unsigned seed, int bf16)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned h = hash32((unsigned)i * 0x9E3779B9U ^ hash32(seed + (unsigned)(i >> 32)));
		p[i] = from_f((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f, bf16);
	}
}

__global__ void fill_value(u16 *p, size_t n, u16 v)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

/* R[m][n] = alpha * sum_k op(A)(m,k) op(B)(k,n) + beta * C0(m,n), fp32, 16x16 tiles. */
__global__ void ref_gemm(const u16 *A, const u16 *B, const u16 *C0, float *R, int M, int N, int K,
			 i64 lda, i64 ldb, i64 ldc, int ta, int tb, int bf16, float alpha, float beta)
{
	__shared__ float as[16][17], bs[16][17];
	int tx = threadIdx.x, ty = threadIdx.y;
	int m = blockIdx.y * 16 + ty, n = blockIdx.x * 16 + tx;
	float acc = 0.0f;
	for (int k0 = 0; k0 < K; k0 += 16) {
		/* as[ty][tx] = A(m_tile + ty, k0 + tx); bs[ty][tx] = B(k0 + ty, n_tile + tx) */
		int am = blockIdx.y * 16 + ty, ak = k0 + tx;
		as[ty][tx] = am < M && ak < K ? to_f(ta ? A[(i64)ak * lda + am] : A[(i64)am * lda + ak], bf16) : 0.0f;
		int bk = k0 + ty, bn = blockIdx.x * 16 + tx;
		bs[ty][tx] = bk < K && bn < N ? to_f(tb ? B[(i64)bn * ldb + bk] : B[(i64)bk * ldb + bn], bf16) : 0.0f;
		__syncthreads();
#pragma unroll
		for (int k = 0; k < 16; k++)
			acc += as[ty][k] * bs[k][tx];
		__syncthreads();
	}
	if (m < M && n < N) {
		float r = alpha * acc;
		if (beta != 0.0f)
			r += beta * to_f(C0[(i64)m * ldc + n], bf16);
		R[(i64)m * N + n] = r;
	}
}

/*
 * Compares C (16-bit, ldc) with a reference: R (fp32, dense [M][N]) or, if R
 * is null, R16 (16-bit, ldc).  acc: [0] sum (c-r)^2, [1] sum r^2, [2] max |c-r|
 * (as bits of a non-negative double), [3] count of non-finite c.
 */
__global__ void compare(const u16 *C, const float *R, const u16 *R16, int M, int N, i64 ldc, int bf16,
			double *acc)
{
	double se = 0, sr = 0, mx = 0, bad = 0;
	size_t total = (size_t)M * N;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
		int m = (int)(i / N), n = (int)(i % N);
		float c = to_f(C[(i64)m * ldc + n], bf16);
		float r = R ? R[i] : to_f(R16[(i64)m * ldc + n], bf16);
		if (!isfinite(c)) {
			bad += 1;
			continue;
		}
		double d = (double)c - (double)r;
		se += d * d;
		sr += (double)r * r;
		mx = fmax(mx, fabs(d));
	}
	for (int o = 16; o > 0; o /= 2) {
		se += __shfl_down_sync(0xffffffff, se, o);
		sr += __shfl_down_sync(0xffffffff, sr, o);
		mx = fmax(mx, __shfl_down_sync(0xffffffff, mx, o));
		bad += __shfl_down_sync(0xffffffff, bad, o);
	}
	if (threadIdx.x % 32 == 0) {
		atomicAdd(&acc[0], se);
		atomicAdd(&acc[1], sr);
		atomicMax((unsigned long long *)&acc[2], (unsigned long long)__double_as_longlong(mx));
		atomicAdd(&acc[3], bad);
	}
}

/* Counts elements of the [rows][ldc] buffer outside [M][N] that are not `poison`. */
__global__ void count_outside(const u16 *C, int rows, i64 ldc, int M, int N, u16 poison, unsigned long long *cnt)
{
	size_t total = (size_t)rows * ldc;
	unsigned long long c = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
		i64 m = (i64)(i / ldc), n = (i64)(i % ldc);
		if ((m >= M || n >= N) && C[i] != poison)
			c++;
	}
	if (c)
		atomicAdd(cnt, c);
}

/* ------------------------------------------------------------- host side */

static int g_sms;
static size_t g_l2;
static void *g_flush;
static cublasHandle_t g_blas;
static double *g_acc;             /* compare's accumulators */
static unsigned long long *g_cnt; /* count_outside's */

static const u16 POISON = 0x7fff; /* NaN in both f16 and bf16 */

static void load_variant(variant &v, const char *dir)
{
	std::string path = std::string(dir) + "/" + v.name + ".cubin";
	g_current = v.name.c_str();
	CU_CHECK(cuModuleLoad(&v.mod, path.c_str()));
	CU_CHECK(cuModuleGetFunction(&v.fn, v.mod, "gemm_wgmma_kernel"));
	CU_CHECK(cuFuncSetAttribute(v.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem_bytes(v.c)));
	const int csize = v.c.cluster * v.c.cluster_n * v.c.cluster_k;
	if (csize > 1) {
		/* the cluster shape is compiled in (__cluster_dims__); ask how many fit at once */
		CUlaunchConfig lc;
		memset(&lc, 0, sizeof(lc));
		lc.gridDimX = (unsigned)(csize * g_sms);
		lc.gridDimY = lc.gridDimZ = 1;
		lc.blockDimX = (unsigned)threads(v.c);
		lc.blockDimY = lc.blockDimZ = 1;
		lc.sharedMemBytes = (unsigned)smem_bytes(v.c);
		CU_CHECK(cuOccupancyMaxActiveClusters(&v.max_clusters, v.fn, &lc));
		if (v.max_clusters < 1) {
			fprintf(stderr, "%s: no cluster fits\n", v.name.c_str());
			exit(1);
		}
	}
}

static CUtensorMap encode_map(const void *ptr, int bf16, uint64_t inner, uint64_t outer, uint64_t ld,
			      uint32_t box_inner, uint32_t box_outer,
			      CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B,
			      CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
{
	CUtensorMap m;
	cuuint64_t dims[2] = { inner, outer };
	cuuint64_t strides[1] = { ld * 2 };
	cuuint32_t box[2] = { box_inner, box_outer };
	cuuint32_t estr[2] = { 1, 1 };
	CU_CHECK(cuTensorMapEncodeTiled(&m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
					2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
					swizzle, promo,
					CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
	return m;
}

struct problem {
	int M, N, K;
	i64 lda, ldb, ldc;
	float alpha, beta;
	const u16 *A, *B;
	u16 *C;
	int split_k = 1;
};

/* Split-K scratch: fp32 partials and tile counters (zero; the kernel leaves them zero). */
static float *g_partials;
static int *g_counters;
static size_t g_partials_elems, g_counters_n;

static unsigned g_last_grid; /* the grid of the last launch (probe 18's timeline) */

/* The host side of the launch contract (see the kernel's header comment). */
static void launch(const variant &v, const problem &p, int group_size, cudaStream_t s)
{
	const tile_cfg &c = v.c;
	const int tile_m = c.tile_m ? c.tile_m : c.bm; /* rows of C per tile */
	g_current = v.name.c_str();
	const CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_128B;
	const CUtensorMapL2promotion promo = (CUtensorMapL2promotion)c.l2promo; /* probe 48 */
	CUtensorMap ma = v.ta ? encode_map(p.A, v.bf16, p.M, p.K, p.lda, 64, 64, sw, promo)
			      : encode_map(p.A, v.bf16, p.K, p.M, p.lda, 64, tile_m / c.cluster_n, sw, promo);
	/* K-major B: a box per block of a cluster; probe 12's 320-wide tile without one takes two of 160 rows */
	const int b_boxes = c.bn > 256 && c.cluster == 1 ? 2 : c.cluster;
	CUtensorMap mb = v.tb ? encode_map(p.B, v.bf16, p.K, p.N, p.ldb, 64, c.bn / b_boxes, sw, promo)
			      : encode_map(p.B, v.bf16, p.N, p.K, p.ldb, 64, 64, sw, promo);
	/* probe 18's -DEPI_WARP=1: each warp stores its own 16 rows of a chunk */
	const bool epi_warp = strstr(v.extra.c_str(), "-DEPI_WARP=1") != nullptr;
	/* -DEPI_COLS=32: chunks of 64 x 32, 64-byte rows in the 64-byte swizzle */
	CUtensorMap mc = encode_map(p.C, v.bf16, p.N, p.M, p.ldc, c.epi_cols, epi_warp ? 16 : std::min(64, tile_m),
				    c.epi_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B);
	/* cluster tiles: CLUSTER_M * BLOCK_M rows; the grid is whole clusters, at most those that fit at once */
	int tiles = ((p.M + tile_m * c.cluster - 1) / (tile_m * c.cluster)) *
		    ((p.N + c.bn * c.cluster_n - 1) / (c.bn * c.cluster_n));
	const int csize = c.cluster * c.cluster_n * c.cluster_k;
	int units = tiles * p.split_k;
	unsigned grid = csize > 1 ? (unsigned)(csize * std::min(units, v.max_clusters))
				      : (unsigned)std::min(units, g_sms);
	if (p.split_k > 1 && ((size_t)p.split_k * tiles * c.cluster * c.bm * c.bn > g_partials_elems ||
			      (size_t)tiles * c.cluster * c.consumers > g_counters_n)) {
		fprintf(stderr, "split-K scratch too small for %dx%d split %d\n", p.M, p.N, p.split_k);
		exit(1);
	}
	int split = p.split_k;
	float *partials = g_partials;
	int *counters = g_counters;
	void *C = p.C;
	int M = p.M, N = p.N, K = p.K;
	long long ldc = p.ldc;
	float alpha = p.alpha, beta = p.beta;
	void *args[] = { &ma, &mb, &mc, &C, &M, &N, &K, &ldc, &alpha, &beta, &group_size,
			 &split, &partials, &counters };
	g_last_grid = grid;
	CU_CHECK(cuLaunchKernel(v.fn, grid, 1, 1, threads(c), 1, 1, (unsigned)smem_bytes(c), (CUstream)s, args,
				nullptr));
}

static void cublas_gemm(const problem &p, int bf16, int ta, int tb)
{
	cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
	/* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T */
	BLAS_CHECK(cublasGemmEx(g_blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, p.N, p.M, p.K,
				&p.alpha, p.B, t, (int)p.ldb, p.A, t, (int)p.lda, &p.beta, p.C, t, (int)p.ldc,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void fill(u16 *p, size_t n, unsigned seed, int bf16)
{
	fill_random<<<1024, 256>>>(p, n, seed, bf16);
	RT_CHECK(cudaGetLastError());
}

static void poison(u16 *p, size_t n)
{
	fill_value<<<1024, 256>>>(p, n, POISON);
	RT_CHECK(cudaGetLastError());
}

struct errs {
	double fro, max_rel;
	long long nonfinite;
};

static errs compare_with(const u16 *C, const float *R, const u16 *R16, int M, int N, i64 ldc, int bf16)
{
	RT_CHECK(cudaMemset(g_acc, 0, 4 * sizeof(double)));
	compare<<<1024, 256>>>(C, R, R16, M, N, ldc, bf16, g_acc);
	RT_CHECK(cudaGetLastError());
	double h[4];
	RT_CHECK(cudaMemcpy(h, g_acc, sizeof(h), cudaMemcpyDeviceToHost));
	errs e;
	double rms = sqrt(h[1] / ((double)M * N));
	e.fro = h[1] > 0 ? sqrt(h[0] / h[1]) : sqrt(h[0]);
	e.max_rel = rms > 0 ? h[2] / rms : h[2];
	e.nonfinite = (long long)h[3];
	return e;
}

static void tolerance(int bf16, double *fro, double *mx)
{
	*fro = bf16 ? 1e-2 : 2e-3; /* ktune's tolerances (src/ops/gemm.c) */
	*mx = bf16 ? 5e-2 : 1e-2;
}

static i64 round8(i64 x)
{
	return (x + 7) / 8 * 8;
}

/* ---------------------------------------------------------- correctness */

struct pools {
	u16 *A, *B, *C, *C0;
	float *R;
	size_t elems; /* of each 16-bit pool and of R */
};

/*
 * One check: fresh random A, B (and C for beta != 0), C poisoned (also its
 * padding and two rows past M), the kernel, the fp32 reference; passes if
 * the errors are within tolerance, nothing is NaN, and nothing outside
 * M x N changed.  pad: extra elements in each leading dimension.
 */
static bool check_one(const variant &v, const pools &pl, int M, int N, int K, int pad, float alpha, float beta,
		      unsigned seed, int group_size, int split_k, errs *out)
{
	problem p;
	p.M = M, p.N = N, p.K = K;
	p.lda = round8((v.ta ? M : K) + pad);
	p.ldb = round8((v.tb ? K : N) + pad);
	p.ldc = round8(N + pad);
	p.alpha = alpha, p.beta = beta;
	p.split_k = split_k;
	size_t na = (size_t)p.lda * (v.ta ? K : M), nb = (size_t)p.ldb * (v.tb ? N : K);
	size_t nc = (size_t)p.ldc * (M + 2);
	if (na > pl.elems || nb > pl.elems || nc > pl.elems || (size_t)M * N > pl.elems) {
		fprintf(stderr, "problem %dx%dx%d exceeds the pools\n", M, N, K);
		exit(1);
	}
	fill(pl.A, na, seed * 3 + 1, v.bf16);
	fill(pl.B, nb, seed * 3 + 2, v.bf16);
	poison(pl.C, nc);
	if (beta != 0.0f) {
		/* random values inside M x N, poison in the padding */
		fill(pl.C0, nc, seed * 3 + 3, v.bf16);
		RT_CHECK(cudaMemcpy2D(pl.C, p.ldc * 2, pl.C0, p.ldc * 2, (size_t)N * 2, M, cudaMemcpyDeviceToDevice));
	}
	p.A = pl.A, p.B = pl.B, p.C = pl.C;
	dim3 rb(16, 16), rg((N + 15) / 16, (M + 15) / 16);
	ref_gemm<<<rg, rb>>>(pl.A, pl.B, pl.C, pl.R, M, N, K, p.lda, p.ldb, p.ldc, v.ta, v.tb, v.bf16, alpha, beta);
	RT_CHECK(cudaGetLastError());
	launch(v, p, group_size, 0);
	CU_CHECK(cuCtxSynchronize());
	*out = compare_with(pl.C, pl.R, nullptr, M, N, p.ldc, v.bf16);
	RT_CHECK(cudaMemset(g_cnt, 0, sizeof(*g_cnt)));
	count_outside<<<1024, 256>>>(pl.C, M + 2, p.ldc, M, N, POISON, g_cnt);
	unsigned long long outside;
	RT_CHECK(cudaMemcpy(&outside, g_cnt, sizeof(outside), cudaMemcpyDeviceToHost));
	double tf, tm;
	tolerance(v.bf16, &tf, &tm);
	bool ok = out->nonfinite == 0 && out->fro <= tf && out->max_rel <= tm && outside == 0;
	if (!ok)
		printf("  FAIL %s M=%d N=%d K=%d lda=%lld ldb=%lld ldc=%lld alpha=%g beta=%g split %d: fro %.3g "
		       "max/rms %.3g nonfinite %lld written outside %llu\n",
		       v.name.c_str(), M, N, K, p.lda, p.ldb, p.ldc, alpha, beta, split_k, out->fro, out->max_rel,
		       out->nonfinite, outside);
	return ok;
}

static int cmd_correct(const char *dir)
{
	std::vector<variant> vs = correct_variants();
	pools pl;
	pl.elems = (size_t)4200 * 4200;
	RT_CHECK(cudaMalloc(&pl.A, pl.elems * 2));
	RT_CHECK(cudaMalloc(&pl.B, pl.elems * 2));
	RT_CHECK(cudaMalloc(&pl.C, pl.elems * 2));
	RT_CHECK(cudaMalloc(&pl.C0, pl.elems * 2));
	RT_CHECK(cudaMalloc(&pl.R, pl.elems * 4));

	static const int dims[] = { 1, 7, 33, 127, 1000 };
	/* large and odd: K tails, many k-tiles, many tiles per block, group order */
	static const int large[][3] = { { 2048, 2048, 2048 }, { 1999, 3001, 4097 }, { 4096, 520, 72 },
					{ 33, 4100, 1000 }, { 3000, 129, 65 } };
	int total = 0, passed = 0;
	unsigned seed = 12345;
	for (auto &v : vs) {
		load_variant(v, dir);
		int vt = 0, vp = 0;
		double worst = 0;
		int i = 0;
		for (int M : dims)
			for (int N : dims)
				for (int K : dims) {
					/* every other case has beta != 0 and padded leading dimensions */
					bool b = (i++ % 2) == 1;
					errs e;
					bool ok = check_one(v, pl, M, N, K, b ? 8 : 0, b ? 0.75f : 1.0f, b ? -0.5f : 0.0f,
							    seed++, 1 + i % 9, 1 + i % 4, &e);
					vt++, vp += ok;
					worst = std::max(worst, e.fro);
				}
		for (auto &s : large) {
			for (int b = 0; b < 2; b++) {
				errs e;
				bool ok = check_one(v, pl, s[0], s[1], s[2], b ? 16 : 0, b ? 1.5f : 1.0f, b ? 0.25f : 0.0f,
						    seed++, b ? 3 : 8, b ? 3 : 1, &e);
				vt++, vp += ok;
				worst = std::max(worst, e.fro);
			}
		}
		printf("%-38s %3d/%3d passed, worst rel. Frobenius error %.2e\n", v.name.c_str(), vp, vt, worst);
		fflush(stdout);
		total += vt, passed += vp;
		CU_CHECK(cuModuleUnload(v.mod));
	}
	printf("correctness: %d/%d passed (%d variants)\n", passed, total, (int)vs.size());
	return passed == total ? 0 : 1;
}

/* ----------------------------------------------------------------- timing */

/*
 * Probe 20: run right after each flush, outside the timed window, the same
 * kernel once more: PROBE_WARM=1 on a second set of operands, so that the
 * timed launch finds its code in the caches and its data still cold;
 * PROBE_WARM=2 on the same operands, so that it finds its data in L2 too.
 */
static std::function<void()> g_warm;

/* ----------------------------------------------------------------- energy */

/*
 * Probe 29: a large GEMM on the H100 runs at the board's 700 W cap, so its
 * speed there is its energy.  PROBE_ENERGY=s runs a variant, and cuBLAS
 * right after it, back to back (no flushes, as in production) for s seconds
 * after half a second of warm-up, and prints the time and the board energy
 * per GEMM (NVML's energy counter), the mean power, the median of five
 * samples of the SM clock and the clock event reasons seen in them (NVML's
 * bits: 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x80 power brake),
 * and the clock that a kernel run right after the last launch counts itself
 * ("after").  NVML is opened at run time: no header or stub is needed to
 * build.
 */
struct nvml_api {
	void *dev = nullptr;
	int (*energy)(void *, unsigned long long *) = nullptr; /* mJ since the driver loaded */
	int (*clock)(void *, int, unsigned *) = nullptr;       /* MHz; clock type 1 is the SM clock */
	int (*reasons)(void *, unsigned long long *) = nullptr; /* clock event ("throttle") reasons now */
};

static nvml_api *nvml_open(void)
{
	static nvml_api n;
	static bool tried;
	if (!tried) {
		tried = true;
		void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
		auto init = h ? (int (*)(void))dlsym(h, "nvmlInit_v2") : nullptr;
		auto get = h ? (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : nullptr;
		n.energy = h ? (int (*)(void *, unsigned long long *))dlsym(h, "nvmlDeviceGetTotalEnergyConsumption")
			     : nullptr;
		n.clock = h ? (int (*)(void *, int, unsigned *))dlsym(h, "nvmlDeviceGetClockInfo") : nullptr;
		n.reasons = h ? (int (*)(void *, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons")
			      : nullptr;
		if (!init || !get || !n.energy || !n.clock || init() != 0 || get(0, &n.dev) != 0)
			n.dev = nullptr; /* index 0: the probe machines have one GPU */
	}
	return n.dev ? &n : nullptr;
}

/*
 * The SM clock the last launch left: one warp counts 200,000 cycles on
 * clock64 against the globaltimer's nanoseconds, right after the launches
 * (the power capping's loop is slower than this kernel's 0.1 ms).
 */
__global__ void clock_after(unsigned long long *out)
{
	unsigned long long t0, t1;
	const long long c0 = clock64();
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0)::"memory");
	while (clock64() - c0 < 200000)
		;
	const long long c1 = clock64();
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)::"memory");
	if (threadIdx.x == 0) {
		out[0] = (unsigned long long)(c1 - c0);
		out[1] = t1 - t0;
	}
}

/* PROBE_SPACER=1: an empty kernel after each launch of PROBE_ENERGY's runs (it ends any overlap of two GEMMs) */
__global__ void spacer(void) {}
static bool g_spacer;

/* One side's back-to-back run (energy_of). */
struct energy_run {
	double ms, mj, watts;    /* per GEMM, per GEMM, mean */
	unsigned mhz, after_mhz; /* NVML's median sample; clock_after's count */
	unsigned long long reasons;
};

/*
 * fn back to back for `seconds` (per_ms: its time per launch, to size the
 * runs), then clock_after; false without NVML.
 */
template <typename F>
static bool energy_of(F fn, double per_ms, double seconds, energy_run *out)
{
	nvml_api *n = nvml_open();
	if (!n || per_ms <= 0)
		return false;
	const int warm = (int)(500.0 / per_ms) + 1, runs = (int)(seconds * 1000.0 / per_ms) + 1;
	for (int i = 0; i < warm; i++)
		fn();
	RT_CHECK(cudaDeviceSynchronize());
	cudaEvent_t e0, e1;
	RT_CHECK(cudaEventCreate(&e0));
	RT_CHECK(cudaEventCreate(&e1));
	unsigned long long j0, j1;
	n->energy(n->dev, &j0);
	RT_CHECK(cudaEventRecord(e0, 0));
	for (int i = 0; i < runs; i++) {
		fn();
		if (g_spacer)
			spacer<<<1, 32>>>();
	}
	RT_CHECK(cudaEventRecord(e1, 0));
	static unsigned long long *clk;
	if (!clk)
		RT_CHECK(cudaMalloc(&clk, 2 * sizeof(*clk)));
	clock_after<<<1, 32>>>(clk);
	/* the launches may all be queued already: sample the clock while they run, five times */
	std::vector<unsigned> clocks;
	out->reasons = 0;
	for (int i = 0; i < 5; i++) {
		usleep((useconds_t)(seconds * 0.15e6));
		unsigned c = 0;
		unsigned long long r = 0;
		n->clock(n->dev, 1, &c);
		clocks.push_back(c);
		if (n->reasons && n->reasons(n->dev, &r) == 0)
			out->reasons |= r;
	}
	std::sort(clocks.begin(), clocks.end());
	out->mhz = clocks[2];
	RT_CHECK(cudaEventSynchronize(e1));
	n->energy(n->dev, &j1);
	unsigned long long h[2];
	RT_CHECK(cudaMemcpy(h, clk, sizeof(h), cudaMemcpyDeviceToHost));
	out->after_mhz = h[1] ? (unsigned)(h[0] * 1000 / h[1]) : 0;
	float el;
	RT_CHECK(cudaEventElapsedTime(&el, e0, e1));
	RT_CHECK(cudaEventDestroy(e0));
	RT_CHECK(cudaEventDestroy(e1));
	out->ms = el / runs;
	out->mj = (double)(j1 - j0) / runs;
	out->watts = (double)(j1 - j0) / el;
	return true;
}

/* Median time (ms) of runs of fn, each after an L2 flush, after warm-up. */
template <typename F>
static double time_ms(F fn, int warmup, int runs)
{
	cudaEvent_t e0, e1;
	RT_CHECK(cudaEventCreate(&e0));
	RT_CHECK(cudaEventCreate(&e1));
	for (int i = 0; i < warmup; i++)
		fn();
	std::vector<float> t;
	for (int i = 0; i < runs; i++) {
		RT_CHECK(cudaMemsetAsync(g_flush, i & 0xff, 2 * g_l2, 0));
		if (g_warm)
			g_warm();
		RT_CHECK(cudaEventRecord(e0, 0));
		fn();
		RT_CHECK(cudaEventRecord(e1, 0));
		RT_CHECK(cudaEventSynchronize(e1));
		float ms;
		RT_CHECK(cudaEventElapsedTime(&ms, e0, e1));
		t.push_back(ms);
	}
	RT_CHECK(cudaEventDestroy(e0));
	RT_CHECK(cudaEventDestroy(e1));
	std::sort(t.begin(), t.end());
	return t[t.size() / 2];
}

/*
 * One variant on problem p (C dense, ldc = N): its output, C poisoned first,
 * against cuBLAS's Cref (*ok: within ktune's tolerances, *err: the errors),
 * then its median time (ms) after `warmup` runs.
 */
static double check_and_time(const variant &v, const problem &p, int group_size, const u16 *Cref, int warmup,
			     int runs, bool *ok, errs *err)
{
	double tf, tm;
	poison(p.C, (size_t)p.M * p.N);
	launch(v, p, group_size, 0);
	CU_CHECK(cuCtxSynchronize());
	*err = compare_with(p.C, nullptr, Cref, p.M, p.N, p.N, v.bf16);
	tolerance(v.bf16, &tf, &tm);
	*ok = err->nonfinite == 0 && err->fro <= tf && err->max_rel <= tm;
	return time_ms([&] { launch(v, p, group_size, 0); }, warmup, runs);
}

static int cmd_time(const char *dir)
{
	std::vector<variant> vs = time_variants();
	for (auto &v : vs)
		load_variant(v, dir);

	struct shape {
		int m, n, k;
	};
	std::vector<shape> shapes = { { 2048, 2048, 2048 }, { 4096, 4096, 4096 }, { 8192, 8192, 8192 } };
	for (int m : { 1024, 4096 })
		for (auto nk : { std::pair<int, int>(6144, 4096), { 4096, 4096 }, { 28672, 4096 }, { 4096, 14336 } })
			shapes.push_back({ m, nk.first, nk.second });

	size_t maxe = (size_t)8192 * 28672; /* the largest operand */
	u16 *A, *B, *C, *Cref;
	RT_CHECK(cudaMalloc(&A, maxe * 2));
	RT_CHECK(cudaMalloc(&B, maxe * 2));
	RT_CHECK(cudaMalloc(&C, maxe * 2));
	RT_CHECK(cudaMalloc(&Cref, maxe * 2));

	const int group_sizes[] = { 8, 16 };
	for (auto &v : vs)
		if (v.c.cluster > 1)
			printf("%s: %d clusters of %d at once\n", v.name.c_str(), v.max_clusters, v.c.cluster);
	printf("\n%-6s %-2s %5s %5s %5s | %-30s %4s %8s %7s | %8s %7s | %6s\n", "dtype", "ly", "M", "N", "K",
	       "best config", "grp", "ms", "TFLOP/s", "cuBLASms", "TFLOP/s", "ratio");
	struct row {
		std::string line;
	};
	std::vector<std::string> detail;
	unsigned seed = 777;
	for (int bf16 = 1; bf16 >= 0; bf16--)
		for (int tb = 0; tb < 2; tb++)
			for (auto &s : shapes) {
				bool square = s.m == s.n && s.n == s.k;
				if (square && tb == 1)
					continue; /* squares: nn only */
				problem p;
				p.M = s.m, p.N = s.n, p.K = s.k;
				p.lda = s.k, p.ldb = tb ? s.k : s.n, p.ldc = s.n;
				p.alpha = 1.0f, p.beta = 0.0f;
				p.A = A, p.B = B, p.C = C;
				fill(A, (size_t)s.m * s.k, seed++, bf16);
				fill(B, (size_t)s.k * s.n, seed++, bf16);
				double flops = 2.0 * s.m * s.n * s.k;

				problem pr = p;
				pr.C = Cref;
				poison(Cref, (size_t)s.m * s.n);
				cublas_gemm(pr, bf16, 0, tb);
				/* cuBLAS is timed before and after our variants; the faster median counts */
				double t_blas = time_ms([&] { cublas_gemm(pr, bf16, 0, tb); }, 3, 25);

				double best = 1e30;
				std::vector<std::pair<std::string, double>> detail_shape; /* line, ms */
				std::string best_name;
				int best_g = 0;
				for (auto &v : vs) {
					if (v.bf16 != bf16 || v.tb != tb)
						continue;
					for (int g : group_sizes) {
						errs e;
						bool ok;
						double t = check_and_time(v, p, g, Cref, 3, 25, &ok, &e);
						char b[256];
						snprintf(b, sizeof(b), "  %-34s g%-2d %5d %5d %5d  %8.3f ms %6.1f TFLOP/s%s",
							 v.name.c_str(), g, s.m, s.n, s.k, t, flops / t / 1e9,
							 ok ? "" : "  WRONG vs cuBLAS");
						detail_shape.push_back({ b, t });
						if (!ok)
							printf("%s (fro %.3g max %.3g nonfinite %lld)\n", b, e.fro, e.max_rel, e.nonfinite);
						if (ok && t < best) {
							best = t;
							best_name = v.name;
							best_g = g;
						}
					}
				}
				t_blas = std::min(t_blas, time_ms([&] { cublas_gemm(pr, bf16, 0, tb); }, 3, 25));
				for (auto &d : detail_shape) {
					char b[320];
					snprintf(b, sizeof(b), "%s  x%.3f of cuBLAS", d.first.c_str(), t_blas / d.second);
					detail.push_back(b);
				}
				printf("%-6s %-2s %5d %5d %5d | %-30.30s %4d %8.3f %7.1f | %8.3f %7.1f | %6.3f\n",
				       bf16 ? "bf16" : "f16", tb ? "nt" : "nn", s.m, s.n, s.k, best_name.c_str(), best_g, best,
				       flops / best / 1e9, t_blas, flops / t_blas / 1e9, t_blas / best);
				fflush(stdout);
			}
	printf("\nevery variant (median of 25 runs after 3 warm-ups, L2 flushed before each; cuBLAS: the\n"
	       "faster of two such medians, one taken before and one after our variants):\n");
	for (auto &d : detail)
		printf("%s\n", d.c_str());
	return 0;
}

/* ------------------------------------------------------------------ probe */

/*
 * Probe 18's timeline: a variant compiled with -DPROBE_TIMELINE=1 keeps, per
 * block, clock64 marks in registers and writes them at the end: the
 * producer thread's 0 entry, 1 tensor maps prefetched, 2 barriers
 * initialised, 3 block barrier passed, 4 registers released, 5 first load
 * issued, 6 last load issued; consumer 0's 7 first slot full, 8 first
 * tile's wgmma drained, 9 its stores issued, 10 done; %globaltimer at 11
 * entry and 12 done; the producer's first k-tile in detail: 16 tile
 * index computed, 17 empty slot waited for, 18 bytes announced (5: its
 * loads issued), and the loads of k-tiles 1, 2, 3, 5 and 7 issued (19-23).  One launch after an L2 flush; prints each mark's
 * median and max over the blocks in SM cycles after the block's entry, and
 * the spread of entries and exits in ns.
 */
static void print_timeline(const variant &v, const problem &p, int group_size)
{
	CUdeviceptr buf;
	size_t bytes;
	CU_CHECK(cuModuleGetGlobal(&buf, &bytes, v.mod, "tl_buf"));
	CU_CHECK(cuMemsetD8(buf, 0, bytes));
	RT_CHECK(cudaMemsetAsync(g_flush, 7, 2 * g_l2, 0));
	if (g_warm)
		g_warm(); /* its marks are overwritten by the launch below */
	launch(v, p, group_size, 0);
	CU_CHECK(cuCtxSynchronize());
	std::vector<unsigned long long> h(bytes / 8);
	CU_CHECK(cuMemcpyDtoH(h.data(), buf, bytes));
	int blocks = (int)std::min<size_t>(g_last_grid, h.size() / 32);
	if (blocks == 0)
		return;
	unsigned long long g0 = ~0ull;
	for (int b = 0; b < blocks; b++)
		g0 = std::min(g0, h[b * 32 + 11]);
	printf("  timeline %s grp %d, %d blocks, cycles after entry, median/max:\n   ", v.name.c_str(), group_size,
	       blocks);
	for (int i : { 1, 2, 3, 4, 16, 17, 18, 5, 19, 20, 21, 22, 23, 6, 7, 8, 9, 10 }) {
		std::vector<long long> d;
		for (int b = 0; b < blocks; b++)
			if (h[b * 32 + i])
				d.push_back((long long)(int)(unsigned)(h[b * 32 + i] - h[b * 32]));
		std::sort(d.begin(), d.end());
		if (!d.empty())
			printf(" %d:%lld/%lld", i, d[d.size() / 2], d.back());
	}
	std::vector<long long> in, out;
	for (int b = 0; b < blocks; b++) {
		in.push_back((long long)(int)(unsigned)(h[b * 32 + 11] - g0));
		if (h[b * 32 + 12])
			out.push_back((long long)(int)(unsigned)(h[b * 32 + 12] - g0));
	}
	std::sort(in.begin(), in.end());
	std::sort(out.begin(), out.end());
	printf("\n    entry ns median/max %lld/%lld", in[in.size() / 2], in.back());
	if (!out.empty())
		printf(", done ns min/median/max %lld/%lld/%lld", out.front(), out[out.size() / 2], out.back());
	printf("\n");
}

/* The integers in environment variable `name` (e.g. "1 4 8"), or in `fallback` when it is unset. */
static std::vector<int> env_ints(const char *name, const char *fallback)
{
	std::vector<int> v;
	const char *s = getenv(name);
	for (const char *q = s ? s : fallback; *q;) {
		char *end;
		long x = strtol(q, &end, 10);
		if (end == q)
			break;
		v.push_back((int)x);
		q = end;
	}
	return v;
}

static int cmd_probe(const char *dir, int M, int N, int K)
{
	std::vector<variant> vs = read_probe_list((std::string(dir) + "/probe.list").c_str());
	for (auto &v : vs)
		load_variant(v, dir);
	const char *env = getenv("PROBE_RUNS");
	int runs = env ? atoi(env) : 25, warmup = env ? 1 : 3;
	std::vector<int> groups = env_ints("PROBE_GROUPS", "8 16"); /* group sizes to time */
	std::vector<int> splits = env_ints("PROBE_SPLITS", "1");    /* split-K values to time */
	const char *energy_env = getenv("PROBE_ENERGY");
	const double energy_s = energy_env ? atof(energy_env) : 0; /* probe 29: seconds back to back */
	g_spacer = getenv("PROBE_SPACER") && atoi(getenv("PROBE_SPACER")) == 1;
	size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
	u16 *A, *B, *C, *Cref;
	RT_CHECK(cudaMalloc(&A, na * 2));
	RT_CHECK(cudaMalloc(&B, nb * 2));
	RT_CHECK(cudaMalloc(&C, nc * 2));
	RT_CHECK(cudaMalloc(&Cref, nc * 2));
	const char *warm_env = getenv("PROBE_WARM");
	const int warm = warm_env ? atoi(warm_env) : 0; /* 1: code warm; 2: code and data */
	u16 *A2 = nullptr, *B2 = nullptr, *C2 = nullptr; /* the warm-up launch's operands */
	if (warm == 2) {
		printf("PROBE_WARM=2: each timed launch follows one of the same kernel on the same operands\n");
	} else if (warm) {
		RT_CHECK(cudaMalloc(&A2, na * 2));
		RT_CHECK(cudaMalloc(&B2, nb * 2));
		RT_CHECK(cudaMalloc(&C2, nc * 2));
		printf("PROBE_WARM: each timed launch follows one of the same kernel on other operands\n");
	}
	double flops = 2.0 * M * N * K;
	printf("%-52s %5s %5s %5s %4s %9s %8s %9s %7s\n", "variant", "M", "N", "K", "grp", "ms", "TFLOP/s", "cuBLASms",
	       "ratio");
	printf("(cuBLAS timed right after each variant; its own rows: the best of a run before and one after all)\n");
	for (int bf16 = 1; bf16 >= 0; bf16--)
		for (int tb = 0; tb < 2; tb++) {
			bool any = false;
			for (auto &v : vs)
				any |= v.bf16 == bf16 && v.tb == tb;
			if (!any)
				continue;
			problem p;
			p.M = M, p.N = N, p.K = K;
			p.lda = K, p.ldb = tb ? K : N, p.ldc = N;
			p.alpha = 1.0f, p.beta = 0.0f;
			p.A = A, p.B = B, p.C = C;
			fill(A, na, 11, bf16);
			fill(B, nb, 12, bf16);
			problem pr = p;
			pr.C = Cref;
			poison(Cref, nc);
			cublas_gemm(pr, bf16, 0, tb);
			problem pw = p; /* the same shape on the warm-up operands */
			if (warm == 1) {
				pw.A = A2, pw.B = B2, pw.C = C2;
				fill(A2, na, 13, bf16);
				fill(B2, nb, 14, bf16);
			}
			auto warm_blas = [&] { cublas_gemm(warm == 2 ? pr : pw, bf16, 0, tb); };
			g_warm = warm ? std::function<void()>(warm_blas) : nullptr;
			double t_blas = time_ms([&] { cublas_gemm(pr, bf16, 0, tb); }, warmup, runs);
			for (auto &v : vs) {
				if (v.bf16 != bf16 || v.tb != tb)
					continue;
				for (int split : splits)
				for (int g : groups) {
					p.split_k = split;
					errs e;
					bool ok;
					pw.split_k = split;
					auto warm_variant = [&] { launch(v, pw, g, 0); };
					g_warm = warm ? std::function<void()>(warm_variant) : nullptr;
					double t = check_and_time(v, p, g, Cref, warmup, runs, &ok, &e);
					g_warm = warm ? std::function<void()>(warm_blas) : nullptr;
					/* cuBLAS right after, so that both see the same clocks (a heating GPU slows down) */
					double tb_now = time_ms([&] { cublas_gemm(pr, bf16, 0, tb); }, warmup, runs);
					char b[256];
					char name[96];
					snprintf(name, sizeof(name), "%s%s%.0d", v.name.c_str(), split > 1 ? "_split" : "",
						 split > 1 ? split : 0);
					snprintf(b, sizeof(b), "%-52s %5d %5d %5d %4d %9.4f %8.1f", name, M, N, K, g, t,
						 flops / t / 1e9);
					char r[64];
					snprintf(r, sizeof(r), " %9.4f %7.3f", tb_now, tb_now / t);
					/* printed at once: a variant that hangs leaves the rows before it */
					printf("%s%s%s\n", b, r, ok ? "" : "  (wrong)");
					energy_run ours, bl;
					if (energy_s > 0 && energy_of([&] { launch(v, p, g, 0); }, t, energy_s, &ours) &&
					    energy_of([&] { cublas_gemm(pr, bf16, 0, tb); }, tb_now, energy_s, &bl))
						printf("    energy: ours %.4f ms %.1f mJ %.0f W %u MHz (%u after) reasons 0x%llx | "
						       "cuBLAS %.4f ms %.1f mJ %.0f W %u MHz (%u after) reasons 0x%llx | "
						       "time ratio %.3f, energy ratio %.3f\n",
						       ours.ms, ours.mj, ours.watts, ours.mhz, ours.after_mhz, ours.reasons, bl.ms,
						       bl.mj, bl.watts, bl.mhz, bl.after_mhz, bl.reasons, bl.ms / ours.ms,
						       bl.mj / ours.mj);
					if (strstr(v.name.c_str(), "TIMELINE")) {
						g_warm = warm ? std::function<void()>(warm_variant) : nullptr;
						print_timeline(v, p, g);
					}
					fflush(stdout);
				}
			}
			t_blas = std::min(t_blas, time_ms([&] { cublas_gemm(pr, bf16, 0, tb); }, warmup, runs));
			printf("%-52s %5d %5d %5d %4s %9.4f %8.1f\n", bf16 ? (tb ? "cublas_bf16_nt" : "cublas_bf16_nn")
								      : (tb ? "cublas_f16_nt" : "cublas_f16_nn"),
			       M, N, K, "-", t_blas, flops / t_blas / 1e9);
			fflush(stdout);
			g_warm = nullptr;
		}
	return 0;
}

/* ------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: harness compile OUTDIR|survey [SRC] | correct DIR | time DIR |\n"
				"       compile-probe OUTDIR LIST [SRC] | probe DIR M N K\n");
		return 2;
	}
	if (!strcmp(argv[1], "compile"))
		return cmd_compile(argv[2], argc > 3 ? argv[3] : "kernels/templates/gemm_wgmma.cu", nullptr);
	if (!strcmp(argv[1], "compile-probe") && argc >= 4)
		return cmd_compile(argv[2], argc > 4 ? argv[4] : "kernels/templates/gemm_wgmma.cu", argv[3]);

	CU_CHECK(cuInit(0));
	RT_CHECK(cudaSetDevice(0));
	RT_CHECK(cudaFree(0)); /* the primary context, shared with the driver API */
	cudaDeviceProp prop;
	RT_CHECK(cudaGetDeviceProperties(&prop, 0));
	g_sms = prop.multiProcessorCount;
	g_l2 = (size_t)prop.l2CacheSize;
	int drv;
	cuDriverGetVersion(&drv);
	printf("device: %s, %d SMs, L2 %zu MB, smem/block optin %zu, driver %d\n", prop.name, g_sms, g_l2 >> 20,
	       (size_t)prop.sharedMemPerBlockOptin, drv);
	RT_CHECK(cudaMalloc(&g_flush, 2 * g_l2));
	RT_CHECK(cudaMalloc(&g_acc, 4 * sizeof(double)));
	RT_CHECK(cudaMalloc(&g_cnt, sizeof(*g_cnt)));
	g_partials_elems = (size_t)4 * 4200 * 4200;
	g_counters_n = 1 << 20;
	RT_CHECK(cudaMalloc(&g_partials, g_partials_elems * sizeof(float)));
	RT_CHECK(cudaMalloc(&g_counters, g_counters_n * sizeof(int)));
	RT_CHECK(cudaMemset(g_counters, 0, g_counters_n * sizeof(int)));
	BLAS_CHECK(cublasCreate(&g_blas));
	if (!strcmp(argv[1], "correct"))
		return cmd_correct(argv[2]);
	if (!strcmp(argv[1], "time"))
		return cmd_time(argv[2]);
	if (!strcmp(argv[1], "probe") && argc == 6)
		return cmd_probe(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "unknown mode '%s'\n", argv[1]);
	return 2;
}
