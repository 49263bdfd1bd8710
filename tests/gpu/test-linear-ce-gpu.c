/*
 * test-linear-ce-gpu.c - ktune_linear_cross_entropy (the LM head: GEMM, the
 * fused cross-entropy in place, two GEMMs for the gradients, in chunks of
 * rows) on a GPU against its float64 reference
 * (ktune__ref_linear_cross_entropy, rounding the logits and their gradient
 * to bf16 as the scratch holds them).  Skipped where no GPU is present.
 *
 * bf16, 300 rows in chunks of 128 (the last one short), dim 64, vocab 1003
 * (the scratch's rows padded to 1008), some targets ignored: the mean with
 * the count given and counted by ktune, the sum with smoothing and the cap,
 * chunk_rows 0 (the scratch's worth, to a multiple of 64); bad arguments
 * refused with nothing written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "ops/rowwise-ref.h"
#include "runtime/context.h"

static ktune_ctx *ctx;

enum { ROWS = 300, DIM = 64, V = 1003, LDS = 1008, CHUNK = 128 };

static unsigned short to_bf16(double d)
{
	float f = (float)d;
	unsigned x;
	memcpy(&x, &f, sizeof(x));
	return (unsigned short)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static double round_bf16(double d)
{
	return gpu_test_half_to_double(to_bf16(d), 1);
}

static CUdeviceptr upload(const void *host, size_t n)
{
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, n + 16), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d, host, n), CUDA_SUCCESS);
	return d;
}

static void download(void *host, CUdeviceptr d, size_t n)
{
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(host, d, n), CUDA_SUCCESS);
}

/*
 * got (bf16) against want: each element within tol of the largest |want|
 * (bf16 rounding of sums of 64 to 1003 products, and dweight summed in bf16
 * over the chunks), and the relative Frobenius error within tol / 4.
 */
static void close_bf16(const char *what, const unsigned short *got, const double *want, size_t n, double tol)
{
	double amax = 0, se = 0, sr = 0;
	for (size_t i = 0; i < n; i++)
		amax = fmax(amax, fabs(want[i]));
	for (size_t i = 0; i < n; i++) {
		double g = gpu_test_half_to_double(got[i], 1), d = g - want[i];
		if (!(fabs(d) <= tol * amax))
			fail_msg("%s[%zu] = %.6g, want %.6g (largest %.3g)", what, i, g, want[i], amax);
		se += d * d;
		sr += want[i] * want[i];
	}
	if (!(sqrt(se) <= tol / 4 * sqrt(sr)))
		fail_msg("%s: relative Frobenius error %.3g", what, sqrt(se / sr));
}

struct problem {
	unsigned short h[ROWS * DIM], w[V * DIM];
	double hd[ROWS * DIM], wd[V * DIM];
	int64_t t[ROWS], kept;
	CUdeviceptr d_h, d_w, d_t, d_loss, d_dh, d_dw, d_scratch;
};

static struct problem *problem_open(void)
{
	struct problem *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	for (int i = 0; i < ROWS * DIM; i++) {
		p->h[i] = to_bf16((double)((long)i * 7919 % 2001 - 1000) / 400);
		p->hd[i] = gpu_test_half_to_double(p->h[i], 1);
	}
	for (int i = 0; i < V * DIM; i++) {
		p->w[i] = to_bf16((double)((long)i * 104729 % 1999 - 999) / 1600);
		p->wd[i] = gpu_test_half_to_double(p->w[i], 1);
	}
	for (int r = 0; r < ROWS; r++) {
		p->t[r] = r % 11 == 4 ? -100 : (r * 31337) % V;
		p->kept += p->t[r] != -100;
	}
	p->d_h = upload(p->h, sizeof(p->h));
	p->d_w = upload(p->w, sizeof(p->w));
	p->d_t = upload(p->t, sizeof(p->t));
	p->d_loss = upload(p->hd, ROWS * sizeof(float));
	p->d_dh = upload(p->h, sizeof(p->h));
	p->d_dw = upload(p->w, sizeof(p->w));
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&p->d_scratch, (size_t)CHUNK * LDS * 2), CUDA_SUCCESS);
	return p;
}

static void problem_close(struct problem *p)
{
	CUdeviceptr all[] = { p->d_h, p->d_w, p->d_t, p->d_loss, p->d_dh, p->d_dw, p->d_scratch };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
	free(p);
}

/* One call and its check against the reference. */
static void check_call(struct problem *p, ktune_reduction red, int64_t count, float eps, float cap, float dloss,
		       int64_t chunk, size_t scratch_bytes)
{
	static unsigned short dh[ROWS * DIM], dw[V * DIM];
	static double want_dh[ROWS * DIM], want_dw[V * DIM];
	float loss[ROWS];
	double want[ROWS];
	assert_int_equal(ktune_linear_cross_entropy(ctx, ROWS, DIM, V, (void *)p->d_h, DIM, (void *)p->d_w, DIM,
						    (int64_t *)p->d_t, -100, eps, cap, red, count, dloss,
						    (float *)p->d_loss, (void *)p->d_dh, DIM, (void *)p->d_dw, DIM, chunk,
						    (void *)p->d_scratch, scratch_bytes, KTUNE_BF16, NULL),
			 KTUNE_OK);
	download(loss, p->d_loss, sizeof(loss));
	download(dh, p->d_dh, sizeof(dh));
	download(dw, p->d_dw, sizeof(dw));
	assert_int_equal(ktune__ref_linear_cross_entropy(p->hd, p->wd, p->t, -100, eps, cap, red, dloss, round_bf16, want,
							 want_dh, want_dw, ROWS, DIM, V),
			 0);
	for (int r = 0; r < ROWS; r++) /* a logit's bf16 rounding may differ by one step: 2^-9 of it */
		if (!(fabs(loss[r] - want[r]) <= 5e-3 * fabs(want[r]) + 1e-3))
			fail_msg("loss_rows[%d] = %.7g, want %.7g", r, loss[r], want[r]);
	close_bf16("dhidden", dh, want_dh, ROWS * DIM, 2e-2);
	close_bf16("dweight", dw, want_dw, V * DIM, 2e-2);
}

