/*
 * test-ops.c - the op registry without a GPU: the table, every op's key
 * through check, the database, export and import and back; bad keys and
 * bad spec sections refused with clear messages and nothing written;
 * config texts; candidates and defaults; a family of one arch (sm_90a)
 * kept from the others; a key of an op tuned end to end through the fake
 * worker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "db/share.h"
#include "ops/op.h"
#include "ops/rowwise.h"
#include "runtime/context.h"
#include "search/spec.h"
#include "templates.h"
#include "test_util.h"
#include "tuner/tuner.h"

static int setup(void **state)
{
	return test_scratch_setup(state, "ktune-test-ops");
}

/* One key of each op but GEMM, with its variant's last values (not the defaults). */
static struct ktune_key sample_key(const struct ktune_op *op)
{
	struct ktune_key key = { .dtype = op->dtypes[op->ndtypes - 1], .aligned = 1 };
	const char *values[16] = { NULL };
	snprintf(key.op, sizeof(key.op), "%s", op->name);
	for (int f = 0; f < op->nfields; f++) {
		const struct ktune_op_field *fd = &op->fields[f];
		if (fd->dim >= 0) {
			*ktune__key_dim(&key, fd->dim) = 4096 + 1024 * fd->dim;
		} else {
			int last = 0;
			while (fd->choices[last + 1])
				last++;
			values[f] = fd->choices[last];
		}
	}
	assert_int_equal(ktune__op_variant_set(op, &key, values, NULL), KTUNE_OK);
	return key;
}

/* A stored result for key: its op's default config, as a sweep would store it. */
static struct ktune_result sample_result(const struct ktune_op *op, const struct ktune_key *key)
{
	struct ktune_result r;
	memset(&r, 0, sizeof(r));
	r.key = *key;
	snprintf(r.device.name, sizeof(r.device.name), "Test GPU");
	snprintf(r.device.arch, sizeof(r.device.arch), "sm_90");
	r.device.sm_count = 132;
	struct ktune_config c = op->default_config(key, 132);
	snprintf(r.family, sizeof(r.family), "%s", op->families[c.family].name);
	assert_int_equal(ktune__op_config_format(op, &c, r.config, sizeof(r.config)), 0);
	snprintf(r.template_hash, sizeof(r.template_hash), "%s", ktune__op_family_hash(op, c.family));
	snprintf(r.protocol, sizeof(r.protocol), "events");
	snprintf(r.nvrtc_version, sizeof(r.nvrtc_version), "13.0");
	snprintf(r.driver_version, sizeof(r.driver_version), "13.0");
	snprintf(r.ktune_version, sizeof(r.ktune_version), "0.1.0");
	snprintf(r.created_at, sizeof(r.created_at), "2026-11-26T00:00:00Z");
	r.time_us = 12.5;
	r.p20_us = 12;
	r.p80_us = 13;
	r.cublas_us = 11;
	r.candidates = 10;
	r.tune_s = 1;
	return r;
}

static void test_ops__table(void **state)
{
	struct ktune_err e;
	(void)state;
	/* gemm first, then every op once, as the table lists them */
	assert_int_equal(strncmp(ktune__op_names(), "gemm, add, gelu, glu, dropout", 29), 0);
	for (int i = 0; ktune__ops[i]; i++) {
		const char *at = strstr(ktune__op_names(), ktune__ops[i]->name);
		assert_non_null(at);
		assert_ptr_equal(ktune__op_find(ktune__ops[i]->name), ktune__ops[i]);
	}
	assert_true(ktune__op_is_gemm(ktune__op_find("gemm")));
	assert_null(ktune__op_find("conv"));
	assert_null(ktune__op_find(NULL));
	for (int i = 0; ktune__ops[i]; i++) {
		const struct ktune_op *op = ktune__ops[i];
		assert_non_null(op->summary);
		assert_true(op->nfields > 0 && op->nfamilies > 0 && op->ndtypes > 0);
		for (int f = 0; f < op->nfamilies; f++) {
			if (!ktune__op_space(op, f, &e))
				fail_msg("%s: %s", op->name, e.msg);
			assert_non_null(ktune__template_file(op->families[f].source));
			assert_int_equal(strlen(ktune__op_family_hash(op, f)), 64);
		}
		if (ktune__op_is_gemm(op))
			continue;
		/* everything the generic tuner and runtime call is there */
		assert_non_null(op->layout);
		assert_non_null(op->reference);
		assert_non_null(op->defines);
		/* one kernel (geometry and args) or several (steps) */
		assert_true((op->geometry && op->args) || op->steps);
		for (int f = 0; f < op->nfamilies; f++)
			assert_non_null(op->families[f].entries[0]);
		assert_non_null(op->default_config);
		assert_non_null(op->distance);
		assert_non_null(op->suite);
	}
}

/* Every op's key: check, the database, export, import, and back, unchanged. */
static void test_ops__key_round_trip(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_db *db, *db2;
	struct ktune_err e;

	assert_int_equal(ktune__db_open(t->db, 1, &db, &e), KTUNE_OK);
	assert_int_equal(ktune__db_open(t->db2, 1, &db2, &e), KTUNE_OK);
	for (int i = 0; ktune__ops[i]; i++) {
		const struct ktune_op *op = ktune__ops[i];
		struct ktune_result r, got;
		struct ktune_share share;
		char *text;
		size_t len;
		if (ktune__op_is_gemm(op))
			continue;
		struct ktune_key key = sample_key(op);
		if (ktune__op_key_check(&key, &e))
			fail_msg("%s", e.msg);
		r = sample_result(op, &key);
		if (ktune__db_put_result(db, &r, NULL, 0, &e))
			fail_msg("%s: %s", op->name, e.msg);
		assert_int_equal(ktune__db_get_result(db, &r.device, &key, &got, &e), 1);
		assert_true(ktune__key_same(&got.key, &key));
		assert_string_equal(got.config, r.config);

		/* export, parse, import into another database */
		assert_int_equal(ktune__share_write(&r, 1, &text, &len, &e), KTUNE_OK);
		assert_non_null(strstr(text, "version: 2\n"));
		assert_non_null(strstr(text, "variant: "));
		if (ktune__share_parse(text, len, "t.yaml", &share, &e))
			fail_msg("%s: %s\n%s", op->name, e.msg, text);
		assert_int_equal(share.count, 1);
		assert_int_equal(share.stale[0], 0);
		assert_true(ktune__key_same(&share.entries[0].key, &key));
		assert_string_equal(share.entries[0].config, r.config);
		ktune__share_free(&share);
		free(text);
		struct ktune_import_counts counts;
		struct ktune_import_item item;
		unsigned char stale = 0;
		if (ktune__db_import(db2, &r, &stale, 1, KTUNE_POLICY_FASTER, 0, &item, &counts, &e))
			fail_msg("%s: %s", op->name, e.msg);
		assert_int_equal(ktune__db_get_result(db2, &r.device, &key, &got, &e), 1);
		assert_string_equal(got.config, r.config);

		/* a key differing only in its op is another key */
		struct ktune_key other = key;
		snprintf(other.op, sizeof(other.op), "%s", i > 1 ? "add" : "dropout");
		assert_false(ktune__key_same(&other, &key));
	}
	/* keys that differ past their variant's first characters are distinct in one file */
	{
		const struct ktune_op *gelu = ktune__op_find("gelu");
		struct ktune_key a = { .op = "gelu", .dtype = KTUNE_BF16, .variant = "tanh,fwd", .m = 64, .aligned = 1 };
		struct ktune_key b = a;
		snprintf(b.variant, sizeof(b.variant), "tanh,bwd");
		struct ktune_result two[2] = { sample_result(gelu, &a), sample_result(gelu, &b) };
		struct ktune_share share;
		char *text;
		size_t len;
		assert_int_equal(ktune__share_write(two, 2, &text, &len, &e), KTUNE_OK);
		if (ktune__share_parse(text, len, "t.yaml", &share, &e))
			fail_msg("%s", e.msg);
		assert_int_equal(share.count, 2);
		ktune__share_free(&share);
		free(text);
	}
	struct ktune_filter f = { 0 };
	snprintf(f.op, sizeof(f.op), "glu");
	long results, trials;
	assert_int_equal(ktune__db_count(db2, &results, &trials, &e), KTUNE_OK);
	long ops = 0;
	for (int i = 0; ktune__ops[i]; i++)
		ops += !ktune__op_is_gemm(ktune__ops[i]);
	assert_int_equal(results, ops);
	ktune__db_close(db);
	ktune__db_close(db2);
}

