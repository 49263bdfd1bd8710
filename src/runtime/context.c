/*
 * context.c - opening and closing a ktune context on a device, and what a
 * context answers about itself: its last error and what served this
 * thread's last call, and the scratch of each stream (GEMM's split-K
 * partials, an op's workspace).  Closing frees all the context holds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/cublas.h"

__thread const char *ktune__last_dispatch = "none";

const char *ktune_last_dispatch(const ktune_ctx *ctx)
{
	(void)ctx;
	return ktune__last_dispatch;
}

int ktune__ctx_error(ktune_ctx *ctx, int status, const struct ktune_err *e)
{
	if (ctx && e && e->msg != ctx->errmsg)
		snprintf(ctx->errmsg, sizeof(ctx->errmsg), "%s", e->msg);
	return status;
}

ktune_status ktune_get_stats(ktune_ctx *ctx, ktune_stats *out, size_t size)
{
	ktune_stats s;
	if (!ctx || !out || size == 0)
		return KTUNE_ERR_INVALID;
	memset(&s, 0, sizeof(s));
	pthread_mutex_lock(&ctx->lock);
	s.calls = ctx->calls;
	s.keys = ctx->keys;
	s.kernels = ctx->kernels_loaded;
	s.nvrtc_compiles = ctx->nvrtc_compiles;
	s.nvrtc_seconds = ctx->nvrtc_seconds;
	s.cache_loads = ctx->cache_loads;
	s.warm_state = ctx->warm_state;
	s.warm_compiled = ctx->warm.compiled;
	s.warm_cached = ctx->warm.cached;
	s.warm_failed = ctx->warm.failed;
	s.warm_seconds = ctx->warm.seconds;
	pthread_mutex_unlock(&ctx->lock);
	ktune__record_totals(&ctx->record, &s.missed_keys, &s.missed_calls);
	int queued, tuned, failed, skipped;
	ktune__bg_counts(ctx, &queued, &tuned, &failed, &skipped);
	s.tune_queued = queued;
	s.tune_done = tuned;
	s.tune_failed = failed;
	s.tune_skipped = skipped;
	/* a caller built against an older, shorter struct gets its fields */
	memcpy(out, &s, size < sizeof(s) ? size : sizeof(s));
	return KTUNE_OK;
}

const char *ktune_errmsg(const ktune_ctx *ctx)
{
	return ctx ? ctx->errmsg : "no context";
}

int ktune__ctx_enter(ktune_ctx *ctx, int *pushed, struct ktune_err *e)
{
	CUcontext cur = NULL;
	*pushed = 0;
	CU_TRY(e, cuCtxGetCurrent(&cur));
	if (cur != ctx->cu) {
		CU_TRY(e, cuCtxPushCurrent_v2(ctx->cu));
		*pushed = 1;
	}
	return KTUNE_OK;
}

void ktune__ctx_leave(ktune_ctx *ctx, int pushed)
{
	CUcontext popped;
	(void)ctx;
	if (pushed)
		ktune_cu.cuCtxPopCurrent_v2(&popped);
}

