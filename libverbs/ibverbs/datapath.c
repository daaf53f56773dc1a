/*
 * The data path: work requests into the send, receive and SRQ rings,
 * completions out of the CQ rings, with no system call while the
 * daemon polls (SPEC.md, Rings and Doorbell). These are the functions
 * verbs.h's inline ibv_post_send, ibv_post_recv, ibv_post_srq_recv,
 * ibv_poll_cq and ibv_req_notify_cq call through ibv_context.ops.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "uverbs.h"

static uint64_t now_ns(void);

/*
 * How long a CQ may be polled in vain before each empty poll gives the
 * CPU up (sched_yield): the daemon that is to produce the completions
 * runs on the same CPUs as the program, and a program spinning on its CQ
 * would otherwise starve it (on two CPUs, ibv_rc_pingpong's round trip
 * went from 0.2 to 7 ms). Every 16th empty poll yields; a CQ that
 * completions keep arriving on never does. By default only machines of
 * up to 4 CPUs yield, from the first empty polls on (waiting 20 µs
 * first made ib_write_lat's typical latency 33 µs instead of 17 on two
 * CPUs: the daemon got the CPU that late); UROCE_POLL_YIELD=<microseconds>
 * sets how long polls are empty before they yield, "off" disables.
 */
static int64_t yield_after_ns(void)
{
	static int64_t v = -2;
	if (v == -2) {
		const char *e = getenv("UROCE_POLL_YIELD");
		if (e && strcmp(e, "off") == 0)
			v = -1;
		else if (e && *e)
			v = strtoll(e, NULL, 10) * 1000;
		else /* few CPUs: the program competes with the daemon's threads */
			v = sysconf(_SC_NPROCESSORS_ONLN) <= 4 ? 0 : -1;
	}
	return v;
}

/* Whether an empty poll should yield (the caller holds the CQ's lock). */
static int empty_poll(struct uv_cq *cq)
{
	if ((++cq->empty_polls & 15) != 0)
		return 0;
	int64_t after = yield_after_ns();
	if (after < 0)
		return 0;
	uint64_t t = now_ns();
	if (cq->empty_since == 0)
		cq->empty_since = t;
	return t - cq->empty_since >= (uint64_t)after;
}

/*
 * What an empty poll does (the caller holds the CQ's lock): it notes an
 * overrun not yet reported and says whether to yield (n: the entries
 * asked for).
 */
static void cq_empty(struct uv_cq *cq, int n, int *overrun, int *yield)
{
	uint32_t ov = uv_load(uv_ring_word(&cq->ring, UP_OFF_OVERRUN));
	if (ov != cq->overrun_seen) {
		cq->overrun_seen = ov;
		*overrun = 1;
	}
	*yield = n > 0 && empty_poll(cq);
}

/* ... and, with the lock released, reports the overrun and yields. */
static void cq_after_empty(struct uv_cq *cq, int overrun, int yield)
{
	struct ibv_cq *ibcq = &cq->cq;
	if (yield) {
		atomic_fetch_add_explicit(&uv_ctx(ibcq->context)->n_yields, 1, memory_order_relaxed);
		sched_yield();
	}
	if (overrun) {
		/* Completions were lost to a full ring: the CQ is in error, as an overrun RNIC CQ is. */
		uv_debug("cq %u: %u completions lost to a full ring", cq->handle, cq->overrun_seen);
		struct ibv_async_event ev = {.event_type = IBV_EVENT_CQ_ERR};
		ev.element.cq = ibcq;
		__atomic_add_fetch(&cq->async_reported, 1, __ATOMIC_RELAXED);
		uv_queue_event(uv_ctx(ibcq->context), &ev);
	}
}

/* The consumer index moved to cons: the daemon may reuse the slots. */
static void cq_consumed(struct uv_cq *cq, uint32_t cons)
{
	cq->ring.prod = cons;
	uv_store(uv_ring_word(&cq->ring, UP_OFF_CONSUMER), cons);
	cq->empty_polls = 0;
	cq->empty_since = 0;
}

