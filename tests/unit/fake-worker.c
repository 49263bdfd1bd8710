/*
 * fake-worker.c - a worker process without a GPU, for testing the tuner's
 * orchestration (timeouts, restarts, the negative cache, concurrent sweeps)
 * where no GPU is present.  It speaks the real protocol (serve.c) with fake
 * operations: a made-up H100, compiles that take no time, and run times
 * derived from the config.
 *
 * KTUNE_FAKE_PLAN plants misbehaviour: "action=CONFIG;action=CONFIG;..."
 * where CONFIG is a canonical config text and action is one of
 *   crash          the run loses the CUDA context ("crashed", then exit)
 *   die            the process kills itself running it, without a word
 *   die_once       as die, the first time only (a kill from outside)
 *   hang           the run never finishes
 *   wrong          the result is wrong
 *   compile_error  NVRTC rejects it
 *   compile_hang   NVRTC never finishes
 *   compile_die    the process dies compiling it
 * KTUNE_FAKE_STATE names a directory where die_once keeps its memory.
 * KTUNE_FAKE_RUN_MS makes every run take that long (concurrency tests).
 * KTUNE_FAKE_DRIFT=d makes a heating GPU: the k-th measurement of a worker
 * (full-protocol runs and cuBLAS alike, k from 0) takes 1 + d * k times as long.
 * KTUNE_FAKE_WAVE=a,p makes a GPU whose speed swings instead: the k-th
 * measurement takes 1 + a * sin(2 pi k / p) times as long (both may be set).
 * KTUNE_FAKE_HOT=CONFIG@N[,N...] makes a GPU on which that config runs twice as
 * fast at keys of those N while hot from screening (from a screen run until
 * the next compile): tuning favours it there, a bench (compile, then
 * measure) does not.
 * KTUNE_FAKE_FASTER=CONFIG@N@F makes that config take F times as long at
 * keys of that N, always.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/op.h"
#include "tuner/protocol.h"

static struct ktune_problem problem;

/* A config's canonical text for the current problem's op (GEMM's or the registry's). */
static void config_text(const struct ktune_config *cfg, char *buf, size_t len)
{
	const struct ktune_op *op = ktune__op_of(&problem.key);
	if (op && !ktune__op_is_gemm(op))
		ktune__op_config_format(op, cfg, buf, len);
	else
		ktune__gemm_config_format(cfg, buf, len);
}
static int hot; /* screened since the last compile (KTUNE_FAKE_HOT) */

/* The slow-down of the next measurement under KTUNE_FAKE_DRIFT, counting it. */
static double heat(void)
{
	static int measurements;
	const char *d = getenv("KTUNE_FAKE_DRIFT"), *w = getenv("KTUNE_FAKE_WAVE");
	double a = 0, p = 1, k = measurements++;
	if (w)
		sscanf(w, "%lf,%lf", &a, &p);
	return (1 + (d ? atof(d) : 0) * k) * (1 + a * sin(2 * M_PI * k / p));
}

/*
 * Whether environment variable `var`, "CONFIG@N[,N...][@F]", names cfg and
 * the problem's N; *rest then points after the N list (at "@F" or "").
 */
static int config_at(const char *var, const struct ktune_config *cfg, const char **rest)
{
	const char *h = getenv(var), *at = h ? strchr(h, '@') : NULL;
	char text[256];
	if (!at)
		return 0;
	config_text(cfg, text, sizeof(text));
	if (strlen(text) != (size_t)(at - h) || strncmp(text, h, (size_t)(at - h)))
		return 0;
	*rest = at + 1 + strcspn(at + 1, "@");
	for (const char *n = at; n && n < *rest; n = strchr(n + 1, ','))
		if (problem.key.n == atoll(n + 1))
			return 1;
	return 0;
}

/* Whether cfg is KTUNE_FAKE_HOT's config and the problem has one of its N. */
static int hot_config(const struct ktune_config *cfg)
{
	const char *rest;
	return config_at("KTUNE_FAKE_HOT", cfg, &rest);
}

