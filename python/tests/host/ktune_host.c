/*
 * ktune_host.c - a test double of libktune that computes on host memory,
 * so that the Python package's torch layer (custom ops, autograd, fake
 * implementations, torch.compile, ktune.nn, the GPT-2 example) runs on a
 * machine without a GPU, on CPU tensors.  Loaded with
 * KTUNE_LIBRARY=build/python-host/libktune_host.so; the package sees the symbol
 * ktune_test_host_memory and takes "cpu" tensors instead of "cuda" ones.
 *
 * Every op is the float64 reference the tuner checks kernels against
 * (src/ops/elementwise-ref.c, rowwise-ref.c, attention-ref.c, quant.h's
 * dequantisation), with inputs read and outputs rounded in the call's dtype,
 * and the argument checks of include/ktune.h (row strides, NULL pointers,
 * sizes, alignment where the real library asks it), so that the Python
 * layer's marshalling is held to what the real library accepts.  The host
 * functions of the quantized format (ktune_quant_sizes, _pack, _unpack) are
 * the real ones (src/ops/quant.c).  It proves nothing about the GPU kernels.
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
#include "ops/attention-ref.h"
#include "ops/elementwise-ref.h"
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
		offsetof(ktune_stats, tune_queued), offsetof(ktune_stats, tune_done),
		offsetof(ktune_stats, tune_failed), offsetof(ktune_stats, tune_skipped),
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
	if (!strcmp(k->op, "gemm") || !strcmp(k->op, "gemm_quant"))
		n += snprintf(buf + n, len - (size_t)n, "m: %lld, n: %lld, k: %lld", (long long)k->m, (long long)k->n,
			      (long long)k->k);
	else if (!strcmp(k->op, "attention"))
		n += snprintf(buf + n, len - (size_t)n, "sq: %lld, sk: %lld, bh: %lld", (long long)k->m, (long long)k->n,
			      (long long)k->k);
	else if (two)
		n += snprintf(buf + n, len - (size_t)n, "rows: %lld, %s: %lld", (long long)k->m,
			      strcmp(k->op, "cross_entropy") ? "cols" : "vocab", (long long)k->n);
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

/* --- cross-entropy (src/ops/cross_entropy.c, src/runtime/lce_api.c) ---------------------------- */

#define CE_MAX_VOCAB 262144

static const char *const reduction_names[] = { "mean", "sum", "none" };

/* What each cross-entropy call checks first (cross_entropy.c's prepare). */
static ktune_status ce_prepare(ktune_ctx *ctx, const char *what, float eps, float cap, ktune_reduction red)
{
	CHECK(ctx, eps >= 0 && eps <= 1, "%s: label_smoothing %g is not in [0, 1]", what, (double)eps);
	CHECK(ctx, cap >= 0 && cap <= 3.4e38f, "%s: softcap %g is not a finite value >= 0 (0: none)", what,
	      (double)cap);
	CHECK(ctx, red == KTUNE_REDUCTION_MEAN || red == KTUNE_REDUCTION_SUM || red == KTUNE_REDUCTION_NONE,
	      "%s: reduction %d is not mean (0), sum (1) or none (2)", what, (int)red);
	return KTUNE_OK;
}

/*
 * What ktune__op_run checks of a cross-entropy call: sizes, nothing to do for
 * an empty matrix (*skip), the longest row, the buffers, the dtype.
 */
static ktune_status ce_run_checks(ktune_ctx *ctx, int64_t rows, int64_t vocab, ktune_dtype dt, const void *const *bufs,
				  const char *const *names, int n, int *skip)
{
	*skip = 0;
	CHECK(ctx, rows >= 0 && vocab >= 0, "cross_entropy: size %lld is negative", (long long)(rows < 0 ? rows : vocab));
	if (rows == 0 || vocab == 0) {
		*skip = 1;
		return KTUNE_OK;
	}
	CHECK(ctx, vocab <= CE_MAX_VOCAB, "cross_entropy: vocab %lld is over %d, the longest row it holds",
	      (long long)vocab, CE_MAX_VOCAB);
	for (int i = 0; i < n; i++)
		CHECK(ctx, bufs[i], "cross_entropy: %s is NULL", names[i]);
	return check_dtype(ctx, dt);
}

