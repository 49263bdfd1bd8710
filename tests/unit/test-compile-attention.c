/*
 * test-compile-attention.c - NVRTC compiles of the flash attention templates
 * (no GPU needed) for an sm_90 device, through the registry (the wgmma
 * family for sm_90a), with ptxas's registers and spills reported.
 *
 * For every variant the op compiles (pass x dtype x head dim x mask): the default
 * config of a long key (sq = sk = 4096) and of a short one (sq = 1, sk =
 * 17), and a seeded sample of the candidates the prune keeps; every one
 * compiles, holds the kernel its call launches, and the defaults do not
 * spill.  The wgmma families (attention_wgmma.cu for the forward,
 * attention_wgmma_bwd.cu for the backward):
 * a seeded sample of WGMMA_SAMPLE of the admitted configs per variant of
 * the family's pass, the variant's sm_90 default (arch_default) one of
 * them, every one printed with its registers (ptxas reports
 * the launch's count, 65536 / threads; setmaxnreg moves them between the
 * warpgroups) and none may spill.  KTUNE_TEST_FULL=1 compiles the whole
 * space of every variant, every family's, admitted or not, and
 * prints one line per config (registers, spills, what the prune said): the
 * data the prune's register estimates are fitted to (the GPU check's job;
 * about 3,500 compiles).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/op.h"
#include "runtime/context.h"

#define ARCH "sm_90"
#define SM_COUNT 132
#define SAMPLE 2
#define WGMMA_SAMPLE 2

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	int is_default, admitted;
	char why[160];
	int failed, registers, spills;
	char what[200];
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
	snprintf(j->what + used, sizeof(j->what) - used, " %s", cfg);
	if (ktune__kernel_compile(&j->key, &j->cfg, ARCH, "", &cubin, &e)) {
		fprintf(stderr, "FAIL %s: %s\n", j->what, e.msg);
		j->failed = 1;
		return;
	}
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
	j->registers = cubin.res.registers;
	j->spills = cubin.res.spill_stores + cubin.res.spill_loads;
	ktune__cubin_free(&cubin);
}

struct collect {
	const struct ktune_op *op;
	struct ktune_key key;
	int family, admitted_only;
	struct job *jobs;
	int n, cap;
};

/* A config of the whole space, with what the prune says of it (admitted_only: the others are left out). */
static int add_config(const long *values, void *arg)
{
	struct collect *c = arg;
	const struct ktune_space *s = ktune__op_space(c->op, c->family, NULL);
	struct job *j = &c->jobs[c->n];
	if (c->n == c->cap)
		return 1;
	memset(j, 0, sizeof(*j));
	j->key = c->key;
	j->cfg.family = c->family;
	memcpy(j->cfg.v, values, (size_t)s->nparams * sizeof(long));
	j->admitted = !c->op->prune(&j->key, &j->cfg, SM_COUNT, j->why, sizeof(j->why));
	if (c->admitted_only && !j->admitted)
		return 0;
	c->n++;
	return 0;
}

/*
 * A wgmma family's admitted configs for a key of its pass: all of them, or
 * a seeded sample of WGMMA_SAMPLE (a partial shuffle of those just added)
 * that holds the key's sm_90 default.
 */
static void add_wgmma(struct collect *c, const struct ktune_key *key, int family, int all, unsigned seed)
{
	struct ktune_err e;
	int first = c->n;
	c->key = *key;
	c->family = family;
	c->admitted_only = !all;
	ktune__space_enumerate(ktune__op_space(c->op, c->family, &e), add_config, c);
	c->admitted_only = 0;
	if (all || c->n - first <= WGMMA_SAMPLE)
		return;
	struct ktune_config *cfgs = calloc((size_t)(c->n - first), sizeof(*cfgs));
	assert_non_null(cfgs);
	for (int i = first; i < c->n; i++)
		cfgs[i - first] = c->jobs[i].cfg;
	ktune__sample_configs(cfgs, c->n - first, WGMMA_SAMPLE, seed);
	for (int i = 0; i < WGMMA_SAMPLE; i++)
		c->jobs[first + i].cfg = cfgs[i];
	c->n = first + WGMMA_SAMPLE;
	free(cfgs);
	/* the key's sm_90 default (the op's arch_default) one of them, in the last place if not drawn: no spills */
	struct ktune_config d;
	const struct ktune_space *s = ktune__op_space(c->op, family, &e);
	if (!c->op->arch_default(key, SM_COUNT, ARCH, &d) || d.family != family)
		return;
	int at = WGMMA_SAMPLE - 1;
	for (int i = 0; i < WGMMA_SAMPLE; i++)
		if (!memcmp(c->jobs[first + i].cfg.v, d.v, (size_t)s->nparams * sizeof(long)))
			at = i;
	c->jobs[first + at].cfg = d;
	c->jobs[first + at].is_default = 1;
}

