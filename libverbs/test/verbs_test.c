/*
 * verbs_test: a check of the verbs API as its man pages describe it,
 * between two processes on two ports of a RoCE network, with nothing in
 * it that depends on which verbs library or device runs it.
 *
 *   verbs_test [-d DEV] [-g GIDIDX] [-p PORT] [-m MTU] [-t SECONDS]           server
 *   verbs_test [-d DEV] [-g GIDIDX] [-p PORT] [-m MTU] [-t SECONDS] SERVER    client
 *   verbs_test -L ...                                     a transfer that never ends
 *
 * Build: gcc -O2 -Wall -Werror -o verbs_test verbs_test.c -libverbs
 *
 * The two ends exchange their QP numbers, PSNs, GIDs, addresses and
 * R_Keys over TCP (port 18600 by default) as ibv_rc_pingpong does, then
 * run the same list of cases in lockstep, each printing `ok NAME` (with
 * an optional `# note`), `FAIL NAME: reason`, or `skip NAME: reason` for
 * what the device says it does not support (only the ibv_wr_* cases,
 * without that API, and odp, without on-demand paging). The exit status
 * is 1 when a case failed on this end, 2 on a usage or set-up error.
 *
 * -m is the path MTU (256 ... 4096; default the port's active MTU), -g
 * the GID index (default the first RoCE v2 GID that holds an IPv4
 * address), -t the longest wait for a completion or an event. Every wait
 * is bounded; a watchdog ends the process if the whole run takes more
 * than a few minutes.
 *
 * With -L the client writes and reads the server's memory, checking what
 * it reads, until it is killed (it prints "looping" once the transfer is
 * under way); the server waits until the client's TCP connection ends.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BUF_LEN (64 << 10)  /* each of the malloc'ed and the mmap'ed buffer */
#define IOVA_LEN (8 << 10)  /* the buffer registered at an I/O virtual address */
#define IOVA_BASE 0x7e5700000000ull
#define RO_LEN 4096         /* registered without remote write */
#define QKEY 0x11111111u
#define WRONG_QKEY 0x22222222u
#define GUARD 0xee          /* bytes that must stay untouched */
#define ATOM_OFF 60000      /* the atomic target in the malloc'ed buffer (8-byte aligned) */
#define MW_OFF 40960        /* the memory window in the malloc'ed buffer */
#define WATCHDOG_SECONDS 300

/* The RC QPs each end creates, in the order the peers pair them. */
enum { Q_MAIN, Q_INV, Q_WR, Q_SRQ0, Q_SRQ1, Q_BAD_RKEY, Q_NO_WRITE, Q_BOUNDS, Q_RNR, Q_MW, Q_MW_ERR, Q_CQX, NQP };

static const char *prog = "verbs_test";
static int timeout_ms = 5000;
static int server;
static int failures;
static char why[512];

/* A case's verdict: CHECK sets the reason and leaves the case. */
#define CHECK(cond, ...)                                  \
	do {                                              \
		if (!(cond)) {                            \
			snprintf(why, sizeof(why), __VA_ARGS__); \
			return -1;                        \
		}                                         \
	} while (0)

static char note[256];

/* A case's result: 0 ok, > 0 skipped (why says why), < 0 failed. */
static void report(const char *name, int r)
{
	if (r == 0 && note[0])
		printf("ok %s # %s\n", name, note);
	else if (r == 0)
		printf("ok %s\n", name);
	else if (r > 0)
		printf("skip %s: %s\n", name, why);
	else {
		printf("FAIL %s: %s\n", name, why[0] ? why : "failed");
		failures++;
	}
	fflush(stdout);
	why[0] = note[0] = 0;
}

#define RUN(name, call) report(name, (call))

/* Sets the reason and returns -1, for use in expressions. */
static int failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int failf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return -1;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static void watchdog(int sig)
{
	(void)sig;
	static const char m[] = "FAIL watchdog: the run did not end in time\n";
	(void)!write(1, m, sizeof(m) - 1);
	_exit(3);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Test data: a byte sequence per seed, so stale bytes never pass. */
static uint8_t pat(unsigned seed, size_t i)
{
	return (uint8_t)(seed * 131 + i * 7 + (i >> 8) * 13 + 1);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(seed, i);
}

/* The first index where p differs from the pattern's bytes from start on, or -1. */
static long check_pat_at(const uint8_t *p, size_t n, unsigned seed, size_t start)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pat(seed, start + i))
			return (long)i;
	return -1;
}

static long check_pat(const uint8_t *p, size_t n, unsigned seed)
{
	return check_pat_at(p, n, seed, 0);
}

static long check_byte(const uint8_t *p, size_t n, uint8_t b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return (long)i;
	return -1;
}

/* The out-of-band connection. */

static int oob = -1;

static void write_all(const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t k = write(oob, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			die("out-of-band connection: write: %s", k < 0 ? strerror(errno) : "closed");
		c += k;
		n -= k;
	}
}

static void read_all(void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		ssize_t k = read(oob, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			die("out-of-band connection: read: %s", k < 0 ? strerror(errno) : "the peer closed it");
		c += k;
		n -= k;
	}
}

/* A barrier with the peer: each end passes a byte; the peer's comes back. */
static uint8_t sync_peer(uint8_t mine)
{
	uint8_t theirs;
	write_all(&mine, 1);
	read_all(&theirs, 1);
	return theirs;
}

static void sync_u32(uint32_t *v)
{
	uint32_t n = htobe32(*v);
	write_all(&n, 4);
	read_all(&n, 4);
	*v = be32toh(n);
}

static void oob_connect(const char *host, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = host ? 0 : AI_PASSIVE};
	struct addrinfo *res;
	int e = getaddrinfo(host, port, &hints, &res);
	if (e)
		die("%s:%s: %s", host ? host : "*", port, gai_strerror(e));
	if (!host) {
		int l = -1;
		for (struct addrinfo *a = res; a && l < 0; a = a->ai_next) {
			l = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
			if (l < 0)
				continue;
			int one = 1;
			setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (bind(l, a->ai_addr, a->ai_addrlen) < 0 || listen(l, 1) < 0) {
				close(l);
				l = -1;
			}
		}
		freeaddrinfo(res);
		if (l < 0)
			die("listen on port %s: %s", port, strerror(errno));
		struct pollfd p = {.fd = l, .events = POLLIN};
		if (poll(&p, 1, 120000) != 1)
			die("no client connected to port %s in 120 s", port);
		oob = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (oob < 0)
			die("accept: %s", strerror(errno));
		close(l);
	} else {
		/* The server may not listen yet: try for a while. */
		uint64_t until = now_ms() + 30000;
		for (;;) {
			for (struct addrinfo *a = res; a && oob < 0; a = a->ai_next) {
				oob = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
				if (oob >= 0 && connect(oob, a->ai_addr, a->ai_addrlen) < 0) {
					close(oob);
					oob = -1;
				}
			}
			if (oob >= 0 || now_ms() > until)
				break;
			usleep(100000);
		}
		freeaddrinfo(res);
		if (oob < 0)
			die("connect to %s:%s: %s", host, port, strerror(errno));
	}
	int one = 1;
	setsockopt(oob, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A peer that stops answering ends this one too. */
	struct timeval tv = {.tv_sec = 120};
	setsockopt(oob, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* What the ends tell each other. Every field is a u64, sent big-endian. */
struct info {
	uint64_t qpn[NQP], psn[NQP];
	uint64_t ud_qpn;
	uint64_t buf_addr, buf_rkey;
	uint64_t mm_addr, mm_rkey;
	uint64_t iova, iova_rkey;
	uint64_t ro_addr, ro_rkey;
	uint64_t cap_flags, atomic_cap;
	uint64_t lid;
	uint64_t gid_hi, gid_lo; /* the GID's bytes 0-7 and 8-15 */
	uint64_t wr_api;         /* this end has the ibv_wr_* API (create_qp_ex) */
	uint64_t ud_wr_qpn;
};

static void exchange(const struct info *mine, struct info *theirs)
{
	uint64_t a[sizeof(struct info) / 8];
	memcpy(a, mine, sizeof(a));
	for (size_t i = 0; i < sizeof(a) / 8; i++)
		a[i] = htobe64(a[i]);
	write_all(a, sizeof(a));
	read_all(a, sizeof(a));
	for (size_t i = 0; i < sizeof(a) / 8; i++)
		a[i] = be64toh(a[i]);
	memcpy(theirs, a, sizeof(a));
}

static void gid_to_info(const union ibv_gid *g, struct info *in)
{
	in->gid_hi = be64toh(g->global.subnet_prefix);
	in->gid_lo = be64toh(g->global.interface_id);
}

static void gid_from_info(const struct info *in, union ibv_gid *g)
{
	g->global.subnet_prefix = htobe64(in->gid_hi);
	g->global.interface_id = htobe64(in->gid_lo);
}

static int gid_is_v4(const union ibv_gid *g)
{
	static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(g->raw, pfx, 12) == 0;
}

static const char *gid_str(const union ibv_gid *g, char *b, size_t n)
{
	if (!inet_ntop(AF_INET6, g->raw, b, n))
		snprintf(b, n, "?");
	return b;
}

/* The resources of one end. */

struct end {
	struct ibv_device **list;
	struct ibv_device *dev;
	struct ibv_context *ctx;
	struct ibv_device_attr attr;
	struct ibv_port_attr port;
	union ibv_gid gid;
	int gidx;
	enum ibv_mtu mtu;
	int mtu_bytes;
	struct ibv_pd *pd;
	uint8_t *buf, *mm, *ibuf, *ro;
	struct ibv_mr *buf_mr, *mm_mr, *iova_mr, *ro_mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *ev_cq;   /* the main QP's receive CQ, with the channel */
	struct ibv_cq *cq;      /* the main QP's send CQ */
	struct ibv_cq *srq_cq;  /* the QPs on the SRQ */
	struct ibv_cq *err_cq;  /* the QPs of the error cases */
	struct ibv_cq *ud_cq;
	struct ibv_cq *local_cq; /* QPs that never connect */
	struct ibv_cq *wr_cq;    /* the QPs of the ibv_wr_* API, both queues */
	struct ibv_cq_ex *cqx;   /* ibv_create_cq_ex's: qp[Q_CQX]'s, both queues */
	struct ibv_srq *srq;
	struct ibv_qp *qp[NQP];
	uint32_t psn[NQP];
	struct ibv_qp *ud;
	uint32_t ud_psn;
	/* The ibv_wr_* API: qp[Q_WR] and ud_wr, made with send_ops_flags. */
	struct ibv_qp *ud_wr;
	uint32_t ud_wr_psn;
	struct ibv_qp_ex *wr_rc, *wr_ud;
	struct ibv_qp_cap wr_cap;
	char wr_skip[200];   /* why this end has no ibv_wr_* API, or empty */
	uint64_t wr_refused; /* the RC send_ops_flags ibv_create_qp_ex refuses (EOPNOTSUPP) */
	struct ibv_ah *ah, *reply_ah;
	struct info peer;
	union ibv_gid peer_gid;
};

static struct end E;
static int ev_cq_context; /* its address is the CQ's context */

static const char *wc_str(const struct ibv_wc *wc, char *b, size_t n)
{
	snprintf(b, n, "wr_id %llu status %d (%s) opcode %d byte_len %u flags %#x qp %#x",
		 (unsigned long long)wc->wr_id, wc->status, ibv_wc_status_str(wc->status), wc->opcode, wc->byte_len,
		 wc->wc_flags, wc->qp_num);
	return b;
}

/* The next completion of cq within the timeout: 0, or -1 with why set. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	uint64_t until = now_ms() + timeout_ms;
	for (unsigned k = 0;; k++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) {
			snprintf(why, sizeof(why), "%s: ibv_poll_cq returned %d", what, n);
			return -1;
		}
		if (n == 1)
			return 0;
		if ((k & 255) == 255 && now_ms() > until) {
			snprintf(why, sizeof(why), "%s: no completion in %d ms", what, timeout_ms);
			return -1;
		}
		if ((k & 15) == 15)
			sched_yield();
	}
}

/* Nothing more arrives on cq for ms milliseconds. */
static int poll_none(struct ibv_cq *cq, int ms, const char *what)
{
	struct ibv_wc wc;
	uint64_t until = now_ms() + ms;
	while (now_ms() < until) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n != 0) {
			char b[160];
			snprintf(why, sizeof(why), "%s: unexpected completion: %s", what,
				 n < 0 ? "poll error" : wc_str(&wc, b, sizeof(b)));
			return -1;
		}
		usleep(1000);
	}
	return 0;
}

/* A completion that must succeed with the given wr_id and opcode. */
static int expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_opcode op, const char *what)
{
	if (poll_one(cq, wc, what))
		return -1;
	char b[160];
	CHECK(wc->status == IBV_WC_SUCCESS && wc->wr_id == wr_id && wc->opcode == op,
	      "%s: %s; want wr_id %llu status success opcode %d", what, wc_str(wc, b, sizeof(b)),
	      (unsigned long long)wr_id, op);
	return 0;
}

static int post_recv(struct ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &wr, &bad);
}

static int post_srq(struct ibv_srq *srq, void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

/* One signaled work request with at most one SGE (len 0: none). */
static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id,
		uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* Device, port, GID, P_Key. */

static int case_device_list(const char *want)
{
	int n = -1;
	E.list = ibv_get_device_list(&n);
	CHECK(E.list, "ibv_get_device_list: %s", strerror(errno));
	CHECK(n > 0, "ibv_get_device_list: no devices");
	CHECK(E.list[n] == NULL, "the list is not NULL-terminated after %d devices", n);
	for (int i = 0; i < n && !E.dev; i++) {
		const char *name = ibv_get_device_name(E.list[i]);
		CHECK(name && *name, "device %d has no name", i);
		if (!want || strcmp(name, want) == 0)
			E.dev = E.list[i];
	}
	CHECK(E.dev, "no device %s among %d", want, n);
	CHECK(ibv_get_device_guid(E.dev) != 0, "ibv_get_device_guid: 0");
	return 0;
}

static int case_open_device(void)
{
	E.ctx = ibv_open_device(E.dev);
	CHECK(E.ctx, "ibv_open_device(%s): %s", ibv_get_device_name(E.dev), strerror(errno));
	CHECK(E.ctx->device == E.dev, "context->device is not the device opened");
	return 0;
}

static int case_query_device(void)
{
	int e = ibv_query_device(E.ctx, &E.attr);
	CHECK(e == 0, "ibv_query_device: %s", strerror(e));
	struct ibv_device_attr *a = &E.attr;
	CHECK(a->phys_port_cnt >= 1, "phys_port_cnt %u", a->phys_port_cnt);
	CHECK(a->max_qp >= 16 && a->max_qp_wr >= 64 && a->max_sge >= 2 && a->max_cq >= 8 && a->max_cqe >= 64 &&
		      a->max_mr >= 8 && a->max_pd >= 1 && a->max_srq >= 1 && a->max_srq_wr >= 16 && a->max_ah >= 2,
	      "limits too small for this test: max_qp %d qp_wr %d sge %d cq %d cqe %d mr %d pd %d srq %d srq_wr %d "
	      "ah %d", a->max_qp, a->max_qp_wr, a->max_sge, a->max_cq, a->max_cqe, a->max_mr, a->max_pd, a->max_srq,
	      a->max_srq_wr, a->max_ah);
	CHECK(a->max_mcast_grp >= 1 && a->max_mcast_qp_attach >= 2 &&
		      a->max_total_mcast_qp_attach >= a->max_mcast_qp_attach,
	      "multicast limits: max_mcast_grp %d max_mcast_qp_attach %d max_total_mcast_qp_attach %d",
	      a->max_mcast_grp, a->max_mcast_qp_attach, a->max_total_mcast_qp_attach);
	CHECK(a->node_guid == ibv_get_device_guid(E.dev), "node_guid %#llx, ibv_get_device_guid %#llx",
	      (unsigned long long)be64toh(a->node_guid), (unsigned long long)be64toh(ibv_get_device_guid(E.dev)));
	struct ibv_device_attr_ex x;
	memset(&x, 0xa5, sizeof(x));
	e = ibv_query_device_ex(E.ctx, NULL, &x);
	CHECK(e == 0, "ibv_query_device_ex: %s", strerror(e));
	CHECK(x.orig_attr.node_guid == a->node_guid && x.orig_attr.max_qp == a->max_qp &&
		      x.orig_attr.max_cqe == a->max_cqe && x.orig_attr.phys_port_cnt == a->phys_port_cnt,
	      "ibv_query_device_ex's orig_attr differs from ibv_query_device's");
	return 0;
}

static int case_query_port(int want_mtu)
{
	int e = ibv_query_port(E.ctx, 1, &E.port);
	CHECK(e == 0, "ibv_query_port(1): %s", strerror(e));
	struct ibv_port_attr *p = &E.port;
	CHECK(p->state == IBV_PORT_ACTIVE, "port state %s", ibv_port_state_str(p->state));
	CHECK(p->link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer %u, want Ethernet", p->link_layer);
	CHECK(p->active_mtu >= IBV_MTU_256 && p->active_mtu <= p->max_mtu && p->max_mtu <= IBV_MTU_4096,
	      "active_mtu %d max_mtu %d", p->active_mtu, p->max_mtu);
	CHECK(p->gid_tbl_len >= 1 && p->pkey_tbl_len >= 1, "gid_tbl_len %d pkey_tbl_len %u", p->gid_tbl_len,
	      p->pkey_tbl_len);
	CHECK(p->max_vl_num >= 1 && p->max_vl_num <= 5, "max_vl_num %u, want an enum ibv_vl value (1 to 5)",
	      p->max_vl_num); /* ibv_devinfo prints 0 as "invalid value" */
	E.mtu = p->active_mtu;
	if (want_mtu) {
		enum ibv_mtu m = want_mtu == 256 ? IBV_MTU_256 : want_mtu == 512 ? IBV_MTU_512 :
				 want_mtu == 1024 ? IBV_MTU_1024 : want_mtu == 2048 ? IBV_MTU_2048 : IBV_MTU_4096;
		CHECK(m <= p->active_mtu, "-m %d is past the port's active MTU (%d)", want_mtu, 128 << p->active_mtu);
		E.mtu = m;
	}
	E.mtu_bytes = 128 << E.mtu;
	struct ibv_port_attr bad;
	CHECK(ibv_query_port(E.ctx, E.attr.phys_port_cnt + 1, &bad) != 0, "ibv_query_port(%d) succeeded",
	      E.attr.phys_port_cnt + 1);
	snprintf(note, sizeof(note), "active_mtu %d, path mtu %d", 128 << p->active_mtu, E.mtu_bytes);
	return 0;
}

/* The GID: -g's, or the first RoCE v2 one holding an IPv4 address. */
static int case_query_gid(int gidx)
{
	struct ibv_gid_entry ent;
	if (gidx < 0) {
		for (int i = 0; i < E.port.gid_tbl_len && gidx < 0; i++) {
			union ibv_gid g;
			if (ibv_query_gid_ex(E.ctx, 1, i, &ent, 0) == 0 && ent.gid_type == IBV_GID_TYPE_ROCE_V2 &&
			    ibv_query_gid(E.ctx, 1, i, &g) == 0 && gid_is_v4(&g))
				gidx = i;
		}
		CHECK(gidx >= 0, "no RoCE v2 GID with an IPv4 address among %d", E.port.gid_tbl_len);
	}
	CHECK(gidx < E.port.gid_tbl_len, "-g %d: the table has %d entries", gidx, E.port.gid_tbl_len);
	E.gidx = gidx;
	CHECK(ibv_query_gid(E.ctx, 1, gidx, &E.gid) == 0, "ibv_query_gid(%d): %s", gidx, strerror(errno));
	static const union ibv_gid zero;
	CHECK(memcmp(&E.gid, &zero, sizeof(zero)) != 0, "GID %d is all zeros", gidx);
	memset(&ent, 0xa5, sizeof(ent));
	int e = ibv_query_gid_ex(E.ctx, 1, gidx, &ent, 0);
	CHECK(e == 0, "ibv_query_gid_ex(%d): %s", gidx, strerror(e));
	char b1[64], b2[64];
	CHECK(memcmp(&ent.gid, &E.gid, sizeof(E.gid)) == 0, "ibv_query_gid_ex: %s, ibv_query_gid: %s",
	      gid_str(&ent.gid, b1, sizeof(b1)), gid_str(&E.gid, b2, sizeof(b2)));
	CHECK(ent.gid_index == (uint32_t)gidx && ent.port_num == 1, "entry: gid_index %u port_num %u", ent.gid_index,
	      ent.port_num);
	CHECK(ent.gid_type == IBV_GID_TYPE_ROCE_V2, "gid_type %u, want RoCE v2", ent.gid_type);
	union ibv_gid g;
	int past = E.port.gid_tbl_len;
	CHECK(ibv_query_gid(E.ctx, 1, past, &g) == -1, "ibv_query_gid past the table (%d) did not fail", past);
	CHECK(ibv_query_gid_ex(E.ctx, 1, past, &ent, 0) != 0, "ibv_query_gid_ex past the table (%d) did not fail",
	      past);
	snprintf(note, sizeof(note), "index %d %s", gidx, gid_str(&E.gid, b1, sizeof(b1)));
	return 0;
}

static int case_query_pkey(void)
{
	__be16 pk = 0;
	CHECK(ibv_query_pkey(E.ctx, 1, 0, &pk) == 0, "ibv_query_pkey(0): %s", strerror(errno));
	CHECK(be16toh(pk) == 0xffff, "P_Key 0 is %#x, want the default 0xffff", be16toh(pk));
	int i = ibv_get_pkey_index(E.ctx, 1, htobe16(0xffff));
	CHECK(i == 0, "ibv_get_pkey_index(0xffff) = %d", i);
	CHECK(ibv_query_pkey(E.ctx, 1, E.port.pkey_tbl_len, &pk) != 0, "ibv_query_pkey(%u) past the table succeeded",
	      E.port.pkey_tbl_len);
	return 0;
}

/* PD and memory regions. */

static int case_alloc_pd(void)
{
	E.pd = ibv_alloc_pd(E.ctx);
	CHECK(E.pd, "ibv_alloc_pd: %s", strerror(errno));
	CHECK(E.pd->context == E.ctx, "pd->context");
	return 0;
}

#define REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static int check_mr(struct ibv_mr *mr, void *addr, size_t len, const char *what)
{
	CHECK(mr, "%s: %s", what, strerror(errno));
	CHECK(mr->addr == addr && mr->length == len && mr->pd == E.pd && mr->context == E.ctx,
	      "%s: addr %p length %zu (want %p %zu)", what, mr->addr, mr->length, addr, len);
	return 0;
}

static int case_reg_mr_malloc(void)
{
	E.buf = malloc(BUF_LEN);
	CHECK(E.buf, "malloc");
	fill(E.buf, BUF_LEN, 1);
	E.buf_mr = ibv_reg_mr(E.pd, E.buf, BUF_LEN, REMOTE);
	if (check_mr(E.buf_mr, E.buf, BUF_LEN, "ibv_reg_mr"))
		return -1;
	long i = check_pat(E.buf, BUF_LEN, 1);
	CHECK(i < 0, "the buffer's byte %ld changed when it was registered", i);
	E.ro = malloc(RO_LEN);
	CHECK(E.ro, "malloc");
	fill(E.ro, RO_LEN, 2);
	E.ro_mr = ibv_reg_mr(E.pd, E.ro, RO_LEN, IBV_ACCESS_REMOTE_READ);
	return check_mr(E.ro_mr, E.ro, RO_LEN, "ibv_reg_mr (remote read only)");
}

static int case_reg_mr_mmap(void)
{
	E.mm = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(E.mm != MAP_FAILED, "mmap: %s", strerror(errno));
	fill(E.mm, BUF_LEN, 3);
	E.mm_mr = ibv_reg_mr(E.pd, E.mm, BUF_LEN, REMOTE);
	if (check_mr(E.mm_mr, E.mm, BUF_LEN, "ibv_reg_mr"))
		return -1;
	long i = check_pat(E.mm, BUF_LEN, 3);
	CHECK(i < 0, "the mapping's byte %ld changed when it was registered", i);
	fill(E.mm, BUF_LEN, 4); /* still our memory to write */
	i = check_pat(E.mm, BUF_LEN, 4);
	CHECK(i < 0, "byte %ld of the registered mapping does not keep what was written", i);
	return 0;
}

static int case_reg_mr_iova2(void)
{
	E.ibuf = mmap(NULL, IOVA_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(E.ibuf != MAP_FAILED, "mmap: %s", strerror(errno));
	fill(E.ibuf, IOVA_LEN, 5);
	E.iova_mr = ibv_reg_mr_iova2(E.pd, E.ibuf, IOVA_LEN, IOVA_BASE, REMOTE);
	if (check_mr(E.iova_mr, E.ibuf, IOVA_LEN, "ibv_reg_mr_iova2"))
		return -1;
	long i = check_pat(E.ibuf, IOVA_LEN, 5);
	CHECK(i < 0, "byte %ld changed when it was registered", i);
	return 0;
}

static int case_reg_mr_bad_access(void)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(E.pd, E.buf, 4096, IBV_ACCESS_REMOTE_WRITE);
	if (mr)
		ibv_dereg_mr(mr);
	CHECK(!mr && errno == EINVAL, "remote write without local write: %s, errno %s", mr ? "registered" : "refused",
	      strerror(errno));
	return 0;
}

/* CQs, the completion channel, the SRQ and the QPs. */

static int case_create_cq(void)
{
	E.ch = ibv_create_comp_channel(E.ctx);
	CHECK(E.ch, "ibv_create_comp_channel: %s", strerror(errno));
	CHECK(E.ch->fd >= 0 && E.ch->context == E.ctx, "channel fd %d", E.ch->fd);
	E.ev_cq = ibv_create_cq(E.ctx, 64, &ev_cq_context, E.ch, 0);
	CHECK(E.ev_cq, "ibv_create_cq with a channel: %s", strerror(errno));
	CHECK(E.ev_cq->cqe >= 64 && E.ev_cq->channel == E.ch && E.ev_cq->cq_context == &ev_cq_context &&
		      E.ev_cq->context == E.ctx,
	      "cq: cqe %d channel %p context %p", E.ev_cq->cqe, (void *)E.ev_cq->channel, E.ev_cq->cq_context);
	struct ibv_cq **cqs[] = {&E.cq, &E.srq_cq, &E.err_cq, &E.ud_cq, &E.local_cq, &E.wr_cq};
	for (size_t i = 0; i < sizeof(cqs) / sizeof(cqs[0]); i++) {
		*cqs[i] = ibv_create_cq(E.ctx, 64, NULL, NULL, 0);
		CHECK(*cqs[i], "ibv_create_cq: %s", strerror(errno));
	}
	errno = 0;
	struct ibv_cq *bad = ibv_create_cq(E.ctx, 16, NULL, NULL, E.ctx->num_comp_vectors);
	CHECK(!bad, "ibv_create_cq on comp_vector %d (of %d) succeeded", E.ctx->num_comp_vectors,
	      E.ctx->num_comp_vectors);
	struct ibv_cq_init_attr_ex xa = {.cqe = 64, .cq_context = &E.cqx, .wc_flags = IBV_WC_STANDARD_FLAGS};
	E.cqx = ibv_create_cq_ex(E.ctx, &xa);
	CHECK(E.cqx, "ibv_create_cq_ex with IBV_WC_STANDARD_FLAGS: %s", strerror(errno));
	struct ibv_cq *c = ibv_cq_ex_to_cq(E.cqx);
	CHECK(c->cqe >= 64 && c->context == E.ctx && c->cq_context == &E.cqx && !c->channel,
	      "ibv_create_cq_ex: cqe %d context %p cq_context %p", c->cqe, (void *)c->context, c->cq_context);
	struct ibv_poll_cq_attr pa = {0};
	int e = ibv_start_poll(E.cqx, &pa);
	if (e == 0)
		ibv_end_poll(E.cqx);
	CHECK(e == ENOENT, "ibv_start_poll on a new CQ: %s, want ENOENT", strerror(e));
	/* A field the device may not have: the CQ, or EOPNOTSUPP. */
	xa.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	errno = 0;
	struct ibv_cq_ex *ts = ibv_create_cq_ex(E.ctx, &xa);
	CHECK(ts || errno == EOPNOTSUPP, "ibv_create_cq_ex with completion timestamps: %s, want a CQ or EOPNOTSUPP",
	      strerror(errno));
	if (ts)
		CHECK((e = ibv_destroy_cq(ibv_cq_ex_to_cq(ts))) == 0, "ibv_destroy_cq (timestamps): %s", strerror(e));
	return 0;
}

static int case_create_srq(void)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = 16, .max_sge = 1}};
	E.srq = ibv_create_srq(E.pd, &a);
	CHECK(E.srq, "ibv_create_srq: %s", strerror(errno));
	CHECK(a.attr.max_wr >= 16 && a.attr.max_sge >= 1, "granted max_wr %u max_sge %u", a.attr.max_wr,
	      a.attr.max_sge);
	struct ibv_srq_attr q;
	int e = ibv_query_srq(E.srq, &q);
	CHECK(e == 0, "ibv_query_srq: %s", strerror(e));
	CHECK(q.max_wr >= 16 && q.max_sge >= 1, "ibv_query_srq: max_wr %u max_sge %u", q.max_wr, q.max_sge);
	return 0;
}

