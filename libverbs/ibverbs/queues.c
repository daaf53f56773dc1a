/*
 * Completion channels, CQs, SRQs, QPs and address handles: the daemon
 * creates them and passes the memfd of their rings, which we map
 * (SPEC.md, Rings).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "uverbs.h"

/* Lists of the context's objects, by handle (for async events). */

#define LIST_ADD(c, head, o)                 \
	do {                                 \
		pthread_mutex_lock(&(c)->obj_mu); \
		(o)->next = (c)->head;       \
		(c)->head = (o);             \
		pthread_mutex_unlock(&(c)->obj_mu); \
	} while (0)

#define LIST_DEL(c, head, type, o)                              \
	do {                                                    \
		pthread_mutex_lock(&(c)->obj_mu);                    \
		for (type **p_ = &(c)->head; *p_; p_ = &(*p_)->next) \
			if (*p_ == (o)) {                       \
				*p_ = (o)->next;                \
				break;                          \
			}                                       \
		pthread_mutex_unlock(&(c)->obj_mu);                  \
	} while (0)

#define LIST_FIND(c, head, type, h)                                 \
	do {                                                        \
		type *o_;                                           \
		pthread_mutex_lock(&(c)->obj_mu);                        \
		for (o_ = (c)->head; o_ && o_->handle != (h); o_ = o_->next) \
			;                                           \
		pthread_mutex_unlock(&(c)->obj_mu);                      \
		return o_;                                          \
	} while (0)

struct uv_cq *uv_cq_by_handle(struct uv_context *c, uint32_t h)
{
	LIST_FIND(c, cqs, struct uv_cq, h);
}

struct uv_qp *uv_qp_by_handle(struct uv_context *c, uint32_t h)
{
	LIST_FIND(c, qps, struct uv_qp, h);
}

struct uv_srq *uv_srq_by_handle(struct uv_context *c, uint32_t h)
{
	LIST_FIND(c, srqs, struct uv_srq, h);
}

/* Waits until the program acknowledged n events of an object (rdma-core's destroy does). */
static void wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, const uint32_t *done, uint32_t n)
{
	pthread_mutex_lock(mu);
	while (*done != n)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

/* A ring of the daemon's memfd: n slots of size bytes at off of a mapping of len bytes. */
static int ring_at(struct uv_ring *r, void *mem, size_t len, uint32_t off, uint32_t n, uint32_t size)
{
	if (n == 0 || (n & (n - 1)) || size == 0 || off % 64 || (size_t)off + up_ring_bytes(n, size) > len)
		return -1;
	r->hdr = (uint8_t *)mem + off;
	r->slots = r->hdr + UP_RING_HEADER_LEN;
	r->n = n;
	r->size = size;
	r->prod = 0;
	return 0;
}

/*
 * Receive accounting. A receive queue (a QP's or an SRQ's) takes as
 * many receives as were granted, counted from when ibv_post_recv puts
 * one in the ring to when ibv_poll_cq returns its completion (the
 * daemon empties the ring sooner, so the ring alone does not bound the
 * queue). The receive CQ keeps, for each of its QPs, the count that
 * its receive completions add to.
 */
static int add_rq_ref(struct uv_cq *cq, uint32_t qpn, uint32_t *done)
{
	pthread_spin_lock(&cq->lock);
	struct uv_rq_ref *r = realloc(cq->rqs, (cq->nrqs + 1) * sizeof(*r));
	if (r) {
		r[cq->nrqs++] = (struct uv_rq_ref){.qpn = qpn, .done = done};
		cq->rqs = r;
	}
	pthread_spin_unlock(&cq->lock);
	return r ? 0 : ENOMEM;
}

static void del_rq_ref(struct uv_cq *cq, uint32_t qpn)
{
	pthread_spin_lock(&cq->lock);
	for (int i = 0; i < cq->nrqs; i++)
		if (cq->rqs[i].qpn == qpn) {
			cq->rqs[i] = cq->rqs[--cq->nrqs];
			break;
		}
	pthread_spin_unlock(&cq->lock);
}

/* A receive completion of QP qpn was polled (the caller holds cq->lock). */
void uv_cq_recv_done(struct uv_cq *cq, uint32_t qpn)
{
	for (int i = 0; i < cq->nrqs; i++)
		if (cq->rqs[i].qpn == qpn) {
			__atomic_add_fetch(cq->rqs[i].done, 1, __ATOMIC_RELEASE);
			return;
		}
}

/* Completion channels. */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct uv_context *c = uv_ctx(ctx);
	struct uv_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	struct up_channel_resp r;
	int fd;
	int err = uv_call(c, UP_OP_CREATE_CHANNEL, NULL, 0, -1, &r, sizeof(r), &fd);
	if (!err && fd < 0) {
		uv_destroy_handle(c, UP_OP_DESTROY_CHANNEL, r.channel);
		err = EPROTO;
	}
	if (err) {
		free(ch);
		errno = err;
		return NULL;
	}
	/*
	 * The daemon made the eventfd non-blocking; reads block, as a
	 * kernel channel's do, unless the program asks otherwise. (The
	 * daemon only writes to it.)
	 */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	pthread_mutex_init(&ch->mu, NULL);
	ch->handle = r.channel;
	ch->ch.context = ctx;
	ch->ch.fd = fd;
	ch->ch.refcnt = 0;
	return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct uv_channel *ch = (struct uv_channel *)channel;
	pthread_mutex_lock(&channel->context->mutex);
	int busy = channel->refcnt != 0;
	pthread_mutex_unlock(&channel->context->mutex);
	if (busy)
		return EBUSY;
	int err = uv_destroy_handle(uv_ctx(channel->context), UP_OP_DESTROY_CHANNEL, ch->handle);
	if (err && err != EIO)
		return err;
	close(channel->fd);
	pthread_mutex_destroy(&ch->mu);
	free(ch);
	return 0;
}

