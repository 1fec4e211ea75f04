package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv("SOFTRDMA_REMOTE_CHILD"); addr != "" {
		childMain(addr)
		return
	}
	if addr := os.Getenv("SOFTRDMA_REMOTE_SA_CHILD"); addr != "" {
		saChildMain(addr) // sa_test.go
		return
	}
	leakcheck.Main(m)
}

// childMain is the test binary run as another process by TestProcess: it
// attaches Hca1's port at addr, says so on stdout, echoes every packet it
// receives back to its sender (LIDs swapped) and runs until killed.
func childMain(addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	p, err := Dial(ctx, addr, "Hca1", 1)
	cancel()
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	err = p.Start(func(pkts [][]byte) {
		for _, b := range pkts {
			swapLIDs(b)
		}
		p.Send(pkts)
	})
	if err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	time.Sleep(time.Minute) // the parent kills it long before
	os.Exit(2)
}

// swapLIDs turns an IB packet back to its sender.
func swapLIDs(b []byte) {
	l := wire.LRH(b)
	f := l.Fields()
	f.DLID, f.SLID = f.SLID, f.DLID
	f.Encode(l)
	wire.SealVCRC(b)
}

// quiet discards the log; SOFTRDMA_REMOTE_LOG=1 shows it.
var quiet = func() *slog.Logger {
	if os.Getenv("SOFTRDMA_REMOTE_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}()

// served is a fabric of net.2sw2path4hca in the test process, served on
// loopback.
type served struct {
	f    *fabric.Fabric
	srv  *Server
	addr string
}

func serve(t testing.TB, cfg Config) *served {
	t.Helper()
	b, err := os.ReadFile("../testdata/net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.ParseTopology(bytes.NewReader(b), "net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr == "" && cfg.Network != "unix" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	srv, err := NewServer(f, cfg)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		f.Close()
	})
	addr := srv.Addr().String()
	if cfg.Network == "unix" {
		addr = "unix:" + addr
	}
	return &served{f: f, srv: srv, addr: addr}
}

// client is a remote port with its received packets and notifications.
type client struct {
	p       *Port
	got     chan []byte
	notices atomic.Int64
}

func dial(t testing.TB, addr, node string, d *Dialer) *client {
	t.Helper()
	if d == nil {
		d = &Dialer{Logger: quiet}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := d.Dial(ctx, addr, node, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{p: p, got: make(chan []byte, 4096)}
	p.NotifyAttr(func() { c.notices.Add(1) })
	if err := p.Start(func(pkts [][]byte) {
		for _, b := range pkts {
			c.got <- bytes.Clone(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return c
}

func (c *client) expect(t testing.TB) []byte {
	t.Helper()
	select {
	case b := <-c.got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatalf("%v: nothing arrived (stats %+v)", c.p, c.p.Stats())
		return nil
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// ibPacket builds a whole IB packet (RC SEND Only to QP 0x11) from slid to
// dlid on SL 0 / VL 0 carrying seq and n pattern bytes.
func ibPacket(t testing.TB, slid, dlid uint16, seq uint32, n int) []byte {
	t.Helper()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: wire.PSN(seq & 0xFFFFFF)}}
	payload := make([]byte, 4+n)
	binary.BigEndian.PutUint32(payload, seq)
	for i := range n {
		payload[4+i] = byte(int(seq) + i)
	}
	b := make([]byte, wire.IBPacketLen(h.BTH.Opcode, len(payload), false))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{DLID: dlid, SLID: slid}}, &h, payload); err != nil {
		t.Fatal(err)
	}
	return b
}

func portInfo(t testing.TB, f *fabric.Fabric, node string) mad.PortInfo {
	t.Helper()
	b, err := f.Query(f.NodeByName(node), mad.SMAttrPortInfo, 1)
	if err != nil {
		t.Fatal(err)
	}
	pi, err := mad.ParsePortInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// TestTwoClientsByLID: two clients attach HCAs behind different switches
// (over TCP and over a unix socket), the test SM brings the subnet up, the
// clients see their LIDs and ACTIVE, and packets addressed by LID arrive
// byte for byte both ways; an SM's later change of an attribute reaches
// the client.
func TestTwoClientsByLID(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			cfg := Config{Network: network}
			if network == "unix" {
				cfg.Addr = filepath.Join(t.TempDir(), "fabric.sock")
			}
			s := serve(t, cfg)
			a := dial(t, s.addr, "Hca1", nil)
			// The second names its node by node GUID.
			b := dial(t, s.addr, "0x"+hexGUID(s.f.NodeByName("Hca2").GUID()), nil)
			if st := a.p.Attr().State; st != ib.StateInit {
				t.Errorf("before the SM: state %d, want INIT", st)
			}
			sm := newSM(t, s.f, "Hca3", 1)
			sn := sm.sweep()
			lidA := lidOf(t, s.f, sn, "Hca1")
			lidB := lidOf(t, s.f, sn, "Hca2")
			for _, x := range []struct {
				c   *client
				lid uint16
			}{{a, lidA}, {b, lidB}} {
				waitFor(t, "ACTIVE with its LID", func() bool {
					at := x.c.p.Attr()
					return at.State == ib.StateActive && at.LID == x.lid && at.SMLID == sm.LID
				})
				if x.c.notices.Load() == 0 {
					t.Errorf("%v: NotifyAttr's function never called", x.c.p)
				}
				if at := x.c.p.Attr(); at.PortGUID == 0 || at.MTU == 0 || len(at.PKeys) == 0 {
					t.Errorf("%v: attributes %+v", x.c.p, at)
				}
			}
			for i, size := range []int{0, 200, 1000, 4000} {
				ab := ibPacket(t, lidA, lidB, uint32(i), size)
				ba := ibPacket(t, lidB, lidA, uint32(100+i), size)
				if err := a.p.Send([][]byte{ab}); err != nil {
					t.Fatal(err)
				}
				if err := b.p.Send([][]byte{ba}); err != nil {
					t.Fatal(err)
				}
				if got := b.expect(t); !bytes.Equal(got, ab) {
					t.Errorf("size %d a->b: got %x\nwant %x", size, got, ab)
				}
				if got := a.expect(t); !bytes.Equal(got, ba) {
					t.Errorf("size %d b->a: changed on the way", size)
				}
			}
			// A batch of 100 in one Send arrives whole and in order.
			var batch [][]byte
			for i := range 100 {
				batch = append(batch, ibPacket(t, lidA, lidB, uint32(1000+i), i*10))
			}
			if err := a.p.Send(batch); err != nil {
				t.Fatal(err)
			}
			for i, want := range batch {
				if got := b.expect(t); !bytes.Equal(got, want) {
					t.Fatalf("batch packet %d changed or out of order", i)
				}
			}
			// The SM moves Hca1's SM LID: the client sees it.
			n := sn.PortByGUID(s.f.NodeByName("Hca1").PortGUID(1))
			sm.setPortInfo(n.Path, 1, func(pi *mad.PortInfo) {
				pi.MasterSMLID, pi.PortState = 0x77, mad.PortStateNoChange
			})
			waitFor(t, "the new SM LID at the client", func() bool { return a.p.Attr().SMLID == 0x77 })
			// The server counts a packet out after its write returns.
			waitFor(t, "the server's count", func() bool { return s.srv.Stats().PktsOut >= 108 })
			if st := s.srv.Stats(); st.Attached != 2 || st.PktsIn != 108 || st.PktsOut != 108 || st.BadFrames != 0 {
				t.Errorf("server stats %+v", st)
			}
		})
	}
}

func hexGUID(g uint64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := range b {
		b[15-i] = digits[g>>(4*i)&0xF]
	}
	return string(b)
}

// TestClientDies: a client whose connection breaks without a detach takes
// its port's link down, as a pulled cable: the port is DOWN in the fabric
// and the switch sends trap 128 to the SM. A new client plugs it in again
// (INIT) and the SM brings it back.
func TestClientDies(t *testing.T) {
	s := serve(t, Config{})
	a := dial(t, s.addr, "Hca1", nil)
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	waitFor(t, "Hca1 ACTIVE", func() bool { return a.p.Attr().State == ib.StateActive })

	a.p.close(false) // as the kernel closes a dead process's socket
	waitFor(t, "the server to see the death", func() bool { return s.srv.Stats().Died == 1 })
	if pi := portInfo(t, s.f, "Hca1"); pi.PortState != mad.PortStateDown || pi.PortPhysicalState == mad.PhysStateLinkUp {
		t.Errorf("Hca1 after its client died: state %d phys %d, want DOWN, not LinkUp", pi.PortState, pi.PortPhysicalState)
	}
	trap := waitTrap(t, sm)
	if nt, err := mad.ParseNotice(trap.MAD[mad.SMPDataOffset:]); err != nil || nt.TrapNumber != mad.TrapLinkStateChange {
		t.Errorf("trap: %+v %v, want 128", nt, err)
	}

	// Plugged in again by the next client: INIT until the SM sweeps.
	b := dial(t, s.addr, "Hca1", nil)
	if st := b.p.Attr().State; st != ib.StateInit {
		t.Errorf("re-attached: state %d, want INIT", st)
	}
	// The SM's answer to the trap: a heavy sweep brings the link back to
	// ACTIVE.
	sm.sweep()
	waitFor(t, "Hca1 ACTIVE again", func() bool { return b.p.Attr().State == ib.StateActive })
	if got, want := b.p.Attr().LID, lidOf(t, s.f, sn, "Hca1"); got != want {
		t.Errorf("Hca1 came back with LID %d, had %d", got, want)
	}
	// And it carries packets again: from a client on Hca2.
	c := dial(t, s.addr, "Hca2", nil)
	waitFor(t, "Hca2 ACTIVE", func() bool { return c.p.Attr().State == ib.StateActive })
	pkt := ibPacket(t, c.p.Attr().LID, b.p.Attr().LID, 9, 100)
	if err := c.p.Send([][]byte{pkt}); err != nil {
		t.Fatal(err)
	}
	if got := b.expect(t); !bytes.Equal(got, pkt) {
		t.Error("the packet to the re-attached port changed")
	}
}

// TestProcess: a remote port in another process (this test binary run
// again) exchanges packets by LID with one in this process; when that
// process is killed (SIGKILL: no detach) its port goes DOWN in the fabric
// and the SM gets trap 128.
func TestProcess(t *testing.T) {
	s := serve(t, Config{})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOFTRDMA_REMOTE_CHILD="+s.addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "attached\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	b := dial(t, s.addr, "Hca2", nil)
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA := lidOf(t, s.f, sn, "Hca1")
	lidB := lidOf(t, s.f, sn, "Hca2")
	waitFor(t, "Hca2 ACTIVE", func() bool { return b.p.Attr().State == ib.StateActive })
	for i, size := range []int{0, 500, 4000} {
		pkt := ibPacket(t, lidB, lidA, uint32(i), size)
		if err := b.p.Send([][]byte{pkt}); err != nil {
			t.Fatal(err)
		}
		got := b.expect(t)
		swapLIDs(pkt)
		if !bytes.Equal(got, pkt) {
			t.Errorf("size %d: the echo from the other process differs", size)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, "the server to see the death", func() bool { return s.srv.Stats().Died == 1 })
	if pi := portInfo(t, s.f, "Hca1"); pi.PortState != mad.PortStateDown {
		t.Errorf("Hca1 after its process died: state %d, want DOWN", pi.PortState)
	}
	trap := waitTrap(t, sm)
	if nt, err := mad.ParseNotice(trap.MAD[mad.SMPDataOffset:]); err != nil || nt.TrapNumber != mad.TrapLinkStateChange {
		t.Errorf("trap: %+v %v, want 128", nt, err)
	}
}

// TestSilentClient: a client that attaches and then sends nothing (a hung
// process, a host gone) is dead after three keep-alive intervals.
func TestSilentClient(t *testing.T) {
	s := serve(t, Config{KeepAlive: 20 * time.Millisecond})
	conn, err := net.Dial("tcp", s.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := attachReq{Node: "Hca2", Port: 1}.encode()
	if _, err := conn.Write(appendFrame(nil, frameAttach, body)); err != nil {
		t.Fatal(err)
	}
	typ, _, _, err := readFrame(conn, nil)
	if err != nil || typ != frameAttached {
		t.Fatalf("answer %d, %v", typ, err)
	}
	waitFor(t, "the silent client declared dead", func() bool { return s.srv.Stats().Died == 1 })
	if pi := portInfo(t, s.f, "Hca2"); pi.PortState != mad.PortStateDown {
		t.Errorf("Hca2: state %d, want DOWN", pi.PortState)
	}
}

// TestDetach: a client that closes its port detaches: the port stays in
// the subnet (or goes down with DownOnDetach), and can be attached again.
func TestDetach(t *testing.T) {
	for _, down := range []bool{false, true} {
		s := serve(t, Config{DownOnDetach: down})
		a := dial(t, s.addr, "Hca4", nil)
		if err := a.p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.p.Close(); !errors.Is(err, ErrClosed) || !errors.Is(err, ib.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
		if err := a.p.Send([][]byte{make([]byte, 20)}); !errors.Is(err, ErrClosed) {
			t.Errorf("Send after Close: %v", err)
		}
		waitFor(t, "the detach", func() bool { return s.srv.Stats().Detached == 1 })
		pi := portInfo(t, s.f, "Hca4")
		if up := pi.PortPhysicalState == mad.PhysStateLinkUp; up == down {
			t.Errorf("DownOnDetach %v: link up %v", down, up)
		}
		dial(t, s.addr, "Hca4", nil)
		if st := s.srv.Stats(); st.Died != 0 || st.Attached != 2 {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestRefused: the server refuses unknown nodes, switch ports, ports in
// use; the errors say which.
func TestRefused(t *testing.T) {
	s := serve(t, Config{})
	dial(t, s.addr, "Hca1", nil)
	ctx := context.Background()
	for _, c := range []struct {
		node string
		port int
		want error
	}{
		{"Hca9", 1, fabric.ErrNoNode},
		{"Switch1", 1, fabric.ErrNoPort},
		{"Hca2", 3, fabric.ErrNoPort},
		{"Hca1", 1, fabric.ErrPortInUse},
	} {
		_, err := Dial(ctx, s.addr, c.node, c.port)
		if !errors.Is(err, ErrRefused) || !errors.Is(err, c.want) {
			t.Errorf("%s port %d: %v, want %v", c.node, c.port, err, c.want)
		}
	}
	if _, err := Dial(ctx, s.addr, "", 1); !errors.Is(err, ErrBadFrame) {
		t.Errorf("empty node: %v", err)
	}
	if st := s.srv.Stats(); st.Refused != 4 {
		t.Errorf("refused %d, want 4", st.Refused)
	}
	// A dial cancelled by its context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Dial(cctx, s.addr, "Hca2", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled dial: %v", err)
	}
}

// TestServerGone: when the server goes away the client's port turns DOWN,
// its NotifyAttr function runs, and Send fails with ErrDisconnected.
func TestServerGone(t *testing.T) {
	s := serve(t, Config{})
	a := dial(t, s.addr, "Hca1", nil)
	before := a.notices.Load()
	s.srv.Close()
	waitFor(t, "the port DOWN", func() bool { return a.p.Attr().State == ib.StateDown })
	// The function is called right after the attributes change, so it may
	// not have been yet when the test sees them (CI saw that once).
	waitFor(t, "NotifyAttr's function called", func() bool { return a.notices.Load() > before })
	waitFor(t, "Send to fail", func() bool {
		return errors.Is(a.p.Send([][]byte{make([]byte, 20)}), ErrDisconnected)
	})
}

// TestBadFrames: frames a client should not send are dropped and counted;
// the session goes on.
func TestBadFrames(t *testing.T) {
	s := serve(t, Config{})
	b := dial(t, s.addr, "Hca2", nil)
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA := lidOf(t, s.f, sn, "Hca1")
	lidB := lidOf(t, s.f, sn, "Hca2")
	waitFor(t, "Hca2 ACTIVE", func() bool { return b.p.Attr().State == ib.StateActive })

	conn, err := net.Dial("tcp", s.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := attachReq{Node: "Hca1", Port: 1}.encode()
	if _, err := conn.Write(appendFrame(nil, frameAttach, body)); err != nil {
		t.Fatal(err)
	}
	if typ, _, _, err := readFrame(conn, nil); err != nil || typ != frameAttached {
		t.Fatalf("answer %d, %v", typ, err)
	}
	good := ibPacket(t, lidA, lidB, 7, 64)
	var w []byte
	w = appendFrame(w, 99, []byte("unknown type"))
	w = appendFrame(w, framePacket, []byte{1, 2, 3}) // shorter than an LRH and VCRC
	w = appendFrame(w, frameAttached, nil)           // a server's frame
	w = appendFrame(w, framePacket, good)
	if _, err := conn.Write(w); err != nil {
		t.Fatal(err)
	}
	if got := b.expect(t); !bytes.Equal(got, good) {
		t.Errorf("good packet after bad frames: changed")
	}
	if st := s.srv.Stats(); st.BadFrames != 3 {
		t.Errorf("bad frames %d, want 3", st.BadFrames)
	}
	// A length out of range ends the session (the stream cannot be
	// resynchronised): counted, and the port goes down as for a death.
	if _, err := conn.Write([]byte{0xFF, 0xFF, 0xFF, 0xFF}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session ended", func() bool { return s.srv.Stats().Died == 1 })
	if st := s.srv.Stats(); st.BadFrames != 4 {
		t.Errorf("bad frames %d, want 4", st.BadFrames)
	}
}

// TestBackpressure: a receiver that stops reading backs the traffic up
// through the fabric's credits and both connections to the sender, whose
// Send blocks; nothing is dropped, and when the receiver reads again every
// packet arrives, in order.
//
// A unix socket's buffers are fixed (a few hundred KiB); TCP's grow to
// several MiB on loopback, which would only take more packets to fill.
func TestBackpressure(t *testing.T) {
	s := serve(t, Config{Network: "unix", Addr: filepath.Join(t.TempDir(), "fabric.sock")})
	a := dial(t, s.addr, "Hca1", nil)
	pb, seqs, release := gatedReceiver(t, s.addr, "Hca2")
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA := lidOf(t, s.f, sn, "Hca1")
	lidB := lidOf(t, s.f, sn, "Hca2")
	waitFor(t, "both ACTIVE", func() bool {
		return a.p.Attr().State == ib.StateActive && pb.Attr().State == ib.StateActive
	})

	const n = 10000 // about 3 MB: more than the sockets and the lanes hold
	sendErr := make(chan error, 1)
	go func() {
		batch := make([][]byte, 0, 32)
		for i := 0; i < n; {
			batch = batch[:0]
			for ; len(batch) < cap(batch) && i < n; i++ {
				batch = append(batch, ibPacket(t, lidA, lidB, uint32(i), 256))
			}
			if err := a.p.Send(batch); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	// The sender stalls short of n.
	last, still := uint64(0), 0
	deadline := time.Now().Add(20 * time.Second)
	for still < 4 {
		time.Sleep(50 * time.Millisecond)
		sent := a.p.Stats().Sent
		switch {
		case sent >= n:
			t.Fatalf("all %d packets sent to a receiver that does not read: no backpressure", n)
		case time.Now().After(deadline):
			t.Fatalf("the sender neither stalls nor finishes (%d sent)", sent)
		case sent == last:
			still++
		default:
			last, still = sent, 0
		}
	}
	t.Logf("sender stalled after %d packets", last)
	release()
	expectInOrder(t, "receiver", seqs, n)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	st := s.f.DataStats()
	if st.Injected != n || st.Delivered != n || st.Malformed+st.NoRoute+st.Inactive+st.BadSL+st.NoHCA != 0 {
		t.Errorf("fabric: %+v", st)
	}
}

// stalledSender serves a fabric, attaches Hca1 and a gated receiver at
// Hca2 (gatedReceiver), sweeps, and starts sending numbered packets from
// Hca1 to Hca2 until a Send fails, at most 100,000 (far more than the path
// holds): the sender soon stalls on the fabric's backpressure. The sending
// goroutine's end is reported on sendErr.
func stalledSender(t *testing.T) (s *served, pa *Port, seqs <-chan uint32, release func(), sendErr <-chan error) {
	t.Helper()
	s = serve(t, Config{Network: "unix", Addr: filepath.Join(t.TempDir(), "fabric.sock")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pa, err := (&Dialer{Logger: quiet}).Dial(ctx, s.addr, "Hca1", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close() })
	pb, seqs, release := gatedReceiver(t, s.addr, "Hca2")
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA := lidOf(t, s.f, sn, "Hca1")
	lidB := lidOf(t, s.f, sn, "Hca2")
	waitFor(t, "both ACTIVE", func() bool {
		return pa.Attr().State == ib.StateActive && pb.Attr().State == ib.StateActive
	})
	errc := make(chan error, 1)
	go func() {
		for i := range 100000 {
			if err := pa.Send([][]byte{ibPacket(t, lidA, lidB, uint32(i), 1000)}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return s, pa, seqs, release, errc
}

// TestCloseSendsPending: Close of a port with packets waiting for credits
// (the receiver not reading) waits for the credits and sends them before
// the detach: once the receiver reads again, every packet Send took
// arrives, in order, and the session ends in a clean detach.
func TestCloseSendsPending(t *testing.T) {
	s, pa, seqs, release, sendErr := stalledSender(t)
	waitFor(t, "packets waiting for credits", func() bool {
		pa.qmu.Lock()
		defer pa.qmu.Unlock()
		return pa.pending()
	})
	closed := make(chan error, 1)
	go func() { closed <- pa.Close() }()
	time.Sleep(50 * time.Millisecond)
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; !errors.Is(err, ErrClosed) {
		t.Errorf("the blocked Send: %v, want ErrClosed", err)
	}
	expectInOrder(t, "receiver", seqs, int(pa.Stats().Sent))
	waitFor(t, "the server to end the session", func() bool { return s.srv.Stats().Detached == 1 })
	if st := s.srv.Stats(); st.Died != 0 || st.Overruns != 0 {
		t.Errorf("server stats %+v", st)
	}
}

// TestCloseBlockedSend: Close of a port whose Send is blocked on the
// fabric's backpressure returns, the Send fails with ErrClosed, and the
// detach reaches the server, after a keep-alive interval's wait for the
// credits of the packets still waiting (the receiver never reads: they
// are dropped; the stream itself never stops for a VL): a clean detach,
// the port stays ACTIVE, and the server's lane blocked in the fabric ends.
func TestCloseBlockedSend(t *testing.T) {
	s, pa, _, _, sendErr := stalledSender(t)
	last, still := uint64(0), 0
	for still < 4 {
		time.Sleep(50 * time.Millisecond)
		if sent := pa.Stats().Sent; sent != last {
			last, still = sent, 0
		} else {
			still++
		}
	}
	if err := pa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; !errors.Is(err, ErrClosed) {
		t.Errorf("the blocked Send: %v, want ErrClosed", err)
	}
	waitFor(t, "the server to end the session", func() bool { return s.srv.Stats().Detached == 1 })
	if st := s.srv.Stats(); st.Died != 0 || st.Overruns != 0 {
		t.Errorf("server stats %+v", st)
	}
	if pi := portInfo(t, s.f, "Hca1"); pi.PortState != mad.PortStateActive {
		t.Errorf("Hca1: state %d, want ACTIVE", pi.PortState)
	}
}

// TestClientBadFrames: a server's malformed or unexpected frames are
// dropped and counted by the client, which goes on; packets before Start
// are dropped and counted.
func TestClientBadFrames(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	good := ibPacket(t, 1, 2, 5, 50)
	step := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		if typ, _, _, err := readFrame(c, nil); err != nil || typ != frameAttach {
			served <- fmt.Errorf("attach: %d %v", typ, err)
			return
		}
		a := sampleAttr()
		w := appendFrame(nil, frameAttached, appendAttr(nil, &a))
		w = appendFrame(w, framePacket, good) // before Start
		if _, err := c.Write(w); err != nil {
			served <- err
			return
		}
		<-step
		w = appendFrame(nil, 42, nil)
		w = appendFrame(w, frameAttr, []byte{1, 2, 3})
		w = appendFrame(w, framePacket, []byte{1})
		w = appendFrame(w, frameAttach, nil)
		w = appendFrame(w, framePacket, good)
		_, err = c.Write(w)
		served <- err
		readFrame(c, nil) // the detach; then close, as the server does
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := (&Dialer{Logger: quiet}).Dial(ctx, ln.Addr().String(), "Hca1", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if a := p.Attr(); !reflect.DeepEqual(a, sampleAttr()) {
		t.Errorf("attributes %+v", a)
	}
	waitFor(t, "the packet before Start counted", func() bool { return p.Stats().NotStarted == 1 })
	got := make(chan []byte, 4)
	if err := p.Start(func(pkts [][]byte) {
		for _, b := range pkts {
			got <- bytes.Clone(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	close(step)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, good) {
			t.Error("the good packet changed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the good packet did not arrive")
	}
	if st := p.Stats(); st.BadFrames != 4 || st.Received != 1 {
		t.Errorf("stats %+v, want 4 bad frames and 1 packet", st)
	}
	if err := p.Start(func([][]byte) {}); !errors.Is(err, ib.ErrStarted) {
		t.Errorf("second Start: %v", err)
	}
}

// TestUnixSocketReuse: a second server on a live server's socket fails; a
// socket file left behind by a server that is gone is replaced.
func TestUnixSocketReuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fabric.sock")
	s := serve(t, Config{Network: "unix", Addr: path})
	if srv, err := NewServer(s.f, Config{Network: "unix", Addr: path, Logger: quiet}); err == nil {
		srv.Close()
		t.Fatal("a second server took a live server's socket")
	}
	// A stale socket: a listener whose file stays when it closes.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path + ".old", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	srv, err := NewServer(s.f, Config{Network: "unix", Addr: path + ".old", Logger: quiet})
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	srv.Close()
}

// TestSendFromRecv: Send called from the receive function does not wait,
// even when the fabric pushes back (the peer does not read): the receive
// function returns and the port's reader goes on. Sent from elsewhere, the
// same packets would wait (TestBackpressure).
func TestSendFromRecv(t *testing.T) {
	s := serve(t, Config{Network: "unix", Addr: filepath.Join(t.TempDir(), "fabric.sock")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ports [2]*Port
	for i, name := range []string{"Hca1", "Hca2"} {
		p, err := (&Dialer{Logger: quiet}).Dial(ctx, s.addr, name, 1)
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	pa, pb := ports[0], ports[1]
	gate := make(chan struct{})
	t.Cleanup(func() {
		close(gate)
		pa.Close()
		pb.Close()
	})
	if err := pa.Start(func([][]byte) { <-gate }); err != nil { // A does not read
		t.Fatal(err)
	}
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA := lidOf(t, s.f, sn, "Hca1")
	lidB := lidOf(t, s.f, sn, "Hca2")
	waitFor(t, "both ACTIVE", func() bool {
		return pa.Attr().State == ib.StateActive && pb.Attr().State == ib.StateActive
	})
	var burst [][]byte
	for i := range 1000 { // 4 MB: far more than the path to A holds
		burst = append(burst, ibPacket(t, lidB, lidA, uint32(i), 4000))
	}
	returned := make(chan error, 1)
	if err := pb.Start(func([][]byte) {
		returned <- pb.Send(burst)
	}); err != nil {
		t.Fatal(err)
	}
	// One packet to B: its receive function sends the burst to A.
	c, err := (&Dialer{Logger: quiet}).Dial(ctx, s.addr, "Hca4", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hca4 := lidOf(t, s.f, sn, "Hca4")
	waitFor(t, "Hca4 ACTIVE", func() bool { return c.Attr().State == ib.StateActive })
	if err := c.Send([][]byte{ibPacket(t, hca4, lidB, 0, 10)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Send from the receive function waited")
	}
}

// expectInOrder waits for the sequence numbers 0..n-1 on seqs, in order,
// 20 s at most for each.
func expectInOrder(t *testing.T, who string, seqs <-chan uint32, n int) {
	t.Helper()
	for i := range uint32(n) {
		select {
		case got := <-seqs:
			if got != i {
				t.Fatalf("%s: packet %d arrived as number %d", who, i, got)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: %d of %d packets arrived", who, i, n)
		}
	}
}

// gatedReceiver attaches port 1 of node to the server at addr with a
// handler that reads nothing until release is called, then sends each
// packet's sequence number (seqOf) to seqs. release may be called more
// than once; the test's cleanup calls it and closes the port.
func gatedReceiver(t *testing.T, addr, node string) (pb *Port, seqs <-chan uint32, release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	pb, err := (&Dialer{Logger: quiet}).Dial(ctx, addr, node, 1)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); pb.Close() })
	ch := make(chan uint32, 1<<16)
	if err := pb.Start(func(pkts [][]byte) {
		<-gate
		for _, p := range pkts {
			ch <- seqOf(p)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return pb, ch, release
}
