/*
 * space.c - a template family's search space: read from YAML (libyaml's
 * document API), checked, and enumerated.
 *
 * The document is loaded by ktune__yaml_load (src/yaml-read.c: no aliases,
 * one document, bounded nesting) and walked.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "space.h"
#include "expr.h"
#include "yaml-read.h"

static int is_name(const char *s)
{
	if (!isalpha((unsigned char)*s) && *s != '_')
		return 0;
	for (s++; *s; s++) {
		if (!isalnum((unsigned char)*s) && *s != '_')
			return 0;
	}
	return 1;
}

static int parse_family(struct ktune_space *s, const yaml_node_t *n, const char *file,
			struct ktune_err *e)
{
	const char *v = ktune__yaml_scalar(n);

	if (!v)
		return ktune__yaml_bad(e, file, n, "family: expected a name");
	if (!is_name(v))
		return ktune__yaml_bad(e, file, n, "family: '%.64s' is not a valid name", v);
	if (strlen(v) >= sizeof(s->family))
		return ktune__yaml_bad(e, file, n, "family: '%.64s' is longer than %d characters",
				       v, (int)sizeof(s->family) - 1);
	strcpy(s->family, v);
	return 0;
}

static int parse_values(struct ktune_space_param *p, yaml_document_t *doc,
			const yaml_node_t *n, const char *file, struct ktune_err *e)
{
	yaml_node_item_t *it;
	int i, j, rc;

	if (n->type != YAML_SEQUENCE_NODE)
		return ktune__yaml_bad(e, file, n, "params.%s: expected a list of integers",
				       p->name);
	it = n->data.sequence.items.start;
	if (it == n->data.sequence.items.top)
		return ktune__yaml_bad(e, file, n, "params.%s: empty list", p->name);
	for (i = 0; it < n->data.sequence.items.top; it++, i++) {
		const yaml_node_t *v = yaml_document_get_node(doc, *it);
		const char *text = ktune__yaml_scalar(v);
		long x;

		if (i == KTUNE_SPACE_MAX_VALUES)
			return ktune__yaml_bad(e, file, v, "params.%s: more than %d values",
					       p->name, KTUNE_SPACE_MAX_VALUES);
		if (!text)
			return ktune__yaml_bad(e, file, v, "params.%s[%d]: expected an integer",
					       p->name, i);
		if ((rc = ktune__yaml_long(text, &x)))
			return ktune__yaml_bad(e, file, v, "params.%s[%d]: '%.64s' is %s",
					       p->name, i, text,
					       rc == -1 ? "not an integer" : "out of range");
		for (j = 0; j < i; j++) {
			if (p->values[j] == x)
				return ktune__yaml_bad(e, file, v,
						       "params.%s[%d]: duplicate value %ld",
						       p->name, i, x);
		}
		p->values[i] = x;
		p->nvalues = i + 1;
	}
	return 0;
}

static int parse_params(struct ktune_space *s, yaml_document_t *doc, const yaml_node_t *n,
			const char *file, struct ktune_err *e)
{
	yaml_node_pair_t *pair;
	int rc;

	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n,
				       "params: expected a mapping of names to lists of values");
	pair = n->data.mapping.pairs.start;
	if (pair == n->data.mapping.pairs.top)
		return ktune__yaml_bad(e, file, n, "params: no parameters");
	for (; pair < n->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(doc, pair->key);
		const char *name = ktune__yaml_scalar(k);
		struct ktune_space_param *p;

		if (!name)
			return ktune__yaml_bad(e, file, k, "params: expected a parameter name");
		if (!is_name(name))
			return ktune__yaml_bad(e, file, k, "params: '%.64s' is not a valid name",
					       name);
		if (strlen(name) >= sizeof(p->name))
			return ktune__yaml_bad(e, file, k,
					       "params: '%.64s' is longer than %d characters",
					       name, (int)sizeof(p->name) - 1);
		if (ktune__space_param_index(s, name) >= 0)
			return ktune__yaml_bad(e, file, k, "params: duplicate parameter '%s'",
					       name);
		if (s->nparams == KTUNE_SPACE_MAX_PARAMS)
			return ktune__yaml_bad(e, file, k, "params: more than %d parameters",
					       KTUNE_SPACE_MAX_PARAMS);
		p = &s->params[s->nparams++];
		strcpy(p->name, name);
		rc = parse_values(p, doc, yaml_document_get_node(doc, pair->value), file, e);
		if (rc)
			return rc;
	}
	return 0;
}

static int parse_constraints(struct ktune_space *s, yaml_document_t *doc,
			     const yaml_node_t *n, const char *file, struct ktune_err *e)
{
	const char *names[KTUNE_SPACE_MAX_PARAMS];
	yaml_node_item_t *it;
	int i, rc;

	if (n->type != YAML_SEQUENCE_NODE)
		return ktune__yaml_bad(e, file, n, "constraints: expected a list of expressions");
	for (i = 0; i < s->nparams; i++)
		names[i] = s->params[i].name;
	it = n->data.sequence.items.start;
	for (i = 0; it < n->data.sequence.items.top; it++, i++) {
		const yaml_node_t *c = yaml_document_get_node(doc, *it);
		const char *text = ktune__yaml_scalar(c);
		struct ktune_err why;
		size_t len;

		if (i == KTUNE_SPACE_MAX_CONSTRAINTS)
			return ktune__yaml_bad(e, file, c, "constraints: more than %d constraints",
					       KTUNE_SPACE_MAX_CONSTRAINTS);
		if (!text)
			return ktune__yaml_bad(e, file, c,
					       "constraints[%d]: expected an expression", i);
		rc = ktune__expr_parse(text, names, s->nparams, &s->constraints[i], &why);
		if (rc == KTUNE_ERR_PARSE)
			return ktune__yaml_bad(e, file, c, "constraints[%d]: %s", i, why.msg);
		if (rc)
			return ktune__fail(e, rc, "%s", why.msg);
		s->nconstraints = i + 1;
		len = strlen(text) + 1;
		s->constraint_text[i] = malloc(len);
		if (!s->constraint_text[i])
			return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		memcpy(s->constraint_text[i], text, len);
	}
	return 0;
}

int ktune__space_parse(struct ktune_space *s, const char *text, size_t len,
		       const char *filename, struct ktune_err *e)
{
	const yaml_node_t *family = NULL, *params = NULL, *constraints = NULL;
	yaml_document_t doc;
	yaml_node_t *root;
	yaml_node_pair_t *pair;
	int rc;

	memset(s, 0, sizeof(*s));
	if ((rc = ktune__yaml_load(&doc, text, len, filename, e)))
		return rc;
	root = yaml_document_get_root_node(&doc);
	if (!root) {
		rc = ktune__fail(e, KTUNE_ERR_PARSE, "%s: empty document", filename);
		goto out;
	}
	if (root->type != YAML_MAPPING_NODE) {
		rc = ktune__yaml_bad(e, filename, root,
				     "expected a mapping with family, params and constraints");
		goto out;
	}
	for (pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
		const yaml_node_t *k = yaml_document_get_node(&doc, pair->key);
		const yaml_node_t *v = yaml_document_get_node(&doc, pair->value);
		const char *key = ktune__yaml_scalar(k);
		const yaml_node_t **slot;

		if (!key) {
			rc = ktune__yaml_bad(e, filename, k, "expected a key");
			goto out;
		}
		if (!strcmp(key, "family")) {
			slot = &family;
		} else if (!strcmp(key, "params")) {
			slot = &params;
		} else if (!strcmp(key, "constraints")) {
			slot = &constraints;
		} else {
			rc = ktune__yaml_bad(e, filename, k, "unknown key '%.64s'", key);
			goto out;
		}
		if (*slot) {
			rc = ktune__yaml_bad(e, filename, k, "duplicate key '%s'", key);
			goto out;
		}
		*slot = v;
	}
	if (!family || !params) {
		rc = ktune__yaml_bad(e, filename, root, "missing '%s'",
				     family ? "params" : "family");
		goto out;
	}
	if ((rc = parse_family(s, family, filename, e)) ||
	    (rc = parse_params(s, &doc, params, filename, e)))
		goto out;
	if (constraints && (rc = parse_constraints(s, &doc, constraints, filename, e)))
		goto out;
out:
	yaml_document_delete(&doc);
	if (rc)
		ktune__space_free(s);
	return rc;
}

void ktune__space_free(struct ktune_space *s)
{
	int i;

	if (!s)
		return;
	for (i = 0; i < KTUNE_SPACE_MAX_CONSTRAINTS; i++) {
		free(s->constraint_text[i]);
		ktune__expr_free(s->constraints[i]);
	}
	memset(s, 0, sizeof(*s));
}

long ktune__space_nearest(const struct ktune_space *s, int i, long want)
{
	long best = s->params[i].values[0];
	for (int j = 0; j < s->params[i].nvalues; j++)
		if (labs(s->params[i].values[j] - want) < labs(best - want))
			best = s->params[i].values[j];
	return best;
}

int ktune__space_param_index(const struct ktune_space *s, const char *name)
{
	int i;

	for (i = 0; name && i < s->nparams; i++) {
		if (!strcmp(s->params[i].name, name))
			return i;
	}
	return -1;
}

int ktune__space_admits(const struct ktune_space *s, const long *values, struct ktune_err *e)
{
	int i, j;

	for (i = 0; i < s->nparams; i++) {
		const struct ktune_space_param *p = &s->params[i];
		char list[KTUNE_SPACE_MAX_VALUES * 24];
		size_t n = 0;

		for (j = 0; j < p->nvalues && p->values[j] != values[i]; j++)
			;
		if (j < p->nvalues)
			continue;
		list[0] = '\0';
		for (j = 0; j < p->nvalues; j++)
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%ld",
					      j ? ", " : "", p->values[j]);
		ktune__fail(e, KTUNE_ERR_INVALID, "%s=%ld is not one of %s", p->name,
			    values[i], list);
		return 0;
	}
	for (i = 0; i < s->nconstraints; i++) {
		if (!ktune__expr_true(s->constraints[i], values)) {
			ktune__fail(e, KTUNE_ERR_INVALID, "violates '%s'", s->constraint_text[i]);
			return 0;
		}
	}
	return 1;
}

/*
 * A depth-first walk over the value indices, first parameter outermost.
 * A constraint is checked as soon as the last parameter it names has its
 * value, so a pruned prefix skips every configuration under it.
 */
