/*
 * share.c - the export format's fields: the checks every imported entry
 * passes, the deterministic writer, the order of entries, and the policy
 * between two results for the same device and key.  The reader is in
 * share-read.c; both walk the table below, so that what is written is what
 * is read and checked.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/share.h"
#include "ops/op.h"
#include "db/share-fields.h"
#include "ops/gemm.h"
#include "templates.h"

#define OFF(member) offsetof(struct ktune_result, member)
#define CAP(member) sizeof(((struct ktune_result *)0)->member)
#define STR(name, member, check) { name, FIELD_STR, OFF(member), CAP(member), 0, 0, 0, 0, NULL, check }
#define INT(name, member, lo, hi) { name, FIELD_INT, OFF(member), sizeof(int), lo, hi, 0, 0, NULL, NULL }
#define I64(name, member, lo, hi) { name, FIELD_I64, OFF(member), sizeof(int64_t), lo, hi, 0, 0, NULL, NULL }
#define REAL(name, member, lo, open, hi, fmt) { name, FIELD_REAL, OFF(member), sizeof(double), 0, 0, lo, hi, fmt, NULL, open }

static const char *check_name(const char *s);
static const char *check_arch(const char *s);
static const char *check_op(const char *s);
static const char *check_family(const char *s);
static const char *check_hash(const char *s);
static const char *check_protocol(const char *s);
static const char *check_version(const char *s);
static const char *check_time(const char *s);

const struct ktune_share_field ktune__share_fields[] = {
	STR("device.name", device.name, check_name),
	STR("device.arch", device.arch, check_arch),
	INT("device.sms", device.sm_count, 1, 1024),
	STR("key.op", key.op, check_op),
	{ "key.dtype", FIELD_DTYPE, OFF(key.dtype), 0, 0, 0, 0, 0, NULL, NULL },
	{ "key.variant", FIELD_VARIANT, OFF(key.variant), CAP(key.variant), 0, 0, 0, 0, NULL, NULL },
	I64("key.m", key.m, 0, 17179869184L), /* an op's sizes: 0 where it has fewer than three */
	I64("key.n", key.n, 0, 17179869184L),
	I64("key.k", key.k, 0, 17179869184L),
	INT("key.aligned", key.aligned, 0, 1),
	STR("family", family, check_family),
	{ "config", FIELD_CONFIG, OFF(config), CAP(config), 0, 0, 0, 0, NULL, NULL },
	STR("template_hash", template_hash, check_hash),
	STR("protocol", protocol, check_protocol),
	REAL("time_us", time_us, 0, 1, 1e12, "%.6g"),
	REAL("p20_us", p20_us, 0, 0, 1e12, "%.6g"),
	REAL("p80_us", p80_us, 0, 0, 1e12, "%.6g"),
	REAL("tflops", tflops, 0, 0, 1e6, "%.6g"),
	REAL("cublas_us", cublas_us, 0, 0, 1e12, "%.6g"),
	{ "cublas_ratio", FIELD_RATIO, 0, 0, 0, 0, 0, 1e12, "%.4g", NULL },
	REAL("err_fro", err_fro, 0, 0, DBL_MAX, "%.3e"),
	REAL("err_max", err_max, 0, 0, DBL_MAX, "%.3e"),
	INT("candidates", candidates, 0, 100000000L),
	REAL("tune_s", tune_s, 0, 0, 1e9, "%.6g"),
	STR("nvrtc_version", nvrtc_version, check_version),
	STR("driver_version", driver_version, check_version),
	STR("ktune_version", ktune_version, check_version),
	STR("created_at", created_at, check_time),
};

const int ktune__share_nfields = (int)(sizeof(ktune__share_fields) / sizeof(ktune__share_fields[0]));

/* Field checks on text: NULL if fine, else what is wrong. */

static int printable(const char *s)
{
	for (; *s; s++) {
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	}
	return 1;
}

