/*
 * test-attention-sim.cc - the flash attention kernels run on the host
 * (cta-sim.h: each CUDA thread a fiber, mma.sync, ldmatrix, shuffles and
 * cp.async done as the PTX ISA defines them) against the float64 reference
 * (src/ops/attention-ref.c), with no GPU.  What it checks is the kernels'
 * logic: fragment layouts and ldmatrix addressing, the swizzled and padded
 * tiles, masking at ragged edges and on the causal diagonal, the online
 * softmax's rescaling and its -inf rows, GQA and strided tensors, the
 * cp.async group accounting (copies landing at once, or only when awaited
 * on NaN-filled shared memory), and that nothing is written outside O and
 * lse.  Configs: a spread over the space's axes, each compiled into a
 * namespace of its own (attention-sim-fwd.inc).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include <cmocka.h>
}

#include "cta-sim.h"
#include "wgmma-sim.h"

extern "C" {
#include "ops/attention-ref.h"
}

#define ATTENTION_HOST 1
#define SIM_PASTE2(a, b) a##b
#define SIM_PASTE(a, b) SIM_PASTE2(a, b)
#define SIM_STR2(x) #x
#define SIM_STR(x) SIM_STR2(x)

/*
 * Under AddressSanitizer (the CI's Debug sanitizer build, ten or more times
 * slower) a subset: the first two configs of each pass on their first three
 * cases, enough for memory and undefined-behaviour errors; the normal build
 * runs everything.
 */
static const bool subset = SIM_ASAN;

/* The largest |got - want| / max(1, |want|) seen, by pass and element type: how close the tolerances are. */
static double worst[2][2];

static void note(int pass, bool bf16, double got, double want)
{
	double e = fabs(got - want) / fmax(1, fabs(want));
	if (e > worst[pass][bf16])
		worst[pass][bf16] = e;
}

struct fwd_args {
	const unsigned short *q, *k, *v;
	unsigned short *o;
	float *lse;
	int batch, sq, sk, hq, hkv;
	long long st[4][3]; /* q, k, v, o: batch, sequence, head strides */
	float scale_log2;
	sim::copy_mode mode;
	uint64_t seed;
};

struct fwd_config {
	const char *name;
	bool bf16;
	int d;
	bool causal;
	void (*run)(const struct fwd_args &a);
};

struct bwd_args {
	const unsigned short *q, *k, *v, *o, *dout;
	const float *lse;
	unsigned short *dq, *dk, *dv;
	float *ws;
	int batch, sq, sk, hq, hkv, splits;
	long long st[8][3]; /* q, k, v, o, dout, dq, dk, dv: batch, sequence, head strides */
	float scale_log2;
	sim::copy_mode mode;
	uint64_t seed;
};

struct bwd_config {
	const char *name;
	bool bf16;
	int d;
	bool causal, deterministic;
	void (*run)(const struct bwd_args &a);
	size_t (*workspace_floats)(int batch, int hq, int sq, int sk, int splits);
};

/* ------------------------------------------------------------ the configs */

#define SIM_NS c0
#define DTYPE_BF16 0
#define HEAD_DIM 64
#define CAUSAL 0
#define BLOCK_M 64
#define BLOCK_N 64
#define WARPS 4
#define STAGES 2
#define Q_REGS 1
#define SWIZZLE 1
#include "attention-sim-fwd.inc"

#define SIM_NS c1
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define BLOCK_M 128
#define BLOCK_N 32
#define WARPS 8
#define STAGES 3
#define Q_REGS 0
#define SWIZZLE 0
#include "attention-sim-fwd.inc"

#define SIM_NS c2
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 1
#define BLOCK_M 128
#define BLOCK_N 64
#define WARPS 4
#define STAGES 2
#define Q_REGS 0
#define SWIZZLE 1
#include "attention-sim-fwd.inc"

#define SIM_NS c3
#define DTYPE_BF16 1
#define HEAD_DIM 128
#define CAUSAL 0
#define BLOCK_M 32
#define BLOCK_N 128
#define WARPS 2
#define STAGES 3
#define Q_REGS 1
#define SWIZZLE 0
#include "attention-sim-fwd.inc"

#define SIM_NS c4
#define DTYPE_BF16 0
#define HEAD_DIM 256
#define CAUSAL 1
#define BLOCK_M 64
#define BLOCK_N 32
#define WARPS 4
#define STAGES 2
#define Q_REGS 0
#define SWIZZLE 1
#include "attention-sim-fwd.inc"

#define SIM_NS c5
#define DTYPE_BF16 1
#define HEAD_DIM 128
#define CAUSAL 1
#define BLOCK_M 64
#define BLOCK_N 32
#define WARPS 2
#define STAGES 3
#define Q_REGS 1
#define SWIZZLE 1
#include "attention-sim-fwd.inc"

#define SIM_NS c6
#define DTYPE_BF16 1
#define HEAD_DIM 256
#define CAUSAL 0
#define BLOCK_M 32
#define BLOCK_N 64
#define WARPS 2
#define STAGES 2
#define Q_REGS 0
#define SWIZZLE 0
#include "attention-sim-fwd.inc"

#define SIM_NS c7
#define DTYPE_BF16 0
#define HEAD_DIM 64
#define CAUSAL 1
#define BLOCK_M 128
#define BLOCK_N 128
#define WARPS 8
#define STAGES 2
#define Q_REGS 1
#define SWIZZLE 1
#include "attention-sim-fwd.inc"

