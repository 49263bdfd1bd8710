/*
 * serve.c - the worker process's side of the protocol: reads requests,
 * compiles jobs on a pool of threads (announcing each one, so the tuner can
 * time it), keeps their cubins for RUN, and exits when its context is lost.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "tuner/protocol.h"

struct server {
	int fd;
	const struct ktune_worker_ops *ops;
	void *state;
	pthread_mutex_t send_lock; /* compile threads share the socket */
	struct ktune_problem problem;
	int have_problem;
	/* the cubins compiled for the current problem, by job id */
	struct ktune_cubin *cubins;
	int *have;
	int ncubins;
};

static int send_locked(struct server *s, int type, const void *p, size_t len)
{
	pthread_mutex_lock(&s->send_lock);
	int rc = ktune__msg_send(s->fd, type, p, len);
	pthread_mutex_unlock(&s->send_lock);
	return rc;
}

static int send_error(struct server *s, int status, const struct ktune_err *e)
{
	struct ktune_msg_error m = { status, "" };
	snprintf(m.msg, sizeof(m.msg), "%s", e->msg);
	return send_locked(s, KTUNE_MSG_ERROR, &m, sizeof(m));
}

static void drop_cubins(struct server *s)
{
	for (int i = 0; i < s->ncubins; i++)
		if (s->have[i])
			ktune__cubin_free(&s->cubins[i]);
	free(s->cubins);
	free(s->have);
	s->cubins = NULL;
	s->have = NULL;
	s->ncubins = 0;
}

struct compile_batch {
	struct server *s;
	const struct ktune_compile_item *items;
};

/* One job: announced first, so that the tuner can time it. */
static void compile_one(int i, void *arg)
{
	struct compile_batch *b = arg;
	struct server *s = b->s;
	const struct ktune_compile_item *it = &b->items[i];
	struct ktune_compile_done *done = calloc(1, sizeof(*done)); /* 8 KB: not on the stack */
	struct ktune_cubin cubin = { 0 };
	struct ktune_err e = { "" };

	send_locked(s, KTUNE_MSG_STARTED, &it->id, sizeof(it->id));
	int status = s->ops->compile(s->state, &it->key, &it->cfg, &cubin, &e);
	if (status == KTUNE_OK && it->id >= 0 && it->id < s->ncubins) {
		s->cubins[it->id] = cubin; /* each id is one thread's alone */
		s->have[it->id] = 1;
	} else if (status == KTUNE_OK) {
		ktune__cubin_free(&cubin);
	}
	if (!done)
		return; /* the tuner times it out */
	done->id = it->id;
	done->status = status;
	done->res = cubin.res;
	if (status)
		snprintf(done->log, sizeof(done->log), "%s", e.msg);
	send_locked(s, KTUNE_MSG_DONE, done, sizeof(*done));
	free(done);
}

static int serve_compile(struct server *s, const void *buf, size_t len)
{
	struct ktune_compile_req req;
	if (len < sizeof(req))
		return -1;
	memcpy(&req, buf, sizeof(req));
	if (req.n < 0 || len != sizeof(req) + (size_t)req.n * sizeof(struct ktune_compile_item))
		return -1;
	/* the items follow the request in buf, which stays ours until we answer */
	struct compile_batch b = { s, (const struct ktune_compile_item *)((const char *)buf + sizeof(req)) };
	/*
	 * The cubins of earlier COMPILEs of this problem stay (a tune compiles
	 * in batches, client.c's compile_range); a job compiled again replaces
	 * its own.  PROBLEM drops them all.
	 */
	int maxid = -1;
	for (int i = 0; i < req.n; i++) {
		if (b.items[i].id < 0)
			return -1;
		if (b.items[i].id > maxid)
			maxid = b.items[i].id;
		if (b.items[i].id < s->ncubins && s->have[b.items[i].id]) {
			ktune__cubin_free(&s->cubins[b.items[i].id]);
			s->have[b.items[i].id] = 0;
		}
	}
	if (maxid >= s->ncubins) {
		struct ktune_cubin *cubins = realloc(s->cubins, (size_t)(maxid + 1) * sizeof(*cubins));
		if (!cubins)
			return -1;
		s->cubins = cubins;
		int *have = realloc(s->have, (size_t)(maxid + 1) * sizeof(*have));
		if (!have)
			return -1;
		s->have = have;
		memset(s->cubins + s->ncubins, 0, (size_t)(maxid + 1 - s->ncubins) * sizeof(*s->cubins));
		memset(s->have + s->ncubins, 0, (size_t)(maxid + 1 - s->ncubins) * sizeof(*s->have));
		s->ncubins = maxid + 1;
	}
	ktune__parallel_for(req.n, req.threads, compile_one, &b);
	return send_locked(s, KTUNE_MSG_END, NULL, 0);
}

