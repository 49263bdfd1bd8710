/*
 * planted-worker.c - the real GPU worker, except that the configs named in
 * KTUNE_PLANT compile to a planted kernel instead of gemm.cu's: one that
 * writes out of bounds, one that spins for ever, one that does not compile
 * and one that computes wrong numbers.  Built for the tests only; the
 * planted kernel has gemm_kernel's name and parameters, so the worker
 * launches it exactly as it would launch a real candidate.
 *
 * KTUNE_PLANT="oob=CONFIG;spin=CONFIG;compile_error=CONFIG;wrong=CONFIG"
 * (CONFIG a canonical config text; every config of the same compiled kernel
 * is planted too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/protocol.h"

static const char planted_source[] =
	"extern \"C\" __global__ void gemm_kernel(const unsigned short *A, const unsigned short *B,\n"
	"	unsigned short *C, int M, int N, int K, long long lda, long long ldb, long long ldc,\n"
	"	float alpha, float beta, int group_size, int split_k, float *partials,\n"
	"	int *tile_counters)\n"
	"{\n"
	"#if PLANT == 1 /* out of bounds: a terabyte past C */\n"
	"	C[(1ll << 40) + threadIdx.x] = 1;\n"
	"#elif PLANT == 2 /* spins for ever */\n"
	"	__shared__ volatile int stop;\n"
	"	if (threadIdx.x == 0)\n"
	"		stop = 0;\n"
	"	__syncthreads();\n"
	"	while (!stop)\n"
	"		;\n"
	"#elif PLANT == 3\n"
	"#error planted: this candidate does not compile\n"
	"#elif PLANT == 4 /* wrong: zeros */\n"
	"	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
	"	for (; i < (long long)M * N; i += (long long)gridDim.x * blockDim.x)\n"
	"		C[(i / N) * ldc + i % N] = 0;\n"
	"#endif\n"
	"}\n";

static char arch[16];

static int plant_mode(const struct ktune_config *cfg)
{
	static const char *names[] = { "oob", "spin", "compile_error", "wrong" };
	const char *plan = getenv("KTUNE_PLANT");
	for (const char *p = plan ? plan : ""; *p;) {
		const char *eq = strchr(p, '='), *end = strchr(p, ';');
		struct ktune_config c;
		char text[256];
		if (!end)
			end = p + strlen(p);
		if (eq && eq < end && (size_t)(end - eq - 1) < sizeof(text)) {
			memcpy(text, eq + 1, (size_t)(end - eq - 1));
			text[end - eq - 1] = 0;
			if (!ktune__gemm_config_parse(text, &c, NULL) && ktune__gemm_same_kernel(&c, cfg))
				for (int i = 0; i < 4; i++)
					if (!strncmp(p, names[i], strlen(names[i])) &&
					    p + strlen(names[i]) == eq)
						return i + 1;
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

static int planted_hello(void *state, const struct ktune_hello_req *req, struct ktune_hello *out,
			 struct ktune_err *e)
{
	int rc = ktune__gpu_worker_ops.hello(state, req, out, e);
	snprintf(arch, sizeof(arch), "%s", out->id.arch);
	return rc;
}

static int planted_compile(void *state, const struct ktune_key *key,
			   const struct ktune_config *cfg, struct ktune_cubin *out,
			   struct ktune_err *e)
{
	int mode = plant_mode(cfg);
	char define[32];
	const char *opts[] = { define };
	if (!mode)
		return ktune__gpu_worker_ops.compile(state, key, cfg, out, e);
	snprintf(define, sizeof(define), "-DPLANT=%d", mode);
	return ktune__compile("planted.cu", planted_source, strlen(planted_source), opts, 1, arch, "",
			      out, e);
}

int main(int argc, char **argv)
{
	struct ktune_worker_ops ops = ktune__gpu_worker_ops;
	ops.hello = planted_hello;
	ops.compile = planted_compile;
	return ktune__worker_main(argc > 1 ? argc - 1 : argc, argc > 1 ? argv + 1 : argv, &ops,
				  ktune__gpu_worker_state());
}
