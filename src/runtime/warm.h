/*
 * warm.h - compiling a device's tuned and shipped kernels into the cubin
 * cache ahead of the calls (warm.c), in plain C for the ktune command: a
 * context (ktune_open's, or ktune__ctx_offline's for a device not here)
 * and a report.
 */
#ifndef KTUNE_WARM_H
#define KTUNE_WARM_H

#include "db/db.h"

/* What a warm did. */
struct ktune_warm_report {
	int keys;               /* tuned and shipped keys of the device that the filter kept */
	int kernels;            /* the distinct kernels dispatch serves them with */
	int compiled;           /* compiled with NVRTC now */
	int cached;             /* in the cache already */
	int failed;
	double seconds;         /* wall time */
	double compile_seconds; /* NVRTC time summed over the compiles */
	char cache_dir[512];
	char first_error[512];  /* "KEY: message" of the first failure */
};

/* warm_state of a context. */
enum { KTUNE_WARM_NONE = 0, KTUNE_WARM_RUNNING = 1, KTUNE_WARM_DONE = 2 };

/*
 * Compiles into the context's cubin cache, on `threads` threads (0: one
 * per core), the kernel dispatch serves each tuned and shipped key of the
 * device with (only the keys the filter matches: op, dtype, variant in
 * f->layout, m, n, k; NULL: all).  No GPU is needed.  *stop, when not NULL,
 * is read before each compile: non-zero stops there.  Fails only when
 * there is no usable cache (KTUNE_ERR_UNSUPPORTED) or memory; kernels that
 * fail to compile are counted in r.  Thread-safe with calls on ctx.
 */
int ktune__warm(ktune_ctx *ctx, const struct ktune_filter *f, int threads, const int *stop,
		struct ktune_warm_report *r, struct ktune_err *e);

#endif
