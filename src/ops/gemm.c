/*
 * gemm.c - the GEMM op family: configuration text, launch contract,
 * per-key pruning and the built-in default.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/op.h"
#include "templates.h"

struct field {
	const char *name;
	size_t offset;
};

#define FIELD(name, member) { name, offsetof(struct ktune_config, member) }
/* Each family's fields in canonical order; the space of the family names the same parameters. */
static const struct field mma_fields[] = {
	FIELD("BLOCK_M", block_m),   FIELD("BLOCK_N", block_n), FIELD("BLOCK_K", block_k),
	FIELD("WARPS_M", warps_m),   FIELD("WARPS_N", warps_n), FIELD("STAGES", stages),
	FIELD("GROUP_SIZE", group_size), FIELD("SPLIT_K", split_k),
};
static const struct field wgmma_fields[] = {
	FIELD("BLOCK_M", block_m),     FIELD("BLOCK_N", block_n),     FIELD("BLOCK_K", block_k),
	FIELD("STAGES", stages),       FIELD("CONSUMERS", consumers), FIELD("CLUSTER_M", cluster_m),
	FIELD("GROUP_SIZE", group_size), FIELD("SPLIT_K", split_k),
};
static const struct field gemv_fields[] = {
	FIELD("BLOCK_M", block_m), FIELD("BLOCK_N", block_n), FIELD("WARPS_N", warps_n),
	FIELD("WARPS_K", warps_k), FIELD("STAGES", stages),   FIELD("SPLIT_K", split_k),
};
#define NFIELDS_MAX 8

struct family {
	const char *name;   /* results' family column */
	const char *tag;    /* FAMILY=<tag> in config texts; NULL: the text has no FAMILY */
	const char *source; /* kernels/templates/ file */
	const char *space;
	const char *entry;
	const struct field *fields;
	int nfields;
};

static const struct family families[KTUNE_GEMM_NFAMILIES] = {
	{ "gemm", NULL, KTUNE_GEMM_SOURCE, KTUNE_GEMM_SPACE, "gemm_kernel", mma_fields,
	  (int)(sizeof(mma_fields) / sizeof(mma_fields[0])) },
	{ "gemm_wgmma", "wgmma", KTUNE_GEMM_WGMMA_SOURCE, KTUNE_GEMM_WGMMA_SPACE,
	  "gemm_wgmma_kernel", wgmma_fields, (int)(sizeof(wgmma_fields) / sizeof(wgmma_fields[0])) },
	{ "gemm_gemv", "gemv", KTUNE_GEMM_GEMV_SOURCE, KTUNE_GEMM_GEMV_SPACE, "gemv_kernel",
	  gemv_fields, (int)(sizeof(gemv_fields) / sizeof(gemv_fields[0])) },
};

/* The family of a config; an out-of-range value (a corrupt struct) reads as mma.sync. */
static const struct family *family_of(const struct ktune_config *c)
{
	return &families[c->family > 0 && c->family < KTUNE_GEMM_NFAMILIES ? c->family : KTUNE_GEMM_MMA];
}

static int *field_ptr(struct ktune_config *c, const struct field *f)
{
	return (int *)((char *)c + f->offset);
}

static int field_val(const struct ktune_config *c, const struct field *f)
{
	return *(const int *)((const char *)c + f->offset);
}

const char *ktune__gemm_family_name(int family)
{
	return family >= 0 && family < KTUNE_GEMM_NFAMILIES ? families[family].name : NULL;
}

int ktune__gemm_family_from_name(const char *name)
{
	for (int i = 0; i < KTUNE_GEMM_NFAMILIES; i++)
		if (!strcmp(name, families[i].name))
			return i;
	return -1;
}

const char *ktune__gemm_family_source(int family)
{
	return family >= 0 && family < KTUNE_GEMM_NFAMILIES ? families[family].source : NULL;
}

const char *ktune__gemm_family_hash(int family)
{
	const char *src = ktune__gemm_family_source(family);
	return src ? ktune__template_hash(src) : "";
}

int ktune__gemm_result_fresh(const char *family_name, const char *template_hash)
{
	int f = ktune__gemm_family_from_name(family_name);
	return f >= 0 && !strcmp(template_hash, ktune__gemm_family_hash(f));
}

