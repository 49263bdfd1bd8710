/*
 * add.c - the op "add": z = x + y over n elements (the Triton tutorial's
 * vector add), f32, f16 or bf16; kernels/templates/add.cu.
 *
 * Key: dtype, n (tuned: its power-of-two bucket), the alignment class.
 * Buffers: x, y (inputs), z (output); 3 n elements moved.
 */
#include "ops/elementwise.h"
#include "runtime/op_run.h"

static const struct ktune_op_field fields[] = {
	{ "n", "elements (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
};

static const struct ktune_family families[] = {
	{ "add", "add.cu", "add.yaml", { "add_kernel" } },
};

static double bytes(const struct ktune_key *key)
{
	return 3.0 * (double)key->m * ktune__dtype_size(key->dtype);
}

static double flops(const struct ktune_key *key)
{
	return (double)key->m;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	*out = (struct ktune_op_layout){ 3, { { "x", 0, key->m }, { "y", 0, key->m }, { "z", 1, key->m } } };
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	(void)key;
	for (int64_t i = 0; i < call->size[0]; i++)
		b[2][i] = b[0][i] + b[1][i];
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	return ktune__ew_prune(key, c, key->m / ktune__ew_vec(key, c), why, len);
}

extern const struct ktune_op ktune__op_add;

static void geometry(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out)
{
	int vec = ktune__ew_vec(key, c);
	ktune__ew_geometry(c, (call->size[0] + vec - 1) / vec, sm_count, out, &ktune__op_add);
}

static void args(const struct ktune_key *key, const struct ktune_op_call *call, struct ktune_op_args *a)
{
	(void)key;
	a->n = 0;
	ktune__ew_arg_ptr(a, call->buf[0]);
	ktune__ew_arg_ptr(a, call->buf[1]);
	ktune__ew_arg_ptr(a, call->buf[2]);
	ktune__ew_arg_i64(a, call->size[0]);
}

const struct ktune_op ktune__op_add = {
	.name = "add",
	.summary = "z = x + y over n elements",
	.fields = fields,
	.nfields = 1,
	.families = families,
	.nfamilies = 1,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [f32, f16, bf16]\n"
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
	.defines = ktune__ew_defines,
	.geometry = geometry,
	.args = args,
	.default_config = ktune__ew_default_config,
	.distance = ktune__ew_distance,
};

ktune_status ktune_add(ktune_ctx *ctx, int64_t n, const void *x, const void *y, void *z,
		       ktune_dtype dtype, void *stream)
{
	struct ktune_key key = { .op = "add", .dtype = dtype, .m = n };
	struct ktune_op_call call = { .buf = { (uint64_t)x, (uint64_t)y, (uint64_t)z } };
	return ktune__op_run(ctx, &key, &call, stream);
}
