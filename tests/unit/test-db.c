/*
 * test-db.c - the tuning database: round trips, replacement, queries,
 * tunings with their measurements, recorded misses, migration from versions
 * 1 and 3, a reader of version 5, and refusal (untouched) of files that are
 * not ours, damaged or newer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db/db.h"
#include "test_sql.h"
#include "test_util.h"

static int setup_tmp(void **state)
{
	return test_scratch_setup(state, "ktune-test-db");
}

static int count_entries(const char *dir)
{
	struct dirent *de;
	int n = 0;
	DIR *d = opendir(dir);

	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* Whole-file helpers, so that "untouched" can be checked byte for byte. */

static void write_bytes(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *len)
{
	unsigned char *buf;
	struct stat st;
	FILE *f;

	assert_int_equal(stat(path, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	assert_non_null(buf);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*len = (size_t)st.st_size;
	return buf;
}

/* Opening `path` must fail with ERR_DB, name the path and say `why`, and leave the file and its directory as they were. */
static void assert_refused_untouched(const struct test_scratch *t, const char *path, const char *why)
{
	struct ktune_err e = { "" };
	struct ktune_db *db = (struct ktune_db *)1;
	unsigned char *before, *after;
	size_t nbefore, nafter;
	int entries = count_entries(t->dir);

	before = read_bytes(path, &nbefore);
	assert_int_equal(ktune__db_open(path, 1, &db, &e), KTUNE_ERR_DB);
	assert_null(db);
	if (!strstr(e.msg, path) || !strstr(e.msg, why))
		fail_msg("message '%s' lacks '%s' or '%s'", e.msg, path, why);
	after = read_bytes(path, &nafter);
	assert_int_equal(nbefore, nafter);
	assert_memory_equal(before, after, nbefore);
	assert_int_equal(count_entries(t->dir), entries);
	free(before);
	free(after);
}

/* A db file with results and trials in it, closed. */
static void make_db(const char *path, int nresults);

static void sample_result(struct ktune_result *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->key.op, "gemm");
	r->key.dtype = KTUNE_BF16;
	r->key.variant[0] = 'n';
	r->key.variant[1] = 't';
	r->key.m = 16;
	r->key.n = 4096;
	r->key.k = 14336;
	r->key.aligned = 1;
	strcpy(r->device.name, "NVIDIA H100 80GB HBM3");
	strcpy(r->device.arch, "sm_90");
	r->device.sm_count = 132;
	strcpy(r->family, "gemm");
	strcpy(r->config, "BLOCK_M=64,BLOCK_N=128,BLOCK_K=64,GROUP_SIZE=8,SPLIT_K=2,STAGES=4,WARPS=4");
	ktune__sha256_hex("template source", 15, r->template_hash);
	r->time_us = 12.25;
	r->p20_us = 12.0625;
	r->p80_us = 12.5;
	r->tflops = 153.1234567890123;
	r->cublas_us = 14.75;
	r->err_fro = 1.52587890625e-05;
	r->err_max = 0.0078125;
	r->candidates = 314;
	r->tune_s = 42.5;
	strcpy(r->nvrtc_version, "12.4");
	strcpy(r->driver_version, "550.54.15");
	strcpy(r->ktune_version, "0.1.0");
	strcpy(r->protocol, "events;l2flush;warmup=2;reps>=10;median");
}

static void sample_trial(struct ktune_trial *t, const struct ktune_result *r, const char *status,
			 const char *config)
{
	memset(t, 0, sizeof(*t));
	t->key = r->key;
	strcpy(t->family, r->family);
	strcpy(t->config, config);
	strcpy(t->template_hash, r->template_hash);
	strcpy(t->status, status);
}

static void make_db(const char *path, int nresults)
{
	struct ktune_err e = { "" };
	struct ktune_result r;
	struct ktune_trial tr;
	struct ktune_db *db = open_db(path);
	int i;

	sample_result(&r);
	for (i = 0; i < nresults; i++) {
		r.key.m = 16 + i;
		snprintf(r.config, sizeof(r.config), "BLOCK_M=%d", 64 + i);
		sample_trial(&tr, &r, KTUNE_TRIAL_OK, r.config);
		tr.time_us = 10 + i;
		if (ktune__db_put_result(db, &r, &tr, 1, &e) != KTUNE_OK)
			fail_msg("put: %s", e.msg);
	}
	ktune__db_close(db);
}

static void assert_same_double(double a, double b)
{
	if (memcmp(&a, &b, sizeof(a)) != 0)
		fail_msg("%.17g != %.17g", a, b);
}

/* Every field but created_at, which the database sets. */
static void assert_same_result(const struct ktune_result *a, const struct ktune_result *b)
{
	assert_string_equal(a->key.op, b->key.op);
	assert_int_equal(a->key.dtype, b->key.dtype);
	assert_int_equal(a->key.variant[0], b->key.variant[0]);
	assert_int_equal(a->key.variant[1], b->key.variant[1]);
	assert_int_equal(a->key.m, b->key.m);
	assert_int_equal(a->key.n, b->key.n);
	assert_int_equal(a->key.k, b->key.k);
	assert_int_equal(a->key.aligned, b->key.aligned);
	assert_string_equal(a->device.name, b->device.name);
	assert_string_equal(a->device.arch, b->device.arch);
	assert_int_equal(a->device.sm_count, b->device.sm_count);
	assert_string_equal(a->family, b->family);
	assert_string_equal(a->config, b->config);
	assert_string_equal(a->template_hash, b->template_hash);
	assert_same_double(a->time_us, b->time_us);
	assert_same_double(a->p20_us, b->p20_us);
	assert_same_double(a->p80_us, b->p80_us);
	assert_same_double(a->tflops, b->tflops);
	assert_same_double(a->cublas_us, b->cublas_us);
	assert_same_double(a->err_fro, b->err_fro);
	assert_same_double(a->err_max, b->err_max);
	assert_int_equal(a->candidates, b->candidates);
	assert_same_double(a->tune_s, b->tune_s);
	assert_string_equal(a->nvrtc_version, b->nvrtc_version);
	assert_string_equal(a->driver_version, b->driver_version);
	assert_string_equal(a->ktune_version, b->ktune_version);
	assert_string_equal(a->protocol, b->protocol);
	assert_string_equal(a->measure_note, b->measure_note);
}

/* created_at is "YYYY-MM-DDTHH:MM:SSZ", UTC, within a minute of now. */
static void assert_recent_timestamp(const char *s)
{
	struct tm tm;
	char z = 0;
	time_t when;

	memset(&tm, 0, sizeof(tm));
	assert_int_equal(strlen(s), 20);
	assert_int_equal(sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon,
				&tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z),
			 7);
	assert_int_equal(z, 'Z');
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	when = timegm(&tm);
	assert_true(labs((long)(time(NULL) - when)) < 60);
}

static void test_db__open_creates_database_and_directory(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_db *db = NULL;
	char path[TEST_PATH_MAX];
	long results = -1, trials = -1;

	snprintf(path, sizeof(path), "%s/a/b/tuning.db", t->dir);
	assert_int_equal(ktune__db_open(path, 1, &db, &e), KTUNE_OK);
	assert_non_null(db);
	assert_string_equal(ktune__db_path(db), path);
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 0);
	assert_int_equal(trials, 0);
	ktune__db_close(db);

	assert_int_equal(raw_long(path, "PRAGMA user_version"), KTUNE_DB_SCHEMA_VERSION);
	assert_int_equal(raw_long(path, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
				  " AND name IN ('devices', 'results', 'trials')"),
			 3);
}

