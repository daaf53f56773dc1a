/*
 * uroce's libibverbs.so.1: the library's own types. Built against the
 * system's <infiniband/verbs.h> (rdma-core 44); the asserts below pin the
 * layouts that compiled programs reach into without calling us (verbs.h's
 * inline functions) and that this library fills in.
 */
#ifndef UROCE_UVERBS_H
#define UROCE_UVERBS_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include "uproto.h"

/*
 * rdma-core's layouts as Debian 12's verbs.h has them (see
 * ../shared/notes/verbs-abi.md). verbs.h's inline helpers read these
 * offsets from compiled programs: a header that moved them would break
 * the programs, not just this library.
 */
_Static_assert(sizeof(struct ibv_context) == 328, "ibv_context");
_Static_assert(offsetof(struct ibv_context, ops) == 8, "ibv_context.ops");
_Static_assert(offsetof(struct ibv_context, cmd_fd) == 264, "ibv_context.cmd_fd");
_Static_assert(offsetof(struct ibv_context, async_fd) == 268, "ibv_context.async_fd");
_Static_assert(offsetof(struct ibv_context, num_comp_vectors) == 272, "ibv_context.num_comp_vectors");
_Static_assert(offsetof(struct ibv_context, abi_compat) == 320, "ibv_context.abi_compat");
_Static_assert(sizeof(struct ibv_context_ops) == 256, "ibv_context_ops");
_Static_assert(offsetof(struct ibv_context_ops, poll_cq) == 88, "ops.poll_cq");
_Static_assert(offsetof(struct ibv_context_ops, req_notify_cq) == 96, "ops.req_notify_cq");
_Static_assert(offsetof(struct ibv_context_ops, post_srq_recv) == 160, "ops.post_srq_recv");
_Static_assert(offsetof(struct ibv_context_ops, post_send) == 200, "ops.post_send");
_Static_assert(offsetof(struct ibv_context_ops, post_recv) == 208, "ops.post_recv");
_Static_assert(sizeof(struct verbs_context) == 648, "verbs_context");
_Static_assert(offsetof(struct verbs_context, sz) == 312, "verbs_context.sz");
_Static_assert(offsetof(struct verbs_context, context) == 320, "verbs_context.context");
_Static_assert(offsetof(struct verbs_context, query_port) == 0, "verbs_context.query_port");
_Static_assert(offsetof(struct verbs_context, query_device_ex) == 216, "verbs_context.query_device_ex");
_Static_assert(offsetof(struct verbs_context, create_qp_ex) == 264, "verbs_context.create_qp_ex");
_Static_assert(sizeof(struct ibv_device) == 664, "ibv_device");
_Static_assert(sizeof(struct ibv_qp) == 160, "ibv_qp");
_Static_assert(offsetof(struct ibv_qp, qp_num) == 52, "ibv_qp.qp_num");
_Static_assert(sizeof(struct ibv_qp_ex) == 352, "ibv_qp_ex");
_Static_assert(offsetof(struct ibv_qp_ex, qp_base) == 0, "ibv_qp_ex.qp_base");
_Static_assert(offsetof(struct ibv_qp_ex, wr_id) == 168, "ibv_qp_ex.wr_id");
_Static_assert(offsetof(struct ibv_qp_ex, wr_flags) == 176, "ibv_qp_ex.wr_flags");
_Static_assert(offsetof(struct ibv_qp_ex, wr_atomic_cmp_swp) == 184, "ibv_qp_ex.wr_atomic_cmp_swp");
_Static_assert(offsetof(struct ibv_qp_ex, wr_send) == 240, "ibv_qp_ex.wr_send");
_Static_assert(offsetof(struct ibv_qp_ex, wr_set_ud_addr) == 272, "ibv_qp_ex.wr_set_ud_addr");
_Static_assert(offsetof(struct ibv_qp_ex, wr_set_sge) == 304, "ibv_qp_ex.wr_set_sge");
_Static_assert(offsetof(struct ibv_qp_ex, wr_start) == 320, "ibv_qp_ex.wr_start");
_Static_assert(offsetof(struct ibv_qp_ex, wr_complete) == 328, "ibv_qp_ex.wr_complete");
_Static_assert(offsetof(struct ibv_qp_ex, wr_abort) == 336, "ibv_qp_ex.wr_abort");
_Static_assert(offsetof(struct ibv_qp_ex, wr_atomic_write) == 344, "ibv_qp_ex.wr_atomic_write");
_Static_assert(sizeof(struct ibv_data_buf) == 16, "ibv_data_buf");
_Static_assert(sizeof(struct ibv_cq) == 128, "ibv_cq");
_Static_assert(sizeof(struct ibv_srq) == 128, "ibv_srq");
_Static_assert(sizeof(struct ibv_mr) == 48, "ibv_mr");
_Static_assert(offsetof(struct ibv_mr, lkey) == 36, "ibv_mr.lkey");
_Static_assert(offsetof(struct ibv_mr, rkey) == 40, "ibv_mr.rkey");
_Static_assert(sizeof(struct ibv_wc) == 48, "ibv_wc");
_Static_assert(sizeof(struct ibv_send_wr) == 128, "ibv_send_wr");
_Static_assert(offsetof(struct ibv_send_wr, imm_data) == 36, "ibv_send_wr.imm_data");
_Static_assert(offsetof(struct ibv_send_wr, wr) == 40, "ibv_send_wr.wr");
_Static_assert(sizeof(struct ibv_recv_wr) == 32, "ibv_recv_wr");
_Static_assert(sizeof(struct ibv_port_attr) == 52, "ibv_port_attr");
_Static_assert(sizeof(struct ibv_device_attr) == 232, "ibv_device_attr");
_Static_assert(sizeof(struct ibv_qp_attr) == 144, "ibv_qp_attr");
_Static_assert(sizeof(struct ibv_grh) == 40, "ibv_grh");
_Static_assert(sizeof(struct ibv_gid_entry) == 32, "ibv_gid_entry");

