package verbs

import (
	"bytes"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// apmPair is a connected RC pair whose devices have two disjoint paths
// between them: on RoCE (link/loop) two addresses each, the primary path
// between the first ones and the alternate between the second; on
// InfiniBand (ib.Cable, LMC 1) the base LIDs and the base LIDs + 1. cut
// drops every packet sent on the primary path; migReq records the MigReq
// bit of the packets sent (RoCE), bit 0 seen as 1, bit 1 seen as 0.
type apmPair struct {
	*pair
	cut    atomic.Bool
	migReq atomic.Uint32
	// alt[0] is qa's alternate address vector, alt[1] qb's; prim the
	// primary ones.
	alt, prim [2]AHAttr
}

var (
	apmA  = []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.1.1")}
	apmB  = []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.1.2")}
	apmTO = uint8(12) // 16.8 ms ACK timeout
)

func newAPMPair(t *testing.T, onIB bool) *apmPair { return newAPMPairType(t, onIB, RC) }

func newAPMPairType(t *testing.T, onIB bool, typ QPType) *apmPair {
	t.Helper()
	x := &apmPair{}
	o := pairOpts{typ: typ, mtu: MTU1024, timeout: apmTO, retry: 2, wr: 64}
	if onIB {
		o.timeout = ibTimeout()
		o.ib = &ibOpts{lmc: 1, tamper: func(_ *ib.CablePort, b []byte) bool {
			l := wire.LRH(b)
			return x.cut.Load() && (l.DLID() == ibLIDA || l.DLID() == ibLIDB)
		}}
		x.pair = newPairIB(t, o)
		for i, peer := range []*Device{x.db, x.da} {
			x.prim[i] = o.ib.ah(peer, 0)
			x.alt[i] = x.prim[i]
			x.alt[i].DLID++
			x.alt[i].SrcPathBits = 1
		}
		return x
	}
	n := loop.NewNetwork(loop.Config{Faults: link.Faults{Filter: func(p *link.Packet) bool {
		if pkt, err := wire.Parse(p.Data()); err == nil {
			if pkt.BTH().MigReq() {
				x.migReq.Or(1)
			} else {
				x.migReq.Or(2)
			}
		}
		a := p.Dst.Addr()
		return x.cut.Load() && (a == apmA[0] || a == apmB[0])
	}}})
	la, err := n.Attach(apmA, 4791)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach(apmB, 4791)
	if err != nil {
		t.Fatal(err)
	}
	da, err := Open(la, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(lb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		da.Close()
		db.Close()
		n.Close()
	})
	x.pair = &pair{t: t, net: n, da: da, db: db}
	x.connect(o)
	for i, peer := range []*Device{db, da} {
		x.prim[i] = AHAttr{DGID: peer.GIDs()[0], PortNum: 1}
		x.alt[i] = AHAttr{DGID: peer.GIDs()[1], SGIDIndex: 1, PortNum: 1}
	}
	return x
}

// load loads alternate path ah on qp in RTS with the given migration state.
func (x *apmPair) load(qp *QP, ah AHAttr, st MigState) error {
	return qp.Modify(&QPAttr{AltAH: ah, AltPortNum: 1, AltTimeout: x.opts.timeout, PathMigState: st},
		AttrAltPath|AttrPathMigState)
}

// arm loads the alternate paths of both QPs with REARM, exchanges a SEND so
// that each sees the other's MigReq 0, and checks both are ARMED.
func (x *apmPair) arm(t *testing.T) {
	t.Helper()
	for i, qp := range []*QP{x.qa, x.qb} {
		if err := x.load(qp, x.alt[i], MigRearm); err != nil {
			t.Fatal(err)
		}
		if a, _ := qp.Query(); a.PathMigState != MigRearm {
			t.Fatalf("QP %d: %v after loading with REARM", i, a.PathMigState)
		}
	}
	x.sendOne(t)
	for i, qp := range []*QP{x.qa, x.qb} {
		if a, _ := qp.Query(); a.PathMigState != MigArmed {
			t.Fatalf("QP %d: %v after an exchange", i, a.PathMigState)
		}
	}
}

// sendOne sends one small message from qa to qb and waits for both
// completions.
func (x *apmPair) sendOne(t *testing.T) {
	t.Helper()
	m := x.reg(x.pb, 64)
	if err := x.qb.PostRecv([]RecvWR{{ID: 99, SGL: []SGE{m.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qa.PostSend([]SendWR{{ID: 99, Opcode: WRSend, Flags: SendSignaled, Inline: []byte("ping")}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.ca, 1, 5*time.Second)[0]; wc.Status != Success {
		t.Fatalf("send %+v", wc)
	}
	if wc := waitWC(t, x.cb, 1, 5*time.Second)[0]; wc.Status != Success {
		t.Fatalf("receive %+v", wc)
	}
}

// stream runs count WRITEs and SENDs of size bytes each (alternating) from
// qa to qb, calling mid once half of them completed, and checks every
// completion and every byte.
func (x *apmPair) stream(t *testing.T, count, size int, mid func()) {
	t.Helper()
	src := x.reg(x.pa, count*size)
	dst := x.reg(x.pb, count*size)
	for i := range src.Buf() {
		src.Buf()[i] = byte(i*7 + i>>10)
	}
	for i := 0; i < count; i += 2 {
		if err := x.qb.PostRecv([]RecvWR{{ID: uint64(i), SGL: []SGE{dst.SGE(i*size, size)}}}); err != nil {
			t.Fatal(err)
		}
	}
	post := func(i int) {
		wr := SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{src.SGE(i*size, size)}}
		if i%2 == 1 {
			wr.Opcode, wr.RemoteAddr, wr.RKey = WRRDMAWrite, dst.Addr()+uint64(i*size), dst.RKey()
		}
		if err := x.qa.PostSend([]SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	const window = 16
	next := 0
	for ; next < min(window, count); next++ {
		post(next)
	}
	for done := 0; done < count; done++ {
		wc := waitWC(t, x.ca, 1, 20*time.Second)[0]
		if wc.Status != Success || wc.WRID != uint64(done) {
			t.Fatalf("completion %d: %+v", done, wc)
		}
		if done == count/2 && mid != nil {
			mid()
		}
		if next < count {
			post(next)
			next++
		}
	}
	for i := 0; i < count/2; i++ {
		if wc := waitWC(t, x.cb, 1, 5*time.Second)[0]; wc.Status != Success || wc.ByteLen != uint32(size) {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(src.Buf(), dst.Buf()) {
		t.Fatal("data differs after the stream")
	}
}

// wantEvent waits for event typ on qp's device about qp.
func wantEvent(t *testing.T, d *Device, qp *QP, typ EventType) {
	t.Helper()
	ev := nextEvent(t, d)
	if ev.Type != typ || ev.QP != qp {
		t.Fatalf("event %v (QP %v), want %v", ev.Type, ev.QP, typ)
	}
}

// noEvent checks that no async event is waiting on d.
func noEvent(t *testing.T, d *Device) {
	t.Helper()
	select {
	case ev := <-d.Events():
		t.Fatalf("unexpected event %v", ev.Type)
	default:
	}
}

// TestPathMigAttrs: the alternate path and the migration state are set
// where IBTA allows them, validated like the primary path, returned by
// Query; the state's illegal transitions are refused; MigReq is 1 on the
// wire in MIGRATED and 0 in REARM and ARMED.
func TestPathMigAttrs(t *testing.T) {
	leakcheck.Check(t)
	x := newAPMPair(t, false)
	x.sendOne(t)
	if got := x.migReq.Load(); got != 1 {
		t.Fatalf("MigReq seen %b before any alternate path, want always 1", got)
	}
	a, _ := x.qa.Query()
	if a.PathMigState != MigMigrated {
		t.Fatalf("new QP in %v", a.PathMigState)
	}
	good := QPAttr{AltAH: x.alt[0], AltPortNum: 1, AltTimeout: 14}
	for _, c := range []struct {
		name string
		mod  func(*QPAttr)
		mask AttrMask
	}{
		{"alternate port 2", func(a *QPAttr) { a.AltPortNum = 2 }, AttrAltPath},
		{"alternate port 0", func(a *QPAttr) { a.AltPortNum = 0 }, AttrAltPath},
		{"P_Key index", func(a *QPAttr) { a.AltPKeyIndex = PKeyTableLen }, AttrAltPath},
		{"negative P_Key index", func(a *QPAttr) { a.AltPKeyIndex = -1 }, AttrAltPath},
		{"timeout", func(a *QPAttr) { a.AltTimeout = 32 }, AttrAltPath},
		{"GID index", func(a *QPAttr) { a.AltAH.SGIDIndex = 9 }, AttrAltPath},
		{"no destination", func(a *QPAttr) { a.AltAH.DGID = wire.GID{} }, AttrAltPath},
		{"AV port", func(a *QPAttr) { a.AltAH.PortNum = 2 }, AttrAltPath},
		{"state ARMED", func(a *QPAttr) { a.PathMigState = MigArmed }, AttrAltPath | AttrPathMigState},
		{"state 7", func(a *QPAttr) { a.PathMigState = 7 }, AttrAltPath | AttrPathMigState},
	} {
		attr := good
		c.mod(&attr)
		if err := x.qa.Modify(&attr, c.mask); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	if err := x.qa.Modify(&QPAttr{PathMigState: MigRearm}, AttrPathMigState); !errors.Is(err, ErrInvalid) {
		t.Errorf("REARM without an alternate path: %v", err)
	}
	if a2, _ := x.qa.Query(); a2 != a {
		t.Fatalf("refused modifies changed the QP: %+v", a2)
	}
	// An alternate path on a UD QP is not in the table.
	ud, err := x.pa.CreateQP(QPInitAttr{Type: UD, SendCQ: x.ca, RecvCQ: x.ca, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer ud.Destroy()
	udUp(t, ud, 0, 1)
	if err := ud.Modify(&good, AttrAltPath); !errors.Is(err, ErrInvalid) {
		t.Errorf("alternate path on UD: %v", err)
	}

	// Loaded without a state: MIGRATED still, returned by Query.
	if err := x.qa.Modify(&good, AttrAltPath); err != nil {
		t.Fatal(err)
	}
	a, _ = x.qa.Query()
	if a.AltAH != good.AltAH || a.AltPortNum != 1 || a.AltTimeout != 14 || a.AltPKeyIndex != 0 || a.PathMigState != MigMigrated {
		t.Fatalf("Query after loading: %+v", a)
	}
	// MIGRATED with nothing armed changes nothing.
	if err := x.qa.Modify(&QPAttr{PathMigState: MigMigrated}, AttrPathMigState); err != nil {
		t.Fatal(err)
	}
	if a2, _ := x.qa.Query(); a2.AH != a.AH {
		t.Fatal("MIGRATED on a QP not armed moved it")
	}
	// REARM on one side only: the peer's packets carry MigReq 1 and do not
	// arm it.
	if err := x.qa.Modify(&QPAttr{PathMigState: MigRearm}, AttrPathMigState); err != nil {
		t.Fatal(err)
	}
	x.migReq.Store(0)
	x.sendOne(t)
	if a, _ := x.qa.Query(); a.PathMigState != MigRearm {
		t.Fatalf("%v with a peer not rearmed", a.PathMigState)
	}
	if got := x.migReq.Load(); got != 3 {
		t.Fatalf("MigReq seen %b, want both 0 (REARM side) and 1 (peer)", got)
	}
	if err := x.qa.Modify(&QPAttr{PathMigState: MigMigrated}, AttrPathMigState); !errors.Is(err, ErrInvalid) {
		t.Errorf("MIGRATED from REARM: %v", err)
	}
	// Both rearmed: the next exchange arms both.
	x.arm(t)
	x.migReq.Store(0)
	x.sendOne(t)
	if got := x.migReq.Load(); got != 2 {
		t.Fatalf("MigReq seen %b while ARMED, want always 0", got)
	}
	if err := x.load(x.qa, x.alt[0], MigRearm); !errors.Is(err, ErrInvalid) {
		t.Errorf("REARM on an ARMED QP: %v", err)
	}
	// INIT -> RTR takes an alternate path, but not a migration state;
	// RTR -> RTS takes REARM.
	qc, err := x.pa.CreateQP(QPInitAttr{Type: RC, SendCQ: x.ca, RecvCQ: x.ca, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qc.Destroy()
	if err := qc.Modify(&QPAttr{State: StateInit, PortNum: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := QPAttr{State: StateRTR, AH: x.prim[0], PathMTU: MTU1024, DestQPN: 5, MaxDestRdAtomic: 1,
		AltAH: x.alt[0], AltPortNum: 1, AltTimeout: 10, PathMigState: MigRearm}
	rtrMask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer | AttrAltPath
	if err := qc.Modify(&rtr, rtrMask|AttrPathMigState); !errors.Is(err, ErrInvalid) {
		t.Errorf("INIT -> RTR with a migration state: %v", err)
	}
	if err := qc.Modify(&rtr, rtrMask); err != nil {
		t.Fatalf("INIT -> RTR with an alternate path: %v", err)
	}
	rts := QPAttr{State: StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, PathMigState: MigRearm}
	if err := qc.Modify(&rts, AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic|AttrPathMigState); err != nil {
		t.Fatalf("RTR -> RTS with REARM: %v", err)
	}
	if a, _ := qc.Query(); a.PathMigState != MigRearm || a.AltAH != x.alt[0] || a.AltTimeout != 10 {
		t.Fatalf("after RTR -> RTS: %+v", a)
	}
	// SQD -> SQD loads an alternate path, SQD -> RTS arms it.
	if err := qc.Modify(&QPAttr{State: StateSQD}, AttrState); err != nil {
		t.Fatal(err)
	}
	if err := qc.Modify(&QPAttr{AltAH: x.alt[0], AltPortNum: 1, AltTimeout: 11}, AttrAltPath); err != nil {
		t.Fatalf("SQD -> SQD with an alternate path: %v", err)
	}
	if err := qc.Modify(&QPAttr{State: StateRTS, PathMigState: MigRearm}, AttrState|AttrPathMigState); err != nil {
		t.Fatalf("SQD -> RTS with REARM: %v", err)
	}
	if a, _ := qc.Query(); a.State != StateRTS || a.PathMigState != MigRearm || a.AltTimeout != 11 {
		t.Fatalf("after SQD -> RTS: %v %v timeout %d", a.State, a.PathMigState, a.AltTimeout)
	}
	// RESET forgets it all.
	if err := qc.Modify(&QPAttr{State: StateReset}, AttrState); err != nil {
		t.Fatal(err)
	}
	if a, _ := qc.Query(); a.PathMigState != MigMigrated || a.AltAH != (AHAttr{}) || a.AltPortNum != 0 {
		t.Fatalf("after RESET: %+v", a)
	}
	noEvent(t, x.da)
	noEvent(t, x.db)
}

// TestPathMigStream: an RC stream of SENDs and WRITEs between armed QPs
// whose primary path dies halfway (every packet on it dropped) migrates to
// the alternate path and finishes with no error completion and every byte
// in place; both sides raise EventPathMig. Then the application re-arms
// with the old primary path as the alternate (it is back), and a migration
// forced by RTS -> RTS (MIGRATED) moves the requester at once and the
// responder with its first packet, which raises EventPathMig there only.
// Over RoCE (link/loop, another address pair) and InfiniBand (ib.Cable,
// another DLID by LMC path bits).
func TestPathMigStream(t *testing.T) {
	leakcheck.Check(t)
	for _, onIB := range []bool{false, true} {
		name := "roce"
		if onIB {
			name = "ib"
		}
		t.Run(name, func(t *testing.T) {
			x := newAPMPair(t, onIB)
			x.arm(t)
			x.stream(t, 64, 16<<10, func() { x.cut.Store(true) })
			wantEvent(t, x.da, x.qa, EventPathMig)
			wantEvent(t, x.db, x.qb, EventPathMig)
			for i, qp := range []*QP{x.qa, x.qb} {
				a, _ := qp.Query()
				if a.PathMigState != MigMigrated || a.AH != x.alt[i] {
					t.Fatalf("QP %d after the failure: %v on %+v", i, a.PathMigState, a.AH)
				}
			}
			if n := x.da.Stats().PathMigrations.Load() + x.db.Stats().PathMigrations.Load(); n != 2 {
				t.Fatalf("%d migrations counted", n)
			}
			// The primary path is back: it becomes the alternate.
			x.cut.Store(false)
			x.alt, x.prim = x.prim, x.alt
			x.arm(t)
			x.stream(t, 8, 4096, nil)
			// Forced: qa moves now, qb follows on qa's first packet.
			if err := x.qa.Modify(&QPAttr{State: StateRTS, PathMigState: MigMigrated}, AttrState|AttrPathMigState); err != nil {
				t.Fatal(err)
			}
			if a, _ := x.qa.Query(); a.PathMigState != MigMigrated || a.AH != x.alt[0] {
				t.Fatalf("after forcing: %v on %+v", a.PathMigState, a.AH)
			}
			x.stream(t, 8, 4096, nil)
			wantEvent(t, x.db, x.qb, EventPathMig)
			if a, _ := x.qb.Query(); a.PathMigState != MigMigrated || a.AH != x.alt[1] {
				t.Fatalf("peer after the forced migration: %v on %+v", a.PathMigState, a.AH)
			}
			noEvent(t, x.da)
			noEvent(t, x.db)
		})
	}
}

// TestPathMigNotArmed: with an alternate path loaded but not armed (the
// peer never rearmed), a dead primary path fails the QP as without one:
// RETRY_EXC, no migration.
func TestPathMigNotArmed(t *testing.T) {
	leakcheck.Check(t)
	x := newAPMPair(t, false)
	if err := x.load(x.qa, x.alt[0], MigRearm); err != nil {
		t.Fatal(err)
	}
	x.sendOne(t)
	x.cut.Store(true)
	if err := x.qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendSignaled, Inline: []byte("lost")}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.ca, 1, 10*time.Second)[0]; wc.Status != RetryExcErr {
		t.Fatalf("completion %+v, want RETRY_EXC", wc)
	}
	noEvent(t, x.da)
	if n := x.da.Stats().PathMigrations.Load(); n != 0 {
		t.Fatalf("%d migrations", n)
	}
}

// TestPathMigErr: an armed alternate path whose P_Key index left the
// port's table (the SM shrank it) cannot be migrated to: EventPathMigErr,
// and the request fails with RETRY_EXC as without an alternate path.
func TestPathMigErr(t *testing.T) {
	leakcheck.Check(t)
	x := newAPMPair(t, true)
	for _, cp := range []*ib.CablePort{portOf(t, x.da), portOf(t, x.db)} {
		a := cp.Attr()
		a.PKeys = []uint16{0xFFFF, 0xFFFF}
		cp.SetAttr(a)
	}
	wantEvent(t, x.da, nil, EventPKeyChange)
	wantEvent(t, x.db, nil, EventPKeyChange)
	for i, qp := range []*QP{x.qa, x.qb} {
		if err := qp.Modify(&QPAttr{AltAH: x.alt[i], AltPortNum: 1, AltPKeyIndex: 1, AltTimeout: x.opts.timeout,
			PathMigState: MigRearm}, AttrAltPath|AttrPathMigState); err != nil {
			t.Fatal(err)
		}
	}
	x.sendOne(t)
	cp := portOf(t, x.da)
	a := cp.Attr()
	a.PKeys = []uint16{0xFFFF}
	cp.SetAttr(a)
	wantEvent(t, x.da, nil, EventPKeyChange)
	x.cut.Store(true)
	if err := x.qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendSignaled, Inline: []byte("lost")}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.ca, 1, 10*time.Second)[0]; wc.Status != RetryExcErr {
		t.Fatalf("completion %+v, want RETRY_EXC", wc)
	}
	wantEvent(t, x.da, x.qa, EventPathMigErr)
}

// TestPathMigUC: UC QPs arm once each has heard the other (UC has no
// acknowledgements, so both send), and a migration forced on one side is
// followed by the other on its first packet by the alternate path; the
// message arrives intact.
func TestPathMigUC(t *testing.T) {
	leakcheck.Check(t)
	x := newAPMPairType(t, false, UC)
	for i, qp := range []*QP{x.qa, x.qb} {
		if err := x.load(qp, x.alt[i], MigRearm); err != nil {
			t.Fatal(err)
		}
	}
	ma, mb := x.reg(x.pa, 4096), x.reg(x.pb, 4096)
	send := func(from *QP, fromCQ *CQ, to *QP, toCQ *CQ, m *MR, msg string) {
		t.Helper()
		if err := to.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{m.SGE(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
		if err := from.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendSignaled, Inline: []byte(msg)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, fromCQ, 1, 5*time.Second)[0]; wc.Status != Success {
			t.Fatalf("send %+v", wc)
		}
		if wc := waitWC(t, toCQ, 1, 5*time.Second)[0]; wc.Status != Success || string(m.Buf()[:wc.ByteLen]) != msg {
			t.Fatalf("receive %+v %q", wc, m.Buf()[:wc.ByteLen])
		}
	}
	send(x.qa, x.ca, x.qb, x.cb, mb, "a to b")
	if a, _ := x.qa.Query(); a.PathMigState != MigRearm {
		t.Fatalf("sender %v before hearing its peer", a.PathMigState)
	}
	send(x.qb, x.cb, x.qa, x.ca, ma, "b to a")
	for i, qp := range []*QP{x.qa, x.qb} {
		if a, _ := qp.Query(); a.PathMigState != MigArmed {
			t.Fatalf("QP %d: %v", i, a.PathMigState)
		}
	}
	if err := x.qa.Modify(&QPAttr{PathMigState: MigMigrated}, AttrPathMigState); err != nil {
		t.Fatal(err)
	}
	x.cut.Store(true) // the primary path is gone: only the alternate carries it
	send(x.qa, x.ca, x.qb, x.cb, mb, "by the alternate path")
	wantEvent(t, x.db, x.qb, EventPathMig)
	noEvent(t, x.da)
	if a, _ := x.qb.Query(); a.PathMigState != MigMigrated || a.AH != x.alt[1] {
		t.Fatalf("peer: %v on %+v", a.PathMigState, a.AH)
	}
}
