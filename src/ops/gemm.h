/*
 * gemm.h - the GEMM op: its configuration, its launch contract with the three
 * template families (kernels/templates/gemm.cu, mma.sync, any GPU from sm_80;
 * kernels/templates/gemm_wgmma.cu, TMA + wgmma, sm_90a and aligned keys
 * only; kernels/templates/gemv.cu, B streamed into mma.sync fragments for few
 * rows of A, aligned keys only), the problem-dependent pruning, the built-in
 * default, FLOP and byte counts and the verification tolerance.
 */
#ifndef KTUNE_GEMM_H
#define KTUNE_GEMM_H

#include <stddef.h>

#include "common.h"
#include "key.h"
#include "ops/config.h"
#include "search/space.h"

#define KTUNE_GEMM_SOURCE "gemm.cu"
#define KTUNE_GEMM_SPACE "gemm.yaml"
#define KTUNE_GEMM_WGMMA_SOURCE "gemm_wgmma.cu"
#define KTUNE_GEMM_WGMMA_SPACE "gemm_wgmma.yaml"
#define KTUNE_GEMM_GEMV_SOURCE "gemv.cu"
#define KTUNE_GEMM_GEMV_SPACE "gemv.yaml"

/* The template families of the GEMM op; the values are stored nowhere (texts name them). */
enum ktune_gemm_family {
	KTUNE_GEMM_MMA = 0,   /* gemm.cu: mma.sync + cp.async, family name "gemm" */
	KTUNE_GEMM_WGMMA = 1, /* gemm_wgmma.cu: TMA + wgmma, family name "gemm_wgmma" */
	KTUNE_GEMM_GEMV = 2,  /* gemv.cu: B streamed into mma.sync fragments, family name "gemm_gemv" */
};
#define KTUNE_GEMM_NFAMILIES 3

/* "gemm", "gemm_wgmma" or "gemm_gemv" (the results' `family` column), NULL for no family. */
const char *ktune__gemm_family_name(int family);
/* The family called `name`, or -1. */
int ktune__gemm_family_from_name(const char *name);
/* "gemm.cu", "gemm_wgmma.cu" or "gemv.cu". */
const char *ktune__gemm_family_source(int family);
/* sha256 of the family's embedded source: the template_hash of its results. */
const char *ktune__gemm_family_hash(int family);
/*
 * 1 if a result of family `family_name` with this template hash was tuned
 * with the current source of its family (0 for an unknown family).
 */
int ktune__gemm_result_fresh(const char *family_name, const char *template_hash);
/*
 * The hash of the whole GEMM search: sha256 of the families' source hashes,
 * in family order.  Sweeps record it with their claims; it changes when
 * any template does.
 */
void ktune__gemm_space_hash(char out[65]);
/*
 * 1 if configs of the family may serve this key on a device of arch `arch`
 * ("sm_90", "sm_90a"): mma.sync always; wgmma only on sm_90 and for aligned
 * keys (TMA needs 16-byte aligned pointers and leading dimensions); gemv for
 * aligned keys (its 16-byte loads go straight to registers).
 */
int ktune__gemm_family_runs(int family, const char *arch, int aligned);
/* The arch to compile the family for on a device of `arch`: wgmma needs "sm_90a". */
const char *ktune__gemm_compile_arch(int family, const char *arch);
/* The kernel's entry point: "gemm_kernel", "gemm_wgmma_kernel" or "gemv_kernel". */
const char *ktune__gemm_entry(int family);

/*
 * mma.sync: "BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_SIZE=8,SPLIT_K=1"
 * wgmma:    "FAMILY=wgmma,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,STAGES=4,CONSUMERS=2,CLUSTER_M=1,
 *            GROUP_SIZE=8,SPLIT_K=1" (one line)
 * gemv:     "FAMILY=gemv,BLOCK_M=8,BLOCK_N=64,WARPS_N=2,WARPS_K=4,STAGES=4,SPLIT_K=4"
 * A text without FAMILY is the mma.sync family: every text written before
 * the wgmma family existed keeps its meaning.
 */
void ktune__gemm_config_format(const struct ktune_config *c, char *buf, size_t len);
/*
 * Parses the canonical text: an optional leading "FAMILY=wgmma" or "FAMILY=gemv", then the
 * family's fields in any order, each once; unknown names (a field of the
 * other family too) are errors.  No range checks.
 */
int ktune__gemm_config_parse(const char *text, struct ktune_config *c, struct ktune_err *e);

/* Maps between the space's value vector and the config (the space's family decides). */
int ktune__gemm_config_from_values(const struct ktune_space *s, const long *values,
				   struct ktune_config *c, struct ktune_err *e);
int ktune__gemm_config_to_values(const struct ktune_space *s, const struct ktune_config *c,
				 long *values, struct ktune_err *e);

/* The embedded space of a family, parsed once (thread-safe); NULL with e set on failure. */
const struct ktune_space *ktune__gemm_family_space(int family, struct ktune_err *e);
/* The mma.sync family's space (gemm.yaml). */
const struct ktune_space *ktune__gemm_space(struct ktune_err *e);

