/*
 * test-elementwise-gpu.c - the elementwise kernels (add, gelu, glu,
 * dropout) on a GPU against their float64 CPU references
 * (src/ops/elementwise-ref.c).  Skipped where no GPU is present.
 *
 * Every compiled kernel of each family's space runs in every dtype,
 * alignment class and variant the C prune admits (VEC * sizeof(elem) <= 16;
 * VEC = 1 when unaligned), each on every small size (n in 1, 7, 33, 4097;
 * GLU [rows, cols] in 1x1, 3x7, 4x33, 2x520, 5x4104, in the two-tensor and
 * the split [rows, 2*cols] layouts) and, for one job in eight, on a large
 * one (n = 2^20 + 3; GLU 1031x1032) as well: every config on every size
 * would cost minutes of CPU reference for little more coverage.  The grid
 * rotates over BLOCKS_PER_SM = 0 (all the blocks needed), BLOCKS_PER_SM = 1
 * (one per SM) and a single block, so the grid-stride walks run several
 * steps.  Unaligned jobs get every pointer one element past an aligned
 * base and odd row strides.  Outputs are poisoned with 0xFF bytes (NaN in
 * every dtype) before each launch; elements just outside the output must
 * stay poisoned.
 *
 * Dropout: the mask equals the CPU reference's exactly, the output is
 * bit-identical across every config of a dtype and size, the backward pass
 * (the same kernel on dy) zeroes exactly the same elements, the keep ratio
 * is within 4 sigma of 1 - p for p in 0.1 and 0.5, and p = 0 copies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu_test.h"
#include "ops/elementwise-ref.h"
#include "runtime/compile.h"
#include "runtime/context.h"
#include "search/space.h"
#include "templates.h"

#define NBUF (3 << 20) /* elements per device buffer: the largest layout fits */
#define MAX_DEFINES 12
#define MAX_REPORTS 30

enum { ADD, GELU, GLU, DROPOUT };

struct family {
	const char *name, *source, *space, *entry;
	int nvariants;
	int variants[6][2]; /* gelu: APPROX, BACKWARD; glu: ACT, BACKWARD */
};

static const struct family families[] = {
	[ADD] = { "add", "add.cu", "add.yaml", "add_kernel", 1, { { 0, 0 } } },
	[GELU] = { "gelu", "gelu.cu", "gelu.yaml", "gelu_kernel", 4,
		   { { 0, 0 }, { 1, 0 }, { 0, 1 }, { 1, 1 } } },
	[GLU] = { "glu", "glu.cu", "glu.yaml", "glu_kernel", 6,
		  { { 0, 0 }, { 1, 0 }, { 2, 0 }, { 0, 1 }, { 1, 1 }, { 2, 1 } } },
	[DROPOUT] = { "dropout", "dropout.cu", "dropout.yaml", "dropout_kernel", 1, { { 0, 0 } } },
};

static const int64_t sizes[] = { 1, 7, 33, 4097, (1 << 20) + 3 }; /* the last one: large */
static const int64_t shapes[][2] = { { 1, 1 }, { 3, 7 }, { 4, 33 }, { 2, 520 }, { 5, 4104 }, { 1031, 1032 } };
#define NSIZES (int)(sizeof(sizes) / sizeof(sizes[0]))
#define NSHAPES (int)(sizeof(shapes) / sizeof(shapes[0]))

/* Dropout's two masks: a counter that crosses 2^32, and one that wraps at 2^64. */
static const struct {
	float p;
	uint64_t seed, offset;
} drops[2] = {
	{ 0.1f, 0x0123456789abcdefull, 0xfffffff0ull },
	{ 0.5f, 42, 0xffffffffffffff00ull },
};

static ktune_ctx *ctx;
static int sm_count;
static CUdeviceptr dx, dy, dd, o1, o2; /* inputs x (a), y (b), d (dy, dout); outputs */
static int loaded_dtype = -1;
static double *hx, *hy, *hd;            /* the inputs as the kernels see them */
static unsigned char *host_out, *host_out2;
static int reports;

/* --------------------------------------------------------------- elements */

static int esize(int dtype)
{
	return dtype == 2 ? 4 : 2;
}

