package verbs

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/wire"
)

// ibOpts runs a pair over an InfiniBand cable (ib.Cable) instead of loop.
type ibOpts struct {
	global   bool  // address handles and paths carry a GRH
	sl       uint8 // the paths' service level
	lmc      uint8 // both ports' LMC
	pathBits uint8 // the paths' source path bits (below LMC)
	dlidBits uint8 // added to the peer's LID for the DLID (below LMC)
	pkeys    []uint16
	tamper   func(from *ib.CablePort, b []byte) bool
}

// Port LIDs and GUIDs of the cable's ends in these tests.
const (
	ibLIDA, ibLIDB   = 0x10, 0x20
	ibGUIDA, ibGUIDB = 0x0002_c903_00aa_0001, 0x0002_c903_00bb_0002
)

func (o *ibOpts) attr(lid uint16, guid uint64) ib.PortAttr {
	a := ib.DefaultAttr(lid, guid)
	a.LMC, a.SMLID, a.OperVLs = o.lmc, 0x10, 4
	a.GIDPrefix = 0xFE80_0000_0000_0000
	if o.pkeys != nil {
		a.PKeys = o.pkeys
	}
	for sl := range a.SL2VL {
		a.SL2VL[sl] = uint8(sl % 4)
	}
	return a
}

// ah is the address vector of a path to peer's port.
func (o *ibOpts) ah(peer *Device, tclass uint8) AHAttr {
	pa, err := peer.QueryPort(1)
	if err != nil {
		panic(err)
	}
	a := AHAttr{DLID: pa.LID | uint16(o.dlidBits), SL: o.sl, SrcPathBits: o.pathBits, PortNum: 1,
		TrafficClass: tclass}
	if o.global {
		a.IsGlobal, a.DGID, a.HopLimit, a.FlowLabel = true, peer.GIDs()[0], 64, 0x12345
	}
	return a
}

// checkWC checks a UD receive's address fields at B for a packet from A.
func (o *ibOpts) checkWC(p *pair, wc WC) bool {
	pa, _ := p.da.QueryPort(1)
	return wc.SLID == pa.LID|uint16(o.pathBits) && wc.SL == o.sl && wc.DLIDPath == o.dlidBits &&
		(wc.Flags&WCGRH != 0) == o.global
}

// newIBLinks cables two links.
func newIBLinks(t testing.TB, o *ibOpts, faults link.Faults, seed uint64) (*ib.Link, *ib.Link, *ib.CablePort, *ib.CablePort) {
	t.Helper()
	ca, cb := ib.Cable(ib.CableConfig{A: o.attr(ibLIDA, ibGUIDA), B: o.attr(ibLIDB, ibGUIDB),
		Faults: faults, Seed: seed, Tamper: o.tamper, QueueLen: 1 << 14})
	la, err := ib.New(ca)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := ib.New(cb)
	if err != nil {
		t.Fatal(err)
	}
	return la, lb, ca, cb
}

func newPairIB(t testing.TB, o pairOpts) *pair {
	t.Helper()
	la, lb, _, _ := newIBLinks(t, o.ib, o.faults, o.seed)
	var opts Options
	if o.devOpts != nil {
		opts = *o.devOpts
	}
	da, err := Open(la, &opts)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(lb, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		da.Close()
		db.Close()
	})
	p := &pair{t: t, da: da, db: db}
	p.connect(o)
	return p
}

// ibTimeout is the RC local ACK timeout of the IB tests: 12 (16.8 ms), or
// 16 (268 ms) under the race detector, which slows the link's CRCs (the
// VCRC is computed in Go, byte by byte through tables) enough that a
// 1 MiB READ answer takes longer than 16 ms to receive, and a requester
// that times out asks for all of it again behind what is still queued.
func ibTimeout() uint8 {
	if raceEnabled() {
		return 16
	}
	return 12
}

