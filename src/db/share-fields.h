/*
 * share-fields.h - the fields of an export entry, in the order they are
 * written, shared by the writer and checks (share.c) and the reader
 * (share-read.c).  A name with a dot ("key.m") is a field of a nested mapping.
 */
#ifndef KTUNE_SHARE_FIELDS_H
#define KTUNE_SHARE_FIELDS_H

#include <stddef.h>

#include "db/share.h"

enum ktune_share_kind {
	FIELD_STR,    /* a string, checked by `check` */
	FIELD_INT,    /* an int in lo..hi */
	FIELD_I64,    /* an int64_t in lo..hi */
	FIELD_REAL,   /* a finite double in dlo..dhi (dlo excluded if lo_open) */
	FIELD_DTYPE,  /* "f16", "bf16" or "f32" (the op says which it takes) */
	FIELD_VARIANT, /* the key's variant: "nt" for a GEMM (written "layout" by format 1) */
	FIELD_CONFIG, /* a config admitted by the space of the entry's family */
	FIELD_RATIO,  /* cublas_us / time_us: written, read and range-checked, never stored */
};

struct ktune_share_field {
	const char *name;
	enum ktune_share_kind kind;
	size_t off, cap; /* offset in struct ktune_result; size of a string field */
	long lo, hi;
	double dlo, dhi;
	const char *fmt; /* printf format of a real */
	const char *(*check)(const char *s); /* NULL if s is fine, else what is wrong */
	int lo_open;
};

extern const struct ktune_share_field ktune__share_fields[];
extern const int ktune__share_nfields;

int ktune__share_check_long(const struct ktune_share_field *f, long v, struct ktune_err *e);
int ktune__share_check_real(const struct ktune_share_field *f, double v, struct ktune_err *e);

/* Copies s into buf for a message, escaping quotes, backslashes and non-printable bytes. */
const char *ktune__share_quote(const char *s, char *buf, size_t len);

#endif
