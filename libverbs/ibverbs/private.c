/*
 * Symbols a program never calls but other libraries import, and every
 * binary here is linked BIND_NOW: each must exist with its version, or
 * the loader refuses to run the program.
 *
 * - IBVERBS_PRIVATE_34: the provider interface (driver.h), which
 *   librdmacm, libmlx5 and libefa import. uroce has no providers: the
 *   calls fail with EOPNOTSUPP; a provider's constructor registering
 *   itself (verbs_register_driver_34) is accepted and ignored.
 * - The IBVERBS_1.0 compatibility versions of the oldest functions,
 *   which took rdma-core's 1.0-era structs: they fail with ENOSYS.
 * - ibv_register_driver@IBVERBS_1.1, the old provider registration.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "uverbs.h"

/* The provider interface. */

#define CMD_STUB(name) \
	int name(void);    \
	int name(void)     \
	{                  \
		return EOPNOTSUPP; \
	}

CMD_STUB(ibv_cmd_advise_mr)
CMD_STUB(ibv_cmd_alloc_dm)
CMD_STUB(ibv_cmd_alloc_mw)
CMD_STUB(ibv_cmd_alloc_pd)
CMD_STUB(ibv_cmd_attach_mcast)
CMD_STUB(ibv_cmd_close_xrcd)
CMD_STUB(ibv_cmd_create_ah)
CMD_STUB(ibv_cmd_create_counters)
CMD_STUB(ibv_cmd_create_cq)
CMD_STUB(ibv_cmd_create_cq_ex)
CMD_STUB(ibv_cmd_create_flow)
CMD_STUB(ibv_cmd_create_flow_action_esp)
CMD_STUB(ibv_cmd_create_qp)
CMD_STUB(ibv_cmd_create_qp_ex2)
CMD_STUB(ibv_cmd_create_qp_ex)
CMD_STUB(ibv_cmd_create_rwq_ind_table)
CMD_STUB(ibv_cmd_create_srq)
CMD_STUB(ibv_cmd_create_srq_ex)
CMD_STUB(ibv_cmd_create_wq)
CMD_STUB(ibv_cmd_dealloc_mw)
CMD_STUB(ibv_cmd_dealloc_pd)
CMD_STUB(ibv_cmd_dereg_mr)
CMD_STUB(ibv_cmd_destroy_ah)
CMD_STUB(ibv_cmd_destroy_counters)
CMD_STUB(ibv_cmd_destroy_cq)
CMD_STUB(ibv_cmd_destroy_flow)
CMD_STUB(ibv_cmd_destroy_flow_action)
CMD_STUB(ibv_cmd_destroy_qp)
CMD_STUB(ibv_cmd_destroy_rwq_ind_table)
CMD_STUB(ibv_cmd_destroy_srq)
CMD_STUB(ibv_cmd_destroy_wq)
CMD_STUB(ibv_cmd_detach_mcast)
CMD_STUB(ibv_cmd_free_dm)
CMD_STUB(ibv_cmd_get_context)
CMD_STUB(ibv_cmd_modify_cq)
CMD_STUB(ibv_cmd_modify_flow_action_esp)
CMD_STUB(ibv_cmd_modify_qp)
CMD_STUB(ibv_cmd_modify_qp_ex)
CMD_STUB(ibv_cmd_modify_srq)
CMD_STUB(ibv_cmd_modify_wq)
CMD_STUB(ibv_cmd_open_qp)
CMD_STUB(ibv_cmd_open_xrcd)
CMD_STUB(ibv_cmd_poll_cq)
CMD_STUB(ibv_cmd_post_recv)
CMD_STUB(ibv_cmd_post_send)
CMD_STUB(ibv_cmd_post_srq_recv)
CMD_STUB(ibv_cmd_query_context)
CMD_STUB(ibv_cmd_query_device_any)
CMD_STUB(ibv_cmd_query_mr)
CMD_STUB(ibv_cmd_query_port)
CMD_STUB(ibv_cmd_query_qp)
CMD_STUB(ibv_cmd_query_srq)
CMD_STUB(ibv_cmd_read_counters)
CMD_STUB(ibv_cmd_reg_dm_mr)
CMD_STUB(ibv_cmd_reg_dmabuf_mr)
CMD_STUB(ibv_cmd_reg_mr)
CMD_STUB(ibv_cmd_req_notify_cq)
CMD_STUB(ibv_cmd_rereg_mr)
CMD_STUB(ibv_cmd_resize_cq)
CMD_STUB(execute_ioctl)

/* driver.h: bool verbs_allow_disassociate_destroy. */
_Bool verbs_allow_disassociate_destroy;

unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link)
{
	(void)link;
	return num_attrs;
}

void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...);
void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...)
{
	(void)ctx, (void)level, (void)fmt;
}

void *_verbs_init_and_alloc_context(void *device, int cmd_fd, size_t alloc_size, void *context_offset,
				    uint32_t driver_id);
