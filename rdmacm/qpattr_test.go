package rdmacm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
)

// selfQP creates an RC QP with verbs, not CreateQP, and moves it to INIT
// with the ID's attributes.
// smallQP gives id a QP of two send and two receive WRs on a CQ of its
// own, released when the test ends.
func smallQP(t *testing.T, id *ID) {
	t.Helper()
	pd, _ := id.Device().AllocPD()
	t.Cleanup(func() { pd.Dealloc() })
	cq, _ := id.Device().CreateCQ(8, nil)
	t.Cleanup(func() { cq.Destroy() })
	if _, err := id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2}}); err != nil {
		t.Fatal(err)
	}
}

func selfQP(t *testing.T, id *ID) (*verbs.PD, *verbs.CQ, *verbs.QP) {
	t.Helper()
	pd, _ := id.Device().AllocPD()
	t.Cleanup(func() { pd.Dealloc() })
	cq, _ := id.Device().CreateCQ(8, nil)
	t.Cleanup(func() { cq.Destroy() })
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy() })
	modifyTo(t, id, qp, verbs.StateInit)
	return pd, cq, qp
}

func modifyTo(t *testing.T, id *ID, qp *verbs.QP, s verbs.QPState) {
	t.Helper()
	a, mask, err := id.InitQPAttr(s)
	if err != nil {
		t.Fatalf("InitQPAttr(%v): %v", s, err)
	}
	if err := qp.Modify(&a, mask); err != nil {
		t.Fatalf("Modify to %v with InitQPAttr's attributes: %v", s, err)
	}
}

// TestInitQPAttr connects two QPs the application created and moves itself
// with InitQPAttr, as rping -q does: the server moves its QP to RTS from
// the REQ and accepts with its QPN; the client connects with its QPN,
// moves its QP on CONNECT_RESPONSE and establishes. Messages then go both
// ways; RTR before the REP and unknown states fail.
func TestInitQPAttr(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20005)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
	defer cid.Destroy()
	if _, _, err := cid.InitQPAttr(verbs.StateInit); !errors.Is(err, ErrState) {
		t.Errorf("InitQPAttr before the address is resolved: %v, want ErrState", err)
	}
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20005)); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventAddrResolved)
	cid.ResolveRoute(ctx)
	want(t, cch, EventRouteResolved)
	pda, cqa, qpa := selfQP(t, cid)
	if _, _, err := cid.InitQPAttr(verbs.StateRTR); !errors.Is(err, ErrState) {
		t.Errorf("InitQPAttr(RTR) before the REP: %v, want ErrState", err)
	}
	if _, _, err := cid.InitQPAttr(verbs.StateSQD); !errors.Is(err, ErrInvalid) {
		t.Errorf("InitQPAttr(SQD): %v, want ErrInvalid", err)
	}
	if err := cid.Connect(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, QPNum: qpa.QPN()}); err != nil {
		t.Fatal(err)
	}

	req := want(t, sch, EventConnectRequest)
	sid := req.ID
	defer sid.Destroy()
	pdb, cqb, qpb := selfQP(t, sid)
	modifyTo(t, sid, qpb, verbs.StateRTR)
	modifyTo(t, sid, qpb, verbs.StateRTS)
	if err := sid.Accept(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7, QPNum: qpb.QPN()}); err != nil {
		t.Fatal(err)
	}
	resp := want(t, cch, EventConnectResponse)
	if resp.Conn.QPNum != qpb.QPN() {
		t.Errorf("CONNECT_RESPONSE names QP %#x, want the server's %#x", resp.Conn.QPNum, qpb.QPN())
	}
	modifyTo(t, cid, qpa, verbs.StateRTR)
	modifyTo(t, cid, qpa, verbs.StateRTS)
	if err := cid.Establish(); err != nil {
		t.Fatal(err)
	}
	want(t, sch, EventEstablished)

	a, _ := qpa.Query()
	b, _ := qpb.Query()
	if a.DestQPN != qpb.QPN() || b.DestQPN != qpa.QPN() || a.SQPSN != b.RQPSN || b.SQPSN != a.RQPSN {
		t.Fatalf("QP attributes do not match: client %+v, server %+v", a, b)
	}
	if a.Timeout != ackTimeout || b.Timeout != ackTimeout || a.AccessFlags&verbs.AccessRemoteRead == 0 {
		t.Errorf("ACK timeouts %d/%d (want %d), client access %v", a.Timeout, b.Timeout, ackTimeout, a.AccessFlags)
	}
	c := &Conn{ID: cid, QP: qpa, PD: pda, CQ: cqa, RecvCQ: cqa}
	s := &Conn{ID: sid, QP: qpb, PD: pdb, CQ: cqb, RecvCQ: cqb}
	exchange(t, c, s, []byte("ping"))
	exchange(t, s, c, []byte("pong"))
	if err := cid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventDisconnected)
	want(t, sch, EventDisconnected)
}
