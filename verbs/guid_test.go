package verbs

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/link/loop"
)

// TestNodeGUID: a device opened without Options.NodeGUID gets one derived
// from its name and GIDs, the same each time it is opened, different for
// another name or address, unicast and locally administered; one given is
// kept.
func TestNodeGUID(t *testing.T) {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	port := uint16(4791)
	open := func(name, addr string, guid uint64) uint64 {
		t.Helper()
		port++
		l, err := n.Attach([]netip.Addr{netip.MustParseAddr(addr)}, port)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Open(l, &Options{Name: name, NodeGUID: guid})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		a := d.QueryDevice()
		if a.SysImageGUID != a.NodeGUID {
			t.Errorf("system image GUID %#x, node GUID %#x", a.SysImageGUID, a.NodeGUID)
		}
		return a.NodeGUID
	}
	g := open("dev", "10.0.0.1", 0)
	if g>>56&0x03 != 0x02 {
		t.Errorf("GUID %#x: want the locally administered bit set and the group bit clear", g)
	}
	if again := open("dev", "10.0.0.1", 0); again != g {
		t.Errorf("reopened: GUID %#x, was %#x", again, g)
	}
	if other := open("dev2", "10.0.0.1", 0); other == g {
		t.Errorf("another name, the same GUID %#x", g)
	}
	if other := open("dev", "10.0.0.2", 0); other == g {
		t.Errorf("another address, the same GUID %#x", g)
	}
	if given := open("dev", "10.0.0.1", 0x0042acfffe110002); given != 0x0042acfffe110002 {
		t.Errorf("Options.NodeGUID 0x0042acfffe110002, device has %#x", given)
	}
}
