/*
 * test-isolation.c - the tuner's orchestration without a GPU: a fake worker
 * (fake-worker.c) plants candidates that crash the context, kill the worker,
 * hang, compute wrong numbers, fail to compile, hang NVRTC or kill it; the
 * tuner must record each with the right status, restart workers, pick a good
 * winner, and skip the failures next time (the negative cache).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "test_util.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"
#include "test_tuning.h"

static char dir[4096], db_path[4200];

static int setup(void **state)
{
	(void)state;
	if (test_tmp_dir("isolation", dir, sizeof(dir)))
		return -1;
	snprintf(db_path, sizeof(db_path), "%s/tuned.db", dir);
	setenv("KTUNE_FAKE_STATE", dir, 1);
	return 0;
}

static const char *fake_worker(void)
{
	return test_program("fake-worker");
}

static void test_isolation__planted_candidates(void **state)
{
	static const char *actions[] = { "crash", "hang", "compile_error", "wrong",
					 "compile_hang", "die_once", "die", "compile_die" };
	enum { NPLANT = sizeof(actions) / sizeof(actions[0]) };
	struct ktune_key key = { "gemm", KTUNE_F16, 'n', 't', 256, 256, 256, 1 };
	struct ktune_tune_options o = { .budget = 40, .seed = 9, .finalists = 4, .jobs = 2,
					.timeout_s = 0.5, .compile_timeout_s = 1.5, .progress = NULL };
	if (getenv("KTUNE_TEST_VERBOSE"))
		o.progress = stderr;
	struct ktune_gemm_config *cfgs;
	struct ktune_tuner *t;
	struct ktune_tune_report r;
	struct ktune_err e;
	char plan[4096] = "", text[NPLANT][256];
	int n, pruned;
	(void)state;

	/* plant on candidates of distinct kernels, so a compile action hits one of them */
	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", 132, 232448, o.budget, o.seed, &cfgs, &n,
						&pruned, &e), KTUNE_OK);
	assert_int_equal(test_plant(cfgs, n, actions, NPLANT, text, plan, sizeof(plan)), NPLANT);
	setenv("KTUNE_FAKE_PLAN", plan, 1);

	assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
	double t0 = ktune__now();
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	double took = ktune__now() - t0;
	assert_true(r.ok > 0);
	for (int i = 0; i < NPLANT; i++)
		assert_string_not_equal(r.result.config, text[i]);

	struct test_failures f = { .n = 0 };
	char driver[] = "13.0";
	/* the planted configs are the first of the list: mma.sync's, stored under gemm.cu's hash */
	struct ktune_gemm_config last;
	assert_int_equal(ktune__gemm_config_parse(text[NPLANT - 1], &last, &e), KTUNE_OK);
	assert_int_equal(last.family, KTUNE_GEMM_MMA);
	assert_int_equal(ktune__db_failed_configs(ktune__tuner_db(t), &ktune__tuner_device(t)->id,
						  &r.result.key, ktune__gemm_family_hash(KTUNE_GEMM_MMA),
						  ktune__nvrtc_version(), driver, test_note_failure, &f, &e), KTUNE_OK);
	assert_string_equal(test_status_of(&f, text[0]), "crashed");
	assert_string_equal(test_status_of(&f, text[1]), "timeout");
	assert_string_equal(test_status_of(&f, text[2]), "compile_error");
	assert_string_equal(test_status_of(&f, text[3]), "wrong");
	assert_string_equal(test_status_of(&f, text[4]), "timeout");
	assert_string_equal(test_status_of(&f, text[5]), "ok"); /* died once, fine the second time */
	assert_string_equal(test_status_of(&f, text[6]), "crashed");
	assert_string_equal(test_status_of(&f, text[7]), "compile_error");
	/* a worker for the start, and fresh ones after: crash, hang, compile hang, 2 x die, die_once,
	 * 2 x compile_die */
	assert_true(ktune__tuner_worker_starts(t) >= 9);
	/* the deadlines held: nothing waited much longer than its timeout */
	assert_true(took < 30);

	/* the negative cache: next time the failed ones are not tried */
	struct ktune_tune_report again;
	if (ktune__tune_key(t, &key, &o, &again, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(again.known_bad, f.n);
	assert_true(f.n >= NPLANT - 1);
	assert_int_equal(again.worker_restarts, 0);
	assert_int_equal(again.result.candidates, r.result.candidates - f.n);
	ktune__tuner_close(t);
	free(cfgs);
	unsetenv("KTUNE_FAKE_PLAN");
}

static void test_isolation__missing_worker_is_a_clear_error(void **state)
{
	struct ktune_tuner *t;
	struct ktune_err e;
	(void)state;
	assert_int_not_equal(ktune__tuner_open(db_path, 0, "/nonexistent/ktune", &t, &e), KTUNE_OK);
	assert_null(t);
	assert_non_null(strstr(e.msg, "/nonexistent/ktune"));
}

static void test_isolation__run_timeout_is_derived_from_the_key(void **state)
{
	struct ktune_key small = { "gemm", KTUNE_F16, 'n', 't', 64, 64, 64, 1 };
	struct ktune_key big = { "gemm", KTUNE_F16, 'n', 'n', 65536, 65536, 65536, 1 };
	struct ktune_key mid = { "gemm", KTUNE_F16, 'n', 'n', 16384, 16384, 16384, 1 };
	(void)state;
	assert_true(ktune__run_timeout(&small, 0) == 2);  /* the floor */
	assert_true(ktune__run_timeout(&big, 0) == 60);   /* the cap */
	double m = ktune__run_timeout(&mid, 0);           /* 1000 x 11 ms */
	assert_true(m > 10 && m < 12);
	assert_true(ktune__run_timeout(&big, 0.25) == 0.25); /* --timeout wins */
}

/* The fake GPU's next workers: `var` (KTUNE_FAKE_DRIFT or _WAVE, fake-worker.c) set to `value`, NULL: unset. */
static void fake_gpu(const char *var, const char *value)
{
	if (value)
		setenv(var, value, 1);
	else
		unsetenv(var);
}

/* Tunes key on the fake GPU with `var` set to `value` (fake_gpu). */
static void tune_fake(const struct ktune_key *key, const struct ktune_tune_options *o, const char *var,
		      const char *value, struct ktune_tune_report *r)
{
	struct ktune_tuner *t;
	struct ktune_err e;
	fake_gpu(var, value);
	assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
	if (ktune__tune_key(t, key, o, r, &e))
		fail_msg("%s", e.msg);
	ktune__tuner_close(t);
	fake_gpu(var, NULL);
}

/*
 * The ratio to cuBLAS does not depend on when each side ran: with every
 * measurement 5% slower than the last (a heating GPU), the winner and cuBLAS
 * come out in the same ratio as on a steady one.
 */
static double tuned_ratio(const char *drift)
{
	struct ktune_key key = { "gemm", KTUNE_BF16, 'n', 'n', 512, 512, 512, 1 };
	struct ktune_tune_options o = { .budget = 24, .seed = 3, .finalists = 4, .jobs = 2, .timeout_s = 2,
					.compile_timeout_s = 5, .progress = NULL };
	struct ktune_tune_report r;
	tune_fake(&key, &o, "KTUNE_FAKE_DRIFT", drift, &r);
	assert_true(r.has_cublas);
	if (drift)
		assert_true(r.result.cublas_us > 20); /* it did heat up */
	return r.result.cublas_us / r.result.time_us;
}

static void test_isolation__ratio_survives_a_heating_gpu(void **state)
{
	(void)state;
	double steady = tuned_ratio(NULL), heating = tuned_ratio("0.05");
	if (fabs(heating / steady - 1) > 1e-9)
		fail_msg("ratio %.6f on a steady GPU, %.6f on a heating one", steady, heating);
}

/* 4096^3 on the fake GPU with `var` set to `value` wins with the config it wins with on a steady one. */
static void same_winner_as_steady(const char *var, const char *value)
{
	struct ktune_key key = { "gemm", KTUNE_F16, 'n', 'n', 4096, 4096, 4096, 1 };
	struct ktune_tune_options o = { .budget = 48, .seed = 11, .finalists = 4, .jobs = 2, .timeout_s = 2,
					.compile_timeout_s = 5, .progress = NULL };
	struct ktune_tune_report steady, disturbed;
	tune_fake(&key, &o, var, NULL, &steady);
	tune_fake(&key, &o, var, value, &disturbed);
	assert_string_equal(disturbed.result.config, steady.result.config);
}

/*
 * A GPU that cools (or heats) while the finalists are measured one after
 * another favours the ones measured last (or first); measured in order and
 * then in reverse, they rank as on a steady GPU.  With every measurement 2%
 * faster than the last, one run each would crown the fake's 128x256 (3%
 * slower than its 192x192 here).
 */
static void test_isolation__winner_survives_a_cooling_gpu(void **state)
{
	(void)state;
	same_winner_as_steady("KTUNE_FAKE_DRIFT", "-0.02");
}

/*
 * A GPU whose speed swings rather than drifts: measured in order and in
 * reverse, the finalists still see different states, and the raw times
 * crown the wrong one; the runoff, which ranks the two best tiles by their
 * ratios to cuBLAS measured in turns, each in one state, puts the steady
 * GPU's winner first again.  With a swing of 10% over 24 measurements, the
 * raw times alone crown the fake's 128x256 (3% slower than its 192x192).
 */
static void test_isolation__runoff_survives_a_swinging_gpu(void **state)
{
	(void)state;
	same_winner_as_steady("KTUNE_FAKE_WAVE", "-0.1,24");
}

/*
 * ktune bench: a stored result timed again comes out in the ratio it was
 * stored with (the fake's times are exact), also on a heating GPU, and a
 * stored config that now computes wrong numbers, crashes or no longer
 * compiles says so in the report rather than failing the call.
 */
static void test_isolation__bench_times_a_stored_result_again(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_F16, 'n', 'n', 384, 256, 512, 1 };
	struct ktune_tune_options o = { .budget = 16, .seed = 5, .finalists = 3, .jobs = 2, .timeout_s = 2,
					.compile_timeout_s = 5, .progress = NULL };
	struct ktune_tuner *t;
	struct ktune_tune_report r;
	struct ktune_bench_report b;
	struct ktune_err e;
	char plan[512];
	(void)state;

	assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	const double stored = r.result.cublas_us / r.result.time_us;
	ktune__tuner_close(t);

	static const char *drifts[] = { NULL, "0.05" };
	for (int d = 0; d < 2; d++) {
		fake_gpu("KTUNE_FAKE_DRIFT", drifts[d]);
		assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
		assert_int_equal(ktune__bench_result(t, &r.result, 7, &b, &e), KTUNE_OK);
		assert_string_equal(b.status, KTUNE_TRIAL_OK);
		assert_true(b.has_cublas);
		if (fabs(b.cublas_us / b.time_us / stored - 1) > 1e-9)
			fail_msg("drift %s: ratio %.6f, stored %.6f", drifts[d] ? drifts[d] : "0",
				 b.cublas_us / b.time_us, stored);
		ktune__tuner_close(t);
		fake_gpu("KTUNE_FAKE_DRIFT", NULL);
	}

	static const struct {
		const char *action, *status;
	} planted[] = {
		{ "wrong", KTUNE_TRIAL_WRONG },
		{ "crash", KTUNE_TRIAL_CRASHED },
		{ "compile_error", KTUNE_TRIAL_COMPILE_ERROR },
	};
	for (size_t i = 0; i < sizeof(planted) / sizeof(planted[0]); i++) {
		snprintf(plan, sizeof(plan), "%s=%s", planted[i].action, r.result.config);
		setenv("KTUNE_FAKE_PLAN", plan, 1);
		assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
		assert_int_equal(ktune__bench_result(t, &r.result, 7, &b, &e), KTUNE_OK);
		assert_string_equal(b.status, planted[i].status);
		assert_true(b.message[0] != 0);
		assert_true(b.time_us == 0 && b.cublas_us == 0);
		ktune__tuner_close(t);
		unsetenv("KTUNE_FAKE_PLAN");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isolation__planted_candidates),
		cmocka_unit_test(test_isolation__missing_worker_is_a_clear_error),
		cmocka_unit_test(test_isolation__run_timeout_is_derived_from_the_key),
		cmocka_unit_test(test_isolation__ratio_survives_a_heating_gpu),
		cmocka_unit_test(test_isolation__winner_survives_a_cooling_gpu),
		cmocka_unit_test(test_isolation__runoff_survives_a_swinging_gpu),
		cmocka_unit_test(test_isolation__bench_times_a_stored_result_again),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