// checkIBGRH checks the GRH area of a UD receive over IB: the GRH as it
// came on the wire (version 6, next header IBA, the transport's length, the
// GIDs, the hop limit and flow label the AH gave).
func checkIBGRH(t testing.TB, g []byte, src, dst wire.GID, transportLen int) {
	t.Helper()
	f := wire.GRH(g).Fields()
	if f.IPVer != 6 || f.NxtHdr != wire.GRHNextHeaderIBA || int(f.PayLen) != transportLen ||
		f.SGID != src || f.DGID != dst || f.HopLmt != 64 || f.FlowLabel != 0x12345 {
		t.Fatalf("GRH %+v: want version 6, next header 0x1b, payload %d, %v -> %v, hop limit 64, flow 0x12345",
			f, transportLen, src, dst)
	}
}

// TestIBMatrix runs every operation of RC, UC and UD between two devices
// cabled by InfiniBand, routed by LID (with LMC path bits on both sides and
// an SL on VL 3), and UD and RC with a GRH.
func TestIBMatrix(t *testing.T) {
	leakcheck.Check(t)
	t.Run("local", func(t *testing.T) {
		runMatrix(t, mxConfig{types: []QPType{RC, UC, UD}, mtus: []MTU{MTU1024}, seed: 1, timeout: ibTimeout(),
			ib: &ibOpts{sl: 3, lmc: 2, pathBits: 1, dlidBits: 2}})
	})
	t.Run("global", func(t *testing.T) {
		runMatrix(t, mxConfig{types: []QPType{RC, UD}, mtus: []MTU{MTU4096}, seed: 2, timeout: ibTimeout(),
			ib: &ibOpts{global: true, sl: 5}})
	})
}

// TestIBMatrixFaults runs the RC matrix over a cable that loses, duplicates
// and corrupts 3% of the packets each (seeded): every WR completes with its data intact,
// and the receiving ports drop the corrupted packets by their VCRC.
func TestIBMatrixFaults(t *testing.T) {
	leakcheck.Check(t)
	var mu sync.Mutex
	var ports []*ib.CablePort
	o := &ibOpts{tamper: func(from *ib.CablePort, b []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ports {
			if p == from {
				return false
			}
		}
		ports = append(ports, from)
		return false
	}}
	runMatrix(t, mxConfig{types: []QPType{RC}, mtus: []MTU{MTU1024}, seed: 400, timeout: ibTimeout(), bigSGE: 2,
		faults: link.Faults{Loss: 0.03, Duplicate: 0.03, Corrupt: 0.03}, ib: o})
	if len(ports) != 2 {
		t.Fatalf("saw %d cable ports", len(ports))
	}
}

