/*
 * kernels.c - the loaded kernel variants of a context: compiled with NVRTC
 * (or read from the disk cache) on first use, then kept for the context's life.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/compile.h"
#include "runtime/context.h"
#include "templates.h"

/*
 * An op's kernel: its family's template with the op's defines, for the
 * device's own arch, or for the family's (sm_90a) where it has one and runs
 * on the device.
 */
static int op_compile(const struct ktune_op *op, const struct ktune_key *key,
		      const struct ktune_config *cfg, const char *arch, const char *cache_dir,
		      struct ktune_cubin *out, struct ktune_err *e)
{
	char defines[KTUNE_MAX_OPTIONS][48];
	const char *opts[KTUNE_MAX_OPTIONS];
	if (cfg->family < 0 || cfg->family >= op->nfamilies)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s has no family %d", op->name, cfg->family);
	const char *name = op->families[cfg->family].source;
	const struct ktune_template_file *src = ktune__template_file(name);
	if (!ktune__op_family_runs(op, cfg->family, arch))
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED, "the %s family compiles for %s only, not '%s'",
				   op->families[cfg->family].name, op->families[cfg->family].arch, arch);
	if (!src)
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no embedded template '%s'", name);
	int n = op->defines(key, cfg, defines, KTUNE_MAX_OPTIONS);
	if (n < 0)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s: no defines for this config", op->name);
	for (int i = 0; i < n; i++)
		opts[i] = defines[i];
	return ktune__compile(src->name, src->text, src->len, opts, n, ktune__op_compile_arch(op, cfg->family, arch),
			      cache_dir, out, e);
}

int ktune__kernel_compile(const struct ktune_key *key, const struct ktune_config *cfg,
			  const char *arch, const char *cache_dir, struct ktune_cubin *out,
			  struct ktune_err *e)
{
	const struct ktune_op *op = ktune__op_of(key);
	if (!op)
		return ktune__fail(e, KTUNE_ERR_INVALID, "op '%.16s' is not one of %s", key->op,
				   ktune__op_names());
	if (!ktune__op_is_gemm(op))
		return op_compile(op, key, cfg, arch, cache_dir, out, e);
	char defines[KTUNE_MAX_OPTIONS][48];
	const char *opts[KTUNE_MAX_OPTIONS];
	const char *name = ktune__gemm_family_source(cfg->family);
	const struct ktune_template_file *src = name ? ktune__template_file(name) : NULL;

	if (!src)
		return ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no embedded template for GEMM family %d",
				   cfg->family);
	if (cfg->family == KTUNE_GEMM_WGMMA && strcmp(ktune__gemm_compile_arch(cfg->family, arch), "sm_90a"))
		return ktune__fail(e, KTUNE_ERR_UNSUPPORTED,
				   "the wgmma family compiles for sm_90a only, not '%s'", arch);
	int n = ktune__gemm_defines(key, cfg, defines, KTUNE_MAX_OPTIONS);
	for (int i = 0; i < n; i++)
		opts[i] = defines[i];
	return ktune__compile(src->name, src->text, src->len, opts, n,
			      ktune__gemm_compile_arch(cfg->family, arch), cache_dir, out, e);
}

int ktune__kernel_same(const struct ktune_key *ka, const struct ktune_config *a, const struct ktune_key *kb,
		       const struct ktune_config *b)
{
	int once_a[2], once_b[2];
	const struct ktune_op *op = ktune__op_of(kb);
	if (strcmp(ka->op, kb->op))
		return 0;
	if (op && !ktune__op_is_gemm(op))
		return ktune__op_same_kernel(op, ka, a, kb, b);
	ktune__gemm_read_once(ka, a, &once_a[0], &once_a[1]);
	ktune__gemm_read_once(kb, b, &once_b[0], &once_b[1]);
	return ka->dtype == kb->dtype && ka->variant[0] == kb->variant[0] && ka->variant[1] == kb->variant[1] &&
	       ka->aligned == kb->aligned && once_a[0] == once_b[0] && once_a[1] == once_b[1] &&
	       ktune__gemm_same_kernel(a, b);
}

static int same_variant(const struct ktune_kernel *k, const struct ktune_key *key,
			const struct ktune_config *cfg)
{
	return ktune__kernel_same(&k->key, &k->cfg, key, cfg);
}

