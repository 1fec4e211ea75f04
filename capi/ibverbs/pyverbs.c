//go:build capi

// The rest of the functions Debian's python3-pyverbs links against (its
// Cython modules are loaded with RTLD_NOW, so every one must exist for
// "import pyverbs.device" to work): sharing objects between processes
// (ibv_import_*), dma-buf regions, the fork state, the data placement
// order of a QP, and librdmacm's ECE accessors. docs/PYVERBS.md lists
// rdma-core's Python tests on softrdma.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "srd.h"

#define SRD_EXPORT __attribute__((visibility("default")))

// Importing a device, PD, MR or DM shares a kernel object through the
// uverbs command file; a softrdma context has none (its cmd_fd is a
// placeholder descriptor), so there is nothing to import from: EOPNOTSUPP, as libibverbs returns
// for a provider without import support.
SRD_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

SRD_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

SRD_EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }

SRD_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

SRD_EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }

SRD_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

SRD_EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }

// A dma-buf is device memory a kernel driver exports; the engine reaches
// only the process's own memory.
SRD_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					    int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

// softrdma pins nothing: the engine reads and writes the program's memory
// through its own address space, so a fork cannot take pages from under
// a registration and ibv_fork_init is not needed (the kernel's answer on
// a kernel with copy-on-fork for pinned pages).
SRD_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

// ibv_query_qp_data_in_order: the engine promises no order of data
// placement within or between messages beyond the IBTA's, so 0.
SRD_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

// ibv_rereg_mr changes a registration in place. libibverbs checks the
// arguments, then asks the kernel, which refuses for rxe on Linux 6.1
// (IBV_REREG_MR_ERR_CMD, EOPNOTSUPP); softrdma answers the same.
SRD_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)pd;
	if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_CMD;
}

// Enhanced connection establishment is a vendor option exchanged in the
// CM's private fields; softrdma has none to offer.
SRD_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	errno = EOPNOTSUPP;
	return -1;
}

SRD_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	errno = EOPNOTSUPP;
	return -1;
}