/*
 * ibv_query_port's exported form fills the struct as it was before
 * port_cap_flags2 (rdma-core's _compat_ibv_port_attr): 48 bytes.
 */
#define UV_COMPAT_PORT_ATTR_LEN offsetof(struct ibv_port_attr, port_cap_flags2)
_Static_assert(UV_COMPAT_PORT_ATTR_LEN == 48, "_compat_ibv_port_attr");

/*
 * The functions that also have an IBVERBS_1.0 compatibility version
 * (private.c) are defined as uv_NAME_1_1 and exported as the default
 * NAME@@IBVERBS_1.1, as rdma-core does; calls to NAME inside the library
 * reach the default. The declaration checks the definition against
 * verbs.h's prototype.
 */
#define UV_LATEST(name)                   \
	__typeof__(name) uv_##name##_1_1; \
	__asm__(".symver uv_" #name "_1_1, " #name "@@IBVERBS_1.1")

/* A device: one daemon's socket. Devices live as long as the process. */
struct uv_device {
	struct ibv_device dev; /* what programs see; first */
	char path[108];        /* the socket (sun_path) */
	__be64 guid;           /* node GUID, network order */
	int index;
	struct uv_device *next;
};

/* One ring of a QP, an SRQ or a CQ in memory shared with the daemon. */
struct uv_ring {
	uint8_t *hdr;   /* the 256-byte header */
	uint8_t *slots; /* slot 0 */
	uint32_t n;     /* slots, a power of two */
	uint32_t size;  /* slot bytes */
	uint32_t prod;  /* producer rings: our next index; CQ: consumer */
};

static inline uint32_t *uv_ring_word(const struct uv_ring *r, size_t off)
{
	return (uint32_t *)(r->hdr + off);
}

static inline uint8_t *uv_ring_slot(const struct uv_ring *r, uint32_t i)
{
	return r->slots + (size_t)(i & (r->n - 1)) * r->size;
}

#define UV_EVQ_LEN 64

struct uv_cq;
struct uv_qp;
struct uv_srq;

/* An open device: a session with the daemon. */
struct uv_context {
	struct verbs_context vctx; /* vctx.context is what programs see */
	struct uv_device *dev;
	int sock;     /* the control socket: cmd_fd and async_fd */
	int doorbell; /* the session's doorbell eventfd */
	struct up_hello_resp hello;
	struct up_device_attr attr;

	pthread_mutex_t call_mu; /* one request at a time; guards seq, buf */
	uint32_t seq;
	uint8_t *buf; /* UP_MAX_MESSAGE bytes */
	atomic_int gone; /* the daemon stopped or the socket broke */

	pthread_mutex_t ev_mu; /* async events received, not yet taken */
	struct ibv_async_event evq[UV_EVQ_LEN];
	int ev_head, ev_n;
	int fatal_queued; /* IBV_EVENT_DEVICE_FATAL was queued */

	/* For UROCE_DEBUG: system calls on the data path. */
	atomic_ulong n_doorbells, n_yields;

	pthread_mutex_t obj_mu; /* the CQs, QPs and SRQs, for async events */
	struct uv_cq *cqs;
	struct uv_qp *qps;
	struct uv_srq *srqs;
};

static inline struct uv_context *uv_ctx(struct ibv_context *c)
{
	return (struct uv_context *)((char *)c - offsetof(struct uv_context, vctx.context));
}

struct uv_channel {
	struct ibv_comp_channel ch;
	uint32_t handle;
	pthread_mutex_t mu; /* guards cqs and their ev_seen */
	struct uv_cq *cqs;
};

/*
 * A QP whose receives complete on a CQ, and the count of completed
 * receives it adds to: the QP's own, or its SRQ's.
 */
struct uv_rq_ref {
	uint32_t qpn;
	uint32_t *done;
};

struct uv_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* ibv_create_cq_ex's: its first fields are ibv_cq's */
	};
	uint32_t handle;
	void *mem;
	size_t mem_len;
	struct uv_ring ring; /* prod is our consumer index */
	pthread_spinlock_t lock;
	pthread_mutex_t resize_mu; /* one ibv_resize_cq at a time */
	struct uv_channel *ch;
	struct uv_cq *ch_next;
	uint32_t ev_seen;     /* the ring's events counter as last reported */
	uint32_t ev_reported; /* events ibv_get_cq_event returned */
	uint32_t async_reported;
	uint32_t overrun_seen;
	uint32_t empty_polls;  /* polls in a row that found nothing ... */
	uint64_t empty_since;  /* ... since this time (ns), 0: not timed yet */
	struct uv_rq_ref *rqs; /* the QPs it is the receive CQ of (under lock) */
	int nrqs;
	struct uv_cq *next; /* the context's list */
	/* Between ibv_start_poll and ibv_end_poll (under lock): */
	const struct up_wc *cur; /* the completion the ibv_wc_read_* read, or NULL */
	uint32_t poll_prod;      /* the producer index last read */
};

