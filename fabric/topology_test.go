package fabric

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parseFile(t testing.TB, path string) *Topology {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topo, err := ParseTopology(f, filepath.Base(path))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func parseString(s string) (*Topology, error) {
	return ParseTopology(strings.NewReader(s), "test")
}

func TestParseNet(t *testing.T) {
	topo := parseFile(t, "testdata/net")
	want := []struct {
		id    string
		typ   uint8
		ports int
		guid  uint64
	}{
		{"Switch1", nodeSwitch, 8, 0x200000},
		{"Switch2", nodeSwitch, 8, 0x200001},
		{"Hca1", nodeCA, 2, 0x100000},
		{"Hca2", nodeCA, 2, 0x100003},
	}
	if len(topo.Nodes) != len(want) {
		t.Fatalf("%d nodes, want %d", len(topo.Nodes), len(want))
	}
	for i, w := range want {
		n := topo.Nodes[i]
		if n.ID != w.id || n.Type != w.typ || n.NumPorts() != w.ports || n.GUID != w.guid || n.SysGUID != w.guid || n.Desc != w.id {
			t.Errorf("node %d: %+v, want %+v", i, n, w)
		}
	}
	s1 := topo.Nodes[0]
	if p := s1.Ports[2]; p.Remote != "Hca2" || p.RemotePort != 2 {
		t.Errorf("Switch1 port 2: %+v", p)
	}
	if p := s1.Ports[4]; p.Remote != "Switch2" || p.RemotePort != 4 {
		t.Errorf("Switch1 port 4: %+v", p)
	}
	if p := s1.Ports[5]; p.Remote != "" {
		t.Errorf("Switch1 port 5 connected: %+v", p)
	}
	if p := topo.Nodes[3].Ports[1]; p.Remote != "" {
		t.Errorf("Hca2 port 1 connected: %+v", p)
	}
	if p := s1.Ports[1]; p.WidthEnabled != width4x || p.SpeedEnabled != speedSDR {
		t.Errorf("default width/speed %d/%d", p.WidthEnabled, p.SpeedEnabled)
	}
}

// TestParseInstalledExamples parses ibsim's own examples, which
// ibsim-utils installs, and compares two with the copies in testdata.
func TestParseInstalledExamples(t *testing.T) {
	const dir = "/usr/share/doc/ibsim-utils/net-examples"
	files, _ := filepath.Glob(dir + "/net*")
	if len(files) == 0 {
		t.Skip("ibsim-utils examples not installed")
	}
	for _, f := range files {
		topo := parseFile(t, f)
		if len(topo.Nodes) < 2 {
			t.Errorf("%s: %d nodes", f, len(topo.Nodes))
		}
		local := "testdata/" + filepath.Base(f)
		if _, err := os.Stat(local); err == nil {
			mine := parseFile(t, local)
			if len(mine.Nodes) != len(topo.Nodes) {
				t.Fatalf("%s: %d nodes, testdata copy %d", f, len(topo.Nodes), len(mine.Nodes))
			}
			for i := range mine.Nodes {
				a, b := mine.Nodes[i], topo.Nodes[i]
				if a.ID != b.ID || a.GUID != b.GUID || len(a.Ports) != len(b.Ports) {
					t.Errorf("%s node %d: %+v vs %+v", f, i, a, b)
				}
				for j := range a.Ports {
					if a.Ports[j].Remote != b.Ports[j].Remote || a.Ports[j].RemotePort != b.Ports[j].RemotePort {
						t.Errorf("%s node %s port %d differs", f, a.ID, j)
					}
				}
			}
		}
	}
}

// An excerpt in the shape ibnetdiscover prints.
const discovered = `#
# Topology file: generated on Thu Nov 26 07:00:00 2026
#
vendid=0x2c9
devid=0xb924
sysimgguid=0x8f10400411f56
switchguid=0x8f10400411f56(8f10400411f56)
Switch	24 "S-0008f10400411f56"		# "ISR9024D Voltaire" base port 0 lid 6 lmc 0
[1]	"H-0008f10403961354"[1](8f10403961355) 		# "mtlx HCA-1" lid 4 4xDDR
[2]	"S-0008f10400411a08"[13]		# "ISR9024 Voltaire" lid 2 4xSDR

vendid=0x2c9
devid=0xb924
switchguid=0x8f10400411a08(8f10400411a08)
Switch	24 "S-0008f10400411a08"		# "ISR9024 Voltaire" enhanced port 0 lid 2 lmc 0
[13]	"S-0008f10400411f56"[2]		# "ISR9024D Voltaire" lid 6 4xSDR

vendid=0x2c9
devid=0x6274
sysimgguid=0x8f10403961357
caguid=0x8f10403961354
Ca	2 "H-0008f10403961354"		# "mtlx HCA-1"
[1](8f10403961355) 	"S-0008f10400411f56"[1]		# lid 4 lmc 1 "ISR9024D Voltaire" lid 6 4xDDR
`

func TestParseDiscovered(t *testing.T) {
	topo, err := parseString(discovered)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Nodes) != 3 {
		t.Fatalf("%d nodes", len(topo.Nodes))
	}
	s, s2, ca := topo.Nodes[0], topo.Nodes[1], topo.Nodes[2]
	if s.GUID != 0x8f10400411f56 || s.SysGUID != 0x8f10400411f56 || s.Desc != "ISR9024D Voltaire" || s.ESP0 != -1 || s.LID != 6 || s.VendorID != 0x2c9 || s.DeviceID != 0xb924 {
		t.Errorf("switch %+v", s)
	}
	if s.Ports[1].WidthEnabled != width1x|width4x || s.Ports[1].SpeedEnabled != speedSDR|speedDDR {
		t.Errorf("switch port 1 width %d speed %d", s.Ports[1].WidthEnabled, s.Ports[1].SpeedEnabled)
	}
	if s.Ports[2].SpeedEnabled != speedSDR {
		t.Errorf("switch port 2 speed %d", s.Ports[2].SpeedEnabled)
	}
	if s2.ESP0 != 1 || s2.SysGUID != s2.GUID {
		t.Errorf("second switch %+v (sysimgguid applies to one node)", s2)
	}
	if ca.Type != nodeCA || ca.GUID != 0x8f10403961354 || ca.SysGUID != 0x8f10403961357 || ca.Desc != "mtlx HCA-1" {
		t.Errorf("CA %+v", ca)
	}
	if p := ca.Ports[1]; p.Remote != "S-0008f10400411f56" || p.RemotePort != 1 || p.LID != 4 || p.LMC != 1 {
		t.Errorf("CA port 1 %+v", p)
	}
}

