/*
 * ktune_host.c - a test double of libktune that computes on host memory,
 * so that the Python package's torch layer (custom ops, autograd, fake
 * implementations, torch.compile, ktune.nn, the GPT-2 example) runs on a
 * machine without a GPU, on CPU tensors.  Loaded with
 * KTUNE_LIBRARY=build/python-host/libktune_host.so; the package sees the symbol
 * ktune_test_host_memory and takes "cpu" tensors instead of "cuda" ones.
 *
 * Every op is the float64 reference the tuner checks kernels against
 * (src/ops/elementwise-ref.c, rowwise-ref.c), with inputs read and outputs
 * rounded in the call's dtype, and the argument checks of include/ktune.h
 * (row strides, NULL pointers, sizes), so that the Python layer's marshalling
 * is held to what the real library accepts.  It proves nothing about the
 * GPU kernels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

#include "ktune.h"
#include "ops/elementwise-ref.h"
#include "ops/rowwise-ref.h"

#define API __attribute__((visibility("default")))

struct ktune_ctx {
	char errmsg[512];
};

API int ktune_test_host_memory(void)
{
	return 1;
}

API unsigned ktune_version_number(void)
{
	return KTUNE_VERSION_NUMBER;
}

API const char *ktune_version(void)
{
	return KTUNE_VERSION_STRING;
}

API const char *ktune_strerror(ktune_status s)
{
	switch (s) {
#define X(name, code, text) case KTUNE_##name: return text;
		KTUNE_STATUS_MAP(X)
#undef X
	}
	return "unknown status";
}

API const char *ktune_status_name(ktune_status s)
{
	switch (s) {
#define X(name, code, text) case KTUNE_##name: return #name;
		KTUNE_STATUS_MAP(X)
#undef X
	}
	return "UNKNOWN";
}

static ktune_status fail(ktune_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx->errmsg, sizeof(ctx->errmsg), fmt, ap);
	va_end(ap);
	return KTUNE_ERR_INVALID;
}

API ktune_status ktune_open(const char *db_path, int device, ktune_ctx **out, char *errbuf, size_t errlen)
{
	(void)db_path;
	*out = NULL;
	if (device != 0) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "device %d does not exist (the host double has device 0)", device);
		return KTUNE_ERR_INVALID;
	}
	*out = calloc(1, sizeof(**out));
	return *out ? KTUNE_OK : KTUNE_ERR_NOMEM;
}

API void ktune_close(ktune_ctx *ctx)
{
	free(ctx);
}

API const char *ktune_errmsg(const ktune_ctx *ctx)
{
	return ctx ? ctx->errmsg : "no context";
}

API const char *ktune_last_dispatch(const ktune_ctx *ctx)
{
	(void)ctx;
	return "host";
}

/* Recording, stats and warming: nothing is dispatched, so nothing is missed, counted or compiled. */
API ktune_status ktune_record_misses(ktune_ctx *ctx, const char *path)
{
	(void)path;
	return ctx ? KTUNE_OK : KTUNE_ERR_INVALID;
}

API ktune_status ktune_save_misses(ktune_ctx *ctx, const char *path)
{
	(void)path;
	return ctx ? KTUNE_OK : KTUNE_ERR_INVALID;
}

API ktune_status ktune_get_stats(ktune_ctx *ctx, ktune_stats *out, size_t size)
{
	if (!ctx || !out || size == 0)
		return KTUNE_ERR_INVALID;
	memset(out, 0, size < sizeof(*out) ? size : sizeof(*out));
	return KTUNE_OK;
}

API ktune_status ktune_warm(ktune_ctx *ctx, int wait)
{
	(void)wait;
	return ctx ? KTUNE_OK : KTUNE_ERR_INVALID;
}

/* --- element conversion ------------------------------------------------------------- */

