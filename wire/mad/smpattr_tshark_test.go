// Wireshark's reading of the SM and PMA attributes: the test writes each
// sample attribute into an SMP or a PMA MAD, wraps it in a native
// InfiniBand packet (LRH, BTH, DETH, MAD, ICRC, VCRC) in a pcap of
// Wireshark's exported-PDU link type (tshark 4.0 does not read
// LINKTYPE_INFINIBAND pcaps, but dissects the same bytes handed to its
// "infiniband" dissector), has tshark decode it and compares every field
// tshark shows with the value the sample set.

package mad

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ibFrame is one MAD in a native IB packet and what tshark must show of it.
type ibFrame struct {
	name   string
	class  Class
	method Method
	attr   AttributeID
	mod    uint32
	encode func(data []byte) // writes the attribute at PerfDataOffset/64
	check  func(c *wsCheck)
}

// ibPacket wraps a MAD in LRH, BTH (UD SEND ONLY to QP0 or QP1), DETH,
// a zero ICRC and a zero VCRC (tshark checks neither).
func ibPacket(mad []byte, qp uint32) []byte {
	const lrh, bth, deth, icrc = 8, 12, 8, 4
	p := make([]byte, lrh+bth+deth+len(mad)+icrc+2)
	vl := byte(15)
	if qp == GSIQPN {
		vl = 0
	}
	p[0] = vl << 4
	p[1] = 2 // LNH: IBA local, a BTH follows
	binary.BigEndian.PutUint16(p[2:], 0x0001)
	binary.BigEndian.PutUint16(p[4:], uint16((len(p)-2)/4))
	binary.BigEndian.PutUint16(p[6:], 0x0002)
	b := p[lrh:]
	b[0] = 0x64 // UD SEND ONLY
	binary.BigEndian.PutUint16(b[2:], 0xffff)
	binary.BigEndian.PutUint32(b[4:], qp)
	binary.BigEndian.PutUint32(b[8:], 0x000123)
	d := b[bth:]
	if qp == GSIQPN {
		binary.BigEndian.PutUint32(d[0:], GSIQKey)
	}
	binary.BigEndian.PutUint32(d[4:], qp)
	copy(d[deth:], mad)
	return p
}

// exportedPDU prefixes a packet with the exported-PDU tags that hand it
// to the dissector named proto.
func exportedPDU(proto string, pkt []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, 12) // EXP_PDU_TAG_PROTO_NAME
	b = binary.BigEndian.AppendUint16(b, uint16(len(proto)))
	b = append(b, proto...)
	b = append(b, 0, 0, 0, 0) // end of options
	return append(b, pkt...)
}

// writeExportedPcap writes packets to a classic pcap of link type 252
// (LINKTYPE_WIRESHARK_UPPER_PDU).
func writeExportedPcap(t *testing.T, path string, pkts [][]byte) {
	t.Helper()
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 0xa1b2c3d4)
	b = le.AppendUint16(b, 2)
	b = le.AppendUint16(b, 4)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 65535)
	b = le.AppendUint32(b, 252)
	for i, p := range pkts {
		p = exportedPDU("infiniband", p)
		b = le.AppendUint32(b, uint32(1795313706+i))
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, uint32(len(p)))
		b = le.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// wsFrame is one frame of tshark's JSON, flattened: each key of the
// infiniband layer, at any depth, maps to its values in the order tshark
// shows them.
type wsFrame map[string][]string

func flattenJSON(out wsFrame, v any, key string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			flattenJSON(out, x, k)
		}
	case []any:
		for _, x := range v {
			flattenJSON(out, x, key)
		}
	case string:
		out[key] = append(out[key], v)
	}
}

