/*
 * layernorm.c - the op "layernorm": LayerNorm over the last dimension of
 * [rows, cols] with a weight and a bias (each optional), forward, and its
 * gradient (backward: dx, and dw and db reduced over the rows
 * deterministically by a second kernel).  kernels/templates/layernorm.cu.
 *
 * Key: dtype and pass (compiled in: fwd, bwd), rows and cols (tuned: rows
 * by power-of-two bucket, cols exactly up to 65536), the alignment class;
 * row strides and epsilon are runtime arguments.  cols up to 131072.
 * Buffers: fwd x, w, b -> y, mean, rstd; bwd x, w, mean, rstd, dy -> dx,
 * dw, db.  mean and rstd are fp32.  w, b, dw and db may be NULL in a call
 * (KTUNE_OPTIONAL): the kernels read the context's ones and zeros, a
 * gradient not wanted goes to its sink, and with neither dw nor db the
 * second kernel is not run; the affine key's tuning serves every case.
 */
#include <stdio.h>
#include <string.h>

#include "ops/rowwise-ref.h"
#include "ops/rowwise.h"
#include "runtime/op_run.h"

enum { FWD, BWD };

static const char *const pass_choices[] = { "fwd", "bwd", NULL };

static const struct ktune_op_field fields[] = {
	{ "pass", "fwd: y = (x - mean) * rstd * w + b; bwd: dx, dw and db", KTUNE_ROLE_COMPILED, -1,
	  pass_choices },
	{ "rows", "rows (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "cols", "the normalised length (tuned exactly up to 65536)", KTUNE_ROLE_TUNED, 1, NULL },
};

static const struct ktune_family families[] = {
	{ "layernorm", "layernorm.cu", "layernorm.yaml",
	  { "layernorm_kernel", "layernorm_bwd_kernel", "layernorm_dwb_kernel" } },
};

extern const struct ktune_op ktune__op_layernorm;

static int pass(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_layernorm, key, "pass");
}

/* The longest row: as rmsnorm's (the backward's fp32 sums take more registers: see the prune). */
#define MAX_COLS 131072

static int key_check(const struct ktune_key *key, struct ktune_err *e)
{
	if (key->n > MAX_COLS)
		return ktune__fail(e, KTUNE_ERR_INVALID, "layernorm: cols %lld is over %d, the longest row it holds",
				   (long long)key->n, MAX_COLS);
	return KTUNE_OK;
}

static double bytes(const struct ktune_key *key)
{
	double matrix = (double)key->m * (double)key->n * ktune__dtype_size(key->dtype);
	double vector = (double)key->n * ktune__dtype_size(key->dtype), stats = 8.0 * (double)key->m;
	if (pass(key) == FWD) /* x in, y out; w, b; mean, rstd */
		return 2 * matrix + 2 * vector + stats;
	return 3 * matrix + 3 * vector + stats; /* x, dy in, dx out; w in, dw, db out; mean, rstd */
}

static double flops(const struct ktune_key *key)
{
	return (pass(key) == BWD ? 11.0 : 7.0) * (double)key->m * (double)key->n;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t mat = key->m * key->n, ld = key->n, rows = key->m, cols = key->n;
	const struct ktune_op_buf w = KTUNE_OPTIONAL("w", 0, cols, KTUNE_OR_ONES);
	if (pass(key) == FWD)
		*out = (struct ktune_op_layout){ 6, { { "x", 0, mat, ld }, w, KTUNE_OPTIONAL("b", 0, cols, KTUNE_OR_ZEROS),
						      { "y", 1, mat, ld }, { "mean", 1, rows, 0, KTUNE_BUF_F32 },
						      { "rstd", 1, rows, 0, KTUNE_BUF_F32 } } };
	else
		*out = (struct ktune_op_layout){ 8, { { "x", 0, mat, ld }, w, { "mean", 0, rows, 0, KTUNE_BUF_F32 },
						      { "rstd", 0, rows, 0, KTUNE_BUF_F32 }, { "dy", 0, mat, ld },
						      { "dx", 1, mat, ld }, KTUNE_OPTIONAL("dw", 1, cols, KTUNE_OR_DISCARD),
						      KTUNE_OPTIONAL("db", 1, cols, KTUNE_OR_DISCARD) } };
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
	} else if (!strcmp(name, "b") || !strcmp(name, "dy")) {
		*lo = -1;
		*hi = 1;
	} else if (!strcmp(name, "mean")) { /* the mean of rows like x's: near 0 */
		*lo = -0.5;
		*hi = 0.5;
	} else if (!strcmp(name, "rstd")) { /* 1 / std of rows like x's */
		*lo = 0.3;
		*hi = 1.0;
	}
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	int64_t rows = call->size[0], cols = call->size[1];
	if (pass(key) == FWD)
		ktune__ref_layernorm(b[0], cols, b[1], b[2], call->scalar[0], b[3], cols, b[4], b[5], rows, cols);
	else
		ktune__ref_layernorm_backward(b[0], cols, b[1], b[2], b[3], b[4], cols, b[5], cols, b[6], b[7], rows,
					      cols);
}

