/*
 * ops.c - the table of ops, and what every op shares: its key's variant as
 * text, its families' spaces, config texts and candidates.
 *
 * Adding an op: write src/ops/<op>.c filling a struct ktune_op, its
 * templates and spaces in kernels/templates/, declare it below and add it
 * to the table; its public function goes in include/ktune.h.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/op.h"
#include "templates.h"

extern const struct ktune_op ktune__op_gemm, ktune__op_add, ktune__op_gelu, ktune__op_glu,
	ktune__op_dropout, ktune__op_softmax, ktune__op_rmsnorm, ktune__op_layernorm, ktune__op_cross_entropy,
	ktune__op_gemm_quant, ktune__op_attention;

const struct ktune_op *const ktune__ops[] = {
	&ktune__op_gemm, &ktune__op_add, &ktune__op_gelu, &ktune__op_glu, &ktune__op_dropout,
	&ktune__op_softmax, &ktune__op_rmsnorm, &ktune__op_layernorm, &ktune__op_cross_entropy, &ktune__op_gemm_quant,
	&ktune__op_attention, NULL,
};

#define NOPS ((int)(sizeof(ktune__ops) / sizeof(ktune__ops[0])) - 1)

const struct ktune_op *ktune__op_find(const char *name)
{
	for (int i = 0; name && ktune__ops[i]; i++)
		if (!strcmp(ktune__ops[i]->name, name))
			return ktune__ops[i];
	return NULL;
}

const struct ktune_op *ktune__op_of(const struct ktune_key *key)
{
	if (!memchr(key->op, '\0', sizeof(key->op)))
		return NULL;
	return ktune__op_find(key->op);
}

static char op_names[128];
static pthread_once_t op_names_once = PTHREAD_ONCE_INIT;

static void fill_op_names(void)
{
	size_t used = 0;
	for (int i = 0; ktune__ops[i]; i++)
		used += (size_t)snprintf(op_names + used, sizeof(op_names) - used, "%s%s", i ? ", " : "",
					 ktune__ops[i]->name);
}

const char *ktune__op_names(void)
{
	pthread_once(&op_names_once, fill_op_names);
	return op_names;
}

int ktune__op_is_gemm(const struct ktune_op *op)
{
	return op == &ktune__op_gemm;
}

/*
 * Whether a key's floor is its FLOPs rather than its bytes: GEMM always (its
 * rate is TFLOP/s beside cuBLAS), another op when its arithmetic intensity
 * passes the H100's ridge point, about 800 TFLOP/s over 3 TB/s (attention).
 */
int ktune__op_compute_bound(const struct ktune_op *op, const struct ktune_key *key)
{
	if (ktune__op_is_gemm(op))
		return 1;
	double bytes = op->bytes ? op->bytes(key) : 0, flops = op->flops ? op->flops(key) : 0;
	return bytes > 0 && flops / bytes >= 256;
}

/* ------------------------------------------------------------ the variant */

/* The i-th comma-separated part of a variant into buf; -1 if there are fewer parts. */
static int variant_part(const char *variant, int i, char *buf, size_t len)
{
	const char *p = variant;
	for (; i > 0; i--) {
		p = strchr(p, ',');
		if (!p)
			return -1;
		p++;
	}
	size_t n = strcspn(p, ",");
	if (n >= len)
		return -1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return 0;
}

/* The position among the variant's parts of field f (its variant fields in order), or -1. */
static int part_of(const struct ktune_op *op, int f)
{
	int part = 0;
	if (op->fields[f].dim >= 0)
		return -1;
	for (int i = 0; i < f; i++)
		part += op->fields[i].dim < 0;
	return part;
}

static int field_index(const struct ktune_op *op, const char *name)
{
	for (int i = 0; i < op->nfields; i++)
		if (!strcmp(op->fields[i].name, name))
			return i;
	return -1;
}

int ktune__op_variant_get(const struct ktune_op *op, const struct ktune_key *key,
			  const char *field, char *buf, size_t len)
{
	int f = field_index(op, field);
	if (f < 0 || op->fields[f].dim >= 0)
		return -1;
	return variant_part(key->variant, part_of(op, f), buf, len);
}

int ktune__op_variant_index(const struct ktune_op *op, const struct ktune_key *key, const char *field)
{
	char part[KTUNE_KEY_VARIANT];
	int f = field_index(op, field);
	if (f < 0 || ktune__op_variant_get(op, key, field, part, sizeof(part)))
		return -1;
	for (int i = 0; op->fields[f].choices[i]; i++)
		if (!strcmp(op->fields[f].choices[i], part))
			return i;
	return -1;
}

