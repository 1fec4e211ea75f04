// Tests of the UDP link over loopback: the shared conformance suite on IPv4
// and IPv6, binding rules, links with several addresses, the ICRC policies
// fed by raw datagrams, malformed datagrams, allocation-free sends, and the
// send/receive benchmark.

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"github.com/softrdma/softrdma/wire"
)

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2")
	lo6 = netip.MustParseAddr("::1")
)

// open opens a link and closes it when the test ends.
func open(t testing.TB, cfg Config) *Link {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%v): %v", cfg.Addrs, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pair4 opens links on 127.0.0.1 and 127.0.0.2 sharing one ephemeral port.
func pair4(t testing.TB, cfg Config) (a, b *Link) {
	t.Helper()
	for range 5 {
		cfg.Addrs, cfg.Port = []netip.Addr{lo1}, 0
		a = open(t, cfg)
		cfg.Addrs, cfg.Port = []netip.Addr{lo2}, a.Port()
		var err error
		if b, err = Open(cfg); err == nil {
			t.Cleanup(func() { b.Close() })
			return a, b
		}
		a.Close()
	}
	t.Fatal("no ephemeral port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil
}

// pair6 opens two links on ::1 on different ephemeral ports.
func pair6(t testing.TB, cfg Config) (a, b *Link) {
	t.Helper()
	cfg.Addrs, cfg.Port = []netip.Addr{lo6}, 0
	return open(t, cfg), open(t, cfg)
}

func TestConformanceIPv4(t *testing.T) {
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link) {
		a, b := pair4(t, Config{})
		if a.Port() != b.Port() {
			t.Fatalf("ports %d and %d differ", a.Port(), b.Port())
		}
		return a, b
	})
}

func TestConformanceIPv4Strict(t *testing.T) {
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link) {
		// Strict needs Identification 0 on every packet: no GSO runs.
		return pair4(t, Config{ICRCPolicy: StrictIPv4, DisableGSO: true})
	})
}

func TestConformanceIPv6(t *testing.T) {
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link) {
		a, b := pair6(t, Config{})
		if a.Port() == b.Port() {
			t.Fatalf("both links on port %d", a.Port())
		}
		return a, b
	})
}

func TestOpenErrors(t *testing.T) {
	linktest.NoLeaks(t)
	a := open(t, Config{Addrs: []netip.Addr{lo1}})
	taken := netip.AddrPortFrom(lo1, a.Port())
	cases := []struct {
		name    string
		cfg     Config
		address bool   // wraps link.ErrAddress
		mention string // the message names this
	}{
		{"no addresses", Config{}, true, ""},
		{"invalid address", Config{Addrs: []netip.Addr{{}}}, true, ""},
		{"unspecified IPv4", Config{Addrs: []netip.Addr{netip.IPv4Unspecified()}}, true, "0.0.0.0"},
		{"unspecified IPv6", Config{Addrs: []netip.Addr{netip.IPv6Unspecified()}}, true, "::"},
		{"multicast", Config{Addrs: []netip.Addr{netip.MustParseAddr("ff02::1")}}, true, "ff02::1"},
		{"listed twice", Config{Addrs: []netip.Addr{lo1, netip.AddrFrom16(lo1.As16())}}, true, "127.0.0.1"},
		{"port in use", Config{Addrs: []netip.Addr{lo1}, Port: a.Port()}, true, taken.String()},
		{"second address in use", Config{Addrs: []netip.Addr{lo2, lo1}, Port: a.Port()}, true, taken.String()},
		{"bad policy", Config{Addrs: []netip.Addr{lo1}, ICRCPolicy: 7}, false, "ICRCPolicy(7)"},
	}
	for _, c := range cases {
		l, err := Open(c.cfg)
		if err == nil {
			l.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if c.address != errors.Is(err, link.ErrAddress) {
			t.Errorf("%s: error %v: wraps ErrAddress = %v", c.name, err, !c.address)
		}
		if !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.mention)
		}
	}
	// The failed Open released 127.0.0.2 again.
	open(t, Config{Addrs: []netip.Addr{lo2}, Port: a.Port()})
}

