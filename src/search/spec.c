/*
 * spec.c - sweep specifications: which keys `ktune sweep` tunes.
 *
 * A spec is read in two steps.  The first checks every field and counts the
 * keys each shape stands for, refusing a spec over KTUNE_SPEC_MAX_KEYS before
 * anything is allocated for them; the second expands the shapes into
 * (m, n, k) triples, drops repeats, and crosses them with dtypes and layouts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "ops/op.h"
#include "spec.h"
#include "yaml-read.h"

/* One of m, n, k or mnk: a list of values, or a range from..to by step or by mul. */
struct dim {
	long *values; /* a list; NULL for a range */
	long count;
	long from, to, step, mul; /* a range: exactly one of step and mul is non-zero */
};

/* A shape entry: m, n, k; or, for mnk, the squares of d[0]. */
struct shape {
	int square;
	struct dim d[3];
};

struct triple {
	long m, n, k;
};

static const char *const layout_names[] = { "nn", "nt", "tn", "tt" };

static void free_shapes(struct shape *shapes, long n)
{
	long i;

	for (i = 0; shapes && i < n; i++) {
		free(shapes[i].d[0].values);
		free(shapes[i].d[1].values);
		free(shapes[i].d[2].values);
	}
	free(shapes);
}

/* Reads one dimension value, 1..max. */
static int parse_dim_value(const yaml_node_t *n, long *out, long max, const char *path,
			   const char *file, struct ktune_err *e)
{
	const char *s = ktune__yaml_scalar(n);
	int rc;

	if (!s)
		return ktune__yaml_bad(e, file, n, "%s: expected a number", path);
	if ((rc = ktune__yaml_long(s, out)) == -1)
		return ktune__yaml_bad(e, file, n, "%s: '%.64s' is not an integer", path, s);
	if (rc || *out < 1 || *out > max)
		return ktune__yaml_bad(e, file, n, "%s: '%.64s' is not between 1 and %ld", path,
				       s, max);
	return 0;
}

/* Reads the step or mul of a range: a positive integer. */
static int parse_stride(const yaml_node_t *n, long min, long *out, const char *path,
			const char *file, struct ktune_err *e)
{
	const char *s = ktune__yaml_scalar(n);
	int rc;

	if (!s)
		return ktune__yaml_bad(e, file, n, "%s: expected a number", path);
	if ((rc = ktune__yaml_long(s, out)) == -1)
		return ktune__yaml_bad(e, file, n, "%s: '%.64s' is not an integer", path, s);
	if (rc == -2 || *out > KTUNE_SPEC_MAX_DIM)
		return ktune__yaml_bad(e, file, n, "%s: '%.64s' is larger than %ld", path, s,
				       KTUNE_SPEC_MAX_DIM);
	if (*out < min)
		return ktune__yaml_bad(e, file, n, "%s: '%.64s' must be %ld or more", path, s,
				       min);
	return 0;
}

static int parse_range(struct dim *d, yaml_document_t *doc, const yaml_node_t *n, long max,
		       const char *path, const char *file, struct ktune_err *e)
{
	const yaml_node_t *from = NULL, *to = NULL, *step = NULL, *mul = NULL;
	yaml_node_pair_t *pair;
	char sub[128];
	long v;
	int rc;

	for (pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
		const char *key = ktune__yaml_scalar(k);
		const yaml_node_t **slot;

		if (!key)
			return ktune__yaml_bad(e, file, k, "%s: expected a key", path);
		if (!strcmp(key, "from"))
			slot = &from;
		else if (!strcmp(key, "to"))
			slot = &to;
		else if (!strcmp(key, "step"))
			slot = &step;
		else if (!strcmp(key, "mul"))
			slot = &mul;
		else
			return ktune__yaml_bad(e, file, k, "%s: unknown key '%.64s'", path, key);
		if (*slot)
			return ktune__yaml_bad(e, file, k, "%s: duplicate key '%s'", path, key);
		*slot = yaml_document_get_node(doc, pair->value);
	}
	if (!from || !to)
		return ktune__yaml_bad(e, file, n, "%s: a range needs 'from' and 'to'", path);
	if (!step == !mul)
		return ktune__yaml_bad(e, file, n, "%s: a range needs one of 'step' and 'mul'",
				       path);
	snprintf(sub, sizeof(sub), "%s.from", path);
	if ((rc = parse_dim_value(from, &d->from, max, sub, file, e)))
		return rc;
	snprintf(sub, sizeof(sub), "%s.to", path);
	if ((rc = parse_dim_value(to, &d->to, max, sub, file, e)))
		return rc;
	if (d->from > d->to)
		return ktune__yaml_bad(e, file, n, "%s: 'from' (%ld) is greater than 'to' (%ld)",
				       path, d->from, d->to);
	if (step) {
		snprintf(sub, sizeof(sub), "%s.step", path);
		if ((rc = parse_stride(step, 1, &d->step, sub, file, e)))
			return rc;
		d->count = (d->to - d->from) / d->step + 1;
	} else {
		snprintf(sub, sizeof(sub), "%s.mul", path);
		if ((rc = parse_stride(mul, 2, &d->mul, sub, file, e)))
			return rc;
		/* to <= KTUNE_SPEC_MAX_OP_DIM and mul <= 2^20: no product overflows */
		for (d->count = 1, v = d->from; v * d->mul <= d->to; v *= d->mul)
			d->count++;
	}
	return 0;
}

