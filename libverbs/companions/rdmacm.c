// librdmacm.so.1 for uroce: every function of rdma-core v44's librdmacm
// (the RDMA connection manager and rsockets), so that programs linked with
// it start. uroce has no RDMA CM yet; until it has:
//
//   - the connection manager fails with ENOSYS ("Function not
//     implemented"): rdma_create_event_channel and rdma_create_ep return
//     NULL or -1, rdma_create_id and every call on an ID, event or channel
//     return -1, rdma_getaddrinfo returns EAI_SYSTEM; the stock tools then
//     print, for instance, "failed to create RDMA CM event channel:
//     Function not implemented" (rping, ucmatose);
//   - rdma_get_devices finds no device (NULL, a count of 0, ENODEV);
//   - rsocket fails with ENOSYS and the calls on an rsocket with EBADF, as
//     librdmacm does for a descriptor that is no rsocket; rpoll and rselect
//     are poll and select, which is what librdmacm does with descriptors
//     that are not rsockets;
//   - rdma_event_str names the events as librdmacm does, the destroy and
//     free calls do nothing (there is nothing they could be given).
//
// perftest links the library for -R (rdma_cm connection setup) only;
// without -R it never calls it. Nothing here calls into libibverbs: the
// library needs only libc. The symbol versions are rdma-core's
// (librdmacm/librdmacm.map); see rdmacm.map.
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/select.h>

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

// nocm fails a connection-manager call the way its callers check: -1
// with errno ENOSYS.
static int nocm(void)
{
	errno = ENOSYS;
	return -1;
}

// nors fails a call on an rsocket: no descriptor is one.
static int nors(void)
{
	errno = EBADF;
	return -1;
}

/* The connection manager. */

struct rdma_event_channel *rdma_create_event_channel(void)
{
	errno = ENOSYS;
	return NULL;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	return nocm();
}

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	return nocm();
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	return nocm();
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return nocm();
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
		      int timeout_ms)
{
	return nocm();
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	return nocm();
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	return nocm();
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *qp_init_attr)
{
	return nocm();
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	return nocm();
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	return nocm();
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	return nocm();
}

int rdma_establish(struct rdma_cm_id *id)
{
	return nocm();
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	return nocm();
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	return nocm();
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	return nocm();
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return nocm();
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return nocm();
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	return nocm();
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	return nocm();
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return nocm();
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return nocm();
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	return nocm();
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	return nocm();
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	return nocm();
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return 0;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	if (num_devices)
		*num_devices = 0;
	errno = ENODEV;
	return NULL;
}

void rdma_free_devices(struct ibv_context **list)
{
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR:
		return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE:
		return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED:
		return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED:
		return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED:
		return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN:
		return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR:
		return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE:
		return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default:
		return "UNKNOWN EVENT";
	}
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	return nocm();
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	return nocm();
}

// rdma_getaddrinfo returns EAI_SYSTEM, getaddrinfo's "look at errno",
// rather than librdmacm's bare -1 (EAI_BADFLAGS to gai_strerror, which
// the stock rdma_client would print as "Bad value for ai_flags").
int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	if (res)
		*res = NULL;
	errno = ENOSYS;
	return EAI_SYSTEM;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	return nocm();
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return nocm();
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return nocm();
}

/* rsockets. */

int rsocket(int domain, int type, int protocol)
{
	return nocm();
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	return nors();
}

int rlisten(int socket, int backlog)
{
	return nors();
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return nors();
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	return nors();
}

int rshutdown(int socket, int how)
{
	return nors();
}

int rclose(int socket)
{
	return nors();
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	return nors();
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
		  socklen_t *addrlen)
{
	return nors();
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	return nors();
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	return nors();
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
		socklen_t addrlen)
{
	return nors();
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	return nors();
}

ssize_t rread(int socket, void *buf, size_t count)
{
	return nors();
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return nors();
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return nors();
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	return nors();
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return nors();
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return nors();
}

int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	return nors();
}

int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	return nors();
}

int rfcntl(int socket, int cmd, ...)
{
	return nors();
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	return nors();
}

int riounmap(int socket, void *buf, size_t len)
{
	return nors();
}

size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	return (size_t)nors();
}