static const char *check_name(const char *s)
{
	if (!*s)
		return "is empty";
	return printable(s) ? NULL : "has a character that is not printable ASCII";
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* sm_XY, sm_XYZ, with an optional 'a' (sm_90a). */
static const char *check_arch(const char *s)
{
	size_t n = 0;

	if (strncmp(s, "sm_", 3) != 0)
		return "is not an arch like sm_90";
	for (s += 3; is_digit(s[n]); n++)
		;
	if (n < 2 || n > 3 || s[0] == '0' || (s[n] && (s[n] != 'a' || s[n + 1])))
		return "is not an arch like sm_90";
	return NULL;
}

static const char *check_op(const char *s)
{
	return ktune__op_find(s) ? NULL : "is not a known op";
}

static const char *check_family(const char *s)
{
	for (int i = 0; ktune__ops[i]; i++)
		if (ktune__op_family_index(ktune__ops[i], s) >= 0)
			return NULL;
	return "is not a known template family";
}

static const char *check_hash(const char *s)
{
	size_t n;

	for (n = 0; (s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'); n++)
		;
	return n == 64 && !s[n] ? NULL : "is not 64 lowercase hex digits";
}

static const char *check_protocol(const char *s)
{
	if (!*s)
		return "is empty";
	return printable(s) ? NULL : "has a character that is not printable ASCII";
}

static const char *check_version(const char *s)
{
	return printable(s) ? NULL : "has a character that is not printable ASCII";
}

/* "2024-05-01T12:00:00Z" */
static const char *check_time(const char *s)
{
	static const char pat[] = "dddd-dd-ddTdd:dd:ddZ";
	size_t i;

	for (i = 0; pat[i]; i++) {
		if (pat[i] == 'd' ? !is_digit(s[i]) : s[i] != pat[i])
			return "is not a UTC time like 2024-05-01T12:00:00Z";
	}
	return s[i] ? "is not a UTC time like 2024-05-01T12:00:00Z" : NULL;
}

/* Copies s into buf for a message, escaping what a terminal would act on. */
const char *ktune__share_quote(const char *s, char *buf, size_t len)
{
	size_t n = 0;

	for (; *s && n + 5 < len; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c > 0x7e || c == '\'' || c == '\\')
			n += (size_t)snprintf(buf + n, len - n, "\\x%02x", c);
		else
			buf[n++] = (char)c;
	}
	if (*s && n + 4 < len) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}

/* Checks one field of r; on failure e says what is wrong. */
static int check_field(const struct ktune_share_field *f, struct ktune_result *r,
		       struct ktune_err *e)
{
	char *p = (char *)r + f->off;
	char q[96];
	const char *why;

	switch (f->kind) {
	case FIELD_STR:
		if (strnlen(p, f->cap) >= f->cap)
			return ktune__fail(e, KTUNE_ERR_PARSE, "longer than %zu characters",
					   f->cap - 1);
		if ((why = f->check(p)) != NULL)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' %s",
					   ktune__share_quote(p, q, sizeof(q)), why);
		return KTUNE_OK;
	case FIELD_INT: {
		long v = *(int *)p;

		return ktune__share_check_long(f, v, e);
	}
	case FIELD_I64: {
		int64_t v = *(int64_t *)p;

		if (v < f->lo || v > f->hi)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%lld' is not in %ld..%ld",
					   (long long)v, f->lo, f->hi);
		return KTUNE_OK;
	}
	case FIELD_REAL:
		return ktune__share_check_real(f, *(double *)p, e);
	case FIELD_DTYPE:
		if (!ktune__dtype_name(r->key.dtype))
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%d' is not one of f16, bf16, f32",
					   (int)r->key.dtype);
		return KTUNE_OK;
	case FIELD_VARIANT:
		if (strnlen(p, f->cap) >= f->cap)
			return ktune__fail(e, KTUNE_ERR_PARSE, "longer than %zu characters", f->cap - 1);
		if (!printable(p))
			return ktune__fail(e, KTUNE_ERR_PARSE,
					   "'%s' has a character that is not printable ASCII",
					   ktune__share_quote(p, q, sizeof(q)));
		return KTUNE_OK; /* its parts are the op's: ktune__share_check checks the whole key */
	case FIELD_CONFIG: {
		struct ktune_config c;
		struct ktune_err sub;

		if (strnlen(p, f->cap) >= f->cap)
			return ktune__fail(e, KTUNE_ERR_PARSE, "longer than %zu characters",
					   f->cap - 1);
		if (!printable(p))
			return ktune__fail(e, KTUNE_ERR_PARSE,
					   "'%s' has a character that is not printable ASCII",
					   ktune__share_quote(p, q, sizeof(q)));
		const struct ktune_op *op = ktune__op_of(&r->key);
		if (op && !ktune__op_is_gemm(op)) {
			if (ktune__op_config_parse(op, r->family, p, &c, &sub) != KTUNE_OK)
				return ktune__fail(e, KTUNE_ERR_PARSE, "%s", sub.msg);
			ktune__op_config_format(op, &c, p, f->cap);
			return KTUNE_OK;
		}
		if (ktune__gemm_config_parse(p, &c, &sub) != KTUNE_OK)
			return ktune__fail(e, KTUNE_ERR_PARSE, "%s", sub.msg);
		if (!ktune__gemm_config_admitted(&c, &sub))
			return ktune__fail(e, KTUNE_ERR_PARSE,
					   "'%s' is not in the template's space: %s", p, sub.msg);
		ktune__gemm_config_format(&c, p, f->cap);
		return KTUNE_OK;
	}
	case FIELD_RATIO:
		return KTUNE_OK; /* derived, never stored */
	}
	return ktune__fail(e, KTUNE_ERR_PARSE, "unknown field kind");
}

