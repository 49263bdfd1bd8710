/*
 * fake-nvml.c - a stand-in libnvidia-ml for test-nvml: it answers from
 * `fake_nvml`, which the test fills after loading the same file with dlopen.
 *
 * Built three times: FAKE_NVML_CURRENT has today's names and every query;
 * FAKE_NVML_OLD has only the old names (ClocksThrottleReasons, processes
 * _v2) and none of the optional queries; FAKE_NVML_BARE has only
 * nvmlInit_v2 and nvmlShutdown.
 */
#include <string.h>

#define FAKE_MAX_PROCS 256

struct fake_nvml {
	int init_rc, uuid_rc;   /* what nvmlInit_v2 and the handle lookup return */
	char uuid[64];          /* the only UUID the lookup finds */
	int inits, shutdowns;   /* successful calls so far */
	int reasons_rc, clock_rc, temp_rc, util_rc, procs_rc;
	unsigned long long reasons;
	unsigned int clock, temp, util;
	unsigned int nprocs;    /* processes listed (pids may repeat) */
	unsigned int grow;      /* processes that appear on each call that finds the buffer short */
	unsigned int pids[FAKE_MAX_PROCS];
	int procs_calls;
};

struct fake_nvml fake_nvml;

struct fake_process_info {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};

int nvmlInit_v2(void)
{
	if (fake_nvml.init_rc)
		return fake_nvml.init_rc;
	fake_nvml.inits++;
	return 0;
}

int nvmlShutdown(void)
{
	fake_nvml.shutdowns++;
	return 0;
}

#ifndef FAKE_NVML_BARE
const char *nvmlErrorString(int r)
{
	return r == 15 ? "GPU is lost" : r == 6 ? "Not Found" : "Unknown Error";
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **device)
{
	if (fake_nvml.uuid_rc)
		return fake_nvml.uuid_rc;
	if (strcmp(uuid, fake_nvml.uuid) != 0)
		return 6; /* NVML_ERROR_NOT_FOUND */
	*device = &fake_nvml;
	return 0;
}

static int reasons(void *device, unsigned long long *out)
{
	if (device != &fake_nvml)
		return 2;
	if (!fake_nvml.reasons_rc)
		*out = fake_nvml.reasons;
	return fake_nvml.reasons_rc;
}

static int processes(void *device, unsigned int *count, struct fake_process_info *infos)
{
	unsigned int n = fake_nvml.nprocs;

	fake_nvml.procs_calls++;
	if (device != &fake_nvml)
		return 2;
	if (fake_nvml.procs_rc)
		return fake_nvml.procs_rc;
	if (*count < n) {
		*count = n;
		if (fake_nvml.nprocs + fake_nvml.grow <= FAKE_MAX_PROCS) {
			for (unsigned int i = 0; i < fake_nvml.grow; i++)
				fake_nvml.pids[n + i] = 900000 + n + i;
			fake_nvml.nprocs += fake_nvml.grow;
		}
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	}
	for (unsigned int i = 0; i < n; i++) {
		memset(&infos[i], 0, sizeof(infos[i]));
		infos[i].pid = fake_nvml.pids[i];
		infos[i].gpu_instance_id = infos[i].compute_instance_id = 0xffffffffu;
	}
	*count = n;
	return 0;
}
#endif

#ifdef FAKE_NVML_CURRENT
int nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *out)
{
	return reasons(device, out);
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count,
					    struct fake_process_info *infos)
{
	return processes(device, count, infos);
}

int nvmlDeviceGetClockInfo(void *device, int type, unsigned int *mhz)
{
	if (device != &fake_nvml || type != 1) /* NVML_CLOCK_SM */
		return 2;
	if (!fake_nvml.clock_rc)
		*mhz = fake_nvml.clock;
	return fake_nvml.clock_rc;
}

int nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *temp)
{
	if (device != &fake_nvml || sensor != 0) /* NVML_TEMPERATURE_GPU */
		return 2;
	if (!fake_nvml.temp_rc)
		*temp = fake_nvml.temp;
	return fake_nvml.temp_rc;
}

int nvmlDeviceGetUtilizationRates(void *device, unsigned int util[2])
{
	if (device != &fake_nvml)
		return 2;
	if (!fake_nvml.util_rc) {
		util[0] = fake_nvml.util;
		util[1] = 0;
	}
	return fake_nvml.util_rc;
}
#endif

#ifdef FAKE_NVML_OLD
int nvmlDeviceGetCurrentClocksThrottleReasons(void *device, unsigned long long *out)
{
	return reasons(device, out);
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *device, unsigned int *count,
					    struct fake_process_info *infos)
{
	return processes(device, count, infos);
}
#endif
