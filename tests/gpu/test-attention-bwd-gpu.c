/*
 * test-attention-bwd-gpu.c - the flash attention backward kernels on a GPU
 * against the float64 CPU reference (src/ops/attention-ref.c).  Skipped
 * where no GPU is present.
 *
 * Each case runs the forward first (the public API, its default config) and
 * takes O and lse as the GPU wrote them; the reference of dQ, dK and dV
 * takes the same O and lse (ktune__ref_attention_dq_row, _dkv_row: the
 * gradient FlashAttention computes).  Every config: for each variant (f16
 * and bf16, head dim 64 and 128, causal and not, atomic and deterministic),
 * every candidate the prune keeps for a long key and each case's default,
 * on six cases (GQA 4 with sq < sk; GQA 8 with sq > sk in [B, H, S, D] with
 * padded rows, whose first causal rows see no key; one query; one key; a square
 * 500 x 500 with another scale, interleaved; sq - sk = 63, which puts the
 * causal edge on the last row of a 32-, 64- or 128-row block); every element of dQ, dK, dV
 * compared, the gaps between rows untouched; the deterministic pass run
 * twice, bit-identical.  A failure names the config, the case and the
 * element, with the value got and wanted.
 *
 * The wgmma family (attention_wgmma_bwd.cu, sm_90 only) the same way, in a
 * test of its own (every_config runs the others), with each case's sm_90
 * default (the op's arch_default) where it is the family's: each config
 * named on stderr before it runs.
 *
 * Through the public API: lengths of 4097 checked on sampled rows and keys,
 * both passes; the deterministic pass twice and replayed from a CUDA graph
 * (its scratch the graph's own), bit-identical each time, and close to the
 * atomic pass; bad arguments.  And the tuner's own problem.
 *
 * Tolerances: |got - want| <= 3e-2 (bf16) or 6e-3 (f16) times max(1, |want|):
 * P and dS round to the element type before their products (2^-9 relative
 * in bf16, 2^-11 in f16), over sums of many such terms.
 */
#include "attention_gpu.h"
#include "tuner/worker-op.h"

/* The backward's problem: the forward's (q, k, v, o and lse from the GPU) and dO, dQ, dK, dV. */
struct bproblem {
	struct problem f;
	struct tensor dout, dq, dk, dv;
	double *lse, *delta;           /* the forward's lse as the GPU wrote it; rowsum(dO * O) of its O */
	double *want_dq, *want_dk, *want_dv; /* in the layouts of dq, dk, dv */
	unsigned char *want_key;       /* keys whose dK and dV rows the reference computes */
	int deterministic;
};

static void download_bits(struct tensor *t, int bf16)
{
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(t->bits, t->dev, (size_t)t->elems * 2), CUDA_SUCCESS);
	for (int64_t i = 0; i < t->elems; i++)
		t->val[i] = gpu_test_half_to_double(t->bits[i], bf16);
}

static struct ktune_attention_args bargs_of(const struct bproblem *b)
{
	struct ktune_attention_args a = args_of(&b->f);
	a.dout = (void *)b->dout.dev;
	a.dout_strides = b->dout.st;
	a.dq = (void *)b->dq.dev;
	a.dq_strides = b->dq.st;
	a.dk = (void *)b->dk.dev;
	a.dk_strides = b->dk.st;
	a.dv = (void *)b->dv.dev;
	a.dv_strides = b->dv.st;
	a.deterministic = b->deterministic;
	return a;
}

/*
 * Inputs, the forward on the GPU, and the reference of the rows in
 * rows_sample and the keys in keys_sample (NULL: all).
 */
