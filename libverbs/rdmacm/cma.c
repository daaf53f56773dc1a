/*
 * uroce's librdmacm.so.1: rdma-core 44's RDMA CM API over the uroce
 * daemon's CM requests (proto/SPEC.md, "Connection management"). A
 * program linked against Debian's librdmacm runs on it unchanged, with
 * uroce's libibverbs.so.1 beside it (`uroce run` sets LD_LIBRARY_PATH).
 *
 * The daemon keeps the IDs' state and runs the CM protocol; this library
 * keeps the structs the programs see (rdma_cm_id, rdma_cm_event, the
 * channels), turns the daemon's events into them, and does what librdmacm
 * itself does around the kernel: synchronous IDs (a NULL channel), the
 * wait for acknowledgements in rdma_destroy_id, the QPs of
 * rdma_create_qp, and DEVICE_REMOVAL when the daemon goes away.
 *
 * The daemon moves the QP of an ID (id->qp) to RTR and RTS itself. A
 * program that connects or accepts without id->qp moves its QP with
 * rdma_init_qp_attr's values, and after CONNECT_RESPONSE calls
 * rdma_establish for the RTU.
 *
 * This file: devices, channels, IDs and events. UROCE_DEBUG=1 prints what
 * goes wrong on stderr.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>

#include "ucma.h"

/* One lock for the library's lists and counts; never held while waiting. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t acked = PTHREAD_COND_INITIALIZER;
/* Every device opened, never freed: IDs, events and programs keep pointers into them. */
static struct uc_dev *devs;
static struct uc_id *ids;
/*
 * Events taken from a channel's daemon queue for another channel: those
 * of an ID that moved (rdma_migrate_id) while they waited. Each has a
 * count on its channel's eventfd, as the daemon's events do.
 */
static struct uc_event *held;

static int debug_on = -1;

/*
 * Destroyed IDs and channels are freed only after the next 64: a
 * program that still uses one it just destroyed (perftest's -R client
 * does when it retries) finds it dead (EINVAL, EBADF), not memory that
 * malloc handed out again.
 */
#define GRAVES 64
static void *graves[GRAVES];
static unsigned next_grave;

static void bury(void *p)
{
	pthread_mutex_lock(&mu);
	void *old = graves[next_grave];
	graves[next_grave] = p;
	next_grave = (next_grave + 1) % GRAVES;
	pthread_mutex_unlock(&mu);
	free(old);
}

void uc_debug(const char *fmt, ...)
{
	if (debug_on < 0) {
		const char *e = getenv("UROCE_DEBUG");
		debug_on = e && *e && strcmp(e, "0") != 0;
	}
	if (!debug_on)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "uroce librdmacm: %s\n", line);
}

/* Addresses. */

int uc_addr_in(const struct sockaddr *sa, struct up_cm_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (!sa)
		return -1;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		a->family = UP_AF_INET;
		a->port = be16toh(s->sin_port);
		a->addr[10] = a->addr[11] = 0xff;
		memcpy(a->addr + 12, &s->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		a->family = UP_AF_INET6;
		a->port = be16toh(s->sin6_port);
		a->scope = s->sin6_scope_id;
		memcpy(a->addr, &s->sin6_addr, 16);
		return 0;
	}
	return -1;
}

void uc_addr_out(const struct up_cm_addr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == UP_AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htobe16(a->port);
		memcpy(&s->sin_addr, a->addr + 12, 4);
	} else if (a->family == UP_AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htobe16(a->port);
		s->sin6_scope_id = a->scope;
		memcpy(&s->sin6_addr, a->addr, 16);
	}
}

socklen_t uc_addr_len(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

static int gid_zero(const uint8_t *g)
{
	static const uint8_t zero[16];
	return memcmp(g, zero, 16) == 0;
}

/*
 * The ID's addresses and GIDs as the daemon has them now; with path, the
 * path record rdma_resolve_route leaves (RoCE: one path, no LIDs).
 * Called with mu held.
 */
static void route_set(struct uc_id *u, const struct up_cm_route *r, int path)
{
	struct rdma_addr *a = &u->id.route.addr;
	if (r->src.family)
		uc_addr_out(&r->src, &a->src_storage);
	if (r->dst.family)
		uc_addr_out(&r->dst, &a->dst_storage);
	if (!gid_zero(r->sgid))
		memcpy(a->addr.ibaddr.sgid.raw, r->sgid, 16);
	if (!gid_zero(r->dgid))
		memcpy(a->addr.ibaddr.dgid.raw, r->dgid, 16);
	if (!gid_zero(r->sgid))
		u->sgid_index = r->sgid_index;
	a->addr.ibaddr.pkey = htobe16(0xffff);
	if (!path)
		return;
	struct ibv_sa_path_rec *p = &u->path;
	memset(p, 0, sizeof(*p));
	p->sgid = a->addr.ibaddr.sgid;
	p->dgid = a->addr.ibaddr.dgid;
	p->hop_limit = r->hop_limit;
	p->traffic_class = u->tos;
	p->reversible = 1;
	p->numb_path = 1;
	p->pkey = htobe16(0xffff);
	p->mtu_selector = 2; /* exactly */
	p->mtu = r->path_mtu;
	p->rate_selector = 2;
	p->rate = IBV_RATE_MAX; /* the port's */
	p->packet_life_time_selector = 2;
	p->packet_life_time = 16; /* as the kernel's RDMA CM gives RoCE paths */
	u->id.route.path_rec = p;
	u->id.route.num_paths = 1;
}

/* Devices. */

static int alive(struct uc_dev *d)
{
	return !uroce_context_gone(d->verbs);
}

static struct uc_dev *open_device(struct ibv_device *dev)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx) {
		uc_debug("%s: %s", ibv_get_device_name(dev), strerror(errno));
		return NULL;
	}
	struct ibv_device_attr attr;
	struct ibv_pd *pd = NULL;
	struct uc_dev *d = calloc(1, sizeof(*d));
	int err = d ? ibv_query_device(ctx, &attr) : ENOMEM;
	if (!err && !(pd = ibv_alloc_pd(ctx)))
		err = errno;
	if (err) {
		uc_debug("%s: %s", ibv_get_device_name(dev), strerror(err));
		free(d);
		ibv_close_device(ctx);
		return NULL;
	}
	d->dev = dev;
	d->verbs = ctx;
	d->pd = pd;
	d->max_qp_wr = attr.max_qp_wr;
	d->max_init_depth = attr.max_qp_init_rd_atom > 255 ? 255 : attr.max_qp_init_rd_atom;
	d->max_resp_res = attr.max_qp_rd_atom > 255 ? 255 : attr.max_qp_rd_atom;
	return d;
}

