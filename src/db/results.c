/*
 * results.c - the results and trials of the tuning database: storing a
 * tuning's result with its trials (which ends the claim on its key) and its
 * record (tunings.c), storing the trials of a key no candidate passed, and
 * the reads: one result, a filtered query, a key's trials, the negative
 * cache of failed configs, each config's best time, the row counts.  Their
 * SQL and the decoding of a results row live here.
 *
 * A write is one BEGIN IMMEDIATE ... COMMIT, rolled back on any failure, so
 * a reader (WAL mode) sees a result with all its trials or none of it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strnlen under -std=c11 */
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "common.h"
#include "db/db-internal.h"
#include "ops/op.h"

/* The columns every result read selects, in the order of enum result_column. */
#define RESULT_COLUMNS                                                                  \
	"d.name, d.arch, d.sm_count, r.op, r.dtype, r.layout, r.m, r.n, r.k, r.aligned," \
	" r.family, r.config, r.template_hash, r.time_us, r.p20_us, r.p80_us, r.tflops,"  \
	" r.cublas_us, r.err_fro, r.err_max, r.candidates, r.tune_s, r.nvrtc_version,"    \
	" r.driver_version, r.ktune_version, r.protocol, r.created_at, r.measure_note"

enum result_column {
	COL_NAME, COL_ARCH, COL_SM_COUNT, COL_OP, COL_DTYPE, COL_LAYOUT, COL_M, COL_N, COL_K,
	COL_ALIGNED, COL_FAMILY, COL_CONFIG, COL_TEMPLATE_HASH, COL_TIME_US, COL_P20_US,
	COL_P80_US, COL_TFLOPS, COL_CUBLAS_US, COL_ERR_FRO, COL_ERR_MAX, COL_CANDIDATES,
	COL_TUNE_S, COL_NVRTC_VERSION, COL_DRIVER_VERSION, COL_KTUNE_VERSION, COL_PROTOCOL,
	COL_CREATED_AT, COL_MEASURE_NOTE, COL_COUNT
};

#define RESULT_FROM " FROM results r JOIN devices d ON d.id = r.device_id"

static const char sql_get[] =
	"SELECT " RESULT_COLUMNS RESULT_FROM
	" WHERE d.name = :name AND d.arch = :arch AND d.sm_count = :sm_count"
	" AND r.op = :op AND r.dtype = :dtype AND r.layout = :layout"
	" AND r.m = :m AND r.n = :n AND r.k = :k AND r.aligned = :aligned";

static const char sql_config_times[] =
	"SELECT t.config, MIN(t.time_us), MAX(t.err_fro), MAX(t.err_max)"
	" FROM trials t JOIN devices d ON d.id = t.device_id"
	" WHERE d.name = :name AND d.arch = :arch AND d.sm_count = :sm_count"
	" AND t.op = :op AND t.dtype = :dtype AND t.layout = :layout"
	" AND t.m = :m AND t.n = :n AND t.k = :k AND t.aligned = :aligned"
	" AND t.status = 'ok' AND t.time_us > 0 AND t.template_hash = :hash"
	" GROUP BY t.config ORDER BY t.config";

static const char sql_query[] =
	"SELECT " RESULT_COLUMNS RESULT_FROM
	" WHERE (:device IS NULL OR instr(d.name, :device) > 0)"
	" AND (:arch IS NULL OR d.arch = :arch)"
	" AND (:op IS NULL OR r.op = :op)"
	" AND (:dtype IS NULL OR r.dtype = :dtype)"
	" AND (:layout IS NULL OR r.layout = :layout)"
	" AND (:m IS NULL OR r.m = :m)"
	" AND (:n IS NULL OR r.n = :n)"
	" AND (:k IS NULL OR r.k = :k)"
	" ORDER BY d.name, d.arch, d.sm_count, r.op, r.dtype, r.layout, r.m, r.n, r.k,"
	" r.aligned";


