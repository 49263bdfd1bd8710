/*
 * claims.c - claims on keys, so that sweeps running at once on one database
 * tune each (device, key) once: a sweep claims a key, tunes it and stores
 * the result, which ends the claim (results.c, in the result's own
 * transaction).  A claim whose owner died, or that has not been refreshed
 * for a lease, is taken over.  This file builds on db.c's helpers
 * (db-internal.h) and reads results; nothing else in the module calls it.
 *
 * Each operation is one BEGIN IMMEDIATE transaction, so that checking a
 * claim and taking it cannot interleave with another process doing the same.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* kill, gethostname, readlink under -std=c11 */
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "db/db-internal.h"
#include "ops/op.h"

#define NOW "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"

#define CLAIM_KEY                                                                     \
	" op = :op AND dtype = :dtype AND layout = :layout AND m = :m AND n = :n"      \
	" AND k = :k AND aligned = :aligned"

static const char sql_claim_get[] =
	"SELECT owner, pid, host, heartbeat_at < strftime('%Y-%m-%dT%H:%M:%SZ', 'now', :lease)"
	" FROM claims WHERE device_id = :device_id AND" CLAIM_KEY;

static const char sql_claim_put[] =
	"INSERT OR REPLACE INTO claims (device_id, op, dtype, layout, m, n, k, aligned,"
	" template_hash, owner, pid, host, claimed_at, heartbeat_at)"
	" VALUES (:device_id, :op, :dtype, :layout, :m, :n, :k, :aligned,"
	" :template_hash, :owner, :pid, :host, " NOW ", " NOW ")";

static const char sql_claim_refresh[] =
	"UPDATE claims SET heartbeat_at = " NOW ", template_hash = :template_hash"
	" WHERE device_id = :device_id AND" CLAIM_KEY " AND owner = :owner";

static const char sql_claim_release[] =
	"DELETE FROM claims WHERE device_id = (SELECT id FROM devices"
	" WHERE name = :name AND arch = :arch AND sm_count = :sm_count)"
	" AND" CLAIM_KEY " AND owner = :owner";

static const char sql_heartbeat[] =
	"UPDATE claims SET heartbeat_at = " NOW " WHERE owner = :owner";

static const char sql_release_all[] = "DELETE FROM claims WHERE owner = :owner";

/*
 * Where a pid names one process: the host name and, where /proc shows it,
 * the pid namespace ("gpu3 pid:[4026531836]"), since a container may share
 * the host's name and the database but not its processes.
 */
static void local_host(char *buf, size_t len)
{
	char name[256], ns[64];
	ssize_t n;

	if (gethostname(name, sizeof(name)) != 0)
		snprintf(name, sizeof(name), "localhost");
	name[sizeof(name) - 1] = '\0';
	n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
	if (n > 0) {
		ns[n] = '\0';
		snprintf(buf, len, "%.64s %s", name, ns);
	} else {
		snprintf(buf, len, "%.64s", name);
	}
}

/* Whether the process that holds a claim is known to be gone: on this host, no such pid. */
static int owner_gone(const char *host, sqlite3_int64 pid)
{
	char here[160];

	local_host(here, sizeof(here));
	if (strcmp(host, here) != 0 || pid <= 0 || pid > INT_MAX)
		return 0;
	return kill((pid_t)pid, 0) == -1 && errno == ESRCH; /* EPERM: alive, someone else's */
}

int ktune__db_claim_owner(char *buf, size_t len, struct ktune_err *e)
{
	struct timespec ts;
	char name[256];
	uint64_t token = 0;
	ssize_t n = -1;
	int fd;

	if (!buf || len < KTUNE_CLAIM_OWNER_MAX)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to make a claim owner");
	fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, &token, sizeof(token));
		close(fd);
	}
	if (n != (ssize_t)sizeof(token)) {
		/* the time is unique enough beside the host and pid */
		clock_gettime(CLOCK_REALTIME, &ts);
		token = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
	if (gethostname(name, sizeof(name)) != 0)
		snprintf(name, sizeof(name), "localhost");
	name[sizeof(name) - 1] = '\0';
	snprintf(buf, len, "%.64s:%ld:%016llx", name, (long)getpid(), (unsigned long long)token);
	return KTUNE_OK;
}