/* CQs. */

/* A CQ of either kind; NULL with errno set. */
static struct uv_cq *create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			       int comp_vector)
{
	struct uv_context *c = uv_ctx(ctx);
	if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors || cqe < 1) {
		errno = EINVAL;
		return NULL;
	}
	struct uv_cq *cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	struct uv_channel *ch = (struct uv_channel *)channel;
	struct up_create_cq req = {.cqe = cqe, .channel = ch ? ch->handle : 0, .comp_vector = comp_vector};
	struct up_create_cq_resp r;
	int fd;
	int err = uv_call(c, UP_OP_CREATE_CQ, &req, sizeof(req), -1, &r, sizeof(r), &fd);
	if (err) {
		free(cq);
		errno = err;
		return NULL;
	}
	cq->mem_len = r.ring_bytes;
	cq->mem = uv_map_ring(fd, r.ring_bytes);
	if (!cq->mem || ring_at(&cq->ring, cq->mem, cq->mem_len, 0, r.slots, UP_WC_LEN) < 0) {
		err = cq->mem ? EPROTO : errno;
		uv_debug("create cq: the daemon's ring (%u slots in %u bytes) does not map", r.slots, r.ring_bytes);
		if (cq->mem)
			munmap(cq->mem, cq->mem_len);
		uv_destroy_handle(c, UP_OP_DESTROY_CQ, r.cq);
		free(cq);
		errno = err;
		return NULL;
	}
	cq->handle = r.cq;
	cq->ring.prod = uv_load(uv_ring_word(&cq->ring, UP_OFF_CONSUMER));
	cq->ev_seen = uv_load(uv_ring_word(&cq->ring, UP_OFF_EVENTS));
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	pthread_mutex_init(&cq->resize_mu, NULL);
	cq->cq.context = ctx;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = r.cq;
	cq->cq.cqe = r.cqe;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (ch) {
		cq->ch = ch;
		pthread_mutex_lock(&ch->mu);
		cq->ch_next = ch->cqs;
		ch->cqs = cq;
		pthread_mutex_unlock(&ch->mu);
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	LIST_ADD(c, cqs, cq);
	return cq;
}

UV_LATEST(ibv_create_cq);
struct ibv_cq *uv_ibv_create_cq_1_1(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			     int comp_vector)
{
	struct uv_cq *cq = create_cq(ctx, cqe, cq_context, channel, comp_vector);
	return cq ? &cq->cq : NULL;
}

/*
 * verbs_context.create_cq_ex (ibv_create_cq_ex): the completion's fields
 * a uroce CQ has (IBV_WC_STANDARD_FLAGS); timestamps, VLANs, flow tags
 * and tag matching are refused (EOPNOTSUPP), as is a parent domain.
 */
