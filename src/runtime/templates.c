/*
 * templates.c - finds embedded template files and hashes them once.
 */
#include <pthread.h>
#include <string.h>

#include "common.h"
#include "templates.h"

#define MAX_FILES 32

static pthread_once_t hash_once = PTHREAD_ONCE_INIT;
static char hashes[MAX_FILES][65];

static void hash_all(void)
{
	for (int i = 0; ktune__template_files[i].name && i < MAX_FILES; i++)
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

const char *ktune__template_hash(const char *name)
{
	pthread_once(&hash_once, hash_all);
	for (int i = 0; ktune__template_files[i].name && i < MAX_FILES; i++)
		if (!strcmp(ktune__template_files[i].name, name))
			return hashes[i];
	return "";
}