static void bproblem_make(struct bproblem *b, const struct gcase *c, int d, int causal, ktune_dtype dtype,
			  const unsigned char *rows_sample, const unsigned char *keys_sample, uint64_t seed)
{
	unsigned char *none = calloc((size_t)c->sq, 1);
	uint64_t rng = seed * 31337 + 5;
	memset(b, 0, sizeof(*b));
	assert_non_null(none);
	problem_make(&b->f, c, d, causal, dtype, none, seed); /* no forward reference: the GPU's O is the input */
	free(none);
	for (int i = 0; i < c->sq; i++)
		b->f.want_row[i] = rows_sample ? rows_sample[i] : 1;
	tensor_make(&b->dout, &b->f, c->sq, c->hq, &rng, -1, 1, 1);
	tensor_make(&b->dq, &b->f, c->sq, c->hq, &rng, 0, 0, 0);
	tensor_make(&b->dk, &b->f, c->sk, c->hkv, &rng, 0, 0, 0);
	tensor_make(&b->dv, &b->f, c->sk, c->hkv, &rng, 0, 0, 0);
	b->want_key = malloc((size_t)c->sk);
	b->lse = malloc((size_t)b->f.nlse * sizeof(double));
	b->delta = malloc((size_t)b->f.nlse * sizeof(double));
	b->want_dq = calloc((size_t)b->dq.elems, sizeof(double));
	b->want_dk = calloc((size_t)b->dk.elems, sizeof(double));
	b->want_dv = calloc((size_t)b->dv.elems, sizeof(double));
	assert_true(b->want_key && b->lse && b->delta && b->want_dq && b->want_dk && b->want_dv);
	for (int j = 0; j < c->sk; j++)
		b->want_key[j] = keys_sample ? keys_sample[j] : 1;

	/* the forward, as a training step runs it */
	struct ktune_attention_args a = args_of(&b->f);
	if (ktune_attention_fwd(ctx, a.batch, a.sq, a.sk, a.hq, a.hkv, a.head_dim, a.q, a.q_strides, a.k, a.k_strides,
				a.v, a.v_strides, a.o, a.o_strides, a.lse, a.scale, a.causal, a.dtype, NULL))
		fail_msg("the forward: %s", ktune_errmsg(ctx));
	download_bits(&b->f.o, b->f.bf16);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(b->f.lse_got, b->f.lse, (size_t)b->f.nlse * 4), CUDA_SUCCESS);
	for (int64_t i = 0; i < b->f.nlse; i++)
		b->lse[i] = b->f.lse_got[i];

	struct ktune_attn_shape s = { c->batch, c->sq, c->sk, c->hq, c->hkv, d, causal, b->f.scale };
	struct ktune_attn_out dq = { b->want_dq, b->dq.st[0], b->dq.st[1], b->dq.st[2] };
	struct ktune_attn_out dk = { b->want_dk, b->dk.st[0], b->dk.st[1], b->dk.st[2] };
	struct ktune_attn_out dv = { b->want_dv, b->dv.st[0], b->dv.st[1], b->dv.st[2] };
	ktune__ref_attention_delta(&s, in_of(&b->f.o), in_of(&b->dout), b->delta);
	for (int64_t bb = 0; bb < c->batch; bb++) {
		for (int64_t h = 0; h < c->hq; h++)
			for (int64_t i = 0; i < c->sq; i++)
				if (b->f.want_row[i])
					ktune__ref_attention_dq_row(&s, in_of(&b->f.q), in_of(&b->f.k), in_of(&b->f.v),
								    in_of(&b->dout), b->lse, (int64_t)c->hq * c->sq, c->sq,
								    b->delta, dq, bb, h, i);
		for (int64_t h = 0; h < c->hkv; h++)
			for (int64_t j = 0; j < c->sk; j++)
				if (b->want_key[j])
					ktune__ref_attention_dkv_row(&s, in_of(&b->f.q), in_of(&b->f.k), in_of(&b->f.v),
								     in_of(&b->dout), b->lse, (int64_t)c->hq * c->sq,
								     c->sq, b->delta, dk, dv, bb, h, j);
	}
}

static void bproblem_free(struct bproblem *b)
{
	problem_free(&b->f);
	tensor_free(&b->dout);
	tensor_free(&b->dq);
	tensor_free(&b->dk);
	tensor_free(&b->dv);
	free(b->lse), free(b->delta), free(b->want_dq), free(b->want_dk), free(b->want_dv), free(b->want_key);
}

