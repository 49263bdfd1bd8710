/*
 * config.h - one configuration of a template family: what a candidate is,
 * what a result stores (as text) and what dispatch launches.
 *
 * GEMM's parameters have names here: its two families and their tuner
 * (src/ops/gemm.c, src/tuner/tune.c) predate the op registry.  Every other
 * op's configuration is its family's space parameters in v[], in the order
 * its kernels/templates/<family>.yaml declares them (src/ops/op.h).
 */
#ifndef KTUNE_CONFIG_H
#define KTUNE_CONFIG_H

#include "search/space.h"

/*
 * Fields a GEMM family does not have are 0 (warps_* for wgmma; consumers,
 * cluster_m and warps_k for mma.sync; block_k, warps_m, group_size and the
 * wgmma's for gemv), so that positional initialisers of mma.sync configs
 * stay valid.
 */
struct ktune_config {
	int block_m, block_n, block_k; /* GEMM: compiled in; BLOCK_K is 64 for wgmma */
	int warps_m, warps_n;          /* GEMM: compiled in; mma.sync only */
	int stages;                    /* GEMM: compiled in */
	int group_size;                /* GEMM: kernel argument */
	int split_k;                   /* GEMM: kernel argument; wgmma splits only the last wave's tiles */
	int family;                    /* the op's family: an index into its families (GEMM: enum ktune_gemm_family) */
	int consumers;                 /* GEMM: compiled in; wgmma only: consumer warpgroups, 1..3 */
	int cluster_m;                 /* GEMM: compiled in; wgmma only: blocks per cluster, 1 or 2 */
	int warps_k;                   /* GEMM: compiled in; gemv only: warps along K */
	long v[KTUNE_SPACE_MAX_PARAMS]; /* every other op: its family's parameters, in space order */
};

#endif
