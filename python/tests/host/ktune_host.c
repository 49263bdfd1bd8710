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
 *
 * The runtime's bookkeeping is honest but simple.  There is no tuning, so
 * every key is served by its one implementation, "default", and is a miss:
 * calls and keys are counted by key as the real runtime counts them (its
 * buckets and alignment classes, src/ops/), and saved to a misses file in
 * the real format (docs/runtime.md), adding to one this double wrote.  It
 * has no database: recording into one is KTUNE_ERR_UNSUPPORTED.  It compiles
 * no kernel: a warm finds nothing to compile, and kernels, NVRTC and cache
 * counts stay 0.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ktune.h"
#include "common.h"
#include "ops/attention-ref.h"
#include "ops/elementwise-ref.h"
#include "ops/quant-ref.h"
#include "ops/quant.h"
#include "ops/rowwise-ref.h"

#define API __attribute__((visibility("default")))

/* A key as the runtime's dispatch looks it up (src/key.h): sizes bucketed as the op's. */
struct hkey {
	char op[16];
	ktune_dtype dtype;
	char variant[24];
	int64_t m, n, k;
	int aligned;
};

struct hentry {
	struct hkey key;
	int64_t calls;
	struct hentry *next;
};

struct ktune_ctx {
	char errmsg[512];
	int has_db;        /* ktune_open's db_path was not "" */
	char *record_path; /* where ktune_close saves the misses; NULL: nowhere */
	pthread_mutex_t lock;
	struct hentry *keys;
	int64_t nkeys, calls;
	int warm_state;
};

static __thread const char *last_dispatch = "none";

API int ktune_test_host_memory(void)
{
	return 1;
}

/* sizeof(ktune_stats) and the offset of each of its fields in order, as this
 * build's compiler lays them out: the Python package's ctypes Structure is
 * held to it (python/tests/test_package.py). */
