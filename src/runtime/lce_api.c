/*
 * lce_api.c - ktune_linear_cross_entropy(): the LM head's loss and its
 * gradients, CE(hidden @ weight^T), in chunks of rows, so that the logits
 * [rows, vocab] are never held whole.  Not an op of the registry: a
 * composition of two that are, each tuned on its own,
 *
 *     logits  = hidden_c @ weight^T              ktune_gemm 'n','t'    [c, vocab]
 *     loss_c, dlogits (in place of the logits)   ktune_cross_entropy_fused, none, every row's dloss = g
 *     dhidden_c = dlogits @ weight               ktune_gemm 'n','n'    [c, dim]
 *     dweight (+)= dlogits^T @ hidden_c          ktune_gemm 't','n'    [vocab, dim], beta 1 after the first chunk
 *
 * for each chunk hidden_c of chunk_rows rows, with g = dloss / count (mean)
 * or dloss (sum).  The mean's count of rows not ignored is the caller's, or
 * ktune's: one copy of the targets to the host, after a synchronization of
 * the stream.
 */
#include <stdlib.h>

#include "runtime/context.h"
#include "runtime/op_run.h"

/* The scratch's row stride: vocab rounded up to 8 elements, so that its rows are 16-byte aligned. */
static int64_t scratch_ld(int64_t vocab)
{
	return (vocab + 7) / 8 * 8;
}

/* The rows whose target is not ignore_index: the targets copied to the host once the stream is done. */
static ktune_status count_targets(ktune_ctx *ctx, const int64_t *targets, int64_t rows, int64_t ignore_index,
				  void *stream, int64_t *count)
{
	struct ktune_err e;
	int pushed, rc;
	int64_t *host = malloc((size_t)rows * sizeof(*host));
	if (!host)
		return ktune__ctx_error(ctx, ktune__fail(&e, KTUNE_ERR_NOMEM, "out of memory for %lld targets",
							 (long long)rows), &e);
	if ((rc = ktune__ctx_enter(ctx, &pushed, &e))) {
		free(host);
		return ktune__ctx_error(ctx, rc, &e);
	}
	CU_GOTO(&e, rc, cuStreamSynchronize((CUstream)stream));
	CU_GOTO(&e, rc, cuMemcpyDtoH_v2(host, (CUdeviceptr)targets, (size_t)rows * sizeof(*host)));
	*count = 0;
	for (int64_t r = 0; r < rows; r++)
		*count += host[r] != ignore_index;
out:
	ktune__ctx_leave(ctx, pushed);
	free(host);
	return rc ? ktune__ctx_error(ctx, rc, &e) : KTUNE_OK;
}

