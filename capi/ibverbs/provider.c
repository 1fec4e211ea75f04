//go:build capi

// rdma-core's provider interface (IBVERBS_PRIVATE_34), which the provider
// libraries Debian's perftest links (libmlx5, libefa) reference and bind
// at load time. softrdma's libibverbs loads no provider: registering one
// is a no-op, so a provider never gets a device, and the rest, which only
// a provider's code for its own device calls, stops the program with a
// message instead of pretending to work.
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <errno.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#define SRD_EXPORT __attribute__((visibility("default")))

static void srd_provider_abort(const char *name)
{
	fprintf(stderr, "softrdma libibverbs: %s is rdma-core's provider interface, which softrdma does not implement\n", name);
	abort();
}

// verbs_register_driver_34 runs in each provider library's constructor.
SRD_EXPORT void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

// Without ibv_fork_init (which softrdma does not support), libibverbs'
// fork ranges do nothing and succeed.
SRD_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

SRD_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

SRD_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
					   uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)context;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	return EOPNOTSUPP;
}

#define SRD_PROVIDER_STUB(name) \
	SRD_EXPORT void name(void) { srd_provider_abort(#name); }
SRD_PROVIDER_STUB(__verbs_log)
SRD_PROVIDER_STUB(_verbs_init_and_alloc_context)
SRD_PROVIDER_STUB(execute_ioctl)
SRD_PROVIDER_STUB(ibv_cmd_advise_mr)
SRD_PROVIDER_STUB(ibv_cmd_alloc_dm)
SRD_PROVIDER_STUB(ibv_cmd_alloc_mw)
SRD_PROVIDER_STUB(ibv_cmd_alloc_pd)
SRD_PROVIDER_STUB(ibv_cmd_attach_mcast)
SRD_PROVIDER_STUB(ibv_cmd_close_xrcd)
SRD_PROVIDER_STUB(ibv_cmd_create_ah)
SRD_PROVIDER_STUB(ibv_cmd_create_counters)
SRD_PROVIDER_STUB(ibv_cmd_create_cq_ex)
SRD_PROVIDER_STUB(ibv_cmd_create_flow)
SRD_PROVIDER_STUB(ibv_cmd_create_flow_action_esp)
SRD_PROVIDER_STUB(ibv_cmd_create_qp_ex)
SRD_PROVIDER_STUB(ibv_cmd_create_qp_ex2)
SRD_PROVIDER_STUB(ibv_cmd_create_rwq_ind_table)
SRD_PROVIDER_STUB(ibv_cmd_create_srq)
SRD_PROVIDER_STUB(ibv_cmd_create_srq_ex)
SRD_PROVIDER_STUB(ibv_cmd_create_wq)
SRD_PROVIDER_STUB(ibv_cmd_dealloc_mw)
SRD_PROVIDER_STUB(ibv_cmd_dealloc_pd)
SRD_PROVIDER_STUB(ibv_cmd_dereg_mr)
SRD_PROVIDER_STUB(ibv_cmd_destroy_ah)
SRD_PROVIDER_STUB(ibv_cmd_destroy_counters)
SRD_PROVIDER_STUB(ibv_cmd_destroy_cq)
SRD_PROVIDER_STUB(ibv_cmd_destroy_flow)
SRD_PROVIDER_STUB(ibv_cmd_destroy_flow_action)
SRD_PROVIDER_STUB(ibv_cmd_destroy_qp)
SRD_PROVIDER_STUB(ibv_cmd_destroy_rwq_ind_table)
SRD_PROVIDER_STUB(ibv_cmd_destroy_srq)
SRD_PROVIDER_STUB(ibv_cmd_destroy_wq)
SRD_PROVIDER_STUB(ibv_cmd_detach_mcast)
SRD_PROVIDER_STUB(ibv_cmd_free_dm)
SRD_PROVIDER_STUB(ibv_cmd_get_context)
SRD_PROVIDER_STUB(ibv_cmd_modify_cq)
SRD_PROVIDER_STUB(ibv_cmd_modify_flow_action_esp)
SRD_PROVIDER_STUB(ibv_cmd_modify_qp)
SRD_PROVIDER_STUB(ibv_cmd_modify_qp_ex)
SRD_PROVIDER_STUB(ibv_cmd_modify_srq)
SRD_PROVIDER_STUB(ibv_cmd_modify_wq)
SRD_PROVIDER_STUB(ibv_cmd_open_qp)
SRD_PROVIDER_STUB(ibv_cmd_open_xrcd)
SRD_PROVIDER_STUB(ibv_cmd_query_context)
SRD_PROVIDER_STUB(ibv_cmd_query_device_any)
SRD_PROVIDER_STUB(ibv_cmd_query_mr)
SRD_PROVIDER_STUB(ibv_cmd_query_port)
SRD_PROVIDER_STUB(ibv_cmd_query_qp)
SRD_PROVIDER_STUB(ibv_cmd_query_srq)
SRD_PROVIDER_STUB(ibv_cmd_read_counters)
SRD_PROVIDER_STUB(ibv_cmd_reg_dm_mr)
SRD_PROVIDER_STUB(ibv_cmd_reg_dmabuf_mr)
SRD_PROVIDER_STUB(ibv_cmd_reg_mr)
SRD_PROVIDER_STUB(ibv_cmd_rereg_mr)
SRD_PROVIDER_STUB(ibv_cmd_resize_cq)
SRD_PROVIDER_STUB(verbs_allow_disassociate_destroy)
SRD_PROVIDER_STUB(verbs_init_cq)
SRD_PROVIDER_STUB(verbs_open_device)
SRD_PROVIDER_STUB(verbs_set_ops)
SRD_PROVIDER_STUB(verbs_uninit_context)
