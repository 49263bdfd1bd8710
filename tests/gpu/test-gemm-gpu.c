/*
 * test-gemm-gpu.c - the GEMM kernels on a GPU: the reference against a
 * float64 CPU result, every configuration of the space on awkward shapes,
 * and split-K with beta != 0; on sm_90, every kernel of the wgmma family in
 * every layout on awkward and large shapes; every kernel of the gemv family
 * in every layout on few rows of A.  Skipped where no GPU is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "tuner/candidates.h"
#include "tuner/worker.h"

static ktune_ctx *ctx;
static struct ktune_worker *worker;

static int setup(void **state)
{
	struct ktune_err e;
	char err[4096];
	(void)state;
	/* an empty path: no database, defaults serve */
	if (ktune_open("", 0, &ctx, err, sizeof(err))) {
		fprintf(stderr, "ktune_open: %s\n", err);
		return -1;
	}
	int pushed;
	if (ktune__ctx_enter(ctx, &pushed, &e) || ktune__worker_open(ctx, &worker, &e)) {
		fprintf(stderr, "worker: %s\n", e.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktune__worker_close(worker);
	ktune_close(ctx);
	return 0;
}

static void download(CUdeviceptr p, void *host, size_t bytes)
{
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(host, p, bytes), CUDA_SUCCESS);
}

/* The reference kernel against float64 arithmetic on the same inputs. */
static void test_gpu__reference_matches_float64(void **state)
{
	static const int shapes[][3] = { { 1, 1, 1 }, { 7, 33, 127 }, { 33, 17, 70 }, { 64, 48, 300 } };
	(void)state;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int v = 0; v < 8; v++) {
			struct ktune_problem p = {
				.key = { .op = "gemm", .dtype = v & 1 ? KTUNE_BF16 : KTUNE_F16,
					 .variant[0] = v & 2 ? 't' : 'n', .variant[1] = v & 4 ? 't' : 'n',
					 .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2] },
				.alpha = 0.75f, .beta = v % 3 ? 0.5f : 0.0f, .seed = (unsigned)(s * 8 + v),
				.offset = (int)(s % 2),
			};
			struct ktune_err e;
			assert_int_equal(ktune__worker_set_problem(worker, &p, &e), KTUNE_OK);
			const struct ktune_problem *q = ktune__worker_problem(worker);
			const struct ktune_key *k = &q->key;
			CUdeviceptr a, b, c_init, c, ref;
			ktune__worker_buffers(worker, &a, &b, &c_init, &c, &ref);
			size_t na = (size_t)q->lda * (size_t)(k->variant[0] == 't' ? k->k : k->m);
			size_t nb = (size_t)q->ldb * (size_t)(k->variant[1] == 't' ? k->n : k->k);
			size_t nc = (size_t)q->ldc * (size_t)k->m;
			unsigned short *ha = malloc(na * 2), *hb = malloc(nb * 2), *hc = malloc(nc * 2);
			float *hr = malloc((size_t)(k->m * k->n) * sizeof(float));
			download(a, ha, na * 2);
			download(b, hb, nb * 2);
			download(c_init, hc, nc * 2);
			download(ref, hr, (size_t)(k->m * k->n) * sizeof(float));
			int bf16 = k->dtype == KTUNE_BF16, zeros = 0;
			double worst = 0;
			for (int64_t i = 0; i < k->m; i++)
				for (int64_t j = 0; j < k->n; j++) {
					double acc = 0, mag = 0;
					for (int64_t l = 0; l < k->k; l++) {
						size_t ia = k->variant[0] == 't' ? l * q->lda + i : i * q->lda + l;
						size_t ib = k->variant[1] == 't' ? j * q->ldb + l : l * q->ldb + j;
						double x = gpu_test_half_to_double(ha[ia], bf16) *
							   gpu_test_half_to_double(hb[ib], bf16);
						acc += x;
						mag += fabs(x);
					}
					double want = q->alpha * acc;
					if (q->beta != 0)
						want += q->beta * gpu_test_half_to_double(hc[i * q->ldc + j], bf16);
					double got = hr[i * k->n + j];
					/* fp32 accumulation: error bounded by K ulps of the magnitude */
					double bound = 1e-6 * (double)k->k * (mag + 1) + 1e-6;
					double err = fabs(got - want) / bound;
					worst = err > worst ? err : worst;
					zeros += want == 0;
				}
			if (worst > 1)
				fail_msg("reference differs from float64 on %lldx%lldx%lld variant %d: %.2f of the bound",
					 (long long)k->m, (long long)k->n, (long long)k->k, v, worst);
			assert_true(zeros < k->m * k->n); /* random inputs, not zeros */
			free(ha);
			free(hb);
			free(hc);
			free(hr);
		}
}

