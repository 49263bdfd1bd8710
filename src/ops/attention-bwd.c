/*
 * attention-bwd.c - the backward passes of the op "attention"
 * (attention.h): bwd (dQ through fp32 atomics) and bwd_det (dQ through
 * per-block slices summed in order: the same bits every run); their problem
 * in the tuner, prune, defines, workspace and the three launches of
 * kernels/templates/attention_bwd.cu or, on sm_90, attention_wgmma_bwd.cu
 * (the same launches, workspace and pre and dq kernels; its main kernel on
 * wgmma), and their default configs (the mma.sync family's; on sm_90, for
 * 128 queries and keys or more, the wgmma family's: the op's arch_default).
 *
 * The tuner's problem: q, o, dout [sq, D], k, v [sk, D] and lse [sq], one
 * head's, read by every head (batch and head strides 0: the float64
 * reference of one head serves all of them), as the forward's; dq [1, sq,
 * bh, D], dk and dv [1, sk, bh, D] (GQA ratio 1 there: every query head its
 * own K/V head).  lse is random in [log sk, log sk + 2], about what a
 * softmax over sk keys gives, so P = exp(scale q.k - lse) stays in range;
 * the reference takes the same lse and delta = rowsum(dO * O) as the
 * kernels (ktune__ref_attention_dq_row, _dkv_row).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention-ref.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

enum { Q, K, V, O, DO, LSE, DQ, DK, DV };

void ktune__attn_bwd_layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t d = ktune__attn_head_dim(key), sq = key->m, sk = key->n, bh = key->k;
	*out = (struct ktune_op_layout){ 9,
					 { { "q", 0, sq * d, d },
					   { "k", 0, sk * d, d },
					   { "v", 0, sk * d, d },
					   { "o", 0, sq * d, d },
					   { "dout", 0, sq * d, d },
					   { "lse", 0, sq, 0, KTUNE_BUF_F32 },
					   { "dq", 1, bh * sq * d, bh * d },
					   { "dk", 1, bh * sk * d, bh * d },
					   { "dv", 1, bh * sk * d, bh * d } } };
}

void ktune__attn_bwd_input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	*lo = buf == Q || buf == K ? -2 : -1;
	*hi = buf == Q || buf == K ? 2 : 1;
	if (buf == LSE) {
		*lo = log((double)key->n);
		*hi = *lo + 2;
	}
}

/* The tuner's strides of the 8 tensors q, k, v, o, dout, dq, dk, dv, for `hq` heads a batch. */
static void tuner_strides(int64_t sq, int64_t sk, int64_t hq, int64_t d, int64_t st[8][3])
{
	for (int t = 0; t < 5; t++) {
		st[t][0] = st[t][2] = 0;
		st[t][1] = d;
	}
	for (int t = 5; t < 8; t++) {
		int64_t s = t == 5 ? sq : sk;
		st[t][0] = s * hq * d;
		st[t][1] = hq * d;
		st[t][2] = d;
	}
}

struct ref_job {
	struct ktune_attn_shape s; /* the one head */
	struct ktune_attn_in q, k, v, dout;
	struct ktune_attn_out dq, dk, dv; /* with the tuner's strides: every head */
	const double *lse;
	double *delta;
	int64_t batch, hq;
};

static void copy_to_heads(const struct ref_job *j, struct ktune_attn_out t, int64_t row)
{
	const double *src = t.p + row * t.ss;
	for (int64_t b = 0; b < j->batch; b++)
		for (int64_t h = 0; h < j->hq; h++)
			if (b || h)
				memcpy(t.p + b * t.sb + row * t.ss + h * t.sh, src, (size_t)j->s.d * sizeof(double));
}

static void ref_dq_row(int i, void *arg)
{
	struct ref_job *j = arg;
	ktune__ref_attention_dq_row(&j->s, j->q, j->k, j->v, j->dout, j->lse, 0, 0, j->delta, j->dq, 0, 0, i);
	copy_to_heads(j, j->dq, i);
}

static void ref_dkv_row(int i, void *arg)
{
	struct ref_job *j = arg;
	ktune__ref_attention_dkv_row(&j->s, j->q, j->k, j->v, j->dout, j->lse, 0, 0, j->delta, j->dk, j->dv, 0, 0, i);
	copy_to_heads(j, j->dk, i);
	copy_to_heads(j, j->dv, i);
}

