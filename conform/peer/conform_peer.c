/*
 * conform_peer: the live end of uroce conform's scenarios where no stock
 * program can be it. It is an ordinary verbs program: it runs on any RDMA
 * device (an RNIC, rdma_rxe) and makes the device's own transport answer.
 *
 * As the requester (uroce conform --serve-peer is the server) it posts
 * what no stock program posts: several requests at once on one QP (a
 * WRITE and a READ), or UD sends with a Q_Key of its choosing. It
 * connects with ibv_rc_pingpong's exchange (TCP: the client writes
 * "LID:QPN:PSN:GID" first, reads the server's and writes "done" once its
 * QP is ready), posts every operation given, all at once and signaled,
 * and waits for their completions (its QP's retry counts are -c and -n,
 * 7 by default):
 *
 *   write:LEN[@OFF]    RDMA WRITE of LEN bytes to the server's region
 *                      (-k, -a) at OFF
 *   read:LEN[@OFF]     RDMA READ of LEN bytes from it
 *   send:LEN[:QKEY]    SEND (UD: to the server's QP with Q_Key QKEY,
 *                      default 0x11111111, the QP's own)
 *
 * It prints one line per completion and exits 0 when every one
 * succeeded, 1 otherwise, 2 on bad usage.
 *
 * As the responder (-S; uroce conform --conform-peer is the client) it
 * grants what no stock server grants at once: a region of 64 KiB open to
 * remote WRITEs, READs and atomics, and -r receives posted (their
 * buffers apart from the region). It serves ibv_rc_pingpong's exchange,
 * then sends its region as one more message, "RKEY:VA:LENGTH" (8, 16
 * and 8 hex digits, NUL-terminated, 35 bytes), and while the client
 * stays connected writes one byte, 'r', per receive completed, so the
 * client sees its deliveries; it ends when the client closes the
 * connection, or after -s seconds.
 *
 * Usage: conform_peer [-d DEV] [-g GID_INDEX] [-p PORT] [-t rc|ud] [-k RKEY]
 *        [-a VA] [-c RETRY_CNT] [-n RNR_RETRY] [-s SECONDS] OP... SERVER
 *        conform_peer -S [-d DEV] [-g GID_INDEX] [-p PORT] [-t rc|ud]
 *        [-r RECEIVES] [-s SECONDS]
 *
 * Build: gcc -O2 -Wall -o conform_peer conform/peer/conform_peer.c -libverbs
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>

#define REGION (64 * 1024)
#define RECV_SLOT 4096 /* a receive's buffer: a GRH and a path MTU's payload */
#define MAX_OPS 16
#define MAX_RECVS 64
#define MSG_SIZE 52 /* "0000:000000:000000:" and 32 hex digits, NUL */
#define REGION_MSG_SIZE 35
#define OWN_QKEY 0x11111111u

struct op {
	enum ibv_wr_opcode code;
	uint32_t len;
	uint64_t off;
	uint32_t qkey;
	const char *text;
};

static void usage(void)
{
	fprintf(stderr, "usage: conform_peer [-d DEV] [-g GID_INDEX] [-p PORT] [-t rc|ud] [-k RKEY] [-a VA] [-c RETRY_CNT] [-n RNR_RETRY]\n"
			"                    [-s SECONDS] OP... SERVER\n"
			"       conform_peer -S [-d DEV] [-g GID_INDEX] [-p PORT] [-t rc|ud] [-r RECEIVES] [-s SECONDS]\n"
			"  OP: write:LEN[@OFF]  read:LEN[@OFF]  send:LEN[:QKEY]\n");
	exit(2);
}

static int parse_op(const char *s, struct op *o)
{
	char *end;
	const char *arg = strchr(s, ':');

	memset(o, 0, sizeof(*o));
	o->text = s;
	o->qkey = OWN_QKEY;
	if (!arg)
		return -1;
	if (!strncmp(s, "write:", 6))
		o->code = IBV_WR_RDMA_WRITE;
	else if (!strncmp(s, "read:", 5))
		o->code = IBV_WR_RDMA_READ;
	else if (!strncmp(s, "send:", 5))
		o->code = IBV_WR_SEND;
	else
		return -1;
	errno = 0;
	o->len = strtoul(arg + 1, &end, 0);
	if (errno || end == arg + 1 || o->len > REGION)
		return -1;
	if (*end == '@' && o->code != IBV_WR_SEND) {
		o->off = strtoull(end + 1, &end, 0);
		if (o->off + o->len > REGION)
			return -1;
	} else if (*end == ':' && o->code == IBV_WR_SEND) {
		o->qkey = strtoul(end + 1, &end, 0);
	}
	return *end ? -1 : 0;
}