// runTshark decodes path and returns its frames' infiniband layers, and
// their whole flattened layers (for expert info).
func runTshark(t *testing.T, path string) (ib, all []wsFrame) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed")
	}
	cmd := exec.Command(tshark, "-r", path, "-T", "json", "--no-duplicate-keys")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	var doc []struct {
		Source struct {
			Layers map[string]any `json:"layers"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, d := range doc {
		f, a := wsFrame{}, wsFrame{}
		flattenJSON(f, d.Source.Layers["infiniband"], "infiniband")
		flattenJSON(a, d.Source.Layers, "")
		ib, all = append(ib, f), append(all, a)
	}
	return ib, all
}

// wsCheck compares one frame's fields with the values we encoded.
type wsCheck struct {
	t    *testing.T
	what string
	f    wsFrame
	used map[string]bool
}

// values returns tshark's values of key, which must be there.
func (c *wsCheck) values(key string) []string {
	c.t.Helper()
	c.used[key] = true
	v, ok := c.f[key]
	if !ok {
		c.t.Errorf("%s: tshark shows no %s", c.what, key)
	}
	return v
}

func parseWSUint(s string) (uint64, error) {
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// uints compares the values tshark shows for key, in order, with want.
func (c *wsCheck) uints(key string, want ...uint64) {
	c.t.Helper()
	got := c.values(key)
	if got == nil {
		return
	}
	if len(got) != len(want) {
		c.t.Errorf("%s: tshark shows %d values of %s, we set %d", c.what, len(got), key, len(want))
		return
	}
	for i, s := range got {
		v, err := parseWSUint(s)
		if err != nil || v != want[i] {
			c.t.Errorf("%s: %s[%d]: tshark shows %q, we set %#x", c.what, key, i, s, want[i])
		}
	}
}

// uint compares a field shown once.
func (c *wsCheck) uint(key string, want uint64) { c.t.Helper(); c.uints(key, want) }

func (c *wsCheck) bool(key string, want bool) { c.t.Helper(); c.uint(key, b2u(want)) }

// hex compares a byte string tshark shows as colon-separated hex.
func (c *wsCheck) hex(key string, want []byte) {
	c.t.Helper()
	got := c.values(key)
	if len(got) != 1 {
		return
	}
	if s := strings.ReplaceAll(got[0], ":", ""); s != bytesHex(want) {
		c.t.Errorf("%s: %s: tshark shows %s, we set %s", c.what, key, s, bytesHex(want))
	}
}

func bytesHex(b []byte) string {
	const digits = "0123456789abcdef"
	s := make([]byte, 0, 2*len(b))
	for _, x := range b {
		s = append(s, digits[x>>4], digits[x&0xf])
	}
	return string(s)
}

// unused reports fields under prefix that the check did not compare.
func (c *wsCheck) unused(prefix string) {
	c.t.Helper()
	for k := range c.f {
		if strings.HasPrefix(k, prefix) && !c.used[k] && !strings.Contains(k, "reserved") {
			c.t.Errorf("%s: tshark field %s not compared", c.what, k)
		}
	}
}

// TestTsharkSMAttrs has Wireshark decode every attribute codec's sample.
func TestTsharkSMAttrs(t *testing.T) {
	frames := tsharkFrames()
	var pkts [][]byte
	for _, fr := range frames {
		m := make([]byte, Size)
		h := HeaderFields{BaseVersion: BaseVersion, MgmtClass: fr.class, ClassVersion: 1,
			Method: fr.method, TransactionID: 0x1122334455667788, AttributeID: fr.attr,
			AttributeModifier: fr.mod}
		h.Encode(m)
		fr.encode(m[PerfDataOffset:])
		qp := uint32(0)
		if fr.class == ClassPerf || fr.class == ClassSubnAdm {
			qp = GSIQPN
		}
		pkts = append(pkts, ibPacket(m, qp))
	}
	path := filepath.Join(t.TempDir(), "smp.pcap")
	if dir := os.Getenv("SOFTRDMA_SMP_PCAP_DIR"); dir != "" {
		path = filepath.Join(dir, "smp.pcap") // to look at it by hand
	}
	writeExportedPcap(t, path, pkts)
	ib, all := runTshark(t, path)
	if len(ib) != len(frames) {
		t.Fatalf("tshark decoded %d frames, we wrote %d", len(ib), len(frames))
	}
	for i, fr := range frames {
		c := &wsCheck{t: t, what: fr.name, f: ib[i], used: map[string]bool{}}
		if _, ok := all[i]["_ws.malformed"]; ok {
			t.Errorf("%s: tshark reports a malformed packet: %q", fr.name, all[i]["_ws.expert.message"])
		}
		if msg, ok := all[i]["_ws.expert.message"]; ok {
			t.Errorf("%s: tshark's expert info: %q", fr.name, msg)
		}
		c.uint("infiniband.mad.attributeid", uint64(fr.attr))
		c.uint("infiniband.mad.attributemodifier", uint64(fr.mod))
		fr.check(c)
	}
}
