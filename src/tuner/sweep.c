/*
 * sweep.c - tuning every key of a spec: resumably (a key already tuned on
 * this device with the current template source is skipped unless forced),
 * on one or several GPUs (a thread and a worker per GPU), and side by side
 * with other sweeps on the same database: a key is claimed in the database
 * before it is tuned, so no two tune it at once, and a key claimed by
 * another sweep is waited for at the end rather than tuned twice.  Then
 * the group pick may put one config at related keys (ktune__group_pick).
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/op.h"
#include "templates.h"
#include "tuner/protocol.h"
#include "tuner/tuner.h"

/* What happened to a key in this sweep, best first when two threads disagree. */
enum key_state {
	KEY_NOT_RUN,
	KEY_CACHED,    /* tuned before this sweep began */
	KEY_ELSEWHERE, /* tuned meanwhile by another sweep */
	KEY_FAILED,
	KEY_TUNED,
};

static const char *state_name[] = { "not run", "cached", "elsewhere", "failed", "tuned" };

/* Seconds between looks at keys that other sweeps are tuning. */
#define WAIT_POLL_S 2

struct sweep {
	const char *db_path, *worker_exe;
	const struct ktune_spec *spec;
	struct ktune_tune_options opts;
	char hash[65]; /* ktune__gemm_space_hash: recorded with our claims */
	pthread_mutex_t lock; /* guards the arrays below */
	enum key_state *state;
	unsigned char *taken; /* a thread of this sweep has the key */
	struct ktune_result *results;
	int fatal;            /* a thread hit an error that stops the sweep */
	struct ktune_err err; /* the first such error */
};

struct gpu_thread {
	struct sweep *s;
	int device, multi;
	pthread_t tid;
	struct ktune_tune_options opts; /* the sweep's, with this GPU's progress prefix when multi */
	char prefix[24];                /* "[gpu N] " when multi */
};

static void set_state(struct sweep *s, int i, enum key_state st, const struct ktune_result *r)
{
	pthread_mutex_lock(&s->lock);
	if (st > s->state[i] || st == KEY_FAILED) {
		s->state[i] = st;
		if (r)
			s->results[i] = *r;
	}
	pthread_mutex_unlock(&s->lock);
}

/* Marks key i as this sweep's; 0 if another thread of this sweep has it already. */
static int take(struct sweep *s, int i)
{
	pthread_mutex_lock(&s->lock);
	int mine = !s->taken[i];
	s->taken[i] = 1;
	pthread_mutex_unlock(&s->lock);
	return mine;
}

static void say(struct gpu_thread *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct gpu_thread *g, const char *fmt, ...)
{
	FILE *to = g->s->opts.progress;
	char line[512];
	va_list ap;
	if (!to)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(to, "%s%s", g->prefix, line);
	fflush(to);
}

static int fatal_status(int rc)
{
	return rc == KTUNE_ERR_CUDA || rc == KTUNE_ERR_NOMEM || rc == KTUNE_ERR_DB;
}

static void stop_sweep(struct sweep *s, const struct ktune_err *e)
{
	pthread_mutex_lock(&s->lock);
	if (!s->fatal)
		s->err = *e;
	s->fatal = 1;
	pthread_mutex_unlock(&s->lock);
}

static int stopped(struct sweep *s)
{
	pthread_mutex_lock(&s->lock);
	int f = s->fatal;
	pthread_mutex_unlock(&s->lock);
	return f;
}

/*
 * Claims and tunes key i.  Returns 1 if another sweep holds it (come back
 * later), 0 when the key is settled, a negative status to stop.
 */
