/*
 * test_sql.h - raw SQLite for the database tests, to look behind the
 * module's back (and to age claims), and opening a database that must open.
 * Include after cmocka.h.
 */
#ifndef KTUNE_TEST_SQL_H
#define KTUNE_TEST_SQL_H

#include <stdio.h>
#include <stdlib.h>

#include <sqlite3.h>

#include "db/db.h"

static inline void raw_exec(const char *path, const char *sql)
{
	sqlite3 *h = NULL;
	char *err = NULL;

	assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
	sqlite3_busy_timeout(h, 60000);
	if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("raw sql failed: %s", err);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
}

/* The first column of the one row of sql, as text, into buf. */
static inline const char *raw_text(const char *path, const char *sql, char *buf, size_t len)
{
	sqlite3_stmt *st = NULL;
	sqlite3 *h = NULL;

	assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
	sqlite3_busy_timeout(h, 60000);
	if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("raw sql '%s': %s", sql, sqlite3_errmsg(h));
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	snprintf(buf, len, "%s",
		 sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "");
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_close(h), SQLITE_OK);
	return buf;
}

static inline long raw_long(const char *path, const char *sql)
{
	char buf[64];

	return atol(raw_text(path, sql, buf, sizeof(buf)));
}

static inline struct ktune_db *open_db(const char *path)
{
	struct ktune_err e = { "" };
	struct ktune_db *db = NULL;

	if (ktune__db_open(path, 1, &db, &e) != KTUNE_OK)
		fail_msg("cannot open '%s': %s", path, e.msg);
	return db;
}

#endif
