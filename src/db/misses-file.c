/*
 * misses-file.c - the misses file (misses.h): written by the runtime when
 * a context closes, read by `ktune sweep --misses`.  It is read as
 * untrusted input (it may come from another machine): every key is
 * checked as any key is, and a bad one refuses the file with its line.
 *
 * Saving adds to the file that is there, under an flock on its directory,
 * so that several processes closing at once each keep their keys.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream, O_DIRECTORY under -std=c11 */
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <yaml.h>

#include "db/misses.h"
#include "ops/op.h"
#include "yaml-read.h"

void ktune__misses_file_free(struct ktune_misses_file *f)
{
	if (!f)
		return;
	free(f->m);
	f->m = NULL;
	f->n = 0;
}

/* A YAML double-quoted string. */
static void put_quoted(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

int ktune__misses_format(const struct ktune_device_id *dev, const struct ktune_miss *m, int n, char **out,
			 size_t *len, struct ktune_err *e)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);

	*out = NULL;
	if (!f)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	fprintf(f, "# ktune misses: the keys this GPU served without a tuned entry, with their calls.\n"
		   "# Tune exactly these keys with: ktune sweep --misses FILE\n"
		   "format: %s\nversion: %d\ndevice: {name: ", KTUNE_MISSES_FORMAT, KTUNE_MISSES_VERSION);
	put_quoted(f, dev->name);
	fprintf(f, ", arch: ");
	put_quoted(f, dev->arch);
	fprintf(f, ", sm_count: %d}\nkeys:%s\n", dev->sm_count, n ? "" : " []");
	for (int i = 0; i < n; i++) {
		const struct ktune_op *op = ktune__op_of(&m[i].key);
		fprintf(f, "  - {op: %s, dtype: %s, variant: ", m[i].key.op,
			ktune__dtype_name(m[i].key.dtype) ? ktune__dtype_name(m[i].key.dtype) : "?");
		put_quoted(f, m[i].key.variant);
		for (int fi = 0; op && fi < op->nfields; fi++)
			if (op->fields[fi].dim >= 0)
				fprintf(f, ", %s: %lld", op->fields[fi].name,
					(long long)*ktune__key_dim((struct ktune_key *)&m[i].key, op->fields[fi].dim));
		fprintf(f, ", aligned: %s, source: ", m[i].key.aligned ? "true" : "false");
		put_quoted(f, m[i].source);
		fprintf(f, ", calls: %lld}\n", (long long)m[i].calls);
	}
	if (fclose(f) != 0 || !buf) {
		free(buf);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	}
	*out = buf;
	if (len)
		*len = size;
	return KTUNE_OK;
}

/* The value of `name` in mapping n, or NULL; a key twice is an error (*dup set). */
static const yaml_node_t *lookup(yaml_document_t *doc, const yaml_node_t *n, const char *name,
				 const yaml_node_t **dup)
{
	const yaml_node_t *v = NULL;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		const char *k = ktune__yaml_scalar(yaml_document_get_node(doc, p->key));
		if (k && !strcmp(k, name)) {
			if (v)
				*dup = yaml_document_get_node(doc, p->key);
			v = yaml_document_get_node(doc, p->value);
		}
	}
	return v;
}

/* Every key of mapping n must be one of names[]. */
static int only_keys(yaml_document_t *doc, const yaml_node_t *n, const char *const *names, int nnames,
		     const char *path, const char *file, struct ktune_err *e)
{
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		const yaml_node_t *kn = yaml_document_get_node(doc, p->key);
		const char *k = ktune__yaml_scalar(kn);
		int i;
		for (i = 0; k && i < nnames && strcmp(k, names[i]); i++)
			;
		if (!k || i == nnames)
			return ktune__yaml_bad(e, file, kn, "%s: unknown key '%.64s'", path, k ? k : "?");
	}
	return KTUNE_OK;
}

static int get_long(const yaml_node_t *v, long min, long max, long *out, const char *path, const char *file,
		    struct ktune_err *e)
{
	const char *s = ktune__yaml_scalar(v);
	if (!s || ktune__yaml_long(s, out) || *out < min || *out > max)
		return ktune__yaml_bad(e, file, v, "%s: '%.64s' is not an integer in %ld..%ld", path, s ? s : "?",
				       min, max);
	return KTUNE_OK;
}

