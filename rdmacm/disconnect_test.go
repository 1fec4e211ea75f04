package rdmacm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
)

// TestDisconnectBothSides: when both sides call Disconnect at once (their
// DREQs cross, as perftest -R's client and server do), each gets exactly
// one EventDisconnected, as Linux rdma_cm delivers it, then time wait's
// end.
func TestDisconnectBothSides(t *testing.T) {
	for i := range 5 {
		h := newHosts(t, loop.Faults{})
		ctx := ctxT(t)
		sch, cch := NewEventChannel(), NewEventChannel()
		lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
		if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20001)); err != nil {
			t.Fatal(err)
		}
		if err := lid.Listen(4); err != nil {
			t.Fatal(err)
		}
		cid, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
		if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20001)); err != nil {
			t.Fatal(err)
		}
		want(t, cch, EventAddrResolved)
		cid.ResolveRoute(ctx)
		want(t, cch, EventRouteResolved)
		pda, _ := cid.Device().AllocPD()
		cqa, _ := cid.Device().CreateCQ(16, nil)
		if _, err := cid.CreateQP(pda, verbs.QPInitAttr{SendCQ: cqa, RecvCQ: cqa, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
			t.Fatal(err)
		}
		if err := cid.Connect(ctx, nil); err != nil {
			t.Fatal(err)
		}
		sid := want(t, sch, EventConnectRequest).ID
		pdb, _ := sid.Device().AllocPD()
		cqb, _ := sid.Device().CreateCQ(16, nil)
		if _, err := sid.CreateQP(pdb, verbs.QPInitAttr{SendCQ: cqb, RecvCQ: cqb, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
			t.Fatal(err)
		}
		if err := sid.Accept(ctx, nil); err != nil {
			t.Fatal(err)
		}
		want(t, cch, EventEstablished)
		want(t, sch, EventEstablished)
		first, second := cid, sid
		if i%2 == 1 {
			first, second = sid, cid
		}
		if err := first.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if err := second.Disconnect(); err != nil {
			t.Fatal(err)
		}
		want(t, cch, EventDisconnected)
		want(t, sch, EventDisconnected)
		// The next event of each side is time wait's end: no second
		// EventDisconnected.
		want(t, cch, EventTimewaitExit)
		want(t, sch, EventTimewaitExit)
		for _, ch := range []*EventChannel{cch, sch} {
			c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			if ev, err := ch.Get(c); err == nil {
				t.Errorf("round %d: unexpected %v", i, ev)
			}
			cancel()
		}
		cid.Destroy()
		sid.Destroy()
		lid.Destroy()
		cqa.Destroy()
		cqb.Destroy()
		pda.Dealloc()
		pdb.Dealloc()
	}
}
