/*
 * elementwise.h - what the elementwise ops (add.c, gelu.c, glu.c,
 * dropout.c) share: their tunables, defines, launch geometry, pruning,
 * default config, key bucketing and tolerances.
 *
 * Every elementwise space has the parameters VEC (elements per vector
 * access), UNROLL (vectors in flight per thread), THREADS (per block),
 * CACHE (0: plain loads and stores; 1: streaming hints) and BLOCKS_PER_SM
 * (a launch parameter: the grid is at most SMs x BLOCKS_PER_SM blocks
 * walking the data, 0: as many blocks as cover it once).  The element type
 * and the alignment class are compiled in (DTYPE, ALIGNED).
 */
#ifndef KTUNE_ELEMENTWISE_H
#define KTUNE_ELEMENTWISE_H

#include "ops/op.h"

/* The tuned size of a call: the next power of two (sizes within a factor of two share a tuning). */
int64_t ktune__ew_bucket(int64_t n);
/* Every size field of the key to its bucket. */
void ktune__ew_key_bucket(struct ktune_key *key);

/* -DDTYPE, -DALIGNED and the space's compiled parameters (all but BLOCKS_PER_SM). */
int ktune__ew_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max);

/* The elements one vector access moves for this key and config: VEC if aligned, else 1. */
int ktune__ew_vec(const struct ktune_key *key, const struct ktune_config *c);
/*
 * The launch of a kernel walking `nvec` vectors with THREADS x UNROLL per
 * block and step: ceil(nvec / (THREADS * UNROLL)) blocks, at most SMs x
 * BLOCKS_PER_SM of them when that is set; at least one.
 */
void ktune__ew_geometry(const struct ktune_config *c, int64_t nvec, int sm_count,
			struct ktune_op_launch *out, const struct ktune_op *op);

/*
 * Vectors wider than 16 bytes, or wider than one element for the unaligned
 * class (its kernels only take the scalar path); more threads per step than
 * the key has vectors, beyond the smallest block.
 */
int ktune__ew_prune(const struct ktune_key *key, const struct ktune_config *c, int64_t nvec,
		    char *why, size_t len);

/*
 * The default for a key nobody tuned, by its size (the space's nearest
 * values): 16-byte vectors (unaligned: elements), one pass over the data;
 * 256 threads with 2 vectors in flight where the key fills two waves of
 * such blocks, else 128 threads with one, so that a small key still
 * spreads over the SMs; the streaming hint while a buffer is under 32 MiB
 * (the shipped sweeps took it at 1M and 16M elements, not at 64M); and
 * never a config the op's prune rejects for the key.
 */
struct ktune_config ktune__ew_default(const struct ktune_op *op, const struct ktune_key *key, int sm_count);
/* The same as an op's default_config: the key's own op. */
struct ktune_config ktune__ew_default_config(const struct ktune_key *key, int sm_count);

/* Inputs for the tuner and the tests: uniform in [-4, 4), where the activations bend. */
void ktune__ew_input_range(const struct ktune_key *key, int buf, double *lo, double *hi);

/* Squared distance of the keys' sizes in log space (same op, dtype and variant assumed). */
double ktune__ew_distance(const struct ktune_key *a, const struct ktune_key *b);

/* Accepted error relative to max(1, |reference|): the dtype's rounding, a few ulps of fp32 math. */
double ktune__ew_tolerance(ktune_dtype dtype);
/* The same as an op's tolerance hook: every output of the key's dtype alike. */
double ktune__ew_output_tolerance(const struct ktune_key *key, int buf);

/* The kernel argument slots: a device pointer, a 64-bit integer, a float. */
void ktune__ew_arg_ptr(struct ktune_op_args *a, uint64_t p);
void ktune__ew_arg_i64(struct ktune_op_args *a, int64_t v);
void ktune__ew_arg_f32(struct ktune_op_args *a, float v);
void ktune__ew_arg_u64(struct ktune_op_args *a, uint64_t v);

/* The element types every elementwise op takes. */
extern const ktune_dtype ktune__ew_dtypes[3];

#endif
