/*
 * share-read.c - the strict reader of export files, and of standalone
 * SQLite exports.
 *
 * The YAML is read event by event (libyaml's parser, not its document
 * loader), so that memory stays one entry's worth beyond the results
 * however the file is shaped: a list nested a million deep or a million
 * tiny scalars stop at the first event that the format does not allow.
 * Every field is checked by ktune__share_check, the same checks a database
 * row passes.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <yaml.h>

#include "db/db-internal.h"
#include "db/share.h"
#include "db/share-fields.h"
#include "yaml-read.h"

struct reader {
	yaml_parser_t p;
	yaml_event_t ev;
	int have;
	const char *text;
	size_t len;
	const char *file;
	struct ktune_err *e;
	long version; /* the file's format version */
};

static unsigned long line_of(const struct reader *r)
{
	return (unsigned long)r->ev.start_mark.line + 1;
}

static int bad(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "file:line: message" at the current event. */
static int bad(struct reader *r, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return ktune__fail(r->e, KTUNE_ERR_PARSE, "%s:%lu: %s", r->file, line_of(r), buf);
}

static int parser_failed(struct reader *r)
{
	unsigned long line = (unsigned long)r->p.problem_mark.line + 1;
	size_t i;

	if (r->p.error == YAML_MEMORY_ERROR)
		return ktune__fail(r->e, KTUNE_ERR_NOMEM, "%s: out of memory", r->file);
	if (r->p.error == YAML_READER_ERROR) {
		/* the reader reports a byte offset, not a line */
		for (line = 1, i = 0; i < r->p.problem_offset && i < r->len; i++)
			line += r->text[i] == '\n';
	}
	return ktune__fail(r->e, KTUNE_ERR_PARSE, "%s:%lu: %s", r->file, line,
			   r->p.problem ? r->p.problem : "malformed YAML");
}

/* Moves to the next event; aliases and tags are refused. */
static int next(struct reader *r)
{
	if (r->have) {
		yaml_event_delete(&r->ev);
		r->have = 0;
	}
	if (!yaml_parser_parse(&r->p, &r->ev))
		return parser_failed(r);
	r->have = 1;
	switch (r->ev.type) {
	case YAML_ALIAS_EVENT:
		return bad(r, "aliases are not supported");
	case YAML_SCALAR_EVENT:
		if (r->ev.data.scalar.tag)
			return bad(r, "tags are not supported");
		break;
	case YAML_SEQUENCE_START_EVENT:
		if (r->ev.data.sequence_start.tag)
			return bad(r, "tags are not supported");
		break;
	case YAML_MAPPING_START_EVENT:
		if (r->ev.data.mapping_start.tag)
			return bad(r, "tags are not supported");
		break;
	default:
		break;
	}
	return 0;
}

/* The current scalar's text, or NULL if it is not a scalar or holds a NUL byte. */
static const char *scalar(const struct reader *r)
{
	const char *s;

	if (r->ev.type != YAML_SCALAR_EVENT)
		return NULL;
	s = (const char *)r->ev.data.scalar.value;
	return strlen(s) == r->ev.data.scalar.length ? s : NULL;
}

static const char *skip_digits(const char *p)
{
	while (isdigit((unsigned char)*p))
		p++;
	return p;
}

/* A decimal number, as the writer prints one: [-]digits[.digits][e[+-]digits]. */
static int parse_real(const char *s, double *out)
{
	const char *p = s;
	char *end;

	if (*p == '-' || *p == '+')
		p++;
	if (!isdigit((unsigned char)*p))
		return -1;
	p = skip_digits(p);
	if (*p == '.')
		p = skip_digits(p + 1);
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '-' || *p == '+')
			p++;
		if (!isdigit((unsigned char)*p))
			return -1;
		p = skip_digits(p);
	}
	if (*p)
		return -1;
	*out = strtod(s, &end);
	return 0; /* an overflow gives inf, which the range check refuses */
}

/*
 * Sets one field of res from its text, as a YAML scalar or an SQLite value
 * holds it: the one conversion and range check of an imported field,
 * whichever format it came in.  On failure e says what is wrong, without
 * where ("'abc' is not an integer").
 */
