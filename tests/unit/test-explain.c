/*
 * test-explain.c - what ktune explain gathers, without a GPU: a key tuned
 * on the fake worker (fake-worker.c) with planted failures shows each
 * candidate's fate (compile error, crash, timeout, wrong by how much), the
 * finalists' measurements, the turns and the decisions; the pruning
 * recomputed adds up; dispatch says where its chain stops for a tuned, a
 * shipped and an untuned key; a recorded miss shows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_tuning.h"
#include "test_util.h"
#include "ops/op.h"
#include "tuner/candidates.h"
#include "tuner/explain.h"
#include "tuner/tuner.h"

static char dir[4096], db_path[4200];

/* The fake worker's GPU, as the database holds it (fake-worker.c). */
static const struct ktune_device_info fake = { { "Fake H100 (no GPU)", "sm_90", 132 }, 0, 232448, 50 << 20, 13000 };

static int setup(void **state)
{
	(void)state;
	if (test_tmp_dir("explain", dir, sizeof(dir)))
		return -1;
	snprintf(db_path, sizeof(db_path), "%s/tuned.db", dir);
	setenv("KTUNE_FAKE_STATE", dir, 1);
	/* the default cache of the offline context: inside the scratch */
	char cache[4300];
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	setenv("XDG_CACHE_HOME", cache, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	test_remove_tree(dir);
	return 0;
}

static const struct ktune_trial *trial_of(const struct ktune_explain *x, const char *config)
{
	for (int i = 0; i < x->ntrials; i++)
		if (!strcmp(x->trials[i].config, config))
			return &x->trials[i];
	return NULL;
}

static int count_stage(const struct ktune_tuning *t, const char *stage, int baseline)
{
	int n = 0;
	for (int i = 0; i < t->nm; i++)
		n += !strcmp(t->m[i].stage, stage) && (!t->m[i].config[0]) == baseline;
	return n;
}

static void test_explain__planted_failures_are_each_listed(void **state)
{
	static const char *actions[] = { "compile_error", "crash", "hang", "wrong" };
	struct ktune_key key = { "gemm", KTUNE_F16, "nt", 256, 256, 256, 1 };
	struct ktune_tune_options o = { .budget = 20, .seed = 4, .finalists = 3, .jobs = 2, .timeout_s = 0.5,
					.compile_timeout_s = 5 };
	struct ktune_config *cfgs;
	struct ktune_tuner *t;
	struct ktune_tune_report r;
	struct ktune_explain x;
	struct ktune_err e;
	char plan[2048], text[4][256];
	int n, pruned;
	(void)state;

	assert_int_equal(ktune__gemm_candidates(&key, "sm_90", 132, 232448, o.budget, o.seed, &cfgs, &n, &pruned, &e),
			 KTUNE_OK);
	assert_int_equal(test_plant(cfgs, n, actions, 4, text, plan, sizeof(plan)), 4);
	setenv("KTUNE_FAKE_PLAN", plan, 1);
	assert_int_equal(ktune__tuner_open(db_path, 0, test_program("fake-worker"), &t, &e), KTUNE_OK);
	if (ktune__tune_key(t, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	ktune__tuner_close(t);
	unsetenv("KTUNE_FAKE_PLAN");

	if (ktune__explain(db_path, &fake, &key, &x, &e))
		fail_msg("%s", e.msg);
	assert_true(x.has_db);
	assert_true(x.has_result && x.result_fresh);
	assert_string_equal(x.result.config, r.result.config);
	/* dispatch stops at this GPU's exact entry, the result */
	assert_string_equal(x.dispatch.source, "exact");
	assert_true(x.dispatch.steps[0].found && x.dispatch.steps[0].used);
	assert_string_equal(x.dispatch.config, r.result.config);

	/* the tuning: every candidate, each planted one with its fate */
	assert_true(x.has_tuning);
	assert_string_equal(x.tuning.outcome, KTUNE_TUNED);
	assert_string_equal(x.tuning.winner, r.result.config);
	assert_int_equal(x.ntrials, n);
	assert_int_equal(x.tuning.candidates, n);
	assert_string_equal(trial_of(&x, text[0])->status, KTUNE_TRIAL_COMPILE_ERROR);
	assert_non_null(strstr(trial_of(&x, text[0])->message, "planted compile error"));
	assert_string_equal(trial_of(&x, text[1])->status, KTUNE_TRIAL_CRASHED);
	assert_non_null(strstr(trial_of(&x, text[1])->message, "ILLEGAL_ADDRESS"));
	assert_string_equal(trial_of(&x, text[2])->status, KTUNE_TRIAL_TIMEOUT);
	const struct ktune_trial *wrong = trial_of(&x, text[3]);
	assert_string_equal(wrong->status, KTUNE_TRIAL_WRONG);
	assert_true(wrong->err_fro == 1.0); /* by how much: the fake's error */
	assert_true(x.tol_fro > 0 && x.tol_fro < wrong->err_fro);
	/* a candidate that ran right has its screen time */
	int screened = 0;
	for (int i = 0; i < x.ntrials; i++)
		screened += !strcmp(x.trials[i].status, KTUNE_TRIAL_OK) && x.trials[i].screen_us > 0;
	assert_int_equal(screened, r.ok);

	/* the finalists twice, then the winner and the baseline in turns, four each; the runoff's word */
	assert_int_equal(count_stage(&x.tuning, KTUNE_STAGE_FINAL, 0), 3);
	assert_int_equal(count_stage(&x.tuning, KTUNE_STAGE_FINAL_REV, 0), 3);
	assert_int_equal(count_stage(&x.tuning, KTUNE_STAGE_TURNS, 0), 4);
	assert_int_equal(count_stage(&x.tuning, KTUNE_STAGE_TURNS, 1), 4);
	assert_non_null(strstr(x.tuning.note, "runoff"));
	assert_true(x.tuning.baseline_us > 0);

	/* the pruning before compiling, recomputed: its reasons add up, and it and the budget make the tuning's */
	int sum = 0;
	for (int i = 0; i < x.nprunes; i++) {
		assert_true(x.prunes[i].count > 0);
		assert_non_null(strchr(x.prunes[i].example, '='));
		if (i)
			assert_true(x.prunes[i].count <= x.prunes[i - 1].count);
		sum += x.prunes[i].count;
	}
	assert_int_equal(sum, x.pruned_now);
	assert_int_equal(x.space, pruned + n); /* the tuner's own count: what it left out and what it tried */
	assert_true(x.pruned_now < pruned);   /* a budget of 20 left some admitted ones undrawn */
	assert_int_equal(x.tuning.pruned, pruned);
	ktune__explain_free(&x);
	free(cfgs);
}

static void test_explain__dispatch_chain_without_tuning(void **state)
{
	struct ktune_explain x;
	struct ktune_err e;
	(void)state;

	/* a key of the shipped H100 tuning: shipped serves it (another GPU of the arch's file, for this fake one) */
	struct ktune_key shipped = { "gemm", KTUNE_F16, "nt", 16, 4096, 4096, 1 };
	if (ktune__explain(db_path, &fake, &shipped, &x, &e))
		fail_msg("%s", e.msg);
	assert_string_equal(x.dispatch.source, "shipped");
	assert_true(x.dispatch.steps[2].found && x.dispatch.steps[2].used);
	assert_false(x.dispatch.steps[0].found);
	assert_true(x.dispatch.sources.from_shipped > 0);
	assert_false(x.has_tuning);
	ktune__explain_free(&x);

	/* a key nobody tuned, in the M class of a shipped key: nearest, borrowed from that key */
	struct ktune_key near = { "gemm", KTUNE_F16, "nt", 12, 4096, 4096, 1 };
	if (ktune__explain("", &fake, &near, &x, &e))
		fail_msg("%s", e.msg);
	assert_false(x.has_db);
	assert_string_equal(x.dispatch.source, "nearest");
	assert_string_equal(x.dispatch.own, "nearest");
	for (int s = 0; s < 3; s++)
		assert_false(x.dispatch.steps[s].found);
	assert_true(x.dispatch.borrowed);
	assert_string_equal(x.dispatch.from.op, "gemm");
	assert_int_equal(x.dispatch.from.m, 16);
	assert_true(x.space > 0);
	ktune__explain_free(&x);

	/*
	 * A quantized GEMM's key nobody tuned, 64 rows on 28672 x 4096: borrowed
	 * from the shipped 64 x 4096 x 4096 (the H200's), its config as tuned
	 * there named too, and what dispatch serves kept by this key's prune
	 * (its split fitted where the neighbour's would split a full grid).
	 */
	const struct ktune_op *quant = ktune__op_find("gemm_quant");
	struct ktune_key q = { "gemm_quant", KTUNE_BF16, "4,128,scale_shift,v1", 64, 28672, 4096, 1 };
	struct ktune_config served, tuned;
	char why[160];
	if (ktune__explain("", &fake, &q, &x, &e))
		fail_msg("%s", e.msg);
	assert_string_equal(x.dispatch.own, "nearest");
	assert_true(x.dispatch.borrowed);
	assert_int_equal(x.dispatch.from.m, 64);
	assert_int_equal(x.dispatch.from.n, 4096);
	assert_int_equal(ktune__op_config_parse(quant, "qwgmma", x.dispatch.config, &served, &e), KTUNE_OK);
	assert_int_equal(ktune__op_config_parse(quant, "qwgmma", x.dispatch.from_config, &tuned, &e), KTUNE_OK);
	assert_int_equal(quant->prune(&q, &served, 132, why, sizeof(why)), 0);
	assert_true(ktune__op_param(quant, &served, "SPLIT_K", 0) <= ktune__op_param(quant, &tuned, "SPLIT_K", 0));
	ktune__explain_free(&x);

	/* of another M class: the performance model's pick (dispatch.c's regimes) */
	struct ktune_key other = { "gemm", KTUNE_F16, "nt", 17, 4096, 4096, 1 };
	if (ktune__explain("", &fake, &other, &x, &e))
		fail_msg("%s", e.msg);
	assert_string_equal(x.dispatch.source, "model");
	assert_false(x.dispatch.borrowed);
	ktune__explain_free(&x);

	/* odd leading dimensions: cuBLAS serves, ktune's own answer is the model's; not with KTUNE_FALLBACK=model */
	struct ktune_key head = { "gemm", KTUNE_BF16, "nt", 1024, 50257, 768, 0 };
	if (ktune__explain("", &fake, &head, &x, &e))
		fail_msg("%s", e.msg);
	assert_string_equal(x.dispatch.source, "cublas");
	assert_string_equal(x.dispatch.own, "model");
	assert_true(x.dispatch.config[0] != 0);
	ktune__explain_free(&x);
	setenv("KTUNE_FALLBACK", "model", 1);
	int rc = ktune__explain("", &fake, &head, &x, &e);
	unsetenv("KTUNE_FALLBACK");
	if (rc)
		fail_msg("%s", e.msg);
	assert_string_equal(x.dispatch.source, "model");
	ktune__explain_free(&x);

	/* another op, never tuned in the unaligned class, recorded as a miss */
	struct ktune_key gelu = { "gelu", KTUNE_BF16, "erf,bwd", 1 << 12, 0, 0, 0 };
	struct ktune_miss miss = { gelu, "default", 42, "", "" };
	struct ktune_db *db;
	assert_int_equal(ktune__db_open(db_path, 1, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_misses(db, &fake.id, &miss, 1, &e), KTUNE_OK);
	ktune__db_close(db);
	if (ktune__explain(db_path, &fake, &gelu, &x, &e))
		fail_msg("%s", e.msg);
	assert_true(x.has_miss);
	assert_int_equal(x.miss.calls, 42);
	assert_string_equal(x.miss.source, "default");
	assert_true(strcmp(x.dispatch.source, "exact") && strcmp(x.dispatch.source, "arch"));
	assert_true(x.tol_max > 0);
	ktune__explain_free(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_explain__planted_failures_are_each_listed),
		cmocka_unit_test(test_explain__dispatch_chain_without_tuning),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
