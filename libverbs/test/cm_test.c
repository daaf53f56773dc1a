/*
 * cm_test: a check of the RDMA CM API (librdmacm) as its man pages
 * describe it, between two processes, with nothing in it that depends on
 * which librdmacm or device runs it.
 *
 *   cm_test [-p PORT]           server
 *   cm_test [-p PORT] SERVER    client
 *
 * Build: gcc -O2 -Wall -Werror -o cm_test cm_test.c -lrdmacm -libverbs
 *
 * The server listens on PORT (default 18720) on every address; it
 * accepts the first connection request, with private data, and rejects
 * the second, with private data. The client checks, each case printing
 * `ok NAME` or `FAIL NAME: reason`:
 *
 *   local      calls that need no peer: devices, event names, a
 *              non-blocking channel, bad addresses and options, the
 *              address info of a numeric host
 *   connect    an asynchronous connection: ADDR_RESOLVED and
 *              ROUTE_RESOLVED with the route filled in, ESTABLISHED with
 *              the server's private data, a SEND each way, DISCONNECTED
 *   rejected   REJECTED with the server's reason and private data
 *   sync       a synchronous ID (no channel) to a port nobody listens on:
 *              rdma_connect fails with ECONNREFUSED
 *   mcast      UD multicast on the client's own device: MULTICAST_JOIN
 *              with QPN 0xFFFFFF, the host a member of the IPv4 group on
 *              the interface of the ID's address (/proc/net/igmp) while
 *              a full member, not when send-only, and no longer once the
 *              group is left or the ID destroyed
 *
 * and the server its side of connect and rejected. The exit status is 1
 * when a case failed on this end, 2 on a usage or set-up error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MSG_LEN 64

static int failed;
static char why[256];

/* fail records why the current case failed (the first reason) and returns -1. */
static int fail(const char *fmt, ...)
{
	if (!why[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
	}
	return -1;
}

static void report(const char *name, int ret)
{
	if (ret || why[0]) {
		printf("FAIL %s: %s\n", name, why[0] ? why : "failed");
		failed = 1;
	} else {
		printf("ok %s\n", name);
	}
	fflush(stdout);
	why[0] = 0;
}

/* expect checks that a call failed with -1 and errno e. */
static int expect(const char *what, int ret, int e)
{
	if (ret != -1 || errno != e)
		return fail("%s: returned %d errno %d (%s), want -1 and %s", what, ret, ret ? errno : 0,
			    strerror(errno), strerror(e));
	return 0;
}

/* next takes the channel's next event, which must be of type want. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) {
		fail("rdma_get_cm_event: %s", strerror(errno));
		return NULL;
	}
	if (ev->event != want) {
		fail("%s (status %d), want %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

static void set_addr(struct sockaddr_in *sin, const char *ip, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (ip)
		inet_pton(AF_INET, ip, &sin->sin_addr);
}

/* A QP on the ID with CQs of the library's, and a registered message buffer. */
struct conn {
	struct rdma_cm_id *id;
	char buf[MSG_LEN];
	struct ibv_mr *mr;
};

static int make_qp(struct conn *c)
{
	struct ibv_qp_init_attr attr = {.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(c->id, NULL, &attr))
		return fail("rdma_create_qp: %s", strerror(errno));
	if (!c->id->qp || !c->id->send_cq || !c->id->recv_cq || !c->id->send_cq_channel || !c->id->pd)
		return fail("rdma_create_qp left the ID without its QP, CQs, channels or PD");
	c->mr = rdma_reg_msgs(c->id, c->buf, sizeof(c->buf));
	if (!c->mr)
		return fail("rdma_reg_msgs: %s", strerror(errno));
	if (rdma_post_recv(c->id, c, c->buf, sizeof(c->buf), c->mr))
		return fail("rdma_post_recv: %s", strerror(errno));
	return 0;
}

/* exchange sends msg and receives the peer's, which must be want. */
static int exchange(struct conn *c, const char *msg, const char *want)
{
	char out[MSG_LEN];
	struct ibv_mr *mr = rdma_reg_msgs(c->id, out, sizeof(out));
	if (!mr)
		return fail("rdma_reg_msgs: %s", strerror(errno));
	snprintf(out, sizeof(out), "%s", msg);
	struct ibv_wc wc;
	int ret = rdma_post_send(c->id, NULL, out, sizeof(out), mr, 0);
	if (ret)
		ret = fail("rdma_post_send: %s", strerror(errno));
	if (!ret && rdma_get_send_comp(c->id, &wc) != 1)
		ret = fail("rdma_get_send_comp: %s", strerror(errno));
	if (!ret && wc.status != IBV_WC_SUCCESS)
		ret = fail("send: %s", ibv_wc_status_str(wc.status));
	if (!ret && rdma_get_recv_comp(c->id, &wc) != 1)
		ret = fail("rdma_get_recv_comp: %s", strerror(errno));
	if (!ret && wc.status != IBV_WC_SUCCESS)
		ret = fail("receive: %s", ibv_wc_status_str(wc.status));
	if (!ret && strcmp(c->buf, want) != 0)
		ret = fail("received %.*s, want %s", MSG_LEN, c->buf, want);
	rdma_dereg_mr(mr);
	return ret;
}

static void free_conn(struct conn *c)
{
	if (c->mr)
		rdma_dereg_mr(c->mr);
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->id)
		rdma_destroy_id(c->id);
}

