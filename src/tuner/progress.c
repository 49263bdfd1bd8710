/*
 * progress.c - the tuner's progress lines (ktune__tune_progress), shared by
 * the tune loop, the measurement protocol and the group pick.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tuner/tune-internal.h"

void ktune__tune_progress(const struct ktune_tune_options *o, const char *fmt, ...)
{
	char line[640];
	va_list ap;
	if (!o->progress)
		return;
	va_start(ap, fmt);
	if (vsnprintf(line, sizeof(line), fmt, ap) >= (int)sizeof(line))
		line[sizeof(line) - 2] = '\n'; /* cut short: still a whole line */
	va_end(ap);
	if (!o->progress_prefix) {
		fputs(line, o->progress);
	} else {
		/* whole lines only, each in one call, so that the GPUs' lines do not run into each other */
		const char *text = line + (line[0] == '\r');
		size_t len = strlen(text);
		if (len <= 1 || text[len - 1] != '\n')
			return;
		fprintf(o->progress, "%s%s", o->progress_prefix, text);
	}
	fflush(o->progress);
}
