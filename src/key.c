/*
 * key.c - names and formatting of problem keys.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "key.h"

static const struct {
	ktune_dtype dtype;
	const char *name;
	int size;
} dtypes[] = {
	{ KTUNE_F16, "f16", 2 },
	{ KTUNE_BF16, "bf16", 2 },
	{ KTUNE_F32, "f32", 4 },
};

#define NDTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

const char *ktune__dtype_name(ktune_dtype d)
{
	int i;

	for (i = 0; i < NDTYPES; i++) {
		if (dtypes[i].dtype == d)
			return dtypes[i].name;
	}
	return NULL;
}

int ktune__dtype_parse(const char *s, ktune_dtype *out)
{
	int i;

	for (i = 0; s && i < NDTYPES; i++) {
		if (!strcmp(dtypes[i].name, s)) {
			*out = dtypes[i].dtype;
			return 0;
		}
	}
	return -1;
}

int ktune__dtype_size(ktune_dtype d)
{
	int i;

	for (i = 0; i < NDTYPES; i++) {
		if (dtypes[i].dtype == d)
			return dtypes[i].size;
	}
	return 0;
}

void ktune__layout_name(const struct ktune_key *key, char buf[3])
{
	buf[0] = key->variant[0];
	buf[1] = buf[0] ? key->variant[1] : '\0';
	buf[2] = '\0';
}

int ktune__layout_parse(const char *s, struct ktune_key *key)
{
	if (!s || (s[0] != 'n' && s[0] != 't') || (s[1] != 'n' && s[1] != 't') || s[2])
		return -1;
	memset(key->variant, 0, sizeof(key->variant));
	key->variant[0] = s[0];
	key->variant[1] = s[1];
	return 0;
}

void ktune__key_shape(const struct ktune_key *key, char *buf, size_t len)
{
	int last = key->k ? 3 : key->n ? 2 : 1;
	snprintf(buf, len, "%" PRId64, key->m);
	if (last >= 2)
		snprintf(buf + strlen(buf), len - strlen(buf), "x%" PRId64, key->n);
	if (last >= 3)
		snprintf(buf + strlen(buf), len - strlen(buf), "x%" PRId64, key->k);
}

void ktune__key_format(const struct ktune_key *key, char *buf, size_t len)
{
	const char *dtype = ktune__dtype_name(key->dtype);
	char shape[64];

	ktune__key_shape(key, shape, sizeof(shape));
	snprintf(buf, len, "%.16s %s%s%.24s %s %s", key->op, dtype ? dtype : "?", key->variant[0] ? " " : "",
		 key->variant, shape, key->aligned ? "aligned" : "unaligned");
}

int ktune__key_compare(const struct ktune_key *a, const struct ktune_key *b)
{
	int c = strncmp(a->op, b->op, sizeof(a->op));
	if (!c)
		c = (int)a->dtype - (int)b->dtype;
	if (!c)
		c = strncmp(a->variant, b->variant, sizeof(a->variant));
	if (!c)
		c = a->m < b->m ? -1 : a->m > b->m;
	if (!c)
		c = a->n < b->n ? -1 : a->n > b->n;
	if (!c)
		c = a->k < b->k ? -1 : a->k > b->k;
	if (!c)
		c = (a->aligned != 0) - (b->aligned != 0);
	return c;
}
