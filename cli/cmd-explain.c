/*
 * cmd-explain.c - ktune explain OP --FIELD VALUE...: how a key is served and
 * why.  The dispatch chain and where it stops; the miss programs recorded;
 * the stored result; the newest tuning: each candidate's fate (pruned and
 * why, failed and how, wrong and by how much, its time and ratio), the
 * finalists' repeated measurements, the turns with the baseline, the runoff
 * and the group pick's decision.  One screen as text, everything as JSON.
 * No GPU needed: the device is this GPU, or one the database or the shipped
 * tuning knows (--gpu, --arch).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Rows of each list on one screen; --all shows every one. */
#define SCREEN_ROWS 8

/* ----------------------------------------------------- what the text shows */

static int is(const char *a, const char *b)
{
	return !strcmp(a, b);
}

/* The median of n times, as the tuner takes one (the mean of the middle two). */
static double middle(double *t, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
			double x = t[j];
			t[j] = t[j - 1];
			t[j - 1] = x;
		}
	return n ? (t[(n - 1) / 2] + t[n / 2]) / 2 : 0;
}

/* A config's time before the finalists: its screen's (older databases: its stored time). */
static double screen_time(const struct ktune_trial *t)
{
	return t->screen_us > 0 ? t->screen_us : t->time_us;
}

static const struct ktune_trial *sort_trials;

static int by_screen(const void *a, const void *b)
{
	double x = screen_time(&sort_trials[*(const int *)a]), y = screen_time(&sort_trials[*(const int *)b]);
	return x < y ? -1 : x > y;
}

/* The last round the stage was measured in (a disturbed measurement is taken again). */
static int last_round(const struct ktune_tuning *t)
{
	int r = 0;
	for (int i = 0; i < t->nm; i++)
		if (t->m[i].round > r && !strncmp(t->m[i].stage, "final", 5))
			r = t->m[i].round;
	return r;
}

/* Runs of one stage in turns: the config's times and the baseline's, and their medians. */
static void print_turns(const struct ktune_tuning *t, const char *stage, int round, const char *label)
{
	double mine[16], base[16];
	int nm = 0, nb = 0, failed = 0;
	const char *config = NULL;
	for (int i = 0; i < t->nm; i++) {
		const struct ktune_measurement *m = &t->m[i];
		if (!is(m->stage, stage) || (round >= 0 && m->round != round))
			continue;
		if (!is(m->status, KTUNE_TRIAL_OK)) {
			failed = 1;
			printf("%-10s %s %s\n", label, m->config[0] ? m->config : "baseline", m->status);
			continue;
		}
		if (m->config[0] && nm < 16) {
			config = m->config;
			mine[nm++] = m->time_us;
		} else if (!m->config[0] && nb < 16) {
			base[nb++] = m->time_us;
		}
	}
	if (!nm)
		return;
	printf("%-10s %s\n", label, config);
	printf("%-10s   runs", "");
	for (int i = 0; i < nm; i++)
		printf(" %.2f", mine[i]);
	double a = middle(mine, nm);
	printf(" us: %.2f\n", a);
	if (nb) {
		printf("%-10s   baseline", "");
		for (int i = 0; i < nb; i++)
			printf(" %.2f", base[i]);
		double b = middle(base, nb);
		printf(" us: %.2f; ratio %.3f\n", b, b / a);
	} else if (!failed) {
		printf("%-10s   no baseline\n", "");
	}
}

static void print_lines(const char *label, const char *text)
{
	const char *p = text;
	while (*p) {
		const char *nl = strchr(p, '\n');
		int len = nl ? (int)(nl - p) : (int)strlen(p);
		printf("%-10s %.*s\n", label, len, p);
		label = "";
		p += len + (nl != NULL);
	}
}