func TestParseGUIDBasesAndOptions(t *testing.T) {
	topo, err := parseString(`caguid=0x1000
switchguid=0x5000
Hca 2 "A"
[1] "S" w = 1	s=2
[2] "S"[2] e=1

caguid+0x100
Switch 4 "S"
[1] "A"
[2] "A"[2]

Rt 1 "R"
module="m"
Hca 1 "B"
`)
	if err != nil {
		t.Fatal(err)
	}
	a, s, r, b := topo.Nodes[0], topo.Nodes[1], topo.Nodes[2], topo.Nodes[3]
	if a.GUID != 0x1000 || s.GUID != 0x5000 || r.GUID != 0 || r.Type != nodeRouter {
		t.Errorf("GUIDs %#x %#x %#x", a.GUID, s.GUID, r.GUID)
	}
	if b.ID != "m#B" || b.GUID != 0x1100 {
		t.Errorf("prefixed node %q GUID %#x (relative to the last absolute base)", b.ID, b.GUID)
	}
	if p := a.Ports[1]; p.WidthEnabled != 1 || p.SpeedEnabled != 2 || p.RemotePort != 1 {
		t.Errorf("A port 1 %+v", p)
	}
	if a.Ports[2].ExtSpeedEnabled != 1 {
		t.Errorf("A port 2 %+v", a.Ports[2])
	}
}

func TestParseFatTree(t *testing.T) {
	topo, err := parseString(fatTree(4, 4, 8))
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Nodes) != 40 {
		t.Fatalf("%d nodes", len(topo.Nodes))
	}
}