/* dlogits may be logits itself (the same row stride), and must not overlap it otherwise. */
static ktune_status ce_in_place(ktune_ctx *ctx, const char *what, int64_t rows, int64_t vocab, const void *logits,
				int64_t ld_logits, const void *dlogits, int64_t ld_dlogits, ktune_dtype dt)
{
	uintptr_t a = (uintptr_t)logits, b = (uintptr_t)dlogits, size = dtype_size(dt);
	if (!a || !b || rows <= 0 || vocab <= 0)
		return KTUNE_OK;
	if (a == b) {
		CHECK(ctx, ld_logits == ld_dlogits, "%s: dlogits is logits with another row stride (%lld, not %lld)", what,
		      (long long)ld_dlogits, (long long)ld_logits);
		return KTUNE_OK;
	}
	uintptr_t a_end = a + (uintptr_t)((rows - 1) * ld_logits + vocab) * size;
	uintptr_t b_end = b + (uintptr_t)((rows - 1) * ld_dlogits + vocab) * size;
	CHECK(ctx, !(a < b_end && b < a_end), "%s: dlogits overlaps logits without being it", what);
	return KTUNE_OK;
}

static void note_ce(ktune_ctx *ctx, const char *pass, ktune_reduction red, float eps, float cap, int64_t rows,
		    int64_t vocab, ktune_dtype dt, const void *logits, int64_t ld, const void *dlogits, int64_t ldd)
{
	char variant[24];
	snprintf(variant, sizeof(variant), "%s,%s,%s,%s", pass, reduction_names[red], eps > 0 ? "on" : "off",
		 cap > 0 ? "on" : "off");
	note(ctx, "cross_entropy", dt, variant, pow2(rows), rowwise_cols(vocab), 0,
	     rows_aligned((const void *[]){ logits, dlogits }, (int64_t[]){ ld, dlogits ? ldd : 0 }, 2, dt));
}

/* The rows' losses (and lse) of logits; loss gets them, or their reduction (one float). */
static double *ce_forward(const void *logits, int64_t ld, const int64_t *targets, int64_t ignore_index, float eps,
			  float cap, ktune_reduction red, float *loss, double *lse, int64_t rows, int64_t vocab,
			  ktune_dtype dt)
{
	double *x = load(logits, rows, vocab, ld, dt), *l = load_vec(NULL, rows, dt, 0);
	ktune__ref_cross_entropy(x, vocab, targets, ignore_index, eps, cap, l, lse, rows, vocab);
	if (red == KTUNE_REDUCTION_NONE)
		store_f32(loss, l, rows);
	else
		loss[0] = (float)ktune__ref_cross_entropy_reduce(l, targets, ignore_index, red, rows);
	free(l);
	return x;
}

API ktune_status ktune_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits, int64_t ld_logits,
				     const int64_t *targets, int64_t ignore_index, float label_smoothing, float softcap,
				     ktune_reduction reduction, float *loss, float *lse, ktune_dtype dt, void *stream)
{
	ktune_status rc;
	int skip;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if ((rc = ce_prepare(ctx, "cross_entropy", label_smoothing, softcap, reduction)))
		return rc;
	CHECK(ctx, ld_logits >= vocab, "cross_entropy: a row stride (%lld) is less than cols = %lld",
	      (long long)ld_logits, (long long)vocab);
	if ((rc = ce_run_checks(ctx, rows, vocab, dt, (const void *[]){ logits, targets, loss, lse },
				(const char *[]){ "logits", "targets", "loss", "lse" }, 4, &skip)) || skip)
		return rc;
	note_ce(ctx, "fwd", reduction, label_smoothing, softcap, rows, vocab, dt, logits, ld_logits, NULL, 0);
	double *s = load_vec(NULL, rows, dt, 0);
	free(ce_forward(logits, ld_logits, targets, ignore_index, label_smoothing, softcap, reduction, loss, s, rows,
			vocab, dt));
	store_f32(lse, s, rows);
	free(s);
	return KTUNE_OK;
}