int uv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	struct uv_ring *r = &cq->ring;
	int k = 0;
	int overrun = 0, yield = 0;
	pthread_spin_lock(&cq->lock);
	uint32_t cons = r->prod;
	uint32_t prod = uv_load(uv_ring_word(r, UP_OFF_PRODUCER));
	while (k < n && cons != prod) {
		const struct up_wc *s = (const struct up_wc *)uv_ring_slot(r, cons);
		struct ibv_wc *w = &wc[k];
		w->wr_id = s->wr_id;
		w->status = s->status;
		w->opcode = s->opcode;
		w->vendor_err = s->vendor_err;
		w->byte_len = s->byte_len;
		if (s->wc_flags & IBV_WC_WITH_INV)
			w->invalidated_rkey = s->imm;
		else
			w->imm_data = htobe32(s->imm); /* the ring holds host order; ibv_wc network order */
		w->qp_num = s->qp_num;
		w->src_qp = s->src_qp;
		w->wc_flags = s->wc_flags;
		w->pkey_index = s->pkey_index;
		w->slid = s->slid;
		w->sl = s->sl;
		w->dlid_path_bits = s->dlid_path_bits;
		if (s->opcode & IBV_WC_RECV)
			uv_cq_recv_done(cq, s->qp_num);
		cons++;
		k++;
	}
	if (k)
		cq_consumed(cq, cons);
	else
		cq_empty(cq, n, &overrun, &yield);
	pthread_spin_unlock(&cq->lock);
	cq_after_empty(cq, overrun, yield);
	return k;
}

/*
 * The extended CQ's polling (ibv_create_cq_ex): ibv_start_poll takes the
 * CQ's lock and makes the oldest completion current, ibv_next_poll
 * consumes it and makes the next one current, ibv_end_poll consumes the
 * current one, hands the slots back and releases the lock. Nothing is
 * copied: the ibv_wc_read_* read the ring's slot.
 */

/* Makes the completion at the consumer index current, if there is one. */
static int cq_current(struct uv_cq *cq)
{
	struct uv_ring *r = &cq->ring;
	if (r->prod == cq->poll_prod) {
		cq->poll_prod = uv_load(uv_ring_word(r, UP_OFF_PRODUCER));
		if (r->prod == cq->poll_prod) {
			cq->cur = NULL;
			return ENOENT;
		}
	}
	const struct up_wc *s = (const struct up_wc *)uv_ring_slot(r, r->prod);
	cq->cur = s;
	cq->cqx.status = s->status;
	cq->cqx.wr_id = s->wr_id;
	if (s->opcode & IBV_WC_RECV)
		uv_cq_recv_done(cq, s->qp_num);
	return 0;
}

static int uv_start_poll(struct ibv_cq_ex *ibcq, struct ibv_poll_cq_attr *attr)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	cq->poll_prod = cq->ring.prod;
	if (cq_current(cq) == 0)
		return 0; /* the lock is held until ibv_end_poll */
	int overrun = 0, yield = 0;
	cq_empty(cq, 1, &overrun, &yield);
	pthread_spin_unlock(&cq->lock);
	cq_after_empty(cq, overrun, yield);
	return ENOENT;
}

static int uv_next_poll(struct ibv_cq_ex *ibcq)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	if (cq->cur) {
		cq->ring.prod++;
		cq->cur = NULL;
	}
	return cq_current(cq);
}

static void uv_end_poll(struct ibv_cq_ex *ibcq)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	uint32_t cons = cq->ring.prod + (cq->cur != NULL);
	cq->cur = NULL;
	cq_consumed(cq, cons);
	pthread_spin_unlock(&cq->lock);
}

static const struct up_wc *wc_cur(struct ibv_cq_ex *ibcq) { return ((struct uv_cq *)ibcq)->cur; }

static enum ibv_wc_opcode rd_opcode(struct ibv_cq_ex *c) { return (enum ibv_wc_opcode)wc_cur(c)->opcode; }
static uint32_t rd_vendor_err(struct ibv_cq_ex *c) { return wc_cur(c)->vendor_err; }
static uint32_t rd_byte_len(struct ibv_cq_ex *c) { return wc_cur(c)->byte_len; }
static uint32_t rd_qp_num(struct ibv_cq_ex *c) { return wc_cur(c)->qp_num; }
static uint32_t rd_src_qp(struct ibv_cq_ex *c) { return wc_cur(c)->src_qp; }
static unsigned int rd_wc_flags(struct ibv_cq_ex *c) { return wc_cur(c)->wc_flags; }
static uint32_t rd_slid(struct ibv_cq_ex *c) { return wc_cur(c)->slid; }
static uint8_t rd_sl(struct ibv_cq_ex *c) { return wc_cur(c)->sl; }
static uint8_t rd_dlid_path_bits(struct ibv_cq_ex *c) { return wc_cur(c)->dlid_path_bits; }

