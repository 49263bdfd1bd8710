/*
 * templates.h - files embedded into the library at build time: the kernel
 * template sources and their search spaces (kernels/templates/), and the
 * shipped tuning files (db/ARCH/NAME.yaml).  It sits at the bottom of the
 * library with common.h and key.h: the runtime (compile, dispatch), the ops
 * (spaces and template hashes) and the store (an import's template check)
 * all read it, and it depends on none of them.
 */
#ifndef KTUNE_TEMPLATES_H
#define KTUNE_TEMPLATES_H

#include <stddef.h>

struct ktune_template_file {
	const char *name; /* "gemm.cu", "gemm.yaml" */
	const char *text; /* NUL-terminated */
	size_t len;
};

/* The prelude every non-GEMM template includes, handed to NVRTC as a header (compile.c). */
#define KTUNE_PRELUDE "prelude.cuh"

/* Every embedded template file; the list ends with a NULL name. */
extern const struct ktune_template_file ktune__template_files[];

/* Every shipped tuning file, named "sm_90/h100.yaml"; the list ends with a NULL name. */
extern const struct ktune_template_file ktune__shipped_files[];

/* The embedded file called `name`, or NULL. */
const struct ktune_template_file *ktune__template_file(const char *name);

/* sha256 of the embedded file (cached; thread-safe), or "" if there is none. */
const char *ktune__template_hash(const char *name);

#endif
