/*
 * dispatch.c - which configuration serves a key.
 *
 * At open, the tuned results of this device and of other devices of the
 * same arch are loaded from the database, and those of the tuning files
 * shipped inside the library for this arch (db/sm_90/h100.yaml); results of a
 * stale template are ignored.  A GEMM key then takes, in order:
 *
 *   1. its own tuned entry: from this device, another device of the arch,
 *      a shipped file (this GPU's first) -- unless that config measured
 *      below BLAS_BELOW of cuBLAS's speed and cuBLAS may serve;
 *   2. a tuned neighbour of the same regime: same dtype, layout, alignment
 *      class and M class, near in log M, N, K, kept by the key's prune, and
 *      not slower at this key by the model than the model's own pick by
 *      more than NEAR_SLACK (a config of another regime -- no split-K for a
 *      deep K, square tiles for a vocabulary-wide N -- runs several times
 *      slower, which is what borrowing by distance alone did);
 *   3. cuBLAS, where ktune has no good answer: the neighbour measured below
 *      BLAS_BELOW of cuBLAS, or the model's pick for the key's alignment
 *      class is far slower than for the aligned class (the element-load
 *      variant: odd leading dimensions), or KTUNE_FALLBACK=cublas;
 *   4. the model's pick from the families' spaces (ops/gemm-model.h).
 *
 * Entries of the wgmma family count only for aligned keys on sm_90 (TMA and
 * wgmma): for any other key they are skipped as if absent.
 *
 * The other ops' keys (bucketed by their op) go the same way without
 * cuBLAS: their own entry, a neighbour by the op's distance that the op's
 * prune keeps for the key, or the op's analytic default for the device's
 * arch (choose_op).
 *
 * The choice is a pure function of the key, the entries, the device's
 * figures and the policy; loading cuBLAS (resolve.c) is the only GPU work,
 * and a cuBLAS that does not load sends the key through the choice again.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/share.h"
#include "runtime/context.h"
#include "templates.h"

struct load_state {
	ktune_ctx *ctx;
	int cap;
	int failed;
};

static int same_device(const struct ktune_device_id *a, const struct ktune_device_id *b)
{
	return !strcmp(a->name, b->name) && !strcmp(a->arch, b->arch) && a->sm_count == b->sm_count;
}

static int add_entry_from(struct load_state *st, const struct ktune_result *r, int shipped)
{
	ktune_ctx *ctx = st->ctx;
	struct ktune_entry ent = { .key = r->key, .shipped = shipped };

	const struct ktune_op *op = ktune__op_of(&r->key);
	if (!op || strcmp(r->device.arch, ctx->id.arch))
		return 0;
	if (!ktune__op_is_gemm(op)) {
		/* stale (tuned for another version of its family's template), or not in its space */
		if (!ktune__op_result_fresh(op, r->family, r->template_hash) ||
		    ktune__op_config_parse(op, r->family, r->config, &ent.cfg, NULL))
			return 0;
		if (!ktune__op_family_runs(op, ent.cfg.family, ctx->id.arch))
			return 0; /* a family of another arch (sm_90a): never usable here */
	} else {
		if (!ktune__gemm_result_fresh(r->family, r->template_hash))
			return 0;
		if (ktune__gemm_config_parse(r->config, &ent.cfg, NULL) ||
		    !ktune__gemm_config_admitted(&ent.cfg, NULL) ||
		    ktune__gemm_family_from_name(r->family) != ent.cfg.family)
			return 0;
		if (!ktune__gemm_family_runs(ent.cfg.family, ctx->id.arch, 1))
			return 0; /* a wgmma entry on a device without wgmma: never usable */
	}
	ent.same_device = same_device(&r->device, &ctx->id);
	if (ktune__op_is_gemm(op) && r->cublas_us > 0 && r->time_us > 0)
		ent.ratio = r->cublas_us / r->time_us; /* measured in turns with cuBLAS where it was tuned */
	if (shipped)
		ctx->from_shipped++;
	else if (ent.same_device)
		ctx->from_device++;
	else
		ctx->from_arch++;
	if (ctx->nentries == st->cap) {
		int cap = st->cap ? 2 * st->cap : 256;
		struct ktune_entry *grown = realloc(ctx->entries, (size_t)cap * sizeof(*grown));
		if (!grown) {
			st->failed = 1;
			return 1;
		}
		ctx->entries = grown;
		st->cap = cap;
	}
	ctx->entries[ctx->nentries++] = ent;
	return 0;
}

