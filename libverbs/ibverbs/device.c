/*
 * uroce's libibverbs.so.1: the verbs API of rdma-core 44 over the uroce
 * daemon's protocol (proto/SPEC.md). A program linked against Debian's
 * libibverbs runs on it unchanged, selected with LD_LIBRARY_PATH; its
 * devices are the daemons' sockets, its work requests go into rings in
 * memory shared with the daemon.
 *
 * Build (system gcc, Debian's libibverbs-dev headers), from this
 * directory:
 *
 *   gcc -O2 -g -Wall -Wextra -fPIC -shared -pthread \
 *       -Wl,--version-script=libibverbs.map -Wl,-soname,libibverbs.so.1 \
 *       -Wl,-z,now -Wl,-z,defs -o libibverbs.so.1 *.c
 *
 * and run a program with LD_LIBRARY_PATH pointing at the directory that
 * holds libibverbs.so.1.
 *
 * Environment:
 *   UROCE_SOCKET  a daemon's socket, or a colon-separated list of them
 *                 (default: every socket /run/uroce/NAME.sock)
 *   UROCE_MR      "process": register all memory as process memory,
 *                 never moving buffers onto a memfd
 *   UROCE_DEBUG   print what the library does and the daemon's error
 *                 messages on stderr
 *
 * This file: devices, the control socket, asynchronous events.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <endian.h>

#include "uverbs.h"

int uv_debug_on = -1;

static void debug_init(void)
{
	if (uv_debug_on < 0) {
		const char *e = getenv("UROCE_DEBUG");
		uv_debug_on = e && *e && strcmp(e, "0") != 0;
	}
}

void uv_debug(const char *fmt, ...)
{
	debug_init();
	if (!uv_debug_on)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "uroce libibverbs: %s\n", line);
}

/* The control socket. */

/* A connection being spoken on: a context's, or one a probe opened. */
struct conn {
	int sock;
	uint32_t *seq;
	uint8_t *buf;
	struct uv_context *ctx; /* for events; NULL for a probe */
};

static void mark_gone(struct uv_context *c)
{
	if (!c)
		return;
	atomic_store(&c->gone, 1);
	pthread_mutex_lock(&c->ev_mu);
	int queue = !c->fatal_queued;
	c->fatal_queued = 1;
	pthread_mutex_unlock(&c->ev_mu);
	if (queue) {
		struct ibv_async_event ev = {.event_type = IBV_EVENT_DEVICE_FATAL};
		ev.element.port_num = 1;
		uv_queue_event(c, &ev);
		uv_debug("%s: the daemon is gone", c->dev->dev.name);
	}
}

void uv_queue_event(struct uv_context *c, const struct ibv_async_event *ev)
{
	pthread_mutex_lock(&c->ev_mu);
	if (c->ev_n == UV_EVQ_LEN) { /* drop the oldest */
		c->ev_head = (c->ev_head + 1) % UV_EVQ_LEN;
		c->ev_n--;
	}
	c->evq[(c->ev_head + c->ev_n) % UV_EVQ_LEN] = *ev;
	c->ev_n++;
	pthread_mutex_unlock(&c->ev_mu);
}

/* An AsyncEvent from the daemon, as ibv_get_async_event reports it. */
static void async_event(struct uv_context *c, const struct up_async_event *ae)
{
	struct ibv_async_event ev = {.event_type = ae->type};
	switch (ae->type) {
	case IBV_EVENT_CQ_ERR: {
		struct uv_cq *cq = uv_cq_by_handle(c, ae->handle);
		if (!cq)
			return;
		cq->async_reported++;
		ev.element.cq = &cq->cq;
		break;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct uv_qp *qp = uv_qp_by_handle(c, ae->handle);
		if (!qp)
			return;
		qp->async_reported++;
		ev.element.qp = &qp->qp;
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct uv_srq *srq = uv_srq_by_handle(c, ae->handle);
		if (!srq)
			return;
		srq->async_reported++;
		ev.element.srq = &srq->srq;
		break;
	}
	case IBV_EVENT_DEVICE_FATAL:
		mark_gone(c);
		return;
	default:
		ev.element.port_num = 1;
		break;
	}
	uv_queue_event(c, &ev);
}

