/*
 * op.h - the op registry.  Every op ktune tunes is one struct ktune_op,
 * filled by its own src/ops/<op>.c and listed in src/ops/ops.c's table (as
 * git lists its builtins).  Keys, the database, export and import, sweep
 * specs, the CLI and the tuner know an op through this struct: its key
 * fields and their roles, its template families, how a key's problem is
 * laid out (buffers, kernel arguments, launch geometry), its float64
 * reference, tolerances, bytes and FLOPs, and the default for a key that
 * nobody tuned.
 *
 * Every field of a key has one role (ktune_field_role): compiled in (a
 * variant part or the dtype: a define), tuned (a size, stored in the key
 * after its bucketing rule) or runtime (a kernel argument, never in the
 * key).  Mixing them is the commonest tuner bug: a flag missing from the
 * key, or a length in the key that re-tunes mid-training.
 *
 * Ops other than GEMM are pure: no CUDA here.  Their buffers are described
 * as data, their reference runs on the host, and the worker
 * (src/tuner/worker-op.c) and the runtime (src/runtime/op_api.c) do the GPU
 * calls.  GEMM's two families, its cuBLAS baseline and its tuner predate
 * the registry: its entry names its fields and families, and the tuner and
 * runtime still take its own path (src/ops/gemm.c).
 */
#ifndef KTUNE_OP_H
#define KTUNE_OP_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "key.h"
#include "ops/config.h"
#include "search/space.h"

enum ktune_field_role {
	KTUNE_ROLE_COMPILED, /* in the key and compiled in: a part of the variant */
	KTUNE_ROLE_TUNED,    /* in the key after bucketing: one size tuned for a range of sizes */
	KTUNE_ROLE_RUNTIME,  /* a kernel argument, never in the key (the caller's exact sizes) */
};

/* A field of an op's key as the CLI (--NAME), sweep specs and export files name it. */
struct ktune_op_field {
	const char *name;           /* "n", "rows", "approx" */
	const char *help;           /* "elements (tuned in powers of two)" */
	enum ktune_field_role role;
	int dim;                    /* a size: 0, 1, 2 (the key's m, n, k); -1: a part of the variant */
	const char *const *choices; /* a variant part: its values, NULL-terminated; the first is the default */
};

/* Kernels in one family: an op made of several (a backward pass and its reduction) times them as one. */
#define KTUNE_OP_MAX_KERNELS 3

/* A template family: kernels/templates/<source> with its search space <space>. */
struct ktune_family {
	const char *name;   /* the results' family column and the space's `family:` */
	const char *source; /* "add.cu" */
	const char *space;  /* "add.yaml" */
	/* its kernels' extern "C" names; the first is the one a single-kernel op launches */
	const char *entries[KTUNE_OP_MAX_KERNELS];
	/*
	 * NULL: compiled for the device's own arch, runs on any.  Else the one
	 * arch its kernels compile for, and they run only on the devices of
	 * that arch less its suffix ("sm_90a": wgmma and setmaxnreg, on sm_90
	 * alone); ktune__op_family_runs says which.
	 */
	const char *arch;
	/*
	 * Row-wise families: 1 if its kernels take vectors (VEC > 1) in the
	 * unaligned class too, each row read from the vector-aligned address
	 * at or below its start (src/ops/rowwise.h); 0: one element at a
	 * time there.
	 */
	int shifted_rows;
};

#define KTUNE_OP_MAX_BUFS 10

/* NVRTC -D options an op's defines() gives at most (compile.h's KTUNE_MAX_OPTIONS holds them). */
#define KTUNE_OP_MAX_DEFINES 20

