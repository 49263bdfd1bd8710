/*
 * db.h - the tuning database: SQLite in WAL mode, schema versioned with
 * PRAGMA user_version and migrated forward on open.  It holds the devices,
 * the best result per (device, key) with its provenance, every trial
 * (candidate measured or failed) with its status, and the claims of sweeps
 * on the keys they are tuning.
 *
 * Every write is one BEGIN IMMEDIATE transaction; readers never see half a
 * result, and concurrent writers (other sweeps) queue for up to a minute.
 */
#ifndef KTUNE_DB_H
#define KTUNE_DB_H

#include "common.h"
#include "key.h"

/* The schema version this build writes; older files are migrated, newer refused. */
#define KTUNE_DB_SCHEMA_VERSION 6

struct ktune_db; /* opaque */

struct ktune_device_id {
	char name[128]; /* "NVIDIA H100 80GB HBM3" */
	char arch[16];  /* "sm_90" */
	int sm_count;
};

/* The best configuration found for one key on one device, with its provenance. */
struct ktune_result {
	struct ktune_key key;
	struct ktune_device_id device;
	char family[32];        /* template family: "gemm" */
	char config[256];       /* canonical "BLOCK_M=128,BLOCK_N=128,..." */
	char template_hash[65]; /* sha256 of the family's template source */
	double time_us, p20_us, p80_us;
	double tflops;
	double cublas_us;       /* baseline measured in the same run; 0 if none */
	double err_fro, err_max;
	int candidates;         /* configurations tried for this key */
	double tune_s;          /* wall time spent tuning this key */
	char nvrtc_version[32], driver_version[32], ktune_version[32];
	char protocol[256];     /* benchmark protocol, e.g. "events;l2flush;warmup=2;reps>=10;median" */
	char created_at[32];    /* ISO 8601 UTC, set by the database on insert */
	/*
	 * "" when the measurement was clean, else what disturbed it that
	 * re-measuring did not clear: "disturbed: another process (pid 12) used
	 * the GPU".  Local to this database: neither exported nor imported.
	 */
	char measure_note[128];
};

/* Outcome of one candidate; status is one of the strings below. */
#define KTUNE_TRIAL_OK "ok"
#define KTUNE_TRIAL_COMPILE_ERROR "compile_error"
#define KTUNE_TRIAL_LAUNCH_ERROR "launch_error"
#define KTUNE_TRIAL_WRONG "wrong"
#define KTUNE_TRIAL_PRUNED "pruned"
#define KTUNE_TRIAL_CRASHED "crashed"
#define KTUNE_TRIAL_TIMEOUT "timeout"

struct ktune_trial {
	struct ktune_key key;
	char family[32];
	char config[256];
	char template_hash[65];
	char status[16];
	double time_us;  /* 0 unless ok */
	double err_fro, err_max;
	char message[512];
	char nvrtc_version[32], driver_version[32]; /* the toolchain it ran with */
	double screen_us; /* the screen's time (time_us is a finalist's last measurement); 0: not screened */
};

/* Stages of a tuning's full measurements (struct ktune_measurement). */
#define KTUNE_STAGE_FINAL "final"         /* the finalists by the full protocol, in order */
#define KTUNE_STAGE_FINAL_REV "final_rev" /* the finalists again, in reverse order */
#define KTUNE_STAGE_TURNS "turns"         /* the fastest finalist in turns with the baseline */
#define KTUNE_STAGE_RUNOFF "runoff"       /* the fastest finalist of another tile, in turns */
#define KTUNE_STAGE_AGAIN "again"         /* the runoff's winner in turns once more: the figures stored */
#define KTUNE_STAGE_GROUP_OWN "group_own" /* the group pick: the key's own pick, in turns */
#define KTUNE_STAGE_GROUP_TILE "group_tile" /* the group pick: the group's tile, in turns */
#define KTUNE_STAGE_GROUP_FINAL "group_final" /* the group's tile once more: the figures stored */

/* One full measurement a tuning took, in order. */
struct ktune_measurement {
	char stage[16];   /* KTUNE_STAGE_* */
	int round;        /* the attempt (NVML saw a disturbance: measured again), or the group pick's round */
	char config[256]; /* "" for the baseline: cuBLAS, or the copy of as many bytes */
	char status[16];  /* a trial status: ok, wrong, crashed, ... */
	double time_us, p20_us, p80_us; /* median and spread; 0 unless ok */
	int reps;
};

/*
 * One tuning of a key (ktune tune, a sweep's key), or one group pick that
 * weighed it: what ktune explain shows beside the trials.
 */
