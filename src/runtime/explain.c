/*
 * explain.c - how a context on a device would serve a key, for ktune
 * explain, without the device: an offline context (context.c) loads the
 * same entries ktune_open would, the chain's tuned entries for the key are
 * listed, and dispatch itself is asked what it would choose (the source
 * that serves, cuBLAS included, and where ktune's config came from), so
 * that the answer follows dispatch.c's order and fallbacks whatever they
 * become.
 */
#include <stdio.h>
#include <string.h>

#include "db/share.h"
#include "runtime/context.h"
#include "runtime/device.h"
#include "templates.h"

static void config_text(const struct ktune_key *key, const struct ktune_config *c, char *buf, size_t len)
{
	const struct ktune_op *op = ktune__op_of(key);
	if (op && !ktune__op_is_gemm(op))
		ktune__op_config_format(op, c, buf, len);
	else
		ktune__gemm_config_format(c, buf, len);
}

int ktune__dispatch_explain(const struct ktune_device_info *dev, const char *db_path, const struct ktune_key *key,
			    struct ktune_dispatch_explain *out, struct ktune_err *e)
{
	static const char *const sources[3] = { "exact", "arch", "shipped" };
	const struct ktune_op *op = ktune__op_of(key);
	struct ktune_choice c;
	ktune_ctx *ctx;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!op)
		return ktune__fail(e, KTUNE_ERR_INVALID, "op '%.16s' is not one of %s", key->op, ktune__op_names());
	if ((rc = ktune__ctx_offline(&dev->id, dev->smem_optin, db_path, &ctx, e)))
		return rc;
	ctx->mem_gbps = dev->mem_gbps; /* the GEMM model's; 0: its arch's */
	for (int s = 0; s < 3; s++)
		snprintf(out->steps[s].source, sizeof(out->steps[s].source), "%s", sources[s]);
	for (int i = 0; i < ctx->nentries; i++) {
		const struct ktune_entry *ent = &ctx->entries[i];
		if (!ktune__key_same(&ent->key, key))
			continue;
		int s = ent->shipped ? 2 : ent->same_device ? 0 : 1;
		/* of several shipped files, the one tuned on this GPU is dispatch's */
		if (out->steps[s].found && !(s == 2 && ent->same_device))
			continue;
		out->steps[s].found = 1;
		config_text(&ent->key, &ent->cfg, out->steps[s].config, sizeof(out->steps[s].config));
	}
	ktune__dispatch_decide(ctx, key, &c);
	snprintf(out->source, sizeof(out->source), "%s", c.source ? c.source : "?");
	snprintf(out->own, sizeof(out->own), "%s", c.own ? c.own : out->source);
	config_text(key, &c.cfg, out->config, sizeof(out->config));
	/* a tuned entry is dispatch's even where cuBLAS serves the key instead (it measured faster) */
	for (int s = 0; s < 3; s++)
		out->steps[s].used = out->steps[s].found && !strcmp(out->own, sources[s]) &&
				     !strcmp(out->steps[s].config, out->config);
	if (!strcmp(out->own, KTUNE_SRC_NEAREST) && c.near) {
		out->from = c.near->key;
		out->borrowed = 1;
		config_text(&c.near->key, &c.near->cfg, out->from_config, sizeof(out->from_config));
	}
	out->sources.from_device = ctx->from_device;
	out->sources.from_arch = ctx->from_arch;
	out->sources.from_shipped = ctx->from_shipped;
	for (int i = 0; i < ctx->nentries; i++)
		out->sources.shipped_here += ctx->entries[i].shipped && ctx->entries[i].same_device;
	snprintf(out->sources.shipped_names, sizeof(out->sources.shipped_names), "%s", ctx->shipped_names);
	ktune_close(ctx);
	return KTUNE_OK;
}

int ktune__shipped_devices(int (*fn)(const struct ktune_device_id *d, void *arg), void *arg)
{
	struct ktune_device_id seen[64];
	int nseen = 0, rc = 0;

	for (const struct ktune_template_file *f = ktune__shipped_files; f->name && !rc; f++) {
		struct ktune_share share;
		if (ktune__share_parse(f->text, f->len, f->name, &share, NULL))
			continue; /* ours and tested: dispatch skips such a file too */
		for (long i = 0; i < share.count && !rc; i++) {
			const struct ktune_device_id *d = &share.entries[i].device;
			int j;
			for (j = 0; j < nseen; j++)
				if (!strcmp(seen[j].name, d->name) && !strcmp(seen[j].arch, d->arch) &&
				    seen[j].sm_count == d->sm_count)
					break;
			if (j < nseen || nseen == 64)
				continue;
			seen[nseen++] = *d;
			rc = fn(d, arg);
		}
		ktune__share_free(&share);
	}
	return rc;
}
