/*
 * attention.c - the op "attention": flash attention, O = softmax(scale Q
 * K^T + mask) V with the log-sum-exp of every row (FlashAttention-2's
 * forward, kernels/templates/attention.cu, and on sm_90 FlashAttention-3's,
 * attention_wgmma.cu), and its gradients dQ, dK, dV (the backward,
 * attention_bwd.cu, and on sm_90 attention_wgmma_bwd.cu; atomic or
 * deterministic): the key, the table entry and the public functions.  Each pass's problem, prune and launch are
 * attention-fwd.c's and attention-bwd.c's.
 *
 * Key: dtype, pass (fwd, bwd, bwd_det), head dim, mask (none, causal) and
 * the GQA ratio's power-of-two bucket (compiled in, or for the ratio only
 * told apart: the kernels take the exact ratio as an argument); sq, sk and
 * bh = batch x query heads (tuned by power-of-two bucket); the alignment
 * class.  Exact lengths, heads, strides and the scale are runtime
 * arguments: a call carries its heads and strides in call->iarg (attention.h),
 * the tuner's problem none (then the pass lays its buffers out itself).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention-ref.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "runtime/op_run.h"

static const char *const pass_choices[] = { "fwd", "bwd", "bwd_det", NULL };
static const char *const hdim_choices[] = { "128", "256", "64", NULL };
static const char *const mask_choices[] = { "none", "causal", NULL };
static const char *const gqa_choices[] = { "1", "2", "4", "8", "16", NULL };

static const struct ktune_op_field fields[] = {
	{ "pass", "fwd: O and the log-sum-exp of each row; bwd: dQ, dK, dV (dQ by fp32 atomics); bwd_det: the same, "
		  "bit-identical run to run", KTUNE_ROLE_COMPILED, -1, pass_choices },
	{ "hdim", "head dim D (the backward: 64 and 128)", KTUNE_ROLE_COMPILED, -1, hdim_choices },
	{ "mask", "none, or causal (aligned bottom-right: query i sees keys j <= i + sk - sq)", KTUNE_ROLE_COMPILED,
	  -1, mask_choices },
	{ "gqa", "query heads per K/V head, by power-of-two bucket (16: 16 or more)", KTUNE_ROLE_TUNED, -1,
	  gqa_choices },
	{ "sq", "query length (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "sk", "key length (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 1, NULL },
	{ "bh", "batch x query heads (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 2, NULL },
};

static const struct ktune_family families[] = {
	[KTUNE_ATTN_FAMILY_FWD] = { "attention", "attention.cu", "attention.yaml", { "attention_fwd_kernel" } },
	[KTUNE_ATTN_FAMILY_BWD] = { "attention_bwd", "attention_bwd.cu", "attention_bwd.yaml",
				    { "attention_bwd_pre_kernel", "attention_bwd_kernel", "attention_bwd_dq_kernel" } },
	/* the forward on Hopper: wgmma, producer and consumer warpgroups, setmaxnreg */
	[KTUNE_ATTN_FAMILY_WGMMA] = { "attention_wgmma", "attention_wgmma.cu", "attention_wgmma.yaml",
				      { "attention_wgmma_fwd_kernel" }, "sm_90a" },
	/* the backward on Hopper: attention_bwd's pre and dq kernels around a wgmma main kernel */
	[KTUNE_ATTN_FAMILY_WGMMA_BWD] = { "attention_wgmma_bwd", "attention_wgmma_bwd.cu", "attention_wgmma_bwd.yaml",
					  { "attention_bwd_pre_kernel", "attention_wgmma_bwd_kernel",
					    "attention_bwd_dq_kernel" },
					  "sm_90a" },
};

static const ktune_dtype dtypes[] = { KTUNE_BF16, KTUNE_F16 };

/* The longest sequence: the kernels' row and key indices and their differences stay in int. */
#define MAX_LEN (INT64_C(1) << 30)
/* Most batch x heads: grid y and z are at most 65535 each. */
#define MAX_BH (INT64_C(1) << 26)