static int get_text(const yaml_node_t *v, char *buf, size_t cap, const char *path, const char *file,
		    struct ktune_err *e)
{
	const char *s = ktune__yaml_scalar(v);
	if (!s)
		return ktune__yaml_bad(e, file, v, "%s: expected text", path);
	if (strlen(s) >= cap)
		return ktune__yaml_bad(e, file, v, "%s: '%.64s' is longer than %zu bytes", path, s, cap - 1);
	for (const char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			return ktune__yaml_bad(e, file, v, "%s: has a character that is not printable ASCII", path);
	memcpy(buf, s, strlen(s) + 1);
	return KTUNE_OK;
}

static int parse_device(yaml_document_t *doc, const yaml_node_t *n, struct ktune_device_id *d, const char *file,
			struct ktune_err *e)
{
	static const char *const names[] = { "name", "arch", "sm_count" };
	const yaml_node_t *dup = NULL, *v;
	long sms;
	int rc;

	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n, "device: expected {name: ..., arch: ..., sm_count: ...}");
	if ((rc = only_keys(doc, n, names, 3, "device", file, e)))
		return rc;
	for (int i = 0; i < 3; i++)
		if (!lookup(doc, n, names[i], &dup))
			return ktune__yaml_bad(e, file, n, "device: missing '%s'", names[i]);
	if (dup)
		return ktune__yaml_bad(e, file, dup, "device: duplicate key");
	if ((rc = get_text(lookup(doc, n, "name", &dup), d->name, sizeof(d->name), "device.name", file, e)) ||
	    (rc = get_text(lookup(doc, n, "arch", &dup), d->arch, sizeof(d->arch), "device.arch", file, e)))
		return rc;
	v = lookup(doc, n, "sm_count", &dup);
	if ((rc = get_long(v, 1, 1 << 20, &sms, "device.sm_count", file, e)))
		return rc;
	d->sm_count = (int)sms;
	if (strncmp(d->arch, "sm_", 3))
		return ktune__yaml_bad(e, file, n, "device.arch: '%s' is not an arch like sm_90", d->arch);
	return KTUNE_OK;
}

/* One entry of keys: a key in its op's field names, with calls and source. */
static int parse_key(yaml_document_t *doc, const yaml_node_t *n, int index, struct ktune_miss *m, const char *file,
		     struct ktune_err *e)
{
	const char *names[16] = { "op", "dtype", "variant", "aligned", "source", "calls" };
	const yaml_node_t *dup = NULL, *v;
	char path[48], sub[96], text[32];
	const struct ktune_op *op;
	int nnames = 6, rc;
	long x;

	snprintf(path, sizeof(path), "keys[%d]", index);
	memset(m, 0, sizeof(*m));
	if (n->type != YAML_MAPPING_NODE)
		return ktune__yaml_bad(e, file, n, "%s: expected a mapping such as {op: gemm, dtype: bf16, ...}", path);
	if (!(v = lookup(doc, n, "op", &dup)))
		return ktune__yaml_bad(e, file, n, "%s: missing 'op'", path);
	snprintf(sub, sizeof(sub), "%s.op", path);
	if ((rc = get_text(v, m->key.op, sizeof(m->key.op), sub, file, e)))
		return rc;
	if (!(op = ktune__op_of(&m->key)))
		return ktune__yaml_bad(e, file, v, "%s: '%s' is not one of %s", sub, m->key.op, ktune__op_names());
	for (int f = 0; f < op->nfields && nnames < 16; f++)
		if (op->fields[f].dim >= 0)
			names[nnames++] = op->fields[f].name;
	if ((rc = only_keys(doc, n, names, nnames, path, file, e)))
		return rc;
	for (int i = 0; i < nnames; i++)
		lookup(doc, n, names[i], &dup);
	if (dup)
		return ktune__yaml_bad(e, file, dup, "%s: duplicate key", path);

	if (!(v = lookup(doc, n, "dtype", &dup)))
		return ktune__yaml_bad(e, file, n, "%s: missing 'dtype'", path);
	snprintf(sub, sizeof(sub), "%s.dtype", path);
	if ((rc = get_text(v, text, sizeof(text), sub, file, e)))
		return rc;
	if (ktune__dtype_parse(text, &m->key.dtype))
		return ktune__yaml_bad(e, file, v, "%s: '%s' is not one of f16, bf16, f32", sub, text);
	if ((v = lookup(doc, n, "variant", &dup))) {
		snprintf(sub, sizeof(sub), "%s.variant", path);
		if ((rc = get_text(v, m->key.variant, sizeof(m->key.variant), sub, file, e)))
			return rc;
	}
	for (int f = 0; f < op->nfields; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		if (fd->dim < 0)
			continue;
		if (!(v = lookup(doc, n, fd->name, &dup)))
			return ktune__yaml_bad(e, file, n, "%s: missing '%s'", path, fd->name);
		snprintf(sub, sizeof(sub), "%s.%s", path, fd->name);
		if ((rc = get_long(v, 1, (long)KTUNE_OP_MAX_SIZE, &x, sub, file, e)))
			return rc;
		*ktune__key_dim(&m->key, fd->dim) = x;
	}
	if (!(v = lookup(doc, n, "aligned", &dup)))
		return ktune__yaml_bad(e, file, n, "%s: missing 'aligned'", path);
	const char *s = ktune__yaml_scalar(v);
	if (s && (!strcmp(s, "true") || !strcmp(s, "1")))
		m->key.aligned = 1;
	else if (!s || (strcmp(s, "false") && strcmp(s, "0")))
		return ktune__yaml_bad(e, file, v, "%s.aligned: '%.64s' is not true or false", path, s ? s : "?");
	if ((v = lookup(doc, n, "source", &dup))) {
		snprintf(sub, sizeof(sub), "%s.source", path);
		if ((rc = get_text(v, m->source, sizeof(m->source), sub, file, e)))
			return rc;
	}
	m->calls = 1;
	if ((v = lookup(doc, n, "calls", &dup))) {
		snprintf(sub, sizeof(sub), "%s.calls", path);
		if ((rc = get_long(v, 0, 1L << 62, &x, sub, file, e)))
			return rc;
		m->calls = x;
	}
	struct ktune_err why;
	if (ktune__op_key_check(&m->key, &why))
		return ktune__yaml_bad(e, file, n, "%s: %s", path, why.msg);
	return KTUNE_OK;
}

