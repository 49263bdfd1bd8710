/*
 * ktune.h - the public API of libktune, autotuned GPU kernels (GEMM and the
 * elementwise ops) for NVIDIA GPUs.
 *
 * This header is the documentation.  A program opens a context on a device,
 * then calls ktune_gemm() with device pointers; ktune looks the problem key up
 * in the tuning database and launches the tuned kernel variant (exact key,
 * else the same key tuned on another GPU of the same arch, else the tuning
 * shipped inside the library for the arch, else a tuned neighbour of the
 * same regime, else the performance model's pick or, for keys ktune has no
 * good answer for, cuBLAS: see ktune_last_dispatch()).
 *
 * The CUDA driver is loaded at run time: a program linked with libktune starts
 * on a machine without a GPU, and ktune_open() then fails with KTUNE_ERR_NO_DRIVER
 * or KTUNE_ERR_NO_DEVICE.
 *
 * Thread safety: ktune_gemm() and the ops below it may be called from
 * several threads on one context at once.  Every other function is not
 * thread-safe unless stated.
 */
#ifndef KTUNE_H
#define KTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "ktune_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KTUNE_BUILDING) && defined(__GNUC__)
#define KTUNE_API __attribute__((visibility("default")))
#else
#define KTUNE_API
#endif

/*
 * Status codes.  KTUNE_OK is 0, failures are negative.  Codes are never
 * renumbered: add new ones at the end of the list.
 */
#define KTUNE_STATUS_MAP(X)                                                   \
	X(OK, 0, "success")                                                   \
	X(ERR_INVALID, -1, "invalid argument")                                \
	X(ERR_NOMEM, -2, "out of memory")                                     \
	X(ERR_NO_DRIVER, -3, "CUDA driver not found")                         \
	X(ERR_NO_DEVICE, -4, "no CUDA device")                                \
	X(ERR_CUDA, -5, "CUDA driver call failed")                            \
	X(ERR_COMPILE, -6, "kernel compilation failed")                       \
	X(ERR_DB, -7, "tuning database error")                                \
	X(ERR_IO, -8, "input/output error")                                   \
	X(ERR_PARSE, -9, "malformed input")                                   \
	X(ERR_UNSUPPORTED, -10, "not supported")                              \
	X(ERR_NOT_FOUND, -11, "not found")                                    \
	X(ERR_VERIFY, -12, "result verification failed")

typedef enum {
#define KTUNE_STATUS_ENUM(name, code, text) KTUNE_##name = code,
	KTUNE_STATUS_MAP(KTUNE_STATUS_ENUM)
#undef KTUNE_STATUS_ENUM
} ktune_status;

/* Element types of operands (GEMM: f16 and bf16 in and out, fp32 accumulation). */
typedef enum {
	KTUNE_F16 = 0,
	KTUNE_BF16 = 1,
	KTUNE_F32 = 2,
} ktune_dtype;

typedef struct ktune_ctx ktune_ctx; /* opaque */

/* The library's version, e.g. 0x000100 for 0.1.0; compare with KTUNE_VERSION_NUMBER. */
KTUNE_API unsigned ktune_version_number(void);
/* The library's version as "x.y.z"; a static string. */
KTUNE_API const char *ktune_version(void);

/* A static English description of a status ("invalid argument").  Thread-safe. */
KTUNE_API const char *ktune_strerror(ktune_status s);
/* The enum name of a status without its prefix ("ERR_INVALID").  Thread-safe. */
KTUNE_API const char *ktune_status_name(ktune_status s);

/*
 * Opens a context on CUDA device `device` (an ordinal) using the tuning
 * database at `db_path`; NULL means the default path: $KTUNE_DB, else
 * $XDG_CACHE_HOME/ktune/ktune.db, else ~/.cache/ktune/ktune.db, a default
 * folder that another user owns or others may write to being skipped; ""
 * means no database.  The database is opened read-only and never changed.
 * A missing database is not an error: dispatch then uses the shipped tuning
 * and built-in defaults.  A path longer than the system allows is
 * KTUNE_ERR_INVALID.  The context
 * uses the device's primary context, so pointers from cudaMalloc work.
 * KTUNE_FALLBACK (ktune_last_dispatch()) is read here.
 *
 * The environment may ask the context to record the keys it serves without
 * a tuned entry (KTUNE_RECORD, see ktune_record_misses) and to warm the
 * cubin cache in the background (KTUNE_WARM=1, see ktune_warm); a value
 * that cannot be honoured fails the open with KTUNE_ERR_INVALID.
 *
 * On success stores a new context in *out and returns KTUNE_OK.  On failure
 * *out is NULL; if `errbuf` is not NULL, up to `errlen` bytes of the reason
 * are written there.
 */
KTUNE_API ktune_status ktune_open(const char *db_path, int device, ktune_ctx **out,
				  char *errbuf, size_t errlen);

/*
 * Releases a context and every resource it holds, after saving the keys it
 * served without a tuned entry if asked (ktune_record_misses) and stopping
 * a background warm (ktune_warm).  NULL is a no-op.
 */
KTUNE_API void ktune_close(ktune_ctx *ctx);

/*
 * The detail of the last failure on this context (NVRTC log, CUDA error text),
 * or "" if none.  The context owns the string; it is valid until the next call
 * on the context.  With several threads, the message may be another thread's.
 */
