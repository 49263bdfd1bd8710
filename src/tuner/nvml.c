/*
 * nvml.c - samples a GPU through NVML, loaded with dlopen, and decides
 * whether a measurement between two samples was disturbed (nvml.h says by
 * what).
 *
 * The few NVML types and values used are declared here, checked against the
 * public nvml.h; a build needs no NVML header and a machine without NVML
 * still runs every command.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/nvml.h"

/* From nvml.h: nvmlReturn_t values, nvmlClockType_t, nvmlTemperatureSensors_t. */
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_CLOCK_SM = 1,
	NVML_TEMPERATURE_GPU = 0,
};

typedef int nvml_return;
typedef struct nvml_device *nvml_device; /* nvmlDevice_t: an opaque pointer */

/* nvmlUtilization_t */
struct nvml_utilization {
	unsigned int gpu, memory;
};

/* nvmlProcessInfo_t: the layout of both _v2 and _v3 of the process queries. */
struct nvml_process_info {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};

typedef nvml_return (*init_fn)(void);
typedef nvml_return (*shutdown_fn)(void);
typedef const char *(*error_string_fn)(nvml_return);
typedef nvml_return (*by_uuid_fn)(const char *, nvml_device *);
typedef nvml_return (*reasons_fn)(nvml_device, unsigned long long *);
typedef nvml_return (*clock_fn)(nvml_device, int, unsigned int *);
typedef nvml_return (*temperature_fn)(nvml_device, int, unsigned int *);
typedef nvml_return (*utilization_fn)(nvml_device, struct nvml_utilization *);
typedef nvml_return (*processes_fn)(nvml_device, unsigned int *, struct nvml_process_info *);

struct ktune_nvml {
	void *lib;
	int initialised;
	nvml_device dev;
	char uuid[KTUNE_NVML_UUID_LEN];
	shutdown_fn shutdown;
	error_string_fn error_string; /* optional */
	reasons_fn reasons;
	processes_fn processes;
	clock_fn clock;             /* optional */
	temperature_fn temperature; /* optional */
	utilization_fn utilization; /* optional */
};

static void describe(const struct ktune_nvml *n, nvml_return r, char *buf, size_t len)
{
	const char *text = n->error_string ? n->error_string(r) : NULL;
	if (text)
		snprintf(buf, len, "%s (NVML error %d)", text, r);
	else
		snprintf(buf, len, "NVML error %d", r);
}

/* The first of two names that the library has, or NULL. */
static void *either(void *lib, const char *name, const char *old_name)
{
	void *p = dlsym(lib, name);
	return p ? p : dlsym(lib, old_name);
}

int ktune__nvml_open_lib(const char *lib_path, const char *uuid_text, struct ktune_nvml **out,
			 struct ktune_err *e)
{
	struct ktune_nvml *n = NULL;
	init_fn init;
	by_uuid_fn by_uuid;
	nvml_return r;
	char d[256];
	int rc = KTUNE_OK;

	if (!lib_path || !uuid_text || !out)
		return ktune__fail(e, KTUNE_ERR_INVALID, "nvml: NULL argument");
	*out = NULL;
	if (strlen(uuid_text) >= KTUNE_NVML_UUID_LEN)
		return ktune__fail(e, KTUNE_ERR_INVALID, "nvml: '%.64s...' is too long for a GPU UUID",
				   uuid_text);
	n = calloc(1, sizeof(*n));
	if (!n)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	snprintf(n->uuid, sizeof(n->uuid), "%s", uuid_text);
	n->lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		const char *why = dlerror();
		rc = ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no NVML: cannot load '%s' (%s)", lib_path,
				 why ? why : "unknown reason");
		goto out;
	}
	*(void **)&init = dlsym(n->lib, "nvmlInit_v2");
	*(void **)&n->shutdown = dlsym(n->lib, "nvmlShutdown");
	*(void **)&by_uuid = dlsym(n->lib, "nvmlDeviceGetHandleByUUID");
	*(void **)&n->reasons = either(n->lib, "nvmlDeviceGetCurrentClocksEventReasons",
				       "nvmlDeviceGetCurrentClocksThrottleReasons");
	*(void **)&n->processes = either(n->lib, "nvmlDeviceGetComputeRunningProcesses_v3",
					 "nvmlDeviceGetComputeRunningProcesses_v2");
	*(void **)&n->error_string = dlsym(n->lib, "nvmlErrorString");
	*(void **)&n->clock = dlsym(n->lib, "nvmlDeviceGetClockInfo");
	*(void **)&n->temperature = dlsym(n->lib, "nvmlDeviceGetTemperature");
	*(void **)&n->utilization = dlsym(n->lib, "nvmlDeviceGetUtilizationRates");
	{
		const char *missing = !init			? "nvmlInit_v2"
				      : !n->shutdown		? "nvmlShutdown"
				      : !by_uuid		? "nvmlDeviceGetHandleByUUID"
				      : !n->reasons		? "nvmlDeviceGetCurrentClocksEventReasons"
				      : !n->processes		? "nvmlDeviceGetComputeRunningProcesses_v3"
							: NULL;
		if (missing) {
			rc = ktune__fail(e, KTUNE_ERR_NOT_FOUND, "NVML too old: no symbol '%s' in '%s'",
					 missing, lib_path);
			goto out;
		}
	}

	r = init();
	if (r != NVML_SUCCESS) {
		describe(n, r, d, sizeof(d));
		rc = ktune__fail(e, KTUNE_ERR_NOT_FOUND, "NVML found but nvmlInit failed: %s", d);
		goto out;
	}
	n->initialised = 1;
	r = by_uuid(n->uuid, &n->dev);
	if (r != NVML_SUCCESS) {
		describe(n, r, d, sizeof(d));
		rc = ktune__fail(e,
				 r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT
					 ? KTUNE_ERR_NOT_FOUND
					 : KTUNE_ERR_CUDA,
				 "NVML has no GPU '%s': %s", n->uuid, d);
		goto out;
	}
	*out = n;
	n = NULL;