/* NaN in the gradients' rows (their gaps keep the sentinel). */
static void poison_rows(struct tensor *t, const struct bproblem *b, int64_t s, int64_t heads)
{
	unsigned short *bits = malloc((size_t)t->elems * 2);
	assert_non_null(bits);
	for (int64_t i = 0; i < t->elems; i++)
		bits[i] = SENTINEL;
	for (int64_t bb = 0; bb < b->f.c.batch; bb++)
		for (int64_t i = 0; i < s; i++)
			for (int64_t h = 0; h < heads; h++)
				memset(&bits[bb * t->st[0] + i * t->st[1] + h * t->st[2]], 0xff, (size_t)b->f.d * 2);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(t->dev, bits, (size_t)t->elems * 2), CUDA_SUCCESS);
	free(bits);
}

static void bproblem_poison(struct bproblem *b)
{
	poison_rows(&b->dq, b, b->f.c.sq, b->f.c.hq);
	poison_rows(&b->dk, b, b->f.c.sk, b->f.c.hkv);
	poison_rows(&b->dv, b, b->f.c.sk, b->f.c.hkv);
}

/* One gradient against its reference, on the wanted rows; gaps untouched.  Returns the number wrong. */
static int check_grad(const char *what, const char *name, struct tensor *t, const double *want, int64_t s,
		      int64_t heads, const unsigned char *wanted, const struct bproblem *b)
{
	const double tol = b->f.bf16 ? 3e-2 : 6e-3;
	unsigned char *inside = calloc((size_t)t->elems, 1);
	int bad = 0;
	assert_non_null(inside);
	download_bits(t, b->f.bf16);
	for (int64_t bb = 0; bb < b->f.c.batch; bb++)
		for (int64_t i = 0; i < s; i++)
			for (int64_t h = 0; h < heads; h++) {
				int64_t row = bb * t->st[0] + i * t->st[1] + h * t->st[2];
				memset(&inside[row], 1, (size_t)b->f.d);
				for (int64_t x = 0; wanted[i] && x < b->f.d; x++)
					if (!(fabs(t->val[row + x] - want[row + x]) <= tol * fmax(1, fabs(want[row + x]))) &&
					    bad++ < 3)
						fprintf(stderr, "FAIL %s: %s[b %lld, row %lld, h %lld, %lld] = %.6g, want %.6g\n",
							what, name, (long long)bb, (long long)i, (long long)h, (long long)x,
							t->val[row + x], want[row + x]);
			}
	for (int64_t i = 0; i < t->elems; i++)
		if (!inside[i] && t->bits[i] != SENTINEL && bad++ < 3)
			fprintf(stderr, "FAIL %s: %s written between rows, at element %lld\n", what, name, (long long)i);
	free(inside);
	return bad;
}

static int bproblem_check(struct bproblem *b, const char *what)
{
	return check_grad(what, "dq", &b->dq, b->want_dq, b->f.c.sq, b->f.c.hq, b->f.want_row, b) +
	       check_grad(what, "dk", &b->dk, b->want_dk, b->f.c.sk, b->f.c.hkv, b->want_key, b) +
	       check_grad(what, "dv", &b->dv, b->want_dv, b->f.c.sk, b->f.c.hkv, b->want_key, b);
}

/* The gradients' bits, all three, for comparing runs. */
static unsigned short *grad_bits(struct bproblem *b, size_t *n)
{
	*n = (size_t)(b->dq.elems + b->dk.elems + b->dv.elems);
	unsigned short *all = malloc(*n * 2);
	assert_non_null(all);
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(all, b->dq.dev, (size_t)b->dq.elems * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(all + b->dq.elems, b->dk.dev, (size_t)b->dk.elems * 2), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(all + b->dq.elems + b->dk.elems, b->dv.dev, (size_t)b->dv.elems * 2),
			 CUDA_SUCCESS);
	return all;
}

static void bcase_name(const struct bproblem *b, char *buf, size_t len)
{
	case_name(&b->f, buf, len);
	size_t used = strlen(buf);
	snprintf(buf + used, len - used, "%s", b->deterministic ? " deterministic" : "");
}

/* ------------------------------------------------------------ every config */

static const struct gcase cases[] = {
	{ 2, 127, 300, 4, 1, BSHD, 0 },
	{ 1, 300, 127, 8, 1, BHSD_PADDED, 0 },
	{ 3, 1, 17, 2, 2, BSHD, 0 },
	{ 1, 17, 1, 2, 1, INTERLEAVED, 0 },
	{ 1, 500, 500, 2, 2, INTERLEAVED, 0.2 },
	{ 1, 159, 96, 2, 2, BSHD, 0 }, /* sq - sk = 63: the causal edge on the last row of a query block */
};
#define NCASES (int)(sizeof(cases) / sizeof(cases[0]))

