/*
 * fuzz-import.c - libFuzzer harness for the importer: the bytes are an
 * export file; ktune__share_parse must accept or refuse them without a
 * crash, a leak or undefined behaviour, and an accepted file must come back
 * identical through the writer and the reader.  Build and run with
 * tests/fuzz/run-fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "db/share.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ktune_share s, again;
	struct ktune_err e;
	char *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;

	if (ktune__share_parse((const char *)data, size, "fuzz.yaml", &s, &e) != KTUNE_OK)
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