API size_t ktune_test_stats_layout(size_t *offsets, int n)
{
	const size_t off[] = {
		offsetof(ktune_stats, calls), offsetof(ktune_stats, keys), offsetof(ktune_stats, missed_keys),
		offsetof(ktune_stats, missed_calls), offsetof(ktune_stats, kernels),
		offsetof(ktune_stats, nvrtc_compiles), offsetof(ktune_stats, nvrtc_seconds),
		offsetof(ktune_stats, cache_loads), offsetof(ktune_stats, warm_state),
		offsetof(ktune_stats, warm_compiled), offsetof(ktune_stats, warm_cached),
		offsetof(ktune_stats, warm_failed), offsetof(ktune_stats, warm_seconds),
	};
	for (int i = 0; i < n && i < (int)(sizeof(off) / sizeof(off[0])); i++)
		offsets[i] = off[i];
	return sizeof(ktune_stats);
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

static ktune_status failv(ktune_ctx *ctx, ktune_status rc, const char *fmt, va_list ap)
{
	vsnprintf(ctx->errmsg, sizeof(ctx->errmsg), fmt, ap);
	return rc;
}

static ktune_status fail(ktune_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ktune_status rc = failv(ctx, KTUNE_ERR_INVALID, fmt, ap);
	va_end(ap);
	return rc;
}

static ktune_status fail_with(ktune_ctx *ctx, ktune_status rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	failv(ctx, rc, fmt, ap);
	va_end(ap);
	return rc;
}

/* --- the record of misses (src/runtime/record.c, misses.c) ---------------------------- */

static const char *const DEVICE_LINE = "device: {name: \"ktune host double\", arch: \"sm_0\", sm_count: 1}";

/* The misses file's directory must exist when recording is asked for; NULL is the database. */
static ktune_status check_target(ktune_ctx *ctx, const char *path)
{
	struct stat st;
	if (!path) {
		if (!ctx->has_db)
			return fail(ctx, "cannot record misses into the database: the context has none "
				    "(ktune_open with \"\")");
		return fail_with(ctx, KTUNE_ERR_UNSUPPORTED, "the host double has no database to record misses "
				 "into: record them to a misses file");
	}
	if (!*path)
		return fail(ctx, "an empty misses file path");
	char dir[4096];
	const char *slash = strrchr(path, '/');
	if (strlen(path) >= sizeof(dir))
		return fail(ctx, "misses file path '%.64s...' is too long", path);
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else
		snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	if (stat(dir, &st) != 0)
		return fail(ctx, "cannot record misses to '%s': directory '%s': %s", path, dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(ctx, "cannot record misses to '%s': '%s' is not a directory", path, dir);
	return KTUNE_OK;
}

static ktune_status set_target(ktune_ctx *ctx, const char *path)
{
	ktune_status rc;
	if (path && !*path) {
		free(ctx->record_path);
		ctx->record_path = NULL;
		return KTUNE_OK;
	}
	if ((rc = check_target(ctx, path)))
		return rc;
	char *copy = strdup(path);
	if (!copy)
		return fail_with(ctx, KTUNE_ERR_NOMEM, "out of memory");
	free(ctx->record_path);
	ctx->record_path = copy;
	return KTUNE_OK;
}

static int64_t pow2(int64_t n)
{
	int64_t b = 1;
	while (b < n && b < (INT64_C(1) << 34))
		b <<= 1;
	return b;
}

static int64_t rowwise_cols(int64_t cols)
{
	return cols <= 65536 ? cols : pow2(cols);
}

static int aligned16(const void *p)
{
	return (uintptr_t)p % 16 == 0;
}

static size_t dtype_size(ktune_dtype dt)
{
	return dt == KTUNE_F32 ? 4 : 2;
}

/* Counts a call of a key, noting the key the first time; the call was served by "default". */
static void note(ktune_ctx *ctx, const char *op, ktune_dtype dt, const char *variant, int64_t m, int64_t n,
		 int64_t k, int aligned)
{
	struct hkey key;
	memset(&key, 0, sizeof(key));
	snprintf(key.op, sizeof(key.op), "%s", op);
	snprintf(key.variant, sizeof(key.variant), "%s", variant);
	key.dtype = dt;
	key.m = m, key.n = n, key.k = k, key.aligned = aligned;
	last_dispatch = "default";
	pthread_mutex_lock(&ctx->lock);
	struct hentry *e;
	for (e = ctx->keys; e && memcmp(&e->key, &key, sizeof(key)); e = e->next)
		;
	if (!e && (e = calloc(1, sizeof(*e)))) {
		e->key = key;
		e->next = ctx->keys;
		ctx->keys = e;
		ctx->nkeys++;
	}
	if (e)
		e->calls++;
	ctx->calls++;
	pthread_mutex_unlock(&ctx->lock);
}

static const char *dtype_name(ktune_dtype dt)
{
	return dt == KTUNE_F16 ? "f16" : dt == KTUNE_BF16 ? "bf16" : "f32";
}

/* A key's line in a misses file, up to its source: its identity. */
static void key_text(const struct hkey *k, char *buf, size_t len)
{
	int two = strcmp(k->op, "add") && strcmp(k->op, "gelu") && strcmp(k->op, "dropout");
	int n = snprintf(buf, len, "  - {op: %s, dtype: %s, variant: \"%s\", ", k->op, dtype_name(k->dtype),
			 k->variant);
	if (!strcmp(k->op, "gemm"))
		n += snprintf(buf + n, len - (size_t)n, "m: %lld, n: %lld, k: %lld", (long long)k->m, (long long)k->n,
			      (long long)k->k);
	else if (two)
		n += snprintf(buf + n, len - (size_t)n, "rows: %lld, cols: %lld", (long long)k->m, (long long)k->n);
	else
		n += snprintf(buf + n, len - (size_t)n, "n: %lld", (long long)k->m);
	snprintf(buf + n, len - (size_t)n, ", aligned: %s", k->aligned ? "true" : "false");
}

struct line {
	char key[256], source[32];
	long long calls;
};

static int by_key(const void *a, const void *b)
{
	return strcmp(((const struct line *)a)->key, ((const struct line *)b)->key);
}

/* Adds the lines of an earlier file of this double to lines[]; -1 for a file of another device. */
static int read_earlier(FILE *f, struct line **lines, int *n, int *cap)
{
	char buf[512];
	int device_ok = 0;
	while (fgets(buf, sizeof(buf), f)) {
		buf[strcspn(buf, "\n")] = 0;
		if (!strncmp(buf, "device:", 7))
			device_ok = !strcmp(buf, DEVICE_LINE);
		if (strncmp(buf, "  - {", 5))
			continue;
		char *src = strstr(buf, ", source: \""), *calls = strstr(buf, ", calls: ");
		if (!src || !calls || (size_t)(src - buf) >= sizeof((*lines)->key))
			continue;
		if (*n == *cap) {
			*cap = *cap ? 2 * *cap : 16;
			*lines = realloc(*lines, sizeof(**lines) * (size_t)*cap);
		}
		struct line *l = &(*lines)[(*n)++];
		snprintf(l->key, sizeof(l->key), "%.*s", (int)(src - buf), buf);
		snprintf(l->source, sizeof(l->source), "%.*s", (int)strcspn(src + 11, "\""), src + 11);
		l->calls = strtoll(calls + 9, NULL, 10);
	}
	return device_ok ? 0 : -1;
}

/* The misses file at path, with the keys counted so far added to what it holds. */
static ktune_status save_file(ktune_ctx *ctx, const char *path)
{
	struct line *lines = NULL;
	int n = 0, cap = 0, earlier;
	FILE *f = fopen(path, "r");
	if (f) {
		int rc = read_earlier(f, &lines, &n, &cap);
		fclose(f);
		if (rc) {
			free(lines);
			return fail(ctx, "cannot save misses to '%s': a file of another GPU (not the host double's)", path);
		}
	}
	earlier = n;
	pthread_mutex_lock(&ctx->lock);
	for (struct hentry *e = ctx->keys; e; e = e->next) {
		char key[256];
		int i;
		key_text(&e->key, key, sizeof(key));
		for (i = 0; i < earlier && strcmp(lines[i].key, key); i++)
			;
		if (i == earlier) {
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				lines = realloc(lines, sizeof(*lines) * (size_t)cap);
			}
			i = n++;
			snprintf(lines[i].key, sizeof(lines[i].key), "%s", key);
			lines[i].calls = 0;
		}
		snprintf(lines[i].source, sizeof(lines[i].source), "default");
		lines[i].calls += e->calls;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (n > 1)
		qsort(lines, (size_t)n, sizeof(*lines), by_key);
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
	if (!(f = fopen(tmp, "w"))) {
		free(lines);
		return fail_with(ctx, KTUNE_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
	}
	fprintf(f, "# ktune misses: the keys this GPU served without a tuned entry, with their calls.\n"
		   "# Tune exactly these keys with: ktune sweep --misses FILE\n"
		   "format: ktune-misses\nversion: 1\n%s\nkeys:%s\n", DEVICE_LINE, n ? "" : " []");
	for (int i = 0; i < n; i++)
		fprintf(f, "%s, source: \"%s\", calls: %lld}\n", lines[i].key, lines[i].source, lines[i].calls);
	free(lines);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		remove(tmp);
		return fail_with(ctx, KTUNE_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
	}
	return KTUNE_OK;
}

API ktune_status ktune_record_misses(ktune_ctx *ctx, const char *path)
{
	if (!ctx)
		return KTUNE_ERR_INVALID;
	return set_target(ctx, path);
}

API ktune_status ktune_save_misses(ktune_ctx *ctx, const char *path)
{
	ktune_status rc;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (path && !*path)
		return fail(ctx, "ktune_save_misses: an empty path (NULL saves into the database)");
	if ((rc = check_target(ctx, path)))
		return rc;
	return save_file(ctx, path);
}

API ktune_status ktune_get_stats(ktune_ctx *ctx, ktune_stats *out, size_t size)
{
	ktune_stats s;
	if (!ctx || !out || size == 0)
		return KTUNE_ERR_INVALID;
	memset(&s, 0, sizeof(s));
	pthread_mutex_lock(&ctx->lock);
	s.calls = s.missed_calls = ctx->calls; /* no tuning here: every key is a miss */
	s.keys = s.missed_keys = ctx->nkeys;
	s.warm_state = ctx->warm_state;
	pthread_mutex_unlock(&ctx->lock);
	memcpy(out, &s, size < sizeof(s) ? size : sizeof(s));
	return KTUNE_OK;
}

/* Nothing to compile: no tuned entries, no kernels.  KTUNE_NO_CACHE as the real one. */
API ktune_status ktune_warm(ktune_ctx *ctx, int wait)
{
	(void)wait;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	const char *nc = getenv("KTUNE_NO_CACHE");
	if (nc && *nc)
		return fail_with(ctx, KTUNE_ERR_UNSUPPORTED, "no cubin cache to warm (KTUNE_NO_CACHE is set)");
	pthread_mutex_lock(&ctx->lock);
	ctx->warm_state = 2;
	pthread_mutex_unlock(&ctx->lock);
	return KTUNE_OK;
}

API ktune_status ktune_open(const char *db_path, int device, ktune_ctx **out, char *errbuf, size_t errlen)
{
	*out = NULL;
	if (device != 0) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "device %d does not exist (the host double has device 0)", device);
		return KTUNE_ERR_INVALID;
	}
	ktune_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return KTUNE_ERR_NOMEM;
	pthread_mutex_init(&ctx->lock, NULL);
	ctx->has_db = !db_path || *db_path;
	const char *env = getenv("KTUNE_RECORD");
	if (env && *env) {
		ktune_status rc = set_target(ctx, strcmp(env, "db") ? env : NULL);
		if (rc) {
			if (errbuf && errlen)
				snprintf(errbuf, errlen, "KTUNE_RECORD='%s': %s", env, ctx->errmsg);
			ktune_close(ctx);
			return KTUNE_ERR_INVALID;
		}
	}
	*out = ctx;
	return KTUNE_OK;
}

API void ktune_close(ktune_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->record_path && ctx->nkeys > 0)
		save_file(ctx, ctx->record_path); /* ktune_close cannot report: ktune_save_misses does */
	for (struct hentry *e = ctx->keys, *next; e; e = next) {
		next = e->next;
		free(e);
	}
	free(ctx->record_path);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

API const char *ktune_errmsg(const ktune_ctx *ctx)
{
	return ctx ? ctx->errmsg : "no context";
}

API const char *ktune_last_dispatch(const ktune_ctx *ctx)
{
	(void)ctx;
	return last_dispatch;
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
	char layout[3] = { ta, tb, 0 };
	note(ctx, "gemm", dt, layout, m, n, k,
	     aligned16(a) && aligned16(b) && aligned16(c) && lda % 8 == 0 && ldb % 8 == 0 && ldc % 8 == 0);
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
	if (rc || n == 0)
		return rc;
	note(ctx, "add", dt, "", pow2(n), 0, 0, aligned16(x) && aligned16(y) && aligned16(z));
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
	if (n == 0)
		return KTUNE_OK;
	char variant[16];
	snprintf(variant, sizeof(variant), "%s,%s", approx == KTUNE_GELU_TANH ? "tanh" : "erf", backward ? "bwd" : "fwd");
	note(ctx, "gelu", dt, variant, pow2(n), 0, 0,
	     aligned16(x) && aligned16(out) && (!backward || aligned16(dy)));
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

/* The alignment class of a row-wise call: every buffer 16-byte aligned, every row stride a multiple of 16 bytes. */
static int rows_aligned(const void *const *p, const int64_t *ld, int n, ktune_dtype dt)
{
	for (int i = 0; i < n; i++)
		if ((p[i] && !aligned16(p[i])) || (ld[i] * (int64_t)dtype_size(dt)) % 16)
			return 0;
	return 1;
}

static void note_glu(ktune_ctx *ctx, ktune_glu_act act, const char *dir, int64_t rows, int64_t cols, ktune_dtype dt,
		     const void *const *p, const int64_t *ld, int n)
{
	static const char *const acts[] = { "swiglu", "geglu", "geglu_tanh" };
	char variant[24];
	snprintf(variant, sizeof(variant), "%s,%s", acts[act], dir);
	note(ctx, "glu", dt, variant, pow2(rows), pow2(cols), 0, rows_aligned(p, ld, n, dt));
}

static void note_rows(ktune_ctx *ctx, const char *op, const char *variant, int64_t rows, int64_t cols, ktune_dtype dt,
		      const void *const *p, const int64_t *ld, int n)
{
	note(ctx, op, dt, variant, pow2(rows), rowwise_cols(cols), 0, rows_aligned(p, ld, n, dt));
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
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_glu(ctx, act, "fwd", rows, cols, dt, (const void *[]){ a, b, out }, (int64_t[]){ lda, ldb, ldo }, 3);
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
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_glu(ctx, act, "bwd", rows, cols, dt, (const void *[]){ a, b, dout, da, db },
		 (int64_t[]){ lda, ldb, ld_dout, ld_da, ld_db }, 5);
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
	if (n == 0)
		return KTUNE_OK;
	note(ctx, "dropout", dt, "", pow2(n), 0, 0, aligned16(x) && aligned16(y));
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
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_rows(ctx, "softmax", "fwd", rows, cols, dt, (const void *[]){ x, y }, (int64_t[]){ ldx, ldy }, 2);
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
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_rows(ctx, "softmax", "bwd", rows, cols, dt, (const void *[]){ y, dy, dx }, (int64_t[]){ ldy, lddy, lddx }, 3);
	double *a = load(y, rows, cols, ldy, dt), *b = load(dy, rows, cols, lddy, dt);
	ktune__ref_softmax_backward(a, cols, b, cols, b, cols, rows, cols);
	store(dx, b, rows, cols, lddx, dt);
	free(a), free(b);
	return KTUNE_OK;
}

/* A norm's vector over the columns: its values, or `fill` where it is NULL (include/ktune.h). */
static double *load_vec(const void *p, int64_t cols, ktune_dtype dt, double fill)
{
	if (p)
		return load(p, 1, cols, cols, dt);
	double *d = malloc(sizeof(double) * (size_t)(cols > 0 ? cols : 1));
	for (int64_t c = 0; c < cols; c++)
		d[c] = fill;
	return d;
}

API ktune_status ktune_rmsnorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x, int64_t ldx,
			       const void *residual, int64_t ld_residual, const void *weight, float eps, void *y,
			       int64_t ldy, float *rstd, void *h, int64_t ldh, ktune_dtype dt, void *stream)
{
	(void)stream;
	MAT(ctx, "x", x, ldx, cols);
	MAT(ctx, "y", y, ldy, cols);
	CHECK(ctx, rstd, "rmsnorm: rstd is NULL");
	CHECK(ctx, eps >= 0, "rmsnorm: eps %g is not >= 0", (double)eps);
	CHECK(ctx, !h == !residual, "rmsnorm: h is for the residual sum, and residual is NULL");
	CHECK(ctx, cols <= 131072, "rmsnorm: cols %lld is more than 131072", (long long)cols);
	if (residual) {
		MAT(ctx, "residual", residual, ld_residual, cols);
		MAT(ctx, "h", h, ldh, cols);
	}
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_rows(ctx, "rmsnorm", residual ? "fwd_residual" : "fwd", rows, cols, dt,
		  (const void *[]){ x, residual, weight, y, rstd, h }, (int64_t[]){ ldx, ld_residual, 0, ldy, 0, ldh }, 6);
	double *dx = load(x, rows, cols, ldx, dt), *dw = load_vec(weight, cols, dt, 1.0);
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
	CHECK(ctx, rstd, "rmsnorm backward: rstd is NULL");
	CHECK(ctx, cols <= 131072, "rmsnorm: cols %lld is more than 131072", (long long)cols);
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_rows(ctx, "rmsnorm", "bwd", rows, cols, dt, (const void *[]){ h, weight, rstd, dy, dx, dweight },
		  (int64_t[]){ ldh, 0, 0, lddy, lddx, 0 }, 6);
	double *a = load(h, rows, cols, ldh, dt), *w = load_vec(weight, cols, dt, 1.0), *s = load_f32(rstd, rows);
	double *g = load(dy, rows, cols, lddy, dt), *o = load(dy, rows, cols, lddy, dt), *ow = load_vec(NULL, cols, dt, 0);
	ktune__ref_rmsnorm_backward(a, cols, w, s, g, cols, o, cols, ow, rows, cols);
	store(dx, o, rows, cols, lddx, dt);
	if (dweight) /* NULL: not computed */
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
	CHECK(ctx, mean && rstd, "layernorm: mean or rstd is NULL");
	CHECK(ctx, eps >= 0, "layernorm: eps %g is not >= 0", (double)eps);
	CHECK(ctx, cols <= 131072, "layernorm: cols %lld is more than 131072", (long long)cols);
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_rows(ctx, "layernorm", "fwd", rows, cols, dt, (const void *[]){ x, weight, bias, y, mean, rstd },
		  (int64_t[]){ ldx, 0, 0, ldy, 0, 0 }, 6);
	double *a = load(x, rows, cols, ldx, dt), *w = load_vec(weight, cols, dt, 1.0), *b = load_vec(bias, cols, dt, 0.0);
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
	CHECK(ctx, mean && rstd, "layernorm backward: mean or rstd is NULL");
	CHECK(ctx, cols <= 131072, "layernorm: cols %lld is more than 131072", (long long)cols);
	if (rows == 0 || cols == 0)
		return KTUNE_OK;
	note_rows(ctx, "layernorm", "bwd", rows, cols, dt, (const void *[]){ x, weight, mean, rstd, dy, dx, dweight, dbias },
		  (int64_t[]){ ldx, 0, 0, 0, lddy, lddx, 0, 0 }, 8);
	double *a = load(x, rows, cols, ldx, dt), *w = load_vec(weight, cols, dt, 1.0);
	double *m = load_f32(mean, rows), *s = load_f32(rstd, rows), *g = load(dy, rows, cols, lddy, dt);
	double *o = load(dy, rows, cols, lddy, dt), *ow = load_vec(NULL, cols, dt, 0), *ob = load_vec(NULL, cols, dt, 0);
	ktune__ref_layernorm_backward(a, cols, w, m, s, g, cols, o, cols, ow, ob, rows, cols);
	store(dx, o, rows, cols, lddx, dt);
	if (dweight) /* NULL: not computed */
		store(dweight, ow, 1, cols, cols, dt);
	if (dbias)
		store(dbias, ob, 1, cols, cols, dt);
	free(a), free(w), free(m), free(s), free(g), free(o), free(ow), free(ob);
	return KTUNE_OK;
}

/* ------------------------------------------------------------ cross-entropy */

static const char *const REDUCTION_NAMES[] = { "mean", "sum", "none" };

static ktune_status ce_check(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits, int64_t ld,
			     const int64_t *targets, float smoothing, float softcap, ktune_reduction red,
			     ktune_dtype dt)
{
	ktune_status rc = check_dtype(ctx, dt);
	if (rc)
		return rc;
	CHECK(ctx, rows >= 0 && vocab >= 0, "cross_entropy: negative sizes");
	CHECK(ctx, vocab <= 262144, "cross_entropy: vocab %lld is more than 262144", (long long)vocab);
	MAT(ctx, "logits", logits, ld, vocab);
	CHECK(ctx, targets, "cross_entropy: targets is NULL");
	CHECK(ctx, red >= KTUNE_REDUCTION_MEAN && red <= KTUNE_REDUCTION_NONE, "unknown reduction %d", (int)red);
	CHECK(ctx, smoothing >= 0 && smoothing <= 1, "cross_entropy: label_smoothing %g is not in [0, 1]",
	      (double)smoothing);
	CHECK(ctx, softcap >= 0, "cross_entropy: softcap %g is negative", (double)softcap);
	return KTUNE_OK;
}

static void ce_note(ktune_ctx *ctx, const char *pass, int64_t rows, int64_t vocab, float smoothing, float softcap,
		    ktune_reduction red, ktune_dtype dt, const void *logits, int64_t ld)
{
	char variant[24];
	snprintf(variant, sizeof(variant), "%s,%s,%s,%s", pass, REDUCTION_NAMES[red], smoothing > 0 ? "on" : "off",
		 softcap > 0 ? "on" : "off");
	note_rows(ctx, "cross_entropy", variant, rows, vocab, dt, (const void *[]){ logits }, (int64_t[]){ ld }, 1);
}

API ktune_status ktune_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
				     int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
				     float label_smoothing, float softcap, ktune_reduction reduction, float *loss,
				     float *lse, ktune_dtype dt, void *stream)
{
	(void)stream;
	ktune_status rc = ce_check(ctx, rows, vocab, logits, ld_logits, targets, label_smoothing, softcap,
				   reduction, dt);
	if (rc)
		return rc;
	CHECK(ctx, loss && lse, "cross_entropy: loss or lse is NULL");
	if (rows == 0 || vocab == 0)
		return KTUNE_OK;
	ce_note(ctx, "fwd", rows, vocab, label_smoothing, softcap, reduction, dt, logits, ld_logits);
	double *x = load(logits, rows, vocab, ld_logits, dt);
	double *l = malloc(sizeof(double) * (size_t)rows), *s = malloc(sizeof(double) * (size_t)rows);
	ktune__ref_cross_entropy(x, vocab, targets, ignore_index, label_smoothing, softcap, l, s, rows, vocab);
	store_f32(lse, s, rows);
	if (reduction == KTUNE_REDUCTION_NONE) {
		store_f32(loss, l, rows);
	} else {
		double r = ktune__ref_cross_entropy_reduce(l, targets, ignore_index, reduction, rows);
		store_f32(loss, &r, 1);
	}
	free(x), free(l), free(s);
	return KTUNE_OK;
}

