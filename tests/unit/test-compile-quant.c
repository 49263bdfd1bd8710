/*
 * test-compile-quant.c - NVRTC compiles of the weight-quantized GEMM's
 * templates (qgemv.cu, qgemm.cu, qmma.cu, qcode.cu, qfrag.cu; qwgmma.cu for sm_90a;
 * no GPU needed) for sm_90, through the registry: every format (dtype x
 * bits x group x mode: 128 variants) with its default config, for M
 * cycling through 1, 16 and 128 (the GEMV, the tiled kernel for short and
 * tall A; at 128 also sm_90's own, qwgmma's) on a 4104 x 384 weight,
 * compiles without spilling (but a few words: DEFAULT_SPILL_BYTES); a seeded sample of 12 configs of each
 * family's whole space (6 of qmma's) (whatever a key's prune would say,
 * but the tiled kernel's 48 KiB of shared memory, qmma's registers and
 * qcode's k-block inside a group, which depend on the format) in formats
 * taken in turn, and of 3 candidates of each suite key, compiles; every
 * cubin holds the kernels its call's steps launch (the split-K sum too).
 * quant.cuh (and quant_wgmma.cuh) reach NVRTC as in-memory headers.  KTUNE_TEST_FULL=1 compiles every config
 * of both spaces, every candidate of every suite key and the defaults of
 * every format at every M bucket up to 256 (thousands of kernels: the GPU
 * check's job, not CI's).
 *
 * The qmma family's space (qmma.yaml) in the formats that hold the most
 * registers: each config the prune admits for a key of M = BLOCK_M
 * compiles without spilling.  CI: a seeded sample of QMMA_SAMPLE configs in
 * each of four formats (and 6 of its space in the sample above); KTUNE_TEST_QMMA=all (or KTUNE_TEST_FULL=1): every
 * config in each (about 1500 kernels, some minutes on 16 cores), with the
 * registers and compile time reported.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "runtime/context.h"
#include "search/spec.h"
#include "templates.h"

/*
 * A default may spill a few words, stored and loaded (at most 24 bytes as
 * ptxas counts): qfrag's defaults do that in about 1.5% of formats and
 * shapes, at 56 to 72 registers of a 255 cap (ptxas's choice, not
 * register pressure, which spills hundreds of bytes).  The H200 timed an
 * 8-byte one no slower than its neighbour that spills nothing (14.1 us
 * both, W4 g32 shift 16 x 4096 x 4096, bench/results/h200-qfrag-default-spill.log);
 * the 24-byte ones (2-bit shift, 1 x 4104 x 384, since qfrag's unmasked
 * batches) have not been timed.
 */
#define DEFAULT_SPILL_BYTES 24
#define ARCH "sm_90"
#define SM_COUNT 132
#define SAMPLE 3
#define QMMA_SAMPLE 2 /* configs of the qmma space a format in CI: each takes seconds */
#define QGEMV_SAMPLE 6 /* (config, M) pairs of qgemv's capped configs a format in CI */

static const char *const bits[] = { "8", "4", "2", "1" };
static const char *const groups[] = { "32", "64", "128", "chan" };
static const char *const modes[] = { "scale_shift", "scale", "shift", "fma" };

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	int is_default;
	int failed, spills, registers;
	char what[192];
};

