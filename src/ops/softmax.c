/*
 * softmax.c - the op "softmax": y = softmax(x) over the last dimension of
 * [rows, cols] (forward), or dx = y (dy - sum(y dy)) (backward); the Triton
 * tutorial's fused softmax.  Two families: a row held in registers
 * (kernels/templates/softmax.cu), and a row streamed, for rows too long
 * for registers (softmax_stream.cu).
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

enum { HELD, STREAM };

static const struct ktune_family families[] = {
	{ "softmax", "softmax.cu", "softmax.yaml", { "softmax_kernel" } },
	{ "softmax_stream", "softmax_stream.cu", "softmax_stream.yaml", { "softmax_stream_kernel" } },
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

#define OP (&ktune__op_softmax)

static int stream_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len)
{
	long reload = ktune__op_param(OP, c, "RELOAD", 0), unroll = ktune__op_param(OP, c, "UNROLL", 1);
	if (reload == 2 && backward(key)) {
		snprintf(why, len, "RELOAD=2 is for the forward pass");
		return 1;
	}
	/*
	 * Registers from ptxas's figures for sm_90 (`ktune compile --op softmax`,
	 * bf16, uncapped): forward 53-56, 64-72, 112-116 at UNROLL 2, 4, 8;
	 * with RELOAD=2 64, 103 and over 128; backward 64-72, 96-105 at 2, 4.
	 */
	long need = backward(key) ? 40 + 16 * unroll : reload == 2 ? 32 + 18 * unroll : 40 + 10 * unroll;
	return ktune__rw_stream_prune(OP, key, c, need, 1, backward(key) ? 2 : 1, why, len);
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	if (c->family == STREAM)
		return stream_prune(key, c, why, len);
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
	/* the stream kernel sizes nothing by the row (no COLS) */
	int n = c->family == STREAM ? ktune__ew_defines(key, c, opts, max - 1) : ktune__rw_defines(key, c, opts, max - 1);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DBACKWARD=%d", backward(key));
	return n;
}

static void geometry(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out)
{
	if (c->family == STREAM) {
		ktune__rw_stream_launch(OP, c, call->size[0], sm_count,
					ktune__rw_stream_keep(OP, key, c, call->size[1], backward(key) ? 2 : 1), out);
		return;
	}
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

/*
 * Aligned rows of 8192 vectors and more (where a row held in registers
 * needs a cluster) streamed: 256 threads in a cluster of as many blocks (up
 * to 8) as keep a chunk within 4096 vectors; forward 2 vectors at once,
 * the first read a cp.async into shared memory (RELOAD 2), backward 4 at
 * once, read again from global memory.  The H200's tunes of 1024 x 131072
 * and 256 x 262144 ranked these first or within 4% of it
 * (bench/results/h200-softmax-stream.log); the register family's best
 * there ran 1.4-1.6x slower or, backward at 262144, had no candidate.
 */
static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	struct ktune_config c;
	int bwd = backward(key);
	(void)sm_count;
	if (key->aligned && key->n / (16 / ktune__dtype_size(key->dtype)) >= 8192 &&
	    !ktune__rw_stream_default(OP, key, STREAM, 256, bwd ? 4 : 2, 4096, bwd ? 0 : 2, 16, &c))
		return c;
	return ktune__rw_default(&ktune__op_softmax, key, 0);
}

const struct ktune_op ktune__op_softmax = {
	.name = "softmax",
	.summary = "softmax over the rows of [rows, cols], forward or backward",
	.fields = fields,
	.nfields = 3,
	.families = families,
	.nfamilies = 2,
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
