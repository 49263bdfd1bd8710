/*
 * random.c - GEMM keys nobody tuned, drawn at random with a fixed seed,
 * timed against cuBLAS in the same run: how well ktune serves the shapes a
 * user has not swept (issue 25).
 *
 *   bench/random [--keys N] [--seed S] [--db PATH] [--csv FILE] [--md FILE] [--title TEXT]
 *   bench/random --list [--keys N] [--seed S]
 *
 * The keys: M, N and K log-uniform in 1..65536 (drawn again while
 * M * N * K > 2^36 or an operand passes 2^28 elements, so that each runs in
 * at most about a millisecond), the four layouts and both dtypes in turn,
 * and leading dimensions packed (half the keys), padded to a multiple of 8
 * (a third: the aligned class for any sizes) or padded by an odd amount
 * (a sixth).  Packed rows of odd length are the unaligned class, as a
 * PyTorch tensor of that shape would be.
 *
 * Each key is timed three ways, by the tuner's protocol (CUDA events, L2
 * flushed, repetitions until the spread is tight, median), in turns
 * (ktune, model, cuBLAS, cuBLAS, model, ktune), each side the mean of its
 * two medians:
 *   ktune   ktune_gemm as an application gets it (KTUNE_FALLBACK=auto): its
 *           tuned entries, a neighbour, the model's pick or cuBLAS
 *   model   ktune_gemm with KTUNE_FALLBACK=model: ktune's own kernels only
 *   cuBLAS  cublasGemmEx, the tuner's baseline
 * Ratios are cuBLAS time / ktune time (above 1: ktune is faster).  Every
 * ktune result is checked against the fp32 reference first; a wrong one
 * fails the run (exit 1).
 *
 * --list prints the keys (no GPU needed), one a line:
 *   DTYPE LAYOUT M N K aligned|unaligned LDA LDB LDC
 * which is what bench/gpu-check.sh's random step tunes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "tuner/worker.h"

#define MAX_KEYS 1024
#define MAX_MNK (1ull << 36)
#define MAX_OPERAND (1ull << 28)

struct rkey {
	struct ktune_key key; /* aligned: the class its leading dimensions and pointers give */
	int64_t lda, ldb, ldc;
};

struct row {
	struct rkey k;
	const char *source;   /* what served the ktune call */
	double ktune_us, model_us, cublas_us;
	char model_cfg[256];  /* the model-only context's config */
	double err_fro;
	int wrong;
};

/* splitmix64: a fixed sequence for a seed, the same everywhere. */
static uint64_t next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
	return (double)(next(s) >> 11) / (double)(1ull << 53);
}

/* log-uniform in 1..65536 */
static int64_t size(uint64_t *s)
{
	int64_t v = (int64_t)floor(exp(uniform(s) * log(65537.0)));
	return v < 1 ? 1 : v > 65536 ? 65536 : v;
}

static int64_t pad(int64_t row, int mode, uint64_t *s)
{
	if (mode == 1)
		return (row + 7) / 8 * 8 + 8 * (int64_t)(next(s) % 4);
	if (mode == 2)
		return row + 1 + (int64_t)(next(s) % 7);
	return row;
}

static int draw(int nkeys, uint64_t seed, struct rkey *out)
{
	static const char *const layouts[] = { "nn", "nt", "tn", "tt" };
	uint64_t s = seed;
	for (int i = 0; i < nkeys; i++) {
		struct rkey *r = &out[i];
		int64_t m, n, k;
		do {
			m = size(&s);
			n = size(&s);
			k = size(&s);
		} while ((uint64_t)m * n * k > MAX_MNK || (uint64_t)m * n > MAX_OPERAND ||
			 (uint64_t)m * k > MAX_OPERAND || (uint64_t)k * n > MAX_OPERAND);
		memset(r, 0, sizeof(*r));
		snprintf(r->key.op, sizeof(r->key.op), "gemm");
		r->key.dtype = (i / 4) % 2 ? KTUNE_BF16 : KTUNE_F16;
		ktune__layout_parse(layouts[i % 4], &r->key);
		r->key.m = m;
		r->key.n = n;
		r->key.k = k;
		uint64_t u = next(&s) % 6;
		int mode = u < 3 ? 0 : u < 5 ? 1 : 2; /* packed, padded to 8, padded by an odd amount */
		r->lda = pad(r->key.variant[0] == 't' ? m : k, mode, &s);
		r->ldb = pad(r->key.variant[1] == 't' ? k : n, mode, &s);
		r->ldc = pad(n, mode, &s);
		/* cudaMalloc'd pointers are 256-byte aligned: the leading dimensions decide */
		r->key.aligned = r->lda % 8 == 0 && r->ldb % 8 == 0 && r->ldc % 8 == 0;
	}
	return nkeys;
}

