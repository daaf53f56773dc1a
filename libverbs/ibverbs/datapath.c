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
 * went from 0.2 to 7 ms). A CQ that completions keep arriving on never
 * yields. By default only machines of up to 4 CPUs yield, after 20 µs;
 * UROCE_POLL_YIELD=<microseconds> sets the time, "off" disables.
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
			v = sysconf(_SC_NPROCESSORS_ONLN) <= 4 ? 20000 : -1;
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
	if (k) {
		r->prod = cons;
		uv_store(uv_ring_word(r, UP_OFF_CONSUMER), cons);
		cq->empty_polls = 0;
		cq->empty_since = 0;
	} else {
		uint32_t ov = uv_load(uv_ring_word(r, UP_OFF_OVERRUN));
		if (ov != cq->overrun_seen) {
			cq->overrun_seen = ov;
			overrun = 1;
		}
		yield = n > 0 && empty_poll(cq);
	}
	pthread_spin_unlock(&cq->lock);
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
	return k;
}

int uv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	uv_store_sc(uv_ring_word(&cq->ring, UP_OFF_FLAGS), solicited_only ? UP_ARM_SOLICITED : UP_ARM_NEXT);
	return 0;
}

/* Sends. */

/* Checks wr as ibv_post_send does and writes it into slot b. */
static int put_send(struct uv_qp *q, const struct ibv_send_wr *wr, uint8_t *b)
{
	enum ibv_qp_type t = q->qp.qp_type;
	struct up_send_slot s = {.wr_id = wr->wr_id, .opcode = wr->opcode, .flags = wr->send_flags & 0xf};
	int atomic_or_read = 0;
	switch (wr->opcode) {
	case IBV_WR_SEND:
		break;
	case IBV_WR_SEND_WITH_IMM:
		s.imm = be32toh(wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
		/* One of the memory management extensions: only where the device reports them. */
		if (t != IBV_QPT_RC ||
		    !(uv_ctx(q->qp.context)->attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS))
			return EINVAL;
		s.imm = wr->invalidate_rkey;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		s.imm = be32toh(wr->imm_data);
		/* fall through */
	case IBV_WR_RDMA_WRITE:
		if (t == IBV_QPT_UD)
			return EINVAL;
		s.remote_addr = wr->wr.rdma.remote_addr;
		s.rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_RDMA_READ:
		if (t != IBV_QPT_RC)
			return EINVAL;
		s.remote_addr = wr->wr.rdma.remote_addr;
		s.rkey = wr->wr.rdma.rkey;
		atomic_or_read = 1;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (t != IBV_QPT_RC)
			return EINVAL;
		s.remote_addr = wr->wr.atomic.remote_addr;
		s.rkey = wr->wr.atomic.rkey;
		s.compare_add = wr->wr.atomic.compare_add;
		s.swap = wr->wr.atomic.swap;
		atomic_or_read = 1;
		break;
	default: /* LOCAL_INV, BIND_MW, TSO, ATOMIC_WRITE, DRIVER1 */
		return EINVAL;
	}
	if (wr->num_sge < 0)
		return EINVAL;
	if (t == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		s.ah = wr->wr.ud.ah->handle;
		s.remote_qpn = wr->wr.ud.remote_qpn;
		s.remote_qkey = wr->wr.ud.remote_qkey;
	}
	if ((wr->send_flags & IBV_SEND_INLINE) && !atomic_or_read) {
		/* Inline data: the bytes themselves, from any memory (no lkey needed). */
		uint32_t total = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			uint32_t l = wr->sg_list[i].length;
			if (l > q->caps.max_inline || total + l > q->caps.max_inline)
				return EINVAL;
			memcpy(b + UP_SEND_SLOT_HEADER + total, (const void *)(uintptr_t)wr->sg_list[i].addr, l);
			total += l;
		}
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
	switch (ibqp->state) {
	case IBV_QPS_RESET:
	case IBV_QPS_INIT:
	case IBV_QPS_RTR:
		*bad = wr;
		return EINVAL;
	default:
		break;
	}
	if (uv_gone(uv_ctx(ibqp->context))) {
		*bad = wr;
		return EIO;
	}
	int err = 0, ring = 0;
	pthread_spin_lock(&q->slock);
	uint32_t prod = r->prod, start = prod;
	uint32_t cons = uv_load(uv_ring_word(r, UP_OFF_CONSUMER));
	for (; wr; wr = wr->next) {
		if (prod - cons >= r->n) {
			cons = uv_load(uv_ring_word(r, UP_OFF_CONSUMER));
			if (prod - cons >= r->n) {
				err = ENOMEM;
				break;
			}
		}
		if ((err = put_send(q, wr, uv_ring_slot(r, prod))))
			break;
		prod++;
	}
	if (prod != start) {
		r->prod = prod;
		uv_store_sc(uv_ring_word(r, UP_OFF_PRODUCER), prod);
		ring = uv_load_sc(uv_ring_word(r, UP_OFF_FLAGS)) & UP_FLAG_NEED_WAKEUP;
	}
	pthread_spin_unlock(&q->slock);
	if (ring)
		uv_ring_doorbell(uv_ctx(ibqp->context));
	if (err)
		*bad = wr;
	return err;
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
static void wait_posted(struct uv_ring *r, uint32_t i)
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
		wait_posted(r, prod);
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
