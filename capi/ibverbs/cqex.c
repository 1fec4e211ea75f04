//go:build capi

// ibv_create_cq_ex and the poll API of the extended CQ (ibv_start_poll,
// ibv_next_poll, ibv_end_poll and the ibv_wc_read_* inline functions of
// <infiniband/verbs.h>, which call through the ibv_cq_ex the program
// holds). start_poll and next_poll take one completion from the engine
// into the CQ's current entry; the read ops read that entry. A CQ made
// here is also an ordinary CQ (ibv_poll_cq, completion channels, async
// events). docs/DESIGN.md, "The C ABI library", describes it.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "srd.h"
#include "_cgo_export.h"

// The completion fields softrdma fills: the standard ones and both
// timestamps. CVLAN, flow tags and tag matching are not supported.
#define SRD_CQ_WC_FLAGS \
	(IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

// srd_cqx is the current completion of an extended CQ.
struct srd_cqx {
	struct ibv_wc wc;
	uint64_t ts, wall;
};

static struct srd_cq *srd_cq_of(struct ibv_cq_ex *cq) { return (struct srd_cq *)cq; }
static struct srd_cqx *srd_cur(struct ibv_cq_ex *cq) { return srd_cq_of(cq)->ex; }

// srd_poll_one takes the next completion: 0, or ENOENT if there is none.
static int srd_poll_one(struct ibv_cq_ex *cq)
{
	struct srd_cqx *x = srd_cur(cq);
	int n = srdgo_poll_cq_ex(srd_cq_of(cq)->h, &x->wc, &x->ts, &x->wall);
	if (n < 0)
		return EINVAL;
	if (n == 0)
		return ENOENT;
	cq->status = x->wc.status;
	cq->wr_id = x->wc.wr_id;
	return 0;
}

static int srd_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	return srd_poll_one(cq);
}

static int srd_next_poll(struct ibv_cq_ex *cq) { return srd_poll_one(cq); }
static void srd_end_poll(struct ibv_cq_ex *cq) { (void)cq; }

static enum ibv_wc_opcode srd_read_opcode(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.opcode; }
static uint32_t srd_read_vendor_err(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.vendor_err; }
static uint32_t srd_read_byte_len(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.byte_len; }
// The immediate data, or the invalidated R_Key (ibv_wc_read_invalidated_rkey
// reads it through the same op), as ibv_wc's union holds them.
static __be32 srd_read_imm_data(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.imm_data; }
static uint32_t srd_read_qp_num(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.qp_num; }
static uint32_t srd_read_src_qp(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.src_qp; }
static unsigned int srd_read_wc_flags(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.wc_flags; }
static uint32_t srd_read_slid(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.slid; }
static uint8_t srd_read_sl(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.sl; }
static uint8_t srd_read_dlid_path_bits(struct ibv_cq_ex *cq) { return srd_cur(cq)->wc.dlid_path_bits; }
static uint64_t srd_read_completion_ts(struct ibv_cq_ex *cq) { return srd_cur(cq)->ts; }
static uint64_t srd_read_completion_wallclock_ns(struct ibv_cq_ex *cq) { return srd_cur(cq)->wall; }
static uint16_t srd_read_cvlan(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint32_t srd_read_flow_tag(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static void srd_read_tm_info(struct ibv_cq_ex *cq, struct ibv_wc_tm_info *tm)
{
	(void)cq;
	memset(tm, 0, sizeof(*tm));
}

struct ibv_cq_ex *srd_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	if (!context || !attr) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && attr->parent_domain) {
		errno = EOPNOTSUPP; // no parent domains
		return NULL;
	}
	// Single-threaded use needs nothing; ignoring overruns is not offered.
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->wc_flags & ~(uint64_t)SRD_CQ_WC_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->comp_vector >= (uint32_t)context->num_comp_vectors || attr->cqe > INT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_cq *c = calloc(1, sizeof(*c));
	struct srd_cqx *x = calloc(1, sizeof(*x));
	if (!c || !x) {
		free(c);
		free(x);
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_comp_channel *channel = attr->channel;
	int size = (int)attr->cqe;
	int err = srdgo_create_cq_ex(srd_ctx(context)->h, (int)attr->cqe, channel ? ((struct srd_channel *)channel)->h : 0,
				     &c->cq, !!(attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
				     !!(attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK), &c->h, &size);
	if (err) {
		free(c);
		free(x);
		errno = err;
		return NULL;
	}
	c->ex = x;
	struct ibv_cq_ex *q = &c->cqx;
	q->context = context;
	q->channel = channel;
	q->cq_context = attr->cq_context;
	q->cqe = size;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->start_poll = srd_start_poll;
	q->next_poll = srd_next_poll;
	q->end_poll = srd_end_poll;
	q->read_opcode = srd_read_opcode;
	q->read_vendor_err = srd_read_vendor_err;
	q->read_byte_len = srd_read_byte_len;
	q->read_imm_data = srd_read_imm_data;
	q->read_qp_num = srd_read_qp_num;
	q->read_src_qp = srd_read_src_qp;
	q->read_wc_flags = srd_read_wc_flags;
	q->read_slid = srd_read_slid;
	q->read_sl = srd_read_sl;
	q->read_dlid_path_bits = srd_read_dlid_path_bits;
	q->read_completion_ts = srd_read_completion_ts;
	q->read_completion_wallclock_ns = srd_read_completion_wallclock_ns;
	q->read_cvlan = srd_read_cvlan;
	q->read_flow_tag = srd_read_flow_tag;
	q->read_tm_info = srd_read_tm_info;
	srd_async_register(context, c->h, &c->cq);
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	return q;
}