/* M, N and K each from this list: 1, 7, 33, 127, 1000. */
static const int awkward[] = { 1, 7, 33, 127, 1000 };


/*
 * Runs one compiled kernel on problem p and checks it against the reference;
 * returns 1 if right, else 0 with the case on stderr.  The worker must see
 * the problem in the alignment class the kernel was compiled for.
 */
static int verify_one(const struct ktune_problem *p, const struct ktune_config *cfg,
		      const struct ktune_cubin *cubin, int aligned)
{
	struct ktune_trial t = { 0 };
	struct ktune_timing tm;
	struct ktune_err e;
	assert_int_equal(ktune__worker_set_problem(worker, p, &e), KTUNE_OK);
	assert_int_equal(ktune__worker_problem(worker)->key.aligned, aligned);
	assert_int_equal(ktune__worker_run(worker, cfg, cubin, KTUNE_RUN_VERIFY, &t, &tm, &e),
			 KTUNE_OK);
	if (!strcmp(t.status, KTUNE_TRIAL_OK))
		return 1;
	char text[128], c[256];
	ktune__key_format(&ktune__worker_problem(worker)->key, text, sizeof(text));
	ktune__gemm_config_format(cfg, c, sizeof(c));
	fprintf(stderr, "FAIL %s beta=%.1f %s: %s %s\n", text, p->beta, c, t.status, t.message);
	return 0;
}
/*
 * Every compiled kernel of the space, each on three awkward shapes, with the
 * dtype, layout, alignment, GROUP_SIZE, SPLIT_K and beta rotating across
 * kernels so that every combination is covered many times.
 */
