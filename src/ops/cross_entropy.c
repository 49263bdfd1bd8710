/*
 * cross_entropy.c - the op "cross_entropy": the cross-entropy loss of the
 * rows of logits [rows, vocab] against int64 targets, with ignore_index,
 * label smoothing and logit soft-capping, reduced by mean, sum or none;
 * forward (loss and the rows' lse), backward (dlogits from the logits and
 * lse) and both fused in one read of the logits.  Two families: a row
 * held in registers (kernels/templates/cross_entropy.cu) or streamed with a
 * running max and sum (cross_entropy_stream.cu), sharing cross_entropy.cuh.
 *
 * Key: dtype, pass (fwd, bwd, fused), reduction (mean, sum, none),
 * smoothing and softcap (off, on) compiled in; rows and vocab tuned (rows by
 * power-of-two bucket, vocab exactly up to 65536); the alignment class of
 * the logits' rows.  Row strides, ignore_index, the smoothing, the cap and
 * the fused pass's dloss are runtime arguments.  vocab up to 262144.
 * Buffers: fwd logits, targets -> loss, lse; bwd logits, targets, lse,
 * dloss -> dlogits; fused logits, targets -> loss, dlogits.  loss, lse and
 * dloss are fp32, loss and dloss rows of them for none, else one; targets
 * int64.
 *
 * Kernels a call launches (the registry's steps, timed as one):
 * ce_count_kernel first when the gradient is of a mean (it needs the count
 * of rows not ignored), ce_kernel (ce_stream_kernel), then ce_reduce_kernel
 * for a mean or sum of a forward.  Their scratch (the context's, per stream): the count (16
 * bytes) and the rows' losses before they are reduced (4 bytes a row).
 * Scalars: call->scalar[0] the label smoothing, [1] the cap (0: none), [3]
 * the fused pass's dloss; call->offset the ignore_index (an int64).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise-ref.h"
#include "ops/rowwise.h"
#include "runtime/op_run.h"

enum { FWD, BWD, FUSED };
enum { MEAN, SUM, NONE }; /* as ktune_reduction */

static const char *const pass_choices[] = { "fwd", "bwd", "fused", NULL };
static const char *const reduction_choices[] = { "mean", "sum", "none", NULL };
static const char *const flag_choices[] = { "off", "on", NULL };

static const struct ktune_op_field fields[] = {
	{ "pass", "fwd: loss and lse; bwd: dlogits from lse; fused: loss and dlogits in one read", KTUNE_ROLE_COMPILED,
	  -1, pass_choices },
	{ "reduction", "mean over the rows not ignored, sum, or none (a loss a row)", KTUNE_ROLE_COMPILED, -1,
	  reduction_choices },
	{ "smoothing", "label smoothing (its eps a runtime argument)", KTUNE_ROLE_COMPILED, -1, flag_choices },
	{ "softcap", "logits soft-capped, cap tanh(x / cap) (cap a runtime argument)", KTUNE_ROLE_COMPILED, -1,
	  flag_choices },
	{ "rows", "rows (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "vocab", "classes, the row length (tuned exactly up to 65536)", KTUNE_ROLE_TUNED, 1, NULL },
};

/* Row kernels: a row held in registers (CE), or streamed with a running max and sum (STREAM). */
enum { CE, STREAM };

static const struct ktune_family families[] = {
	{ "cross_entropy", "cross_entropy.cu", "cross_entropy.yaml",
	  { "ce_kernel", "ce_count_kernel", "ce_reduce_kernel" }, .shifted_rows = 1 },
	{ "cross_entropy_stream", "cross_entropy_stream.cu", "cross_entropy_stream.yaml",
	  { "ce_stream_kernel", "ce_count_kernel", "ce_reduce_kernel" } },
};

extern const struct ktune_op ktune__op_cross_entropy;

#define OP (&ktune__op_cross_entropy)

static int pass(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_cross_entropy, key, "pass");
}

static int reduction(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_cross_entropy, key, "reduction");
}

static int flag(const struct ktune_key *key, const char *name)
{
	return ktune__op_variant_index(&ktune__op_cross_entropy, key, name) == 1;
}

/* The longest row: 32 elements a thread in the registers of a cluster of 8 blocks of 1024 (16-bit). */
#define MAX_COLS 262144

/* Scratch: the count of rows not ignored (an int64, 16 bytes kept), then the rows' losses. */
#define COUNT_BYTES 16