// TestIBFaultsCounted checks that the cable's corruption is caught by the
// VCRC check of the receiving link and counted there.
func TestIBFaultsCounted(t *testing.T) {
	leakcheck.Check(t)
	p := newPair(t, pairOpts{typ: RC, mtu: MTU1024, faults: link.Faults{Corrupt: 0.2}, seed: 9, timeout: ibTimeout(), ib: &ibOpts{}})
	ma, mb := p.reg(p.pa, 1<<16), p.reg(p.pb, 1<<16)
	for i := range ma.Buf() {
		ma.Buf()[i] = byte(i * 13)
	}
	for i := range 4 {
		if err := p.qa.PostSend([]SendWR{{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{ma.SGE(0, 1<<16)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, p.ca, 1, 20*time.Second)[0]; wc.Status != Success {
			t.Fatalf("WRITE %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(ma.Buf(), mb.Buf()) {
		t.Fatal("data differs")
	}
	sa, sb := p.da.Link().Stats(), p.db.Link().Stats()
	if sa.RxBadVCRC+sb.RxBadVCRC == 0 {
		t.Fatalf("no VCRC drops counted: A %+v B %+v", sa, sb)
	}
	if sa.RxBadICRC+sb.RxBadICRC+sa.RxMalformed+sb.RxMalformed > sa.RxBadVCRC+sb.RxBadVCRC {
		t.Errorf("corruption counted elsewhere than the VCRC: A %+v B %+v", sa, sb)
	}
}

// TestIBQueryPort: a device on an IB link shows the port as the SM set it.
func TestIBQueryPort(t *testing.T) {
	leakcheck.Check(t)
	o := &ibOpts{lmc: 1, pkeys: []uint16{0xFFFF, 0x8001, 0x0002}}
	la, lb, _, _ := newIBLinks(t, o, link.Faults{}, 0)
	d, err := Open(la, &Options{MTU: MTU2048})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lb.Close()
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.LinkLayer != "InfiniBand" || pa.LID != ibLIDA || pa.LMC != 1 || pa.SMLID != 0x10 ||
		pa.State != PortActive || pa.ActiveMTU != MTU2048 || pa.MaxMTU != MTU2048 || pa.UDPPort != 0 ||
		pa.PKeyTableLen != 3 || len(pa.PKeys) != 3 || pa.PKeys[1] != 0x8001 || pa.MaxVLNum != 4 {
		t.Fatalf("port %+v", pa)
	}
	want := wire.GID{0xfe, 0x80, 6: 0, 8: 0x00, 9: 0x02, 10: 0xc9, 11: 0x03, 12: 0x00, 13: 0xaa, 14: 0x00, 15: 0x01}
	if g, _ := d.QueryGID(1, 0); g != want {
		t.Fatalf("GID 0 %v, want %v", g, want)
	}
	if g := d.QueryDevice().NodeGUID; g != ibGUIDA {
		t.Fatalf("node GUID %#x, want the port's %#x", g, uint64(ibGUIDA))
	}
}

// nextEvent waits for an async event.
func nextEvent(t *testing.T, d *Device) AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := d.GetAsyncEvent(ctx)
	if err != nil {
		t.Fatal("no event:", err)
	}
	return ev
}

// TestIBPortState: the port state follows the SM (the cable's SetAttr plays
// it), with EventPortErr on leaving ACTIVE and EventPortActive on entering
// it; LID, P_Key and SM changes raise their events; data does not flow
// while the port is not ACTIVE.
func TestIBPortState(t *testing.T) {
	leakcheck.Check(t)
	o := &ibOpts{}
	la, lb, ca, _ := newIBLinks(t, o, link.Faults{}, 0)
	d, err := Open(la, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer lb.Close()
	state := func() PortState {
		pa, err := d.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		return pa.State
	}
	a := ca.Attr()
	for _, s := range []struct {
		state uint8
		want  PortState
		ev    EventType // 0: none
	}{
		{ib.StateDown, PortDown, EventPortErr},
		{ib.StateInit, PortInit, 0},
		{ib.StateArmed, PortArmed, 0},
		{ib.StateActive, PortActive, EventPortActive},
		{ib.StateInit, PortInit, EventPortErr},
		{ib.StateActive, PortActive, EventPortActive},
	} {
		a.State = s.state
		ca.SetAttr(a)
		if got := state(); got != s.want {
			t.Fatalf("state %d: QueryPort says %v, want %v", s.state, got, s.want)
		}
		if s.ev != 0 {
			if ev := nextEvent(t, d); ev.Type != s.ev || ev.Port != 1 {
				t.Fatalf("state %d: event %v, want %v", s.state, ev.Type, s.ev)
			}
		}
		select {
		case ev := <-d.Events():
			t.Fatalf("state %d: extra event %v", s.state, ev.Type)
		default:
		}
	}
	a.LID = 0x33
	ca.SetAttr(a)
	if ev := nextEvent(t, d); ev.Type != EventLIDChange {
		t.Fatalf("event %v, want LID change", ev.Type)
	}
	if pa, _ := d.QueryPort(1); pa.LID != 0x33 {
		t.Fatalf("LID %#x after the change", pa.LID)
	}
	a.PKeys = []uint16{0xFFFF, 0x8005}
	ca.SetAttr(a)
	if ev := nextEvent(t, d); ev.Type != EventPKeyChange {
		t.Fatalf("event %v, want P_Key change", ev.Type)
	}
	a.SMLID = 0x44
	ca.SetAttr(a)
	if ev := nextEvent(t, d); ev.Type != EventSMChange {
		t.Fatalf("event %v, want SM change", ev.Type)
	}
}

// TestIBPortStateTraffic: a UD send while the port is INIT does not reach
// the peer (the link counts it), and does once the port is ACTIVE again.
func TestIBPortStateTraffic(t *testing.T) {
	leakcheck.Check(t)
	p := newPair(t, pairOpts{typ: UD, ib: &ibOpts{}})
	mr := p.reg(p.pa, 4096)
	mb := p.reg(p.pb, 4096)
	ah, err := p.pa.CreateAH(p.opts.ib.ah(p.db, 0))
	if err != nil {
		t.Fatal(err)
	}
	port := p.da.Link().(*ib.Link)
	send := func(id uint64) {
		if err := p.qa.PostSend([]SendWR{{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mr.SGE(0, 100)},
			AH: ah, RemoteQPN: p.qb.QPN(), RemoteQKey: 0x11111111}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, p.ca, 1, 5*time.Second)
	}
	if err := p.qb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	cp := portOf(t, p.da)
	a := cp.Attr()
	a.State = ib.StateInit
	cp.SetAttr(a)
	send(1)
	if n := port.Stats().TxNotActive; n != 1 {
		t.Fatalf("TxNotActive %d after a send on an INIT port", n)
	}
	a.State = ib.StateActive
	cp.SetAttr(a)
	send(2)
	if wc := waitWC(t, p.cb, 1, 5*time.Second)[0]; wc.Status != Success || wc.ByteLen != grhLen+100 {
		t.Fatalf("receive %+v", wc)
	}
}

// portOf returns the cable port under a device's IB link.
func portOf(t testing.TB, d *Device) *ib.CablePort {
	t.Helper()
	cp, ok := d.Link().(*ib.Link).Attached().(*ib.CablePort)
	if !ok {
		t.Fatal("not a cable port")
	}
	return cp
}

// TestIBSMI: QP0 exists on an IB port only; its packets travel on VL15
// whatever the SL, take any Q_Key, and arrive at the peer's QP0; another
// QP's packets whose SL the SL2VL table maps to VL15 are not sent.
func TestIBSMI(t *testing.T) {
	leakcheck.Check(t)
	var mu sync.Mutex
	var vls []uint8
	o := &ibOpts{sl: 2, tamper: func(_ *ib.CablePort, b []byte) bool {
		mu.Lock()
		vls = append(vls, wire.LRH(b).VL())
		mu.Unlock()
		return false
	}}
	la, lb, _, _ := newIBLinks(t, o, link.Faults{}, 0)
	da, err := Open(la, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db, err := Open(lb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mk := func(d *Device) (*PD, *CQ, *QP) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(16, nil)
		qp, err := pd.CreateSMIQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		udUp(t, qp, 0, 0x1234)
		return pd, cq, qp
	}
	pa, ca, qa := mk(da)
	pb, cb, qb := mk(db)
	if qa.QPN() != 0 || qb.QPN() != 0 {
		t.Fatalf("QPNs %d %d", qa.QPN(), qb.QPN())
	}
	ma, _ := pa.RegMR(make([]byte, 256), AccessLocalWrite)
	mb, _ := pb.RegMR(make([]byte, 512), AccessLocalWrite)
	copy(ma.Buf(), "subnet management")
	if err := qb.PostRecv([]RecvWR{{ID: 7, SGL: []SGE{mb.SGE(0, 512)}}}); err != nil {
		t.Fatal(err)
	}
	ah, err := pa.CreateAH(o.ah(db, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 256)},
		AH: ah, RemoteQPN: 0, RemoteQKey: 0x9999}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, ca, 1, 5*time.Second)
	wc := waitWC(t, cb, 1, 5*time.Second)[0]
	if wc.Status != Success || wc.SrcQP != 0 || wc.SLID != ibLIDA || wc.SL != 2 || wc.ByteLen != grhLen+256 {
		t.Fatalf("QP0 receive %+v", wc)
	}
	if !bytes.Equal(mb.Buf()[grhLen:grhLen+256], ma.Buf()) {
		t.Fatal("QP0 data differs")
	}
	mu.Lock()
	if len(vls) != 1 || vls[0] != wire.VL15 {
		t.Fatalf("QP0 packet on VLs %v, want [15]", vls)
	}
	mu.Unlock()

	// A RoCE-style port has no QP0.
	_, dr, _ := newDevicesLoop(t, &pairOpts{})
	pr, err := dr.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.CreateSMIQP(QPInitAttr{SendCQ: cb, RecvCQ: cb}); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("QP0 without an IB port: %v", err)
	}
}

// TestIBSL2VL15: a QP whose SL the port maps to VL15 cannot send (IBTA:
// such packets are dropped); the link counts the refusal.
func TestIBSL2VL15(t *testing.T) {
	leakcheck.Check(t)
	p := newPair(t, pairOpts{typ: UD, ib: &ibOpts{sl: 7}})
	cp := portOf(t, p.da)
	a := cp.Attr()
	a.SL2VL[7] = wire.VL15
	cp.SetAttr(a)
	mr := p.reg(p.pa, 64)
	ah, err := p.pa.CreateAH(p.opts.ib.ah(p.db, 0))
	if err != nil {
		t.Fatal(err)
	}
	before := p.da.Link().Stats().TxErrors
	if err := p.qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mr.SGE(0, 8)},
		AH: ah, RemoteQPN: p.qb.QPN(), RemoteQKey: 0x11111111}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, p.ca, 1, 5*time.Second)
	if n := p.da.Link().Stats().TxErrors - before; n != 1 {
		t.Fatalf("TxErrors grew by %d, want 1", n)
	}
}

