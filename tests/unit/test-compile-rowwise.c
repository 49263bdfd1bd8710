/*
 * test-compile-rowwise.c - NVRTC compiles of the row-wise templates
 * (softmax, rmsnorm, layernorm, cross_entropy; no GPU needed) for sm_90, through the registry: for
 * every key of each op's part of the default suite, and for awkward row
 * lengths (1, 7, 33, 4097, 65537, 262144 columns, as far as the op takes
 * them; unaligned too), the op's
 * default config and a seeded sample of the candidates the prune keeps
 * compile, their cubins hold every kernel the call's steps launch, and the
 * default config, where the prune admits one, does not spill.  Unaligned
 * rows over 65536 columns go element by element (but cross_entropy's, in
 * shifted vectors): the prune admits few or no configs for them, and their
 * default (which runs, slower) may spill.  rowwise.cuh reaches NVRTC as a second
 * in-memory header.  KTUNE_TEST_FULL=1 compiles every candidate of every
 * suite key (thousands: the GPU check's job, not CI's).  Cross-entropy's
 * 36 variants (pass, reduction, smoothing, soft cap) each compile their
 * default at 4097 columns (a short last vector), the fused ones at 262144
 * and unaligned at GPT-2's 50257 too, and the means unaligned at 33, with
 * the kernels their steps launch and no spill.  The unaligned class of
 * cross_entropy takes vectors (rows shifted to an aligned start): a seeded
 * sample of SHIFTED_SAMPLE of the candidates with VEC > 1 of GPT-2's key
 * (8192 x 50257 bf16, fused, mean; all of them, about 100, with
 * KTUNE_TEST_FULL=1) compiles without spilling.
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
#include "templates.h"
#include "search/spec.h"

#define ARCH "sm_90"
#define SM_COUNT 132
#define SAMPLE 3
#define SHIFTED_SAMPLE 24

static int full_compile(void)
{
	const char *full = getenv("KTUNE_TEST_FULL");
	return full && !strcmp(full, "1");
}

static const char *const ops[] = { "softmax", "rmsnorm", "layernorm", "cross_entropy" };
static const int64_t awkward_cols[] = { 1, 7, 33, 4097, 65537, 262144 };

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	int is_default; /* the op's default config, and the prune admits it */
	int failed, spills;
	char what[160];
};

static void compile_one(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	const struct ktune_op *op = ktune__op_of(&j->key);
	struct ktune_cubin cubin;
	struct ktune_err e;
	char cfg[128];
	ktune__key_format(&j->key, j->what, sizeof(j->what));
	ktune__op_config_format(op, &j->cfg, cfg, sizeof(cfg));
	size_t used = strlen(j->what);
	snprintf(j->what + used, sizeof(j->what) - used, " %s", cfg);
	if (ktune__kernel_compile(&j->key, &j->cfg, ARCH, "", &cubin, &e)) {
		fprintf(stderr, "FAIL %s: %s\n", j->what, e.msg);
		j->failed = 1;
		return;
	}
	/* every kernel the call launches is in the cubin */
	struct ktune_op_call call = { .size = { j->key.m, j->key.n, j->key.k } };
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
	ktune__cubin_free(&cubin);
}

/* The op's keys to compile: its suite keys, and awkward row lengths of its first suite variant. */
static int keys_of(const struct ktune_op *op, const struct ktune_spec *suite, struct ktune_key *out, int max)
{
	int n = 0;
	for (int i = 0; i < suite->nkeys && n < max; i++)
		if (!strcmp(suite->keys[i].op, op->name))
			out[n++] = suite->keys[i];
	int first = 0;
	for (int i = 0; i < n; i++)
		if (out[i].n != out[0].n)
			break;
		else
			first = i;
	for (size_t c = 0; c < sizeof(awkward_cols) / sizeof(awkward_cols[0]) && n + 2 <= max; c++)
		for (int aligned = 1; aligned >= 0; aligned--) {
			struct ktune_key k = out[first];
			k.m = 8;
			k.n = awkward_cols[c];
			k.aligned = aligned;
			op->key_bucket(&k);
			if (!ktune__op_key_check(&k, NULL)) /* within the op's longest row */
				out[n++] = k;
		}
	return n;
}

