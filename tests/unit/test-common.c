/*
 * test-common.c - the shared helpers: messages, file reads and atomic
 * writes, mkdir -p, cache and database paths, SHA-256, the clock, and the
 * status strings.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "test_util.h"

static int setup_tmp(void **state)
{
	return test_scratch_setup(state, "ktune-test-common");
}

static void path_in(const struct test_scratch *t, const char *name, char *buf, size_t len)
{
	assert_true((size_t)snprintf(buf, len, "%s/%s", t->dir, name) < len);
}

static void write_bytes(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static int count_entries(const char *dir)
{
	struct dirent *de;
	int n = 0;
	DIR *d = opendir(dir);

	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

static void test_common__fail_formats_and_returns_status(void **state)
{
	struct ktune_err e = { "" };
	char big[6000];

	(void)state;
	assert_int_equal(ktune__fail(&e, KTUNE_ERR_IO, "cannot open '%s': %s", "x.db", "gone"),
			 KTUNE_ERR_IO);
	assert_string_equal(e.msg, "cannot open 'x.db': gone");
	assert_int_equal(ktune__fail(NULL, KTUNE_ERR_DB, "no buffer %d", 1), KTUNE_ERR_DB);

	/* A message longer than the buffer is cut, still terminated. */
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(ktune__fail(&e, KTUNE_ERR_PARSE, "%s", big), KTUNE_ERR_PARSE);
	assert_int_equal(strlen(e.msg), sizeof(e.msg) - 1);
}

