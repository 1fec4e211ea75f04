package ib

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// fakePort records what is sent and lets a test hand packets to the link.
type fakePort struct {
	mu     sync.Mutex
	attr   PortAttr
	notify func()
	sent   [][]byte
	recv   func([][]byte)
}

func (p *fakePort) Send(pkts [][]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range pkts {
		p.sent = append(p.sent, bytes.Clone(b))
	}
	return nil
}
func (p *fakePort) Start(recv func([][]byte)) error { p.recv = recv; return nil }
func (p *fakePort) Attr() PortAttr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attr.Clone()
}
func (p *fakePort) NotifyAttr(f func()) { p.notify = f }
func (p *fakePort) Close() error        { return nil }
func (p *fakePort) set(a PortAttr) {
	p.mu.Lock()
	p.attr = a
	p.mu.Unlock()
	if p.notify != nil {
		p.notify()
	}
}

func testAttr() PortAttr {
	a := DefaultAttr(0x40, 0x0011_2233_4455_6677)
	a.LMC = 2
	a.PKeys = []uint16{0xFFFF, 0x0003}
	a.SL2VL[3] = 2
	return a
}

// transport builds a transport packet (BTH through an unsealed ICRC).
func transport(t testing.TB, h *wire.Headers, payload []byte) []byte {
	t.Helper()
	b := make([]byte, 512)
	n, err := wire.Build(b, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

func rcSend(pkey wire.PKey, dqp wire.QPN) *wire.Headers {
	return &wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: pkey, DestQP: dqp, PSN: 77}}
}

func udSend(pkey wire.PKey, dqp, sqp wire.QPN) *wire.Headers {
	return &wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: pkey, DestQP: dqp, PSN: 5},
		DETH: wire.DETHFields{QKey: 0x80010000, SrcQP: sqp}}
}

var (
	gidA = wire.GID{0xfe, 0x80, 8: 0x00, 9: 0x11, 10: 0x22, 11: 0x33, 12: 0x44, 13: 0x55, 14: 0x66, 15: 0x77}
	gidB = wire.GID{0xfe, 0x80, 8: 0x02, 15: 0x09}
)

// TestFraming sends transport packets through the link and compares each
// frame byte for byte with what wire.BuildIB makes of the same fields, and
// field by field with wire.ParseIB: VL from SL2VL (VL15 for QP0's
// packets), link version 0, LNH, DLID, SLID = LID | path bits within the
// LMC, the length, the GRH, the ICRC and the VCRC.
func TestFraming(t *testing.T) {
	fp := &fakePort{attr: testAttr()}
	l, err := New(fp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	payload := []byte("InfiniBand framing test payload!")
	cases := []struct {
		name     string
		h        *wire.Headers
		ib       link.IBAddr
		tclass   uint8
		wantVL   uint8
		wantSLID uint16
	}{
		{"local", rcSend(0xFFFF, 0x123), link.IBAddr{DLID: 0x51, SL: 3, PathBits: 1}, 0, 2, 0x41},
		{"path bits beyond the LMC", rcSend(0xFFFF, 0x123), link.IBAddr{DLID: 0x51, SL: 0, PathBits: 7}, 0, 0, 0x43},
		{"global", udSend(0xFFFF, 0x44, 0x55), link.IBAddr{DLID: 0x52, SL: 3, Global: true, HopLimit: 9, FlowLabel: 0xABCDE}, 0xB8, 2, 0x40},
		{"QP0 on VL15", udSend(0xFFFF, 0, 0), link.IBAddr{DLID: 0x52, SL: 3}, 0, 15, 0x40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp.sent = nil
			p := link.Get()
			defer link.Put(p)
			p.N = copy(p.Buf, transport(t, c.h, payload))
			p.IB, p.TClass = c.ib, c.tclass
			p.Src = netip.AddrPortFrom(netip.AddrFrom16(gidA), 0)
			p.Dst = netip.AddrPortFrom(netip.AddrFrom16(gidB), 0)
			if err := l.Send([]*link.Packet{p}); err != nil {
				t.Fatal(err)
			}
			if len(fp.sent) != 1 {
				t.Fatalf("%d frames sent", len(fp.sent))
			}
			got := fp.sent[0]
			f := wire.IBFraming{LRH: wire.LRHFields{VL: c.wantVL, SL: c.ib.SL, DLID: c.ib.DLID, SLID: c.wantSLID}}
			if c.ib.Global {
				f.GRH = &wire.GRHFields{TClass: c.tclass, FlowLabel: c.ib.FlowLabel, HopLmt: c.ib.HopLimit, SGID: gidA, DGID: gidB}
			}
			want := make([]byte, MaxFrame)
			n, err := wire.BuildIB(want, &f, c.h, payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want[:n]) {
				t.Fatalf("frame\n% x\nwant\n% x", got, want[:n])
			}
			pkt, err := wire.ParseIB(got)
			if err != nil {
				t.Fatal(err)
			}
			lrh := pkt.LRH().Fields()
			wantLNH := wire.LNHIBALocal
			if c.ib.Global {
				wantLNH = wire.LNHIBAGlobal
			}
			if lrh.VL != c.wantVL || lrh.LVer != 0 || lrh.SL != c.ib.SL || lrh.LNH != wantLNH ||
				lrh.DLID != c.ib.DLID || lrh.SLID != c.wantSLID || int(lrh.PktLen)*4 != len(got)-2 {
				t.Fatalf("LRH %+v", lrh)
			}
			if g := pkt.GRH(); c.ib.Global {
				gf := g.Fields()
				if gf.TClass != c.tclass || gf.FlowLabel != c.ib.FlowLabel || gf.HopLmt != c.ib.HopLimit ||
					gf.SGID != gidA || gf.DGID != gidB || gf.NxtHdr != 0x1B || int(gf.PayLen) != p.N {
					t.Fatalf("GRH %+v", gf)
				}
			} else if g != nil {
				t.Fatal("a GRH on a local packet")
			}
			if !bytes.Equal(pkt.Transport().Payload(), payload) {
				t.Fatal("payload differs")
			}
		})
	}
}

