/*
 * main.c - the ktune command: finds the subcommand in the table and runs it.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define SHOW_FILTERS                                                                        \
	"Filters:\n"                                                                        \
	"  --op gemm|add|gelu|glu|dropout   --dtype f16|bf16|f32   -m M  -n N  -k K\n"   \
	"  --layout nn|nt|tn|tt (GEMM)   --variant TEXT (another op's, e.g. tanh,fwd)\n"   \
	"  --gpu NAME (substring of the device name)   --arch sm_90\n"

#define COMMON                                                                              \
	"Common options:\n"                                                                 \
	"  --db PATH      tuning database (default $KTUNE_DB, else ~/.cache/ktune/ktune.db)\n" \
	"  --device N     CUDA device ordinal (default 0)\n"                                \
	"  -h, --help     this help\n"

/* Alphabetical. */
const struct cmd cli_commands[] = {
	{ "bench", cmd_bench, "time the stored results against cuBLAS again, on this GPU",
	  "usage: ktune bench [filters] [--rounds N] [--seed N] [--progress]\n\n"
	  "Times every stored result of this GPU's arch on fresh random inputs, by the\n"
	  "sweep's own last step: the config by the full protocol, then it and cuBLAS in\n"
	  "turns, each run checked against the reference.  Prints each key's ratio\n"
	  "cuBLAS time / ktune time as stored and now, then their geometric means over\n"
	  "the keys timed with cuBLAS.  Use it after an import, a driver update or on\n"
	  "another machine of the same GPU: the stored figures were measured elsewhere\n"
	  "or earlier.  A result tuned with another source of its template is timed\n"
	  "with this one and marked stale: dispatch ignores it until a sweep retunes it.\n"
	  "Exits 1 if a stored config fails or computes a wrong result.\n\n"
	  "  --rounds N   time every key N times, one round over all the keys at a time;\n"
	  "               a key's figures are the medians of its rounds, and each round's\n"
	  "               geometric mean is printed, so their spread shows the noise\n"
	  "               (default 1)\n"
	  "  --seed N     random inputs (default 1)\n"
	  "  --progress   progress on stderr even when it is not a terminal\n\n" SHOW_FILTERS
	  "\n" COMMON },
	{ "compile", cmd_compile, "compile an op's configurations with NVRTC (no GPU needed)",
	  "usage: ktune compile [--op gemm] [--arch sm_90] [--dtype D] [--layout L] [--aligned 0|1]\n"
	  "                     [--family gemm|gemm_wgmma|gemm_gemv] [--jobs N] [--format table|csv]\n"
	  "       ktune compile --op OP [--arch sm_90] [--dtype D] [--aligned 0|1] [--jobs N]\n"
	  "                     [--format table|csv]\n\n"
	  "GEMM (the default): compiles every configuration that the GEMM search spaces\n"
	  "admit, for each selected dtype, layout and alignment variant.  The wgmma\n"
	  "family (gemm_wgmma) is compiled, for sm_90a, when --arch is sm_90 or sm_90a,\n"
	  "and only in the aligned variant (the only one it serves).\n"
	  "Another op: every configuration its prune admits for each key of its part of\n"
	  "the built-in default suite ('ktune help tune' lists the ops), aligned and\n"
	  "unaligned, one compile per distinct kernel.\n"
	  "Reports registers, spills and shared memory; exits 1 if any admitted\n"
	  "configuration fails to compile.  Default: every family, dtype, layout and\n"
	  "alignment for --arch sm_90.\n\n" COMMON },
	{ "explain", cmd_explain, "how a key is served, and how its tuning went (no GPU needed)",
	  "usage: ktune explain OP --FIELD VALUE... [--dtype D] [--aligned 0|1] [--gpu NAME]\n"
	  "                     [--arch ARCH] [--sm-count N] [--all] [--format text|json]\n"
	  "       ktune explain gemm -m M -n N -k K [--layout nn|nt|tn|tt] [--dtype f16|bf16]\n\n"
	  "Explains one key, given as 'ktune tune' takes it ('ktune help tune' lists each\n"
	  "op's fields): the dispatch chain (exact, arch, shipped, then dispatch's\n"
	  "fallbacks) and where it stops; the calls programs recorded for it as a miss;\n"
	  "its stored result; and its newest tuning: the configs pruned before compiling,\n"
	  "grouped by reason; every candidate that failed (compile error, crash, timeout,\n"
	  "spills) or computed a wrong result, with its errors and the tolerance; the\n"
	  "fastest by the screen with their ratio baseline time / time; the finalists'\n"
	  "two full measurements; the winner and the baseline in turns; the runoff; and\n"
	  "the group picks that weighed the key since, with their decisions.  Reads the\n"
	  "database only; needs no GPU.\n\n"
	  "  --aligned 0|1    the key's alignment class (default: as 'ktune tune' takes it;\n"
	  "                   that of packed operands: rows of 16-byte multiples are aligned)\n"
	  "  --gpu NAME       the GPU to explain for: one whose name contains NAME, among\n"
	  "                   the database's and the shipped tuning's (default: this GPU,\n"
	  "                   else the one GPU known, or the one that tuned the key)\n"
	  "  --arch ARCH      the same by arch (sm_90); a GPU not known needs --sm-count\n"
	  "  --sm-count N     its number of SMs\n"
	  "  --all            every pruning reason, failure and candidate (default: a screen)\n"
	  "  --format json    everything, as one JSON object\n\n" COMMON },
	{ "export", cmd_export, "write the tuned entries to a file to share",
	  "usage: ktune export [-o FILE] [--format yaml|sqlite] [--force] [--defaults] [filters]\n\n"
	  "Writes the tuned entries as a versioned YAML file: sorted, with fixed number\n"
	  "formats, so that it diffs well in git.  'ktune import' on another machine\n"
	  "merges it into that machine's database.  Entries that an import would refuse\n"
	  "(say, a configuration no longer in the template's space) are left out with\n"
	  "a warning.  Default: to stdout.\n\n"
	  "  -o, --output FILE      write FILE atomically instead of stdout (a new file or\n"
	  "                         a regular one: a symlink, device or directory is refused)\n"
	  "  --format sqlite        a standalone SQLite database instead (needs -o)\n"
	  "  --force                replace an existing SQLite FILE\n"
	  "  --defaults             one entry per key and arch: the config best on average\n"
	  "                         over the GPUs that tuned it (each GPU's time relative to\n"
	  "                         its own best), as device 'ktune defaults (N GPUs)'; other\n"
	  "                         GPUs of the arch use it after importing the file\n"
	  "  --device NAME          entries of devices whose name contains NAME (as --gpu)\n\n"
	  SHOW_FILTERS "\n"
	  "  --db PATH      tuning database (default $KTUNE_DB, else ~/.cache/ktune/ktune.db)\n"
	  "  -h, --help     this help\n" },
	{ "import", cmd_import, "merge an exported file into the database",
	  "usage: ktune import FILE [--policy faster|ours|theirs] [--dry-run]\n\n"
	  "Merges an export (YAML or SQLite, from 'ktune export' or 'ktune merge') into\n"
	  "the database in one transaction, and prints what was added, replaced, kept\n"
	  "and skipped, and why.  The file is untrusted: every field is checked, and a\n"
	  "malformed file is refused whole (file:line: field: what is wrong) with\n"
	  "nothing written; an SQLite file whose schema is not ktune's is refused\n"
	  "unread.  Entries tuned for another source of their family's template are\n"
	  "skipped (docs/security.md).\n\n"
	  "  --policy faster  for a key on both sides from the same device: the faster\n"
	  "                   if both used the same measurement protocol, else ours (default)\n"
	  "  --policy ours    keep ours\n"
	  "  --policy theirs  take theirs\n"
	  "  --dry-run        report what would happen; write nothing\n\n" COMMON },
	{ "info", cmd_info, "show the GPU, the toolchain and the database",
	  "usage: ktune info [--db PATH] [--device N]\n\n"
	  "Prints the GPU (name, arch, SMs, shared memory per block, L2), the driver,\n"
	  "NVRTC and ktune versions, and the database path with its number of results.\n"
	  "Without a GPU or driver it says so and prints the rest.\n\n" COMMON },
	{ "merge", cmd_merge, "merge exported files into one, without a database",
	  "usage: ktune merge A B ... -o OUT [--policy faster|ours|theirs] [--format yaml|sqlite]\n"
	  "                   [--force]\n\n"
	  "Merges export files (YAML or SQLite) into OUT; A is \"ours\", each later file\n"
	  "\"theirs\" (see 'ktune import' for the policies; default faster).  Conflicts\n"
	  "and skipped entries are reported on stderr.\n\n"
	  "  -o, --output OUT   the merged file (YAML, written atomically)\n"
	  "  --format sqlite    a standalone SQLite database instead\n"
	  "  --force            replace an existing SQLite OUT\n\n" COMMON },
	{ "pack", cmd_pack, "quantise a weight file for ktune_gemm_quant, or unpack one",
	  "usage: ktune pack -n N -k K [--dtype bf16|f16] [--bits 8|4|2|1] [--group 32|64|128|chan]\n"
	  "                  [--mode scale_shift|scale|shift|fma] [--zero group|scalar] WEIGHTS OUT\n"
	  "       ktune pack --unpack PACKED OUT\n\n"
	  "Quantises WEIGHTS, a raw [N, K] weight of --dtype (row-major, little-endian, N * K * 2\n"
	  "bytes), by rounding to nearest (ktune_quant_pack), and writes OUT: a 256-byte text\n"
	  "header (format, sizes), then the packed 32-bit words, the scales and the zeros, as\n"
	  "ktune_gemm_quant reads them (docs/quant.md).  --unpack writes the dequantised\n"
	  "weight of a packed file back as a raw [N, K] weight of its dtype.  No GPU needed.\n"
	  "Defaults: bf16, 4 bits, groups of 128, scale_shift, a zero per group.  K must be a\n"
	  "multiple of 32 and of the group size.\n\n"
	  "  -n N, -k K     the weight's rows (output features) and columns (input features)\n"
	  "  --mode MODE    scale_shift (q - z) * s, scale q * s, shift q - z, fma q * s + z\n"
	  "  --zero scalar  one zero for the whole weight (modes with a zero)\n"
	  "  --unpack       dequantise PACKED into OUT\n"
	  "  -h, --help     this help\n" },
	{ "show", cmd_show, "list the tuned entries",
	  "usage: ktune show [filters] [--format table|csv|json|yaml]\n\n" SHOW_FILTERS "\n" COMMON },
	{ "sweep", cmd_sweep, "tune every key of a spec (default: the built-in suite)",
	  "usage: ktune sweep [SPEC.yaml | --misses FILE | --from-db] [--budget N] [--top N]\n"
	  "                   [--force] [--retry-failed] [--seed N] [--jobs N] [--progress]\n"
	  "                   [--timeout S] [--compile-timeout S] [--deadline S]\n"
	  "                   [--devices 0,1,...] [--no-group-pick]\n\n"
	  "Tunes the keys a spec lists and stores the best configuration of each in the\n"
	  "database.  With --misses or --from-db, tunes exactly the keys that programs were\n"
	  "served without a tuned entry, as they recorded them (KTUNE_RECORD).\n"
	  "Without SPEC, tunes the built-in default suite: GEMM in f16 and bf16,\n"
	  "layouts nn and nt, M=N=K in 512..8192, and M in {1,16,128,1024,4096} on the LLM\n"
	  "weight shapes (N,K) in {(6144,4096), (4096,4096), (28672,4096), (4096,14336)};\n"
	  "then each elementwise op (add, gelu, glu, dropout) from 1M to 64M elements.\n"
	  "Keys already tuned with the current template are skipped unless --force, so an\n"
	  "interrupted sweep resumes where it stopped.  Candidates run in a worker\n"
	  "process: one that crashes or hangs is recorded and the sweep goes on.  Several\n"
	  "sweeps may share a database: each key is claimed before it is tuned.  Then the\n"
	  "GEMM keys of each M weigh the config most of them won against their own picks,\n"
	  "in turns with cuBLAS, and take it where it does better as a group.\n\n"
	  "  --misses FILE the keys of a misses file (KTUNE_RECORD=FILE wrote it when a\n"
	  "                program closed its context), each in its alignment class\n"
	  "  --from-db     the misses recorded into the database (KTUNE_RECORD=db) on\n"
	  "                this GPU's model (with --devices, on any of theirs)\n"
	  "  --budget N    at most N candidates per key (random sample; default: all)\n"
	  "  --top N       GEMM: compile and screen only the candidates of the N kernels\n"
	  "                the performance model ranks best (and the best of each tile\n"
	  "                shape), the likeliest first, until the rest cannot win by the\n"
	  "                model's bound (default 0: every candidate)\n"
	  "  --deadline S  with --top: no batch of kernels starts once the time spent on a\n"
	  "                key's compiles and screens, plus the last batch's, passes S\n"
	  "                seconds (default 0: no deadline)\n"
	  "  --force       retune keys that are already tuned\n"
	  "  --retry-failed  also try configs that failed for a key before (failed to\n"
	  "                compile or launch, or computed wrong numbers, with the same\n"
	  "                template source, NVRTC and driver); by default they are skipped\n"
	  "  --seed N      random inputs and sampling (default 1)\n"
	  "  --jobs N      compile threads (default: one per core)\n"
	  "  --progress    progress on stderr even when it is not a terminal\n"
	  "  --timeout S   a candidate's run is killed after S seconds (default: 1000x\n"
	  "                the key's roofline time, at least 2 s, at most 60 s)\n"
	  "  --compile-timeout S  an NVRTC compile is killed after S seconds (default 120)\n"
	  "  --devices 0,1 tune on these GPUs at once, a worker each, sharing the keys\n"
	  "                (default: --device)\n"
	  "  --no-group-pick  keep each key's own winner (no group pick)\n\n"
	  "Spec format:\n"
	  "  budget: 64\n"
	  "  gemm:\n"
	  "    dtypes: [f16, bf16]\n"
	  "    layouts: [nn, nt]\n"
	  "    shapes:\n"
	  "      - {mnk: [512, 1024]}\n"
	  "      - {m: [1, 16], n: 4096, k: {from: 1024, to: 4096, mul: 2}}\n"
	  "  gelu:                       # any op: dtypes, its variant fields, its sizes\n"
	  "    dtypes: [bf16]\n"
	  "    approx: [erf, tanh]       # a variant field left out takes its first value\n"
	  "    direction: [fwd, bwd]\n"
	  "    shapes:\n"
	  "      - {n: [1048576, 16777216]}\n"
	  "'ktune help tune' lists every op's fields.\n\n" COMMON },
	{ "tune", cmd_tune, "tune one key of an op and compare it with its baseline",
	  "usage: ktune tune OP --FIELD VALUE... [--dtype D] [--budget N] [--retry-failed]\n"
	  "                  [--seed N] [--jobs N] [--progress] [--timeout S] [--compile-timeout S]\n"
	  "       ktune tune gemm -m M -n N -k K [--layout nn|nt|tn|tt] [--dtype f16|bf16]\n"
	  "                  [--top N] [--deadline S] [--aligned|--unaligned]\n\n"
	  "Tunes one key (always, even if tuned before), stores the winner, and prints its\n"
	  "config, time, rate and error with its baseline measured in the same run: cuBLAS\n"
	  "for GEMM, the copy of as many bytes for the memory-bound ops.  Sizes are tuned\n"
	  "in the op's buckets (the elementwise ops: the next power of two).  Defaults: the\n"
	  "op's first dtype (GEMM f16, the others bf16), each variant field's first value\n"
	  "(GEMM: --layout nt).\n\n"
	  "GEMM tunes fast by default: the candidates of the " KTUNE_TUNE_TOP_TEXT " kernels the performance\n"
	  "model ranks best (and the best of each tile shape) are compiled and screened\n"
	  "in batches, the likeliest first, until the rest cannot win by the model's\n"
	  "bound, or until the next batch would end past " KTUNE_TUNE_DEADLINE_TEXT " seconds of compiling and\n"
	  "screening ('--deadline S'; 0: none): a new key tunes in about ten seconds on a\n"
	  "16-core machine.  '--top N' widens the cut, '--top 0' tries every candidate\n"
	  "(and has no deadline).\n\n"
	  "The alignment class is that of packed operands (rows not a multiple of 8\n"
	  "elements: unaligned); --aligned tunes the class of rows padded to multiples of\n"
	  "8, --unaligned that of\n"
	  "misaligned pointers.\n\n" COMMON },
	{ "verify", cmd_verify, "re-run stored variants against the reference",
	  "usage: ktune verify [filters] [--seed N]\n\n"
	  "Runs every stored result of this GPU's arch on fresh random inputs and checks\n"
	  "it against the op's reference.  Exits 1 if any result is wrong.\n\n" SHOW_FILTERS
	  "\n" COMMON },
	{ "warm", cmd_warm, "compile a GPU's tuned kernels into the cache: no NVRTC on first calls",
	  "usage: ktune warm [--op OP] [--dtype D] [--layout L | --variant V] [-m M] [-n N] [-k K]\n"
	  "                  [--gpu NAME] [--arch ARCH] [--sm-count N] [--jobs N]\n\n"
	  "Compiles, in parallel, the kernel of every tuned and shipped entry of a GPU\n"
	  "(the database's for it and its arch, and the tuning built into the library),\n"
	  "each as dispatch would serve its key, into the cubin cache.  A program's first\n"
	  "call of such a key then loads its kernel from the cache instead of compiling\n"
	  "it with NVRTC.  A second warm finds everything cached and compiles nothing.\n"
	  "The GPU is this one, or one the database or the shipped tuning knows (--gpu,\n"
	  "--arch), or --arch with --sm-count: no GPU is needed, NVRTC compiles for its\n"
	  "arch.  A program can warm itself instead: KTUNE_WARM=1, or ktune_warm().\n"
	  "Exits 1 if a kernel fails to compile (the others are cached).\n\n"
	  "  --op, --dtype, --layout, --variant, -m, -n, -k   only the keys that match\n"
	  "  --gpu NAME      the GPU whose name contains NAME (default: this GPU)\n"
	  "  --arch ARCH     the GPU of that arch; an arch no one tuned needs --sm-count\n"
	  "  --jobs N        compile threads (default: one per core)\n\n" COMMON },
	{ NULL, NULL, NULL, NULL },
};

