/*
 * expr.c - constraint expressions: a recursive-descent parser that emits
 * code for a small stack machine, and its evaluator.
 *
 * The code is postfix: operands push, operators pop theirs and push the
 * result.  && and || compile to a conditional jump over their right operand,
 * so a && b evaluates b only when a is non-zero, as in C.  Evaluation does
 * not recurse, so a long chain such as 1+1+...+1 costs no stack.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expr.h"

/* Parentheses and unary operators nest at most this deep. */
#define MAX_NEST 64
/* The evaluation stack; expressions that would need more are refused. */
#define MAX_STACK 128

enum op {
	OP_CONST, OP_NAME, OP_NEG, OP_NOT, OP_BOOL,
	OP_MUL, OP_DIV, OP_MOD, OP_ADD, OP_SUB,
	OP_LT, OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE,
	OP_JZ,  /* top == 0: leave 0, jump; else pop */
	OP_JNZ, /* top != 0: leave 1, jump; else pop */
};

struct insn {
	enum op op;
	long arg; /* constant, name index or jump target */
};

struct ktune_expr {
	struct insn *code;
	int ncode, cap;
	int max_name;
};

enum tok {
	T_END, T_NUM, T_NAME, T_LPAREN, T_RPAREN, T_NOT,
	T_MUL, T_DIV, T_MOD, T_ADD, T_SUB,
	T_LT, T_LE, T_GT, T_GE, T_EQ, T_NE, T_AND, T_OR,
};

struct parser {
	const char *text;
	const char *pos;        /* next character to read */
	enum tok tok;           /* current token */
	const char *tok_start;
	size_t tok_len;
	long tok_val;           /* of T_NUM */
	const char *const *names;
	int nnames;
	int nest, depth;        /* parser nesting; evaluation stack depth */
	struct ktune_expr *x;
	struct ktune_err *e;
};

static int column(const struct parser *p, const char *at)
{
	return (int)(at - p->text) + 1;
}

/* Describes the current token for a message: "'+'", "'BLOCK_M'", "end of expression". */
static const char *found(const struct parser *p, char *buf, size_t len)
{
	int n = p->tok_len > 32 ? 32 : (int)p->tok_len;

	if (p->tok == T_END)
		return "end of expression";
	snprintf(buf, len, "'%.*s%s'", n, p->tok_start, p->tok_len > 32 ? "..." : "");
	return buf;
}

static int expected(struct parser *p, const char *what)
{
	char buf[48];

	return ktune__fail(p->e, KTUNE_ERR_PARSE, "column %d: expected %s, found %s",
			   column(p, p->tok_start), what, found(p, buf, sizeof(buf)));
}

static int next(struct parser *p)
{
	static const struct {
		const char *s;
		enum tok tok;
	} ops[] = {
		{ "<=", T_LE }, { ">=", T_GE }, { "==", T_EQ }, { "!=", T_NE },
		{ "&&", T_AND }, { "||", T_OR },
		{ "(", T_LPAREN }, { ")", T_RPAREN }, { "!", T_NOT },
		{ "*", T_MUL }, { "/", T_DIV }, { "%", T_MOD }, { "+", T_ADD },
		{ "-", T_SUB }, { "<", T_LT }, { ">", T_GT },
	};
	const char *s = p->pos;
	size_t i;

	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	p->tok_start = s;
	if (!*s) {
		p->tok = T_END;
		p->tok_len = 0;
		p->pos = s;
		return 0;
	}
	if (isdigit((unsigned char)*s)) {
		long v = 0;

		for (; isdigit((unsigned char)*s); s++) {
			int d = *s - '0';

			if (v > (LONG_MAX - d) / 10) {
				while (isdigit((unsigned char)*s))
					s++;
				return ktune__fail(p->e, KTUNE_ERR_PARSE,
						   "column %d: '%.*s' is too large",
						   column(p, p->tok_start),
						   (int)(s - p->tok_start), p->tok_start);
			}
			v = v * 10 + d;
		}
		if (isalpha((unsigned char)*s) || *s == '_')
			return ktune__fail(p->e, KTUNE_ERR_PARSE,
					   "column %d: malformed number", column(p, p->tok_start));
		p->tok = T_NUM;
		p->tok_val = v;
		goto done;
	}
	if (isalpha((unsigned char)*s) || *s == '_') {
		while (isalnum((unsigned char)*s) || *s == '_')
			s++;
		p->tok = T_NAME;
		goto done;
	}
	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		size_t n = strlen(ops[i].s);

		if (!strncmp(s, ops[i].s, n)) {
			p->tok = ops[i].tok;
			s += n;
			goto done;
		}
	}
	if (isprint((unsigned char)*s))
		return ktune__fail(p->e, KTUNE_ERR_PARSE, "column %d: unexpected character '%c'",
				   column(p, s), *s);
	return ktune__fail(p->e, KTUNE_ERR_PARSE, "column %d: unexpected byte 0x%02x",
			   column(p, s), (unsigned char)*s);