static int set_field(const struct ktune_share_field *f, struct ktune_result *res, const char *s,
		     struct ktune_err *e)
{
	char *p = (char *)res + f->off;
	char q[96];
	double d;
	long v;
	int rc;

	switch (f->kind) {
	case FIELD_STR:
	case FIELD_CONFIG:
	case FIELD_VARIANT:
		if (strlen(s) >= f->cap)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is longer than %zu characters",
					   ktune__share_quote(s, q, 40), f->cap - 1);
		memset(p, 0, f->cap);
		memcpy(p, s, strlen(s));
		return KTUNE_OK;
	case FIELD_INT:
	case FIELD_I64:
		if ((rc = ktune__yaml_long(s, &v)) == -1)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not an integer",
					   ktune__share_quote(s, q, 64));
		if (rc || v < f->lo || v > f->hi)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not in %ld..%ld",
					   ktune__share_quote(s, q, 64), f->lo, f->hi);
		if (f->kind == FIELD_INT)
			*(int *)p = (int)v;
		else
			*(int64_t *)p = v;
		return KTUNE_OK;
	case FIELD_REAL:
	case FIELD_RATIO:
		if (parse_real(s, &d) != 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not a number",
					   ktune__share_quote(s, q, 64));
		if ((rc = ktune__share_check_real(f, d, e)) != KTUNE_OK)
			return rc;
		if (f->kind == FIELD_REAL)
			*(double *)p = d;
		return KTUNE_OK;
	case FIELD_DTYPE:
		if (ktune__dtype_parse(s, &res->key.dtype) != 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not one of f16, bf16, f32",
					   ktune__share_quote(s, q, 64));
		return KTUNE_OK;
	}
	return ktune__fail(e, KTUNE_ERR_PARSE, "unknown field kind");
}

/* Reads the value of one field (the current event) into r. */
static int read_field(struct reader *rd, const struct ktune_share_field *f,
		      struct ktune_result *res, const char *path)
{
	const char *s = scalar(rd);
	struct ktune_err sub;

	if (!s)
		return bad(rd, "%s: expected %s", path,
			   f->kind == FIELD_STR || f->kind == FIELD_CONFIG ? "a string"
										  : "a scalar value");
	if (set_field(f, res, s, &sub) != KTUNE_OK)
		return bad(rd, "%s: %s", path, sub.msg);
	return 0;
}

/*
 * Reads a mapping (the current event starts it) whose keys are the fields
 * named "<prefix>name"; prefix is "" for an entry, "key." for its key.
 * lines[i] gets the line of field i.
 */