out:
	ktune__nvml_close(n);
	return rc;
}

int ktune__nvml_open(const char *uuid_text, struct ktune_nvml **out, struct ktune_err *e)
{
	return ktune__nvml_open_lib("libnvidia-ml.so.1", uuid_text, out, e);
}

void ktune__nvml_close(struct ktune_nvml *n)
{
	if (!n)
		return;
	if (n->initialised)
		n->shutdown();
	if (n->lib)
		dlclose(n->lib);
	free(n);
}

/*
 * Notes a query's outcome: success sets `bit` in *have; a field the device
 * does not offer us is left out; anything else is a failure.
 */
static int take(struct ktune_nvml *n, nvml_return r, const char *what, unsigned bit,
		unsigned *have, struct ktune_err *e)
{
	char d[256];

	if (r == NVML_SUCCESS) {
		*have |= bit;
		return KTUNE_OK;
	}
	if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NO_PERMISSION)
		return KTUNE_OK;
	describe(n, r, d, sizeof(d));
	return ktune__fail(e, KTUNE_ERR_CUDA, "cannot read the %s of GPU '%s': %s", what, n->uuid,
			   d);
}

/* The compute processes, distinct; the list may grow between calls, so retry a few times. */
static int sample_pids(struct ktune_nvml *n, struct ktune_gpu_sample *s, struct ktune_err *e)
{
	struct nvml_process_info stack[KTUNE_NVML_MAX_PIDS], *buf = stack, *heap = NULL;
	unsigned int cap = KTUNE_NVML_MAX_PIDS, count = 0;
	nvml_return r;
	int rc;

	for (int tries = 0;; tries++) {
		count = cap;
		r = n->processes(n->dev, &count, buf);
		if (r != NVML_ERROR_INSUFFICIENT_SIZE || tries == 3)
			break;
		cap = count + 16;
		free(heap);
		heap = malloc(cap * sizeof(*heap));
		if (!heap)
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		buf = heap;
	}
	rc = take(n, r, "compute processes", KTUNE_GPU_HAVE_PIDS, &s->have, e);
	if (rc || !(s->have & KTUNE_GPU_HAVE_PIDS))
		goto out;
	if (count > cap)
		count = cap;
	for (unsigned int i = 0; i < count; i++) {
		unsigned int j = 0;
		while (j < i && buf[j].pid != buf[i].pid)
			j++;
		if (j < i)
			continue;
		s->nprocs++;
		if (s->npids < KTUNE_NVML_MAX_PIDS)
			s->pids[s->npids++] = (pid_t)buf[i].pid;
	}
out:
	free(heap);
	return rc;
}

int ktune__nvml_sample(struct ktune_nvml *n, struct ktune_gpu_sample *out, struct ktune_err *e)
{
	struct nvml_utilization u;
	unsigned int v;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!n)
		return ktune__fail(e, KTUNE_ERR_INVALID, "nvml: NULL handle");
	rc = take(n, n->reasons(n->dev, &out->throttle), "clock event reasons",
		  KTUNE_GPU_HAVE_THROTTLE, &out->have, e);
	if (rc)
		return rc;
	if (n->clock) {
		rc = take(n, n->clock(n->dev, NVML_CLOCK_SM, &v), "SM clock",
			  KTUNE_GPU_HAVE_SM_CLOCK, &out->have, e);
		if (rc)
			return rc;
		if (out->have & KTUNE_GPU_HAVE_SM_CLOCK)
			out->sm_mhz = v;
	}
	if (n->temperature) {
		rc = take(n, n->temperature(n->dev, NVML_TEMPERATURE_GPU, &v), "temperature",
			  KTUNE_GPU_HAVE_TEMP, &out->have, e);
		if (rc)
			return rc;
		if (out->have & KTUNE_GPU_HAVE_TEMP)
			out->temp_c = v;
	}
	if (n->utilization) {
		rc = take(n, n->utilization(n->dev, &u), "utilisation", KTUNE_GPU_HAVE_UTIL,
			  &out->have, e);
		if (rc)
			return rc;
		if (out->have & KTUNE_GPU_HAVE_UTIL)
			out->util_gpu = u.gpu;
	}
	return sample_pids(n, out, e);
}