#define SIM_NS b0
#define DTYPE_BF16 0
#define HEAD_DIM 64
#define CAUSAL 0
#define DETERMINISTIC 0
#define BLOCK_M 32
#define BLOCK_N 32
#define STAGES 2
#define SWIZZLE 0
#include "attention-sim-bwd.inc"

#define SIM_NS b1
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define DETERMINISTIC 1
#define BLOCK_M 64
#define BLOCK_N 64
#define STAGES 3
#define SWIZZLE 1
#include "attention-sim-bwd.inc"

#define SIM_NS b2
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 1
#define DETERMINISTIC 0
#define BLOCK_M 32
#define BLOCK_N 64
#define STAGES 2
#define SWIZZLE 1
#include "attention-sim-bwd.inc"

#define SIM_NS b3
#define DTYPE_BF16 1
#define HEAD_DIM 128
#define CAUSAL 0
#define DETERMINISTIC 1
#define BLOCK_M 64
#define BLOCK_N 128
#define STAGES 2
#define SWIZZLE 0
#include "attention-sim-bwd.inc"

#define SIM_NS b4
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define DETERMINISTIC 1
#define BLOCK_M 32
#define BLOCK_N 128
#define STAGES 2
#define SWIZZLE 0
#include "attention-sim-bwd.inc"

/* The wgmma family (attention_wgmma.cu, sm_90a), on wgmma-sim.h: a spread over consumers, tiles, stages and overlap. */
#define SIM_NS w0
#define DTYPE_BF16 0
#define HEAD_DIM 64
#define CAUSAL 0
#define BLOCK_N 64
#define STAGES 2
#define CONSUMERS 1
#define OVERLAP 1
#include "attention-sim-wgmma.inc"

#define SIM_NS w1
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define BLOCK_N 80
#define STAGES 3
#define CONSUMERS 3
#define OVERLAP 0
#include "attention-sim-wgmma.inc"

#define SIM_NS w2
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 1
#define BLOCK_N 128
#define STAGES 2
#define CONSUMERS 2
#define OVERLAP 1
#include "attention-sim-wgmma.inc"

#define SIM_NS w3
#define DTYPE_BF16 1
#define HEAD_DIM 128
#define CAUSAL 0
#define BLOCK_N 176
#define STAGES 2
#define CONSUMERS 2
#define OVERLAP 1
#include "attention-sim-wgmma.inc"

#define SIM_NS w4
#define DTYPE_BF16 1
#define HEAD_DIM 256
#define CAUSAL 1
#define BLOCK_N 64
#define STAGES 2
#define CONSUMERS 1
#define OVERLAP 1
#include "attention-sim-wgmma.inc"

#define SIM_NS w5
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 1
#define BLOCK_N 80
#define STAGES 3
#define CONSUMERS 2
#define OVERLAP 0
#include "attention-sim-wgmma.inc"

#define SIM_NS w6
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define BLOCK_N 64
#define STAGES 2
#define CONSUMERS 3
#define OVERLAP 1
#include "attention-sim-wgmma.inc"


/*
 * The wgmma backward family (attention_wgmma_bwd.cu, sm_90a), on wgmma-sim.h: both
 * head dims and element types, BLOCK_M, consumers, stages, staging, overlap,
 * causal, atomic and deterministic.
 */
#define SIM_NS v0
#define DTYPE_BF16 0
#define HEAD_DIM 64
#define CAUSAL 0
#define DETERMINISTIC 0
#define BLOCK_M 64
#define CONSUMERS 1
#define STAGES 2
#define STAGING 0
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v1
#define DTYPE_BF16 1
#define HEAD_DIM 128
#define CAUSAL 1
#define DETERMINISTIC 0
#define BLOCK_M 64
#define CONSUMERS 2
#define STAGES 2
#define STAGING 0
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v2
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 0
#define DETERMINISTIC 1
#define BLOCK_M 128
#define CONSUMERS 2
#define STAGES 2
#define STAGING 0
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v3
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define DETERMINISTIC 1
#define BLOCK_M 128
#define CONSUMERS 1
#define STAGES 2
#define STAGING 0
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v4
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 0
#define DETERMINISTIC 0
#define BLOCK_M 64
#define CONSUMERS 2
#define STAGES 3
#define STAGING 0
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v5
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 1
#define DETERMINISTIC 1
#define BLOCK_M 64
#define CONSUMERS 1
#define STAGES 2
#define STAGING 0
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

/*
 * STAGING = 1: lse2 and delta staged with each tile, dQ by bulk reduce (one
 * and two pieces a consumer), with and without OVERLAP
 */
#define SIM_NS v6
#define DTYPE_BF16 1
#define HEAD_DIM 128
#define CAUSAL 1
#define DETERMINISTIC 0
#define BLOCK_M 64
#define CONSUMERS 2
#define STAGES 2
#define STAGING 1
#define OVERLAP 1
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v7
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 0
#define DETERMINISTIC 1
#define BLOCK_M 64
#define CONSUMERS 2
#define STAGES 3
#define STAGING 1
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v8
#define DTYPE_BF16 1
#define HEAD_DIM 64
#define CAUSAL 1
#define DETERMINISTIC 1
#define BLOCK_M 128
#define CONSUMERS 1
#define STAGES 2
#define STAGING 1
#define OVERLAP 1
#include "attention-sim-wgmma-bwd.inc"

