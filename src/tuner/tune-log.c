/*
 * tune-log.c - what a tuning records for ktune explain while it runs: every
 * full measurement (each finalist's two orders, the turns with the
 * baseline, the runoff, the group pick's rounds) with its stage, and the
 * decisions in words.  The tune loop and the group pick store it with their
 * result (struct ktune_tuning); measure.c and group.c append to it.  A
 * tuner without a log (t->log NULL) records nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/tune-internal.h"

void ktune__log_stage(struct ktune_tuner *t, const char *stage, int round)
{
	if (!t->log)
		return;
	t->log->stage = stage;
	if (round >= 0) /* -1: the round goes on */
		t->log->round = round;
}

void ktune__log_measure(struct ktune_tuner *t, const char *config, const char *status,
			const struct ktune_timing *timing)
{
	struct ktune_tune_log *l = t->log;
	if (!l)
		return;
	if (l->nm == l->cap) {
		int cap = l->cap ? 2 * l->cap : 32;
		struct ktune_measurement *grown = realloc(l->m, (size_t)cap * sizeof(*grown));
		if (!grown) {
			l->lost++; /* explain says so; the tuning goes on */
			return;
		}
		l->m = grown;
		l->cap = cap;
	}
	struct ktune_measurement *m = &l->m[l->nm++];
	memset(m, 0, sizeof(*m));
	snprintf(m->stage, sizeof(m->stage), "%s", l->stage ? l->stage : "");
	m->round = l->round;
	snprintf(m->config, sizeof(m->config), "%s", config ? config : "");
	snprintf(m->status, sizeof(m->status), "%s", status);
	if (timing && !strcmp(status, KTUNE_TRIAL_OK)) {
		m->time_us = timing->median_us;
		m->p20_us = timing->p20_us;
		m->p80_us = timing->p80_us;
		m->reps = timing->reps;
	}
}

void ktune__log_note(struct ktune_tuner *t, const char *fmt, ...)
{
	struct ktune_tune_log *l = t->log;
	va_list ap;
	if (!l)
		return;
	size_t used = strlen(l->note);
	if (used + 2 >= sizeof(l->note))
		return;
	va_start(ap, fmt);
	vsnprintf(l->note + used, sizeof(l->note) - used - 1, fmt, ap);
	va_end(ap);
	strcat(l->note, "\n");
}

void ktune__log_free(struct ktune_tune_log *l)
{
	free(l->m);
	memset(l, 0, sizeof(*l));
}

void ktune__log_tuning(const struct ktune_tune_log *l, struct ktune_tuning *out)
{
	out->m = l->m;
	out->nm = l->nm;
	snprintf(out->note, sizeof(out->note), "%s%s", l->note,
		 l->lost ? "(some measurements were not recorded: out of memory)\n" : "");
	size_t n = strlen(out->note);
	if (n && out->note[n - 1] == '\n')
		out->note[n - 1] = 0; /* lines between, not after */
}