/*
 * Opens the devices that have no live context here: all of them the
 * first time, then those whose daemon was restarted. Called with mu held.
 */
static void open_devices(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return;
	for (int i = 0; i < n; i++) {
		int have = 0;
		for (struct uc_dev *d = devs; d && !have; d = d->next)
			have = d->dev == list[i] && alive(d);
		if (have)
			continue;
		struct uc_dev *d = open_device(list[i]);
		if (!d)
			continue;
		struct uc_dev **p = &devs;
		while (*p)
			p = &(*p)->next;
		*p = d;
	}
	ibv_free_device_list(list);
}

/* The device new channels and IDs go to: the first one alive. */
static int primary(struct uc_dev **out)
{
	pthread_mutex_lock(&mu);
	for (int pass = 0; pass < 2; pass++) {
		for (struct uc_dev *d = devs; d; d = d->next) {
			if (alive(d)) {
				pthread_mutex_unlock(&mu);
				*out = d;
				return 0;
			}
		}
		if (pass == 0)
			open_devices();
	}
	pthread_mutex_unlock(&mu);
	return ENODEV;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	pthread_mutex_lock(&mu);
	open_devices();
	int n = 0;
	for (struct uc_dev *d = devs; d; d = d->next)
		n += alive(d);
	struct ibv_context **list = calloc(n + 1, sizeof(*list));
	int k = 0;
	for (struct uc_dev *d = devs; d && list; d = d->next)
		if (alive(d) && k < n)
			list[k++] = d->verbs;
	pthread_mutex_unlock(&mu);
	if (!list)
		errno = ENOMEM;
	if (num_devices)
		*num_devices = list ? k : 0;
	return list;
}

void rdma_free_devices(struct ibv_context **list)
{
	/* The contexts stay open: the library's IDs use them. */
	free(list);
}

/* Channels. */

static struct uc_channel *channel_new(struct uc_dev *d)
{
	struct uc_channel *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	struct up_channel_resp r;
	int fd = -1;
	int err = uroce_call(d->verbs, UP_OP_CM_CREATE_CHANNEL, NULL, 0, &r, sizeof(r), &fd);
	if (!err && (fd < 0 || r.channel == 0))
		err = EPROTO;
	if (err) {
		if (fd >= 0)
			close(fd);
		free(c);
		errno = err;
		return NULL;
	}
	/*
	 * The eventfd comes non-blocking (the daemon's own flags travel with
	 * it); rdma_get_cm_event blocks unless the program asks otherwise.
	 * The daemon only writes small counts to it: it never blocks.
	 */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && (fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	c->ch.fd = fd;
	c->magic = UC_CHANNEL_LIVE;
	c->handle = r.channel;
	c->dev = d;
	return c;
}

static void held_drop(struct uc_channel *c, struct uc_id *u);

static void channel_free(struct uc_channel *c)
{
	held_drop(c, NULL);
	pthread_mutex_lock(&mu);
	c->closed = 1;
	c->magic = UC_DEAD;
	int now = c->users == 0;
	pthread_mutex_unlock(&mu);
	struct up_handle h = {.handle = c->handle};
	int err = uroce_call(c->dev->verbs, UP_OP_CM_DESTROY_CHANNEL, &h, sizeof(h), NULL, 0, NULL);
	if (err && err != EIO)
		uc_debug("destroying channel %u: %s", c->handle, strerror(err));
	close(c->ch.fd);
	if (now)
		bury(c);
}

/* Enters or leaves rdma_get_cm_event: 0, or EBADF for a destroyed channel. */
static int channel_enter(struct uc_channel *c)
{
	pthread_mutex_lock(&mu);
	int closed = c->closed;
	if (!closed)
		c->users++;
	pthread_mutex_unlock(&mu);
	return closed ? EBADF : 0;
}

static void channel_leave(struct uc_channel *c)
{
	pthread_mutex_lock(&mu);
	int last = --c->users == 0 && c->closed;
	pthread_mutex_unlock(&mu);
	if (last)
		bury(c);
}

static int channel_closed(struct uc_channel *c)
{
	pthread_mutex_lock(&mu);
	int closed = c->closed;
	pthread_mutex_unlock(&mu);
	return closed;
}

/*
 * A thread waiting on a channel that another destroyed waits for good, as
 * a read of the kernel's rdma_cm file does (rping's event thread while
 * its main thread cleans up and exits).
 */
static void __attribute__((noreturn)) park(void)
{
	for (;;)
		pause();
}

static struct uc_channel *channel_of(struct rdma_event_channel *ch)
{
	return UC_CONTAINER(ch, struct uc_channel, ch);
}

/* A program's channel: NULL for NULL or one destroyed. */
static struct uc_channel *live_channel(struct rdma_event_channel *ch)
{
	struct uc_channel *c = ch ? channel_of(ch) : NULL;
	return c && c->magic == UC_CHANNEL_LIVE ? c : NULL;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct uc_dev *d;
	int err = primary(&d);
	if (err) {
		errno = err;
		return NULL;
	}
	struct uc_channel *c = channel_new(d);
	return c ? &c->ch : NULL;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct uc_channel *c = live_channel(channel);
	if (c)
		channel_free(c);
}

/* IDs. */

static struct uc_id *id_new(struct uc_dev *d, struct rdma_event_channel *ch, void *context,
			    enum rdma_port_space ps, enum ibv_qp_type qpt, uint32_t handle)
{
	struct uc_id *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->id.verbs = d->verbs;
	u->id.channel = ch;
	u->id.context = context;
	u->id.ps = ps;
	u->id.qp_type = qpt;
	u->id.port_num = 1;
	u->id.pd = d->pd;
	u->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
	u->magic = UC_ID_LIVE;
	u->handle = handle;
	u->dev = d;
	return u;
}

/* Called with mu held. */
static void id_link(struct uc_id *u)
{
	u->next = ids;
	ids = u;
}

static void id_unlink(struct uc_id *u)
{
	for (struct uc_id **p = &ids; *p; p = &(*p)->next) {
		if (*p == u) {
			*p = u->next;
			return;
		}
	}
}

int uc_id_known(const struct rdma_cm_id *id)
{
	int known = 0;
	pthread_mutex_lock(&mu);
	for (struct uc_id *u = ids; u && !known; u = u->next)
		known = &u->id == id;
	pthread_mutex_unlock(&mu);
	return known;
}

static struct uc_id *id_find(struct uc_dev *d, uint32_t handle)
{
	for (struct uc_id *u = ids; u; u = u->next)
		if (u->dev == d && u->handle == handle)
			return u;
	return NULL;
}

/* A request about one ID: 0, or -1 with errno the daemon's. */
static int id_call(struct uc_id *u, uint16_t op, const void *req, size_t len, void *resp, size_t resplen)
{
	int err = uroce_call(u->dev->verbs, op, req, len, resp, resplen, NULL);
	return err ? uc_fail(err) : 0;
}

static void daemon_destroy_id(struct uc_dev *d, uint32_t handle)
{
	struct up_handle h = {.handle = handle};
	int err = uroce_call(d->verbs, UP_OP_CM_DESTROY_ID, &h, sizeof(h), NULL, 0, NULL);
	if (err && err != EIO)
		uc_debug("destroying ID %u: %s", handle, strerror(err));
}

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **idp, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	if (!idp)
		return uc_fail(EINVAL);
	struct uc_channel *c;
	int sync = !channel;
	if (channel) {
		if (!(c = live_channel(channel)))
			return uc_fail(EINVAL);
	} else {
		struct uc_dev *d;
		int err = primary(&d);
		if (err)
			return uc_fail(err);
		if (!(c = channel_new(d)))
			return -1;
	}
	struct uc_id *u = id_new(c->dev, &c->ch, context, ps, qpt, 0);
	struct up_cm_create_id req = {.channel = c->handle, .ps = ps, .qp_type = qpt};
	struct up_handle h = {0};
	int err = u ? uroce_call(c->dev->verbs, UP_OP_CM_CREATE_ID, &req, sizeof(req), &h, sizeof(h), NULL) : ENOMEM;
	if (!err && h.handle == 0)
		err = EPROTO;
	if (err) {
		free(u);
		if (sync)
			channel_free(c);
		return uc_fail(err);
	}
	u->handle = h.handle;
	u->sync = sync;
	pthread_mutex_lock(&mu);
	id_link(u);
	pthread_mutex_unlock(&mu);
	*idp = &u->id;
	return 0;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qpt = (ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP) ? IBV_QPT_UD : IBV_QPT_RC;
	return create_id(channel, id, context, ps, qpt);
}

