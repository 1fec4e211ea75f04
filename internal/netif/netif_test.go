package netif

import (
	"net"
	"net/netip"
	"testing"
)

func TestInterfaceOf(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.0.0.2", "::ffff:127.0.0.1"} {
		ifc, err := InterfaceOf(netip.MustParseAddr(a))
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if ifc.Flags&net.FlagLoopback == 0 {
			t.Errorf("%s: interface %s is not the loopback", a, ifc.Name)
		}
	}
	if ifc, err := InterfaceOf(netip.MustParseAddr("192.0.2.77")); err == nil {
		t.Errorf("192.0.2.77 (TEST-NET-1) found on %s", ifc.Name)
	}
}
