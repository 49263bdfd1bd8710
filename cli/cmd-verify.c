/*
 * cmd-verify.c - ktune verify: re-run every stored variant on fresh inputs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_verify(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS, CLI_FILTER_OPTIONS,
		{ "seed", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_filter f = { 0 };
	struct ktune_result *stored = NULL;
	struct ktune_tuner *t = NULL;
	struct ktune_err e;
	long seed = 12345;
	int c, n, rc = EXIT_OK, failed = 0;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("verify", c, optarg, cli);
		if (!r)
			r = cli_filter("verify", c, optarg, &f);
		if (!r && c == 's')
			r = cli_parse_int("verify", "--seed", optarg, 0, 0x7fffffff, &seed) ? -1 : 1;
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("verify", c, argv);
	}
	if (optind < argc)
		return cli_usage_error("verify", "unexpected argument '%s'", argv[optind]);
	if ((rc = cli_need_gpu()))
		return rc;
	if (ktune__tuner_open(cli->db_path, cli->device, cli_worker_exe(), &t, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	cli_print_device(t);
	if ((n = cli_stored_results(t, &f, &stored)) < 0) {
		rc = EXIT_FAIL;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct ktune_check check;
		char text[128];
		ktune__key_format(&stored[i].key, text, sizeof(text));
		e.msg[0] = 0;
		int r = ktune__verify_result(t, &stored[i], (unsigned)seed + (unsigned)i, &check, &e);
		if (r < 0) {
			rc = cli_error(EXIT_FAIL, "%s: cannot run: %s", text, e.msg);
			goto out;
		}
		printf("%-4s %-40s err %.2e  max %.2e  %s%s%s\n", check.pass ? "ok" : "FAIL", text,
		       check.err_fro, check.err_max, stored[i].config, check.pass ? "" : "  ",
		       check.pass ? "" : e.msg);
		failed += !check.pass;
	}
	printf("%d verified, %d failed\n", n - failed, failed);
	rc = failed ? EXIT_FAIL : EXIT_OK;
out:
	free(stored);
	ktune__tuner_close(t);
	return rc;
}