static struct ibv_qp *create_qp(enum ibv_qp_type t, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
				struct ibv_qp_cap *granted)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq,
		.recv_cq = rcq,
		.srq = srq,
		.cap = {.max_send_wr = 16, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64},
		.qp_type = t,
	};
	struct ibv_qp *qp = ibv_create_qp(E.pd, &a);
	if (qp && granted)
		*granted = a.cap;
	return qp;
}

static struct ibv_qp_cap main_cap;

/* The send_ops_flags of the RC QP for the ibv_wr_* API: what rc_wr_api posts. */
static uint64_t wr_rc_ops(void)
{
	uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
		       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ;
	if (E.attr.atomic_cap != IBV_ATOMIC_NONE)
		ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	return ops;
}

static struct ibv_qp *create_qp_ex(enum ibv_qp_type t, uint64_t ops, struct ibv_qp_cap *granted)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = E.wr_cq,
		.recv_cq = E.wr_cq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64},
		.qp_type = t,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = E.pd,
		.send_ops_flags = ops,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(E.ctx, &a);
	if (qp && granted)
		*granted = a.cap;
	return qp;
}

/*
 * A QP for the ibv_wr_* API. A device that refuses send_ops_flags
 * (EOPNOTSUPP) has no such API: the QP is a plain one, so that the
 * peers' QPs still pair, and E.wr_skip says why.
 */
static struct ibv_qp *create_qp_wr(enum ibv_qp_type t, uint64_t ops, struct ibv_qp_cap *granted)
{
	errno = 0;
	struct ibv_qp *qp = create_qp_ex(t, ops, granted);
	if (qp || errno != EOPNOTSUPP)
		return qp;
	snprintf(E.wr_skip, sizeof(E.wr_skip), "no ibv_wr_* API: ibv_create_qp_ex (%s) with send_ops_flags %#llx: %s",
		 t == IBV_QPT_UD ? "UD" : "RC", (unsigned long long)ops, strerror(EOPNOTSUPP));
	return create_qp(t, E.wr_cq, E.wr_cq, NULL, granted);
}

static int case_create_qp(void)
{
	E.qp[Q_MAIN] = create_qp(IBV_QPT_RC, E.cq, E.ev_cq, NULL, &main_cap);
	CHECK(E.qp[Q_MAIN], "ibv_create_qp (RC): %s", strerror(errno));
	struct ibv_qp *q = E.qp[Q_MAIN];
	CHECK(q->qp_num != 0 && q->qp_type == IBV_QPT_RC && q->state == IBV_QPS_RESET && q->pd == E.pd &&
		      q->send_cq == E.cq && q->recv_cq == E.ev_cq,
	      "qp: qp_num %#x type %d state %d", q->qp_num, q->qp_type, q->state);
	CHECK(main_cap.max_send_wr >= 16 && main_cap.max_recv_wr >= 16 && main_cap.max_send_sge >= 2 &&
		      main_cap.max_recv_sge >= 2,
	      "granted send_wr %u recv_wr %u send_sge %u recv_sge %u", main_cap.max_send_wr, main_cap.max_recv_wr,
	      main_cap.max_send_sge, main_cap.max_recv_sge);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int e = ibv_query_qp(q, &qa, IBV_QP_STATE | IBV_QP_CAP, &qi);
	CHECK(e == 0, "ibv_query_qp: %s", strerror(e));
	CHECK(qa.qp_state == IBV_QPS_RESET, "ibv_query_qp: state %d, want RESET", qa.qp_state);
	CHECK(qi.qp_type == IBV_QPT_RC && qi.cap.max_send_wr >= 16 && qi.send_cq == E.cq && qi.recv_cq == E.ev_cq,
	      "ibv_query_qp: init attributes type %d send_wr %u", qi.qp_type, qi.cap.max_send_wr);
	E.qp[Q_SRQ0] = create_qp(IBV_QPT_RC, E.srq_cq, E.srq_cq, E.srq, NULL);
	E.qp[Q_SRQ1] = create_qp(IBV_QPT_RC, E.srq_cq, E.srq_cq, E.srq, NULL);
	CHECK(E.qp[Q_SRQ0] && E.qp[Q_SRQ1], "ibv_create_qp with an SRQ: %s", strerror(errno));
	CHECK(E.qp[Q_SRQ0]->srq == E.srq, "qp->srq");
	E.qp[Q_INV] = create_qp(IBV_QPT_RC, E.cq, E.ev_cq, NULL, NULL);
	CHECK(E.qp[Q_INV], "ibv_create_qp (RC): %s", strerror(errno));
	for (int i = Q_BAD_RKEY; i <= Q_MW_ERR; i++) {
		E.qp[i] = create_qp(IBV_QPT_RC, E.err_cq, E.err_cq, NULL, NULL);
		CHECK(E.qp[i], "ibv_create_qp (RC): %s", strerror(errno));
	}
	E.qp[Q_CQX] = create_qp(IBV_QPT_RC, ibv_cq_ex_to_cq(E.cqx), ibv_cq_ex_to_cq(E.cqx), NULL, NULL);
	CHECK(E.qp[Q_CQX], "ibv_create_qp on ibv_create_cq_ex's CQ: %s", strerror(errno));
	E.ud = create_qp(IBV_QPT_UD, E.ud_cq, E.ud_cq, NULL, NULL);
	CHECK(E.ud, "ibv_create_qp (UD): %s", strerror(errno));
	CHECK(E.ud->qp_type == IBV_QPT_UD, "UD qp_type %d", E.ud->qp_type);
	E.qp[Q_WR] = create_qp_wr(IBV_QPT_RC, wr_rc_ops(), &E.wr_cap);
	CHECK(E.qp[Q_WR], "ibv_create_qp_ex (RC) with send_ops_flags %#llx: %s", (unsigned long long)wr_rc_ops(),
	      strerror(errno));
	E.ud_wr = create_qp_wr(IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, NULL);
	CHECK(E.ud_wr, "ibv_create_qp_ex (UD) with send_ops_flags: %s", strerror(errno));
	return 0;
}

/* The attribute rules of ibv_modify_qp. */

static int modify(struct ibv_qp *qp, enum ibv_qp_state st, int mask, struct ibv_qp_attr *a)
{
	a->qp_state = st;
	return ibv_modify_qp(qp, a, mask | IBV_QP_STATE);
}

static struct ibv_qp_attr init_attr(void)
{
	struct ibv_qp_attr a = {
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	return a;
}
#define INIT_MASK (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)

static struct ibv_qp_attr rtr_attr(uint32_t dqpn, uint32_t rpsn)
{
	struct ibv_qp_attr a = {
		.path_mtu = E.mtu,
		.dest_qp_num = dqpn,
		.rq_psn = rpsn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 1, /* 0.01 ms */
		.ah_attr = {.is_global = 1, .dlid = E.peer.lid, .sl = 0, .port_num = 1,
			    .grh = {.dgid = E.peer_gid, .sgid_index = E.gidx, .hop_limit = 64}},
	};
	return a;
}
#define RTR_MASK (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | \
		  IBV_QP_MIN_RNR_TIMER)
#define RTS_MASK (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

static int case_modify_qp_rules(void)
{
	struct ibv_qp *qp = create_qp(IBV_QPT_RC, E.local_cq, E.local_cq, NULL, NULL);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = rtr_attr(qp->qp_num, 0); /* AV: ourselves */
	a.pkey_index = 0, a.port_num = 1, a.qp_access_flags = 0;
	int e;
	int r = -1;
	if ((e = modify(qp, IBV_QPS_RTR, RTR_MASK, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "RESET to RTR: %s, want EINVAL", strerror(e));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_RTS, RTS_MASK, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "RESET to RTS: %s, want EINVAL", strerror(e));
		goto out;
	}
	a = init_attr();
	if ((e = modify(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "RESET to INIT without IBV_QP_PORT: %s, want EINVAL", strerror(e));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_INIT, INIT_MASK | IBV_QP_SQ_PSN, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "RESET to INIT with IBV_QP_SQ_PSN: %s, want EINVAL", strerror(e));
		goto out;
	}
	if (qp_state(qp) != IBV_QPS_RESET) {
		snprintf(why, sizeof(why), "refused transitions changed the state to %d", qp_state(qp));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a)) != 0 || qp_state(qp) != IBV_QPS_INIT) {
		snprintf(why, sizeof(why), "RESET to INIT: %s, state %d", strerror(e), qp_state(qp));
		goto out;
	}
	a.sq_psn = 1, a.timeout = 14, a.retry_cnt = 7, a.rnr_retry = 7, a.max_rd_atomic = 1;
	if ((e = modify(qp, IBV_QPS_RTS, RTS_MASK, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "INIT to RTS: %s, want EINVAL", strerror(e));
		goto out;
	}
	a = rtr_attr(qp->qp_num, 0);
	if ((e = modify(qp, IBV_QPS_RTR, RTR_MASK & ~IBV_QP_AV, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "INIT to RTR without IBV_QP_AV: %s, want EINVAL", strerror(e));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_RESET, 0, &a)) != 0 || qp_state(qp) != IBV_QPS_RESET) {
		snprintf(why, sizeof(why), "INIT to RESET: %s, state %d", strerror(e), qp_state(qp));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_ERR, 0, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "RESET to ERR: %s, want EINVAL", strerror(e));
		goto out;
	}
	a = init_attr();
	if ((e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a)) != 0) {
		snprintf(why, sizeof(why), "RESET to INIT again: %s", strerror(e));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_ERR, 0, &a)) != 0 || qp_state(qp) != IBV_QPS_ERR) {
		snprintf(why, sizeof(why), "INIT to ERR: %s, state %d", strerror(e), qp_state(qp));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a)) != EINVAL) {
		snprintf(why, sizeof(why), "ERR to INIT: %s, want EINVAL", strerror(e));
		goto out;
	}
	if ((e = modify(qp, IBV_QPS_RESET, 0, &a)) != 0 || qp_state(qp) != IBV_QPS_RESET) {
		snprintf(why, sizeof(why), "ERR to RESET: %s, state %d", strerror(e), qp_state(qp));
		goto out;
	}
	r = 0;
out:
	if ((e = ibv_destroy_qp(qp)) != 0 && r == 0) {
		snprintf(why, sizeof(why), "ibv_destroy_qp: %s", strerror(e));
		r = -1;
	}
	if (r)
		return r;
	/* UD: RESET to INIT needs the Q_Key, and no access flags. */
	qp = create_qp(IBV_QPT_UD, E.local_cq, E.local_cq, NULL, NULL);
	CHECK(qp, "ibv_create_qp (UD): %s", strerror(errno));
	struct ibv_qp_attr u = {.pkey_index = 0, .port_num = 1, .qkey = QKEY};
	int e1 = modify(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT, &u);
	int e2 = modify(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, &u);
	int e3 = ibv_destroy_qp(qp);
	CHECK(e1 == EINVAL, "UD RESET to INIT without IBV_QP_QKEY: %s, want EINVAL", strerror(e1));
	CHECK(e2 == 0, "UD RESET to INIT: %s", strerror(e2));
	CHECK(e3 == 0, "ibv_destroy_qp: %s", strerror(e3));
	return 0;
}

