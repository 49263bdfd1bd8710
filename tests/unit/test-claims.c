/*
 * test-claims.c - claims on keys: taken, busy, done, taken over from a dead
 * or silent owner, released, ended by a stored result; and four processes
 * sweeping the same keys at once with a reader watching, which must end with
 * every key tuned exactly once and nothing left claimed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db/db.h"
#include "test_sql.h"
#include "test_util.h"

static int setup_tmp(void **state)
{
	return test_scratch_setup(state, "ktune-test-claims");
}

static void new_owner(char *owner)
{
	struct ktune_err e = { "" };

	if (ktune__db_claim_owner(owner, KTUNE_CLAIM_OWNER_MAX, &e) != KTUNE_OK)
		fail_msg("owner: %s", e.msg);
}

static const char hash_a[] = "aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111aaaa1111";
static const char hash_b[] = "bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222bbbb2222";

static void sample_device(struct ktune_device_id *dev)
{
	memset(dev, 0, sizeof(*dev));
	strcpy(dev->name, "NVIDIA H100 80GB HBM3");
	strcpy(dev->arch, "sm_90");
	dev->sm_count = 132;
}

static void sample_key(struct ktune_key *key, int64_t m)
{
	memset(key, 0, sizeof(*key));
	strcpy(key->op, "gemm");
	key->dtype = KTUNE_F16;
	key->variant[0] = 'n';
	key->variant[1] = 't';
	key->m = m;
	key->n = 4096;
	key->k = 4096;
	key->aligned = 1;
}

/* A result of (dev, key) tuned by `who`, with three trials saying so. */
static int put_fake(struct ktune_db *db, const struct ktune_device_id *dev,
		    const struct ktune_key *key, const char *hash, const char *who,
		    struct ktune_err *e)
{
	struct ktune_result r;
	struct ktune_trial tr[3];

	memset(&r, 0, sizeof(r));
	r.key = *key;
	r.device = *dev;
	strcpy(r.family, "gemm");
	snprintf(r.config, sizeof(r.config), "%s", who);
	snprintf(r.template_hash, sizeof(r.template_hash), "%s", hash);
	r.time_us = 10;
	r.tflops = 100;
	r.candidates = 3;
	strcpy(r.protocol, "fake");
	for (int i = 0; i < 3; i++) {
		memset(&tr[i], 0, sizeof(tr[i]));
		tr[i].key = *key;
		strcpy(tr[i].family, "gemm");
		snprintf(tr[i].config, sizeof(tr[i].config), "BLOCK_M=%d", 64 << i);
		snprintf(tr[i].template_hash, sizeof(tr[i].template_hash), "%s", hash);
		strcpy(tr[i].status, KTUNE_TRIAL_OK);
		tr[i].time_us = 10 + i;
		snprintf(tr[i].message, sizeof(tr[i].message), "%s", who);
	}
	return ktune__db_put_result(db, &r, tr, 3, e);
}

static int claim(struct ktune_db *db, const struct ktune_device_id *dev,
		 const struct ktune_key *key, const char *hash, const char *owner, int force)
{
	struct ktune_err e = { "" };
	int rc = ktune__db_claim_key(db, dev, key, hash, owner, force, &e);

	if (rc < 0)
		fail_msg("claim: %s", e.msg);
	return rc;
}

