/*
 * test-rowwise-gpu.c - the row-wise kernels (softmax, rmsnorm, layernorm, cross_entropy) on a GPU
 * against their float64 CPU references (src/ops/rowwise-ref.c).  Skipped
 * where no GPU is present.
 *
 * Every config: each op's variants on awkward row lengths (cols 1, 7, 33,
 * 4097, 65537 and, for softmax, 262144; rows 67), through the tuner's own
 * problem (src/tuner/worker-op.c: seeded inputs rounded to the dtype, the
 * reference, outputs poisoned with NaN, the on-GPU check against each
 * output's tolerance): every candidate the prune keeps in bf16 aligned, and
 * the default with a seeded sample of 3 in f16 and f32, in the unaligned
 * class (pointers one element off) and for a single row.
 *
 * The ring (rows in flight in shared memory) of softmax and the norms
 * again on 12289 rows, so that the walk wraps around it: 24 ring configs of
 * each variant.
 *
 * Through the public API, with row strides larger than cols: softmax rows
 * of -inf but one element (one-hot), of -inf only (zeros, not NaN), and of
 * +-1e4 (no overflow); RMSNorm with the residual fused, then its backward,
 * twice, bit-identical (dw is reduced without atomics), and captured in a
 * CUDA graph and replayed, bit-identical again; LayerNorm with a row of one
 * value (rstd = 1 / sqrt(eps), y = b exactly) and its backward, twice,
 * bit-identical.
 *
 * Cross-entropy: every candidate of the fused pass with smoothing and the
 * soft cap on (the kernel's every branch) in bf16 aligned, and the default
 * with a sample of 3 of every one of its 36 variants (at 33, 4097 and 262144
 * columns; at every length, in f16, f32 and the unaligned class too, where
 * smoothing and the cap are on), through the tuner's problem (1 row in 17
 * ignored).  Through the API with padded strides in f32:
 * forward (none, mean, sum), backward and fused against the reference,
 * with ignored rows and a target out of range (NaN); fused in place
 * (dlogits = logits) the same bits as out of place; the mean twice and from
 * a captured CUDA graph bit-identical; logits of +-1e4 (finite, exact),
 * every target ignored (mean 0, gradients 0), vocab 1; bf16 in place; bad
 * arguments refused with nothing written.  The API test runs at V = 1000
 * (the default holds rows in registers) and 5000 (it streams them).
 *
 * cross_entropy_stream, the streamed rows: every candidate of the fused
 * pass with smoothing and the cap on at 4097 and 262144 columns, of GPT-2's
 * 50257 (unaligned: each row's head and tail by element, dx at another
 * misalignment) and of 65537 (clusters); a sample of 6 of every variant
 * at 4097, the gradient moved too; f16, f32, unaligned, a single row.
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
#include "tuner/worker-op.h"

static ktune_ctx *ctx;
static int sm_count;
static int failures;

static const int64_t all_cols[] = { 1, 7, 33, 4097, 65537, 262144 };
#define NCOLS (int)(sizeof(all_cols) / sizeof(all_cols[0]))

struct job {
	struct ktune_key key;
	struct ktune_config cfg;
	struct ktune_cubin cubin;
	int compiled;
	char err[512];
};

static void compile_job(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	struct ktune_err e;
	if (ktune__kernel_compile(&j->key, &j->cfg, ctx->id.arch, NULL, &j->cubin, &e))
		snprintf(j->err, sizeof(j->err), "%.500s", e.msg);
	else
		j->compiled = 1;
}

/* Runs of configs with VEC > 1 in the unaligned class (shifted rows), and of those with dx shifted unlike x. */
static int shifted_runs, shifted_dx_runs;

/* Bytes either side of a moved gradient buffer that no kernel may write. */
#define GUARD 256

/*
 * A copy of the problem's first output of the key's dtype (the gradient)
 * `dx_offset` elements past a 16-byte aligned base, GUARD bytes of 0x5a
 * either side: the run's buffer while it is swapped in.
 */
struct moved_dx {
	int buf;           /* the buffer, -1: none */
	CUdeviceptr base;  /* GUARD + its elements + GUARD + 16 bytes */
	CUdeviceptr at;    /* where the kernel writes it */
	size_t bytes;
};

static struct moved_dx moved_dx_open(const struct ktune_op_problem *p, int dx_offset)
{
	struct moved_dx m = { .buf = -1 };
	for (int i = 0; i < p->layout.nbufs && m.buf < 0; i++)
		if (p->layout.bufs[i].output && p->layout.bufs[i].type == KTUNE_BUF_ELEM)
			m.buf = i;
	assert_true(m.buf >= 0);
	m.bytes = (size_t)p->layout.bufs[m.buf].elems * (size_t)p->size[m.buf];
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&m.base, 2 * GUARD + m.bytes + 16), CUDA_SUCCESS);
	m.at = m.base + GUARD + (CUdeviceptr)dx_offset * (CUdeviceptr)p->size[m.buf];
	return m;
}

/* Whether the guards either side of the moved gradient are as set (0x5a): nothing written outside its rows. */
static int moved_dx_guards_intact(const struct moved_dx *m)
{
	unsigned char before[GUARD], after[GUARD];
	size_t end = (size_t)(m->at - m->base) + m->bytes;
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(before, m->base + (size_t)(m->at - m->base) - GUARD, GUARD),
			 CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(after, m->base + end, GUARD), CUDA_SUCCESS);
	for (int i = 0; i < GUARD; i++)
		if (before[i] != 0x5a || after[i] != 0x5a)
			return 0;
	return 1;
}

/*
 * One key's problem, and `budget` of its candidates (0: all) with the
 * default, each run and checked; with dx_offset >= 0, each run again with
 * the gradient written `dx_offset` elements past an aligned base (x stays
 * `offset` past one), its guards checked.
 */
static int ring_only; /* run_key_dx keeps only configs with RING > 0, at most `budget` of them, evenly spread */
static int family_only = -1; /* >= 0: run_key_dx keeps only that family's configs, at most `budget` (0: all), spread */

static void run_key_dx(struct ktune_key key, int offset, int dx_offset, int budget)
{
	const struct ktune_op *op = ktune__op_of(&key);
	struct ktune_op_problem *p;
	struct ktune_config *cfgs = NULL;
	struct ktune_err e;
	char what[128];
	int n = 0, npruned = 0;

	ktune__key_format(&key, what, sizeof(what));
	if (ktune__op_problem_open(ctx, &key, 1, offset, &p, &e))
		fail_msg("%s: %s", what, e.msg);
	key = p->key; /* its alignment class, as allocated */
	ktune__key_format(&key, what, sizeof(what));
	struct moved_dx moved = { .buf = -1 };
	if (dx_offset >= 0)
		moved = moved_dx_open(p, dx_offset);
	assert_int_equal(ktune__op_candidates(op, &key, ctx->id.arch, sm_count,
					      ring_only || family_only >= 0 ? 0 : budget, 7, &cfgs, &n, &npruned, &e),
			 0);
	if (family_only >= 0) {
		int kept = 0;
		for (int i = 0; i < n; i++)
			if (cfgs[i].family == family_only)
				cfgs[kept++] = cfgs[i];
		assert_true(kept > 0);
		int want = budget > 0 && budget < kept ? budget : kept;
		for (int i = 0; i < want; i++)
			cfgs[i] = cfgs[(int64_t)i * kept / want];
		n = want;
	}
	if (ring_only) {
		int rings = 0;
		for (int i = 0; i < n; i++)
			if (ktune__op_param(op, &cfgs[i], "RING", 0) > 0)
				cfgs[rings++] = cfgs[i];
		assert_true(rings > 0);
		for (int i = 0; i < budget && i < rings; i++)
			cfgs[i] = cfgs[(int64_t)i * rings / (budget < rings ? budget : rings)];
		n = budget < rings ? budget : rings;
	}
	struct job *jobs = calloc((size_t)n + 1, sizeof(*jobs));
	assert_non_null(jobs);
	jobs[0] = (struct job){ .key = key, .cfg = op->default_config(&key, sm_count) };
	for (int i = 0; i < n; i++)
		jobs[i + 1] = (struct job){ .key = key, .cfg = cfgs[i] };
	ktune__parallel_for(n + 1, 0, compile_job, jobs);
	for (int i = 0; i <= n; i++) {
		struct job *j = &jobs[i];
		struct ktune_kernel *k;
		struct ktune_check check;
		char cfg[160];
		ktune__op_config_format(op, &j->cfg, cfg, sizeof(cfg));
		if (!j->compiled) {
			fprintf(stderr, "FAIL %s %s: %s\n", what, cfg, j->err);
			failures++;
			continue;
		}
		pthread_mutex_lock(&ctx->lock);
		int rc = ktune__kernel_get(ctx, &key, &j->cfg, &j->cubin, &k, &e);
		pthread_mutex_unlock(&ctx->lock);
		ktune__cubin_free(&j->cubin);
		if (rc || ktune__op_problem_poison(p, &e) ||
		    ktune__op_launch(ctx, k, &key, &j->cfg, &p->call, NULL, &e) ||
		    ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS || ktune__op_problem_check(p, &check, &e)) {
			fprintf(stderr, "FAIL %s %s: %s\n", what, cfg, rc ? e.msg : "launch or check failed");
			failures++;
			fail_msg("%s: the GPU may be in an error state", what);
		}
		if (!check.pass) {
			fprintf(stderr, "FAIL %s %s: err_fro %.3g, worst %.3g, %llu NaN/Inf\n", what, cfg,
				check.err_fro, check.err_max, check.bad);
			failures++;
		}
		int shifted = !key.aligned && ktune__op_param(op, &j->cfg, "VEC", 1) > 1 &&
			      op->families[j->cfg.family].shifted_rows;
		shifted_runs += shifted;
		if (moved.buf < 0)
			continue;
		/* again, the gradient elsewhere: its own misalignment, guards either side */
		CUdeviceptr own = p->call.buf[moved.buf];
		p->call.buf[moved.buf] = moved.at;
		rc = ktune_cu.cuMemsetD8_v2(moved.base, 0x5a, 2 * GUARD + moved.bytes + 16) != CUDA_SUCCESS ||
		     ktune__op_problem_poison(p, &e) || ktune__op_launch(ctx, k, &key, &j->cfg, &p->call, NULL, &e) ||
		     ktune_cu.cuCtxSynchronize() != CUDA_SUCCESS || ktune__op_problem_check(p, &check, &e);
		p->call.buf[moved.buf] = own;
		if (rc) {
			fprintf(stderr, "FAIL %s %s, dx %d elements off: launch or check failed\n", what, cfg, dx_offset);
			failures++;
			fail_msg("%s: the GPU may be in an error state", what);
		}
		if (!check.pass || !moved_dx_guards_intact(&moved)) {
			fprintf(stderr, "FAIL %s %s, dx %d elements off: err_fro %.3g, worst %.3g, %llu NaN/Inf%s\n", what,
				cfg, dx_offset, check.err_fro, check.err_max, check.bad,
				check.pass ? ", written outside its rows" : "");
			failures++;
		}
		shifted_dx_runs += shifted;
	}
	printf("%s: %d configs (%d pruned)%s\n", what, n + 1, npruned, moved.buf >= 0 ? ", dx moved too" : "");
	if (moved.buf >= 0)
		ktune_cu.cuMemFree_v2(moved.base);
	free(jobs);
	free(cfgs);
	ktune__op_problem_close(p);
}

