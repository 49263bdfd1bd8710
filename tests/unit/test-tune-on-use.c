/*
 * test-tune-on-use.c - KTUNE_TUNE=background without a GPU: a context's
 * dispatch tables (no driver) and the fake worker (fake-worker.c) as the
 * tuner's.  A key queued at its first miss is tuned by the context's
 * thread while the caller goes on (the queueing returns at once, the
 * context's lock stays free), stored in the database and handed to
 * dispatch, and the key's resolved choice is retired so that its next
 * call takes the tuned entry; KTUNE_TUNE_MAX keys are queued in all;
 * bad settings are clear errors at open.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "db/db.h"
#include "runtime/context.h"
#include "test_util.h"

static char dir[4096];

static int setup(void **state)
{
	(void)state;
	return test_tmp_dir("tune-on-use", dir, sizeof(dir)) ? -1 : 0;
}

/* A context as ktune_open leaves it, less the driver: the fake worker's device, a database. */
static ktune_ctx *make_ctx(const char *db)
{
	ktune_ctx *ctx = calloc(1, sizeof(*ctx));
	assert_non_null(ctx);
	snprintf(ctx->id.name, sizeof(ctx->id.name), "Fake H100 (no GPU)");
	snprintf(ctx->id.arch, sizeof(ctx->id.arch), "sm_90");
	ctx->id.sm_count = 132;
	ctx->smem_optin = 232448;
	ctx->mem_gbps = 3015;
	ctx->blas_state = -1;
	ctx->db_path = strdup(db);
	assert_non_null(ctx->db_path);
	pthread_mutex_init(&ctx->lock, NULL);
	return ctx;
}

static void free_ctx(ktune_ctx *ctx)
{
	ktune__bg_close(ctx);
	ktune__resolved_free(ctx);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx->entries);
	free(ctx->db_path);
	free(ctx);
}

static void env_for(const char *tune)
{
	setenv("KTUNE_TUNE", tune, 1);
	setenv("KTUNE_CLI", test_program("fake-worker"), 1);
}

/* A context with KTUNE_TUNE=background open on the fake worker, its database `name` in the scratch (into db). */
static ktune_ctx *open_background(const char *name, char *db, size_t len)
{
	struct ktune_err e;
	snprintf(db, len, "%s/%s", dir, name);
	ktune_ctx *ctx = make_ctx(db);
	env_for("background");
	assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_OK);
	assert_non_null(ctx->bg);
	return ctx;
}

/* The key's resolved choice, as a call's first resolve would leave it. */
static struct ktune_resolved *resolved_like_a_call(ktune_ctx *ctx, const struct ktune_key *key)
{
	struct ktune_resolved *r = calloc(1, sizeof(*r));
	struct ktune_choice c;
	assert_non_null(r);
	r->key = *key;
	ktune__dispatch_decide(ctx, key, &c);
	r->cfg = c.cfg;
	r->source = c.source;
	r->own = c.own;
	unsigned b = ktune__resolve_bucket(key);
	r->next = ctx->resolved[b];
	ctx->resolved[b] = r;
	return r;
}