/* Bytes of the backward's shared memory: the block's groups' partials of dw and db. */
static int64_t bwd_smem(const struct ktune_rw_shape *s)
{
	return s->rows_per_block > 1 ? 2 * (int64_t)s->row_threads * s->items * s->vec * 4 : 0;
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	int bwd = pass(key) == BWD;
	/*
	 * Rows held as loaded: x forward; x and dy backward, with dw's and db's
	 * fp32 sums; as many again when the next row is prefetched.  w and b
	 * pass through a vector at a time.
	 */
	int next = (int)ktune__op_param(&ktune__op_layernorm, c, "PREFETCH", 0);
	int rows = (bwd ? 2 : 1) * (1 + next);
	if (ktune__rw_prune(key, c, rows, bwd ? 2 : 0, why, len))
		return 1;
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	if (bwd && s.blocks_per_sm == 0) {
		snprintf(why, len, "the backward's partial rows of dw and db need a capped grid (BLOCKS_PER_SM > 0)");
		return 1;
	}
	if (bwd && bwd_smem(&s) > 48 * 1024) {
		snprintf(why, len, "%d groups' partials of dw and db over 48 KiB of shared memory", s.rows_per_block);
		return 1;
	}
	return ktune__rw_ring_prune(key, c, bwd ? 2 : 1, bwd ? 2 : 0, bwd ? bwd_smem(&s) : 0, why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	int n = ktune__rw_defines(key, c, opts, max - 1);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DBACKWARD=%d", pass(key) == BWD);
	return n;
}

static size_t workspace(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			int sm_count)
{
	if (pass(key) != BWD)
		return 0;
	return (size_t)ktune__rw_walk_clusters(key, c, call->size[0], sm_count) * 2 * (size_t)call->size[1] * sizeof(float);
}

static int steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
		 int sm_count, struct ktune_op_step *out)
{
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	int64_t rows = call->size[0], cols = call->size[1];
	struct ktune_op_args *a = &out[0].args;
	memset(out, 0, 2 * sizeof(*out));
	a->n = 0;
	if (pass(key) == FWD) {
		out[0].entry = 0;
		ktune__rw_launch(&s, ktune__rw_clusters(&s, rows, sm_count), &out[0].launch);
		out[0].launch.smem = (unsigned)ktune__rw_ring_bytes(key, c, 1, 0);
		ktune__ew_arg_ptr(a, call->buf[0]); /* x */
		ktune__ew_arg_ptr(a, call->buf[1]); /* w */
		ktune__ew_arg_ptr(a, call->buf[2]); /* b */
		ktune__ew_arg_ptr(a, call->buf[3]); /* y */
		ktune__ew_arg_ptr(a, call->buf[4]); /* mean */
		ktune__ew_arg_ptr(a, call->buf[5]); /* rstd */
		ktune__ew_arg_i64(a, rows);
		ktune__ew_arg_i64(a, cols);
		ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
		ktune__ew_arg_i64(a, ktune__op_ld(call, 3));
		ktune__ew_arg_f32(a, (float)call->scalar[0]);
		return 1;
	}
	int64_t clusters = ktune__rw_walk_clusters(key, c, rows, sm_count);
	out[0].entry = 1;
	ktune__rw_launch(&s, clusters, &out[0].launch);
	out[0].launch.smem = (unsigned)(bwd_smem(&s) + ktune__rw_ring_bytes(key, c, 2, 2));
	ktune__ew_arg_ptr(a, call->buf[0]); /* x */
	ktune__ew_arg_ptr(a, call->buf[1]); /* w */
	ktune__ew_arg_ptr(a, call->buf[2]); /* mean */
	ktune__ew_arg_ptr(a, call->buf[3]); /* rstd */
	ktune__ew_arg_ptr(a, call->buf[4]); /* dy */
	ktune__ew_arg_ptr(a, call->buf[5]); /* dx */
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__ew_arg_i64(a, rows);
	ktune__ew_arg_i64(a, cols);
	ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
	ktune__ew_arg_i64(a, ktune__op_ld(call, 4));
	ktune__ew_arg_i64(a, ktune__op_ld(call, 5));
	if ((call->absent & 3u << 6) == 3u << 6) /* neither dw nor db wanted: the partials are left unsummed */
		return 1;

	a = &out[1].args;
	out[1].entry = 2;
	out[1].launch = (struct ktune_op_launch){ { (unsigned)((2 * cols + 31) / 32), 1, 1 }, { 256, 1, 1 }, 0 };
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__ew_arg_i64(a, clusters);
	ktune__ew_arg_ptr(a, call->buf[6]); /* dw */
	ktune__ew_arg_ptr(a, call->buf[7]); /* db */
	ktune__ew_arg_i64(a, cols);
	return 2;
}

