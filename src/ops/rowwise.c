/*
 * rowwise.c - the tunables and launch contract the row-wise ops share
 * (rowwise.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/rowwise.h"
#include "runtime/op_run.h"

static int64_t pow2_ceil(int64_t n)
{
	int64_t b = 1;
	while (b < n && b < KTUNE_OP_MAX_SIZE)
		b <<= 1;
	return b;
}

void ktune__rw_key_bucket(struct ktune_key *key)
{
	key->m = pow2_ceil(key->m);
	if (key->n > KTUNE_ROWWISE_EXACT_COLS)
		key->n = pow2_ceil(key->n);
}

/* Whether the config's family reads unaligned rows in vectors, each shifted to an aligned start. */
static int shifts_rows(const struct ktune_op *op, const struct ktune_config *c)
{
	return op && c->family >= 0 && c->family < op->nfamilies && op->families[c->family].shifted_rows;
}

struct ktune_rw_shape ktune__rw_shape(const struct ktune_key *key, const struct ktune_config *c)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_rw_shape s;
	s.vec = key->aligned || shifts_rows(op, c) ? (int)ktune__op_param(op, c, "VEC", 1) : 1;
	s.threads = (int)ktune__op_param(op, c, "THREADS", 256);
	s.row_threads = (int)ktune__op_param(op, c, "ROW_THREADS", s.threads);
	s.cluster = (int)ktune__op_param(op, c, "CLUSTER", 1);
	s.blocks_per_sm = ktune__op_param(op, c, "BLOCKS_PER_SM", 0);
	if (s.vec < 1)
		s.vec = 1;
	s.shift = key->aligned ? 0 : s.vec - 1; /* a row as much as VEC - 1 elements past its aligned start */
	if (s.row_threads < 1 || s.row_threads > s.threads)
		s.row_threads = s.threads;
	if (s.cluster < 1)
		s.cluster = 1;
	s.rows_per_block = s.threads / s.row_threads;
	int64_t span = (int64_t)s.cluster * s.row_threads * s.vec;
	int64_t items = (key->n + s.shift + span - 1) / span;
	s.items = items < 1 ? 1 : items > 1 << 20 ? 1 << 20 : (int)items;
	return s;
}

int ktune__rw_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	int n = ktune__ew_defines(key, c, opts, max - 1);
	if (n < 0)
		return n;
	snprintf(opts[n++], 48, "-DCOLS=%lld", (long long)s.items * s.cluster * s.row_threads * s.vec - s.shift);
	return n;
}

int64_t ktune__rw_clusters(const struct ktune_rw_shape *s, int64_t rows, int sm_count)
{
	int64_t clusters = (rows + s->rows_per_block - 1) / s->rows_per_block;
	if (s->blocks_per_sm > 0 && sm_count > 0 && clusters > s->blocks_per_sm * sm_count / s->cluster)
		clusters = s->blocks_per_sm * sm_count / s->cluster;
	if (clusters < 1)
		clusters = 1;
	if (clusters > 0x7fffffff / s->cluster)
		clusters = 0x7fffffff / s->cluster; /* the kernels walk the rest */
	return clusters;
}

int64_t ktune__rw_walk_clusters(const struct ktune_key *key, const struct ktune_config *c, int64_t rows,
				int sm_count)
{
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	if (s.blocks_per_sm <= 0)
		s.blocks_per_sm = 1;
	return ktune__rw_clusters(&s, rows, sm_count);
}

void ktune__rw_launch(const struct ktune_rw_shape *s, int64_t clusters, struct ktune_op_launch *out)
{
	memset(out, 0, sizeof(*out));
	out->grid[0] = (unsigned)(clusters * s->cluster);
	out->grid[1] = out->grid[2] = 1;
	out->block[0] = (unsigned)s->threads;
	out->block[1] = out->block[2] = 1;
}

/* Registers a thread has: what __launch_bounds__(THREADS, MIN_BLOCKS) leaves it. */
static int thread_registers(const struct ktune_key *key, const struct ktune_config *c, int threads)
{
	return (int)ktune__op_thread_registers(threads, ktune__op_param(ktune__op_of(key), c, "MIN_WARPS", 0));
}

