package fabric

import (
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

// TestHardwareDefaults: the attributes where softrdma reports what
// switches and ibsim report: NodeInfo's Revision; a switch's port 0 has
// one GUID (GUIDCap 1, and a GUIDInfo Set keeps nothing past it); its
// external ports have no GUID table and no GID prefix (both 0); a CA
// port keeps its block of eight GUIDs and the default prefix.
func TestHardwareDefaults(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	portInfo := func(node string, port uint32) mad.PortInfo {
		t.Helper()
		b, err := f.Query(f.NodeByName(node), mad.SMAttrPortInfo, port)
		if err != nil {
			t.Fatal(err)
		}
		pi, err := mad.ParsePortInfo(b)
		if err != nil {
			t.Fatal(err)
		}
		return pi
	}
	for _, node := range []string{"Switch1", "Hca1"} {
		b, err := f.Query(f.NodeByName(node), mad.SMAttrNodeInfo, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ni, _ := mad.ParseNodeInfo(b); ni.Revision != 0xa1 {
			t.Errorf("%s: NodeInfo Revision %#x", node, ni.Revision)
		}
	}
	for _, c := range []struct {
		node    string
		port    uint32
		guidCap uint8
		prefix  uint64
	}{
		{"Switch1", 0, 1, 0xfe80000000000000},
		{"Switch1", 1, 0, 0},
		{"Switch1", 3, 0, 0},
		{"Hca1", 1, 8, 0xfe80000000000000},
	} {
		if pi := portInfo(c.node, c.port); pi.GUIDCap != c.guidCap || pi.GIDPrefix != c.prefix {
			t.Errorf("%s port %d: GUIDCap %d, GIDPrefix %#x; want %d, %#x", c.node, c.port, pi.GUIDCap, pi.GIDPrefix, c.guidCap, c.prefix)
		}
	}
	// GUIDInfo Set: a CA port takes entries 1..7, a switch's port 0 none.
	sm := newSM(t, f, "Hca1", 1)
	set := mad.GUIDInfo{}
	for i := range set.GUID {
		set.GUID[i] = 0x5000 + uint64(i)
	}
	data := make([]byte, 64)
	set.Encode(data)
	for _, c := range []struct {
		path []byte
		node string
		kept int // entries past 0 kept
	}{{path(), "Hca1", 7}, {path(1), "Switch1", 0}} {
		g, err := mad.ParseGUIDInfo(sm.drOK(c.path, mad.MethodSet, mad.SMAttrGUIDInfo, 0, data))
		if err != nil {
			t.Fatal(err)
		}
		n := f.NodeByName(c.node)
		want := n.PortGUID(1)
		if n.Type() == mad.NodeTypeSwitch {
			want = n.GUID()
		}
		if g.GUID[0] != want {
			t.Errorf("%s: GUID 0 %#x, want %#x", c.node, g.GUID[0], want)
		}
		for i := 1; i < len(g.GUID); i++ {
			if kept := g.GUID[i] == set.GUID[i]; kept != (i <= c.kept) || !kept && g.GUID[i] != 0 {
				t.Errorf("%s: GUID %d is %#x after the Set", c.node, i, g.GUID[i])
			}
		}
	}
}