// TestSendRefused: what the link does not send.
func TestSendRefused(t *testing.T) {
	a := testAttr()
	a.SL2VL[9] = 15
	fp := &fakePort{attr: a}
	l, _ := New(fp)
	defer l.Close()
	send := func(h *wire.Headers, sl uint8) error {
		p := link.Get()
		defer link.Put(p)
		p.N = copy(p.Buf, transport(t, h, nil))
		p.IB = link.IBAddr{DLID: 0x50, SL: sl}
		return l.Send([]*link.Packet{p})
	}
	if err := send(rcSend(0xFFFF, 9), 9); !errors.Is(err, link.ErrAddress) || l.Stats().TxErrors != 1 {
		t.Fatalf("SL mapped to VL15: %v, %+v", err, l.Stats())
	}
	a.State = StateInit
	fp.set(a)
	if err := send(rcSend(0xFFFF, 9), 0); !errors.Is(err, link.ErrDown) || l.Stats().TxNotActive != 1 {
		t.Fatalf("data on an INIT port: %v, %+v", err, l.Stats())
	}
	if err := send(udSend(0xFFFF, 0, 0), 0); err != nil {
		t.Fatalf("QP0 on an INIT port: %v", err)
	}
	if len(fp.sent) != 1 || wire.LRH(fp.sent[0]).VL() != 15 {
		t.Fatalf("sent %d frames", len(fp.sent))
	}
}

// frame builds a sealed IB packet.
func frame(t testing.TB, vl uint8, dlid uint16, h *wire.Headers) []byte {
	t.Helper()
	b := make([]byte, MaxFrame)
	n, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{VL: vl, SL: 4, DLID: dlid, SLID: 0x99}}, h, []byte("data"))
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// rxLink is a started link over a fake port that collects what it delivers.
type rxLink struct {
	l    *Link
	fp   *fakePort
	got  []link.Packet
	data [][]byte
}

func newRxLink(t testing.TB, a PortAttr) *rxLink {
	r := &rxLink{fp: &fakePort{attr: a}}
	var err error
	if r.l, err = New(r.fp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.l.Close() })
	if err := r.l.Start(link.HandlerFunc(func(batch []*link.Packet) {
		for _, p := range batch {
			r.got = append(r.got, *p)
			r.data = append(r.data, bytes.Clone(p.Data()))
		}
	})); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReceiveChecks hands the link one packet for each check an HCA port