/*
 * The immediate in network order, as ibv_wc's imm_data; for a SEND with
 * invalidate the invalidated R_Key in host order, which is what
 * ibv_wc_read_invalidated_rkey returns through this entry.
 */
static __be32 rd_imm_data(struct ibv_cq_ex *c)
{
	const struct up_wc *s = wc_cur(c);
	return (s->wc_flags & IBV_WC_WITH_INV) ? (__be32)s->imm : htobe32(s->imm);
}

/* What ibv_create_cq_ex refuses to be asked for: never read, but never a NULL call either. */
static uint64_t rd_zero64(struct ibv_cq_ex *c) { (void)c; return 0; }
static uint16_t rd_cvlan(struct ibv_cq_ex *c) { (void)c; return 0; }
static uint32_t rd_flow_tag(struct ibv_cq_ex *c) { (void)c; return 0; }
static void rd_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *tm)
{
	(void)c;
	memset(tm, 0, sizeof(*tm));
}

void uv_fill_cq_ex(struct uv_cq *cq)
{
	struct ibv_cq_ex *x = &cq->cqx;
	x->start_poll = uv_start_poll;
	x->next_poll = uv_next_poll;
	x->end_poll = uv_end_poll;
	x->read_opcode = rd_opcode;
	x->read_vendor_err = rd_vendor_err;
	x->read_byte_len = rd_byte_len;
	x->read_imm_data = rd_imm_data;
	x->read_qp_num = rd_qp_num;
	x->read_src_qp = rd_src_qp;
	x->read_wc_flags = rd_wc_flags;
	x->read_slid = rd_slid;
	x->read_sl = rd_sl;
	x->read_dlid_path_bits = rd_dlid_path_bits;
	x->read_completion_ts = rd_zero64;
	x->read_cvlan = rd_cvlan;
	x->read_flow_tag = rd_flow_tag;
	x->read_tm_info = rd_tm_info;
	x->read_completion_wallclock_ns = rd_zero64;
}

int uv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	pthread_spin_lock(&cq->lock); /* the ring stays while ibv_resize_cq swaps it */
	uv_store_sc(uv_ring_word(&cq->ring, UP_OFF_FLAGS), solicited_only ? UP_ARM_SOLICITED : UP_ARM_NEXT);
	pthread_spin_unlock(&cq->lock);
	return 0;
}

/* Sends. */

/*
 * The send requests the daemon is done with: retired by the QP
 * (completed, signaled or not, or flushed) or refused from the ring
 * (SPEC.md, Rings). A request is outstanding from its slot's production
 * until then, and at most max_send_wr (the ring's slots) may be, so a
 * full queue fails with ENOMEM as an RNIC's does; since the daemon only
 * retires requests it has taken, this also keeps a slot from being
 * overwritten before the daemon has copied it.
 */
static inline uint32_t sq_done(struct uv_ring *r)
{
	return uv_load(uv_ring_word(r, UP_OFF_RETIRED)) + uv_load(uv_ring_word(r, UP_OFF_REFUSED));
}

/* Whether QP q takes a request of opcode op (ibv_post_send's rules): 0 or EINVAL. */
static int send_op_check(const struct uv_qp *q, enum ibv_wr_opcode op)
{
	enum ibv_qp_type t = q->qp.qp_type;
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return 0;
	case IBV_WR_SEND_WITH_INV:
		/* One of the memory management extensions: only where the device reports them. */
		if (t != IBV_QPT_RC || !(uv_ctx(q->qp.context)->attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS))
			return EINVAL;
		return 0;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return t == IBV_QPT_UD ? EINVAL : 0;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_WRITE:
		return t == IBV_QPT_RC ? 0 : EINVAL;
	case IBV_WR_LOCAL_INV: /* as rdma_rxe: RC only */
		if (t != IBV_QPT_RC || !(uv_ctx(q->qp.context)->attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS))
			return EINVAL;
		return 0;
	case IBV_WR_BIND_MW: /* as rdma_rxe: RC and UC */
		if (t == IBV_QPT_UD || !(uv_ctx(q->qp.context)->attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW))
			return EINVAL;
		return 0;
	default: /* TSO, DRIVER1 */
		return EINVAL;
	}
}