static void test_compile_rowwise__suite_and_awkward_rows(void **state)
{
	(void)state;
	struct ktune_spec suite;
	struct ktune_err e;
	int full = full_compile();
	assert_int_equal(ktune__spec_default(&suite, &e), 0);

	int cap = 200000, njobs = 0, failed = 0, default_spills = 0, spilling = 0;
	struct job *jobs = calloc((size_t)cap, sizeof(*jobs));
	assert_non_null(jobs);
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		const struct ktune_op *op = ktune__op_find(ops[o]);
		struct ktune_key keys[128];
		assert_non_null(op);
		int nkeys = keys_of(op, &suite, keys, 128);
		assert_true(nkeys > 12);
		for (int k = 0; k < nkeys; k++) {
			struct ktune_config *cfgs = NULL;
			int n = 0, npruned = 0;
			assert_int_equal(ktune__op_key_check(&keys[k], &e), 0);
			assert_int_equal(ktune__op_candidates(op, &keys[k], ARCH, SM_COUNT, full ? 0 : SAMPLE,
							      (unsigned)(k * 7 + 1), &cfgs, &n, &npruned, &e), 0);
			/* unaligned rows over 64K go element by element: no config holds them; the default runs */
			if (keys[k].aligned || keys[k].n <= 65536)
				assert_true(n >= 1);
			struct ktune_config d = op->default_config(&keys[k], SM_COUNT);
			char why[160];
			jobs[njobs++] = (struct job){ .key = keys[k], .cfg = d,
						      .is_default = !op->prune(&keys[k], &d, SM_COUNT, why, sizeof(why)) };
			for (int i = 0; i < n && njobs < cap; i++)
				jobs[njobs++] = (struct job){ .key = keys[k], .cfg = cfgs[i] };
			free(cfgs);
		}
	}
	ktune__parallel_for(njobs, 0, compile_one, jobs);
	for (int i = 0; i < njobs; i++) {
		failed += jobs[i].failed;
		spilling += jobs[i].spills > 0;
		/* the unaligned class of rows over 64K (element by element) may spill a little: correct, slower */
		if (jobs[i].is_default && jobs[i].spills && (jobs[i].key.aligned || jobs[i].key.n <= 65536)) {
			fprintf(stderr, "FAIL %s: the default config spills %d bytes\n", jobs[i].what, jobs[i].spills);
			default_spills++;
		}
	}
	printf("compiled %d row-wise kernels: %d failed, %d spill (the tuner prunes those), %d defaults spill\n",
	       njobs, failed, spilling, default_spills);
	assert_int_equal(failed, 0);
	assert_int_equal(default_spills, 0);
	free(jobs);
	ktune__spec_free(&suite);
}

/* Every variant of cross_entropy: its default compiles, holds its steps' kernels and does not spill. */
static void test_compile_rowwise__cross_entropy_variants(void **state)
{
	const struct ktune_op *op = ktune__op_find("cross_entropy");
	static const int64_t cols[] = { 4097, 262144, 33, 50257 };
	struct job *jobs = calloc(3 * 3 * 2 * 2 * 4, sizeof(*jobs));
	int njobs = 0, failed = 0, spills = 0;
	(void)state;
	assert_non_null(op);
	assert_non_null(jobs);
	for (int p = 0; p < 3; p++)
		for (int r = 0; r < 3; r++)
			for (int f = 0; f < 4; f++)
				for (int c = 0; c < 4; c++) {
					/* 262144 and unaligned 50257 fused, unaligned 33 the mean: what differs there */
					if (((c == 1 || c == 3) && p != 2) || (c == 2 && r != 0))
						continue;
					const char *values[] = { op->fields[0].choices[p], op->fields[1].choices[r],
								 f & 1 ? "on" : "off", f & 2 ? "on" : "off" };
					struct ktune_key k = { .op = "cross_entropy", .dtype = KTUNE_BF16, .m = 8192,
							       .n = cols[c], .aligned = c < 2 };
					char why[160];
					assert_int_equal(ktune__op_variant_set(op, &k, values, NULL), 0);
					op->key_bucket(&k);
					struct ktune_config d = op->default_config(&k, SM_COUNT);
					assert_int_equal(op->prune(&k, &d, SM_COUNT, why, sizeof(why)), 0);
					jobs[njobs++] = (struct job){ .key = k, .cfg = d, .is_default = 1 };
				}
	ktune__parallel_for(njobs, 0, compile_one, jobs);
	for (int i = 0; i < njobs; i++) {
		failed += jobs[i].failed;
		if (jobs[i].spills) {
			fprintf(stderr, "FAIL %s: the default config spills %d bytes\n", jobs[i].what, jobs[i].spills);
			spills++;
		}
	}
	assert_int_equal(njobs, 36 + 12 + 12 + 12);
	printf("compiled the defaults of %d cross_entropy variants and lengths: %d failed, %d spill\n", njobs,
	       failed, spills);
	assert_int_equal(failed, 0);
	assert_int_equal(spills, 0);
	free(jobs);
}

/*
 * The candidates with vectors (VEC 2, 4, 8; a sample in CI) of GPT-2's key in the
 * unaligned class, 8192 x 50257 bf16 fused mean: rows read from the
 * aligned address below their start, the gradient stored in vectors or,
 * where its shift is not the logits', element by element; each compiles,
 * holds its steps' kernels and does not spill.
 */