/* flush_into posts n receives (wr_id id0...) to a new QP on cq and moves it to ERR. */
static struct ibv_qp *flush_into(struct ibv_cq *cq, int n, uint64_t id0)
{
	struct ibv_qp *qp = create_qp(IBV_QPT_RC, cq, cq, NULL, NULL);
	if (!qp) {
		snprintf(why, sizeof(why), "ibv_create_qp: %s", strerror(errno));
		return NULL;
	}
	struct ibv_qp_attr a = init_attr();
	int e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a);
	for (int i = 0; i < n && !e; i++)
		e = post_recv(qp, E.buf + 1024 * i, 1024, E.buf_mr->lkey, id0 + i);
	if (!e)
		e = modify(qp, IBV_QPS_ERR, 0, &a);
	if (e) {
		snprintf(why, sizeof(why), "a QP to flush into the CQ: %s", strerror(e));
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/*
 * ibv_resize_cq: the completions waiting stay, in order, and the CQ then
 * holds as many as its new size, more than it held before; a size below
 * what waits is EINVAL. Flushed receives fill it.
 */
static int case_resize_cq(void)
{
	struct ibv_cq *cq = ibv_create_cq(E.ctx, 4, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq(4): %s", strerror(errno));
	int before = cq->cqe;
	CHECK(before >= 4 && before < 13, "ibv_create_cq(4): cqe %d", before);
	struct ibv_qp *q1 = flush_into(cq, 4, 300);
	if (!q1)
		return -1;
	struct ibv_wc wc;
	char b[160];
	if (poll_one(cq, &wc, "the first flushed receive"))
		return -1;
	CHECK(wc.wr_id == 300, "first completion: %s, want wr_id 300", wc_str(&wc, b, sizeof(b)));
	usleep(50000); /* rdma_rxe flushes from a task: the other three are in the CQ by now */
	int e = ibv_resize_cq(cq, 2);
	CHECK(e == EINVAL, "ibv_resize_cq to 2 with 3 completions waiting: %d (%s), want EINVAL", e, strerror(e));
	e = ibv_resize_cq(cq, 32);
	CHECK(e == 0, "ibv_resize_cq to 32: %s", strerror(e));
	CHECK(cq->cqe >= 32, "after ibv_resize_cq to 32: cqe %d", cq->cqe);
	struct ibv_qp *q2 = flush_into(cq, 10, 310);
	if (!q2)
		return -1;
	for (int i = 0; i < 13; i++) {
		uint64_t want = i < 3 ? 301 + i : 310 + i - 3;
		if (poll_one(cq, &wc, "a completion after the resize"))
			return -1;
		CHECK(wc.wr_id == want && wc.status == IBV_WC_WR_FLUSH_ERR, "completion %d after the resize: %s, want wr_id %llu flushed",
		      i, wc_str(&wc, b, sizeof(b)), (unsigned long long)want);
	}
	if (poll_none(cq, 20, "after the resize"))
		return -1;
	e = ibv_resize_cq(cq, 0);
	CHECK(e == EINVAL, "ibv_resize_cq to 0: %d (%s), want EINVAL", e, strerror(e));
	int e1 = ibv_destroy_qp(q1), e2 = ibv_destroy_qp(q2), e3 = ibv_destroy_cq(cq);
	CHECK(!e1 && !e2 && !e3, "teardown: %s %s %s", strerror(e1), strerror(e2), strerror(e3));
	return 0;
}

/* connect_self brings RC QPs a and b of this device to RTS, connected to each other. */
static int connect_self(struct ibv_qp *a, struct ibv_qp *b)
{
	struct ibv_qp *qs[2] = {a, b};
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr at = init_attr();
		int e = modify(qs[i], IBV_QPS_INIT, INIT_MASK, &at);
		CHECK(e == 0, "RESET to INIT: %s", strerror(e));
		at = rtr_attr(qs[1 - i]->qp_num, 0);
		at.ah_attr.grh.dgid = E.gid;
		at.ah_attr.dlid = E.port.lid;
		e = modify(qs[i], IBV_QPS_RTR, RTR_MASK, &at);
		CHECK(e == 0, "INIT to RTR (to this device's own GID): %s", strerror(e));
		memset(&at, 0, sizeof(at));
		at.timeout = 14, at.retry_cnt = 7, at.rnr_retry = 7, at.max_rd_atomic = 1;
		e = modify(qs[i], IBV_QPS_RTS, RTS_MASK, &at);
		CHECK(e == 0, "RTR to RTS: %s", strerror(e));
	}
	return 0;
}

/* srq_post_thread posts n receives (wr_id 1000...) to srq, retrying ENOMEM. */
struct srq_poster {
	struct ibv_srq *srq;
	uint32_t n;
	int err;
};

static void *srq_post_thread(void *arg)
{
	struct srq_poster *p = arg;
	for (uint32_t i = 0; i < p->n;) {
		int e = post_srq(p->srq, E.buf + 256 * (i % 64), 256, E.buf_mr->lkey, 1000 + i);
		if (e == 0)
			i++;
		else if (e != ENOMEM) {
			p->err = e;
			break;
		}
	}
	return NULL;
}

/*
 * ibv_modify_srq with IBV_SRQ_MAX_WR, where the device says it can
 * (IBV_DEVICE_SRQ_RESIZE): a size below the receives posted is EINVAL;
 * after a resize the SRQ holds more than before, and the receives posted
 * before and after it complete in order, for SENDs between two QPs of
 * this device (its own loopback); so do receives another thread posts
 * while this one resizes the SRQ again and again.
 */
static int case_srq_resize(void)
{
	if (!(E.attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)) {
		snprintf(why, sizeof(why), "the device does not report IBV_DEVICE_SRQ_RESIZE");
		return 1;
	}
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(E.pd, &sa);
	CHECK(srq, "ibv_create_srq(4): %s", strerror(errno));
	struct ibv_srq_attr q;
	int e = ibv_query_srq(srq, &q);
	CHECK(e == 0, "ibv_query_srq: %s", strerror(e));
	uint32_t before = q.max_wr, n = before + 8;
	for (uint32_t i = 0; i < before; i++) {
		e = post_srq(srq, E.buf + 256 * i, 256, E.buf_mr->lkey, 500 + i);
		CHECK(e == 0, "ibv_post_srq_recv %u of %u: %s", i, before, strerror(e));
	}
	struct ibv_srq_attr a = {.max_wr = 1};
	e = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	CHECK(e == EINVAL, "IBV_SRQ_MAX_WR 1 with %u posted: %d (%s), want EINVAL", before, e, strerror(e));
	a.max_wr = n;
	e = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	CHECK(e == 0, "IBV_SRQ_MAX_WR %u: %s", n, strerror(e));
	e = ibv_query_srq(srq, &q);
	CHECK(e == 0 && q.max_wr >= n, "ibv_query_srq after the resize: %s, max_wr %u, want at least %u", strerror(e),
	      q.max_wr, n);
	for (uint32_t i = before; i < n; i++) {
		e = post_srq(srq, E.buf + 256 * i, 256, E.buf_mr->lkey, 500 + i);
		CHECK(e == 0, "ibv_post_srq_recv %u after the resize: %s", i, strerror(e));
	}
	struct ibv_qp *x = create_qp(IBV_QPT_RC, E.local_cq, E.local_cq, NULL, NULL);
	struct ibv_qp *y = create_qp(IBV_QPT_RC, E.local_cq, E.local_cq, srq, NULL);
	CHECK(x && y, "ibv_create_qp: %s", strerror(errno));
	if (connect_self(x, y))
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *m = E.buf + 32768 + 16 * (i % 1024);
		memset(m, (int)i, 16);
		e = post(x, IBV_WR_SEND, m, 16, E.buf_mr->lkey, 600 + i, 0, 0);
		CHECK(e == 0, "ibv_post_send %u: %s", i, strerror(e));
		struct ibv_wc wc[2];
		int got = 0, recv = -1;
		for (int k = 0; k < 2; k++) {
			if (poll_one(E.local_cq, &wc[k], "a SEND to a QP of this device"))
				return -1;
			if (wc[k].opcode == IBV_WC_RECV)
				recv = k;
			got++;
		}
		char b[160];
		CHECK(recv >= 0 && wc[recv].status == IBV_WC_SUCCESS && wc[recv].wr_id == 500 + i && wc[recv].byte_len == 16,
		      "receive %u: %s, want wr_id %u", i, recv < 0 ? "none" : wc_str(&wc[recv], b, sizeof(b)), 500 + i);
		CHECK(wc[1 - recv].status == IBV_WC_SUCCESS, "send %u: %s", i, wc_str(&wc[1 - recv], b, sizeof(b)));
		CHECK(check_byte(E.buf + 256 * i, 16, (uint8_t)i) < 0, "receive %u: the data differs", i);
	}
	/* Receives posted from another thread while this one resizes. */
	struct srq_poster p = {.srq = srq, .n = 300};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, srq_post_thread, &p) == 0, "pthread_create");
	int rerr = 0;
	for (int i = 0; i < 20 && !rerr; i++) {
		a.max_wr = 512u << (i % 2);
		rerr = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	}
	pthread_join(t, NULL);
	CHECK(rerr == 0, "IBV_SRQ_MAX_WR while another thread posts: %s", strerror(rerr));
	CHECK(p.err == 0, "ibv_post_srq_recv during the resizes: %s", strerror(p.err));
	for (uint32_t i = 0; i < p.n; i++) {
		e = post(x, IBV_WR_SEND, E.buf + 32768, 8, E.buf_mr->lkey, 700 + i, 0, 0);
		CHECK(e == 0, "ibv_post_send %u: %s", i, strerror(e));
		for (int k = 0; k < 2; k++) {
			struct ibv_wc wc;
			char b[160];
			if (poll_one(E.local_cq, &wc, "a SEND after the resizes"))
				return -1;
			CHECK(wc.status == IBV_WC_SUCCESS && (wc.opcode != IBV_WC_RECV || wc.wr_id == 1000 + i),
			      "after the resizes, completion %u: %s, want the receive of wr_id %u", i, wc_str(&wc, b, sizeof(b)),
			      1000 + i);
		}
	}
	int e1 = ibv_destroy_qp(x), e2 = ibv_destroy_qp(y), e3 = ibv_destroy_srq(srq);
	CHECK(!e1 && !e2 && !e3, "teardown: %s %s %s", strerror(e1), strerror(e2), strerror(e3));
	return 0;
}

/* Receives posted to a QP that moves to ERR complete with IBV_WC_WR_FLUSH_ERR. */
static int case_flush(void)
{
	struct ibv_qp *qp = create_qp(IBV_QPT_RC, E.local_cq, E.local_cq, NULL, NULL);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = init_attr();
	int e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a);
	CHECK(e == 0, "RESET to INIT: %s", strerror(e));
	for (int i = 0; i < 3; i++) {
		e = post_recv(qp, E.buf + 1024 * i, 1024, E.buf_mr->lkey, 200 + i);
		CHECK(e == 0, "ibv_post_recv in INIT: %s", strerror(e));
	}
	if (poll_none(E.local_cq, 20, "before ERR"))
		return -1;
	e = modify(qp, IBV_QPS_ERR, 0, &a);
	CHECK(e == 0, "INIT to ERR: %s", strerror(e));
	int seen = 0;
	for (int i = 0; i < 3; i++) {
		struct ibv_wc wc;
		if (poll_one(E.local_cq, &wc, "flushed receive"))
			return -1;
		char b[160];
		CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id >= 200 && wc.wr_id < 203 && wc.qp_num == qp->qp_num,
		      "completion %d: %s; want status IBV_WC_WR_FLUSH_ERR, wr_id 200-202, qp %#x", i,
		      wc_str(&wc, b, sizeof(b)), qp->qp_num);
		CHECK(!(seen & (1 << (wc.wr_id - 200))), "wr_id %llu completed twice", (unsigned long long)wc.wr_id);
		seen |= 1 << (wc.wr_id - 200);
	}
	if (poll_none(E.local_cq, 20, "after the flush"))
		return -1;
	CHECK(qp_state(qp) == IBV_QPS_ERR, "state %d, want ERR", qp_state(qp));
	e = ibv_destroy_qp(qp);
	CHECK(e == 0, "ibv_destroy_qp: %s", strerror(e));
	return 0;
}

/*
 * A receive queue takes at least as many requests as ibv_create_qp
 * granted, then refuses more with ENOMEM, each ibv_post_recv returning
 * at once; every request it took is on the queue (moving the QP to ERR
 * flushes each, in order). More SGEs than granted is EINVAL, and a list
 * stops at its first bad request, which *bad_wr names.
 */
static int case_recv_queue_full(void)
{
	struct ibv_qp_cap cap;
	struct ibv_qp *qp = create_qp(IBV_QPT_RC, E.local_cq, E.local_cq, NULL, &cap);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = init_attr();
	int e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a);
	int r = e ? failf("RESET to INIT: %s", strerror(e)) : 0;
	uint32_t n = 0, limit = 4 * cap.max_recv_wr + 16;
	struct ibv_sge *sge = calloc(cap.max_recv_sge + 1, sizeof(*sge));
	CHECK(sge, "calloc");
	for (uint32_t i = 0; i <= cap.max_recv_sge; i++)
		sge[i] = (struct ibv_sge){.addr = (uintptr_t)E.buf, .length = 16, .lkey = E.buf_mr->lkey};
	struct ibv_recv_wr wr[2] = {{.wr_id = 300, .sg_list = sge, .num_sge = 1},
				    {.wr_id = 301, .sg_list = sge, .num_sge = (int)cap.max_recv_sge + 1}};
	struct ibv_recv_wr *bad = NULL;
	if (r == 0) {
		wr[0].next = &wr[1];
		e = ibv_post_recv(qp, &wr[0], &bad);
		if (e != EINVAL || bad != &wr[1])
			r = failf("a list whose second request has %d SGEs (max_recv_sge %u): %s, bad_wr %s",
				  wr[1].num_sge, cap.max_recv_sge, strerror(e),
				  bad == &wr[1] ? "the second" : "not the second");
		n = 1; /* the first is posted */
	}
	uint64_t slowest = 0;
	for (e = 0; r == 0 && e == 0 && n < limit; n++) {
		uint64_t t = now_ms();
		e = post_recv(qp, E.buf, 64, E.buf_mr->lkey, 300 + n);
		t = now_ms() - t;
		slowest = t > slowest ? t : slowest;
		if (t > 250)
			r = failf("receive %u (max_recv_wr %u): ibv_post_recv took %llu ms", n + 1, cap.max_recv_wr,
				  (unsigned long long)t);
		else if (e && n < cap.max_recv_wr)
			r = failf("receive %u of max_recv_wr %u: %s", n + 1, cap.max_recv_wr, strerror(e));
		else if (e && e != ENOMEM)
			r = failf("receive %u past max_recv_wr %u: %s, want ENOMEM", n + 1, cap.max_recv_wr,
				  strerror(e));
	}
	n--; /* the last one failed, or the limit was reached */
	if (r == 0 && e == 0)
		r = failf("the receive queue took %u requests (max_recv_wr %u) and was still not full", n,
			  cap.max_recv_wr);
	/* ERR flushes what was posted. */
	if (r == 0 && (e = modify(qp, IBV_QPS_ERR, 0, &a)) != 0)
		r = failf("INIT to ERR: %s", strerror(e));
	for (uint32_t k = 0; r == 0 && k < n; k++) {
		struct ibv_wc wc;
		if (poll_one(E.local_cq, &wc, "flushed receive"))
			r = -1;
		else if (wc.status != IBV_WC_WR_FLUSH_ERR || wc.wr_id != 300 + k)
			r = failf("flushed receive %u of %u: wr_id %llu status %s", k, n, (unsigned long long)wc.wr_id,
				  ibv_wc_status_str(wc.status));
	}
	if (r == 0)
		r = poll_none(E.local_cq, 20, "after the flush");
	if ((e = ibv_destroy_qp(qp)) != 0 && r == 0)
		r = failf("ibv_destroy_qp: %s", strerror(e));
	free(sge);
	if (r == 0)
		snprintf(note, sizeof(note), "max_recv_wr %u, full after %u", cap.max_recv_wr, n);
	return r;
}

/* Connecting the QPs. */

static int connect_rc(int i)
{
	struct ibv_qp *qp = E.qp[i];
	struct ibv_qp_attr a = init_attr();
	int e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a);
	CHECK(e == 0, "qp %d RESET to INIT: %s", i, strerror(e));
	a = rtr_attr(E.peer.qpn[i], E.peer.psn[i]);
	e = modify(qp, IBV_QPS_RTR, RTR_MASK, &a);
	CHECK(e == 0, "qp %d INIT to RTR: %s", i, strerror(e));
	memset(&a, 0, sizeof(a));
	a.sq_psn = E.psn[i];
	a.timeout = 14; /* 67 ms */
	a.retry_cnt = 7;
	a.rnr_retry = i == Q_RNR ? 1 : 7; /* 7: retry for ever */
	a.max_rd_atomic = 1;
	e = modify(qp, IBV_QPS_RTS, RTS_MASK, &a);
	CHECK(e == 0, "qp %d RTR to RTS: %s", i, strerror(e));
	return 0;
}

static int case_rc_connect(void)
{
	for (int i = 0; i < NQP; i++)
		if (connect_rc(i))
			return -1;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr in;
	int e = ibv_query_qp(E.qp[Q_MAIN], &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_AV, &in);
	CHECK(e == 0, "ibv_query_qp: %s", strerror(e));
	CHECK(a.qp_state == IBV_QPS_RTS && a.path_mtu == E.mtu && a.dest_qp_num == E.peer.qpn[Q_MAIN],
	      "ibv_query_qp: state %d path_mtu %d dest_qp_num %#x", a.qp_state, a.path_mtu, a.dest_qp_num);
	CHECK(a.ah_attr.is_global && memcmp(&a.ah_attr.grh.dgid, &E.peer_gid, 16) == 0 &&
		      a.ah_attr.grh.sgid_index == E.gidx,
	      "ibv_query_qp: the address vector is not the one given");
	return 0;
}

static int connect_ud(struct ibv_qp *qp, uint32_t psn)
{
	struct ibv_qp_attr a = {.pkey_index = 0, .port_num = 1, .qkey = QKEY};
	int e = modify(qp, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, &a);
	CHECK(e == 0, "UD RESET to INIT: %s", strerror(e));
	e = modify(qp, IBV_QPS_RTR, 0, &a);
	CHECK(e == 0, "UD INIT to RTR: %s", strerror(e));
	a.sq_psn = psn;
	e = modify(qp, IBV_QPS_RTS, IBV_QP_SQ_PSN, &a);
	CHECK(e == 0, "UD RTR to RTS: %s", strerror(e));
	return 0;
}

static int case_ud_connect(void)
{
	if (connect_ud(E.ud, E.ud_psn) || connect_ud(E.ud_wr, E.ud_wr_psn))
		return -1;
	struct ibv_ah_attr ah = {.is_global = 1, .dlid = E.peer.lid, .port_num = 1,
				 .grh = {.dgid = E.peer_gid, .sgid_index = E.gidx, .hop_limit = 64}};
	E.ah = ibv_create_ah(E.pd, &ah);
	CHECK(E.ah, "ibv_create_ah: %s", strerror(errno));
	CHECK(E.ah->pd == E.pd && E.ah->context == E.ctx, "ah->pd");
	return 0;
}

/* RC SENDs. The client sends, the server receives. */

/* The armed main receive CQ's completion event: the channel's fd becomes readable. */
static int wait_event(void)
{
	struct pollfd p = {.fd = E.ch->fd, .events = POLLIN};
	CHECK(poll(&p, 1, timeout_ms) == 1, "no completion event on the channel in %d ms", timeout_ms);
	struct ibv_cq *cq = NULL;
	void *cq_ctx = NULL;
	CHECK(ibv_get_cq_event(E.ch, &cq, &cq_ctx) == 0, "ibv_get_cq_event: %s", strerror(errno));
	ibv_ack_cq_events(cq, 1);
	CHECK(cq == E.ev_cq && cq_ctx == &ev_cq_context, "ibv_get_cq_event: cq %p context %p, want %p %p", (void *)cq,
	      cq_ctx, (void *)E.ev_cq, (void *)&ev_cq_context);
	return 0;
}

/* The server also reports cq_event: the receive's completion event. */
static int case_rc_send(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = 3 * E.mtu_bytes + 100; /* first, middles, last */
	struct ibv_wc wc;
	if (server) {
		memset(E.mm, GUARD, len + 64);
		int e = post_recv(qp, E.mm, len + 32, E.mm_mr->lkey, 1);
		int armed = ibv_req_notify_cq(E.ev_cq, 0);
		sync_peer(1);
		report("cq_event", e ? failf("ibv_post_recv: %s", strerror(e)) :
				   armed ? failf("ibv_req_notify_cq: %s", strerror(armed)) : wait_event());
		sync_peer(1);
		CHECK(e == 0, "ibv_post_recv: %s", strerror(e));
		if (expect_wc(E.ev_cq, &wc, 1, IBV_WC_RECV, "receive"))
			return -1;
		CHECK(wc.byte_len == len && !(wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)) &&
			      wc.qp_num == qp->qp_num,
		      "receive: byte_len %u (want %u) flags %#x qp %#x", wc.byte_len, len, wc.wc_flags, wc.qp_num);
		long i = check_pat(E.mm, len, 10);
		CHECK(i < 0, "received byte %ld is %#x, want %#x", i, E.mm[i], pat(10, i));
		i = check_byte(E.mm + len, 64, GUARD);
		CHECK(i < 0, "byte %ld past the message was written", i);
		/* Nothing else: one event, one completion. */
		return poll_none(E.ev_cq, 10, "after the receive");
	}
	fill(E.buf, len, 10);
	sync_peer(1);
	int e = post(qp, IBV_WR_SEND, E.buf, len, E.buf_mr->lkey, 2, 0, 0);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) : expect_wc(E.cq, &wc, 2, IBV_WC_SEND, "send");
	sync_peer(1);
	if (r)
		return r;
	long i = check_pat(E.buf, len, 10);
	CHECK(i < 0, "the sent buffer's byte %ld changed", i);
	return 0;
}

static int case_rc_send_imm(int zero)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = zero ? 0 : 257;
	uint32_t imm = zero ? 0xfedcba98 : 0x12345678;
	struct ibv_wc wc;
	if (server) {
		memset(E.buf, GUARD, 512);
		int e = post_recv(qp, E.buf, 512, E.buf_mr->lkey, 3);
		/* The CQ is armed again for the second message only. */
		int armed = zero ? ibv_req_notify_cq(E.ev_cq, 0) : 0;
		sync_peer(1);
		int r = e ? failf("ibv_post_recv: %s", strerror(e)) :
			armed ? failf("ibv_req_notify_cq: %s", strerror(armed)) : 0;
		if (r == 0 && zero)
			r = wait_event();
		if (r == 0)
			r = expect_wc(E.ev_cq, &wc, 3, IBV_WC_RECV, "receive");
		struct pollfd p = {.fd = E.ch->fd, .events = POLLIN};
		if (r == 0 && !zero && poll(&p, 1, 20) != 0)
			r = failf("a completion event came for a CQ not armed again");
		sync_peer(1);
		if (r)
			return r;
		CHECK(wc.byte_len == len && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(imm),
		      "receive: byte_len %u (want %u) flags %#x imm_data %#x (want %#x in network order)", wc.byte_len,
		      len, wc.wc_flags, be32toh(wc.imm_data), imm);
		long i = check_pat(E.buf, len, 11);
		CHECK(i < 0, "received byte %ld differs", i);
		i = check_byte(E.buf + len, 512 - len, GUARD);
		CHECK(i < 0, "byte %ld past the message was written", i);
		return 0;
	}
	fill(E.mm, len, 11);
	sync_peer(1);
	struct ibv_sge sge = {.addr = (uintptr_t)E.mm, .length = len, .lkey = E.mm_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 4, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm)}, *bad;
	int e = ibv_post_send(qp, &wr, &bad);
	int r = e ? (snprintf(why, sizeof(why), "ibv_post_send: %s", strerror(e)), -1) :
		    expect_wc(E.cq, &wc, 4, IBV_WC_SEND, "send");
	sync_peer(1);
	return r;
}

