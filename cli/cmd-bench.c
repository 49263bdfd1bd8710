/*
 * cmd-bench.c - ktune bench: time the stored results against cuBLAS again.
 *
 * A database shared from another machine, or tuned weeks ago, says what its
 * winners measured there and then; this says what they measure here and
 * now, by the sweep's own last step.  Each round goes over all the keys, so
 * that a GPU drifting slowly shows as a spread between rounds instead of
 * hiding in the keys timed last.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* One round of one key: the times and their ratio, cuBLAS / ktune (0: no cuBLAS). */
struct timed {
	double us, cublas_us, ratio;
};

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median of the n > 0 values (the mean of the middle two for even n); sorts them. */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), by_value);
	return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

/* Field `field` (0 us, 1 cuBLAS us, 2 ratio) of a key's rounds that have a ratio, into v. */
static int gather(const struct timed *rounds, int n, int field, double *v)
{
	int got = 0;
	for (int k = 0; k < n; k++)
		if (rounds[k].ratio > 0)
			v[got++] = field == 0 ? rounds[k].us : field == 1 ? rounds[k].cublas_us : rounds[k].ratio;
	return got;
}

/* Runs the rounds; each key's timings go to t[key * rounds + round].  Returns the keys that failed, or -1. */
static int run_rounds(struct ktune_tuner *tuner, const struct ktune_result *stored, int n, int rounds,
		      unsigned seed, int show_progress, struct timed *t, int *failed)
{
	struct ktune_err e;
	char text[128];
	int nfailed = 0;

	for (int round = 0; round < rounds; round++) {
		for (int i = 0; i < n; i++) {
			struct ktune_bench_report b;
			ktune__key_format(&stored[i].key, text, sizeof(text));
			if (show_progress)
				fprintf(stderr, "\rround %d/%d: key %d/%d %-40s", round + 1, rounds, i + 1, n, text);
			if (failed[i])
				continue;
			e.msg[0] = 0;
			int rc = ktune__bench_result(tuner, &stored[i], seed + (unsigned)i, &b, &e);
			const char *nl = show_progress ? "\n" : ""; /* end the progress line first */
			if (rc < 0) {
				fputs(nl, stderr);
				cli_error(EXIT_FAIL, "%s: cannot run: %s", text, e.msg);
				return -1;
			}
			if (strcmp(b.status, KTUNE_TRIAL_OK)) {
				fprintf(stderr, "%sktune: %s: %s: %s: %s\n", nl, text, stored[i].config, b.status,
					b.message);
				failed[i] = 1;
				nfailed++;
				continue;
			}
			if (b.disturbed[0])
				fprintf(stderr, "%sktune: %s: round %d disturbed: %s\n", nl, text, round + 1,
					b.disturbed);
			struct timed *r = &t[(size_t)i * (size_t)rounds + (size_t)round];
			r->us = b.time_us;
			r->cublas_us = b.cublas_us;
			r->ratio = b.cublas_us > 0 ? b.cublas_us / b.time_us : 0;
		}
	}
	if (show_progress)
		fprintf(stderr, "\r%80s\r", "");
	return nfailed;
}

/*
 * One line a key, then each op's geometric means, now and as stored, over
 * its keys timed with their baseline: cuBLAS for GEMM, the copy of as many
 * bytes for the other ops (whose ratio is then the fraction of the copy
 * bandwidth they reach).
 */