/* 1 if the config is in its family's declared space (values and constraints), else 0 with the reason. */
int ktune__gemm_config_admitted(const struct ktune_config *c, struct ktune_err *e);

/* Two configs compile to the same kernel: same family and compiled-in fields (not GROUP_SIZE, SPLIT_K). */
int ktune__gemm_same_kernel(const struct ktune_config *a, const struct ktune_config *b);

/* Launch contract (every family; each template's header comment is the reference for it). */
int ktune__gemm_threads(const struct ktune_config *c);
size_t ktune__gemm_smem_bytes(const struct ktune_key *key, const struct ktune_config *c);
/*
 * mma.sync and gemv: one block per tile and split.  wgmma: the persistent grid,
 * CLUSTER_M * min(tiles, resident) blocks, where `resident` is the SM count
 * for CLUSTER_M=1 and the max active clusters for CLUSTER_M=2 (<= 0: as
 * many as there are tiles).
 */
void ktune__gemm_grid(const struct ktune_key *key, const struct ktune_config *c,
		      unsigned grid[3]);
void ktune__gemm_wgmma_grid(const struct ktune_key *key, const struct ktune_config *c,
			    int resident, unsigned grid[3]);
/*
 * Split-K scratch: fp32 partials and per-tile counters (0 when split_k == 1).
 * wgmma splits the tiles of the persistent grid's last wave only, so its
 * scratch depends on `resident`, as its grid does.
 */
size_t ktune__gemm_partials_bytes(const struct ktune_key *key, const struct ktune_config *c,
				  int resident);
size_t ktune__gemm_counters(const struct ktune_key *key, const struct ktune_config *c, int resident);

/*
 * Whether one block alone reads each element of A (one column of tiles) and
 * of B (one row of tiles): the kernel then streams that operand through L2.
 * Part of the compiled variant.
 */
void ktune__gemm_read_once(const struct ktune_key *key, const struct ktune_config *c,
			   int *a, int *b);

/* NVRTC -D options for the key's variant of the config (by family); writes up to max strings of 48 bytes. */
int ktune__gemm_defines(const struct ktune_key *key, const struct ktune_config *c,
			char opts[][48], int max);

/* gemv: the depth of one step of K (KSTEP of gemv.cu): 32 for B [N,K], 16 for B [K,N]. */
int ktune__gemv_kstep(const struct ktune_key *key);

/*
 * 0 if the config is worth timing for this key, else 1 with the reason in
 * `why` (a tile far taller than M, split-K where tiles already fill the GPU,
 * GROUP_SIZE where there is one row of tiles, too much shared memory for
 * smem_limit; for wgmma also: an unaligned key, a cluster with one row of
 * tiles, split-K; for gemv: an unaligned key, tiles of A that make blocks
 * read B again, splits with too little K).
 */
int ktune__gemm_prune(const struct ktune_key *key, const struct ktune_config *c,
		      int sm_count, int smem_limit, char *why, size_t len);

/*
 * Lowers SPLIT_K of a config borrowed from another key until its blocks and
 * its fp32 scratch stay reasonable for this key.
 */
void ktune__gemm_fit_split(const struct ktune_key *key, struct ktune_config *c, int sm_count);

/*
 * Makes a config borrowed from another key fit this key's shared memory
 * (the layout changes the tile sizes): fewer stages, down to 2; returns 0 if
 * it fits then, -1 if not.
 */
int ktune__gemm_fit_smem(const struct ktune_key *key, struct ktune_config *c, int smem_limit);

/* The built-in configuration for a key that nobody tuned: always mma.sync (runs everywhere). */
struct ktune_config ktune__gemm_default_config(const struct ktune_key *key, int sm_count);

/* 1 if packed operands of the key (each leading dimension its row length) fall in the aligned class. */
int ktune__gemm_packed_aligned(const struct ktune_key *key);

/*
 * The tuner's problem for the key's class: leading dimensions and an
 * element offset of every base pointer.  Packed where that gives the key's
 * class; an aligned key whose rows are not multiples of 8 elements gets
 * them padded to the next multiple (as a caller with padded rows would
 * call); an unaligned key whose packed rows are aligned gets its pointers
 * one element off.
 */
void ktune__gemm_problem_layout(const struct ktune_key *key, int64_t *lda, int64_t *ldb, int64_t *ldc,
				int *offset);

/* 1 if pointers and leading dimensions allow the 16-byte (ALIGNED=1) variant. */
int ktune__gemm_aligned(const void *a, int64_t lda, const void *b, int64_t ldb,
			const void *c, int64_t ldc);

double ktune__gemm_flops(const struct ktune_key *key);
/* Fewest bytes the GEMM must move: A and B read once, C written once (beta = 0). */
double ktune__gemm_bytes(const struct ktune_key *key);

/* Tolerances on the relative Frobenius error and the max error over rms(ref). */
void ktune__gemm_tolerance(ktune_dtype d, double *fro, double *max);

#endif
