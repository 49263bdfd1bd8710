/*
 * cmd-info.c - ktune info: the GPU, the toolchain and the database.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "runtime/compile.h"
#include "runtime/context.h"

static void print_gpu(const struct cli *cli, const char *db_path)
{
	struct ktune_err e;
	ktune_ctx *ctx;
	size_t mem = 0;

	if (ktune__driver_load(&e)) {
		printf("gpu:          none (%s)\n", e.msg);
		return;
	}
	/* with the database, to say what dispatch would use; an unusable one is reported below */
	if (ktune_open(db_path, cli->device, &ctx, e.msg, sizeof(e.msg)) &&
	    ktune_open("", cli->device, &ctx, e.msg, sizeof(e.msg))) {
		printf("gpu:          none (%s)\n", e.msg);
		return;
	}
	ktune_cu.cuDeviceTotalMem_v2(&mem, ctx->dev);
	printf("gpu:          %s (device %d)\n", ctx->id.name, cli->device);
	printf("arch:         %s\n", ctx->id.arch);
	printf("sms:          %d\n", ctx->id.sm_count);
	printf("memory:       %.1f GiB\n", mem / 1073741824.0);
	printf("smem/block:   %d KiB (opt-in)\n", ctx->smem_optin / 1024);
	printf("l2:           %d MiB\n", ctx->l2_bytes >> 20);
	printf("driver:       CUDA %d.%d\n", ctx->driver_version / 1000,
	       ctx->driver_version % 1000 / 10);
	/* a shipped file per GPU: those tuned on this one serve first */
	int shipped_here = 0;
	for (int i = 0; i < ctx->nentries; i++)
		shipped_here += ctx->entries[i].shipped && ctx->entries[i].same_device;
	printf("sources:      database: %d entries for this GPU, %d from other %s GPUs; "
	       "shipped: %d entries, %d tuned on this GPU%s%s%s\n", ctx->from_device, ctx->from_arch,
	       ctx->id.arch, ctx->from_shipped, shipped_here, ctx->shipped_names[0] ? " (" : "",
	       ctx->shipped_names, ctx->shipped_names[0] ? ")" : "");
	ktune_close(ctx);
}

int cmd_info(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };
	char *path = NULL, *cache = NULL;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		int r = cli_common("info", c, optarg, cli);
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("info", c, argv);
	}
	if (optind < argc)
		return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);

	if (cli_db_path(cli, &path))
		return EXIT_USAGE;
	printf("ktune:        %s\n", ktune_version());
	printf("nvrtc:        %s\n", ktune__nvrtc_version());
	/* the template hash each family's results carry: another one is stale */
	for (int i = 0; ktune__ops[i]; i++)
		for (int f = 0; f < ktune__ops[i]->nfamilies; f++)
			printf("family:       %-11s %s (op %s)\n", ktune__ops[i]->families[f].name,
			       ktune__op_is_gemm(ktune__ops[i]) ? ktune__gemm_family_hash(f)
								: ktune__op_family_hash(ktune__ops[i], f),
			       ktune__ops[i]->name);
	print_gpu(cli, path);
	if (ktune__cache_dir(&cache, NULL) == KTUNE_OK)
		printf("cache:        %s/cubin%s\n", cache,
		       ktune__dir_trusted(cache) ? "" : " (not used: another user owns it or others may write to it)");
	free(cache);

	struct ktune_db *db;
	struct ktune_err e;
	long results = 0, trials = 0;
	int rc = ktune__db_open_read(path, &db, &e);
	if (rc == KTUNE_ERR_NOT_FOUND) {
		printf("database:     %s (not created yet)\n", path);
		free(path);
		return EXIT_OK;
	}
	if (rc) {
		printf("database:     %s (unusable: %s)\n", path, e.msg);
		free(path);
		return EXIT_FAIL;
	}
	rc = ktune__db_count(db, &results, &trials, &e);
	ktune__db_close(db);
	if (!rc)
		printf("database:     %s (%ld results, %ld trials)\n", path, results, trials);
	free(path);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	return EXIT_OK;
}