void ktune__attn_bwd_reference(const struct ktune_key *key, double *const *b)
{
	int64_t d = ktune__attn_head_dim(key), batch, hq, st[8][3];
	double *delta = malloc((size_t)key->m * sizeof(double));
	ktune__attn_tuner_heads(key->k, &batch, &hq);
	tuner_strides(key->m, key->n, hq, d, st);
	struct ref_job j = {
		.s = { .batch = 1, .sq = key->m, .sk = key->n, .hq = 1, .hkv = 1, .d = d,
		       .causal = ktune__attn_causal(key), .scale = 1 / sqrt((double)d) },
		.q = { b[Q], 0, d, 0 }, .k = { b[K], 0, d, 0 }, .v = { b[V], 0, d, 0 }, .dout = { b[DO], 0, d, 0 },
		.dq = { b[DQ], st[5][0], st[5][1], st[5][2] }, .dk = { b[DK], st[6][0], st[6][1], st[6][2] },
		.dv = { b[DV], st[7][0], st[7][1], st[7][2] }, .lse = b[LSE], .delta = delta, .batch = batch, .hq = hq,
	};
	if (!delta) { /* no memory: NaN, which no check passes */
		b[DQ][0] = NAN;
		return;
	}
	ktune__ref_attention_delta(&j.s, (struct ktune_attn_in){ b[O], 0, d, 0 }, j.dout, delta);
	ktune__parallel_for((int)key->m, 0, ref_dq_row, &j);
	ktune__parallel_for((int)key->n, 0, ref_dkv_row, &j);
	free(delta);
}

/* ------------------------------------------------------------ configs */

/* A backward config of either family: attention_bwd.cu's tunables, or attention_wgmma_bwd.cu's. */
struct shape {
	int wgmma; /* the family: 0 attention_bwd.cu (mma.sync), 1 attention_wgmma_bwd.cu */
	int block_m, block_n, stages, splits;
	int swizzle;   /* mma.sync */
	int consumers; /* wgmma: BLOCK_N = 64 CONSUMERS, a producer warpgroup beside them */
	int staging;   /* wgmma: lse2 and delta in shared memory, dQ by bulk reduce */
	int overlap;   /* wgmma, with staging: P^T under dP^T's product, dS^T under dV's */
};

static struct shape shape_of(const struct ktune_config *c)
{
	const struct ktune_op *op = &ktune__op_attention;
	if (c->family == KTUNE_ATTN_FAMILY_WGMMA_BWD) {
		int consumers = (int)ktune__op_param(op, c, "CONSUMERS", 2);
		return (struct shape){
			.wgmma = 1,
			.block_m = (int)ktune__op_param(op, c, "BLOCK_M", 64),
			.block_n = 64 * consumers,
			.stages = (int)ktune__op_param(op, c, "STAGES", 2),
			.splits = (int)ktune__op_param(op, c, "SPLITS", 1),
			.consumers = consumers,
			.staging = (int)ktune__op_param(op, c, "STAGING", 0),
			.overlap = (int)ktune__op_param(op, c, "OVERLAP", 0),
		};
	}
	return (struct shape){
		.block_m = (int)ktune__op_param(op, c, "BLOCK_M", 64),
		.block_n = (int)ktune__op_param(op, c, "BLOCK_N", 64),
		.stages = (int)ktune__op_param(op, c, "STAGES", 2),
		.swizzle = (int)ktune__op_param(op, c, "SWIZZLE", 0),
		.splits = (int)ktune__op_param(op, c, "SPLITS", 1),
	};
}

/*
 * SMEM_BYTES of attention_bwd.cu: K and V, STAGES tiles of Q and of dO,
 * dS^T; of attention_wgmma_bwd.cu the same tiles unpadded, 1024 for
 * aligning them, STAGING's fp32 dQ tile and each slot's lse2 and delta,
 * and the mbarriers.
 */