static int key_check(const struct ktune_key *key, struct ktune_err *e)
{
	if (key->n > MAX_COLS)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cross_entropy: vocab %lld is over %d, the longest row it holds",
				   (long long)key->n, MAX_COLS);
	return KTUNE_OK;
}

/* Fewest bytes moved: the logits read (and the gradient written), the targets, the fp32 vectors. */
static double bytes(const struct ktune_key *key)
{
	double matrix = (double)key->m * (double)key->n * ktune__dtype_size(key->dtype), rows = (double)key->m;
	double loss = reduction(key) == NONE ? 4 * rows : 4;
	switch (pass(key)) {
	case FWD: /* logits, targets in; loss, lse out */
		return matrix + 8 * rows + loss + 4 * rows;
	case BWD: /* logits, targets, lse, dloss in; dlogits out */
		return 2 * matrix + 8 * rows + 4 * rows + loss;
	default: /* logits, targets in; loss, dlogits out */
		return 2 * matrix + 8 * rows + loss;
	}
}

static double flops(const struct ktune_key *key)
{
	double per = pass(key) == FWD ? 6 : pass(key) == BWD ? 6 : 11;
	if (flag(key, "softcap"))
		per += pass(key) == FUSED ? 12 : 6;
	return per * (double)key->m * (double)key->n;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t mat = key->m * key->n, ld = key->n, rows = key->m, loss = reduction(key) == NONE ? rows : 1;
	switch (pass(key)) {
	case FWD:
		*out = (struct ktune_op_layout){ 4, { { "logits", 0, mat, ld }, { "targets", 0, rows, 0, KTUNE_BUF_I64 },
						      { "loss", 1, loss, 0, KTUNE_BUF_F32 },
						      { "lse", 1, rows, 0, KTUNE_BUF_F32 } } };
		break;
	case BWD:
		*out = (struct ktune_op_layout){ 5, { { "logits", 0, mat, ld }, { "targets", 0, rows, 0, KTUNE_BUF_I64 },
						      { "lse", 0, rows, 0, KTUNE_BUF_F32 },
						      { "dloss", 0, loss, 0, KTUNE_BUF_F32 }, { "dlogits", 1, mat, ld } } };
		break;
	default:
		*out = (struct ktune_op_layout){ 4, { { "logits", 0, mat, ld }, { "targets", 0, rows, 0, KTUNE_BUF_I64 },
						      { "loss", 1, loss, 0, KTUNE_BUF_F32 }, { "dlogits", 1, mat, ld } } };
	}
}

/*
 * The gradient's scale in the tuner's problem: dlogits of about 1 (p is of
 * the order of 1 / vocab), so that the check's error relative to max(1,
 * |reference|) sees them; a mean divides by the rows.
 */
static double problem_dloss(const struct ktune_key *key, int64_t rows, int64_t cols)
{
	return (double)(cols > 16 ? cols : 16) / 16 * (reduction(key) == MEAN ? (double)rows : 1);
}

static void input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	struct ktune_op_layout l;
	double v = (double)(key->n > 0 ? key->n : 1);
	layout(key, &l);
	const char *name = l.bufs[buf].name;
	*lo = -4;
	*hi = 4;
	if (!strcmp(name, "targets")) { /* classes, and 1 in 17 ignored (-1, the problem's ignore_index) */
		*lo = -v / 16;
		*hi = v;
	} else if (!strcmp(name, "lse")) { /* near the lse of logits in [-4, 4]: log v + log(e^4 - e^-4) / 8 */
		*lo = log(v) + 1.5;
		*hi = log(v) + 2.5;
	} else if (!strcmp(name, "dloss")) {
		*hi = problem_dloss(key, key->m, key->n);
		*lo = *hi / 2;
	}
}

static void problem_scalars(const struct ktune_key *key, struct ktune_op_call *call)
{
	call->scalar[0] = flag(key, "smoothing") ? 0.1 : 0;
	call->scalar[1] = flag(key, "softcap") ? 3 : 0; /* logits in [-4, 4] reach where tanh bends */
	call->scalar[2] = 0;
	call->scalar[3] = problem_dloss(key, call->size[0], call->size[1]);
	call->offset = (uint64_t)(int64_t)-1; /* ignore_index: what input_range's negative targets become */
}