static void test_gpu__every_config_on_awkward_shapes(void **state)
{
	static const int splits[] = { 1, 2, 3, 4, 8, 16 };
	struct ktune_key key = { .op = "gemm", .variant = "nn", .m = 1000, .n = 1000,
				 .k = 1000 };
	struct ktune_config *cfgs;
	int n, pruned, failures = 0, runs = 0;
	struct ktune_err e;
	(void)state;

	/* no key-dependent pruning: 1000^3 keeps every tile, smem limit from the device */
	assert_int_equal(ktune__gemm_candidates(&key, NULL, 1 << 20, ctx->smem_optin, 0, 0, &cfgs,
						&n, &pruned, &e), KTUNE_OK);
	/* one config per compiled kernel */
	int nk = 0;
	for (int i = 0; i < n; i++) {
		int j;
		for (j = 0; j < nk; j++)
			if (ktune__gemm_same_kernel(&cfgs[j], &cfgs[i]))
				break;
		if (j == nk)
			cfgs[nk++] = cfgs[i];
	}
	assert_true(nk >= 200);

	struct ktune_compile_job *jobs = calloc((size_t)nk, sizeof(*jobs));
	for (int i = 0; i < nk; i++) {
		int v = i % 16;
		/* (i / 16) % 3: no operand streamed, B streamed (M = 1), A streamed (N = 1);
		   the streaming hint is only a cache policy, right for any shape */
		int stream = (i / 16) % 3;
		jobs[i].key = (struct ktune_key){ .op = "gemm", .dtype = v & 1 ? KTUNE_BF16 : KTUNE_F16,
						  .variant[0] = v & 2 ? 't' : 'n', .variant[1] = v & 4 ? 't' : 'n',
						  .m = stream == 1 ? 1 : 0, .n = stream == 2 ? 1 : 0,
						  .aligned = !(v & 8) };
		jobs[i].cfg = cfgs[i];
		/* candidates were pruned for nn; in another layout a tile may outgrow shared memory */
		if (ktune__gemm_smem_bytes(&jobs[i].key, &cfgs[i]) > (size_t)ctx->smem_optin)
			jobs[i].key.variant[0] = jobs[i].key.variant[1] = 'n';
	}
	ktune__compile_jobs(jobs, nk, ctx->id.arch, ctx->cache_dir, 0);

	for (int i = 0; i < nk; i++) {
		if (jobs[i].status) {
			fprintf(stderr, "compile failed: %s\n", jobs[i].log);
			failures++;
			continue;
		}
		for (int s = 0; s < 3; s++) {
			int idx = (7 * i + 41 * s) % 125;
			struct ktune_config cfg = cfgs[i];
			cfg.group_size = (i + s) % 2 ? 8 : 1;
			cfg.split_k = splits[(i + s) % 6];
			struct ktune_problem p = {
				.key = jobs[i].key, .alpha = 1.0f, .beta = (i + s) % 3 == 0 ? 0.5f : 0.0f,
				.seed = (unsigned)(i * 3 + s),
			};
			p.key.m = awkward[idx / 25];
			p.key.n = awkward[idx / 5 % 5];
			p.key.k = awkward[idx % 5];
			if (!jobs[i].key.aligned) {
				/* odd leading dimensions and a misaligned base */
				p.lda = (p.key.variant[0] == 't' ? p.key.m : p.key.k) + 3;
				p.ldb = (p.key.variant[1] == 't' ? p.key.k : p.key.n) + 1;
				p.ldc = p.key.n + 5;
				p.offset = 1;
			} else {
				/* padded but aligned leading dimensions */
				p.lda = ((p.key.variant[0] == 't' ? p.key.m : p.key.k) + 7) / 8 * 8 + 8;
				p.ldb = ((p.key.variant[1] == 't' ? p.key.k : p.key.n) + 7) / 8 * 8;
				p.ldc = (p.key.n + 7) / 8 * 8 + 16;
			}
			failures += !verify_one(&p, &cfg, &jobs[i].cubin, jobs[i].key.aligned);
			runs++;
		}
	}
	printf("%d runs over %d kernels, %d failures\n", runs, nk, failures);
	ktune__compile_jobs_free(jobs, nk);
	free(jobs);
	free(cfgs);
	assert_int_equal(failures, 0);
}

/*
 * Every kernel of the wgmma family (sm_90 only), each in all four layouts
 * (the dtype alternating), on four awkward shapes from {1, 7, 33, 127,
 * 1000}^3 with padded aligned leading dimensions, and one large shape with
 * an odd K; beta != 0 on every other run, GROUP_SIZE alternating, SPLIT_K
 * cycling through 1, 2 and 3 (more splits than k-tiles act as one a k-tile).
 */
