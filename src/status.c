/*
 * status.c - the text and the name of each status code, generated from
 * KTUNE_STATUS_MAP in ktune.h so that the three never disagree.
 */
#include "ktune.h"

KTUNE_API const char *ktune_strerror(ktune_status s)
{
	switch (s) {
#define KTUNE_STATUS_TEXT(name, code, text)                                   \
	case KTUNE_##name:                                                    \
		return text;
		KTUNE_STATUS_MAP(KTUNE_STATUS_TEXT)
#undef KTUNE_STATUS_TEXT
	}
	return "unknown error";
}

KTUNE_API const char *ktune_status_name(ktune_status s)
{
	switch (s) {
#define KTUNE_STATUS_NAME(name, code, text)                                   \
	case KTUNE_##name:                                                    \
		return #name;
		KTUNE_STATUS_MAP(KTUNE_STATUS_NAME)
#undef KTUNE_STATUS_NAME
	}
	return "UNKNOWN";
}