/* The targets of a problem's double buffer as int64. */
static int64_t *targets_of(const double *t, int64_t rows)
{
	int64_t *out = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(*out));
	for (int64_t r = 0; out && r < rows; r++)
		out[r] = (int64_t)t[r];
	return out;
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	int64_t rows = call->size[0], cols = call->size[1], ignore = (int64_t)call->offset;
	double eps = call->scalar[0], cap = call->scalar[1];
	ktune_reduction red = (ktune_reduction)reduction(key);
	int none = red == KTUNE_REDUCTION_NONE;
	int64_t *t = targets_of(b[1], rows);
	double *loss = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(double));
	double *lse = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(double));
	if (!t || !loss || !lse) { /* no reference: NaN, which never passes */
		struct ktune_op_layout l;
		layout(key, &l);
		for (int i = 0; i < l.nbufs; i++)
			for (int64_t j = 0; l.bufs[i].output && j < l.bufs[i].elems; j++)
				b[i][j] = NAN;
		goto out;
	}
	switch (pass(key)) {
	case FWD:
		ktune__ref_cross_entropy(b[0], cols, t, ignore, eps, cap, none ? b[2] : loss, b[3], rows, cols);
		if (!none)
			b[2][0] = ktune__ref_cross_entropy_reduce(loss, t, ignore, red, rows);
		break;
	case BWD:
		ktune__ref_cross_entropy_backward(b[0], cols, t, ignore, eps, cap, b[2], red, b[3], b[4], cols, rows,
						  cols);
		break;
	default: {
		double dloss = call->scalar[3];
		ktune__ref_cross_entropy(b[0], cols, t, ignore, eps, cap, none ? b[2] : loss, lse, rows, cols);
		if (!none)
			b[2][0] = ktune__ref_cross_entropy_reduce(loss, t, ignore, red, rows);
		/* every row's dloss is the one scalar: for none, the gradient of dloss times their sum */
		double *g = none ? malloc((size_t)(rows > 0 ? rows : 1) * sizeof(double)) : &dloss;
		if (!g) {
			for (int64_t j = 0; j < rows * cols; j++)
				b[3][j] = NAN;
			break;
		}
		for (int64_t r = 0; none && r < rows; r++)
			g[r] = dloss;
		ktune__ref_cross_entropy_backward(b[0], cols, t, ignore, eps, cap, lse, red, g, b[3], cols, rows, cols);
		if (g != &dloss)
			free(g);
	}
	}
out:
	free(t);
	free(loss);
	free(lse);
}

/* dlogits by the dtype's tolerance; the fp32 losses and lse, from fp32 math on the same inputs, tighter. */
static double tolerance(const struct ktune_key *key, int buf)
{
	struct ktune_op_layout l;
	layout(key, &l);
	return l.bufs[buf].type == KTUNE_BUF_F32 ? 1e-4 : ktune__ew_tolerance(key->dtype);
}

