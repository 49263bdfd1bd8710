/*
 * elementwise.c - the tunables and launch contract the elementwise ops
 * share (elementwise.h).
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ops/elementwise.h"

const ktune_dtype ktune__ew_dtypes[3] = { KTUNE_BF16, KTUNE_F16, KTUNE_F32 };

int64_t ktune__ew_bucket(int64_t n)
{
	int64_t b = 1;
	while (b < n && b < KTUNE_OP_MAX_SIZE)
		b <<= 1;
	return b;
}

void ktune__ew_key_bucket(struct ktune_key *key)
{
	const struct ktune_op *op = ktune__op_of(key);
	for (int f = 0; op && f < op->nfields; f++)
		if (op->fields[f].dim >= 0 && op->fields[f].role == KTUNE_ROLE_TUNED) {
			int64_t *v = ktune__key_dim(key, op->fields[f].dim);
			*v = ktune__ew_bucket(*v);
		}
}

static int is_launch_param(const char *name)
{
	return !strcmp(name, "BLOCKS_PER_SM");
}

int ktune__ew_defines(const struct ktune_key *key, const struct ktune_config *c, char opts[][48], int max)
{
	const struct ktune_op *op = ktune__op_of(key);
	const struct ktune_space *s = op ? ktune__op_space(op, c->family, NULL) : NULL;
	int n = 0;
	if (!s || max < 2 + s->nparams)
		return -1;
	snprintf(opts[n++], 48, "-DDTYPE=%d", (int)key->dtype);
	snprintf(opts[n++], 48, "-DALIGNED=%d", key->aligned != 0);
	for (int i = 0; i < s->nparams; i++)
		if (!is_launch_param(s->params[i].name))
			snprintf(opts[n++], 48, "-D%.24s=%ld", s->params[i].name, c->v[i]);
	return n;
}

int ktune__ew_vec(const struct ktune_key *key, const struct ktune_config *c)
{
	const struct ktune_op *op = ktune__op_of(key);
	return key->aligned && op ? (int)ktune__op_param(op, c, "VEC", 1) : 1;
}

void ktune__ew_geometry(const struct ktune_config *c, int64_t nvec, int sm_count,
			struct ktune_op_launch *out, const struct ktune_op *op)
{
	long threads = ktune__op_param(op, c, "THREADS", 256), unroll = ktune__op_param(op, c, "UNROLL", 1);
	long per_sm = ktune__op_param(op, c, "BLOCKS_PER_SM", 0);
	int64_t per_block = (int64_t)threads * unroll;
	int64_t blocks = (nvec + per_block - 1) / per_block;
	if (per_sm > 0 && sm_count > 0 && blocks > (int64_t)per_sm * sm_count)
		blocks = (int64_t)per_sm * sm_count;
	if (blocks < 1)
		blocks = 1;
	if (blocks > 0x7fffffff)
		blocks = 0x7fffffff; /* the kernels walk the rest */
	memset(out, 0, sizeof(*out));
	out->grid[0] = (unsigned)blocks;
	out->grid[1] = out->grid[2] = 1;
	out->block[0] = (unsigned)threads;
	out->block[1] = out->block[2] = 1;
}

int ktune__ew_prune(const struct ktune_key *key, const struct ktune_config *c, int64_t nvec,
		    char *why, size_t len)
{
	const struct ktune_op *op = ktune__op_of(key);
	long vec = ktune__op_param(op, c, "VEC", 1), threads = ktune__op_param(op, c, "THREADS", 256);
	long unroll = ktune__op_param(op, c, "UNROLL", 1);
	int size = ktune__dtype_size(key->dtype);

	if (vec * size > 16) {
		snprintf(why, len, "VEC=%ld of %d-byte elements is wider than 16 bytes", vec, size);
		return 1;
	}
	if (!key->aligned && vec > 1) {
		snprintf(why, len, "the unaligned class takes the scalar path: VEC=%ld is VEC=1", vec);
		return 1;
	}
	if (threads > 128 && threads * unroll > 2 * nvec) {
		snprintf(why, len, "%ld threads x %ld for %lld vectors", threads, unroll, (long long)nvec);
		return 1;
	}
	return 0;
}