void ktune__gemm_space_hash(char out[65])
{
	char both[KTUNE_GEMM_NFAMILIES * 64 + 1] = "";
	for (int f = 0; f < KTUNE_GEMM_NFAMILIES; f++)
		strncat(both, ktune__gemm_family_hash(f), 64);
	ktune__sha256_hex(both, strlen(both), out);
}

static int is_sm90(const char *arch)
{
	return !strcmp(arch, "sm_90") || !strcmp(arch, "sm_90a");
}

int ktune__gemm_family_runs(int family, const char *arch, int aligned)
{
	if (family == KTUNE_GEMM_MMA)
		return 1;
	if (family == KTUNE_GEMM_GEMV) /* 16-byte loads of the operands straight into registers */
		return aligned;
	/* wgmma and setmaxnreg exist on sm_90a alone, not on later archs */
	return family == KTUNE_GEMM_WGMMA && aligned && is_sm90(arch);
}

const char *ktune__gemm_compile_arch(int family, const char *arch)
{
	return family == KTUNE_GEMM_WGMMA && is_sm90(arch) ? "sm_90a" : arch;
}

const char *ktune__gemm_entry(int family)
{
	return family_of(&(struct ktune_config){ .family = family })->entry;
}

void ktune__gemm_config_format(const struct ktune_config *c, char *buf, size_t len)
{
	const struct family *f = family_of(c);
	size_t used = 0;
	buf[0] = 0;
	if (f->tag)
		used = (size_t)snprintf(buf, len, "FAMILY=%s,", f->tag);
	for (int i = 0; i < f->nfields && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s=%d", i ? "," : "",
					 f->fields[i].name, field_val(c, &f->fields[i]));
}

int ktune__gemm_config_parse(const char *text, struct ktune_config *c, struct ktune_err *e)
{
	int seen[NFIELDS_MAX] = { 0 };
	const char *p = text;
	const struct family *fam = &families[KTUNE_GEMM_MMA];

	memset(c, 0, sizeof(*c));
	/* FAMILY comes first, so that every field after it is checked against its family */
	if (!strncmp(p, "FAMILY=", 7)) {
		const char *v = p + 7, *end = strchr(v, ',');
		int f;
		if (!end)
			end = v + strlen(v);
		for (f = 0; f < KTUNE_GEMM_NFAMILIES; f++)
			if (families[f].tag && (size_t)(end - v) == strlen(families[f].tag) &&
			    !strncmp(v, families[f].tag, (size_t)(end - v)))
				break;
		if (f == KTUNE_GEMM_NFAMILIES)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': unknown family '%.*s'",
					   text, (int)(end - v), v);
		if (!*end || !end[1])
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': no fields after FAMILY",
					   text);
		fam = &families[f];
		c->family = f;
		p = end + 1;
	}
	while (*p) {
		const char *eq = strchr(p, '='), *end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		if (!eq || eq > end)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': expected NAME=VALUE at '%.*s'",
					   text, (int)(end - p), p);
		int i;
		for (i = 0; i < fam->nfields; i++)
			if ((size_t)(eq - p) == strlen(fam->fields[i].name) &&
			    !strncmp(p, fam->fields[i].name, (size_t)(eq - p)))
				break;
		if (i == fam->nfields)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': unknown parameter '%.*s'%s",
					   text, (int)(eq - p), p,
					   (size_t)(eq - p) == 6 && !strncmp(p, "FAMILY", 6)
						   ? " (FAMILY comes first)" : "");
		if (seen[i]++)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': '%s' given twice", text,
					   fam->fields[i].name);
		char *num_end;
		long v = strtol(eq + 1, &num_end, 10);
		/* digits only: one config has one text */
		if (num_end != end || eq[1] < '1' || eq[1] > '9' || v < 1 || v > 1 << 20)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': '%s' is not a positive integer",
					   text, fam->fields[i].name);
		*field_ptr(c, &fam->fields[i]) = (int)v;
		if (*end && !end[1])
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': trailing ','", text);
		p = *end ? end + 1 : end;
	}
	for (int i = 0; i < fam->nfields; i++)
		if (!seen[i])
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%s': '%s' is missing", text,
					   fam->fields[i].name);
	return KTUNE_OK;
}