/* Reads a number, a list of numbers or a range. */
static int parse_dim(struct dim *d, yaml_document_t *doc, const yaml_node_t *n, long max,
		     const char *path, const char *file, struct ktune_err *e)
{
	yaml_node_item_t *it;
	char sub[128];
	int rc;

	memset(d, 0, sizeof(*d));
	switch (n->type) {
	case YAML_SCALAR_NODE:
		if ((rc = parse_dim_value(n, &d->from, max, path, file, e)))
			return rc;
		d->to = d->from;
		d->step = 1;
		d->count = 1;
		return 0;
	case YAML_MAPPING_NODE:
		return parse_range(d, doc, n, max, path, file, e);
	case YAML_SEQUENCE_NODE:
		break;
	default:
		return ktune__yaml_bad(e, file, n, "%s: expected a number, a list or a range",
				       path);
	}
	d->count = n->data.sequence.items.top - n->data.sequence.items.start;
	if (d->count == 0)
		return ktune__yaml_bad(e, file, n, "%s: empty list", path);
	d->values = malloc((size_t)d->count * sizeof(*d->values));
	if (!d->values)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
		long i = it - n->data.sequence.items.start;

		snprintf(sub, sizeof(sub), "%s[%ld]", path, i);
		rc = parse_dim_value(yaml_document_get_node(doc, *it), &d->values[i], max, sub, file, e);
		if (rc)
			return rc;
	}
	return 0;
}

/* The i-th value of a dimension, 0 <= i < d->count. */
static long dim_value(const struct dim *d, long i)
{
	long v;

	if (d->values)
		return d->values[i];
	if (d->step)
		return d->from + i * d->step;
	for (v = d->from; i > 0; i--)
		v *= d->mul;
	return v;
}

static int parse_shape(struct shape *sh, yaml_document_t *doc, const yaml_node_t *n,
		       const char *path, const char *file, struct ktune_err *e)
{
	static const char *const names[] = { "m", "n", "k", "mnk" };
	const yaml_node_t *dims[4] = { NULL, NULL, NULL, NULL };
	yaml_node_pair_t *pair;
	char sub[128];
	int i, rc;

	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n, "%s: expected a mapping such as "
				       "{m: 16, n: 4096, k: 4096} or {mnk: 1024}", path);
	for (pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
		const char *key = ktune__yaml_scalar(k);

		if (!key)
			return ktune__yaml_bad(e, file, k, "%s: expected a key", path);
		for (i = 0; i < 4 && strcmp(key, names[i]); i++)
			;
		if (i == 4)
			return ktune__yaml_bad(e, file, k, "%s: unknown key '%.64s'", path, key);
		if (dims[i])
			return ktune__yaml_bad(e, file, k, "%s: duplicate key '%s'", path, key);
		dims[i] = yaml_document_get_node(doc, pair->value);
	}
	if (dims[3]) {
		for (i = 0; i < 3; i++) {
			if (dims[i])
				return ktune__yaml_bad(e, file, n,
						       "%s: 'mnk' cannot be combined with '%s'",
						       path, names[i]);
		}
		sh->square = 1;
		snprintf(sub, sizeof(sub), "%s.mnk", path);
		return parse_dim(&sh->d[0], doc, dims[3], KTUNE_SPEC_MAX_DIM, sub, file, e);
	}
	for (i = 0; i < 3; i++) {
		if (!dims[i])
			return ktune__yaml_bad(e, file, n, "%s: missing '%s' (or give 'mnk')", path,
					       names[i]);
		snprintf(sub, sizeof(sub), "%s.%s", path, names[i]);
		if ((rc = parse_dim(&sh->d[i], doc, dims[i], KTUNE_SPEC_MAX_DIM, sub, file, e)))
			return rc;
	}
	return 0;
}

