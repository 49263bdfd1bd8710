/*
 * key.h - the problem key: what a tuned result is stored under and what the
 * runtime looks up.  For GEMM: dtype, layout of A and B, M, N, K and the
 * alignment class of the pointers and leading dimensions; every op fills
 * the same fields its own way (src/ops/op.h).
 */
#ifndef KTUNE_KEY_H
#define KTUNE_KEY_H

#include <stdint.h>
#include <string.h>

#include "ktune.h"

/*
 * A key is an op's problem: the op's name, the element type, the op's
 * variant (its compile-time choices, as text: the layout "nt" of a GEMM,
 * "tanh,bwd" of a GeLU) and up to three sizes (a GEMM's M, N and K; an
 * elementwise op's element count), and the alignment class of its
 * pointers.  Each op (src/ops/<op>.c) says which fields it uses; the others
 * are zero.  Keys are compared whole: zero-initialise them (= { 0 }).
 */
#define KTUNE_KEY_DIMS 3
#define KTUNE_KEY_VARIANT 24

struct ktune_key {
	char op[16]; /* "gemm", "add", "gelu", ... (src/ops/ops.c) */
	ktune_dtype dtype;
	char variant[KTUNE_KEY_VARIANT]; /* NUL-terminated; GEMM: the layout "nt" (A, then B) */
	int64_t m, n, k; /* the sizes: GEMM's M, N, K; another op's sizes in this order (its fields say) */
	int aligned; /* 1: the aligned class (GEMM: 16-byte pointers and leading dimensions multiple of 8) */
};

/* Size i (0, 1, 2: m, n, k) of a key. */
static inline int64_t *ktune__key_dim(struct ktune_key *key, int i)
{
	return i == 0 ? &key->m : i == 1 ? &key->n : &key->k;
}

/* "f16" / "bf16" / "f32"; NULL for an unknown dtype. */
const char *ktune__dtype_name(ktune_dtype d);
/* Parses "f16", "bf16" or "f32"; returns 0 on success, -1 on an unknown name. */
int ktune__dtype_parse(const char *s, ktune_dtype *out);
/* Bytes per element of a dtype. */
int ktune__dtype_size(ktune_dtype d);
/* Writes "nt" etc. into buf[3]. */
void ktune__layout_name(const struct ktune_key *key, char buf[3]);
/* Parses "nn", "nt", "tn" or "tt" into key->variant; -1 if malformed. */
int ktune__layout_parse(const char *s, struct ktune_key *key);
/* The sizes as "16x4096x4096" (GEMM), "4096x14336" (rows x cols), "1048576": up to the last non-zero. */
void ktune__key_shape(const struct ktune_key *key, char *buf, size_t len);
/* One line describing the key: "gemm f16 nt 16x4096x4096 aligned", "gelu bf16 tanh,fwd 1048576 aligned". */
void ktune__key_format(const struct ktune_key *key, char *buf, size_t len);

/* A total order of keys (op, dtype, variant, m, n, k, aligned): <0, 0 (the same key), >0. */
int ktune__key_compare(const struct ktune_key *a, const struct ktune_key *b);

/* Whether two keys are the same problem (inline: the runtime's lookup is on every call). */
static inline int ktune__key_same(const struct ktune_key *a, const struct ktune_key *b)
{
	return a->m == b->m && a->n == b->n && a->k == b->k && a->dtype == b->dtype &&
	       a->aligned == b->aligned && !strcmp(a->variant, b->variant) && !strcmp(a->op, b->op);
}

#endif
