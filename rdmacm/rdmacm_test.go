package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire/mad"
)

var (
	ipA = netip.MustParseAddr("10.0.0.1")
	ipB = netip.MustParseAddr("10.0.0.2")
)

// hosts are two CMs, each over one device, on an in-process network.
type hosts struct {
	net  *loop.Network
	a, b *CM
}

func newHosts(t testing.TB, f loop.Faults) *hosts {
	t.Helper()
	return newHostsOpts(t, f, cm.Options{})
}

func newHostsOpts(t testing.TB, f loop.Faults, co cm.Options) *hosts {
	t.Helper()
	h := &hosts{net: loop.NewNetwork(loop.Config{Faults: f, Seed: 7})}
	la, err := h.net.Attach([]netip.Addr{ipA}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := h.net.Attach([]netip.Addr{ipB}, 4791)
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
	o := &Options{CM: co}
	if h.a, err = New([]*verbs.Device{da}, o); err != nil {
		t.Fatal(err)
	}
	if h.b, err = New([]*verbs.Device{db}, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.a.Close()
		h.b.Close()
		da.Close()
		db.Close()
		h.net.Close()
	})
	return h
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func want(t testing.TB, ch *EventChannel, typ EventType) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := ch.Get(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", typ, err)
	}
	if ev.Type != typ {
		t.Fatalf("event %v status %d, want %v", ev.Type, ev.Status, typ)
	}
	return ev
}

// exchange sends one message over conn a's QP to conn b's and checks it.
func exchange(t testing.TB, a, b *Conn, msg []byte) {
	t.Helper()
	buf := make([]byte, 4096)
	mrb, err := b.PD.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mrb.Dereg()
	if err := b.QP.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mrb.SGE(0, len(buf))}}}); err != nil {
		t.Fatal(err)
	}
	src := append([]byte(nil), msg...)
	mra, err := a.PD.RegMR(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mra.Dereg()
	if err := a.QP.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{mra.SGE(0, len(src))}}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.CQ, verbs.WCSend)
	wc := waitWC(t, b.RecvCQ, verbs.WCRecv)
	if !bytes.Equal(buf[:wc.ByteLen], msg) {
		t.Fatalf("received %q", buf[:wc.ByteLen])
	}
}

func waitWC(t testing.TB, cq *verbs.CQ, op verbs.WCOpcode) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cq.Poll(wc[:]) == 1 {
			if wc[0].Status != verbs.Success || wc[0].Opcode != op {
				t.Fatalf("completion %v %v, want %v", wc[0].Opcode, wc[0].Status, op)
			}
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatalf("no %v completion", op)
	return verbs.WC{}
}

