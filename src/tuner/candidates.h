/*
 * candidates.h - the configurations worth trying for a key (the space,
 * pruned for the device and the key), and compiling many of them at once.
 */
#ifndef KTUNE_CANDIDATES_H
#define KTUNE_CANDIDATES_H

#include "ops/gemm-model.h"
#include "ops/gemm.h"
#include "runtime/compile.h"

/*
 * Every admitted configuration of the GEMM spaces that ktune__gemm_prune
 * keeps for the key (sm_count/smem_limit 0: no device checks): the mma.sync
 * family's in space order, the gemv family's for aligned keys, then, when
 * the wgmma family runs for the key on `arch` (aligned keys on sm_90; NULL:
 * no device, no wgmma), the wgmma family's.  With budget > 0 and more
 * candidates than that, a random sample of `budget` of them (seeded, so a
 * rerun picks the same ones), drawn from mma.sync and gemv together and
 * from wgmma apart: wgmma gets its proportional share but at least a
 * quarter of the budget when it has that many (candidates.c, wgmma_share).
 */
int ktune__gemm_candidates(const struct ktune_key *key, const char *arch, int sm_count,
			   int smem_limit, int budget, unsigned seed,
			   struct ktune_config **out, int *n, int *npruned, struct ktune_err *e);

/*
 * Orders n GEMM candidates of the key by the performance model, the fastest
 * estimate first, so that the likeliest kernels compile and screen first.
 * With top > 0, keeps only the candidates of the `top` kernels the model
 * ranks best and of the best-ranked kernel of each tile shape (family,
 * BLOCK_M, BLOCK_N) -- a tile the model misjudges still gets a try.
 * Returns how many candidates are kept, in order, in cfgs[0..kept); those
 * left out follow in cfgs[kept..n), in rank order too (the tuner records
 * them as untried).  Fills est[i] (may be NULL; n of them) with cfgs[i]'s
 * estimate after the reordering.
 */
int ktune__gemm_model_order(const struct ktune_key *key, const struct ktune_gemm_device *dev,
			    struct ktune_config *cfgs, int n, int top, struct ktune_gemm_estimate *est);

/* The default of `ktune tune`'s --top: kernels of the model's rank compiled and screened. */
#define KTUNE_TUNE_TOP 32
#define KTUNE_TUNE_TOP_TEXT "32"
/*
 * ktune tune's default --deadline (seconds) of compiling and screening: a
 * new key tunes in about ten on a 16-core machine, the worker's start and
 * the finalists' runoff included.
 */
#define KTUNE_TUNE_DEADLINE 7.0
#define KTUNE_TUNE_DEADLINE_TEXT "7"

/*
 * One config per distinct compiled kernel of a family's space (GROUP_SIZE
 * and SPLIT_K are kernel arguments: set to 1), in space order; malloc'd.
 */
int ktune__gemm_space_kernels(int family, struct ktune_config **out, int *n,
			      struct ktune_err *e);

/* One compile job: a key variant and a config; filled with the outcome. */
struct ktune_compile_job {
	struct ktune_key key;
	struct ktune_config cfg;
	struct ktune_cubin cubin; /* on success */
	int status;               /* ktune_status */
	int timed_out;            /* status is KTUNE_ERR_COMPILE because NVRTC ran past its deadline */
	char *log;                /* malloc'd message on failure */
};

/* Compiles the jobs on `threads` threads (0: one per core).  Never fails as a whole. */
void ktune__compile_jobs(struct ktune_compile_job *jobs, int n, const char *arch,
			 const char *cache_dir, int threads);

/* Frees the cubins and logs of the jobs. */
void ktune__compile_jobs_free(struct ktune_compile_job *jobs, int n);

#endif