static void test_db__open_without_create_of_missing_file_fails(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_db *db = (struct ktune_db *)1;

	assert_int_equal(ktune__db_open(t->db, 0, &db, &e), KTUNE_ERR_NOT_FOUND);
	assert_null(db);
	assert_non_null(strstr(e.msg, t->db));
	assert_int_equal(count_entries(t->dir), 0);

	/* An existing database opens without create. */
	make_db(t->db, 1);
	assert_int_equal(ktune__db_open(t->db, 0, &db, &e), KTUNE_OK);
	ktune__db_close(db);
}

/* A reader given an empty file finds no results and leaves the file empty. */
static void test_db__open_without_create_of_empty_file_writes_nothing(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_db *db = (struct ktune_db *)1;
	struct stat st;
	FILE *f = fopen(t->db, "w");

	assert_non_null(f);
	fclose(f);
	assert_int_equal(ktune__db_open(t->db, 0, &db, &e), KTUNE_ERR_NOT_FOUND);
	assert_null(db);
	assert_non_null(strstr(e.msg, "is empty"));
	assert_int_equal(stat(t->db, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(count_entries(t->dir), 1);

	/* the tuner, which creates, makes it a database */
	assert_int_equal(ktune__db_open(t->db, 1, &db, &e), KTUNE_OK);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "PRAGMA user_version"), KTUNE_DB_SCHEMA_VERSION);
}

static void test_db__open_turns_on_wal(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_db *db = open_db(t->db);
	sqlite3_stmt *st = NULL;
	sqlite3 *h = NULL;
	unsigned char *bytes;
	size_t len;

	/* Another connection sees WAL while ours is open... */
	assert_int_equal(sqlite3_open(t->db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(h);
	ktune__db_close(db);

	/* ...and the file header records it (read and write versions 2). */
	bytes = read_bytes(t->db, &len);
	assert_true(len >= 100);
	assert_int_equal(bytes[18], 2);
	assert_int_equal(bytes[19], 2);
	free(bytes);
}

static void test_db__result_round_trips_every_field(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result in, out;
	struct ktune_db *db;

	sample_result(&in);
	strcpy(in.measure_note, "disturbed: another process (pid 12) used the GPU");
	db = open_db(t->db);
	assert_int_equal(ktune__db_put_result(db, &in, NULL, 0, &e), KTUNE_OK);
	memset(&out, 0x55, sizeof(out));
	assert_int_equal(ktune__db_get_result(db, &in.device, &in.key, &out, &e), 1);
	assert_same_result(&in, &out);
	assert_recent_timestamp(out.created_at);
	ktune__db_close(db);

	/* The same after closing and opening again. */
	db = open_db(t->db);
	memset(&out, 0, sizeof(out));
	assert_int_equal(ktune__db_get_result(db, &in.device, &in.key, &out, &e), 1);
	assert_same_result(&in, &out);
	ktune__db_close(db);
}

static void test_db__trials_are_stored_with_the_result(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_trial tr[3];
	struct ktune_result r;
	struct ktune_db *db;
	sqlite3_stmt *st = NULL;
	sqlite3 *h = NULL;
	long results = 0, trials = 0;

	sample_result(&r);
	sample_trial(&tr[0], &r, KTUNE_TRIAL_OK, r.config);
	tr[0].time_us = 12.25;
	tr[0].err_fro = 1e-5;
	tr[0].err_max = 0.0078125;
	sample_trial(&tr[1], &r, KTUNE_TRIAL_WRONG, "BLOCK_M=128,SPLIT_K=16");
	tr[1].err_fro = NAN;
	tr[1].err_max = INFINITY;
	strcpy(tr[1].message, "relative Frobenius error nan > 0.01");
	sample_trial(&tr[2], &r, KTUNE_TRIAL_COMPILE_ERROR, "BLOCK_M=256,STAGES=8");
	tr[2].key.variant[0] = 'T'; /* either case is accepted and stored lowercase */
	strcpy(tr[2].message, "ptxas error: entry function uses too much shared data");

	db = open_db(t->db);
	assert_int_equal(ktune__db_put_result(db, &r, tr, 3, &e), KTUNE_OK);
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	assert_int_equal(trials, 3);
	ktune__db_close(db);

	assert_int_equal(sqlite3_open(t->db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h,
		"SELECT d.name, t.op, t.dtype, t.layout, t.m, t.n, t.k, t.aligned, t.family,"
		" t.config, t.template_hash, t.status, t.time_us, t.err_fro, t.err_max, t.message,"
		" t.created_at FROM trials t JOIN devices d ON d.id = t.device_id ORDER BY t.id",
		-1, &st, NULL), SQLITE_OK);

	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), r.device.name);
	assert_string_equal((const char *)sqlite3_column_text(st, 1), "gemm");
	assert_string_equal((const char *)sqlite3_column_text(st, 2), "bf16");
	assert_string_equal((const char *)sqlite3_column_text(st, 3), "nt");
	assert_int_equal(sqlite3_column_int64(st, 4), 16);
	assert_int_equal(sqlite3_column_int64(st, 5), 4096);
	assert_int_equal(sqlite3_column_int64(st, 6), 14336);
	assert_int_equal(sqlite3_column_int(st, 7), 1);
	assert_string_equal((const char *)sqlite3_column_text(st, 8), "gemm");
	assert_string_equal((const char *)sqlite3_column_text(st, 9), r.config);
	assert_string_equal((const char *)sqlite3_column_text(st, 10), r.template_hash);
	assert_string_equal((const char *)sqlite3_column_text(st, 11), "ok");
	assert_same_double(sqlite3_column_double(st, 12), 12.25);
	assert_same_double(sqlite3_column_double(st, 13), 1e-5);
	assert_same_double(sqlite3_column_double(st, 14), 0.0078125);
	assert_string_equal((const char *)sqlite3_column_text(st, 15), "");
	assert_recent_timestamp((const char *)sqlite3_column_text(st, 16));

	/* NaN is stored as NULL; infinity as itself. */
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 9), "BLOCK_M=128,SPLIT_K=16");
	assert_string_equal((const char *)sqlite3_column_text(st, 11), "wrong");
	assert_int_equal(sqlite3_column_type(st, 13), SQLITE_NULL);
	assert_true(isinf(sqlite3_column_double(st, 14)));
	assert_string_equal((const char *)sqlite3_column_text(st, 15),
			    "relative Frobenius error nan > 0.01");

	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 3), "tt");
	assert_string_equal((const char *)sqlite3_column_text(st, 11), "compile_error");
	assert_string_equal((const char *)sqlite3_column_text(st, 15), tr[2].message);

	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	sqlite3_finalize(st);
	sqlite3_close(h);
}

/* What the readers of a tuning saw: its rows and its trials. */
struct seen_tunings {
	struct ktune_tuning t[4];
	struct ktune_measurement m[4][4];
	int n;
};

static int keep_tuning(const struct ktune_tuning *t, void *arg)
{
	struct seen_tunings *s = arg;
	assert_true(s->n < 4);
	assert_true(t->nm <= 4);
	s->t[s->n] = *t;
	if (t->nm)
		memcpy(s->m[s->n], t->m, (size_t)t->nm * sizeof(*t->m));
	s->t[s->n].m = s->m[s->n];
	s->n++;
	return 0;
}

struct seen_trials {
	struct ktune_trial t[8];
	int n;
};

static int keep_trial(const struct ktune_trial *t, void *arg)
{
	struct seen_trials *s = arg;
	assert_true(s->n < 8);
	s->t[s->n++] = *t;
	return 0;
}

