/*
 * softmax.c - the op "softmax": y = softmax(x) over the last dimension of
 * [rows, cols] (forward), or dx = y (dy - sum(y dy)) (backward); the Triton
 * tutorial's fused softmax.  kernels/templates/softmax.cu.
 *
 * Key: dtype and direction (compiled in), rows and cols (tuned: rows by
 * power-of-two bucket, cols exactly up to 65536), the alignment class;
 * row strides are runtime arguments.
 * Buffers: forward x -> y; backward y, dy -> dx.
 */
#include <stdio.h>

#include "ops/rowwise-ref.h"
#include "ops/rowwise.h"
#include "runtime/op_run.h"

static const char *const direction_choices[] = { "fwd", "bwd", NULL };

static const struct ktune_op_field fields[] = {
	{ "direction", "fwd: y = softmax(x); bwd: dx = y * (dy - sum(y * dy))", KTUNE_ROLE_COMPILED, -1,
	  direction_choices },
	{ "rows", "rows (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "cols", "the softmax's length (tuned exactly up to 65536)", KTUNE_ROLE_TUNED, 1, NULL },
};

static const struct ktune_family families[] = {
	{ "softmax", "softmax.cu", "softmax.yaml", { "softmax_kernel" } },
};

extern const struct ktune_op ktune__op_softmax;

static int backward(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_softmax, key, "direction") == 1;
}

static double bytes(const struct ktune_key *key)
{
	return (backward(key) ? 3.0 : 2.0) * (double)key->m * (double)key->n * ktune__dtype_size(key->dtype);
}

static double flops(const struct ktune_key *key)
{
	return 5.0 * (double)key->m * (double)key->n;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t n = key->m * key->n, ld = key->n;
	if (backward(key))
		*out = (struct ktune_op_layout){ 3, { { "y", 0, n, ld }, { "dy", 0, n, ld }, { "dx", 1, n, ld } } };
	else
		*out = (struct ktune_op_layout){ 2, { { "x", 0, n, ld }, { "y", 1, n, ld } } };
}

static void input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	/* backward: y is a distribution's values, of the order of 1 / cols */
	*lo = backward(key) && buf == 0 ? 0 : -4;
	*hi = backward(key) && buf == 0 ? 2.0 / (double)(key->n > 0 ? key->n : 1) : 4;
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	int64_t rows = call->size[0], cols = call->size[1];
	if (backward(key))
		ktune__ref_softmax_backward(b[0], cols, b[1], cols, b[2], cols, rows, cols);
	else
		ktune__ref_softmax(b[0], cols, b[1], cols, rows, cols);
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	int keep = (int)ktune__op_param(&ktune__op_softmax, c, "KEEP_EXP", 0);
	if (keep && (backward(key) || key->dtype == KTUNE_F32)) {
		snprintf(why, len, "KEEP_EXP is for the 16-bit forward (f32 keeps its exponentials in the row)");
		return 1;
	}
	/* rows held as loaded: x forward, y and dy backward; and as many prefetched; the exponentials in fp32 */
	int rows = (backward(key) ? 2 : 1) * (1 + (int)ktune__op_param(&ktune__op_softmax, c, "PREFETCH", 0));
	if (ktune__rw_prune(key, c, rows, keep, why, len))
		return 1;
	return ktune__rw_ring_prune(key, c, backward(key) ? 2 : 1, 0, 0, why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	int n = ktune__rw_defines(key, c, opts, max - 1);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DBACKWARD=%d", backward(key));
	return n;
}

static void geometry(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out)
{
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	ktune__rw_launch(&s, ktune__rw_clusters(&s, call->size[0], sm_count), out);
	out->smem = (unsigned)ktune__rw_ring_bytes(key, c, backward(key) ? 2 : 1, 0);
}

static void args(const struct ktune_key *key, const struct ktune_op_call *call, struct ktune_op_args *a)
{
	int bwd = backward(key), out = bwd ? 2 : 1;
	a->n = 0;
	ktune__ew_arg_ptr(a, call->buf[0]);
	ktune__ew_arg_ptr(a, bwd ? call->buf[1] : 0);
	ktune__ew_arg_ptr(a, call->buf[out]);
	ktune__ew_arg_i64(a, call->size[0]);
	ktune__ew_arg_i64(a, call->size[1]);
	ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
	ktune__ew_arg_i64(a, bwd ? ktune__op_ld(call, 1) : 0);
	ktune__ew_arg_i64(a, ktune__op_ld(call, out));
}

static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	(void)sm_count;
	return ktune__rw_default(&ktune__op_softmax, key, 0);
}

const struct ktune_op ktune__op_softmax = {
	.name = "softmax",
	.summary = "softmax over the rows of [rows, cols], forward or backward",
	.fields = fields,
	.nfields = 3,
	.families = families,
	.nfamilies = 1,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
		 "direction: [fwd, bwd]\n"
		 "shapes:\n"
		 "  - {rows: 4096, cols: [1024, 4096, 16384]}\n"
		 "  - {rows: 1024, cols: [32768, 131072]}\n",
	.key_bucket = ktune__rw_key_bucket,
	.bytes = bytes,
	.flops = flops,
	.layout = layout,
	.input_range = input_range,
	.reference = reference,
	.tolerance = ktune__ew_output_tolerance,
	.prune = prune,
	.defines = defines,
	.geometry = geometry,
	.args = args,
	.default_config = default_config,
	.distance = ktune__rw_distance,
};

static ktune_status run(ktune_ctx *ctx, int backward_pass, int64_t rows, int64_t cols, const void *in,
			int64_t ld_in, const void *dy, int64_t ld_dy, void *out, int64_t ld_out, ktune_dtype dtype,
			void *stream)
{
	struct ktune_key key = { .op = "softmax", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { 0 };
	const char *values[] = { backward_pass ? "bwd" : "fwd", NULL };
	const char *what = backward_pass ? "softmax backward" : "softmax";
	int nb = 0;
	call.buf[nb] = (uint64_t)in;
	call.ld[nb++] = ld_in;
	if (backward_pass) {
		call.buf[nb] = (uint64_t)dy;
		call.ld[nb++] = ld_dy;
	}
	call.buf[nb] = (uint64_t)out;
	call.ld[nb++] = ld_out;
	static const int all[] = { 0, 1, 2 };
	ktune_status rc = ktune__rw_check_strides(ctx, what, cols, &call, all, nb);
	if (rc)
		return rc;
	ktune__op_variant_set(&ktune__op_softmax, &key, values, NULL);
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_softmax(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx, void *y,
			   int64_t ldy, ktune_dtype dtype, void *stream)
{
	return run(ctx, 0, rows, cols, x, ldx, NULL, 0, y, ldy, dtype, stream);
}

ktune_status ktune_softmax_backward(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *y, int64_t ldy,
				    const void *dy, int64_t lddy, void *dx, int64_t lddx, ktune_dtype dtype,
				    void *stream)
{
	return run(ctx, 1, rows, cols, y, ldy, dy, lddy, dx, lddx, dtype, stream);
}
