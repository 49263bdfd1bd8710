/*
 * worker-gpu.c - the operations of the real worker process: a CUDA context
 * on the device, worker.c's problem and candidate runs, NVRTC compiles.
 *
 * A run whose kernel failed is followed by a probe of the context: errors
 * such as an illegal address are sticky, every later call fails too, and
 * the candidate is then "crashed" (the process exits and the tuner starts a
 * fresh one) rather than "launch_error".
 */
#include <stdio.h>
#include <string.h>

#include "tuner/nvml.h"
#include "tuner/protocol.h"

struct gpu_worker {
	ktune_ctx *ctx;
	struct ktune_worker *w;
	int pushed;
};

static struct gpu_worker the_worker;

void *ktune__gpu_worker_state(void)
{
	return &the_worker;
}

static int gpu_hello(void *state, const struct ktune_hello_req *req, struct ktune_hello *out,
		     struct ktune_err *e)
{
	struct gpu_worker *g = state;
	CUuuid uuid;
	int rc;

	if (req->version != KTUNE_PROTOCOL_VERSION)
		return ktune__fail(e, KTUNE_ERR_INVALID, "protocol version %d, worker speaks %d",
				   req->version, KTUNE_PROTOCOL_VERSION);
	/* no database: the worker only runs what the tuner sends */
	if ((rc = ktune_open("", req->device, &g->ctx, e->msg, sizeof(e->msg))))
		return rc;
	if (req->has_cache_dir) {
		char *dir = strndup(req->cache_dir, sizeof(req->cache_dir) - 1);
		if (!dir)
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		free(g->ctx->cache_dir);
		g->ctx->cache_dir = dir;
	}
	if ((rc = ktune__ctx_enter(g->ctx, &g->pushed, e)) ||
	    (rc = ktune__worker_open(g->ctx, &g->w, e)))
		return rc;
	CU_TRY(e, cuDeviceGetUuid_v2(&uuid, g->ctx->dev));
	ktune__nvml_uuid_text((const unsigned char *)uuid.bytes, out->uuid);
	out->id = g->ctx->id;
	out->smem_optin = g->ctx->smem_optin;
	out->l2_bytes = g->ctx->l2_bytes;
	out->driver_version = g->ctx->driver_version;
	out->mem_gbps = g->ctx->mem_gbps;
	snprintf(out->cublas_version, sizeof(out->cublas_version), "%s",
		 ktune__worker_cublas_version(g->w));
	return KTUNE_OK;
}

static int gpu_problem(void *state, const struct ktune_problem *in, struct ktune_problem *out,
		       struct ktune_err *e)
{
	struct gpu_worker *g = state;
	int rc = ktune__worker_set_problem(g->w, in, e);
	if (!rc)
		*out = *ktune__worker_problem(g->w);
	return rc;
}

static int gpu_compile(void *state, const struct ktune_key *key, const struct ktune_config *cfg,
		       struct ktune_cubin *out, struct ktune_err *e)
{
	struct gpu_worker *g = state;
	return ktune__kernel_compile(key, cfg, g->ctx->id.arch, g->ctx->cache_dir, out, e);
}

static int gpu_run(void *state, const struct ktune_config *cfg, const struct ktune_cubin *cubin,
		   enum ktune_run_mode mode, struct ktune_trial *trial, struct ktune_timing *timing,
		   struct ktune_err *e)
{
	struct gpu_worker *g = state;
	int rc = ktune__worker_run(g->w, cfg, cubin, mode, trial, timing, e);
	if (rc == KTUNE_OK && strcmp(trial->status, KTUNE_TRIAL_LAUNCH_ERROR))
		return KTUNE_OK;
	/* Did the failure take the context with it? */
	CUresult r = ktune_cu.cuCtxSynchronize(); /* sticky errors come back from every call */
	if (r != CUDA_SUCCESS || rc) {
		char d[256];
		ktune__cu_describe(r, d, sizeof(d));
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_CRASHED);
		if (rc)
			snprintf(trial->message, sizeof(trial->message), "%.500s", e->msg);
		else if (!trial->message[0])
			snprintf(trial->message, sizeof(trial->message), "%.500s", d);
		return KTUNE_OK;
	}
	return KTUNE_OK;
}

static int gpu_cublas(void *state, struct ktune_check *check, struct ktune_timing *timing,
		      struct ktune_err *e)
{
	struct gpu_worker *g = state;
	return ktune__worker_cublas(g->w, check, timing, e);
}

const struct ktune_worker_ops ktune__gpu_worker_ops = {
	gpu_hello, gpu_problem, gpu_compile, gpu_run, gpu_cublas,
};

int ktune__gpu_worker_main(int argc, char **argv)
{
	return ktune__worker_main(argc, argv, &ktune__gpu_worker_ops, &the_worker);
}