static int sweep_key(struct gpu_thread *g, struct ktune_tuner *t, const char *owner, int i,
		     int force, int waited)
{
	struct sweep *s = g->s;
	const struct ktune_key *key = &s->spec->keys[i];
	const struct ktune_device_id *dev = &ktune__tuner_device(t)->id;
	struct ktune_db *db = ktune__tuner_db(t);
	struct ktune_err ke = { "" };
	struct ktune_result stored;
	char text[128];

	ktune__key_format(key, text, sizeof(text));
	int rc = ktune__db_claim_key(db, dev, key, s->hash, owner, force, &ke);
	if (rc < 0) {
		fprintf(stderr, "ktune: %s\n", ke.msg);
		set_state(s, i, KEY_FAILED, NULL);
		return fatal_status(rc) ? rc : 0;
	}
	if (rc == KTUNE_CLAIM_BUSY)
		return 1;
	if (rc == KTUNE_CLAIM_DONE) {
		int found = ktune__db_get_result(db, dev, key, &stored, &ke);
		set_state(s, i, waited ? KEY_ELSEWHERE : KEY_CACHED, found == 1 ? &stored : NULL);
		say(g, "key %d/%d %s: already tuned\n", i + 1, s->spec->nkeys, text);
		return 0;
	}
	say(g, "key %d/%d %s\n", i + 1, s->spec->nkeys, text);
	struct ktune_tune_report rep;
	rc = ktune__tune_key(t, key, &g->opts, &rep, &ke);
	if (rc) {
		struct ktune_err re;
		ktune__db_release_key(db, dev, key, owner, &re); /* a failed key is not stored */
		set_state(s, i, KEY_FAILED, NULL);
		fprintf(stderr, "ktune: %s\n", ke.msg);
		if (fatal_status(rc)) {
			stop_sweep(s, &ke);
			return rc;
		}
		return 0;
	}
	set_state(s, i, KEY_TUNED, &rep.result);
	return 0;
}

static void *gpu_main(void *arg)
{
	struct gpu_thread *g = arg;
	struct sweep *s = g->s;
	struct ktune_tuner *t = NULL;
	struct ktune_err e = { "" };
	char owner[KTUNE_CLAIM_OWNER_MAX];
	int *later = calloc((size_t)s->spec->nkeys + 1, sizeof(*later));
	int nlater = 0;

	if (!later || ktune__db_claim_owner(owner, sizeof(owner), &e) ||
	    ktune__tuner_open(s->db_path, g->device, s->worker_exe, &t, &e)) {
		if (!later)
			ktune__fail(&e, KTUNE_ERR_NOMEM, "out of memory");
		stop_sweep(s, &e);
		goto out;
	}
	/* First pass: every key not taken by another thread of this sweep. */
	for (int i = 0; i < s->spec->nkeys && !stopped(s); i++) {
		if (!take(s, i))
			continue;
		ktune__db_heartbeat(ktune__tuner_db(t), owner, NULL);
		int rc = sweep_key(g, t, owner, i, s->opts.force, 0);
		if (rc > 0)
			later[nlater++] = i;
		else if (rc < 0)
			goto out;
	}
	/* Then the keys that other sweeps were tuning: theirs when they store them, ours if they die. */
	while (nlater > 0 && !stopped(s)) {
		int kept = 0;
		for (int j = 0; j < nlater; j++) {
			int rc = sweep_key(g, t, owner, later[j], 0, 1);
			if (rc > 0)
				later[kept++] = later[j];
			else if (rc < 0)
				goto out;
		}
		nlater = kept;
		if (nlater) {
			say(g, "waiting for %d key%s that another sweep is tuning\n", nlater,
			    nlater > 1 ? "s" : "");
			ktune__db_heartbeat(ktune__tuner_db(t), owner, NULL);
			sleep(WAIT_POLL_S);
		}
	}
out:
	if (t)
		ktune__db_release_all(ktune__tuner_db(t), owner, NULL);
	ktune__tuner_close(t);
	free(later);
	return NULL;
}

/*
 * The group pick (ktune__group_pick) over the keys this sweep tuned, a
 * group per M, on the first GPU.  A group that fails keeps its results.
 */