KTUNE_API const char *ktune_errmsg(const ktune_ctx *ctx);

/*
 * C = alpha * op(A) * op(B) + beta * C, all matrices row-major.
 *
 * C is [m, n] with leading dimension ldc >= n.  trans_a 'n': A is stored
 * [m, k] (lda >= k); 't': A is stored [k, m] (lda >= m).  trans_b 'n': B is
 * stored [k, n] (ldb >= n); 't': B is stored [n, k] (ldb >= k), the layout of
 * PyTorch's nn.Linear weights.  Pointers are device pointers in the device's
 * primary context; any alignment works (aligned ones get the faster variant).
 * When beta is 0, C is not read (it may hold NaN).  `stream` is a CUstream or
 * cudaStream_t, NULL for the default stream; the call is asynchronous.
 * The first call of a key compiles its kernel (or loads it from the cache),
 * or loads cuBLAS where cuBLAS serves it (ktune_last_dispatch()).  The
 * first call of a key that ktune's kernel serves untuned ("nearest",
 * "model") also enqueues a dozen timed runs of it and of cuBLAS on the
 * stream, into scratch, once; a later call keeps the faster.  Only under
 * KTUNE_FALLBACK=measure does a call wait for the stream, once a key.
 *
 * Returns KTUNE_OK, or KTUNE_ERR_INVALID for bad sizes or leading
 * dimensions, or another error with its detail in ktune_errmsg().
 * Thread-safe.
 */
KTUNE_API ktune_status ktune_gemm(ktune_ctx *ctx, char trans_a, char trans_b,
				  int64_t m, int64_t n, int64_t k, float alpha,
				  const void *a, int64_t lda, const void *b, int64_t ldb,
				  float beta, void *c, int64_t ldc, ktune_dtype dtype,
				  void *stream);

/*
 * What served the last call on this thread (of any op, on any context): a
 * static string, one of
 *
 *   "exact"    the key tuned on this GPU
 *   "arch"     the key tuned on another GPU of the same arch
 *   "shipped"  the key in the tuning built into the library for the arch
 *   "nearest"  a tuned neighbour of the same regime (GEMM: dtype, layout,
 *              alignment class and M class; near in M, N, K; not slower at
 *              this key by the performance model than its own pick)
 *   "model"    GEMM: the config the performance model picks for the key
 *   "cublas"   GEMM: cuBLAS (loaded at run time where installed), for keys
 *              ktune has no good answer for: odd leading dimensions, whose
 *              element-load kernels run several times slower than cuBLAS;
 *              tuned configs measured below 0.95 of cuBLAS's speed
 *   "default"  another op: its analytic default for the key's sizes
 *
 * The environment variable KTUNE_FALLBACK, read by ktune_open(), sets who
 * serves GEMM keys without a tuned entry of their own: "auto" (the
 * default: as above, and a key served by "nearest" or "model" is timed
 * against cuBLAS once without waiting: its first call enqueues the runs, a
 * call after they are done keeps the faster), "model" (never cuBLAS),
 * "cublas" (cuBLAS wherever it loads), "measure" (as auto, but the first
 * call of every such key, cuBLAS's too, waits for its timing).  No timing
 * is enqueued while the stream is captured into a graph, nor where C is
 * over 256 MiB.  Any other value makes ktune_open() fail with
 * KTUNE_ERR_INVALID.
 */
KTUNE_API const char *ktune_last_dispatch(const ktune_ctx *ctx);

/*
 * Tune what is used.  A context counts every call of a key that it serves
 * without a tuned entry of its own (by "nearest", "model", "cublas" or
 * "default"; not a tuned key that cuBLAS serves because it measured faster):
 * the key is noted the first time it is resolved, and each later call adds
 * one to its count with an atomic add, with no lock held and no I/O.  When
 * asked, ktune_close saves those keys, so that `ktune sweep --misses FILE`
 * (or `ktune sweep --from-db`) tunes exactly what the program used:
 *
 *   KTUNE_RECORD=PATH   (read by ktune_open) save them to the misses file
 *                       PATH, adding to the keys and calls it holds
 *   KTUNE_RECORD=db     save them into the context's database, adding up
 *                       with what other processes recorded there
 *
 * A misses file is YAML (docs/runtime.md): the GPU, then one line per key
 * with its calls and the source that served it.  ktune_open fails with
 * KTUNE_ERR_INVALID when KTUNE_RECORD names a file in a directory that does
 * not exist, or "db" for a context without a database.
 *
 * Or tune them as they come:
 *
 *   KTUNE_TUNE=background  (read by ktune_open) the first call of such a
 *                       key queues it and returns as it would have; a
 *                       thread of the context tunes the queued keys one at
 *                       a time, as `ktune tune` does (a worker process on
 *                       the same GPU, the winner stored in the database),
 *                       and a later call of the key is served by its tuning.
 *                       Nothing waits but ktune_close, for the tune in
 *                       progress; the keys still queued are dropped.  The
 *                       worker is $KTUNE_CLI, else the `ktune` beside the
 *                       library or in ../bin.  ktune_open fails with
 *                       KTUNE_ERR_INVALID for a context without a database
 *                       or another value than "off" or "background", and
 *                       KTUNE_ERR_NOT_FOUND when no ktune executable is
 *                       found.  ktune_get_stats counts the tunes.
 *   KTUNE_TUNE_MAX=N    the keys a context queues in all (default 64; 0: no
 *                       limit): a service whose shapes keep changing (a
 *                       batch of every size) tunes its first N keys, not
 *                       one after another for as long as it runs; the
 *                       later ones stay as served, counted in tune_skipped
 *                       (record them and sweep what mattered instead).
 *                       ktune_open fails with KTUNE_ERR_INVALID for a
 *                       value that is not a count.
 */