static unsigned smem_bytes(const struct ktune_key *key, const struct shape *s)
{
	int d = ktune__attn_head_dim(key);
	if (s->wgmma)
		return (unsigned)(1024 + (2 * s->block_n + 2 * s->stages * s->block_m) * d * 2 +
				  s->block_n * s->block_m * 2 +
				  (s->staging ? s->block_m * d * 4 + 2 * s->stages * s->block_m * 4 : 0) +
				  (2 + 2 * s->stages) * 8);
	int row = d + (s->swizzle ? 0 : 8);
	return (unsigned)((2 * s->block_n * row + 2 * s->stages * s->block_m * row + s->block_n * (s->block_m + 8)) * 2);
}

/* Threads of the main kernel's block. */
static unsigned threads(const struct shape *s)
{
	return (unsigned)(s->wgmma ? 128 * (s->consumers + 1) : s->block_n / 16 * 32);
}

/*
 * Registers a thread needs, about: dK's and dV's fp32 accumulators (D) and
 * the B fragments and addresses of their D / 8 n8 tiles (D / 2), P^T's and
 * dS^T's accumulators, of which half are live at once (BLOCK_M / 2), and
 * the rest (40); swizzled tiles keep 56 more addresses live.  Fitted to
 * ptxas's sm_90 counts, causal bf16 (docs/attention.md): D = 128 spills
 * from BLOCK_M = 64 on, D = 64 swizzled from BLOCK_M = 128.
 */
static int registers(const struct ktune_key *key, const struct shape *s)
{
	return 3 * ktune__attn_head_dim(key) / 2 + s->block_m / 2 + 40 + (s->swizzle ? 56 : 0);
}

/*
 * The wgmma family's consumer threads: dK's and dV's accumulators (D / 2
 * each) and S^T's and dP^T's (BLOCK_M / 2 each), live together while the
 * products of a tile are computed, and per query column the thread holds
 * (BLOCK_M / 4) its lse2, delta and their addresses (BLOCK_M / 2 in all),
 * plus 8, against what setmaxnreg gives a consumer (CONSUMER_REGS of
 * attention_wgmma_bwd.cu).  Fitted to ptxas's spills (nvcc 13.0, sm_90a,
 * bf16, both masks and passes): D = 128 with BLOCK_M = 64 fits 232
 * registers; D = 64 with BLOCK_M = 128 spilled 24 to 160 bytes at 232 or
 * 240, so the estimate puts it over both.  In the deterministic pass a
 * consumer with more than one 64 x 64 piece of a tile's dQ (one consumer,
 * D = 128) keeps the loaded accumulators of the next beside dK and dV: 16
 * bytes spilled at 240, so 16 more a further piece; STAGING's stores of
 * the pieces to shared memory the same (20 bytes spilled, atomic pass).
 */
static int wgmma_registers(const struct ktune_key *key, const struct shape *s)
{
	int d = ktune__attn_head_dim(key), pieces = (s->block_m / 64) * (d / 64);
	int per_consumer = (pieces + s->consumers - 1) / s->consumers;
	int det = ktune__attn_pass(key) == KTUNE_ATTN_BWD_DET;
	return d + 3 * s->block_m / 2 + 8 + (det || s->staging ? 16 * (per_consumer - 1) : 0);
}

int ktune__attn_bwd_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len)
{
	struct shape s = shape_of(c);
	unsigned smem = smem_bytes(key, &s);
	int regs = s.wgmma ? wgmma_registers(key, &s) : registers(key, &s);
	int cap = s.wgmma ? (s.consumers == 1 ? 240 : 232) : 255;
	if (s.overlap && !s.staging) {
		snprintf(why, len, "OVERLAP reads lse2 and delta from STAGING's shared memory");
		return 1;
	}
	if (ktune__attn_pass(key) == KTUNE_ATTN_BWD && s.splits != 1) {
		snprintf(why, len, "SPLITS = %d: only the deterministic pass has slices", s.splits);
		return 1;
	}
	if (s.block_m > s.block_n && !s.wgmma) {
		snprintf(why, len, "BLOCK_M = %d over BLOCK_N = %d", s.block_m, s.block_n);
		return 1;
	}
	if (smem > KTUNE_ATTN_SMEM_LIMIT) {
		snprintf(why, len, "needs %u bytes of shared memory, over %d", smem, KTUNE_ATTN_SMEM_LIMIT);
		return 1;
	}
	if (regs > cap) {
		snprintf(why, len, "about %d registers a thread, over %d", regs, cap);
		return 1;
	}
	/* the smallest tiles: 32 (mma.sync), 64 (wgmma) */
	if (s.block_m > (s.wgmma ? 64 : 32) && s.block_m >= 2 * key->m) {
		snprintf(why, len, "BLOCK_M = %d for %lld query rows", s.block_m, (long long)key->m);
		return 1;
	}
	if (s.block_n > (s.wgmma ? 64 : 32) && s.block_n >= 2 * key->n) {
		snprintf(why, len, "BLOCK_N = %d for %lld keys", s.block_n, (long long)key->n);
		return 1;
	}
	return 0;
}