static struct ibv_cq_ex *uv_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	const uint32_t masks = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
	const uint32_t flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	if ((a->comp_mask & ~masks) || (a->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (a->flags & ~flags)) ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && a->parent_domain)) {
		uv_debug("create_cq_ex: comp_mask %#x wc_flags %#llx flags %#x: not supported", a->comp_mask,
			 (unsigned long long)a->wc_flags, a->flags);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->cqe > INT32_MAX || a->comp_vector > INT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	struct uv_cq *cq = create_cq(ctx, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
	if (!cq)
		return NULL;
	uv_fill_cq_ex(cq);
	return &cq->cqx;
}

/*
 * map_resized maps the new ring a resize's memfd fd holds (bytes long,
 * slots of size bytes) into *ring and *mem: 0, or the errno, when the
 * daemon has moved the queue to a ring this process cannot use.
 */
static int map_resized(const char *what, uint32_t handle, int fd, uint32_t bytes, uint32_t slots, uint32_t size,
		       struct uv_ring *ring, void **mem)
{
	int err = 0;
	*mem = uv_map_ring(fd, bytes);
	if (!*mem) {
		err = errno;
	} else if (ring_at(ring, *mem, bytes, 0, slots, size) < 0) {
		munmap(*mem, bytes);
		*mem = NULL;
		err = EPROTO;
	}
	if (err)
		uv_debug("resize %s %u: the daemon moved it to a ring (%u slots of %u bytes in %u) this process could not map: %s",
			 what, handle, slots, size, bytes, strerror(err));
	return err;
}

/*
 * ibv_resize_cq: the daemon moves the completions waiting to a new ring
 * of at least cqe entries (EINVAL when more wait than that), at the same
 * indices, and the new ring replaces the old one here. Polls go on
 * meanwhile: what they take from the old ring is not found again in the
 * new one, read from the consumer index on. An arm stored meanwhile is
 * carried over.
 */
UV_LATEST(ibv_resize_cq);
int uv_ibv_resize_cq_1_1(struct ibv_cq *ibcq, int cqe)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	struct uv_context *c = uv_ctx(ibcq->context);
	if (cqe < 1)
		return EINVAL;
	pthread_mutex_lock(&cq->resize_mu);
	struct up_resize_cq req = {.cq = cq->handle, .cqe = cqe};
	struct up_create_cq_resp r;
	struct uv_ring ring;
	void *mem = NULL;
	int fd = -1;
	int err = uv_call(c, UP_OP_RESIZE_CQ, &req, sizeof(req), -1, &r, sizeof(r), &fd);
	if (!err)
		err = map_resized("cq", cq->handle, fd, r.ring_bytes, r.slots, UP_WC_LEN, &ring, &mem);
	void *old = NULL;
	size_t old_len = 0;
	/* The channel's event scan reads the ring's header under its lock. */
	if (cq->ch)
		pthread_mutex_lock(&cq->ch->mu);
	pthread_spin_lock(&cq->lock);
	if (!err) {
		uint32_t armed = uv_load(uv_ring_word(&cq->ring, UP_OFF_FLAGS));
		if (armed)
			uv_store_sc(uv_ring_word(&ring, UP_OFF_FLAGS), armed);
		ring.prod = cq->ring.prod;
		/* what polls took from the old ring meanwhile */
		uv_store(uv_ring_word(&ring, UP_OFF_CONSUMER), ring.prod);
		old = cq->mem;
		old_len = cq->mem_len;
		cq->mem = mem;
		cq->mem_len = r.ring_bytes;
		cq->ring = ring;
		ibcq->cqe = (int)r.cqe;
	}
	pthread_spin_unlock(&cq->lock);
	if (cq->ch)
		pthread_mutex_unlock(&cq->ch->mu);
	pthread_mutex_unlock(&cq->resize_mu);
	if (old)
		munmap(old, old_len);
	return err;
}

UV_LATEST(ibv_destroy_cq);
int uv_ibv_destroy_cq_1_1(struct ibv_cq *ibcq)
{
	struct uv_cq *cq = (struct uv_cq *)ibcq;
	struct uv_context *c = uv_ctx(ibcq->context);
	int err = uv_destroy_handle(c, UP_OP_DESTROY_CQ, cq->handle);
	if (err && err != EIO)
		return err;
	if (cq->ch) {
		struct uv_channel *ch = cq->ch;
		pthread_mutex_lock(&ch->mu);
		for (struct uv_cq **p = &ch->cqs; *p; p = &(*p)->ch_next)
			if (*p == cq) {
				*p = cq->ch_next;
				break;
			}
		pthread_mutex_unlock(&ch->mu);
		pthread_mutex_lock(&ibcq->context->mutex);
		ch->ch.refcnt--;
		pthread_mutex_unlock(&ibcq->context->mutex);
	}
	LIST_DEL(c, cqs, struct uv_cq, cq);
	wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->comp_events_completed, cq->ev_reported);
	wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed, cq->async_reported);
	munmap(cq->mem, cq->mem_len);
	pthread_spin_destroy(&cq->lock);
	pthread_mutex_destroy(&cq->resize_mu);
	free(cq->rqs);
	free(cq);
	return 0;
}

/*
 * The next CQ of the channel with an event not yet reported (its ring's
 * events counter moved since we last looked), or NULL. *more says
 * whether others remain.
 */
static struct uv_cq *next_event(struct uv_channel *ch, int *more)
{
	struct uv_cq *found = NULL;
	*more = 0;
	pthread_mutex_lock(&ch->mu);
	for (struct uv_cq *cq = ch->cqs; cq; cq = cq->ch_next) {
		uint32_t ev = uv_load(uv_ring_word(&cq->ring, UP_OFF_EVENTS));
		if (ev == cq->ev_seen)
			continue;
		if (found) {
			*more = 1;
			break;
		}
		found = cq;
		cq->ev_seen++;
		if (ev != cq->ev_seen)
			*more = 1;
	}
	pthread_mutex_unlock(&ch->mu);
	return found;
}