static void test_db__tuning_round_trips_with_trials_and_measurements(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result r;
	struct ktune_trial tr[2];
	struct ktune_measurement m[3] = {
		{ KTUNE_STAGE_FINAL, 0, "BLOCK_M=64", "ok", 12.5, 12.25, 12.75, 30 },
		{ KTUNE_STAGE_TURNS, 1, "", "ok", 14.75, 14.5, 15, 40 },
		{ KTUNE_STAGE_RUNOFF, 0, "BLOCK_M=128", "crashed", NAN, NAN, NAN, 0 },
	};
	struct ktune_tuning tun = { .kind = "tune", .outcome = KTUNE_TUNED,
				    .candidates = 2, .pruned = 300, .known_bad = 1, .budget = 64,
				    .seed = 3, .smem_optin = 232448, .baseline_us = 14.75, .tune_s = 9.5,
				    .note = "runoff: BLOCK_M=64 1.180, BLOCK_M=128 failed", .m = m, .nm = 3 };
	struct seen_tunings seen = { .n = 0 };
	struct seen_trials trials = { .n = 0 };

	sample_result(&r);
	tun.key = r.key;
	snprintf(tun.winner, sizeof(tun.winner), "%s", r.config);
	sample_trial(&tr[0], &r, KTUNE_TRIAL_OK, r.config);
	tr[0].time_us = 12.5;
	tr[0].screen_us = 11.75;
	sample_trial(&tr[1], &r, KTUNE_TRIAL_WRONG, "BLOCK_M=128");
	tr[1].err_fro = 0.5;
	tr[1].err_max = NAN;
	strcpy(tr[1].message, "error 0.5 (Frobenius)");

	struct ktune_db *db = open_db(t->db);
	/* trials stored before, without a tuning: the key's, not this tuning's */
	assert_int_equal(ktune__db_put_trials(db, &r.device, &tr[1], 1, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_tuning(db, &r, &r.device, tr, 2, &tun, &e), KTUNE_OK);
	/* a group pick weighing the key later: no trials, no result */
	struct ktune_tuning group = tun;
	snprintf(group.kind, sizeof(group.kind), "group");
	snprintf(group.outcome, sizeof(group.outcome), "kept");
	group.m = NULL;
	group.nm = 0;
	assert_int_equal(ktune__db_put_tuning(db, NULL, &r.device, NULL, 0, &group, &e), KTUNE_OK);

	assert_int_equal(ktune__db_tunings(db, &r.device, &r.key, keep_tuning, &seen, &e), KTUNE_OK);
	assert_int_equal(seen.n, 2);
	assert_string_equal(seen.t[0].kind, "group"); /* newest first */
	assert_string_equal(seen.t[0].outcome, "kept");
	assert_int_equal(seen.t[0].nm, 0);
	const struct ktune_tuning *got = &seen.t[1];
	assert_true(got->id > 0 && got->id < seen.t[0].id);
	assert_string_equal(got->kind, "tune");
	assert_string_equal(got->outcome, KTUNE_TUNED);
	assert_string_equal(got->winner, r.config);
	assert_int_equal(got->candidates, 2);
	assert_int_equal(got->pruned, 300);
	assert_int_equal(got->known_bad, 1);
	assert_int_equal(got->budget, 64);
	assert_int_equal(got->seed, 3);
	assert_int_equal(got->smem_optin, 232448);
	assert_same_double(got->baseline_us, 14.75);
	assert_same_double(got->tune_s, 9.5);
	assert_string_equal(got->note, tun.note);
	assert_recent_timestamp(got->created_at);
	assert_int_equal(got->nm, 3);
	for (int i = 0; i < 3; i++) {
		assert_string_equal(got->m[i].stage, m[i].stage);
		assert_int_equal(got->m[i].round, m[i].round);
		assert_string_equal(got->m[i].config, m[i].config);
		assert_string_equal(got->m[i].status, m[i].status);
		assert_int_equal(got->m[i].reps, m[i].reps);
	}
	assert_same_double(got->m[1].p80_us, 15);
	assert_same_double(got->m[2].time_us, 0); /* NaN: stored as NULL */

	/* the tuning's own trials, then every trial of the key */
	assert_int_equal(ktune__db_trials(db, &r.device, &r.key, got->id, keep_trial, &trials, &e), KTUNE_OK);
	assert_int_equal(trials.n, 2);
	assert_string_equal(trials.t[0].config, r.config);
	assert_same_double(trials.t[0].screen_us, 11.75);
	assert_same_double(trials.t[0].time_us, 12.5);
	assert_string_equal(trials.t[1].status, KTUNE_TRIAL_WRONG);
	assert_same_double(trials.t[1].err_fro, 0.5);
	assert_true(isnan(trials.t[1].err_max));
	assert_string_equal(trials.t[1].message, "error 0.5 (Frobenius)");
	assert_same_double(trials.t[1].screen_us, 0);
	trials.n = 0;
	assert_int_equal(ktune__db_trials(db, &r.device, &r.key, 0, keep_trial, &trials, &e), KTUNE_OK);
	assert_int_equal(trials.n, 3);
	trials.n = 0;
	assert_int_equal(ktune__db_trials(db, &r.device, &r.key, seen.t[0].id, keep_trial, &trials, &e), KTUNE_OK);
	assert_int_equal(trials.n, 0);
	/* another key has none */
	struct ktune_key other = r.key;
	other.m = 17;
	seen.n = 0;
	assert_int_equal(ktune__db_tunings(db, &r.device, &other, keep_tuning, &seen, &e), KTUNE_OK);
	assert_int_equal(seen.n, 0);
	ktune__db_close(db);
}

struct seen_misses {
	struct ktune_device_id d[8];
	struct ktune_miss m[8];
	int n;
};

static int keep_miss(const struct ktune_device_id *d, const struct ktune_miss *m, void *arg)
{
	struct seen_misses *s = arg;
	assert_true(s->n < 8);
	s->d[s->n] = *d;
	s->m[s->n++] = *m;
	return 0;
}

static void test_db__misses_add_up_over_recordings(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_device_id h100 = { "NVIDIA H100 80GB HBM3", "sm_90", 132 }, a100 = { "NVIDIA A100", "sm_80", 108 };
	struct ktune_miss first[2] = {
		{ { "gemm", KTUNE_BF16, "nt", 1, 50257, 768, 1 }, "default", 10, "", "" },
		{ { "gelu", KTUNE_BF16, "tanh,fwd", 1 << 20, 0, 0, 0 }, "nearest", 3, "", "" },
	};
	struct ktune_miss again = { { "gemm", KTUNE_BF16, "nt", 1, 50257, 768, 1 }, "nearest", 5, "", "" };
	struct seen_misses s = { .n = 0 };

	struct ktune_db *db = open_db(t->db);
	assert_int_equal(ktune__db_put_misses(db, &h100, first, 2, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_misses(db, &h100, &again, 1, &e), KTUNE_OK);
	assert_int_equal(ktune__db_put_misses(db, &a100, &again, 1, &e), KTUNE_OK);

	assert_int_equal(ktune__db_misses(db, &h100, keep_miss, &s, &e), KTUNE_OK);
	assert_int_equal(s.n, 2);
	/* ordered by key: gelu before gemm */
	assert_string_equal(s.m[0].key.op, "gelu");
	assert_string_equal(s.m[0].key.variant, "tanh,fwd");
	assert_int_equal(s.m[0].key.aligned, 0);
	assert_int_equal(s.m[0].calls, 3);
	assert_string_equal(s.m[1].key.op, "gemm");
	assert_int_equal(s.m[1].key.n, 50257);
	assert_int_equal(s.m[1].calls, 15); /* 10 + 5 */
	assert_string_equal(s.m[1].source, "nearest"); /* the last recording's */
	assert_recent_timestamp(s.m[1].first_seen);
	assert_recent_timestamp(s.m[1].last_seen);
	assert_string_equal(s.d[1].name, h100.name);

	s.n = 0;
	assert_int_equal(ktune__db_misses(db, NULL, keep_miss, &s, &e), KTUNE_OK);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.d[0].name, a100.name);
	assert_int_equal(s.m[0].calls, 5);

	/* a bad key is refused and nothing of the batch is written */
	struct ktune_miss bad[2] = { again, again };
	bad[1].key.dtype = (ktune_dtype)9;
	assert_int_equal(ktune__db_put_misses(db, &a100, bad, 2, &e), KTUNE_ERR_INVALID);
	s.n = 0;
	assert_int_equal(ktune__db_misses(db, &a100, keep_miss, &s, &e), KTUNE_OK);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.m[0].calls, 5);
	ktune__db_close(db);
}

