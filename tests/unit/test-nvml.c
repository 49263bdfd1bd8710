/*
 * test-nvml.c - measurement hygiene: the verdict on two samples (which
 * throttle reasons and which processes disturb a measurement, and the
 * reason text), the UUID text, loading NVML where it is missing, and
 * sampling through a stand-in libnvidia-ml (fake-nvml.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/driver.h"
#include "tuner/nvml.h"

#define FAKE_UUID "GPU-01234567-89ab-cdef-0011-223344556677"

/* ------------------------------------------------------------------ helpers */

/* A sample with throttle reasons and a process list, as a healthy GPU gives. */
static struct ktune_gpu_sample sample(unsigned long long throttle, int npids, ...)
{
	struct ktune_gpu_sample s;
	va_list ap;

	memset(&s, 0, sizeof(s));
	s.have = KTUNE_GPU_HAVE_THROTTLE | KTUNE_GPU_HAVE_PIDS;
	s.throttle = throttle;
	va_start(ap, npids);
	for (int i = 0; i < npids; i++)
		s.pids[i] = va_arg(ap, int);
	va_end(ap);
	s.npids = s.nprocs = npids;
	return s;
}

static const pid_t ours[] = { 100, 101, 102 };

static int verdict(const struct ktune_gpu_sample *before, const struct ktune_gpu_sample *after,
		   struct ktune_nvml_verdict *v)
{
	return ktune__nvml_verdict(before, after, ours, 3, v);
}

/* ------------------------------------------------------------------ verdict: clocks */

static void test_nvml__clean_when_only_ours_and_no_throttle(void **state)
{
	struct ktune_gpu_sample b = sample(0, 1, 100), a = sample(0, 2, 100, 101);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(verdict(&b, &a, &v), 0);
	assert_int_equal(v.disturbed, 0);
	assert_string_equal(v.reason, "");
	assert_int_equal(v.nforeign, 0);
	assert_true(v.throttle == 0);
	assert_int_equal(v.pids_checked, 1);
	assert_int_equal(v.throttle_checked, 1);
}

static const struct {
	unsigned long long bit;
	const char *text;
} counted_reasons[] = {
	{ 0x8, "clocks throttled: hw slowdown" },
	{ 0x20, "clocks throttled: sw thermal" },
	{ 0x40, "clocks throttled: hw thermal" },
	{ 0x80, "clocks throttled: hw power brake" },
};

static void test_nvml__counted_reasons_disturb_before_or_after(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(counted_reasons) / sizeof(counted_reasons[0]); i++) {
		unsigned long long bit = counted_reasons[i].bit;
		struct ktune_gpu_sample quiet = sample(0, 1, 100), hot = sample(bit, 1, 100);
		struct ktune_nvml_verdict v;

		assert_true(bit & KTUNE_NVML_COUNTED_THROTTLE);
		assert_int_equal(verdict(&quiet, &hot, &v), 1);
		assert_true(v.throttle == bit);
		assert_int_equal(v.nforeign, 0);
		assert_string_equal(v.reason, counted_reasons[i].text);

		assert_int_equal(verdict(&hot, &quiet, &v), 1);
		assert_string_equal(v.reason, counted_reasons[i].text);

		/* alongside the reasons that do not count, it still counts */
		hot.throttle = bit | KTUNE_NVML_SW_POWER_CAP | KTUNE_NVML_GPU_IDLE;
		assert_int_equal(verdict(&quiet, &hot, &v), 1);
		assert_true(v.throttle == bit);
		assert_string_equal(v.reason, counted_reasons[i].text);
	}
}