void *_verbs_init_and_alloc_context(void *device, int cmd_fd, size_t alloc_size, void *context_offset,
				    uint32_t driver_id)
{
	(void)device, (void)cmd_fd, (void)alloc_size, (void)context_offset, (void)driver_id;
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	/* A provider's own open (mlx5dv_open_device): uroce's contexts are no provider's. */
	(void)device, (void)private_data;
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_register_driver_34(const void *ops);
void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

void verbs_set_ops(struct verbs_context *vctx, const void *ops);
void verbs_set_ops(struct verbs_context *vctx, const void *ops)
{
	(void)vctx, (void)ops;
}

void verbs_uninit_context(struct verbs_context *vctx);
void verbs_uninit_context(struct verbs_context *vctx)
{
	(void)vctx;
}

int verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
		  void *cq_context);
int verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
		  void *cq_context)
{
	cq->context = context;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->comp_events_completed = 0;
	cq->async_events_completed = 0;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
	return 0;
}

/* ibv_register_driver@IBVERBS_1.1 (not a default version: only old binaries bind to it). */
void uv_register_driver_1_1(const char *name, void *init);
__asm__(".symver uv_register_driver_1_1, ibv_register_driver@IBVERBS_1.1");
void uv_register_driver_1_1(const char *name, void *init)
{
	(void)name, (void)init;
}

/* The IBVERBS_1.0 versions. */

#define COMPAT_PTR(name)                                                 \
	void *uv_compat_##name(void);                                    \
	__asm__(".symver uv_compat_" #name ", ibv_" #name "@IBVERBS_1.0"); \
	void *uv_compat_##name(void)                                     \
	{                                                                \
		errno = ENOSYS;                                          \
		return NULL;                                             \
	}
#define COMPAT_INT(name, ret)                                            \
	int uv_compat_##name(void);                                      \
	__asm__(".symver uv_compat_" #name ", ibv_" #name "@IBVERBS_1.0"); \
	int uv_compat_##name(void)                                       \
	{                                                                \
		errno = ENOSYS;                                          \
		return ret;                                              \
	}
#define COMPAT_VOID(name)                                                \
	void uv_compat_##name(void);                                     \
	__asm__(".symver uv_compat_" #name ", ibv_" #name "@IBVERBS_1.0"); \
	void uv_compat_##name(void)                                      \
	{                                                                \
	}

COMPAT_PTR(get_device_list)
COMPAT_VOID(free_device_list)
COMPAT_PTR(get_device_name)
COMPAT_INT(get_device_guid, 0)
COMPAT_PTR(open_device)
COMPAT_INT(close_device, ENOSYS)
COMPAT_INT(get_async_event, -1)
COMPAT_VOID(ack_async_event)
COMPAT_INT(query_device, ENOSYS)
COMPAT_INT(query_port, ENOSYS)
COMPAT_INT(query_gid, -1)
COMPAT_INT(query_pkey, -1)
COMPAT_PTR(alloc_pd)
COMPAT_INT(dealloc_pd, ENOSYS)
COMPAT_PTR(reg_mr)
COMPAT_INT(dereg_mr, ENOSYS)
COMPAT_PTR(create_cq)
COMPAT_INT(resize_cq, ENOSYS)
COMPAT_INT(destroy_cq, ENOSYS)
COMPAT_INT(get_cq_event, -1)
COMPAT_VOID(ack_cq_events)
COMPAT_PTR(create_srq)
COMPAT_INT(modify_srq, ENOSYS)
COMPAT_INT(query_srq, ENOSYS)
COMPAT_INT(destroy_srq, ENOSYS)
COMPAT_PTR(create_qp)
COMPAT_INT(query_qp, ENOSYS)
COMPAT_INT(modify_qp, ENOSYS)
COMPAT_INT(destroy_qp, ENOSYS)
COMPAT_PTR(create_ah)
COMPAT_INT(destroy_ah, ENOSYS)
COMPAT_INT(attach_mcast, ENOSYS)
COMPAT_INT(detach_mcast, ENOSYS)

/*
 * uroce's own bridge for its librdmacm.so.1 (UROCE_PRIVATE_1): RDMA CM
 * requests go over the session of the ibv_context the CM opened, so the
 * QPs it connects are that session's. Not for programs.
 */
int uroce_call(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp,
	       size_t resplen, int *fd_out);
uint32_t uroce_qp_handle(struct ibv_qp *qp);
int uroce_context_gone(struct ibv_context *ctx);

int uroce_call(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp,
	       size_t resplen, int *fd_out)
{
	if (!ctx)
		return EINVAL;
	return uv_call(uv_ctx(ctx), op, req, reqlen, -1, resp, resplen, fd_out);
}

uint32_t uroce_qp_handle(struct ibv_qp *qp)
{
	return qp ? ((struct uv_qp *)qp)->handle : 0;
}

int uroce_context_gone(struct ibv_context *ctx)
{
	return ctx ? uv_gone(uv_ctx(ctx)) : 1;
}
