/*
 * attention-fwd.c - the forward pass of the op "attention" (attention.h):
 * its problem in the tuner, prune, defines and launch of its two families,
 * kernels/templates/attention.cu (mma.sync) and attention_wgmma.cu (wgmma,
 * sm_90a), and its default config (attention.cu's).
 *
 * The tuner's problem: q [sq, D], k and v [sk, D], one head's, read by
 * every head (their batch and head strides are 0, so that the float64
 * reference of one head serves all of them); o [1, sq, bh, D] (or [B, sq,
 * bh / B, D] when bh is over 32768); lse fp32 [bh, sq].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention-ref.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

void ktune__attn_fwd_layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	int64_t d = ktune__attn_head_dim(key);
	*out = (struct ktune_op_layout){ 5,
					 { { "q", 0, key->m * d, d },
					   { "k", 0, key->n * d, d },
					   { "v", 0, key->n * d, d },
					   { "o", 1, key->k * key->m * d, key->k * d },
					   { "lse", 1, key->k * key->m, 0, KTUNE_BUF_F32 } } };
}

/* The tuner's strides of q, k, v (shared by every head) and o, for `hq` heads a batch. */
static void tuner_strides(int64_t sq, int64_t hq, int64_t d, int64_t st[4][3])
{
	for (int t = 0; t < 3; t++) {
		st[t][0] = st[t][2] = 0;
		st[t][1] = d;
	}
	st[3][0] = sq * hq * d;
	st[3][1] = hq * d;
	st[3][2] = d;
}

struct ref_job {
	struct ktune_attn_shape s;
	struct ktune_attn_in q, k, v;
	struct ktune_attn_out o; /* head 0 of batch 0 */
	double *lse;
	int64_t batch, hq;
};

/* Row i of the one head, then copied to every other head (they all read the same q, k, v). */
static void ref_row(int i, void *arg)
{
	struct ref_job *j = arg;
	const double *row = j->o.p + i * j->o.ss;
	ktune__ref_attention_row(&j->s, j->q, j->k, j->v, j->o, &j->lse[i], 0, 0, i);
	for (int64_t b = 0; b < j->batch; b++)
		for (int64_t h = 0; h < j->hq; h++) {
			if (b || h)
				memcpy(j->o.p + b * j->o.sb + i * j->o.ss + h * j->o.sh, row,
				       (size_t)j->s.d * sizeof(double));
			j->lse[(b * j->hq + h) * j->s.sq + i] = j->lse[i];
		}
}

void ktune__attn_fwd_reference(const struct ktune_key *key, double *const *b)
{
	int64_t d = ktune__attn_head_dim(key), batch, hq, st[4][3];
	ktune__attn_tuner_heads(key->k, &batch, &hq);
	tuner_strides(key->m, hq, d, st);
	struct ref_job j = {
		.s = { .batch = 1, .sq = key->m, .sk = key->n, .hq = 1, .hkv = 1, .d = d,
		       .causal = ktune__attn_causal(key), .scale = 1 / sqrt((double)d) },
		.q = { b[0], st[0][0], st[0][1], st[0][2] }, .k = { b[1], st[1][0], st[1][1], st[1][2] },
		.v = { b[2], st[2][0], st[2][1], st[2][2] }, .o = { b[3], st[3][0], st[3][1], st[3][2] },
		.lse = b[4], .batch = batch, .hq = hq,
	};
	ktune__parallel_for((int)key->m, 0, ref_row, &j);
}

/* ------------------------------------------------------------ configs */

/* A forward config of either family: attention.cu's tunables, or attention_wgmma.cu's. */
struct shape {
	int wgmma; /* the family: 0 attention.cu (mma.sync), 1 attention_wgmma.cu */
	int block_m, block_n, stages;
	int warps, q_regs, swizzle; /* mma.sync */
	int consumers, overlap;     /* wgmma: BLOCK_M = 64 CONSUMERS, a producer warpgroup beside them */
};

