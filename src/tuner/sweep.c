/*
 * sweep.c - tuning every key of a spec, resumably: a key already tuned on
 * this device with the current template source is skipped unless forced.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/templates.h"
#include "tuner/tuner.h"

static void print_header(FILE *out)
{
	fprintf(out, "%-6s %-4s %-6s %-20s %10s %9s %9s %7s %9s  %s\n", "op", "type", "layout",
		"m x n x k", "time_us", "TFLOP/s", "cuBLAS", "ratio", "status", "config");
}

static void print_row(FILE *out, const struct ktune_key *key, const struct ktune_result *r,
		      const char *status)
{
	char layout[3], shape[64];
	ktune__layout_name(key, layout);
	snprintf(shape, sizeof(shape), "%lldx%lldx%lld", (long long)key->m, (long long)key->n,
		 (long long)key->k);
	if (!r) {
		fprintf(out, "%-6s %-4s %-6s %-20s %10s %9s %9s %7s %9s\n", key->op,
			ktune__dtype_name(key->dtype), layout, shape, "-", "-", "-", "-", status);
		return;
	}
	double cublas_tflops = r->cublas_us > 0 ? ktune__gemm_flops(key) / r->cublas_us / 1e6 : 0;
	double ratio = r->cublas_us > 0 ? r->cublas_us / r->time_us : 0;
	fprintf(out, "%-6s %-4s %-6s %-20s %10.1f %9.1f %9.1f %7.2f %9s  %s\n", key->op,
		ktune__dtype_name(key->dtype), layout, shape, r->time_us, r->tflops, cublas_tflops,
		ratio, status, r->config);
}

int ktune__sweep(struct ktune_tuner *t, const struct ktune_spec *spec,
		 const struct ktune_tune_options *o, FILE *out, struct ktune_err *e)
{
	const struct ktune_device_id *dev = &ktune__tuner_device(t)->id;
	const char *hash = ktune__template_hash(KTUNE_GEMM_SOURCE);
	struct ktune_result *results = calloc((size_t)spec->nkeys, sizeof(*results));
	char (*status)[16] = calloc((size_t)spec->nkeys, sizeof(*status));
	int failed = 0, tuned = 0, skipped = 0;
	double t0 = ktune__now(), log_ratio = 0;
	int nratio = 0;

	if (!results || !status) {
		free(results);
		free(status);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	}
	for (int i = 0; i < spec->nkeys; i++) {
		const struct ktune_key *key = &spec->keys[i];
		struct ktune_tune_report rep;
		struct ktune_err ke = { "" };
		char text[128];

		ktune__key_format(key, text, sizeof(text));
		int found = ktune__db_get_result(ktune__tuner_db(t), dev, key, &results[i], &ke);
		if (found == 1 && !strcmp(results[i].template_hash, hash) && !o->force) {
			snprintf(status[i], sizeof(status[i]), "cached");
			skipped++;
			if (o->progress)
				fprintf(o->progress, "key %d/%d %s: already tuned\n", i + 1, spec->nkeys, text);
			continue;
		}
		if (o->progress)
			fprintf(o->progress, "key %d/%d %s\n", i + 1, spec->nkeys, text);
		int rc = ktune__tune_key(t, key, o, &rep, &ke);
		if (rc) {
			memset(&results[i], 0, sizeof(results[i]));
			snprintf(status[i], sizeof(status[i]), "failed");
			fprintf(stderr, "ktune: %s\n", ke.msg);
			failed++;
			if (rc == KTUNE_ERR_CUDA || rc == KTUNE_ERR_NOMEM || rc == KTUNE_ERR_DB)
				break; /* the device or the database is gone: stop, the rest resumes later */
			continue;
		}
		results[i] = rep.result;
		snprintf(status[i], sizeof(status[i]), "tuned");
		tuned++;
	}
	print_header(out);
	for (int i = 0; i < spec->nkeys; i++) {
		const struct ktune_result *r = status[i][0] && strcmp(status[i], "failed") ? &results[i] : NULL;
		print_row(out, &spec->keys[i], r, status[i][0] ? status[i] : "not run");
		if (r && r->cublas_us > 0) {
			log_ratio += log(r->cublas_us / r->time_us);
			nratio++;
		}
	}
	fprintf(out, "\n%d keys: %d tuned, %d already tuned, %d failed, %d not run; %.1f s",
		spec->nkeys, tuned, skipped, failed, spec->nkeys - tuned - skipped - failed,
		ktune__now() - t0);
	if (nratio)
		fprintf(out, "; geometric mean of cuBLAS time / ktune time: %.3f", exp(log_ratio / nratio));
	fprintf(out, "\n");
	free(results);
	free(status);
	return failed;
}
