/*
 * cmd-warm.c - ktune warm [filters]: compile the kernels of every tuned and
 * shipped entry of a GPU into the cubin cache, in parallel, so that a
 * program's first call of a key loads its kernel instead of compiling it.
 * No GPU needed: NVRTC compiles for the arch of the GPU named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_warm(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "dtype", required_argument, NULL, 't' },
		{ "layout", required_argument, NULL, 'l' },
		{ "variant", required_argument, NULL, 'V' },
		{ "op", required_argument, NULL, 'o' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "arch", required_argument, NULL, 'a' },
		{ "sm-count", required_argument, NULL, 'S' },
		{ "jobs", required_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_filter f = { 0 };
	struct ktune_device_info dev;
	struct ktune_warm_report r;
	struct ktune_err e;
	const char *gpu = NULL, *arch = NULL, *from = "";
	char *db_path = NULL;
	long sm_count = 0, jobs = 0;
	ktune_ctx *ctx = NULL;
	int c, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("warm", c, optarg, cli);
		if (!r && c != 'g' && c != 'a')
			r = cli_filter("warm", c, optarg, &f);
		if (!r) {
			r = 1;
			if (c == 'g')
				gpu = optarg;
			else if (c == 'a')
				arch = optarg;
			else if (c == 'S')
				r = cli_parse_int("warm", "--sm-count", optarg, 1, 1 << 20, &sm_count) ? -1 : 1;
			else if (c == 'j')
				r = cli_parse_int("warm", "--jobs", optarg, 1, 256, &jobs) ? -1 : 1;
			else
				r = 0;
		}
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("warm", c, argv);
	}
	if (optind < argc)
		return cli_usage_error("warm", "unexpected argument '%s'", argv[optind]);
	if (cli_db_path(cli, &db_path))
		return EXIT_USAGE;
	if ((rc = cli_pick_device("warm", cli, db_path, gpu, arch, (int)sm_count, NULL, &dev, &from)))
		goto out;
	/* this GPU's own context (its shared memory as the device says), or one of the device named */
	if (!strcmp(from, "this GPU") ? ktune_open(db_path, cli->device, &ctx, e.msg, sizeof(e.msg)) != KTUNE_OK
				      : ktune__ctx_offline(&dev.id, dev.smem_optin, db_path, &ctx, &e) != KTUNE_OK) {
		rc = cli_error(EXIT_FAIL, "%s", e.msg);
		goto out;
	}
	if (ktune__warm(ctx, &f, (int)jobs, NULL, &r, &e)) {
		rc = cli_error(EXIT_FAIL, "%s", e.msg);
		goto out;
	}
	printf("device:   %s (%s, %d SMs), from %s\n", dev.id.name[0] ? dev.id.name : "a GPU", dev.id.arch,
	       dev.id.sm_count, from);
	printf("cache:    %s\n", r.cache_dir);
	printf("warmed:   %d kernels for %d tuned and shipped keys: %d compiled (%.1f s of NVRTC), %d already "
	       "cached, %d failed; %.1f s\n", r.kernels, r.keys, r.compiled, r.compile_seconds, r.cached, r.failed,
	       r.seconds);
	if (r.failed)
		fprintf(stderr, "ktune warm: %d kernels failed to compile; the first: %s\n", r.failed, r.first_error);
	rc = r.failed ? EXIT_FAIL : EXIT_OK;
out:
	ktune_close(ctx);
	free(db_path);
	return rc;
}
