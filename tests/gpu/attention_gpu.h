/*
 * attention_gpu.h - what the flash attention GPU tests (test-attention-gpu.c,
 * the forward; test-attention-bwd-gpu.c, the backward) share: the context,
 * seeded inputs rounded to the element type, tensors [B, S, H, D] in three
 * layouts with sentinels in the gaps between rows, a problem (inputs, device
 * buffers, the float64 reference of its rows), NaN poisoning, element-wise
 * checks that name the element, and compiling configs in parallel.
 */
#ifndef KTUNE_ATTENTION_GPU_H
#define KTUNE_ATTENTION_GPU_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "ops/attention-ref.h"
#include "ops/attention.h"
#include "runtime/context.h"

static ktune_ctx *ctx;
static int sm_count;

/* ------------------------------------------------------------ host elements */

static inline unsigned short to_bits(double v, int bf16)
{
	float f = (float)v;
	uint32_t x;
	memcpy(&x, &f, 4);
	if (bf16)
		return (unsigned short)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
	uint32_t sign = (x >> 16) & 0x8000, man = x & 0x7fffff;
	int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	if (exp >= 31)
		return (unsigned short)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (unsigned short)sign;
		man |= 0x800000;
		uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
		uint32_t r = man >> shift, rest = man & ((1u << shift) - 1);
		if (rest > half || (rest == half && (r & 1)))
			r++;
		return (unsigned short)(sign | r);
	}
	uint32_t r = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
		r++;
	return (unsigned short)(sign | r);
}

static inline uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static inline double uniform(uint64_t *s, double lo, double hi)
{
	return lo + (hi - lo) * ((double)(next(s) >> 11) / 9007199254740992.0);
}

/* ------------------------------------------------------------ a problem */

enum layout { BSHD, BHSD_PADDED, INTERLEAVED };
static const char *const layout_names[] = { "bshd", "bhsd padded", "interleaved" };

struct gcase {
	int batch, sq, sk, hq, hkv;
	enum layout layout;
	double scale; /* 0: 1 / sqrt(D) */
};

/* A tensor [B, S, H, D] on the host (its bits and values) and on the GPU. */
struct tensor {
	int64_t st[3], elems;
	unsigned short *bits;
	double *val;
	CUdeviceptr dev;
};

struct problem {
	struct gcase c;
	int d, causal, bf16;
	ktune_dtype dtype;
	double scale;
	struct tensor q, k, v, o;
	double *ref_lse;
	float *lse_got;
	CUdeviceptr lse;
	int64_t nlse;
	unsigned char *want_row; /* rows whose reference is computed (all, or a sample) */
};

static const unsigned short SENTINEL = 0x3c01; /* a finite value, in the gaps between rows */

static inline void strides(enum layout l, int64_t s, int64_t h, int64_t d, int64_t st[3])
{
	switch (l) {
	case BSHD:
		st[0] = s * h * d, st[1] = h * d, st[2] = d;
		break;
	case BHSD_PADDED:
		st[0] = h * s * (d + 8), st[1] = d + 8, st[2] = s * (d + 8);
		break;
	case INTERLEAVED: /* one of two tensors interleaved row by row, batches 8 elements apart */
		st[0] = s * h * d * 2 + 8, st[1] = h * d * 2, st[2] = d;
		break;
	}
}

static inline void tensor_make(struct tensor *t, const struct problem *p, int64_t s, int64_t h, uint64_t *rng, double lo,
			double hi, int input)
{
	strides(p->c.layout, s, h, p->d, t->st);
	t->elems = t->st[0] * p->c.batch;
	t->bits = malloc((size_t)t->elems * 2);
	t->val = calloc((size_t)t->elems, sizeof(double));
	assert_true(t->bits && t->val);
	for (int64_t i = 0; i < t->elems; i++)
		t->bits[i] = SENTINEL;
	if (input)
		for (int64_t b = 0; b < p->c.batch; b++)
			for (int64_t i = 0; i < s; i++)
				for (int64_t x = 0; x < h; x++)
					for (int64_t y = 0; y < p->d; y++) {
						int64_t at = b * t->st[0] + i * t->st[1] + x * t->st[2] + y;
						t->bits[at] = to_bits(uniform(rng, lo, hi), p->bf16);
						t->val[at] = gpu_test_half_to_double(t->bits[at], p->bf16);
					}
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&t->dev, (size_t)t->elems * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(t->dev, t->bits, (size_t)t->elems * 2), CUDA_SUCCESS);
}

