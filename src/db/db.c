/*
 * db.c - the tuning database in SQLite: opening it, with checks that a
 * foreign, damaged or newer file is refused untouched (for writing, or
 * read-only as the untrusted source of an import), the forward migrations,
 * and the helpers the module's files share (db-internal.h): preparing and
 * binding statements, the stored key encodings, transactions, device rows.
 * Results and trials: results.c; claims on keys: claims.c; import and
 * standalone export: import.c; tunings and their measurements: tunings.c;
 * recorded misses: misses.c.
 *
 * Every statement is prepared with bound parameters.  A write is one
 * BEGIN IMMEDIATE ... COMMIT (ktune__db_begin), rolled back on any failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strndup, strnlen, O_CLOEXEC under -std=c11 */
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common.h"
#include "db.h"
#include "db/db-internal.h"
#include "ops/op.h"

/*
 * Migration i takes a database from user_version i to i + 1 and sets
 * user_version itself, so that the change and the bump commit together.
 * Append only; never edit a migration that has shipped.  db/schema.sql shows
 * the result of running them all.
 */
static const char *const migrations[] = {
	/* 1: devices, results, trials. */
	"CREATE TABLE devices ("
	" id INTEGER PRIMARY KEY,"
	" name TEXT NOT NULL,"
	" arch TEXT NOT NULL,"
	" sm_count INTEGER NOT NULL,"
	" UNIQUE (name, arch, sm_count));"
	"CREATE TABLE results ("
	" device_id INTEGER NOT NULL REFERENCES devices (id),"
	" op TEXT NOT NULL,"
	" dtype TEXT NOT NULL,"
	" layout TEXT NOT NULL,"
	" m INTEGER NOT NULL,"
	" n INTEGER NOT NULL,"
	" k INTEGER NOT NULL,"
	" aligned INTEGER NOT NULL,"
	" family TEXT NOT NULL,"
	" config TEXT NOT NULL,"
	" template_hash TEXT NOT NULL,"
	" time_us REAL NOT NULL,"
	" tflops REAL NOT NULL,"
	" cublas_us REAL NOT NULL,"
	" err_fro REAL NOT NULL,"
	" err_max REAL NOT NULL,"
	" candidates INTEGER NOT NULL,"
	" tune_s REAL NOT NULL,"
	" nvrtc_version TEXT NOT NULL,"
	" driver_version TEXT NOT NULL,"
	" ktune_version TEXT NOT NULL,"
	" protocol TEXT NOT NULL,"
	" created_at TEXT NOT NULL,"
	" PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned));"
	"CREATE TABLE trials ("
	" id INTEGER PRIMARY KEY,"
	" device_id INTEGER NOT NULL REFERENCES devices (id),"
	" op TEXT NOT NULL,"
	" dtype TEXT NOT NULL,"
	" layout TEXT NOT NULL,"
	" m INTEGER NOT NULL,"
	" n INTEGER NOT NULL,"
	" k INTEGER NOT NULL,"
	" aligned INTEGER NOT NULL,"
	" family TEXT NOT NULL,"
	" config TEXT NOT NULL,"
	" template_hash TEXT NOT NULL,"
	" status TEXT NOT NULL,"
	" time_us REAL,"
	" err_fro REAL,"
	" err_max REAL,"
	" message TEXT NOT NULL,"
	" created_at TEXT NOT NULL);"
	"PRAGMA user_version = 1;",

	/* 2: the spread of the timings; an index for a key's trials. */
	"ALTER TABLE results ADD COLUMN p20_us REAL NOT NULL DEFAULT 0;"
	"ALTER TABLE results ADD COLUMN p80_us REAL NOT NULL DEFAULT 0;"
	"CREATE INDEX trials_key ON trials (device_id, op, dtype, layout, m, n, k, aligned);"
	"PRAGMA user_version = 2;",

	/* 3: the toolchain of each trial, so that a failure is remembered only for it. */
	"ALTER TABLE trials ADD COLUMN nvrtc_version TEXT NOT NULL DEFAULT '';"
	"ALTER TABLE trials ADD COLUMN driver_version TEXT NOT NULL DEFAULT '';"
	"PRAGMA user_version = 3;",

	/*
	 * 4: claims, so that concurrent sweeps tune each (device, key) once;
	 * results say whether their measurement was disturbed.
	 */
	"CREATE TABLE claims ("
	" device_id INTEGER NOT NULL REFERENCES devices (id),"
	" op TEXT NOT NULL,"
	" dtype TEXT NOT NULL,"
	" layout TEXT NOT NULL,"
	" m INTEGER NOT NULL,"
	" n INTEGER NOT NULL,"
	" k INTEGER NOT NULL,"
	" aligned INTEGER NOT NULL,"
	" template_hash TEXT NOT NULL,"
	" owner TEXT NOT NULL,"
	" pid INTEGER NOT NULL,"
	" host TEXT NOT NULL,"
	" claimed_at TEXT NOT NULL,"
	" heartbeat_at TEXT NOT NULL,"
	" PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned));"
	"ALTER TABLE results ADD COLUMN measure_note TEXT NOT NULL DEFAULT '';"
	"PRAGMA user_version = 4;",

	/*
	 * 5: every op of the registry (src/ops/op.h), not only GEMM.  The rows
	 * keep their meaning: `layout` holds a key's variant, which for GEMM
	 * is its layout, and m, n, k its op's sizes.  Nothing changes in the
	 * tables; the version tells a ktune that knows only GEMM to refuse a
	 * database that may hold other ops.
	 */
	"PRAGMA user_version = 5;",

	/*
	 * 6: what explain shows and what sweep --from-db tunes.  tunings: each
	 * tuning of a key and each group pick that weighed it, with every full
	 * measurement it took (measurements); trials say which tuning they
	 * belong to and their screen time.  misses: the keys programs were
	 * served without a tuned entry, as they recorded them.
	 */
	"CREATE TABLE tunings ("
	" id INTEGER PRIMARY KEY,"
	" device_id INTEGER NOT NULL REFERENCES devices (id),"
	" op TEXT NOT NULL,"
	" dtype TEXT NOT NULL,"
	" layout TEXT NOT NULL,"
	" m INTEGER NOT NULL,"
	" n INTEGER NOT NULL,"
	" k INTEGER NOT NULL,"
	" aligned INTEGER NOT NULL,"
	" kind TEXT NOT NULL,"
	" outcome TEXT NOT NULL,"
	" winner TEXT NOT NULL,"
	" candidates INTEGER NOT NULL,"
	" pruned INTEGER NOT NULL,"
	" known_bad INTEGER NOT NULL,"
	" budget INTEGER NOT NULL,"
	" seed INTEGER NOT NULL,"
	" smem_optin INTEGER NOT NULL,"
	" baseline_us REAL NOT NULL,"
	" tune_s REAL NOT NULL,"
	" note TEXT NOT NULL,"
	" created_at TEXT NOT NULL);"
	"CREATE INDEX tunings_key ON tunings (device_id, op, dtype, layout, m, n, k, aligned);"
	"CREATE TABLE measurements ("
	" tuning_id INTEGER NOT NULL REFERENCES tunings (id),"
	" seq INTEGER NOT NULL,"
	" stage TEXT NOT NULL,"
	" round INTEGER NOT NULL,"
	" config TEXT NOT NULL,"
	" status TEXT NOT NULL,"
	" time_us REAL,"
	" p20_us REAL,"
	" p80_us REAL,"
	" reps INTEGER NOT NULL,"
	" PRIMARY KEY (tuning_id, seq));"
	"ALTER TABLE trials ADD COLUMN tuning_id INTEGER;"
	"ALTER TABLE trials ADD COLUMN screen_us REAL;"
	"CREATE TABLE misses ("
	" device_id INTEGER NOT NULL REFERENCES devices (id),"
	" op TEXT NOT NULL,"
	" dtype TEXT NOT NULL,"
	" layout TEXT NOT NULL,"
	" m INTEGER NOT NULL,"
	" n INTEGER NOT NULL,"
	" k INTEGER NOT NULL,"
	" aligned INTEGER NOT NULL,"
	" source TEXT NOT NULL,"
	" calls INTEGER NOT NULL,"
	" first_seen TEXT NOT NULL,"
	" last_seen TEXT NOT NULL,"
	" PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned));"
	"PRAGMA user_version = 6;",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == KTUNE_DB_SCHEMA_VERSION,
	       "one migration per schema version");