static int case_rc_send_inline(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = 48;
	struct ibv_wc wc;
	if (main_cap.max_inline_data < len) {
		snprintf(note, sizeof(note), "max_inline_data %u: not run", main_cap.max_inline_data);
		sync_peer(1);
		sync_peer(1);
		return 0;
	}
	if (server) {
		memset(E.buf, GUARD, 128);
		int e = post_recv(qp, E.buf, 128, E.buf_mr->lkey, 5);
		sync_peer(1);
		int r = e ? failf("ibv_post_recv: %s", strerror(e)) : expect_wc(E.ev_cq, &wc, 5, IBV_WC_RECV, "receive");
		sync_peer(1);
		if (r)
			return r;
		CHECK(wc.byte_len == len, "byte_len %u, want %u", wc.byte_len, len);
		long i = check_pat(E.buf, len, 12);
		CHECK(i < 0, "received byte %ld differs", i);
		return 0;
	}
	uint8_t data[48]; /* not registered: inline data needs no key */
	fill(data, len, 12);
	sync_peer(1);
	struct ibv_sge sge = {.addr = (uintptr_t)data, .length = len, .lkey = 0};
	struct ibv_send_wr wr = {.wr_id = 6, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE}, *bad;
	int e = ibv_post_send(qp, &wr, &bad);
	memset(data, 0, sizeof(data)); /* the bytes were taken at post time */
	int r = e ? (snprintf(why, sizeof(why), "ibv_post_send: %s", strerror(e)), -1) :
		    expect_wc(E.cq, &wc, 6, IBV_WC_SEND, "send");
	sync_peer(1);
	return r;
}