API ktune_status ktune_cross_entropy_backward(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
					      int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
					      float label_smoothing, float softcap, ktune_reduction reduction,
					      const float *lse, const float *dloss, void *dlogits, int64_t ld_dlogits,
					      ktune_dtype dt, void *stream)
{
	(void)stream;
	ktune_status rc = ce_check(ctx, rows, vocab, logits, ld_logits, targets, label_smoothing, softcap,
				   reduction, dt);
	if (rc)
		return rc;
	MAT(ctx, "dlogits", dlogits, ld_dlogits, vocab);
	CHECK(ctx, lse && dloss, "cross_entropy backward: lse or dloss is NULL");
	if (rows == 0 || vocab == 0)
		return KTUNE_OK;
	ce_note(ctx, "bwd", rows, vocab, label_smoothing, softcap, reduction, dt, logits, ld_logits);
	double *x = load(logits, rows, vocab, ld_logits, dt), *s = load_f32(lse, rows);
	double *g = load_f32(dloss, reduction == KTUNE_REDUCTION_NONE ? rows : 1);
	ktune__ref_cross_entropy_backward(x, vocab, targets, ignore_index, label_smoothing, softcap, s, reduction, g,
					  x, vocab, rows, vocab);
	store(dlogits, x, rows, vocab, ld_dlogits, dt);
	free(x), free(s), free(g);
	return KTUNE_OK;
}