enum ktune_attn_pass ktune__attn_pass(const struct ktune_key *key)
{
	int i = ktune__op_variant_index(&ktune__op_attention, key, "pass");
	return i == 1 ? KTUNE_ATTN_BWD : i == 2 ? KTUNE_ATTN_BWD_DET : KTUNE_ATTN_FWD;
}

int ktune__attn_head_dim(const struct ktune_key *key)
{
	static const int dims[] = { 128, 256, 64 };
	int i = ktune__op_variant_index(&ktune__op_attention, key, "hdim");
	return i < 0 ? 128 : dims[i];
}

int ktune__attn_causal(const struct ktune_key *key)
{
	return ktune__op_variant_index(&ktune__op_attention, key, "mask") == 1;
}

int64_t ktune__attn_gqa(const struct ktune_key *key)
{
	int i = ktune__op_variant_index(&ktune__op_attention, key, "gqa");
	return i < 0 ? 1 : INT64_C(1) << i;
}

static int backward(const struct ktune_key *key)
{
	return ktune__attn_pass(key) != KTUNE_ATTN_FWD;
}

static int key_check(const struct ktune_key *key, struct ktune_err *e)
{
	if (key->m > MAX_LEN || key->n > MAX_LEN)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: sq = %lld, sk = %lld: lengths are at most %lld",
				   (long long)key->m, (long long)key->n, (long long)MAX_LEN);
	if (key->k > MAX_BH)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: bh = %lld is over %lld", (long long)key->k,
				   (long long)MAX_BH);
	if (backward(key) && ktune__attn_head_dim(key) == 256)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: the backward takes head dims 64 and 128, not 256");
	return KTUNE_OK;
}

static int64_t pow2_ceil(int64_t n)
{
	int64_t b = 1;
	while (b < n)
		b <<= 1;
	return b;
}

static void key_bucket(struct ktune_key *key)
{
	key->m = pow2_ceil(key->m);
	key->n = pow2_ceil(key->n);
	key->k = pow2_ceil(key->k);
}

static double bytes(const struct ktune_key *key)
{
	double es = ktune__dtype_size(key->dtype), d = ktune__attn_head_dim(key), bh = (double)key->k;
	double kv_heads = bh / (double)ktune__attn_gqa(key) > 1 ? bh / (double)ktune__attn_gqa(key) : 1;
	double q_side = bh * (double)key->m * d * es, kv_side = kv_heads * (double)key->n * d * es;
	double stats = 4 * bh * (double)key->m;
	/* forward: q in, o out, k and v in, lse out; backward: q, o, dO in, dQ out, k, v in, dK, dV out, lse in */
	return backward(key) ? 4 * q_side + 4 * kv_side + stats : 2 * q_side + 2 * kv_side + stats;
}

static double flops(const struct ktune_key *key)
{
	/* the forward's two products, the backward's five (S, dP, dV, dK, dQ): 2 flops a multiply-add each */
	double pairs = ktune__attn_visible_pairs(key->m, key->n, ktune__attn_causal(key));
	return (backward(key) ? 10.0 : 4.0) * (double)key->k * ktune__attn_head_dim(key) * pairs;
}

static double distance(const struct ktune_key *a, const struct ktune_key *b)
{
	double dq = log((double)a->m) - log((double)b->m), dk = log((double)a->n) - log((double)b->n);
	double dh = log((double)a->k) - log((double)b->k);
	return dq * dq + dk * dk + 0.25 * dh * dh + (a->aligned != b->aligned ? 0.01 : 0);
}

/* ------------------------------------------------------------ shared by the passes */

void ktune__attn_tuner_heads(int64_t bh, int64_t *batch, int64_t *hq)
{
	*batch = 1;
	*hq = bh;
	while (*hq > 32768 && *hq % 2 == 0) {
		*hq /= 2;
		*batch *= 2;
	}
}