static void expect_bad_key(struct ktune_key key, const char *want)
{
	struct ktune_err e = { "" };
	assert_int_equal(ktune__op_key_check(&key, &e), KTUNE_ERR_INVALID);
	if (!strstr(e.msg, want))
		fail_msg("message '%s' lacks '%s'", e.msg, want);
}

static void test_ops__bad_keys_are_refused(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_key good = { .op = "gelu", .dtype = KTUNE_BF16, .variant = "tanh,bwd", .m = 1024, .aligned = 1 };
	struct ktune_key k;
	(void)state;

	assert_int_equal(ktune__op_key_check(&good, NULL), KTUNE_OK);
	k = good, snprintf(k.op, sizeof(k.op), "conv");
	expect_bad_key(k, "op 'conv' is not one of gemm, add, gelu, glu, dropout"); /* and the rest */
	k = good, snprintf(k.variant, sizeof(k.variant), "fast,bwd");
	expect_bad_key(k, "gelu: approx in variant 'fast,bwd' is not one of erf, tanh");
	k = good, snprintf(k.variant, sizeof(k.variant), "tanh");
	expect_bad_key(k, "gelu: direction in variant 'tanh' is not one of fwd, bwd");
	k = good, snprintf(k.variant, sizeof(k.variant), "tanh,bwd,x");
	expect_bad_key(k, "variant 'tanh,bwd,x' has 3 parts, not 2");
	k = good, k.m = 0;
	expect_bad_key(k, "gelu: n = 0 is not in 1..");
	k = good, k.m = KTUNE_OP_MAX_SIZE + 1;
	expect_bad_key(k, "gelu: n = 17179869185 is not in 1..");
	k = good, k.n = 5;
	expect_bad_key(k, "gelu: size 1 is not one of its fields");
	k = good, k.dtype = (ktune_dtype)9;
	expect_bad_key(k, "gelu: dtype '?' is not supported");
	k = good, k.aligned = 2;
	expect_bad_key(k, "aligned is 2");
	k = (struct ktune_key){ .op = "gemm", .dtype = KTUNE_F32, .variant = "nt", .m = 1, .n = 1, .k = 1 };
	expect_bad_key(k, "gemm: dtype 'f32' is not supported");
	k = (struct ktune_key){ .op = "add", .dtype = KTUNE_F32, .variant = "x", .m = 1 };
	expect_bad_key(k, "add: variant 'x' has 1 parts, not 0");

	/* the database refuses them and writes nothing */
	struct ktune_db *db;
	struct ktune_err e;
	long results, trials;
	assert_int_equal(ktune__db_open(t->db, 1, &db, &e), KTUNE_OK);
	struct ktune_result r = sample_result(ktune__op_find("gelu"), &good);
	r.key.m = 0;
	assert_int_equal(ktune__db_put_result(db, &r, NULL, 0, &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "gelu: n = 0"));
	assert_int_equal(ktune__db_count(db, &results, &trials, &e), KTUNE_OK);
	assert_int_equal(results, 0);
	ktune__db_close(db);
}

/* An export entry of an op that is wrong in one field: refused, naming the entry's key. */
static void test_ops__bad_export_entries_are_refused(void **state)
{
	const struct ktune_op *op = ktune__op_find("glu");
	struct ktune_key key = sample_key(op);
	struct ktune_result r = sample_result(op, &key);
	struct ktune_share share;
	struct ktune_err e;
	char *text;
	size_t len;
	static const char *const cases[][3] = {
		{ "variant: \"geglu_tanh,bwd\"", "variant: \"geglu_tanh,up\"",
		  "entries[0].key: glu: direction in variant 'geglu_tanh,up' is not one of fwd, bwd" },
		{ "k: 0\n", "k: 7\n", "entries[0].key: glu: size 2 is not one of its fields" },
		{ "VEC=", "VECTOR=", "'VECTOR' is not a parameter of glu" },
		{ "VEC=8", "VEC=3", "is not in glu's space: VEC=3 is not one of 1, 2, 4, 8" },
		{ "family: \"glu\"", "family: \"gelu\"", "entries[0].config: glu has no family 'gelu'" },
		{ "dtype: \"bf16\"", "dtype: \"f64\"", "key.dtype: 'f64' is not one of f16, bf16, f32" },
	};
	(void)state;
	r.key.dtype = KTUNE_BF16;
	r = sample_result(op, &r.key);
	assert_int_equal(ktune__share_write(&r, 1, &text, &len, &e), KTUNE_OK);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *at = strstr(text, cases[i][0]);
		if (!at)
			fail_msg("'%s' not in\n%s", cases[i][0], text);
		char *bad = malloc(len + 64);
		assert_non_null(bad);
		sprintf(bad, "%.*s%s%s", (int)(at - text), text, cases[i][1], at + strlen(cases[i][0]));
		e.msg[0] = 0;
		assert_int_not_equal(ktune__share_parse(bad, strlen(bad), "t.yaml", &share, &e), KTUNE_OK);
		if (!strstr(e.msg, cases[i][2]))
			fail_msg("case %zu: message '%s' lacks '%s'", i, e.msg, cases[i][2]);
		free(bad);
	}
	free(text);
}

static struct ktune_spec parse_spec(const char *text)
{
	struct ktune_spec s;
	struct ktune_err e;
	if (ktune__spec_parse(text, strlen(text), "spec.yaml", &s, &e))
		fail_msg("%s", e.msg);
	return s;
}

static void expect_spec_error(const char *text, const char *want)
{
	struct ktune_spec s;
	struct ktune_err e = { "" };
	assert_int_equal(ktune__spec_parse(text, strlen(text), "spec.yaml", &s, &e), KTUNE_ERR_PARSE);
	if (strcmp(e.msg, want))
		fail_msg("message '%s', not '%s'", e.msg, want);
	assert_int_equal(s.nkeys, 0);
}