API ktune_status ktune_cross_entropy_fused(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
					   int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
					   float label_smoothing, float softcap, ktune_reduction reduction, float dloss,
					   float *loss, void *dlogits, int64_t ld_dlogits, ktune_dtype dt, void *stream)
{
	(void)stream;
	ktune_status rc = ce_check(ctx, rows, vocab, logits, ld_logits, targets, label_smoothing, softcap,
				   reduction, dt);
	if (rc)
		return rc;
	MAT(ctx, "dlogits", dlogits, ld_dlogits, vocab);
	CHECK(ctx, loss, "cross_entropy fused: loss is NULL");
	if (rows == 0 || vocab == 0)
		return KTUNE_OK;
	ce_note(ctx, "fused", rows, vocab, label_smoothing, softcap, reduction, dt, logits, ld_logits);
	double *x = load(logits, rows, vocab, ld_logits, dt);
	double *l = malloc(sizeof(double) * (size_t)rows), *s = malloc(sizeof(double) * (size_t)rows);
	double *g = malloc(sizeof(double) * (size_t)rows);
	for (int64_t r = 0; r < rows; r++) /* none: every row's loss gets dloss */
		g[r] = dloss;
	ktune__ref_cross_entropy(x, vocab, targets, ignore_index, label_smoothing, softcap, l, s, rows, vocab);
	if (reduction == KTUNE_REDUCTION_NONE) {
		store_f32(loss, l, rows);
	} else {
		double r = ktune__ref_cross_entropy_reduce(l, targets, ignore_index, reduction, rows);
		store_f32(loss, &r, 1);
	}
	ktune__ref_cross_entropy_backward(x, vocab, targets, ignore_index, label_smoothing, softcap, s, reduction, g,
					  x, vocab, rows, vocab);
	store(dlogits, x, rows, vocab, ld_dlogits, dt);
	free(x), free(l), free(s), free(g);
	return KTUNE_OK;
}

