/*
 * record.c - the keys a context served without a tuned entry (record.h).
 *
 * The runtime notes a key once, when it first resolves it (already under
 * the context's lock, off the hot path), and counts each later call on the
 * entry that noting returned, which its resolved-key entry keeps.  The
 * table's own mutex lets the tests, and a snapshot taken while calls run,
 * use it without the context's lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/record.h"

void ktune__record_init(struct ktune_record *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
}

void ktune__record_free(struct ktune_record *r)
{
	for (int i = 0; i < KTUNE_RECORD_BUCKETS; i++)
		for (struct ktune_recorded *x = r->bucket[i], *next; x; x = next) {
			next = x->next;
			free(x);
		}
	memset(r->bucket, 0, sizeof(r->bucket));
	r->count = 0;
	pthread_mutex_destroy(&r->lock);
}

int ktune__source_tuned(const char *source)
{
	return source && (!strcmp(source, "exact") || !strcmp(source, "arch") || !strcmp(source, "shipped"));
}

static unsigned bucket_of(const struct ktune_key *k)
{
	uint64_t h = 1469598103934665603ull;
	uint64_t parts[4] = { (uint64_t)k->m, (uint64_t)k->n, (uint64_t)k->k,
			      ((uint64_t)k->dtype << 8) | (uint64_t)k->aligned };
	for (int i = 0; i < 4; i++)
		h = (h ^ parts[i]) * 1099511628211ull;
	for (const char *s = k->op; *s && s < k->op + sizeof(k->op); s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	for (const char *s = k->variant; *s && s < k->variant + sizeof(k->variant); s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (unsigned)((h ^ (h >> 31)) % KTUNE_RECORD_BUCKETS);
}

struct ktune_recorded *ktune__record_note(struct ktune_record *r, const struct ktune_key *key,
					  const char *source)
{
	unsigned b = bucket_of(key);
	struct ktune_recorded *x;

	pthread_mutex_lock(&r->lock);
	for (x = r->bucket[b]; x; x = x->next)
		if (ktune__key_same(&x->key, key))
			break;
	if (!x && (x = calloc(1, sizeof(*x)))) {
		x->key = *key;
		x->next = r->bucket[b];
		r->bucket[b] = x;
		r->count++;
	}
	if (x) {
		x->source = source; /* the latest: a context resolves a key once, but two may share a table */
		ktune__record_count(x);
	} else {
		r->dropped++;
	}
	pthread_mutex_unlock(&r->lock);
	return x;
}

static int by_key(const void *a, const void *b)
{
	return ktune__key_compare(&((const struct ktune_miss *)a)->key, &((const struct ktune_miss *)b)->key);
}

static int list(struct ktune_record *r, int unsaved, struct ktune_miss **out, int *n, struct ktune_err *e)
{
	struct ktune_miss *m = NULL;
	int count = 0;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&r->lock);
	if (r->count && !(m = calloc((size_t)r->count, sizeof(*m)))) {
		pthread_mutex_unlock(&r->lock);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory listing %d recorded keys", r->count);
	}
	for (int i = 0; i < KTUNE_RECORD_BUCKETS; i++)
		for (struct ktune_recorded *x = r->bucket[i]; x; x = x->next) {
			m[count].key = x->key;
			snprintf(m[count].source, sizeof(m[count].source), "%s", x->source ? x->source : "?");
			m[count].calls = __atomic_load_n(&x->calls, __ATOMIC_RELAXED) - (unsaved ? x->saved : 0);
			count += m[count].calls > 0 || !unsaved;
		}
	pthread_mutex_unlock(&r->lock);
	if (count > 1)
		qsort(m, (size_t)count, sizeof(*m), by_key);
	*out = m;
	*n = count;
	return KTUNE_OK;
}

int ktune__record_list(struct ktune_record *r, struct ktune_miss **out, int *n, struct ktune_err *e)
{
	return list(r, 0, out, n, e);
}

int ktune__record_unsaved(struct ktune_record *r, struct ktune_miss **out, int *n, struct ktune_err *e)
{
	return list(r, 1, out, n, e);
}

void ktune__record_saved(struct ktune_record *r, const struct ktune_miss *m, int n)
{
	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < n; i++)
		for (struct ktune_recorded *x = r->bucket[bucket_of(&m[i].key)]; x; x = x->next)
			if (ktune__key_same(&x->key, &m[i].key)) {
				x->saved += m[i].calls;
				break;
			}
	pthread_mutex_unlock(&r->lock);
}

void ktune__record_totals(struct ktune_record *r, int64_t *keys, int64_t *calls)
{
	int64_t c = 0;
	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < KTUNE_RECORD_BUCKETS; i++)
		for (struct ktune_recorded *x = r->bucket[i]; x; x = x->next)
			c += __atomic_load_n(&x->calls, __ATOMIC_RELAXED);
	*keys = r->count;
	pthread_mutex_unlock(&r->lock);
	*calls = c;
}
