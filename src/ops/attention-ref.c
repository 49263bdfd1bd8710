/*
 * attention-ref.c - float64 CPU reference of attention (attention-ref.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention-ref.h"

static const double *in_row(struct ktune_attn_in t, int64_t b, int64_t s, int64_t h)
{
	return t.p + b * t.sb + s * t.ss + h * t.sh;
}

static double *out_row(struct ktune_attn_out t, int64_t b, int64_t s, int64_t h)
{
	return t.p + b * t.sb + s * t.ss + h * t.sh;
}

static double dot(const double *x, const double *y, int64_t n)
{
	double r = 0;
	for (int64_t i = 0; i < n; i++)
		r += x[i] * y[i];
	return r;
}

/* The row's max score (scaled), or -inf when it sees no key. */
static double row_max(const struct ktune_attn_shape *s, const double *qr, struct ktune_attn_in k, int64_t b,
		      int64_t hk, int64_t i)
{
	double mx = -INFINITY;
	for (int64_t j = 0; j < s->sk; j++)
		if (ktune__attn_visible(s, i, j)) {
			double x = s->scale * dot(qr, in_row(k, b, j, hk), s->d);
			if (x > mx)
				mx = x;
		}
	return mx;
}

void ktune__ref_attention_row(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
			      struct ktune_attn_in v, struct ktune_attn_out o, double *lse, int64_t b, int64_t h,
			      int64_t i)
{
	const int64_t hk = h / (s->hq / s->hkv), d = s->d;
	const double *qr = in_row(q, b, i, h);
	double *orow = out_row(o, b, i, h), sum = 0;
	double mx = row_max(s, qr, k, b, hk, i);

	for (int64_t x = 0; x < d; x++)
		orow[x] = 0;
	if (mx == -INFINITY) {
		*lse = -INFINITY;
		return;
	}
	for (int64_t j = 0; j < s->sk; j++) {
		if (!ktune__attn_visible(s, i, j))
			continue;
		double p = exp(s->scale * dot(qr, in_row(k, b, j, hk), d) - mx);
		const double *vr = in_row(v, b, j, hk);
		sum += p;
		for (int64_t x = 0; x < d; x++)
			orow[x] += p * vr[x];
	}
	for (int64_t x = 0; x < d; x++)
		orow[x] /= sum;
	*lse = mx + log(sum);
}

void ktune__ref_attention(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
			  struct ktune_attn_in v, struct ktune_attn_out o, double *lse)
{
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t h = 0; h < s->hq; h++)
			for (int64_t i = 0; i < s->sq; i++)
				ktune__ref_attention_row(s, q, k, v, o, &lse[(b * s->hq + h) * s->sq + i], b, h, i);
}

static void zero(const struct ktune_attn_shape *s, struct ktune_attn_out t, int64_t len, int64_t heads)
{
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t j = 0; j < len; j++)
			for (int64_t h = 0; h < heads; h++)
				memset(out_row(t, b, j, h), 0, (size_t)s->d * sizeof(double));
}

void ktune__ref_attention_backward(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
				   struct ktune_attn_in v, struct ktune_attn_in dout, struct ktune_attn_out dq,
				   struct ktune_attn_out dk, struct ktune_attn_out dv)
{
	const int64_t d = s->d, ratio = s->hq / s->hkv;
	double *p = malloc((size_t)s->sk * sizeof(double)), *dp = malloc((size_t)s->sk * sizeof(double));

	zero(s, dq, s->sq, s->hq);
	zero(s, dk, s->sk, s->hkv);
	zero(s, dv, s->sk, s->hkv);
	if (!p || !dp) { /* no memory: NaN where the gradients go, which no check passes */
		for (int64_t b = 0; b < s->batch; b++)
			for (int64_t h = 0; h < s->hq; h++)
				out_row(dq, b, 0, h)[0] = NAN;
		free(p);
		free(dp);
		return;
	}
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t h = 0; h < s->hq; h++) {
			const int64_t hk = h / ratio;
			for (int64_t i = 0; i < s->sq; i++) {
				const double *qr = in_row(q, b, i, h), *dor = in_row(dout, b, i, h);
				double mx = row_max(s, qr, k, b, hk, i), sum = 0, delta = 0;
				if (mx == -INFINITY)
					continue; /* no key: O = 0 whatever Q, K, V are; every gradient through it is 0 */
				for (int64_t j = 0; j < s->sk; j++) {
					p[j] = 0;
					if (ktune__attn_visible(s, i, j)) {
						p[j] = exp(s->scale * dot(qr, in_row(k, b, j, hk), d) - mx);
						sum += p[j];
					}
				}
				for (int64_t j = 0; j < s->sk; j++) {
					p[j] /= sum;
					dp[j] = p[j] != 0 ? dot(dor, in_row(v, b, j, hk), d) : 0;
					delta += p[j] * dp[j]; /* = rowsum(dO * O) */
				}
				double *dqr = out_row(dq, b, i, h);
				for (int64_t j = 0; j < s->sk; j++) {
					if (p[j] == 0)
						continue;
					const double ds = p[j] * (dp[j] - delta) * s->scale;
					const double *kr = in_row(k, b, j, hk);
					double *dkr = out_row(dk, b, j, hk), *dvr = out_row(dv, b, j, hk);
					for (int64_t x = 0; x < d; x++) {
						dqr[x] += ds * kr[x];
						dkr[x] += ds * qr[x];
						dvr[x] += p[j] * dor[x];
					}
				}
			}
		}
	free(p);
	free(dp);
}

