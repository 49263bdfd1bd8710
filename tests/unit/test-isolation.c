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
#include "tuner/protocol.h"
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
	struct ktune_key key = { "gemm", KTUNE_F16, "nt", 256, 256, 256, 1 };
	struct ktune_tune_options o = { .budget = 40, .seed = 9, .finalists = 4, .jobs = 2,
					.timeout_s = 0.5, .compile_timeout_s = 1.5, .progress = NULL };
	if (getenv("KTUNE_TEST_VERBOSE"))
		o.progress = stderr;
	struct ktune_config *cfgs;
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
	struct ktune_config last;
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

/* What a tuning stored for explain: its record (the newest) and its stages' measurements. */
static int newest_tune(const struct ktune_tuning *t, void *arg)
{
	struct ktune_tuning *out = arg;
	if (out->id || strcmp(t->kind, "tune"))
		return 0;
	*out = *t;
	int final = 0, rev = 0, turns = 0;
	for (int i = 0; i < t->nm; i++) {
		final += !strcmp(t->m[i].stage, KTUNE_STAGE_FINAL);
		rev += !strcmp(t->m[i].stage, KTUNE_STAGE_FINAL_REV);
		turns += !strcmp(t->m[i].stage, KTUNE_STAGE_TURNS);
	}
	/* stash the counts where the test finds them: the pointer is gone after the call */
	out->m = NULL;
	out->nm = final * 10000 + rev * 100 + turns;
	return 0;
}

/* A recorded miss may be of the unaligned class: the tuner tunes that class, every op alike. */
static void test_isolation__tunes_an_unaligned_key(void **state)
{
	struct ktune_key keys[2] = { { "gemm", KTUNE_F16, "tn", 33, 100, 200, 0 },
				     { "gelu", KTUNE_BF16, "tanh,fwd", 1 << 20, 0, 0, 0 } };
	struct ktune_tune_options o = { .budget = 12, .seed = 5, .finalists = 3, .jobs = 2, .timeout_s = 2,
					.compile_timeout_s = 5 };
	struct ktune_tuner *t;
	struct ktune_tune_report r;
	struct ktune_err e;
	(void)state;

	assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
	for (int i = 0; i < 2; i++) {
		if (ktune__tune_key(t, &keys[i], &o, &r, &e))
			fail_msg("%s", e.msg);
		assert_int_equal(r.result.key.aligned, 0);
		struct ktune_result stored;
		assert_int_equal(ktune__db_get_result(ktune__tuner_db(t), &ktune__tuner_device(t)->id, &keys[i], &stored,
						      &e), 1);
		assert_string_equal(stored.config, r.result.config);

		struct ktune_tuning rec = { .id = 0 };
		assert_int_equal(ktune__db_tunings(ktune__tuner_db(t), &ktune__tuner_device(t)->id, &keys[i], newest_tune,
						   &rec, &e), KTUNE_OK);
		assert_true(rec.id > 0);
		assert_string_equal(rec.outcome, KTUNE_TUNED);
		assert_string_equal(rec.winner, r.result.config);
		assert_int_equal(rec.candidates, r.result.candidates);
		assert_int_equal(rec.budget, 12);
		assert_int_equal(rec.smem_optin, 232448);
		/* three finalists in order and in reverse, then four runs of each side in turns */
		assert_int_equal(rec.nm / 10000, 3);
		assert_int_equal(rec.nm / 100 % 100, 3);
		assert_int_equal(rec.nm % 100, 8);
		if (i == 0) /* GEMM: the runoff said what it did */
			assert_non_null(strstr(rec.note, "runoff"));
	}
	ktune__tuner_close(t);
}

static int count_result(const struct ktune_result *r, void *arg)
{
	(void)r;
	(*(int *)arg)++;
	return 0;
}