int ktune__kernel_get(ktune_ctx *ctx, const struct ktune_key *key,
		      const struct ktune_config *cfg, const struct ktune_cubin *cubin,
		      struct ktune_kernel **out, struct ktune_err *e)
{
	struct ktune_cubin compiled = { 0 };
	struct ktune_kernel *k;
	int rc = KTUNE_OK;

	for (k = ctx->kernels; k; k = k->next)
		if (same_variant(k, key, cfg)) {
			*out = k;
			return KTUNE_OK;
		}
	if (!cubin) {
		if ((rc = ktune__kernel_compile(key, cfg, ctx->id.arch, ctx->cache_dir, &compiled, e)))
			return rc;
		cubin = &compiled;
		/* what a cold start costs: ktune_get_stats, and ktune warm's proof */
		if (compiled.cached) {
			ctx->cache_loads++;
		} else {
			ctx->nvrtc_compiles++;
			ctx->nvrtc_seconds += compiled.seconds;
		}
	}
	k = calloc(1, sizeof(*k));
	if (!k) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	const struct ktune_op *op = ktune__op_of(key);
	int gemm = op && ktune__op_is_gemm(op);
	k->key = *key;
	snprintf(k->op, sizeof(k->op), "%s", key->op);
	k->dtype = key->dtype;
	memcpy(k->variant, key->variant, sizeof(k->variant));
	k->aligned = key->aligned;
	k->cfg = *cfg;
	k->res = cubin->res;
	if (gemm) {
		ktune__gemm_read_once(key, cfg, &k->read_once_a, &k->read_once_b);
		k->smem = ktune__gemm_smem_bytes(key, cfg);
	}
	CU_GOTO(e, rc, cuModuleLoadData(&k->module, cubin->data));
	if (gemm) {
		CU_GOTO(e, rc, cuModuleGetFunction(&k->fn, k->module, ktune__gemm_entry(cfg->family)));
	} else {
		/* a variant compiles only the kernels it launches (a backward pass, not the forward) */
		const struct ktune_family *f = &op->families[cfg->family];
		int found = 0;
		for (int i = 0; i < KTUNE_OP_MAX_KERNELS && f->entries[i]; i++) {
			CUresult r = ktune_cu.cuModuleGetFunction(&k->fns[i], k->module, f->entries[i]);
			if (r == CUDA_SUCCESS) {
				found++;
				CU_GOTO(e, rc, cuFuncGetAttribute(&k->static_smem[i], CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
								  k->fns[i]));
			}
			else if (r != CUDA_ERROR_NOT_FOUND)
				CU_GOTO(e, rc, cuModuleGetFunction(&k->fns[i], k->module, f->entries[i]));
			else
				k->fns[i] = NULL;
		}
		if (!found) {
			rc = ktune__fail(e, KTUNE_ERR_COMPILE, "'%s' has none of family %s's kernels",
					 f->source, f->name);
			goto out;
		}
		k->fn = k->fns[0];
	}
	if (k->smem > 48 * 1024)
		CU_GOTO(e, rc, cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
						  (int)k->smem));
	if (gemm && cfg->family == KTUNE_GEMM_WGMMA && cfg->cluster_m > 1) {
		/* the cluster shape is compiled in (__cluster_dims__); ask how many fit at once */
		CUlaunchConfig lc = { 0 };
		lc.gridDimX = (unsigned)(cfg->cluster_m * (ctx->id.sm_count > 0 ? ctx->id.sm_count : 1));
		lc.gridDimY = lc.gridDimZ = 1;
		lc.blockDimX = (unsigned)ktune__gemm_threads(cfg);
		lc.blockDimY = lc.blockDimZ = 1;
		lc.sharedMemBytes = (unsigned)k->smem;
		CU_GOTO(e, rc, cuOccupancyMaxActiveClusters(&k->max_clusters, k->fn, &lc));
		if (k->max_clusters < 1) {
			rc = ktune__fail(e, KTUNE_ERR_UNSUPPORTED,
					 "no cluster of %d blocks with %zu bytes of shared memory fits",
					 cfg->cluster_m, k->smem);
			goto out;
		}
	}
	k->next = ctx->kernels;
	ctx->kernels = k;
	ctx->kernels_loaded++;
	*out = k;
	k = NULL;
out:
	if (k) {
		if (k->module)
			ktune_cu.cuModuleUnload(k->module);
		free(k);
	}
	ktune__cubin_free(&compiled);
	return rc;
}
