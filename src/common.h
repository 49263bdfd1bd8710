/*
 * common.h - what every module of libktune shares: the error buffer that
 * carries a failure's detail up to the caller, and small helpers.
 */
#ifndef KTUNE_COMMON_H
#define KTUNE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "ktune.h"

/* The detail of a failure; modules fill it and return a ktune_status. */
struct ktune_err {
	char msg[4096];
};

/*
 * Formats the message into `e` (which may be NULL) and returns `status`, so
 * that a failure is one line: return ktune__fail(e, KTUNE_ERR_IO, "cannot open '%s'", path);
 */
int ktune__fail(struct ktune_err *e, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Reads a whole file into a NUL-terminated malloc'd buffer, refusing files over max_bytes. */
int ktune__read_file(const char *path, size_t max_bytes, char **out, size_t *len,
		     struct ktune_err *e);

/* Writes a file atomically: a temp file beside it, fsync, rename. */
int ktune__write_file_atomic(const char *path, const void *data, size_t len,
			     struct ktune_err *e);

/* mkdir -p; the directories it creates are private (0700); existing ones are fine. */
int ktune__mkdirs(const char *path, struct ktune_err *e);

/*
 * The directory for ktune's cache files ($XDG_CACHE_HOME/ktune or
 * ~/.cache/ktune), written into buf; the directory is not created.
 */
int ktune__cache_dir(char *buf, size_t len);

/* The default database path: $KTUNE_DB, else <cache dir>/ktune.db. */
int ktune__default_db_path(char *buf, size_t len);

/* Lowercase hex SHA-256 of data (65 bytes with the NUL). */
void ktune__sha256_hex(const void *data, size_t len, char out[65]);

/*
 * Calls fn(i, arg) for every i in 0..n-1 on `threads` threads (0: one per
 * core), each taking the next i until none is left; returns when all are
 * done.  Without threads to be had it runs them all on the caller's.
 */
void ktune__parallel_for(int n, int threads, void (*fn)(int i, void *arg), void *arg);

/* Monotonic wall time in seconds. */
double ktune__now(void);

#endif