static int read_mapping(struct reader *rd, const char *prefix, struct ktune_result *res,
			const char *path, unsigned long *lines)
{
	size_t plen = strlen(prefix);
	unsigned long start = line_of(rd);
	char sub[160], q[96];
	int i, rc;

	if (rd->ev.type != YAML_MAPPING_START_EVENT)
		return bad(rd, "%s: expected a mapping", path);
	for (;;) {
		const char *key;
		int found = -1, group = 0;

		if ((rc = next(rd)))
			return rc;
		if (rd->ev.type == YAML_MAPPING_END_EVENT)
			break;
		if (!(key = scalar(rd)))
			return bad(rd, "%s: expected a key", path);
		if (rd->version == 1 && !strcmp(prefix, "key.") && !strcmp(key, "layout"))
			key = "variant"; /* format 1 wrote a GEMM's variant as its layout */
		for (i = 0; !strchr(key, '.') && i < ktune__share_nfields; i++) {
			const char *name = ktune__share_fields[i].name;
			size_t klen = strlen(key);

			if (strncmp(name, prefix, plen) != 0 || strncmp(name + plen, key, klen) != 0)
				continue;
			if (name[plen + klen] == '\0') {
				found = i;
				break;
			}
			if (name[plen + klen] == '.' && !strchr(name + plen + klen + 1, '.')) {
				found = i;
				group = 1;
				break;
			}
		}
		if (found < 0)
			return bad(rd, "%s: unknown key '%s'", path, ktune__share_quote(key, q, 64));
		if (lines[found])
			return bad(rd, "%s: duplicate key '%s'", path, key);
		snprintf(sub, sizeof(sub), "%s.%s", path, key);
		if (group) {
			char nested[32];

			snprintf(nested, sizeof(nested), "%s%s.", prefix, key);
			for (i = 0; i < ktune__share_nfields; i++) {
				if (!strncmp(ktune__share_fields[i].name, nested, strlen(nested)) &&
				    lines[i])
					return bad(rd, "%s: duplicate key '%s'", path, key);
			}
			if ((rc = next(rd)) || (rc = read_mapping(rd, nested, res, sub, lines)))
				return rc;
			continue;
		}
		lines[found] = line_of(rd);
		if ((rc = next(rd)) || (rc = read_field(rd, &ktune__share_fields[found], res, sub)))
			return rc;
	}
	/* Every field of this mapping is required except the ratio. */
	for (i = 0; i < ktune__share_nfields; i++) {
		const struct ktune_share_field *f = &ktune__share_fields[i];
		const char *rest = f->name + plen;

		if (strncmp(f->name, prefix, plen) != 0 || lines[i] || f->kind == FIELD_RATIO)
			continue;
		if (strchr(rest, '.')) {
			/* a group: missing if none of its fields was seen */
			size_t glen = (size_t)(strchr(rest, '.') - rest);
			int j, seen = 0;

			for (j = 0; j < ktune__share_nfields; j++)
				seen |= !strncmp(ktune__share_fields[j].name, f->name, plen + glen + 1) &&
					lines[j];
			if (!seen)
				return ktune__fail(rd->e, KTUNE_ERR_PARSE, "%s:%lu: %s: missing '%.*s'",
						   rd->file, start, path, (int)glen, rest);
			continue;
		}
		return ktune__fail(rd->e, KTUNE_ERR_PARSE, "%s:%lu: %s: missing '%s'", rd->file,
				   start, path, rest);
	}
	return 0;
}

static int read_entry(struct reader *rd, long index, struct ktune_share *out)
{
	unsigned long lines[64] = { 0 };
	unsigned long start = line_of(rd);
	struct ktune_result res;
	struct ktune_err sub;
	const char *field = NULL;
	char path[48];
	int i, rc;

	memset(&res, 0, sizeof(res));
	snprintf(path, sizeof(path), "entries[%ld]", index);
	if (index >= KTUNE_SHARE_MAX_ENTRIES)
		return bad(rd, "entries: more than %ld entries", KTUNE_SHARE_MAX_ENTRIES);
	if ((rc = read_mapping(rd, "", &res, path, lines)))
		return rc;
	if (ktune__share_check(&res, &field, &sub) != KTUNE_OK) {
		for (i = 0; i < ktune__share_nfields && strcmp(ktune__share_fields[i].name, field); i++)
			;
		return ktune__fail(rd->e, KTUNE_ERR_PARSE, "%s:%lu: %s.%s: %s", rd->file,
				   i < ktune__share_nfields && lines[i] ? lines[i] : start, path, field,
				   sub.msg);
	}
	if ((rc = ktune__share_add(out, &res, (long)start, &sub)))
		return ktune__fail(rd->e, rc, "%s:%lu: %s: %s", rd->file, start, path, sub.msg);
	return 0;
}

static int read_entries(struct reader *rd, struct ktune_share *out)
{
	long i;
	int rc;

	if (rd->ev.type != YAML_SEQUENCE_START_EVENT)
		return bad(rd, "entries: expected a list");
	for (i = 0;; i++) {
		if ((rc = next(rd)))
			return rc;
		if (rd->ev.type == YAML_SEQUENCE_END_EVENT)
			return 0;
		if ((rc = read_entry(rd, i, out)))
			return rc;
	}
}

