/*
 * common.c - the helpers every module shares: failure messages, whole-file
 * reads, atomic file writes, mkdir -p, the cache and database locations,
 * SHA-256 (FIPS 180-4) and a monotonic clock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkostemp */
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int ktune__fail(struct ktune_err *e, int status, const char *fmt, ...)
{
	va_list ap;

	if (e) {
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
	}
	return status;
}

/* KTUNE_ERR_NOT_FOUND for a missing file, so that callers can tell it from a failure. */
static int errno_status(int err)
{
	return err == ENOENT ? KTUNE_ERR_NOT_FOUND : KTUNE_ERR_IO;
}

int ktune__path_check(const char *path, const char *what, struct ktune_err *e)
{
	size_t n;

	if (!path || !*path)
		return ktune__fail(e, KTUNE_ERR_INVALID, "%s: the path is empty", what);
	n = strlen(path);
	if (n >= PATH_MAX)
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "%s path '%.40s...' is %zu bytes, longer than the system allows (%d)",
				   what, path, n, PATH_MAX - 1);
	return KTUNE_OK;
}

const char *ktune__file_kind(unsigned mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a socket";
	case S_IFLNK:
		return "a symbolic link";
	}
	return "not a regular file";
}

/*
 * Opened without blocking (a FIFO with no writer would block open() for
 * good) and checked with fstat before a byte is read: only a regular file.
 */
static int read_file(const char *path, size_t max_bytes, int private, char **out, size_t *len,
		     struct ktune_err *e)
{
	struct stat st;
	char *buf = NULL, *grown;
	size_t cap, limit, n = 0;
	ssize_t r;
	int fd = -1, ret = KTUNE_OK;

	*out = NULL;
	if (len)
		*len = 0;
	if (!path || !*path)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cannot read a file with an empty path");
	if ((ret = ktune__path_check(path, "file", e)) != KTUNE_OK)
		return ret;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (private ? O_NOFOLLOW : 0));
	if (fd < 0) {
		ret = ktune__fail(e, errno_status(errno), "cannot open '%s': %s", path,
				  strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot read '%s': is a directory", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot read '%s': is %s, not a regular file",
				  path, ktune__file_kind(st.st_mode));
		goto out;
	}
	if (private && (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
		ret = ktune__fail(e, KTUNE_ERR_IO,
				  "cannot trust '%s': %s", path,
				  st.st_uid != geteuid() ? "another user owns it"
							 : "others may write to it");
		goto out;
	}
	if ((uintmax_t)st.st_size > max_bytes) {
		ret = ktune__fail(e, KTUNE_ERR_IO,
				  "cannot read '%s': %jd bytes, larger than the limit of %zu bytes",
				  path, (intmax_t)st.st_size, max_bytes);
		goto out;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);

	/* Read one byte past the limit to notice a file that grew or has no size (/proc). */
	limit = max_bytes < SIZE_MAX - 1 ? max_bytes + 1 : SIZE_MAX - 1;
	cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
	if (cap > limit)
		cap = limit;
	buf = malloc(cap + 1);
	if (!buf) {
		ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory reading '%s'", path);
		goto out;
	}
	for (;;) {
		if (n == cap) {
			if (cap >= limit)
				break;
			cap = cap < limit / 2 ? cap * 2 : limit;
			grown = realloc(buf, cap + 1);
			if (!grown) {
				ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory reading '%s'",
						  path);
				goto out;
			}
			buf = grown;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = ktune__fail(e, KTUNE_ERR_IO, "cannot read '%s': %s", path,
					  strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max_bytes) {
		ret = ktune__fail(e, KTUNE_ERR_IO,
				  "cannot read '%s': larger than the limit of %zu bytes", path,
				  max_bytes);
		goto out;
	}
	buf[n] = '\0';
	*out = buf;
	buf = NULL;
	if (len)
		*len = n;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

int ktune__read_file(const char *path, size_t max_bytes, char **out, size_t *len,
		     struct ktune_err *e)
{
	return read_file(path, max_bytes, 0, out, len, e);
}

int ktune__read_private_file(const char *path, size_t max_bytes, char **out, size_t *len,
			     struct ktune_err *e)
{
	return read_file(path, max_bytes, 1, out, len, e);
}

/*
 * The process's umask, read without changing it (umask() is not thread-safe
 * to query); 077 if it cannot be read, which errs on the private side.
 */
static mode_t current_umask(void)
{
	char line[256];
	unsigned mask;
	mode_t ret = 077;
	FILE *f;

	f = fopen("/proc/self/status", "re");
	if (!f)
		return ret;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Umask: %o", &mask) == 1) {
			ret = (mode_t)(mask & 0777);
			break;
		}
	}
	fclose(f);
	return ret;
}

