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
	buf[0] = key->trans_a;
	buf[1] = key->trans_b;
	buf[2] = '\0';
}

int ktune__layout_parse(const char *s, struct ktune_key *key)
{
	if (!s || (s[0] != 'n' && s[0] != 't') || (s[1] != 'n' && s[1] != 't') || s[2])
		return -1;
	key->trans_a = s[0];
	key->trans_b = s[1];
	return 0;
}

void ktune__key_format(const struct ktune_key *key, char *buf, size_t len)
{
	const char *dtype = ktune__dtype_name(key->dtype);
	char layout[3];

	ktune__layout_name(key, layout);
	snprintf(buf, len, "%s %s %s %" PRId64 "x%" PRId64 "x%" PRId64 " %s", key->op,
		 dtype ? dtype : "?", layout, key->m, key->n, key->k,
		 key->aligned ? "aligned" : "unaligned");
}