static int add_entry(const struct ktune_result *r, void *arg)
{
	return add_entry_from(arg, r, 0);
}

/*
 * The shipped files for this arch.  They are ours and tested, so one that
 * does not parse is a build defect, not the user's problem: it is skipped.
 */
static void load_shipped(ktune_ctx *ctx, struct load_state *st)
{
	size_t alen = strlen(ctx->id.arch);
	for (const struct ktune_template_file *f = ktune__shipped_files; f->name; f++) {
		struct ktune_share share;
		if (strncmp(f->name, ctx->id.arch, alen) || f->name[alen] != '/')
			continue;
		if (ktune__share_parse(f->text, f->len, f->name, &share, NULL))
			continue;
		int before = ctx->from_shipped;
		for (long i = 0; i < share.count && !st->failed; i++)
			if (!share.stale[i])
				add_entry_from(st, &share.entries[i], 1);
		ktune__share_free(&share);
		if (ctx->from_shipped > before) {
			size_t used = strlen(ctx->shipped_names);
			snprintf(ctx->shipped_names + used, sizeof(ctx->shipped_names) - used, "%s%s",
				 used ? ", " : "", f->name);
		}
	}
}

int ktune__dispatch_load(ktune_ctx *ctx, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	struct ktune_filter f = { 0 };
	struct load_state st = { ctx, 0, 0 };

	int rc = KTUNE_OK;
	/* "": no database, by request; a missing one is no error either */
	if (ctx->db_path[0] && (rc = ktune__db_open_read(ctx->db_path, &db, e)) != KTUNE_ERR_NOT_FOUND) {
		if (rc)
			return rc;
		snprintf(f.arch, sizeof(f.arch), "%s", ctx->id.arch);
		rc = ktune__db_query(db, &f, add_entry, &st, e);
		ktune__db_close(db);
		if (rc < 0)
			return rc;
	}
	if (!st.failed)
		load_shipped(ctx, &st);
	if (st.failed)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory loading tuned entries");
	return KTUNE_OK;
}

int ktune__dispatch_adopt(ktune_ctx *ctx, const struct ktune_result *r)
{
	struct load_state st = { ctx, ctx->nentries, 0 }; /* full: the entry grows the array by one */
	int before = ctx->nentries;
	add_entry_from(&st, r, 0);
	if (ctx->nentries == before)
		return 0;
	ktune__resolve_retire(ctx, &r->key); /* its next call resolves it again */
	return 1;
}

/* A tuned config measured below this share of cuBLAS's speed leaves its key to cuBLAS. */
#define BLAS_BELOW 0.95
/* Neighbours: squared distance in log M, N, K (2.0: a factor of 4 in one size), model slack */
#define NEAR_MAX 2.0
#define NEAR_SLACK 1.15
/* The alignment class costs more than this (and half a microsecond) against the aligned class: cuBLAS */
#define CLASS_SLACK 1.15

void ktune__ctx_model_device(const ktune_ctx *ctx, struct ktune_gemm_device *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->arch, sizeof(out->arch), "%s", ctx->id.arch);
	out->sm_count = ctx->id.sm_count;
	out->smem_optin = ctx->smem_optin;
	out->mem_gbps = ctx->mem_gbps;
}

static double log_distance(const struct ktune_key *a, const struct ktune_key *b)
{
	double dm = log((double)a->m) - log((double)b->m);
	double dn = log((double)a->n) - log((double)b->n);
	double dk = log((double)a->k) - log((double)b->k);
	return dm * dm + dn * dn + dk * dk;
}

/* cuBLAS may serve this context's keys: the policy allows it and it did not fail to load. */
static int blas_allowed(const ktune_ctx *ctx)
{
	return ctx->fallback != KTUNE_FALLBACK_MODEL && ctx->blas_state >= 0;
}

/*
 * Fits a config taken from another key or device to this key: split-K
 * lowered to what the key's tiles can use, stages lowered to the shared
 * memory of this layout and device.  -1 if it cannot fit.
 */
static int fit(const ktune_ctx *ctx, const struct ktune_key *key, struct ktune_config *cfg, int borrowed)
{
	if (borrowed)
		ktune__gemm_fit_split(key, cfg, ctx->id.sm_count);
	return ctx->smem_optin > 0 && ktune__gemm_fit_smem(key, cfg, ctx->smem_optin) ? -1 : 0;
}

