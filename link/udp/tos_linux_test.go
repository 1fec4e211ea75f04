package udp

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"github.com/softrdma/softrdma/wire"
)

// nextTClass returns the IP traffic class (IPv4 TOS byte or IPv6 Traffic
// Class) and UDP payload length of the next captured packet from src to
// dst.
func (c *capture) nextTClass(t *testing.T, src, dst netip.AddrPort) (tc uint8, n int) {
	t.Helper()
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(linktest.Timeout)
	for time.Now().Before(deadline) {
		m, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f, payload, err := wire.SplitIP(buf[:m])
		if err != nil {
			continue
		}
		if netip.AddrPortFrom(f.Src, f.SrcPort) != src || netip.AddrPortFrom(f.Dst, f.DstPort) != dst {
			continue
		}
		if f.IsIPv4() {
			return buf[1], len(payload)
		}
		return buf[0]<<4 | buf[1]>>4, len(payload)
	}
	t.Fatalf("no packet from %s to %s captured", src, dst)
	return 0, 0
}

// TestTrafficClassOnWire sends packets of several traffic classes in one
// batch, IPv4 and IPv6, with and without UDP segmentation, and reads the
// IPv4 TOS byte or IPv6 Traffic Class of each datagram off loopback: each
// leaves with its own packet's class, a GSO run never mixes two, and the
// ICRC (which masks the field) still verifies at the receiver.
func TestTrafficClassOnWire(t *testing.T) {
	classes := []uint8{0x68, 0x68, 0x68, 0xb8, 0xb8, 0xb8, 0, 0x03}
	for _, gso := range []bool{false, true} {
		for _, fam := range []string{"IPv4", "IPv6"} {
			name := fam + map[bool]string{false: "/datagrams", true: "/GSO"}[gso]
			t.Run(name, func(t *testing.T) {
				cfg := Config{DisableGSO: !gso}
				var a, b *Link
				if fam == "IPv4" {
					a, b = pair4(t, cfg)
				} else {
					a, b = pair6(t, cfg)
				}
				c := newCapture(t, a.Port(), b.Port())
				col := linktest.NewCollector()
				if err := b.Start(col); err != nil {
					t.Fatal(err)
				}
				src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
				const size = 1024
				var pkts []*link.Packet
				for i, tc := range classes {
					p := linktest.MakePacket(uint32(i), size, src, dst)
					p.TClass = tc
					pkts = append(pkts, p)
				}
				linktest.SendAll(t, a, pkts, len(pkts))
				// Loopback shows a GSO run whole: a captured datagram
				// carries one packet or one run, and its class is that of
				// the packet it starts with.
				for i := 0; i < len(classes); {
					tc, n := c.nextTClass(t, src, dst)
					if tc != classes[i] {
						t.Errorf("packet %d left with traffic class %#x, want %#x", i, tc, classes[i])
					}
					k := max(n/size, 1)
					for r := range k {
						if i+r < len(classes) && classes[i+r] != classes[i] {
							t.Errorf("one datagram carries packets %d and %d, of traffic classes %#x and %#x", i, i+r, classes[i], classes[i+r])
						}
					}
					i += k
				}
				if got := col.WaitFor(t, len(classes)); len(got) != len(classes) {
					t.Fatalf("received %d packets, want %d", len(got), len(classes))
				}
				st := a.Stats()
				if gso && st.TxGSOBatches != 0 && st.TxGSOBatches != 2 {
					t.Errorf("%d GSO runs, want 2 (one per class of three packets)", st.TxGSOBatches)
				}
				if bs := b.Stats(); bs.RxBadICRC != 0 {
					t.Errorf("%d packets failed the ICRC check", bs.RxBadICRC)
				}
			})
		}
	}
}