/* Launches one config on a case through the registry's launch (the workspace the context's). */
static void launch(struct ktune_kernel *kernel, const struct ktune_config *cfg, struct bproblem *b, const char *what)
{
	struct ktune_attention_args a = bargs_of(b);
	struct ktune_key key;
	struct ktune_op_call call;
	struct ktune_err e;
	assert_int_equal(ktune__attention_bwd_call(&a, &key, &call, &e), 0);
	if (ktune__op_launch(ctx, kernel, &key, cfg, &call, NULL, &e) || ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS)
		fail_msg("%s: the launch failed (%s); the GPU may be in an error state", what, e.msg);
}

/*
 * Every candidate of a variant for a long key, of the wgmma family alone
 * (wgmma) or of the others, each on every case; and each case's default:
 * without wgmma the op's default_config (mma.sync), with it the sm_90
 * arch_default (the wgmma family's) of each case it serves (128 queries and
 * keys or more, bucketed).  A wgmma config is named on stderr before it runs, so that
 * a hang (an mbarrier phase never completing) names its config.
 */
static int run_variant(ktune_dtype dtype, int d, int causal, int deterministic, int wgmma)
{
	const struct ktune_op *op = ktune__op_find("attention");
	struct bproblem b[NCASES];
	struct ktune_config *cfgs = NULL;
	struct ktune_err e;
	int n = 0, failures = 0;

	for (int c = 0; c < NCASES; c++) {
		bproblem_make(&b[c], &cases[c], d, causal, dtype, NULL, NULL, (uint64_t)(c + 1));
		b[c].deterministic = deterministic;
	}
	struct ktune_attention_args a0 = bargs_of(&b[0]);
	struct ktune_key rep;
	struct ktune_op_call call;
	assert_int_equal(ktune__attention_bwd_call(&a0, &rep, &call, &e), 0);
	rep.m = rep.n = 4096;
	rep.k = 64;
	assert_int_equal(ktune__op_candidates(op, &rep, ctx->id.arch, sm_count, 0, 1, &cfgs, &n, NULL, &e), 0);
	int kept = 0;
	for (int i = 0; i < n; i++)
		if ((cfgs[i].family == KTUNE_ATTN_FAMILY_WGMMA_BWD) == (wgmma != 0))
			cfgs[kept++] = cfgs[i];
	n = kept;
	int ndefaults = 0;
	if (wgmma)
		assert_true(n > 0); /* sm_90: the family runs (the caller checked) and the prune keeps some */
	struct job *jobs = calloc((size_t)(n + NCASES), sizeof(*jobs));
	assert_non_null(jobs);
	for (int i = 0; i < n; i++)
		jobs[i] = (struct job){ .key = rep, .cfg = cfgs[i] };
	for (int c = 0; c < NCASES; c++) {
		struct ktune_attention_args a = bargs_of(&b[c]);
		struct ktune_key k;
		struct ktune_config d;
		assert_int_equal(ktune__attention_bwd_call(&a, &k, &call, &e), 0);
		op->key_bucket(&k);
		if (!wgmma) {
			d = op->default_config(&k, sm_count);
			/* default_config stays the mma.sync family's, on every device */
			assert_int_equal(d.family, KTUNE_ATTN_FAMILY_BWD);
		} else if (op->arch_default(&k, sm_count, ctx->id.arch, &d)) {
			assert_int_equal(d.family, KTUNE_ATTN_FAMILY_WGMMA_BWD);
		} else {
			continue; /* shorter than 128: the mma.sync default serves it */
		}
		jobs[n + ndefaults++] = (struct job){ .key = rep, .cfg = d };
	}
	if (wgmma)
		assert_true(ndefaults > 0); /* four of the six cases are 128 or more, bucketed */
	ktune__parallel_for(n + ndefaults, 0, compile_job, jobs);

	for (int i = 0; i < n + ndefaults; i++) {
		struct job *j = &jobs[i];
		struct ktune_kernel *kernel;
		char cfg[160], what[400], name[200];
		ktune__op_config_format(op, &j->cfg, cfg, sizeof(cfg));
		if (!j->compiled) {
			fprintf(stderr, "FAIL attention backward %s: %s\n", cfg, j->err);
			failures++;
			continue;
		}
		pthread_mutex_lock(&ctx->lock);
		int rc = ktune__kernel_get(ctx, &j->key, &j->cfg, &j->cubin, &kernel, &e);
		pthread_mutex_unlock(&ctx->lock);
		ktune__cubin_free(&j->cubin);
		if (rc) {
			fprintf(stderr, "FAIL attention backward %s: %s\n", cfg, e.msg);
			failures++;
			continue;
		}
		for (int c = 0; c < NCASES; c++) {
			bcase_name(&b[c], name, sizeof(name));
			snprintf(what, sizeof(what), "attention backward %s%s: %s", cfg, i >= n ? " (a default)" : "", name);
			if (wgmma) {
				fprintf(stderr, "attention_wgmma_bwd %s d%d%s%s %s\n", dtype == KTUNE_BF16 ? "bf16" : "f16",
					d, causal ? " causal" : "", deterministic ? " det" : "", what);
				fflush(stderr);
			}
			bproblem_poison(&b[c]);
			launch(kernel, &j->cfg, &b[c], what);
			int bad = bproblem_check(&b[c], what);
			if (!bad && deterministic) { /* again: the same bits */
				size_t nbits;
				unsigned short *first = grad_bits(&b[c], &nbits), *again;
				bproblem_poison(&b[c]);
				launch(kernel, &j->cfg, &b[c], what);
				again = grad_bits(&b[c], &nbits);
				if (memcmp(first, again, nbits * 2)) {
					fprintf(stderr, "FAIL %s: run twice, the gradients differ\n", what);
					bad = 1;
				}
				free(first);
				free(again);
			}
			failures += bad > 0;
		}
	}
	printf("attention backward%s %s d%d%s%s: %d configs x %d cases, %d failed\n", wgmma ? " (wgmma)" : "",
	       dtype == KTUNE_BF16 ? "bf16" : "f16", d, causal ? " causal" : "", deterministic ? " deterministic" : "",
	       n + ndefaults, NCASES, failures);
	for (int c = 0; c < NCASES; c++)
		bproblem_free(&b[c]);
	free(jobs);
	free(cfgs);
	return failures;
}