static const char sql_put_device[] =
	"INSERT OR IGNORE INTO devices (name, arch, sm_count) VALUES (:name, :arch, :sm_count)";

static const char sql_device_id[] =
	"SELECT id FROM devices WHERE name = :name AND arch = :arch AND sm_count = :sm_count";

/*
 * Key encodings, both ways (results.c decodes a row with them).  Kept here
 * rather than in key.c so that the stored text is the db's own.
 */

const char *ktune__db_dtype_text(ktune_dtype d)
{
	switch (d) {
	case KTUNE_F16:
		return "f16";
	case KTUNE_BF16:
		return "bf16";
	case KTUNE_F32:
		return "f32";
	}
	return NULL;
}

int ktune__db_dtype_parse(const char *s, ktune_dtype *out)
{
	if (strcmp(s, "f16") == 0)
		*out = KTUNE_F16;
	else if (strcmp(s, "bf16") == 0)
		*out = KTUNE_BF16;
	else if (strcmp(s, "f32") == 0)
		*out = KTUNE_F32;
	else
		return -1;
	return 0;
}

static char trans_char(char c)
{
	if (c == 'n' || c == 'N')
		return 'n';
	if (c == 't' || c == 'T')
		return 't';
	return 0;
}

/* "nt" from trans_a 'n' and trans_b 't' (either case); -1 if either is not n or t. */
int ktune__db_layout_text(char trans_a, char trans_b, char buf[3])
{
	buf[0] = trans_char(trans_a);
	buf[1] = trans_char(trans_b);
	buf[2] = '\0';
	return buf[0] && buf[1] ? 0 : -1;
}