/* A reader opens a schema 5 file as it is: its trials read, it has no tunings and no misses. */
static void test_db__reader_of_schema_5_sees_no_tunings(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result r;
	struct seen_tunings seen = { .n = 0 };
	struct seen_trials trials = { .n = 0 };
	struct seen_misses misses = { .n = 0 };
	struct ktune_db *db;

	make_db(t->db, 1);
	raw_exec(t->db, "DROP TABLE measurements; DROP TABLE tunings; DROP TABLE misses;"
			"ALTER TABLE trials DROP COLUMN tuning_id; ALTER TABLE trials DROP COLUMN screen_us;"
			"PRAGMA user_version = 5;");
	sample_result(&r);
	assert_int_equal(ktune__db_open_read(t->db, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_version(db), 5);
	assert_int_equal(ktune__db_tunings(db, &r.device, &r.key, keep_tuning, &seen, &e), KTUNE_OK);
	assert_int_equal(seen.n, 0);
	assert_int_equal(ktune__db_trials(db, &r.device, &r.key, 0, keep_trial, &trials, &e), KTUNE_OK);
	assert_int_equal(trials.n, 1);
	assert_same_double(trials.t[0].time_us, 10);
	assert_int_equal(ktune__db_misses(db, NULL, keep_miss, &misses, &e), KTUNE_OK);
	assert_int_equal(misses.n, 0);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "PRAGMA user_version"), 5); /* read, never migrated */
}

static void test_db__put_replaces_result_for_same_key(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result r, out;
	struct ktune_trial tr;
	struct ktune_db *db = open_db(t->db);
	long results = 0, trials = 0;

	sample_result(&r);
	sample_trial(&tr, &r, KTUNE_TRIAL_OK, r.config);
	assert_int_equal(ktune__db_put_result(db, &r, &tr, 1, &e), KTUNE_OK);

	strcpy(r.config, "BLOCK_M=128,BLOCK_N=256");
	r.time_us = 9.5;
	r.candidates = 400;
	sample_trial(&tr, &r, KTUNE_TRIAL_OK, r.config);
	assert_int_equal(ktune__db_put_result(db, &r, &tr, 1, &e), KTUNE_OK);

	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 1);
	assert_same_result(&r, &out);
	assert_string_equal(out.config, "BLOCK_M=128,BLOCK_N=256");
	/* One result for the key; trials accumulate; one device row. */
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	assert_int_equal(trials, 2);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM devices"), 1);
}

static void test_db__get_missing_returns_zero(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result r, out;
	struct ktune_db *db = open_db(t->db);

	sample_result(&r);
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 0);
	assert_int_equal(ktune__db_put_result(db, &r, NULL, 0, &e), KTUNE_OK);
	r.key.k = 4096;
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 0);

	/* A key that cannot exist is an error, not a miss. */
	r.key.variant[1] = 'x';
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), KTUNE_ERR_INVALID);
	ktune__db_close(db);
}

/* Each field of the key and of the device makes a different row. */
static void test_db__key_fields_tell_results_apart(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result base, r, out;
	struct ktune_db *db = open_db(t->db);
	long results = 0;
	int i;

	sample_result(&base);
	for (i = 0; i < 10; i++) {
		r = base;
		switch (i) {
		case 1: r.key.dtype = KTUNE_F16; break;
		case 2: r.key.variant[0] = 't'; break;
		case 3: r.key.variant[1] = 'n'; break;
		case 4: r.key.m = 17; break;
		case 5: r.key.n = 4097; break;
		case 6: r.key.k = 14337; break;
		case 7: r.key.aligned = 0; break;
		case 8: r.device.sm_count = 114; break;
		case 9: strcpy(r.device.arch, "sm_90a"); break;
		}
		snprintf(r.config, sizeof(r.config), "variant=%d", i);
		assert_int_equal(ktune__db_put_result(db, &r, NULL, 0, &e), KTUNE_OK);
	}
	assert_int_equal(ktune__db_count(db, &results, NULL, &e), KTUNE_OK);
	assert_int_equal(results, 10);

	r = base;
	r.key.aligned = 0;
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 1);
	assert_string_equal(out.config, "variant=7");
	assert_int_equal(out.key.aligned, 0);
	r = base;
	r.key.dtype = KTUNE_F16;
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 1);
	assert_string_equal(out.config, "variant=1");
	assert_int_equal(out.key.dtype, KTUNE_F16);
	ktune__db_close(db);
}

/* Collects the config of each result a query returns, comma-separated. */
struct seen {
	char list[512];
	int calls, stop_at;
};

static int collect(const struct ktune_result *r, void *arg)
{
	struct seen *s = arg;
	size_t n = strlen(s->list);

	snprintf(s->list + n, sizeof(s->list) - n, "%s%s", n ? "," : "", r->config);
	s->calls++;
	return s->calls == s->stop_at ? 7 : 0;
}

static const char *run_query(struct ktune_db *db, const struct ktune_filter *f, struct seen *s)
{
	struct ktune_err e = { "" };

	memset(s, 0, sizeof(*s));
	if (ktune__db_query(db, f, collect, s, &e) != KTUNE_OK)
		fail_msg("query: %s", e.msg);
	return s->list;
}

static void put_labelled(struct ktune_db *db, const char *label, const char *name,
			 const char *arch, int sms, ktune_dtype dtype, const char *layout,
			 int64_t m, int64_t n, int aligned)
{
	struct ktune_err e = { "" };
	struct ktune_result r;

	sample_result(&r);
	strcpy(r.config, label);
	strcpy(r.device.name, name);
	strcpy(r.device.arch, arch);
	r.device.sm_count = sms;
	r.key.dtype = dtype;
	r.key.variant[0] = layout[0];
	r.key.variant[1] = layout[1];
	r.key.m = m;
	r.key.n = n;
	r.key.k = 4096;
	r.key.aligned = aligned;
	if (ktune__db_put_result(db, &r, NULL, 0, &e) != KTUNE_OK)
		fail_msg("put %s: %s", label, e.msg);
}

