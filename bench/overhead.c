/*
 * overhead.c - host cost of a cached ktune_gemm call against a bare
 * cuLaunchKernel of the same kernel with the same arguments.
 *
 * Both loops enqueue batches of tiny GEMMs (64x64x64) on one stream and time
 * only the enqueueing on the host clock; the batch is then drained.  The
 * median over batches, per call, is reported.
 *
 *   bench/overhead [--db PATH]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"

#define BATCH 200
#define BATCHES 25

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *db = argc > 2 && !strcmp(argv[1], "--db") ? argv[2] : NULL;
	ktune_ctx *ctx;
	char err[4096];
	struct ktune_err e;
	CUdeviceptr a, b, c;
	CUstream stream;
	const int64_t n = 64;
	double t_ktune[BATCHES], t_raw[BATCHES];

	if (ktune_open(db, 0, &ctx, err, sizeof(err))) {
		fprintf(stderr, "overhead: %s\n", err);
		return 2;
	}
	int pushed;
	if (ktune__ctx_enter(ctx, &pushed, &e))
		goto fail;
	if (ktune_cu.cuMemAlloc_v2(&a, n * n * 2) || ktune_cu.cuMemAlloc_v2(&b, n * n * 2) ||
	    ktune_cu.cuMemAlloc_v2(&c, n * n * 2) || ktune_cu.cuStreamCreate(&stream, 0))
		goto fail_cu;
	ktune_cu.cuMemsetD16_v2(a, 0x3c00, n * n); /* 1.0: the values do not matter here */
	ktune_cu.cuMemsetD16_v2(b, 0x3c00, n * n);

	/* warm: resolve and load the kernel */
	if (ktune_gemm(ctx, 'n', 't', n, n, n, 1, (void *)a, n, (void *)b, n, 0, (void *)c, n,
		       KTUNE_F16, stream)) {
		fprintf(stderr, "overhead: %s\n", ktune_errmsg(ctx));
		return 1;
	}
	ktune_cu.cuStreamSynchronize(stream);

	/* the same kernel and arguments for the bare launch */
	struct ktune_key key = { "gemm", KTUNE_F16, "nt", n, n, n, 1 };
	struct ktune_config cfg;
	const char *source;
	struct ktune_kernel *kernel;
	pthread_mutex_lock(&ctx->lock);
	ktune__dispatch_choose(ctx, &key, &cfg, &source);
	int rc = ktune__kernel_get(ctx, &key, &cfg, NULL, &kernel, &e);
	pthread_mutex_unlock(&ctx->lock);
	if (rc || cfg.split_k != 1)
		goto fail;
	unsigned grid[3];
	int m32 = (int)n, n32 = (int)n, k32 = (int)n, group = cfg.group_size, split = 1;
	long long ld = n;
	float alpha = 1, beta = 0;
	CUdeviceptr none = 0;
	void *mma_args[] = { &a, &b, &c, &m32, &n32, &k32, &ld, &ld, &ld, &alpha, &beta,
			     &group, &split, &none, &none };
	/*
	 * The wgmma family takes tensor maps: those ktune_gemm encoded for these
	 * operands at the warm-up call, which the kernel keeps, and the
	 * persistent grid its launch computes (gemm_api.c's launch_wgmma).
	 */
	CUtensorMap map_a, map_b, map_c;
	void *wgmma_args[] = { &map_a, &map_b, &map_c, &c, &m32, &n32, &k32, &ld, &alpha, &beta,
			       &group, &split, &none, &none };
	void **args = mma_args;
	if (cfg.family == KTUNE_GEMM_WGMMA) {
		if (!kernel->maps) {
			fprintf(stderr, "overhead: no tensor maps kept from the warm-up call\n");
			return 1;
		}
		map_a = kernel->maps->map_a;
		map_b = kernel->maps->map_b;
		map_c = kernel->maps->map_c;
		ktune__gemm_wgmma_grid(&key, &cfg, cfg.cluster_m > 1 ? kernel->max_clusters : ctx->id.sm_count, grid);
		args = wgmma_args;
	} else {
		ktune__gemm_grid(&key, &cfg, grid);
	}

	for (int round = 0; round < BATCHES; round++) {
		double t0 = ktune__now();
		for (int i = 0; i < BATCH; i++)
			ktune_gemm(ctx, 'n', 't', n, n, n, 1, (void *)a, n, (void *)b, n, 0, (void *)c,
				   n, KTUNE_F16, stream);
		t_ktune[round] = (ktune__now() - t0) / BATCH * 1e6;
		ktune_cu.cuStreamSynchronize(stream);

		t0 = ktune__now();
		for (int i = 0; i < BATCH; i++)
			ktune_cu.cuLaunchKernel(kernel->fn, grid[0], grid[1], grid[2],
						(unsigned)ktune__gemm_threads(&cfg), 1, 1,
						(unsigned)kernel->smem, stream, args, NULL);
		t_raw[round] = (ktune__now() - t0) / BATCH * 1e6;
		ktune_cu.cuStreamSynchronize(stream);
	}
	qsort(t_ktune, BATCHES, sizeof(double), cmp);
	qsort(t_raw, BATCHES, sizeof(double), cmp);
	printf("host time per call, median of %d batches of %d (64x64x64 f16 nt, served by '%s', %s):\n",
	       BATCHES, BATCH, source, ktune__gemm_family_name(cfg.family));
	printf("  cuLaunchKernel:  %.2f us\n", t_raw[BATCHES / 2]);
	printf("  ktune_gemm:      %.2f us\n", t_ktune[BATCHES / 2]);
	printf("  overhead:        %.2f us\n", t_ktune[BATCHES / 2] - t_raw[BATCHES / 2]);
	ktune_close(ctx);
	return 0;
fail_cu:
	fprintf(stderr, "overhead: CUDA setup failed\n");
	return 1;
fail:
	fprintf(stderr, "overhead: %s\n", e.msg);
	return 1;
}