/* qsort of indices into sort_misses by key, then by index (stable). */
static const struct ktune_miss *sort_misses;

static int by_index(const void *pa, const void *pb)
{
	int a = *(const int *)pa, b = *(const int *)pb;
	int c = ktune__key_compare(&sort_misses[a].key, &sort_misses[b].key);
	return c ? c : a - b;
}

static int by_key(const void *a, const void *b)
{
	return ktune__key_compare(&((const struct ktune_miss *)a)->key, &((const struct ktune_miss *)b)->key);
}

int ktune__misses_parse(const char *text, size_t len, const char *file, struct ktune_misses_file *out,
			struct ktune_err *e)
{
	static const char *const names[] = { "format", "version", "device", "keys" };
	const yaml_node_t *dup = NULL, *v, *keys;
	yaml_document_t doc;
	yaml_node_t *root;
	long version;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = ktune__yaml_load(&doc, text, len, file, e)))
		return rc;
	root = yaml_document_get_root_node(&doc);
	if (!root) {
		rc = ktune__fail(e, KTUNE_ERR_PARSE, "%s: empty document", file);
		goto out;
	}
	if (root->type != YAML_MAPPING_NODE) {
		rc = ktune__yaml_bad(e, file, root, "expected a misses file (format: %s)", KTUNE_MISSES_FORMAT);
		goto out;
	}
	if ((rc = only_keys(&doc, root, names, 4, "misses file", file, e)))
		goto out;
	for (int i = 0; i < 4; i++)
		if (!lookup(&doc, root, names[i], &dup)) {
			rc = ktune__yaml_bad(e, file, root, "missing '%s'", names[i]);
			goto out;
		}
	if (dup) {
		rc = ktune__yaml_bad(e, file, dup, "duplicate key");
		goto out;
	}
	v = lookup(&doc, root, "format", &dup);
	if (!ktune__yaml_scalar(v) || strcmp(ktune__yaml_scalar(v), KTUNE_MISSES_FORMAT)) {
		rc = ktune__yaml_bad(e, file, v, "format: expected '%s' (a file of 'ktune_save_misses' or "
				     "KTUNE_RECORD)", KTUNE_MISSES_FORMAT);
		goto out;
	}
	v = lookup(&doc, root, "version", &dup);
	if ((rc = get_long(v, 1, 1000000, &version, "version", file, e)))
		goto out;
	if (version > KTUNE_MISSES_VERSION) {
		rc = ktune__yaml_bad(e, file, v, "version %ld is newer than this ktune's (%d): upgrade ktune",
				     version, KTUNE_MISSES_VERSION);
		goto out;
	}
	if ((rc = parse_device(&doc, lookup(&doc, root, "device", &dup), &out->device, file, e)))
		goto out;
	keys = lookup(&doc, root, "keys", &dup);
	if (keys->type != YAML_SEQUENCE_NODE) {
		rc = ktune__yaml_bad(e, file, keys, "keys: expected a list");
		goto out;
	}
	long count = keys->data.sequence.items.top - keys->data.sequence.items.start;
	if (count && !(out->m = calloc((size_t)count, sizeof(*out->m)))) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (yaml_node_item_t *it = keys->data.sequence.items.start; it < keys->data.sequence.items.top; it++) {
		if ((rc = parse_key(&doc, yaml_document_get_node(&doc, *it), out->n, &out->m[out->n], file, e)))
			goto out;
		out->n++;
	}
	/* a key twice: sorted by key, repeats are neighbours */
	if (out->n > 1) {
		int *order = malloc((size_t)out->n * sizeof(*order));
		if (!order) {
			rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
			goto out;
		}
		for (int i = 0; i < out->n; i++)
			order[i] = i;
		sort_misses = out->m;
		qsort(order, (size_t)out->n, sizeof(*order), by_index);
		for (int i = 1; i < out->n && !rc; i++)
			if (!ktune__key_compare(&out->m[order[i - 1]].key, &out->m[order[i]].key)) {
				int a = order[i - 1] < order[i] ? order[i - 1] : order[i], b = order[i - 1] ^ order[i] ^ a;
				rc = ktune__yaml_bad(e, file, yaml_document_get_node(&doc, keys->data.sequence.items.start[b]),
						     "keys[%d]: the same key as keys[%d]", b, a);
			}
		free(order);
	}