/*
 * The best neighbour of the key's regime (step 2 above), or NULL.  `pick`
 * is the model's estimate of its own pick for the key.
 */
static const struct ktune_entry *neighbour(const ktune_ctx *ctx, const struct ktune_key *key,
					   const struct ktune_gemm_device *dev, double pick_us,
					   struct ktune_config *out)
{
	struct ktune_gemm_regime want, have;
	const struct ktune_entry *best = NULL;
	double best_d = INFINITY;
	char why[160];

	ktune__gemm_regime(key, dev, &want);
	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_entry *ent = &ctx->entries[i];
		if (strcmp(ent->key.op, "gemm") || ent->key.dtype != key->dtype ||
		    strcmp(ent->key.variant, key->variant) || ent->key.aligned != key->aligned ||
		    !ktune__gemm_family_runs(ent->cfg.family, ctx->id.arch, key->aligned))
			continue;
		/* at equal distance: this device, then the database, then shipped files */
		double d = log_distance(&ent->key, key) + (ent->same_device ? 0 : 1e-6) + (ent->shipped ? 2e-6 : 0);
		if (d > NEAR_MAX || d >= best_d)
			continue;
		ktune__gemm_regime(&ent->key, dev, &have);
		if (have.m_class != want.m_class || have.deep_k != want.deep_k)
			continue;
		struct ktune_config cfg = ent->cfg;
		struct ktune_gemm_estimate est;
		if (fit(ctx, key, &cfg, 1) ||
		    ktune__gemm_prune(key, &cfg, ctx->id.sm_count, ctx->smem_optin, why, sizeof(why)))
			continue;
		ktune__gemm_model(key, &cfg, dev, &est);
		if (est.time_us > NEAR_SLACK * pick_us)
			continue;
		best = ent;
		best_d = d;
		*out = cfg;
	}
	return best;
}

/*
 * Whether the key's alignment class leaves ktune no good answer: the
 * model's pick for it is far slower than its pick for the aligned class of
 * the same shape.  The unaligned class has only the element-load variant of
 * the mma.sync family, which waits out memory latency on every stage; a
 * key too small to notice (its launch dominates) keeps ktune's kernel.
 */
static int class_is_slow(const struct ktune_key *key, const struct ktune_gemm_device *dev, double pick_us)
{
	struct ktune_key aligned = *key;
	struct ktune_config cfg;
	struct ktune_gemm_estimate est;
	if (key->aligned)
		return 0;
	aligned.aligned = 1;
	if (ktune__gemm_model_pick(&aligned, dev, &cfg, &est))
		return 0;
	return pick_us > CLASS_SLACK * est.time_us + 0.5;
}

static void choose_gemm(ktune_ctx *ctx, const struct ktune_key *key, struct ktune_choice *out)
{
	struct ktune_config *cfg = &out->cfg;
	const char **source = &out->source;
	const struct ktune_entry *exact = NULL, *arch = NULL, *shipped = NULL;
	struct ktune_gemm_device dev;
	struct ktune_gemm_estimate pick;
	struct ktune_config borrowed;

	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_entry *ent = &ctx->entries[i];
		if (strcmp(ent->key.op, "gemm") || !ktune__key_same(&ent->key, key) ||
		    !ktune__gemm_family_runs(ent->cfg.family, ctx->id.arch, key->aligned))
			continue; /* wgmma for an unaligned key or a device other than sm_90 */
		if (ent->shipped)
			shipped = !shipped || (ent->same_device && !shipped->same_device) ? ent : shipped;
		else if (ent->same_device)
			exact = ent;
		else
			arch = ent;
	}
	const struct ktune_entry *own = exact ? exact : arch ? arch : shipped;
	if (own) {
		*cfg = own->cfg;
		/* another device, or another layout, may have had more shared memory to spend */
		if (!fit(ctx, key, cfg, 0)) {
			*source = own == exact ? KTUNE_SRC_EXACT : own == arch ? KTUNE_SRC_ARCH : KTUNE_SRC_SHIPPED;
			out->own = *source;
			if (own->ratio > 0 && own->ratio < BLAS_BELOW && blas_allowed(ctx))
				*source = KTUNE_SRC_CUBLAS;
			return;
		}
	}

	/* no tuned entry of its own (or none that fits this device) */
	ktune__ctx_model_device(ctx, &dev);
	if (ktune__gemm_model_pick(key, &dev, cfg, &pick)) {
		/* no admitted config survives pruning: the built-in default runs on any key */
		*cfg = ktune__gemm_default_config(key, ctx->id.sm_count);
		out->own = KTUNE_SRC_MODEL;
		*source = blas_allowed(ctx) ? KTUNE_SRC_CUBLAS : KTUNE_SRC_MODEL;
		return;
	}
	*source = KTUNE_SRC_MODEL;
	const struct ktune_entry *near = neighbour(ctx, key, &dev, pick.time_us, &borrowed);
	if (near) {
		*cfg = borrowed;
		*source = KTUNE_SRC_NEAREST;
		out->near = near;
	}
	out->own = *source;
	if (!blas_allowed(ctx))
		return;
	if (ctx->fallback == KTUNE_FALLBACK_CUBLAS ||
	    (near && near->ratio > 0 && near->ratio < BLAS_BELOW) ||
	    (!near && class_is_slow(key, &dev, pick.time_us)))
		*source = KTUNE_SRC_CUBLAS;
}

