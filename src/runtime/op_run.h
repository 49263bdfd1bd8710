/*
 * op_run.h - how an op's public function (src/ops/<op>.c) runs a call: the
 * one runtime entry point the ops use.  No CUDA types here, so the op files
 * stay free of the driver.
 */
#ifndef KTUNE_OP_RUN_H
#define KTUNE_OP_RUN_H

#include "ktune.h"
#include "ops/op.h"

/*
 * Runs one call of key's op: checks the key, sets its alignment class from
 * the call's buffers and row strides, buckets it as the op tunes it, finds
 * (or compiles) the kernel of its config and launches it on `stream`.
 * key holds the call's exact sizes, which become call->size; a size of 0
 * (no elements) launches nothing.  Records a failure in the context
 * (ktune_errmsg) and returns its status.  Thread-safe.
 */
ktune_status ktune__op_run(ktune_ctx *ctx, struct ktune_key *key, struct ktune_op_call *call,
			   void *stream);

/* Records "op: message" as the context's last error; returns KTUNE_ERR_INVALID. */
ktune_status ktune__op_invalid(ktune_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
