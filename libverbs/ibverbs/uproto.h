/*
 * The uroce client protocol, version 1, in C: a mirror of proto/proto.go
 * and proto/ring.go (proto/SPEC.md says what they mean). Every struct is
 * little-endian, fixed-size, its fields in the order of the Go struct,
 * with no padding but the Pad fields; the sizes are those of
 * proto_test.go's TestBodySizes, and the asserts below fail the build
 * when the two drift apart. x86-64 and other little-endian targets only.
 */
#ifndef UROCE_UPROTO_H
#define UROCE_UPROTO_H

#include <stddef.h>
#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the uroce protocol is little-endian; this mirror reads it in place"
#endif

#define UP_VERSION 5
#define UP_MAX_MESSAGE (64 << 10)
#define UP_HEADER_LEN 16

#define UP_PACKED __attribute__((packed))

/* Ops (proto.Op). */
enum {
	UP_OP_HELLO = 1,
	UP_OP_QUERY_DEVICE,
	UP_OP_QUERY_PORT,
	UP_OP_QUERY_GID,
	UP_OP_QUERY_PKEY,
	UP_OP_ALLOC_PD,
	UP_OP_DEALLOC_PD,
	UP_OP_REG_MR,
	UP_OP_DEREG_MR,
	UP_OP_CREATE_CHANNEL,
	UP_OP_DESTROY_CHANNEL,
	UP_OP_CREATE_CQ,
	UP_OP_DESTROY_CQ,
	UP_OP_CREATE_SRQ,
	UP_OP_MODIFY_SRQ,
	UP_OP_QUERY_SRQ,
	UP_OP_DESTROY_SRQ,
	UP_OP_CREATE_QP,
	UP_OP_MODIFY_QP,
	UP_OP_QUERY_QP,
	UP_OP_DESTROY_QP,
	UP_OP_CREATE_AH,
	UP_OP_DESTROY_AH,
	UP_OP_STAT,
	UP_OP_CM_CREATE_CHANNEL,
	UP_OP_CM_DESTROY_CHANNEL,
	UP_OP_CM_CREATE_ID,
	UP_OP_CM_DESTROY_ID,
	UP_OP_CM_MIGRATE_ID,
	UP_OP_CM_BIND,
	UP_OP_CM_RESOLVE_ADDR,
	UP_OP_CM_RESOLVE_ROUTE,
	UP_OP_CM_LISTEN,
	UP_OP_CM_CONNECT,
	UP_OP_CM_ACCEPT,
	UP_OP_CM_REJECT,
	UP_OP_CM_DISCONNECT,
	UP_OP_CM_GET_EVENT,
	UP_OP_CM_INIT_QP_ATTR,
	UP_OP_CM_ESTABLISH,
	UP_OP_ALLOC_MW,
	UP_OP_DEALLOC_MW,
	UP_OP_BIND_MW,
	UP_OP_ATTACH_MCAST,
	UP_OP_DETACH_MCAST,
	UP_OP_RESIZE_CQ,
	UP_OP_RESIZE_SRQ,
	UP_OP_EVENT_DEVICE_GONE = 0x100,
	UP_OP_EVENT_ASYNC = 0x101,
};

struct up_header {
	uint16_t op;
	uint16_t flags;
	uint32_t seq;
	uint32_t len;
	int32_t err;
} UP_PACKED;

struct up_hello {
	uint32_t version;
	uint32_t flags;
} UP_PACKED;

struct up_hello_resp {
	uint32_t version;
	uint32_t session;
	char device[64];
	char netdev[64];
	uint32_t num_ports;
	uint32_t pad;
} UP_PACKED;

struct up_device_attr {
	uint64_t node_guid; /* numeric (the EUI-64 read big-endian) */
	uint64_t sys_image_guid;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int32_t max_qp;
	int32_t max_qp_wr;
	uint32_t device_cap_flags;
	int32_t max_sge;
	int32_t max_cq;
	int32_t max_cqe;
	int32_t max_mr;
	int32_t max_pd;
	int32_t max_qp_rd_atom;
	int32_t max_qp_init_rd_atom;
	int32_t max_srq;
	int32_t max_srq_wr;
	int32_t max_srq_sge;
	int32_t max_ah;
	int32_t max_inline;
	uint16_t max_pkeys;
	uint8_t phys_port_cnt;
	uint8_t atomic_cap;
	uint32_t pad;
	char fw_ver[64];
	int32_t max_mw; /* version 3 */
	uint32_t pad2;
	int32_t max_mcast_grp; /* version 4 */
	int32_t max_mcast_qp_attach;
	int32_t max_total_mcast_qp_attach;
	uint32_t pad3;
} UP_PACKED;