static inline void tensor_free(struct tensor *t)
{
	free(t->bits);
	free(t->val);
	ktune_cu.cuMemFree_v2(t->dev);
}

static inline struct ktune_attn_in in_of(const struct tensor *t)
{
	return (struct ktune_attn_in){ t->val, t->st[0], t->st[1], t->st[2] };
}

/* Inputs, device buffers and the reference of rows want_row (NULL: every row; else a sample). */
static inline void problem_make(struct problem *p, const struct gcase *c, int d, int causal, ktune_dtype dtype,
			 const unsigned char *sample, uint64_t seed)
{
	uint64_t rng = seed * 7919 + 17;
	memset(p, 0, sizeof(*p));
	p->c = *c;
	p->d = d;
	p->causal = causal;
	p->dtype = dtype;
	p->bf16 = dtype == KTUNE_BF16;
	p->scale = c->scale > 0 ? c->scale : 1 / sqrt((double)d);
	tensor_make(&p->q, p, c->sq, c->hq, &rng, -2, 2, 1);
	tensor_make(&p->k, p, c->sk, c->hkv, &rng, -2, 2, 1);
	tensor_make(&p->v, p, c->sk, c->hkv, &rng, -1, 1, 1);
	tensor_make(&p->o, p, c->sq, c->hq, &rng, 0, 0, 0);
	p->nlse = (int64_t)c->batch * c->hq * c->sq;
	p->ref_lse = calloc((size_t)p->nlse, sizeof(double));
	p->lse_got = malloc((size_t)p->nlse * sizeof(float));
	p->want_row = malloc((size_t)c->sq);
	assert_true(p->ref_lse && p->lse_got && p->want_row);
	for (int i = 0; i < c->sq; i++)
		p->want_row[i] = sample ? sample[i] : 1;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&p->lse, (size_t)p->nlse * 4), CUDA_SUCCESS);
	struct ktune_attn_shape s = { c->batch, c->sq, c->sk, c->hq, c->hkv, d, causal, p->scale };
	struct ktune_attn_out o = { p->o.val, p->o.st[0], p->o.st[1], p->o.st[2] };
	for (int64_t b = 0; b < c->batch; b++)
		for (int64_t h = 0; h < c->hq; h++)
			for (int64_t i = 0; i < c->sq; i++)
				if (p->want_row[i])
					ktune__ref_attention_row(&s, in_of(&p->q), in_of(&p->k), in_of(&p->v), o,
								 &p->ref_lse[(b * c->hq + h) * c->sq + i], b, h, i);
}

static inline void problem_free(struct problem *p)
{
	tensor_free(&p->q);
	tensor_free(&p->k);
	tensor_free(&p->v);
	tensor_free(&p->o);
	free(p->ref_lse);
	free(p->lse_got);
	free(p->want_row);
	ktune_cu.cuMemFree_v2(p->lse);
}

static inline struct ktune_attention_args args_of(const struct problem *p)
{
	return (struct ktune_attention_args){ p->c.batch, p->c.sq, p->c.sk, p->c.hq, p->c.hkv, p->d,
					      (void *)p->q.dev, p->q.st, (void *)p->k.dev, p->k.st,
					      (void *)p->v.dev, p->v.st, (void *)p->o.dev, p->o.st,
					      (float *)p->lse, (float)p->scale, p->causal, p->dtype };
}

/* NaN (all bits set) in lse and in O's rows (its gaps keep the sentinel). */
static inline void problem_poison(struct problem *p)
{
	unsigned short *bits = malloc((size_t)p->o.elems * 2);
	assert_non_null(bits);
	memcpy(bits, p->o.bits, (size_t)p->o.elems * 2);
	for (int64_t b = 0; b < p->c.batch; b++)
		for (int64_t i = 0; i < p->c.sq; i++)
			for (int64_t h = 0; h < p->c.hq; h++)
				memset(&bits[b * p->o.st[0] + i * p->o.st[1] + h * p->o.st[2]], 0xff, (size_t)p->d * 2);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(p->o.dev, bits, (size_t)p->o.elems * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemsetD8_v2(p->lse, 0xff, (size_t)p->nlse * 4), CUDA_SUCCESS);
	free(bits);
}