static double get(const void *p, int64_t i, ktune_dtype dt)
{
	if (dt == KTUNE_F32)
		return ((const float *)p)[i];
	if (dt == KTUNE_F16)
		return (double)((const _Float16 *)p)[i];
	uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

static void put(void *p, int64_t i, double v, ktune_dtype dt)
{
	float f = (float)v;
	if (dt == KTUNE_F32) {
		((float *)p)[i] = f;
	} else if (dt == KTUNE_F16) {
		((_Float16 *)p)[i] = (_Float16)f;
	} else { /* bfloat16: round to nearest even, NaN kept quiet */
		uint32_t bits;
		memcpy(&bits, &f, 4);
		if ((bits & 0x7fffffff) > 0x7f800000)
			((uint16_t *)p)[i] = (uint16_t)((bits >> 16) | 0x40);
		else
			((uint16_t *)p)[i] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
	}
}

/* A [rows, cols] matrix of dtype with row stride ld, as packed doubles. */
static double *load(const void *p, int64_t rows, int64_t cols, int64_t ld, ktune_dtype dt)
{
	double *d = malloc(sizeof(double) * (size_t)(rows * cols > 0 ? rows * cols : 1));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			d[r * cols + c] = get(p, r * ld + c, dt);
	return d;
}

static void store(void *p, const double *d, int64_t rows, int64_t cols, int64_t ld, ktune_dtype dt)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			put(p, r * ld + c, d[r * cols + c], dt);
}

static void store_f32(float *p, const double *d, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = (float)d[i];
}

static double *load_f32(const float *p, int64_t n)
{
	double *d = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		d[i] = p[i];
	return d;
}

#define CHECK(ctx, cond, ...)                         \
	do {                                          \
		if (!(cond))                          \
			return fail(ctx, __VA_ARGS__); \
	} while (0)

static ktune_status check_dtype(ktune_ctx *ctx, ktune_dtype dt)
{
	CHECK(ctx, dt == KTUNE_F32 || dt == KTUNE_F16 || dt == KTUNE_BF16, "unknown dtype %d", (int)dt);
	return KTUNE_OK;
}

/* --- GEMM ------------------------------------------------------------------------------- */

API ktune_status ktune_gemm(ktune_ctx *ctx, char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
			    const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc,
			    ktune_dtype dt, void *stream)
{
	(void)stream;
	CHECK(ctx, ta == 'n' || ta == 't', "trans_a '%c' is not 'n' or 't'", ta);
	CHECK(ctx, tb == 'n' || tb == 't', "trans_b '%c' is not 'n' or 't'", tb);
	CHECK(ctx, dt == KTUNE_F16 || dt == KTUNE_BF16, "unknown dtype %d", (int)dt);
	CHECK(ctx, m >= 1 && n >= 1 && k >= 1, "sizes m=%lld n=%lld k=%lld must be in 1..2^31-1", (long long)m,
	      (long long)n, (long long)k);
	CHECK(ctx, lda >= (ta == 'n' ? k : m), "lda=%lld is less than the row length", (long long)lda);
	CHECK(ctx, ldb >= (tb == 'n' ? n : k), "ldb=%lld is less than the row length", (long long)ldb);
	CHECK(ctx, ldc >= n, "ldc=%lld is less than n=%lld", (long long)ldc, (long long)n);
	CHECK(ctx, a && b && c, "a NULL matrix pointer");
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;
			for (int64_t l = 0; l < k; l++)
				s += get(a, ta == 'n' ? i * lda + l : l * lda + i, dt) *
				     get(b, tb == 'n' ? l * ldb + j : j * ldb + l, dt);
			double old = beta != 0 ? get(c, i * ldc + j, dt) : 0;
			put(c, i * ldc + j, alpha * s + beta * old, dt);
		}
	return KTUNE_OK;
}

/* --- elementwise ------------------------------------------------------------------------ */

static ktune_status flat(ktune_ctx *ctx, int64_t n, const void *p, const void *q, const void *r, ktune_dtype dt)
{
	CHECK(ctx, n >= 0, "n %lld is negative", (long long)n);
	CHECK(ctx, n == 0 || (p && q && r), "a NULL buffer");
	return check_dtype(ctx, dt);
}

API ktune_status ktune_add(ktune_ctx *ctx, int64_t n, const void *x, const void *y, void *z, ktune_dtype dt,
			   void *stream)
{
	(void)stream;
	ktune_status rc = flat(ctx, n, x, y, z, dt);
	if (rc)
		return rc;
	double *dx = load(x, 1, n, n, dt), *dy = load(y, 1, n, n, dt);
	ktune__ref_add(dx, dy, dx, n);
	store(z, dx, 1, n, n, dt);
	free(dx);
	free(dy);
	return KTUNE_OK;
}