/* A message with seq 0: an event. */
static void handle_event(struct conn *k, const struct up_header *h, const uint8_t *body)
{
	if (!k->ctx)
		return;
	if (h->op == UP_OP_EVENT_DEVICE_GONE) {
		mark_gone(k->ctx);
	} else if (h->op == UP_OP_EVENT_ASYNC) {
		struct up_async_event ae = {0};
		memcpy(&ae, body, h->len < sizeof(ae) ? h->len : sizeof(ae));
		async_event(k->ctx, &ae);
	}
}

/* recvmsg of one message and the descriptors that came with it. */
static ssize_t recv_msg(int sock, uint8_t *buf, int flags, int fds[4], int *nfds)
{
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {.iov_base = buf, .iov_len = UP_MAX_MESSAGE};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b, .msg_controllen = sizeof(cbuf.b)};
	*nfds = 0;
	ssize_t n = recvmsg(sock, &m, flags | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (*nfds < 4)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if (m.msg_flags & MSG_TRUNC) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		errno = EPROTO;
		return -1;
	}
	return n;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static int wait_fd(int fd, short what)
{
	struct pollfd p = {.fd = fd, .events = what};
	int r;
	do
		r = poll(&p, 1, -1);
	while (r < 0 && errno == EINTR);
	return r;
}

/*
 * One request and its response (events that come first are kept). It
 * returns 0 or an errno value: the daemon's, or EIO when the connection
 * is gone.
 */
static int xchg(struct conn *k, uint16_t op, const void *req, size_t reqlen, int fd_in, void *resp,
		size_t resplen, int *fd_out)
{
	if (fd_out)
		*fd_out = -1;
	if (reqlen > UP_MAX_MESSAGE - UP_HEADER_LEN)
		return EINVAL;
	uint32_t seq = ++*k->seq;
	if (seq == 0)
		seq = ++*k->seq;
	struct up_header h = {.op = op, .seq = seq, .len = reqlen};
	memcpy(k->buf, &h, sizeof(h));
	if (reqlen)
		memcpy(k->buf + UP_HEADER_LEN, req, reqlen);
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {.iov_base = k->buf, .iov_len = UP_HEADER_LEN + reqlen};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd_in >= 0) {
		memset(&cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf.b;
		m.msg_controllen = sizeof(cbuf.b);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd_in, sizeof(int));
	}
	for (;;) {
		if (sendmsg(k->sock, &m, MSG_NOSIGNAL) >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) { /* a program made the socket (async_fd) non-blocking */
			wait_fd(k->sock, POLLOUT);
			continue;
		}
		uv_debug("send %u: %s", op, strerror(errno));
		mark_gone(k->ctx);
		return EIO;
	}
	for (;;) {
		int fds[4], nfds;
		ssize_t n = recv_msg(k->sock, k->buf, 0, fds, &nfds);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			wait_fd(k->sock, POLLIN);
			continue;
		}
		if (n < 0 && errno == EPROTO) {
			uv_debug("op %u: the daemon sent an oversized message", op);
			return EPROTO;
		}
		if (n <= 0) {
			uv_debug("op %u: connection lost (%s)", op, n < 0 ? strerror(errno) : "closed");
			mark_gone(k->ctx);
			return EIO;
		}
		struct up_header rh;
		if ((size_t)n < UP_HEADER_LEN) {
			close_fds(fds, nfds);
			return EPROTO;
		}
		memcpy(&rh, k->buf, sizeof(rh));
		if (rh.len != (size_t)n - UP_HEADER_LEN) {
			close_fds(fds, nfds);
			uv_debug("op %u: malformed response", op);
			return EPROTO;
		}
		const uint8_t *body = k->buf + UP_HEADER_LEN;
		if (rh.seq == 0) {
			close_fds(fds, nfds);
			handle_event(k, &rh, body);
			continue;
		}
		if (rh.seq != seq || rh.op != op) {
			close_fds(fds, nfds);
			uv_debug("op %u #%u: the daemon answered op %u #%u", op, seq, rh.op, rh.seq);
			return EPROTO;
		}
		if (rh.err != 0) {
			close_fds(fds, nfds);
			uv_debug("op %u: %s (%.*s)", op, strerror(rh.err), (int)rh.len, (const char *)body);
			return rh.err > 0 ? rh.err : EPROTO;
		}
		if (resp) {
			size_t c = rh.len < resplen ? rh.len : resplen;
			memcpy(resp, body, c);
			memset((uint8_t *)resp + c, 0, resplen - c);
		}
		if (nfds > 0 && fd_out) {
			*fd_out = fds[0];
			close_fds(fds + 1, nfds - 1);
		} else {
			close_fds(fds, nfds);
		}
		return 0;
	}
}