/* KTUNE_FAKE_FASTER's factor for cfg at this problem: F where it is that config at that N, else 1. */
static double faster(const struct ktune_config *cfg)
{
	const char *rest;
	return config_at("KTUNE_FAKE_FASTER", cfg, &rest) && *rest == '@' ? atof(rest + 1) : 1;
}

/*
 * The planted action for a config, in action[32], or NULL.  The caller's
 * buffer: compile threads ask at once, and one static buffer let one
 * thread's answer overwrite another's.
 */
static const char *planted(const struct ktune_config *cfg, char action[32])
{
	const char *plan = getenv("KTUNE_FAKE_PLAN");
	char text[256];
	if (!plan)
		return NULL;
	config_text(cfg, text, sizeof(text));
	for (const char *p = plan; *p;) {
		const char *eq = strchr(p, '='), *end = strchr(p, ';');
		if (!end)
			end = p + strlen(p);
		if (eq && eq < end) {
			size_t alen = (size_t)(eq - p), clen = (size_t)(end - eq - 1);
			if (clen == strlen(text) && !strncmp(eq + 1, text, clen) && alen < 32) {
				memcpy(action, p, alen);
				action[alen] = 0;
				return action;
			}
		}
		p = *end ? end + 1 : end;
	}
	return NULL;
}

/* Same compiled kernel: a compile action applies to every config that shares it. */
static const char *planted_kernel(const struct ktune_config *cfg, char action[32])
{
	for (int g = 1; g <= 8; g *= 8)
		for (int s = 1; s <= 16; s *= 2) {
			struct ktune_config c = *cfg;
			c.group_size = g;
			c.split_k = s;
			const char *a = planted(&c, action);
			if (a && !strncmp(a, "compile_", 8))
				return a;
		}
	return NULL;
}

static void hang(void)
{
	for (;;)
		pause();
}

static int fake_hello(void *state, const struct ktune_hello_req *req, struct ktune_hello *out,
		      struct ktune_err *e)
{
	(void)state;
	(void)req;
	(void)e;
	snprintf(out->id.name, sizeof(out->id.name), "Fake H100 (no GPU)");
	snprintf(out->id.arch, sizeof(out->id.arch), "sm_90");
	out->id.sm_count = 132;
	snprintf(out->uuid, sizeof(out->uuid), "GPU-fake");
	out->smem_optin = 232448;
	out->l2_bytes = 50 << 20;
	out->driver_version = 13000;
	return KTUNE_OK;
}

static int fake_problem(void *state, const struct ktune_problem *in, struct ktune_problem *out,
			struct ktune_err *e)
{
	(void)state;
	(void)e;
	*out = *in;
	const struct ktune_key *k = &in->key;
	if (strcmp(k->op, "gemm")) { /* another op: packed buffers, aligned unless offset */
		out->key.aligned = in->offset == 0;
		problem = *out;
		return KTUNE_OK;
	}
	if (!out->lda)
		out->lda = k->variant[0] == 't' ? k->m : k->k;
	if (!out->ldb)
		out->ldb = k->variant[1] == 't' ? k->k : k->n;
	if (!out->ldc)
		out->ldc = k->n;
	out->key.aligned = in->offset == 0 && out->lda % 8 == 0 && out->ldb % 8 == 0 &&
			   out->ldc % 8 == 0;
	problem = *out;
	return KTUNE_OK;
}

static int fake_compile(void *state, const struct ktune_key *key, const struct ktune_config *cfg,
			struct ktune_cubin *out, struct ktune_err *e)
{
	char action[32];
	const char *a = planted_kernel(cfg, action);
	(void)state;
	(void)key;
	__atomic_store_n(&hot, 0, __ATOMIC_RELAXED); /* compile threads share it */
	if (a && !strcmp(a, "compile_error"))
		return ktune__fail(e, KTUNE_ERR_COMPILE, "planted compile error");
	if (a && !strcmp(a, "compile_hang"))
		hang();
	if (a && !strcmp(a, "compile_die"))
		raise(SIGKILL);
	memset(out, 0, sizeof(*out));
	out->data = malloc(16);
	out->size = 16;
	return out->data ? KTUNE_OK : KTUNE_ERR_NOMEM;
}