static void compile_one(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	const struct ktune_op *op = ktune__op_of(&j->key);
	struct ktune_cubin cubin;
	struct ktune_err e;
	char cfg[160];
	ktune__key_format(&j->key, j->what, sizeof(j->what));
	ktune__op_config_format(op, &j->cfg, cfg, sizeof(cfg));
	size_t used = strlen(j->what);
	snprintf(j->what + used, sizeof(j->what) - used, " %s %s", op->families[j->cfg.family].name, cfg);
	if (ktune__kernel_compile(&j->key, &j->cfg, ARCH, "", &cubin, &e)) {
		fprintf(stderr, "FAIL %s: %s\n", j->what, e.msg);
		j->failed = 1;
		return;
	}
	struct ktune_op_call call = { .size = { j->key.m, j->key.n, j->key.k }, .ld = { j->key.k, 0, 0, 0, 0, j->key.n } };
	struct ktune_op_step steps[KTUNE_OP_MAX_KERNELS];
	int n = ktune__op_steps(op, &j->key, &j->cfg, &call, SM_COUNT, steps);
	for (int s = 0; s < n; s++) {
		const char *entry = op->families[j->cfg.family].entries[steps[s].entry];
		if (!entry || !memmem(cubin.data, cubin.size, entry, strlen(entry))) {
			fprintf(stderr, "FAIL %s: no kernel %s in the cubin\n", j->what, entry ? entry : "(none)");
			j->failed = 1;
		}
	}
	j->spills = cubin.res.spill_stores + cubin.res.spill_loads;
	j->registers = cubin.res.registers;
	ktune__cubin_free(&cubin);
}

static struct ktune_key format_key(const struct ktune_op *op, ktune_dtype d, int b, int g, int m, int64_t rows)
{
	struct ktune_key key = { .op = "gemm_quant", .dtype = d, .m = rows, .n = 4104, .k = 384, .aligned = 1 };
	const char *values[] = { bits[b], groups[g], modes[m], NULL, NULL, NULL, NULL };
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), KTUNE_OK);
	op->key_bucket(&key);
	assert_int_equal(ktune__op_key_check(&key, NULL), KTUNE_OK);
	return key;
}

/* Every config of a family's space, SPLIT_K at its first value (a launch parameter: the same kernel). */
struct space_walk {
	const struct ktune_op *op;
	int family, nparams, split_index;
	struct ktune_config *cfgs;
	int n, cap;
};

static int collect(const long *values, void *arg)
{
	struct space_walk *w = arg;
	const struct ktune_space *s = ktune__op_space(w->op, w->family, NULL);
	if (values[w->split_index] != s->params[w->split_index].values[0])
		return 0;
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 256;
		w->cfgs = realloc(w->cfgs, (size_t)w->cap * sizeof(*w->cfgs));
		assert_non_null(w->cfgs);
	}
	struct ktune_config *c = &w->cfgs[w->n++];
	memset(c, 0, sizeof(*c));
	c->family = w->family;
	memcpy(c->v, values, (size_t)w->nparams * sizeof(long));
	return 0;
}

/*
 * 1 unless the key's format takes the tiled kernel past 48 KiB of static
 * shared memory, qmma past its registers, or qcode's k-block past a group.
 */
static int fits(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c)
{
	char why[160];
	if (c->family == 0 || !op->prune(key, c, SM_COUNT, why, sizeof(why)))
		return 1;
	return !strstr(why, "shared memory") && !strstr(why, "registers") && !strstr(why, "inside one group");
}

