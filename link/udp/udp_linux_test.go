// Linux-only tests of what goes over the wire: IPv6 datagrams with a zero
// UDP checksum (as Linux rxe sends them) must be received, and the IP
// headers the kernel puts on our packets, read back with a packet socket on
// lo, must be the ones the ICRC was sealed for.

package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"github.com/softrdma/softrdma/wire"
)

// noChecksumConn returns an IPv6 UDP socket on ::1 that sends checksum 0
// (UDP_NO_CHECK6_TX).
func noChecksumConn(t *testing.T) *net.UDPConn {
	t.Helper()
	c := rawConn(t, lo6)
	sc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Skipf("UDP_NO_CHECK6_TX: %v", serr)
	}
	return c
}

func TestZeroChecksumIPv6(t *testing.T) {
	linktest.NoLeaks(t)
	l := open(t, Config{Addrs: []netip.Addr{lo6}})
	rx := linktest.NewCollector()
	l.Start(rx)
	sender := noChecksumConn(t)
	dst := linktest.Endpoint(l)
	writeTo(t, sender, dst, sealedFrom(sender, dst, 5, 512, false))
	got := rx.WaitFor(t, 1)
	src := sender.LocalAddr().(*net.UDPAddr).AddrPort()
	if msg := linktest.CheckPacket(got[0], 5, 512, src, dst); msg != "" {
		t.Error(msg)
	}
	if s := l.Stats(); s.RxPackets != 1 || s.RxBadICRC != 0 {
		t.Errorf("Stats %+v", s)
	}

	// Control: a plain IPv6 socket drops the same datagram, so the checksum
	// really was zero.
	plain := rawConn(t, lo6)
	to := plain.LocalAddr().(*net.UDPAddr).AddrPort()
	writeTo(t, sender, to, sealedFrom(sender, to, 6, 512, false))
	plain.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _, err := plain.ReadFromUDPAddrPort(make([]byte, 1024)); err == nil {
		t.Errorf("a socket without UDP_NO_CHECK6_RX received %d bytes: the checksum was not zero", n)
	}
}

// capture reads IP packets on lo with a packet socket until match accepts
// one or a timeout passes.
type capture struct{ fd int }

// udpPortFilter is a classic BPF program for a SOCK_DGRAM packet socket
// (frames start at the IP header) that keeps UDP datagrams to or from
// port, IPv4 without options or IPv6 without extension headers: the
// socket's queue then holds only the test's packets, not the loopback
// traffic of tests running in parallel.
func udpPortFilter(t *testing.T, port uint16) []unix.SockFilter {
	p := uint32(port)
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x40, SkipFalse: 7},
		// IPv4
		bpf.LoadAbsolute{Off: 9, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 4},
		bpf.LoadAbsolute{Off: 20, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 11},
		bpf.LoadAbsolute{Off: 22, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 9},
		bpf.RetConstant{Val: 0},
		// IPv6
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x60, SkipFalse: 6},
		bpf.LoadAbsolute{Off: 6, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 4},
		bpf.LoadAbsolute{Off: 40, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 3},
		bpf.LoadAbsolute{Off: 42, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 1},
		bpf.RetConstant{Val: 0},
		bpf.RetConstant{Val: 1 << 16},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		out[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	return out
}

