/*
 * driver.c - loads the CUDA driver with dlopen.
 *
 * Symbols are looked up by their versioned names (cuMemAlloc_v2, ...) with
 * dlsym: the same entry points cuda.h's macros select, without linking
 * libcuda, so that a machine without a driver can still run every command
 * that needs no GPU.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

struct ktune_cu ktune_cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status;
static struct ktune_err load_err;

static void load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *why = dlerror();
		load_status = ktune__fail(&load_err, KTUNE_ERR_NO_DRIVER,
					  "no CUDA driver: cannot load 'libcuda.so.1' (%s)",
					  why ? why : "unknown reason");
		return;
	}
#define KTUNE_DRIVER_LOAD(name, args)                                                      \
	*(void **)&ktune_cu.name = dlsym(lib, #name);                                      \
	if (!ktune_cu.name) {                                                              \
		load_status = ktune__fail(&load_err, KTUNE_ERR_NO_DRIVER,                 \
					  "CUDA driver too old: no symbol '%s' in libcuda.so.1", \
					  #name);                                          \
		return;                                                                    \
	}
	KTUNE_DRIVER_FUNCS(KTUNE_DRIVER_LOAD)
#undef KTUNE_DRIVER_LOAD

	CUresult r = ktune_cu.cuInit(0);
	if (r != CUDA_SUCCESS) {
		char d[256];
		ktune__cu_describe(r, d, sizeof(d));
		load_status = ktune__fail(&load_err,
					  r == CUDA_ERROR_NO_DEVICE ? KTUNE_ERR_NO_DEVICE
								    : KTUNE_ERR_NO_DRIVER,
					  "CUDA driver found but cuInit failed: %s", d);
		return;
	}
	load_status = KTUNE_OK;
}

int ktune__driver_load(struct ktune_err *e)
{
	pthread_once(&load_once, load);
	if (load_status != KTUNE_OK && e)
		memcpy(e->msg, load_err.msg, sizeof(e->msg));
	return load_status;
}

void ktune__cu_describe(CUresult r, char *buf, size_t len)
{
	const char *name = NULL, *text = NULL;
	if (ktune_cu.cuGetErrorName)
		ktune_cu.cuGetErrorName(r, &name);
	if (ktune_cu.cuGetErrorString)
		ktune_cu.cuGetErrorString(r, &text);
	if (name && text)
		snprintf(buf, len, "%s: %s", name, text);
	else
		snprintf(buf, len, "CUDA error %d", (int)r);
}
