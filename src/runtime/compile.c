/*
 * compile.c - NVRTC to CUBIN, with a content-addressed disk cache.
 *
 * A cache entry is two files named by the hash: <hash>.cubin and <hash>.res
 * (the resource usage parsed from ptxas's log, which a cached load cannot
 * recompute).  Both are written atomically and private (0600), .res first,
 * so a .cubin on disk always has its .res.
 */
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile.h"
#include "templates.h"

/* Bump when the cache layout or the way options are hashed changes. */
#define CACHE_FORMAT "ktune-cubin-1"

static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static char version[32];

static void read_version(void)
{
	int major = 0, minor = 0;
	nvrtcVersion(&major, &minor);
	snprintf(version, sizeof(version), "%d.%d", major, minor);
}

const char *ktune__nvrtc_version(void)
{
	pthread_once(&version_once, read_version);
	return version;
}

void ktune__cubin_free(struct ktune_cubin *c)
{
	if (!c)
		return;
	free(c->data);
	c->data = NULL;
	c->size = 0;
}

/* The number that ends just before p (ptxas puts a count before its label). */
static int number_before(const char *log, const char *p)
{
	while (p > log && p[-1] >= '0' && p[-1] <= '9')
		p--;
	return atoi(p);
}

static void keep_max(int *have, int v)
{
	if (v > *have)
		*have = v;
}

/*
 * ptxas's "-v" lines into res: for a module of several kernels (a
 * backward's passes, a split reduction's second stage) the worst of each
 * figure, so that a spill in any kernel of the candidate is seen.
 */
void ktune__ptxas_resources(const char *log, struct ktune_resources *res)
{
	const char *p;
	memset(res, 0, sizeof(*res));
	for (p = log; (p = strstr(p, " bytes stack frame")); p++) {
		int stores = 0, loads = 0;
		keep_max(&res->stack, number_before(log, p));
		if (sscanf(p, " bytes stack frame, %d bytes spill stores, %d bytes spill loads", &stores, &loads) == 2) {
			keep_max(&res->spill_stores, stores);
			keep_max(&res->spill_loads, loads);
		}
	}
	for (p = log; (p = strstr(p, "Used ")); p++) {
		int regs = 0;
		const char *eol = strchr(p, '\n'), *smem = strstr(p, " bytes smem");
		if (sscanf(p, "Used %d registers", &regs) == 1)
			keep_max(&res->registers, regs);
		if (smem && (!eol || smem < eol))
			keep_max(&res->smem_static, number_before(log, smem));
	}
}

/*
 * A cubin from the cache is code that will run: use a cache directory only
 * if it and its parent belong to this user (or root) and no one else may
 * write to them (ktune__dir_trusted), so that another user cannot plant one
 * (the last-resort cache lives under /tmp); and load a file from it only if
 * it too is ours and not writable by others (ktune__read_private_file).  A
 * directory that does not exist yet is created by us, private.
 */

static void cache_key(const char *source, size_t len, const char *const *options,
		      int noptions, const char *arch, char out[65])
{
	const struct ktune_template_file *headers[KTUNE_MAX_HEADERS];
	int nheaders = ktune__template_headers(source, len, headers);
	size_t total = len + 256;
	for (int i = 0; i < nheaders; i++)
		total += headers[i]->len;
	for (int i = 0; i < noptions; i++)
		total += strlen(options[i]) + 1;
	char *buf = malloc(total), *p = buf;
	if (!buf) {
		out[0] = 0;
		return;
	}
	p += sprintf(p, "%s\n%s\n%s\n", CACHE_FORMAT, arch, ktune__nvrtc_version());
	for (int i = 0; i < noptions; i++)
		p += sprintf(p, "%s\n", options[i]);
	memcpy(p, source, len);
	p += len;
	for (int i = 0; i < nheaders; i++) {
		memcpy(p, headers[i]->text, headers[i]->len);
		p += headers[i]->len;
	}
	ktune__sha256_hex(buf, (size_t)(p - buf), out);
	free(buf);
}

/* "<dir>/<hash><ext>", malloc'd; NULL when out of memory. */
static char *cache_path(const char *dir, const char *hash, const char *ext)
{
	size_t n = strlen(dir) + strlen(hash) + strlen(ext) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s%s", dir, hash, ext);
	return p;
}

static int cache_load(const char *dir, const char *hash, struct ktune_cubin *out)
{
	char *res_path = cache_path(dir, hash, ".res"), *cubin_path = cache_path(dir, hash, ".cubin");
	char *res = NULL, *data = NULL;
	size_t res_len, size;
	int n, hit = 0;

	if (!res_path || !cubin_path ||
	    ktune__read_private_file(res_path, 4096, &res, &res_len, NULL))
		goto out;
	n = sscanf(res, "%d %d %d %d %d", &out->res.registers, &out->res.spill_stores,
		   &out->res.spill_loads, &out->res.smem_static, &out->res.stack);
	if (n != 5 || ktune__read_private_file(cubin_path, 64u << 20, &data, &size, NULL))
		goto out;
	out->data = data;
	out->size = size;
	out->cached = 1;
	hit = 1;
out:
	free(res);
	free(res_path);
	free(cubin_path);
	return hit;
}