/* The family whose space this is (by the space's `family:` name). */
static int space_family(const struct ktune_space *s, struct ktune_err *e)
{
	int f = ktune__gemm_family_from_name(s->family);
	if (f < 0)
		return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' is not a GEMM family", s->family);
	return f;
}

int ktune__gemm_config_from_values(const struct ktune_space *s, const long *values,
				   struct ktune_config *c, struct ktune_err *e)
{
	int f = space_family(s, e);
	if (f < 0)
		return f;
	memset(c, 0, sizeof(*c));
	c->family = f;
	for (int i = 0; i < families[f].nfields; i++) {
		const struct field *fl = &families[f].fields[i];
		int j = ktune__space_param_index(s, fl->name);
		if (j < 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' lacks parameter '%s'",
					   s->family, fl->name);
		*field_ptr(c, fl) = (int)values[j];
	}
	return KTUNE_OK;
}

int ktune__gemm_config_to_values(const struct ktune_space *s, const struct ktune_config *c,
				 long *values, struct ktune_err *e)
{
	const struct family *fam = family_of(c);
	int f = space_family(s, e);
	if (f < 0)
		return f;
	if (&families[f] != fam)
		return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' is not the space of family '%s'",
				   s->family, fam->name);
	if (s->nparams != fam->nfields)
		return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' has %d parameters, %s needs %d",
				   s->family, s->nparams, fam->name, fam->nfields);
	for (int i = 0; i < fam->nfields; i++) {
		int j = ktune__space_param_index(s, fam->fields[i].name);
		if (j < 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "space '%s' lacks parameter '%s'",
					   s->family, fam->fields[i].name);
		values[j] = field_val(c, &fam->fields[i]);
	}
	return KTUNE_OK;
}

static pthread_once_t space_once = PTHREAD_ONCE_INIT;
static struct ktune_space spaces[KTUNE_GEMM_NFAMILIES];
static int space_status[KTUNE_GEMM_NFAMILIES];
static struct ktune_err space_err[KTUNE_GEMM_NFAMILIES];

static void load_spaces(void)
{
	for (int i = 0; i < KTUNE_GEMM_NFAMILIES; i++) {
		const struct ktune_template_file *f = ktune__template_file(families[i].space);
		if (!f) {
			space_status[i] = ktune__fail(&space_err[i], KTUNE_ERR_NOT_FOUND,
						      "no embedded '%s'", families[i].space);
			continue;
		}
		space_status[i] = ktune__space_parse(&spaces[i], f->text, f->len, f->name,
						     &space_err[i]);
		if (!space_status[i] && strcmp(spaces[i].family, families[i].name))
			space_status[i] = ktune__fail(&space_err[i], KTUNE_ERR_PARSE,
						      "'%s' declares family '%s', not '%s'",
						      f->name, spaces[i].family, families[i].name);
	}
}

const struct ktune_space *ktune__gemm_family_space(int family, struct ktune_err *e)
{
	if (family < 0 || family >= KTUNE_GEMM_NFAMILIES) {
		ktune__fail(e, KTUNE_ERR_INVALID, "no GEMM family %d", family);
		return NULL;
	}
	pthread_once(&space_once, load_spaces);
	if (space_status[family]) {
		if (e)
			*e = space_err[family];
		return NULL;
	}
	return &spaces[family];
}

const struct ktune_space *ktune__gemm_space(struct ktune_err *e)
{
	return ktune__gemm_family_space(KTUNE_GEMM_MMA, e);
}

int ktune__gemm_config_admitted(const struct ktune_config *c, struct ktune_err *e)
{
	long values[KTUNE_SPACE_MAX_PARAMS];
	if (c->family < 0 || c->family >= KTUNE_GEMM_NFAMILIES) {
		ktune__fail(e, KTUNE_ERR_PARSE, "no GEMM family %d", c->family);
		return 0;
	}
	const struct ktune_space *s = ktune__gemm_family_space(c->family, e);
	if (!s || ktune__gemm_config_to_values(s, c, values, e))
		return 0;
	return ktune__space_admits(s, values, e);
}

