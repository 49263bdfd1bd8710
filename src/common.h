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

/*
 * Refuses a path that is empty or longer than the system allows (PATH_MAX
 * bytes with its NUL), with a message naming `what` ("database"): a path is
 * never cut to fit.
 */
int ktune__path_check(const char *path, const char *what, struct ktune_err *e);

/* "a FIFO", "a character device", "a directory", ...: what a mode says a file is. */
const char *ktune__file_kind(unsigned mode);

/* Reads a whole file into a NUL-terminated malloc'd buffer, refusing files over max_bytes. */
int ktune__read_file(const char *path, size_t max_bytes, char **out, size_t *len,
		     struct ktune_err *e);
/*
 * As ktune__read_file, and only a regular file that this user owns and no
 * one else may write to (a cached CUBIN, which is code).
 */
int ktune__read_private_file(const char *path, size_t max_bytes, char **out, size_t *len,
			     struct ktune_err *e);

/*
 * Writes a file atomically: a temp file beside it (".NAME.tmp-XXXXXX",
 * locked while it is written), fsync, rename over the target.  Only a
 * regular file is replaced: a target that is a symbolic link, a directory,
 * a device, a FIFO or a socket is refused.  Temp files that a killed writer
 * left beside the target (unlocked) are removed first.
 */
int ktune__write_file_atomic(const char *path, const void *data, size_t len,
			     struct ktune_err *e);

/* As ktune__write_file_atomic, the file private (0600) whatever it replaces: a cache file. */
int ktune__write_private_file(const char *path, const void *data, size_t len,
			      struct ktune_err *e);

/* mkdir -p; the directories it creates are private (0700); existing ones are fine. */
int ktune__mkdirs(const char *path, struct ktune_err *e);

/*
 * 1 if a directory may be trusted with files that run (cubins) or that
 * steer tuning (the database): it and its parent, where they exist, belong
 * to this user or root, and no one else may write to them (a parent may be
 * sticky, as /tmp is).  A directory not there yet is ours when created.
 */
int ktune__dir_trusted(const char *dir);

/*
 * The directory for ktune's cache files ($XDG_CACHE_HOME/ktune,
 * ~/.cache/ktune, else /tmp/ktune-cache-<uid>), malloc'd into *out; the
 * directory is not created.
 */
int ktune__cache_dir(char **out, struct ktune_err *e);

/*
 * The default database path, malloc'd into *out: $KTUNE_DB, else
 * <cache dir>/ktune.db, whose folder must pass ktune__dir_trusted.
 */
int ktune__default_db_path(char **out, struct ktune_err *e);

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
