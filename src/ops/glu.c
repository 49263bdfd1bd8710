/*
 * glu.c - the op "glu": gated linear units over [rows, cols], forward
 * out = act(a) * b and backward da, db from dout, with act = silu
 * (SwiGLU), erf GELU or tanh GELU (GeGLU); kernels/templates/glu.cu.
 *
 * Key: dtype, act and direction (compiled in), rows and cols (tuned: their
 * power-of-two buckets), the alignment class (pointers and row strides
 * multiples of 16 bytes).  Row strides are runtime arguments, so a and b
 * may be two tensors or the two halves of one [rows, 2*cols] tensor.
 * Buffers as the tuner lays them out (packed): forward a, b -> out;
 * backward a, b, dout -> da, db.
 */
#include <stdio.h>

#include "ops/elementwise-ref.h"
#include "ops/elementwise.h"
#include "runtime/op_run.h"

static const char *const act_choices[] = { "swiglu", "geglu", "geglu_tanh", NULL };
static const char *const direction_choices[] = { "fwd", "bwd", NULL };

static const struct ktune_op_field fields[] = {
	{ "act", "swiglu (silu), geglu (erf GELU) or geglu_tanh", KTUNE_ROLE_COMPILED, -1, act_choices },
	{ "direction", "fwd: out = act(a) * b; bwd: da, db from dout", KTUNE_ROLE_COMPILED, -1,
	  direction_choices },
	{ "rows", "rows (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "cols", "columns of a, b and out (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 1, NULL },
};

static const struct ktune_family families[] = {
	{ "glu", "glu.cu", "glu.yaml", { "glu_kernel" } },
};

extern const struct ktune_op ktune__op_glu;

static int backward(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_glu, key, "direction") == 1;
}

static double bytes(const struct ktune_key *key)
{
	return (backward(key) ? 5.0 : 3.0) * (double)key->m * (double)key->n * ktune__dtype_size(key->dtype);
}

static double flops(const struct ktune_key *key)
{
	return 10.0 * (double)key->m * (double)key->n;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t e = key->m * key->n, ld = key->n;
	if (backward(key))
		*out = (struct ktune_op_layout){ 5,
						 { { "a", 0, e, ld }, { "b", 0, e, ld }, { "dout", 0, e, ld },
						   { "da", 1, e, ld }, { "db", 1, e, ld } } };
	else
		*out = (struct ktune_op_layout){ 3, { { "a", 0, e, ld }, { "b", 0, e, ld }, { "out", 1, e, ld } } };
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	int act = ktune__op_variant_index(&ktune__op_glu, key, "act");
	long n = (long)(call->size[0] * call->size[1]); /* packed: the tuner's layout */
	if (backward(key))
		ktune__ref_glu(b[0], b[1], b[2], b[3], b[4], n, act, 1);
	else
		ktune__ref_glu(b[0], b[1], NULL, b[2], NULL, n, act, 0);
}