/* The server. */

static int server_accept(struct rdma_event_channel *ch, struct rdma_cm_id *listen, void *ctx)
{
	struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	if (!ev)
		return -1;
	struct conn c = {.id = ev->id};
	const struct rdma_conn_param *p = &ev->param.conn;
	if (ev->listen_id != listen || c.id == listen)
		fail("the request's listen_id %p and id %p, the listener %p", (void *)ev->listen_id, (void *)c.id,
		     (void *)listen);
	else if (c.id->context != ctx || !c.id->verbs || c.id->channel != ch)
		fail("the new ID's context %p, verbs %p, channel %p", c.id->context, (void *)c.id->verbs,
		     (void *)c.id->channel);
	else if (!p->private_data || p->private_data_len < 6 || memcmp(p->private_data, "hello", 6) != 0)
		fail("the request's private data (%d bytes) is not hello", p->private_data_len);
	else if (c.id->route.addr.dst_addr.sa_family != AF_INET || c.id->route.addr.src_addr.sa_family != AF_INET)
		fail("the new ID's addresses are not IPv4");
	else if (rdma_get_src_port(c.id) != rdma_get_src_port(listen))
		fail("the new ID's port %u is not the listener's %u", ntohs(rdma_get_src_port(c.id)),
		     ntohs(rdma_get_src_port(listen)));
	rdma_ack_cm_event(ev);
	int ret = why[0] ? -1 : make_qp(&c);
	struct rdma_conn_param cp = {.private_data = "world", .private_data_len = 6};
	if (!ret && rdma_accept(c.id, &cp))
		ret = fail("rdma_accept: %s", strerror(errno));
	if (!ret && (ev = next(ch, RDMA_CM_EVENT_ESTABLISHED))) {
		if (ev->id != c.id)
			ret = fail("ESTABLISHED for %p, not the new ID %p", (void *)ev->id, (void *)c.id);
		rdma_ack_cm_event(ev);
	}
	if (!ret && !why[0])
		ret = exchange(&c, "from the server", "from the client");
	if (!ret && !why[0] && (ev = next(ch, RDMA_CM_EVENT_DISCONNECTED)))
		rdma_ack_cm_event(ev);
	free_conn(&c);
	return ret || why[0] ? -1 : 0;
}

static int server_reject(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	if (!ev)
		return -1;
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	char big[200] = "";
	int ret = expect("rdma_reject with 200 bytes", rdma_reject(id, big, sizeof(big)), EINVAL);
	if (rdma_reject(id, "nope", 5))
		ret = fail("rdma_reject: %s", strerror(errno));
	rdma_destroy_id(id);
	return ret;
}