static void run_key(struct ktune_key key, int offset, int budget)
{
	run_key_dx(key, offset, -1, budget);
}

static void run_op(const char *name, int max_cols)
{
	const struct ktune_op *op = ktune__op_find(name);
	const struct ktune_op_field *variant = &op->fields[0];
	static const ktune_dtype dtypes[] = { KTUNE_BF16, KTUNE_F16, KTUNE_F32 };
	failures = 0;
	for (int v = 0; variant->choices[v]; v++)
		for (int c = 0; c < NCOLS && all_cols[c] <= max_cols; c++)
			for (int d = 0; d < 3; d++)
				for (int offset = 0; offset <= 1; offset++) {
					struct ktune_key key = { .dtype = dtypes[d], .m = 67, .n = all_cols[c] };
					const char *values[] = { variant->choices[v], NULL };
					snprintf(key.op, sizeof(key.op), "%s", name);
					assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
					op->key_bucket(&key);
					key.m = 67; /* an odd row count: the last block's groups run past it */
					int full = d == 0 && offset == 0;
					run_key(key, offset, full ? 0 : 3);
					if (full) { /* a single row */
						key.m = 1;
						run_key(key, 0, 3);
					}
				}
	assert_int_equal(failures, 0);
}

static void test_rowwise_gpu__softmax_every_config(void **state)
{
	(void)state;
	run_op("softmax", 262144);
}

static void test_rowwise_gpu__rmsnorm_every_config(void **state)
{
	(void)state;
	run_op("rmsnorm", 65537);
}

static void test_rowwise_gpu__layernorm_every_config(void **state)
{
	(void)state;
	run_op("layernorm", 65537);
}

/*
 * The ring (RING rows of the walk in flight in shared memory) around its
 * wrap: enough rows that a group walks more than RING of them (9 and more
 * where a step of the walk is an SM's worth of rows), bf16 aligned, 24 ring
 * configs of every variant of softmax and both norms, spread over the
 * prune's list.
 */
static void test_rowwise_gpu__ring_wraps(void **state)
{
	(void)state;
	static const char *const ops[] = { "softmax", "rmsnorm", "layernorm" };
	failures = 0;
	ring_only = 1;
	for (int o = 0; o < 3; o++) {
		const struct ktune_op *op = ktune__op_find(ops[o]);
		for (int v = 0; op->fields[0].choices[v]; v++) {
			struct ktune_key key = { .dtype = KTUNE_BF16, .m = 12289, .n = 1032 };
			const char *values[] = { op->fields[0].choices[v], NULL };
			snprintf(key.op, sizeof(key.op), "%s", ops[o]);
			assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
			op->key_bucket(&key);
			key.m = 12289;
			run_key(key, 0, 24);
		}
	}
	ring_only = 0;
	assert_int_equal(failures, 0);
}

/*
 * One variant of cross_entropy at row length cols: bf16 aligned, and with
 * `every`, f16, f32 and the unaligned class; all candidates where `full`
 * (and a single row), else the default and a sample of 3.
 */
static void run_ce_variant(const struct ktune_op *op, const char *const *values, int64_t cols, int every, int full)
{
	static const ktune_dtype dtypes[] = { KTUNE_BF16, KTUNE_F16, KTUNE_F32 };
	for (int d = 0; d < (every ? 3 : 1); d++)
		for (int offset = 0; offset <= (every ? 1 : 0); offset++) {
			struct ktune_key key = { .op = "cross_entropy", .dtype = dtypes[d], .m = 67, .n = cols };
			int all = full && d == 0 && offset == 0;
			assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
			op->key_bucket(&key);
			key.m = 67;
			run_key(key, offset, all ? 0 : 3);
			if (all) {
				key.m = 1;
				run_key(key, 0, 3);
			}
		}
}

/*
 * Every variant of cross_entropy: with smoothing and the cap on and the
 * mean (the most code) at every length and in every dtype, every candidate
 * of the fused pass; the other variants at 33, 4097 and 262144 columns.
 */
static void test_rowwise_gpu__cross_entropy_every_config(void **state)
{
	const struct ktune_op *op = ktune__op_find("cross_entropy");
	(void)state;
	failures = 0;
	for (int p = 0; p < 3; p++)
		for (int r = 0; r < 3; r++)
			for (int f = 0; f < 4; f++) {
				const char *values[] = { op->fields[0].choices[p], op->fields[1].choices[r],
							 f & 1 ? "on" : "off", f & 2 ? "on" : "off" };
				int every = r == 0 && f == 3;
				for (int c = 0; c < NCOLS; c++)
					if (every || all_cols[c] == 33 || all_cols[c] == 4097 || all_cols[c] == 262144)
						run_ce_variant(op, values, all_cols[c], every, every && p == 2);
			}
	assert_int_equal(failures, 0);
}

/* A cross_entropy key of 67 rows: pass, reduction, smoothing and cap, dtype, vocab (bucketed). */
static struct ktune_key ce_key(const char *pass, const char *reduction, const char *flags, ktune_dtype dtype,
			       int64_t vocab)
{
	const struct ktune_op *op = ktune__op_find("cross_entropy");
	struct ktune_key key = { .op = "cross_entropy", .dtype = dtype, .m = 67, .n = vocab };
	const char *values[] = { pass, reduction, flags, flags };
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
	op->key_bucket(&key);
	key.m = 67; /* an odd row count: the last block's groups run past it */
	return key;
}

/*
 * The unaligned class in vectors (cross_entropy's shifted rows): every
 * candidate, VEC 1 to 8, of GPT-2's vocabulary 50257 (packed rows start at
 * every shift 0 to 7) in bf16: fused with smoothing and the cap on (every
 * masked branch) and off (GPT-2's variant), each run again with the
 * gradient 3 elements further off than the logits (every row's dx shifted
 * unlike x: stored element by element), guards either side of it checked;
 * the forward, and the backward with its dx moved; x 1 to 7 elements past
 * an aligned base (a sample of 3 each); short rows (33: a row within one
 * vector of 8) and 4097, a sample of 60 each, and 65537 (its 131072
 * bucket: clusters), every candidate; f16 and f32, and a single row, a
 * sample.
 */
static void test_rowwise_gpu__cross_entropy_unaligned_every_config(void **state)
{
	(void)state;
	failures = shifted_runs = shifted_dx_runs = 0;
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_BF16, 50257), 0, 3, 0);
	run_key_dx(ce_key("fused", "mean", "off", KTUNE_BF16, 50257), 1, 4, 0);
	run_key(ce_key("fwd", "mean", "on", KTUNE_BF16, 50257), 0, 0);
	run_key_dx(ce_key("bwd", "none", "on", KTUNE_BF16, 50257), 5, 2, 0);
	for (int offset = 1; offset < 8; offset++)
		run_key_dx(ce_key("fused", "sum", "on", KTUNE_BF16, 50257), offset, 8 - offset, 3);
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_BF16, 33), 1, 6, 60);
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_BF16, 4097), 1, 2, 60);
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_BF16, 65537), 7, 0, 0);
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_F16, 50257), 3, 0, 3);
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_F32, 50257), 1, 2, 3);
	run_key(ce_key("fwd", "none", "on", KTUNE_F32, 50257), 3, 3);
	struct ktune_key one = ce_key("fused", "mean", "on", KTUNE_BF16, 50257);
	one.m = 1;
	run_key_dx(one, 5, 0, 3);
	printf("%d runs of shifted rows, %d of them with dx shifted unlike x\n", shifted_runs, shifted_dx_runs);
	assert_true(shifted_runs > 300 && shifted_dx_runs > 150);
	assert_int_equal(failures, 0);
}

/*
 * The streamed rows (cross_entropy_stream): every candidate of the fused
 * pass with smoothing and the cap on and of GPT-2's fused pass (50257: the
 * unaligned class, each row's head and tail by element, dx moved to
 * another misalignment), at 4097 and 262144 columns and in clusters (65537
 * rows to a bucket of 131072); a sample of 6 of every other variant, of f16
 * and f32, unaligned, and of a single row.
 */
static void test_rowwise_gpu__cross_entropy_stream_every_config(void **state)
{
	const struct ktune_op *op = ktune__op_find("cross_entropy");
	(void)state;
	failures = 0;
	family_only = ktune__op_family_index(op, "cross_entropy_stream");
	assert_true(family_only > 0);
	run_key(ce_key("fused", "mean", "on", KTUNE_BF16, 4097), 0, 0);
	run_key(ce_key("fused", "mean", "on", KTUNE_BF16, 262144), 0, 0);
	run_key_dx(ce_key("fused", "mean", "off", KTUNE_BF16, 50257), 1, 4, 0);
	run_key_dx(ce_key("fused", "mean", "on", KTUNE_BF16, 65537), 3, 0, 0);
	for (int p = 0; p < 3; p++)
		for (int r = 0; r < 3; r++)
			for (int f = 0; f < 4; f++) {
				const char *values[] = { op->fields[0].choices[p], op->fields[1].choices[r],
							 f & 1 ? "on" : "off", f & 2 ? "on" : "off" };
				struct ktune_key key = { .op = "cross_entropy", .dtype = KTUNE_BF16, .m = 67, .n = 4097 };
				assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
				op->key_bucket(&key);
				key.m = 67;
				run_key(key, 0, 6);
				if (p != 0) /* the gradient at another misalignment than the logits' */
					run_key_dx(key, 1, 2, 6);
			}
	run_key_dx(ce_key("fused", "none", "on", KTUNE_F16, 65537), 1, 6, 6);
	run_key_dx(ce_key("bwd", "sum", "on", KTUNE_F32, 4097), 2, 1, 6);
	run_key(ce_key("fwd", "mean", "on", KTUNE_F32, 262144), 3, 6);
	struct ktune_key one = ce_key("fused", "mean", "on", KTUNE_BF16, 50257);
	one.m = 1;
	run_key_dx(one, 5, 0, 6);
	family_only = -1;
	assert_int_equal(failures, 0);
}

/*
 * A softmax key of exactly `cols` columns (not the bucket's), 67 rows (the
 * walk's last clusters run past them), its variant `direction`.
 */
static struct ktune_key softmax_key(const char *direction, ktune_dtype dtype, int64_t cols)
{
	const struct ktune_op *op = ktune__op_find("softmax");
	struct ktune_key key = { .op = "softmax", .dtype = dtype, .m = 67, .n = cols };
	const char *values[] = { direction, NULL };
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
	return key;
}