API ktune_status ktune_cross_entropy_backward(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
					      int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
					      float label_smoothing, float softcap, ktune_reduction reduction,
					      const float *lse, const float *dloss, void *dlogits, int64_t ld_dlogits,
					      ktune_dtype dt, void *stream)
{
	const char *what = "cross_entropy backward";
	ktune_status rc;
	int skip;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if ((rc = ce_prepare(ctx, what, label_smoothing, softcap, reduction)))
		return rc;
	CHECK(ctx, ld_logits >= vocab && ld_dlogits >= vocab, "%s: a row stride (%lld) is less than cols = %lld", what,
	      (long long)(ld_logits < vocab ? ld_logits : ld_dlogits), (long long)vocab);
	if ((rc = ce_in_place(ctx, what, rows, vocab, logits, ld_logits, dlogits, ld_dlogits, dt)) ||
	    (rc = ce_run_checks(ctx, rows, vocab, dt, (const void *[]){ logits, targets, lse, dloss, dlogits },
				(const char *[]){ "logits", "targets", "lse", "dloss", "dlogits" }, 5, &skip)) || skip)
		return rc;
	note_ce(ctx, "bwd", reduction, label_smoothing, softcap, rows, vocab, dt, logits, ld_logits, dlogits, ld_dlogits);
	double *x = load(logits, rows, vocab, ld_logits, dt), *s = load_f32(lse, rows);
	double *g = load_f32(dloss, reduction == KTUNE_REDUCTION_NONE ? rows : 1);
	ktune__ref_cross_entropy_backward(x, vocab, targets, ignore_index, label_smoothing, softcap, s, reduction, g, x,
					  vocab, rows, vocab);
	store(dlogits, x, rows, vocab, ld_dlogits, dt);
	free(x), free(s), free(g);
	return KTUNE_OK;
}

API ktune_status ktune_cross_entropy_fused(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
					   int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
					   float label_smoothing, float softcap, ktune_reduction reduction, float dloss,
					   float *loss, void *dlogits, int64_t ld_dlogits, ktune_dtype dt, void *stream)
{
	const char *what = "cross_entropy fused";
	ktune_status rc;
	int skip;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	CHECK(ctx, dloss > -3.4e38f && dloss < 3.4e38f, "%s: dloss %g is not finite", what, (double)dloss);
	if ((rc = ce_prepare(ctx, what, label_smoothing, softcap, reduction)))
		return rc;
	CHECK(ctx, ld_logits >= vocab && ld_dlogits >= vocab, "%s: a row stride (%lld) is less than cols = %lld", what,
	      (long long)(ld_logits < vocab ? ld_logits : ld_dlogits), (long long)vocab);
	if ((rc = ce_in_place(ctx, what, rows, vocab, logits, ld_logits, dlogits, ld_dlogits, dt)) ||
	    (rc = ce_run_checks(ctx, rows, vocab, dt, (const void *[]){ logits, targets, loss, dlogits },
				(const char *[]){ "logits", "targets", "loss", "dlogits" }, 4, &skip)) || skip)
		return rc;
	note_ce(ctx, "fused", reduction, label_smoothing, softcap, rows, vocab, dt, logits, ld_logits, dlogits, ld_dlogits);
	double *s = load_vec(NULL, rows, dt, 0);
	double *x = ce_forward(logits, ld_logits, targets, ignore_index, label_smoothing, softcap, reduction, loss, s,
			       rows, vocab, dt);
	/* with none, every row's loss gets dloss: the gradient of dloss times their sum */
	double *g = load_vec(NULL, reduction == KTUNE_REDUCTION_NONE ? rows : 1, dt, dloss);
	ktune__ref_cross_entropy_backward(x, vocab, targets, ignore_index, label_smoothing, softcap, s, reduction, g, x,
					  vocab, rows, vocab);
	store(dlogits, x, rows, vocab, ld_dlogits, dt);
	free(x), free(s), free(g);
	return KTUNE_OK;
}

static double round_f16(double v)
{
	return (double)(_Float16)(float)v;
}

static double round_bf16(double v)
{
	uint16_t b;
	put(&b, 0, v, KTUNE_BF16);
	return get(&b, 0, KTUNE_BF16);
}