int ktune__share_check_long(const struct ktune_share_field *f, long v, struct ktune_err *e)
{
	if (v < f->lo || v > f->hi)
		return ktune__fail(e, KTUNE_ERR_PARSE, "'%ld' is not in %ld..%ld", v, f->lo, f->hi);
	return KTUNE_OK;
}

int ktune__share_check_real(const struct ktune_share_field *f, double v, struct ktune_err *e)
{
	if (!isfinite(v))
		return ktune__fail(e, KTUNE_ERR_PARSE, "'%g' is not a finite number", v);
	if (f->lo_open ? v <= f->dlo : v < f->dlo)
		return ktune__fail(e, KTUNE_ERR_PARSE, "'%g' must be %s %g", v,
				   f->lo_open ? "greater than" : "at least", f->dlo);
	if (v > f->dhi)
		return ktune__fail(e, KTUNE_ERR_PARSE, "'%g' is larger than %g", v, f->dhi);
	return KTUNE_OK;
}

int ktune__share_check(struct ktune_result *r, const char **field, struct ktune_err *e)
{
	int i, ret;

	for (i = 0; i < ktune__share_nfields; i++) {
		ret = check_field(&ktune__share_fields[i], r, e);
		if (ret != KTUNE_OK) {
			if (field)
				*field = ktune__share_fields[i].name;
			return ret;
		}
	}
	/* across fields: the key is whole for its op (the one validator of keys, op.h) */
	struct ktune_err sub;
	if (ktune__op_key_check(&r->key, &sub) != KTUNE_OK) {
		if (field)
			*field = "key";
		return ktune__fail(e, KTUNE_ERR_PARSE, "%s", sub.msg);
	}
	/* the config is of the stated family, and wgmma only serves aligned keys */
	const struct ktune_op *op = ktune__op_of(&r->key);
	if (ktune__op_family_index(op, r->family) < 0) {
		if (field)
			*field = "family";
		return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not a family of %s", r->family, op->name);
	}
	/* a family of one arch (sm_90a) only from a device it runs on */
	int f = ktune__op_family_index(op, r->family);
	if (!ktune__op_is_gemm(op) && !ktune__op_family_runs(op, f, r->device.arch)) {
		if (field)
			*field = "family";
		return ktune__fail(e, KTUNE_ERR_PARSE, "family '%s' runs on %s only, not '%s'", r->family,
				   op->families[f].arch, r->device.arch);
	}
	struct ktune_config c;
	if (ktune__op_is_gemm(op) && ktune__gemm_config_parse(r->config, &c, NULL) == KTUNE_OK) {
		if (ktune__gemm_family_from_name(r->family) != c.family) {
			if (field)
				*field = "config";
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not a config of family '%s'",
					   r->config, r->family);
		}
		if (!ktune__gemm_family_runs(c.family, "sm_90", r->key.aligned)) {
			if (field)
				*field = "config";
			return ktune__fail(e, KTUNE_ERR_PARSE,
					   "a %s config for an unaligned key (aligned: 0)", r->family);
		}
	}
	return KTUNE_OK;
}

void ktune__share_free(struct ktune_share *s)
{
	if (!s)
		return;
	free(s->entries);
	free(s->lines);
	free(s->stale);
	memset(s, 0, sizeof(*s));
}

int ktune__share_add(struct ktune_share *s, const struct ktune_result *r, long line,
		     struct ktune_err *e)
{
	long cap = 16;

	if (s->count >= KTUNE_SHARE_MAX_ENTRIES)
		return ktune__fail(e, KTUNE_ERR_PARSE, "more than %ld entries",
				   KTUNE_SHARE_MAX_ENTRIES);
	/* Capacities are powers of two: grow when count reaches one. */
	while (cap < s->count)
		cap *= 2;
	if (s->count == 0 || s->count == cap) {
		long ncap = s->count == 0 ? 16 : cap * 2;
		struct ktune_result *ne = realloc(s->entries, (size_t)ncap * sizeof(*ne));
		long *nl;
		unsigned char *ns;

		if (!ne)
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		s->entries = ne;
		if (!(nl = realloc(s->lines, (size_t)ncap * sizeof(*nl))))
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		s->lines = nl;
		if (!(ns = realloc(s->stale, (size_t)ncap)))
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		s->stale = ns;
	}
	s->entries[s->count] = *r;
	s->lines[s->count] = line;
	s->stale[s->count] = 0;
	s->count++;
	return KTUNE_OK;
}

