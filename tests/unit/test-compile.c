/*
 * test-compile.c - NVRTC compiles of the embedded templates (no GPU needed):
 * the kernels of the GEMM space for sm_90, the disk cache, the helper
 * kernels, and compile failures that must come back as clean errors.
 *
 * By default a seeded sixth of the mma.sync kernels and one of each wgmma
 * kernel's eight variants (the eight in turn), plus the kernel of every shipped GEMM entry (the
 * configs users run without tuning); KTUNE_TEST_FULL=1 compiles every
 * kernel in every variant (about 17 minutes on two cores: the GPU check's
 * `compile` step runs it on the GPU machine's cores).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/share.h"
#include "ops/gemm.h"
#include "runtime/compile.h"
#include "runtime/context.h"
#include "search/space.h"
#include "templates.h"
#include "tuner/candidates.h"
#include "test_util.h"

#define ARCH "sm_90"

/* gemm.yaml's distinct compiled kernels: BLOCK_M/N/K, WARPS_M/N, STAGES (test-space checks it too). */
#define NKERNELS 411
/* The wgmma space: 17 tile shapes x 2 cluster sizes, one ring depth each (gemm_wgmma.yaml). */
#define NKERNELS_WGMMA 34
/* Kernels of the gemv family (gemv.yaml): compiled-in combinations. */
#define NKERNELS_GEMV 119

static char tmp_dir[4096];

static int full_compile(void)
{
	const char *v = getenv("KTUNE_TEST_FULL");
	return v && !strcmp(v, "1");
}

/* The seeded sample: index i of a space's kernels is compiled (always, with KTUNE_TEST_FULL=1). */
static int sampled(unsigned i, unsigned one_in)
{
	return full_compile() || ((i * 2654435761u) >> 11) % one_in == 0;
}

/* Adds (key, cfg) to jobs unless a job compiles to the same kernel already. */
static void add_job(struct ktune_compile_job *jobs, int *n, const struct ktune_key *key,
		    const struct ktune_config *cfg)
{
	for (int i = 0; i < *n; i++)
		if (ktune__kernel_same(&jobs[i].key, &jobs[i].cfg, key, cfg))
			return;
	jobs[*n].key = *key;
	jobs[*n].cfg = *cfg;
	(*n)++;
}

/* The kernels of the shipped GEMM entries of one family, added to jobs (cap: room for them). */
static int add_shipped(int family, struct ktune_compile_job *jobs, int *n, int cap)
{
	int added = 0;
	for (const struct ktune_template_file *f = ktune__shipped_files; f->name; f++) {
		struct ktune_share share;
		struct ktune_err e;
		if (ktune__share_parse(f->text, f->len, f->name, &share, &e))
			fail_msg("%s: %s", f->name, e.msg);
		for (long i = 0; i < share.count; i++) {
			const struct ktune_result *r = &share.entries[i];
			struct ktune_config cfg;
			if (strcmp(r->key.op, "gemm") || share.stale[i] ||
			    ktune__gemm_config_parse(r->config, &cfg, NULL) || cfg.family != family)
				continue;
			int before = *n;
			assert_true(*n < cap);
			add_job(jobs, n, &r->key, &cfg);
			added += *n > before;
		}
		ktune__share_free(&share);
	}
	return added;
}

static int setup(void **state)
{
	(void)state;
	return test_tmp_dir("compile", tmp_dir, sizeof(tmp_dir));
}

static int teardown(void **state)
{
	(void)state;
	test_remove_tree(tmp_dir);
	return 0;
}

/* A fresh, empty cache directory under the test's temp dir. */
static void fresh_dir(const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", tmp_dir, name);
	test_remove_tree(out);
	assert_int_equal(ktune__mkdirs(out, NULL), KTUNE_OK);
}

/* Entries of dir, but . and .. */
static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static int is_cubin_with(const struct ktune_cubin *c, const char *symbol)
{
	return c->data && c->size > 4 && !memcmp(c->data, "\177ELF", 4) &&
	       memmem(c->data, c->size, symbol, strlen(symbol)) != NULL;
}

/*
 * A job that compiled: no error, a CUBIN holding `entry`, and ptxas's -v
 * log parsed (a register count).  Leaves the job's key and config as text
 * in key[128] and cfg[256] for the caller's own checks.
 */