static void test_tune_on_use__tunes_beside_the_caller(void **state)
{
	struct ktune_key key = { "gemm", KTUNE_F16, "nt", 64, 96, 128, 1 };
	char db[4200];
	struct ktune_err e;
	struct ktune_choice c;
	int queued, tuned, failed, skipped;
	(void)state;

	ktune_ctx *ctx = open_background("bg.db", db, sizeof(db));

	ktune__dispatch_decide(ctx, &key, &c);
	assert_false(ktune__source_tuned(c.own));
	struct ktune_resolved *r = resolved_like_a_call(ctx, &key);

	/* the first miss queues the key and returns: no tuning on the caller's time */
	double t0 = ktune__now();
	pthread_mutex_lock(&ctx->lock); /* resolve.c queues under the context's lock */
	ktune__bg_enqueue(ctx, &key);
	pthread_mutex_unlock(&ctx->lock);
	assert_true(ktune__now() - t0 < 0.05);

	/* while it tunes, calls take the lock as they do, each at once; then the tune lands */
	double worst = 0, deadline = ktune__now() + 120;
	do {
		double t1 = ktune__now();
		pthread_mutex_lock(&ctx->lock);
		ktune__dispatch_decide(ctx, &key, &c);
		pthread_mutex_unlock(&ctx->lock);
		if (ktune__now() - t1 > worst)
			worst = ktune__now() - t1;
		ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
		usleep(2000);
	} while (queued && ktune__now() < deadline);
	assert_int_equal(queued, 0);
	assert_int_equal(failed, 0);
	assert_int_equal(tuned, 1);
	assert_int_equal(skipped, 0);
	assert_true(worst < 0.5); /* the lock is held to adopt the result, never to tune */

	/* dispatch serves the key from its new entry; the old choice is retired, not freed */
	pthread_mutex_lock(&ctx->lock);
	ktune__dispatch_decide(ctx, &key, &c);
	pthread_mutex_unlock(&ctx->lock);
	assert_string_equal(c.source, KTUNE_SRC_EXACT);
	assert_ptr_equal(ctx->retired, r);
	assert_null(ctx->resolved[ktune__resolve_bucket(&key)]);

	/* and the database holds it, for the next program */
	struct ktune_db *d;
	long results, trials;
	assert_int_equal(ktune__db_open_read(db, &d, &e), KTUNE_OK);
	assert_int_equal(ktune__db_count(d, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 1);
	ktune__db_close(d);
	free_ctx(ctx);
}

/* Closing with keys queued drops them and waits for the tune in progress only. */
static void test_tune_on_use__close_drops_the_queue(void **state)
{
	char db[4200];
	(void)state;

	ktune_ctx *ctx = open_background("drop.db", db, sizeof(db));
	for (int i = 0; i < 20; i++) {
		struct ktune_key key = { "gemm", KTUNE_BF16, "nn", 32 + i, 64, 64, 1 };
		ktune__bg_enqueue(ctx, &key);
	}
	int queued, tuned, failed, skipped;
	ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
	assert_true(queued > 0);
	assert_int_equal(skipped, 0); /* 20 keys: under the default limit */
	free_ctx(ctx); /* ktune__bg_close: joins the thread */
}

/* KTUNE_TUNE_MAX keys are queued in all; the later ones are counted, not tuned. */
static void test_tune_on_use__max_keys(void **state)
{
	char db[4200];
	int queued, tuned, failed, skipped;
	(void)state;

	setenv("KTUNE_TUNE_MAX", "3", 1);
	ktune_ctx *ctx = open_background("max.db", db, sizeof(db));
	for (int i = 0; i < 5; i++) {
		struct ktune_key key = { "gemm", KTUNE_F16, "nt", 16 + 16 * i, 64, 64, 1 };
		ktune__bg_enqueue(ctx, &key);
		ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
		assert_int_equal(queued + tuned + failed, i < 3 ? i + 1 : 3); /* each key counted once */
		assert_int_equal(skipped, i < 3 ? 0 : i - 2);
	}
	double deadline = ktune__now() + 120;
	do { /* the three tune to the end; the queue stays shut */
		usleep(5000);
		ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
		assert_int_equal(queued + tuned + failed, 3);
	} while (queued && ktune__now() < deadline);
	assert_int_equal(tuned, 3);
	assert_int_equal(failed, 0);
	ktune__bg_enqueue(ctx, &(struct ktune_key){ "gemm", KTUNE_F16, "nt", 999, 64, 64, 1 });
	ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
	assert_int_equal(queued, 0);
	assert_int_equal(skipped, 3);
	free_ctx(ctx);
	unsetenv("KTUNE_TUNE_MAX");
}

/* Off unless asked; a bad value, no database or no ktune to tune with are errors at open. */
static void test_tune_on_use__settings(void **state)
{
	struct ktune_err e;
	(void)state;

	ktune_ctx *ctx = make_ctx("/tmp/unused.db");
	unsetenv("KTUNE_TUNE");
	assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_OK);
	assert_null(ctx->bg);
	setenv("KTUNE_TUNE", "off", 1);
	assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_OK);
	assert_null(ctx->bg);
	ktune__bg_enqueue(ctx, &(struct ktune_key){ "gemm", KTUNE_F16, "nt", 8, 8, 8, 1 }); /* a no-op */

	setenv("KTUNE_TUNE", "foreground", 1);
	assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "not one of off, background"));

	static const char *const not_counts[] = { "-1", "many", "3x", "99999999999" };
	env_for("background");
	for (size_t i = 0; i < sizeof(not_counts) / sizeof(not_counts[0]); i++) {
		setenv("KTUNE_TUNE_MAX", not_counts[i], 1);
		assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_ERR_INVALID);
		assert_non_null(strstr(e.msg, "KTUNE_TUNE_MAX"));
		assert_null(ctx->bg);
	}
	unsetenv("KTUNE_TUNE_MAX");

	env_for("background");
	setenv("KTUNE_CLI", "/nonexistent/ktune", 1);
	assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_ERR_NOT_FOUND);
	assert_non_null(strstr(e.msg, "KTUNE_CLI"));
	free_ctx(ctx);

	ctx = make_ctx("");
	env_for("background");
	assert_int_equal(ktune__bg_open(ctx, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "needs a database"));
	free_ctx(ctx);
	unsetenv("KTUNE_TUNE");
	unsetenv("KTUNE_CLI");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tune_on_use__settings),
		cmocka_unit_test(test_tune_on_use__tunes_beside_the_caller),
		cmocka_unit_test(test_tune_on_use__close_drops_the_queue),
		cmocka_unit_test(test_tune_on_use__max_keys),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
