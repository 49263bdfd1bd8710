/*
 * gemm_example.c - call a tuned GEMM from a plain CUDA program.
 *
 * Computes C = A * B^T for f16 matrices in the nn.Linear layout ("nt": A is
 * [M,K], the weight B is [N,K]), with buffers from cudaMalloc, and checks a
 * sample of C against a float64 CPU result.
 *
 *   cc gemm_example.c $(pkg-config --cflags --libs ktune) -lcudart -o gemm_example
 *   ./gemm_example [M N K]
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ktune.h>

/* float <-> IEEE half, enough for an example: round to nearest, no subnormal inputs. */
static unsigned short to_half(float f)
{
	union { float f; unsigned u; } v = { f };
	unsigned sign = (v.u >> 16) & 0x8000, exp = (v.u >> 23) & 0xff, man = v.u & 0x7fffff;
	if (exp < 103)
		return (unsigned short)sign;
	if (exp < 113) /* half subnormal */
		return (unsigned short)(sign | ((man | 0x800000) >> (126 - exp)));
	unsigned h = sign | ((exp - 112) << 10) | (man >> 13);
	return (unsigned short)(h + ((man >> 12) & 1));
}

static double from_half(unsigned short h)
{
	int exp = (h >> 10) & 31, man = h & 1023;
	double v = exp ? ldexp(man + 1024, exp - 25) : ldexp(man, -24);
	return h & 0x8000 ? -v : v;
}

#define CUDA_CHECK(call)                                                          \
	do {                                                                      \
		cudaError_t err_ = (call);                                        \
		if (err_ != cudaSuccess) {                                        \
			fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_)); \
			return 1;                                                 \
		}                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	long m = argc > 3 ? atol(argv[1]) : 16, n = argc > 3 ? atol(argv[2]) : 4096,
	     k = argc > 3 ? atol(argv[3]) : 4096;
	size_t na = (size_t)m * k, nb = (size_t)n * k, nc = (size_t)m * n;
	unsigned short *a = malloc(na * 2), *b = malloc(nb * 2), *c = malloc(nc * 2);
	void *da, *db, *dc;
	char err[1024];
	ktune_ctx *ctx;

	if (ktune_version_number() != KTUNE_VERSION_NUMBER)
		fprintf(stderr, "warning: header %s, library %s\n", KTUNE_VERSION_STRING, ktune_version());
	srand(1);
	for (size_t i = 0; i < na; i++)
		a[i] = to_half((float)rand() / RAND_MAX * 2 - 1);
	for (size_t i = 0; i < nb; i++)
		b[i] = to_half((float)rand() / RAND_MAX * 2 - 1);

	CUDA_CHECK(cudaMalloc(&da, na * 2));
	CUDA_CHECK(cudaMalloc(&db, nb * 2));
	CUDA_CHECK(cudaMalloc(&dc, nc * 2));
	CUDA_CHECK(cudaMemcpy(da, a, na * 2, cudaMemcpyHostToDevice));
	CUDA_CHECK(cudaMemcpy(db, b, nb * 2, cudaMemcpyHostToDevice));

	/* NULL: the default database ($KTUNE_DB or ~/.cache/ktune/ktune.db) */
	ktune_status s = ktune_open(NULL, 0, &ctx, err, sizeof(err));
	if (s != KTUNE_OK) {
		fprintf(stderr, "ktune_open: %s: %s\n", ktune_strerror(s), err);
		return 1;
	}
	s = ktune_gemm(ctx, 'n', 't', m, n, k, 1.0f, da, k, db, k, 0.0f, dc, n, KTUNE_F16, NULL);
	if (s != KTUNE_OK) {
		fprintf(stderr, "ktune_gemm: %s: %s\n", ktune_strerror(s), ktune_errmsg(ctx));
		return 1;
	}
	CUDA_CHECK(cudaMemcpy(c, dc, nc * 2, cudaMemcpyDeviceToHost));
	printf("%ldx%ldx%ld f16 nt served by the %s configuration\n", m, n, k,
	       ktune_last_dispatch(ctx));

	/* check 1000 sampled elements against float64 */
	double worst = 0;
	for (int s_ = 0; s_ < 1000; s_++) {
		size_t i = (size_t)rand() % (size_t)m, j = (size_t)rand() % (size_t)n;
		double want = 0, mag = 0;
		for (long l = 0; l < k; l++) {
			double x = from_half(a[i * k + l]) * from_half(b[j * k + l]);
			want += x;
			mag += fabs(x);
		}
		double rel = fabs(from_half(c[i * n + j]) - want) / (mag + 1e-3);
		worst = rel > worst ? rel : worst;
	}
	printf("largest error relative to the sum of |products|: %.2e\n", worst);
	ktune_close(ctx);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	free(a);
	free(b);
	free(c);
	if (!(worst < 1e-3)) {
		printf("FAILED\n");
		return 1;
	}
	printf("ok\n");
	return 0;
}
