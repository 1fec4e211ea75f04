//go:build capi

package main

/*
#include "srd.h"
*/
import "C"

import (
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Memory windows (mw.c) over verbs' MW: ibv_alloc_mw, ibv_bind_mw (the
// type 1 bind call), BIND_MW work requests (type 2, ibv_post_send and
// ibv_wr_bind_mw), ibv_dealloc_mw.

type mw struct{ mw *verbs.MW }

func (m *mw) destroy() error { return m.mw.Dealloc() }

//export srdgo_alloc_mw
func srdgo_alloc_mw(pdh C.uintptr_t, typ C.int, out *C.uintptr_t, rkey *C.uint32_t) C.int {
	p, ok := get[*pd](pdh)
	if !ok {
		return C.EINVAL
	}
	m, err := p.pd.AllocMW(verbs.MWType(typ))
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(m.RKey())
	newHandle(&mw{mw: m}, out)
	return 0
}

// bindInfoIn converts an ibv_mw_bind_info; a region that is not one is
// errBadWR.
func bindInfoIn(b *C.struct_ibv_mw_bind_info) (verbs.MWBindInfo, error) {
	info := verbs.MWBindInfo{Addr: uint64(b.addr), Length: uint64(b.length), Access: verbs.Access(b.mw_access_flags)}
	if b.mr != nil {
		m, ok := get[*mr]((*C.struct_srd_mr)(unsafe.Pointer(b.mr)).h)
		if !ok {
			return info, errBadWR
		}
		info.MR = m.mr
	}
	return info, nil
}

// bindWRIn fills a BIND_MW work request from ibv_send_wr's bind_mw.
func bindWRIn(b *C.struct_srd_wr_bind, sw *verbs.SendWR) error {
	if b.mw == nil {
		return errBadWR
	}
	m, ok := get[*mw]((*C.struct_srd_mw)(unsafe.Pointer(b.mw)).h)
	if !ok {
		return errBadWR
	}
	info, err := bindInfoIn(&b.bind_info)
	if err != nil {
		return err
	}
	sw.MW, sw.Bind, sw.RKey = m.mw, info, wire.RKey(b.rkey)
	return nil
}

// srdgo_bind_mw is the type 1 bind call: the window's new R_Key in rkey.
//
//export srdgo_bind_mw
func srdgo_bind_mw(qph, mwh C.uintptr_t, b *C.struct_ibv_mw_bind, rkey *C.uint32_t) C.int {
	q, ok := get[*qp](qph)
	m, ok2 := get[*mw](mwh)
	if !ok || !ok2 {
		return C.EINVAL
	}
	info, err := bindInfoIn(&b.bind_info)
	if err != nil {
		return C.EINVAL
	}
	k, err := q.qp.BindMW(m.mw, verbs.MWBind{ID: uint64(b.wr_id), Flags: verbs.SendFlags(b.send_flags), Info: info})
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(k)
	return 0
}