/*
 * Where ktune_close saves the keys served without a tuned entry (nothing is
 * written when there were none): the
 * misses file `path`, or the context's database when path is NULL; ""
 * stops recording (the keys are still counted).  Replaces what
 * KTUNE_RECORD asked.  Returns KTUNE_ERR_INVALID (detail in ktune_errmsg)
 * for a path too long or in a directory that does not exist, or NULL on a
 * context without a database.  ktune_close cannot report a failure to
 * save: call ktune_save_misses to see it.  Not thread-safe.
 */
KTUNE_API ktune_status ktune_record_misses(ktune_ctx *ctx, const char *path);

/*
 * Saves the keys counted so far now, as ktune_close would: to the misses
 * file `path` (created, or added to: a file of another GPU is refused and
 * left as it is), or into the context's database when path is NULL
 * (created if missing).  A long-running service may call it from time to
 * time: each save adds the calls made since the previous one, so a key's
 * calls are counted once however often it saves.  Returns KTUNE_OK or the failure, with its detail in ktune_errmsg.
 * Thread-safe with calls of the ops.
 */
KTUNE_API ktune_status ktune_save_misses(ktune_ctx *ctx, const char *path);

/* What a context's calls have cost so far (ktune_get_stats). */
typedef struct {
	int64_t calls;          /* calls of any op that resolved a key */
	int64_t keys;           /* distinct keys resolved */
	int64_t missed_keys;    /* of those, served without a tuned entry */
	int64_t missed_calls;   /* the calls of those keys */
	int64_t kernels;        /* kernels loaded (a kernel serves every key whose config compiles to it) */
	int64_t nvrtc_compiles; /* of those, compiled with NVRTC during a call */
	double nvrtc_seconds;   /* the time those compiles took */
	int64_t cache_loads;    /* of those, read from the disk cache: no NVRTC */
	int warm_state;         /* ktune_warm: 0 never asked, 1 running, 2 done */
	int64_t warm_compiled;  /* kernels the last ktune_warm compiled into the cache */
	int64_t warm_cached;    /* kernels it found there already */
	int64_t warm_failed;    /* kernels that failed to compile */
	double warm_seconds;    /* its wall time */
	int64_t tune_queued;    /* KTUNE_TUNE=background: keys waiting or being tuned */
	int64_t tune_done;      /* keys tuned and stored, served by their tuning since */
	int64_t tune_failed;    /* tunes that failed (the key stays as it was served) */
	int64_t tune_skipped;   /* keys not queued: KTUNE_TUNE_MAX reached (they stay as served) */
} ktune_stats;

/*
 * Fills *out (size: sizeof(ktune_stats) as the caller knows it, so that a
 * program built against an older header keeps working) with the context's
 * counters.  Returns KTUNE_ERR_INVALID for NULL or a size of 0.
 * Thread-safe.
 */
KTUNE_API ktune_status ktune_get_stats(ktune_ctx *ctx, ktune_stats *out, size_t size);

/*
 * A cold start without NVRTC.  Compiles, in parallel, the kernel of every
 * tuned and shipped entry of the context's device (the config dispatch
 * serves each key with) into the cubin cache, so that a key's first call
 * loads its kernel from the cache (microseconds) instead of compiling it
 * with NVRTC (0.2-3 s): ktune_get_stats's nvrtc_compiles stays 0.  wait 1:
 * returns when done, KTUNE_ERR_COMPILE if a kernel failed to compile (the
 * others are cached); wait 0: warms on a background thread with half the
 * cores and returns at once (ktune_get_stats says when it is done; calls
 * go on meanwhile, and one that comes first compiles its kernel as it
 * would have).  KTUNE_WARM=1 asks ktune_open for the background warm.
 * KTUNE_ERR_UNSUPPORTED without a usable cache (KTUNE_NO_CACHE, or a
 * cache folder another user could write to).  ktune_close stops a
 * background warm after the compile in flight, and waits for it.  Not
 * thread-safe with itself or ktune_close; thread-safe with the ops' calls.
 */
KTUNE_API ktune_status ktune_warm(ktune_ctx *ctx, int wait);

/*
 * The elementwise ops.  Common rules:
 *
 * - Sizes are element counts (int64_t); a size of 0 launches nothing.
 *   Buffers are device pointers of `dtype` (f32, f16 or bf16), in the
 *   device's primary context; any alignment works, and 16-byte aligned
 *   buffers (and row strides that are multiples of 16 bytes) get the
 *   vectorised variant.  Math is fp32; results are rounded to dtype.
 * - An output may be the same buffer as the input it replaces element for
 *   element (in place), but must not overlap any input otherwise.
 * - The call is asynchronous on `stream` (a CUstream or cudaStream_t, NULL
 *   for the default stream).  Returns KTUNE_OK, KTUNE_ERR_INVALID for bad
 *   arguments (with the detail in ktune_errmsg()), or another error.
 * - Tuned per power-of-two bucket of the sizes ('ktune tune add -n N');
 *   an untuned key runs the op's default.  Thread-safe.
 */