/* The float64 reference rounds each logit and dlogit as the chunks' bf16/f16 scratch does. */
static ktune_dtype round_dt;
static double round_to_dt(double v)
{
	uint32_t h = 0; /* room for any dtype's element */
	put(&h, 0, v, round_dt);
	return get(&h, 0, round_dt);
}

API ktune_status ktune_linear_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t dim, int64_t vocab,
					    const void *hidden, int64_t ld_hidden, const void *weight, int64_t ld_weight,
					    const int64_t *targets, int64_t ignore_index, float label_smoothing,
					    float softcap, ktune_reduction reduction, int64_t count, float dloss,
					    float *loss_rows, void *dhidden, int64_t ld_dhidden, void *dweight,
					    int64_t ld_dweight, int64_t chunk_rows, void *scratch, size_t scratch_bytes,
					    ktune_dtype dt, void *stream)
{
	static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;
	(void)stream, (void)count, (void)chunk_rows, (void)scratch, (void)scratch_bytes;
	CHECK(ctx, dt == KTUNE_F16 || dt == KTUNE_BF16, "linear_cross_entropy: dtype must be f16 or bf16");
	CHECK(ctx, reduction == KTUNE_REDUCTION_MEAN || reduction == KTUNE_REDUCTION_SUM,
	      "linear_cross_entropy: reduction must be mean or sum");
	CHECK(ctx, rows >= 0 && dim >= 0 && vocab >= 0, "linear_cross_entropy: negative sizes");
	CHECK(ctx, targets, "linear_cross_entropy: targets is NULL");
	CHECK(ctx, label_smoothing >= 0 && label_smoothing <= 1, "linear_cross_entropy: label_smoothing %g is not in "
	      "[0, 1]", (double)label_smoothing);
	CHECK(ctx, softcap >= 0, "linear_cross_entropy: softcap %g is negative", (double)softcap);
	MAT(ctx, "hidden", hidden, ld_hidden, dim);
	MAT(ctx, "weight", weight, ld_weight, dim);
	MAT(ctx, "dhidden", dhidden, ld_dhidden, dim);
	MAT(ctx, "dweight", dweight, ld_dweight, dim);
	CHECK(ctx, loss_rows, "linear_cross_entropy: loss_rows is NULL");
	if (rows == 0 || vocab == 0 || dim == 0)
		return KTUNE_OK;
	note(ctx, "linear_ce", dt, "", pow2(rows), dim, vocab, 1);
	double *h = load(hidden, rows, dim, ld_hidden, dt), *w = load(weight, vocab, dim, ld_weight, dt);
	double *l = malloc(sizeof(double) * (size_t)rows), *dh = malloc(sizeof(double) * (size_t)(rows * dim));
	double *dw = malloc(sizeof(double) * (size_t)(vocab * dim));
	pthread_mutex_lock(&round_lock);
	round_dt = dt;
	int bad = ktune__ref_linear_cross_entropy(h, w, targets, ignore_index, label_smoothing, softcap, reduction,
						  dloss, round_to_dt, l, dh, dw, rows, dim, vocab);
	pthread_mutex_unlock(&round_lock);
	if (!bad) {
		store_f32(loss_rows, l, rows);
		store(dhidden, dh, rows, dim, ld_dhidden, dt);
		store(dweight, dw, vocab, dim, ld_dweight, dt);
	}
	free(h), free(w), free(l), free(dh), free(dw);
	return bad ? fail_with(ctx, KTUNE_ERR_NOMEM, "linear_cross_entropy: out of memory") : KTUNE_OK;
}

