/*
 * db-internal.h - what the files of the database module share and nobody
 * else sees: the handle, and the helpers that prepare and bind statements,
 * encode keys, run transactions and find device rows (db.c) and that bind
 * and check a result row (results.c).  The files build on each other in one
 * direction: db.c <- tunings.c <- results.c <- claims.c, import.c; misses.c
 * uses db.c alone; none calls back.
 */
#ifndef KTUNE_DB_INTERNAL_H
#define KTUNE_DB_INTERNAL_H

#include <sqlite3.h>

#include "db/db.h"

/* How long a write waits for another process's transaction before failing. */
#define KTUNE_DB_BUSY_TIMEOUT_MS 60000

struct ktune_db {
	sqlite3 *h;
	char *path;
};

int ktune__db_prepare(struct ktune_db *db, const char *sql, sqlite3_stmt **st,
		      struct ktune_err *e);

/* BEGIN IMMEDIATE: a write transaction takes the write lock at once, waiting its turn. */
int ktune__db_begin(struct ktune_db *db, struct ktune_err *e);
int ktune__db_commit(struct ktune_db *db, struct ktune_err *e);
void ktune__db_rollback(struct ktune_db *db); /* if a transaction is open */

/*
 * Binding by name; a misspelt name is SQLITE_RANGE.  Text is bound up to
 * cap bytes, copied.  BIND_FIELD binds a fixed-size char array.
 */
int ktune__db_bind_text(sqlite3_stmt *st, const char *name, const char *s, size_t cap);
int ktune__db_bind_int(sqlite3_stmt *st, const char *name, sqlite3_int64 v);
#define BIND_FIELD(st, name, field) ktune__db_bind_text((st), (name), (field), sizeof(field))

/* Binds :name, :arch, :sm_count. */
int ktune__db_bind_device(sqlite3_stmt *st, const struct ktune_device_id *dev);

/*
 * The stored texts of a key's dtype ("bf16"; NULL if unknown) and GEMM
 * layout ("nt" from 'n' and 'T'; -1 if either is not n or t), and back
 * (-1 for a text that is not one of them).
 */
const char *ktune__db_dtype_text(ktune_dtype d);
int ktune__db_dtype_parse(const char *s, ktune_dtype *out);
int ktune__db_layout_text(char trans_a, char trans_b, char buf[3]);
int ktune__db_layout_parse(const char *s, char *trans_a, char *trans_b);

/* Binds :op ... :aligned; dtype and layout are the texts ktune__db_check_key gave. */
int ktune__db_bind_key(sqlite3_stmt *st, const struct ktune_key *key, const char *dtype,
		       const char *layout);

/* Checks a key and encodes its dtype and layout; `what` names the record in the message. */
int ktune__db_check_key(const struct ktune_db *db, const struct ktune_key *key,
			const char *what, const char **dtype, char layout[KTUNE_KEY_VARIANT],
			struct ktune_err *e);
int ktune__db_check_device(const struct ktune_db *db, const struct ktune_device_id *dev,
			   struct ktune_err *e);

/* The device's row id, inserting the device if it is new; inside the caller's transaction. */
int ktune__db_device_id(struct ktune_db *db, const struct ktune_device_id *dev,
			sqlite3_int64 *id, struct ktune_err *e);

/* Binds a results row but for its measure_note and created_at (results.c). */
int ktune__db_bind_result(sqlite3_stmt *st, sqlite3_int64 device, const struct ktune_result *r,
			  const char *dtype, const char *layout);

/* The first field of r that is NaN, which the schema refuses, or NULL (results.c). */
const char *ktune__db_nan_field(const struct ktune_result *r);

/*
 * Inserts a tuning row of device row dev with its measurements, inside the
 * caller's transaction; *id is the new row's (tunings.c, for results.c).
 */
int ktune__db_insert_tuning(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_tuning *t,
			    sqlite3_int64 *id, struct ktune_err *e);

/* Copies a text column into a fixed-size field, refusing what does not fit. */
int ktune__db_column_text(const struct ktune_db *db, sqlite3_stmt *st, int col, char *buf, size_t cap,
			  struct ktune_err *e);
#define DB_COLUMN_FIELD(db, st, col, field, e) ktune__db_column_text((db), (st), (col), (field), sizeof(field), (e))

#endif
