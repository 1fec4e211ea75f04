// The link.Link over a Port: framing on send, the HCA port's checks on
// receive.

package ib

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// MaxFrame is the largest IB packet the link builds or accepts: a transport
// packet of link.BufSize bytes with an LRH, a GRH and the VCRC.
const MaxFrame = link.BufSize + wire.LRHLen + wire.GRHLen + wire.VCRCLen

// Link is a link.Link whose port is an InfiniBand HCA port. It implements
// link.InfiniBand and link.StateNotifier (up while the port is Active).
type Link struct {
	port Port
	cnt  link.Counters

	attr    atomic.Pointer[PortAttr]
	state   link.State
	notify  atomic.Pointer[func()]
	stateMu sync.Mutex // orders attribute changes and their notifications

	h       link.Handler
	started atomic.Bool
	closed  atomic.Bool
	// recvMu is held (shared) by each receive call; Close takes it to
	// wait for the calls in progress, so that what their handler sends
	// (the ACK of a packet whose completion the application just saw, and
	// after which it closes) still goes out before the port closes.
	recvMu  sync.RWMutex
	closing atomic.Bool
	mcast   mcastGroups // mcast.go
}

// New returns a link over p. The link owns p and closes it on Close.
func New(p Port) (*Link, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil port", ErrPort)
	}
	l := &Link{port: p}
	a := p.Attr()
	l.attr.Store(&a)
	l.state.Set(a.State == StateActive)
	p.NotifyAttr(l.attrChanged)
	return l, nil
}

// attrChanged follows the port's attributes: the new ones are stored, the
// link.InfiniBand function is called, then the state function if the port
// entered or left Active.
func (l *Link) attrChanged() {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	a := l.port.Attr()
	l.attr.Store(&a)
	if f := l.notify.Load(); f != nil {
		(*f)()
	}
	up := a.State == StateActive
	if l.state.Set(up) {
		l.state.Notify(up)
	}
}

// Attached returns the port the link is attached to.
func (l *Link) Attached() Port { return l.port }

// PortAttr returns the port's attributes as the link last saw them.
func (l *Link) PortAttr() PortAttr { return l.attr.Load().Clone() }

// IBAttr returns the port's attributes in link's form (link.InfiniBand).
func (l *Link) IBAttr() link.IBAttr { return l.attr.Load().linkAttr() }

// NotifyIBAttr registers f, called after each change of the port's
// attributes (link.InfiniBand).
func (l *Link) NotifyIBAttr(f func()) {
	if f == nil {
		l.notify.Store(nil)
		return
	}
	l.notify.Store(&f)
}

// Up reports whether the port is Active (link.StateNotifier).
func (l *Link) Up() bool { return l.state.Up() }

// NotifyState registers f, called with the new state each time the port
// enters or leaves Active (link.StateNotifier).
func (l *Link) NotifyState(f func(up bool)) { l.state.NotifyState(f) }

// GID returns the port's GID 0: the subnet prefix (link.DefaultGIDPrefix
// while the SM has set none) and the port GUID.
func (a PortAttr) GID() wire.GID {
	var g wire.GID
	prefix := a.GIDPrefix
	if prefix == 0 {
		prefix = link.DefaultGIDPrefix
	}
	for i := range 8 {
		g[i] = byte(prefix >> (56 - 8*i))
		g[8+i] = byte(a.PortGUID >> (56 - 8*i))
	}
	return g
}

// Addrs returns the port's GID 0 as a 16-byte address.
func (l *Link) Addrs() []netip.Addr {
	return []netip.Addr{netip.AddrFrom16(l.attr.Load().GID())}
}

// Port returns 0: an IB port has no UDP port.
func (l *Link) Port() uint16 { return 0 }

// Stats returns the link's counters.
func (l *Link) Stats() link.Stats { return l.cnt.Snapshot() }

// sendScratch is what one Send uses: the frames' buffers and the batch
// handed to the port.
type sendScratch struct {
	bufs   []*[]byte
	frames [][]byte
}

var (
	framePool   = sync.Pool{New: func() any { b := make([]byte, MaxFrame); return &b }}
	scratchPool = sync.Pool{New: func() any { return new(sendScratch) }}
	recvPool    = sync.Pool{New: func() any { return new([64]*link.Packet) }}
)

// qp0Source reports whether t, a transport packet, comes from QP0: a UD
// packet whose DETH names source QP 0 (management packets, which travel on
// VL15).
func qp0Source(t []byte) bool {
	if len(t) < wire.BTHLen+wire.DETHLen || wire.Opcode(t[0]).Transport() != wire.TransportUD {
		return false
	}
	d := t[wire.BTHLen+5:]
	return d[0]|d[1]|d[2] == 0
}

