/*
 * record.h - the keys a context served without a tuned entry, counted on
 * the call path: a small hash table of its own, guarded by its own mutex
 * and taken only the first time a key is resolved; every later call of
 * that key adds one to its entry's counter with a relaxed atomic, no lock
 * and no I/O.  ktune_close (or ktune_save_misses) saves a snapshot: to a
 * misses file (db/misses.h) or into the database.
 *
 * Plain C (no CUDA type), so that the tests drive it from many threads
 * without a GPU.
 */
#ifndef KTUNE_RECORD_H
#define KTUNE_RECORD_H

#include <pthread.h>
#include <stdint.h>

#include "db/db.h"
#include "key.h"

#define KTUNE_RECORD_BUCKETS 256

/* One key served without a tuned entry; entries live until the table is freed. */
struct ktune_recorded {
	struct ktune_key key;
	const char *source; /* a static string: "nearest", "model", "cublas", "default" */
	int64_t calls;      /* atomic */
	int64_t saved;      /* of those, the calls a save has written (under the lock) */
	struct ktune_recorded *next;
};

struct ktune_record {
	pthread_mutex_t lock; /* guards the buckets and count; calls are atomic */
	struct ktune_recorded *bucket[KTUNE_RECORD_BUCKETS];
	int count;
	int64_t dropped; /* calls of keys that could not be noted (out of memory) */
};

void ktune__record_init(struct ktune_record *r);
void ktune__record_free(struct ktune_record *r);

/*
 * Whether a dispatch source is a tuned entry ("exact", "arch", "shipped");
 * a key whose own config came from any other (nearest, model, default) is
 * a miss, whoever serves it (cuBLAS included: resolve.c).
 */
int ktune__source_tuned(const char *source);

/*
 * Notes one call of `key` served by `source` (static): the key's entry,
 * created on its first call, or NULL when out of memory (the call is then
 * counted in `dropped`).  Later calls of the key count on the entry with
 * ktune__record_count.  Thread-safe.
 */
struct ktune_recorded *ktune__record_note(struct ktune_record *r, const struct ktune_key *key,
					  const char *source);

/* One more call of a noted key: a relaxed atomic add.  Thread-safe. */
static inline void ktune__record_count(struct ktune_recorded *x)
{
	__atomic_add_fetch(&x->calls, 1, __ATOMIC_RELAXED);
}

/*
 * A snapshot of the table, sorted by key: a malloc'd array in *out (NULL
 * when empty) and its length in *n.  Thread-safe.
 */
int ktune__record_list(struct ktune_record *r, struct ktune_miss **out, int *n, struct ktune_err *e);

/*
 * The same snapshot, less what earlier saves wrote: each key's calls since
 * it was last saved, keys without any left out; after writing them,
 * ktune__record_saved(r, m, n) marks them written, so that a service saving
 * from time to time and then at close counts every call once.  Thread-safe.
 */
int ktune__record_unsaved(struct ktune_record *r, struct ktune_miss **out, int *n, struct ktune_err *e);
void ktune__record_saved(struct ktune_record *r, const struct ktune_miss *m, int n);

/* Keys noted and the calls counted on them so far.  Thread-safe. */
void ktune__record_totals(struct ktune_record *r, int64_t *keys, int64_t *calls);

#endif
