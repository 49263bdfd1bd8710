/*
 * test-tune-model.c - the tune loop in the performance model's order
 * (ktune tune's --top N), without a GPU: the fake worker (fake-worker.c)
 * compiles instantly and times configs by a made-up formula, so what is
 * checked is the orchestration: which candidates are compiled and
 * screened, in which order, where the bound stops, what is stored; and
 * that the tuner lays out the problem in the key's alignment class.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <string.h>

#include "test_util.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"

static char dir[4096];

static int setup(void **state)
{
	(void)state;
	return test_tmp_dir("tune-model", dir, sizeof(dir)) ? -1 : 0;
}

static const struct ktune_gemm_device fake_h100 = { "sm_90", 132, 232448, 0 };

/* A fresh database for each test. */
static struct ktune_tuner *open_tuner(const char *name)
{
	struct ktune_tuner *t;
	struct ktune_err e;
	char path[4300];
	snprintf(path, sizeof(path), "%s/%s.db", dir, name);
	if (ktune__tuner_open(path, 0, test_program("fake-worker"), &t, &e))
		fail_msg("%s", e.msg);
	return t;
}

/* The candidates of cfgs[0..n) whose kernel is one of the first `kernels` distinct kernels in it. */
static int of_first_kernels(const struct ktune_config *cfgs, int n, int kernels)
{
	struct ktune_config first[64];
	int nfirst = 0, count = 0;
	for (int i = 0; i < n && nfirst < kernels && nfirst < 64; i++) {
		int seen = 0;
		for (int j = 0; j < nfirst; j++)
			seen |= ktune__gemm_same_kernel(&first[j], &cfgs[i]);
		if (!seen)
			first[nfirst++] = cfgs[i];
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < nfirst; j++)
			if (ktune__gemm_same_kernel(&first[j], &cfgs[i])) {
				count++;
				break;
			}
	return count;
}

static long stored_trials(struct ktune_tuner *t)
{
	long results, trials;
	struct ktune_err e;
	assert_int_equal(ktune__db_count(ktune__tuner_db(t), &results, &trials, &e), KTUNE_OK);
	return trials;
}

/* What the newest tuning of a key stored of its candidates: tried, and left untried by the cut or the bound. */
struct fates {
	long long id;
	int tried, cut, bound, late, untried_first; /* untried_first: every untried trial after every tried one */
};

static int newest_tune(const struct ktune_tuning *tu, void *arg)
{
	struct fates *f = arg;
	if (!f->id && !strcmp(tu->kind, "tune"))
		f->id = tu->id;
	return 0;
}

static int count_fate(const struct ktune_trial *tr, void *arg)
{
	struct fates *f = arg;
	if (!ktune__trial_untried(tr)) {
		f->untried_first |= f->cut + f->bound + f->late > 0;
		f->tried++;
	} else if (!strncmp(tr->message, KTUNE_UNTRIED_TOP, strlen(KTUNE_UNTRIED_TOP))) {
		assert_string_equal(tr->status, KTUNE_TRIAL_PRUNED);
		assert_non_null(strstr(tr->message, "estimate"));
		f->cut++;
	} else if (!strncmp(tr->message, KTUNE_UNTRIED_DEADLINE, strlen(KTUNE_UNTRIED_DEADLINE))) {
		assert_string_equal(tr->status, KTUNE_TRIAL_PRUNED);
		assert_non_null(strstr(tr->message, "the last batch took"));
		f->late++;
	} else {
		assert_string_equal(tr->status, KTUNE_TRIAL_PRUNED);
		assert_non_null(strstr(tr->message, "best screen time"));
		f->bound++;
	}
	return 0;
}

static struct fates stored_fates(struct ktune_tuner *t, const struct ktune_key *key)
{
	struct fates f = { 0 };
	struct ktune_err e;
	struct ktune_device_info info;
	ktune__tuner_device_info(t, &info);
	const struct ktune_device_id *dev = &info.id;
	assert_int_equal(ktune__db_tunings(ktune__tuner_db(t), dev, key, newest_tune, &f, &e), KTUNE_OK);
	assert_true(f.id > 0);
	assert_int_equal(ktune__db_trials(ktune__tuner_db(t), dev, key, f.id, count_fate, &f, &e), KTUNE_OK);
	assert_false(f.untried_first);
	return f;
}