/*
 * Fills slot s of a BIND_MW (SendSlot: the window's handle, new R_Key,
 * address, length, access and the region's handle; no SGEs). The daemon
 * binds it when it takes it from the ring, which may be before requests
 * posted earlier have executed; a binding the window, the region or the
 * QP do not allow completes with IBV_WC_MW_BIND_ERR and moves the QP to
 * ERR. EINVAL for a window or region of another device or zero-based
 * access.
 */
static int put_bind(const struct uv_qp *q, struct up_send_slot *s, const struct ibv_mw *mw, uint32_t rkey,
		    const struct ibv_mw_bind_info *bi)
{
	if (!mw || !bi || mw->context != q->qp.context || (bi->mr && bi->mr->context != q->qp.context) ||
	    (bi->mw_access_flags & IBV_ACCESS_ZERO_BASED))
		return EINVAL;
	s->ah = mw->handle;
	s->rkey = rkey;
	s->remote_addr = bi->addr;
	s->compare_add = bi->length;
	s->remote_qpn = bi->mr ? bi->mr->handle : 0;
	s->remote_qkey = bi->mw_access_flags;
	s->num_sge = 0;
	s->flags &= ~IBV_SEND_INLINE;
	return 0;
}

/* Whether opcode op reads or is an atomic: its data is where the response goes, never inline. */
static int is_read_or_atomic(unsigned op)
{
	return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/*
 * Appends l bytes at p to slot b (of opcode op) inline data, *total bytes
 * so far: 0 or EINVAL past max_inline. An ATOMIC_WRITE's 8 bytes need no
 * max_inline (SendSlot: they fit any slot with room for an SGE).
 */
static int add_inline(const struct uv_qp *q, unsigned op, uint8_t *b, uint32_t *total, const void *p, size_t l)
{
	uint32_t max = q->caps.max_inline;
	if (op == IBV_WR_ATOMIC_WRITE && q->sq.size >= UP_SEND_SLOT_HEADER + 8)
		max = 8;
	if (l > max - *total)
		return EINVAL;
	memcpy(b + UP_SEND_SLOT_HEADER + *total, p, l);
	*total += l;
	return 0;
}

/* Whether QP q's send queue takes requests: 0, EINVAL before RTS, EIO once the daemon is gone. */
static int send_state_check(const struct uv_qp *q)
{
	switch (q->qp.state) {
	case IBV_QPS_RESET:
	case IBV_QPS_INIT:
	case IBV_QPS_RTR:
		return EINVAL;
	default:
		return uv_gone(uv_ctx(q->qp.context)) ? EIO : 0;
	}
}

/*
 * Gives the daemon the send ring's requests up to index prod (the
 * caller holds the send lock): whether the daemon asked to be woken.
 */
static int publish_sends(struct uv_ring *r, uint32_t prod)
{
	r->prod = prod;
	uv_store_sc(uv_ring_word(r, UP_OFF_PRODUCER), prod);
	return uv_load_sc(uv_ring_word(r, UP_OFF_FLAGS)) & UP_FLAG_NEED_WAKEUP;
}

/* Checks wr as ibv_post_send does and writes it into slot b. */
static int put_send(struct uv_qp *q, const struct ibv_send_wr *wr, uint8_t *b)
{
	struct up_send_slot s = {.wr_id = wr->wr_id, .opcode = wr->opcode, .flags = wr->send_flags & 0xf};
	int err = send_op_check(q, wr->opcode);
	if (err)
		return err;
	switch (wr->opcode) {
	case IBV_WR_BIND_MW:
		if ((err = put_bind(q, &s, wr->bind_mw.mw, wr->bind_mw.rkey, &wr->bind_mw.bind_info)))
			return err;
		memcpy(b, &s, sizeof(s));
		return 0;
	case IBV_WR_LOCAL_INV: /* executed when the daemon takes it: no data */
		s.imm = wr->invalidate_rkey;
		s.flags &= ~IBV_SEND_INLINE;
		memcpy(b, &s, sizeof(s));
		return 0;
	case IBV_WR_SEND_WITH_IMM:
		s.imm = be32toh(wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
		s.imm = wr->invalidate_rkey;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		s.imm = be32toh(wr->imm_data);
		/* fall through */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_WRITE: /* its 8 bytes: the SGEs, or inline */
		s.remote_addr = wr->wr.rdma.remote_addr;
		s.rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		s.remote_addr = wr->wr.atomic.remote_addr;
		s.rkey = wr->wr.atomic.rkey;
		s.compare_add = wr->wr.atomic.compare_add;
		s.swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (wr->num_sge < 0)
		return EINVAL;
	if (q->qp.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		s.ah = wr->wr.ud.ah->handle;
		s.remote_qpn = wr->wr.ud.remote_qpn;
		s.remote_qkey = wr->wr.ud.remote_qkey;
	}
	if ((wr->send_flags & IBV_SEND_INLINE) && !is_read_or_atomic(wr->opcode)) {
		/* Inline data: the bytes themselves, from any memory (no lkey needed). */
		uint32_t total = 0;
		for (int i = 0; i < wr->num_sge; i++)
			if (add_inline(q, wr->opcode, b, &total, (const void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length))
				return EINVAL;
		s.num_sge = 0;
		s.inline_len = total;
	} else {
		if ((uint32_t)wr->num_sge > q->caps.max_send_sge)
			return EINVAL;
		s.flags &= ~IBV_SEND_INLINE;
		s.num_sge = wr->num_sge;
		struct up_sge *sg = (struct up_sge *)(b + UP_SEND_SLOT_HEADER);
		for (int i = 0; i < wr->num_sge; i++) {
			sg[i].addr = wr->sg_list[i].addr;
			sg[i].length = wr->sg_list[i].length;
			sg[i].lkey = wr->sg_list[i].lkey;
		}
	}
	memcpy(b, &s, sizeof(s));
	return 0;
}

int uv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct uv_qp *q = (struct uv_qp *)ibqp;
	struct uv_ring *r = &q->sq;
	int err = send_state_check(q), ring = 0;
	if (err) {
		*bad = wr;
		return err;
	}
	pthread_spin_lock(&q->slock);
	uint32_t prod = r->prod, start = prod;
	uint32_t done = sq_done(r);
	for (; wr; wr = wr->next) {
		if (prod - done >= r->n) {
			done = sq_done(r);
			if (prod - done >= r->n) {
				err = ENOMEM;
				break;
			}
		}
		if ((err = put_send(q, wr, uv_ring_slot(r, prod))))
			break;
		prod++;
	}
	if (prod != start)
		ring = publish_sends(r, prod);
	pthread_spin_unlock(&q->slock);
	if (ring)
		uv_ring_doorbell(uv_ctx(ibqp->context));
	if (err)
		*bad = wr;
	return err;
}

/*
 * The ibv_wr_* API (ibv_wr_post(3)) through struct ibv_qp_ex: a builder
 * (ibv_wr_send, ibv_wr_rdma_write, ...) starts a request in the batch's
 * next send slot with the QP's wr_id and wr_flags of the moment, the
 * setters fill in the current one, and ibv_wr_complete publishes the
 * batch with one producer index store, as ibv_post_send does a list.
 * The requests pass ibv_post_send's checks; the first failure is kept,
 * later calls do nothing, and ibv_wr_complete returns it with nothing
 * posted. Whether data is inline is the setter's choice: IBV_SEND_INLINE
 * in wr_flags does not count. No call allocates or enters the kernel
 * but ibv_wr_complete's doorbell, when the daemon asked for one.
 */

static inline struct uv_qp *qpx_qp(struct ibv_qp_ex *x)
{
	return (struct uv_qp *)x;
}

/* Fails the batch with err unless it already failed; no current request after. */
static void wr_fail(struct uv_qp *q, int err)
{
	if (!q->wr.err)
		q->wr.err = err;
	q->wr.cur = NULL;
}

/* Ends the current request: the batch's error, or 0. */
static int wr_end(struct uv_qp *q)
{
	if (q->wr.cur && q->wr.need_ah)
		wr_fail(q, EINVAL); /* a UD request needs ibv_wr_set_ud_addr */
	return q->wr.err;
}

/* Starts a request of opcode op: its slot, or NULL once the batch failed. */
static struct up_send_slot *wr_begin(struct uv_qp *q, enum ibv_wr_opcode op)
{
	struct uv_wr_batch *w = &q->wr;
	struct uv_ring *r = &q->sq;
	int err = wr_end(q);
	if (!err)
		err = send_op_check(q, op);
	if (!err && w->prod - w->done >= r->n) {
		w->done = sq_done(r);
		if (w->prod - w->done >= r->n)
			err = ENOMEM;
	}
	if (err) {
		wr_fail(q, err);
		return NULL;
	}
	uint8_t *b = uv_ring_slot(r, w->prod++);
	struct up_send_slot s = {.wr_id = q->qpx.wr_id, .opcode = op,
				 .flags = q->qpx.wr_flags & 0xf & ~IBV_SEND_INLINE};
	memcpy(b, &s, sizeof(s));
	w->cur = b;
	w->need_ah = q->qp.qp_type == IBV_QPT_UD;
	return (struct up_send_slot *)b;
}

/* The current request, for a setter: NULL (the batch failed) without one. */
static struct up_send_slot *wr_current(struct uv_qp *q)
{
	if (!q->wr.cur)
		wr_fail(q, EINVAL); /* a setter before any builder */
	return (struct up_send_slot *)q->wr.cur;
}

static void wr_start(struct ibv_qp_ex *x)
{
	struct uv_qp *q = qpx_qp(x);
	pthread_spin_lock(&q->slock);
	q->wr = (struct uv_wr_batch){.prod = q->sq.prod, .done = sq_done(&q->sq)};
}

static int wr_complete(struct ibv_qp_ex *x)
{
	struct uv_qp *q = qpx_qp(x);
	int err = wr_end(q), ring = 0;
	if (!err)
		err = send_state_check(q);
	if (!err && q->wr.prod != q->sq.prod)
		ring = publish_sends(&q->sq, q->wr.prod);
	pthread_spin_unlock(&q->slock);
	if (ring)
		uv_ring_doorbell(uv_ctx(q->qp.context));
	return err;
}

static void wr_abort(struct ibv_qp_ex *x)
{
	/* The slots written stay past the producer index: the daemon never sees them. */
	pthread_spin_unlock(&qpx_qp(x)->slock);
}

static void wr_send(struct ibv_qp_ex *x)
{
	wr_begin(qpx_qp(x), IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm_data)
{
	struct up_send_slot *s = wr_begin(qpx_qp(x), IBV_WR_SEND_WITH_IMM);
	if (s)
		s->imm = be32toh(imm_data);
}

static void wr_send_inv(struct ibv_qp_ex *x, uint32_t invalidate_rkey)
{
	struct up_send_slot *s = wr_begin(qpx_qp(x), IBV_WR_SEND_WITH_INV);
	if (s)
		s->imm = invalidate_rkey;
}

static struct up_send_slot *wr_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t raddr)
{
	struct up_send_slot *s = wr_begin(qpx_qp(x), op);
	if (s) {
		s->remote_addr = raddr;
		s->rkey = rkey;
	}
	return s;
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t remote_addr)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, remote_addr);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
	struct up_send_slot *s = wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr);
	if (s)
		s->imm = be32toh(imm_data);
}