void ktune__ref_attention_delta(const struct ktune_attn_shape *s, struct ktune_attn_in o, struct ktune_attn_in dout,
				double *delta)
{
	for (int64_t b = 0; b < s->batch; b++)
		for (int64_t h = 0; h < s->hq; h++)
			for (int64_t i = 0; i < s->sq; i++)
				delta[(b * s->hq + h) * s->sq + i] = dot(in_row(o, b, i, h), in_row(dout, b, i, h), s->d);
}

/* P of (row i of head h, key j of its K/V head hk), and dS = P (dO.v - delta), from the given lse and delta. */
static void given_p(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
		    struct ktune_attn_in v, struct ktune_attn_in dout, double lse, double delta, int64_t b, int64_t h,
		    int64_t hk, int64_t i, int64_t j, double *p, double *ds)
{
	*p = *ds = 0;
	if (!ktune__attn_visible(s, i, j) || lse == -INFINITY)
		return;
	*p = exp(s->scale * dot(in_row(q, b, i, h), in_row(k, b, j, hk), s->d) - lse);
	*ds = *p * (dot(in_row(dout, b, i, h), in_row(v, b, j, hk), s->d) - delta);
}

void ktune__ref_attention_dq_row(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
				 struct ktune_attn_in v, struct ktune_attn_in dout, const double *lse, int64_t lse_sb,
				 int64_t lse_sh, const double *delta, struct ktune_attn_out dq, int64_t b, int64_t h,
				 int64_t i)
{
	const int64_t hk = h / (s->hq / s->hkv);
	double *dqr = out_row(dq, b, i, h);
	for (int64_t x = 0; x < s->d; x++)
		dqr[x] = 0;
	for (int64_t j = 0; j < s->sk; j++) {
		double p, ds;
		given_p(s, q, k, v, dout, lse[b * lse_sb + h * lse_sh + i], delta[(b * s->hq + h) * s->sq + i], b, h, hk,
			i, j, &p, &ds);
		if (ds == 0)
			continue;
		const double *kr = in_row(k, b, j, hk);
		for (int64_t x = 0; x < s->d; x++)
			dqr[x] += s->scale * ds * kr[x];
	}
}

void ktune__ref_attention_dkv_row(const struct ktune_attn_shape *s, struct ktune_attn_in q, struct ktune_attn_in k,
				  struct ktune_attn_in v, struct ktune_attn_in dout, const double *lse, int64_t lse_sb,
				  int64_t lse_sh, const double *delta, struct ktune_attn_out dk,
				  struct ktune_attn_out dv, int64_t b, int64_t hk, int64_t j)
{
	const int64_t ratio = s->hq / s->hkv;
	double *dkr = out_row(dk, b, j, hk), *dvr = out_row(dv, b, j, hk);
	for (int64_t x = 0; x < s->d; x++)
		dkr[x] = dvr[x] = 0;
	for (int64_t h = hk * ratio; h < (hk + 1) * ratio; h++)
		for (int64_t i = 0; i < s->sq; i++) {
			double p, ds;
			given_p(s, q, k, v, dout, lse[b * lse_sb + h * lse_sh + i], delta[(b * s->hq + h) * s->sq + i], b, h,
				hk, i, j, &p, &ds);
			if (p == 0)
				continue;
			const double *qr = in_row(q, b, i, h), *dor = in_row(dout, b, i, h);
			for (int64_t x = 0; x < s->d; x++) {
				dkr[x] += s->scale * ds * qr[x];
				dvr[x] += p * dor[x];
			}
		}
}

double ktune__attn_visible_pairs(int64_t sq, int64_t sk, int causal)
{
	if (!causal)
		return (double)sq * (double)sk;
	/* row i sees keys 0 .. i + sk - sq (at most sk, at the last row): rows from i0 = max(0, sq - sk) */
	int64_t i0 = sq > sk ? sq - sk : 0, rows = sq - i0;
	double first = (double)(i0 + sk - sq + 1), last = (double)sk;
	return (first + last) * (double)rows / 2;
}
