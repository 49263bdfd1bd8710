/*
 * defaults.h - configs for GPUs nobody tuned.  For each key tuned on one or
 * more devices of an arch (with one template source), the config that is
 * best on average across those devices, each device's time taken relative
 * to its own best; exported with `ktune export --defaults` as the entries of
 * a device named "ktune defaults (N GPUs)", which other GPUs of the arch
 * pick up as same-arch entries.
 */
#ifndef KTUNE_DEFAULTS_H
#define KTUNE_DEFAULTS_H

#include "db/db.h"

/*
 * From the results rs (as read from db), one entry per (arch, template hash,
 * key); out is malloc'd, sorted by arch and key.  The trials in db give each
 * device's time for every config it ran.
 */
int ktune__db_defaults(struct ktune_db *db, const struct ktune_result *rs, long n,
		       struct ktune_result **out, long *nout, struct ktune_err *e);

#endif
