/*
 * Device, port, GID and P_Key queries: the daemon's answers in
 * rdma-core's structs, with rdma-core's return conventions (some return
 * an errno value, some -1).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "uverbs.h"

#undef ibv_query_port

static void device_attr_from(struct ibv_device_attr *a, const struct up_device_attr *d)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%.*s", (int)sizeof(d->fw_ver), d->fw_ver);
	a->node_guid = htobe64(d->node_guid);
	a->sys_image_guid = htobe64(d->sys_image_guid);
	a->max_mr_size = d->max_mr_size;
	a->page_size_cap = d->page_size_cap;
	a->vendor_id = d->vendor_id;
	a->vendor_part_id = d->vendor_part_id;
	a->hw_ver = d->hw_ver;
	a->max_qp = d->max_qp;
	a->max_qp_wr = d->max_qp_wr;
	a->device_cap_flags = d->device_cap_flags;
	a->max_sge = d->max_sge;
	a->max_sge_rd = d->max_sge;
	a->max_cq = d->max_cq;
	a->max_cqe = d->max_cqe;
	a->max_mr = d->max_mr;
	a->max_mw = d->max_mw;
	a->max_pd = d->max_pd;
	a->max_qp_rd_atom = d->max_qp_rd_atom;
	a->max_res_rd_atom = d->max_qp_rd_atom * d->max_qp;
	a->max_qp_init_rd_atom = d->max_qp_init_rd_atom;
	a->atomic_cap = d->atomic_cap;
	a->max_ah = d->max_ah;
	a->max_srq = d->max_srq;
	a->max_srq_wr = d->max_srq_wr;
	a->max_srq_sge = d->max_srq_sge;
	a->max_pkeys = d->max_pkeys;
	a->max_mcast_grp = d->max_mcast_grp;
	a->max_mcast_qp_attach = d->max_mcast_qp_attach;
	a->max_total_mcast_qp_attach = d->max_total_mcast_qp_attach;
	a->local_ca_ack_delay = 15; /* as rdma_rxe reports it */
	a->phys_port_cnt = d->phys_port_cnt;
}

static int query_device(struct uv_context *c, struct ibv_device_attr *attr)
{
	struct up_device_attr d;
	int err = uv_call(c, UP_OP_QUERY_DEVICE, NULL, 0, -1, &d, sizeof(d), NULL);
	if (err)
		return err;
	c->attr = d;
	device_attr_from(attr, &d);
	return 0;
}

UV_LATEST(ibv_query_device);
int uv_ibv_query_device_1_1(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return query_device(uv_ctx(ctx), attr);
}

int uv_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len)
{
	if (in && in->comp_mask)
		return EINVAL;
	if (len < sizeof(attr->orig_attr))
		return EINVAL;
	struct ibv_device_attr_ex x = {0};
	int err = query_device(uv_ctx(ctx), &x.orig_attr);
	if (err)
		return err;
	x.phys_port_cnt_ex = x.orig_attr.phys_port_cnt;
	x.device_cap_flags_ex = x.orig_attr.device_cap_flags;
	/*
	 * On-demand paging: the daemon reaches a client's pages only when a
	 * packet needs them, as it does for any process memory, so every
	 * region may be IBV_ACCESS_ON_DEMAND, the implicit one too.
	 */
	x.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	x.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						     IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
						     IBV_ODP_SUPPORT_SRQ_RECV;
	x.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						     IBV_ODP_SUPPORT_SRQ_RECV;
	x.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	memcpy(attr, &x, len < sizeof(x) ? len : sizeof(x));
	if (len > sizeof(x))
		memset((char *)attr + sizeof(x), 0, len - sizeof(x));
	return 0;
}