// Send frames each packet (LRH, GRH if p.IB.Global, the transport packet,
// ICRC, VCRC) and hands the batch to the port. A packet whose VL is 15 by
// the SL2VL table (IBTA: drop), or that is not a QP0 packet while the port
// is not Active, is not sent: the error then wraps link.ErrDown (state) or
// link.ErrAddress.
func (l *Link) Send(batch []*link.Packet) error {
	if l.closed.Load() {
		return ErrClosed
	}
	a := l.attr.Load()
	sc := scratchPool.Get().(*sendScratch)
	frames, bufs := sc.frames[:0], sc.bufs[:0]
	defer func() {
		for _, b := range bufs {
			framePool.Put(b)
		}
		clear(frames)
		clear(bufs)
		sc.frames, sc.bufs = frames[:0], bufs[:0]
		scratchPool.Put(sc)
	}()
	var errs error
	lmcMask := uint16(1)<<min(a.LMC, 7) - 1
	for _, p := range batch {
		t := p.Data()
		if len(t) < wire.BTHLen+wire.ICRCLen || len(t)%4 != 0 {
			l.cnt.TxErrors.Add(1)
			errs = fmt.Errorf("%w: transport packet of %d bytes", link.ErrAddress, len(t))
			continue
		}
		vl := uint8(wire.VL15)
		if !qp0Source(t) {
			vl = a.SL2VL[p.IB.SL&15]
			if vl == wire.VL15 {
				l.cnt.TxErrors.Add(1)
				errs = fmt.Errorf("%w: SL %d maps to VL15", link.ErrAddress, p.IB.SL)
				continue
			}
			if a.State != StateActive {
				l.cnt.TxNotActive.Add(1)
				errs = fmt.Errorf("%w: port state %d", link.ErrDown, a.State)
				continue
			}
		} else if a.State == StateDown {
			l.cnt.TxNotActive.Add(1)
			errs = fmt.Errorf("%w: port down", link.ErrDown)
			continue
		}
		bp := framePool.Get().(*[]byte)
		bufs = append(bufs, bp)
		f := *bp
		off := wire.LRHLen
		lnh := wire.LNHIBALocal
		if p.IB.Global {
			lnh = wire.LNHIBAGlobal
			g := wire.GRHFields{IPVer: wire.GRHIPVersion, TClass: p.TClass,
				FlowLabel: p.IB.FlowLabel & 0xFFFFF, PayLen: uint16(len(t)),
				NxtHdr: wire.GRHNextHeaderIBA, HopLmt: p.IB.HopLimit,
				SGID: wire.GID(p.Src.Addr().As16()), DGID: wire.GID(p.Dst.Addr().As16())}
			g.Encode(wire.GRH(f[off:]))
			off += wire.GRHLen
		}
		n := off + len(t) + wire.VCRCLen
		lrh := wire.LRHFields{VL: vl, LVer: wire.LinkVersion, SL: p.IB.SL & 15, LNH: lnh,
			DLID: p.IB.DLID, PktLen: uint16((n - wire.VCRCLen) / 4),
			SLID: a.LID&^lmcMask | uint16(p.IB.PathBits)&lmcMask}
		lrh.Encode(wire.LRH(f))
		copy(f[off:], t)
		wire.SealIB(f[:n])
		frames = append(frames, f[:n])
		l.cnt.TxPackets.Add(1)
		l.cnt.TxBytes.Add(uint64(n))
	}
	if len(frames) == 0 {
		return errs
	}
	l.cnt.TxCalls.Add(1)
	if err := l.port.Send(frames); err != nil {
		l.cnt.TxErrors.Add(uint64(len(frames)))
		return errors.Join(errs, err)
	}
	return errs
}

// Start begins delivering received packets that pass the port's checks to
// h.
func (l *Link) Start(h link.Handler) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if h == nil {
		return fmt.Errorf("%w: nil handler", ErrPort)
	}
	if l.started.Swap(true) {
		return ErrStarted
	}
	l.h = h
	return l.port.Start(l.recv)
}

// recv checks a batch from the port and hands what passes to the handler.
func (l *Link) recv(pkts [][]byte) {
	l.recvMu.RLock()
	defer l.recvMu.RUnlock()
	if l.closing.Load() {
		return
	}
	l.cnt.RxCalls.Add(1)
	a := l.attr.Load()
	op := recvPool.Get().(*[64]*link.Packet)
	defer recvPool.Put(op)
	out := op[:]
	n := 0
	flush := func() {
		if n > 0 {
			l.h.Receive(out[:n])
			for _, p := range out[:n] {
				link.Put(p)
			}
			clear(out[:n])
			n = 0
		}
	}
	for _, b := range pkts {
		l.cnt.RxPackets.Add(1)
		l.cnt.RxBytes.Add(uint64(len(b)))
		p := l.check(a, b)
		if p == nil {
			continue
		}
		out[n] = p
		if n++; n == len(out) {
			flush()
		}
	}
	flush()
}