/* ------------------------------------------------------------ the quantized GEMM */

/* ktune_quant_sizes, _pack and _unpack are the library's own (src/ops/quant.c, linked in): host code. */

API ktune_status ktune_gemm_quant(ktune_ctx *ctx, const ktune_quant_format *fmt, int64_t m, int64_t n, int64_t k,
				  const void *a, int64_t lda, const uint32_t *wq, const void *scales, const void *zeros,
				  const void *bias, void *c, int64_t ldc, ktune_dtype dt, void *stream)
{
	struct ktune_quant_shape s;
	struct ktune_err e;
	(void)stream;
	CHECK(ctx, dt == KTUNE_F16 || dt == KTUNE_BF16, "gemm_quant: dtype must be f16 or bf16");
	CHECK(ctx, fmt, "gemm_quant: fmt is NULL");
	if (ktune__quant_shape(fmt, n, k, &s, &e))
		return fail(ctx, "gemm_quant: %s", e.msg);
	MAT(ctx, "a", a, lda, k);
	MAT(ctx, "c", c, ldc, n);
	CHECK(ctx, wq, "gemm_quant: wq is NULL");
	CHECK(ctx, scales || fmt->mode == KTUNE_QUANT_SHIFT, "gemm_quant: scales is NULL");
	CHECK(ctx, zeros || fmt->mode == KTUNE_QUANT_SCALE, "gemm_quant: zeros is NULL");
	if (m == 0 || n == 0)
		return KTUNE_OK;
	note(ctx, "gemm_quant", dt, "", m, n, k, 1);
	int64_t nw, ns, nz;
	ktune_quant_sizes(fmt, n, k, &nw, &ns, &nz, NULL, 0);
	double *da = load(a, m, k, lda, dt), *dc = malloc(sizeof(double) * (size_t)(m * n));
	double *w = malloc(sizeof(double) * (size_t)(nw > 0 ? nw : 1));
	for (int64_t i = 0; i < nw; i++)
		w[i] = (double)wq[i];
	double *ds = scales ? load(scales, 1, ns, ns, dt) : NULL, *dz = zeros ? load(zeros, 1, nz, nz, dt) : NULL;
	double *db = bias ? load(bias, 1, n, n, dt) : NULL;
	ktune__ref_gemm_quant(&s, m, da, k, w, ds, dz, db, dc, n);
	store(c, dc, m, n, ldc, dt);
	free(da), free(dc), free(w), free(ds), free(dz), free(db);
	return KTUNE_OK;
}