static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t remote_addr)
{
	wr_rdma(x, IBV_WR_RDMA_READ, rkey, remote_addr);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
			      uint64_t swap)
{
	struct up_send_slot *s = wr_rdma(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr);
	if (s) {
		s->compare_add = compare;
		s->swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t remote_addr, uint64_t add)
{
	struct up_send_slot *s = wr_rdma(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr);
	if (s)
		s->compare_add = add;
}

/* Zero-length buffers carry nothing and are left out, as rdma-core's providers do. */
static void wr_set_sge_list(struct ibv_qp_ex *x, size_t num_sge, const struct ibv_sge *sg_list)
{
	struct uv_qp *q = qpx_qp(x);
	struct up_send_slot *s = wr_current(q);
	if (!s)
		return;
	if (num_sge > q->caps.max_send_sge) {
		wr_fail(q, EINVAL);
		return;
	}
	struct up_sge *sg = (struct up_sge *)((uint8_t *)s + UP_SEND_SLOT_HEADER);
	uint16_t n = 0;
	for (size_t i = 0; i < num_sge; i++) {
		if (!sg_list[i].length)
			continue;
		sg[n].addr = sg_list[i].addr;
		sg[n].length = sg_list[i].length;
		sg[n].lkey = sg_list[i].lkey;
		n++;
	}
	s->num_sge = n;
	s->inline_len = 0;
	s->flags &= ~IBV_SEND_INLINE;
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sg = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(x, 1, &sg);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t num_buf, const struct ibv_data_buf *buf_list)
{
	struct uv_qp *q = qpx_qp(x);
	struct up_send_slot *s = wr_current(q);
	if (!s)
		return;
	if (is_read_or_atomic(s->opcode)) { /* inline data is for SEND, RDMA WRITE and ATOMIC_WRITE */
		wr_fail(q, EINVAL);
		return;
	}
	uint32_t total = 0;
	for (size_t i = 0; i < num_buf; i++)
		if (add_inline(q, s->opcode, (uint8_t *)s, &total, buf_list[i].addr, buf_list[i].length)) {
			wr_fail(q, EINVAL);
			return;
		}
	s->num_sge = 0;
	s->inline_len = total;
	s->flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf d = {.addr = addr, .length = length};
	wr_set_inline_data_list(x, 1, &d);
}

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct uv_qp *q = qpx_qp(x);
	struct up_send_slot *s = wr_current(q);
	if (!s)
		return;
	if (q->qp.qp_type != IBV_QPT_UD || !ah) {
		wr_fail(q, EINVAL);
		return;
	}
	s->ah = ah->handle;
	s->remote_qpn = remote_qpn;
	s->remote_qkey = remote_qkey;
	q->wr.need_ah = 0;
}

