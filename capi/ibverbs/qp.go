//go:build capi

package main

/*
#include "srd.h"
*/
import "C"

import (
	"errors"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// qp is a queue pair with the scratch its posts convert work requests
// into, reused from post to post (no allocation once grown).
type qp struct {
	qp  *verbs.QP
	typ verbs.QPType
	recvPoster

	smu    sync.Mutex
	swrs   []verbs.SendWR
	sges   []verbs.SGE
	inline []byte
	sbad   []*C.struct_ibv_send_wr
}

func (q *qp) destroy() error { return q.qp.Destroy() }

// recvPoster posts receive work requests to a QP or an SRQ.
type recvPoster struct {
	post func([]verbs.RecvWR) error

	rmu  sync.Mutex
	rwrs []verbs.RecvWR
	sges []verbs.SGE
	bad  []*C.struct_ibv_recv_wr
}

func capIn(c *C.struct_ibv_qp_cap) verbs.QPCap {
	return verbs.QPCap{MaxSendWR: int(c.max_send_wr), MaxRecvWR: int(c.max_recv_wr), MaxSendSGE: int(c.max_send_sge),
		MaxRecvSGE: int(c.max_recv_sge), MaxInlineData: inlineRoom(c)}
}

// inlineRoom is the inline data a QP is given: at least what its send
// SGEs take in a work queue entry (16 bytes each), as Linux rxe sizes it,
// so that programs that post small inline sends on a QP asking for no
// inline data (rdma_xclient) run as they do on rxe.
func inlineRoom(c *C.struct_ibv_qp_cap) int {
	n := int(c.max_inline_data)
	if s := int(c.max_send_sge) * 16; s > n && s <= verbs.MaxInline {
		n = s
	}
	return n
}

func capOut(c verbs.QPCap, o *C.struct_ibv_qp_cap) {
	o.max_send_wr = C.uint32_t(c.MaxSendWR)
	o.max_recv_wr = C.uint32_t(c.MaxRecvWR)
	o.max_send_sge = C.uint32_t(c.MaxSendSGE)
	o.max_recv_sge = C.uint32_t(c.MaxRecvSGE)
	o.max_inline_data = C.uint32_t(c.MaxInlineData)
}

//export srdgo_create_qp
func srdgo_create_qp(h C.uintptr_t, attr *C.struct_ibv_qp_init_attr, sendCQ, recvCQ, srqh C.uintptr_t, out *C.uintptr_t, qpn *C.uint32_t) C.int {
	p, ok := get[*pd](h)
	if !ok {
		return C.EINVAL
	}
	typ := verbs.QPType(attr.qp_type)
	switch typ {
	case verbs.RC, verbs.UC, verbs.UD:
	default:
		return C.EOPNOTSUPP // XRC, raw packet, driver QPs
	}
	scq, ok1 := get[*cq](sendCQ)
	rcq, ok2 := get[*cq](recvCQ)
	if !ok1 || !ok2 {
		return C.EINVAL
	}
	init := verbs.QPInitAttr{Type: typ, SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: capIn(&attr.cap), SQSigAll: attr.sq_sig_all != 0}
	if srqh != 0 {
		s, ok := get[*srq](srqh)
		if !ok {
			return C.EINVAL
		}
		init.SRQ = s.srq
	}
	v, err := p.pd.CreateQP(init)
	if err != nil {
		return errno(err)
	}
	_, got := v.Query()
	capOut(got.Cap, &attr.cap)
	q := &qp{qp: v, typ: typ}
	q.post = v.PostRecv
	*qpn = C.uint32_t(v.QPN())
	newHandle(q, out)
	return 0
}

//export srdgo_modify_qp
func srdgo_modify_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	q, ok := get[*qp](h)
	if !ok {
		return C.EINVAL
	}
	attr := verbs.QPAttr{
		State: verbs.QPState(a.qp_state), CurState: verbs.QPState(a.cur_qp_state), PathMTU: verbs.MTU(a.path_mtu),
		QKey: wire.QKey(a.qkey), RQPSN: wire.PSN(a.rq_psn), SQPSN: wire.PSN(a.sq_psn), DestQPN: wire.QPN(a.dest_qp_num),
		AccessFlags: verbs.Access(a.qp_access_flags), Cap: capIn(&a.cap), AH: ahAttrIn(&a.ah_attr),
		PKeyIndex: int(a.pkey_index), EnSQDAsyncNotify: a.en_sqd_async_notify != 0,
		MaxRdAtomic: int(a.max_rd_atomic), MaxDestRdAtomic: int(a.max_dest_rd_atomic), MinRNRTimer: uint8(a.min_rnr_timer),
		PortNum: int(a.port_num), Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
	}
	return errno(q.qp.Modify(&attr, verbs.AttrMask(mask)))
}

//export srdgo_query_qp
func srdgo_query_qp(h C.uintptr_t, o *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) C.int {
	q, ok := get[*qp](h)
	if !ok {
		return C.EINVAL
	}
	a, ia := q.qp.Query()
	qpAttrOut(a, o)
	capOut(ia.Cap, &init.cap)
	if ia.SQSigAll {
		init.sq_sig_all = 1
	}
	return 0
}