/* FIPS 180-4 / NIST CSRC example vectors. */
static void test_common__sha256_test_vectors(void **state)
{
	char hex[65], *million;

	(void)state;
	ktune__sha256_hex("", 0, hex);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	ktune__sha256_hex(NULL, 0, hex);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	ktune__sha256_hex("abc", 3, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	ktune__sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
	assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	ktune__sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
			  "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu", 112, hex);
	assert_string_equal(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

	million = malloc(1000000);
	assert_non_null(million);
	memset(million, 'a', 1000000);
	ktune__sha256_hex(million, 1000000, hex);
	free(million);
	assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Lengths around the padding boundaries (55, 56, 63, 64, 65), checked against sha256sum. */
static void test_common__sha256_padding_boundaries(void **state)
{
	static const struct {
		size_t len;
		const char *hex;
	} cases[] = {
		{ 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
		{ 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
		{ 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34" },
		{ 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
		{ 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0" },
	};
	char buf[65], hex[65];
	size_t i;

	(void)state;
	memset(buf, 'a', sizeof(buf));
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ktune__sha256_hex(buf, cases[i].len, hex);
		assert_string_equal(hex, cases[i].hex);
	}
}

static void test_common__read_file_reads_whole_file(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], *data = NULL;
	size_t len = 99;

	path_in(t, "f.txt", path, sizeof(path));
	write_bytes(path, "hello\0world", 11);
	assert_int_equal(ktune__read_file(path, 1024, &data, &len, &e), KTUNE_OK);
	assert_int_equal(len, 11);
	assert_memory_equal(data, "hello\0world", 11);
	assert_int_equal(data[11], '\0');
	free(data);

	/* An empty file is "" of length 0, not NULL. */
	write_bytes(path, "", 0);
	assert_int_equal(ktune__read_file(path, 1024, &data, &len, &e), KTUNE_OK);
	assert_non_null(data);
	assert_int_equal(len, 0);
	assert_string_equal(data, "");
	free(data);
}

static void test_common__read_file_refuses_over_limit(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], content[100], *data = (char *)1;
	size_t len;

	path_in(t, "big", path, sizeof(path));
	memset(content, 'x', sizeof(content));
	write_bytes(path, content, sizeof(content));

	assert_int_equal(ktune__read_file(path, 99, &data, &len, &e), KTUNE_ERR_IO);
	assert_null(data);
	assert_non_null(strstr(e.msg, path));
	assert_non_null(strstr(e.msg, "limit of 99 bytes"));

	/* Exactly at the limit is fine. */
	assert_int_equal(ktune__read_file(path, 100, &data, &len, &e), KTUNE_OK);
	assert_int_equal(len, 100);
	free(data);
}

/* A file whose size stat() does not know (procfs) is read by growing the buffer. */
static void test_common__read_file_reads_unsized_file(void **state)
{
	struct ktune_err e = { "" };
	char *data = NULL;
	size_t len = 0;

	(void)state;
	assert_int_equal(ktune__read_file("/proc/self/maps", 1 << 24, &data, &len, &e), KTUNE_OK);
	assert_true(len > 0);
	assert_int_equal(strlen(data), len);
	free(data);

	assert_int_equal(ktune__read_file("/proc/self/maps", 10, &data, &len, &e), KTUNE_ERR_IO);
	assert_null(data);
	assert_non_null(strstr(e.msg, "limit of 10 bytes"));
}

static void test_common__read_file_refuses_directory_and_missing(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], *data = NULL;

	assert_int_equal(ktune__read_file(t->dir, 1 << 20, &data, NULL, &e), KTUNE_ERR_IO);
	assert_null(data);
	assert_non_null(strstr(e.msg, "is a directory"));
	assert_non_null(strstr(e.msg, t->dir));

	path_in(t, "missing", path, sizeof(path));
	assert_int_equal(ktune__read_file(path, 1 << 20, &data, NULL, &e), KTUNE_ERR_NOT_FOUND);
	assert_null(data);
	assert_non_null(strstr(e.msg, path));
}

static void test_common__write_file_atomic_replaces_without_temp_files(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], *data = NULL;
	struct stat st;
	size_t len;

	path_in(t, "out.bin", path, sizeof(path));
	assert_int_equal(ktune__write_file_atomic(path, "first", 5, &e), KTUNE_OK);
	assert_int_equal(ktune__read_file(path, 100, &data, &len, &e), KTUNE_OK);
	assert_string_equal(data, "first");
	free(data);

	/* Replacing keeps the file's mode and leaves exactly one file in the directory. */
	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(ktune__write_file_atomic(path, "second!", 7, &e), KTUNE_OK);
	assert_int_equal(ktune__read_file(path, 100, &data, &len, &e), KTUNE_OK);
	assert_int_equal(len, 7);
	assert_string_equal(data, "second!");
	free(data);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	assert_int_equal(count_entries(t->dir), 1);

	/* An empty file is a file. */
	assert_int_equal(ktune__write_file_atomic(path, NULL, 0, &e), KTUNE_OK);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(count_entries(t->dir), 1);
}

static void test_common__write_file_atomic_failure_leaves_nothing(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], sub[TEST_PATH_MAX];

	/* The target is a directory: rename fails, the temp file must go. */
	path_in(t, "sub", sub, sizeof(sub));
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(ktune__write_file_atomic(sub, "x", 1, &e), KTUNE_ERR_IO);
	assert_non_null(strstr(e.msg, sub));
	assert_int_equal(count_entries(t->dir), 1);
	assert_int_equal(count_entries(sub), 0);

	/* The directory does not exist. */
	path_in(t, "nodir/out.bin", path, sizeof(path));
	assert_int_not_equal(ktune__write_file_atomic(path, "x", 1, &e), KTUNE_OK);
	assert_non_null(strstr(e.msg, path));
	assert_int_equal(count_entries(t->dir), 1);
}

static void test_common__mkdirs_creates_nested_and_accepts_existing(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], file[TEST_PATH_MAX];
	struct stat st;

	path_in(t, "a/b//c/", path, sizeof(path));
	assert_int_equal(ktune__mkdirs(path, &e), KTUNE_OK);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(ktune__mkdirs(path, &e), KTUNE_OK);

	/* A file in the way is an error that names it. */
	path_in(t, "a/file", file, sizeof(file));
	write_bytes(file, "x", 1);
	assert_int_not_equal(ktune__mkdirs(file, &e), KTUNE_OK);
	assert_non_null(strstr(e.msg, file));
	path_in(t, "a/file/below", path, sizeof(path));
	assert_int_not_equal(ktune__mkdirs(path, &e), KTUNE_OK);
}

/* Sets or unsets (value NULL) an environment variable. */
static void env(const char *name, const char *value)
{
	if (value)
		assert_int_equal(setenv(name, value, 1), 0);
	else
		assert_int_equal(unsetenv(name), 0);
}

struct saved_env {
	char *xdg, *home, *db;
};

static char *dup_env(const char *name)
{
	const char *v = getenv(name);

	return v ? strdup(v) : NULL;
}

static int setup_env(void **state)
{
	struct saved_env *s = calloc(1, sizeof(*s));

	if (!s)
		return -1;
	s->xdg = dup_env("XDG_CACHE_HOME");
	s->home = dup_env("HOME");
	s->db = dup_env("KTUNE_DB");
	*state = s;
	return 0;
}

