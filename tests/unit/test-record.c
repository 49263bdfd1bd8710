/*
 * test-record.c - tune what is used: the runtime's count of the keys it
 * served without a tuned entry (from many threads at once), and what it
 * saves: a misses file (read back, added to, kept whole when several
 * savers race, refused when malformed) and the database.  No GPU: a
 * context is built by hand as test-gemm-op's dispatch tests do.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "db/misses.h"
#include "ops/op.h"
#include "runtime/context.h"
#include "search/spec.h"
#include "test_util.h"

static int setup(void **state)
{
	return test_scratch_setup(state, "ktune-test-record");
}

static const struct ktune_device_id h100 = { "NVIDIA H100 80GB HBM3", "sm_90", 132 };

static struct ktune_key gemm_key(int64_t m, int64_t n, int64_t k, int aligned)
{
	struct ktune_key key = { "gemm", KTUNE_BF16, "nt", m, n, k, aligned };
	return key;
}

/* A key of each op of the registry: its first key of the built-in suite, sizes changed a little. */
static int registry_keys(struct ktune_key *out, int max)
{
	struct ktune_spec suite;
	struct ktune_err e;
	int n = 0;
	assert_int_equal(ktune__spec_default(&suite, &e), KTUNE_OK);
	for (int i = 0; ktune__ops[i] && n < max; i++)
		for (int j = 0; j < suite.nkeys; j++)
			if (!strcmp(suite.keys[j].op, ktune__ops[i]->name)) {
				out[n] = suite.keys[j];
				out[n].aligned = n % 2; /* both classes */
				n++;
				break;
			}
	ktune__spec_free(&suite);
	return n;
}

static void test_record__tuned_sources_are_not_misses(void **state)
{
	(void)state;
	assert_true(ktune__source_tuned("exact"));
	assert_true(ktune__source_tuned("arch"));
	assert_true(ktune__source_tuned("shipped"));
	assert_false(ktune__source_tuned("nearest"));
	assert_false(ktune__source_tuned("default"));
	assert_false(ktune__source_tuned("cublas")); /* a fallback yet to come is a miss too */
	assert_false(ktune__source_tuned(NULL));
}

/* Threads calling as the runtime does: the first call of a key notes it, later ones count on its entry. */
#define THREADS 8
#define KEYS 24
#define CALLS 5000

struct caller {
	struct ktune_record *r;
	int id;
};

static void *call_many(void *arg)
{
	struct caller *c = arg;
	struct ktune_recorded *seen[KEYS] = { NULL };
	for (int i = 0; i < CALLS; i++) {
		int k = (i * 7 + c->id) % KEYS;
		struct ktune_key key = gemm_key(1 + k, 4096, 4096, 1);
		/* each thread resolves the key once (its own table), as contexts sharing nothing would */
		if (!seen[k])
			seen[k] = ktune__record_note(c->r, &key, k % 2 ? "nearest" : "default");
		else
			ktune__record_count(seen[k]);
	}
	return NULL;
}

static void test_record__threads_count_every_call(void **state)
{
	struct ktune_record r;
	struct caller callers[THREADS];
	pthread_t tid[THREADS];
	struct ktune_miss *m;
	struct ktune_err e;
	int n;
	(void)state;

	ktune__record_init(&r);
	for (int t = 0; t < THREADS; t++) {
		callers[t] = (struct caller){ &r, t };
		assert_int_equal(pthread_create(&tid[t], NULL, call_many, &callers[t]), 0);
	}
	/* a snapshot while the calls run is consistent: no key twice, no torn entry */
	assert_int_equal(ktune__record_list(&r, &m, &n, &e), KTUNE_OK);
	assert_true(n <= KEYS);
	free(m);
	for (int t = 0; t < THREADS; t++)
		pthread_join(tid[t], NULL);

	int64_t keys, calls;
	ktune__record_totals(&r, &keys, &calls);
	assert_int_equal(keys, KEYS);
	assert_int_equal(calls, (int64_t)THREADS * CALLS);
	assert_int_equal(ktune__record_list(&r, &m, &n, &e), KTUNE_OK);
	assert_int_equal(n, KEYS);
	int64_t per_key[KEYS] = { 0 };
	for (int t = 0; t < THREADS; t++)
		for (int i = 0; i < CALLS; i++)
			per_key[(i * 7 + t) % KEYS]++;
	for (int i = 0; i < n; i++) {
		assert_int_equal(m[i].key.m, i + 1); /* sorted by key */
		assert_int_equal(m[i].calls, per_key[i]);
		assert_string_equal(m[i].source, i % 2 ? "nearest" : "default");
	}
	free(m);
	ktune__record_free(&r);
}