static void test_gpu__every_wgmma_kernel(void **state)
{
	static const int large[][3] = { { 1999, 3001, 4097 }, { 4096, 520, 73 }, { 3000, 129, 65 } };
	struct ktune_config *cfgs;
	int nk, failures = 0, runs = 0;
	struct ktune_err e;
	(void)state;

	if (!ktune__gemm_family_runs(KTUNE_GEMM_WGMMA, ctx->id.arch, 1)) {
		printf("wgmma: %s is not sm_90, nothing to run\n", ctx->id.arch);
		skip();
	}
	assert_int_equal(ktune__gemm_space_kernels(KTUNE_GEMM_WGMMA, &cfgs, &nk, &e), KTUNE_OK);
	assert_true(nk >= 20);
	int njobs = nk * 4;
	struct ktune_compile_job *jobs = calloc((size_t)njobs, sizeof(*jobs));
	assert_non_null(jobs);
	for (int i = 0; i < njobs; i++) {
		int kernel = i / 4, layout = i % 4;
		jobs[i].key = (struct ktune_key){ .op = "gemm",
						  .dtype = (kernel + layout) % 2 ? KTUNE_BF16 : KTUNE_F16,
						  .variant[0] = layout & 1 ? 't' : 'n',
						  .variant[1] = layout & 2 ? 't' : 'n', .aligned = 1 };
		jobs[i].cfg = cfgs[kernel];
	}
	ktune__compile_jobs(jobs, njobs, ctx->id.arch, ctx->cache_dir, 0);

	for (int i = 0; i < njobs; i++) {
		if (jobs[i].status) {
			fprintf(stderr, "compile failed: %s\n", jobs[i].log);
			failures++;
			continue;
		}
		if (jobs[i].cubin.res.spill_stores || jobs[i].cubin.res.spill_loads) {
			fprintf(stderr, "spills: kernel %d\n", i / 4);
			failures++;
		}
		for (int s = 0; s < 5; s++) {
			int idx = (7 * i + 41 * s) % 125;
			struct ktune_config cfg = jobs[i].cfg;
			cfg.group_size = (i + s) % 2 ? 8 : 1;
			cfg.split_k = 1 + (i + 2 * s) % 3;
			struct ktune_problem p = {
				.key = jobs[i].key, .alpha = s % 2 ? 0.75f : 1.0f,
				.beta = (i + s) % 2 ? -0.5f : 0.0f, .seed = (unsigned)(i * 5 + s + 1000),
			};
			if (s < 4) {
				p.key.m = awkward[idx / 25];
				p.key.n = awkward[idx / 5 % 5];
				p.key.k = awkward[idx % 5];
			} else {
				p.key.m = large[i % 3][0];
				p.key.n = large[i % 3][1];
				p.key.k = large[i % 3][2];
			}
			/* aligned leading dimensions: rounded up to 8, padded by 8 on every other run */
			int pad = (i + s) % 2 ? 8 : 0;
			p.lda = ((p.key.variant[0] == 't' ? p.key.m : p.key.k) + 7) / 8 * 8 + pad;
			p.ldb = ((p.key.variant[1] == 't' ? p.key.k : p.key.n) + 7) / 8 * 8 + pad;
			p.ldc = (p.key.n + 7) / 8 * 8 + pad;
			failures += !verify_one(&p, &cfg, &jobs[i].cubin, 1);
			runs++;
		}
	}
	printf("wgmma: %d runs over %d kernels x 4 layouts, %d failures\n", runs, nk, failures);
	ktune__compile_jobs_free(jobs, njobs);
	free(jobs);
	free(cfgs);
	assert_int_equal(failures, 0);
}

/*
 * Every kernel of the gemv family, each in all four layouts (the dtype
 * alternating), with padded aligned leading dimensions: M from 1 to
 * BLOCK_M and one M of several tiles, N and K from {1, 7, 33, 127, 1000}
 * and one LLM weight with an odd K; beta != 0 on every other run, SPLIT_K
 * cycling through 1, 2, 3, 4, 8 and 16 (splits with no steps of K write
 * zeros), the split-K counters reused by a second launch.
 */
