/*
 * context.h - what a ktune_ctx holds, for the runtime's files and the tuner:
 * the device, the loaded kernels, the dispatch table and the split-K
 * scratch buffers of each stream.
 */
#ifndef KTUNE_CONTEXT_H
#define KTUNE_CONTEXT_H

#include <pthread.h>

#include "common.h"
#include "db/db.h"
#include "ops/gemm-model.h"
#include "ops/gemm.h"
#include "ops/op.h"
#include "runtime/compile.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/record.h"
#include "runtime/warm.h"

/* The wgmma family's tensor maps (A, B and C) and the operands they were encoded for. */
struct ktune_tensor_maps {
	CUdeviceptr a, b, c;
	int64_t m, n, k, lda, ldb, ldc;
	CUtensorMap map_a, map_b, map_c;
};

/* A compiled and loaded kernel variant: one per (key variant, compiled config). */
struct ktune_kernel {
	struct ktune_key key; /* the key it was first compiled for */
	char op[16];
	ktune_dtype dtype;
	char variant[KTUNE_KEY_VARIANT];
	int aligned;
	int read_once_a, read_once_b;
	struct ktune_config cfg; /* group_size and split_k unused */
	CUmodule module;
	CUfunction fn;                           /* the first (a GEMM's, a one-kernel op's) */
	CUfunction fns[KTUNE_OP_MAX_KERNELS];    /* an op's: its family's entries, in order */
	int static_smem[KTUNE_OP_MAX_KERNELS];   /* an op's: each entry's static shared memory, bytes */
	size_t smem;
	int max_clusters; /* wgmma, CLUSTER_M=2: clusters resident at once (cuOccupancyMaxActiveClusters) */
	struct ktune_tensor_maps *maps; /* wgmma: the last call's tensor maps; guarded by ctx->lock */
	struct ktune_resources res;
	struct ktune_kernel *next;
};

/* A tuned result loaded from the database or a shipped file. */
struct ktune_entry {
	struct ktune_key key;
	struct ktune_config cfg;
	int same_device; /* 0: another device of the same arch */
	int shipped;     /* 1: from a file built into the library, the lowest priority */
	double ratio;    /* GEMM: cuBLAS time / its time where it was tuned; 0: not measured */
};

/*
 * What served a call (ktune_last_dispatch).  A GEMM key nobody tuned is
 * served by "nearest", "model" or "cublas"; another op's by "nearest" or
 * "default" (its analytic default).
 */
#define KTUNE_SRC_EXACT "exact"
#define KTUNE_SRC_ARCH "arch"
#define KTUNE_SRC_SHIPPED "shipped"
#define KTUNE_SRC_NEAREST "nearest"
#define KTUNE_SRC_MODEL "model"
#define KTUNE_SRC_CUBLAS "cublas"
#define KTUNE_SRC_DEFAULT "default"

/* Who may serve a GEMM key without a tuned entry of its own (KTUNE_FALLBACK). */
enum ktune_fallback {
	KTUNE_FALLBACK_AUTO,    /* the regime decides: a matching tuned neighbour, the model, or cuBLAS;
				 * a key ktune's kernel serves untuned is then timed against cuBLAS
				 * once, without waiting, and the faster kept */
	KTUNE_FALLBACK_MODEL,   /* never cuBLAS: the neighbour or the model */
	KTUNE_FALLBACK_CUBLAS,  /* cuBLAS wherever it loads */
	KTUNE_FALLBACK_MEASURE, /* as auto, and the first call of every untuned key (cuBLAS's too)
				 * waits for its timing */
};

/* Where a key's timing against cuBLAS stands (fallback.c). */
enum ktune_measure_state {
	KTUNE_MEASURE_NONE,     /* decided: nothing to time */
	KTUNE_MEASURE_PENDING,  /* to be timed at a call not captured into a graph */
	KTUNE_MEASURE_LAUNCHING,/* a call is enqueueing the runs */
	KTUNE_MEASURE_RUNNING,  /* the runs are on a stream; a later call reads them when done */
	KTUNE_MEASURE_READING,  /* a call is reading them */
};