/* A service that saves from time to time, then at close, counts each call once. */
static void test_record__saves_count_each_call_once(void **state)
{
	struct ktune_record r;
	struct ktune_miss *m;
	struct ktune_err e;
	struct ktune_key a = gemm_key(3, 5, 7, 0), b = gemm_key(9, 11, 13, 0);
	int n;
	(void)state;

	ktune__record_init(&r);
	for (int i = 0; i < 3; i++)
		ktune__record_note(&r, &a, "default");
	ktune__record_note(&r, &b, "model");
	assert_int_equal(ktune__record_unsaved(&r, &m, &n, &e), KTUNE_OK);
	assert_int_equal(n, 2);
	assert_int_equal(m[0].calls + m[1].calls, 4);
	ktune__record_saved(&r, m, n);
	free(m);

	assert_int_equal(ktune__record_unsaved(&r, &m, &n, &e), KTUNE_OK);
	assert_int_equal(n, 0); /* nothing new: nothing to add */
	free(m);

	ktune__record_note(&r, &b, "model");
	ktune__record_note(&r, &b, "model");
	assert_int_equal(ktune__record_unsaved(&r, &m, &n, &e), KTUNE_OK);
	assert_int_equal(n, 1);
	assert_true(ktune__key_same(&m[0].key, &b));
	assert_int_equal(m[0].calls, 2);
	free(m);

	int64_t keys, calls; /* the totals (ktune_get_stats) still count everything */
	ktune__record_totals(&r, &keys, &calls);
	assert_int_equal(keys, 2);
	assert_int_equal(calls, 6);
	ktune__record_free(&r);
}

