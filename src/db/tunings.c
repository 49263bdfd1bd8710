/*
 * tunings.c - the record of each tuning of a key (a tune, or the group
 * pick weighing it) with the full measurements it took: what ktune explain
 * shows beside the trials.  results.c stores a tuning inside the
 * transaction of its result and trials (ktune__db_insert_tuning); the reads
 * are here, and the list of devices that explain chooses among.
 *
 * A database older than schema 6 (opened read-only, not migrated) has no
 * tunings table: it reads as no tunings.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common.h"
#include "db/db-internal.h"

static const char sql_put_tuning[] =
	"INSERT INTO tunings (device_id, op, dtype, layout, m, n, k, aligned, kind, outcome,"
	" winner, candidates, pruned, known_bad, budget, seed, smem_optin, baseline_us, tune_s,"
	" note, created_at)"
	" VALUES (:device_id, :op, :dtype, :layout, :m, :n, :k, :aligned, :kind, :outcome,"
	" :winner, :candidates, :pruned, :known_bad, :budget, :seed, :smem_optin, :baseline_us,"
	" :tune_s, :note, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))";

static const char sql_put_measurement[] =
	"INSERT INTO measurements (tuning_id, seq, stage, round, config, status, time_us, p20_us,"
	" p80_us, reps)"
	" VALUES (:tuning_id, :seq, :stage, :round, :config, :status, :time_us, :p20_us, :p80_us,"
	" :reps)";

static const char sql_tunings[] =
	"SELECT t.id, t.kind, t.outcome, t.winner, t.candidates, t.pruned, t.known_bad, t.budget,"
	" t.seed, t.smem_optin, t.baseline_us, t.tune_s, t.note, t.created_at"
	" FROM tunings t JOIN devices d ON d.id = t.device_id"
	" WHERE d.name = :name AND d.arch = :arch AND d.sm_count = :sm_count"
	" AND t.op = :op AND t.dtype = :dtype AND t.layout = :layout"
	" AND t.m = :m AND t.n = :n AND t.k = :k AND t.aligned = :aligned"
	" ORDER BY t.id DESC";

static const char sql_measurements[] =
	"SELECT stage, round, config, status, time_us, p20_us, p80_us, reps FROM measurements"
	" WHERE tuning_id = :tuning_id ORDER BY seq";

static int bind_real(sqlite3_stmt *st, const char *name, double v)
{
	int i = sqlite3_bind_parameter_index(st, name);
	return i ? sqlite3_bind_double(st, i, v) : SQLITE_RANGE; /* NaN: NULL */
}

static int bind_measurement(sqlite3_stmt *st, sqlite3_int64 tuning, int seq, const struct ktune_measurement *m)
{
	int rc;
	if ((rc = ktune__db_bind_int(st, ":tuning_id", tuning)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":seq", seq)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":stage", m->stage)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":round", m->round)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":config", m->config)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":status", m->status)) != SQLITE_OK ||
	    (rc = bind_real(st, ":time_us", m->time_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":p20_us", m->p20_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":p80_us", m->p80_us)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":reps", m->reps)) != SQLITE_OK)
		return rc;
	return SQLITE_OK;
}

static int bind_tuning(sqlite3_stmt *st, sqlite3_int64 dev, const struct ktune_tuning *t, const char *dtype,
		       const char *layout)
{
	int rc;
	if ((rc = ktune__db_bind_int(st, ":device_id", dev)) != SQLITE_OK ||
	    (rc = ktune__db_bind_key(st, &t->key, dtype, layout)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":kind", t->kind)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":outcome", t->outcome)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":winner", t->winner)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":candidates", t->candidates)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":pruned", t->pruned)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":known_bad", t->known_bad)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":budget", t->budget)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":seed", t->seed)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":smem_optin", t->smem_optin)) != SQLITE_OK ||
	    /* NOT NULL columns: a NaN figure (no baseline) is stored as 0 */
	    (rc = bind_real(st, ":baseline_us", isnan(t->baseline_us) ? 0 : t->baseline_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":tune_s", isnan(t->tune_s) ? 0 : t->tune_s)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":note", t->note)) != SQLITE_OK)
		return rc;
	return SQLITE_OK;
}