static int connect_to(const char *host, int port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *t;
	char service[8];
	int fd = -1;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host, service, &hints, &res)) {
		fprintf(stderr, "conform_peer: no address for %s\n", host);
		return -1;
	}
	for (t = res; t; t = t->ai_next) {
		fd = socket(t->ai_family, t->ai_socktype, t->ai_protocol);
		if (fd >= 0 && !connect(fd, t->ai_addr, t->ai_addrlen))
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "Couldn't connect to %s:%d\n", host, port);
	return fd;
}

/* accept_one listens on port and returns the first connection. */
static int accept_one(int port)
{
	struct addrinfo hints = { .ai_family = AF_INET6, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res;
	char service[8];
	int one = 1, lfd, fd;

	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(NULL, service, &hints, &res)) {
		hints.ai_family = AF_INET;
		if (getaddrinfo(NULL, service, &hints, &res))
			return -1;
	}
	lfd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (lfd < 0) {
		freeaddrinfo(res);
		return -1;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, res->ai_addr, res->ai_addrlen) || listen(lfd, 1)) {
		fprintf(stderr, "conform_peer: listen on port %d: %s\n", port, strerror(errno));
		freeaddrinfo(res);
		close(lfd);
		return -1;
	}
	freeaddrinfo(res);
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	return fd;
}

static int full(int fd, const char *buf, size_t n, int writing)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = writing ? write(fd, buf + done, n - done) : read(fd, (char *)buf + done, n - done);
		if (r <= 0)
			return -1;
		done += r;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* dest_msg writes this end's pingpong message. */
static void dest_msg(char *msg, uint32_t qpn, uint32_t psn, const union ibv_gid *gid)
{
	int i = snprintf(msg, MSG_SIZE, "%04x:%06x:%06x:", 0, qpn, psn);

	for (int c = 0; c < 16; c++)
		i += snprintf(msg + i, MSG_SIZE - i, "%02x", gid->raw[c]);
}

/* parse_dest reads the other end's pingpong message. */
static int parse_dest(char *msg, uint32_t *qpn, uint32_t *psn, union ibv_gid *gid)
{
	unsigned int lid, b;

	msg[MSG_SIZE - 1] = 0;
	if (sscanf(msg, "%x:%x:%x:", &lid, qpn, psn) != 3 || strlen(msg) != MSG_SIZE - 1) {
		fprintf(stderr, "conform_peer: the message %.51s: not LID:QPN:PSN:GID\n", msg);
		return -1;
	}
	for (int c = 0; c < 16; c++) {
		if (sscanf(msg + 19 + 2 * c, "%2x", &b) != 1) {
			fprintf(stderr, "conform_peer: the GID in %.51s\n", msg);
			return -1;
		}
		gid->raw[c] = b;
	}
	return 0;
}

/* ready moves qp to RTR and RTS towards the other end. */
static int retry_cnt = 7, rnr_retry = 7;