/* The real one's chunks: a GEMM for the logits, the fused cross-entropy in place, two GEMMs for the gradients. */
static void note_lce_chunk(ktune_ctx *ctx, int64_t c, int64_t dim, int64_t vocab, ktune_reduction red, float eps,
			   float cap, ktune_dtype dt)
{
	note(ctx, "gemm", dt, "nt", c, vocab, dim, 0);
	note_ce(ctx, "fused", KTUNE_REDUCTION_NONE, eps, cap, c, vocab, dt, NULL, 0, NULL, 0);
	note(ctx, "gemm", dt, "nn", c, dim, vocab, 0);
	note(ctx, "gemm", dt, "tn", vocab, dim, c, 0);
	(void)red;
}

API ktune_status ktune_linear_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t dim, int64_t vocab, const void *hidden,
					    int64_t ld_hidden, const void *weight, int64_t ld_weight, const int64_t *targets,
					    int64_t ignore_index, float label_smoothing, float softcap,
					    ktune_reduction reduction, int64_t count, float dloss, float *loss_rows,
					    void *dhidden, int64_t ld_dhidden, void *dweight, int64_t ld_dweight,
					    int64_t chunk_rows, void *scratch, size_t scratch_bytes, ktune_dtype dt,
					    void *stream)
{
	const char *what = "linear_cross_entropy";
	int64_t ld_s = (vocab + 7) / 8 * 8;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	CHECK(ctx, rows >= 0 && dim >= 0 && vocab >= 0, "%s: a size is negative (rows %lld, dim %lld, vocab %lld)", what,
	      (long long)rows, (long long)dim, (long long)vocab);
	CHECK(ctx, dt == KTUNE_F16 || dt == KTUNE_BF16, "%s: dtype %d: the GEMMs take f16 and bf16", what, (int)dt);
	CHECK(ctx, reduction == KTUNE_REDUCTION_MEAN || reduction == KTUNE_REDUCTION_SUM,
	      "%s: reduction %d is not mean (0) or sum (1): the gradients are of one loss", what, (int)reduction);
	CHECK(ctx, label_smoothing >= 0 && label_smoothing <= 1, "%s: label_smoothing %g is not in [0, 1]", what,
	      (double)label_smoothing);
	CHECK(ctx, softcap >= 0 && softcap <= 3.4e38f, "%s: softcap %g is not a finite value >= 0 (0: none)", what,
	      (double)softcap);
	CHECK(ctx, dloss > -3.4e38f && dloss < 3.4e38f, "%s: dloss %g is not finite", what, (double)dloss);
	CHECK(ctx, ld_hidden >= dim && ld_weight >= dim && ld_dhidden >= dim && ld_dweight >= dim,
	      "%s: a row stride (hidden %lld, weight %lld, dhidden %lld, dweight %lld) is less than dim = %lld", what,
	      (long long)ld_hidden, (long long)ld_weight, (long long)ld_dhidden, (long long)ld_dweight, (long long)dim);
	CHECK(ctx, hidden && weight && targets && loss_rows && dhidden && dweight && scratch, "%s: %s is NULL", what,
	      !hidden ? "hidden" : !weight ? "weight" : !targets ? "targets" : !loss_rows ? "loss_rows"
	      : !dhidden ? "dhidden" : !dweight ? "dweight" : "scratch");
	CHECK(ctx, vocab <= CE_MAX_VOCAB, "%s: vocab %lld is over 262144, the longest row cross_entropy holds", what,
	      (long long)vocab);
	CHECK(ctx, chunk_rows >= 0, "%s: chunk_rows %lld is negative", what, (long long)chunk_rows);
	if (rows == 0 || dim == 0 || vocab == 0)
		return KTUNE_OK;
	size_t per_row = (size_t)ld_s * dtype_size(dt);
	if (chunk_rows == 0) {
		chunk_rows = (int64_t)(scratch_bytes / per_row);
		if (chunk_rows > 64)
			chunk_rows -= chunk_rows % 64;
	}
	if (chunk_rows > rows)
		chunk_rows = rows;
	CHECK(ctx, chunk_rows >= 1 && (size_t)chunk_rows * per_row <= scratch_bytes,
	      "%s: scratch of %zu bytes holds %zu rows of logits (%zu bytes each), not %lld", what, scratch_bytes,
	      scratch_bytes / per_row, per_row, (long long)(chunk_rows ? chunk_rows : 1));

	double g = dloss;
	if (reduction == KTUNE_REDUCTION_MEAN) {
		if (count < 0) /* the real one synchronizes the stream and copies the targets to the host */
			for (int64_t r = count = 0; r < rows; r++)
				count += targets[r] != ignore_index;
		g = count > 0 ? (float)((double)dloss / (double)count) : 0.0f;
	}
	for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows)
		note_lce_chunk(ctx, rows - r0 < chunk_rows ? rows - r0 : chunk_rows, dim, vocab, reduction, label_smoothing,
			       softcap, dt);
	double *h = load(hidden, rows, dim, ld_hidden, dt), *w = load(weight, vocab, dim, ld_weight, dt);
	double *l = load_vec(NULL, rows, dt, 0), *dh = malloc(sizeof(double) * (size_t)(rows * dim));
	double *dw = malloc(sizeof(double) * (size_t)(vocab * dim));
	ktune_status rc = KTUNE_ERR_NOMEM;
	/* the sum's gradient times g: what the real one's chunks compute with every row's dloss = g */
	if (dh && dw &&
	    !ktune__ref_linear_cross_entropy(h, w, targets, ignore_index, label_smoothing, softcap, KTUNE_REDUCTION_SUM,
					     g, dt == KTUNE_F16 ? round_f16 : round_bf16, l, dh, dw, rows, dim, vocab)) {
		store_f32(loss_rows, l, rows);
		store(dhidden, dh, rows, dim, ld_dhidden, dt);
		store(dweight, dw, vocab, dim, ld_dweight, dt);
		rc = KTUNE_OK;
	}
	free(h), free(w), free(l), free(dh), free(dw);
	return rc == KTUNE_OK ? rc : fail_with(ctx, rc, "%s: out of memory", what);
}