// makes and expects each dropped and counted by its reason, or delivered
// with its addressing.
func TestReceiveChecks(t *testing.T) {
	reseal := func(b []byte) []byte { wire.SealIB(b); return b }
	revcrc := func(b []byte) []byte { wire.SealVCRC(b); return b }
	cases := []struct {
		name    string
		b       func() []byte
		counter func(s link.Stats) uint64 // nil: delivered
		path    uint8
	}{
		{"mine", func() []byte { return frame(t, 0, 0x40, rcSend(0xFFFF, 9)) }, nil, 0},
		{"mine by LMC", func() []byte { return frame(t, 0, 0x43, rcSend(0xFFFF, 9)) }, nil, 3},
		{"multicast", func() []byte { return frame(t, 0, 0xC001, udSend(0xFFFF, 0xFFFFFF, 4)) }, nil, 0},
		{"limited key against a full one", func() []byte { return frame(t, 0, 0x40, rcSend(0x7FFF, 9)) }, nil, 0},
		{"full key against a limited one", func() []byte { return frame(t, 0, 0x40, rcSend(0x8003, 9)) }, nil, 0},
		{"QP0 any key", func() []byte { return frame(t, 15, 0x40, udSend(0x1234, 0, 0)) }, nil, 0},
		{"QP0 permissive DLID", func() []byte { return frame(t, 15, 0xFFFF, udSend(0xFFFF, 0, 0)) }, nil, 0},
		{"bad VCRC", func() []byte { b := frame(t, 0, 0x40, rcSend(0xFFFF, 9)); b[len(b)-1] ^= 1; return b },
			func(s link.Stats) uint64 { return s.RxBadVCRC }, 0},
		{"bad ICRC", func() []byte { b := frame(t, 0, 0x40, rcSend(0xFFFF, 9)); b[len(b)-8] ^= 0x10; return revcrc(b) },
			func(s link.Stats) uint64 { return s.RxBadICRC }, 0},
		{"link version 1", func() []byte { b := frame(t, 0, 0x40, rcSend(0xFFFF, 9)); b[0] |= 1; return reseal(b) },
			func(s link.Stats) uint64 { return s.RxBadLinkVersion }, 0},
		{"wrong DLID", func() []byte { return frame(t, 0, 0x44, rcSend(0xFFFF, 9)) },
			func(s link.Stats) uint64 { return s.RxBadDLID }, 0},
		{"permissive DLID for QP9", func() []byte { return frame(t, 0, 0xFFFF, rcSend(0xFFFF, 9)) },
			func(s link.Stats) uint64 { return s.RxBadDLID }, 0},
		{"P_Key not in the table", func() []byte { return frame(t, 0, 0x40, rcSend(0x8005, 9)) },
			func(s link.Stats) uint64 { return s.RxBadPKey }, 0},
		{"two limited keys", func() []byte { return frame(t, 0, 0x40, rcSend(0x0003, 9)) },
			func(s link.Stats) uint64 { return s.RxBadPKey }, 0},
		{"QP1 key not in the table", func() []byte { return frame(t, 0, 0x40, udSend(0x8005, 1, 1)) },
			func(s link.Stats) uint64 { return s.RxBadPKey }, 0},
		{"QP9 on VL15", func() []byte { return frame(t, 15, 0x40, rcSend(0xFFFF, 9)) },
			func(s link.Stats) uint64 { return s.RxBadVL }, 0},
		{"QP0 on VL0", func() []byte { return frame(t, 0, 0x40, udSend(0xFFFF, 0, 0)) },
			func(s link.Stats) uint64 { return s.RxBadVL }, 0},
		{"raw packet", func() []byte { b := frame(t, 0, 0x40, rcSend(0xFFFF, 9)); b[1] &^= 3; return reseal(b) },
			func(s link.Stats) uint64 { return s.RxMalformed }, 0},
		{"length", func() []byte { b := frame(t, 0, 0x40, rcSend(0xFFFF, 9)); return b[:len(b)-4] },
			func(s link.Stats) uint64 { return s.RxMalformed }, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRxLink(t, testAttr())
			b := c.b()
			before := r.l.Stats()
			r.fp.recv([][]byte{b})
			after := r.l.Stats()
			if c.counter == nil {
				if len(r.got) != 1 {
					t.Fatalf("not delivered: %+v", after)
				}
				p := r.got[0]
				lrh := wire.LRH(b)
				if p.IB.DLID != lrh.DLID() || p.IB.SLID != 0x99 || p.IB.SL != 4 || p.IB.VL != lrh.VL() ||
					p.IB.PathBits != c.path || p.IB.Global {
					t.Fatalf("delivered with %+v", p.IB)
				}
				pkt, _ := wire.ParseIB(b)
				if !bytes.Equal(r.data[0], pkt.Transport().Bytes()) {
					t.Fatal("transport bytes differ")
				}
				return
			}
			if len(r.got) != 0 {
				t.Fatalf("delivered: %+v", r.got[0].IB)
			}
			if c.counter(after)-c.counter(before) != 1 {
				t.Fatalf("counters %+v", after)
			}
			// Exactly one drop counter moved.
			drops := func(s link.Stats) uint64 {
				return s.RxBadVCRC + s.RxBadICRC + s.RxBadLinkVersion + s.RxBadDLID + s.RxBadPKey +
					s.RxBadVL + s.RxPortState + s.RxMalformed
			}
			if drops(after)-drops(before) != 1 {
				t.Fatalf("%d drops counted: %+v", drops(after)-drops(before), after)
			}
		})
	}
}