UV_LATEST(ibv_get_cq_event);
int uv_ibv_get_cq_event_1_1(struct ibv_comp_channel *channel, struct ibv_cq **cq_out, void **cq_context)
{
	struct uv_channel *ch = (struct uv_channel *)channel;
	struct uv_context *c = uv_ctx(channel->context);
	int watch_socket = 1;
	for (;;) {
		/* Take what the eventfd counted; it is readable again only for later events. */
		struct pollfd p[2] = {{.fd = channel->fd, .events = POLLIN}, {.fd = c->sock, .events = POLLIN}};
		uint64_t v;
		if (poll(p, 1, 0) > 0 && (p[0].revents & POLLIN))
			(void)!read(channel->fd, &v, sizeof(v));
		int more;
		struct uv_cq *cq = next_event(ch, &more);
		if (cq) {
			if (more) { /* keep the channel readable for the next one */
				v = 1;
				(void)!write(channel->fd, &v, sizeof(v));
			}
			__atomic_add_fetch(&cq->ev_reported, 1, __ATOMIC_RELAXED);
			*cq_out = &cq->cq;
			*cq_context = cq->cq.cq_context;
			return 0;
		}
		if (uv_gone(c)) {
			errno = EIO;
			return -1;
		}
		int fl = fcntl(channel->fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		/* Sleep on the channel, and on the socket to notice the daemon's end. */
		p[0].revents = p[1].revents = 0;
		int r = poll(p, watch_socket ? 2 : 1, watch_socket ? -1 : 10);
		watch_socket = 1;
		if (r > 0 && p[1].revents) {
			uv_pump_socket(c);
			/* Readable and not drained: a request of another thread will read it. */
			struct pollfd q = {.fd = c->sock, .events = POLLIN};
			if (!uv_gone(c) && poll(&q, 1, 0) > 0)
				watch_socket = 0;
		}
	}
}

UV_LATEST(ibv_ack_cq_events);
void uv_ibv_ack_cq_events_1_1(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* SRQs. */

UV_LATEST(ibv_create_srq);
struct ibv_srq *uv_ibv_create_srq_1_1(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
	struct uv_context *c = uv_ctx(pd->context);
	struct uv_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	struct up_create_srq req = {.pd = pd->handle, .max_wr = init->attr.max_wr, .max_sge = init->attr.max_sge,
				    .limit = init->attr.srq_limit};
	struct up_create_srq_resp r;
	int fd;
	int err = uv_call(c, UP_OP_CREATE_SRQ, &req, sizeof(req), -1, &r, sizeof(r), &fd);
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	s->mem_len = r.ring_bytes;
	s->mem = uv_map_ring(fd, r.ring_bytes);
	if (!s->mem || ring_at(&s->ring, s->mem, s->mem_len, 0, r.slots, r.slot_bytes) < 0 ||
	    r.slot_bytes < UP_RECV_SLOT_HEADER + r.max_sge * UP_SGE_LEN) {
		err = s->mem ? EPROTO : errno;
		if (s->mem)
			munmap(s->mem, s->mem_len);
		uv_destroy_handle(c, UP_OP_DESTROY_SRQ, r.srq);
		free(s);
		errno = err;
		return NULL;
	}
	s->handle = r.srq;
	s->max_wr = r.max_wr;
	s->max_sge = r.max_sge;
	s->limit = init->attr.srq_limit;
	s->ring.prod = s->done = uv_load(uv_ring_word(&s->ring, UP_OFF_PRODUCER));
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	pthread_mutex_init(&s->resize_mu, NULL);
	s->srq.context = pd->context;
	s->srq.srq_context = init->srq_context;
	s->srq.pd = pd;
	s->srq.handle = r.srq;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	init->attr.max_wr = r.max_wr;
	init->attr.max_sge = r.max_sge;
	LIST_ADD(c, srqs, s);
	return &s->srq;
}

/*
 * IBV_SRQ_MAX_WR: the daemon moves the slots it has not taken, up to the
 * producer index it read (copied), to a new ring; this end copies the
 * slots posts produced since, under the SRQ's lock, and swaps the rings
 * (proto/SPEC.md, "Resizing an SRQ"). Posts under way wait on the old
 * ring's posted word, which the daemon no longer writes: once the new
 * ring has their slots posted, the word says so too, and the old ring
 * stays mapped until the SRQ is destroyed.
 */
static int resize_srq(struct uv_srq *s, uint32_t max_wr)
{
	struct uv_context *c = uv_ctx(s->srq.context);
	if (max_wr < 1)
		return EINVAL;
	struct uv_old_ring *o = calloc(1, sizeof(*o));
	if (!o)
		return ENOMEM;
	pthread_mutex_lock(&s->resize_mu);
	struct up_resize_srq req = {.srq = s->handle, .max_wr = max_wr};
	struct up_resize_srq_resp r;
	struct uv_ring ring;
	void *mem = NULL;
	int fd = -1;
	int err = uv_call(c, UP_OP_RESIZE_SRQ, &req, sizeof(req), -1, &r, sizeof(r), &fd);
	if (!err && r.slot_bytes != s->ring.size) {
		uv_debug("resize srq %u: the daemon's ring has slots of %u bytes, not %u", s->handle, r.slot_bytes, s->ring.size);
		close(fd);
		err = EPROTO;
	}
	if (!err)
		err = map_resized("srq", s->handle, fd, r.ring_bytes, r.slots, r.slot_bytes, &ring, &mem);
	if (err) {
		pthread_mutex_unlock(&s->resize_mu);
		free(o);
		return err;
	}
	pthread_spin_lock(&s->lock);
	uint32_t prod = s->ring.prod;
	for (uint32_t i = r.copied; i != prod; i++)
		memcpy(uv_ring_slot(&ring, i), uv_ring_slot(&s->ring, i), ring.size);
	ring.prod = prod;
	int wake = 0;
	if (prod != r.copied) {
		uv_store_sc(uv_ring_word(&ring, UP_OFF_PRODUCER), prod);
		wake = uv_load_sc(uv_ring_word(&ring, UP_OFF_FLAGS)) & UP_FLAG_NEED_WAKEUP;
	}
	struct uv_ring old = s->ring;
	o->mem = s->mem;
	o->len = s->mem_len;
	o->next = s->old;
	s->old = o;
	s->mem = mem;
	s->mem_len = r.ring_bytes;
	s->ring = ring;
	s->max_wr = r.max_wr;
	pthread_spin_unlock(&s->lock);
	if (wake)
		uv_ring_doorbell(c);
	uv_wait_posted(&ring, prod);
	uv_store(uv_ring_word(&old, UP_OFF_POSTED), uv_load(uv_ring_word(&ring, UP_OFF_POSTED)));
	pthread_mutex_unlock(&s->resize_mu);
	return 0;
}

UV_LATEST(ibv_modify_srq);
int uv_ibv_modify_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct uv_srq *s = (struct uv_srq *)srq;
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	int err = 0;
	if (mask & IBV_SRQ_MAX_WR)
		err = resize_srq(s, attr->max_wr);
	if (!err && (mask & IBV_SRQ_LIMIT)) {
		struct up_modify_srq req = {.srq = s->handle, .mask = IBV_SRQ_LIMIT, .limit = attr->srq_limit};
		err = uv_call(uv_ctx(srq->context), UP_OP_MODIFY_SRQ, &req, sizeof(req), -1, NULL, 0, NULL);
		if (!err)
			s->limit = attr->srq_limit;
	}
	return err;
}

UV_LATEST(ibv_query_srq);
int uv_ibv_query_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct uv_srq *s = (struct uv_srq *)srq;
	struct up_handle h = {.handle = s->handle};
	struct up_srq_attr r;
	int err = uv_call(uv_ctx(srq->context), UP_OP_QUERY_SRQ, &h, sizeof(h), -1, &r, sizeof(r), NULL);
	if (err)
		return err;
	attr->max_wr = r.max_wr;
	attr->max_sge = r.max_sge;
	/* The daemon does not keep the limit it was given (it answers 0): ours. */
	attr->srq_limit = r.limit ? r.limit : s->limit;
	return 0;
}