/* Gather from both buffers, scatter into both. */
static int case_rc_send_sge(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	const uint32_t a = 700, b = 900, ra = 1000, rb = 1000;
	uint8_t *sa = E.buf + 20000, *sb = E.mm + 20000, *da = E.mm + 30000, *db = E.buf + 30000;
	struct ibv_wc wc;
	if (server) {
		memset(da, GUARD, ra + 16);
		memset(db, GUARD, rb + 16);
		struct ibv_sge sge[2] = {{(uintptr_t)da, ra, E.mm_mr->lkey}, {(uintptr_t)db, rb, E.buf_mr->lkey}};
		struct ibv_recv_wr wr = {.wr_id = 7, .sg_list = sge, .num_sge = 2}, *bad;
		int e = ibv_post_recv(qp, &wr, &bad);
		sync_peer(1);
		int r = e ? failf("ibv_post_recv with 2 SGEs: %s", strerror(e)) :
			    expect_wc(E.ev_cq, &wc, 7, IBV_WC_RECV, "receive");
		sync_peer(1);
		if (r)
			return r;
		CHECK(wc.byte_len == a + b, "byte_len %u, want %u", wc.byte_len, a + b);
		uint8_t whole[1600];
		memcpy(whole, da, ra);
		memcpy(whole + ra, db, a + b - ra);
		long i = check_pat(whole, a + b, 13);
		CHECK(i < 0, "byte %ld of the message differs", i);
		i = check_byte(db + (a + b - ra), rb - (a + b - ra) + 16, GUARD);
		CHECK(i < 0, "the second SGE's byte %ld past the message was written", i + (long)(a + b - ra));
		return 0;
	}
	uint8_t whole[1600];
	fill(whole, a + b, 13);
	memcpy(sa, whole, a);
	memcpy(sb, whole + a, b);
	sync_peer(1);
	struct ibv_sge sge[2] = {{(uintptr_t)sa, a, E.buf_mr->lkey}, {(uintptr_t)sb, b, E.mm_mr->lkey}};
	struct ibv_send_wr wr = {.wr_id = 8, .sg_list = sge, .num_sge = 2, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	int e = ibv_post_send(qp, &wr, &bad);
	int r = e ? (snprintf(why, sizeof(why), "ibv_post_send with 2 SGEs: %s", strerror(e)), -1) :
		    expect_wc(E.cq, &wc, 8, IBV_WC_SEND, "send");
	sync_peer(1);
	return r;
}

/*
 * SEND_WITH_INV: a device that reports IBV_DEVICE_MEM_MGT_EXTENSIONS
 * sends it; the receiver binds a type 2 memory window for the sender to
 * invalidate, if its device has them. A device without the extensions
 * refuses the request at ibv_post_send with EINVAL.
 */
/*
 * SEND_WITH_INV. A client whose device reports
 * IBV_DEVICE_MEM_MGT_EXTENSIONS sends it to invalidate a type 2 memory
 * window that the server binds (when its device has them): a WRITE
 * through the window works before, fails with IBV_WC_REM_ACCESS_ERR
 * after. A device without the extensions refuses the request at
 * ibv_post_send with EINVAL. It runs on a QP of its own, which it may
 * leave in ERR.
 */
static int bind_window(struct ibv_qp *qp, struct ibv_mr **mr, struct ibv_mw **mw, uint32_t *rkey)
{
	*mr = ibv_reg_mr(E.pd, E.buf + MW_OFF, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(*mr, "ibv_reg_mr with IBV_ACCESS_MW_BIND: %s", strerror(errno));
	*mw = ibv_alloc_mw(E.pd, IBV_MW_TYPE_2);
	CHECK(*mw, "ibv_alloc_mw(IBV_MW_TYPE_2): %s", strerror(errno));
	struct ibv_send_wr wr = {.wr_id = 13, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.bind_mw.mw = *mw;
	wr.bind_mw.rkey = ibv_inc_rkey((*mw)->rkey);
	wr.bind_mw.bind_info.mr = *mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)(E.buf + MW_OFF);
	wr.bind_mw.bind_info.length = 4096;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	int e = ibv_post_send(qp, &wr, &bad);
	CHECK(e == 0, "ibv_post_send(IBV_WR_BIND_MW): %s", strerror(e));
	struct ibv_wc wc;
	if (expect_wc(E.cq, &wc, 13, IBV_WC_BIND_MW, "bind"))
		return -1;
	*rkey = wr.bind_mw.rkey;
	return 0;
}

static int case_rc_send_inv(void)
{
	struct ibv_qp *qp = E.qp[Q_INV];
	struct ibv_wc wc;
	uint64_t ccaps = server ? E.peer.cap_flags : E.attr.device_cap_flags;
	uint64_t scaps = server ? E.attr.device_cap_flags : E.peer.cap_flags;
	int can_send = !!(ccaps & IBV_DEVICE_MEM_MGT_EXTENSIONS);
	int has_mw = !!(scaps & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
	if (server) {
		uint8_t *rb = E.mm + 40000;
		memset(rb, GUARD, 64);
		memset(E.buf + MW_OFF, GUARD, 64);
		struct ibv_mw *mw = NULL;
		struct ibv_mr *mr = NULL;
		uint32_t rkey = 0;
		int r = post_recv(qp, rb, 64, E.mm_mr->lkey, 11) ? failf("ibv_post_recv: %s", strerror(errno)) : 0;
		if (r == 0 && can_send && has_mw)
			r = bind_window(qp, &mr, &mw, &rkey);
		uint32_t v = r == 0 ? rkey : 0;
		sync_u32(&v);
		uint8_t went = sync_peer(1); /* the client's requests are done */
		if (r == 0 && went) {
			r = expect_wc(E.ev_cq, &wc, 11, IBV_WC_RECV, "receive");
			/*
			 * rdma_rxe's user CQs carry the kernel's flag values, where
			 * IB_WC_WITH_INVALIDATE is 1 << 2 (IBV_WC_IP_CSUM_OK's bit).
			 */
			int inv = wc.wc_flags & IBV_WC_WITH_INV, kinv = !inv && (wc.wc_flags & (1 << 2));
			if (r == 0 && rkey)
				r = (inv || kinv) && wc.invalidated_rkey == rkey && wc.byte_len == 16 ? 0 :
				    failf("receive: flags %#x invalidated_rkey %#x byte_len %u; "
					  "want IBV_WC_WITH_INV, %#x, 16",
					  wc.wc_flags, wc.invalidated_rkey, wc.byte_len, rkey);
			if (r == 0 && kinv)
				snprintf(note, sizeof(note),
					 "invalidation flagged with the kernel's IB_WC_WITH_INVALIDATE (1 << 2)");
			if (r == 0 && rkey) {
				long i = check_pat(E.buf + MW_OFF, 16, 17);
				r = i < 0 ? 0 : failf("byte %ld written through the window differs", i);
			}
			if (r == 0 && !rkey)
				snprintf(note, sizeof(note), "the client's request was sent");
		} else if (r == 0) {
			snprintf(note, sizeof(note), "%s",
				 can_send ? "no type 2 memory windows here: not run" :
					    "the client's device has no memory management extensions");
		}
		if (mw && ibv_dealloc_mw(mw) && r == 0)
			r = failf("ibv_dealloc_mw: %s", strerror(errno));
		if (mr && ibv_dereg_mr(mr) && r == 0)
			r = failf("ibv_dereg_mr: %s", strerror(errno));
		return r;
	}
	uint32_t rkey = 0;
	sync_u32(&rkey);
	if (!can_send) {
		struct ibv_sge sge = {.addr = (uintptr_t)E.buf, .length = 16, .lkey = E.buf_mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
					 .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = E.peer.ro_rkey};
		struct ibv_send_wr *bad = NULL;
		int e = ibv_post_send(qp, &wr, &bad);
		int done = e == 0 && poll_one(E.cq, &wc, "send with invalidate") == 0;
		sync_peer(e == 0);
		CHECK(e == EINVAL && bad == &wr, "no IBV_DEVICE_MEM_MGT_EXTENSIONS, yet ibv_post_send(SEND_WITH_INV) "
		      "returned %s%s, want EINVAL", strerror(e), done ? " and it completed" : "");
		snprintf(note, sizeof(note), "no IBV_DEVICE_MEM_MGT_EXTENSIONS: refused with EINVAL");
		return 0;
	}
	if (!rkey) {
		sync_peer(0);
		snprintf(note, sizeof(note), "the server has no type 2 memory windows: not run");
		return 0;
	}
	uint64_t mw_addr = E.peer.buf_addr + MW_OFF;
	fill(E.buf, 16, 17);
	int r = post(qp, IBV_WR_RDMA_WRITE, E.buf, 16, E.buf_mr->lkey, 14, mw_addr, rkey) ?
			failf("ibv_post_send(WRITE): %s", strerror(errno)) :
			expect_wc(E.cq, &wc, 14, IBV_WC_RDMA_WRITE, "write through the window");
	if (r == 0) {
		struct ibv_sge sge = {.addr = (uintptr_t)E.buf, .length = 16, .lkey = E.buf_mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 15, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
					 .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey}, *bad;
		int e = ibv_post_send(qp, &wr, &bad);
		r = e ? failf("ibv_post_send(SEND_WITH_INV): %s", strerror(e)) :
			expect_wc(E.cq, &wc, 15, IBV_WC_SEND, "send with invalidate");
	}
	if (r == 0) {
		int e = post(qp, IBV_WR_RDMA_WRITE, E.buf, 16, E.buf_mr->lkey, 16, mw_addr, rkey);
		r = e ? failf("ibv_post_send(WRITE): %s", strerror(e)) :
			poll_one(E.cq, &wc, "write after invalidation");
		if (r == 0 && (wc.wr_id != 16 || wc.status != IBV_WC_REM_ACCESS_ERR))
			r = failf("a WRITE through the invalidated window: wr_id %llu status %s, "
				  "want remote access error",
				  (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	}
	sync_peer(1);
	return r;
}

/*
 * Memory windows, on QPs of their own (which the case leaves in ERR),
 * where the server's device reports IBV_DEVICE_MEM_WINDOW and type 2
 * windows. Over a region peers have no rights to (IBV_ACCESS_MW_BIND
 * only) the server binds a type 1 window with ibv_bind_mw (a new
 * consumer key in mw->rkey, IBV_WC_BIND_MW) and a type 2 window with
 * IBV_WR_BIND_MW; the client WRITEs through the first and READs through
 * the second, the data checked on both ends. The server then
 * invalidates the type 2 window (IBV_WR_LOCAL_INV, where the device has
 * the memory management extensions), after which a WRITE through it
 * fails with IBV_WC_REM_ACCESS_ERR. The errors of binding:
 * ibv_bind_mw of a type 2 window (EINVAL), a type 2 bind to a region
 * without IBV_ACCESS_MW_BIND (IBV_WC_MW_BIND_ERR, on the other QP).
 */
#define MW_LEN 2048 /* each window, in the server's region at MW_OFF */

static int mw_server_bind(struct ibv_qp *qp, struct ibv_mr *mr, struct ibv_mw **mw1, struct ibv_mw **mw2,
			  uint32_t keys[2])
{
	uint8_t *win = E.buf + MW_OFF;
	struct ibv_wc wc;
	CHECK(E.attr.max_mw > 0, "max_mw %d with IBV_DEVICE_MEM_WINDOW", E.attr.max_mw);
	*mw1 = ibv_alloc_mw(E.pd, IBV_MW_TYPE_1);
	CHECK(*mw1, "ibv_alloc_mw(IBV_MW_TYPE_1): %s", strerror(errno));
	*mw2 = ibv_alloc_mw(E.pd, IBV_MW_TYPE_2);
	CHECK(*mw2, "ibv_alloc_mw(IBV_MW_TYPE_2): %s", strerror(errno));
	CHECK((*mw1)->type == IBV_MW_TYPE_1 && (*mw2)->type == IBV_MW_TYPE_2 && (*mw1)->pd == E.pd &&
		      (*mw1)->context == E.ctx && (*mw1)->rkey != (*mw2)->rkey,
	      "ibv_alloc_mw: types %d %d, rkeys %#x %#x", (*mw1)->type, (*mw2)->type, (*mw1)->rkey, (*mw2)->rkey);
	struct ibv_mw_bind b = {.wr_id = 70, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = {.mr = mr, .addr = (uintptr_t)win, .length = MW_LEN,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ}};
	int e = ibv_bind_mw(qp, *mw2, &b);
	CHECK(e == EINVAL, "ibv_bind_mw of a type 2 window: %s, want EINVAL", strerror(e));
	uint32_t old = (*mw1)->rkey;
	e = ibv_bind_mw(qp, *mw1, &b);
	CHECK(e == 0, "ibv_bind_mw: %s", strerror(e));
	if (expect_wc(E.err_cq, &wc, 70, IBV_WC_BIND_MW, "ibv_bind_mw"))
		return -1;
	CHECK((*mw1)->rkey == ibv_inc_rkey(old), "rkey %#x after ibv_bind_mw, want %#x", (*mw1)->rkey,
	      ibv_inc_rkey(old));
	struct ibv_send_wr wr = {.wr_id = 71, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.bind_mw.mw = *mw2;
	wr.bind_mw.rkey = ibv_inc_rkey((*mw2)->rkey);
	wr.bind_mw.bind_info = b.bind_info;
	wr.bind_mw.bind_info.addr += MW_LEN;
	e = ibv_post_send(qp, &wr, &bad);
	CHECK(e == 0, "ibv_post_send(IBV_WR_BIND_MW): %s", strerror(e));
	if (expect_wc(E.err_cq, &wc, 71, IBV_WC_BIND_MW, "IBV_WR_BIND_MW"))
		return -1;
	keys[0] = (*mw1)->rkey;
	keys[1] = wr.bind_mw.rkey;
	return 0;
}

/* The server's end of rc_mw: invalidation, then the bind the region refuses. */
static int mw_server_errors(uint32_t key2, int *inv, struct ibv_mw **mw3)
{
	struct ibv_wc wc;
	struct ibv_send_wr *bad;
	char b[160];
	if (E.attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS) {
		struct ibv_send_wr wr = {.wr_id = 72, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
					 .invalidate_rkey = key2};
		int e = ibv_post_send(E.qp[Q_MW], &wr, &bad);
		CHECK(e == 0, "ibv_post_send(IBV_WR_LOCAL_INV): %s", strerror(e));
		if (expect_wc(E.err_cq, &wc, 72, IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV"))
			return -1;
		*inv = 1;
	}
	*mw3 = ibv_alloc_mw(E.pd, IBV_MW_TYPE_2);
	CHECK(*mw3, "ibv_alloc_mw(IBV_MW_TYPE_2): %s", strerror(errno));
	struct ibv_send_wr wr = {.wr_id = 73, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	wr.bind_mw.mw = *mw3;
	wr.bind_mw.rkey = ibv_inc_rkey((*mw3)->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = E.buf_mr, .addr = (uintptr_t)E.buf, .length = 64,
							 .mw_access_flags = IBV_ACCESS_REMOTE_READ};
	int e = ibv_post_send(E.qp[Q_MW_ERR], &wr, &bad);
	CHECK(e == 0, "ibv_post_send(IBV_WR_BIND_MW) to a region without IBV_ACCESS_MW_BIND: %s", strerror(e));
	if (poll_one(E.err_cq, &wc, "the refused bind"))
		return -1;
	CHECK(wc.wr_id == 73 && wc.status == IBV_WC_MW_BIND_ERR, "bind to a region without IBV_ACCESS_MW_BIND: %s; "
	      "want status %s", wc_str(&wc, b, sizeof(b)), ibv_wc_status_str(IBV_WC_MW_BIND_ERR));
	return 0;
}

/*
 * The ibv_wr_* forms, on a QP of the server's own made with
 * IBV_QP_EX_WITH_BIND_MW and IBV_QP_EX_WITH_LOCAL_INV (not run where
 * ibv_create_qp_ex refuses them) and moved to RTS towards the client's
 * second QP, which it never sends to (local operations send nothing):
 * one batch of ibv_wr_bind_mw of a type 2 window and ibv_wr_local_inv
 * of its key.
 */
static int mw_wr_api(struct ibv_mr *mr, int *ran)
{
	errno = 0;
	struct ibv_qp *qp = create_qp_ex(IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW |
							     IBV_QP_EX_WITH_LOCAL_INV, NULL);
	if (!qp) {
		CHECK(errno == EOPNOTSUPP, "ibv_create_qp_ex with IBV_QP_EX_WITH_BIND_MW and LOCAL_INV: %s",
		      strerror(errno));
		return 0;
	}
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	struct ibv_mw *mw = NULL;
	struct ibv_wc wc;
	struct ibv_qp_attr a = init_attr();
	int e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a);
	if (e == 0) {
		a = rtr_attr(E.peer.qpn[Q_MW_ERR], 0);
		e = modify(qp, IBV_QPS_RTR, RTR_MASK, &a);
	}
	if (e == 0) {
		memset(&a, 0, sizeof(a));
		a.timeout = 14, a.retry_cnt = 7, a.rnr_retry = 7, a.max_rd_atomic = 1;
		e = modify(qp, IBV_QPS_RTS, RTS_MASK, &a);
	}
	int r = e ? failf("the ibv_wr_* QP to RTS: %s", strerror(e)) : x ? 0 : failf("ibv_qp_to_qp_ex: NULL");
	if (r == 0 && !(mw = ibv_alloc_mw(E.pd, IBV_MW_TYPE_2)))
		r = failf("ibv_alloc_mw(IBV_MW_TYPE_2): %s", strerror(errno));
	if (r == 0) {
		uint32_t key = ibv_inc_rkey(mw->rkey);
		struct ibv_mw_bind_info bi = {.mr = mr, .addr = (uintptr_t)(E.buf + MW_OFF), .length = 64,
					      .mw_access_flags = IBV_ACCESS_REMOTE_READ};
		ibv_wr_start(x);
		x->wr_id = 77;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(x, mw, key, &bi);
		x->wr_id = 78;
		ibv_wr_local_inv(x, key);
		e = ibv_wr_complete(x);
		r = e ? failf("ibv_wr_complete of ibv_wr_bind_mw and ibv_wr_local_inv: %s", strerror(e)) :
			expect_wc(E.wr_cq, &wc, 77, IBV_WC_BIND_MW, "ibv_wr_bind_mw");
		if (r == 0)
			r = expect_wc(E.wr_cq, &wc, 78, IBV_WC_LOCAL_INV, "ibv_wr_local_inv");
	}
	if ((e = ibv_destroy_qp(qp)) && r == 0)
		r = failf("ibv_destroy_qp: %s", strerror(e));
	if (mw && (e = ibv_dealloc_mw(mw)) && r == 0)
		r = failf("ibv_dealloc_mw: %s", strerror(e));
	*ran = r == 0;
	return r;
}

static int case_rc_mw(void)
{
	struct ibv_wc wc;
	char b[160];
	uint32_t keys[2] = {0, 0};
	if (server) {
		uint8_t *win = E.buf + MW_OFF;
		int has = (E.attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
			  (E.attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
		struct ibv_mw *mw1 = NULL, *mw2 = NULL, *mw3 = NULL;
		struct ibv_mr *mr = NULL;
		int r = 0, inv = 0;
		memset(win, GUARD, 2 * MW_LEN);
		fill(win + MW_LEN, MW_LEN, 72);
		if (has) {
			mr = ibv_reg_mr(E.pd, win, 2 * MW_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
			r = mr ? mw_server_bind(E.qp[Q_MW], mr, &mw1, &mw2, keys) :
				 failf("ibv_reg_mr with IBV_ACCESS_MW_BIND: %s", strerror(errno));
		}
		uint32_t k1 = r == 0 ? keys[0] : 0, k2 = r == 0 ? keys[1] : 0;
		sync_u32(&k1);
		sync_u32(&k2);
		uint8_t went = sync_peer(1); /* the client wrote and read */
		if (r == 0 && has && went) {
			long i = check_pat(win + 100, 256, 71);
			if (i >= 0 || check_byte(win, 100, GUARD) >= 0 || check_byte(win + 356, MW_LEN - 356, GUARD) >= 0)
				r = failf("the bytes written through the type 1 window differ (byte %ld)", i);
		}
		if (r == 0 && has)
			r = mw_server_errors(keys[1], &inv, &mw3);
		int wr_api = 0;
		if (r == 0 && inv)
			r = mw_wr_api(mr, &wr_api);
		uint32_t v = r == 0 && inv;
		sync_u32(&v);
		sync_peer(1); /* the client's WRITE through the invalidated window */
		if (r == 0 && inv && check_pat(win + MW_LEN, MW_LEN, 72) >= 0)
			r = failf("a WRITE through the invalidated window changed the bytes");
		struct ibv_mw *mws[] = {mw1, mw2, mw3};
		for (int i = 0; i < 3; i++) {
			int e = mws[i] ? ibv_dealloc_mw(mws[i]) : 0;
			if (e && r == 0)
				r = failf("ibv_dealloc_mw: %s", strerror(e));
		}
		if (mr && ibv_dereg_mr(mr) && r == 0)
			r = failf("ibv_dereg_mr of the windows' region: %s", strerror(errno));
		if (r == 0 && !has)
			snprintf(note, sizeof(note), "no memory windows here: not run");
		else if (r == 0 && !inv)
			snprintf(note, sizeof(note), "no IBV_DEVICE_MEM_MGT_EXTENSIONS: no LOCAL_INV");
		else if (r == 0 && !wr_api)
			snprintf(note, sizeof(note), "no ibv_wr_bind_mw: ibv_create_qp_ex refuses IBV_QP_EX_WITH_BIND_MW");
		return r;
	}
	sync_u32(&keys[0]);
	sync_u32(&keys[1]);
	int r = 0;
	uint64_t w1 = E.peer.buf_addr + MW_OFF, w2 = w1 + MW_LEN;
	struct ibv_qp *qp = E.qp[Q_MW];
	if (keys[0]) {
		fill(E.buf, 256, 71);
		r = post(qp, IBV_WR_RDMA_WRITE, E.buf, 256, E.buf_mr->lkey, 74, w1 + 100, keys[0]) ?
			    failf("ibv_post_send(WRITE): %s", strerror(errno)) :
			    expect_wc(E.err_cq, &wc, 74, IBV_WC_RDMA_WRITE, "write through the type 1 window");
		if (r == 0)
			r = post(qp, IBV_WR_RDMA_READ, E.mm + 50000, MW_LEN, E.mm_mr->lkey, 75, w2, keys[1]) ?
				    failf("ibv_post_send(READ): %s", strerror(errno)) :
				    expect_wc(E.err_cq, &wc, 75, IBV_WC_RDMA_READ, "read through the type 2 window");
		if (r == 0) {
			long i = check_pat(E.mm + 50000, MW_LEN, 72);
			if (i >= 0)
				r = failf("byte %ld read through the type 2 window differs", i);
		}
	}
	sync_peer(1);
	uint32_t inv = 0;
	sync_u32(&inv);
	if (r == 0 && inv) {
		int e = post(qp, IBV_WR_RDMA_WRITE, E.buf, 8, E.buf_mr->lkey, 76, w2, keys[1]);
		r = e ? failf("ibv_post_send(WRITE): %s", strerror(e)) :
			poll_one(E.err_cq, &wc, "write through the invalidated window");
		if (r == 0 && (wc.wr_id != 76 || wc.status != IBV_WC_REM_ACCESS_ERR))
			r = failf("a WRITE through the invalidated window: %s; want status %s", wc_str(&wc, b, sizeof(b)),
				  ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	}
	sync_peer(1);
	if (r == 0 && !keys[0])
		snprintf(note, sizeof(note), "the server has no memory windows: not run");
	else if (r == 0 && !inv)
		snprintf(note, sizeof(note), "the server invalidated nothing");
	return r;
}

/* RDMA WRITE, WRITE_WITH_IMM and READ, client to server. */

static int case_rc_write(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = 4 * E.mtu_bytes + 7, off = 100;
	struct ibv_wc wc;
	if (server) {
		memset(E.mm, GUARD, off + len + 64);
		sync_peer(1);
		sync_peer(1);
		long i = check_byte(E.mm, off, GUARD);
		CHECK(i < 0, "byte %ld before the target was written", i);
		i = check_pat(E.mm + off, len, 14);
		CHECK(i < 0, "written byte %ld is %#x, want %#x", i, E.mm[off + i], pat(14, i));
		i = check_byte(E.mm + off + len, 64, GUARD);
		CHECK(i < 0, "byte %ld past the target was written", i);
		return 0;
	}
	fill(E.buf, len, 14);
	sync_peer(1);
	int e = post(qp, IBV_WR_RDMA_WRITE, E.buf, len, E.buf_mr->lkey, 20, E.peer.mm_addr + off, E.peer.mm_rkey);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) : expect_wc(E.cq, &wc, 20, IBV_WC_RDMA_WRITE, "write");
	sync_peer(1);
	if (r)
		return r;
	long i = check_pat(E.buf, len, 14);
	CHECK(i < 0, "the source's byte %ld changed", i);
	return 0;
}

static int case_rc_write_imm(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = 2 * E.mtu_bytes + 3, off = 1000, imm = 0xa1b2c3d4;
	uint8_t *scratch = E.mm + 50000;
	struct ibv_wc wc;
	if (server) {
		memset(E.buf + off - 16, GUARD, len + 32);
		memset(scratch, GUARD, 64);
		int e = post_recv(qp, scratch, 64, E.mm_mr->lkey, 21);
		sync_peer(1);
		int r = e ? failf("ibv_post_recv: %s", strerror(e)) :
			    expect_wc(E.ev_cq, &wc, 21, IBV_WC_RECV_RDMA_WITH_IMM, "receive");
		sync_peer(1);
		if (r)
			return r;
		CHECK(wc.byte_len == len && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(imm),
		      "receive: byte_len %u (want %u) flags %#x imm_data %#x (want %#x in network order)", wc.byte_len,
		      len, wc.wc_flags, be32toh(wc.imm_data), imm);
		long i = check_pat(E.buf + off, len, 15);
		CHECK(i < 0, "written byte %ld differs", i);
		CHECK(check_byte(E.buf + off - 16, 16, GUARD) < 0 && check_byte(E.buf + off + len, 16, GUARD) < 0,
		      "bytes around the target were written");
		i = check_byte(scratch, 64, GUARD);
		CHECK(i < 0, "the receive's buffer was written (byte %ld)", i);
		return 0;
	}
	fill(E.mm, len, 15);
	sync_peer(1);
	struct ibv_sge sge = {.addr = (uintptr_t)E.mm, .length = len, .lkey = E.mm_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 22, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm)}, *bad;
	wr.wr.rdma.remote_addr = E.peer.buf_addr + off;
	wr.wr.rdma.rkey = E.peer.buf_rkey;
	int e = ibv_post_send(qp, &wr, &bad);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) :
		    expect_wc(E.cq, &wc, 22, IBV_WC_RDMA_WRITE, "write with immediate");
	sync_peer(1);
	return r;
}

/* A completion as the ibv_wc_read_* give it. */
struct wc_ex {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, imm, qp_num;
	unsigned int flags;
};

/*
 * n completions of an extended CQ within the timeout: 0, or -1 with why
 * set. Each ibv_start_poll that finds one reads it; with chain, the
 * rest follow through ibv_next_poll, and ibv_end_poll comes after the
 * n-th; without, each is ended on its own. A chain must find the next
 * completion there: after an ibv_next_poll that finds none, providers
 * differ (mlx5's and uroce's keep the CQ until ibv_end_poll; rxe's
 * releases it there, and an ibv_end_poll then skips a slot), so the
 * caller chains only completions it knows have all arrived.
 */
static int poll_ex(struct ibv_cq_ex *cq, struct wc_ex *out, int n, int chain, const char *what)
{
	uint64_t until = now_ms() + timeout_ms;
	int k = 0;
	for (unsigned spins = 0; k < n; spins++) {
		struct ibv_poll_cq_attr a = {0};
		int e = ibv_start_poll(cq, &a);
		if (e == ENOENT) {
			if ((spins & 255) == 255 && now_ms() > until)
				return failf("%s: %d of %d completions in %d ms", what, k, n, timeout_ms);
			if ((spins & 15) == 15)
				sched_yield();
			continue;
		}
		if (e)
			return failf("%s: ibv_start_poll: %s", what, strerror(e));
		for (;;) {
			struct wc_ex *w = &out[k++];
			w->wr_id = cq->wr_id;
			w->status = cq->status;
			w->opcode = ibv_wc_read_opcode(cq);
			w->byte_len = ibv_wc_read_byte_len(cq);
			w->flags = ibv_wc_read_wc_flags(cq);
			w->imm = (w->flags & IBV_WC_WITH_IMM) ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
			w->qp_num = ibv_wc_read_qp_num(cq);
			if (!chain || k == n)
				break;
			if ((e = ibv_next_poll(cq)) != 0)
				break;
		}
		ibv_end_poll(cq);
		if (chain && k < n)
			return failf("%s: ibv_next_poll after %d of %d completions: %s", what, k, n, strerror(e));
	}
	return 0;
}

/*
 * w is a successful completion of wr_id with opcode op on qp; a
 * receive's (recv) also of len bytes with immediate imm.
 */
static int expect_wc_ex(const struct wc_ex *w, const char *what, uint64_t wr_id, enum ibv_wc_opcode op,
			const struct ibv_qp *qp, int recv, uint32_t len, uint32_t imm)
{
	CHECK(w->status == IBV_WC_SUCCESS && w->wr_id == wr_id && w->opcode == op && w->qp_num == qp->qp_num &&
		      (!recv || (w->byte_len == len && (w->flags & IBV_WC_WITH_IMM) && w->imm == imm)),
	      "%s: wr_id %llu status %d opcode %d byte_len %u flags %#x imm %#x qp %#x", what,
	      (unsigned long long)w->wr_id, w->status, w->opcode, w->byte_len, w->flags, w->imm, w->qp_num);
	return 0;
}

/*
 * The extended CQ (ibv_create_cq_ex): a SEND with immediate and a WRITE
 * with immediate, their completions read with ibv_start_poll,
 * ibv_next_poll, ibv_end_poll and the ibv_wc_read_* on both ends, and an
 * empty CQ answers ENOENT after them. The client reads its two one at a
 * time; the server chains its two once the client has both of its own
 * (the last request acknowledged: both receives completed).
 */
static int case_cq_ex(void)
{
	struct ibv_qp *qp = E.qp[Q_CQX];
	const uint32_t slen = 300, wlen = E.mtu_bytes + 100, off = 30000, imm1 = 0x01020304, imm2 = 0xfedcba98;
	uint8_t *rbuf = E.mm + 45000;
	struct wc_ex wc[2];
	struct ibv_poll_cq_attr pa = {0};
	if (server) {
		memset(rbuf, GUARD, 512);
		memset(E.buf + off, GUARD, wlen);
		int e = post_recv(qp, rbuf, 512, E.mm_mr->lkey, 71);
		if (!e)
			e = post_recv(qp, E.mm + 46000, 64, E.mm_mr->lkey, 72);
		sync_peer(1);
		int r = e ? failf("ibv_post_recv: %s", strerror(e)) : 0;
		if (!sync_peer(1) && !r)
			r = failf("the client's requests failed");
		if (!r)
			r = poll_ex(E.cqx, wc, 2, 1, "receives");
		sync_peer(1);
		if (r)
			return r;
		if (expect_wc_ex(&wc[0], "the SEND's completion", 71, IBV_WC_RECV, qp, 1, slen, imm1) ||
		    expect_wc_ex(&wc[1], "the WRITE's completion", 72, IBV_WC_RECV_RDMA_WITH_IMM, qp, 1, wlen, imm2))
			return -1;
		long i = check_pat(rbuf, slen, 71);
		CHECK(i < 0, "received byte %ld differs", i);
		i = check_pat(E.buf + off, wlen, 72);
		CHECK(i < 0, "written byte %ld differs", i);
	} else {
		fill(E.mm, slen, 71);
		fill(E.mm + 4096, wlen, 72);
		sync_peer(1);
		struct ibv_sge s1 = {.addr = (uintptr_t)E.mm, .length = slen, .lkey = E.mm_mr->lkey};
		struct ibv_sge s2 = {.addr = (uintptr_t)E.mm + 4096, .length = wlen, .lkey = E.mm_mr->lkey};
		struct ibv_send_wr w2 = {.wr_id = 74, .sg_list = &s2, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm2)};
		w2.wr.rdma.remote_addr = E.peer.buf_addr + off;
		w2.wr.rdma.rkey = E.peer.buf_rkey;
		struct ibv_send_wr w1 = {.wr_id = 73, .next = &w2, .sg_list = &s1, .num_sge = 1,
					 .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htobe32(imm1)},
				   *bad;
		int e = ibv_post_send(qp, &w1, &bad);
		int r = e ? failf("ibv_post_send: %s", strerror(e)) : poll_ex(E.cqx, wc, 2, 0, "sends");
		sync_peer(r == 0);
		sync_peer(1);
		if (r)
			return r;
		if (expect_wc_ex(&wc[0], "the SEND's completion", 73, IBV_WC_SEND, qp, 0, 0, 0) ||
		    expect_wc_ex(&wc[1], "the WRITE's completion", 74, IBV_WC_RDMA_WRITE, qp, 0, 0, 0))
			return -1;
	}
	int e = ibv_start_poll(E.cqx, &pa);
	if (e == 0)
		ibv_end_poll(E.cqx);
	CHECK(e == ENOENT, "ibv_start_poll on the emptied CQ: %s, want ENOENT", e ? strerror(e) : "a completion");
	return 0;
}

/*
 * A list of WRITEs in one ibv_post_send, only the last signaled: one
 * completion, and every write done. A list with a bad request (too many
 * SGEs) is posted up to it; *bad_wr names it.
 */
static int case_rc_write_list(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	const uint32_t len = 700, n = 4;
	struct ibv_wc wc;
	if (server) {
		memset(E.mm + 20000, GUARD, 8 * 1024);
		sync_peer(1);
		sync_peer(1);
		for (uint32_t k = 0; k < n + 1; k++) {
			long i = check_pat(E.mm + 20000 + 1024 * k, len, 60 + k);
			CHECK(i < 0, "write %u of the list: byte %ld differs", k, i);
		}
		long i = check_byte(E.mm + 20000 + 1024 * (n + 1), 1024, GUARD);
		CHECK(i < 0, "the request after the bad one was done (byte %ld)", i);
		return 0;
	}
	struct ibv_sge sge[6];
	struct ibv_send_wr wr[6], *bad = NULL;
	memset(wr, 0, sizeof(wr));
	for (uint32_t k = 0; k < 6; k++) {
		fill(E.buf + 1024 * k, len, 60 + k);
		sge[k] = (struct ibv_sge){.addr = (uintptr_t)(E.buf + 1024 * k), .length = len, .lkey = E.buf_mr->lkey};
		wr[k].wr_id = 80 + k;
		wr[k].sg_list = &sge[k];
		wr[k].num_sge = 1;
		wr[k].opcode = IBV_WR_RDMA_WRITE;
		wr[k].wr.rdma.remote_addr = E.peer.mm_addr + 20000 + 1024 * k;
		wr[k].wr.rdma.rkey = E.peer.mm_rkey;
		wr[k].next = k < 5 ? &wr[k + 1] : NULL;
	}
	struct ibv_sge *many = calloc(main_cap.max_send_sge + 1, sizeof(*many));
	sync_peer(1);
	wr[n - 1].send_flags = IBV_SEND_SIGNALED;
	wr[n - 1].next = NULL;
	int e = ibv_post_send(qp, wr, &bad);
	int r = e ? failf("ibv_post_send of %u: %s", n, strerror(e)) :
		    expect_wc(E.cq, &wc, 80 + n - 1, IBV_WC_RDMA_WRITE, "the signaled write");
	if (r == 0)
		r = poll_none(E.cq, 10, "after the signaled write");
	/* A list whose second request has more SGEs than the QP takes. */
	if (r == 0 && !many)
		r = failf("calloc");
	for (uint32_t k = 0; many && k <= main_cap.max_send_sge; k++)
		many[k] = sge[n + 1];
	wr[n].send_flags = wr[n + 1].send_flags = IBV_SEND_SIGNALED;
	wr[n + 1].sg_list = many;
	wr[n + 1].num_sge = (int)main_cap.max_send_sge + 1;
	if (r == 0) {
		e = ibv_post_send(qp, &wr[n], &bad);
		if (e != EINVAL || bad != &wr[n + 1])
			r = failf("a list whose second request has %d SGEs (max_send_sge %u): %s, bad_wr %s",
				  wr[n + 1].num_sge, main_cap.max_send_sge, strerror(e),
				  bad == &wr[n + 1] ? "the second" : "not the second");
	}
	free(many);
	if (r == 0)
		r = expect_wc(E.cq, &wc, 80 + n, IBV_WC_RDMA_WRITE, "the write before the bad request");
	if (r == 0)
		r = poll_none(E.cq, 10, "after the list");
	sync_peer(1);
	return r;
}

/* The region registered with ibv_reg_mr_iova2: peers address it by its I/O virtual address. */
static int case_rc_write_iova(void)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = 1000, off = 200;
	struct ibv_wc wc;
	if (server) {
		fill(E.ibuf, IOVA_LEN, 5);
		sync_peer(1);
		sync_peer(1);
		long i = check_pat(E.ibuf, off, 5);
		CHECK(i < 0, "byte %ld before the target changed", i);
		i = check_pat(E.ibuf + off, len, 18);
		CHECK(i < 0, "byte %ld written at iova %#llx + %u differs", i, (unsigned long long)IOVA_BASE, off);
		i = check_pat_at(E.ibuf + off + len, IOVA_LEN - off - len, 5, off + len);
		CHECK(i < 0, "byte %ld past the target changed", i);
		return 0;
	}
	fill(E.buf, len, 18);
	sync_peer(1);
	int e = post(qp, IBV_WR_RDMA_WRITE, E.buf, len, E.buf_mr->lkey, 23, E.peer.iova + off, E.peer.iova_rkey);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) : expect_wc(E.cq, &wc, 23, IBV_WC_RDMA_WRITE, "write");
	sync_peer(1);
	return r;
}

static int case_rc_read(int iova)
{
	struct ibv_qp *qp = E.qp[Q_MAIN];
	uint32_t len = iova ? 512 : 3 * E.mtu_bytes + 13;
	uint32_t off = 4096;
	uint8_t *dst = E.buf + 8192;
	struct ibv_wc wc;
	if (server) {
		if (!iova)
			fill(E.mm + off, len, 16);
		sync_peer(1);
		sync_peer(1);
		long i = iova ? check_pat_at(E.ibuf + off, len, 5, off) : check_pat(E.mm + off, len, 16);
		CHECK(i < 0, "byte %ld of the region read changed", i);
		return 0;
	}
	memset(dst, GUARD, len + 64);
	sync_peer(1);
	uint64_t raddr = iova ? E.peer.iova + off : E.peer.mm_addr + off;
	uint32_t rkey = iova ? E.peer.iova_rkey : E.peer.mm_rkey;
	int e = post(qp, IBV_WR_RDMA_READ, dst, len, E.buf_mr->lkey, 24, raddr, rkey);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) : expect_wc(E.cq, &wc, 24, IBV_WC_RDMA_READ, "read");
	sync_peer(1);
	if (r)
		return r;
	CHECK(wc.byte_len == len, "read: byte_len %u, want %u", wc.byte_len, len);
	long i = iova ? check_pat_at(dst, len, 5, off) : check_pat(dst, len, 16);
	CHECK(i < 0, "byte %ld read is %#x", i, dst[i]);
	i = check_byte(dst + len, 64, GUARD);
	CHECK(i < 0, "byte %ld past the read's buffer was written", i);
	return 0;
}

/*
 * On-demand paging (IBV_ACCESS_ON_DEMAND), where both devices have it
 * for RC WRITE and READ: each end registers a fresh anonymous mapping it
 * never touched; the client WRITEs into the server's and READs it back
 * into its own, and, where both have implicit regions, WRITEs from a
 * malloc'ed buffer through the implicit region (the whole address
 * space, ibv_reg_mr(pd, NULL, SIZE_MAX, ...)).
 */
#define ODP_LEN (32 << 10)

static int odp_caps(int *implicit)
{
	struct ibv_device_attr_ex x;
	const uint32_t need = IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
	*implicit = 0;
	if (ibv_query_device_ex(E.ctx, NULL, &x) || !(x.odp_caps.general_caps & IBV_ODP_SUPPORT) ||
	    (x.odp_caps.per_transport_caps.rc_odp_caps & need) != need)
		return 0;
	*implicit = !!(x.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	return 1;
}

static int case_odp(void)
{
	int impl, have = odp_caps(&impl);
	uint8_t peer = sync_peer((uint8_t)(have | impl << 1));
	if (!have || !(peer & 1)) {
		snprintf(why, sizeof(why), "no on-demand paging for RC WRITE and READ on %s",
			 have ? "the peer's device" : "this device");
		return 1;
	}
	int implicit = impl && (peer & 2);
	const int acc = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	uint8_t *m = mmap(NULL, ODP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr = m != MAP_FAILED ? ibv_reg_mr(E.pd, m, ODP_LEN, acc) : NULL;
	int r = mr ? 0 : failf("ibv_reg_mr of an untouched mapping, on demand: %s", strerror(errno));
	uint32_t hi = (uint32_t)((uintptr_t)m >> 32), lo = (uint32_t)(uintptr_t)m, rkey = mr ? mr->rkey : 0;
	sync_u32(&hi);
	sync_u32(&lo);
	sync_u32(&rkey);
	uint64_t raddr = (uint64_t)hi << 32 | lo;
	if (!sync_peer(mr != NULL) && !r)
		r = failf("the peer could not register its region");
	struct ibv_wc wc;
	if (server) {
		sync_peer(1); /* the client wrote */
		long i = r ? -1 : check_pat(m, ODP_LEN, 41);
		if (i >= 0)
			r = failf("byte %ld of the region written on demand is %#x", i, m[i]);
		sync_peer(1); /* the client wrote through its implicit region */
		i = r || !implicit ? -1 : check_pat(m, ODP_LEN, 42);
		if (i >= 0)
			r = failf("byte %ld written through the implicit region is %#x", i, m[i]);
	} else {
		if (!r) {
			fill(E.buf, ODP_LEN, 41);
			int e = post(E.qp[Q_MAIN], IBV_WR_RDMA_WRITE, E.buf, ODP_LEN, E.buf_mr->lkey, 40, raddr, rkey);
			r = e ? failf("ibv_post_send (write): %s", strerror(e)) : expect_wc(E.cq, &wc, 40, IBV_WC_RDMA_WRITE, "write");
		}
		sync_peer(1);
		if (!r) {
			int e = post(E.qp[Q_MAIN], IBV_WR_RDMA_READ, m, ODP_LEN, mr->lkey, 41, raddr, rkey);
			r = e ? failf("ibv_post_send (read): %s", strerror(e)) : expect_wc(E.cq, &wc, 41, IBV_WC_RDMA_READ, "read");
			long i = r ? -1 : check_pat(m, ODP_LEN, 41);
			if (i >= 0)
				r = failf("byte %ld read into the region on demand is %#x", i, m[i]);
		}
		if (!r && implicit) {
			uint8_t *b = malloc(ODP_LEN);
			struct ibv_mr *all = b ? ibv_reg_mr(E.pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE) : NULL;
			if (!all) {
				r = failf("ibv_reg_mr of the implicit region: %s", strerror(errno));
			} else {
				fill(b, ODP_LEN, 42);
				int e = post(E.qp[Q_MAIN], IBV_WR_RDMA_WRITE, b, ODP_LEN, all->lkey, 42, raddr, rkey);
				r = e ? failf("ibv_post_send (implicit): %s", strerror(e))
				      : expect_wc(E.cq, &wc, 42, IBV_WC_RDMA_WRITE, "write through the implicit region");
				e = ibv_dereg_mr(all);
				if (e && !r)
					r = failf("ibv_dereg_mr of the implicit region: %s", strerror(e));
			}
			free(b);
		}
		sync_peer(1);
	}
	if (mr) {
		int e = ibv_dereg_mr(mr);
		if (e && !r)
			r = failf("ibv_dereg_mr: %s", strerror(e));
	}
	if (m != MAP_FAILED)
		munmap(m, ODP_LEN);
	if (!r && !implicit)
		snprintf(note, sizeof(note), "no implicit region on %s", impl ? "the peer's device" : "this device");
	return r;
}

/* Atomics on a u64 of the server's malloc'ed buffer. */

#define ATOM_INIT 0x1122334455667788ull
#define ATOM_SWAP 0x0102030405060708ull
#define ATOM_ADD 0x00000000fafbfcfdull /* carries into the upper half */
#define ATOM_GUARD 0x5a5a5a5a5a5a5a5aull

static int atomic(uint64_t wr_id, enum ibv_wr_opcode op, uint64_t compare_add, uint64_t swap, uint64_t *result)
{
	uint64_t *local = (uint64_t *)(E.buf + 104);
	*local = ATOM_GUARD;
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = 8, .lkey = E.buf_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.atomic.remote_addr = E.peer.buf_addr + ATOM_OFF;
	wr.wr.atomic.rkey = E.peer.buf_rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	int e = ibv_post_send(E.qp[Q_MAIN], &wr, &bad);
	if (e)
		return failf("ibv_post_send: %s", strerror(e));
	struct ibv_wc wc;
	if (expect_wc(E.cq, &wc, wr_id, op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD,
		      "atomic"))
		return -1;
	CHECK(wc.byte_len == 8, "atomic: byte_len %u, want 8", wc.byte_len);
	*result = *local;
	return 0;
}

static int case_rc_atomic(int fadd)
{
	uint64_t *target = (uint64_t *)(E.buf + ATOM_OFF);
	if (E.attr.atomic_cap == IBV_ATOMIC_NONE || E.peer.atomic_cap == IBV_ATOMIC_NONE) {
		snprintf(note, sizeof(note), "a device has no atomics: not run");
		sync_peer(1);
		sync_peer(1);
		return 0;
	}
	if (server) {
		if (!fadd)
			target[0] = ATOM_INIT;
		target[1] = target[-1] = ATOM_GUARD;
		sync_peer(1);
		sync_peer(1);
		uint64_t want = fadd ? ATOM_SWAP + ATOM_ADD : ATOM_SWAP;
		CHECK(target[0] == want, "the target holds %#llx, want %#llx", (unsigned long long)target[0],
		      (unsigned long long)want);
		CHECK(target[1] == ATOM_GUARD && target[-1] == ATOM_GUARD, "the words around the target changed");
		return 0;
	}
	sync_peer(1);
	uint64_t got = 0;
	int r;
	if (!fadd) {
		r = atomic(30, IBV_WR_ATOMIC_CMP_AND_SWP, ATOM_INIT, ATOM_SWAP, &got);
		if (r == 0 && got != ATOM_INIT)
			r = failf("compare and swap returned %#llx, want the original %#llx", (unsigned long long)got,
				  (unsigned long long)ATOM_INIT);
		/* A compare that fails swaps nothing and returns what is there. */
		if (r == 0)
			r = atomic(31, IBV_WR_ATOMIC_CMP_AND_SWP, ATOM_INIT, 0xdeadbeefull, &got);
		if (r == 0 && got != ATOM_SWAP)
			r = failf("a failing compare and swap returned %#llx, want %#llx", (unsigned long long)got,
				  (unsigned long long)ATOM_SWAP);
	} else {
		r = atomic(32, IBV_WR_ATOMIC_FETCH_AND_ADD, ATOM_ADD, 0, &got);
		if (r == 0 && got != ATOM_SWAP)
			r = failf("fetch and add returned %#llx, want %#llx", (unsigned long long)got,
				  (unsigned long long)ATOM_SWAP);
	}
	sync_peer(1);
	return r;
}

/* Receives through the SRQ, shared by two QPs. */

static const uint32_t srq_len[4] = {64, 1500, 3000, 4000};

static int case_srq(void)
{
	struct ibv_wc wc;
	if (server) {
		int e = 0;
		for (int k = 0; k < 4 && !e; k++) {
			memset(E.mm + 4096 * k, GUARD, 4096);
			e = post_srq(E.srq, E.mm + 4096 * k, 4096, E.mm_mr->lkey, 40 + k);
		}
		sync_peer(1);
		int seen = 0, r = e ? failf("ibv_post_srq_recv: %s", strerror(e)) : 0;
		for (int n = 0; n < 4 && r == 0; n++) {
			r = poll_one(E.srq_cq, &wc, "receive through the SRQ");
			if (r)
				break;
			char b[160];
			int k = (int)wc.wr_id - 40, idx = -1;
			for (int j = 0; j < 4; j++)
				if (wc.byte_len == srq_len[j])
					idx = j;
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || k < 0 || k > 3 ||
			    (seen & (1 << k)) || idx < 0) {
				r = failf("completion %d: %s", n, wc_str(&wc, b, sizeof(b)));
				break;
			}
			seen |= 1 << k;
			uint32_t want_qp = E.qp[idx < 2 ? Q_SRQ0 : Q_SRQ1]->qp_num;
			if (wc.qp_num != want_qp) {
				r = failf("message %d came on qp %#x, want %#x", idx, wc.qp_num, want_qp);
				break;
			}
			long i = check_pat(E.mm + 4096 * k, srq_len[idx], 20 + idx);
			if (i >= 0)
				r = failf("message %d in receive %d: byte %ld differs", idx, k, i);
		}
		if (r == 0)
			r = poll_none(E.srq_cq, 10, "after four receives");
		sync_peer(1);
		return r;
	}
	for (int idx = 0; idx < 4; idx++)
		fill(E.buf + 4096 * idx, srq_len[idx], 20 + idx);
	sync_peer(1);
	int r = 0;
	for (int idx = 0; idx < 4 && r == 0; idx++) {
		int e = post(E.qp[idx < 2 ? Q_SRQ0 : Q_SRQ1], IBV_WR_SEND, E.buf + 4096 * idx, srq_len[idx],
			     E.buf_mr->lkey, 44 + idx, 0, 0);
		if (e)
			r = failf("ibv_post_send: %s", strerror(e));
	}
	for (int idx = 0; idx < 4 && r == 0; idx++) {
		r = poll_one(E.srq_cq, &wc, "send");
		if (r == 0 && (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_SEND)) {
			char b[160];
			r = failf("send: %s", wc_str(&wc, b, sizeof(b)));
		}
	}
	sync_peer(1);
	return r;
}

/* UD: datagrams through address handles, the GRH in front of the data. */

static int check_grh(const uint8_t *b, const union ibv_gid *src, const union ibv_gid *dst)
{
	char s1[64], s2[64];
	if (gid_is_v4(src)) {
		/* RoCE v2 over IPv4: the IPv4 header fills the GRH's last 20 bytes. */
		struct iphdr ip;
		memcpy(&ip, b + 20, sizeof(ip));
		CHECK(ip.version == 4 && ip.ihl == 5 && ip.protocol == IPPROTO_UDP,
		      "the GRH does not hold an IPv4 header (version %d ihl %d protocol %d)", ip.version, ip.ihl,
		      ip.protocol);
		CHECK(memcmp(&ip.saddr, src->raw + 12, 4) == 0 && memcmp(&ip.daddr, dst->raw + 12, 4) == 0,
		      "the GRH's IPv4 addresses are not %s -> %s", gid_str(src, s1, sizeof(s1)),
		      gid_str(dst, s2, sizeof(s2)));
		return 0;
	}
	struct ibv_grh g;
	memcpy(&g, b, sizeof(g));
	CHECK(memcmp(&g.sgid, src, 16) == 0 && memcmp(&g.dgid, dst, 16) == 0 && g.next_hdr == IPPROTO_UDP,
	      "the GRH is not %s -> %s", gid_str(src, s1, sizeof(s1)), gid_str(dst, s2, sizeof(s2)));
	return 0;
}

static int ud_send(struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, void *addr, uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = E.buf_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	int e = ibv_post_send(E.ud, &wr, &bad);
	if (e)
		return failf("ibv_post_send (UD): %s", strerror(e));
	struct ibv_wc wc;
	return expect_wc(E.ud_cq, &wc, wr_id, IBV_WC_SEND, "UD send");
}

/*
 * A datagram from the peer's QP src_qpn to qp, on cq: its GRH (to
 * dgid), then len bytes of the pattern.
 */
static int datagram_to(struct ibv_cq *cq, struct ibv_qp *qp, uint32_t src_qpn, struct ibv_wc *wc, uint64_t wr_id,
		       const uint8_t *b, uint32_t len, unsigned seed, const union ibv_gid *dgid)
{
	char s[160];
	if (poll_one(cq, wc, "datagram"))
		return -1;
	CHECK(wc->status == IBV_WC_SUCCESS && wc->opcode == IBV_WC_RECV && wc->wr_id == wr_id,
	      "datagram: %s; want wr_id %llu", wc_str(wc, s, sizeof(s)), (unsigned long long)wr_id);
	CHECK(wc->byte_len == 40 + len && (wc->wc_flags & IBV_WC_GRH) && wc->src_qp == src_qpn &&
		      wc->qp_num == qp->qp_num,
	      "datagram: byte_len %u (want 40 + %u) flags %#x (want IBV_WC_GRH) src_qp %#x (want %#x) qp %#x",
	      wc->byte_len, len, wc->wc_flags, wc->src_qp, src_qpn, wc->qp_num);
	long i = check_pat(b + 40, len, seed);
	if (i >= 0 && check_pat(b + 40, len, 30) < 0)
		return failf("the datagram sent with the wrong Q_Key was delivered");
	CHECK(i < 0, "datagram byte %ld differs", i);
	return check_grh(b, &E.peer_gid, dgid);
}

/* A datagram from the peer's QP src_qpn to qp, sent to this side's GID. */
static int datagram_check(struct ibv_cq *cq, struct ibv_qp *qp, uint32_t src_qpn, struct ibv_wc *wc, uint64_t wr_id,
			  const uint8_t *b, uint32_t len, unsigned seed)
{
	return datagram_to(cq, qp, src_qpn, wc, wr_id, b, len, seed, &E.gid);
}

static int ud_recv_check(struct ibv_wc *wc, uint64_t wr_id, const uint8_t *b, uint32_t len, unsigned seed)
{
	return datagram_check(E.ud_cq, E.ud, (uint32_t)E.peer.ud_qpn, wc, wr_id, b, len, seed);
}

static int case_ud(void)
{
	uint32_t len = E.mtu_bytes; /* a full path MTU of payload */
	uint8_t *rb = E.buf + 16384; /* two 8 KiB receive buffers */
	struct ibv_wc wc;
	int r = 0;
	if (server) {
		memset(rb, GUARD, 2 * 8192);
		int e = post_recv(E.ud, rb, 40 + len, E.buf_mr->lkey, 50);
		if (!e)
			e = post_recv(E.ud, rb + 8192, 40 + len, E.buf_mr->lkey, 51);
		sync_peer(1);
		sync_peer(1); /* the client sent both datagrams */
		r = e ? failf("ibv_post_recv (UD): %s", strerror(e)) : ud_recv_check(&wc, 50, rb, len, 31);
		if (r == 0)
			r = poll_none(E.ud_cq, 50, "after the datagram");
		struct ibv_ah_attr aa;
		if (r == 0 && ibv_init_ah_from_wc(E.ctx, 1, &wc, (struct ibv_grh *)rb, &aa))
			r = failf("ibv_init_ah_from_wc: %s", strerror(errno));
		if (r == 0 && (!aa.is_global || memcmp(&aa.grh.dgid, &E.peer_gid, 16) || aa.grh.sgid_index != E.gidx ||
			       aa.port_num != 1))
			r = failf("ibv_init_ah_from_wc: is_global %d sgid_index %d port %d, or not the sender's GID",
				  aa.is_global, aa.grh.sgid_index, aa.port_num);
		if (r == 0 && !(E.reply_ah = ibv_create_ah_from_wc(E.pd, &wc, (struct ibv_grh *)rb, 1)))
			r = failf("ibv_create_ah_from_wc: %s", strerror(errno));
		uint8_t *sb = E.buf + 49152;
		fill(sb, len / 2, 32);
		if (r == 0)
			r = ud_send(E.reply_ah, wc.src_qp, QKEY, sb, len / 2, 52);
		sync_peer(1);
		return r;
	}
	memset(rb, GUARD, 8192);
	int e = post_recv(E.ud, rb, 40 + len, E.buf_mr->lkey, 53);
	uint8_t *a = E.buf + 32768, *b = E.buf + 40960 + 4096;
	fill(a, len, 30);
	fill(b, len, 31);
	sync_peer(1);
	if (e)
		r = failf("ibv_post_recv (UD): %s", strerror(e));
	/* The first with a Q_Key the server's QP does not have: it is dropped. */
	if (r == 0)
		r = ud_send(E.ah, E.peer.ud_qpn, WRONG_QKEY, a, len, 54);
	if (r == 0)
		r = ud_send(E.ah, E.peer.ud_qpn, QKEY, b, len, 55);
	sync_peer(1);
	sync_peer(1); /* the server replied */
	if (r == 0)
		r = ud_recv_check(&wc, 53, rb, len / 2, 32);
	return r;
}

/*
 * Multicast (ibv_attach_mcast): the server attaches a new UD QP to a
 * group (twice, which is not an error), the client sends one datagram to the
 * group (QPN 0xFFFFFF), the server receives it and detaches (a second
 * detach is EINVAL). Each side checks the verbs' errors: an RC QP or a
 * unicast GID is EINVAL, destroying an attached QP EBUSY. The group is
 * IPv4 (239.0.2.77) or IPv6 (ff0e::2:77), as the GID in use is.
 *
 * rdma_rxe gets a group's datagrams from the kernel's IP input, which
 * drops those of groups the interface has not joined, and
 * ibv_attach_mcast does not join it (rdma_join_multicast does): the
 * server joins an IPv4 group on a socket of its own while it waits.
 */
#define MCAST_QPN 0xffffff

static int mcast_errors(const union ibv_gid *mg)
{
	int e = ibv_attach_mcast(E.qp[0], mg, 0);
	CHECK(e == EINVAL, "ibv_attach_mcast of an RC QP: %s, want EINVAL", strerror(e));
	e = ibv_attach_mcast(E.ud, &E.gid, 0);
	CHECK(e == EINVAL, "ibv_attach_mcast to a unicast GID: %s, want EINVAL", strerror(e));
	struct ibv_qp *q = create_qp(IBV_QPT_UD, E.ud_cq, E.ud_cq, NULL, NULL);
	CHECK(q, "ibv_create_qp (UD): %s", strerror(errno));
	e = ibv_attach_mcast(q, mg, 0);
	CHECK(e == 0, "ibv_attach_mcast: %s", strerror(e));
	e = ibv_destroy_qp(q);
	CHECK(e == EBUSY, "ibv_destroy_qp of an attached QP: %s, want EBUSY", strerror(e));
	e = ibv_detach_mcast(q, mg, 0);
	CHECK(e == 0, "ibv_detach_mcast: %s", strerror(e));
	e = ibv_destroy_qp(q);
	CHECK(e == 0, "ibv_destroy_qp after ibv_detach_mcast: %s", strerror(e));
	return 0;
}

static int ip_join(const union ibv_gid *mg)
{
	if (!gid_is_v4(mg))
		return -1;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ip_mreq m;
	memcpy(&m.imr_multiaddr, mg->raw + 12, 4);
	memcpy(&m.imr_interface, E.gid.raw + 12, 4);
	if (fd >= 0 && setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)))
		printf("# IP_ADD_MEMBERSHIP: %s\n", strerror(errno));
	return fd;
}

static int case_ud_mcast(void)
{
	union ibv_gid mg = {.raw = {0xff, 0x0e, [13] = 2, [15] = 77}};
	if (gid_is_v4(&E.gid))
		mg = (union ibv_gid){.raw = {[10] = 0xff, [11] = 0xff, [12] = 239, [13] = 0, [14] = 2, [15] = 77}};
	uint32_t len = 256;
	uint8_t *rb = E.buf + 16384;
	struct ibv_wc wc;
	int r = mcast_errors(&mg);
	if (server) {
		memset(rb, GUARD, 8192);
		int ipfd = ip_join(&mg);
		struct ibv_qp *q = create_qp(IBV_QPT_UD, E.ud_cq, E.ud_cq, NULL, NULL);
		int e = q ? connect_ud(q, 0) : errno;
		if (!e)
			e = ibv_attach_mcast(q, &mg, 0);
		if (!e)
			e = ibv_attach_mcast(q, &mg, 0);
		if (e && !r)
			r = failf("a UD QP attached to a group: %s", strerror(e));
		if (!e && (e = post_recv(q, rb, 40 + len, E.buf_mr->lkey, 60)) && !r)
			r = failf("ibv_post_recv (UD): %s", strerror(e));
		sync_peer(1);
		sync_peer(1); /* the client sent the datagram */
		if (!e && !r)
			r = datagram_to(E.ud_cq, q, (uint32_t)E.peer.ud_qpn, &wc, 60, rb, len, 33, &mg);
		if (q && (e = ibv_detach_mcast(q, &mg, 0)) && !r)
			r = failf("ibv_detach_mcast: %s", strerror(e));
		if (q && (e = ibv_detach_mcast(q, &mg, 0)) != EINVAL && !r)
			r = failf("ibv_detach_mcast of a group the QP left: %s, want EINVAL", strerror(e));
		if (q && (e = ibv_destroy_qp(q)) && !r)
			r = failf("ibv_destroy_qp: %s", strerror(e));
		if (ipfd >= 0)
			close(ipfd);
		return r;
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = mg, .sgid_index = E.gidx, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(E.pd, &aa);
	uint8_t *a = E.buf + 32768;
	fill(a, len, 33);
	sync_peer(1); /* the server attached */
	if (!ah && !r)
		r = failf("ibv_create_ah to a multicast GID: %s", strerror(errno));
	if (ah && !r)
		r = ud_send(ah, MCAST_QPN, QKEY, a, len, 61);
	sync_peer(1);
	if (ah)
		ibv_destroy_ah(ah);
	return r;
}

/*
 * The ibv_wr_* API (ibv_wr_post(3)) on the QPs made with
 * ibv_create_qp_ex and send_ops_flags: qp[Q_WR] (RC) and ud_wr. The
 * client posts, the server receives and checks its memory. A device
 * whose ibv_create_qp_ex refuses send_ops_flags with EOPNOTSUPP has no
 * such API: the cases are skipped.
 */

/* Why the cases of the ibv_wr_* API do not run (the client's device has no such API), or NULL. */
static const char *wr_skipped(void)
{
	if (server)
		return E.peer.wr_api ? NULL : "no ibv_wr_* API on the client's device";
	return E.wr_skip[0] ? E.wr_skip : NULL;
}

/*
 * The QPs' struct ibv_qp_ex, and the send_ops_flags that
 * ibv_create_qp_ex must refuse: what a QP's type cannot do (TSO on RC,
 * RDMA WRITE on UD), and whatever optional operation the device refuses
 * on RC, which rc_wr_api then checks a batch cannot post.
 */
static int case_create_qp_ex(void)
{
	if (E.wr_skip[0]) {
		snprintf(why, sizeof(why), "%s", E.wr_skip);
		return 1;
	}
	E.wr_rc = ibv_qp_to_qp_ex(E.qp[Q_WR]);
	E.wr_ud = ibv_qp_to_qp_ex(E.ud_wr);
	CHECK(E.wr_rc && E.wr_ud, "ibv_qp_to_qp_ex of a QP made with send_ops_flags: NULL (%s)",
	      E.wr_rc ? "UD" : "RC");
	CHECK(&E.wr_rc->qp_base == E.qp[Q_WR] && &E.wr_ud->qp_base == E.ud_wr,
	      "ibv_qp_to_qp_ex: qp_base is not the QP");
	CHECK(E.wr_cap.max_inline_data >= 64 && E.wr_cap.max_send_sge >= 2, "granted max_inline_data %u max_send_sge %u",
	      E.wr_cap.max_inline_data, E.wr_cap.max_send_sge);
	static const struct {
		enum ibv_qp_type t;
		uint64_t ops;
		const char *what;
	} never[] = {
		{IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO, "TSO on RC"},
		{IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE, "RDMA WRITE on UD"},
	};
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		errno = 0;
		struct ibv_qp *qp = create_qp_ex(never[i].t, never[i].ops, NULL);
		int e = errno;
		if (qp)
			ibv_destroy_qp(qp);
		CHECK(!qp && e == EOPNOTSUPP, "ibv_create_qp_ex with send_ops_flags for %s: %s, want EOPNOTSUPP",
		      never[i].what, qp ? "created" : strerror(e));
	}
	static const uint64_t optional[] = {IBV_QP_EX_WITH_SEND_WITH_INV, IBV_QP_EX_WITH_LOCAL_INV,
					    IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_ATOMIC_WRITE};
	E.wr_refused = IBV_QP_EX_WITH_TSO;
	for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++) {
		errno = 0;
		struct ibv_qp *qp = create_qp_ex(IBV_QPT_RC, IBV_QP_EX_WITH_SEND | optional[i], NULL);
		int e = errno;
		if (qp)
			CHECK((e = ibv_destroy_qp(qp)) == 0, "ibv_destroy_qp: %s", strerror(e));
		else if (e == EOPNOTSUPP)
			E.wr_refused |= optional[i];
		else
			return failf("ibv_create_qp_ex with send_ops_flags %#llx: %s", (unsigned long long)optional[i],
				     strerror(e));
	}
	snprintf(note, sizeof(note), "RC refuses send_ops_flags %#llx", (unsigned long long)E.wr_refused);
	return 0;
}

#define WR_ATOM_OFF 56000 /* rc_wr_api's atomic target in the server's malloc'ed buffer */
#define WR_IMM_SEND 0x5eed0101u
#define WR_IMM_WRITE 0x5eed0103u
#define WR_IMM_UD 0x5eed0111u

/*
 * The server's side of rc_wr_api: what the client's requests leave in its
 * memory and receive queue. The receives take, in order, the SEND of an
 * SGE list (90), the SEND_WITH_IMM of inline data (91), the
 * RDMA_WRITE_WITH_IMM of an inline list (92) and the SEND after the
 * aborted and failed batches (93): nothing of those batches arrives.
 */
static int rc_wr_server(uint32_t wlen, uint32_t rlen, int atomics)
{
	uint8_t *rb = E.mm, *wdst = E.buf + 16384, *idst = E.buf + 32768, *x = E.buf + 49152;
	uint64_t *target = (uint64_t *)(E.buf + WR_ATOM_OFF);
	struct ibv_wc wc;
	char b[160];
	if (expect_wc(E.wr_cq, &wc, 90, IBV_WC_RECV, "receive of the SGE list's SEND"))
		return -1;
	CHECK(wc.byte_len == 1200 && !(wc.wc_flags & IBV_WC_WITH_IMM),
	      "SEND of an SGE list: byte_len %u (want 1200) flags %#x", wc.byte_len, wc.wc_flags);
	long i = check_pat(rb, 1200, 70);
	CHECK(i < 0, "SEND of an SGE list: byte %ld differs", i);
	if (expect_wc(E.wr_cq, &wc, 91, IBV_WC_RECV, "receive of the inline SEND_WITH_IMM"))
		return -1;
	CHECK(wc.byte_len == 40 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(WR_IMM_SEND),
	      "SEND_WITH_IMM of inline data: byte_len %u (want 40) flags %#x imm_data %#x (want %#x)", wc.byte_len,
	      wc.wc_flags, be32toh(wc.imm_data), WR_IMM_SEND);
	i = check_pat(rb + 4096, 40, 71);
	CHECK(i < 0, "SEND_WITH_IMM of inline data: byte %ld differs", i);
	if (poll_one(E.wr_cq, &wc, "the RDMA_WRITE_WITH_IMM's receive"))
		return -1;
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 92 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
		      (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(WR_IMM_WRITE),
	      "RDMA_WRITE_WITH_IMM of an inline list: %s imm_data %#x; want wr_id 92 opcode %d imm_data %#x",
	      wc_str(&wc, b, sizeof(b)), be32toh(wc.imm_data), IBV_WC_RECV_RDMA_WITH_IMM, WR_IMM_WRITE);
	if (wc.byte_len == 0 && check_byte(idst, 40, GUARD) < 0) {
		/* rdma-core 44's rdma_rxe leaves an inline list's length at 0. */
		snprintf(note, sizeof(note), "the inline list's RDMA_WRITE_WITH_IMM arrived empty");
	} else {
		CHECK(wc.byte_len == 40, "RDMA_WRITE_WITH_IMM of an inline list: byte_len %u, want 40", wc.byte_len);
		i = check_pat(idst, 40, 73);
		CHECK(i < 0, "RDMA_WRITE_WITH_IMM of an inline list: byte %ld differs", i);
	}
	CHECK(check_byte(idst + 40, 16, GUARD) < 0 && check_byte(rb + 8192, 64, GUARD) < 0,
	      "RDMA_WRITE_WITH_IMM of an inline list: bytes past the target, or the receive's buffer, were written");
	if (expect_wc(E.wr_cq, &wc, 93, IBV_WC_RECV, "receive of the SEND after the aborted and failed batches"))
		return -1;
	i = check_pat(rb + 12288, 500, 77);
	CHECK(wc.byte_len == 500 && i < 0,
	      "the SEND after the aborted and failed batches: byte_len %u (want 500), byte %ld differs (a request "
	      "of those batches arrived?)",
	      wc.byte_len, i);
	if (poll_none(E.wr_cq, 10, "after the four receives"))
		return -1;
	i = check_pat(wdst, wlen, 72);
	CHECK(i < 0, "the unsignaled RDMA WRITE: byte %ld differs", i);
	CHECK(check_byte(wdst - 16, 16, GUARD) < 0 && check_byte(wdst + wlen, 64, GUARD) < 0,
	      "the unsignaled RDMA WRITE: bytes around the target were written");
	i = check_byte(x, 1024, GUARD);
	CHECK(i < 0, "byte %ld of the aborted and failed batches' target was written", i);
	i = check_pat(E.mm + 20480, rlen, 74);
	CHECK(i < 0, "byte %ld of the region read changed", i);
	if (atomics) {
		CHECK(target[0] == ATOM_SWAP + ATOM_ADD && target[-1] == ATOM_GUARD && target[1] == ATOM_GUARD,
		      "the atomic target holds %#llx, want %#llx (or the words around it changed)",
		      (unsigned long long)target[0], (unsigned long long)(ATOM_SWAP + ATOM_ADD));
	}
	return 0;
}

static const char *errname(int e)
{
	const char *s = strerrorname_np(e);
	return s ? s : "?";
}

/* A batch that must fail at ibv_wr_complete: its error, or 0 with why set. */
static int wr_must_fail(struct ibv_qp_ex *x, const char *what)
{
	int e = ibv_wr_complete(x);
	if (e == 0)
		failf("ibv_wr_complete of a batch with %s: 0, want an error", what);
	return e;
}

/*
 * Batches of the RC QP's operations the device refuses in send_ops_flags
 * (case_create_qp_ex), for which the library still gives a function:
 * each batch, a WRITE to the target x first, must fail.
 */
static int rc_wr_refused(struct ibv_qp_ex *x, uint64_t xaddr, char *refused, size_t n)
{
	static const struct {
		const char *name;
		uint64_t flag; /* 0: meaningless on RC whatever the device */
		size_t fn;     /* the function's offset in struct ibv_qp_ex */
	} ops[] = {
		{"send_inv", IBV_QP_EX_WITH_SEND_WITH_INV, offsetof(struct ibv_qp_ex, wr_send_inv)},
		{"local_inv", IBV_QP_EX_WITH_LOCAL_INV, offsetof(struct ibv_qp_ex, wr_local_inv)},
		{"bind_mw", IBV_QP_EX_WITH_BIND_MW, offsetof(struct ibv_qp_ex, wr_bind_mw)},
		{"atomic_write", IBV_QP_EX_WITH_ATOMIC_WRITE, offsetof(struct ibv_qp_ex, wr_atomic_write)},
		{"send_tso", IBV_QP_EX_WITH_TSO, offsetof(struct ibv_qp_ex, wr_send_tso)},
		{"set_xrc_srqn", 0, offsetof(struct ibv_qp_ex, wr_set_xrc_srqn)},
	};
	uint32_t lkey = E.buf_mr->lkey;
	uint8_t *src = E.buf + 40000;
	uint64_t atomic_wr = 0;
	struct ibv_mw_bind_info bind = {.mr = E.buf_mr, .addr = (uintptr_t)E.buf, .length = 64,
					.mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		void *fn;
		memcpy(&fn, (const char *)x + ops[k].fn, sizeof(fn));
		if (!fn || (ops[k].flag && !(E.wr_refused & ops[k].flag)))
			continue;
		ibv_wr_start(x);
		x->wr_id = 130 + k;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, E.peer.buf_rkey, xaddr);
		ibv_wr_set_sge(x, lkey, (uintptr_t)src, 256);
		x->wr_id = 140 + k;
		switch (k) {
		case 0:
			ibv_wr_send_inv(x, E.peer.ro_rkey);
			ibv_wr_set_sge(x, lkey, (uintptr_t)src, 16);
			break;
		case 1:
			ibv_wr_local_inv(x, E.buf_mr->rkey);
			break;
		case 2:
			ibv_wr_bind_mw(x, NULL, 0x1234, &bind);
			break;
		case 3:
			ibv_wr_atomic_write(x, E.peer.buf_rkey, E.peer.buf_addr + WR_ATOM_OFF, &atomic_wr);
			break;
		case 4:
			ibv_wr_send_tso(x, src, 64, 1000);
			ibv_wr_set_sge(x, lkey, (uintptr_t)src, 256);
			break;
		default:
			ibv_wr_send(x);
			ibv_wr_set_sge(x, lkey, (uintptr_t)src, 16);
			ibv_wr_set_xrc_srqn(x, 1);
			break;
		}
		char what[64];
		snprintf(what, sizeof(what), "ibv_wr_%s", ops[k].name);
		int e = wr_must_fail(x, what);
		if (!e)
			return -1;
		size_t l = strlen(refused);
		snprintf(refused + l, n - l, "%s%s %s", l ? ", " : "", ops[k].name, errname(e));
	}
	return 0;
}

/*
 * The client's side of rc_wr_api: batches of several requests (an SGE
 * list, inline data and an inline list, wr_id and wr_flags taken at
 * each builder: one WRITE is unsignaled), READ and atomics, an aborted
 * batch and batches that fail at ibv_wr_complete (too many SGEs, the
 * operations refused), which post nothing, and a SEND after them.
 */
static int rc_wr_client(uint32_t wlen, uint32_t rlen, int atomics)
{
	struct ibv_qp_ex *x = E.wr_rc;
	uint64_t rkey = E.peer.buf_rkey, xaddr = E.peer.buf_addr + 49152;
	uint32_t lkey = E.buf_mr->lkey;
	struct ibv_wc wc;
	uint8_t whole[1200], inl[40], ia[24], ib[16];
	fill(whole, 1200, 70);
	memcpy(E.buf, whole, 600);
	memcpy(E.mm, whole + 600, 600);
	fill(inl, 40, 71);
	fill(E.mm + 4096, wlen, 72);
	uint8_t li[40];
	fill(li, 40, 73);
	memcpy(ia, li, 24);
	memcpy(ib, li + 24, 16);

	/* One batch: SEND (an SGE list), SEND_WITH_IMM (inline), WRITE (unsignaled), WRITE_WITH_IMM (an inline list). */
	ibv_wr_start(x);
	x->wr_id = 100;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	/* Of one length: rdma-core 44's rdma_rxe takes a list's length as its count times the first's. */
	struct ibv_sge sl[2] = {{(uintptr_t)E.buf, 600, lkey}, {(uintptr_t)E.mm, 600, E.mm_mr->lkey}};
	ibv_wr_set_sge_list(x, 2, sl);
	x->wr_id = 101;
	/* IBV_SEND_INLINE beside the inline setters: rdma_rxe's kernel side reads the flag. */
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(x, htobe32(WR_IMM_SEND));
	ibv_wr_set_inline_data(x, inl, sizeof(inl));
	memset(inl, 0, sizeof(inl)); /* the setter took the bytes */
	x->wr_id = 102;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, rkey, E.peer.buf_addr + 16384);
	ibv_wr_set_sge(x, E.mm_mr->lkey, (uintptr_t)(E.mm + 4096), wlen);
	x->wr_id = 103;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write_imm(x, rkey, E.peer.buf_addr + 32768, htobe32(WR_IMM_WRITE));
	struct ibv_data_buf dl[2] = {{ia, sizeof(ia)}, {ib, sizeof(ib)}};
	ibv_wr_set_inline_data_list(x, 2, dl);
	memset(ia, 0, sizeof(ia));
	memset(ib, 0, sizeof(ib));
	int e = ibv_wr_complete(x);
	CHECK(e == 0, "ibv_wr_complete of SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM: %s", strerror(e));
	if (expect_wc(E.wr_cq, &wc, 100, IBV_WC_SEND, "the SEND of an SGE list") ||
	    expect_wc(E.wr_cq, &wc, 101, IBV_WC_SEND, "the inline SEND_WITH_IMM") ||
	    expect_wc(E.wr_cq, &wc, 103, IBV_WC_RDMA_WRITE, "the RDMA_WRITE_WITH_IMM (102 is unsignaled)") ||
	    poll_none(E.wr_cq, 10, "after the first batch"))
		return -1;

	/* READ and the atomics, in one batch. */
	uint8_t *rdst = E.buf + 16384;
	uint64_t *res = (uint64_t *)(E.buf + 32768);
	memset(rdst, GUARD, rlen + 64);
	res[0] = res[1] = ATOM_GUARD;
	ibv_wr_start(x);
	x->wr_id = 104;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, E.peer.mm_rkey, E.peer.mm_addr + 20480);
	ibv_wr_set_sge(x, lkey, (uintptr_t)rdst, rlen);
	if (atomics) {
		x->wr_id = 105;
		ibv_wr_atomic_cmp_swp(x, rkey, E.peer.buf_addr + WR_ATOM_OFF, ATOM_INIT, ATOM_SWAP);
		ibv_wr_set_sge(x, lkey, (uintptr_t)&res[0], 8);
		x->wr_id = 106;
		ibv_wr_atomic_fetch_add(x, rkey, E.peer.buf_addr + WR_ATOM_OFF, ATOM_ADD);
		ibv_wr_set_sge(x, lkey, (uintptr_t)&res[1], 8);
	}
	e = ibv_wr_complete(x);
	CHECK(e == 0, "ibv_wr_complete of READ%s: %s", atomics ? " and the atomics" : "", strerror(e));
	if (expect_wc(E.wr_cq, &wc, 104, IBV_WC_RDMA_READ, "the READ"))
		return -1;
	CHECK(wc.byte_len == rlen, "the READ: byte_len %u, want %u", wc.byte_len, rlen);
	long i = check_pat(rdst, rlen, 74);
	CHECK(i < 0, "byte %ld read differs", i);
	CHECK(check_byte(rdst + rlen, 64, GUARD) < 0, "bytes past the READ's buffer were written");
	if (atomics) {
		if (expect_wc(E.wr_cq, &wc, 105, IBV_WC_COMP_SWAP, "the compare and swap") ||
		    expect_wc(E.wr_cq, &wc, 106, IBV_WC_FETCH_ADD, "the fetch and add"))
			return -1;
		CHECK(res[0] == ATOM_INIT && res[1] == ATOM_SWAP,
		      "compare and swap returned %#llx (want %#llx), fetch and add %#llx (want %#llx)",
		      (unsigned long long)res[0], (unsigned long long)ATOM_INIT, (unsigned long long)res[1],
		      (unsigned long long)ATOM_SWAP);
	}
	if (poll_none(E.wr_cq, 10, "after the second batch"))
		return -1;

	/* An aborted batch posts nothing. */
	uint8_t *src = E.buf + 40000;
	fill(src, 256, 75);
	ibv_wr_start(x);
	x->wr_id = 120;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, rkey, xaddr);
	ibv_wr_set_sge(x, lkey, (uintptr_t)src, 256);
	x->wr_id = 121;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, lkey, (uintptr_t)src, 256);
	ibv_wr_abort(x);
	if (poll_none(E.wr_cq, 20, "after ibv_wr_abort"))
		return -1;

	/* A request with too many SGEs fails its batch at ibv_wr_complete: nothing is posted. */
	fill(src, 256, 76);
	uint32_t nsge = E.wr_cap.max_send_sge + 1;
	struct ibv_sge *many = calloc(nsge, sizeof(*many));
	CHECK(many, "calloc");
	for (uint32_t k = 0; k < nsge; k++)
		many[k] = (struct ibv_sge){.addr = (uintptr_t)src, .length = 16, .lkey = lkey};
	ibv_wr_start(x);
	x->wr_id = 122;
	ibv_wr_rdma_write(x, rkey, xaddr);
	ibv_wr_set_sge(x, lkey, (uintptr_t)src, 256);
	x->wr_id = 123;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, nsge, many);
	x->wr_id = 124;
	ibv_wr_rdma_write(x, rkey, xaddr + 512);
	ibv_wr_set_sge(x, lkey, (uintptr_t)src, 256);
	char what[64];
	snprintf(what, sizeof(what), "%u SGEs (max_send_sge %u)", nsge, E.wr_cap.max_send_sge);
	e = wr_must_fail(x, what);
	free(many);
	if (!e)
		return -1;
	char refused[200] = "";
	if (rc_wr_refused(x, xaddr, refused, sizeof(refused)))
		return -1;
	if (poll_none(E.wr_cq, 20, "after the failed batches"))
		return -1;
	snprintf(note, sizeof(note), "a batch with %s: %s%s%s", what, errname(e), refused[0] ? "; refused: " : "",
		 refused);

	/* The queue still takes requests. */
	fill(E.buf + 44000, 500, 77);
	ibv_wr_start(x);
	x->wr_id = 107;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, lkey, (uintptr_t)(E.buf + 44000), 500);
	e = ibv_wr_complete(x);
	CHECK(e == 0, "ibv_wr_complete of a SEND after the failed batches: %s", strerror(e));
	return expect_wc(E.wr_cq, &wc, 107, IBV_WC_SEND, "the SEND after the failed batches");
}

