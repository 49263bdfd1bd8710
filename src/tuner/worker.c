/*
 * worker.c - a problem's buffers, its reference result, and candidate runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "templates.h"
#include "runtime/cublas.h"
#include "tuner/worker-op.h"
#include "tuner/worker.h"

struct ktune_worker {
	ktune_ctx *ctx;
	struct ktune_bench bench;
	struct ktune_cublas *cublas; /* NULL when cuBLAS is missing */
	CUmodule util, reference;
	CUfunction fill, compare, gemm_ref;
	CUdeviceptr stats; /* double sums[2]; unsigned max_bits; pad; unsigned long long bad */
	struct ktune_problem p;
	struct ktune_op_problem *op; /* the problem of an op other than GEMM; NULL for GEMM */
	CUdeviceptr a, b, c, c_init, ref;
	size_t a_elems, b_elems, c_elems;
};

struct stats {
	double sums[2];
	unsigned max_bits, pad;
	unsigned long long bad;
};

static int load_module(ktune_ctx *ctx, const char *name, CUmodule *mod, struct ktune_err *e)
{
	const struct ktune_template_file *f = ktune__template_file(name);
	struct ktune_cubin cubin;
	if (!f)
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no embedded template '%s'", name);
	int rc = ktune__compile(f->name, f->text, f->len, NULL, 0, ctx->id.arch, ctx->cache_dir,
				&cubin, e);
	if (rc)
		return rc;
	CUresult r = ktune_cu.cuModuleLoadData(mod, cubin.data);
	ktune__cubin_free(&cubin);
	if (r != CUDA_SUCCESS) {
		char d[256];
		ktune__cu_describe(r, d, sizeof(d));
		return ktune__fail(e, KTUNE_ERR_CUDA, "cannot load '%s': %s", name, d);
	}
	return KTUNE_OK;
}

int ktune__worker_open(ktune_ctx *ctx, struct ktune_worker **out, struct ktune_err *e)
{
	struct ktune_worker *w = calloc(1, sizeof(*w));
	int rc;
	if (!w)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	w->ctx = ctx;
	if ((rc = load_module(ctx, "util.cu", &w->util, e)) ||
	    (rc = load_module(ctx, "gemm_reference.cu", &w->reference, e)))
		goto out;
	CU_GOTO(e, rc, cuModuleGetFunction(&w->fill, w->util, "fill_random"));
	CU_GOTO(e, rc, cuModuleGetFunction(&w->compare, w->util, "compare_to_reference"));
	CU_GOTO(e, rc, cuModuleGetFunction(&w->gemm_ref, w->reference, "gemm_reference"));
	CU_GOTO(e, rc, cuMemAlloc_v2(&w->stats, sizeof(struct stats)));
	if ((rc = ktune__bench_open(&w->bench, ctx->l2_bytes, e)))
		goto out;
	ktune__cublas_open(&w->cublas, NULL); /* optional: without it there is no baseline */
	*out = w;
	return KTUNE_OK;
out:
	ktune__worker_close(w);
	return rc;
}

static void free_problem(struct ktune_worker *w)
{
	ktune__op_problem_close(w->op);
	w->op = NULL;
	CUdeviceptr *bufs[] = { &w->a, &w->b, &w->c, &w->c_init, &w->ref };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		if (*bufs[i])
			ktune_cu.cuMemFree_v2(*bufs[i]);
		*bufs[i] = 0;
	}
}

void ktune__worker_close(struct ktune_worker *w)
{
	if (!w)
		return;
	free_problem(w);
	ktune__bench_close(&w->bench);
	ktune__cublas_close(w->cublas);
	if (w->stats)
		ktune_cu.cuMemFree_v2(w->stats);
	if (w->util)
		ktune_cu.cuModuleUnload(w->util);
	if (w->reference)
		ktune_cu.cuModuleUnload(w->reference);
	free(w);
}

const struct ktune_problem *ktune__worker_problem(const struct ktune_worker *w)
{
	return &w->p;
}

const char *ktune__worker_cublas_version(const struct ktune_worker *w)
{
	return w->cublas ? ktune__cublas_version(w->cublas) : "";
}

static CUdeviceptr at(CUdeviceptr base, int offset)
{
	return base + (CUdeviceptr)offset * 2;
}