done:
	p->tok_len = (size_t)(s - p->tok_start);
	p->pos = s;
	return 0;
}

/*
 * Appends an instruction that changes the stack depth by `push`; returns its
 * index, or a (negative) status.
 */
static int emit(struct parser *p, enum op op, long arg, int push)
{
	struct ktune_expr *x = p->x;

	if (x->ncode == x->cap) {
		int cap = x->cap ? 2 * x->cap : 16;
		struct insn *code = realloc(x->code, (size_t)cap * sizeof(*code));

		if (!code)
			return ktune__fail(p->e, KTUNE_ERR_NOMEM, "out of memory");
		x->code = code;
		x->cap = cap;
	}
	p->depth += push;
	if (p->depth > MAX_STACK)
		return ktune__fail(p->e, KTUNE_ERR_PARSE,
				   "column %d: expression is too deeply nested",
				   column(p, p->tok_start));
	x->code[x->ncode].op = op;
	x->code[x->ncode].arg = arg;
	return x->ncode++;
}

static int parse_or(struct parser *p);

static int parse_primary(struct parser *p)
{
	int i, rc;

	switch (p->tok) {
	case T_NUM:
		if ((rc = emit(p, OP_CONST, p->tok_val, 1)) < 0)
			return rc;
		return next(p);
	case T_NAME:
		for (i = 0; i < p->nnames; i++) {
			if (strlen(p->names[i]) == p->tok_len &&
			    !memcmp(p->names[i], p->tok_start, p->tok_len))
				break;
		}
		if (i == p->nnames) {
			int n = p->tok_len > 64 ? 64 : (int)p->tok_len;

			return ktune__fail(p->e, KTUNE_ERR_PARSE, "unknown name '%.*s'", n,
					   p->tok_start);
		}
		if ((rc = emit(p, OP_NAME, i, 1)) < 0)
			return rc;
		if (i > p->x->max_name)
			p->x->max_name = i;
		return next(p);
	case T_LPAREN:
		if ((rc = next(p)) || (rc = parse_or(p)))
			return rc;
		if (p->tok != T_RPAREN)
			return expected(p, "')'");
		return next(p);
	default:
		return expected(p, "a number, a name or '('");
	}
}

static int parse_unary(struct parser *p)
{
	enum tok t = p->tok;
	int rc;

	if (t != T_SUB && t != T_NOT)
		return parse_primary(p);
	if (++p->nest > MAX_NEST)
		return ktune__fail(p->e, KTUNE_ERR_PARSE,
				   "column %d: expression is too deeply nested",
				   column(p, p->tok_start));
	if ((rc = next(p)) || (rc = parse_unary(p)))
		return rc;
	p->nest--;
	rc = emit(p, t == T_SUB ? OP_NEG : OP_NOT, 0, 0);
	return rc < 0 ? rc : 0;
}

/*
 * One level of left-associative binary operators: ops[] maps tokens to
 * instructions, `sub` parses the operands.
 */
struct binop {
	enum tok tok;
	enum op op;
};

static int parse_binary(struct parser *p, const struct binop *ops, int nops,
			int (*sub)(struct parser *))
{
	int i, rc;

	if ((rc = sub(p)))
		return rc;
	for (;;) {
		for (i = 0; i < nops && ops[i].tok != p->tok; i++)
			;
		if (i == nops)
			return 0;
		if ((rc = next(p)) || (rc = sub(p)))
			return rc;
		if ((rc = emit(p, ops[i].op, 0, -1)) < 0)
			return rc;
	}
}

static int parse_mul(struct parser *p)
{
	static const struct binop ops[] = {
		{ T_MUL, OP_MUL }, { T_DIV, OP_DIV }, { T_MOD, OP_MOD },
	};
	return parse_binary(p, ops, 3, parse_unary);
}

static int parse_add(struct parser *p)
{
	static const struct binop ops[] = { { T_ADD, OP_ADD }, { T_SUB, OP_SUB } };
	return parse_binary(p, ops, 2, parse_mul);
}

static int parse_rel(struct parser *p)
{
	static const struct binop ops[] = {
		{ T_LT, OP_LT }, { T_LE, OP_LE }, { T_GT, OP_GT }, { T_GE, OP_GE },
	};
	return parse_binary(p, ops, 4, parse_add);
}

static int parse_eq(struct parser *p)
{
	static const struct binop ops[] = { { T_EQ, OP_EQ }, { T_NE, OP_NE } };
	return parse_binary(p, ops, 2, parse_rel);
}