/* A key already resolved to a config and a kernel; the hot path's hash table. */
struct ktune_resolved {
	struct ktune_key key;
	struct ktune_config cfg;     /* ktune's config, also where cuBLAS serves (measure mode compares it) */
	const char *source;          /* KTUNE_SRC_*; read and written atomically (measuring changes it once) */
	const char *own;             /* where cfg came from (struct ktune_choice) */
	struct ktune_kernel *kernel; /* NULL while cuBLAS serves and nothing needed compiling */
	int measure;                 /* atomic: enum ktune_measure_state */
	struct ktune_race *race;   /* the runs in flight while measure is KTUNE_MEASURE_RUNNING */
	struct ktune_recorded *miss; /* a key without a tuned entry of its own: its calls count here; else NULL */
	struct ktune_resolved *next;
};

/*
 * Scratch of one stream: split-K partials and counters, cuBLAS's workspace.
 * Kernels on one stream run in order, so they can share it.
 */
struct ktune_workspace {
	CUstream stream;
	CUdeviceptr partials, counters;
	size_t partials_bytes, ncounters;
	CUdeviceptr blas; /* KTUNE_CUBLAS_WORKSPACE bytes, allocated at the stream's first cuBLAS call */
};

#define KTUNE_RESOLVED_BUCKETS 1024
#define KTUNE_MAX_WORKSPACES 64

struct ktune_ctx {
	int ordinal;
	CUdevice dev;
	CUcontext cu;
	struct ktune_device_id id;
	int smem_optin;  /* shared memory per block after opt-in */
	int l2_bytes;
	double mem_gbps; /* DRAM bandwidth from the memory clock and bus width (0: not reported) */
	int driver_version;
	enum ktune_fallback fallback; /* KTUNE_FALLBACK at open */
	char *db_path;   /* malloc'd; "" for none */
	char *cache_dir; /* malloc'd cubin cache; "" disables */

	pthread_mutex_t lock; /* guards everything below */
	struct ktune_entry *entries;
	int nentries;
	struct ktune_resolved *resolved[KTUNE_RESOLVED_BUCKETS];
	struct ktune_resolved *retired; /* resolved before a background tune stored their key: freed at close */
	struct ktune_kernel *kernels;
	struct ktune_workspace workspaces[KTUNE_MAX_WORKSPACES];
	int nworkspaces;
	struct ktune_cublas *blas; /* loaded at the first key it serves */
	int blas_state;            /* 0: not tried, 1: loaded, -1: not available (or not allowed) */
	CUdeviceptr constants;     /* ones (f32, f16, bf16), zeros and a sink: ktune__ctx_constant */
	int from_device, from_arch, from_shipped; /* entries loaded from each source */
	char shipped_names[256];                   /* the shipped files loaded, comma-separated */
	/* what calls cost (ktune_get_stats) */
	int64_t calls, keys, kernels_loaded, nvrtc_compiles, cache_loads;
	double nvrtc_seconds;
	char errmsg[sizeof(((struct ktune_err *)0)->msg)];

	/* the last ktune_warm's (warm.c) */
	int warm_state;                /* KTUNE_WARM_NONE, _RUNNING, _DONE */
	int warm_status;
	struct ktune_warm_report warm;

	/* Below: not guarded by lock. */
	struct ktune_record record; /* the keys served without a tuned entry; its own lock */
	char *record_path;          /* where ktune_close saves them: a misses file; NULL: see record_db */
	int record_db;              /* 1: into the database */
	pthread_t warm_thread;      /* a background warm (ktune_warm, wait 0) */
	int warm_started;           /* warm_thread is to be joined */
	int warm_stop;              /* atomic: ktune_close asks the warm thread to stop */
	struct ktune_bg *bg;        /* KTUNE_TUNE=background (tune-on-use.c); NULL: off */
};

/*
 * The longest vector a caller may leave NULL (enum ktune_buf_optional): the
 * context holds ones of each dtype, zeros and a sink of this many elements.
 */
#define KTUNE_CONSTANT_ELEMS 131072

/*
 * Where an op reads or writes a NULL optional buffer of `dtype`: ones,
 * zeros, or the sink (written concurrently by any call: never read).
 */
CUdeviceptr ktune__ctx_constant(const ktune_ctx *ctx, enum ktune_buf_optional or, ktune_dtype dtype);

/* What served the last call of this thread (ktune_last_dispatch; context.c). */
extern __thread const char *ktune__last_dispatch;

