/*
 * fuzz-import.c - libFuzzer harness for the importer: the bytes are an
 * export file, YAML or a standalone SQLite export (told apart by the SQLite
 * header, as 'ktune import' tells them).  The importer must accept or refuse
 * them without a crash, a leak, undefined behaviour or a stall (a hostile
 * schema is refused unread), and an accepted file must come back identical
 * through the YAML writer and reader.
 *
 * An input that starts with "--sql\n" is SQL instead: it is run on a valid
 * standalone export of two entries (through a trusted connection, ATTACH
 * and VACUUM refused, long statements cut off), and the file it leaves is
 * imported.  So the fuzzer reaches the row checks and the schema check with
 * well-formed databases: values of every type and size, altered tables,
 * triggers, views, generated columns.  Build and run with
 * tests/fuzz/run-fuzz.sh.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common.h"
#include "db/share.h"
#include "ops/gemm.h"
#include "ops/op.h"
#include "templates.h"

/* Stubs for what the ops' public functions call: the harness links no CUDA. */
int ktune__op_run(void);
int ktune__op_invalid(void);
int ktune__op_run(void)
{
	abort();
}
int ktune__op_invalid(void)
{
	abort();
}

static char path[64];

static void put_file(const void *data, size_t size)
{
	FILE *f;

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/fuzz-import-%d.sqlite", (int)getpid());
	if (!(f = fopen(path, "wb")) || fwrite(data, 1, size, f) != size || fclose(f) != 0)
		abort();
}

/* An SQLite export is read from a file, as 'ktune import' reads it. */
static int load_sqlite(const uint8_t *data, size_t size, struct ktune_share *s,
		       struct ktune_err *e)
{
	int rc;

	put_file(data, size);
	rc = ktune__share_load(path, s, e);
	unlink(path);
	return rc;
}

/* A valid standalone export of two GEMM entries, made once. */
static int base_export(void)
{
	static int made;
	struct ktune_result rs[2];
	struct ktune_config c;
	struct ktune_err e;

	if (made)
		return 0;
	memset(rs, 0, sizeof(rs));
	for (int i = 0; i < 2; i++) {
		struct ktune_result *r = &rs[i];

		snprintf(r->device.name, sizeof(r->device.name), "NVIDIA H100 80GB HBM3");
		snprintf(r->device.arch, sizeof(r->device.arch), "sm_90");
		r->device.sm_count = 132;
		snprintf(r->key.op, sizeof(r->key.op), "gemm");
		r->key.dtype = i ? KTUNE_BF16 : KTUNE_F16;
		snprintf(r->key.variant, sizeof(r->key.variant), "nt");
		r->key.m = 16;
		r->key.n = r->key.k = 4096;
		r->key.aligned = 1;
		snprintf(r->family, sizeof(r->family), "gemm");
		c = ktune__gemm_default_config(&r->key, 132);
		ktune__gemm_config_format(&c, r->config, sizeof(r->config));
		snprintf(r->template_hash, sizeof(r->template_hash), "%s",
			 ktune__template_hash(KTUNE_GEMM_SOURCE));
		snprintf(r->protocol, sizeof(r->protocol), "events");
		r->time_us = r->p20_us = r->p80_us = 12.5;
		r->tflops = 43.5;
		r->err_fro = 1e-4;
		r->err_max = 5e-3;
		r->candidates = 285;
		snprintf(r->created_at, sizeof(r->created_at), "2024-05-01T12:00:00Z");
	}
	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/fuzz-import-%d.sqlite", (int)getpid());
	unlink(path);
	if (ktune__db_write_standalone(path, rs, 2, 1, &e) != KTUNE_OK)
		abort();
	made = 1;
	return 0;
}

/* Only what edits the one file: no ATTACH (another file), no VACUUM INTO. */
static int authorize(void *arg, int action, const char *a, const char *b, const char *c,
		     const char *d)
{
	(void)arg, (void)a, (void)b, (void)c, (void)d;
	return action == SQLITE_ATTACH || action == SQLITE_DETACH ? SQLITE_DENY : SQLITE_OK;
}

static int progress(void *arg)
{
	return ++*(int *)arg > 1000; /* about 1M steps: the fuzzer's SQL is cut off */
}

/* Runs the SQL on a copy of the base export, then imports what it left. */
static int load_sql(const uint8_t *data, size_t size, struct ktune_share *s, struct ktune_err *e)
{
	static unsigned char *base;
	static size_t base_len;
	char *sql = malloc(size + 1);
	sqlite3 *h = NULL;
	int steps = 0, rc;

	if (!sql)
		abort();
	memcpy(sql, data, size);
	sql[size] = '\0';
	for (size_t i = 0; i < size; i++)
		sql[i] = sql[i] ? sql[i] : ' ';
	for (char *p = sql; *p; p++) {
		if (!strncasecmp(p, "vacuum", 6) || !strncasecmp(p, "attach", 6) ||
		    !strncasecmp(p, "load_extension", 14)) {
			free(sql);
			return KTUNE_ERR_PARSE;
		}
	}
	if (!base) {
		char *text;
		struct ktune_err be;

		base_export();
		if (ktune__read_file(path, 1 << 20, &text, &base_len, &be) != KTUNE_OK)
			abort();
		base = (unsigned char *)text;
	}
	put_file(base, base_len);
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
		abort();
	sqlite3_set_authorizer(h, authorize, NULL);
	sqlite3_progress_handler(h, 1000, progress, &steps);
	sqlite3_limit(h, SQLITE_LIMIT_LENGTH, 100000);
	sqlite3_limit(h, SQLITE_LIMIT_ATTACHED, 0);
	sqlite3_exec(h, "PRAGMA journal_mode = MEMORY", NULL, NULL, NULL);
	sqlite3_exec(h, sql, NULL, NULL, NULL); /* whatever it managed is what is imported */
	sqlite3_close(h);
	free(sql);
	rc = ktune__share_load(path, s, e);
	unlink(path);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ktune_share s, again;
	struct ktune_err e;
	char *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;
	int rc;

	if (size >= 6 && !memcmp(data, "--sql\n", 6))
		rc = load_sql(data + 6, size - 6, &s, &e);
	else if (ktune__share_is_sqlite(data, size))
		rc = load_sqlite(data, size, &s, &e);
	else
		rc = ktune__share_parse((const char *)data, size, "fuzz.yaml", &s, &e);
	if (rc != KTUNE_OK)
		return 0;
	/* What was accepted writes out and reads back to the same bytes. */
	if (ktune__share_write(s.entries, s.count, &text, &len, &e) != KTUNE_OK)
		abort();
	if (ktune__share_parse(text, len, "again.yaml", &again, &e) != KTUNE_OK)
		abort();
	if (again.count != s.count ||
	    ktune__share_write(again.entries, again.count, &text2, &len2, &e) != KTUNE_OK ||
	    len != len2 || memcmp(text, text2, len) != 0)
		abort();
	free(text);
	free(text2);
	ktune__share_free(&again);
	ktune__share_free(&s);
	return 0;
}