static void test_claims__taken_busy_done(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_device_id dev, other_model;
	struct ktune_key key;
	struct ktune_db *db = open_db(t->db), *db2 = open_db(t->db);
	char a[KTUNE_CLAIM_OWNER_MAX], b[KTUNE_CLAIM_OWNER_MAX], c[KTUNE_CLAIM_OWNER_MAX];
	char buf[256], want[64];

	new_owner(a);
	new_owner(b);
	new_owner(c);
	sample_device(&dev);
	sample_key(&key, 16);
	other_model = dev;
	other_model.sm_count = 114; /* the PCIe H100: another device identity */

	assert_int_equal(claim(db, &dev, &key, hash_a, a, 0), KTUNE_CLAIM_TAKEN);
	assert_int_equal(claim(db, &dev, &key, hash_a, a, 0), KTUNE_CLAIM_TAKEN); /* ours already */
	assert_int_equal(claim(db2, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_BUSY);
	assert_int_equal(claim(db2, &dev, &key, hash_a, b, 1), KTUNE_CLAIM_BUSY); /* force too */
	/* another GPU model never waits for this one */
	assert_int_equal(claim(db2, &other_model, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);

	/* what the row records */
	assert_string_equal(raw_text(t->db, "SELECT c.owner FROM claims c JOIN devices d"
				     " ON d.id = c.device_id WHERE d.sm_count = 132", buf, sizeof(buf)),
			    a);
	snprintf(want, sizeof(want), "%ld", (long)getpid());
	assert_string_equal(raw_text(t->db, "SELECT pid FROM claims LIMIT 1", buf, sizeof(buf)), want);
	assert_true(strlen(raw_text(t->db, "SELECT host FROM claims LIMIT 1", buf, sizeof(buf))) > 0);
	assert_string_equal(raw_text(t->db, "SELECT template_hash FROM claims LIMIT 1", buf,
				     sizeof(buf)), hash_a);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims WHERE claimed_at GLOB"
				  " '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*Z'"
				  " AND heartbeat_at >= claimed_at"), 2);

	/* The result ends the claim on its key, and only that one. */
	assert_int_equal(put_fake(db, &dev, &key, hash_a, a, &e), KTUNE_OK);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 1);
	assert_int_equal(claim(db2, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_DONE);
	assert_int_equal(claim(db, &dev, &key, hash_a, a, 0), KTUNE_CLAIM_DONE);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 1); /* DONE writes nothing */
	/* a result for another template source is not done */
	assert_int_equal(claim(db2, &dev, &key, hash_b, b, 0), KTUNE_CLAIM_TAKEN);
	assert_int_equal(claim(db, &dev, &key, hash_b, c, 1), KTUNE_CLAIM_BUSY);
	assert_int_equal(ktune__db_release_key(db2, &dev, &key, b, &e), 1);
	/* --force: done, yet claimed to be tuned again */
	assert_int_equal(claim(db, &dev, &key, hash_a, c, 0), KTUNE_CLAIM_DONE);
	assert_int_equal(claim(db, &dev, &key, hash_a, c, 1), KTUNE_CLAIM_TAKEN);
	assert_int_equal(claim(db2, &dev, &key, hash_a, b, 1), KTUNE_CLAIM_BUSY);
	assert_int_equal(claim(db2, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_DONE);
	ktune__db_close(db2);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM devices"), 2);
}

/* Trials without a result keep the claim; only its owner releases it. */
static void test_claims__put_trials_keeps_claim_and_release(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_device_id dev;
	struct ktune_trial tr;
	struct ktune_key key;
	struct ktune_db *db = open_db(t->db);
	char a[KTUNE_CLAIM_OWNER_MAX], b[KTUNE_CLAIM_OWNER_MAX];

	new_owner(a);
	new_owner(b);
	sample_device(&dev);
	sample_key(&key, 32);
	assert_int_equal(claim(db, &dev, &key, hash_a, a, 0), KTUNE_CLAIM_TAKEN);
	memset(&tr, 0, sizeof(tr));
	tr.key = key;
	strcpy(tr.family, "gemm");
	strcpy(tr.config, "BLOCK_M=64");
	strcpy(tr.template_hash, hash_a);
	strcpy(tr.status, KTUNE_TRIAL_COMPILE_ERROR);
	assert_int_equal(ktune__db_put_trials(db, &dev, &tr, 1, &e), KTUNE_OK);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 1);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_BUSY);

	assert_int_equal(ktune__db_release_key(db, &dev, &key, b, &e), 0); /* not b's */
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 1);
	assert_int_equal(ktune__db_release_key(db, &dev, &key, a, &e), 1);
	assert_int_equal(ktune__db_release_key(db, &dev, &key, a, &e), 0);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 0);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);

	/* a device the database has never seen holds no claims */
	dev.sm_count = 1;
	assert_int_equal(ktune__db_release_key(db, &dev, &key, b, &e), 0);
	ktune__db_close(db);
}

