/*
 * test-warm.c - a cold start without NVRTC, without a GPU (NVRTC needs
 * none): warming a device's tuned entries compiles each distinct kernel
 * once into the cubin cache, a second warm compiles nothing, a filter
 * narrows it, the background warm of ktune_warm finishes (and is stopped
 * by ktune_close), and a cache that would not be used is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ops/gemm.h"
#include "ops/op.h"
#include "runtime/device.h"
#include "runtime/warm.h"
#include "test_util.h"

/* An arch without shipped tuning: only the database's entries are warmed. */
static const struct ktune_device_id a100 = { "Test A100", "sm_80", 108 };
static char dir[4096], db_path[4200], cache[4200];

static struct ktune_result result(struct ktune_key key, const struct ktune_config *cfg)
{
	const struct ktune_op *op = ktune__op_of(&key);
	struct ktune_result r = { .key = key, .device = a100, .time_us = 10, .p20_us = 10, .p80_us = 10,
				  .tflops = 1, .cublas_us = 11, .candidates = 1, .tune_s = 1 };
	snprintf(r.family, sizeof(r.family), "%s", op->families[cfg->family].name);
	snprintf(r.template_hash, sizeof(r.template_hash), "%s", ktune__result_hash(op, cfg->family));
	if (ktune__op_is_gemm(op))
		ktune__gemm_config_format(cfg, r.config, sizeof(r.config));
	else
		ktune__op_config_format(op, cfg, r.config, sizeof(r.config));
	snprintf(r.nvrtc_version, sizeof(r.nvrtc_version), "13.0");
	snprintf(r.driver_version, sizeof(r.driver_version), "13.0");
	snprintf(r.ktune_version, sizeof(r.ktune_version), "%s", ktune_version());
	snprintf(r.protocol, sizeof(r.protocol), "test");
	return r;
}

/* Three tuned keys, of which two GEMMs share one kernel (they differ in GROUP_SIZE, a kernel argument). */
static int setup(void **state)
{
	struct ktune_key g1 = { "gemm", KTUNE_F16, "nt", 512, 512, 512, 1 }, g2 = g1;
	struct ktune_key gelu = { "gelu", KTUNE_BF16, "tanh,fwd", 1 << 20, 0, 0, 1 };
	struct ktune_db *db;
	struct ktune_err e;
	(void)state;

	if (test_tmp_dir("warm", dir, sizeof(dir)))
		return -1;
	snprintf(db_path, sizeof(db_path), "%s/tuned.db", dir);
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	setenv("XDG_CACHE_HOME", cache, 1);
	g2.m = 1024;
	struct ktune_config c1 = ktune__gemm_default_config(&g1, a100.sm_count), c2 = c1;
	c2.group_size = c1.group_size == 1 ? 8 : 1;
	struct ktune_config c3 = ktune__op_find("gelu")->default_config(&gelu, a100.sm_count);
	struct ktune_result rs[3] = { result(g1, &c1), result(g2, &c2), result(gelu, &c3) };
	if (ktune__db_open(db_path, 1, &db, &e))
		return -1;
	for (int i = 0; i < 3; i++)
		if (ktune__db_put_result(db, &rs[i], NULL, 0, &e)) {
			fprintf(stderr, "%s\n", e.msg);
			return -1;
		}
	ktune__db_close(db);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_remove_tree(dir);
	return 0;
}

static ktune_ctx *offline(void)
{
	ktune_ctx *ctx;
	struct ktune_err e;
	if (ktune__ctx_offline(&a100, ktune__arch_smem_optin("sm_80"), db_path, &ctx, &e))
		fail_msg("%s", e.msg);
	return ctx;
}