struct up_port_req {
	uint32_t port;
} UP_PACKED;

struct up_port_attr {
	uint32_t state;
	uint32_t max_mtu;
	uint32_t active_mtu;
	int32_t gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
	uint32_t link_mtu;
	uint8_t mac[8];
} UP_PACKED;

struct up_index_req {
	uint32_t port;
	int32_t index;
} UP_PACKED;

struct up_gid_resp {
	uint8_t gid[16];
	uint32_t type; /* ibv_gid_type: 2 RoCEv2 */
	uint32_t pad;
} UP_PACKED;

struct up_pkey_resp {
	uint16_t pkey;
	uint8_t pad[6];
} UP_PACKED;

struct up_handle {
	uint32_t handle;
	uint32_t pad;
} UP_PACKED;

struct up_alloc_mw {
	uint32_t pd;
	uint32_t type; /* ibv_mw_type */
} UP_PACKED;

struct up_alloc_mw_resp {
	uint32_t mw;
	uint32_t rkey;
} UP_PACKED;

/* A type 1 window's bind (ibv_bind_mw). */
struct up_bind_mw {
	uint32_t qp;
	uint32_t mw;
	uint32_t mr; /* 0: none */
	uint32_t flags; /* ibv_send_flags */
	uint64_t wr_id;
	uint64_t addr;
	uint64_t length;
	uint32_t access;
	uint32_t pad;
} UP_PACKED;

/* Attaches a UD QP to a multicast group, or detaches it. */
struct up_mcast_req {
	uint32_t qp;
	uint16_t lid;
	uint16_t pad;
	uint8_t gid[16];
} UP_PACKED;

struct up_bind_mw_resp {
	uint32_t rkey;
	uint32_t pad;
} UP_PACKED;

enum { UP_MEM_SHARED = 1, UP_MEM_PROCESS = 2 };

struct up_reg_mr {
	uint32_t pd;
	uint32_t access;
	uint64_t iova;
	uint64_t length;
	uint32_t kind;
	uint32_t pad;
	uint64_t addr; /* shared: offset in the memfd; process: our address */
} UP_PACKED;

struct up_reg_mr_resp {
	uint32_t mr;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t pad;
} UP_PACKED;

struct up_channel_resp {
	uint32_t channel;
	uint32_t pad;
} UP_PACKED;

struct up_create_cq {
	int32_t cqe;
	uint32_t channel;
	int32_t comp_vector;
	uint32_t pad;
} UP_PACKED;

struct up_resize_cq {
	uint32_t cq;
	int32_t cqe;
} UP_PACKED;

struct up_create_cq_resp {
	uint32_t cq;
	uint32_t cqe;
	uint32_t slots;
	uint32_t ring_bytes;
} UP_PACKED;

struct up_create_srq {
	uint32_t pd;
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t limit;
} UP_PACKED;

struct up_create_srq_resp {
	uint32_t srq;
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t slots;
	uint32_t slot_bytes;
	uint32_t ring_bytes;
} UP_PACKED;

struct up_resize_srq {
	uint32_t srq;
	uint32_t max_wr;
} UP_PACKED;

struct up_resize_srq_resp {
	uint32_t max_wr;
	uint32_t slots;
	uint32_t slot_bytes;
	uint32_t ring_bytes;
	uint32_t copied; /* the producer index the daemon copied up to */
	uint32_t pad;
} UP_PACKED;

struct up_modify_srq {
	uint32_t srq;
	uint32_t mask;
	uint32_t max_wr;
	uint32_t limit;
} UP_PACKED;

struct up_srq_attr {
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t limit;
	uint32_t pad;
} UP_PACKED;

struct up_create_qp {
	uint32_t pd;
	uint32_t type;
	uint32_t send_cq;
	uint32_t recv_cq;
	uint32_t srq;
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline;
	uint32_t sig_all;
	uint32_t pad;
} UP_PACKED;