/* f32 to bf16, rounded to nearest even (no NaN inputs). */
static unsigned short encode_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (unsigned short)(u >> 16);
}

/* f32 to f16, rounded to nearest even (no NaN inputs). */
static unsigned short encode_f16(float f)
{
	uint32_t u, sign, a;
	memcpy(&u, &f, 4);
	sign = (u >> 16) & 0x8000;
	a = u & 0x7fffffff;
	if (a >= 0x477ff000) /* rounds to 65536 or more */
		return (unsigned short)(sign | 0x7c00);
	if (a < 0x38800000) { /* below 2^-14: a multiple of 2^-24 */
		float v;
		memcpy(&v, &a, 4);
		return (unsigned short)(sign | (uint32_t)lrintf(v * 16777216.0f));
	}
	/* rebias the exponent (127 - 15), drop 13 bits rounding to even */
	return (unsigned short)(sign | (a - 0x38000000 + 0xfff + ((a >> 13) & 1)) >> 13);
}

static double decode(const unsigned char *p, int dtype, int64_t i)
{
	if (dtype == 2) {
		float f;
		memcpy(&f, p + 4 * i, 4);
		return f;
	}
	unsigned short h;
	memcpy(&h, p + 2 * i, 2);
	return gpu_test_half_to_double(h, dtype == 1);
}

static int poisoned(const unsigned char *p, int dtype, int64_t i)
{
	for (int b = 0; b < esize(dtype); b++)
		if (p[(size_t)i * (size_t)esize(dtype) + (size_t)b] != 0xff)
			return 0;
	return 1;
}