/*
 * softmax_stream (a row streamed by a block or a cluster, read again for
 * the output): every candidate of both directions in bf16 at 65544 columns
 * (8193 vectors: the clusters' chunks uneven) and 262144, a sample in f16
 * and f32 (4-element vectors) and of a single row.  The problems' rows are
 * packed, so these are aligned only where cols is a multiple of the vector
 * (the stream family takes no other class); a row's tail, -inf rows and
 * outputs in place are softmax_stream_api's.
 */
static void test_rowwise_gpu__softmax_stream_every_config(void **state)
{
	const struct ktune_op *op = ktune__op_find("softmax");
	static const char *const dirs[] = { "fwd", "bwd" };
	(void)state;
	failures = 0;
	family_only = ktune__op_family_index(op, "softmax_stream");
	assert_true(family_only > 0);
	for (int d = 0; d < 2; d++) {
		run_key(softmax_key(dirs[d], KTUNE_BF16, 65544), 0, 0);
		run_key(softmax_key(dirs[d], KTUNE_BF16, 262144), 0, 0);
		run_key(softmax_key(dirs[d], KTUNE_F16, 65544), 0, 8);
		run_key(softmax_key(dirs[d], KTUNE_F32, 65540), 0, 8);
		struct ktune_key one = softmax_key(dirs[d], KTUNE_BF16, 131072);
		one.m = 1;
		run_key(one, 0, 8);
	}
	family_only = -1;
	assert_int_equal(failures, 0);
}

/* ------------------------------------------------------------ the public API */

static CUdeviceptr upload(const float *host, size_t n)
{
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, n * sizeof(float) + 16), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d, host, n * sizeof(float)), CUDA_SUCCESS);
	return d;
}

static void download(float *host, CUdeviceptr d, size_t n)
{
	assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(host, d, n * sizeof(float)), CUDA_SUCCESS);
}

static void test_rowwise_gpu__softmax_edges_with_strides(void **state)
{
	(void)state;
	enum { ROWS = 4, COLS = 37, LD = 40 };
	float x[ROWS * LD], y[ROWS * LD];
	double xd[ROWS * LD], want[ROWS * LD];
	for (int i = 0; i < ROWS * LD; i++)
		x[i] = (float)((i * 37 % 101) - 50) / 8;
	for (int c = 0; c < COLS; c++) {
		x[0 * LD + c] = c == 5 ? 0.5f : -INFINITY; /* one finite element: one-hot */
		x[1 * LD + c] = -INFINITY;                /* all -inf: zeros */
		x[2 * LD + c] = c % 2 ? 1e4f : -1e4f;     /* large: no overflow */
	}
	for (int i = 0; i < ROWS * LD; i++)
		xd[i] = x[i];
	CUdeviceptr dx = upload(x, ROWS * LD), dy = upload(x, ROWS * LD);
	assert_int_equal(ktune_softmax(ctx, ROWS, COLS, (void *)dx, LD, (void *)dy, LD, KTUNE_F32, NULL), KTUNE_OK);
	download(y, dy, ROWS * LD);
	ktune__ref_softmax(xd, LD, want, LD, ROWS, COLS);
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < LD; c++) {
			float got = y[r * LD + c];
			if (c >= COLS) /* past the row: untouched */
				assert_true(got == x[r * LD + c] || (isnan(got) && isnan(x[r * LD + c])));
			else if (!(fabs(got - want[r * LD + c]) <= 1e-5))
				fail_msg("softmax [%d, %d] = %g, want %g", r, c, got, want[r * LD + c]);
		}
	assert_true(y[0 * LD + 5] == 1.0f && y[1 * LD + 0] == 0.0f);
	ktune_cu.cuMemFree_v2(dx);
	ktune_cu.cuMemFree_v2(dy);
}

/*
 * Long rows through the API where nothing is tuned (f32: the shipped files
 * are bf16), served by the streamed default: 32771 columns (8192 vectors
 * of 4 and a tail of 3) in rows 32776 apart (16-byte aligned: the aligned
 * class), a one-hot row of -inf, a row of -inf alone (zeros), a row of
 * +-1e4 and a plain one; forward, then backward from that y, each against
 * float64 and again in place (y over x, dx over dy), bit-identical.
 */
static void test_rowwise_gpu__softmax_stream_api(void **state)
{
	enum { ROWS = 4, COLS = 32771, LD = 32776 };
	const size_t n = (size_t)ROWS * LD;
	float *x = malloc(n * 4), *y = malloc(n * 4), *y2 = malloc(n * 4), *dy = malloc(n * 4);
	double *xd = malloc(n * 8), *want = malloc(n * 8), *yd = malloc(n * 8), *dyd = malloc(n * 8);
	(void)state;
	assert_true(x && y && y2 && dy && xd && want && yd && dyd);
	const struct ktune_op *op = ktune__op_find("softmax");
	struct ktune_key key = { .op = "softmax", .dtype = KTUNE_F32, .m = ROWS, .n = COLS, .aligned = 1 };
	const char *fwd[] = { "fwd", NULL };
	assert_int_equal(ktune__op_variant_set(op, &key, fwd, NULL), 0);
	struct ktune_config d = op->default_config(&key, 132);
	assert_string_equal(op->families[d.family].name, "softmax_stream");
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)((long)(i * 7919 % 2001) - 1000) / 200;
		dy[i] = (float)((long)(i * 104729 % 1999) - 999) / 500;
	}
	for (int c = 0; c < COLS; c++) {
		x[0 * LD + c] = c == COLS - 2 ? 0.5f : -INFINITY; /* one finite element, in the tail: one-hot */
		x[1 * LD + c] = -INFINITY;                       /* all -inf: zeros */
		x[2 * LD + c] = c % 3 ? 1e4f : -1e4f;            /* large: no overflow */
	}
	for (size_t i = 0; i < n; i++) {
		xd[i] = x[i];
		dyd[i] = dy[i];
	}
	CUdeviceptr d_x = upload(x, n), d_y = upload(x, n), d_dy = upload(dy, n), d_dx = upload(dy, n);

	/* forward, then in place: y over a copy of x */
	assert_int_equal(ktune_softmax(ctx, ROWS, COLS, (void *)d_x, LD, (void *)d_y, LD, KTUNE_F32, NULL), KTUNE_OK);
	download(y, d_y, n);
	ktune__ref_softmax(xd, LD, want, LD, ROWS, COLS);
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < LD; c++) {
			const size_t i = (size_t)r * LD + c;
			if (c >= COLS) /* past the row: untouched */
				assert_true(y[i] == x[i] || (isnan(y[i]) && isnan(x[i])));
			else if (!(fabs(y[i] - want[i]) <= 1e-5 * fmax(1e-3, fabs(want[i]))))
				fail_msg("softmax [%d, %d] = %g, want %g", r, c, y[i], want[i]);
		}
	assert_true(y[0 * LD + COLS - 2] == 1.0f && y[0 * LD + 0] == 0.0f && y[1 * LD + 7] == 0.0f);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_y, x, n * 4), CUDA_SUCCESS);
	assert_int_equal(ktune_softmax(ctx, ROWS, COLS, (void *)d_y, LD, (void *)d_y, LD, KTUNE_F32, NULL), KTUNE_OK);
	download(y2, d_y, n);
	assert_memory_equal(y, y2, n * 4);

	/* backward from that y, then in place: dx over a copy of dy */
	for (size_t i = 0; i < n; i++)
		yd[i] = y[i];
	assert_int_equal(ktune_softmax_backward(ctx, ROWS, COLS, (void *)d_y, LD, (void *)d_dy, LD, (void *)d_dx, LD,
						KTUNE_F32, NULL),
			 KTUNE_OK);
	download(y2, d_dx, n);
	ktune__ref_softmax_backward(yd, LD, dyd, LD, want, LD, ROWS, COLS);
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < COLS; c++) {
			const size_t i = (size_t)r * LD + c;
			if (!(fabs(y2[i] - want[i]) <= 1e-5 * fmax(1e-3, fabs(want[i]))))
				fail_msg("softmax backward [%d, %d] = %g, want %g", r, c, y2[i], want[i]);
		}
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_dx, dy, n * 4), CUDA_SUCCESS);
	assert_int_equal(ktune_softmax_backward(ctx, ROWS, COLS, (void *)d_y, LD, (void *)d_dx, LD, (void *)d_dx, LD,
						KTUNE_F32, NULL),
			 KTUNE_OK);
	download(x, d_dx, n);
	assert_memory_equal(x, y2, n * 4);

	ktune_cu.cuMemFree_v2(d_x);
	ktune_cu.cuMemFree_v2(d_y);
	ktune_cu.cuMemFree_v2(d_dy);
	ktune_cu.cuMemFree_v2(d_dx);
	free(x), free(y), free(y2), free(dy), free(xd), free(want), free(yd), free(dyd);
}

/*
 * rmsnorm_stream (RMSNorm's forward passes with a row streamed, h read
 * again for y): every candidate of fwd and fwd_residual in bf16 at 65544
 * and 32768 columns, a sample in f16, f32 and of a single row.
 */
static void test_rowwise_gpu__rmsnorm_stream_every_config(void **state)
{
	const struct ktune_op *op = ktune__op_find("rmsnorm");
	static const char *const passes[] = { "fwd", "fwd_residual" };
	static const ktune_dtype dtypes[] = { KTUNE_BF16, KTUNE_BF16, KTUNE_F16, KTUNE_F32 };
	static const int64_t cols[] = { 65544, 32768, 65544, 65540 };
	(void)state;
	failures = 0;
	family_only = ktune__op_family_index(op, "rmsnorm_stream");
	assert_true(family_only > 0);
	for (int p = 0; p < 2; p++) {
		for (int i = 0; i < 4; i++) {
			struct ktune_key key = { .op = "rmsnorm", .dtype = dtypes[i], .m = 67, .n = cols[i] };
			const char *values[] = { passes[p], NULL };
			assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
			run_key(key, 0, i < 2 ? 0 : 8);
			if (i == 0) {
				key.m = 1;
				run_key(key, 0, 8);
			}
		}
	}
	family_only = -1;
	assert_int_equal(failures, 0);
}

/*
 * Long rows through the API where nothing is tuned (f32), served by the
 * streamed default: 32771 columns (a tail of 3) in rows 32776 apart (the
 * aligned class), the residual fused: h, y and rstd against float64, then
 * in place (y over x, h over res), bit-identical.
 */
