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

/* Headers a template may include: every embedded *.cuh file (prelude.cuh, rowwise.cuh). */
#define KTUNE_MAX_HEADERS 8

/* Every embedded template file; the list ends with a NULL name. */
extern const struct ktune_template_file ktune__template_files[];

/* Every shipped tuning file, named "sm_90/h100.yaml"; the list ends with a NULL name. */
extern const struct ktune_template_file ktune__shipped_files[];

/* The embedded file called `name`, or NULL. */
const struct ktune_template_file *ktune__template_file(const char *name);

/*
 * The embedded headers that `source` mentions, in table order (at most
 * KTUNE_MAX_HEADERS): what NVRTC is handed, and what a family's template
 * hash and a cubin's cache key include besides the source.  A mention in a
 * comment counts too: that costs a cache entry, where missing a real
 * include would serve cubins built from an older header.  Returns how many.
 */
int ktune__template_headers(const char *source, size_t len, const struct ktune_template_file **out);

/* sha256 of the embedded file (cached; thread-safe), or "" if there is none. */
const char *ktune__template_hash(const char *name);

#endif
