/*
 * compile.h - NVRTC compilation of a template to a CUBIN for one arch, with a
 * disk cache content-addressed by sha256(source, options, arch, NVRTC
 * version, and the prelude's text if the source includes it).  Thread-safe:
 * several threads may compile at once.
 *
 * The prelude: the elementwise templates share kernels/templates/prelude.cuh
 * through `#include "prelude.cuh"` (KTUNE_PRELUDE, templates.h).  Every
 * compile hands NVRTC the embedded file as an in-memory header of that
 * name, so no include path is needed; a source that mentions "prelude.cuh"
 * has the header's text in its cache key, so editing the prelude
 * recompiles.  (Tuned results carry a template hash that changes with the
 * prelude too: ktune__op_family_hash, src/ops/op.h.)
 */
#ifndef KTUNE_COMPILE_H
#define KTUNE_COMPILE_H

#include <stddef.h>

#include "common.h"

#define KTUNE_MAX_OPTIONS 24

/* What ptxas reported for the kernel (from the -v log, kept with the cached cubin). */
struct ktune_resources {
	int registers;
	int spill_stores, spill_loads; /* bytes */
	int smem_static;               /* bytes */
	int stack;                     /* bytes of stack frame */
};

struct ktune_cubin {
	void *data; /* malloc'd */
	size_t size;
	struct ktune_resources res;
	int cached;       /* 1: came from the disk cache */
	double seconds;   /* time spent compiling (0 when cached) */
};

/*
 * Compiles `source` (named `name` in messages) with the given options
 * (NVRTC flags such as "-DBLOCK_M=128") for `arch` ("sm_90", "sm_90a").
 * On KTUNE_ERR_COMPILE, e holds the NVRTC log.  cache_dir NULL: the default
 * (<cache dir>/cubin); "" disables the cache.
 */
int ktune__compile(const char *name, const char *source, size_t len,
		   const char *const *options, int noptions, const char *arch,
		   const char *cache_dir, struct ktune_cubin *out, struct ktune_err *e);

void ktune__cubin_free(struct ktune_cubin *c);

/* ptxas's "-v" log into res: the worst figures over the module's kernels. */
void ktune__ptxas_resources(const char *log, struct ktune_resources *res);

/* NVRTC's version, "13.0".  Thread-safe. */
const char *ktune__nvrtc_version(void);

#endif