/* --- the weight-quantized GEMM (src/ops/gemm_quant.c; the format: src/ops/quant.c) -------------- */

API ktune_status ktune_gemm_quant(ktune_ctx *ctx, const ktune_quant_format *fmt, int64_t m, int64_t n, int64_t k,
				  const void *a, int64_t lda, const uint32_t *wq, const void *scales, const void *zeros,
				  const void *bias, void *c, int64_t ldc, ktune_dtype dt, void *stream)
{
	struct ktune_quant_shape s;
	struct ktune_err e;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	CHECK(ctx, m >= 0 && n >= 0 && k >= 0, "gemm_quant: [m, n, k] = [%lld, %lld, %lld] has a negative size",
	      (long long)m, (long long)n, (long long)k);
	if (m == 0 || n == 0)
		return KTUNE_OK;
	CHECK(ctx, dt == KTUNE_F16 || dt == KTUNE_BF16, "gemm_quant: dtype %d is not f16 or bf16", (int)dt);
	CHECK(ctx, !ktune__quant_shape(fmt, n, k, &s, &e), "gemm_%s", e.msg);
	CHECK(ctx, a && wq && c && (!s.has_scale || scales) && (!s.has_zero || zeros), "gemm_quant: %s is NULL",
	      !a ? "a" : !wq ? "wq" : !c ? "c" : s.has_scale && !scales ? "scales" : "zeros");
	CHECK(ctx, lda >= k && ldc >= n, "gemm_quant: lda = %lld or ldc = %lld is less than k = %lld, n = %lld",
	      (long long)lda, (long long)ldc, (long long)k, (long long)n);
	CHECK(ctx, aligned16(a), "gemm_quant: a (%p) is not 16-byte aligned", a);
	CHECK(ctx, lda % 8 == 0, "gemm_quant: lda = %lld is not a multiple of 8 (rows of a 16-byte aligned)",
	      (long long)lda);
	CHECK(ctx, aligned16(wq), "gemm_quant: wq (%p) is not 16-byte aligned", (const void *)wq);
	CHECK(ctx, !((uintptr_t)scales % 2 || (uintptr_t)zeros % 2 || (uintptr_t)bias % 2 || (uintptr_t)c % 2),
	      "gemm_quant: scales, zeros, bias or c is not 2-byte aligned");
	char variant[24];
	snprintf(variant, sizeof(variant), "%s,%s,%s,v1", ktune__quant_bits_name(s.bits),
		 ktune__quant_group_name(s.channel ? 0 : (int)s.group), ktune__quant_mode_name(s.mode));
	note(ctx, "gemm_quant", dt, variant, pow2(m), n, k, 1);
	double *w = malloc(sizeof(double) * (size_t)k), *x = load(a, m, k, lda, dt), *out = load_vec(NULL, m * n, dt, 0);
	for (int64_t j = 0; w && j < n; j++) {
		for (int64_t l = 0; l < k; l++) {
			int64_t g = j * s.groups + l / s.group;
			double scale = s.has_scale ? get(scales, g, dt) : 1;
			double zero = !s.has_zero ? 0 : get(zeros, s.zero_scalar ? 0 : g, dt);
			w[l] = ktune__quant_dequant(s.mode, ktune__quant_get(&s, wq, j, l), scale, zero);
		}
		for (int64_t i = 0; i < m; i++) {
			double sum = bias ? get(bias, j, dt) : 0;
			for (int64_t l = 0; l < k; l++)
				sum += x[i * k + l] * w[l];
			out[i * n + j] = sum;
		}
	}
	if (w)
		store(c, out, m, n, ldc, dt);
	free(x), free(out);
	if (!w)
		return fail_with(ctx, KTUNE_ERR_NOMEM, "gemm_quant: out of memory");
	free(w);
	return KTUNE_OK;
}