static void test_warm__compiles_each_kernel_once_then_nothing(void **state)
{
	struct ktune_warm_report r;
	struct ktune_err e;
	(void)state;

	ktune_ctx *ctx = offline();
	if (ktune__warm(ctx, NULL, 2, NULL, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.keys, 3);
	assert_int_equal(r.kernels, 2);
	assert_int_equal(r.compiled, 2);
	assert_int_equal(r.cached, 0);
	assert_int_equal(r.failed, 0);
	assert_true(r.compile_seconds > 0);
	assert_non_null(strstr(r.cache_dir, cache));

	/* a second warm: all in the cache, no NVRTC */
	if (ktune__warm(ctx, NULL, 2, NULL, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.kernels, 2);
	assert_int_equal(r.compiled, 0);
	assert_int_equal(r.cached, 2);
	assert_true(r.compile_seconds == 0);

	/* a filter: only gelu's key */
	struct ktune_filter f = { .op = "gelu" };
	if (ktune__warm(ctx, &f, 1, NULL, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.keys, 1);
	assert_int_equal(r.kernels, 1);
	assert_int_equal(r.cached, 1);
	ktune_close(ctx);
}

/* ktune_warm on the context, in the background: done, and said so by ktune_get_stats. */
static void test_warm__in_the_background(void **state)
{
	ktune_stats s;
	(void)state;

	ktune_ctx *ctx = offline();
	assert_int_equal(ktune_warm(ctx, 0), KTUNE_OK);
	assert_int_equal(ktune_warm(ctx, 0), KTUNE_OK); /* one is under way: nothing more */
	for (int i = 0; i < 600; i++) {
		assert_int_equal(ktune_get_stats(ctx, &s, sizeof(s)), KTUNE_OK);
		if (s.warm_state == 2)
			break;
		usleep(100000);
	}
	assert_int_equal(s.warm_state, 2);
	assert_int_equal(s.warm_compiled + s.warm_cached, 2);
	assert_int_equal(s.warm_failed, 0);
	assert_int_equal(s.nvrtc_compiles, 0); /* no call compiled anything */
	/* waiting for it: the same */
	assert_int_equal(ktune_warm(ctx, 1), KTUNE_OK);
	assert_int_equal(ktune_get_stats(ctx, &s, sizeof(s)), KTUNE_OK);
	assert_int_equal(s.warm_cached, 2);
	/* an older caller's shorter struct gets its fields only */
	ktune_stats small;
	memset(&small, 0x5a, sizeof(small));
	assert_int_equal(ktune_get_stats(ctx, &small, offsetof(ktune_stats, warm_state)), KTUNE_OK);
	assert_int_equal(small.cache_loads, 0);
	assert_int_equal(small.warm_state, 0x5a5a5a5a);
	ktune_close(ctx);

	/* closed while warming into a cold cache: stopped and waited for, nothing left running */
	char cold[4300];
	snprintf(cold, sizeof(cold), "%s/cold", dir);
	setenv("XDG_CACHE_HOME", cold, 1);
	ctx = offline();
	assert_int_equal(ktune_warm(ctx, 0), KTUNE_OK);
	ktune_close(ctx);
	setenv("XDG_CACHE_HOME", cache, 1);
}

static void test_warm__refuses_a_cache_it_would_not_use(void **state)
{
	struct ktune_warm_report r;
	struct ktune_err e;
	char open_dir[4300];
	(void)state;

	/* a cubin folder anyone may write to is never read: warming it would be for nothing */
	snprintf(open_dir, sizeof(open_dir), "%s/open/ktune/cubin", dir);
	assert_int_equal(ktune__mkdirs(open_dir, &e), KTUNE_OK);
	assert_int_equal(chmod(open_dir, 0777), 0);
	snprintf(open_dir, sizeof(open_dir), "%s/open", dir);
	setenv("XDG_CACHE_HOME", open_dir, 1);
	ktune_ctx *ctx = offline();
	assert_int_equal(ktune__warm(ctx, NULL, 1, NULL, &r, &e), KTUNE_ERR_UNSUPPORTED);
	assert_non_null(strstr(e.msg, "is not used"));
	assert_int_equal(ktune_warm(ctx, 1), KTUNE_ERR_UNSUPPORTED);
	ktune_close(ctx);
	setenv("XDG_CACHE_HOME", cache, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warm__compiles_each_kernel_once_then_nothing),
		cmocka_unit_test(test_warm__in_the_background),
		cmocka_unit_test(test_warm__refuses_a_cache_it_would_not_use),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