static int server(int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		perror("rdma_create_event_channel");
		return 2;
	}
	int marker;
	struct rdma_cm_id *listen;
	struct sockaddr_in sin;
	set_addr(&sin, NULL, port);
	if (rdma_create_id(ch, &listen, &marker, RDMA_PS_TCP) || rdma_bind_addr(listen, (struct sockaddr *)&sin) ||
	    rdma_listen(listen, 4)) {
		perror("cm_test: listen");
		return 2;
	}
	if (ntohs(rdma_get_src_port(listen)) != port) {
		fprintf(stderr, "cm_test: bound to port %u, not %d\n", ntohs(rdma_get_src_port(listen)), port);
		return 2;
	}
	printf("listening\n");
	fflush(stdout);
	report("connect", server_accept(ch, listen, &marker));
	report("rejected", server_reject(ch));
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch);
	return failed;
}

/* The client. */

static int local(const char *server_ip, int port)
{
	int n = -1;
	struct ibv_context **devs = rdma_get_devices(&n);
	if (!devs || n < 1 || !devs[0] || devs[n])
		return fail("rdma_get_devices: %d devices", n);
	rdma_free_devices(devs);
	if (strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") != 0 ||
	    strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT") != 0)
		return fail("rdma_event_str");

	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return fail("rdma_create_event_channel: %s", strerror(errno));
	int fl = fcntl(ch->fd, F_GETFL);
	struct rdma_cm_event *ev;
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return fail("fcntl: %s", strerror(errno));
	expect("rdma_get_cm_event on an empty non-blocking channel", rdma_get_cm_event(ch, &ev), EAGAIN);
	fcntl(ch->fd, F_SETFL, fl);

	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id: %s", strerror(errno));
	if (id->channel != ch || id->ps != RDMA_PS_TCP || id->qp_type != IBV_QPT_RC)
		fail("rdma_create_id: channel %p, port space %#x, QP type %d", (void *)id->channel, id->ps, id->qp_type);
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	expect("rdma_resolve_addr to an AF_UNIX address", rdma_resolve_addr(id, NULL, (struct sockaddr *)&sun, 2000),
	       EINVAL);
	expect("rdma_resolve_route before rdma_resolve_addr", rdma_resolve_route(id, 2000), EINVAL);
	struct rdma_conn_param cp = {0};
	expect("rdma_connect before the route", rdma_connect(id, &cp), EINVAL);
	uint8_t tos = 0;
	expect("RDMA_OPTION_ID_TOS of 4 bytes", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4),
	       EINVAL);
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1))
		fail("RDMA_OPTION_ID_TOS: %s", strerror(errno));
	struct sockaddr_in sin;
	set_addr(&sin, "203.0.113.9", 0);
	expect("rdma_bind_addr to an address of no device", rdma_bind_addr(id, (struct sockaddr *)&sin), EADDRNOTAVAIL);
	if (rdma_destroy_id(id))
		fail("rdma_destroy_id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);

	struct rdma_addrinfo hints = {.ai_flags = RAI_NUMERICHOST, .ai_port_space = RDMA_PS_TCP}, *res;
	char svc[16];
	snprintf(svc, sizeof(svc), "%d", port);
	int ret = rdma_getaddrinfo(server_ip, svc, &hints, &res);
	if (ret)
		return fail("rdma_getaddrinfo: %s", gai_strerror(ret));
	struct sockaddr_in *dst = (struct sockaddr_in *)res->ai_dst_addr;
	set_addr(&sin, server_ip, port);
	if (!dst || res->ai_dst_len != sizeof(sin) || dst->sin_family != AF_INET || dst->sin_port != sin.sin_port ||
	    dst->sin_addr.s_addr != sin.sin_addr.s_addr || res->ai_qp_type != IBV_QPT_RC ||
	    res->ai_port_space != RDMA_PS_TCP || (res->ai_flags & RAI_PASSIVE))
		fail("rdma_getaddrinfo(%s, %s): not the address, RC and TCP", server_ip, svc);
	rdma_freeaddrinfo(res);
	return why[0] ? -1 : 0;
}

