/*
 * cmd-sweep.c - ktune sweep [SPEC.yaml | --misses FILE | --from-db]: tune
 * every key of a spec, or exactly the keys programs recorded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* A spec bigger than this is surely not a spec. */
#define MAX_SPEC_BYTES (1u << 20)

/* Options of sweep and tune that shape the search. */
int cli_tune_option(const char *name, int opt, const char *arg, struct ktune_tune_options *o)
{
	long v;
	switch (opt) {
	case 'b':
		if (cli_parse_int(name, "--budget", arg, 0, 1000000, &v))
			return -1;
		o->budget = (int)v;
		return 1;
	case 'O':
		if (cli_parse_int(name, "--top", arg, 0, 100000, &v))
			return -1;
		o->top = (int)v;
		return 1;
	case 's':
		if (cli_parse_int(name, "--seed", arg, 0, 0x7fffffff, &v))
			return -1;
		o->seed = (unsigned)v;
		return 1;
	case 'j':
		if (cli_parse_int(name, "--jobs", arg, 1, 256, &v))
			return -1;
		o->jobs = (int)v;
		return 1;
	case 'P':
		o->progress = stderr;
		return 1;
	case 'R':
		o->retry_failed = 1;
		return 1;
	case 'T':
	case 'C':
	case 'W': {
		char *end;
		double d = strtod(arg, &end);
		const char *flag = opt == 'T' ? "--timeout" : opt == 'C' ? "--compile-timeout" : "--deadline";
		/* --deadline 0: none */
		if (!*arg || *end || !((d > 0 || (opt == 'W' && d == 0)) && d <= 86400)) {
			cli_usage_error(name, "%s '%s' is not a number of seconds in %s86400]", flag, arg,
					opt == 'W' ? "[0, " : "(0, ");
			return -1;
		}
		*(opt == 'T' ? &o->timeout_s : opt == 'C' ? &o->compile_timeout_s : &o->deadline_s) = d;
		return 1;
	}
	}
	return 0;
}

/* "0,1,3": distinct device ordinals; the count, or -1 after a usage error. */
static int parse_devices(const char *name, const char *arg, int *out, int max)
{
	int n = 0;
	for (const char *p = arg; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > 1024 || (*end && *end != ',') || n == max) {
			cli_usage_error(name, "--devices '%s' is not a list of device numbers such as 0,1",
					arg);
			return -1;
		}
		for (int i = 0; i < n; i++)
			if (out[i] == v) {
				cli_usage_error(name, "--devices '%s' names device %ld twice", arg, v);
				return -1;
			}
		out[n++] = (int)v;
		p = *end ? end + 1 : end;
	}
	if (!n)
		cli_usage_error(name, "--devices needs at least one device number");
	return n ? n : -1;
}

/*
 * The misses the database holds for the GPUs of this sweep: each worker
 * says which GPU it has (the model is what misses are recorded under).
 */
static int recorded_in_db(struct cli *cli, const int *devices, int ndevices, struct ktune_spec *spec)
{
	struct ktune_device_id ids[64];
	struct ktune_tuner *t = NULL;
	struct ktune_err e;
	int rc;

	for (int d = 0; d < ndevices; d++) {
		if (ktune__tuner_open(cli->db_path, devices[d], cli_worker_exe(), &t, &e))
			return cli_error(EXIT_FAIL, "%s", e.msg);
		struct ktune_device_info info;
		ktune__tuner_device_info(t, &info);
		ids[d] = info.id;
		if (d + 1 < ndevices)
			ktune__tuner_close(t);
	}
	rc = ktune__spec_from_db_misses(ktune__tuner_db(t), ids, ndevices, spec, &e);
	ktune__tuner_close(t);
	if (rc)
		return cli_error(EXIT_FAIL, "%s", e.msg);
	if (!spec->nkeys)
		fprintf(stderr, "ktune sweep: the database holds no recorded misses of %s%s "
			"(KTUNE_RECORD=db records them)\n", ids[0].name, ndevices > 1 ? " or the other GPUs" : "");
	return EXIT_OK;
}