static void test_gpu__every_gemv_kernel(void **state)
{
	static const int splits[] = { 1, 2, 3, 4, 8, 16 };
	static const int large[][3] = { { 1, 4096, 4097 }, { 16, 4104, 1536 }, { 5, 2000, 4096 } };
	struct ktune_config *cfgs;
	int nk, failures = 0, runs = 0;
	struct ktune_err e;
	(void)state;

	assert_int_equal(ktune__gemm_space_kernels(KTUNE_GEMM_GEMV, &cfgs, &nk, &e), KTUNE_OK);
	assert_true(nk >= 50);
	int njobs = nk * 4;
	struct ktune_compile_job *jobs = calloc((size_t)njobs, sizeof(*jobs));
	assert_non_null(jobs);
	for (int i = 0; i < njobs; i++) {
		int kernel = i / 4, layout = i % 4;
		jobs[i].key = (struct ktune_key){ .op = "gemm",
						  .dtype = (kernel + layout) % 2 ? KTUNE_BF16 : KTUNE_F16,
						  .variant[0] = layout & 1 ? 't' : 'n',
						  .variant[1] = layout & 2 ? 't' : 'n', .aligned = 1 };
		jobs[i].cfg = cfgs[kernel];
	}
	ktune__compile_jobs(jobs, njobs, ctx->id.arch, ctx->cache_dir, 0);

	for (int i = 0; i < njobs; i++) {
		if (jobs[i].status) {
			fprintf(stderr, "compile failed: %s\n", jobs[i].log);
			failures++;
			continue;
		}
		for (int s = 0; s < 6; s++) {
			int idx = (7 * i + 41 * s) % 25;
			struct ktune_config cfg = jobs[i].cfg;
			cfg.split_k = splits[(i + s) % 6];
			struct ktune_problem p = {
				.key = jobs[i].key, .alpha = s % 2 ? 0.75f : 1.0f,
				.beta = (i + s) % 2 ? -0.5f : 0.0f, .seed = (unsigned)(i * 6 + s + 2000),
			};
			if (s < 4) {
				p.key.m = 1 + (i + s) % cfg.block_m;
				p.key.n = awkward[idx / 5];
				p.key.k = awkward[idx % 5];
			} else if (s == 4) {
				p.key.m = 2 * cfg.block_m + 3; /* three rows of tiles */
				p.key.n = awkward[idx / 5];
				p.key.k = awkward[idx % 5];
			} else {
				p.key.m = large[i % 3][0];
				p.key.n = large[i % 3][1];
				p.key.k = large[i % 3][2];
			}
			/* aligned leading dimensions: rounded up to 8, padded by 8 on every other run */
			int pad = (i + s) % 2 ? 8 : 0;
			p.lda = ((p.key.variant[0] == 't' ? p.key.m : p.key.k) + 7) / 8 * 8 + pad;
			p.ldb = ((p.key.variant[1] == 't' ? p.key.k : p.key.n) + 7) / 8 * 8 + pad;
			p.ldc = (p.key.n + 7) / 8 * 8 + pad;
			failures += !verify_one(&p, &cfg, &jobs[i].cubin, 1);
			if (cfg.split_k > 1) /* the counters were left at zero for this launch */
				failures += !verify_one(&p, &cfg, &jobs[i].cubin, 1);
			runs++;
		}
	}
	printf("gemv: %d runs over %d kernels x 4 layouts, %d failures\n", runs, nk, failures);
	ktune__compile_jobs_free(jobs, njobs);
	free(jobs);
	free(cfgs);
	assert_int_equal(failures, 0);
}

