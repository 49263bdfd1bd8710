/*
 * gemm-model.h - an analytic model of how long a GEMM config takes on a
 * device, from the key, the config and a few device figures: no GPU, no
 * measurement.  Three users:
 *
 *   - dispatch, for a key nobody tuned: the model's pick from the families'
 *     spaces (ktune__gemm_model_pick), and whether a nearby tuned config is
 *     worth borrowing (its estimate against the pick's);
 *   - the tuner, to compile and screen the likeliest candidates first, to
 *     cap them by rank, and to stop once the rest cannot win (the bound);
 *   - whether ktune has a good answer at all for a key (its unaligned
 *     class, where only the slow element-load variant runs), which decides
 *     when dispatch hands a key to cuBLAS.
 *
 * The estimate is a roofline per SM with the effects that separate configs
 * of one key: waves of tiles over the SMs (and their last, partial wave),
 * split-K and its reduction, blocks resident per SM, bytes in flight against
 * memory latency, the traffic from L2 that small tiles cost, the epilogue,
 * and a fixed launch cost.  Its constants are fitted to the H100 sweeps in
 * bench/results (docs/gemm.md, "The performance model"); other archs take
 * figures scaled from theirs.  It ranks configs; its absolute times are
 * good to about 20% on the shipped keys, not better.
 */
#ifndef KTUNE_GEMM_MODEL_H
#define KTUNE_GEMM_MODEL_H

#include "key.h"
#include "ops/config.h"

/* What the model needs to know of a device. */
struct ktune_gemm_device {
	char arch[16];   /* "sm_90" */
	int sm_count;    /* <= 0: 132 */
	int smem_optin;  /* shared memory a block may use after opt-in, bytes; <= 0: the arch's */
	double mem_gbps; /* DRAM bandwidth a copy reaches, GB/s; <= 0: the arch's figure */
};

/* The model's view of one config for one key. */
struct ktune_gemm_estimate {
	double time_us;  /* the estimate */
	double bound_us; /* no run can be faster: peak rates, whole waves of padded tiles */
	double compute_us, memory_us; /* the two roofline terms (for messages and tests) */
	int waves;       /* rounds of blocks (mma.sync) or of tiles per walker (wgmma) on the busiest SM */
};

/* Estimates a config (either family) for the key on the device. */
void ktune__gemm_model(const struct ktune_key *key, const struct ktune_config *c,
		       const struct ktune_gemm_device *d, struct ktune_gemm_estimate *out);

/*
 * The config the model expects fastest among those the families' spaces
 * admit and ktune__gemm_prune keeps for the key on the device (wgmma only
 * where it runs: aligned keys on sm_90).  Returns 0, or -1 if no config is
 * left (never for a valid key: the smallest mma.sync tiles always are).
 * est may be NULL.
 */
int ktune__gemm_model_pick(const struct ktune_key *key, const struct ktune_gemm_device *d,
			   struct ktune_config *out, struct ktune_gemm_estimate *est);

/*
 * Sorts n configs of the key by the model's estimate, fastest first (ties
 * in their given order); with `est` non-NULL, est[i] is config i's estimate
 * after the sort.
 */
void ktune__gemm_model_rank(const struct ktune_key *key, const struct ktune_gemm_device *d,
			    struct ktune_config *cfgs, int n, struct ktune_gemm_estimate *est);

/*
 * The regime of a key: small M (a GEMV-like key: M <= 16), deep K (K at
 * least 16 times larger than M and N with few output tiles), memory-bound
 * (by its roofline: bytes / bandwidth over FLOPs / peak), and whether its
 * alignment class leaves ktune only the element-load variant.  Dispatch
 * borrows a tuned config only from a key of the same regime.
 */
struct ktune_gemm_regime {
	int small_m;       /* M <= 16: the GEMV-like tiles */
	int m_class;       /* 0: M <= 16, 1: <= 64, 2: <= 256, 3: larger */
	int deep_k;        /* few output tiles and K >> M, N: split-K's regime */
	int memory_bound;  /* bytes / bandwidth > FLOPs / peak */
	double ideal_us;   /* max(FLOPs / peak, bytes / bandwidth): the roofline floor, no launch */
};

void ktune__gemm_regime(const struct ktune_key *key, const struct ktune_gemm_device *d,
			struct ktune_gemm_regime *out);

#endif