static void test_ops__spec_sections(void **state)
{
	char buf[128];
	(void)state;
	struct ktune_spec s = parse_spec("budget: 8\n"
					 "gelu:\n"
					 "  dtypes: [bf16, f32]\n"
					 "  direction: [bwd]\n"
					 "  shapes:\n"
					 "    - {n: [1000, 1024, 3000]}\n"
					 "glu:\n"
					 "  dtypes: bf16\n"
					 "  act: [geglu_tanh, swiglu]\n"
					 "  shapes:\n"
					 "    - {rows: 4096, cols: {from: 14336, to: 14336, step: 1}}\n");
	assert_int_equal(s.budget, 8);
	/* 1000 and 1024 are one bucket; approx defaults to erf */
	assert_int_equal(s.nkeys, 2 * 2 + 2);
	ktune__key_format(&s.keys[0], buf, sizeof(buf));
	assert_string_equal(buf, "gelu bf16 erf,bwd 1024 aligned");
	ktune__key_format(&s.keys[1], buf, sizeof(buf));
	assert_string_equal(buf, "gelu bf16 erf,bwd 4096 aligned");
	ktune__key_format(&s.keys[2], buf, sizeof(buf));
	assert_string_equal(buf, "gelu f32 erf,bwd 1024 aligned");
	ktune__key_format(&s.keys[4], buf, sizeof(buf));
	assert_string_equal(buf, "glu bf16 geglu_tanh,fwd 4096x16384 aligned");
	ktune__key_format(&s.keys[5], buf, sizeof(buf));
	assert_string_equal(buf, "glu bf16 swiglu,fwd 4096x16384 aligned");
	for (int i = 0; i < s.nkeys; i++)
		assert_int_equal(ktune__op_key_check(&s.keys[i], NULL), KTUNE_OK);
	ktune__spec_free(&s);

	expect_spec_error("gelu:\n  dtypes: [bf16]\n  approx: [fast]\n  shapes:\n    - {n: 8}\n",
			  "spec.yaml:3: gelu.approx[0]: 'fast' is not one of erf, tanh");
	expect_spec_error("gelu:\n  dtypes: [bf16]\n  speed: 3\n  shapes:\n    - {n: 8}\n",
			  "spec.yaml:3: gelu: unknown key 'speed'");
	expect_spec_error("add:\n  dtypes: [f64]\n  shapes:\n    - {n: 8}\n",
			  "spec.yaml:2: add.dtypes[0]: 'f64' is not one of bf16, f16, f32");
	expect_spec_error("glu:\n  dtypes: [bf16]\n  shapes:\n    - {rows: 8}\n",
			  "spec.yaml:4: glu.shapes[0]: missing 'cols'");
	expect_spec_error("glu:\n  dtypes: [bf16]\n  shapes:\n    - {rows: 8, cols: 8, k: 2}\n",
			  "spec.yaml:4: glu.shapes[0]: unknown key 'k'");
	expect_spec_error("dropout:\n  dtypes: [bf16]\n", "spec.yaml:2: dropout: missing 'shapes'");
	expect_spec_error("add:\n  dtypes: [bf16]\n  shapes:\n    - {n: 0}\n",
			  "spec.yaml:4: add.shapes[0].n: '0' is not between 1 and 4294967296");
}