static void test_db__query_filters(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_filter f;
	struct seen s;
	struct ktune_db *db = open_db(t->db);
	const char *h100 = "NVIDIA H100 80GB HBM3";

	/* Inserted out of order; the query sorts. */
	put_labelled(db, "D", "NVIDIA H200", "sm_90", 132, KTUNE_F16, "nt", 16, 4096, 1);
	put_labelled(db, "A", h100, "sm_90", 132, KTUNE_F16, "nt", 16, 4096, 1);
	put_labelled(db, "C", h100, "sm_90", 132, KTUNE_F16, "nn", 128, 4096, 1);
	put_labelled(db, "E", "NVIDIA A100-SXM4-80GB", "sm_80", 108, KTUNE_F16, "nt", 16, 8192, 1);
	put_labelled(db, "B", h100, "sm_90", 132, KTUNE_BF16, "nt", 16, 4096, 1);
	put_labelled(db, "F", h100, "sm_90", 132, KTUNE_F16, "nt", 16, 4096, 0);

	assert_string_equal(run_query(db, NULL, &s), "E,B,C,F,A,D");
	memset(&f, 0, sizeof(f));
	assert_string_equal(run_query(db, &f, &s), "E,B,C,F,A,D");

	strcpy(f.device, "H100");
	assert_string_equal(run_query(db, &f, &s), "B,C,F,A");
	strcpy(f.device, "NVIDIA");
	assert_string_equal(run_query(db, &f, &s), "E,B,C,F,A,D");
	strcpy(f.device, "%"); /* a substring, not a LIKE pattern */
	assert_string_equal(run_query(db, &f, &s), "");

	memset(&f, 0, sizeof(f));
	strcpy(f.arch, "sm_80");
	assert_string_equal(run_query(db, &f, &s), "E");
	strcpy(f.arch, "sm_8"); /* exact */
	assert_string_equal(run_query(db, &f, &s), "");

	memset(&f, 0, sizeof(f));
	strcpy(f.op, "gemm");
	assert_string_equal(run_query(db, &f, &s), "E,B,C,F,A,D");
	strcpy(f.op, "conv");
	assert_string_equal(run_query(db, &f, &s), "");

	memset(&f, 0, sizeof(f));
	f.has_dtype = 1;
	f.dtype = KTUNE_BF16;
	assert_string_equal(run_query(db, &f, &s), "B");
	f.dtype = KTUNE_F16; /* 0, yet a filter because has_dtype is set */
	assert_string_equal(run_query(db, &f, &s), "E,C,F,A,D");

	memset(&f, 0, sizeof(f));
	strcpy(f.layout, "nn");
	assert_string_equal(run_query(db, &f, &s), "C");
	strcpy(f.layout, "NT");
	assert_string_equal(run_query(db, &f, &s), "E,B,F,A,D");

	memset(&f, 0, sizeof(f));
	f.m = 128;
	assert_string_equal(run_query(db, &f, &s), "C");
	f.m = 0;
	f.n = 8192;
	assert_string_equal(run_query(db, &f, &s), "E");
	f.n = 0;
	f.k = 4096;
	assert_string_equal(run_query(db, &f, &s), "E,B,C,F,A,D");
	f.k = 4095;
	assert_string_equal(run_query(db, &f, &s), "");

	/* Filters combine. */
	memset(&f, 0, sizeof(f));
	strcpy(f.device, "H100");
	f.has_dtype = 1;
	f.dtype = KTUNE_F16;
	f.m = 16;
	strcpy(f.layout, "nt");
	assert_string_equal(run_query(db, &f, &s), "F,A");

	/* A malformed filter is an error. */
	memset(&f, 0, sizeof(f));
	strcpy(f.layout, "xy");
	assert_int_equal(ktune__db_query(db, &f, collect, &s, &e), KTUNE_ERR_INVALID);
	memset(&f, 0, sizeof(f));
	f.has_dtype = 1;
	f.dtype = (ktune_dtype)9;
	assert_int_equal(ktune__db_query(db, &f, collect, &s, &e), KTUNE_ERR_INVALID);
	ktune__db_close(db);
}

static void test_db__query_stops_when_callback_returns_nonzero(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct seen s;
	struct ktune_db *db;

	make_db(t->db, 5);
	db = open_db(t->db);
	memset(&s, 0, sizeof(s));
	s.stop_at = 2;
	assert_int_equal(ktune__db_query(db, NULL, collect, &s, &e), 7);
	assert_int_equal(s.calls, 2);
	assert_string_equal(s.list, "BLOCK_M=64,BLOCK_M=65");
	ktune__db_close(db);
}

/* A put that fails part way leaves the database as it was: no result, no trial, no device. */
static void test_db__failed_put_writes_nothing(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result r, replacement, out;
	struct ktune_trial tr[3];
	struct ktune_db *db = open_db(t->db);
	long results = -1, trials = -1;

	sample_result(&r);
	sample_trial(&tr[0], &r, KTUNE_TRIAL_OK, "a");
	sample_trial(&tr[1], &r, KTUNE_TRIAL_OK, "b");
	sample_trial(&tr[2], &r, KTUNE_TRIAL_OK, "c");
	tr[2].key.dtype = (ktune_dtype)9;
	assert_int_equal(ktune__db_put_result(db, &r, tr, 3, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "trial 2"));
	assert_non_null(strstr(e.msg, t->db));
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 0);
	assert_int_equal(trials, 0);

	/* A stored result survives a failed replacement. */
	assert_int_equal(ktune__db_put_result(db, &r, tr, 1, &e), KTUNE_OK);
	replacement = r;
	strcpy(replacement.config, "new");
	assert_int_equal(ktune__db_put_result(db, &replacement, tr, 3, &e), KTUNE_ERR_INVALID);
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 1);
	assert_string_equal(out.config, r.config);
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	assert_int_equal(trials, 1);

	/* Bad results are refused before anything is written. */
	replacement = r;
	replacement.time_us = NAN;
	assert_int_equal(ktune__db_put_result(db, &replacement, NULL, 0, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "time_us"));
	replacement = r;
	replacement.key.m = 0;
	assert_int_equal(ktune__db_put_result(db, &replacement, NULL, 0, &e), KTUNE_ERR_INVALID);
	replacement = r;
	replacement.device.arch[0] = '\0';
	assert_int_equal(ktune__db_put_result(db, &replacement, NULL, 0, &e), KTUNE_ERR_INVALID);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM devices"), 1);
}

static void test_db__sql_strings_round_trip_verbatim(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result r, out;
	struct ktune_trial tr;
	struct ktune_filter f;
	struct seen s;
	struct ktune_db *db = open_db(t->db);
	long results = 0, trials = 0;

	sample_result(&r);
	strcpy(r.config, "x'); DROP TABLE results;--");
	strcpy(r.family, "gemm\"; DELETE FROM devices; --");
	strcpy(r.device.name, "O'Brien GPU'; DROP TABLE devices;--");
	strcpy(r.protocol, "%s%n %d ? :name ?1 \\ \xc3\xa9");
	sample_trial(&tr, &r, KTUNE_TRIAL_WRONG, "'); DROP TABLE trials;--");
	/* the op is one of the registry's, not free text */
	strcpy(r.key.op, "gemm'--");
	assert_int_equal(ktune__db_put_result(db, &r, &tr, 1, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "gemm'--"));
	strcpy(r.key.op, "gemm");
	strcpy(tr.key.op, "gemm");
	strcpy(tr.message, "it said \"'\" and then ';'");
	assert_int_equal(ktune__db_put_result(db, &r, &tr, 1, &e), KTUNE_OK);

	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &out, &e), 1);
	assert_same_result(&r, &out);
	memset(&f, 0, sizeof(f));
	strcpy(f.device, "O'Brien");
	strcpy(f.op, "gemm");
	assert_string_equal(run_query(db, &f, &s), r.config);
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	assert_int_equal(trials, 1);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM trials"
				  " WHERE config = ''') ; DROP TABLE trials;--'"),
			 0);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM trials"
				  " WHERE config = '''); DROP TABLE trials;--'"),
			 1);
}

