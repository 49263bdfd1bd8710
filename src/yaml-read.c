/*
 * yaml-read.c - loading a YAML document with libyaml's document API, and
 * the small readers the spaces, specs and export files share.
 *
 * The text is parsed twice: a first pass over libyaml's events refuses what
 * the document API would accept but ktune has no use for (aliases, more
 * than one document, deep nesting), then the document is loaded.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "yaml-read.h"

/* No valid space or spec nests deeper than this. */
#define MAX_DEPTH 16

int ktune__yaml_bad(struct ktune_err *e, const char *file, const yaml_node_t *n,
		    const char *fmt, ...)
{
	char buf[sizeof(e->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return ktune__fail(e, KTUNE_ERR_PARSE, "%s:%lu: %s", file,
			   (unsigned long)n->start_mark.line + 1, buf);
}

static int yaml_failed(const yaml_parser_t *p, const char *text, size_t len,
		       const char *file, struct ktune_err *e)
{
	unsigned long line = (unsigned long)p->problem_mark.line + 1;
	size_t i;

	if (p->error == YAML_MEMORY_ERROR)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "%s: out of memory", file);
	if (p->error == YAML_READER_ERROR) {
		/* the reader reports a byte offset, not a line */
		for (line = 1, i = 0; i < p->problem_offset && i < len; i++)
			line += text[i] == '\n';
	}
	return ktune__fail(e, KTUNE_ERR_PARSE, "%s:%lu: %s", file, line,
			   p->problem ? p->problem : "malformed YAML");
}

/* Refuses aliases, nesting deeper than MAX_DEPTH and a second document. */
static int check_events(const char *text, size_t len, const char *file, struct ktune_err *e)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int depth = 0, ndocs = 0, rc = 0, done = 0;

	if (!yaml_parser_initialize(&p))
		return ktune__fail(e, KTUNE_ERR_NOMEM, "%s: out of memory", file);
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done) {
		unsigned long line;

		if (!yaml_parser_parse(&p, &ev)) {
			rc = yaml_failed(&p, text, len, file, e);
			goto out;
		}
		line = (unsigned long)ev.start_mark.line + 1;
		switch (ev.type) {
		case YAML_DOCUMENT_START_EVENT:
			if (++ndocs > 1)
				rc = ktune__fail(e, KTUNE_ERR_PARSE,
						 "%s:%lu: more than one document", file, line);
			break;
		case YAML_ALIAS_EVENT:
			rc = ktune__fail(e, KTUNE_ERR_PARSE, "%s:%lu: aliases are not supported",
					 file, line);
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (++depth > MAX_DEPTH)
				rc = ktune__fail(e, KTUNE_ERR_PARSE,
						 "%s:%lu: nested more than %d levels deep",
						 file, line, MAX_DEPTH);
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
		if (rc)
			goto out;
	}
out:
	yaml_parser_delete(&p);
	return rc;
}

int ktune__yaml_load(yaml_document_t *doc, const char *text, size_t len, const char *file,
		     struct ktune_err *e)
{
	yaml_parser_t p;
	int rc;

	if ((rc = check_events(text, len, file, e)))
		return rc;
	if (!yaml_parser_initialize(&p))
		return ktune__fail(e, KTUNE_ERR_NOMEM, "%s: out of memory", file);
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, doc))
		rc = yaml_failed(&p, text, len, file, e);
	yaml_parser_delete(&p);
	return rc;
}

const char *ktune__yaml_scalar(const yaml_node_t *n)
{
	const char *s;

	if (n->type != YAML_SCALAR_NODE)
		return NULL;
	s = (const char *)n->data.scalar.value;
	return strlen(s) == n->data.scalar.length ? s : NULL;
}

int ktune__yaml_long(const char *s, long *out)
{
	char *end;
	long v;

	if (!isdigit((unsigned char)*s) && !((*s == '-' || *s == '+') &&
					     isdigit((unsigned char)s[1])))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end)
		return -1;
	if (errno)
		return -2;
	*out = v;
	return 0;
}
