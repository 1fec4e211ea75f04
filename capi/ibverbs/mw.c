//go:build capi

// Memory windows (ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw): the
// header's inline functions call these through the context's ops. The
// engine's windows (verbs/mw.go) do the work; a type 2 window's BIND_MW
// work request goes through ibv_post_send (qp.go, mw.go).
#include <errno.h>
#include <stdlib.h>
#include "srd.h"
#include "mw.h"
#include "_cgo_export.h"

static struct ibv_mw *srd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_mw *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t rkey = 0;
	int err = srdgo_alloc_mw(((struct srd_pd *)pd)->h, (int)type, &m->h, &rkey);
	if (err) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mw.context = pd->context;
	m->mw.pd = pd;
	m->mw.rkey = rkey;
	m->mw.handle = rkey >> 8;
	m->mw.type = type;
	return &m->mw;
}

// srd_bind_mw posts the BIND_MW work request of a type 1 window and, as
// rdma-core's providers do, leaves the key it will have in mw->rkey.
static int srd_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	if (!qp || !mw || !mw_bind)
		return EINVAL;
	uint32_t rkey = 0;
	int err = srdgo_bind_mw(((struct srd_qp *)qp)->h, ((struct srd_mw *)mw)->h, mw_bind, &rkey);
	if (err)
		return err;
	mw->rkey = rkey;
	return 0;
}

static int srd_dealloc_mw(struct ibv_mw *mw)
{
	if (!mw)
		return EINVAL;
	struct srd_mw *m = (struct srd_mw *)mw;
	int err = srdgo_destroy(m->h);
	if (!err)
		free(m);
	return err;
}

void srd_set_mw_ops(struct ibv_context_ops *ops)
{
	ops->alloc_mw = srd_alloc_mw;
	ops->bind_mw = srd_bind_mw;
	ops->dealloc_mw = srd_dealloc_mw;
}
