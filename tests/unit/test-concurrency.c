/*
 * test-concurrency.c - sweeps side by side on one database, without a GPU
 * (through fake-worker): two processes, then one process on two "GPUs".
 * Every key must end with one result tuned once (its trials are one
 * tuning's), and the database must pass integrity_check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "test_util.h"
#include "tuner/tuner.h"

#define BUDGET 6
static const char spec_text[] = "budget: 6\n"
				 "gemm:\n"
				 "  dtypes: [f16, bf16]\n"
				 "  layouts: [nt]\n"
				 "  shapes:\n"
				 "    - {m: [16, 32, 64, 128], n: [256, 512], k: 256}\n";
static char dir[4096];

static int setup(void **state)
{
	(void)state;
	setenv("KTUNE_FAKE_RUN_MS", "3", 1); /* so that the sweeps overlap */
	return test_tmp_dir("concurrency", dir, sizeof(dir));
}

static void load_spec(struct ktune_spec *spec)
{
	struct ktune_err e;
	assert_int_equal(ktune__spec_parse(spec_text, sizeof(spec_text) - 1, "test", spec, &e),
			 KTUNE_OK);
	assert_int_equal(spec->nkeys, 16);
}

static long scalar(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	long v = -1;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_type(st, 0) == SQLITE_TEXT
			    ? !strcmp((const char *)sqlite3_column_text(st, 0), "ok")
			    : sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* One result per key, each key's trials from one tuning, no claims left, integrity ok. */
static void check_database(const char *path, int nkeys)
{
	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(scalar(db, "PRAGMA integrity_check"), 1);
	assert_int_equal(scalar(db, "SELECT count(*) FROM results"), nkeys);
	assert_int_equal(scalar(db, "SELECT count(*) FROM trials"), nkeys * BUDGET);
	assert_int_equal(scalar(db, "SELECT count(*) FROM claims"), 0);
	sqlite3_close(db);
}

static void test_concurrency__two_processes_one_database(void **state)
{
	struct ktune_spec spec = { 0 };
	struct ktune_tune_options o = { .seed = 1, .budget = BUDGET, .finalists = 2, .jobs = 1 };
	char path[4200];
	int zero = 0;
	pid_t pids[2];
	(void)state;

	snprintf(path, sizeof(path), "%s/two.db", dir);
	load_spec(&spec);
	for (int p = 0; p < 2; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			struct ktune_err e;
			char out_path[4300];
			snprintf(out_path, sizeof(out_path), "%s/summary-%d.txt", dir, p);
			FILE *out = fopen(out_path, "w");
			int failed = ktune__sweep(path, test_program("fake-worker"), &zero, 1, &spec, &o,
						  out, &e);
			fclose(out);
			if (failed)
				fprintf(stderr, "sweep %d: %d failed: %s\n", p, failed, failed < 0 ? e.msg : "");
			_exit(failed ? 1 : 0);
		}
	}
	for (int p = 0; p < 2; p++) {
		int st;
		assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
	check_database(path, spec.nkeys);
	/* between them they tuned each key once */
	int tuned_total = 0;
	for (int p = 0; p < 2; p++) {
		char out_path[4300], *text, *line;
		size_t len;
		struct ktune_err e;
		int nkeys, tuned, cached, elsewhere;
		snprintf(out_path, sizeof(out_path), "%s/summary-%d.txt", dir, p);
		assert_int_equal(ktune__read_file(out_path, 1 << 20, &text, &len, &e), KTUNE_OK);
		assert_non_null(line = strstr(text, " keys: "));
		while (line > text && line[-1] != '\n')
			line--;
		assert_int_equal(sscanf(line, "%d keys: %d tuned, %d already tuned, %d tuned by another",
					&nkeys, &tuned, &cached, &elsewhere), 4);
		assert_int_equal(tuned + cached + elsewhere, 16);
		tuned_total += tuned;
		free(text);
	}
	assert_int_equal(tuned_total, 16);
	ktune__spec_free(&spec);
}

/*
 * Two GPUs share one progress stream: every line is whole and says which GPU
 * wrote it (no in-place "\r" updates to run into the other GPU's lines), and
 * the lines that start a key add up to the keys.
 */
static void check_progress(const char *path, int nkeys)
{
	struct ktune_err e;
	char *text;
	size_t len;
	int starts = 0;
	assert_int_equal(ktune__read_file(path, 1 << 22, &text, &len, &e), KTUNE_OK);
	assert_null(strchr(text, '\r'));
	for (char *line = text, *next; *line; line = next) {
		next = strchr(line, '\n');
		assert_non_null(next); /* the last line is whole too */
		*next++ = 0;
		if (!*line)
			continue;
		if (strncmp(line, "[gpu 0] ", 8) && strncmp(line, "[gpu 1] ", 8))
			fail_msg("progress line without its GPU: '%s'", line);
		starts += !strncmp(line + 8, "key ", 4) && !strstr(line, ": already tuned");
	}
	assert_int_equal(starts, nkeys);
	free(text);
}

static void test_concurrency__one_sweep_two_devices(void **state)
{
	struct ktune_spec spec = { 0 };
	struct ktune_tune_options o = { .seed = 1, .budget = BUDGET, .finalists = 2, .jobs = 1 };
	struct ktune_err e;
	int devices[2] = { 0, 1 };
	char path[4200];
	(void)state;

	snprintf(path, sizeof(path), "%s/devices.db", dir);
	load_spec(&spec);
	char progress_path[4200];
	snprintf(progress_path, sizeof(progress_path), "%s/progress.txt", dir);
	o.progress = fopen(progress_path, "w");
	assert_non_null(o.progress);
	FILE *null = fopen("/dev/null", "w");
	assert_int_equal(ktune__sweep(path, test_program("fake-worker"), devices, 2, &spec, &o, null, &e),
			 0);
	fclose(null);
	fclose(o.progress);
	o.progress = NULL;
	check_database(path, spec.nkeys);
	check_progress(progress_path, spec.nkeys);

	/* a second sweep finds everything tuned */
	char *text;
	size_t len;
	char out_path[4200];
	snprintf(out_path, sizeof(out_path), "%s/summary.txt", dir);
	FILE *out = fopen(out_path, "w");
	assert_int_equal(ktune__sweep(path, test_program("fake-worker"), devices, 2, &spec, &o, out, &e),
			 0);
	fclose(out);
	assert_int_equal(ktune__read_file(out_path, 1 << 20, &text, &len, &e), KTUNE_OK);
	assert_non_null(strstr(text, "16 keys: 0 tuned, 16 already tuned"));
	free(text);
	check_database(path, spec.nkeys);
	ktune__spec_free(&spec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_concurrency__two_processes_one_database),
		cmocka_unit_test(test_concurrency__one_sweep_two_devices),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
