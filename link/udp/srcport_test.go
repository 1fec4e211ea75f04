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

// freeSourcePort returns a port in the RoCEv2 source range that nothing
// has bound on a, at the time of the call.
func freeSourcePort(t *testing.T, a netip.Addr, not ...uint16) uint16 {
	t.Helper()
	for p := uint16(0xF7A1); p < 0xFFFF; p += 7 {
		taken := false
		for _, n := range not {
			taken = taken || n == p
		}
		if taken {
			continue
		}
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, p)))
		if err == nil {
			c.Close()
			return p
		}
	}
	t.Skip("no free port in the source range")
	return 0
}

// recvFrom reads one datagram from c and returns its source and bytes.
func recvFrom(t *testing.T, c *net.UDPConn) (netip.AddrPort, []byte) {
	t.Helper()
	buf := make([]byte, link.BufSize)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), buf[:n]
}

// sendFrom sends one packet from l, asking for source port sport, to r, and
// returns the port it arrived from. The packet's ICRC must be right for that
// port.
func sendFrom(t *testing.T, l *Link, src netip.Addr, sport uint16, r *net.UDPConn) uint16 {
	t.Helper()
	dst := r.LocalAddr().(*net.UDPAddr).AddrPort()
	p := linktest.MakePacket(1, 100, netip.AddrPortFrom(src, sport), dst)
	if err := l.Send([]*link.Packet{p}); err != nil {
		t.Fatal(err)
	}
	link.Put(p)
	from, data := recvFrom(t, r)
	fr := wire.Framing{Src: from.Addr(), Dst: dst.Addr().Unmap(), SrcPort: from.Port(), DstPort: dst.Port(),
		IPv4Frag: wire.IPv4DontFragment}
	// A source-port socket is connected on its first send and numbers its
	// datagrams from its counter (connect.go; TestConnectedWireHeaders
	// checks them exactly): its Identification is not 0.
	if !wire.VerifyICRCAnyIPv4ID(&fr, data) {
		t.Errorf("the packet from port %d has an ICRC sealed for another framing", from.Port())
	}
	return from.Port()
}

// TestSourcePorts: a packet asking for a source port in the RoCEv2 range
// leaves from it; one whose port is taken by another program, beyond
// MaxSourcePorts, or with FixedSourcePort leaves from the link's port and
// is counted; Close releases the ports.
func TestSourcePorts(t *testing.T) {
	for _, a := range []netip.Addr{lo1, lo6} {
		t.Run(a.String(), func(t *testing.T) {
			r := rawConn(t, a)
			l, err := Open(Config{Addrs: []netip.Addr{a}, MaxSourcePorts: 1})
			if err != nil {
				t.Skipf("cannot bind %s: %v", a, err)
			}
			defer l.Close()
			p1 := freeSourcePort(t, a)
			for range 2 {
				if got := sendFrom(t, l, a, p1, r); got != p1 {
					t.Fatalf("sent from port %d, want %d", got, p1)
				}
			}
			if got := sendFrom(t, l, netip.Addr{}, 0, r); got != l.Port() {
				t.Errorf("a packet asking for no port left from %d, want the link's %d", got, l.Port())
			}
			// Beyond MaxSourcePorts (1).
			p2 := freeSourcePort(t, a, p1)
			if got := sendFrom(t, l, a, p2, r); got != l.Port() {
				t.Errorf("a second source port with MaxSourcePorts 1: from %d, want %d", got, l.Port())
			}
			if n := l.Stats().TxSourcePortFallback; n != 1 {
				t.Errorf("TxSourcePortFallback %d, want 1", n)
			}
			if got := l.SourcePort(a, p1); got != p1 {
				t.Errorf("SourcePort(%v, %d) = %d", a, p1, got)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, p1)))
			if err != nil {
				t.Fatalf("port %d still bound after Close: %v", p1, err)
			}
			c.Close()
		})
	}
}

// TestSourcePortTaken: a port bound by another program, or by another link
// on the same address, cannot be used (the link does not set SO_REUSEPORT);
// the packet leaves from the link's port.
func TestSourcePortTaken(t *testing.T) {
	r := rawConn(t, lo1)
	l := open(t, Config{Addrs: []netip.Addr{lo1}})
	p := freeSourcePort(t, lo1)
	other, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo1, p)))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for range 2 {
		if got := sendFrom(t, l, lo1, p, r); got != l.Port() {
			t.Fatalf("sent from %d, want the link's port %d", got, l.Port())
		}
	}
	if n := l.Stats().TxSourcePortFallback; n != 2 {
		t.Errorf("TxSourcePortFallback %d, want 2", n)
	}
}

// TestFixedSourcePort: with FixedSourcePort, every packet leaves from the
// link's port.
func TestFixedSourcePort(t *testing.T) {
	r := rawConn(t, lo1)
	l := open(t, Config{Addrs: []netip.Addr{lo1}, FixedSourcePort: true})
	if got := sendFrom(t, l, lo1, freeSourcePort(t, lo1), r); got != l.Port() {
		t.Fatalf("sent from %d, want %d", got, l.Port())
	}
	if n := l.Stats().TxSourcePortFallback; n != 0 {
		t.Errorf("TxSourcePortFallback %d: a fixed port is not a fallback", n)
	}
}

// TestSourcePortSharedAddress: two links on one address asking for the same
// source port (the two ends of a QP pair on one host): the first gets it,
// the second sends from its own port and counts the fallback.
func TestSourcePortSharedAddress(t *testing.T) {
	r := rawConn(t, lo1)
	a := open(t, Config{Addrs: []netip.Addr{lo1}})
	b := open(t, Config{Addrs: []netip.Addr{lo1}})
	p := freeSourcePort(t, lo1)
	if got := sendFrom(t, a, lo1, p, r); got != p {
		t.Fatalf("first link sent from %d, want %d", got, p)
	}
	if got := sendFrom(t, b, lo1, p, r); got != b.Port() {
		t.Fatalf("second link sent from %d, want its own port %d", got, b.Port())
	}
	if n := b.Stats().TxSourcePortFallback; n != 1 {
		t.Errorf("second link's TxSourcePortFallback %d, want 1", n)
	}
}