static void test_ops__config_texts(void **state)
{
	const struct ktune_op *op = ktune__op_find("add");
	struct ktune_config c;
	struct ktune_err e = { "" };
	char text[256];
	(void)state;

	assert_int_equal(ktune__op_config_parse(op, "add", "VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0",
						&c, &e), KTUNE_OK);
	assert_int_equal(ktune__op_param(op, &c, "VEC", 0), 4);
	assert_int_equal(ktune__op_param(op, &c, "NOPE", -7), -7);
	assert_int_equal(ktune__op_config_format(op, &c, text, sizeof(text)), 0);
	assert_string_equal(text, "VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0");
	/* any order in, canonical order out */
	assert_int_equal(ktune__op_config_parse(op, "add", "BLOCKS_PER_SM=0,CACHE=1,MIN_WARPS=0,THREADS=256,UNROLL=2,VEC=4",
						&c, &e), KTUNE_OK);
	assert_int_equal(ktune__op_config_format(op, &c, text, sizeof(text)), 0);
	assert_string_equal(text, "VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0");

	static const char *const bad[][2] = {
		{ "VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1", "BLOCKS_PER_SM is missing" },
		{ "VEC=4,VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0", "'VEC' given twice" },
		{ "VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0,X=1", "'X' is not a parameter of add" },
		{ "VEC=x,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0", "VEC is not a number" },
		{ "VEC=4,UNROLL=2,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=5", "BLOCKS_PER_SM=5 is not one of" },
		{ "VEC=8,UNROLL=4,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0", "violates" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		e.msg[0] = 0;
		assert_int_equal(ktune__op_config_parse(op, "add", bad[i][0], &c, &e), KTUNE_ERR_PARSE);
		if (!strstr(e.msg, bad[i][1]))
			fail_msg("'%s': message '%s' lacks '%s'", bad[i][0], e.msg, bad[i][1]);
	}
	assert_int_equal(ktune__op_config_parse(op, "gelu", "VEC=4", &c, &e), KTUNE_ERR_PARSE);
	assert_non_null(strstr(e.msg, "add has no family 'gelu'"));
}

/* Every key of the default suite has candidates, and its default config is one of them or admitted. */
static void test_ops__candidates_and_defaults(void **state)
{
	struct ktune_spec s;
	struct ktune_err e;
	(void)state;
	assert_int_equal(ktune__spec_default(&s, &e), KTUNE_OK);
	for (int i = 0; i < s.nkeys; i++) {
		const struct ktune_op *op = ktune__op_of(&s.keys[i]);
		struct ktune_config *cfgs, def, back;
		char text[256], why[128];
		int n, pruned;
		if (ktune__op_is_gemm(op))
			continue;
		assert_int_equal(ktune__op_candidates(op, &s.keys[i], "sm_90", 132, 0, 1, &cfgs, &n, &pruned, &e), KTUNE_OK);
		ktune__key_format(&s.keys[i], text, sizeof(text));
		if (n < 4) /* a search, not a formality */
			fail_msg("%s: %d candidates", text, n);
		for (int j = 0; j < n; j++) /* no 32-byte vectors reach the compiler */
			assert_true(ktune__op_param(op, &cfgs[j], "VEC", 1) * ktune__dtype_size(s.keys[i].dtype) <= 16);
		free(cfgs);
		def = op->default_config(&s.keys[i], 132);
		assert_int_equal(ktune__op_config_format(op, &def, text, sizeof(text)), 0);
		if (ktune__op_config_parse(op, op->families[def.family].name, text, &back, &e))
			fail_msg("default %s: %s", text, e.msg);
		if (op->prune(&s.keys[i], &def, 132, why, sizeof(why)))
			fail_msg("default %s: %s", text, why);
	}
	/* a budget keeps a seeded sample: the same one each time */
	const struct ktune_op *add = ktune__op_find("add");
	struct ktune_key key = { .op = "add", .dtype = KTUNE_F32, .m = 1 << 20, .aligned = 1 };
	struct ktune_config *a, *b;
	int na, nb, pruned;
	assert_int_equal(ktune__op_candidates(add, &key, "sm_90", 132, 16, 7, &a, &na, &pruned, &e), KTUNE_OK);
	assert_int_equal(ktune__op_candidates(add, &key, "sm_90", 132, 16, 7, &b, &nb, &pruned, &e), KTUNE_OK);
	assert_int_equal(na, 16);
	assert_memory_equal(a, b, sizeof(*a) * 16);
	free(a);
	free(b);
	/* the unaligned class takes the scalar path: no wider vectors */
	key.aligned = 0;
	assert_int_equal(ktune__op_candidates(add, &key, "sm_90", 132, 0, 7, &a, &na, &pruned, &e), KTUNE_OK);
	for (int j = 0; j < na; j++)
		assert_int_equal(ktune__op_param(add, &a[j], "VEC", 0), 1);
	free(a);
	ktune__spec_free(&s);
}

/* Whether the op's defines for the key and config hold `want` ("-DCOLS=53241"). */
static int defines_hold(const struct ktune_op *op, const struct ktune_key *key, const struct ktune_config *c,
			const char *want)
{
	char opts[KTUNE_OP_MAX_DEFINES][48];
	int n = op->defines(key, c, opts, KTUNE_OP_MAX_DEFINES);
	for (int i = 0; i < n; i++)
		if (!strcmp(opts[i], want))
			return 1;
	return 0;
}

/*
 * The unaligned class of a family that shifts its rows (cross_entropy)
 * takes vectors: its candidates hold VEC 2, 4 and 8 beside 1, its default
 * 16-byte ones, and a thread's registers hold cols + VEC - 1 elements,
 * COLS the longest row (one more vector a thread where the shift needs
 * it); a VEC=1 config and the aligned class are as before.  softmax, whose
 * template does not shift, keeps the unaligned class at VEC=1.
 */
static void test_ops__unaligned_rows_shift(void **state)
{
	const struct ktune_op *ce = ktune__op_find("cross_entropy"), *softmax = ktune__op_find("softmax");
	const char *values[] = { "fused", "mean", "off", "off" };
	struct ktune_key key = { .op = "cross_entropy", .dtype = KTUNE_BF16, .m = 8192, .n = 50257 };
	struct ktune_config *cfgs, c, d;
	struct ktune_err e;
	int n, pruned, vecs[9] = { 0 };
	char why[160];
	(void)state;
	assert_true(ce->families[0].shifted_rows && !softmax->families[0].shifted_rows);
	assert_int_equal(ktune__op_variant_set(ce, &key, values, NULL), 0);
	assert_int_equal(ktune__op_candidates(ce, &key, "sm_90", 132, 0, 7, &cfgs, &n, &pruned, &e), KTUNE_OK);
	for (int i = 0; i < n; i++)
		vecs[ktune__op_param(ce, &cfgs[i], "VEC", 0)]++;
	free(cfgs);
	assert_true(vecs[1] > 0 && vecs[2] > 0 && vecs[4] > 0 && vecs[8] > 0);
	/* the default streams 50257 (cross_entropy_stream); a short row (4001) is held in 16-byte vectors, shifted */
	d = ce->default_config(&key, 132);
	assert_string_equal(ce->families[d.family].name, "cross_entropy_stream");
	assert_int_equal(ce->prune(&key, &d, 132, why, sizeof(why)), 0);
	key.n = 4001;
	d = ce->default_config(&key, 132);
	assert_int_equal(d.family, 0);
	assert_int_equal(ktune__op_param(ce, &d, "VEC", 0), 8);
	assert_int_equal(ce->prune(&key, &d, 132, why, sizeof(why)), 0);
	key.n = 50257;

	/* 50257 in 4096-element spans: 13 vectors a thread, aligned or shifted by up to 7 */
	assert_int_equal(ktune__op_config_parse(ce, "cross_entropy",
						"VEC=8,ROW_THREADS=512,THREADS=512,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,"
						"KEEP=0,BLOCKS_PER_SM=0", &c, &e), KTUNE_OK);
	struct ktune_rw_shape s = ktune__rw_shape(&key, &c);
	assert_int_equal(s.vec, 8);
	assert_int_equal(s.shift, 7);
	assert_int_equal(s.items, 13);
	assert_true(defines_hold(ce, &key, &c, "-DALIGNED=0") && defines_hold(ce, &key, &c, "-DVEC=8"));
	assert_true(defines_hold(ce, &key, &c, "-DCOLS=53241")); /* 13 x 4096 - 7 */
	/* 8189 fits two spans aligned, three shifted */
	key.n = 8189;
	s = ktune__rw_shape(&key, &c);
	assert_int_equal(s.items, 3);
	assert_true(defines_hold(ce, &key, &c, "-DCOLS=12281"));
	key.aligned = 1;
	s = ktune__rw_shape(&key, &c);
	assert_int_equal(s.shift, 0);
	assert_int_equal(s.items, 2);
	assert_true(defines_hold(ce, &key, &c, "-DCOLS=8192") && defines_hold(ce, &key, &c, "-DALIGNED=1"));
	/* VEC=1 unaligned: no shift */
	key.aligned = 0;
	assert_int_equal(ktune__op_config_parse(ce, "cross_entropy",
						"VEC=1,ROW_THREADS=512,THREADS=512,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,"
						"KEEP=0,BLOCKS_PER_SM=0", &c, &e), KTUNE_OK);
	s = ktune__rw_shape(&key, &c);
	assert_int_equal(s.shift, 0);
	assert_int_equal(s.items, 16);
	assert_true(defines_hold(ce, &key, &c, "-DCOLS=8192"));

	/* softmax: the unaligned class one element at a time */
	struct ktune_key sk = { .op = "softmax", .dtype = KTUNE_BF16, .m = 8192, .n = 50257, .aligned = 1 };
	const char *fwd[] = { "fwd" };
	assert_int_equal(ktune__op_variant_set(softmax, &sk, fwd, NULL), 0);
	d = softmax->default_config(&sk, 132);
	assert_int_equal(ktune__op_param(softmax, &d, "VEC", 0), 8);
	sk.aligned = 0;
	assert_int_equal(softmax->prune(&sk, &d, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "scalar path"));
	assert_int_equal(ktune__rw_shape(&sk, &d).vec, 1);
	d = softmax->default_config(&sk, 132);
	assert_int_equal(ktune__op_param(softmax, &d, "VEC", 0), 1);
	assert_int_equal(ktune__op_candidates(softmax, &sk, "sm_90", 132, 0, 7, &cfgs, &n, &pruned, &e), KTUNE_OK);
	assert_true(n > 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(ktune__op_param(softmax, &cfgs[i], "VEC", 0), 1);
	free(cfgs);
}

/*
 * A family of one arch (attention_wgmma: sm_90a) is offered, compiled and
 * imported only for devices of that arch: the others never see it.
 */
/* Parses `text` as a config of op's first family, or fails the test. */
static struct ktune_config config_of_text(const struct ktune_op *op, const char *text)
{
	struct ktune_config c;
	struct ktune_err e;
	if (ktune__op_config_parse(op, op->families[0].name, text, &c, &e))
		fail_msg("%s", e.msg);
	return c;
}

/*
 * RING (rowring.cuh): rows of the walk in flight in shared memory.  Its bytes
 * (tensors' slots and the per-row floats), and the prune: the aligned class,
 * vectors of 4 bytes or more, a block's shared memory within an SM's for
 * BLOCKS_PER_SM blocks; RING=0 takes none.
 */
static void test_ops__ring_in_shared_memory(void **state)
{
	(void)state;
	const struct ktune_op *ln = ktune__op_find("layernorm"), *sm = ktune__op_find("softmax");
	struct ktune_key key = { .op = "layernorm", .dtype = KTUNE_BF16, .variant = "bwd", .m = 4096, .n = 4096,
				 .aligned = 1 };
	char why[200];
	assert_non_null(ln);
	assert_non_null(sm);

	/* the H200's shipped LayerNorm backward at 4096 x 4096: 8 vectors of 4 a thread, x and dy, mean and rstd */
	struct ktune_config c = config_of_text(ln, "VEC=4,ROW_THREADS=128,THREADS=256,CLUSTER=1,MIN_WARPS=0,"
						   "PREFETCH=0,RING=2,BLOCKS_PER_SM=1");
	assert_int_equal(ktune__rw_ring_bytes(&key, &c, 2, 2), 2 * 256 * (8 * 4 * 2 * 2 + 4 * 2));
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 0);
	/* the unaligned class reads element by element: no ring, even of 4-byte (f32) elements */
	key.dtype = KTUNE_F32;
	c = config_of_text(ln, "VEC=1,ROW_THREADS=512,THREADS=512,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=2,"
			       "BLOCKS_PER_SM=1");
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 0);
	key.aligned = 0;
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "ring"));
	key.aligned = 1;
	key.dtype = KTUNE_BF16;
	/* 2-byte vectors: under cp.async's 4 */
	c = config_of_text(ln, "VEC=1,ROW_THREADS=1024,THREADS=1024,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=2,"
			       "BLOCKS_PER_SM=1");
	key.n = 1024;
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "ring"));
	/* 8 rows of 1024 threads' 16 bytes, twice, with the floats: 320 KiB a block, over an SM's */
	key.n = 8192;
	c = config_of_text(ln, "VEC=8,ROW_THREADS=1024,THREADS=1024,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=8,"
			       "BLOCKS_PER_SM=1");
	assert_int_equal(ktune__rw_ring_bytes(&key, &c, 2, 2), 8 * 1024 * (16 * 2 + 4 * 2));
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "shared memory"));
	/* two rows fit one block an SM (80 KiB), not four blocks */
	c = config_of_text(ln, "VEC=8,ROW_THREADS=1024,THREADS=1024,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=2,"
			       "BLOCKS_PER_SM=1");
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 0);
	c = config_of_text(ln, "VEC=8,ROW_THREADS=1024,THREADS=1024,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=2,"
			       "BLOCKS_PER_SM=4");
	assert_int_equal(ln->prune(&key, &c, 132, why, sizeof(why)), 1);
	/* no ring, no bytes */
	c = config_of_text(ln, "VEC=8,ROW_THREADS=1024,THREADS=1024,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=0,"
			       "BLOCKS_PER_SM=1");
	assert_int_equal(ktune__rw_ring_bytes(&key, &c, 2, 2), 0);

	/* softmax's forward rings x alone, no floats */
	struct ktune_key sk = { .op = "softmax", .dtype = KTUNE_BF16, .variant = "fwd", .m = 1024, .n = 32768,
				.aligned = 1 };
	c = config_of_text(sm, "VEC=8,ROW_THREADS=512,THREADS=512,CLUSTER=1,MIN_WARPS=0,PREFETCH=0,RING=2,"
			       "KEEP_EXP=0,BLOCKS_PER_SM=1");
	assert_int_equal(ktune__rw_ring_bytes(&sk, &c, 1, 0), 2 * 512 * 8 * 16);
	assert_int_equal(sm->prune(&sk, &c, 132, why, sizeof(why)), 0);
}

