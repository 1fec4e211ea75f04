//go:build capi

// ibv_create_qp_ex and the work request API of ibv_qp_ex (ibv_wr_start,
// ibv_wr_send, ibv_wr_set_sge, ibv_wr_complete, ... the inline functions
// of <infiniband/verbs.h> call through the ibv_qp_ex the program holds).
// Between wr_start and wr_complete the work requests are built in the
// QP's batch, as ibv_send_wr entries (inline data copied at once, as the
// API requires); wr_complete posts them in one ibv_post_send, wr_abort
// drops them. docs/DESIGN.md, "The C ABI library", describes it.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "srd.h"
#include "_cgo_export.h"

// The send operations a QP may be created with: all but TSO and atomic
// writes.
#define SRD_QP_SEND_OPS                                                                                 \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |          \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |    \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |       \
	 IBV_QP_EX_WITH_BIND_MW)

// srd_qpx is a QP's batch of work requests. Until wr_complete, an entry's
// sg_list is unset (first[i] indexes sges) and an inline SGE's addr is an
// offset in inl (isinl marks it), so that growing the arrays moves nothing
// a pointer refers to.
struct srd_qpx {
	struct ibv_send_wr *wrs;
	size_t *first;
	size_t nwr, capwr;
	struct ibv_sge *sges;
	unsigned char *isinl;
	size_t nsge, capsge;
	unsigned char *inl;
	size_t ninl, capinl;
	int err;
};

static struct srd_qpx *srd_qpx(struct ibv_qp_ex *qp) { return ((struct srd_qp *)qp)->ex; }

static int srd_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 8;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

// srd_new_wr starts a work request of opcode with the QP's wr_id and
// wr_flags, or returns NULL (and the batch fails) if memory runs out.
static struct ibv_send_wr *srd_new_wr(struct ibv_qp_ex *qp, enum ibv_wr_opcode opcode)
{
	struct srd_qpx *x = srd_qpx(qp);
	if (x->err)
		return NULL;
	size_t capf = x->capwr;
	if (srd_grow((void **)&x->wrs, &x->capwr, x->nwr + 1, sizeof(*x->wrs)) ||
	    srd_grow((void **)&x->first, &capf, x->nwr + 1, sizeof(*x->first))) {
		x->err = ENOMEM;
		return NULL;
	}
	struct ibv_send_wr *wr = &x->wrs[x->nwr];
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = qp->wr_id;
	wr->send_flags = qp->wr_flags;
	wr->opcode = opcode;
	x->first[x->nwr] = x->nsge;
	x->nwr++;
	return wr;
}

// srd_cur_wr is the work request the setters apply to, or NULL (the batch
// fails with EINVAL) if there is none.
static struct ibv_send_wr *srd_cur_wr(struct ibv_qp_ex *qp)
{
	struct srd_qpx *x = srd_qpx(qp);
	if (x->err)
		return NULL;
	if (!x->nwr) {
		x->err = EINVAL;
		return NULL;
	}
	return &x->wrs[x->nwr - 1];
}

// srd_add_sge appends an SGE to the current work request.
static int srd_add_sge(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length, int inl)
{
	struct srd_qpx *x = srd_qpx(qp);
	size_t capi = x->capsge;
	if (srd_grow((void **)&x->sges, &x->capsge, x->nsge + 1, sizeof(*x->sges)) ||
	    srd_grow((void **)&x->isinl, &capi, x->nsge + 1, 1)) {
		x->err = ENOMEM;
		return -1;
	}
	x->sges[x->nsge] = (struct ibv_sge){.addr = addr, .length = length, .lkey = lkey};
	x->isinl[x->nsge] = (unsigned char)inl;
	x->nsge++;
	x->wrs[x->nwr - 1].num_sge++;
	return 0;
}

static void srd_wr_start(struct ibv_qp_ex *qp)
{
	struct srd_qpx *x = srd_qpx(qp);
	x->nwr = x->nsge = x->ninl = 0;
	x->err = 0;
}

static void srd_wr_abort(struct ibv_qp_ex *qp) { srd_wr_start(qp); }