static void test_rowwise_gpu__rmsnorm_stream_api(void **state)
{
	enum { ROWS = 5, COLS = 32771, LD = 32776 };
	const size_t n = (size_t)ROWS * LD;
	float *x = malloc(n * 4), *res = malloc(n * 4), *w = malloc(LD * 4), *y = malloc(n * 4), *h = malloc(n * 4);
	float *y2 = malloc(n * 4), *h2 = malloc(n * 4), rstd_got[ROWS];
	double *xd = malloc(n * 8), *rd = malloc(n * 8), *wd = malloc(LD * 8), *yd = malloc(n * 8), *hd = malloc(n * 8);
	double rstd[ROWS];
	(void)state;
	assert_true(x && res && w && y && h && y2 && h2 && xd && rd && wd && yd && hd);
	const struct ktune_op *op = ktune__op_find("rmsnorm");
	struct ktune_key key = { .op = "rmsnorm", .dtype = KTUNE_F32, .m = ROWS, .n = COLS, .aligned = 1 };
	const char *values[] = { "fwd_residual", NULL };
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), 0);
	struct ktune_config d = op->default_config(&key, 132);
	assert_string_equal(op->families[d.family].name, "rmsnorm_stream");
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)((long)(i * 7919 % 2001) - 1000) / 300;
		res[i] = (float)((long)(i * 104729 % 1999) - 999) / 500;
		xd[i] = x[i];
		rd[i] = res[i];
	}
	for (int c = 0; c < LD; c++)
		wd[c] = w[c] = 0.5f + (float)(c % 17) / 16;
	CUdeviceptr d_x = upload(x, n), d_res = upload(res, n), d_w = upload(w, LD), d_y = upload(x, n);
	CUdeviceptr d_h = upload(res, n), d_rstd = upload(rstd_got, ROWS);
	assert_int_equal(ktune_rmsnorm(ctx, ROWS, COLS, (void *)d_x, LD, (void *)d_res, LD, (void *)d_w, 1e-5f,
				       (void *)d_y, LD, (float *)d_rstd, (void *)d_h, LD, KTUNE_F32, NULL),
			 KTUNE_OK);
	ktune__ref_rmsnorm(xd, LD, rd, LD, wd, 1e-5, yd, LD, rstd, hd, LD, ROWS, COLS);
	download(y, d_y, n);
	download(h, d_h, n);
	download(rstd_got, d_rstd, ROWS);
	for (int r = 0; r < ROWS; r++) {
		assert_true(fabs(rstd_got[r] - rstd[r]) <= 1e-5 * rstd[r]);
		for (int c = 0; c < LD; c++) {
			const size_t i = (size_t)r * LD + c;
			if (c >= COLS) { /* past the row: untouched */
				assert_true(y[i] == x[i] && h[i] == res[i]);
				continue;
			}
			if (!(fabs(h[i] - hd[i]) <= 1e-6 * fmax(1, fabs(hd[i]))))
				fail_msg("rmsnorm h[%d, %d] = %g, want %g", r, c, h[i], hd[i]);
			if (!(fabs(y[i] - yd[i]) <= 1e-5 * fmax(1, fabs(yd[i]))))
				fail_msg("rmsnorm y[%d, %d] = %g, want %g", r, c, y[i], yd[i]);
		}
	}
	/* in place: y over x, h over res (d_h holds res again) */
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_h, res, n * 4), CUDA_SUCCESS);
	assert_int_equal(ktune_rmsnorm(ctx, ROWS, COLS, (void *)d_x, LD, (void *)d_h, LD, (void *)d_w, 1e-5f,
				       (void *)d_x, LD, (float *)d_rstd, (void *)d_h, LD, KTUNE_F32, NULL),
			 KTUNE_OK);
	download(y2, d_x, n);
	download(h2, d_h, n);
	assert_memory_equal(y, y2, n * 4);
	assert_memory_equal(h, h2, n * 4);
	ktune_cu.cuMemFree_v2(d_x);
	ktune_cu.cuMemFree_v2(d_res);
	ktune_cu.cuMemFree_v2(d_w);
	ktune_cu.cuMemFree_v2(d_y);
	ktune_cu.cuMemFree_v2(d_h);
	ktune_cu.cuMemFree_v2(d_rstd);
	free(x), free(res), free(w), free(y), free(h), free(y2), free(h2);
	free(xd), free(rd), free(wd), free(yd), free(hd);
}

static void test_rowwise_gpu__rmsnorm_residual_backward_deterministic(void **state)
{
	(void)state;
	enum { ROWS = 300, COLS = 1000, LD = 1003 };
	size_t n = (size_t)ROWS * LD;
	float *x = malloc(n * 4), *res = malloc(n * 4), *w = malloc(COLS * 4), *got = malloc(n * 4);
	float *dw1 = malloc(COLS * 4), *dw2 = malloc(COLS * 4), *dx1 = malloc(n * 4), *dx2 = malloc(n * 4);
	double *xd = malloc(n * 8), *rd = malloc(n * 8), *wd = malloc(COLS * 8), *y = malloc(n * 8);
	double *h = malloc(n * 8), *rstd = malloc(ROWS * 8), *dy = malloc(n * 8), *dx = malloc(n * 8);
	double *dw = malloc(COLS * 8);
	float rstd_got[ROWS];
	assert_true(x && res && w && got && dw1 && dw2 && dx1 && dx2 && xd && rd && wd && y && h && rstd && dy && dx && dw);
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)((long)(i * 7919 % 2001) - 1000) / 300; /* signed: i is a size_t */
		res[i] = (float)((long)(i * 104729 % 1999) - 999) / 500;
		xd[i] = x[i];
		rd[i] = res[i];
	}
	for (int c = 0; c < COLS; c++)
		wd[c] = w[c] = 0.5f + (float)(c % 17) / 16;
	CUdeviceptr d_x = upload(x, n), d_res = upload(res, n), d_w = upload(w, COLS), d_y = upload(x, n);
	CUdeviceptr d_h = upload(x, n), d_rstd = upload(rstd_got, ROWS), d_dx = upload(x, n), d_dw = upload(w, COLS);
	assert_int_equal(ktune_rmsnorm(ctx, ROWS, COLS, (void *)d_x, LD, (void *)d_res, LD, (void *)d_w, 1e-5f,
				       (void *)d_y, LD, (float *)d_rstd, (void *)d_h, LD, KTUNE_F32, NULL),
			 KTUNE_OK);
	ktune__ref_rmsnorm(xd, LD, rd, LD, wd, 1e-5, y, LD, rstd, h, LD, ROWS, COLS);
	download(got, d_y, n);
	download(rstd_got, d_rstd, ROWS);
	for (int r = 0; r < ROWS; r++) {
		assert_true(fabs(rstd_got[r] - rstd[r]) <= 1e-5 * rstd[r]);
		for (int c = 0; c < COLS; c++)
			if (!(fabs(got[r * LD + c] - y[r * LD + c]) <= 1e-5 * fmax(1, fabs(y[r * LD + c]))))
				fail_msg("rmsnorm y[%d, %d] = %g, want %g", r, c, got[r * LD + c], y[r * LD + c]);
	}
	/* backward from h, twice: the same bits */
	for (size_t i = 0; i < n; i++)
		dy[i] = x[(i * 31) % n] / 4;
	float *dyf = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		dyf[i] = (float)dy[i];
	CUdeviceptr d_dy = upload(dyf, n);
	download(got, d_h, n); /* h as the kernel rounded it (f32: exact) */
	for (int round = 0; round < 2; round++) {
		assert_int_equal(ktune_rmsnorm_backward(ctx, ROWS, COLS, (void *)d_h, LD, (void *)d_w, (float *)d_rstd,
							(void *)d_dy, LD, (void *)d_dx, LD, (void *)d_dw, KTUNE_F32, NULL),
				 KTUNE_OK);
		download(round ? dx2 : dx1, d_dx, n);
		download(round ? dw2 : dw1, d_dw, COLS);
	}
	assert_memory_equal(dw1, dw2, COLS * 4);
	assert_memory_equal(dx1, dx2, n * 4);

	/* captured in a CUDA graph (its scratch comes from the graph's own memory nodes), replayed: the same bits */
	{
		CUstream s;
		CUgraph g;
		CUgraphExec x;
		assert_int_equal(ktune_cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuMemsetD8_v2(d_dw, 0xff, COLS * 4), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
		int rc = ktune_rmsnorm_backward(ctx, ROWS, COLS, (void *)d_h, LD, (void *)d_w, (float *)d_rstd,
						(void *)d_dy, LD, (void *)d_dx, LD, (void *)d_dw, KTUNE_F32, s);
		assert_int_equal(ktune_cu.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
		assert_int_equal(rc, KTUNE_OK);
		assert_int_equal(ktune_cu.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
		for (int replay = 0; replay < 2; replay++) {
			assert_int_equal(ktune_cu.cuGraphLaunch(x, s), CUDA_SUCCESS);
			assert_int_equal(ktune_cu.cuStreamSynchronize(s), CUDA_SUCCESS);
			download(dw2, d_dw, COLS);
			assert_memory_equal(dw1, dw2, COLS * 4);
		}
		ktune_cu.cuGraphExecDestroy(x);
		ktune_cu.cuGraphDestroy(g);
		ktune_cu.cuStreamDestroy_v2(s);
	}
	double *hr = malloc(n * 8);
	assert_non_null(hr);
	for (size_t i = 0; i < n; i++)
		hr[i] = got[i];
	for (int r = 0; r < ROWS; r++)
		rstd[r] = rstd_got[r];
	ktune__ref_rmsnorm_backward(hr, LD, wd, rstd, dy, LD, dx, LD, dw, ROWS, COLS);
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < COLS; c++)
			if (!(fabs(dx1[r * LD + c] - dx[r * LD + c]) <= 1e-5 * fmax(1, fabs(dx[r * LD + c]))))
				fail_msg("rmsnorm dx[%d, %d] = %g, want %g", r, c, dx1[r * LD + c], dx[r * LD + c]);
	for (int c = 0; c < COLS; c++)
		if (!(fabs(dw1[c] - dw[c]) <= 1e-5 * fmax(1, fabs(dw[c]))))
			fail_msg("rmsnorm dw[%d] = %g, want %g", c, dw1[c], dw[c]);
	CUdeviceptr all[] = { d_x, d_res, d_w, d_y, d_h, d_rstd, d_dx, d_dw, d_dy };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
	free(x), free(res), free(w), free(got), free(dw1), free(dw2), free(dx1), free(dx2), free(dyf);
	free(xd), free(rd), free(wd), free(y), free(h), free(rstd), free(dy), free(dx), free(dw), free(hr);
}

static void test_rowwise_gpu__layernorm_constant_row_backward_deterministic(void **state)
{
	(void)state;
	enum { ROWS = 300, COLS = 1000, LD = 1003 };
	const float eps = 1e-5f;
	size_t n = (size_t)ROWS * LD;
	float *x = malloc(n * 4), *w = malloc(COLS * 4), *b = malloc(COLS * 4), *got = malloc(n * 4);
	float *dyf = malloc(n * 4), *dx1 = malloc(n * 4), *dx2 = malloc(n * 4);
	float *dw1 = malloc(COLS * 4), *dw2 = malloc(COLS * 4), *db1 = malloc(COLS * 4), *db2 = malloc(COLS * 4);
	double *xd = malloc(n * 8), *wd = malloc(COLS * 8), *bd = malloc(COLS * 8), *y = malloc(n * 8);
	double *dy = malloc(n * 8), *dx = malloc(n * 8), *dw = malloc(COLS * 8), *db = malloc(COLS * 8);
	double mean[ROWS], rstd[ROWS];
	float mean_got[ROWS], rstd_got[ROWS];
	assert_true(x && w && b && got && dyf && dx1 && dx2 && dw1 && dw2 && db1 && db2 && xd && wd && bd && y && dy &&
		    dx && dw && db);
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)((long)(i * 7919 % 2001) - 1000) / 300 + 2; /* an offset mean; signed: i is a size_t */
		dyf[i] = (float)((long)(i * 104729 % 1999) - 999) / 1000;
	}
	for (int c = 0; c < COLS; c++) {
		x[c] = 2.5f; /* row 0: one value (its sum, 2500, and mean are exact in fp32) */
		w[c] = 0.5f + (float)(c % 17) / 16;
		b[c] = (float)(c % 13) / 8 - 0.75f;
	}
	for (size_t i = 0; i < n; i++) {
		xd[i] = x[i];
		dy[i] = dyf[i];
	}
	for (int c = 0; c < COLS; c++) {
		wd[c] = w[c];
		bd[c] = b[c];
	}
	CUdeviceptr d_x = upload(x, n), d_w = upload(w, COLS), d_b = upload(b, COLS), d_y = upload(x, n);
	CUdeviceptr d_mean = upload(mean_got, ROWS), d_rstd = upload(rstd_got, ROWS), d_dy = upload(dyf, n);
	CUdeviceptr d_dx = upload(x, n), d_dw = upload(w, COLS), d_db = upload(b, COLS);
	assert_int_equal(ktune_layernorm(ctx, ROWS, COLS, (void *)d_x, LD, (void *)d_w, (void *)d_b, eps, (void *)d_y,
					 LD, (float *)d_mean, (float *)d_rstd, KTUNE_F32, NULL),
			 KTUNE_OK);
	ktune__ref_layernorm(xd, LD, wd, bd, eps, y, LD, mean, rstd, ROWS, COLS);
	download(got, d_y, n);
	download(mean_got, d_mean, ROWS);
	download(rstd_got, d_rstd, ROWS);
	assert_true(mean_got[0] == 2.5f);
	assert_true(fabs(rstd_got[0] - 1 / sqrt((double)eps)) <= 1e-5 / sqrt((double)eps));
	for (int c = 0; c < COLS; c++)
		if (got[c] != b[c])
			fail_msg("layernorm constant row y[0, %d] = %g, want b = %g", c, got[c], b[c]);
	for (int r = 0; r < ROWS; r++) {
		assert_true(fabs(mean_got[r] - mean[r]) <= 1e-5 * fmax(1, fabs(mean[r])));
		assert_true(fabs(rstd_got[r] - rstd[r]) <= 1e-5 * rstd[r]);
		for (int c = 0; c < LD; c++) {
			float g = got[r * LD + c];
			if (c >= COLS) /* past the row: untouched */
				assert_true(g == x[r * LD + c]);
			else if (!(fabs(g - y[r * LD + c]) <= 1e-5 * fmax(1, fabs(y[r * LD + c]))))
				fail_msg("layernorm y[%d, %d] = %g, want %g", r, c, g, y[r * LD + c]);
		}
	}
	/* backward from the forward's mean and rstd, twice: the same bits */
	for (int round = 0; round < 2; round++) {
		assert_int_equal(ktune_layernorm_backward(ctx, ROWS, COLS, (void *)d_x, LD, (void *)d_w,
							  (float *)d_mean, (float *)d_rstd, (void *)d_dy, LD,
							  (void *)d_dx, LD, (void *)d_dw, (void *)d_db, KTUNE_F32, NULL),
				 KTUNE_OK);
		download(round ? dx2 : dx1, d_dx, n);
		download(round ? dw2 : dw1, d_dw, COLS);
		download(round ? db2 : db1, d_db, COLS);
	}
	assert_memory_equal(dx1, dx2, n * 4);
	assert_memory_equal(dw1, dw2, COLS * 4);
	assert_memory_equal(db1, db2, COLS * 4);
	for (int r = 0; r < ROWS; r++) {
		mean[r] = mean_got[r];
		rstd[r] = rstd_got[r];
	}
	ktune__ref_layernorm_backward(xd, LD, wd, mean, rstd, dy, LD, dx, LD, dw, db, ROWS, COLS);
	for (int r = 0; r < ROWS; r++)
		for (int c = 0; c < LD; c++) {
			float g = dx1[r * LD + c];
			double want = dx[r * LD + c];
			if (c >= COLS) /* past the row: untouched */
				assert_true(g == x[r * LD + c]);
			else if (!(fabs(g - want) <= 1e-5 * fmax(1, fmax(fabs(want), rstd[r])))) /* dx scales with rstd */
				fail_msg("layernorm dx[%d, %d] = %g, want %g", r, c, g, want);
		}
	for (int c = 0; c < COLS; c++) {
		if (!(fabs(dw1[c] - dw[c]) <= 1e-5 * fmax(1, fabs(dw[c]))))
			fail_msg("layernorm dw[%d] = %g, want %g", c, dw1[c], dw[c]);
		if (!(fabs(db1[c] - db[c]) <= 1e-5 * fmax(1, fabs(db[c]))))
			fail_msg("layernorm db[%d] = %g, want %g", c, db1[c], db[c]);
	}
	CUdeviceptr all[] = { d_x, d_w, d_b, d_y, d_mean, d_rstd, d_dy, d_dx, d_dw, d_db };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
	free(x), free(w), free(b), free(got), free(dyf), free(dx1), free(dx2), free(dw1), free(dw2), free(db1);
	free(db2), free(xd), free(wd), free(bd), free(y), free(dy), free(dx), free(dw), free(db);
}

