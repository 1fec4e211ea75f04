//go:build capi

package main

/*
#include <string.h>
#include "srd.h"
*/
import "C"

import (
	"encoding/binary"
	"math/bits"
	"runtime/cgo"
	"sync"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/internal/netif"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// object is what a handle stored in a C object refers to.
type object interface {
	destroy() error
}

// get returns the object of handle h as a T, or false for a handle of
// another kind (a program passing the wrong object).
func get[T object](h C.uintptr_t) (t T, ok bool) {
	if h == 0 {
		return t, false
	}
	// A handle already deleted (a program using an object it destroyed)
	// makes Value panic: that is an invalid object, EINVAL, not a crash.
	defer func() {
		if recover() != nil {
			var zero T
			t, ok = zero, false
		}
	}()
	t, ok = cgo.Handle(h).Value().(T)
	return t, ok
}

func newHandle(o object, out *C.uintptr_t) { *out = C.uintptr_t(cgo.NewHandle(o)) }

//export srdgo_destroy
func srdgo_destroy(h C.uintptr_t) C.int {
	o, ok := get[object](h)
	if !ok {
		return C.EINVAL
	}
	if err := o.destroy(); err != nil {
		return errno(err)
	}
	cgo.Handle(h).Delete()
	return 0
}

// devContext is an open device (ibv_context). Until the program needs the
// data path it answers queries from a device on an in-process link.
type devContext struct {
	dev *device

	mu        sync.Mutex
	query     *verbs.Device
	queryDone func()
	data      *verbs.Device

	async asyncState // async.go
}

func (c *devContext) destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queryDone != nil {
		c.queryDone()
		c.queryDone, c.query = nil, nil
	}
	if c.data != nil {
		c.data = nil
		c.dev.release()
	}
	return nil
}

// attrs returns the device that answers queries.
func (c *devContext) attrs() *verbs.Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.data != nil {
		return c.data
	}
	return c.query
}

// dataDevice returns the device on UDP, opening it on first use.
func (c *devContext) dataDevice() (*verbs.Device, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.data == nil {
		d, err := c.dev.acquire()
		if err != nil {
			return nil, err
		}
		c.data = d
		if c.queryDone != nil {
			c.queryDone()
			c.queryDone, c.query = nil, nil
		}
	}
	return c.data, nil
}

//export srdgo_open
func srdgo_open(i C.int, out *C.uintptr_t) C.int {
	loadDevices()
	if i < 0 || int(i) >= len(devices) {
		return C.EINVAL
	}
	c := &devContext{dev: devices[i]}
	q, done, err := c.dev.openQuery()
	if err != nil {
		return errno(err)
	}
	c.query, c.queryDone = q, done
	newHandle(c, out)
	return 0
}

//export srdgo_close
func srdgo_close(h C.uintptr_t) {
	srdgo_destroy(h)
}

func be64(v uint64) C.__be64 { return C.__be64(bits.ReverseBytes64(v)) }

//export srdgo_query_device
func srdgo_query_device(h C.uintptr_t, o *C.struct_ibv_device_attr) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	a := c.attrs().QueryDevice()
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&o.fw_ver[0])), len(o.fw_ver))
	fw[copy(fw[:len(fw)-1], a.FWVersion)] = 0
	o.node_guid = be64(a.NodeGUID)
	o.sys_image_guid = be64(a.SysImageGUID)
	o.max_mr_size = C.uint64_t(a.MaxMRSize)
	o.page_size_cap = C.uint64_t(a.PageSizeCap)
	o.vendor_id = C.uint32_t(a.VendorID)
	o.vendor_part_id = C.uint32_t(a.VendorPartID)
	o.hw_ver = C.uint32_t(a.HWVer)
	o.max_qp = C.int(a.MaxQP)
	o.max_qp_wr = C.int(a.MaxQPWR)
	o.device_cap_flags = C.uint(uint32(a.DeviceCapFlags))
	o.max_sge = C.int(a.MaxSGE)
	o.max_sge_rd = C.int(a.MaxSGE)
	o.max_cq = C.int(a.MaxCQ)
	o.max_cqe = C.int(a.MaxCQE)
	o.max_mr = C.int(a.MaxMR)
	o.max_pd = C.int(a.MaxPD)
	o.max_qp_rd_atom = C.int(a.MaxQPRdAtom)
	o.max_res_rd_atom = C.int(a.MaxResRdAtom)
	o.max_qp_init_rd_atom = C.int(a.MaxQPInitRdAtom)
	o.atomic_cap = C.enum_ibv_atomic_cap(a.AtomicCap)
	o.max_mw = C.int(a.MaxMW)
	o.max_mcast_grp = C.int(a.MaxMcastGrp)
	o.max_mcast_qp_attach = C.int(a.MaxMcastQPAttach)
	o.max_total_mcast_qp_attach = C.int(a.MaxTotalMcastQPAttach)
	o.max_ah = C.int(a.MaxAH)
	o.max_srq = C.int(a.MaxSRQ)
	o.max_srq_wr = C.int(a.MaxSRQWR)
	o.max_srq_sge = C.int(a.MaxSRQSGE)
	o.max_pkeys = C.uint16_t(a.MaxPKeys)
	o.local_ca_ack_delay = C.uint8_t(a.LocalCAAckDelay)
	o.phys_port_cnt = C.uint8_t(a.PhysPortCount)
	return 0
}