static void test_attention_bwd_gpu__every_config(void **state)
{
	(void)state;
	int failures = 0;
	for (int t = 0; t < 2; t++)
		for (int d = 64; d <= 128; d *= 2)
			for (int causal = 0; causal <= 1; causal++)
				for (int det = 0; det <= 1; det++)
					failures += run_variant(t ? KTUNE_F16 : KTUNE_BF16, d, causal, det, 0);
	assert_int_equal(failures, 0);
}

/* The same for the wgmma family (attention_wgmma_bwd.cu), on sm_90 alone. */
static void test_attention_bwd_gpu__wgmma_every_config(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("attention");
	int failures = 0;
	if (!ktune__op_family_runs(op, KTUNE_ATTN_FAMILY_WGMMA_BWD, ctx->id.arch)) {
		printf("no wgmma on %s: skipped\n", ctx->id.arch);
		return;
	}
	for (int t = 0; t < 2; t++)
		for (int d = 64; d <= 128; d *= 2)
			for (int causal = 0; causal <= 1; causal++)
				for (int det = 0; det <= 1; det++)
					failures += run_variant(t ? KTUNE_F16 : KTUNE_BF16, d, causal, det, 1);
	assert_int_equal(failures, 0);
}

/* ------------------------------------------------------------ the public API */

static int api_bwd(struct bproblem *b, CUstream stream)
{
	struct ktune_attention_args a = bargs_of(b);
	return ktune_attention_bwd(ctx, a.batch, a.sq, a.sk, a.hq, a.hkv, a.head_dim, a.q, a.q_strides, a.k, a.k_strides,
				   a.v, a.v_strides, a.o, a.o_strides, a.dout, a.dout_strides, a.lse, a.dq, a.dq_strides,
				   a.dk, a.dk_strides, a.dv, a.dv_strides, a.scale, a.causal, a.deterministic, a.dtype,
				   stream);
}