int ktune__attn_bwd_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	struct shape s = shape_of(c);
	if (max < 9)
		return -1;
	snprintf(opts[0], 48, "-DDTYPE_BF16=%d", key->dtype == KTUNE_BF16);
	snprintf(opts[1], 48, "-DHEAD_DIM=%d", ktune__attn_head_dim(key));
	snprintf(opts[2], 48, "-DCAUSAL=%d", ktune__attn_causal(key));
	snprintf(opts[3], 48, "-DDETERMINISTIC=%d", ktune__attn_pass(key) == KTUNE_ATTN_BWD_DET);
	snprintf(opts[4], 48, "-DBLOCK_M=%d", s.block_m);
	if (s.wgmma) {
		snprintf(opts[5], 48, "-DCONSUMERS=%d", s.consumers);
		snprintf(opts[6], 48, "-DSTAGES=%d", s.stages);
		snprintf(opts[7], 48, "-DSTAGING=%d", s.staging);
		snprintf(opts[8], 48, "-DOVERLAP=%d", s.overlap);
		return 9;
	}
	snprintf(opts[5], 48, "-DBLOCK_N=%d", s.block_n);
	snprintf(opts[6], 48, "-DSTAGES=%d", s.stages);
	snprintf(opts[7], 48, "-DSWIZZLE=%d", s.swizzle);
	return 8;
}

/* The call's shape as the launches see it. */
struct dims {
	int64_t batch, hq, hkv, sq, sk, sq_pad, n_blocks, slices, st[8][3], lse_sb, lse_sh;
};

/*
 * The deterministic pass's slices: SPLITS, raised (by doubling, to the
 * key blocks) while its grid, a block a slice of each K/V head, would
 * leave more than half of the SMs idle.  A config tuned for many heads
 * then serves a call of few (a neighbour's, at long lengths) without
 * collapsing: on the H200, B x H 16 at S 16k ran at a quarter of the
 * atomic pass with SPLITS 2.  The shipped entries keep theirs (256 heads
 * with 1, 64 with 2 or more).
 */
static int64_t det_slices(int64_t splits, int64_t n_blocks, int64_t kv_heads, int sm_count)
{
	int64_t slices = splits < n_blocks ? splits : n_blocks;
	while (slices < n_blocks && 2 * slices * kv_heads < sm_count)
		slices = 2 * slices < n_blocks ? 2 * slices : n_blocks;
	return slices;
}

static struct dims dims_of(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			   int sm_count)
{
	struct shape s = shape_of(c);
	struct dims d = { .sq = call->size[0], .sk = call->size[1] };
	int64_t tb, th, tuner[8][3];
	ktune__attn_tuner_heads(call->size[2], &tb, &th);
	tuner_strides(d.sq, d.sk, th, ktune__attn_head_dim(key), tuner);
	ktune__attn_call_dims(call, KTUNE_ATTN_IARG_Q, 8, tuner, &d.batch, &d.hq, &d.hkv, d.st);
	d.sq_pad = (d.sq + s.block_m - 1) / s.block_m * s.block_m;
	d.n_blocks = (d.sk + s.block_n - 1) / s.block_n;
	d.slices = ktune__attn_pass(key) == KTUNE_ATTN_BWD_DET ? det_slices(s.splits, d.n_blocks, d.batch * d.hkv, sm_count)
								 : 1;
	d.lse_sb = call->iarg[KTUNE_ATTN_IARG_HQ] ? d.hq * d.sq : 0; /* the forward's [B, Hq, Sq]; the tuner's one row */
	d.lse_sh = call->iarg[KTUNE_ATTN_IARG_HQ] ? d.sq : 0;
	return d;
}