/* die_once: has this config killed a worker before? */
static int died_before(const struct ktune_config *cfg)
{
	const char *dir = getenv("KTUNE_FAKE_STATE");
	char text[256], hash[65], path[4200];
	if (!dir)
		return 0;
	config_text(cfg, text, sizeof(text));
	ktune__sha256_hex(text, strlen(text), hash);
	snprintf(path, sizeof(path), "%s/%s", dir, hash);
	if (access(path, F_OK) == 0)
		return 1;
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
	return 0;
}

static int fake_run(void *state, const struct ktune_config *cfg, const struct ktune_cubin *cubin,
		    enum ktune_run_mode mode, struct ktune_trial *trial, struct ktune_timing *timing,
		    struct ktune_err *e)
{
	char action[32];
	const char *a = planted(cfg, action);
	const char *ms = getenv("KTUNE_FAKE_RUN_MS");
	(void)state;
	(void)cubin;
	(void)e;
	if (ms)
		usleep((useconds_t)(atoi(ms) * 1000));
	if (a && !strcmp(a, "crash")) {
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_CRASHED);
		snprintf(trial->message, sizeof(trial->message),
			 "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered");
		return KTUNE_OK;
	}
	if (a && (!strcmp(a, "die") || (!strcmp(a, "die_once") && !died_before(cfg))))
		raise(SIGKILL);
	if (a && !strcmp(a, "hang"))
		hang();
	if (a && !strcmp(a, "wrong")) {
		snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_WRONG);
		snprintf(trial->message, sizeof(trial->message), "error 1 (Frobenius)");
		trial->err_fro = 1;
		return KTUNE_OK;
	}
	snprintf(trial->status, sizeof(trial->status), "%s", KTUNE_TRIAL_OK);
	trial->err_fro = 1e-4;
	if (mode != KTUNE_RUN_VERIFY) {
		/* a made-up but stable time: bigger tiles are faster, split-K costs a little */
		double t = strcmp(problem.key.op, "gemm")
				   ? 50.0 / (1 + cfg->v[0]) + cfg->v[1] + (double)problem.key.m * 1e-6
				   : 1000.0 / (cfg->block_m * cfg->block_n / 256.0 + cfg->stages) + cfg->split_k +
					     (double)(problem.key.m * problem.key.n) * 1e-6;
		if (mode == KTUNE_RUN_SCREEN)
			__atomic_store_n(&hot, 1, __ATOMIC_RELAXED);
		if (__atomic_load_n(&hot, __ATOMIC_RELAXED) && hot_config(cfg))
			t /= 2;
		t *= faster(cfg);
		if (mode == KTUNE_RUN_MEASURE)
			t *= heat();
		timing->median_us = timing->p20_us = timing->p80_us = t;
		timing->reps = mode == KTUNE_RUN_MEASURE ? 10 : 3;
		trial->time_us = t;
	}
	return KTUNE_OK;
}

static int fake_cublas(void *state, struct ktune_check *check, struct ktune_timing *timing,
		       struct ktune_err *e)
{
	(void)state;
	(void)e;
	memset(check, 0, sizeof(*check));
	check->pass = 1;
	timing->median_us = timing->p20_us = timing->p80_us = 20 * heat();
	timing->reps = 10;
	return KTUNE_OK;
}

static const struct ktune_worker_ops fake_ops = {
	fake_hello, fake_problem, fake_compile, fake_run, fake_cublas,
};

int main(int argc, char **argv)
{
	/* the same command line as the real one: PROG __worker --fd N */
	return ktune__worker_main(argc > 1 ? argc - 1 : argc, argc > 1 ? argv + 1 : argv, &fake_ops,
				  NULL);
}