/* 48 random indices below n, and the first and last. */
static unsigned char *sample(int n, uint64_t seed)
{
	unsigned char *s = calloc((size_t)n, 1);
	assert_non_null(s);
	s[0] = s[n - 1] = 1;
	for (int r = 0; r < 48; r++)
		s[next(&seed) % (uint64_t)n] = 1;
	return s;
}

static void test_attention_bwd_gpu__long_sampled(void **state)
{
	(void)state;
	static const struct gcase longs[] = {
		{ 1, 4097, 4097, 4, 2, BSHD, 0 },
		{ 2, 4097, 1000, 2, 1, BHSD_PADDED, 0 },
		{ 1, 1000, 4097, 2, 2, INTERLEAVED, 0 },
	};
	int failures = 0;
	for (size_t c = 0; c < sizeof(longs) / sizeof(longs[0]); c++)
		for (int d = 64; d <= 128; d *= 2)
			for (int causal = 0; causal <= 1; causal++)
				for (int det = 0; det <= 1; det++) {
					ktune_dtype dtype = (c + (size_t)d / 64) % 2 ? KTUNE_F16 : KTUNE_BF16;
					unsigned char *rows = sample(longs[c].sq, c * 8 + (size_t)d + (size_t)causal);
					unsigned char *keys = sample(longs[c].sk, c * 8 + (size_t)d + (size_t)causal + 100);
					struct bproblem b;
					char what[200];
					bproblem_make(&b, &longs[c], d, causal, dtype, rows, keys, c + 21);
					b.deterministic = det;
					bcase_name(&b, what, sizeof(what));
					bproblem_poison(&b);
					if (api_bwd(&b, NULL))
						fail_msg("%s: %s", what, ktune_errmsg(ctx));
					failures += bproblem_check(&b, what) > 0;
					bproblem_free(&b);
					free(rows);
					free(keys);
				}
	assert_int_equal(failures, 0);
}

/*
 * The deterministic pass through the API: twice, and captured in a CUDA graph
 * (its scratch the graph's own memory) and replayed twice: the same bits each
 * time; and within the tolerance of the atomic pass.
 */