/* The op's variants: every pass, dtype, head dim (the backward: 64 and 128) and mask. */
static int variants(const struct ktune_op *op, struct ktune_key *out, int max)
{
	static const char *const passes[] = { "fwd", "bwd", "bwd_det" }, *const dims[] = { "64", "128", "256" };
	static const char *const masks[] = { "none", "causal" };
	int n = 0;
	for (int p = 0; p < 3; p++)
		for (int t = 0; t < op->ndtypes; t++)
			for (int d = 0; d < (p ? 2 : 3); d++)
				for (int m = 0; m < 2 && n < max; m++) {
					struct ktune_key k = { .op = "attention", .dtype = op->dtypes[t], .m = 4096,
							       .n = 4096, .k = 64, .aligned = 1 };
					const char *values[] = { passes[p], dims[d], masks[m], "1", NULL, NULL, NULL };
					assert_int_equal(ktune__op_variant_set(op, &k, values, NULL), 0);
					out[n++] = k;
				}
	return n;
}

static void test_compile_attention__variants(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("attention");
	int full = getenv("KTUNE_TEST_FULL") && !strcmp(getenv("KTUNE_TEST_FULL"), "1");
	struct ktune_key keys[32];
	struct ktune_err e;
	assert_non_null(op);
	int nkeys = variants(op, keys, 32), cap = 8192;
	struct collect c = { .op = op, .jobs = calloc((size_t)cap, sizeof(struct job)), .cap = cap };
	assert_non_null(c.jobs);
	assert_int_equal(nkeys, 12 + 2 * 8);

	for (int k = 0; k < nkeys; k++) {
		struct ktune_key shorter = keys[k];
		shorter.m = 1;
		shorter.n = 17;
		op->key_bucket(&shorter);
		const struct ktune_key *both[] = { &keys[k], &shorter };
		for (int b = 0; b < 2; b++) {
			struct ktune_config d = op->default_config(both[b], SM_COUNT);
			struct job *j = &c.jobs[c.n++];
			*j = (struct job){ .key = *both[b], .cfg = d, .is_default = 1 };
			j->admitted = !op->prune(&j->key, &d, SM_COUNT, j->why, sizeof(j->why));
			if (!j->admitted)
				fail_msg("the default of key %d (%s) is pruned: %s", k, b ? "short" : "long", j->why);
		}
		char pass[8];
		assert_int_equal(ktune__op_variant_get(op, &keys[k], "pass", pass, sizeof(pass)), 0);
		int forward = !strcmp(pass, "fwd");
		add_wgmma(&c, &keys[k], forward ? KTUNE_ATTN_FAMILY_WGMMA : KTUNE_ATTN_FAMILY_WGMMA_BWD, full,
			  (unsigned)(k * 13 + 5));
		if (full) {
			c.key = keys[k];
			c.family = forward ? KTUNE_ATTN_FAMILY_FWD : KTUNE_ATTN_FAMILY_BWD;
			ktune__space_enumerate(ktune__op_space(op, c.family, &e), add_config, &c);
			continue;
		}
		struct ktune_config *cfgs = NULL;
		int n = 0, npruned = 0;
		assert_int_equal(ktune__op_candidates(op, &keys[k], ARCH, SM_COUNT, SAMPLE, (unsigned)(k * 7 + 1), &cfgs, &n,
						      &npruned, &e), 0);
		assert_true(n >= 1);
		for (int i = 0; i < n; i++)
			c.jobs[c.n++] = (struct job){ .key = keys[k], .cfg = cfgs[i], .admitted = 1 };
		free(cfgs);
	}
	assert_true(c.n < cap);
	ktune__parallel_for(c.n, 0, compile_one, c.jobs);

	int failed = 0, default_spills = 0, admitted_spill = 0, pruned_fit = 0, admitted = 0;
	int wgmma = 0, wgmma_admitted = 0, wgmma_spill = 0;
	for (int i = 0; i < c.n; i++) {
		struct job *j = &c.jobs[i];
		int is_wgmma = j->cfg.family == KTUNE_ATTN_FAMILY_WGMMA || j->cfg.family == KTUNE_ATTN_FAMILY_WGMMA_BWD;
		failed += j->failed;
		admitted += j->admitted;
		admitted_spill += j->admitted && j->spills;
		pruned_fit += !j->admitted && !j->spills && !j->failed;
		wgmma += is_wgmma;
		wgmma_admitted += is_wgmma && j->admitted;
		if (is_wgmma && j->admitted && j->spills) {
			fprintf(stderr, "FAIL %s: an admitted wgmma config spills %d bytes\n", j->what, j->spills);
			wgmma_spill++;
		}
		if (j->is_default && j->spills) {
			fprintf(stderr, "FAIL %s: the default config spills %d bytes\n", j->what, j->spills);
			default_spills++;
		}
		if (full || j->spills || is_wgmma)
			printf("%-110s %3d registers, %5d bytes spilled%s%s\n", j->what, j->registers, j->spills,
			       j->admitted ? "" : ", pruned: ", j->admitted ? "" : j->why);
	}
	printf("compiled %d attention kernels: %d failed, %d admitted, %d of them spill (the tuner drops those), "
	       "%d pruned that fit, %d defaults spill; wgmma (sm_90a): %d compiled, %d admitted, %d of them spill\n",
	       c.n, failed, admitted, admitted_spill, pruned_fit, default_spills, wgmma, wgmma_admitted, wgmma_spill);
	assert_int_equal(failed, 0);
	assert_int_equal(default_spills, 0);
	assert_int_equal(wgmma_spill, 0);
	free(c.jobs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile_attention__variants),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