static int case_rc_wr_api(void)
{
	const char *skip = wr_skipped();
	if (skip) {
		snprintf(why, sizeof(why), "%s", skip);
		return 1;
	}
	int atomics = E.attr.atomic_cap != IBV_ATOMIC_NONE && E.peer.atomic_cap != IBV_ATOMIC_NONE;
	uint32_t wlen = 3 * E.mtu_bytes + 5, rlen = 2 * E.mtu_bytes + 11;
	if (server) {
		memset(E.mm, GUARD, 16384);
		memset(E.buf + 16384 - 16, GUARD, wlen + 80);
		memset(E.buf + 32768, GUARD, 64);
		memset(E.buf + 49152, GUARD, 1024);
		fill(E.mm + 20480, rlen, 74);
		uint64_t *target = (uint64_t *)(E.buf + WR_ATOM_OFF);
		target[0] = ATOM_INIT;
		target[-1] = target[1] = ATOM_GUARD;
		int e = 0;
		for (int k = 0; k < 4 && !e; k++)
			e = post_recv(E.qp[Q_WR], E.mm + 4096 * k, 2048, E.mm_mr->lkey, 90 + k);
		sync_peer(1);
		sync_peer(1); /* the client's batches are done */
		if (e)
			return failf("ibv_post_recv: %s", strerror(e));
		int r = rc_wr_server(wlen, rlen, atomics);
		if (r == 0 && !atomics) {
			size_t l = strlen(note);
			snprintf(note + l, sizeof(note) - l, "%sa device has no atomics: not run", l ? "; " : "");
		}
		return r;
	}
	sync_peer(1);
	int r = E.wr_rc ? rc_wr_client(wlen, rlen, atomics) : failf("no struct ibv_qp_ex (see create_qp_ex)");
	sync_peer(1);
	return r;
}

