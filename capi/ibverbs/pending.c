//go:build capi

// Weak placeholders, so that Debian's pyverbs (whose modules need every
// symbol they reference at load time) loads before the library has these
// functions: async events, rdma_create_ep/rdma_get_request and multicast
// are being written elsewhere, and a strong definition in another file of
// this package replaces each of these at link time. Until then each fails
// as libibverbs and librdmacm fail for what a provider does not support.
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define SRD_WEAK __attribute__((weak, visibility("default")))

SRD_WEAK int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	(void)context;
	(void)event;
	errno = EOPNOTSUPP;
	return -1;
}

SRD_WEAK void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

SRD_WEAK int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			    struct ibv_qp_init_attr *qp_init_attr)
{
	(void)id;
	(void)res;
	(void)pd;
	(void)qp_init_attr;
	errno = EOPNOTSUPP;
	return -1;
}

SRD_WEAK void rdma_destroy_ep(struct rdma_cm_id *id) { (void)id; }

SRD_WEAK int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	(void)listen;
	(void)id;
	errno = EOPNOTSUPP;
	return -1;
}

SRD_WEAK int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	(void)id;
	(void)addr;
	(void)context;
	errno = EOPNOTSUPP;
	return -1;
}

SRD_WEAK int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	(void)id;
	(void)mc_join_attr;
	(void)context;
	errno = EOPNOTSUPP;
	return -1;
}

SRD_WEAK int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id;
	(void)addr;
	errno = EOPNOTSUPP;
	return -1;
}