void ktune__attn_call_dims(const struct ktune_op_call *call, int first, int n, const int64_t (*tuner)[3],
			   int64_t *batch, int64_t *hq, int64_t *hkv, int64_t (*st)[3])
{
	if (call->iarg[KTUNE_ATTN_IARG_HQ]) {
		*hq = call->iarg[KTUNE_ATTN_IARG_HQ];
		*hkv = call->iarg[KTUNE_ATTN_IARG_HKV];
		*batch = call->size[2] / *hq;
		for (int t = 0; t < n; t++)
			memcpy(st[t], &call->iarg[first + 3 * t], 3 * sizeof(int64_t));
		return;
	}
	ktune__attn_tuner_heads(call->size[2], batch, hq);
	*hkv = *hq;
	for (int t = 0; t < n; t++)
		memcpy(st[t], tuner[t], 3 * sizeof(int64_t));
}

double ktune__attn_scale(const struct ktune_key *key, const struct ktune_op_call *call)
{
	return call->iarg[KTUNE_ATTN_IARG_HQ] ? call->scalar[0] : 1 / sqrt((double)ktune__attn_head_dim(key));
}

void ktune__attn_arg_i32(struct ktune_op_args *a, int v)
{
	a->argv[a->n] = a->slot[a->n];
	memcpy(a->slot[a->n++], &v, sizeof(v));
}

struct ktune_config ktune__attn_config(int family, const char *const *names, const long *values, int n)
{
	const struct ktune_space *sp = ktune__op_space(&ktune__op_attention, family, NULL);
	struct ktune_config c = { .family = family };
	for (int i = 0; sp && i < sp->nparams; i++) {
		long want = sp->params[i].values[0];
		for (int j = 0; j < n; j++)
			if (!strcmp(sp->params[i].name, names[j]))
				want = values[j];
		c.v[i] = ktune__space_nearest(sp, i, want);
	}
	return c;
}

/* ------------------------------------------------------------ the table entry: each pass's side */

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	if (backward(key))
		ktune__attn_bwd_layout(key, out);
	else
		ktune__attn_fwd_layout(key, out);
}

static void input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	if (backward(key)) {
		ktune__attn_bwd_input_range(key, buf, lo, hi);
		return;
	}
	/* q and k wide enough that scale q.k (scale 1 / sqrt(D)) spreads over a few units: softmax not flat */
	*lo = buf == 2 ? -1 : -2;
	*hi = buf == 2 ? 1 : 2;
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	(void)call; /* the tuner's problem: the passes' layouts, the scale 1 / sqrt(D) */
	if (backward(key))
		ktune__attn_bwd_reference(key, b);
	else
		ktune__attn_fwd_reference(key, b);
}

static double tolerance(const struct ktune_key *key, int buf)
{
	/*
	 * The forward's o: P rounds to the element type before P V (2^-9
	 * relative in bf16, 2^-11 in f16), then O itself; |O| <= max |v| = 1.
	 * lse is fp32 from fp32 scores, ex2 and lg2 (about 2^-22 relative
	 * each).  The backward's gradients: P and dS round to the element type
	 * before their products (sums of many such terms), then the gradient.
	 */
	if (!backward(key))
		return buf == 4 ? 1e-4 : key->dtype == KTUNE_BF16 ? 1.2e-2 : 3e-3;
	return key->dtype == KTUNE_BF16 ? 3e-2 : 6e-3;
}

/* Whether a family computes the key's pass: either of the backward's, or either of the forward's. */
static int family_of_pass(const struct ktune_key *key, int family)
{
	return backward(key) ? family == KTUNE_ATTN_FAMILY_BWD || family == KTUNE_ATTN_FAMILY_WGMMA_BWD
			     : family == KTUNE_ATTN_FAMILY_FWD || family == KTUNE_ATTN_FAMILY_WGMMA;
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why, size_t len)
{
	(void)sm_count;
	if (!family_of_pass(key, c->family)) {
		snprintf(why, len, "family %s is not the %s pass's", families[c->family].name,
			 backward(key) ? "backward" : "forward");
		return 1;
	}
	return backward(key) ? ktune__attn_bwd_prune(key, c, why, len) : ktune__attn_fwd_prune(key, c, why, len);
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	if (!family_of_pass(key, c->family))
		return -1;
	return backward(key) ? ktune__attn_bwd_defines(key, c, opts, max) : ktune__attn_fwd_defines(key, c, opts, max);
}