/* Uniform in [-4, 4), kept away from 0 so that dropout's zeros are its mask's alone. */
static uint64_t rng = 0x853c49e6748fea9bull;
static double uniform(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	double u = (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0 * 8 - 4;
	return fabs(u) < 1.0 / 64 ? 0.5 : u;
}

/* Fills the three input buffers with dtype's values, once per dtype. */
static void load_inputs(int dtype)
{
	if (loaded_dtype == dtype)
		return;
	double *h[3] = { hx, hy, hd };
	CUdeviceptr d[3] = { dx, dy, dd };
	unsigned char *bits = malloc((size_t)NBUF * 4);
	assert_non_null(bits);
	for (int b = 0; b < 3; b++) {
		for (int64_t i = 0; i < NBUF; i++) {
			float f = (float)uniform();
			if (dtype == 2) {
				memcpy(bits + 4 * i, &f, 4);
			} else {
				unsigned short e = dtype == 1 ? encode_bf16(f) : encode_f16(f);
				memcpy(bits + 2 * i, &e, 2);
			}
			h[b][i] = decode(bits, dtype, i);
		}
		assert_int_equal(ktune_cu.cuMemcpyHtoD_v2(d[b], bits, (size_t)NBUF * (size_t)esize(dtype)),
				 CUDA_SUCCESS);
	}
	free(bits);
	loaded_dtype = dtype;
}

/* ------------------------------------------------------------------- jobs */

struct job {
	int family, variant, dtype, aligned;
	long vec, unroll, threads;
	char defines[MAX_DEFINES][48];
	int ndefines;
	struct ktune_cubin cubin;
	int rc;
	struct ktune_err e;
};

struct jobs {
	const struct family *f;
	struct ktune_space space;
	long (*kernels)[KTUNE_SPACE_MAX_PARAMS];
	int nkernels, launch_param;
	struct job *v;
	int n;
};

static int collect_kernel(const long *values, void *arg)
{
	struct jobs *js = arg;
	long v[KTUNE_SPACE_MAX_PARAMS] = { 0 };
	memcpy(v, values, (size_t)js->space.nparams * sizeof(long));
	v[js->launch_param] = -1;
	for (int i = 0; i < js->nkernels; i++)
		if (!memcmp(js->kernels[i], v, sizeof(v)))
			return 0;
	js->kernels = realloc(js->kernels, (size_t)(js->nkernels + 1) * sizeof(*js->kernels));
	assert_non_null(js->kernels);
	memcpy(js->kernels[js->nkernels++], v, sizeof(v));
	return 0;
}

static long param(const struct jobs *js, int kernel, const char *name)
{
	int i = ktune__space_param_index(&js->space, name);
	assert_true(i >= 0);
	return js->kernels[kernel][i];
}

static void compile_one(int i, void *arg)
{
	struct job *j = &((struct job *)arg)[i];
	const struct ktune_template_file *src = ktune__template_file(families[j->family].source);
	const char *opts[MAX_DEFINES];
	for (int d = 0; d < j->ndefines; d++)
		opts[d] = j->defines[d];
	j->rc = ktune__compile(src->name, src->text, src->len, opts, j->ndefines, ctx->id.arch,
			       ctx->cache_dir, &j->cubin, &j->e);
}

/*
 * Every admitted (kernel, variant, dtype, alignment class) of the family,
 * grouped by variant, dtype and alignment (the order the references are
 * cached in), compiled in parallel.
 */
static void build_jobs(int family, struct jobs *js)
{
	const struct family *f = &families[family];
	const struct ktune_template_file *y = ktune__template_file(f->space);
	struct ktune_err e;
	memset(js, 0, sizeof(*js));
	js->f = f;
	assert_non_null(y);
	if (ktune__space_parse(&js->space, y->text, y->len, y->name, &e))
		fail_msg("%s", e.msg);
	js->launch_param = ktune__space_param_index(&js->space, "BLOCKS_PER_SM");
	assert_true(js->launch_param >= 0);
	ktune__space_enumerate(&js->space, collect_kernel, js);
	js->v = calloc((size_t)js->nkernels * (size_t)f->nvariants * 6, sizeof(*js->v));
	assert_non_null(js->v);
	for (int var = 0; var < f->nvariants; var++)
		for (int dtype = 0; dtype < 3; dtype++)
			for (int aligned = 1; aligned >= 0; aligned--)
				for (int k = 0; k < js->nkernels; k++) {
					long vec = param(js, k, "VEC");
					if (vec * esize(dtype) > 16 || (!aligned && vec > 1))
						continue;
					struct job *j = &js->v[js->n++];
					j->family = family;
					j->variant = var;
					j->dtype = dtype;
					j->aligned = aligned;
					j->vec = aligned ? vec : 1;
					j->unroll = param(js, k, "UNROLL");
					j->threads = param(js, k, "THREADS");
					snprintf(j->defines[j->ndefines++], 48, "-DDTYPE=%d", dtype);
					snprintf(j->defines[j->ndefines++], 48, "-DALIGNED=%d", aligned);
					for (int p = 0; p < js->space.nparams; p++)
						if (js->kernels[k][p] >= 0)
							snprintf(j->defines[j->ndefines++], 48, "-D%s=%ld",
								 js->space.params[p].name, js->kernels[k][p]);
					if (family == GELU || family == GLU) {
						snprintf(j->defines[j->ndefines++], 48, "-D%s=%d",
							 family == GELU ? "APPROX" : "ACT", f->variants[var][0]);
						snprintf(j->defines[j->ndefines++], 48, "-DBACKWARD=%d",
							 f->variants[var][1]);
					}
				}
	double t0 = ktune__now();
	ktune__parallel_for(js->n, 0, compile_one, js->v);
	printf("%s: %d kernels, %d jobs compiled (or read from the cache) in %.1f s\n", f->name,
	       js->nkernels, js->n, ktune__now() - t0);
}

static void free_jobs(struct jobs *js)
{
	for (int i = 0; i < js->n; i++)
		ktune__cubin_free(&js->v[i].cubin);
	free(js->v);
	free(js->kernels);
	ktune__space_free(&js->space);
}

static void describe(const struct job *j, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%s", families[j->family].source);
	for (int d = 0; d < j->ndefines && n < len; d++)
		n += (size_t)snprintf(buf + n, len - n, " %s", j->defines[d]);
}

static void report(const struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failures;
static void report(const struct job *j, const char *fmt, ...)
{
	char what[512];
	va_list ap;
	failures++;
	if (++reports > MAX_REPORTS)
		return;
	describe(j, what, sizeof(what));
	fprintf(stderr, "FAIL %s: ", what);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---------------------------------------------------------------- launches */

static double tolerance(int dtype)
{
	return dtype == 2 ? 1e-5 : dtype == 0 ? 1e-3 : 8e-3;
}

/* Relative to max(1, |want|); NaN never passes. */
static int close_enough(double got, double want, int dtype)
{
	return fabs(got - want) <= tolerance(dtype) * fmax(1, fabs(want));
}

/* Grid mode 0: every block needed (BLOCKS_PER_SM = 0); 1: one per SM; 2: one block. */
static unsigned grid_for(const struct job *j, int64_t items, int mode)
{
	int64_t per_block = j->threads * j->unroll, blocks = (items + per_block - 1) / per_block;
	if (mode == 1 && blocks > sm_count)
		blocks = sm_count;
	if (mode == 2 || blocks < 1)
		blocks = 1;
	return blocks > 0x7fffffff ? 0x7fffffffu : (unsigned)blocks;
}

static const char *const mode_names[3] = { "BLOCKS_PER_SM=0", "BLOCKS_PER_SM=1", "one block" };

/* Poisons o1 and o2, launches and waits. */
static void launch(const struct job *j, CUfunction fn, unsigned grid, void **args)
{
	assert_int_equal(ktune_cu.cuMemsetD8_v2(o1, 0xff, (size_t)NBUF * 4), CUDA_SUCCESS);
	assert_int_equal(ktune_cu.cuMemsetD8_v2(o2, 0xff, (size_t)NBUF * 4), CUDA_SUCCESS);
	CUresult r = ktune_cu.cuLaunchKernel(fn, grid, 1, 1, (unsigned)j->threads, 1, 1, 0, NULL, args,
					     NULL);
	if (r == CUDA_SUCCESS)
		r = ktune_cu.cuCtxSynchronize();
	if (r != CUDA_SUCCESS) {
		char d[256];
		ktune__cu_describe(r, d, sizeof(d));
		report(j, "launch: %s", d);
		/* a faulted context is lost: nothing after this can be trusted */
		fail_msg("launch failed: %s", d);
	}
}

static void download(CUdeviceptr p, unsigned char *host, int64_t elements, int dtype)
{
	assert_int_equal(ktune_cu.cuMemcpyDtoH_v2(host, p, (size_t)elements * (size_t)esize(dtype)),
			 CUDA_SUCCESS);
}

/*
 * The references of one group of jobs (family, variant, dtype, alignment),
 * by size (or shape) and case: dropout's mask, or GLU's strides.
 */
#define NCASES 3
struct refs {
	double *a[NSHAPES > NSIZES ? NSHAPES : NSIZES][NCASES];
	double *b[NSHAPES > NSIZES ? NSHAPES : NSIZES][NCASES];
};

static void refs_clear(struct refs *r)
{
	for (int s = 0; s < (int)(sizeof(r->a) / sizeof(r->a[0])); s++)
		for (int c = 0; c < NCASES; c++) {
			free(r->a[s][c]);
			free(r->b[s][c]);
			r->a[s][c] = r->b[s][c] = NULL;
		}
}

static int same_group(const struct job *a, const struct job *b)
{
	return a->variant == b->variant && a->dtype == b->dtype && a->aligned == b->aligned;
}

/* ------------------------------------------------------ add, gelu, dropout */

/* The 1D ops' reference for n elements from the inputs at element off. */
static double *ref_1d(const struct job *j, int64_t n, int64_t off, int drop)
{
	double *out = malloc((size_t)n * sizeof(double));
	assert_non_null(out);
	const int *v = families[j->family].variants[j->variant];
	if (j->family == ADD)
		ktune__ref_add(hx + off, hy + off, out, (long)n);
	else if (j->family == GELU)
		ktune__ref_gelu(hx + off, hd + off, out, (long)n, v[0], v[1]);
	else
		ktune__ref_dropout(hx + off, out, (long)n, drops[drop].p, drops[drop].seed,
				   drops[drop].offset);
	return out;
}

/*
 * Checks out (n elements at element off of host buffer h) against ref, and
 * that the elements around it are still poison.
 */
static void check_1d(const struct job *j, const unsigned char *h, const double *ref, int64_t n,
		     int64_t off, const char *what)
{
	for (int64_t i = 0; i < n; i++) {
		double got = decode(h, j->dtype, off + i);
		if (!close_enough(got, ref[i], j->dtype)) {
			report(j, "%s: n=%lld: [%lld] = %.9g, want %.9g", what, (long long)n,
			       (long long)i, got, ref[i]);
			return;
		}
	}
	if (!poisoned(h, j->dtype, off + n) || (off && !poisoned(h, j->dtype, off - 1)))
		report(j, "%s: n=%lld: wrote outside the output", what, (long long)n);
}

static void run_1d(struct jobs *js)
{
	struct refs refs = { 0 };
	double t0 = ktune__now();
	int launches = 0;
	/* dropout's outputs per (size, mask) from the group's first job, for bit identity */
	unsigned char *first[NSIZES][2] = { { NULL } };

	for (int i = 0; i < js->n; i++) {
		struct job *j = &js->v[i];
		if (i && !same_group(j, &js->v[i - 1])) {
			refs_clear(&refs);
			for (int s = 0; s < NSIZES; s++)
				for (int m = 0; m < 2; m++) {
					free(first[s][m]);
					first[s][m] = NULL;
				}
		}
		if (j->rc) {
			report(j, "compile: %s", j->e.msg);
			continue;
		}
		load_inputs(j->dtype);
		CUmodule mod;
		CUfunction fn;
		assert_int_equal(ktune_cu.cuModuleLoadData(&mod, j->cubin.data), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuModuleGetFunction(&fn, mod, families[j->family].entry),
				 CUDA_SUCCESS);
		const int64_t off = j->aligned ? 0 : 1;
		const int64_t es = esize(j->dtype);
		for (int s = 0; s < NSIZES; s++) {
			if (s == NSIZES - 1 && i % 8)
				continue; /* the large size: one job in eight */
			int64_t n = sizes[s];
			/* m: dropout's mask (i / 8: the large size sees both); the other ops'
			   references do not depend on it */
			int mode = (i + s) % 3, m = j->family == DROPOUT ? (i + i / 8 + s) % 2 : 0;
			int64_t items = j->family == DROPOUT ? (n + (j->vec > 4 ? j->vec : 4) - 1) /
								      (j->vec > 4 ? j->vec : 4)
							     : (n + j->vec - 1) / j->vec;
			unsigned grid = grid_for(j, items, mode);
			CUdeviceptr px = dx + (CUdeviceptr)(off * es), py = dy + (CUdeviceptr)(off * es);
			CUdeviceptr pd = dd + (CUdeviceptr)(off * es), p1 = o1 + (CUdeviceptr)(off * es);
			CUdeviceptr p2 = o2 + (CUdeviceptr)(off * es);
			char what[64];
			snprintf(what, sizeof(what), "%s", mode_names[mode]);
			if (!refs.a[s][m])
				refs.a[s][m] = ref_1d(j, n, off, m);

			if (j->family == ADD) {
				void *args[] = { &px, &py, &p1, &n };
				launch(j, fn, grid, args);
			} else if (j->family == GELU) {
				void *args[] = { &px, &pd, &p1, &n };
				launch(j, fn, grid, args);
			} else {
				/* forward on x into o1, then backward on dy into o2 with the same mask */
				float p = drops[m].p;
				uint64_t seed = drops[m].seed, offset = drops[m].offset;
				void *fwd[] = { &px, &p1, &n, &p, &seed, &offset };
				launch(j, fn, grid, fwd);
				download(o1, host_out, n + 2 * off + 1, j->dtype);
				void *bwd[] = { &pd, &p2, &n, &p, &seed, &offset };
				launch(j, fn, grid, bwd);
				download(o2, host_out2, n + 2 * off + 1, j->dtype);
				launches++;
			}
			launches++;
			if (j->family != DROPOUT)
				download(o1, host_out, n + 2 * off + 1, j->dtype);
			check_1d(j, host_out, refs.a[s][m], n, off, what);
			if (j->family != DROPOUT)
				continue;

			/* dropout: the exact mask, forward and backward, and bit identity (the
			   inputs are never 0, so the reference's zeros are its mask) */
			int64_t kept = 0;
			for (int64_t e = 0; e < n; e++) {
				int keep = refs.a[s][m][e] != 0;
				int fwd_kept = decode(host_out, j->dtype, off + e) != 0;
				int bwd_kept = decode(host_out2, j->dtype, off + e) != 0;
				if (fwd_kept != keep || bwd_kept != keep) {
					report(j, "%s: n=%lld p=%g: element %lld kept %d forward, %d "
						  "backward, %d by the reference", what, (long long)n,
					       drops[m].p, (long long)e, fwd_kept, bwd_kept, keep);
					break;
				}
				kept += keep;
			}
			if (n >= 4097) {
				double p = drops[m].p, want = (double)n * (1 - p);
				double sigma = sqrt((double)n * p * (1 - p));
				if (fabs((double)kept - want) > 4 * sigma)
					report(j, "n=%lld p=%g: kept %lld, want %.0f +- %.0f",
					       (long long)n, p, (long long)kept, want, 4 * sigma);
			}
			size_t bytes = (size_t)n * (size_t)es;
			if (!first[s][m]) {
				first[s][m] = malloc(bytes);
				assert_non_null(first[s][m]);
				memcpy(first[s][m], host_out + off * es, bytes);
			} else if (memcmp(first[s][m], host_out + off * es, bytes)) {
				report(j, "%s: n=%lld p=%g: not bit-identical to the group's first config",
				       what, (long long)n, drops[m].p);
			}
		}
		if (j->family == DROPOUT) {
			/* p = 0 copies, bit for bit */
			int64_t n = 4097;
			float p = 0;
			uint64_t seed = 1, offset = 0;
			CUdeviceptr px = dx + (CUdeviceptr)(off * es), p1 = o1 + (CUdeviceptr)(off * es);
			void *args[] = { &px, &p1, &n, &p, &seed, &offset };
			launch(j, fn, grid_for(j, n, i % 3), args);
			launches++;
			download(o1, host_out, n + 2 * off + 1, j->dtype);
			download(dx, host_out2, n + off, j->dtype);
			if (memcmp(host_out + off * es, host_out2 + off * es, (size_t)(n * es)))
				report(j, "p = 0 does not copy");
		}
		assert_int_equal(ktune_cu.cuModuleUnload(mod), CUDA_SUCCESS);
	}
	refs_clear(&refs);
	for (int s = 0; s < NSIZES; s++)
		for (int m = 0; m < 2; m++)
			free(first[s][m]);
	printf("%s: %d launches in %.1f s\n", js->f->name, launches, ktune__now() - t0);
}

/* -------------------------------------------------------------------- glu */

/*
 * One GLU case: layout 0 is two tensors per side (a, b, dout, out_a, out_b
 * each with its own padded stride); layout 1 the split one (a and b the
 * halves of [rows, 2*cols] h; backward, da and db the halves of dh).
 * Offsets and strides are in elements, from the buffers' bases.
 */
struct glu_case {
	int64_t rows, cols;
	int split;                         /* layout 1: b is the second half of x's rows */
	int64_t a, b, d, oa, ob;          /* offsets */
	int64_t lda, ldb, ldd, ldoa, ldob; /* strides */
};

static struct glu_case glu_layout(const struct job *j, int64_t rows, int64_t cols, int layout, int pad)
{
	struct glu_case c = { rows, cols, layout == 1 };
	int64_t off = j->aligned ? 0 : 1, bwd = families[GLU].variants[j->variant][1];
	if (layout == 1) {
		c.a = off;
		c.b = off + cols;
		c.lda = c.ldb = 2 * cols;
		c.d = off;
		c.ldd = cols;
		c.oa = off;
		c.ldoa = bwd ? 2 * cols : cols;
		c.ob = off + cols;
		c.ldob = 2 * cols;
	} else {
		/* aligned: strides rounded up to 16 bytes (8 elements), padded by 8 on every other
		   case; unaligned: odd strides */
		int64_t ld = j->aligned ? (cols + 7) / 8 * 8 + (pad ? 8 : 0) : cols + (pad ? 3 : 1);
		c.a = c.b = c.d = c.oa = c.ob = off;
		c.lda = c.ldb = c.ldd = c.ldoa = c.ldob = ld;
	}
	return c;
}

/* The layout is one the alignment class allows: split halves start on 16 bytes only if cols does. */
static int glu_layout_ok(const struct job *j, int64_t cols, int layout)
{
	return layout == 0 || !j->aligned || (cols * esize(j->dtype)) % 16 == 0;
}

static void glu_ref(const struct job *j, const struct glu_case *c, double **ra, double **rb)
{
	const int *v = families[GLU].variants[j->variant];
	size_t n = (size_t)(c->rows * c->cols);
	double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
	double *d = malloc(n * sizeof(double));
	*ra = malloc(n * sizeof(double));
	*rb = malloc(n * sizeof(double));
	assert_true(a && b && d && *ra && *rb);
	for (int64_t r = 0; r < c->rows; r++)
		for (int64_t k = 0; k < c->cols; k++) {
			size_t i = (size_t)(r * c->cols + k);
			a[i] = hx[c->a + r * c->lda + k];
			b[i] = (c->split ? hx : hy)[c->b + r * c->ldb + k];
			d[i] = hd[c->d + r * c->ldd + k];
		}
	ktune__ref_glu(a, b, d, *ra, *rb, (long)n, v[0], v[1]);
	free(a);
	free(b);
	free(d);
}

static void run_glu(struct jobs *js)
{
	struct refs refs = { 0 };
	double t0 = ktune__now();
	int launches = 0;

	for (int i = 0; i < js->n; i++) {
		struct job *j = &js->v[i];
		if (i && !same_group(j, &js->v[i - 1]))
			refs_clear(&refs);
		if (j->rc) {
			report(j, "compile: %s", j->e.msg);
			continue;
		}
		load_inputs(j->dtype);
		CUmodule mod;
		CUfunction fn;
		assert_int_equal(ktune_cu.cuModuleLoadData(&mod, j->cubin.data), CUDA_SUCCESS);
		assert_int_equal(ktune_cu.cuModuleGetFunction(&fn, mod, "glu_kernel"), CUDA_SUCCESS);
		const int bwd = families[GLU].variants[j->variant][1];
		const int64_t es = esize(j->dtype);
		for (int s = 0; s < NSHAPES; s++) {
			if (s == NSHAPES - 1 && i % 8)
				continue; /* the large shape: one job in eight */
			for (int layout = 0; layout < 2; layout++) {
				int64_t rows = shapes[s][0], cols = shapes[s][1];
				if (!glu_layout_ok(j, cols, layout))
					continue;
				struct glu_case c = glu_layout(j, rows, cols, layout, (i + s) % 2);
				int mode = (i + s + layout) % 3;
				/* the strides pick the inputs: one reference per stride case */
				int cs = layout ? 2 : (i + s) % 2;
				if (!refs.a[s][cs])
					glu_ref(j, &c, &refs.a[s][cs], &refs.b[s][cs]);
				const double *ra = refs.a[s][cs], *rb = refs.b[s][cs];
				CUdeviceptr pa = dx + (CUdeviceptr)(c.a * es);
				CUdeviceptr pb = (layout ? dx : dy) + (CUdeviceptr)(c.b * es);
				CUdeviceptr pd = bwd ? dd + (CUdeviceptr)(c.d * es) : 0;
				CUdeviceptr poa = o1 + (CUdeviceptr)(c.oa * es);
				CUdeviceptr pob = bwd ? (layout ? o1 : o2) + (CUdeviceptr)(c.ob * es) : 0;
				int64_t per_row = (cols + j->vec - 1) / j->vec;
				void *args[] = { &pa, &pb, &pd, &poa, &pob, &c.rows, &c.cols, &c.lda, &c.ldb,
						 &c.ldd, &c.ldoa, &c.ldob };
				launch(j, fn, grid_for(j, rows * per_row, mode), args);
				launches++;
				int64_t span_a = c.oa + (rows - 1) * c.ldoa + cols + 1;
				download(o1, host_out, span_a + (layout && bwd ? cols : 0), j->dtype);
				if (bwd && !layout)
					download(o2, host_out2, c.ob + (rows - 1) * c.ldob + cols + 1, j->dtype);
				const unsigned char *hb = layout ? host_out : host_out2;
				int bad = 0;
				for (int64_t r = 0; r < rows && !bad; r++)
					for (int64_t k = 0; k < cols && !bad; k++) {
						size_t e = (size_t)(r * cols + k);
						double got = decode(host_out, j->dtype, c.oa + r * c.ldoa + k);
						double gotb = bwd ? decode(hb, j->dtype, c.ob + r * c.ldob + k) : 0;
						if (!close_enough(got, ra[e], j->dtype) ||
						    (bwd && !close_enough(gotb, rb[e], j->dtype))) {
							report(j, "%s, %lldx%lld layout %d: [%lld,%lld] = %.9g, %.9g; "
								  "want %.9g, %.9g", mode_names[mode], (long long)rows,
							       (long long)cols, layout, (long long)r, (long long)k, got,
							       gotb, ra[e], bwd ? rb[e] : 0.0);
							bad = 1;
						}
						/* the padding after each row of a separate output stays poison */
						if (!layout && k == cols - 1 && c.ldoa > cols &&
						    (!poisoned(host_out, j->dtype, c.oa + r * c.ldoa + cols) ||
						     (bwd && !poisoned(host_out2, j->dtype, c.ob + r * c.ldob + cols)))) {
							report(j, "%lldx%lld: wrote into row %lld's padding",
							       (long long)rows, (long long)cols, (long long)r);
							bad = 1;
						}
					}
				if (!bad && !poisoned(host_out, j->dtype, span_a - 1 + (layout && bwd ? cols : 0)))
					report(j, "%lldx%lld layout %d: wrote past the output", (long long)rows,
					       (long long)cols, layout);
			}
		}
		assert_int_equal(ktune_cu.cuModuleUnload(mod), CUDA_SUCCESS);
	}
	refs_clear(&refs);
	printf("glu: %d launches in %.1f s\n", launches, ktune__now() - t0);
}

/* ------------------------------------------------------------------ tests */

static void run_family(int family)
{
	struct jobs js;
	failures = reports = 0;
	build_jobs(family, &js);
	assert_true(js.n >= 60);
	if (family == GLU)
		run_glu(&js);
	else
		run_1d(&js);
	free_jobs(&js);
	if (failures)
		fail_msg("%s: %d failures", families[family].name, failures);
}

static void test_ew_gpu__add_every_config(void **state)
{
	(void)state;
	run_family(ADD);
}

static void test_ew_gpu__gelu_every_config(void **state)
{
	(void)state;
	run_family(GELU);
}

static void test_ew_gpu__glu_every_config(void **state)
{
	(void)state;
	run_family(GLU);
}

static void test_ew_gpu__dropout_every_config(void **state)
{
	(void)state;
	run_family(DROPOUT);
}

static int setup(void **state)
{
	struct ktune_err e;
	char err[4096];
	int pushed;
	(void)state;
	/* an empty path: no database */
	if (ktune_open("", 0, &ctx, err, sizeof(err))) {
		fprintf(stderr, "ktune_open: %s\n", err);
		return -1;
	}
	if (ktune__ctx_enter(ctx, &pushed, &e)) {
		fprintf(stderr, "context: %s\n", e.msg);
		return -1;
	}
	if (ktune_cu.cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
					  ctx->dev) != CUDA_SUCCESS)
		return -1;
	CUdeviceptr *bufs[5] = { &dx, &dy, &dd, &o1, &o2 };
	for (int b = 0; b < 5; b++)
		if (ktune_cu.cuMemAlloc_v2(bufs[b], (size_t)NBUF * 4) != CUDA_SUCCESS)
			return -1;
	hx = malloc((size_t)NBUF * sizeof(double));
	hy = malloc((size_t)NBUF * sizeof(double));
	hd = malloc((size_t)NBUF * sizeof(double));
	host_out = malloc((size_t)NBUF * 4);
	host_out2 = malloc((size_t)NBUF * 4);
	return hx && hy && hd && host_out && host_out2 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	CUdeviceptr bufs[5] = { dx, dy, dd, o1, o2 };
	for (int b = 0; b < 5; b++)
		if (bufs[b])
			ktune_cu.cuMemFree_v2(bufs[b]);
	free(hx);
	free(hy);
	free(hd);
	free(host_out);
	free(host_out2);
	ktune_close(ctx);
	return 0;
}

int main(void)
{
	int skip = gpu_test_available("test-elementwise-gpu");
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ew_gpu__add_every_config),
		cmocka_unit_test(test_ew_gpu__gelu_every_config),
		cmocka_unit_test(test_ew_gpu__glu_every_config),
		cmocka_unit_test(test_ew_gpu__dropout_every_config),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
