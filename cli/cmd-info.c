/*
 * cmd-info.c - ktune info: the GPU, the toolchain and the database.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void print_gpu(const struct cli *cli, const char *db_path)
{
	struct ktune_device_info dev;
	struct ktune_dispatch_sources src;
	struct ktune_fallback_info fb;
	struct ktune_err e;
	ktune_ctx *ctx;

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
	ktune__ctx_device_info(ctx, &dev);
	ktune__ctx_dispatch_sources(ctx, &src);
	ktune__ctx_fallback(ctx, &fb);
	ktune_close(ctx);
	printf("gpu:          %s (device %d)\n", dev.id.name, cli->device);
	printf("arch:         %s\n", dev.id.arch);
	printf("sms:          %d\n", dev.id.sm_count);
	printf("memory:       %.1f GiB\n", dev.total_mem / 1073741824.0);
	printf("smem/block:   %d KiB (opt-in)\n", dev.smem_optin / 1024);
	printf("l2:           %d MiB\n", dev.l2_bytes >> 20);
	printf("driver:       CUDA %d.%d\n", dev.driver_version / 1000, dev.driver_version % 1000 / 10);
	if (dev.mem_gbps > 0)
		printf("dram:         %.0f GB/s (the GEMM model's bandwidth: 90%% of the memory clock's)\n",
		       dev.mem_gbps);
	/* a shipped file per GPU: those tuned on this one serve first */
	printf("sources:      database: %d entries for this GPU, %d from other %s GPUs; "
	       "shipped: %d entries, %d tuned on this GPU%s%s%s\n", src.from_device, src.from_arch,
	       dev.id.arch, src.from_shipped, src.shipped_here, src.shipped_names[0] ? " (" : "",
	       src.shipped_names, src.shipped_names[0] ? ")" : "");
	/* GEMM keys nobody tuned (docs/gemm.md) */
	if (fb.cublas[0])
		printf("untuned:      KTUNE_FALLBACK=%s: a neighbour of the regime, the model's pick, or cuBLAS %s "
		       "where ktune has no good answer\n", fb.policy, fb.cublas);
	else
		printf("untuned:      KTUNE_FALLBACK=%s: a neighbour of the regime or the model's pick%s\n", fb.policy,
		       strcmp(fb.policy, "model") ? " (cuBLAS not found)" : "");
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
			       ktune__result_hash(ktune__ops[i], f), ktune__ops[i]->name);
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
