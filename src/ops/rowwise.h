/*
 * rowwise.h - what the row-wise ops (softmax.c, and the ones after it) share: their
 * keys, tunables, compiled constants, launch geometry, pruning and default
 * config (kernels/templates/rowwise.cuh holds the device side).
 *
 * A row-wise key is [rows, cols]: rows (the key's m) tuned by power-of-two
 * bucket, cols (n) exactly up to 65536 and by power-of-two bucket above;
 * strides are runtime arguments.  Every row-wise space has VEC (elements
 * per vector access), ROW_THREADS (threads per row), THREADS (per block),
 * CLUSTER (blocks per row), MIN_WARPS, CACHE and BLOCKS_PER_SM (a launch
 * parameter: the grid is at most SMs x BLOCKS_PER_SM blocks walking the
 * rows; 0: one pass).  The element type, the alignment class and COLS
 * (the row length the registers are sized for) are compiled in.  The
 * element types, kernel-argument helpers and tolerances are elementwise.h's.
 *
 * Unaligned rows: a family whose kernels shift rows (its shifted_rows,
 * op.h) reads each row in vectors from the vector-aligned address at or
 * below its start, s = 0 to VEC - 1 elements before it, the partial first
 * and last vectors element by element: the unaligned class takes any VEC
 * there, and a thread holds a row of cols + VEC - 1 elements.  Other
 * families take the unaligned class one element at a time (VEC = 1).
 */
#ifndef KTUNE_ROWWISE_H
#define KTUNE_ROWWISE_H

#include "ops/elementwise.h"

/* Rows by power of two; cols exactly up to this, by power of two above. */
#define KTUNE_ROWWISE_EXACT_COLS 65536

/* The row-wise bucketing of a key's rows and cols. */
void ktune__rw_key_bucket(struct ktune_key *key);

/* A config's parameters as the kernels see them for a key. */
struct ktune_rw_shape {
	int vec;         /* VEC_W: VEC when aligned or the family shifts rows, else 1 */
	int shift;       /* the most a row is shifted: VEC_W - 1 for the unaligned class of such a family, else 0 */
	int row_threads; /* ROW_THREADS */
	int threads;     /* THREADS */
	int cluster;     /* CLUSTER */
	int rows_per_block;
	int items;       /* vectors per thread: ceil((cols + shift) / (CLUSTER * ROW_THREADS * VEC_W)) */
	long blocks_per_sm;
};
struct ktune_rw_shape ktune__rw_shape(const struct ktune_key *key, const struct ktune_config *c);

/*
 * The elementwise defines (-DDTYPE, -DALIGNED, the space's compiled
 * parameters) and -DCOLS (items x span less the shift: the longest row
 * the registers hold, so that keys needing as many registers share a
 * kernel).
 */
int ktune__rw_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max);

/*
 * Clusters of the grid for `rows` rows: one per ROWS_PER_BLOCK rows, at
 * most SMs x BLOCKS_PER_SM blocks when that is set.
 */
int64_t ktune__rw_clusters(const struct ktune_rw_shape *s, int64_t rows, int sm_count);
/*
 * Clusters of a backward pass's grid (one partial row of its column sums
 * each): as ktune__rw_clusters, capped at one block an SM when the config
 * has no cap (the prune drops those; a default nobody tuned still runs).
 */
int64_t ktune__rw_walk_clusters(const struct ktune_key *key, const struct ktune_config *c, int64_t rows,
				int sm_count);

/* The launch of a row kernel: CLUSTER x clusters blocks of THREADS. */
void ktune__rw_launch(const struct ktune_rw_shape *s, int64_t clusters, struct ktune_op_launch *out);

/*
 * Vectors wider than 16 bytes or, unless the family shifts rows, than one
 * element unaligned; a thread's
 * share of `raw_rows` rows in their own type and `f32_rows` in fp32 beyond
 * the registers THREADS and MIN_WARPS leave it; more than 16 vectors a
 * thread (32 single elements); groups
 * mostly idle (a row span of twice cols, beyond the smallest group), or
 * blocks of idle groups (more groups than rows).
 */
