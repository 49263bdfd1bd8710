/*
 * cmd-export.c - ktune export: the tuned entries as a versioned YAML file
 * (sorted, fixed formats: it diffs well in git) or a standalone SQLite file,
 * for 'ktune import' on other machines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct collect {
	struct ktune_share share;
	long left_out;
	struct ktune_err e;
};

/* Keeps the entries that an import would accept; says which are left out and why. */
static int collect_one(const struct ktune_result *r, void *arg)
{
	struct collect *c = arg;
	struct ktune_result copy = *r;
	struct ktune_err why;
	const char *field = NULL;
	char key[160];

	if (ktune__share_check(&copy, &field, &why) != KTUNE_OK) {
		ktune__key_format(&r->key, key, sizeof(key));
		fprintf(stderr, "ktune export: left out '%s' %s: %s: %s\n", r->device.name, key,
			field, why.msg);
		c->left_out++;
		return 0;
	}
	return ktune__share_add(&c->share, &copy, 0, &c->e) ? -1 : 0;
}

/* Replaces the entries by one per key: the config best on average over the devices. */
static int to_defaults(struct ktune_db *db, struct ktune_share *share, struct ktune_err *e)
{
	struct ktune_share out = { 0 };
	struct ktune_result *defs;
	long ndefs;
	int rc = ktune__db_defaults(db, share->entries, share->count, &defs, &ndefs, e);
	for (long i = 0; !rc && i < ndefs; i++)
		rc = ktune__share_add(&out, &defs[i], 0, e);
	free(defs);
	ktune__share_free(share);
	*share = out;
	return rc;
}

int cmd_export(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'D' }, { "help", no_argument, NULL, 'h' },
		{ "device", required_argument, NULL, 'g' }, CLI_FILTER_OPTIONS,
		{ "format", required_argument, NULL, 'F' }, { "output", required_argument, NULL, 'O' },
		{ "force", no_argument, NULL, 'f' }, { "defaults", no_argument, NULL, 'X' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_filter f = { 0 };
	struct collect c;
	struct ktune_db *db = NULL;
	struct ktune_err e;
	const char *output = NULL;
	char *path = NULL, *text = NULL;
	size_t len = 0;
	int sqlite = 0, force = 0, defaults = 0, opt, rc;

	memset(&c, 0, sizeof(c));
	opterr = 0;
	for (;;) {
		int longindex = -1, r;

		if ((opt = getopt_long(argc, argv, ":ho:m:n:k:", opts, &longindex)) == -1)
			break;
		if (opt == 'o' && longindex < 0) /* -o FILE; --op is the filter */
			opt = 'O';
		r = cli_common("export", opt, optarg, cli);
		if (!r)
			r = cli_filter("export", opt, optarg, &f);
		if (!r) {
			r = 1;
			if (opt == 'O')
				output = optarg;
			else if (opt == 'f')
				force = 1;
			else if (opt == 'X')
				defaults = 1;
			else if (opt == 'F')
				r = cli_parse_share_format("export", optarg, &sqlite) ? -1 : 1;
			else
				r = 0;
		}
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("export", opt, argv);
	}
	if (optind < argc)
		return cli_usage_error("export", "unexpected argument '%s'", argv[optind]);
	if (sqlite && !output)
		return cli_usage_error("export", "--format sqlite needs -o FILE");

	if (cli_db_path(cli, &path))
		return EXIT_USAGE;
	/* export only reads: the database is opened read-only, never migrated */
	rc = ktune__db_open_read(path, &db, &e);
	if (rc == KTUNE_ERR_NOT_FOUND) {
		cli_error(EXIT_FAIL, "no database at '%s' yet: run 'ktune sweep'", path);
		free(path);
		return EXIT_FAIL;
	}
	free(path);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	rc = ktune__db_query(db, &f, collect_one, &c, &e);
	if (rc == -1)
		e = c.e;
	if (!rc && defaults)
		rc = to_defaults(db, &c.share, &e);
	ktune__db_close(db);
	if (rc) {
		ktune__share_free(&c.share);
		return cli_error(EXIT_FAIL, "%s", e.msg);
	}

	if (sqlite)
		rc = ktune__db_write_standalone(output, c.share.entries, c.share.count, force, &e);
	else if ((rc = ktune__share_write(c.share.entries, c.share.count, &text, &len, &e)) ==
		 KTUNE_OK) {
		if (!output) {
			if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)
				rc = ktune__fail(&e, KTUNE_ERR_IO, "cannot write to stdout");
		} else {
			/* a YAML export is meant to be rewritten in place (git tracks it) */
			rc = ktune__write_file_atomic(output, text, len, &e);
		}
	}
	free(text);
	if (rc == KTUNE_OK && output)
		fprintf(stderr, "ktune export: %ld entries to '%s'%s\n", c.share.count, output,
			c.left_out ? " (some left out: see above)" : "");
	ktune__share_free(&c.share);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	return EXIT_OK;
}