static int choice_index(const struct ktune_op_field *f, const char *value)
{
	for (int i = 0; f->choices[i]; i++)
		if (!strcmp(f->choices[i], value))
			return i;
	return -1;
}

static void choices_text(const struct ktune_op_field *f, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; f->choices[i] && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", f->choices[i]);
}

int ktune__op_variant_set(const struct ktune_op *op, struct ktune_key *key, const char *const *values,
			  struct ktune_err *e)
{
	char variant[KTUNE_KEY_VARIANT] = "", list[128];
	size_t used = 0;
	int nparts = 0;

	for (int f = 0; f < op->nfields; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		if (fd->dim >= 0)
			continue;
		const char *v = values && values[f] ? values[f] : fd->choices[0];
		if (choice_index(fd, v) < 0) {
			choices_text(fd, list, sizeof(list));
			return ktune__fail(e, KTUNE_ERR_INVALID, "%s: %s '%s' is not one of %s", op->name,
					   fd->name, v, list);
		}
		int n = snprintf(variant + used, sizeof(variant) - used, "%s%s", nparts ? "," : "", v);
		if (n < 0 || (size_t)n >= sizeof(variant) - used)
			return ktune__fail(e, KTUNE_ERR_INVALID, "%s: variant too long", op->name);
		used += (size_t)n;
		nparts++;
	}
	memset(key->variant, 0, sizeof(key->variant));
	memcpy(key->variant, variant, used);
	return KTUNE_OK;
}

int ktune__op_key_check(const struct ktune_key *key, struct ktune_err *e)
{
	const struct ktune_op *op = ktune__op_of(key);
	char list[128];
	int i, nparts = 0, dims_used[KTUNE_KEY_DIMS] = { 0 };

	if (!op)
		return ktune__fail(e, KTUNE_ERR_INVALID, "op '%.16s' is not one of %s", key->op,
				   ktune__op_names());
	for (i = 0; i < op->ndtypes && op->dtypes[i] != key->dtype; i++)
		;
	if (i == op->ndtypes) {
		const char *name = ktune__dtype_name(key->dtype);
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s: dtype '%s' is not supported", op->name,
				   name ? name : "?");
	}
	if (!memchr(key->variant, '\0', sizeof(key->variant)))
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s: variant is not terminated", op->name);
	for (int f = 0; f < op->nfields; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		if (fd->dim >= 0) {
			int64_t v = *ktune__key_dim((struct ktune_key *)key, fd->dim);
			dims_used[fd->dim] = 1;
			if (v < 1 || v > KTUNE_OP_MAX_SIZE)
				return ktune__fail(e, KTUNE_ERR_INVALID, "%s: %s = %" PRId64
						   " is not in 1..%" PRId64, op->name, fd->name, v,
						   (int64_t)KTUNE_OP_MAX_SIZE);
			continue;
		}
		char part[KTUNE_KEY_VARIANT];
		if (variant_part(key->variant, nparts++, part, sizeof(part)) || choice_index(fd, part) < 0) {
			choices_text(fd, list, sizeof(list));
			return ktune__fail(e, KTUNE_ERR_INVALID, "%s: %s in variant '%s' is not one of %s",
					   op->name, fd->name, key->variant, list);
		}
	}
	/* exactly the fields' parts: no more (an op without variant fields has "") */
	{
		int commas = 0;
		for (const char *p = key->variant; *p; p++)
			commas += *p == ',';
		if (nparts == 0 ? key->variant[0] != '\0' : commas != nparts - 1)
			return ktune__fail(e, KTUNE_ERR_INVALID, "%s: variant '%s' has %d parts, not %d",
					   op->name, key->variant, commas + 1, nparts);
	}
	for (i = 0; i < KTUNE_KEY_DIMS; i++)
		if (!dims_used[i] && *ktune__key_dim((struct ktune_key *)key, i) != 0)
			return ktune__fail(e, KTUNE_ERR_INVALID, "%s: size %d is not one of its fields",
					   op->name, i);
	if (key->aligned != 0 && key->aligned != 1)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s: aligned is %d, not 0 or 1", op->name,
				   key->aligned);
	return op->key_check ? op->key_check(key, e) : KTUNE_OK;
}

/* ------------------------------------------------------------ spaces and configs */

#define MAX_FAMILIES 64

/* Each family's space, parsed once; families are numbered across the table. */
static struct {
	const struct ktune_family *family;
	struct ktune_space space;
	int status;
	struct ktune_err err;
} spaces[MAX_FAMILIES];
static pthread_once_t spaces_once = PTHREAD_ONCE_INIT;