/* What the ring's slots cannot carry: the batch fails with EOPNOTSUPP. */
static void wr_unsupported(struct uv_qp *q)
{
	wr_end(q);
	wr_fail(q, EOPNOTSUPP);
}

static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct uv_qp *q = qpx_qp(x);
	struct up_send_slot *s = wr_begin(q, IBV_WR_BIND_MW);
	int err;
	if (s && (err = put_bind(q, s, mw, rkey, info)))
		wr_fail(q, err);
}

static void wr_local_inv(struct ibv_qp_ex *x, uint32_t invalidate_rkey)
{
	struct up_send_slot *s = wr_begin(qpx_qp(x), IBV_WR_LOCAL_INV);
	if (s)
		s->imm = invalidate_rkey;
}

static void wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	wr_unsupported(qpx_qp(x));
}

/* The 8 bytes at atomic_wr go in the slot as inline data, copied now (ibv_wr_atomic_write(3)). */
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t remote_addr, const void *atomic_wr)
{
	struct uv_qp *q = qpx_qp(x);
	struct up_send_slot *s = wr_rdma(x, IBV_WR_ATOMIC_WRITE, rkey, remote_addr);
	uint32_t total = 0;
	if (!s)
		return;
	if (add_inline(q, IBV_WR_ATOMIC_WRITE, (uint8_t *)s, &total, atomic_wr, 8)) {
		wr_fail(q, EINVAL);
		return;
	}
	s->num_sge = 0;
	s->inline_len = total;
	s->flags |= IBV_SEND_INLINE;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t remote_srqn)
{
	(void)remote_srqn;
	wr_unsupported(qpx_qp(x));
}