/* ------------------------------------------------------------ attention */

/* A [B, S, H, D] tensor of dtype with the API's strides (NULL: packed BSHD), as packed doubles. */
static double *load_bshd(const void *p, const int64_t *st, int64_t b, int64_t s, int64_t h, int64_t d,
			 ktune_dtype dt)
{
	int64_t sb = st ? st[0] : s * h * d, ss = st ? st[1] : h * d, sh = st ? st[2] : d;
	double *out = malloc(sizeof(double) * (size_t)(b * s * h * d > 0 ? b * s * h * d : 1));
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < s; j++)
			for (int64_t k = 0; k < h; k++)
				for (int64_t x = 0; x < d; x++)
					out[((i * s + j) * h + k) * d + x] = get(p, i * sb + j * ss + k * sh + x, dt);
	return out;
}

static void store_bshd(void *p, const int64_t *st, const double *v, int64_t b, int64_t s, int64_t h, int64_t d,
		       ktune_dtype dt)
{
	int64_t sb = st ? st[0] : s * h * d, ss = st ? st[1] : h * d, sh = st ? st[2] : d;
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < s; j++)
			for (int64_t k = 0; k < h; k++)
				for (int64_t x = 0; x < d; x++)
					put(p, i * sb + j * ss + k * sh + x, v[((i * s + j) * h + k) * d + x], dt);
}

static struct ktune_attn_in packed_in(const double *p, int64_t s, int64_t h, int64_t d)
{
	return (struct ktune_attn_in){ p, s * h * d, h * d, d };
}

static struct ktune_attn_out packed_out(double *p, int64_t s, int64_t h, int64_t d)
{
	return (struct ktune_attn_out){ p, s * h * d, h * d, d };
}