static struct uc_mcast *mcast_take(struct uc_id *u, const struct sockaddr *addr);
static void mcast_leave(struct uc_id *u, struct uc_mcast *m);

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	u->magic = UC_DEAD;
	for (struct uc_mcast *m; (m = mcast_take(u, NULL));)
		mcast_leave(u, m);
	/* The daemon's ID goes first: no event of it follows. */
	daemon_destroy_id(u->dev, u->handle);
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	pthread_mutex_lock(&mu);
	id_unlink(u);
	pthread_mutex_unlock(&mu);
	/* Unlinked, it gets no more events; those held for it are dropped. */
	held_drop(NULL, u);
	pthread_mutex_lock(&mu);
	while (u->completed + u->held < u->reported)
		pthread_cond_wait(&acked, &mu);
	pthread_mutex_unlock(&mu);
	if (u->sync)
		channel_free(channel_of(id->channel));
	free(u->qp_init_attr);
	free(u->connect);
	u->qp_init_attr = NULL;
	u->connect = NULL;
	bury(u);
	return 0;
}

static void move_events(struct uc_channel *from, struct uc_channel *to);

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	if (u->sync && !channel)
		return uc_fail(EINVAL);
	int sync = !channel;
	struct uc_channel *nc = channel ? live_channel(channel) : channel_new(u->dev);
	if (!nc)
		return channel ? uc_fail(EINVAL) : -1;
	int err = nc->dev != u->dev ? EINVAL : 0;
	struct up_cm_migrate_id m = {.id = u->handle, .channel = nc->handle};
	if (!err)
		err = uroce_call(u->dev->verbs, UP_OP_CM_MIGRATE_ID, &m, sizeof(m), NULL, 0, NULL);
	if (err) {
		if (sync)
			channel_free(nc);
		return uc_fail(err);
	}
	struct uc_channel *old = u->sync ? channel_of(id->channel) : NULL;
	if (old && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	struct uc_channel *from = channel_of(id->channel);
	pthread_mutex_lock(&mu);
	u->sync = sync;
	id->channel = &nc->ch;
	pthread_mutex_unlock(&mu);
	/* Its events still queued on the old channel follow it, as the kernel's do. */
	if (from != nc)
		move_events(from, nc);
	/* The events already handed out on the old channel are acknowledged first. */
	pthread_mutex_lock(&mu);
	while (u->completed + u->held < u->reported)
		pthread_cond_wait(&acked, &mu);
	pthread_mutex_unlock(&mu);
	if (old)
		channel_free(old);
	return 0;
}

/* Events. */

/* Moves a synchronous listener's new ID to a channel of its own. */
static int make_sync(struct uc_id *u)
{
	struct uc_channel *c = channel_new(u->dev);
	if (!c)
		return -1;
	struct up_cm_migrate_id m = {.id = u->handle, .channel = c->handle};
	if (id_call(u, UP_OP_CM_MIGRATE_ID, &m, sizeof(m), NULL, 0)) {
		int e = errno;
		channel_free(c);
		return uc_fail(e);
	}
	pthread_mutex_lock(&mu);
	u->id.channel = &c->ch;
	u->sync = 1;
	pthread_mutex_unlock(&mu);
	return 0;
}