/* Datagrams through ibv_wr_set_ud_addr, with an SGE and with inline data (SEND_WITH_IMM). */
static int case_ud_wr_api(void)
{
	const char *skip = wr_skipped();
	if (skip) {
		snprintf(why, sizeof(why), "%s", skip);
		return 1;
	}
	uint32_t len = E.mtu_bytes;
	struct ibv_wc wc;
	if (server) {
		uint8_t *rb = E.mm + 32768;
		memset(rb, GUARD, 16384);
		int e = post_recv(E.ud_wr, rb, 40 + len, E.mm_mr->lkey, 94);
		if (!e)
			e = post_recv(E.ud_wr, rb + 8192, 40 + 64, E.mm_mr->lkey, 95);
		sync_peer(1);
		sync_peer(1);
		if (e)
			return failf("ibv_post_recv (UD): %s", strerror(e));
		uint32_t src = (uint32_t)E.peer.ud_wr_qpn;
		if (datagram_check(E.wr_cq, E.ud_wr, src, &wc, 94, rb, len, 80))
			return -1;
		CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "the first datagram: flags %#x", wc.wc_flags);
		if (datagram_check(E.wr_cq, E.ud_wr, src, &wc, 95, rb + 8192, 40, 81))
			return -1;
		CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(WR_IMM_UD),
		      "the inline datagram: flags %#x imm_data %#x, want %#x", wc.wc_flags, be32toh(wc.imm_data),
		      WR_IMM_UD);
		return poll_none(E.wr_cq, 20, "after the datagrams");
	}
	struct ibv_qp_ex *x = E.wr_ud;
	uint8_t *sb = E.buf + 48000, inl[40];
	fill(sb, len, 80);
	fill(inl, sizeof(inl), 81);
	sync_peer(1);
	if (!x) {
		sync_peer(1);
		return failf("no struct ibv_qp_ex (see create_qp_ex)");
	}
	ibv_wr_start(x);
	x->wr_id = 110;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, E.ah, (uint32_t)E.peer.ud_wr_qpn, QKEY);
	ibv_wr_set_sge(x, E.buf_mr->lkey, (uintptr_t)sb, len);
	x->wr_id = 111;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(x, htobe32(WR_IMM_UD));
	ibv_wr_set_inline_data(x, inl, sizeof(inl));
	ibv_wr_set_ud_addr(x, E.ah, (uint32_t)E.peer.ud_wr_qpn, QKEY);
	memset(inl, 0, sizeof(inl));
	int e = ibv_wr_complete(x);
	int r = e ? failf("ibv_wr_complete of two datagrams: %s", strerror(e)) : 0;
	if (r == 0)
		r = expect_wc(E.wr_cq, &wc, 110, IBV_WC_SEND, "the datagram");
	if (r == 0)
		r = expect_wc(E.wr_cq, &wc, 111, IBV_WC_SEND, "the inline datagram");
	sync_peer(1);
	return r;
}

