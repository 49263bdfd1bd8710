/*
 * client.c - spawning, feeding, timing out and replacing the worker process.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tuner/client.h"

extern char **environ;

#define HELLO_TIMEOUT_S 120.0   /* a context, the helper kernels, cuBLAS */
#define PROBLEM_TIMEOUT_S 300.0 /* allocation, random fill, the reference GEMM */

struct ktune_client {
	char exe[4096];
	struct ktune_hello_req req;
	struct ktune_hello hello;
	pid_t pid; /* 0: no worker */
	int fd;
	int starts;
	double compile_timeout_s; /* a RUN that must compile first */
	struct ktune_problem problem;
	int have_problem, worker_has_problem;
	char ended[256]; /* how the last worker ended */
	void *buf;       /* KTUNE_MSG_MAX bytes for replies */
};

/* Kills (if asked) and reaps the worker, noting how it ended. */
static void reap(struct ktune_client *c, int kill_it)
{
	int st = 0;
	if (!c->pid)
		return;
	close(c->fd);
	c->fd = -1;
	if (kill_it)
		kill(c->pid, SIGKILL);
	while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
		;
	if (kill_it)
		snprintf(c->ended, sizeof(c->ended), "killed by the tuner");
	else if (WIFSIGNALED(st))
		snprintf(c->ended, sizeof(c->ended), "killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else
		snprintf(c->ended, sizeof(c->ended), "exited with status %d", WEXITSTATUS(st));
	c->pid = 0;
	c->worker_has_problem = 0;
}

/*
 * Waits for the reply to a request, skipping events.  A worker that must
 * compile first gets the compile timeout for that, then timeout_s afresh.
 */
static int wait_reply(struct ktune_client *c, double deadline, double timeout_s, int *type,
		      size_t *len)
{
	for (;;) {
		int rc = ktune__msg_recv(c->fd, deadline, type, c->buf, KTUNE_MSG_MAX, len);
		if (rc)
			return rc < 0 ? KTUNE_RECV_EOF : rc;
		if (*type == KTUNE_MSG_COMPILING)
			deadline = ktune__now() + c->compile_timeout_s;
		else if (*type == KTUNE_MSG_COMPILED)
			deadline = ktune__now() + timeout_s;
		else
			return KTUNE_RECV_OK;
	}
}

static int error_reply(struct ktune_client *c, int type, size_t len, const char *what,
		       struct ktune_err *e)
{
	if (type == KTUNE_MSG_ERROR && len == sizeof(struct ktune_msg_error)) {
		const struct ktune_msg_error *m = c->buf;
		return ktune__fail(e, m->status ? m->status : KTUNE_ERR_CUDA, "%s", m->msg);
	}
	return ktune__fail(e, KTUNE_ERR_CUDA, "the worker answered %s with message %d", what, type);
}

static int spawn(struct ktune_client *c, struct ktune_err *e)
{
	int sv[2], rc, type;
	size_t len;
	posix_spawn_file_actions_t fa;
	char *argv[] = { c->exe, "__worker", "--fd", "3", NULL };

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return ktune__fail(e, KTUNE_ERR_IO, "cannot make a socket for the worker: %s",
				   strerror(errno));
	if (sv[1] == 3) { /* dup2(3, 3) would keep close-on-exec */
		int moved = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
		close(sv[1]);
		sv[1] = moved;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
	rc = posix_spawn(&c->pid, c->exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(sv[1]);
	if (rc) {
		close(sv[0]);
		c->pid = 0;
		return ktune__fail(e, KTUNE_ERR_IO, "cannot start the worker '%s': %s", c->exe,
				   strerror(rc));
	}
	c->fd = sv[0];
	c->starts++;
	if (ktune__msg_send(c->fd, KTUNE_MSG_HELLO, &c->req, sizeof(c->req)))
		rc = KTUNE_RECV_EOF;
	else
		rc = wait_reply(c, ktune__now() + HELLO_TIMEOUT_S, 0, &type, &len);
	if (rc == KTUNE_RECV_OK && type == KTUNE_MSG_HELLO && len == sizeof(c->hello)) {
		memcpy(&c->hello, c->buf, sizeof(c->hello));
		if (c->hello.version == KTUNE_PROTOCOL_VERSION)
			return KTUNE_OK;
		reap(c, 1);
		return ktune__fail(e, KTUNE_ERR_INVALID, "the worker '%s' speaks protocol %d, not %d",
				   c->exe, c->hello.version, KTUNE_PROTOCOL_VERSION);
	}
	if (rc == KTUNE_RECV_OK) {
		struct ktune_err we;
		int status = error_reply(c, type, len, "hello", &we);
		reap(c, 1);
		return ktune__fail(e, status, "%s", we.msg);
	}
	reap(c, 1);
	return ktune__fail(e, KTUNE_ERR_CUDA, "the worker did not start: %s",
			   rc == KTUNE_RECV_TIMEOUT ? "no answer within 120 s" : "it exited");
}

/* A running worker that has the current problem. */
static int ensure_worker(struct ktune_client *c, struct ktune_err *e)
{
	int rc, type;
	size_t len;
	if (!c->pid && (rc = spawn(c, e)))
		return rc;
	if (!c->have_problem || c->worker_has_problem)
		return KTUNE_OK;
	if (ktune__msg_send(c->fd, KTUNE_MSG_PROBLEM, &c->problem, sizeof(c->problem)))
		rc = KTUNE_RECV_EOF;
	else
		rc = wait_reply(c, ktune__now() + PROBLEM_TIMEOUT_S, 0, &type, &len);
	if (rc == KTUNE_RECV_OK && type == KTUNE_MSG_PROBLEM && len == sizeof(c->problem)) {
		c->worker_has_problem = 1;
		return KTUNE_OK;
	}
	if (rc == KTUNE_RECV_OK) {
		rc = error_reply(c, type, len, "the problem", e);
		reap(c, 1);
		return rc;
	}
	reap(c, 1);
	return ktune__fail(e, KTUNE_ERR_CUDA, "the worker failed to set up the problem: %s",
			   rc == KTUNE_RECV_TIMEOUT ? "no answer in time" : c->ended);
}

int ktune__client_open(const char *exe, int device, const char *cache_dir,
		       struct ktune_client **out, struct ktune_err *e)
{
	struct ktune_client *c = calloc(1, sizeof(*c));
	int rc;
	*out = NULL;
	if (!c || !(c->buf = malloc(KTUNE_MSG_MAX))) {
		free(c);
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	}
	if (strlen(exe) >= sizeof(c->exe) || (cache_dir && strlen(cache_dir) >= sizeof(c->req.cache_dir))) {
		free(c->buf);
		free(c);
		return ktune__fail(e, KTUNE_ERR_INVALID, "the worker's %s path is longer than the system allows",
				   strlen(exe) >= sizeof(c->exe) ? "program" : "cache");
	}
	snprintf(c->exe, sizeof(c->exe), "%s", exe);
	c->fd = -1;
	c->compile_timeout_s = 120;
	c->req.version = KTUNE_PROTOCOL_VERSION;
	c->req.device = device;
	if (cache_dir) {
		c->req.has_cache_dir = 1;
		snprintf(c->req.cache_dir, sizeof(c->req.cache_dir), "%s", cache_dir);
	}
	if ((rc = spawn(c, e))) {
		ktune__client_close(c);
		return rc;
	}
	*out = c;
	return KTUNE_OK;
}

void ktune__client_close(struct ktune_client *c)
{
	if (!c)
		return;
	if (c->pid) {
		ktune__msg_send(c->fd, KTUNE_MSG_QUIT, NULL, 0);
		/* give it a moment to release the GPU cleanly, then make sure */
		for (int i = 0; i < 100; i++) {
			if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
				c->pid = 0;
				close(c->fd);
				break;
			}
			usleep(20000);
		}
		reap(c, 1);
	}
	free(c->buf);
	free(c);
}

const struct ktune_hello *ktune__client_hello(const struct ktune_client *c)
{
	return &c->hello;
}

pid_t ktune__client_pid(const struct ktune_client *c)
{
	return c->pid;
}

int ktune__client_starts(const struct ktune_client *c)
{
	return c->starts;
}

void ktune__client_set_compile_timeout(struct ktune_client *c, double s)
{
	c->compile_timeout_s = s > 0 ? s : 120;
}

int ktune__client_problem(struct ktune_client *c, const struct ktune_problem *p,
			  struct ktune_problem *out, struct ktune_err *e)
{
	int rc;
	c->problem = *p;
	c->have_problem = 1;
	c->worker_has_problem = 0;
	/* one retry: the worker may have died since its last job */
	if ((rc = ensure_worker(c, e)) && c->pid == 0 && rc == KTUNE_ERR_CUDA)
		rc = ensure_worker(c, e);
	if (rc) {
		c->have_problem = 0;
		return rc;
	}
	*out = *(const struct ktune_problem *)c->buf;
	return KTUNE_OK;
}

static void set_trial(struct ktune_trial *t, const char *status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_trial(struct ktune_trial *t, const char *status, const char *fmt, ...)
{
	va_list ap;
	snprintf(t->status, sizeof(t->status), "%s", status);
	va_start(ap, fmt);
	vsnprintf(t->message, sizeof(t->message), fmt, ap);
	va_end(ap);
}

int ktune__client_run(struct ktune_client *c, int job, const struct ktune_config *cfg,
		      enum ktune_run_mode mode, double timeout_s, struct ktune_trial *trial,
		      struct ktune_timing *timing, struct ktune_err *e)
{
	struct ktune_run_req req = { job, *cfg, (int)mode };
	int rc, type;
	size_t len;

	memset(timing, 0, sizeof(*timing));
	/* A full measurement takes the protocol's half second and more launches. */
	double allowed = mode == KTUNE_RUN_MEASURE ? 3 * timeout_s + 1 : timeout_s;
	for (int attempt = 0;; attempt++) {
		if ((rc = ensure_worker(c, e)))
			return rc;
		if (ktune__msg_send(c->fd, KTUNE_MSG_RUN, &req, sizeof(req)))
			rc = KTUNE_RECV_EOF;
		else
			rc = wait_reply(c, ktune__now() + allowed, allowed, &type, &len);
		if (rc == KTUNE_RECV_TIMEOUT) {
			reap(c, 1);
			set_trial(trial, KTUNE_TRIAL_TIMEOUT, "no result within %.1f s: killed", allowed);
			return KTUNE_OK;
		}
		if (rc == KTUNE_RECV_OK && type == KTUNE_MSG_RESULT &&
		    len == sizeof(struct ktune_run_reply)) {
			const struct ktune_run_reply *r = c->buf;
			/* keep the orchestrator's identity fields; take the outcome */
			memcpy(trial->status, r->trial.status, sizeof(trial->status));
			memcpy(trial->message, r->trial.message, sizeof(trial->message));
			trial->time_us = r->trial.time_us;
			trial->err_fro = r->trial.err_fro;
			trial->err_max = r->trial.err_max;
			*timing = r->timing;
			if (!strcmp(trial->status, KTUNE_TRIAL_CRASHED))
				reap(c, 0); /* it exits on its own: its context is gone */
			return KTUNE_OK;
		}
		if (rc == KTUNE_RECV_OK) {
			struct ktune_err we;
			error_reply(c, type, len, "a run", &we);
			reap(c, 1);
			set_trial(trial, KTUNE_TRIAL_CRASHED, "%.500s", we.msg);
			return KTUNE_OK;
		}
		/* The worker died without a word: kill -9 from outside, or the candidate? Once more. */
		reap(c, 0);
		if (attempt > 0) {
			set_trial(trial, KTUNE_TRIAL_CRASHED, "the worker died running it twice: %s",
				  c->ended);
			return KTUNE_OK;
		}
	}
}

int ktune__client_cublas(struct ktune_client *c, double timeout_s, struct ktune_check *check,
			 struct ktune_timing *timing, struct ktune_err *e)
{
	int rc, type;
	size_t len;
	if ((rc = ensure_worker(c, e)))
		return rc;
	if (ktune__msg_send(c->fd, KTUNE_MSG_CUBLAS, NULL, 0))
		rc = KTUNE_RECV_EOF;
	else
		rc = wait_reply(c, ktune__now() + 3 * timeout_s + 1, 0, &type, &len);
	if (rc == KTUNE_RECV_OK && type == KTUNE_MSG_CUBLAS &&
	    len == sizeof(struct ktune_cublas_reply)) {
		const struct ktune_cublas_reply *r = c->buf;
		*check = r->check;
		*timing = r->timing;
		return KTUNE_OK;
	}
	if (rc == KTUNE_RECV_OK) {
		rc = error_reply(c, type, len, "cuBLAS", e);
		if (rc != KTUNE_ERR_NOT_FOUND)
			reap(c, 1);
		return rc;
	}
	reap(c, rc == KTUNE_RECV_TIMEOUT);
	return ktune__fail(e, KTUNE_ERR_CUDA, "cuBLAS did not finish: %s",
			   rc == KTUNE_RECV_TIMEOUT ? "timed out" : c->ended);
}

/* Compile jobs: pending, compiling (since when), or done. */
enum { JOB_PENDING, JOB_STARTED, JOB_DONE };

static void job_failed(struct ktune_compile_job *j, int timed_out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void job_failed(struct ktune_compile_job *j, int timed_out, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	j->status = KTUNE_ERR_COMPILE;
	j->timed_out = timed_out;
	free(j->log);
	j->log = strdup(msg);
}

int ktune__client_compile(struct ktune_client *c, struct ktune_compile_job *jobs, int n,
			  int threads, struct ktune_err *e)
{
	return ktune__client_compile_range(c, jobs, 0, n, threads, e);
}

int ktune__client_compile_range(struct ktune_client *c, struct ktune_compile_job *all, int first, int n,
				int threads, struct ktune_err *e)
{
	struct ktune_compile_job *jobs = all + first; /* job i here is job first + i for the worker */
	double timeout_s = c->compile_timeout_s;
	int *state = calloc((size_t)n + 1, sizeof(*state));
	int *crashes = calloc((size_t)n + 1, sizeof(*crashes));
	double *since = calloc((size_t)n + 1, sizeof(*since));
	struct ktune_compile_req *req = malloc(sizeof(*req) + (size_t)n * sizeof(struct ktune_compile_item));
	int rc = KTUNE_OK, left = n;

	if (!state || !crashes || !since || !req) {
		rc = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
		goto out;
	}
	while (left > 0) {
		struct ktune_compile_item *items = (struct ktune_compile_item *)(req + 1);
		int type;
		size_t len;
		if ((rc = ensure_worker(c, e)))
			goto out;
		req->n = 0;
		req->threads = threads;
		for (int i = 0; i < n; i++) {
			if (state[i] == JOB_DONE)
				continue;
			state[i] = JOB_PENDING;
			items[req->n].id = first + i;
			items[req->n].key = jobs[i].key;
			items[req->n].cfg = jobs[i].cfg;
			req->n++;
		}
		int sent = !ktune__msg_send(c->fd, KTUNE_MSG_COMPILE, req,
					    sizeof(*req) + (size_t)req->n * sizeof(*items));
		int ended = 0, died = !sent;
		while (sent && !ended && !died) {
			/* the deadline: the oldest compile still running, or a first one to start */
			double deadline = ktune__now() + timeout_s;
			for (int i = 0; i < n; i++)
				if (state[i] == JOB_STARTED && since[i] + timeout_s < deadline)
					deadline = since[i] + timeout_s;
			int r = ktune__msg_recv(c->fd, deadline, &type, c->buf, KTUNE_MSG_MAX, &len);
			if (r == KTUNE_RECV_TIMEOUT) {
				double now = ktune__now();
				for (int i = 0; i < n; i++)
					if (state[i] == JOB_STARTED && since[i] + timeout_s <= now + 0.01) {
						job_failed(&jobs[i], 1, "NVRTC did not finish within %.0f s: killed",
							   timeout_s);
						state[i] = JOB_DONE;
						left--;
					}
				break;
			}
			if (r) {
				died = 1;
			} else if (type == KTUNE_MSG_STARTED && len == sizeof(int)) {
				int id = *(int *)c->buf - first;
				if (id >= 0 && id < n && state[id] == JOB_PENDING) {
					state[id] = JOB_STARTED;
					since[id] = ktune__now();
				}
			} else if (type == KTUNE_MSG_DONE && len == sizeof(struct ktune_compile_done)) {
				const struct ktune_compile_done *d = c->buf;
				int id = d->id - first;
				if (id < 0 || id >= n || state[id] == JOB_DONE)
					continue;
				struct ktune_compile_job *j = &jobs[id];
				j->status = d->status;
				j->cubin.res = d->res;
				if (d->status)
					j->log = strdup(d->log);
				state[id] = JOB_DONE;
				left--;
			} else if (type == KTUNE_MSG_END) {
				ended = 1;
			} else {
				died = 1; /* out of protocol: treat it as broken */
			}
		}
		if (ended) {
			/* END with jobs unanswered: the worker lost them; fail them rather than loop */
			for (int i = 0; i < n; i++)
				if (state[i] != JOB_DONE) {
					job_failed(&jobs[i], 0, "the worker did not compile it");
					state[i] = JOB_DONE;
					left--;
				}
			break;
		}
		/*
		 * A timeout or a crash: replace the worker.  A crash counts against the jobs
		 * it was on, and the rest compile one at a time, so that only the culprit
		 * is on hand when it crashes again.
		 */
		reap(c, !died);
		if (died)
			threads = 1;
		for (int i = 0; died && i < n; i++)
			if (state[i] == JOB_STARTED && ++crashes[i] >= 2) {
				job_failed(&jobs[i], 0, "the worker died twice compiling it: %s", c->ended);
				state[i] = JOB_DONE;
				left--;
			}
	}
out:
	free(state);
	free(crashes);
	free(since);
	free(req);
	return rc;
}
