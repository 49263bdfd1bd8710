/*
 * compile.c - NVRTC to CUBIN, with a content-addressed disk cache.
 *
 * A cache entry is two files named by the hash: <hash>.cubin and <hash>.res
 * (the resource usage parsed from ptxas's log, which a cached load cannot
 * recompute).  Both are written atomically, .res first, so a .cubin on disk
 * always has its .res.
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

/* Sums ptxas's "-v" lines for our kernel into res. */
static void parse_resources(const char *log, struct ktune_resources *res)
{
	const char *p;
	memset(res, 0, sizeof(*res));
	if ((p = strstr(log, "bytes stack frame, ")))
		sscanf(p, "bytes stack frame, %d bytes spill stores, %d bytes spill loads",
		       &res->spill_stores, &res->spill_loads);
	/* the stack frame size precedes its label */
	if ((p = strstr(log, " bytes stack frame"))) {
		const char *q = p;
		while (q > log && q[-1] >= '0' && q[-1] <= '9')
			q--;
		res->stack = atoi(q);
	}
	if ((p = strstr(log, "Used ")))
		sscanf(p, "Used %d registers", &res->registers);
	if ((p = strstr(log, "registers, ")) && strstr(p, " bytes smem")) {
		const char *q = strstr(p, " bytes smem");
		while (q > log && q[-1] >= '0' && q[-1] <= '9')
			q--;
		res->smem_static = atoi(q);
	}
}

/*
 * A cubin from the cache is code that will run: use a cache directory only
 * if it and its parent belong to this user (or root) and no one else may
 * write to them, so that another user cannot plant one (the last-resort
 * cache lives under /tmp).  A directory that does not exist yet is created
 * by us with the umask's permissions.
 */
static int cache_dir_trusted(const char *dir)
{
	char parent[4096];
	struct stat st;
	snprintf(parent, sizeof(parent), "%s", dir);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = 0;
	const char *paths[2] = { dir, parent };
	for (int i = 0; i < 2; i++) {
		if (stat(paths[i], &st) != 0)
			continue; /* not there yet: ktune__mkdirs makes it ours */
		if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH)))
			return 0;
	}
	return 1;
}

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

static int cache_load(const char *dir, const char *hash, struct ktune_cubin *out)
{
	char path[4200];
	char *res = NULL, *data = NULL;
	size_t res_len, size;

	snprintf(path, sizeof(path), "%s/%s.res", dir, hash);
	if (ktune__read_file(path, 4096, &res, &res_len, NULL))
		return 0;
	int n = sscanf(res, "%d %d %d %d %d", &out->res.registers, &out->res.spill_stores,
		       &out->res.spill_loads, &out->res.smem_static, &out->res.stack);
	free(res);
	if (n != 5)
		return 0;
	snprintf(path, sizeof(path), "%s/%s.cubin", dir, hash);
	if (ktune__read_file(path, 64u << 20, &data, &size, NULL))
		return 0;
	out->data = data;
	out->size = size;
	out->cached = 1;
	return 1;
}

static void cache_store(const char *dir, const char *hash, const struct ktune_cubin *c)
{
	char path[4200], res[128];
	if (ktune__mkdirs(dir, NULL))
		return;
	int n = snprintf(res, sizeof(res), "%d %d %d %d %d\n", c->res.registers,
			 c->res.spill_stores, c->res.spill_loads, c->res.smem_static,
			 c->res.stack);
	snprintf(path, sizeof(path), "%s/%s.res", dir, hash);
	if (ktune__write_file_atomic(path, res, (size_t)n, NULL))
		return;
	snprintf(path, sizeof(path), "%s/%s.cubin", dir, hash);
	ktune__write_file_atomic(path, c->data, c->size, NULL); /* a failed store only costs a recompile */
}

int ktune__compile(const char *name, const char *source, size_t len,
		   const char *const *options, int noptions, const char *arch,
		   const char *cache_dir, struct ktune_cubin *out, struct ktune_err *e)
{
	const char *opts[KTUNE_MAX_OPTIONS + 4];
	char arch_opt[64], dir[4096], hash[65];
	nvrtcProgram prog = NULL;
	char *log = NULL;
	int rc = KTUNE_OK;

	memset(out, 0, sizeof(*out));
	if (noptions > KTUNE_MAX_OPTIONS)
		return ktune__fail(e, KTUNE_ERR_INVALID, "too many compile options (%d)", noptions);

	if (!cache_dir) {
		char base[4000];
		ktune__cache_dir(base, sizeof(base));
		snprintf(dir, sizeof(dir), "%s/cubin", base);
	} else {
		snprintf(dir, sizeof(dir), "%s", cache_dir);
	}
	if (dir[0] && !cache_dir_trusted(dir))
		dir[0] = 0; /* compile every time rather than load what someone else may have put there */
	cache_key(source, len, options, noptions, arch, hash);
	if (dir[0] && hash[0] && cache_load(dir, hash, out))
		return KTUNE_OK;

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
	if (r != NVRTC_SUCCESS)
		return ktune__fail(e, KTUNE_ERR_COMPILE, "cannot create NVRTC program '%s': %s",
				   name, nvrtcGetErrorString(r));
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
	parse_resources(log, &out->res);
	out->seconds = ktune__now() - t0;
	if (dir[0] && hash[0])
		cache_store(dir, hash, out);
out:
	if (rc)
		ktune__cubin_free(out);
	free(log);
	nvrtcDestroyProgram(&prog);
	return rc;
}
