/*
 * rmsnorm.c - the op "rmsnorm": RMSNorm over the last dimension of
 * [rows, cols] with a weight, optionally with the residual add fused in
 * (forward), and its gradient (backward: dx, and dw reduced over the rows
 * deterministically by a second kernel).  kernels/templates/rmsnorm.cu;
 * the forward passes also stream long rows (rmsnorm_stream.cu).
 *
 * Key: dtype and pass (compiled in: fwd, fwd_residual, bwd), rows and cols
 * (tuned: rows by power-of-two bucket, cols exactly up to 65536), the
 * alignment class; row strides and epsilon are runtime arguments.  cols up
 * to 131072.
 * Buffers: fwd x, w -> y, rstd; fwd_residual x, res, w -> y, rstd, h;
 * bwd h, w, rstd, dy -> dx, dw.  rstd is fp32.  w and dw may be NULL in a
 * call (KTUNE_OPTIONAL): the kernels read the context's ones, and without
 * dw the second kernel is not run; the weighted key's tuning serves both.
 */
#include <stdio.h>
#include <string.h>

#include "ops/rowwise-ref.h"
#include "ops/rowwise.h"
#include "runtime/op_run.h"

enum { FWD, FWD_RESIDUAL, BWD };

static const char *const pass_choices[] = { "fwd", "fwd_residual", "bwd", NULL };

static const struct ktune_op_field fields[] = {
	{ "pass", "fwd: y = x * rstd * w; fwd_residual: h = x + res first; bwd: dx and dw", KTUNE_ROLE_COMPILED,
	  -1, pass_choices },
	{ "rows", "rows (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "cols", "the normalised length (tuned exactly up to 65536)", KTUNE_ROLE_TUNED, 1, NULL },
};

enum { HELD, STREAM };

static const struct ktune_family families[] = {
	{ "rmsnorm", "rmsnorm.cu", "rmsnorm.yaml", { "rmsnorm_kernel", "rmsnorm_bwd_kernel", "rmsnorm_dw_kernel" } },
	{ "rmsnorm_stream", "rmsnorm_stream.cu", "rmsnorm_stream.yaml", { "rmsnorm_stream_kernel" } },
};

extern const struct ktune_op ktune__op_rmsnorm;

static int pass(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_rmsnorm, key, "pass");
}

/* The longest row: the backward's share of a thread in the registers of a cluster of 8 x 512 threads. */
#define MAX_COLS 131072

static int key_check(const struct ktune_key *key, struct ktune_err *e)
{
	if (key->n > MAX_COLS)
		return ktune__fail(e, KTUNE_ERR_INVALID, "rmsnorm: cols %lld is over %d, the longest row it holds",
				   (long long)key->n, MAX_COLS);
	return KTUNE_OK;
}

static double bytes(const struct ktune_key *key)
{
	double matrix = (double)key->m * (double)key->n * ktune__dtype_size(key->dtype);
	double vector = (double)key->n * ktune__dtype_size(key->dtype), stats = 4.0 * (double)key->m;
	switch (pass(key)) {
	case FWD: /* x in, y out, w, rstd */
		return 2 * matrix + vector + stats;
	case FWD_RESIDUAL: /* x, res in, h, y out */
		return 4 * matrix + vector + stats;
	default: /* h, dy in, dx out; w in, dw out; rstd */
		return 3 * matrix + 2 * vector + stats;
	}
}

static double flops(const struct ktune_key *key)
{
	return (pass(key) == BWD ? 8.0 : 4.0) * (double)key->m * (double)key->n;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t mat = key->m * key->n, ld = key->n, rows = key->m, cols = key->n;
	const struct ktune_op_buf w = KTUNE_OPTIONAL("w", 0, cols, KTUNE_OR_ONES);
	switch (pass(key)) {
	case FWD:
		*out = (struct ktune_op_layout){ 4, { { "x", 0, mat, ld }, w, { "y", 1, mat, ld },
						      { "rstd", 1, rows, 0, KTUNE_BUF_F32 } } };
		break;
	case FWD_RESIDUAL:
		*out = (struct ktune_op_layout){ 6, { { "x", 0, mat, ld }, { "res", 0, mat, ld }, w, { "y", 1, mat, ld },
						      { "rstd", 1, rows, 0, KTUNE_BUF_F32 }, { "h", 1, mat, ld } } };
		break;
	default:
		*out = (struct ktune_op_layout){ 6, { { "h", 0, mat, ld }, w, { "rstd", 0, rows, 0, KTUNE_BUF_F32 },
						      { "dy", 0, mat, ld }, { "dx", 1, mat, ld },
						      KTUNE_OPTIONAL("dw", 1, cols, KTUNE_OR_DISCARD) } };
	}
}

