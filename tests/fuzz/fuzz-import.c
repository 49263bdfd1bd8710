/*
 * fuzz-import.c - libFuzzer harness for the importer: the bytes are an
 * export file, YAML or a standalone SQLite export (told apart by the SQLite
 * header, as 'ktune import' tells them).  The importer must accept or refuse
 * them without a crash, a leak, undefined behaviour or a stall (a hostile
 * schema is refused unread), and an accepted file must come back identical
 * through the YAML writer and reader.  Build and run with
 * tests/fuzz/run-fuzz.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "db/share.h"
#include "ops/op.h"

/* Stubs for what the ops' public functions call: the harness links no CUDA. */
int ktune__op_run(void);
int ktune__op_invalid(void);
int ktune__op_run(void)
{
	abort();
}
int ktune__op_invalid(void)
{
	abort();
}

/* An SQLite export is read from a file, as 'ktune import' reads it. */
static int load_sqlite(const uint8_t *data, size_t size, struct ktune_share *s,
		       struct ktune_err *e)
{
	static char path[64];
	int rc;

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/fuzz-import-%d.sqlite", (int)getpid());
	if (ktune__write_file_atomic(path, data, size, e) != KTUNE_OK)
		abort();
	rc = ktune__share_load(path, s, e);
	unlink(path);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ktune_share s, again;
	struct ktune_err e;
	char *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;
	int rc;

	if (ktune__share_is_sqlite(data, size))
		rc = load_sqlite(data, size, &s, &e);
	else
		rc = ktune__share_parse((const char *)data, size, "fuzz.yaml", &s, &e);
	if (rc != KTUNE_OK)
		return 0;
	/* What was accepted writes out and reads back to the same bytes. */
	if (ktune__share_write(s.entries, s.count, &text, &len, &e) != KTUNE_OK)
		abort();
	if (ktune__share_parse(text, len, "again.yaml", &again, &e) != KTUNE_OK)
		abort();
	if (again.count != s.count ||
	    ktune__share_write(again.entries, again.count, &text2, &len2, &e) != KTUNE_OK ||
	    len != len2 || memcmp(text, text2, len) != 0)
		abort();
	free(text);
	free(text2);
	ktune__share_free(&again);
	ktune__share_free(&s);
	return 0;
}
