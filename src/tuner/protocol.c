/*
 * protocol.c - framing the tuner's messages to and from its worker.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tuner/protocol.h"

struct header {
	uint32_t type;
	uint32_t len;
};

static int send_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int ktune__msg_send(int fd, int type, const void *payload, size_t len)
{
	struct header h = { (uint32_t)type, (uint32_t)len };
	if (len > KTUNE_MSG_MAX)
		return -1;
	if (send_all(fd, &h, sizeof(h)))
		return -1;
	return len ? send_all(fd, payload, len) : 0;
}

/* Waits until fd is readable or the deadline passes. */
static int wait_readable(int fd, double deadline)
{
	for (;;) {
		int ms = -1;
		if (deadline > 0) {
			double left = deadline - ktune__now();
			if (left <= 0)
				return KTUNE_RECV_TIMEOUT;
			ms = (int)(left * 1000) + 1;
		}
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, ms);
		if (n > 0)
			return KTUNE_RECV_OK;
		if (n < 0 && errno != EINTR)
			return KTUNE_RECV_EOF;
	}
}

static int recv_all(int fd, double deadline, void *data, size_t len)
{
	char *p = data;
	while (len) {
		int w = wait_readable(fd, deadline);
		if (w)
			return w;
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return KTUNE_RECV_EOF;
		p += n;
		len -= (size_t)n;
	}
	return KTUNE_RECV_OK;
}

int ktune__msg_recv(int fd, double deadline, int *type, void *buf, size_t cap, size_t *len)
{
	struct header h;
	int rc = recv_all(fd, deadline, &h, sizeof(h));
	if (rc)
		return rc;
	if (h.len > cap || h.len > KTUNE_MSG_MAX)
		return -1;
	if ((rc = recv_all(fd, deadline, buf, h.len)))
		return rc;
	*type = (int)h.type;
	*len = h.len;
	return KTUNE_RECV_OK;
}
