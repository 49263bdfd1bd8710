/*
 * cmd-show.c - ktune show: the tuned entries as a table, CSV, JSON or YAML.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum format { TABLE, CSV, JSON, YAML };

struct show {
	enum format format;
	int count;
};

/* Device names are the only free text; quote them for JSON and YAML. */
static void print_quoted(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/*
 * A CSV field per RFC 4180: in double quotes, a quote inside doubled.
 * `always`: quoted even when nothing in it needs it (the free-text fields,
 * so that a column's form does not change from row to row).
 */
static void print_csv(const char *s, int always, int comma)
{
	if (always || strpbrk(s, ",\"\r\n")) {
		putchar('"');
		for (; *s; s++) {
			if (*s == '"')
				putchar('"');
			putchar(*s);
		}
		putchar('"');
	} else {
		fputs(s, stdout);
	}
	if (comma)
		putchar(',');
}

static int show_one(const struct ktune_result *r, void *arg)
{
	struct show *s = arg;
	const struct ktune_op *op = ktune__op_of(&r->key);
	const char *layout = r->key.variant; /* a GEMM's layout, another op's variant */
	char shape[64];
	double ratio = r->cublas_us > 0 ? r->cublas_us / r->time_us : 0;
	/* a compute-bound op's rate is TFLOP/s; a memory-bound op's is GB/s of its fewest bytes */
	int gemm = !op || ktune__op_compute_bound(op, &r->key);
	double rate = !op || ktune__op_is_gemm(op) ? r->tflops
		      : gemm ? op->flops(&r->key) / (r->time_us * 1e6) : op->bytes(&r->key) / (r->time_us * 1e3);
	ktune__key_shape(&r->key, shape, sizeof(shape));

	switch (s->format) {
	case TABLE:
		if (!s->count)
			printf("%-24s %-6s %-7s %-4s %-12s %-20s %-3s %10s %13s %7s %9s  %s\n", "device",
			       "arch", "op", "type", "variant", "shape", "al", "time_us", "rate",
			       "ratio", "err", "config");
		printf("%-24.24s %-6s %-7s %-4s %-12s %-20s %-3d %10.2f %8.1f %-4s %7.2f %9.2e  %s\n",
		       r->device.name, r->device.arch, r->key.op, ktune__dtype_name(r->key.dtype), layout,
		       shape, r->key.aligned, r->time_us, rate, gemm ? "TF/s" : "GB/s", ratio, r->err_fro,
		       r->config);
		break;
	case CSV:
		if (!s->count)
			printf("device,arch,sms,op,dtype,variant,m,n,k,aligned,time_us,p20_us,p80_us,"
			       "tflops,gbps,baseline_us,ratio,err_fro,err_max,candidates,tune_s,config,"
			       "template_hash,created_at\n");
		print_csv(r->device.name, 1, 1);
		print_csv(r->device.arch, 0, 0);
		printf(",%d,", r->device.sm_count);
		print_csv(r->key.op, 0, 1);
		print_csv(ktune__dtype_name(r->key.dtype), 0, 1);
		print_csv(layout, 1, 0);
		printf(",%lld,%lld,%lld,%d,%.3f,%.3f,%.3f,%.2f,%.1f,%.3f,%.4f,%.3e,%.3e,%d,%.2f,",
		       (long long)r->key.m, (long long)r->key.n, (long long)r->key.k, r->key.aligned,
		       r->time_us, r->p20_us, r->p80_us, r->tflops,
		       op ? op->bytes(&r->key) / (r->time_us * 1e3) : 0.0, r->cublas_us, ratio,
		       r->err_fro, r->err_max, r->candidates, r->tune_s);
		print_csv(r->config, 1, 1);
		print_csv(r->template_hash, 0, 1);
		print_csv(r->created_at, 0, 0);
		putchar('\n');
		break;
	case JSON:
		printf("%s\n  {\"device\": ", s->count ? "," : "[");
		print_quoted(r->device.name);
		printf(", \"arch\": \"%s\", \"sms\": %d, \"op\": \"%s\", \"dtype\": \"%s\", "
		       "\"variant\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"aligned\": %d, "
		       "\"config\": \"%s\", \"time_us\": %.3f, \"p20_us\": %.3f, \"p80_us\": %.3f, "
		       "\"tflops\": %.2f, \"baseline_us\": %.3f, \"err_fro\": %.3e, \"err_max\": %.3e, "
		       "\"candidates\": %d, \"template_hash\": \"%s\", \"created_at\": \"%s\"}",
		       r->device.arch, r->device.sm_count, r->key.op, ktune__dtype_name(r->key.dtype),
		       layout, (long long)r->key.m, (long long)r->key.n, (long long)r->key.k,
		       r->key.aligned, r->config, r->time_us, r->p20_us, r->p80_us, r->tflops,
		       r->cublas_us, r->err_fro, r->err_max, r->candidates, r->template_hash,
		       r->created_at);
		break;
	case YAML:
		printf("- device: ");
		print_quoted(r->device.name);
		printf("\n  arch: %s\n  sms: %d\n  op: %s\n  dtype: %s\n  variant: \"%s\"\n"
		       "  m: %lld\n  n: %lld\n  k: %lld\n  aligned: %d\n  config: \"%s\"\n"
		       "  time_us: %.3f\n  tflops: %.2f\n  baseline_us: %.3f\n  err_fro: %.3e\n"
		       "  template_hash: %s\n  created_at: \"%s\"\n",
		       r->device.arch, r->device.sm_count, r->key.op, ktune__dtype_name(r->key.dtype),
		       layout, (long long)r->key.m, (long long)r->key.n, (long long)r->key.k,
		       r->key.aligned, r->config, r->time_us, r->tflops, r->cublas_us, r->err_fro,
		       r->template_hash, r->created_at);
		break;
	}
	s->count++;
	return 0;
}

int cmd_show(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS, CLI_FILTER_OPTIONS,
		{ "format", required_argument, NULL, 'F' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_filter f = { 0 };
	struct show s = { TABLE, 0 };
	struct ktune_db *db;
	struct ktune_err e;
	char *path = NULL;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hm:n:k:", opts, NULL)) != -1) {
		int r = cli_common("show", c, optarg, cli);
		if (!r)
			r = cli_filter("show", c, optarg, &f);
		if (!r && c == 'F') {
			r = 1;
			if (!strcmp(optarg, "table"))
				s.format = TABLE;
			else if (!strcmp(optarg, "csv"))
				s.format = CSV;
			else if (!strcmp(optarg, "json"))
				s.format = JSON;
			else if (!strcmp(optarg, "yaml"))
				s.format = YAML;
			else
				return cli_usage_error("show", "--format '%s' is not one of table, csv, json, yaml",
						       optarg);
		}
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("show", c, argv);
	}
	if (optind < argc)
		return cli_usage_error("show", "unexpected argument '%s'", argv[optind]);
	if (cli_db_path(cli, &path))
		return EXIT_USAGE;
	/* show only reads: the database is opened read-only, never migrated */
	int rc = ktune__db_open_read(path, &db, &e);
	if (rc == KTUNE_ERR_NOT_FOUND) {
		if (s.format == JSON)
			printf("[]\n");
		else if (s.format == TABLE)
			fprintf(stderr, "ktune: no database at '%s' yet: run 'ktune sweep'\n", path);
		free(path);
		return EXIT_OK;
	}
	free(path);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	rc = ktune__db_query(db, &f, show_one, &s, &e);
	ktune__db_close(db);
	if (rc < 0)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	if (s.format == JSON)
		printf(s.count ? "\n]\n" : "[]\n");
	if (s.format == TABLE && !s.count)
		fprintf(stderr, "ktune: no tuned entries match\n");
	return EXIT_OK;
}