int ktune__gemm_same_kernel(const struct ktune_config *a, const struct ktune_config *b)
{
	return a->family == b->family && a->block_m == b->block_m && a->block_n == b->block_n &&
	       a->block_k == b->block_k && a->warps_m == b->warps_m &&
	       a->warps_n == b->warps_n && a->stages == b->stages &&
	       a->consumers == b->consumers && a->cluster_m == b->cluster_m &&
	       a->warps_k == b->warps_k;
}

int ktune__gemm_threads(const struct ktune_config *c)
{
	if (c->family == KTUNE_GEMM_WGMMA)
		return (c->consumers + 1) * 128; /* a producer warpgroup and the consumers */
	if (c->family == KTUNE_GEMM_GEMV)
		return c->warps_n * c->warps_k * 32;
	return c->warps_m * c->warps_n * 32;
}

/*
 * wgmma: SMEM_BYTES of gemm_wgmma.cu, the same for every layout: 1024 to
 * align the ring for the 128-byte swizzle, the stages, two 64 x 64 staging
 * chunks of C per consumer, two mbarriers a stage.
 * mma.sync: tiles keep their contiguous dimension padded by 8 elements (16 bytes): see gemm.cu.
 * gemv: SMEM_BYTES of gemv.cu, the warps along K's sums and the split-K flag. */
