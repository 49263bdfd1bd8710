/*
 * attention.h - the attention op's files (attention.c: the key, the table
 * entry and the public functions; attention-fwd.c and attention-bwd.c: each
 * pass's problem, prune and launch) and what the tests share with them: the
 * public functions' arguments as one struct, and their key and call, so
 * that a test can run a config of its choice on exactly what a public
 * function would launch.
 */
#ifndef KTUNE_ATTENTION_H
#define KTUNE_ATTENTION_H

#include "ops/op.h"

/* ktune_attention_fwd's and ktune_attention_bwd's arguments (include/ktune.h); the forward leaves the rest 0. */
struct ktune_attention_args {
	int64_t batch, sq, sk, hq, hkv, head_dim;
	const void *q;
	const int64_t *q_strides;
	const void *k;
	const int64_t *k_strides;
	const void *v;
	const int64_t *v_strides;
	void *o; /* the forward's output; an input of the backward */
	const int64_t *o_strides;
	float *lse;
	float scale;
	int causal;
	ktune_dtype dtype;
	/* the backward's */
	const void *dout;
	const int64_t *dout_strides;
	void *dq;
	const int64_t *dq_strides;
	void *dk;
	const int64_t *dk_strides;
	void *dv;
	const int64_t *dv_strides;
	int deterministic;
};

/*
 * Checks the arguments as the public function does and fills the call's key
 * (exact sizes, aligned) and call (buffers, sizes, scale, heads and
 * strides).  KTUNE_OK, or KTUNE_ERR_INVALID with the reason in e.
 */
int ktune__attention_fwd_call(const struct ktune_attention_args *a, struct ktune_key *key,
			      struct ktune_op_call *call, struct ktune_err *e);
int ktune__attention_bwd_call(const struct ktune_attention_args *a, struct ktune_key *key,
			      struct ktune_op_call *call, struct ktune_err *e);

/* ------------------------------------------------------------ inside the op */

extern const struct ktune_op ktune__op_attention;

enum ktune_attn_pass { KTUNE_ATTN_FWD, KTUNE_ATTN_BWD, KTUNE_ATTN_BWD_DET };

/*
 * The families, in the op's table: the forward's two (mma.sync; wgmma,
 * sm_90a only) and the backward's two (mma.sync; wgmma, sm_90a only).
 */
enum { KTUNE_ATTN_FAMILY_FWD, KTUNE_ATTN_FAMILY_BWD, KTUNE_ATTN_FAMILY_WGMMA, KTUNE_ATTN_FAMILY_WGMMA_BWD };

/*
 * call->iarg of a call from the API: the heads, then each tensor's (batch,
 * sequence, head) strides; all 0 in the tuner's problem.
 */
enum {
	KTUNE_ATTN_IARG_HQ,
	KTUNE_ATTN_IARG_HKV,
	KTUNE_ATTN_IARG_Q = 2, /* q's strides: + 0, 1, 2 */
	KTUNE_ATTN_IARG_K = 5,
	KTUNE_ATTN_IARG_V = 8,
	KTUNE_ATTN_IARG_O = 11,
	KTUNE_ATTN_IARG_DO = 14,
	KTUNE_ATTN_IARG_DQ = 17,
	KTUNE_ATTN_IARG_DK = 20,
	KTUNE_ATTN_IARG_DV = 23,
	KTUNE_ATTN_IARG_COUNT = 26,
};

enum ktune_attn_pass ktune__attn_pass(const struct ktune_key *key);
int ktune__attn_head_dim(const struct ktune_key *key);
int ktune__attn_causal(const struct ktune_key *key);
/* The key's GQA bucket: query heads per K/V head, a power of two from 1 to 16. */
int64_t ktune__attn_gqa(const struct ktune_key *key);

/* The tuner's batch and heads for bh: one batch while the grid's y dimension holds the heads. */
void ktune__attn_tuner_heads(int64_t bh, int64_t *batch, int64_t *hq);

/*
 * A call's batch, heads and the strides of `n` tensors whose iarg strides
 * start at iarg[first] (the API's), or the tuner's (tuner[t], each 3 strides).
 */
void ktune__attn_call_dims(const struct ktune_op_call *call, int first, int n, const int64_t (*tuner)[3],
			   int64_t *batch, int64_t *hq, int64_t *hkv, int64_t (*st)[3]);

/* The scale of a call: the API's, or the tuner's 1 / sqrt(D). */
double ktune__attn_scale(const struct ktune_key *key, const struct ktune_op_call *call);

/* An int kernel argument. */
void ktune__attn_arg_i32(struct ktune_op_args *a, int v);

/* Shared memory a block of sm_90 may opt in to; sm_80 allows 163 KiB, sm_86 and sm_89 99 KiB. */
#define KTUNE_ATTN_SMEM_LIMIT (227 * 1024)

/* Each pass's side of the op's functions (attention-fwd.c, attention-bwd.c). */
void ktune__attn_fwd_layout(const struct ktune_key *key, struct ktune_op_layout *out);
void ktune__attn_fwd_reference(const struct ktune_key *key, double *const *bufs);
int ktune__attn_fwd_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len);
int ktune__attn_fwd_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max);
int ktune__attn_fwd_steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			  struct ktune_op_step *out);
struct ktune_config ktune__attn_fwd_default(const struct ktune_key *key);
int ktune__attn_fwd_wgmma_default(const struct ktune_key *key, struct ktune_config *out);

void ktune__attn_bwd_layout(const struct ktune_key *key, struct ktune_op_layout *out);
void ktune__attn_bwd_input_range(const struct ktune_key *key, int buf, double *lo, double *hi);
void ktune__attn_bwd_reference(const struct ktune_key *key, double *const *bufs);
int ktune__attn_bwd_prune(const struct ktune_key *key, const struct ktune_config *c, char *why, size_t len);
int ktune__attn_bwd_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max);
int ktune__attn_bwd_steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			  int sm_count, struct ktune_op_step *out);
size_t ktune__attn_bwd_workspace(const struct ktune_key *key, const struct ktune_config *c,
				 const struct ktune_op_call *call, int sm_count);
struct ktune_config ktune__attn_bwd_default(const struct ktune_key *key);
int ktune__attn_bwd_wgmma_default(const struct ktune_key *key, int sm_count, struct ktune_config *out);

/* A config of `family` with the named parameters' values (the space's nearest), the rest at their first. */
struct ktune_config ktune__attn_config(int family, const char *const *names, const long *values, int n);

#endif
