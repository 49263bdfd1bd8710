/*
 * expr.h - the constraint expressions of a search space (see space.h):
 * integer literals, names, unary - and !, binary * / % + - < <= > >= == !=
 * && ||, parentheses, with C's precedence, associativity and short-circuit
 * evaluation, in `long` arithmetic.  An expression is parsed once, its names
 * bound to parameter indices, then evaluated for each configuration.
 */
#ifndef KTUNE_EXPR_H
#define KTUNE_EXPR_H

#include "common.h"

struct ktune_expr; /* opaque */

/*
 * Parses the NUL-terminated `text`.  Each name must be one of
 * names[0..nnames-1] and stands for the value of that index at evaluation.
 * Returns 0 and a new expression in *out, or KTUNE_ERR_PARSE with *out NULL
 * and the reason in e: "column 7: expected ')', found '+'" or
 * "unknown name 'BLOK_M'" (KTUNE_ERR_NOMEM if memory runs out).
 */
int ktune__expr_parse(const char *text, const char *const *names, int nnames,
		      struct ktune_expr **out, struct ktune_err *e);

/*
 * Evaluates with values[i] for name i.  Returns 0 with the value in *result,
 * or -1 if a division or modulo by zero or an overflow was reached (parts
 * skipped by && and || are not evaluated, as in C).
 */
int ktune__expr_eval(const struct ktune_expr *x, const long *values, long *result);

/* 1 if the expression evaluates to non-zero; 0 if to zero or if ktune__expr_eval fails. */
int ktune__expr_true(const struct ktune_expr *x, const long *values);

/* The highest name index the expression uses, or -1 if it uses none. */
int ktune__expr_max_name(const struct ktune_expr *x);

/* NULL is a no-op. */
void ktune__expr_free(struct ktune_expr *x);

#endif
