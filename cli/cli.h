/*
 * cli.h - what the ktune command's subcommands share.  Every source file
 * of cli/ includes this and system headers only; this includes the public
 * ktune.h and tuner/tuning.h, the declared list of internals the commands
 * use.
 */
#ifndef KTUNE_CLI_H
#define KTUNE_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "ktune.h"
#include "tuner/tuning.h" /* the CLI's one internal header: all it uses of src/ */

#ifdef __cuda_cuda_h__
#error "the ktune command sees no CUDA type: reach the runtime through tuning.h's plain structs"
#endif

/* Exit codes. */
#define EXIT_OK 0
#define EXIT_FAIL 1
#define EXIT_USAGE 2 /* bad arguments, or no GPU where one is needed */

struct cli {
	const char *db_path; /* --db; NULL: the default */
	int device;          /* --device */
};

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv, struct cli *cli);
	const char *summary;
	const char *usage; /* full help text */
};

extern const struct cmd cli_commands[];

int cmd_bench(int argc, char **argv, struct cli *cli);
int cmd_compile(int argc, char **argv, struct cli *cli);
int cmd_explain(int argc, char **argv, struct cli *cli);
int cmd_export(int argc, char **argv, struct cli *cli);
int cmd_import(int argc, char **argv, struct cli *cli);
int cmd_info(int argc, char **argv, struct cli *cli);
int cmd_merge(int argc, char **argv, struct cli *cli);
int cmd_pack(int argc, char **argv, struct cli *cli);
int cmd_show(int argc, char **argv, struct cli *cli);
int cmd_sweep(int argc, char **argv, struct cli *cli);
int cmd_tune(int argc, char **argv, struct cli *cli);
int cmd_verify(int argc, char **argv, struct cli *cli);
int cmd_warm(int argc, char **argv, struct cli *cli);

/* Prints a command's usage to stdout (help) or stderr (errors). */
void cli_usage(const char *name, FILE *to);
/* "ktune NAME: MESSAGE" plus a hint, returns EXIT_USAGE. */
int cli_usage_error(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "ktune: MESSAGE", returns code. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Options every command takes, for getopt_long: --db, --device, --help.
 * cli_common handles one of them (returns 1) or not (0); -1 on a bad value.
 */
#define CLI_COMMON_OPTIONS                                                                 \
	{ "db", required_argument, NULL, 'D' }, { "device", required_argument, NULL, 'G' }, \
		{ "help", no_argument, NULL, 'h' }
int cli_common(const char *name, int opt, const char *arg, struct cli *cli);

/* Filter options of show, verify and compile: --dtype --layout -m -n -k --gpu --arch --op. */
#define CLI_FILTER_OPTIONS                                                                 \
	{ "dtype", required_argument, NULL, 't' }, { "layout", required_argument, NULL, 'l' }, \
		{ "gpu", required_argument, NULL, 'g' }, { "arch", required_argument, NULL, 'a' }, \
		{ "op", required_argument, NULL, 'o' }, { "variant", required_argument, NULL, 'V' }
/* Handles -m -n -k and the filter options (1), not one (0), a bad value (-1). */
int cli_filter(const char *name, int opt, const char *arg, struct ktune_filter *f);

/*
 * The usage error for what getopt_long (optstring starting with ':')
 * returned for a bad option: ':' is a missing value ("option '--db' needs a
 * value"), anything else an unknown option.  Returns EXIT_USAGE.
 */
int cli_bad_option(const char *name, int opt, char **argv);

/*
 * The database path (--db, else ktune__default_db_path), malloc'd into *out;
 * -1 after a message when it is too long or its default folder is not to be
 * trusted.
 */
int cli_db_path(const struct cli *cli, char **out);

/* Parses a positive integer argument; -1 with a message on a bad one. */
int cli_parse_int(const char *name, const char *what, const char *arg, long min, long max,
		  long *out);

struct ktune_tune_options;
/* Handles --budget --seed --jobs --progress --retry-failed --timeout --compile-timeout (1),
 * not one (0), a bad value (-1). */
int cli_tune_option(const char *name, int opt, const char *arg, struct ktune_tune_options *o);

/*
 * A key on the command line, as tune and explain take it (key-args.c): OP
 * --FIELD VALUE... [--dtype D], GEMM's sizes also -m -n -k.
 */
#define CLI_KEY_FIELD_OPT 1000 /* getopt's value of the op's field i: CLI_KEY_FIELD_OPT + i */
#define CLI_KEY_MAX_FIELDS 16
struct cli_key_args {
	const char *values[CLI_KEY_MAX_FIELDS]; /* the variant fields given */
	int64_t sizes[CLI_KEY_MAX_FIELDS];      /* the size fields given; 0: not */
	int has_dtype;
	ktune_dtype dtype;
};
/*
 * The op named on the command line (the first argument that is an op's
 * name); NULL if none, and *bad the usage error's exit code when another
 * word stands where the op would.
 */
const struct ktune_op *cli_key_op(const char *name, int argc, char **argv, int *bad);
/* fixed, then an option per field of op, then the terminator, into out (room for nfixed + 17). */
int cli_key_options(const struct ktune_op *op, const struct option *fixed, int nfixed, struct option *out);
/* Handles --dtype ('t'), -m -n -k and the fields (1), not one (0), a bad value (-1). */
int cli_key_option(const char *name, const struct ktune_op *op, int c, const char *arg, struct cli_key_args *k);
/* The key of what was given, checked and bucketed as the op tunes it; EXIT_OK or a usage error. */
int cli_key_make(const char *name, const struct ktune_op *op, struct cli_key_args *k, int argc, char **argv,
		 struct ktune_key *out);

/*
 * The device a command works for without needing it (device-pick.c): this
 * GPU unless gpu (a substring of its name) or arch is given or there is
 * none; else the one GPU of the database at db_path or of the shipped
 * tuning that matches them (with a key, the one that tuned it if several
 * match); else arch with sm_count.  Its shared memory is its arch's.
 * *from says which ("this GPU", "the database", ...).  EXIT_OK, or
 * EXIT_USAGE after a message listing the GPUs to choose from.
 */
int cli_pick_device(const char *name, struct cli *cli, const char *db_path, const char *gpu, const char *arch,
		    int sm_count, const struct ktune_key *key, struct ktune_device_info *out, const char **from);

/* Parses --policy faster|ours|theirs; -1 after a usage message. */
int cli_parse_policy(const char *name, const char *arg, enum ktune_policy *p);
/* --format of export and merge: "yaml" (0) or "sqlite" (1); -1 with a usage error otherwise. */
int cli_parse_share_format(const char *name, const char *arg, int *sqlite);
/* One line of an import or merge report: outcome, device, key, reason. */
void cli_share_report(FILE *to, const struct ktune_result *r, int outcome, const char *reason);

/* This program's path: the tuner's worker process runs it as `ktune __worker`. */
const char *cli_worker_exe(void);

struct ktune_tuner;
/*
 * The stored results that match f and that this GPU's arch can run (f->arch
 * is set to it when empty): a malloc'd array in *out and their number, or -1
 * after printing why.
 */
int cli_stored_results(struct ktune_tuner *t, struct ktune_filter *f, struct ktune_result **out);

/* Prints "device: NAME (ARCH, N SMs, CUDA driver X.Y)", the GPU a command measures on. */
void cli_print_device(struct ktune_tuner *t);

/* Fails with a clear message and EXIT_USAGE when no GPU can be used; 0 if one can. */
int cli_need_gpu(void);

#endif
