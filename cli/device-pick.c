/*
 * device-pick.c - the GPU a command that needs none works for (explain,
 * warm): this GPU if there is one and no other is named, else a GPU the
 * database or the shipped tuning knows, else one described by --arch and
 * --sm-count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"


struct devices {
	struct ktune_device_id d[64];
	int n;
	const char *gpu, *arch; /* filters */
};

static int add_device(const struct ktune_device_id *d, void *arg)
{
	struct devices *s = arg;
	if ((s->gpu && !strstr(d->name, s->gpu)) || (s->arch && strcmp(d->arch, s->arch)))
		return 0;
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->d[i].name, d->name) && !strcmp(s->d[i].arch, d->arch) && s->d[i].sm_count == d->sm_count)
			return 0;
	if (s->n < 64)
		s->d[s->n++] = *d;
	return 0;
}

static int count_tuning(const struct ktune_tuning *t, void *arg)
{
	(void)t;
	(*(int *)arg)++;
	return 1; /* one is enough */
}

/* Whether the database holds anything of key on device d. */
static int knows_key(struct ktune_db *db, const struct ktune_device_id *d, const struct ktune_key *key)
{
	struct ktune_result r;
	struct ktune_err e;
	int n = 0;
	if (ktune__db_get_result(db, d, key, &r, &e) == 1)
		return 1;
	ktune__db_tunings(db, d, key, count_tuning, &n, &e);
	return n > 0;
}

int cli_pick_device(const char *name, struct cli *cli, const char *db_path, const char *gpu, const char *arch,
		    int sm_count, const struct ktune_key *key, struct ktune_device_info *out, const char **from)
{
	struct devices s = { .n = 0, .gpu = gpu, .arch = arch };
	struct ktune_err e;
	struct ktune_db *db = NULL;
	ktune_ctx *ctx;

	memset(out, 0, sizeof(*out));
	if (!gpu && !arch && !ktune__driver_load(&e) && !ktune_open("", cli->device, &ctx, e.msg, sizeof(e.msg))) {
		ktune__ctx_device_info(ctx, out);
		ktune_close(ctx);
		*from = "this GPU";
		return EXIT_OK;
	}
	if (!ktune__db_open_read(db_path, &db, &e))
		ktune__db_devices(db, add_device, &s, &e);
	int in_db = s.n;
	ktune__shipped_devices(add_device, &s);
	if (s.n > 1 && db && key) {
		int known = 0, which = 0;
		for (int i = 0; i < s.n; i++)
			if (knows_key(db, &s.d[i], key)) {
				known++;
				which = i;
			}
		if (known == 1) {
			s.d[0] = s.d[which];
			in_db = which < in_db;
			s.n = 1;
		}
	}
	ktune__db_close(db);
	if (s.n > 1) {
		fprintf(stderr, "ktune %s: %d GPUs match; choose one with --gpu NAME or --arch ARCH:\n", name, s.n);
		for (int i = 0; i < s.n; i++)
			fprintf(stderr, "  %s (%s, %d SMs)\n", s.d[i].name, s.d[i].arch, s.d[i].sm_count);
		return EXIT_USAGE;
	}
	if (s.n == 1) {
		out->id = s.d[0];
		*from = in_db ? "the database" : "the shipped tuning";
	} else if (arch && sm_count > 0) {
		snprintf(out->id.name, sizeof(out->id.name), "%s", gpu ? gpu : "");
		snprintf(out->id.arch, sizeof(out->id.arch), "%s", arch);
		out->id.sm_count = sm_count;
		*from = "--arch";
	} else {
		return cli_usage_error(name, "no GPU here%s%s%s%s: name one the database or the shipped tuning knows "
				       "(--gpu NAME, --arch ARCH), or give --arch and --sm-count",
				       gpu || arch ? " and none known matches" : "", gpu ? " --gpu " : "", gpu ? gpu : "",
				       arch ? " and --arch" : "");
	}
	if (sm_count > 0)
		out->id.sm_count = sm_count;
	out->smem_optin = ktune__arch_smem_optin(out->id.arch);
	return EXIT_OK;
}