struct ktune_tuning {
	long long id; /* the row's, when read */
	struct ktune_key key;
	struct ktune_device_id device;
	char kind[8];      /* "tune" or "group" */
	/*
	 * tune: "tuned", "none_right" (no candidate computed the right result);
	 * group: "switched" (the group's tile is stored now), "kept" (the key's
	 * own pick beat it in every round), "outvoted" (the tile lost over the
	 * group), "own_tile" (the key's pick is the tile), "unfit" (the tile is
	 * pruned for the key, or failed to compile), "failed" (a run failed)
	 */
	char outcome[16];
	char winner[256];  /* the config stored; "" if none */
	int candidates;    /* configs tried */
	int pruned;        /* configs left out before compiling: pruned for the key and device, or not drawn */
	int known_bad;     /* configs skipped that failed before (the negative cache) */
	int budget;        /* candidates asked for; 0: all */
	long seed;
	int smem_optin;    /* the device's shared memory per block, bytes: what pruning used */
	double baseline_us; /* cuBLAS (or the copy) in turns with the winner; 0 if none */
	double tune_s;
	char note[1024];   /* the decisions in words, a line each */
	char created_at[32];
	struct ktune_measurement *m; /* in order; when read, owned by the reader's callback's caller */
	int nm;
};

/* Outcomes of a tuning (struct ktune_tuning.outcome). */
#define KTUNE_TUNED "tuned"
#define KTUNE_NONE_RIGHT "none_right"

/*
 * A key that a program was served without a tuned entry (by "nearest",
 * "model", "cublas" or "default"), with the calls it took.
 */
struct ktune_miss {
	struct ktune_key key; /* as looked up: GEMM's exact sizes, another op's bucket */
	char source[16];      /* what served it: "nearest", "model", "cublas", "default" */
	int64_t calls;
	char first_seen[32], last_seen[32]; /* ISO 8601 UTC in the database; "" elsewhere */
};

/* Which results a query returns; zero fields match anything. */
struct ktune_filter {
	char device[128];  /* substring of the device name */
	char arch[16];
	char op[16];
	int has_dtype;
	ktune_dtype dtype;
	char layout[KTUNE_KEY_VARIANT]; /* GEMM: "nt"; another op: its variant, exactly */
	int64_t m, n, k;
};

/*
 * Opens (creating it and its directory if `create`) the database at `path`,
 * migrating an older schema, for a command that writes.  A file that is not
 * a ktune database, is truncated, has a newer schema, or is not a regular
 * file (a FIFO, a device) gets a clear error naming the path; a path longer
 * than the system allows is refused, never cut.
 */
int ktune__db_open(const char *path, int create, struct ktune_db **out, struct ktune_err *e);
void ktune__db_close(struct ktune_db *db); /* NULL is a no-op */

/*
 * Opens an existing database read-only for a command that only reads (show,
 * export, info, the runtime's lookups): it writes nothing into the file,
 * neither a journal mode nor a migration.  A schema older than version 4
 * is refused (a command that writes migrates it); a missing or empty file is
 * KTUNE_ERR_NOT_FOUND.
 */
int ktune__db_open_read(const char *path, struct ktune_db **out, struct ktune_err *e);

/*
 * Stores a result, replacing the one for the same (device, key), and its
 * trials, and ends any claim on that (device, key), in one transaction.
 */
int ktune__db_put_result(struct ktune_db *db, const struct ktune_result *r,
			 const struct ktune_trial *trials, int ntrials, struct ktune_err *e);

/*
 * Stores a tuning of a key in one transaction: its result if r is not NULL
 * (replacing the one for the same device and key, and ending any claim on
 * it), its trials, and the record of the tuning (may be NULL) with its
 * measurements, to which the trials then point.  The device is dev (r's
 * when r is given).  Without r a claim on the key stays: release it.
 */
int ktune__db_put_tuning(struct ktune_db *db, const struct ktune_result *r,
			 const struct ktune_device_id *dev, const struct ktune_trial *trials,
			 int ntrials, const struct ktune_tuning *tuning, struct ktune_err *e);

/*
 * Each tuning of (device, key), newest first, with its measurements (t->m,
 * valid during the call); fn's non-zero value stops and is returned.  A
 * database older than schema 6 has none.
 */
int ktune__db_tunings(struct ktune_db *db, const struct ktune_device_id *dev,
		      const struct ktune_key *key, int (*fn)(const struct ktune_tuning *t, void *arg),
		      void *arg, struct ktune_err *e);

/*
 * The trials of (device, key) that belong to tuning `tuning_id`, or every
 * trial of the key when tuning_id is 0, in the order stored; fn's non-zero
 * value stops and is returned.
 */