/* connect_to resolves and connects a new ID of ch to ip:port with private data pd. */
static int connect_to(struct rdma_event_channel *ch, struct conn *c, const char *ip, int port, const char *pd)
{
	struct sockaddr_in sin;
	set_addr(&sin, ip, port);
	if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP))
		return fail("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sin, 2000))
		return fail("rdma_resolve_addr: %s", strerror(errno));
	struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (!ev)
		return -1;
	struct rdma_addr *a = &c->id->route.addr;
	if (ev->id != c->id || ev->status != 0)
		fail("ADDR_RESOLVED for %p status %d", (void *)ev->id, ev->status);
	else if (a->src_addr.sa_family != AF_INET || a->dst_sin.sin_addr.s_addr != sin.sin_addr.s_addr ||
		 rdma_get_dst_port(c->id) != sin.sin_port || !c->id->verbs)
		fail("after ADDR_RESOLVED the route's addresses are not set");
	rdma_ack_cm_event(ev);
	if (why[0])
		return -1;
	if (rdma_resolve_route(c->id, 2000))
		return fail("rdma_resolve_route: %s", strerror(errno));
	if (!(ev = next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return -1;
	rdma_ack_cm_event(ev);
	struct ibv_sa_path_rec *p = c->id->route.path_rec;
	if (c->id->route.num_paths < 1 || !p || !p->mtu)
		return fail("after ROUTE_RESOLVED: %d paths", c->id->route.num_paths);
	if (memcmp(p->dgid.raw + 12, &sin.sin_addr, 4) != 0 || p->dgid.raw[10] != 0xff)
		return fail("the path's DGID is not the server's address");
	if (make_qp(c))
		return -1;
	struct rdma_conn_param cp = {.private_data = pd, .private_data_len = strlen(pd) + 1,
				     .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				     .rnr_retry_count = 7};
	if (rdma_connect(c->id, &cp))
		return fail("rdma_connect: %s", strerror(errno));
	return 0;
}

static int client_connect(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return fail("rdma_create_event_channel: %s", strerror(errno));
	struct conn c = {0};
	struct rdma_cm_event *ev = NULL;
	/* The server may not listen yet: it is then rejected with reason 8 (invalid service ID). */
	for (int tries = 0; tries < 100; tries++) {
		if (connect_to(ch, &c, ip, port, "hello"))
			break;
		if (rdma_get_cm_event(ch, &ev)) {
			fail("rdma_get_cm_event: %s", strerror(errno));
			break;
		}
		if (ev->event != RDMA_CM_EVENT_REJECTED || ev->status != 8)
			break;
		rdma_ack_cm_event(ev);
		ev = NULL;
		free_conn(&c);
		memset(&c, 0, sizeof(c));
		usleep(100000);
	}
	int ret = why[0] ? -1 : 0;
	if (!ret && ev->event != RDMA_CM_EVENT_ESTABLISHED)
		ret = fail("%s (status %d), want ESTABLISHED", rdma_event_str(ev->event), ev->status);
	if (!ret && (ev->id != c.id || !ev->param.conn.private_data || ev->param.conn.private_data_len < 6 ||
		     memcmp(ev->param.conn.private_data, "world", 6) != 0))
		ret = fail("ESTABLISHED: the ID or the private data (%d bytes) is not the server's",
			   ev->param.conn.private_data_len);
	if (ev)
		rdma_ack_cm_event(ev);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (!ret && (ibv_query_qp(c.id->qp, &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_RTS))
		ret = fail("the QP is not in RTS after ESTABLISHED");
	if (!ret)
		ret = exchange(&c, "from the client", "from the server");
	if (!ret && rdma_disconnect(c.id))
		ret = fail("rdma_disconnect: %s", strerror(errno));
	if (!ret && (ev = next(ch, RDMA_CM_EVENT_DISCONNECTED)))
		rdma_ack_cm_event(ev);
	free_conn(&c);
	rdma_destroy_event_channel(ch);
	return ret || why[0] ? -1 : 0;
}

static int client_rejected(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return fail("rdma_create_event_channel: %s", strerror(errno));
	struct conn c = {0};
	int ret = connect_to(ch, &c, ip, port, "again");
	struct rdma_cm_event *ev = ret ? NULL : next(ch, RDMA_CM_EVENT_REJECTED);
	if (ev) {
		const struct rdma_conn_param *p = &ev->param.conn;
		if (ev->id != c.id || ev->status != 28)
			fail("REJECTED for %p with reason %d, want the ID and 28 (consumer reject)", (void *)ev->id,
			     ev->status);
		else if (!p->private_data || p->private_data_len < 5 || memcmp(p->private_data, "nope", 5) != 0)
			fail("REJECTED: the private data (%d bytes) is not the server's", p->private_data_len);
		rdma_ack_cm_event(ev);
	}
	free_conn(&c);
	rdma_destroy_event_channel(ch);
	return ret || why[0] ? -1 : 0;
}

static int client_sync(const char *ip, int port)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return fail("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in sin;
	set_addr(&sin, ip, port);
	/* Synchronous: each call returns when its event came (id->event). */
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
		fail("rdma_resolve_addr: %s", strerror(errno));
	else if (!id->event || id->event->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		fail("rdma_resolve_addr: id->event is not ADDR_RESOLVED");
	else if (rdma_resolve_route(id, 2000))
		fail("rdma_resolve_route: %s", strerror(errno));
	struct conn c = {.id = id};
	if (!why[0] && !make_qp(&c)) {
		struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
		expect("rdma_connect to a port nobody listens on", rdma_connect(id, &cp), ECONNREFUSED);
		if (!why[0] && (!id->event || id->event->event != RDMA_CM_EVENT_REJECTED))
			fail("rdma_connect: id->event is not REJECTED");
	}
	free_conn(&c);
	return why[0] ? -1 : 0;
}

/*
 * igmp_member reports whether /proc/net/igmp lists group g (network
 * order) on interface ifname: 1 or 0, -1 when it cannot be read.
 */
static int igmp_member(uint32_t g, const char *ifname)
{
	FILE *f = fopen("/proc/net/igmp", "r");
	if (!f)
		return -1;
	char line[256], dev[64] = "", hex[16];
	snprintf(hex, sizeof(hex), "%08X", g);
	int found = 0;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] >= '0' && line[0] <= '9')
			sscanf(line, "%*d %63s", dev); /* "2\tveth0     : ..." */
		else if (line[0] == '\t' && strstr(line, hex) && strcmp(dev, ifname) == 0)
			found = 1;
	}
	fclose(f);
	return found;
}

/* local_to finds the address and interface this host reaches ip from. */
static int local_to(const char *ip, struct sockaddr_in *sin, char *ifname, size_t n)
{
	struct sockaddr_in dst;
	socklen_t len = sizeof(*sin);
	set_addr(&dst, ip, 9);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof(dst)) || getsockname(fd, (struct sockaddr *)sin, &len))
		return fail("the local address towards %s: %s", ip, strerror(errno));
	close(fd);
	sin->sin_port = 0;
	struct ifaddrs *ifs, *i;
	if (getifaddrs(&ifs))
		return fail("getifaddrs: %s", strerror(errno));
	ifname[0] = 0;
	for (i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == sin->sin_addr.s_addr)
			snprintf(ifname, n, "%s", i->ifa_name);
	freeifaddrs(ifs);
	return ifname[0] ? 0 : fail("no interface has the local address");
}