static void test_compile_rowwise__cross_entropy_shifted_candidates(void **state)
{
	const struct ktune_op *op = ktune__op_find("cross_entropy");
	const char *values[] = { "fused", "mean", "off", "off" };
	struct ktune_key k = { .op = "cross_entropy", .dtype = KTUNE_BF16, .m = 8192, .n = 50257 };
	struct ktune_config *cfgs = NULL;
	struct ktune_err e;
	int n = 0, npruned = 0, nvec = 0, failed = 0, spills = 0;
	(void)state;
	assert_int_equal(ktune__op_variant_set(op, &k, values, NULL), 0);
	op->key_bucket(&k);
	assert_int_equal(ktune__op_candidates(op, &k, ARCH, SM_COUNT, 0, 1, &cfgs, &n, &npruned, &e), 0);
	for (int i = 0; i < n; i++) /* the candidates with vectors, in their order, at the front */
		if (ktune__op_param(op, &cfgs[i], "VEC", 1) > 1)
			cfgs[nvec++] = cfgs[i];
	assert_true(nvec >= 50);
	/* CI: a seeded sample; every one ran on the GPU (rowwise.md) */
	int njobs = full_compile() ? nvec : SHIFTED_SAMPLE;
	if (njobs < nvec)
		ktune__sample_configs(cfgs, nvec, njobs, 3);
	struct job *jobs = calloc((size_t)njobs + 1, sizeof(*jobs));
	assert_non_null(jobs);
	for (int i = 0; i < njobs; i++)
		jobs[i] = (struct job){ .key = k, .cfg = cfgs[i] };
	free(cfgs);
	ktune__parallel_for(njobs, 0, compile_one, jobs);
	for (int i = 0; i < njobs; i++) {
		failed += jobs[i].failed;
		if (jobs[i].spills) {
			fprintf(stderr, "FAIL %s: spills %d bytes\n", jobs[i].what, jobs[i].spills);
			spills++;
		}
	}
	printf("compiled %d of the %d shifted-row candidates with vectors (of %d): %d failed, %d spill\n", njobs, nvec, n,
	       failed, spills);
	assert_int_equal(failed, 0);
	assert_int_equal(spills, 0);
	free(jobs);
}

/*
 * rowwise.cuh and rowring.cuh are embedded headers the row-wise templates
 * include (softmax both), and the elementwise ones do not; cross_entropy.cuh
 * is the two cross-entropy templates'.
 */
static void test_compile_rowwise__header_reaches_only_its_templates(void **state)
{
	(void)state;
	const struct ktune_template_file *h[KTUNE_MAX_HEADERS];
	const struct ktune_template_file *softmax = ktune__template_file("softmax.cu");
	const struct ktune_template_file *add = ktune__template_file("add.cu");
	assert_non_null(softmax);
	assert_non_null(add);
	assert_int_equal(ktune__template_headers(softmax->text, softmax->len, h), 3);
	assert_string_equal(h[0]->name, "prelude.cuh");
	assert_string_equal(h[1]->name, "rowring.cuh");
	assert_string_equal(h[2]->name, "rowwise.cuh");
	assert_int_equal(ktune__template_headers(add->text, add->len, h), 1);
	assert_string_equal(h[0]->name, "prelude.cuh");
	/*
	 * both cross-entropy families take cross_entropy.cuh (and rowwise.cuh,
	 * the stream one for its walk, and rowstream.cuh), softmax_stream.cu
	 * rowstream.cuh and not cross_entropy.cuh
	 */
	static const char *const ce[] = { "cross_entropy.cu", "cross_entropy_stream.cu" };
	for (int i = 0; i < 2; i++) {
		const struct ktune_template_file *f = ktune__template_file(ce[i]);
		assert_non_null(f);
		assert_int_equal(ktune__template_headers(f->text, f->len, h), 3 + i);
		assert_string_equal(h[0]->name, "cross_entropy.cuh");
		assert_string_equal(h[1]->name, "prelude.cuh");
		if (i)
			assert_string_equal(h[2]->name, "rowstream.cuh");
		assert_string_equal(h[2 + i]->name, "rowwise.cuh");
	}
	const struct ktune_template_file *stream = ktune__template_file("softmax_stream.cu");
	assert_non_null(stream);
	assert_int_equal(ktune__template_headers(stream->text, stream->len, h), 3);
	assert_string_equal(h[0]->name, "prelude.cuh");
	assert_string_equal(h[1]->name, "rowstream.cuh");
	assert_string_equal(h[2]->name, "rowwise.cuh");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile_rowwise__header_reaches_only_its_templates),
		cmocka_unit_test(test_compile_rowwise__suite_and_awkward_rows),
		cmocka_unit_test(test_compile_rowwise__cross_entropy_variants),
		cmocka_unit_test(test_compile_rowwise__cross_entropy_shifted_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