static int read_device(ktune_ctx *ctx, struct ktune_err *e)
{
	int count = 0, major = 0, minor = 0;
	CU_TRY(e, cuDeviceGetCount(&count));
	if (count == 0)
		return ktune__fail(e, KTUNE_ERR_NO_DEVICE, "no CUDA device");
	if (ctx->ordinal < 0 || ctx->ordinal >= count)
		return ktune__fail(e, KTUNE_ERR_INVALID, "device %d does not exist (%d device%s)",
				   ctx->ordinal, count, count == 1 ? "" : "s");
	CU_TRY(e, cuDeviceGet(&ctx->dev, ctx->ordinal));
	CU_TRY(e, cuDeviceGetName(ctx->id.name, sizeof(ctx->id.name), ctx->dev));
	CU_TRY(e, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->dev));
	CU_TRY(e, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->dev));
	CU_TRY(e, cuDeviceGetAttribute(&ctx->id.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
				       ctx->dev));
	CU_TRY(e, cuDeviceGetAttribute(&ctx->smem_optin,
				       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ctx->dev));
	CU_TRY(e, cuDeviceGetAttribute(&ctx->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx->dev));
	CU_TRY(e, cuDriverGetVersion(&ctx->driver_version));
	/*
	 * DRAM bandwidth for the GEMM model: two transfers a memory clock over
	 * the bus, of which a copy reaches about 90% (3.0 of the H100's 3.35
	 * TB/s).  Where the driver reports neither, the model takes its arch's.
	 */
	int mem_khz = 0, bus_bits = 0;
	if (!ktune_cu.cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, ctx->dev) &&
	    !ktune_cu.cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, ctx->dev) &&
	    mem_khz > 0 && bus_bits > 0)
		ctx->mem_gbps = 0.9 * 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e9;
	snprintf(ctx->id.arch, sizeof(ctx->id.arch), "sm_%d%d", major, minor);
	if (major < 8)
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED,
				   "device %d '%s' is %s; ktune needs sm_80 or newer",
				   ctx->ordinal, ctx->id.name, ctx->id.arch);
	return KTUNE_OK;
}

/* KTUNE_FALLBACK: who serves GEMM keys without a tuned entry (context.h); unset or "" is auto. */
static int read_fallback(ktune_ctx *ctx, struct ktune_err *e)
{
	static const char *const names[] = { "auto", "model", "cublas", "measure" };
	const char *v = getenv("KTUNE_FALLBACK");
	if (!v || !*v)
		return KTUNE_OK;
	for (int i = 0; i < 4; i++)
		if (!strcmp(v, names[i])) {
			ctx->fallback = (enum ktune_fallback)i;
			return KTUNE_OK;
		}
	return ktune__fail(e, KTUNE_ERR_INVALID, "KTUNE_FALLBACK='%.32s' is not one of auto, model, cublas, measure", v);
}

/* The vectors behind ktune__ctx_constant, in this order, each KTUNE_CONSTANT_ELEMS 4-byte slots. */
enum { ONES_F32, ONES_F16, ONES_BF16, ZEROS, SINK, NCONSTANTS };

static int constants_make(ktune_ctx *ctx, struct ktune_err *e)
{
	const size_t n = KTUNE_CONSTANT_ELEMS, slot = n * 4;
	int pushed, rc;
	if ((rc = ktune__ctx_enter(ctx, &pushed, e)))
		return rc;
	CU_GOTO(e, rc, cuMemAlloc_v2(&ctx->constants, NCONSTANTS * slot));
	CU_GOTO(e, rc, cuMemsetD32_v2(ctx->constants + ONES_F32 * slot, 0x3f800000u, n));
	CU_GOTO(e, rc, cuMemsetD16_v2(ctx->constants + ONES_F16 * slot, 0x3c00, n));
	CU_GOTO(e, rc, cuMemsetD16_v2(ctx->constants + ONES_BF16 * slot, 0x3f80, n));
	CU_GOTO(e, rc, cuMemsetD8_v2(ctx->constants + ZEROS * slot, 0, slot));
out:
	ktune__ctx_leave(ctx, pushed);
	return rc;
}

CUdeviceptr ktune__ctx_constant(const ktune_ctx *ctx, enum ktune_buf_optional or, ktune_dtype dtype)
{
	const size_t slot = KTUNE_CONSTANT_ELEMS * 4;
	if (or == KTUNE_OR_ZEROS)
		return ctx->constants + ZEROS * slot;
	if (or == KTUNE_OR_DISCARD)
		return ctx->constants + SINK * slot;
	return ctx->constants + (dtype == KTUNE_F16 ? ONES_F16 : dtype == KTUNE_BF16 ? ONES_BF16 : ONES_F32) * slot;
}

