/*
 * tune-on-use.c - KTUNE_TUNE=background: the first call of a key served
 * without a tuned entry of its own queues the key, a thread of the context
 * tunes the queue's keys one at a time (a tuner in this process, its worker
 * a process of its own, as `ktune tune` does), stores each winner in the
 * database and hands it to dispatch; a later call of the key takes it.
 *
 * Nothing waits for the tuning: the call that queues a key returns at once
 * with the key's untuned choice, and the calls after it go on with that
 * choice until the tune is done.  The only cost to the caller is the GPU
 * time the tuning takes beside its work.  The winner's kernel is in the
 * cubin cache by then (the worker compiled it there), so the call that
 * takes the new entry loads rather than compiles it.
 *
 * A context queues KTUNE_TUNE_MAX keys in all (default 64): a program whose
 * shapes never stop changing would otherwise share its GPU with a tuning
 * for as long as it runs.  Past the limit, keys are counted, not queued.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/context.h"
#include "tuner/candidates.h"
#include "tuner/tuner.h"

/* Keys a context queues in all unless KTUNE_TUNE_MAX says otherwise. */
#define KTUNE_TUNE_MAX_DEFAULT 64

struct ktune_bg {
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t wake;
	char *worker;          /* the ktune executable the tuner runs as its worker */
	struct ktune_key *queue;
	int head, n, cap;
	int started, stop, busy;
	int tuned, failed;     /* keys tuned and stored, and tunes that failed */
	int max, skipped;      /* KTUNE_TUNE_MAX (0: no limit), and keys past it */
	pthread_t thread;
};

/* The ktune executable: $KTUNE_CLI, else `ktune` beside this library or in ../bin. */
static char *find_worker(void)
{
	const char *env = getenv("KTUNE_CLI");
	if (env && *env)
		return access(env, X_OK) ? NULL : strdup(env);
	Dl_info info;
	if (!dladdr((void *)ktune_open, &info) || !info.dli_fname)
		return NULL;
	char dir[PATH_MAX], path[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s", info.dli_fname);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	static const char *const tries[] = { "%s/ktune", "%s/../bin/ktune" };
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		snprintf(path, sizeof(path), tries[i], dir);
		if (!access(path, X_OK))
			return strdup(path);
	}
	return NULL;
}

int ktune__bg_open(ktune_ctx *ctx, struct ktune_err *e)
{
	const char *v = getenv("KTUNE_TUNE");
	if (!v || !*v || !strcmp(v, "off"))
		return KTUNE_OK;
	if (strcmp(v, "background"))
		return ktune__fail(e, KTUNE_ERR_INVALID, "KTUNE_TUNE='%.32s' is not one of off, background", v);
	long max = KTUNE_TUNE_MAX_DEFAULT;
	const char *m = getenv("KTUNE_TUNE_MAX");
	if (m && *m) {
		char *end;
		errno = 0;
		max = strtol(m, &end, 10);
		if (errno || *end || max < 0 || max > INT_MAX)
			return ktune__fail(e, KTUNE_ERR_INVALID, "KTUNE_TUNE_MAX='%.32s' is not a count of keys", m);
	}
	if (!ctx->db_path[0])
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "KTUNE_TUNE=background needs a database to store what it tunes (this context has none)");
	struct ktune_bg *bg = calloc(1, sizeof(*bg));
	if (!bg)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	if (!(bg->worker = find_worker())) {
		free(bg);
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND,
				   "KTUNE_TUNE=background: no ktune executable to tune with (set KTUNE_CLI to its path)");
	}
	bg->max = (int)max;
	pthread_mutex_init(&bg->lock, NULL);
	pthread_cond_init(&bg->wake, NULL);
	ctx->bg = bg;
	return KTUNE_OK;
}

/* The next key to tune, waiting for one; 0 when the context closes. */
static int next_key(struct ktune_bg *bg, struct ktune_key *key)
{
	pthread_mutex_lock(&bg->lock);
	while (!bg->stop && bg->head == bg->n)
		pthread_cond_wait(&bg->wake, &bg->lock);
	int got = !bg->stop;
	if (got) {
		*key = bg->queue[bg->head++];
		bg->busy = 1;
	}
	pthread_mutex_unlock(&bg->lock);
	return got;
}