// TestMultiAddress sends mixed batches through a link with three addresses
// (one port) and checks that each packet leaves from its own address.
func TestMultiAddress(t *testing.T) {
	linktest.NoLeaks(t)
	m := open(t, Config{Addrs: []netip.Addr{lo1, lo2, lo6}})
	p4 := open(t, Config{Addrs: []netip.Addr{lo1}})
	p6 := open(t, Config{Addrs: []netip.Addr{lo6}})
	rx4, rx6, rxm := linktest.NewCollector(), linktest.NewCollector(), linktest.NewCollector()
	for l, c := range map[*Link]*linktest.Collector{m: rxm, p4: rx4, p6: rx6} {
		if err := l.Start(c); err != nil {
			t.Fatal(err)
		}
	}
	port := m.Port()
	from := []netip.AddrPort{
		netip.AddrPortFrom(lo1, port), netip.AddrPortFrom(lo2, port),
		netip.AddrPortFrom(lo6, port), {},
	}
	to := []netip.AddrPort{linktest.Endpoint(p4), linktest.Endpoint(p4), linktest.Endpoint(p6), linktest.Endpoint(p6)}
	want := []netip.AddrPort{from[0], from[1], from[2], from[2]} // zero Src: the first IPv6 address
	var pkts []*link.Packet
	const n = 40
	for i := range uint32(n) {
		k := i % 4
		pkts = append(pkts, linktest.MakePacket(k<<16|i, 128, from[k], to[k]))
	}
	linktest.SendAll(t, m, pkts, n)
	got := append(rx4.WaitFor(t, n/2), rx6.WaitFor(t, n/2)...)
	next := make(map[uint32]uint32)
	for _, r := range got {
		seq := linktest.Seq(r.Data)
		k := seq >> 16
		if msg := linktest.CheckPacket(r, seq, 128, want[k], to[k]); msg != "" {
			t.Error(msg)
		}
		if i := seq & 0xFFFF; i < next[k] {
			t.Errorf("source %d: packet %d after %d", k, i, next[k])
		} else {
			next[k] = i
		}
	}
	if s := m.Stats(); s.TxPackets != n || s.TxErrors != 0 {
		t.Errorf("Stats %+v", s)
	}

	// Replies to each of m's addresses arrive with that address as Dst.
	for i, dst := range from[:3] {
		peer := p4
		if dst.Addr().Is6() {
			peer = p6
		}
		linktest.SendAll(t, peer, []*link.Packet{linktest.MakePacket(uint32(i), 64, linktest.Endpoint(peer), dst)}, 1)
		r := rxm.WaitFor(t, i+1)[i]
		if msg := linktest.CheckPacket(r, uint32(i), 64, linktest.Endpoint(peer), dst); msg != "" {
			t.Error(msg)
		}
	}
}

// rawConn returns a plain UDP socket on addr, closed when the test ends.
func rawConn(t testing.TB, addr netip.Addr) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sealedFrom returns packet seq of size bytes as c would send it to dst,
// sealed for IPv4 Identification 0 with DF (IPv4) or the real framing (IPv6),
// with one payload bit flipped if corrupt.
func sealedFrom(c *net.UDPConn, dst netip.AddrPort, seq uint32, size int, corrupt bool) []byte {
	return sealedFromID(c, dst, seq, size, corrupt, 0)
}

