/*
 * gemm_quant.c - the op "gemm_quant": C[M, N] = A[M, K] * dequant(Wq)[N, K]^T
 * (+ bias), weights packed at 8, 4, 2 or 1 bits with gemlite's four
 * dequantisation modes (src/ops/quant.h, docs/quant.md).  Six families:
 * a split-K GEMV for few rows of A (kernels/templates/qgemv.cu), a tiled
 * mma.sync kernel (qgemm.cu), a register-streamed mma.sync kernel for M
 * of 1 to 128 (qmma.cu), and one for few rows of A that puts the codes
 * themselves on the tensor cores (qcode.cu), one for few rows of A that
 * puts the weights on the mma's 16-row side and dequantises them in pairs
 * of the element type (qfrag.cu), and on sm_90 one on the warpgroup MMA
 * for the M where the tensor cores set the time (qwgmma.cu);
 * a split call adds its fp32 partials in order with a second kernel
 * (quant.cuh's quant_reduce_kernel; qwgmma's, quant_sum.cuh's
 * quant_sum_kernel: the same sums, four columns a thread).
 *
 * Key: dtype of A, C, scales and zeros (f16, bf16), bits, group (32, 64,
 * 128, chan), mode and the packing's version (compiled in), M (tuned by
 * power-of-two bucket: 1, 2, 4, 8, 16, 32, 64, ...), N and K (tuned
 * exactly), the aligned class only (key_check).  Runtime: lda, ldc, whether the zero is
 * one scalar (call->scalar[1] != 0: the tuner's problem has one zero per
 * group), whether there is a bias.
 * Buffers: a, wq (32-bit words), scales, zeros, bias -> c.  scales (shift)
 * and zeros (scale) are absent where the mode has none; bias may be NULL.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/elementwise.h"
#include "ops/quant-ref.h"
#include "runtime/op_run.h"

enum { GEMV, MMA, QMMA, QCODE, QWGMMA, QFRAG };
enum { BUF_A, BUF_WQ, BUF_SCALES, BUF_ZEROS, BUF_BIAS, BUF_C };

static const char *const bits_choices[] = { "4", "8", "2", "1", NULL };
static const char *const group_choices[] = { "128", "64", "32", "chan", NULL };
/* in ktune_quant_mode's order */
static const char *const mode_choices[] = { "scale_shift", "scale", "shift", "fma", NULL };
static const char *const pack_choices[] = { "v1", NULL };

static const struct ktune_op_field fields[] = {
	{ "bits", "bits per weight: 4, 8, 2, 1", KTUNE_ROLE_COMPILED, -1, bits_choices },
	{ "group", "weights per scale and zero: 128, 64, 32, chan (a row)", KTUNE_ROLE_COMPILED, -1, group_choices },
	{ "mode", "scale_shift (q-z)*s, scale q*s, shift q-z, fma q*s+z", KTUNE_ROLE_COMPILED, -1, mode_choices },
	{ "pack", "the packing's version", KTUNE_ROLE_COMPILED, -1, pack_choices },
	{ "m", "rows of A and C (tuned by power-of-two bucket)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "n", "rows of W, columns of C (tuned exactly)", KTUNE_ROLE_TUNED, 1, NULL },
	{ "k", "the reduced length, a multiple of 32 and of the group (tuned exactly)", KTUNE_ROLE_TUNED, 2, NULL },
};

static const struct ktune_family families[] = {
	{ "qgemv", "qgemv.cu", "qgemv.yaml", { "qgemv_kernel", "quant_reduce_kernel" } },
	{ "qgemm", "qgemm.cu", "qgemm.yaml", { "qgemm_kernel", "quant_reduce_kernel" } },
	{ "qmma", "qmma.cu", "qmma.yaml", { "qmma_kernel", "quant_reduce_kernel" } },
	{ "qcode", "qcode.cu", "qcode.yaml", { "qcode_kernel", "quant_reduce_kernel" } },
	{ "qwgmma", "qwgmma.cu", "qwgmma.yaml", { "qwgmma_kernel", "quant_sum_kernel" }, "sm_90a" },
	{ "qfrag", "qfrag.cu", "qfrag.yaml", { "qfrag_kernel", "quant_reduce_kernel" } },
};

static const ktune_dtype dtypes[] = { KTUNE_BF16, KTUNE_F16 };

extern const struct ktune_op ktune__op_gemm_quant;

#define OP (&ktune__op_gemm_quant)

/* The GEMV and qcode hold at most this many rows of A at a time (MAX_M); the GEMV leaves more to the tiled families. */
#define GEMV_MAX_M 16
/* qcode walks more rows of A in passes of 16, each reading the weights again: up to this many. */
#define QCODE_MAX_M 64

/* The format a key's variant names (one zero per group: a scalar zero is a runtime matter). */
static int key_format(const struct ktune_key *key, ktune_quant_format *f)
{
	int bits = ktune__op_variant_index(OP, key, "bits"), group = ktune__op_variant_index(OP, key, "group");
	int mode = ktune__op_variant_index(OP, key, "mode");
	static const int bits_of[] = { 4, 8, 2, 1 }, group_of[] = { 128, 64, 32, 0 };
	if (bits < 0 || group < 0 || mode < 0)
		return -1;
	*f = (ktune_quant_format){ .bits = bits_of[bits], .group_size = group_of[group],
				   .mode = (ktune_quant_mode)mode, .zero_scalar = 0 };
	return 0;
}

static int key_shape(const struct ktune_key *key, struct ktune_quant_shape *s, struct ktune_err *e)
{
	ktune_quant_format f;
	if (key_format(key, &f))
		return ktune__fail(e, KTUNE_ERR_INVALID, "gemm_quant: variant '%s' is not bits,group,mode,pack",
				   key->variant);
	return ktune__quant_shape(&f, key->n, key->k, s, e);
}

static int key_check(const struct ktune_key *key, struct ktune_err *e)
{
	struct ktune_quant_shape s;
	int rc = key_shape(key, &s, e);
	if (rc) {
		if (e && !strncmp(e->msg, "quant: ", 7)) { /* the format's check speaks for the op: "gemm_quant: " */
			size_t len = strlen(e->msg);
			if (len + 5 >= sizeof(e->msg))
				len = sizeof(e->msg) - 6;
			memmove(e->msg + 5, e->msg, len);
			e->msg[len + 5] = '\0';
			memcpy(e->msg, "gemm_", 5);
		}
		return rc;
	}
	if (key->n > 0x7fffffff) /* the grid's x dimension walks the rows of W */
		return ktune__fail(e, KTUNE_ERR_INVALID, "gemm_quant: n = %lld is over 2^31 - 1", (long long)key->n);
	/*
	 * The kernels need a and wq 16-byte aligned (ktune_gemm_quant refuses
	 * others), so the tuner has no unaligned problem to time: a call whose
	 * scales, zeros, bias or c are not 16-byte aligned (or ldc not packed nor
	 * a multiple of 8) runs the default, as any key nobody tuned.
	 */
	if (key->aligned != 1)
		return ktune__fail(e, KTUNE_ERR_INVALID, "gemm_quant: keys of the unaligned class are not tuned (a and "
				   "wq must be 16-byte aligned)");
	return KTUNE_OK;
}

static int64_t pow2_ceil(int64_t v)
{
	int64_t b = 1;
	while (b < v && b < KTUNE_OP_MAX_SIZE)
		b <<= 1;
	return b;
}

/* M by power-of-two bucket (1, 2, 4, 8, 16, 32, 64, ...); N and K exactly: they size the weight. */
static void key_bucket(struct ktune_key *key)
{
	key->m = pow2_ceil(key->m);
}

static double bytes(const struct ktune_key *key)
{
	struct ktune_quant_shape s;
	if (key_shape(key, &s, NULL))
		return 0;
	double e = ktune__dtype_size(key->dtype);
	return 4.0 * (double)s.words + e * (double)(s.scales + s.zeros) +
	       e * ((double)key->m * (double)key->k + (double)key->m * (double)key->n + (double)key->n);
}

static double flops(const struct ktune_key *key)
{
	return 2.0 * (double)key->m * (double)key->n * (double)key->k;
}

static void layout(const struct ktune_key *key, struct ktune_op_layout *out)
{
	struct ktune_quant_shape s;
	memset(out, 0, sizeof(*out));
	if (key_shape(key, &s, NULL))
		return;
	*out = (struct ktune_op_layout){
		6,
		{ { "a", 0, key->m * key->k, key->k },
		  { "wq", 0, s.words, s.row_words, KTUNE_BUF_U32 },
		  { "scales", 0, s.scales, 0, KTUNE_BUF_ELEM, s.has_scale ? KTUNE_REQUIRED : KTUNE_OR_NULL },
		  { "zeros", 0, s.zeros, 0, KTUNE_BUF_ELEM, s.has_zero ? KTUNE_REQUIRED : KTUNE_OR_NULL },
		  { "bias", 0, key->n, 0, KTUNE_BUF_ELEM, KTUNE_OR_NULL },
		  /* packed rows (ld 0): the tuner's alignment class is never the row length's */
		  { "c", 1, key->m * key->n, 0 } }
	};
}

/*
 * Inputs whose product stays near 1 whatever the format (C's elements have
 * a standard deviation of about 0.35, so the check's max(1, |ref|) compares
 * errors to the size of the result): scales in [0.5, 1], zeros over the
 * codes (fma: below them), and A scaled down by the codes' range and sqrt(K).
 */
static void input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	struct ktune_quant_shape s;
	double top = 15;
	if (!key_shape(key, &s, NULL))
		top = (double)((1 << s.bits) - 1);
	switch (buf) {
	case BUF_A:
		*hi = 1.5 / (top * sqrt((double)(key->k > 0 ? key->k : 1)));
		*lo = -*hi;
		break;
	case BUF_WQ:
		*lo = 0;
		*hi = 4294967296.0;
		break;
	case BUF_SCALES:
		*lo = 0.5;
		*hi = 1;
		break;
	case BUF_ZEROS:
		*lo = s.mode == KTUNE_QUANT_FMA ? -top / 2 : 0;
		*hi = s.mode == KTUNE_QUANT_FMA ? 0 : top;
		break;
	default: /* bias */
		*lo = -1;
		*hi = 1;
	}
}