struct up_create_qp_resp {
	uint32_t qp;
	uint32_t qpn;
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline;
	uint32_t sq_slots;
	uint32_t sq_slot_bytes;
	uint32_t sq_offset;
	uint32_t rq_slots;
	uint32_t rq_slot_bytes;
	uint32_t rq_offset;
	uint32_t ring_bytes;
} UP_PACKED;

struct up_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t is_global;
	uint16_t dlid;
	uint8_t sl;
	uint8_t port;
	uint8_t dmac[6]; /* zero: the daemon resolves it */
	uint8_t pad[2];
} UP_PACKED;

struct up_qp_attr {
	uint32_t state;
	uint32_t cur_state;
	uint32_t path_mtu;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qpn;
	uint32_t access_flags;
	uint16_t pkey_index;
	uint8_t port;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t pad[7];
	struct up_ah_attr ah;
} UP_PACKED;

struct up_modify_qp {
	uint32_t qp;
	uint32_t mask;
	struct up_qp_attr attr;
} UP_PACKED;

struct up_query_qp_resp {
	struct up_qp_attr attr;
	struct up_create_qp init;
} UP_PACKED;

struct up_create_ah {
	uint32_t pd;
	uint32_t pad;
	struct up_ah_attr attr;
} UP_PACKED;

struct up_create_ah_resp {
	uint32_t ah;
	uint16_t pad;
	uint8_t dmac[6];
} UP_PACKED;

struct up_stat_req {
	uint32_t flags;
	uint32_t qpn;
} UP_PACKED;

struct up_async_event {
	uint32_t type; /* ibv_event_type */
	uint32_t handle;
} UP_PACKED;

/* Rings (proto/ring.go). */
#define UP_RING_HEADER_LEN 256
#define UP_OFF_PRODUCER 0
#define UP_OFF_CONSUMER 64
#define UP_OFF_FLAGS 128
#define UP_OFF_OVERRUN 136
#define UP_OFF_EVENTS 140
#define UP_OFF_POSTED 144
#define UP_OFF_RETIRED 148
#define UP_OFF_REFUSED 152
#define UP_OFF_SLOTS 192
#define UP_OFF_SLOT_SIZE 196

#define UP_FLAG_NEED_WAKEUP 1
#define UP_ARM_NEXT 1
#define UP_ARM_SOLICITED 2

#define UP_SEND_SLOT_HEADER 64
#define UP_SGE_LEN 16
#define UP_RECV_SLOT_HEADER 16
#define UP_WC_LEN 64

/* Send slot opcodes and flags carry ibv_wr_opcode and ibv_send_flags values. */
enum {
	UP_WR_WRITE = 0,
	UP_WR_WRITE_WITH_IMM = 1,
	UP_WR_SEND = 2,
	UP_WR_SEND_WITH_IMM = 3,
	UP_WR_READ = 4,
	UP_WR_COMPARE_SWAP = 5,
	UP_WR_FETCH_ADD = 6,
	UP_WR_LOCAL_INV = 7,
	UP_WR_BIND_MW = 8,
	UP_WR_SEND_WITH_INV = 9,
};

struct up_send_slot {
	uint64_t wr_id;
	uint8_t opcode;
	uint8_t flags;
	uint16_t num_sge;
	uint32_t imm; /* imm_data or invalidate_rkey (SEND_WITH_INV, LOCAL_INV), host order */
	uint64_t remote_addr; /* BIND_MW: the window's address */
	uint32_t rkey;        /* BIND_MW: the window's new R_Key */
	uint32_t ah;          /* UD: the AH handle; BIND_MW: the window's handle */
	uint64_t compare_add; /* BIND_MW: the window's length */
	uint64_t swap;
	uint32_t remote_qpn;  /* BIND_MW: the region's handle (0: none) */
	uint32_t remote_qkey; /* BIND_MW: the window's access flags */
	uint32_t inline_len;
	uint32_t reserved;
} UP_PACKED;

struct up_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
} UP_PACKED;

struct up_recv_slot {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t reserved;
} UP_PACKED;

struct up_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm; /* imm_data (host order) or the invalidated rkey */
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
	uint8_t reserved[18];
} UP_PACKED;