/* An existing file keeps its mode; a new one gets 0666 less the umask, as open() would give. */
static mode_t new_file_mode(const char *path)
{
	struct stat st;

	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		return st.st_mode & 07777;
	return 0666 & ~current_umask();
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	ssize_t r;

	while (len > 0) {
		r = write(fd, p, len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/*
 * Removes the temp files ".<base>.tmp-XXXXXX" that a killed writer left in
 * dir: a writer holds an flock on its temp file until it is renamed, so one
 * we can lock is nobody's.  Best effort: anything odd is left alone.
 */
static void remove_stale_temps(const char *dir, const char *base)
{
	size_t blen = strlen(base);
	struct dirent *d;
	DIR *dp;
	int dfd;

	if (!(dp = opendir(dir)))
		return;
	dfd = dirfd(dp);
	while ((d = readdir(dp)) != NULL) {
		const char *n = d->d_name;
		struct stat st;
		int fd;

		if (n[0] != '.' || strncmp(n + 1, base, blen) != 0 ||
		    strncmp(n + 1 + blen, ".tmp-", 5) != 0 || strlen(n + 1 + blen + 5) != 6)
			continue;
		fd = openat(dfd, n, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dfd, n, 0); /* still locked: a writer that waits sees it gone */
		close(fd);
	}
	closedir(dp);
}

static int write_atomic(const char *path, const void *data, size_t len, int mode,
			struct ktune_err *e);

int ktune__write_file_atomic(const char *path, const void *data, size_t len,
			     struct ktune_err *e)
{
	return write_atomic(path, data, len, -1, e);
}

int ktune__write_private_file(const char *path, const void *data, size_t len,
			      struct ktune_err *e)
{
	return write_atomic(path, data, len, 0600, e);
}

/* mode -1: the mode of the file it replaces, or a new file's (0666 less the umask). */
static int write_atomic(const char *path, const void *data, size_t len, int mode,
			struct ktune_err *e)
{
	const char *base;
	char *tmp = NULL, *dir = NULL;
	struct stat st;
	size_t dirlen;
	int fd = -1, dfd, ret = KTUNE_OK, have_tmp = 0, tries;

	if (!path || !*path)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cannot write a file with an empty path");
	if ((ret = ktune__path_check(path, "output", e)) != KTUNE_OK)
		return ret;
	if (len > 0 && !data)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cannot write '%s': no data", path);
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (!*base)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cannot write '%s': is a directory", path);
	/* rename() replaces whatever is there: only a regular file may be */
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return ktune__fail(e, KTUNE_ERR_IO,
				   "cannot write '%s': it is %s, and only a regular file is replaced%s",
				   path, ktune__file_kind(st.st_mode),
				   S_ISLNK(st.st_mode) ? " (give the path it points to)" : "");

	/* The temp file is "<dir>/.<name>.tmp-XXXXXX", so that rename() stays on one filesystem. */
	dirlen = (size_t)(base - path);
	tmp = malloc(strlen(path) + sizeof(".tmp-XXXXXX") + 1);
	dir = malloc(dirlen + 2);
	if (!tmp || !dir) {
		ret = ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory writing '%s'", path);
		goto out;
	}
	if (dirlen == 0)
		strcpy(dir, ".");
	else if (dirlen == 1)
		strcpy(dir, "/");
	else
		sprintf(dir, "%.*s", (int)dirlen - 1, path);
	remove_stale_temps(dir, base);

	for (tries = 0;; tries++) {
		sprintf(tmp, "%.*s.%s.tmp-XXXXXX", (int)dirlen, path, base);
		fd = mkostemp(tmp, O_CLOEXEC);
		if (fd < 0) {
			ret = ktune__fail(e, errno_status(errno),
					  "cannot create a temporary file for '%s': %s", path,
					  strerror(errno));
			goto out;
		}
		have_tmp = 1;
		/* locked until renamed: another writer's cleanup leaves it alone */
		if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0 || st.st_nlink > 0 || tries >= 3)
			break;
		close(fd); /* removed as stale before we locked it: again */
		fd = -1;
		have_tmp = 0;
	}
	if (write_all(fd, data, len) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
		goto out;
	}
	if (fchmod(fd, mode >= 0 ? (mode_t)mode : new_file_mode(path)) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot set the mode of '%s': %s", path,
				  strerror(errno));
		goto out;
	}
	if (fsync(fd) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot sync '%s': %s", path, strerror(errno));
		goto out;
	}
	if (rename(tmp, path) != 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path,
				  strerror(errno));
		goto out;
	}
	have_tmp = 0;
	if (close(fd) != 0) {
		fd = -1;
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
		goto out;
	}
	fd = -1;

	/* Make the rename itself durable; some filesystems cannot sync a directory. */
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot open directory '%s': %s", dir,
				  strerror(errno));
		goto out;
	}
	if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)
		ret = ktune__fail(e, KTUNE_ERR_IO, "cannot sync directory '%s': %s", dir,
				  strerror(errno));
	close(dfd);