int ktune__db_layout_parse(const char *s, char *trans_a, char *trans_b)
{
	if (strlen(s) != 2 || (s[0] != 'n' && s[0] != 't') || (s[1] != 'n' && s[1] != 't'))
		return -1;
	*trans_a = s[0];
	*trans_b = s[1];
	return 0;
}

/*
 * Binding by name: a misspelt name is SQLITE_RANGE, an error, never a silent
 * NULL.  Text comes from fixed-size fields, so it is bound up to the field's
 * size even if the caller left it unterminated, and SQLite copies it, so a
 * binding never points into a stack frame that has gone.
 */
int ktune__db_bind_text(sqlite3_stmt *st, const char *name, const char *s, size_t cap)
{
	int i = sqlite3_bind_parameter_index(st, name);

	if (i == 0)
		return SQLITE_RANGE;
	return sqlite3_bind_text(st, i, s, (int)strnlen(s, cap), SQLITE_TRANSIENT);
}

int ktune__db_bind_int(sqlite3_stmt *st, const char *name, sqlite3_int64 v)
{
	int i = sqlite3_bind_parameter_index(st, name);

	return i ? sqlite3_bind_int64(st, i, v) : SQLITE_RANGE;
}

/* Copies a text column into a fixed-size field, refusing what does not fit. */
int ktune__db_column_text(const struct ktune_db *db, sqlite3_stmt *st, int col, char *buf,
			  size_t cap, struct ktune_err *e)
{
	const unsigned char *s = sqlite3_column_text(st, col);
	int n = sqlite3_column_bytes(st, col);

	if (!s) {
		if (sqlite3_errcode(db->h) == SQLITE_NOMEM)
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory reading database '%s'",
					   db->path);
		buf[0] = '\0';
		return KTUNE_OK;
	}
	if ((size_t)n >= cap)
		return ktune__fail(e, KTUNE_ERR_DB,
				   "database '%s': a row has a %s of %d bytes, more than %zu",
				   db->path, sqlite3_column_name(st, col), n, cap - 1);
	memcpy(buf, s, (size_t)n);
	buf[n] = '\0';
	return KTUNE_OK;
}

int ktune__db_bind_device(sqlite3_stmt *st, const struct ktune_device_id *dev)
{
	int rc;

	if ((rc = BIND_FIELD(st, ":name", dev->name)) != SQLITE_OK ||
	    (rc = BIND_FIELD(st, ":arch", dev->arch)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":sm_count", dev->sm_count)) != SQLITE_OK)
		return rc;
	return SQLITE_OK;
}

/* Binds :op ... :aligned; dtype and layout are the key's encoded texts. */
int ktune__db_bind_key(sqlite3_stmt *st, const struct ktune_key *key, const char *dtype,
		       const char *layout)
{
	int rc;

	if ((rc = BIND_FIELD(st, ":op", key->op)) != SQLITE_OK ||
	    (rc = ktune__db_bind_text(st, ":dtype", dtype, 8)) != SQLITE_OK ||
	    (rc = ktune__db_bind_text(st, ":layout", layout, KTUNE_KEY_VARIANT)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":m", key->m)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":n", key->n)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":k", key->k)) != SQLITE_OK ||
	    (rc = ktune__db_bind_int(st, ":aligned", key->aligned != 0)) != SQLITE_OK)
		return rc;
	return SQLITE_OK;
}

/* Checks a key and encodes its dtype and layout; `what` names the record in the message. */
int ktune__db_check_key(const struct ktune_db *db, const struct ktune_key *key,
			const char *what, const char **dtype, char layout[KTUNE_KEY_VARIANT],
			struct ktune_err *e)
{
	if (strnlen(key->op, sizeof(key->op)) == 0)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s for database '%s' has no op", what,
				   db->path);
	*dtype = ktune__db_dtype_text(key->dtype);
	if (!*dtype)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s for database '%s' has unknown dtype %d",
				   what, db->path, (int)key->dtype);
	if (!strcmp(key->op, "gemm")) {
		/* the layout's case is the caller's: 'N' is 'n' */
		if (ktune__db_layout_text(key->variant[0], key->variant[1], layout) != 0 || key->variant[2])
			return ktune__fail(e, KTUNE_ERR_INVALID,
					   "%s for database '%s' has invalid layout '%c%c'", what, db->path,
					   key->variant[0] ? key->variant[0] : '?',
					   key->variant[1] ? key->variant[1] : '?');
		if (key->m <= 0 || key->n <= 0 || key->k <= 0)
			return ktune__fail(e, KTUNE_ERR_INVALID,
					   "%s for database '%s' has invalid shape %lldx%lldx%lld", what,
					   db->path, (long long)key->m, (long long)key->n, (long long)key->k);
		return KTUNE_OK;
	}
	struct ktune_err sub;
	if (ktune__op_key_check(key, &sub) != KTUNE_OK)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s for database '%s': %s", what, db->path, sub.msg);
	snprintf(layout, KTUNE_KEY_VARIANT, "%s", key->variant);
	return KTUNE_OK;
}