/* O and lse against the reference (the rows it has); returns the number wrong, printing the first few. */
static inline int problem_check(struct problem *p, const char *what)
{
	unsigned short *got = malloc((size_t)p->o.elems * 2);
	const double tol = p->bf16 ? 1.2e-2 : 3e-3;
	int bad = 0;
	assert_non_null(got);
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(got, p->o.dev, (size_t)p->o.elems * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(p->lse_got, p->lse, (size_t)p->nlse * 4), CUDA_SUCCESS);
	unsigned char *inside = calloc((size_t)p->o.elems, 1);
	assert_non_null(inside);
	for (int64_t b = 0; b < p->c.batch; b++)
		for (int64_t i = 0; i < p->c.sq; i++)
			for (int64_t h = 0; h < p->c.hq; h++) {
				int64_t l = (b * p->c.hq + h) * p->c.sq + i, row = b * p->o.st[0] + i * p->o.st[1] + h * p->o.st[2];
				memset(&inside[row], 1, (size_t)p->d);
				if (!p->want_row[i])
					continue;
				double want_lse = p->ref_lse[l], got_lse = p->lse_got[l];
				int ok = isinf(want_lse) ? got_lse == want_lse
							 : fabs(got_lse - want_lse) <= 1e-4 * fmax(1, fabs(want_lse));
				if (!ok && bad++ < 3)
					fprintf(stderr, "FAIL %s: lse[b %lld, h %lld, row %lld] = %.9g, want %.9g\n", what,
						(long long)b, (long long)h, (long long)i, got_lse, want_lse);
				for (int64_t x = 0; x < p->d; x++) {
					double g = gpu_test_half_to_double(got[row + x], p->bf16), w = p->o.val[row + x];
					ok = isinf(want_lse) ? g == 0 : fabs(g - w) <= tol * fmax(1, fabs(w));
					if (!ok && bad++ < 3)
						fprintf(stderr, "FAIL %s: o[b %lld, row %lld, h %lld, %lld] = %.6g, want %.6g\n",
							what, (long long)b, (long long)i, (long long)h, (long long)x, g, w);
				}
			}
	for (int64_t i = 0; i < p->o.elems; i++)
		if (!inside[i] && got[i] != SENTINEL && bad++ < 3)
			fprintf(stderr, "FAIL %s: o written between rows, at element %lld\n", what, (long long)i);
	free(inside);
	free(got);
	return bad;
}

static inline void case_name(const struct problem *p, char *buf, size_t len)
{
	snprintf(buf, len, "%s d%d%s b%d sq%d sk%d hq%d hkv%d %s", p->bf16 ? "bf16" : "f16", p->d,
		 p->causal ? " causal" : "", p->c.batch, p->c.sq, p->c.sk, p->c.hq, p->c.hkv,
		 layout_names[p->c.layout]);
}

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	struct ktune_cubin cubin;
	int compiled;
	char err[512];
};

static inline void compile_job(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	struct ktune_err e;
	if (ktune__kernel_compile(&j->key, &j->cfg, ctx->id.arch, NULL, &j->cubin, &e))
		snprintf(j->err, sizeof(j->err), "%.500s", e.msg);
	else
		j->compiled = 1;
}

/* The variant's key for a call (exact sizes). */
static inline struct ktune_key key_of(const struct problem *p)
{
	struct ktune_attention_args a = args_of(p);
	struct ktune_key key;
	struct ktune_op_call call;
	struct ktune_err e;
	if (ktune__attention_fwd_call(&a, &key, &call, &e))
		fail_msg("%s", e.msg);
	return key;
}

static inline int setup(void **state)
{
	struct ktune_err e;
	char err[4096];
	int pushed;
	(void)state;
	if (ktune_open("", 0, &ctx, err, sizeof(err))) { /* an empty path: no database */
		fprintf(stderr, "ktune_open: %s\n", err);
		return -1;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e)) {
		fprintf(stderr, "context: %s\n", e.msg);
		return -1;
	}
	sm_count = ctx->id.sm_count;
	return 0;
}

static inline int teardown(void **state)
{
	(void)state;
	ktune_close(ctx);
	return 0;
}

#endif