/*
 * The send_ops_flags a QP of type t may ask for: the operations
 * ibv_post_send takes on it.
 */
uint64_t uv_send_ops(struct uv_context *c, enum ibv_qp_type t)
{
	const uint64_t sends = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	const uint64_t writes = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	switch (t) {
	case IBV_QPT_RC: {
		uint64_t ops = sends | writes | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_WRITE;
		if (c->attr.atomic_cap != IBV_ATOMIC_NONE)
			ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
		if (c->attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS)
			ops |= IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_LOCAL_INV;
		if (c->attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW)
			ops |= IBV_QP_EX_WITH_BIND_MW;
		return ops;
	}
	case IBV_QPT_UC:
		return sends | writes | (c->attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW ? IBV_QP_EX_WITH_BIND_MW : 0);
	case IBV_QPT_UD:
		return sends;
	default:
		return 0;
	}
}

/*
 * Gives q its struct ibv_qp_ex. Every builder is there, whatever
 * send_ops_flags asked for (as rdma-core's mlx5 does); one the QP's type
 * does not take fails the batch as ibv_post_send would (EINVAL), one no
 * uroce QP takes with EOPNOTSUPP.
 */
void uv_init_qpx(struct uv_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;
	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
	q->has_qpx = 1;
}

/* rdma-core's answer: the QP's ibv_qp_ex if ibv_create_qp_ex made it with send_ops_flags, else NULL. */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct uv_qp *q = (struct uv_qp *)qp;
	return q->has_qpx ? &q->qpx : NULL;
}