static int srd_wr_complete(struct ibv_qp_ex *qp)
{
	struct srd_qpx *x = srd_qpx(qp);
	int err = x->err;
	if (!err && x->nwr) {
		for (size_t j = 0; j < x->nsge; j++)
			if (x->isinl[j])
				x->sges[j].addr = (uintptr_t)(x->inl + x->sges[j].addr);
		for (size_t i = 0; i < x->nwr; i++) {
			x->wrs[i].sg_list = x->wrs[i].num_sge ? &x->sges[x->first[i]] : NULL;
			x->wrs[i].next = i + 1 < x->nwr ? &x->wrs[i + 1] : NULL;
		}
		struct ibv_send_wr *bad;
		err = qp->qp_base.context->ops.post_send(&qp->qp_base, x->wrs, &bad);
	}
	srd_wr_start(qp);
	return err;
}

static void srd_wr_send(struct ibv_qp_ex *qp) { srd_new_wr(qp, IBV_WR_SEND); }

static void srd_wr_send_imm(struct ibv_qp_ex *qp, __be32 imm)
{
	struct ibv_send_wr *wr = srd_new_wr(qp, IBV_WR_SEND_WITH_IMM);
	if (wr)
		wr->imm_data = imm;
}

static void srd_wr_send_inv(struct ibv_qp_ex *qp, uint32_t rkey)
{
	struct ibv_send_wr *wr = srd_new_wr(qp, IBV_WR_SEND_WITH_INV);
	if (wr)
		wr->invalidate_rkey = rkey;
}

static void srd_wr_local_inv(struct ibv_qp_ex *qp, uint32_t rkey)
{
	struct ibv_send_wr *wr = srd_new_wr(qp, IBV_WR_LOCAL_INV);
	if (wr)
		wr->invalidate_rkey = rkey;
}

static void srd_wr_rdma(struct ibv_qp_ex *qp, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *wr = srd_new_wr(qp, op);
	if (!wr)
		return;
	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
	wr->imm_data = imm;
}

