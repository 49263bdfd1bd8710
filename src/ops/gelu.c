/*
 * gelu.c - the op "gelu": y = gelu(x) (forward) or dx = dy * gelu'(x)
 * (backward) over n elements, with the exact (erf) or the tanh
 * approximation; kernels/templates/gelu.cu.
 *
 * Key: dtype, approx and direction (compiled in), n (tuned: its
 * power-of-two bucket), the alignment class.
 * Buffers: forward x -> y; backward x, dy -> dx.
 */
#include <stdio.h>

#include "ops/elementwise-ref.h"
#include "ops/elementwise.h"
#include "runtime/op_run.h"

static const char *const approx_choices[] = { "erf", "tanh", NULL };
static const char *const direction_choices[] = { "fwd", "bwd", NULL };

static const struct ktune_op_field fields[] = {
	{ "approx", "erf (exact) or tanh", KTUNE_ROLE_COMPILED, -1, approx_choices },
	{ "direction", "fwd: y = gelu(x); bwd: dx = dy * gelu'(x)", KTUNE_ROLE_COMPILED, -1,
	  direction_choices },
	{ "n", "elements (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
};

static const struct ktune_family families[] = {
	{ "gelu", "gelu.cu", "gelu.yaml", { "gelu_kernel" } },
};

extern const struct ktune_op ktune__op_gelu;

static int backward(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_gelu, key, "direction") == 1;
}

static double bytes(const struct ktune_key *key)
{
	return (backward(key) ? 3.0 : 2.0) * (double)key->m * ktune__dtype_size(key->dtype);
}

static double flops(const struct ktune_key *key)
{
	return 10.0 * (double)key->m;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	if (backward(key))
		*out = (struct ktune_op_layout){ 3, { { "x", 0, key->m }, { "dy", 0, key->m }, { "dx", 1, key->m } } };
	else
		*out = (struct ktune_op_layout){ 2, { { "x", 0, key->m }, { "y", 1, key->m } } };
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	int approx = ktune__op_variant_index(&ktune__op_gelu, key, "approx");
	if (backward(key))
		ktune__ref_gelu(b[0], b[1], b[2], (long)call->size[0], approx, 1);
	else
		ktune__ref_gelu(b[0], NULL, b[1], (long)call->size[0], approx, 0);
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	return ktune__ew_prune(key, c, key->m / ktune__ew_vec(key, c), why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	int n = ktune__ew_defines(key, c, opts, max - 2);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DAPPROX=%d", ktune__op_variant_index(&ktune__op_gelu, key, "approx"));
	snprintf(opts[n++], 48, "-DBACKWARD=%d", backward(key));
	return n;
}

static void geometry(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out)
{
	int vec = ktune__ew_vec(key, c);
	ktune__ew_geometry(c, (call->size[0] + vec - 1) / vec, sm_count, out, &ktune__op_gelu);
}

static void args(const struct ktune_key *key, const struct ktune_op_call *call, struct ktune_op_args *a)
{
	int bwd = backward(key);
	a->n = 0;
	ktune__ew_arg_ptr(a, call->buf[0]);
	ktune__ew_arg_ptr(a, bwd ? call->buf[1] : 0);
	ktune__ew_arg_ptr(a, bwd ? call->buf[2] : call->buf[1]);
	ktune__ew_arg_i64(a, call->size[0]);
}

const struct ktune_op ktune__op_gelu = {
	.name = "gelu",
	.summary = "y = gelu(x) or dx = dy * gelu'(x), exact or tanh, over n elements",
	.fields = fields,
	.nfields = 3,
	.families = families,
	.nfamilies = 1,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
		 "approx: [erf, tanh]\n"
		 "direction: [fwd, bwd]\n"
		 "shapes:\n"
		 "  - {n: [1048576, 16777216, 67108864]}\n",
	.key_bucket = ktune__ew_key_bucket,
	.bytes = bytes,
	.flops = flops,
	.layout = layout,
	.input_range = ktune__ew_input_range,
	.reference = reference,
	.tolerance = ktune__ew_output_tolerance,
	.prune = prune,
	.defines = defines,
	.geometry = geometry,
	.args = args,
	.default_config = ktune__ew_default_config,
	.distance = ktune__ew_distance,
};

static ktune_status run(ktune_ctx *ctx, int64_t n, const void *x, const void *dy, void *out,
			ktune_gelu_approx approx, ktune_dtype dtype, void *stream)
{
	struct ktune_key key = { .op = "gelu", .dtype = dtype, .m = n };
	struct ktune_op_call call = { .buf = { (uint64_t)x, (uint64_t)dy, (uint64_t)out } };
	const char *values[] = { approx == KTUNE_GELU_TANH ? "tanh" : approx == KTUNE_GELU_ERF ? "erf" : "?",
				 dy ? "bwd" : "fwd", NULL };
	struct ktune_err e;
	if (!dy) { /* forward: x -> y */
		call.buf[1] = (uint64_t)out;
		call.buf[2] = 0;
	}
	if (ktune__op_variant_set(&ktune__op_gelu, &key, values, &e))
		return ktune__op_invalid(ctx, "gelu: approx %d is not KTUNE_GELU_ERF or KTUNE_GELU_TANH", (int)approx);
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_gelu(ktune_ctx *ctx, int64_t n, const void *x, void *y, ktune_gelu_approx approx,
			ktune_dtype dtype, void *stream)
{
	return run(ctx, n, x, NULL, y, approx, dtype, stream);
}

ktune_status ktune_gelu_backward(ktune_ctx *ctx, int64_t n, const void *x, const void *dy, void *dx,
				 ktune_gelu_approx approx, ktune_dtype dtype, void *stream)
{
	if (!dy)
		return ktune__op_invalid(ctx, "gelu backward: dy is NULL");
	return run(ctx, n, x, dy, dx, approx, dtype, stream);
}