static void load_spaces(void)
{
	int n = 0;
	for (int i = 0; ktune__ops[i]; i++)
		for (int f = 0; f < ktune__ops[i]->nfamilies && n < MAX_FAMILIES; f++, n++) {
			const struct ktune_family *fam = &ktune__ops[i]->families[f];
			const struct ktune_template_file *file = ktune__template_file(fam->space);
			spaces[n].family = fam;
			if (!file) {
				spaces[n].status = ktune__fail(&spaces[n].err, KTUNE_ERR_NOT_FOUND,
							       "no embedded '%s'", fam->space);
				continue;
			}
			spaces[n].status = ktune__space_parse(&spaces[n].space, file->text, file->len,
							      file->name, &spaces[n].err);
			if (!spaces[n].status && strcmp(spaces[n].space.family, fam->name))
				spaces[n].status = ktune__fail(&spaces[n].err, KTUNE_ERR_PARSE,
							       "'%s' declares family '%s', not '%s'",
							       file->name, spaces[n].space.family, fam->name);
		}
}

const struct ktune_space *ktune__op_space(const struct ktune_op *op, int family, struct ktune_err *e)
{
	if (family < 0 || family >= op->nfamilies) {
		ktune__fail(e, KTUNE_ERR_INVALID, "%s has no family %d", op->name, family);
		return NULL;
	}
	pthread_once(&spaces_once, load_spaces);
	for (int i = 0; i < MAX_FAMILIES && spaces[i].family; i++)
		if (spaces[i].family == &op->families[family]) {
			if (spaces[i].status) {
				if (e)
					*e = spaces[i].err;
				return NULL;
			}
			return &spaces[i].space;
		}
	ktune__fail(e, KTUNE_ERR_NOT_FOUND, "no space for family '%s'", op->families[family].name);
	return NULL;
}

int ktune__op_family_index(const struct ktune_op *op, const char *name)
{
	for (int f = 0; name && f < op->nfamilies; f++)
		if (!strcmp(op->families[f].name, name))
			return f;
	return -1;
}

int ktune__op_family_runs(const struct ktune_op *op, int family, const char *arch)
{
	if (family < 0 || family >= op->nfamilies)
		return 0;
	const char *own = op->families[family].arch;
	if (!own || !arch || !strcmp(own, arch))
		return 1;
	/* "sm_90a" runs on "sm_90": the arch-specific features of that arch alone */
	size_t n = strlen(arch);
	return strlen(own) == n + 1 && !strncmp(own, arch, n) && own[n] == 'a';
}

const char *ktune__op_compile_arch(const struct ktune_op *op, int family, const char *arch)
{
	if (family >= 0 && family < op->nfamilies && op->families[family].arch)
		return op->families[family].arch;
	return arch;
}

/*
 * The families' hashes, computed once: sha256 of the source's hash and
 * those of the embedded headers it includes ("<source> <prelude>" for a
 * template that includes only the prelude).
 */
static char family_hashes[MAX_FAMILIES][65];
static pthread_once_t hashes_once = PTHREAD_ONCE_INIT;

static void compute_hashes(void)
{
	int n = 0;
	for (int i = 0; ktune__ops[i]; i++)
		for (int f = 0; f < ktune__ops[i]->nfamilies && n < MAX_FAMILIES; f++, n++) {
			const char *name = ktune__ops[i]->families[f].source;
			const struct ktune_template_file *src = ktune__template_file(name), *h[KTUNE_MAX_HEADERS];
			char all[(KTUNE_MAX_HEADERS + 1) * 65 + 1];
			size_t used = (size_t)snprintf(all, sizeof(all), "%s", ktune__template_hash(name));
			int nh = src ? ktune__template_headers(src->text, src->len, h) : 0;
			for (int j = 0; j < nh; j++)
				used += (size_t)snprintf(all + used, sizeof(all) - used, " %s",
							 ktune__template_hash(h[j]->name));
			ktune__sha256_hex(all, used, family_hashes[n]);
		}
}

const char *ktune__op_family_hash(const struct ktune_op *op, int family)
{
	int n = 0;
	pthread_once(&hashes_once, compute_hashes);
	for (int i = 0; ktune__ops[i]; i++)
		for (int f = 0; f < ktune__ops[i]->nfamilies && n < MAX_FAMILIES; f++, n++)
			if (ktune__ops[i] == op && f == family)
				return family_hashes[n];
	return "";
}

int ktune__op_result_fresh(const struct ktune_op *op, const char *family, const char *template_hash)
{
	int f = ktune__op_family_index(op, family);
	return f >= 0 && !strcmp(ktune__op_family_hash(op, f), template_hash);
}

