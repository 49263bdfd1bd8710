/*
 * fallback.c - cuBLAS as the runtime's fallback for GEMM keys ktune has no
 * good answer for (dispatch.c decides which): loading it once per context,
 * the per-stream workspace it runs with, its launch, and the timing of
 * ktune's config against it for a key served untuned.
 *
 * The model picks well for most keys but is far off for a few regimes
 * (a deep K split over a narrow N, K of a dozen over a wide N: 0.66-0.79
 * of cuBLAS on the random-shape benchmark), and nothing short of running
 * both tells which.  So the first call of such a key enqueues a dozen runs
 * of each, in turns, on its own stream; a later call finds them done and
 * keeps the faster.  Nothing waits, except under KTUNE_FALLBACK=measure.
 */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/context.h"
#include "runtime/cublas.h"

int ktune__ctx_blas(ktune_ctx *ctx)
{
	if (ctx->blas_state == 0)
		ctx->blas_state = ktune__cublas_open(&ctx->blas, NULL) ? -1 : 1;
	return ctx->blas_state > 0;
}

int ktune__blas_launch(ktune_ctx *ctx, const struct ktune_key *key, float alpha, CUdeviceptr a,
		       int64_t lda, CUdeviceptr b, int64_t ldb, float beta, CUdeviceptr c, int64_t ldc,
		       CUstream stream, struct ktune_err *e)
{
	CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
	CUdeviceptr ws = 0;
	int rc;

	CU_TRY(e, cuStreamIsCapturing(stream, &capture));
	if (capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
		/*
		 * In a graph being captured, nothing may be allocated outside it:
		 * the graph's own memory node holds the workspace, as op_api.c does
		 * for an op's scratch.
		 */
		CU_TRY(e, cuMemAllocAsync(&ws, KTUNE_CUBLAS_WORKSPACE, stream));
		rc = ktune__cublas_gemm(ctx->blas, key, alpha, a, lda, b, ldb, beta, c, ldc, stream, ws,
					KTUNE_CUBLAS_WORKSPACE, e);
		ktune_cu.cuMemFreeAsync(ws, stream);
		return rc;
	}
	struct ktune_workspace *w = NULL;
	pthread_mutex_lock(&ctx->lock);
	rc = ktune__workspace_get(ctx, stream, 0, 0, &w, e);
	if (!rc && !w->blas) {
		CUresult r = ktune_cu.cuMemAlloc_v2(&w->blas, KTUNE_CUBLAS_WORKSPACE);
		if (r != CUDA_SUCCESS) {
			w->blas = 0; /* no workspace of ours: cuBLAS's own pool, which serves every algorithm but few */
		}
	}
	if (!rc)
		ws = w->blas;
	pthread_mutex_unlock(&ctx->lock);
	if (rc)
		return rc;
	return ktune__cublas_gemm(ctx->blas, key, alpha, a, lda, b, ldb, beta, c, ldc, stream, ws,
				  ws ? KTUNE_CUBLAS_WORKSPACE : 0, e);
}

/* Scratch for C at most this large is worth a measurement. */
#define MEASURE_MAX_BYTES (256u << 20)
/* Pairs of timed runs, in turns: ktune, cuBLAS, ...; the first pair warms up. */
#define MEASURE_PAIRS 6
#define MEASURE_RUNS (2 * MEASURE_PAIRS)

/*
 * The runs of one key's timing, enqueued back to back on the caller's
 * stream: run i lies between ev[i] and ev[i + 1], even runs ktune's, odd
 * runs cuBLAS's.
 */
struct ktune_race {
	CUevent ev[MEASURE_RUNS + 1];
};

void ktune__race_free(struct ktune_race *t)
{
	if (!t)
		return;
	for (int i = 0; i <= MEASURE_RUNS; i++)
		if (t->ev[i])
			ktune_cu.cuEventDestroy_v2(t->ev[i]); /* released when the runs reach it */
	free(t);
}

/*
 * Enqueues the runs on the call's operands into scratch for C (beta = 0:
 * the call's C is neither read nor written); the scratch is allocated and
 * freed in stream order, so nothing waits.
 */
