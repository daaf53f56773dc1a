// libefa.so.1 for uroce: the EFA direct-verbs entry points of rdma-core
// v44 (perftest imports efadv_query_device and efadv_create_qp_ex), each
// answering as rdma-core's libefa does for a device that is not an EFA:
// EOPNOTSUPP, returned or in errno beside a NULL. perftest then keeps to
// the plain verbs (it asks efadv only for SRD, an EFA transport).
//
// Nothing here calls into libibverbs; the library needs only libc. The
// symbol versions are rdma-core's (providers/efa/libefa.map); see efa.map.
#include <errno.h>
#include <stddef.h>

#include <infiniband/efadv.h>

struct ibv_qp *efadv_create_driver_qp(struct ibv_pd *ibvpd, struct ibv_qp_init_attr *attr,
				      uint32_t driver_qp_type)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_qp *efadv_create_qp_ex(struct ibv_context *ibvctx, struct ibv_qp_init_attr_ex *attr_ex,
				  struct efadv_qp_init_attr *efa_attr, uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int efadv_query_device(struct ibv_context *ibvctx, struct efadv_device_attr *attr, uint32_t inlen)
{
	return EOPNOTSUPP;
}

int efadv_query_ah(struct ibv_ah *ibvah, struct efadv_ah_attr *attr, uint32_t inlen)
{
	return EOPNOTSUPP;
}

struct ibv_cq_ex *efadv_create_cq(struct ibv_context *ibvctx, struct ibv_cq_init_attr_ex *attr_ex,
				  struct efadv_cq_init_attr *efa_attr, uint32_t inlen)
{
	errno = EOPNOTSUPP;
	return NULL;
}

// efadv_cq_from_ibv_cq_ex is container_of in rdma-core, meaningful only
// for a CQ that efadv_create_cq made; no such CQ exists here.
struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *ibvcqx)
{
	errno = EOPNOTSUPP;
	return NULL;
}