static int teardown_env(void **state)
{
	struct saved_env *s = *state;

	s->xdg ? setenv("XDG_CACHE_HOME", s->xdg, 1) : unsetenv("XDG_CACHE_HOME");
	s->home ? setenv("HOME", s->home, 1) : unsetenv("HOME");
	s->db ? setenv("KTUNE_DB", s->db, 1) : unsetenv("KTUNE_DB");
	free(s->xdg);
	free(s->home);
	free(s->db);
	free(s);
	return 0;
}

static void expect_path(int (*fn)(char **, struct ktune_err *), const char *want)
{
	struct ktune_err e = { "" };
	char *p = NULL;

	if (fn(&p, &e) != KTUNE_OK)
		fail_msg("%s", e.msg);
	assert_string_equal(p, want);
	free(p);
}

static void test_common__cache_dir_honours_env(void **state)
{
	struct ktune_err e = { "" };
	char want[64], *p = NULL, *big;

	(void)state;
	env("XDG_CACHE_HOME", "/xdg/cache");
	env("HOME", "/home/someone");
	expect_path(ktune__cache_dir, "/xdg/cache/ktune");
	env("XDG_CACHE_HOME", "");
	expect_path(ktune__cache_dir, "/home/someone/.cache/ktune");
	env("XDG_CACHE_HOME", NULL);
	expect_path(ktune__cache_dir, "/home/someone/.cache/ktune");

	/* no home: a folder of this user's own, never one all users share */
	env("HOME", NULL);
	snprintf(want, sizeof(want), "/tmp/ktune-cache-%lu", (unsigned long)geteuid());
	expect_path(ktune__cache_dir, want);

	/* longer than the system allows: an error, never a cut path */
	big = malloc(5000);
	assert_non_null(big);
	memset(big, 'a', 4999);
	big[0] = '/';
	big[4999] = '\0';
	env("HOME", big);
	assert_int_not_equal(ktune__cache_dir(&p, &e), KTUNE_OK);
	assert_null(p);
	assert_non_null(strstr(e.msg, "longer than the system allows"));
	free(big);
}

static void test_common__default_db_path_honours_env(void **state)
{
	(void)state;
	env("XDG_CACHE_HOME", "/xdg/cache");
	env("KTUNE_DB", "/data/tuning.db");
	expect_path(ktune__default_db_path, "/data/tuning.db");
	env("KTUNE_DB", "");
	expect_path(ktune__default_db_path, "/xdg/cache/ktune/ktune.db");
	env("KTUNE_DB", NULL);
	env("XDG_CACHE_HOME", NULL);
	env("HOME", "/home/someone");
	expect_path(ktune__default_db_path, "/home/someone/.cache/ktune/ktune.db");
}

/* Issue 30: the default database folder gets the cache's ownership check. */
static void test_common__default_db_folder_must_be_trusted(void **state)
{
	struct test_scratch *t = NULL;
	struct ktune_err e = { "" };
	char cache[TEST_PATH_MAX], dir[TEST_PATH_MAX + 16], *p = NULL;

	(void)state;
	assert_int_equal(test_scratch_setup((void **)&t, "ktune-test-dbdir"), 0);
	snprintf(cache, sizeof(cache), "%s/cache", t->dir);
	snprintf(dir, sizeof(dir), "%s/ktune", cache);
	assert_int_equal(ktune__mkdirs(dir, &e), KTUNE_OK);
	env("KTUNE_DB", NULL);
	env("XDG_CACHE_HOME", cache);
	assert_int_equal(ktune__default_db_path(&p, &e), KTUNE_OK);
	free(p);
	p = NULL;
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_not_equal(ktune__default_db_path(&p, &e), KTUNE_OK);
	assert_null(p);
	assert_non_null(strstr(e.msg, "others may write to it"));
	assert_int_equal(chmod(dir, 0700), 0);
	assert_int_equal(chmod(cache, 0777), 0); /* the parent too */
	assert_int_not_equal(ktune__default_db_path(&p, &e), KTUNE_OK);
	assert_int_equal(chmod(cache, 01777), 0); /* sticky, as /tmp: fine */
	assert_int_equal(ktune__default_db_path(&p, &e), KTUNE_OK);
	free(p);
	assert_int_equal(chmod(cache, 0700), 0);
	assert_true(ktune__dir_trusted(dir));
	test_scratch_teardown((void **)&t);
}