UV_LATEST(ibv_destroy_srq);
int uv_ibv_destroy_srq_1_1(struct ibv_srq *srq)
{
	struct uv_srq *s = (struct uv_srq *)srq;
	struct uv_context *c = uv_ctx(srq->context);
	int err = uv_destroy_handle(c, UP_OP_DESTROY_SRQ, s->handle);
	if (err && err != EIO)
		return err;
	LIST_DEL(c, srqs, struct uv_srq, s);
	wait_acked(&srq->mutex, &srq->cond, &srq->events_completed, s->async_reported);
	munmap(s->mem, s->mem_len);
	for (struct uv_old_ring *o = s->old, *n; o; o = n) {
		n = o->next;
		munmap(o->mem, o->len);
		free(o);
	}
	pthread_spin_destroy(&s->lock);
	pthread_mutex_destroy(&s->resize_mu);
	free(s);
	return 0;
}

/* QPs. */

void uv_ah_attr_to(struct up_ah_attr *d, const struct ibv_ah_attr *s)
{
	memset(d, 0, sizeof(*d));
	memcpy(d->dgid, s->grh.dgid.raw, 16);
	d->flow_label = s->grh.flow_label;
	d->sgid_index = s->grh.sgid_index;
	d->hop_limit = s->grh.hop_limit;
	d->traffic_class = s->grh.traffic_class;
	d->is_global = s->is_global;
	d->dlid = s->dlid;
	d->sl = s->sl;
	d->port = s->port_num;
}

