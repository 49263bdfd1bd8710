/*
 * cmd-compile.c - ktune compile: every configuration of the GEMM spaces
 * (mma.sync, and wgmma for sm_90), or every admitted configuration of
 * another op's suite keys, through NVRTC for an arch, no GPU needed.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int valid_arch(const char *arch)
{
	if (strncmp(arch, "sm_", 3) || !isdigit((unsigned char)arch[3]) ||
	    !isdigit((unsigned char)arch[4]))
		return 0;
	const char *p = arch + 5;
	while (isdigit((unsigned char)*p))
		p++;
	return !*p || (p[0] == 'a' && !p[1]) || (p[0] == 'f' && !p[1]);
}

/* SMs assumed by the prune of an op's configurations (an H100's; grid caps only). */
#define COMPILE_SM_COUNT 132

/*
 * Another op: every distinct kernel its prune admits for each key of its
 * part of the default suite, in the dtypes and alignment classes asked for.
 */
static int compile_op(const struct ktune_op *op, const char *arch, const ktune_dtype *dtypes, int ndtypes,
		      int aligned_from, int aligned_to, int threads, int csv)
{
	struct ktune_spec suite;
	struct ktune_compile_job *jl = NULL;
	struct ktune_err e;
	int njobs = 0, cap = 0, rc = EXIT_OK;

	if (ktune__spec_default(&suite, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	for (int k = 0; k < suite.nkeys; k++) {
		int want = 0;
		for (int d = 0; d < ndtypes; d++)
			want |= suite.keys[k].dtype == dtypes[d];
		if (strcmp(suite.keys[k].op, op->name) || !want)
			continue;
		for (int a = aligned_from; a <= aligned_to; a++) {
			struct ktune_key key = suite.keys[k];
			struct ktune_config *cfgs;
			int n, npruned;
			key.aligned = a;
			if (ktune__op_candidates(op, &key, arch, COMPILE_SM_COUNT, 0, 1, &cfgs, &n, &npruned, &e)) {
				rc = cli_error(EXIT_FAIL, "%s", e.msg);
				goto out;
			}
			for (int i = 0; i < n; i++) {
				int seen = 0;
				for (int j = njobs - 1; j >= 0 && !seen; j--)
					seen = ktune__op_same_kernel(op, &jl[j].key, &jl[j].cfg, &key, &cfgs[i]);
				if (seen)
					continue;
				if (njobs == cap) {
					struct ktune_compile_job *grown = realloc(jl, (size_t)(cap = cap ? 2 * cap : 256) * sizeof(*jl));
					if (!grown) {
						free(cfgs);
						rc = cli_error(EXIT_FAIL, "out of memory");
						goto out;
					}
					jl = grown;
				}
				memset(&jl[njobs], 0, sizeof(jl[njobs]));
				jl[njobs].key = key;
				jl[njobs].cfg = cfgs[i];
				njobs++;
			}
			free(cfgs);
		}
	}
	if (!njobs) {
		rc = cli_error(EXIT_FAIL, "%s has no key in the default suite for the dtypes asked", op->name);
		goto out;
	}
	fprintf(stderr, "compiling %d %s kernels for %s\n", njobs, op->name, arch);
	double t0 = ktune__now();
	ktune__compile_jobs(jl, njobs, arch, NULL, threads);
	double wall = ktune__now() - t0;
	int failed = 0, spilled = 0;
	if (csv)
		printf("key,config,status,registers,spill_bytes,stack,seconds\n");
	else
		printf("%-42s %-90s %-6s %5s %6s %6s %6s\n", "key", "config", "status", "regs", "spill", "stack", "sec");
	for (int i = 0; i < njobs; i++) {
		struct ktune_compile_job *j = &jl[i];
		char cfg[256], key[128];
		int spill = j->cubin.res.spill_stores + j->cubin.res.spill_loads;
		const char *status = j->status ? "FAILED" : spill ? "spills" : "ok";
		ktune__op_config_format(op, &j->cfg, cfg, sizeof(cfg));
		ktune__key_format(&j->key, key, sizeof(key));
		failed += j->status != 0;
		spilled += !j->status && spill;
		if (csv)
			printf("\"%s\",\"%s\",%s,%d,%d,%d,%.3f\n", key, cfg, status, j->cubin.res.registers, spill,
			       j->cubin.res.stack, j->cubin.seconds);
		else
			printf("%-42s %-90s %-6s %5d %6d %6d %6.2f\n", key, cfg, status, j->cubin.res.registers, spill,
			       j->cubin.res.stack, j->cubin.seconds);
		if (j->status)
			fprintf(stderr, "ktune: %s\n", j->log ? j->log : "compile failed");
	}
	fprintf(stderr, "%d compiled, %d failed, %d spill registers (the tuner drops those); %.1f s\n",
		njobs - failed, failed, spilled, wall);
	ktune__compile_jobs_free(jl, njobs);
	rc = failed ? EXIT_FAIL : EXIT_OK;
out:
	free(jl);
	ktune__spec_free(&suite);
	return rc;
}

int cmd_compile(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "arch", required_argument, NULL, 'a' },
		{ "dtype", required_argument, NULL, 't' },
		{ "layout", required_argument, NULL, 'l' },
		{ "aligned", required_argument, NULL, 'A' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "format", required_argument, NULL, 'F' },
		{ "family", required_argument, NULL, 'f' },
		{ "op", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	const struct ktune_op *op = ktune__op_find("gemm");
	int layout_given = 0, family_given = 0, dtype_given = 0;
	const char *arch = "sm_90", *layouts[4] = { "nn", "nt", "tn", "tt" };
	int ndtypes = 2, nlayouts = 4, aligned_from = 0, aligned_to = 1, csv = 0, c;
	int family_from = 0, family_to = KTUNE_GEMM_NFAMILIES - 1;
	ktune_dtype dtypes[2] = { KTUNE_F16, KTUNE_BF16 };
	long jobs = 0, v;
	struct ktune_err e;
	struct ktune_key probe;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		int r = cli_common("compile", c, optarg, cli);
		if (r < 0)
			return EXIT_USAGE;
		if (r)
			continue;
		switch (c) {
		case 'a':
			if (!valid_arch(optarg))
				return cli_usage_error("compile", "--arch '%s' is not like sm_90 or sm_90a", optarg);
			arch = optarg;
			break;
		case 't':
			if (ktune__dtype_parse(optarg, &dtypes[0]))
				return cli_usage_error("compile", "--dtype '%s' is not one of f16, bf16, f32", optarg);
			ndtypes = 1;
			dtype_given = 1;
			break;
		case 'o':
			if (!(op = ktune__op_find(optarg)))
				return cli_usage_error("compile", "--op '%s' is not one of %s", optarg, ktune__op_names());
			break;
		case 'l':
			if (ktune__layout_parse(optarg, &probe))
				return cli_usage_error("compile", "--layout '%s' is not one of nn, nt, tn, tt", optarg);
			layouts[0] = optarg;
			nlayouts = 1;
			layout_given = 1;
			break;
		case 'A':
			if (cli_parse_int("compile", "--aligned", optarg, 0, 1, &v))
				return EXIT_USAGE;
			aligned_from = aligned_to = (int)v;
			break;
		case 'j':
			if (cli_parse_int("compile", "--jobs", optarg, 1, 256, &jobs))
				return EXIT_USAGE;
			break;
		case 'f': {
			int f = ktune__gemm_family_from_name(optarg);
			if (f < 0)
				return cli_usage_error("compile", "--family '%s' is not one of gemm, gemm_wgmma, gemm_gemv",
						       optarg);
			family_from = family_to = f;
			family_given = 1;
			break;
		}
		case 'F':
			if (strcmp(optarg, "table") && strcmp(optarg, "csv"))
				return cli_usage_error("compile", "--format '%s' is not one of table, csv", optarg);
			csv = !strcmp(optarg, "csv");
			break;
		default:
			return cli_bad_option("compile", c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("compile", "unexpected argument '%s'", argv[optind]);
	if (!ktune__op_is_gemm(op)) {
		if (layout_given || family_given)
			return cli_usage_error("compile", "--layout and --family are GEMM's; %s has neither", op->name);
		/* without --dtype: every dtype the op takes */
		return compile_op(op, arch, dtype_given ? dtypes : op->dtypes, dtype_given ? 1 : op->ndtypes,
				  aligned_from, aligned_to, (int)jobs, csv);
	}
	if (ndtypes == 1 && dtypes[0] == KTUNE_F32)
		return cli_usage_error("compile", "--dtype f32: GEMM takes f16 and bf16");

	/* every family's kernels, one list: wgmma's only where it runs (sm_90), gemv's aligned only */
	struct ktune_config *kernels = NULL;
	int nkernels = 0;
	for (int f = family_from; f <= family_to; f++) {
		struct ktune_config *some, *grown;
		int n;
		if (!ktune__gemm_family_runs(f, arch, 1))
			continue;
		if (ktune__gemm_space_kernels(f, &some, &n, &e)) {
			free(kernels);
			return cli_error(EXIT_FAIL, "%s", e.msg);
		}
		grown = realloc(kernels, (size_t)(nkernels + n + 1) * sizeof(*grown));
		if (!grown) {
			free(some);
			free(kernels);
			return cli_error(EXIT_FAIL, "out of memory");
		}
		kernels = grown;
		memcpy(kernels + nkernels, some, (size_t)n * sizeof(*some));
		nkernels += n;
		free(some);
	}

	int limit = ktune__arch_smem_optin(arch), njobs = 0, nskipped = 0;
	int total = nkernels * ndtypes * nlayouts * (aligned_to - aligned_from + 1);
	struct ktune_compile_job *jl = calloc((size_t)total + 1, sizeof(*jl));
	if (!jl) {
		free(kernels);
		return cli_error(EXIT_FAIL, "out of memory");
	}
	for (int d = 0; d < ndtypes; d++)
		for (int l = 0; l < nlayouts; l++)
			for (int a = aligned_from; a <= aligned_to; a++)
				for (int i = 0; i < nkernels; i++) {
					struct ktune_key key = { .op = "gemm", .dtype = dtypes[d], .aligned = a };
					ktune__layout_parse(layouts[l], &key);
					if (!ktune__gemm_family_runs(kernels[i].family, arch, a))
						continue; /* wgmma has no unaligned variant */
					if (ktune__gemm_smem_bytes(&key, &kernels[i]) > (size_t)limit) {
						nskipped++;
						continue;
					}
					jl[njobs].key = key;
					jl[njobs].cfg = kernels[i];
					njobs++;
				}
	fprintf(stderr, "compiling %d kernels for %s (%d skipped: over %d KiB of shared memory)\n",
		njobs, arch, nskipped, limit / 1024);
	double t0 = ktune__now();
	ktune__compile_jobs(jl, njobs, arch, NULL, (int)jobs);
	double wall = ktune__now() - t0;

	int failed = 0, spilled = 0;
	if (csv)
		printf("dtype,layout,aligned,config,status,registers,spill_bytes,stack,smem_bytes,seconds\n");
	else
		printf("%-4s %-6s %-3s %-101s %-6s %5s %6s %6s %8s %6s\n", "type", "layout", "al",
		       "config", "status", "regs", "spill", "stack", "smem", "sec");
	for (int i = 0; i < njobs; i++) {
		struct ktune_compile_job *j = &jl[i];
		char cfg[256], layout[3];
		int spill = j->cubin.res.spill_stores + j->cubin.res.spill_loads;
		ktune__gemm_config_format(&j->cfg, cfg, sizeof(cfg));
		ktune__layout_name(&j->key, layout);
		const char *status = j->status ? "FAILED" : spill ? "spills" : "ok";
		failed += j->status != 0;
		spilled += !j->status && spill;
		size_t smem = ktune__gemm_smem_bytes(&j->key, &j->cfg);
		if (csv)
			printf("%s,%s,%d,\"%s\",%s,%d,%d,%d,%zu,%.3f\n", ktune__dtype_name(j->key.dtype),
			       layout, j->key.aligned, cfg, status, j->cubin.res.registers, spill,
			       j->cubin.res.stack, smem, j->cubin.seconds);
		else
			printf("%-4s %-6s %-3d %-101s %-6s %5d %6d %6d %8zu %6.2f\n",
			       ktune__dtype_name(j->key.dtype), layout, j->key.aligned, cfg, status,
			       j->cubin.res.registers, spill, j->cubin.res.stack, smem, j->cubin.seconds);
		if (j->status)
			fprintf(stderr, "ktune: %s\n", j->log ? j->log : "compile failed");
	}
	fprintf(stderr, "%d compiled, %d failed, %d spill registers; %.1f s\n", njobs - failed,
		failed, spilled, wall);
	ktune__compile_jobs_free(jl, njobs);
	free(jl);
	free(kernels);
	return failed ? EXIT_FAIL : EXIT_OK;
}