int uv_call(struct uv_context *c, uint16_t op, const void *req, size_t reqlen, int fd_in, void *resp,
	    size_t resplen, int *fd_out)
{
	if (fd_out)
		*fd_out = -1;
	if (uv_gone(c))
		return EIO;
	pthread_mutex_lock(&c->call_mu);
	struct conn k = {.sock = c->sock, .seq = &c->seq, .buf = c->buf, .ctx = c};
	int err = xchg(&k, op, req, reqlen, fd_in, resp, resplen, fd_out);
	pthread_mutex_unlock(&c->call_mu);
	return err;
}

int uv_destroy_handle(struct uv_context *c, uint16_t op, uint32_t handle)
{
	struct up_handle h = {.handle = handle};
	return uv_call(c, op, &h, sizeof(h), -1, NULL, 0, NULL);
}

/*
 * Reads what the daemon sent outside a request (events, or the end of
 * the connection) if no request is under way: a request in progress
 * reads them itself.
 */
void uv_pump_socket(struct uv_context *c)
{
	if (pthread_mutex_trylock(&c->call_mu) != 0)
		return;
	struct conn k = {.sock = c->sock, .seq = &c->seq, .buf = c->buf, .ctx = c};
	for (;;) {
		int fds[4], nfds;
		ssize_t n = recv_msg(c->sock, c->buf, MSG_DONTWAIT, fds, &nfds);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			if (!uv_gone(c))
				uv_debug("connection lost (%s)", n < 0 ? strerror(errno) : "closed");
			mark_gone(c);
			break;
		}
		close_fds(fds, nfds);
		struct up_header h;
		if ((size_t)n < UP_HEADER_LEN)
			continue;
		memcpy(&h, c->buf, sizeof(h));
		if (h.seq == 0 && h.len == (size_t)n - UP_HEADER_LEN)
			handle_event(&k, &h, c->buf + UP_HEADER_LEN);
	}
	pthread_mutex_unlock(&c->call_mu);
}

void *uv_map_ring(int fd, size_t len)
{
	if (fd < 0) {
		errno = EPROTO;
		return NULL;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		errno = e;
		return NULL;
	}
	return p;
}