/* A config of the op's first family with these values (the space's nearest), the rest 0. */
static struct ktune_config ew_config(const struct ktune_space *s, long vec, long unroll, long threads, long cache)
{
	struct ktune_config c = { .family = 0 };
	for (int i = 0; s && i < s->nparams; i++) {
		const char *name = s->params[i].name;
		long want = !strcmp(name, "VEC")       ? vec
			    : !strcmp(name, "UNROLL")  ? unroll
			    : !strcmp(name, "THREADS") ? threads
			    : !strcmp(name, "CACHE")   ? cache
						       : 0;
		c.v[i] = ktune__space_nearest(s, i, want);
	}
	return c;
}

struct ktune_config ktune__ew_default(const struct ktune_op *op, const struct ktune_key *key, int sm_count)
{
	const struct ktune_space *s = ktune__op_space(op, 0, NULL);
	int size = ktune__dtype_size(key->dtype);
	long vec = key->aligned && size ? 16 / size : 1;
	double elems = 1;
	char why[160];

	for (int f = 0; f < op->nfields; f++)
		if (op->fields[f].dim >= 0)
			elems *= (double)*ktune__key_dim((struct ktune_key *)key, op->fields[f].dim);
	if (sm_count <= 0)
		sm_count = 132;
	/* two waves of 8 blocks an SM of 256 threads x 2 vectors, or smaller blocks */
	int big = elems / vec >= 2.0 * 8 * sm_count * 256 * 2;
	long cache = elems * size < 32.0 * (1 << 20);
	struct ktune_config c = big ? ew_config(s, vec, 2, 256, cache) : ew_config(s, vec, 1, 128, cache);
	if (op->prune && op->prune(key, &c, sm_count, why, sizeof(why)))
		c = ew_config(s, vec, 1, 128, cache); /* the smallest block, which the prune always keeps */
	return c;
}

struct ktune_config ktune__ew_default_config(const struct ktune_key *key, int sm_count)
{
	return ktune__ew_default(ktune__op_of(key), key, sm_count);
}

void ktune__ew_input_range(const struct ktune_key *key, int buf, double *lo, double *hi)
{
	(void)key;
	(void)buf;
	*lo = -4;
	*hi = 4;
}

double ktune__ew_output_tolerance(const struct ktune_key *key, int buf)
{
	(void)buf;
	return ktune__ew_tolerance(key->dtype);
}

double ktune__ew_distance(const struct ktune_key *a, const struct ktune_key *b)
{
	double d = 0;
	for (int i = 0; i < KTUNE_KEY_DIMS; i++) {
		int64_t x = *ktune__key_dim((struct ktune_key *)a, i), y = *ktune__key_dim((struct ktune_key *)b, i);
		if (x > 0 && y > 0)
			d += (log((double)x) - log((double)y)) * (log((double)x) - log((double)y));
	}
	return d + (a->aligned != b->aligned ? 0.01 : 0);
}

double ktune__ew_tolerance(ktune_dtype dtype)
{
	switch (dtype) {
	case KTUNE_F32:
		return 1e-5;
	case KTUNE_F16:
		return 2e-3;
	case KTUNE_BF16:
		return 1.6e-2;
	}
	return 0;
}

static void *slot(struct ktune_op_args *a)
{
	a->argv[a->n] = a->slot[a->n];
	return a->slot[a->n++];
}

void ktune__ew_arg_ptr(struct ktune_op_args *a, uint64_t p)
{
	memcpy(slot(a), &p, sizeof(p));
}

void ktune__ew_arg_i64(struct ktune_op_args *a, int64_t v)
{
	memcpy(slot(a), &v, sizeof(v));
}

void ktune__ew_arg_u64(struct ktune_op_args *a, uint64_t v)
{
	memcpy(slot(a), &v, sizeof(v));
}

void ktune__ew_arg_f32(struct ktune_op_args *a, float v)
{
	memcpy(slot(a), &v, sizeof(v));
}
