/*
 * templates.c - finds embedded template files and hashes them once.
 */
#include <pthread.h>
#include <string.h>

#include "common.h"
#include "templates.h"

#include <stdlib.h>

static pthread_once_t hash_once = PTHREAD_ONCE_INIT;
static char (*hashes)[65]; /* one a file, in table order; NULL if out of memory */

static void hash_all(void)
{
	int n = 0;
	while (ktune__template_files[n].name)
		n++;
	if (!(hashes = calloc((size_t)n + 1, sizeof(*hashes))))
		return;
	for (int i = 0; i < n; i++)
		ktune__sha256_hex(ktune__template_files[i].text, ktune__template_files[i].len,
				  hashes[i]);
}

const struct ktune_template_file *ktune__template_file(const char *name)
{
	for (int i = 0; ktune__template_files[i].name; i++)
		if (!strcmp(ktune__template_files[i].name, name))
			return &ktune__template_files[i];
	return NULL;
}

int ktune__template_headers(const char *source, size_t len, const struct ktune_template_file **out)
{
	int n = 0;
	for (int i = 0; ktune__template_files[i].name && n < KTUNE_MAX_HEADERS; i++) {
		const char *name = ktune__template_files[i].name;
		size_t nl = strlen(name);
		if (nl > 4 && !strcmp(name + nl - 4, ".cuh") && memmem(source, len, name, nl))
			out[n++] = &ktune__template_files[i];
	}
	return n;
}

const char *ktune__template_hash(const char *name)
{
	pthread_once(&hash_once, hash_all);
	for (int i = 0; hashes && ktune__template_files[i].name; i++)
		if (!strcmp(ktune__template_files[i].name, name))
			return hashes[i];
	return "";
}