static void ah_attr_from(struct ibv_ah_attr *d, const struct up_ah_attr *s)
{
	memset(d, 0, sizeof(*d));
	memcpy(d->grh.dgid.raw, s->dgid, 16);
	d->grh.flow_label = s->flow_label;
	d->grh.sgid_index = s->sgid_index;
	d->grh.hop_limit = s->hop_limit;
	d->grh.traffic_class = s->traffic_class;
	d->is_global = s->is_global;
	d->dlid = s->dlid;
	d->sl = s->sl;
	d->port_num = s->port;
}

UV_LATEST(ibv_create_qp);
struct ibv_qp *uv_ibv_create_qp_1_1(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
	struct uv_context *c = uv_ctx(pd->context);
	if (!init->send_cq || !init->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (init->qp_type != IBV_QPT_RC && init->qp_type != IBV_QPT_UC && init->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct uv_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	struct uv_srq *srq = (struct uv_srq *)init->srq;
	struct up_create_qp req = {
		.pd = pd->handle,
		.type = init->qp_type,
		.send_cq = ((struct uv_cq *)init->send_cq)->handle,
		.recv_cq = ((struct uv_cq *)init->recv_cq)->handle,
		.srq = srq ? srq->handle : 0,
		.max_send_wr = init->cap.max_send_wr,
		.max_recv_wr = srq ? 0 : init->cap.max_recv_wr,
		.max_send_sge = init->cap.max_send_sge,
		.max_recv_sge = init->cap.max_recv_sge,
		.max_inline = init->cap.max_inline_data,
		.sig_all = init->sq_sig_all ? 1 : 0,
	};
	struct up_create_qp_resp *r = &q->caps;
	int fd;
	int err = uv_call(c, UP_OP_CREATE_QP, &req, sizeof(req), -1, r, sizeof(*r), &fd);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	q->mem_len = r->ring_bytes;
	q->mem = uv_map_ring(fd, r->ring_bytes);
	int bad = !q->mem;
	if (!bad)
		bad = ring_at(&q->sq, q->mem, q->mem_len, r->sq_offset, r->sq_slots, r->sq_slot_bytes) < 0 ||
		      r->sq_slot_bytes < UP_SEND_SLOT_HEADER + r->max_send_sge * UP_SGE_LEN ||
		      r->sq_slot_bytes < UP_SEND_SLOT_HEADER + r->max_inline;
	if (!bad && !srq)
		bad = ring_at(&q->rq, q->mem, q->mem_len, r->rq_offset, r->rq_slots, r->rq_slot_bytes) < 0 ||
		      r->rq_slot_bytes < UP_RECV_SLOT_HEADER + r->max_recv_sge * UP_SGE_LEN;
	if (!bad && add_rq_ref((struct uv_cq *)init->recv_cq, r->qpn, srq ? &srq->done : &q->rq_done)) {
		munmap(q->mem, q->mem_len);
		uv_destroy_handle(c, UP_OP_DESTROY_QP, r->qp);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	if (bad) {
		err = q->mem ? EPROTO : errno;
		uv_debug("create qp: the daemon's rings do not fit their memory");
		if (q->mem)
			munmap(q->mem, q->mem_len);
		uv_destroy_handle(c, UP_OP_DESTROY_QP, r->qp);
		free(q);
		errno = err;
		return NULL;
	}
	q->handle = r->qp;
	q->sig_all = req.sig_all;
	q->sq.prod = uv_load(uv_ring_word(&q->sq, UP_OFF_PRODUCER));
	if (!srq)
		q->rq.prod = q->rq_done = uv_load(uv_ring_word(&q->rq, UP_OFF_PRODUCER));
	pthread_spin_init(&q->slock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rlock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_qp *qp = &q->qp;
	qp->context = pd->context;
	qp->qp_context = init->qp_context;
	qp->pd = pd;
	qp->send_cq = init->send_cq;
	qp->recv_cq = init->recv_cq;
	qp->srq = init->srq;
	qp->handle = r->qp;
	qp->qp_num = r->qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = init->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	init->cap.max_send_wr = r->max_send_wr;
	init->cap.max_recv_wr = r->max_recv_wr;
	init->cap.max_send_sge = r->max_send_sge;
	init->cap.max_recv_sge = srq ? init->cap.max_recv_sge : r->max_recv_sge;
	init->cap.max_inline_data = r->max_inline;
	LIST_ADD(c, qps, q);
	uv_debug("create qp %#x: sq %u x %u bytes, rq %u x %u bytes", r->qpn, r->sq_slots, r->sq_slot_bytes,
		 r->rq_slots, r->rq_slot_bytes);
	return qp;
}

/*
 * verbs_context.create_qp_ex: the basic attributes, and send_ops_flags
 * for the ibv_wr_* API (datapath.c); operations that the QP's type or
 * the device cannot do are refused with EOPNOTSUPP, as rdma-core's
 * providers do.
 */
static struct ibv_qp *uv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *x)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	if (!(x->comp_mask & IBV_QP_INIT_ATTR_PD) || !x->pd) {
		errno = EINVAL;
		return NULL;
	}
	int wr_api = !!(x->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
	if ((x->comp_mask & ~known) || ((x->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && x->create_flags) ||
	    (wr_api && (x->send_ops_flags & ~uv_send_ops(uv_ctx(ctx), x->qp_type)))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_qp_init_attr a = {.qp_context = x->qp_context, .send_cq = x->send_cq, .recv_cq = x->recv_cq,
				     .srq = x->srq, .cap = x->cap, .qp_type = x->qp_type, .sq_sig_all = x->sq_sig_all};
	struct ibv_qp *qp = ibv_create_qp(x->pd, &a);
	if (!qp)
		return NULL;
	x->cap = a.cap;
	if (wr_api)
		uv_init_qpx((struct uv_qp *)qp);
	return qp;
}

UV_LATEST(ibv_modify_qp);
int uv_ibv_modify_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct uv_qp *q = (struct uv_qp *)qp;
	struct up_modify_qp req = {.qp = q->handle, .mask = mask};
	struct up_qp_attr *a = &req.attr;
	a->state = attr->qp_state;
	a->cur_state = attr->cur_qp_state;
	a->path_mtu = attr->path_mtu;
	a->qkey = attr->qkey;
	a->rq_psn = attr->rq_psn;
	a->sq_psn = attr->sq_psn;
	a->dest_qpn = attr->dest_qp_num;
	a->access_flags = attr->qp_access_flags;
	a->pkey_index = attr->pkey_index;
	a->port = attr->port_num;
	a->timeout = attr->timeout;
	a->retry_cnt = attr->retry_cnt;
	a->rnr_retry = attr->rnr_retry;
	a->max_rd_atomic = attr->max_rd_atomic;
	a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	a->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_AV)
		uv_ah_attr_to(&a->ah, &attr->ah_attr);
	int err = uv_call(uv_ctx(qp->context), UP_OP_MODIFY_QP, &req, sizeof(req), -1, NULL, 0, NULL);
	if (err)
		return err;
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET && !qp->srq) {
		/* RESET empties the receive queue without completions. */
		pthread_spin_lock(&q->rlock);
		__atomic_store_n(&q->rq_done, q->rq.prod, __ATOMIC_RELEASE);
		pthread_spin_unlock(&q->rlock);
	}
	return 0;
}

UV_LATEST(ibv_query_qp);
int uv_ibv_query_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct uv_qp *q = (struct uv_qp *)qp;
	struct up_handle h = {.handle = q->handle};
	struct up_query_qp_resp r;
	int err = uv_call(uv_ctx(qp->context), UP_OP_QUERY_QP, &h, sizeof(h), -1, &r, sizeof(r), NULL);
	if (err)
		return err;
	const struct up_qp_attr *a = &r.attr;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a->state;
	attr->cur_qp_state = a->state;
	attr->path_mtu = a->path_mtu;
	attr->path_mig_state = IBV_MIG_MIGRATED;
	attr->qkey = a->qkey;
	attr->rq_psn = a->rq_psn;
	attr->sq_psn = a->sq_psn;
	attr->dest_qp_num = a->dest_qpn;
	attr->qp_access_flags = a->access_flags;
	attr->cap.max_send_wr = q->caps.max_send_wr;
	attr->cap.max_recv_wr = q->caps.max_recv_wr;
	attr->cap.max_send_sge = q->caps.max_send_sge;
	attr->cap.max_recv_sge = q->caps.max_recv_sge;
	attr->cap.max_inline_data = q->caps.max_inline;
	ah_attr_from(&attr->ah_attr, &a->ah);
	attr->pkey_index = a->pkey_index;
	attr->port_num = a->port;
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	attr->min_rnr_timer = a->min_rnr_timer;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = attr->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sig_all;
	}
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

UV_LATEST(ibv_destroy_qp);
int uv_ibv_destroy_qp_1_1(struct ibv_qp *qp)
{
	struct uv_qp *q = (struct uv_qp *)qp;
	struct uv_context *c = uv_ctx(qp->context);
	int err = uv_destroy_handle(c, UP_OP_DESTROY_QP, q->handle);
	if (err && err != EIO)
		return err;
	LIST_DEL(c, qps, struct uv_qp, q);
	del_rq_ref((struct uv_cq *)qp->recv_cq, qp->qp_num);
	wait_acked(&qp->mutex, &qp->cond, &qp->events_completed, q->async_reported);
	munmap(q->mem, q->mem_len);
	pthread_spin_destroy(&q->slock);
	pthread_spin_destroy(&q->rlock);
	free(q);
	return 0;
}

/* Address handles. */

UV_LATEST(ibv_create_ah);
struct ibv_ah *uv_ibv_create_ah_1_1(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct uv_ah *ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	struct up_create_ah req = {.pd = pd->handle};
	uv_ah_attr_to(&req.attr, attr);
	struct up_create_ah_resp r;
	int err = uv_call(uv_ctx(pd->context), UP_OP_CREATE_AH, &req, sizeof(req), -1, &r, sizeof(r), NULL);
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->attr = req.attr;
	memcpy(ah->dmac, r.dmac, 6);
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = r.ah;
	return &ah->ah;
}

UV_LATEST(ibv_destroy_ah);
int uv_ibv_destroy_ah_1_1(struct ibv_ah *ah)
{
	int err = uv_destroy_handle(uv_ctx(ah->context), UP_OP_DESTROY_AH, ah->handle);
	if (err && err != EIO)
		return err;
	free(ah);
	return 0;
}

/*
 * Memory windows (SPEC.md, "Memory windows"): the daemon's windows,
 * named by their handle (ibv_mw.handle). verbs.h's inline ibv_alloc_mw,
 * ibv_dealloc_mw and ibv_bind_mw call these through ibv_context.ops.
 */
static struct ibv_mw *uv_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct up_alloc_mw req = {.pd = pd->handle, .type = type};
	struct up_alloc_mw_resp r;
	struct ibv_mw *mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	int err = uv_call(uv_ctx(pd->context), UP_OP_ALLOC_MW, &req, sizeof(req), -1, &r, sizeof(r), NULL);
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->rkey = r.rkey;
	mw->handle = r.mw;
	mw->type = type;
	return mw;
}