static int steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
		 int sm_count, struct ktune_op_step *out)
{
	return backward(key) ? ktune__attn_bwd_steps(key, c, call, sm_count, out)
			     : ktune__attn_fwd_steps(key, c, call, out);
}

static size_t workspace(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			int sm_count)
{
	return backward(key) ? ktune__attn_bwd_workspace(key, c, call, sm_count) : 0;
}

static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	(void)sm_count;
	return backward(key) ? ktune__attn_bwd_default(key) : ktune__attn_fwd_default(key);
}

/*
 * On sm_90 each pass's default is its wgmma family's (attention_wgmma,
 * attention_wgmma_bwd), where the family's prune keeps one for the key.
 */
static int arch_default(const struct ktune_key *key, int sm_count, const char *arch, struct ktune_config *out)
{
	int family = backward(key) ? KTUNE_ATTN_FAMILY_WGMMA_BWD : KTUNE_ATTN_FAMILY_WGMMA;
	if (!ktune__op_family_runs(&ktune__op_attention, family, arch))
		return 0;
	return backward(key) ? ktune__attn_bwd_wgmma_default(key, sm_count, out)
			     : ktune__attn_fwd_wgmma_default(key, out);
}

const struct ktune_op ktune__op_attention = {
	.name = "attention",
	.summary = "flash attention: softmax(scale Q K^T + mask) V and the log-sum-exp, and the gradients",
	.fields = fields,
	.nfields = 7,
	.families = families,
	.nfamilies = 4,
	.dtypes = dtypes,
	.ndtypes = 2,
	.suite = "dtypes: [bf16]\n"
		 "pass: [fwd, bwd, bwd_det]\n"
		 "hdim: [128, 64]\n"
		 "mask: [none, causal]\n"
		 "shapes:\n"
		 "  - {sq: 1024, sk: 1024, bh: 256}\n"
		 "  - {sq: 4096, sk: 4096, bh: 64}\n",
	.key_check = key_check,
	.key_bucket = key_bucket,
	.bytes = bytes,
	.flops = flops,
	.layout = layout,
	.input_range = input_range,
	.reference = reference,
	.tolerance = tolerance,
	.prune = prune,
	.defines = defines,
	.steps = steps,
	.workspace = workspace,
	.default_config = default_config,
	.arch_default = arch_default,
	.distance = distance,
};

/* ------------------------------------------------------------ the public functions */

/* Strides of a tensor [b, s, h, D]: the caller's, or packed (BSHD) for NULL. */
static void strides_or_packed(const int64_t *given, int64_t s, int64_t h, int64_t d, int64_t out[3])
{
	if (given) {
		memcpy(out, given, 3 * sizeof(int64_t));
		return;
	}
	out[0] = s * h * d;
	out[1] = h * d;
	out[2] = d;
}

/* Whether a tensor's rows are 16-byte aligned: its pointer, and each stride of a dimension longer than 1. */
static int rows_aligned(const void *p, const int64_t st[3], int64_t b, int64_t s, int64_t h)
{
	return (uintptr_t)p % 16 == 0 && (b < 2 || st[0] % 8 == 0) && (s < 2 || st[1] % 8 == 0) &&
	       (h < 2 || st[2] % 8 == 0);
}

/*
 * What both passes check, then the key (the pass's variant, exact sizes)
 * and the call's buffers, sizes, scale and heads; strides go in below.
 */
static int common_call(const struct ktune_attention_args *a, const char *pass, struct ktune_key *key,
		       struct ktune_op_call *call, struct ktune_err *e)
{
	const char *values[] = { pass, NULL, a->causal ? "causal" : "none", NULL, NULL, NULL, NULL };
	char hdim[24], gqa[24];