/* What a buffer's elements are. */
enum ktune_buf_type {
	KTUNE_BUF_ELEM, /* the key's dtype */
	KTUNE_BUF_F32,  /* fp32 whatever the dtype: statistics saved for a backward pass */
	/*
	 * int64 indices (cross-entropy's targets), inputs only, read one at a
	 * time: their alignment is not the call's.  The tuner's inputs are the
	 * floor of a value from input_range, -1 where that is negative (an
	 * index to ignore).
	 */
	KTUNE_BUF_I64,
	KTUNE_BUF_U32,  /* 32-bit words (packed quantized weights); inputs only: the tuner fills
			   them with input_range's values, integers in [lo, hi) */
};

/*
 * Whether a caller may leave a buffer NULL, and what the op then sees (the
 * context's vectors, runtime/context.h): an input read as ones or zeros (a
 * norm without its affine weight or bias), an output written where nobody
 * reads it (a gradient not wanted).  Vectors only, up to
 * KTUNE_CONSTANT_ELEMS elements.  KTUNE_OR_NULL: the kernel gets 0 and
 * tells (any size; the call's `absent` bit is set too).
 */
enum ktune_buf_optional {
	KTUNE_REQUIRED,
	KTUNE_OR_ONES,
	KTUNE_OR_ZEROS,
	KTUNE_OR_DISCARD,
	KTUNE_OR_NULL,
};

/* One buffer of an op's problem. */
struct ktune_op_buf {
	const char *name; /* "x", "dy" */
	int output;       /* 1: written by the kernel (poisoned before each run, checked after) */
	int64_t elems;    /* elements, row stride included */
	int64_t ld;       /* its row stride in the tuner's packed layout; 0: one-dimensional */
	enum ktune_buf_type type;
	enum ktune_buf_optional optional; /* what NULL means in a call; the tuner always passes a buffer */
};

/* A vector of the key's dtype that a caller may leave NULL (an affine weight, its gradient). */
#define KTUNE_OPTIONAL(name, output, elems, or) { (name), (output), (elems), 0, KTUNE_BUF_ELEM, (or) }

/* The buffers of a key's problem as the tuner lays them out (packed, aligned). */
struct ktune_op_layout {
	int nbufs;
	struct ktune_op_buf bufs[KTUNE_OP_MAX_BUFS];
};

/* Integer arguments of a call beyond its sizes and row strides (struct ktune_op_call's iarg). */
#define KTUNE_OP_MAX_IARGS 32

/*
 * One call of an op: its device buffers (in the op's buffer order), the
 * caller's exact sizes, row strides in elements, and the op's scalars.
 */
struct ktune_op_call {
	uint64_t buf[KTUNE_OP_MAX_BUFS];
	int64_t size[KTUNE_KEY_DIMS]; /* as the key's m, n, k, before bucketing */
	int64_t ld[KTUNE_OP_MAX_BUFS]; /* 0 where the op has no strides */
	float p;                       /* dropout's probability */
	uint64_t seed, offset;         /* dropout's Philox key and counter offset; offset: cross-entropy's
					  ignore_index (an int64) */
	double scalar[4];              /* an op's other scalars, as its file says (a norm's epsilon) */
	uint64_t workspace;            /* device scratch of the bytes the op's workspace() asks */
	unsigned absent;               /* bit i: buffer i was NULL in the call, served as its optional says */
	/*
	 * An op's other integer arguments, as its file says (attention: the
	 * heads and each tensor's batch, sequence and head strides); all 0 in
	 * the tuner's problem, which the op then lays out as layout() says.
	 */
	int64_t iarg[KTUNE_OP_MAX_IARGS];
};

/* Kernel arguments as cuLaunchKernel takes them: argv[i] points into slot[i]. */
#define KTUNE_OP_MAX_ARGS 32
struct ktune_op_args {
	int n;
	void *argv[KTUNE_OP_MAX_ARGS];
	unsigned char slot[KTUNE_OP_MAX_ARGS][8];
};

/* A launch: the kernel's grid, block and dynamic shared memory. */
struct ktune_op_launch {
	unsigned grid[3], block[3];
	unsigned smem;
};