static int fill(struct ktune_worker *w, CUdeviceptr p, size_t n, unsigned seed,
		struct ktune_err *e)
{
	long long count = (long long)n;
	int bf16 = w->p.key.dtype == KTUNE_BF16;
	void *args[] = { &p, &count, &seed, &bf16 };
	CU_TRY(e, cuLaunchKernel(w->fill, 1024, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	return KTUNE_OK;
}

void ktune__worker_buffers(const struct ktune_worker *w, CUdeviceptr *a, CUdeviceptr *b,
			   CUdeviceptr *c_init, CUdeviceptr *c, CUdeviceptr *ref)
{
	*a = at(w->a, w->p.offset);
	*b = at(w->b, w->p.offset);
	*c_init = at(w->c_init, w->p.offset);
	*c = at(w->c, w->p.offset);
	*ref = w->ref;
}

int ktune__worker_set_problem(struct ktune_worker *w, const struct ktune_problem *spec,
			      struct ktune_err *e)
{
	struct ktune_problem p = *spec;
	struct ktune_key *k = &p.key;
	int rc = KTUNE_OK;

	free_problem(w);
	if (strcmp(p.key.op, "gemm")) {
		if ((rc = ktune__op_problem_open(w->ctx, &p.key, p.seed, p.offset, &w->op, e)))
			return rc;
		w->p = p;
		w->p.key = w->op->key;
		return KTUNE_OK;
	}
	if (!p.lda)
		p.lda = k->variant[0] == 't' ? k->m : k->k;
	if (!p.ldb)
		p.ldb = k->variant[1] == 't' ? k->k : k->n;
	if (!p.ldc)
		p.ldc = k->n;
	if (p.alpha == 0 && p.beta == 0)
		p.alpha = 1;
	w->a_elems = (size_t)p.lda * (size_t)(k->variant[0] == 't' ? k->k : k->m) + p.offset;
	w->b_elems = (size_t)p.ldb * (size_t)(k->variant[1] == 't' ? k->n : k->k) + p.offset;
	w->c_elems = (size_t)p.ldc * (size_t)k->m + p.offset;
	w->p = p;
	CU_TRY(e, cuMemAlloc_v2(&w->a, w->a_elems * 2));
	CU_TRY(e, cuMemAlloc_v2(&w->b, w->b_elems * 2));
	CU_TRY(e, cuMemAlloc_v2(&w->c, w->c_elems * 2));
	CU_TRY(e, cuMemAlloc_v2(&w->c_init, w->c_elems * 2));
	CU_TRY(e, cuMemAlloc_v2(&w->ref, (size_t)k->m * (size_t)k->n * sizeof(float)));
	k->aligned = ktune__gemm_aligned((void *)at(w->a, p.offset), p.lda,
					 (void *)at(w->b, p.offset), p.ldb,
					 (void *)at(w->c, p.offset), p.ldc);
	w->p.key.aligned = k->aligned;
	if ((rc = fill(w, w->a, w->a_elems, p.seed * 3 + 1, e)) ||
	    (rc = fill(w, w->b, w->b_elems, p.seed * 3 + 2, e)) ||
	    (rc = fill(w, w->c_init, w->c_elems, p.seed * 3 + 3, e)))
		return rc;

	CUdeviceptr a = at(w->a, p.offset), b = at(w->b, p.offset), c = at(w->c_init, p.offset);
	int m = (int)k->m, n = (int)k->n, kk = (int)k->k;
	int bf16 = k->dtype == KTUNE_BF16, ta = k->variant[0] == 't', tb = k->variant[1] == 't';
	long long lda = p.lda, ldb = p.ldb, ldc = p.ldc;
	void *args[] = { &a, &b, &c, &w->ref, &m, &n, &kk, &lda, &ldb, &ldc,
			 &w->p.alpha, &w->p.beta, &bf16, &ta, &tb };
	CU_TRY(e, cuLaunchKernel(w->gemm_ref, (unsigned)((n + 15) / 16), (unsigned)((m + 15) / 16),
				 1, 16, 16, 1, 0, NULL, args, NULL));
	CU_TRY(e, cuCtxSynchronize());
	return rc;
}

int ktune__worker_check(struct ktune_worker *w, struct ktune_check *out, struct ktune_err *e)
{
	if (w->op)
		return ktune__op_problem_check(w->op, out, e);
	struct stats st;
	const struct ktune_key *k = &w->p.key;
	CUdeviceptr x = at(w->c, w->p.offset);
	long long ldx = w->p.ldc;
	int m = (int)k->m, n = (int)k->n, bf16 = k->dtype == KTUNE_BF16;
	CUdeviceptr sums = w->stats, maxp = w->stats + 16, bad = w->stats + 24;
	void *args[] = { &x, &ldx, &w->ref, &m, &n, &bf16, &sums, &maxp, &bad };
	double fro_tol, max_tol;

	CU_TRY(e, cuMemsetD8_v2(w->stats, 0, sizeof(st)));
	CU_TRY(e, cuLaunchKernel(w->compare, 132 * 8, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CU_TRY(e, cuMemcpyDtoH_v2(&st, w->stats, sizeof(st)));
	float max_abs;
	memcpy(&max_abs, &st.max_bits, sizeof(max_abs));
	double rms = sqrt(st.sums[1] / ((double)m * n));
	out->err_fro = st.sums[1] > 0 ? sqrt(st.sums[0] / st.sums[1]) : sqrt(st.sums[0]);
	out->err_max = rms > 0 ? max_abs / rms : max_abs;
	out->bad = st.bad;
	ktune__gemm_tolerance(k->dtype, &fro_tol, &max_tol);
	out->pass = st.bad == 0 && out->err_fro <= fro_tol && out->err_max <= max_tol &&
		    !isnan(out->err_fro) && !isnan(out->err_max);
	return KTUNE_OK;
}

/* NaN in C before a run; with beta != 0 C must hold its initial values instead. */
static int prepare_c(struct ktune_worker *w, struct ktune_err *e)
{
	if (w->op)
		return ktune__op_problem_poison(w->op, e);
	if (w->p.beta != 0) {
		CU_TRY(e, cuMemcpyDtoD_v2(w->c, w->c_init, w->c_elems * 2));
	} else {
		unsigned short nan = w->p.key.dtype == KTUNE_BF16 ? 0x7fc0 : 0x7e00;
		CU_TRY(e, cuMemsetD16_v2(w->c, nan, w->c_elems));
	}
	return KTUNE_OK;
}

struct launch_args {
	struct ktune_worker *w;
	struct ktune_kernel *kernel;
	const struct ktune_config *cfg;
};

static int launch_candidate(void *arg, CUstream stream, struct ktune_err *e)
{
	struct launch_args *la = arg;
	struct ktune_worker *w = la->w;
	const struct ktune_problem *p = &w->p;
	if (w->op)
		return ktune__op_launch(w->ctx, la->kernel, &w->op->key, la->cfg, &w->op->call, stream, e);
	return ktune__gemm_launch(w->ctx, la->kernel, &p->key, la->cfg, p->alpha,
				  at(w->a, p->offset), p->lda, at(w->b, p->offset), p->ldb, p->beta,
				  at(w->c, p->offset), p->ldc, stream, e);
}

static int launch_cublas(void *arg, CUstream stream, struct ktune_err *e)
{
	struct ktune_worker *w = arg;
	const struct ktune_problem *p = &w->p;
	/* cuBLAS's own workspace pool, as every baseline stored so far was measured */
	return ktune__cublas_gemm(w->cublas, &p->key, p->alpha, at(w->a, p->offset), p->lda,
				  at(w->b, p->offset), p->ldb, p->beta, at(w->c, p->offset), p->ldc,
				  stream, 0, 0, e);
}

int ktune__worker_run(struct ktune_worker *w, const struct ktune_config *cfg,
		      const struct ktune_cubin *cubin, enum ktune_run_mode mode, struct ktune_trial *trial,
		      struct ktune_timing *timing, struct ktune_err *e)
{
	struct ktune_err le;
	struct ktune_check check;
	struct launch_args la = { w, NULL, cfg };
	int rc;

	memset(timing, 0, sizeof(*timing));
	pthread_mutex_lock(&w->ctx->lock);
	rc = ktune__kernel_get(w->ctx, &w->p.key, cfg, cubin, &la.kernel, &le);
	pthread_mutex_unlock(&w->ctx->lock);
	if (rc) {
		snprintf(trial->status, sizeof(trial->status), "%s",
			 rc == KTUNE_ERR_COMPILE ? KTUNE_TRIAL_COMPILE_ERROR : KTUNE_TRIAL_LAUNCH_ERROR);
		snprintf(trial->message, sizeof(trial->message), "%.500s", le.msg);
		return KTUNE_OK;
	}
	if ((rc = prepare_c(w, e)))
		return rc;
	rc = launch_candidate(&la, NULL, &le);
	CUresult r = rc ? CUDA_SUCCESS : ktune_cu.cuCtxSynchronize();
	if (rc || r != CUDA_SUCCESS) {
		if (!rc)
			ktune__cu_describe(r, le.msg, sizeof(le.msg));
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_LAUNCH_ERROR);
		snprintf(trial->message, sizeof(trial->message), "%.500s", le.msg);
		return KTUNE_OK;
	}
	if ((rc = ktune__worker_check(w, &check, e)))
		return rc;
	trial->err_fro = check.err_fro;
	trial->err_max = check.err_max;
	if (!check.pass) {
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_WRONG);
		snprintf(trial->message, sizeof(trial->message),
			 "error %.3g (Frobenius) %.3g (max), %llu NaN/Inf", check.err_fro,
			 check.err_max, check.bad);
		return KTUNE_OK;
	}
	if (mode == KTUNE_RUN_VERIFY) {
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_OK);
		return KTUNE_OK;
	}
	rc = ktune__bench_time(&w->bench, launch_candidate, &la, mode == KTUNE_RUN_SCREEN, timing,
			       &le);
	if (rc) {
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_LAUNCH_ERROR);
		snprintf(trial->message, sizeof(trial->message), "%.500s", le.msg);
		return KTUNE_OK;
	}
	snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_OK);
	trial->time_us = timing->median_us;
	return KTUNE_OK;
}