/* a * b, or KTUNE_SPEC_MAX_KEYS + 1 if that is larger. */
static long mul_capped(long a, long b)
{
	const long cap = KTUNE_SPEC_MAX_KEYS + 1;

	if (b == 0)
		return 0;
	return a > cap / b ? cap : (a * b > cap ? cap : a * b);
}

static long shape_count(const struct shape *sh)
{
	if (sh->square)
		return sh->d[0].count;
	return mul_capped(mul_capped(sh->d[0].count, sh->d[1].count), sh->d[2].count);
}

/*
 * Reads a list of names, or one name, into out[] without repeats (at most
 * nchoices of them); choices[i] names value i.  Returns the count or an error.
 */
static int parse_choices(int *out, const char *const *choices, int nchoices,
			 yaml_document_t *doc, const yaml_node_t *n, const char *path,
			 const char *file, struct ktune_err *e)
{
	char list[128] = "", sub[128];
	yaml_node_item_t *it;
	int i, j, count = 0;
	size_t len = 0;

	for (i = 0; i < nchoices; i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "",
					choices[i]);
	if (n->type == YAML_SEQUENCE_NODE) {
		it = n->data.sequence.items.start;
		if (it == n->data.sequence.items.top)
			return ktune__yaml_bad(e, file, n, "%s: empty list", path);
	} else {
		it = NULL;
	}
	do {
		const yaml_node_t *v = it ? yaml_document_get_node(doc, *it) : n;
		const char *s = ktune__yaml_scalar(v);

		if (it)
			snprintf(sub, sizeof(sub), "%s[%ld]", path,
				 (long)(it - n->data.sequence.items.start));
		else
			snprintf(sub, sizeof(sub), "%s", path);
		if (!s)
			return ktune__yaml_bad(e, file, v, "%s: expected one of %s", sub, list);
		for (i = 0; i < nchoices && strcmp(s, choices[i]); i++)
			;
		if (i == nchoices)
			return ktune__yaml_bad(e, file, v, "%s: '%.64s' is not one of %s", sub, s,
					       list);
		for (j = 0; j < count && out[j] != i; j++)
			;
		if (j == count)
			out[count++] = i;
	} while (it && ++it < n->data.sequence.items.top);
	return count;
}

static unsigned long hash_triple(const struct triple *t)
{
	unsigned long h = 1469598103934665603UL;

	h = (h ^ (unsigned long)t->m) * 1099511628211UL;
	h = (h ^ (unsigned long)t->n) * 1099511628211UL;
	h = (h ^ (unsigned long)t->k) * 1099511628211UL;
	return h ^ (h >> 29);
}

/*
 * Makes out's keys: every dtype, then every layout, then the triples in
 * order, with repeated triples dropped (the first one stays).
 */
static int expand(struct ktune_spec *out, const ktune_dtype *dtypes, int ndtypes,
		  const int *layouts, int nlayouts, const struct triple *t, long nt,
		  struct ktune_err *e)
{
	long *slots = NULL, *uniq = NULL, nuniq = 0, nslots = 1, i, j;
	int d, l, rc = 0;

	while (nslots < 2 * nt)
		nslots *= 2;
	slots = malloc((size_t)nslots * sizeof(*slots));
	uniq = malloc((size_t)(nt ? nt : 1) * sizeof(*uniq));
	if (!slots || !uniq) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < nslots; i++)
		slots[i] = -1;
	for (i = 0; i < nt; i++) {
		j = (long)(hash_triple(&t[i]) & (unsigned long)(nslots - 1));
		for (; slots[j] >= 0; j = (j + 1) & (nslots - 1)) {
			const struct triple *u = &t[slots[j]];

			if (u->m == t[i].m && u->n == t[i].n && u->k == t[i].k)
				break;
		}
		if (slots[j] < 0) {
			slots[j] = i;
			uniq[nuniq++] = i;
		}
	}
	out->keys = calloc((size_t)(ndtypes * nlayouts * nuniq), sizeof(*out->keys));
	if (!out->keys) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (d = 0; d < ndtypes; d++) {
		for (l = 0; l < nlayouts; l++) {
			for (i = 0; i < nuniq; i++) {
				struct ktune_key *k = &out->keys[out->nkeys++];

				strcpy(k->op, "gemm");
				k->dtype = dtypes[d];
				ktune__layout_parse(layout_names[layouts[l]], k);
				k->m = t[uniq[i]].m;
				k->n = t[uniq[i]].n;
				k->k = t[uniq[i]].k;
				k->aligned = 1;
			}
		}
	}