/* A claim whose process is gone from this host is taken over at once. */
static void test_claims__dead_owner_is_taken_over(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_device_id dev;
	struct ktune_key key;
	struct ktune_db *db = open_db(t->db);
	char b[KTUNE_CLAIM_OWNER_MAX], buf[256], sql[256];
	int status = -1;
	pid_t pid;

	sample_device(&dev);
	sample_key(&key, 48);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* claims and dies without a word, as a sweep killed with -9 */
		struct ktune_err e = { "" };
		struct ktune_db *cdb = NULL;
		char a[KTUNE_CLAIM_OWNER_MAX];

		if (ktune__db_open(t->db, 0, &cdb, &e) != KTUNE_OK ||
		    ktune__db_claim_owner(a, sizeof(a), &e) != KTUNE_OK ||
		    ktune__db_claim_key(cdb, &dev, &key, hash_a, a, 0, &e) != KTUNE_CLAIM_TAKEN)
			_exit(1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM claims WHERE pid = %ld", (long)pid);
	assert_int_equal(raw_long(t->db, sql), 1);

	new_owner(b);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);
	assert_string_equal(raw_text(t->db, "SELECT owner FROM claims", buf, sizeof(buf)), b);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM claims WHERE pid = %ld", (long)getpid());
	assert_int_equal(raw_long(t->db, sql), 1);

	/* The same dead pid on another host proves nothing: busy until the lease ends. */
	snprintf(sql, sizeof(sql), "UPDATE claims SET owner = 'elsewhere:%ld:0', pid = %ld,"
		 " host = 'elsewhere'", (long)pid, (long)pid);
	raw_exec(t->db, sql);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_BUSY);
	raw_exec(t->db, "UPDATE claims SET heartbeat_at = '2000-01-01T00:00:00Z'");
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);
	ktune__db_close(db);
}

/* Every claim's last heartbeat, seconds ago. */
static void set_heartbeat_age(const char *db_path, int seconds)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "UPDATE claims SET heartbeat_at ="
		 " strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-%d seconds')", seconds);
	raw_exec(db_path, sql);
}

/* A live owner that stopped refreshing its claims loses them after the lease. */
static void test_claims__expired_heartbeat_is_taken_over(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_device_id dev;
	struct ktune_key key;
	struct ktune_db *db = open_db(t->db);
	char a[KTUNE_CLAIM_OWNER_MAX], b[KTUNE_CLAIM_OWNER_MAX], buf[256];

	new_owner(a);
	new_owner(b);
	sample_device(&dev);
	sample_key(&key, 64);
	assert_int_equal(claim(db, &dev, &key, hash_a, a, 0), KTUNE_CLAIM_TAKEN);
	assert_int_equal(ktune__db_heartbeat(db, a, &e), 1);

	/* just inside the lease: still a's */
	set_heartbeat_age(t->db, KTUNE_CLAIM_LEASE_S - 30);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_BUSY);
	/* a heartbeat renews it */
	raw_exec(t->db, "UPDATE claims SET heartbeat_at = '2000-01-01T00:00:00Z'");
	assert_int_equal(ktune__db_heartbeat(db, a, &e), 1);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_BUSY);
	/* past the lease: b takes it, and a's next heartbeat tells a so */
	set_heartbeat_age(t->db, KTUNE_CLAIM_LEASE_S + 30);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);
	assert_string_equal(raw_text(t->db, "SELECT owner FROM claims", buf, sizeof(buf)), b);
	assert_int_equal(ktune__db_heartbeat(db, a, &e), 0);
	assert_int_equal(ktune__db_heartbeat(db, b, &e), 1);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims WHERE heartbeat_at >="
				  " strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-60 seconds')"), 1);
	ktune__db_close(db);
}

