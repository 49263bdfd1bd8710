/*
 * share.h - tuning results shared between machines: the export file (a
 * versioned YAML document, written deterministically so that it diffs well
 * in git), its strict reader, the checks every imported entry passes, and
 * the policy that decides between two results for the same device and key.
 *
 * Imported files are untrusted, YAML and SQLite alike (docs/security.md).
 * An entry carries parameters, never code: every field is converted from its
 * text by one function whichever format it came in (an SQLite value must be
 * of its field's type: no REAL for an integer, no NUL in a text) and checked
 * for type and range, the config must be admitted by the template's declared
 * space, and only known template families pass.  A file with any malformed
 * entry is refused whole with
 * "file:line: entries[3].key.m: '0' is not in 1..2147483647"
 * ("file: row 7: key.m: '4096.7' is not an integer" for an SQLite row).
 *
 * The format, version 1:
 *
 *   format: ktune-export
 *   version: 1
 *   ktune: "0.1.0"
 *   entries:
 *     - device: {name: "NVIDIA H100 80GB HBM3", arch: "sm_90", sms: 132}
 *       key: {op: "gemm", dtype: "f16", layout: "nt", m: 16, n: 4096, k: 4096, aligned: 1}
 *       family: "gemm"
 *       config: "BLOCK_M=16,BLOCK_N=128,..."
 *       template_hash: "<64 hex digits>"
 *       protocol: "events;l2flush;..."
 *       time_us: 12.3456        (also p20_us, p80_us, tflops, cublas_us, tune_s)
 *       cublas_ratio: 1.05      (optional; derived from cublas_us / time_us, ignored on read)
 *       err_fro: 1.234e-04      (also err_max)
 *       candidates: 285
 *       nvrtc_version: "12.4"   (also driver_version, ktune_version)
 *       created_at: "2024-05-01T12:00:00Z"
 *
 * 'format' and 'version' come before 'entries'; every other field is
 * required; unknown keys are errors.  Not thread-safe unless stated.
 */
#ifndef KTUNE_SHARE_H
#define KTUNE_SHARE_H

#include <stddef.h>

#include "common.h"
#include "db/db.h"

#define KTUNE_SHARE_FORMAT "ktune-export"
/*
 * The format version this build writes; it reads every version up to it.
 * 1: GEMM only, the key's variant written as "layout".  2: every op of the
 * registry (src/ops/op.h), the variant written as "variant".
 */
#define KTUNE_SHARE_VERSION 2
#define KTUNE_SHARE_MAX_BYTES ((size_t)64 << 20)    /* larger files are refused unread */
#define KTUNE_SHARE_MAX_ENTRIES 1000000L

/* Entries read from a file or database, each checked. */
struct ktune_share {
	struct ktune_result *entries; /* file order */
	long *lines;                  /* the line each entry starts on; its row number for a database */
	unsigned char *stale;         /* 1: its template hash is not the built-in template's */
	long count, nstale;
};

/* Frees what a share holds and zeroes it; NULL is a no-op. */
void ktune__share_free(struct ktune_share *s);

/*
 * Checks every field of r (types, ranges, known family, config admitted by
 * the space) and rewrites its config in canonical form.  On failure returns
 * KTUNE_ERR_PARSE, sets *field to the failing field's name ("key.m") and e to
 * what is wrong ("'0' is not in 1..2147483647").
 */
int ktune__share_check(struct ktune_result *r, const char **field, struct ktune_err *e);

/* Appends a checked entry; `line` says where it came from. */
int ktune__share_add(struct ktune_share *s, const struct ktune_result *r, long line,
		     struct ktune_err *e);

/*
 * Marks stale entries and refuses two entries for the same device and key:
 * "file:12: entries[4]: same device and key as entries[1] (line 3)".
 * `what` is "entries" for a file, "row" for a database.
 */
int ktune__share_finish(struct ktune_share *s, const char *file, const char *what,
			struct ktune_err *e);

/*
 * Parses an export file (text of len bytes, which need not be NUL-terminated)
 * into out, checking every entry; `file` names it in messages.  On failure
 * out is empty and nothing needs freeing.
 */
int ktune__share_parse(const char *text, size_t len, const char *file, struct ktune_share *out,
		       struct ktune_err *e);

/*
 * Reads an export file or a standalone SQLite export (told apart by the
 * SQLite header) at path, refusing files over KTUNE_SHARE_MAX_BYTES and
 * anything but a regular file.  An SQLite file is opened by
 * ktune__db_open_readonly: a schema other than ktune's is refused unread.
 */
int ktune__share_load(const char *path, struct ktune_share *out, struct ktune_err *e);

/* 1 if the bytes start with the SQLite header "SQLite format 3\0". */
int ktune__share_is_sqlite(const void *data, size_t len);

/* Orders results by device name, arch, SMs, op, dtype, layout, m, n, k, aligned. */
int ktune__share_compare(const struct ktune_result *a, const struct ktune_result *b);

/*
 * Writes rs (sorted in place first) as an export file into a malloc'd,
 * NUL-terminated buffer.  The same results always give the same bytes.
 */
int ktune__share_write(struct ktune_result *rs, long n, char **out, size_t *len,
		       struct ktune_err *e);

/* What an import or merge does when both sides hold the same device and key. */
enum ktune_policy {
	KTUNE_POLICY_FASTER, /* same protocol: the faster; otherwise ours */
	KTUNE_POLICY_OURS,   /* always ours */
	KTUNE_POLICY_THEIRS, /* always theirs */
};

/* Parses "faster", "ours" or "theirs"; -1 for anything else. */
int ktune__policy_parse(const char *s, enum ktune_policy *out);

/*
 * Decides between ours and theirs (same device and key): returns 1 to take
 * theirs, 0 to keep ours, with the reason in why ("theirs is faster: 10.2 us
 * vs 11.5 us").  Under 'faster', a result is fresh when its template hash is
 * the current one of its own family (ktune__result_fresh): a fresh result
 * beats a stale one; two of the same freshness are compared by time when
 * measured with the same protocol, else ours is kept.
 */
int ktune__policy_decide(const struct ktune_result *ours, const struct ktune_result *theirs,
			 enum ktune_policy policy, char *why, size_t len);

#endif