/* The version-1 schema as shipped, written by hand so that the test does not trust db.c. */
static const char v1_schema[] =
	"CREATE TABLE devices (id INTEGER PRIMARY KEY, name TEXT NOT NULL, arch TEXT NOT NULL,"
	" sm_count INTEGER NOT NULL, UNIQUE (name, arch, sm_count));"
	"CREATE TABLE results (device_id INTEGER NOT NULL REFERENCES devices (id),"
	" op TEXT NOT NULL, dtype TEXT NOT NULL, layout TEXT NOT NULL, m INTEGER NOT NULL,"
	" n INTEGER NOT NULL, k INTEGER NOT NULL, aligned INTEGER NOT NULL, family TEXT NOT NULL,"
	" config TEXT NOT NULL, template_hash TEXT NOT NULL, time_us REAL NOT NULL,"
	" tflops REAL NOT NULL, cublas_us REAL NOT NULL, err_fro REAL NOT NULL,"
	" err_max REAL NOT NULL, candidates INTEGER NOT NULL, tune_s REAL NOT NULL,"
	" nvrtc_version TEXT NOT NULL, driver_version TEXT NOT NULL, ktune_version TEXT NOT NULL,"
	" protocol TEXT NOT NULL, created_at TEXT NOT NULL,"
	" PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned));"
	"CREATE TABLE trials (id INTEGER PRIMARY KEY,"
	" device_id INTEGER NOT NULL REFERENCES devices (id), op TEXT NOT NULL,"
	" dtype TEXT NOT NULL, layout TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL,"
	" k INTEGER NOT NULL, aligned INTEGER NOT NULL, family TEXT NOT NULL, config TEXT NOT NULL,"
	" template_hash TEXT NOT NULL, status TEXT NOT NULL, time_us REAL, err_fro REAL,"
	" err_max REAL, message TEXT NOT NULL, created_at TEXT NOT NULL);";

static void test_db__migrates_version_1(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result want, out;
	struct ktune_db *db;
	long results = 0, trials = 0;

	raw_exec(t->db, v1_schema);
	raw_exec(t->db,
		 "INSERT INTO devices (id, name, arch, sm_count) VALUES (5, 'NVIDIA H100 80GB HBM3', 'sm_90', 132);"
		 "INSERT INTO results VALUES (5, 'gemm', 'bf16', 'nt', 16, 4096, 14336, 1, 'gemm',"
		 " 'BLOCK_M=64', 'abc123', 12.25, 153.5, 14.75, 1e-05, 0.0078125, 314, 42.5,"
		 " '12.4', '550.54.15', '0.0.9', 'events;median', '2024-05-01T10:20:30Z');"
		 "INSERT INTO trials (device_id, op, dtype, layout, m, n, k, aligned, family, config,"
		 " template_hash, status, time_us, err_fro, err_max, message, created_at)"
		 " VALUES (5, 'gemm', 'bf16', 'nt', 16, 4096, 14336, 1, 'gemm', 'BLOCK_M=64', 'abc123',"
		 " 'ok', 12.25, 1e-05, 0.0078125, '', '2024-05-01T10:20:30Z');"
		 "PRAGMA user_version = 1;");

	db = open_db(t->db);
	sample_result(&want);
	strcpy(want.config, "BLOCK_M=64");
	strcpy(want.template_hash, "abc123");
	want.tflops = 153.5;
	want.err_fro = 1e-05;
	strcpy(want.ktune_version, "0.0.9");
	strcpy(want.protocol, "events;median");
	want.p20_us = 0;
	want.p80_us = 0;
	memset(&out, 0x55, sizeof(out));
	assert_int_equal(ktune__db_get_result(db, &want.device, &want.key, &out, &e), 1);
	assert_same_result(&want, &out);
	assert_string_equal(out.created_at, "2024-05-01T10:20:30Z");
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	assert_int_equal(trials, 1);

	/* The migrated file takes new writes with the new columns. */
	want.p20_us = 11.5;
	want.p80_us = 13.5;
	assert_int_equal(ktune__db_put_result(db, &want, NULL, 0, &e), KTUNE_OK);
	assert_int_equal(ktune__db_get_result(db, &want.device, &want.key, &out, &e), 1);
	assert_same_result(&want, &out);
	ktune__db_close(db);

	assert_int_equal(raw_long(t->db, "PRAGMA user_version"), KTUNE_DB_SCHEMA_VERSION);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM pragma_table_info('trials')"
				  " WHERE name IN ('nvrtc_version', 'driver_version')"),
			 2);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM pragma_table_info('results')"
				  " WHERE name IN ('p20_us', 'p80_us') AND \"notnull\" = 1"
				  " AND dflt_value = '0'"),
			 2);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM sqlite_master"
				  " WHERE type = 'index' AND name = 'trials_key'"),
			 1);
	assert_int_equal(raw_long(t->db, "SELECT id FROM devices"), 5);
}

/* Version 3 as shipped: version 1 and the changes of migrations 2 and 3, in WAL mode. */
static const char v2_v3_changes[] =
	"ALTER TABLE results ADD COLUMN p20_us REAL NOT NULL DEFAULT 0;"
	"ALTER TABLE results ADD COLUMN p80_us REAL NOT NULL DEFAULT 0;"
	"CREATE INDEX trials_key ON trials (device_id, op, dtype, layout, m, n, k, aligned);"
	"ALTER TABLE trials ADD COLUMN nvrtc_version TEXT NOT NULL DEFAULT '';"
	"ALTER TABLE trials ADD COLUMN driver_version TEXT NOT NULL DEFAULT '';"
	"PRAGMA journal_mode = WAL;"
	"PRAGMA user_version = 3;";

static void test_db__migrates_version_3(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_result want, out;
	struct ktune_db *db;
	char owner[KTUNE_CLAIM_OWNER_MAX];
	long results = 0, trials = 0;

	raw_exec(t->db, v1_schema);
	raw_exec(t->db, v2_v3_changes);
	raw_exec(t->db,
		 "INSERT INTO devices (id, name, arch, sm_count) VALUES (5, 'NVIDIA H100 80GB HBM3', 'sm_90', 132);"
		 "INSERT INTO results (device_id, op, dtype, layout, m, n, k, aligned, family, config,"
		 " template_hash, time_us, tflops, cublas_us, err_fro, err_max, candidates, tune_s,"
		 " nvrtc_version, driver_version, ktune_version, protocol, created_at, p20_us, p80_us)"
		 " VALUES (5, 'gemm', 'bf16', 'nt', 16, 4096, 14336, 1, 'gemm', 'BLOCK_M=64', 'abc123',"
		 " 12.25, 153.5, 14.75, 1e-05, 0.0078125, 314, 42.5, '12.4', '550.54.15', '0.1.0',"
		 " 'events;median', '2025-05-01T10:20:30Z', 12.0625, 12.5);"
		 "INSERT INTO trials (device_id, op, dtype, layout, m, n, k, aligned, family, config,"
		 " template_hash, status, time_us, err_fro, err_max, message, created_at,"
		 " nvrtc_version, driver_version)"
		 " VALUES (5, 'gemm', 'bf16', 'nt', 16, 4096, 14336, 1, 'gemm', 'BLOCK_M=64', 'abc123',"
		 " 'ok', 12.25, 1e-05, 0.0078125, '', '2025-05-01T10:20:30Z', '12.4', '550.54.15');");
	assert_int_equal(raw_long(t->db, "PRAGMA user_version"), 3);

	db = open_db(t->db);
	sample_result(&want);
	strcpy(want.config, "BLOCK_M=64");
	strcpy(want.template_hash, "abc123");
	want.tflops = 153.5;
	want.err_fro = 1e-05;
	strcpy(want.protocol, "events;median");
	memset(&out, 0x55, sizeof(out));
	assert_int_equal(ktune__db_get_result(db, &want.device, &want.key, &out, &e), 1);
	assert_same_result(&want, &out); /* measure_note "": a result from before was clean */
	assert_string_equal(out.created_at, "2025-05-01T10:20:30Z");
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	assert_int_equal(trials, 1);

	/* The migrated file takes claims and notes. */
	assert_int_equal(ktune__db_claim_owner(owner, sizeof(owner), &e), KTUNE_OK);
	assert_int_equal(ktune__db_claim_key(db, &want.device, &want.key, "abc123", owner, 0, &e),
			 KTUNE_CLAIM_DONE);
	assert_int_equal(ktune__db_claim_key(db, &want.device, &want.key, "def456", owner, 0, &e),
			 KTUNE_CLAIM_TAKEN);
	strcpy(want.template_hash, "def456");
	strcpy(want.measure_note, "disturbed: another process (pid 12) used the GPU");
	assert_int_equal(ktune__db_put_result(db, &want, NULL, 0, &e), KTUNE_OK);
	assert_int_equal(ktune__db_get_result(db, &want.device, &want.key, &out, &e), 1);
	assert_same_result(&want, &out);
	ktune__db_close(db);

	assert_int_equal(raw_long(t->db, "PRAGMA user_version"), KTUNE_DB_SCHEMA_VERSION);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM pragma_table_info('results')"
				  " WHERE name = 'measure_note' AND \"notnull\" = 1"
				  " AND dflt_value = ''''''"),
			 1);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM pragma_table_info('claims')"), 14);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 0);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM trials"), 1);
}

