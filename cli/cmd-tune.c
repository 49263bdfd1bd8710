/*
 * cmd-tune.c - ktune tune gemm -m M -n N -k K: tune one key, compare with cuBLAS.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tuner/tuner.h"

int cmd_tune(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "dtype", required_argument, NULL, 't' },
		{ "layout", required_argument, NULL, 'l' },
		{ "budget", required_argument, NULL, 'b' },
		{ "seed", required_argument, NULL, 's' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "retry-failed", no_argument, NULL, 'R' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "compile-timeout", required_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_tune_options o = { .seed = 1, .force = 1, .progress = isatty(2) ? stderr : NULL };
	struct ktune_filter f = { 0 };
	struct ktune_key key = { .op = "gemm", .dtype = KTUNE_F16, .trans_a = 'n', .trans_b = 't',
				 .aligned = 1 };
	struct ktune_tuner *t = NULL;
	struct ktune_tune_report rep;
	struct ktune_err e;
	int c, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("tune", c, optarg, cli);
		if (!r)
			r = cli_tune_option("tune", c, optarg, &o);
		if (!r)
			r = cli_filter("tune", c, optarg, &f);
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_usage_error("tune", "unknown option '%s'", argv[optind - 1]);
	}
	if (optind >= argc)
		return cli_usage_error("tune", "which op? e.g. 'ktune tune gemm -m 16 -n 4096 -k 4096'");
	if (strcmp(argv[optind], "gemm"))
		return cli_usage_error("tune", "'%s' is not a known op (known: gemm)", argv[optind]);
	if (optind + 1 < argc)
		return cli_usage_error("tune", "unexpected argument '%s'", argv[optind + 1]);
	if (!f.m || !f.n || !f.k)
		return cli_usage_error("tune", "-m, -n and -k are required");
	key.m = f.m;
	key.n = f.n;
	key.k = f.k;
	if (f.has_dtype)
		key.dtype = f.dtype;
	if (f.layout[0])
		ktune__layout_parse(f.layout, &key);
	if ((rc = cli_need_gpu()))
		return rc;
	if (ktune__tuner_open(cli->db_path, cli->device, cli_worker_exe(), &t, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	rc = ktune__tune_key(t, &key, &o, &rep, &e);
	if (rc) {
		ktune__tuner_close(t);
		return cli_error(EXIT_FAIL, "%s", e.msg);
	}
	const struct ktune_result *r = &rep.result;
	char text[128];
	ktune__key_format(&key, text, sizeof(text));
	printf("key:        %s\n", text);
	printf("device:     %s (%s, %d SMs)\n", r->device.name, r->device.arch, r->device.sm_count);
	printf("config:     %s\n", r->config);
	printf("time:       %.2f us (p20 %.2f, p80 %.2f)\n", r->time_us, r->p20_us, r->p80_us);
	printf("tflops:     %.1f\n", r->tflops);
	printf("error:      %.2e relative Frobenius, %.2e max/rms\n", r->err_fro, r->err_max);
	if (rep.has_cublas)
		printf("cublas:     %.2f us, %.1f TFLOP/s, error %.2e (ktune speedup %.2fx)\n",
		       r->cublas_us, ktune__gemm_flops(&key) / r->cublas_us / 1e6, rep.cublas_err_fro,
		       r->cublas_us / r->time_us);
	else
		printf("cublas:     not available\n");
	printf("candidates: %d timed (%d ok, %d wrong, %d failed, %d pruned) in %.1f s\n",
	       r->candidates, rep.ok, rep.wrong, rep.failed, rep.pruned, r->tune_s);
	if (rep.known_bad)
		printf("skipped:    %d configs that failed before (--retry-failed tries them)\n",
		       rep.known_bad);
	ktune__tuner_close(t);
	return EXIT_OK;
}