#define SIM_NS v9
#define DTYPE_BF16 0
#define HEAD_DIM 128
#define CAUSAL 1
#define DETERMINISTIC 0
#define BLOCK_M 64
#define CONSUMERS 1
#define STAGES 2
#define STAGING 1
#define OVERLAP 0
#include "attention-sim-wgmma-bwd.inc"

static const struct bwd_config *const wgmma_bwd_configs[] = { &v0::config, &v1::config, &v2::config, &v3::config,
							       &v4::config, &v5::config, &v6::config, &v7::config,
							       &v8::config, &v9::config };

static const struct bwd_config *const bwd_configs[] = { &b0::config, &b1::config, &b2::config, &b3::config,
							 &b4::config };

static const struct fwd_config *const fwd_configs[] = { &c0::config, &c1::config, &c2::config, &c3::config,
							 &c4::config, &c5::config, &c6::config, &c7::config };
static const struct fwd_config *const wgmma_configs[] = { &w0::config, &w1::config, &w2::config, &w3::config,
							   &w4::config, &w5::config, &w6::config };

/* ------------------------------------------------------------ the cases */

struct fwd_case {
	int batch, sq, sk, hq, hkv;
	bool bhsd;  /* [B, H, S, D] with rows padded by 8 elements, instead of packed [B, S, H, D] */
	double scale; /* 0: 1 / sqrt(D) */
};

static const struct fwd_case fwd_cases[] = {
	{ 1, 1, 17, 2, 1, false, 0 },     /* one query row, a ragged key tile, GQA 2 */
	{ 1, 17, 1, 1, 1, false, 0 },     /* one key; causal: 16 rows see nothing */
	{ 2, 33, 127, 4, 4, true, 0.3 },  /* strided, two batches, another scale */
	{ 1, 127, 40, 8, 1, false, 0 },   /* GQA 8, sq > sk: causal rows 0..86 see nothing */
	{ 1, 70, 200, 2, 2, true, 0 },    /* sk > sq: causal rows see 131 keys and more */
	{ 1, 159, 96, 2, 1, false, 0 },   /* sq - sk = 63: the causal edge falls on the last row of a block */
	{ 1, 200, 700, 1, 1, false, 0 },  /* many K/V tiles: the rings go round several times */
};

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A uniform value in [lo, hi) rounded to the element type: its bits in *h, the value returned. */
static double rounded(uint64_t *s, double lo, double hi, bool bf16, unsigned short *h)
{
	double u = (double)(next(s) >> 11) / 9007199254740992.0;
	*h = sim::from_float((float)(lo + (hi - lo) * u), bf16);
	return sim::to_float(*h, bf16);
}

/* A tensor [B, S, H, D] and its float64 copy, in the case's layout; gaps hold a sentinel. */
struct tensor {
	std::vector<unsigned short> h;
	std::vector<double> d;
	long long st[3];
	size_t elems;
};

static const unsigned short SENTINEL = 0x7bcd; /* a finite value no kernel computes here */

static void make(struct tensor *t, const struct fwd_case *c, int s, int heads, int dim, uint64_t *rng, double lo,
		 double hi, bool bf16, bool input)
{
	long long row = c->bhsd ? dim + 8 : dim;
	if (c->bhsd) {
		t->st[2] = (long long)s * row;
		t->st[1] = row;
		t->st[0] = (long long)heads * s * row;
	} else {
		t->st[2] = dim;
		t->st[1] = (long long)heads * dim;
		t->st[0] = (long long)s * heads * dim;
	}
	t->elems = (size_t)(t->st[0] * c->batch);
	t->h.assign(t->elems, SENTINEL);
	t->d.assign(t->elems, 0);
	if (!input)
		return;
	for (int b = 0; b < c->batch; b++)
		for (int i = 0; i < s; i++)
			for (int h = 0; h < heads; h++)
				for (int x = 0; x < dim; x++) {
					size_t at = (size_t)(b * t->st[0] + i * t->st[1] + h * t->st[2] + x);
					t->d[at] = rounded(rng, lo, hi, bf16, &t->h[at]);
				}
}