//export srdgo_mcast
func srdgo_mcast(h C.uintptr_t, gid *C.uint8_t, lid C.uint16_t, attach C.int) C.int {
	q, ok := get[*qp](h)
	if !ok {
		return C.EINVAL
	}
	var g wire.GID
	copy(g[:], unsafe.Slice((*byte)(unsafe.Pointer(gid)), 16))
	if attach != 0 {
		return errno(q.qp.AttachMcast(g, uint16(lid)))
	}
	return errno(q.qp.DetachMcast(g, uint16(lid)))
}

// cmem is n bytes of the program's memory at addr.
func cmem(addr uint64, n uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(addr))), n)
}

func ntohl(v uint32) uint32 { return bits.ReverseBytes32(v) }

// errBadWR is a work request the library cannot convert (a negative
// num_sge, an address handle that is not one).
var errBadWR = errors.New("softrdma: invalid work request")

// convertSend converts one C work request, appending its SGEs and inline
// data to the QP's scratch.
func (q *qp) convertSend(w *C.struct_ibv_send_wr, sw *verbs.SendWR) error {
	n := int(w.num_sge)
	if n < 0 || n > 0 && w.sg_list == nil {
		return errBadWR
	}
	*sw = verbs.SendWR{ID: uint64(w.wr_id), Opcode: verbs.WROpcode(w.opcode), Flags: verbs.SendFlags(w.send_flags)}
	sl := unsafe.Slice(w.sg_list, n)
	if sw.Flags&verbs.SendInline != 0 {
		// Inline data is copied at post time from plain pointers.
		start := len(q.inline)
		for i := range sl {
			q.inline = append(q.inline, cmem(uint64(sl[i].addr), uint32(sl[i].length))...)
		}
		sw.Inline = q.inline[start:len(q.inline):len(q.inline)]
	} else if n > 0 {
		start := len(q.sges)
		for i := range sl {
			q.sges = append(q.sges, verbs.SGE{Addr: uint64(sl[i].addr), Length: uint32(sl[i].length), LKey: wire.LKey(sl[i].lkey)})
		}
		sw.SGL = q.sges[start:len(q.sges):len(q.sges)]
	}
	base := unsafe.Pointer(w)
	immOrInv := *(*uint32)(unsafe.Add(base, C.srd_send_wr_imm_off))
	u := unsafe.Add(base, C.srd_send_wr_wr_off)
	switch sw.Opcode {
	case verbs.WRSendWithImm, verbs.WRRDMAWriteWithImm:
		sw.Imm = ntohl(immOrInv)
	case verbs.WRSendWithInv, verbs.WRLocalInv:
		sw.InvRKey = wire.RKey(immOrInv)
	}
	switch sw.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRFlush:
		r := (*C.struct_srd_wr_rdma)(u)
		sw.RemoteAddr, sw.RKey = uint64(r.remote_addr), wire.RKey(r.rkey)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		a := (*C.struct_srd_wr_atomic)(u)
		sw.RemoteAddr, sw.RKey = uint64(a.remote_addr), wire.RKey(a.rkey)
		sw.CompareAdd, sw.Swap = uint64(a.compare_add), uint64(a.swap)
	}
	if sw.Opcode == verbs.WRBindMW {
		if err := bindWRIn((*C.struct_srd_wr_bind)(unsafe.Add(base, C.srd_send_wr_bind_off)), sw); err != nil {
			return err
		}
	}
	if q.typ == verbs.UD {
		ud := (*C.struct_srd_wr_ud)(u)
		if ud.ah == nil {
			return errBadWR
		}
		a, ok := get[*ah]((*C.struct_srd_ah)(unsafe.Pointer(ud.ah)).h)
		if !ok {
			return errBadWR
		}
		sw.AH, sw.RemoteQPN, sw.RemoteQKey = a.ah, wire.QPN(ud.remote_qpn), wire.QKey(ud.remote_qkey)
	}
	return nil
}

//export srdgo_post_send
func srdgo_post_send(h C.uintptr_t, wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	q, ok := get[*qp](h)
	if !ok {
		*bad = wr
		return C.EINVAL
	}
	q.smu.Lock()
	defer q.smu.Unlock()
	wrs, ptrs := q.swrs[:0], q.sbad[:0]
	q.sges, q.inline = q.sges[:0], q.inline[:0]
	var convErr error
	for w := wr; w != nil; w = w.next {
		wrs = append(wrs, verbs.SendWR{})
		if convErr = q.convertSend(w, &wrs[len(wrs)-1]); convErr != nil {
			wrs = wrs[:len(wrs)-1]
			ptrs = append(ptrs, w)
			break
		}
		ptrs = append(ptrs, w)
	}
	err := q.qp.PostSend(wrs)
	clear(wrs) // drop the references to AHs and the program's memory
	q.swrs, q.sbad = wrs[:0], ptrs[:0]
	if err != nil {
		return sendError(err, wr, ptrs, bad)
	}
	if convErr != nil {
		*bad = ptrs[len(wrs)]
		return C.EINVAL
	}
	return 0
}