static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	(void)sm_count;
	return ktune__rw_default(&ktune__op_layernorm, key, pass(key) == BWD ? 2 : 0);
}

const struct ktune_op ktune__op_layernorm = {
	.name = "layernorm",
	.summary = "LayerNorm over the rows of [rows, cols], weight and bias optional, forward or backward",
	.fields = fields,
	.nfields = 3,
	.families = families,
	.nfamilies = 1,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
		 "pass: [fwd, bwd]\n"
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

ktune_status ktune_layernorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
			     const void *weight, const void *bias, float eps, void *y, int64_t ldy, float *mean,
			     float *rstd, ktune_dtype dtype, void *stream)
{
	static const int mats[] = { 0, 3 };
	struct ktune_key key = { .op = "layernorm", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { .buf = { (uint64_t)x, (uint64_t)weight, (uint64_t)bias, (uint64_t)y,
					       (uint64_t)mean, (uint64_t)rstd },
				      .ld = { ldx, 0, 0, ldy }, .scalar = { eps } };
	const char *values[] = { "fwd", NULL };
	ktune_status rc;
	if (!(eps >= 0))
		return ktune__op_invalid(ctx, "layernorm: eps %g is not >= 0", (double)eps);
	if ((rc = ktune__rw_check_strides(ctx, "layernorm", cols, &call, mats, 2)))
		return rc;
	ktune__op_variant_set(&ktune__op_layernorm, &key, values, NULL);
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_layernorm_backward(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
				      const void *weight, const float *mean, const float *rstd, const void *dy,
				      int64_t lddy, void *dx, int64_t lddx, void *dweight, void *dbias,
				      ktune_dtype dtype, void *stream)
{
	static const int mats[] = { 0, 4, 5 };
	struct ktune_key key = { .op = "layernorm", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { .buf = { (uint64_t)x, (uint64_t)weight, (uint64_t)mean, (uint64_t)rstd,
					       (uint64_t)dy, (uint64_t)dx, (uint64_t)dweight, (uint64_t)dbias },
				      .ld = { ldx, 0, 0, 0, lddy, lddx } };
	const char *values[] = { "bwd", NULL };
	ktune_status rc;
	if ((rc = ktune__rw_check_strides(ctx, "layernorm backward", cols, &call, mats, 3)))
		return rc;
	ktune__op_variant_set(&ktune__op_layernorm, &key, values, NULL);
	return ktune__op_run(ctx, &key, &call, stream);
}