int ktune__db_check_device(const struct ktune_db *db, const struct ktune_device_id *dev,
			   struct ktune_err *e)
{
	if (strnlen(dev->name, sizeof(dev->name)) == 0 || strnlen(dev->arch, sizeof(dev->arch)) == 0)
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "result for database '%s' has no device name or arch", db->path);
	return KTUNE_OK;
}

int ktune__db_prepare(struct ktune_db *db, const char *sql, sqlite3_stmt **st,
		      struct ktune_err *e)
{
	if (sqlite3_prepare_v2(db->h, sql, -1, st, NULL) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot prepare a statement on database '%s': %s",
				   db->path, sqlite3_errmsg(db->h));
	return KTUNE_OK;
}

/* Runs a statement that returns one integer row (a PRAGMA, a count). */
static int query_long(sqlite3 *h, const char *sql, long *out)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(h, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = (long)sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_ERROR;
	}
out:
	sqlite3_finalize(st);
	return rc;
}

/*
 * Every write transaction is BEGIN IMMEDIATE: it takes the write lock at
 * once, waiting up to the busy timeout for another writer.  A deferred one
 * that reads first and then writes cannot wait (SQLite answers SQLITE_BUSY at
 * once when another connection wrote since its read began).
 */
int ktune__db_begin(struct ktune_db *db, struct ktune_err *e)
{
	if (sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot write to database '%s': %s", db->path,
				   sqlite3_errmsg(db->h));
	return KTUNE_OK;
}

int ktune__db_commit(struct ktune_db *db, struct ktune_err *e)
{
	if (sqlite3_exec(db->h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot commit to database '%s': %s", db->path,
				   sqlite3_errmsg(db->h));
	return KTUNE_OK;
}

void ktune__db_rollback(struct ktune_db *db)
{
	if (!sqlite3_get_autocommit(db->h))
		sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int file_exists(const char *path, const char *suffix)
{
	char *buf = malloc(strlen(path) + strlen(suffix) + 1);
	struct stat st;
	int ret;

	if (!buf)
		return 1; /* unknown: assume it does, which only skips a check */
	sprintf(buf, "%s%s", path, suffix);
	ret = stat(buf, &st) == 0;
	free(buf);
	return ret;
}

/*
 * Checks the 100-byte SQLite header before SQLite sees the file, so that a
 * foreign or truncated file gets a precise message and is never written to.
 * An empty file is a new database.
 */
static int check_header(const char *path, const struct stat *st, struct ktune_err *e)
{
	unsigned char hdr[100];
	uint32_t page, npages;
	size_t n = 0;
	ssize_t r;
	int fd, ret = KTUNE_OK;

	if (st->st_size == 0)
		return KTUNE_OK;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* never blocks, should it be a FIFO now */
	if (fd < 0)
		return ktune__fail(e, KTUNE_ERR_IO, "cannot open database '%s': %s", path,
				   strerror(errno));
	while (n < sizeof(hdr)) {
		r = read(fd, hdr + n, sizeof(hdr) - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = ktune__fail(e, KTUNE_ERR_IO, "cannot read database '%s': %s", path,
					  strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n < 16 || memcmp(hdr, "SQLite format 3", 16) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "cannot open database '%s': file is not a database", path);
		goto out;
	}
	if (n < sizeof(hdr)) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "cannot open database '%s': file is truncated (%zu bytes)", path, n);
		goto out;
	}
	page = (uint32_t)hdr[16] << 8 | hdr[17];
	if (page == 1)
		page = 65536;
	if (page < 512 || (page & (page - 1)) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "cannot open database '%s': file is not a database (page size %u)",
				  path, page);
		goto out;
	}
	if ((uintmax_t)st->st_size % page != 0) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "cannot open database '%s': file is truncated (%jd bytes, not a whole number of %u-byte pages)",
				  path, (intmax_t)st->st_size, page);
		goto out;
	}
	/*
	 * The page count at offset 28 is valid when offset 92 matches the change
	 * counter at 24.  A journal or WAL beside the file may hold pages still
	 * to be written back, so the file may be short then: skip the check.
	 */
	npages = be32(hdr + 28);
	if (npages > 0 && be32(hdr + 24) == be32(hdr + 92) &&
	    (uintmax_t)npages * page > (uintmax_t)st->st_size && !file_exists(path, "-wal") &&
	    !file_exists(path, "-journal")) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "cannot open database '%s': file is truncated (%jd bytes, its header says %ju)",
				  path, (intmax_t)st->st_size, (uintmax_t)npages * page);
		goto out;
	}
out:
	close(fd);
	return ret;
}

/* Creates the directory a new database goes in. */
static int make_parent(const char *path, struct ktune_err *e)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int ret;

	if (!slash || slash == path)
		return KTUNE_OK;
	dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory opening database '%s'", path);
	ret = ktune__mkdirs(dir, e);
	free(dir);
	return ret;
}

/*
 * Whether we may write the file and create its -wal and -shm beside it.  If
 * not, it is opened read-only: SQLite then reads a WAL database without
 * creating anything, so a database on a read-only mount still serves lookups.
 */