/* RUN: returns 1 when the worker must exit (its context is lost). */
static int serve_run(struct server *s, const struct ktune_run_req *req)
{
	struct ktune_run_reply *r = calloc(1, sizeof(*r));
	struct ktune_err e = { "" };
	int rc, lost = 0;

	if (!r)
		return 1;
	if (!s->have_problem) {
		ktune__fail(&e, KTUNE_ERR_INVALID, "RUN before PROBLEM");
		send_error(s, KTUNE_ERR_INVALID, &e);
		free(r);
		return 1;
	}
	if (req->id < 0 || req->id >= s->ncubins || !s->have[req->id]) {
		/* not compiled in this process (a fresh worker, or a stored config): compile now */
		struct ktune_cubin cubin = { 0 };
		send_locked(s, KTUNE_MSG_COMPILING, NULL, 0);
		rc = s->ops->compile(s->state, &s->problem.key, &req->cfg, &cubin, &e);
		send_locked(s, KTUNE_MSG_COMPILED, NULL, 0);
		if (rc) {
			snprintf(r->trial.status, sizeof(r->trial.status), "%s", KTUNE_TRIAL_COMPILE_ERROR);
			snprintf(r->trial.message, sizeof(r->trial.message), "%.500s", e.msg);
			send_locked(s, KTUNE_MSG_RESULT, r, sizeof(*r));
			free(r);
			return 0;
		}
		if (req->id >= 0 && req->id < s->ncubins) {
			s->cubins[req->id] = cubin;
			s->have[req->id] = 1;
			rc = s->ops->run(s->state, &req->cfg, &s->cubins[req->id], req->mode, &r->trial,
					 &r->timing, &e);
		} else {
			rc = s->ops->run(s->state, &req->cfg, &cubin, req->mode, &r->trial, &r->timing, &e);
			ktune__cubin_free(&cubin);
		}
	} else {
		rc = s->ops->run(s->state, &req->cfg, &s->cubins[req->id], req->mode, &r->trial,
				 &r->timing, &e);
	}
	if (rc) {
		send_error(s, rc, &e);
		lost = 1;
	} else {
		lost = !strcmp(r->trial.status, KTUNE_TRIAL_CRASHED);
		send_locked(s, KTUNE_MSG_RESULT, r, sizeof(*r));
	}
	free(r);
	return lost;
}

int ktune__worker_serve(int fd, const struct ktune_worker_ops *ops, void *state)
{
	struct server s = { .fd = fd, .ops = ops, .state = state };
	void *buf = malloc(KTUNE_MSG_MAX);
	int status = 0;

	pthread_mutex_init(&s.send_lock, NULL);
	if (!buf)
		return 1;
	for (;;) {
		int type;
		size_t len;
		struct ktune_err e = { "" };
		if (ktune__msg_recv(fd, 0, &type, buf, KTUNE_MSG_MAX, &len))
			break; /* the tuner is gone */
		if (type == KTUNE_MSG_QUIT)
			break;
		if (type == KTUNE_MSG_HELLO && len == sizeof(struct ktune_hello_req)) {
			struct ktune_hello h = { 0 };
			int rc = ops->hello(state, buf, &h, &e);
			h.version = KTUNE_PROTOCOL_VERSION;
			h.pid = (int)getpid();
			if (rc) {
				send_error(&s, rc, &e);
				status = 2;
				break;
			}
			send_locked(&s, KTUNE_MSG_HELLO, &h, sizeof(h));
		} else if (type == KTUNE_MSG_PROBLEM && len == sizeof(struct ktune_problem)) {
			struct ktune_problem out;
			int rc = ops->problem(state, buf, &out, &e);
			if (rc) {
				send_error(&s, rc, &e);
				status = 3;
				break;
			}
			s.problem = out;
			s.have_problem = 1;
			drop_cubins(&s); /* compiled for the previous problem's key */
			send_locked(&s, KTUNE_MSG_PROBLEM, &out, sizeof(out));
		} else if (type == KTUNE_MSG_COMPILE) {
			if (serve_compile(&s, buf, len)) {
				status = 4;
				break;
			}
		} else if (type == KTUNE_MSG_RUN && len == sizeof(struct ktune_run_req)) {
			if (serve_run(&s, buf)) {
				status = 3;
				break;
			}
		} else if (type == KTUNE_MSG_CUBLAS) {
			struct ktune_cublas_reply r;
			int rc = ops->cublas(state, &r.check, &r.timing, &e);
			if (rc == KTUNE_ERR_NOT_FOUND) {
				send_error(&s, rc, &e); /* no cuBLAS: not a failure of the worker */
			} else if (rc) {
				send_error(&s, rc, &e);
				status = 3;
				break;
			} else {
				send_locked(&s, KTUNE_MSG_CUBLAS, &r, sizeof(r));
			}
		} else {
			fprintf(stderr, "ktune worker: unexpected message %d of %zu bytes\n", type, len);
			status = 4;
			break;
		}
	}
	drop_cubins(&s);
	free(buf);
	return status;
}

int ktune__worker_main(int argc, char **argv, const struct ktune_worker_ops *ops, void *state)
{
	int fd = -1;
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--fd"))
			fd = atoi(argv[i + 1]);
	if (fd < 0) {
		fprintf(stderr, "%s: the tuner's worker process; not for use by hand\n", argv[0]);
		return 2;
	}
	/* die with the tuner, even when it is killed with SIGKILL */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	return ktune__worker_serve(fd, ops, state);
}