static void group_picks(struct sweep *s, int device)
{
	const struct ktune_spec *spec = s->spec;
	struct ktune_result *r = calloc((size_t)spec->nkeys + 1, sizeof(*r));
	int *idx = calloc((size_t)spec->nkeys + 1, sizeof(*idx));
	unsigned char *done = calloc((size_t)spec->nkeys + 1, 1);
	struct ktune_tuner *t = NULL;
	struct ktune_err e = { "" };

	if (!r || !idx || !done || ktune__tuner_open(s->db_path, device, s->worker_exe, &t, &e)) {
		fprintf(stderr, "ktune: group pick: %s\n", r && idx && done ? e.msg : "out of memory");
		goto out;
	}
	for (int i = 0; i < spec->nkeys; i++) {
		int n = 0, switched;
		if (done[i] || s->state[i] != KEY_TUNED || strcmp(s->results[i].key.op, "gemm"))
			continue; /* the group pick weighs GEMM tiles against cuBLAS */
		for (int j = i; j < spec->nkeys; j++)
			if (!done[j] && s->state[j] == KEY_TUNED && s->results[j].key.m == s->results[i].key.m &&
			    !strcmp(s->results[j].key.op, s->results[i].key.op)) {
				done[j] = 1;
				r[n] = s->results[j];
				idx[n++] = j;
			}
		if (s->opts.progress && n > 1)
			fprintf(s->opts.progress, "group pick: %d keys of M = %lld\n", n, (long long)r[0].key.m);
		int rc = ktune__group_pick(t, r, n, &s->opts, &switched, &e);
		if (rc) {
			fprintf(stderr, "ktune: group pick of M = %lld: %s (the keys keep their results)\n",
				(long long)r[0].key.m, e.msg);
			if (fatal_status(rc))
				break;
			continue;
		}
		for (int k = 0; k < n; k++)
			s->results[idx[k]] = r[k];
		if (s->opts.progress && switched)
			fprintf(s->opts.progress, "  %d key%s now run the group's config\n", switched,
				switched > 1 ? "s" : "");
	}
out:
	ktune__tuner_close(t);
	free(r);
	free(idx);
	free(done);
}

/*
 * A GEMM's rate is TFLOP/s and its baseline cuBLAS; every other op's
 * baseline is the copy of its fewest bytes in the same run, so its ratio is
 * the fraction of the copy bandwidth reached, and its rate GB/s, or TFLOP/s
 * where its FLOPs are the floor (attention: there the ratio says little).
 */
static void print_header(FILE *out)
{
	fprintf(out, "%-7s %-4s %-12s %-20s %10s %12s %12s %7s %9s  %s\n", "op", "type", "variant",
		"shape", "time_us", "rate", "baseline", "ratio", "status", "config");
}

static void print_row(FILE *out, const struct ktune_key *key, const struct ktune_result *r,
		      const char *status)
{
	const struct ktune_op *op = ktune__op_of(key);
	char shape[64], rate[32], base[32];
	ktune__key_shape(key, shape, sizeof(shape));
	if (!r || !op) {
		fprintf(out, "%-7s %-4s %-12s %-20s %10s %12s %12s %7s %9s\n", key->op,
			ktune__dtype_name(key->dtype), key->variant, shape, "-", "-", "-", "-", status);
		return;
	}
	int gemm = ktune__op_is_gemm(op), tf = ktune__op_compute_bound(op, key);
	double work = tf ? op->flops(key) / 1e12 : op->bytes(key) / 1e9;
	snprintf(rate, sizeof(rate), "%.1f %s", work / (r->time_us * 1e-6), tf ? "TF/s" : "GB/s");
	if (gemm)
		snprintf(base, sizeof(base), "%.1f TF/s", r->cublas_us > 0 ? work / (r->cublas_us * 1e-6) : 0.0);
	else /* the copy of the op's bytes */
		snprintf(base, sizeof(base), "%.1f GB/s",
			 r->cublas_us > 0 ? op->bytes(key) / 1e9 / (r->cublas_us * 1e-6) : 0.0);
	double ratio = r->cublas_us > 0 ? r->cublas_us / r->time_us : 0;
	fprintf(out, "%-7s %-4s %-12s %-20s %10.1f %12s %12s %7.2f %9s  %s%s%s\n", key->op,
		ktune__dtype_name(key->dtype), key->variant, shape, r->time_us, rate, base, ratio,
		status, r->config, r->measure_note[0] ? "  # " : "", r->measure_note);
}

