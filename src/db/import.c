/*
 * import.c - sharing results between databases: merging checked results
 * into a database under a policy (ktune import), and writing results into a
 * new standalone database file (ktune export, ktune merge).  The source of
 * an import is opened read-only by ktune__db_open_readonly (db.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkstemp, fchmod, lstat under -std=c11 */
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common.h"
#include "db/db-internal.h"
#include "db/share.h" /* ktune__policy_decide */

static const char sql_import_result[] =
	"INSERT OR REPLACE INTO results (device_id, op, dtype, layout, m, n, k, aligned,"
	" family, config, template_hash, time_us, p20_us, p80_us, tflops, cublas_us,"
	" err_fro, err_max, candidates, tune_s, nvrtc_version, driver_version,"
	" ktune_version, protocol, created_at)"
	" VALUES (:device_id, :op, :dtype, :layout, :m, :n, :k, :aligned,"
	" :family, :config, :template_hash, :time_us, :p20_us, :p80_us, :tflops, :cublas_us,"
	" :err_fro, :err_max, :candidates, :tune_s, :nvrtc_version, :driver_version,"
	" :ktune_version, :protocol,"
	" coalesce(nullif(:created_at, ''), strftime('%Y-%m-%dT%H:%M:%SZ', 'now')))";

/* Stores one imported result, inside the caller's transaction. */
static int import_one(struct ktune_db *db, sqlite3_stmt *ins, const struct ktune_result *r,
		      struct ktune_err *e)
{
	sqlite3_int64 dev = 0;
	const char *dtype, *field;
	char layout[KTUNE_KEY_VARIANT];
	int ret;

	if ((ret = ktune__db_check_device(db, &r->device, e)) != KTUNE_OK ||
	    (ret = ktune__db_check_key(db, &r->key, "imported result", &dtype, layout, e)) !=
		    KTUNE_OK)
		return ret;
	if ((field = ktune__db_nan_field(r)) != NULL)
		return ktune__fail(e, KTUNE_ERR_INVALID, "result for database '%s' has NaN %s",
				   db->path, field);
	if ((ret = ktune__db_device_id(db, &r->device, &dev, e)) != KTUNE_OK)
		return ret;
	sqlite3_reset(ins);
	sqlite3_clear_bindings(ins);
	if (ktune__db_bind_result(ins, dev, r, dtype, layout) != SQLITE_OK ||
	    BIND_FIELD(ins, ":created_at", r->created_at) != SQLITE_OK ||
	    sqlite3_step(ins) != SQLITE_DONE)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot store result in database '%s': %s",
				   db->path, sqlite3_errmsg(db->h));
	return KTUNE_OK;
}

int ktune__db_import(struct ktune_db *db, const struct ktune_result *rs,
		     const unsigned char *stale, long n, int policy, int dry_run,
		     struct ktune_import_item *items, struct ktune_import_counts *counts,
		     struct ktune_err *e)
{
	struct ktune_import_counts c = { 0, 0, 0, 0 };
	struct ktune_import_item item;
	struct ktune_result ours;
	sqlite3_stmt *ins = NULL;
	long i;
	int ret, found;

	if (counts)
		memset(counts, 0, sizeof(*counts));
	if (!db || n < 0 || (n > 0 && !rs))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to import results");
	if ((ret = ktune__db_begin(db, e)) != KTUNE_OK)
		return ret;
	if ((ret = ktune__db_prepare(db, sql_import_result, &ins, e)) != KTUNE_OK)
		goto out;
	for (i = 0; i < n; i++) {
		const struct ktune_result *r = &rs[i];

		memset(&item, 0, sizeof(item));
		if (stale && stale[i]) {
			item.outcome = KTUNE_IMPORT_SKIPPED;
			snprintf(item.reason, sizeof(item.reason),
				 "tuned for another template source (%.12s...)", r->template_hash);
		} else {
			found = ktune__db_get_result(db, &r->device, &r->key, &ours, e);
			if (found < 0) {
				ret = found;
				goto out;
			}
			if (!found) {
				item.outcome = KTUNE_IMPORT_ADDED;
			} else if (ktune__policy_decide(&ours, r, (enum ktune_policy)policy,
							item.reason, sizeof(item.reason))) {
				item.outcome = KTUNE_IMPORT_REPLACED;
			} else {
				item.outcome = KTUNE_IMPORT_KEPT;
			}
			if (item.outcome != KTUNE_IMPORT_KEPT &&
			    (ret = import_one(db, ins, r, e)) != KTUNE_OK)
				goto out;
		}
		switch (item.outcome) {
		case KTUNE_IMPORT_ADDED:
			c.added++;
			break;
		case KTUNE_IMPORT_REPLACED:
			c.replaced++;
			break;
		case KTUNE_IMPORT_KEPT:
			c.kept++;
			break;
		case KTUNE_IMPORT_SKIPPED:
			c.skipped++;
			break;
		}
		if (items)
			items[i] = item;
	}
	sqlite3_finalize(ins);
	ins = NULL;
	if (dry_run)
		ktune__db_rollback(db);
	else
		ret = ktune__db_commit(db, e);
	if (ret == KTUNE_OK && counts)
		*counts = c;
out:
	sqlite3_finalize(ins);
	if (ret != KTUNE_OK)
		ktune__db_rollback(db);
	return ret;
}

int ktune__db_write_standalone(const char *path, const struct ktune_result *rs, long n,
			       int force, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	struct stat st;
	char *tmp = NULL;
	int fd, ret;

	if (!path || !*path || n < 0 || (n > 0 && !rs))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to write a database");
	if (!force && lstat(path, &st) == 0)
		return ktune__fail(e, KTUNE_ERR_IO, "'%s' exists: give --force to replace it", path);
	tmp = malloc(strlen(path) + sizeof(".tmp-XXXXXX"));
	if (!tmp)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory writing '%s'", path);
	sprintf(tmp, "%s.tmp-XXXXXX", path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot create a temporary file for '%s': %s",
				  path, strerror(errno));
		free(tmp);
		return ret;
	}
	fchmod(fd, 0644); /* mkstemp makes it private; an export is meant to be shared */
	close(fd);
	if ((ret = ktune__db_open(tmp, 1, &db, e)) != KTUNE_OK ||
	    (ret = ktune__db_import(db, rs, NULL, n, KTUNE_POLICY_THEIRS, 0, NULL, NULL, e)) !=
		    KTUNE_OK)
		goto out;
	/* One self-contained file: back out of WAL, which checkpoints and removes the -wal. */
	if (sqlite3_exec(db->h, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot finish database '%s': %s", path,
				  sqlite3_errmsg(db->h));
		goto out;
	}
	if (sqlite3_close(db->h) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot close database '%s': %s", path,
				  sqlite3_errmsg(db->h));
		goto out;
	}
	db->h = NULL;
	if (rename(tmp, path) != 0)
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path,
				  strerror(errno));
out:
	ktune__db_close(db);
	if (ret != KTUNE_OK) {
		char side[4200];

		unlink(tmp);
		snprintf(side, sizeof(side), "%s-wal", tmp);
		unlink(side);
		snprintf(side, sizeof(side), "%s-shm", tmp);
		unlink(side);
	}
	free(tmp);
	return ret;
}