out:
	free(slots);
	free(uniq);
	return rc;
}

/* The triples of every shape, m slowest, in shape order. */
static int shapes_to_triples(const struct shape *shapes, long nshapes, long total,
			     struct triple **out, struct ktune_err *e)
{
	struct triple *t = malloc((size_t)(total ? total : 1) * sizeof(*t));
	long s, a, b, c, n = 0;

	if (!t)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (s = 0; s < nshapes; s++) {
		const struct shape *sh = &shapes[s];

		if (sh->square) {
			for (a = 0; a < sh->d[0].count; a++) {
				t[n].m = t[n].n = t[n].k = dim_value(&sh->d[0], a);
				n++;
			}
			continue;
		}
		for (a = 0; a < sh->d[0].count; a++) {
			for (b = 0; b < sh->d[1].count; b++) {
				for (c = 0; c < sh->d[2].count; c++) {
					t[n].m = dim_value(&sh->d[0], a);
					t[n].n = dim_value(&sh->d[1], b);
					t[n].k = dim_value(&sh->d[2], c);
					n++;
				}
			}
		}
	}
	*out = t;
	return 0;
}

static int parse_gemm(struct ktune_spec *out, yaml_document_t *doc, const yaml_node_t *n,
		      const char *file, struct ktune_err *e)
{
	static const char *const dtype_names[] = { "f16", "bf16" };
	static const char *const names[] = { "dtypes", "layouts", "shapes" };
	const yaml_node_t *fields[3] = { NULL, NULL, NULL };
	struct shape *shapes = NULL;
	struct triple *triples = NULL;
	ktune_dtype dtypes[2];
	int dtype_idx[2], layouts[4], ndtypes, nlayouts, i, rc = 0;
	long nshapes = 0, total = 0;
	yaml_node_pair_t *pair;
	yaml_node_item_t *it;
	char path[64];

	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n, "gemm: expected a mapping with dtypes, "
				       "layouts and shapes");
	for (pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
		const char *key = ktune__yaml_scalar(k);

		if (!key)
			return ktune__yaml_bad(e, file, k, "gemm: expected a key");
		for (i = 0; i < 3 && strcmp(key, names[i]); i++)
			;
		if (i == 3)
			return ktune__yaml_bad(e, file, k, "gemm: unknown key '%.64s'", key);
		if (fields[i])
			return ktune__yaml_bad(e, file, k, "gemm: duplicate key '%s'", key);
		fields[i] = yaml_document_get_node(doc, pair->value);
	}
	for (i = 0; i < 3; i++) {
		if (!fields[i])
			return ktune__yaml_bad(e, file, n, "gemm: missing '%s'", names[i]);
	}
	ndtypes = parse_choices(dtype_idx, dtype_names, 2, doc, fields[0], "gemm.dtypes", file, e);
	if (ndtypes < 0)
		return ndtypes;
	for (i = 0; i < ndtypes; i++)
		ktune__dtype_parse(dtype_names[dtype_idx[i]], &dtypes[i]);
	nlayouts = parse_choices(layouts, layout_names, 4, doc, fields[1], "gemm.layouts",
				 file, e);
	if (nlayouts < 0)
		return nlayouts;

	n = fields[2];
	if (n->type != YAML_SEQUENCE_NODE)
		return ktune__yaml_bad(e, file, n, "gemm.shapes: expected a list of shapes");
	if (n->data.sequence.items.start == n->data.sequence.items.top)
		return ktune__yaml_bad(e, file, n, "gemm.shapes: empty list");
	shapes = calloc((size_t)(n->data.sequence.items.top - n->data.sequence.items.start),
			sizeof(*shapes));
	if (!shapes)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
		const yaml_node_t *sh = yaml_document_get_node(doc, *it);

		snprintf(path, sizeof(path), "gemm.shapes[%ld]", nshapes);
		nshapes++;
		if ((rc = parse_shape(&shapes[nshapes - 1], doc, sh, path, file, e)))
			goto out;
		total += shape_count(&shapes[nshapes - 1]);
		if (mul_capped(total, ndtypes * nlayouts) > KTUNE_SPEC_MAX_KEYS) {
			rc = ktune__yaml_bad(e, file, sh,
					     "%s: the spec expands to more than %d keys", path,
					     KTUNE_SPEC_MAX_KEYS);
			goto out;
		}
	}
	if ((rc = shapes_to_triples(shapes, nshapes, total, &triples, e)))
		goto out;
	rc = expand(out, dtypes, ndtypes, layouts, nlayouts, triples, total, e);
