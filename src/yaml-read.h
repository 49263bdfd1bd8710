/*
 * yaml-read.h - reading the YAML ktune takes in (search spaces, sweep
 * specs, export files), on libyaml's types, named by their struct tags so
 * that this header does not need <yaml.h>.  Below search and db, which
 * both read YAML: neither depends on the other for it.
 */
#ifndef KTUNE_YAML_READ_H
#define KTUNE_YAML_READ_H

#include <stddef.h>

#include "common.h"

struct yaml_document_s;
struct yaml_node_s;

/*
 * Loads the one document of `text` into doc; the caller deletes it with
 * yaml_document_delete() on success.  Refuses aliases, more than one
 * document and nesting more than 16 deep: "spec.yaml:3: aliases are not supported".
 */
int ktune__yaml_load(struct yaml_document_s *doc, const char *text, size_t len,
		     const char *file, struct ktune_err *e);
/* Formats "file:line: message" with the node's line and returns KTUNE_ERR_PARSE. */
int ktune__yaml_bad(struct ktune_err *e, const char *file, const struct yaml_node_s *n,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The text of a scalar node; NULL if n is not a scalar or its text holds a NUL byte. */
const char *ktune__yaml_scalar(const struct yaml_node_s *n);
/* Parses a decimal integer that is the whole of s: 0, -1 if it is not one, -2 if out of range. */
int ktune__yaml_long(const char *s, long *out);

#endif