static int stream_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len)
{
	long reload = ktune__op_param(OP, c, "RELOAD", 0), unroll = ktune__op_param(OP, c, "UNROLL", 1);
	if (reload && pass(key) != FUSED) {
		snprintf(why, len, "RELOAD is for the fused pass (the others read a row once)");
		return 1;
	}
	/*
	 * About 7 registers a vector of UNROLL and 16 for the rest, 36 fused
	 * (both passes' state): what ptxas used on sm_90 for bf16 (forward
	 * 30, 44, 64 at UNROLL 2, 4, 8; fused 48, 64 and spills at 8).
	 */
	long need = (pass(key) == FUSED ? 36 : 16) + 7 * unroll;
	return ktune__rw_stream_prune(OP, key, c, need, 0, 1, why, len);
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why,
		 size_t len)
{
	(void)sm_count;
	if (c->family == STREAM)
		return stream_prune(key, c, why, len);
	int keep = (int)ktune__op_param(&ktune__op_cross_entropy, c, "KEEP", 0);
	int next = (int)ktune__op_param(&ktune__op_cross_entropy, c, "PREFETCH", 0);
	if (keep && pass(key) != FUSED) {
		snprintf(why, len, "KEEP is for the fused pass (the others take each exponential once)");
		return 1;
	}
	/* the row as loaded, and the next one prefetched; KEEP's fp32 row (exp(z - max), or z capped) */
	return ktune__rw_prune(key, c, 1 + next, keep, why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	/* the stream kernel sizes nothing by the row (no COLS) */
	int n = c->family == STREAM ? ktune__ew_defines(key, c, opts, max - 4) : ktune__rw_defines(key, c, opts, max - 4);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DPASS=%d", pass(key));
	snprintf(opts[n++], 48, "-DREDUCTION=%d", reduction(key));
	snprintf(opts[n++], 48, "-DSMOOTHING=%d", flag(key, "smoothing"));
	snprintf(opts[n++], 48, "-DSOFTCAP=%d", flag(key, "softcap"));
	return n;
}

/* Whether the call counts the rows not ignored first, and whether it reduces the rows' losses after. */
static int counts(const struct ktune_key *key)
{
	return pass(key) != FWD && reduction(key) == MEAN;
}

static int reduces(const struct ktune_key *key)
{
	return pass(key) != BWD && reduction(key) != NONE;
}

static size_t workspace(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			int sm_count)
{
	(void)c;
	(void)sm_count;
	if (reduces(key))
		return COUNT_BYTES + (size_t)call->size[0] * sizeof(float);
	return counts(key) ? COUNT_BYTES : 0;
}

/* ce_count_kernel's and ce_reduce_kernel's one block. */
static const struct ktune_op_launch one_block = { { 1, 1, 1 }, { 1024, 1, 1 }, 0 };

static int steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
		 int sm_count, struct ktune_op_step *out)
{
	int64_t rows = call->size[0], cols = call->size[1], ignore = (int64_t)call->offset;
	int p = pass(key), n = 0, dx = p == BWD ? 4 : 3;
	uint64_t count = call->workspace, losses = call->workspace + COUNT_BYTES;
	float cap = (float)call->scalar[1];
	struct ktune_op_args *a;

	memset(out, 0, 3 * sizeof(*out));
	if (counts(key)) {
		out[n].entry = 1;
		out[n].launch = one_block;
		a = &out[n++].args;
		ktune__ew_arg_ptr(a, call->buf[1]); /* targets */
		ktune__ew_arg_i64(a, rows);
		ktune__ew_arg_i64(a, ignore);
		ktune__ew_arg_ptr(a, count);
	}

	out[n].entry = 0;
	if (c->family == STREAM) { /* keep_bytes: RELOAD's chunk where it fits, else 0 (global memory again) */
		ktune__rw_stream_launch(OP, c, rows, sm_count, ktune__rw_stream_keep(OP, key, c, cols, 1), &out[n].launch);
	} else {
		struct ktune_rw_shape s = ktune__rw_shape(key, c);
		ktune__rw_launch(&s, ktune__rw_clusters(&s, rows, sm_count), &out[n].launch);
	}
	a = &out[n++].args;
	ktune__ew_arg_ptr(a, call->buf[0]);                                    /* logits */
	ktune__ew_arg_ptr(a, call->buf[1]);                                    /* targets */
	ktune__ew_arg_ptr(a, p == FWD ? call->buf[3] : p == BWD ? call->buf[2] : 0); /* lse */
	ktune__ew_arg_ptr(a, p == BWD ? call->buf[3] : 0);                     /* dloss */
	ktune__ew_arg_ptr(a, p == BWD ? 0 : reduction(key) == NONE ? call->buf[2] : losses); /* loss_rows */
	ktune__ew_arg_ptr(a, p == FWD ? 0 : call->buf[dx]);                   /* dlogits */
	ktune__ew_arg_ptr(a, counts(key) ? count : 0);
	ktune__ew_arg_i64(a, rows);
	ktune__ew_arg_i64(a, cols);
	ktune__ew_arg_i64(a, ktune__op_ld(call, 0));
	ktune__ew_arg_i64(a, p == FWD ? 0 : ktune__op_ld(call, dx));
	ktune__ew_arg_i64(a, ignore);
	ktune__ew_arg_f32(a, (float)call->scalar[0]);
	ktune__ew_arg_f32(a, cap);
	ktune__ew_arg_f32(a, cap > 0 ? (float)(1.0 / call->scalar[1]) : 0.0f);
	ktune__ew_arg_f32(a, (float)call->scalar[3]);
	if (c->family == STREAM) /* keep_bytes: RELOAD's chunk fits them, or the kernel reads global memory */
		ktune__ew_arg_i64(a, out[n - 1].launch.smem);

	if (reduces(key)) {
		out[n].entry = 2;
		out[n].launch = one_block;
		a = &out[n++].args;
		ktune__ew_arg_ptr(a, losses);
		ktune__ew_arg_ptr(a, call->buf[1]); /* targets */
		ktune__ew_arg_i64(a, rows);
		ktune__ew_arg_i64(a, ignore);
		ktune__ew_arg_ptr(a, call->buf[2]); /* loss */
	}
	return n;
}