static int writable(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int ret;

	if (access(path, W_OK) != 0)
		return 0;
	if (!slash)
		return access(".", W_OK) == 0;
	if (slash == path)
		return access("/", W_OK) == 0;
	if (!(dir = strndup(path, (size_t)(slash - path))))
		return 1; /* let SQLite find out */
	ret = access(dir, W_OK) == 0;
	free(dir);
	return ret;
}

/* The message for an SQLite failure while first reading a file. */
static int open_failure(struct ktune_db *db, const char *what, struct ktune_err *e)
{
	int rc = sqlite3_errcode(db->h);

	if (rc == SQLITE_CORRUPT)
		return ktune__fail(e, KTUNE_ERR_DB,
				   "cannot open database '%s': %s (the file is damaged or truncated)",
				   db->path, sqlite3_errmsg(db->h));
#ifdef SQLITE_READONLY_DIRECTORY
	/* SQLite reads a WAL database only where it can create the -shm file beside it. */
	if (sqlite3_extended_errcode(db->h) == SQLITE_READONLY_DIRECTORY ||
	    sqlite3_extended_errcode(db->h) == SQLITE_READONLY_CANTINIT)
		return ktune__fail(e, KTUNE_ERR_DB,
				   "cannot open database '%s': its directory is read-only, and a WAL database needs its '-shm' file there",
				   db->path);
#endif
	return ktune__fail(e, KTUNE_ERR_DB, "cannot %s database '%s': %s", what, db->path,
			   sqlite3_errmsg(db->h));
}

/*
 * Reads the schema version and which tables exist, in one read transaction,
 * and refuses a database that is not ours or is newer.  Writes nothing.
 */
static int inspect(struct ktune_db *db, long *version, struct ktune_err *e)
{
	long ours = 0, others = 0;
	int ret = KTUNE_OK;

	if (sqlite3_exec(db->h, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
	    query_long(db->h, "PRAGMA user_version", version) != SQLITE_OK ||
	    query_long(db->h,
		       "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
		       " AND name IN ('devices', 'results', 'trials')",
		       &ours) != SQLITE_OK ||
	    query_long(db->h,
		       "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
		       &others) != SQLITE_OK) {
		ret = open_failure(db, "open", e);
		goto out;
	}
	if (*version > KTUNE_DB_SCHEMA_VERSION) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "database '%s' has schema version %ld, newer than this ktune (%d): upgrade ktune",
				  db->path, *version, KTUNE_DB_SCHEMA_VERSION);
		goto out;
	}
	if (*version > 0 && ours != 3) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "database '%s' is not a ktune database: schema version %ld but no ktune tables",
				  db->path, *version);
		goto out;
	}
	if (*version < 0 || (*version == 0 && others > 0)) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "database '%s' is not a ktune database: it holds another program's tables",
				  db->path);
		goto out;
	}
out:
	ktune__db_rollback(db);
	return ret;
}

/* Applies the migrations from `version` on, each in its own transaction. */
static int migrate(struct ktune_db *db, long version, struct ktune_err *e)
{
	int ret = KTUNE_OK;
	long i;

	if (version < KTUNE_DB_SCHEMA_VERSION && sqlite3_db_readonly(db->h, "main") == 1)
		return ktune__fail(e, KTUNE_ERR_DB,
				   "cannot migrate database '%s' from schema version %ld: the file is read-only",
				   db->path, version);
	for (i = version; i < KTUNE_DB_SCHEMA_VERSION; i++) {
		if (sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
			ret = open_failure(db, "migrate", e);
			goto out;
		}
		/* Another process may have migrated while we waited for the lock. */
		if (query_long(db->h, "PRAGMA user_version", &version) != SQLITE_OK) {
			ret = open_failure(db, "migrate", e);
			goto out;
		}
		if (version > KTUNE_DB_SCHEMA_VERSION) {
			ret = ktune__fail(e, KTUNE_ERR_DB,
					  "database '%s' has schema version %ld, newer than this ktune (%d): upgrade ktune",
					  db->path, version, KTUNE_DB_SCHEMA_VERSION);
			goto out;
		}
		if (version == i &&
		    sqlite3_exec(db->h, migrations[i], NULL, NULL, NULL) != SQLITE_OK) {
			ret = ktune__fail(e, KTUNE_ERR_DB,
					  "cannot migrate database '%s' to schema version %ld: %s",
					  db->path, i + 1, sqlite3_errmsg(db->h));
			goto out;
		}
		if (sqlite3_exec(db->h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
			ret = ktune__fail(e, KTUNE_ERR_DB,
					  "cannot migrate database '%s' to schema version %ld: %s",
					  db->path, i + 1, sqlite3_errmsg(db->h));
			goto out;
		}
	}
out:
	if (ret != KTUNE_OK)
		ktune__db_rollback(db);
	return ret;
}

/* Per-connection settings, and WAL, which persists in the file. */
static int configure(struct ktune_db *db, struct ktune_err *e)
{
	static const char *const pragmas[] = {
		"PRAGMA journal_mode = WAL",
		"PRAGMA synchronous = NORMAL",
		"PRAGMA foreign_keys = ON",
	};
	sqlite3_stmt *st = NULL;
	size_t i;
	int rc, ret = KTUNE_OK;

	for (i = 0; i < sizeof(pragmas) / sizeof(pragmas[0]); i++) {
		/* A file we may only read keeps its journal mode (WAL can be read as it is). */
		if (i == 0 && sqlite3_db_readonly(db->h, "main") == 1)
			continue;
		rc = sqlite3_prepare_v2(db->h, pragmas[i], -1, &st, NULL);
		/*
		 * Switching to WAL takes an exclusive lock and SQLite does not wait
		 * for it: two sweeps creating one file at once would fail.  Retry.
		 */
		for (int waited_ms = 0; rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED;) {
			do
				rc = sqlite3_step(st);
			while (rc == SQLITE_ROW);
			if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) ||
			    waited_ms >= KTUNE_DB_BUSY_TIMEOUT_MS)
				break;
			sqlite3_reset(st);
			usleep(10000);
			waited_ms += 10;
		}
		if (rc != SQLITE_DONE) {
			ret = ktune__fail(e, KTUNE_ERR_DB, "cannot set '%s' on database '%s': %s",
					  pragmas[i], db->path, sqlite3_errmsg(db->h));
			goto out;
		}
		sqlite3_finalize(st);
		st = NULL;
	}