static void print_dispatch(const struct ktune_explain *x)
{
	const struct ktune_dispatch_explain *d = &x->dispatch;
	/* ktune's config: a tuned entry's, or a fallback's (nearest, model, default); cuBLAS may serve instead */
	int blas = is(d->source, "cublas");
	const char *mine = blas ? "  <- ktune's (cuBLAS serves instead)" : "  <- serves";
	for (int s = 0; s < 3; s++) {
		const struct ktune_dispatch_step *st = &d->steps[s];
		printf("%-10s %-8s %s%s%s\n", s ? "" : "dispatch", st->source, st->found ? st->config : "-",
		       st->used ? mine : "", st->found && !st->used ? "  (not used here)" : "");
	}
	int tuned = is(d->own, "exact") || is(d->own, "arch") || is(d->own, "shipped");
	if (!tuned) {
		char from[128];
		ktune__key_format(&d->from, from, sizeof(from));
		printf("%-10s %-8s %s%s%s%s%s\n", "", d->own, d->config, mine, d->borrowed ? " (from " : "",
		       d->borrowed ? from : "", d->borrowed ? ")" : "");
		if (d->borrowed && strcmp(d->from_config, d->config))
			printf("%-10s %-8s %s  (as tuned there; fitted to this key)\n", "", "", d->from_config);
	}
	if (blas)
		printf("%-10s %-8s %s\n", "", "cublas", "<- serves");
	printf("%-10s %d entries of this GPU, %d of other %s GPUs, %d shipped%s%s%s\n", "", d->sources.from_device,
	       d->sources.from_arch, x->device.id.arch, d->sources.from_shipped, d->sources.shipped_names[0] ? " (" : "",
	       d->sources.shipped_names, d->sources.shipped_names[0] ? ")" : "");
}