/*
 * Rows of 1024 vectors and more streamed (4 vectors a thread, faster than
 * a row held in registers on every measured vocabulary), shorter ones held
 * in registers, several rows a block.  The streamed default: 256 threads
 * loading 4 vectors at once; fused, the first read a cp.async into shared
 * memory (RELOAD 2) 2 vectors at once, the second from there, in a cluster
 * of as many blocks (up to 8) as keep a block's chunk within 4096 vectors
 * (64 KiB: three blocks an SM); past 262144 bf16 columns, where even 8
 * blocks' chunks do not fit, the second read from global memory (RELOAD
 * 0).  What the H200's sweeps picked for vocabularies of 32000 to 262144
 * (bench/results/h200-cross-entropy-sweep.log: RELOAD 2 and UNROLL 2 won
 * all four fused keys).  Fused, registers for 16 warps an SM: the chunks
 * allow no more than 24, and at 32 (64 registers) the variants with
 * smoothing and the cap spill (test-compile-rowwise).
 */
static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	struct ktune_config c;
	int fused = pass(key) == FUSED;
	(void)sm_count;
	if (key->n / (16 / ktune__dtype_size(key->dtype)) >= 1024 &&
	    !ktune__rw_stream_default(OP, key, STREAM, 256, fused ? 2 : 4, fused ? 4096 : INT64_MAX, 2 * fused,
				      fused ? 16 : 32, &c))
		return c;
	return ktune__rw_default(&ktune__op_cross_entropy, key, 0);
}

const struct ktune_op ktune__op_cross_entropy = {
	.name = "cross_entropy",
	.summary = "cross-entropy loss of the rows of logits [rows, vocab] against int64 targets, fwd, bwd or fused",
	.fields = fields,
	.nfields = 6,
	.families = families,
	.nfamilies = 2,
	.dtypes = ktune__ew_dtypes,
	.ndtypes = 3,
	.suite = "dtypes: [bf16]\n"
		 "pass: [fwd, fused]\n"
		 "shapes:\n"
		 "  - {rows: 8192, vocab: [32000, 50257, 128256]}\n"
		 "  - {rows: 4096, vocab: 262144}\n",
	.key_check = key_check,
	.key_bucket = ktune__rw_key_bucket,
	.bytes = bytes,
	.flops = flops,
	.layout = layout,
	.input_range = input_range,
	.problem_scalars = problem_scalars,
	.reference = reference,
	.tolerance = tolerance,
	.prune = prune,
	.defines = defines,
	.steps = steps,
	.workspace = workspace,
	.default_config = default_config,
	.distance = ktune__rw_distance,
};

/* ------------------------------------------------------------ the public functions */

/* The checks every call shares, its key and the scalars; KTUNE_OK or the error recorded in ctx. */
static ktune_status prepare(ktune_ctx *ctx, const char *what, int p, int64_t rows, int64_t vocab,
			    int64_t ignore_index, float label_smoothing, float softcap, ktune_reduction red,
			    ktune_dtype dtype, struct ktune_key *key, struct ktune_op_call *call)
{
	if (!(label_smoothing >= 0 && label_smoothing <= 1))
		return ktune__op_invalid(ctx, "%s: label_smoothing %g is not in [0, 1]", what, (double)label_smoothing);
	if (!(softcap >= 0 && softcap <= 3.4e38f))
		return ktune__op_invalid(ctx, "%s: softcap %g is not a finite value >= 0 (0: none)", what,
					 (double)softcap);
	if (red != KTUNE_REDUCTION_MEAN && red != KTUNE_REDUCTION_SUM && red != KTUNE_REDUCTION_NONE)
		return ktune__op_invalid(ctx, "%s: reduction %d is not mean (0), sum (1) or none (2)", what, (int)red);
	*key = (struct ktune_key){ .op = "cross_entropy", .dtype = dtype, .m = rows, .n = vocab };
	const char *values[] = { pass_choices[p], reduction_choices[red], label_smoothing > 0 ? "on" : "off",
				 softcap > 0 ? "on" : "off" };
	ktune__op_variant_set(&ktune__op_cross_entropy, key, values, NULL);
	call->scalar[0] = label_smoothing;
	call->scalar[1] = softcap;
	call->offset = (uint64_t)ignore_index;
	return KTUNE_OK;
}

/*
 * dlogits may be logits itself (the same row stride), not overlap it
 * otherwise: rows are read whole before they are written, but only by the
 * threads that write them.
 */