static int check_owner(const struct ktune_db *db, const char *owner, struct ktune_err *e)
{
	size_t n = owner ? strnlen(owner, KTUNE_CLAIM_OWNER_MAX) : 0;

	if (n == 0 || n == KTUNE_CLAIM_OWNER_MAX)
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "claim in database '%s' has an empty or overlong owner", db->path);
	return KTUNE_OK;
}

static int claim_failed(struct ktune_db *db, struct ktune_err *e)
{
	return ktune__fail(e, KTUNE_ERR_DB, "cannot claim a key in database '%s': %s", db->path,
			   sqlite3_errmsg(db->h));
}

/*
 * Looks at the claim on (dev, key) inside the caller's transaction: *held
 * is 0 (none, or a stale one), 1 (ours) or 2 (another live owner's).
 */
static int look_at_claim(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_key *key,
			 const char *dtype, const char *layout, const char *owner, int *held,
			 struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	char lease[32];
	int rc, ret;

	*held = 0;
	snprintf(lease, sizeof(lease), "-%d seconds", KTUNE_CLAIM_LEASE_S);
	if ((ret = ktune__db_prepare(db, sql_claim_get, &st, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_bind_int(st, ":device_id", dev) != SQLITE_OK ||
	    ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK ||
	    ktune__db_bind_text(st, ":lease", lease, sizeof(lease)) != SQLITE_OK) {
		ret = claim_failed(db, e);
		goto out;
	}
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const char *holder = (const char *)sqlite3_column_text(st, 0);
		const char *host = (const char *)sqlite3_column_text(st, 2);

		if (holder && strcmp(holder, owner) == 0)
			*held = 1;
		else if (!sqlite3_column_int(st, 3) &&
			 !owner_gone(host ? host : "", sqlite3_column_int64(st, 1)))
			*held = 2;
	} else if (rc != SQLITE_DONE) {
		ret = claim_failed(db, e);
	}
out:
	sqlite3_finalize(st);
	return ret;
}

/* Writes our claim: a new one (or over a stale one), or our own refreshed. */
static int write_claim(struct ktune_db *db, sqlite3_int64 dev, const struct ktune_key *key,
		       const char *dtype, const char *layout, const char *template_hash,
		       const char *owner, int ours, struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	char host[160];
	int ret;

	if ((ret = ktune__db_prepare(db, ours ? sql_claim_refresh : sql_claim_put, &st, e)))
		return ret;
	local_host(host, sizeof(host));
	if (ktune__db_bind_int(st, ":device_id", dev) != SQLITE_OK ||
	    ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK ||
	    ktune__db_bind_text(st, ":template_hash", template_hash, 65) != SQLITE_OK ||
	    ktune__db_bind_text(st, ":owner", owner, KTUNE_CLAIM_OWNER_MAX) != SQLITE_OK ||
	    (!ours && (ktune__db_bind_int(st, ":pid", (sqlite3_int64)getpid()) != SQLITE_OK ||
		       ktune__db_bind_text(st, ":host", host, sizeof(host)) != SQLITE_OK)) ||
	    sqlite3_step(st) != SQLITE_DONE)
		ret = claim_failed(db, e);
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_claim_key(struct ktune_db *db, const struct ktune_device_id *dev,
			const struct ktune_key *key, const char *template_hash,
			const char *owner, int force, struct ktune_err *e)
{
	struct ktune_result r;
	sqlite3_int64 id = 0;
	const char *dtype;
	char layout[KTUNE_KEY_VARIANT];
	int found, held, ret;

	if (!db || !dev || !key || !template_hash)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to claim a key");
	if ((ret = check_owner(db, owner, e)) != KTUNE_OK ||
	    (ret = ktune__db_check_device(db, dev, e)) != KTUNE_OK ||
	    (ret = ktune__db_check_key(db, key, "claim", &dtype, layout, e)) != KTUNE_OK ||
	    (ret = ktune__db_begin(db, e)) != KTUNE_OK)
		return ret;
	if (!force) {
		found = ktune__db_get_result(db, dev, key, &r, e);
		if (found < 0) {
			ret = found;
			goto out;
		}
		if (found && (strncmp(r.template_hash, template_hash, sizeof(r.template_hash)) == 0 ||
			      ktune__result_fresh(&r.key, r.family, r.template_hash))) {
			ret = KTUNE_CLAIM_DONE;
			goto out;
		}
	}
	if ((ret = ktune__db_device_id(db, dev, &id, e)) != KTUNE_OK ||
	    (ret = look_at_claim(db, id, key, dtype, layout, owner, &held, e)) != KTUNE_OK)
		goto out;
	if (held == 2) {
		ret = KTUNE_CLAIM_BUSY;
		goto out;
	}
	if ((ret = write_claim(db, id, key, dtype, layout, template_hash, owner, held == 1, e)) ==
	    KTUNE_OK)
		ret = ktune__db_commit(db, e);
	if (ret == KTUNE_OK)
		ret = KTUNE_CLAIM_TAKEN;
out:
	ktune__db_rollback(db); /* nothing to undo after a commit; DONE and BUSY write nothing */
	return ret;
}

/* Runs one prepared write in its own transaction; returns the rows it changed. */
static int write_alone(struct ktune_db *db, sqlite3_stmt *st, const char *what,
		       struct ktune_err *e)
{
	int ret;

	if ((ret = ktune__db_begin(db, e)) != KTUNE_OK)
		return ret;
	if (sqlite3_step(st) != SQLITE_DONE) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot %s in database '%s': %s", what,
				  db->path, sqlite3_errmsg(db->h));
		ktune__db_rollback(db);
		return ret;
	}
	ret = sqlite3_changes(db->h);
	if (ktune__db_commit(db, e) != KTUNE_OK) {
		ktune__db_rollback(db);
		return KTUNE_ERR_DB;
	}
	return ret;
}