ktune_status ktune_open(const char *db_path, int device, ktune_ctx **out, char *errbuf,
			size_t errlen)
{
	struct ktune_err e = { "" };
	ktune_ctx *ctx = NULL;
	int rc;

	if (!out)
		return KTUNE_ERR_INVALID;
	*out = NULL;
	if ((rc = ktune__driver_load(&e)))
		goto fail;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		rc = ktune__fail(&e, KTUNE_ERR_NOMEM, "out of memory");
		goto fail;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	ktune__record_init(&ctx->record);
	ctx->ordinal = device;
	if ((rc = read_fallback(ctx, &e)))
		goto fail;
	if (ctx->fallback == KTUNE_FALLBACK_MODEL)
		ctx->blas_state = -1; /* never loaded */
	if (db_path && *db_path) {
		if ((rc = ktune__path_check(db_path, "database", &e)))
			goto fail;
		ctx->db_path = strdup(db_path);
	} else if (db_path) {
		ctx->db_path = strdup(""); /* no database, by request */
	} else if (ktune__default_db_path(&ctx->db_path, NULL) != KTUNE_OK) {
		/* an untrusted default folder is not read, as the cubin cache is not */
		ctx->db_path = strdup("");
	}
	const char *no_cache = getenv("KTUNE_NO_CACHE");
	char *base = NULL;
	if (no_cache && *no_cache && strcmp(no_cache, "0"))
		ctx->cache_dir = strdup("");
	else if (ktune__cache_dir(&base, NULL) == KTUNE_OK && (ctx->cache_dir = malloc(strlen(base) + 7)))
		sprintf(ctx->cache_dir, "%s/cubin", base);
	else
		ctx->cache_dir = strdup(""); /* no cache rather than a cut path */
	free(base);
	if (!ctx->db_path || !ctx->cache_dir) {
		rc = ktune__fail(&e, KTUNE_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = read_device(ctx, &e)))
		goto fail;
	{
		CUresult r = ktune_cu.cuDevicePrimaryCtxRetain(&ctx->cu, ctx->dev);
		if (r != CUDA_SUCCESS) {
			char d[256];
			ktune__cu_describe(r, d, sizeof(d));
			rc = ktune__fail(&e, KTUNE_ERR_CUDA, "cannot retain the primary context of device %d: %s",
					 device, d);
			ctx->cu = NULL;
			goto fail;
		}
	}
	if ((rc = ktune__dispatch_load(ctx, &e)) || (rc = constants_make(ctx, &e)) ||
	    (rc = ktune__record_open(ctx, &e)) || (rc = ktune__warm_open(ctx, &e)) ||
	    (rc = ktune__bg_open(ctx, &e)))
		goto fail;
	*out = ctx;
	return KTUNE_OK;
fail:
	if (errbuf && errlen)
		snprintf(errbuf, errlen, "%s", e.msg);
	ktune_close(ctx);
	return rc;
}

int ktune__ctx_offline(const struct ktune_device_id *id, int smem_optin, const char *db_path, ktune_ctx **out,
		       struct ktune_err *e)
{
	ktune_ctx *ctx = calloc(1, sizeof(*ctx));
	char *base = NULL;
	int rc;

	*out = NULL;
	if (!ctx)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	pthread_mutex_init(&ctx->lock, NULL);
	ktune__record_init(&ctx->record);
	ctx->ordinal = -1;
	ctx->id = *id;
	ctx->smem_optin = smem_optin;
	if ((rc = read_fallback(ctx, e))) { /* dispatch's choices as a program's context makes them */
		ktune_close(ctx);
		return rc;
	}
	if (ctx->fallback == KTUNE_FALLBACK_MODEL)
		ctx->blas_state = -1;
	ctx->db_path = strdup(db_path ? db_path : "");
	if (ktune__cache_dir(&base, NULL) == KTUNE_OK && (ctx->cache_dir = malloc(strlen(base) + 7)))
		sprintf(ctx->cache_dir, "%s/cubin", base);
	else
		ctx->cache_dir = strdup("");
	free(base);
	if (!ctx->db_path || !ctx->cache_dir) {
		ktune_close(ctx);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	}
	if ((rc = ktune__dispatch_load(ctx, e))) {
		ktune_close(ctx);
		return rc;
	}
	*out = ctx;
	return KTUNE_OK;
}

