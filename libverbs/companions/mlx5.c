// libmlx5.so.1 for uroce: the mlx5 direct-verbs entry points that programs
// link (perftest imports nine of them), each answering as rdma-core's
// libmlx5 does for a device that mlx5 does not drive. uroce's device is not
// an mlx5 device, so mlx5dv_is_supported says false and everything else
// fails with EOPNOTSUPP (returned, or in errno beside a NULL), and the
// program takes its plain verbs path (perftest's "ibv_wr* API : OFF"
// comes from its table of mlx5 and EFA part ids, not from here).
//
// Nothing here calls into libibverbs: the library loads beside uroce's
// libibverbs.so.1 (or any other) and only needs libc. The symbol versions
// are rdma-core's (providers/mlx5/libmlx5.map); see mlx5.map.
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include <infiniband/mlx5dv.h>

bool mlx5dv_is_supported(struct ibv_device *device)
{
	return false;
}

int mlx5dv_query_device(struct ibv_context *ctx, struct mlx5dv_context *attrs)
{
	return EOPNOTSUPP;
}

int _mlx5dv_query_port(struct ibv_context *context, uint32_t port_num,
			      struct mlx5dv_port *info, size_t info_len)
{
	return EOPNOTSUPP;
}

struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
					       struct mlx5dv_context_attr *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
					struct ibv_qp_init_attr_ex *qp_attr,
					struct mlx5dv_qp_init_attr *mlx5_qp_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

// mlx5dv_qp_ex_from_ibv_qp_ex is container_of in rdma-core, meaningful
// only for a QP that mlx5dv_create_qp made; no such QP exists here.
struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
				   void *out, size_t outlen)
{
	return EOPNOTSUPP;
}

struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *mkey_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
	return EOPNOTSUPP;
}

int mlx5dv_crypto_login(struct ibv_context *context,
			       struct mlx5dv_crypto_login_attr *login_attr)
{
	return EOPNOTSUPP;
}

struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *context,
					     struct mlx5dv_dek_init_attr *init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int mlx5dv_dek_destroy(struct mlx5dv_dek *dek)
{
	return EOPNOTSUPP;
}