/* TestBodySizes, and the sizes of the structs it does not list. */
_Static_assert(sizeof(struct up_header) == UP_HEADER_LEN, "Header");
_Static_assert(sizeof(struct up_hello) == 8, "Hello");
_Static_assert(sizeof(struct up_hello_resp) == 144, "HelloResp");
_Static_assert(sizeof(struct up_handle) == 8, "Handle");
_Static_assert(sizeof(struct up_reg_mr) == 40, "RegMR");
_Static_assert(sizeof(struct up_reg_mr_resp) == 16, "RegMRResp");
_Static_assert(sizeof(struct up_create_cq) == 16, "CreateCQ");
_Static_assert(sizeof(struct up_create_cq_resp) == 16, "CreateCQResp");
_Static_assert(sizeof(struct up_resize_cq) == 8, "ResizeCQ");
_Static_assert(sizeof(struct up_create_srq) == 16, "CreateSRQ");
_Static_assert(sizeof(struct up_create_srq_resp) == 24, "CreateSRQResp");
_Static_assert(sizeof(struct up_resize_srq) == 8, "ResizeSRQ");
_Static_assert(sizeof(struct up_resize_srq_resp) == 24, "ResizeSRQResp");
_Static_assert(sizeof(struct up_create_qp) == 48, "CreateQP");
_Static_assert(sizeof(struct up_create_qp_resp) == 56, "CreateQPResp");
_Static_assert(sizeof(struct up_ah_attr) == 36, "AHAttr");
_Static_assert(sizeof(struct up_qp_attr) == 84, "QPAttr");
_Static_assert(sizeof(struct up_modify_qp) == 92, "ModifyQP");
_Static_assert(sizeof(struct up_query_qp_resp) == 132, "QueryQPResp");
_Static_assert(sizeof(struct up_create_ah) == 44, "CreateAH");
_Static_assert(sizeof(struct up_create_ah_resp) == 12, "CreateAHResp");
_Static_assert(sizeof(struct up_index_req) == 8, "IndexReq");
_Static_assert(sizeof(struct up_gid_resp) == 24, "GIDResp");
_Static_assert(sizeof(struct up_device_attr) == 200, "DeviceAttr");
_Static_assert(sizeof(struct up_mcast_req) == 24, "McastReq");
_Static_assert(sizeof(struct up_alloc_mw) == 8, "AllocMW");
_Static_assert(sizeof(struct up_alloc_mw_resp) == 8, "AllocMWResp");
_Static_assert(sizeof(struct up_bind_mw) == 48, "BindMW");
_Static_assert(sizeof(struct up_bind_mw_resp) == 8, "BindMWResp");
_Static_assert(sizeof(struct up_port_attr) == 52, "PortAttr");
_Static_assert(sizeof(struct up_pkey_resp) == 8, "PKeyResp");
_Static_assert(sizeof(struct up_channel_resp) == 8, "ChannelResp");
_Static_assert(sizeof(struct up_modify_srq) == 16, "ModifySRQ");
_Static_assert(sizeof(struct up_srq_attr) == 16, "SRQAttr");
_Static_assert(sizeof(struct up_stat_req) == 8, "StatReq");
_Static_assert(sizeof(struct up_async_event) == 8, "AsyncEvent");

