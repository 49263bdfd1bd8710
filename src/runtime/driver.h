/*
 * driver.h - the CUDA driver API, loaded at run time with dlopen so that
 * libktune and the ktune CLI start on machines without a GPU or driver.
 *
 * cuda.h is used for its types only; every call goes through `ktune_cu`.
 */
#ifndef KTUNE_DRIVER_H
#define KTUNE_DRIVER_H

#include <cuda.h>

#include "common.h"
#include "runtime/device.h"

#define KTUNE_DRIVER_FUNCS(X)                                                              \
	X(cuInit, (unsigned int))                                                          \
	X(cuDriverGetVersion, (int *))                                                     \
	X(cuGetErrorName, (CUresult, const char **))                                       \
	X(cuGetErrorString, (CUresult, const char **))                                     \
	X(cuDeviceGetCount, (int *))                                                       \
	X(cuDeviceGet, (CUdevice *, int))                                                  \
	X(cuDeviceGetName, (char *, int, CUdevice))                                        \
	X(cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice))                     \
	X(cuDeviceTotalMem_v2, (size_t *, CUdevice))                                       \
	X(cuDeviceGetUuid_v2, (CUuuid *, CUdevice))                                        \
	X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                               \
	X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                        \
	X(cuCtxGetCurrent, (CUcontext *))                                                  \
	X(cuCtxSetCurrent, (CUcontext))                                                    \
	X(cuCtxPushCurrent_v2, (CUcontext))                                                \
	X(cuCtxPopCurrent_v2, (CUcontext *))                                               \
	X(cuCtxSynchronize, (void))                                                        \
	X(cuModuleLoadData, (CUmodule *, const void *))                                    \
	X(cuModuleUnload, (CUmodule))                                                      \
	X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                     \
	X(cuFuncSetAttribute, (CUfunction, CUfunction_attribute, int))                     \
	X(cuFuncGetAttribute, (int *, CUfunction_attribute, CUfunction))                   \
	X(cuOccupancyMaxActiveClusters, (int *, CUfunction, const CUlaunchConfig *))       \
	X(cuTensorMapEncodeTiled, (CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, \
				   const cuuint64_t *, const cuuint64_t *, const cuuint32_t *, \
				   const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle, \
				   CUtensorMapL2promotion, CUtensorMapFloatOOBfill))       \
	X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,   \
			   unsigned, unsigned, CUstream, void **, void **))                \
	X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                          \
	X(cuMemFree_v2, (CUdeviceptr))                                                     \
	X(cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t))                            \
	X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t))                                  \
	X(cuMemcpyDtoD_v2, (CUdeviceptr, CUdeviceptr, size_t))                             \
	X(cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream))              \
	X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t))                             \
	X(cuMemsetD16_v2, (CUdeviceptr, unsigned short, size_t))                           \
	X(cuMemsetD32_v2, (CUdeviceptr, unsigned int, size_t))                             \
	X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                 \
	X(cuMemsetD32Async, (CUdeviceptr, unsigned int, size_t, CUstream))                 \
	X(cuStreamCreate, (CUstream *, unsigned int))                                      \
	X(cuStreamDestroy_v2, (CUstream))                                                  \
	X(cuStreamSynchronize, (CUstream))                                                 \
	X(cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))                        \
	X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                              \
	X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                         \
	X(cuStreamBeginCapture_v2, (CUstream, CUstreamCaptureMode))                        \
	X(cuStreamEndCapture, (CUstream, CUgraph *))                                       \
	X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))       \
	X(cuGraphLaunch, (CUgraphExec, CUstream))                                          \
	X(cuGraphExecDestroy, (CUgraphExec))                                               \
	X(cuGraphDestroy, (CUgraph))                                                       \
	X(cuEventCreate, (CUevent *, unsigned int))                                        \
	X(cuEventDestroy_v2, (CUevent))                                                    \
	X(cuEventRecord, (CUevent, CUstream))                                              \
	X(cuEventSynchronize, (CUevent))                                                   \
	X(cuEventQuery, (CUevent))                                                         \
	X(cuEventElapsedTime_v2, (float *, CUevent, CUevent))

struct ktune_cu {
#define KTUNE_DRIVER_PTR(name, args) CUresult (*name) args;
	KTUNE_DRIVER_FUNCS(KTUNE_DRIVER_PTR)
#undef KTUNE_DRIVER_PTR
};

/*
 * The loaded driver, after a successful ktune__driver_load() (device.h, which
 * needs no CUDA types); loading is done once per process and is thread-safe.
 */
extern struct ktune_cu ktune_cu;

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered" into buf. */
void ktune__cu_describe(CUresult r, char *buf, size_t len);

/*
 * Calls a driver function and, on failure, returns from the enclosing
 * function with KTUNE_ERR_CUDA and the call, file and line in e.
 */
#define CU_TRY(e, call)                                                                    \
	do {                                                                               \
		CUresult cu_try_r_ = ktune_cu.call;                                        \
		if (cu_try_r_ != CUDA_SUCCESS) {                                           \
			char cu_try_d_[256];                                                \
			ktune__cu_describe(cu_try_r_, cu_try_d_, sizeof(cu_try_d_));       \
			return ktune__fail((e), KTUNE_ERR_CUDA, "%s failed at %s:%d: %s",   \
					   #call, __FILE__, __LINE__, cu_try_d_);          \
		}                                                                          \
	} while (0)

/* Like CU_TRY, but sets `rc` and jumps to `out` so the caller can free what it holds. */
#define CU_GOTO(e, rc, call)                                                               \
	do {                                                                               \
		CUresult cu_try_r_ = ktune_cu.call;                                        \
		if (cu_try_r_ != CUDA_SUCCESS) {                                           \
			char cu_try_d_[256];                                                \
			ktune__cu_describe(cu_try_r_, cu_try_d_, sizeof(cu_try_d_));       \
			rc = ktune__fail((e), KTUNE_ERR_CUDA, "%s failed at %s:%d: %s",     \
					 #call, __FILE__, __LINE__, cu_try_d_);            \
			goto out;                                                          \
		}                                                                          \
	} while (0)

#endif