static ktune_status gelu(ktune_ctx *ctx, int64_t n, const void *x, const void *dy, void *out,
			 ktune_gelu_approx approx, ktune_dtype dt, int backward)
{
	ktune_status rc = flat(ctx, n, x, backward ? dy : x, out, dt);
	if (rc)
		return rc;
	CHECK(ctx, approx == KTUNE_GELU_ERF || approx == KTUNE_GELU_TANH, "unknown approximation %d", (int)approx);
	double *dx = load(x, 1, n, n, dt), *ddy = backward ? load(dy, 1, n, n, dt) : NULL;
	ktune__ref_gelu(dx, ddy, dx, n, (int)approx, backward);
	store(out, dx, 1, n, n, dt);
	free(dx);
	free(ddy);
	return KTUNE_OK;
}

API ktune_status ktune_gelu(ktune_ctx *ctx, int64_t n, const void *x, void *y, ktune_gelu_approx approx,
			    ktune_dtype dt, void *stream)
{
	(void)stream;
	return gelu(ctx, n, x, NULL, y, approx, dt, 0);
}

API ktune_status ktune_gelu_backward(ktune_ctx *ctx, int64_t n, const void *x, const void *dy, void *dx,
				     ktune_gelu_approx approx, ktune_dtype dt, void *stream)
{
	(void)stream;
	return gelu(ctx, n, x, dy, dx, approx, dt, 1);
}

static ktune_status mat(ktune_ctx *ctx, const char *name, const void *p, int64_t ld, int64_t cols)
{
	CHECK(ctx, p, "%s is NULL", name);
	CHECK(ctx, ld >= cols, "%s: row stride %lld is less than cols %lld", name, (long long)ld, (long long)cols);
	return KTUNE_OK;
}

#define MAT(ctx, name, p, ld, cols)                                  \
	do {                                                         \
		ktune_status rc_ = mat(ctx, name, p, ld, cols);      \
		if (rc_)                                             \
			return rc_;                                  \
	} while (0)

API ktune_status ktune_glu(ktune_ctx *ctx, ktune_glu_act act, int64_t rows, int64_t cols, const void *a, int64_t lda,
			   const void *b, int64_t ldb, void *out, int64_t ldo, ktune_dtype dt, void *stream)
{
	(void)stream;
	CHECK(ctx, act >= KTUNE_SWIGLU && act <= KTUNE_GEGLU_TANH, "unknown act %d", (int)act);
	MAT(ctx, "a", a, lda, cols);
	MAT(ctx, "b", b, ldb, cols);
	MAT(ctx, "out", out, ldo, cols);
	double *da = load(a, rows, cols, lda, dt), *db = load(b, rows, cols, ldb, dt);
	ktune__ref_glu(da, db, NULL, da, NULL, rows * cols, (int)act, 0);
	store(out, da, rows, cols, ldo, dt);
	free(da);
	free(db);
	return KTUNE_OK;
}

API ktune_status ktune_glu_backward(ktune_ctx *ctx, ktune_glu_act act, int64_t rows, int64_t cols, const void *a,
				    int64_t lda, const void *b, int64_t ldb, const void *dout, int64_t ld_dout,
				    void *da, int64_t ld_da, void *db, int64_t ld_db, ktune_dtype dt, void *stream)
{
	(void)stream;
	CHECK(ctx, act >= KTUNE_SWIGLU && act <= KTUNE_GEGLU_TANH, "unknown act %d", (int)act);
	MAT(ctx, "a", a, lda, cols);
	MAT(ctx, "b", b, ldb, cols);
	MAT(ctx, "dout", dout, ld_dout, cols);
	MAT(ctx, "da", da, ld_da, cols);
	MAT(ctx, "db", db, ld_db, cols);
	double *xa = load(a, rows, cols, lda, dt), *xb = load(b, rows, cols, ldb, dt);
	double *xd = load(dout, rows, cols, ld_dout, dt);
	double *oa = load(a, rows, cols, lda, dt), *ob = load(b, rows, cols, ldb, dt);
	ktune__ref_glu(xa, xb, xd, oa, ob, rows * cols, (int)act, 1);
	store(da, oa, rows, cols, ld_da, dt);
	store(db, ob, rows, cols, ld_db, dt);
	free(xa), free(xb), free(xd), free(oa), free(ob);
	return KTUNE_OK;
}

