/*
 * device.h - the runtime's answers about a GPU in plain C types, for the
 * tuner and the ktune command, which never see CUDA's: whether the driver
 * can be used at all, the device of an open context, and where that
 * context's dispatch entries came from.  driver.h and context.h hold the
 * CUDA side; device.c reads them.
 */
#ifndef KTUNE_DEVICE_H
#define KTUNE_DEVICE_H

#include <stddef.h>

#include "common.h"
#include "db/db.h"

/*
 * Loads libcuda.so.1 and calls cuInit.  Returns KTUNE_OK,
 * KTUNE_ERR_NO_DRIVER (no library, or a driver too old for a symbol) or
 * KTUNE_ERR_NO_DEVICE (cuInit found no device), with the reason in e.
 * Later calls return the first call's result.  Thread-safe.  (driver.c)
 */
int ktune__driver_load(struct ktune_err *e);

/* A GPU as ktune info and the tuner's reports describe it. */
struct ktune_device_info {
	struct ktune_device_id id; /* name, arch ("sm_90"), SM count */
	size_t total_mem;          /* bytes; 0 where not known */
	int smem_optin;            /* shared memory a block may opt in to, bytes */
	int l2_bytes;
	int driver_version;        /* CUDA's number: 12040 is 12.4 */
	double mem_gbps;           /* DRAM bandwidth the GEMM model assumes; 0 where not reported */
};

/* The device of an open context. */
void ktune__ctx_device_info(ktune_ctx *ctx, struct ktune_device_info *out);

/* Where the tuned entries an open context dispatches from came from (ktune_open loads them). */
struct ktune_dispatch_sources {
	int from_device;         /* the database: tuned on this GPU */
	int from_arch;           /* the database: tuned on another GPU of this arch */
	int from_shipped;        /* the embedded db/<arch>/<gpu>.yaml files */
	int shipped_here;        /* of those, the entries tuned on this GPU */
	char shipped_names[256]; /* the shipped files loaded, comma-separated; "" for none */
};

/* Counts an open context's entries by source.  Thread-safe. */
void ktune__ctx_dispatch_sources(ktune_ctx *ctx, struct ktune_dispatch_sources *out);

/* Who serves an open context's GEMM keys without a tuned entry of their own. */
struct ktune_fallback_info {
	char policy[16]; /* KTUNE_FALLBACK: "auto", "model", "cublas", "measure" */
	char cublas[32]; /* the version of the cuBLAS it loads; "" if there is none (or "model") */
};

/* Fills *out, loading cuBLAS for the context if the policy allows it.  Thread-safe. */
void ktune__ctx_fallback(ktune_ctx *ctx, struct ktune_fallback_info *out);

#endif