/* Stores e's message as the context's last error and returns status. */
int ktune__ctx_error(ktune_ctx *ctx, int status, const struct ktune_err *e);

/* Makes the context's CUDA context current; *pushed tells whether to pop it after. */
int ktune__ctx_enter(ktune_ctx *ctx, int *pushed, struct ktune_err *e);
void ktune__ctx_leave(ktune_ctx *ctx, int pushed);

/*
 * The loaded kernel for the key's variant of cfg, compiling (or loading from
 * the disk cache) on first use; with `cubin` non-NULL that code is loaded
 * instead of compiling.  Caller holds ctx->lock and has the context current.
 */
int ktune__kernel_get(ktune_ctx *ctx, const struct ktune_key *key,
		      const struct ktune_config *cfg, const struct ktune_cubin *cubin,
		      struct ktune_kernel **out, struct ktune_err *e);

/* Whether two (key, config) pairs compile to the same kernel: one compile, one cache entry. */
int ktune__kernel_same(const struct ktune_key *ka, const struct ktune_config *a, const struct ktune_key *kb,
		       const struct ktune_config *b);

/* Compiles (no GPU needed) the key's variant of cfg for arch. */
int ktune__kernel_compile(const struct ktune_key *key, const struct ktune_config *cfg,
			  const char *arch, const char *cache_dir, struct ktune_cubin *out,
			  struct ktune_err *e);

/* Loads the device's tuned entries from the database at ctx->db_path. */
int ktune__dispatch_load(ktune_ctx *ctx, struct ktune_err *e);

/*
 * Adds a result tuned while the context is open to its entries and
 * retires the key's resolved choice, so that its next call takes it; 0 if
 * the result is not one dispatch can use here.  Caller holds ctx->lock.
 */
int ktune__dispatch_adopt(ktune_ctx *ctx, const struct ktune_result *r);

/* What dispatch decided for a key. */
struct ktune_choice {
	struct ktune_config cfg; /* ktune's config for the key, also where cuBLAS serves it */
	const char *source;      /* what serves the key: KTUNE_SRC_* */
	const char *own;         /* where cfg came from: what would serve the key without cuBLAS */
	const struct ktune_entry *near; /* own is nearest: the entry cfg was borrowed (and fitted) from */
};

/*
 * What serves a key (dispatch.c has the order).  A pure function of the
 * key, the loaded entries, the device's figures, the fallback policy and
 * whether cuBLAS is known to be missing (ctx->blas_state < 0): no GPU
 * call, nothing counted (resolve.c counts a key whose `own` is not a tuned
 * source as a miss, once: ktune__source_tuned).  Caller holds ctx->lock.
 */
void ktune__dispatch_decide(ktune_ctx *ctx, const struct ktune_key *key, struct ktune_choice *out);
/* The same, for callers that want the config and the source (a static string) alone. */
void ktune__dispatch_choose(ktune_ctx *ctx, const struct ktune_key *key,
			    struct ktune_config *cfg, const char **source);

/* The model's view of the context's device (gemm-model.h). */
void ktune__ctx_model_device(const ktune_ctx *ctx, struct ktune_gemm_device *out);

/*
 * Loads cuBLAS for the context if that has not been tried yet; returns 1
 * if it is there.  Caller holds ctx->lock and has the context current.
 */
int ktune__ctx_blas(ktune_ctx *ctx);

/* Frees a key's race against cuBLAS still in flight (ktune_close); its events end with the runs. */
void ktune__race_free(struct ktune_race *t);

/*
 * What serves this call of a resolved GEMM key.  A key whose measure is
 * pending is timed here: ktune's config and cuBLAS in turns on the call's
 * operands, into scratch (not while the stream is captured into a graph,
 * nor where C is over 256 MiB).  Under KTUNE_FALLBACK=measure the call
 * waits for the runs; otherwise they are only enqueued, a later call reads
 * them once they are done, and until then the key keeps its source.  The
 * faster becomes the key's source.  Caller has the context current and
 * does not hold ctx->lock.
 */
const char *ktune__fallback_source(ktune_ctx *ctx, struct ktune_resolved *r, const struct ktune_key *key,
				   float alpha, CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb,
				   CUdeviceptr c, int64_t ldc, CUstream stream);

/*
 * Runs a GEMM through cuBLAS on the stream, with the stream's workspace.
 * Caller has the context current; takes ctx->lock to find the workspace.
 */