static void check_compiled(const struct ktune_compile_job *j, const char *entry, char *key,
			   char *cfg)
{
	ktune__gemm_config_format(&j->cfg, cfg, 256);
	ktune__key_format(&j->key, key, 128);
	if (j->status)
		fail_msg("%s / %s: %s: %s", key, cfg, ktune_status_name(j->status),
			 j->log ? j->log : "(no log)");
	if (!is_cubin_with(&j->cubin, entry))
		fail_msg("%s / %s: %zu bytes, not a CUBIN with %s", key, cfg, j->cubin.size, entry);
	if (j->cubin.res.registers <= 0 || j->cubin.res.registers > 255)
		fail_msg("%s / %s: %d registers", key, cfg, j->cubin.res.registers);
}

/*
 * The variant of config i: i % 16 runs over dtype x layout x aligned, and
 * (i / 16) % 3 over streaming neither operand, B (M = 1) or A (N = 1).
 */
static struct ktune_key variant(int i)
{
	static const char *const layouts[4] = { "nn", "nt", "tn", "tt" };
	int v = i % 16, stream = (i / 16) % 3;
	struct ktune_key key = { .op = "gemm", .m = stream == 1 ? 1 : 1024,
				 .n = stream == 2 ? 1 : 1024, .k = 1024 };
	key.dtype = (v & 1) ? KTUNE_BF16 : KTUNE_F16;
	key.aligned = (v >> 1) & 1;
	assert_int_equal(ktune__layout_parse(layouts[v >> 2], &key), 0);
	return key;
}

static void test_compile__every_gemm_kernel_then_cache(void **state)
{
	struct ktune_config *kernels;
	int nkernels, njobs = 0, nshipped;
	struct ktune_compile_job *jobs, *again;
	struct ktune_err e;
	char cache[4200];
	int covered[16] = { 0 }, nspill = 0;
	(void)state;

	if (ktune__gemm_space_kernels(KTUNE_GEMM_MMA, &kernels, &nkernels, &e))
		fail_msg("gemm kernels: %s", e.msg);
	assert_int_equal(nkernels, NKERNELS);

	int cap = NKERNELS + 512;
	jobs = calloc((size_t)cap, sizeof(*jobs));
	again = calloc((size_t)cap, sizeof(*again));
	assert_non_null(jobs);
	assert_non_null(again);
	for (int i = 0; i < NKERNELS; i++)
		if (sampled((unsigned)i, 6)) {
			struct ktune_key key = variant(i);
			add_job(jobs, &njobs, &key, &kernels[i]);
			covered[i % 16]++;
		}
	for (int v = 0; v < 16; v++)
		assert_true(covered[v] >= (full_compile() ? NKERNELS / 16 : 1));
	nshipped = add_shipped(KTUNE_GEMM_MMA, jobs, &njobs, cap);
	for (int i = 0; i < njobs; i++) {
		again[i].key = jobs[i].key;
		again[i].cfg = jobs[i].cfg;
	}

	fresh_dir("cubin", cache, sizeof(cache));
	double t0 = ktune__now();
	ktune__compile_jobs(jobs, njobs, ARCH, cache, 0);
	double cold = ktune__now() - t0;
	assert_int_equal(count_files(cache), 2 * njobs); /* a .cubin and a .res each */

	for (int i = 0; i < njobs; i++) {
		struct ktune_compile_job *j = &jobs[i];
		char cfg[256], key[128];
		check_compiled(j, "gemm_kernel", key, cfg);
		assert_null(j->log);
		assert_int_equal(j->cubin.cached, 0); /* a fresh cache: really compiled */
		assert_true(j->cubin.seconds > 0);
		/* gemm.cu uses dynamic shared memory only */
		if (j->cubin.res.smem_static != 0)
			fail_msg("%s / %s: %d bytes of static shared memory", key, cfg,
				 j->cubin.res.smem_static);
		nspill += j->cubin.res.spill_stores + j->cubin.res.spill_loads > 0;
	}

	t0 = ktune__now();
	ktune__compile_jobs(again, njobs, ARCH, cache, 0);
	double warm = ktune__now() - t0;
	for (int i = 0; i < njobs; i++) {
		assert_int_equal(again[i].status, KTUNE_OK);
		assert_int_equal(again[i].cubin.cached, 1);
		assert_true(again[i].cubin.seconds == 0);
		assert_int_equal(again[i].cubin.size, jobs[i].cubin.size);
		assert_memory_equal(again[i].cubin.data, jobs[i].cubin.data, jobs[i].cubin.size);
		assert_memory_equal(&again[i].cubin.res, &jobs[i].cubin.res,
				    sizeof(struct ktune_resources));
	}
	print_message("%d kernels for %s (%s of %d, and %d more of shipped entries): %.1f s compiled, "
		      "%.3f s from the cache; %d spill\n", njobs, ARCH, full_compile() ? "all" : "a sample",
		      NKERNELS, nshipped, cold, warm, nspill);
	assert_true(warm * 20 < cold);

	ktune__compile_jobs_free(jobs, njobs);
	ktune__compile_jobs_free(again, njobs);
	for (int i = 0; i < njobs; i++) {
		assert_null(jobs[i].cubin.data);
		assert_null(again[i].log);
	}
	free(jobs);
	free(again);
	free(kernels);
}