out:
	if (have_tmp)
		unlink(tmp);
	if (fd >= 0)
		close(fd);
	free(tmp);
	free(dir);
	return ret;
}

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ktune__mkdirs(const char *path, struct ktune_err *e)
{
	char *p = NULL, *s, c;
	int ret = KTUNE_OK;

	if (!path || !*path)
		return ktune__fail(e, KTUNE_ERR_INVALID, "cannot create a directory with an empty path");
	p = strdup(path);
	if (!p)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory creating '%s'", path);

	/* Create each prefix that ends before a '/' and then the whole path. */
	for (s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		if (s[-1] != '/') {
			c = *s;
			*s = '\0';
			if (mkdir(p, 0700) != 0) { /* private, as XDG asks of cache dirs */
				int err = errno;

				if (err != EEXIST && !is_dir(p)) {
					ret = ktune__fail(e, errno_status(err),
							  "cannot create directory '%s': %s", p,
							  strerror(err));
					goto out;
				}
			}
			*s = c;
		}
		if (*s == '\0')
			break;
	}
	if (!is_dir(path))
		ret = ktune__fail(e, KTUNE_ERR_IO,
				  "cannot create directory '%s': a file of that name exists", path);
out:
	free(p);
	return ret;
}

/* A malloc'd "<a><b>", refused if longer than the system allows. */
static int join_path(char **out, const char *a, const char *b, const char *what,
		     struct ktune_err *e)
{
	char *p = malloc(strlen(a) + strlen(b) + 1);
	int ret;

	*out = NULL;
	if (!p)
		return ktune__fail(e, KTUNE_ERR_NOMEM, "out of memory");
	strcpy(p, a);
	strcat(p, b);
	if ((ret = ktune__path_check(p, what, e)) != KTUNE_OK) {
		free(p);
		return ret;
	}
	*out = p;
	return KTUNE_OK;
}

int ktune__dir_trusted(const char *dir)
{
	struct stat st;
	char *parent = strdup(dir), *slash;
	int ok = 1;

	if (!parent)
		return 0;
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	else if (slash)
		slash[1] = '\0';
	else
		strcpy(parent, ".");
	if (stat(dir, &st) == 0 &&
	    (!S_ISDIR(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0) ||
	     (st.st_mode & (S_IWGRP | S_IWOTH))))
		ok = 0;
	/* a parent others may write to is fine when sticky (/tmp): they cannot rename ours */
	if (ok && stat(parent, &st) == 0 &&
	    ((st.st_uid != geteuid() && st.st_uid != 0) ||
	     ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))))
		ok = 0;
	free(parent);
	return ok;
}

