package policy

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

func parseQoSFile(t testing.TB, name string) *QoS {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q, err := ParseQoS(f)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestParseQoS reads the QoS options and the per-type sets fall back,
// field by field, to the general set.
func TestParseQoS(t *testing.T) {
	q := parseQoSFile(t, "testdata/opensm.conf")
	if !q.Enabled || q.General.MaxVLs != 8 || q.General.HighLimit != 4 || len(q.General.VLArbHigh) != 1 ||
		q.General.VLArbLow[1] != (mad.VLArbEntry{VL: 2, Weight: 192}) || q.General.SL2VL[15] != 15 {
		t.Fatalf("general: %+v", q.General)
	}
	caP := q.Params(PortRef{NodeType: mad.NodeTypeCA, Port: 1})
	if caP.MaxVLs != 2 || caP.HighLimit != 4 || caP.SL2VL[1] != 1 || len(caP.VLArbLow) != 2 {
		t.Errorf("CA params %+v", caP)
	}
	swe := q.Params(PortRef{NodeType: mad.NodeTypeSwitch, Port: 3})
	if swe.MaxVLs != 8 || swe.HighLimit != 255 || swe.SL2VL[8] != 0 {
		t.Errorf("switch port params %+v", swe)
	}
	if p := q.Params(PortRef{NodeType: mad.NodeTypeSwitch}); p.MaxVLs != 1 {
		t.Errorf("switch port 0 params %+v", p)
	}
	if p := q.Params(PortRef{NodeType: mad.NodeTypeRouter, Port: 1}); len(p.VLArbLow) != 34 || p.MaxVLs != 8 {
		t.Errorf("router params %+v", p)
	}
	// Without the file: OpenSM's defaults.
	var none *QoS
	d := none.Params(PortRef{NodeType: mad.NodeTypeCA})
	if d.MaxVLs != 15 || d.HighLimit != 0 || d.SL2VL[15] != 7 || d.VLArbHigh[0].Weight != 4 || d.VLArbLow[0].Weight != 0 || d.VLArbLow[14].Weight != 4 {
		t.Errorf("defaults %+v", d)
	}
	if q, err := ParseQoS(strings.NewReader("qos FALSE\n")); err != nil || q.Enabled {
		t.Errorf("qos FALSE: %v %+v", err, q)
	}
}

// TestPortQoS: the tables fitted to a port: operational VLs by VLCap and
// max_op_vls (not qos_max_vls, as in OpenSM), SL2VL masked into the operated VLs, arbitration blocks cut to
// the capacities.
func TestPortQoS(t *testing.T) {
	q := parseQoSFile(t, "testdata/opensm.conf")
	// A CA with VL0-7 and 8-entry tables, qos_ca_max_vls 2: still VL0-7
	// (OpenSM's link manager sets OperVLs from VLCap and max_op_vls).
	p := q.Port(PortRef{NodeType: mad.NodeTypeCA, Port: 1, VLCap: 4, VLArbHighCap: 8, VLArbLowCap: 8})
	if p.OperationalVLs != 4 || p.HighLimit != 4 || len(p.VLArbHigh) != 1 || len(p.VLArbLow) != 1 {
		t.Fatalf("CA: %+v", p)
	}
	if p.SL2VL.VL[0] != 0 || p.SL2VL.VL[1] != 1 || p.SL2VL.VL[15] != 1 {
		t.Errorf("CA SL2VL %v", p.SL2VL.VL)
	}
	if p.VLArbLow[0].Entry[0] != (mad.VLArbEntry{VL: 1, Weight: 64}) || p.VLArbLow[0].Entry[2] != (mad.VLArbEntry{}) {
		t.Errorf("CA low table %+v", p.VLArbLow[0].Entry[:3])
	}
	// A switch port with VL0-3 (VLCap 3) under max_vls 8: VL0-3; SL 7
	// (VL7) masks to VL3, SL15 stays VL15 (drop).
	p = q.Port(PortRef{NodeType: mad.NodeTypeSwitch, Port: 2, VLCap: 3, VLArbHighCap: 8, VLArbLowCap: 8})
	if p.OperationalVLs != 3 || p.HighLimit != 255 || p.SL2VL.VL[7] != 3 || p.SL2VL.VL[5] != 1 || p.SL2VL.VL[15] != 15 {
		t.Errorf("switch port: ops %d limit %d SL2VL %v", p.OperationalVLs, p.HighLimit, p.SL2VL.VL)
	}
	// A router port with a 40-entry low table and 34 entries given: two
	// blocks, entries 32 and 33 set, 34-39 empty.
	p = q.Port(PortRef{NodeType: mad.NodeTypeRouter, Port: 1, VLCap: 5, VLArbHighCap: 0, VLArbLowCap: 40})
	if len(p.VLArbHigh) != 0 || len(p.VLArbLow) != 2 || p.VLArbLow[1].Entry[1] != (mad.VLArbEntry{VL: 3, Weight: 34}) ||
		p.VLArbLow[1].Entry[2] != (mad.VLArbEntry{}) || p.OperationalVLs != 5 {
		t.Errorf("router: %+v", p)
	}
	// max_op_vls 2: VL0-1 on a VL0-7 port, SL2VL masked into them.
	q2 := *q
	q2.MaxOpVLs = 2
	if p := q2.Port(PortRef{NodeType: mad.NodeTypeSwitch, Port: 2, VLCap: 4}); p.OperationalVLs != 2 || p.SL2VL.VL[3] != 1 || p.SL2VL.VL[15] != 15 {
		t.Errorf("max_op_vls 2: ops %d SL2VL %v", p.OperationalVLs, p.SL2VL.VL)
	}
	// A low table longer than the capacity is cut at it.
	p = q.Port(PortRef{NodeType: mad.NodeTypeRouter, Port: 1, VLArbLowCap: 3})
	if len(p.VLArbLow) != 1 || p.VLArbLow[0].Entry[2].Weight != 3 || p.VLArbLow[0].Entry[3] != (mad.VLArbEntry{}) {
		t.Errorf("router cut to 3: %+v", p.VLArbLow)
	}
	// max_vls 15 on a VL0-14 port: every VL, SL i to VL i.
	var none *QoS
	p = none.Port(PortRef{NodeType: mad.NodeTypeCA, Port: 1, VLCap: 5, VLArbHighCap: 64, VLArbLowCap: 64})
	want := []uint8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 7}
	if p.OperationalVLs != 5 || !slices.Equal(p.SL2VL.VL[:], want) || len(p.VLArbHigh) != 2 {
		t.Errorf("defaults on VL0-14: %+v", p)
	}
}