size_t ktune__attn_bwd_workspace(const struct ktune_key *key, const struct ktune_config *c,
				 const struct ktune_op_call *call, int sm_count)
{
	struct dims d = dims_of(key, c, call, sm_count);
	/* lse2 and delta, then the slices of dQ accumulators, fp32, a row per (batch, head, padded query) */
	return (size_t)(2 + d.slices * ktune__attn_head_dim(key)) * (size_t)(d.batch * d.hq * d.sq_pad) * sizeof(float);
}

static void strides3(struct ktune_op_args *a, const int64_t st[3])
{
	for (int x = 0; x < 3; x++)
		ktune__ew_arg_i64(a, st[x]);
}

int ktune__attn_bwd_steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			  int sm_count, struct ktune_op_step *out)
{
	struct shape s = shape_of(c);
	struct dims d = dims_of(key, c, call, sm_count);
	const double scale = ktune__attn_scale(key, call);
	struct ktune_op_args *a;
	memset(out, 0, 3 * sizeof(*out));

	/* delta, lse2 and zeroed accumulators */
	a = &out[0].args;
	out[0].entry = 0;
	out[0].launch = (struct ktune_op_launch){ { (unsigned)(d.sq_pad / 8), (unsigned)d.hq, (unsigned)d.batch },
						  { 256, 1, 1 }, 0 };
	ktune__ew_arg_ptr(a, call->buf[O]);
	ktune__ew_arg_ptr(a, call->buf[DO]);
	ktune__ew_arg_ptr(a, call->buf[LSE]);
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__attn_arg_i32(a, (int)d.sq);
	ktune__attn_arg_i32(a, (int)d.sq_pad);
	ktune__attn_arg_i32(a, (int)d.slices);
	strides3(a, d.st[O]);
	strides3(a, d.st[DO]);
	ktune__ew_arg_i64(a, d.lse_sb);
	ktune__ew_arg_i64(a, d.lse_sh);

	/*
	 * dK, dV, and dQ into the accumulators: a block per key block (or per
	 * slice) of each K/V head; the wgmma family's main kernel takes the same
	 * arguments
	 */
	a = &out[1].args;
	out[1].entry = 1;
	out[1].launch = (struct ktune_op_launch){
		{ (unsigned)(ktune__attn_pass(key) == KTUNE_ATTN_BWD_DET ? d.slices : d.n_blocks), (unsigned)d.hkv,
		  (unsigned)d.batch },
		{ threads(&s), 1, 1 },
		smem_bytes(key, &s)
	};
	ktune__ew_arg_ptr(a, call->buf[Q]);
	ktune__ew_arg_ptr(a, call->buf[K]);
	ktune__ew_arg_ptr(a, call->buf[V]);
	ktune__ew_arg_ptr(a, call->buf[DO]);
	ktune__ew_arg_ptr(a, call->buf[DK]);
	ktune__ew_arg_ptr(a, call->buf[DV]);
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__attn_arg_i32(a, (int)d.sq);
	ktune__attn_arg_i32(a, (int)d.sk);
	ktune__attn_arg_i32(a, (int)(d.hq / d.hkv));
	ktune__attn_arg_i32(a, (int)d.sq_pad);
	static const int tensors[] = { Q, K, V, DO, DK, DV };
	for (int t = 0; t < 6; t++)
		strides3(a, d.st[tensors[t] < LSE ? tensors[t] : tensors[t] - 1]);
	ktune__ew_arg_f32(a, (float)(scale * 1.4426950408889634)); /* log2(e) */

	/* dQ = scale * the accumulators, summed over the slices in order */
	a = &out[2].args;
	out[2].entry = 2;
	out[2].launch = (struct ktune_op_launch){ { (unsigned)((d.sq + 7) / 8), (unsigned)d.hq, (unsigned)d.batch },
						  { 256, 1, 1 }, 0 };
	ktune__ew_arg_ptr(a, call->workspace);
	ktune__ew_arg_ptr(a, call->buf[DQ]);
	ktune__attn_arg_i32(a, (int)d.sq);
	ktune__attn_arg_i32(a, (int)d.sq_pad);
	ktune__attn_arg_i32(a, (int)d.slices);
	strides3(a, d.st[DQ - 1]);
	ktune__ew_arg_f32(a, (float)scale);
	return 3;
}

