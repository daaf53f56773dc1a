/*
 * uroce's librdmacm.so.1: the QPs and SRQs an ID owns (rdma_create_qp,
 * rdma_create_srq), on the ID's context, with the CQs and completion
 * channels librdmacm makes when the program gives none. A connected
 * QP is left in INIT: the daemon moves it to RTR and RTS with the values
 * of the connection; a UD QP is made ready to send at once.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "ucma.h"

static int set_errno(int ret)
{
	return ret ? uc_fail(ret) : 0;
}

int uc_qp_to_err(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return 0;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	return set_errno(ibv_modify_qp(id->qp, &a, IBV_QP_STATE));
}

/*
 * The daemon moved the ID's QP (RTR and RTS when connecting): libibverbs
 * learns its state again, which ibv_post_send checks.
 */
void uc_qp_sync_state(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	int err = ibv_query_qp(id->qp, &a, IBV_QP_STATE, &init);
	if (err)
		uc_debug("qp 0x%x: query: %s", id->qp->qp_num, strerror(err));
}

void uc_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->send_cq && id->send_cq != id->recv_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->recv_cq)
		ibv_destroy_cq(id->recv_cq);
	id->send_cq = id->recv_cq = NULL;
	if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	id->send_cq_channel = id->recv_cq_channel = NULL;
}

/* A CQ of size entries with a completion channel of its own, as rdma_get_send_comp expects. */
static int make_cq(struct rdma_cm_id *id, int size, struct ibv_comp_channel **ch, struct ibv_cq **cq)
{
	*ch = ibv_create_comp_channel(id->verbs);
	if (!*ch)
		return -1;
	*cq = ibv_create_cq(id->verbs, size, id, *ch, 0);
	if (!*cq) {
		int e = errno;
		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		return uc_fail(e);
	}
	return 0;
}

static uint32_t random_psn(void)
{
	uint32_t r;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint32_t)time(NULL) * 2654435761u ^ (uint32_t)getpid();
	return r & 0xffffff;
}

static int init_ud_qp(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = RDMA_UDP_QKEY};
	int ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (ret)
		return uc_fail(ret);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		return uc_fail(ret);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = random_psn();
	return set_errno(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

static int init_conn_qp(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1};
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (qp->qp_type == IBV_QPT_RC)
		a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	return set_errno(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	if (!uc_id(id) || !attr || id->qp)
		return uc_fail(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (attr->pd->context != id->verbs) {
		return uc_fail(EINVAL);
	}
	if (!attr->pd)
		return uc_fail(EINVAL);
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return uc_fail(EINVAL);

	/* The CQs the program did not give, made here and owned by the ID. */
	int made_send = 0, made_recv = 0;
	if (!attr->recv_cq && !id->recv_cq && attr->cap.max_recv_wr) {
		if (make_cq(id, attr->cap.max_recv_wr, &id->recv_cq_channel, &id->recv_cq))
			return -1;
		made_recv = 1;
	}
	if (!attr->send_cq && !id->send_cq && attr->cap.max_send_wr) {
		if (make_cq(id, attr->cap.max_send_wr, &id->send_cq_channel, &id->send_cq))
			goto err_cqs;
		made_send = 1;
	}
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;

	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp)
		goto err_cqs;
	if (qp->qp_type == IBV_QPT_UD ? init_ud_qp(qp) : init_conn_qp(qp)) {
		int e = errno;
		ibv_destroy_qp(qp);
		errno = e;
		goto err_cqs;
	}
	id->pd = qp->pd;
	id->qp = qp;
	return 0;

err_cqs:;
	int e = errno;
	if (made_send) {
		ibv_destroy_cq(id->send_cq);
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq = NULL;
		id->send_cq_channel = NULL;
	}
	if (made_recv) {
		ibv_destroy_cq(id->recv_cq);
		ibv_destroy_comp_channel(id->recv_cq_channel);
		id->recv_cq = NULL;
		id->recv_cq_channel = NULL;
	}
	return uc_fail(e);
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!uc_id(id) || !qp_init_attr)
		return uc_fail(EINVAL);
	/* ibv_qp_init_attr is the head of ibv_qp_init_attr_ex. */
	struct ibv_qp_init_attr_ex ex;
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	int ret = rdma_create_qp_ex(id, &ex);
	memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!uc_id(id))
		return;
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	uc_destroy_cqs(id);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!uc_id(id) || !attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return uc_fail(EINVAL);
	if (attr->srq_type != IBV_SRQT_BASIC)
		return uc_fail(EOPNOTSUPP); /* uroce has no XRC */
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (!attr->pd)
		return uc_fail(EINVAL);
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!uc_id(id) || !attr)
		return uc_fail(EINVAL);
	/* ibv_srq_init_attr is the head of ibv_srq_init_attr_ex. */
	struct ibv_srq_init_attr_ex ex;
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr));
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ex.pd = pd;
	int ret = rdma_create_srq_ex(id, &ex);
	memcpy(attr, &ex, sizeof(*attr));
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!uc_id(id))
		return;
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}
