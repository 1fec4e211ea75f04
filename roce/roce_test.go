package roce

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

func TestOpenErrors(t *testing.T) {
	if _, err := Open(nil, nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("Open with no addresses: %v, want ErrInvalid", err)
	}
	if _, err := Open([]netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil); !errors.Is(err, link.ErrAddress) {
		t.Errorf("Open on an address not configured here: %v, want link.ErrAddress", err)
	}
	if _, err := OpenInterface("no-such-interface0", nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("OpenInterface on a missing interface: %v, want ErrInvalid", err)
	}
}

// TestOpen opens a device on 127.0.0.1 and checks its GID table and port.
func TestOpen(t *testing.T) {
	a := netip.MustParseAddr("127.0.0.1")
	d, err := Open([]netip.Addr{a}, &Options{Port: 0, Options: verbs.Options{Name: "t0", MTU: verbs.MTU1024}})
	if err != nil {
		t.Skipf("no UDP on %v: %v", a, err)
	}
	defer d.Close()
	g, err := d.QueryGID(1, 0)
	if err != nil || g != wire.GIDFromAddr(a) {
		t.Errorf("GID[0] %v, %v; want %v", g, err, wire.GIDFromAddr(a))
	}
	pa, err := d.QueryPort(1)
	if err != nil || pa.ActiveMTU != verbs.MTU1024 || pa.State != verbs.PortActive {
		t.Errorf("port %+v, %v", pa, err)
	}
}

// TestGIDOrder checks rxe's order on the loopback interface: IPv4 before
// other IPv6 addresses.
func TestGIDOrder(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	addrs, err := GIDOrder(lo)
	if err != nil {
		t.Fatal(err)
	}
	seen6 := false
	for _, a := range addrs {
		switch {
		case a.Is4() && seen6:
			t.Errorf("order %v: an IPv4 address after a global IPv6 one", addrs)
		case a.Is6() && !a.IsLinkLocalUnicast():
			seen6 = true
		}
	}
}

// TestNodeGUIDFromMAC checks the modified EUI-64 against addresses worked by
// hand, and the addresses that give none.
func TestNodeGUIDFromMAC(t *testing.T) {
	for _, c := range []struct {
		mac  string
		want uint64
	}{
		{"02:42:ac:11:00:02", 0x0042acfffe110002},
		{"00:1b:21:aa:bb:cc", 0x021b21fffeaabbcc},
		{"52:54:00:12:34:56", 0x505400fffe123456},
		{"00:00:00:00:00:00", 0},
		{"00:00:00:00:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01", 0}, // IPoIB
	} {
		mac, err := net.ParseMAC(c.mac)
		if err != nil {
			t.Fatal(err)
		}
		if got := NodeGUIDFromMAC(mac); got != c.want {
			t.Errorf("NodeGUIDFromMAC(%s) = %#x, want %#x", c.mac, got, c.want)
		}
	}
	if got := NodeGUIDFromMAC(nil); got != 0 {
		t.Errorf("NodeGUIDFromMAC(nil) = %#x", got)
	}
}