/* |got - want| within tol * max(1, |want|) for n floats, or a named failure. */
static void expect_close(const char *what, const float *got, const double *want, size_t n, double tol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs(got[i] - want[i]) <= tol * fmax(1, fabs(want[i]))))
			fail_msg("%s[%zu] = %g, want %g", what, i, got[i], want[i]);
}

/*
 * The norms without their affine parameters (NULL weight, bias, dweight,
 * dbias): as with a weight of ones and a bias of zeros; a backward with
 * only db, or no reduction at all, still gives dx.
 */
static void test_rowwise_gpu__norms_without_affine(void **state)
{
	(void)state;
	enum { ROWS = 64, COLS = 4097 };
	const float eps = 1e-5f;
	size_t n = (size_t)ROWS * COLS;
	float *x = malloc(n * 4), *dyf = malloc(n * 4), *got = malloc(n * 4);
	float rstd_got[ROWS] = { 0 }, mean_got[ROWS] = { 0 };
	double *xd = malloc(n * 8), *dy = malloc(n * 8), *want = malloc(n * 8), *dw = malloc(COLS * 8);
	double *db = malloc(COLS * 8), *ones = malloc(COLS * 8), *zeros = calloc(COLS, 8);
	double mean[ROWS], rstd[ROWS];
	assert_true(x && dyf && got && xd && dy && want && dw && db && ones && zeros);
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)((long)(i * 7919 % 2001) - 1000) / 400 + 0.5f;
		dyf[i] = (float)((long)(i * 104729 % 1999) - 999) / 1000;
		xd[i] = x[i];
		dy[i] = dyf[i];
	}
	for (int c = 0; c < COLS; c++)
		ones[c] = 1;
	CUdeviceptr d_x = upload(x, n), d_y = upload(x, n), d_dy = upload(dyf, n), d_dx = upload(x, n);
	CUdeviceptr d_mean = upload(rstd_got, ROWS), d_rstd = upload(rstd_got, ROWS);
	CUdeviceptr d_db = upload(x, COLS);

	/* RMSNorm: y, then dx with no dw */
	assert_int_equal(ktune_rmsnorm(ctx, ROWS, COLS, (void *)d_x, COLS, NULL, 0, NULL, eps, (void *)d_y, COLS,
				       (float *)d_rstd, NULL, 0, KTUNE_F32, NULL),
			 KTUNE_OK);
	ktune__ref_rmsnorm(xd, COLS, NULL, 0, ones, eps, want, COLS, rstd, NULL, 0, ROWS, COLS);
	download(got, d_y, n);
	expect_close("rmsnorm (no weight) y", got, want, n, 1e-5);
	download(rstd_got, d_rstd, ROWS);
	for (int r = 0; r < ROWS; r++)
		rstd[r] = rstd_got[r];
	assert_int_equal(ktune_rmsnorm_backward(ctx, ROWS, COLS, (void *)d_x, COLS, NULL, (float *)d_rstd,
						(void *)d_dy, COLS, (void *)d_dx, COLS, NULL, KTUNE_F32, NULL),
			 KTUNE_OK);
	ktune__ref_rmsnorm_backward(xd, COLS, ones, rstd, dy, COLS, want, COLS, dw, ROWS, COLS);
	download(got, d_dx, n);
	expect_close("rmsnorm (no weight) dx", got, want, n, 1e-5);

	/* LayerNorm: y; dx and db only; dx alone */
	assert_int_equal(ktune_layernorm(ctx, ROWS, COLS, (void *)d_x, COLS, NULL, NULL, eps, (void *)d_y, COLS,
					 (float *)d_mean, (float *)d_rstd, KTUNE_F32, NULL),
			 KTUNE_OK);
	ktune__ref_layernorm(xd, COLS, ones, zeros, eps, want, COLS, mean, rstd, ROWS, COLS);
	download(got, d_y, n);
	expect_close("layernorm (no weight, bias) y", got, want, n, 1e-5);
	download(mean_got, d_mean, ROWS);
	download(rstd_got, d_rstd, ROWS);
	for (int r = 0; r < ROWS; r++) {
		mean[r] = mean_got[r];
		rstd[r] = rstd_got[r];
	}
	ktune__ref_layernorm_backward(xd, COLS, ones, mean, rstd, dy, COLS, want, COLS, dw, db, ROWS, COLS);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(ktune_layernorm_backward(ctx, ROWS, COLS, (void *)d_x, COLS, NULL, (float *)d_mean,
							  (float *)d_rstd, (void *)d_dy, COLS, (void *)d_dx, COLS,
							  NULL, round ? NULL : (void *)d_db, KTUNE_F32, NULL),
				 KTUNE_OK);
		download(got, d_dx, n);
		expect_close("layernorm (no weight) dx", got, want, n, 1e-5);
		if (round == 0) {
			download(got, d_db, COLS);
			expect_close("layernorm (no weight) db", got, db, COLS, 1e-5);
		}
	}

	CUdeviceptr all[] = { d_x, d_y, d_dy, d_dx, d_mean, d_rstd, d_db };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
	free(x), free(dyf), free(got), free(xd), free(dy), free(want), free(dw), free(db);
	free(ones), free(zeros);
}