func TestDialListen(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	l, err := Listen(ctx, netip.AddrPortFrom(netip.IPv4Unspecified(), 7471),
		&ConnOptions{CM: h.b, Param: ConnParam{PrivateData: []byte("server")}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Dial(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.a, Param: ConnParam{PrivateData: []byte("client")}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(c.Peer.PrivateData, []byte("server")) || !bytes.HasPrefix(s.Peer.PrivateData, []byte("client")) {
		t.Fatalf("private data %q / %q", c.Peer.PrivateData[:6], s.Peer.PrivateData[:6])
	}
	if c.QP.State() != verbs.StateRTS || s.QP.State() != verbs.StateRTS {
		t.Fatalf("QP states %v %v", c.QP.State(), s.QP.State())
	}
	exchange(t, c, s, []byte("ping"))
	exchange(t, s, c, []byte("pong"))
	if s.ID.PeerAddr().Addr() != ipA || c.ID.LocalAddr().Port() != s.ID.PeerAddr().Port() {
		t.Fatalf("addresses: client %v, server sees %v", c.ID.LocalAddr(), s.ID.PeerAddr())
	}
	c.Close()
	select {
	case <-s.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("server did not see the disconnect")
	}
	s.Close()
}

func TestEventsAsync(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20000)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := h.a.CreateID(cch, PortSpaceTCP, "ctx")
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20000)); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventAddrResolved)
	if cid.LocalAddr().Addr() != ipA || cid.LocalAddr().Port() == 0 {
		t.Fatalf("local address %v", cid.LocalAddr())
	}
	cid.ResolveRoute(ctx)
	want(t, cch, EventRouteResolved)
	pda, _ := cid.Device().AllocPD()
	cqa, _ := cid.Device().CreateCQ(16, nil)
	if _, err := cid.CreateQP(pda, verbs.QPInitAttr{SendCQ: cqa, RecvCQ: cqa, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(ctx, &ConnParam{PrivateData: []byte("hi"), ResponderResources: 4, InitiatorDepth: 2, RetryCount: 5, RNRRetryCount: 6}); err != nil {
		t.Fatal(err)
	}
	req := want(t, sch, EventConnectRequest)
	if req.ListenID != lid || !bytes.HasPrefix(req.Conn.PrivateData, []byte("hi")) {
		t.Fatalf("connect request %+v", req)
	}
	// The passive side sees the active side's parameters from its own view.
	if req.Conn.ResponderResources != 2 || req.Conn.InitiatorDepth != 4 || req.Conn.RetryCount != 5 || req.Conn.RNRRetryCount != 6 {
		t.Fatalf("conn params %+v", req.Conn)
	}
	sid := req.ID
	pdb, _ := sid.Device().AllocPD()
	cqb, _ := sid.Device().CreateCQ(16, nil)
	if _, err := sid.CreateQP(pdb, verbs.QPInitAttr{SendCQ: cqb, RecvCQ: cqb, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := sid.Accept(ctx, &ConnParam{PrivateData: []byte("ok"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	est := want(t, cch, EventEstablished)
	if !bytes.HasPrefix(est.Conn.PrivateData, []byte("ok")) || est.ID != cid || est.ID.Context != "ctx" {
		t.Fatalf("established %+v", est)
	}
	want(t, sch, EventEstablished)
	qa, _ := cid.QP().Query()
	qb, _ := sid.QP().Query()
	if qa.DestQPN != sid.QP().QPN() || qb.DestQPN != cid.QP().QPN() || qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN {
		t.Fatalf("QP attributes do not match: %+v / %+v", qa, qb)
	}
	if qa.MaxRdAtomic != 1 || qb.MaxDestRdAtomic != 1 || qa.RetryCnt != 5 {
		t.Fatalf("rd atomic %d/%d retry %d", qa.MaxRdAtomic, qb.MaxDestRdAtomic, qa.RetryCnt)
	}
	if err := sid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventDisconnected)
	want(t, sch, EventDisconnected)
	if cid.QP().State() != verbs.StateErr {
		t.Fatalf("client QP %v after disconnect", cid.QP().State())
	}
	cid.Disconnect() // no-op now
	want(t, cch, EventTimewaitExit)
	want(t, sch, EventTimewaitExit)
	cid.Destroy()
	sid.Destroy()
	lid.Destroy()
	cqa.Destroy()
	cqb.Destroy()
	pda.Dealloc()
	pdb.Dealloc()
}

func TestRejectAndNoListener(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	// Nobody listens.
	cid, _ := h.a.CreateID(nil, PortSpaceTCP, nil)
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 1)); err != nil {
		t.Fatal(err)
	}
	if err := cid.ResolveRoute(ctx); err != nil {
		t.Fatal(err)
	}
	err := cid.Connect(ctx, nil)
	var ee *ErrEvent
	if !errors.Is(err, ErrRejected) || !errors.As(err, &ee) || ee.Event.Status != int(mad.RejectInvalidServiceID) {
		t.Fatalf("connect to nobody: %v", err)
	}
	cid.Destroy()

	// The listener rejects with private data.
	lid, _ := h.b.CreateID(nil, PortSpaceTCP, nil)
	lid.BindAddr(netip.AddrPortFrom(ipB, 2))
	lid.Listen(1)
	go func() {
		r, err := lid.GetRequest(ctx)
		if err == nil {
			r.Reject([]byte("go away"))
			r.Destroy()
		}
	}()
	cid, _ = h.a.CreateID(nil, PortSpaceTCP, nil)
	cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 2))
	cid.ResolveRoute(ctx)
	err = cid.Connect(ctx, nil)
	if !errors.As(err, &ee) || ee.Event.Status != int(mad.RejectConsumer) ||
		!bytes.HasPrefix(ee.Event.Conn.PrivateData, []byte("go away")) {
		t.Fatalf("rejected connect: %v", err)
	}
	cid.Destroy()
	lid.Destroy()
}

// TestUnreachable runs in a synctest bubble: the CM's retries are real
// timers on the bubble's fake time.
func TestUnreachable(t *testing.T) {
	synctest.Test(t, testUnreachable)
}

func testUnreachable(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	ch := NewEventChannel()
	cid, _ := h.a.CreateID(ch, PortSpaceTCP, nil)
	cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.9"), 5))
	want(t, ch, EventAddrResolved)
	cid.ResolveRoute(ctx)
	want(t, ch, EventRouteResolved)
	if err := cid.Connect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= cm.DefaultMaxRetries; i++ {
		time.Sleep(5 * time.Second)
	}
	if ev := want(t, ch, EventUnreachable); ev.Status != StatusTimedOut {
		t.Fatalf("status %d", ev.Status)
	}
	cid.Destroy()
}

func TestDialContext(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.9"), 5), &ConnOptions{CM: h.a})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial a dead peer: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatal("dial did not honour the deadline")
	}
	if _, err := Dial(context.Background(), netip.AddrPortFrom(ipB, 5), nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("dial without CM: %v", err)
	}
}