/* A config of the op's family called `family` from its text. */
static struct ktune_config family_config(const struct ktune_op *op, const char *family, const char *text)
{
	struct ktune_config c;
	struct ktune_err e;
	if (ktune__op_config_parse(op, family, text, &c, &e))
		fail_msg("%s", e.msg);
	return c;
}

/*
 * cross_entropy_stream: its default (a cluster a row fused, up to 4096
 * vectors a block kept in shared memory; one block a row otherwise), the
 * prune (RELOAD fused alone and where the chunk fits, registers, no block
 * of more threads than vectors), and the launch: a cluster a row, the
 * chunk's bytes of dynamic shared memory passed as keep_bytes, 0 where the
 * call's chunk does not fit (the kernel then reads global memory again).
 */
static void test_ops__cross_entropy_stream(void **state)
{
	const struct ktune_op *ce = ktune__op_find("cross_entropy");
	const char *fused[] = { "fused", "mean", "off", "off" }, *fwd[] = { "fwd", "mean", "off", "off" };
	struct ktune_key key = { .op = "cross_entropy", .dtype = KTUNE_BF16, .m = 8192, .n = 131072, .aligned = 1 };
	struct ktune_op_step steps[KTUNE_OP_MAX_KERNELS];
	char why[200];
	(void)state;
	assert_int_equal(ktune__op_variant_set(ce, &key, fused, NULL), 0);
	struct ktune_config d = ce->default_config(&key, 132);
	assert_string_equal(ce->families[d.family].name, "cross_entropy_stream");
	assert_int_equal(ktune__op_param(ce, &d, "CLUSTER", 0), 4); /* 16384 vectors: 4096 a block */
	assert_int_equal(ktune__op_param(ce, &d, "RELOAD", 0), 2); /* the first read a cp.async into the chunk */
	assert_int_equal(ktune__op_param(ce, &d, "UNROLL", 0), 2);
	assert_int_equal(ce->prune(&key, &d, 132, why, sizeof(why)), 0);
	assert_int_equal(ktune__op_variant_set(ce, &key, fwd, NULL), 0);
	d = ce->default_config(&key, 132);
	assert_int_equal(ktune__op_param(ce, &d, "CLUSTER", 0), 1);
	assert_int_equal(ktune__op_param(ce, &d, "RELOAD", 0), 0);
	assert_int_equal(ktune__op_param(ce, &d, "UNROLL", 0), 4);
	/* fused past what 8 blocks' shared memory holds: still streamed, the second read from global memory */
	key.n = 1048576;
	assert_int_equal(ktune__op_variant_set(ce, &key, fused, NULL), 0);
	d = ce->default_config(&key, 132);
	assert_string_equal(ce->families[d.family].name, "cross_entropy_stream");
	assert_int_equal(ktune__op_param(ce, &d, "CLUSTER", 0), 8);
	assert_int_equal(ktune__op_param(ce, &d, "RELOAD", 0), 0);
	assert_int_equal(ce->prune(&key, &d, 132, why, sizeof(why)), 0);
	key.n = 131072;
	assert_int_equal(ktune__op_variant_set(ce, &key, fwd, NULL), 0);

	/* RELOAD: the fused pass's, and a chunk within shared memory */
	struct ktune_config c = family_config(ce, "cross_entropy_stream",
					      "THREADS=256,UNROLL=4,CLUSTER=1,RELOAD=1,MIN_WARPS=32");
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "RELOAD"));
	assert_int_equal(ktune__op_variant_set(ce, &key, fused, NULL), 0);
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 1); /* 256 KiB a block */
	assert_non_null(strstr(why, "shared memory"));
	c = family_config(ce, "cross_entropy_stream", "THREADS=256,UNROLL=4,CLUSTER=2,RELOAD=1,MIN_WARPS=32");
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 0); /* 128 KiB */
	/* RELOAD=2 (the first read a cp.async into the chunk) the same: fused, where the chunk fits */
	c = family_config(ce, "cross_entropy_stream", "THREADS=256,UNROLL=2,CLUSTER=4,RELOAD=2,MIN_WARPS=32");
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 0);
	assert_int_equal(ktune__op_variant_set(ce, &key, fwd, NULL), 0);
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "RELOAD"));
	assert_int_equal(ktune__op_variant_set(ce, &key, fused, NULL), 0);
	/* registers: the fused pass's 8 vectors at once need more than 64 warps leave */
	c = family_config(ce, "cross_entropy_stream", "THREADS=256,UNROLL=8,CLUSTER=2,RELOAD=1,MIN_WARPS=64");
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "registers"));
	/* 4096 columns: 512 vectors, fewer than 1024 threads */
	key.n = 4096;
	c = family_config(ce, "cross_entropy_stream", "THREADS=1024,UNROLL=2,CLUSTER=1,RELOAD=0,MIN_WARPS=32");
	assert_int_equal(ce->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "idle"));

	/* the launch: 8192 rows in clusters of 2 (mean: the count, then the rows, then the loss) */
	key.n = 131072;
	c = family_config(ce, "cross_entropy_stream", "THREADS=256,UNROLL=4,CLUSTER=2,RELOAD=1,MIN_WARPS=32");
	struct ktune_op_call call = { .size = { 8192, 131072 }, .ld = { 131072, 0, 0, 131072 }, .workspace = 4096 };
	int n = ce->steps(&key, &c, &call, 132, steps);
	assert_int_equal(n, 3);
	assert_int_equal(steps[1].entry, 0);
	assert_int_equal(steps[1].launch.grid[0], 2 * 8192);
	assert_int_equal(steps[1].launch.block[0], 256);
	assert_int_equal(steps[1].launch.smem, 8192 * 16);
	long long keep;
	memcpy(&keep, steps[1].args.argv[steps[1].args.n - 1], sizeof(keep));
	assert_int_equal(keep, 8192 * 16);
	/* a longer row through the same config (a neighbour's): 18750 vectors a block (293 KiB), nothing kept */
	call.size[1] = call.ld[0] = call.ld[3] = 300000;
	n = ce->steps(&key, &c, &call, 132, steps);
	assert_int_equal(steps[1].launch.smem, 0);
	memcpy(&keep, steps[1].args.argv[steps[1].args.n - 1], sizeof(keep));
	assert_int_equal(keep, 0);
}

