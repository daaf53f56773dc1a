/*
 * uroce's librdmacm.so.1: rdma_getaddrinfo over libc's getaddrinfo, as
 * librdmacm does for IP addresses (no AF_IB, no ACM route lookup): the
 * first address found, with the QP type and port space the hints ask
 * for, else those of its socket type (RC over TCP by default).
 */
#define _GNU_SOURCE
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#include "ucma.h"

static struct sockaddr *copy_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *p = malloc(len);
	if (p)
		memcpy(p, sa, len);
	return p;
}

/* The hints in getaddrinfo's terms. */
static void to_ai(const struct rdma_addrinfo *h, struct addrinfo *ai)
{
	memset(ai, 0, sizeof(*ai));
	if (h->ai_flags & RAI_PASSIVE)
		ai->ai_flags |= AI_PASSIVE;
	if (h->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	if (h->ai_family == AF_INET || h->ai_family == AF_INET6)
		ai->ai_family = h->ai_family;
	switch (h->ai_qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		ai->ai_socktype = SOCK_STREAM;
		break;
	case IBV_QPT_UD:
		ai->ai_socktype = SOCK_DGRAM;
		break;
	default:
		break;
	}
	switch (h->ai_port_space) {
	case RDMA_PS_TCP:
		ai->ai_protocol = IPPROTO_TCP;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		ai->ai_protocol = IPPROTO_UDP;
		break;
	case RDMA_PS_IB:
		if (ai->ai_socktype == SOCK_STREAM)
			ai->ai_protocol = IPPROTO_TCP;
		else if (ai->ai_socktype == SOCK_DGRAM)
			ai->ai_protocol = IPPROTO_UDP;
		break;
	default:
		break;
	}
}

static int from_ai(struct rdma_addrinfo *r, const struct rdma_addrinfo *h, const struct addrinfo *ai)
{
	if (h->ai_qp_type)
		r->ai_qp_type = h->ai_qp_type;
	else
		r->ai_qp_type = ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
	if (h->ai_port_space)
		r->ai_port_space = h->ai_port_space;
	else
		r->ai_port_space = ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP;
	r->ai_family = ai->ai_family;
	char **canon;
	if (ai->ai_flags & AI_PASSIVE) {
		r->ai_flags = RAI_PASSIVE;
		if (!(r->ai_src_addr = copy_addr(ai->ai_addr, ai->ai_addrlen)))
			return uc_fail(ENOMEM);
		r->ai_src_len = ai->ai_addrlen;
		canon = &r->ai_src_canonname;
	} else {
		if (!(r->ai_dst_addr = copy_addr(ai->ai_addr, ai->ai_addrlen)))
			return uc_fail(ENOMEM);
		r->ai_dst_len = ai->ai_addrlen;
		canon = &r->ai_dst_canonname;
	}
	if (ai->ai_canonname && !(*canon = strdup(ai->ai_canonname)))
		return uc_fail(ENOMEM);
	return 0;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	if (!res || (!node && !service && !hints))
		return uc_fail(EINVAL);
	static const struct rdma_addrinfo none;
	const struct rdma_addrinfo *h = hints ? hints : &none;
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	if (!r)
		return uc_fail(ENOMEM);
	int ret = 0;
	if (node || service) {
		struct addrinfo aih, *ai;
		to_ai(h, &aih);
		ret = getaddrinfo(node, service, hints ? &aih : NULL, &ai);
		if (ret) {
			free(r);
			return ret; /* getaddrinfo's EAI_* code, for gai_strerror */
		}
		ret = from_ai(r, h, ai);
		freeaddrinfo(ai);
	} else {
		r->ai_flags = h->ai_flags;
		r->ai_family = h->ai_family;
		r->ai_qp_type = h->ai_qp_type ? h->ai_qp_type : IBV_QPT_RC;
		r->ai_port_space = h->ai_port_space ? h->ai_port_space : RDMA_PS_TCP;
		if (h->ai_dst_len && h->ai_dst_addr) {
			if ((r->ai_dst_addr = copy_addr(h->ai_dst_addr, h->ai_dst_len)))
				r->ai_dst_len = h->ai_dst_len;
			else
				ret = uc_fail(ENOMEM);
		}
	}
	if (!ret && !r->ai_src_len && h->ai_src_len && h->ai_src_addr) {
		if ((r->ai_src_addr = copy_addr(h->ai_src_addr, h->ai_src_len)))
			r->ai_src_len = h->ai_src_len;
		else
			ret = uc_fail(ENOMEM);
	}
	if (ret) {
		rdma_freeaddrinfo(r);
		return ret;
	}
	*res = r;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}