/* One kernel of a call made of several: which of the family's entries, its launch and arguments. */
struct ktune_op_step {
	int entry;
	struct ktune_op_launch launch;
	struct ktune_op_args args;
};

struct ktune_op {
	const char *name;    /* "gemm", "add", ...: the key's op */
	const char *summary; /* one line for 'ktune help tune' */
	const struct ktune_op_field *fields;
	int nfields;
	const struct ktune_family *families;
	int nfamilies;
	const ktune_dtype *dtypes; /* the element types it takes */
	int ndtypes;
	/* Its section of the built-in default suite, as a sweep spec writes it (YAML); NULL: none. */
	const char *suite;

	/* The key.  NULL key_check: every size >= 1 and <= KTUNE_OP_MAX_SIZE. */
	int (*key_check)(const struct ktune_key *key, struct ktune_err *e);
	/* A call's exact sizes to the key tuned for them (the bucketing of tuned fields). */
	void (*key_bucket)(struct ktune_key *key);
	double (*bytes)(const struct ktune_key *key); /* fewest bytes moved */
	double (*flops)(const struct ktune_key *key);

	/* Everything below is NULL for GEMM (src/ops/gemm.c has its own). */

	/* The buffers of the key's problem (packed rows: the tuner's layout). */
	void (*layout)(const struct ktune_key *key, struct ktune_op_layout *out);
	/*
	 * Inputs for the tuner and the tests: input buffer i's values, uniform
	 * in [lo, hi) (they are rounded to the dtype).
	 */
	void (*input_range)(const struct ktune_key *key, int buf, double *lo, double *hi);
	/*
	 * The scalars of the tuner's problem (call->p, scalar[]), after the
	 * defaults (p 0.1, scalar[0] 1e-5: dropout's p, a norm's epsilon) and
	 * before the reference; NULL: the defaults.  call->size holds the sizes.
	 */
	void (*problem_scalars)(const struct ktune_key *key, struct ktune_op_call *call);
	/*
	 * The float64 reference on the host: reads the input buffers of `bufs`
	 * (layout order, packed as layout() says), writes the output ones.
	 */
	void (*reference)(const struct ktune_key *key, const struct ktune_op_call *call,
			  double *const *bufs);
	/* Largest accepted error of output buffer `buf`, relative to max(1, |reference|). */
	double (*tolerance)(const struct ktune_key *key, int buf);
	/* 0 if the config is worth timing for the key, else 1 with the reason. */
	int (*prune)(const struct ktune_key *key, const struct ktune_config *c, int sm_count,
		     char *why, size_t len);
	/* NVRTC -D options for the key's variant of the config; at most max strings of 48 bytes. */
	int (*defines)(const struct ktune_key *key, const struct ktune_config *c, char opts[][48],
		       int max);
	/*
	 * An op of one kernel (its family's first entry): grid and block for a
	 * call on a device of sm_count SMs, and the kernel's arguments.
	 */
	void (*geometry)(const struct ktune_key *key, const struct ktune_config *c,
			 const struct ktune_op_call *call, int sm_count, struct ktune_op_launch *out);
	void (*args)(const struct ktune_key *key, const struct ktune_op_call *call,
		     struct ktune_op_args *out);
	/*
	 * An op of several kernels fills steps instead: the kernels of a call in
	 * launch order (at most KTUNE_OP_MAX_KERNELS), returning how many.  They
	 * run on one stream and are timed as one.
	 */
	int (*steps)(const struct ktune_key *key, const struct ktune_config *c,
		     const struct ktune_op_call *call, int sm_count, struct ktune_op_step *out);
	/* Bytes of device scratch a call needs (call->workspace); NULL: none. */
	size_t (*workspace)(const struct ktune_key *key, const struct ktune_config *c,
			    const struct ktune_op_call *call, int sm_count);
	/* The config for a key nobody tuned, from what is known of the device. */
	struct ktune_config (*default_config)(const struct ktune_key *key, int sm_count);
	/*
	 * Optional: a better default on a device of this arch, from a family
	 * that runs only there (attention's wgmma forward and backward on
	 * sm_90): 1 with
	 * *out set, or 0 where default_config's serves.  Dispatch asks it
	 * first for a key with no tuned entry and no neighbour.
	 */
	int (*arch_default)(const struct ktune_key *key, int sm_count, const char *arch, struct ktune_config *out);
	/* How far apart two keys of the same op, dtype and variant are, for "nearest". */
	double (*distance)(const struct ktune_key *a, const struct ktune_key *b);
	/*
	 * Optional: a neighbour's config that this key's prune refuses, fitted
	 * to the key by its launch parameters alone (the same compiled kernel):
	 * 1 with *c changed and kept by the prune, else 0 with *c as it was.
	 * Dispatch asks it before passing a neighbour over ("nearest").
	 */
	int (*fit)(const struct ktune_key *key, struct ktune_config *c, int sm_count);
};