/* z[i] = x[i] + y[i] for 0 <= i < n. */
KTUNE_API ktune_status ktune_add(ktune_ctx *ctx, int64_t n, const void *x, const void *y, void *z,
				 ktune_dtype dtype, void *stream);

/* GeLU: exact, 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation. */
typedef enum {
	KTUNE_GELU_ERF = 0,
	KTUNE_GELU_TANH = 1,
} ktune_gelu_approx;

/* y[i] = gelu(x[i]) for 0 <= i < n. */
KTUNE_API ktune_status ktune_gelu(ktune_ctx *ctx, int64_t n, const void *x, void *y,
				  ktune_gelu_approx approx, ktune_dtype dtype, void *stream);
/* dx[i] = dy[i] * gelu'(x[i]) for 0 <= i < n. */
KTUNE_API ktune_status ktune_gelu_backward(ktune_ctx *ctx, int64_t n, const void *x, const void *dy,
					   void *dx, ktune_gelu_approx approx, ktune_dtype dtype,
					   void *stream);

/* The gate's activation of a gated linear unit. */
typedef enum {
	KTUNE_SWIGLU = 0,     /* silu(a) = a * sigmoid(a) */
	KTUNE_GEGLU = 1,      /* exact GeLU */
	KTUNE_GEGLU_TANH = 2, /* tanh-approximated GeLU */
} ktune_glu_act;

/*
 * out[r, c] = act(a[r, c]) * b[r, c] over [rows, cols]; element (r, c) of a
 * is a[r * lda + c], and likewise b, out (row strides >= cols).  a and b may
 * be two tensors or the two halves of one [rows, 2 * cols] tensor h (an LLM
 * MLP's fused up-projection): a = h, b = h + cols, lda = ldb = 2 * cols.
 */
KTUNE_API ktune_status ktune_glu(ktune_ctx *ctx, ktune_glu_act act, int64_t rows, int64_t cols,
				 const void *a, int64_t lda, const void *b, int64_t ldb, void *out,
				 int64_t ldo, ktune_dtype dtype, void *stream);
/*
 * The gradients of ktune_glu from dout: da = dout * b * act'(a) and
 * db = dout * act(a), with the same layouts (da and db may be the two
 * halves of one tensor, as a and b).
 */
KTUNE_API ktune_status ktune_glu_backward(ktune_ctx *ctx, ktune_glu_act act, int64_t rows,
					  int64_t cols, const void *a, int64_t lda, const void *b,
					  int64_t ldb, const void *dout, int64_t ld_dout, void *da,
					  int64_t ld_da, void *db, int64_t ld_db, ktune_dtype dtype,
					  void *stream);

/*
 * Dropout with a counter-based mask, 0 <= p < 1: y[i] = x[i] / (1 - p)
 * where word i % 4 of Philox4x32-10(counter = offset + i / 4, key = seed)
 * is at least p * 2^32, else 0.  No mask is stored: the same (seed,
 * offset) gives the same mask on every GPU, config and launch shape, and
 * a caller drawing fresh masks advances offset by ceil(n / 4) a call.
 */
KTUNE_API ktune_status ktune_dropout(ktune_ctx *ctx, int64_t n, float p, uint64_t seed,
				     uint64_t offset, const void *x, void *y, ktune_dtype dtype,
				     void *stream);
/* dx = dy * mask / (1 - p), the mask of the forward call with the same n, p, seed and offset. */
KTUNE_API ktune_status ktune_dropout_backward(ktune_ctx *ctx, int64_t n, float p, uint64_t seed,
					      uint64_t offset, const void *dy, void *dx,
					      ktune_dtype dtype, void *stream);

/*
 * The row-wise ops, over the last dimension of a [rows, cols] matrix.
 * Common rules, beside the elementwise ops' (buffers of `dtype`, fp32 math,
 * asynchronous on `stream`, in-place where stated, thread-safe):
 *
 * - Element (r, c) of a matrix t is t[r * ldt + c]; every row stride is
 *   >= cols.  Vectors over the columns (weight, dweight) are contiguous of
 *   `dtype`; mean and rstd are contiguous fp32, one value a row.
 * - Each row is reduced in a fixed order: the same inputs give bit-identical
 *   results on every run (no atomics).
 * - Tuned per [rows, cols]: rows by power-of-two bucket, cols exactly up to
 *   65536 and by power-of-two bucket above ('ktune tune softmax --rows R
 *   --cols C').  cols up to 262144 (softmax, cross-entropy) run tuned
 *   configs that hold a row in the registers of a thread-block cluster on
 *   sm_90.
 */

/* y = softmax(x) over each row; a row of -inf only gives zeros.  y may be x. */
KTUNE_API ktune_status ktune_softmax(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x,
				     int64_t ldx, void *y, int64_t ldy, ktune_dtype dtype, void *stream);
/* dx = y * (dy - sum over the row of y * dy), from softmax's output y.  dx may be dy. */
KTUNE_API ktune_status ktune_softmax_backward(ktune_ctx *ctx, int64_t rows, int64_t cols,
					      const void *y, int64_t ldy, const void *dy, int64_t lddy,
					      void *dx, int64_t lddx, ktune_dtype dtype, void *stream);