static void test_nvml__ignored_reasons_stay_clean(void **state)
{
	/* idle, applications clocks, SW power cap, sync boost, display clocks, a future bit */
	static const unsigned long long ignored[] = { 0x1, 0x2, 0x4, 0x10, 0x100, 0x200 };

	(void)state;
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
		struct ktune_gpu_sample b = sample(ignored[i], 1, 100), a = sample(ignored[i], 1, 100);
		struct ktune_nvml_verdict v;

		assert_false(ignored[i] & KTUNE_NVML_COUNTED_THROTTLE);
		assert_int_equal(verdict(&b, &a, &v), 0);
		assert_true(v.throttle == 0);
		assert_string_equal(v.reason, "");
	}
	{
		unsigned long long all = 0x1 | 0x2 | 0x4 | 0x10 | 0x100;
		struct ktune_gpu_sample b = sample(all, 0), a = sample(all, 0);
		struct ktune_nvml_verdict v;

		assert_int_equal(verdict(&b, &a, &v), 0);
	}
}

static void test_nvml__bit_values_match_nvml_h(void **state)
{
	(void)state;
	/* nvmlClocksEventReason* / nvmlClocksThrottleReason* in nvml.h */
	assert_true(KTUNE_NVML_GPU_IDLE == 0x1ULL);
	assert_true(KTUNE_NVML_APP_CLOCKS == 0x2ULL);
	assert_true(KTUNE_NVML_SW_POWER_CAP == 0x4ULL);
	assert_true(KTUNE_NVML_HW_SLOWDOWN == 0x8ULL);
	assert_true(KTUNE_NVML_SYNC_BOOST == 0x10ULL);
	assert_true(KTUNE_NVML_SW_THERMAL == 0x20ULL);
	assert_true(KTUNE_NVML_HW_THERMAL == 0x40ULL);
	assert_true(KTUNE_NVML_HW_POWER_BRAKE == 0x80ULL);
	assert_true(KTUNE_NVML_DISPLAY_CLOCKS == 0x100ULL);
	assert_true(KTUNE_NVML_COUNTED_THROTTLE == 0xe8ULL);
}

static void test_nvml__all_counted_reasons_named_in_bit_order(void **state)
{
	struct ktune_gpu_sample b = sample(0x8 | 0x40, 0), a = sample(0x20 | 0x80 | 0x4, 0);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(verdict(&b, &a, &v), 1);
	assert_true(v.throttle == 0xe8);
	assert_string_equal(v.reason,
			    "clocks throttled: hw slowdown, sw thermal, hw thermal, hw power brake");
}

/* ------------------------------------------------------------------ verdict: processes */

static void test_nvml__foreign_pid_before_or_after(void **state)
{
	struct ktune_gpu_sample mine = sample(0, 1, 100), other = sample(0, 2, 100, 1234);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(verdict(&other, &mine, &v), 1);
	assert_int_equal(v.nforeign, 1);
	assert_int_equal(v.foreign[0], 1234);
	assert_true(v.throttle == 0);
	assert_string_equal(v.reason, "another process (pid 1234) used the GPU");

	assert_int_equal(verdict(&mine, &other, &v), 1);
	assert_string_equal(v.reason, "another process (pid 1234) used the GPU");

	/* the same process in both samples is one process */
	assert_int_equal(verdict(&other, &other, &v), 1);
	assert_int_equal(v.nforeign, 1);
	assert_string_equal(v.reason, "another process (pid 1234) used the GPU");
}

static void test_nvml__our_pids_are_ignored(void **state)
{
	struct ktune_gpu_sample b = sample(0, 3, 102, 100, 101), a = sample(0, 3, 101, 102, 100);
	struct ktune_gpu_sample empty = sample(0, 0);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(verdict(&b, &a, &v), 0);
	assert_int_equal(verdict(&empty, &empty, &v), 0);
	assert_int_equal(v.pids_checked, 1);

	/* with no pids of ours, every process is foreign */
	assert_int_equal(ktune__nvml_verdict(&b, &a, ours, 0, &v), 1);
	assert_int_equal(v.nforeign, 3);
}