static void key_text(const struct rkey *r, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s %lldx%lldx%lld", ktune__dtype_name(r->key.dtype), r->key.variant,
		 (long long)r->key.m, (long long)r->key.n, (long long)r->key.k);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Geometric mean and minimum of the ratios cuBLAS / t of the rows `pick` selects (field: 0 ktune, 1 model). */
struct summary {
	int n, below80, below95;
	double geo, min, median;
	const char *min_key;
};

static struct summary summarise(const struct row *rows, int n, int field, int (*pick)(const struct row *))
{
	struct summary s = { 0, 0, 0, 0, 1e30, 0, "" };
	double logs = 0, *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(*v));
	static char min_key[64];
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		double t = field ? r->model_us : r->ktune_us;
		if (r->wrong || t <= 0 || r->cublas_us <= 0 || (pick && !pick(r)))
			continue;
		double ratio = r->cublas_us / t;
		if (v)
			v[s.n] = ratio;
		logs += log(ratio);
		s.n++;
		s.below80 += ratio < 0.80;
		s.below95 += ratio < 0.95;
		if (ratio < s.min) {
			s.min = ratio;
			key_text(&r->k, min_key, sizeof(min_key));
			s.min_key = min_key;
		}
	}
	if (s.n) {
		s.geo = exp(logs / s.n);
		if (v) {
			qsort(v, (size_t)s.n, sizeof(*v), cmp_double);
			s.median = (v[(s.n - 1) / 2] + v[s.n / 2]) / 2;
		}
	}
	free(v);
	return s;
}

static int aligned_row(const struct row *r) { return r->k.key.aligned; }
static int unaligned_row(const struct row *r) { return !r->k.key.aligned; }
static int by_cublas(const struct row *r) { return !strcmp(r->source, KTUNE_SRC_CUBLAS); }
static int by_ktune(const struct row *r) { return strcmp(r->source, KTUNE_SRC_CUBLAS) != 0; }

static void print_summary(FILE *f, const char *what, struct summary s, int md)
{
	if (!s.n) {
		fprintf(f, "%s%s: no keys\n", md ? "- " : "", what);
		return;
	}
	fprintf(f, "%s%s: %d keys, geometric mean %s%.3f%s, median %.3f, lowest %.3f (%s), %d below 0.95, %d below 0.80\n",
		md ? "- " : "", what, s.n, md ? "**" : "", s.geo, md ? "**" : "", s.median, s.min, s.min_key,
		s.below95, s.below80);
}

static void report(FILE *f, const struct row *rows, int n, int md)
{
	print_summary(f, "ktune (as served: KTUNE_FALLBACK=auto)", summarise(rows, n, 0, NULL), md);
	print_summary(f, "  of which aligned", summarise(rows, n, 0, aligned_row), md);
	print_summary(f, "  of which unaligned", summarise(rows, n, 0, unaligned_row), md);
	print_summary(f, "  served by ktune's kernels", summarise(rows, n, 0, by_ktune), md);
	print_summary(f, "  served by cuBLAS", summarise(rows, n, 0, by_cublas), md);
	print_summary(f, "ktune's kernels alone (KTUNE_FALLBACK=model)", summarise(rows, n, 1, NULL), md);
	print_summary(f, "  of which aligned", summarise(rows, n, 1, aligned_row), md);
	print_summary(f, "  of which unaligned", summarise(rows, n, 1, unaligned_row), md);
	const char *sources[] = { KTUNE_SRC_EXACT, KTUNE_SRC_ARCH, KTUNE_SRC_SHIPPED, KTUNE_SRC_NEAREST,
				  KTUNE_SRC_MODEL, KTUNE_SRC_CUBLAS };
	fprintf(f, "%sserved by:", md ? "- " : "");
	for (size_t s = 0; s < sizeof(sources) / sizeof(sources[0]); s++) {
		int count = 0;
		for (int i = 0; i < n; i++)
			count += rows[i].source && !strcmp(rows[i].source, sources[s]);
		if (count)
			fprintf(f, " %s %d", sources[s], count);
	}
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += rows[i].wrong;
	fprintf(f, "%s\n", wrong ? "; WRONG RESULTS: see the rows marked WRONG" : "; every result checked right");
}

static void write_csv(const char *path, const struct row *rows, int n)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "random: cannot write '%s'\n", path);
		return;
	}
	fprintf(f, "dtype,layout,m,n,k,aligned,lda,ldb,ldc,source,ktune_us,model_us,cublas_us,ratio,model_ratio,"
		   "err_fro,wrong,model_config\n");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		fprintf(f, "%s,%s,%lld,%lld,%lld,%d,%lld,%lld,%lld,%s,%.3f,%.3f,%.3f,%.4f,%.4f,%.3g,%d,\"%s\"\n",
			ktune__dtype_name(r->k.key.dtype), r->k.key.variant, (long long)r->k.key.m,
			(long long)r->k.key.n, (long long)r->k.key.k, r->k.key.aligned, (long long)r->k.lda,
			(long long)r->k.ldb, (long long)r->k.ldc, r->source ? r->source : "", r->ktune_us,
			r->model_us, r->cublas_us, r->ktune_us > 0 ? r->cublas_us / r->ktune_us : 0,
			r->model_us > 0 ? r->cublas_us / r->model_us : 0, r->err_fro, r->wrong, r->model_cfg);
	}
	fclose(f);
}