/* Runs one config on one case in one copy mode; returns the number of wrong values (and prints the first). */
static int run_case(const struct fwd_config *cfg, const struct fwd_case *c, sim::copy_mode mode, uint64_t seed)
{
	const int d = cfg->d;
	uint64_t rng = seed * 7919 + 1;
	struct tensor q, k, v, o;
	make(&q, c, c->sq, c->hq, d, &rng, -2, 2, cfg->bf16, true);
	make(&k, c, c->sk, c->hkv, d, &rng, -2, 2, cfg->bf16, true);
	make(&v, c, c->sk, c->hkv, d, &rng, -1, 1, cfg->bf16, true);
	make(&o, c, c->sq, c->hq, d, &rng, 0, 0, cfg->bf16, false);
	const size_t nlse = (size_t)c->batch * c->hq * c->sq, guard = 16;
	std::vector<float> lse(nlse + 2 * guard, 12345.0f);
	std::vector<double> lse_ref(nlse);

	const double scale = c->scale > 0 ? c->scale : 1 / sqrt((double)d);
	struct ktune_attn_shape s = { c->batch, c->sq, c->sk, c->hq, c->hkv, d, cfg->causal, scale };
	struct ktune_attn_in qi = { q.d.data(), q.st[0], q.st[1], q.st[2] }, ki = { k.d.data(), k.st[0], k.st[1], k.st[2] };
	struct ktune_attn_in vi = { v.d.data(), v.st[0], v.st[1], v.st[2] };
	struct ktune_attn_out oo = { o.d.data(), o.st[0], o.st[1], o.st[2] };
	ktune__ref_attention(&s, qi, ki, vi, oo, lse_ref.data());

	sim::untrack_all();
	sim::track(q.h.data(), q.h.size() * 2);
	sim::track(k.h.data(), k.h.size() * 2);
	sim::track(v.h.data(), v.h.size() * 2);
	sim::track(o.h.data(), o.h.size() * 2);
	struct fwd_args a = { q.h.data(), k.h.data(), v.h.data(), o.h.data(), lse.data() + guard, c->batch, c->sq,
			      c->sk, c->hq, c->hkv, {}, (float)(scale * 1.4426950408889634), mode, seed };
	for (int x = 0; x < 3; x++) {
		a.st[0][x] = q.st[x];
		a.st[1][x] = k.st[x];
		a.st[2][x] = v.st[x];
		a.st[3][x] = o.st[x];
	}
	int faults = sim::failures;
	cfg->run(a);

	const double tol = cfg->bf16 ? 1.2e-2 : 3e-3;
	int bad = sim::failures - faults;
	char what[200];
	snprintf(what, sizeof(what), "%s %s d%d%s, case b%d sq%d sk%d hq%d hkv%d%s, %s copies", cfg->name,
		 cfg->bf16 ? "bf16" : "f16", d, cfg->causal ? " causal" : "", c->batch, c->sq, c->sk, c->hq, c->hkv,
		 c->bhsd ? " bhsd" : "", mode == sim::COPY_LAZY ? "lazy" : "eager");
	std::vector<bool> inside(o.elems, false);
	for (int b = 0; b < c->batch; b++)
		for (int i = 0; i < c->sq; i++)
			for (int h = 0; h < c->hq; h++) {
				double want_lse = lse_ref[(size_t)((b * c->hq + h) * c->sq + i)];
				float got_lse = lse[guard + (size_t)((b * c->hq + h) * c->sq + i)];
				bool lse_ok = std::isinf(want_lse) ? std::isinf(got_lse) && got_lse < 0
								   : fabs(got_lse - want_lse) <= 1e-4 * fmax(1, fabs(want_lse));
				if (!lse_ok && bad++ < 5)
					fprintf(stderr, "FAIL %s: lse[b %d, h %d, row %d] = %.9g, want %.9g\n", what, b, h, i,
						got_lse, want_lse);
				for (int x = 0; x < d; x++) {
					size_t at = (size_t)(b * o.st[0] + i * o.st[1] + h * o.st[2] + x);
					inside[at] = true;
					double want = o.d[at], got = sim::to_float(o.h[at], cfg->bf16);
					if (!std::isinf(want_lse))
						note(0, cfg->bf16, got, want);
					bool ok = std::isinf(want_lse) ? got == 0 : fabs(got - want) <= tol * fmax(1, fabs(want));
					if (!ok && bad++ < 5)
						fprintf(stderr, "FAIL %s: o[b %d, row %d, h %d, %d] = %.6g, want %.6g\n", what, b,
							i, h, x, got, want);
				}
			}
	for (size_t i = 0; i < o.elems; i++)
		if (!inside[i] && o.h[i] != SENTINEL && bad++ < 5)
			fprintf(stderr, "FAIL %s: o's gap at %zu written\n", what, i);
	for (size_t i = 0; i < guard; i++)
		if ((lse[i] != 12345.0f || lse[guard + nlse + i] != 12345.0f) && bad++ < 5)
			fprintf(stderr, "FAIL %s: lse written outside [B, Hq, Sq]\n", what);
	return bad;
}

/* ------------------------------------------------------------ the backward */

static const struct fwd_case bwd_cases[] = {
	{ 1, 1, 17, 2, 1, false, 0 },    /* one query row, GQA 2: dK and dV sum two heads */
	{ 1, 17, 1, 1, 1, false, 0 },    /* one key; causal: 16 rows with no key give nothing */
	{ 2, 33, 70, 4, 2, true, 0.3 },  /* strided, two batches, GQA 2, another scale */
	{ 1, 70, 33, 4, 1, false, 0 },   /* GQA 4, sq > sk */
	{ 1, 159, 96, 2, 1, false, 0 },  /* sq - sk = 63: the causal edge falls on the last row of a query block */
};

/* A host tensor's values, rounded to the element type as the kernel reads it. */
static void round_to(struct tensor *t, bool bf16)
{
	for (size_t i = 0; i < t->elems; i++) {
		t->h[i] = sim::from_float((float)t->d[i], bf16);
		t->d[i] = sim::to_float(t->h[i], bf16);
	}
}

/* Compares a gradient's rows with the reference's; gaps must keep the sentinel.  Returns the number wrong. */
static int compare(const char *what, const char *name, const struct tensor *got, const std::vector<double> &want,
		   const struct fwd_case *c, int s, int heads, int d, bool bf16, double tol)
{
	int bad = 0;
	std::vector<bool> inside(got->elems, false);
	for (int b = 0; b < c->batch; b++)
		for (int i = 0; i < s; i++)
			for (int h = 0; h < heads; h++)
				for (int x = 0; x < d; x++) {
					size_t at = (size_t)(b * got->st[0] + i * got->st[1] + h * got->st[2] + x);
					inside[at] = true;
					double g = sim::to_float(got->h[at], bf16), w = want[at];
					note(1, bf16, g, w);
					if (!(fabs(g - w) <= tol * fmax(1, fabs(w))) && bad++ < 4)
						fprintf(stderr, "FAIL %s: %s[b %d, row %d, h %d, %d] = %.6g, want %.6g\n", what,
							name, b, i, h, x, g, w);
				}
	for (size_t i = 0; i < got->elems; i++)
		if (!inside[i] && got->h[i] != SENTINEL && bad++ < 4)
			fprintf(stderr, "FAIL %s: %s's gap at %zu written\n", what, name, i);
	return bad;
}