/* Large shapes and split-K with beta != 0 on the shapes where split-K matters. */
static void test_gpu__large_and_split_k_with_beta(void **state)
{
	static const struct {
		int m, n, k, split;
		float beta;
		struct ktune_config cfg;
	} cases[] = {
		{ 2048, 2048, 2048, 1, 0.0f, { 128, 128, 32, 2, 2, 4, 8, 1 } },
		{ 1000, 4096, 1024, 1, 0.5f, { 128, 256, 32, 2, 4, 3, 8, 1 } },
		{ 4096, 1024, 777, 1, 0.0f, { 256, 128, 32, 4, 2, 3, 8, 1 } },
		{ 1, 4096, 4096, 8, 0.75f, { 16, 128, 64, 1, 4, 3, 1, 8 } },
		{ 16, 6144, 4096, 4, 1.0f, { 16, 256, 64, 1, 4, 3, 1, 4 } },
		{ 7, 28672, 4096, 2, -0.5f, { 32, 128, 32, 2, 2, 4, 1, 2 } },
		{ 128, 4096, 14336, 16, 0.25f, { 64, 128, 32, 2, 2, 4, 8, 16 } },
	};
	struct ktune_err e;
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (int v = 0; v < 4; v++) {
			struct ktune_problem p = {
				.key = { .op = "gemm", .dtype = v & 1 ? KTUNE_BF16 : KTUNE_F16,
					 .variant[0] = v & 2 ? 't' : 'n', .variant[1] = 't',
					 .m = cases[i].m, .n = cases[i].n, .k = cases[i].k },
				.alpha = 1.25f, .beta = cases[i].beta, .seed = (unsigned)(100 + i * 4 + v),
			};
			if (v == 3)
				p.key.variant[1] = 'n';
			struct ktune_trial t = { 0 };
			struct ktune_timing tm;
			assert_int_equal(ktune__worker_set_problem(worker, &p, &e), KTUNE_OK);
			/* twice: split-K must leave its counters at zero for the next launch */
			for (int rep = 0; rep < 2; rep++) {
				assert_int_equal(ktune__worker_run(worker, &cases[i].cfg, NULL,
								   KTUNE_RUN_VERIFY, &t, &tm, &e), KTUNE_OK);
				if (strcmp(t.status, KTUNE_TRIAL_OK))
					fail_msg("%dx%dx%d split %d beta %.2f variant %d run %d: %s %s",
						 cases[i].m, cases[i].n, cases[i].k, cases[i].split,
						 cases[i].beta, v, rep, t.status, t.message);
			}
		}
}

/* A wrong kernel is caught: a config whose output never gets written (beta = 0, NaN poison stays). */
static void test_gpu__poison_catches_unwritten_output(void **state)
{
	struct ktune_err e;
	struct ktune_check check;
	struct ktune_problem p = { .key = { .op = "gemm", .dtype = KTUNE_F16, .variant[0] = 'n',
					    .variant[1] = 't', .m = 64, .n = 64, .k = 64 },
				   .alpha = 1, .seed = 9 };
	(void)state;
	assert_int_equal(ktune__worker_set_problem(worker, &p, &e), KTUNE_OK);
	CUdeviceptr a, b, c_init, c, ref;
	ktune__worker_buffers(worker, &a, &b, &c_init, &c, &ref);
	assert_int_equal(ktune_cu.cuMemsetD16_v2(c, 0x7e00, 64 * 64), CUDA_SUCCESS);
	assert_int_equal(ktune__worker_check(worker, &check, &e), KTUNE_OK);
	assert_false(check.pass);
	assert_int_equal(check.bad, 64 * 64);
	/* and zeros, the other classic, are wrong too */
	assert_int_equal(ktune_cu.cuMemsetD16_v2(c, 0, 64 * 64), CUDA_SUCCESS);
	assert_int_equal(ktune__worker_check(worker, &check, &e), KTUNE_OK);
	assert_false(check.pass);
	assert_true(check.err_fro > 0.99);
}

int main(void)
{
	int skip = gpu_test_available("test-gemm-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu__reference_matches_float64),
		cmocka_unit_test(test_gpu__poison_catches_unwritten_output),
		cmocka_unit_test(test_gpu__large_and_split_k_with_beta),
		cmocka_unit_test(test_gpu__every_config_on_awkward_shapes),
		cmocka_unit_test(test_gpu__every_wgmma_kernel),
		cmocka_unit_test(test_gpu__every_gemv_kernel),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