static void test_compile_quant__formats_and_suite(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	int full = getenv("KTUNE_TEST_FULL") && !strcmp(getenv("KTUNE_TEST_FULL"), "1");
	struct ktune_spec suite;
	struct ktune_err e;
	int cap = 200000, njobs = 0, failed = 0, spilling = 0, default_spills = 0, v = 0;
	struct job *jobs = calloc((size_t)cap, sizeof(*jobs));
	assert_non_null(op);
	assert_non_null(jobs);

	/* every format's default: M cycling through 1, 16, 128 (all M buckets to 256 when full) */
	static const int64_t cycle[] = { 1, 16, 128 }, every[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256 };
	for (int d = 0; d < 2; d++)
		for (int b = 0; b < 4; b++)
			for (int g = 0; g < 4; g++)
				for (int m = 0; m < 4; m++, v++)
					for (int r = 0; r < (full ? 9 : 1); r++) {
						struct ktune_key key = format_key(op, d ? KTUNE_F16 : KTUNE_BF16, b, g, m,
										  full ? every[r] : cycle[v % 3]);
						struct ktune_config c = op->default_config(&key, SM_COUNT);
						char why[160];
						jobs[njobs++] = (struct job){ .key = key, .cfg = c,
									      .is_default = !op->prune(&key, &c, SM_COUNT, why, sizeof(why)) };
						if (!jobs[njobs - 1].is_default) {
							char text[128];
							ktune__key_format(&key, text, sizeof(text));
							fail_msg("the default of %s is pruned: %s", text, why);
						}
						struct ktune_config w; /* sm_90's own (the wgmma family's, from 64 rows of A) */
						if (op->arch_default(&key, SM_COUNT, ARCH, &w))
							jobs[njobs++] = (struct job){ .key = key, .cfg = w, .is_default = 1 };
					}

	/* each family's whole space, in formats taken in turn: a seeded sample (all when full) */
	static const int64_t gemv_m[] = { 1, 2, 4, 8, 16 }, mma_m[] = { 16, 128 };
	for (int fam = 0; fam < op->nfamilies; fam++) {
		const struct ktune_space *sp = ktune__op_space(op, fam, &e);
		struct space_walk w = { .op = op, .family = fam };
		assert_non_null(sp);
		w.nparams = sp->nparams;
		w.split_index = ktune__space_param_index(sp, "SPLIT_K");
		assert_true(w.split_index >= 0);
		ktune__space_enumerate(sp, collect, &w);
		assert_true(w.n > 10);
		int keep = full ? w.n : strcmp(op->families[fam].name, "qmma") ? 12 : 6, taken = 0; /* qmma: slow compiles */
		ktune__sample_configs(w.cfgs, w.n, keep, 3);
		for (int i = 0; i < w.n && taken < keep && njobs < cap; i++) {
			int f = (i * 37 + fam) % 64;
			int few = fam == 0 || !strcmp(op->families[fam].name, "qcode") || !strcmp(op->families[fam].name, "qfrag"); /* the families of few rows */
			int64_t rows = few ? gemv_m[i % 5] : mma_m[i % 2];
			struct ktune_key key = format_key(op, i % 3 ? KTUNE_BF16 : KTUNE_F16, f / 16, (f / 4) % 4, f % 4, rows);
			if (!fits(op, &key, &w.cfgs[i]))
				continue;
			jobs[njobs++] = (struct job){ .key = key, .cfg = w.cfgs[i] };
			taken++;
		}
		printf("%s: %d kernels in its space, %d to compile\n", op->families[fam].name, w.n, taken);
		free(w.cfgs);
	}

	/* the suite's keys: a seeded sample of their candidates (all when full) */
	assert_int_equal(ktune__spec_default(&suite, &e), KTUNE_OK);
	for (int i = 0; i < suite.nkeys; i++) {
		struct ktune_config *cfgs = NULL;
		int n = 0, npruned = 0;
		if (strcmp(suite.keys[i].op, "gemm_quant"))
			continue;
		assert_int_equal(ktune__op_candidates(op, &suite.keys[i], ARCH, SM_COUNT, full ? 0 : SAMPLE, (unsigned)(i * 7 + 1),
						      &cfgs, &n, &npruned, &e), KTUNE_OK);
		assert_true(n >= 1);
		for (int c = 0; c < n && njobs < cap; c++)
			jobs[njobs++] = (struct job){ .key = suite.keys[i], .cfg = cfgs[c] };
		free(cfgs);
	}
	ktune__spec_free(&suite);

	ktune__parallel_for(njobs, 0, compile_one, jobs);
	for (int i = 0; i < njobs; i++) {
		failed += jobs[i].failed;
		spilling += jobs[i].spills > 0;
		if (!jobs[i].is_default || !jobs[i].spills)
			continue;
		if (jobs[i].spills > DEFAULT_SPILL_BYTES) {
			fprintf(stderr, "FAIL %s: the default config spills %d bytes\n", jobs[i].what, jobs[i].spills);
			default_spills++;
		} else {
			printf("%s: the default spills %d bytes (%d allowed)\n", jobs[i].what, jobs[i].spills,
			       DEFAULT_SPILL_BYTES);
		}
	}
	printf("compiled %d gemm_quant kernels: %d failed, %d spill (the tuner prunes those), %d defaults spill more "
	       "than allowed\n",
	       njobs, failed, spilling, default_spills);
	assert_int_equal(failed, 0);
	assert_int_equal(default_spills, 0);
	free(jobs);
}