static ktune_status dropout(ktune_ctx *ctx, int64_t n, float p, uint64_t seed, uint64_t offset, const void *x,
			    void *y, ktune_dtype dt)
{
	ktune_status rc = flat(ctx, n, x, x, y, dt);
	if (rc)
		return rc;
	CHECK(ctx, p >= 0 && p < 1, "p %g is not in [0, 1)", (double)p);
	double *d = load(x, 1, n, n, dt);
	ktune__ref_dropout(d, d, n, (double)p, seed, offset);
	store(y, d, 1, n, n, dt);
	free(d);
	return KTUNE_OK;
}

API ktune_status ktune_dropout(ktune_ctx *ctx, int64_t n, float p, uint64_t seed, uint64_t offset, const void *x,
			       void *y, ktune_dtype dt, void *stream)
{
	(void)stream;
	return dropout(ctx, n, p, seed, offset, x, y, dt);
}

API ktune_status ktune_dropout_backward(ktune_ctx *ctx, int64_t n, float p, uint64_t seed, uint64_t offset,
					const void *dy, void *dx, ktune_dtype dt, void *stream)
{
	(void)stream;
	return dropout(ctx, n, p, seed, offset, dy, dx, dt);
}

/* --- row-wise --------------------------------------------------------------------------- */

API ktune_status ktune_softmax(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx, void *y,
			       int64_t ldy, ktune_dtype dt, void *stream)
{
	(void)stream;
	MAT(ctx, "x", x, ldx, cols);
	MAT(ctx, "y", y, ldy, cols);
	double *d = load(x, rows, cols, ldx, dt);
	ktune__ref_softmax(d, cols, d, cols, rows, cols);
	store(y, d, rows, cols, ldy, dt);
	free(d);
	return KTUNE_OK;
}

API ktune_status ktune_softmax_backward(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *y, int64_t ldy,
					const void *dy, int64_t lddy, void *dx, int64_t lddx, ktune_dtype dt,
					void *stream)
{
	(void)stream;
	MAT(ctx, "y", y, ldy, cols);
	MAT(ctx, "dy", dy, lddy, cols);
	MAT(ctx, "dx", dx, lddx, cols);
	double *a = load(y, rows, cols, ldy, dt), *b = load(dy, rows, cols, lddy, dt);
	ktune__ref_softmax_backward(a, cols, b, cols, b, cols, rows, cols);
	store(dx, b, rows, cols, lddx, dt);
	free(a), free(b);
	return KTUNE_OK;
}

API ktune_status ktune_rmsnorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
			       const void *residual, int64_t ld_residual, const void *weight, float eps, void *y,
			       int64_t ldy, float *rstd, void *h, int64_t ldh, ktune_dtype dt, void *stream)
{
	(void)stream;
	MAT(ctx, "x", x, ldx, cols);
	MAT(ctx, "y", y, ldy, cols);
	CHECK(ctx, weight && rstd, "rmsnorm: weight or rstd is NULL");
	CHECK(ctx, !h == !residual, "rmsnorm: h is for the residual sum, and residual is NULL");
	if (residual) {
		MAT(ctx, "residual", residual, ld_residual, cols);
		MAT(ctx, "h", h, ldh, cols);
	}
	double *dx = load(x, rows, cols, ldx, dt), *dw = load(weight, 1, cols, cols, dt);
	double *dr = residual ? load(residual, rows, cols, ld_residual, dt) : NULL;
	double *dy = load(x, rows, cols, ldx, dt), *ds = load_f32(rstd, rows), *dh = NULL;
	if (residual) { /* the sum is rounded to dtype first, and normalised as rounded (include/ktune.h) */
		ktune__ref_add(dx, dr, dx, rows * cols);
		store(h, dx, rows, cols, ldh, dt);
		free(dx);
		dx = load(h, rows, cols, ldh, dt);
	}
	ktune__ref_rmsnorm(dx, cols, NULL, 0, dw, eps, dy, cols, ds, dh, 0, rows, cols);
	store(y, dy, rows, cols, ldy, dt);
	store_f32(rstd, ds, rows);
	free(dx), free(dw), free(dr), free(dy), free(ds);
	return KTUNE_OK;
}