// TestQoSErrors: bad values fail with the line and ErrSyntax.
func TestQoSErrors(t *testing.T) {
	for _, c := range []struct {
		in   string
		line int
		msg  string
	}{
		{"qos maybe", 1, "TRUE or FALSE"},
		{"# x\nqos_max_vls 16", 2, "1 to 15"},
		{"qos_max_vls 0", 1, "1 to 15"},
		{"max_op_vls 6", 1, "1 to 5"},
		{"qos_high_limit 256", 1, "0 to 255"},
		{"qos_vlarb_high 0:4,15:1", 1, "VL 0-14"},
		{"qos_vlarb_low 0:256", 1, "weight 0-255"},
		{"qos_vlarb_low 0", 1, "VL:weight"},
		{"qos_vlarb_low ,", 1, "no entries"},
		{"qos_vlarb_low " + strings.Repeat("1:1,", 65), 1, "more than 64"},
		{"qos_sl2vl 0,1,2", 1, "3 VLs"},
		{"qos_sl2vl " + strings.Repeat("1,", 17), 1, "more than 16"},
		{"qos_ca_sl2vl " + strings.Repeat("16,", 16), 1, "0 to 15"},
		{"qos_swe_color 3", 1, "not a QoS option"},
		{"qos_ca_max_vls", 1, "no value"},
		{"qos TRUE\nqos TRUE", 2, "given again (first on line 1)"},
	} {
		_, err := ParseQoS(strings.NewReader(c.in))
		var se *SyntaxError
		if !errors.Is(err, ErrSyntax) || !errors.As(err, &se) || se.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want line %d %q", c.in, err, c.line, c.msg)
		}
	}
}

// TestQoSTruncated: every prefix of a good file parses or fails with
// ErrSyntax, never anything else.
func TestQoSTruncated(t *testing.T) {
	b, err := os.ReadFile("testdata/opensm.conf")
	if err != nil {
		t.Fatal(err)
	}
	fails := 0
	for n := range len(b) {
		_, err := ParseQoS(strings.NewReader(string(b[:n])))
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("cut at %d: %v", n, err)
			}
			fails++
		}
	}
	// Cuts inside the SL2VL lists leave fewer than 16 VLs.
	if fails == 0 {
		t.Fatal("no truncation detected")
	}
}

func FuzzParseQoS(f *testing.F) {
	b, err := os.ReadFile("testdata/opensm.conf")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	f.Add("qos TRUE\nqos_sl2vl 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n")
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQoS(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error without ErrSyntax: %v", err)
			}
			return
		}
		for _, typ := range []uint8{mad.NodeTypeCA, mad.NodeTypeSwitch, mad.NodeTypeRouter} {
			for vlcap := uint8(1); vlcap <= 5; vlcap++ {
				p := q.Port(PortRef{NodeType: typ, Port: 1, VLCap: vlcap, VLArbHighCap: 8, VLArbLowCap: 40})
				n := vlCount(p.OperationalVLs)
				if p.OperationalVLs < 1 || p.OperationalVLs > vlcap {
					t.Fatalf("operational VLs %d on VLCap %d", p.OperationalVLs, vlcap)
				}
				for _, v := range p.SL2VL.VL {
					if v != 15 && int(v) >= n {
						t.Fatalf("SL2VL %v beyond %d VLs", p.SL2VL.VL, n)
					}
				}
				if len(p.VLArbHigh) != 1 || len(p.VLArbLow) != 2 {
					t.Fatalf("blocks %d/%d", len(p.VLArbHigh), len(p.VLArbLow))
				}
				for _, e := range p.VLArbHigh[0].Entry[8:] {
					if e != (mad.VLArbEntry{}) {
						t.Fatal("high table past its capacity")
					}
				}
			}
		}
	})
}