static void test_linear_ce_gpu__against_the_reference(void **state)
{
	struct problem *p = problem_open();
	const size_t scratch = (size_t)CHUNK * LDS * 2;
	(void)state;
	check_call(p, KTUNE_REDUCTION_MEAN, p->kept, 0, 0, 1.0f, CHUNK, scratch);
	check_call(p, KTUNE_REDUCTION_MEAN, -1, 0, 0, 1.0f, CHUNK, scratch); /* ktune counts */
	check_call(p, KTUNE_REDUCTION_SUM, 0, 0.1f, 20.0f, 0.5f, CHUNK, scratch);
	/* chunk_rows 0: what 100 rows of scratch hold, to a multiple of 64: five chunks, the last of 44 */
	check_call(p, KTUNE_REDUCTION_MEAN, -1, 0.1f, 0, 2.0f, 0, (size_t)100 * LDS * 2);
	problem_close(p);
}

/* A call refused with KTUNE_ERR_INVALID and a message holding msg. */
#define REFUSED(call, msg)                                                                             \
	do {                                                                                           \
		ktune_status rc_ = (call);                                                             \
		if (rc_ != KTUNE_ERR_INVALID || !strstr(ktune_errmsg(ctx), msg))                       \
			fail_msg("line %d: status %d, message '%s', want '%s'", __LINE__, (int)rc_,     \
				 ktune_errmsg(ctx), msg);                                               \
	} while (0)

static void test_linear_ce_gpu__bad_arguments(void **state)
{
	struct problem *p = problem_open();
	const size_t scratch = (size_t)CHUNK * LDS * 2;
	unsigned short back[V * DIM];
	(void)state;
#define CALL(rows, red, chunk, bytes, scratch_ptr, dtype)                                                         \
	ktune_linear_cross_entropy(ctx, rows, DIM, V, (void *)p->d_h, DIM, (void *)p->d_w, DIM, (int64_t *)p->d_t, \
				   -100, 0, 0, red, -1, 1.0f, (float *)p->d_loss, (void *)p->d_dh, DIM,         \
				   (void *)p->d_dw, DIM, chunk, scratch_ptr, bytes, dtype, NULL)
	void *s = (void *)p->d_scratch;
	REFUSED(CALL(ROWS, KTUNE_REDUCTION_MEAN, CHUNK, scratch, s, KTUNE_F32), "dtype 2: the GEMMs take f16 and bf16");
	REFUSED(CALL(ROWS, KTUNE_REDUCTION_NONE, CHUNK, scratch, s, KTUNE_BF16), "reduction 2 is not mean (0) or sum (1)");
	REFUSED(CALL(ROWS, KTUNE_REDUCTION_MEAN, CHUNK + 1, scratch, s, KTUNE_BF16),
		"scratch of 258048 bytes holds 128 rows of logits (2016 bytes each), not 129");
	REFUSED(CALL(ROWS, KTUNE_REDUCTION_MEAN, 0, 1000, s, KTUNE_BF16), "scratch of 1000 bytes holds 0 rows");
	REFUSED(CALL(ROWS, KTUNE_REDUCTION_MEAN, CHUNK, scratch, NULL, KTUNE_BF16), "linear_cross_entropy: scratch is NULL");
	REFUSED(CALL(-3, KTUNE_REDUCTION_MEAN, CHUNK, scratch, s, KTUNE_BF16), "a size is negative");
	REFUSED(CALL(ROWS, KTUNE_REDUCTION_MEAN, -2, scratch, s, KTUNE_BF16), "chunk_rows -2 is negative");
#undef CALL
	/* nothing written */
	download(back, p->d_dh, ROWS * DIM * 2);
	assert_memory_equal(back, p->h, ROWS * DIM * 2);
	download(back, p->d_dw, V * DIM * 2);
	assert_memory_equal(back, p->w, V * DIM * 2);
	problem_close(p);
}

static int setup(void **state)
{
	struct ktune_err e;
	char err[4096];
	int pushed;
	(void)state;
	if (ktune_open("", 0, &ctx, err, sizeof(err))) {
		fprintf(stderr, "ktune_open: %s\n", err);
		return -1;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e)) {
		fprintf(stderr, "context: %s\n", e.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ktune_close(ctx);
	return 0;
}

int main(void)
{
	int skip = gpu_test_available("test-linear-ce-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_ce_gpu__bad_arguments),
		cmocka_unit_test(test_linear_ce_gpu__against_the_reference),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
