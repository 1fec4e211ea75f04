package udp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"github.com/softrdma/softrdma/wire"
)

// connOf returns the connection state of a's source-port socket for port
// (which must have sent).
func connOf(t *testing.T, a *Link, port uint16) *connState {
	t.Helper()
	tab := a.sports[0].Load()
	if tab == nil {
		t.Fatal("no source-port socket")
	}
	sk := tab[port-wire.SourcePortBase].Load()
	if sk == nil || sk == noSocket || sk.cs == nil {
		t.Fatalf("port %d has no connectable socket", port)
	}
	return sk.cs
}

func isConnected(c *connState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected()
}

// sendSizes sends one batch of packets of the given sizes from src to dst.
func sendSizes(t *testing.T, l *Link, seq *uint32, src, dst netip.AddrPort, sizes ...int) {
	t.Helper()
	var pkts []*link.Packet
	for _, n := range sizes {
		pkts = append(pkts, linktest.MakePacket(*seq, n, src, dst))
		*seq++
	}
	linktest.SendAll(t, l, pkts, len(pkts))
}

// checkFrame takes the next datagram from src to dst off c and checks that
// it carries packets of the given sizes (a GSO datagram, captured whole on
// loopback, carries several) whose ICRCs verify against the headers they
// have or get: segmentation numbers segment k with the datagram's
// Identification plus k. It returns the Identification.
func checkFrame(t *testing.T, c *capture, src, dst netip.AddrPort, sizes ...int) uint16 {
	t.Helper()
	f, payload := c.next(t, src, dst)
	if f.IsIPv4() && f.IPv4Frag != wire.IPv4DontFragment {
		t.Errorf("flags/offset %#x, want Don't Fragment", f.IPv4Frag)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	if len(payload) != total {
		t.Fatalf("datagram of %d bytes, want %d (%v)", len(payload), total, sizes)
	}
	for k, n := range sizes {
		fr := f
		fr.IPv4ID = f.IPv4ID + uint16(k)
		if !wire.VerifyICRC(&fr, payload[:n]) {
			t.Errorf("datagram with Identification %d: segment %d's ICRC does not verify for Identification %d", f.IPv4ID, k, fr.IPv4ID)
		}
		payload = payload[n:]
	}
	return f.IPv4ID
}

// TestConnectedWireHeaders: a source-port socket is connected on its first
// send, and every datagram it sends, alone or segmented, has an ICRC that
// verifies against the Identification the kernel really gave it; with the
// counter read back before every send, no prediction was wrong.
func TestConnectedWireHeaders(t *testing.T) {
	old := idCheckEvery
	idCheckEvery = 0
	defer func() { idCheckEvery = old }()
	a, b := pair4(t, Config{})
	c := newCapture(t, b.Port())
	sp := freeSourcePort(t, lo1)
	src, dst := netip.AddrPortFrom(lo1, sp), linktest.Endpoint(b)
	var seq uint32
	var ids []uint16
	for range 3 {
		sendSizes(t, a, &seq, src, dst, 200)
		sendSizes(t, a, &seq, src, dst, 200, 200, 200, 120)
		sendSizes(t, a, &seq, src, dst, 200, 300)
		ids = append(ids,
			checkFrame(t, c, src, dst, 200),
			checkFrame(t, c, src, dst, 200, 200, 200, 120),
			checkFrame(t, c, src, dst, 200),
			checkFrame(t, c, src, dst, 300))
	}
	if !isConnected(connOf(t, a, sp)) {
		t.Fatal("the source-port socket is not connected")
	}
	for i := 1; i < len(ids); i++ {
		// One more a datagram, and one more for the read-back before each
		// send (the third and fourth datagrams of a round are one send's).
		want := ids[i-1] + 2
		if i%4 == 3 {
			want = ids[i-1] + 1
		}
		if ids[i] != want {
			t.Errorf("Identifications %v: datagram %d has %d, want %d", ids, i, ids[i], want)
		}
	}
	if n := a.Stats().TxIDMismatch; n != 0 {
		t.Errorf("TxIDMismatch %d, want 0", n)
	}
}

// TestConnectedIPv6: an IPv6 source-port socket is connected too (it has
// no Identification to follow) and its packets, sent without an address,
// verify against the headers they have.
func TestConnectedIPv6(t *testing.T) {
	a, b := pair6(t, Config{})
	c := newCapture(t, b.Port())
	sp := freeSourcePort(t, lo6)
	src, dst := netip.AddrPortFrom(lo6, sp), linktest.Endpoint(b)
	var seq uint32
	for range 2 {
		sendSizes(t, a, &seq, src, dst, 200)
		sendSizes(t, a, &seq, src, dst, 200, 200, 120)
		checkFrame(t, c, src, dst, 200)
		checkFrame(t, c, src, dst, 200, 200, 120)
	}
	cs := connOf(t, a, sp)
	if !isConnected(cs) {
		t.Fatal("the IPv6 source-port socket is not connected")
	}
	if st := a.Stats(); st.TxErrors != 0 || st.TxIDMismatch != 0 {
		t.Errorf("TxErrors %d, TxIDMismatch %d", st.TxErrors, st.TxIDMismatch)
	}
}

// TestConnectedFallback: a socket whose counter cannot be read back sends
// unconnected (Identification 0); one whose counter is found twice where it
// was not predicted counts both and is disconnected again.
func TestConnectedFallback(t *testing.T) {
	oldID, oldGSO, oldEvery := readBackID, readBackIDGSO, idCheckEvery
	defer func() { readBackID, readBackIDGSO, idCheckEvery = oldID, oldGSO, oldEvery }()
	idCheckEvery = 0
	a, b := pair4(t, Config{})
	c := newCapture(t, b.Port())
	dst := linktest.Endpoint(b)
	var seq uint32

	readBackID = func(*socket) (uint16, error) { return 0, errNoReadBack }
	sp := freeSourcePort(t, lo1)
	src := netip.AddrPortFrom(lo1, sp)
	for range 2 {
		sendSizes(t, a, &seq, src, dst, 100)
		if id := checkFrame(t, c, src, dst, 100); id != 0 {
			t.Errorf("unreadable counter: Identification %d, want 0", id)
		}
	}
	if isConnected(connOf(t, a, sp)) {
		t.Error("a socket whose counter cannot be read is connected")
	}

	// Read-backs that find 10, 11 (the GSO datagram) and 12 at connect,
	// then values other than predicted.
	found := []uint16{10, 12, 100, 200}
	readBackID = func(*socket) (uint16, error) {
		v := found[0]
		if len(found) > 1 {
			found = found[1:]
		}
		return v, nil
	}
	readBackIDGSO = func(*socket) (uint16, error) { return 11, nil }
	sp2 := freeSourcePort(t, lo1, sp)
	src2 := netip.AddrPortFrom(lo1, sp2)
	cs := connOf2(t, a, &seq, src2, dst)
	if !isConnected(cs) {
		t.Fatal("not connected after reading 10, 11, 12")
	}
	c.next(t, src2, dst) // sealed for 13, which the kernel did not give it
	sendSizes(t, a, &seq, src2, dst, 100)
	c.next(t, src2, dst) // read back 100 where 14 was predicted: sealed for 101
	if n := a.Stats().TxIDMismatch; n != 1 {
		t.Errorf("TxIDMismatch %d after one wrong prediction, want 1", n)
	}
	sendSizes(t, a, &seq, src2, dst, 100) // 200 where 102: disconnected
	if id := checkFrame(t, c, src2, dst, 100); id != 0 {
		t.Errorf("after two wrong predictions: Identification %d, want 0", id)
	}
	if n := a.Stats().TxIDMismatch; n != 2 {
		t.Errorf("TxIDMismatch %d, want 2", n)
	}
	if isConnected(cs) {
		t.Error("still connected after two wrong predictions")
	}
}

// connOf2 sends a first packet from src to dst and returns the state of
// its socket.
func connOf2(t *testing.T, a *Link, seq *uint32, src, dst netip.AddrPort) *connState {
	t.Helper()
	sendSizes(t, a, seq, src, dst, 100)
	return connOf(t, a, src.Port())
}

// TestConnectedRefused: a connected socket reports the ICMP port
// unreachable its last datagram drew on its next send, refusing it; the
// link sends that datagram again, so nothing is lost or reported, and the
// socket stays connected.
func TestConnectedRefused(t *testing.T) {
	a := open(t, Config{Addrs: []netip.Addr{lo1}})
	closed, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo2, 0)))
	if err != nil {
		t.Fatal(err)
	}
	dst := closed.LocalAddr().(*net.UDPAddr).AddrPort()
	closed.Close()
	sp := freeSourcePort(t, lo1)
	src := netip.AddrPortFrom(lo1, sp)
	var seq uint32
	for range 4 {
		sendSizes(t, a, &seq, src, dst, 100)
		time.Sleep(time.Millisecond) // the ICMP error comes back
	}
	if !isConnected(connOf(t, a, sp)) {
		t.Fatal("not connected")
	}
	st := a.Stats()
	if st.TxErrors != 0 || st.TxPackets != 4 {
		t.Errorf("TxErrors %d, TxPackets %d; want 0 and 4", st.TxErrors, st.TxPackets)
	}
	// Without the resend the ICMP report is an error: the test sees it.
	if st.TxCalls < 7 {
		t.Errorf("%d send calls for 4 packets to a closed port: no ICMP report was resent", st.TxCalls)
	}
}

// TestConnectedSendAllocs: sending from a connected socket allocates
// nothing once it is connected.
func TestConnectedSendAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	a, b := pair4(t, Config{})
	sp := freeSourcePort(t, lo1)
	src, dst := netip.AddrPortFrom(lo1, sp), linktest.Endpoint(b)
	pkts := linktest.MakePackets(0, 4, 200, src, dst)
	defer func() {
		for _, p := range pkts {
			link.Put(p)
		}
	}()
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	if !isConnected(connOf(t, a, sp)) {
		t.Fatal("not connected")
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := a.Send(pkts); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a send", n)
	}
}
