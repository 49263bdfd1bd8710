/*
 * check.h - how close a result came to the reference: what the worker's
 * verification reports and what `ktune verify` prints.  Plain data, so that
 * the tuner's callers see it without the worker's CUDA types.
 */
#ifndef KTUNE_CHECK_H
#define KTUNE_CHECK_H

struct ktune_check {
	double err_fro; /* ||x - ref||_F / ||ref||_F */
	double err_max; /* max |x - ref| / rms(ref) */
	unsigned long long bad; /* NaN or Inf elements */
	int pass;
};

#endif