static const char sql_put_result[] =
	"INSERT OR REPLACE INTO results (device_id, op, dtype, layout, m, n, k, aligned,"
	" family, config, template_hash, time_us, p20_us, p80_us, tflops, cublas_us,"
	" err_fro, err_max, candidates, tune_s, nvrtc_version, driver_version,"
	" ktune_version, protocol, created_at, measure_note)"
	" VALUES (:device_id, :op, :dtype, :layout, :m, :n, :k, :aligned,"
	" :family, :config, :template_hash, :time_us, :p20_us, :p80_us, :tflops, :cublas_us,"
	" :err_fro, :err_max, :candidates, :tune_s, :nvrtc_version, :driver_version,"
	" :ktune_version, :protocol, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), :measure_note)";

static const char sql_put_trial[] =
	"INSERT INTO trials (device_id, op, dtype, layout, m, n, k, aligned, family, config,"
	" template_hash, status, time_us, err_fro, err_max, message, created_at,"
	" nvrtc_version, driver_version, tuning_id, screen_us)"
	" VALUES (:device_id, :op, :dtype, :layout, :m, :n, :k, :aligned, :family, :config,"
	" :template_hash, :status, :time_us, :err_fro, :err_max, :message,"
	" strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), :nvrtc_version, :driver_version, :tuning_id,"
	" :screen_us)";

static const char sql_failed_configs[] =
	"SELECT DISTINCT t.config, t.status FROM trials t JOIN devices d ON d.id = t.device_id"
	" WHERE d.name = :name AND d.arch = :arch AND d.sm_count = :sm_count"
	" AND t.op = :op AND t.dtype = :dtype AND t.layout = :layout"
	" AND t.m = :m AND t.n = :n AND t.k = :k AND t.aligned = :aligned"
	" AND t.template_hash = :hash AND t.nvrtc_version = :nvrtc_version"
	" AND t.driver_version = :driver_version"
	" AND t.status IN ('compile_error', 'launch_error', 'wrong', 'crashed', 'timeout')"
	" ORDER BY t.config";

/*
 * A stored result ends the claim on its key, whoever holds it (claims.c
 * takes and releases claims; ending one is part of storing a result, so that
 * claims.c, which reads results, is not needed here).
 */
static const char sql_end_claim[] =
	"DELETE FROM claims WHERE device_id = :device_id AND op = :op AND dtype = :dtype"
	" AND layout = :layout AND m = :m AND n = :n AND k = :k AND aligned = :aligned";

/* SQLite stores NaN as NULL. */
static int bind_real(sqlite3_stmt *st, const char *name, double v)
{
	int i = sqlite3_bind_parameter_index(st, name);

	return i ? sqlite3_bind_double(st, i, v) : SQLITE_RANGE;
}

#define COLUMN_FIELD DB_COLUMN_FIELD

/* Fills *r from a row of RESULT_COLUMNS. */
static int read_result(const struct ktune_db *db, sqlite3_stmt *st, struct ktune_result *r,
		       struct ktune_err *e)
{
	char dtype[32], layout[32];
	int ret;

