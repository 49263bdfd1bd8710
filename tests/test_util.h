/*
 * test_util.h - what the test programs share: the programs built beside
 * them (the ktune CLI, whose `__worker` command the tuner spawns, and the
 * tests' fake workers), and scratch directories (also as a cmocka fixture).
 */
#ifndef KTUNE_TEST_UTIL_H
#define KTUNE_TEST_UTIL_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/*
 * Room for any path a test builds: a scratch directory of up to PATH_MAX
 * bytes and a file name in it.  The build runs the tests under a scratch
 * base of over 150 characters (tests/CMakeLists.txt), so that a clone at a
 * long path is what every test exercises.
 */
#define TEST_PATH_MAX (PATH_MAX + 256)

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

/* A fresh directory "<$KTUNE_TEST_TMP or /tmp>/<name>-XXXXXX" into out; 0 or -1. */
static inline int test_tmp_dir(const char *name, char *out, size_t len)
{
	const char *base = getenv("KTUNE_TEST_TMP");
	if (base && *base)
		ktune__mkdirs(base, NULL);
	if ((size_t)snprintf(out, len, "%s/%s-XXXXXX", base && *base ? base : "/tmp", name) >= len)
		return -1; /* a cut template would make some other directory */
	return mkdtemp(out) ? 0 : -1;
}

/* rm -r path. */
static inline void test_remove_tree(const char *path)
{
	struct dirent *de;
	char sub[TEST_PATH_MAX];
	DIR *d = opendir(path);

	if (!d) {
		unlink(path);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < (int)sizeof(sub))
			test_remove_tree(sub);
	}
	closedir(d);
	rmdir(path);
}

/* A test's scratch directory, as cmocka state, with the database paths tests use in it. */
struct test_scratch {
	char dir[PATH_MAX];
	char db[TEST_PATH_MAX];  /* <dir>/t.db */
	char db2[TEST_PATH_MAX]; /* <dir>/t2.db: a second database, for moving results between two */
};

/* Setup: a fresh scratch directory "<name>-XXXXXX" (see test_tmp_dir) into *state. */
static inline int test_scratch_setup(void **state, const char *name)
{
	struct test_scratch *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	if (test_tmp_dir(name, t->dir, sizeof(t->dir))) {
		free(t);
		return -1;
	}
	snprintf(t->db, sizeof(t->db), "%s/t.db", t->dir);
	snprintf(t->db2, sizeof(t->db2), "%s/t2.db", t->dir);
	*state = t;
	return 0;
}

/* Teardown: the scratch directory goes, with everything in it. */
static inline int test_scratch_teardown(void **state)
{
	struct test_scratch *t = *state;

	test_remove_tree(t->dir);
	free(t);
	return 0;
}

#endif