static void test_nvml__several_foreign_pids_across_samples(void **state)
{
	struct ktune_gpu_sample b = sample(0, 2, 100, 1234), a = sample(0, 3, 5678, 100, 1234);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(verdict(&b, &a, &v), 1);
	assert_int_equal(v.nforeign, 2);
	assert_string_equal(v.reason, "2 other processes (pids 1234, 5678) used the GPU");

	b = sample(0, 6, 11, 12, 13, 100, 14, 15);
	a = sample(0, 1, 16);
	assert_int_equal(verdict(&b, &a, &v), 1);
	assert_int_equal(v.nforeign, 6);
	assert_int_equal(v.foreign[3], 14);
	assert_string_equal(v.reason, "6 other processes (pids 11, 12, 13, 14, ...) used the GPU");
}

static void test_nvml__process_and_throttle_together(void **state)
{
	struct ktune_gpu_sample b = sample(0x4, 2, 100, 4321), a = sample(0x8 | 0x40 | 0x4, 1, 100);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(verdict(&b, &a, &v), 1);
	assert_int_equal(v.nforeign, 1);
	assert_true(v.throttle == (0x8 | 0x40));
	assert_string_equal(v.reason,
			    "another process (pid 4321) used the GPU; clocks throttled: hw slowdown, hw thermal");
}

static void test_nvml__unmatchable_pids_count_processes(void **state)
{
	/* in a container NVML may list our worker under a host pid: only counts tell */
	struct ktune_gpu_sample one = sample(0, 1, 777777), two = sample(0, 2, 777777, 888888);
	struct ktune_nvml_verdict v;

	(void)state;
	assert_int_equal(ktune__nvml_verdict(&one, &one, NULL, 1, &v), 0);
	assert_int_equal(v.pids_checked, 1);
	assert_int_equal(ktune__nvml_verdict(&one, &two, NULL, 1, &v), 1);
	assert_int_equal(v.nforeign, 1);
	assert_string_equal(v.reason, "another process used the GPU");
	assert_int_equal(ktune__nvml_verdict(&two, &two, NULL, 0, &v), 1);
	assert_int_equal(v.nforeign, 2);
	assert_string_equal(v.reason, "2 other processes used the GPU");
}

static void test_nvml__processes_past_the_list(void **state)
{
	struct ktune_gpu_sample s = sample(0, 0);
	pid_t many[KTUNE_NVML_MAX_PIDS + 2];
	struct ktune_nvml_verdict v;

	(void)state;
	for (int i = 0; i < KTUNE_NVML_MAX_PIDS + 2; i++)
		many[i] = 1000 + i;
	for (int i = 0; i < KTUNE_NVML_MAX_PIDS; i++)
		s.pids[i] = many[i];
	s.npids = KTUNE_NVML_MAX_PIDS;
	/* the two unlisted may be our last two */
	s.nprocs = KTUNE_NVML_MAX_PIDS + 2;
	assert_int_equal(ktune__nvml_verdict(&s, &s, many, KTUNE_NVML_MAX_PIDS + 2, &v), 0);
	/* five unlisted: at least three are not ours */
	s.nprocs = KTUNE_NVML_MAX_PIDS + 5;
	assert_int_equal(ktune__nvml_verdict(&s, &s, many, KTUNE_NVML_MAX_PIDS + 2, &v), 1);
	assert_int_equal(v.nforeign, 3);
	assert_string_equal(v.reason, "3 other processes used the GPU");
}

static void test_nvml__missing_fields_are_not_checked(void **state)
{
	struct ktune_gpu_sample none, hot = sample(0x8, 1, 9999);
	struct ktune_nvml_verdict v;

	(void)state;
	memset(&none, 0, sizeof(none));
	assert_int_equal(verdict(&none, &none, &v), 0);
	assert_int_equal(v.pids_checked, 0);
	assert_int_equal(v.throttle_checked, 0);

	/* fields a sample did not read are not looked at, whatever they hold */
	hot.have = 0;
	assert_int_equal(verdict(&none, &hot, &v), 0);
	hot.have = KTUNE_GPU_HAVE_THROTTLE;
	assert_int_equal(verdict(&none, &hot, &v), 1);
	assert_int_equal(v.nforeign, 0);
	assert_int_equal(v.pids_checked, 0);
	assert_string_equal(v.reason, "clocks throttled: hw slowdown");

	/* a sample not taken (NULL) is skipped */
	hot = sample(0, 1, 9999);
	assert_int_equal(verdict(NULL, &hot, &v), 1);
	assert_int_equal(verdict(&hot, NULL, &v), 1);
	assert_int_equal(verdict(NULL, NULL, &v), 0);
}

