/*
 * protocol.h - the messages between the tuner (the orchestrator) and its
 * worker process, which does every GPU call and every NVRTC compile.
 *
 * Why a process: a kernel that faults poisons its CUDA context for good, a
 * kernel that never finishes cannot be stopped, and NVRTC can hang.  The
 * orchestrator never touches CUDA; it spawns `ktune __worker`, talks to it
 * over a socket, and kills and replaces it when it crashes or runs past its
 * deadline.  Both ends are the same build, so payloads are plain structs.
 *
 * A message is a header (type, payload length) and the payload:
 *
 *   tuner -> worker                     worker -> tuner
 *   HELLO    ktune_hello_req            HELLO    ktune_hello      | ERROR
 *   PROBLEM  ktune_problem              PROBLEM  ktune_problem    | ERROR
 *   COMPILE  ktune_compile_req, then    per job: STARTED (int id), then
 *            n ktune_compile_item        DONE ktune_compile_done; END last
 *   RUN      ktune_run_req              [COMPILING COMPILED] RESULT ktune_run_reply | ERROR
 *   CUBLAS   (none)                     CUBLAS   ktune_cublas_reply | ERROR
 *   QUIT     (none)                     (exits)
 *
 * A RESULT whose trial status is "crashed" is the worker's last message: its
 * CUDA context is lost and it exits.  So does any ERROR after HELLO.
 */
#ifndef KTUNE_PROTOCOL_H
#define KTUNE_PROTOCOL_H

#include <stdint.h>

#include "db/db.h"
#include "runtime/compile.h"
#include "tuner/worker.h"

#define KTUNE_PROTOCOL_VERSION 2
#define KTUNE_MSG_MAX (1024 * 1024) /* the largest payload either side accepts */

enum ktune_msg_type {
	KTUNE_MSG_HELLO = 1,
	KTUNE_MSG_PROBLEM,
	KTUNE_MSG_COMPILE,
	KTUNE_MSG_RUN,
	KTUNE_MSG_CUBLAS,
	KTUNE_MSG_QUIT,
	KTUNE_MSG_ERROR,
	KTUNE_MSG_STARTED,
	KTUNE_MSG_DONE,
	KTUNE_MSG_END,
	KTUNE_MSG_COMPILING, /* the worker compiles before it runs: allow for it */
	KTUNE_MSG_COMPILED,  /* ... and is done: the run's own deadline starts now */
	KTUNE_MSG_RESULT,
};

struct ktune_hello_req {
	int version; /* KTUNE_PROTOCOL_VERSION */
	int device;
	char cache_dir[4096]; /* "" disables the cubin cache */
	int has_cache_dir;    /* 0: the default cache */
};

/* What the worker found: the device and its toolchain. */
struct ktune_hello {
	int version;
	int pid;
	struct ktune_device_id id;
	char uuid[48]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML names it */
	int smem_optin, l2_bytes, driver_version;
	double mem_gbps; /* the device's DRAM bandwidth for the GEMM model (0: not reported) */
	char cublas_version[32];
};

struct ktune_compile_req {
	int n;       /* items that follow */
	int threads; /* 0: one per core */
};

struct ktune_compile_item {
	int id; /* the orchestrator's job number; RUN refers to it */
	struct ktune_key key;
	struct ktune_config cfg;
};

struct ktune_compile_done {
	int id;
	int status; /* ktune_status */
	struct ktune_resources res;
	char log[8192];
};

struct ktune_run_req {
	int id; /* a compiled job, or -1: compile the config for the current problem */
	struct ktune_config cfg;
	int mode; /* enum ktune_run_mode */
};

struct ktune_run_reply {
	struct ktune_trial trial; /* status, message, errors, time */
	struct ktune_timing timing;
};

struct ktune_cublas_reply {
	struct ktune_check check;
	struct ktune_timing timing;
};

struct ktune_msg_error {
	int status;
	char msg[4096];
};

/* What ktune__msg_recv saw besides a message. */
enum ktune_recv {
	KTUNE_RECV_OK = 0,
	KTUNE_RECV_EOF = 1,     /* the other end is gone */
	KTUNE_RECV_TIMEOUT = 2, /* nothing before the deadline */
};

/* Sends one message; never raises SIGPIPE.  0, or -1 when the other end is gone. */
int ktune__msg_send(int fd, int type, const void *payload, size_t len);

/*
 * Receives one message into buf (cap bytes) before `deadline` (ktune__now()
 * time; 0: wait for ever).  Returns KTUNE_RECV_*, or -1 on a malformed
 * message (too long for buf).
 */
int ktune__msg_recv(int fd, double deadline, int *type, void *buf, size_t cap, size_t *len);

/*
 * The worker side: what a worker does with each request.  The GPU worker
 * (serve.c's ktune__gpu_worker_ops) does real work; tests plug in fakes and
 * planted kernels.  Every function returns a ktune_status.
 */
struct ktune_worker_ops {
	int (*hello)(void *state, const struct ktune_hello_req *req, struct ktune_hello *out,
		     struct ktune_err *e);
	int (*problem)(void *state, const struct ktune_problem *in, struct ktune_problem *out,
		       struct ktune_err *e);
	/* Called from several threads at once. */
	int (*compile)(void *state, const struct ktune_key *key, const struct ktune_config *cfg,
		       struct ktune_cubin *out, struct ktune_err *e);
	/* Sets trial->status "crashed" when the CUDA context is lost: the worker then exits. */
	int (*run)(void *state, const struct ktune_config *cfg, const struct ktune_cubin *cubin,
		   enum ktune_run_mode mode, struct ktune_trial *trial, struct ktune_timing *timing,
		   struct ktune_err *e);
	int (*cublas)(void *state, struct ktune_check *check, struct ktune_timing *timing,
		      struct ktune_err *e);
};

/* The GPU worker's operations and their state (one per process). */
extern const struct ktune_worker_ops ktune__gpu_worker_ops;
void *ktune__gpu_worker_state(void);

/*
 * Serves requests on fd until QUIT, the tuner's end closing, or a lost
 * context; returns the process exit status to use.
 */
int ktune__worker_serve(int fd, const struct ktune_worker_ops *ops, void *state);

/*
 * main() of a worker process: `PROG __worker --fd N`.  Dies with its parent.
 */
int ktune__worker_main(int argc, char **argv, const struct ktune_worker_ops *ops, void *state);

#endif
