/*
 * nvml.h - measurement hygiene: was the GPU disturbed while we timed?
 *
 * NVML (libnvidia-ml.so.1) is loaded at run time like the driver, never
 * linked; without it ktune__nvml_open() returns KTUNE_ERR_NOT_FOUND and the
 * tuner carries on unflagged.  The tuner samples the device just before and
 * just after each full measurement and asks ktune__nvml_verdict() whether
 * the result can be stored as it is.
 *
 * A measurement is disturbed when either sample shows:
 *
 *   - a compute process on the device that is not ours.  NVML lists every
 *     process holding a CUDA context on the device, busy or idle; two point
 *     samples cannot tell whether it launched work in between, so any
 *     foreign process counts.
 *
 *   - one of these clock event ("throttle") reasons, which mean the clocks
 *     were pulled down by something other than the kernel we time:
 *       HW slowdown (0x8)     clocks halved or worse: over-temperature, an
 *                             external power brake, fast-trigger power
 *                             protection
 *       SW thermal (0x20)     clocks lowered to stay under the maximum
 *                             operating temperature: they depend on how hot
 *                             earlier work left the GPU
 *       HW thermal (0x40)     clocks halved or worse: temperature too high
 *       HW power brake (0x80) clocks halved or worse: the system's power
 *                             supply asserted the brake
 *
 *     These do not count:
 *       GPU idle (0x1)        nothing running; normal in the sample taken
 *                             before a launch
 *       applications clocks (0x2), sync boost (0x10), display clocks (0x100)
 *                             settings made by the administrator; they hold
 *                             for the whole sweep and so for every
 *                             candidate alike
 *       SW power cap (0x4)    the driver keeps the board under its power
 *                             limit.  A large GEMM on an H100 runs at the
 *                             700 W cap by design, so this is set in nearly
 *                             every honest measurement of a big key; a
 *                             kernel that draws more power gets lower clocks,
 *                             which is part of its speed in production, not
 *                             noise.  Flagging it would flag everything.
 *     Bits NVML adds in later versions are ignored until classified here.
 *
 * Limits.  Throttle reasons are the ones active at the instant of each
 * sample: a slowdown that began and ended inside the measurement is missed.
 * Process ids are those of NVML's pid namespace; in a container without the
 * host's pid namespace our own processes may be listed under other pids, or
 * not at all.  ktune__nvml_sample_has_pid() on a sample taken while our
 * worker holds a context tells the tuner whether pids can be matched; if not,
 * it passes ours = NULL to the verdict, which then counts processes instead
 * (more than n_ours means a foreign one).  An empty list in both samples
 * proves nothing there, and the tuner should say once that the check is
 * blind.  MIG instances are not supported (ktune__nvml_uuid_text() writes a
 * "GPU-" UUID, which NVML does not find for a MIG device).
 *
 * Everything here is plain data; not thread-safe unless stated.
 */
#ifndef KTUNE_NVML_H
#define KTUNE_NVML_H

#include <sys/types.h>

#include "common.h"

/* NVML clock event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*). */
#define KTUNE_NVML_GPU_IDLE 0x1ULL
#define KTUNE_NVML_APP_CLOCKS 0x2ULL
#define KTUNE_NVML_SW_POWER_CAP 0x4ULL
#define KTUNE_NVML_HW_SLOWDOWN 0x8ULL
#define KTUNE_NVML_SYNC_BOOST 0x10ULL
#define KTUNE_NVML_SW_THERMAL 0x20ULL
#define KTUNE_NVML_HW_THERMAL 0x40ULL
#define KTUNE_NVML_HW_POWER_BRAKE 0x80ULL
#define KTUNE_NVML_DISPLAY_CLOCKS 0x100ULL

/* The reasons that make a measurement disturbed (see above). */
#define KTUNE_NVML_COUNTED_THROTTLE                                                         \
	(KTUNE_NVML_HW_SLOWDOWN | KTUNE_NVML_SW_THERMAL | KTUNE_NVML_HW_THERMAL |           \
	 KTUNE_NVML_HW_POWER_BRAKE)

/* Processes kept per sample; more are counted in nprocs but not listed. */
#define KTUNE_NVML_MAX_PIDS 64

/* "GPU-" and 8-4-4-4-12 hex digits, with the NUL (NVML_DEVICE_UUID_ASCII_LEN). */
#define KTUNE_NVML_UUID_LEN 41