int ktune__rw_prune(const struct ktune_key *key, const struct ktune_config *c, int raw_rows, int f32_rows,
		    char *why, size_t len)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	long vec = ktune__op_param(op, c, "VEC", 1);
	int size = ktune__dtype_size(key->dtype), regs = thread_registers(key, c, s.threads);
	int64_t span = (int64_t)s.cluster * s.row_threads * s.vec;

	if (vec * size > 16) {
		snprintf(why, len, "VEC=%ld of %d-byte elements is wider than 16 bytes", vec, size);
		return 1;
	}
	if (!key->aligned && vec > 1 && !shifts_rows(op, c)) {
		snprintf(why, len, "the unaligned class takes the scalar path: VEC=%ld is VEC=1", vec);
		return 1;
	}
	/*
	 * The rows' words, and about 3 registers a vector of each row as loaded
	 * (its address and bounds) and 32 for the rest: what ptxas used on sm_90
	 * (softmax bf16: 8 vectors of 16 bytes in 110 registers, 16 spilled at 128).
	 */
	int64_t words = ((int64_t)s.items * s.vec * (raw_rows * size + f32_rows * 4) + 3) / 4;
	int64_t need = words + 3 * (int64_t)s.items * raw_rows + 32;
	if (need > regs) {
		snprintf(why, len, "about %lld registers a thread (%d x %d elements a row), over %d", (long long)need,
			 s.items, s.vec, regs);
		return 1;
	}
	if (s.items > (s.vec > 1 ? 16 : 32)) { /* long unrolled loops: ptxas spills what it cannot schedule */
		snprintf(why, len, "%d vectors a thread: over %d unrolled", s.items, s.vec > 1 ? 16 : 32);
		return 1;
	}
	if (span >= 2 * key->n && (s.cluster > 1 || s.row_threads > 4 || s.vec > 1)) {
		snprintf(why, len, "a row span of %lld for %lld cols: mostly idle", (long long)span,
			 (long long)key->n);
		return 1;
	}
	if (s.rows_per_block > 1 && s.rows_per_block > key->m && s.threads > 128) {
		snprintf(why, len, "%d rows a block for %lld rows", s.rows_per_block, (long long)key->m);
		return 1;
	}
	return 0;
}

int64_t ktune__rw_ring_bytes(const struct ktune_key *key, const struct ktune_config *c, int tensors, int floats)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	long ring = ktune__op_param(op, c, "RING", 0);
	if (ring <= 0)
		return 0;
	return ring * s.threads * ((int64_t)s.items * s.vec * ktune__dtype_size(key->dtype) * tensors + 4 * floats);
}

int ktune__rw_ring_prune(const struct ktune_key *key, const struct ktune_config *c, int tensors, int floats,
			 int64_t smem, char *why, size_t len)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_rw_shape s = ktune__rw_shape(key, c);
	long ring = ktune__op_param(op, c, "RING", 0);
	int bytes = s.vec * ktune__dtype_size(key->dtype);
	if (ring <= 0)
		return 0;
	if (!key->aligned || bytes < 4) {
		snprintf(why, len, "the ring copies aligned vectors of 4 to 16 bytes (RING=%ld, %d-byte vectors%s)",
			 ring, bytes, key->aligned ? "" : ", unaligned");
		return 1;
	}
	/*
	 * An SM's shared memory (228 KiB, 1 KiB of it reserved a block) must
	 * hold BLOCKS_PER_SM blocks, or the capped grid runs in waves.
	 */
	int64_t block = smem + ktune__rw_ring_bytes(key, c, tensors, floats);
	int64_t per_sm = s.blocks_per_sm > 0 ? s.blocks_per_sm : 1;
	if (block > 227 * 1024 || per_sm * (block + 1024) > 228 * 1024) {
		snprintf(why, len, "%lld bytes of shared memory a block (RING=%ld), %ld blocks an SM: over 228 KiB",
			 (long long)block, ring, (long)per_sm);
		return 1;
	}
	return 0;
}

int64_t ktune__rw_stream_chunk(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			       int64_t cols)
{
	int64_t vec = 16 / ktune__dtype_size(key->dtype), cluster = ktune__op_param(op, c, "CLUSTER", 1);
	return (cols / vec + cluster - 1) / cluster;
}

/* An SM's shared memory a block may take (227 KiB), less the stream kernels' own (their reductions'). */
#define STREAM_KEEP_MAX (227 * 1024 - 1024)

int64_t ktune__rw_stream_keep(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			      int64_t cols, int tensors)
{
	int64_t keep = ktune__rw_stream_chunk(op, key, c, cols) * 16 * tensors;
	return ktune__op_param(op, c, "RELOAD", 0) && keep <= STREAM_KEEP_MAX ? keep : 0;
}

void ktune__rw_stream_launch(const struct ktune_op *op, const struct ktune_config *c, int64_t rows, int sm_count,
			     int64_t smem, struct ktune_op_launch *out)
{
	/* one row a block of the cluster (they walk past 2^31 blocks) */
	struct ktune_rw_shape s = { .threads = (int)ktune__op_param(op, c, "THREADS", 256),
				    .cluster = (int)ktune__op_param(op, c, "CLUSTER", 1) };
	s.row_threads = s.threads;
	s.rows_per_block = 1;
	ktune__rw_launch(&s, ktune__rw_clusters(&s, rows, sm_count), out);
	out->smem = (unsigned)smem;
}

