//go:build capi

// rdma_join_multicast, rdma_join_multicast_ex and rdma_leave_multicast on
// RoCE (mcast.go): the ID's QP, if it has one, is attached to the group's
// GID and MULTICAST_JOIN follows with the address handle attributes, QP
// number and Q_Key to send to the group, and the join's context as its
// private data. docs/DESIGN.md, "The C ABI library", describes it.
#include <errno.h>
#include "srdcm.h"
#include "_cgo_export.h"

#define SRD_EXPORT __attribute__((visibility("default")))
#define SRD_ERR(e) (errno = (e), -1)

SRD_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	if (!id || !addr)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_join(((struct srd_cm_id *)id)->h, addr, context);
	return err ? SRD_ERR(err) : srd_cm_complete(id);
}

// rdma_join_multicast_ex: a full member or a send-only full member (on
// RoCE both only attach the QP; there is no SA to tell). Other join types
// are InfiniBand's and not supported.
SRD_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!id || !attr)
		return SRD_ERR(EINVAL);
	uint32_t need = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	if ((attr->comp_mask & need) != need || (attr->comp_mask & ~need) || !attr->addr)
		return SRD_ERR(EINVAL);
	if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return SRD_ERR(EINVAL);
	return rdma_join_multicast(id, attr->addr, context);
}

SRD_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_leave(((struct srd_cm_id *)id)->h, addr);
	return err ? SRD_ERR(err) : 0;
}