int ktune__share_compare(const struct ktune_result *a, const struct ktune_result *b)
{
	const char *da = ktune__dtype_name(a->key.dtype), *db = ktune__dtype_name(b->key.dtype);
	int c;

	if ((c = strcmp(a->device.name, b->device.name)) != 0 ||
	    (c = strcmp(a->device.arch, b->device.arch)) != 0)
		return c;
	if (a->device.sm_count != b->device.sm_count)
		return a->device.sm_count < b->device.sm_count ? -1 : 1;
	if ((c = strcmp(a->key.op, b->key.op)) != 0 ||
	    (c = strcmp(da ? da : "", db ? db : "")) != 0)
		return c;
	if ((c = strcmp(a->key.variant, b->key.variant)) != 0)
		return c;
	if (a->key.m != b->key.m)
		return a->key.m < b->key.m ? -1 : 1;
	if (a->key.n != b->key.n)
		return a->key.n < b->key.n ? -1 : 1;
	if (a->key.k != b->key.k)
		return a->key.k < b->key.k ? -1 : 1;
	if (a->key.aligned != b->key.aligned)
		return a->key.aligned < b->key.aligned ? -1 : 1;
	return 0;
}

/* For the duplicate check: indexes ordered by their entry, then by position. */
static const struct ktune_share *sort_share;

static int compare_index(const void *pa, const void *pb)
{
	long a = *(const long *)pa, b = *(const long *)pb;
	int c = ktune__share_compare(&sort_share->entries[a], &sort_share->entries[b]);

	return c ? c : (a < b ? -1 : a > b);
}

int ktune__share_finish(struct ktune_share *s, const char *file, const char *what,
			struct ktune_err *e)
{
	long *idx, i;
	int ret = KTUNE_OK;

	s->nstale = 0;
	for (i = 0; i < s->count; i++) {
		/* each entry against the current source of its own family */
		s->stale[i] = !ktune__result_fresh(&s->entries[i].key, s->entries[i].family,
						   s->entries[i].template_hash);
		s->nstale += s->stale[i];
	}
	if (s->count < 2)
		return KTUNE_OK;
	idx = malloc((size_t)s->count * sizeof(*idx));
	if (!idx)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (i = 0; i < s->count; i++)
		idx[i] = i;
	sort_share = s; /* qsort has no context argument in C11 */
	qsort(idx, (size_t)s->count, sizeof(*idx), compare_index);
	sort_share = NULL;
	for (i = 1; i < s->count; i++) {
		long a = idx[i - 1], b = idx[i];

		if (ktune__share_compare(&s->entries[a], &s->entries[b]) == 0) {
			ret = ktune__fail(e, KTUNE_ERR_PARSE,
					  "%s:%ld: %s[%ld]: same device and key as %s[%ld] (line %ld)",
					  file, s->lines[b], what, b, what, a, s->lines[a]);
			break;
		}
	}
	free(idx);
	return ret;
}

static int compare_results(const void *a, const void *b)
{
	return ktune__share_compare(a, b);
}