static void test_rowwise_gpu__bad_arguments(void **state)
{
	(void)state;
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
	assert_int_equal(ktune_softmax(ctx, 2, 16, (void *)d, 8, (void *)d, 16, KTUNE_F32, NULL), KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "row stride (8) is less than cols = 16"));
	assert_int_equal(ktune_rmsnorm(ctx, 2, 16, (void *)d, 16, NULL, 0, (void *)d, -1.0f, (void *)d, 16,
				       (float *)d, NULL, 0, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_rmsnorm(ctx, 2, 200000, (void *)d, 200000, NULL, 0, (void *)d, 1e-5f, (void *)d,
				       200000, (float *)d, NULL, 0, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "over 131072"));
	assert_int_equal(ktune_rmsnorm_backward(ctx, 2, 16, (void *)d, 16, (void *)d, NULL, (void *)d, 16, (void *)d,
						16, (void *)d, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "rstd is NULL"));
	assert_int_equal(ktune_layernorm(ctx, 2, 16, (void *)d, 16, (void *)d, (void *)d, -1.0f, (void *)d, 16,
					 (float *)d, (float *)d, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_int_equal(ktune_layernorm(ctx, 2, 16, (void *)d, 16, NULL, NULL, 1e-5f, (void *)d, 16, NULL,
					 (float *)d, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "mean is NULL")); /* weight and bias may be NULL, mean not */
	assert_int_equal(ktune_layernorm(ctx, 2, 200000, (void *)d, 200000, (void *)d, (void *)d, 1e-5f, (void *)d,
					 200000, (float *)d, (float *)d, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "over 131072"));
	assert_int_equal(ktune_layernorm_backward(ctx, 2, 16, (void *)d, 16, (void *)d, NULL, (float *)d, (void *)d,
						  16, (void *)d, 16, (void *)d, (void *)d, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "mean is NULL"));
	assert_int_equal(ktune_layernorm_backward(ctx, 2, 16, (void *)d, 8, (void *)d, (float *)d, (float *)d,
						  (void *)d, 16, (void *)d, 16, (void *)d, (void *)d, KTUNE_F32, NULL),
			 KTUNE_ERR_INVALID);
	assert_non_null(strstr(ktune_errmsg(ctx), "row stride (8) is less than cols = 16"));
	ktune_cu.cuMemFree_v2(d);
}

/* ------------------------------------------------------------ cross-entropy through the API */

static CUdeviceptr upload_bytes(const void *host, size_t n)
{
	CUdeviceptr d;
	assert_int_equal(ktune_cu.cuMemAlloc_v2(&d, n + 16), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d, host, n), CUDA_SUCCESS);
	return d;
}

/* got within tol * |want| + floor (NaN only for NaN), else the test fails naming what and where. */
static void ce_close(const char *what, int64_t i, double got, double want, double tol, double floor)
{
	if (isnan(want) ? !isnan(got) : !(fabs(got - want) <= tol * fabs(want) + floor))
		fail_msg("cross_entropy %s[%lld] = %.9g, want %.9g", what, (long long)i, got, want);
}

static unsigned short to_bf16(float f)
{
	unsigned x;
	memcpy(&x, &f, sizeof(x));
	return (unsigned short)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/*
 * f32 logits [300, V] with row stride LD, in [-2, 2]; every 7th row
 * ignored (-100), row 5's target out of range (NaN loss); dloss scaled so
 * that dlogits are p - [c == t] (of order 1e-3 to 1): the checks are
 * relative to each element.
 */
static void cross_entropy_api(int64_t V, int64_t LD)
{
	enum { ROWS = 300 };
	const int64_t ignore = -100;
	const float eps = 0.1f, cap = 3.0f;
	size_t n = (size_t)ROWS * (size_t)LD;
	float *x = malloc(n * 4), *got = malloc(n * 4), *got2 = malloc(n * 4), loss[ROWS], lse[ROWS], one;
	double *xd = malloc(n * 8), *want = malloc(n * 8), lossd[ROWS], lsed[ROWS];
	int64_t t[ROWS];
	int64_t kept = 0;
	assert_true(x && got && got2 && xd && want);
	for (size_t i = 0; i < n; i++)
		xd[i] = x[i] = (float)((long)(i * 7919 % 4001) - 2000) / 1000;
	for (int r = 0; r < ROWS; r++) {
		t[r] = r % 7 == 3 ? ignore : r == 5 ? V + 2 : (r * 104729) % V;
		kept += t[r] != ignore;
	}
	CUdeviceptr d_x = upload(x, n), d_t = upload_bytes(t, sizeof(t)), d_loss = upload(x, ROWS);
	CUdeviceptr d_lse = upload(x, ROWS), d_dx = upload(x, n), d_dloss = upload(x, ROWS), d_x2 = upload(x, n);

	/* forward, each reduction, smoothing and cap on */
	ktune__ref_cross_entropy(xd, LD, t, ignore, eps, cap, lossd, lsed, ROWS, V);
	for (int red = 0; red < 3; red++) {
		assert_int_equal(ktune_cross_entropy(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, ignore, eps, cap,
						     (ktune_reduction)red, (float *)d_loss, (float *)d_lse, KTUNE_F32, NULL),
				 KTUNE_OK);
		download(lse, d_lse, ROWS);
		for (int r = 0; r < ROWS; r++)
			ce_close("lse", r, lse[r], lsed[r], 1e-6, 0);
		if (red == KTUNE_REDUCTION_NONE) {
			download(loss, d_loss, ROWS);
			for (int r = 0; r < ROWS; r++)
				ce_close("loss", r, loss[r], lossd[r], 1e-5, 1e-6);
		} else {
			download(&one, d_loss, 1); /* NaN: row 5's target is out of range */
			ce_close(red ? "sum" : "mean", 0, one,
				 ktune__ref_cross_entropy_reduce(lossd, t, ignore, (ktune_reduction)red, ROWS), 0, 0);
		}
	}
	/* without the bad row: the mean's value */
	t[5] = 17;
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_t, t, sizeof(t)), CUDA_SUCCESS);
	ktune__ref_cross_entropy(xd, LD, t, ignore, eps, cap, lossd, lsed, ROWS, V);
	for (int round = 0; round < 2; round++) { /* twice: the same bits */
		float again;
		assert_int_equal(ktune_cross_entropy(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, ignore, eps, cap,
						     KTUNE_REDUCTION_MEAN, (float *)d_loss, (float *)d_lse, KTUNE_F32, NULL),
				 KTUNE_OK);
		download(round ? &again : &one, d_loss, 1);
		if (round)
			assert_memory_equal(&one, &again, 4);
	}
	ce_close("mean", 0, one, ktune__ref_cross_entropy_reduce(lossd, t, ignore, KTUNE_REDUCTION_MEAN, ROWS), 1e-5, 0);

	/* backward from the kernel's lse, none: each row its dloss */
	float dl[ROWS];
	double dld[ROWS], lse_got[ROWS];
	download(lse, d_lse, ROWS);
	for (int r = 0; r < ROWS; r++) {
		dl[r] = (float)(1 + r % 3);
		dld[r] = dl[r];
		lse_got[r] = lse[r];
	}
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_dloss, dl, sizeof(dl)), CUDA_SUCCESS);
	assert_int_equal(ktune_cross_entropy_backward(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, ignore, eps, cap,
						      KTUNE_REDUCTION_NONE, (float *)d_lse, (float *)d_dloss,
						      (void *)d_dx, LD, KTUNE_F32, NULL),
			 KTUNE_OK);
	download(got, d_dx, n);
	ktune__ref_cross_entropy_backward(xd, LD, t, ignore, eps, cap, lse_got, KTUNE_REDUCTION_NONE, dld, want, LD,
					  ROWS, V);
	for (size_t i = 0; i < n; i++)
		if ((int64_t)(i % (size_t)LD) >= V)
			assert_true(got[i] == x[i]); /* past the row: untouched */
		else
			ce_close("backward dlogits", (int64_t)i, got[i], want[i], 1e-4, 1e-9);

	/* fused, mean, dloss = kept (so that g = 1), out of place, then in place: the same bits */
	const float dloss = (float)kept;
	assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, ignore, eps, cap,
						   KTUNE_REDUCTION_MEAN, dloss, (float *)d_loss, (void *)d_dx, LD,
						   KTUNE_F32, NULL),
			 KTUNE_OK);
	download(got, d_dx, n);
	download(&one, d_loss, 1);
	double dd = dloss;
	ktune__ref_cross_entropy_backward(xd, LD, t, ignore, eps, cap, lsed, KTUNE_REDUCTION_MEAN, &dd, want, LD, ROWS, V);
	ce_close("fused mean", 0, one, ktune__ref_cross_entropy_reduce(lossd, t, ignore, KTUNE_REDUCTION_MEAN, ROWS),
		 1e-5, 0);
	for (size_t i = 0; i < n; i++)
		if ((int64_t)(i % (size_t)LD) >= V)
			assert_true(got[i] == x[i]);
		else
			ce_close("fused dlogits", (int64_t)i, got[i], want[i], 1e-4, 1e-9);
	float in_place_loss;
	assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, V, (void *)d_x2, LD, (int64_t *)d_t, ignore, eps, cap,
						   KTUNE_REDUCTION_MEAN, dloss, (float *)d_loss, (void *)d_x2, LD,
						   KTUNE_F32, NULL),
			 KTUNE_OK);
	download(got2, d_x2, n);
	download(&in_place_loss, d_loss, 1);
	assert_memory_equal(got, got2, n * 4);
	assert_memory_equal(&one, &in_place_loss, 4);

	/* the fused mean captured in a CUDA graph (scratch from its memory nodes), replayed: the same bits */
	{
		CUstream st;
		CUgraph g;
		CUgraphExec ge;
		assert_int_equal(ktune_cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuMemsetD8_v2(d_dx, 0xff, n * 4), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
		int rc = ktune_cross_entropy_fused(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, ignore, eps, cap,
						   KTUNE_REDUCTION_MEAN, dloss, (float *)d_loss, (void *)d_dx, LD,
						   KTUNE_F32, st);
		assert_int_equal(ktune_cu.cuStreamEndCapture(st, &g), CUDA_SUCCESS);
		assert_int_equal(rc, KTUNE_OK);
		assert_int_equal(ktune_cu.cuGraphInstantiateWithFlags(&ge, g, 0), CUDA_SUCCESS);
		for (int replay = 0; replay < 2; replay++) {
			assert_int_equal(ktune_cu.cuMemsetD8_v2(d_loss, 0xff, 4), CUDA_SUCCESS);
			assert_int_equal(ktune_cu.cuGraphLaunch(ge, st), CUDA_SUCCESS);
			assert_int_equal(ktune_cu.cuStreamSynchronize(st), CUDA_SUCCESS);
			download(got2, d_dx, n);
			download(&in_place_loss, d_loss, 1);
			for (size_t i = 0; i < n; i++) /* the padding was 0xff before the replays: compare the rows */
				if ((int64_t)(i % (size_t)LD) < V && memcmp(&got[i], &got2[i], 4))
					fail_msg("graph replay %d: dlogits[%zu] = %.9g, eager %.9g", replay, i, got2[i],
						 got[i]);
			assert_memory_equal(&one, &in_place_loss, 4);
		}
		ktune_cu.cuGraphExecDestroy(ge);
		ktune_cu.cuGraphDestroy(g);
		ktune_cu.cuStreamDestroy_v2(st);
	}
	CUdeviceptr all[] = { d_x, d_t, d_loss, d_lse, d_dx, d_dloss, d_x2 };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
	free(x), free(got), free(got2), free(xd), free(want);
}