static void test_nvml__sample_has_pid(void **state)
{
	struct ktune_gpu_sample s = sample(0, 2, 100, 200);

	(void)state;
	assert_int_equal(ktune__nvml_sample_has_pid(&s, 200), 1);
	assert_int_equal(ktune__nvml_sample_has_pid(&s, 300), 0);
	s.have = 0;
	assert_int_equal(ktune__nvml_sample_has_pid(&s, 200), 0);
	assert_int_equal(ktune__nvml_sample_has_pid(NULL, 200), 0);
}

/* ------------------------------------------------------------------ uuid text */

static void test_nvml__uuid_text(void **state)
{
	static const unsigned char b[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
					     0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77 };
	unsigned char ff[16];
	char text[KTUNE_NVML_UUID_LEN];

	(void)state;
	ktune__nvml_uuid_text(b, text);
	assert_string_equal(text, FAKE_UUID);
	assert_int_equal(strlen(text), KTUNE_NVML_UUID_LEN - 1);
	memset(ff, 0xff, sizeof(ff));
	ktune__nvml_uuid_text(ff, text);
	assert_string_equal(text, "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");
}

/* ------------------------------------------------------------------ loading */

static void test_nvml__open_refuses_null(void **state)
{
	struct ktune_nvml *n = (struct ktune_nvml *)&n;
	struct ktune_err e = { "" };

	(void)state;
	assert_int_equal(ktune__nvml_open(NULL, &n, &e), KTUNE_ERR_INVALID);
	assert_int_equal(ktune__nvml_open(FAKE_UUID, NULL, &e), KTUNE_ERR_INVALID);
	/* not cut to a real GPU's UUID */
	assert_int_equal(ktune__nvml_open(FAKE_UUID "-and-more", &n, &e), KTUNE_ERR_INVALID);
	assert_null(n);
	ktune__nvml_close(NULL);
}

static void test_nvml__open_unknown_gpu_is_not_found(void **state)
{
	struct ktune_nvml *n = (struct ktune_nvml *)&n;
	struct ktune_err e = { "" };

	(void)state;
	/* whether or not this machine has NVML, it has no such GPU */
	assert_int_equal(ktune__nvml_open(FAKE_UUID, &n, &e), KTUNE_ERR_NOT_FOUND);
	assert_null(n);
	assert_true(strlen(e.msg) > 0);
	printf("nvml: %s\n", e.msg);

	assert_int_equal(ktune__nvml_open_lib("/nonexistent/libnvidia-ml.so.1", FAKE_UUID, &n, &e),
			 KTUNE_ERR_NOT_FOUND);
	assert_non_null(strstr(e.msg, "no NVML: cannot load '/nonexistent/libnvidia-ml.so.1'"));
}

typedef CUresult (*uuid_fn)(unsigned char bytes[16], CUdevice dev);