/* Largest size of any op's key field. */
#define KTUNE_OP_MAX_SIZE (INT64_C(1) << 34)

/* Every op, in table order (gemm first); the list ends with NULL. */
extern const struct ktune_op *const ktune__ops[];

/* The op called `name`, or NULL. */
const struct ktune_op *ktune__op_find(const char *name);
/* The op of a key; NULL for a key of no known op. */
const struct ktune_op *ktune__op_of(const struct ktune_key *key);
/* "gemm, add, gelu, glu, dropout": for messages. */
const char *ktune__op_names(void);
/* Whether the op is GEMM (its own tuner and runtime path). */
int ktune__op_is_gemm(const struct ktune_op *op);
int ktune__op_compute_bound(const struct ktune_op *op, const struct ktune_key *key);

/*
 * Checks a whole key: a known op, a dtype it takes, a variant made of its
 * fields' choices, sizes in range, and the op's own check.  0 or
 * KTUNE_ERR_INVALID with the reason ("gelu: approx 'fast' is not one of
 * erf, tanh").
 */
int ktune__op_key_check(const struct ktune_key *key, struct ktune_err *e);

/* The key's variant part called `field` ("approx" of "tanh,bwd"), into buf; -1 if none. */
int ktune__op_variant_get(const struct ktune_op *op, const struct ktune_key *key,
			  const char *field, char *buf, size_t len);
/* Index of a variant part's value among its field's choices, or -1. */
int ktune__op_variant_index(const struct ktune_op *op, const struct ktune_key *key, const char *field);
/*
 * Builds a key's variant from one value per variant field (NULL: the
 * field's default), in field order, joined by ','.  -1 if a value is not
 * among its field's choices (the message names the field).
 */
int ktune__op_variant_set(const struct ktune_op *op, struct ktune_key *key, const char *const *values,
			  struct ktune_err *e);

/* The embedded space of an op's family, parsed once (thread-safe); NULL with e set. */
const struct ktune_space *ktune__op_space(const struct ktune_op *op, int family, struct ktune_err *e);
/* The family called `name` among the op's, or -1. */
int ktune__op_family_index(const struct ktune_op *op, const char *name);
/*
 * 1 if the op's family runs on a device of `arch` ("sm_90"): a family
 * without an arch of its own runs on any; one with "sm_90a" on "sm_90" and
 * "sm_90a" only.  NULL arch: 1 (any device: listings, the tests' spaces).
 */
int ktune__op_family_runs(const struct ktune_op *op, int family, const char *arch);
/* The arch to compile the family's kernels for on a device of `arch`: the family's own, or `arch`. */
const char *ktune__op_compile_arch(const struct ktune_op *op, int family, const char *arch);
/* sha256 of a family's source (and the prelude it includes): its results' template hash. */
const char *ktune__op_family_hash(const struct ktune_op *op, int family);
/*
 * The template hash a result of the op's family carries when tuned with the
 * current source: GEMM's, its source's (ktune__gemm_family_hash); another
 * op's, ktune__op_family_hash.
 */