/*
 * The fake GPU runs everything in tens of microseconds, far below what the
 * model's bound allows a 4096^3 GEMM (over 100 us): once the first batch is
 * screened, nothing else can win, and nothing else is compiled or run.
 */
static void test_tune_model__bound_stops_after_what_cannot_be_beaten(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_BF16, "nt", 4096, 4096, 4096, 1 };
	struct ktune_tune_options o = { .seed = 1, .top = 8, .jobs = 3, .finalists = 2 };
	struct ktune_tune_report r;
	struct ktune_config *cfgs;
	struct ktune_err e;
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", 132, 232448, 0, 1, &cfgs, &n, &pruned, &e), 0);
	int kept = ktune__gemm_model_order(&key, &fake_h100, cfgs, n, o.top, NULL);
	struct ktune_tuner *t = open_tuner("bound");
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	/* the first batch: the model's 3 likeliest kernels, each with its GROUP_SIZE and SPLIT_K variants */
	int first = of_first_kernels(cfgs, kept, o.jobs);
	assert_int_equal(r.result.candidates, first);
	assert_int_equal(r.untried, n - first);
	assert_int_equal(r.ok, first);
	/* every candidate is stored, the untried with why (for explain): the cut's and the bound's */
	assert_int_equal(stored_trials(t), n);
	struct fates f = stored_fates(t, &key);
	assert_int_equal(f.tried, first);
	assert_int_equal(f.cut, n - kept);
	assert_int_equal(f.bound, kept - first);
	assert_true(f.bound > 0);
	/* the winner is one of them */
	struct ktune_config win;
	assert_int_equal(ktune__gemm_config_parse(r.result.config, &win, &e), KTUNE_OK);
	int found = 0, kernels = 0;
	for (int i = 0; i < kept && kernels <= o.jobs; i++) {
		int new_kernel = 1;
		for (int j = 0; j < i; j++)
			new_kernel &= !ktune__gemm_same_kernel(&cfgs[j], &cfgs[i]);
		kernels += new_kernel;
		if (kernels <= o.jobs)
			found |= ktune__gemm_same_kernel(&cfgs[i], &win);
	}
	assert_true(found);
	ktune__tuner_close(t);
	free(cfgs);
}

/*
 * A key small enough that the fake GPU's times are above every bound: the
 * whole cut is screened, batch after batch, and only the cut.
 */
static void test_tune_model__cut_is_screened_whole(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_F16, "nn", 64, 64, 64, 1 };
	struct ktune_tune_options o = { .seed = 1, .top = 6, .jobs = 4, .finalists = 2 };
	struct ktune_tune_report r;
	struct ktune_config *cfgs;
	struct ktune_gemm_estimate *est;
	struct ktune_err e;
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", 132, 232448, 0, 1, &cfgs, &n, &pruned, &e), 0);
	est = calloc((size_t)n, sizeof(*est));
	assert_non_null(est);
	int kept = ktune__gemm_model_order(&key, &fake_h100, cfgs, n, o.top, est);
	assert_true(kept < n);
	for (int i = 0; i < kept; i++)
		assert_true(est[i].bound_us < 5); /* the fake GPU's fastest is about 8 us here */
	struct ktune_tuner *t = open_tuner("cut");
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.result.candidates, kept);
	assert_int_equal(r.untried, n - kept);
	assert_int_equal(stored_trials(t), n);
	struct fates f = stored_fates(t, &key);
	assert_int_equal(f.tried, kept);
	assert_int_equal(f.cut, n - kept);
	assert_int_equal(f.bound, 0);

	/* --top 0: every candidate, as a sweep does by default */
	o.top = 0;
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.result.candidates, n);
	assert_int_equal(r.untried, 0);
	f = stored_fates(t, &key);
	assert_int_equal(f.tried, n);
	assert_int_equal(f.cut + f.bound, 0);
	ktune__tuner_close(t);
	free(est);
	free(cfgs);
}

/*
 * The deadline: once the time spent and the last batch's would pass it, no
 * batch starts; the rest of the cut is stored untried with the reason.
 * The first batch always runs (a deadline of a microsecond), and no
 * deadline (0) screens the whole cut.
 */