static void reference(const struct ktune_key *key, const struct ktune_op_call *call, double *const *b)
{
	struct ktune_quant_shape s;
	if (key_shape(key, &s, NULL))
		return;
	s.zero_scalar = s.has_zero && call->scalar[1] != 0;
	ktune__ref_gemm_quant(&s, call->size[0], b[BUF_A], ktune__op_ld(call, BUF_A), b[BUF_WQ], b[BUF_SCALES],
			      b[BUF_ZEROS], (call->absent >> BUF_BIAS) & 1 ? NULL : b[BUF_BIAS], b[BUF_C],
			      ktune__op_ld(call, BUF_C));
}

/* ------------------------------------------------------------ the families' shapes */

static long param(const struct ktune_config *c, const char *name, long otherwise)
{
	return ktune__op_param(OP, c, name, otherwise);
}

/* Rows of A the GEMV holds at a time for the key: its bucket, at most 16. */
static int gemv_max_m(const struct ktune_key *key)
{
	return key->m < GEMV_MAX_M ? (int)(key->m < 1 ? 1 : key->m) : GEMV_MAX_M;
}

/*
 * The cap MIN_WARPS puts on a qgemv thread's registers (qgemv.cu's
 * __launch_bounds__), in ptxas's units of 8: at most 128 in its space.
 */
static long qgemv_reg_cap(const struct ktune_config *c)
{
	return ktune__op_thread_registers(param(c, "THREADS", 128), param(c, "MIN_WARPS", 0)) / 8 * 8;
}

/*
 * A bound on the registers a qgemv thread needs, fitted to what ptxas did
 * with the configs of the space (THREADS 128, CACHE 1, bf16, groups of
 * 128) at MAX_M 1 to 16 in 8, 4, 2 and 1 bits, each compiled for sm_90
 * under the caps of MIN_WARPS 16 and 32 (776 kernels, 407 of them
 * spilling): none within the bound spilled, and 92 past it did not (most
 * at or near the cap).  The accumulators (ROWS x MAX_M), the words in
 * flight twice (loaded, and unpacked), a base a row and more a row
 * unrolled, the codes of a word past 8 a row (2 and 1 bits), the loop over
 * the rows of A (MAX_M > 1), and a scale and a zero more for each group
 * past the first a chunk spans.  Past MIN_WARPS' cap the config is pruned,
 * so that the tuner does not compile it and dispatch does not borrow, for
 * a key with more rows of A, a config that spills there (docs/quant.md).
 */