void uv_ring_doorbell(struct uv_context *c)
{
	uint64_t one = 1;
	atomic_fetch_add_explicit(&c->n_doorbells, 1, memory_order_relaxed);
	while (write(c->doorbell, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/* Devices. */

static pthread_mutex_t devs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct uv_device *devs; /* every device seen, never freed */
static int ndevs;

static int connect_socket(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(s);
		errno = e;
		return -1;
	}
	return s;
}

/* The file name of a socket without .sock: its device's name by default. */
static void base_name(const char *path, char *out, size_t n)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	size_t l = strlen(b);
	if (l > 5 && strcmp(b + l - 5, ".sock") == 0)
		l -= 5;
	if (l >= n)
		l = n - 1;
	memcpy(out, b, l);
	out[l] = 0;
}

/*
 * Asks the daemon on path for its device's name and GUID. It returns -1
 * when no daemon listens there; a daemon that refuses us is listed by
 * the socket's name (opening it fails with the daemon's reason).
 */
static int probe(const char *path, char name[IBV_SYSFS_NAME_MAX], __be64 *guid)
{
	base_name(path, name, IBV_SYSFS_NAME_MAX);
	*guid = 0;
	int s = connect_socket(path);
	if (s < 0) {
		uv_debug("%s: %s: not listed", path, strerror(errno));
		return -1;
	}
	uint8_t *buf = malloc(UP_MAX_MESSAGE);
	if (!buf) {
		close(s);
		return -1;
	}
	uint32_t seq = 0;
	struct conn k = {.sock = s, .seq = &seq, .buf = buf};
	struct up_hello hello = {.version = UP_VERSION};
	struct up_hello_resp hr;
	int db = -1;
	int err = xchg(&k, UP_OP_HELLO, &hello, sizeof(hello), -1, &hr, sizeof(hr), &db);
	if (db >= 0)
		close(db);
	if (err == 0) {
		if (hr.device[0])
			snprintf(name, IBV_SYSFS_NAME_MAX, "%.*s", (int)sizeof(hr.device), hr.device);
		struct up_device_attr da;
		if (xchg(&k, UP_OP_QUERY_DEVICE, NULL, 0, -1, &da, sizeof(da), NULL) == 0)
			*guid = htobe64(da.node_guid);
	} else {
		uv_debug("%s: hello: %s", path, strerror(err));
	}
	free(buf);
	close(s);
	return 0;
}

static struct uv_device *device_for(const char *path)
{
	for (struct uv_device *d = devs; d; d = d->next)
		if (strcmp(d->path, path) == 0)
			return d;
	struct uv_device *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	snprintf(d->path, sizeof(d->path), "%s", path);
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s", path);
	d->index = ndevs++;
	struct uv_device **p = &devs;
	while (*p)
		p = &(*p)->next;
	*p = d;
	return d;
}

/* The sockets to look at: UROCE_SOCKET's, or the .sock files of /run/uroce. */
static char **socket_paths(int *n)
{
	*n = 0;
	const char *env = getenv("UROCE_SOCKET");
	char **l = NULL;
	if (env && *env) {
		char *s = strdup(env), *save = NULL;
		if (!s)
			return NULL;
		int cap = 1;
		for (const char *p = env; *p; p++)
			cap += *p == ':';
		l = calloc(cap, sizeof(*l));
		for (char *t = strtok_r(s, ":", &save); t && l; t = strtok_r(NULL, ":", &save))
			if (*t)
				l[(*n)++] = strdup(t);
		free(s);
		return l;
	}
	glob_t g;
	if (glob("/run/uroce/*.sock", 0, NULL, &g) != 0)
		return NULL;
	l = calloc(g.gl_pathc + 1, sizeof(*l));
	for (size_t i = 0; l && i < g.gl_pathc; i++)
		l[(*n)++] = strdup(g.gl_pathv[i]);
	globfree(&g);
	return l;
}

UV_LATEST(ibv_get_device_list);
struct ibv_device **uv_ibv_get_device_list_1_1(int *num_devices)
{
	debug_init();
	int n = 0;
	char **paths = socket_paths(&n);
	struct ibv_device **list = calloc(n + 1, sizeof(*list));
	if (!list) {
		for (int i = 0; paths && i < n; i++)
			free(paths[i]);
		free(paths);
		errno = ENOMEM;
		return NULL;
	}
	int k = 0;
	pthread_mutex_lock(&devs_mu);
	for (int i = 0; i < n; i++) {
		char name[IBV_SYSFS_NAME_MAX];
		__be64 guid;
		if (!paths[i] || probe(paths[i], name, &guid) < 0)
			continue;
		struct uv_device *d = device_for(paths[i]);
		int dup = 0;
		for (int j = 0; d && j < k; j++)
			dup |= list[j] == &d->dev;
		if (!d || dup)
			continue;
		/*
		 * Names are unique in a list: a second uroce0 goes by its
		 * socket's name, or failing that by its name and index.
		 */
		char orig[IBV_SYSFS_NAME_MAX];
		memcpy(orig, name, sizeof(orig));
		for (int attempt = 1; attempt <= 3; attempt++) {
			int clash = 0;
			for (int j = 0; j < k && !clash; j++)
				clash = strcmp(list[j]->name, name) == 0;
			if (!clash)
				break;
			if (attempt == 1)
				base_name(paths[i], name, IBV_SYSFS_NAME_MAX);
			else
				snprintf(name, IBV_SYSFS_NAME_MAX, "%.50s_%d", orig, d->index + attempt - 2);
		}
		memcpy(d->dev.name, name, sizeof(d->dev.name));
		memcpy(d->dev.dev_name, name, sizeof(d->dev.dev_name));
		d->guid = guid;
		list[k++] = &d->dev;
	}
	pthread_mutex_unlock(&devs_mu);
	for (int i = 0; paths && i < n; i++)
		free(paths[i]);
	free(paths);
	if (num_devices)
		*num_devices = k;
	return list;
}

UV_LATEST(ibv_free_device_list);
void uv_ibv_free_device_list_1_1(struct ibv_device **list)
{
	free(list);
}

UV_LATEST(ibv_get_device_name);
const char *uv_ibv_get_device_name_1_1(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

UV_LATEST(ibv_get_device_guid);
__be64 uv_ibv_get_device_guid_1_1(struct ibv_device *device)
{
	return device ? ((struct uv_device *)device)->guid : 0;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return device ? ((struct uv_device *)device)->index : -1;
}

/* Contexts. */

UV_LATEST(ibv_open_device);
struct ibv_context *uv_ibv_open_device_1_1(struct ibv_device *device)
{
	debug_init();
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct uv_device *d = (struct uv_device *)device;
	struct uv_context *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->dev = d;
	c->doorbell = -1;
	c->buf = malloc(UP_MAX_MESSAGE);
	pthread_mutex_init(&c->call_mu, NULL);
	pthread_mutex_init(&c->ev_mu, NULL);
	pthread_mutex_init(&c->obj_mu, NULL);
	int err = ENOMEM;
	if (!c->buf)
		goto fail;
	c->sock = connect_socket(d->path);
	if (c->sock < 0) {
		err = errno;
		uv_debug("open %s: %s: is the daemon running?", d->path, strerror(err));
		goto fail;
	}
	struct up_hello hello = {.version = UP_VERSION};
	err = uv_call(c, UP_OP_HELLO, &hello, sizeof(hello), -1, &c->hello, sizeof(c->hello), &c->doorbell);
	if (err == 0 && c->doorbell < 0)
		err = EPROTO;
	if (err == 0)
		err = uv_call(c, UP_OP_QUERY_DEVICE, NULL, 0, -1, &c->attr, sizeof(c->attr), NULL);
	if (err)
		goto fail_sock;
	struct ibv_context *ctx = &c->vctx.context;
	c->vctx.sz = sizeof(c->vctx);
	ctx->device = device;
	ctx->cmd_fd = c->sock;
	ctx->async_fd = c->sock;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	uv_fill_ops(c);
	uv_debug("%s: session %u on %.64s", device->name, c->hello.session, c->hello.netdev);
	return ctx;

fail_sock:
	if (c->doorbell >= 0)
		close(c->doorbell);
	close(c->sock);
fail:
	free(c->buf);
	free(c);
	errno = err;
	return NULL;
}

UV_LATEST(ibv_close_device);
int uv_ibv_close_device_1_1(struct ibv_context *ctx)
{
	struct uv_context *c = uv_ctx(ctx);
	uv_debug("%s: closed; %lu doorbells rung, %lu sched_yield in empty polls", ctx->device->name,
		 atomic_load(&c->n_doorbells), atomic_load(&c->n_yields));
	/* The daemon destroys what the session still holds. */
	close(c->sock);
	if (c->doorbell >= 0)
		close(c->doorbell);
	free(c->buf);
	free(c);
	return 0;
}

/* Asynchronous events. */

UV_LATEST(ibv_get_async_event);
int uv_ibv_get_async_event_1_1(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct uv_context *c = uv_ctx(ctx);
	for (;;) {
		for (int pass = 0; pass < 2; pass++) {
			pthread_mutex_lock(&c->ev_mu);
			if (c->ev_n > 0) {
				*event = c->evq[c->ev_head];
				c->ev_head = (c->ev_head + 1) % UV_EVQ_LEN;
				c->ev_n--;
				pthread_mutex_unlock(&c->ev_mu);
				return 0;
			}
			pthread_mutex_unlock(&c->ev_mu);
			if (uv_gone(c)) {
				errno = EIO;
				return -1;
			}
			if (pass == 0)
				uv_pump_socket(c);
		}
		int fl = fcntl(c->sock, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		/* Another thread's request may queue what we wait for: look again now and then. */
		struct pollfd p = {.fd = c->sock, .events = POLLIN};
		poll(&p, 1, 100);
	}
}

UV_LATEST(ibv_ack_async_event);
void uv_ibv_ack_async_event_1_1(struct ibv_async_event *event)
{
	pthread_mutex_t *mu = NULL;
	pthread_cond_t *cond = NULL;
	uint32_t *count = NULL;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		mu = &event->element.cq->mutex;
		cond = &event->element.cq->cond;
		count = &event->element.cq->async_events_completed;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		mu = &event->element.qp->mutex;
		cond = &event->element.qp->cond;
		count = &event->element.qp->events_completed;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		mu = &event->element.srq->mutex;
		cond = &event->element.srq->cond;
		count = &event->element.srq->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(mu);
	++*count;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mu);
}
