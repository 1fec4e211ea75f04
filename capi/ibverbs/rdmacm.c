//go:build capi

// softrdma's librdmacm: the rdma_* functions of Debian's librdmacm.so.1,
// in the same library as libibverbs (one Go runtime per process), over
// package rdmacm. librdmacm.so.1 is a second name of libibverbs.so.1
// (capi/build.sh links it), so a program linked against both loads one
// object. Each function returns 0 or -1 with errno set, as librdmacm's
// do. docs/DESIGN.md, "The C ABI library", describes it.
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "srdcm.h"
#include "_cgo_export.h"

#define SRD_EXPORT __attribute__((visibility("default")))
#define SRD_ERR(e) (errno = (e), -1)

// The contexts rdma_cm's IDs hand out in id->verbs: every configured
// device, opened on the first rdma_create_event_channel or
// rdma_create_id and kept for the life of the process, as librdmacm
// does.
static pthread_once_t srd_cm_once = PTHREAD_ONCE_INIT;
static struct ibv_context **srd_cm_ctxs;
static int srd_cm_nctxs;
static int srd_cm_err;

static void srd_cm_init(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		srd_cm_err = errno ? errno : ENODEV;
		return;
	}
	srd_cm_ctxs = calloc(n + 1, sizeof(*srd_cm_ctxs));
	uintptr_t *hs = calloc(n + 1, sizeof(*hs));
	if (!srd_cm_ctxs || !hs) {
		free(hs);
		ibv_free_device_list(list);
		srd_cm_err = ENOMEM;
		return;
	}
	for (int i = 0; i < n; i++) {
		struct ibv_context *c = ibv_open_device(list[i]);
		if (!c) {
			srd_cm_err = errno;
			break;
		}
		srd_cm_ctxs[srd_cm_nctxs++] = c;
		hs[i] = srd_ctx(c)->h;
	}
	ibv_free_device_list(list);
	if (!srd_cm_err)
		srd_cm_err = srdgo_cm_init(srd_cm_nctxs, hs);
	free(hs);
}

// At exit, the IDs the program left are destroyed as the kernel destroys
// them when the process's rdma_cm file closes (peers get their DREQ).
__attribute__((destructor)) static void srd_cm_exit(void)
{
	if (srd_cm_nctxs > 0 && !srd_cm_err)
		srdgo_cm_exit();
}

static int srd_cm_ready(void)
{
	pthread_once(&srd_cm_once, srd_cm_init);
	return srd_cm_err;
}

static uintptr_t srd_id_h(struct rdma_cm_id *id) { return ((struct srd_cm_id *)id)->h; }

// srd_cm_sync copies what the Go side knows of an ID (device, addresses)
// into the structure the program reads.
static void srd_cm_sync(struct rdma_cm_id *id)
{
	struct srd_cm_info info;
	memset(&info, 0, sizeof(info));
	if (srdgo_cm_info(srd_id_h(id), &info))
		return;
	if (info.dev >= 0 && info.dev < srd_cm_nctxs) {
		id->verbs = srd_cm_ctxs[info.dev];
		id->port_num = 1;
	}
	if (info.src.ss_family)
		memcpy(&id->route.addr.src_storage, &info.src, sizeof(info.src));
	if (info.dst.ss_family)
		memcpy(&id->route.addr.dst_storage, &info.dst, sizeof(info.dst));
}

SRD_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	int err = srd_cm_ready();
	if (err) {
		errno = err;
		return NULL;
	}
	struct srd_cm_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	// One eventfd count per event: rdma_get_cm_event reads one.
	ch->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->ch.fd < 0) {
		free(ch);
		return NULL;
	}
	srdgo_cm_create_channel(ch->ch.fd, &ch->h);
	return &ch->ch;
}

SRD_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct srd_cm_channel *ch = (struct srd_cm_channel *)channel;
	srdgo_destroy(ch->h);
	close(ch->ch.fd);
	free(ch);
}

SRD_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			      enum rdma_port_space ps)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srd_cm_ready();
	if (err)
		return SRD_ERR(err);
	// No channel: a synchronous ID, on a channel of its own (ep.c).
	int sync = !channel;
	if (sync && !(channel = rdma_create_event_channel()))
		return -1;
	struct srd_cm_id *s = calloc(1, sizeof(*s));
	if (!s) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return SRD_ERR(ENOMEM);
	}
	s->sync = sync;
	err = srdgo_cm_create_id(((struct srd_cm_channel *)channel)->h, ps, &s->id, &s->h);
	if (err) {
		free(s);
		if (sync)
			rdma_destroy_event_channel(channel);
		return SRD_ERR(err);
	}
	s->id.channel = channel;
	s->id.context = context;
	s->id.ps = ps;
	s->id.qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	*id = &s->id;
	return 0;
}