static void test_claims__release_all(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_device_id dev;
	struct ktune_key key;
	struct ktune_db *db = open_db(t->db);
	char a[KTUNE_CLAIM_OWNER_MAX], b[KTUNE_CLAIM_OWNER_MAX];

	new_owner(a);
	new_owner(b);
	sample_device(&dev);
	for (int i = 0; i < 3; i++) {
		sample_key(&key, 100 + i);
		assert_int_equal(claim(db, &dev, &key, hash_a, a, 0), KTUNE_CLAIM_TAKEN);
	}
	sample_key(&key, 200);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);
	assert_int_equal(ktune__db_heartbeat(db, a, &e), 3);
	assert_int_equal(ktune__db_release_all(db, a, &e), 3);
	assert_int_equal(ktune__db_release_all(db, a, &e), 0);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 1);
	sample_key(&key, 101);
	assert_int_equal(claim(db, &dev, &key, hash_a, b, 0), KTUNE_CLAIM_TAKEN);
	ktune__db_close(db);
}

static void test_claims__bad_arguments(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	struct ktune_device_id dev;
	struct ktune_key key;
	struct ktune_db *db = open_db(t->db);
	char a[KTUNE_CLAIM_OWNER_MAX], b[KTUNE_CLAIM_OWNER_MAX], host[256], *colon;
	char longer[KTUNE_CLAIM_OWNER_MAX + 10];

	new_owner(a);
	new_owner(b);
	assert_string_not_equal(a, b);
	/* "<host>:<pid>:<token>" */
	assert_int_equal(gethostname(host, sizeof(host)), 0);
	host[sizeof(host) - 1] = '\0';
	assert_int_equal(strncmp(a, host, strlen(host) < 64 ? strlen(host) : 64), 0);
	colon = strchr(a, ':');
	assert_non_null(colon);
	assert_int_equal(atol(colon + 1), (long)getpid());
	assert_int_equal(ktune__db_claim_owner(a, 8, &e), KTUNE_ERR_INVALID);

	sample_device(&dev);
	sample_key(&key, 16);
	assert_int_equal(ktune__db_claim_key(db, &dev, &key, hash_a, "", 0, &e), KTUNE_ERR_INVALID);
	assert_int_equal(ktune__db_claim_key(db, &dev, &key, hash_a, NULL, 0, &e), KTUNE_ERR_INVALID);
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(ktune__db_claim_key(db, &dev, &key, hash_a, longer, 0, &e),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune__db_heartbeat(db, "", &e), KTUNE_ERR_INVALID);
	key.variant[1] = 'x';
	assert_int_equal(ktune__db_claim_key(db, &dev, &key, hash_a, a, 0, &e), KTUNE_ERR_INVALID);
	assert_int_equal(ktune__db_release_key(db, &dev, &key, a, &e), KTUNE_ERR_INVALID);
	sample_key(&key, 16);
	dev.arch[0] = '\0';
	assert_int_equal(ktune__db_claim_key(db, &dev, &key, hash_a, a, 0, &e), KTUNE_ERR_INVALID);
	assert_int_equal(ktune__db_release_all(NULL, a, &e), KTUNE_ERR_INVALID);
	ktune__db_close(db);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 0);
}

/* The concurrency test: sweeps as processes sharing one database file. */

#define SWEEPS 4
#define KEYS 50
#define DEADLINE_S 120

static void sleep_ms(double ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms * 1e6) % 1000000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#define CHILD_FAIL(...)                                             \
	do {                                                        \
		fprintf(stderr, "sweep %d: ", (int)getpid());       \
		fprintf(stderr, __VA_ARGS__);                       \
		fprintf(stderr, "\n");                              \
		_exit(1);                                           \
	} while (0)

