/*
 * cmd-pack.c - ktune pack: quantises a weight file into ktune's packed
 * format (ktune_quant_pack), or (--unpack) dequantises a packed file back
 * (ktune_quant_unpack).  The files (docs/quant.md):
 *
 *   weights   raw [n, k] f16 or bf16 values, row-major, little-endian,
 *             exactly n * k * 2 bytes, nothing else
 *   packed    a 256-byte header of ASCII lines "NAME VALUE\n", the rest of
 *             it NUL bytes:
 *                 ktune-quant 1
 *                 dtype bf16          (f16 | bf16)
 *                 bits 4              (8 | 4 | 2 | 1)
 *                 group 128           (32 | 64 | 128 | chan)
 *                 mode scale_shift    (scale_shift | scale | shift | fma)
 *                 zero group          (group | scalar)
 *                 n 4096
 *                 k 4096
 *                 words 2097152
 *                 scales 131072
 *                 zeros 131072
 *             then the words (32-bit little-endian), the scales and the
 *             zeros (dtype), as ktune_gemm_quant reads them, back to back:
 *             words at byte 256, scales at 256 + 4 * words, zeros after
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define HEADER_BYTES 256
#define MAX_FILE_BYTES ((size_t)1 << 40)

static const char *const group_names[] = { "32", "64", "128", "chan" };
static const int group_sizes[] = { 32, 64, 128, 0 };
static const char *const mode_names[] = { "scale_shift", "scale", "shift", "fma" };

static int parse_group(const char *s, int *out)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, group_names[i])) {
			*out = group_sizes[i];
			return 0;
		}
	return -1;
}

static const char *group_name(int g)
{
	for (int i = 0; i < 4; i++)
		if (group_sizes[i] == g)
			return group_names[i];
	return "?";
}

static int parse_mode(const char *s, ktune_quant_mode *out)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, mode_names[i])) {
			*out = (ktune_quant_mode)i;
			return 0;
		}
	return -1;
}

static int write_out(const char *path, const void *data, size_t len)
{
	struct ktune_err e;
	if (ktune__write_file_atomic(path, data, len, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	return EXIT_OK;
}

/* ------------------------------------------------------------ pack */

