/*
 * test_tuning.h - what the tests of the tuner's orchestration share: planting
 * misbehaviour on chosen candidates (fake-worker.c's KTUNE_FAKE_PLAN,
 * planted-worker.c's KTUNE_PLANT), and reading back how each candidate ended.
 */
#ifndef KTUNE_TEST_TUNING_H
#define KTUNE_TEST_TUNING_H

#include <stdio.h>
#include <string.h>

#include "ops/gemm.h"

#define TEST_MAX_PLANTS 16

/*
 * Picks the first candidates of distinct compiled kernels, one per action
 * (so a compile action hits only its own), and writes the plan
 * "action=CONFIG;..." into plan and each config's text into text[i].
 * Returns how many were picked.
 */
static inline int test_plant(const struct ktune_config *cfgs, int n,
			     const char *const *actions, int nactions, char (*text)[256], char *plan,
			     size_t len)
{
	int picked[TEST_MAX_PLANTS], npicked = 0;
	for (int i = 0; i < n && npicked < nactions && npicked < TEST_MAX_PLANTS; i++) {
		int distinct = 1;
		for (int j = 0; j < npicked; j++)
			distinct &= !ktune__gemm_same_kernel(&cfgs[picked[j]], &cfgs[i]);
		if (distinct)
			picked[npicked++] = i;
	}
	plan[0] = 0;
	for (int i = 0; i < npicked; i++) {
		ktune__gemm_config_format(&cfgs[picked[i]], text[i], 256);
		snprintf(plan + strlen(plan), len - strlen(plan), "%s%s=%s", i ? ";" : "", actions[i],
			 text[i]);
	}
	return npicked;
}

/* The (config, status) failures stored for a key (ktune__db_failed_configs). */
struct test_failures {
	char config[64][256];
	char status[64][16];
	int n;
};

static inline int test_note_failure(const char *config, const char *status, void *arg)
{
	struct test_failures *f = arg;
	if (f->n < 64) {
		snprintf(f->config[f->n], sizeof(f->config[0]), "%s", config);
		snprintf(f->status[f->n], sizeof(f->status[0]), "%s", status);
		f->n++;
	}
	return 0;
}

/* A config's stored failure, or "ok" if it has none. */
static inline const char *test_status_of(const struct test_failures *f, const char *config)
{
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->config[i], config))
			return f->status[i];
	return "ok";
}

#endif