int ktune__op_config_format(const struct ktune_op *op, const struct ktune_config *c, char *buf,
			    size_t len)
{
	struct ktune_err e;
	const struct ktune_space *s = ktune__op_space(op, c->family, &e);
	size_t used = 0;
	buf[0] = '\0';
	if (!s)
		return -1;
	for (int i = 0; i < s->nparams; i++) {
		int n = snprintf(buf + used, len - used, "%s%s=%ld", i ? "," : "", s->params[i].name, c->v[i]);
		if (n < 0 || (size_t)n >= len - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

int ktune__op_config_parse(const struct ktune_op *op, const char *family, const char *text,
			   struct ktune_config *c, struct ktune_err *e)
{
	int f = ktune__op_family_index(op, family), seen[KTUNE_SPACE_MAX_PARAMS] = { 0 };
	const struct ktune_space *s;
	const char *p = text;

	if (f < 0)
		return ktune__fail(e, KTUNE_ERR_PARSE, "%s has no family '%s'", op->name, family);
	if (!(s = ktune__op_space(op, f, e)))
		return KTUNE_ERR_PARSE;
	memset(c, 0, sizeof(*c));
	c->family = f;
	while (*p) {
		char name[32];
		size_t n = strcspn(p, "=,");
		if (p[n] != '=' || n == 0 || n >= sizeof(name))
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%.200s': expected NAME=VALUE at '%.40s'",
					   text, p);
		memcpy(name, p, n);
		name[n] = '\0';
		int i = ktune__space_param_index(s, name);
		if (i < 0)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%.200s': '%s' is not a parameter of %s",
					   text, name, family);
		if (seen[i]++)
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%.200s': '%s' given twice", text, name);
		char *end;
		p += n + 1;
		long v = strtol(p, &end, 10);
		if (end == p || (*end && *end != ','))
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%.200s': %s is not a number", text, name);
		c->v[i] = v;
		p = *end ? end + 1 : end;
	}
	for (int i = 0; i < s->nparams; i++)
		if (!seen[i])
			return ktune__fail(e, KTUNE_ERR_PARSE, "config '%.200s': %s is missing", text,
					   s->params[i].name);
	struct ktune_err why;
	if (!ktune__space_admits(s, c->v, &why))
		return ktune__fail(e, KTUNE_ERR_PARSE, "config '%.200s' is not in %s's space: %s", text,
				   family, why.msg);
	return KTUNE_OK;
}

long ktune__op_param(const struct ktune_op *op, const struct ktune_config *c, const char *name,
		     long otherwise)
{
	const struct ktune_space *s = ktune__op_space(op, c->family, NULL);
	int i = s ? ktune__space_param_index(s, name) : -1;
	return i < 0 ? otherwise : c->v[i];
}

long ktune__op_thread_registers(long threads, long min_warps)
{
	long min_blocks = min_warps * 32 / threads > 1 ? min_warps * 32 / threads : 1;
	long regs = 65536 / (threads * min_blocks);
	return regs > 255 ? 255 : regs;
}

/* ------------------------------------------------------------ candidates */

/* xorshift: a small, seeded generator so a budgeted sweep is repeatable. */
static unsigned next_random(unsigned *state)
{
	unsigned x = *state ? *state : 2463534242u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

void ktune__sample_configs(struct ktune_config *cfgs, int n, int keep, unsigned seed)
{
	unsigned state = seed * 2654435761u + 1;
	for (int i = 0; i < keep && i < n; i++) {
		int j = i + (int)(next_random(&state) % (unsigned)(n - i));
		struct ktune_config t = cfgs[i];
		cfgs[i] = cfgs[j];
		cfgs[j] = t;
	}
}

struct collect {
	const struct ktune_op *op;
	const struct ktune_key *key;
	int family, sm_count, nparams;
	struct ktune_config *cfgs;
	int n, cap, pruned, failed;
};

static int collect_config(const long *values, void *arg)
{
	struct collect *c = arg;
	struct ktune_config cfg = { .family = c->family };
	char why[128];
	memcpy(cfg.v, values, (size_t)c->nparams * sizeof(long));
	if (c->op->prune && c->op->prune(c->key, &cfg, c->sm_count, why, sizeof(why))) {
		c->pruned++;
		return 0;
	}
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		struct ktune_config *grown = realloc(c->cfgs, (size_t)cap * sizeof(*grown));
		if (!grown) {
			c->failed = 1;
			return 1;
		}
		c->cfgs = grown;
		c->cap = cap;
	}
	c->cfgs[c->n++] = cfg;
	return 0;
}

int ktune__op_candidates(const struct ktune_op *op, const struct ktune_key *key, const char *arch, int sm_count,
			 int budget, unsigned seed, struct ktune_config **out, int *n, int *npruned,
			 struct ktune_err *e)
{
	struct collect c = { .op = op, .key = key, .sm_count = sm_count };
	for (int f = 0; f < op->nfamilies; f++) {
		if (!ktune__op_family_runs(op, f, arch))
			continue; /* never a candidate on this device (a family of sm_90a on another arch) */
		const struct ktune_space *s = ktune__op_space(op, f, e);
		if (!s) {
			free(c.cfgs);
			return KTUNE_ERR_PARSE;
		}
		c.family = f;
		c.nparams = s->nparams;
		ktune__space_enumerate(s, collect_config, &c);
		if (c.failed) {
			free(c.cfgs);
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		}
	}
	if (budget > 0 && c.n > budget) {
		ktune__sample_configs(c.cfgs, c.n, budget, seed);
		c.n = budget;
	}
	*out = c.cfgs;
	*n = c.n;
	if (npruned)
		*npruned = c.pruned;
	return KTUNE_OK;
}

int ktune__op_same_kernel(const struct ktune_op *op, const struct ktune_key *ka, const struct ktune_config *a,
			  const struct ktune_key *kb, const struct ktune_config *b)
{
	char da[KTUNE_OP_MAX_DEFINES][48], db[KTUNE_OP_MAX_DEFINES][48];
	if (a->family != b->family || ka->dtype != kb->dtype || ka->aligned != kb->aligned ||
	    strcmp(ka->variant, kb->variant))
		return 0;
	int na = op->defines(ka, a, da, KTUNE_OP_MAX_DEFINES), nb = op->defines(kb, b, db, KTUNE_OP_MAX_DEFINES);
	if (na < 0 || na != nb)
		return 0;
	for (int i = 0; i < na; i++)
		if (strcmp(da[i], db[i]))
			return 0;
	return 1;
}

int64_t ktune__op_ld(const struct ktune_op_call *call, int buf)
{
	return call->ld[buf] ? call->ld[buf] : call->size[1];
}

int ktune__op_buf_size(const struct ktune_key *key, const struct ktune_op_buf *buf)
{
	return buf->type == KTUNE_BUF_ELEM ? ktune__dtype_size(key->dtype) : buf->type == KTUNE_BUF_I64 ? 8 : 4;
}

int ktune__op_call_aligned(const struct ktune_key *key, const struct ktune_op_layout *layout,
			   const struct ktune_op_call *call)
{
	for (int i = 0; i < KTUNE_OP_MAX_BUFS; i++) {
		int size = i < layout->nbufs ? ktune__op_buf_size(key, &layout->bufs[i]) : ktune__dtype_size(key->dtype);
		if (i < layout->nbufs && layout->bufs[i].type == KTUNE_BUF_I64)
			continue; /* read one index at a time */
		if (call->buf[i] % 16 || (call->ld[i] * size) % 16)
			return 0;
	}
	return 1;
}

int ktune__op_packed_aligned(const struct ktune_key *key)
{
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_op_call call = { .buf = { 0 } };
	struct ktune_op_layout layout;
	if (!op || ktune__op_is_gemm(op))
		return 1;
	op->layout(key, &layout);
	for (int i = 0; i < layout.nbufs; i++) /* buffers as cuMemAlloc gives them, rows packed */
		call.ld[i] = layout.bufs[i].ld;
	return ktune__op_call_aligned(key, &layout, &call);
}

int ktune__op_steps(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
		    const struct ktune_op_call *call, int sm_count, struct ktune_op_step *out)
{
	if (op->steps)
		return op->steps(key, c, call, sm_count, out);
	memset(out, 0, sizeof(*out));
	op->geometry(key, c, call, sm_count, &out->launch);
	op->args(key, call, &out->args);
	return 1;
}

const char *ktune__result_hash(const struct ktune_op *op, int family)
{
	return ktune__op_is_gemm(op) ? ktune__gemm_family_hash(family) : ktune__op_family_hash(op, family);
}

int ktune__result_fresh(const struct ktune_key *key, const char *family, const char *template_hash)
{
	const struct ktune_op *op = ktune__op_of(key);
	if (!op)
		return 0;
	if (ktune__op_is_gemm(op))
		return ktune__gemm_result_fresh(family, template_hash);
	return ktune__op_result_fresh(op, family, template_hash);
}
