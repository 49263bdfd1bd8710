/*
 * op_api.c - running a call of an op other than GEMM: the key from the
 * call, its resolved kernel, the launch (ops' public functions call
 * ktune__op_run; ktune_gemm has its own, gemm_api.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/op_run.h"

int ktune__op_launch(ktune_ctx *ctx, struct ktune_kernel *kernel, const struct ktune_key *key,
		     const struct ktune_config *cfg, const struct ktune_op_call *call_in, CUstream stream,
		     struct ktune_err *e)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_op_step steps[KTUNE_OP_MAX_KERNELS];
	struct ktune_op_call call = *call_in;

	if (!op || ktune__op_is_gemm(op))
		return ktune__fail(e, KTUNE_ERR_INVALID, "op '%.16s' has no generic launch", key->op);
	size_t bytes = op->workspace ? op->workspace(key, cfg, &call, ctx->id.sm_count) : 0;
	int graph_scratch = 0, rc = KTUNE_OK;
	if (bytes) {
		CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
		CU_TRY(e, cuStreamIsCapturing(stream, &capture));
		if (capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
			/*
			 * A CUDA graph being captured: scratch of its own, allocated and
			 * freed in stream order (the graph's memory nodes).  The stream's
			 * buffer cannot grow during a capture, and replays of the graph
			 * elsewhere must not share it.
			 */
			CUdeviceptr scratch;
			CU_TRY(e, cuMemAllocAsync(&scratch, bytes, stream));
			call.workspace = scratch;
			graph_scratch = 1;
		} else {
			struct ktune_workspace *w;
			pthread_mutex_lock(&ctx->lock);
			rc = ktune__workspace_get(ctx, stream, bytes, 0, &w, e);
			if (!rc)
				call.workspace = w->partials;
			pthread_mutex_unlock(&ctx->lock);
			if (rc)
				return rc;
		}
	}
	int n = ktune__op_steps(op, key, cfg, &call, ctx->id.sm_count, steps);
	for (int i = 0; i < n && !rc; i++) {
		const struct ktune_op_launch *l = &steps[i].launch;
		for (int j = 0; j < steps[i].args.n; j++) /* a step may have been copied: point into its own slots */
			steps[i].args.argv[j] = steps[i].args.slot[j];
		CUfunction fn = steps[i].entry >= 0 && steps[i].entry < KTUNE_OP_MAX_KERNELS
					? kernel->fns[steps[i].entry] : NULL;
		if (!fn) {
			rc = ktune__fail(e, KTUNE_ERR_INVALID, "%s: no kernel %d in family %d", op->name,
					 steps[i].entry, cfg->family);
			break;
		}
		/*
		 * Past the 48 KiB every kernel gets, static and dynamic shared memory
		 * together, a kernel opts in (attention's tiles, the row-wise
		 * rings); a host-side call.
		 */
		if (l->smem + (size_t)kernel->static_smem[steps[i].entry] > 48 * 1024)
			CU_GOTO(e, rc, cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
							  (int)l->smem));
		CU_GOTO(e, rc, cuLaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
					      l->block[2], l->smem, stream, steps[i].args.argv, NULL));
	}
out:
	if (graph_scratch)
		ktune_cu.cuMemFreeAsync((CUdeviceptr)call.workspace, stream);
	return rc;
}

ktune_status ktune__op_run(ktune_ctx *ctx, struct ktune_key *key, struct ktune_op_call *call,
			   void *stream)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_resolved *r = NULL;
	struct ktune_key tuned;
	struct ktune_err e;
	int pushed, rc;

	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (!op)
		return ktune__ctx_error(ctx, ktune__fail(&e, KTUNE_ERR_INVALID, "unknown op"), &e);
	for (int i = 0; i < KTUNE_KEY_DIMS; i++) {
		call->size[i] = *ktune__key_dim(key, i);
		if (call->size[i] < 0)
			return ktune__ctx_error(ctx, ktune__fail(&e, KTUNE_ERR_INVALID, "%s: size %lld is negative",
								 op->name, (long long)call->size[i]), &e);
	}
	/* no elements: nothing to launch (a size an op does not use is 0 too) */
	for (int f = 0; f < op->nfields; f++)
		if (op->fields[f].dim >= 0 && call->size[op->fields[f].dim] == 0)
			return KTUNE_OK;
	if ((rc = ktune__op_key_check(key, &e)))
		return ktune__ctx_error(ctx, rc, &e);
	struct ktune_op_layout layout;
	op->layout(key, &layout);
	for (int i = 0; i < layout.nbufs; i++) {
		const struct ktune_op_buf *b = &layout.bufs[i];
		if (call->buf[i])
			continue;
		if (b->optional == KTUNE_OR_NULL) { /* the kernel takes 0 for "none" */
			call->absent |= 1u << i;
			continue;
		}
		if (b->optional == KTUNE_REQUIRED)
			return ktune__op_invalid(ctx, "%s: %s is NULL", op->name, b->name);
		if (b->elems > KTUNE_CONSTANT_ELEMS)
			return ktune__op_invalid(ctx, "%s: %s may be NULL only up to %d elements, not %lld", op->name,
						 b->name, KTUNE_CONSTANT_ELEMS, (long long)b->elems);
		call->buf[i] = ktune__ctx_constant(ctx, b->optional, b->type == KTUNE_BUF_F32 ? KTUNE_F32 : key->dtype);
		call->absent |= 1u << i;
	}
	key->aligned = ktune__op_call_aligned(key, &layout, call);
	tuned = *key;
	op->key_bucket(&tuned);

	if ((rc = ktune__ctx_enter(ctx, &pushed, &e)))
		return ktune__ctx_error(ctx, rc, &e);
	pthread_mutex_lock(&ctx->lock);
	rc = ktune__resolve(ctx, &tuned, &r, &e);
	pthread_mutex_unlock(&ctx->lock);
	if (!rc) {
		ktune__last_dispatch = r->source;
		rc = ktune__op_launch(ctx, r->kernel, &tuned, &r->cfg, call, (CUstream)stream, &e);
	}
	ktune__ctx_leave(ctx, pushed);
	return rc ? ktune__ctx_error(ctx, rc, &e) : KTUNE_OK;
}

ktune_status ktune__op_invalid(ktune_ctx *ctx, const char *fmt, ...)
{
	struct ktune_err e;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	return ctx ? ktune__ctx_error(ctx, KTUNE_ERR_INVALID, &e) : KTUNE_ERR_INVALID;
}