int ktune__space_enumerate(const struct ktune_space *s,
			   int (*fn)(const long *values, void *arg), void *arg)
{
	long values[KTUNE_SPACE_MAX_PARAMS] = { 0 };
	int idx[KTUNE_SPACE_MAX_PARAMS];
	int last[KTUNE_SPACE_MAX_CONSTRAINTS]; /* the parameter after which each is checked */
	int i, d, rc;

	for (i = 0; i < s->nconstraints; i++) {
		last[i] = ktune__expr_max_name(s->constraints[i]);
		if (last[i] < 0 && !ktune__expr_true(s->constraints[i], values))
			return 0; /* a constant constraint that never holds */
	}
	if (s->nparams == 0)
		return fn(values, arg);
	d = 0;
	idx[0] = 0;
	while (d >= 0) {
		const struct ktune_space_param *p = &s->params[d];

		if (idx[d] == p->nvalues) {
			if (--d >= 0)
				idx[d]++;
			continue;
		}
		values[d] = p->values[idx[d]];
		for (i = 0; i < s->nconstraints; i++) {
			if (last[i] == d && !ktune__expr_true(s->constraints[i], values))
				break;
		}
		if (i < s->nconstraints) {
			idx[d]++;
		} else if (d == s->nparams - 1) {
			if ((rc = fn(values, arg)))
				return rc;
			idx[d]++;
		} else {
			idx[++d] = 0;
		}
	}
	return 0;
}

static int count_one(const long *values, void *arg)
{
	(void)values;
	(*(long *)arg)++;
	return 0;
}

long ktune__space_count(const struct ktune_space *s)
{
	long n = 0;

	ktune__space_enumerate(s, count_one, &n);
	return n;
}