static ktune_status attn_check(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
			       int64_t d, int bwd, float scale, ktune_dtype dt, const void *const *bufs, int nbufs)
{
	CHECK(ctx, dt == KTUNE_F16 || dt == KTUNE_BF16, "attention: dtype must be f16 or bf16");
	CHECK(ctx, batch >= 0 && sq >= 0 && hq >= 0 && sk >= 1 && hkv >= 1, "attention: bad sizes");
	CHECK(ctx, d == 64 || d == 128 || (d == 256 && !bwd), "attention: head_dim %lld is not supported",
	      (long long)d);
	CHECK(ctx, hq % hkv == 0, "attention: hq %lld is not a multiple of hkv %lld", (long long)hq, (long long)hkv);
	CHECK(ctx, scale > 0, "attention: scale must be > 0");
	for (int i = 0; i < nbufs; i++)
		CHECK(ctx, bufs[i], "attention: a buffer is NULL");
	return KTUNE_OK;
}

API ktune_status ktune_attention_fwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
				     int64_t head_dim, const void *q, const int64_t *q_strides, const void *k,
				     const int64_t *k_strides, const void *v, const int64_t *v_strides, void *o,
				     const int64_t *o_strides, float *lse, float scale, int causal, ktune_dtype dt,
				     void *stream)
{
	(void)stream;
	int64_t d = head_dim;
	ktune_status rc = attn_check(ctx, batch, sq, sk, hq, hkv, d, 0, scale, dt,
				     (const void *[]){ q, k, v, o, lse }, 5);
	if (rc)
		return rc;
	if (batch == 0 || sq == 0 || hq == 0)
		return KTUNE_OK;
	note(ctx, "attention", dt, causal ? "fwd,causal" : "fwd,none", pow2(sq), pow2(sk), pow2(batch * hq), 1);
	struct ktune_attn_shape s = { batch, sq, sk, hq, hkv, d, causal, scale };
	double *dq = load_bshd(q, q_strides, batch, sq, hq, d, dt), *dk = load_bshd(k, k_strides, batch, sk, hkv, d, dt);
	double *dv = load_bshd(v, v_strides, batch, sk, hkv, d, dt);
	double *dout = malloc(sizeof(double) * (size_t)(batch * sq * hq * d));
	double *dl = malloc(sizeof(double) * (size_t)(batch * hq * sq));
	ktune__ref_attention(&s, packed_in(dq, sq, hq, d), packed_in(dk, sk, hkv, d), packed_in(dv, sk, hkv, d),
			     packed_out(dout, sq, hq, d), dl);
	store_bshd(o, o_strides, dout, batch, sq, hq, d, dt);
	store_f32(lse, dl, batch * hq * sq);
	free(dq), free(dk), free(dv), free(dout), free(dl);
	return KTUNE_OK;
}

API ktune_status ktune_attention_bwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
				     int64_t head_dim, const void *q, const int64_t *q_strides, const void *k,
				     const int64_t *k_strides, const void *v, const int64_t *v_strides, const void *o,
				     const int64_t *o_strides, const void *dout, const int64_t *dout_strides,
				     const float *lse, void *dq, const int64_t *dq_strides, void *dk,
				     const int64_t *dk_strides, void *dv, const int64_t *dv_strides, float scale,
				     int causal, int deterministic, ktune_dtype dt, void *stream)
{
	(void)stream, (void)o, (void)o_strides, (void)lse;
	int64_t d = head_dim;
	ktune_status rc = attn_check(ctx, batch, sq, sk, hq, hkv, d, 1, scale, dt,
				     (const void *[]){ q, k, v, o, dout, lse, dq, dk, dv }, 9);
	if (rc)
		return rc;
	if (batch == 0 || hq == 0)
		return KTUNE_OK;
	note(ctx, "attention", dt, deterministic ? "bwd_det" : "bwd", pow2(sq), pow2(sk), pow2(batch * hq), 1);
	struct ktune_attn_shape s = { batch, sq, sk, hq, hkv, d, causal, scale };
	double *xq = load_bshd(q, q_strides, batch, sq, hq, d, dt), *xk = load_bshd(k, k_strides, batch, sk, hkv, d, dt);
	double *xv = load_bshd(v, v_strides, batch, sk, hkv, d, dt);
	double *xg = load_bshd(dout, dout_strides, batch, sq, hq, d, dt);
	double *gq = malloc(sizeof(double) * (size_t)(batch * sq * hq * d + 1));
	double *gk = malloc(sizeof(double) * (size_t)(batch * sk * hkv * d));
	double *gv = malloc(sizeof(double) * (size_t)(batch * sk * hkv * d));
	/* recomputed from Q, K, V: the exact gradient (the kernels use the saved O and lse) */
	ktune__ref_attention_backward(&s, packed_in(xq, sq, hq, d), packed_in(xk, sk, hkv, d),
				      packed_in(xv, sk, hkv, d), packed_in(xg, sq, hq, d), packed_out(gq, sq, hq, d),
				      packed_out(gk, sk, hkv, d), packed_out(gv, sk, hkv, d));
	store_bshd(dq, dq_strides, gq, batch, sq, hq, d, dt);
	store_bshd(dk, dk_strides, gk, batch, sk, hkv, d, dt);
	store_bshd(dv, dv_strides, gv, batch, sk, hkv, d, dt);
	free(xq), free(xk), free(xv), free(xg), free(gq), free(gk), free(gv);
	return KTUNE_OK;
}