SRD_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return SRD_ERR(EINVAL);
	struct srd_cm_id *s = (struct srd_cm_id *)id;
	int err = srdgo_destroy(s->h);
	if (err)
		return SRD_ERR(err);
	if (s->sync)
		srd_cm_release_sync(id->channel, id->event);
	free(s);
	return 0;
}

SRD_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_bind(srd_id_h(id), addr);
	if (err)
		return SRD_ERR(err);
	srd_cm_sync(id);
	return 0;
}

SRD_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
				 int timeout_ms)
{
	(void)timeout_ms; // resolution is immediate (no ARP on RoCE here)
	if (!id || !dst_addr)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_resolve_addr(srd_id_h(id), src_addr, dst_addr);
	if (err)
		return SRD_ERR(err);
	srd_cm_sync(id);
	return srd_cm_complete(id);
}

SRD_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_resolve_route(srd_id_h(id));
	return err ? SRD_ERR(err) : srd_cm_complete(id);
}

SRD_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_listen(srd_id_h(id), backlog);
	if (err)
		return SRD_ERR(err);
	srd_cm_sync(id);
	return 0;
}

static uintptr_t srd_cq_h(struct ibv_cq *cq) { return cq ? ((struct srd_cq *)cq)->h : 0; }

SRD_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!id || !attr || !id->verbs)
		return SRD_ERR(EINVAL);
	if (id->qp)
		return SRD_ERR(EINVAL);
	if (!pd) {
		if (!id->pd)
			id->pd = ibv_alloc_pd(id->verbs);
		if (!id->pd)
			return -1;
		pd = id->pd;
	} else if (pd->context != id->verbs) {
		return SRD_ERR(EINVAL);
	}
	// librdmacm makes the CQs a program leaves out, one for each queue,
	// each on a completion channel (rdma_get_send_comp and
	// rdma_get_recv_comp of <rdma/rdma_verbs.h> wait on them).
	if (!attr->send_cq) {
		if (!id->send_cq_channel)
			id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq && id->send_cq_channel)
			id->send_cq = ibv_create_cq(id->verbs, attr->cap.max_send_wr ? attr->cap.max_send_wr : 1, id,
						    id->send_cq_channel, 0);
		if (!id->send_cq)
			return -1;
		attr->send_cq = id->send_cq;
	}
	if (!attr->recv_cq) {
		if (!id->recv_cq_channel)
			id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq && id->recv_cq_channel)
			id->recv_cq = ibv_create_cq(id->verbs, attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1, id,
						    id->recv_cq_channel, 0);
		if (!id->recv_cq)
			return -1;
		attr->recv_cq = id->recv_cq;
	}
	struct srd_qp *q = calloc(1, sizeof(*q));
	if (!q)
		return SRD_ERR(ENOMEM);
	uint32_t qpn;
	int err = srdgo_cm_create_qp(srd_id_h(id), ((struct srd_pd *)pd)->h, attr, srd_cq_h(attr->send_cq),
				     srd_cq_h(attr->recv_cq), attr->srq ? ((struct srd_srq *)attr->srq)->h : 0, &q->h, &qpn);
	if (err) {
		free(q);
		return SRD_ERR(err);
	}
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = attr->srq;
	q->qp.handle = qpn;
	q->qp.qp_num = qpn;
	q->qp.qp_type = id->qp_type;
	q->qp.state = id->qp_type == IBV_QPT_UD ? IBV_QPS_RTS : IBV_QPS_INIT;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	srd_async_register(pd->context, q->h, &q->qp);
	id->qp = &q->qp;
	return 0;
}

SRD_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	if (!id || !attr)
		return SRD_ERR(EINVAL);
	// The basic attributes and send ops (qpex.c): no creation flags or TSO.
	if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return SRD_ERR(EOPNOTSUPP);
	int ex = !!(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
	if (ex && srd_check_send_ops(id->qp_type, attr->send_ops_flags))
		return -1;
	struct ibv_qp_init_attr a = {
		.qp_context = attr->qp_context, .send_cq = attr->send_cq, .recv_cq = attr->recv_cq,
		.srq = attr->srq, .cap = attr->cap, .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all,
	};
	int ret = rdma_create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL, &a);
	if (ret)
		return ret;
	attr->cap = a.cap;
	if (ex && srd_qp_make_ex(id->qp)) {
		int e = errno;
		rdma_destroy_qp(id);
		return SRD_ERR(e);
	}
	return 0;
}

