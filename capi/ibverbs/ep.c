//go:build capi

// librdmacm's synchronous mode and its endpoint calls: an ID created
// without an event channel (rdma_create_id(NULL, ...), rdma_create_ep)
// gets a channel of its own, and each call that starts an exchange
// (resolve_addr, resolve_route, connect, accept, disconnect) waits for
// the exchange's event on it and leaves it in id->event, as librdmacm's
// ucma_complete does; rdma_get_request takes a connect request off a
// synchronous listener and gives the new ID a channel of its own and the
// QP rdma_create_ep asked for. docs/DESIGN.md, "The C ABI library",
// describes it.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_verbs.h>
#include "srdcm.h"
#include "_cgo_export.h"

#define SRD_EXPORT __attribute__((visibility("default")))
#define SRD_ERR(e) (errno = (e), -1)

static struct srd_cm_id *srd_cm(struct rdma_cm_id *id) { return (struct srd_cm_id *)id; }

// srd_cm_complete waits, for a synchronous ID, for the event of the
// exchange the caller started, acknowledging the one before: 0, or -1
// with errno from the event's status (ECONNREFUSED for a rejection).
int srd_cm_complete(struct rdma_cm_id *id)
{
	if (!srd_cm(id)->sync)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(id->channel, &ev))
		return -1;
	id->event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return SRD_ERR(ECONNREFUSED);
		return SRD_ERR(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

// srd_cm_release_sync acknowledges a synchronous ID's last event and
// destroys its channel, after the ID itself is gone.
void srd_cm_release_sync(struct rdma_event_channel *ch, struct rdma_cm_event *last)
{
	if (last)
		rdma_ack_cm_event(last);
	rdma_destroy_event_channel(ch);
}

// srd_cm_destroy_cqs destroys the CQs and completion channels
// rdma_create_qp made for an ID (those the program left out), as
// librdmacm's rdma_destroy_qp does.
void srd_cm_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq && id->recv_cq != id->send_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->send_cq)
		ibv_destroy_cq(id->send_cq);
	id->recv_cq = id->send_cq = NULL;
	if (id->recv_cq_channel && id->recv_cq_channel != id->send_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	if (id->send_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	id->recv_cq_channel = id->send_cq_channel = NULL;
}

SRD_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	if (!listen || !id)
		return SRD_ERR(EINVAL);
	struct srd_cm_id *l = srd_cm(listen);
	if (!l->sync)
		return SRD_ERR(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	int err = 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (ev->status)
		err = ev->status < 0 ? -ev->status : ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	if (err) {
		listen->event = ev;
		return SRD_ERR(err);
	}
	// The new ID is synchronous too, on a channel of its own.
	struct rdma_cm_id *nid = ev->id;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch || srdgo_cm_migrate(srd_cm(nid)->h, ((struct srd_cm_channel *)ch)->h)) {
		err = ch ? EINVAL : errno;
		if (ch)
			rdma_destroy_event_channel(ch);
		goto reject;
	}
	nid->channel = ch;
	srd_cm(nid)->sync = 1;
	nid->event = ev;
	if (listen->pd)
		nid->pd = listen->pd;
	if (l->ep_attr) {
		struct ibv_qp_init_attr a = *l->ep_attr;
		if (rdma_create_qp(nid, listen->pd, &a)) {
			err = errno;
			goto reject;
		}
	}
	*id = nid;
	return 0;
reject:
	rdma_reject(nid, NULL, 0);
	rdma_destroy_id(nid);
	rdma_ack_cm_event(ev);
	return SRD_ERR(err);
}

SRD_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			      struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return SRD_ERR(EINVAL);
	struct rdma_cm_id *cid;
	if (rdma_create_id(NULL, &cid, NULL, res->ai_port_space))
		return -1;
	if (res->ai_qp_type)
		cid->qp_type = res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cid, res->ai_src_addr))
			goto err;
		if (pd)
			cid->pd = pd;
		if (qp_init_attr) {
			struct ibv_qp_init_attr *a = malloc(sizeof(*a));
			if (!a) {
				errno = ENOMEM;
				goto err;
			}
			*a = *qp_init_attr;
			a->qp_type = cid->qp_type;
			srd_cm(cid)->ep_attr = a;
		}
		*id = cid;
		return 0;
	}
	if (rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000) || rdma_resolve_route(cid, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = cid->qp_type;
		if (rdma_create_qp(cid, pd, qp_init_attr))
			goto err;
	}
	*id = cid;
	return 0;
err:;
	int e = errno;
	rdma_destroy_ep(cid);
	return SRD_ERR(e);
}

SRD_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	free(srd_cm(id)->ep_attr);
	srd_cm(id)->ep_attr = NULL;
	rdma_destroy_id(id);
}

SRD_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!id || !attr || !id->verbs)
		return SRD_ERR(EINVAL);
	if (id->srq)
		return SRD_ERR(EINVAL);
	if (!pd) {
		if (!id->pd)
			id->pd = ibv_alloc_pd(id->verbs);
		if (!id->pd)
			return -1;
		pd = id->pd;
	}
	struct ibv_srq *srq = ibv_create_srq(pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

SRD_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr)
		return SRD_ERR(EINVAL);
	// Basic SRQs only: XRC and tag-matching SRQs are not supported.
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return SRD_ERR(EOPNOTSUPP);
	if (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD))
		return SRD_ERR(EOPNOTSUPP);
	struct ibv_srq_init_attr a = {.srq_context = attr->srq_context, .attr = attr->attr};
	int ret = rdma_create_srq(id, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : NULL, &a);
	if (!ret)
		attr->attr = a.attr;
	return ret;
}

SRD_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	if (ibv_destroy_srq(id->srq) == 0)
		id->srq = NULL;
}
