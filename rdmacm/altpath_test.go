package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
)

var (
	ipA2 = netip.MustParseAddr("10.0.1.1")
	ipB2 = netip.MustParseAddr("10.0.1.2")
)

// cuts says which paths between the hosts are down: [0] drops every
// packet to ipA or ipB, [1] every packet to ipA2 or ipB2.
type cuts [2]atomic.Bool

// altHosts are two CMs over devices with two addresses each: the primary
// path between ipA and ipB, the alternate between ipA2 and ipB2.
func altHosts(t *testing.T, cut *cuts) (*CM, *CM) {
	t.Helper()
	n := loop.NewNetwork(loop.Config{Faults: link.Faults{Filter: func(p *link.Packet) bool {
		a := p.Dst.Addr()
		return cut[0].Load() && (a == ipA || a == ipB) || cut[1].Load() && (a == ipA2 || a == ipB2)
	}}})
	la, err := n.Attach([]netip.Addr{ipA, ipA2}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach([]netip.Addr{ipB, ipB2}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	da, err := verbs.Open(la, &verbs.Options{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := verbs.Open(lb, &verbs.Options{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New([]*verbs.Device{da}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New([]*verbs.Device{db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
		da.Close()
		db.Close()
		n.Close()
	})
	return a, b
}

// altConnect connects from a with an alternate path from ipA2 to dst2 and
// returns the active side's first event after Connect.
func altConnect(t *testing.T, a, b *CM, dst2 netip.Addr, port uint16) *Event {
	t.Helper()
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := b.CreateID(sch, PortSpaceTCP, nil)
	t.Cleanup(func() { lid.Destroy() })
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, port)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := a.CreateID(cch, PortSpaceTCP, nil)
	t.Cleanup(func() { cid.Destroy() })
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, port)); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventAddrResolved)
	cid.ResolveRoute(ctx)
	want(t, cch, EventRouteResolved)
	if err := cid.SetAltPath(ipA2, dst2); err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(ctx, &ConnParam{}); err != nil {
		t.Fatal(err)
	}
	ev, err := cch.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestAltPathCM: the active side's alternate path travels in the REQ; both
// QPs load it on their way to RTS in REARM, arm with the first exchange,
// and when the primary path dies, migrate (EventPathMig on both devices)
// and the message gets through.
func TestAltPathCM(t *testing.T) {
	var cut cuts
	a, b := altHosts(t, &cut)
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := b.CreateID(sch, PortSpaceTCP, nil)
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20001)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := a.CreateID(cch, PortSpaceTCP, nil)
	defer cid.Destroy()
	if err := cid.SetAltPath(ipA2, ipB2); !errors.Is(err, ErrState) {
		t.Fatalf("SetAltPath before resolving: %v", err)
	}
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20001)); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventAddrResolved)
	cid.ResolveRoute(ctx)
	want(t, cch, EventRouteResolved)
	if err := cid.SetAltPath(ipB2, ipB2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetAltPath from another host's address: %v", err)
	}
	if err := cid.SetAltPath(ipA2, ipB2); err != nil {
		t.Fatal(err)
	}
	if err := cid.LoadAltPath(ctx, ipA2, ipB2); !errors.Is(err, ErrState) {
		t.Fatalf("LoadAltPath before connecting: %v", err)
	}
	if err := cid.SetACKTimeout(12); err != nil {
		t.Fatal(err)
	}
	pda, _ := cid.Device().AllocPD()
	cqa, _ := cid.Device().CreateCQ(64, nil)
	defer cqa.Destroy()
	defer pda.Dealloc()
	if _, err := cid.CreateQP(pda, verbs.QPInitAttr{SendCQ: cqa, RecvCQ: cqa, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(ctx, &ConnParam{RetryCount: 2, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	sid := want(t, sch, EventConnectRequest).ID
	defer sid.Destroy()
	if err := sid.SetACKTimeout(12); err != nil {
		t.Fatal(err)
	}
	pdb, _ := sid.Device().AllocPD()
	cqb, _ := sid.Device().CreateCQ(64, nil)
	defer cqb.Destroy()
	defer pdb.Dealloc()
	if _, err := sid.CreateQP(pdb, verbs.QPInitAttr{SendCQ: cqb, RecvCQ: cqb, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	if err := sid.Accept(ctx, &ConnParam{RNRRetryCount: 7, RetryCount: 2}); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventEstablished)
	want(t, sch, EventEstablished)
	for _, c := range []struct {
		id   *ID
		alt  netip.Addr
		from netip.Addr
	}{{cid, ipB2, ipA2}, {sid, ipA2, ipB2}} {
		at, _ := c.id.QP().Query()
		src, _ := c.id.Device().QueryGID(1, at.AltAH.SGIDIndex)
		if at.PathMigState != verbs.MigRearm || at.AltAH.DGID.Addr() != c.alt || src.Addr() != c.from || at.AltTimeout != 12 {
			t.Fatalf("QP after connecting: %v, alternate %v -> %v, timeout %d", at.PathMigState, src, at.AltAH.DGID, at.AltTimeout)
		}
	}
	// The attributes for a QP of the application's own carry it too.
	for _, id := range []*ID{cid, sid} {
		a, mask, err := id.InitQPAttr(verbs.StateRTS)
		if err != nil || mask&(verbs.AttrAltPath|verbs.AttrPathMigState) != verbs.AttrAltPath|verbs.AttrPathMigState ||
			a.PathMigState != verbs.MigRearm || a.AltAH.DGID.Addr() != map[*ID]netip.Addr{cid: ipB2, sid: ipA2}[id] {
			t.Fatalf("InitQPAttr(RTS): %v %v %+v", err, mask, a.AltAH)
		}
	}
	send := func(id uint64) {
		t.Helper()
		if err := cid.QP().PostSend([]verbs.SendWR{{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: []byte("over the alternate path")}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, cqa, verbs.WCSend)
		waitWC(t, cqb, verbs.WCRecv)
	}
	mr, _ := pdb.RegMR(make([]byte, 256), verbs.AccessLocalWrite)
	defer mr.Dereg()
	for i := range 2 {
		if err := sid.QP().PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(0, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
	send(1)
	for _, id := range []*ID{cid, sid} {
		if at, _ := id.QP().Query(); at.PathMigState != verbs.MigArmed {
			t.Fatalf("after an exchange: %v", at.PathMigState)
		}
	}
	cut[0].Store(true)
	send(2)
	wantMig := func() {
		t.Helper()
		for _, id := range []*ID{cid, sid} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ev, err := id.Device().GetAsyncEvent(ctx)
			cancel()
			if err != nil || ev.Type != verbs.EventPathMig || ev.QP != id.QP() {
				t.Fatalf("event %v, %v; want path migrated", ev.Type, err)
			}
		}
	}
	wantMig()

	// The primary path is repaired: LAP/APR load it as the alternate on
	// both QPs, the next exchange arms them, and when the path they now
	// use fails they migrate back.
	cut[0].Store(false)
	if err := sid.LoadAltPath(ctx, ipA2, ipA); !errors.Is(err, ErrInvalid) {
		t.Fatalf("LoadAltPath from another host's address: %v", err)
	}
	if err := sid.LoadAltPath(ctx, ipB, ipA); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id  *ID
		alt netip.Addr
	}{{cid, ipB}, {sid, ipA}} {
		at, _ := c.id.QP().Query()
		if at.PathMigState != verbs.MigRearm || at.AltAH.DGID.Addr() != c.alt {
			t.Fatalf("after LoadAltPath: %v, alternate %v", at.PathMigState, at.AltAH.DGID)
		}
	}
	for i := range 2 {
		if err := sid.QP().PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(0, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
	send(3)
	cut[1].Store(true)
	send(4)
	wantMig()
	if at, _ := cid.QP().Query(); at.AH.DGID.Addr() != ipB {
		t.Fatalf("back on %v", at.AH.DGID)
	}
}

// TestAltPathCMRejected: a REQ whose alternate path names a GID the passive
// port does not have is rejected (invalid alternate GID, 18).
func TestAltPathCMRejected(t *testing.T) {
	var cut cuts
	a, b := altHosts(t, &cut)
	if ev := altConnect(t, a, b, netip.MustParseAddr("10.0.9.9"), 20002); ev.Type != EventRejected || ev.Status != 18 {
		t.Fatalf("event %v status %d, want rejected, 18", ev.Type, ev.Status)
	}
}