/* One of owner's claims (dev and key set) or all of them, refreshed or deleted. */
static int owner_write(struct ktune_db *db, const char *sql, const struct ktune_device_id *dev,
		       const struct ktune_key *key, const char *owner, const char *what,
		       struct ktune_err *e)
{
	sqlite3_stmt *st = NULL;
	const char *dtype = NULL;
	char layout[KTUNE_KEY_VARIANT] = "";
	int ret;

	if (!db)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to %s", what);
	if ((ret = check_owner(db, owner, e)) != KTUNE_OK)
		return ret;
	if (dev && ((ret = ktune__db_check_device(db, dev, e)) != KTUNE_OK ||
		    (ret = ktune__db_check_key(db, key, "claim", &dtype, layout, e)) != KTUNE_OK))
		return ret;
	if ((ret = ktune__db_prepare(db, sql, &st, e)) != KTUNE_OK)
		return ret;
	if (ktune__db_bind_text(st, ":owner", owner, KTUNE_CLAIM_OWNER_MAX) != SQLITE_OK ||
	    (dev && (ktune__db_bind_device(st, dev) != SQLITE_OK ||
		     ktune__db_bind_key(st, key, dtype, layout) != SQLITE_OK)))
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot %s in database '%s': %s", what, db->path,
				  sqlite3_errmsg(db->h));
	else
		ret = write_alone(db, st, what, e);
	sqlite3_finalize(st);
	return ret;
}

int ktune__db_heartbeat(struct ktune_db *db, const char *owner, struct ktune_err *e)
{
	return owner_write(db, sql_heartbeat, NULL, NULL, owner, "refresh claims", e);
}

int ktune__db_release_key(struct ktune_db *db, const struct ktune_device_id *dev,
			  const struct ktune_key *key, const char *owner, struct ktune_err *e)
{
	if (!dev || !key)
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to release a claim");
	return owner_write(db, sql_claim_release, dev, key, owner, "release a claim", e);
}

int ktune__db_release_all(struct ktune_db *db, const char *owner, struct ktune_err *e)
{
	return owner_write(db, sql_release_all, NULL, NULL, owner, "release claims", e);
}