func TestSyncMode(t *testing.T) {
	// A lossy network: a short CM response timeout (67 ms) keeps the
	// retransmissions quick.
	h := newHostsOpts(t, loop.Faults{Loss: 0.2, Duplicate: 0.2}, cm.Options{ResponseTimeout: 14})
	ctx := ctxT(t)
	lid, _ := h.b.CreateID(nil, PortSpaceTCP, nil)
	lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 9))
	if err := lid.Listen(1); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		r, err := lid.GetRequest(ctx)
		if err != nil {
			accepted <- err
			return
		}
		pd, _ := r.Device().AllocPD()
		cq, _ := r.Device().CreateCQ(8, nil)
		r.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2}})
		accepted <- r.Accept(ctx, nil)
	}()
	cid, _ := h.a.CreateID(nil, PortSpaceTCP, nil)
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 9)); err != nil {
		t.Fatal(err)
	}
	if err := cid.ResolveRoute(ctx); err != nil {
		t.Fatal(err)
	}
	pd, _ := cid.Device().AllocPD()
	cq, _ := cid.Device().CreateCQ(8, nil)
	cid.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2}})
	if err := cid.Connect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if cid.QP().State() != verbs.StateRTS {
		t.Fatal("client QP not in RTS")
	}
}

func TestUD(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := h.b.CreateID(sch, PortSpaceUDP, nil)
	lid.BindAddr(netip.AddrPortFrom(ipB, 7174))
	lid.Listen(1)
	cid, _ := h.a.CreateID(cch, PortSpaceUDP, nil)
	cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 7174))
	want(t, cch, EventAddrResolved)
	cid.ResolveRoute(ctx)
	want(t, cch, EventRouteResolved)
	pda, _ := cid.Device().AllocPD()
	cqa, _ := cid.Device().CreateCQ(8, nil)
	qa, err := cid.CreateQP(pda, verbs.QPInitAttr{SendCQ: cqa, RecvCQ: cqa, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2}})
	if err != nil || qa.Type() != verbs.UD || qa.State() != verbs.StateRTS {
		t.Fatalf("UD QP: %v", err)
	}
	cid.Connect(ctx, &ConnParam{PrivateData: []byte("ud?")})
	req := want(t, sch, EventConnectRequest)
	if !bytes.HasPrefix(req.UD.PrivateData, []byte("ud?")) {
		t.Fatalf("UD private data %q", req.UD.PrivateData)
	}
	pdb, _ := req.ID.Device().AllocPD()
	cqb, _ := req.ID.Device().CreateCQ(8, nil)
	qb, _ := req.ID.CreateQP(pdb, verbs.QPInitAttr{SendCQ: cqb, RecvCQ: cqb, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2}})
	if err := req.ID.Accept(ctx, nil); err != nil {
		t.Fatal(err)
	}
	est := want(t, cch, EventEstablished)
	if est.UD.QPNum != qb.QPN() || est.UD.QKey != mad.RDMAUDPQKey {
		t.Fatalf("UD param %+v", est.UD)
	}
	// Send a datagram with what the event gave.
	ah, err := pda.CreateAH(est.UD.AH)
	if err != nil {
		t.Fatal(err)
	}
	rbuf := make([]byte, 128)
	mrb, _ := pdb.RegMR(rbuf, verbs.AccessLocalWrite)
	qb.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mrb.SGE(0, 128)}}})
	sbuf := []byte("datagram")
	mra, _ := pda.RegMR(sbuf, 0)
	if err := qa.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mra.SGE(0, len(sbuf))},
		AH: ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, cqb, verbs.WCRecv)
	if string(rbuf[40:wc.ByteLen]) != "datagram" {
		t.Fatalf("received %q", rbuf[40:wc.ByteLen])
	}
	ah.Destroy()
	mra.Dereg()
	mrb.Dereg()
	cid.Destroy()
	req.ID.Destroy()
	lid.Destroy()
}

