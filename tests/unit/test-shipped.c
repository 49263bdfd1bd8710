/*
 * test-shipped.c - the tuning files shipped inside libktune (db/ARCH/NAME.yaml)
 * parse, belong to their arch, and were tuned with the current template.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "db/share.h"
#include "search/spec.h"
#include "templates.h"

static void test_shipped__files_parse_and_are_current(void **state)
{
	int files = 0;
	(void)state;
	for (const struct ktune_template_file *f = ktune__shipped_files; f->name; f++) {
		struct ktune_share share;
		struct ktune_err e;
		const char *slash = strchr(f->name, '/');
		files++;
		assert_non_null(slash);
		if (ktune__share_parse(f->text, f->len, f->name, &share, &e))
			fail_msg("%s", e.msg);
		assert_true(share.count > 0);
		if (share.nstale)
			fail_msg("%s: %ld of %ld entries were tuned with another gemm.cu; make the "
				 "file again (db/sm_90/README.md)", f->name, share.nstale, share.count);
		for (long i = 0; i < share.count; i++)
			if (strncmp(share.entries[i].device.arch, f->name, (size_t)(slash - f->name)))
				fail_msg("%s: entry %ld is for %s", f->name, i, share.entries[i].device.arch);
		ktune__share_free(&share);
	}
	assert_true(files >= 1);
}

/* Whether `op` is one of the comma-separated names in `ops`. */
static int listed(const char *ops, const char *op)
{
	size_t n = strlen(op);
	for (const char *p = ops; (p = strstr(p, op)); p += n)
		if ((p == ops || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return 1;
	return 0;
}

/*
 * Shipped file `name` holds every key of the built-in default suite of the
 * ops listed in `ops` ("gemm,add"), each once, and nothing else, all tuned
 * on `gpu`.  An op joins a file's list when a sweep on that GPU has tuned
 * it and the file was exported again.
 */
static void covers_the_default_suite(const char *name, const char *gpu, const char *ops)
{
	const struct ktune_template_file *f;
	struct ktune_share share;
	struct ktune_spec suite;
	struct ktune_err e;
	long want = 0;
	for (f = ktune__shipped_files; f->name && strcmp(f->name, name); f++)
		;
	if (!f->name)
		fail_msg("%s is not shipped", name);
	assert_int_equal(ktune__share_parse(f->text, f->len, f->name, &share, &e), 0);
	assert_int_equal(ktune__spec_default(&suite, &e), 0);
	for (int k = 0; k < suite.nkeys; k++) {
		int found = 0;
		if (!listed(ops, suite.keys[k].op))
			continue;
		want++;
		for (long i = 0; i < share.count; i++)
			found += ktune__key_same(&share.entries[i].key, &suite.keys[k]);
		if (found != 1) {
			char text[128];
			ktune__key_format(&suite.keys[k], text, sizeof(text));
			fail_msg("%s: %d entries for %s", name, found, text);
		}
	}
	assert_int_equal(share.count, want);
	for (long i = 0; i < share.count; i++)
		assert_string_equal(share.entries[i].device.name, gpu);
	ktune__spec_free(&suite);
	ktune__share_free(&share);
}

/*
 * The H100's file: the suite's GEMM keys, the elementwise ops', the
 * row-wise ops' and attention's (96 + 42 + 38 + 24).
 */
static void test_shipped__h100_covers_the_default_suite(void **state)
{
	(void)state;
	covers_the_default_suite("sm_90/h100.yaml", "NVIDIA H100 80GB HBM3", "gemm,add,gelu,glu,dropout,softmax,rmsnorm,layernorm,cross_entropy,attention");
}

/*
 * An H200 of its own, the whole suite (96 + 42 + 38 + 24 + 57: gemm_quant
 * too): the runtime prefers the file of the GPU it runs on.
 */
static void test_shipped__h200_covers_the_default_suite(void **state)
{
	(void)state;
	covers_the_default_suite("sm_90/h200.yaml", "NVIDIA H200",
				 "gemm,add,gelu,glu,dropout,softmax,rmsnorm,layernorm,cross_entropy,attention,gemm_quant");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shipped__files_parse_and_are_current),
		cmocka_unit_test(test_shipped__h100_covers_the_default_suite),
		cmocka_unit_test(test_shipped__h200_covers_the_default_suite),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