/*
 * Every kernel of the wgmma family for sm_90a, in every dtype and layout
 * (aligned only: the family serves nothing else): it compiles, is a CUBIN
 * with gemm_wgmma_kernel, and spills nothing.  The family refuses archs
 * without wgmma.
 */
static void test_compile__every_wgmma_kernel(void **state)
{
	struct ktune_config *kernels;
	int nkernels, nspill = 0;
	struct ktune_err e;
	char cache[4200];
	(void)state;

	if (ktune__gemm_space_kernels(KTUNE_GEMM_WGMMA, &kernels, &nkernels, &e))
		fail_msg("wgmma kernels: %s", e.msg);
	assert_int_equal(nkernels, NKERNELS_WGMMA);
	int cap = nkernels * 8 + 512, njobs = 0;
	struct ktune_compile_job *jobs = calloc((size_t)cap, sizeof(*jobs));
	assert_non_null(jobs);
	/* every variant of every kernel, or one of each (the 8 in turn), and the shipped */
	for (int i = 0; i < nkernels * 8; i++) {
		static const char *const layouts[4] = { "nn", "nt", "tn", "tt" };
		int v = i % 8;
		if (!full_compile() && v != (i / 8) % 8)
			continue;
		struct ktune_key key = { .op = "gemm", .m = 1024, .n = 1024, .k = 1024,
					 .dtype = v & 1 ? KTUNE_BF16 : KTUNE_F16, .aligned = 1 };
		assert_int_equal(ktune__layout_parse(layouts[v >> 1], &key), 0);
		add_job(jobs, &njobs, &key, &kernels[i / 8]);
	}
	int nshipped = add_shipped(KTUNE_GEMM_WGMMA, jobs, &njobs, cap);
	fresh_dir("cubin-wgmma", cache, sizeof(cache));
	double t0 = ktune__now();
	ktune__compile_jobs(jobs, njobs, "sm_90a", cache, 0);
	double took = ktune__now() - t0;
	for (int i = 0; i < njobs; i++) {
		struct ktune_compile_job *j = &jobs[i];
		char cfg[256], key[128];
		check_compiled(j, "gemm_wgmma_kernel", key, cfg);
		if (j->cubin.res.spill_stores || j->cubin.res.spill_loads || j->cubin.res.stack)
			fail_msg("%s / %s: spills %d + %d bytes, stack %d", key, cfg,
				 j->cubin.res.spill_stores, j->cubin.res.spill_loads, j->cubin.res.stack);
		nspill += j->cubin.res.spill_stores + j->cubin.res.spill_loads > 0;
	}
	print_message("%d wgmma kernels, %s, and %d more of shipped entries, for sm_90a: %.1f s; %d spill\n",
		      nkernels, full_compile() ? "x 8 variants" : "one variant each", nshipped, took, nspill);
	ktune__compile_jobs_free(jobs, njobs);

	/* "sm_90" compiles as sm_90a; an arch without wgmma is refused before NVRTC */
	struct ktune_cubin cubin = { 0 };
	struct ktune_key key = { .op = "gemm", .dtype = KTUNE_F16, .variant = "nt",
				 .m = 64, .n = 64, .k = 64, .aligned = 1 };
	assert_int_equal(ktune__kernel_compile(&key, &kernels[0], "sm_90", cache, &cubin, &e), KTUNE_OK);
	assert_true(is_cubin_with(&cubin, "gemm_wgmma_kernel"));
	ktune__cubin_free(&cubin);
	assert_int_equal(ktune__kernel_compile(&key, &kernels[0], "sm_100a", cache, &cubin, &e),
			 KTUNE_ERR_UNSUPPORTED);
	assert_non_null(strstr(e.msg, "sm_90a only"));
	free(jobs);
	free(kernels);
}

