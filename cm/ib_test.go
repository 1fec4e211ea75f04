package cm

import (
	"testing"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// LIDs and port GUIDs of the InfiniBand cable's ends in these tests.
const (
	ibLIDA, ibLIDB   = 0x11, 0x22
	ibGUIDA, ibGUIDB = 0x0002_c903_00aa_0001, 0x0002_c903_00bb_0002
)

// newIBEnv connects two devices with a Manager each by an InfiniBand cable
// (ib.Cable): their ports have LIDs, and MADs without a GRH carry no GIDs.
func newIBEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t}
	ca, cb := ib.Cable(ib.CableConfig{A: ib.DefaultAttr(ibLIDA, ibGUIDA), B: ib.DefaultAttr(ibLIDB, ibGUIDB)})
	la, err := ib.New(ca)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := ib.New(cb)
	if err != nil {
		t.Fatal(err)
	}
	if e.da, err = verbs.Open(la, &verbs.Options{Name: "ia"}); err != nil {
		t.Fatal(err)
	}
	if e.db, err = verbs.Open(lb, &verbs.Options{Name: "ib"}); err != nil {
		t.Fatal(err)
	}
	if e.a, err = New(e.da, nil); err != nil {
		t.Fatal(err)
	}
	if e.b, err = New(e.db, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.a.Close()
		e.b.Close()
		e.da.Close()
		e.db.Close()
	})
	return e
}

// ibPath is the path from a to b as a PathRecord would give it.
func (e *env) ibPath(global bool) Path {
	return Path{DGID: e.db.GIDs()[0], SLID: ibLIDA, DLID: ibLIDB, SL: 3, Rate: 6, PacketLifeTime: 18,
		Global: global, HopLimit: map[bool]uint8{false: 0, true: 2}[global]}
}

// TestConnectIB runs REQ/REP/RTU and DREQ/DREP between InfiniBand ports:
// the REQ carries the path's LIDs, SL, rate and subnet local bit, and the
// passive side's path is the REQ's, seen from there.
func TestConnectIB(t *testing.T) {
	for _, global := range []bool{false, true} {
		e := newIBEnv(t)
		p := reqParams()
		p.Path = e.ibPath(global)
		ra, rb := newRecorder(), newRecorder()
		l, err := e.b.Listen(svc, acceptor(rb))
		if err != nil {
			t.Fatal(err)
		}
		ca, err := e.a.NewConn(func(c *Conn, ev *Event) {
			if ev.Type == EventREP {
				if err := c.SendRTU(nil); err != nil {
					panic(err)
				}
			}
			ra.handle(c, ev)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ca.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		req := rb.want(t, EventREQ)
		pp := req.ev.REQ.PrimaryPath
		want := mad.REQPathFields{LocalLID: ibLIDA, RemoteLID: ibLIDB, LocalGID: e.da.GIDs()[0], RemoteGID: e.db.GIDs()[0],
			PacketRate: 6, SL: 3, SubnetLocal: !global, LocalACKTimeout: 14, HopLimit: p.Path.HopLimit}
		if pp != want {
			t.Fatalf("global %v: REQ path\n%+v, want\n%+v", global, pp, want)
		}
		ra.want(t, EventREP)
		rb.want(t, EventEstablished)
		cb := req.c
		got := cb.Path()
		wantB := Path{DGID: e.da.GIDs()[0], SLID: ibLIDB, DLID: ibLIDA, SL: 3, Rate: 6, Global: global,
			HopLimit: p.Path.HopLimit}
		if got != wantB {
			t.Fatalf("passive path %+v, want %+v", got, wantB)
		}
		ah := got.AHAttr(0)
		if ah.DLID != ibLIDA || ah.SL != 3 || ah.IsGlobal != global || (global && ah.DGID != e.da.GIDs()[0]) {
			t.Fatalf("passive AH %+v", ah)
		}
		cb.SetHandler(func(c *Conn, ev *Event) {
			if ev.Type == EventDREQ {
				c.SendDREP(nil)
			}
			rb.handle(c, ev)
		})
		if err := ca.SendDREQ(nil); err != nil {
			t.Fatal(err)
		}
		rb.want(t, EventDREQ)
		ra.want(t, EventDREP)
		if ca.State() != StateTimeWait {
			t.Fatalf("state %v", ca.State())
		}
		l.Close()
	}
}

// TestRoCEPathAHAttr: a path without LIDs is a RoCE path: every field of
// its address vector from the GRH fields.
func TestRoCEPathAHAttr(t *testing.T) {
	g := wire.GIDFromAddr(addrB)
	p := Path{SGIDIndex: 1, DGID: g, FlowLabel: 7, TrafficClass: 9}
	if p.IsIB() {
		t.Fatal("RoCE path is IB")
	}
	want := verbs.AHAttr{DGID: g, SGIDIndex: 1, FlowLabel: 7, HopLimit: 64, TrafficClass: 9, PortNum: 1}
	if a := p.AHAttr(0); a != want {
		t.Fatalf("%+v, want %+v", a, want)
	}
	ib := Path{DLID: 5, SLID: 0x13, SL: 2, Rate: 3}
	if a := ib.AHAttr(2); a.DLID != 5 || a.SrcPathBits != 3 || a.SL != 2 || a.IsGlobal || a.StaticRate != 3 {
		t.Fatalf("IB %+v", a)
	}
}
