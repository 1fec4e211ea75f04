//go:build capi

// The exported functions of softrdma's libibverbs.so.1 and the ops tables
// the inline functions of <infiniband/verbs.h> call through. Each function
// checks its arguments, calls the Go side (srdgo_*) with the handles of
// the objects, and turns the errno the Go side returns into libibverbs'
// convention: an int function returns it, a pointer function sets errno
// and returns NULL. docs/DESIGN.md, "The C ABI library", describes it.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "srd.h"
#include "_cgo_export.h"

#define SRD_EXPORT __attribute__((visibility("default")))

// The configured devices, made on the first ibv_get_device_list and kept
// for the life of the process (programs may use a device after freeing
// the list that named it).
static pthread_once_t srd_devices_once = PTHREAD_ONCE_INIT;
static struct srd_device *srd_devices;
static int srd_ndevices;

static void srd_make_devices(void)
{
	int n = srdgo_num_devices();
	if (n <= 0)
		return;
	struct srd_device *d = calloc(n, sizeof(*d));
	if (!d)
		return;
	for (int i = 0; i < n; i++) {
		d[i].index = i;
		d[i].dev.node_type = IBV_NODE_CA;
		d[i].dev.transport_type = IBV_TRANSPORT_IB;
		srdgo_device_name(i, d[i].dev.name, sizeof(d[i].dev.name));
		snprintf(d[i].dev.dev_name, sizeof(d[i].dev.dev_name), "softrdma%d", i);
		// No sysfs: the paths name nothing, so reads under them fail.
		snprintf(d[i].dev.dev_path, sizeof(d[i].dev.dev_path), "/nonexistent/softrdma/%s", d[i].dev.name);
		snprintf(d[i].dev.ibdev_path, sizeof(d[i].dev.ibdev_path), "/nonexistent/softrdma/%s", d[i].dev.name);
	}
	srd_devices = d;
	srd_ndevices = n;
}

SRD_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	pthread_once(&srd_devices_once, srd_make_devices);
	int err = srdgo_devices_error();
	if (err) {
		if (num_devices)
			*num_devices = 0;
		errno = err;
		return NULL;
	}
	struct ibv_device **list = calloc(srd_ndevices + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < srd_ndevices; i++)
		list[i] = &srd_devices[i].dev;
	if (num_devices)
		*num_devices = srd_ndevices;
	return list;
}

SRD_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SRD_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

SRD_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	uint64_t g = 0;
	if (device)
		g = srdgo_device_guid(((struct srd_device *)device)->index);
	return htobe64(g);
}

SRD_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return device ? ((struct srd_device *)device)->index : -1;
}

static int srd_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int srd_req_notify_cq(struct ibv_cq *cq, int solicited_only);
static int srd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int srd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int srd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int srd_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t size);
static int srd_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *input,
			       struct ibv_device_attr_ex *attr, size_t size);

SRD_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_context *sc = calloc(1, sizeof(*sc));
	if (!sc) {
		errno = ENOMEM;
		return NULL;
	}
	int err = srdgo_open(((struct srd_device *)device)->index, &sc->h);
	if (err) {
		free(sc);
		errno = err;
		return NULL;
	}
	struct ibv_context *c = &sc->vctx.context;
	c->device = device;
	// No uverbs command file stands behind a softrdma context, but
	// programs treat cmd_fd as an open descriptor (rdma-core's suite dups
	// it to import the context elsewhere, which then fails with
	// EOPNOTSUPP): an eventfd of its own, on which a uverbs command write
	// fails (EINVAL) rather than seeming to succeed.
	c->cmd_fd = eventfd(0, EFD_CLOEXEC);
	// Async events (async.c): one eventfd count per event, blocking as
	// the kernel's async file is.
	c->async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->ops.poll_cq = srd_poll_cq;
	c->ops.req_notify_cq = srd_req_notify_cq;
	c->ops.post_send = srd_post_send;
	c->ops.post_recv = srd_post_recv;
	c->ops.post_srq_recv = srd_post_srq_recv;
	c->ops.alloc_mw = srd_alloc_mw; // mw.c
	c->ops.bind_mw = srd_bind_mw;
	c->ops.dealloc_mw = srd_dealloc_mw;
	sc->vctx.sz = sizeof(sc->vctx);
	sc->vctx.query_port = srd_query_port;
	sc->vctx.query_device_ex = srd_query_device_ex;
	sc->vctx.create_cq_ex = srd_create_cq_ex; // cqex.c
	sc->vctx.create_qp_ex = srd_create_qp_ex; // qpex.c
	if (c->async_fd >= 0)
		srd_async_open(c);
	return c;
}