static void copy_param(struct uc_event *e, const struct up_cm_event *ev, int ud)
{
	size_t n = ev->param.private_data_len;
	if (n > sizeof(e->private_data))
		n = sizeof(e->private_data);
	memcpy(e->private_data, ev->param.private_data, n);
	if (ud) {
		struct rdma_ud_param *p = &e->ev.param.ud;
		p->private_data = n ? e->private_data : NULL;
		p->private_data_len = n;
		struct ibv_ah_attr *a = &p->ah_attr;
		memcpy(a->grh.dgid.raw, ev->ah.dgid, 16);
		a->grh.flow_label = ev->ah.flow_label;
		a->grh.sgid_index = ev->ah.sgid_index;
		a->grh.hop_limit = ev->ah.hop_limit;
		a->grh.traffic_class = ev->ah.traffic_class;
		a->is_global = ev->ah.is_global;
		a->dlid = ev->ah.dlid;
		a->sl = ev->ah.sl;
		a->port_num = ev->ah.port ? ev->ah.port : 1;
		p->qp_num = ev->param.qpn;
		p->qkey = ev->param.qkey;
		return;
	}
	struct rdma_conn_param *p = &e->ev.param.conn;
	p->private_data = n ? e->private_data : NULL;
	p->private_data_len = n;
	p->responder_resources = ev->param.responder_resources;
	p->initiator_depth = ev->param.initiator_depth;
	p->flow_control = ev->param.flags;
	p->retry_count = ev->param.retry_count;
	p->rnr_retry_count = ev->param.rnr_retry_count;
	p->srq = ev->param.srq;
	p->qp_num = ev->param.qpn;
}

/*
 * Makes the daemon's event ev into e: 0, or -1 when it is for no ID of
 * ours (destroyed meanwhile), to be dropped.
 */
static int build_event(struct uc_channel *c, const struct up_cm_event *ev, struct uc_event *e)
{
	struct uc_id *owner, *child = NULL;
	pthread_mutex_lock(&mu);
	if (ev->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct uc_id *l = id_find(c->dev, ev->listen_id);
		if (l)
			child = id_new(c->dev, l->id.channel, l->id.context, l->id.ps, l->id.qp_type, ev->id);
		if (!child) {
			pthread_mutex_unlock(&mu);
			uc_debug("connection request for listener %u dropped (%s)", ev->listen_id,
				 l ? "no memory" : "destroyed");
			daemon_destroy_id(c->dev, ev->id);
			return -1;
		}
		route_set(child, &ev->route, 1);
		child->init_depth = ev->param.initiator_depth;
		child->resp_res = ev->param.responder_resources;
		id_link(child);
		e->ev.id = &child->id;
		e->ev.listen_id = &l->id;
		owner = l;
	} else {
		owner = id_find(c->dev, ev->id);
		if (!owner) {
			pthread_mutex_unlock(&mu);
			return -1;
		}
		route_set(owner, &ev->route, ev->type == RDMA_CM_EVENT_ROUTE_RESOLVED);
		e->ev.id = &owner->id;
	}
	e->ev.event = ev->type;
	e->ev.status = ev->status;
	copy_param(e, ev, owner->id.qp_type == IBV_QPT_UD);
	e->owner = owner;
	owner->reported++;
	int sync_child = child && owner->sync;
	pthread_mutex_unlock(&mu);

	if (ev->type == RDMA_CM_EVENT_REJECTED)
		uc_qp_to_err(e->ev.id);
	if (ev->type == RDMA_CM_EVENT_ESTABLISHED || ev->type == RDMA_CM_EVENT_CONNECT_RESPONSE)
		uc_qp_sync_state(e->ev.id);
	if (sync_child && make_sync(child)) {
		uc_debug("connection request: no channel for the new ID (%s)", strerror(errno));
		pthread_mutex_lock(&mu);
		owner->completed++;
		pthread_cond_broadcast(&acked);
		pthread_mutex_unlock(&mu);
		rdma_destroy_id(&child->id);
		return -1;
	}
	return 0;
}

/* Held events: called with mu held. */
static struct uc_event *held_take(struct uc_channel *c)
{
	for (struct uc_event **p = &held; *p; p = &(*p)->held_next) {
		struct uc_event *e = *p;
		if (e->held_by == c) {
			*p = e->held_next;
			e->held_next = NULL;
			e->held_by = NULL;
			e->owner->held--;
			return e;
		}
	}
	return NULL;
}

static void held_put(struct uc_channel *c, struct uc_event *e)
{
	struct uc_event **p = &held;
	while (*p)
		p = &(*p)->held_next;
	e->held_by = c;
	e->held_next = NULL;
	e->owner->held++;
	*p = e;
}

/*
 * Drops the held events of channel c (being destroyed) or of ID u (being
 * destroyed): as acknowledged, and a connection request's new ID, which
 * the program never saw, destroyed with it.
 */
static void held_drop(struct uc_channel *c, struct uc_id *u)
{
	struct uc_event *drop = NULL;
	pthread_mutex_lock(&mu);
	for (struct uc_event **p = &held; *p;) {
		struct uc_event *e = *p;
		if ((c && e->held_by == c) || (u && e->owner == u)) {
			*p = e->held_next;
			e->held_next = drop;
			e->owner->held--;
			drop = e;
		} else {
			p = &e->held_next;
		}
	}
	pthread_mutex_unlock(&mu);
	while (drop) {
		struct uc_event *e = drop;
		drop = e->held_next;
		struct rdma_cm_id *child = e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST ? e->ev.id : NULL;
		rdma_ack_cm_event(&e->ev);
		if (child)
			rdma_destroy_id(child);
	}
}

/*
 * Takes what waits in from's daemon queue: the events of IDs now on
 * channel to are held there, with a count on its eventfd; the others are
 * held on from, whose eventfd has their counts already.
 */
static void move_events(struct uc_channel *from, struct uc_channel *to)
{
	for (int i = 0; i < UP_CM_MAX_EVENTS; i++) {
		struct uc_event *e = calloc(1, sizeof(*e));
		if (!e)
			return;
		struct up_handle h = {.handle = from->handle};
		struct up_cm_event ev;
		if (uroce_call(from->dev->verbs, UP_OP_CM_GET_EVENT, &h, sizeof(h), &ev, sizeof(ev), NULL)) {
			free(e);
			return;
		}
		if (build_event(from, &ev, e)) {
			free(e);
			continue;
		}
		pthread_mutex_lock(&mu);
		int moved = e->owner->id.channel == &to->ch;
		held_put(moved ? to : from, e);
		pthread_mutex_unlock(&mu);
		if (moved) {
			uint64_t one = 1;
			if (write(to->ch.fd, &one, sizeof(one)) != sizeof(one))
				uc_debug("channel %u: count not added (%s)", to->handle, strerror(errno));
		}
	}
}

