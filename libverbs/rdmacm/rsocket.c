/*
 * uroce's librdmacm.so.1: rsockets are not there. rsocket fails with
 * ENOSYS and the calls on an rsocket with EBADF, as librdmacm does for a
 * descriptor that is no rsocket; rpoll and rselect are poll and select,
 * which is what librdmacm does with descriptors that are not rsockets.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/select.h>

#include <rdma/rsocket.h>

/* nors fails a call on an rsocket: no descriptor is one. */
static int nors(void)
{
	errno = EBADF;
	return -1;
}

int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	errno = ENOSYS;
	return -1;
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