static struct shape shape_of(const struct ktune_config *c)
{
	const struct ktune_op *op = &ktune__op_attention;
	if (c->family == KTUNE_ATTN_FAMILY_WGMMA) {
		int consumers = (int)ktune__op_param(op, c, "CONSUMERS", 2);
		return (struct shape){
			.wgmma = 1,
			.block_m = 64 * consumers,
			.block_n = (int)ktune__op_param(op, c, "BLOCK_N", 128),
			.stages = (int)ktune__op_param(op, c, "STAGES", 2),
			.warps = 4 * (consumers + 1),
			.consumers = consumers,
			.overlap = (int)ktune__op_param(op, c, "OVERLAP", 1),
		};
	}
	return (struct shape){
		.block_m = (int)ktune__op_param(op, c, "BLOCK_M", 128),
		.block_n = (int)ktune__op_param(op, c, "BLOCK_N", 64),
		.warps = (int)ktune__op_param(op, c, "WARPS", 8),
		.stages = (int)ktune__op_param(op, c, "STAGES", 2),
		.q_regs = (int)ktune__op_param(op, c, "Q_REGS", 1),
		.swizzle = (int)ktune__op_param(op, c, "SWIZZLE", 1),
	};
}

/* SMEM_BYTES of attention.cu, or of attention_wgmma.cu (1024 for aligning the tiles, and the mbarriers). */
static unsigned smem_bytes(const struct ktune_key *key, const struct shape *s)
{
	int d = ktune__attn_head_dim(key);
	if (s->wgmma)
		return (unsigned)(1024 + (s->block_m + 2 * s->stages * s->block_n) * d * 2 + (1 + 4 * s->stages) * 8);
	int row = d + (s->swizzle ? 0 : 8);
	return (unsigned)((s->block_m + 2 * s->stages * s->block_n) * row * 2);
}

/*
 * Registers a thread needs, about: per m16 tile of rows, the fp32
 * accumulators of O (D / 2) and of S (BLOCK_N / 2; P reuses them) and Q's
 * fragments when kept (D / 4); beside them addresses, the softmax state and
 * the K/V fragments in flight (70 + D / 8).  Fitted to ptxas's counts for
 * sm_90 over the whole space (KTUNE_TEST_FULL=1 test-compile-attention):
 * of its 1,440 configs it admits 800, of which 2 spill 8 bytes, and prunes
 * 86 that would not have spilled.
 */
static int registers(const struct ktune_key *key, const struct shape *s)
{
	int d = ktune__attn_head_dim(key), mma_m = s->block_m / s->warps / 16;
	return mma_m * (d / 2 + s->block_n / 2 + (s->q_regs ? d / 4 : 0)) + 70 + d / 8;
}

/*
 * The wgmma family's consumer threads: O's accumulators (D / 2) and S's
 * (BLOCK_N / 2), and with OVERLAP P's 16-bit pairs (BLOCK_N / 4) beside
 * them (S of the next tile and P V of this one are in flight together;
 * without it P replaces S as it is packed), plus the softmax state,
 * descriptors and addresses (32), against what setmaxnreg gives a consumer
 * (CONSUMER_REGS of attention_wgmma.cu).  Fitted to ptxas's spills for
 * sm_90a over the whole space (bf16, both masks, STAGES=2): only three
 * consumers (160 registers) come near the cap, and there the estimate
 * admits exactly the configs that do not spill (D = 64: every BLOCK_N but
 * 176 with OVERLAP; D = 128: up to 80 with OVERLAP, 128 without).
 */
static int wgmma_registers(const struct ktune_key *key, const struct shape *s)
{
	return ktune__attn_head_dim(key) / 2 + s->block_n / 2 + (s->overlap ? s->block_n / 4 : 0) + 32;
}

/* CONSUMER_REGS of attention_wgmma.cu. */
static int wgmma_register_cap(const struct shape *s)
{
	return s->consumers == 1 ? 240 : s->consumers == 2 ? 232 : 160;
}

