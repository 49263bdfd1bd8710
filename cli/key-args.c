/*
 * key-args.c - a key on the command line, as ktune tune and ktune explain
 * take it: OP --FIELD VALUE... [--dtype D] ('ktune help tune' lists each
 * op's fields; GEMM's sizes are also -m -n -k), bucketed as the op tunes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const struct ktune_op *cli_key_op(const char *name, int argc, char **argv, int *bad)
{
	*bad = 0;
	for (int i = 1; i < argc; i++)
		if (ktune__op_find(argv[i]))
			return ktune__op_find(argv[i]);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return NULL; /* the usage comes first */
		if (argv[i][0] != '-' && (i == 1 || argv[i - 1][0] != '-')) {
			*bad = cli_usage_error(name, "'%s' is not a known op (one of %s)", argv[i], ktune__op_names());
			return NULL;
		}
	}
	return NULL;
}

int cli_key_options(const struct ktune_op *op, const struct option *fixed, int nfixed, struct option *out)
{
	int n = 0;
	memcpy(out, fixed, (size_t)nfixed * sizeof(*fixed));
	n = nfixed;
	for (int f = 0; op && f < op->nfields && f < CLI_KEY_MAX_FIELDS; f++)
		out[n++] = (struct option){ op->fields[f].name, required_argument, NULL, CLI_KEY_FIELD_OPT + f };
	memset(&out[n], 0, sizeof(out[0]));
	return n;
}

int cli_key_option(const char *name, const struct ktune_op *op, int c, const char *arg, struct cli_key_args *k)
{
	if (c == 't') {
		if (ktune__dtype_parse(arg, &k->dtype)) {
			cli_usage_error(name, "--dtype '%s' is not one of f16, bf16, f32", arg);
			return -1;
		}
		k->has_dtype = 1;
		return 1;
	}
	/* GEMM's -m -n -k are its fields m, n, k */
	int f = c >= CLI_KEY_FIELD_OPT ? c - CLI_KEY_FIELD_OPT : -1;
	for (int i = 0; op && (c == 'm' || c == 'n' || c == 'k') && i < op->nfields; i++)
		if (op->fields[i].name[0] == c && !op->fields[i].name[1])
			f = i;
	if (!op || f < 0 || f >= op->nfields)
		return 0;
	const struct ktune_op_field *fd = &op->fields[f];
	if (fd->dim >= 0) {
		long v;
		char what[40];
		snprintf(what, sizeof(what), "--%s", fd->name);
		if (cli_parse_int(name, what, arg, 1, 1L << 34, &v))
			return -1;
		k->sizes[f] = v;
	} else {
		k->values[f] = arg;
	}
	return 1;
}

int cli_key_make(const char *name, const struct ktune_op *op, struct cli_key_args *k, int argc, char **argv,
		 struct ktune_key *out)
{
	struct ktune_err e;

	if (!op)
		return cli_usage_error(name, "which op? one of %s, e.g. 'ktune %s gemm -m 16 -n 4096 -k 4096'",
				       ktune__op_names(), name);
	for (int i = optind, seen = 0; i < argc; i++)
		if (strcmp(argv[i], op->name) || seen++)
			return cli_usage_error(name, "unexpected argument '%s'", argv[i]);
	memset(out, 0, sizeof(*out));
	out->aligned = 1;
	out->dtype = k->has_dtype ? k->dtype : op->dtypes[0];
	snprintf(out->op, sizeof(out->op), "%s", op->name);
	for (int f = 0; f < op->nfields && f < CLI_KEY_MAX_FIELDS; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		if (fd->dim >= 0 && !k->sizes[f])
			return cli_usage_error(name, "%s needs --%s ('ktune help tune' lists each op's fields)", op->name,
					       fd->name);
		if (fd->dim >= 0)
			*ktune__key_dim(out, fd->dim) = k->sizes[f];
		else if (!k->values[f] && ktune__op_is_gemm(op))
			k->values[f] = "nt"; /* nn.Linear's layout */
	}
	if (ktune__op_variant_set(op, out, k->values, &e) || ktune__op_key_check(out, &e))
		return cli_usage_error(name, "%s", e.msg);
	if (op->key_bucket)
		op->key_bucket(out); /* what a call of these sizes looks up */
	return EXIT_OK;
}
