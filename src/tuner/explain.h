/*
 * explain.h - everything ktune explain shows of one key on one device: how
 * dispatch serves it, the miss programs recorded for it, its stored result,
 * and its newest tuning: every candidate's fate, the pruning before
 * compiling (recomputed for the key and device, grouped by reason), the
 * full measurements and the decisions, and the group picks that weighed it
 * since.  Read from the database and the registry: no GPU is needed.
 */
#ifndef KTUNE_EXPLAIN_H
#define KTUNE_EXPLAIN_H

#include "db/db.h"
#include "runtime/device.h"

/* Configs pruned before compiling for one reason (its numbers as N). */
struct ktune_explain_prune {
	char reason[160];  /* "needs N bytes of shared memory, the device allows N" */
	int count;
	char example[256]; /* one config pruned so */
	char why[160];     /* its reason in full */
};

#define KTUNE_EXPLAIN_PRUNES 24

struct ktune_explain {
	struct ktune_key key;
	struct ktune_device_info device;
	struct ktune_dispatch_explain dispatch;
	int has_db;                   /* the database exists (else only dispatch's shipped tuning and defaults) */
	int has_result, result_fresh; /* a stored result for the key on this device; tuned with the current template */
	struct ktune_result result;
	int has_miss;                 /* programs recorded the key as a miss on this device */
	struct ktune_miss miss;
	int ntunings;                 /* tunings of the key stored, of every kind */
	int has_tuning;               /* the newest tune of the key (kind "tune") */
	struct ktune_tuning tuning;   /* its measurements malloc'd */
	struct ktune_trial *trials;   /* its trials, in the order tried; malloc'd */
	int ntrials;
	struct ktune_tuning *groups;  /* the group picks that weighed the key since, newest first; each m malloc'd */
	int ngroups;
	/* Pruning before compiling, recomputed now for the key and device (the tuning's shared memory). */
	int space;                    /* configs of the op's spaces that run for the key here */
	int pruned_now;
	struct ktune_explain_prune prunes[KTUNE_EXPLAIN_PRUNES];
	int nprunes;                  /* reasons beyond the last slot count in its "other" entry */
	/* What a wrong candidate was judged by: GEMM's two errors, or the op's largest over its outputs. */
	double tol_fro, tol_max;
};

/*
 * Gathers what is known of key (bucketed as its op tunes it) on device dev
 * from the database at db_path (a missing one is no error: dispatch's
 * shipped tuning and defaults are still explained).  The database is only
 * read.  Free with ktune__explain_free.
 */
int ktune__explain(const char *db_path, const struct ktune_device_info *dev, const struct ktune_key *key,
		   struct ktune_explain *out, struct ktune_err *e);
void ktune__explain_free(struct ktune_explain *x);

#endif