/*
 * Query tiles of 64 rows (32 for D = 128, whose dK and dV take the
 * registers) streamed past 64 keys (4 warps), padded tiles (swizzled ones
 * keep more addresses live), two stages; 32-row or 32-key tiles for short
 * lengths; the deterministic pass walks the key blocks in 4 slices.
 */
struct ktune_config ktune__attn_bwd_default(const struct ktune_key *key)
{
	static const char *const names[] = { "BLOCK_M", "BLOCK_N", "STAGES", "SWIZZLE", "SPLITS" };
	int block_n = key->n <= 32 ? 32 : 64;
	/* the deterministic pass's slices of dQ cost registers: 64 rows of D = 64 spill there */
	int det = ktune__attn_pass(key) == KTUNE_ATTN_BWD_DET;
	int block_m = ktune__attn_head_dim(key) == 128 || key->m <= 32 || block_n == 32 || det ? 32 : 64;
	const long values[] = { block_m, block_n, 2, 0, det ? 4 : 1 };
	return ktune__attn_config(KTUNE_ATTN_FAMILY_BWD, names, values, 5);
}

/*
 * The wgmma family's default, for sm_90: what the H100's sweep of the
 * suite chose (db/sm_90/h100.yaml: BLOCK_M 64 and two consumer warpgroups,
 * 128 keys a block, for all 16 bwd and bwd_det keys, both head dims, both
 * masks, S 1024 and 4096; two stages won 10 of them, three the other 6 by
 * no rule of head dim, mask or length), one consumer after it; STAGING,
 * which the H200's sweep chose for all 16 (1.26-2.06 times as fast as
 * without), where the prune keeps it, with OVERLAP at head dim 64, where
 * it was 3-8% faster on every key (at 128 it was 1% either way, and 4-8%
 * slower causal).  The
 * deterministic pass's SPLITS: the smallest whose grid, SPLITS blocks for
 * each K/V head (one resident a SM at this shared memory), reaches 7/8 of
 * the SMs: 1 for 256 heads, 2 for 64 on the H100's 132 SMs, where the
 * sweep chose 1, and 2 or 4 (2 three times of four).  The first the prune
 * keeps for the key; 0 below 128 queries or keys, which the sweep did not
 * measure and the mma.sync default's 32-row or 32-key tiles waste less on
 * (as the forward's wgmma default), or where the prune keeps none (head
 * dim 256, which the backward refuses anyway).
 */
int ktune__attn_bwd_wgmma_default(const struct ktune_key *key, int sm_count, struct ktune_config *out)
{
	static const char *const names[] = { "BLOCK_M", "CONSUMERS", "STAGES", "STAGING", "OVERLAP", "SPLITS" };
	static const long prefs[][4] = { { 64, 2, 2, 1 }, { 64, 1, 2, 1 }, { 64, 1, 2, 0 } };
	const long overlap = ktune__attn_head_dim(key) == 64;
	int64_t kv_heads = key->k / ktune__attn_gqa(key) > 1 ? key->k / ktune__attn_gqa(key) : 1;
	long splits = 1;
	char why[160];
	if (key->m < 128 || key->n < 128)
		return 0;
	if (ktune__attn_pass(key) == KTUNE_ATTN_BWD_DET)
		while (splits < 8 && 8 * splits * kv_heads < 7 * (int64_t)sm_count)
			splits *= 2;
	for (size_t i = 0; i < sizeof(prefs) / sizeof(prefs[0]); i++) {
		const long values[] = { prefs[i][0], prefs[i][1], prefs[i][2], prefs[i][3], prefs[i][3] && overlap, splits };
		struct ktune_config c = ktune__attn_config(KTUNE_ATTN_FAMILY_WGMMA_BWD, names, values, 6);
		if (!ktune__attn_bwd_prune(key, &c, why, sizeof(why))) {
			*out = c;
			return 1;
		}
	}
	return 0;
}
