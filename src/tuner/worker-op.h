/*
 * worker-op.h - the worker's problem for an op other than GEMM (worker.c
 * holds one while such a key is tuned): see worker-op.c.
 */
#ifndef KTUNE_WORKER_OP_H
#define KTUNE_WORKER_OP_H

#include "ops/op.h"
#include "runtime/context.h"
#include "tuner/worker.h"

struct ktune_op_problem {
	const struct ktune_op *op;
	struct ktune_key key;          /* aligned: the class of the buffers as allocated */
	struct ktune_op_layout layout;
	struct ktune_op_call call;     /* the device buffers (after the offset) and sizes */
	int size[KTUNE_OP_MAX_BUFS];   /* bytes per element of each buffer */
	ktune_dtype type[KTUNE_OP_MAX_BUFS]; /* each buffer's element type */
	CUdeviceptr base[KTUNE_OP_MAX_BUFS];
	double *host[KTUNE_OP_MAX_BUFS]; /* inputs as rounded to the dtype, reference outputs: freed once uploaded */
	void *scratch;                 /* one buffer's bytes, for uploads */
	CUdeviceptr ref[KTUNE_OP_MAX_BUFS]; /* each output's reference, fp32 */
	CUmodule check_module[3];      /* check.cu for each element type an output has */
	CUfunction check[3];
	CUdeviceptr check_out;         /* struct check_out of check.cu */
	CUdeviceptr copy_src, copy_dst; /* the baseline: a copy of bytes(key) / 2 */
	size_t copy_bytes;
};

/*
 * Allocates the key's buffers (each shifted by `offset` elements: 1 makes
 * the unaligned class), fills the inputs with seeded random values and
 * computes the reference.  Returns KTUNE_ERR_INVALID for a bad key.
 */
int ktune__op_problem_open(ktune_ctx *ctx, const struct ktune_key *key, unsigned seed, int offset,
			   struct ktune_op_problem **out, struct ktune_err *e);
void ktune__op_problem_close(struct ktune_op_problem *p); /* NULL is a no-op */

/* NaN (all bits set) in every output before a run. */
int ktune__op_problem_poison(struct ktune_op_problem *p, struct ktune_err *e);
/* The outputs against the reference, each within its tolerance; NaN never passes. */
int ktune__op_problem_check(struct ktune_op_problem *p, struct ktune_check *out, struct ktune_err *e);
/* The baseline, as a ktune_launch_fn: the copy of as many bytes as the op moves. */
int ktune__op_problem_copy(void *arg, CUstream stream, struct ktune_err *e);

#endif