int cmd_sweep(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "budget", required_argument, NULL, 'b' },
		{ "top", required_argument, NULL, 'O' },
		{ "force", no_argument, NULL, 'f' },
		{ "seed", required_argument, NULL, 's' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "retry-failed", no_argument, NULL, 'R' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "compile-timeout", required_argument, NULL, 'C' },
		{ "deadline", required_argument, NULL, 'W' },
		{ "devices", required_argument, NULL, 'V' },
		{ "no-group-pick", no_argument, NULL, 'L' },
		{ "misses", required_argument, NULL, 'M' },
		{ "from-db", no_argument, NULL, 'F' },
		{ NULL, 0, NULL, 0 },
	};
	struct ktune_tune_options o = { .seed = 1, .progress = isatty(2) ? stderr : NULL, .group_pick = 1 };
	struct ktune_spec spec = { 0 };
	struct ktune_err e;
	int c, rc, devices[64], ndevices = 0, from_db = 0;
	const char *device_list = NULL, *misses = NULL;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		int r = cli_common("sweep", c, optarg, cli);
		if (!r)
			r = cli_tune_option("sweep", c, optarg, &o);
		if (!r && c == 'f')
			o.force = r = 1;
		if (!r && c == 'L') {
			o.group_pick = 0;
			r = 1;
		}
		if (!r && c == 'V') {
			device_list = optarg;
			r = 1;
		}
		if (!r && c == 'M') {
			misses = optarg;
			r = 1;
		}
		if (!r && c == 'F')
			from_db = r = 1;
		if (r < 0)
			return EXIT_USAGE;
		if (!r)
			return cli_bad_option("sweep", c, argv);
	}
	if (argc - optind > 1)
		return cli_usage_error("sweep", "expected at most one spec file, got %d", argc - optind);
	if ((optind < argc) + !!misses + from_db > 1)
		return cli_usage_error("sweep", "give one of a spec file, --misses FILE and --from-db");

	/* The spec first: a bad one is reported before touching the GPU or the database. */
	if (misses) {
		struct ktune_device_id on;
		if (ktune__spec_from_misses(misses, &spec, &on, &e))
			return cli_error(EXIT_USAGE, "%s", e.msg);
		o.as_recorded = 1;
		if (o.progress)
			fprintf(o.progress, "%d keys recorded on %s (%s, %d SMs)\n", spec.nkeys, on.name, on.arch,
				on.sm_count);
	} else if (from_db) {
		o.as_recorded = 1; /* the keys are read once the devices are known, below */
	} else if (optind < argc) {
		char *text;
		size_t len;
		if (ktune__read_file(argv[optind], MAX_SPEC_BYTES, &text, &len, &e))
			return cli_error(EXIT_USAGE, "%s", e.msg);
		rc = ktune__spec_parse(text, len, argv[optind], &spec, &e);
		free(text);
		if (rc)
			return cli_error(EXIT_USAGE, "%s", e.msg);
	} else if (ktune__spec_default(&spec, &e)) {
		return cli_error(EXIT_FAIL, "%s", e.msg);
	}
	if (spec.budget && !o.budget)
		o.budget = spec.budget;
	if (device_list) {
		if ((ndevices = parse_devices("sweep", device_list, devices, 64)) < 0) {
			rc = EXIT_USAGE;
			goto out;
		}
	} else {
		devices[ndevices++] = cli->device;
	}
	if ((rc = cli_need_gpu()))
		goto out;
	if (from_db && ((rc = recorded_in_db(cli, devices, ndevices, &spec)) || !spec.nkeys))
		goto out;
	if (!spec.nkeys) {
		fprintf(stderr, "ktune sweep: %s lists no key: nothing to tune\n", misses ? misses : "the spec");
		rc = EXIT_OK;
		goto out;
	}
	int failed = ktune__sweep(cli->db_path, cli_worker_exe(), devices, ndevices, &spec, &o,
				  stdout, &e);
	if (failed < 0)
		rc = cli_error(EXIT_FAIL, "%s", e.msg);
	else
		rc = failed ? EXIT_FAIL : EXIT_OK;
out:
	ktune__spec_free(&spec);
	return rc;
}