int ktune__db_trials(struct ktune_db *db, const struct ktune_device_id *dev,
		     const struct ktune_key *key, long long tuning_id,
		     int (*fn)(const struct ktune_trial *t, void *arg), void *arg, struct ktune_err *e);

/* Every device of the database, by name, arch and SM count; fn's non-zero value stops. */
int ktune__db_devices(struct ktune_db *db, int (*fn)(const struct ktune_device_id *d, void *arg),
		      void *arg, struct ktune_err *e);

/* The database's schema version (PRAGMA user_version); a reader's may be older than ours. */
long ktune__db_version(struct ktune_db *db);

/*
 * Adds recorded misses of device dev, in one transaction: a key new to the
 * table is inserted, one already there gets its calls added, its source
 * and last_seen updated.
 */
int ktune__db_put_misses(struct ktune_db *db, const struct ktune_device_id *dev,
			 const struct ktune_miss *m, int n, struct ktune_err *e);

/*
 * The recorded misses of device dev (NULL: of every device), by device and
 * key; fn's non-zero value stops and is returned.  A database older than
 * schema 6 has none.
 */
int ktune__db_misses(struct ktune_db *db, const struct ktune_device_id *dev,
		     int (*fn)(const struct ktune_device_id *d, const struct ktune_miss *m, void *arg),
		     void *arg, struct ktune_err *e);

/*
 * Stores trials without a result (a key where no candidate was right), in
 * one transaction.  A claim on the key stays: release it.
 */
int ktune__db_put_trials(struct ktune_db *db, const struct ktune_device_id *dev,
			 const struct ktune_trial *trials, int ntrials, struct ktune_err *e);

/*
 * The negative cache: each config that failed (compile_error, launch_error,
 * wrong, crashed, timeout) for this device and key with this template source
 * and toolchain.  Calls fn per config, in config order; stops and returns
 * fn's value if non-zero.
 */
int ktune__db_failed_configs(struct ktune_db *db, const struct ktune_device_id *dev,
			     const struct ktune_key *key, const char *template_hash,
			     const char *nvrtc_version, const char *driver_version,
			     int (*fn)(const char *config, const char *status, void *arg),
			     void *arg, struct ktune_err *e);

/*
 * Looks up the result for exactly (device, key).  Returns 1 and fills *out
 * if found, 0 if not, a negative status on error.
 */
int ktune__db_get_result(struct ktune_db *db, const struct ktune_device_id *dev,
			 const struct ktune_key *key, struct ktune_result *out, struct ktune_err *e);

/*
 * Calls fn for each result matching the filter (NULL: all), ordered by
 * device, op, dtype, layout, m, n, k.  Stops and returns fn's value if non-zero.
 */
int ktune__db_query(struct ktune_db *db, const struct ktune_filter *f,
		    int (*fn)(const struct ktune_result *r, void *arg), void *arg,
		    struct ktune_err *e);

/*
 * For one device and key, each configuration that ran right ("ok" trials of
 * the given template hash) with its best time and its errors: calls fn once
 * per configuration, in config order.  Stops and returns fn's value if non-zero.
 */
int ktune__db_config_times(struct ktune_db *db, const struct ktune_device_id *dev,
			   const struct ktune_key *key, const char *template_hash,
			   int (*fn)(const char *config, double time_us, double err_fro,
				     double err_max, void *arg),
			   void *arg, struct ktune_err *e);

/* Number of stored results and trials. */
int ktune__db_count(struct ktune_db *db, long *results, long *trials, struct ktune_err *e);

/*
 * Claims: concurrent sweeps on one database (one process per GPU, on one or
 * several GPUs of one model or of different models) share out the keys.
 * A sweep claims a (device, key) before tuning it; the result it stores ends
 * the claim.  A claim's owner is a string unique to one sweep
 * (ktune__db_claim_owner); the claim also records the process id and host,
 * when it was taken and when its owner last said it was alive.
 *
 * A claim is stale, and taken over by the next sweep that asks, when its
 * heartbeat is older than KTUNE_CLAIM_LEASE_S, or at once when its owner ran
 * on this host (and pid namespace) and that process no longer exists.  An
 * owner tuning one key for longer than the lease must heartbeat meanwhile.
 */
#define KTUNE_CLAIM_LEASE_S 600
#define KTUNE_CLAIM_OWNER_MAX 128 /* bytes of an owner string, with the NUL */

enum ktune_claim {
	KTUNE_CLAIM_TAKEN = 0, /* we hold the key now: tune it, then store or release */
	KTUNE_CLAIM_DONE = 1,  /* a result with this template source exists: skip it */
	KTUNE_CLAIM_BUSY = 2,  /* another live owner is tuning it: come back later */
};