// Many connections over a network that loses and duplicates packets: every
// one is established, carries data and is torn down.
func TestLossyConnections(t *testing.T) {
	h := newHostsOpts(t, loop.Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1}, cm.Options{ResponseTimeout: 14})
	ctx := ctxT(t)
	l, err := Listen(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.b})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 20; i++ {
		c, err := Dial(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.a})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
		exchange(t, c, s, []byte("lossy"))
		c.Close()
		select {
		case <-s.Disconnected():
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d: server did not see the disconnect", i)
		}
		s.Close()
	}
	st := h.a.managers()[0].Stats()
	t.Logf("client CM: %d sent, %d retransmitted, %d duplicates", st.Sent.Load(), st.Retransmits.Load(), st.Duplicates.Load())
	if st.Retransmits.Load() == 0 {
		t.Fatal("a lossy network caused no retransmission")
	}
}

func TestBacklog(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	sch := NewEventChannel()
	lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
	lid.BindAddr(netip.AddrPortFrom(ipB, 3000))
	if err := lid.Listen(1); err != nil {
		t.Fatal(err)
	}
	connect := func() *EventChannel {
		ch := NewEventChannel()
		id, _ := h.a.CreateID(ch, PortSpaceTCP, nil)
		id.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 3000))
		want(t, ch, EventAddrResolved)
		id.ResolveRoute(ctx)
		want(t, ch, EventRouteResolved)
		if err := id.Connect(ctx, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { id.Destroy() })
		return ch
	}
	connect()
	req := want(t, sch, EventConnectRequest)
	// The backlog of one is full until the first request is answered.
	second := connect()
	if ev := want(t, second, EventRejected); ev.Status != int(mad.RejectConsumer) {
		t.Fatalf("status %d", ev.Status)
	}
	req.ID.Reject(nil)
	third := connect()
	want(t, sch, EventConnectRequest)
	_ = third
	lid.Destroy()
}

// TestListenerCloseKeepsConns: closing a Listener stops new connections but
// leaves accepted ones working; they still see the peer's disconnect, and
// the listener's event loop ends with the last of them.
func TestListenerCloseKeepsConns(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	l, err := Listen(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.b})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, netip.AddrPortFrom(ipB, 7471), &ConnOptions{CM: h.a})
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v, want ErrClosed", err)
	}
	select {
	case <-l.done:
		t.Fatal("the listener's event loop ended while an accepted connection is open")
	default:
	}
	exchange(t, c, s, []byte("still here"))
	c.Close()
	select {
	case <-s.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("an accepted connection did not see the disconnect after Listener.Close")
	}
	s.Close()
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the listener's event loop did not end with its last connection")
	}
}