SRD_EXPORT int ibv_close_device(struct ibv_context *context)
{
	if (!context)
		return EINVAL;
	struct srd_context *sc = srd_ctx(context);
	srd_async_close(context);
	srdgo_close(sc->h);
	if (context->async_fd >= 0)
		close(context->async_fd);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	pthread_mutex_destroy(&context->mutex);
	free(sc);
	return 0;
}

SRD_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	if (!context || !attr)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	return srdgo_query_device(srd_ctx(context)->h, attr);
}

// srd_query_device_ex fills as much of the program's ibv_device_attr_ex
// as it has room for (size is the program's sizeof).
static int srd_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *input,
			       struct ibv_device_attr_ex *attr, size_t size)
{
	if (!c || !attr || (input && input->comp_mask))
		return EINVAL;
	if (size < sizeof(attr->orig_attr))
		return EINVAL;
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof(a));
	int err = srdgo_query_device(srd_ctx(c)->h, &a.orig_attr);
	if (err)
		return err;
	srdgo_query_device_ex(srd_ctx(c)->h, &a);
	memset(attr, 0, size);
	memcpy(attr, &a, size < sizeof(a) ? size : sizeof(a));
	return 0;
}

static int srd_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t size)
{
	if (!c || !attr)
		return EINVAL;
	struct ibv_port_attr a;
	memset(&a, 0, sizeof(a));
	int err = srdgo_query_port(srd_ctx(c)->h, port, &a);
	if (err)
		return err;
	memcpy(attr, &a, size < sizeof(a) ? size : sizeof(a));
	return 0;
}

// ibv_query_port is the header's fallback when the verbs_context has no
// query_port (ours has); it fills the whole structure.
#undef ibv_query_port
SRD_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	return srd_query_port(context, port_num, (struct ibv_port_attr *)port_attr, sizeof(struct ibv_port_attr));
}

SRD_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (!context || !gid)
		return -1;
	int err = srdgo_query_gid(srd_ctx(context)->h, port_num, index, gid->raw);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

// enum ibv_gid_type_sysfs of rdma-core's driver.h: 0 IB/RoCE v1, 1 RoCE v2.
SRD_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type)
{
	union ibv_gid gid;
	if (!type || ibv_query_gid(context, port_num, (int)index, &gid))
		return -1;
	*type = 1; // every softrdma GID is RoCE v2
	return 0;
}

SRD_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	if (!context || !pkey)
		return -1;
	uint16_t p;
	int err = srdgo_query_pkey(srd_ctx(context)->h, port_num, index, &p);
	if (err) {
		errno = err;
		return -1;
	}
	*pkey = htobe16(p);
	return 0;
}

// ibv_read_sysfs_file reads dir/file as libibverbs does; softrdma devices
// have no sysfs, so their paths give ENOENT.
SRD_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[512];
	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n < 0)
		return -1;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	else if ((size_t)n < size)
		buf[n] = '\0';
	else
		return -1; // no room for the terminator
	return (int)n;
}

SRD_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_pd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	int err = srdgo_alloc_pd(srd_ctx(context)->h, &p->h);
	if (err) {
		free(p);
		errno = err;
		return NULL;
	}
	p->pd.context = context;
	return &p->pd;
}

SRD_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	struct srd_pd *p = (struct srd_pd *)pd;
	int err = srdgo_destroy(p->h);
	if (!err)
		free(p);
	return err;
}