/*
 * The gemv family (aligned keys only, every arch from sm_80): a seeded
 * sample of its kernels, each in one of the 8 dtype x layout variants in
 * turn (every kernel in every variant with KTUNE_TEST_FULL=1), and the
 * kernels of shipped entries: each compiles to a CUBIN with gemv_kernel;
 * shipped ones spill nothing, and at most one in fifty of the rest does.
 */
static void test_compile__every_gemv_kernel(void **state)
{
	static const char *const layouts[4] = { "nn", "nt", "tn", "tt" };
	struct ktune_config *kernels;
	int nkernels;
	struct ktune_err e;
	char cache[4200];
	(void)state;

	if (ktune__gemm_space_kernels(KTUNE_GEMM_GEMV, &kernels, &nkernels, &e))
		fail_msg("gemv kernels: %s", e.msg);
	assert_int_equal(nkernels, NKERNELS_GEMV);
	int cap = nkernels * 8 + 512, njobs = 0;
	struct ktune_compile_job *jobs = calloc((size_t)cap, sizeof(*jobs));
	assert_non_null(jobs);
	for (int i = 0; i < nkernels * 8; i++) {
		int v = i % 8;
		if (!full_compile() && (v != (i / 8) % 8 || !sampled((unsigned)(i / 8), 4)))
			continue;
		struct ktune_key key = { .op = "gemm", .m = 1, .n = 4096, .k = 4096,
					 .dtype = v & 1 ? KTUNE_BF16 : KTUNE_F16, .aligned = 1 };
		assert_int_equal(ktune__layout_parse(layouts[v >> 1], &key), 0);
		add_job(jobs, &njobs, &key, &kernels[i / 8]);
	}
	int nshipped = add_shipped(KTUNE_GEMM_GEMV, jobs, &njobs, cap);
	fresh_dir("cubin-gemv", cache, sizeof(cache));
	double t0 = ktune__now();
	ktune__compile_jobs(jobs, njobs, ARCH, cache, 0);
	double took = ktune__now() - t0;
	int nspill = 0;
	for (int i = 0; i < njobs; i++) {
		struct ktune_compile_job *j = &jobs[i];
		char cfg[256], key[128];
		check_compiled(j, "gemv_kernel", key, cfg);
		int spills = j->cubin.res.spill_stores || j->cubin.res.spill_loads || j->cubin.res.stack;
		nspill += spills;
		/* the tuner drops a kernel that spills (4 of the 952 do), so no entry may have one */
		if (spills && i >= njobs - nshipped)
			fail_msg("shipped %s / %s: spills %d + %d bytes, stack %d", key, cfg,
				 j->cubin.res.spill_stores, j->cubin.res.spill_loads, j->cubin.res.stack);
	}
	print_message("%d gemv kernels (%s of %d x 8 variants, and %d more of shipped entries) for %s: %.1f s; "
		      "%d spill\n", njobs, full_compile() ? "all" : "a sample", nkernels, nshipped, ARCH, took, nspill);
	assert_true(nspill * 50 <= njobs);
	/* an unaligned key is refused before it reaches a launch */
	struct ktune_key key = { .op = "gemm", .dtype = KTUNE_BF16, .variant = "nt", .m = 1, .n = 64,
				 .k = 64, .aligned = 0 };
	char why[256];
	assert_int_equal(ktune__gemm_prune(&key, &kernels[0], 132, 0, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "aligned"));
	ktune__compile_jobs_free(jobs, njobs);
	free(jobs);
	free(kernels);
}

