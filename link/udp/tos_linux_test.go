package udp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
)

// tclassReceiver is a plain UDP socket that reports the IPv4 TOS byte or
// IPv6 Traffic Class the kernel saw on each datagram it receives.
type tclassReceiver struct {
	c   *net.UDPConn
	is4 bool
}

func newTClassReceiver(t *testing.T, a netip.Addr) *tclassReceiver {
	t.Helper()
	network := "udp6"
	if a.Is4() {
		network = "udp4"
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		if a.Is4() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return &tclassReceiver{c: c, is4: a.Is4()}
}

func (r *tclassReceiver) addr() netip.AddrPort {
	return r.c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// next returns the traffic class and length of the next datagram.
func (r *tclassReceiver) next(t *testing.T) (tc uint8, n int) {
	t.Helper()
	buf, oob := make([]byte, 1<<16), make([]byte, 128)
	r.c.SetReadDeadline(time.Now().Add(linktest.Timeout))
	n, oobn, _, _, err := r.c.ReadMsgUDP(buf, oob)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		switch {
		case r.is4 && m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			return m.Data[0], n // a byte
		case !r.is4 && m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4:
			return uint8(binary.NativeEndian.Uint32(m.Data)), n // an int
		}
	}
	t.Fatalf("a datagram of %d bytes came without its traffic class", n)
	return 0, 0
}

// TestTrafficClassOnWire sends packets of several traffic classes in one
// batch, IPv4 and IPv6, with and without UDP segmentation, to a socket
// that reads each datagram's IPv4 TOS byte or IPv6 Traffic Class as the
// kernel received it: each packet arrives with its own class, and a GSO
// run never mixes two (the runs split where the class changes).
func TestTrafficClassOnWire(t *testing.T) {
	classes := []uint8{0x68, 0x68, 0x68, 0xb8, 0xb8, 0xb8, 0, 0x03}
	for _, gso := range []bool{false, true} {
		for _, fam := range []string{"IPv4", "IPv6"} {
			name := fam + map[bool]string{false: "/datagrams", true: "/GSO"}[gso]
			t.Run(name, func(t *testing.T) {
				src, dst := lo1, lo2
				if fam == "IPv6" {
					src, dst = lo6, lo6
				}
				a := open(t, Config{Addrs: []netip.Addr{src}, DisableGSO: !gso})
				r := newTClassReceiver(t, dst)
				const size = 1024
				var pkts []*link.Packet
				for i, tc := range classes {
					p := linktest.MakePacket(uint32(i), size, netip.AddrPortFrom(src, 0), r.addr())
					p.TClass = tc
					pkts = append(pkts, p)
				}
				linktest.SendAll(t, a, pkts, len(pkts))
				for i, want := range classes {
					tc, n := r.next(t)
					if n != size {
						t.Fatalf("datagram %d: %d bytes, want %d", i, n, size)
					}
					if tc != want {
						t.Errorf("packet %d arrived with traffic class %#x, want %#x", i, tc, want)
					}
				}
				if st := a.Stats(); gso && st.TxGSOBatches != 0 && st.TxGSOBatches != 2 {
					t.Errorf("%d GSO runs, want 2 (one per class of three packets)", st.TxGSOBatches)
				}
			})
		}
	}
}