static void print_text(const struct ktune_explain *x, const char *from, int all)
{
	const struct ktune_tuning *t = &x->tuning;
	char key[128];

	ktune__key_format(&x->key, key, sizeof(key));
	printf("%-10s %s\n", "key", key);
	printf("%-10s %s (%s, %d SMs), from %s\n", "device", x->device.id.name[0] ? x->device.id.name : "a GPU",
	       x->device.id.arch, x->device.id.sm_count, from);
	print_dispatch(x);
	if (x->has_miss)
		printf("%-10s %lld calls served by %s, recorded %s .. %s\n", "missed", (long long)x->miss.calls,
		       x->miss.source, x->miss.first_seen, x->miss.last_seen);
	if (x->has_result) {
		const struct ktune_result *r = &x->result;
		printf("%-10s %s\n", "result", r->config);
		printf("%-10s %.2f us (p20 %.2f, p80 %.2f)", "", r->time_us, r->p20_us, r->p80_us);
		if (r->cublas_us > 0)
			printf(", baseline %.2f us, ratio %.3f", r->cublas_us, r->cublas_us / r->time_us);
		printf("; %s, template %s%s%s\n", r->created_at, x->result_fresh ? "current" : "changed since: stale",
		       r->measure_note[0] ? "; " : "", r->measure_note);
	}
	if (!x->has_db)
		printf("%-10s none: no database\n", "tuning");
	else if (!x->has_tuning)
		printf("%-10s none recorded for this key on this GPU%s\n", "tuning",
		       x->has_result ? " (tuned before schema 6, or imported)" : "");
	if (!x->has_tuning)
		return;

	/* the candidates: how many, and what became of each */
	int n_ok = 0, n_wrong = 0, n_spill = 0, n_failed = 0, n_untried = 0, n_bound = 0, n_late = 0;
	for (int i = 0; i < x->ntrials; i++) {
		const char *st = x->trials[i].status;
		int untried = ktune__trial_untried(&x->trials[i]);
		n_ok += is(st, KTUNE_TRIAL_OK);
		n_wrong += is(st, KTUNE_TRIAL_WRONG);
		n_spill += is(st, KTUNE_TRIAL_PRUNED) && !untried;
		n_untried += untried;
		n_bound += untried && !strncmp(x->trials[i].message, KTUNE_UNTRIED_BOUND, strlen(KTUNE_UNTRIED_BOUND));
		n_late += untried &&
			  !strncmp(x->trials[i].message, KTUNE_UNTRIED_DEADLINE, strlen(KTUNE_UNTRIED_DEADLINE));
	}
	n_failed = x->ntrials - n_ok - n_wrong - n_spill - n_untried;
	printf("%-10s #%lld %s: %s %s in %.1f s\n", "tuning", t->id, t->created_at,
	       is(t->outcome, KTUNE_TUNED) ? "tuned" : "no candidate was right:", t->winner[0] ? t->winner : "nothing stored",
	       t->tune_s);
	printf("%-10s %d tried: %d ok, %d wrong, %d failed, %d pruned after compiling; %d skipped (failed before)\n", "",
	       t->candidates, n_ok, n_wrong, n_failed, n_spill, t->known_bad);
	if (n_untried)
		printf("%-10s %d left untried by the model's order (--top): %d beyond its cut, %d unable to win by its "
		       "bound, %d past the deadline\n", "", n_untried, n_untried - n_bound - n_late, n_bound, n_late);
	int admitted = x->space - x->pruned_now;
	printf("%-10s %d of the %d configs here left out before compiling", "", t->pruned, x->space);
	if (t->budget > 0 && admitted > t->candidates + n_untried + t->known_bad)
		printf(" (%d pruned, %d not drawn by --budget %d)", x->pruned_now,
		       admitted - t->candidates - n_untried - t->known_bad, t->budget);
	printf("\n");
	for (int i = 0; i < x->nprunes && (all || i < SCREEN_ROWS); i++)
		printf("%-10s %5d  %s%s%s\n", i ? "" : "pruned", x->prunes[i].count, x->prunes[i].reason,
		       all ? "  e.g. " : "", all ? x->prunes[i].example : "");
	if (!all && x->nprunes > SCREEN_ROWS)
		printf("%-10s        ... %d reasons more (--all)\n", "", x->nprunes - SCREEN_ROWS);

	/* every candidate that did not run right, with what happened (the untried below) */
	int shown = 0;
	for (int i = 0; i < x->ntrials; i++) {
		const struct ktune_trial *tr = &x->trials[i];
		if (is(tr->status, KTUNE_TRIAL_OK) || ktune__trial_untried(tr))
			continue;
		if (!all && shown == 2 * SCREEN_ROWS) {
			printf("%-10s ... %d more (--all)\n", "", n_wrong + n_failed + n_spill - shown);
			break;
		}
		char msg[200];
		snprintf(msg, sizeof(msg), "%.199s", tr->message);
		for (char *c = msg; *c; c++)
			if (*c == '\n')
				*c = ' ';
		printf("%-10s %-13s %s\n", shown++ ? "" : "failed", tr->status, tr->config);
		if (is(tr->status, KTUNE_TRIAL_WRONG))
			printf("%-10s %-13s error %.3g (Frobenius), %.3g (max): tolerance %.3g, %.3g\n", "", "", tr->err_fro,
			       tr->err_max, x->tol_fro, x->tol_max);
		else if (msg[0])
			printf("%-10s %-13s %.120s\n", "", "", msg);
	}

	/* the candidates the model's order left untried, the likeliest first (--all: with the model's figures) */
	int listed = 0;
	for (int i = 0; i < x->ntrials && (all || listed < SCREEN_ROWS); i++) {
		const struct ktune_trial *tr = &x->trials[i];
		if (!ktune__trial_untried(tr))
			continue;
		int bound = !strncmp(tr->message, KTUNE_UNTRIED_BOUND, strlen(KTUNE_UNTRIED_BOUND));
		int late = !strncmp(tr->message, KTUNE_UNTRIED_DEADLINE, strlen(KTUNE_UNTRIED_DEADLINE));
		printf("%-10s %-13s %s\n", listed++ ? "" : "untried", bound ? "bound" : late ? "deadline" : "beyond cut",
		       tr->config);
		if (all)
			printf("%-10s %-13s %.200s\n", "", "", tr->message);
	}
	if (!all && n_untried > listed)
		printf("%-10s ... %d more (--all)\n", "", n_untried - listed);

	/* the fastest by the screen, with their ratio to the baseline */
	int *order = malloc((size_t)(x->ntrials + 1) * sizeof(*order)), nrank = 0;
	if (order) {
		for (int i = 0; i < x->ntrials; i++)
			if (is(x->trials[i].status, KTUNE_TRIAL_OK) && screen_time(&x->trials[i]) > 0)
				order[nrank++] = i;
		sort_trials = x->trials;
		qsort(order, (size_t)nrank, sizeof(*order), by_screen);
		for (int i = 0; i < nrank && (all || i < SCREEN_ROWS); i++) {
			const struct ktune_trial *tr = &x->trials[order[i]];
			double s = screen_time(tr);
			printf("%-10s %2d %9.2f us", i ? "" : "screened", i + 1, s);
			if (t->baseline_us > 0)
				printf("  ratio %.3f", t->baseline_us / s);
			printf("  %s%s\n", tr->config, is(tr->config, t->winner) ? "  <- stored" : "");
		}
		if (!all && nrank > SCREEN_ROWS)
			printf("%-10s ... %d more ran right (--all)\n", "", nrank - SCREEN_ROWS);
		free(order);
	}

	/* the finalists: the full protocol in order, then in reverse; ranked by the mean */
	int round = last_round(t), nfinal = 0;
	for (int i = 0; i < t->nm; i++) {
		const struct ktune_measurement *m = &t->m[i];
		if (!is(m->stage, KTUNE_STAGE_FINAL) || m->round != round)
			continue;
		double second = 0;
		for (int j = 0; j < t->nm; j++)
			if (is(t->m[j].stage, KTUNE_STAGE_FINAL_REV) && t->m[j].round == round &&
			    is(t->m[j].config, m->config) && is(t->m[j].status, KTUNE_TRIAL_OK))
				second = t->m[j].time_us;
		if (!is(m->status, KTUNE_TRIAL_OK))
			printf("%-10s %-9s %-9s %-9s %s\n", nfinal++ ? "" : "finalists", m->status, "", "", m->config);
		else if (second > 0)
			printf("%-10s %8.2f  %8.2f  %8.2f  %s\n", nfinal++ ? "" : "finalists", m->time_us, second,
			       (m->time_us + second) / 2, m->config);
		else
			printf("%-10s %8.2f  %-9s %8.2f  %s\n", nfinal++ ? "" : "finalists", m->time_us, "-", m->time_us,
			       m->config);
	}
	if (nfinal)
		printf("%-10s (us: in order, in reverse, mean%s)\n", "", round ? "; measured again: NVML saw a disturbance" : "");
	print_turns(t, KTUNE_STAGE_TURNS, round, "turns");
	print_turns(t, KTUNE_STAGE_RUNOFF, round, "runoff");
	print_turns(t, KTUNE_STAGE_AGAIN, round, "again");
	print_lines("decided", t->note);

	/* the group picks since */
	for (int g = x->ngroups - 1; g >= 0; g--) {
		const struct ktune_tuning *gp = &x->groups[g];
		printf("%-10s #%lld %s: %s, stores %s\n", "group", gp->id, gp->created_at, gp->outcome, gp->winner);
		print_lines("", gp->note);
	}
	if (x->ntunings > 1 + x->ngroups)
		printf("%-10s %d earlier tunings of this key are not shown\n", "", x->ntunings - 1 - x->ngroups);
}

