/*
 * attention-ref.h - float64 CPU reference of attention
 * (kernels/templates/attention.cu), for the tuner's check and the tests:
 * the definition, in double precision, one row at a time.
 *
 * Q and O are [B, Sq, Hq, D], K and V [B, Sk, Hkv, D], each a pointer and
 * the strides (elements) of its batch, sequence and head dimensions; D is
 * contiguous.  Query head h reads K/V head h / (Hq / Hkv).  Causal masking
 * is aligned bottom-right: query i sees key j when j <= i + Sk - Sq.  lse
 * is [B, Hq, Sq], contiguous.  Every function is thread-safe.
 */
#ifndef KTUNE_ATTENTION_REF_H
#define KTUNE_ATTENTION_REF_H

#include <stdint.h>

struct ktune_attn_shape {
	int64_t batch, sq, sk, hq, hkv, d;
	int causal;
	double scale; /* of Q K^T */
};

/* A tensor [B, S, H, D]: element (b, s, h, i) at p[b * sb + s * ss + h * sh + i]. */
struct ktune_attn_in {
	const double *p;
	int64_t sb, ss, sh;
};

struct ktune_attn_out {
	double *p;
	int64_t sb, ss, sh;
};

/* Whether query i sees key j. */
static inline int ktune__attn_visible(const struct ktune_attn_shape *s, int64_t i, int64_t j)
{
	return j < s->sk && (!s->causal || j <= i + s->sk - s->sq);
}

/*
 * Row i of head h of batch b: o's row = softmax(scale q k^T) v and *lse its
 * log-sum-exp; a row that sees no key gets zeros and -inf.
 */
void ktune__ref_attention_row(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
			      struct ktune_attn_in v, struct ktune_attn_out o, double *lse, int64_t b, int64_t h,
			      int64_t i);

/* Every row: O and lse ([B, Hq, Sq]). */
void ktune__ref_attention(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
			  struct ktune_attn_in v, struct ktune_attn_out o, double *lse);

/*
 * The gradients of O = attention(Q, K, V) given dO, recomputed from Q, K
 * and V alone: with P the attention probabilities, dV = P^T dO,
 * dS = P * (dO V^T - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q;
 * dK and dV of a K/V head sum over the query heads that read it.  dq, dk,
 * dv are written whole (zeros where nothing reaches them).
 */
void ktune__ref_attention_backward(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
				   struct ktune_attn_in v, struct ktune_attn_in dout, struct ktune_attn_out dq,
				   struct ktune_attn_out dk, struct ktune_attn_out dv);

/*
 * The backward as FlashAttention computes it, from a given lse (natural
 * log, [B, Hq, Sq] with strides lse_sb, lse_sh) and delta = rowsum(dO * O)
 * (delta [B, Hq, Sq] contiguous, ktune__ref_attention_delta): P =
 * exp(scale q.k - lse) where the mask keeps the pair (0 where it does not,
 * and for a row whose lse is -inf), dS = P (dO.v - delta).  With the exact
 * O and lse this is the gradient; the kernels get them rounded.  By rows
 * (dQ's row i of head h) and by keys (dK's and dV's row j of K/V head hk,
 * summed over the query heads that read it), so that each may run in
 * parallel.
 */
void ktune__ref_attention_delta(const struct ktune_attn_shape *s, struct ktune_attn_in o, struct ktune_attn_in dout,
				double *delta);
void ktune__ref_attention_dq_row(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
				 struct ktune_attn_in v, struct ktune_attn_in dout, const double *lse, int64_t lse_sb,
				 int64_t lse_sh, const double *delta, struct ktune_attn_out dq, int64_t b, int64_t h,
				 int64_t i);
void ktune__ref_attention_dkv_row(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
				  struct ktune_attn_in v, struct ktune_attn_in dout, const double *lse, int64_t lse_sb,
				  int64_t lse_sh, const double *delta, struct ktune_attn_out dk,
				  struct ktune_attn_out dv, int64_t b, int64_t hk, int64_t j);

/* Query-key pairs that are not masked, over one head: Sq * Sk, or fewer when causal. */
double ktune__attn_visible_pairs(int64_t sq, int64_t sk, int causal);

#endif