// TestReceiveGlobal: a packet with a GRH is delivered with its GIDs,
// traffic class, hop limit and flow label.
func TestReceiveGlobal(t *testing.T) {
	r := newRxLink(t, testAttr())
	b := make([]byte, MaxFrame)
	n, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{SL: 1, DLID: 0x40, SLID: 7},
		GRH: &wire.GRHFields{TClass: 0x20, FlowLabel: 0x54321, HopLmt: 3, SGID: gidB, DGID: gidA}},
		udSend(0xFFFF, 9, 8), []byte("global"))
	if err != nil {
		t.Fatal(err)
	}
	r.fp.recv([][]byte{b[:n]})
	if len(r.got) != 1 {
		t.Fatalf("not delivered: %+v", r.l.Stats())
	}
	p := r.got[0]
	if !p.IB.Global || p.TClass != 0x20 || p.IB.FlowLabel != 0x54321 || p.IB.HopLimit != 3 ||
		p.Src.Addr() != netip.AddrFrom16(gidB) || p.Dst.Addr() != netip.AddrFrom16(gidA) {
		t.Fatalf("delivered %+v", p)
	}
}

// TestReceivePortState: a port in INIT takes only QP0's packets; ARMED and
// ACTIVE take data too; DOWN takes nothing.
func TestReceivePortState(t *testing.T) {
	for _, c := range []struct {
		state     uint8
		data, smp bool
	}{{StateDown, false, false}, {StateInit, false, true}, {StateArmed, true, true}, {StateActive, true, true}} {
		a := testAttr()
		a.State = c.state
		r := newRxLink(t, a)
		r.fp.recv([][]byte{frame(t, 0, 0x40, rcSend(0xFFFF, 9))})
		if got := len(r.got) == 1; got != c.data {
			t.Errorf("state %d: data delivered %v", c.state, got)
		}
		r.got = nil
		r.fp.recv([][]byte{frame(t, 15, 0x40, udSend(0xFFFF, 0, 0))})
		if got := len(r.got) == 1; got != c.smp {
			t.Errorf("state %d: SMP delivered %v", c.state, got)
		}
		if s := r.l.Stats(); s.RxPortState != uint64(btoi(!c.data)+btoi(!c.smp)) {
			t.Errorf("state %d: RxPortState %d", c.state, s.RxPortState)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestTruncated: every prefix of a packet is dropped as malformed.
func TestTruncated(t *testing.T) {
	r := newRxLink(t, testAttr())
	b := frame(t, 0, 0x40, rcSend(0xFFFF, 9))
	for n := range len(b) {
		r.fp.recv([][]byte{b[:n]})
	}
	if s := r.l.Stats(); len(r.got) != 0 || s.RxMalformed != uint64(len(b)) {
		t.Fatalf("%d delivered, stats %+v", len(r.got), s)
	}
}

// TestStateNotifier: the link is up while the port is Active, and tells
// of the changes; IBAttr follows the port.
func TestStateNotifier(t *testing.T) {
	fp := &fakePort{attr: testAttr()}
	l, _ := New(fp)
	defer l.Close()
	var ups []bool
	var attrs int
	l.NotifyState(func(up bool) { ups = append(ups, up) })
	l.NotifyIBAttr(func() { attrs++ })
	a := testAttr()
	for _, s := range []uint8{StateInit, StateArmed, StateActive, StateActive, StateDown} {
		a.State = s
		fp.set(a)
		if l.Up() != (s == StateActive) || l.IBAttr().State != s {
			t.Fatalf("state %d: Up %v, IBAttr %+v", s, l.Up(), l.IBAttr())
		}
	}
	if want := []bool{false, true, false}; !equalBools(ups, want) || attrs != 5 {
		t.Fatalf("notified %v and %d attribute changes, want %v and 5", ups, attrs, want)
	}
	if got, want := l.Addrs()[0], netip.AddrFrom16(gidA); got != want {
		t.Fatalf("Addrs %v, want %v", got, want)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCable: two links over a cable exchange packets both ways; Start,
// Close and Send report misuse; nothing outlives Close.
func TestCable(t *testing.T) {
	leakcheck.Check(t)
	ca, cb := Cable()
	la, _ := New(ca)
	lb, _ := New(cb)
	got := make(chan link.IBAddr, 4)
	h := link.HandlerFunc(func(batch []*link.Packet) {
		for _, p := range batch {
			got <- p.IB
		}
	})
	if err := la.Start(h); err != nil {
		t.Fatal(err)
	}
	if err := la.Start(h); !errors.Is(err, link.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := lb.Start(h); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from *Link
		dlid uint16
	}{{la, 2}, {lb, 1}} {
		p := link.Get()
		p.N = copy(p.Buf, transport(t, rcSend(0xFFFF, 9), []byte("x")))
		p.IB.DLID = c.dlid
		if err := c.from.Send([]*link.Packet{p}); err != nil {
			t.Fatal(err)
		}
		link.Put(p)
		select {
		case a := <-got:
			if a.DLID != c.dlid || a.SLID != 3-c.dlid {
				t.Fatalf("received %+v", a)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("nothing received")
		}
	}
	if err := la.Close(); err != nil {
		t.Fatal(err)
	}
	if err := la.Close(); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := la.Send(nil); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCableFaults: seeded loss and duplication on a cable are counted, and
// the same seed gives the same counts.
func TestCableFaults(t *testing.T) {
	leakcheck.Check(t)
	run := func() CableStats {
		a, b := Cable(CableConfig{Faults: link.Faults{Loss: 0.2, Duplicate: 0.1}, Seed: 42})
		defer a.Close()
		defer b.Close()
		for range 200 {
			if err := a.Send([][]byte{{1, 2, 3}}); err != nil {
				t.Fatal(err)
			}
		}
		return a.Stats()
	}
	s1, s2 := run(), run()
	if s1 != s2 || s1.Sent != 200 || s1.Dropped == 0 || s1.Delivered <= 200-s1.Dropped {
		t.Fatalf("runs %+v and %+v", s1, s2)
	}
}

// FuzzPortReceive feeds arbitrary bytes to the port's checks: nothing panics,
// and whatever is delivered is a valid IB packet for the port.
func FuzzPortReceive(f *testing.F) {
	f.Add(frame(f, 0, 0x40, rcSend(0xFFFF, 9)))
	f.Add(frame(f, 15, 0xFFFF, udSend(0xFFFF, 0, 0)))
	f.Add([]byte{0, 2, 0, 0x40, 0, 3})
	a := testAttr()
	l, _ := New(&fakePort{attr: a})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := l.check(&a, b)
		if p == nil {
			return
		}
		defer link.Put(p)
		if _, err := wire.ParseIB(b); err != nil {
			t.Fatalf("delivered a packet ParseIB rejects: %v", err)
		}
	})
}
