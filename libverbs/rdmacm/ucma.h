/*
 * uroce's librdmacm.so.1: the library's own types. The RDMA CM runs in
 * the daemon (proto/SPEC.md, "Connection management"); this library keeps
 * the programs' view of it (<rdma/rdma_cma.h>'s structs) and speaks the
 * CM requests over the session of the ibv_context it opened with uroce's
 * libibverbs, so that the QPs the programs create on id->verbs are the
 * ones the daemon connects.
 */
#ifndef UROCE_UCMA_H
#define UROCE_UCMA_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "uproto.h"

/* libibverbs' bridge (UROCE_PRIVATE_1, ibverbs/private.c). */
int uroce_call(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp,
	       size_t resplen, int *fd_out);
uint32_t uroce_qp_handle(struct ibv_qp *qp);
int uroce_context_gone(struct ibv_context *ctx);

#define UC_CONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Private data: a REP's is the largest of the CM messages'. */
#define UC_MAX_PRIVATE_DATA 196
#define UC_REQ_PRIVATE_DATA 56 /* a REQ's after rdma_cm's addressing header */
#define UC_IB_REQ_PRIVATE_DATA 92
#define UC_REJ_PRIVATE_DATA 148

/* A device: one context (one daemon session) for the whole process. */
struct uc_dev {
	struct ibv_device *dev;
	struct ibv_context *verbs;
	struct ibv_pd *pd; /* the IDs' default PD */
	int max_qp_wr;
	uint8_t max_init_depth; /* max_qp_init_rd_atom */
	uint8_t max_resp_res;	/* max_qp_rd_atom */
	struct uc_dev *next;
};

/* The marks of live objects: a program's destroyed one is found dead (see bury). */
#define UC_CHANNEL_LIVE 0x6e684375u
#define UC_ID_LIVE 0x64496375u
#define UC_DEAD 0xdeadu

struct uc_channel {
	struct rdma_event_channel ch; /* the program's view */
	uint32_t magic;
	uint32_t handle;
	struct uc_dev *dev;
	/*
	 * Threads in rdma_get_cm_event: a channel destroyed under them
	 * (rping's event thread at exit) is freed by the last one out.
	 */
	int users;
	int closed;
};

struct uc_id {
	struct rdma_cm_id id; /* the program's view */
	uint32_t magic;
	uint32_t handle;
	struct uc_dev *dev;
	int sync;    /* id.channel is the ID's own: the calls wait for their events */
	int removed; /* DEVICE_REMOVAL reported */
	/*
	 * Events made (handed out, or held for a channel), held, and
	 * acknowledged: rdma_destroy_id and rdma_migrate_id wait for those
	 * handed out.
	 */
	unsigned reported, held, completed;
	uint8_t init_depth, resp_res;
	uint8_t tos;
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep's, for rdma_get_request */
	void *connect;			       /* rdma_addrinfo's ai_connect, sent first */
	size_t connect_len;
	struct ibv_ece local_ece, remote_ece;
	struct ibv_sa_path_rec path; /* id.route.path_rec */
	uint32_t sgid_index;	     /* of id.route.addr's source GID */
	struct uc_mcast *mcast;	     /* the groups joined */
	struct uc_id *next;
};

/* A group an ID joined (rdma_join_multicast). */
struct uc_mcast {
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	void *context;
	int send_only; /* not attached to the ID's QP */
	int attached;
	int ipfd; /* the socket holding the IP-level membership, or -1 */
	struct uc_mcast *next;
};

struct uc_event {
	struct rdma_cm_event ev; /* the program's view */
	struct uc_id *owner;	 /* whose count the acknowledgement completes */
	uint8_t private_data[UC_MAX_PRIVATE_DATA];
	/* Taken from the daemon but not handed out yet: waiting on held_by. */
	struct uc_channel *held_by;
	struct uc_event *held_next;
};

static inline int uc_fail(int err)
{
	errno = err;
	return -1;
}

int uc_id_known(const struct rdma_cm_id *id);

/*
 * The library's ID behind a program's: NULL for NULL, one destroyed, or
 * a pointer that was never an ID. The pointer is looked up among the
 * live IDs before it is read: a program that passes one from memory it
 * freed (perftest 4.5's -R client does when it retries) gets EINVAL,
 * not a segmentation fault in the library.
 */
static inline struct uc_id *uc_id(struct rdma_cm_id *id)
{
	if (!id || !uc_id_known(id))
		return NULL;
	struct uc_id *u = UC_CONTAINER(id, struct uc_id, id);
	return u->magic == UC_ID_LIVE ? u : NULL;
}

void uc_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* qp.c */
void uc_destroy_cqs(struct rdma_cm_id *id);
int uc_qp_to_err(struct rdma_cm_id *id);
void uc_qp_sync_state(struct rdma_cm_id *id);

/* Addresses: struct sockaddr and the protocol's CMAddr (cma.c). */
int uc_addr_in(const struct sockaddr *sa, struct up_cm_addr *a);
void uc_addr_out(const struct up_cm_addr *a, struct sockaddr_storage *ss);
socklen_t uc_addr_len(const struct sockaddr *sa);

#endif