/*
 * softmax_stream: the default for rows of 8192 vectors and more (a cluster
 * keeping a block's chunk within 4096 vectors; forward RELOAD 2, backward
 * global memory), the register family's below; the prune (aligned rows of
 * 1024 vectors or more, RELOAD 2 forward alone, a chunk within shared
 * memory, registers) and the launch (a cluster a row; the kept chunks'
 * bytes of dynamic shared memory, 0 where a longer call's do not fit).
 */
static void test_ops__softmax_stream(void **state)
{
	const struct ktune_op *sm = ktune__op_find("softmax");
	const char *fwd[] = { "fwd", NULL }, *bwd[] = { "bwd", NULL };
	struct ktune_key key = { .op = "softmax", .dtype = KTUNE_BF16, .m = 256, .n = 262144, .aligned = 1 };
	struct ktune_op_launch l;
	char why[200];
	(void)state;
	assert_int_equal(ktune__op_variant_set(sm, &key, fwd, NULL), 0);
	struct ktune_config d = sm->default_config(&key, 132);
	assert_string_equal(sm->families[d.family].name, "softmax_stream");
	assert_int_equal(ktune__op_param(sm, &d, "CLUSTER", 0), 8); /* 32768 vectors: 4096 a block */
	assert_int_equal(ktune__op_param(sm, &d, "RELOAD", 0), 2);
	assert_int_equal(ktune__op_param(sm, &d, "UNROLL", 0), 2);
	assert_int_equal(sm->prune(&key, &d, 132, why, sizeof(why)), 0);
	assert_int_equal(ktune__op_variant_set(sm, &key, bwd, NULL), 0);
	d = sm->default_config(&key, 132);
	assert_string_equal(sm->families[d.family].name, "softmax_stream");
	assert_int_equal(ktune__op_param(sm, &d, "RELOAD", 0), 0);
	assert_int_equal(ktune__op_param(sm, &d, "UNROLL", 0), 4);
	/* a million columns: 15625 vectors a block of 8, past shared memory: read again from global memory */
	key.n = 1000000;
	assert_int_equal(ktune__op_variant_set(sm, &key, fwd, NULL), 0);
	d = sm->default_config(&key, 132);
	assert_int_equal(ktune__op_param(sm, &d, "RELOAD", 0), 0);
	assert_int_equal(sm->prune(&key, &d, 132, why, sizeof(why)), 0);
	/* rows under 8192 vectors, or unaligned ones: the register family */
	key.n = 32768;
	d = sm->default_config(&key, 132);
	assert_string_equal(sm->families[d.family].name, "softmax");
	key.n = 262144;
	key.aligned = 0;
	d = sm->default_config(&key, 132);
	assert_string_equal(sm->families[d.family].name, "softmax");

	/* the prune */
	struct ktune_config c = family_config(sm, "softmax_stream", "THREADS=256,UNROLL=2,CLUSTER=8,RELOAD=2,MIN_WARPS=16");
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 1); /* unaligned */
	assert_non_null(strstr(why, "aligned"));
	key.aligned = 1;
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 0);
	key.n = 4096;
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 1); /* 512 vectors: held */
	assert_non_null(strstr(why, "held"));
	key.n = 262144;
	assert_int_equal(ktune__op_variant_set(sm, &key, bwd, NULL), 0);
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "forward"));
	c = family_config(sm, "softmax_stream", "THREADS=256,UNROLL=2,CLUSTER=1,RELOAD=1,MIN_WARPS=16");
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 1); /* 2 x 512 KiB */
	assert_non_null(strstr(why, "shared memory"));
	c = family_config(sm, "softmax_stream", "THREADS=1024,UNROLL=8,CLUSTER=8,RELOAD=0,MIN_WARPS=16");
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "registers"));

	/* the launch: 256 rows in clusters of 8, y's and dy's chunks kept (2 x 4096 vectors) */
	c = family_config(sm, "softmax_stream", "THREADS=512,UNROLL=2,CLUSTER=8,RELOAD=1,MIN_WARPS=16");
	assert_int_equal(sm->prune(&key, &c, 132, why, sizeof(why)), 0);
	struct ktune_op_call call = { .size = { 256, 262144 }, .ld = { 262144, 262144, 262144 } };
	sm->geometry(&key, &c, &call, 132, &l);
	assert_int_equal(l.block[0], 512);
	assert_int_equal(l.grid[0] % 8, 0);
	assert_int_equal(l.smem, 2 * 4096 * 16);
	call.size[1] = 524288; /* a longer row through the same config (a neighbour's): nothing kept */
	sm->geometry(&key, &c, &call, 132, &l);
	assert_int_equal(l.smem, 0);
}

/*
 * rmsnorm_stream: the forward passes' default for rows of 8192 vectors and
 * more (RELOAD 2 without the residual, 0 with it), the backward's and short
 * rows' the register family's; the prune (forward only, RELOAD 2 without
 * the residual) and the launch (h's chunk kept, 0 where it does not fit).
 */
static void test_ops__rmsnorm_stream(void **state)
{
	const struct ktune_op *op = ktune__op_find("rmsnorm");
	const char *fwd[] = { "fwd", NULL }, *res[] = { "fwd_residual", NULL }, *bwd[] = { "bwd", NULL };
	struct ktune_key key = { .op = "rmsnorm", .dtype = KTUNE_BF16, .m = 256, .n = 131072, .aligned = 1 };
	struct ktune_op_step steps[KTUNE_OP_MAX_KERNELS];
	char why[200];
	(void)state;
	assert_int_equal(ktune__op_variant_set(op, &key, fwd, NULL), 0);
	struct ktune_config d = op->default_config(&key, 132);
	assert_string_equal(op->families[d.family].name, "rmsnorm_stream");
	assert_int_equal(ktune__op_param(op, &d, "CLUSTER", 0), 4); /* 16384 vectors: 4096 a block */
	assert_int_equal(ktune__op_param(op, &d, "RELOAD", 0), 2);
	assert_int_equal(ktune__op_param(op, &d, "THREADS", 0), 512);
	assert_int_equal(ktune__op_variant_set(op, &key, res, NULL), 0);
	d = op->default_config(&key, 132);
	assert_int_equal(ktune__op_param(op, &d, "RELOAD", 0), 0);
	assert_int_equal(ktune__op_param(op, &d, "CLUSTER", 0), 2); /* read from global memory: chunks of 8192 */
	assert_int_equal(op->prune(&key, &d, 132, why, sizeof(why)), 0);
	struct ktune_config c = family_config(op, "rmsnorm_stream", "THREADS=256,UNROLL=2,CLUSTER=4,RELOAD=2,MIN_WARPS=16");
	assert_int_equal(op->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "residual"));
	assert_int_equal(ktune__op_variant_set(op, &key, bwd, NULL), 0);
	d = op->default_config(&key, 132);
	assert_string_equal(op->families[d.family].name, "rmsnorm");
	c = family_config(op, "rmsnorm_stream", "THREADS=256,UNROLL=2,CLUSTER=4,RELOAD=1,MIN_WARPS=16");
	assert_int_equal(op->prune(&key, &c, 132, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "forward only"));
	key.n = 32768; /* 4096 vectors: held by default */
	assert_int_equal(ktune__op_variant_set(op, &key, fwd, NULL), 0);
	d = op->default_config(&key, 132);
	assert_string_equal(op->families[d.family].name, "rmsnorm");

	/* the launch: 256 rows of 32768 in clusters of 4, a block's 1024 vectors of h kept; a longer call's not */
	assert_int_equal(op->prune(&key, &c, 132, why, sizeof(why)), 0);
	struct ktune_op_call call = { .size = { 256, 32768 }, .ld = { 32768, 0, 32768, 0 }, .scalar = { 1e-5 } };
	assert_int_equal(op->steps(&key, &c, &call, 132, steps), 1);
	assert_int_equal(steps[0].entry, 0);
	assert_int_equal(steps[0].launch.block[0], 256);
	assert_int_equal(steps[0].launch.grid[0] % 4, 0);
	assert_int_equal(steps[0].launch.smem, 1024 * 16);
	call.size[1] = 131072 * 8;
	op->steps(&key, &c, &call, 132, steps);
	assert_int_equal(steps[0].launch.smem, 0);
}