/*
 * One backward config on one case: the forward's O and lse from the float64
 * reference, rounded as the forward would store them; the gradients against
 * the reference that takes the same O and lse.  The workspace starts as NaN.
 * Returns the number of wrong values; *dq_bits etc. get the outputs' bits.
 */
static int run_bwd_case(const struct bwd_config *cfg, const struct fwd_case *c, sim::copy_mode mode, uint64_t data,
			uint64_t seed, int splits, std::vector<unsigned short> *bits)
{
	const int d = cfg->d;
	uint64_t rng = data * 104729 + 3;
	struct tensor q, k, v, o, dout, dq, dk, dv;
	make(&q, c, c->sq, c->hq, d, &rng, -2, 2, cfg->bf16, true);
	make(&k, c, c->sk, c->hkv, d, &rng, -2, 2, cfg->bf16, true);
	make(&v, c, c->sk, c->hkv, d, &rng, -1, 1, cfg->bf16, true);
	make(&dout, c, c->sq, c->hq, d, &rng, -1, 1, cfg->bf16, true);
	make(&o, c, c->sq, c->hq, d, &rng, 0, 0, cfg->bf16, false);
	make(&dq, c, c->sq, c->hq, d, &rng, 0, 0, cfg->bf16, false);
	make(&dk, c, c->sk, c->hkv, d, &rng, 0, 0, cfg->bf16, false);
	make(&dv, c, c->sk, c->hkv, d, &rng, 0, 0, cfg->bf16, false);
	const size_t nlse = (size_t)c->batch * c->hq * c->sq;
	std::vector<double> lse_d(nlse), delta(nlse);
	std::vector<float> lse(nlse);

	const double scale = c->scale > 0 ? c->scale : 1 / sqrt((double)d);
	struct ktune_attn_shape s = { c->batch, c->sq, c->sk, c->hq, c->hkv, d, cfg->causal, scale };
	auto in = [](const struct tensor &t) { return (struct ktune_attn_in){ t.d.data(), t.st[0], t.st[1], t.st[2] }; };
	auto out = [](struct tensor &t) { return (struct ktune_attn_out){ t.d.data(), t.st[0], t.st[1], t.st[2] }; };
	ktune__ref_attention(&s, in(q), in(k), in(v), out(o), lse_d.data());
	round_to(&o, cfg->bf16);
	for (size_t i = 0; i < nlse; i++)
		lse_d[i] = lse[i] = (float)lse_d[i];
	ktune__ref_attention_delta(&s, in(o), in(dout), delta.data());
	std::vector<double> want_dq(dq.elems, 0), want_dk(dk.elems, 0), want_dv(dv.elems, 0);
	struct ktune_attn_out wq = { want_dq.data(), dq.st[0], dq.st[1], dq.st[2] };
	struct ktune_attn_out wk = { want_dk.data(), dk.st[0], dk.st[1], dk.st[2] };
	struct ktune_attn_out wv = { want_dv.data(), dv.st[0], dv.st[1], dv.st[2] };
	for (int b = 0; b < c->batch; b++) {
		for (int h = 0; h < c->hq; h++)
			for (int i = 0; i < c->sq; i++)
				ktune__ref_attention_dq_row(&s, in(q), in(k), in(v), in(dout), lse_d.data(),
							    (int64_t)c->hq * c->sq, c->sq, delta.data(), wq, b, h, i);
		for (int h = 0; h < c->hkv; h++)
			for (int j = 0; j < c->sk; j++)
				ktune__ref_attention_dkv_row(&s, in(q), in(k), in(v), in(dout), lse_d.data(),
							     (int64_t)c->hq * c->sq, c->sq, delta.data(), wk, wv, b, h, j);
	}

	std::vector<float> ws(cfg->workspace_floats(c->batch, c->hq, c->sq, c->sk, splits), NAN);
	sim::untrack_all();
	for (struct tensor *t : { &q, &k, &v, &o, &dout, &dq, &dk, &dv })
		sim::track(t->h.data(), t->h.size() * 2);
	sim::track(ws.data(), ws.size() * 4);
	struct bwd_args a = { q.h.data(), k.h.data(), v.h.data(), o.h.data(), dout.h.data(), lse.data(), dq.h.data(),
			      dk.h.data(), dv.h.data(), ws.data(), c->batch, c->sq, c->sk, c->hq, c->hkv, splits, {},
			      (float)(scale * 1.4426950408889634), mode, seed };
	const struct tensor *all[] = { &q, &k, &v, &o, &dout, &dq, &dk, &dv };
	for (int t = 0; t < 8; t++)
		for (int x = 0; x < 3; x++)
			a.st[t][x] = all[t]->st[x];
	int faults = sim::failures;
	cfg->run(a);

	char what[200];
	snprintf(what, sizeof(what), "%s %s d%d%s%s, case b%d sq%d sk%d hq%d hkv%d%s, %s copies, splits %d", cfg->name,
		 cfg->bf16 ? "bf16" : "f16", d, cfg->causal ? " causal" : "", cfg->deterministic ? " det" : "",
		 c->batch, c->sq, c->sk, c->hq, c->hkv, c->bhsd ? " bhsd" : "", mode == sim::COPY_LAZY ? "lazy" : "eager",
		 splits);
	const double tol = cfg->bf16 ? 3e-2 : 6e-3;
	int bad = sim::failures - faults;
	bad += compare(what, "dq", &dq, want_dq, c, c->sq, c->hq, d, cfg->bf16, tol);
	bad += compare(what, "dk", &dk, want_dk, c, c->sk, c->hkv, d, cfg->bf16, tol);
	bad += compare(what, "dv", &dv, want_dv, c, c->sk, c->hkv, d, cfg->bf16, tol);
	if (bits) {
		bits->clear();
		for (const struct tensor *t : { &dq, &dk, &dv })
			bits->insert(bits->end(), t->h.begin(), t->h.end());
	}
	return bad;
}

