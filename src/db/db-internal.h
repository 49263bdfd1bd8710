/*
 * db-internal.h - what the files of the database module share and nobody
 * else sees: the handle and the helpers that bind keys and devices, defined
 * in db.c and used by claims.c.
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

/*
 * Deletes the claim on (device row dev, key), whoever holds it, inside the
 * caller's transaction: a stored result ends the claim on its key (claims.c).
 */
int ktune__db_drop_claim(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_key *key,
			 const char *dtype, const char *layout, struct ktune_err *e);

#endif
