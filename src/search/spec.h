/*
 * spec.h - a sweep specification: which problem keys `ktune sweep` tunes and
 * with what search budget.  Read from YAML, or the built-in default suite.
 *
 *   budget: 64                 # optional: at most 64 candidates per key (random sample); 0 = all
 *   gemm:
 *     dtypes: [f16, bf16]
 *     layouts: [nn, nt]
 *     shapes:
 *       - {mnk: [512, 1024]}   # square: M = N = K
 *       - {m: [1, 16], n: 4096, k: [4096, 14336]}
 *       - {m: {from: 128, to: 1024, mul: 2}, n: 4096, k: 4096}
 *       - {m: {from: 100, to: 300, step: 100}, n: 512, k: 512}
 *
 * Each of m, n, k (or mnk) is a number, a list of numbers or a range
 * {from, to, step} / {from, to, mul} (inclusive of `to` when reached).  A shape
 * entry stands for every combination of its values.  Keys are expanded in
 * order dtype, layout, shape; duplicates are dropped.  dtypes, layouts and
 * shapes are required; dtypes and layouts also take a single name.
 */
#ifndef KTUNE_SPEC_H
#define KTUNE_SPEC_H

#include "common.h"
#include "key.h"

/*
 * Refuse specs that expand to more keys than this (counted before duplicates
 * are dropped); a typo should not queue a week of tuning.
 */
#define KTUNE_SPEC_MAX_KEYS 100000
/* Largest M, N or K accepted in a spec; largest size of another op. */
#define KTUNE_SPEC_MAX_DIM (1L << 20)
#define KTUNE_SPEC_MAX_OP_DIM (1L << 32)

struct ktune_spec {
	int nkeys;
	struct ktune_key *keys; /* malloc'd; aligned = 1 from a spec (recorded misses keep their class) */
	int budget;             /* candidates per key; 0 = exhaustive */
};

/*
 * Parses a spec.  Errors name the file, line and field:
 * "spec.yaml:4: gemm.layouts[1]: 'nx' is not one of nn, nt, tn, tt".
 * Unknown keys are errors.  On failure *out is left empty (nothing to free).
 */
int ktune__spec_parse(const char *text, size_t len, const char *filename,
		      struct ktune_spec *out, struct ktune_err *e);

/*
 * The built-in default suite: f16 and bf16, layouts nn and nt, M=N=K in
 * {512, 1024, 2048, 4096, 8192}, and M in {1, 16, 128, 1024, 4096} x (N, K)
 * in {(6144,4096), (4096,4096), (28672,4096), (4096,14336)}, in that order
 * (M slowest).  4096x4096x4096 is in both sets and is kept once: 2 x 2 x 24
 * = 96 keys, from "f16 nn 512x512x512" to "bf16 nt 4096x4096x14336"; then
 * each other op's section of the suite (struct ktune_op's `suite`), in the
 * registry's order.
 */
int ktune__spec_default(struct ktune_spec *out, struct ktune_err *e);

void ktune__spec_free(struct ktune_spec *s);

#endif
