/*
 * test-planted-gpu.c - a tuning run on the GPU over good candidates and
 * planted ones (planted-worker.c): one writes out of bounds, one spins for
 * ever, one does not compile, one computes wrong numbers.  The run must
 * finish, record crashed / timeout / compile_error / wrong, pick a good
 * winner, and skip the planted ones the next time.  Skipped without a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "tuner/candidates.h"
#include "tuner/protocol.h"
#include "tuner/tuner.h"
#include "test_tuning.h"

static char db_path[4200];

static int setup(void **state)
{
	char dir[4096];
	(void)state;
	if (test_tmp_dir("planted", dir, sizeof(dir)))
		return -1;
	snprintf(db_path, sizeof(db_path), "%s/tuned.db", dir);
	return 0;
}

static void test_planted__sweep_survives_bad_candidates(void **state)
{
	static const char *actions[] = { "oob", "spin", "compile_error", "wrong" };
	static const char *expect[] = { "crashed", "timeout", "compile_error", "wrong" };
	enum { NPLANT = 4 };
	struct ktune_key key = { "gemm", KTUNE_F16, "nt", 512, 512, 512, 1 };
	struct ktune_tune_options o = { .budget = 24, .seed = 4, .finalists = 3 };
	struct ktune_config *cfgs;
	struct ktune_tuner *t;
	struct ktune_tune_report r;
	struct ktune_err e;
	char plan[4096] = "", text[NPLANT][256];
	int n, pruned;
	const char *worker = test_program("planted-worker");
	(void)state;
	if (getenv("KTUNE_TEST_VERBOSE"))
		o.progress = stdout;

	/* learn the device, then plant on candidates of distinct kernels */
	unsetenv("KTUNE_PLANT");
	assert_int_equal(ktune__tuner_open(db_path, 0, worker, &t, &e), KTUNE_OK);
	const struct ktune_hello *dev = ktune__tuner_device(t);
	assert_int_equal(ktune__gemm_candidates(&key, dev->id.arch, dev->id.sm_count, dev->smem_optin, o.budget,
						o.seed, &cfgs, &n, &pruned, &e), KTUNE_OK);
	ktune__tuner_close(t);
	assert_int_equal(test_plant(cfgs, n, actions, NPLANT, text, plan, sizeof(plan)), NPLANT);
	setenv("KTUNE_PLANT", plan, 1);

	assert_int_equal(ktune__tuner_open(db_path, 0, worker, &t, &e), KTUNE_OK);
	dev = ktune__tuner_device(t);
	double t0 = ktune__now();
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	printf("tuned in %.1f s with %d workers; winner %s, %.1f us\n", ktune__now() - t0,
	       ktune__tuner_worker_starts(t), r.result.config, r.result.time_us);
	for (int i = 0; i < NPLANT; i++)
		assert_string_not_equal(r.result.config, text[i]);

	struct test_failures f = { .n = 0 };
	char driver[32];
	snprintf(driver, sizeof(driver), "%d.%d", dev->driver_version / 1000,
		 dev->driver_version % 1000 / 10);
	/* failures are kept per template: the plants' (mma.sync) need not be the winner's */
	for (int family = 0; family < KTUNE_GEMM_NFAMILIES; family++)
		assert_int_equal(ktune__db_failed_configs(ktune__tuner_db(t), &dev->id, &r.result.key,
							  ktune__gemm_family_hash(family), ktune__nvrtc_version(),
							  driver, test_note_failure, &f, &e), KTUNE_OK);
	for (int i = 0; i < NPLANT; i++) {
		printf("planted %-13s -> %s\n", actions[i], test_status_of(&f, text[i]));
		assert_string_equal(test_status_of(&f, text[i]), expect[i]);
	}
	assert_true(ktune__tuner_worker_starts(t) >= 3); /* the first, after oob, after spin */

	/* the winner is right on fresh inputs */
	struct ktune_check check;
	assert_int_equal(ktune__verify_result(t, &r.result, 99, &check, &e), KTUNE_OK);
	assert_true(check.pass);

	/* and next time the planted ones are not tried */
	struct ktune_tune_report again;
	if (ktune__tune_key(t, &key, &o, &again, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(again.known_bad, f.n);
	assert_int_equal(again.worker_restarts, 0);
	ktune__tuner_close(t);
	free(cfgs);
}

int main(void)
{
	int skip = gpu_test_available("test-planted-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_planted__sweep_survives_bad_candidates),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
