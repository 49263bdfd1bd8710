/*
 * test-compile-elementwise.c - NVRTC compiles of the elementwise templates
 * (add, gelu, glu, dropout; no GPU needed) for sm_90: every compiled kernel
 * of each family's space compiles, without spilling unless MIN_WARPS caps
 * its registers (the tuner then prunes it: "spills N bytes"), the prelude reaches
 * NVRTC as an in-memory header, and the limits the kernels assert come
 * back as compile errors.
 *
 * A family's compiled kernels are its space's configs without the launch
 * parameter BLOCKS_PER_SM; each compiles per dtype (f16, bf16, f32),
 * alignment class and variant (gelu: APPROX x BACKWARD; glu: ACT x
 * BACKWARD), less what the C prune drops (VEC * sizeof(elem) > 16; VEC > 1
 * when unaligned).  That is about 3,500 compiles, too many for CI's two
 * cores, so every kernel compiles in full in each family's heaviest variant
 * (f16 and bf16 aligned with the backward tanh GELU; the unaligned kernels
 * in f32, registers not capped by MIN_WARPS), and a seeded sample of a
 * twelfth of the rest; KTUNE_TEST_FULL=1
 * compiles them all.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/compile.h"
#include "search/space.h"
#include "templates.h"

#define ARCH "sm_90"
#define MAX_DEFINES 12

struct family {
	const char *name, *source, *space, *entry;
	int nvariants;
	const char *variants[6][2]; /* the op's own defines, per variant */
	int heaviest;               /* the variant compiled in full */
};

static const struct family families[] = {
	{ "add", "add.cu", "add.yaml", "add_kernel", 1, { { NULL, NULL } }, 0 },
	{ "gelu", "gelu.cu", "gelu.yaml", "gelu_kernel", 4,
	  { { "-DAPPROX=0", "-DBACKWARD=0" }, { "-DAPPROX=1", "-DBACKWARD=0" },
	    { "-DAPPROX=0", "-DBACKWARD=1" }, { "-DAPPROX=1", "-DBACKWARD=1" } }, 3 },
	{ "glu", "glu.cu", "glu.yaml", "glu_kernel", 6,
	  { { "-DACT=0", "-DBACKWARD=0" }, { "-DACT=1", "-DBACKWARD=0" }, { "-DACT=2", "-DBACKWARD=0" },
	    { "-DACT=0", "-DBACKWARD=1" }, { "-DACT=1", "-DBACKWARD=1" }, { "-DACT=2", "-DBACKWARD=1" } }, 5 },
	{ "dropout", "dropout.cu", "dropout.yaml", "dropout_kernel", 1, { { NULL, NULL } }, 0 },
};
#define NFAMILIES (int)(sizeof(families) / sizeof(families[0]))

static const int dtype_size[3] = { 2, 2, 4 }; /* f16, bf16, f32 */

struct job {
	const struct family *f;
	const struct ktune_template_file *src;
	char defines[MAX_DEFINES][48];
	int ndefines;
	int vec, dtype, aligned, variant, full;
	int min_warps; /* > 0: registers capped, where spilling is the tuner's to prune */
	struct ktune_cubin cubin;
	int rc;
	struct ktune_err e;
};

struct jobs {
	struct job *v;
	int n, cap;
};

/* The family's distinct compiled kernels, each as its space's values (BLOCKS_PER_SM set to -1). */
struct kernels {
	const struct ktune_space *s;
	int launch_param; /* index of BLOCKS_PER_SM */
	long (*v)[KTUNE_SPACE_MAX_PARAMS];
	int n;
};

static int collect_kernel(const long *values, void *arg)
{
	struct kernels *k = arg;
	long v[KTUNE_SPACE_MAX_PARAMS] = { 0 };
	memcpy(v, values, (size_t)k->s->nparams * sizeof(long));
	v[k->launch_param] = -1;
	for (int i = 0; i < k->n; i++)
		if (!memcmp(k->v[i], v, sizeof(v)))
			return 0;
	k->v = realloc(k->v, (size_t)(k->n + 1) * sizeof(*k->v));
	assert_non_null(k->v);
	memcpy(k->v[k->n++], v, sizeof(v));
	return 0;
}

static void parse_space(const struct family *f, struct ktune_space *s)
{
	const struct ktune_template_file *y = ktune__template_file(f->space);
	struct ktune_err e;
	assert_non_null(y);
	if (ktune__space_parse(s, y->text, y->len, y->name, &e))
		fail_msg("%s: %s", f->space, e.msg);
	assert_string_equal(s->family, f->name);
}