static int uv_dealloc_mw(struct ibv_mw *mw)
{
	int err = uv_destroy_handle(uv_ctx(mw->context), UP_OP_DEALLOC_MW, mw->handle);
	if (err && err != EIO) /* EIO: the daemon is gone, and the window with it */
		return err;
	free(mw);
	return 0;
}

/*
 * ibv_bind_mw of a type 1 window (verbs.h checked the type and the
 * region's PD): the daemon binds it at once with the next consumer key,
 * which mw->rkey then holds. EINVAL for a window or QP of another PD
 * or a QP not in RTS; a binding the region does not allow completes
 * with IBV_WC_MW_BIND_ERR and moves the QP to ERR, as on rdma_rxe.
 */
static int uv_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	const struct ibv_mw_bind_info *bi = &b->bind_info;
	if (mw->context != qp->context || (bi->mr && bi->mr->context != qp->context) ||
	    (bi->mw_access_flags & IBV_ACCESS_ZERO_BASED))
		return errno = EINVAL;
	struct up_bind_mw req = {.qp = ((struct uv_qp *)qp)->handle, .mw = mw->handle,
				 .mr = bi->mr ? bi->mr->handle : 0, .flags = b->send_flags, .wr_id = b->wr_id,
				 .addr = bi->addr, .length = bi->length, .access = bi->mw_access_flags};
	struct up_bind_mw_resp r;
	int err = uv_call(uv_ctx(qp->context), UP_OP_BIND_MW, &req, sizeof(req), -1, &r, sizeof(r), NULL);
	if (err)
		return errno = err;
	mw->rkey = r.rkey;
	return 0;
}

void uv_fill_ops(struct uv_context *c)
{
	struct ibv_context_ops *ops = &c->vctx.context.ops;
	ops->poll_cq = uv_poll_cq;
	ops->req_notify_cq = uv_req_notify_cq;
	ops->post_send = uv_post_send;
	ops->post_recv = uv_post_recv;
	ops->post_srq_recv = uv_post_srq_recv;
	ops->alloc_mw = uv_alloc_mw;
	ops->bind_mw = uv_bind_mw;
	ops->dealloc_mw = uv_dealloc_mw;
	ops->_compat_query_device = (void *)ibv_query_device;
	ops->_compat_query_port = (void *)ibv_query_port;
	c->vctx.query_port = uv_query_port;
	c->vctx.query_device_ex = uv_query_device_ex;
	c->vctx.create_qp_ex = uv_create_qp_ex;
	c->vctx.create_cq_ex = uv_create_cq_ex;
	c->vctx.advise_mr = uv_advise_mr;
}