/* ---------------------------------------------------------------- JSON */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* A number, or null for NaN and infinities (JSON has neither). */
static void json_num(double v)
{
	if (isfinite(v))
		printf("%.6g", v);
	else
		printf("null");
}

static void json_key(const struct ktune_key *k)
{
	printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"variant\": ", k->op, ktune__dtype_name(k->dtype));
	json_str(k->variant);
	printf(", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"aligned\": %s}", (long long)k->m, (long long)k->n,
	       (long long)k->k, k->aligned ? "true" : "false");
}

static void json_tuning(const struct ktune_tuning *t)
{
	printf("{\"id\": %lld, \"kind\": \"%s\", \"outcome\": \"%s\", \"created_at\": \"%s\", \"winner\": ", t->id,
	       t->kind, t->outcome, t->created_at);
	json_str(t->winner);
	printf(", \"candidates\": %d, \"pruned\": %d, \"known_bad\": %d, \"budget\": %d, \"seed\": %ld, "
	       "\"smem_optin\": %d, \"baseline_us\": ", t->candidates, t->pruned, t->known_bad, t->budget, t->seed,
	       t->smem_optin);
	json_num(t->baseline_us);
	printf(", \"tune_s\": ");
	json_num(t->tune_s);
	printf(", \"decisions\": [");
	const char *p = t->note;
	for (int n = 0; *p; n++) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char line[1024];
		snprintf(line, sizeof(line), "%.*s", (int)len, p);
		printf("%s", n ? ", " : "");
		json_str(line);
		p += len + (nl != NULL);
	}
	printf("], \"measurements\": [");
	for (int i = 0; i < t->nm; i++) {
		const struct ktune_measurement *m = &t->m[i];
		printf("%s\n    {\"stage\": \"%s\", \"round\": %d, \"config\": ", i ? "," : "", m->stage, m->round);
		json_str(m->config);
		printf(", \"status\": \"%s\", \"time_us\": ", m->status);
		json_num(is(m->status, KTUNE_TRIAL_OK) ? m->time_us : NAN);
		printf(", \"p20_us\": ");
		json_num(is(m->status, KTUNE_TRIAL_OK) ? m->p20_us : NAN);
		printf(", \"p80_us\": ");
		json_num(is(m->status, KTUNE_TRIAL_OK) ? m->p80_us : NAN);
		printf(", \"reps\": %d}", m->reps);
	}
	printf("]}");
}