/* A small deterministic generator for the sample (xorshift64*). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rng_unit(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static void add_job(struct jobs *js, const struct family *f, const struct ktune_space *s,
		    const long *v, int dtype, int aligned, int variant, int full)
{
	if (js->n == js->cap) {
		js->cap = js->cap ? 2 * js->cap : 256;
		js->v = realloc(js->v, (size_t)js->cap * sizeof(*js->v));
		assert_non_null(js->v);
	}
	struct job *j = &js->v[js->n++];
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->src = ktune__template_file(f->source);
	assert_non_null(j->src);
	j->dtype = dtype;
	j->aligned = aligned;
	j->variant = variant;
	j->full = full;
	snprintf(j->defines[j->ndefines++], 48, "-DDTYPE=%d", dtype);
	snprintf(j->defines[j->ndefines++], 48, "-DALIGNED=%d", aligned);
	for (int p = 0; p < s->nparams; p++)
		if (v[p] >= 0)
			snprintf(j->defines[j->ndefines++], 48, "-D%s=%ld", s->params[p].name, v[p]);
	for (int d = 0; d < 2; d++)
		if (f->variants[variant][d])
			snprintf(j->defines[j->ndefines++], 48, "%s", f->variants[variant][d]);
	j->vec = (int)v[ktune__space_param_index(s, "VEC")];
	j->min_warps = (int)v[ktune__space_param_index(s, "MIN_WARPS")];
}

static void compile_one(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	const char *opts[MAX_DEFINES];
	for (int d = 0; d < j->ndefines; d++)
		opts[d] = j->defines[d];
	j->rc = ktune__compile(j->src->name, j->src->text, j->src->len, opts, j->ndefines, ARCH, "",
			       &j->cubin, &j->e);
}

static void describe(const struct job *j, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%s:", j->f->source);
	for (int d = 0; d < j->ndefines && n < len; d++)
		n += (size_t)snprintf(buf + n, len - n, " %s", j->defines[d]);
}

static void test_compile_elementwise__every_kernel(void **state)
{
	static struct ktune_space spaces[NFAMILIES];
	const char *full_env = getenv("KTUNE_TEST_FULL");
	int all = full_env && *full_env && strcmp(full_env, "0");
	struct jobs js = { 0 };
	int admitted = 0, per_family[NFAMILIES] = { 0 };
	(void)state;

	for (int fi = 0; fi < NFAMILIES; fi++) {
		const struct family *f = &families[fi];
		struct kernels k = { &spaces[fi], 0, NULL, 0 };
		parse_space(f, &spaces[fi]);
		k.launch_param = ktune__space_param_index(k.s, "BLOCKS_PER_SM");
		assert_true(k.launch_param >= 0);
		long count = ktune__space_count(k.s);
		if (count < 50 || count > 800)
			fail_msg("%s: %ld configs, want a modest space (50 to 800)", f->space, count);
		ktune__space_enumerate(k.s, collect_kernel, &k);
		per_family[fi] = k.n;
		int vec_at = ktune__space_param_index(k.s, "VEC");
		int warps_at = ktune__space_param_index(k.s, "MIN_WARPS"); /* capped registers: sampled */
		for (int i = 0; i < k.n; i++)
			for (int dtype = 0; dtype < 3; dtype++)
				for (int aligned = 0; aligned < 2; aligned++)
					for (int var = 0; var < f->nvariants; var++) {
						long vec = k.v[i][vec_at];
						if (vec * dtype_size[dtype] > 16 || (!aligned && vec > 1))
							continue; /* the C prune drops it */
						admitted++;
						int full = (aligned ? var == f->heaviest && dtype != 2
								    : var == f->heaviest && dtype == 2) &&
							   k.v[i][warps_at] == 0;
						if (all || full || rng_unit() < 1.0 / 12)
							add_job(&js, f, k.s, k.v[i], dtype, aligned, var, full);
					}
		free(k.v);
	}

	double t0 = ktune__now();
	ktune__parallel_for(js.n, 0, compile_one, js.v);
	double took = ktune__now() - t0, cpu = 0, worst = 0;
	int failures = 0;
	for (int i = 0; i < js.n; i++) {
		struct job *j = &js.v[i];
		char what[512];
		describe(j, what, sizeof(what));
		if (j->rc) {
			fprintf(stderr, "FAIL %s: %s\n", what, j->e.msg);
			failures++;
			continue;
		}
		const struct ktune_resources *r = &j->cubin.res;
		if (!j->cubin.data || j->cubin.size < 4 || memcmp(j->cubin.data, "\177ELF", 4) ||
		    !memmem(j->cubin.data, j->cubin.size, j->f->entry, strlen(j->f->entry))) {
			fprintf(stderr, "FAIL %s: not a CUBIN with %s\n", what, j->f->entry);
			failures++;
		} else if (r->registers <= 0 ||
			   (!j->min_warps && (r->spill_stores || r->spill_loads || r->stack))) {
			fprintf(stderr, "FAIL %s: %d registers, spills %d + %d bytes, stack %d\n", what,
				r->registers, r->spill_stores, r->spill_loads, r->stack);
			failures++;
		}
		cpu += j->cubin.seconds;
		worst = j->cubin.seconds > worst ? j->cubin.seconds : worst;
		ktune__cubin_free(&j->cubin);
	}
	print_message("kernels per family: add %d, gelu %d, glu %d, dropout %d; %d compiles of %d "
		      "admitted for %s: %.1f s, %.3f s per compile (slowest %.3f s); %d failures\n",
		      per_family[0], per_family[1], per_family[2], per_family[3], js.n, admitted, ARCH,
		      took, js.n ? cpu / js.n : 0, worst, failures);
	for (int fi = 0; fi < NFAMILIES; fi++)
		ktune__space_free(&spaces[fi]);
	free(js.v);
	assert_int_equal(failures, 0);
	/*
	 * About 0.3 s a compile alone, 0.7 under load (CI beside other builds):
	 * the bound catches a template gone pathological, not a busy machine.
	 */
	assert_true(cpu < 2.0 * js.n);
	assert_true(worst < 5.0);
}