static void write_md(const char *path, const char *title, const struct row *rows, int n, uint64_t seed,
		     const char *device)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "random: cannot write '%s'\n", path);
		return;
	}
	fprintf(f, "# GEMM on random keys: %s\n\n", title);
	fprintf(f, "%d keys drawn by `bench/random --seed %llu` on %s: M, N, K log-uniform in 1..65536 with "
		   "M*N*K <= 2^36, the four layouts and both dtypes in turn, leading dimensions packed, padded to "
		   "a multiple of 8, or padded by an odd amount.  Ratio = cuBLAS time / ktune time (above 1: ktune "
		   "is faster), both by the tuner's protocol in turns in one run.  `ktune` is ktune_gemm as served "
		   "(KTUNE_FALLBACK=auto), `model` ktune's own kernels alone (KTUNE_FALLBACK=model).  Goals (issue "
		   "25): untuned, geometric mean >= 0.95 and no key below 0.80; tuned, >= 1.02.\n\n",
		n, (unsigned long long)seed, device);
	report(f, rows, n, 1);
	fprintf(f, "\n| key | class | lda, ldb, ldc | served by | ktune us | model us | cuBLAS us | ratio | model ratio | model's config |\n");
	fprintf(f, "|---|---|---|---|---:|---:|---:|---:|---:|---|\n");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		char key[64];
		key_text(&r->k, key, sizeof(key));
		fprintf(f, "| %s | %s | %lld, %lld, %lld | %s | %.1f | %.1f | %.1f | %.3f | %.3f | %s%s |\n", key,
			r->k.key.aligned ? "aligned" : "unaligned", (long long)r->k.lda, (long long)r->k.ldb,
			(long long)r->k.ldc, r->source ? r->source : "", r->ktune_us, r->model_us, r->cublas_us,
			r->ktune_us > 0 ? r->cublas_us / r->ktune_us : 0,
			r->model_us > 0 ? r->cublas_us / r->model_us : 0, r->wrong ? "WRONG " : "", r->model_cfg);
	}
	fclose(f);
}

/* A context with KTUNE_FALLBACK set to `policy` for its open (it is read there). */
static int open_ctx(const char *db, const char *policy, ktune_ctx **ctx, char *err, size_t len)
{
	const char *was = getenv("KTUNE_FALLBACK");
	char *saved = was ? strdup(was) : NULL;
	setenv("KTUNE_FALLBACK", policy, 1);
	int rc = ktune_open(db, 0, ctx, err, len);
	if (saved) {
		setenv("KTUNE_FALLBACK", saved, 1);
		free(saved);
	} else {
		unsetenv("KTUNE_FALLBACK");
	}
	return rc;
}

/* One key: the three timed in turns; a ktune result that is wrong is marked and not timed. */
static int measure(struct ktune_worker *w, ktune_ctx *ctx, ktune_ctx *model, struct row *r, unsigned seed,
		   struct ktune_err *e)
{
	struct ktune_problem p = { .key = r->k.key, .lda = r->k.lda, .ldb = r->k.ldb, .ldc = r->k.ldc,
				   .alpha = 1, .beta = 0, .seed = seed };
	double sum[3] = { 0, 0, 0 };
	int rc;
	if ((rc = ktune__worker_set_problem(w, &p, e)))
		return rc;
	r->k.key.aligned = ktune__worker_problem(w)->key.aligned;
	static const int order[] = { 0, 1, 2, 2, 1, 0 };
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		struct ktune_check check;
		struct ktune_timing t;
		const char *source = "";
		if (order[i] == 2)
			rc = ktune__worker_cublas(w, &check, &t, e);
		else
			rc = ktune__worker_time_public(w, order[i] ? model : ctx, &check, &t, &source, e);
		if (rc)
			return rc;
		if (!check.pass) {
			r->wrong = 1;
			r->err_fro = check.err_fro;
			if (order[i] != 2)
				fprintf(stderr, "random: %s x: wrong result (error %.3g, %llu NaN/Inf)\n",
					order[i] ? "model" : "ktune", check.err_fro, check.bad);
			return KTUNE_OK;
		}
		if (order[i] == 0) {
			r->source = source;
			r->err_fro = check.err_fro;
		}
		sum[order[i]] += t.median_us;
	}
	r->ktune_us = sum[0] / 2;
	r->model_us = sum[1] / 2;
	r->cublas_us = sum[2] / 2;
	const char *src;
	struct ktune_config cfg;
	pthread_mutex_lock(&model->lock);
	ktune__dispatch_choose(model, &r->k.key, &cfg, &src);
	pthread_mutex_unlock(&model->lock);
	ktune__gemm_config_format(&cfg, r->model_cfg, sizeof(r->model_cfg));
	return KTUNE_OK;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench/random [--keys N] [--seed S] [--db PATH] [--csv FILE] [--md FILE] "
			"[--title TEXT]\n       bench/random --list [--keys N] [--seed S]\n");
}