static void input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	struct ktune_op_layout l;
	layout(key, &l);
	const char *name = l.bufs[buf].name;
	*lo = -4;
	*hi = 4;
	if (!strcmp(name, "w")) { /* a trained norm's weight: near 1 */
		*lo = 0.5;
		*hi = 1.5;
	} else if (!strcmp(name, "rstd")) { /* 1 / rms of rows like x's */
		*lo = 0.3;
		*hi = 1.0;
	} else if (!strcmp(name, "dy")) {
		*lo = -1;
		*hi = 1;
	}
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	int64_t rows = call->size[0], cols = call->size[1];
	double eps = call->scalar[0];
	switch (pass(key)) {
	case FWD:
		ktune__ref_rmsnorm(b[0], cols, NULL, 0, b[1], eps, b[2], cols, b[3], NULL, 0, rows, cols);
		break;
	case FWD_RESIDUAL:
		ktune__ref_rmsnorm(b[0], cols, b[1], cols, b[2], eps, b[3], cols, b[4], b[5], cols, rows, cols);
		break;
	default:
		ktune__ref_rmsnorm_backward(b[0], cols, b[1], b[2], b[3], cols, b[4], cols, b[5], rows, cols);
	}
}

/* Bytes of the backward's shared memory before the ring: the block's groups' partials of dw. */
static int64_t bwd_smem(const struct ktune_rw_shape *s)
{
	return s->rows_per_block > 1 ? (int64_t)s->row_threads * s->items * s->vec * 4 : 0;
}

#define OP (&ktune__op_rmsnorm)

