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

/*
 * The shared memory a block of an arch may opt in to, bytes, as the device
 * would say: what pruning uses where no GPU is asked (ktune compile,
 * explain and warm of an arch).
 */
int ktune__arch_smem_optin(const char *arch);

/*
 * A context of a device without the device: no CUDA, only its identity,
 * the dispatch entries for it (the database at db_path, "" none, then the
 * shipped files of its arch), KTUNE_FALLBACK (an unknown value fails as
 * in ktune_open) and the default cubin cache, so that dispatch's choices
 * can be asked and kernels compiled for it where no GPU is (ktune explain,
 * ktune warm).  ktune_close frees it; ops cannot be called on it.
 * (context.c)
 */
int ktune__ctx_offline(const struct ktune_device_id *id, int smem_optin, const char *db_path, ktune_ctx **out,
		       struct ktune_err *e);

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

/* A tuned entry the dispatch chain may stop at (struct ktune_dispatch_explain). */
struct ktune_dispatch_step {
	char source[16];  /* "exact" (this GPU, database), "arch" (another GPU of the arch), "shipped" */
	int found;        /* an entry of that source for the very key */
	char config[256]; /* its config */
	int used;         /* dispatch took it */
};

/* How a context on a device would serve one key (ktune explain). */
struct ktune_dispatch_explain {
	struct ktune_dispatch_step steps[3]; /* exact, arch, shipped, in the chain's order */
	char source[16];           /* what serves the key: a step's source, "nearest", "model", "cublas", "default" */
	char own[16];              /* where ktune's config came from (source, unless cuBLAS serves) */
	char config[256];          /* ktune's config, after dispatch fitted it to the device (cuBLAS: what it replaces) */
	int borrowed;              /* own is nearest: the entry it came from is known (config: as fitted to this key) */
	struct ktune_key from;     /* that entry's key */
	char from_config[256];     /* and its config as tuned: another where dispatch fitted it (a split lowered) */
	struct ktune_dispatch_sources sources;
};

/*
 * How a context on device `dev` (no GPU needed: its identity and shared
 * memory suffice) with the database at db_path ("" none) would serve key,
 * as bucketed by its op: the chain's tuned entries for the key, and what
 * dispatch itself chooses (ktune__dispatch_decide: its order and
 * fallbacks are dispatch.c's; KTUNE_FALLBACK is read as ktune_open reads
 * it, and cuBLAS taken to load where it may serve).
 */
int ktune__dispatch_explain(const struct ktune_device_info *dev, const char *db_path, const struct ktune_key *key,
			    struct ktune_dispatch_explain *out, struct ktune_err *e);

/* The GPUs that the tuning files shipped in the library were tuned on; fn's non-zero value stops. */
int ktune__shipped_devices(int (*fn)(const struct ktune_device_id *d, void *arg), void *arg);

#endif