static int pack(const char *in, const char *out, ktune_dtype dtype, long n, long k, const ktune_quant_format *f)
{
	int64_t words, scales, zeros;
	char err[512];
	char *text = NULL, *file = NULL;
	size_t len;
	struct ktune_err e;
	int rc = EXIT_FAIL;

	if (ktune_quant_sizes(f, n, k, &words, &scales, &zeros, err, sizeof(err)))
		return cli_usage_error("pack", "%s", err);
	if (ktune__read_file(in, MAX_FILE_BYTES, &text, &len, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	if (len != (size_t)n * (size_t)k * 2) {
		cli_error(EXIT_FAIL, "'%s' holds %zu bytes, not n * k * 2 = %zu: a raw [%ld, %ld] %s weight", in, len,
			  (size_t)n * (size_t)k * 2, n, k, ktune__dtype_name(dtype));
		goto out;
	}
	size_t bytes = HEADER_BYTES + (size_t)words * 4 + (size_t)(scales + zeros) * 2;
	if (!(file = calloc(1, bytes))) {
		cli_error(EXIT_FAIL, "out of memory for %zu bytes", bytes);
		goto out;
	}
	snprintf(file, HEADER_BYTES,
		 "ktune-quant 1\ndtype %s\nbits %d\ngroup %s\nmode %s\nzero %s\nn %ld\nk %ld\nwords %lld\n"
		 "scales %lld\nzeros %lld\n",
		 ktune__dtype_name(dtype), f->bits, group_name(f->group_size), mode_names[f->mode],
		 f->zero_scalar ? "scalar" : "group", n, k, (long long)words, (long long)scales, (long long)zeros);
	char *w = file + HEADER_BYTES, *s = w + words * 4, *z = s + scales * 2;
	int st = ktune_quant_pack(f, n, k, text, k, dtype, (uint32_t *)(void *)w, scales ? s : NULL, zeros ? z : NULL);
	if (st == KTUNE_ERR_INVALID) {
		cli_error(EXIT_FAIL, "'%s': a weight is NaN or infinite: no grid holds it", in);
		goto out;
	}
	if (st) {
		cli_error(EXIT_FAIL, "cannot pack '%s': %s", in, ktune_strerror(st));
		goto out;
	}
	rc = write_out(out, file, bytes);
	if (!rc)
		fprintf(stderr, "packed [%ld, %ld] %s into %s (%d bits, group %s, %s, zero %s): %zu bytes\n", n, k,
			ktune__dtype_name(dtype), out, f->bits, group_name(f->group_size), mode_names[f->mode],
			f->zero_scalar ? "scalar" : "per group", bytes);
out:
	free(text);
	free(file);
	return rc;
}

/* ------------------------------------------------------------ unpack */

/* The value of header line NAME ("" if absent) into buf. */
static void header_get(const char *header, const char *name, char *buf, size_t len)
{
	size_t nl = strlen(name);
	buf[0] = '\0';
	for (const char *p = header; *p;) {
		const char *end = strchr(p, '\n');
		if (!end)
			break;
		if ((size_t)(end - p) > nl && !strncmp(p, name, nl) && p[nl] == ' ') {
			size_t vl = (size_t)(end - p) - nl - 1;
			if (vl < len) {
				memcpy(buf, p + nl + 1, vl);
				buf[vl] = '\0';
			}
			return;
		}
		p = end + 1;
	}
}

static int header_long(const char *header, const char *name, long long *out)
{
	char v[64], *end;
	header_get(header, name, v, sizeof(v));
	errno = 0;
	*out = strtoll(v, &end, 10);
	return !v[0] || *end || errno || *out < 0 ? -1 : 0;
}

static int unpack(const char *in, const char *out)
{
	char *text = NULL, *w = NULL, header[HEADER_BYTES + 1], v[64], err[512];
	size_t len;
	struct ktune_err e;
	ktune_quant_format f = { 0, 0, KTUNE_QUANT_SCALE_SHIFT, 0 };
	ktune_dtype dtype;
	long long n, k, words, scales, zeros;
	int64_t want_w, want_s, want_z;
	int rc = EXIT_FAIL;

	if (ktune__read_file(in, MAX_FILE_BYTES, &text, &len, &e))
		return cli_error(EXIT_FAIL, "%s", e.msg);
	if (len < HEADER_BYTES || memchr(text, '\0', HEADER_BYTES) == NULL) {
		cli_error(EXIT_FAIL, "'%s' is not a packed weight: no %d-byte header", in, HEADER_BYTES);
		goto out;
	}
	memcpy(header, text, HEADER_BYTES);
	header[HEADER_BYTES] = '\0';
	if (strncmp(header, "ktune-quant 1\n", 14)) {
		cli_error(EXIT_FAIL, "'%s' is not a packed weight of format 1 (no 'ktune-quant 1' line)", in);
		goto out;
	}
	header_get(header, "dtype", v, sizeof(v));
	if (ktune__dtype_parse(v, &dtype) || (dtype != KTUNE_F16 && dtype != KTUNE_BF16)) {
		cli_error(EXIT_FAIL, "'%s': dtype '%s' is not f16 or bf16", in, v);
		goto out;
	}
	header_get(header, "group", v, sizeof(v));
	if (parse_group(v, &f.group_size)) {
		cli_error(EXIT_FAIL, "'%s': group '%s' is not one of 32, 64, 128, chan", in, v);
		goto out;
	}
	header_get(header, "mode", v, sizeof(v));
	if (parse_mode(v, &f.mode)) {
		cli_error(EXIT_FAIL, "'%s': mode '%s' is not one of scale_shift, scale, shift, fma", in, v);
		goto out;
	}
	header_get(header, "zero", v, sizeof(v));
	if (strcmp(v, "group") && strcmp(v, "scalar")) {
		cli_error(EXIT_FAIL, "'%s': zero '%s' is not group or scalar", in, v);
		goto out;
	}
	f.zero_scalar = !strcmp(v, "scalar");
	long long bits;
	if (header_long(header, "bits", &bits) || header_long(header, "n", &n) || header_long(header, "k", &k) ||
	    header_long(header, "words", &words) || header_long(header, "scales", &scales) ||
	    header_long(header, "zeros", &zeros) || bits > 8) {
		cli_error(EXIT_FAIL, "'%s': a line of bits, n, k, words, scales, zeros is missing or not a count", in);
		goto out;
	}
	f.bits = (int)bits;
	if (ktune_quant_sizes(&f, n, k, &want_w, &want_s, &want_z, err, sizeof(err))) {
		cli_error(EXIT_FAIL, "'%s': %s", in, err);
		goto out;
	}
	if (words != want_w || scales != want_s || zeros != want_z ||
	    len != HEADER_BYTES + (size_t)words * 4 + (size_t)(scales + zeros) * 2) {
		cli_error(EXIT_FAIL, "'%s': %zu bytes of words %lld, scales %lld, zeros %lld; the format needs %lld, %lld, "
			  "%lld (%lld bytes)", in, len, words, scales, zeros, (long long)want_w, (long long)want_s,
			  (long long)want_z, (long long)(HEADER_BYTES + want_w * 4 + (want_s + want_z) * 2));
		goto out;
	}
	size_t bytes = (size_t)n * (size_t)k * 2;
	if (!(w = malloc(bytes ? bytes : 1))) {
		cli_error(EXIT_FAIL, "out of memory for %zu bytes", bytes);
		goto out;
	}
	const char *wq = text + HEADER_BYTES, *s = wq + words * 4, *z = s + scales * 2;
	/* the words start 16-byte aligned in the buffer (read_file's malloc, + 256) */
	int st = ktune_quant_unpack(&f, n, k, (const uint32_t *)(const void *)wq, scales ? s : NULL, zeros ? z : NULL,
				    dtype, w, k);
	if (st) {
		cli_error(EXIT_FAIL, "cannot unpack '%s': %s", in, ktune_strerror(st));
		goto out;
	}
	rc = write_out(out, w, bytes);
	if (!rc)
		fprintf(stderr, "unpacked [%lld, %lld] %s into %s\n", n, k, ktune__dtype_name(dtype), out);
out:
	free(text);
	free(w);
	return rc;
}

/* ------------------------------------------------------------ the command */

int cmd_pack(int argc, char **argv, struct cli *cli)
{
	static const struct option opts[] = {
		CLI_COMMON_OPTIONS,
		{ "dtype", required_argument, NULL, 't' }, { "bits", required_argument, NULL, 'b' },
		{ "group", required_argument, NULL, 'g' }, { "mode", required_argument, NULL, 'M' },
		{ "zero", required_argument, NULL, 'z' }, { "unpack", no_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	ktune_quant_format f = { 4, 128, KTUNE_QUANT_SCALE_SHIFT, 0 };
	ktune_dtype dtype = KTUNE_BF16;
	long n = 0, k = 0, v;
	int opt, do_unpack = 0;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":hn:k:", opts, NULL)) != -1) {
		int r = cli_common("pack", opt, optarg, cli);
		if (r < 0)
			return EXIT_USAGE;
		if (r)
			continue;
		switch (opt) {
		case 't':
			if (ktune__dtype_parse(optarg, &dtype) || (dtype != KTUNE_F16 && dtype != KTUNE_BF16))
				return cli_usage_error("pack", "--dtype '%s' is not f16 or bf16", optarg);
			break;
		case 'b':
			if (cli_parse_int("pack", "--bits", optarg, 1, 8, &v))
				return EXIT_USAGE;
			f.bits = (int)v;
			break;
		case 'g':
			if (parse_group(optarg, &f.group_size))
				return cli_usage_error("pack", "--group '%s' is not one of 32, 64, 128, chan", optarg);
			break;
		case 'M':
			if (parse_mode(optarg, &f.mode))
				return cli_usage_error("pack", "--mode '%s' is not one of scale_shift, scale, shift, fma",
						       optarg);
			break;
		case 'z':
			if (strcmp(optarg, "group") && strcmp(optarg, "scalar"))
				return cli_usage_error("pack", "--zero '%s' is not group or scalar", optarg);
			f.zero_scalar = !strcmp(optarg, "scalar");
			break;
		case 'u':
			do_unpack = 1;
			break;
		case 'n':
			if (cli_parse_int("pack", "-n", optarg, 1, 1L << 34, &n))
				return EXIT_USAGE;
			break;
		case 'k':
			if (cli_parse_int("pack", "-k", optarg, 1, 1L << 34, &k))
				return EXIT_USAGE;
			break;
		default:
			return cli_bad_option("pack", opt, argv);
		}
	}
	if (argc - optind != 2)
		return cli_usage_error("pack", "expected an input and an output file, got %d file%s", argc - optind,
				       argc - optind == 1 ? "" : "s");
	if (do_unpack)
		return unpack(argv[optind], argv[optind + 1]);
	if (!n || !k)
		return cli_usage_error("pack", "-n and -k (the weight's [n, k]) are needed");
	return pack(argv[optind], argv[optind + 1], dtype, n, k, &f);
}