/* One variant's options differ from another's: the cache must not confuse them. */
static void test_compile__cache_keys_on_options(void **state)
{
	struct ktune_config cfg = { 64, 128, 32, 2, 2, 3, 1, 1 };
	struct ktune_key f16 = variant(2), bf16 = variant(3); /* f16/bf16, nn, aligned */
	struct ktune_cubin a, b, a2;
	struct ktune_err e;
	char cache[4200];
	(void)state;

	fresh_dir("options", cache, sizeof(cache));
	assert_int_equal(f16.dtype, KTUNE_F16);
	assert_int_equal(bf16.dtype, KTUNE_BF16);
	assert_int_equal(ktune__kernel_compile(&f16, &cfg, ARCH, cache, &a, &e), KTUNE_OK);
	assert_int_equal(ktune__kernel_compile(&bf16, &cfg, ARCH, cache, &b, &e), KTUNE_OK);
	assert_int_equal(a.cached, 0);
	assert_int_equal(b.cached, 0); /* not served f16's cubin */
	assert_false(a.size == b.size && !memcmp(a.data, b.data, a.size));
	assert_int_equal(ktune__kernel_compile(&f16, &cfg, ARCH, cache, &a2, &e), KTUNE_OK);
	assert_int_equal(a2.cached, 1);
	assert_int_equal(a2.size, a.size);
	assert_memory_equal(a2.data, a.data, a.size);
	ktune__cubin_free(&a);
	ktune__cubin_free(&b);
	ktune__cubin_free(&a2);
	assert_null(a.data);
	ktune__cubin_free(NULL);
}

static void test_compile__broken_source_gives_log(void **state)
{
	static const char src[] =
		"extern \"C\" __global__ void broken(int *p)\n"
		"{\n"
		"\t*p = undeclared_thing + 1;\n"
		"}\n";
	struct ktune_cubin c;
	struct ktune_err e = { "" };
	char cache[4200];
	(void)state;

	fresh_dir("broken", cache, sizeof(cache));
	int rc = ktune__compile("broken.cu", src, sizeof(src) - 1, NULL, 0, ARCH, cache, &c, &e);
	assert_int_equal(rc, KTUNE_ERR_COMPILE);
	assert_null(c.data);
	assert_int_equal(c.size, 0);
	assert_non_null(strstr(e.msg, "broken.cu"));
	assert_non_null(strstr(e.msg, ARCH));
	/* NVRTC's log: the line and the name it could not find */
	assert_non_null(strstr(e.msg, "broken.cu(3)"));
	assert_non_null(strstr(e.msg, "undeclared_thing"));

	/* a failure is not cached: the same source fails again, with the log */
	e.msg[0] = 0;
	rc = ktune__compile("broken.cu", src, sizeof(src) - 1, NULL, 0, ARCH, cache, &c, &e);
	assert_int_equal(rc, KTUNE_ERR_COMPILE);
	assert_non_null(strstr(e.msg, "undeclared_thing"));
	assert_int_equal(count_files(cache), 0);

	/* a bad define in a real template fails the same way */
	const struct ktune_template_file *f = ktune__template_file(KTUNE_GEMM_SOURCE);
	const char *opts[] = { "-DBLOCK_M=24", "-DWARPS_M=1" }; /* not whole m16 tiles */
	assert_non_null(f);
	e.msg[0] = 0;
	rc = ktune__compile(f->name, f->text, f->len, opts, 2, ARCH, cache, &c, &e);
	assert_int_equal(rc, KTUNE_ERR_COMPILE);
	assert_non_null(strstr(e.msg, "a warp owns whole m16 mma tiles"));
}

static void test_compile__bad_arch_fails_cleanly(void **state)
{
	static const char src[] = "extern \"C\" __global__ void tiny_kernel(int *p) { *p = 1; }\n";
	static const char *const bad[] = { "sm_1", "sm_", "compute_90x", "" };
	struct ktune_cubin c;
	char cache[4200];
	(void)state;

	fresh_dir("arch", cache, sizeof(cache));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ktune_err e = { "" };
		int rc = ktune__compile("k.cu", src, sizeof(src) - 1, NULL, 0, bad[i], cache, &c, &e);
		if (rc != KTUNE_ERR_COMPILE)
			fail_msg("arch '%s': %s", bad[i], ktune_status_name(rc));
		assert_null(c.data);
		assert_int_equal(c.size, 0);
		assert_non_null(strstr(e.msg, "compile of 'k.cu' for"));
		assert_non_null(strstr(e.msg, bad[i]));
		assert_non_null(strstr(e.msg, "NVRTC_ERROR_INVALID_OPTION"));
	}
	/* a virtual arch compiles to PTX, not to a CUBIN: an error, and nothing cached */
	struct ktune_err e = { "" };
	for (int round = 0; round < 2; round++) {
		int rc = ktune__compile("k.cu", src, sizeof(src) - 1, NULL, 0, "compute_90", cache, &c,
					&e);
		assert_int_equal(rc, KTUNE_ERR_COMPILE);
		assert_null(c.data);
		assert_int_equal(c.size, 0);
		assert_non_null(strstr(e.msg, "no CUBIN for 'k.cu'"));
		assert_non_null(strstr(e.msg, "compute_90"));
	}
	assert_int_equal(count_files(cache), 0);

	/* the same source is fine for a real arch */
	assert_int_equal(ktune__compile("k.cu", src, sizeof(src) - 1, NULL, 0, ARCH, cache, &c, &e),
			 KTUNE_OK);
	assert_true(is_cubin_with(&c, "tiny_kernel"));
	assert_int_equal(count_files(cache), 2); /* its .cubin and .res */
	ktune__cubin_free(&c);
}

