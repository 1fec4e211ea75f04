package ibsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/internal/leakcheck"
)

const netExamples = "/usr/share/doc/ibsim-utils/net-examples"

var sockSeq atomic.Uint32

// sockName returns a socket base no other test (or ibsim) uses.
func sockName() string {
	return fmt.Sprintf("softrdma-test-%d-%d", os.Getpid(), sockSeq.Add(1))
}

var idSeq atomic.Uint32

// clientID returns an id for a client's socket names, unique in the test
// binary (a real client uses its pid).
func clientID() uint32 { return uint32(os.Getpid())*16 + 1000 + idSeq.Add(1) }

// startIbsim runs Linux ibsim on netfile with the sockets' base sock, and
// skips the test when ibsim is not installed (apt-get install ibsim-utils).
func startIbsim(t *testing.T, netfile, sock string) {
	t.Helper()
	bin, err := exec.LookPath("ibsim")
	if err != nil {
		missing(t, "ibsim is not installed (Debian: apt-get install ibsim-utils); CI installs it")
	}
	if _, err := os.Stat(netfile); err != nil {
		missing(t, "no topology %s (Debian: apt-get install ibsim-utils): %v", netfile, err)
	}
	log := filepath.Join(t.TempDir(), "ibsim.log")
	errf, err := os.Create(log + ".stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	cmd := exec.Command(bin, "-s", "-n", "-f", log, netfile)
	cmd.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock)
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			e, _ := os.ReadFile(log + ".stderr")
			t.Logf("ibsim's stderr:\n%s", e)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := Dial(ctx, ClientConfig{SockName: sock, ID: clientID()})
		cancel()
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log)
			e, _ := os.ReadFile(log + ".stderr")
			t.Fatalf("ibsim did not answer: %v\n%s\n%s", err, b, e)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMain(m *testing.M) { leakcheck.Main(m) }