static const struct cmd *find(const char *name)
{
	for (const struct cmd *c = cli_commands; c->name; c++)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

/* Every op of the registry with its key fields: 'ktune help tune'. */
static void print_ops(FILE *to)
{
	fprintf(to, "Ops and their key fields (--FIELD VALUE):\n");
	for (int i = 0; ktune__ops[i]; i++) {
		const struct ktune_op *op = ktune__ops[i];
		fprintf(to, "  %-8s %s\n", op->name, op->summary);
		for (int f = 0; f < op->nfields; f++) {
			const struct ktune_op_field *fd = &op->fields[f];
			char choices[128] = "";
			size_t used = 0;
			for (int c = 0; fd->choices && fd->choices[c]; c++)
				used += (size_t)snprintf(choices + used, sizeof(choices) - used, "%s%s", c ? "|" : "",
							 fd->choices[c]);
			fprintf(to, "    --%-10s %s%s%s%s\n", fd->name, fd->help, choices[0] ? " (" : "", choices,
				choices[0] ? ")" : "");
		}
	}
}

void cli_usage(const char *name, FILE *to)
{
	const struct cmd *c = find(name);
	if (c)
		fputs(c->usage, to);
	if (c && !strcmp(name, "tune")) {
		fputc('\n', to);
		print_ops(to);
	}
}

int cli_usage_error(const char *name, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ktune %s: ", name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'ktune %s --help'.\n", name);
	return EXIT_USAGE;
}