	if (a->batch < 0 || a->sq < 0 || a->hq < 0)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: batch = %lld, sq = %lld, hq = %lld: negative",
				   (long long)a->batch, (long long)a->sq, (long long)a->hq);
	if (a->sk < 1 || a->hkv < 1)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: sk = %lld, hkv = %lld: there must be keys",
				   (long long)a->sk, (long long)a->hkv);
	if (a->hq % a->hkv)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: hq = %lld is not a multiple of hkv = %lld",
				   (long long)a->hq, (long long)a->hkv);
	if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: head_dim %lld is not 64, 128 or 256",
				   (long long)a->head_dim);
	if (!(a->scale > 0) || isinf(a->scale))
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: scale %g is not positive and finite",
				   (double)a->scale);
	if (a->batch > 65535 || a->hq > 65535)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: batch = %lld, hq = %lld: at most 65535 each",
				   (long long)a->batch, (long long)a->hq);
	if (a->sq > MAX_LEN || a->sk > MAX_LEN)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: sq = %lld, sk = %lld: at most %lld",
				   (long long)a->sq, (long long)a->sk, (long long)MAX_LEN);
	if ((uintptr_t)a->lse % 4)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: lse is not 4-byte aligned");

	memset(key, 0, sizeof(*key));
	memset(call, 0, sizeof(*call));
	snprintf(key->op, sizeof(key->op), "attention");
	key->dtype = a->dtype;
	key->m = a->sq;
	key->n = a->sk;
	key->k = a->batch * a->hq;
	key->aligned = 1;
	int64_t ratio = a->hq / a->hkv, bucket = 1;
	while (bucket * 2 <= ratio && bucket < 16)
		bucket *= 2;
	snprintf(hdim, sizeof(hdim), "%lld", (long long)a->head_dim);
	snprintf(gqa, sizeof(gqa), "%lld", (long long)bucket);
	values[1] = hdim;
	values[3] = gqa;
	if (ktune__op_variant_set(&ktune__op_attention, key, values, e))
		return KTUNE_ERR_INVALID;
	call->size[0] = key->m;
	call->size[1] = key->n;
	call->size[2] = key->k;
	call->scalar[0] = a->scale;
	call->iarg[KTUNE_ATTN_IARG_HQ] = a->hq;
	call->iarg[KTUNE_ATTN_IARG_HKV] = a->hkv;
	return KTUNE_OK;
}

/* A tensor of the call: its strides (checked for 16-byte rows) into iarg at `at`, its pointer into buf. */
static int tensor(const struct ktune_attention_args *a, const char *name, const void *p, const int64_t *given,
		  int q_side, int at, int buf, struct ktune_op_call *call, struct ktune_err *e)
{
	int64_t s = q_side ? a->sq : a->sk, h = q_side ? a->hq : a->hkv, st[3];
	strides_or_packed(given, s, h, a->head_dim, st);
	if (!rows_aligned(p, st, a->batch, s, h))
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: %s must be 16-byte aligned, and its strides "
				   "multiples of 8 elements", name);
	memcpy(&call->iarg[at], st, sizeof(st));
	call->buf[buf] = (uint64_t)(uintptr_t)p;
	return KTUNE_OK;
}

int ktune__attention_fwd_call(const struct ktune_attention_args *a, struct ktune_key *key,
			      struct ktune_op_call *call, struct ktune_err *e)
{
	int rc;
	if ((rc = common_call(a, "fwd", key, call, e)) ||
	    (rc = tensor(a, "q", a->q, a->q_strides, 1, KTUNE_ATTN_IARG_Q, 0, call, e)) ||
	    (rc = tensor(a, "k", a->k, a->k_strides, 0, KTUNE_ATTN_IARG_K, 1, call, e)) ||
	    (rc = tensor(a, "v", a->v, a->v_strides, 0, KTUNE_ATTN_IARG_V, 2, call, e)) ||
	    (rc = tensor(a, "o", a->o, a->o_strides, 1, KTUNE_ATTN_IARG_O, 3, call, e)))
		return rc;
	call->buf[4] = (uint64_t)(uintptr_t)a->lse;
	return KTUNE_OK;
}