/*
 * RMSNorm: h = x (+ residual), rstd[r] = 1 / sqrt(mean over the row of h^2
 * + eps), y = h * rstd * weight.  With residual non-NULL the sum h is
 * rounded to dtype and written to h (the next layer's residual; h may be
 * residual); with residual NULL, h must be NULL.  rstd (rows floats) is
 * written for the backward pass.  weight may be NULL: a weight of ones
 * (a norm without its affine weight).  y may be x.
 */
KTUNE_API ktune_status ktune_rmsnorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x,
				     int64_t ldx, const void *residual, int64_t ld_residual,
				     const void *weight, float eps, void *y, int64_t ldy, float *rstd,
				     void *h, int64_t ldh, ktune_dtype dtype, void *stream);
/*
 * The gradients of ktune_rmsnorm from dy, h (x, or the residual sum h) and
 * the forward's rstd: dx, and dweight = sum over the rows of dy * h * rstd,
 * reduced deterministically (a second kernel adds per-block partial sums in
 * a fixed order; the scratch for them is the context's, per stream).  dx may
 * be dy.  weight may be NULL (ones, as in the forward); dweight may be NULL:
 * not computed (one kernel, no scratch).
 */
KTUNE_API ktune_status ktune_rmsnorm_backward(ktune_ctx *ctx, int64_t rows, int64_t cols,
					      const void *h, int64_t ldh, const void *weight,
					      const float *rstd, const void *dy, int64_t lddy, void *dx,
					      int64_t lddx, void *dweight, ktune_dtype dtype,
					      void *stream);

/*
 * LayerNorm: mean[r] = the mean of row r of x, rstd[r] = 1 / sqrt(mean over
 * the row of (x - mean[r])^2 + eps) (two passes over the row: no
 * cancellation), y = (x - mean) * rstd * weight + bias.  weight and bias
 * (cols elements of `dtype`) may each be NULL: a weight of ones, a bias of
 * zeros (PyTorch's elementwise_affine=False, bias=False); mean and rstd
 * (rows floats each) are written for the backward pass.  A row of one value gives rstd =
 * 1 / sqrt(eps) and y = bias.  y may be x.  cols up to 131072.
 */
KTUNE_API ktune_status ktune_layernorm(ktune_ctx *ctx, int64_t rows, int64_t cols, const void *x,
				       int64_t ldx, const void *weight, const void *bias, float eps,
				       void *y, int64_t ldy, float *mean, float *rstd, ktune_dtype dtype,
				       void *stream);
/*
 * The gradients of ktune_layernorm from dy, x and the forward's mean and
 * rstd, with xhat = (x - mean) * rstd and g = dy * weight: dx = rstd * (g -
 * mean over the row of g - xhat * mean over the row of g * xhat), dweight =
 * sum over the rows of dy * xhat, dbias = sum over the rows of dy, both
 * reduced deterministically (a second kernel adds per-block partial sums in
 * a fixed order; the scratch for them is the context's, per stream).  weight
 * may be NULL (ones); dweight and dbias may each be NULL: not computed
 * (neither: one kernel, no scratch).  dx may be dy.
 */
KTUNE_API ktune_status ktune_layernorm_backward(ktune_ctx *ctx, int64_t rows, int64_t cols,
						const void *x, int64_t ldx, const void *weight,
						const float *mean, const float *rstd, const void *dy,
						int64_t lddy, void *dx, int64_t lddx, void *dweight,
						void *dbias, ktune_dtype dtype, void *stream);

/*
 * Cross-entropy over the rows of logits [rows, vocab] (a row's element c at
 * logits[r * ld_logits + c]) against int64 class targets (rows of them,
 * contiguous, any alignment), with fp32 math and fp32 losses:
 *
 *     z = logits, or softcap * tanh(logits / softcap) when softcap > 0
 *     lse[r]  = log sum_c exp z[r, c]
 *     loss[r] = lse[r] - (1 - eps) z[r, t] - eps / vocab * sum_c z[r, c]
 *
 * with t = targets[r] and eps = label_smoothing (0 <= eps <= 1), as
 * PyTorch's F.cross_entropy(..., ignore_index, label_smoothing).  A row whose
 * target is ignore_index is ignored: its logits are not read, its loss and
 * lse are 0, its gradient 0.  A target outside [0, vocab) that is not
 * ignore_index makes its row's loss NaN (so a mean or sum is NaN; PyTorch
 * raises an error).  Reductions:
 *
 *     KTUNE_REDUCTION_MEAN  the sum of the rows' losses over the count of
 *                           rows not ignored; 0 when every row is ignored
 *                           (PyTorch gives NaN), and then every gradient is 0
 *     KTUNE_REDUCTION_SUM   the sum
 *     KTUNE_REDUCTION_NONE  a loss a row
 *
 * The mean and sum are deterministic (the rows' losses added in a fixed
 * order by one block, no atomics; they use the context's per-stream
 * scratch, 4 bytes a row).  Logits of magnitude 1e4 give no overflow and no
 * NaN.  vocab from 1 to 262144 (by power-of-two bucket above 65536: 'ktune
 * tune cross_entropy --rows R --vocab V'); the label smoothing, the soft
 * cap and the reduction are compiled-in variants.  rows = 0 or vocab = 0
 * launches nothing and writes nothing.
 */
