/*
 * device.c - what an open context tells of its device and of where its
 * dispatch entries came from, as the plain structs of device.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/cublas.h"
#include "runtime/device.h"

void ktune__ctx_device_info(ktune_ctx *ctx, struct ktune_device_info *out)
{
	size_t mem = 0;
	memset(out, 0, sizeof(*out));
	ktune_cu.cuDeviceTotalMem_v2(&mem, ctx->dev); /* 0 if it fails: "not known" */
	out->id = ctx->id;
	out->total_mem = mem;
	out->smem_optin = ctx->smem_optin;
	out->l2_bytes = ctx->l2_bytes;
	out->driver_version = ctx->driver_version;
	out->mem_gbps = ctx->mem_gbps;
}

void ktune__ctx_fallback(ktune_ctx *ctx, struct ktune_fallback_info *out)
{
	static const char *const names[] = { "auto", "model", "cublas", "measure" };
	int pushed;
	memset(out, 0, sizeof(*out));
	snprintf(out->policy, sizeof(out->policy), "%s", names[ctx->fallback]);
	if (ktune__ctx_enter(ctx, &pushed, NULL))
		return;
	pthread_mutex_lock(&ctx->lock);
	if (ktune__ctx_blas(ctx))
		snprintf(out->cublas, sizeof(out->cublas), "%s", ktune__cublas_version(ctx->blas));
	pthread_mutex_unlock(&ctx->lock);
	ktune__ctx_leave(ctx, pushed);
}

void ktune__ctx_dispatch_sources(ktune_ctx *ctx, struct ktune_dispatch_sources *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&ctx->lock);
	out->from_device = ctx->from_device;
	out->from_arch = ctx->from_arch;
	out->from_shipped = ctx->from_shipped;
	/* a shipped file per GPU: those tuned on this one serve first */
	for (int i = 0; i < ctx->nentries; i++)
		out->shipped_here += ctx->entries[i].shipped && ctx->entries[i].same_device;
	snprintf(out->shipped_names, sizeof(out->shipped_names), "%s", ctx->shipped_names);
	pthread_mutex_unlock(&ctx->lock);
}

int ktune__arch_smem_optin(const char *arch)
{
	int cc = arch && !strncmp(arch, "sm_", 3) ? atoi(arch + 3) : 0;
	if (cc >= 90 && cc < 120)
		return 227 * 1024; /* Hopper and Blackwell datacenter parts */
	if (cc == 80 || cc == 87)
		return 163 * 1024;
	return 99 * 1024; /* sm_86, sm_89, sm_120: the consumer parts */
}