/* ------------------------------------------------------------------ the verdict */

static int in(const pid_t *v, int n, pid_t p)
{
	for (int i = 0; i < n; i++)
		if (v[i] == p)
			return 1;
	return 0;
}

int ktune__nvml_sample_has_pid(const struct ktune_gpu_sample *s, pid_t pid)
{
	return s && (s->have & KTUNE_GPU_HAVE_PIDS) && in(s->pids, s->npids, pid);
}

/* The counted reasons, in bit order, as the reason text names them. */
static const struct {
	unsigned long long bit;
	const char *name;
} counted[] = {
	{ KTUNE_NVML_HW_SLOWDOWN, "hw slowdown" },
	{ KTUNE_NVML_SW_THERMAL, "sw thermal" },
	{ KTUNE_NVML_HW_THERMAL, "hw thermal" },
	{ KTUNE_NVML_HW_POWER_BRAKE, "hw power brake" },
};

/* Appends to a NUL-terminated buffer, truncating. */
static void append(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strlen(buf);
	va_list ap;

	if (used + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

/* `shown`: the pids in v->foreign; nforeign may also count processes whose pids are unknown. */
static void write_reason(struct ktune_nvml_verdict *v, int shown)
{
	char *r = v->reason;
	size_t len = sizeof(v->reason);

	r[0] = '\0';
	if (v->nforeign == 1 && shown == 1) {
		append(r, len, "another process (pid %d) used the GPU", (int)v->foreign[0]);
	} else if (v->nforeign == 1) {
		append(r, len, "another process used the GPU");
	} else if (v->nforeign > 1) {
		append(r, len, "%d other processes", v->nforeign);
		for (int i = 0; i < shown; i++)
			append(r, len, "%s%d", i ? ", " : " (pids ", (int)v->foreign[i]);
		if (shown)
			append(r, len, "%s)", shown < v->nforeign ? ", ..." : "");
		append(r, len, " used the GPU");
	}
	if (v->throttle) {
		int first = 1;
		append(r, len, "%sclocks throttled: ", r[0] ? "; " : "");
		for (size_t i = 0; i < sizeof(counted) / sizeof(counted[0]); i++) {
			if (!(v->throttle & counted[i].bit))
				continue;
			append(r, len, "%s%s", first ? "" : ", ", counted[i].name);
			first = 0;
		}
	}
}

int ktune__nvml_verdict(const struct ktune_gpu_sample *before,
			const struct ktune_gpu_sample *after, const pid_t *ours, int n_ours,
			struct ktune_nvml_verdict *out)
{
	const struct ktune_gpu_sample *samples[2] = { before, after };
	pid_t listed[2 * KTUNE_NVML_MAX_PIDS]; /* distinct foreign pids of both samples */
	int nlisted = 0, most = 0, shown;

	memset(out, 0, sizeof(*out));
	if (n_ours < 0)
		n_ours = 0;
	for (int i = 0; i < 2; i++) {
		const struct ktune_gpu_sample *s = samples[i];
		int mine = 0, foreign = 0, unmatched;

		if (!s)
			continue;
		if (s->have & KTUNE_GPU_HAVE_THROTTLE) {
			out->throttle_checked = 1;
			out->throttle |= s->throttle & KTUNE_NVML_COUNTED_THROTTLE;
		}
		if (!(s->have & KTUNE_GPU_HAVE_PIDS))
			continue;
		out->pids_checked = 1;
		if (!ours) {
			/* pids cannot be matched: only a count above ours tells */
			if (s->nprocs - n_ours > most)
				most = s->nprocs - n_ours;
			continue;
		}
		for (int j = 0; j < s->npids && j < KTUNE_NVML_MAX_PIDS; j++) {
			if (in(ours, n_ours, s->pids[j])) {
				mine++;
				continue;
			}
			foreign++;
			if (!in(listed, nlisted, s->pids[j]))
				listed[nlisted++] = s->pids[j];
		}
		/* processes past the list: those beyond what could still be ours are foreign */
		unmatched = (s->nprocs - s->npids) - (n_ours - mine);
		if (unmatched > 0)
			foreign += unmatched;
		if (foreign > most)
			most = foreign;
	}
	out->nforeign = nlisted > most ? nlisted : most;
	for (shown = 0; shown < nlisted && shown < 4; shown++)
		out->foreign[shown] = listed[shown];
	out->disturbed = out->nforeign > 0 || out->throttle != 0;
	if (out->disturbed)
		write_reason(out, shown);
	return out->disturbed;
}

void ktune__nvml_uuid_text(const unsigned char b[16], char out[KTUNE_NVML_UUID_LEN])
{
	snprintf(out, KTUNE_NVML_UUID_LEN,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}