out:
	free_shapes(shapes, nshapes);
	free(triples);
	return rc;
}

/* Appends n keys to out's. */
static int append_keys(struct ktune_spec *out, const struct ktune_key *keys, long n, struct ktune_err *e)
{
	if (out->nkeys + n > KTUNE_SPEC_MAX_KEYS)
		return ktune__fail(e, KTUNE_ERR_PARSE, "the spec expands to more than %d keys",
				   KTUNE_SPEC_MAX_KEYS);
	struct ktune_key *grown = realloc(out->keys, (size_t)(out->nkeys + n + 1) * sizeof(*grown));
	if (!grown)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	memcpy(grown + out->nkeys, keys, (size_t)n * sizeof(*keys));
	out->keys = grown;
	out->nkeys += (int)n;
	return 0;
}

static unsigned long hash_key(const struct ktune_key *k)
{
	unsigned long h = 1469598103934665603UL;
	h = (h ^ (unsigned long)k->m) * 1099511628211UL;
	h = (h ^ (unsigned long)k->n) * 1099511628211UL;
	h = (h ^ (unsigned long)k->k) * 1099511628211UL;
	h = (h ^ (unsigned long)k->dtype) * 1099511628211UL;
	for (const char *c = k->variant; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211UL;
	return h ^ (h >> 29);
}

/* Drops repeated keys (the first stays), in place; returns how many are left. */
static long unique_keys(struct ktune_key *keys, long n, struct ktune_err *e)
{
	long nslots = 1, kept = 0;
	while (nslots < 2 * n)
		nslots *= 2;
	long *slots = malloc((size_t)nslots * sizeof(*slots));
	if (!slots)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (long i = 0; i < nslots; i++)
		slots[i] = -1;
	for (long i = 0; i < n; i++) {
		long j = (long)(hash_key(&keys[i]) & (unsigned long)(nslots - 1));
		for (; slots[j] >= 0 && !ktune__key_same(&keys[slots[j]], &keys[i]); j = (j + 1) & (nslots - 1))
			;
		if (slots[j] < 0) {
			keys[kept] = keys[i];
			slots[j] = kept++;
		}
	}
	free(slots);
	return kept;
}

/* One shape of an op's section: a value list or range per size field, by field index. */
struct op_shape {
	struct dim d[KTUNE_KEY_DIMS];
	int field[KTUNE_KEY_DIMS];
	int ndims;
};

static int parse_op_shape(struct op_shape *sh, const struct ktune_op *op, yaml_document_t *doc,
			  const yaml_node_t *n, const char *path, const char *file, struct ktune_err *e)
{
	char sub[160];
	int rc;

	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n, "%s: expected a mapping of the sizes", path);
	for (int f = 0; f < op->nfields; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		const yaml_node_t *v = NULL;
		if (fd->dim < 0)
			continue;
		for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
			const char *key = ktune__yaml_scalar(yaml_document_get_node(doc, pair->key));
			if (key && !strcmp(key, fd->name)) {
				if (v)
					return ktune__yaml_bad(e, file, n, "%s: duplicate key '%s'", path, key);
				v = yaml_document_get_node(doc, pair->value);
			}
		}
		if (!v)
			return ktune__yaml_bad(e, file, n, "%s: missing '%s'", path, fd->name);
		snprintf(sub, sizeof(sub), "%s.%s", path, fd->name);
		sh->field[sh->ndims] = f;
		if ((rc = parse_dim(&sh->d[sh->ndims++], doc, v, KTUNE_SPEC_MAX_OP_DIM, sub, file, e)))
			return rc;
	}
	for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
		const char *key = ktune__yaml_scalar(k);
		int known = 0;
		for (int f = 0; key && f < op->nfields; f++)
			known |= op->fields[f].dim >= 0 && !strcmp(op->fields[f].name, key);
		if (!known)
			return ktune__yaml_bad(e, file, k, "%s: unknown key '%.64s'", path, key ? key : "?");
	}
	return 0;
}