static void test_tune_model__deadline_stops_between_batches(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_F16, "nn", 64, 64, 64, 1 };
	struct ktune_tune_options o = { .seed = 1, .top = 6, .jobs = 4, .finalists = 2, .deadline_s = 1e-6 };
	struct ktune_tune_report r;
	struct ktune_config *cfgs;
	struct ktune_err e;
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", 132, 232448, 0, 1, &cfgs, &n, &pruned, &e), 0);
	int kept = ktune__gemm_model_order(&key, &fake_h100, cfgs, n, o.top, NULL);
	int first = of_first_kernels(cfgs, kept, o.jobs);
	assert_true(first < kept);
	struct ktune_tuner *t = open_tuner("deadline");
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.result.candidates, first);
	assert_int_equal(r.untried, n - first);
	struct fates f = stored_fates(t, &key);
	assert_int_equal(f.tried, first);
	assert_int_equal(f.cut, n - kept);
	assert_int_equal(f.late, kept - first);
	assert_int_equal(f.bound, 0);

	o.deadline_s = 0;
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.result.candidates, kept);
	f = stored_fates(t, &key);
	assert_int_equal(f.late, 0);
	ktune__tuner_close(t);
	free(cfgs);
}

/*
 * The cut keeps the model's pick: a config the fake GPU makes fastest of
 * all, but that the model ranks last, is never tried under --top, and wins
 * under --top 0.
 */
static void test_tune_model__cut_leaves_what_the_model_ranks_low(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_F16, "nn", 64, 64, 64, 1 };
	struct ktune_tune_options o = { .seed = 1, .top = 4, .jobs = 4, .finalists = 2 };
	struct ktune_tune_report r;
	struct ktune_config *cfgs;
	struct ktune_err e;
	char last[256], plan[400];
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", 132, 232448, 0, 1, &cfgs, &n, &pruned, &e), 0);
	int kept = ktune__gemm_model_order(&key, &fake_h100, cfgs, n, 0, NULL);
	assert_int_equal(kept, n);
	ktune__gemm_config_format(&cfgs[n - 1], last, sizeof(last));
	snprintf(plan, sizeof(plan), "%s@64@0.01", last); /* a hundred times faster than it would be */
	setenv("KTUNE_FAKE_FASTER", plan, 1);
	struct ktune_tuner *t = open_tuner("low");
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_string_not_equal(r.result.config, last);
	o.top = 0;
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_string_equal(r.result.config, last);
	unsetenv("KTUNE_FAKE_FASTER");
	ktune__tuner_close(t);
	free(cfgs);
}

/* The tuner's problem is in the key's alignment class, whatever its sizes. */
static void test_tune_model__problem_in_the_keys_class(void **state)
{
	static const struct ktune_key keys[] = {
		{ "gemm", KTUNE_F16, "nt", 33, 100, 200, 1 }, /* odd rows, padded to multiples of 8 */
		{ "gemm", KTUNE_F16, "nt", 33, 100, 200, 0 }, /* odd rows as they are */
		{ "gemm", KTUNE_F16, "tn", 64, 64, 64, 0 },   /* aligned rows, pointers one element off */
		{ "gemm", KTUNE_F16, "tn", 64, 64, 64, 1 },
	};
	struct ktune_tune_options o = { .seed = 1, .top = 2, .jobs = 2, .finalists = 1 };
	struct ktune_tune_report r;
	struct ktune_err e;
	(void)state;

	struct ktune_tuner *t = open_tuner("class");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (ktune__tune_key(t, &keys[i], &o, &r, &e))
			fail_msg("key %zu: %s", i, e.msg);
		assert_int_equal(r.result.key.aligned, keys[i].aligned);
		struct ktune_config cfg;
		assert_int_equal(ktune__gemm_config_parse(r.result.config, &cfg, &e), KTUNE_OK);
		if (!keys[i].aligned)
			assert_int_equal(cfg.family, KTUNE_GEMM_MMA);
	}
	ktune__tuner_close(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tune_model__bound_stops_after_what_cannot_be_beaten),
		cmocka_unit_test(test_tune_model__cut_is_screened_whole),
		cmocka_unit_test(test_tune_model__deadline_stops_between_batches),
		cmocka_unit_test(test_tune_model__cut_leaves_what_the_model_ranks_low),
		cmocka_unit_test(test_tune_model__problem_in_the_keys_class),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