static void report(const struct ktune_result *stored, int n, int rounds, const struct timed *t,
		   const int *failed, double *scratch)
{
	double log_now = 0, log_stored = 0, lowest = 0;
	int counted = 0, below = 0, lowest_i = -1, stale = 0;
	char text[128];

	printf("%-40s %7s %7s %10s %10s  %s\n", "key", "stored", "now", "ktune us", "base us",
	       rounds > 1 ? "min-max of the rounds, config" : "config");
	for (int i = 0; i < n; i++) {
		const struct ktune_result *r = &stored[i];
		const struct timed *rk = &t[(size_t)i * (size_t)rounds];
		char was[16] = "-", now[16] = "-", spread[40] = "";
		ktune__key_format(&r->key, text, sizeof(text));
		if (failed[i]) {
			printf("%-40s %7s %7s %10s %10s  FAILED  %s\n", text, "", "", "", "", r->config);
			continue;
		}
		double us = 0, cublas_us = 0, ratio = 0;
		int got = gather(rk, rounds, 2, scratch);
		if (got) {
			ratio = median(scratch, got);
			if (rounds > 1)
				snprintf(spread, sizeof(spread), "%.3f-%.3f  ", scratch[0], scratch[got - 1]);
			gather(rk, rounds, 0, scratch);
			us = median(scratch, got);
			gather(rk, rounds, 1, scratch);
			cublas_us = median(scratch, got);
			snprintf(now, sizeof(now), "%.3f", ratio);
			if (!strcmp(r->key.op, "gemm")) { /* against cuBLAS: below 1 is slower */
				below += ratio < 1;
				if (lowest_i < 0 || ratio < lowest)
					lowest = ratio, lowest_i = i;
			}
		} else {
			us = rk[rounds - 1].us; /* no cuBLAS: the last round's time */
		}
		if (r->cublas_us > 0)
			snprintf(was, sizeof(was), "%.3f", r->cublas_us / r->time_us);
		if (ratio > 0 && r->cublas_us > 0 && !strcmp(r->key.op, "gemm")) { /* both means over the same keys */
			log_now += log(ratio);
			log_stored += log(r->cublas_us / r->time_us);
			counted++;
		}
		int fresh = ktune__result_fresh(&r->key, r->family, r->template_hash);
		stale += !fresh;
		printf("%-40s %7s %7s %10.1f %10.1f  %s%s%s\n", text, was, now, us, cublas_us, spread, r->config,
		       fresh ? "" : "  (stale)");
	}
	if (counted) {
		printf("\ngeometric mean of cuBLAS time / ktune time over %d keys: %.3f now, %.3f as stored\n",
		       counted, exp(log_now / counted), exp(log_stored / counted));
	}
	for (int o = 0; ktune__ops[o]; o++) {
		double lnow = 0, lstored = 0;
		int keys = 0;
		if (ktune__op_is_gemm(ktune__ops[o]))
			continue;
		for (int i = 0; i < n; i++) {
			const struct timed *rk = &t[(size_t)i * (size_t)rounds];
			int got = failed[i] || strcmp(stored[i].key.op, ktune__ops[o]->name) ? 0 : gather(rk, rounds, 2, scratch);
			if (got && stored[i].cublas_us > 0) {
				lnow += log(median(scratch, got));
				lstored += log(stored[i].cublas_us / stored[i].time_us);
				keys++;
			}
		}
		if (keys)
			printf("%s: geometric mean of the copy's time / ktune time (the fraction of the copy bandwidth) "
			       "over %d keys: %.3f now, %.3f as stored\n", ktune__ops[o]->name, keys,
			       exp(lnow / keys), exp(lstored / keys));
	}
	if (rounds > 1) {
		printf("geometric mean of each round over its keys:");
		for (int k = 0; k < rounds; k++) {
			double log_sum = 0;
			int keys = 0;
			for (int i = 0; i < n; i++) {
				double ratio = t[(size_t)i * (size_t)rounds + (size_t)k].ratio;
				if (ratio > 0) {
					log_sum += log(ratio);
					keys++;
				}
			}
			printf(" %.3f", keys ? exp(log_sum / keys) : 0);
		}
		printf("\n");
	}
	if (lowest_i >= 0) {
		ktune__key_format(&stored[lowest_i].key, text, sizeof(text));
		printf("%d below 1.00; the lowest %.3f (%s)\n", below, lowest, text);
	}
	if (stale)
		printf("%d stale: tuned with another source of the template, timed with this one; dispatch "
		       "ignores them and 'ktune sweep' tunes them again\n", stale);
}

int cmd_bench(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS, CLI_FILTER_OPTIONS,
		{ "rounds", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 's' },
		{ "progress", no_argument, NULL, 'p' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_filter f = { 0 };
	struct ktune_result *stored = NULL;
	struct ktune_tuner *tuner = NULL;
	struct timed *t = NULL;
	double *scratch = NULL;
	int *failed = NULL;
	struct ktune_err e;
	long rounds = 1, seed = 1;
	int c, n, rc = EXIT_OK, show_progress = isatty(2);

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("bench", c, optarg, cli);
		if (!r)
			r = cli_filter("bench", c, optarg, &f);
		if (!r && c == 'r')
			r = cli_parse_int("bench", "--rounds", optarg, 1, 1000, &rounds) ? -1 : 1;
		if (!r && c == 's')
			r = cli_parse_int("bench", "--seed", optarg, 0, 0x7fffffff, &seed) ? -1 : 1;
		if (!r && c == 'p')
			r = show_progress = 1;
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("bench", c, argv);
	}
	if (optind < argc)
		return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
	if ((rc = cli_need_gpu()))
		return rc;
	if (ktune__tuner_open(cli->db_path, cli->device, cli_worker_exe(), &tuner, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	cli_print_device(tuner);
	if ((n = cli_stored_results(tuner, &f, &stored)) < 0) {
		rc = EXIT_FAIL;
		goto out;
	}
	if (n == 0) {
		printf("nothing stored for %s matches\n", f.arch);
		goto out;
	}
	t = calloc((size_t)n * (size_t)rounds, sizeof(*t));
	failed = calloc((size_t)n, sizeof(*failed));
	scratch = calloc((size_t)rounds, sizeof(*scratch));
	if (!t || !failed || !scratch) {
		rc = cli_error(EXIT_FAIL, "out of memory");
		goto out;
	}
	int nfailed = run_rounds(tuner, stored, n, (int)rounds, (unsigned)seed, show_progress, t, failed);
	if (nfailed < 0) {
		rc = EXIT_FAIL;
		goto out;
	}
	report(stored, n, (int)rounds, t, failed, scratch);
	printf("%d timed, %d failed\n", n - nfailed, nfailed);
	rc = nfailed ? EXIT_FAIL : EXIT_OK;
out:
	free(t);
	free(failed);
	free(scratch);
	free(stored);
	ktune__tuner_close(tuner);
	return rc;
}