static void *bg_main(void *arg)
{
	ktune_ctx *ctx = arg;
	struct ktune_bg *bg = ctx->bg;
	struct ktune_tuner *t = NULL;
	struct ktune_key key;

	while (next_key(bg, &key)) {
		struct ktune_err e = { "" };
		struct ktune_tune_report rep;
		/* as `ktune tune` would, in the key's own alignment class, as the call made it */
		struct ktune_tune_options o = { .seed = 1, .force = 1, .top = KTUNE_TUNE_TOP,
						.deadline_s = KTUNE_TUNE_DEADLINE, .as_recorded = 1 };
		int rc = t ? KTUNE_OK : ktune__tuner_open(ctx->db_path, ctx->ordinal, bg->worker, &t, &e);
		if (!rc)
			rc = ktune__tune_key(t, &key, &o, &rep, &e);
		if (!rc && rep.result.time_us > 0) {
			pthread_mutex_lock(&ctx->lock);
			rc = ktune__dispatch_adopt(ctx, &rep.result) ? KTUNE_OK : KTUNE_ERR_INVALID;
			pthread_mutex_unlock(&ctx->lock);
		}
		pthread_mutex_lock(&bg->lock);
		if (rc) {
			bg->failed++;
		} else {
			bg->tuned++;
		}
		bg->busy = 0; /* with the count: a key is queued, tuned or failed, never two at once */
		pthread_mutex_unlock(&bg->lock);
		if (rc && t) { /* a tuner that failed is started afresh for the next key */
			ktune__tuner_close(t);
			t = NULL;
		}
	}
	if (t)
		ktune__tuner_close(t);
	return NULL;
}

void ktune__bg_enqueue(ktune_ctx *ctx, const struct ktune_key *key)
{
	struct ktune_bg *bg = ctx->bg;
	if (!bg)
		return;
	pthread_mutex_lock(&bg->lock);
	if (bg->max && bg->n >= bg->max) {
		bg->skipped++;
		pthread_mutex_unlock(&bg->lock);
		return;
	}
	if (!bg->stop && bg->n == bg->cap) {
		int cap = bg->cap ? 2 * bg->cap : 16;
		struct ktune_key *grown = realloc(bg->queue, (size_t)cap * sizeof(*grown));
		if (grown) {
			bg->queue = grown;
			bg->cap = cap;
		}
	}
	if (!bg->stop && bg->n < bg->cap) { /* out of memory: the key stays untuned, as without KTUNE_TUNE */
		bg->queue[bg->n++] = *key;
		if (!bg->started)
			bg->started = !pthread_create(&bg->thread, NULL, bg_main, ctx);
		pthread_cond_signal(&bg->wake);
	}
	pthread_mutex_unlock(&bg->lock);
}

void ktune__bg_counts(ktune_ctx *ctx, int *queued, int *tuned, int *failed, int *skipped)
{
	struct ktune_bg *bg = ctx->bg;
	*queued = *tuned = *failed = *skipped = 0;
	if (!bg)
		return;
	pthread_mutex_lock(&bg->lock);
	*queued = bg->n - bg->head + bg->busy;
	*tuned = bg->tuned;
	*failed = bg->failed;
	*skipped = bg->skipped;
	pthread_mutex_unlock(&bg->lock);
}

void ktune__bg_close(ktune_ctx *ctx)
{
	struct ktune_bg *bg = ctx->bg;
	if (!bg)
		return;
	pthread_mutex_lock(&bg->lock);
	bg->stop = 1; /* keys still queued are dropped; the tune in progress ends first */
	pthread_cond_signal(&bg->wake);
	int started = bg->started;
	pthread_mutex_unlock(&bg->lock);
	if (started)
		pthread_join(bg->thread, NULL);
	pthread_cond_destroy(&bg->wake);
	pthread_mutex_destroy(&bg->lock);
	free(bg->queue);
	free(bg->worker);
	free(bg);
	ctx->bg = NULL;
}