/* Tiles over twice the lengths: idle rows or keys that a smaller tile would not compute. */
static int oversized(const struct ktune_key *key, const struct shape *s, int smallest_m, int smallest_n, char *why,
		     size_t len)
{
	if (s->block_m > smallest_m && s->block_m >= 2 * key->m) {
		snprintf(why, len, "BLOCK_M = %d for %lld query rows", s->block_m, (long long)key->m);
		return 1;
	}
	if (s->block_n > smallest_n && s->block_n >= 2 * key->n) {
		snprintf(why, len, "BLOCK_N = %d for %lld keys", s->block_n, (long long)key->n);
		return 1;
	}
	return 0;
}

static int prune_wgmma(const struct ktune_key *key, const struct shape *s, char *why, size_t len)
{
	unsigned smem = smem_bytes(key, s);
	int regs = wgmma_registers(key, s), cap = wgmma_register_cap(s);
	if (smem > KTUNE_ATTN_SMEM_LIMIT) {
		snprintf(why, len, "needs %u bytes of shared memory, over %d", smem, KTUNE_ATTN_SMEM_LIMIT);
		return 1;
	}
	if (regs > cap) {
		snprintf(why, len, "about %d registers a consumer thread, over the %d that setmaxnreg gives each of %d",
			 regs, cap, s->consumers);
		return 1;
	}
	return oversized(key, s, 64, 64, why, len);
}

int ktune__attn_fwd_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len)
{
	struct shape s = shape_of(c);
	if (s.wgmma)
		return prune_wgmma(key, &s, why, len);
	unsigned smem = smem_bytes(key, &s);
	int regs = registers(key, &s), d = ktune__attn_head_dim(key);
	if (d / 8 > s.warps * 32 || (s.warps * 32) % (d / 8)) {
		snprintf(why, len, "%d threads do not load whole rows of %d chunks", s.warps * 32, d / 8);
		return 1;
	}
	if (smem > KTUNE_ATTN_SMEM_LIMIT) {
		snprintf(why, len, "needs %u bytes of shared memory, over %d", smem, KTUNE_ATTN_SMEM_LIMIT);
		return 1;
	}
	if (regs > 255) {
		snprintf(why, len, "about %d registers a thread, over 255", regs);
		return 1;
	}
	return oversized(key, &s, 32, 32, why, len);
}

int ktune__attn_fwd_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	struct shape s = shape_of(c);
	if (max < 9)
		return -1;
	snprintf(opts[0], 48, "-DDTYPE_BF16=%d", key->dtype == KTUNE_BF16);
	snprintf(opts[1], 48, "-DHEAD_DIM=%d", ktune__attn_head_dim(key));
	snprintf(opts[2], 48, "-DCAUSAL=%d", ktune__attn_causal(key));
	if (s.wgmma) {
		snprintf(opts[3], 48, "-DBLOCK_N=%d", s.block_n);
		snprintf(opts[4], 48, "-DSTAGES=%d", s.stages);
		snprintf(opts[5], 48, "-DCONSUMERS=%d", s.consumers);
		snprintf(opts[6], 48, "-DOVERLAP=%d", s.overlap);
		return 7;
	}
	snprintf(opts[3], 48, "-DBLOCK_M=%d", s.block_m);
	snprintf(opts[4], 48, "-DBLOCK_N=%d", s.block_n);
	snprintf(opts[5], 48, "-DWARPS=%d", s.warps);
	snprintf(opts[6], 48, "-DSTAGES=%d", s.stages);
	snprintf(opts[7], 48, "-DQ_REGS=%d", s.q_regs);
	snprintf(opts[8], 48, "-DSWIZZLE=%d", s.swizzle);
	return 9;
}

