/*
 * gpu_test.h - what the GPU test programs share: skipping without a GPU,
 * and float64 host arithmetic on f16/bf16 bit patterns.
 */
#ifndef KTUNE_GPU_TEST_H
#define KTUNE_GPU_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"
#include "test_util.h"

/* CTest's SKIP_RETURN_CODE: the test reports itself as skipped. */
#define GPU_TEST_SKIP 77

/*
 * Returns 0 if a GPU can be used, else prints why and returns GPU_TEST_SKIP.
 * KTUNE_TEST_FILTER=PATTERN runs only the tests whose names match (cmocka's
 * wildcards): a GPU session is short, and one test of a program may be all
 * that needs running.
 */
static inline int gpu_test_available(const char *prog)
{
	struct ktune_err e;
	if (ktune__driver_load(&e)) {
		printf("%s: skipped: no GPU: %s\n", prog, e.msg);
		return GPU_TEST_SKIP;
	}
#ifdef CMOCKA_H_
	const char *filter = getenv("KTUNE_TEST_FILTER");
	if (filter && *filter)
		cmocka_set_test_filter(filter);
#endif
	return 0;
}

static inline double gpu_test_half_to_double(unsigned short h, int bf16)
{
	if (bf16) {
		unsigned bits = (unsigned)h << 16;
		float f;
		memcpy(&f, &bits, sizeof(f));
		return f;
	}
	int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
	double v;
	if (exp == 0)
		v = ldexp(man, -24);
	else if (exp == 31)
		v = man ? NAN : INFINITY;
	else
		v = ldexp(man + 1024, exp - 25);
	return sign ? -v : v;
}

#endif