static void test_attention_bwd_gpu__deterministic_and_graph(void **state)
{
	(void)state;
	const struct gcase c = { 2, 700, 900, 8, 2, BSHD, 0 };
	struct bproblem b;
	size_t n;
	bproblem_make(&b, &c, 128, 1, KTUNE_BF16, NULL, NULL, 77);
	b.deterministic = 1;
	assert_int_equal(api_bwd(&b, NULL), KTUNE_OK);
	assert_int_equal(bproblem_check(&b, "deterministic, first run"), 0);
	unsigned short *first = grad_bits(&b, &n);
	bproblem_poison(&b);
	assert_int_equal(api_bwd(&b, NULL), KTUNE_OK);
	unsigned short *again = grad_bits(&b, &n);
	assert_memory_equal(first, again, n * 2);
	free(again);

	CUstream s;
	CUgraph g;
	CUgraphExec x;
	assert_int_equal(ktune_cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	bproblem_poison(&b);
	assert_int_equal(ktune_cu.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	int rc = api_bwd(&b, s);
	assert_int_equal(ktune_cu.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
	assert_int_equal(rc, KTUNE_OK);
	assert_int_equal(ktune_cu.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
	for (int replay = 0; replay < 2; replay++) {
		assert_int_equal(ktune_cu.cuGraphLaunch(x, s), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuStreamSynchronize(s), CUDA_SUCCESS);
		again = grad_bits(&b, &n);
		assert_memory_equal(first, again, n * 2);
		free(again);
	}
	ktune_cu.cuGraphExecDestroy(x);
	ktune_cu.cuGraphDestroy(g);
	ktune_cu.cuStreamDestroy_v2(s);

	b.deterministic = 0;
	bproblem_poison(&b);
	assert_int_equal(api_bwd(&b, NULL), KTUNE_OK);
	assert_int_equal(bproblem_check(&b, "atomic"), 0);
	free(first);
	bproblem_free(&b);
}

static void test_attention_bwd_gpu__bad_arguments(void **state)
{
	(void)state;
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
	void *x = (void *)d;
	float *lse = (float *)(d + 65536);
	assert_int_equal(ktune_attention_bwd(ctx, 1, 8, 8, 2, 2, 256, x, NULL, x, NULL, x, NULL, x, NULL, x, NULL, lse, x,
					     NULL, x, NULL, x, NULL, 0.1f, 0, 0, KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "head dims 64 and 128"));
	assert_int_equal(ktune_attention_bwd(ctx, 1, 0, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, x, NULL, lse, x,
					     NULL, x, NULL, x, NULL, 0.1f, 0, 0, KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "sq >= 1"));
	assert_int_equal(ktune_attention_bwd(ctx, 1, 8, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, x, NULL, lse,
					     (char *)x + 4, NULL, x, NULL, x, NULL, 0.1f, 0, 0, KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "dq must be 16-byte aligned"));
	assert_int_equal(ktune_attention_bwd(ctx, 1, 8, 8, 2, 2, 64, x, NULL, x, NULL, x, NULL, x, NULL, NULL, NULL, lse,
					     x, NULL, x, NULL, x, NULL, 0.1f, 0, 0, KTUNE_BF16, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "dout is NULL"));
	ktune_cu.cuMemFree_v2(d);
}

/* The tuner's problem of the backward: shared inputs, a random lse of the right size, the on-GPU check. */
static void test_attention_bwd_gpu__tuner_problem(void **state)
{
	(void)state;
	const struct ktune_op *op = ktune__op_find("attention");
	static const char *const passes[] = { "bwd", "bwd_det" }, *const masks[] = { "none", "causal" };
	for (int p = 0; p < 2; p++)
		for (int m = 0; m < 2; m++) {
			struct ktune_key key = { .op = "attention", .dtype = KTUNE_BF16, .m = 256, .n = 128, .k = 8,
						 .aligned = 1 };
			const char *values[] = { passes[p], "64", masks[m], "1", NULL, NULL, NULL };
			struct ktune_op_problem *pr;
			struct ktune_config *cfgs = NULL;
			struct ktune_err e;
			int n = 0;
			assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
			if (ktune__op_problem_open(ctx, &key, 1, 0, &pr, &e))
				fail_msg("%s", e.msg);
			assert_int_equal(ktune__op_candidates(op, &pr->key, ctx->id.arch, sm_count, 4, 3, &cfgs, &n, NULL, &e), 0);
			for (int i = -1; i < n; i++) {
				struct ktune_config cfg = i < 0 ? op->default_config(&pr->key, sm_count) : cfgs[i];
				struct ktune_kernel *k;
				struct ktune_check check;
				char text[160];
				ktune__op_config_format(op, &cfg, text, sizeof(text));
				pthread_mutex_lock(&ctx->lock);
				int rc = ktune__kernel_get(ctx, &pr->key, &cfg, NULL, &k, &e);
				pthread_mutex_unlock(&ctx->lock);
				if (rc || ktune__op_problem_poison(pr, &e) ||
				    ktune__op_launch(ctx, k, &pr->key, &cfg, &pr->call, NULL, &e) ||
				    ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS || ktune__op_problem_check(pr, &check, &e))
					fail_msg("attention %s %s %s: %s", passes[p], masks[m], text, e.msg);
				if (!check.pass)
					fail_msg("attention %s %s %s (the tuner's problem): err_fro %.3g, worst %.3g, %llu NaN/Inf",
						 passes[p], masks[m], text, check.err_fro, check.err_max, check.bad);
			}
			free(cfgs);
			ktune__op_problem_close(pr);
		}
}

int main(void)
{
	int skip = gpu_test_available("test-attention-bwd-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attention_bwd_gpu__bad_arguments),
		cmocka_unit_test(test_attention_bwd_gpu__deterministic_and_graph),
		cmocka_unit_test(test_attention_bwd_gpu__tuner_problem),
		cmocka_unit_test(test_attention_bwd_gpu__long_sampled),
		cmocka_unit_test(test_attention_bwd_gpu__every_config),
		cmocka_unit_test(test_attention_bwd_gpu__wgmma_every_config),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