int ktune__sweep(const char *db_path, const char *worker_exe, const int *devices, int ndevices,
		 const struct ktune_spec *spec, const struct ktune_tune_options *o, FILE *out,
		 struct ktune_err *e)
{
	/*
	 * A key counts as tuned when its stored result is fresh for its own
	 * family (ktune__db_claim_key): a result of either family stands until
	 * that family's source changes.  Results from before the wgmma family
	 * existed therefore stand too; `ktune sweep --force` weighs both
	 * families for them.
	 */
	struct sweep s = { db_path, worker_exe, spec, *o, "" };
	ktune__gemm_space_hash(s.hash);
	struct gpu_thread *g = calloc((size_t)ndevices, sizeof(*g));
	int count[KEY_TUNED + 1] = { 0 }, nratio = 0, failed = 0;
	double t0 = ktune__now(), log_ratio = 0;

	pthread_mutex_init(&s.lock, NULL);
	s.state = calloc((size_t)spec->nkeys + 1, sizeof(*s.state));
	s.taken = calloc((size_t)spec->nkeys + 1, 1);
	s.results = calloc((size_t)spec->nkeys + 1, sizeof(*s.results));
	if (!g || !s.state || !s.taken || !s.results) {
		failed = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	/* the GPUs share the host's cores for compiling */
	if (s.opts.jobs <= 0 && ndevices > 1) {
		s.opts.jobs = (int)sysconf(_SC_NPROCESSORS_ONLN) / ndevices;
		if (s.opts.jobs < 1)
			s.opts.jobs = 1;
	}
	int started = 0;
	for (int d = 0; d < ndevices; d++) {
		g[d] = (struct gpu_thread){ &s, devices[d], ndevices > 1, 0, s.opts, "" };
		if (ndevices > 1) {
			snprintf(g[d].prefix, sizeof(g[d].prefix), "[gpu %d] ", devices[d]);
			g[d].opts.progress_prefix = g[d].prefix;
		}
		if (ndevices == 1)
			gpu_main(&g[d]);
		else if (pthread_create(&g[d].tid, NULL, gpu_main, &g[d]) == 0)
			started |= 1 << d;
	}
	for (int d = 0; d < ndevices; d++)
		if (started & (1 << d))
			pthread_join(g[d].tid, NULL);
	if (s.opts.group_pick && !s.fatal)
		group_picks(&s, devices[0]);

	print_header(out);
	for (int i = 0; i < spec->nkeys; i++) {
		enum key_state st = s.state[i];
		const struct ktune_result *r = st != KEY_NOT_RUN && st != KEY_FAILED &&
						       s.results[i].time_us > 0 ? &s.results[i] : NULL;
		count[st]++;
		print_row(out, &spec->keys[i], r, state_name[st]);
		if (r && r->cublas_us > 0) {
			log_ratio += log(r->cublas_us / r->time_us);
			nratio++;
		}
	}
	fprintf(out, "\n%d keys: %d tuned, %d already tuned, %d tuned by another sweep, %d failed, "
		"%d not run; %.1f s", spec->nkeys, count[KEY_TUNED], count[KEY_CACHED],
		count[KEY_ELSEWHERE], count[KEY_FAILED], count[KEY_NOT_RUN], ktune__now() - t0);
	if (nratio)
		fprintf(out, "; geometric mean of baseline time / ktune time (cuBLAS; the copy of the bytes for "
			"other ops): %.3f", exp(log_ratio / nratio));
	fprintf(out, "\n");
	failed = count[KEY_FAILED] + count[KEY_NOT_RUN];
	if (s.fatal && count[KEY_TUNED] + count[KEY_CACHED] + count[KEY_ELSEWHERE] == 0)
		failed = ktune__fail(e, KTUNE_ERR_CUDA, "%s", s.err.msg);
	else if (s.fatal)
		fprintf(stderr, "ktune: stopped early: %s\n", s.err.msg);
out:
	pthread_mutex_destroy(&s.lock);
	free(s.state);
	free(s.taken);
	free(s.results);
	free(g);
	return failed;
}