/* A YAML double-quoted string. */
static void put_quoted(FILE *f, const char *s, size_t cap)
{
	size_t i;

	fputc('"', f);
	for (i = 0; i < cap && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void put_field(FILE *f, const struct ktune_share_field *fd, const struct ktune_result *r)
{
	const char *p = (const char *)r + fd->off;

	switch (fd->kind) {
	case FIELD_STR:
	case FIELD_CONFIG:
		put_quoted(f, p, fd->cap);
		break;
	case FIELD_INT:
		fprintf(f, "%d", *(const int *)p);
		break;
	case FIELD_I64:
		fprintf(f, "%lld", (long long)*(const int64_t *)p);
		break;
	case FIELD_REAL:
		fprintf(f, fd->fmt, *(const double *)p);
		break;
	case FIELD_DTYPE:
		put_quoted(f, ktune__dtype_name(r->key.dtype) ? ktune__dtype_name(r->key.dtype) : "?",
			   8);
		break;
	case FIELD_VARIANT:
		put_quoted(f, r->key.variant, sizeof(r->key.variant));
		break;
	case FIELD_RATIO:
		fprintf(f, fd->fmt, r->cublas_us > 0 && r->time_us > 0 ? r->cublas_us / r->time_us : 0.0);
		break;
	}
}

int ktune__share_write(struct ktune_result *rs, long n, char **out, size_t *len,
		       struct ktune_err *e)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f;
	long i;
	int j;

	*out = NULL;
	if (len)
		*len = 0;
	if (n < 0 || (n > 0 && !rs))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to write an export");
	if (n > 1)
		qsort(rs, (size_t)n, sizeof(*rs), compare_results);
	f = open_memstream(&buf, &size);
	if (!f)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	fprintf(f, "# ktune tuning results: 'ktune import FILE' merges them into a database\n"
		   "format: %s\nversion: %d\nktune: ", KTUNE_SHARE_FORMAT, KTUNE_SHARE_VERSION);
	put_quoted(f, ktune_version(), 32);
	fprintf(f, "\nentries:%s\n", n ? "" : " []");
	for (i = 0; i < n; i++) {
		const char *group = NULL;

		for (j = 0; j < ktune__share_nfields; j++) {
			const struct ktune_share_field *fd = &ktune__share_fields[j];
			const char *dot = strchr(fd->name, '.');
			const char *lead = j == 0 ? "  - " : "    ";

			if (dot) {
				size_t glen = (size_t)(dot - fd->name);

				if (!group || strncmp(group, fd->name, glen + 1) != 0) {
					fprintf(f, "%s%.*s:\n", lead, (int)glen, fd->name);
					group = fd->name;
				}
				fprintf(f, "      %s: ", dot + 1);
			} else {
				group = NULL;
				fprintf(f, "%s%s: ", lead, fd->name);
			}
			put_field(f, fd, &rs[i]);
			fputc('\n', f);
		}
	}
	if (fclose(f) != 0 || !buf) {
		free(buf);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	}
	*out = buf;
	if (len)
		*len = size;
	return KTUNE_OK;
}

int ktune__policy_parse(const char *s, enum ktune_policy *out)
{
	if (!strcmp(s, "faster"))
		*out = KTUNE_POLICY_FASTER;
	else if (!strcmp(s, "ours"))
		*out = KTUNE_POLICY_OURS;
	else if (!strcmp(s, "theirs"))
		*out = KTUNE_POLICY_THEIRS;
	else
		return -1;
	return 0;
}

static int same_result(const struct ktune_result *a, const struct ktune_result *b)
{
	return !strcmp(a->config, b->config) && !strcmp(a->template_hash, b->template_hash) &&
	       !strcmp(a->protocol, b->protocol) && a->time_us == b->time_us;
}

int ktune__policy_decide(const struct ktune_result *ours, const struct ktune_result *theirs,
			 enum ktune_policy policy, char *why, size_t len)
{
	if (same_result(ours, theirs)) {
		snprintf(why, len, "the same as ours");
		return 0;
	}
	switch (policy) {
	case KTUNE_POLICY_OURS:
		snprintf(why, len, "policy 'ours'");
		return 0;
	case KTUNE_POLICY_THEIRS:
		snprintf(why, len, "policy 'theirs'");
		return 1;
	case KTUNE_POLICY_FASTER:
		break;
	}
	/*
	 * Freshness is each result's own: its hash against the current source of
	 * its own family (an mma.sync result and a wgmma one never share a hash).
	 */
	int ours_fresh = ktune__result_fresh(&ours->key, ours->family, ours->template_hash);
	int theirs_fresh = ktune__result_fresh(&theirs->key, theirs->family, theirs->template_hash);
	if (!ours_fresh && theirs_fresh) {
		snprintf(why, len, "ours was tuned for an older template");
		return 1;
	}
	if (ours_fresh && !theirs_fresh) {
		snprintf(why, len, "theirs was tuned for an older template");
		return 0;
	}
	if (strcmp(ours->protocol, theirs->protocol) != 0) {
		snprintf(why, len, "theirs measured with another protocol: kept ours");
		return 0;
	}
	if (theirs->time_us < ours->time_us) {
		snprintf(why, len, "theirs is faster: %.6g us vs %.6g us", theirs->time_us,
			 ours->time_us);
		return 1;
	}
	snprintf(why, len, "ours is %s: %.6g us vs %.6g us",
		 ours->time_us == theirs->time_us ? "as fast" : "faster", ours->time_us,
		 theirs->time_us);
	return 0;
}
