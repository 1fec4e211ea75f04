package ibsim

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

// trap returns an SM-class request (a Trap) for QP0, as the fabric delivers
// one to the port of an SM.
func trap(tid uint64) *Datagram {
	m := make([]byte, MADSize)
	m[0], m[1], m[2], m[3] = 1, 1, 1, 0x05
	be.PutUint64(m[madTID:], tid)
	return &Datagram{SLID: 3, DLID: 1, MAD: m}
}

// TestDispatch checks where the server hands what the fabric delivers at a
// port shared by two clients: requests for QP0/QP1 to the SM, MADs for a
// higher QP to the client serving it, responses by the slot in their TID,
// and what nobody takes is counted.
func TestDispatch(t *testing.T) {
	leakcheck.Check(t)
	b := newTestBackend()
	sock := sockName()
	s := startServer(t, b, Config{SockName: sock})
	ctx := ctxT(t)
	hca := b.nodes[1]
	diag, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID(), Node: "Hca1", QP: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer diag.Close()

	b.inject(hca, trap(1))
	if st := s.Stats(); st.Unclaimed != 1 {
		t.Fatalf("a trap with no SM: %+v", st)
	}
	sm, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID(), Node: "Hca1", IsSM: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	if b.attached() != 1 {
		t.Fatalf("two clients at one port hold %d attachments", b.attached())
	}
	b.inject(hca, trap(2))
	r, err := sm.Recv(ctx)
	if err != nil || r.TID() != 2 || r.SLID != 3 || r.DLID != 1 || r.Length != MADSize {
		t.Fatalf("SM got %+v, %v", r, err)
	}
	// A MAD for QP 7 goes to the client serving QP 7.
	d := trap(3)
	d.DQP = 7
	b.inject(hca, d)
	if r, err = diag.Recv(ctx); err != nil || r.TID() != 3 || r.DQP != 7 {
		t.Fatalf("QP 7 client got %+v, %v", r, err)
	}
	// A response goes to the slot in its TID, not to the SM.
	d = trap(uint64(diag.Slot())<<48 | 4)
	d.MAD[madMethod] = 0x81
	d.Status = StatusTimeout
	b.inject(hca, d)
	if r, err = diag.Recv(ctx); err != nil || r.TID()&0xffff != 4 || r.Status != StatusTimeout {
		t.Fatalf("response went to %+v, %v", r, err)
	}
	// A response whose slot is no client at this port goes nowhere.
	d = trap(9<<48 | 5)
	d.MAD[madMethod] = 0x81
	b.inject(hca, d)
	waitStats(t, s, func(st Stats) bool { return st.Unclaimed == 2 && st.Delivered == 3 })
}

