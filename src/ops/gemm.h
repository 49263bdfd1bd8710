/*
 * gemm.h - the GEMM op family: its configuration, its launch contract with
 * kernels/templates/gemm.cu, the problem-dependent pruning, the built-in
 * default, FLOP and byte counts and the verification tolerance.
 */
#ifndef KTUNE_GEMM_H
#define KTUNE_GEMM_H

#include <stddef.h>

#include "common.h"
#include "key.h"
#include "search/space.h"

#define KTUNE_GEMM_SOURCE "gemm.cu"
#define KTUNE_GEMM_SPACE "gemm.yaml"

struct ktune_gemm_config {
	int block_m, block_n, block_k; /* compiled in */
	int warps_m, warps_n;          /* compiled in */
	int stages;                    /* compiled in */
	int group_size;                /* kernel argument */
	int split_k;                   /* kernel argument */
};

/* "BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_SIZE=8,SPLIT_K=1" */
void ktune__gemm_config_format(const struct ktune_gemm_config *c, char *buf, size_t len);
/* Parses the canonical text (any order, every field once); no range checks. */
int ktune__gemm_config_parse(const char *text, struct ktune_gemm_config *c, struct ktune_err *e);

/* Maps between the space's value vector and the config. */
int ktune__gemm_config_from_values(const struct ktune_space *s, const long *values,
				   struct ktune_gemm_config *c, struct ktune_err *e);
int ktune__gemm_config_to_values(const struct ktune_space *s, const struct ktune_gemm_config *c,
				 long *values, struct ktune_err *e);

/* The embedded GEMM space, parsed once (thread-safe); NULL with e set on failure. */
const struct ktune_space *ktune__gemm_space(struct ktune_err *e);

/* 1 if the config is in the declared space (values and constraints), else 0 with the reason. */
int ktune__gemm_config_admitted(const struct ktune_gemm_config *c, struct ktune_err *e);

/* Two configs compile to the same kernel (ignoring GROUP_SIZE and SPLIT_K). */
int ktune__gemm_same_kernel(const struct ktune_gemm_config *a, const struct ktune_gemm_config *b);

/* Launch contract. */
int ktune__gemm_threads(const struct ktune_gemm_config *c);
size_t ktune__gemm_smem_bytes(const struct ktune_key *key, const struct ktune_gemm_config *c);
void ktune__gemm_grid(const struct ktune_key *key, const struct ktune_gemm_config *c,
		      unsigned grid[3]);
/* Split-K scratch: fp32 partials and per-tile counters (0 when split_k == 1). */
size_t ktune__gemm_partials_bytes(const struct ktune_key *key, const struct ktune_gemm_config *c);
size_t ktune__gemm_counters(const struct ktune_key *key, const struct ktune_gemm_config *c);

/*
 * Whether one block alone reads each element of A (one column of tiles) and
 * of B (one row of tiles): the kernel then streams that operand through L2.
 * Part of the compiled variant.
 */
void ktune__gemm_read_once(const struct ktune_key *key, const struct ktune_gemm_config *c,
			   int *a, int *b);

/* NVRTC -D options for the key's variant of the config; writes up to max strings of 48 bytes. */
int ktune__gemm_defines(const struct ktune_key *key, const struct ktune_gemm_config *c,
			char opts[][48], int max);

/*
 * 0 if the config is worth timing for this key, else 1 with the reason in
 * `why` (a tile far taller than M, split-K where tiles already fill the GPU,
 * GROUP_SIZE where there is one row of tiles, too much shared memory for
 * smem_limit).
 */
int ktune__gemm_prune(const struct ktune_key *key, const struct ktune_gemm_config *c,
		      int sm_count, int smem_limit, char *why, size_t len);

/*
 * Lowers SPLIT_K of a config borrowed from another key until its blocks and
 * its fp32 scratch stay reasonable for this key.
 */
void ktune__gemm_fit_split(const struct ktune_key *key, struct ktune_gemm_config *c, int sm_count);

/*
 * Makes a config borrowed from another key fit this key's shared memory
 * (the layout changes the tile sizes): fewer stages, down to 2; returns 0 if
 * it fits then, -1 if not.
 */
int ktune__gemm_fit_smem(const struct ktune_key *key, struct ktune_gemm_config *c, int smem_limit);

/* The built-in configuration for a key that nobody tuned. */
struct ktune_gemm_config ktune__gemm_default_config(const struct ktune_key *key, int sm_count);

/* 1 if pointers and leading dimensions allow the 16-byte (ALIGNED=1) variant. */
int ktune__gemm_aligned(const void *a, int64_t lda, const void *b, int64_t ldb,
			const void *c, int64_t ldc);

double ktune__gemm_flops(const struct ktune_key *key);
/* Fewest bytes the GEMM must move: A and B read once, C written once (beta = 0). */
double ktune__gemm_bytes(const struct ktune_key *key);

/* Tolerances on the relative Frobenius error and the max error over rms(ref). */
void ktune__gemm_tolerance(ktune_dtype d, double *fro, double *max);

#endif
