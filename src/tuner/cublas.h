/*
 * cublas.h - cuBLAS as the baseline, loaded at run time like the driver:
 * the tuner measures it for every key in the same run as the candidates.
 */
#ifndef KTUNE_CUBLAS_H
#define KTUNE_CUBLAS_H

#include "key.h"
#include "runtime/driver.h"

struct ktune_cublas;

/* Loads libcublas and creates a handle; KTUNE_ERR_NOT_FOUND if cuBLAS is not installed. */
int ktune__cublas_open(struct ktune_cublas **out, struct ktune_err *e);
void ktune__cublas_close(struct ktune_cublas *cb);

/* Row-major C = alpha op(A) op(B) + beta C for the key, on stream. */
int ktune__cublas_gemm(struct ktune_cublas *cb, const struct ktune_key *key, float alpha,
		       CUdeviceptr a, int64_t lda, CUdeviceptr b, int64_t ldb, float beta,
		       CUdeviceptr c, int64_t ldc, CUstream stream, struct ktune_err *e);

/* "13.0.0" or similar. */
const char *ktune__cublas_version(const struct ktune_cublas *cb);

#endif