static int stream_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len)
{
	long reload = ktune__op_param(OP, c, "RELOAD", 0), unroll = ktune__op_param(OP, c, "UNROLL", 1);
	int res = pass(key) == FWD_RESIDUAL;
	if (pass(key) == BWD) {
		snprintf(why, len, "the stream family is forward only");
		return 1;
	}
	if (reload == 2 && res) {
		snprintf(why, len, "RELOAD=2 is for the pass without the residual");
		return 1;
	}
	/* softmax_stream's forward figures (src/ops/softmax.c); x and res at once with the residual */
	long need = res ? 40 + 16 * unroll : reload == 2 ? 32 + 18 * unroll : 40 + 10 * unroll;
	return ktune__rw_stream_prune(OP, key, c, need, 1, 1, why, len);
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	if (c->family == STREAM)
		return stream_prune(key, c, why, len);
	int bwd = pass(key) == BWD;
	/*
	 * Rows held as loaded: x (and res) forward; h and dy backward, with dw's
	 * fp32 sums; as many again when the next row is prefetched.  w passes
	 * through a vector at a time.
	 */
	int res = pass(key) == FWD_RESIDUAL, next = (int)ktune__op_param(&ktune__op_rmsnorm, c, "PREFETCH", 0);
	int rows = (bwd ? 2 : 1 + res) * (1 + next);
	if (ktune__rw_prune(key, c, rows, bwd ? 1 : 0, why, len))
		return 1;
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	/*
	 * What the estimate above misses: ptxas on sm_90 spilled every backward
	 * holding 64 elements of a row a thread, even at 255 registers (16 to
	 * 40 bytes), and none holding 32 within 128.
	 */
	if (bwd && s.items * s.vec > 48) {
		snprintf(why, len, "the backward with %d elements of a row a thread: ptxas spills", s.items * s.vec);
		return 1;
	}
	if (bwd && s.blocks_per_sm == 0) {
		snprintf(why, len, "the backward's partial rows of dw need a capped grid (BLOCKS_PER_SM > 0)");
		return 1;
	}
	if (bwd && bwd_smem(&s) > 48 * 1024) {
		snprintf(why, len, "%d groups' partials of dw over 48 KiB of shared memory", s.rows_per_block);
		return 1;
	}
	return ktune__rw_ring_prune(key, c, bwd ? 2 : 1 + res, bwd, bwd ? bwd_smem(&s) : 0, why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	/* the stream kernel sizes nothing by the row (no COLS) */
	int n = c->family == STREAM ? ktune__ew_defines(key, c, opts, max - 2) : ktune__rw_defines(key, c, opts, max - 2);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DRESIDUAL=%d", pass(key) == FWD_RESIDUAL);
	snprintf(opts[n++], 48, "-DBACKWARD=%d", pass(key) == BWD);
	return n;
}

static size_t workspace(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			int sm_count)
{
	if (pass(key) != BWD)
		return 0;
	return (size_t)ktune__rw_walk_clusters(key, c, call->size[0], sm_count) * (size_t)call->size[1] * sizeof(float);
}

static int steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
		 int sm_count, struct ktune_op_step *out)
{
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	int64_t rows = call->size[0], cols = call->size[1];
	struct ktune_op_args *a = &out[0].args;
	memset(out, 0, 2 * sizeof(*out));
	a->n = 0;
	if (pass(key) != BWD) {
		int res = pass(key) == FWD_RESIDUAL, w = res ? 2 : 1, y = w + 1;
		out[0].entry = 0;
		if (c->family == STREAM) {
			ktune__rw_stream_launch(OP, c, rows, sm_count, ktune__rw_stream_keep(OP, key, c, cols, 1),
						&out[0].launch);
		} else {
			ktune__rw_launch(&s, ktune__rw_clusters(&s, rows, sm_count), &out[0].launch);
			out[0].launch.smem = (unsigned)ktune__rw_ring_bytes(key, c, w, 0);
		}
		ktune__ew_arg_ptr(a, call->buf[0]);                 /* x */
		ktune__ew_arg_ptr(a, res ? call->buf[1] : 0);       /* res */
		ktune__ew_arg_ptr(a, call->buf[w]);                 /* w */
		ktune__ew_arg_ptr(a, call->buf[y]);                 /* y */
		ktune__ew_arg_ptr(a, call->buf[y + 1]);             /* rstd */
		ktune__ew_arg_ptr(a, res ? call->buf[5] : 0);       /* h_out */
		ktune__ew_arg_i64(a, rows);
		ktune__ew_arg_i64(a, cols);
		ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
		ktune__ew_arg_i64(a, res ? ktune__op_ld(call, 1) : 0);
		ktune__ew_arg_i64(a, ktune__op_ld(call, y));
		ktune__ew_arg_i64(a, res ? ktune__op_ld(call, 5) : 0);
		ktune__ew_arg_f32(a, (float)call->scalar[0]);
		return 1;
	}
	int64_t clusters = ktune__rw_walk_clusters(key, c, rows, sm_count);
	out[0].entry = 1;
	ktune__rw_launch(&s, clusters, &out[0].launch);
	out[0].launch.smem = (unsigned)(bwd_smem(&s) + ktune__rw_ring_bytes(key, c, 2, 1));
	ktune__ew_arg_ptr(a, call->buf[0]); /* h */
	ktune__ew_arg_ptr(a, call->buf[1]); /* w */
	ktune__ew_arg_ptr(a, call->buf[2]); /* rstd */
	ktune__ew_arg_ptr(a, call->buf[3]); /* dy */
	ktune__ew_arg_ptr(a, call->buf[4]); /* dx */
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__ew_arg_i64(a, rows);
	ktune__ew_arg_i64(a, cols);
	ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
	ktune__ew_arg_i64(a, ktune__op_ld(call, 3));
	ktune__ew_arg_i64(a, ktune__op_ld(call, 4));
	if (call->absent & 1u << 5) /* no dw wanted: its partials are left unsummed */
		return 1;

	a = &out[1].args;
	out[1].entry = 2;
	out[1].launch = (struct ktune_op_launch){ { (unsigned)((cols + 31) / 32), 1, 1 }, { 256, 1, 1 }, 0 };
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__ew_arg_i64(a, clusters);
	ktune__ew_arg_ptr(a, call->buf[5]); /* dw */
	ktune__ew_arg_i64(a, cols);
	return 2;
}

/*
 * The forward passes stream aligned rows of 8192 vectors and more (where a
 * held row needs a cluster): 512 threads, 2 vectors at once; without the
 * residual, x copied into shared memory with cp.async (RELOAD 2) in a
 * cluster of as many blocks as keep a chunk within 4096 vectors; with it,
 * h read again from global memory (RELOAD 0), chunks within 8192 vectors.
 * The H200's tunes of 1024 x 32768 and 256 x 131072 ranked these first or
 * within 3% of it (bench/results/h200-rmsnorm-stream.log).
 */