static struct ibv_mr *srd_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	if (!pd || (!addr && length)) {
		errno = EINVAL;
		return NULL;
	}
	if (iova != (uintptr_t)addr) {
		// The engine addresses a region by its virtual address.
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct srd_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	int err = srdgo_reg_mr(((struct srd_pd *)pd)->h, addr, length, access, &m->h, &m->mr.lkey, &m->mr.rkey);
	if (err) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = m->mr.lkey;
	return &m->mr;
}

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
SRD_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return srd_reg_mr(pd, addr, length, (uintptr_t)addr, access);
}

SRD_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return srd_reg_mr(pd, addr, length, iova, (int)access);
}

SRD_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return srd_reg_mr(pd, addr, length, iova, access);
}

SRD_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!mr)
		return EINVAL;
	struct srd_mr *m = (struct srd_mr *)mr;
	int err = srdgo_destroy(m->h);
	if (!err)
		free(m);
	return err;
}

SRD_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	// One eventfd count per event: ibv_get_cq_event reads one.
	ch->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->ch.fd < 0) {
		int e = errno;
		free(ch);
		errno = e;
		return NULL;
	}
	int err = srdgo_create_channel(srd_ctx(context)->h, ch->ch.fd, &ch->h);
	if (err) {
		close(ch->ch.fd);
		free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = context;
	return &ch->ch;
}

SRD_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	if (!channel)
		return EINVAL;
	struct srd_channel *ch = (struct srd_channel *)channel;
	if (channel->refcnt)
		return EBUSY;
	int err = srdgo_destroy(ch->h);
	if (err)
		return err;
	close(channel->fd);
	free(ch);
	return 0;
}

SRD_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
					struct ibv_comp_channel *channel, int comp_vector)
{
	if (!context || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_cq *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int size = cqe;
	int err = srdgo_create_cq(srd_ctx(context)->h, cqe, channel ? ((struct srd_channel *)channel)->h : 0,
				  &c->cq, &c->h, &size);
	if (err) {
		free(c);
		errno = err;
		return NULL;
	}
	c->cq.context = context;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = size;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	srd_async_register(context, c->h, &c->cq);
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	return &c->cq;
}

SRD_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	if (!cq)
		return EINVAL;
	int size = 0;
	int err = srdgo_resize_cq(((struct srd_cq *)cq)->h, cqe, &size);
	if (!err)
		cq->cqe = size;
	return err;
}

SRD_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	if (!cq)
		return EINVAL;
	struct srd_cq *c = (struct srd_cq *)cq;
	struct ibv_comp_channel *channel = cq->channel;
	srd_async_forget(c->h);
	int err = srdgo_destroy(c->h);
	if (err)
		return err;
	if (channel) {
		pthread_mutex_lock(&cq->context->mutex);
		channel->refcnt--;
		pthread_mutex_unlock(&cq->context->mutex);
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(c->ex);
	free(c);
	return 0;
}

SRD_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	uint64_t one;
	// Blocks unless the program made the fd non-blocking (then EAGAIN),
	// as reading the kernel's completion channel does.
	if (read(channel->fd, &one, sizeof(one)) != sizeof(one))
		return -1;
	struct ibv_cq *c = srdgo_take_cq_event(((struct srd_channel *)channel)->h);
	if (!c) {
		errno = EIO;
		return -1;
	}
	*cq = c;
	*cq_context = c->cq_context;
	return 0;
}

SRD_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

static int srd_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	if (n < 0 || (n > 0 && !wc))
		return -1;
	return srdgo_poll_cq(((struct srd_cq *)cq)->h, n, wc);
}

static int srd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return srdgo_req_notify_cq(((struct srd_cq *)cq)->h, solicited_only);
}

static uintptr_t srd_cq_handle(struct ibv_cq *cq) { return cq ? ((struct srd_cq *)cq)->h : 0; }
static uintptr_t srd_srq_handle(struct ibv_srq *srq) { return srq ? ((struct srd_srq *)srq)->h : 0; }

SRD_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t qpn;
	int err = srdgo_create_qp(((struct srd_pd *)pd)->h, attr, srd_cq_handle(attr->send_cq),
				  srd_cq_handle(attr->recv_cq), srd_srq_handle(attr->srq), &q->h, &qpn);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = attr->srq;
	q->qp.handle = qpn;
	q->qp.qp_num = qpn;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = attr->qp_type;
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	srd_async_register(pd->context, q->h, &q->qp);
	return &q->qp;
}