out:
	sqlite3_finalize(st);
	return ret;
}

/*
 * The oldest schema a reader reads as it is: results have not changed since
 * 4 (5 only added a version); what 6 added reads as absent (no tunings and
 * no misses, trials without their tuning and screen time).
 */
#define READ_MIN_VERSION 4

/*
 * Opens the database at path.  A writer (mode 'w', 'c' to create it) gets
 * it in WAL mode and migrated; a reader (mode 'r') opens it read-only and
 * changes nothing in it: no journal mode, no migration.
 */
static int open_db(const char *path, char mode, struct ktune_db **out, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	struct stat st;
	long version = 0;
	int rc, flags = mode == 'r' ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE, ret = KTUNE_OK;

	if (out)
		*out = NULL;
	if (!path || !*path || !out)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cannot open a database without a path");
	if ((ret = ktune__path_check(path, "database", e)) != KTUNE_OK)
		return ret;

	if (stat(path, &st) != 0) {
		if (errno != ENOENT)
			return ktune__fail(e, KTUNE_ERR_IO, "cannot open database '%s': %s", path,
					   strerror(errno));
		if (mode != 'c')
			return ktune__fail(e, KTUNE_ERR_NOT_FOUND,
					   "cannot open database '%s': no such file", path);
		flags |= SQLITE_OPEN_CREATE;
		ret = make_parent(path, e);
	} else if (S_ISDIR(st.st_mode)) {
		return ktune__fail(e, KTUNE_ERR_DB, "cannot open database '%s': is a directory",
				   path);
	} else if (!S_ISREG(st.st_mode)) {
		/* SQLite would block on a FIFO, and write a -journal beside a device */
		return ktune__fail(e, KTUNE_ERR_DB,
				   "cannot open database '%s': it is %s, not a regular file", path,
				   ktune__file_kind(st.st_mode));
	} else if (st.st_size == 0 && mode != 'c') {
		/* an empty file holds no results, and a reader must not write a schema into it */
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "database '%s' is empty", path);
	} else {
		if (!writable(path))
			flags = SQLITE_OPEN_READONLY;
		ret = check_header(path, &st, e);
	}
	if (ret != KTUNE_OK)
		return ret;

	db = calloc(1, sizeof(*db));
	if (!db || !(db->path = strdup(path))) {
		ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory opening database '%s'", path);
		goto out;
	}
	rc = sqlite3_open_v2(path, &db->h, flags, NULL);
	if (rc != SQLITE_OK) {
		ret = ktune__fail(e, rc == SQLITE_NOMEM ? KTUNE_ERR_NOMEM : KTUNE_ERR_DB,
				  "cannot open database '%s': %s", path,
				  db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
		goto out;
	}
	/*
	 * Writers queue: concurrent sweeps, imports and migrations each hold the
	 * write lock for one short transaction, so waiting beats failing.
	 */
	sqlite3_busy_timeout(db->h, KTUNE_DB_BUSY_TIMEOUT_MS);

	if ((ret = inspect(db, &version, e)) != KTUNE_OK)
		goto out;
	if (mode == 'r') {
		if (version == 0) {
			ret = ktune__fail(e, KTUNE_ERR_DB, "database '%s' holds no ktune tables", path);
			goto out;
		}
		if (version < READ_MIN_VERSION) {
			ret = ktune__fail(e, KTUNE_ERR_DB,
					  "database '%s' has schema version %ld, older than this ktune's (%d): a ktune command that writes to it (sweep, tune, import) migrates it",
					  path, version, KTUNE_DB_SCHEMA_VERSION);
			goto out;
		}
	} else if ((ret = configure(db, e)) != KTUNE_OK || (ret = migrate(db, version, e)) != KTUNE_OK) {
		goto out;
	}
	*out = db;
	db = NULL;
out:
	ktune__db_close(db);
	return ret;
}