int ktune__rw_stream_prune(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			   long need, int long_rows, int tensors, char *why, size_t len)
{
	long threads = ktune__op_param(op, c, "THREADS", 256), unroll = ktune__op_param(op, c, "UNROLL", 1);
	long reload = ktune__op_param(op, c, "RELOAD", 0);
	int64_t chunk = ktune__rw_stream_chunk(op, key, c, key->n), vecs = key->n / (16 / ktune__dtype_size(key->dtype));
	if (long_rows && !key->aligned) {
		snprintf(why, len, "the stream family reads 16-byte vectors: the aligned class alone");
		return 1;
	}
	if (long_rows && vecs < 1024) {
		snprintf(why, len, "%lld vectors a row: rows under 1024 vectors are held in registers",
			 (long long)vecs);
		return 1;
	}
	if (reload && !ktune__rw_stream_keep(op, key, c, key->n, tensors)) {
		snprintf(why, len, "%d chunk(s) of %lld bytes do not fit shared memory: RELOAD=%ld is RELOAD=0", tensors,
			 (long long)chunk * 16, reload);
		return 1;
	}
	if (need > ktune__op_thread_registers(threads, ktune__op_param(op, c, "MIN_WARPS", 0))) {
		snprintf(why, len, "about %ld registers a thread at UNROLL=%ld: over what MIN_WARPS leaves", need,
			 unroll);
		return 1;
	}
	if (chunk < threads) {
		snprintf(why, len, "%lld vectors a block for %ld threads: idle threads", (long long)chunk, threads);
		return 1;
	}
	return 0;
}

int ktune__rw_stream_default(const struct ktune_op *op, const struct ktune_key *key, int family, long threads,
			     long unroll, int64_t chunk_max, long reload, long min_warps, struct ktune_config *out)
{
	const struct ktune_space *sp = ktune__op_space(op, family, NULL);
	int64_t vecs = key->n / (16 / ktune__dtype_size(key->dtype));
	long cluster = 1;
	char why[160];
	while (cluster < 8 && (vecs + cluster - 1) / cluster > chunk_max)
		cluster *= 2;
	*out = (struct ktune_config){ .family = family };
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; sp && i < sp->nparams; i++) {
			const char *name = sp->params[i].name;
			long want = !strcmp(name, "THREADS")   ? threads
				    : !strcmp(name, "UNROLL")  ? unroll
				    : !strcmp(name, "CLUSTER") ? cluster
				    : !strcmp(name, "RELOAD")  ? (pass ? 0 : reload)
								: min_warps; /* MIN_WARPS */
			out->v[i] = ktune__space_nearest(sp, i, want);
		}
		if (!op->prune(key, out, 0, why, sizeof(why)))
			return 0;
	}
	return 1;
}

/* A config of the op's first family with these values (the space's nearest), the rest 0. */
static struct ktune_config config_of(const struct ktune_space *sp, long vec, long row_threads, long threads,
				     long cluster, long blocks_per_sm)
{
	struct ktune_config c = { .family = 0 };
	for (int i = 0; sp && i < sp->nparams; i++) {
		const char *name = sp->params[i].name;
		long want = !strcmp(name, "VEC")             ? vec
			    : !strcmp(name, "ROW_THREADS")   ? row_threads
			    : !strcmp(name, "THREADS")       ? threads
			    : !strcmp(name, "CLUSTER")       ? cluster
			    : !strcmp(name, "BLOCKS_PER_SM") ? blocks_per_sm
							     : 0;
		c.v[i] = ktune__space_nearest(sp, i, want);
	}
	return c;
}

struct ktune_config ktune__rw_default(const struct ktune_op *op, const struct ktune_key *key, long blocks_per_sm)
{
	const struct ktune_space *sp = ktune__op_space(op, 0, NULL);
	int size = ktune__dtype_size(key->dtype);
	struct ktune_config first_family = { .family = 0 };
	long vec = (key->aligned || shifts_rows(op, &first_family)) && size ? 16 / size : 1;
	int64_t nvec = (key->n + vec - 1) / vec;
	long first = (long)pow2_ceil((nvec + 3) / 4);
	struct ktune_config c = { .family = 0 };
	char why[160];

	/* the fewest threads per row the prune admits, from 4 vectors a thread; then clusters */
	for (long cluster = 1; cluster <= 8; cluster *= 2)
		for (long rt = cluster > 1 ? 256 : first < 4 ? 4 : first > 1024 ? 1024 : first; rt <= 1024; rt *= 2) {
			long threads = cluster > 1 || rt > 256 ? rt : 256; /* a cluster's blocks are one row each */
			c = config_of(sp, vec, rt, threads, cluster, blocks_per_sm);
			if (!op->prune(key, &c, 0, why, sizeof(why)))
				return c;
		}
	return c; /* nothing admitted (a row too long for registers): the largest, which still runs */
}

double ktune__rw_distance(const struct ktune_key *a, const struct ktune_key *b)
{
	double dr = 0, dc = 0;
	if (a->m > 0 && b->m > 0)
		dr = log((double)a->m) - log((double)b->m);
	if (a->n > 0 && b->n > 0)
		dc = log((double)a->n) - log((double)b->n);
	return dr * dr + 4 * dc * dc + (a->aligned != b->aligned ? 0.01 : 0);
}

ktune_status ktune__rw_check_strides(ktune_ctx *ctx, const char *what, int64_t cols,
				     const struct ktune_op_call *call, const int *bufs, int n)
{
	for (int i = 0; i < n; i++)
		if (call->ld[bufs[i]] < cols)
			return ktune__op_invalid(ctx, "%s: a row stride (%lld) is less than cols = %lld", what,
						 (long long)call->ld[bufs[i]], (long long)cols);
	return KTUNE_OK;
}