static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	struct ktune_config c;
	int res = pass(key) == FWD_RESIDUAL;
	(void)sm_count;
	if (pass(key) != BWD && key->aligned && key->n / (16 / ktune__dtype_size(key->dtype)) >= 8192 &&
	    !ktune__rw_stream_default(OP, key, STREAM, 512, 2, res ? 8192 : 4096, res ? 0 : 2, 16, &c))
		return c;
	return ktune__rw_default(&ktune__op_rmsnorm, key, pass(key) == BWD ? 2 : 0);
}

const struct ktune_op ktune__op_rmsnorm = {
	.name = "rmsnorm",
	.summary = "RMSNorm over the rows of [rows, cols] (residual add fused), forward or backward",
	.fields = fields,
	.nfields = 3,
	.families = families,
	.nfamilies = 2,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
		 "pass: [fwd, fwd_residual, bwd]\n"
		 "shapes:\n"
		 "  - {rows: 4096, cols: [1024, 4096, 8192]}\n"
		 "  - {rows: 1024, cols: 32768}\n",
	.key_check = key_check,
	.key_bucket = ktune__rw_key_bucket,
	.bytes = bytes,
	.flops = flops,
	.layout = layout,
	.input_range = input_range,
	.reference = reference,
	.tolerance = ktune__ew_output_tolerance,
	.prune = prune,
	.defines = defines,
	.steps = steps,
	.workspace = workspace,
	.default_config = default_config,
	.distance = ktune__rw_distance,
};

ktune_status ktune_rmsnorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
			   const void *residual, int64_t ld_residual, const void *weight, float eps, void *y,
			   int64_t ldy, float *rstd, void *h, int64_t ldh, ktune_dtype dtype, void *stream)
{
	struct ktune_key key = { .op = "rmsnorm", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { .scalar = { eps } };
	const char *values[] = { residual ? "fwd_residual" : "fwd", NULL };
	ktune_status rc;
	if (!(eps >= 0))
		return ktune__op_invalid(ctx, "rmsnorm: eps %g is not >= 0", (double)eps);
	if (residual) {
		static const int mats[] = { 0, 1, 3, 5 };
		call = (struct ktune_op_call){ .buf = { (uint64_t)x, (uint64_t)residual, (uint64_t)weight, (uint64_t)y,
							(uint64_t)rstd, (uint64_t)h },
					       .ld = { ldx, ld_residual, 0, ldy, 0, ldh }, .scalar = { eps } };
		if ((rc = ktune__rw_check_strides(ctx, "rmsnorm", cols, &call, mats, 4)))
			return rc;
	} else {
		static const int mats[] = { 0, 2 };
		if (h)
			return ktune__op_invalid(ctx, "rmsnorm: h is for the residual sum, and residual is NULL");
		call = (struct ktune_op_call){ .buf = { (uint64_t)x, (uint64_t)weight, (uint64_t)y, (uint64_t)rstd },
					       .ld = { ldx, 0, ldy }, .scalar = { eps } };
		if ((rc = ktune__rw_check_strides(ctx, "rmsnorm", cols, &call, mats, 2)))
			return rc;
	}
	ktune__op_variant_set(&ktune__op_rmsnorm, &key, values, NULL);
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_rmsnorm_backward(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *h, int64_t ldh,
				    const void *weight, const float *rstd, const void *dy, int64_t lddy, void *dx,
				    int64_t lddx, void *dweight, ktune_dtype dtype, void *stream)
{
	static const int mats[] = { 0, 3, 4 };
	struct ktune_key key = { .op = "rmsnorm", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { .buf = { (uint64_t)h, (uint64_t)weight, (uint64_t)rstd, (uint64_t)dy,
					       (uint64_t)dx, (uint64_t)dweight },
				      .ld = { ldh, 0, 0, lddy, lddx } };
	const char *values[] = { "bwd", NULL };
	ktune_status rc;
	if ((rc = ktune__rw_check_strides(ctx, "rmsnorm backward", cols, &call, mats, 3)))
		return rc;
	ktune__op_variant_set(&ktune__op_rmsnorm, &key, values, NULL);
	return ktune__op_run(ctx, &key, &call, stream);
}