ktune_status ktune_linear_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t dim, int64_t vocab, const void *hidden,
					int64_t ld_hidden, const void *weight, int64_t ld_weight, const int64_t *targets,
					int64_t ignore_index, float label_smoothing, float softcap,
					ktune_reduction reduction, int64_t count, float dloss, float *loss_rows,
					void *dhidden, int64_t ld_dhidden, void *dweight, int64_t ld_dweight,
					int64_t chunk_rows, void *scratch, size_t scratch_bytes, ktune_dtype dtype,
					void *stream)
{
	const char *what = "linear_cross_entropy";
	int size = dtype == KTUNE_F16 || dtype == KTUNE_BF16 ? 2 : 0;
	int64_t ld_s = scratch_ld(vocab);
	ktune_status rc;

	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (rows < 0 || dim < 0 || vocab < 0)
		return ktune__op_invalid(ctx, "%s: a size is negative (rows %lld, dim %lld, vocab %lld)", what,
					 (long long)rows, (long long)dim, (long long)vocab);
	if (!size)
		return ktune__op_invalid(ctx, "%s: dtype %d: the GEMMs take f16 and bf16", what, (int)dtype);
	if (reduction != KTUNE_REDUCTION_MEAN && reduction != KTUNE_REDUCTION_SUM)
		return ktune__op_invalid(ctx, "%s: reduction %d is not mean (0) or sum (1): the gradients are of one "
					 "loss", what, (int)reduction);
	if (!(label_smoothing >= 0 && label_smoothing <= 1))
		return ktune__op_invalid(ctx, "%s: label_smoothing %g is not in [0, 1]", what, (double)label_smoothing);
	if (!(softcap >= 0 && softcap <= 3.4e38f))
		return ktune__op_invalid(ctx, "%s: softcap %g is not a finite value >= 0 (0: none)", what,
					 (double)softcap);
	if (!(dloss > -3.4e38f && dloss < 3.4e38f))
		return ktune__op_invalid(ctx, "%s: dloss %g is not finite", what, (double)dloss);
	if (ld_hidden < dim || ld_weight < dim || ld_dhidden < dim || ld_dweight < dim)
		return ktune__op_invalid(ctx, "%s: a row stride (hidden %lld, weight %lld, dhidden %lld, dweight %lld) "
					 "is less than dim = %lld", what, (long long)ld_hidden, (long long)ld_weight,
					 (long long)ld_dhidden, (long long)ld_dweight, (long long)dim);
	if (!hidden || !weight || !targets || !loss_rows || !dhidden || !dweight || !scratch)
		return ktune__op_invalid(ctx, "%s: %s is NULL", what,
					 !hidden ? "hidden" : !weight ? "weight" : !targets ? "targets"
					 : !loss_rows ? "loss_rows" : !dhidden ? "dhidden" : !dweight ? "dweight" : "scratch");
	if (vocab > 262144)
		return ktune__op_invalid(ctx, "%s: vocab %lld is over 262144, the longest row cross_entropy holds",
					 what, (long long)vocab);
	if (chunk_rows < 0)
		return ktune__op_invalid(ctx, "%s: chunk_rows %lld is negative", what, (long long)chunk_rows);
	if (rows == 0 || dim == 0 || vocab == 0)
		return KTUNE_OK; /* no elements: nothing to launch */
	size_t per_row = (size_t)ld_s * (size_t)size;
	if (chunk_rows == 0) { /* as many rows as the scratch holds, a multiple of 64 where that is more */
		chunk_rows = (int64_t)(scratch_bytes / per_row);
		if (chunk_rows > 64)
			chunk_rows -= chunk_rows % 64;
	}
	if (chunk_rows > rows)
		chunk_rows = rows;
	if (chunk_rows < 1 || (size_t)chunk_rows * per_row > scratch_bytes)
		return ktune__op_invalid(ctx, "%s: scratch of %zu bytes holds %zu rows of logits (%zu bytes each), not "
					 "%lld", what, scratch_bytes, scratch_bytes / per_row, per_row,
					 (long long)(chunk_rows ? chunk_rows : 1));

	float g = dloss;
	if (reduction == KTUNE_REDUCTION_MEAN) {
		if (count < 0 && (rc = count_targets(ctx, targets, rows, ignore_index, stream, &count)))
			return rc;
		g = count > 0 ? (float)((double)dloss / (double)count) : 0.0f;
	}

	const char *h = hidden;
	char *dh = dhidden;
	for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
		int64_t c = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
		const void *h_c = h + (size_t)r0 * (size_t)ld_hidden * (size_t)size;
		if ((rc = ktune_gemm(ctx, 'n', 't', c, vocab, dim, 1.0f, h_c, ld_hidden, weight, ld_weight, 0.0f, scratch,
				     ld_s, dtype, stream)) ||
		    (rc = ktune_cross_entropy_fused(ctx, c, vocab, scratch, ld_s, targets + r0, ignore_index,
						    label_smoothing, softcap, KTUNE_REDUCTION_NONE, g, loss_rows + r0,
						    scratch, ld_s, dtype, stream)) ||
		    (rc = ktune_gemm(ctx, 'n', 'n', c, dim, vocab, 1.0f, scratch, ld_s, weight, ld_weight, 0.0f,
				     dh + (size_t)r0 * (size_t)ld_dhidden * (size_t)size, ld_dhidden, dtype, stream)) ||
		    (rc = ktune_gemm(ctx, 't', 'n', vocab, dim, c, 1.0f, scratch, ld_s, h_c, ld_hidden, r0 ? 1.0f : 0.0f,
				     dweight, ld_dweight, dtype, stream)))
			return rc;
	}
	return KTUNE_OK;
}
