/* version.c - the library's version, for comparison with the header's. */
#include "ktune.h"

unsigned ktune_version_number(void)
{
	return KTUNE_VERSION_NUMBER;
}

const char *ktune_version(void)
{
	return KTUNE_VERSION_STRING;
}