static void srd_wr_rdma_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr)
{
	srd_wr_rdma(qp, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void srd_wr_rdma_write_imm(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr, __be32 imm)
{
	srd_wr_rdma(qp, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void srd_wr_rdma_read(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr)
{
	srd_wr_rdma(qp, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void srd_wr_atomic(struct ibv_qp_ex *qp, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t compare_add,
			  uint64_t swap)
{
	struct ibv_send_wr *wr = srd_new_wr(qp, op);
	if (!wr)
		return;
	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = compare_add;
	wr->wr.atomic.swap = swap;
}

static void srd_wr_atomic_cmp_swp(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	srd_wr_atomic(qp, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void srd_wr_atomic_fetch_add(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr, uint64_t add)
{
	srd_wr_atomic(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

// What is not supported fails the batch: wr_complete returns EOPNOTSUPP.
static void srd_unsupported(struct ibv_qp_ex *qp)
{
	struct srd_qpx *x = srd_qpx(qp);
	if (!x->err)
		x->err = EOPNOTSUPP;
}

// srd_wr_bind_mw binds a type 2 window (a BIND_MW work request, mw.c).
static void srd_wr_bind_mw(struct ibv_qp_ex *qp, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *wr = srd_new_wr(qp, IBV_WR_BIND_MW);
	if (!wr)
		return;
	if (!info) {
		srd_qpx(qp)->err = EINVAL;
		return;
	}
	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *info;
}

static void srd_wr_send_tso(struct ibv_qp_ex *qp, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	srd_unsupported(qp);
}

static void srd_wr_set_xrc_srqn(struct ibv_qp_ex *qp, uint32_t srqn)
{
	(void)srqn;
	srd_unsupported(qp);
}

static void srd_wr_atomic_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr, const void *data)
{
	(void)rkey, (void)addr, (void)data;
	srd_unsupported(qp);
}

static void srd_wr_set_ud_addr(struct ibv_qp_ex *qp, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *wr = srd_cur_wr(qp);
	if (!wr)
		return;
	wr->wr.ud.ah = ah;
	wr->wr.ud.remote_qpn = qpn;
	wr->wr.ud.remote_qkey = qkey;
}

static void srd_wr_set_sge(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length)
{
	if (srd_cur_wr(qp))
		srd_add_sge(qp, lkey, addr, length, 0);
}

static void srd_wr_set_sge_list(struct ibv_qp_ex *qp, size_t n, const struct ibv_sge *list)
{
	if (!srd_cur_wr(qp))
		return;
	for (size_t i = 0; i < n; i++)
		if (srd_add_sge(qp, list[i].lkey, list[i].addr, list[i].length, 0))
			return;
}

// srd_add_inline copies length bytes at addr into the batch, as one
// inline SGE of the current work request.
static void srd_add_inline(struct ibv_qp_ex *qp, const void *addr, size_t length)
{
	struct srd_qpx *x = srd_qpx(qp);
	if (length > UINT32_MAX || srd_grow((void **)&x->inl, &x->capinl, x->ninl + length, 1)) {
		x->err = length > UINT32_MAX ? EINVAL : ENOMEM;
		return;
	}
	if (length)
		memcpy(x->inl + x->ninl, addr, length);
	if (srd_add_sge(qp, 0, x->ninl, (uint32_t)length, 1))
		return;
	x->ninl += length;
	x->wrs[x->nwr - 1].send_flags |= IBV_SEND_INLINE;
}

static void srd_wr_set_inline_data(struct ibv_qp_ex *qp, void *addr, size_t length)
{
	if (srd_cur_wr(qp))
		srd_add_inline(qp, addr, length);
}

static void srd_wr_set_inline_data_list(struct ibv_qp_ex *qp, size_t n, const struct ibv_data_buf *bufs)
{
	if (!srd_cur_wr(qp))
		return;
	for (size_t i = 0; i < n && !srd_qpx(qp)->err; i++)
		srd_add_inline(qp, bufs[i].addr, bufs[i].length);
}

// srd_qpx_free frees a QP's batch (ibv_destroy_qp).
void srd_qpx_free(void *ex)
{
	struct srd_qpx *x = ex;
	if (!x)
		return;
	free(x->wrs);
	free(x->first);
	free(x->sges);
	free(x->isinl);
	free(x->inl);
	free(x);
}

struct ibv_qp *srd_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	if (!context || !attr) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t mask = attr->comp_mask;
	if (!(mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	// XRC domains, RSS, TSO and creation flags are not supported.
	if (mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	int ex = !!(mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
	if (ex && srd_check_send_ops(attr->qp_type, attr->send_ops_flags))
		return NULL;
	struct ibv_qp_init_attr a = {
		.qp_context = attr->qp_context, .send_cq = attr->send_cq, .recv_cq = attr->recv_cq,
		.srq = attr->srq, .cap = attr->cap, .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all,
	};
	struct ibv_qp *qp = ibv_create_qp(attr->pd, &a);
	if (!qp)
		return NULL;
	attr->cap = a.cap;
	if (ex && srd_qp_make_ex(qp)) {
		int e = errno;
		ibv_destroy_qp(qp);
		errno = e;
		return NULL;
	}
	return qp;
}

// srd_check_send_ops checks the send ops a QP of type asks for: 0, or -1
// with errno EOPNOTSUPP.
int srd_check_send_ops(enum ibv_qp_type type, uint64_t ops)
{
	if ((ops & ~(uint64_t)SRD_QP_SEND_OPS) || (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return 0;
}

// srd_qp_make_ex gives a QP its ibv_qp_ex (ibv_create_qp_ex and
// rdma_create_qp_ex with send ops): 0, or -1 with errno.
int srd_qp_make_ex(struct ibv_qp *qp)
{
	struct srd_qpx *x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return -1;
	}
	struct srd_qp *q = (struct srd_qp *)qp;
	q->ex = x;
	struct ibv_qp_ex *e = &q->qpx;
	e->comp_mask = 0;
	e->wr_atomic_cmp_swp = srd_wr_atomic_cmp_swp;
	e->wr_atomic_fetch_add = srd_wr_atomic_fetch_add;
	e->wr_bind_mw = srd_wr_bind_mw;
	e->wr_local_inv = srd_wr_local_inv;
	e->wr_rdma_read = srd_wr_rdma_read;
	e->wr_rdma_write = srd_wr_rdma_write;
	e->wr_rdma_write_imm = srd_wr_rdma_write_imm;
	e->wr_send = srd_wr_send;
	e->wr_send_imm = srd_wr_send_imm;
	e->wr_send_inv = srd_wr_send_inv;
	e->wr_send_tso = srd_wr_send_tso;
	e->wr_set_ud_addr = srd_wr_set_ud_addr;
	e->wr_set_xrc_srqn = srd_wr_set_xrc_srqn;
	e->wr_set_inline_data = srd_wr_set_inline_data;
	e->wr_set_inline_data_list = srd_wr_set_inline_data_list;
	e->wr_set_sge = srd_wr_set_sge;
	e->wr_set_sge_list = srd_wr_set_sge_list;
	e->wr_start = srd_wr_start;
	e->wr_complete = srd_wr_complete;
	e->wr_abort = srd_wr_abort;
	e->wr_atomic_write = srd_wr_atomic_write;
	return 0;
}