static void test_compile__too_many_options(void **state)
{
	static const char src[] = "extern \"C\" __global__ void k(int *p) { *p = 1; }\n";
	const char *opts[KTUNE_MAX_OPTIONS + 1];
	struct ktune_cubin c;
	struct ktune_err e = { "" };
	(void)state;

	for (int i = 0; i <= KTUNE_MAX_OPTIONS; i++)
		opts[i] = "-DX=1";
	assert_int_equal(ktune__compile("k.cu", src, sizeof(src) - 1, opts, KTUNE_MAX_OPTIONS + 1,
					ARCH, "", &c, &e),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "too many"));
	assert_null(c.data);
}

static void test_compile__helper_kernels(void **state)
{
	static const struct {
		const char *file;
		const char *symbols[2];
	} helpers[] = {
		{ "util.cu", { "fill_random", "compare_to_reference" } },
		{ "gemm_reference.cu", { "gemm_reference", "gemm_reference" } },
	};
	char cache[4200];
	(void)state;

	fresh_dir("helpers", cache, sizeof(cache));
	for (size_t i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++) {
		const struct ktune_template_file *f = ktune__template_file(helpers[i].file);
		struct ktune_cubin c;
		struct ktune_err e = { "" };
		assert_non_null(f);
		assert_string_equal(f->name, helpers[i].file);
		assert_int_equal(strlen(f->text), f->len);
		int rc = ktune__compile(f->name, f->text, f->len, NULL, 0, ARCH, cache, &c, &e);
		if (rc)
			fail_msg("%s: %s", f->name, e.msg);
		assert_int_equal(c.cached, 0);
		for (int s = 0; s < 2; s++)
			if (!is_cubin_with(&c, helpers[i].symbols[s]))
				fail_msg("%s: no '%s' in its CUBIN", f->name, helpers[i].symbols[s]);
		assert_true(c.res.registers > 0);
		ktune__cubin_free(&c);
	}
	assert_null(ktune__template_file("no-such-template.cu"));
	assert_string_equal(ktune__template_hash("no-such-template.cu"), "");
	assert_int_equal(strlen(ktune__template_hash("gemm.cu")), 64);
}

/* A cache directory that others may write to is neither read nor written. */
static void test_compile__untrusted_cache_dir_is_not_used(void **state)
{
	const struct ktune_template_file *f = ktune__template_file("util.cu");
	char cache[4200];
	struct ktune_cubin c;
	struct ktune_err e = { "" };
	(void)state;

	fresh_dir("shared-cache", cache, sizeof(cache));
	assert_int_equal(chmod(cache, 0777), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(ktune__compile(f->name, f->text, f->len, NULL, 0, ARCH, cache, &c, &e),
				 KTUNE_OK);
		assert_int_equal(c.cached, 0); /* compiled both times */
		ktune__cubin_free(&c);
	}
	assert_int_equal(count_files(cache), 0);

	/* the same directory, private again: the second compile comes from the cache */
	assert_int_equal(chmod(cache, 0700), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(ktune__compile(f->name, f->text, f->len, NULL, 0, ARCH, cache, &c, &e),
				 KTUNE_OK);
		assert_int_equal(c.cached, round);
		ktune__cubin_free(&c);
	}
	assert_int_equal(count_files(cache), 2); /* the cubin and its resources */
}

/*
 * Issue 30: a cached cubin is code that runs on the GPU; in a private
 * directory, a cache file that others may write to (or another user owns)
 * is not loaded: the kernel is compiled again.
 */