// ibv_qp_to_qp_ex is the QP's ibv_qp_ex if ibv_create_qp_ex made it with
// send ops (qpex.c), else NULL, as libibverbs says.
SRD_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct srd_qp *q = (struct srd_qp *)qp;
	return q && q->ex ? &q->qpx : NULL;
}

SRD_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	if (!qp || !attr)
		return EINVAL;
	int err = srdgo_modify_qp(((struct srd_qp *)qp)->h, attr, attr_mask);
	if (!err && (attr_mask & IBV_QP_STATE))
		qp->state = attr->qp_state;
	return err;
}

SRD_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	(void)attr_mask; // every attribute is filled, as providers do
	if (!qp || !attr || !init_attr)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	memset(init_attr, 0, sizeof(*init_attr));
	int err = srdgo_query_qp(((struct srd_qp *)qp)->h, attr, init_attr);
	if (err)
		return err;
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	init_attr->qp_type = qp->qp_type;
	qp->state = attr->qp_state;
	return 0;
}

SRD_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	if (!qp)
		return EINVAL;
	struct srd_qp *q = (struct srd_qp *)qp;
	srd_async_forget(q->h);
	int err = srdgo_destroy(q->h);
	if (err)
		return err;
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	srd_qpx_free(q->ex);
	free(q);
	return 0;
}

static int srd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return srdgo_post_send(((struct srd_qp *)qp)->h, wr, bad);
}

static int srd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return srdgo_post_recv(((struct srd_qp *)qp)->h, wr, bad);
}

static int srd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return srdgo_post_recv(((struct srd_srq *)srq)->h, wr, bad);
}

SRD_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	int err = srdgo_create_srq(((struct srd_pd *)pd)->h, &attr->attr, &s->h);
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	srd_async_register(pd->context, s->h, &s->srq);
	return &s->srq;
}

SRD_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int attr_mask)
{
	if (!srq || !attr)
		return EINVAL;
	return srdgo_modify_srq(((struct srd_srq *)srq)->h, attr, attr_mask);
}

SRD_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return EINVAL;
	return srdgo_query_srq(((struct srd_srq *)srq)->h, attr);
}

SRD_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	if (!srq)
		return EINVAL;
	struct srd_srq *s = (struct srd_srq *)srq;
	srd_async_forget(s->h);
	int err = srdgo_destroy(s->h);
	if (err)
		return err;
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(s);
	return 0;
}

SRD_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_ah *a = calloc(1, sizeof(*a));
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	int err = srdgo_create_ah(((struct srd_pd *)pd)->h, attr, &a->h);
	if (err) {
		free(a);
		errno = err;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	return &a->ah;
}

SRD_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	if (!ah)
		return EINVAL;
	struct srd_ah *a = (struct srd_ah *)ah;
	int err = srdgo_destroy(a->h);
	if (!err)
		free(a);
	return err;
}

SRD_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return srdgo_mcast(((struct srd_qp *)qp)->h, (uint8_t *)gid->raw, lid, 1);
}

SRD_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return srdgo_mcast(((struct srd_qp *)qp)->h, (uint8_t *)gid->raw, lid, 0);
}

SRD_EXPORT int ibv_fork_init(void)
{
	// softrdma pins no pages: the engine reaches registered memory through
	// the process's own mappings, which stay right in the parent across
	// fork (copy on write), so there is nothing to set up, as on a kernel
	// with copy-on-fork for pinned pages (ibv_is_fork_initialized says
	// IBV_FORK_UNNEEDED). The child cannot use the library: a Go runtime
	// does not survive fork without exec.
	return 0;
}

SRD_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((unsigned)status >= sizeof(s) / sizeof(s[0]) || !s[status])
		return "unknown";
	return s[status];
}

SRD_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
					"InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
	int i = (int)t + 1;
	return i >= 0 && i < (int)(sizeof(s) / sizeof(s[0])) ? s[i] : "unknown";
}

SRD_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE",
					"PORT_ACTIVE_DEFER"};
	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "unknown";
}