static long qgemv_regs(const struct ktune_key *key, const struct ktune_quant_shape *s, const struct ktune_config *c)
{
	long rows = param(c, "ROWS", 4), vec = param(c, "VEC", 4), unroll = param(c, "UNROLL", 1);
	long max_m = gemv_max_m(key), per_word = s->per_word;
	long chunk_groups = !s->channel && vec * per_word > s->group ? vec * per_word / s->group : 1;
	return rows * max_m + 2 * rows * unroll * vec + 6 * rows + 4 * (unroll - 1) * rows +
	       (per_word > 8 ? 3 * rows * (per_word - 8) / 2 : 0) + (max_m > 1 ? 40 : 0) +
	       2 * unroll * rows * (chunk_groups - 1);
}

/* qgemm.cu's SMEM_BYTES for the key's format. */
static long qgemm_smem(const struct ktune_quant_shape *s, const struct ktune_config *c)
{
	long bm = param(c, "BLOCK_M", 16), bn = param(c, "BLOCK_N", 64), bk = param(c, "BLOCK_K", 64);
	long wm = param(c, "WARPS_M", 1), wn = param(c, "WARPS_N", 1), wk = param(c, "WARPS_K", 1);
	long stages = param(c, "STAGES", 2), group = s->channel ? 0 : (long)s->group;
	long a_stage = bm * (bk + 8) * 2, w_row = bk * s->bits / 8;
	long w_stage = bn * (w_row >= 32 ? w_row + 16 : w_row);
	long s_stage = bn * (group && bk > group ? bk / group : 1) * 8;
	long pipe = stages * (a_stage + w_stage + s_stage);
	long red = (wk - 1) * wm * wn * 32 * ((bm / wm / 16) * (bn / wn / 8) * 4) * 4;
	return pipe > red ? pipe : red;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* Chunks of VEC words of a row that hold weights (the GEMV's units of K). */
static int64_t gemv_chunks(const struct ktune_quant_shape *s, const struct ktune_config *c)
{
	return cdiv(s->k / s->per_word, param(c, "VEC", 4));
}

/*
 * Registers a qmma lane takes, as ptxas allocates them (a least-squares fit
 * to the counts of 56 configs compiled for sm_90, within 15 of each): its
 * accumulators, the k-blocks in flight with the one computed (weights, and
 * a scale and a zero for each group a lane's chunk spans), the activations
 * of a turn of the k-block's loop for every m16 tile (ptxas hoists their
 * loads), and a base.  Past QMMA_REGS, ptxas spills; below it, no config of
 * the space spills (docs/quant.md).
 */
#define QMMA_REGS 245

static long qmma_regs(const struct ktune_quant_shape *s, const struct ktune_config *c)
{
	long mt = param(c, "BLOCK_M", 16) / 16, nfrag = param(c, "NFRAG", 4), vec = param(c, "VEC", 4);
	long unroll = param(c, "UNROLL", 2), ch = vec * s->per_word, group = s->channel ? 0 : (long)s->group;
	long cg = group && ch > group ? ch / group : 1;
	long turn_k = s->per_word < 8 ? 8 : s->per_word; /* k of a turn: 8 codes or a word */
	long acc = mt * nfrag * 4, inflight = (unroll + 1) * nfrag * (vec + 2 * cg);
	return (4200 + 190 * acc + 210 * inflight + 130 * mt * turn_k + 15 * nfrag * turn_k) / 100;
}

/* The tiled families' rule on tile height: not far taller than the key's rows, nor far shorter. */
static int tile_height_prune(const struct ktune_key *key, long bm, char *why, size_t len)
{
	if (bm > 16 && bm > key->m) {
		snprintf(why, len, "BLOCK_M %ld for %lld rows of A", bm, (long long)key->m);
		return 1;
	}
	if (4 * bm < (key->m < 128 ? key->m : 128)) {
		snprintf(why, len, "BLOCK_M %ld for %lld rows of A: each weight dequantised %lld times", bm,
			 (long long)key->m, (long long)cdiv(key->m, bm));
		return 1;
	}
	return 0;
}

/*
 * The register-streamed families' rule on splitting k: WARPS_K only where
 * each warp gets a k-block, SPLIT_K only where each block does and the
 * grid is short of two waves.
 */
static int k_split_prune(long wk, long split, int64_t k_blocks, int64_t blocks, int sms, char *why, size_t len)
{
	if (wk > 1 && wk > cdiv(k_blocks, split)) {
		snprintf(why, len, "WARPS_K %ld for %lld k-blocks a block", wk, (long long)cdiv(k_blocks, split));
		return 1;
	}
	if (split > 1 && (split > k_blocks || blocks >= 2L * sms)) {
		snprintf(why, len, "split %ld of %lld k-blocks over %lld blocks", split, (long long)k_blocks,
			 (long long)blocks);
		return 1;
	}
	return 0;
}

static int qmma_prune(const struct ktune_key *key, const struct ktune_quant_shape *s, const struct ktune_config *c,
		      int sms, char *why, size_t len)
{
	long bm = param(c, "BLOCK_M", 16), nfrag = param(c, "NFRAG", 4), wn = param(c, "WARPS_N", 2);
	long wk = param(c, "WARPS_K", 1), split = param(c, "SPLIT_K", 1), regs = qmma_regs(s, c);
	int64_t kb = 4 * param(c, "VEC", 4) * s->per_word, k_blocks = cdiv(key->k, kb);
	int64_t blocks = cdiv(key->n, wn * nfrag * 8) * cdiv(key->m, bm);
	if (regs > QMMA_REGS) {
		snprintf(why, len, "about %ld registers a lane (%d at most without spills)", regs, QMMA_REGS);
		return 1;
	}
	if (param(c, "VEC", 4) == 2 && param(c, "UNROLL", 2) == 4 && bm >= 64) {
		/* the fit's misses (8 bits: spills); VEC 4, UNROLL 2 has the same bytes in flight */
		snprintf(why, len, "VEC 2, UNROLL 4 for BLOCK_M %ld: registers (VEC 4, UNROLL 2 loads as much)", bm);
		return 1;
	}
	if (tile_height_prune(key, bm, why, len))
		return 1;
	if ((nfrag - 1) * 8 >= key->n || (wn - 1) * nfrag * 8 >= key->n) {
		snprintf(why, len, "%ld x %ld n8 tiles for n = %lld: a warp or tile past the rows of W", wn, nfrag,
			 (long long)key->n);
		return 1;
	}
	return k_split_prune(wk, split, k_blocks, blocks, sms, why, len);
}

/* qcode's rows of A a pass: n8 tiles of the key's MAX_M. */
static long qcode_tokens(const struct ktune_key *key)
{
	return cdiv(gemv_max_m(key), 8) * 8;
}

/* qcode's rows of W a block (its BLOCK_N): WARPS_N warps of MFRAG m16 tiles. */
static long qcode_block_n(const struct ktune_config *c)
{
	return param(c, "WARPS_N", 1) * param(c, "MFRAG", 2) * 16;
}

static int qcode_prune(const struct ktune_key *key, const struct ktune_quant_shape *s, const struct ktune_config *c,
		       int sms, char *why, size_t len)
{
	long mfrag = param(c, "MFRAG", 2), wn = param(c, "WARPS_N", 1), wk = param(c, "WARPS_K", 4);
	long split = param(c, "SPLIT_K", 1), min_warps = param(c, "MIN_WARPS", 0);
	long kb = 4 * param(c, "VEC", 4) * s->per_word;
	int64_t k_blocks = cdiv(key->k, kb), blocks = cdiv(key->n, qcode_block_n(c)) * cdiv(key->m, qcode_tokens(key));
	if (key->m > QCODE_MAX_M) {
		snprintf(why, len, "%lld rows of A: qcode reads the weights again every 16 (%d at most)",
			 (long long)key->m, QCODE_MAX_M);
		return 1;
	}
	if (!s->channel && (int64_t)s->group % kb) {
		snprintf(why, len, "a k-block of %ld codes is not inside one group of %lld", kb, (long long)s->group);
		return 1;
	}
	if ((mfrag - 1) * 16 >= key->n || qcode_block_n(c) - mfrag * 16 >= key->n) {
		snprintf(why, len, "%ld x %ld m16 tiles for n = %lld: a warp or tile past the rows of W", wn, mfrag,
			 (long long)key->n);
		return 1;
	}
	long red = (wk - 1) * wn * 32 * (mfrag * (qcode_tokens(key) / 8) * 4) * 4; /* qcode.cu's RED_FLOATS, in bytes */
	if (red > 48 * 1024) {
		snprintf(why, len, "%ld bytes of shared memory for the WARPS_K sums (48 KiB static at most)", red);
		return 1;
	}
	if (min_warps > 0 && min_warps * 32 / (32 * wn * wk) <= 1) {
		snprintf(why, len, "MIN_WARPS %ld for blocks of %ld warps: no cap (MIN_WARPS 0)", min_warps, wn * wk);
		return 1;
	}
	return k_split_prune(wk, split, k_blocks, blocks, sms, why, len);
}

/* qwgmma's rows of W a block (its BLOCK_N): WGS warpgroups of SLABS 64-row slabs. */
static long qwgmma_block_n(const struct ktune_config *c)
{
	return param(c, "WGS", 2) * param(c, "SLABS", 1) * 64;
}

/*
 * qwgmma.cu's SMEM_BYTES: the ring of STAGES slots of 64 k, rows of A and
 * packed rows of W, or with CLUSTER_K the tile of sums it is reused for if
 * larger, and the alignment.
 */
static long qwgmma_smem(const struct ktune_quant_shape *s, const struct ktune_config *c)
{
	long bm = param(c, "BLOCK_M", 128), bn = qwgmma_block_n(c);
	long ring = param(c, "STAGES", 4) * (bm * 128 + bn * 8 * s->bits);
	long tile = param(c, "CLUSTER_K", 1) > 1 ? bm * (bn + 4) * 4 : 0;
	return 1024 + (ring > tile ? ring : tile);
}

static int qwgmma_prune(const struct ktune_key *key, const struct ktune_quant_shape *s, const struct ktune_config *c,
			int sms, char *why, size_t len)
{
	long bm = param(c, "BLOCK_M", 128), bn = qwgmma_block_n(c), smem = qwgmma_smem(s, c);
	int64_t stages = cdiv(key->k, 64), blocks = cdiv(key->n, bn) * cdiv(key->m, bm);
	if (smem > 232448) {
		snprintf(why, len, "%ld bytes of shared memory (227 KiB at most)", smem);
		return 1;
	}
	if (tile_height_prune(key, bm, why, len))
		return 1;
	if (bn - 64 >= key->n) {
		snprintf(why, len, "%ld rows of W a block for n = %lld: a slab past the rows", bn, (long long)key->n);
		return 1;
	}
	long split = param(c, "SPLIT_K", 1), cluster = param(c, "CLUSTER_K", 1);
	return k_split_prune(1, split > cluster ? split : cluster, stages, blocks, sms, why, len);
}

/*
 * qfrag: few rows of A (it holds MAX_M <= 16 of them at a time); a lane's
 * chunk of CH = VEC x PER_WORD weights must lie in k and inside one group
 * (qfrag.cu); the activations of a chunk take CH / 2 registers for each 8
 * rows of A.
 */
static int qfrag_prune(const struct ktune_key *key, const struct ktune_quant_shape *s, const struct ktune_config *c,
		       int sms, char *why, size_t len)
{
	long ch = param(c, "VEC", 4) * s->per_word, wk = param(c, "WARPS_K", 8), stages = param(c, "STAGES", 2);
	long split = param(c, "SPLIT_K", 1), rt = param(c, "ROW_TILES", 1), mtiles = (gemv_max_m(key) + 7) / 8;
	int64_t steps = cdiv(key->k, 4 * ch), blocks = cdiv(key->n, 16 * rt) * cdiv(key->m, gemv_max_m(key));
	if (key->m > GEMV_MAX_M) {
		snprintf(why, len, "%lld rows of A: qfrag holds %d at a time (the tiled families')", (long long)key->m,
			 GEMV_MAX_M);
		return 1;
	}
	if (key->k % ch || (!s->channel && ch > s->group)) {
		snprintf(why, len, "a lane's %ld weights are not inside one group of %lld and k = %lld", ch,
			 (long long)s->group, (long long)key->k);
		return 1;
	}
	if (ch / 2 * mtiles > 32) {
		snprintf(why, len, "%ld registers of activations a lane", ch / 2 * mtiles);
		return 1;
	}
	if (wk * stages > 1 && cdiv(steps, split) < wk * stages) {
		snprintf(why, len, "%lld steps of k a block for WARPS_K %ld x STAGES %ld", (long long)cdiv(steps, split),
			 wk, stages);
		return 1;
	}
	if (split > 1 && blocks * split > 8L * sms) {
		snprintf(why, len, "split %ld over %lld blocks", split, (long long)blocks);
		return 1;
	}
	return 0;
}

static int prune(const struct ktune_key *key, const struct ktune_config *c, int sm_count, char *why, size_t len)
{
	struct ktune_quant_shape s;
	long split = param(c, "SPLIT_K", 1);
	int sms = sm_count > 0 ? sm_count : 132;
	if (key_shape(key, &s, NULL)) {
		snprintf(why, len, "not a valid key");
		return 1;
	}
	if (c->family == GEMV) {
		long threads = param(c, "THREADS", 128), rows = param(c, "ROWS", 4);
		int64_t chunks = gemv_chunks(&s, c), blocks = cdiv(key->n, rows) * cdiv(key->m, gemv_max_m(key));
		if (key->m > GEMV_MAX_M) {
			snprintf(why, len, "%lld rows of A: the GEMV holds %d at a time (the tiled family's)",
				 (long long)key->m, GEMV_MAX_M);
			return 1;
		}
		if (rows * gemv_max_m(key) > 64) {
			snprintf(why, len, "%ld rows x %d of A: %ld accumulators a thread", rows, gemv_max_m(key),
				 rows * gemv_max_m(key));
			return 1;
		}
		long regs = qgemv_regs(key, &s, c), reg_cap = qgemv_reg_cap(c);
		if (param(c, "MIN_WARPS", 0) > 0 && regs > reg_cap) {
			snprintf(why, len, "about %ld registers a thread over MIN_WARPS' cap of %ld: spills", regs, reg_cap);
			return 1;
		}
		long unroll = param(c, "UNROLL", 1);
		if ((threads > 64 || unroll > 1) && threads * unroll > 2 * cdiv(chunks, split)) {
			snprintf(why, len, "%ld threads x %ld chunks for %lld chunks a row: most idle", threads, unroll,
				 (long long)cdiv(chunks, split));
			return 1;
		}
		if (split > 1 && (split > chunks || blocks >= 4L * sms)) {
			snprintf(why, len, "split %ld of %lld chunks over %lld blocks", split, (long long)chunks,
				 (long long)blocks);
			return 1;
		}
		return 0;
	}
	if (c->family == QMMA)
		return qmma_prune(key, &s, c, sms, why, len);
	if (c->family == QCODE)
		return qcode_prune(key, &s, c, sms, why, len);
	if (c->family == QWGMMA)
		return qwgmma_prune(key, &s, c, sms, why, len);
	if (c->family == QFRAG)
		return qfrag_prune(key, &s, c, sms, why, len);
	long bm = param(c, "BLOCK_M", 16), bn = param(c, "BLOCK_N", 64), bk = param(c, "BLOCK_K", 64);
	long smem = qgemm_smem(&s, c);
	int64_t tiles = cdiv(key->n, bn) * cdiv(key->m, bm), k_tiles = cdiv(key->k, bk);
	if (smem > 48 * 1024) {
		snprintf(why, len, "%ld bytes of shared memory (48 KiB static at most)", smem);
		return 1;
	}
	if (tile_height_prune(key, bm, why, len))
		return 1;
	if (bk > key->k) {
		snprintf(why, len, "BLOCK_K %ld past k = %lld", bk, (long long)key->k);
		return 1;
	}
	if (param(c, "WARPS_K", 1) > 1 && key->m >= 64) {
		snprintf(why, len, "WARPS_K for %lld rows of A: the tile's warps have work enough", (long long)key->m);
		return 1;
	}
	if (split > 1 && (split > k_tiles || tiles >= 2L * sms)) {
		snprintf(why, len, "split %ld of %lld k-tiles over %lld tiles", split, (long long)k_tiles,
			 (long long)tiles);
		return 1;
	}
	return 0;
}

static int defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	struct ktune_quant_shape s;
	const struct ktune_space *sp = ktune__op_space(OP, c->family, NULL);
	int n = 0;
	if (!sp || key_shape(key, &s, NULL) || max < 5 + sp->nparams)
		return -1;
	snprintf(opts[n++], 48, "-DDTYPE=%d", key->dtype == KTUNE_BF16);
	snprintf(opts[n++], 48, "-DBITS=%d", s.bits);
	snprintf(opts[n++], 48, "-DGROUP=%lld", s.channel ? 0LL : (long long)s.group);
	snprintf(opts[n++], 48, "-DMODE=%d", (int)s.mode);
	if (c->family == GEMV || c->family == QCODE || c->family == QFRAG)
		snprintf(opts[n++], 48, "-DMAX_M=%d", gemv_max_m(key));
	for (int i = 0; i < sp->nparams; i++)
		if (strcmp(sp->params[i].name, "SPLIT_K"))
			snprintf(opts[n++], 48, "-D%.24s=%ld", sp->params[i].name, c->v[i]);
	return n;
}

static size_t workspace(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
			int sm_count)
{
	(void)key;
	(void)sm_count;
	long split = param(c, "SPLIT_K", 1);
	return split > 1 ? (size_t)split * (size_t)call->size[0] * (size_t)call->size[1] * sizeof(float) : 0;
}

static int steps(const struct ktune_key *key, const struct ktune_config *c, const struct ktune_op_call *call,
		 int sm_count, struct ktune_op_step *out)
{
	const int64_t m = call->size[0], n = call->size[1], k = call->size[2];
	const long split = param(c, "SPLIT_K", 1) > 1 ? param(c, "SPLIT_K", 1) : 1;
	const int absent_bias = (call->absent >> BUF_BIAS) & 1;
	struct ktune_op_args *a = &out[0].args;
	struct ktune_op_launch *l = &out[0].launch;
	memset(out, 0, 2 * sizeof(*out));
	out[0].entry = 0;
	if (c->family == GEMV) {
		long threads = param(c, "THREADS", 128), rows = param(c, "ROWS", 4);
		int64_t mblocks = cdiv(m, gemv_max_m(key));
		*l = (struct ktune_op_launch){ { (unsigned)cdiv(n, rows), (unsigned)split,
						 (unsigned)(mblocks < 65535 ? mblocks : 65535) },
					       { (unsigned)threads, 1, 1 }, 0 };
	} else if (c->family == QFRAG) {
		int64_t mblocks = cdiv(m, gemv_max_m(key));
		*l = (struct ktune_op_launch){ { (unsigned)cdiv(n, 16 * param(c, "ROW_TILES", 1)), (unsigned)split,
						 (unsigned)(mblocks < 65535 ? mblocks : 65535) },
					       { (unsigned)(32 * param(c, "WARPS_K", 8)), 1, 1 }, 0 };
	} else if (c->family == QCODE) {
		long threads = 32 * param(c, "WARPS_N", 1) * param(c, "WARPS_K", 4);
		int64_t passes = cdiv(m, qcode_tokens(key));
		*l = (struct ktune_op_launch){ { (unsigned)cdiv(n, qcode_block_n(c)),
						 (unsigned)(passes < 65535 ? passes : 65535), (unsigned)split },
					       { (unsigned)threads, 1, 1 }, 0 };
	} else if (c->family == QWGMMA) {
		struct ktune_quant_shape s = { .bits = 8 }; /* the most shared memory, for a key that is not one */
		int64_t mtiles = cdiv(m, param(c, "BLOCK_M", 128));
		key_shape(key, &s, NULL);
		long cluster = param(c, "CLUSTER_K", 1); /* the cluster's blocks are grid.z, as SPLIT_K's */
		*l = (struct ktune_op_launch){ { (unsigned)cdiv(n, qwgmma_block_n(c)),
						 (unsigned)(mtiles < 65535 ? mtiles : 65535),
						 (unsigned)(cluster > 1 ? cluster : split) },
					       { (unsigned)(128 * param(c, "WGS", 2)), 1, 1 },
					       (unsigned)qwgmma_smem(&s, c) };
	} else { /* qgemm and qmma: tiles of BLOCK_M x BLOCK_N */
		long bm = param(c, "BLOCK_M", 16), wn = param(c, "WARPS_N", 1);
		long bn = c->family == QMMA ? wn * param(c, "NFRAG", 4) * 8 : param(c, "BLOCK_N", 64);
		long threads = 32 * param(c, "WARPS_M", 1) * wn * param(c, "WARPS_K", 1);
		int64_t mtiles = cdiv(m, bm);
		*l = (struct ktune_op_launch){ { (unsigned)cdiv(n, bn), (unsigned)(mtiles < 65535 ? mtiles : 65535),
						 (unsigned)split },
					       { (unsigned)threads, 1, 1 }, 0 };
	}
	a->n = 0;
	ktune__ew_arg_ptr(a, call->buf[BUF_A]);
	ktune__ew_arg_ptr(a, call->buf[BUF_WQ]);
	ktune__ew_arg_ptr(a, call->buf[BUF_SCALES]);
	ktune__ew_arg_ptr(a, call->buf[BUF_ZEROS]);
	ktune__ew_arg_ptr(a, absent_bias ? 0 : call->buf[BUF_BIAS]);
	ktune__ew_arg_ptr(a, call->buf[BUF_C]);
	ktune__ew_arg_ptr(a, split > 1 ? call->workspace : 0);
	ktune__ew_arg_i64(a, m);
	ktune__ew_arg_i64(a, n);
	ktune__ew_arg_i64(a, k);
	ktune__ew_arg_i64(a, ktune__op_ld(call, BUF_A));
	ktune__ew_arg_i64(a, ktune__op_ld(call, BUF_C));
	{
		int per_group = call->scalar[1] == 0;
		memcpy(a->slot[a->n], &per_group, sizeof(per_group));
		a->argv[a->n] = a->slot[a->n];
		a->n++;
	}
	if (split == 1)
		return 1;

	/* the partials added in order, with the bias: quant_sum_kernel takes four columns a thread */
	int64_t units = c->family == QWGMMA && n % 4 == 0 ? m * n / 4 : m * n;
	int64_t blocks = cdiv(units, 256), most = 8L * (sm_count > 0 ? sm_count : 132);
	a = &out[1].args;
	out[1].entry = 1;
	out[1].launch = (struct ktune_op_launch){ { (unsigned)(blocks < most ? blocks : most), 1, 1 }, { 256, 1, 1 }, 0 };
	ktune__ew_arg_ptr(a, call->workspace);
	{
		int s = (int)split;
		memcpy(a->slot[a->n], &s, sizeof(s));
		a->argv[a->n] = a->slot[a->n];
		a->n++;
	}
	ktune__ew_arg_ptr(a, absent_bias ? 0 : call->buf[BUF_BIAS]);
	ktune__ew_arg_ptr(a, call->buf[BUF_C]);
	ktune__ew_arg_i64(a, m);
	ktune__ew_arg_i64(a, n);
	ktune__ew_arg_i64(a, ktune__op_ld(call, BUF_C));
	return 2;
}

/* ------------------------------------------------------------ untuned keys */

/* The config of the family with these parameter values (the space's nearest of each). */
static struct ktune_config config_of(int family, const char *const *names, const long *values, int n)
{
	struct ktune_config c = { .family = family };
	const struct ktune_space *s = ktune__op_space(OP, family, NULL);
	for (int i = 0; s && i < s->nparams; i++) {
		long want = s->params[i].values[0];
		for (int j = 0; j < n; j++)
			if (!strcmp(s->params[i].name, names[j]))
				want = values[j];
		c.v[i] = ktune__space_nearest(s, i, want);
	}
	return c;
}

/* The smallest power-of-two split (at most `most`) that gives `blocks` blocks 2 waves on the GPU. */
static long split_for(int64_t blocks, int sm_count, long most)
{
	long split = 1;
	while (split < most && blocks * split < 2L * (sm_count > 0 ? sm_count : 132))
		split *= 2;
	return split;
}

/*
 * Up to 16 rows of A: qfrag, which won 32 of the 33 keys of 4, 2 and 1
 * bits at m <= 16 that the H200's sweeps tried, the other by 0.4%
 * (bench/results/h200-qfrag-sweep.log, h200-quant-qfrag-*-sweep.log):
 * one step in flight, a block of 16 rows of W (32 from 9 rows of A on a
 * weight of 2^25 elements or more, where the grid stays full), warps along
 * K until the GPU holds about 32 an SM, split only where the blocks are
 * fewer than half the SMs; 128-bit loads, fewer words where the activations'
 * registers, the group or k want it, and fewer warps or splits where k
 * holds too few steps for them.  0 where no such config passes the prune
 * (k of one or two chunks).
 */
static int qfrag_default(const struct ktune_key *key, int sm_count, struct ktune_config *out)
{
	static const char *const names[] = { "ROW_TILES", "WARPS_K", "STAGES", "VEC", "SPLIT_K" };
	long sms = sm_count > 0 ? sm_count : 132, wk0 = 16, split0 = 1;
	long rt = key->m > 8 && key->n * key->k >= (1LL << 25) ? 2 : 1;
	int64_t blocks = cdiv(key->n, 16 * rt) * cdiv(key->m, gemv_max_m(key));
	char why[160];

	while (wk0 > 2 && cdiv(key->n, 16) * wk0 > 32 * sms)
		wk0 /= 2;
	while (split0 < 8 && 2 * blocks * split0 < sms)
		split0 *= 2;
	for (long vec = 4; vec >= 1; vec /= 2)
		for (long split = split0; split >= 1; split /= 2)
			for (long wk = wk0; wk >= 2; wk /= 2) {
				const long values[] = { rt, wk, 1, vec, split };
				struct ktune_config c = config_of(QFRAG, names, values, 5);
				if (!prune(key, &c, sm_count, why, sizeof(why))) {
					*out = c;
					return 1;
				}
			}
	return 0;
}

/*
 * Up to 16 rows of A, qfrag's default above.  Else, up to 4 rows: the
 * GEMV, 4 rows of W a block, 128-bit loads, two in flight a row (one at 2
 * and 1 bits, or for a short row), split until the grid fills the GPU
 * twice.  More: the tiled kernel, its tile grown with M, split likewise.
 */
static struct ktune_config default_config(const struct ktune_key *key, int sm_count)
{
	struct ktune_quant_shape s;
	struct ktune_config c;
	if (key->m <= GEMV_MAX_M && qfrag_default(key, sm_count, &c)) /* its prune refuses a key that is not one */
		return c;
	if (key_shape(key, &s, NULL))
		s = (struct ktune_quant_shape){ .bits = 4, .per_word = 8, .group = 128, .k = key->k };
	if (key->m <= 4) {
		static const char *const names[] = { "THREADS", "ROWS", "VEC", "UNROLL", "CACHE", "MIN_WARPS", "SPLIT_K" };
		int64_t blocks = cdiv(key->n, 4) * cdiv(key->m, gemv_max_m(key));
		int64_t chunks = cdiv(s.k / s.per_word, 4);
		long split = split_for(blocks, sm_count, 16);
		while (split > 1 && split > chunks)
			split /= 2;
		long threads = cdiv(chunks, split) >= 128 ? 128 : 64;
		long unroll = s.bits <= 2 || threads * 2 > cdiv(chunks, split) ? 1 : 2; /* 1 and 2 bits: 64 and 128 weights a chunk */
		const long values[] = { threads, 4, 4, unroll, 1, 0, split };
		return config_of(GEMV, names, values, 7);
	}
	static const char *const names[] = { "BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS_M", "WARPS_N", "WARPS_K",
					     "STAGES", "SPLIT_K" };
	long bm = key->m <= 16 ? 16 : key->m <= 64 ? key->m : 128;
	long bk = key->m <= 16 ? 128 : key->m <= 64 ? 64 : 32;
	while (bk > 32 && bk > key->k)
		bk /= 2;
	long wm = bm / 32 > 1 ? bm / 32 : 1, wk = key->m <= 16 ? 2 : 1;
	int64_t tiles = cdiv(key->n, 64) * cdiv(key->m, bm);
	long split = split_for(tiles, sm_count, 8);
	while (split > 1 && split > cdiv(key->k, bk))
		split /= 2;
	const long values[] = { bm, 64, bk, wm, 2, wk, 3, split };
	return config_of(MMA, names, values, 8);
}

/*
 * On sm_90, a key of 64 rows of A or more defaults to the wgmma family, in
 * the config the H200's sweeps picked at m = 128 on 4096 x 4096 in 4 and 8
 * bits (bench/results/h200-quant-qwgmma-sweep.log: 64 or 128 rows of W a
 * block, 6 stages, split into 4 there), its tile of rows cut to the key's
 * m, split until the grid fills the GPU twice.
 */
static int arch_default(const struct ktune_key *key, int sm_count, const char *arch, struct ktune_config *out)
{
	static const char *const names[] = { "BLOCK_M", "WGS", "SLABS", "STAGES", "OVERLAP", "CLUSTER_K", "SPLIT_K" };
	if (key->m < 64 || !ktune__op_family_runs(OP, QWGMMA, arch))
		return 0;
	long bm = key->m < 128 ? 64 : 128, split = split_for(cdiv(key->n, 64) * cdiv(key->m, bm), sm_count, 4);
	while (split > 1 && split > cdiv(key->k, 64))
		split /= 2;
	const long values[] = { bm, 1, 1, 6, 0, 1, split };
	*out = config_of(QWGMMA, names, values, 7);
	return 1;
}

/*
 * A neighbour's config fitted to this key: its split, a launch parameter
 * (a power of two in every family's space), halved until the prune keeps
 * it.  A split tuned where the grid left SMs idle splits a grid that this
 * key's rows of W may already fill: m = 64 on 28672 x 4096 borrowing 4096
 * x 4096's SPLIT_K 4.
 */
static int fit(const struct ktune_key *key, struct ktune_config *c, int sm_count)
{
	const struct ktune_space *sp = ktune__op_space(OP, c->family, NULL);
	int i = sp ? ktune__space_param_index(sp, "SPLIT_K") : -1;
	struct ktune_config t = *c;
	char why[160];

	if (i < 0)
		return 0;
	while (t.v[i] > 1) {
		t.v[i] /= 2;
		if (!prune(key, &t, sm_count, why, sizeof(why))) {
			*c = t;
			return 1;
		}
	}
	return 0;
}

/*
 * The elementwise ops' distance, but an entry of other rows of A is not
 * borrowed where either side has 16 or fewer: the families of few rows
 * compile MAX_M in, and their best config moves with it (W8's GEMV tuned
 * at m = 1 served m = 2 and 4 on the H200 at 0.63 and 0.51 of its own
 * bandwidth, bench/results/h200-quant-nearest.log), while the
 * default there is qfrag's, the config most of its sweeps picked.
 */
static double distance(const struct ktune_key *a, const struct ktune_key *b)
{
	if (a->m != b->m && (a->m <= GEMV_MAX_M || b->m <= GEMV_MAX_M))
		return INFINITY;
	return ktune__ew_distance(a, b);
}

/* ------------------------------------------------------------ the op */

const struct ktune_op ktune__op_gemm_quant = {
	.name = "gemm_quant",
	.summary = "weight-quantized GEMM: C[m, n] = A[m, k] * dequant(Wq)[n, k]^T, 8/4/2/1-bit weights",
	.fields = fields,
	.nfields = 7,
	.families = families,
	.nfamilies = 6,
	.dtypes = dtypes,
	.ndtypes = 2,
	/* W4 and W8 on the square weight and at M = 128; W4 at decode's M on the other LLM weights; the other formats */
	.suite = "- dtypes: [bf16]\n"
		 "  bits: [4, 8]\n"
		 "  group: [128]\n"
		 "  mode: [scale_shift]\n"
		 "  shapes:\n"
		 "    - {m: [1, 2, 4, 8, 16, 32, 64, 128], n: 4096, k: 4096}\n"
		 "    - {m: 1, n: 14336, k: 4096}\n"
		 "    - {m: 128, n: [6144, 14336, 28672], k: 4096}\n"
		 "    - {m: 128, n: 4096, k: 14336}\n"
		 "- dtypes: [bf16]\n"
		 "  bits: [4]\n"
		 "  group: [128]\n"
		 "  mode: [scale_shift]\n"
		 "  shapes:\n"
		 "    - {m: [1, 2, 4, 8, 16], n: [6144, 14336, 28672], k: 4096}\n"
		 "    - {m: [1, 2, 4, 8, 16], n: 4096, k: 14336}\n"
		 "- dtypes: [bf16]\n"
		 "  bits: [8]\n"
		 "  group: [chan]\n"
		 "  mode: [scale_shift]\n"
		 "  shapes:\n"
		 "    - {m: [1, 16], n: [4096, 14336], k: 4096}\n"
		 "- dtypes: [bf16]\n"
		 "  bits: [2, 1]\n"
		 "  group: [128]\n"
		 "  mode: [scale_shift]\n"
		 "  shapes:\n"
		 "    - {m: [1, 16], n: [4096, 14336], k: 4096}\n",
	.key_check = key_check,
	.key_bucket = key_bucket,
	.bytes = bytes,
	.flops = flops,
	.layout = layout,
	.input_range = input_range,
	.reference = reference,
	.tolerance = ktune__ew_output_tolerance,
	.prune = prune,
	.defines = defines,
	.steps = steps,
	.workspace = workspace,
	.default_config = default_config,
	.arch_default = arch_default,
	.distance = distance,
	.fit = fit,
};

/* ------------------------------------------------------------ the public function */

static ktune_status misaligned(ktune_ctx *ctx, const char *name, const void *p, int to)
{
	return ktune__op_invalid(ctx, "gemm_quant: %s (%p) is not %d-byte aligned", name, p, to);
}

ktune_status ktune_gemm_quant(ktune_ctx *ctx, const ktune_quant_format *fmt, int64_t m, int64_t n, int64_t k,
			      const void *a, int64_t lda, const uint32_t *wq, const void *scales, const void *zeros,
			      const void *bias, void *c, int64_t ldc, ktune_dtype dtype, void *stream)
{
	/* aligned: what the checks below hold; ktune__op_run sets the class from all the buffers */
	struct ktune_key key = { .op = "gemm_quant", .dtype = dtype, .m = m, .n = n, .k = k, .aligned = 1 };
	struct ktune_quant_shape s;
	struct ktune_err e;

	if (!ctx)
		return KTUNE_ERR_INVALID;
	if (m < 0 || n < 0 || k < 0)
		return ktune__op_invalid(ctx, "gemm_quant: [m, n, k] = [%lld, %lld, %lld] has a negative size",
					 (long long)m, (long long)n, (long long)k);
	if (m == 0 || n == 0)
		return KTUNE_OK;
	if (dtype != KTUNE_F16 && dtype != KTUNE_BF16)
		return ktune__op_invalid(ctx, "gemm_quant: dtype %d is not f16 or bf16", (int)dtype);
	if (ktune__quant_shape(fmt, n, k, &s, &e))
		return ktune__op_invalid(ctx, "gemm_%s", e.msg);
	if (!a || !wq || !c || (s.has_scale && !scales) || (s.has_zero && !zeros))
		return ktune__op_invalid(ctx, "gemm_quant: %s is NULL", !a ? "a" : !wq ? "wq" : !c ? "c"
					 : s.has_scale && !scales ? "scales" : "zeros");
	if (lda < k || ldc < n)
		return ktune__op_invalid(ctx, "gemm_quant: lda = %lld or ldc = %lld is less than k = %lld, n = %lld",
					 (long long)lda, (long long)ldc, (long long)k, (long long)n);
	if ((uintptr_t)a % 16)
		return misaligned(ctx, "a", a, 16);
	if (lda % 8)
		return ktune__op_invalid(ctx, "gemm_quant: lda = %lld is not a multiple of 8 (rows of a 16-byte aligned)",
					 (long long)lda);
	if ((uintptr_t)wq % 16)
		return misaligned(ctx, "wq", wq, 16);
	if ((uintptr_t)scales % 2 || (uintptr_t)zeros % 2 || (uintptr_t)bias % 2 || (uintptr_t)c % 2)
		return misaligned(ctx, (uintptr_t)scales % 2 ? "scales" : (uintptr_t)zeros % 2 ? "zeros"
				  : (uintptr_t)bias % 2 ? "bias" : "c",
				  (uintptr_t)scales % 2 ? scales : (uintptr_t)zeros % 2 ? zeros : (uintptr_t)bias % 2 ? bias : c,
				  2);
	const char *values[] = { ktune__quant_bits_name(s.bits), ktune__quant_group_name(s.channel ? 0 : (int)s.group),
				 ktune__quant_mode_name(s.mode), "v1", NULL, NULL, NULL };
	if (ktune__op_variant_set(OP, &key, values, &e))
		return ktune__op_invalid(ctx, "%s", e.msg);
	struct ktune_op_call call = {
		.buf = { (uint64_t)(uintptr_t)a, (uint64_t)(uintptr_t)wq, (uint64_t)(uintptr_t)(s.has_scale ? scales : NULL),
			 (uint64_t)(uintptr_t)(s.has_zero ? zeros : NULL), (uint64_t)(uintptr_t)bias, (uint64_t)(uintptr_t)c },
		.ld = { lda, 0, 0, 0, 0, ldc == n ? 0 : ldc }, /* packed C as the tuner lays it out */
		.scalar = { 0, s.zero_scalar },
	};
	return ktune__op_run(ctx, &key, &call, stream);
}