/*
 * An op's key (bucketed): its exact entry, another GPU's, a shipped one, the
 * nearest by the op's distance (same dtype and variant; the same alignment
 * class, since an aligned config's vectors do not serve an unaligned call)
 * that the op's prune keeps for this key, as it is or fitted by the op's
 * launch parameters (op->fit: a quantized GEMM's split) -- a config sized
 * for other rows (a row-wise op's registers, an elementwise op's grid cap)
 * is not borrowed -- or the op's default.
 */
static void choose_op(ktune_ctx *ctx, const struct ktune_op *op, const struct ktune_key *key,
		      struct ktune_choice *out)
{
	struct ktune_config *cfg = &out->cfg;
	const char **source = &out->source;
	const struct ktune_entry *exact = NULL, *arch = NULL, *shipped = NULL, *nearest = NULL;
	struct ktune_config near_cfg;
	double best = INFINITY;
	char why[160];

	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_entry *ent = &ctx->entries[i];
		if (strcmp(ent->key.op, key->op) || ent->key.dtype != key->dtype ||
		    strcmp(ent->key.variant, key->variant) || ent->key.aligned != key->aligned)
			continue;
		if (ktune__key_same(&ent->key, key)) {
			if (ent->shipped)
				shipped = !shipped || (ent->same_device && !shipped->same_device) ? ent : shipped;
			else if (ent->same_device)
				exact = ent;
			else
				arch = ent;
		}
		double d = op->distance(&ent->key, key) + (ent->same_device ? 0 : 1e-6) +
			   (ent->shipped ? 2e-6 : 0);
		if (d >= best)
			continue;
		struct ktune_config c = ent->cfg;
		if (op->prune && op->prune(key, &c, ctx->id.sm_count, why, sizeof(why)) &&
		    !(op->fit && op->fit(key, &c, ctx->id.sm_count)))
			continue;
		best = d;
		nearest = ent;
		near_cfg = c;
	}
	const struct ktune_entry *pick = exact ? exact : arch ? arch : shipped;
	*source = exact ? KTUNE_SRC_EXACT : arch ? KTUNE_SRC_ARCH : shipped ? KTUNE_SRC_SHIPPED
		: nearest ? KTUNE_SRC_NEAREST : KTUNE_SRC_DEFAULT;
	if (pick)
		*cfg = pick->cfg;
	else if (nearest) {
		*cfg = near_cfg;
		out->near = nearest;
	} else if (!op->arch_default || !op->arch_default(key, ctx->id.sm_count, ctx->id.arch, cfg))
		*cfg = op->default_config(key, ctx->id.sm_count);
	out->own = *source;
}

void ktune__dispatch_decide(ktune_ctx *ctx, const struct ktune_key *key, struct ktune_choice *out)
{
	const struct ktune_op *op = ktune__op_of(key);
	memset(out, 0, sizeof(*out));
	if (op && !ktune__op_is_gemm(op))
		choose_op(ctx, op, key, out);
	else
		choose_gemm(ctx, key, out);
}

void ktune__dispatch_choose(ktune_ctx *ctx, const struct ktune_key *key,
			    struct ktune_config *cfg, const char **source)
{
	struct ktune_choice c;
	ktune__dispatch_decide(ctx, key, &c);
	*cfg = c.cfg;
	*source = c.source;
}