int ktune__db_open(const char *path, int create, struct ktune_db **out, struct ktune_err *e)
{
	return open_db(path, create ? 'c' : 'w', out, e);
}

int ktune__db_open_read(const char *path, struct ktune_db **out, struct ktune_err *e)
{
	return open_db(path, 'r', out, e);
}

void ktune__db_close(struct ktune_db *db)
{
	if (!db)
		return;
	sqlite3_close_v2(db->h);
	free(db->path);
	free(db);
}

const char *ktune__db_path(const struct ktune_db *db)
{
	return db ? db->path : NULL;
}

long ktune__db_version(struct ktune_db *db)
{
	long v = 0;
	if (!db || query_long(db->h, "PRAGMA user_version", &v) != SQLITE_OK)
		return 0;
	return v;
}

/* The device's row id, inserting the device if it is new; inside the caller's transaction. */
int ktune__db_device_id(struct ktune_db *db, const struct ktune_device_id *dev,
			sqlite3_int64 *id, struct ktune_err *e)
{
	sqlite3_stmt *ins = NULL, *sel = NULL;
	int ret;

	if ((ret = ktune__db_prepare(db, sql_put_device, &ins, e)) != KTUNE_OK ||
	    (ret = ktune__db_prepare(db, sql_device_id, &sel, e)) != KTUNE_OK)
		goto out;
	if (ktune__db_bind_device(ins, dev) != SQLITE_OK || sqlite3_step(ins) != SQLITE_DONE ||
	    ktune__db_bind_device(sel, dev) != SQLITE_OK || sqlite3_step(sel) != SQLITE_ROW) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot store device '%s' in database '%s': %s",
				  dev->name, db->path, sqlite3_errmsg(db->h));
		goto out;
	}
	*id = sqlite3_column_int64(sel, 0);
out:
	sqlite3_finalize(ins);
	sqlite3_finalize(sel);
	return ret;
}

int ktune__db_open_memory(const char *name, struct ktune_db **out, struct ktune_err *e)
{
	struct ktune_db *db = calloc(1, sizeof(*db));
	int rc, ret;

	*out = NULL;
	if (!db || !(db->path = strdup(name))) {
		free(db);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory opening database '%s'", name);
	}
	rc = sqlite3_open_v2(":memory:", &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot open database '%s': %s", name,
				  db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
		ktune__db_close(db);
		return ret;
	}
	if ((ret = migrate(db, 0, e)) != KTUNE_OK) {
		ktune__db_close(db);
		return ret;
	}
	*out = db;
	return KTUNE_OK;
}

/* An untrusted source, opened read-only: the database an import reads (share-read.c). */

/* Copies s for a message, every byte that is not printable ASCII as '?'. */
static const char *printable_copy(const unsigned char *s, char *buf, size_t len)
{
	size_t n = 0;

	for (; s && *s && n + 1 < len; s++)
		buf[n++] = *s >= 0x20 && *s < 0x7f ? (char)*s : '?';
	buf[n] = '\0';
	return buf;
}

/* A text column, "" for NULL (a hostile sqlite_master may hold one). */
static const char *column_or_empty(sqlite3_stmt *st, int col)
{
	const unsigned char *s = sqlite3_column_text(st, col);

	return s ? (const char *)s : "";
}

/*
 * A file's schema is code to SQLite: a generated column, an expression
 * index, a CHECK constraint or a trigger runs as rows are read or checked.
 * So the schema of an untrusted file must be, object for object and text
 * for text, the one ktune's migrations write (an in-memory database made
 * by them), before any of its rows is read.
 */
static int check_schema(struct ktune_db *db, struct ktune_err *e)
{
	static const char sql[] = "SELECT type, name, tbl_name, sql FROM sqlite_master"
				  " ORDER BY type, name";
	struct ktune_db *ref = NULL;
	sqlite3_stmt *theirs = NULL, *ours = NULL;
	char name[80];
	int rt, ro, i, ret;

	if ((ret = ktune__db_open_memory("reference", &ref, e)) != KTUNE_OK)
		return ret;
	if (sqlite3_prepare_v2(ref->h, sql, -1, &ours, NULL) != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read ktune's schema: %s",
				  sqlite3_errmsg(ref->h));
		goto out;
	}
	if (sqlite3_prepare_v2(db->h, sql, -1, &theirs, NULL) != SQLITE_OK) {
		ret = open_failure(db, "open", e);
		goto out;
	}
	for (;;) {
		rt = sqlite3_step(theirs);
		ro = sqlite3_step(ours);
		if (rt != SQLITE_ROW && rt != SQLITE_DONE) {
			ret = open_failure(db, "open", e);
			goto out;
		}
		if (rt == SQLITE_DONE && ro == SQLITE_DONE)
			break;
		/* in the order of (type, name): the lesser is missing on the other side */
		int order = rt == SQLITE_DONE ? 1 : ro == SQLITE_DONE ? -1 : 0;
		for (i = 0; i < 2 && !order; i++)
			order = strcmp(column_or_empty(theirs, i), column_or_empty(ours, i));
		if (order > 0) {
			ret = ktune__fail(e, KTUNE_ERR_DB,
					  "database '%s' is not a ktune database: it lacks %s '%s'",
					  db->path, sqlite3_column_text(ours, 0),
					  sqlite3_column_text(ours, 1));
			goto out;
		}
		for (i = 0; i < 4; i++) {
			const unsigned char *a = sqlite3_column_text(theirs, i);
			const unsigned char *b = ro == SQLITE_ROW ? sqlite3_column_text(ours, i) : NULL;

			if (ro != SQLITE_ROW || (!a) != (!b) ||
			    (a && (sqlite3_column_bytes(theirs, i) != sqlite3_column_bytes(ours, i) ||
				   strcmp((const char *)a, (const char *)b) != 0)))
				break;
		}
		if (i < 4) {
			ret = ktune__fail(e, KTUNE_ERR_DB,
					  "database '%s' is not a ktune export: its %s '%s' is not %s, and is refused unread",
					  db->path,
					  printable_copy(sqlite3_column_text(theirs, 0), name, 16),
					  printable_copy(sqlite3_column_text(theirs, 1), name + 16,
							 sizeof(name) - 16),
					  order ? "one of ktune's" : "as ktune writes it");
			goto out;
		}
	}
	ret = KTUNE_OK;
