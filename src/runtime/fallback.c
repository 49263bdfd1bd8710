/*
 * fallback.c - cuBLAS as the runtime's fallback for GEMM keys ktune has no
 * good answer for (dispatch.c decides which): loading it once per context,
 * the per-stream workspace it runs with, its launch, and the opt-in
 * measurement of ktune's config against it (KTUNE_FALLBACK=measure).
 */
#include <stdio.h>

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
/* Pairs of timed runs, in turns: ktune, cuBLAS, ... */
#define MEASURE_PAIRS 5

/* One timed run on the stream: the launch between two events; its time in ms. */
static int timed(ktune_ctx *ctx, struct ktune_resolved *r, const struct ktune_key *key, int blas,
		 float alpha, CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb, CUdeviceptr c,
		 int64_t ldc, CUstream stream, CUevent ev[2], float *ms, struct ktune_err *e)
{
	int rc;
	CU_TRY(e, cuEventRecord(ev[0], stream));
	rc = blas ? ktune__blas_launch(ctx, key, alpha, a, lda, b, ldb, 0, c, ldc, stream, e)
		  : ktune__gemm_launch(ctx, r->kernel, key, &r->cfg, alpha, a, lda, b, ldb, 0, c, ldc, stream, e);
	if (rc)
		return rc;
	CU_TRY(e, cuEventRecord(ev[1], stream));
	CU_TRY(e, cuEventSynchronize(ev[1]));
	CU_TRY(e, cuEventElapsedTime_v2(ms, ev[0], ev[1]));
	return KTUNE_OK;
}

/*
 * Times ktune's config and cuBLAS on the call's operands, in turns, into
 * scratch for C (beta = 0: the call's C is neither read nor written), and
 * stores the faster as the key's source.  The caller's stream is waited
 * for: once per key, which is why it is opt-in.
 */
static int measure(ktune_ctx *ctx, struct ktune_resolved *r, const struct ktune_key *key, float alpha,
		   CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb, CUdeviceptr c, int64_t ldc,
		   CUstream stream, struct ktune_err *e)
{
	CUevent ev[2] = { NULL, NULL };
	CUdeviceptr scratch = 0;
	float best[2] = { 1e30f, 1e30f };
	int rc = KTUNE_OK;

	/* the same address modulo 16 as the caller's C, so that both run the variant of its class */
	size_t bytes = (size_t)ldc * (size_t)key->m * 2 + 16;
	CU_GOTO(e, rc, cuMemAlloc_v2(&scratch, bytes));
	CU_GOTO(e, rc, cuEventCreate(&ev[0], CU_EVENT_DEFAULT));
	CU_GOTO(e, rc, cuEventCreate(&ev[1], CU_EVENT_DEFAULT));
	CUdeviceptr cs = scratch + (c & 15);
	for (int i = 0; i < 2 * MEASURE_PAIRS + 2 && !rc; i++) {
		int blas = i % 2;
		float ms;
		rc = timed(ctx, r, key, blas, alpha, a, lda, b, ldb, cs, ldc, stream, ev, &ms, e);
		if (!rc && i >= 2 && ms < best[blas]) /* the first pair warms up */
			best[blas] = ms;
	}
	if (!rc)
		__atomic_store_n(&r->source, best[1] < best[0] ? KTUNE_SRC_CUBLAS : r->own, __ATOMIC_RELEASE);
out:
	if (ev[0])
		ktune_cu.cuEventDestroy_v2(ev[0]);
	if (ev[1])
		ktune_cu.cuEventDestroy_v2(ev[1]);
	if (scratch)
		ktune_cu.cuMemFree_v2(scratch);
	return rc;
}

const char *ktune__fallback_source(ktune_ctx *ctx, struct ktune_resolved *r, const struct ktune_key *key,
				   float alpha, CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb,
				   CUdeviceptr c, int64_t ldc, CUstream stream)
{
	int pending = 1;
	CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
	if (__atomic_load_n(&r->measure, __ATOMIC_ACQUIRE) != 1 ||
	    (size_t)ldc * (size_t)key->m * 2 > MEASURE_MAX_BYTES ||
	    ktune_cu.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
	    capture != CU_STREAM_CAPTURE_STATUS_NONE)
		return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
	/* one thread measures; the others go on with the choice made without measuring */
	if (!__atomic_compare_exchange_n(&r->measure, &pending, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
	struct ktune_err e;
	/* a measurement that fails leaves the choice as it was, for good: the call itself still runs */
	measure(ctx, r, key, alpha, a, lda, b, ldb, c, ldc, stream, &e);
	__atomic_store_n(&r->measure, 0, __ATOMIC_RELEASE);
	return __atomic_load_n(&r->source, __ATOMIC_ACQUIRE);
}