static int read_version(struct reader *rd)
{
	const char *s = scalar(rd);
	char q[96];
	long v;

	if (!s)
		return bad(rd, "version: expected an integer");
	if (ktune__yaml_long(s, &v) != 0 || v < 1)
		return bad(rd, "version: '%s' is not a format version", ktune__share_quote(s, q, 64));
	if (v > KTUNE_SHARE_VERSION)
		return bad(rd, "version: was written by a newer ktune (format %ld, this ktune reads %d)",
			   v, KTUNE_SHARE_VERSION);
	rd->version = v;
	return 0;
}

static int read_document(struct reader *rd, struct ktune_share *out)
{
	int have_format = 0, have_version = 0, have_ktune = 0, have_entries = 0, rc;
	unsigned long start;
	char q[96];

	if ((rc = next(rd)))
		return rc;
	if ((rc = next(rd)))
		return rc;
	if (rd->ev.type == YAML_STREAM_END_EVENT)
		return ktune__fail(rd->e, KTUNE_ERR_PARSE, "%s: empty file: not a ktune export",
				   rd->file);
	if ((rc = next(rd)))
		return rc;
	start = line_of(rd);
	if (rd->ev.type != YAML_MAPPING_START_EVENT)
		return bad(rd, "not a ktune export: expected a mapping with format, version, "
			   "ktune and entries");
	for (;;) {
		const char *key, *s;

		if ((rc = next(rd)))
			return rc;
		if (rd->ev.type == YAML_MAPPING_END_EVENT)
			break;
		if (!(key = scalar(rd)))
			return bad(rd, "expected a key");
		if (!strcmp(key, "format")) {
			if (have_format++)
				return bad(rd, "duplicate key 'format'");
			if ((rc = next(rd)))
				return rc;
			if (!(s = scalar(rd)) || strcmp(s, KTUNE_SHARE_FORMAT) != 0)
				return bad(rd, "format: '%s' is not '%s'",
					   s ? ktune__share_quote(s, q, 64) : "", KTUNE_SHARE_FORMAT);
		} else if (!strcmp(key, "version")) {
			if (have_version++)
				return bad(rd, "duplicate key 'version'");
			if ((rc = next(rd)) || (rc = read_version(rd)))
				return rc;
		} else if (!strcmp(key, "ktune")) {
			if (have_ktune++)
				return bad(rd, "duplicate key 'ktune'");
			if ((rc = next(rd)))
				return rc;
			if (!(s = scalar(rd)) || strlen(s) > 31)
				return bad(rd, "ktune: expected a version of up to 31 characters");
		} else if (!strcmp(key, "entries")) {
			if (have_entries++)
				return bad(rd, "duplicate key 'entries'");
			if (!have_format || !have_version)
				return bad(rd, "entries: 'format' and 'version' must come first");
			if ((rc = next(rd)) || (rc = read_entries(rd, out)))
				return rc;
		} else {
			return bad(rd, "unknown key '%s'", ktune__share_quote(key, q, 64));
		}
	}
	if (!have_format || !have_version || !have_ktune || !have_entries)
		return ktune__fail(rd->e, KTUNE_ERR_PARSE, "%s:%lu: missing '%s'", rd->file, start,
				   !have_format ? "format" : !have_version ? "version"
					   : !have_ktune ? "ktune" : "entries");
	if ((rc = next(rd)))
		return rc;
	if ((rc = next(rd)))
		return rc;
	if (rd->ev.type != YAML_STREAM_END_EVENT)
		return bad(rd, "more than one document");
	return 0;
}

int ktune__share_parse(const char *text, size_t len, const char *file, struct ktune_share *out,
		       struct ktune_err *e)
{
	struct reader rd;
	int rc;