/* A source of our own that includes the prelude: NVRTC finds it with no include path. */
static void test_compile_elementwise__prelude_is_an_in_memory_header(void **state)
{
	static const char src[] = "#include \"prelude.cuh\"\n"
				  "extern \"C\" __global__ void uses_prelude(elem *p)\n"
				  "{\n"
				  "\tphilox4 r = philox4x32_10(0, 0, 0, 0, 0, 0);\n"
				  "\tstore_elem(p, (float)r.w[0]);\n"
				  "}\n";
	const char *opts[] = { "-DDTYPE=2" };
	struct ktune_cubin c;
	struct ktune_err e = { "" };
	(void)state;
	assert_non_null(ktune__template_file(KTUNE_PRELUDE));
	if (ktune__compile("mine.cu", src, sizeof(src) - 1, opts, 1, ARCH, "", &c, &e))
		fail_msg("%s", e.msg);
	assert_non_null(memmem(c.data, c.size, "uses_prelude", 12));
	ktune__cubin_free(&c);
}

/* What the kernels refuse at compile time comes back as NVRTC's message. */
static void test_compile_elementwise__limits_are_compile_errors(void **state)
{
	static const struct {
		const char *source, *defines[3], *message;
	} cases[] = {
		{ "add.cu", { "-DDTYPE=2", "-DVEC=8", "-DALIGNED=1" }, "at most 16 bytes" },
		{ "gelu.cu", { "-DDTYPE=3", NULL, NULL }, "DTYPE is 0 (f16), 1 (bf16) or 2 (f32)" },
		{ "glu.cu", { "-DACT=3", NULL, NULL }, "ACT is 0, 1 or 2" },
		{ "dropout.cu", { "-DVEC=3", NULL, NULL }, "VEC is 1, 2, 4 or 8" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct ktune_template_file *f = ktune__template_file(cases[i].source);
		struct ktune_cubin c;
		struct ktune_err e = { "" };
		int n = 0;
		while (n < 3 && cases[i].defines[n])
			n++;
		assert_non_null(f);
		int rc = ktune__compile(f->name, f->text, f->len, cases[i].defines, n, ARCH, "", &c, &e);
		assert_int_equal(rc, KTUNE_ERR_COMPILE);
		if (!strstr(e.msg, cases[i].message))
			fail_msg("%s: no '%s' in: %s", cases[i].source, cases[i].message, e.msg);
	}
	/* unaligned data with a wide VEC is not an error: the kernel reads element by element */
	const struct ktune_template_file *f = ktune__template_file("add.cu");
	const char *opts[] = { "-DDTYPE=2", "-DVEC=8", "-DALIGNED=0" };
	struct ktune_cubin c;
	struct ktune_err e;
	if (ktune__compile(f->name, f->text, f->len, opts, 3, ARCH, "", &c, &e))
		fail_msg("%s", e.msg);
	ktune__cubin_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile_elementwise__prelude_is_an_in_memory_header),
		cmocka_unit_test(test_compile_elementwise__limits_are_compile_errors),
		cmocka_unit_test(test_compile_elementwise__every_kernel),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