/* Receives. */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ volatile("" ::: "memory");
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

/*
 * Waits until the daemon has put a receive ring's requests up to index
 * i on its QP or SRQ (receives are ready when ibv_post_recv returns),
 * for at most a second (the queue behind the ring is full: the requests
 * go in as completions make room), giving the CPU to the daemon.
 */
void uv_wait_posted(struct uv_ring *r, uint32_t i)
{
	const uint32_t *posted = uv_ring_word(r, UP_OFF_POSTED);
	if ((int32_t)(uv_load(posted) - i) >= 0)
		return;
	for (int k = 0; k < 64; k++) {
		cpu_relax();
		if ((int32_t)(uv_load(posted) - i) >= 0)
			return;
	}
	uint64_t until = now_ns() + 1000000000u;
	for (int k = 0; (int32_t)(uv_load(posted) - i) < 0; k++) {
		if ((k & 63) == 63 && now_ns() > until) {
			uv_debug("receive ring: the daemon has not posted index %u after 1 s", i);
			return;
		}
		sched_yield();
	}
}

/* done: the queue's completed receives; max_wr: the receives it holds (see queues.c). */
static int post_recv_ring(struct uv_context *c, struct uv_ring *r, pthread_spinlock_t *lock, uint32_t max_sge,
			  const uint32_t *done, uint32_t max_wr, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	if (uv_gone(c)) {
		*bad = wr;
		return EIO;
	}
	int err = 0, ring = 0;
	pthread_spin_lock(lock);
	uint32_t prod = r->prod, start = prod;
	uint32_t cons = uv_load(uv_ring_word(r, UP_OFF_CONSUMER));
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge) {
			err = EINVAL;
			break;
		}
		if (prod - cons >= r->n) {
			cons = uv_load(uv_ring_word(r, UP_OFF_CONSUMER));
			if (prod - cons >= r->n) {
				err = ENOMEM;
				break;
			}
		}
		if ((int32_t)(prod - __atomic_load_n(done, __ATOMIC_ACQUIRE)) >= (int32_t)max_wr) {
			err = ENOMEM; /* the queue is full */
			break;
		}
		uint8_t *b = uv_ring_slot(r, prod);
		struct up_recv_slot s = {.wr_id = wr->wr_id, .num_sge = wr->num_sge};
		memcpy(b, &s, sizeof(s));
		struct up_sge *sg = (struct up_sge *)(b + UP_RECV_SLOT_HEADER);
		for (int i = 0; i < wr->num_sge; i++) {
			sg[i].addr = wr->sg_list[i].addr;
			sg[i].length = wr->sg_list[i].length;
			sg[i].lkey = wr->sg_list[i].lkey;
		}
		prod++;
	}
	if (prod != start) {
		r->prod = prod;
		uv_store_sc(uv_ring_word(r, UP_OFF_PRODUCER), prod);
		ring = uv_load_sc(uv_ring_word(r, UP_OFF_FLAGS)) & UP_FLAG_NEED_WAKEUP;
	}
	pthread_spin_unlock(lock);
	if (ring)
		uv_ring_doorbell(c);
	if (prod != start)
		uv_wait_posted(r, prod);
	if (err)
		*bad = wr;
	return err;
}

int uv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct uv_qp *q = (struct uv_qp *)ibqp;
	if (ibqp->srq || q->rq.n == 0) {
		*bad = wr;
		return EINVAL;
	}
	return post_recv_ring(uv_ctx(ibqp->context), &q->rq, &q->rlock, q->caps.max_recv_sge, &q->rq_done,
			      q->caps.max_recv_wr, wr, bad);
}

int uv_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct uv_srq *s = (struct uv_srq *)ibsrq;
	return post_recv_ring(uv_ctx(ibsrq->context), &s->ring, &s->lock, s->max_sge, &s->done, s->max_wr, wr, bad);
}