SRD_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	struct srd_qp *q = (struct srd_qp *)id->qp;
	srd_async_forget(q->h);
	if (srdgo_cm_destroy_qp(srd_id_h(id), q->h))
		return;
	pthread_mutex_destroy(&q->qp.mutex);
	pthread_cond_destroy(&q->qp.cond);
	srd_qpx_free(q->ex);
	free(q);
	id->qp = NULL;
	srd_cm_destroy_cqs(id);
}

SRD_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_connect(srd_id_h(id), conn_param, conn_param ? (void *)conn_param->private_data : NULL);
	return err ? SRD_ERR(err) : srd_cm_complete(id);
}

SRD_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_accept(srd_id_h(id), conn_param, conn_param ? (void *)conn_param->private_data : NULL);
	if (err)
		return SRD_ERR(err);
	if (id->qp && id->qp_type != IBV_QPT_UD)
		id->qp->state = IBV_QPS_RTS;
	return id->qp_type == IBV_QPT_UD ? 0 : srd_cm_complete(id);
}

SRD_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_reject(srd_id_h(id), (void *)private_data, private_data_len);
	return err ? SRD_ERR(err) : 0;
}

SRD_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_disconnect(srd_id_h(id));
	if (err)
		return SRD_ERR(err);
	if (id->qp)
		id->qp->state = IBV_QPS_ERR;
	return srd_cm_complete(id);
}

SRD_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_establish(srd_id_h(id));
	return err ? SRD_ERR(err) : 0;
}

SRD_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask)
		return SRD_ERR(EINVAL);
	enum ibv_qp_state state = qp_attr->qp_state;
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->qp_state = state;
	int err = srdgo_cm_init_qp_attr(srd_id_h(id), qp_attr, qp_attr_mask);
	return err ? SRD_ERR(err) : 0;
}

SRD_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || (!optval && optlen))
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_set_option(srd_id_h(id), level, optname, optval, optlen);
	return err ? SRD_ERR(err) : 0;
}

SRD_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	if (!id || !channel)
		return SRD_ERR(EINVAL);
	int err = srdgo_cm_migrate(srd_id_h(id), ((struct srd_cm_channel *)channel)->h);
	if (err)
		return SRD_ERR(err);
	id->channel = channel;
	return 0;
}

SRD_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return SRD_ERR(EINVAL);
	struct srd_cm_channel *ch = (struct srd_cm_channel *)channel;
	uint64_t one;
	// Blocks unless the program made the fd non-blocking (then EAGAIN),
	// as reading the kernel's rdma_cm does.
	struct srd_cm_event_info info;
	int err;
	do {
		if (read(ch->ch.fd, &one, sizeof(one)) != sizeof(one))
			return -1;
		memset(&info, 0, sizeof(info));
		err = srdgo_cm_take_event(ch->h, &info);
		// ESTALE: the event was for an ID destroyed since; it is dropped
		// and the next one read.
	} while (err == ESTALE);
	if (err)
		return SRD_ERR(err);
	// The event and its private data in one allocation, freed by
	// rdma_ack_cm_event.
	struct rdma_cm_event *ev = calloc(1, sizeof(*ev) + sizeof(info.pdata));
	if (!ev)
		return SRD_ERR(ENOMEM);
	uint8_t *pdata = (uint8_t *)(ev + 1);
	ev->id = info.id;
	ev->listen_id = info.listen_id;
	if (info.new_h) {
		struct srd_cm_id *s = calloc(1, sizeof(*s));
		if (!s) {
			srdgo_destroy(info.new_h);
			free(ev);
			return SRD_ERR(ENOMEM);
		}
		s->h = info.new_h;
		srdgo_cm_set_cptr(s->h, &s->id);
		struct rdma_cm_id *l = info.listen_id;
		s->id.channel = l ? l->channel : channel;
		s->id.context = l ? l->context : NULL;
		s->id.ps = l ? l->ps : RDMA_PS_TCP;
		s->id.qp_type = l ? l->qp_type : IBV_QPT_RC;
		ev->id = &s->id;
	}
	if (ev->id)
		srd_cm_sync(ev->id);
	ev->event = info.event;
	ev->status = info.status;
	memcpy(pdata, info.pdata, info.pdata_len);
	if (ev->id && ev->id->ps == RDMA_PS_UDP) {
		ev->param.ud.private_data = info.pdata_len ? pdata : NULL;
		ev->param.ud.private_data_len = info.pdata_len;
		ev->param.ud.ah_attr = info.ah_attr;
		ev->param.ud.qp_num = info.qp_num;
		ev->param.ud.qkey = info.qkey;
		if (ev->event == RDMA_CM_EVENT_MULTICAST_JOIN || ev->event == RDMA_CM_EVENT_MULTICAST_ERROR)
			ev->param.ud.private_data = info.mc_context; // as librdmacm hands it over
	} else {
		struct rdma_conn_param *p = &ev->param.conn;
		p->private_data = info.pdata_len ? pdata : NULL;
		p->private_data_len = info.pdata_len;
		p->responder_resources = info.responder_resources;
		p->initiator_depth = info.initiator_depth;
		p->flow_control = info.flow_control;
		p->retry_count = info.retry_count;
		p->rnr_retry_count = info.rnr_retry_count;
		p->srq = info.srq;
		p->qp_num = info.qp_num;
	}
	if (ev->id) {
		ev->id->event = ev;
		if (ev->id->qp && ev->event == RDMA_CM_EVENT_ESTABLISHED)
			ev->id->qp->state = IBV_QPS_RTS;
	}
	*event = ev;
	return 0;
}