/*
 * One sweep: claim each key, "tune" it (a millisecond or two) and store it;
 * keys busy elsewhere are retried at the end, with heartbeats, until done.
 * The sweeps start together on a database that does not exist yet.
 */
static void sweep_child(const char *path)
{
	struct ktune_err e = { "" };
	struct ktune_device_id dev;
	struct ktune_key key;
	struct ktune_db *db = NULL;
	char owner[KTUNE_CLAIM_OWNER_MAX];
	int deferred[KEYS], ndeferred = 0, rc;
	double t0 = now_s();

	srand((unsigned)getpid());
	if (ktune__db_open(path, 1, &db, &e) != KTUNE_OK ||
	    ktune__db_claim_owner(owner, sizeof(owner), &e) != KTUNE_OK)
		CHILD_FAIL("%s", e.msg);
	sample_device(&dev);
	for (int i = 0; i < KEYS; i++) {
		sample_key(&key, 16 + i);
		rc = ktune__db_claim_key(db, &dev, &key, hash_a, owner, 0, &e);
		if (rc == KTUNE_CLAIM_BUSY) {
			deferred[ndeferred++] = i;
		} else if (rc == KTUNE_CLAIM_TAKEN) {
			sleep_ms(1 + rand() % 1000 / 1000.0);
			if (put_fake(db, &dev, &key, hash_a, owner, &e) != KTUNE_OK)
				CHILD_FAIL("put: %s", e.msg);
		} else if (rc != KTUNE_CLAIM_DONE) {
			CHILD_FAIL("claim: %s", e.msg);
		}
	}
	while (ndeferred > 0) {
		int left = 0;

		if (now_s() - t0 > DEADLINE_S)
			CHILD_FAIL("%d keys still busy after %d s", ndeferred, DEADLINE_S);
		for (int j = 0; j < ndeferred; j++) {
			sample_key(&key, 16 + deferred[j]);
			rc = ktune__db_claim_key(db, &dev, &key, hash_a, owner, 0, &e);
			if (rc == KTUNE_CLAIM_BUSY) {
				deferred[left++] = deferred[j];
			} else if (rc == KTUNE_CLAIM_TAKEN) {
				if (put_fake(db, &dev, &key, hash_a, owner, &e) != KTUNE_OK)
					CHILD_FAIL("put: %s", e.msg);
			} else if (rc != KTUNE_CLAIM_DONE) {
				CHILD_FAIL("claim: %s", e.msg);
			}
		}
		ndeferred = left;
		if (ndeferred > 0) {
			if (ktune__db_heartbeat(db, owner, &e) < 0)
				CHILD_FAIL("heartbeat: %s", e.msg);
			sleep_ms(2);
		}
	}
	rc = ktune__db_release_all(db, owner, &e);
	if (rc != 0)
		CHILD_FAIL("release_all: %d (%s)", rc, e.msg);
	ktune__db_close(db);
	_exit(0);
}

/*
 * A reader, as 'ktune show' or the runtime: in every snapshot it takes,
 * each stored result has all three of its trials, never fewer.
 */