out:
	sqlite3_finalize(theirs);
	sqlite3_finalize(ours);
	ktune__db_close(ref);
	return ret;
}

/* The settings of a connection to an untrusted file, before it reads anything. */
static void distrust(sqlite3 *h)
{
	/* the schema is the file's own: run nothing it defines, write nothing */
	sqlite3_db_config(h, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA
	sqlite3_db_config(h, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
#endif
	sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
#ifdef SQLITE_DBCONFIG_ENABLE_VIEW
	sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
#endif
	sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
	/* no value or statement larger than an export's needs (SQLite's own advice) */
	sqlite3_limit(h, SQLITE_LIMIT_LENGTH, 1000000);
	sqlite3_limit(h, SQLITE_LIMIT_SQL_LENGTH, 100000);
	sqlite3_limit(h, SQLITE_LIMIT_COLUMN, 100);
	sqlite3_limit(h, SQLITE_LIMIT_EXPR_DEPTH, 10);
	sqlite3_limit(h, SQLITE_LIMIT_COMPOUND_SELECT, 3);
	sqlite3_limit(h, SQLITE_LIMIT_VDBE_OP, 25000);
	sqlite3_limit(h, SQLITE_LIMIT_FUNCTION_ARG, 8);
	sqlite3_limit(h, SQLITE_LIMIT_ATTACHED, 0);
	sqlite3_limit(h, SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50);
	sqlite3_limit(h, SQLITE_LIMIT_VARIABLE_NUMBER, 10);
	sqlite3_limit(h, SQLITE_LIMIT_TRIGGER_DEPTH, 1);
	sqlite3_exec(h, "PRAGMA query_only = ON", NULL, NULL, NULL);
}

int ktune__db_open_readonly(const char *path, struct ktune_db **out, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	struct stat st;
	long version = 0, ok = 0;
	int rc, ret;

	*out = NULL;
	if (stat(path, &st) != 0)
		return ktune__fail(e, errno == ENOENT ? KTUNE_ERR_NOT_FOUND : KTUNE_ERR_IO,
				   "cannot open database '%s': %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ktune__fail(e, KTUNE_ERR_DB, "cannot open database '%s': not a regular file",
				   path);
	if (st.st_size == 0)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot open database '%s': file is empty", path);
	if ((ret = check_header(path, &st, e)) != KTUNE_OK)
		return ret;
	db = calloc(1, sizeof(*db));
	if (!db || !(db->path = strdup(path))) {
		ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory opening database '%s'", path);
		goto out;
	}
	rc = sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READONLY, NULL);
	if (rc != SQLITE_OK) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot open database '%s': %s", path,
				  db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
		goto out;
	}
	sqlite3_busy_timeout(db->h, KTUNE_DB_BUSY_TIMEOUT_MS); /* it may be another sweep's */
	distrust(db->h);
	if ((ret = inspect(db, &version, e)) != KTUNE_OK || (ret = check_schema(db, e)) != KTUNE_OK)
		goto out;
	if (version < KTUNE_DB_SCHEMA_VERSION) {
		ret = ktune__fail(e, KTUNE_ERR_DB,
				  "database '%s' has schema version %ld, older than this ktune's (%d): "
				  "a ktune command that writes to it (sweep, tune, import) migrates it",
				  path, version, KTUNE_DB_SCHEMA_VERSION);
		goto out;
	}
	if (query_long(db->h, "SELECT count(*) FROM pragma_quick_check WHERE quick_check = 'ok'",
		       &ok) != SQLITE_OK || ok != 1) {
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot open database '%s': the file is damaged",
				  path);
		goto out;
	}
	*out = db;
	db = NULL;
out:
	ktune__db_close(db);
	return ret;
}
