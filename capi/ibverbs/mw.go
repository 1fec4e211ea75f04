//go:build capi

package main

/*
#include "srd.h"
#include "mw.h"
*/
import "C"

import (
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// mw is a memory window.
type mw struct{ mw *verbs.MW }

func (m *mw) destroy() error { return m.mw.Dealloc() }

//export srdgo_alloc_mw
func srdgo_alloc_mw(h C.uintptr_t, typ C.int, out *C.uintptr_t, rkey *C.uint32_t) C.int {
	p, ok := get[*pd](h)
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

// bindInfo converts an ibv_mw_bind_info.
func bindInfo(b *C.struct_ibv_mw_bind_info) (verbs.MWBindInfo, bool) {
	info := verbs.MWBindInfo{Addr: uint64(b.addr), Length: uint64(b.length), Access: verbs.Access(uint32(b.mw_access_flags))}
	if b.mr != nil {
		m, ok := get[*mr]((*C.struct_srd_mr)(unsafe.Pointer(b.mr)).h)
		if !ok {
			return info, false
		}
		info.MR = m.mr
	}
	return info, true
}

//export srdgo_bind_mw
func srdgo_bind_mw(qh, mh C.uintptr_t, b *C.struct_ibv_mw_bind, rkey *C.uint32_t) C.int {
	q, ok := get[*qp](qh)
	if !ok {
		return C.EINVAL
	}
	m, ok := get[*mw](mh)
	if !ok {
		return C.EINVAL
	}
	info, ok := bindInfo(&b.bind_info)
	if !ok {
		return C.EINVAL
	}
	q.smu.Lock()
	defer q.smu.Unlock()
	k, err := q.qp.BindMW(m.mw, verbs.MWBind{ID: uint64(b.wr_id), Flags: verbs.SendFlags(b.send_flags), Info: info})
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(k)
	return 0
}

// convertBind fills the window and binding of a BIND_MW work request
// posted with ibv_post_send (a type 2 window's bind).
func convertBind(w *C.struct_ibv_send_wr, sw *verbs.SendWR) error {
	b := (*C.struct_srd_wr_bind)(unsafe.Add(unsafe.Pointer(w), C.srd_send_wr_bind_off))
	if b.mw == nil {
		return errBadWR
	}
	m, ok := get[*mw]((*C.struct_srd_mw)(unsafe.Pointer(b.mw)).h)
	if !ok {
		return errBadWR
	}
	info, ok := bindInfo(&b.bind_info)
	if !ok {
		return errBadWR
	}
	sw.MW, sw.Bind, sw.RKey = m.mw, info, wire.RKey(b.rkey)
	return nil
}