static void print_json(const struct ktune_explain *x, const char *from)
{
	const struct ktune_dispatch_explain *d = &x->dispatch;
	printf("{\"key\": ");
	json_key(&x->key);
	printf(",\n \"device\": {\"name\": ");
	json_str(x->device.id.name);
	printf(", \"arch\": \"%s\", \"sm_count\": %d, \"smem_optin\": %d, \"from\": \"%s\"},\n", x->device.id.arch,
	       x->device.id.sm_count, x->device.smem_optin, from);
	printf(" \"dispatch\": {\"steps\": [");
	for (int s = 0; s < 3; s++) {
		printf("%s{\"source\": \"%s\", \"found\": %s, \"config\": ", s ? ", " : "", d->steps[s].source,
		       d->steps[s].found ? "true" : "false");
		json_str(d->steps[s].config);
		printf(", \"used\": %s}", d->steps[s].used ? "true" : "false");
	}
	printf("], \"serves\": \"%s\", \"own\": \"%s\", \"config\": ", d->source, d->own);
	json_str(d->config);
	printf(", \"from\": ");
	if (d->borrowed)
		json_key(&d->from);
	else
		printf("null");
	printf(", \"from_config\": ");
	if (d->borrowed)
		json_str(d->from_config);
	else
		printf("null");
	printf(", \"entries\": {\"device\": %d, \"arch\": %d, \"shipped\": %d}},\n", d->sources.from_device,
	       d->sources.from_arch, d->sources.from_shipped);
	printf(" \"missed\": ");
	if (x->has_miss)
		printf("{\"calls\": %lld, \"source\": \"%s\", \"first_seen\": \"%s\", \"last_seen\": \"%s\"}",
		       (long long)x->miss.calls, x->miss.source, x->miss.first_seen, x->miss.last_seen);
	else
		printf("null");
	printf(",\n \"result\": ");
	if (x->has_result) {
		const struct ktune_result *r = &x->result;
		printf("{\"config\": ");
		json_str(r->config);
		printf(", \"family\": \"%s\", \"time_us\": ", r->family);
		json_num(r->time_us);
		printf(", \"p20_us\": ");
		json_num(r->p20_us);
		printf(", \"p80_us\": ");
		json_num(r->p80_us);
		printf(", \"baseline_us\": ");
		json_num(r->cublas_us);
		printf(", \"err_fro\": ");
		json_num(r->err_fro);
		printf(", \"err_max\": ");
		json_num(r->err_max);
		printf(", \"fresh\": %s, \"created_at\": \"%s\", \"measure_note\": ", x->result_fresh ? "true" : "false",
		       r->created_at);
		json_str(r->measure_note);
		printf("}");
	} else {
		printf("null");
	}
	printf(",\n \"tolerance\": {\"fro\": ");
	json_num(x->tol_fro);
	printf(", \"max\": ");
	json_num(x->tol_max);
	printf("},\n \"pruning\": {\"space\": %d, \"pruned\": %d, \"reasons\": [", x->space, x->pruned_now);
	for (int i = 0; i < x->nprunes; i++) {
		printf("%s\n    {\"reason\": ", i ? "," : "");
		json_str(x->prunes[i].reason);
		printf(", \"count\": %d, \"example\": ", x->prunes[i].count);
		json_str(x->prunes[i].example);
		printf(", \"why\": ");
		json_str(x->prunes[i].why);
		printf("}");
	}
	printf("]},\n \"tuning\": ");
	if (x->has_tuning)
		json_tuning(&x->tuning);
	else
		printf("null");
	printf(",\n \"trials\": [");
	for (int i = 0; i < x->ntrials; i++) {
		const struct ktune_trial *t = &x->trials[i];
		printf("%s\n    {\"config\": ", i ? "," : "");
		json_str(t->config);
		printf(", \"family\": \"%s\", \"status\": \"%s\", \"screen_us\": ", t->family, t->status);
		json_num(t->screen_us > 0 ? t->screen_us : NAN);
		printf(", \"time_us\": ");
		json_num(is(t->status, KTUNE_TRIAL_OK) ? t->time_us : NAN);
		printf(", \"ratio\": ");
		json_num(is(t->status, KTUNE_TRIAL_OK) && x->tuning.baseline_us > 0 && screen_time(t) > 0
				 ? x->tuning.baseline_us / screen_time(t) : NAN);
		printf(", \"err_fro\": ");
		json_num(t->err_fro);
		printf(", \"err_max\": ");
		json_num(t->err_max);
		printf(", \"message\": ");
		json_str(t->message);
		printf("}");
	}
	printf("],\n \"group_picks\": [");
	for (int g = 0; g < x->ngroups; g++) {
		printf("%s\n  ", g ? "," : "");
		json_tuning(&x->groups[g]);
	}
	printf("],\n \"earlier_tunings\": %d}\n", x->ntunings - (x->has_tuning ? 1 : 0) - x->ngroups);
}

