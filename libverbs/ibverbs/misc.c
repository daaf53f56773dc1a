/*
 * The rest of libibverbs' public API: strings, rates, address handles
 * from completions, fork, sysfs helpers, conversions of kernel structs,
 * and what uroce does not do (EOPNOTSUPP), all with rdma-core 44's
 * semantics.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include "uverbs.h"

/* Strings (rdma-core's enum_strs.c texts: programs print and compare them). */

const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	if (t < IBV_NODE_CA || t > IBV_NODE_UNSPECIFIED)
		return "unknown";
	return s[t];
}

const char *ibv_port_state_str(enum ibv_port_state st)
{
	static const char *const s[] = {
		[IBV_PORT_NOP] = "no state change (NOP)",
		[IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",
		[IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",
		[IBV_PORT_ACTIVE_DEFER] = "active defer",
	};
	if (st < IBV_PORT_NOP || st > IBV_PORT_ACTIVE_DEFER)
		return "unknown";
	return s[st];
}

const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if (e < IBV_EVENT_CQ_ERR || e > IBV_EVENT_WQ_FATAL)
		return "unknown";
	return s[e];
}

const char *ibv_wc_status_str(enum ibv_wc_status st)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if (st < IBV_WC_SUCCESS || st > IBV_WC_TM_RNDV_INCOMPLETE)
		return "unknown";
	return s[st];
}

/* Rates. */

static const struct {
	enum ibv_rate rate;
	int mult, mbps;
} rates[] = {
	{IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
	{IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
	{IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
	{IBV_RATE_14_GBPS, 0, 14062},     {IBV_RATE_56_GBPS, 0, 56250},     {IBV_RATE_112_GBPS, 0, 112500},
	{IBV_RATE_168_GBPS, 0, 168750},   {IBV_RATE_25_GBPS, 0, 25781},     {IBV_RATE_100_GBPS, 0, 103125},
	{IBV_RATE_200_GBPS, 0, 206250},   {IBV_RATE_300_GBPS, 0, 309375},   {IBV_RATE_28_GBPS, 11, 28125},
	{IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
	{IBV_RATE_800_GBPS, 320, 850000}, {IBV_RATE_1200_GBPS, 480, 1275000},
};
#define NRATES (sizeof(rates) / sizeof(rates[0]))

int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate && rates[i].mult)
			return rates[i].mult;
	return -1;
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mult && rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* Address handles from a received datagram (rdma-core's verbs.c logic, RoCEv2). */

/* rdma-core's private ibv_query_gid_type (query.c): 1 is RoCEv2. */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type);

static int find_gid_index(struct ibv_context *ctx, uint8_t port, const union ibv_gid *gid, int want_type)
{
	for (int i = 0;; i++) {
		union ibv_gid g;
		int type;
		if (ibv_query_gid(ctx, port, i, &g) || ibv_query_gid_type(ctx, port, i, &type))
			return -1;
		if (memcmp(&g, gid, sizeof(g)) == 0 && type == want_type)
			return i;
	}
}

static void v4_mapped(uint32_t be_addr, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	memcpy(g->raw + 12, &be_addr, 4);
}

/* 4 or 6: what the 40-byte GRH slot holds (the IPv4 header sits at its offset 20). */
static int grh_version(const struct ibv_grh *grh)
{
	int v6 = (be32toh(grh->version_tclass_flow) >> 28) & 0xf;
	const struct iphdr *ip = (const struct iphdr *)((const uint8_t *)grh + 20);
	if (v6 != 6) {
		if (ip->version == 4)
			return 4;
		errno = EPROTONOSUPPORT;
		return -1;
	}
	if (ip->ihl != 5)
		return 6;
	struct iphdr h;
	memcpy(&h, ip, sizeof(h));
	h.check = 0;
	const uint16_t *w = (const uint16_t *)&h;
	uint32_t sum = 0;
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	return ip->check == (uint16_t)~sum ? 4 : 6;
}

int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->src_path_bits = wc->dlid_path_bits;
	ah->port_num = port;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah->is_global = 1;
	int v = grh_version(grh);
	if (v == 4) {
		const struct iphdr *ip = (const struct iphdr *)((const uint8_t *)grh + 20);
		if ((be32toh(ip->daddr) & 0xf0000000) == 0xe0000000) { /* multicast */
			errno = EINVAL;
			return -1;
		}
		union ibv_gid sgid;
		v4_mapped(ip->daddr, &sgid);
		int i = find_gid_index(ctx, port, &sgid, 1);
		if (i < 0)
			return -1;
		v4_mapped(ip->saddr, &ah->grh.dgid);
		ah->grh.sgid_index = i;
		ah->grh.hop_limit = ip->ttl;
		ah->grh.traffic_class = ip->tos;
		return 0;
	}
	if (v == 6) {
		if (grh->dgid.raw[0] == 0xff) {
			errno = EINVAL;
			return -1;
		}
		int type;
		if (grh->next_hdr == IPPROTO_UDP) {
			type = 1;
		} else if (grh->next_hdr == 0x1b) {
			type = 0;
		} else {
			errno = EPROTONOSUPPORT;
			return -1;
		}
		ah->grh.dgid = grh->sgid;
		int i = find_gid_index(ctx, port, &grh->dgid, type);
		if (i < 0)
			return -1;
		ah->grh.sgid_index = i;
		ah->grh.hop_limit = grh->hop_limit;
		ah->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) & 0xff;
		return 0;
	}
	return -1;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/*
 * The destination MAC of an address vector, as the daemon resolves it
 * for an address handle (rdma-core asks the kernel's neighbour table,
 * which is the daemon's, in its namespace). Negative errno on failure.
 */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
				uint16_t *vid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return -errno;
	struct ibv_ah *ah = ibv_create_ah(pd, attr);
	int ret = ah ? 0 : -(errno ? errno : EHOSTUNREACH);
	if (ah) {
		memcpy(eth_mac, ((struct uv_ah *)ah)->dmac, 6);
		if (vid)
			*vid = 0xffff; /* no VLAN */
		ibv_destroy_ah(ah);
	}
	ibv_dealloc_pd(pd);
	return ret;
}

/* Fork: moved buffers are MAP_SHARED (see memory.c); nothing to prepare. */

int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}