// sendError sets bad_wr and returns the errno of a failed post; out of
// line, so that the successful path's locals do not escape.
func sendError(err error, wr *C.struct_ibv_send_wr, ptrs []*C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	if we, ok := errors.AsType[*verbs.WRError](err); ok {
		*bad = ptrs[we.Index]
		return errno(we.Err)
	}
	*bad = wr
	return errno(err)
}

func recvError(err error, wr *C.struct_ibv_recv_wr, ptrs []*C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	if we, ok := errors.AsType[*verbs.WRError](err); ok {
		*bad = ptrs[we.Index]
		return errno(we.Err)
	}
	*bad = wr
	return errno(err)
}

//export srdgo_post_recv
func srdgo_post_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	var r *recvPoster
	if q, ok := get[*qp](h); ok {
		r = &q.recvPoster
	} else if s, ok := get[*srq](h); ok {
		r = &s.recvPoster
	} else {
		*bad = wr
		return C.EINVAL
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	wrs, ptrs, sges := r.rwrs[:0], r.bad[:0], r.sges[:0]
	bad1 := false
	for w := wr; w != nil; w = w.next {
		n := int(w.num_sge)
		ptrs = append(ptrs, w)
		if n < 0 || n > 0 && w.sg_list == nil {
			bad1 = true
			break
		}
		start := len(sges)
		for _, s := range unsafe.Slice(w.sg_list, n) {
			sges = append(sges, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: wire.LKey(s.lkey)})
		}
		wrs = append(wrs, verbs.RecvWR{ID: uint64(w.wr_id), SGL: sges[start:len(sges):len(sges)]})
	}
	err := r.post(wrs)
	clear(wrs)
	r.rwrs, r.bad, r.sges = wrs[:0], ptrs[:0], sges[:0]
	if err != nil {
		return recvError(err, wr, ptrs, bad)
	}
	if bad1 {
		*bad = ptrs[len(wrs)]
		return C.EINVAL
	}
	return 0
}

//export srdgo_poll_cq
func srdgo_poll_cq(h C.uintptr_t, n C.int, out *C.struct_ibv_wc) C.int {
	q, ok := get[*cq](h)
	if !ok {
		return -1
	}
	m := min(int(n), len(q.wcs))
	if m <= 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	got := q.cq.Poll(q.wcs[:m])
	dst := unsafe.Slice(out, got)
	for i := range got {
		wcOut(&q.wcs[i], &dst[i])
	}
	return C.int(got)
}

// wcOut converts a completion to the program's ibv_wc.
func wcOut(w *verbs.WC, o *C.struct_ibv_wc) {
	o.wr_id = C.uint64_t(w.WRID)
	o.status = C.enum_ibv_wc_status(w.Status)
	o.opcode = C.enum_ibv_wc_opcode(w.Opcode)
	o.vendor_err = C.uint32_t(w.VendorErr)
	o.byte_len = C.uint32_t(w.ByteLen)
	var u uint32
	switch {
	case w.Flags&verbs.WCWithImm != 0:
		u = bits.ReverseBytes32(w.Imm)
	case w.Flags&verbs.WCWithInv != 0:
		u = uint32(w.InvalidatedRKey)
	}
	*(*uint32)(unsafe.Add(unsafe.Pointer(o), C.srd_wc_imm_off)) = u
	o.qp_num = C.uint32_t(w.QPNum)
	o.src_qp = C.uint32_t(w.SrcQP)
	o.wc_flags = C.uint(w.Flags)
	o.pkey_index = C.uint16_t(w.PKeyIndex)
	o.slid = C.uint16_t(w.SLID)
	o.sl = C.uint8_t(w.SL)
	o.dlid_path_bits = C.uint8_t(w.DLIDPath)
}

// qpAttrOut fills a C ibv_qp_attr from a.
func qpAttrOut(a verbs.QPAttr, o *C.struct_ibv_qp_attr) {
	o.qp_state = C.enum_ibv_qp_state(a.State)
	o.cur_qp_state = C.enum_ibv_qp_state(a.CurState)
	o.path_mtu = C.enum_ibv_mtu(a.PathMTU)
	o.qkey = C.uint32_t(a.QKey)
	o.rq_psn = C.uint32_t(a.RQPSN)
	o.sq_psn = C.uint32_t(a.SQPSN)
	o.dest_qp_num = C.uint32_t(a.DestQPN)
	o.qp_access_flags = C.uint(a.AccessFlags)
	capOut(a.Cap, &o.cap)
	ahAttrOut(a.AH, &o.ah_attr)
	o.pkey_index = C.uint16_t(a.PKeyIndex)
	if a.EnSQDAsyncNotify {
		o.en_sqd_async_notify = 1
	}
	if a.SQDraining {
		o.sq_draining = 1
	}
	o.max_rd_atomic = C.uint8_t(a.MaxRdAtomic)
	o.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	o.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	o.port_num = C.uint8_t(a.PortNum)
	o.timeout = C.uint8_t(a.Timeout)
	o.retry_cnt = C.uint8_t(a.RetryCnt)
	o.rnr_retry = C.uint8_t(a.RNRRetry)
}