/* V = 1000 (the default holds a row in registers) and 5000 (it streams rows: 1250 vectors) */
static void test_rowwise_gpu__cross_entropy_api(void **state)
{
	(void)state;
	cross_entropy_api(1000, 1003);
	cross_entropy_api(5000, 5004);
}

/*
 * Logits of +-1e4 (17 maxima of 33): the fused pass exact (p = 1/17 or 0),
 * the loss log 17 or 2e4 + log 17, nothing NaN; the separate backward
 * within its lse's rounding (1e-3 at 1e4).  Then every target ignored
 * (mean 0, every gradient 0, in place: the logits become zeros), and vocab 1
 * (loss 0, gradient 0).
 */
static void test_rowwise_gpu__cross_entropy_edges(void **state)
{
	enum { ROWS = 4, V = 33, LD = 36 };
	float x[ROWS * LD], got[ROWS * LD], loss[ROWS], lse[ROWS], m;
	double xd[ROWS * LD], want[ROWS * LD], lossd[ROWS], lsed[ROWS], one = 1;
	int64_t t[ROWS] = { 0, 1, 2, 31 };
	(void)state;
	for (int i = 0; i < ROWS * LD; i++)
		xd[i] = x[i] = i % LD % 2 ? -1e4f : 1e4f;
	CUdeviceptr d_x = upload(x, ROWS * LD), d_t = upload_bytes(t, sizeof(t)), d_loss = upload(x, ROWS);
	CUdeviceptr d_lse = upload(x, ROWS), d_dx = upload(x, ROWS * LD), d_one = upload(x, 1);
	float onef = 1;
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_one, &onef, 4), CUDA_SUCCESS);
	assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, -100, 0, 0,
						   KTUNE_REDUCTION_NONE, 1.0f, (float *)d_loss, (void *)d_dx, LD, KTUNE_F32,
						   NULL),
			 KTUNE_OK);
	download(loss, d_loss, ROWS);
	download(got, d_dx, ROWS * LD);
	ktune__ref_cross_entropy(xd, LD, t, -100, 0, 0, lossd, lsed, ROWS, V);
	ktune__ref_cross_entropy_backward(xd, LD, t, -100, 0, 0, lsed, KTUNE_REDUCTION_SUM, &one, want, LD, ROWS, V);
	for (int r = 0; r < ROWS; r++)
		ce_close("loss at 1e4", r, loss[r], lossd[r], 1e-6, 1e-6);
	for (int i = 0; i < ROWS * LD; i++)
		if (i % LD < V)
			ce_close("fused dlogits at 1e4", i, got[i], want[i], 1e-6, 1e-7);
	/* forward, then the separate backward from its lse: within the lse's rounding */
	assert_int_equal(ktune_cross_entropy(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, -100, 0.1f, 30.0f,
					     KTUNE_REDUCTION_SUM, (float *)d_loss, (float *)d_lse, KTUNE_F32, NULL),
			 KTUNE_OK);
	download(lse, d_lse, ROWS);
	download(&m, d_loss, 1);
	ktune__ref_cross_entropy(xd, LD, t, -100, 0.1, 30, lossd, lsed, ROWS, V);
	ce_close("sum at 1e4, capped at 30", 0, m, ktune__ref_cross_entropy_reduce(lossd, t, -100, KTUNE_REDUCTION_SUM, ROWS),
		 1e-5, 0);
	for (int r = 0; r < ROWS; r++)
		ce_close("lse at 1e4, capped", r, lse[r], lsed[r], 1e-6, 0);
	assert_int_equal(ktune_cross_entropy(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, -100, 0, 0,
					     KTUNE_REDUCTION_SUM, (float *)d_loss, (float *)d_lse, KTUNE_F32, NULL),
			 KTUNE_OK);
	assert_int_equal(ktune_cross_entropy_backward(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, -100, 0, 0,
						      KTUNE_REDUCTION_SUM, (float *)d_lse, (float *)d_one, (void *)d_dx, LD,
						      KTUNE_F32, NULL),
			 KTUNE_OK);
	download(got, d_dx, ROWS * LD);
	for (int i = 0; i < ROWS * LD; i++)
		if (i % LD < V)
			ce_close("backward dlogits at 1e4", i, got[i], want[i], 2e-3, 1e-7);

	/* every target ignored: the mean is 0, and in place the logits become zeros */
	int64_t none[ROWS] = { -100, -100, -100, -100 };
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_t, none, sizeof(none)), CUDA_SUCCESS);
	assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, V, (void *)d_x, LD, (int64_t *)d_t, -100, 0.1f, 30.0f,
						   KTUNE_REDUCTION_MEAN, 1.0f, (float *)d_loss, (void *)d_x, LD, KTUNE_F32,
						   NULL),
			 KTUNE_OK);
	download(&m, d_loss, 1);
	download(got, d_x, ROWS * LD);
	assert_true(m == 0);
	for (int i = 0; i < ROWS * LD; i++)
		assert_true(i % LD < V ? got[i] == 0 : got[i] == x[i]);

	/* vocab 1: loss 0 (smoothing or not), gradient 0 */
	int64_t zero[ROWS] = { 0, 0, 0, 0 };
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_t, zero, sizeof(zero)), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d_x, x, sizeof(x)), CUDA_SUCCESS);
	assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, 1, (void *)d_x, LD, (int64_t *)d_t, -100, 0.1f, 0,
						   KTUNE_REDUCTION_NONE, 1.0f, (float *)d_loss, (void *)d_dx, LD, KTUNE_F32,
						   NULL),
			 KTUNE_OK);
	download(loss, d_loss, ROWS);
	download(got, d_dx, ROWS * LD);
	for (int r = 0; r < ROWS; r++)
		assert_true(fabsf(loss[r]) <= 1e-6f && fabsf(got[r * LD]) <= 1e-6f);
	CUdeviceptr all[] = { d_x, d_t, d_loss, d_lse, d_dx, d_one };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
}

/*
 * bf16 logits [64, V], fused in place, against the reference of the rounded
 * logits: V = 50264 (rows 16-byte aligned: vectors) and 50257 (the
 * unaligned class, element by element).
 */
static void test_rowwise_gpu__cross_entropy_bf16_in_place(void **state)
{
	enum { ROWS = 64 };
	static const int64_t vocab[] = { 50264, 50257 };
	(void)state;
	for (int vi = 0; vi < 2; vi++) {
		const int64_t V = vocab[vi];
		size_t n = (size_t)ROWS * (size_t)V;
		unsigned short *x = malloc(n * 2), *got = malloc(n * 2);
		double *xd = malloc(n * 8), *want = malloc(n * 8), lossd[ROWS], lsed[ROWS], one = 1;
		int64_t t[ROWS];
		float loss;
		assert_true(x && got && xd && want);
		for (size_t i = 0; i < n; i++) {
			x[i] = to_bf16((float)((long)(i * 7919 % 10007) - 5003) / 1000);
			xd[i] = gpu_test_half_to_double(x[i], 1);
		}
		for (int r = 0; r < ROWS; r++)
			t[r] = r == 9 ? -100 : (r * 104729) % V;
		CUdeviceptr d_x = upload_bytes(x, n * 2), d_t = upload_bytes(t, sizeof(t)), d_loss = upload_bytes(t, 4);
		assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, V, (void *)d_x, V, (int64_t *)d_t, -100, 0, 0,
							   KTUNE_REDUCTION_SUM, 1.0f, (float *)d_loss, (void *)d_x, V,
							   KTUNE_BF16, NULL),
				 KTUNE_OK);
		assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(got, d_x, n * 2), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(&loss, d_loss, 4), CUDA_SUCCESS);
		ktune__ref_cross_entropy(xd, V, t, -100, 0, 0, lossd, lsed, ROWS, V);
		ktune__ref_cross_entropy_backward(xd, V, t, -100, 0, 0, lsed, KTUNE_REDUCTION_SUM, &one, want, V, ROWS, V);
		ce_close("bf16 sum", V, loss, ktune__ref_cross_entropy_reduce(lossd, t, -100, KTUNE_REDUCTION_SUM, ROWS),
			 1e-5, 0);
		for (size_t i = 0; i < n; i++) /* bf16's rounding (2^-9 relative), and the fp32 math's below it */
			ce_close("bf16 in-place dlogits", (int64_t)i, gpu_test_half_to_double(got[i], 1), want[i], 5e-3,
				 1e-12);
		ktune_cu.cuMemFree_v2(d_x);
		ktune_cu.cuMemFree_v2(d_t);
		ktune_cu.cuMemFree_v2(d_loss);
		free(x), free(got), free(xd), free(want);
	}
}

/*
 * GPT-2's vocabulary through the API, bf16 (the unaligned class's default:
 * 16-byte vectors, rows shifted), logits and dlogits at other
 * misalignments and row strides: x 1 and dx 1 element past an aligned
 * base with packed rows (every row's dx shifted as x's), x 3 and dx 6 (no
 * row's), x 0 and dx 0 with strides V + 3 and V + 5 (some rows' and not
 * others'), and in place, x 5 with stride V + 1; fused (sum) and, on the
 * third, the backward (none) from the kernel's lse.  Against the reference
 * of the rounded logits, and nothing written outside the rows (the padding
 * and 64 bytes either side keep their bytes).
 */