struct failed {
	char configs[8][64];
	int n;
};

static int note_failed(const char *config, const char *status, void *arg)
{
	struct failed *f = arg;
	(void)status;
	snprintf(f->configs[f->n++], sizeof(f->configs[0]), "%s", config);
	return 0;
}

/* The negative cache: failures for this template and toolchain, not ok or pruned trials. */
static void test_db__failed_configs_for_template_and_toolchain(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_db *db = open_db(t->db);
	struct ktune_result r;
	struct ktune_err e;
	struct failed f = { .n = 0 };
	static const struct {
		const char *config, *status, *hash, *nvrtc;
	} rows[] = {
		{ "A", "compile_error", "h1", "13.0" }, { "B", "wrong", "h1", "13.0" },
		{ "C", "ok", "h1", "13.0" },           { "D", "pruned", "h1", "13.0" },
		{ "E", "launch_error", "h2", "13.0" }, { "F", "timeout", "h1", "12.9" },
		{ "G", "crashed", "h1", "13.0" },      { "B", "wrong", "h1", "13.0" },
	};
	struct ktune_trial trials[8];

	sample_result(&r);
	for (int i = 0; i < 8; i++) {
		memset(&trials[i], 0, sizeof(trials[i]));
		trials[i].key = r.key;
		strcpy(trials[i].family, "gemm");
		strcpy(trials[i].config, rows[i].config);
		strcpy(trials[i].status, rows[i].status);
		strcpy(trials[i].template_hash, rows[i].hash);
		strcpy(trials[i].nvrtc_version, rows[i].nvrtc);
		strcpy(trials[i].driver_version, "13.0");
	}
	/* a key whose every candidate failed stores its trials without a result */
	assert_int_equal(ktune__db_put_trials(db, &r.device, trials, 8, &e), KTUNE_OK);
	assert_int_equal(ktune__db_get_result(db, &r.device, &r.key, &r, &e), 0);
	assert_int_equal(ktune__db_failed_configs(db, &r.device, &r.key, "h1", "13.0", "13.0",
						  note_failed, &f, &e), 0);
	assert_int_equal(f.n, 3); /* A, B (once), G: not the ok, pruned, other-template, other-NVRTC ones */
	assert_string_equal(f.configs[0], "A");
	assert_string_equal(f.configs[1], "B");
	assert_string_equal(f.configs[2], "G");

	/* another driver: nothing is known to fail */
	f.n = 0;
	assert_int_equal(ktune__db_failed_configs(db, &r.device, &r.key, "h1", "13.0", "13.1",
						  note_failed, &f, &e), 0);
	assert_int_equal(f.n, 0);
	ktune__db_close(db);
}

static void test_db__open_rejects_newer_schema(void **state)
{
	struct test_scratch *t = *state;

	/* Not in WAL mode, so that turning WAL on before the check would show. */
	raw_exec(t->db, v1_schema);
	raw_exec(t->db, "PRAGMA user_version = 8;");
	assert_refused_untouched(t, t->db,
				 "has schema version 8, newer than this ktune (6): upgrade ktune");
}

static void test_db__open_rejects_newer_schema_in_wal_mode(void **state)
{
	struct test_scratch *t = *state;

	make_db(t->db, 2);
	raw_exec(t->db, "PRAGMA user_version = 7;");
	assert_refused_untouched(t, t->db, "schema version 7, newer than this ktune (6)");
}

static void test_db__open_rejects_random_bytes(void **state)
{
	struct test_scratch *t = *state;
	unsigned char junk[8192];
	uint32_t x = 12345;
	size_t i;

	for (i = 0; i < sizeof(junk); i++) {
		x = x * 1103515245u + 12345u;
		junk[i] = (unsigned char)(x >> 16);
	}
	write_bytes(t->db, junk, sizeof(junk));
	assert_refused_untouched(t, t->db, "file is not a database");
}

static void test_db__open_rejects_text_file(void **state)
{
	struct test_scratch *t = *state;
	const char *text = "gemm f16 nt 16x4096x4096: BLOCK_M=64\nthis is not a database\n";

	write_bytes(t->db, text, strlen(text));
	assert_refused_untouched(t, t->db, "file is not a database");

	/* Shorter than the SQLite magic. */
	write_bytes(t->db, "SQLite", 6);
	assert_refused_untouched(t, t->db, "file is not a database");
}

static void test_db__open_rejects_truncated_file(void **state)
{
	struct test_scratch *t = *state;
	unsigned char *whole;
	char copy[TEST_PATH_MAX];
	size_t len;

	make_db(t->db, 50);
	whole = read_bytes(t->db, &len);
	assert_true(len > 3 * 4096);
	snprintf(copy, sizeof(copy), "%s/copy.db", t->dir);

	write_bytes(copy, whole, 1000);
	assert_refused_untouched(t, copy, "file is truncated");
	/* Cut on a page boundary: only the header's page count tells. */
	write_bytes(copy, whole, 4096);
	assert_refused_untouched(t, copy, "file is truncated");
	write_bytes(copy, whole, 50);
	assert_refused_untouched(t, copy, "file is truncated");
	free(whole);

	/* The original is fine. */
	ktune__db_close(open_db(t->db));
}

static void test_db__open_rejects_foreign_sqlite(void **state)
{
	struct test_scratch *t = *state;
	char other[TEST_PATH_MAX];

	raw_exec(t->db, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);"
			"INSERT INTO notes (body) VALUES ('keep me');");
	assert_refused_untouched(t, t->db, "not a ktune database");

	snprintf(other, sizeof(other), "%s/other.db", t->dir);
	raw_exec(other, "CREATE TABLE results (x); PRAGMA user_version = 1;");
	assert_refused_untouched(t, other, "not a ktune database");

	/* A directory is not a database either. */
	{
		struct ktune_err e = { "" };
		struct ktune_db *db = NULL;

		assert_int_equal(ktune__db_open(t->dir, 1, &db, &e), KTUNE_ERR_DB);
		assert_non_null(strstr(e.msg, t->dir));
	}
}