int ktune__worker_cublas(struct ktune_worker *w, struct ktune_check *check,
			 struct ktune_timing *timing, struct ktune_err *e)
{
	int rc;
	if (w->op) { /* an op's baseline: the copy of its bytes, which computes nothing to check */
		memset(check, 0, sizeof(*check));
		check->pass = 1;
		return ktune__bench_time(&w->bench, ktune__op_problem_copy, w->op, 0, timing, e);
	}
	if (!w->cublas)
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "cuBLAS not available");
	if ((rc = prepare_c(w, e)) || (rc = launch_cublas(w, NULL, e)))
		return rc;
	CU_TRY(e, cuCtxSynchronize());
	if ((rc = ktune__worker_check(w, check, e)))
		return rc;
	return ktune__bench_time(&w->bench, launch_cublas, w, 0, timing, e);
}

int ktune__worker_run_public(struct ktune_worker *w, struct ktune_check *check,
			     const char **source, struct ktune_err *e)
{
	const struct ktune_problem *p = &w->p;
	const struct ktune_key *k = &p->key;
	int rc;
	if (w->op)
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED, "%s: no public-call test in the worker", k->op);
	if ((rc = prepare_c(w, e)))
		return rc;
	rc = ktune_gemm(w->ctx, k->variant[0], k->variant[1], k->m, k->n, k->k, p->alpha,
			(void *)at(w->a, p->offset), p->lda, (void *)at(w->b, p->offset), p->ldb,
			p->beta, (void *)at(w->c, p->offset), p->ldc, k->dtype, NULL);
	if (rc)
		return ktune__fail(e, rc, "ktune_gemm failed: %s", ktune_errmsg(w->ctx));
	CU_TRY(e, cuCtxSynchronize());
	*source = ktune_last_dispatch(w->ctx);
	return ktune__worker_check(w, check, e);
}

