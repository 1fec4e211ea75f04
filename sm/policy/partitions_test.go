package policy

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

func parseFile(t testing.TB, name string) *Partitions {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps, err := ParsePartitions(f)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func ca(guid uint64) PortRef {
	return PortRef{NodeType: mad.NodeTypeCA, NodeGUID: guid - 1, PortGUID: guid, Port: 1}
}

// TestParsePartitions reads a file with every construct and checks the
// partitions it defines.
func TestParsePartitions(t *testing.T) {
	ps := parseFile(t, "testdata/partitions.conf")
	var keys []uint16
	for _, p := range ps.Parts {
		keys = append(keys, p.PKey)
	}
	if want := []uint16{0x7FFF, 0x0001, 0x0002, 0x0080, 0x0010, 0x0003}; !slices.Equal(keys, want) {
		t.Fatalf("P_Keys %#x, want %#x", keys, want)
	}
	def, red, blue, st, mc, auto := ps.Parts[0], ps.Parts[1], ps.Parts[2], ps.Parts[3], ps.Parts[4], ps.Parts[5]
	if def.Name != "Default" || !def.IPoIB || def.Broadcast.MTU != 5 || def.Line != 2 {
		t.Errorf("default: %+v", def)
	}
	if red.Name != "Red" || !red.IPoIB || len(red.Members) != 3 || red.Members[0].Membership != Full ||
		red.Members[2] != (Member{GUID: 0x0002c90000000301, Membership: Limited}) || red.Line != 5 {
		t.Errorf("Red: %+v", red)
	}
	// 0x8002: only the low 15 bits; "limi" is limited; no defmember is limited.
	if blue.Members[0].Membership != Full || blue.Members[1].Membership != Limited || blue.Members[2].Membership != Limited {
		t.Errorf("Blue: %+v", blue.Members)
	}
	if st.Name != "Storage" || len(st.Members) != 4 || st.Members[1].Membership != Full ||
		st.Members[2].Membership != Limited || st.Members[3].Membership != Both {
		t.Errorf("Storage (merged): %+v", st.Members)
	}
	if !mc.Index0 || len(mc.Groups) != 2 || mc.Groups[0].SL != 1 || mc.Groups[1].QKey != 0xDEADBEEF ||
		mc.Groups[1].MTU != 2 || mc.Groups[1].Rate != 3 || len(mc.Members) != 1 || mc.Members[0].Group != GroupCAs {
		t.Errorf("Mcast: %+v", mc)
	}
	// The IPoIB group gets the partition's key in its P_Key field.
	if g := mc.Groups[0].MGID; g[4] != 0x80 || g[5] != 0x10 || g[15] != 0x07 || g[14] != 0x07 {
		t.Errorf("IPoIB MGID %x", g)
	}
	if auto.Name != "Auto" || auto.PKey != 3 || auto.Members[0].GUID != 0x99 {
		t.Errorf("Auto: %+v", auto)
	}
}

// TestPKeys: the P_Key tables of end ports and switch ports.
func TestPKeys(t *testing.T) {
	ps := parseFile(t, "testdata/partitions.conf")
	sw0 := PortRef{NodeType: mad.NodeTypeSwitch, NodeGUID: 0x500, PortGUID: 0x500}
	sm := ca(0x0002c90000000101)
	sm.SM = true
	for _, c := range []struct {
		name string
		p    PortRef
		want []uint16
	}{
		// Default limited (ALL), Red full, Mcast limited but at index 0.
		{"red full member", ca(0x0002c90000000101), []uint16{0x0010, 0x7FFF, 0x8001}},
		{"SM port", sm, []uint16{0x0010, 0xFFFF, 0x8001}},
		{"red limited member", ca(0x0002c90000000301), []uint16{0x0010, 0x7FFF, 0x0001}},
		{"blue", ca(0x0002c90000000401), []uint16{0x0010, 0x7FFF, 0x8002}},
		{"storage both (no allow_both_pkeys)", ca(0x123454), []uint16{0x0010, 0x7FFF, 0x8080}},
		{"auto", ca(0x99), []uint16{0x0010, 0x7FFF, 0x8003}},
		{"switch port 0", sw0, []uint16{0xFFFF}},
		{"router", PortRef{NodeType: mad.NodeTypeRouter, PortGUID: 0x700, Port: 1}, []uint16{0x7FFF}},
	} {
		if got := ps.PKeys(c.p); !slices.Equal(got, c.want) {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
	ps.AllowBothPKeys = true
	if got, want := ps.PKeys(ca(0x123454)), []uint16{0x0010, 0x7FFF, 0x8080, 0x0080}; !slices.Equal(got, want) {
		t.Errorf("both with allow_both_pkeys: %#x, want %#x", got, want)
	}
	ps.AllowBothPKeys = false
	// PKeyCap cuts the table.
	capped := ca(0x0002c90000000101)
	capped.PKeyCap = 2
	if got := ps.PKeys(capped); len(got) != 2 {
		t.Errorf("capped table: %#x", got)
	}
	// A switch port facing a limited member holds its partitions as full
	// entries and enforces; facing a switch it does nothing.
	peer := ca(0x0002c90000000301)
	swp := PortRef{NodeType: mad.NodeTypeSwitch, NodeGUID: 0x500, PortGUID: 0x500, Port: 3, PKeyCap: 32, Peer: &peer}
	if got, want := ps.PKeys(swp), []uint16{0x8010, 0xFFFF, 0x8001}; !slices.Equal(got, want) {
		t.Errorf("switch port toward a CA: %#x, want %#x", got, want)
	}
	if in, out := ps.Enforce(swp); !in || !out {
		t.Error("switch port toward a CA does not enforce")
	}
	swp.PKeyCap = 2
	if in, out := ps.Enforce(swp); in || out || ps.PKeys(swp) != nil {
		t.Error("switch port enforces although the keys do not fit")
	}
	swp.PKeyCap = 0
	swp.Peer = &PortRef{NodeType: mad.NodeTypeSwitch, PortGUID: 0x600, Port: 5}
	if in, out := ps.Enforce(swp); in || out || ps.PKeys(swp) != nil {
		t.Error("switch port between switches enforces")
	}
	swp.Peer = &peer
	ps.NoEnforcement = true
	if in, out := ps.Enforce(swp); in || out {
		t.Error("enforcement off, yet the port enforces")
	}
	if in, out := ps.Enforce(peer); in || out {
		t.Error("a CA port enforces")
	}
}

// TestDefaultPartition: without a rule for it the default partition has
// every port limited and the SM's full; without a file (nil) every port
// full.
func TestDefaultPartition(t *testing.T) {
	ps, err := ParsePartitions(strings.NewReader("P1=0x1:0x10=full;"))
	if err != nil {
		t.Fatal(err)
	}
	sm := ca(0x20)
	sm.SM = true
	for _, c := range []struct {
		ps   *Partitions
		p    PortRef
		want []uint16
	}{
		{ps, ca(0x10), []uint16{0x7FFF, 0x8001}},
		{ps, ca(0x30), []uint16{0x7FFF}},
		{ps, sm, []uint16{0xFFFF}},
		{nil, ca(0x10), []uint16{0xFFFF}},
		{DefaultPartitions(), sm, []uint16{0xFFFF}},
	} {
		if got := c.ps.PKeys(c.p); !slices.Equal(got, c.want) {
			t.Errorf("%#x: %#x, want %#x", c.p.PortGUID, got, c.want)
		}
	}
	if m := ps.Membership(ca(0x10), 0x8001); m != Full {
		t.Errorf("membership %v", m)
	}
	if m := ps.Membership(ca(0x30), 1); m != 0 {
		t.Errorf("non-member: %v", m)
	}
	// An empty file still has the default partition.
	ps, err = ParsePartitions(strings.NewReader("# nothing\n\n"))
	if err != nil || len(ps.Parts) != 1 || !slices.Equal(ps.PKeys(sm), []uint16{0xFFFF}) {
		t.Fatalf("empty file: %v %+v", err, ps)
	}
	b := PKeyTableBlocks(ps.PKeys(sm))
	if len(b) != 1 || b[0].PKey[0] != 0xFFFF || b[0].PKey[1] != 0 {
		t.Errorf("blocks %+v", b)
	}
	if b := PKeyTableBlocks(make([]uint16, 33)); len(b) != 2 {
		t.Errorf("33 keys in %d blocks", len(b))
	}
}

// TestPartitionErrors: bad input fails with the line of the fault and
// ErrSyntax.
func TestPartitionErrors(t *testing.T) {
	for _, c := range []struct {
		in   string
		line int
		msg  string
	}{
		{"P=0x1 0x10 ;", 1, "without ':'"},
		{"\n\nP=0x1 : 0x10", 3, "not ended by ';'"},
		{"P=0x10000 : ALL ;", 1, "not a 16-bit number"},
		{"P=0x8000 : ALL ;", 1, "invalid key"},
		{"P=zz : ALL ;", 1, "P_Key"},
		{"# c\nP=1,bogus : ALL ;", 2, "unknown partition flag"},
		{"P=1,defmember=half : ALL ;", 1, "defmember"},
		{"P=1,sl=16 : ALL ;", 1, "sl="},
		{"P=1 :\n ALL,\n nobody=full ;", 3, "not a port GUID"},
		{"P=1 : 0x0 ;", 1, "not a port GUID"},
		{"P=1 :\n\n mgid=10.0.0.1 ;", 3, "not a GID"},
		{"P=1 :\n mgid=fe80::1 ;", 2, "not a multicast GID"},
		{"P=1 :\n mgid=ff12::1,weird ;", 2, "name=value"},
		{"P=1 :\n mgid=ff12::1,color=3 ;", 2, "unknown flag"},
		{"P=1 : ALL\x01 ;", 1, "control character"},
	} {
		_, err := ParsePartitions(strings.NewReader(c.in))
		var se *SyntaxError
		if !errors.Is(err, ErrSyntax) || !errors.As(err, &se) || se.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want line %d %q", c.in, err, c.line, c.msg)
		}
	}
}

// TestPartitionsTruncated: every prefix of a good file parses or fails
// with ErrSyntax; cut inside a definition, it fails.
func TestPartitionsTruncated(t *testing.T) {
	b, err := os.ReadFile("testdata/partitions.conf")
	if err != nil {
		t.Fatal(err)
	}
	last := strings.LastIndexByte(string(b), ';')
	for n := range len(b) {
		_, err := ParsePartitions(strings.NewReader(string(b[:n])))
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Fatalf("cut at %d: %v", n, err)
		}
		// Inside the last definition (after its start) the cut fails.
		if n > strings.LastIndex(string(b), "Auto") && n <= last && err == nil {
			t.Fatalf("cut at %d inside a definition: no error", n)
		}
	}
}

func FuzzParsePartitions(f *testing.F) {
	b, err := os.ReadFile("testdata/partitions.conf")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	f.Add("Default=0x7fff : ALL=full ;")
	f.Add("P=1 :\n mgid=ff12:401b::1,sl=1\n ALL;")
	f.Add("a : b : c ; ;")
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePartitions(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error without ErrSyntax: %v", err)
			}
			return
		}
		if len(ps.Parts) == 0 || ps.Parts[0].PKey != DefaultPKey {
			t.Fatalf("no default partition first: %+v", ps.Parts)
		}
		seen := map[uint16]bool{}
		for _, p := range ps.Parts {
			if p.PKey == 0 || p.PKey > 0x7FFF || seen[p.PKey] {
				t.Fatalf("bad or repeated P_Key %#x", p.PKey)
			}
			seen[p.PKey] = true
		}
		sm := PortRef{NodeType: mad.NodeTypeCA, PortGUID: 0x123451, Port: 1, SM: true, PKeyCap: 64}
		keys := ps.PKeys(sm)
		if len(keys) == 0 || len(keys) > 64 || slices.Contains(keys, 0) || !slices.Contains(keys, 0xFFFF) {
			t.Fatalf("SM port's keys %#x", keys)
		}
		sw := PortRef{NodeType: mad.NodeTypeSwitch, Port: 1, PKeyCap: 32, Peer: &sm}
		for _, k := range ps.PKeys(sw) {
			if k&0x8000 == 0 {
				t.Fatalf("switch port key %#x without the full bit", k)
			}
		}
	})
}