/* This machine's GPU 0: OK where NVML sees it, else NOT_FOUND; never a crash. */
static void test_nvml__open_this_machine(void **state)
{
	struct ktune_err e = { "" };
	struct ktune_gpu_sample s;
	struct ktune_nvml *n = NULL;
	char text[KTUNE_NVML_UUID_LEN];
	unsigned char bytes[16];
	CUdevice dev;
	uuid_fn get_uuid;
	void *cuda;
	int rc;

	(void)state;
	if (ktune__driver_load(&e) != KTUNE_OK || ktune_cu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
		printf("nvml: no GPU here (%s)\n", e.msg);
		skip();
	}
	cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(cuda);
	*(void **)&get_uuid = dlsym(cuda, "cuDeviceGetUuid_v2");
	if (!get_uuid)
		*(void **)&get_uuid = dlsym(cuda, "cuDeviceGetUuid");
	assert_non_null(get_uuid);
	assert_int_equal(get_uuid(bytes, dev), CUDA_SUCCESS);
	dlclose(cuda);
	ktune__nvml_uuid_text(bytes, text);

	rc = ktune__nvml_open(text, &n, &e);
	printf("nvml: open '%s': %s %s\n", text, ktune_status_name(rc), rc ? e.msg : "");
	assert_true(rc == KTUNE_OK || rc == KTUNE_ERR_NOT_FOUND);
	if (rc)
		return;
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_OK);
	printf("nvml: have 0x%x throttle 0x%llx sm %u MHz %u C util %u%% procs %d\n", s.have,
	       s.throttle, s.sm_mhz, s.temp_c, s.util_gpu, s.nprocs);
	assert_true(s.have & KTUNE_GPU_HAVE_THROTTLE);
	if (s.have & KTUNE_GPU_HAVE_SM_CLOCK)
		assert_true(s.sm_mhz > 0 && s.sm_mhz < 10000);
	if (s.have & KTUNE_GPU_HAVE_TEMP)
		assert_true(s.temp_c < 150);
	if (s.have & KTUNE_GPU_HAVE_UTIL)
		assert_true(s.util_gpu <= 100);
	assert_true(s.npids <= s.nprocs && s.npids <= KTUNE_NVML_MAX_PIDS);
	ktune__nvml_close(n);
}

/* ------------------------------------------------------------------ a stand-in NVML */

/* fake-nvml.c's state; the same struct layout. */
struct fake_nvml {
	int init_rc, uuid_rc;
	char uuid[64];
	int inits, shutdowns;
	int reasons_rc, clock_rc, temp_rc, util_rc, procs_rc;
	unsigned long long reasons;
	unsigned int clock, temp, util;
	unsigned int nprocs;
	unsigned int grow;
	unsigned int pids[256];
	int procs_calls;
};

struct fake {
	void *lib;
	struct fake_nvml *state;
	const char *path;
};

/* Loads a stand-in, resets its state to a healthy GPU with one process (pid 100). */
static struct fake fake_load(const char *path)
{
	struct fake f = { NULL, NULL, path };

	f.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(f.lib);
	f.state = dlsym(f.lib, "fake_nvml");
	assert_non_null(f.state);
	memset(f.state, 0, sizeof(*f.state));
	strcpy(f.state->uuid, FAKE_UUID);
	f.state->clock = 1980;
	f.state->temp = 41;
	f.state->util = 97;
	f.state->reasons = KTUNE_NVML_SW_POWER_CAP;
	f.state->nprocs = 1;
	f.state->pids[0] = 100;
	return f;
}

static void fake_unload(struct fake *f)
{
	assert_int_equal(f->state->inits, f->state->shutdowns);
	dlclose(f->lib);
}

static void test_nvml__fake_samples_every_field(void **state)
{
	struct fake f = fake_load(FAKE_NVML_CURRENT);
	struct ktune_err e = { "" };
	struct ktune_gpu_sample s;
	struct ktune_nvml *n = NULL;

	(void)state;
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_OK);
	assert_non_null(n);
	assert_int_equal(f.state->inits, 1);
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_OK);
	assert_int_equal(s.have, KTUNE_GPU_HAVE_THROTTLE | KTUNE_GPU_HAVE_SM_CLOCK |
					 KTUNE_GPU_HAVE_TEMP | KTUNE_GPU_HAVE_UTIL |
					 KTUNE_GPU_HAVE_PIDS);
	assert_true(s.throttle == KTUNE_NVML_SW_POWER_CAP);
	assert_int_equal(s.sm_mhz, 1980);
	assert_int_equal(s.temp_c, 41);
	assert_int_equal(s.util_gpu, 97);
	assert_int_equal(s.nprocs, 1);
	assert_int_equal(s.npids, 1);
	assert_int_equal(s.pids[0], 100);
	ktune__nvml_close(n);
	assert_int_equal(f.state->shutdowns, 1);
	fake_unload(&f);
}