// startServer serves b until the test ends. A test that starts servers
// calls leakcheck.Check first.
func startServer(t *testing.T, b Backend, cfg Config) *Server {
	t.Helper()
	if (cfg.Network == "" || cfg.Network == "unix") && runtime.GOOS != "linux" {
		t.Skip("ibsim's abstract unix sockets exist on Linux only")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := NewServer(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// testWriter writes a server's log into the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkSession runs a client session against a server (Linux ibsim or
// ours) and checks what holds for both: the control answers agree with
// each other and with the node's SMA, requests get their responses with
// the slot in the transaction ID, unroutable requests come back with
// StatusTimeout, SIM_HOST and SM exclusivity work.
func checkSession(t *testing.T, cfg ClientConfig, hostNode string) {
	ctx := ctxT(t)
	dial := func(c ClientConfig) (*Client, error) {
		c.Network, c.SockName, c.Addr = cfg.Network, cfg.SockName, cfg.Addr
		if c.ID == 0 {
			c.ID = clientID()
		}
		return Dial(ctx, c)
	}
	c, err := dial(ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.NodeName() == "" {
		t.Fatal("no node name")
	}
	ni, err := c.Ctl(ctx, CtlGetNodeInfo, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Ctl(ctx, CtlGetGUID, nil)
	if err != nil {
		t.Fatal(err)
	}
	guid := be.Uint64(ni[12:])
	if host.Uint64(g) != guid || guid == 0 {
		t.Fatalf("GET_GUID %x, NodeInfo's GUID %x", g[:8], guid)
	}
	v, err := c.Ctl(ctx, CtlGetVendor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vd, _ := ParseVendor(v); vd.VendorID != be.Uint32(ni[36:])&0xffffff ||
		vd.VendorPartID != uint32(be.Uint16(ni[30:])) || vd.HWVersion != be.Uint32(ni[32:]) || vd.FWVersion != 1 {
		t.Fatalf("vendor %+v against NodeInfo %x", vd, ni[28:40])
	}
	pi, err := c.Ctl(ctx, CtlGetPortInfo, []byte{0})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Ctl(ctx, CtlGetPort, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ps, _ := ParsePortState(p); ps.LID != be.Uint16(pi[16:]) || ps.State != pi[32]&0xf || ps.State == 0 {
		t.Fatalf("GET_PORT %+v against PortInfo LID %d state %d", ps, be.Uint16(pi[16:]), pi[32]&0xf)
	}
	gid, err := c.Ctl(ctx, CtlGetGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(gid[:8]) != string(pi[8:16]) || host.Uint64(gid[8:]) != guid {
		t.Fatalf("GID %x: prefix %x, GUID %x", gid[:16], pi[8:16], guid)
	}
	pk, err := c.Ctl(ctx, CtlGetPKeys, nil)
	if err != nil {
		t.Fatal(err)
	}
	cap := int(be.Uint16(ni[28:]))
	if be.Uint16(pk) != 0xffff {
		t.Fatalf("P_Key 0 is 0x%04x", be.Uint16(pk))
	}
	for i := 2 * cap; i < CtlDataSize; i++ {
		if pk[i] != 0 {
			t.Fatalf("P_Key bytes beyond PartitionCap %d: %x", cap, pk)
		}
	}

	// A directed-route Get of NodeInfo along the empty path: the node's
	// own SMA answers.
	var r Request
	r.DLID, r.SLID, r.Length = 0xffff, 0xffff, MADSize
	r.MAD[0], r.MAD[1], r.MAD[2], r.MAD[3] = 1, classDirected, 1, 1
	r.SetTID(0x0000_1234_5678_9abc)
	be.PutUint16(r.MAD[madAttrID:], attrNodeInfo)
	be.PutUint32(r.MAD[32:], 0xffffffff) // DrSLID, DrDLID permissive
	if err := c.Send(&r); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 0 || !resp.IsResponse() || resp.MAD[4]&0x80 == 0 {
		t.Fatalf("NodeInfo response: status %d, method 0x%x, D %x", resp.Status, resp.MAD[3], resp.MAD[4])
	}
	if want := uint64(c.Slot())<<48 | 0x1234_5678_9abc; resp.TID() != want {
		t.Fatalf("response TID %016x, want %016x", resp.TID(), want)
	}
	if be.Uint64(resp.MAD[64+12:]) != guid || resp.MAD[64+2] != ni[2] {
		t.Fatalf("NodeInfo by SMP %x, by GET_NODEINFO %x", resp.MAD[64:92], ni[:28])
	}

	// A LID-routed Get to a LID nobody has: back with ETIMEDOUT.
	var l Request
	l.DLID, l.DQP, l.Length = 0x1234, 0, MADSize
	l.MAD[0], l.MAD[1], l.MAD[2], l.MAD[3] = 1, 1, 1, 1
	l.SetTID(77)
	be.PutUint16(l.MAD[madAttrID:], attrNodeInfo)
	if err := c.Send(&l); err != nil {
		t.Fatal(err)
	}
	if resp, err = c.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	if resp.Status != StatusTimeout || resp.TID()&0xffff != 77 || resp.IsResponse() {
		t.Fatalf("unroutable request came back with status %d, TID %x, method 0x%x", resp.Status, resp.TID(), resp.MAD[3])
	}

	// SIM_HOST, and one SM per node.
	sm, err := dial(ClientConfig{Node: hostNode, IsSM: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	if sm.NodeName() != hostNode || sm.Slot() == c.Slot() {
		t.Fatalf("SIM_HOST=%s attached at %q slot %d", hostNode, sm.NodeName(), sm.Slot())
	}
	if _, err := dial(ClientConfig{Node: hostNode, IsSM: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("second SM on %s: %v", hostNode, err)
	}
	if _, err := dial(ClientConfig{Node: "NoSuchNode"}); !errors.Is(err, ErrRefused) {
		t.Fatalf("unknown node: %v", err)
	}
	// SET_ISSM shows in PortInfo's capability mask.
	var on [4]byte
	host.PutUint32(on[:], 1)
	if _, err := c.Ctl(ctx, CtlSetIsSM, on[:]); err != nil {
		t.Fatal(err)
	}
	if pi, err = c.Ctl(ctx, CtlGetPortInfo, []byte{0}); err != nil {
		t.Fatal(err)
	}
	if be.Uint32(pi[20:])&2 == 0 {
		t.Fatalf("IsSM not in CapabilityMask %08x", be.Uint32(pi[20:]))
	}
	if _, err := c.Ctl(ctx, CtlSetIsSM, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if pi, _ = c.Ctl(ctx, CtlGetPortInfo, []byte{0}); be.Uint32(pi[20:])&2 != 0 {
		t.Fatalf("IsSM still in CapabilityMask %08x", be.Uint32(pi[20:]))
	}
}

// TestSessionIbsim runs the session against Linux ibsim: the codec and the
// client speak the real protocol.
func TestSessionIbsim(t *testing.T) {
	sock := sockName()
	startIbsim(t, filepath.Join(netExamples, "net"), sock)
	checkSession(t, ClientConfig{SockName: sock}, "Hca1")
}

// A switch and two CAs, in ibnetdiscover's format.
const smallTopology = `Switch	4 "Sw1"
[1]	"HcaA"[1]
[2]	"HcaB"[1]

Hca	1 "HcaA"
[1]	"Sw1"[1]

Hca	1 "HcaB"
[1]	"Sw1"[2]
`

// newFabric builds softrdma's fabric from a topology until the test ends.
func newFabric(t *testing.T, topo string) Backend {
	t.Helper()
	tp, err := fabric.ParseTopology(strings.NewReader(topo), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return FabricBackend(f)
}

// TestSessionServer runs the same session against our server over
// softrdma's fabric.
func TestSessionServer(t *testing.T) {
	leakcheck.Check(t)
	b := newFabric(t, smallTopology)
	sock := sockName()
	s := startServer(t, b, Config{SockName: sock})
	checkSession(t, ClientConfig{SockName: sock}, "HcaB")
	// The unroutable request is reported by the fabric, not refused by it.
	waitStats(t, s, func(st Stats) bool {
		return st.Connects == 2 && st.Requests == 2 && st.Delivered == 2 && st.Unclaimed == 0
	})
}

// TestSessionServerUDP runs the session over UDP (ibsim -r, clients with
// IBSIM_SERVER_NAME).
func TestSessionServerUDP(t *testing.T) {
	leakcheck.Check(t)
	b := newFabric(t, smallTopology)
	s := startUDPServer(t, b)
	checkSession(t, ClientConfig{Network: "udp", Addr: s.Addr().String()}, "HcaA")
}

// TestSessionTestBackend runs the session against the server over the
// test backend, whose SMA refuses what it cannot route at once (Send
// fails): the server returns such a MAD with StatusTimeout itself.
func TestSessionTestBackend(t *testing.T) {
	leakcheck.Check(t)
	b := newTestBackend()
	sock := sockName()
	s := startServer(t, b, Config{SockName: sock})
	checkSession(t, ClientConfig{SockName: sock}, "Hca1")
	waitStats(t, s, func(st Stats) bool {
		return st.Connects == 2 && st.Undeliverable == 1 && st.Delivered == 2 && st.Requests == 2
	})
	if b.attached() != 0 {
		t.Fatalf("%d attachments left after every client closed", b.attached())
	}
}

// startUDPServer serves b over UDP on 127.0.0.1 at a free control port
// (the next ten must be free too).
func startUDPServer(t *testing.T, b Backend) *Server {
	t.Helper()
	for try := 0; ; try++ {
		addr := "127.0.0.1:" + strconv.Itoa(20000+rand.IntN(40000))
		s, err := NewServer(b, Config{Network: "udp", Addr: addr})
		if err == nil {
			s.Close()
			return startServer(t, b, Config{Network: "udp", Addr: addr})
		}
		if try == 20 {
			t.Fatal(err)
		}
	}
}