/* The offsets this library relies on (proto.go's order, ring.go's layout). */
_Static_assert(offsetof(struct up_header, err) == 12, "Header.Err");
_Static_assert(offsetof(struct up_hello_resp, device) == 8, "HelloResp.Device");
_Static_assert(offsetof(struct up_hello_resp, num_ports) == 136, "HelloResp.NumPorts");
_Static_assert(offsetof(struct up_device_attr, vendor_id) == 32, "DeviceAttr.VendorID");
_Static_assert(offsetof(struct up_device_attr, max_inline) == 100, "DeviceAttr.MaxInline");
_Static_assert(offsetof(struct up_device_attr, max_pkeys) == 104, "DeviceAttr.MaxPKeys");
_Static_assert(offsetof(struct up_device_attr, fw_ver) == 112, "DeviceAttr.FWVer");
_Static_assert(offsetof(struct up_device_attr, max_mw) == 176, "DeviceAttr.MaxMW");
_Static_assert(offsetof(struct up_device_attr, max_mcast_grp) == 184, "DeviceAttr.MaxMcastGrp");
_Static_assert(offsetof(struct up_mcast_req, gid) == 8, "McastReq.GID");
_Static_assert(offsetof(struct up_port_attr, pkey_tbl_len) == 24, "PortAttr.PKeyTblLen");
_Static_assert(offsetof(struct up_port_attr, link_layer) == 38, "PortAttr.LinkLayer");
_Static_assert(offsetof(struct up_port_attr, link_mtu) == 40, "PortAttr.LinkMTU");
_Static_assert(offsetof(struct up_reg_mr, iova) == 8, "RegMR.IOVA");
_Static_assert(offsetof(struct up_reg_mr, kind) == 24, "RegMR.Kind");
_Static_assert(offsetof(struct up_reg_mr, addr) == 32, "RegMR.Addr");
_Static_assert(offsetof(struct up_create_qp_resp, sq_slots) == 28, "CreateQPResp.SQSlots");
_Static_assert(offsetof(struct up_create_qp_resp, rq_offset) == 48, "CreateQPResp.RQOffset");
_Static_assert(offsetof(struct up_ah_attr, flow_label) == 16, "AHAttr.FlowLabel");
_Static_assert(offsetof(struct up_ah_attr, dlid) == 24, "AHAttr.DLID");
_Static_assert(offsetof(struct up_ah_attr, dmac) == 28, "AHAttr.DMAC");
_Static_assert(offsetof(struct up_qp_attr, pkey_index) == 32, "QPAttr.PKeyIndex");
_Static_assert(offsetof(struct up_qp_attr, min_rnr_timer) == 40, "QPAttr.MinRNRTimer");
_Static_assert(offsetof(struct up_qp_attr, ah) == 48, "QPAttr.AH");
_Static_assert(offsetof(struct up_modify_qp, attr) == 8, "ModifyQP.Attr");
_Static_assert(offsetof(struct up_query_qp_resp, init) == 84, "QueryQPResp.Init");
_Static_assert(offsetof(struct up_create_ah, attr) == 8, "CreateAH.Attr");
_Static_assert(offsetof(struct up_create_ah_resp, dmac) == 6, "CreateAHResp.DMAC");

/* Slots: the offsets SPEC.md and ring.go draw. */
_Static_assert(sizeof(struct up_send_slot) == UP_SEND_SLOT_HEADER, "SendSlot");
_Static_assert(offsetof(struct up_send_slot, opcode) == 8, "SendSlot.Opcode");
_Static_assert(offsetof(struct up_send_slot, num_sge) == 10, "SendSlot.NumSGE");
_Static_assert(offsetof(struct up_send_slot, imm) == 12, "SendSlot.Imm");
_Static_assert(offsetof(struct up_send_slot, remote_addr) == 16, "SendSlot.RemoteAddr");
_Static_assert(offsetof(struct up_send_slot, rkey) == 24, "SendSlot.RKey");
_Static_assert(offsetof(struct up_send_slot, ah) == 28, "SendSlot.AH");
_Static_assert(offsetof(struct up_send_slot, compare_add) == 32, "SendSlot.CompareAdd");
_Static_assert(offsetof(struct up_send_slot, swap) == 40, "SendSlot.Swap");
_Static_assert(offsetof(struct up_send_slot, remote_qpn) == 48, "SendSlot.RemoteQPN");
_Static_assert(offsetof(struct up_send_slot, inline_len) == 56, "SendSlot.InlineLen");
_Static_assert(sizeof(struct up_sge) == UP_SGE_LEN, "SGE");
_Static_assert(sizeof(struct up_recv_slot) == UP_RECV_SLOT_HEADER, "RecvSlot");
_Static_assert(sizeof(struct up_wc) == UP_WC_LEN, "WC");
_Static_assert(offsetof(struct up_wc, status) == 8, "WC.Status");
_Static_assert(offsetof(struct up_wc, byte_len) == 20, "WC.ByteLen");
_Static_assert(offsetof(struct up_wc, imm) == 24, "WC.Imm");
_Static_assert(offsetof(struct up_wc, wc_flags) == 36, "WC.Flags");
_Static_assert(offsetof(struct up_wc, pkey_index) == 40, "WC.PKeyIndex");
_Static_assert(offsetof(struct up_wc, sl) == 44, "WC.SL");

