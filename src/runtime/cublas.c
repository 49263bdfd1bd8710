/*
 * cublas.c - cuBLAS through dlopen: the runtime's fallback and the tuner's
 * baseline (cublas.h).
 *
 * cuBLAS is column-major; a row-major C[M,N] is a column-major C^T[N,M], so
 * we ask it for C^T = op(B)^T op(A)^T: swap the operands and M with N.  A
 * row-major operand stored as 'n' is, read column-major, already the
 * transpose we need (CUBLAS_OP_N); one stored 't' needs CUBLAS_OP_T.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/cublas.h"

/* The few cuBLAS values we use, from cublas_api.h and library_types.h. */
enum { OP_N = 0, OP_T = 1, R_16F = 2, R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1 };

typedef int (*create_fn)(void **);
typedef int (*destroy_fn)(void *);
typedef int (*set_stream_fn)(void *, CUstream);
typedef int (*set_workspace_fn)(void *, void *, size_t);
typedef int (*version_fn)(void *, int *);
typedef int (*gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int,
			  int, const void *, int, int, const void *, void *, int, int, int, int);

struct ktune_cublas {
	void *lib;
	void *handle;
	destroy_fn destroy;
	set_stream_fn set_stream;
	set_workspace_fn set_workspace; /* NULL before CUDA 11.4's cuBLAS: its own pool then */
	gemm_ex_fn gemm_ex;
	pthread_mutex_t lock; /* the handle's stream and workspace, from setting them to the enqueue */
	char version[32];
};

int ktune__cublas_open(struct ktune_cublas **out, struct ktune_err *e)
{
	static const char *names[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so",
				       "/usr/local/cuda/lib64/libcublas.so.13",
				       "/usr/local/cuda/lib64/libcublas.so.12" };
	struct ktune_cublas *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !cb->lib; i++)
		cb->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!cb->lib) {
		free(cb);
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "cuBLAS not found (libcublas.so.13)");
	}
	create_fn create = (create_fn)dlsym(cb->lib, "cublasCreate_v2");
	version_fn get_version = (version_fn)dlsym(cb->lib, "cublasGetVersion_v2");
	cb->destroy = (destroy_fn)dlsym(cb->lib, "cublasDestroy_v2");
	cb->set_stream = (set_stream_fn)dlsym(cb->lib, "cublasSetStream_v2");
	cb->set_workspace = (set_workspace_fn)dlsym(cb->lib, "cublasSetWorkspace_v2");
	cb->gemm_ex = (gemm_ex_fn)dlsym(cb->lib, "cublasGemmEx");
	pthread_mutex_init(&cb->lock, NULL);
	if (!create || !cb->destroy || !cb->set_stream || !cb->gemm_ex) {
		ktune__cublas_close(cb);
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "cuBLAS lacks cublasGemmEx");
	}
	int st = create(&cb->handle);
	if (st) {
		cb->handle = NULL;
		ktune__cublas_close(cb);
		return ktune__fail(e, KTUNE_ERR_CUDA, "cublasCreate failed with status %d", st);
	}
	int v = 0;
	if (get_version && !get_version(cb->handle, &v))
		snprintf(cb->version, sizeof(cb->version), "%d.%d.%d", v / 10000, v / 100 % 100,
			 v % 100);
	*out = cb;
	return KTUNE_OK;
}

void ktune__cublas_close(struct ktune_cublas *cb)
{
	if (!cb)
		return;
	if (cb->handle)
		cb->destroy(cb->handle);
	if (cb->lib) {
		dlclose(cb->lib);
		pthread_mutex_destroy(&cb->lock); /* initialised once the library loaded */
	}
	free(cb);
}

const char *ktune__cublas_version(const struct ktune_cublas *cb)
{
	return cb ? cb->version : "";
}

int ktune__cublas_gemm(struct ktune_cublas *cb, const struct ktune_key *key, float alpha,
		       CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb, float beta,
		       CUdeviceptr c, int64_t ldc, CUstream stream, CUdeviceptr workspace,
		       size_t workspace_bytes, struct ktune_err *e)
{
	int type = key->dtype == KTUNE_BF16 ? R_16BF : R_16F;
	pthread_mutex_lock(&cb->lock);
	/* setting the stream puts cuBLAS back on its own pool, so the workspace comes after */
	int st = cb->set_stream(cb->handle, stream);
	if (!st && workspace && cb->set_workspace)
		st = cb->set_workspace(cb->handle, (void *)workspace, workspace_bytes);
	if (!st)
		st = cb->gemm_ex(cb->handle, key->variant[1] == 't' ? OP_T : OP_N,
				 key->variant[0] == 't' ? OP_T : OP_N, (int)key->n, (int)key->m,
				 (int)key->k, &alpha, (const void *)b, type, (int)ldb,
				 (const void *)a, type, (int)lda, &beta, (void *)c, type, (int)ldc,
				 COMPUTE_32F, GEMM_DEFAULT);
	pthread_mutex_unlock(&cb->lock);
	if (st)
		return ktune__fail(e, KTUNE_ERR_CUDA, "cublasGemmEx failed with status %d", st);
	return KTUNE_OK;
}
