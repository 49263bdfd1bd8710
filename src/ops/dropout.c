/*
 * dropout.c - the op "dropout": y = keep(i) ? x / (1 - p) : 0 over n
 * elements, the mask drawn by Philox4x32-10 from (seed, offset, i), so no
 * mask is stored: the backward pass is the same kernel on dy with the same
 * seed and offset, and every config drops the same elements (tuning cannot
 * change the numbers); kernels/templates/dropout.cu.
 *
 * Key: dtype, n (tuned: its power-of-two bucket), the alignment class; p,
 * seed and offset are runtime arguments (the tuner uses p = 0.1).
 * Buffers: x -> y (forward) or dy -> dx (backward): 2 n elements moved.
 */
#include "ops/elementwise-ref.h"
#include "ops/elementwise.h"
#include "runtime/op_run.h"

static const struct ktune_op_field fields[] = {
	{ "n", "elements (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
};

static const struct ktune_family families[] = {
	{ "dropout", "dropout.cu", "dropout.yaml", { "dropout_kernel" } },
};

extern const struct ktune_op ktune__op_dropout;

static double bytes(const struct ktune_key *key)
{
	return 2.0 * (double)key->m * ktune__dtype_size(key->dtype);
}

static double flops(const struct ktune_key *key)
{
	return 2.0 * (double)key->m;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	*out = (struct ktune_op_layout){ 2, { { "x", 0, key->m }, { "y", 1, key->m } } };
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	(void)key;
	ktune__ref_dropout(b[0], b[1], (long)call->size[0], call->p, call->seed, call->offset);
}

/* Items of the kernel: chunks of max(VEC, 4) elements, whole Philox draws. */
static int64_t chunks(const struct ktune_key *key, const struct ktune_config *c, int64_t n)
{
	int vec = ktune__ew_vec(key, c), chunk = vec > 4 ? vec : 4;
	return (n + chunk - 1) / chunk;
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	return ktune__ew_prune(key, c, chunks(key, c, key->m), why, len);
}

static void geometry(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out)
{
	ktune__ew_geometry(c, chunks(key, c, call->size[0]), sm_count, out, &ktune__op_dropout);
}

static void args(const struct ktune_key *key, const struct ktune_op_call *call, struct ktune_op_args *a)
{
	(void)key;
	a->n = 0;
	ktune__ew_arg_ptr(a, call->buf[0]);
	ktune__ew_arg_ptr(a, call->buf[1]);
	ktune__ew_arg_i64(a, call->size[0]);
	ktune__ew_arg_f32(a, call->p);
	ktune__ew_arg_u64(a, call->seed);
	ktune__ew_arg_u64(a, call->offset);
}

const struct ktune_op ktune__op_dropout = {
	.name = "dropout",
	.summary = "y = x / (1 - p) where a Philox draw from (seed, offset, i) keeps it, else 0",
	.fields = fields,
	.nfields = 1,
	.families = families,
	.nfamilies = 1,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
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

ktune_status ktune_dropout(ktune_ctx *ctx, int64_t n, float p, uint64_t seed, uint64_t offset,
			   const void *x, void *y, ktune_dtype dtype, void *stream)
{
	struct ktune_key key = { .op = "dropout", .dtype = dtype, .m = n };
	struct ktune_op_call call = { .buf = { (uint64_t)x, (uint64_t)y }, .p = p, .seed = seed,
				      .offset = offset };
	if (!(p >= 0 && p < 1))
		return ktune__op_invalid(ctx, "dropout: p = %g is not in [0, 1)", (double)p);
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_dropout_backward(ktune_ctx *ctx, int64_t n, float p, uint64_t seed, uint64_t offset,
				    const void *dy, void *dx, ktune_dtype dtype, void *stream)
{
	/* the mask is a function of (seed, offset, i): the forward kernel on dy is the backward */
	return ktune_dropout(ctx, n, p, seed, offset, dy, dx, dtype, stream);
}