/* mc_join makes a UD ID on ch bound to src join group (send-only with sendonly). */
static struct rdma_cm_id *mc_join(struct rdma_event_channel *ch, struct sockaddr_in *src, const char *group,
				  int sendonly)
{
	struct rdma_cm_id *id;
	struct sockaddr_in g;
	set_addr(&g, group, 0);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP)) {
		fail("rdma_create_id(RDMA_PS_UDP): %s", strerror(errno));
		return NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)&g, 2000)) {
		fail("rdma_resolve_addr to %s: %s", group, strerror(errno));
		goto err;
	}
	if (!(ev = next(ch, RDMA_CM_EVENT_ADDR_RESOLVED)))
		goto err;
	rdma_ack_cm_event(ev);
	struct ibv_qp_init_attr attr = {.qp_type = IBV_QPT_UD, .sq_sig_all = 1};
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &attr)) {
		fail("rdma_create_qp(UD): %s", strerror(errno));
		goto err;
	}
	struct rdma_cm_join_mc_attr_ex ja = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					     .join_flags = sendonly ? RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
								    : RDMA_MC_JOIN_FLAG_FULLMEMBER,
					     .addr = (struct sockaddr *)&g};
	if (rdma_join_multicast_ex(id, &ja, id)) {
		fail("rdma_join_multicast_ex %s: %s", group, strerror(errno));
		goto err;
	}
	if (!(ev = next(ch, RDMA_CM_EVENT_MULTICAST_JOIN)))
		goto err;
	if (ev->param.ud.qp_num != 0xffffff || ev->param.ud.private_data != id)
		fail("MULTICAST_JOIN: QPN %#x, context %p", ev->param.ud.qp_num, ev->param.ud.private_data);
	rdma_ack_cm_event(ev);
	return id;