/* Error completions. */

/*
 * A request the responder must refuse: a WRITE with an R_Key it does
 * not know, a WRITE to memory registered without remote write, a READ
 * past a region's end. Each QP ends in ERR.
 */
static int case_rc_remote_error(int qi)
{
	struct ibv_qp *qp = E.qp[qi];
	struct ibv_wc wc;
	if (server) {
		sync_peer(1);
		sync_peer(1);
		if (qi == Q_NO_WRITE) {
			long i = check_pat(E.ro, RO_LEN, 2);
			CHECK(i < 0, "byte %ld of the region without remote write changed", i);
		}
		return 0;
	}
	uint64_t raddr;
	uint32_t rkey;
	enum ibv_wr_opcode op = IBV_WR_RDMA_WRITE;
	if (qi == Q_BAD_RKEY) {
		raddr = E.peer.buf_addr;
		rkey = (uint32_t)E.peer.buf_rkey + 0x1000;
		while (rkey == E.peer.buf_rkey || rkey == E.peer.mm_rkey || rkey == E.peer.iova_rkey ||
		       rkey == E.peer.ro_rkey)
			rkey += 0x1000;
	} else if (qi == Q_NO_WRITE) {
		raddr = E.peer.ro_addr;
		rkey = E.peer.ro_rkey;
	} else {
		raddr = E.peer.buf_addr + BUF_LEN - 32;
		rkey = E.peer.buf_rkey;
		op = IBV_WR_RDMA_READ;
	}
	fill(E.mm + 60000, 64, 40);
	sync_peer(1);
	int e = post(qp, op, E.mm + 60000, 64, E.mm_mr->lkey, 60 + qi, raddr, rkey);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) : poll_one(E.err_cq, &wc, "the refused request");
	sync_peer(1);
	if (r)
		return r;
	char b[160];
	CHECK(wc.wr_id == (uint64_t)(60 + qi) && wc.status == IBV_WC_REM_ACCESS_ERR, "%s; want status %s",
	      wc_str(&wc, b, sizeof(b)), ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	CHECK(qp_state(qp) == IBV_QPS_ERR, "the QP's state is %d, want ERR", qp_state(qp));
	return 0;
}

/*
 * A send queue takes max_send_wr requests, as ibv_create_qp granted, and
 * refuses more with ENOMEM, *bad_wr naming the request, for as long as
 * they are outstanding: here WRITEs to a QP number the peer does not
 * have, so nothing acknowledges them (the ACK timeout is a second). A
 * provider's queue may hold a few more than it granted (rdma_rxe's holds
 * 2^k-1: 31 for 16), not twice as many; uroce's holds exactly as many
 * (daemon TestSendQueueFull). Requests the daemon took from its ring
 * count until they complete, so the ones past max_send_wr are posted
 * after the daemon had time to take the others. Moving the QP to ERR
 * completes every request the queue took.
 */
static int case_send_queue_full(void)
{
	if (server)
		return 0;
	struct ibv_qp_cap cap;
	struct ibv_qp *qp = create_qp(IBV_QPT_RC, E.local_cq, E.local_cq, NULL, &cap);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = init_attr();
	int e = modify(qp, IBV_QPS_INIT, INIT_MASK, &a);
	int r = e ? failf("RESET to INIT: %s", strerror(e)) : 0;
	a = rtr_attr(0xfffffe, 0);
	if (r == 0 && (e = modify(qp, IBV_QPS_RTR, RTR_MASK, &a)) != 0)
		r = failf("INIT to RTR: %s", strerror(e));
	memset(&a, 0, sizeof(a));
	a.timeout = 18; /* 1.07 s */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (r == 0 && (e = modify(qp, IBV_QPS_RTS, RTS_MASK, &a)) != 0)
		r = failf("RTR to RTS: %s", strerror(e));
	uint32_t n = 0;
	for (; r == 0 && n < cap.max_send_wr; n++)
		if ((e = post(qp, IBV_WR_RDMA_WRITE, E.buf, 64, E.buf_mr->lkey, 400 + n, E.peer.buf_addr,
			      E.peer.buf_rkey)) != 0)
			r = failf("request %u of max_send_wr %u: %s", n + 1, cap.max_send_wr, strerror(e));
	if (r == 0)
		usleep(100 * 1000); /* time for the daemon to take them from its ring: they still count */
	for (e = 0; r == 0 && n < 2 * cap.max_send_wr; n++) {
		struct ibv_sge sge = {.addr = (uintptr_t)E.buf, .length = 64, .lkey = E.buf_mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 400 + n, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad = NULL;
		wr.wr.rdma.remote_addr = E.peer.buf_addr;
		wr.wr.rdma.rkey = E.peer.buf_rkey;
		if ((e = ibv_post_send(qp, &wr, &bad)) == 0)
			continue;
		if (e != ENOMEM || bad != &wr)
			r = failf("request %u past max_send_wr %u outstanding: %s, bad_wr %s; want ENOMEM", n + 1,
				  cap.max_send_wr, strerror(e), bad == &wr ? "it" : "not it");
		break;
	}
	if (r == 0 && e == 0)
		r = failf("the send queue took %u requests (max_send_wr %u) and was still not full", n, cap.max_send_wr);
	if ((e = modify(qp, IBV_QPS_ERR, 0, &a)) != 0 && r == 0)
		r = failf("RTS to ERR: %s", strerror(e));
	for (uint32_t k = 0; r == 0 && k < n; k++) {
		struct ibv_wc wc;
		if (poll_one(E.local_cq, &wc, "flushed request"))
			r = -1;
		else if (wc.wr_id != 400 + k || wc.status == IBV_WC_SUCCESS)
			r = failf("request %u of %u: wr_id %llu status %s, want it flushed", k + 1, n,
				  (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	}
	if (r == 0)
		r = poll_none(E.local_cq, 20, "after the flush");
	if ((e = ibv_destroy_qp(qp)) != 0 && r == 0)
		r = failf("ibv_destroy_qp: %s", strerror(e));
	return r;
}

/* A SEND to a QP with no receive posted, with rnr_retry 1: IBV_WC_RNR_RETRY_EXC_ERR. */
static int case_rc_rnr(void)
{
	struct ibv_qp *qp = E.qp[Q_RNR];
	struct ibv_wc wc;
	if (server) {
		sync_peer(1);
		sync_peer(1);
		return 0;
	}
	fill(E.buf, 64, 41);
	sync_peer(1);
	int e = post(qp, IBV_WR_SEND, E.buf, 64, E.buf_mr->lkey, 70, 0, 0);
	int r = e ? failf("ibv_post_send: %s", strerror(e)) : poll_one(E.err_cq, &wc, "the send");
	sync_peer(1);
	if (r)
		return r;
	char b[160];
	CHECK(wc.wr_id == 70 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "%s; want status %s", wc_str(&wc, b, sizeof(b)),
	      ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR));
	CHECK(qp_state(qp) == IBV_QPS_ERR, "the QP's state is %d, want ERR", qp_state(qp));
	return 0;
}

static int case_wc_status_str(void)
{
	static const struct {
		enum ibv_wc_status s;
		const char *text;
	} known[] = {
		{IBV_WC_SUCCESS, "success"},
		{IBV_WC_LOC_PROT_ERR, "local protection error"},
		{IBV_WC_WR_FLUSH_ERR, "Work Request Flushed Error"},
		{IBV_WC_REM_ACCESS_ERR, "remote access error"},
		{IBV_WC_RETRY_EXC_ERR, "transport retry counter exceeded"},
		{IBV_WC_RNR_RETRY_EXC_ERR, "RNR retry counter exceeded"},
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		const char *s = ibv_wc_status_str(known[i].s);
		CHECK(s && strcmp(s, known[i].text) == 0, "ibv_wc_status_str(%d) = \"%s\", want \"%s\"", known[i].s,
		      s ? s : "(null)", known[i].text);
	}
	for (int a = IBV_WC_SUCCESS; a <= IBV_WC_GENERAL_ERR; a++) {
		const char *s = ibv_wc_status_str(a);
		CHECK(s && *s, "ibv_wc_status_str(%d) is empty", a);
		for (int b = IBV_WC_SUCCESS; b < a; b++)
			CHECK(strcmp(s, ibv_wc_status_str(b)) != 0, "statuses %d and %d share the text \"%s\"", b, a,
			      s);
	}
	const char *s = ibv_wc_status_str((enum ibv_wc_status)1000);
	CHECK(s && *s, "ibv_wc_status_str(1000): nothing");
	return 0;
}

/* Teardown. */

static int case_destroy_busy(void)
{
	int e = ibv_dealloc_pd(E.pd);
	CHECK(e == EBUSY, "ibv_dealloc_pd of a PD with QPs, an SRQ, AHs and MRs: %s, want EBUSY", strerror(e));
	e = ibv_destroy_cq(E.cq);
	CHECK(e == EBUSY, "ibv_destroy_cq of a QP's CQ: %s, want EBUSY", strerror(e));
	e = ibv_destroy_srq(E.srq);
	CHECK(e == EBUSY, "ibv_destroy_srq of an SRQ with QPs: %s, want EBUSY", strerror(e));
	e = ibv_destroy_comp_channel(E.ch);
	CHECK(e == EBUSY, "ibv_destroy_comp_channel of a channel with a CQ: %s, want EBUSY", strerror(e));
	return 0;
}

static int case_destroy(void)
{
	int e;
	if (E.ah)
		CHECK((e = ibv_destroy_ah(E.ah)) == 0, "ibv_destroy_ah: %s", strerror(e));
	if (E.reply_ah)
		CHECK((e = ibv_destroy_ah(E.reply_ah)) == 0, "ibv_destroy_ah (from a completion): %s", strerror(e));
	for (int i = 0; i < NQP; i++)
		CHECK((e = ibv_destroy_qp(E.qp[i])) == 0, "ibv_destroy_qp %d: %s", i, strerror(e));
	CHECK((e = ibv_destroy_qp(E.ud)) == 0, "ibv_destroy_qp (UD): %s", strerror(e));
	CHECK((e = ibv_destroy_qp(E.ud_wr)) == 0, "ibv_destroy_qp (UD, ibv_wr_* API): %s", strerror(e));
	e = ibv_dealloc_pd(E.pd);
	CHECK(e == EBUSY, "ibv_dealloc_pd of a PD with an SRQ and MRs: %s, want EBUSY", strerror(e));
	CHECK((e = ibv_destroy_srq(E.srq)) == 0, "ibv_destroy_srq: %s", strerror(e));
	struct ibv_cq *cqs[] = {E.cq, E.ev_cq, E.srq_cq, E.err_cq, E.ud_cq, E.local_cq, E.wr_cq, ibv_cq_ex_to_cq(E.cqx)};
	for (size_t i = 0; i < sizeof(cqs) / sizeof(cqs[0]); i++)
		CHECK((e = ibv_destroy_cq(cqs[i])) == 0, "ibv_destroy_cq %zu: %s", i, strerror(e));
	CHECK((e = ibv_destroy_comp_channel(E.ch)) == 0, "ibv_destroy_comp_channel: %s", strerror(e));
	e = ibv_dealloc_pd(E.pd);
	CHECK(e == EBUSY, "ibv_dealloc_pd of a PD with MRs: %s, want EBUSY", strerror(e));
	/* Deregistered memory is the program's again, with its bytes. */
	uint8_t *copy = malloc(BUF_LEN);
	CHECK(copy, "malloc");
	memcpy(copy, E.mm, BUF_LEN);
	struct ibv_mr *mrs[] = {E.buf_mr, E.mm_mr, E.iova_mr, E.ro_mr};
	for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
		CHECK((e = ibv_dereg_mr(mrs[i])) == 0, "ibv_dereg_mr %zu: %s", i, strerror(e));
	int same = memcmp(copy, E.mm, BUF_LEN) == 0;
	free(copy);
	CHECK(same, "the mapping's bytes changed when it was deregistered");
	fill(E.mm, BUF_LEN, 50);
	long i = check_pat(E.mm, BUF_LEN, 50);
	CHECK(i < 0, "byte %ld of the deregistered mapping does not keep what was written", i);
	CHECK(munmap(E.mm, BUF_LEN) == 0 && munmap(E.ibuf, IOVA_LEN) == 0, "munmap: %s", strerror(errno));
	free(E.buf);
	free(E.ro);
	CHECK((e = ibv_dealloc_pd(E.pd)) == 0, "ibv_dealloc_pd: %s", strerror(e));
	CHECK((e = ibv_close_device(E.ctx)) == 0, "ibv_close_device: %s", strerror(e));
	ibv_free_device_list(E.list);
	return 0;
}

/* -L: a transfer until the client is killed. */
static void loop(void)
{
	if (server) {
		printf("serving\n");
		fflush(stdout);
		char c;
		while (read(oob, &c, 1) > 0)
			;
		printf("the client is gone\n");
		exit(0);
	}
	uint32_t len = 32 << 10;
	uint8_t *back = E.mm + len;
	for (unsigned n = 0;; n++) {
		struct ibv_wc wc;
		fill(E.buf, len, n);
		struct ibv_qp *qp = E.qp[Q_MAIN];
		if (post(qp, IBV_WR_RDMA_WRITE, E.buf, len, E.buf_mr->lkey, 1, E.peer.mm_addr, E.peer.mm_rkey) ||
		    expect_wc(E.cq, &wc, 1, IBV_WC_RDMA_WRITE, "write") ||
		    post(qp, IBV_WR_RDMA_READ, back, len, E.mm_mr->lkey, 2, E.peer.mm_addr, E.peer.mm_rkey) ||
		    expect_wc(E.cq, &wc, 2, IBV_WC_RDMA_READ, "read"))
			die("loop %u: %s", n, why);
		long i = check_pat(back, len, n);
		if (i >= 0)
			die("loop %u: byte %ld read back differs", n, i);
		if (n == 0) {
			printf("looping\n");
			fflush(stdout);
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: %s [-d DEV] [-g GIDIDX] [-p PORT] [-m MTU] [-t SECONDS] [-L] [SERVER]\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *port = "18600";
	int gidx = -1, mtu = 0, looping = 0;
	int c;
	while ((c = getopt(argc, argv, "d:g:p:m:t:L")) != -1) {
		switch (c) {
		case 'd':
			dev = optarg;
			break;
		case 'g':
			gidx = atoi(optarg);
			break;
		case 'p':
			port = optarg;
			break;
		case 'm':
			mtu = atoi(optarg);
			if (mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096)
				usage();
			break;
		case 't':
			timeout_ms = atoi(optarg) * 1000;
			if (timeout_ms <= 0)
				usage();
			break;
		case 'L':
			looping = 1;
			break;
		default:
			usage();
		}
	}
	if (optind < argc - 1)
		usage();
	const char *host = optind < argc ? argv[optind] : NULL;
	server = host == NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, watchdog);
	alarm(WATCHDOG_SECONDS);
	signal(SIGPIPE, SIG_IGN);
	srand48(getpid() ^ time(NULL));

	/* What needs no peer. A failure of the set-up ends the run. */
#define SETUP(name, call)                  \
	do {                               \
		int r_ = (call);           \
		report(name, r_);          \
		if (r_)                    \
			return 1;          \
	} while (0)
	SETUP("device_list", case_device_list(dev));
	SETUP("open_device", case_open_device());
	SETUP("query_device", case_query_device());
	SETUP("query_port", case_query_port(mtu));
	SETUP("query_gid", case_query_gid(gidx));
	RUN("query_pkey", case_query_pkey());
	SETUP("alloc_pd", case_alloc_pd());
	SETUP("reg_mr_malloc", case_reg_mr_malloc());
	SETUP("reg_mr_mmap", case_reg_mr_mmap());
	SETUP("reg_mr_iova2", case_reg_mr_iova2());
	RUN("reg_mr_bad_access", case_reg_mr_bad_access());
	SETUP("create_cq", case_create_cq());
	SETUP("create_srq", case_create_srq());
	SETUP("create_qp", case_create_qp());
	RUN("create_qp_ex", case_create_qp_ex());
	RUN("modify_qp_rules", case_modify_qp_rules());
	RUN("flush", case_flush());
	RUN("resize_cq", case_resize_cq());
	RUN("srq_resize", case_srq_resize());
	RUN("recv_queue_full", case_recv_queue_full());
	RUN("wc_status_str", case_wc_status_str());

	oob_connect(host, port);
	struct info me = {0};
	for (int i = 0; i < NQP; i++) {
		E.psn[i] = lrand48() & 0xffffff;
		me.qpn[i] = E.qp[i]->qp_num;
		me.psn[i] = E.psn[i];
	}
	E.ud_psn = lrand48() & 0xffffff;
	E.ud_wr_psn = lrand48() & 0xffffff;
	me.ud_qpn = E.ud->qp_num;
	me.ud_wr_qpn = E.ud_wr->qp_num;
	me.wr_api = !E.wr_skip[0];
	me.buf_addr = (uintptr_t)E.buf, me.buf_rkey = E.buf_mr->rkey;
	me.mm_addr = (uintptr_t)E.mm, me.mm_rkey = E.mm_mr->rkey;
	me.iova = IOVA_BASE, me.iova_rkey = E.iova_mr->rkey;
	me.ro_addr = (uintptr_t)E.ro, me.ro_rkey = E.ro_mr->rkey;
	me.cap_flags = E.attr.device_cap_flags;
	me.atomic_cap = E.attr.atomic_cap;
	me.lid = E.port.lid;
	gid_to_info(&E.gid, &me);
	exchange(&me, &E.peer);
	gid_from_info(&E.peer, &E.peer_gid);

	SETUP("rc_connect", case_rc_connect());
	SETUP("ud_connect", case_ud_connect());
	sync_peer(1);
	if (looping)
		loop();

	RUN("rc_send", case_rc_send());
	RUN("rc_send_imm", case_rc_send_imm(0));
	RUN("rc_send_imm_zero", case_rc_send_imm(1));
	RUN("rc_send_inline", case_rc_send_inline());
	RUN("rc_send_sge", case_rc_send_sge());
	RUN("rc_send_inv", case_rc_send_inv());
	RUN("rc_mw", case_rc_mw());
	RUN("rc_write", case_rc_write());
	RUN("rc_write_list", case_rc_write_list());
	RUN("rc_write_imm", case_rc_write_imm());
	RUN("rc_write_iova", case_rc_write_iova());
	RUN("rc_read", case_rc_read(0));
	RUN("rc_read_iova", case_rc_read(1));
	RUN("odp", case_odp());
	RUN("rc_atomic_cas", case_rc_atomic(0));
	RUN("rc_atomic_fadd", case_rc_atomic(1));
	RUN("srq", case_srq());
	RUN("ud", case_ud());
	RUN("ud_mcast", case_ud_mcast());
	RUN("cq_ex", case_cq_ex());
	RUN("rc_wr_api", case_rc_wr_api());
	RUN("ud_wr_api", case_ud_wr_api());
	RUN("rc_bad_rkey", case_rc_remote_error(Q_BAD_RKEY));
	RUN("rc_no_remote_write", case_rc_remote_error(Q_NO_WRITE));
	RUN("rc_read_out_of_bounds", case_rc_remote_error(Q_BOUNDS));
	RUN("rc_rnr_retry_exc", case_rc_rnr());
	RUN("send_queue_full", case_send_queue_full());
	sync_peer(1);
	RUN("destroy_busy", case_destroy_busy());
	RUN("destroy", case_destroy());
	uint8_t peer_ok = sync_peer(failures == 0);
	printf("done: %d failed here, %s on the peer\n", failures, peer_ok ? "none" : "some");
	return failures ? 1 : 0;
}