/*
 * The wgmma backward's extra case: more key blocks (5 of 64 keys, 3 of 128)
 * than the deterministic pass's 3 slices, so a block of the grid walks
 * several, its K/V barriers and query ring going round across them.
 */
static const struct fwd_case wgmma_bwd_cases[] = {
	{ 1, 40, 300, 2, 1, false, 0 },
};

/*
 * Every config of a backward family on every case, copies landing at once
 * and held back; a deterministic config again in another interleaving of
 * the threads, which must give the same bits.  Returns the wrong values.
 */
static int backward_cases(const struct bwd_config *const *cfgs, size_t ncfg, const struct fwd_case *cases,
			  size_t ncase, const char *what)
{
	int bad = 0, runs = 0, differ = 0;
	for (size_t i = 0; i < ncfg; i++)
		for (size_t c = 0; c < ncase; c++)
			for (int mode = 0; mode < 2; mode++) {
				const struct bwd_config *cfg = cfgs[i];
				if (subset && (i >= 2 || c >= 3))
					continue;
				std::vector<unsigned short> first, again;
				bad += run_bwd_case(cfg, &cases[c], mode ? sim::COPY_LAZY : sim::COPY_EAGER, c + 1,
						    (uint64_t)(runs + 1), 3, &first);
				runs++;
				if (!cfg->deterministic || mode)
					continue;
				/* the same inputs in another interleaving of the threads: the same bits */
				bad += run_bwd_case(cfg, &cases[c], sim::COPY_EAGER, c + 1, (uint64_t)(runs + 1000), 3, &again);
				differ += first != again;
			}
	printf("%d simulated %s runs, %d wrong values, %d deterministic runs not bit-identical; "
	       "worst error %.3g (f16), %.3g (bf16)\n", runs, what, bad, differ, worst[1][0], worst[1][1]);
	return bad + differ;
}

static void test_attention_sim__backward_every_case(void **state)
{
	(void)state;
	assert_int_equal(backward_cases(bwd_configs, sizeof(bwd_configs) / sizeof(bwd_configs[0]), bwd_cases,
					sizeof(bwd_cases) / sizeof(bwd_cases[0]), "backward"), 0);
}

/*
 * The wgmma backward (attention_wgmma_bwd.cu) on the backward's cases and a
 * long one: its producer's K/V and query rings, the descriptors of its five
 * products (dS^T through shared memory, MN-major both sides, for dQ), the
 * consumers' barriers around dS^T, masking, GQA sums, the atomic and the
 * deterministic dQ.
 */
static void test_attention_sim__wgmma_backward_every_case(void **state)
{
	(void)state;
	const size_t n = sizeof(wgmma_bwd_configs) / sizeof(wgmma_bwd_configs[0]);
	sim::slow_warpgroups = true; /* a consumer far behind the other: the barriers around dS^T must hold */
	int bad = backward_cases(wgmma_bwd_configs, n, bwd_cases, sizeof(bwd_cases) / sizeof(bwd_cases[0]),
				 "wgmma backward");
	if (!subset)
		bad += backward_cases(wgmma_bwd_configs, n, wgmma_bwd_cases, 1, "wgmma backward (long)");
	sim::slow_warpgroups = false;
	assert_int_equal(bad, 0);
}

static void test_attention_sim__forward_every_case(void **state)
{
	(void)state;
	int bad = 0, runs = 0;
	for (const struct fwd_config *cfg : fwd_configs)
		for (size_t c = 0; c < sizeof(fwd_cases) / sizeof(fwd_cases[0]); c++) {
			/* head dim 256 on the two smallest cases and the causal edge only: the host runs it slowly */
			if (cfg->d == 256 && c >= 2 && c != 5)
				continue;
			if (c == 6) /* the long case is for the wgmma family's rings */
				continue;
			if (subset && ((cfg != fwd_configs[0] && cfg != fwd_configs[1]) || c >= 3))
				continue;
			for (int mode = 0; mode < 2; mode++) {
				bad += run_case(cfg, &fwd_cases[c], mode ? sim::COPY_LAZY : sim::COPY_EAGER,
						(uint64_t)(runs + 1));
				runs++;
			}
		}
	printf("%d simulated runs, %d wrong values; worst error of O %.3g (f16), %.3g (bf16)\n", runs, bad, worst[0][0],
	       worst[0][1]);
	assert_int_equal(bad, 0);
}