int cli_error(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "ktune: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

int cli_bad_option(const char *name, int opt, char **argv)
{
	if (opt == ':')
		return cli_usage_error(name, "option '%s' needs a value", argv[optind - 1]);
	return cli_usage_error(name, "unknown option '%s'", argv[optind - 1]);
}

int cli_db_path(const struct cli *cli, char **out)
{
	struct ktune_err e;
	int rc;

	*out = NULL;
	if (cli->db_path) {
		if ((rc = ktune__path_check(cli->db_path, "--db", &e)) == KTUNE_OK &&
		    !(*out = strdup(cli->db_path)))
			rc = ktune__fail(&e, KTUNE_ERR_NOMEM, "out of memory");
	} else {
		rc = ktune__default_db_path(out, &e);
	}
	if (rc) {
		cli_error(EXIT_USAGE, "%s", e.msg);
		return -1;
	}
	return 0;
}

int cli_parse_int(const char *name, const char *what, const char *arg, long min, long max,
		  long *out)
{
	char *end;
	long v = strtol(arg, &end, 10);
	if (!*arg || *end || v < min || v > max) {
		cli_usage_error(name, "%s '%s' is not an integer in %ld..%ld", what, arg, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

int cli_common(const char *name, int opt, const char *arg, struct cli *cli)
{
	long v;
	switch (opt) {
	case 'D':
		if (strlen(arg) >= PATH_MAX) {
			cli_usage_error(name, "--db path of %zu bytes is longer than the system allows (%d)",
					strlen(arg), PATH_MAX - 1);
			return -1;
		}
		cli->db_path = arg;
		return 1;
	case 'G':
		if (cli_parse_int(name, "--device", arg, 0, 1024, &v))
			return -1;
		cli->device = (int)v;
		return 1;
	case 'h':
		cli_usage(name, stdout);
		exit(EXIT_OK);
	}
	return 0;
}

int cli_filter(const char *name, int opt, const char *arg, struct ktune_filter *f)
{
	struct ktune_key k;
	long v;
	switch (opt) {
	case 't':
		if (ktune__dtype_parse(arg, &f->dtype)) {
			cli_usage_error(name, "--dtype '%s' is not one of f16, bf16, f32", arg);
			return -1;
		}
		f->has_dtype = 1;
		return 1;
	case 'l':
		if (ktune__layout_parse(arg, &k)) {
			cli_usage_error(name, "--layout '%s' is not one of nn, nt, tn, tt", arg);
			return -1;
		}
		snprintf(f->layout, sizeof(f->layout), "%s", arg);
		return 1;
	case 'g':
		snprintf(f->device, sizeof(f->device), "%s", arg);
		return 1;
	case 'a':
		snprintf(f->arch, sizeof(f->arch), "%s", arg);
		return 1;
	case 'V':
		if (strlen(arg) >= sizeof(f->layout)) {
			cli_usage_error(name, "--variant '%s' is longer than any op's", arg);
			return -1;
		}
		snprintf(f->layout, sizeof(f->layout), "%s", arg);
		return 1;
	case 'o':
		if (!ktune__op_find(arg)) {
			cli_usage_error(name, "--op '%s' is not one of %s", arg, ktune__op_names());
			return -1;
		}
		snprintf(f->op, sizeof(f->op), "%s", arg);
		return 1;
	case 'm':
	case 'n':
	case 'k': {
		char what[4] = { '-', (char)opt, 0 };
		if (cli_parse_int(name, what, arg, 1, 1L << 31, &v))
			return -1;
		*(opt == 'm' ? &f->m : opt == 'n' ? &f->n : &f->k) = v;
		return 1;
	}
	}
	return 0;
}

int cli_need_gpu(void)
{
	struct ktune_err e;
	const char *other = getenv("KTUNE_WORKER");
	if (other && *other)
		return 0; /* that worker has its GPU, or fakes one */
	if (ktune__driver_load(&e))
		return cli_error(EXIT_USAGE, "this command needs an NVIDIA GPU: %s", e.msg);
	return 0;
}

/* Grows the array of results a query returns. */
struct stored {
	struct ktune_result *r;
	int n, cap;
};

static int keep_stored(const struct ktune_result *r, void *arg)
{
	struct stored *s = arg;
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 64;
		struct ktune_result *grown = realloc(s->r, (size_t)cap * sizeof(*grown));
		if (!grown)
			return 1;
		s->r = grown;
		s->cap = cap;
	}
	s->r[s->n++] = *r;
	return 0;
}

int cli_stored_results(struct ktune_tuner *t, struct ktune_filter *f, struct ktune_result **out)
{
	struct stored s = { 0 };
	struct ktune_err e;
	/* Only this GPU's arch can run the stored configs. */
	if (!f->arch[0]) {
		struct ktune_device_info dev;
		ktune__tuner_device_info(t, &dev);
		snprintf(f->arch, sizeof(f->arch), "%s", dev.id.arch);
	}
	if (ktune__db_query(ktune__tuner_db(t), f, keep_stored, &s, &e) < 0) {
		free(s.r);
		cli_error(EXIT_FAIL, "%s", e.msg);
		return -1;
	}
	*out = s.r;
	return s.n;
}

void cli_print_device(struct ktune_tuner *t)
{
	struct ktune_device_info dev;
	ktune__tuner_device_info(t, &dev);
	/* logs of bench and verify travel between machines: they say which GPU they are from */
	printf("device: %s (%s, %d SMs, CUDA driver %d.%d)\n", dev.id.name, dev.id.arch, dev.id.sm_count,
	       dev.driver_version / 1000, dev.driver_version % 1000 / 10);
}

const char *cli_worker_exe(void)
{
	/* the worker is this very program: resolved now, so a rebuild mid-sweep changes nothing */
	static char path[4096];
	const char *other = getenv("KTUNE_WORKER");
	if (other && *other)
		return other; /* another worker program (the tests' fake GPU): docs/tuning.md */
	if (!path[0]) {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		if (n <= 0 || (size_t)n >= sizeof(path) - 1) /* none, or cut: run it by its link */
			snprintf(path, sizeof(path), "%s", "/proc/self/exe");
		else
			path[n] = 0;
	}
	return path;
}

static void usage(FILE *to)
{
	fprintf(to, "usage: ktune <command> [options]\n\nCommands:\n");
	for (const struct cmd *c = cli_commands; c->name; c++)
		fprintf(to, "  %-9s %s\n", c->name, c->summary);
	fprintf(to, "\n'ktune help <command>' or 'ktune <command> --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
	struct cli cli = { NULL, 0 };
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *name = argv[1];
	/*
	 * A program's recording, warming and tuning on use are asked through
	 * the environment of the program: the contexts of this command and of
	 * its workers (a background tune's too) are not the program's, and must
	 * neither record, warm nor tune.
	 */
	unsetenv("KTUNE_RECORD");
	unsetenv("KTUNE_WARM");
	unsetenv("KTUNE_TUNE");
	if (!strcmp(name, "__worker")) /* the tuner's worker process (tuner/protocol.h) */
		return ktune__gpu_worker_main(argc - 1, argv + 1);
	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "version")) {
		printf("ktune %s\n", ktune_version());
		return EXIT_OK;
	}
	if (!strcmp(name, "help")) {
		if (argc < 3) {
			usage(stdout);
			return EXIT_OK;
		}
		if (!find(argv[2]))
			return cli_error(EXIT_USAGE, "'%s' is not a ktune command; see 'ktune help'", argv[2]);
		cli_usage(argv[2], stdout);
		return EXIT_OK;
	}
	const struct cmd *c = find(name);
	if (!c)
		return cli_error(EXIT_USAGE, "'%s' is not a ktune command; see 'ktune help'", name);
	return c->fn(argc - 1, argv + 1, &cli);
}
