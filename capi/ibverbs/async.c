//go:build capi

// Asynchronous events: ibv_get_async_event reads one count of the
// context's async_fd (an eventfd the Go side, async.go, writes one count
// per event to) and takes the event it stands for; ibv_ack_async_event
// counts it on the object, as libibverbs does. docs/DESIGN.md, "The C ABI
// library", describes them.
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "srd.h"
#include "_cgo_export.h"

#define SRD_EXPORT __attribute__((visibility("default")))

// srd_async_kind says which member of ibv_async_event's element an event
// type names, as libibverbs' ibv_get_async_event does.
enum srd_async_kind { SRD_ASYNC_PORT, SRD_ASYNC_QP, SRD_ASYNC_CQ, SRD_ASYNC_SRQ, SRD_ASYNC_DEVICE };

static enum srd_async_kind srd_async_kind(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return SRD_ASYNC_QP;
	case IBV_EVENT_CQ_ERR:
		return SRD_ASYNC_CQ;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return SRD_ASYNC_SRQ;
	case IBV_EVENT_DEVICE_FATAL:
		return SRD_ASYNC_DEVICE;
	default:
		return SRD_ASYNC_PORT;
	}
}

// srd_async_open and srd_async_register are called by the create and
// open functions (ibverbs.c, rdmacm.c); srd_async_forget before a
// destroy.
void srd_async_open(struct ibv_context *c) { srdgo_async_open(srd_ctx(c)->h, c->async_fd); }
void srd_async_close(struct ibv_context *c) { srdgo_async_close(srd_ctx(c)->h); }
void srd_async_register(struct ibv_context *c, uintptr_t h, void *obj) { srdgo_async_register(srd_ctx(c)->h, h, obj); }
void srd_async_forget(uintptr_t h) { srdgo_async_forget(h); }

SRD_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	uint64_t one;
	int typ, port, err;
	void *obj;
	do {
		// Blocks unless the program made async_fd non-blocking (then
		// EAGAIN), as reading the kernel's async file does.
		if (read(context->async_fd, &one, sizeof(one)) != sizeof(one))
			return -1;
		err = srdgo_async_take(srd_ctx(context)->h, &typ, &obj, &port);
	} while (err == EAGAIN);
	if (err) {
		errno = err;
		return -1;
	}
	memset(event, 0, sizeof(*event));
	event->event_type = (enum ibv_event_type)typ;
	switch (srd_async_kind(event->event_type)) {
	case SRD_ASYNC_QP:
		event->element.qp = obj;
		break;
	case SRD_ASYNC_CQ:
		event->element.cq = obj;
		break;
	case SRD_ASYNC_SRQ:
		event->element.srq = obj;
		break;
	case SRD_ASYNC_PORT:
		event->element.port_num = port;
		break;
	case SRD_ASYNC_DEVICE:
		break;
	}
	return 0;
}

SRD_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	switch (srd_async_kind(event->event_type)) {
	case SRD_ASYNC_QP: {
		struct ibv_qp *qp = event->element.qp;
		if (!qp)
			return;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		return;
	}
	case SRD_ASYNC_CQ: {
		struct ibv_cq *cq = event->element.cq;
		if (!cq)
			return;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		return;
	}
	case SRD_ASYNC_SRQ: {
		struct ibv_srq *srq = event->element.srq;
		if (!srq)
			return;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		return;
	}
	default:
		return;
	}
}

SRD_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if ((unsigned)event >= sizeof(s) / sizeof(s[0]) || !s[event])
		return "unknown";
	return s[event];
}