/*
 * The daemon is gone: each ID of the channel gets one DEVICE_REMOVAL,
 * then the channel fails with ENODEV.
 */
static int removal_event(struct uc_channel *c, struct uc_event *e, struct rdma_cm_event **event)
{
	pthread_mutex_lock(&mu);
	struct uc_id *u = ids;
	while (u && (u->id.channel != &c->ch || u->removed))
		u = u->next;
	if (u) {
		u->removed = 1;
		u->reported++;
	}
	pthread_mutex_unlock(&mu);
	if (!u) {
		free(e);
		return uc_fail(ENODEV);
	}
	memset(e, 0, sizeof(*e));
	e->ev.event = RDMA_CM_EVENT_DEVICE_REMOVAL;
	e->ev.id = &u->id;
	e->owner = u;
	*event = &e->ev;
	return 0;
}

/*
 * Takes one count from the channel's eventfd: 0, or an errno value
 * (EAGAIN when the program made the fd non-blocking and none waits). A
 * blocking wait also ends when the daemon's socket closes, so that a
 * daemon that died without a word is noticed.
 */
static int wait_channel(struct uc_channel *c)
{
	int fd = c->ch.fd;
	uint64_t n;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return errno;
	if (fl & O_NONBLOCK) {
		for (;;) {
			ssize_t k = read(fd, &n, sizeof(n));
			if (k == sizeof(n))
				return 0;
			if (k < 0 && errno == EINTR)
				continue;
			return k < 0 ? errno : EIO;
		}
	}
	for (;;) {
		if (channel_closed(c))
			park();
		struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = c->dev->verbs->cmd_fd}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (p[1].revents)
			return 0; /* the request says whether the daemon is gone */
		if (p[0].revents & POLLNVAL)
			return EBADF;
		if (!p[0].revents)
			continue;
		ssize_t k = read(fd, &n, sizeof(n));
		if (k == sizeof(n))
			return 0;
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return k < 0 ? errno : EIO;
	}
}

static int get_event(struct uc_channel *c, struct rdma_cm_event **event)
{
	/* Allocated first: an event taken from the daemon is never lost to ENOMEM. */
	struct uc_event *e = calloc(1, sizeof(*e));
	if (!e)
		return uc_fail(ENOMEM);
	for (;;) {
		struct uc_event *h0 = NULL;
		if (uroce_context_gone(c->dev->verbs)) {
			pthread_mutex_lock(&mu);
			h0 = held_take(c);
			pthread_mutex_unlock(&mu);
			if (!h0)
				return removal_event(c, e, event);
			free(e);
			*event = &h0->ev;
			return 0;
		}
		int err = wait_channel(c);
		if (err && channel_closed(c))
			park(); /* its fd closed under the wait */
		if (err) {
			free(e);
			return uc_fail(err);
		}
		pthread_mutex_lock(&mu);
		h0 = held_take(c);
		pthread_mutex_unlock(&mu);
		if (h0) {
			free(e);
			*event = &h0->ev;
			return 0;
		}
		struct up_handle h = {.handle = c->handle};
		struct up_cm_event ev;
		err = uroce_call(c->dev->verbs, UP_OP_CM_GET_EVENT, &h, sizeof(h), &ev, sizeof(ev), NULL);
		if (err == EAGAIN)
			continue; /* a count without an event (one dropped, or the daemon stopping) */
		if (err == EIO || uroce_context_gone(c->dev->verbs))
			return removal_event(c, e, event);
		if (err && channel_closed(c))
			park();
		if (err) {
			free(e);
			return uc_fail(err);
		}
		if (build_event(c, &ev, e) == 0) {
			*event = &e->ev;
			return 0;
		}
		memset(e, 0, sizeof(*e));
	}
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return uc_fail(EINVAL);
	struct uc_channel *c = channel_of(channel);
	if (c->magic != UC_CHANNEL_LIVE && c->magic != UC_DEAD)
		return uc_fail(EBADF);
	/*
	 * Destroyed by another thread as this one came back for the next
	 * event (rping's event thread while its main thread ends): as if it
	 * had been waiting already.
	 */
	if (channel_enter(c))
		park();
	int ret = get_event(c, event);
	int err = errno;
	channel_leave(c);
	errno = err;
	return ret;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return uc_fail(EINVAL);
	struct uc_event *e = UC_CONTAINER(event, struct uc_event, ev);
	pthread_mutex_lock(&mu);
	if (e->owner) {
		e->owner->completed++;
		pthread_cond_broadcast(&acked);
	}
	pthread_mutex_unlock(&mu);
	free(e);
	return 0;
}

/*
 * A synchronous ID's call waits for its event: 0, or -1 with errno the
 * event's status (ECONNREFUSED for a rejection). The event stays in
 * id->event until the next call or rdma_destroy_id.
 */
static int complete(struct uc_id *u)
{
	if (!u->sync)
		return 0;
	if (u->id.event) {
		rdma_ack_cm_event(u->id.event);
		u->id.event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(u->id.channel, &ev))
		return -1;
	u->id.event = ev;
	if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
		return uc_fail(ENODEV);
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return uc_fail(ECONNREFUSED);
		return uc_fail(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

/* Addressing and connections. */

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	struct up_cm_bind b = {.id = u->handle};
	if (uc_addr_in(addr, &b.addr))
		return uc_fail(EINVAL);
	struct up_cm_route r;
	if (id_call(u, UP_OP_CM_BIND, &b, sizeof(b), &r, sizeof(r)))
		return -1;
	pthread_mutex_lock(&mu);
	route_set(u, &r, 0);
	pthread_mutex_unlock(&mu);
	return 0;
}

static uint32_t timeout(int ms)
{
	return ms > 0 ? (uint32_t)ms : 0; /* 0: the daemon's default */
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
		      int timeout_ms)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	struct up_cm_resolve q = {.id = u->handle, .timeout_ms = timeout(timeout_ms)};
	if (uc_addr_in(dst_addr, &q.dst) || (src_addr && uc_addr_in(src_addr, &q.src)))
		return uc_fail(EINVAL);
	struct up_cm_route r;
	if (id_call(u, UP_OP_CM_RESOLVE_ADDR, &q, sizeof(q), &r, sizeof(r)))
		return -1;
	pthread_mutex_lock(&mu);
	memset(&id->route.addr.dst_storage, 0, sizeof(id->route.addr.dst_storage));
	memcpy(&id->route.addr.dst_storage, dst_addr, uc_addr_len(dst_addr));
	route_set(u, &r, 0);
	pthread_mutex_unlock(&mu);
	return complete(u);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	struct up_cm_resolve q = {.id = u->handle, .timeout_ms = timeout(timeout_ms)};
	struct up_cm_route r;
	if (id_call(u, UP_OP_CM_RESOLVE_ROUTE, &q, sizeof(q), &r, sizeof(r)))
		return -1;
	pthread_mutex_lock(&mu);
	route_set(u, &r, 0);
	pthread_mutex_unlock(&mu);
	return complete(u);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	struct up_cm_listen l = {.id = u->handle, .backlog = backlog};
	return id_call(u, UP_OP_CM_LISTEN, &l, sizeof(l), NULL, 0);
}