// sealedFromID seals the packet for IPv4 Identification id, which it will
// not have on the wire (a plain socket sends 0): the ICRC then verifies
// only with another Identification, as a packet from rxe does.
func sealedFromID(c *net.UDPConn, dst netip.AddrPort, seq uint32, size int, corrupt bool, id uint16) []byte {
	src := c.LocalAddr().(*net.UDPAddr).AddrPort()
	p := linktest.MakePacket(seq, size, src, dst)
	data := append([]byte(nil), p.Data()...)
	link.Put(p)
	fr := wire.Framing{
		Src: src.Addr().Unmap(), Dst: dst.Addr().Unmap(), SrcPort: src.Port(), DstPort: dst.Port(),
		IPv4Frag: wire.IPv4DontFragment, IPv4ID: id,
	}
	wire.Seal(&fr, data)
	if corrupt {
		data[wire.BTHLen+5] ^= 0x10
	}
	return data
}

func writeTo(t testing.TB, c *net.UDPConn, dst netip.AddrPort, data []byte) {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(data, dst); err != nil {
		t.Fatal(err)
	}
}

// TestICRCPolicy feeds a corrupted and a good packet from a plain socket
// to links with each policy, over IPv4 and IPv6; the good one is sealed
// for IPv4 Identification 0 (as it arrives) or another (as rxe's and later
// GSO segments arrive, seen from a socket).
func TestICRCPolicy(t *testing.T) {
	cases := []struct {
		addr      netip.Addr
		policy    ICRCPolicy
		id        uint16
		delivered int // of the two
		bad       uint64
		unchecked uint64
		anyID     uint64
	}{
		{lo1, VerifyIPv4, 0, 1, 1, 0, 0},
		{lo1, VerifyIPv4, 0x1234, 1, 1, 0, 1},
		{lo1, VerifyIPv4Zero, 0, 2, 0, 1, 0},
		{lo1, VerifyIPv4Zero, 0x1234, 2, 0, 2, 0},
		{lo1, StrictIPv4, 0, 1, 1, 0, 0},
		{lo1, StrictIPv4, 0x1234, 0, 2, 0, 0},
		{lo1, NoICRCCheck, 0, 2, 0, 2, 0},
		{lo6, VerifyIPv4, 0, 1, 1, 0, 0},
		{lo6, VerifyIPv4Zero, 0, 1, 1, 0, 0},
		{lo6, StrictIPv4, 0, 1, 1, 0, 0},
		{lo6, NoICRCCheck, 0, 1, 1, 0, 0}, // IPv6 is always verified
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%v/id%#x", c.addr, c.policy, c.id), func(t *testing.T) {
			linktest.NoLeaks(t)
			l := open(t, Config{Addrs: []netip.Addr{c.addr}, ICRCPolicy: c.policy})
			rx := linktest.NewCollector()
			l.Start(rx)
			raw := rawConn(t, c.addr)
			dst := linktest.Endpoint(l)
			writeTo(t, raw, dst, sealedFrom(raw, dst, 1, 256, true))
			writeTo(t, raw, dst, sealedFromID(raw, dst, 2, 256, false, c.id))
			s := linktest.WaitStats(l, func(s link.Stats) bool { return s.RxBadICRC+s.RxPackets == 2 })
			got := rx.Wait(c.delivered, linktest.Timeout)
			rx.Quiet(t, c.delivered, 20*time.Millisecond)
			if len(got) != c.delivered {
				t.Fatalf("%d packets delivered, want %d", len(got), c.delivered)
			}
			if c.delivered > 0 {
				src := raw.LocalAddr().(*net.UDPAddr).AddrPort()
				if msg := linktest.CheckPacket(got[len(got)-1], 2, 256, src, dst); msg != "" {
					t.Error(msg)
				}
			}
			if s.RxBadICRC != c.bad || s.RxICRCUnchecked != c.unchecked || s.RxICRCAnyID != c.anyID || s.RxPackets != uint64(c.delivered) {
				t.Errorf("RxBadICRC %d RxICRCUnchecked %d RxICRCAnyID %d RxPackets %d, want %d, %d, %d, %d",
					s.RxBadICRC, s.RxICRCUnchecked, s.RxICRCAnyID, s.RxPackets, c.bad, c.unchecked, c.anyID, c.delivered)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	for _, addr := range []netip.Addr{lo1, lo6} {
		t.Run(addr.String(), func(t *testing.T) {
			linktest.NoLeaks(t)
			l := open(t, Config{Addrs: []netip.Addr{addr}})
			rx := linktest.NewCollector()
			l.Start(rx)
			raw := rawConn(t, addr)
			dst := linktest.Endpoint(l)
			for _, n := range []int{0, 1, wire.BTHLen + wire.ICRCLen - 1, link.BufSize, link.BufSize + 1000} {
				writeTo(t, raw, dst, make([]byte, n))
			}
			writeTo(t, raw, dst, sealedFrom(raw, dst, 7, linktest.MinSize, false))
			got := rx.WaitFor(t, 1)
			if linktest.Seq(got[0].Data) != 7 {
				t.Errorf("delivered packet %d", linktest.Seq(got[0].Data))
			}
			s := linktest.WaitStats(l, func(s link.Stats) bool { return s.RxMalformed == 5 })
			if s.RxMalformed != 5 || s.RxPackets != 1 || s.RxBadICRC != 0 {
				t.Errorf("Stats %+v, want 5 malformed and 1 packet", s)
			}
		})
	}
}

// TestSendAllocs measures allocations per Send of a batch. The receiver is
// not started (TestRecvAllocs measures both sides on Linux).
func TestSendAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	a, b := pair4(t, Config{})
	m := open(t, Config{Addrs: []netip.Addr{lo1, lo6}})
	p6 := open(t, Config{Addrs: []netip.Addr{lo6}})
	batch := func(l link.Link, dsts ...netip.AddrPort) []*link.Packet {
		var pkts []*link.Packet
		for i := range 32 {
			pkts = append(pkts, linktest.MakePacket(uint32(i), 1024, netip.AddrPort{}, dsts[i%len(dsts)]))
		}
		return pkts
	}
	cases := []struct {
		name string
		l    link.Link
		pkts []*link.Packet
	}{
		{"IPv4 one socket, 1", a, batch(a, linktest.Endpoint(b))[:1]},
		{"IPv4 one socket, 32", a, batch(a, linktest.Endpoint(b))},
		{"IPv4+IPv6 two sockets, 32", m, batch(m, linktest.Endpoint(b), linktest.Endpoint(p6))},
		{"IPv4 four source ports, 32", a, withSourcePorts(t, batch(a, linktest.Endpoint(b)), 4)},
	}
	for _, c := range cases {
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			if e := c.l.Send(c.pkts); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatalf("%s: Send: %v", c.name, err)
		}
		t.Logf("%s: %.2f allocations per Send", c.name, allocs)
		if allocs > 0 {
			t.Errorf("%s: %.2f allocations per Send, want 0", c.name, allocs)
		}
	}
}

