/*
 * gemm.c - the GEMM op family: configuration text, launch contract,
 * per-key pruning and the built-in default.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm.h"
#include "runtime/templates.h"

struct field {
	const char *name;
	size_t offset;
};

#define FIELD(name, member) { name, offsetof(struct ktune_gemm_config, member) }
static const struct field fields[] = {
	FIELD("BLOCK_M", block_m),   FIELD("BLOCK_N", block_n), FIELD("BLOCK_K", block_k),
	FIELD("WARPS_M", warps_m),   FIELD("WARPS_N", warps_n), FIELD("STAGES", stages),
	FIELD("GROUP_SIZE", group_size), FIELD("SPLIT_K", split_k),
};
#define NFIELDS ((int)(sizeof(fields) / sizeof(fields[0])))

static int *field_ptr(struct ktune_gemm_config *c, int i)
{
	return (int *)((char *)c + fields[i].offset);
}

static int field_val(const struct ktune_gemm_config *c, int i)
{
	return *(const int *)((const char *)c + fields[i].offset);
}

void ktune__gemm_config_format(const struct ktune_gemm_config *c, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = 0;
	for (int i = 0; i < NFIELDS && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s=%d", i ? "," : "",
					 fields[i].name, field_val(c, i));
}

int ktune__gemm_config_parse(const char *text, struct ktune_gemm_config *c, struct ktune_err *e)
{
	int seen[NFIELDS] = { 0 };
	const char *p = text;

	memset(c, 0, sizeof(*c));
	while (*p) {
		const char *eq = strchr(p, '='), *end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		if (!eq || eq > end)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': expected NAME=VALUE at '%.*s'",
					   text, (int)(end - p), p);
		int i;
		for (i = 0; i < NFIELDS; i++)
			if ((size_t)(eq - p) == strlen(fields[i].name) &&
			    !strncmp(p, fields[i].name, (size_t)(eq - p)))
				break;
		if (i == NFIELDS)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': unknown parameter '%.*s'",
					   text, (int)(eq - p), p);
		if (seen[i]++)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': '%s' given twice", text,
					   fields[i].name);
		char *num_end;
		long v = strtol(eq + 1, &num_end, 10);
		/* digits only: one config has one text */
		if (num_end != end || eq[1] < '1' || eq[1] > '9' || v < 1 || v > 1 << 20)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': '%s' is not a positive integer",
					   text, fields[i].name);
		*field_ptr(c, i) = (int)v;
		if (*end && !end[1])
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': trailing ','", text);
		p = *end ? end + 1 : end;
	}
	for (int i = 0; i < NFIELDS; i++)
		if (!seen[i])
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': '%s' is missing", text,
					   fields[i].name);
	return KTUNE_OK;
}

int ktune__gemm_config_from_values(const struct ktune_space *s, const long *values,
				   struct ktune_gemm_config *c, struct ktune_err *e)
{
	memset(c, 0, sizeof(*c));
	for (int i = 0; i < NFIELDS; i++) {
		int j = ktune__space_param_index(s, fields[i].name);
		if (j < 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' lacks parameter '%s'",
					   s->family, fields[i].name);
		*field_ptr(c, i) = (int)values[j];
	}
	return KTUNE_OK;
}

int ktune__gemm_config_to_values(const struct ktune_space *s, const struct ktune_gemm_config *c,
				 long *values, struct ktune_err *e)
{
	if (s->nparams != NFIELDS)
		return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' has %d parameters, gemm needs %d",
				   s->family, s->nparams, NFIELDS);
	for (int i = 0; i < NFIELDS; i++) {
		int j = ktune__space_param_index(s, fields[i].name);
		if (j < 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' lacks parameter '%s'",
					   s->family, fields[i].name);
		values[j] = field_val(c, i);
	}
	return KTUNE_OK;
}

static pthread_once_t space_once = PTHREAD_ONCE_INIT;
static struct ktune_space space;
static int space_status;
static struct ktune_err space_err;

static void load_space(void)
{
	const struct ktune_template_file *f = ktune__template_file(KTUNE_GEMM_SPACE);
	if (!f) {
		space_status = ktune__fail(&space_err, KTUNE_ERR_NOT_FOUND,
					   "no embedded '%s'", KTUNE_GEMM_SPACE);
		return;
	}
	space_status = ktune__space_parse(&space, f->text, f->len, f->name, &space_err);
}

const struct ktune_space *ktune__gemm_space(struct ktune_err *e)
{
	pthread_once(&space_once, load_space);
	if (space_status) {
		if (e)
			*e = space_err;
		return NULL;
	}
	return &space;
}