static int64_t vectors(const struct ktune_key *key, const struct ktune_config *c, int64_t rows, int64_t cols)
{
	int vec = ktune__ew_vec(key, c);
	return rows * ((cols + vec - 1) / vec);
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	return ktune__ew_prune(key, c, vectors(key, c, key->m, key->n), why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	int n = ktune__ew_defines(key, c, opts, max - 2);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DACT=%d", ktune__op_variant_index(&ktune__op_glu, key, "act"));
	snprintf(opts[n++], 48, "-DBACKWARD=%d", backward(key));
	return n;
}

static void geometry(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out)
{
	ktune__ew_geometry(c, vectors(key, c, call->size[0], call->size[1]), sm_count, out, &ktune__op_glu);
}

static void args(const struct ktune_key *key, const struct ktune_op_call *call, struct ktune_op_args *a)
{
	int bwd = backward(key);
	a->n = 0;
	ktune__ew_arg_ptr(a, call->buf[0]);                   /* a */
	ktune__ew_arg_ptr(a, call->buf[1]);                   /* b */
	ktune__ew_arg_ptr(a, bwd ? call->buf[2] : 0);         /* dout */
	ktune__ew_arg_ptr(a, bwd ? call->buf[3] : call->buf[2]); /* out_a */
	ktune__ew_arg_ptr(a, bwd ? call->buf[4] : 0);         /* out_b */
	ktune__ew_arg_i64(a, call->size[0]);
	ktune__ew_arg_i64(a, call->size[1]);
	ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
	ktune__ew_arg_i64(a, ktune__op_ld(call, 1));
	ktune__ew_arg_i64(a, bwd ? ktune__op_ld(call, 2) : 0);
	ktune__ew_arg_i64(a, bwd ? ktune__op_ld(call, 3) : ktune__op_ld(call, 2));
	ktune__ew_arg_i64(a, bwd ? ktune__op_ld(call, 4) : 0);
}

const struct ktune_op ktune__op_glu = {
	.name = "glu",
	.summary = "SwiGLU / GeGLU over [rows, cols]: out = act(a) * b, or da, db from dout",
	.fields = fields,
	.nfields = 4,
	.families = families,
	.nfamilies = 1,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
		 "act: [swiglu, geglu, geglu_tanh]\n"
		 "direction: [fwd, bwd]\n"
		 "shapes:\n"
		 "  - {rows: 1024, cols: 4096}\n"
		 "  - {rows: [4096, 8192], cols: 14336}\n",
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

static const char *act_name(ktune_glu_act act)
{
	return act == KTUNE_SWIGLU ? "swiglu" : act == KTUNE_GEGLU ? "geglu" : act == KTUNE_GEGLU_TANH ? "geglu_tanh" : "?";
}

static int check_strides(int64_t cols, const int64_t *ld, int n)
{
	for (int i = 0; i < n; i++)
		if (ld[i] < cols)
			return -1;
	return 0;
}

ktune_status ktune_glu(ktune_ctx *ctx, ktune_glu_act act, int64_t rows, int64_t cols, const void *a,
		       int64_t lda, const void *b, int64_t ldb, void *out, int64_t ldo, ktune_dtype dtype,
		       void *stream)
{
	struct ktune_key key = { .op = "glu", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { .buf = { (uint64_t)a, (uint64_t)b, (uint64_t)out },
				      .ld = { lda, ldb, ldo } };
	const char *values[] = { act_name(act), "fwd", NULL, NULL };
	if (ktune__op_variant_set(&ktune__op_glu, &key, values, NULL))
		return ktune__op_invalid(ctx, "glu: act %d is not a ktune_glu_act", (int)act);
	if (check_strides(cols, call.ld, 3))
		return ktune__op_invalid(ctx, "glu: a row stride is less than cols = %lld", (long long)cols);
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_glu_backward(ktune_ctx *ctx, ktune_glu_act act, int64_t rows, int64_t cols,
				const void *a, int64_t lda, const void *b, int64_t ldb, const void *dout,
				int64_t ld_dout, void *da, int64_t ld_da, void *db, int64_t ld_db,
				ktune_dtype dtype, void *stream)
{
	struct ktune_key key = { .op = "glu", .dtype = dtype, .m = rows, .n = cols };
	struct ktune_op_call call = { .buf = { (uint64_t)a, (uint64_t)b, (uint64_t)dout, (uint64_t)da,
					       (uint64_t)db },
				      .ld = { lda, ldb, ld_dout, ld_da, ld_db } };
	const char *values[] = { act_name(act), "bwd", NULL, NULL };
	if (ktune__op_variant_set(&ktune__op_glu, &key, values, NULL))
		return ktune__op_invalid(ctx, "glu: act %d is not a ktune_glu_act", (int)act);
	if (check_strides(cols, call.ld, 5))
		return ktune__op_invalid(ctx, "glu backward: a row stride is less than cols = %lld",
					 (long long)cols);
	return ktune__op_run(ctx, &key, &call, stream);
}