/*
 * a && b && c: each && jumps to the end when its left side is zero,
 * leaving 0; the last operand is turned into 0 or 1.  || likewise.
 */
static int parse_logic(struct parser *p, enum tok tok, enum op jump,
		       int (*sub)(struct parser *))
{
	int at, rc;

	if ((rc = sub(p)))
		return rc;
	while (p->tok == tok) {
		if ((at = emit(p, jump, 0, -1)) < 0)
			return at;
		if ((rc = next(p)) || (rc = sub(p)))
			return rc;
		if ((rc = emit(p, OP_BOOL, 0, 0)) < 0)
			return rc;
		p->x->code[at].arg = p->x->ncode;
	}
	return 0;
}

static int parse_and(struct parser *p)
{
	return parse_logic(p, T_AND, OP_JZ, parse_eq);
}

static int parse_or(struct parser *p)
{
	int rc;

	if (++p->nest > MAX_NEST)
		return ktune__fail(p->e, KTUNE_ERR_PARSE,
				   "column %d: expression is too deeply nested",
				   column(p, p->tok_start));
	rc = parse_logic(p, T_OR, OP_JNZ, parse_and);
	p->nest--;
	return rc;
}

int ktune__expr_parse(const char *text, const char *const *names, int nnames,
		      struct ktune_expr **out, struct ktune_err *e)
{
	struct parser p;
	int rc;

	*out = NULL;
	memset(&p, 0, sizeof(p));
	p.text = p.pos = p.tok_start = text;
	p.names = names;
	p.nnames = nnames;
	p.e = e;
	p.x = calloc(1, sizeof(*p.x));
	if (!p.x)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	p.x->max_name = -1;
	if ((rc = next(&p)) || (rc = parse_or(&p)))
		goto out;
	if (p.tok != T_END) {
		rc = expected(&p, "an operator or the end of the expression");
		goto out;
	}
	*out = p.x;
	p.x = NULL;
out:
	ktune__expr_free(p.x);
	return rc;
}

static int arith(enum op op, long a, long b, long *r)
{
	switch (op) {
	case OP_MUL:
		return __builtin_mul_overflow(a, b, r) ? -1 : 0;
	case OP_ADD:
		return __builtin_add_overflow(a, b, r) ? -1 : 0;
	case OP_SUB:
		return __builtin_sub_overflow(a, b, r) ? -1 : 0;
	case OP_DIV:
	case OP_MOD:
		if (b == 0 || (a == LONG_MIN && b == -1))
			return -1;
		*r = op == OP_DIV ? a / b : a % b;
		return 0;
	case OP_LT: *r = a < b; return 0;
	case OP_LE: *r = a <= b; return 0;
	case OP_GT: *r = a > b; return 0;
	case OP_GE: *r = a >= b; return 0;
	case OP_EQ: *r = a == b; return 0;
	case OP_NE: *r = a != b; return 0;
	default:
		return -1;
	}
}

int ktune__expr_eval(const struct ktune_expr *x, const long *values, long *result)
{
	long stack[MAX_STACK];
	int sp = 0, pc;

	for (pc = 0; pc < x->ncode; pc++) {
		const struct insn *in = &x->code[pc];

		switch (in->op) {
		case OP_CONST:
			stack[sp++] = in->arg;
			break;
		case OP_NAME:
			stack[sp++] = values[in->arg];
			break;
		case OP_NEG:
			if (stack[sp - 1] == LONG_MIN)
				return -1;
			stack[sp - 1] = -stack[sp - 1];
			break;
		case OP_NOT:
			stack[sp - 1] = !stack[sp - 1];
			break;
		case OP_BOOL:
			stack[sp - 1] = stack[sp - 1] != 0;
			break;
		case OP_JZ:
		case OP_JNZ:
			if ((stack[sp - 1] != 0) == (in->op == OP_JNZ)) {
				stack[sp - 1] = in->op == OP_JNZ;
				pc = (int)in->arg - 1;
			} else {
				sp--;
			}
			break;
		default:
			if (arith(in->op, stack[sp - 2], stack[sp - 1], &stack[sp - 2]))
				return -1;
			sp--;
			break;
		}
	}
	*result = stack[0];
	return 0;
}

int ktune__expr_true(const struct ktune_expr *x, const long *values)
{
	long v;

	return !ktune__expr_eval(x, values, &v) && v != 0;
}

int ktune__expr_max_name(const struct ktune_expr *x)
{
	return x->max_name;
}

void ktune__expr_free(struct ktune_expr *x)
{
	if (!x)
		return;
	free(x->code);
	free(x);
}