/* Issue 30: a FIFO with no writer would block open() for good; a device is no file either. */
static void test_common__read_file_refuses_what_is_not_a_regular_file(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], *data = NULL;

	path_in(t, "fifo", path, sizeof(path));
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(10); /* a hang fails the test rather than the run */
	assert_int_equal(ktune__read_file(path, 1 << 20, &data, NULL, &e), KTUNE_ERR_IO);
	alarm(0);
	assert_null(data);
	assert_non_null(strstr(e.msg, "is a FIFO, not a regular file"));
	assert_int_equal(ktune__read_file("/dev/null", 1 << 20, &data, NULL, &e), KTUNE_ERR_IO);
	assert_non_null(strstr(e.msg, "is a character device"));
}

/* Issue 30: a path longer than PATH_MAX is refused, never cut to another file's. */
static void test_common__overlong_paths_are_refused(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char *big = malloc(PATH_MAX + 64), *data = NULL;

	assert_non_null(big);
	snprintf(big, PATH_MAX + 64, "%s/x", t->dir);
	write_bytes(big, "x", 1);
	/* the first PATH_MAX - 1 bytes name that file: cut, it would be read */
	memset(big + strlen(big), '/', PATH_MAX + 63 - strlen(big));
	big[PATH_MAX + 12] = '\0';
	assert_int_equal(ktune__path_check(big, "database", &e), KTUNE_ERR_INVALID);
	assert_non_null(strstr(e.msg, "longer than the system allows"));
	assert_int_not_equal(ktune__read_file(big, 1 << 20, &data, NULL, &e), KTUNE_OK);
	assert_null(data);
	assert_non_null(strstr(e.msg, "longer than the system allows"));
	assert_int_not_equal(ktune__write_file_atomic(big, "y", 1, &e), KTUNE_OK);
	assert_non_null(strstr(e.msg, "longer than the system allows"));
	free(big);
}