static void test_db__unknown_dtype_in_row_is_an_error(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct seen s;
	struct ktune_db *db;

	make_db(t->db, 1);
	raw_exec(t->db, "UPDATE results SET dtype = 'f64'");
	db = open_db(t->db);
	memset(&s, 0, sizeof(s));
	assert_int_equal(ktune__db_query(db, NULL, collect, &s, &e), KTUNE_ERR_DB);
	assert_int_equal(s.calls, 0);
	if (!strstr(e.msg, t->db) || !strstr(e.msg, "results row has unknown dtype 'f64'"))
		fail_msg("message: %s", e.msg);
	ktune__db_close(db);

	raw_exec(t->db, "UPDATE results SET dtype = 'f16', layout = 'ntx'");
	db = open_db(t->db);
	assert_int_equal(ktune__db_query(db, NULL, collect, &s, &e), KTUNE_ERR_DB);
	assert_non_null(strstr(e.msg, "unknown variant 'ntx'"));
	ktune__db_close(db);

	/* Text longer than its field is refused rather than cut. */
	raw_exec(t->db, "UPDATE results SET layout = 'nt', config = printf('%.300c', 'x')");
	db = open_db(t->db);
	assert_int_equal(ktune__db_query(db, NULL, collect, &s, &e), KTUNE_ERR_DB);
	assert_non_null(strstr(e.msg, "config"));
	ktune__db_close(db);
}

/* Tables, columns and indexes of a database, one per line, to compare schemas. */
static void describe_schema(sqlite3 *h, char *buf, size_t len)
{
	sqlite3_stmt *objs = NULL, *cols = NULL;
	size_t n = 0;

	buf[0] = '\0';
	assert_int_equal(sqlite3_prepare_v2(h, "SELECT type, name, tbl_name FROM sqlite_master"
					    " ORDER BY type, name", -1, &objs, NULL), SQLITE_OK);
	while (sqlite3_step(objs) == SQLITE_ROW) {
		const char *type = (const char *)sqlite3_column_text(objs, 0);
		const char *name = (const char *)sqlite3_column_text(objs, 1);

		n += (size_t)snprintf(buf + n, len - n, "%s %s on %s\n", type, name,
				      (const char *)sqlite3_column_text(objs, 2));
		assert_true(n < len);
		if (strcmp(type, "table") == 0)
			assert_int_equal(sqlite3_prepare_v2(h,
				"SELECT name, type, \"notnull\", quote(dflt_value), pk"
				" FROM pragma_table_info(?1)", -1, &cols, NULL), SQLITE_OK);
		else
			assert_int_equal(sqlite3_prepare_v2(h,
				"SELECT name, '', 0, '', seqno FROM pragma_index_info(?1)",
				-1, &cols, NULL), SQLITE_OK);
		sqlite3_bind_text(cols, 1, name, -1, SQLITE_TRANSIENT);
		while (sqlite3_step(cols) == SQLITE_ROW) {
			n += (size_t)snprintf(buf + n, len - n, "  %s %s notnull=%d default=%s pk=%d\n",
					      (const char *)sqlite3_column_text(cols, 0),
					      (const char *)sqlite3_column_text(cols, 1),
					      sqlite3_column_int(cols, 2),
					      (const char *)sqlite3_column_text(cols, 3),
					      sqlite3_column_int(cols, 4));
			assert_true(n < len);
		}
		sqlite3_finalize(cols);
	}
	sqlite3_finalize(objs);
}

/* db/schema.sql, found from KTUNE_SOURCE_DIR or from this file's path. */
static void schema_sql_path(char *buf, size_t len)
{
#ifdef KTUNE_SOURCE_DIR
	snprintf(buf, len, "%s/db/schema.sql", KTUNE_SOURCE_DIR);
#else
	static const char self[] = "tests/unit/test-db.c";
	const char *f = __FILE__;
	size_t n = strlen(f);

	assert_true(n >= strlen(self) && strcmp(f + n - strlen(self), self) == 0);
	snprintf(buf, len, "%.*sdb/schema.sql", (int)(n - strlen(self)), f);
#endif
}

static void test_db__schema_sql_matches_migrations(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[4096], *sql = NULL, *err = NULL;
	char *want, *got;
	sqlite3 *h = NULL;

	schema_sql_path(path, sizeof(path));
	if (ktune__read_file(path, 1 << 20, &sql, NULL, &e) != KTUNE_OK)
		fail_msg("%s (compile with -DKTUNE_SOURCE_DIR='\"<repo>\"' or an absolute source path)",
			 e.msg);
	want = calloc(1, 32768);
	got = calloc(1, 32768);
	assert_non_null(want);
	assert_non_null(got);

	assert_int_equal(sqlite3_open(":memory:", &h), SQLITE_OK);
	if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("schema.sql: %s", err);
	describe_schema(h, want, 32768);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
	assert_non_null(strstr(want, "table results on results\n"));

	make_db(t->db, 0);
	assert_int_equal(sqlite3_open(t->db, &h), SQLITE_OK);
	describe_schema(h, got, 32768);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
	assert_string_equal(got, want);
	assert_non_null(strstr(sql, "PRAGMA user_version = 6;"));
	free(sql);
	free(want);
	free(got);
}

static void test_db__reopen_keeps_data_and_version(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_db *db, *second;
	long results = 0;

	make_db(t->db, 3);
	db = open_db(t->db);
	/* Two connections at once, as two processes would have. */
	second = open_db(t->db);
	assert_int_equal(ktune__db_count(second, &results, NULL, &e), KTUNE_OK);
	assert_int_equal(results, 3);
	ktune__db_close(second);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "PRAGMA user_version"), KTUNE_DB_SCHEMA_VERSION);
}

static void test_db__close_null_is_noop(void **state)
{
	(void)state;
	ktune__db_close(NULL);
	assert_null(ktune__db_path(NULL));
}

#define DB_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup_tmp, test_scratch_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		DB_TEST(test_db__open_creates_database_and_directory),
		DB_TEST(test_db__open_without_create_of_missing_file_fails),
		DB_TEST(test_db__open_without_create_of_empty_file_writes_nothing),
		DB_TEST(test_db__failed_configs_for_template_and_toolchain),
		DB_TEST(test_db__open_turns_on_wal),
		DB_TEST(test_db__result_round_trips_every_field),
		DB_TEST(test_db__trials_are_stored_with_the_result),
		DB_TEST(test_db__put_replaces_result_for_same_key),
		DB_TEST(test_db__tuning_round_trips_with_trials_and_measurements),
		DB_TEST(test_db__misses_add_up_over_recordings),
		DB_TEST(test_db__reader_of_schema_5_sees_no_tunings),
		DB_TEST(test_db__get_missing_returns_zero),
		DB_TEST(test_db__key_fields_tell_results_apart),
		DB_TEST(test_db__query_filters),
		DB_TEST(test_db__query_stops_when_callback_returns_nonzero),
		DB_TEST(test_db__failed_put_writes_nothing),
		DB_TEST(test_db__sql_strings_round_trip_verbatim),
		DB_TEST(test_db__migrates_version_1),
		DB_TEST(test_db__migrates_version_3),
		DB_TEST(test_db__open_rejects_newer_schema),
		DB_TEST(test_db__open_rejects_newer_schema_in_wal_mode),
		DB_TEST(test_db__open_rejects_random_bytes),
		DB_TEST(test_db__open_rejects_text_file),
		DB_TEST(test_db__open_rejects_truncated_file),
		DB_TEST(test_db__open_rejects_foreign_sqlite),
		DB_TEST(test_db__unknown_dtype_in_row_is_an_error),
		DB_TEST(test_db__schema_sql_matches_migrations),
		DB_TEST(test_db__reopen_keeps_data_and_version),
		cmocka_unit_test(test_db__close_null_is_noop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