/* librdmacm's checks of a connection's parameters (TCP port space only). */
static int valid_param(struct uc_id *u, const struct rdma_conn_param *p)
{
	if (u->id.ps != RDMA_PS_TCP)
		return 0;
	if (!u->id.qp && !p)
		return uc_fail(EINVAL);
	if (!p)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > u->dev->max_resp_res)
		return uc_fail(EINVAL);
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > u->dev->max_init_depth)
		return uc_fail(EINVAL);
	return 0;
}

/*
 * The request's parameters: the ID's negotiated depths, rdma_create_ep's
 * connect data then the program's private data (at most max bytes), the
 * retry counts, and the QP (its handle, or with none the program's QPN).
 */
static int fill_connect(struct uc_id *u, struct up_cm_connect *c, const struct rdma_conn_param *p, size_t max)
{
	size_t own = p && p->private_data ? p->private_data_len : 0;
	if (u->connect_len + own > max)
		return uc_fail(EINVAL);
	struct up_cm_conn_param *cp = &c->param;
	if (u->connect_len)
		memcpy(cp->private_data, u->connect, u->connect_len);
	if (own)
		memcpy(cp->private_data + u->connect_len, p->private_data, own);
	cp->private_data_len = u->connect_len + own;
	cp->responder_resources = u->resp_res;
	cp->initiator_depth = u->init_depth;
	if (p) {
		cp->flags = p->flow_control;
		cp->retry_count = p->retry_count;
		cp->rnr_retry_count = p->rnr_retry_count;
	} else {
		cp->retry_count = 7;
		cp->rnr_retry_count = 7;
	}
	struct ibv_qp *qp = u->id.qp;
	if (qp) {
		/* The daemon knows the QPs of the ID's session only. */
		if (qp->context != u->id.verbs)
			return uc_fail(EINVAL);
		c->qp = uroce_qp_handle(qp);
		cp->qpn = qp->qp_num;
		cp->srq = qp->srq != NULL;
	} else if (p) {
		cp->qpn = p->qp_num;
		cp->srq = p->srq;
	}
	return 0;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	if (valid_param(u, conn_param))
		return -1;
	const struct rdma_conn_param *p = conn_param;
	u->init_depth = p && p->initiator_depth != RDMA_MAX_INIT_DEPTH ? p->initiator_depth : u->dev->max_init_depth;
	u->resp_res = p && p->responder_resources != RDMA_MAX_RESP_RES ? p->responder_resources
								       : u->dev->max_resp_res;
	struct up_cm_connect c = {.id = u->handle};
	if (fill_connect(u, &c, p, id->ps == RDMA_PS_IB ? UC_IB_REQ_PRIVATE_DATA : UC_REQ_PRIVATE_DATA))
		return -1;
	if (id_call(u, UP_OP_CM_CONNECT, &c, sizeof(c), NULL, 0))
		return -1;
	free(u->connect);
	u->connect = NULL;
	u->connect_len = 0;
	return complete(u);
}

static uint8_t min8(uint8_t a, uint8_t b)
{
	return a < b ? a : b;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	const struct rdma_conn_param *p = conn_param;
	if (!id->qp && !p)
		return uc_fail(EINVAL);
	if (valid_param(u, p))
		return -1;
	/* What the request offered, within the device's limits, unless the program says. */
	if (!p || p->initiator_depth == RDMA_MAX_INIT_DEPTH)
		u->init_depth = min8(u->init_depth, u->dev->max_init_depth);
	else
		u->init_depth = p->initiator_depth;
	if (!p || p->responder_resources == RDMA_MAX_RESP_RES)
		u->resp_res = min8(u->resp_res, u->dev->max_resp_res);
	else
		u->resp_res = p->responder_resources;
	struct up_cm_connect c = {.id = u->handle};
	if (fill_connect(u, &c, p, UC_MAX_PRIVATE_DATA))
		return -1;
	if (id_call(u, UP_OP_CM_ACCEPT, &c, sizeof(c), NULL, 0)) {
		int e = errno;
		uc_qp_to_err(id);
		return uc_fail(e);
	}
	/* The QP is in RTS now: programs may send before ESTABLISHED. */
	uc_qp_sync_state(id);
	if (id->qp_type == IBV_QPT_UD)
		return 0;
	return complete(u);
}