/*
 * The configs of a family (SPLIT_K 1; with a register cap only, if capped)
 * that the prune admits for a 4104 x 4096 bf16 weight, in each format, at
 * each M of ms (nms of them; 0: M = the config's BLOCK_M), compile without
 * spilling: a seeded sample of `sample` a format, every one when all.
 */
static void admitted_without_spills(const char *family, const int (*formats)[2], int nformats, const int64_t *ms,
				    int nms, int capped, int sample, int all)
{
	const struct ktune_op *op = ktune__op_find("gemm_quant");
	int fam = -1, njobs = 0, failed = 0, spilling = 0, admitted = 0;
	for (int f = 0; f < op->nfamilies; f++)
		if (!strcmp(op->families[f].name, family))
			fam = f;
	assert_true(fam >= 0);
	const struct ktune_space *sp = ktune__op_space(op, fam, NULL);
	struct space_walk w = { .op = op, .family = fam };
	assert_non_null(sp);
	w.nparams = sp->nparams;
	w.split_index = ktune__space_param_index(sp, "SPLIT_K");
	ktune__space_enumerate(sp, collect, &w);
	int per = nms > 0 ? nms : 1, bm_index = ktune__space_param_index(sp, "BLOCK_M");
	int cap_index = ktune__space_param_index(sp, "MIN_WARPS");
	struct job *jobs = calloc((size_t)w.n * (size_t)per, sizeof(*jobs));
	assert_non_null(jobs);
	for (int f = 0; f < nformats; f++) { /* a format at a time, reported as it ends */
		int n = 0, fails = 0, spills = 0, most = 0;
		for (int i = 0; i < w.n; i++)
			for (int r = 0; r < per; r++) {
				struct ktune_key key = format_key(op, KTUNE_BF16, formats[f][0], formats[f][1], 0,
								  nms > 0 ? ms[r] : w.cfgs[i].v[bm_index]);
				char why[160];
				key.k = 4096;
				if ((capped && w.cfgs[i].v[cap_index] == 0) ||
				    op->prune(&key, &w.cfgs[i], SM_COUNT, why, sizeof(why)))
					continue;
				jobs[n++] = (struct job){ .key = key, .cfg = w.cfgs[i] };
			}
		admitted += n;
		if (!all && n > sample) { /* a seeded sample of this format's: the first of a partial shuffle */
			unsigned state = 11u + (unsigned)f;
			for (int i = 0; i < sample; i++) {
				state = state * 1103515245u + 12345u;
				int j = i + (int)((state >> 8) % (unsigned)(n - i));
				struct job t = jobs[i];
				jobs[i] = jobs[j];
				jobs[j] = t;
			}
			n = sample;
		}
		ktune__parallel_for(n, 0, compile_one, jobs);
		for (int i = 0; i < n; i++) {
			fails += jobs[i].failed;
			most = jobs[i].registers > most ? jobs[i].registers : most;
			if (jobs[i].spills) {
				fprintf(stderr, "FAIL %s: spills %d bytes\n", jobs[i].what, jobs[i].spills);
				spills++;
			}
			if (all)
				printf("%s: %d registers\n", jobs[i].what, jobs[i].registers);
		}
		printf("%s bits %s group %s: %d compiled, %d failed, %d spill, at most %d registers\n", family,
		       bits[formats[f][0]], groups[formats[f][1]], n, fails, spills, most);
		fflush(stdout);
		njobs += n;
		failed += fails;
		spilling += spills;
	}
	printf("%s: %d configs in its space, %d admitted in %d formats, %d compiled: %d failed, %d spill\n", family,
	       w.n, admitted, nformats, njobs, failed, spilling);
	assert_int_equal(failed, 0);
	assert_int_equal(spilling, 0);
	free(jobs);
	free(w.cfgs);
}