/* ibv_cq_ex_to_cq is a cast: the two structs start alike. */
_Static_assert(offsetof(struct ibv_cq_ex, async_events_completed) == offsetof(struct ibv_cq, async_events_completed),
	       "ibv_cq_ex starts as ibv_cq");

struct uv_srq {
	struct ibv_srq srq;
	uint32_t handle;
	void *mem;
	size_t mem_len;
	struct uv_ring ring;
	uint32_t max_wr, max_sge, limit;
	uint32_t done; /* receives completed (polled), atomic */
	pthread_spinlock_t lock;
	uint32_t async_reported;
	pthread_mutex_t resize_mu; /* one IBV_SRQ_MAX_WR at a time */
	struct uv_old_ring *old;   /* rings replaced by a resize, unmapped at destroy */
	struct uv_srq *next;
};

/* A ring a resize replaced: posts under way may still read its posted word. */
struct uv_old_ring {
	void *mem;
	size_t len;
	struct uv_old_ring *next;
};

/*
 * The ibv_wr_* batch of a QP (ibv_wr_post(3)), under the send lock from
 * ibv_wr_start to ibv_wr_complete or ibv_wr_abort: requests go into the
 * send ring's slots from the ring's producer index on, and become the
 * daemon's only when ibv_wr_complete publishes the index.
 */
