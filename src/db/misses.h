/*
 * misses.h - the keys a program was served without a tuned entry, as a
 * file: what ktune_close writes under KTUNE_RECORD=PATH (or
 * ktune_save_misses) and what `ktune sweep --misses FILE` tunes, key for
 * key.  The database holds the same list (db.h: ktune__db_put_misses).
 *
 *   # ktune misses: the keys this GPU served without a tuned entry ...
 *   format: ktune-misses
 *   version: 1
 *   device: {name: "NVIDIA H100 80GB HBM3", arch: sm_90, sm_count: 132}
 *   keys:
 *     - {op: gemm, dtype: bf16, variant: nt, m: 1, n: 50257, k: 768, aligned: true, source: default, calls: 120}
 *     - {op: gelu, dtype: bf16, variant: "tanh,fwd", n: 1048576, aligned: true, source: default, calls: 8}
 *
 * A key's sizes are named as its op's fields are (`ktune help tune`), its
 * variant is its variant text (GEMM: the layout); calls and source may be
 * left out (1, "").  Keys are checked as any key is (ktune__op_key_check);
 * a bad one refuses the file with file:line: what is wrong.
 */
#ifndef KTUNE_MISSES_H
#define KTUNE_MISSES_H

#include <stddef.h>

#include "common.h"
#include "db/db.h"

#define KTUNE_MISSES_FORMAT "ktune-misses"
#define KTUNE_MISSES_VERSION 1
/* A misses file bigger than this is refused (a million keys is far more than a program uses). */
#define KTUNE_MISSES_MAX_BYTES (64u << 20)

struct ktune_misses_file {
	struct ktune_device_id device; /* the GPU that served them */
	struct ktune_miss *m;          /* malloc'd, in file order, no key twice */
	int n;
};

/* Parses a misses file; on failure *out is empty (nothing to free). */
int ktune__misses_parse(const char *text, size_t len, const char *file, struct ktune_misses_file *out,
			struct ktune_err *e);
/* Reads and parses the file at path. */
int ktune__misses_read(const char *path, struct ktune_misses_file *out, struct ktune_err *e);
void ktune__misses_file_free(struct ktune_misses_file *f);

/* The text of a misses file of device dev: the keys in the order given; *out malloc'd. */
int ktune__misses_format(const struct ktune_device_id *dev, const struct ktune_miss *m, int n, char **out,
			 size_t *len, struct ktune_err *e);

/*
 * Adds misses of device dev to the file at path, sorted by key: an
 * existing file of the same device keeps its keys and has the calls of a
 * key in both added up (the source is the newer), a missing file is
 * created.  The file is
 * replaced atomically (ktune__write_file_atomic) while a lock on its
 * directory keeps other processes saving there from losing each other's
 * keys.  A file that does not parse, or is another device's, is refused and
 * left as it is.
 */
int ktune__misses_save(const char *path, const struct ktune_device_id *dev, const struct ktune_miss *m,
		       int n, struct ktune_err *e);

#endif