static int reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	struct up_cm_reject r = {.id = u->handle};
	if (private_data && private_data_len) {
		if (private_data_len > sizeof(r.private_data))
			return uc_fail(EINVAL);
		memcpy(r.private_data, private_data, private_data_len);
		r.private_data_len = private_data_len;
	}
	return id_call(u, UP_OP_CM_REJECT, &r, sizeof(r), NULL, 0);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len);
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	/* The daemon's REJ says "consumer reject"; ECE is nothing uroce negotiates. */
	return reject(id, private_data, private_data_len);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	/* As librdmacm: the QP stops first, its outstanding work flushed. */
	if (uc_qp_to_err(id))
		return -1;
	struct up_handle h = {.handle = u->handle};
	if (id_call(u, UP_OP_CM_DISCONNECT, &h, sizeof(h), NULL, 0))
		return -1;
	return complete(u);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct uc_id *u = uc_id(listen);
	if (!u || !id || !u->sync)
		return uc_fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	int err = 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
		err = ENODEV;
	else if (ev->status)
		err = ev->status < 0 ? -ev->status : ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	if (!err && u->qp_init_attr) {
		struct ibv_qp_init_attr attr = *u->qp_init_attr;
		if (rdma_create_qp(ev->id, listen->pd, &attr))
			err = errno;
	}
	if (err) {
		listen->event = ev;
		return uc_fail(err);
	}
	*id = ev->id;
	ev->id->event = ev;
	return 0;
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	/* The daemon sees the QP's first packets itself (SPEC.md: ESTABLISHED on the RTU or the first packet). */
	(void)event;
	return uc_id(id) ? 0 : uc_fail(EINVAL);
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	struct uc_id *u = uc_id(id);
	if (!u)
		return uc_fail(EINVAL);
	if (level != RDMA_OPTION_ID)
		return uc_fail(ENOSYS);
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
		if (!optval || optlen != sizeof(uint8_t))
			return uc_fail(EINVAL);
		u->tos = *(uint8_t *)optval;
		return 0;
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (!optval || optlen != sizeof(uint8_t))
			return uc_fail(EINVAL);
		return 0;
	case RDMA_OPTION_ID_REUSEADDR:
	case RDMA_OPTION_ID_AFONLY:
		if (!optval || optlen != sizeof(int))
			return uc_fail(EINVAL);
		return 0;
	default:
		return uc_fail(ENOSYS);
	}
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	/*
	 * For a QP the program moves itself (rdma_connect or rdma_accept of
	 * an ID without id->qp): the daemon knows the values of the CM
	 * exchange; INIT's at any time, RTR's and RTS's once the request or
	 * the reply came.
	 */
	struct uc_id *u = uc_id(id);
	if (!u || !qp_attr || !qp_attr_mask)
		return uc_fail(EINVAL);
	struct up_cm_init_qp_attr req = {.id = u->handle, .state = qp_attr->qp_state};
	struct up_cm_qp_attr r;
	if (id_call(u, UP_OP_CM_INIT_QP_ATTR, &req, sizeof(req), &r, sizeof(r)))
		return -1;
	const struct up_qp_attr *a = &r.attr;
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->qp_state = a->state;
	qp_attr->path_mtu = a->path_mtu;
	qp_attr->qkey = a->qkey;
	qp_attr->rq_psn = a->rq_psn;
	qp_attr->sq_psn = a->sq_psn;
	qp_attr->dest_qp_num = a->dest_qpn;
	qp_attr->qp_access_flags = a->access_flags;
	qp_attr->pkey_index = a->pkey_index;
	qp_attr->port_num = a->port;
	qp_attr->timeout = a->timeout;
	qp_attr->retry_cnt = a->retry_cnt;
	qp_attr->rnr_retry = a->rnr_retry;
	qp_attr->max_rd_atomic = a->max_rd_atomic;
	qp_attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	qp_attr->min_rnr_timer = a->min_rnr_timer;
	struct ibv_ah_attr *ah = &qp_attr->ah_attr;
	memcpy(ah->grh.dgid.raw, a->ah.dgid, sizeof(ah->grh.dgid.raw));
	ah->grh.flow_label = a->ah.flow_label;
	ah->grh.sgid_index = a->ah.sgid_index;
	ah->grh.hop_limit = a->ah.hop_limit;
	ah->grh.traffic_class = u->tos;
	ah->is_global = a->ah.is_global;
	ah->dlid = a->ah.dlid;
	ah->sl = a->ah.sl;
	ah->port_num = a->ah.port;
	*qp_attr_mask = (int)r.mask;
	return 0;
}

int rdma_establish(struct rdma_cm_id *id)
{
	/* After CONNECT_RESPONSE, the program's QP in RTS: the daemon sends the RTU. */
	struct uc_id *u = uc_id(id);
	if (!u || id->qp)
		return uc_fail(EINVAL);
	struct up_handle h = {.handle = u->handle};
	return id_call(u, UP_OP_CM_ESTABLISH, &h, sizeof(h), NULL, 0);
}

static __be16 port_of(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)sa)->sin_port;
	case AF_INET6:
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	default:
		return 0;
	}
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? port_of(&id->route.addr.src_addr) : 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? port_of(&id->route.addr.dst_addr) : 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}

/*
 * Multicast. On RoCE a group needs no manager: its GID is the group's
 * address (::ffff:a.b.c.d for IPv4), its Q_Key RDMA_UDP_QKEY, datagrams
 * go to QPN 0xFFFFFF. Joining attaches the ID's QP to the group (unless
 * send-only), as librdmacm does when the join completes, and queues
 * RDMA_CM_EVENT_MULTICAST_JOIN (MULTICAST_ERROR when the attach fails)
 * on the ID's channel; leaving detaches it. A full member also joins the
 * group at the IP level on the interface of the ID's source address, as
 * rdma_cm does for RoCE v2, so that the host reports its membership
 * (IGMP, MLD) to the switches and routers that forward multicast only to
 * members: a socket of the library's holds the membership until the
 * group is left.
 */