int ktune__cache_dir(char **out, struct ktune_err *e)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char shared[64];

	if (xdg && *xdg)
		return join_path(out, xdg, "/ktune", "cache", e);
	if (home && *home)
		return join_path(out, home, "/.cache/ktune", "cache", e);
	/* no home: a folder of this user's own under /tmp, never one shared by all */
	snprintf(shared, sizeof(shared), "/tmp/ktune-cache-%lu", (unsigned long)geteuid());
	return join_path(out, shared, "", "cache", e);
}

int ktune__default_db_path(char **out, struct ktune_err *e)
{
	const char *env = getenv("KTUNE_DB");
	char *dir = NULL;
	int ret;

	*out = NULL;
	if (env && *env)
		return join_path(out, env, "", "KTUNE_DB", e);
	if ((ret = ktune__cache_dir(&dir, e)) != KTUNE_OK)
		return ret;
	/* results steer what runs: the default folder is trusted as the cubin cache is */
	if (!ktune__dir_trusted(dir))
		ret = ktune__fail(e, KTUNE_ERR_IO,
				  "the default database folder '%s' (or its parent) belongs to another user or others may write to it: give --db or set KTUNE_DB",
				  dir);
	else
		ret = join_path(out, dir, "/ktune.db", "database", e);
	free(dir);
	return ret;
}

/* SHA-256 as FIPS 180-4 section 6.2 gives it. */

static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static uint32_t rotr(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

/* Processes one 64-byte block into the hash state h. */
static void sha256_block(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64], a, b, c, d, f, g, hh, x, t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}

	a = h[0], b = h[1], c = h[2], d = h[3];
	x = h[4], f = h[5], g = h[6], hh = h[7];
	for (i = 0; i < 64; i++) {
		t1 = hh + (rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25)) + ((x & f) ^ (~x & g)) +
		     sha256_k[i] + w[i];
		t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		hh = g;
		g = f;
		f = x;
		x = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += x, h[5] += f, h[6] += g, h[7] += hh;
}

void ktune__sha256_hex(const void *data, size_t len, char out[65])
{
	static const char hex[] = "0123456789abcdef";
	uint32_t h[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};
	const unsigned char *p = data;
	unsigned char tail[128];
	size_t full = len - len % 64, rest = len % 64, ntail, i;
	uint64_t bits = (uint64_t)len * 8;

	for (i = 0; i < full; i += 64)
		sha256_block(h, p + i);

	/* Padding: 0x80, zeros, then the message length in bits, big-endian, in 1 or 2 blocks. */
	memset(tail, 0, sizeof(tail));
	if (rest > 0)
		memcpy(tail, p + full, rest);
	tail[rest] = 0x80;
	ntail = rest < 56 ? 64 : 128;
	for (i = 0; i < 8; i++)
		tail[ntail - 1 - i] = (unsigned char)(bits >> (8 * i));
	sha256_block(h, tail);
	if (ntail == 128)
		sha256_block(h, tail + 64);

	for (i = 0; i < 32; i++) {
		unsigned byte = (h[i / 4] >> (24 - 8 * (i % 4))) & 0xff;

		out[2 * i] = hex[byte >> 4];
		out[2 * i + 1] = hex[byte & 0xf];
	}
	out[64] = '\0';
}

struct parallel {
	int n, next; /* next: guarded by lock */
	void (*fn)(int i, void *arg);
	void *arg;
	pthread_mutex_t lock;
};

static void *parallel_thread(void *arg)
{
	struct parallel *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		int i = p->next++;
		pthread_mutex_unlock(&p->lock);
		if (i >= p->n)
			return NULL;
		p->fn(i, p->arg);
	}
}

void ktune__parallel_for(int n, int threads, void (*fn)(int i, void *arg), void *arg)
{
	struct parallel p = { n, 0, fn, arg, PTHREAD_MUTEX_INITIALIZER };
	pthread_t tids[256];
	int started = 0;

	if (threads <= 0)
		threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (threads > 256)
		threads = 256;
	if (threads > n)
		threads = n;
	for (int i = 0; i < threads; i++)
		if (!pthread_create(&tids[started], NULL, parallel_thread, &p))
			started++;
	if (!started)
		parallel_thread(&p);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
}

double ktune__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