/* The verbs_context entry: attr holds len bytes (older programs' structs are shorter). */
int uv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct up_port_req req = {.port = port};
	struct up_port_attr p;
	int err = uv_call(uv_ctx(ctx), UP_OP_QUERY_PORT, &req, sizeof(req), -1, &p, sizeof(p), NULL);
	if (err)
		return err;
	struct ibv_port_attr a = {
		.state = p.state,
		.max_mtu = p.max_mtu,
		.active_mtu = p.active_mtu,
		.gid_tbl_len = p.gid_tbl_len,
		.port_cap_flags = p.port_cap_flags,
		.max_msg_sz = p.max_msg_sz,
		.pkey_tbl_len = p.pkey_tbl_len,
		.lid = p.lid,
		.sm_lid = p.sm_lid,
		.lmc = p.lmc,
		.max_vl_num = p.max_vl_num,
		.sm_sl = p.sm_sl,
		.subnet_timeout = p.subnet_timeout,
		.init_type_reply = p.init_type_reply,
		.active_width = p.active_width,
		.active_speed = p.active_speed,
		.phys_state = p.phys_state,
		.link_layer = p.link_layer ? p.link_layer : IBV_LINK_LAYER_ETHERNET,
		.flags = p.flags,
	};
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	if (len > sizeof(a))
		memset((char *)attr + sizeof(a), 0, len - sizeof(a));
	return 0;
}

/* The exported symbol (verbs.h's macro calls it only without a verbs_context). */
UV_LATEST(ibv_query_port);
int uv_ibv_query_port_1_1(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return uv_query_port(ctx, port, (struct ibv_port_attr *)attr, UV_COMPAT_PORT_ATTR_LEN);
}

static int query_gid(struct ibv_context *ctx, uint32_t port, uint32_t index, struct up_gid_resp *g)
{
	struct up_index_req req = {.port = port, .index = (int32_t)index};
	return uv_call(uv_ctx(ctx), UP_OP_QUERY_GID, &req, sizeof(req), -1, g, sizeof(*g), NULL);
}

static int zero_gid(const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return 0;
	return 1;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
		      uint32_t flags, size_t entry_size)
{
	if (flags)
		return EOPNOTSUPP;
	if (entry_size < sizeof(*entry))
		return EINVAL;
	struct up_gid_resp g;
	int err = query_gid(ctx, port, index, &g);
	if (err)
		return err;
	if (zero_gid(g.gid))
		return ENODATA;
	memset(entry, 0, entry_size);
	memcpy(entry->gid.raw, g.gid, 16);
	entry->gid_index = index;
	entry->port_num = port;
	entry->gid_type = g.type;
	entry->ndev_ifindex = 0; /* the interface is the daemon's, in its namespace */
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max_entries,
			     uint32_t flags, size_t entry_size)
{
	if (flags)
		return -EOPNOTSUPP;
	if (entry_size < sizeof(*entries))
		return -EINVAL;
	struct ibv_port_attr pa;
	int err = uv_query_port(ctx, 1, &pa, sizeof(pa));
	if (err)
		return -err;
	size_t n = 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		err = _ibv_query_gid_ex(ctx, 1, i, &e, 0, sizeof(e));
		if (err == ENODATA)
			continue;
		if (err)
			return -err;
		if (n == max_entries)
			return -EINVAL;
		memcpy((char *)entries + n * entry_size, &e, sizeof(e));
		if (entry_size > sizeof(e))
			memset((char *)entries + n * entry_size + sizeof(e), 0, entry_size - sizeof(e));
		n++;
	}
	return n;
}

UV_LATEST(ibv_query_gid);
int uv_ibv_query_gid_1_1(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct up_gid_resp g;
	if (index < 0 || query_gid(ctx, port, index, &g)) {
		return -1;
	}
	memcpy(gid->raw, g.gid, 16);
	return 0;
}

/* rdma-core's private ibv_query_gid_type (enum ibv_gid_type_sysfs: 0 IB/RoCEv1, 1 RoCEv2). */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	struct up_gid_resp g;
	int err = query_gid(ctx, port, index, &g);
	if (err)
		return -1;
	*type = g.type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
	return 0;
}

UV_LATEST(ibv_query_pkey);
int uv_ibv_query_pkey_1_1(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	struct up_index_req req = {.port = port, .index = index};
	struct up_pkey_resp p;
	if (uv_call(uv_ctx(ctx), UP_OP_QUERY_PKEY, &req, sizeof(req), -1, &p, sizeof(p), NULL))
		return -1;
	*pkey = htobe16(p.pkey);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	for (int i = 0;; i++) {
		__be16 p;
		int ret = ibv_query_pkey(ctx, port, i, &p);
		if (ret < 0)
			return ret;
		if (p == pkey)
			return i;
	}
}