static void test_nvml__fake_open_failures(void **state)
{
	struct fake f = fake_load(FAKE_NVML_CURRENT);
	struct ktune_err e = { "" };
	struct ktune_nvml *n = (struct ktune_nvml *)&n;

	(void)state;
	assert_int_equal(ktune__nvml_open_lib(f.path, "GPU-other", &n, &e), KTUNE_ERR_NOT_FOUND);
	assert_null(n);
	assert_string_equal(e.msg, "NVML has no GPU 'GPU-other': Not Found (NVML error 6)");

	f.state->init_rc = 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_ERR_NOT_FOUND);
	assert_non_null(strstr(e.msg, "nvmlInit failed"));
	f.state->init_rc = 0;

	f.state->uuid_rc = 15; /* NVML_ERROR_GPU_IS_LOST */
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_ERR_CUDA);
	assert_non_null(strstr(e.msg, "GPU is lost"));
	fake_unload(&f);
}

static void test_nvml__fake_missing_symbols_are_not_found(void **state)
{
	struct fake f = fake_load(FAKE_NVML_BARE);
	struct ktune_err e = { "" };
	struct ktune_nvml *n = (struct ktune_nvml *)&n;

	(void)state;
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_ERR_NOT_FOUND);
	assert_null(n);
	assert_non_null(strstr(e.msg, "NVML too old: no symbol 'nvmlDeviceGetHandleByUUID'"));
	assert_int_equal(f.state->inits, 0);
	fake_unload(&f);
}

static void test_nvml__fake_old_names(void **state)
{
	struct fake f = fake_load(FAKE_NVML_OLD);
	struct ktune_err e = { "" };
	struct ktune_gpu_sample s;
	struct ktune_nvml *n = NULL;

	(void)state;
	f.state->reasons = KTUNE_NVML_HW_SLOWDOWN;
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_OK);
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_OK);
	/* the old throttle-reasons and _v2 process queries; no clock, temperature, utilisation */
	assert_int_equal(s.have, KTUNE_GPU_HAVE_THROTTLE | KTUNE_GPU_HAVE_PIDS);
	assert_true(s.throttle == KTUNE_NVML_HW_SLOWDOWN);
	assert_int_equal(s.nprocs, 1);
	ktune__nvml_close(n);
	fake_unload(&f);
}

static void test_nvml__fake_unsupported_fields_are_left_out(void **state)
{
	struct fake f = fake_load(FAKE_NVML_CURRENT);
	struct ktune_err e = { "" };
	struct ktune_gpu_sample s;
	struct ktune_nvml *n = NULL;

	(void)state;
	f.state->temp_rc = 3;  /* NVML_ERROR_NOT_SUPPORTED */
	f.state->procs_rc = 4; /* NVML_ERROR_NO_PERMISSION */
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_OK);
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_OK);
	assert_int_equal(s.have, KTUNE_GPU_HAVE_THROTTLE | KTUNE_GPU_HAVE_SM_CLOCK |
					 KTUNE_GPU_HAVE_UTIL);
	assert_int_equal(s.nprocs, 0);

	f.state->reasons_rc = 15; /* NVML_ERROR_GPU_IS_LOST */
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_ERR_CUDA);
	assert_string_equal(e.msg, "cannot read the clock event reasons of GPU '" FAKE_UUID
				   "': GPU is lost (NVML error 15)");
	ktune__nvml_close(n);
	fake_unload(&f);
}