	memset(out, 0, sizeof(*out));
	memset(&rd, 0, sizeof(rd));
	if (len > KTUNE_SHARE_MAX_BYTES)
		return ktune__fail(e, KTUNE_ERR_PARSE, "%s: %zu bytes, larger than the limit of %zu",
				   file, len, KTUNE_SHARE_MAX_BYTES);
	if (ktune__share_is_sqlite(text, len))
		return ktune__fail(e, KTUNE_ERR_PARSE, "%s: is an SQLite file, not YAML", file);
	if (!yaml_parser_initialize(&rd.p))
		return ktune__fail(e, KTUNE_ERR_NOMEM, "%s: out of memory", file);
	yaml_parser_set_input_string(&rd.p, (const unsigned char *)text, len);
	rd.text = text;
	rd.len = len;
	rd.file = file;
	rd.e = e;
	rc = read_document(&rd, out);
	if (!rc)
		rc = ktune__share_finish(out, file, "entries", e);
	if (rd.have)
		yaml_event_delete(&rd.ev);
	yaml_parser_delete(&rd.p);
	if (rc)
		ktune__share_free(out);
	return rc;
}

int ktune__share_is_sqlite(const void *data, size_t len)
{
	return len >= 16 && memcmp(data, "SQLite format 3", 16) == 0;
}

/*
 * A standalone SQLite export: where each field of an entry is in the
 * schema ktune writes (db.c).  The ratio is derived, never stored.
 */
static const struct {
	const char *field, *column;
} sqlite_columns[] = {
	{ "device.name", "d.name" }, { "device.arch", "d.arch" }, { "device.sms", "d.sm_count" },
	{ "key.op", "r.op" }, { "key.dtype", "r.dtype" }, { "key.variant", "r.layout" },
	{ "key.m", "r.m" }, { "key.n", "r.n" }, { "key.k", "r.k" }, { "key.aligned", "r.aligned" },
	{ "family", "r.family" }, { "config", "r.config" }, { "template_hash", "r.template_hash" },
	{ "protocol", "r.protocol" }, { "time_us", "r.time_us" }, { "p20_us", "r.p20_us" },
	{ "p80_us", "r.p80_us" }, { "tflops", "r.tflops" }, { "cublas_us", "r.cublas_us" },
	{ "err_fro", "r.err_fro" }, { "err_max", "r.err_max" }, { "candidates", "r.candidates" },
	{ "tune_s", "r.tune_s" }, { "nvrtc_version", "r.nvrtc_version" },
	{ "driver_version", "r.driver_version" }, { "ktune_version", "r.ktune_version" },
	{ "created_at", "r.created_at" },
};
#define NCOLUMNS ((int)(sizeof(sqlite_columns) / sizeof(sqlite_columns[0])))

/*
 * One SQLite value into a field, by the field's type: an integer field
 * takes an INTEGER only (never a REAL or a text SQLite might convert), a
 * number field an INTEGER or a REAL, a text field a TEXT without a NUL
 * byte.  Then set_field checks it exactly as it checks a YAML scalar.
 */
static int set_column(const struct ktune_share_field *f, struct ktune_result *res,
		      sqlite3_stmt *st, int col, struct ktune_err *e)
{
	int type = sqlite3_column_type(st, col);
	char num[64], q[96];
	const char *text;

	switch (type) {
	case SQLITE_NULL:
		return ktune__fail(e, KTUNE_ERR_PARSE, "is NULL");
	case SQLITE_BLOB:
		return ktune__fail(e, KTUNE_ERR_PARSE, "is a blob of %d bytes, not %s",
				   sqlite3_column_bytes(st, col),
				   f->kind == FIELD_INT || f->kind == FIELD_I64 ? "an integer"
				   : f->kind == FIELD_REAL ? "a number" : "text");
	case SQLITE_INTEGER:
		snprintf(num, sizeof(num), "%lld", (long long)sqlite3_column_int64(st, col));
		if (f->kind != FIELD_INT && f->kind != FIELD_I64 && f->kind != FIELD_REAL)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is an integer, not text", num);
		return set_field(f, res, num, e);
	case SQLITE_FLOAT:
		/* the shortest text that reads back as the same double */
		snprintf(num, sizeof(num), "%.15g", sqlite3_column_double(st, col));
		if (strtod(num, NULL) != sqlite3_column_double(st, col))
			snprintf(num, sizeof(num), "%.17g", sqlite3_column_double(st, col));
		if (f->kind == FIELD_INT || f->kind == FIELD_I64)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is not an integer", num);
		if (f->kind != FIELD_REAL)
			return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' is a number, not text", num);
		return set_field(f, res, num, e);
	}
	text = (const char *)sqlite3_column_text(st, col);
	if (!text)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	if (strlen(text) != (size_t)sqlite3_column_bytes(st, col))
		return ktune__fail(e, KTUNE_ERR_PARSE, "'%s' holds a NUL byte",
				   ktune__share_quote(text, q, 64));
	return set_field(f, res, text, e);
}