// BenchmarkUDPSendRecv sends 1 KiB and 4 KiB packets in batches of 32
// between two loopback links, keeping at most a window of packets in flight
// so the receiver's socket buffer does not overflow. It reports packets/s,
// bytes/s (MB/s) and allocations (both goroutines; none on Linux), and
// drops per op if any. The -tclass runs send every packet with a traffic
// class (an IP_TOS control message per datagram or GSO run).
func BenchmarkUDPSendRecv(b *testing.B) {
	for _, size := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchSendRecv(b, size, 0) })
		b.Run(fmt.Sprintf("%dB-tclass", size), func(b *testing.B) { benchSendRecv(b, size, 0xb8) })
	}
}

func benchSendRecv(b *testing.B, size int, tclass uint8) {
	tx, rx := pair4(b, Config{})
	var got atomic.Int64
	more := make(chan struct{}, 1)
	if err := rx.Start(link.HandlerFunc(func(batch []*link.Packet) {
		got.Add(int64(len(batch)))
		select {
		case more <- struct{}{}:
		default:
		}
	})); err != nil {
		b.Fatal(err)
	}
	const batch, window = 32, 512
	pkts := make([]*link.Packet, batch)
	for i := range pkts {
		pkts[i] = linktest.MakePacket(uint32(i), size, linktest.Endpoint(tx), linktest.Endpoint(rx))
		pkts[i].TClass = tclass
	}
	// wait blocks until the receiver has made progress, or gives up after d
	// and reports false.
	wait := func(d time.Duration) bool {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-more:
			return true
		case <-tm.C:
			return false
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent, lost := 0, 0
	for sent < b.N {
		for sent-lost-int(got.Load()) > window {
			if !wait(50 * time.Millisecond) {
				lost = sent - int(got.Load()) // the rest in flight is gone
			}
		}
		k := min(batch, b.N-sent)
		if err := tx.Send(pkts[:k]); err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	for int(got.Load())+lost < sent && wait(100*time.Millisecond) {
	}
	elapsed := time.Since(start)
	b.StopTimer()
	recv := got.Load()
	b.ReportMetric(float64(recv)/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(int64(sent)-recv)/float64(b.N), "drops/op")
}

// TestSendFirstRefused: when the kernel refuses the first message of a batch
// (sendmmsg returns -1: a firewall's EPERM, EINVAL for a loopback source
// and a remote destination), that
// packet is counted as lost and the rest of the batch still goes out.
func TestSendFirstRefused(t *testing.T) {
	linktest.NoLeaks(t)
	a := open(t, Config{Addrs: []netip.Addr{lo1}})
	b := open(t, Config{Addrs: []netip.Addr{lo1}})
	rx := linktest.NewCollector()
	if err := b.Start(rx); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(linktest.NewCollector()); err != nil {
		t.Fatal(err)
	}
	from := netip.AddrPortFrom(lo1, a.Port())
	bad := linktest.MakePacket(1, 64, from, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), b.Port())) // EINVAL from 127.0.0.1
	good := linktest.MakePacket(2, 64, from, linktest.Endpoint(b))
	err := a.Send([]*link.Packet{bad, good})
	if err == nil {
		t.Error("Send reported no error for a refused packet")
	}
	r := rx.WaitFor(t, 1)
	if msg := linktest.CheckPacket(r[0], 2, 64, from, linktest.Endpoint(b)); msg != "" {
		t.Error(msg)
	}
	if s := a.Stats(); s.TxPackets != 1 || s.TxErrors != 1 {
		t.Errorf("Stats %+v, want 1 sent and 1 error", s)
	}
}

