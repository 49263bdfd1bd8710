/*
 * test-defaults.c - `ktune export --defaults`: per key, the config that is
 * best on average over the GPUs that tuned it, relative to each GPU's best.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "db/defaults.h"
#include "test_util.h"

#define HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define C1 "BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_SIZE=8,SPLIT_K=1"
#define C2 "BLOCK_M=128,BLOCK_N=256,BLOCK_K=32,WARPS_M=2,WARPS_N=4,STAGES=3,GROUP_SIZE=8,SPLIT_K=1"
#define C3 "BLOCK_M=256,BLOCK_N=128,BLOCK_K=32,WARPS_M=4,WARPS_N=2,STAGES=3,GROUP_SIZE=8,SPLIT_K=1"

static struct ktune_key key_of(int64_t m)
{
	struct ktune_key k = { .op = "gemm", .dtype = KTUNE_F16, .variant = "nt",
			       .m = m, .n = 4096, .k = 4096, .aligned = 1 };
	return k;
}

static struct ktune_trial trial(struct ktune_key key, const char *config, const char *status,
				double time_us, const char *hash)
{
	struct ktune_trial t = { .key = key, .time_us = time_us, .err_fro = 1e-4, .err_max = 1e-3 };
	snprintf(t.family, sizeof(t.family), "gemm");
	snprintf(t.config, sizeof(t.config), "%s", config);
	snprintf(t.template_hash, sizeof(t.template_hash), "%s", hash);
	snprintf(t.status, sizeof(t.status), "%s", status);
	return t;
}

/* Stores a device's result for key (its winner config at its time) with the trials. */
static void put(struct ktune_db *db, const char *device, struct ktune_key key, const char *winner,
		double time_us, const struct ktune_trial *trials, int ntrials)
{
	struct ktune_result r = { .key = key, .time_us = time_us, .p20_us = time_us,
				  .p80_us = time_us, .tflops = 1, .cublas_us = 20, .err_fro = 1e-4,
				  .err_max = 1e-3, .candidates = ntrials, .tune_s = 1 };
	struct ktune_err e;
	snprintf(r.device.name, sizeof(r.device.name), "%s", device);
	snprintf(r.device.arch, sizeof(r.device.arch), "sm_90");
	r.device.sm_count = 132;
	snprintf(r.family, sizeof(r.family), "gemm");
	snprintf(r.config, sizeof(r.config), "%s", winner);
	snprintf(r.template_hash, sizeof(r.template_hash), HASH);
	snprintf(r.protocol, sizeof(r.protocol), "events");
	if (ktune__db_put_result(db, &r, trials, ntrials, &e))
		fail_msg("%s", e.msg);
}

struct all {
	struct ktune_result r[16];
	int n;
};

static int collect(const struct ktune_result *r, void *arg)
{
	struct all *a = arg;
	a->r[a->n++] = *r;
	return 0;
}

static void test_defaults__best_on_average_across_gpus(void **state)
{
	char dir[PATH_MAX], path[TEST_PATH_MAX], wal[TEST_PATH_MAX + 8];
	struct ktune_db *db;
	struct ktune_err e;
	struct all all = { .n = 0 };
	struct ktune_result *defs;
	long n;
	(void)state;

	assert_int_equal(test_tmp_dir("ktune-defaults", dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/t.db", dir);
	assert_int_equal(ktune__db_open(path, 1, &db, &e), 0);
	struct ktune_key k16 = key_of(16), k32 = key_of(32);

	/*
	 * GPU A: C1 10 us (its best), C2 11, C3 20, and a wrong C3 at 1 us that must not count.
	 * GPU B: C1 30, C2 12, C3 11 (its best).  Relative to each best, C2 averages
	 * (1.1 + 1.09) / 2 against C1's (1 + 2.73) / 2 and C3's (2 + 1) / 2.
	 */
	struct ktune_trial ta[] = { trial(k16, C1, "ok", 10, HASH), trial(k16, C2, "ok", 11, HASH),
				    trial(k16, C3, "ok", 20, HASH), trial(k16, C3, "wrong", 1, HASH) };
	struct ktune_trial tb[] = { trial(k16, C1, "ok", 30, HASH), trial(k16, C2, "ok", 12, HASH),
				    trial(k16, C3, "ok", 11, HASH) };
	put(db, "GPU A", k16, C1, 10, ta, 4);
	put(db, "GPU B", k16, C3, 11, tb, 3);
	/* a key only A tuned: its own winner */
	struct ktune_trial ta32[] = { trial(k32, C1, "ok", 15, HASH), trial(k32, C3, "ok", 14, HASH) };
	put(db, "GPU A", k32, C3, 14, ta32, 2);

	assert_int_equal(ktune__db_query(db, NULL, collect, &all, &e), 0);
	assert_int_equal(all.n, 3);
	assert_int_equal(ktune__db_defaults(db, all.r, all.n, &defs, &n, &e), 0);
	assert_int_equal(n, 2);

	assert_int_equal(defs[0].key.m, 16);
	assert_string_equal(defs[0].config, C2); /* neither GPU's own winner */
	assert_string_equal(defs[0].device.name, "ktune defaults (2 sm_90 GPUs)");
	assert_string_equal(defs[0].device.arch, "sm_90");
	assert_float_equal(defs[0].time_us, 11.489, 0.01); /* geometric mean of 11 and 12 */
	assert_int_equal(defs[0].candidates, 3);

	assert_int_equal(defs[1].key.m, 32);
	assert_string_equal(defs[1].config, C3);
	assert_string_equal(defs[1].device.name, "ktune defaults (1 sm_90 GPU)");
	assert_float_equal(defs[1].time_us, 14, 1e-9);
	free(defs);

	/* trials of another template source do not count */
	struct ktune_trial old[] = {
		trial(k32, C1, "ok", 1, "f123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	};
	put(db, "GPU A", k32, C3, 14, old, 1);
	all.n = 0;
	assert_int_equal(ktune__db_query(db, NULL, collect, &all, &e), 0);
	assert_int_equal(ktune__db_defaults(db, all.r, all.n, &defs, &n, &e), 0);
	assert_string_equal(defs[1].config, C3);
	free(defs);

	ktune__db_close(db);
	unlink(path);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	unlink(wal);
	snprintf(wal, sizeof(wal), "%s-shm", path);
	unlink(wal);
	rmdir(dir);
}

static void test_defaults__empty(void **state)
{
	struct ktune_result *defs = (void *)1;
	long n = 7;
	struct ktune_err e;
	(void)state;
	assert_int_equal(ktune__db_defaults(NULL, NULL, 0, &defs, &n, &e), 0);
	assert_null(defs);
	assert_int_equal(n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults__best_on_average_across_gpus),
		cmocka_unit_test(test_defaults__empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