static void test_compile__writable_cache_files_are_not_loaded(void **state)
{
	const struct ktune_template_file *f = ktune__template_file("util.cu");
	char cache[4200], path[4200 + 260];
	struct ktune_cubin c, fresh;
	struct ktune_err e = { "" };
	struct dirent *d;
	DIR *dp;
	(void)state;

	fresh_dir("private-cache", cache, sizeof(cache));
	assert_int_equal(ktune__compile(f->name, f->text, f->len, NULL, 0, ARCH, cache, &fresh, &e),
			 KTUNE_OK);
	assert_int_equal(fresh.cached, 0);
	assert_int_equal(count_files(cache), 2);
	/* someone else's bytes in a world-writable cubin */
	assert_non_null(dp = opendir(cache));
	while ((d = readdir(dp)) != NULL) {
		if (!strstr(d->d_name, ".cubin"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", cache, d->d_name);
		FILE *out = fopen(path, "wb");
		assert_non_null(out);
		fputs("planted", out);
		fclose(out);
		assert_int_equal(chmod(path, 0666), 0);
	}
	closedir(dp);
	assert_int_equal(ktune__compile(f->name, f->text, f->len, NULL, 0, ARCH, cache, &c, &e),
			 KTUNE_OK);
	assert_int_equal(c.cached, 0);
	assert_int_equal(c.size, fresh.size);
	assert_memory_equal(c.data, fresh.data, c.size);
	ktune__cubin_free(&c);
	/* rewritten by that compile, ours and private again: loaded */
	assert_int_equal(ktune__compile(f->name, f->text, f->len, NULL, 0, ARCH, cache, &c, &e),
			 KTUNE_OK);
	assert_int_equal(c.cached, 1);
	assert_memory_equal(c.data, fresh.data, c.size);
	ktune__cubin_free(&c);
	ktune__cubin_free(&fresh);
}

/* A module of two kernels: the second's spill must show, and the larger of each figure. */
static void test_compile__resources_of_every_kernel(void **state)
{
	static const char log[] =
		"ptxas info    : 0 bytes gmem\n"
		"ptxas info    : Compiling entry function 'fwd' for 'sm_90a'\n"
		"ptxas info    : Function properties for fwd\n"
		"    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
		"ptxas info    : Used 96 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]\n"
		"ptxas info    : Compiling entry function 'bwd' for 'sm_90a'\n"
		"ptxas info    : Function properties for bwd\n"
		"    48 bytes stack frame, 40 bytes spill stores, 44 bytes spill loads\n"
		"ptxas info    : Used 255 registers, used 1 barriers, 8192 bytes smem, 400 bytes cmem[0]\n";
	struct ktune_resources r;
	(void)state;
	ktune__ptxas_resources(log, &r);
	assert_int_equal(r.registers, 255);
	assert_int_equal(r.spill_stores, 40);
	assert_int_equal(r.spill_loads, 44);
	assert_int_equal(r.stack, 48);
	assert_int_equal(r.smem_static, 16384);
	ktune__ptxas_resources("", &r);
	assert_int_equal(r.registers + r.spill_stores + r.spill_loads + r.stack + r.smem_static, 0);
}

static void test_compile__nvrtc_version(void **state)
{
	int major = 0, minor = -1;
	(void)state;
	const char *v = ktune__nvrtc_version();
	assert_int_equal(sscanf(v, "%d.%d", &major, &minor), 2);
	assert_true(major >= 11);
	assert_true(minor >= 0);
	assert_ptr_equal(ktune__nvrtc_version(), v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile__nvrtc_version),
		cmocka_unit_test(test_compile__resources_of_every_kernel),
		cmocka_unit_test(test_compile__broken_source_gives_log),
		cmocka_unit_test(test_compile__bad_arch_fails_cleanly),
		cmocka_unit_test(test_compile__too_many_options),
		cmocka_unit_test(test_compile__helper_kernels),
		cmocka_unit_test(test_compile__untrusted_cache_dir_is_not_used),
		cmocka_unit_test(test_compile__writable_cache_files_are_not_loaded),
		cmocka_unit_test(test_compile__cache_keys_on_options),
		cmocka_unit_test(test_compile__every_gemm_kernel_then_cache),
		cmocka_unit_test(test_compile__every_wgmma_kernel),
		cmocka_unit_test(test_compile__every_gemv_kernel),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