//export srdgo_query_device_ex
func srdgo_query_device_ex(h C.uintptr_t, o *C.struct_ibv_device_attr_ex) {
	c, ok := get[*devContext](h)
	if !ok {
		return
	}
	a := c.attrs().QueryDevice()
	o.completion_timestamp_mask = C.uint64_t(a.CompletionTimestampMask)
	o.hca_core_clock = C.uint64_t(a.HCACoreClock)
	o.device_cap_flags_ex = C.uint64_t(a.DeviceCapFlagsEx)
	o.phys_port_cnt_ex = C.uint32_t(a.PhysPortCount)
}

//export srdgo_query_port
func srdgo_query_port(h C.uintptr_t, port C.uint8_t, o *C.struct_ibv_port_attr) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	p, err := c.attrs().QueryPort(int(port))
	if err != nil {
		return errno(err)
	}
	state, phys := p.State, p.PhysState
	if p.LinkLayer != verbs.LinkLayerInfiniBand {
		o.link_layer = C.IBV_LINK_LAYER_ETHERNET
		phys = 5 // LinkUp
		if !c.dev.portUp() {
			state, phys = verbs.PortDown, 3 // Disabled
		}
	} else {
		o.link_layer = C.IBV_LINK_LAYER_INFINIBAND
	}
	o.state = C.enum_ibv_port_state(state)
	o.max_mtu = C.enum_ibv_mtu(p.MaxMTU)
	o.active_mtu = C.enum_ibv_mtu(p.ActiveMTU)
	o.gid_tbl_len = C.int(p.GIDTableLen)
	o.port_cap_flags = C.uint32_t(p.PortCapFlags)
	o.max_msg_sz = C.uint32_t(min(p.MaxMsgSize, 1<<32-1))
	o.pkey_tbl_len = C.uint16_t(p.PKeyTableLen)
	o.lid = C.uint16_t(p.LID)
	o.sm_lid = C.uint16_t(p.SMLID)
	o.lmc = C.uint8_t(p.LMC)
	o.max_vl_num = C.uint8_t(p.MaxVLNum)
	o.sm_sl = C.uint8_t(p.SMSL)
	o.active_width = C.uint8_t(p.ActiveWidth)
	o.active_speed = C.uint8_t(p.ActiveSpeed)
	o.phys_state = C.uint8_t(phys)
	return 0
}

//export srdgo_query_gid
func srdgo_query_gid(h C.uintptr_t, port C.uint8_t, index C.int, out *C.uint8_t) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	g, err := c.attrs().QueryGID(int(port), int(index))
	if err != nil {
		return errno(err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), 16), g[:])
	return 0
}

//export srdgo_query_pkey
func srdgo_query_pkey(h C.uintptr_t, port C.uint8_t, index C.int, out *C.uint16_t) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	p, err := c.attrs().QueryPort(int(port))
	if err != nil {
		return errno(err)
	}
	if index < 0 || int(index) >= len(p.PKeys) {
		return C.EINVAL
	}
	*out = C.uint16_t(p.PKeys[index])
	return 0
}

// pd is a protection domain; it keeps its context's data device.
type pd struct {
	ctx *devContext
	pd  *verbs.PD
}

func (p *pd) destroy() error { return p.pd.Dealloc() }

//export srdgo_alloc_pd
func srdgo_alloc_pd(h C.uintptr_t, out *C.uintptr_t) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	dev, err := c.dataDevice()
	if err != nil {
		return errno(err)
	}
	p, err := dev.AllocPD()
	if err != nil {
		return errno(err)
	}
	newHandle(&pd{ctx: c, pd: p}, out)
	return 0
}

type mr struct{ mr *verbs.MR }

func (m *mr) destroy() error { return m.mr.Dereg() }