// check applies an HCA port's receive checks to b and returns the transport
// packet and its addressing, or nil after counting the reason of the drop.
func (l *Link) check(a *PortAttr, b []byte) *link.Packet {
	c := &l.cnt
	if len(b) < wire.LRHLen+wire.VCRCLen || len(b) > MaxFrame {
		c.RxMalformed.Add(1)
		return nil
	}
	lrh := wire.LRH(b)
	if lrh.LVer() != wire.LinkVersion {
		c.RxBadLinkVersion.Add(1)
		return nil
	}
	if int(lrh.PktLen())*4 != len(b)-wire.VCRCLen {
		c.RxMalformed.Add(1)
		return nil
	}
	// ParseIB checks the VCRC, the headers, the ICRC and the transport
	// (each CRC is computed once per packet: they are the costly part).
	pkt, err := wire.ParseIB(b)
	switch {
	case errors.Is(err, wire.ErrVCRC):
		c.RxBadVCRC.Add(1)
		return nil
	case errors.Is(err, wire.ErrICRC):
		c.RxBadICRC.Add(1)
		return nil
	case err != nil:
		c.RxMalformed.Add(1)
		return nil
	}
	dlid := lrh.DLID()
	lmcMask := uint16(1)<<min(a.LMC, 7) - 1
	mine := a.LID != 0 && dlid&^lmcMask == a.LID&^lmcMask && dlid < MulticastLIDMin
	multicast := dlid >= MulticastLIDMin && dlid <= MulticastLIDMax
	if !mine && !multicast && dlid != PermissiveLID {
		c.RxBadDLID.Add(1)
		return nil
	}
	tp := pkt.Transport()
	dqp := tp.BTH().DestQP()
	vl := lrh.VL()
	// IBTA 7.6.3: VL15 carries subnet management only (QP0), and QP0
	// takes packets from VL15 only.
	if (vl == wire.VL15) != (dqp == 0) {
		c.RxBadVL.Add(1)
		return nil
	}
	if dlid == PermissiveLID && dqp != 0 {
		c.RxBadDLID.Add(1)
		return nil
	}
	if dqp != 0 {
		// A port in Init takes only SMPs; Armed and Active take data.
		if a.State != StateActive && a.State != StateArmed {
			c.RxPortState.Add(1)
			return nil
		}
		// QP0 is exempt from the P_Key check (IBTA 10.9.3); every
		// other QP's packets, QP1's included, must carry a key that
		// matches one in the port's table.
		if !pkeyInTable(tp.BTH().PKey(), a.PKeys) {
			c.RxBadPKey.Add(1)
			return nil
		}
	} else if a.State == StateDown {
		c.RxPortState.Add(1)
		return nil
	}
	t := tp.Bytes()
	p := link.Get()
	p.N = copy(p.Buf, t)
	p.IB = link.IBAddr{DLID: dlid, SLID: lrh.SLID(), SL: lrh.SL(), VL: vl}
	if mine {
		p.IB.PathBits = uint8(dlid & lmcMask)
	}
	if g := pkt.GRH(); g != nil {
		p.IB.Global = true
		p.IB.HopLimit, p.IB.FlowLabel = g.HopLmt(), g.FlowLabel()
		p.TClass = g.TClass()
		p.Src = netip.AddrPortFrom(netip.AddrFrom16(g.SGID()), 0)
		p.Dst = netip.AddrPortFrom(netip.AddrFrom16(g.DGID()), 0)
	}
	return p
}

// pkeyInTable reports whether k matches an entry of the table.
func pkeyInTable(k wire.PKey, table []uint16) bool {
	for _, e := range table {
		if k.Matches(wire.PKey(e)) {
			return true
		}
	}
	return false
}

// Close stops the link and closes its port. It waits for the receive calls
// in progress, so that what their handler sends still goes out before the
// port closes (a handler must not call Close).
func (l *Link) Close() error {
	if l.closing.Swap(true) {
		return ErrClosed
	}
	// Receive calls in progress end first, their handler's sends with
	// them; later ones deliver nothing. Then Send fails and the port
	// closes.
	l.recvMu.Lock()
	l.closed.Store(true)
	l.recvMu.Unlock()
	l.port.NotifyAttr(nil)
	return l.port.Close()
}
