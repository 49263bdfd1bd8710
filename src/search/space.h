/*
 * space.h - a template family's search space, read from its YAML file
 * (kernels/templates/<family>.yaml): named integer parameters, each with a
 * list of values, and constraints (integer expressions over the parameter
 * names) that every admitted configuration satisfies.
 *
 * Example:
 *   family: gemm
 *   params:
 *     BLOCK_M: [16, 32, 64, 128]
 *     WARPS_M: [1, 2, 4]
 *   constraints:
 *     - BLOCK_M % (WARPS_M * 16) == 0
 *
 * Expressions: integer literals, parameter names, unary - and !, binary
 * * / % + - < <= > >= == != && ||, parentheses; C precedence; division or
 * modulo by zero makes the constraint false.
 */
#ifndef KTUNE_SPACE_H
#define KTUNE_SPACE_H

#include <stddef.h>

#include "common.h"

#define KTUNE_SPACE_MAX_PARAMS 16
#define KTUNE_SPACE_MAX_VALUES 32
#define KTUNE_SPACE_MAX_CONSTRAINTS 32

struct ktune_space_param {
	char name[32];
	int nvalues;
	long values[KTUNE_SPACE_MAX_VALUES];
};

struct ktune_expr; /* a parsed constraint, opaque */

struct ktune_space {
	char family[32];
	int nparams;
	struct ktune_space_param params[KTUNE_SPACE_MAX_PARAMS];
	int nconstraints;
	char *constraint_text[KTUNE_SPACE_MAX_CONSTRAINTS];
	struct ktune_expr *constraints[KTUNE_SPACE_MAX_CONSTRAINTS];
};

/*
 * Parses a space from YAML text.  `filename` is used in messages, which name
 * the line: "gemm.yaml:12: constraints[2]: unknown name 'BLOK_M'".
 * On failure nothing needs freeing.
 */
int ktune__space_parse(struct ktune_space *s, const char *text, size_t len,
		       const char *filename, struct ktune_err *e);
void ktune__space_free(struct ktune_space *s);

/* Index of a parameter by name, or -1. */
int ktune__space_param_index(const struct ktune_space *s, const char *name);

/* Parameter i's value nearest to want (its first of equally near ones): a default that is in the space. */
long ktune__space_nearest(const struct ktune_space *s, int i, long want);

/*
 * 1 if values[] (one per parameter, in declaration order) are each among
 * their parameter's values and satisfy every constraint, else 0 with the
 * reason in e ("BLOCK_M=48 is not one of 16, 32, 64, 128" or
 * "violates 'BLOCK_M % (WARPS_M * 16) == 0'").
 */
int ktune__space_admits(const struct ktune_space *s, const long *values, struct ktune_err *e);

/*
 * Calls fn for every admitted configuration, in lexicographic order of the
 * value indices (first parameter slowest).  Stops early and returns fn's
 * value if it returns non-zero; returns 0 otherwise.
 */
int ktune__space_enumerate(const struct ktune_space *s,
			   int (*fn)(const long *values, void *arg), void *arg);

/* Number of admitted configurations. */
long ktune__space_count(const struct ktune_space *s);

#endif