static int mcast_gid(const struct sockaddr *sa, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		if (!IN_MULTICAST(ntohl(in->sin_addr.s_addr)))
			return -1;
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(g->raw + 12, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		if (!IN6_IS_ADDR_MULTICAST(&in6->sin6_addr))
			return -1;
		memcpy(g->raw, &in6->sin6_addr, 16);
		return 0;
	}
	return -1;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

/* The index of the interface that has address a; 0 when none has. */
static unsigned ifindex_of(const struct sockaddr *a)
{
	struct ifaddrs *ifs, *i;
	unsigned idx = 0;
	if (getifaddrs(&ifs))
		return 0;
	for (i = ifs; i && !idx; i = i->ifa_next)
		if (i->ifa_addr && same_addr(i->ifa_addr, a))
			idx = if_nametoindex(i->ifa_name);
	freeifaddrs(ifs);
	return idx;
}

/*
 * ip_join makes the host a member of group on the interface of src and
 * returns the socket that holds the membership, or -1 (errno set).
 */
static int ip_join(const struct sockaddr *src, const struct sockaddr *group)
{
	if (src->sa_family != group->sa_family) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	unsigned idx = ifindex_of(src);
	int fd = socket(group->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int r;
	if (group->sa_family == AF_INET) {
		struct ip_mreqn mr = {.imr_multiaddr = ((const struct sockaddr_in *)group)->sin_addr,
				      .imr_address = ((const struct sockaddr_in *)src)->sin_addr,
				      .imr_ifindex = (int)idx};
		r = setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof(mr));
	} else {
		struct ipv6_mreq mr = {.ipv6mr_multiaddr = ((const struct sockaddr_in6 *)group)->sin6_addr,
				       .ipv6mr_interface = idx ? idx : ((const struct sockaddr_in6 *)src)->sin6_scope_id};
		r = setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mr, sizeof(mr));
	}
	if (r) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	struct uc_id *u = uc_id(id);
	if (!u || !attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr ||
	    (attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)))
		return uc_fail(EINVAL);
	uint32_t flags = attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS ? attr->join_flags
									 : RDMA_MC_JOIN_FLAG_FULLMEMBER;
	if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return uc_fail(EINVAL);
	/* rdma_cm's rules: a UD ID, bound or resolved to the device. */
	if (id->qp_type != IBV_QPT_UD || !id->route.addr.src_addr.sa_family)
		return uc_fail(EINVAL);
	struct uc_mcast *m = calloc(1, sizeof(*m));
	struct uc_event *e = calloc(1, sizeof(*e));
	if (!m || !e) {
		free(m);
		free(e);
		return uc_fail(ENOMEM);
	}
	if (uc_addr_len(attr->addr) > sizeof(m->addr) || mcast_gid(attr->addr, &m->mgid)) {
		free(m);
		free(e);
		return uc_fail(EINVAL);
	}
	memcpy(&m->addr, attr->addr, uc_addr_len(attr->addr));
	m->context = context;
	m->send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	m->ipfd = -1;
	int err = 0;
	if (id->qp && !m->send_only) {
		err = ibv_attach_mcast(id->qp, &m->mgid, 0);
		m->attached = err == 0;
	}
	if (!err && !m->send_only && (m->ipfd = ip_join(&id->route.addr.src_addr, attr->addr)) < 0)
		uc_debug("join multicast: no IP-level membership: %s", strerror(errno));

	e->ev.id = id;
	e->ev.event = err ? RDMA_CM_EVENT_MULTICAST_ERROR : RDMA_CM_EVENT_MULTICAST_JOIN;
	e->ev.status = -err;
	e->owner = u;
	struct rdma_ud_param *p = &e->ev.param.ud;
	p->private_data = context;
	p->ah_attr.is_global = 1;
	p->ah_attr.grh.dgid = m->mgid;
	p->ah_attr.grh.sgid_index = u->sgid_index;
	p->ah_attr.grh.hop_limit = 64; /* IPV6_DEFAULT_HOPLIMIT, as rdma_cm's RoCE v2 joins */
	p->ah_attr.grh.traffic_class = u->tos;
	p->ah_attr.port_num = id->port_num ? id->port_num : 1;
	p->qp_num = 0xffffff;
	p->qkey = RDMA_UDP_QKEY;
	struct uc_channel *c = channel_of(id->channel);
	pthread_mutex_lock(&mu);
	m->next = u->mcast;
	u->mcast = m;
	u->reported++;
	held_put(c, e);
	pthread_mutex_unlock(&mu);
	uint64_t one = 1;
	if (write(c->ch.fd, &one, sizeof(one)) != sizeof(one))
		uc_debug("channel %u: count not added (%s)", c->handle, strerror(errno));
	return complete(u);
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex a = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS, .addr = addr};
	return rdma_join_multicast_ex(id, &a, context);
}

/* Unlinks the ID's group at addr (any, when addr is NULL): NULL when it joined none. */
static struct uc_mcast *mcast_take(struct uc_id *u, const struct sockaddr *addr)
{
	pthread_mutex_lock(&mu);
	struct uc_mcast **p = &u->mcast;
	while (*p && addr && !same_addr((struct sockaddr *)&(*p)->addr, addr))
		p = &(*p)->next;
	struct uc_mcast *m = *p;
	if (m)
		*p = m->next;
	pthread_mutex_unlock(&mu);
	return m;
}

static void mcast_leave(struct uc_id *u, struct uc_mcast *m)
{
	if (m->attached && u->id.qp) {
		int e = ibv_detach_mcast(u->id.qp, &m->mgid, 0);
		if (e)
			uc_debug("leave multicast: detach: %s", strerror(e));
	}
	if (m->ipfd >= 0)
		close(m->ipfd);
	free(m);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct uc_id *u = uc_id(id);
	if (!u || !addr)
		return uc_fail(EINVAL);
	struct uc_mcast *m = mcast_take(u, addr);
	if (!m)
		return uc_fail(EADDRNOTAVAIL);
	mcast_leave(u, m);
	return 0;
}

/* ECE: kept, as librdmacm keeps it, but nothing carries it. */

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	struct uc_id *u = uc_id(id);
	if (!u || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return uc_fail(EINVAL);
	u->local_ece = *ece;
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	struct uc_id *u = uc_id(id);
	if (!u || id->qp || !ece)
		return uc_fail(EINVAL);
	*ece = u->remote_ece;
	ece->comp_mask = 0;
	return 0;
}

/* Endpoints. */

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return uc_fail(EINVAL);
	enum rdma_port_space ps = res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP;
	enum ibv_qp_type qpt = res->ai_qp_type ? res->ai_qp_type : IBV_QPT_RC;
	struct rdma_cm_id *cm;
	if (create_id(NULL, &cm, NULL, ps, qpt))
		return -1;
	struct uc_id *u = uc_id(cm);
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cm, res->ai_src_addr))
			goto err;
		if (pd)
			cm->pd = pd;
		if (qp_init_attr) {
			if (!(u->qp_init_attr = malloc(sizeof(*qp_init_attr)))) {
				errno = ENOMEM;
				goto err;
			}
			*u->qp_init_attr = *qp_init_attr;
			u->qp_init_attr->qp_type = qpt;
		}
		*id = cm;
		return 0;
	}
	if (rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000))
		goto err;
	if (rdma_resolve_route(cm, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = qpt;
		if (rdma_create_qp(cm, pd, qp_init_attr))
			goto err;
	}
	if (res->ai_connect_len && res->ai_connect) {
		if (!(u->connect = malloc(res->ai_connect_len))) {
			errno = ENOMEM;
			goto err;
		}
		memcpy(u->connect, res->ai_connect, res->ai_connect_len);
		u->connect_len = res->ai_connect_len;
	}
	*id = cm;
	return 0;
err:;
	int e = errno;
	rdma_destroy_ep(cm);
	return uc_fail(e);
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!uc_id(id))
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}
