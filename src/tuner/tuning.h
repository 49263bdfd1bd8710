/*
 * tuning.h - the one internal header of the ktune command: what its
 * subcommands use of the library beside include/ktune.h.  cli/cli.h
 * includes these two and nothing else of ktune, so this list is the whole
 * of what the CLI knows of the tuner, the store, the registry and the
 * runtime.  Every header here is plain C: no CUDA type, no ktune_ctx
 * field, no worker protocol, no SQLite handle reaches the command.
 *
 * What each subcommand takes from it:
 *   sweep, tune, verify, bench   tuner/tuner.h (tuning, stored results re-run), search/spec.h,
 *                                tuner/candidates.h (tune's --top default), ops/gemm.h
 *                                (the alignment class of packed GEMM operands)
 *   show, export, import, merge  db/db.h (queries, import), db/share.h (export files),
 *                                db/defaults.h (export --defaults)
 *   compile                      tuner/candidates.h (the GEMM spaces' kernels, parallel
 *                                NVRTC compiles; with ops/gemm.h and runtime/compile.h)
 *   info                         runtime/device.h (the driver, an open context's device and
 *                                dispatch sources), ops/op.h (families and their hashes)
 *   explain                      tuner/explain.h (a key's dispatch, tuning and trials),
 *                                runtime/device.h (the device, shipped GPUs), db/db.h (devices)
 *   warm                         runtime/warm.h (compiling a device's kernels into the cache),
 *                                runtime/device.h (an offline context of a device not here)
 *   all of them                  ops/op.h (the op registry: --op, tune OP --FIELD, help tune),
 *                                key.h, common.h (errors, files, default paths)
 *   __worker                     tuner/tuner.h (ktune__gpu_worker_main)
 */
#ifndef KTUNE_TUNING_H
#define KTUNE_TUNING_H

#include "common.h"
#include "db/db.h"
#include "db/defaults.h"
#include "db/share.h"
#include "key.h"
#include "ops/op.h"
#include "runtime/device.h"
#include "runtime/warm.h"
#include "search/spec.h"
#include "tuner/candidates.h"
#include "tuner/explain.h"
#include "tuner/tuner.h"

#endif