SRD_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return SRD_ERR(EINVAL);
	free(event);
	return 0;
}

SRD_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	}
	return "UNKNOWN EVENT";
}

static uint16_t srd_port(struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

SRD_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id) { return id ? srd_port(&id->route.addr.src_addr) : 0; }
SRD_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id) { return id ? srd_port(&id->route.addr.dst_addr) : 0; }

SRD_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	int err = srd_cm_ready();
	if (err) {
		errno = err;
		return NULL;
	}
	struct ibv_context **l = calloc(srd_cm_nctxs + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	memcpy(l, srd_cm_ctxs, srd_cm_nctxs * sizeof(*l));
	if (num_devices)
		*num_devices = srd_cm_nctxs;
	return l;
}

SRD_EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

// rdma_getaddrinfo resolves node and service with getaddrinfo(3): the
// address goes to ai_src_addr with RAI_PASSIVE, else to ai_dst_addr (and
// hints' source address, if any, to ai_src_addr), as librdmacm without
// ibacm does.
SRD_EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
				struct rdma_addrinfo **res)
{
	if (!res || (!node && !service))
		return SRD_ERR(EINVAL);
	struct addrinfo h = {0}, *ai;
	h.ai_socktype = SOCK_STREAM;
	if (hints) {
		h.ai_flags = hints->ai_flags & RAI_PASSIVE ? AI_PASSIVE : 0;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
		h.ai_family = hints->ai_family;
	}
	int r = getaddrinfo(node, service, &h, &ai);
	if (r)
		return r; // an EAI_ code, as librdmacm returns
	struct rdma_addrinfo *ra = calloc(1, sizeof(*ra));
	struct sockaddr *sa = malloc(ai->ai_addrlen);
	if (!ra || !sa) {
		free(ra);
		free(sa);
		freeaddrinfo(ai);
		return SRD_ERR(ENOMEM);
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	ra->ai_family = ai->ai_family;
	ra->ai_flags = hints ? hints->ai_flags : 0;
	ra->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	ra->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	if (ra->ai_flags & RAI_PASSIVE) {
		ra->ai_src_addr = sa;
		ra->ai_src_len = ai->ai_addrlen;
	} else {
		ra->ai_dst_addr = sa;
		ra->ai_dst_len = ai->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			ra->ai_src_addr = malloc(hints->ai_src_len);
			if (ra->ai_src_addr) {
				memcpy(ra->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				ra->ai_src_len = hints->ai_src_len;
			}
		}
	}
	freeaddrinfo(ai);
	*res = ra;
	return 0;
}

SRD_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

// rpoll is rsockets' poll; with no rsockets here, it is poll(2), which is
// what the rdmacm utilities need of it (they poll an event channel's fd).
SRD_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) { return poll(fds, nfds, timeout); }

SRD_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)id;
	(void)event;
	return SRD_ERR(ENOSYS);
}