static void test_record__file_reads_back_and_adds_up(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_key keys[16];
	struct ktune_record r;
	struct ktune_misses_file f;
	struct ktune_miss *m;
	struct ktune_err e;
	char path[TEST_PATH_MAX];
	int n, nkeys = registry_keys(keys, 16);

	int nops = 0;
	while (ktune__ops[nops])
		nops++;
	assert_int_equal(nkeys, nops); /* every op of the registry has a key here */
	ktune__record_init(&r);
	for (int i = 0; i < nkeys; i++)
		for (int c = 0; c <= i; c++)
			ktune__record_note(&r, &keys[i], "default");
	assert_int_equal(ktune__record_list(&r, &m, &n, &e), KTUNE_OK);
	assert_int_equal(n, nkeys);

	snprintf(path, sizeof(path), "%s/misses.yaml", t->dir);
	if (ktune__misses_save(path, &h100, m, n, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(ktune__misses_read(path, &f, &e), KTUNE_OK);
	assert_string_equal(f.device.name, h100.name);
	assert_string_equal(f.device.arch, h100.arch);
	assert_int_equal(f.device.sm_count, h100.sm_count);
	assert_int_equal(f.n, nkeys);
	for (int i = 0; i < nkeys; i++) {
		int j;
		for (j = 0; j < f.n && !ktune__key_same(&f.m[j].key, &keys[i]); j++)
			;
		if (j == f.n)
			fail_msg("key %d (%s) was not read back", i, keys[i].op);
		assert_int_equal(f.m[j].calls, i + 1);
		assert_string_equal(f.m[j].source, "default");
	}
	ktune__misses_file_free(&f);

	/* saved again with one more key: the calls add up, the source is the newer */
	struct ktune_miss more[2] = { m[0], { gemm_key(7, 50257, 768, 0), "nearest", 3, "", "" } };
	snprintf(more[0].source, sizeof(more[0].source), "nearest");
	assert_int_equal(ktune__misses_save(path, &h100, more, 2, &e), KTUNE_OK);
	assert_int_equal(ktune__misses_read(path, &f, &e), KTUNE_OK);
	assert_int_equal(f.n, nkeys + 1);
	int found = 0;
	for (int j = 0; j < f.n; j++) {
		if (ktune__key_same(&f.m[j].key, &m[0].key)) {
			assert_int_equal(f.m[j].calls, 2 * m[0].calls);
			assert_string_equal(f.m[j].source, "nearest");
			found++;
		}
		if (ktune__key_same(&f.m[j].key, &more[1].key)) {
			assert_int_equal(f.m[j].calls, 3);
			assert_int_equal(f.m[j].key.aligned, 0);
			found++;
		}
		if (j > 0) /* saved sorted by key */
			assert_true(ktune__key_compare(&f.m[j - 1].key, &f.m[j].key) < 0);
	}
	assert_int_equal(found, 2);
	ktune__misses_file_free(&f);

	/* another GPU's misses are refused, and the file is left as it was */
	char *before, *after;
	size_t blen, alen;
	struct ktune_device_id a100 = { "NVIDIA A100-SXM4-80GB", "sm_80", 108 };
	assert_int_equal(ktune__read_file(path, 1 << 20, &before, &blen, &e), KTUNE_OK);
	assert_int_equal(ktune__misses_save(path, &a100, m, n, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "another GPU"));
	assert_int_equal(ktune__read_file(path, 1 << 20, &after, &alen, &e), KTUNE_OK);
	assert_int_equal(blen, alen);
	assert_memory_equal(before, after, blen);
	free(before);
	free(after);
	free(m);
	ktune__record_free(&r);
}

/* Processes closing at once save into one file: none loses another's keys. */
struct saver {
	const char *path;
	int id;
	int rc;
};

static void *save_one(void *arg)
{
	struct saver *s = arg;
	struct ktune_miss m = { gemm_key(100 + s->id, 1024, 1024, 1), "default", s->id + 1, "", "" };
	struct ktune_err e;
	for (int round = 0; round < 5 && !s->rc; round++)
		s->rc = ktune__misses_save(s->path, &h100, &m, 1, &e);
	return NULL;
}

static void test_record__concurrent_saves_keep_every_key(void **state)
{
	struct test_scratch *t = *state;
	char path[TEST_PATH_MAX];
	struct saver s[THREADS];
	pthread_t tid[THREADS];
	struct ktune_misses_file f;
	struct ktune_err e;

	snprintf(path, sizeof(path), "%s/shared.yaml", t->dir);
	for (int i = 0; i < THREADS; i++) {
		s[i] = (struct saver){ path, i, 0 };
		assert_int_equal(pthread_create(&tid[i], NULL, save_one, &s[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(tid[i], NULL);
		assert_int_equal(s[i].rc, KTUNE_OK);
	}
	assert_int_equal(ktune__misses_read(path, &f, &e), KTUNE_OK);
	assert_int_equal(f.n, THREADS);
	for (int i = 0; i < f.n; i++) {
		assert_int_equal(f.m[i].key.m, 100 + i);
		assert_int_equal(f.m[i].calls, 5 * (i + 1)); /* five saves each, none lost */
	}
	ktune__misses_file_free(&f);
}

/* A malformed file names its line and what is wrong; nothing is read. */
static void assert_refused(const char *text, const char *want)
{
	struct ktune_misses_file f;
	struct ktune_err e = { "" };
	assert_int_equal(ktune__misses_parse(text, strlen(text), "m.yaml", &f, &e), KTUNE_ERR_PARSE);
	if (!strstr(e.msg, want))
		fail_msg("'%s' lacks '%s'", e.msg, want);
	assert_null(f.m);
	assert_int_equal(f.n, 0);
}

#define HEAD "format: ktune-misses\nversion: 1\ndevice: {name: \"X\", arch: sm_90, sm_count: 132}\nkeys:\n"

static void test_record__file_refuses_bad_input(void **state)
{
	struct ktune_misses_file f;
	struct ktune_err e;
	(void)state;

	/* a good one first: sizes by the op's field names, calls and source optional */
	const char *good = HEAD "  - {op: gemm, dtype: f16, variant: tn, m: 3, n: 5, k: 7, aligned: false}\n"
				"  - {op: glu, dtype: bf16, variant: \"swiglu,fwd\", rows: 4096, cols: 16384, aligned: true, calls: 9}\n";
	assert_int_equal(ktune__misses_parse(good, strlen(good), "m.yaml", &f, &e), KTUNE_OK);
	assert_int_equal(f.n, 2);
	assert_int_equal(f.m[0].calls, 1);
	assert_int_equal(f.m[0].key.k, 7);
	assert_int_equal(f.m[1].key.m, 4096);
	assert_int_equal(f.m[1].key.n, 16384);
	assert_int_equal(f.m[1].calls, 9);
	ktune__misses_file_free(&f);

	assert_refused("format: ktune-export\nversion: 1\ndevice: {name: X, arch: sm_90, sm_count: 1}\nkeys: []\n",
		       "m.yaml:1: format: expected 'ktune-misses'");
	assert_refused("format: ktune-misses\nversion: 2\ndevice: {name: X, arch: sm_90, sm_count: 1}\nkeys: []\n",
		       "m.yaml:2: version 2 is newer");
	assert_refused("format: ktune-misses\nversion: 1\nkeys: []\n", "missing 'device'");
	assert_refused(HEAD "  - {op: conv, dtype: f16, m: 1}\n", "m.yaml:5: keys[0].op: 'conv' is not one of");
	assert_refused(HEAD "  - {op: gemm, dtype: f8, variant: nt, m: 1, n: 1, k: 1, aligned: true}\n",
		       "keys[0].dtype: 'f8' is not one of");
	assert_refused(HEAD "  - {op: gemm, dtype: f16, variant: nx, m: 1, n: 1, k: 1, aligned: true}\n",
		       "m.yaml:5: keys[0]: ");
	assert_refused(HEAD "  - {op: gemm, dtype: f16, variant: nt, m: 1, n: 1, aligned: true}\n",
		       "keys[0]: missing 'k'");
	assert_refused(HEAD "  - {op: gemm, dtype: f16, variant: nt, m: 0, n: 1, k: 1, aligned: true}\n",
		       "keys[0].m: '0' is not an integer");
	assert_refused(HEAD "  - {op: gemm, dtype: f16, variant: nt, m: 1, n: 1, k: 1, aligned: maybe}\n",
		       "keys[0].aligned: 'maybe' is not true or false");
	assert_refused(HEAD "  - {op: gemm, dtype: f16, variant: nt, m: 1, n: 1, k: 1, aligned: true, rows: 3}\n",
		       "keys[0]: unknown key 'rows'");
	assert_refused(HEAD "  - {op: gemm, dtype: f16, variant: nt, m: 1, n: 1, k: 1, aligned: true}\n"
			    "  - {op: add, dtype: f16, n: 1024, aligned: true}\n"
			    "  - {op: gemm, dtype: f16, variant: nt, m: 1, n: 1, k: 1, aligned: true, calls: 2}\n",
		       "m.yaml:7: keys[2]: the same key as keys[0]");
	assert_refused(HEAD "  - {op: add, dtype: f16, n: 1024, aligned: true, calls: -1}\n",
		       "keys[0].calls: '-1' is not an integer");
}

/* The database: what KTUNE_RECORD=db and ktune_save_misses(ctx, NULL) write, added up over saves. */
struct seen {
	struct ktune_miss m[16];
	int n;
};

static int keep(const struct ktune_device_id *d, const struct ktune_miss *m, void *arg)
{
	struct seen *s = arg;
	assert_string_equal(d->name, h100.name);
	assert_true(s->n < 16);
	s->m[s->n++] = *m;
	return 0;
}

static ktune_ctx *offline_ctx(const char *db_path)
{
	ktune_ctx *ctx = calloc(1, sizeof(*ctx));
	assert_non_null(ctx);
	pthread_mutex_init(&ctx->lock, NULL);
	ktune__record_init(&ctx->record);
	ctx->id = h100;
	ctx->db_path = strdup(db_path);
	return ctx;
}

static void free_ctx(ktune_ctx *ctx)
{
	ktune__record_close(ctx); /* what ktune_close does first */
	ktune__record_free(&ctx->record);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx->db_path);
	free(ctx);
}

static void test_record__saved_into_the_database(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_key keys[16];
	struct ktune_err e;
	struct ktune_db *db;
	struct seen s = { .n = 0 };
	int nkeys = registry_keys(keys, 16);

	ktune_ctx *ctx = offline_ctx(t->db);
	for (int i = 0; i < nkeys; i++)
		ktune__record_note(&ctx->record, &keys[i], "default");
	assert_int_equal(ktune_save_misses(ctx, NULL), KTUNE_OK); /* creates the database */
	for (int i = 0; i < nkeys; i++) /* one call more of each, saved at close */
		ktune__record_count(ktune__record_note(&ctx->record, &keys[i], "default"));
	/* as KTUNE_RECORD=db asks */
	setenv("KTUNE_RECORD", "db", 1);
	assert_int_equal(ktune__record_open(ctx, &e), KTUNE_OK);
	unsetenv("KTUNE_RECORD");
	assert_int_equal(ctx->record_db, 1);
	free_ctx(ctx);

	assert_int_equal(ktune__db_open_read(t->db, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_misses(db, &h100, keep, &s, &e), KTUNE_OK);
	ktune__db_close(db);
	assert_int_equal(s.n, nkeys);
	for (int i = 0; i < s.n; i++)
		assert_int_equal(s.m[i].calls, 3); /* 1 at the save, 2 more at the close: none twice */
}

static void test_record__bad_targets_are_refused_at_once(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e;
	char path[TEST_PATH_MAX];

	ktune_ctx *ctx = offline_ctx("");
	/* no database to record into */
	assert_int_equal(ktune_record_misses(ctx, NULL), KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "has none"));
	setenv("KTUNE_RECORD", "db", 1);
	assert_int_equal(ktune__record_open(ctx, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "KTUNE_RECORD='db'"));
	/* a file in a directory that is not there */
	snprintf(path, sizeof(path), "%s/no/such/dir/m.yaml", t->dir);
	setenv("KTUNE_RECORD", path, 1);
	assert_int_equal(ktune__record_open(ctx, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "no/such/dir"));
	unsetenv("KTUNE_RECORD");
	assert_int_equal(ktune_save_misses(ctx, ""), KTUNE_ERR_INVALID);
	/* a good file, then "" stops recording: nothing is written at close */
	snprintf(path, sizeof(path), "%s/m.yaml", t->dir);
	assert_int_equal(ktune_record_misses(ctx, path), KTUNE_OK);
	struct ktune_key key = gemm_key(5, 6, 7, 1);
	ktune__record_note(&ctx->record, &key, "default");
	assert_int_equal(ktune_record_misses(ctx, ""), KTUNE_OK);
	free_ctx(ctx);
	struct stat st;
	assert_int_not_equal(stat(path, &st), 0);
	/* recording, but no miss: nothing is written at close either */
	ctx = offline_ctx("");
	assert_int_equal(ktune_record_misses(ctx, path), KTUNE_OK);
	free_ctx(ctx);
	assert_int_not_equal(stat(path, &st), 0);
	/* while asked for now, an empty list is written: the program had none */
	ctx = offline_ctx("");
	assert_int_equal(ktune_save_misses(ctx, path), KTUNE_OK);
	free_ctx(ctx);
	struct ktune_misses_file f;
	assert_int_equal(ktune__misses_read(path, &f, &e), KTUNE_OK);
	assert_int_equal(f.n, 0);
	ktune__misses_file_free(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record__tuned_sources_are_not_misses),
		cmocka_unit_test(test_record__threads_count_every_call),
		cmocka_unit_test(test_record__saves_count_each_call_once),
		cmocka_unit_test_setup_teardown(test_record__file_reads_back_and_adds_up, setup, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_record__concurrent_saves_keep_every_key, setup,
						test_scratch_teardown),
		cmocka_unit_test(test_record__file_refuses_bad_input),
		cmocka_unit_test_setup_teardown(test_record__saved_into_the_database, setup, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_record__bad_targets_are_refused_at_once, setup,
						test_scratch_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