/* Frees every stream's split-K scratch (the context must be current). */
int ktune__workspace_get(ktune_ctx *ctx, CUstream stream, size_t partials_bytes, size_t ncounters,
			 struct ktune_workspace **out, struct ktune_err *e)
{
	struct ktune_workspace *w = NULL;
	for (int i = 0; i < ctx->nworkspaces; i++)
		if (ctx->workspaces[i].stream == stream)
			w = &ctx->workspaces[i];
	if (!w) {
		if (ctx->nworkspaces == KTUNE_MAX_WORKSPACES)
			return ktune__fail(e, KTUNE_ERR_UNSUPPORTED,
					   "scratch for more than %d streams of one context",
					   KTUNE_MAX_WORKSPACES);
		w = &ctx->workspaces[ctx->nworkspaces++];
		memset(w, 0, sizeof(*w));
		w->stream = stream;
	}
	if (w->partials_bytes < partials_bytes || w->ncounters < ncounters) {
		/* kernels queued on this stream may still use the old buffers */
		CU_TRY(e, cuStreamSynchronize(stream));
		if (w->partials_bytes < partials_bytes) {
			if (w->partials)
				ktune_cu.cuMemFree_v2(w->partials);
			w->partials = 0;
			w->partials_bytes = 0;
			CU_TRY(e, cuMemAlloc_v2(&w->partials, partials_bytes));
			w->partials_bytes = partials_bytes;
		}
		if (w->ncounters < ncounters) {
			if (w->counters)
				ktune_cu.cuMemFree_v2(w->counters);
			w->counters = 0;
			w->ncounters = 0;
			CU_TRY(e, cuMemAlloc_v2(&w->counters, ncounters * sizeof(int)));
			/* the kernel leaves the counters at zero; they start there */
			CU_TRY(e, cuMemsetD32_v2(w->counters, 0, ncounters));
			w->ncounters = ncounters;
		}
	}
	*out = w;
	return KTUNE_OK;
}

static void workspaces_free(ktune_ctx *ctx)
{
	for (int i = 0; i < ctx->nworkspaces; i++) {
		if (ctx->workspaces[i].partials)
			ktune_cu.cuMemFree_v2(ctx->workspaces[i].partials);
		if (ctx->workspaces[i].counters)
			ktune_cu.cuMemFree_v2(ctx->workspaces[i].counters);
		if (ctx->workspaces[i].blas)
			ktune_cu.cuMemFree_v2(ctx->workspaces[i].blas);
	}
	ctx->nworkspaces = 0;
}

void ktune_close(ktune_ctx *ctx)
{
	if (!ctx)
		return;
	/* a background warm stops after the compile it is in, and is waited for */
	__atomic_store_n(&ctx->warm_stop, 1, __ATOMIC_RELAXED);
	ktune__warm_join(ctx);
	ktune__bg_close(ctx); /* before the entries and the table it adds to go */
	ktune__record_close(ctx);
	if (ctx->cu) {
		int pushed = 0;
		if (!ktune__ctx_enter(ctx, &pushed, NULL)) {
			ktune__resolved_free(ctx); /* races in flight: their events live in this context */
			ktune__cublas_close(ctx->blas); /* its handle lives in this context */
			workspaces_free(ctx);
			if (ctx->constants)
				ktune_cu.cuMemFree_v2(ctx->constants);
			for (struct ktune_kernel *k = ctx->kernels; k; k = k->next)
				ktune_cu.cuModuleUnload(k->module);
			ktune__ctx_leave(ctx, pushed);
		}
		ktune_cu.cuDevicePrimaryCtxRelease_v2(ctx->dev);
	}
	for (struct ktune_kernel *k = ctx->kernels, *next; k; k = next) {
		next = k->next;
		free(k->maps);
		free(k);
	}
	ktune__resolved_free(ctx); /* what is left if the context could not be entered */
	free(ctx->entries);
	free(ctx->db_path);
	free(ctx->cache_dir);
	ktune__record_free(&ctx->record);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}