func TestParseBad(t *testing.T) {
	bad := map[string]string{
		"empty":              "",
		"comments only":      "# nothing\n",
		"no port count":      "Switch \"S\"\n",
		"zero ports":         "Switch 0 \"S\"\n",
		"too many ports":     "Switch 255 \"S\"\n",
		"no id":              "Hca 2 S\n",
		"unterminated id":    "Hca 2 \"S\n",
		"reserved char":      "Hca 2 \"S#1\"\n",
		"duplicate id":       "Hca 1 \"A\"\n\nHca 1 \"A\"\n",
		"duplicate guid":     "caguid=5\nHca 1 \"A\"\ncaguid=5\nHca 1 \"B\"\n",
		"port 0":             "Switch 2 \"S\"\n[0] \"A\"[1]\n",
		"port too big":       "Hca 2 \"A\"\n[3] \"S\"[1]\n",
		"port twice":         "Switch 2 \"S\"\n[1] \"A\"[1]\n[1] \"A\"[1]\nHca 1 \"A\"\n[1] \"S\"[1]\n",
		"bad remote port":    "Hca 1 \"A\"\n[1] \"S\"[0]\n",
		"no remote id":       "Hca 1 \"A\"\n[1] S[1]\n",
		"missing remote":     "Hca 1 \"A\"\n[1] \"S\"[1]\n",
		"remote port range":  "Hca 1 \"A\"\n[1] \"S\"[3]\nSwitch 2 \"S\"\n",
		"one-sided link":     "Hca 1 \"A\"\n[1] \"S\"[1]\nSwitch 2 \"S\"\n",
		"mismatched link":    "Hca 1 \"A\"\n[1] \"S\"[1]\n\nSwitch 2 \"S\"\n[1] \"A\"[2]\n",
		"alias":              "Hca 1 \"A\"\n@[1] \"x\"\n",
		"include":            "include \"other\"\n",
		"do":                 "do something\n",
		"bad width":          "width=40\n",
		"bad speed":          "speed=9\n",
		"bad guid":           "caguid=zz\n",
		"no assignment":      "vendid 5\n",
		"bad width option":   "Hca 1 \"A\"\n[1] \"S\"[1] w=0\n",
		"bad module":         "module=x\n",
		"self link":          "Switch 2 \"S\"\n[1] \"S\"[1]\n",
		"line too long":      "# " + strings.Repeat("x", 70000) + "\n",
		"bad extended speed": "extspeed=16\n",
	}
	for name, text := range bad {
		topo, err := parseString(text)
		if !errors.Is(err, ErrTopology) || topo != nil {
			t.Errorf("%s: %v, %v; want ErrTopology", name, topo, err)
		}
	}
}

// TestParseTruncated cuts a topology at every byte: the result is a
// consistent topology or an ErrTopology, never a panic.
func TestParseTruncated(t *testing.T) {
	full := discovered
	for n := 0; n < len(full); n++ {
		topo, err := parseString(full[:n])
		if err != nil {
			if !errors.Is(err, ErrTopology) {
				t.Fatalf("cut at %d: %v", n, err)
			}
			continue
		}
		checkTopology(t, topo)
	}
}

func checkTopology(t *testing.T, topo *Topology) {
	t.Helper()
	ids := map[string]*TopoNode{}
	for _, n := range topo.Nodes {
		ids[n.ID] = n
	}
	for _, n := range topo.Nodes {
		if n.NumPorts() < 1 || n.NumPorts() > maxPorts {
			t.Fatalf("node %q has %d ports", n.ID, n.NumPorts())
		}
		for i, p := range n.Ports {
			if p.Remote == "" {
				continue
			}
			r := ids[p.Remote]
			if r == nil || p.RemotePort < 1 || p.RemotePort > r.NumPorts() {
				t.Fatalf("node %q port %d: remote %q[%d]", n.ID, i, p.Remote, p.RemotePort)
			}
			if back := r.Ports[p.RemotePort]; back.Remote != n.ID || back.RemotePort != i {
				t.Fatalf("node %q port %d: not linked back", n.ID, i)
			}
		}
	}
}