/*
 * An op's section (any op of the registry but GEMM):
 *   dtypes: [bf16]              the op's element types (required)
 *   FIELD: [choice, ...]        each variant field (omitted: its first choice)
 *   shapes: [{FIELD: ..., ...}] every size field of the op, as m, n, k are
 * Keys: dtypes slowest, then the variant fields in order, then the shapes;
 * bucketed as the op tunes them, repeats dropped.
 */
static int parse_op(struct ktune_spec *out, const struct ktune_op *op, yaml_document_t *doc,
		    const yaml_node_t *n, const char *file, struct ktune_err *e)
{
	const char *dtype_names[8];
	int dtype_idx[8], ndtypes, choice[8][8], nchoice[8] = { 0 }, rc = 0;
	const yaml_node_t *dtypes = NULL, *shapes = NULL, *variant[8] = { NULL };
	struct op_shape *sh = NULL;
	struct ktune_key *keys = NULL;
	long nshapes = 0, total = 0, nkeys = 0;
	char path[96];

	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n, "%s: expected a mapping with dtypes and shapes", op->name);
	for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(doc, pair->key), **slot = NULL;
		const char *key = ktune__yaml_scalar(k);
		if (!key)
			return ktune__yaml_bad(e, file, k, "%s: expected a key", op->name);
		if (!strcmp(key, "dtypes"))
			slot = &dtypes;
		else if (!strcmp(key, "shapes"))
			slot = &shapes;
		for (int f = 0; !slot && f < op->nfields && f < 8; f++)
			if (op->fields[f].dim < 0 && !strcmp(op->fields[f].name, key))
				slot = &variant[f];
		if (!slot)
			return ktune__yaml_bad(e, file, k, "%s: unknown key '%.64s'", op->name, key);
		if (*slot)
			return ktune__yaml_bad(e, file, k, "%s: duplicate key '%s'", op->name, key);
		*slot = yaml_document_get_node(doc, pair->value);
	}
	if (!dtypes || !shapes)
		return ktune__yaml_bad(e, file, n, "%s: missing '%s'", op->name, dtypes ? "shapes" : "dtypes");
	for (int i = 0; i < op->ndtypes && i < 8; i++)
		dtype_names[i] = ktune__dtype_name(op->dtypes[i]);
	snprintf(path, sizeof(path), "%s.dtypes", op->name);
	if ((ndtypes = parse_choices(dtype_idx, dtype_names, op->ndtypes, doc, dtypes, path, file, e)) < 0)
		return ndtypes;
	long combos = ndtypes;
	for (int f = 0; f < op->nfields && f < 8; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		int count = 0;
		if (fd->dim >= 0)
			continue;
		while (fd->choices[count])
			count++;
		if (!variant[f]) {
			choice[f][0] = 0;
			nchoice[f] = 1;
		} else {
			snprintf(path, sizeof(path), "%s.%s", op->name, fd->name);
			if ((nchoice[f] = parse_choices(choice[f], fd->choices, count, doc, variant[f], path, file, e)) < 0)
				return nchoice[f];
		}
		combos *= nchoice[f];
	}
	if (shapes->type != YAML_SEQUENCE_NODE || shapes->data.sequence.items.start == shapes->data.sequence.items.top)
		return ktune__yaml_bad(e, file, shapes, "%s.shapes: expected a list of shapes", op->name);
	sh = calloc((size_t)(shapes->data.sequence.items.top - shapes->data.sequence.items.start), sizeof(*sh));
	if (!sh)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	for (yaml_node_item_t *it = shapes->data.sequence.items.start; it < shapes->data.sequence.items.top; it++) {
		snprintf(path, sizeof(path), "%s.shapes[%ld]", op->name, nshapes);
		if ((rc = parse_op_shape(&sh[nshapes++], op, doc, yaml_document_get_node(doc, *it), path, file, e)))
			goto out;
		long count = 1;
		for (int d = 0; d < sh[nshapes - 1].ndims; d++)
			count = mul_capped(count, sh[nshapes - 1].d[d].count);
		total += count;
		if (mul_capped(total, combos) > KTUNE_SPEC_MAX_KEYS) {
			rc = ktune__yaml_bad(e, file, shapes, "%s.shapes: the spec expands to more than %d keys",
					     op->name, KTUNE_SPEC_MAX_KEYS);
			goto out;
		}
	}
	if (!(keys = calloc((size_t)(total * combos + 1), sizeof(*keys)))) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	/* dtype slowest, then each variant field, then each shape's sizes: a mixed-radix count */
	for (long c = 0; c < combos; c++) {
		long rest = c;
		int pick[8] = { 0 };
		for (int f = op->nfields - 1; f >= 0; f--)
			if (f < 8 && op->fields[f].dim < 0) {
				pick[f] = choice[f][rest % nchoice[f]];
				rest /= nchoice[f];
			}
		ktune_dtype dtype = op->dtypes[dtype_idx[rest]];
		const char *values[8] = { NULL };
		for (int f = 0; f < op->nfields && f < 8; f++)
			if (op->fields[f].dim < 0)
				values[f] = op->fields[f].choices[pick[f]];
		for (long s = 0; s < nshapes; s++) {
			long count = 1;
			for (int d = 0; d < sh[s].ndims; d++)
				count *= sh[s].d[d].count;
			for (long i = 0; i < count; i++) {
				struct ktune_key *k = &keys[nkeys++];
				long r = i;
				snprintf(k->op, sizeof(k->op), "%s", op->name);
				k->dtype = dtype;
				k->aligned = 1;
				if ((rc = ktune__op_variant_set(op, k, values, e)))
					goto out;
				for (int d = sh[s].ndims - 1; d >= 0; d--) {
					*ktune__key_dim(k, op->fields[sh[s].field[d]].dim) =
						dim_value(&sh[s].d[d], r % sh[s].d[d].count);
					r /= sh[s].d[d].count;
				}
				if (op->key_bucket)
					op->key_bucket(k);
				/* the class the tuner's packed problem of this shape has (cols 50257: unaligned) */
				k->aligned = ktune__op_packed_aligned(k);
			}
		}
	}
	if ((nkeys = unique_keys(keys, nkeys, e)) < 0) {
		rc = (int)nkeys;
		goto out;
	}
	rc = append_keys(out, keys, nkeys, e);