/* sysfs helpers (rdma-core's sysfs.c). */

const char *ibv_get_sysfs_path(void)
{
	static char path[256];
	if (!path[0]) {
		const char *e = getenv("SYSFS_PATH");
		snprintf(path, sizeof(path), "%s", e && *e ? e : "/sys");
		for (size_t l = strlen(path); l > 1 && path[l - 1] == '/'; l--)
			path[l - 1] = 0;
	}
	return path;
}

static int read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n < 0)
		return -1;
	if ((size_t)n == size)
		n--;
	buf[n] = 0;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	return n;
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	if (!size || asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	int n = read_file(path, buf, size);
	free(path);
	return n;
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size, const char *sysfs_dev, const char *fnfmt, ...)
{
	char *file, *path;
	va_list ap;
	va_start(ap, fnfmt);
	int r = vasprintf(&file, fnfmt, ap);
	va_end(ap);
	if (!size || r < 0)
		return -1;
	r = asprintf(&path, "%s/%s", sysfs_dev ? sysfs_dev : "", file);
	free(file);
	if (r < 0)
		return -1;
	int n = read_file(path, buf, size);
	free(path);
	return n;
}

/* Kernel struct conversions (used by librdmacm). */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

#define PATH_REC_FIELDS(X)                                                                              \
	X(dlid) X(slid) X(raw_traffic) X(flow_label) X(hop_limit) X(traffic_class) X(reversible) X(numb_path) \
	X(pkey) X(sl) X(mtu_selector) X(mtu) X(rate_selector) X(rate) X(packet_life_time) X(preference)     \
	X(packet_life_time_selector)
#define COPY_FIELD(f) dst->f = src->f;

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
	PATH_REC_FIELDS(COPY_FIELD)
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(src->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(src->sgid));
	PATH_REC_FIELDS(COPY_FIELD)
}

/*
 * Multicast: the daemon attaches the UD QP to the group. The LID is
 * ignored, as on RoCE; errno values as rdma_rxe returns them.
 */
static int mcast(struct ibv_qp *qp, uint16_t op, const union ibv_gid *gid, uint16_t lid)
{
	struct up_mcast_req req = {.qp = ((struct uv_qp *)qp)->handle, .lid = lid};
	if (!gid)
		return EINVAL;
	memcpy(req.gid, gid->raw, sizeof(req.gid));
	return uv_call(uv_ctx(qp->context), op, &req, sizeof(req), -1, NULL, 0, NULL);
}

UV_LATEST(ibv_attach_mcast);
int uv_ibv_attach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, UP_OP_ATTACH_MCAST, gid, lid);
}

UV_LATEST(ibv_detach_mcast);
int uv_ibv_detach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, UP_OP_DETACH_MCAST, gid, lid);
}

/* What uroce does not do. */

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0; /* no guarantee claimed */
}

struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t pd_handle)
{
	(void)ctx, (void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd, (void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t dm_handle)
{
	(void)ctx, (void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}