struct public_call {
	struct ktune_worker *w;
	ktune_ctx *ctx;
};

static int launch_public(void *arg, CUstream stream, struct ktune_err *e)
{
	struct public_call *pc = arg;
	const struct ktune_problem *p = &pc->w->p;
	const struct ktune_key *k = &p->key;
	int rc = ktune_gemm(pc->ctx, k->variant[0], k->variant[1], k->m, k->n, k->k, p->alpha,
			    (void *)at(pc->w->a, p->offset), p->lda, (void *)at(pc->w->b, p->offset), p->ldb,
			    p->beta, (void *)at(pc->w->c, p->offset), p->ldc, k->dtype, stream);
	if (rc)
		return ktune__fail(e, rc, "ktune_gemm failed: %s", ktune_errmsg(pc->ctx));
	return KTUNE_OK;
}

int ktune__worker_time_public(struct ktune_worker *w, ktune_ctx *ctx, struct ktune_check *check,
			      struct ktune_timing *timing, const char **source, struct ktune_err *e)
{
	struct public_call pc = { w, ctx };
	int rc;
	memset(timing, 0, sizeof(*timing));
	if (w->op)
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED, "%s: no public-call timing in the worker", w->p.key.op);
	if ((rc = prepare_c(w, e)) || (rc = launch_public(&pc, NULL, e)))
		return rc;
	CU_TRY(e, cuCtxSynchronize());
	*source = ktune_last_dispatch(ctx);
	if ((rc = ktune__worker_check(w, check, e)) || !check->pass)
		return rc;
	return ktune__bench_time(&w->bench, launch_public, &pc, 0, timing, e);
}