/*
 * The wgmma family on every case (head dim 256 on the smallest three and the
 * causal edge), copies landing at once and held back, in half the blocks
 * one warpgroup run slowly: its producer and
 * consumer warpgroups, mbarrier phases through several rounds of the ring,
 * the descriptors' swizzled layouts, S's accumulators as P V's A fragment,
 * the overlapped loop, causal tiles a warpgroup skips, and the epilogue.
 */
static void test_attention_sim__wgmma_forward_every_case(void **state)
{
	(void)state;
	int bad = 0, runs = 0;
	sim::slow_warpgroups = true; /* a warpgroup far behind the others: the ring's barriers must hold */
	for (const struct fwd_config *cfg : wgmma_configs)
		for (size_t c = 0; c < sizeof(fwd_cases) / sizeof(fwd_cases[0]); c++) {
			if (cfg->d == 256 && c >= 2 && c != 5)
				continue;
			if (subset && ((cfg != wgmma_configs[0] && cfg != wgmma_configs[1]) || c >= 3))
				continue;
			for (int mode = 0; mode < 2; mode++) {
				bad += run_case(cfg, &fwd_cases[c], mode ? sim::COPY_LAZY : sim::COPY_EAGER,
						(uint64_t)(runs + 1));
				runs++;
			}
		}
	sim::slow_warpgroups = false;
	printf("%d simulated wgmma runs, %d wrong values; worst error of O %.3g (f16), %.3g (bf16)\n", runs, bad,
	       worst[0][0], worst[0][1]);
	assert_int_equal(bad, 0);
}

/*
 * The simulation itself: mma.sync's fragments and ldmatrix's lanes as the
 * PTX ISA lays them out, on a product worked out here (a wrong simulator
 * would pass a wrong kernel).
 */
static void test_attention_sim__mma_and_ldmatrix_layouts(void **state)
{
	(void)state;
	/* A[r][c] = r + 16 c / 64, B[k][n] = (k == n) + (k == n + 8): D = A B has D[r][n] = A[r][n] + A[r][n + 8] */
	std::function<void()> body = [] {
		const int l = sim::lane(), g = l / 4, t = l % 4;
		auto a_at = [](int r, int c) { return (float)r + (float)c / 4; };
		u32 a[4], b0, b1;
		for (int i = 0; i < 4; i++) {
			int r = g + 8 * (i % 2), c = 2 * t + 8 * (i / 2);
			a[i] = sim::pack(a_at(r, c), a_at(r, c + 1), false);
		}
		auto b_at = [](int kk, int n) { return (float)((kk == n) + (kk == n + 8)); };
		b0 = sim::pack(b_at(2 * t, g), b_at(2 * t + 1, g), false);
		b1 = sim::pack(b_at(2 * t + 8, g), b_at(2 * t + 9, g), false);
		float d[4] = { 0, 0, 0, 0 };
		sim::mma(d, a, b0, b1, false);
		for (int e = 0; e < 4; e++) {
			int r = g + 8 * (e / 2), n = 2 * t + e % 2;
			if (d[e] != a_at(r, n) + a_at(r, n + 8))
				sim::fault("mma: wrong product", r, n);
		}
		/* ldmatrix: shared memory holds M[row][col] = 100 row + col over 32 rows of 8 */
		u32 base = (u32)sim::lane() * 16;
		for (int col = 0; col < 8; col++) {
			unsigned short v = (unsigned short)(100 * l + col);
			memcpy(dynamic_smem() + base + 2 * col, &v, 2);
		}
		__syncwarp();
		u32 r[4], rt[4];
		ldmatrix_x4<false>(r, base);
		ldmatrix_x4<true>(rt, base);
		for (int i = 0; i < 4; i++) {
			/* matrix i is rows 8i..8i+7 (the lanes' addresses) */
			u32 want = (u32)(100 * (8 * i + g) + 2 * t) | (u32)(100 * (8 * i + g) + 2 * t + 1) << 16;
			u32 want_t = (u32)(100 * (8 * i + 2 * t) + g) | (u32)(100 * (8 * i + 2 * t + 1) + g) << 16;
			if (r[i] != want || rt[i] != want_t)
				sim::fault("ldmatrix: wrong element", i, l);
		}
	};
	int before = sim::failures;
	sim::launch({ 1, 1, 1 }, 32, 512, sim::COPY_EAGER, 1, body);
	assert_int_equal(sim::failures, before);
}

/*
 * The simulation's mbarrier waits are a warp's, as a converged warp's
 * try_wait: a ring of one slot, a consumer warp whose lane 0 reads and
 * frees the slot after each wait (the kernels' one arrive per warp; the
 * wgmma forward's drain of the tiles a warpgroup skips) and a producer
 * warp that refills it; the consumer's other lanes give way many times
 * before each wait.  Were lanes waiting on their own (as the simulation had
 * it until 2026-11-28), lane 0 would free the slot, the producer refill it
 * and the barrier go a second phase on while the other lanes had not yet
 * looked at the first: they would wait for ever, a deadlock (the wgmma
 * forward's under the slow warpgroup).  Every lane passes every round, and
 * lane 0 reads each round's value.
 */