struct uv_wr_batch {
	uint32_t prod;  /* the next request's ring index */
	uint32_t done;  /* the requests retired or refused, as last read (sq_done) */
	uint8_t *cur;   /* the current request's slot, or NULL */
	int need_ah;    /* the current request is UD's and has no address yet */
	int err;        /* the batch's first error, or 0 */
};

struct uv_qp {
	union { /* what programs see; first */
		struct ibv_qp qp;
		struct ibv_qp_ex qpx; /* starts with qp_base: qp */
	};
	int has_qpx; /* created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: ibv_qp_to_qp_ex gives qpx */
	struct uv_wr_batch wr;
	uint32_t handle;
	void *mem;
	size_t mem_len;
	struct up_create_qp_resp caps;
	struct uv_ring sq, rq; /* rq.n == 0 with an SRQ */
	pthread_spinlock_t slock, rlock;
	uint32_t rq_done; /* receives completed (polled), atomic */
	int sig_all;
	uint32_t async_reported;
	struct uv_qp *next;
};

_Static_assert(offsetof(struct uv_qp, qp) == 0 && offsetof(struct uv_qp, qpx.qp_base) == 0, "uv_qp");

struct uv_ah {
	struct ibv_ah ah;
	struct up_ah_attr attr;
	uint8_t dmac[6];
};

struct uv_moved; /* memory.c */

struct uv_mr {
	struct ibv_mr mr;
	struct uv_moved *moved; /* the memfd the bytes were moved onto, or NULL */
};

/* device.c */
extern int uv_debug_on;
void uv_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int uv_call(struct uv_context *c, uint16_t op, const void *req, size_t reqlen, int fd_in,
	    void *resp, size_t resplen, int *fd_out);
int uv_destroy_handle(struct uv_context *c, uint16_t op, uint32_t handle);
void uv_queue_event(struct uv_context *c, const struct ibv_async_event *ev);
void uv_pump_socket(struct uv_context *c);
void *uv_map_ring(int fd, size_t len);
void uv_ring_doorbell(struct uv_context *c);

/* queues.c */
void uv_fill_ops(struct uv_context *c);
struct uv_cq *uv_cq_by_handle(struct uv_context *c, uint32_t h);
struct uv_qp *uv_qp_by_handle(struct uv_context *c, uint32_t h);
struct uv_srq *uv_srq_by_handle(struct uv_context *c, uint32_t h);
void uv_ah_attr_to(struct up_ah_attr *d, const struct ibv_ah_attr *s);
void uv_cq_recv_done(struct uv_cq *cq, uint32_t qpn);

/* datapath.c */
int uv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
void uv_fill_cq_ex(struct uv_cq *cq);
int uv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int uv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int uv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int uv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
uint64_t uv_send_ops(struct uv_context *c, enum ibv_qp_type t);
void uv_init_qpx(struct uv_qp *q);

/* query.c */
int uv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
/* uv_wait_posted waits (at most a second) until the daemon has posted a receive ring's slots before index i. */
void uv_wait_posted(struct uv_ring *r, uint32_t i);
int uv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sge);
int uv_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len);

/* The ring indices: the daemon's side uses Go's sequentially consistent atomics. */
static inline uint32_t uv_load(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void uv_store(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/*
 * A producer's store that a load of the ring's flags follows: the two
 * must not be reordered (the daemon stores the flags, then loads the
 * producer index), so both are sequentially consistent.
 */
static inline void uv_store_sc(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

static inline uint32_t uv_load_sc(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static inline int uv_gone(struct uv_context *c)
{
	return atomic_load_explicit(&c->gone, memory_order_relaxed);
}

#endif