static int full_run(const char *env_name)
{
	const char *env = getenv(env_name), *full_env = getenv("KTUNE_TEST_FULL");
	return (env && !strcmp(env, "all")) || (full_env && !strcmp(full_env, "1"));
}

/*
 * qmma's space without spills: each config the prune admits at M = BLOCK_M,
 * in the formats that hold the most registers (8 bits: 4 codes a word; 1
 * and 2 bits at groups of 32: a scale and a zero for each of up to 4
 * groups a chunk spans) and 4-bit group 128, the format.
 */
static void test_compile_quant__qmma_space_without_spills(void **state)
{
	(void)state;
	static const int formats[][2] = { { 1, 2 }, { 0, 2 }, { 2, 0 }, { 3, 0 } }; /* bits, group: 4/128, 8/128, 2/32, 1/32 */
	admitted_without_spills("qmma", formats, 4, NULL, 0, 0, QMMA_SAMPLE, full_run("KTUNE_TEST_QMMA"));
}

/*
 * qgemv's register caps without spills: each config with MIN_WARPS > 0 that
 * the prune admits (qgemv_regs within the cap) at M = 1, 2, 4, 8, 16, in
 * 4-bit group 128, 8-bit per channel, 1-bit group 32 and 2-bit group 64.
 */
static void test_compile_quant__qgemv_caps_without_spills(void **state)
{
	(void)state;
	static const int formats[][2] = { { 1, 2 }, { 0, 3 }, { 3, 0 }, { 2, 1 } }; /* 4/128, 8/chan, 1/32, 2/64 */
	static const int64_t ms[] = { 1, 2, 4, 8, 16 };
	admitted_without_spills("qgemv", formats, 4, ms, 5, 1, QGEMV_SAMPLE, full_run("KTUNE_TEST_QGEMV"));
}

/* The headers a template reaches, by name. */
static int reaches(const struct ktune_template_file *const *h, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(h[i]->name, name))
			return 1;
	return 0;
}

/*
 * quant.cuh reaches the five templates, and no other; qwgmma.cu also
 * quant_wgmma.cuh, the wgmma.cuh it includes, and quant_sum.cuh, which
 * no other template reaches yet (its hash would move).
 */
static void test_compile_quant__header_reaches_its_templates(void **state)
{
	(void)state;
	const struct ktune_template_file *h[KTUNE_MAX_HEADERS];
	static const char *const mine[] = { "qgemv.cu", "qgemm.cu", "qmma.cu", "qcode.cu", "qwgmma.cu" };
	for (int i = 0; i < 5; i++) {
		const struct ktune_template_file *f = ktune__template_file(mine[i]);
		assert_non_null(f);
		int n = ktune__template_headers(f->text, f->len, h);
		assert_int_equal(n, i < 4 ? 1 : 4);
		assert_true(reaches(h, n, "quant.cuh"));
		assert_int_equal(reaches(h, n, "quant_sum.cuh"), i == 4);
		if (i == 4)
			assert_true(reaches(h, n, "quant_wgmma.cuh") && reaches(h, n, "wgmma.cuh"));
	}
	const struct ktune_template_file *add = ktune__template_file("add.cu");
	assert_non_null(add);
	int n = ktune__template_headers(add->text, add->len, h);
	for (int i = 0; i < n; i++)
		assert_string_not_equal(h[i]->name, "quant.cuh");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile_quant__header_reaches_its_templates),
		cmocka_unit_test(test_compile_quant__formats_and_suite),
		cmocka_unit_test(test_compile_quant__qmma_space_without_spills),
		cmocka_unit_test(test_compile_quant__qgemv_caps_without_spills),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