static void test_attention_sim__mbarrier_wait_is_a_warps(void **state)
{
	(void)state;
	static int value[64][8];
	std::function<void()> body = [] {
		const int t = (int)threadIdx.x, lane = t % 32;
		const u32 full = 0, empty = 8, slot = 64;
		if (t == 0) {
			mbar_init(full, 1);
			mbar_init(empty, 1);
		}
		__syncthreads();
		for (int r = 0; r < 8; r++) {
			if (t >= 32) { /* the producer */
				mbar_wait(empty, ((u32)r & 1) ^ 1);
				if (lane == 0) {
					const int v = 100 + r;
					memcpy(dynamic_smem() + slot, &v, 4);
					mbar_arrive(full);
				}
				continue;
			}
			for (int y = 0; lane && y < 64; y++)
				sim::yield();
			mbar_wait(full, (u32)r & 1);
			value[t][r] = 100 + r; /* passed; only lane 0 reads the slot (the others may be late) */
			if (lane == 0) {
				memcpy(&value[t][r], dynamic_smem() + slot, 4);
				mbar_arrive(empty);
			}
		}
	};
	int before = sim::failures, wrong = 0;
	for (uint64_t seed = 1; seed <= 4; seed++) {
		memset(value, 0, sizeof(value));
		sim::launch({ 1, 1, 1 }, 64, 128, sim::COPY_EAGER, seed, body);
		for (int t = 0; t < 32; t++)
			for (int r = 0; r < 8; r++)
				if (value[t][r] != 100 + r && wrong++ < 5)
					fprintf(stderr, "FAIL lane %d read %d in round %d\n", t, value[t][r], r);
	}
	assert_int_equal(sim::failures, before);
	assert_int_equal(wrong, 0);
}

/*
 * The wgmma simulation on a product worked out here: A (64 x 16) K-major
 * and B (16 x 64) both ways, written as TMA's 128-byte swizzle writes a box
 * (row r at r * 128, 16-byte chunk c at chunk c ^ (r % 8)), read through
 * descriptors; D checked by the accumulator layout, and again with A from
 * registers in the fragment layout.  Small integers: every sum is exact.
 */
static void test_attention_sim__wgmma_layouts(void **state)
{
	(void)state;
	static float d[128][32], d2[128][32];
	static u32 a_regs[128][4];
	auto a_at = [](int m, int k) { return (float)((m + 2 * k) % 7 - 3); };
	auto b_at = [](int k, int n) { return (float)((3 * k + n) % 5 - 2); };
	auto swz = [](u32 off) { return off ^ (((off >> 7) & 7) << 4); };
	std::function<void()> body = [&] {
		const int t = (int)threadIdx.x;
		unsigned char *smem = dynamic_smem();
		if (t == 0) {
			/* A at 0 (K-major: rows m of 16 k); B MN-major at 8192 (rows k of 64 n), K-major at 16384 (rows n) */
			for (int m = 0; m < 64; m++)
				for (int k = 0; k < 16; k++) {
					unsigned short h = sim::from_float(a_at(m, k), false);
					memcpy(smem + swz((u32)(m * 128 + 2 * k)), &h, 2);
				}
			for (int k = 0; k < 16; k++)
				for (int n = 0; n < 64; n++) {
					unsigned short h = sim::from_float(b_at(k, n), false);
					memcpy(smem + 8192 + swz((u32)(k * 128 + 2 * n)), &h, 2);
					memcpy(smem + 16384 + swz((u32)(n * 128 + 2 * k)), &h, 2);
				}
		}
		__syncthreads();
		for (int i = 0; i < 4; i++) {
			const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (i % 2), col = 2 * (t % 4) + 8 * (i / 2);
			a_regs[t][i] = sim::pack(a_at(row, col), a_at(row, col + 1), false);
		}
		for (int i = 0; i < 32; i++)
			d[t][i] = d2[t][i] = 1.0f; /* scale_d 1: added */
		sim::wgmma_issue(d[t], 64, nullptr, w0::smem_desc(0, 16, 1024), w0::smem_desc(16384, 16, 1024), 1, false,
				 false);
		sim::wgmma_issue(d2[t], 64, a_regs[t], 0, w0::smem_desc(8192, 64 * 128, 1024), 1, true, false);
		wgmma_commit();
		wgmma_wait<0>();
		for (int j = 0; j < 8; j++)
			for (int e = 0; e < 4; e++) {
				const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2), col = 8 * j + 2 * (t % 4) + e % 2;
				float want = 1.0f;
				for (int k = 0; k < 16; k++)
					want += a_at(row, k) * b_at(k, col);
				if (d[t][4 * j + e] != want || d2[t][4 * j + e] != want)
					sim::fault("wgmma: wrong product", row, col);
			}
	};
	int before = sim::failures;
	sim::launch({ 1, 1, 1 }, 128, 32768, sim::COPY_EAGER, 1, body);
	assert_int_equal(sim::failures, before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attention_sim__mma_and_ldmatrix_layouts),
		cmocka_unit_test(test_attention_sim__wgmma_layouts),
		cmocka_unit_test(test_attention_sim__mbarrier_wait_is_a_warps),
		cmocka_unit_test(test_attention_sim__forward_every_case),
		cmocka_unit_test(test_attention_sim__wgmma_forward_every_case),
		cmocka_unit_test(test_attention_sim__backward_every_case),
		cmocka_unit_test(test_attention_sim__wgmma_backward_every_case),
	};
	/* KTUNE_SIM_FILTER=*wgmma*: the tests whose names match, as cmocka matches them */
	if (getenv("KTUNE_SIM_FILTER"))
		cmocka_set_test_filter(getenv("KTUNE_SIM_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
