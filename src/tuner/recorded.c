/*
 * recorded.c - the keys to tune from what programs recorded (tune what is
 * used): a misses file (ktune sweep --misses FILE), or the misses the
 * database holds for the GPUs a sweep runs on (ktune sweep --from-db).
 * Either becomes a sweep spec of exactly those keys, each in its own
 * alignment class.
 */
#include <stdlib.h>
#include <string.h>

#include "db/misses.h"
#include "tuner/tuner.h"

/* Appends m's keys not in out yet (several GPUs' misses may share keys). */
static int add_keys(struct ktune_spec *out, const struct ktune_miss *m, int n, struct ktune_err *e)
{
	struct ktune_key *grown = realloc(out->keys, (size_t)(out->nkeys + n + 1) * sizeof(*grown));
	if (!grown)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	out->keys = grown;
	for (int i = 0; i < n; i++) {
		int j;
		for (j = 0; j < out->nkeys && !ktune__key_same(&out->keys[j], &m[i].key); j++)
			;
		if (j == out->nkeys) {
			if (out->nkeys >= KTUNE_SPEC_MAX_KEYS)
				return ktune__fail(e, KTUNE_ERR_PARSE, "more than %d recorded keys", KTUNE_SPEC_MAX_KEYS);
			out->keys[out->nkeys++] = m[i].key;
		}
	}
	return KTUNE_OK;
}

int ktune__spec_from_misses(const char *path, struct ktune_spec *out, struct ktune_device_id *recorded_on,
			    struct ktune_err *e)
{
	struct ktune_misses_file f;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = ktune__misses_read(path, &f, e)))
		return rc;
	rc = add_keys(out, f.m, f.n, e);
	if (recorded_on)
		*recorded_on = f.device;
	ktune__misses_file_free(&f);
	if (rc)
		ktune__spec_free(out);
	return rc;
}

struct collected {
	struct ktune_miss *m;
	int n, cap;
};

static int collect(const struct ktune_device_id *d, const struct ktune_miss *m, void *arg)
{
	struct collected *c = arg;
	(void)d;
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		struct ktune_miss *grown = realloc(c->m, (size_t)cap * sizeof(*grown));
		if (!grown)
			return 1;
		c->m = grown;
		c->cap = cap;
	}
	c->m[c->n++] = *m;
	return 0;
}

int ktune__spec_from_db_misses(struct ktune_db *db, const struct ktune_device_id *devs, int ndevs,
			       struct ktune_spec *out, struct ktune_err *e)
{
	int rc = KTUNE_OK;

	memset(out, 0, sizeof(*out));
	for (int d = 0; d < ndevs && !rc; d++) {
		struct collected c = { NULL, 0, 0 };
		rc = ktune__db_misses(db, &devs[d], collect, &c, e);
		if (rc > 0)
			rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		if (!rc)
			rc = add_keys(out, c.m, c.n, e);
		free(c.m);
	}
	if (rc)
		ktune__spec_free(out);
	return rc;
}