/* RDMA CM (SPEC.md "Connection management"). */
#define UP_AF_INET 2
#define UP_AF_INET6 10
#define UP_CM_MAX_EVENTS 1024

struct up_cm_addr {
	uint16_t family; /* UP_AF_INET (addr IPv4-mapped) or UP_AF_INET6; 0: none */
	uint16_t port;   /* host order */
	uint32_t scope;
	uint8_t addr[16];
} UP_PACKED;

struct up_cm_create_id {
	uint32_t channel;
	uint32_t ps; /* enum rdma_port_space */
	uint32_t qp_type;
	uint32_t pad;
} UP_PACKED;

struct up_cm_migrate_id {
	uint32_t id;
	uint32_t channel;
} UP_PACKED;

struct up_cm_bind {
	uint32_t id;
	uint32_t pad;
	struct up_cm_addr addr;
} UP_PACKED;

struct up_cm_resolve {
	uint32_t id;
	uint32_t timeout_ms;
	struct up_cm_addr src, dst;
} UP_PACKED;

struct up_cm_route {
	struct up_cm_addr src, dst;
	uint8_t sgid[16];
	uint8_t dgid[16];
	uint32_t sgid_index;
	uint32_t path_mtu; /* enum ibv_mtu */
	uint8_t dmac[6];
	uint8_t hop_limit;
	uint8_t bound;
} UP_PACKED;

struct up_cm_listen {
	uint32_t id;
	int32_t backlog;
} UP_PACKED;

struct up_cm_conn_param {
	uint8_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flags;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t pad;
	uint32_t qpn;
	uint32_t qkey;
	uint32_t pad2;
	uint8_t private_data[196];
} UP_PACKED;

struct up_cm_connect {
	uint32_t id;
	uint32_t qp; /* a QP handle; 0: param.qpn names it */
	struct up_cm_conn_param param;
} UP_PACKED;

struct up_cm_reject {
	uint32_t id;
	uint32_t private_data_len;
	uint8_t private_data[148];
} UP_PACKED;

struct up_cm_event {
	uint32_t type; /* enum rdma_cm_event_type */
	int32_t status;
	uint32_t id;
	uint32_t listen_id;
	struct up_cm_conn_param param;
	struct up_cm_route route;
	struct up_ah_attr ah;
} UP_PACKED;

struct up_cm_init_qp_attr {
	uint32_t id;
	uint32_t state; /* enum ibv_qp_state */
} UP_PACKED;

struct up_cm_qp_attr {
	uint32_t mask; /* enum ibv_qp_attr_mask */
	uint32_t pad;
	struct up_qp_attr attr;
} UP_PACKED;

_Static_assert(sizeof(struct up_cm_init_qp_attr) == 8, "CMInitQPAttr");
_Static_assert(sizeof(struct up_cm_qp_attr) == 92, "CMQPAttr");
_Static_assert(sizeof(struct up_cm_addr) == 24, "CMAddr");
_Static_assert(sizeof(struct up_cm_create_id) == 16, "CMCreateID");
_Static_assert(sizeof(struct up_cm_migrate_id) == 8, "CMMigrateID");
_Static_assert(sizeof(struct up_cm_bind) == 32, "CMBind");
_Static_assert(sizeof(struct up_cm_resolve) == 56, "CMResolve");
_Static_assert(sizeof(struct up_cm_route) == 96, "CMRoute");
_Static_assert(sizeof(struct up_cm_listen) == 8, "CMListen");
_Static_assert(sizeof(struct up_cm_conn_param) == 216, "CMConnParam");
_Static_assert(sizeof(struct up_cm_connect) == 224, "CMConnect");
_Static_assert(sizeof(struct up_cm_reject) == 156, "CMReject");
_Static_assert(sizeof(struct up_cm_event) == 364, "CMEvent");
_Static_assert(offsetof(struct up_cm_event, route) == 232, "CMEvent.Route");
_Static_assert(offsetof(struct up_cm_event, ah) == 328, "CMEvent.AH");

/* The bytes of a ring of n slots of size bytes (proto.RingBytes). */
static inline size_t up_ring_bytes(uint32_t n, uint32_t size)
{
	return UP_RING_HEADER_LEN + (size_t)n * size;
}

#endif
