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

#define FIELD_OPT 1000 /* getopt's value for the op's field i: FIELD_OPT + i */

/* The op named on the command line: the first argument that is an op's name. */
static const struct ktune_op *find_op(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (ktune__op_find(argv[i]))
			return ktune__op_find(argv[i]);
	return NULL;
}

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
	};
	enum { NFIXED = sizeof(fixed) / sizeof(fixed[0]) };
	struct option opts[NFIXED + 16 + 1];
	struct ktune_tune_options o = { .seed = 1, .force = 1, .progress = isatty(2) ? stderr : NULL,
					.top = KTUNE_TUNE_TOP };
	int klass = -1; /* GEMM's alignment class: -1 the packed problem's, 1 --aligned, 0 --unaligned */
	struct ktune_key key = { .aligned = 1 };
	const char *values[16] = { NULL };
	int64_t sizes[16] = { 0 };
	struct ktune_tuner *t = NULL;
	struct ktune_tune_report rep;
	struct ktune_err e;
	int c, rc;

	const struct ktune_op *op = find_op(argc, argv);
	for (int i = 1; !op && i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			break; /* the usage, below */
		if (argv[i][0] != '-' && (i == 1 || argv[i - 1][0] != '-'))
			return cli_usage_error("tune", "'%s' is not a known op (one of %s)", argv[i],
					       ktune__op_names());
	}
	memcpy(opts, fixed, sizeof(fixed));
	for (int f = 0; op && f < op->nfields && f < 16; f++)
		opts[NFIXED + f] = (struct option){ op->fields[f].name, required_argument, NULL, FIELD_OPT + f };
	memset(&opts[NFIXED + (op ? op->nfields : 0)], 0, sizeof(opts[0]));
	key.dtype = op ? op->dtypes[0] : KTUNE_F16;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("tune", c, optarg, cli);
		if (!r)
			r = cli_tune_option("tune", c, optarg, &o);
		if (!r && (c == 'A' || c == 'U')) {
			klass = c == 'A';
			r = 1;
		}
		if (!r && c == 't') {
			if (ktune__dtype_parse(optarg, &key.dtype))
				return cli_usage_error("tune", "--dtype '%s' is not one of f16, bf16, f32", optarg);
			r = 1;
		}
		/* GEMM's -m -n -k are its fields m, n, k */
		int f = c >= FIELD_OPT ? c - FIELD_OPT : -1;
		for (int i = 0; op && (c == 'm' || c == 'n' || c == 'k') && i < op->nfields; i++)
			if (op->fields[i].name[0] == c && !op->fields[i].name[1])
				f = i;
		if (!r && op && f >= 0) {
			const struct ktune_op_field *fd = &op->fields[f];
			if (fd->dim >= 0) {
				long v;
				char what[40];
				snprintf(what, sizeof(what), "--%s", fd->name);
				if (cli_parse_int("tune", what, optarg, 1, 1L << 34, &v))
					return EXIT_USAGE;
				sizes[f] = v;
			} else {
				values[f] = optarg;
			}
			r = 1;
		}
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("tune", c, argv);
	}
	if (!op)
		return cli_usage_error("tune", "which op? one of %s, e.g. 'ktune tune gemm -m 16 -n 4096 -k 4096'",
				       ktune__op_names());
	for (int i = optind, seen = 0; i < argc; i++)
		if (strcmp(argv[i], op->name) || seen++)
			return cli_usage_error("tune", "unexpected argument '%s'", argv[i]);
	snprintf(key.op, sizeof(key.op), "%s", op->name);
	for (int f = 0; f < op->nfields; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		if (fd->dim >= 0 && !sizes[f])
			return cli_usage_error("tune", "%s needs --%s ('ktune help tune' lists each op's fields)",
					       op->name, fd->name);
		if (fd->dim >= 0)
			*ktune__key_dim(&key, fd->dim) = sizes[f];
		else if (!values[f] && ktune__op_is_gemm(op))
			values[f] = "nt"; /* nn.Linear's layout */
	}
	if (ktune__op_variant_set(op, &key, values, &e) || ktune__op_key_check(&key, &e))
		return cli_usage_error("tune", "%s", e.msg);
	if (op->key_bucket)
		op->key_bucket(&key); /* what a call of these sizes looks up */
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
	print_result(op, &key, &rep);
	ktune__tuner_close(t);
	return EXIT_OK;
}