// waitStats waits until the server's counters satisfy ok: a counter of a
// write moves just after the write, when the reader may already have it.
func waitStats(t *testing.T, s *Server, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(s.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBadDatagrams sends the server what no client sends: a short request,
// a request from a stranger, a control message with a bad magic. Each is
// dropped and counted and the session goes on.
func TestBadDatagrams(t *testing.T) {
	leakcheck.Check(t)
	b := newTestBackend()
	sock := sockName()
	s := startServer(t, b, Config{SockName: sock})
	ctx := ctxT(t)
	c, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.dconn.(net.PacketConn).WriteTo(make([]byte, RequestSize-1), c.srvData); err != nil {
		t.Fatal(err)
	}
	stranger, err := net.DialUnix("unixgram", nil, abstract(sock+":out0"))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	var r Request
	if _, err := stranger.Write(r.Append(nil)); err != nil {
		t.Fatal(err)
	}
	ctl, err := net.DialUnix("unixgram", nil, abstract(sock+":ctl"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	bad := Ctl{Magic: 0x12345678, Type: CtlGetGUID}
	if _, err := ctl.Write(bad.Append(nil)); err != nil {
		t.Fatal(err)
	}
	noSlot := Ctl{Magic: Magic, ClientID: MaxClients, Type: CtlGetGUID}
	if _, err := ctl.Write(noSlot.Append(nil)); err != nil {
		t.Fatal(err)
	}
	// The client's session still works: its control answers come in order.
	if _, err := c.Ctl(ctx, CtlGetGUID, nil); err != nil {
		t.Fatal(err)
	}
	waitStats(t, s, func(st Stats) bool { return st.BadRequests == 2 && st.CtlDropped == 2 })
	if _, err := c.Ctl(ctx, CtlType(42), nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("unknown control type: %v", err)
	}
}

// TestVanishedClient closes a client's sockets without DISCONNECT, as a
// killed OpenSM leaves them: the next MAD for it finds no socket, and the
// server frees the slot and clears the port's IsSM bit as ibsim does.
func TestVanishedClient(t *testing.T) {
	leakcheck.Check(t)
	b := newTestBackend()
	sock := sockName()
	s := startServer(t, b, Config{SockName: sock})
	ctx := ctxT(t)
	sm, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID(), Node: "Hca1", IsSM: true})
	if err != nil {
		t.Fatal(err)
	}
	var on [4]byte
	host.PutUint32(on[:], 1)
	if _, err := sm.Ctl(ctx, CtlSetIsSM, on[:]); err != nil {
		t.Fatal(err)
	}
	sm.cconn.Close()
	sm.dconn.Close()
	b.inject(b.nodes[1], trap(1))
	deadline := time.Now().Add(5 * time.Second)
	for b.attached() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("vanished client still attached; stats %+v", s.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	pi, _ := b.Query(b.nodes[1], attrPortInfo, 1)
	if be.Uint32(pi[20:])&2 != 0 {
		t.Fatal("IsSM still set")
	}
	// The slot is free for the next SM.
	sm2, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID(), Node: "Hca1", IsSM: true})
	if err != nil {
		t.Fatal(err)
	}
	sm2.Close()
}

// TestClientNotReading fills the socket of a client that never reads: the
// server's writes give up (counted) instead of blocking, and the client's
// DISCONNECT is still answered.
func TestClientNotReading(t *testing.T) {
	leakcheck.Check(t)
	b := newTestBackend()
	sock := sockName()
	const timeout = 100 * time.Millisecond
	s := startServer(t, b, Config{SockName: sock, QueueLen: 4096, WriteTimeout: timeout})
	ctx := ctxT(t)
	sm, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID(), Node: "Hca1", IsSM: true})
	if err != nil {
		t.Fatal(err)
	}
	// A unix datagram socket queues a few hundred datagrams at most.
	for i := range 2000 {
		b.inject(b.nodes[1], trap(uint64(i)))
	}
	waitStats(t, s, func(st Stats) bool { return st.WriteErrors > 0 })
	start := time.Now()
	if err := sm.Close(); err != nil {
		t.Fatalf("DISCONNECT of a client that never read: %v", err)
	}
	if d := time.Since(start); d > 2*timeout+time.Second {
		t.Fatalf("DISCONNECT took %v", d)
	}
	st := s.Stats()
	if st.Delivered+st.WriteErrors+st.QueueFull > 2000 || st.Delivered == 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("stats %+v", st)
}

// TestSlotsFull attaches MaxClients clients to softrdma's fabric: the next
// is refused, and a slot freed by DISCONNECT is taken again.
func TestSlotsFull(t *testing.T) {
	leakcheck.Check(t)
	b := newFabric(t, smallTopology)
	sock := sockName()
	startServer(t, b, Config{SockName: sock})
	ctx := ctxT(t)
	var cs []*Client
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for i := range MaxClients {
		c, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID()})
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		if c.Slot() != i {
			t.Fatalf("client %d got slot %d", i, c.Slot())
		}
		cs = append(cs, c)
	}
	if _, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID()}); !errors.Is(err, ErrRefused) {
		t.Fatalf("client %d: %v, want ErrRefused", MaxClients, err)
	}
	if err := cs[3].Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Slot() != 3 {
		t.Fatalf("freed slot 3, new client got %d", c.Slot())
	}
	cs[3] = c
}
