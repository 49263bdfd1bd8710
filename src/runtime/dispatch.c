/*
 * dispatch.c - which configuration serves a key.
 *
 * At open, the tuned results of this device and of other devices of the
 * same arch are loaded (results of a stale template are ignored).  A key
 * then takes, in order: its exact entry from this device, its entry from
 * another device of the arch, the nearest tuned key of the same dtype and
 * layout (distance in log M, log N, log K), or the built-in default.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/templates.h"

struct load_state {
	ktune_ctx *ctx;
	const char *hash;
	int cap;
	int failed;
};

static int same_device(const struct ktune_device_id *a, const struct ktune_device_id *b)
{
	return !strcmp(a->name, b->name) && !strcmp(a->arch, b->arch) && a->sm_count == b->sm_count;
}

static int add_entry(const struct ktune_result *r, void *arg)
{
	struct load_state *st = arg;
	ktune_ctx *ctx = st->ctx;
	struct ktune_entry ent = { .key = r->key };

	if (strcmp(r->template_hash, st->hash))
		return 0; /* stale: tuned for another version of the template */
	if (ktune__gemm_config_parse(r->config, &ent.cfg, NULL) ||
	    !ktune__gemm_config_admitted(&ent.cfg, NULL))
		return 0;
	ent.same_device = same_device(&r->device, &ctx->id);
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

int ktune__dispatch_load(ktune_ctx *ctx, struct ktune_err *e)
{
	struct ktune_db *db = NULL;
	struct ktune_filter f = { 0 };
	struct load_state st = { ctx, ktune__template_hash(KTUNE_GEMM_SOURCE), 0, 0 };

	if (!ctx->db_path[0])
		return KTUNE_OK; /* "": no database, by request */
	int rc = ktune__db_open(ctx->db_path, 0, &db, e);
	if (rc == KTUNE_ERR_NOT_FOUND)
		return KTUNE_OK; /* no database yet: defaults serve */
	if (rc)
		return rc;
	snprintf(f.arch, sizeof(f.arch), "%s", ctx->id.arch);
	snprintf(f.op, sizeof(f.op), "gemm");
	rc = ktune__db_query(db, &f, add_entry, &st, e);
	ktune__db_close(db);
	if (st.failed)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory loading '%s'", ctx->db_path);
	return rc < 0 ? rc : KTUNE_OK;
}

static int same_key(const struct ktune_key *a, const struct ktune_key *b)
{
	return a->dtype == b->dtype && a->trans_a == b->trans_a && a->trans_b == b->trans_b &&
	       a->m == b->m && a->n == b->n && a->k == b->k && a->aligned == b->aligned;
}

static double log_distance(const struct ktune_key *a, const struct ktune_key *b)
{
	double dm = log((double)a->m) - log((double)b->m);
	double dn = log((double)a->n) - log((double)b->n);
	double dk = log((double)a->k) - log((double)b->k);
	/* a config tuned for the other alignment class is still a good shape guess */
	return dm * dm + dn * dn + dk * dk + (a->aligned != b->aligned ? 0.01 : 0);
}

void ktune__dispatch_choose(ktune_ctx *ctx, const struct ktune_key *key,
			    struct ktune_gemm_config *cfg, const char **source)
{
	const struct ktune_entry *arch = NULL, *nearest = NULL;
	double best = INFINITY;

	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_entry *ent = &ctx->entries[i];
		if (same_key(&ent->key, key)) {
			if (ent->same_device) {
				*cfg = ent->cfg;
				*source = "exact";
				return;
			}
			arch = ent;
		}
		if (ent->key.dtype != key->dtype || ent->key.trans_a != key->trans_a ||
		    ent->key.trans_b != key->trans_b)
			continue;
		/* prefer this device's entries at equal distance */
		double d = log_distance(&ent->key, key) + (ent->same_device ? 0 : 1e-6);
		if (d < best) {
			best = d;
			nearest = ent;
		}
	}
	if (arch) {
		*cfg = arch->cfg;
		*source = "arch";
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
	/* another device, or another layout, may have had more shared memory to spend */
	if (ctx->smem_optin > 0 && ktune__gemm_fit_smem(key, cfg, ctx->smem_optin)) {
		*cfg = ktune__gemm_default_config(key, ctx->id.sm_count);
		*source = "default";
	}
}
