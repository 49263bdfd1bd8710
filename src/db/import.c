/*
 * import.c - sharing results between databases: merging checked results
 * into a database under a policy (ktune import), and writing results into a
 * new standalone database file (ktune export, ktune merge).  The source of
 * an import is opened read-only by ktune__db_open_readonly (db.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* lstat under -std=c11 */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
	int ret = KTUNE_OK, found;

	if (counts)
		memset(counts, 0, sizeof(*counts));
	if (!db || n < 0 || (n > 0 && !rs))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to import results");
	/* a dry run only reads (its database may be open read-only): the same decisions, no writes */
	if (dry_run && sqlite3_exec(db->h, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				   sqlite3_errmsg(db->h));
	if (!dry_run && (ret = ktune__db_begin(db, e)) != KTUNE_OK)
		return ret;
	if (!dry_run && (ret = ktune__db_prepare(db, sql_import_result, &ins, e)) != KTUNE_OK)
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
			if (item.outcome != KTUNE_IMPORT_KEPT && !dry_run &&
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

/*
 * Built in memory and written as one file by ktune__write_file_atomic: no
 * SQLite journal, WAL or temporary database ever lies beside the output, so
 * a killed export leaves at most the locked temp file of that write, which
 * the next write of the same output removes.
 */
int ktune__db_write_standalone(const char *path, const struct ktune_result *rs, long n,
			       int force, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	unsigned char *bytes = NULL;
	sqlite3_int64 size = 0;
	struct stat st;
	int ret;

	if (!path || !*path || n < 0 || (n > 0 && !rs))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to write a database");
	if (!force && lstat(path, &st) == 0)
		return ktune__fail(e, KTUNE_ERR_IO, "'%s' exists: give --force to replace it", path);
	if ((ret = ktune__db_open_memory(path, &db, e)) != KTUNE_OK ||
	    (ret = ktune__db_import(db, rs, NULL, n, KTUNE_POLICY_THEIRS, 0, NULL, NULL, e)) !=
		    KTUNE_OK)
		goto out;
	bytes = sqlite3_serialize(db->h, "main", &size, 0);
	if (!bytes) {
		ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory writing database '%s'", path);
		goto out;
	}
	ret = ktune__write_file_atomic(path, bytes, (size_t)size, e);
out:
	sqlite3_free(bytes);
	ktune__db_close(db);
	return ret;
}
