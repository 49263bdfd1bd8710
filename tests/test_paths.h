/*
 * test_paths.h - finding the programs built beside a test (the ktune CLI,
 * whose `__worker` command the tuner spawns, and the tests' fake workers).
 */
#ifndef KTUNE_TEST_PATHS_H
#define KTUNE_TEST_PATHS_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* rel is relative to the directory of the running test, e.g. "../ktune". */
static inline const char *test_program(const char *rel)
{
	static char path[4096];
	char self[4000];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return rel;
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	snprintf(path, sizeof(path), "%s/%s", self, rel);
	return path;
}

#endif