/*
 * The deterministic backward's slices: SPLITS, doubled at launch while the
 * grid (slices x K/V heads) would fill under half the SMs, to the key
 * blocks; the workspace follows.
 */
static void test_ops__attention_det_slices(void **state)
{
	const struct ktune_op *op = ktune__op_find("attention");
	const char *det[] = { "bwd_det", "128", "none", "1", NULL, NULL, NULL };
	struct ktune_key key = sample_key(op);
	struct ktune_op_step steps[KTUNE_OP_MAX_KERNELS];
	struct ktune_config c;
	struct ktune_err e;
	(void)state;
	assert_int_equal(ktune__op_variant_set(op, &key, det, NULL), KTUNE_OK);
	assert_int_equal(ktune__op_config_parse(op, "attention_wgmma_bwd",
						"BLOCK_M=64,CONSUMERS=2,STAGES=2,SPLITS=2,STAGING=1,OVERLAP=0", &c, &e),
			 KTUNE_OK);
	static const struct {
		int64_t sk, bh, slices;
	} cases[] = {
		{ 4096, 64, 2 },   /* as tuned: 128 blocks */
		{ 4096, 256, 2 },  /* never lowered */
		{ 16384, 16, 8 },  /* 32 blocks raised to 128 */
		{ 16384, 32, 4 },
		{ 384, 4, 3 },     /* to the key blocks (128 keys each) */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ktune_op_call call = { .size = { 1024, cases[i].sk, cases[i].bh } };
		assert_int_equal(op->steps(&key, &c, &call, 132, steps), 3);
		assert_int_equal(steps[1].launch.grid[0], cases[i].slices);
		assert_int_equal(steps[1].launch.grid[1], cases[i].bh);
		/* lse2, delta and a slice of dQ accumulators (D = 128) per row */
		assert_int_equal(op->workspace(&key, &c, &call, 132),
				 (size_t)(2 + cases[i].slices * 128) * (size_t)(cases[i].bh * 1024) * sizeof(float));
	}
}

static void test_ops__family_of_one_arch(void **state)
{
	const struct ktune_op *op = ktune__op_find("attention");
	int wg = ktune__op_family_index(op, "attention_wgmma");
	struct ktune_key fwd = sample_key(op), bwd;
	const char *fwd_values[] = { "fwd", "128", "causal", "1", NULL, NULL, NULL };
	const char *bwd_values[] = { "bwd", "128", "causal", "1", NULL, NULL, NULL };
	struct ktune_config *cfgs;
	struct ktune_err e;
	int n, with[2] = { 0, 0 };
	(void)state;
	assert_true(wg >= 0);
	assert_int_equal(ktune__op_variant_set(op, &fwd, fwd_values, NULL), KTUNE_OK);
	bwd = fwd;
	assert_int_equal(ktune__op_variant_set(op, &bwd, bwd_values, NULL), KTUNE_OK);

	assert_true(ktune__op_family_runs(op, wg, "sm_90"));
	assert_true(ktune__op_family_runs(op, wg, "sm_90a"));
	assert_true(ktune__op_family_runs(op, wg, NULL));
	assert_false(ktune__op_family_runs(op, wg, "sm_80"));
	assert_false(ktune__op_family_runs(op, wg, "sm_100"));
	assert_false(ktune__op_family_runs(op, wg, "sm_9"));
	assert_true(ktune__op_family_runs(op, 0, "sm_80"));
	assert_string_equal(ktune__op_compile_arch(op, wg, "sm_90"), "sm_90a");
	assert_string_equal(ktune__op_compile_arch(op, 0, "sm_90"), "sm_90");

	/* candidates: the forward on sm_90 has both families, on sm_80 the mma.sync one; the backward never has it */
	static const char *const archs[] = { "sm_90", "sm_80" };
	for (int a = 0; a < 2; a++) {
		assert_int_equal(ktune__op_candidates(op, &fwd, archs[a], 132, 0, 1, &cfgs, &n, NULL, &e), KTUNE_OK);
		for (int i = 0; i < n; i++)
			with[a] += cfgs[i].family == wg;
		free(cfgs);
	}
	assert_true(with[0] >= 10);
	assert_int_equal(with[1], 0);
	assert_int_equal(ktune__op_candidates(op, &bwd, "sm_90", 132, 0, 1, &cfgs, &n, NULL, &e), KTUNE_OK);
	for (int i = 0; i < n; i++)
		assert_int_not_equal(cfgs[i].family, wg);
	free(cfgs);

	/* its config text round trip; its defines; no compile for another arch (refused before NVRTC) */
	struct ktune_config c, back;
	char text[256], defines[KTUNE_OP_MAX_DEFINES][48];
	assert_int_equal(ktune__op_config_parse(op, "attention_wgmma", "BLOCK_N=128,STAGES=2,CONSUMERS=2,OVERLAP=1", &c,
						&e), KTUNE_OK);
	assert_int_equal(c.family, wg);
	assert_int_equal(ktune__op_config_format(op, &c, text, sizeof(text)), 0);
	assert_string_equal(text, "BLOCK_N=128,STAGES=2,CONSUMERS=2,OVERLAP=1");
	assert_int_equal(ktune__op_config_parse(op, "attention_wgmma", text, &back, &e), KTUNE_OK);
	assert_memory_equal(&c, &back, sizeof(c));
	assert_int_equal(op->defines(&fwd, &c, defines, KTUNE_OP_MAX_DEFINES), 7);
	assert_string_equal(defines[5], "-DCONSUMERS=2");
	assert_int_equal(op->defines(&bwd, &c, defines, KTUNE_OP_MAX_DEFINES), -1);
	char why[160];
	assert_int_equal(op->prune(&fwd, &c, 132, why, sizeof(why)), 0);
	assert_int_equal(op->prune(&bwd, &c, 132, why, sizeof(why)), 1);
	struct ktune_cubin cubin;
	assert_int_equal(ktune__kernel_compile(&fwd, &c, "sm_80", "", &cubin, &e), KTUNE_ERR_UNSUPPORTED);
	assert_non_null(strstr(e.msg, "sm_90a only"));

	/* an export entry of it tuned on another arch is refused */
	struct ktune_result r = sample_result(op, &fwd);
	struct ktune_share share;
	char *yaml;
	size_t len;
	snprintf(r.family, sizeof(r.family), "attention_wgmma");
	snprintf(r.config, sizeof(r.config), "%s", text);
	snprintf(r.template_hash, sizeof(r.template_hash), "%s", ktune__op_family_hash(op, wg));
	assert_int_equal(ktune__share_write(&r, 1, &yaml, &len, &e), KTUNE_OK);
	assert_int_equal(ktune__share_parse(yaml, len, "t.yaml", &share, &e), KTUNE_OK);
	ktune__share_free(&share);
	free(yaml);
	snprintf(r.device.arch, sizeof(r.device.arch), "sm_80");
	assert_int_equal(ktune__share_write(&r, 1, &yaml, &len, &e), KTUNE_OK);
	assert_int_not_equal(ktune__share_parse(yaml, len, "t.yaml", &share, &e), KTUNE_OK);
	if (!strstr(e.msg, "family 'attention_wgmma' runs on sm_90a only, not 'sm_80'"))
		fail_msg("message '%s'", e.msg);
	free(yaml);
}

