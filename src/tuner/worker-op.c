/*
 * worker-op.c - the problem of an op other than GEMM in the worker: its
 * buffers as the op lays them out, random inputs rounded to the dtype, the
 * op's float64 reference computed once on the host, outputs poisoned
 * before every run and checked after it, and the copy of the same bytes
 * that is the op's baseline.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "templates.h"
#include "tuner/worker-op.h"

/* ------------------------------------------------------------ element conversions */

static uint32_t float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

/* f32 -> f16, round to nearest even (overflow to infinity, subnormals kept). */
static uint16_t to_half(float f)
{
	uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000;
	int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	uint32_t man = x & 0x7fffff;

	if (((x >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
		uint32_t v = man >> shift, rest = man & ((1u << shift) - 1);
		if (rest > half || (rest == half && (v & 1)))
			v++;
		return (uint16_t)(sign | v);
	}
	uint32_t v = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (v & 1)))
		v++; /* a carry into the exponent is the right rounding */
	return (uint16_t)(sign | v);
}

static double from_half(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
	double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(man + 1024, exp - 25);
	return sign ? -v : v;
}

static uint16_t to_bf16(float f)
{
	uint32_t x = float_bits(f);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* Stores v rounded to the dtype at element i of p; returns the value stored. */
static double store(void *p, int64_t i, ktune_dtype d, double v)
{
	switch (d) {
	case KTUNE_F32:
		((float *)p)[i] = (float)v;
		return ((float *)p)[i];
	case KTUNE_F16:
		((uint16_t *)p)[i] = to_half((float)v);
		return from_half(((uint16_t *)p)[i]);
	case KTUNE_BF16:
		((uint16_t *)p)[i] = to_bf16((float)v);
		return bits_float((uint32_t)((uint16_t *)p)[i] << 16);
	}
	return NAN;
}

/* ------------------------------------------------------------ the problem */

/* xorshift64*: reproducible inputs from the seed, whatever the launch shape. */
static double uniform(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

void ktune__op_problem_close(struct ktune_op_problem *p)
{
	if (!p)
		return;
	for (int i = 0; i < KTUNE_OP_MAX_BUFS; i++) {
		if (p->base[i])
			ktune_cu.cuMemFree_v2(p->base[i]);
		if (p->ref[i])
			ktune_cu.cuMemFree_v2(p->ref[i]);
		free(p->host[i]);
	}
	if (p->check_out)
		ktune_cu.cuMemFree_v2(p->check_out);
	for (int i = 0; i < 3; i++)
		if (p->check_module[i])
			ktune_cu.cuModuleUnload(p->check_module[i]);
	if (p->copy_src)
		ktune_cu.cuMemFree_v2(p->copy_src);
	if (p->copy_dst)
		ktune_cu.cuMemFree_v2(p->copy_dst);
	free(p->scratch);
	free(p);
}

/* check.cu for an element type, compiled (or loaded from the cache) once per problem. */
static int load_check(ktune_ctx *ctx, struct ktune_op_problem *p, ktune_dtype type, struct ktune_err *e)
{
	const struct ktune_template_file *f = ktune__template_file("check.cu");
	struct ktune_cubin cubin;
	char dtype[32];
	const char *opts[] = { dtype, "-DTHREADS=256" };
	int rc;
	if (p->check[type])
		return KTUNE_OK;
	if (!f)
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no embedded template 'check.cu'");
	snprintf(dtype, sizeof(dtype), "-DDTYPE=%d", (int)type);
	if ((rc = ktune__compile(f->name, f->text, f->len, opts, 2, ctx->id.arch, ctx->cache_dir, &cubin, e)))
		return rc;
	CUresult r = ktune_cu.cuModuleLoadData(&p->check_module[type], cubin.data);
	ktune__cubin_free(&cubin);
	if (r != CUDA_SUCCESS) {
		char d[256];
		ktune__cu_describe(r, d, sizeof(d));
		return ktune__fail(e, KTUNE_ERR_CUDA, "cannot load 'check.cu': %s", d);
	}
	CU_TRY(e, cuModuleGetFunction(&p->check[type], p->check_module[type], "check_kernel"));
	if (!p->check_out)
		CU_TRY(e, cuMemAlloc_v2(&p->check_out, 64));
	return KTUNE_OK;
}

int ktune__op_problem_open(ktune_ctx *ctx, const struct ktune_key *key_in, unsigned seed, int offset,
			   struct ktune_op_problem **result, struct ktune_err *e)
{
	struct ktune_op_problem *p = calloc(1, sizeof(*p));
	int rc = KTUNE_OK;

	*result = NULL;
	if (!p)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	p->key = *key_in;
	p->op = ktune__op_of(&p->key);
	if (!p->op || ktune__op_is_gemm(p->op)) {
		rc = ktune__fail(e, KTUNE_ERR_INVALID, "op '%.16s' has no generic problem", p->key.op);
		goto out;
	}
	p->key.aligned = 1; /* checked below, with the op's own rules */
	if ((rc = ktune__op_key_check(&p->key, e)))
		goto out;
	p->op->layout(&p->key, &p->layout);
	for (int i = 0; i < p->layout.nbufs; i++) {
		p->size[i] = ktune__op_buf_size(&p->key, &p->layout.bufs[i]);
		/* a word's 4 bytes for KTUNE_BUF_U32, whose inputs are filled as words below */
		p->type[i] = p->layout.bufs[i].type == KTUNE_BUF_ELEM ? p->key.dtype : KTUNE_F32;
	}
	for (int i = 0; i < KTUNE_KEY_DIMS; i++)
		p->call.size[i] = *ktune__key_dim(&p->key, i);
	p->call.p = 0.1f;          /* dropout's, for tuning: any p times the same */
	p->call.scalar[0] = 1e-5; /* a norm's epsilon, likewise */
	p->call.seed = 0x5eed0000u + seed;
	p->call.offset = 0;
	if (p->op->problem_scalars)
		p->op->problem_scalars(&p->key, &p->call);

	/* buffers: inputs random and rounded (the reference sees what the kernel sees) */
	int64_t most = 0; /* bytes */
	for (int i = 0; i < p->layout.nbufs; i++) {
		const struct ktune_op_buf *b = &p->layout.bufs[i];
		size_t bytes = (size_t)(b->elems + offset) * (size_t)p->size[i];
		CU_GOTO(e, rc, cuMemAlloc_v2(&p->base[i], bytes ? bytes : 16));
		p->call.buf[i] = p->base[i] + (CUdeviceptr)offset * (CUdeviceptr)p->size[i];
		p->call.ld[i] = b->ld;
		p->host[i] = malloc((size_t)(b->elems ? b->elems : 1) * sizeof(double));
		if (!p->host[i]) {
			rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory for %lld elements", (long long)b->elems);
			goto out;
		}
		/* the scratch holds a buffer's elements as stored, or an output's fp32 reference */
		int64_t bytes_needed = b->elems * (p->size[i] > 4 ? p->size[i] : 4);
		if (bytes_needed > most)
			most = bytes_needed;
	}
	p->scratch = malloc((size_t)(most ? most : 4));
	if (!p->scratch) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < p->layout.nbufs; i++) {
		const struct ktune_op_buf *b = &p->layout.bufs[i];
		double lo, hi;
		uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(seed * 16 + (unsigned)i + 1);
		if (b->output)
			continue;
		p->op->input_range(&p->key, i, &lo, &hi);
		for (int64_t j = 0; j < b->elems; j++) {
			double v = lo + (hi - lo) * uniform(&state);
			if (b->type == KTUNE_BUF_I64) { /* an index: its floor, -1 (to ignore) where negative */
				int64_t x = v < 0 ? -1 : (int64_t)floor(v);
				((int64_t *)p->scratch)[j] = x;
				p->host[i][j] = (double)x;
			} else if (b->type == KTUNE_BUF_U32) { /* packed words: integers in [lo, hi) */
				p->host[i][j] = ((uint32_t *)p->scratch)[j] = (uint32_t)floor(v);
			} else {
				p->host[i][j] = store(p->scratch, j, p->type[i], v);
			}
		}
		CU_GOTO(e, rc, cuMemcpyHtoD_v2(p->call.buf[i], p->scratch, (size_t)b->elems * (size_t)p->size[i]));
	}
	p->op->reference(&p->key, &p->call, p->host);
	p->key.aligned = ktune__op_call_aligned(&p->key, &p->layout, &p->call);

	/* the references go to the GPU as fp32, where each run is checked; the host copies go */
	float *ref32 = (float *)p->scratch;
	for (int i = 0; i < p->layout.nbufs; i++) {
		const struct ktune_op_buf *b = &p->layout.bufs[i];
		if (b->output) {
			if ((rc = load_check(ctx, p, p->type[i], e)))
				goto out;
			for (int64_t j = 0; j < b->elems; j++)
				ref32[j] = (float)p->host[i][j];
			CU_GOTO(e, rc, cuMemAlloc_v2(&p->ref[i], (size_t)(b->elems ? b->elems : 1) * sizeof(float)));
			CU_GOTO(e, rc, cuMemcpyHtoD_v2(p->ref[i], ref32, (size_t)b->elems * sizeof(float)));
		}
		free(p->host[i]);
		p->host[i] = NULL;
	}
	free(p->scratch);
	p->scratch = NULL;

	/* the baseline: a copy of as many bytes as the op must move, read and written */
	p->copy_bytes = (size_t)(p->op->bytes(&p->key) / 2);
	if (p->copy_bytes < 16)
		p->copy_bytes = 16;
	CU_GOTO(e, rc, cuMemAlloc_v2(&p->copy_src, p->copy_bytes));
	CU_GOTO(e, rc, cuMemAlloc_v2(&p->copy_dst, p->copy_bytes));
	CU_GOTO(e, rc, cuMemsetD8_v2(p->copy_src, 0x3c, p->copy_bytes));
out:
	if (rc) {
		ktune__op_problem_close(p);
		return rc;
	}
	*result = p;
	return KTUNE_OK;
}

int ktune__op_problem_poison(struct ktune_op_problem *p, struct ktune_err *e)
{
	for (int i = 0; i < p->layout.nbufs; i++)
		if (p->layout.bufs[i].output && p->layout.bufs[i].elems)
			CU_TRY(e, cuMemsetD8_v2(p->call.buf[i], 0xff, (size_t)p->layout.bufs[i].elems * (size_t)p->size[i]));
	return KTUNE_OK;
}

/* check.cu's result. */
struct check_out {
	double sq_err, sq_ref;
	unsigned long long bad, over;
	unsigned worst_bits;
};

int ktune__op_problem_check(struct ktune_op_problem *p, struct ktune_check *out, struct ktune_err *e)
{
	double sq_err = 0, sq_ref = 0, worst = 0;
	unsigned long long bad = 0, over = 0;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < p->layout.nbufs; i++) {
		const struct ktune_op_buf *b = &p->layout.bufs[i];
		struct check_out got;
		if (!b->output || !b->elems)
			continue;
		float tol = (float)p->op->tolerance(&p->key, i);
		long long n = b->elems;
		CUdeviceptr x = p->call.buf[i];
		void *args[] = { &x, &p->ref[i], &n, &tol, &p->check_out };
		CU_TRY(e, cuMemsetD8_v2(p->check_out, 0, sizeof(got)));
		CU_TRY(e, cuLaunchKernel(p->check[p->type[i]], 132 * 8, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
		CU_TRY(e, cuMemcpyDtoH_v2(&got, p->check_out, sizeof(got)));
		float w;
		memcpy(&w, &got.worst_bits, sizeof(w));
		sq_err += got.sq_err;
		sq_ref += got.sq_ref;
		bad += got.bad;
		over += got.over;
		if (w > worst)
			worst = w;
	}
	out->err_fro = sq_ref > 0 ? sqrt(sq_err / sq_ref) : sqrt(sq_err);
	out->err_max = worst;
	out->bad = bad;
	out->pass = bad == 0 && over == 0 && !isnan(out->err_fro);
	return KTUNE_OK;
}

int ktune__op_problem_copy(void *arg, CUstream stream, struct ktune_err *e)
{
	struct ktune_op_problem *p = arg;
	CU_TRY(e, cuMemcpyDtoDAsync_v2(p->copy_dst, p->copy_src, p->copy_bytes, stream));
	return KTUNE_OK;
}
