// The C layer of softrdma's libibverbs.so.1: the objects a program sees,
// each the header's own structure followed by a handle to its Go side.
// Every structure here comes from Debian's <infiniband/verbs.h>, so the
// layouts are the header's by construction; the mirror structures Go
// reads through are checked against it field by field below.
#ifndef SOFTRDMA_SRD_H
#define SOFTRDMA_SRD_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

// srd_device is one configured device, for the life of the process.
struct srd_device {
	struct ibv_device dev;
	int index; // in the Go device table
};

// srd_context is an open device: verbs_context (whose last member is the
// ibv_context programs hold), then the Go handle.
struct srd_context {
	struct verbs_context vctx;
	uintptr_t h;
};

struct srd_pd { struct ibv_pd pd; uintptr_t h; };
struct srd_mr { struct ibv_mr mr; uintptr_t h; };
// Every CQ and QP has room for its extended form (ibv_cq_ex, ibv_qp_ex,
// which begin with the basic one); ex is the state of the _ex calls
// (cqex.c, qpex.c), NULL for an object made by the basic calls.
struct srd_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	};
	uintptr_t h;
	void *ex;
};
struct srd_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx;
	};
	uintptr_t h;
	void *ex;
};
struct srd_srq { struct ibv_srq srq; uintptr_t h; };
struct srd_ah { struct ibv_ah ah; uintptr_t h; };
struct srd_mw { struct ibv_mw mw; uintptr_t h; }; // mw.c
struct srd_channel { struct ibv_comp_channel ch; uintptr_t h; };

static inline struct srd_context *srd_ctx(struct ibv_context *c)
{
	return (struct srd_context *)((char *)c - offsetof(struct verbs_context, context));
}

// Asynchronous events (async.c): the create functions register each QP,
// CQ and SRQ, the destroy functions forget it first.
void srd_async_open(struct ibv_context *c);
void srd_async_close(struct ibv_context *c);
void srd_async_register(struct ibv_context *c, uintptr_t h, void *obj);
void srd_async_forget(uintptr_t h);

// The _ex calls (cqex.c, qpex.c): the ops the verbs_context hands out.
struct ibv_cq_ex *srd_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *srd_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr);
void srd_qpx_free(void *ex);

// Memory windows (mw.c): the context's ops.
struct ibv_mw *srd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int srd_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int srd_dealloc_mw(struct ibv_mw *mw);
int srd_check_send_ops(enum ibv_qp_type type, uint64_t ops);
int srd_qp_make_ex(struct ibv_qp *qp);

// The members of ibv_send_wr's union wr, named so that Go can read them
// (cgo turns a union into bytes).
struct srd_wr_rdma { uint64_t remote_addr; uint32_t rkey; };
struct srd_wr_atomic { uint64_t remote_addr; uint64_t compare_add; uint64_t swap; uint32_t rkey; };
struct srd_wr_ud { struct ibv_ah *ah; uint32_t remote_qpn; uint32_t remote_qkey; };
struct srd_wr_bind { struct ibv_mw *mw; uint32_t rkey; struct ibv_mw_bind_info bind_info; }; // ibv_send_wr's bind_mw

// Offsets of the anonymous unions Go reads or writes.
enum {
	srd_send_wr_imm_off = offsetof(struct ibv_send_wr, imm_data),
	srd_send_wr_wr_off = offsetof(struct ibv_send_wr, wr),
	srd_send_wr_bind_off = offsetof(struct ibv_send_wr, bind_mw),
	srd_wc_imm_off = offsetof(struct ibv_wc, imm_data),
};

// SRD_SAME asserts that member fa of mirror a is member fb of b, where
// a's members are relative to b's member at base.
#define SRD_SAME(a, fa, b, base, fb) \
	_Static_assert(offsetof(b, base) + offsetof(a, fa) == offsetof(b, fb) && \
		sizeof(((a *)0)->fa) == sizeof(((b *)0)->fb), #a "." #fa)
SRD_SAME(struct srd_wr_rdma, remote_addr, struct ibv_send_wr, wr, wr.rdma.remote_addr);
SRD_SAME(struct srd_wr_rdma, rkey, struct ibv_send_wr, wr, wr.rdma.rkey);
SRD_SAME(struct srd_wr_atomic, remote_addr, struct ibv_send_wr, wr, wr.atomic.remote_addr);
SRD_SAME(struct srd_wr_atomic, compare_add, struct ibv_send_wr, wr, wr.atomic.compare_add);
SRD_SAME(struct srd_wr_atomic, swap, struct ibv_send_wr, wr, wr.atomic.swap);
SRD_SAME(struct srd_wr_atomic, rkey, struct ibv_send_wr, wr, wr.atomic.rkey);
SRD_SAME(struct srd_wr_ud, ah, struct ibv_send_wr, wr, wr.ud.ah);
SRD_SAME(struct srd_wr_ud, remote_qpn, struct ibv_send_wr, wr, wr.ud.remote_qpn);
SRD_SAME(struct srd_wr_ud, remote_qkey, struct ibv_send_wr, wr, wr.ud.remote_qkey);
SRD_SAME(struct srd_wr_bind, mw, struct ibv_send_wr, bind_mw, bind_mw.mw);
SRD_SAME(struct srd_wr_bind, rkey, struct ibv_send_wr, bind_mw, bind_mw.rkey);
SRD_SAME(struct srd_wr_bind, bind_info, struct ibv_send_wr, bind_mw, bind_mw.bind_info);
_Static_assert(offsetof(struct ibv_send_wr, wr.rdma) == offsetof(struct ibv_send_wr, wr), "union wr at its start");
_Static_assert(offsetof(struct srd_context, vctx.context) + sizeof(struct ibv_context) == offsetof(struct srd_context, h),
	"ibv_context is verbs_context's last member");
_Static_assert(offsetof(struct ibv_cq_ex, comp_mask) == sizeof(struct ibv_cq) &&
	offsetof(struct ibv_cq_ex, cqe) == offsetof(struct ibv_cq, cqe) &&
	offsetof(struct ibv_cq_ex, async_events_completed) == offsetof(struct ibv_cq, async_events_completed),
	"ibv_cq_ex begins with ibv_cq");
_Static_assert(offsetof(struct srd_pd, pd) == 0 && offsetof(struct srd_mr, mr) == 0 && offsetof(struct srd_cq, cq) == 0 &&
	offsetof(struct srd_qp, qp) == 0 && offsetof(struct srd_srq, srq) == 0 && offsetof(struct srd_ah, ah) == 0 &&
	offsetof(struct srd_channel, ch) == 0, "each object starts with the header's structure");

#endif