/* ---------------------------------------------------------------- main */

int cmd_explain(int argc, char **argv, struct cli *cli)
{
	static const struct option fixed[] = {
		CLI_COMMON_OPTIONS,
		{ "dtype", required_argument, NULL, 't' },
		{ "aligned", required_argument, NULL, 'A' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "arch", required_argument, NULL, 'a' },
		{ "sm-count", required_argument, NULL, 'S' },
		{ "format", required_argument, NULL, 'F' },
		{ "all", no_argument, NULL, 'L' },
	};
	enum { NFIXED = sizeof(fixed) / sizeof(fixed[0]) };
	struct option opts[NFIXED + CLI_KEY_MAX_FIELDS + 1];
	struct cli_key_args args = { .has_dtype = 0 };
	struct ktune_device_info dev;
	struct ktune_explain x;
	struct ktune_key key;
	struct ktune_err e;
	const char *gpu = NULL, *arch = NULL, *from = "";
	char *db_path = NULL;
	long aligned = -1, sm_count = 0; /* -1: the class ktune tune takes */
	int c, rc, bad, json = 0, all = 0;

	const struct ktune_op *op = cli_key_op("explain", argc, argv, &bad);
	if (bad)
		return bad;
	cli_key_options(op, fixed, NFIXED, opts);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("explain", c, optarg, cli);
		if (!r)
			r = cli_key_option("explain", op, c, optarg, &args);
		if (!r) {
			r = 1;
			switch (c) {
			case 'A':
				r = cli_parse_int("explain", "--aligned", optarg, 0, 1, &aligned) ? -1 : 1;
				break;
			case 'g':
				gpu = optarg;
				break;
			case 'a':
				arch = optarg;
				break;
			case 'S':
				r = cli_parse_int("explain", "--sm-count", optarg, 1, 1 << 20, &sm_count) ? -1 : 1;
				break;
			case 'F':
				if (!strcmp(optarg, "json") || !strcmp(optarg, "text"))
					json = !strcmp(optarg, "json");
				else
					r = cli_usage_error("explain", "--format '%s' is not one of text, json", optarg) ? -1 : 1;
				break;
			case 'L':
				all = 1;
				break;
			default:
				r = 0;
			}
		}
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("explain", c, argv);
	}
	if ((rc = cli_key_make("explain", op, &args, argc, argv, &key)))
		return rc;
	/* GEMM's class as ktune tune takes it: that of packed operands (rows not a multiple of 8: unaligned) */
	key.aligned = aligned >= 0 ? (int)aligned
		      : ktune__op_is_gemm(op) ? ktune__gemm_packed_aligned(&key) : ktune__op_packed_aligned(&key);
	if (cli_db_path(cli, &db_path))
		return EXIT_USAGE;
	if ((rc = cli_pick_device("explain", cli, db_path, gpu, arch, (int)sm_count, &key, &dev, &from)))
		goto out;
	if (ktune__explain(db_path, &dev, &key, &x, &e)) {
		rc = cli_error(EXIT_FAIL, "%s", e.msg);
		goto out;
	}
	if (json)
		print_json(&x, from);
	else
		print_text(&x, from, all);
	ktune__explain_free(&x);
	rc = EXIT_OK;
out:
	free(db_path);
	return rc;
}