int main(int argc, char **argv)
{
	int nkeys = 64, list = 0;
	uint64_t seed = 2026;
	const char *db = NULL, *csv = NULL, *md = NULL, *title = "untuned";
	static struct rkey keys[MAX_KEYS];
	struct ktune_err e;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--list")) {
			list = 1;
			continue;
		}
		if (!v) {
			usage();
			return 2;
		}
		if (!strcmp(a, "--keys"))
			nkeys = atoi(v);
		else if (!strcmp(a, "--seed"))
			seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--db"))
			db = v;
		else if (!strcmp(a, "--csv"))
			csv = v;
		else if (!strcmp(a, "--md"))
			md = v;
		else if (!strcmp(a, "--title"))
			title = v;
		else {
			usage();
			return 2;
		}
		i++;
	}
	if (nkeys < 1 || nkeys > MAX_KEYS) {
		fprintf(stderr, "random: --keys must be in 1..%d\n", MAX_KEYS);
		return 2;
	}
	draw(nkeys, seed, keys);
	if (list) {
		for (int i = 0; i < nkeys; i++)
			printf("%s %s %lld %lld %lld %s %lld %lld %lld\n", ktune__dtype_name(keys[i].key.dtype),
			       keys[i].key.variant, (long long)keys[i].key.m, (long long)keys[i].key.n,
			       (long long)keys[i].key.k, keys[i].key.aligned ? "aligned" : "unaligned",
			       (long long)keys[i].lda, (long long)keys[i].ldb, (long long)keys[i].ldc);
		return 0;
	}

	ktune_ctx *ctx = NULL, *model = NULL;
	struct ktune_worker *w = NULL;
	char err[4096];
	int pushed, status = 0;
	if (open_ctx(db, "auto", &ctx, err, sizeof(err)) || open_ctx(db, "model", &model, err, sizeof(err))) {
		fprintf(stderr, "random: %s\n", err);
		return 2;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e) || ktune__worker_open(ctx, &w, &e)) {
		fprintf(stderr, "random: %s\n", e.msg);
		return 2;
	}
	if (!*ktune__worker_cublas_version(w)) {
		fprintf(stderr, "random: cuBLAS is not available: nothing to compare with\n");
		return 2;
	}
	struct row *rows = calloc((size_t)nkeys, sizeof(*rows));
	if (!rows)
		return 2;
	printf("%d random GEMM keys (seed %llu) on %s, cuBLAS %s: %s\n", nkeys, (unsigned long long)seed,
	       ctx->id.name, ktune__worker_cublas_version(w), title);
	printf("%-28s %-9s %-8s %10s %10s %10s %7s %7s\n", "key", "class", "served", "ktune us", "model us",
	       "cuBLAS us", "ratio", "model");
	for (int i = 0; i < nkeys; i++) {
		char text[64];
		rows[i].k = keys[i];
		key_text(&keys[i], text, sizeof(text));
		if (measure(w, ctx, model, &rows[i], (unsigned)(100 + i), &e)) {
			fprintf(stderr, "random: %s: %s\n", text, e.msg);
			status = 1;
			break;
		}
		const struct row *r = &rows[i];
		if (r->wrong) {
			printf("%-28s %-9s WRONG (error %.3g)\n", text, r->k.key.aligned ? "aligned" : "unaligned",
			       r->err_fro);
			status = 1;
			continue;
		}
		printf("%-28s %-9s %-8s %10.1f %10.1f %10.1f %7.3f %7.3f\n", text,
		       r->k.key.aligned ? "aligned" : "unaligned", r->source, r->ktune_us, r->model_us,
		       r->cublas_us, r->cublas_us / r->ktune_us, r->cublas_us / r->model_us);
		fflush(stdout);
	}
	printf("\n");
	report(stdout, rows, nkeys, 0);
	if (csv)
		write_csv(csv, rows, nkeys);
	if (md)
		write_md(md, title, rows, nkeys, seed, ctx->id.name);
	ktune__worker_close(w);
	ktune_close(model);
	ktune_close(ctx);
	free(rows);
	return status;
}
