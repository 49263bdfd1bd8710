/*
 * key.h - the problem key: what a tuned result is stored under and what the
 * runtime looks up.  For GEMM: dtype, layout of A and B, M, N, K and the
 * alignment class of the pointers and leading dimensions.
 */
#ifndef KTUNE_KEY_H
#define KTUNE_KEY_H

#include <stdint.h>

#include "ktune.h"

struct ktune_key {
	char op[16];          /* "gemm" */
	ktune_dtype dtype;
	char trans_a, trans_b; /* 'n' or 't' */
	int64_t m, n, k;
	int aligned;          /* 1: every pointer 16-byte aligned and every ld a multiple of 8 */
};

/* "f16" / "bf16"; NULL for an unknown dtype. */
const char *ktune__dtype_name(ktune_dtype d);
/* Parses "f16" or "bf16"; returns 0 on success, -1 on an unknown name. */
int ktune__dtype_parse(const char *s, ktune_dtype *out);
/* Bytes per element of a dtype. */
int ktune__dtype_size(ktune_dtype d);
/* Writes "nt" etc. into buf[3]. */
void ktune__layout_name(const struct ktune_key *key, char buf[3]);
/* Parses "nn", "nt", "tn" or "tt" into key->trans_a/trans_b; -1 if malformed. */
int ktune__layout_parse(const char *s, struct ktune_key *key);
/* One line describing the key: "gemm f16 nt 16x4096x4096 aligned". */
void ktune__key_format(const struct ktune_key *key, char *buf, size_t len);

/* Whether two GEMM keys are the same problem (inline: the runtime's lookup is on every call). */
static inline int ktune__key_same(const struct ktune_key *a, const struct ktune_key *b)
{
	return a->m == b->m && a->n == b->n && a->k == b->k && a->dtype == b->dtype &&
	       a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->aligned == b->aligned;
}

#endif