/* Reads the results of an untrusted SQLite export, each row as strictly as a YAML entry. */
static int load_rows(sqlite3 *h, const char *path, struct ktune_share *out, struct ktune_err *e)
{
	const struct ktune_share_field *fields[NCOLUMNS];
	struct ktune_result res;
	struct ktune_err sub;
	sqlite3_stmt *st = NULL;
	char sql[1024];
	size_t used;
	int i, j, rc, ret = KTUNE_OK;

	used = (size_t)snprintf(sql, sizeof(sql), "SELECT r.rowid");
	for (i = 0; i < NCOLUMNS; i++) {
		for (j = 0; j < ktune__share_nfields &&
			    strcmp(ktune__share_fields[j].name, sqlite_columns[i].field);
		     j++)
			;
		if (j == ktune__share_nfields)
			return ktune__fail(e, KTUNE_ERR_INVALID, "no field '%s'", sqlite_columns[i].field);
		fields[i] = &ktune__share_fields[j];
		used += (size_t)snprintf(sql + used, sizeof(sql) - used, ", %s",
					 sqlite_columns[i].column);
	}
	snprintf(sql + used, sizeof(sql) - used,
		 " FROM results r LEFT JOIN devices d ON d.id = r.device_id ORDER BY r.rowid");
	if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK)
		return ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", path,
				   sqlite3_errmsg(h));
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		long row = (long)sqlite3_column_int64(st, 0);
		const char *field = NULL;

		memset(&res, 0, sizeof(res));
		for (i = 0; i < NCOLUMNS && !field; i++) {
			if (set_column(fields[i], &res, st, i + 1, &sub) != KTUNE_OK)
				field = fields[i]->name;
		}
		if (!field && ktune__share_check(&res, &field, &sub) != KTUNE_OK && !field)
			field = "entry";
		if (field) {
			ret = ktune__fail(e, KTUNE_ERR_PARSE, "%s: row %ld: %s: %s", path, row, field,
					  sub.msg);
			goto out;
		}
		if ((ret = ktune__share_add(out, &res, row, &sub)) != KTUNE_OK) {
			ret = ktune__fail(e, ret, "%s: %s", path, sub.msg);
			goto out;
		}
	}
	if (rc != SQLITE_DONE)
		ret = ktune__fail(e, KTUNE_ERR_DB, "cannot read database '%s': %s", path,
				  sqlite3_errmsg(h));
out:
	sqlite3_finalize(st);
	return ret;
}

int ktune__share_load(const char *path, struct ktune_share *out, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	char *text = NULL;
	size_t len = 0;
	long count = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = ktune__read_file(path, KTUNE_SHARE_MAX_BYTES, &text, &len, e)))
		return rc;
	if (!ktune__share_is_sqlite(text, len)) {
		rc = ktune__share_parse(text, len, path, out, e);
		free(text);
		return rc;
	}
	free(text);
	/* opened read-only and defensively, its schema compared with ours before a row is read */
	if ((rc = ktune__db_open_readonly(path, &db, e)) ||
	    (rc = ktune__db_count(db, &count, NULL, e)))
		goto out;
	if (count > KTUNE_SHARE_MAX_ENTRIES) {
		rc = ktune__fail(e, KTUNE_ERR_PARSE, "%s: %ld results, more than %ld", path, count,
				 KTUNE_SHARE_MAX_ENTRIES);
		goto out;
	}
	if ((rc = load_rows(db->h, path, out, e)))
		goto out;
	rc = ktune__share_finish(out, path, "row", e);
out:
	ktune__db_close(db);
	if (rc)
		ktune__share_free(out);
	return rc;
}