err:
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
	return NULL;
}

static void mc_destroy(struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

static int client_mcast(const char *ip)
{
	struct sockaddr_in src, g;
	char ifname[IF_NAMESIZE + 1];
	if (local_to(ip, &src, ifname, sizeof(ifname)))
		return -1;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return fail("rdma_create_event_channel: %s", strerror(errno));
	const char *full = "239.0.2.81", *sendonly = "239.0.2.82";
	set_addr(&g, full, 0);
	uint32_t gf = g.sin_addr.s_addr;
	set_addr(&g, sendonly, 0);
	uint32_t gs = g.sin_addr.s_addr;
	struct rdma_cm_id *a = NULL, *b = NULL;
	if (igmp_member(gf, ifname) != 0) {
		fail("%s on %s before the join (or /proc/net/igmp unreadable)", full, ifname);
		goto out;
	}
	if (!(a = mc_join(ch, &src, full, 0)) || !(b = mc_join(ch, &src, sendonly, 1)))
		goto out;
	if (igmp_member(gf, ifname) != 1)
		fail("joined %s: the host is not a member on %s", full, ifname);
	if (igmp_member(gs, ifname) != 0)
		fail("a send-only join of %s made the host a member on %s", sendonly, ifname);
	set_addr(&g, full, 0);
	if (rdma_leave_multicast(a, (struct sockaddr *)&g))
		fail("rdma_leave_multicast: %s", strerror(errno));
	if (igmp_member(gf, ifname) != 0)
		fail("left %s: the host is still a member on %s", full, ifname);
	mc_destroy(a);
	/* An ID destroyed without leaving leaves. */
	if (!(a = mc_join(ch, &src, full, 0)))
		goto out;
	if (igmp_member(gf, ifname) != 1)
		fail("joined %s again: the host is not a member on %s", full, ifname);
	mc_destroy(a);
	a = NULL;
	if (igmp_member(gf, ifname) != 0)
		fail("destroyed the ID: the host is still a member of %s on %s", full, ifname);
out:
	if (a)
		mc_destroy(a);
	if (b)
		mc_destroy(b);
	rdma_destroy_event_channel(ch);
	return why[0] ? -1 : 0;
}

static int client(const char *ip, int port)
{
	report("local", local(ip, port));
	report("connect", client_connect(ip, port));
	report("rejected", client_rejected(ip, port));
	report("sync", client_sync(ip, port + 1));
	report("mcast", client_mcast(ip));
	return failed;
}

int main(int argc, char **argv)
{
	int port = 18720, opt;
	while ((opt = getopt(argc, argv, "p:")) != -1) {
		switch (opt) {
		case 'p':
			port = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: cm_test [-p PORT] [SERVER]\n");
			return 2;
		}
	}
	alarm(120);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return optind < argc ? client(argv[optind], port) : server(port);
}
