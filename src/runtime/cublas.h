/*
 * cublas.h - cuBLAS, loaded at run time like the driver (dlopen, never a
 * link dependency): the runtime's fallback for keys ktune has no good
 * answer for (dispatch.c), and the tuner's baseline, measured for every key
 * in the same run as the candidates (src/tuner/worker.c).
 */
#ifndef KTUNE_CUBLAS_H
#define KTUNE_CUBLAS_H

#include "key.h"
#include "runtime/driver.h"

struct ktune_cublas;

/*
 * Loads libcublas and creates a handle in the current CUDA context;
 * KTUNE_ERR_NOT_FOUND if cuBLAS is not installed.  Costs tens of
 * milliseconds (the library is large): call it once, when it is needed.
 */
int ktune__cublas_open(struct ktune_cublas **out, struct ktune_err *e);
void ktune__cublas_close(struct ktune_cublas *cb);

/*
 * Row-major C = alpha op(A) op(B) + beta C for the key, on stream, with
 * `workspace` (`workspace_bytes`) as cuBLAS's scratch for this call (0: its
 * own pool).  Kernels of one stream run in order, so a workspace per stream
 * is never used by two cuBLAS kernels at once.  Thread-safe: a mutex keeps
 * the handle's stream and workspace for this call until it is enqueued.
 */
int ktune__cublas_gemm(struct ktune_cublas *cb, const struct ktune_key *key, float alpha,
		       CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb, float beta,
		       CUdeviceptr c, int64_t ldc, CUstream stream, CUdeviceptr workspace,
		       size_t workspace_bytes, struct ktune_err *e);

/* "13.0.0" or similar. */
const char *ktune__cublas_version(const struct ktune_cublas *cb);

/* The workspace a stream gives cuBLAS: NVIDIA's advice for Hopper is 32 MiB, enough for every algorithm. */
#define KTUNE_CUBLAS_WORKSPACE (32u << 20)

#endif