static void cache_store(const char *dir, const char *hash, const struct ktune_cubin *c)
{
	char *path = NULL, res[128];
	if (ktune__mkdirs(dir, NULL))
		return;
	int n = snprintf(res, sizeof(res), "%d %d %d %d %d\n", c->res.registers,
			 c->res.spill_stores, c->res.spill_loads, c->res.smem_static,
			 c->res.stack);
	if (!(path = cache_path(dir, hash, ".res")) ||
	    ktune__write_private_file(path, res, (size_t)n, NULL))
		goto out;
	free(path);
	/* a failed store only costs a recompile */
	if ((path = cache_path(dir, hash, ".cubin")))
		ktune__write_private_file(path, c->data, c->size, NULL);
out:
	free(path);
}

int ktune__compile(const char *name, const char *source, size_t len,
		   const char *const *options, int noptions, const char *arch,
		   const char *cache_dir, struct ktune_cubin *out, struct ktune_err *e)
{
	const char *opts[KTUNE_MAX_OPTIONS + 4];
	char arch_opt[64], hash[65], *dir = NULL;
	nvrtcProgram prog = NULL;
	char *log = NULL;
	int rc = KTUNE_OK;

	memset(out, 0, sizeof(*out));
	if (noptions > KTUNE_MAX_OPTIONS)
		return ktune__fail(e, KTUNE_ERR_INVALID, "too many compile options (%d)", noptions);

	if (!cache_dir) {
		char *base = NULL;
		if (ktune__cache_dir(&base, NULL) == KTUNE_OK && (dir = malloc(strlen(base) + 7)))
			sprintf(dir, "%s/cubin", base);
		free(base);
	} else if (cache_dir[0] && ktune__path_check(cache_dir, "cache", NULL) == KTUNE_OK) {
		dir = strdup(cache_dir);
	}
	if (dir && !ktune__dir_trusted(dir)) {
		free(dir); /* compile every time rather than load what someone else may have put there */
		dir = NULL;
	}
	cache_key(source, len, options, noptions, arch, hash);
	if (dir && hash[0] && cache_load(dir, hash, out)) {
		free(dir);
		return KTUNE_OK;
	}

	double t0 = ktune__now();
	snprintf(arch_opt, sizeof(arch_opt), "--gpu-architecture=%s", arch);
	int n = 0;
	opts[n++] = arch_opt;
	opts[n++] = "--std=c++17";
	opts[n++] = "--ptxas-options=-v";
	for (int i = 0; i < noptions; i++)
		opts[n++] = options[i];

	/* the embedded headers the source mentions, in memory: no include path, no CUDA headers */
	const struct ktune_template_file *headers[KTUNE_MAX_HEADERS];
	const char *header_text[KTUNE_MAX_HEADERS], *header_name[KTUNE_MAX_HEADERS];
	int nheaders = ktune__template_headers(source, len, headers);
	for (int i = 0; i < nheaders; i++) {
		header_text[i] = headers[i]->text;
		header_name[i] = headers[i]->name;
	}
	nvrtcResult r = nvrtcCreateProgram(&prog, source, name, nheaders, nheaders ? header_text : NULL,
					   nheaders ? header_name : NULL);
	if (r != NVRTC_SUCCESS) {
		free(dir);
		return ktune__fail(e, KTUNE_ERR_COMPILE, "cannot create NVRTC program '%s': %s",
				   name, nvrtcGetErrorString(r));
	}
	nvrtcResult cr = nvrtcCompileProgram(prog, n, opts);
	size_t log_size = 0;
	nvrtcGetProgramLogSize(prog, &log_size);
	log = calloc(1, log_size + 1);
	if (!log) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory reading the NVRTC log");
		goto out;
	}
	nvrtcGetProgramLog(prog, log);
	if (cr != NVRTC_SUCCESS) {
		rc = ktune__fail(e, KTUNE_ERR_COMPILE, "compile of '%s' for %s failed: %s\n%s",
				 name, arch, nvrtcGetErrorString(cr), log);
		goto out;
	}
	/* a virtual arch (compute_90) gives PTX only: NVRTC reports a 0-byte CUBIN */
	if ((r = nvrtcGetCUBINSize(prog, &out->size)) != NVRTC_SUCCESS || !out->size) {
		rc = ktune__fail(e, KTUNE_ERR_COMPILE, "no CUBIN for '%s' (%s): is '%s' a real arch?",
				 name, r != NVRTC_SUCCESS ? nvrtcGetErrorString(r) : "empty", arch);
		goto out;
	}
	out->data = malloc(out->size);
	if (!out->data) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory for a %zu-byte CUBIN", out->size);
		goto out;
	}
	nvrtcGetCUBIN(prog, out->data);
	ktune__ptxas_resources(log, &out->res);
	out->seconds = ktune__now() - t0;
	if (dir && hash[0])
		cache_store(dir, hash, out);
out:
	if (rc)
		ktune__cubin_free(out);
	free(dir);
	free(log);
	nvrtcDestroyProgram(&prog);
	return rc;
}
