/*
 * dispatch.c - which configuration serves a key.
 *
 * At open, the tuned results of this device and of other devices of the
 * same arch are loaded from the database, and those of the tuning files
 * shipped inside the library for this arch (db/sm_90/h100.yaml); results of a
 * stale template are ignored.  A key then takes, in order: its exact entry
 * from this device, its entry from another device of the arch, its entry in
 * a shipped file, the nearest tuned key of the same dtype and layout
 * (distance in log M, log N, log K; the database before shipped files at
 * equal distance), or the built-in default.
 *
 * Entries of the wgmma family count only for aligned keys on sm_90 (TMA and
 * wgmma): for any other key they are skipped as if absent, so such a key
 * falls back to the next source, and in the end to the mma.sync default.
 *
 * The other ops' keys (bucketed by their op) go the same way, with the
 * op's own distance and default (choose_op).
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

static double log_distance(const struct ktune_key *a, const struct ktune_key *b)
{
	double dm = log((double)a->m) - log((double)b->m);
	double dn = log((double)a->n) - log((double)b->n);
	double dk = log((double)a->k) - log((double)b->k);
	/* a config tuned for the other alignment class is still a good shape guess */
	return dm * dm + dn * dn + dk * dk + (a->aligned != b->aligned ? 0.01 : 0);
}

/*
 * An op's key (bucketed): its exact entry, another GPU's, a shipped one, the
 * nearest by the op's distance (same dtype and variant; the same alignment
 * class, since an aligned config's vectors do not serve an unaligned call),
 * or the op's default.
 */
static void choose_op(ktune_ctx *ctx, const struct ktune_op *op, const struct ktune_key *key,
		      struct ktune_config *cfg, const char **source)
{
	const struct ktune_entry *exact = NULL, *arch = NULL, *shipped = NULL, *nearest = NULL;
	double best = INFINITY;

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
		if (d < best) {
			best = d;
			nearest = ent;
		}
	}
	const struct ktune_entry *pick = exact ? exact : arch ? arch : shipped ? shipped : nearest;
	*source = exact ? "exact" : arch ? "arch" : shipped ? "shipped" : nearest ? "nearest" : "default";
	if (pick) {
		*cfg = pick->cfg;
	} else {
		*cfg = op->default_config(key, ctx->id.sm_count);
	}
	if (!exact && !arch && !shipped)
		ctx->misses++;
}

void ktune__dispatch_choose(ktune_ctx *ctx, const struct ktune_key *key,
			    struct ktune_config *cfg, const char **source)
{
	const struct ktune_entry *arch = NULL, *shipped = NULL, *nearest = NULL;
	const struct ktune_op *op = ktune__op_of(key);
	double best = INFINITY;

	if (op && !ktune__op_is_gemm(op)) {
		choose_op(ctx, op, key, cfg, source);
		return;
	}
	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_entry *ent = &ctx->entries[i];
		if (strcmp(ent->key.op, "gemm"))
			continue;
		if (!ktune__gemm_family_runs(ent->cfg.family, ctx->id.arch, key->aligned))
			continue; /* wgmma for an unaligned key or a device other than sm_90 */
		if (ktune__key_same(&ent->key, key)) {
			if (ent->shipped) {
				if (!shipped || (ent->same_device && !shipped->same_device))
					shipped = ent;
			} else if (ent->same_device) {
				*cfg = ent->cfg;
				*source = "exact";
				goto fit;
			} else {
				arch = ent;
			}
		}
		if (ent->key.dtype != key->dtype || ent->key.variant[0] != key->variant[0] ||
		    ent->key.variant[1] != key->variant[1])
			continue;
		/* at equal distance: this device, then the database, then shipped files */
		double d = log_distance(&ent->key, key) + (ent->same_device ? 0 : 1e-6) +
			   (ent->shipped ? 2e-6 : 0);
		if (d < best) {
			best = d;
			nearest = ent;
		}
	}
	if (arch) {
		*cfg = arch->cfg;
		*source = "arch";
	} else if (shipped) {
		*cfg = shipped->cfg;
		*source = "shipped";
	} else if (nearest) {
		*cfg = nearest->cfg;
		*source = "nearest";
		ctx->misses++;
		ktune__gemm_fit_split(key, cfg, ctx->id.sm_count);
	} else {
		*cfg = ktune__gemm_default_config(key, ctx->id.sm_count);
		*source = "default";
		ctx->misses++;
	}
fit:
	/* another device, or another layout, may have had more shared memory to spend */
	if (ctx->smem_optin > 0 && ktune__gemm_fit_smem(key, cfg, ctx->smem_optin)) {
		*cfg = ktune__gemm_default_config(key, ctx->id.sm_count);
		*source = "default";
	}
}