int ktune__rw_prune(const struct ktune_key *key, const struct ktune_config *c, int raw_rows, int f32_rows,
		    char *why, size_t len);

/*
 * The stream families (rowstream.cuh: a row streamed by a block or by the
 * CLUSTER blocks of a cluster, 16-byte vectors, RELOAD's chunks kept in
 * dynamic shared memory).  A block's chunk of a row of `cols`, in vectors;
 * RELOAD's shared memory for a call of `cols`, `tensors` chunks, or 0
 * where they do not fit (or RELOAD is 0); the launch, a cluster a row,
 * with `smem` bytes.
 */
int64_t ktune__rw_stream_chunk(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			       int64_t cols);
int64_t ktune__rw_stream_keep(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			      int64_t cols, int tensors);
void ktune__rw_stream_launch(const struct ktune_op *op, const struct ktune_config *c, int64_t rows, int sm_count,
			     int64_t smem, struct ktune_op_launch *out);
/*
 * Their common rules: a thread's `need` registers (the op's estimate for
 * its UNROLL) within what THREADS and MIN_WARPS leave, and no block with
 * fewer vectors of its chunk than threads.  With `long_rows` (softmax's and
 * RMSNorm's, which the register families serve otherwise): the aligned
 * class alone, rows of 1024 vectors or more, RELOAD where `tensors` chunks
 * fit.
 */
int ktune__rw_stream_prune(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			   long need, int long_rows, int tensors, char *why, size_t len);
/*
 * A stream family's default: `threads` threads loading `unroll` vectors at
 * once, in a cluster of as many blocks (up to 8) as keep a block's chunk
 * within `chunk_max` vectors, `reload`, `min_warps`; where the op's prune
 * refuses it, the same with RELOAD 0 (a chunk past shared memory).  0, or
 * 1 where neither is admitted.
 */
int ktune__rw_stream_default(const struct ktune_op *op, const struct ktune_key *key, int family, long threads,
			     long unroll, int64_t chunk_max, long reload, long min_warps, struct ktune_config *out);
/*
 * Bytes of shared memory the ring of a config with RING (rowring.cuh)
 * takes for `tensors` ringed tensors and `floats` per-row floats (a
 * norm's saved mean or rstd); 0 without one.
 */
int64_t ktune__rw_ring_bytes(const struct ktune_key *key, const struct ktune_config *c, int tensors, int floats);
/*
 * A ring (RING > 0) on the unaligned class or with vectors under 4 bytes
 * (cp.async's smallest copy), or whose blocks, with `smem` bytes of the
 * kernel's own shared memory, do not fit BLOCKS_PER_SM to an SM.
 */
int ktune__rw_ring_prune(const struct ktune_key *key, const struct ktune_config *c, int tensors, int floats,
			 int64_t smem, char *why, size_t len);
/*
 * The analytic default: 16-byte vectors (unaligned: single elements, unless
 * the family shifts rows) and the fewest threads per row
 * the op's prune admits, from 4 vectors a thread up, 256 threads a block at
 * least, a cluster when one block's registers cannot hold a row.
 */
struct ktune_config ktune__rw_default(const struct ktune_op *op, const struct ktune_key *key, long blocks_per_sm);

/* Squared distance in log space of rows and cols, cols weighing 4 times (same op, dtype, variant). */
double ktune__rw_distance(const struct ktune_key *a, const struct ktune_key *b);

/*
 * KTUNE_OK if the row strides of call->ld[bufs[0..n-1]] are all >= cols,
 * else "WHAT: a row stride (L) is less than cols = C" recorded in ctx and
 * KTUNE_ERR_INVALID: the public functions' check of their arguments.
 */
ktune_status ktune__rw_check_strides(ktune_ctx *ctx, const char *what, int64_t cols,
				     const struct ktune_op_call *call, const int *bufs, int n);

#endif