int ktune__attn_fwd_steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			  struct ktune_op_step *out)
{
	struct shape s = shape_of(c);
	int64_t batch, hq, hkv, st[4][3], tuner[4][3], sq = call->size[0], sk = call->size[1];
	struct ktune_op_args *a = &out[0].args;
	int64_t tb, th;
	ktune__attn_tuner_heads(call->size[2], &tb, &th);
	tuner_strides(sq, th, ktune__attn_head_dim(key), tuner);
	ktune__attn_call_dims(call, KTUNE_ATTN_IARG_Q, 4, tuner, &batch, &hq, &hkv, st);
	memset(out, 0, sizeof(*out));
	out[0].entry = 0;
	out[0].launch = (struct ktune_op_launch){ { (unsigned)((sq + s.block_m - 1) / s.block_m), (unsigned)hq,
						    (unsigned)batch },
						  { (unsigned)(s.warps * 32), 1, 1 },
						  smem_bytes(key, &s) };
	for (int i = 0; i < 5; i++)
		ktune__ew_arg_ptr(a, call->buf[i]); /* q, k, v, o, lse */
	ktune__attn_arg_i32(a, (int)sq);
	ktune__attn_arg_i32(a, (int)sk);
	ktune__attn_arg_i32(a, (int)(hq / hkv));
	for (int t = 0; t < 4; t++)
		for (int x = 0; x < 3; x++)
			ktune__ew_arg_i64(a, st[t][x]);
	ktune__ew_arg_f32(a, (float)(ktune__attn_scale(key, call) * 1.4426950408889634)); /* log2(e) */
	return 1;
}

/*
 * FlashAttention-2's shapes for sm_80, in shared memory that fits the 99
 * KiB of sm_86 too: 128 query rows over 8 warps (16 rows a warp) and 64-key
 * tiles, Q's fragments in registers, for D up to 128; 64 rows and 32 keys,
 * Q read from shared memory, for D = 256; smaller tiles for short lengths
 * (as the prune wants them).
 */
struct ktune_config ktune__attn_fwd_default(const struct ktune_key *key)
{
	static const char *const names[] = { "BLOCK_M", "BLOCK_N", "WARPS", "STAGES", "Q_REGS", "SWIZZLE" };
	int d = ktune__attn_head_dim(key), block_m = key->m <= 32 ? 32 : key->m <= 64 || d == 256 ? 64 : 128;
	int block_n = d == 256 || key->n <= 32 ? 32 : 64;
	const long values[] = { block_m, block_n, block_m / 16, 2, d != 256, 1 };
	return ktune__attn_config(KTUNE_ATTN_FAMILY_FWD, names, values, 6);
}

/*
 * The wgmma family's default, for sm_90: what the H100's sweep of the suite
 * chose (bench/results/h100-attention.md: three consumer warpgroups, BLOCK_N
 * 128, for every key of head dim 128, and for d64 but its shortest causal
 * one), then smaller tiles; for D = 256, whose tiles fill shared memory
 * sooner, two consumers and 64 keys.  The first the prune keeps for the
 * key; 0 below 128 queries or keys, which the sweep did not measure and
 * the mma.sync default's 32-row tiles waste less on, or where the prune
 * keeps none.
 */
int ktune__attn_fwd_wgmma_default(const struct ktune_key *key, struct ktune_config *out)
{
	static const char *const names[] = { "BLOCK_N", "STAGES", "CONSUMERS", "OVERLAP" };
	static const long d64[][4] = { { 128, 3, 3, 0 }, { 64, 2, 3, 0 }, { 64, 2, 2, 0 }, { 64, 2, 1, 0 } };
	static const long d128[][4] = { { 128, 2, 3, 0 }, { 128, 2, 2, 0 }, { 64, 2, 2, 0 }, { 64, 2, 1, 0 } };
	static const long d256[][4] = { { 64, 2, 2, 0 }, { 64, 2, 1, 0 } };
	int d = ktune__attn_head_dim(key);
	const long(*prefs)[4] = d == 64 ? d64 : d == 128 ? d128 : d256;
	int n = d == 64 ? (int)(sizeof(d64) / sizeof(d64[0])) : d == 128 ? (int)(sizeof(d128) / sizeof(d128[0]))
			: (int)(sizeof(d256) / sizeof(d256[0]));
	char why[160];
	if (key->m < 128 || key->n < 128)
		return 0;
	for (int i = 0; i < n; i++) {
		struct ktune_config c = ktune__attn_config(KTUNE_ATTN_FAMILY_WGMMA, names, prefs[i], 4);
		if (!ktune__attn_fwd_prune(key, &c, why, sizeof(why))) {
			*out = c;
			return 1;
		}
	}
	return 0;
}