out:
	for (long i = 0; sh && i < nshapes; i++)
		for (int d = 0; d < KTUNE_KEY_DIMS; d++)
			free(sh[i].d[d].values);
	free(sh);
	free(keys);
	return rc;
}

/*
 * An op's section, or a list of them (the union of their keys, repeats
 * dropped): each a cross product, so a list serves keys that one product
 * would overreach, as 4-bit weights on more shapes than 8-bit ones.
 */
static int parse_op_sections(struct ktune_spec *out, const struct ktune_op *op, yaml_document_t *doc,
			     const yaml_node_t *n, const char *file, struct ktune_err *e)
{
	int start = out->nkeys, rc;
	long kept;

	if (n->type != YAML_SEQUENCE_NODE)
		return parse_op(out, op, doc, n, file, e);
	if (n->data.sequence.items.start == n->data.sequence.items.top)
		return ktune__yaml_bad(e, file, n, "%s: an empty list of sections", op->name);
	for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++)
		if ((rc = parse_op(out, op, doc, yaml_document_get_node(doc, *it), file, e)))
			return rc;
	if ((kept = unique_keys(out->keys + start, out->nkeys - start, e)) < 0)
		return (int)kept;
	out->nkeys = start + (int)kept;
	return 0;
}

static int parse_budget(struct ktune_spec *out, const yaml_node_t *n, const char *file,
			struct ktune_err *e)
{
	const char *s = ktune__yaml_scalar(n);
	long v;
	int rc;

	if (!s)
		return ktune__yaml_bad(e, file, n, "budget: expected a number");
	if ((rc = ktune__yaml_long(s, &v)) == -1)
		return ktune__yaml_bad(e, file, n, "budget: '%.64s' is not an integer", s);
	if (rc == -2 || v > 1000000000L)
		return ktune__yaml_bad(e, file, n, "budget: '%.64s' is too large", s);
	if (v < 0)
		return ktune__yaml_bad(e, file, n, "budget: '%.64s' is negative", s);
	out->budget = (int)v;
	return 0;
}

int ktune__spec_parse(const char *text, size_t len, const char *filename,
		      struct ktune_spec *out, struct ktune_err *e)
{
	const yaml_node_t *budget = NULL, *sections[16] = { NULL };
	yaml_document_t doc;
	yaml_node_t *root;
	yaml_node_pair_t *pair;
	int rc, nsections = 0;