static void test_nvml__fake_long_and_growing_process_list(void **state)
{
	struct fake f = fake_load(FAKE_NVML_CURRENT);
	struct ktune_err e = { "" };
	struct ktune_gpu_sample s;
	struct ktune_nvml_verdict v;
	struct ktune_nvml *n = NULL;

	(void)state;
	f.state->nprocs = 100;
	for (int i = 0; i < 100; i++)
		f.state->pids[i] = 5000 + i / 2; /* each pid twice: 50 distinct */
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_OK);
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_OK);
	assert_int_equal(s.nprocs, 50);
	assert_int_equal(s.npids, 50);
	assert_int_equal(s.pids[49], 5049);

	/* 100 distinct, and 3 more appear each time the buffer was short */
	for (int i = 0; i < 100; i++)
		f.state->pids[i] = 5000 + i;
	f.state->grow = 3;
	f.state->procs_calls = 0;
	assert_int_equal(ktune__nvml_sample(n, &s, &e), KTUNE_OK);
	assert_int_equal(f.state->procs_calls, 2);
	assert_int_equal(s.nprocs, 103);
	assert_int_equal(s.npids, KTUNE_NVML_MAX_PIDS);
	assert_int_equal(s.pids[0], 5000);
	/* 64 listed, none ours; of the 39 unlisted, 3 could be ours */
	assert_int_equal(ktune__nvml_verdict(&s, &s, ours, 3, &v), 1);
	assert_int_equal(v.nforeign, 100);
	ktune__nvml_close(n);
	fake_unload(&f);
}

static void test_nvml__fake_foreign_process_between_samples(void **state)
{
	struct fake f = fake_load(FAKE_NVML_CURRENT);
	struct ktune_err e = { "" };
	struct ktune_gpu_sample before, after;
	struct ktune_nvml_verdict v;
	struct ktune_nvml *n = NULL;

	(void)state;
	assert_int_equal(ktune__nvml_open_lib(f.path, FAKE_UUID, &n, &e), KTUNE_OK);
	assert_int_equal(ktune__nvml_sample(n, &before, &e), KTUNE_OK);
	assert_int_equal(ktune__nvml_sample_has_pid(&before, 100), 1);
	f.state->nprocs = 2;
	f.state->pids[1] = 31337;
	f.state->reasons = KTUNE_NVML_SW_POWER_CAP | KTUNE_NVML_SW_THERMAL;
	assert_int_equal(ktune__nvml_sample(n, &after, &e), KTUNE_OK);
	assert_int_equal(ktune__nvml_verdict(&before, &after, ours, 3, &v), 1);
	assert_string_equal(v.reason,
			    "another process (pid 31337) used the GPU; clocks throttled: sw thermal");
	ktune__nvml_close(n);
	fake_unload(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nvml__clean_when_only_ours_and_no_throttle),
		cmocka_unit_test(test_nvml__counted_reasons_disturb_before_or_after),
		cmocka_unit_test(test_nvml__ignored_reasons_stay_clean),
		cmocka_unit_test(test_nvml__bit_values_match_nvml_h),
		cmocka_unit_test(test_nvml__all_counted_reasons_named_in_bit_order),
		cmocka_unit_test(test_nvml__foreign_pid_before_or_after),
		cmocka_unit_test(test_nvml__our_pids_are_ignored),
		cmocka_unit_test(test_nvml__several_foreign_pids_across_samples),
		cmocka_unit_test(test_nvml__process_and_throttle_together),
		cmocka_unit_test(test_nvml__unmatchable_pids_count_processes),
		cmocka_unit_test(test_nvml__processes_past_the_list),
		cmocka_unit_test(test_nvml__missing_fields_are_not_checked),
		cmocka_unit_test(test_nvml__sample_has_pid),
		cmocka_unit_test(test_nvml__uuid_text),
		cmocka_unit_test(test_nvml__open_refuses_null),
		cmocka_unit_test(test_nvml__open_unknown_gpu_is_not_found),
		cmocka_unit_test(test_nvml__open_this_machine),
		cmocka_unit_test(test_nvml__fake_samples_every_field),
		cmocka_unit_test(test_nvml__fake_open_failures),
		cmocka_unit_test(test_nvml__fake_missing_symbols_are_not_found),
		cmocka_unit_test(test_nvml__fake_old_names),
		cmocka_unit_test(test_nvml__fake_unsupported_fields_are_left_out),
		cmocka_unit_test(test_nvml__fake_long_and_growing_process_list),
		cmocka_unit_test(test_nvml__fake_foreign_process_between_samples),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