/* --- attention (src/ops/attention.c; the reference: src/ops/attention-ref.c) ------------------ */

#define ATTN_MAX_LEN (INT64_C(1) << 30)

struct attn {
	struct ktune_attn_shape s;
	ktune_dtype dt;
};

/* A tensor [b, s, h, D]: its strides as given, or packed BSHD for NULL. */
static void attn_strides(const int64_t *given, int64_t s, int64_t h, int64_t d, int64_t out[3])
{
	if (given) {
		memcpy(out, given, 3 * sizeof(int64_t));
		return;
	}
	out[0] = s * h * d;
	out[1] = h * d;
	out[2] = d;
}

static ktune_status attn_common(ktune_ctx *ctx, const struct attn *a, const float *lse)
{
	const struct ktune_attn_shape *s = &a->s;
	CHECK(ctx, s->batch >= 0 && s->sq >= 0 && s->hq >= 0, "attention: batch = %lld, sq = %lld, hq = %lld: negative",
	      (long long)s->batch, (long long)s->sq, (long long)s->hq);
	CHECK(ctx, s->sk >= 1 && s->hkv >= 1, "attention: sk = %lld, hkv = %lld: there must be keys", (long long)s->sk,
	      (long long)s->hkv);
	CHECK(ctx, s->hq % s->hkv == 0, "attention: hq = %lld is not a multiple of hkv = %lld", (long long)s->hq,
	      (long long)s->hkv);
	CHECK(ctx, s->d == 64 || s->d == 128 || s->d == 256, "attention: head_dim %lld is not 64, 128 or 256",
	      (long long)s->d);
	CHECK(ctx, s->scale > 0 && s->scale <= 3.4e38, "attention: scale %g is not positive and finite", s->scale);
	CHECK(ctx, s->batch <= 65535 && s->hq <= 65535, "attention: batch = %lld, hq = %lld: at most 65535 each",
	      (long long)s->batch, (long long)s->hq);
	CHECK(ctx, s->sq <= ATTN_MAX_LEN && s->sk <= ATTN_MAX_LEN, "attention: sq = %lld, sk = %lld: at most %lld",
	      (long long)s->sq, (long long)s->sk, (long long)ATTN_MAX_LEN);
	CHECK(ctx, (uintptr_t)lse % 4 == 0, "attention: lse is not 4-byte aligned");
	CHECK(ctx, a->dt == KTUNE_F16 || a->dt == KTUNE_BF16, "attention: dtype %d is not f16 or bf16", (int)a->dt);
	return KTUNE_OK;
}

/* A tensor of the call: rows 16-byte aligned (its pointer, each stride of a dimension longer than 1). */
static ktune_status attn_tensor(ktune_ctx *ctx, const struct attn *a, const char *name, const void *p,
				const int64_t *given, int q_side, int64_t st[3])
{
	int64_t s = q_side ? a->s.sq : a->s.sk, h = q_side ? a->s.hq : a->s.hkv;
	attn_strides(given, s, h, a->s.d, st);
	CHECK(ctx, aligned16(p) && (a->s.batch < 2 || st[0] % 8 == 0) && (s < 2 || st[1] % 8 == 0) &&
		   (h < 2 || st[2] % 8 == 0),
	      "attention: %s must be 16-byte aligned, and its strides multiples of 8 elements", name);
	return KTUNE_OK;
}