// TestStateSocketClosed closes a link's socket under it, as a failure would:
// the link reports itself down, once.
func TestStateSocketClosed(t *testing.T) {
	a, b := pair4(t, Config{})
	var _ link.StateNotifier = a
	changes := make(chan bool, 4)
	a.NotifyState(func(up bool) { changes <- up })
	if err := a.Start(link.HandlerFunc(func([]*link.Packet) {})); err != nil {
		t.Fatal(err)
	}
	if !a.Up() {
		t.Fatal("a new link is down")
	}
	a.socks[0].conn.Close()
	select {
	case up := <-changes:
		if up || a.Up() {
			t.Fatalf("state change to up=%v after the socket closed", up)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no state change after the socket closed")
	}
	p := linktest.MakePacket(1, 64, linktest.Endpoint(a), linktest.Endpoint(b))
	defer link.Put(p)
	if err := a.Send([]*link.Packet{p}); err == nil {
		t.Fatal("Send on a closed socket succeeded")
	}
	select {
	case up := <-changes:
		t.Fatalf("second state change, up=%v", up)
	case <-time.After(20 * time.Millisecond):
	}
}

// withSourcePorts makes pkts ask for n source ports of the RoCEv2 range in
// turn, from 127.0.0.1.
func withSourcePorts(t *testing.T, pkts []*link.Packet, n int) []*link.Packet {
	var ports []uint16
	for range n {
		ports = append(ports, freeSourcePort(t, lo1, ports...))
	}
	for i, p := range pkts {
		p.Src = netip.AddrPortFrom(lo1, ports[i%n])
	}
	return pkts
}
