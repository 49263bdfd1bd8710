/*
 * gemm_api.c - ktune_gemm(): validate, resolve the key to a kernel (or to
 * cuBLAS, fallback.c), launch.
 *
 * The hot path for a key seen before is one hash lookup under the context's
 * lock and one cuLaunchKernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"

/*
 * One operand's tensor map, as gemm_wgmma.cu's header specifies: rank 2,
 * {contiguous extent, other extent}, a row stride of ld * 2 bytes, the
 * 128-byte swizzle, zero fill out of bounds (the kernel's loads rely on it;
 * its stores of C are clipped to the extents).
 * Encoding costs a few hundred nanoseconds of host work, as much as the
 * rest of a call, so each kernel keeps the maps of its last call (below).
 */
static int encode_map(CUtensorMap *map, const struct ktune_key *key, CUdeviceptr ptr,
		      int64_t inner, int64_t outer, int64_t ld, unsigned box_inner, unsigned box_outer,
		      struct ktune_err *e)
{
	cuuint64_t dims[2] = { (cuuint64_t)inner, (cuuint64_t)outer };
	cuuint64_t strides[1] = { (cuuint64_t)ld * 2 };
	cuuint32_t box[2] = { box_inner, box_outer };
	cuuint32_t elem_strides[2] = { 1, 1 };
	CU_TRY(e, cuTensorMapEncodeTiled(map, key->dtype == KTUNE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
								  : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
					 2, (void *)ptr, dims, strides, box, elem_strides,
					 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
					 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
					 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
	return KTUNE_OK;
}

static int same_operands(const struct ktune_tensor_maps *x, const struct ktune_tensor_maps *y)
{
	return x->a == y->a && x->b == y->b && x->c == y->c && x->m == y->m && x->n == y->n &&
	       x->k == y->k && x->lda == y->lda && x->ldb == y->ldb && x->ldc == y->ldc;
}

/*
 * Split-K scratch for a launch on `stream`: partials and tile counters (none
 * when split_k is 1); `resident` as for the wgmma grid (ktune__gemm_wgmma_grid).
 */
static int split_workspace(ktune_ctx *ctx, const struct ktune_key *key, const struct ktune_config *cfg,
			   int resident, CUstream stream, CUdeviceptr *partials, CUdeviceptr *counters,
			   struct ktune_err *e)
{
	*partials = *counters = 0;
	if (cfg->split_k <= 1)
		return KTUNE_OK;
	struct ktune_workspace *w = NULL;
	pthread_mutex_lock(&ctx->lock);
	int rc = ktune__workspace_get(ctx, stream, ktune__gemm_partials_bytes(key, cfg, resident),
			       ktune__gemm_counters(key, cfg, resident), &w, e);
	if (!rc) {
		*partials = w->partials;
		*counters = w->counters;
	}
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

/* The wgmma family's launch: three tensor maps, a persistent grid (gemm_wgmma.cu's contract). */
static int launch_wgmma(ktune_ctx *ctx, struct ktune_kernel *kernel, const struct ktune_key *key,
			const struct ktune_config *cfg, float alpha, CUdeviceptr a, int64_t lda,
			CUdeviceptr b, int64_t ldb, float beta, CUdeviceptr c, int64_t ldc,
			CUstream stream, struct ktune_err *e)
{
	CUtensorMap map_a, map_b, map_c;
	CUdeviceptr partials, counters;
	unsigned grid[3];
	int m = (int)key->m, n = (int)key->n, k = (int)key->k, group = cfg->group_size, rc;
	int split = cfg->split_k;
	long long ldc_ = ldc;
	unsigned bk = (unsigned)cfg->block_k;

	/* TMA: 16-byte aligned bases and strides; dispatch never sends other keys here */
	if (!key->aligned)
		return ktune__fail(e, KTUNE_ERR_INVALID, "the wgmma family needs aligned operands");
	/* a kernel variant fixes dtype, layout and tile: the operands decide the rest */
	struct ktune_tensor_maps now = { a, b, c, key->m, key->n, key->k, lda, ldb, ldc };
	int cached = 0;
	pthread_mutex_lock(&ctx->lock);
	if (kernel->maps && same_operands(kernel->maps, &now)) {
		map_a = kernel->maps->map_a;
		map_b = kernel->maps->map_b;
		map_c = kernel->maps->map_c;
		cached = 1;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!cached) {
		if ((rc = key->variant[0] == 't'
				  ? encode_map(&map_a, key, a, key->m, key->k, lda, 64, bk, e)
				  : encode_map(&map_a, key, a, key->k, key->m, lda, 64,
					       (unsigned)cfg->block_m, e)) ||
		    (rc = key->variant[1] == 't'
				  ? encode_map(&map_b, key, b, key->k, key->n, ldb, 64,
					       (unsigned)(cfg->block_n / cfg->cluster_m), e)
				  : encode_map(&map_b, key, b, key->n, key->k, ldb, 64, bk, e)) ||
		    (rc = encode_map(&map_c, key, c, key->n, key->m, ldc, 64, 64, e)))
			return rc;
		now.map_a = map_a;
		now.map_b = map_b;
		now.map_c = map_c;
		pthread_mutex_lock(&ctx->lock);
		if (kernel->maps || (kernel->maps = malloc(sizeof(*kernel->maps))))
			*kernel->maps = now;
		pthread_mutex_unlock(&ctx->lock);
	}
	int resident = cfg->cluster_m > 1 ? kernel->max_clusters : ctx->id.sm_count;
	if ((rc = split_workspace(ctx, key, cfg, resident, stream, &partials, &counters, e)))
		return rc;
	ktune__gemm_wgmma_grid(key, cfg, resident, grid);
	void *args[] = { &map_a, &map_b, &map_c, &c, &m, &n, &k, &ldc_, &alpha, &beta, &group,
			 &split, &partials, &counters };
	CU_TRY(e, cuLaunchKernel(kernel->fn, grid[0], grid[1], grid[2],
				 (unsigned)ktune__gemm_threads(cfg), 1, 1, (unsigned)kernel->smem,
				 stream, args, NULL));
	return KTUNE_OK;
}

int ktune__gemm_launch(ktune_ctx *ctx, struct ktune_kernel *kernel, const struct ktune_key *key,
		       const struct ktune_config *cfg, float alpha, CUdeviceptr a, int64_t lda,
		       CUdeviceptr b, int64_t ldb, float beta, CUdeviceptr c, int64_t ldc,
		       CUstream stream, struct ktune_err *e)
{
	CUdeviceptr partials = 0, counters = 0;
	unsigned grid[3];
	int m = (int)key->m, n = (int)key->n, k = (int)key->k;
	int group = cfg->group_size, split = cfg->split_k;
	long long lda_ = lda, ldb_ = ldb, ldc_ = ldc;
	int rc;

	if (cfg->family == KTUNE_GEMM_WGMMA)
		return launch_wgmma(ctx, kernel, key, cfg, alpha, a, lda, b, ldb, beta, c, ldc, stream, e);
	/* gemv's 16-byte loads: dispatch never sends other keys here */
	if (cfg->family == KTUNE_GEMM_GEMV && !key->aligned)
		return ktune__fail(e, KTUNE_ERR_INVALID, "the gemv family needs aligned operands");
	if ((rc = split_workspace(ctx, key, cfg, 0, stream, &partials, &counters, e)))
		return rc;
	ktune__gemm_grid(key, cfg, grid);
	void *args[] = { &a, &b, &c, &m, &n, &k, &lda_, &ldb_, &ldc_, &alpha, &beta,
			 &group, &split, &partials, &counters };
	CU_TRY(e, cuLaunchKernel(kernel->fn, grid[0], grid[1], grid[2],
				 (unsigned)ktune__gemm_threads(cfg), 1, 1, (unsigned)kernel->smem,
				 stream, args, NULL));
	return KTUNE_OK;
}

static int check_args(char ta, char tb, int64_t m, int64_t n, int64_t k, const void *a,
		      int64_t lda, const void *b, int64_t ldb, const void *c, int64_t ldc,
		      ktune_dtype dtype, struct ktune_err *e)
{
	if (ta != 'n' && ta != 't')
		return ktune__fail(e, KTUNE_ERR_INVALID, "trans_a '%c' is not 'n' or 't'", ta);
	if (tb != 'n' && tb != 't')
		return ktune__fail(e, KTUNE_ERR_INVALID, "trans_b '%c' is not 'n' or 't'", tb);
	if (dtype != KTUNE_F16 && dtype != KTUNE_BF16)
		return ktune__fail(e, KTUNE_ERR_INVALID, "unknown dtype %d", (int)dtype);
	if (m < 1 || n < 1 || k < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "sizes m=%lld n=%lld k=%lld must be in 1..2^31-1",
				   (long long)m, (long long)n, (long long)k);
	if (lda < (ta == 'n' ? k : m))
		return ktune__fail(e, KTUNE_ERR_INVALID, "lda=%lld is less than the row length %lld",
				   (long long)lda, (long long)(ta == 'n' ? k : m));
	if (ldb < (tb == 'n' ? n : k))
		return ktune__fail(e, KTUNE_ERR_INVALID, "ldb=%lld is less than the row length %lld",
				   (long long)ldb, (long long)(tb == 'n' ? n : k));
	if (ldc < n)
		return ktune__fail(e, KTUNE_ERR_INVALID, "ldc=%lld is less than n=%lld",
				   (long long)ldc, (long long)n);
	if (!a || !b || !c)
		return ktune__fail(e, KTUNE_ERR_INVALID, "a NULL matrix pointer");
	if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 2)
		return ktune__fail(e, KTUNE_ERR_INVALID, "matrix pointers must be 2-byte aligned");
	return KTUNE_OK;
}

ktune_status ktune_gemm(ktune_ctx *ctx, char trans_a, char trans_b, int64_t m, int64_t n,
			int64_t k, float alpha, const void *a, int64_t lda, const void *b,
			int64_t ldb, float beta, void *c, int64_t ldc, ktune_dtype dtype,
			void *stream)
{
	struct ktune_err e;
	struct ktune_key key = { .op = "gemm" };
	struct ktune_resolved *r = NULL;
	int pushed, rc;

	if (!ctx)
		return KTUNE_ERR_INVALID;
	if ((rc = check_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, dtype, &e)))
		return ktune__ctx_error(ctx, rc, &e);
	key.dtype = dtype;
	key.variant[0] = trans_a;
	key.variant[1] = trans_b;
	key.m = m;
	key.n = n;
	key.k = k;
	key.aligned = ktune__gemm_aligned(a, lda, b, ldb, c, ldc);

	if ((rc = ktune__ctx_enter(ctx, &pushed, &e)))
		return ktune__ctx_error(ctx, rc, &e);
	pthread_mutex_lock(&ctx->lock);
	rc = ktune__resolve(ctx, &key, &r, &e);
	pthread_mutex_unlock(&ctx->lock);
	if (!rc) {
		const char *source = ktune__fallback_source(ctx, r, &key, alpha, (CUdeviceptr)a, lda,
							    (CUdeviceptr)b, ldb, (CUdeviceptr)c, ldc,
							    (CUstream)stream);
		ktune__last_dispatch = source;
		if (!strcmp(source, KTUNE_SRC_CUBLAS))
			rc = ktune__blas_launch(ctx, &key, alpha, (CUdeviceptr)a, lda, (CUdeviceptr)b, ldb,
						beta, (CUdeviceptr)c, ldc, (CUstream)stream, &e);
		else
			rc = ktune__gemm_launch(ctx, r->kernel, &key, &r->cfg, alpha, (CUdeviceptr)a, lda,
						(CUdeviceptr)b, ldb, beta, (CUdeviceptr)c, ldc,
						(CUstream)stream, &e);
	}
	ktune__ctx_leave(ctx, pushed);
	return rc ? ktune__ctx_error(ctx, rc, &e) : KTUNE_OK;
}