API ktune_status ktune_rmsnorm_backward(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *h, int64_t ldh,
					const void *weight, const float *rstd, const void *dy, int64_t lddy, void *dx,
					int64_t lddx, void *dweight, ktune_dtype dt, void *stream)
{
	(void)stream;
	MAT(ctx, "h", h, ldh, cols);
	MAT(ctx, "dy", dy, lddy, cols);
	MAT(ctx, "dx", dx, lddx, cols);
	CHECK(ctx, weight && rstd && dweight, "rmsnorm: weight, rstd or dweight is NULL");
	double *a = load(h, rows, cols, ldh, dt), *w = load(weight, 1, cols, cols, dt), *s = load_f32(rstd, rows);
	double *g = load(dy, rows, cols, lddy, dt), *o = load(dy, rows, cols, lddy, dt), *ow = load(weight, 1, cols, cols, dt);
	ktune__ref_rmsnorm_backward(a, cols, w, s, g, cols, o, cols, ow, rows, cols);
	store(dx, o, rows, cols, lddx, dt);
	store(dweight, ow, 1, cols, cols, dt);
	free(a), free(w), free(s), free(g), free(o), free(ow);
	return KTUNE_OK;
}

API ktune_status ktune_layernorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
				 const void *weight, const void *bias, float eps, void *y, int64_t ldy, float *mean,
				 float *rstd, ktune_dtype dt, void *stream)
{
	(void)stream;
	MAT(ctx, "x", x, ldx, cols);
	MAT(ctx, "y", y, ldy, cols);
	CHECK(ctx, weight && bias && mean && rstd, "layernorm: weight, bias, mean or rstd is NULL");
	double *a = load(x, rows, cols, ldx, dt), *w = load(weight, 1, cols, cols, dt), *b = load(bias, 1, cols, cols, dt);
	double *o = load(x, rows, cols, ldx, dt), *m = load_f32(mean, rows), *s = load_f32(rstd, rows);
	ktune__ref_layernorm(a, cols, w, b, eps, o, cols, m, s, rows, cols);
	store(y, o, rows, cols, ldy, dt);
	store_f32(mean, m, rows);
	store_f32(rstd, s, rows);
	free(a), free(w), free(b), free(o), free(m), free(s);
	return KTUNE_OK;
}

API ktune_status ktune_layernorm_backward(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
					  const void *weight, const float *mean, const float *rstd, const void *dy,
					  int64_t lddy, void *dx, int64_t lddx, void *dweight, void *dbias,
					  ktune_dtype dt, void *stream)
{
	(void)stream;
	MAT(ctx, "x", x, ldx, cols);
	MAT(ctx, "dy", dy, lddy, cols);
	MAT(ctx, "dx", dx, lddx, cols);
	CHECK(ctx, weight && mean && rstd && dweight && dbias, "layernorm: a NULL vector");
	double *a = load(x, rows, cols, ldx, dt), *w = load(weight, 1, cols, cols, dt);
	double *m = load_f32(mean, rows), *s = load_f32(rstd, rows), *g = load(dy, rows, cols, lddy, dt);
	double *o = load(dy, rows, cols, lddy, dt), *ow = load(weight, 1, cols, cols, dt), *ob = load(weight, 1, cols, cols, dt);
	ktune__ref_layernorm_backward(a, cols, w, m, s, g, cols, o, cols, ow, ob, rows, cols);
	store(dx, o, rows, cols, lddx, dt);
	store(dweight, ow, 1, cols, cols, dt);
	store(dbias, ob, 1, cols, cols, dt);
	free(a), free(w), free(m), free(s), free(g), free(o), free(ow), free(ob);
	return KTUNE_OK;
}
