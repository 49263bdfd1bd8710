/*
 * cmd-import.c - ktune import: merges an export file (YAML or SQLite) into
 * the database in one transaction and says what it added, replaced, kept
 * and skipped, and why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const outcome_names[] = { "added", "replaced", "kept", "skipped" };

void cli_share_report(FILE *to, const struct ktune_result *r, int outcome, const char *reason)
{
	char key[160];

	ktune__key_format(&r->key, key, sizeof(key));
	fprintf(to, "%-9s %s (%s, %d SMs) %s%s%s\n", outcome_names[outcome], r->device.name,
		r->device.arch, r->device.sm_count, key, reason && *reason ? ": " : "",
		reason ? reason : "");
}

int cli_parse_policy(const char *name, const char *arg, enum ktune_policy *p)
{
	if (ktune__policy_parse(arg, p) == 0)
		return 0;
	cli_usage_error(name, "--policy '%s' is not one of faster, ours, theirs", arg);
	return -1;
}

int cli_parse_share_format(const char *name, const char *arg, int *sqlite)
{
	if (!strcmp(arg, "yaml") || !strcmp(arg, "sqlite")) {
		*sqlite = !strcmp(arg, "sqlite");
		return 0;
	}
	cli_usage_error(name, "--format '%s' is not one of yaml, sqlite", arg);
	return -1;
}

int cmd_import(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "policy", required_argument, NULL, 'P' }, { "dry-run", no_argument, NULL, 'N' },
		{ NULL, 0, NULL, 0 },
	};
	enum ktune_policy policy = KTUNE_POLICY_FASTER;
	struct ktune_import_counts counts = { 0, 0, 0, 0 };
	struct ktune_import_item *items = NULL;
	struct ktune_share share;
	struct ktune_db *db = NULL;
	struct ktune_err e;
	const char *file;
	char *path = NULL;
	int dry_run = 0, opt, rc;
	long i;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		int r = cli_common("import", opt, optarg, cli);

		if (!r && opt == 'P')
			r = cli_parse_policy("import", optarg, &policy) ? -1 : 1;
		if (!r && opt == 'N')
			r = dry_run = 1;
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("import", opt, argv);
	}
	if (optind >= argc)
		return cli_usage_error("import", "missing FILE");
	if (optind + 1 < argc)
		return cli_usage_error("import", "unexpected argument '%s'", argv[optind + 1]);
	file = argv[optind];

	/* The whole file is read and checked before the database is touched. */
	if ((rc = ktune__share_load(file, &share, &e)))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	items = calloc((size_t)(share.count ? share.count : 1), sizeof(*items));
	if (!items) {
		ktune__share_free(&share);
		return cli_error(EXIT_FAIL, "out of memory");
	}
	if (cli_db_path(cli, &path)) {
		free(items);
		ktune__share_free(&share);
		return EXIT_USAGE;
	}
	/* a dry run writes nothing: it reads the database as show does */
	rc = dry_run ? ktune__db_open_read(path, &db, &e) : ktune__db_open(path, 1, &db, &e);
	if (rc == KTUNE_ERR_NOT_FOUND && dry_run) {
		/* a dry run creates nothing: into no database, everything current is added */
		for (i = 0; i < share.count; i++) {
			items[i].outcome = share.stale[i] ? KTUNE_IMPORT_SKIPPED : KTUNE_IMPORT_ADDED;
			snprintf(items[i].reason, sizeof(items[i].reason), "%s",
				 share.stale[i] ? "tuned for another template source" : "");
			*(share.stale[i] ? &counts.skipped : &counts.added) += 1;
		}
		rc = KTUNE_OK;
	} else if (rc == KTUNE_OK) {
		rc = ktune__db_import(db, share.entries, share.stale, share.count, policy, dry_run,
				      items, &counts, &e);
	}
	ktune__db_close(db);
	if (rc == KTUNE_OK) {
		for (i = 0; i < share.count; i++)
			cli_share_report(stdout, &share.entries[i], items[i].outcome, items[i].reason);
		printf("%s '%s': %ld added, %ld replaced, %ld kept, %ld skipped%s\n",
		       dry_run ? "dry run of import of" : "imported", file, counts.added,
		       counts.replaced, counts.kept, counts.skipped,
		       dry_run ? " (nothing written)" : "");
	}
	free(items);
	free(path);
	ktune__share_free(&share);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	return EXIT_OK;
}