	memset(r, 0, sizeof(*r));
	if ((ret = COLUMN_FIELD(db, st, COL_NAME, r->device.name, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_ARCH, r->device.arch, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_OP, r->key.op, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_DTYPE, dtype, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_LAYOUT, layout, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_FAMILY, r->family, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_CONFIG, r->config, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_TEMPLATE_HASH, r->template_hash, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_NVRTC_VERSION, r->nvrtc_version, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_DRIVER_VERSION, r->driver_version, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_KTUNE_VERSION, r->ktune_version, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_PROTOCOL, r->protocol, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_CREATED_AT, r->created_at, e)) != KTUNE_OK ||
	    (ret = COLUMN_FIELD(db, st, COL_MEASURE_NOTE, r->measure_note, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_dtype_parse(dtype, &r->key.dtype) != 0)
		return ktune__fail(e, KTUNE_ERR_DB, "database '%s': results row has unknown dtype '%s'",
				   db->path, dtype);
	r->device.sm_count = sqlite3_column_int(st, COL_SM_COUNT);
	r->key.m = sqlite3_column_int64(st, COL_M);
	r->key.n = sqlite3_column_int64(st, COL_N);
	r->key.k = sqlite3_column_int64(st, COL_K);
	r->key.aligned = sqlite3_column_int(st, COL_ALIGNED) != 0;
	snprintf(r->key.variant, sizeof(r->key.variant), "%.23s", layout);
	if (!strcmp(r->key.op, "gemm")
		    ? ktune__db_layout_parse(layout, &r->key.variant[0], &r->key.variant[1]) != 0
		    : ktune__op_key_check(&r->key, NULL) != KTUNE_OK)
		return ktune__fail(e, KTUNE_ERR_DB,
				   "database '%s': results row has unknown variant '%s'", db->path,
				   layout);
	r->time_us = sqlite3_column_double(st, COL_TIME_US);
	r->p20_us = sqlite3_column_double(st, COL_P20_US);
	r->p80_us = sqlite3_column_double(st, COL_P80_US);
	r->tflops = sqlite3_column_double(st, COL_TFLOPS);
	r->cublas_us = sqlite3_column_double(st, COL_CUBLAS_US);
	r->err_fro = sqlite3_column_double(st, COL_ERR_FRO);
	r->err_max = sqlite3_column_double(st, COL_ERR_MAX);
	r->candidates = sqlite3_column_int(st, COL_CANDIDATES);
	r->tune_s = sqlite3_column_double(st, COL_TUNE_S);
	return KTUNE_OK;
}

int ktune__db_bind_result(sqlite3_stmt *st, sqlite3_int64 device, const struct ktune_result *r,
			  const char *dtype, const char *layout)
{
	int rc;

	if ((rc = ktune__db_bind_int(st, ":device_id", device)) != SQLITE_OK ||
	    (rc = ktune__db_bind_key(st, &r->key, dtype, layout)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":family", r->family)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":config", r->config)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":template_hash", r->template_hash)) != SQLITE_OK ||
	    (rc = bind_real(st, ":time_us", r->time_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":p20_us", r->p20_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":p80_us", r->p80_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":tflops", r->tflops)) != SQLITE_OK ||
	    (rc = bind_real(st, ":cublas_us", r->cublas_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":err_fro", r->err_fro)) != SQLITE_OK ||
	    (rc = bind_real(st, ":err_max", r->err_max)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":candidates", r->candidates)) != SQLITE_OK ||
	    (rc = bind_real(st, ":tune_s", r->tune_s)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":nvrtc_version", r->nvrtc_version)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":driver_version", r->driver_version)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":ktune_version", r->ktune_version)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":protocol", r->protocol)) != SQLITE_OK)
		return rc;
	return SQLITE_OK;
}

static int bind_trial(sqlite3_stmt *st, sqlite3_int64 device, const struct ktune_trial *t,
		      const char *dtype, const char *layout, sqlite3_int64 tuning)
{
	int i = sqlite3_bind_parameter_index(st, ":tuning_id"), rc;

	if ((rc = i ? (tuning ? sqlite3_bind_int64(st, i, tuning) : sqlite3_bind_null(st, i))
		    : SQLITE_RANGE) != SQLITE_OK ||
	    (rc = bind_real(st, ":screen_us", t->screen_us > 0 ? t->screen_us : NAN)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":device_id", device)) != SQLITE_OK ||
	    (rc = ktune__db_bind_key(st, &t->key, dtype, layout)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":family", t->family)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":config", t->config)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":template_hash", t->template_hash)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":status", t->status)) != SQLITE_OK ||
	    (rc = bind_real(st, ":time_us", t->time_us)) != SQLITE_OK ||
	    (rc = bind_real(st, ":err_fro", t->err_fro)) != SQLITE_OK ||
	    (rc = bind_real(st, ":err_max", t->err_max)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":message", t->message)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":nvrtc_version", t->nvrtc_version)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":driver_version", t->driver_version)) != SQLITE_OK)
		return rc;
	return SQLITE_OK;
}