//export srdgo_reg_mr
func srdgo_reg_mr(h C.uintptr_t, addr unsafe.Pointer, length C.size_t, access C.int, out *C.uintptr_t, lkey, rkey *C.uint32_t) C.int {
	p, ok := get[*pd](h)
	if !ok {
		return C.EINVAL
	}
	if length == 0 || uint64(length) > verbs.MaxMRSize {
		return C.EINVAL
	}
	// The program's memory, which the engine reads and writes in place.
	buf := unsafe.Slice((*byte)(addr), int(length))
	m, err := p.pd.RegMR(buf, verbs.Access(uint32(access)))
	if err != nil {
		return errno(err)
	}
	*lkey = C.uint32_t(m.LKey())
	*rkey = C.uint32_t(m.RKey())
	newHandle(&mr{mr: m}, out)
	return 0
}

// channel is a completion channel: the CQ events of verbs' CompChannel,
// queued and counted on an eventfd the program polls.
type channel struct {
	ch   *verbs.CompChannel
	fd   int
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	queue  []unsafe.Pointer // C struct ibv_cq, in event order
	cqs    map[*verbs.CQ]unsafe.Pointer
	one    [8]byte
	failed bool
}

func (ch *channel) run() {
	defer close(ch.done)
	for {
		select {
		case <-ch.stop:
			return
		case cq, open := <-ch.ch.C():
			if !open {
				return
			}
			ch.mu.Lock()
			p, ok := ch.cqs[cq]
			if ok {
				ch.queue = append(ch.queue, p)
				if _, err := syscall.Write(ch.fd, ch.one[:]); err != nil && !ch.failed {
					ch.failed = true
					logger.Error("completion channel: writing its eventfd", "err", err)
				}
			}
			ch.mu.Unlock()
		}
	}
}

func (ch *channel) destroy() error {
	ch.mu.Lock()
	n := len(ch.cqs)
	ch.mu.Unlock()
	if n > 0 {
		return verbs.ErrBusy
	}
	close(ch.stop)
	<-ch.done
	return nil
}

//export srdgo_create_channel
func srdgo_create_channel(h C.uintptr_t, fd C.int, out *C.uintptr_t) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	dev, err := c.dataDevice()
	if err != nil {
		return errno(err)
	}
	ch := &channel{ch: dev.CreateCompChannel(), fd: int(fd), stop: make(chan struct{}), done: make(chan struct{}),
		cqs: map[*verbs.CQ]unsafe.Pointer{}}
	binary.NativeEndian.PutUint64(ch.one[:], 1)
	go ch.run()
	newHandle(ch, out)
	return 0
}

//export srdgo_take_cq_event
func srdgo_take_cq_event(h C.uintptr_t) *C.struct_ibv_cq {
	ch, ok := get[*channel](h)
	if !ok {
		return nil
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.queue) == 0 {
		return nil
	}
	p := ch.queue[0]
	ch.queue = append(ch.queue[:0], ch.queue[1:]...)
	return (*C.struct_ibv_cq)(p)
}

// cq is a completion queue, with the completions its polls convert.
type cq struct {
	cq   *verbs.CQ
	ch   *channel
	mu   sync.Mutex
	wcs  []verbs.WC
	self unsafe.Pointer // the C struct ibv_cq
}

func (q *cq) destroy() error {
	if err := q.cq.Destroy(); err != nil {
		return err
	}
	if q.ch != nil {
		q.ch.mu.Lock()
		delete(q.ch.cqs, q.cq)
		kept := q.ch.queue[:0]
		for _, p := range q.ch.queue {
			if p != q.self {
				kept = append(kept, p)
			}
		}
		q.ch.queue = kept
		q.ch.mu.Unlock()
	}
	return nil
}

//export srdgo_create_cq
func srdgo_create_cq(h C.uintptr_t, cqe C.int, chh C.uintptr_t, self *C.struct_ibv_cq, out *C.uintptr_t, size *C.int) C.int {
	return createCQ(h, cqe, chh, self, out, size, 0)
}

// createCQ makes a CQ stamping its completions with ts (cqex.go).
func createCQ(h C.uintptr_t, cqe C.int, chh C.uintptr_t, self *C.struct_ibv_cq, out *C.uintptr_t, size *C.int, ts verbs.WCTimestamps) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	var ch *channel
	if chh != 0 {
		if ch, ok = get[*channel](chh); !ok {
			return C.EINVAL
		}
	}
	dev, err := c.dataDevice()
	if err != nil {
		return errno(err)
	}
	var vch *verbs.CompChannel
	if ch != nil {
		vch = ch.ch
	}
	vcq, err := dev.CreateCQEx(int(cqe), vch, verbs.CQAttr{Timestamps: ts})
	if err != nil {
		return errno(err)
	}
	q := &cq{cq: vcq, ch: ch, wcs: make([]verbs.WC, vcq.Cap()), self: unsafe.Pointer(self)}
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[vcq] = q.self
		ch.mu.Unlock()
	}
	*size = C.int(vcq.Cap())
	newHandle(q, out)
	return 0
}