size_t ktune__gemm_smem_bytes(const struct ktune_key *key, const struct ktune_config *c)
{
	if (c->family == KTUNE_GEMM_GEMV)
		return (size_t)(c->warps_k - 1) * (size_t)c->block_n * (size_t)c->block_m * 4 + 16;
	if (c->family == KTUNE_GEMM_WGMMA)
		return 1024 + (size_t)c->stages * (size_t)(c->block_m + c->block_n) * c->block_k * 2 +
		       (size_t)c->consumers * 2 * 64 * 64 * 2 + (size_t)c->stages * 16;
	size_t a = key->variant[0] == 't' ? (size_t)c->block_k * (c->block_m + 8)
				      : (size_t)c->block_m * (c->block_k + 8);
	size_t b = key->variant[1] == 't' ? (size_t)c->block_n * (c->block_k + 8)
				      : (size_t)c->block_k * (c->block_n + 8);
	return (size_t)c->stages * (a + b) * 2;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

int ktune__gemv_kstep(const struct ktune_key *key)
{
	return key->variant[1] == 't' ? 32 : 16; /* KSTEP of gemv.cu */
}

/* Blocks that share a tile: CLUSTER_M for wgmma, else one. */
static int cluster_size(const struct ktune_config *c)
{
	return c->family == KTUNE_GEMM_WGMMA && c->cluster_m > 1 ? c->cluster_m : 1;
}

/* Rows of tiles: for wgmma with clusters, of cluster tiles (CLUSTER_M * BLOCK_M rows). */
static int64_t tile_rows(const struct ktune_key *key, const struct ktune_config *c)
{
	return cdiv(key->m, (int64_t)c->block_m * cluster_size(c));
}

static int64_t tiles(const struct ktune_key *key, const struct ktune_config *c)
{
	return tile_rows(key, c) * cdiv(key->n, c->block_n);
}

void ktune__gemm_grid(const struct ktune_key *key, const struct ktune_config *c,
		      unsigned grid[3])
{
	grid[0] = (unsigned)tiles(key, c);
	grid[1] = 1;
	grid[2] = (unsigned)c->split_k;
}

/* wgmma: the blocks (clusters) of the persistent grid, which walk the units of work together. */
static int64_t wgmma_walkers(const struct ktune_key *key, const struct ktune_config *c, int resident)
{
	int64_t t = tiles(key, c) * (c->split_k > 1 ? c->split_k : 1);
	return resident > 0 && t > resident ? resident : t;
}

void ktune__gemm_wgmma_grid(const struct ktune_key *key, const struct ktune_config *c,
			    int resident, unsigned grid[3])
{
	grid[0] = (unsigned)(cluster_size(c) * wgmma_walkers(key, c, resident));
	grid[1] = 1;
	grid[2] = 1;
}

/*
 * wgmma: the (cluster) tiles whose K range split-K cuts, those of the last
 * wave: tiles % walkers, i.e. all of them when they are fewer than the walkers.
 */
static int64_t wgmma_split_tiles(const struct ktune_key *key, const struct ktune_config *c,
				 int resident)
{
	return c->split_k > 1 ? tiles(key, c) % wgmma_walkers(key, c, resident) : 0;
}

size_t ktune__gemm_partials_bytes(const struct ktune_key *key, const struct ktune_config *c,
				  int resident)
{
	if (c->split_k <= 1)
		return 0;
	if (c->family == KTUNE_GEMM_WGMMA) /* whole tiles, in the accumulators' layout (gemm_wgmma.cu) */
		return (size_t)c->split_k * (size_t)(wgmma_split_tiles(key, c, resident) * cluster_size(c)) *
		       (size_t)c->block_m * (size_t)c->block_n * sizeof(float);
	return (size_t)c->split_k * (size_t)key->m * (size_t)key->n * sizeof(float);
}

/* wgmma: a counter per block and consumer of each split (cluster) tile, as gemm_wgmma.cu's tile_counters. */
size_t ktune__gemm_counters(const struct ktune_key *key, const struct ktune_config *c, int resident)
{
	if (c->split_k <= 1)
		return 0;
	if (c->family == KTUNE_GEMM_WGMMA)
		return (size_t)(wgmma_split_tiles(key, c, resident) * cluster_size(c)) * (size_t)c->consumers;
	return (size_t)tiles(key, c);
}

void ktune__gemm_read_once(const struct ktune_key *key, const struct ktune_config *c,
			   int *a, int *b)
{
	if (c->family != KTUNE_GEMM_MMA) {
		*a = *b = 0; /* TMA loads have no such variant; gemv streams B always */
		return;
	}
	*a = key->n > 0 && key->n <= c->block_n;
	*b = key->m > 0 && key->m <= c->block_m;
}

int ktune__gemm_defines(const struct ktune_key *key, const struct ktune_config *c,
			char opts[][48], int max)
{
	int n = 0, once_a, once_b;
	if (max < 12)
		return -1;
	if (c->family == KTUNE_GEMM_WGMMA) {
		/* no ALIGNED: the family serves aligned keys only */
		snprintf(opts[n++], 48, "-DBLOCK_M=%d", c->block_m);
		snprintf(opts[n++], 48, "-DBLOCK_N=%d", c->block_n);
		snprintf(opts[n++], 48, "-DBLOCK_K=%d", c->block_k);
		snprintf(opts[n++], 48, "-DSTAGES=%d", c->stages);
		snprintf(opts[n++], 48, "-DCONSUMERS=%d", c->consumers);
		snprintf(opts[n++], 48, "-DCLUSTER_M=%d", c->cluster_m);
		snprintf(opts[n++], 48, "-DDTYPE_BF16=%d", key->dtype == KTUNE_BF16);
		snprintf(opts[n++], 48, "-DTRANS_A=%d", key->variant[0] == 't');
		snprintf(opts[n++], 48, "-DTRANS_B=%d", key->variant[1] == 't');
		return n;
	}
	if (c->family == KTUNE_GEMM_GEMV) {
		/* no ALIGNED: the family serves aligned keys only */
		snprintf(opts[n++], 48, "-DBLOCK_M=%d", c->block_m);
		snprintf(opts[n++], 48, "-DBLOCK_N=%d", c->block_n);
		snprintf(opts[n++], 48, "-DWARPS_N=%d", c->warps_n);
		snprintf(opts[n++], 48, "-DWARPS_K=%d", c->warps_k);
		snprintf(opts[n++], 48, "-DSTAGES=%d", c->stages);
		snprintf(opts[n++], 48, "-DDTYPE_BF16=%d", key->dtype == KTUNE_BF16);
		snprintf(opts[n++], 48, "-DTRANS_A=%d", key->variant[0] == 't');
		snprintf(opts[n++], 48, "-DTRANS_B=%d", key->variant[1] == 't');
		return n;
	}
	ktune__gemm_read_once(key, c, &once_a, &once_b);
	snprintf(opts[n++], 48, "-DBLOCK_M=%d", c->block_m);
	snprintf(opts[n++], 48, "-DBLOCK_N=%d", c->block_n);
	snprintf(opts[n++], 48, "-DBLOCK_K=%d", c->block_k);
	snprintf(opts[n++], 48, "-DWARPS_M=%d", c->warps_m);
	snprintf(opts[n++], 48, "-DWARPS_N=%d", c->warps_n);
	snprintf(opts[n++], 48, "-DSTAGES=%d", c->stages);
	snprintf(opts[n++], 48, "-DDTYPE_BF16=%d", key->dtype == KTUNE_BF16);
	snprintf(opts[n++], 48, "-DTRANS_A=%d", key->variant[0] == 't');
	snprintf(opts[n++], 48, "-DTRANS_B=%d", key->variant[1] == 't');
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

/*
 * Split-K, either family: only where the tiles leave SMs idle, with K to
 * share.  The persistent wgmma kernel splits only the tiles of its last
 * wave, so there it is also worth timing where that wave is short enough
 * for its splits to fill one wave.
 */
static int prune_split_k(const struct ktune_key *key, const struct ktune_config *c, int sm_count,
			 char *why, size_t len)
{
	if (c->split_k <= 1)
		return 0;
	int wgmma = c->family == KTUNE_GEMM_WGMMA;
	int64_t t = tiles(key, c), k_tiles = cdiv(key->k, c->block_k);
	int64_t split = wgmma ? wgmma_split_tiles(key, c, sm_count) : t; /* the tiles it splits */
	if (wgmma && t >= sm_count) {
		if (split == 0 || split * c->split_k > sm_count) {
			snprintf(why, len, "SPLIT_K=%d with %lld tiles for %d SMs: %lld in the last wave",
				 c->split_k, (long long)t, sm_count, (long long)split);
			return 1;
		}
	} else if (t >= sm_count) {
		snprintf(why, len, "SPLIT_K=%d with %lld tiles for %d SMs", c->split_k, (long long)t,
			 sm_count);
		return 1;
	}
	if (k_tiles < 2 * c->split_k) {
		snprintf(why, len, "SPLIT_K=%d leaves under two K tiles per split", c->split_k);
		return 1;
	}
	if (split * c->split_k > 8L * sm_count) {
		snprintf(why, len, "SPLIT_K=%d makes %lld blocks for %d SMs", c->split_k,
			 (long long)(split * c->split_k), sm_count);
		return 1;
	}
	return 0;
}

/*
 * The wgmma family: the smallest tile is 64 x 64, and the grid is persistent,
 * so a tile count never costs launches; tiles that are mostly padding and
 * clusters or groups with nothing to share are what is worth cutting.
 */
static int prune_wgmma(const struct ktune_key *key, const struct ktune_config *c,
		       int sm_count, char *why, size_t len)
{
	if (c->block_m > 64 && c->block_m >= 2 * pow2_ceil(key->m)) {
		snprintf(why, len, "BLOCK_M=%d is more than twice M=%lld", c->block_m, (long long)key->m);
		return 1;
	}
	if (c->block_n > 64 && c->block_n >= 2 * pow2_ceil(key->n)) {
		snprintf(why, len, "BLOCK_N=%d is more than twice N=%lld", c->block_n, (long long)key->n);
		return 1;
	}
	if (c->cluster_m > 1 && key->m <= c->block_m) {
		snprintf(why, len, "CLUSTER_M=%d with one row of tiles: the second block idles",
			 c->cluster_m);
		return 1;
	}
	int64_t t = tiles(key, c);
	/* as for mma.sync: small tiles only where few of them cover the problem */
	if (c->block_m * c->block_n < 128 * 128 && t > 8L * sm_count) {
		snprintf(why, len, "%lld tiles of %dx%d: too small for this problem", (long long)t,
			 c->block_m, c->block_n);
		return 1;
	}
	if (c->group_size > 1 && (tile_rows(key, c) == 1 || cdiv(key->n, c->block_n) == 1)) {
		snprintf(why, len, "GROUP_SIZE=%d changes nothing with one row or column of tiles",
			 c->group_size);
		return 1;
	}
	if (c->split_k > 1 && c->cluster_m > 1) {
		snprintf(why, len, "SPLIT_K=%d with CLUSTER_M=%d: the kernel has split-K without clusters only",
			 c->split_k, c->cluster_m);
		return 1;
	}
	return prune_split_k(key, c, sm_count, why, len);
}

/*
 * gemv: a tile holds every row of A, or each row of tiles reads B again;
 * its warps along K each want a whole batch of steps, and a split what a
 * block's warps take.
 */
static int prune_gemv(const struct ktune_key *key, const struct ktune_config *c, int sm_count,
		      char *why, size_t len)
{
	if (key->m > c->block_m) {
		snprintf(why, len, "BLOCK_M=%d under M=%lld: each row of tiles reads B again", c->block_m,
			 (long long)key->m);
		return 1;
	}
	if (c->block_m > 8 && key->m <= 8) {
		snprintf(why, len, "BLOCK_M=%d for M=%lld: a second mma of padding", c->block_m, (long long)key->m);
		return 1;
	}
	if (c->block_n > 32 && c->block_n >= 2 * pow2_ceil(key->n)) {
		snprintf(why, len, "BLOCK_N=%d is more than twice N=%lld", c->block_n, (long long)key->n);
		return 1;
	}
	int64_t steps = cdiv(key->k, ktune__gemv_kstep(key)), t = tiles(key, c);
	int64_t batch = (int64_t)c->warps_k * c->stages;
	if (cdiv(steps, c->split_k) < batch) {
		snprintf(why, len, "%lld steps of K a block for WARPS_K=%d x STAGES=%d", (long long)cdiv(steps, c->split_k),
			 c->warps_k, c->stages);
		return 1;
	}
	if (c->split_k > 1 && t * c->split_k > 8L * sm_count) {
		snprintf(why, len, "SPLIT_K=%d makes %lld blocks for %d SMs", c->split_k,
			 (long long)(t * c->split_k), sm_count);
		return 1;
	}
	return 0;
}

int ktune__gemm_prune(const struct ktune_key *key, const struct ktune_config *c,
		      int sm_count, int smem_limit, char *why, size_t len)
{
	size_t smem = ktune__gemm_smem_bytes(key, c);
	if (c->family != KTUNE_GEMM_MMA && !key->aligned) {
		snprintf(why, len, "the %s family needs 16-byte aligned operands (%s)", family_of(c)->tag,
			 c->family == KTUNE_GEMM_WGMMA ? "TMA" : "its loads go straight to registers");
		return 1;
	}
	if (smem_limit > 0 && smem > (size_t)smem_limit) {
		snprintf(why, len, "needs %zu bytes of shared memory, the device allows %d", smem,
			 smem_limit);
		return 1;
	}
	if (c->family == KTUNE_GEMM_WGMMA)
		return prune_wgmma(key, c, sm_count, why, len);
	if (c->family == KTUNE_GEMM_GEMV)
		return prune_gemv(key, c, sm_count, why, len);
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
	return prune_split_k(key, c, sm_count, why, len);
}

void ktune__gemm_fit_split(const struct ktune_key *key, struct ktune_config *c, int sm_count)
{
	int wgmma = c->family == KTUNE_GEMM_WGMMA;
	if (wgmma && c->cluster_m > 1)
		c->split_k = 1; /* as the kernel itself would */
	while (c->split_k > 1) {
		int64_t split = wgmma ? wgmma_split_tiles(key, c, sm_count) : tiles(key, c);
		if (split * c->split_k <= 8L * sm_count &&
		    ktune__gemm_partials_bytes(key, c, sm_count) <= (256u << 20))
			break;
		c->split_k /= 2;
	}
}

int ktune__gemm_fit_smem(const struct ktune_key *key, struct ktune_config *c, int smem_limit)
{
	/* wgmma's space starts at 3 stages; the kernel works from 2 */
	while (c->stages > 2 && ktune__gemm_smem_bytes(key, c) > (size_t)smem_limit)
		c->stages--;
	return ktune__gemm_smem_bytes(key, c) <= (size_t)smem_limit ? 0 : -1;
}

struct ktune_config ktune__gemm_default_config(const struct ktune_key *key, int sm_count)
{
	struct ktune_config c;
	if (key->m <= 16)
		c = (struct ktune_config){ 16, 128, 64, 1, 4, 3, 1, 1 };
	else if (key->m <= 64)
		c = (struct ktune_config){ 64, 128, 32, 2, 2, 4, 1, 1 };
	else
		c = (struct ktune_config){ 128, 128, 32, 2, 2, 4, 8, 1 };
	if (sm_count <= 0)
		sm_count = 132;
	/* Too few tiles to fill the GPU: share K between blocks. */
	int64_t t = tiles(key, &c), k_tiles = cdiv(key->k, c.block_k);
	while (c.split_k < 16 && t * c.split_k * 2 <= sm_count && k_tiles >= 4 * c.split_k)
		c.split_k *= 2;
	return c;
}

int ktune__gemm_packed_aligned(const struct ktune_key *key)
{
	int64_t lda = key->variant[0] == 't' ? key->m : key->k, ldb = key->variant[1] == 't' ? key->k : key->n;
	return lda % 8 == 0 && ldb % 8 == 0 && key->n % 8 == 0;
}

void ktune__gemm_problem_layout(const struct ktune_key *key, int64_t *lda, int64_t *ldb, int64_t *ldc,
				int *offset)
{
	*lda = key->variant[0] == 't' ? key->m : key->k;
	*ldb = key->variant[1] == 't' ? key->k : key->n;
	*ldc = key->n;
	*offset = 0;
	if (key->aligned) {
		*lda = (*lda + 7) / 8 * 8;
		*ldb = (*ldb + 7) / 8 * 8;
		*ldc = (*ldc + 7) / 8 * 8;
	} else if (ktune__gemm_packed_aligned(key)) {
		*offset = 1;
	}
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

/* ------------------------------------------------------------ the op's entry */

static const char *const layout_choices[] = { "nn", "nt", "tn", "tt", NULL };

static const struct ktune_op_field op_fields[] = {
	{ "layout", "A and B: n (A [M,K], B [K,N]) or t (A [K,M], B [N,K])", KTUNE_ROLE_COMPILED, -1,
	  layout_choices },
	{ "m", "rows of C (tuned exactly)", KTUNE_ROLE_TUNED, 0, NULL },
	{ "n", "columns of C (tuned exactly)", KTUNE_ROLE_TUNED, 1, NULL },
	{ "k", "the inner dimension (tuned exactly)", KTUNE_ROLE_TUNED, 2, NULL },
};

static const struct ktune_family op_families[KTUNE_GEMM_NFAMILIES] = {
	{ "gemm", KTUNE_GEMM_SOURCE, KTUNE_GEMM_SPACE, { "gemm_kernel" } },
	{ "gemm_wgmma", KTUNE_GEMM_WGMMA_SOURCE, KTUNE_GEMM_WGMMA_SPACE, { "gemm_wgmma_kernel" } },
	{ "gemm_gemv", KTUNE_GEMM_GEMV_SOURCE, KTUNE_GEMM_GEMV_SPACE, { "gemv_kernel" } },
};

static const ktune_dtype op_dtypes[] = { KTUNE_F16, KTUNE_BF16 };

/* Up to 2^20 a side (the largest a sweep spec takes) and 2^31 elements an operand. */
static int key_check(const struct ktune_key *key, struct ktune_err *e)
{
	if (key->m > (1 << 20) || key->n > (1 << 20) || key->k > (1 << 20))
		return ktune__fail(e, KTUNE_ERR_INVALID, "gemm: M, N and K are at most %d", 1 << 20);
	return KTUNE_OK;
}

const struct ktune_op ktune__op_gemm = {
	.name = "gemm",
	.summary = "C = alpha op(A) op(B) + beta C, f16 or bf16 (cuBLAS is the baseline)",
	.fields = op_fields,
	.nfields = 4,
	.families = op_families,
	.nfamilies = KTUNE_GEMM_NFAMILIES,
	.dtypes = op_dtypes,
	.ndtypes = 2,
	.key_check = key_check,
	.bytes = ktune__gemm_bytes,
	.flops = ktune__gemm_flops,
};
