package pcap_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/link/pcap"
	"github.com/softrdma/softrdma/wire"
)

// TestTapRecordsTrafficClass sends packets with traffic classes through a
// tap, IPv4 and IPv6: each record's IPv4 TOS byte or IPv6 Traffic Class is
// the packet's, and its ICRC (which masks the field) still verifies.
func TestTapRecordsTrafficClass(t *testing.T) {
	for _, addrs := range [][2]string{{"10.0.0.1", "10.0.0.2"}, {"fd00::1", "fd00::2"}} {
		n := loop.NewNetwork(loop.Config{})
		a, b := netip.MustParseAddr(addrs[0]), netip.MustParseAddr(addrs[1])
		inner, err := n.Attach([]netip.Addr{a}, 4791)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Attach([]netip.Addr{b}, 4791); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := pcap.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		tap := pcap.Tap(inner, w, nil)
		classes := []uint8{0xba, 0, 0x03}
		var batch []*link.Packet
		for _, tc := range classes {
			p := link.Get()
			p.N = wire.BTHLen + 8 + wire.ICRCLen
			clear(p.Buf[:p.N])
			p.Buf[0] = 0x04 // RC SEND_ONLY
			p.Src, p.Dst, p.TClass = netip.AddrPortFrom(a, 0), netip.AddrPortFrom(b, 4791), tc
			batch = append(batch, p)
		}
		if err := tap.Send(batch); err != nil {
			t.Fatal(err)
		}
		tap.Close()
		n.Close()
		r, err := pcapgo.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range classes {
			ip, _, err := r.ReadPacketData()
			if err != nil {
				t.Fatalf("%s record %d: %v", a, i, err)
			}
			got := ip[1]
			if ip[0]>>4 == 6 {
				got = ip[0]<<4 | ip[1]>>4
			}
			if got != want {
				t.Errorf("%s record %d: traffic class %#x, want %#x", a, i, got, want)
			}
			checkFrame(t, ip, netip.AddrPortFrom(a, 4791), netip.AddrPortFrom(b, 4791))
		}
	}
}