// TestPortRefs: the PortRef constructors take the capacities from the
// attributes the SM reads.
func TestPortRefs(t *testing.T) {
	ni := mad.NodeInfo{NodeType: mad.NodeTypeCA, NodeGUID: 0x10, PortGUID: 0x11, PartitionCap: 64}
	pi := mad.PortInfo{VLCap: 4, VLArbitrationHighCap: 8, VLArbitrationLowCap: 16}
	ca := EndPortRef(ni, pi, 1, true)
	if ca != (PortRef{NodeType: mad.NodeTypeCA, NodeGUID: 0x10, PortGUID: 0x11, Port: 1, SM: true, PKeyCap: 64,
		VLCap: 4, VLArbHighCap: 8, VLArbLowCap: 16}) {
		t.Errorf("CA %+v", ca)
	}
	sw := mad.NodeInfo{NodeType: mad.NodeTypeSwitch, NodeGUID: 0x20, PortGUID: 0x20, PartitionCap: 64}
	si := mad.SwitchInfo{PartitionEnforcementCap: 32, EnhancedPort0: true}
	p0 := SwitchPortRef(sw, si, pi, 0, &ca)
	if p0.PKeyCap != 64 || p0.Peer != nil || !p0.EnhancedPort0 || p0.Port != 0 {
		t.Errorf("switch port 0 %+v", p0)
	}
	p3 := SwitchPortRef(sw, si, pi, 3, &ca)
	if p3.PKeyCap != 32 || p3.Peer != &ca || p3.Port != 3 || p3.VLArbLowCap != 16 {
		t.Errorf("switch port 3 %+v", p3)
	}
	if in, out := DefaultPartitions().Enforce(p3); !in || !out {
		t.Error("switch port toward a CA does not enforce")
	}
}