out:
	yaml_document_delete(&doc);
	if (rc)
		ktune__misses_file_free(out);
	return rc;
}

int ktune__misses_read(const char *path, struct ktune_misses_file *out, struct ktune_err *e)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = ktune__read_file(path, KTUNE_MISSES_MAX_BYTES, &text, &len, e)))
		return rc;
	rc = ktune__misses_parse(text, len, path, out, e);
	free(text);
	return rc;
}

/* The directory of path, open for flock; -1 with e set. */
static int lock_dir(const char *path, struct ktune_err *e)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	int fd;

	if (!dir)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory"), -1;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		ktune__fail(e, KTUNE_ERR_IO, "cannot save misses to '%s': directory '%s': %s", path, dir,
			    strerror(errno));
		free(dir);
		return -1;
	}
	free(dir);
	while (flock(fd, LOCK_EX) != 0)
		if (errno != EINTR) {
			ktune__fail(e, KTUNE_ERR_IO, "cannot lock the directory of '%s': %s", path, strerror(errno));
			close(fd);
			return -1;
		}
	return fd;
}

int ktune__misses_save(const char *path, const struct ktune_device_id *dev, const struct ktune_miss *m,
		       int n, struct ktune_err *e)
{
	struct ktune_misses_file old = { 0 };
	struct ktune_miss *add = NULL, *all = NULL;
	char *text = NULL;
	size_t len = 0;
	int rc, fd, nall = 0;

	if (!path || !*path || !dev || n < 0 || (n > 0 && !m))
		return ktune__fail(e, KTUNE_ERR_INVALID, "invalid arguments to save misses");
	if ((rc = ktune__path_check(path, "misses file", e)))
		return rc;
	if ((fd = lock_dir(path, e)) < 0)
		return KTUNE_ERR_IO;
	if (access(path, F_OK) == 0) {
		if ((rc = ktune__misses_read(path, &old, e)))
			goto out;
		if (strcmp(old.device.name, dev->name) || strcmp(old.device.arch, dev->arch) ||
		    old.device.sm_count != dev->sm_count) {
			rc = ktune__fail(e, KTUNE_ERR_INVALID, "'%s' holds the misses of another GPU (%s, %s, %d SMs), not "
					 "of %s (%s, %d SMs): give another file", path, old.device.name, old.device.arch,
					 old.device.sm_count, dev->name, dev->arch, dev->sm_count);
			goto out;
		}
	}
	add = calloc((size_t)n + 1, sizeof(*add));
	all = calloc((size_t)old.n + (size_t)n + 1, sizeof(*all));
	if (!add || !all) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	/*
	 * The file's keys and the new ones, each sorted by key (neither holds
	 * a key twice), merged: a key in both adds up its calls and takes the
	 * new source.
	 */
	if (n > 0) {
		memcpy(add, m, (size_t)n * sizeof(*add));
		qsort(add, (size_t)n, sizeof(*add), by_key);
	}
	if (old.n > 0)
		qsort(old.m, (size_t)old.n, sizeof(*old.m), by_key);
	for (int i = 0, j = 0; i < old.n || j < n;) {
		int c = i == old.n ? 1 : j == n ? -1 : ktune__key_compare(&old.m[i].key, &add[j].key);
		if (c < 0) {
			all[nall++] = old.m[i++];
		} else if (c > 0) {
			all[nall++] = add[j++];
		} else {
			all[nall] = old.m[i++];
			all[nall].calls += add[j].calls;
			memcpy(all[nall++].source, add[j++].source, sizeof(add->source));
		}
	}
	if ((rc = ktune__misses_format(dev, all, nall, &text, &len, e)) ||
	    (rc = ktune__write_file_atomic(path, text, len, e)))
		goto out;
out:
	flock(fd, LOCK_UN);
	close(fd);
	free(text);
	free(add);
	free(all);
	ktune__misses_file_free(&old);
	return rc;
}
