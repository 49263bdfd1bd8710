/*
 * cmd-tune.c - ktune tune OP --FIELD VALUE...: tune one key of any op of the
 * registry and compare it with its baseline in the same run (cuBLAS for
 * GEMM, the copy of as many bytes for the memory-bound ops).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void print_result(const struct ktune_op *op, const struct ktune_key *key,
			 const struct ktune_tune_report *rep)
{
	const struct ktune_result *r = &rep->result;
	char text[128];
	ktune__key_format(key, text, sizeof(text));
	printf("key:        %s\n", text);
	printf("device:     %s (%s, %d SMs)\n", r->device.name, r->device.arch, r->device.sm_count);
	printf("config:     %s\n", r->config);
	printf("time:       %.2f us (p20 %.2f, p80 %.2f)\n", r->time_us, r->p20_us, r->p80_us);
	if (ktune__op_is_gemm(op)) {
		printf("tflops:     %.1f\n", r->tflops);
		printf("error:      %.2e relative Frobenius, %.2e max/rms\n", r->err_fro, r->err_max);
		if (rep->has_cublas)
			printf("cublas:     %.2f us, %.1f TFLOP/s, error %.2e (ktune speedup %.2fx)\n",
			       r->cublas_us, op->flops(key) / r->cublas_us / 1e6, rep->cublas_err_fro,
			       r->cublas_us / r->time_us);
		else
			printf("cublas:     not available\n");
	} else {
		double bytes = op->bytes(key);
		if (ktune__op_compute_bound(op, key))
			printf("tflops:     %.1f\n", op->flops(key) / r->time_us / 1e6);
		printf("bandwidth:  %.0f GB/s (%.0f MB moved at least)\n", bytes / r->time_us / 1e3, bytes / 1e6);
		printf("error:      %.2e relative Frobenius, %.2e max relative\n", r->err_fro, r->err_max);
		if (rep->has_cublas)
			printf("copy:       %.2f us, %.0f GB/s for the same bytes (ktune at %.0f%% of it)\n",
			       r->cublas_us, bytes / r->cublas_us / 1e3, 100 * r->cublas_us / r->time_us);
	}
	printf("candidates: %d timed (%d ok, %d wrong, %d failed, %d pruned) in %.1f s\n",
	       r->candidates, rep->ok, rep->wrong, rep->failed, rep->pruned, r->tune_s);
	if (rep->untried)
		printf("untried:    %d candidates by the model's rank and bound (--top 0 tries every one)\n",
		       rep->untried);
	if (rep->known_bad)
		printf("skipped:    %d configs that failed before (--retry-failed tries them)\n",
		       rep->known_bad);
}

int cmd_tune(int argc, char **argv, struct cli *cli)
{
	static const struct option fixed[] = {
		CLI_COMMON_OPTIONS,
		{ "dtype", required_argument, NULL, 't' },
		{ "budget", required_argument, NULL, 'b' },
		{ "top", required_argument, NULL, 'O' },
		{ "aligned", no_argument, NULL, 'A' },
		{ "unaligned", no_argument, NULL, 'U' },
		{ "seed", required_argument, NULL, 's' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "retry-failed", no_argument, NULL, 'R' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "compile-timeout", required_argument, NULL, 'C' },
		{ "deadline", required_argument, NULL, 'W' },
	};
	enum { NFIXED = sizeof(fixed) / sizeof(fixed[0]) };
	struct option opts[NFIXED + CLI_KEY_MAX_FIELDS + 1];
	struct ktune_tune_options o = { .seed = 1, .force = 1, .progress = isatty(2) ? stderr : NULL,
					.top = KTUNE_TUNE_TOP, .deadline_s = KTUNE_TUNE_DEADLINE };
	int klass = -1; /* GEMM's alignment class: -1 the packed problem's, 1 --aligned, 0 --unaligned */
	struct cli_key_args args = { .has_dtype = 0 };
	struct ktune_key key;
	struct ktune_tuner *t = NULL;
	struct ktune_tune_report rep;
	struct ktune_err e;
	int c, rc, bad;

	const struct ktune_op *op = cli_key_op("tune", argc, argv, &bad);
	if (bad)
		return bad;
	cli_key_options(op, fixed, NFIXED, opts);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("tune", c, optarg, cli);
		if (!r)
			r = cli_tune_option("tune", c, optarg, &o);
		if (!r && (c == 'A' || c == 'U')) {
			klass = c == 'A';
			r = 1;
		}
		if (!r)
			r = cli_key_option("tune", op, c, optarg, &args);
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("tune", c, argv);
	}
	if ((rc = cli_key_make("tune", op, &args, argc, argv, &key)))
		return rc;
	if (klass >= 0 && !ktune__op_is_gemm(op))
		return cli_usage_error("tune", "--aligned and --unaligned are GEMM's");
	if (ktune__op_is_gemm(op))
		key.aligned = klass >= 0 ? klass : ktune__gemm_packed_aligned(&key);
	if ((rc = cli_need_gpu()))
		return rc;
	if (ktune__tuner_open(cli->db_path, cli->device, cli_worker_exe(), &t, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	rc = ktune__tune_key(t, &key, &o, &rep, &e);
	if (rc) {
		ktune__tuner_close(t);
		return cli_error(EXIT_FAIL, "%s", e.msg);
	}
	/* the key as tuned and stored: the tuner puts the other ops in their packed rows' class */
	print_result(op, &rep.result.key, &rep);
	ktune__tuner_close(t);
	return EXIT_OK;
}
