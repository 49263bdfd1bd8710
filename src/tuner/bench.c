/*
 * bench.c - times a launch by the protocol in bench.h.
 */
#include <stdlib.h>
#include <string.h>

#include "tuner/bench.h"

int ktune__bench_open(struct ktune_bench *b, int l2_bytes, struct ktune_err *e)
{
	memset(b, 0, sizeof(*b));
	b->flush_bytes = 2 * (size_t)(l2_bytes > 0 ? l2_bytes : 64 << 20);
	CU_TRY(e, cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING));
	CU_TRY(e, cuMemAlloc_v2(&b->flush, b->flush_bytes));
	for (int i = 0; i < KTUNE_BENCH_MAX_REPS; i++) {
		CU_TRY(e, cuEventCreate(&b->start[i], CU_EVENT_DEFAULT));
		CU_TRY(e, cuEventCreate(&b->stop[i], CU_EVENT_DEFAULT));
	}
	return KTUNE_OK;
}

void ktune__bench_close(struct ktune_bench *b)
{
	for (int i = 0; i < KTUNE_BENCH_MAX_REPS; i++) {
		if (b->start[i])
			ktune_cu.cuEventDestroy_v2(b->start[i]);
		if (b->stop[i])
			ktune_cu.cuEventDestroy_v2(b->stop[i]);
	}
	if (b->flush)
		ktune_cu.cuMemFree_v2(b->flush);
	if (b->stream)
		ktune_cu.cuStreamDestroy_v2(b->stream);
	memset(b, 0, sizeof(*b));
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, int n, double q)
{
	double pos = q * (n - 1);
	int lo = (int)pos;
	double frac = pos - lo;
	return lo + 1 < n ? sorted[lo] * (1 - frac) + sorted[lo + 1] * frac : sorted[lo];
}

/* Runs reps [from, to): flush, start event, launch, stop event. */
static int run_batch(struct ktune_bench *b, ktune_launch_fn fn, void *arg, int from, int to,
		     double *times, struct ktune_err *e)
{
	int rc;
	for (int i = from; i < to; i++) {
		CU_TRY(e, cuMemsetD32Async(b->flush, (unsigned)i, b->flush_bytes / 4, b->stream));
		CU_TRY(e, cuEventRecord(b->start[i], b->stream));
		if ((rc = fn(arg, b->stream, e)))
			return rc;
		CU_TRY(e, cuEventRecord(b->stop[i], b->stream));
	}
	CU_TRY(e, cuStreamSynchronize(b->stream));
	for (int i = from; i < to; i++) {
		float ms;
		CU_TRY(e, cuEventElapsedTime_v2(&ms, b->start[i], b->stop[i]));
		times[i] = ms * 1e3;
	}
	return KTUNE_OK;
}

int ktune__bench_time(struct ktune_bench *b, ktune_launch_fn fn, void *arg, int quick,
		      struct ktune_timing *out, struct ktune_err *e)
{
	double times[KTUNE_BENCH_MAX_REPS], sorted[KTUNE_BENCH_MAX_REPS];
	int n = 0, rc;
	double t0 = ktune__now();

	/* warm-up: instruction cache, TLB, clocks */
	if ((rc = fn(arg, b->stream, e)))
		return rc;
	CU_TRY(e, cuStreamSynchronize(b->stream));

	int batch = quick ? 3 : 10;
	for (;;) {
		if ((rc = run_batch(b, fn, arg, n, n + batch, times, e)))
			return rc;
		n += batch;
		memcpy(sorted, times, (size_t)n * sizeof(double));
		qsort(sorted, (size_t)n, sizeof(double), cmp_double);
		out->median_us = quantile(sorted, n, 0.5);
		out->p20_us = quantile(sorted, n, 0.2);
		out->p80_us = quantile(sorted, n, 0.8);
		out->reps = n;
		if (quick)
			break;
		if (out->p80_us - out->p20_us <= 0.02 * out->median_us)
			break;
		if (n + batch > KTUNE_BENCH_MAX_REPS || ktune__now() - t0 > 0.5)
			break;
	}
	return KTUNE_OK;
}
