// Memory windows of softrdma's libibverbs (mw.c, mw.go).
#ifndef SOFTRDMA_MW_H
#define SOFTRDMA_MW_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

struct srd_mw { struct ibv_mw mw; uintptr_t h; };

// srd_wr_bind mirrors ibv_send_wr's bind_mw member (an anonymous union's,
// which cgo cannot name), at srd_send_wr_bind_off.
struct srd_wr_bind {
	struct ibv_mw *mw;
	uint32_t rkey;
	struct ibv_mw_bind_info bind_info;
};

enum { srd_send_wr_bind_off = offsetof(struct ibv_send_wr, bind_mw) };

_Static_assert(offsetof(struct srd_wr_bind, mw) == offsetof(struct ibv_send_wr, bind_mw.mw) - srd_send_wr_bind_off &&
	offsetof(struct srd_wr_bind, rkey) == offsetof(struct ibv_send_wr, bind_mw.rkey) - srd_send_wr_bind_off &&
	offsetof(struct srd_wr_bind, bind_info) == offsetof(struct ibv_send_wr, bind_mw.bind_info) - srd_send_wr_bind_off &&
	sizeof(struct srd_wr_bind) == sizeof(((struct ibv_send_wr *)0)->bind_mw), "srd_wr_bind is ibv_send_wr's bind_mw");
_Static_assert(offsetof(struct srd_mw, mw) == 0, "srd_mw starts with ibv_mw");

// srd_set_mw_ops puts the memory window operations in a context's ops.
void srd_set_mw_ops(struct ibv_context_ops *ops);

#endif
