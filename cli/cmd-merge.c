/*
 * cmd-merge.c - ktune merge: merges export files (YAML or SQLite) into one,
 * without a database, under the same policies as 'ktune import'; the first
 * file is "ours".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int compare_results(const void *a, const void *b)
{
	return ktune__share_compare(a, b);
}

/* Merges one loaded file into *all (sorted); reports to stderr. */
static int merge_one(struct ktune_share *all, const struct ktune_share *in, int first,
		     enum ktune_policy policy, struct ktune_import_counts *c, struct ktune_err *e)
{
	long i, base = all->count;
	char why[128];
	int rc;

	for (i = 0; i < in->count; i++) {
		const struct ktune_result *r = &in->entries[i];
		struct ktune_result *ours = NULL;

		if (in->stale[i]) {
			cli_share_report(stderr, r, KTUNE_IMPORT_SKIPPED,
					 "tuned for another template source");
			c->skipped++;
			continue;
		}
		if (!first && base > 0)
			ours = bsearch(r, all->entries, (size_t)base, sizeof(*r), compare_results);
		if (!ours) {
			if ((rc = ktune__share_add(all, r, in->lines[i], e)))
				return rc;
			c->added++;
		} else if (ktune__policy_decide(ours, r, policy, why, sizeof(why))) {
			*ours = *r;
			cli_share_report(stderr, r, KTUNE_IMPORT_REPLACED, why);
			c->replaced++;
		} else {
			cli_share_report(stderr, r, KTUNE_IMPORT_KEPT, why);
			c->kept++;
		}
	}
	qsort(all->entries, (size_t)all->count, sizeof(*all->entries), compare_results);
	return KTUNE_OK;
}

int cmd_merge(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "output", required_argument, NULL, 'o' }, { "policy", required_argument, NULL, 'P' },
		{ "format", required_argument, NULL, 'F' }, { "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	enum ktune_policy policy = KTUNE_POLICY_FASTER;
	struct ktune_import_counts counts = { 0, 0, 0, 0 };
	struct ktune_share all, in;
	struct ktune_err e;
	const char *output = NULL;
	char *text = NULL;
	size_t len = 0;
	int sqlite = 0, force = 0, opt, rc = KTUNE_OK, i;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
		int r = cli_common("merge", opt, optarg, cli);

		if (!r) {
			r = 1;
			if (opt == 'o')
				output = optarg;
			else if (opt == 'f')
				force = 1;
			else if (opt == 'P')
				r = cli_parse_policy("merge", optarg, &policy) ? -1 : 1;
			else if (opt == 'F')
				r = cli_parse_share_format("merge", optarg, &sqlite) ? -1 : 1;
			else
				r = 0;
		}
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("merge", opt, argv);
	}
	if (argc - optind < 2)
		return cli_usage_error("merge", "give two or more files to merge");
	if (!output)
		return cli_usage_error("merge", "missing -o OUT");

	memset(&all, 0, sizeof(all));
	for (i = optind; i < argc && rc == KTUNE_OK; i++) {
		if ((rc = ktune__share_load(argv[i], &in, &e)))
			break;
		rc = merge_one(&all, &in, i == optind, policy, &counts, &e);
		ktune__share_free(&in);
	}
	if (rc == KTUNE_OK && sqlite)
		rc = ktune__db_write_standalone(output, all.entries, all.count, force, &e);
	else if (rc == KTUNE_OK &&
		 (rc = ktune__share_write(all.entries, all.count, &text, &len, &e)) == KTUNE_OK)
		rc = ktune__write_file_atomic(output, text, len, &e);
	free(text);
	ktune__share_free(&all);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	fprintf(stderr, "merged %d files into '%s': %ld added, %ld replaced, %ld kept, %ld skipped\n",
		argc - optind, output, counts.added, counts.replaced, counts.kept, counts.skipped);
	return EXIT_OK;
}