int ktune__blas_launch(ktune_ctx *ctx, const struct ktune_key *key, float alpha, CUdeviceptr a,
		       int64_t lda, CUdeviceptr b, int64_t ldb, float beta, CUdeviceptr c, int64_t ldc,
		       CUstream stream, struct ktune_err *e);

/*
 * The stream's scratch, grown to fit: partials_bytes of partials and
 * ncounters zeroed counters (kernels that use them leave them at zero);
 * ktune_close frees it.  Caller holds ctx->lock.
 */
int ktune__workspace_get(ktune_ctx *ctx, CUstream stream, size_t partials_bytes, size_t ncounters,
			 struct ktune_workspace **out, struct ktune_err *e);

/*
 * Launches one GEMM with a given kernel and config (split-K scratch from the
 * stream's workspace).  Caller has the context current; takes ctx->lock only
 * to find the workspace.
 */
int ktune__gemm_launch(ktune_ctx *ctx, struct ktune_kernel *kernel, const struct ktune_key *key,
		       const struct ktune_config *cfg, float alpha, CUdeviceptr a, int64_t lda,
		       CUdeviceptr b, int64_t ldb, float beta, CUdeviceptr c, int64_t ldc,
		       CUstream stream, struct ktune_err *e);

/*
 * The resolved entry for a key (exact sizes in, bucketed by its op first),
 * choosing its config and compiling (or loading) its kernel on first use.
 * Caller holds ctx->lock and has the context current.
 */
int ktune__resolve(ktune_ctx *ctx, const struct ktune_key *key, struct ktune_resolved **out,
		   struct ktune_err *e);

/*
 * Takes a key's resolved choice out of the table onto ctx->retired, not
 * freed (a call may be using it outside the lock), so that its next call
 * resolves it again.  Caller holds ctx->lock.
 */
void ktune__resolve_retire(ktune_ctx *ctx, const struct ktune_key *key);

/* The bucket of ctx->resolved a key lives in. */
unsigned ktune__resolve_bucket(const struct ktune_key *key);

/*
 * Frees the table's and the retired choices, and their races in flight
 * (whose events want the context current: ktune_close calls it entered,
 * and again after, when it could not enter).
 */
void ktune__resolved_free(ktune_ctx *ctx);

/*
 * Launches one call of an op other than GEMM with a given kernel and config:
 * the op's kernels (geometry and arguments, or its steps), with scratch from
 * the stream's workspace where the op asks for it.  Caller has the context
 * current; takes ctx->lock only to find the workspace.
 */
int ktune__op_launch(ktune_ctx *ctx, struct ktune_kernel *kernel, const struct ktune_key *key,
		     const struct ktune_config *cfg, const struct ktune_op_call *call, CUstream stream,
		     struct ktune_err *e);

/*
 * Recording the keys served without a tuned entry (misses.c): where
 * ktune_close saves them (path a misses file, NULL the database, ""
 * nowhere); KTUNE_RECORD read at ktune_open; the save at ktune_close.
 */
int ktune__record_target(ktune_ctx *ctx, const char *path, struct ktune_err *e);

/* KTUNE_WARM read at ktune_open (warm.c); waiting for a background warm to end (ktune_close). */
int ktune__warm_open(ktune_ctx *ctx, struct ktune_err *e);
void ktune__warm_join(ktune_ctx *ctx);
int ktune__record_open(ktune_ctx *ctx, struct ktune_err *e);
void ktune__record_close(ktune_ctx *ctx);

/*
 * KTUNE_TUNE=background (tune-on-use.c): read at ktune_open; a key served
 * without a tuned entry of its own queued at its first call (cheap: a
 * mutex and a signal; the thread starts at the first) while fewer than
 * KTUNE_TUNE_MAX have been; the counts of keys queued or being tuned,
 * tuned, failed and skipped (the limit reached); ktune_close drops the
 * queue and waits for the tune in progress.
 */
int ktune__bg_open(ktune_ctx *ctx, struct ktune_err *e);
void ktune__bg_enqueue(ktune_ctx *ctx, const struct ktune_key *key);
void ktune__bg_counts(ktune_ctx *ctx, int *queued, int *tuned, int *failed, int *skipped);
void ktune__bg_close(ktune_ctx *ctx);

#endif