//export srdgo_req_notify_cq
func srdgo_req_notify_cq(h C.uintptr_t, solicited C.int) C.int {
	q, ok := get[*cq](h)
	if !ok {
		return C.EINVAL
	}
	return errno(q.cq.ReqNotify(solicited != 0))
}

// srq is a shared receive queue.
type srq struct {
	srq *verbs.SRQ
	recvPoster
}

func (s *srq) destroy() error { return s.srq.Destroy() }

func srqAttrOut(a verbs.SRQAttr, o *C.struct_ibv_srq_attr) {
	o.max_wr = C.uint32_t(a.MaxWR)
	o.max_sge = C.uint32_t(a.MaxSGE)
	o.srq_limit = C.uint32_t(a.SRQLimit)
}

//export srdgo_create_srq
func srdgo_create_srq(h C.uintptr_t, attr *C.struct_ibv_srq_attr, out *C.uintptr_t) C.int {
	p, ok := get[*pd](h)
	if !ok {
		return C.EINVAL
	}
	s, err := p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: int(attr.max_wr), MaxSGE: int(attr.max_sge), SRQLimit: int(attr.srq_limit)})
	if err != nil {
		return errno(err)
	}
	srqAttrOut(s.Query(), attr)
	o := &srq{srq: s}
	o.post = s.PostRecv
	newHandle(o, out)
	return 0
}

//export srdgo_modify_srq
func srdgo_modify_srq(h C.uintptr_t, attr *C.struct_ibv_srq_attr, mask C.int) C.int {
	s, ok := get[*srq](h)
	if !ok {
		return C.EINVAL
	}
	return errno(s.srq.Modify(verbs.SRQAttr{MaxWR: int(attr.max_wr), MaxSGE: int(attr.max_sge), SRQLimit: int(attr.srq_limit)},
		verbs.SRQAttrMask(mask)))
}

//export srdgo_query_srq
func srdgo_query_srq(h C.uintptr_t, attr *C.struct_ibv_srq_attr) C.int {
	s, ok := get[*srq](h)
	if !ok {
		return C.EINVAL
	}
	srqAttrOut(s.srq.Query(), attr)
	return 0
}

type ah struct{ ah *verbs.AH }

func (a *ah) destroy() error { return a.ah.Destroy() }

func ahAttrIn(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	var g wire.GID
	copy(g[:], unsafe.Slice((*byte)(unsafe.Pointer(&a.grh.dgid)), 16))
	return verbs.AHAttr{DGID: g, SGIDIndex: int(a.grh.sgid_index), FlowLabel: uint32(a.grh.flow_label),
		HopLimit: uint8(a.grh.hop_limit), TrafficClass: uint8(a.grh.traffic_class), SL: uint8(a.sl),
		DLID: uint16(a.dlid), PortNum: int(a.port_num), IsGlobal: a.is_global != 0,
		SrcPathBits: uint8(a.src_path_bits), StaticRate: uint8(a.static_rate)}
}

func ahAttrOut(a verbs.AHAttr, o *C.struct_ibv_ah_attr) {
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&o.grh.dgid)), 16), a.DGID[:])
	o.grh.sgid_index = C.uint8_t(a.SGIDIndex)
	o.grh.flow_label = C.uint32_t(a.FlowLabel)
	o.grh.hop_limit = C.uint8_t(a.HopLimit)
	o.grh.traffic_class = C.uint8_t(a.TrafficClass)
	o.sl = C.uint8_t(a.SL)
	o.dlid = C.uint16_t(a.DLID)
	o.port_num = C.uint8_t(a.PortNum)
	if a.IsGlobal {
		o.is_global = 1
	}
	o.src_path_bits = C.uint8_t(a.SrcPathBits)
	o.static_rate = C.uint8_t(a.StaticRate)
}

//export srdgo_create_ah
func srdgo_create_ah(h C.uintptr_t, attr *C.struct_ibv_ah_attr, out *C.uintptr_t) C.int {
	p, ok := get[*pd](h)
	if !ok {
		return C.EINVAL
	}
	a, err := p.pd.CreateAH(ahAttrIn(attr))
	if err != nil {
		return errno(err)
	}
	newHandle(&ah{ah: a}, out)
	return 0
}

//export srdgo_gid_ifindex
func srdgo_gid_ifindex(h C.uintptr_t, index C.int) C.uint32_t {
	c, ok := get[*devContext](h)
	if !ok || index < 0 || int(index) >= len(c.dev.addrs) {
		return 0
	}
	if ifc, err := netif.InterfaceOf(c.dev.addrs[index]); err == nil {
		return C.uint32_t(ifc.Index)
	}
	return 0
}