typedef enum {
	KTUNE_REDUCTION_MEAN = 0,
	KTUNE_REDUCTION_SUM = 1,
	KTUNE_REDUCTION_NONE = 2,
} ktune_reduction;

/*
 * The loss: loss is rows floats for KTUNE_REDUCTION_NONE, else one; lse
 * (rows floats, required) is saved for ktune_cross_entropy_backward.
 */
KTUNE_API ktune_status ktune_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
					   int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
					   float label_smoothing, float softcap, ktune_reduction reduction,
					   float *loss, float *lse, ktune_dtype dtype, void *stream);
/*
 * The gradient of ktune_cross_entropy's loss times dloss, from the logits
 * and the saved lse:
 *
 *     dlogits[r, c] = g[r] (exp(z - lse[r]) - (1 - eps) [c == t] - eps / vocab) (1 - (z / softcap)^2)
 *
 * (the last factor when softcap > 0) with g[r] = dloss[0] / count (mean),
 * dloss[0] (sum) or dloss[r] (none): dloss is the device's fp32 gradient of
 * the loss, one float, or rows of them for none.  The same ignore_index,
 * label_smoothing, softcap and reduction as the forward call.  dlogits
 * (row stride ld_dlogits) may be logits (in place, the same row stride).
 * An ignored row's gradient is 0.
 */
KTUNE_API ktune_status ktune_cross_entropy_backward(ktune_ctx *ctx, int64_t rows, int64_t vocab,
						    const void *logits, int64_t ld_logits, const int64_t *targets,
						    int64_t ignore_index, float label_smoothing, float softcap,
						    ktune_reduction reduction, const float *lse, const float *dloss,
						    void *dlogits, int64_t ld_dlogits, ktune_dtype dtype, void *stream);
/*
 * The loss and its gradient in one pass over the logits, read once: what a
 * training step wants (forward + backward of the separate calls, one read of
 * the logits fewer, and no lse).  dloss is the gradient of the loss as it
 * will be back-propagated, on the host: 1 for loss.backward() of the mean or
 * sum; with KTUNE_REDUCTION_NONE every row's loss gets dloss (the gradient
 * of dloss times their sum).  dlogits may be logits (in place, the same row
 * stride): the logits' memory then holds the gradient, and no second buffer
 * of their size is needed.
 */
KTUNE_API ktune_status ktune_cross_entropy_fused(ktune_ctx *ctx, int64_t rows, int64_t vocab, const void *logits,
						 int64_t ld_logits, const int64_t *targets, int64_t ignore_index,
						 float label_smoothing, float softcap, ktune_reduction reduction,
						 float dloss, float *loss, void *dlogits, int64_t ld_dlogits,
						 ktune_dtype dtype, void *stream);

/*
 * The LM head's loss and gradients without its logits: with logits =
 * hidden @ weight^T (hidden [rows, dim], weight [vocab, dim], nn.Linear's
 * layout), the cross-entropy of each row as ktune_cross_entropy_fused
 * defines it (targets, ignore_index, label_smoothing, softcap), and the
 * gradients of the mean (count: the rows not ignored) or sum, times dloss:
 *
 *     loss_rows[r]  each row's loss (rows floats; 0 for an ignored row): the
 *                   mean is their sum over count, the sum their sum
 *     dhidden       [rows, dim], row stride ld_dhidden (written)
 *     dweight       [vocab, dim], row stride ld_dweight (written, not added to)
 *
 * The rows go in chunks of chunk_rows: per chunk, ktune_gemm for its logits
 * into `scratch`, ktune_cross_entropy_fused in place there, ktune_gemm for
 * its rows of dhidden and once more for its share of dweight (beta = 1
 * after the first chunk: dweight is summed in dtype, as PyTorch's addmm
 * would).  scratch holds one chunk's logits: chunk_rows * round_up(vocab, 8)
 * elements of dtype; chunk_rows = 0 takes as many rows as scratch_bytes
 * holds (a multiple of 64).  The extra memory of a call is that scratch (and
 * the GEMMs' own per-stream scratch): 512 MiB, 2048 rows at vocab 128256 in
 * bf16, against the 2 GiB of 8192 rows' logits and 2 GiB of their gradient
 * of the unfused head.  count < 0 with KTUNE_REDUCTION_MEAN makes ktune
 * count the rows not ignored: it synchronizes `stream` and copies the
 * targets to the host (not capturable in a CUDA graph); give the count to
 * stay asynchronous.  f16 and bf16 (the GEMMs'); vocab up to 262144;
 * reduction mean or sum.  rows, dim or vocab 0 launches nothing.
 */
KTUNE_API ktune_status ktune_linear_cross_entropy(ktune_ctx *ctx, int64_t rows, int64_t dim, int64_t vocab,
						  const void *hidden, int64_t ld_hidden, const void *weight,
						  int64_t ld_weight, const int64_t *targets, int64_t ignore_index,
						  float label_smoothing, float softcap, ktune_reduction reduction,
						  int64_t count, float dloss, float *loss_rows, void *dhidden,
						  int64_t ld_dhidden, void *dweight, int64_t ld_dweight,
						  int64_t chunk_rows, void *scratch, size_t scratch_bytes,
						  ktune_dtype dtype, void *stream);