static int race_start(ktune_ctx *ctx, struct ktune_resolved *r, const struct ktune_key *key,
			 float alpha, CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb, CUdeviceptr c,
			 int64_t ldc, CUstream stream, struct ktune_race **out, struct ktune_err *e)
{
	struct ktune_race *t = calloc(1, sizeof(*t));
	CUdeviceptr scratch = 0;
	int rc = KTUNE_OK;

	if (!t)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (int i = 0; i <= MEASURE_RUNS; i++)
		CU_GOTO(e, rc, cuEventCreate(&t->ev[i], CU_EVENT_DEFAULT));
	/* the same address modulo 16 as the caller's C, so that both run the variant of its class */
	CU_GOTO(e, rc, cuMemAllocAsync(&scratch, (size_t)ldc * (size_t)key->m * 2 + 16, stream));
	CUdeviceptr cs = scratch + (c & 15);
	CU_GOTO(e, rc, cuEventRecord(t->ev[0], stream));
	for (int i = 0; i < MEASURE_RUNS && !rc; i++) {
		rc = i % 2 ? ktune__blas_launch(ctx, key, alpha, a, lda, b, ldb, 0, cs, ldc, stream, e)
			   : ktune__gemm_launch(ctx, r->kernel, key, &r->cfg, alpha, a, lda, b, ldb, 0, cs,
						ldc, stream, e);
		if (!rc)
			CU_GOTO(e, rc, cuEventRecord(t->ev[i + 1], stream));
	}
out:
	if (scratch)
		ktune_cu.cuMemFreeAsync(scratch, stream);
	if (rc) {
		ktune__race_free(t);
		return rc;
	}
	*out = t;
	return KTUNE_OK;
}

/*
 * Reads a timing whose runs are done (or, with wait, waits for them), and
 * stores the faster side, each side's best run, as the key's source.
 * 1 while the runs are still in flight.
 */
static int race_read(struct ktune_resolved *r, struct ktune_race *t, int wait)
{
	float best[2] = { 1e30f, 1e30f };
	CUresult q = wait ? ktune_cu.cuEventSynchronize(t->ev[MEASURE_RUNS])
			  : ktune_cu.cuEventQuery(t->ev[MEASURE_RUNS]);
	if (q == CUDA_ERROR_NOT_READY)
		return 1;
	for (int i = 2; i < MEASURE_RUNS && q == CUDA_SUCCESS; i++) {
		float ms;
		q = ktune_cu.cuEventElapsedTime_v2(&ms, t->ev[i], t->ev[i + 1]);
		if (q == CUDA_SUCCESS && ms < best[i % 2])
			best[i % 2] = ms;
	}
	/* a timing that failed leaves the choice as it was, for good */
	if (q == CUDA_SUCCESS)
		__atomic_store_n(&r->source, best[1] < best[0] ? KTUNE_SRC_CUBLAS : r->own, __ATOMIC_RELEASE);
	return 0;
}

/* One transition of r->measure, won by one thread. */
static int take(struct ktune_resolved *r, int from, int to)
{
	return __atomic_compare_exchange_n(&r->measure, &from, to, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

const char *ktune__fallback_source(ktune_ctx *ctx, struct ktune_resolved *r, const struct ktune_key *key,
				   float alpha, CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb,
				   CUdeviceptr c, int64_t ldc, CUstream stream)
{
	int state = __atomic_load_n(&r->measure, __ATOMIC_ACQUIRE);

	if (state == KTUNE_MEASURE_RUNNING && take(r, KTUNE_MEASURE_RUNNING, KTUNE_MEASURE_READING)) {
		int running = race_read(r, r->race, 0);
		if (!running) {
			ktune__race_free(r->race);
			r->race = NULL;
		}
		__atomic_store_n(&r->measure, running ? KTUNE_MEASURE_RUNNING : KTUNE_MEASURE_NONE,
				 __ATOMIC_RELEASE);
		return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
	}
	CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
	if (state != KTUNE_MEASURE_PENDING || (size_t)ldc * (size_t)key->m * 2 > MEASURE_MAX_BYTES ||
	    ktune_cu.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
	    capture != CU_STREAM_CAPTURE_STATUS_NONE)
		return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
	/* one thread times; the others go on with the choice made without timing */
	if (!take(r, KTUNE_MEASURE_PENDING, KTUNE_MEASURE_LAUNCHING))
		return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
	struct ktune_err e;
	struct ktune_race *t = NULL;
	/* runs that fail to start leave the choice as it was, for good: the call itself still runs */
	if (race_start(ctx, r, key, alpha, a, lda, b, ldb, c, ldc, stream, &t, &e)) {
		__atomic_store_n(&r->measure, KTUNE_MEASURE_NONE, __ATOMIC_RELEASE);
	} else if (ctx->fallback == KTUNE_FALLBACK_MEASURE) {
		race_read(r, t, 1);
		ktune__race_free(t);
		__atomic_store_n(&r->measure, KTUNE_MEASURE_NONE, __ATOMIC_RELEASE);
	} else {
		r->race = t;
		__atomic_store_n(&r->measure, KTUNE_MEASURE_RUNNING, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
}