/* A result must be a number everywhere: NaN is stored as NULL, which the schema refuses. */
const char *ktune__db_nan_field(const struct ktune_result *r)
{
	if (isnan(r->time_us))
		return "time_us";
	if (isnan(r->p20_us))
		return "p20_us";
	if (isnan(r->p80_us))
		return "p80_us";
	if (isnan(r->tflops))
		return "tflops";
	if (isnan(r->cublas_us))
		return "cublas_us";
	if (isnan(r->err_fro))
		return "err_fro";
	if (isnan(r->err_max))
		return "err_max";
	if (isnan(r->tune_s))
		return "tune_s";
	return NULL;
}

/* Inserts trials of device dev (of tuning row `tuning`, 0: none); the caller holds the transaction. */
static int insert_trials(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_trial *trials,
			 int ntrials, sqlite3_int64 tuning, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	const char *dtype;
	char layout[KTUNE_KEY_VARIANT], what[32];
	int ret = KTUNE_OK;

	if (ntrials > 0 && (ret = ktune__db_prepare(db, sql_put_trial, &st, e)) != KTUNE_OK)
		return ret;
	for (int i = 0; i < ntrials; i++) {
		snprintf(what, sizeof(what), "trial %d", i);
		ret = ktune__db_check_key(db, &trials[i].key, what, &dtype, layout, e);
		if (ret != KTUNE_OK)
			break;
		sqlite3_reset(st);
		if (bind_trial(st, dev, &trials[i], dtype, layout, tuning) != SQLITE_OK ||
		    sqlite3_step(st) != SQLITE_DONE) {
			ret = ktune__fail(e, KTUNE_ERR_DB, "cannot store %s in database '%s': %s",
					  what, db->path, sqlite3_errmsg(db->h));
			break;
		}
	}
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_put_trials(struct ktune_db *db, const struct ktune_device_id *dev,
			 const struct ktune_trial *trials, int ntrials, struct ktune_err *e)
{
	/* The key's claim stays: its owner decides whether to try again or release it. */
	return ktune__db_put_tuning(db, NULL, dev, trials, ntrials, NULL, e);
}

/* Prepares a query about one device's trials of one key and template source. */
static int prepare_trial_query(struct ktune_db *db, const char *sql,
			       const struct ktune_device_id *dev, const struct ktune_key *key,
			       const char *template_hash, sqlite3_stmt **st, struct ktune_err *e)
{
	const char *dtype = NULL; /* set by ktune__db_check_key; LTO builds cannot see it */
	char layout[KTUNE_KEY_VARIANT];
	int ret;

	if ((ret = ktune__db_check_key(db, key, "trial query", &dtype, layout, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, sql, st, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_bind_device(*st, dev) != SQLITE_OK ||
	    ktune__db_bind_key(*st, key, dtype, layout) != SQLITE_OK ||
	    ktune__db_bind_text(*st, ":hash", template_hash, 65) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				   sqlite3_errmsg(db->h));
	return KTUNE_OK;
}

int ktune__db_failed_configs(struct ktune_db *db, const struct ktune_device_id *dev,
			     const struct ktune_key *key, const char *template_hash,
			     const char *nvrtc_version, const char *driver_version,
			     int (*fn)(const char *config, const char *status, void *arg),
			     void *arg, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int rc, ret;

	if (!db || !dev || !key || !template_hash || !nvrtc_version || !driver_version || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to read failed trials");
	if ((ret = prepare_trial_query(db, sql_failed_configs, dev, key, template_hash, &st, e)))
		goto out;
	if (ktune__db_bind_text(st, ":nvrtc_version", nvrtc_version, 32) != SQLITE_OK ||
	    ktune__db_bind_text(st, ":driver_version", driver_version, 32) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *config = (const char *)sqlite3_column_text(st, 0);
		const char *status = (const char *)sqlite3_column_text(st, 1);
		if ((ret = fn(config ? config : "", status ? status : "", arg)))
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}

/* Ends the claim on (device row dev, key), inside the caller's transaction. */
static int end_claim(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_key *key,
		     const char *dtype, const char *layout, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int ret;

	if ((ret = ktune__db_prepare(db, sql_end_claim, &st, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_bind_int(st, ":device_id", dev) != SQLITE_OK ||
	    ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot end the claim on a key in database '%s': %s",
				  db->path, sqlite3_errmsg(db->h));
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_put_result(struct ktune_db *db, const struct ktune_result *r,
			 const struct ktune_trial *trials, int ntrials, struct ktune_err *e)
{
	return ktune__db_put_tuning(db, r, r ? &r->device : NULL, trials, ntrials, NULL, e);
}

/* Inserts or replaces result r of device row dev; the caller holds the transaction. */
static int insert_result(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_result *r,
			 const char *dtype, const char *layout, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int ret;

	if ((ret = ktune__db_prepare(db, sql_put_result, &st, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_bind_result(st, dev, r, dtype, layout) != SQLITE_OK ||
	    BIND_FIELD(st, ":measure_note", r->measure_note) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot store result in database '%s': %s",
				  db->path, sqlite3_errmsg(db->h));
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_put_tuning(struct ktune_db *db, const struct ktune_result *r,
			 const struct ktune_device_id *dev, const struct ktune_trial *trials,
			 int ntrials, const struct ktune_tuning *tuning, struct ktune_err *e)
{
	sqlite3_int64 id = 0, tuning_id = 0;
	const char *dtype = NULL, *field;
	char layout[KTUNE_KEY_VARIANT];
	int ret;

	if (!db || !dev || ntrials < 0 || (ntrials > 0 && !trials) || (tuning && tuning->nm > 0 && !tuning->m))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to store a tuning");
	if ((ret = ktune__db_check_device(db, dev, e)) != KTUNE_OK)
		return ret;
	if (r) {
		if ((ret = ktune__db_check_key(db, &r->key, "result", &dtype, layout, e)) != KTUNE_OK)
			return ret;
		if ((field = ktune__db_nan_field(r)) != NULL)
			return ktune__fail(e, KTUNE_ERR_INVALID, "result for database '%s' has NaN %s",
					   db->path, field);
	}
	if ((ret = ktune__db_begin(db, e)) != KTUNE_OK)
		return ret;
	if ((ret = ktune__db_device_id(db, dev, &id, e)) != KTUNE_OK ||
	    (r && (ret = insert_result(db, id, r, dtype, layout, e)) != KTUNE_OK) ||
	    (tuning && (ret = ktune__db_insert_tuning(db, id, tuning, &tuning_id, e)) != KTUNE_OK) ||
	    (ret = insert_trials(db, id, trials, ntrials, tuning_id, e)) != KTUNE_OK)
		goto out;
	/* The key is done: whoever claimed it, its claim ends with the result. */
	if (r && (ret = end_claim(db, id, &r->key, dtype, layout, e)) != KTUNE_OK)
		goto out;
	ret = ktune__db_commit(db, e);
out:
	if (ret != KTUNE_OK)
		ktune__db_rollback(db);
	return ret;
}

int ktune__db_get_result(struct ktune_db *db, const struct ktune_device_id *dev,
			 const struct ktune_key *key, struct ktune_result *out, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	const char *dtype;
	char layout[KTUNE_KEY_VARIANT];
	int rc, ret;

	if (!db || !dev || !key || !out)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to look a result up");
	if ((ret = ktune__db_check_key(db, key, "lookup", &dtype, layout, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, sql_get, &st, e)) != KTUNE_OK)
		goto out;
	if (ktune__db_bind_device(st, dev) != SQLITE_OK ||
	    ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
		goto out;
	}
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		ret = read_result(db, st, out, e);
		if (ret == KTUNE_OK)
			ret = 1;
	} else if (rc != SQLITE_DONE) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
	}
out:
	sqlite3_finalize(st);
	return ret;
}

/* A key's trials; tuning_id and screen_us are schema 6's (older databases: NULL). */
#define TRIAL_COLUMNS(v6)                                                                 \
	"SELECT t.family, t.config, t.template_hash, t.status, t.time_us, t.err_fro,"     \
	" t.err_max, t.message, t.nvrtc_version, t.driver_version, "                      \
	v6 " FROM trials t JOIN devices d ON d.id = t.device_id"                          \
	" WHERE d.name = :name AND d.arch = :arch AND d.sm_count = :sm_count"             \
	" AND t.op = :op AND t.dtype = :dtype AND t.layout = :layout"                     \
	" AND t.m = :m AND t.n = :n AND t.k = :k AND t.aligned = :aligned"

static const char sql_trials[] =
	TRIAL_COLUMNS("t.screen_us") " AND (:tuning = 0 OR t.tuning_id = :tuning) ORDER BY t.id";
static const char sql_trials_v5[] =
	TRIAL_COLUMNS("NULL") " AND :tuning = 0 ORDER BY t.id";

int ktune__db_trials(struct ktune_db *db, const struct ktune_device_id *dev,
		     const struct ktune_key *key, long long tuning_id,
		     int (*fn)(const struct ktune_trial *t, void *arg), void *arg, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	struct ktune_trial t;
	const char *dtype = NULL;
	char layout[KTUNE_KEY_VARIANT];
	int rc, ret;

	if (!db || !dev || !key || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to read trials");
	if ((ret = ktune__db_check_key(db, key, "trial query", &dtype, layout, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, ktune__db_version(db) >= 6 ? sql_trials : sql_trials_v5, &st,
				     e)) != KTUNE_OK)
		goto out;
	if (ktune__db_bind_device(st, dev) != SQLITE_OK || ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK ||
	    ktune__db_bind_int(st, ":tuning", tuning_id) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		memset(&t, 0, sizeof(t));
		t.key = *key;
		if ((ret = COLUMN_FIELD(db, st, 0, t.family, e)) != KTUNE_OK ||
		    (ret = COLUMN_FIELD(db, st, 1, t.config, e)) != KTUNE_OK ||
		    (ret = COLUMN_FIELD(db, st, 2, t.template_hash, e)) != KTUNE_OK ||
		    (ret = COLUMN_FIELD(db, st, 3, t.status, e)) != KTUNE_OK ||
		    (ret = COLUMN_FIELD(db, st, 7, t.message, e)) != KTUNE_OK ||
		    (ret = COLUMN_FIELD(db, st, 8, t.nvrtc_version, e)) != KTUNE_OK ||
		    (ret = COLUMN_FIELD(db, st, 9, t.driver_version, e)) != KTUNE_OK)
			goto out;
		/* NULL is NaN: a failed run's time or error */
		t.time_us = sqlite3_column_type(st, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 4);
		t.err_fro = sqlite3_column_type(st, 5) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 5);
		t.err_max = sqlite3_column_type(st, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 6);
		t.screen_us = sqlite3_column_double(st, 10); /* NULL: 0, not screened */
		if ((ret = fn(&t, arg)))
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_config_times(struct ktune_db *db, const struct ktune_device_id *dev,
			   const struct ktune_key *key, const char *template_hash,
			   int (*fn)(const char *config, double time_us, double err_fro,
				     double err_max, void *arg),
			   void *arg, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int rc, ret;

	if (!db || !dev || !key || !template_hash || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to read trial times");
	if ((ret = prepare_trial_query(db, sql_config_times, dev, key, template_hash, &st, e)))
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *config = (const char *)sqlite3_column_text(st, 0);
		if ((ret = fn(config ? config : "", sqlite3_column_double(st, 1),
			      sqlite3_column_double(st, 2), sqlite3_column_double(st, 3), arg)))
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}

/* Binds a filter's text field, or NULL (match anything) when it is empty. */
static int bind_filter_text(sqlite3_stmt *st, const char *name, const char *s, size_t cap)
{
	int i;

	if (strnlen(s, cap) > 0)
		return ktune__db_bind_text(st, name, s, cap);
	i = sqlite3_bind_parameter_index(st, name);
	return i ? sqlite3_bind_null(st, i) : SQLITE_RANGE;
}

static int bind_filter_int(sqlite3_stmt *st, const char *name, int64_t v)
{
	int i;

	if (v != 0)
		return ktune__db_bind_int(st, name, v);
	i = sqlite3_bind_parameter_index(st, name);
	return i ? sqlite3_bind_null(st, i) : SQLITE_RANGE;
}

static int bind_filter(struct ktune_db *db, sqlite3_stmt *st, const struct ktune_filter *f,
		       struct ktune_err *e)
{
	static const struct ktune_filter all;
	const char *dtype = "";
	char layout[KTUNE_KEY_VARIANT] = "";
	size_t n;

	if (!f)
		f = &all;
	if (f->has_dtype && !(dtype = ktune__db_dtype_text(f->dtype)))
		return ktune__fail(e, KTUNE_ERR_INVALID, "query of database '%s' has unknown dtype %d",
				   db->path, (int)f->dtype);
	n = strnlen(f->layout, sizeof(f->layout));
	if (n > 0 && strcmp(f->op, "gemm") && f->op[0]) {
		snprintf(layout, sizeof(layout), "%s", f->layout); /* another op's variant, as given */
	} else if (n > 0 && (n != 2 || ktune__db_layout_text(f->layout[0], f->layout[1], layout) != 0))
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "query of database '%s' has invalid layout '%.*s'", db->path,
				   (int)n, f->layout);
	if (bind_filter_text(st, ":device", f->device, sizeof(f->device)) != SQLITE_OK ||
	    bind_filter_text(st, ":arch", f->arch, sizeof(f->arch)) != SQLITE_OK ||
	    bind_filter_text(st, ":op", f->op, sizeof(f->op)) != SQLITE_OK ||
	    bind_filter_text(st, ":dtype", dtype, strlen(dtype) + 1) != SQLITE_OK ||
	    bind_filter_text(st, ":layout", layout, sizeof(layout)) != SQLITE_OK ||
	    bind_filter_int(st, ":m", f->m) != SQLITE_OK ||
	    bind_filter_int(st, ":n", f->n) != SQLITE_OK ||
	    bind_filter_int(st, ":k", f->k) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot query database '%s': %s", db->path,
				   sqlite3_errmsg(db->h));
	return KTUNE_OK;
}

int ktune__db_query(struct ktune_db *db, const struct ktune_filter *f,
		    int (*fn)(const struct ktune_result *r, void *arg), void *arg,
		    struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	struct ktune_result r;
	int rc, ret;

	if (!db || !fn)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to query a database");
	if ((ret = ktune__db_prepare(db, sql_query, &st, e)) != KTUNE_OK ||
	    (ret = bind_filter(db, st, f, e)) != KTUNE_OK)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if ((ret = read_result(db, st, &r, e)) != KTUNE_OK)
			goto out;
		if ((ret = fn(&r, arg)) != 0)
			goto out;
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot query database '%s': %s", db->path,
				  sqlite3_errmsg(db->h));
out:
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_count(struct ktune_db *db, long *results, long *trials, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	int ret;

	if (!db)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to count a database");
	/* One statement, so that both counts come from one snapshot. */
	if ((ret = ktune__db_prepare(db, "SELECT (SELECT count(*) FROM results),"
				     " (SELECT count(*) FROM trials)", &st, e)) != KTUNE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot count the rows of database '%s': %s",
				  db->path, sqlite3_errmsg(db->h));
		goto out;
	}
	if (results)
		*results = (long)sqlite3_column_int64(st, 0);
	if (trials)
		*trials = (long)sqlite3_column_int64(st, 1);
out:
	sqlite3_finalize(st);
	return ret;
}

