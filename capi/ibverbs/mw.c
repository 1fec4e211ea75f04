//go:build capi

// Memory windows (mw.go): the context's alloc_mw, bind_mw and dealloc_mw
// ops, which the inline ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw of
// <infiniband/verbs.h> call. Type 1 windows are bound by the bind call,
// type 2 windows by BIND_MW work requests. docs/DESIGN.md, "The C ABI
// library", describes them.
#include <errno.h>
#include <stdlib.h>
#include "srd.h"
#include "_cgo_export.h"

struct ibv_mw *srd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	if (!pd || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
		errno = EINVAL;
		return NULL;
	}
	struct srd_mw *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t rkey;
	int err = srdgo_alloc_mw(((struct srd_pd *)pd)->h, type, &m->h, &rkey);
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

// srd_bind_mw posts the bind (ibv_bind_mw has checked the type and the
// region's PD) and gives the window its new R_Key, as providers do.
int srd_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	if (!qp || !mw || !bind)
		return EINVAL;
	uint32_t rkey;
	int err = srdgo_bind_mw(((struct srd_qp *)qp)->h, ((struct srd_mw *)mw)->h, bind, &rkey);
	if (err)
		return err;
	mw->rkey = rkey;
	return 0;
}

int srd_dealloc_mw(struct ibv_mw *mw)
{
	if (!mw)
		return EINVAL;
	struct srd_mw *m = (struct srd_mw *)mw;
	int err = srdgo_destroy(m->h);
	if (!err)
		free(m);
	return err;
}