/* A tensor as packed float64 [b, s, h, D], and its reference view. */
static double *attn_load(const struct attn *a, const void *p, const int64_t st[3], int q_side)
{
	int64_t b = a->s.batch, s = q_side ? a->s.sq : a->s.sk, h = q_side ? a->s.hq : a->s.hkv, d = a->s.d;
	double *x = malloc(sizeof(double) * (size_t)(b * s * h * d > 0 ? b * s * h * d : 1));
	for (int64_t i = 0; x && i < b; i++)
		for (int64_t j = 0; j < s; j++)
			for (int64_t l = 0; l < h; l++)
				for (int64_t e = 0; e < d; e++)
					x[((i * s + j) * h + l) * d + e] = get(p, i * st[0] + j * st[1] + l * st[2] + e, a->dt);
	return x;
}

static void attn_store(const struct attn *a, void *p, const int64_t st[3], const double *x, int q_side)
{
	int64_t b = a->s.batch, s = q_side ? a->s.sq : a->s.sk, h = q_side ? a->s.hq : a->s.hkv, d = a->s.d;
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < s; j++)
			for (int64_t l = 0; l < h; l++)
				for (int64_t e = 0; e < d; e++)
					put(p, i * st[0] + j * st[1] + l * st[2] + e, x[((i * s + j) * h + l) * d + e], a->dt);
}

static struct ktune_attn_in attn_in(const struct attn *a, const double *x, int q_side)
{
	int64_t s = q_side ? a->s.sq : a->s.sk, h = q_side ? a->s.hq : a->s.hkv;
	return (struct ktune_attn_in){ x, s * h * a->s.d, h * a->s.d, a->s.d };
}

static struct ktune_attn_out attn_out(const struct attn *a, double *x, int q_side)
{
	int64_t s = q_side ? a->s.sq : a->s.sk, h = q_side ? a->s.hq : a->s.hkv;
	return (struct ktune_attn_out){ x, s * h * a->s.d, h * a->s.d, a->s.d };
}

static void note_attn(ktune_ctx *ctx, const struct attn *a, const char *pass)
{
	char variant[48];
	int64_t ratio = a->s.hq / a->s.hkv, bucket = 1;
	while (bucket * 2 <= ratio && bucket < 16)
		bucket *= 2;
	snprintf(variant, sizeof(variant), "%s,%lld,%s,%lld", pass, (long long)a->s.d, a->s.causal ? "causal" : "none",
		 (long long)bucket);
	note(ctx, "attention", a->dt, variant, pow2(a->s.sq), pow2(a->s.sk), pow2(a->s.batch * a->s.hq), 1);
}