static int ready(struct ibv_qp *qp, int ud, int gid_index, uint32_t psn, uint32_t rqpn, uint32_t rpsn,
		 struct ibv_ah_attr *ah_attr)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (!ud) {
		attr.path_mtu = IBV_MTU_1024;
		attr.dest_qp_num = rqpn;
		attr.rq_psn = rpsn;
		attr.max_dest_rd_atomic = MAX_OPS;
		attr.min_rnr_timer = 12;
		attr.ah_attr = *ah_attr;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &attr, mask)) {
		perror("conform_peer: RTR");
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (!ud) {
		attr.timeout = 14;
		attr.retry_cnt = retry_cnt;
		attr.rnr_retry = rnr_retry;
		attr.max_rd_atomic = MAX_OPS;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &attr, mask)) {
		perror("conform_peer: RTS");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev_name = NULL, *server = NULL;
	int gid_index = 0, port = 18515, ud = 0, serve = 0, recvs = 0, c, i, nops = 0, fd, ok;
	uint32_t rkey = 0, psn, rpsn, rqpn;
	uint64_t va = 0;
	double wait = 10;
	struct op ops[MAX_OPS];
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah = NULL;
	union ibv_gid gid, rgid;
	char msg[MSG_SIZE], *buf;

	signal(SIGPIPE, SIG_IGN); /* a client gone is a write that fails */
	while ((c = getopt(argc, argv, "d:g:p:t:k:a:s:Sr:c:n:")) != -1) {
		switch (c) {
		case 'd': dev_name = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 't':
			if (!strcmp(optarg, "ud"))
				ud = 1;
			else if (strcmp(optarg, "rc"))
				usage();
			break;
		case 'k': rkey = strtoul(optarg, NULL, 0); break;
		case 'a': va = strtoull(optarg, NULL, 0); break;
		case 's': wait = atof(optarg); break;
		case 'S': serve = 1; break;
		case 'r': recvs = atoi(optarg); break;
		case 'c': retry_cnt = atoi(optarg); break;
		case 'n': rnr_retry = atoi(optarg); break;
		default: usage();
		}
	}
	if (retry_cnt < 0 || retry_cnt > 7 || rnr_retry < 0 || rnr_retry > 7)
		usage();
	if (serve) {
		if (optind != argc || recvs < 0 || recvs > MAX_RECVS)
			usage();
		if (wait == 10)
			wait = 60;
	} else {
		if (argc - optind < 2 || argc - optind - 1 > MAX_OPS)
			usage();
		server = argv[argc - 1];
		nops = argc - optind - 1;
		for (i = 0; i < nops; i++) {
			if (parse_op(argv[optind + i], &ops[i]) || (ud && ops[i].code != IBV_WR_SEND)) {
				fprintf(stderr, "conform_peer: operation %s: want write:LEN[@OFF], read:LEN[@OFF] (RC) or send:LEN[:QKEY]\n",
					argv[optind + i]);
				return 2;
			}
		}
	}

	list = ibv_get_device_list(NULL);
	for (i = 0; list && list[i]; i++)
		if (!dev_name || !strcmp(ibv_get_device_name(list[i]), dev_name)) {
			dev = list[i];
			break;
		}
	if (!dev) {
		fprintf(stderr, "conform_peer: no RDMA device %s\n", dev_name ? dev_name : "at all");
		return 1;
	}
	ctx = ibv_open_device(dev);
	if (!ctx) {
		perror("conform_peer: ibv_open_device");
		return 1;
	}
	/* The region, then the receives' buffers. */
	if (posix_memalign((void **)&buf, 4096, REGION + MAX_RECVS * RECV_SLOT)) {
		fprintf(stderr, "conform_peer: out of memory\n");
		return 1;
	}
	for (i = 0; i < REGION; i++)
		buf[i] = (char)(i & 0xff);
	pd = ibv_alloc_pd(ctx);
	int access = IBV_ACCESS_LOCAL_WRITE;
	if (serve && !ud)
		access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	mr = pd ? ibv_reg_mr(pd, buf, REGION + MAX_RECVS * RECV_SLOT, access) : NULL;
	cq = mr ? ibv_create_cq(ctx, 2 * (MAX_OPS + MAX_RECVS), NULL, NULL, 0) : NULL;
	if (!cq) {
		perror("conform_peer: pd, mr or cq");
		return 1;
	}
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC,
		.cap = { .max_send_wr = MAX_OPS, .max_recv_wr = MAX_RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	qp = ibv_create_qp(pd, &init);
	if (!qp) {
		perror("conform_peer: ibv_create_qp");
		return 1;
	}
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (ud) {
		attr.qkey = OWN_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		attr.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &attr, mask)) {
		perror("conform_peer: INIT");
		return 1;
	}
	for (i = 0; i < recvs; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(buf + REGION + i * RECV_SLOT), .length = RECV_SLOT, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(qp, &wr, &bad)) {
			perror("conform_peer: ibv_post_recv");
			return 1;
		}
	}
	if (ibv_query_gid(ctx, 1, gid_index, &gid)) {
		perror("conform_peer: ibv_query_gid");
		return 1;
	}
	srand48(getpid() * time(NULL));
	psn = lrand48() & 0xffffff;

	fd = serve ? accept_one(port) : connect_to(server, port);
	if (fd < 0)
		return 1;
	dest_msg(msg, qp->qp_num, psn, &gid);
	if (serve) {
		char theirs[MSG_SIZE];
		if (full(fd, theirs, sizeof(theirs), 0) || parse_dest(theirs, &rqpn, &rpsn, &rgid))
			return 1;
	} else if (full(fd, msg, sizeof(msg), 1) || full(fd, msg, sizeof(msg), 0) || parse_dest(msg, &rqpn, &rpsn, &rgid)) {
		fprintf(stderr, "conform_peer: the exchange with %s:%d failed\n", server, port);
		return 1;
	}
	printf("local QPN 0x%06x PSN 0x%06x, remote QPN 0x%06x PSN 0x%06x\n", qp->qp_num, psn, rqpn, rpsn);
	struct ibv_ah_attr ah_attr = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = rgid, .sgid_index = gid_index, .hop_limit = 64 },
	};
	if (ready(qp, ud, gid_index, psn, rqpn, rpsn, &ah_attr))
		return 1;
	if (ud && !(ah = ibv_create_ah(pd, &ah_attr))) {
		perror("conform_peer: ibv_create_ah");
		return 1;
	}

	ok = 1;
	double deadline = now() + wait;
	if (serve) {
		/* As the pingpong server: our message once the QP is ready,
		 * then the client's "done"; then the region. */
		char done[sizeof("done")], region[REGION_MSG_SIZE];
		if (full(fd, msg, sizeof(msg), 1) || full(fd, done, sizeof(done), 0)) {
			fprintf(stderr, "conform_peer: the exchange failed\n");
			return 1;
		}
		memset(region, 0, sizeof(region));
		snprintf(region, sizeof(region), "%08x:%016llx:%08x", mr->rkey, (unsigned long long)(uintptr_t)buf, REGION);
		if (full(fd, region, sizeof(region), 1)) {
			fprintf(stderr, "conform_peer: sending the region failed\n");
			return 1;
		}
		printf("region rkey 0x%08x va 0x%llx length %d, %d receives posted\n", mr->rkey,
		       (unsigned long long)(uintptr_t)buf, REGION, recvs);
		fflush(stdout);
		int received = 0;
		for (;;) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(cq, 1, &wc);
			if (n < 0) {
				fprintf(stderr, "conform_peer: ibv_poll_cq failed\n");
				return 1;
			}
			if (n > 0) {
				if (wc.opcode & IBV_WC_RECV) {
					printf("receive %d: %s, %u bytes\n", received + 1, ibv_wc_status_str(wc.status), wc.byte_len);
					if (wc.status == IBV_WC_SUCCESS) {
						received++;
						if (full(fd, "r", 1, 1))
							break;
					}
				} else {
					printf("completion %d: %s\n", wc.opcode, ibv_wc_status_str(wc.status));
				}
				continue;
			}
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (poll(&p, 1, 1) > 0) {
				char b;
				if (read(fd, &b, 1) <= 0)
					break; /* the client is done */
			}
			if (now() > deadline) {
				printf("no end from the client within %gs\n", wait);
				break;
			}
		}
		printf("%d receives completed\n", received);
	} else {
		if (full(fd, "done", sizeof("done"), 1)) { /* as the pingpong client: its QP is ready */
			fprintf(stderr, "conform_peer: the exchange with %s:%d failed\n", server, port);
			return 1;
		}
		for (i = 0; i < nops; i++) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = ops[i].len, .lkey = mr->lkey };
			struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = ops[i].code },
					   *bad;
			if (ops[i].code != IBV_WR_SEND) {
				wr.wr.rdma.remote_addr = va + ops[i].off;
				wr.wr.rdma.rkey = rkey;
			} else if (ud) {
				wr.wr.ud.ah = ah;
				wr.wr.ud.remote_qpn = rqpn;
				wr.wr.ud.remote_qkey = ops[i].qkey;
			}
			if (ibv_post_send(qp, &wr, &bad)) {
				fprintf(stderr, "conform_peer: post %s: %s\n", ops[i].text, strerror(errno));
				return 1;
			}
		}
		for (i = 0; i < nops;) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(cq, 1, &wc);
			if (n < 0) {
				fprintf(stderr, "conform_peer: ibv_poll_cq failed\n");
				return 1;
			}
			if (n == 0) {
				if (now() > deadline) {
					printf("%d of %d operations did not complete within %gs\n", nops - i, nops, wait);
					ok = 0;
					break;
				}
				usleep(100);
				continue;
			}
			printf("completion %s: %s\n", wc.wr_id < (uint64_t)nops ? ops[wc.wr_id].text : "?",
			       ibv_wc_status_str(wc.status));
			if (wc.status != IBV_WC_SUCCESS)
				ok = 0;
			i++;
		}
	}
	fflush(stdout);
	close(fd);
	if (ah)
		ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	return ok ? 0 : 1;
}