static void reader_child(const char *path)
{
	static const char sql[] =
		"SELECT count(*), coalesce(sum((SELECT count(*) FROM trials t"
		" WHERE t.device_id = r.device_id AND t.op = r.op AND t.dtype = r.dtype"
		" AND t.layout = r.layout AND t.m = r.m AND t.n = r.n AND t.k = r.k"
		" AND t.aligned = r.aligned) != 3), 0) FROM results r";
	struct ktune_err e = { "" };
	struct ktune_db *db = NULL;
	sqlite3_stmt *st = NULL;
	sqlite3 *h = NULL;
	double t0 = now_s();
	long results = 0, reads = 0;

	/* as the runtime does: open without creating, once the file is a database */
	while (ktune__db_open(path, 0, &db, &e) != KTUNE_OK) {
		if (now_s() - t0 > DEADLINE_S)
			CHILD_FAIL("reader: %s", e.msg);
		sleep_ms(1);
	}
	ktune__db_close(db);
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		CHILD_FAIL("reader: cannot open");
	sqlite3_busy_timeout(h, 60000);
	if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK)
		CHILD_FAIL("reader: %s", sqlite3_errmsg(h));
	while (results < KEYS) {
		if (now_s() - t0 > DEADLINE_S)
			CHILD_FAIL("reader: %ld results after %d s", results, DEADLINE_S);
		sqlite3_reset(st);
		if (sqlite3_step(st) != SQLITE_ROW)
			CHILD_FAIL("reader: %s", sqlite3_errmsg(h));
		results = (long)sqlite3_column_int64(st, 0);
		if (sqlite3_column_int64(st, 1) != 0)
			CHILD_FAIL("reader: %lld of %ld results have not exactly their three trials",
				   (long long)sqlite3_column_int64(st, 1), results);
		reads++;
	}
	sqlite3_finalize(st);
	sqlite3_close(h);
	_exit(reads > 0 ? 0 : 1);
}

static void test_claims__concurrent_sweeps_tune_each_key_once(void **state)
{
	struct test_scratch *t = *state;
	pid_t pids[SWEEPS + 1];
	char buf[4096];
	int status;

	fflush(NULL);
	for (int i = 0; i <= SWEEPS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			if (i == SWEEPS)
				reader_child(t->db);
			sweep_child(t->db);
		}
	}
	for (int i = 0; i <= SWEEPS; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("%s %d ended with status %#x", i == SWEEPS ? "reader" : "sweep", i,
				 status);
	}

	assert_string_equal(raw_text(t->db, "PRAGMA integrity_check", buf, sizeof(buf)), "ok");
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM results"), KEYS);
	assert_int_equal(raw_long(t->db, "SELECT count(DISTINCT m) FROM results"
				  " WHERE m BETWEEN 16 AND 65"), KEYS);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM devices"), 1);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM (SELECT 1 FROM results"
				  " GROUP BY device_id, op, dtype, layout, m, n, k, aligned"
				  " HAVING count(*) > 1)"), 0);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM claims"), 0);
	/* tuned exactly once: three trials per key, all by the owner of its result */
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM trials"), 3 * KEYS);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM (SELECT count(*) AS c FROM trials"
				  " GROUP BY device_id, op, dtype, layout, m, n, k, aligned)"
				  " WHERE c = 3"), KEYS);
	assert_int_equal(raw_long(t->db, "SELECT count(*) FROM trials t JOIN results r"
				  " ON r.device_id = t.device_id AND r.m = t.m AND r.n = t.n"
				  " AND r.k = t.k AND t.message = r.config"), 3 * KEYS);
	assert_int_equal(raw_long(t->db, "SELECT count(DISTINCT config) <= 4 FROM results"), 1);
	print_message("keys per sweep: %s\n",
		      raw_text(t->db, "SELECT group_concat(n) FROM (SELECT count(*) AS n"
			       " FROM results GROUP BY config ORDER BY n DESC)", buf, sizeof(buf)));
}

#define CLAIMS_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup_tmp, test_scratch_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		CLAIMS_TEST(test_claims__taken_busy_done),
		CLAIMS_TEST(test_claims__put_trials_keeps_claim_and_release),
		CLAIMS_TEST(test_claims__dead_owner_is_taken_over),
		CLAIMS_TEST(test_claims__expired_heartbeat_is_taken_over),
		CLAIMS_TEST(test_claims__release_all),
		CLAIMS_TEST(test_claims__bad_arguments),
		CLAIMS_TEST(test_claims__concurrent_sweeps_tune_each_key_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