int ktune__attention_bwd_call(const struct ktune_attention_args *a, struct ktune_key *key,
			      struct ktune_op_call *call, struct ktune_err *e)
{
	int rc;
	if (a->head_dim == 256)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: the backward takes head dims 64 and 128, not 256");
	if (a->sq == 0)
		return ktune__fail(e, KTUNE_ERR_INVALID, "attention: the backward needs sq >= 1 (dk and dv are its sums)");
	if ((rc = common_call(a, a->deterministic ? "bwd_det" : "bwd", key, call, e)) ||
	    (rc = tensor(a, "q", a->q, a->q_strides, 1, KTUNE_ATTN_IARG_Q, 0, call, e)) ||
	    (rc = tensor(a, "k", a->k, a->k_strides, 0, KTUNE_ATTN_IARG_K, 1, call, e)) ||
	    (rc = tensor(a, "v", a->v, a->v_strides, 0, KTUNE_ATTN_IARG_V, 2, call, e)) ||
	    (rc = tensor(a, "o", a->o, a->o_strides, 1, KTUNE_ATTN_IARG_O, 3, call, e)) ||
	    (rc = tensor(a, "dout", a->dout, a->dout_strides, 1, KTUNE_ATTN_IARG_DO, 4, call, e)) ||
	    (rc = tensor(a, "dq", a->dq, a->dq_strides, 1, KTUNE_ATTN_IARG_DQ, 6, call, e)) ||
	    (rc = tensor(a, "dk", a->dk, a->dk_strides, 0, KTUNE_ATTN_IARG_DK, 7, call, e)) ||
	    (rc = tensor(a, "dv", a->dv, a->dv_strides, 0, KTUNE_ATTN_IARG_DV, 8, call, e)))
		return rc;
	call->buf[5] = (uint64_t)(uintptr_t)a->lse;
	return KTUNE_OK;
}

ktune_status ktune_attention_fwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
				 int64_t head_dim, const void *q, const int64_t *q_strides, const void *k,
				 const int64_t *k_strides, const void *v, const int64_t *v_strides, void *o,
				 const int64_t *o_strides, float *lse, float scale, int causal, ktune_dtype dtype,
				 void *stream)
{
	struct ktune_attention_args a = { batch, sq, sk, hq, hkv, head_dim, q, q_strides, k, k_strides, v,
					  v_strides, o, o_strides, lse, scale, causal, dtype };
	struct ktune_key key;
	struct ktune_op_call call;
	struct ktune_err e;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (ktune__attention_fwd_call(&a, &key, &call, &e))
		return ktune__op_invalid(ctx, "%s", e.msg);
	if (batch == 0 || sq == 0 || hq == 0)
		return KTUNE_OK; /* no rows */
	return ktune__op_run(ctx, &key, &call, stream);
}

ktune_status ktune_attention_bwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
				 int64_t head_dim, const void *q, const int64_t *q_strides, const void *k,
				 const int64_t *k_strides, const void *v, const int64_t *v_strides, const void *o,
				 const int64_t *o_strides, const void *dout, const int64_t *dout_strides,
				 const float *lse, void *dq, const int64_t *dq_strides, void *dk,
				 const int64_t *dk_strides, void *dv, const int64_t *dv_strides, float scale, int causal,
				 int deterministic, ktune_dtype dtype, void *stream)
{
	struct ktune_attention_args a = { batch, sq, sk, hq, hkv, head_dim, q, q_strides, k, k_strides, v,
					  v_strides, (void *)o, o_strides, (float *)lse, scale, causal, dtype,
					  dout, dout_strides, dq, dq_strides, dk, dk_strides, dv, dv_strides,
					  deterministic };
	struct ktune_key key;
	struct ktune_op_call call;
	struct ktune_err e;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (ktune__attention_bwd_call(&a, &key, &call, &e))
		return ktune__op_invalid(ctx, "%s", e.msg);
	if (batch == 0 || hq == 0)
		return KTUNE_OK; /* no heads */
	return ktune__op_run(ctx, &key, &call, stream);
}