/* Which fields of a sample were read; NVML may not support some on a device. */
enum {
	KTUNE_GPU_HAVE_THROTTLE = 1 << 0,
	KTUNE_GPU_HAVE_SM_CLOCK = 1 << 1,
	KTUNE_GPU_HAVE_TEMP = 1 << 2,
	KTUNE_GPU_HAVE_UTIL = 1 << 3,
	KTUNE_GPU_HAVE_PIDS = 1 << 4,
};

/* The device's state at one instant. */
struct ktune_gpu_sample {
	unsigned have;                /* KTUNE_GPU_HAVE_* bits: the fields below that were read */
	unsigned long long throttle;  /* clock event reasons active now (KTUNE_NVML_* bits) */
	unsigned sm_mhz;              /* SM clock */
	unsigned temp_c;              /* GPU die temperature, degrees C */
	unsigned util_gpu;            /* % of NVML's last period with a kernel running (ours too) */
	int nprocs;                   /* distinct compute processes on the device */
	int npids;                    /* entries in pids: min(nprocs, KTUNE_NVML_MAX_PIDS) */
	pid_t pids[KTUNE_NVML_MAX_PIDS]; /* their ids, distinct */
};

/* What ktune__nvml_verdict() decided. */
struct ktune_nvml_verdict {
	int disturbed;               /* 0: clean */
	unsigned long long throttle; /* counted reasons seen in either sample */
	int nforeign;                /* foreign processes found (at least this many) */
	pid_t foreign[4];            /* the first of them, if their pids are known */
	int pids_checked;            /* 0: neither sample had a process list */
	int throttle_checked;        /* 0: neither sample had throttle reasons */
	char reason[160];            /* "" when clean, else "another process (pid 1234) used the GPU" ... */
};

struct ktune_nvml;

/*
 * Loads NVML and finds the device by its UUID text ("GPU-xxxxxxxx-xxxx-...",
 * as ktune__nvml_uuid_text() writes it).  Returns KTUNE_OK with *out, or
 * KTUNE_ERR_NOT_FOUND when NVML is absent, lacks a function we need, cannot
 * initialise (no driver, no GPU) or has no such device; KTUNE_ERR_INVALID for
 * a NULL argument or a text longer than a UUID; KTUNE_ERR_CUDA for another NVML failure.  The reason is in e.
 * Each handle initialises NVML (reference counted); thread-safe.
 */
int ktune__nvml_open(const char *uuid_text, struct ktune_nvml **out, struct ktune_err *e);

/* ktune__nvml_open() with another library file: for tests, with a stand-in NVML. */
int ktune__nvml_open_lib(const char *lib_path, const char *uuid_text, struct ktune_nvml **out,
			 struct ktune_err *e);

/* Shuts NVML down for this handle and frees it; NULL is a no-op. */
void ktune__nvml_close(struct ktune_nvml *n);

/*
 * Samples the device into *out.  Fields the device does not support are
 * left out of out->have; any other NVML failure (the GPU fell off the bus)
 * returns KTUNE_ERR_CUDA with the reason in e.  Takes about a millisecond.
 */
int ktune__nvml_sample(struct ktune_nvml *n, struct ktune_gpu_sample *out, struct ktune_err *e);

/*
 * The decision, pure: were the measurement between samples `before` and
 * `after` disturbed?  `ours` lists the n_ours pids of the tuner's own
 * processes (in NVML's pid namespace); ours = NULL means pids cannot be
 * matched, and then more than n_ours processes in a sample means a foreign
 * one.  Either sample may be NULL (not taken).  A check that neither sample
 * could make is skipped and noted in *out.  Fills *out (reason: "another
 * process (pid 1234) used the GPU", "clocks throttled: hw slowdown", or both
 * joined by "; ") and returns out->disturbed.  Thread-safe.
 */
int ktune__nvml_verdict(const struct ktune_gpu_sample *before,
			const struct ktune_gpu_sample *after, const pid_t *ours, int n_ours,
			struct ktune_nvml_verdict *out);

/* 1 if pid is in the sample's process list.  Thread-safe. */
int ktune__nvml_sample_has_pid(const struct ktune_gpu_sample *s, pid_t pid);

/*
 * Writes the NVML UUID text of the 16 bytes cuDeviceGetUuid gives:
 * "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x".
 * Thread-safe.
 */
void ktune__nvml_uuid_text(const unsigned char bytes[16], char out[KTUNE_NVML_UUID_LEN]);

#endif
