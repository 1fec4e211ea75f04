//go:build capi

package main

/*
#include <string.h>
#include "srdcm.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// The rdma_cm of the process: one rdmacm.CM over the data devices of the
// contexts rdmacm.c opened, one per configured device, in device order.
var (
	cmMu   sync.Mutex
	cmOnce *rdmacm.CM
	cmDevs []*verbs.Device
)

//export srdgo_cm_init
func srdgo_cm_init(n C.int, ctxs *C.uintptr_t) C.int {
	cmMu.Lock()
	defer cmMu.Unlock()
	if cmOnce != nil {
		return 0
	}
	hs := unsafe.Slice(ctxs, int(n))
	var devs []*verbs.Device
	for _, h := range hs {
		c, ok := get[*devContext](h)
		if !ok {
			return C.EINVAL
		}
		d, err := c.dataDevice()
		if err != nil {
			return errno(err)
		}
		devs = append(devs, d)
	}
	if len(devs) == 0 {
		return C.ENODEV
	}
	s, err := rdmacm.New(devs, &rdmacm.Options{Logger: logger})
	if err != nil {
		return cmErrno(err)
	}
	cmOnce, cmDevs = s, devs
	return 0
}

func theCM() *rdmacm.CM {
	cmMu.Lock()
	defer cmMu.Unlock()
	return cmOnce
}

// cmErrno is the errno librdmacm sets for err.
func cmErrno(err error) C.int {
	var e syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return C.int(e)
	case errors.Is(err, rdmacm.ErrAddrInUse):
		return C.EADDRINUSE
	case errors.Is(err, rdmacm.ErrNoDevice):
		return C.EADDRNOTAVAIL
	case errors.Is(err, rdmacm.ErrClosed):
		return C.ENODEV
	case errors.Is(err, rdmacm.ErrInvalid), errors.Is(err, rdmacm.ErrState):
		return C.EINVAL
	case errors.Is(err, rdmacm.ErrRejected):
		return C.ECONNREFUSED
	case errors.Is(err, rdmacm.ErrUnreachable):
		return C.ETIMEDOUT
	case errors.Is(err, rdmacm.ErrDisconnected):
		return C.ENOTCONN
	}
	return errno(err)
}

// cmChannel is an rdma_event_channel: a goroutine moves the events of the
// Go channel to a queue and counts each on the eventfd programs poll.
type cmChannel struct {
	ch     *rdmacm.EventChannel
	fd     int
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	q  []*rdmacm.Event
}

func (c *cmChannel) destroy() error {
	c.cancel()
	c.ch.Close()
	<-c.done
	return nil
}

func (c *cmChannel) run(ctx context.Context) {
	defer close(c.done)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	for {
		ev, err := c.ch.Get(ctx)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.q = append(c.q, ev)
		c.mu.Unlock()
		syscall.Write(c.fd, one[:])
	}
}

//export srdgo_cm_create_channel
func srdgo_cm_create_channel(fd C.int, out *C.uintptr_t) C.int {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cmChannel{ch: rdmacm.NewEventChannel(), fd: int(fd), cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	newHandle(c, out)
	return 0
}

// cmID is an rdma_cm_id: the Go ID and the C structure's address.
type cmID struct {
	id   *rdmacm.ID
	req  *rdmacm.ConnParam // a connect request's parameters, for rdma_accept(id, NULL)
	cptr unsafe.Pointer    // C memory (struct srd_cm_id), not Go's
	// gone is set when the program destroys the ID (rdma_destroy_id frees
	// cptr right after): its events still queued are dropped, as the
	// kernel drops a destroyed ID's pending events.
	gone atomic.Bool
}

func (i *cmID) destroy() error {
	i.gone.Store(true)
	liveIDs.Delete(i)
	return i.id.Destroy()
}

// liveIDs holds the IDs not destroyed yet, for srdgo_cm_exit.
var liveIDs sync.Map // *cmID -> struct{}

// srdgo_cm_exit destroys the IDs a program leaves at exit, as the kernel
// does when a process's rdma_cm file closes: an established connection
// gets its DREQ, so the peer sees RDMA_CM_EVENT_DISCONNECTED at once
// rather than after its own DREQ's retries.
//
//export srdgo_cm_exit
func srdgo_cm_exit() {
	liveIDs.Range(func(k, _ any) bool {
		k.(*cmID).id.Destroy()
		liveIDs.Delete(k)
		return true
	})
}

//export srdgo_cm_create_id
func srdgo_cm_create_id(chh C.uintptr_t, ps C.int, cptr unsafe.Pointer, out *C.uintptr_t) C.int {
	s := theCM()
	if s == nil {
		return C.ENODEV
	}
	var ch *rdmacm.EventChannel
	if chh != 0 {
		c, ok := get[*cmChannel](chh)
		if !ok {
			return C.EINVAL
		}
		ch = c.ch
	}
	i := &cmID{cptr: cptr}
	id, err := s.CreateID(ch, rdmacm.PortSpace(ps), i)
	if err != nil {
		return cmErrno(err)
	}
	i.id = id
	liveIDs.Store(i, struct{}{})
	newHandle(i, out)
	return 0
}

//export srdgo_cm_set_cptr
func srdgo_cm_set_cptr(h C.uintptr_t, cptr unsafe.Pointer) {
	if i, ok := get[*cmID](h); ok {
		i.cptr = cptr
	}
}

func addrIn(sa *C.struct_sockaddr) (netip.AddrPort, bool) {
	if sa == nil {
		return netip.AddrPort{}, false
	}
	switch sa.sa_family {
	case C.AF_INET:
		b := unsafe.Slice((*byte)(unsafe.Pointer(sa)), C.sizeof_struct_sockaddr_in)
		a := netip.AddrFrom4([4]byte(b[4:8]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:4])), true
	case C.AF_INET6:
		b := unsafe.Slice((*byte)(unsafe.Pointer(sa)), C.sizeof_struct_sockaddr_in6)
		a := netip.AddrFrom16([16]byte(b[8:24]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:4])), true
	}
	return netip.AddrPort{}, false
}

func addrOut(a netip.AddrPort, o *C.struct_sockaddr_storage) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(o)), C.sizeof_struct_sockaddr_storage)
	clear(b)
	if !a.IsValid() {
		return
	}
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		binary.NativeEndian.PutUint16(b[0:2], C.AF_INET)
		binary.BigEndian.PutUint16(b[2:4], a.Port())
		v := ip.Unmap().As4()
		copy(b[4:8], v[:])
		return
	}
	binary.NativeEndian.PutUint16(b[0:2], C.AF_INET6)
	binary.BigEndian.PutUint16(b[2:4], a.Port())
	v := ip.As16()
	copy(b[8:24], v[:])
}

//export srdgo_cm_info
func srdgo_cm_info(h C.uintptr_t, o *C.struct_srd_cm_info) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	o.dev = -1
	if d := i.id.Device(); d != nil {
		for k, x := range cmDevs {
			if x == d {
				o.dev = C.int(k)
			}
		}
	}
	addrOut(i.id.LocalAddr(), &o.src)
	addrOut(i.id.PeerAddr(), &o.dst)
	return 0
}

//export srdgo_cm_bind
func srdgo_cm_bind(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	i, ok := get[*cmID](h)
	a, ok2 := addrIn(sa)
	if !ok || !ok2 {
		return C.EINVAL
	}
	return cmErrno(i.id.BindAddr(a))
}

//export srdgo_cm_resolve_addr
func srdgo_cm_resolve_addr(h C.uintptr_t, src, dst *C.struct_sockaddr) C.int {
	i, ok := get[*cmID](h)
	d, ok2 := addrIn(dst)
	if !ok || !ok2 {
		return C.EINVAL
	}
	var s netip.Addr
	if a, ok := addrIn(src); ok {
		s = a.Addr()
	}
	return cmErrno(i.id.ResolveAddr(context.Background(), s, d))
}

//export srdgo_cm_resolve_route
func srdgo_cm_resolve_route(h C.uintptr_t) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	return cmErrno(i.id.ResolveRoute(context.Background()))
}

//export srdgo_cm_listen
func srdgo_cm_listen(h C.uintptr_t, backlog C.int) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	if backlog <= 0 {
		backlog = 1024
	}
	return cmErrno(i.id.Listen(int(backlog)))
}

//export srdgo_cm_create_qp
func srdgo_cm_create_qp(h, pdh C.uintptr_t, attr *C.struct_ibv_qp_init_attr, sendCQ, recvCQ, srqh C.uintptr_t, out *C.uintptr_t, qpn *C.uint32_t) C.int {
	i, ok := get[*cmID](h)
	p, ok1 := get[*pd](pdh)
	scq, ok2 := get[*cq](sendCQ)
	rcq, ok3 := get[*cq](recvCQ)
	if !ok || !ok1 || !ok2 || !ok3 {
		return C.EINVAL
	}
	init := verbs.QPInitAttr{SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: capIn(&attr.cap), SQSigAll: attr.sq_sig_all != 0}
	if srqh != 0 {
		s, ok := get[*srq](srqh)
		if !ok {
			return C.EINVAL
		}
		init.SRQ = s.srq
	}
	v, err := i.id.CreateQP(p.pd, init)
	if err != nil {
		return cmErrno(err)
	}
	_, got := v.Query()
	capOut(got.Cap, &attr.cap)
	q := &qp{qp: v, typ: got.Type}
	q.post = v.PostRecv
	*qpn = C.uint32_t(v.QPN())
	newHandle(q, out)
	return 0
}

//export srdgo_cm_destroy_qp
func srdgo_cm_destroy_qp(h, qph C.uintptr_t) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	if err := i.id.DestroyQP(); err != nil {
		return cmErrno(err)
	}
	if qph != 0 {
		cgo.Handle(qph).Delete()
	}
	return 0
}

func connParamIn(p *C.struct_rdma_conn_param, pdata unsafe.Pointer) *rdmacm.ConnParam {
	if p == nil {
		return nil
	}
	cp := &rdmacm.ConnParam{ResponderResources: uint8(p.responder_resources), InitiatorDepth: uint8(p.initiator_depth),
		FlowControl: p.flow_control != 0, RetryCount: uint8(p.retry_count), RNRRetryCount: uint8(p.rnr_retry_count),
		SRQ: p.srq != 0, QPNum: wire.QPN(p.qp_num)}
	if pdata != nil && p.private_data_len > 0 {
		cp.PrivateData = C.GoBytes(pdata, C.int(p.private_data_len))
	}
	return cp
}

//export srdgo_cm_connect
func srdgo_cm_connect(h C.uintptr_t, p *C.struct_rdma_conn_param, pdata unsafe.Pointer) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	cp := connParamIn(p, pdata)
	if cp == nil {
		// librdmacm's defaults: the device's limits, the largest retry
		// counts.
		cp = &rdmacm.ConnParam{ResponderResources: verbs.MaxQPRdAtom, InitiatorDepth: verbs.MaxQPRdAtom,
			RetryCount: 7, RNRRetryCount: 7}
	}
	return cmErrno(i.id.Connect(context.Background(), cp))
}

//export srdgo_cm_accept
func srdgo_cm_accept(h C.uintptr_t, p *C.struct_rdma_conn_param, pdata unsafe.Pointer) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	cp := connParamIn(p, pdata)
	if cp == nil && i.req != nil {
		// librdmacm's defaults: what the request offers, within the
		// device's limits, and the largest retry counts.
		cp = &rdmacm.ConnParam{ResponderResources: min(i.req.ResponderResources, verbs.MaxQPRdAtom),
			InitiatorDepth: min(i.req.InitiatorDepth, verbs.MaxQPRdAtom), RetryCount: 7, RNRRetryCount: 7}
	}
	return cmErrno(i.id.Accept(context.Background(), cp))
}

//export srdgo_cm_reject
func srdgo_cm_reject(h C.uintptr_t, pdata unsafe.Pointer, n C.int) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	var b []byte
	if pdata != nil && n > 0 {
		b = C.GoBytes(pdata, n)
	}
	return cmErrno(i.id.Reject(b))
}

//export srdgo_cm_disconnect
func srdgo_cm_disconnect(h C.uintptr_t) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	return cmErrno(i.id.Disconnect())
}

//export srdgo_cm_establish
func srdgo_cm_establish(h C.uintptr_t) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	return cmErrno(i.id.Establish())
}

//export srdgo_cm_set_option
func srdgo_cm_set_option(h C.uintptr_t, level, name C.int, val unsafe.Pointer, n C.size_t) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	if level != C.RDMA_OPTION_ID {
		return C.ENOSYS
	}
	b := unsafe.Slice((*byte)(val), int(n))
	switch name {
	case C.RDMA_OPTION_ID_TOS:
		if n < 1 {
			return C.EINVAL
		}
		return cmErrno(i.id.SetTOS(b[0]))
	case C.RDMA_OPTION_ID_ACK_TIMEOUT:
		if n < 1 {
			return C.EINVAL
		}
		return cmErrno(i.id.SetACKTimeout(b[0]))
	case C.RDMA_OPTION_ID_REUSEADDR, C.RDMA_OPTION_ID_AFONLY:
		// Ports are freed when their ID is destroyed (no TIME_WAIT
		// holds them) and IPv4 and IPv6 have separate spaces.
		return 0
	}
	return C.ENOSYS
}

//export srdgo_cm_migrate
func srdgo_cm_migrate(h, chh C.uintptr_t) C.int {
	i, ok := get[*cmID](h)
	c, ok2 := get[*cmChannel](chh)
	if !ok || !ok2 {
		return C.EINVAL
	}
	return cmErrno(i.id.MigrateID(c.ch))
}

//export srdgo_cm_init_qp_attr
func srdgo_cm_init_qp_attr(h C.uintptr_t, o *C.struct_ibv_qp_attr, mask *C.int) C.int {
	i, ok := get[*cmID](h)
	if !ok {
		return C.EINVAL
	}
	a, m, err := i.id.InitQPAttr(verbs.QPState(o.qp_state))
	if err != nil {
		return cmErrno(err)
	}
	qpAttrOut(a, o)
	*mask = C.int(m)
	return 0
}

//export srdgo_cm_take_event
func srdgo_cm_take_event(chh C.uintptr_t, o *C.struct_srd_cm_event_info) C.int {
	c, ok := get[*cmChannel](chh)
	if !ok {
		return C.EINVAL
	}
	c.mu.Lock()
	if len(c.q) == 0 {
		c.mu.Unlock()
		return C.EAGAIN
	}
	ev := c.q[0]
	c.q[0] = nil
	c.q = c.q[1:]
	c.mu.Unlock()

	// An event of an ID the program has destroyed since it was queued (its
	// C structure is freed), or a connect request to a destroyed listener,
	// is dropped; ESTALE tells the caller to read the channel again (this
	// event's count on the eventfd is the one it consumed).
	if ev.ID != nil {
		if i, ok := ev.ID.Context.(*cmID); ok && i.id == ev.ID && i.gone.Load() {
			return C.ESTALE
		}
	}
	if ev.ListenID != nil {
		if l, ok := ev.ListenID.Context.(*cmID); ok && l.gone.Load() {
			if ev.ID != nil && ev.ID != ev.ListenID {
				if _, mine := ev.ID.Context.(*cmID); !mine {
					ev.ID.Destroy()
				}
			}
			return C.ESTALE
		}
	}
	o.event = C.int(ev.Type)
	o.status = C.int(ev.Status)
	if ev.ID != nil {
		if i, ok := ev.ID.Context.(*cmID); ok && i.id == ev.ID {
			o.id = (*C.struct_rdma_cm_id)(i.cptr)
		} else {
			// A new ID (a connect request): its C structure is made by
			// the caller, which tells us its address.
			n := &cmID{id: ev.ID}
			liveIDs.Store(n, struct{}{})
			if ev.Type == rdmacm.EventConnectRequest {
				p := ev.Conn
				n.req = &p
			}
			ev.ID.Context = n
			newHandle(n, &o.new_h)
		}
	}
	if ev.ListenID != nil {
		if l, ok := ev.ListenID.Context.(*cmID); ok {
			o.listen_id = (*C.struct_rdma_cm_id)(l.cptr)
		}
	}
	pd := ev.PrivateData()
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&o.pdata[0])), len(o.pdata)), pd)
	o.pdata_len = C.int(n)
	o.mc_context = mcastEventContext(ev)
	if ev.ID != nil && ev.ID.PortSpace() == rdmacm.PortSpaceUDP {
		o.qp_num = C.uint32_t(ev.UD.QPNum)
		o.qkey = C.uint32_t(ev.UD.QKey)
		ahAttrOut(ev.UD.AH, &o.ah_attr)
	} else {
		p := ev.Conn
		o.responder_resources = C.uint8_t(p.ResponderResources)
		o.initiator_depth = C.uint8_t(p.InitiatorDepth)
		if p.FlowControl {
			o.flow_control = 1
		}
		o.retry_count = C.uint8_t(p.RetryCount)
		o.rnr_retry_count = C.uint8_t(p.RNRRetryCount)
		if p.SRQ {
			o.srq = 1
		}
		o.qp_num = C.uint32_t(p.QPNum)
	}
	return 0
}