	memset(out, 0, sizeof(*out));
	if ((rc = ktune__yaml_load(&doc, text, len, filename, e)))
		return rc;
	root = yaml_document_get_root_node(&doc);
	if (!root) {
		rc = ktune__fail(e, KTUNE_ERR_PARSE, "%s: empty document", filename);
		goto out;
	}
	if (root->type != YAML_MAPPING_NODE) {
		rc = ktune__yaml_bad(e, filename, root, "expected a mapping of ops (%s) and optionally "
				     "'budget'", ktune__op_names());
		goto out;
	}
	for (pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(&doc, pair->key);
		const char *key = ktune__yaml_scalar(k);
		const yaml_node_t **slot = NULL;

		if (!key) {
			rc = ktune__yaml_bad(e, filename, k, "expected a key");
			goto out;
		}
		if (!strcmp(key, "budget"))
			slot = &budget;
		for (int i = 0; !slot && ktune__ops[i] && i < 16; i++)
			if (!strcmp(key, ktune__ops[i]->name))
				slot = &sections[i];
		if (!slot) {
			rc = ktune__yaml_bad(e, filename, k, "unknown key '%.64s' (ops: %s)", key,
					     ktune__op_names());
			goto out;
		}
		if (*slot) {
			rc = ktune__yaml_bad(e, filename, k, "duplicate key '%s'", key);
			goto out;
		}
		*slot = yaml_document_get_node(&doc, pair->value);
		nsections += slot != &budget;
	}
	if (!nsections) {
		rc = ktune__yaml_bad(e, filename, root, "no op to tune: give one of %s", ktune__op_names());
		goto out;
	}
	if (budget && (rc = parse_budget(out, budget, filename, e)))
		goto out;
	/* in table order: gemm first */
	for (int i = 0; ktune__ops[i] && i < 16; i++) {
		if (!sections[i])
			continue;
		if (ktune__op_is_gemm(ktune__ops[i])) {
			struct ktune_spec g;
			memset(&g, 0, sizeof(g));
			rc = parse_gemm(&g, &doc, sections[i], filename, e);
			if (!rc)
				rc = append_keys(out, g.keys, g.nkeys, e);
			free(g.keys);
		} else {
			rc = parse_op_sections(out, ktune__ops[i], &doc, sections[i], filename, e);
		}
		if (rc)
			goto out;
	}
out:
	yaml_document_delete(&doc);
	if (rc)
		ktune__spec_free(out);
	return rc;
}

int ktune__spec_default(struct ktune_spec *out, struct ktune_err *e)
{
	static const long squares[] = { 512, 1024, 2048, 4096, 8192 };
	static const long ms[] = { 1, 16, 128, 1024, 4096 };
	static const long nks[][2] = { { 6144, 4096 }, { 4096, 4096 }, { 28672, 4096 },
				       { 4096, 14336 } };
	static const ktune_dtype dtypes[] = { KTUNE_F16, KTUNE_BF16 };
	static const int layouts[] = { 0, 1 }; /* nn, nt */
	struct triple t[5 + 5 * 4];
	int i, j, n = 0, rc;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < 5; i++) {
		t[n].m = t[n].n = t[n].k = squares[i];
		n++;
	}
	for (i = 0; i < 5; i++) {
		for (j = 0; j < 4; j++) {
			t[n].m = ms[i];
			t[n].n = nks[j][0];
			t[n].k = nks[j][1];
			n++;
		}
	}
	rc = expand(out, dtypes, 2, layouts, 2, t, n, e);
	/* then every other op's own section, in table order */
	for (int o = 0; !rc && ktune__ops[o]; o++) {
		const struct ktune_op *op = ktune__ops[o];
		yaml_document_t doc;
		char name[32];
		if (ktune__op_is_gemm(op) || !op->suite)
			continue;
		snprintf(name, sizeof(name), "%s suite", op->name);
		if ((rc = ktune__yaml_load(&doc, op->suite, strlen(op->suite), name, e)))
			break;
		rc = parse_op_sections(out, op, &doc, yaml_document_get_root_node(&doc), name, e);
		yaml_document_delete(&doc);
	}
	if (rc)
		ktune__spec_free(out);
	return rc;
}

void ktune__spec_free(struct ktune_spec *s)
{
	if (!s)
		return;
	free(s->keys);
	memset(s, 0, sizeof(*s));
}