/* Issue 30: -o writes over a regular file only: a link, a FIFO or a directory stays. */
static void test_common__write_file_atomic_replaces_regular_files_only(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char target[TEST_PATH_MAX], link[TEST_PATH_MAX], fifo[TEST_PATH_MAX], sub[TEST_PATH_MAX];
	char *data = NULL;
	struct stat st;

	path_in(t, "target", target, sizeof(target));
	path_in(t, "link", link, sizeof(link));
	path_in(t, "fifo", fifo, sizeof(fifo));
	path_in(t, "sub", sub, sizeof(sub));
	write_bytes(target, "old", 3);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(mkdir(sub, 0700), 0);

	assert_int_equal(ktune__write_file_atomic(link, "new", 3, &e), KTUNE_ERR_IO);
	assert_non_null(strstr(e.msg, "is a symbolic link, and only a regular file is replaced"));
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(ktune__read_file(target, 16, &data, NULL, &e), KTUNE_OK);
	assert_string_equal(data, "old");
	free(data);
	assert_int_equal(ktune__write_file_atomic(fifo, "new", 3, &e), KTUNE_ERR_IO);
	assert_non_null(strstr(e.msg, "is a FIFO"));
	assert_int_equal(lstat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	assert_int_equal(ktune__write_file_atomic(sub, "new", 3, &e), KTUNE_ERR_IO);
	assert_non_null(strstr(e.msg, "is a directory"));
	assert_int_equal(ktune__write_file_atomic(target, "new", 3, &e), KTUNE_OK);
	assert_int_equal(count_entries(t->dir), 4);
}

/*
 * Issue 30: a writer killed mid-way leaves its temp file; the next write of
 * the same file removes it, but never one a live writer holds (locked).
 */
static void test_common__write_file_atomic_removes_stale_temps(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], stale[TEST_PATH_MAX], live[TEST_PATH_MAX], other[TEST_PATH_MAX];
	int fd;

	path_in(t, "out.yaml", path, sizeof(path));
	path_in(t, ".out.yaml.tmp-AbC123", stale, sizeof(stale));
	path_in(t, ".out.yaml.tmp-LiVe99", live, sizeof(live));
	path_in(t, ".other.tmp-AbC123", other, sizeof(other));
	write_bytes(stale, "half", 4);
	write_bytes(live, "half", 4);
	write_bytes(other, "half", 4);
	fd = open(live, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	assert_int_equal(ktune__write_file_atomic(path, "x", 1, &e), KTUNE_OK);
	assert_int_not_equal(access(stale, F_OK), 0);
	assert_int_equal(access(live, F_OK), 0);
	assert_int_equal(access(other, F_OK), 0);
	close(fd);
	assert_int_equal(ktune__write_file_atomic(path, "y", 1, &e), KTUNE_OK);
	assert_int_not_equal(access(live, F_OK), 0);
	assert_int_equal(count_entries(t->dir), 2); /* out.yaml and the other file's */
}

/* Issue 30: a cached file is code: only ours, writable by no one else. */
static void test_common__read_private_file_refuses_others_writable(void **state)
{
	struct test_scratch *t = *state;
	struct ktune_err e = { "" };
	char path[TEST_PATH_MAX], link[TEST_PATH_MAX], *data = NULL;

	path_in(t, "x.cubin", path, sizeof(path));
	path_in(t, "y.cubin", link, sizeof(link));
	write_bytes(path, "code", 4);
	assert_int_equal(chmod(path, 0666), 0);
	assert_int_equal(ktune__read_private_file(path, 64, &data, NULL, &e), KTUNE_ERR_IO);
	assert_null(data);
	assert_non_null(strstr(e.msg, "others may write to it"));
	assert_int_equal(chmod(path, 0620), 0);
	assert_int_equal(ktune__read_private_file(path, 64, &data, NULL, &e), KTUNE_ERR_IO);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(ktune__read_private_file(path, 64, &data, NULL, &e), KTUNE_OK);
	assert_string_equal(data, "code");
	free(data);
	data = NULL;
	assert_int_equal(symlink(path, link), 0);
	assert_int_not_equal(ktune__read_private_file(link, 64, &data, NULL, &e), KTUNE_OK);
	assert_null(data);
}

static void test_common__now_is_monotonic(void **state)
{
	double a, b;

	(void)state;
	a = ktune__now();
	usleep(2000);
	b = ktune__now();
	assert_true(a > 0);
	assert_true(b - a >= 0.0015);
	assert_true(b - a < 5.0);
}

static void test_common__status_strings_follow_the_map(void **state)
{
	(void)state;
	assert_string_equal(ktune_strerror(KTUNE_OK), "success");
	assert_string_equal(ktune_strerror(KTUNE_ERR_DB), "tuning database error");
	assert_string_equal(ktune_status_name(KTUNE_ERR_NOT_FOUND), "ERR_NOT_FOUND");
	assert_string_equal(ktune_status_name(KTUNE_ERR_VERIFY), "ERR_VERIFY");
	assert_string_equal(ktune_status_name(KTUNE_OK), "OK");
	assert_string_equal(ktune_strerror((ktune_status)-1000), "unknown error");
	assert_string_equal(ktune_status_name((ktune_status)42), "UNKNOWN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_common__fail_formats_and_returns_status),
		cmocka_unit_test(test_common__sha256_test_vectors),
		cmocka_unit_test(test_common__sha256_padding_boundaries),
		cmocka_unit_test_setup_teardown(test_common__read_file_reads_whole_file,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__read_file_refuses_over_limit,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test(test_common__read_file_reads_unsized_file),
		cmocka_unit_test_setup_teardown(test_common__read_file_refuses_directory_and_missing,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__write_file_atomic_replaces_without_temp_files,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__write_file_atomic_failure_leaves_nothing,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__mkdirs_creates_nested_and_accepts_existing,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__cache_dir_honours_env, setup_env,
						teardown_env),
		cmocka_unit_test_setup_teardown(test_common__default_db_path_honours_env, setup_env,
						teardown_env),
		cmocka_unit_test_setup_teardown(test_common__default_db_folder_must_be_trusted,
						setup_env, teardown_env),
		cmocka_unit_test_setup_teardown(test_common__read_file_refuses_what_is_not_a_regular_file,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__overlong_paths_are_refused, setup_tmp,
						test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__write_file_atomic_replaces_regular_files_only,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__write_file_atomic_removes_stale_temps,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test_setup_teardown(test_common__read_private_file_refuses_others_writable,
						setup_tmp, test_scratch_teardown),
		cmocka_unit_test(test_common__now_is_monotonic),
		cmocka_unit_test(test_common__status_strings_follow_the_map),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
