/*
 * copy.c - the GPU's memory ceiling: device-to-device copies of 1 GiB,
 * timed with CUDA events, counted as bytes read plus bytes written (as
 * ../shared/anchors counts them: 3005 GB/s on the H100).  bench/report.py
 * divides a key's bytes by this figure for its floor.
 *
 *   bench/copy [--device N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"

#define BYTES ((size_t)1 << 30)
#define WARMUP 3
#define RUNS 21

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int device = argc > 2 && !strcmp(argv[1], "--device") ? atoi(argv[2]) : 0;
	ktune_ctx *ctx;
	char err[4096];
	struct ktune_err e;
	CUdeviceptr src, dst;
	CUevent start, stop;
	double gbs[RUNS];
	int pushed;

	if (argc > 1 && (argc != 3 || strcmp(argv[1], "--device"))) {
		fprintf(stderr, "usage: copy [--device N]\n");
		return 2;
	}
	if (ktune_open("", device, &ctx, err, sizeof(err))) {
		fprintf(stderr, "copy: %s\n", err);
		return 2;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e)) {
		fprintf(stderr, "copy: %s\n", e.msg);
		return 1;
	}
	if (ktune_cu.cuMemAlloc_v2(&src, BYTES) || ktune_cu.cuMemAlloc_v2(&dst, BYTES) ||
	    ktune_cu.cuMemsetD32_v2(src, 0x3f800000u, BYTES / 4) || ktune_cu.cuEventCreate(&start, 0) ||
	    ktune_cu.cuEventCreate(&stop, 0)) {
		fprintf(stderr, "copy: cannot allocate two buffers of %zu bytes\n", BYTES);
		return 1;
	}
	for (int i = 0; i < WARMUP + RUNS; i++) {
		float ms;
		ktune_cu.cuEventRecord(start, NULL);
		ktune_cu.cuMemcpyDtoD_v2(dst, src, BYTES);
		ktune_cu.cuEventRecord(stop, NULL);
		if (ktune_cu.cuEventSynchronize(stop) || ktune_cu.cuEventElapsedTime_v2(&ms, start, stop)) {
			fprintf(stderr, "copy: the copy failed\n");
			return 1;
		}
		if (i >= WARMUP)
			gbs[i - WARMUP] = 2.0 * (double)BYTES / (ms * 1e-3) / 1e9;
	}
	qsort(gbs, RUNS, sizeof(double), cmp);
	printf("%s: device-to-device copy of %zu MiB, %d runs: median %.0f GB/s (read + written), "
	       "range %.0f-%.0f\n", ctx->id.name, BYTES >> 20, RUNS, gbs[RUNS / 2], gbs[0], gbs[RUNS - 1]);
	ktune_cu.cuMemFree_v2(src);
	ktune_cu.cuMemFree_v2(dst);
	ktune_close(ctx);
	return 0;
}
