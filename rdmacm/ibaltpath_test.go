package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire/mad"
)

// lftPort returns the port switch sw's LFT sends lid to.
func (n *ibNet) lftPort(sw string, lid uint16) int {
	n.t.Helper()
	b, err := n.f.Query(n.f.NodeByName(sw), mad.SMAttrLinearFT, uint32(lid/64))
	if err != nil {
		n.t.Fatal(err)
	}
	return int(b[lid%64])
}

// TestIBAltPath: on net.2sw2path4hca with LMC 1 (two LIDs per CA port,
// which the SM routes over the two links between the switches), rdma_cm
// from Hca3 (Switch1) to Hca4 (Switch2) gets its alternate path from the
// SA: a second PathRecord by the other LIDs at both ends, carried in the
// REQ's alternate path fields and loaded by both QPs (DLID, source path
// bits), in REARM and armed after an exchange. The link the primary path
// crosses is taken down in the middle of a stream of SENDs: both QPs
// migrate (EventPathMig) and every message arrives, in order, with no
// error completion. Once the link is back and the SM has swept,
// LoadAltPath re-arms the connection with the old primary path (through
// the CM's LAP and APR, by LID), and downing the other link migrates it
// back. Without a second LID (LMC 0) SetAltPath fails with ErrInvalid.
func TestIBAltPath(t *testing.T) {
	n := newIBNetCfg(t, true, sm.Config{LMC: 1})
	s3, d3 := n.open("Hca3")
	s4, d4 := n.open("Hca4")
	ctx := ctxT(t)
	g3, g4 := GIDAddr(d3.GIDs()[0]), GIDAddr(d4.GIDs()[0])
	lid3, lid4 := lidOf(t, d3), lidOf(t, d4)

	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := s4.CreateID(sch, PortSpaceTCP, nil)
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(g4, 20001)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := s3.CreateID(cch, PortSpaceTCP, nil)
	defer cid.Destroy()
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(g4, 20001)); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventAddrResolved)
	if err := cid.SetAltPath(g3, g4); !errors.Is(err, ErrState) {
		t.Fatalf("SetAltPath before the route: %v, want ErrState", err)
	}
	if err := cid.ResolveRoute(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventRouteResolved)
	r, _ := cid.Route()
	if err := cid.SetAltPath(g3, g4); err != nil {
		t.Fatal(err)
	}
	alt := *cid.alt
	if r.SLID != lid3 || r.DLID != lid4 || alt.SLID != lid3+1 || alt.DLID != lid4+1 {
		t.Fatalf("primary %d -> %d, alternate %d -> %d; want %d -> %d and the next LIDs", r.SLID, r.DLID, alt.SLID, alt.DLID, lid3, lid4)
	}
	// The SM spread each port's two LIDs over the two inter-switch links
	// (Switch1 ports 3 and 5 to Switch2's): the primary path both ways on
	// one, the alternate on the other.
	p1, a1 := n.lftPort("Switch1", r.DLID), n.lftPort("Switch1", alt.DLID)
	p2, a2 := n.lftPort("Switch2", r.SLID), n.lftPort("Switch2", alt.SLID)
	if p1 == a1 || p2 == a2 || p1 != p2 || a1 != a2 {
		t.Fatalf("routes: Switch1 %d (primary) %d (alternate), Switch2 %d %d: not two disjoint links", p1, a1, p2, a2)
	}

	pda, _ := d3.AllocPD()
	cqa, _ := d3.CreateCQ(256, nil)
	defer cqa.Destroy()
	defer pda.Dealloc()
	capa := verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	if _, err := cid.CreateQP(pda, verbs.QPInitAttr{SendCQ: cqa, RecvCQ: cqa, Cap: capa}); err != nil {
		t.Fatal(err)
	}
	if err := cid.SetACKTimeout(12); err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(ctx, &ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	req := want(t, sch, EventConnectRequest)
	sid := req.ID
	defer sid.Destroy()
	pdb, _ := d4.AllocPD()
	cqb, _ := d4.CreateCQ(256, nil)
	defer cqb.Destroy()
	defer pdb.Dealloc()
	if _, err := sid.CreateQP(pdb, verbs.QPInitAttr{SendCQ: cqb, RecvCQ: cqb, Cap: capa}); err != nil {
		t.Fatal(err)
	}
	if err := sid.SetACKTimeout(12); err != nil {
		t.Fatal(err)
	}
	const count = 64
	mrb, _ := pdb.RegMR(make([]byte, count*64), verbs.AccessLocalWrite)
	defer mrb.Dereg()
	for i := range count {
		if err := sid.QP().PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mrb.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sid.Accept(ctx, &ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventEstablished)
	want(t, sch, EventEstablished)
	if ap, ok := sid.conn.AltPath(); !ok || ap.SLID != lid4+1 || ap.DLID != lid3+1 {
		t.Fatalf("the passive side's alternate path from the REQ: %+v %v", ap, ok)
	}
	for _, c := range []struct {
		id         *ID
		dlid, bits uint16
	}{{cid, lid4, 1}, {sid, lid3, 1}} {
		at, _ := c.id.QP().Query()
		if at.PathMigState != verbs.MigRearm || at.AltAH.DLID != c.dlid+1 || uint16(at.AltAH.SrcPathBits) != c.bits ||
			at.AH.DLID != c.dlid || at.AH.SrcPathBits != 0 {
			t.Fatalf("QP after connecting: %v, primary %+v, alternate %+v", at.PathMigState, at.AH, at.AltAH)
		}
	}

	// A stream of SENDs; the primary link goes down after the first few.
	send := func(i int) {
		t.Helper()
		msg := []byte{byte(i), 'm', 's', 'g'}
		if err := cid.QP().PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: msg}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		send(i)
		waitWC(t, cqa, verbs.WCSend)
	}
	for _, id := range []*ID{cid, sid} {
		if at, _ := id.QP().Query(); at.PathMigState != verbs.MigArmed {
			t.Fatalf("after an exchange: %v", at.PathMigState)
		}
	}
	down := time.Now()
	if err := n.f.SetLink(n.f.NodeByName("Switch1"), p1, false); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < count; i++ {
		send(i)
	}
	for range count - 4 {
		waitWC(t, cqa, verbs.WCSend)
	}
	t.Logf("link down to the last of %d SENDs acknowledged: %v", count-4, time.Since(down))
	for i := range count {
		wc := waitWC(t, cqb, verbs.WCRecv)
		if wc.WRID != uint64(i) || wc.ByteLen != 4 || mrb.Buf()[i*64] != byte(i) {
			t.Fatalf("receive %d: WR %d, %d bytes, message %d", i, wc.WRID, wc.ByteLen, mrb.Buf()[i*64])
		}
	}
	for _, id := range []*ID{cid, sid} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := id.Device().GetAsyncEvent(ctx)
		cancel()
		if err != nil || ev.Type != verbs.EventPathMig || ev.QP != id.QP() {
			t.Fatalf("event %v, %v; want path migrated", ev.Type, err)
		}
		if at, _ := id.QP().Query(); at.PathMigState != verbs.MigMigrated || at.AH.SrcPathBits != 1 {
			t.Fatalf("after the migration: %v, %+v", at.PathMigState, at.AH)
		}
	}

	// The link is repaired and the SM sweeps: LoadAltPath (LAP/APR)
	// gives both QPs the old primary path, by base LIDs, as their new
	// alternate; they arm with the next exchange and, when the link they
	// now use goes down, migrate back.
	if err := n.f.SetLink(n.f.NodeByName("Switch1"), p1, true); err != nil {
		t.Fatal(err)
	}
	if err := n.mgr.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n.lftPort("Switch1", r.DLID) != p1 || n.lftPort("Switch2", r.SLID) != p2 {
		t.Fatal("the sweep after the repair routed the base LIDs elsewhere")
	}
	if err := cid.LoadAltPath(ctx, g3, g4); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   *ID
		dlid uint16
	}{{cid, lid4}, {sid, lid3}} {
		at, _ := c.id.QP().Query()
		if at.PathMigState != verbs.MigRearm || at.AltAH.DLID != c.dlid || at.AltAH.SrcPathBits != 0 || at.AH.DLID != c.dlid+1 {
			t.Fatalf("after LoadAltPath: %v, primary %+v, alternate %+v", at.PathMigState, at.AH, at.AltAH)
		}
	}
	for i := range count {
		if err := sid.QP().PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mrb.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	send(0)
	waitWC(t, cqa, verbs.WCSend)
	if err := n.f.SetLink(n.f.NodeByName("Switch1"), a1, false); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < count; i++ {
		send(i)
	}
	for range count - 1 {
		waitWC(t, cqa, verbs.WCSend)
	}
	for i := range count {
		if wc := waitWC(t, cqb, verbs.WCRecv); wc.WRID != uint64(i) || mrb.Buf()[i*64] != byte(i) {
			t.Fatalf("after the second failure, receive %d: WR %d", i, wc.WRID)
		}
	}
	for _, id := range []*ID{cid, sid} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := id.Device().GetAsyncEvent(ctx)
		cancel()
		if err != nil || ev.Type != verbs.EventPathMig {
			t.Fatalf("second migration: event %v, %v", ev.Type, err)
		}
		if at, _ := id.QP().Query(); at.AH.SrcPathBits != 0 {
			t.Fatalf("after migrating back: %+v", at.AH)
		}
	}

	// LMC 0: one LID per port, no second path.
	n0 := newIBNet(t, true)
	s0, d0 := n0.open("Hca3")
	_, d0b := n0.open("Hca4")
	id0, _ := s0.CreateID(nil, PortSpaceTCP, nil)
	defer id0.Destroy()
	g0b := GIDAddr(d0b.GIDs()[0])
	if err := id0.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(g0b, 1)); err != nil {
		t.Fatal(err)
	}
	if err := id0.ResolveRoute(ctx); err != nil {
		t.Fatal(err)
	}
	if err := id0.SetAltPath(GIDAddr(d0.GIDs()[0]), g0b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetAltPath with LMC 0: %v, want ErrInvalid", err)
	}
}