const char *ktune__result_hash(const struct ktune_op *op, int family);
/* 1 if a result of that family with this template hash was tuned with the current source. */
int ktune__op_result_fresh(const struct ktune_op *op, const char *family, const char *template_hash);

/*
 * 1 if a result of the key's op, of that family with this template hash,
 * was tuned with the current source of its family (GEMM's families too).
 */
int ktune__result_fresh(const struct ktune_key *key, const char *family, const char *template_hash);

/* "VEC=8,UNROLL=2,THREADS=256": the config's parameters by its family's space, in order. */
int ktune__op_config_format(const struct ktune_op *op, const struct ktune_config *c, char *buf,
			    size_t len);
/*
 * Parses a config text of the named family: every parameter of its space
 * once, in any order, each among its values, the space's constraints held.
 */
int ktune__op_config_parse(const struct ktune_op *op, const char *family, const char *text,
			   struct ktune_config *c, struct ktune_err *e);
/* A parameter of a config by name (its family's space), or `otherwise`. */
long ktune__op_param(const struct ktune_op *op, const struct ktune_config *c, const char *name,
		     long otherwise);
/*
 * Registers a thread has under __launch_bounds__(threads, MIN_BLOCKS), the
 * templates' MIN_BLOCKS = min_warps * 32 / threads (at least 1): 65536
 * over the threads of that many blocks, at most 255.
 */
long ktune__op_thread_registers(long threads, long min_warps);

/*
 * Every admitted config of the op's families that run on a device of
 * `arch` (ktune__op_family_runs; NULL: every family) and that prune keeps
 * for the key; with budget > 0, a seeded random sample of that many.
 * malloc'd.  The configs of a family that does not run there are not
 * counted in npruned: they were never candidates.
 */
int ktune__op_candidates(const struct ktune_op *op, const struct ktune_key *key, const char *arch, int sm_count,
			 int budget, unsigned seed, struct ktune_config **out, int *n, int *npruned,
			 struct ktune_err *e);

/*
 * Moves a seeded random sample of `keep` of the n configs to the front (a
 * partial shuffle), so that a budgeted sweep run again tries the same ones.
 */
void ktune__sample_configs(struct ktune_config *cfgs, int n, int keep, unsigned seed);

/*
 * A call's alignment class: every buffer 16-byte aligned, every row stride a
 * multiple of 16 bytes (in its buffer's element size, from the key's layout);
 * KTUNE_BUF_I64 buffers, read one index at a time, do not count.
 */
int ktune__op_call_aligned(const struct ktune_key *key, const struct ktune_op_layout *layout,
			   const struct ktune_op_call *call);
/* The alignment class of an op's problem laid out packed, as the tuner lays it out (1 for GEMM: it pads). */
int ktune__op_packed_aligned(const struct ktune_key *key);

/*
 * Whether two (key, config) pairs of an op compile to the same kernel: the
 * same family and the same NVRTC defines (configs that differ only in
 * launch parameters, keys whose sizes give the same compiled constants).
 */
int ktune__op_same_kernel(const struct ktune_op *op, const struct ktune_key *ka, const struct ktune_config *a,
			  const struct ktune_key *kb, const struct ktune_config *b);

/* Buffer buf's row stride: the caller's, or the row length call->size[1] in the tuner's packed layout (ld 0). */
int64_t ktune__op_ld(const struct ktune_op_call *call, int buf);

/* Bytes per element of a buffer of the key's problem. */
int ktune__op_buf_size(const struct ktune_key *key, const struct ktune_op_buf *buf);

/* The kernels of a call: steps(), or the one kernel of geometry() and args().  Returns how many. */
int ktune__op_steps(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
		    const struct ktune_op_call *call, int sm_count, struct ktune_op_step *out);


#endif