/* The generic tune loop, through the fake worker: a result of the op's family, with the copy as baseline. */
/*
 * A key nobody tuned is served by its op's default (dispatch's last
 * resort): for sizes from 1 to 2^26 elements, in both alignment classes,
 * it is in the space and its op's prune keeps it; an elementwise op gives
 * a key too small to fill the GPU smaller blocks than a large one.
 */
static void test_ops__defaults_fit_every_size(void **state)
{
	static const int64_t sizes[] = { 1, 7, 100, 4096, 65537, 1 << 20, 1 << 26 };
	struct ktune_err e;
	(void)state;
	for (int i = 0; ktune__ops[i]; i++) {
		const struct ktune_op *op = ktune__ops[i];
		if (ktune__op_is_gemm(op))
			continue;
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			for (int aligned = 0; aligned <= 1; aligned++) {
				struct ktune_key key = sample_key(op);
				struct ktune_config def, back;
				char text[256], why[160];
				key.aligned = aligned;
				/* the sizes: the first of the op's size fields takes the size, the others 1024 */
				for (int f = 0, first = 1; f < op->nfields; f++)
					if (op->fields[f].dim >= 0) {
						*ktune__key_dim(&key, op->fields[f].dim) = first ? sizes[s] : 1024;
						first = 0;
					}
				if (op->key_check && op->key_check(&key, &e))
					continue; /* a size the op refuses (a row longer than it takes) */
				if (op->key_bucket)
					op->key_bucket(&key);
				def = op->default_config(&key, 132);
				assert_int_equal(ktune__op_config_format(op, &def, text, sizeof(text)), 0);
				if (ktune__op_config_parse(op, op->families[def.family].name, text, &back, &e))
					fail_msg("%s default %s: %s", op->name, text, e.msg);
				if (op->prune(&key, &def, 132, why, sizeof(why)))
					fail_msg("%s %lld aligned %d: default %s: %s", op->name, (long long)sizes[s],
						 aligned, text, why);
			}
	}
	const struct ktune_op *add = ktune__op_find("add");
	struct ktune_key small = { .op = "add", .dtype = KTUNE_BF16, .m = 4096, .aligned = 1 };
	struct ktune_key large = { .op = "add", .dtype = KTUNE_BF16, .m = 1 << 26, .aligned = 1 };
	struct ktune_config a = add->default_config(&small, 132), b = add->default_config(&large, 132);
	assert_true(ktune__op_param(add, &a, "THREADS", 0) * ktune__op_param(add, &a, "UNROLL", 0) <
		    ktune__op_param(add, &b, "THREADS", 0) * ktune__op_param(add, &b, "UNROLL", 0));
	/* the streaming hint for 8 MiB, not for 128 MiB */
	struct ktune_key mid = { .op = "add", .dtype = KTUNE_BF16, .m = 1 << 22, .aligned = 1 };
	struct ktune_config c = add->default_config(&mid, 132);
	assert_int_equal(ktune__op_param(add, &c, "CACHE", -1), 1);
	assert_int_equal(ktune__op_param(add, &b, "CACHE", -1), 0);
}

/* Attention's rate is TFLOP/s like GEMM's; a row-wise or elementwise op's GB/s. */
static void test_ops__compute_bound(void **state)
{
	(void)state;
	for (int i = 0; ktune__ops[i]; i++) {
		const struct ktune_op *op = ktune__ops[i];
		struct ktune_key key = sample_key(op);
		if (ktune__op_is_gemm(op) || !strcmp(op->name, "attention"))
			assert_true(ktune__op_compute_bound(op, &key));
		else if (!strcmp(op->name, "softmax") || !strcmp(op->name, "add") || !strcmp(op->name, "cross_entropy"))
			assert_false(ktune__op_compute_bound(op, &key));
	}
}

static void test_ops__tuned_through_the_worker(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_key key = { .op = "gelu", .dtype = KTUNE_BF16, .variant = "tanh,fwd", .m = 1 << 20, .aligned = 1 };
	struct ktune_tune_options o = { .budget = 24, .seed = 3, .finalists = 3, .jobs = 2, .timeout_s = 5 };
	struct ktune_tuner *tuner;
	struct ktune_tune_report r;
	struct ktune_err e;
	const struct ktune_op *op = ktune__op_find("gelu");
	struct ktune_config c;

	assert_int_equal(ktune__tuner_open(t->db, 0, test_program("fake-worker"), &tuner, &e), KTUNE_OK);
	if (ktune__tune_key(tuner, &key, &o, &r, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(r.ok, 24);
	assert_string_equal(r.result.family, "gelu");
	assert_string_equal(r.result.template_hash, ktune__op_family_hash(op, 0));
	assert_int_equal(ktune__op_config_parse(op, "gelu", r.result.config, &c, &e), KTUNE_OK);
	assert_true(r.has_cublas && r.result.cublas_us > 0); /* the baseline: the fake's copy */
	/* the fake's fastest: the largest VEC, then the smallest UNROLL (fake-worker.c) */
	assert_int_equal(ktune__op_param(op, &c, "VEC", 0), 8);
	struct ktune_check check;
	assert_int_equal(ktune__verify_result(tuner, &r.result, 5, &check, &e), KTUNE_OK);
	assert_true(check.pass);
	ktune__tuner_close(tuner);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ops__table),
		cmocka_unit_test_setup_teardown(test_ops__key_round_trip, setup, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_ops__bad_keys_are_refused, setup, test_scratch_teardown),
		cmocka_unit_test(test_ops__bad_export_entries_are_refused),
		cmocka_unit_test(test_ops__spec_sections),
		cmocka_unit_test(test_ops__config_texts),
		cmocka_unit_test(test_ops__candidates_and_defaults),
		cmocka_unit_test(test_ops__unaligned_rows_shift),
		cmocka_unit_test(test_ops__ring_in_shared_memory),
		cmocka_unit_test(test_ops__cross_entropy_stream),
		cmocka_unit_test(test_ops__softmax_stream),
		cmocka_unit_test(test_ops__rmsnorm_stream),
		cmocka_unit_test(test_ops__attention_det_slices),
		cmocka_unit_test(test_ops__family_of_one_arch),
		cmocka_unit_test(test_ops__defaults_fit_every_size),
		cmocka_unit_test(test_ops__compute_bound),
		cmocka_unit_test_setup_teardown(test_ops__tuned_through_the_worker, setup, test_scratch_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