static ktune_status check_in_place(ktune_ctx *ctx, const char *what, int64_t rows, int64_t vocab, const void *logits,
				   int64_t ld_logits, const void *dlogits, int64_t ld_dlogits, ktune_dtype dtype)
{
	uintptr_t a = (uintptr_t)logits, b = (uintptr_t)dlogits;
	int size = ktune__dtype_size(dtype);
	if (!a || !b || rows <= 0 || vocab <= 0 || size <= 0)
		return KTUNE_OK; /* what ktune__op_run refuses or launches nothing for */
	if (a == b)
		return ld_logits == ld_dlogits ? KTUNE_OK
					       : ktune__op_invalid(ctx, "%s: dlogits is logits with another row stride "
									"(%lld, not %lld)", what, (long long)ld_dlogits,
								   (long long)ld_logits);
	uintptr_t a_end = a + (uintptr_t)((rows - 1) * ld_logits + vocab) * (uintptr_t)size;
	uintptr_t b_end = b + (uintptr_t)((rows - 1) * ld_dlogits + vocab) * (uintptr_t)size;
	if (a < b_end && b < a_end)
		return ktune__op_invalid(ctx, "%s: dlogits overlaps logits without being it", what);
	return KTUNE_OK;
}

ktune_status ktune_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits, int64_t ld_logits,
				 const int64_t *targets, int64_t ignore_index, float label_smoothing, float softcap,
				 ktune_reduction reduction, float *loss, float *lse, ktune_dtype dtype, void *stream)
{
	static const int mats[] = { 0 };
	struct ktune_op_call call = { .buf = { (uint64_t)logits, (uint64_t)targets, (uint64_t)loss, (uint64_t)lse },
				      .ld = { ld_logits } };
	struct ktune_key key;
	ktune_status rc;
	if ((rc = prepare(ctx, "cross_entropy", FWD, rows, vocab, ignore_index, label_smoothing, softcap, reduction,
			  dtype, &key, &call)) ||
	    (rc = ktune__rw_check_strides(ctx, "cross_entropy", vocab, &call, mats, 1)))
		return rc;
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_cross_entropy_backward(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
					  int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
					  float label_smoothing, float softcap, ktune_reduction reduction,
					  const float *lse, const float *dloss, void *dlogits, int64_t ld_dlogits,
					  ktune_dtype dtype, void *stream)
{
	static const int mats[] = { 0, 4 };
	struct ktune_op_call call = { .buf = { (uint64_t)logits, (uint64_t)targets, (uint64_t)lse, (uint64_t)dloss,
					       (uint64_t)dlogits },
				      .ld = { ld_logits, 0, 0, 0, ld_dlogits } };
	const char *what = "cross_entropy backward";
	struct ktune_key key;
	ktune_status rc;
	if ((rc = prepare(ctx, what, BWD, rows, vocab, ignore_index, label_smoothing, softcap, reduction, dtype,
			  &key, &call)) ||
	    (rc = ktune__rw_check_strides(ctx, what, vocab, &call, mats, 2)) ||
	    (rc = check_in_place(ctx, what, rows, vocab, logits, ld_logits, dlogits, ld_dlogits, dtype)))
		return rc;
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_cross_entropy_fused(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
				       int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
				       float label_smoothing, float softcap, ktune_reduction reduction, float dloss,
				       float *loss, void *dlogits, int64_t ld_dlogits, ktune_dtype dtype, void *stream)
{
	static const int mats[] = { 0, 3 };
	struct ktune_op_call call = { .buf = { (uint64_t)logits, (uint64_t)targets, (uint64_t)loss, (uint64_t)dlogits },
				      .ld = { ld_logits, 0, 0, ld_dlogits } };
	const char *what = "cross_entropy fused";
	struct ktune_key key;
	ktune_status rc;
	if (!isfinite(dloss))
		return ktune__op_invalid(ctx, "%s: dloss %g is not finite", what, (double)dloss);
	if ((rc = prepare(ctx, what, FUSED, rows, vocab, ignore_index, label_smoothing, softcap, reduction, dtype,
			  &key, &call)) ||
	    (rc = ktune__rw_check_strides(ctx, what, vocab, &call, mats, 2)) ||
	    (rc = check_in_place(ctx, what, rows, vocab, logits, ld_logits, dlogits, ld_dlogits, dtype)))
		return rc;
	call.scalar[3] = dloss;
	return ktune__op_run(ctx, &key, &call, stream);
}