static void test_rowwise_gpu__cross_entropy_unaligned_api(void **state)
{
	enum { ROWS = 40, V = 50257, EDGE = 64 };
	static const struct {
		int x_off, dx_off, ld_x, ld_dx, backward, in_place;
	} cases[] = { { 1, 1, V, V, 0, 0 }, { 3, 6, V, V, 0, 0 }, { 0, 0, V + 3, V + 5, 1, 0 }, { 5, 5, V + 1, V + 1, 0, 1 } };
	(void)state;
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const int ld_x = cases[ci].ld_x, ld_dx = cases[ci].ld_dx;
		const size_t nx = (size_t)ROWS * ld_x, ndx = (size_t)ROWS * ld_dx;
		const size_t bx = 2 * EDGE + (nx + 8) * 2, bdx = 2 * EDGE + (ndx + 8) * 2;
		unsigned char *hx = malloc(bx), *hdx = malloc(bdx), *got = malloc(bdx);
		double *xd = malloc(nx * 8), *want = malloc(ndx * 8), lossd[ROWS], lsed[ROWS], one = 1, dl[ROWS];
		float loss, lse[ROWS], dlf[ROWS];
		int64_t t[ROWS];
		assert_true(hx && hdx && got && xd && want);
		memset(hx, 0x77, bx);
		memset(hdx, 0x5a, bdx);
		unsigned short *x = (unsigned short *)(hx + EDGE) + cases[ci].x_off;
		for (size_t i = 0; i < nx; i++) {
			x[i] = to_bf16((float)((long)(i * 7919 % 10007) - 5003) / 1000);
			xd[i] = gpu_test_half_to_double(x[i], 1);
		}
		for (int r = 0; r < ROWS; r++) {
			t[r] = r == 9 ? -100 : (r * 104729) % V;
			dl[r] = dlf[r] = (float)(1 + r % 3);
		}
		t[13] = V - 1; /* the last column: in a row's partial last vector or not, by its shift */
		t[14] = 0;     /* the first: in its partial first vector */
		CUdeviceptr d_x = upload_bytes(hx, bx), d_dx = upload_bytes(hdx, bdx), d_t = upload_bytes(t, sizeof(t));
		CUdeviceptr d_loss = upload_bytes(t, 4), d_lse = upload_bytes(t, sizeof(lse)), d_dl = upload_bytes(dlf, sizeof(dlf));
		void *px = (void *)(d_x + EDGE + 2 * (CUdeviceptr)cases[ci].x_off);
		const CUdeviceptr d_out = cases[ci].in_place ? d_x : d_dx; /* the buffer the gradient is written to */
		const unsigned char *orig = cases[ci].in_place ? hx : hdx; /* its bytes as uploaded */
		void *pdx = (void *)(d_out + EDGE + 2 * (CUdeviceptr)cases[ci].dx_off);
		ktune__ref_cross_entropy(xd, ld_x, t, -100, 0, 0, lossd, lsed, ROWS, V);
		if (cases[ci].backward) {
			assert_int_equal(ktune_cross_entropy(ctx, ROWS, V, px, ld_x, (int64_t *)d_t, -100, 0, 0,
							     KTUNE_REDUCTION_SUM, (float *)d_loss, (float *)d_lse,
							     KTUNE_BF16, NULL),
					 KTUNE_OK);
			download(lse, d_lse, ROWS);
			for (int r = 0; r < ROWS; r++) {
				ce_close("unaligned lse", r, lse[r], lsed[r], 1e-6, 0);
				lsed[r] = lse[r];
			}
			assert_int_equal(ktune_cross_entropy_backward(ctx, ROWS, V, px, ld_x, (int64_t *)d_t, -100, 0, 0,
								      KTUNE_REDUCTION_NONE, (float *)d_lse,
								      (float *)d_dl, pdx, ld_dx, KTUNE_BF16, NULL),
					 KTUNE_OK);
			ktune__ref_cross_entropy_backward(xd, ld_x, t, -100, 0, 0, lsed, KTUNE_REDUCTION_NONE, dl, want,
							  ld_dx, ROWS, V);
		} else {
			assert_int_equal(ktune_cross_entropy_fused(ctx, ROWS, V, px, ld_x, (int64_t *)d_t, -100, 0, 0,
								   KTUNE_REDUCTION_SUM, 1.0f, (float *)d_loss, pdx, ld_dx,
								   KTUNE_BF16, NULL),
					 KTUNE_OK);
			ktune__ref_cross_entropy_backward(xd, ld_x, t, -100, 0, 0, lsed, KTUNE_REDUCTION_SUM, &one, want,
							  ld_dx, ROWS, V);
			download(&loss, d_loss, 1);
			ce_close("unaligned sum", 0, loss,
				 ktune__ref_cross_entropy_reduce(lossd, t, -100, KTUNE_REDUCTION_SUM, ROWS), 1e-5, 0);
		}
		assert_int_equal(ktune_cu.cuCtxSynchronize(), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(got, d_out, bdx), CUDA_SUCCESS);
		const size_t first = EDGE + 2 * (size_t)cases[ci].dx_off;
		for (size_t b = 0; b < bdx; b++) { /* outside the rows (before, after, the padding): as uploaded */
			size_t i = (b - first) / 2;
			int inside = b >= first && i < ndx && i % (size_t)ld_dx < V;
			if (!inside && got[b] != orig[b])
				fail_msg("case %zu: byte %zu (outside the rows) written", ci, b);
		}
		const unsigned short *g = (const unsigned short *)(got + first);
		for (size_t i = 0; i < ndx; i++)
			if (i % (size_t)ld_dx < V)
				ce_close("unaligned dlogits", (int64_t)i, gpu_test_half_to_double(g[i], 1), want[i], 5e-3,
					 1e-12);
		CUdeviceptr all[] = { d_x, d_dx, d_t, d_loss, d_lse, d_dl };
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
			ktune_cu.cuMemFree_v2(all[i]);
		free(hx), free(hdx), free(got), free(xd), free(want);
	}
}

/* A call refused with KTUNE_ERR_INVALID and a message holding msg. */
#define REFUSED(call, msg)                                                                             \
	do {                                                                                           \
		ktune_status rc_ = (call);                                                             \
		if (rc_ != KTUNE_ERR_INVALID || !strstr(ktune_errmsg(ctx), msg))                       \
			fail_msg("line %d: status %d, message '%s', want '%s'", __LINE__, (int)rc_,     \
				 ktune_errmsg(ctx), msg);                                               \
	} while (0)

/* Bad arguments: a clear status and message, and nothing written. */
static void test_rowwise_gpu__cross_entropy_bad_arguments(void **state)
{
	enum { ROWS = 2, V = 16 };
	const ktune_reduction mean = KTUNE_REDUCTION_MEAN;
	float x[ROWS * V], back[ROWS * V];
	int64_t t[ROWS] = { 1, 2 };
	(void)state;
	for (int i = 0; i < ROWS * V; i++)
		x[i] = (float)i;
	CUdeviceptr d_x = upload(x, ROWS * V), d_dx = upload(x, ROWS * V), d_t = upload_bytes(t, sizeof(t));
	CUdeviceptr d_loss = upload(x, ROWS), d_lse = upload(x, ROWS);
	float *loss = (float *)d_loss, *lse = (float *)d_lse;
	const int64_t *tt = (const int64_t *)d_t;
	void *xp = (void *)d_x, *dxp = (void *)d_dx;

	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, 1.5f, 0, mean, loss, lse, KTUNE_F32, NULL),
		"label_smoothing 1.5 is not in [0, 1]");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, NAN, 0, mean, loss, lse, KTUNE_F32, NULL),
		"label_smoothing nan is not in [0, 1]");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, 0, -1.0f, mean, loss, lse, KTUNE_F32, NULL),
		"softcap -1 is not a finite value >= 0");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, 0, INFINITY, mean, loss, lse, KTUNE_F32, NULL),
		"softcap inf is not a finite value >= 0");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, 0, 0, (ktune_reduction)7, loss, lse, KTUNE_F32, NULL),
		"reduction 7 is not mean (0), sum (1) or none (2)");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, 8, tt, -100, 0, 0, mean, loss, lse, KTUNE_F32, NULL),
		"cross_entropy: a row stride (8) is less than cols = 16");
	REFUSED(ktune_cross_entropy(ctx, ROWS, 300000, xp, 300000, tt, -100, 0, 0, mean, loss, lse, KTUNE_F32, NULL),
		"vocab 300000 is over 262144");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, NULL, -100, 0, 0, mean, loss, lse, KTUNE_F32, NULL),
		"cross_entropy: targets is NULL");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, loss, NULL, KTUNE_F32, NULL),
		"cross_entropy: lse is NULL");
	REFUSED(ktune_cross_entropy(ctx, -1, V, xp, V, tt, -100, 0, 0, mean, loss, lse, KTUNE_F32, NULL),
		"size -1 is negative");
	REFUSED(ktune_cross_entropy(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, loss, lse, (ktune_dtype)9, NULL),
		"dtype");
	REFUSED(ktune_cross_entropy_backward(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, lse, NULL, dxp, V, KTUNE_F32,
					     NULL),
		"cross_entropy: dloss is NULL");
	REFUSED(ktune_cross_entropy_backward(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, lse, lse, dxp, 12, KTUNE_F32,
					     NULL),
		"cross_entropy backward: a row stride (12) is less than cols = 16");
	REFUSED(ktune_cross_entropy_backward(ctx, ROWS, V - 2, xp, V, tt, -100, 0, 0, mean, lse, lse, xp, V - 2,
					     KTUNE_F32, NULL),
		"cross_entropy backward: dlogits is logits with another row stride (14, not 16)");
	REFUSED(ktune_cross_entropy_fused(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, 1.0f, loss, (float *)xp + 4, V,
					  KTUNE_F32, NULL),
		"cross_entropy fused: dlogits overlaps logits without being it");
	REFUSED(ktune_cross_entropy_fused(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, NAN, loss, dxp, V, KTUNE_F32, NULL),
		"cross_entropy fused: dloss nan is not finite");
	REFUSED(ktune_cross_entropy_fused(ctx, ROWS, V, xp, V, tt, -100, 0, 0, mean, 1.0f, NULL, dxp, V, KTUNE_F32, NULL),
		"cross_entropy: loss is NULL");
	/* nothing written: the logits, the gradient buffer, the losses and lse are as uploaded */
	download(back, d_x, ROWS * V);
	assert_memory_equal(back, x, sizeof(x));
	download(back, d_dx, ROWS * V);
	assert_memory_equal(back, x, sizeof(x));
	download(back, d_loss, ROWS);
	assert_memory_equal(back, x, ROWS * 4);
	download(back, d_lse, ROWS);
	assert_memory_equal(back, x, ROWS * 4);
	CUdeviceptr all[] = { d_x, d_dx, d_t, d_loss, d_lse };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		ktune_cu.cuMemFree_v2(all[i]);
}

static int setup(void **state)
{
	struct ktune_err e;
	char err[4096];
	int pushed;
	(void)state;
	if (ktune_open("", 0, &ctx, err, sizeof(err))) { /* an empty path: no database */
		fprintf(stderr, "ktune_open: %s\n", err);
		return -1;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e)) {
		fprintf(stderr, "context: %s\n", e.msg);
		return -1;
	}
	sm_count = ctx->id.sm_count;
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
	int skip = gpu_test_available("test-rowwise-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rowwise_gpu__bad_arguments),
		cmocka_unit_test(test_rowwise_gpu__softmax_edges_with_strides),
		cmocka_unit_test(test_rowwise_gpu__rmsnorm_residual_backward_deterministic),
		cmocka_unit_test(test_rowwise_gpu__softmax_every_config),
		cmocka_unit_test(test_rowwise_gpu__rmsnorm_every_config),
		cmocka_unit_test(test_rowwise_gpu__layernorm_constant_row_backward_deterministic),
		cmocka_unit_test(test_rowwise_gpu__layernorm_every_config),
		cmocka_unit_test(test_rowwise_gpu__ring_wraps),
		cmocka_unit_test(test_rowwise_gpu__norms_without_affine),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_bad_arguments),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_api),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_edges),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_bf16_in_place),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_every_config),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_unaligned_api),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_unaligned_every_config),
		cmocka_unit_test(test_rowwise_gpu__cross_entropy_stream_every_config),
		cmocka_unit_test(test_rowwise_gpu__softmax_stream_every_config),
		cmocka_unit_test(test_rowwise_gpu__softmax_stream_api),
		cmocka_unit_test(test_rowwise_gpu__rmsnorm_stream_every_config),
		cmocka_unit_test(test_rowwise_gpu__rmsnorm_stream_api),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