/*
 * Writes a new owner string into buf: "<host name>:<pid>:<random hex>".
 * Make one per sweep, in the process that sweeps (after any fork).
 */
int ktune__db_claim_owner(char *buf, size_t len, struct ktune_err *e);

/*
 * Claims (dev, key), in one transaction.  Returns KTUNE_CLAIM_DONE when a
 * result for (dev, key) exists that was tuned with template_hash or with
 * the current source of its own family (ktune__gemm_result_fresh; unless
 * force: a --force sweep retunes it), KTUNE_CLAIM_BUSY when another owner holds a
 * live claim, KTUNE_CLAIM_TAKEN when the claim is ours now: new, taken over
 * from a stale owner, or already ours (its heartbeat refreshed).  A
 * negative status on error.
 */
int ktune__db_claim_key(struct ktune_db *db, const struct ktune_device_id *dev,
			const struct ktune_key *key, const char *template_hash,
			const char *owner, int force, struct ktune_err *e);

/*
 * Refreshes the heartbeat of every claim of owner.  Returns how many there
 * are (fewer than the caller holds means a claim was taken over as stale),
 * or a negative status.
 */
int ktune__db_heartbeat(struct ktune_db *db, const char *owner, struct ktune_err *e);

/*
 * Deletes owner's claim on (dev, key), when tuning it failed or stopped.
 * Returns 1 if there was one, 0 if not (another owner's claim is left
 * alone), or a negative status.
 */
int ktune__db_release_key(struct ktune_db *db, const struct ktune_device_id *dev,
			  const struct ktune_key *key, const char *owner, struct ktune_err *e);

/* Deletes every claim of owner (a sweep ending); returns how many, or a negative status. */
int ktune__db_release_all(struct ktune_db *db, const char *owner, struct ktune_err *e);

/* The path the database was opened with. */
const char *ktune__db_path(const struct ktune_db *db);

/*
 * Opens an existing database read-only, without migrating, configuring or
 * otherwise changing it: the source of an import, which is untrusted.  The
 * connection is defensive (SQLITE_DBCONFIG_DEFENSIVE, trusted_schema off, no
 * triggers or views, low limits on lengths and SQL), and the file's schema
 * must be exactly the one ktune writes before a row is read: a generated
 * column, an expression index or a trigger is refused unread.  An older
 * schema is refused too (a command that writes to it migrates it).
 */
int ktune__db_open_readonly(const char *path, struct ktune_db **out, struct ktune_err *e);

/*
 * A new database in memory with the current schema (every migration
 * applied); `name` stands for its path in messages.  What a standalone
 * export is built in, and the schema an untrusted file is compared with.
 */
int ktune__db_open_memory(const char *name, struct ktune_db **out, struct ktune_err *e);

/* What an import did with one entry. */
enum ktune_import_outcome {
	KTUNE_IMPORT_ADDED,    /* no result for its device and key: stored */
	KTUNE_IMPORT_REPLACED, /* replaced ours */
	KTUNE_IMPORT_KEPT,     /* ours kept */
	KTUNE_IMPORT_SKIPPED,  /* not considered: tuned for another template source */
};

struct ktune_import_item {
	enum ktune_import_outcome outcome;
	char reason[128]; /* "theirs is faster: 10.2 us vs 11.5 us" */
};

struct ktune_import_counts {
	long added, replaced, kept, skipped;
};

/*
 * Merges n checked results (see db/share.h) into the database under a
 * policy (enum ktune_policy of db/share.h) in one transaction: all of them or,
 * on any failure or a crash midway, none.  rs[i] with stale[i] set (stale may
 * be NULL) is skipped.  items (may be NULL) gets each entry's outcome and
 * reason, counts (may be NULL) the totals.  With dry_run the same report is
 * made and the transaction rolled back.  Results keep their created_at; they
 * bring no trials, and no measure_note (stored as "").
 */
int ktune__db_import(struct ktune_db *db, const struct ktune_result *rs,
		     const unsigned char *stale, long n, int policy, int dry_run,
		     struct ktune_import_item *items, struct ktune_import_counts *counts,
		     struct ktune_err *e);

/*
 * Writes the results into a new standalone database file at path (no WAL or
 * journal beside it, no trials): built in memory, then written by
 * ktune__write_file_atomic (a locked temp file renamed over path, which
 * must be a regular file if it exists).  An existing path is refused unless
 * force.
 */
int ktune__db_write_standalone(const char *path, const struct ktune_result *rs, long n,
			       int force, struct ktune_err *e);

#endif