// newCapture opens a packet socket on lo that sees the UDP datagrams to
// or from the given ports.
func newCapture(t *testing.T, ports ...uint16) *capture {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		t.Skipf("packet socket: %v (needs CAP_NET_RAW)", err)
	}
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	// The filter goes on before bind, so nothing unfiltered is queued.
	for _, port := range ports {
		f := udpPortFilter(t, port)
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}); err != nil {
			t.Fatalf("attach filter: %v", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
		t.Fatalf("bind packet socket: %v", err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return &capture{fd}
}

// next returns the first captured packet from src to dst, as wire.SplitIP
// parses it.
func (c *capture) next(t *testing.T, src, dst netip.AddrPort) (wire.Framing, []byte) {
	t.Helper()
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(linktest.Timeout)
	for time.Now().Before(deadline) {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue // timeout or EINTR
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // lo shows each packet twice: take the incoming copy
		}
		f, payload, err := wire.SplitIP(buf[:n])
		if err != nil {
			continue
		}
		if netip.AddrPortFrom(f.Src, f.SrcPort) == src && netip.AddrPortFrom(f.Dst, f.DstPort) == dst {
			return f, payload
		}
	}
	t.Fatalf("no packet from %s to %s captured", src, dst)
	return wire.Framing{}, nil
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// TestWireHeaders checks the headers Linux puts on sent packets: IPv4 with
// Identification 0 and Don't Fragment, and ICRCs that verify against the
// real headers, IPv4 and IPv6, as a peer reading raw frames would.
func TestWireHeaders(t *testing.T) {
	// On loopback a GSO send is captured whole, before it is cut into
	// datagrams: look at datagrams sent one by one.
	a4, b4 := pair4(t, Config{DisableGSO: true})
	a6, b6 := pair6(t, Config{DisableGSO: true})
	c4 := newCapture(t, a4.Port())
	c6 := newCapture(t, b6.Port())
	for _, p := range []struct {
		a, b *Link
		c    *capture
	}{{a4, b4, c4}, {a6, b6, c6}} {
		a, b, c := p.a, p.b, p.c
		src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
		var pkts []*link.Packet
		for i := range uint32(3) {
			pkts = append(pkts, linktest.MakePacket(i, linktest.MaxSize-4*int(i), src, dst))
		}
		linktest.SendAll(t, a, pkts, len(pkts))
		for i := range 3 {
			f, payload := c.next(t, src, dst)
			if f.IsIPv4() && (f.IPv4ID != 0 || f.IPv4Frag != wire.IPv4DontFragment) {
				t.Errorf("IPv4 Identification %#x, flags/offset %#x; want 0 and %#x", f.IPv4ID, f.IPv4Frag, wire.IPv4DontFragment)
			}
			if !wire.VerifyICRC(&f, payload) {
				t.Errorf("%s packet %d: ICRC does not verify against the wire headers", src.Addr(), i)
			}
			if len(payload) != linktest.MaxSize-4*i {
				t.Errorf("%s packet %d: %d bytes on the wire", src.Addr(), i, len(payload))
			}
		}
	}
}

// TestRecvAllocs measures allocations per batch sent and received, IPv4 and
// IPv6: the reader goroutine's recvmmsg path allocates nothing per datagram
// (x/net's ReadBatch made two allocations per datagram), and Send nothing
// per batch; nor does Poll, nor the reader's spin. Both goroutines count:
// AllocsPerRun reads process-wide totals.
func TestRecvAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	mk6 := func() (*Link, *Link) {
		a := open(t, Config{Addrs: []netip.Addr{lo6}})
		return a, open(t, Config{Addrs: []netip.Addr{lo6}, Port: 0})
	}
	a4, b4 := pair4(t, Config{})
	a6, b6 := mk6()
	ap, bp := pair4(t, Config{})
	// A reader spinning long finds each batch while it spins.
	as, bs := pair4(t, Config{RxSpin: 50 * time.Millisecond})
	for _, c := range []struct {
		name   string
		tx, rx *Link
		poll   bool // the waiting loop receives with Poll
	}{{"IPv4", a4, b4, false}, {"IPv6", a6, b6, false}, {"IPv4 polled", ap, bp, true}, {"IPv4 spinning", as, bs, false}} {
		var got atomic.Int64
		from := linktest.Endpoint(c.tx)
		if err := c.rx.Start(link.HandlerFunc(func(batch []*link.Packet) {
			for _, p := range batch {
				if p.Src != from {
					t.Errorf("packet from %v, want %v", p.Src, from)
				}
			}
			got.Add(int64(len(batch)))
		})); err != nil {
			t.Fatal(err)
		}
		const n = 32
		pkts := make([]*link.Packet, n)
		for i := range pkts {
			pkts[i] = linktest.MakePacket(uint32(i), 1024, netip.AddrPort{}, linktest.Endpoint(c.rx))
		}
		var want int64
		var err error
		allocs := testing.AllocsPerRun(100, func() {
			if e := c.tx.Send(pkts); e != nil {
				err = e
			}
			want += n
			// Wait without timers (they allocate); the deadline bounds it.
			for end := time.Now().Add(2 * time.Second); got.Load() < want && time.Now().Before(end); {
				if !c.poll || c.rx.Poll() == 0 {
					runtime.Gosched()
				}
			}
		})
		if err != nil {
			t.Fatalf("%s: Send: %v", c.name, err)
		}
		if got.Load() != want {
			t.Fatalf("%s: received %d of %d packets", c.name, got.Load(), want)
		}
		if c.rx == bs && bs.spinHits.Load() == 0 {
			t.Errorf("%s: no batch was received by a spin", c.name)
		}
		t.Logf("%s: %.2f allocations per batch of %d sent and received", c.name, allocs, n)
		if allocs > 0 {
			t.Errorf("%s: %.2f allocations per batch of %d sent and received, want 0", c.name, allocs, n)
		}
	}
}