int ktune__db_insert_tuning(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_tuning *t,
			    sqlite3_int64 *id, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	const char *dtype = NULL;
	char layout[KTUNE_KEY_VARIANT];
	int ret;

	if ((ret = ktune__db_check_key(db, &t->key, "tuning", &dtype, layout, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, sql_put_tuning, &st, e)) != KTUNE_OK)
		return ret;
	if (bind_tuning(st, dev, t, dtype, layout) != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot store a tuning in database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
		goto out;
	}
	*id = sqlite3_last_insert_rowid(db->h);
	sqlite3_finalize(st);
	st = NULL;
	if (t->nm > 0 && (ret = ktune__db_prepare(db, sql_put_measurement, &st, e)) != KTUNE_OK)
		goto out;
	for (int i = 0; i < t->nm; i++) {
		sqlite3_reset(st);
		if (bind_measurement(st, *id, i, &t->m[i]) != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE) {
			ret = ktune__fail(e, KTUNE_ERR_DB, "cannot store measurement %d of a tuning in database '%s': %s",
					  i, db->path, sqlite3_errmsg(db->h));
			goto out;
		}
	}
out:
	sqlite3_finalize(st);
	return ret;
}

/* The measurements of tuning t->id into a malloc'd t->m. */
static int read_measurements(struct ktune_db *db, struct ktune_tuning *t, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int cap = 0, rc, ret;

	t->m = NULL;
	t->nm = 0;
	if ((ret = ktune__db_prepare(db, sql_measurements, &st, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_bind_int(st, ":tuning_id", t->id) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (t->nm == cap) {
			int grown_cap = cap ? 2 * cap : 32;
			struct ktune_measurement *grown = realloc(t->m, (size_t)grown_cap * sizeof(*grown));
			if (!grown) {
				ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
				goto out;
			}
			t->m = grown;
			cap = grown_cap;
		}
		struct ktune_measurement *m = &t->m[t->nm];
		memset(m, 0, sizeof(*m));
		if ((ret = DB_COLUMN_FIELD(db, st, 0, m->stage, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 2, m->config, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 3, m->status, e)) != KTUNE_OK)
			goto out;
		m->round = sqlite3_column_int(st, 1);
		m->time_us = sqlite3_column_double(st, 4);
		m->p20_us = sqlite3_column_double(st, 5);
		m->p80_us = sqlite3_column_double(st, 6);
		m->reps = sqlite3_column_int(st, 7);
		t->nm++;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	if (ret) {
		free(t->m);
		t->m = NULL;
		t->nm = 0;
	}
	return ret;
}

int ktune__db_tunings(struct ktune_db *db, const struct ktune_device_id *dev,
		      const struct ktune_key *key, int (*fn)(const struct ktune_tuning *t, void *arg),
		      void *arg, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	const char *dtype = NULL;
	char layout[KTUNE_KEY_VARIANT];
	int rc, ret;

	if (!db || !dev || !key || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to read tunings");
	if (ktune__db_version(db) < 6)
		return KTUNE_OK;
	if ((ret = ktune__db_check_key(db, key, "tuning query", &dtype, layout, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, sql_tunings, &st, e)) != KTUNE_OK)
		goto out;
	if (ktune__db_bind_device(st, dev) != SQLITE_OK || ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct ktune_tuning t;
		memset(&t, 0, sizeof(t));
		t.key = *key;
		t.device = *dev;
		t.id = sqlite3_column_int64(st, 0);
		if ((ret = DB_COLUMN_FIELD(db, st, 1, t.kind, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 2, t.outcome, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 3, t.winner, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 12, t.note, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 13, t.created_at, e)) != KTUNE_OK)
			goto out;
		t.candidates = sqlite3_column_int(st, 4);
		t.pruned = sqlite3_column_int(st, 5);
		t.known_bad = sqlite3_column_int(st, 6);
		t.budget = sqlite3_column_int(st, 7);
		t.seed = (long)sqlite3_column_int64(st, 8);
		t.smem_optin = sqlite3_column_int(st, 9);
		t.baseline_us = sqlite3_column_double(st, 10);
		t.tune_s = sqlite3_column_double(st, 11);
		if ((ret = read_measurements(db, &t, e)) != KTUNE_OK)
			goto out;
		ret = fn(&t, arg);
		free(t.m);
		if (ret)
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_devices(struct ktune_db *db, int (*fn)(const struct ktune_device_id *d, void *arg),
		      void *arg, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int rc, ret;

	if (!db || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to list devices");
	if ((ret = ktune__db_prepare(db, "SELECT name, arch, sm_count FROM devices ORDER BY name, arch, sm_count",
				     &st, e)) != KTUNE_OK)
		return ret;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct ktune_device_id d = { "", "", 0 };
		if ((ret = DB_COLUMN_FIELD(db, st, 0, d.name, e)) != KTUNE_OK ||
		    (ret = DB_COLUMN_FIELD(db, st, 1, d.arch, e)) != KTUNE_OK)
			goto out;
		d.sm_count = sqlite3_column_int(st, 2);
		if ((ret = fn(&d, arg)))
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path, sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}