/*
 * Weight-quantized GEMM (docs/quant.md).  A weight W[n, k] is held as
 * b-bit unsigned integers q (b = 8, 4, 2 or 1; 0 <= q < 2^b) packed into
 * 32-bit words, with a scale and a zero per group of `group_size`
 * consecutive weights of a row (32, 64, 128, or the whole row: per
 * channel), and dequantised by one of gemlite's four modes:
 *
 *     KTUNE_QUANT_SCALE_SHIFT  w = (q - zero) * scale   zero per group, or one for all
 *     KTUNE_QUANT_SCALE        w = q * scale            no zero
 *     KTUNE_QUANT_SHIFT        w = q - zero             no scale
 *     KTUNE_QUANT_FMA          w = q * scale + zero
 *
 * The layout (version 1; docs/quant.md): element (r, c) of W in word
 * r * RW + c / (32 / b) at bit (c % (32 / b)) * b, the first element in the
 * lowest bits, RW = k * b / 32 rounded up to a multiple of 4 (every row
 * 16-byte aligned); scales and zeros [n, k / group] row-major (per channel
 * [n, 1]), or one zero; scales and zeros of the activations' dtype.
 * k must be a multiple of 32 (32 one-bit weights fill a word; ktune asks
 * it of every format) and of the group size.  ktune_quant_pack writes this
 * layout; a caller packing its own must follow it.
 */
typedef enum {
	KTUNE_QUANT_SCALE_SHIFT = 0,
	KTUNE_QUANT_SCALE = 1,
	KTUNE_QUANT_SHIFT = 2,
	KTUNE_QUANT_FMA = 3,
} ktune_quant_mode;

typedef struct {
	int bits;              /* 8, 4, 2 or 1 bits per weight */
	int group_size;        /* 32, 64, 128, or 0: one group per row (per channel) */
	ktune_quant_mode mode;
	int zero_scalar;       /* 1: one zero for the whole weight (modes with a zero); 0: one per group */
} ktune_quant_format;

/*
 * The element counts of a packed [n, k] weight of format fmt: 32-bit words,
 * scales and zeros (0 where the mode has none; 1 for a scalar zero).  Any
 * of words, scales, zeros may be NULL.  Returns KTUNE_OK, or
 * KTUNE_ERR_INVALID with the reason in errbuf (up to errlen bytes; errbuf
 * may be NULL) for a bad format or sizes: the check every quant function
 * makes.  Needs no GPU.  Thread-safe.
 */
KTUNE_API ktune_status ktune_quant_sizes(const ktune_quant_format *fmt, int64_t n, int64_t k, int64_t *words,
					 int64_t *scales, int64_t *zeros, char *errbuf, size_t errlen);

/*
 * Quantises the weight w[n, k] (f16 or bf16 on the host, row stride ldw >=
 * k) to format fmt by rounding to nearest (ties away from zero) and packs it:
 * wq, scales and zeros (host buffers of the sizes ktune_quant_sizes gives;
 * scales or zeros may be NULL where the mode has none) in the layout above,
 * scales and zeros in `dtype`.  Per group, from its least and greatest
 * weights lo and hi, L = 2^b - 1:
 *   SCALE_SHIFT  scale = (hi - lo) / L, zero = -lo / scale (asymmetric); with
 *                one zero: zero = L / 2, scale = max(|lo|, |hi|) / zero
 *   FMA          scale = (hi - lo) / L, zero = lo; with one zero: zero = the
 *                least weight of all, scale = (hi - zero) / L
 *   SCALE        scale = (the one of lo, hi of larger magnitude) / L: the codes
 *                are unsigned, so weights of the other sign become 0
 *   SHIFT        zero = -lo (one zero: -(the least weight of all)): exact for
 *                integer weights spanning fewer than 2^b values
 * Scales and zeros are rounded to dtype before the codes are chosen, so that
 * each code is the nearest to its weight on the grid the kernels use.
 * Returns KTUNE_OK, KTUNE_ERR_INVALID (a bad format or size, as
 * ktune_quant_sizes; a NULL buffer the format needs; a NaN or infinite
 * weight), or KTUNE_ERR_NOMEM.  Needs no GPU.  Thread-safe.
 */
KTUNE_API ktune_status ktune_quant_pack(const ktune_quant_format *fmt, int64_t n, int64_t k, const void *w,
					int64_t ldw, ktune_dtype dtype, uint32_t *wq, void *scales, void *zeros);

/*
 * The inverse on the host: w[n, k] (row stride ldw >= k) = the dequantised
 * weights of wq, scales and zeros, computed in float64 and rounded to dtype
 * (f16 or bf16).  Returns KTUNE_OK or KTUNE_ERR_INVALID.  Thread-safe.
 */
KTUNE_API ktune_status ktune_quant_unpack(const ktune_quant_format *fmt, int64_t n, int64_t k, const uint32_t *wq,
					  const void *scales, const void *zeros, ktune_dtype dtype, void *w,
					  int64_t ldw);

