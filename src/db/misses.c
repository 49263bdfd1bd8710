/*
 * misses.c - the keys that programs were served without a tuned entry, as
 * they recorded them into the database (ktune_save_misses with no path,
 * KTUNE_RECORD=db): one row per (device, key), the calls of every
 * recording added up.  ktune sweep --from-db tunes them.  The file form of
 * the same list is misses-file.c's.
 *
 * Recording is one BEGIN IMMEDIATE transaction: many processes closing at
 * once queue for the write lock, and none loses another's counts.
 */
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "common.h"
#include "db/db-internal.h"

#define NOW "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"

static const char sql_put_miss[] =
	"INSERT INTO misses (device_id, op, dtype, layout, m, n, k, aligned, source, calls,"
	" first_seen, last_seen)"
	" VALUES (:device_id, :op, :dtype, :layout, :m, :n, :k, :aligned, :source, :calls, " NOW ", " NOW ")"
	" ON CONFLICT (device_id, op, dtype, layout, m, n, k, aligned) DO UPDATE SET"
	" calls = calls + excluded.calls, source = excluded.source, last_seen = excluded.last_seen";

static const char sql_misses[] =
	"SELECT d.name, d.arch, d.sm_count, x.op, x.dtype, x.layout, x.m, x.n, x.k, x.aligned,"
	" x.source, x.calls, x.first_seen, x.last_seen"
	" FROM misses x JOIN devices d ON d.id = x.device_id"
	" WHERE :name IS NULL OR (d.name = :name AND d.arch = :arch AND d.sm_count = :sm_count)"
	" ORDER BY d.name, d.arch, d.sm_count, x.op, x.dtype, x.layout, x.m, x.n, x.k, x.aligned";

int ktune__db_put_misses(struct ktune_db *db, const struct ktune_device_id *dev,
			 const struct ktune_miss *m, int n, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	sqlite3_int64 id = 0;
	char layout[KTUNE_KEY_VARIANT], what[32];
	const char *dtype = NULL;
	int ret;

	if (!db || !dev || n < 0 || (n > 0 && !m))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to record misses");
	if ((ret = ktune__db_check_device(db, dev, e)) != KTUNE_OK)
		return ret;
	if (n == 0)
		return KTUNE_OK;
	if ((ret = ktune__db_begin(db, e)) != KTUNE_OK)
		return ret;
	if ((ret = ktune__db_device_id(db, dev, &id, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, sql_put_miss, &st, e)) != KTUNE_OK)
		goto out;
	for (int i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "miss %d", i);
		if ((ret = ktune__db_check_key(db, &m[i].key, what, &dtype, layout, e)) != KTUNE_OK)
			goto out;
		sqlite3_reset(st);
		if (ktune__db_bind_int(st, ":device_id", id) != SQLITE_OK ||
		    ktune__db_bind_key(st, &m[i].key, dtype, layout) != SQLITE_OK ||
		    BIND_FIELD(st, ":source", m[i].source) != SQLITE_OK ||
		    ktune__db_bind_int(st, ":calls", m[i].calls) != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE) {
			ret = ktune__fail(e, KTUNE_ERR_DB, "cannot record %s in database '%s': %s", what, db->path,
					  sqlite3_errmsg(db->h));
			goto out;
		}
	}
	ret = ktune__db_commit(db, e);
out:
	sqlite3_finalize(st);
	if (ret != KTUNE_OK)
		ktune__db_rollback(db);
	return ret;
}

/* Fills *d and *m from a row of sql_misses. */
static int read_miss(struct ktune_db *db, sqlite3_stmt *st, struct ktune_device_id *d, struct ktune_miss *m,
		     struct ktune_err *e)
{
	char dtype[16], layout[KTUNE_KEY_VARIANT + 8];
	int ret;

	memset(d, 0, sizeof(*d));
	memset(m, 0, sizeof(*m));
	if ((ret = DB_COLUMN_FIELD(db, st, 0, d->name, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 1, d->arch, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 3, m->key.op, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 4, dtype, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 5, layout, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 10, m->source, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 12, m->first_seen, e)) != KTUNE_OK ||
	    (ret = DB_COLUMN_FIELD(db, st, 13, m->last_seen, e)) != KTUNE_OK)
		return ret;
	d->sm_count = sqlite3_column_int(st, 2);
	m->key.m = sqlite3_column_int64(st, 6);
	m->key.n = sqlite3_column_int64(st, 7);
	m->key.k = sqlite3_column_int64(st, 8);
	m->key.aligned = sqlite3_column_int(st, 9) != 0;
	m->calls = sqlite3_column_int64(st, 11);
	if (ktune__db_dtype_parse(dtype, &m->key.dtype) || strlen(layout) >= sizeof(m->key.variant))
		return ktune__fail(e, KTUNE_ERR_DB, "database '%s': misses row of unknown dtype '%s' or variant '%s'",
				   db->path, dtype, layout);
	memcpy(m->key.variant, layout, strlen(layout) + 1);
	/* a row another program wrote is checked as any key is */
	const char *enc;
	char enc_layout[KTUNE_KEY_VARIANT];
	struct ktune_err sub;
	if (ktune__db_check_key(db, &m->key, "misses row", &enc, enc_layout, &sub))
		return ktune__fail(e, KTUNE_ERR_DB, "%s", sub.msg);
	return KTUNE_OK;
}

int ktune__db_misses(struct ktune_db *db, const struct ktune_device_id *dev,
		     int (*fn)(const struct ktune_device_id *d, const struct ktune_miss *m, void *arg),
		     void *arg, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	struct ktune_device_id d;
	struct ktune_miss m;
	int rc, ret;

	if (!db || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to read misses");
	if (ktune__db_version(db) < 6)
		return KTUNE_OK;
	if ((ret = ktune__db_prepare(db, sql_misses, &st, e)) != KTUNE_OK)
		return ret;
	if (dev) {
		rc = ktune__db_bind_device(st, dev);
	} else {
		int i = sqlite3_bind_parameter_index(st, ":name");
		rc = i ? sqlite3_bind_null(st, i) : SQLITE_RANGE;
	}
	if (rc != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if ((ret = read_miss(db, st, &d, &m, e)) != KTUNE_OK || (ret = fn(&d, &m, arg)))
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}