func FuzzParseTopology(f *testing.F) {
	for _, s := range []string{discovered, fatTree(2, 2, 2), "Hca 1 \"A\"\n[1] \"S\"[1]\n\nSwitch 2 \"S\"\n[1] \"A\"\n"} {
		f.Add(s)
	}
	if b, err := os.ReadFile("testdata/net"); err == nil {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, s string) {
		topo, err := parseString(s)
		if err != nil {
			if !errors.Is(err, ErrTopology) || topo != nil {
				t.Fatalf("error %v with topology %v", err, topo)
			}
			return
		}
		checkTopology(t, topo)
	})
}

func TestParseSpeeds(t *testing.T) {
	topo, err := parseString(`Switch 6 "S"
[1] "A"[1] # "a" lid 1 4xQDR
[2] "A"[2] # "a" lid 1 4xF
[3] "A"[3] # "a" lid 1 12xEDR
[4] "A"[4] # "a" lid 1 8xNDR
[5] "A"[5] # "a" lid 1 1xXYZ
[6] "A"[6] # "a" lid 1 2xSDR

Hca 6 "A"
[1] "S"[1]
[2] "S"[2]
[3] "S"[3]
[4] "S"[4]
[5] "S"[5]
[6] "S"[6]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ w, s, e uint8 }{
		{width1x | width4x, 7, 0}, {width1x | width4x, 7, 1}, {width1x | width4x | width12x, 7, 3},
		{width8x, 7, 15}, {width1x, speedSDR, 0}, {width2x, speedSDR, 0},
	}
	for i, w := range want {
		p := topo.Nodes[0].Ports[i+1]
		if p.WidthEnabled != w.w || p.SpeedEnabled != w.s || p.ExtSpeedEnabled != w.e {
			t.Errorf("port %d: width %d speed %d ext %d, want %+v", i+1, p.WidthEnabled, p.SpeedEnabled, p.ExtSpeedEnabled, w)
		}
	}
}

// TestParseIbsimDiscovered parses what ibnetdiscover printed against Linux
// ibsim serving a topology, and checks that ParseTopology gives the
// original topology the GUIDs and links ibsim gave it.
func TestParseIbsimDiscovered(t *testing.T) {
	for _, c := range []struct{ orig, disc string }{
		{readFile(t, "testdata/net.2sw2path4hca"), "testdata/net.2sw2path4hca.ibnetdiscover"},
		{fatTree(4, 4, 8), "testdata/fattree.ibnetdiscover"},
	} {
		orig, err := parseString(c.orig)
		if err != nil {
			t.Fatal(err)
		}
		disc := parseFile(t, c.disc)
		if len(orig.Nodes) != len(disc.Nodes) {
			t.Fatalf("%s: %d nodes, ibsim's %d", c.disc, len(orig.Nodes), len(disc.Nodes))
		}
		byGUID := func(tp *Topology) (map[uint64]*TopoNode, map[string]uint64) {
			m, ids := map[uint64]*TopoNode{}, map[string]uint64{}
			for _, n := range tp.Nodes {
				m[n.GUID] = n
				ids[n.ID] = n.GUID
			}
			return m, ids
		}
		om, oids := byGUID(orig)
		dm, dids := byGUID(disc)
		for g, on := range om {
			dn := dm[g]
			if dn == nil {
				t.Errorf("%s: node %s GUID %#x not in ibsim's", c.disc, on.ID, g)
				continue
			}
			if dn.Type != on.Type || dn.NumPorts() != on.NumPorts() || dn.Desc != on.ID || dn.SysGUID != on.SysGUID {
				t.Errorf("%s: %s: %+v, ibsim's %+v", c.disc, on.ID, on, dn)
			}
			for i, p := range on.Ports {
				dp := dn.Ports[i]
				if (p.Remote == "") != (dp.Remote == "") {
					t.Errorf("%s: %s port %d linked %q, ibsim's %q", c.disc, on.ID, i, p.Remote, dp.Remote)
					continue
				}
				if p.Remote != "" && (oids[p.Remote] != dids[dp.Remote] || p.RemotePort != dp.RemotePort) {
					t.Errorf("%s: %s port %d to %#x[%d], ibsim's %#x[%d]", c.disc, on.ID, i, oids[p.Remote], p.RemotePort, dids[dp.Remote], dp.RemotePort)
				}
			}
		}
	}
}