API ktune_status ktune_attention_fwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
				     int64_t head_dim, const void *q, const int64_t *q_strides, const void *k,
				     const int64_t *k_strides, const void *v, const int64_t *v_strides, void *o,
				     const int64_t *o_strides, float *lse, float scale, int causal, ktune_dtype dt,
				     void *stream)
{
	struct attn a = { { batch, sq, sk, hq, hkv, head_dim, causal != 0, scale }, dt };
	int64_t sq_[3], sk_[3], sv_[3], so_[3];
	ktune_status rc;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if ((rc = attn_common(ctx, &a, lse)) || (rc = attn_tensor(ctx, &a, "q", q, q_strides, 1, sq_)) ||
	    (rc = attn_tensor(ctx, &a, "k", k, k_strides, 0, sk_)) ||
	    (rc = attn_tensor(ctx, &a, "v", v, v_strides, 0, sv_)) ||
	    (rc = attn_tensor(ctx, &a, "o", o, o_strides, 1, so_)))
		return rc;
	if (batch == 0 || sq == 0 || hq == 0)
		return KTUNE_OK; /* no rows */
	CHECK(ctx, q && k && v && o && lse, "attention: %s is NULL", !q ? "q" : !k ? "k" : !v ? "v" : !o ? "o" : "lse");
	note_attn(ctx, &a, "fwd");
	double *xq = attn_load(&a, q, sq_, 1), *xk = attn_load(&a, k, sk_, 0), *xv = attn_load(&a, v, sv_, 0);
	double *xo = attn_load(&a, o, so_, 1), *l = load_vec(NULL, batch * hq * sq, dt, 0);
	ktune__ref_attention(&a.s, attn_in(&a, xq, 1), attn_in(&a, xk, 0), attn_in(&a, xv, 0), attn_out(&a, xo, 1), l);
	attn_store(&a, o, so_, xo, 1);
	store_f32(lse, l, batch * hq * sq);
	free(xq), free(xk), free(xv), free(xo), free(l);
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
	struct attn a = { { batch, sq, sk, hq, hkv, head_dim, causal != 0, scale }, dt };
	int64_t st[8][3];
	ktune_status rc;
	(void)stream;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	CHECK(ctx, head_dim != 256, "attention: the backward takes head dims 64 and 128, not 256");
	CHECK(ctx, sq != 0, "attention: the backward needs sq >= 1 (dk and dv are its sums)");
	if ((rc = attn_common(ctx, &a, lse)) || (rc = attn_tensor(ctx, &a, "q", q, q_strides, 1, st[0])) ||
	    (rc = attn_tensor(ctx, &a, "k", k, k_strides, 0, st[1])) ||
	    (rc = attn_tensor(ctx, &a, "v", v, v_strides, 0, st[2])) ||
	    (rc = attn_tensor(ctx, &a, "o", o, o_strides, 1, st[3])) ||
	    (rc = attn_tensor(ctx, &a, "dout", dout, dout_strides, 1, st[4])) ||
	    (rc = attn_tensor(ctx, &a, "dq", dq, dq_strides, 1, st[5])) ||
	    (rc = attn_tensor(ctx, &a, "dk", dk, dk_strides, 0, st[6])) ||
	    (rc = attn_tensor(ctx, &a, "dv", dv, dv_strides, 0, st[7])))
		return rc;
	if (batch == 0 || hq == 0)
		return KTUNE_OK; /* no heads */
	CHECK(ctx, q && k && v && o && dout && lse && dq && dk && dv, "attention: a buffer is NULL");
	note_attn(ctx, &a, deterministic ? "bwd_det" : "bwd");
	double *xq = attn_load(&a, q, st[0], 1), *xk = attn_load(&a, k, st[1], 0), *xv = attn_load(&a, v, st[2], 0);
	double *xo = attn_load(&a, o, st[3], 1), *xd = attn_load(&a, dout, st[4], 1);
	double *gq = attn_load(&a, dq, st[5], 1), *gk = attn_load(&a, dk, st[6], 0), *gv = attn_load(&a, dv, st[7], 0);
	double *l = load_f32(lse, batch * hq * sq), *delta = load_vec(NULL, batch * hq * sq, dt, 0);
	struct ktune_attn_in iq = attn_in(&a, xq, 1), ik = attn_in(&a, xk, 0), iv = attn_in(&a, xv, 0);
	struct ktune_attn_in id = attn_in(&a, xd, 1);
	/* as FlashAttention computes it: from the forward's (rounded) O and lse */
	ktune__ref_attention_delta(&a.s, attn_in(&a, xo, 1), id, delta);
	for (int64_t b = 0; b < batch; b++) {
		for (int64_t h = 0; h < hq; h++)
			for (int64_t i = 0; i < sq; i++)
				ktune__ref_attention_dq_row(&a.s, iq, ik, iv, id, l, hq * sq, sq, delta, attn_out(&a, gq, 1), b,
							    h, i);
		for (int64_t h = 0; h < hkv; h++)
			for (int64_t j = 0; j < sk; j++)
				ktune__ref_attention_dkv_row(&a.s, iq, ik, iv, id, l, hq * sq, sq, delta, attn_out(&a, gk, 0),
							     attn_out(&a, gv, 0), b, h, j);
	}
	attn_store(&a, dq, st[5], gq, 1);
	attn_store(&a, dk, st[6], gk, 0);
	attn_store(&a, dv, st[7], gv, 0);
	free(xq), free(xk), free(xv), free(xo), free(xd), free(gq), free(gk), free(gv), free(l), free(delta);
	return KTUNE_OK;
}