/*
 * C[m, n] = A[m, k] * dequant(Wq)[n, k]^T (+ bias[n]), fp32 accumulation,
 * rounded to dtype once.  A and C are device buffers of `dtype` (f16 or
 * bf16), element (i, j) of A at a[i * lda + j], of C at c[i * ldc + j]; wq,
 * scales, zeros in fmt's layout on the device, scales and zeros of `dtype`
 * (scales NULL for KTUNE_QUANT_SHIFT, zeros NULL for KTUNE_QUANT_SCALE);
 * bias (n elements of dtype) may be NULL.  C must not overlap an input.
 *
 * Alignment: a and wq 16-byte aligned, lda a multiple of 8 (16 bytes),
 * scales, zeros, bias and c 2-byte aligned, ldc >= n any.  A bad format or
 * size, k not a multiple of 32 or of the group size, a misaligned buffer or
 * stride, a NULL buffer the format needs: KTUNE_ERR_INVALID with the
 * reason in ktune_errmsg().
 *
 * Tuned per (dtype, bits, group, mode, packing version, m by bucket 1, 2,
 * 4, 8, 16, 32, 64 then powers of two, n, k); the tuner picks a split-K
 * GEMV (small m) or a tiled mma.sync kernel ('ktune tune gemm_quant --bits
 * 4 --group 128 -m 1 -n 4096 -k 4096').  Results are deterministic: split-K
 * partial sums are added in a fixed order (a second kernel; its fp32
 * scratch is the context's, per stream).  Asynchronous on `stream`.
 * Thread-safe.
 */
KTUNE_API ktune_status ktune_gemm_quant(ktune_ctx *ctx, const ktune_quant_format *fmt, int64_t m, int64_t n,
					int64_t k, const void *a, int64_t lda, const uint32_t *wq, const void *scales,
					const void *zeros, const void *bias, void *c, int64_t ldc, ktune_dtype dtype,
					void *stream);

/* ---------------------------------------------------------------- attention */

/*
 * Flash attention, forward: for each batch b and query head h,
 *
 *     O = softmax(scale * Q K^T + mask) V,  lse[b][h][i] = log(sum_j exp(scale * q_i . k_j))
 *
 * over the keys j that query i sees.  q and o are [batch, sq, hq, head_dim],
 * k and v [batch, sk, hkv, head_dim], of `dtype` (f16 or bf16; fp32
 * accumulation); each *_strides is 3 strides in elements, of the batch,
 * sequence and head dimensions (PyTorch's BSHD is { sq*hq*D, hq*D, D },
 * BHSD { hq*sq*D, D, sq*D }), NULL for packed BSHD; head_dim is contiguous.
 * Query head h reads K/V head h / (hq / hkv) (grouped-query attention: hq
 * a multiple of hkv).  causal: query i sees key j when j <= i + sk - sq
 * (aligned bottom-right, as FlashAttention-2); otherwise every key.  A row
 * that sees no key (causal with sq > sk) gets zeros and lse = -inf, never
 * NaN.  lse is fp32 [batch, hq, sq], contiguous, for the backward pass.
 *
 * head_dim is 64, 128 or 256; sk >= 1; batch, sq or hq of 0 do nothing;
 * batch and hq at most 65535, sq and sk at most 2^30; scale > 0 (usually
 * 1 / sqrt(head_dim)).  q, k, v and o must be 16-byte aligned with strides
 * that are multiples of 8 elements (those of dimensions longer than 1);
 * KTUNE_ERR_INVALID otherwise.  o must not overlap q, k or v.  Thread-safe.
 */
KTUNE_API ktune_status ktune_attention_fwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq,
					   int64_t hkv, int64_t head_dim, const void *q, const int64_t *q_strides,
					   const void *k, const int64_t *k_strides, const void *v,
					   const int64_t *v_strides, void *o, const int64_t *o_strides, float *lse,
					   float scale, int causal, ktune_dtype dtype, void *stream);
/*
 * Flash attention, backward: dq, dk and dv, the gradients of
 * ktune_attention_fwd's O given dout (its gradient), from q, k, v, the
 * forward's o and lse, with the same sizes, scale and causal flag.  dout
 * and dq are shaped as q, dk and dv as k; each *_strides as in the forward
 * (NULL: packed BSHD).  lse is as the forward wrote it ([batch, hq, sq],
 * contiguous).  dk and dv of a K/V head sum over the query heads that read
 * it (GQA).  Rows that saw no key give no gradient.  Scratch (fp32, about
 * (2 + D) floats a query row and head, times the slices below) is the
 * context's, per stream, or, during a CUDA graph capture, the graph's own.
 *
 * deterministic = 0: dq is accumulated with fp32 atomics (fastest; the
 * last bits may differ run to run); 1: with per-block slices summed in a
 * fixed order: bit-identical results run to run (on the same GPU, config
 * and sizes), at the cost of more scratch and some speed.
 *
 * head_dim is 64 or 128; sq >= 1; other limits and alignment as the
 * forward's (dout, dq, dk, dv too).  The outputs must not overlap the
 * inputs.  Thread-safe.
 */
KTUNE_API ktune_status ktune_attention_bwd(ktune_ctx *ctx, int64_t batch, int64_t sq, int64_t sk, int64_t hq,
					   int64_t hkv, int64_t head_dim, const void *q, const int64_t *q_strides,
					   const void *k, const int64_t *k_strides, const void *v,
					   const int64_t *v_strides, const void *o, const int64_t *o_strides,
					   const void *dout, const int64_t *dout_strides, const float *lse, void *dq,
					   const int64_t *dq_strides, void *dk, const int64_t *dk_strides, void *dv,
					   const int64_t *dv_strides, float scale, int causal, int deterministic,
					   ktune_dtype dtype, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* KTUNE_H */
