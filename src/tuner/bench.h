/*
 * bench.h - the benchmark protocol, the same for every measurement ktune
 * stores: CUDA events around each launch, L2 flushed before each run by
 * writing a buffer of twice the L2 size, warm-up runs, repetitions until
 * the p20..p80 spread is within 2% of the median (or a cap is reached),
 * median reported with p20 and p80.
 */
#ifndef KTUNE_BENCH_H
#define KTUNE_BENCH_H

#include "runtime/driver.h"

#define KTUNE_BENCH_MAX_REPS 200
#define KTUNE_PROTOCOL "events;l2flush=2xL2;warmup=1;reps=10..200 until (p80-p20)<2%median or 0.5s;median,p20,p80"

struct ktune_bench {
	CUstream stream;
	CUdeviceptr flush;
	size_t flush_bytes;
	CUevent start[KTUNE_BENCH_MAX_REPS], stop[KTUNE_BENCH_MAX_REPS];
};

struct ktune_timing {
	double median_us, p20_us, p80_us;
	int reps;
};

/* One timed thing: launches its work on `stream`. */
typedef int (*ktune_launch_fn)(void *arg, CUstream stream, struct ktune_err *e);

int ktune__bench_open(struct ktune_bench *b, int l2_bytes, struct ktune_err *e);
void ktune__bench_close(struct ktune_bench *b);

/*
 * Times fn.  `quick` screens a candidate (warm-up, then 3 flushed runs, the
 * median); otherwise the full protocol above.
 */
int ktune__bench_time(struct ktune_bench *b, ktune_launch_fn fn, void *arg, int quick,
		      struct ktune_timing *out, struct ktune_err *e);

#endif