int ktune__gemm_config_admitted(const struct ktune_gemm_config *c, struct ktune_err *e)
{
	long values[KTUNE_SPACE_MAX_PARAMS];
	const struct ktune_space *s = ktune__gemm_space(e);
	if (!s || ktune__gemm_config_to_values(s, c, values, e))
		return 0;
	return ktune__space_admits(s, values, e);
}

int ktune__gemm_same_kernel(const struct ktune_gemm_config *a, const struct ktune_gemm_config *b)
{
	return a->block_m == b->block_m && a->block_n == b->block_n &&
	       a->block_k == b->block_k && a->warps_m == b->warps_m &&
	       a->warps_n == b->warps_n && a->stages == b->stages;
}

int ktune__gemm_threads(const struct ktune_gemm_config *c)
{
	return c->warps_m * c->warps_n * 32;
}

/* Tiles keep their contiguous dimension padded by 8 elements (16 bytes): see gemm.cu. */
size_t ktune__gemm_smem_bytes(const struct ktune_key *key, const struct ktune_gemm_config *c)
{
	size_t a = key->trans_a == 't' ? (size_t)c->block_k * (c->block_m + 8)
				      : (size_t)c->block_m * (c->block_k + 8);
	size_t b = key->trans_b == 't' ? (size_t)c->block_n * (c->block_k + 8)
				      : (size_t)c->block_k * (c->block_n + 8);
	return (size_t)c->stages * (a + b) * 2;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static int64_t tiles(const struct ktune_key *key, const struct ktune_gemm_config *c)
{
	return cdiv(key->m, c->block_m) * cdiv(key->n, c->block_n);
}

void ktune__gemm_grid(const struct ktune_key *key, const struct ktune_gemm_config *c,
		      unsigned grid[3])
{
	grid[0] = (unsigned)tiles(key, c);
	grid[1] = 1;
	grid[2] = (unsigned)c->split_k;
}

size_t ktune__gemm_partials_bytes(const struct ktune_key *key, const struct ktune_gemm_config *c)
{
	if (c->split_k <= 1)
		return 0;
	return (size_t)c->split_k * (size_t)key->m * (size_t)key->n * sizeof(float);
}

size_t ktune__gemm_counters(const struct ktune_key *key, const struct ktune_gemm_config *c)
{
	return c->split_k <= 1 ? 0 : (size_t)tiles(key, c);
}

void ktune__gemm_read_once(const struct ktune_key *key, const struct ktune_gemm_config *c,
			   int *a, int *b)
{
	*a = key->n > 0 && key->n <= c->block_n;
	*b = key->m > 0 && key->m <= c->block_m;
}

int ktune__gemm_defines(const struct ktune_key *key, const struct ktune_gemm_config *c,
			char opts[][48], int max)
{
	int n = 0, once_a, once_b;
	if (max < 12)
		return -1;
	ktune__gemm_read_once(key, c, &once_a, &once_b);
	snprintf(opts[n++], 48, "-DBLOCK_M=%d", c->block_m);
	snprintf(opts[n++], 48, "-DBLOCK_N=%d", c->block_n);
	snprintf(opts[n++], 48, "-DBLOCK_K=%d", c->block_k);
	snprintf(opts[n++], 48, "-DWARPS_M=%d", c->warps_m);
	snprintf(opts[n++], 48, "-DWARPS_N=%d", c->warps_n);
	snprintf(opts[n++], 48, "-DSTAGES=%d", c->stages);
	snprintf(opts[n++], 48, "-DDTYPE_BF16=%d", key->dtype == KTUNE_BF16);
	snprintf(opts[n++], 48, "-DTRANS_A=%d", key->trans_a == 't');
	snprintf(opts[n++], 48, "-DTRANS_B=%d", key->trans_b == 't');
	snprintf(opts[n++], 48, "-DALIGNED=%d", key->aligned ? 1 : 0);
	snprintf(opts[n++], 48, "-DREAD_ONCE_A=%d", once_a);
	snprintf(opts[n++], 48, "-DREAD_ONCE_B=%d", once_b);
	return n;
}

static int64_t pow2_ceil(int64_t x)
{
	int64_t p = 1;
	while (p < x)
		p <<= 1;
	return p;
}

int ktune__gemm_prune(const struct ktune_key *key, const struct ktune_gemm_config *c,
		      int sm_count, int smem_limit, char *why, size_t len)
{
	size_t smem = ktune__gemm_smem_bytes(key, c);
	if (smem_limit > 0 && smem > (size_t)smem_limit) {
		snprintf(why, len, "needs %zu bytes of shared memory, the device allows %d", smem,
			 smem_limit);
		return 1;
	}
	/* A tile much taller or wider than the matrix computes mostly padding. */
	if (c->block_m > 16 && c->block_m >= 2 * pow2_ceil(key->m)) {
		snprintf(why, len, "BLOCK_M=%d is more than twice M=%lld", c->block_m, (long long)key->m);
		return 1;
	}
	if (c->block_n > 32 && c->block_n >= 2 * pow2_ceil(key->n)) {
		snprintf(why, len, "BLOCK_N=%d is more than twice N=%lld", c->block_n, (long long)key->n);
		return 1;
	}
	int64_t t = tiles(key, c);
	/* sweeps on H100: below 128x128, tiles lose 2-3x once they are this many */
	if (c->block_m * c->block_n < 128 * 128 && t > 32L * sm_count) {
		snprintf(why, len, "%lld tiles of %dx%d: too small for this problem", (long long)t,
			 c->block_m, c->block_n);
		return 1;
	}
	if (c->group_size > 1 && (cdiv(key->m, c->block_m) == 1 || cdiv(key->n, c->block_n) == 1)) {
		snprintf(why, len, "GROUP_SIZE=%d changes nothing with one row or column of tiles",
			 c->group_size);
		return 1;
	}
	if (c->split_k > 1) {
		int64_t k_tiles = cdiv(key->k, c->block_k);
		if (t >= sm_count) {
			snprintf(why, len, "SPLIT_K=%d with %lld tiles for %d SMs", c->split_k,
				 (long long)t, sm_count);
			return 1;
		}
		if (k_tiles < 2 * c->split_k) {
			snprintf(why, len, "SPLIT_K=%d leaves under two K tiles per split", c->split_k);
			return 1;
		}
		if (t * c->split_k > 8L * sm_count) {
			snprintf(why, len, "SPLIT_K=%d makes %lld blocks for %d SMs", c->split_k,
				 (long long)(t * c->split_k), sm_count);
			return 1;
		}
	}
	return 0;
}

void ktune__gemm_fit_split(const struct ktune_key *key, struct ktune_gemm_config *c, int sm_count)
{
	while (c->split_k > 1 && (tiles(key, c) * c->split_k > 8L * sm_count ||
				  ktune__gemm_partials_bytes(key, c) > (256u << 20)))
		c->split_k /= 2;
}

int ktune__gemm_fit_smem(const struct ktune_key *key, struct ktune_gemm_config *c, int smem_limit)
{
	while (c->stages > 2 && ktune__gemm_smem_bytes(key, c) > (size_t)smem_limit)
		c->stages--;
	return ktune__gemm_smem_bytes(key, c) <= (size_t)smem_limit ? 0 : -1;
}

struct ktune_gemm_config ktune__gemm_default_config(const struct ktune_key *key, int sm_count)
{
	struct ktune_gemm_config c;
	if (key->m <= 16)
		c = (struct ktune_gemm_config){ 16, 128, 64, 1, 4, 3, 1, 1 };
	else if (key->m <= 64)
		c = (struct ktune_gemm_config){ 64, 128, 32, 2, 2, 4, 1, 1 };
	else
		c = (struct ktune_gemm_config){ 128, 128, 32, 2, 2, 4, 8, 1 };
	if (sm_count <= 0)
		sm_count = 132;
	/* Too few tiles to fill the GPU: share K between blocks. */
	int64_t t = tiles(key, &c), k_tiles = cdiv(key->k, c.block_k);
	while (c.split_k < 16 && t * c.split_k * 2 <= sm_count && k_tiles >= 4 * c.split_k)
		c.split_k *= 2;
	return c;
}

int ktune__gemm_aligned(const void *a, int64_t lda, const void *b, int64_t ldb,
			const void *c, int64_t ldc)
{
	return ((uintptr_t)a % 16 == 0) && ((uintptr_t)b % 16 == 0) && ((uintptr_t)c % 16 == 0) &&
	       lda % 8 == 0 && ldb % 8 == 0 && ldc % 8 == 0;
}

double ktune__gemm_flops(const struct ktune_key *key)
{
	return 2.0 * (double)key->m * (double)key->n * (double)key->k;
}

double ktune__gemm_bytes(const struct ktune_key *key)
{
	double elems = (double)key->m * key->k + (double)key->k * key->n + (double)key->m * key->n;
	return elems * ktune__dtype_size(key->dtype);
}

/*
 * The output is rounded to f16 (11-bit significand) or bf16 (8-bit): the
 * relative Frobenius error of a right answer is about 2e-4 for f16 and 2e-3
 * for bf16.  A wrong one is of order 1.
 */
void ktune__gemm_tolerance(ktune_dtype d, double *fro, double *max)
{
	if (d == KTUNE_BF16) {
		*fro = 1e-2;
		*max = 5e-2;
	} else {
		*fro = 2e-3;
		*max = 1e-2;
	}
}
