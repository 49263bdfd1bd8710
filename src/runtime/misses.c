/*
 * misses.c - saving the keys a context served without a tuned entry
 * (record.h counts them): ktune_record_misses and KTUNE_RECORD choose where
 * ktune_close saves them, ktune_save_misses saves them now.  A misses file
 * (db/misses.h) suits one program; the database suits many processes of a
 * fleet, which add to one table under SQLite's lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strndup under -std=c11 */
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db/misses.h"
#include "runtime/context.h"

/* A misses file's directory must exist when recording is asked for, not only at close. */
static int check_target(ktune_ctx *ctx, const char *path, struct ktune_err *e)
{
	struct stat st;
	int rc;

	if (!path) {
		if (!ctx->db_path[0])
			return ktune__fail(e, KTUNE_ERR_INVALID, "cannot record misses into the database: "
					   "the context has none (ktune_open with \"\")");
		return KTUNE_OK;
	}
	if ((rc = ktune__path_check(path, "misses file", e)))
		return rc;
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	if (!dir)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	if (stat(dir, &st) != 0)
		rc = ktune__fail(e, KTUNE_ERR_INVALID, "cannot record misses to '%s': directory '%s': %s", path, dir,
				 strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		rc = ktune__fail(e, KTUNE_ERR_INVALID, "cannot record misses to '%s': '%s' is not a directory", path,
				 dir);
	free(dir);
	return rc;
}

/* Where ktune_close saves: path a file, NULL the database, "" nowhere. */
int ktune__record_target(ktune_ctx *ctx, const char *path, struct ktune_err *e)
{
	int rc;
	char *copy = NULL;

	if (path && !*path) {
		free(ctx->record_path);
		ctx->record_path = NULL;
		ctx->record_db = 0;
		return KTUNE_OK;
	}
	if ((rc = check_target(ctx, path, e)))
		return rc;
	if (path && !(copy = strdup(path)))
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	free(ctx->record_path);
	ctx->record_path = copy;
	ctx->record_db = !path;
	return KTUNE_OK;
}

ktune_status ktune_record_misses(ktune_ctx *ctx, const char *path)
{
	struct ktune_err e;
	int rc;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	rc = ktune__record_target(ctx, path, &e);
	return rc ? ktune__ctx_error(ctx, rc, &e) : KTUNE_OK;
}

/*
 * Saves the calls counted since the last save to path (NULL: the database);
 * at close, nothing when there are none.
 */
static int save(ktune_ctx *ctx, const char *path, int at_close, struct ktune_err *e)
{
	struct ktune_miss *m = NULL;
	struct ktune_db *db = NULL;
	int n = 0, rc;

	if ((rc = check_target(ctx, path, e)) || (rc = ktune__record_unsaved(&ctx->record, &m, &n, e)))
		return rc;
	if (at_close && n == 0) {
		rc = KTUNE_OK;
	} else if (path) {
		rc = ktune__misses_save(path, &ctx->id, m, n, e);
	} else if (n > 0 && !(rc = ktune__db_open(ctx->db_path, 1, &db, e))) {
		/* created if missing: a fleet's first recording makes the database it will tune into */
		rc = ktune__db_put_misses(db, &ctx->id, m, n, e);
		ktune__db_close(db);
	}
	if (!rc) /* a later save (ktune_close's too) adds only the calls made since */
		ktune__record_saved(&ctx->record, m, n);
	free(m);
	return rc;
}

ktune_status ktune_save_misses(ktune_ctx *ctx, const char *path)
{
	struct ktune_err e;
	int rc;
	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (path && !*path)
		rc = ktune__fail(&e, KTUNE_ERR_INVALID, "ktune_save_misses: an empty path (NULL saves into the database)");
	else
		rc = save(ctx, path, 0, &e);
	return rc ? ktune__ctx_error(ctx, rc, &e) : KTUNE_OK;
}

int ktune__record_open(ktune_ctx *ctx, struct ktune_err *e)
{
	const char *env = getenv("KTUNE_RECORD");
	int rc;
	if (!env || !*env)
		return KTUNE_OK;
	struct ktune_err why;
	if ((rc = ktune__record_target(ctx, strcmp(env, "db") ? env : NULL, &why)))
		return ktune__fail(e, rc, "KTUNE_RECORD='%s': %s", env, why.msg);
	return KTUNE_OK;
}

void ktune__record_close(ktune_ctx *ctx)
{
	int64_t keys = 0, calls = 0;
	ktune__record_totals(&ctx->record, &keys, &calls);
	/* ktune_close has no way to report: ktune_save_misses does; a program with no miss writes nothing */
	if ((ctx->record_path || ctx->record_db) && keys > 0)
		save(ctx, ctx->record_path, 1, NULL);
	free(ctx->record_path);
	ctx->record_path = NULL;
}
