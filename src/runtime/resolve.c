/*
 * resolve.c - a key to its config and loaded kernel (or to cuBLAS), once:
 * the runtime's hash table of resolved keys, which every call of every op
 * looks up.
 *
 * The hot path for a key seen before is one hash and one comparison under
 * the context's lock (and, for a key served without a tuned entry, one
 * relaxed atomic add to its count: record.h).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"

unsigned ktune__resolve_bucket(const struct ktune_key *k)
{
	uint64_t h = 1469598103934665603ull;
	uint64_t parts[4] = { (uint64_t)k->m, (uint64_t)k->n, (uint64_t)k->k,
			      ((uint64_t)k->dtype << 8) | (uint64_t)k->aligned };
	for (int i = 0; i < 4; i++) {
		h ^= parts[i];
		h *= 1099511628211ull;
		h ^= h >> 29;
	}
	/* the op and the variant: a GeLU and an add of the same n are different keys */
	for (const char *s = k->op; *s && s < k->op + sizeof(k->op); s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	for (const char *s = k->variant; *s && s < k->variant + sizeof(k->variant); s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (unsigned)(h % KTUNE_RESOLVED_BUCKETS);
}

void ktune__resolve_retire(ktune_ctx *ctx, const struct ktune_key *key)
{
	for (struct ktune_resolved **p = &ctx->resolved[ktune__resolve_bucket(key)]; *p; p = &(*p)->next)
		if (ktune__key_same(&(*p)->key, key)) {
			struct ktune_resolved *r = *p;
			*p = r->next;
			r->next = ctx->retired;
			ctx->retired = r;
			ctx->keys--;
			return;
		}
}

void ktune__resolved_free(ktune_ctx *ctx)
{
	struct ktune_resolved **lists[KTUNE_RESOLVED_BUCKETS + 1];
	for (int i = 0; i < KTUNE_RESOLVED_BUCKETS; i++)
		lists[i] = &ctx->resolved[i];
	lists[KTUNE_RESOLVED_BUCKETS] = &ctx->retired;
	for (int i = 0; i <= KTUNE_RESOLVED_BUCKETS; i++) {
		for (struct ktune_resolved *r = *lists[i], *next; r; r = next) {
			next = r->next;
			ktune__race_free(r->race);
			free(r);
		}
		*lists[i] = NULL;
	}
}

int ktune__resolve(ktune_ctx *ctx, const struct ktune_key *key, struct ktune_resolved **out,
		   struct ktune_err *e)
{
	unsigned h = ktune__resolve_bucket(key);
	struct ktune_resolved *r;

	ctx->calls++;
	for (r = ctx->resolved[h]; r; r = r->next)
		if (ktune__key_same(&r->key, key)) {
			if (r->miss)
				ktune__record_count(r->miss);
			*out = r;
			return KTUNE_OK;
		}
	r = calloc(1, sizeof(*r));
	if (!r)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	r->key = *key;
	struct ktune_choice c;
	ktune__dispatch_decide(ctx, key, &c);
	if (!strcmp(c.source, KTUNE_SRC_CUBLAS) && !ktune__ctx_blas(ctx))
		ktune__dispatch_decide(ctx, key, &c); /* cuBLAS did not load (blas_state is -1 now): without it */
	r->cfg = c.cfg;
	r->source = c.source;
	r->own = c.own;
	/*
	 * A key ktune's kernel serves without a tuned entry of its own (the
	 * model's pick, a neighbour's config) is timed against cuBLAS at its
	 * first call, without waiting (fallback.c); under KTUNE_FALLBACK=measure
	 * a key decided for cuBLAS is too, which needs ktune's kernel compiled.
	 */
	int blas = !strcmp(c.source, KTUNE_SRC_CUBLAS);
	int own = !strcmp(c.source, KTUNE_SRC_NEAREST) || !strcmp(c.source, KTUNE_SRC_MODEL);
	if (!strcmp(key->op, "gemm") &&
	    ((ctx->fallback == KTUNE_FALLBACK_AUTO && own) ||
	     (ctx->fallback == KTUNE_FALLBACK_MEASURE && (own || blas))) &&
	    ktune__ctx_blas(ctx))
		r->measure = KTUNE_MEASURE_PENDING;
	if (!blas || r->measure) {
		int rc = ktune__kernel_get(ctx, key, &r->cfg, NULL, &r->kernel, e);
		if (rc) {
			free(r);
			return rc;
		}
	}
	/*
	 * A key without a tuned entry of its own (served by a neighbour, the
	 * model, cuBLAS or a default) is counted once here, so that it can be
	 * saved and tuned; a tuned key that cuBLAS serves because it measured
	 * faster is no miss: tuning it again would change nothing.
	 */
	if (!ktune__source_tuned(c.own)) {
		r->miss = ktune__record_note(&ctx->record, key, r->source);
		ktune__bg_enqueue(ctx, key); /* KTUNE_TUNE=background: tuned beside the caller */
	}
	ctx->keys++;
	r->next = ctx->resolved[h];
	ctx->resolved[h] = r;
	*out = r;
	return KTUNE_OK;
}