// TestIBPKeyIndex: a QP sends with the P_Key its P_Key index selects in the
// port's table; a peer whose table lacks that partition drops the packets
// (counted by its link), one that has it takes them.
func TestIBPKeyIndex(t *testing.T) {
	leakcheck.Check(t)
	var mu sync.Mutex
	var keys []wire.PKey
	o := &ibOpts{pkeys: []uint16{0xFFFF, 0x8001}, tamper: func(_ *ib.CablePort, b []byte) bool {
		if pkt, err := wire.ParseIB(b); err == nil {
			mu.Lock()
			keys = append(keys, pkt.Transport().BTH().PKey())
			mu.Unlock()
		}
		return false
	}}
	p := newPair(t, pairOpts{typ: UD, ib: o})
	pd, cq := p.pa, p.ca
	qp, err := pd.CreateQP(QPInitAttr{Type: UD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&QPAttr{State: StateInit, PKeyIndex: 2, PortNum: 1, QKey: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey); !errors.Is(err, ErrInvalid) {
		t.Fatalf("P_Key index 2 of a table of 2: %v", err)
	}
	udUp(t, qp, 1, 0x11111111)
	rq, err := p.pb.CreateQP(QPInitAttr{Type: UD, SendCQ: p.cb, RecvCQ: p.cb, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	udUp(t, rq, 1, 0x11111111)
	mr, mb := p.reg(pd, 64), p.reg(p.pb, 256)
	ah, err := pd.CreateAH(o.ah(p.db, 0))
	if err != nil {
		t.Fatal(err)
	}
	post := func(id uint64) {
		if err := rq.PostRecv([]RecvWR{{ID: id, SGL: []SGE{mb.SGE(0, 256)}}}); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend([]SendWR{{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mr.SGE(0, 8)},
			AH: ah, RemoteQPN: rq.QPN(), RemoteQKey: 0x11111111}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, cq, 1, 5*time.Second)
	}
	post(1)
	if wc := waitWC(t, p.cb, 1, 5*time.Second)[0]; wc.Status != Success || wc.WRID != 1 {
		t.Fatalf("receive in partition 0x8001: %+v", wc)
	}
	mu.Lock()
	if len(keys) != 1 || keys[0] != 0x8001 {
		t.Fatalf("P_Keys on the wire %v, want [0x8001]", keys)
	}
	mu.Unlock()
	// The SM takes partition 1 out of B's table: B's port drops the next.
	cp := portOf(t, p.db)
	a := cp.Attr()
	a.PKeys = []uint16{0xFFFF}
	cp.SetAttr(a)
	before := p.db.Link().Stats().RxBadPKey
	post(2)
	deadline := time.Now().Add(5 * time.Second)
	for p.db.Link().Stats().RxBadPKey == before {
		if time.Now().After(deadline) {
			t.Fatal("B's link did not count a P_Key drop")
		}
		time.Sleep(time.Millisecond)
	}
	var wc [1]WC
	if n := p.cb.Poll(wc[:]); n != 0 {
		t.Fatalf("B received across partitions: %+v", wc[0])
	}
}

// TestIBAHErrors: address vectors an IB port cannot use.
func TestIBAHErrors(t *testing.T) {
	leakcheck.Check(t)
	p := newPair(t, pairOpts{typ: UD, ib: &ibOpts{}})
	for _, a := range []AHAttr{
		{PortNum: 1},                     // DLID 0
		{PortNum: 1, DLID: 0x20, SL: 16}, // SL out of range
		{PortNum: 1, DLID: 0x20, IsGlobal: true, SGIDIndex: 3, DGID: p.db.GIDs()[0]},
		{PortNum: 1, DLID: 0x20, IsGlobal: true}, // no DGID
		{PortNum: 2, DLID: 0x20},                 // no port 2
	} {
		if _, err := p.pa.CreateAH(a); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateAH(%+v): %v, want ErrInvalid", a, err)
		}
	}
}

// udUp brings a UD QP to RTS with a P_Key index and Q_Key.
func udUp(t testing.TB, qp *QP, pkeyIndex int, qkey wire.QKey) {
	t.Helper()
	for _, s := range []QPState{StateInit, StateRTR, StateRTS} {
		a, mask := QPAttr{State: s, PKeyIndex: pkeyIndex, PortNum: 1, QKey: qkey}, AttrState
		switch s {
		case StateInit:
			mask |= AttrPKeyIndex | AttrPort | AttrQKey
		case StateRTS:
			mask |= AttrSQPSN
		}
		if err := qp.Modify(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkIBRCWrite64K is BenchmarkRCWrite64K over an InfiniBand cable
// (LRH, ICRC and VCRC on every packet, MTU 4096).
func BenchmarkIBRCWrite64K(b *testing.B) {
	const size, depth = 64 << 10, 16
	p := newPair(b, pairOpts{typ: RC, mtu: MTU4096, ib: &ibOpts{}})
	ma, mb := p.reg(p.pa, depth*size), p.reg(p.pb, depth*size)
	wrs := make([][]SendWR, depth)
	for i := range wrs {
		wrs[i] = []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(i*size, size)},
			RemoteAddr: mb.Addr() + uint64(i*size), RKey: mb.RKey()}}
	}
	wc := make([]WC, depth)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			w := wrs[posted%depth]
			w[0].ID = uint64(posted)
			if err := p.qa.PostSend(w); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		done += pollWait(b, p.ca, wc)
	}
}