/* sweep --from-db: the misses recorded on this GPU's model, exactly, in their classes. */
static void test_isolation__sweep_tunes_the_misses_recorded_in_the_database(void **state)
{
	char path[4300];
	struct ktune_device_id fake = { "Fake H100 (no GPU)", "sm_90", 132 }, other = { "NVIDIA A100", "sm_80", 108 };
	struct ktune_miss mine[2] = { { { "gemm", KTUNE_F16, "nn", 7, 9, 11, 0 }, "default", 4, "", "" },
				      { { "add", KTUNE_F32, "", 1 << 16, 0, 0, 1 }, "nearest", 2, "", "" } };
	struct ktune_miss theirs = { { "gemm", KTUNE_F16, "nn", 64, 64, 64, 1 }, "default", 1, "", "" };
	struct ktune_tune_options o = { .budget = 4, .seed = 2, .finalists = 2, .jobs = 2, .timeout_s = 2,
					.compile_timeout_s = 5, .as_recorded = 1 };
	struct ktune_spec spec;
	struct ktune_db *db;
	struct ktune_err e;
	int zero = 0, n = 0;
	(void)state;

	snprintf(path, sizeof(path), "%s/recorded.db", dir);
	assert_int_equal(ktune__db_open(path, 1, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_misses(db, &fake, mine, 2, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_misses(db, &other, &theirs, 1, &e), KTUNE_OK);
	assert_int_equal(ktune__spec_from_db_misses(db, &fake, 1, &spec, &e), KTUNE_OK);
	ktune__db_close(db);
	assert_int_equal(spec.nkeys, 2);

	FILE *null = fopen("/dev/null", "w");
	assert_non_null(null);
	assert_int_equal(ktune__sweep(path, fake_worker(), &zero, 1, &spec, &o, null, &e), 0);
	fclose(null);
	ktune__spec_free(&spec);

	assert_int_equal(ktune__db_open_read(path, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_query(db, NULL, count_result, &n, &e), KTUNE_OK);
	assert_int_equal(n, 2); /* not the other GPU's key */
	for (int i = 0; i < 2; i++) {
		struct ktune_result r;
		assert_int_equal(ktune__db_get_result(db, &fake, &mine[i].key, &r, &e), 1);
	}
	ktune__db_close(db);
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
	struct ktune_key small = { "gemm", KTUNE_F16, "nt", 64, 64, 64, 1 };
	struct ktune_key big = { "gemm", KTUNE_F16, "nn", 65536, 65536, 65536, 1 };
	struct ktune_key mid = { "gemm", KTUNE_F16, "nn", 16384, 16384, 16384, 1 };
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
	struct ktune_key key = { "gemm", KTUNE_BF16, "nn", 512, 512, 512, 1 };
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
	struct ktune_key key = { "gemm", KTUNE_F16, "nn", 4096, 4096, 4096, 1 };
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

/* The group pick's four fake keys, and a sweep of them (force; the group pick or not) with their results. */
enum { GROUP_KEYS = 4 };
static const int64_t group_n[GROUP_KEYS] = { 256, 512, 768, 1024 };

static void sweep_group(int group_pick, struct ktune_result *stored)
{
	static const char spec_text[] = "gemm:\n  dtypes: [bf16]\n  layouts: [nt]\n"
					 "  shapes:\n    - {m: 256, n: [256, 512, 768, 1024], k: 256}\n";
	/* every candidate (no budget): each key then sees the config that wins them all */
	struct ktune_tune_options o = { .seed = 13, .finalists = 4, .jobs = 2, .timeout_s = 2,
					.compile_timeout_s = 5, .force = 1, .group_pick = group_pick };
	struct ktune_spec spec = { 0 };
	struct ktune_tuner *t;
	struct ktune_err e;
	int zero = 0;
	FILE *null = fopen("/dev/null", "w");
	assert_non_null(null);
	if (getenv("KTUNE_TEST_VERBOSE"))
		o.progress = stderr;
	assert_int_equal(ktune__spec_parse(spec_text, sizeof(spec_text) - 1, "test", &spec, &e), KTUNE_OK);
	if (ktune__sweep(db_path, fake_worker(), &zero, 1, &spec, &o, null, &e))
		fail_msg("sweep: %s", e.msg);
	fclose(null);
	ktune__spec_free(&spec);
	assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
	for (int i = 0; i < GROUP_KEYS; i++) {
		struct ktune_key key = { "gemm", KTUNE_BF16, "nt", 256, group_n[i], 256, 1 };
		assert_int_equal(ktune__db_get_result(ktune__tuner_db(t), &ktune__tuner_device(t)->id, &key,
						      &stored[i], &e), 1);
	}
	ktune__tuner_close(t);
}

/* The newest record of the group pick at key i of the group (explain's source). */
struct newest {
	struct ktune_tuning t;
	int found, measured_own, measured_tile;
};

static int newest_group(const struct ktune_tuning *t, void *arg)
{
	struct newest *n = arg;
	if (n->found || strcmp(t->kind, "group"))
		return 0;
	n->t = *t;
	n->t.m = NULL;
	for (int i = 0; i < t->nm; i++) {
		/* the config's runs; the baseline's in the same turns have config "" */
		n->measured_own += !strcmp(t->m[i].stage, KTUNE_STAGE_GROUP_OWN) && t->m[i].config[0];
		n->measured_tile += !strcmp(t->m[i].stage, KTUNE_STAGE_GROUP_TILE) && t->m[i].config[0];
	}
	n->found = 1;
	return 0;
}

static struct newest group_record(int i)
{
	struct ktune_key key = { "gemm", KTUNE_BF16, "nt", 256, group_n[i], 256, 1 };
	struct ktune_device_id dev = { "Fake H100 (no GPU)", "sm_90", 132 };
	struct newest n = { .found = 0 };
	struct ktune_db *db;
	struct ktune_err e;
	assert_int_equal(ktune__db_open_read(db_path, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_tunings(db, &dev, &key, newest_group, &n, &e), KTUNE_OK);
	ktune__db_close(db);
	assert_true(n.found);
	return n;
}

/* A config text without its GROUP_SIZE: "BMxBN family cluster split stages consumers". */
static void tiling(const char *config, char *out, size_t len)
{
	struct ktune_config c;
	struct ktune_err e;
	assert_int_equal(ktune__gemm_config_parse(config, &c, &e), KTUNE_OK);
	snprintf(out, len, "%dx%d f%d c%d s%d st%d w%d", c.block_m, c.block_n, c.family, c.cluster_m, c.split_k,
		 c.stages, c.consumers);
}

/* The fastest config by trial time whose tile (BLOCK_M x BLOCK_N) is not `winner`'s. */
struct runner_up {
	struct ktune_config winner;
	char config[256];
	double time_us;
};

static int note_runner_up(const char *config, double time_us, double err_fro, double err_max, void *arg)
{
	struct runner_up *u = arg;
	struct ktune_config c;
	struct ktune_err e;
	(void)err_fro;
	(void)err_max;
	assert_int_equal(ktune__gemm_config_parse(config, &c, &e), KTUNE_OK);
	if (c.block_m * c.block_n == u->winner.block_m * u->winner.block_n)
		return 0;
	if (!u->config[0] || time_us < u->time_us) {
		snprintf(u->config, sizeof(u->config), "%s", config);
		u->time_us = time_us;
	}
	return 0;
}

/*
 * The premise of the group pick's tests: four keys of one M win with one
 * config on a steady GPU (its tiling in `group`).  `out` gets the fastest
 * config of another tile at N = 512, its SPLIT_K set to `split`.
 */
static void runner_up(char *group, size_t len, int split, char *out, size_t out_len)
{
	struct ktune_result steady[GROUP_KEYS];
	struct runner_up u = { .config = "" };
	struct ktune_config c;
	struct ktune_tuner *t;
	struct ktune_err e;
	char b[64];

	sweep_group(0, steady);
	tiling(steady[0].config, group, len);
	for (int i = 1; i < GROUP_KEYS; i++) {
		tiling(steady[i].config, b, sizeof(b));
		assert_string_equal(b, group); /* one config wins everywhere on a steady GPU */
	}
	assert_int_equal(ktune__gemm_config_parse(steady[1].config, &u.winner, &e), KTUNE_OK);
	assert_int_equal(ktune__tuner_open(db_path, 0, fake_worker(), &t, &e), KTUNE_OK);
	for (int f = 0; f < KTUNE_GEMM_NFAMILIES; f++)
		assert_int_equal(ktune__db_config_times(ktune__tuner_db(t), &steady[1].device, &steady[1].key,
							ktune__gemm_family_hash(f), note_runner_up, &u, &e),
				 KTUNE_OK);
	ktune__tuner_close(t);
	assert_true(u.config[0] != 0);
	assert_int_equal(ktune__gemm_config_parse(u.config, &c, &e), KTUNE_OK);
	c.split_k = split;
	ktune__gemm_config_format(&c, out, out_len);
}

/*
 * The group pick on a hot GPU: with KTUNE_FAKE_HOT set to runner_up's
 * config at N = 512 (`hot_config`), tuning crowns it there (`hot`), and a
 * sweep with the group pick gives `picked`.
 */
static void group_on_a_hot_gpu(int split, char *group, size_t len, char *hot_config, size_t hot_len,
			       struct ktune_result *hot, struct ktune_result *picked)
{
	char plan[300];

	runner_up(group, len, split, hot_config, hot_len);
	snprintf(plan, sizeof(plan), "%s@%lld", hot_config, (long long)group_n[1]);
	setenv("KTUNE_FAKE_HOT", plan, 1);
	sweep_group(0, hot);
	assert_string_equal(hot[1].config, hot_config); /* the hot GPU crowns it at N = 512 */
	sweep_group(1, picked);
	unsetenv("KTUNE_FAKE_HOT");
}

/*
 * The group pick: on a GPU where another config reads fast at one of four
 * keys only while hot from that key's candidates (KTUNE_FAKE_HOT), tuning
 * crowns it there, and the group pick, weighing the config the other three
 * won with at that key in turns with cuBLAS, gives the key the group's
 * config again.
 */
static void test_isolation__group_pick_sees_past_a_hot_gpu(void **state)
{
	struct ktune_result hot[GROUP_KEYS], picked[GROUP_KEYS];
	char group[64], hot_config[256], b[64];
	(void)state;

	group_on_a_hot_gpu(1, group, sizeof(group), hot_config, sizeof(hot_config), hot, picked);
	for (int i = 0; i < GROUP_KEYS; i++) {
		tiling(picked[i].config, b, sizeof(b));
		assert_string_equal(b, group);
	}
	/* the switched key's figures are the group pick's: measured cold, in turns with cuBLAS */
	assert_true(picked[1].cublas_us > 0 && picked[1].time_us > hot[1].time_us);
}

/*
 * A key keeps its own pick only where it beats the group's config by a
 * clear margin in both rounds (3%; two ratios at a long key scatter by
 * 2-5%).  The fake's runner-up tile is crowned at two of the four keys:
 * hot at N = 1024, which the group's config wins back cold, and at N = 512
 * made faster than the group's config there for good (the group's config
 * is the one the first key won; the tie goes to it).  At 0.9 of its time
 * (1.2% ahead of the group's config) the runner-up gives way at N = 512; at
 * 0.86 (6% ahead) it stays.
 */
static void test_isolation__group_pick_keeps_a_clear_winner(void **state)
{
	static const char *factor[2] = { "0.9", "0.86" };
	struct ktune_result crowned[GROUP_KEYS], picked[GROUP_KEYS];
	char group[64], own[256], b[64], plan[300];
	(void)state;

	for (int f = 0; f < 2; f++) {
		runner_up(group, sizeof(group), 1, own, sizeof(own));
		snprintf(plan, sizeof(plan), "%s@%lld", own, (long long)group_n[3]);
		setenv("KTUNE_FAKE_HOT", plan, 1);
		snprintf(plan, sizeof(plan), "%s@%lld@%s", own, (long long)group_n[1], factor[f]);
		setenv("KTUNE_FAKE_FASTER", plan, 1);
		sweep_group(0, crowned);
		assert_string_equal(crowned[1].config, own); /* faster for good */
		assert_string_equal(crowned[3].config, own); /* hot */
		sweep_group(1, picked);
		unsetenv("KTUNE_FAKE_HOT");
		unsetenv("KTUNE_FAKE_FASTER");
		tiling(picked[3].config, b, sizeof(b));
		assert_string_equal(b, group); /* the group's config won as a group */
		tiling(picked[1].config, b, sizeof(b));
		if (f == 0)
			assert_string_equal(b, group); /* 1.2% ahead: within the margin */
		else
			assert_string_equal(picked[1].config, own); /* 6% ahead: its own */
		/* what explain will show: the decision and the rounds that made it, at each key */
		struct newest r1 = group_record(1), r3 = group_record(3);
		assert_string_equal(r1.t.outcome, f == 0 ? "switched" : "kept");
		assert_string_equal(r3.t.outcome, "switched");
		assert_int_equal(r1.measured_own, 2 * 4);  /* two rounds of four runs in turns */
		assert_int_equal(r1.measured_tile, 2 * 4);
		assert_non_null(strstr(r1.t.note, "round 1: own pick"));
		assert_string_equal(r1.t.winner, picked[1].config);
	}
}

/*
 * The group pick weighs tiles: a key keeps its own SPLIT_K, which answers
 * its shape (a short last wave, a long K) rather than the GPU's state.  The
 * hot config at N = 512 splits K in two; the group's tile replaces it there,
 * split in two as well.
 */
static void test_isolation__group_pick_keeps_a_keys_split(void **state)
{
	struct ktune_result hot[GROUP_KEYS], picked[GROUP_KEYS];
	struct ktune_config want, got;
	struct ktune_err e;
	char group[64], hot_config[256];
	(void)state;

	group_on_a_hot_gpu(2, group, sizeof(group), hot_config, sizeof(hot_config), hot, picked);
	assert_int_equal(ktune__gemm_config_parse(picked[0].config, &want, &e), KTUNE_OK);
	assert_int_equal(want.split_k, 1);
	want.split_k = 2;
	assert_int_equal(ktune__gemm_config_parse(picked[1].config, &got, &e), KTUNE_OK);
	got.group_size = want.group_size;
	assert_memory_equal(&got, &want, sizeof(got)); /* the group's tile, the key's split */
	assert_true(picked[1].cublas_us > 0);
}

/*
 * ktune bench: a stored result timed again comes out in the ratio it was
 * stored with (the fake's times are exact), also on a heating GPU, and a
 * stored config that now computes wrong numbers, crashes or no longer
 * compiles says so in the report rather than failing the call.
 */
static void test_isolation__bench_times_a_stored_result_again(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_F16, "nn", 384, 256, 512, 1 };
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
		cmocka_unit_test(test_isolation__tunes_an_unaligned_key),
		cmocka_unit_test(test_isolation__sweep_tunes_the_misses_recorded_in_the_database),
		cmocka_unit_test(test_isolation__run_timeout_is_derived_from_the_key),
		cmocka_unit_test(test_isolation__ratio_survives_a_heating_gpu),
		cmocka_unit_test(test_isolation__winner_survives_a_cooling_gpu),
		cmocka_unit_test(test_isolation__runoff_survives_a_swinging_gpu),
		cmocka_unit_test(test_isolation__group_pick_sees_past_a_hot_gpu),
		cmocka_unit_test(test_isolation__group_pick_keeps_a_keys_split),
		cmocka_unit_test(test_isolation__group_pick_keeps_a_clear_winner),
		cmocka_unit_test(test_isolation__bench_times_a_stored_result_again),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
