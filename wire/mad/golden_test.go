// Golden test: the CM MADs two Linux rxe peers exchanged (rping, ucmatose,
// udaddy, ib_write_bw -R), read from pcaps in testdata/ and compared field
// by field with Wireshark's (tshark 4.0) decoding of the same frames, kept
// beside each pcap as JSON. The pcap reader and the Ethernet/IP/UDP/BTH/DETH
// unwrapping below are deliberately minimal and local to the test.

package mad

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// gsiPacket is one RoCEv2 UD SEND ONLY packet to or from QP1.
type gsiPacket struct {
	frame    int // 1-based frame number, as tshark counts
	src, dst netip.Addr
	bth      []byte // 12 bytes
	deth     []byte // 8 bytes
	mad      []byte // payload between DETH and ICRC
}

// rocePacket is any RoCEv2 packet: its frame, IP addresses and the UDP
// payload (BTH onwards, ICRC included).
type rocePacket struct {
	frame    int
	src, dst netip.Addr
	payload  []byte
}

const roceV2Port = 4791

// readPcap returns the RoCEv2 packets of a classic pcap file with Ethernet
// link type.
func readPcap(t testing.TB, path string) []rocePacket {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 24 {
		t.Fatalf("%s: no pcap global header", path)
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(data) {
	case 0xa1b2c3d4, 0xa1b23c4d: // microsecond, nanosecond timestamps
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		t.Fatalf("%s: not a pcap file (magic %x)", path, data[:4])
	}
	if lt := bo.Uint32(data[20:]); lt != 1 {
		t.Fatalf("%s: link type %d, want 1 (Ethernet)", path, lt)
	}
	var out []rocePacket
	off := 24
	for frame := 1; off < len(data); frame++ {
		if off+16 > len(data) {
			t.Fatalf("%s: frame %d: truncated record header", path, frame)
		}
		capLen := int(bo.Uint32(data[off+8:]))
		off += 16
		if off+capLen > len(data) {
			t.Fatalf("%s: frame %d: truncated record", path, frame)
		}
		if p, ok := roceFromEthernet(data[off : off+capLen]); ok {
			p.frame = frame
			out = append(out, p)
		}
		off += capLen
	}
	return out
}

// roceFromEthernet unwraps Ethernet (with an optional VLAN tag), IPv4 or
// IPv6 (no extension headers) and UDP to port 4791.
func roceFromEthernet(f []byte) (rocePacket, bool) {
	var p rocePacket
	if len(f) < 14 {
		return p, false
	}
	etype, l3 := binary.BigEndian.Uint16(f[12:]), f[14:]
	if etype == 0x8100 && len(f) >= 18 {
		etype, l3 = binary.BigEndian.Uint16(f[16:]), f[18:]
	}
	var l4 []byte
	switch etype {
	case 0x0800:
		if len(l3) < 20 || l3[0]>>4 != 4 || l3[9] != 17 {
			return p, false
		}
		ihl, total := int(l3[0]&0xF)*4, int(binary.BigEndian.Uint16(l3[2:]))
		if ihl < 20 || total < ihl || total > len(l3) {
			return p, false
		}
		p.src, p.dst = netip.AddrFrom4([4]byte(l3[12:16])), netip.AddrFrom4([4]byte(l3[16:20]))
		l4 = l3[ihl:total]
	case 0x86DD:
		if len(l3) < 40 || l3[6] != 17 {
			return p, false
		}
		plen := int(binary.BigEndian.Uint16(l3[4:]))
		if 40+plen > len(l3) {
			return p, false
		}
		p.src, p.dst = netip.AddrFrom16([16]byte(l3[8:24])), netip.AddrFrom16([16]byte(l3[24:40]))
		l4 = l3[40 : 40+plen]
	default:
		return p, false
	}
	if len(l4) < 8 || binary.BigEndian.Uint16(l4[2:]) != roceV2Port {
		return p, false
	}
	ulen := int(binary.BigEndian.Uint16(l4[4:]))
	if ulen < 8 || ulen > len(l4) {
		return p, false
	}
	p.payload = l4[8:ulen]
	return p, true
}

const opUDSendOnly = 0x64

// gsiPackets picks the UD SEND ONLY packets (opcode 0x64, BTH 12 + DETH 8)
// and cuts their payload before the 4-byte ICRC.
func gsiPackets(pkts []rocePacket) []gsiPacket {
	var out []gsiPacket
	for _, p := range pkts {
		if len(p.payload) < 12+8+4 || p.payload[0] != opUDSendOnly {
			continue
		}
		pad := int(p.payload[1]>>4) & 3
		end := len(p.payload) - 4 - pad
		if end < 20 {
			continue
		}
		out = append(out, gsiPacket{frame: p.frame, src: p.src, dst: p.dst,
			bth: p.payload[:12], deth: p.payload[12:20], mad: p.payload[20:end]})
	}
	return out
}

// tsharkFrame is one frame of tshark's JSON, flattened: every key of the
// infiniband layer and its sub-trees maps to its string value. Keys seen
// more than once (such as infiniband.reserved) are dropped.
type tsharkFrame map[string]string

func readTsharkJSON(t testing.TB, path string) map[int]tsharkFrame {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Source struct {
			Layers map[string]any `json:"layers"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[int]tsharkFrame{}
	for _, d := range doc {
		frame, _ := d.Source.Layers["frame"].(map[string]any)
		num, err := strconv.Atoi(fmt.Sprint(frame["frame.number"]))
		if err != nil {
			t.Fatalf("%s: frame without a number", path)
		}
		f, dup := tsharkFrame{}, map[string]bool{}
		var walk func(m map[string]any)
		walk = func(m map[string]any) {
			for k, v := range m {
				switch v := v.(type) {
				case map[string]any:
					walk(v)
				case string:
					if _, seen := f[k]; seen {
						dup[k] = true
					}
					f[k] = v
				default: // arrays of repeated keys
					dup[k] = true
				}
			}
		}
		if ib, ok := d.Source.Layers["infiniband"].(map[string]any); ok {
			walk(ib)
		}
		for k := range dup {
			delete(f, k)
		}
		out[num] = f
	}
	return out
}

// checker compares decoded values with one tshark frame.
type checker struct {
	t     *testing.T
	frame int
	js    tsharkFrame
	used  map[string]bool
}

func (c *checker) value(key string) (string, bool) {
	c.t.Helper()
	v, ok := c.js[key]
	if !ok {
		c.t.Errorf("frame %d: tshark has no %s", c.frame, key)
	}
	c.used[key] = true
	return v, ok
}

// uint compares a number tshark shows as 0x-prefixed hex or as decimal.
func (c *checker) uint(key string, got uint64) {
	c.t.Helper()
	s, ok := c.value(key)
	if !ok {
		return
	}
	var want uint64
	var err error
	if h, isHex := strings.CutPrefix(s, "0x"); isHex {
		want, err = strconv.ParseUint(h, 16, 64)
	} else {
		want, err = strconv.ParseUint(s, 10, 64)
	}
	if err != nil {
		c.t.Errorf("frame %d: %s = %q: %v", c.frame, key, s, err)
		return
	}
	if got != want {
		c.t.Errorf("frame %d: %s = %#x, tshark says %#x", c.frame, key, got, want)
	}
}

func (c *checker) bool(key string, got bool) { c.t.Helper(); c.uint(key, b2u(got)) }

// bytes compares a byte string tshark shows as colon-separated hex.
func (c *checker) bytes(key string, got []byte) {
	c.t.Helper()
	s, ok := c.value(key)
	if !ok {
		return
	}
	want, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil {
		c.t.Errorf("frame %d: %s = %q: %v", c.frame, key, s, err)
		return
	}
	if !bytes.Equal(got, want) {
		c.t.Errorf("frame %d: %s = %x, tshark says %x", c.frame, key, got, want)
	}
}

// addr compares an IP address tshark shows in text form.
func (c *checker) addr(key string, got netip.Addr) {
	c.t.Helper()
	s, ok := c.value(key)
	if !ok {
		return
	}
	if want, err := netip.ParseAddr(s); err != nil || want != got {
		c.t.Errorf("frame %d: %s = %v, tshark says %q", c.frame, key, got, s)
	}
}

// unused reports keys with the given prefix that the test did not compare,
// apart from reserved fields.
func (c *checker) unused(prefix string) {
	c.t.Helper()
	for k := range c.js {
		if strings.HasPrefix(k, prefix) && !c.used[k] && !strings.Contains(k, "reserved") {
			c.t.Errorf("frame %d: tshark field %s not compared", c.frame, k)
		}
	}
}

type goldenFile struct {
	name  string
	attrs []AttributeID // CM messages in capture order
}

var goldenFiles = []goldenFile{
	{"rping", []AttributeID{AttrREQ, AttrREP, AttrRTU, AttrDREQ, AttrDREP}},
	{"ucmatose", []AttributeID{AttrREQ, AttrREP, AttrRTU, AttrDREQ, AttrDREP}},
	{"udaddy", []AttributeID{AttrSIDRReq, AttrSIDRRep}},
	// Two connections; both ends of the first send a DREQ at once.
	{"ib_write_bw-rdma_cm", []AttributeID{AttrREQ, AttrREP, AttrRTU, AttrREQ, AttrREP, AttrRTU,
		AttrDREQ, AttrDREP, AttrDREQ, AttrDREQ, AttrDREP, AttrDREP}},
}

func TestGolden(t *testing.T) {
	for _, gf := range goldenFiles {
		t.Run(gf.name, func(t *testing.T) {
			pkts := readPcap(t, "testdata/"+gf.name+".pcap")
			js := readTsharkJSON(t, "testdata/"+gf.name+".json")
			gsi := gsiPackets(pkts)

			// Every frame tshark decoded as a MAD is one we found, and
			// the other way round.
			var jsFrames, ourFrames []int
			for n, f := range js {
				if _, ok := f["infiniband.mad.baseversion"]; ok {
					jsFrames = append(jsFrames, n)
				}
			}
			for _, g := range gsi {
				ourFrames = append(ourFrames, g.frame)
			}
			slices.Sort(jsFrames)
			if !slices.Equal(jsFrames, ourFrames) {
				t.Fatalf("MAD frames: tshark %v, ours %v", jsFrames, ourFrames)
			}

			var attrs []AttributeID
			conns := newConnTracker()
			var sidrReq SIDRReq
			var sidrRep SIDRRep
			var sidrRepFrame gsiPacket
			for _, g := range gsi {
				c := &checker{t: t, frame: g.frame, js: js[g.frame], used: map[string]bool{}}
				checkTransport(c, g)
				m, err := Parse(g.mad)
				if err != nil {
					t.Fatalf("frame %d: %v", g.frame, err)
				}
				c.bytes("infiniband.mad", m)
				checkHeader(c, m)
				msg := m.CM()
				if msg == nil {
					t.Fatalf("frame %d: no CM message (attribute %v)", g.frame, m.AttributeID())
				}
				attrs = append(attrs, msg.AttributeID())
				switch msg := msg.(type) {
				case REQ:
					checkREQ(c, g, msg)
					conns.add(msg.LocalCommID(), msg.LocalQPN())
				case REP:
					checkREP(c, msg)
					conns.add(msg.LocalCommID(), msg.LocalQPN())
					conns.pair(msg.LocalCommID(), msg.RemoteCommID())
				case RTU:
					c.uint("infiniband.cm.rtu.localcommid", uint64(msg.LocalCommID()))
					c.uint("infiniband.cm.rtu.remotecommid", uint64(msg.RemoteCommID()))
					c.bytes("infiniband.cm.rtu.private", msg.PrivateData())
					conns.checkPair(t, g.frame, msg.LocalCommID(), msg.RemoteCommID())
				case DREQ:
					c.uint("infiniband.cm.dreq.localcommid", uint64(msg.LocalCommID()))
					c.uint("infiniband.cm.dreq.remotecommid", uint64(msg.RemoteCommID()))
					// tshark files DREQ's remote QPN under a "req" name.
					c.uint("infiniband.cm.req.remoteqpneecn", uint64(msg.RemoteQPN()))
					c.bytes("infiniband.cm.dreq.private", msg.PrivateData())
					conns.checkPair(t, g.frame, msg.LocalCommID(), msg.RemoteCommID())
					if want := conns.qpn[msg.RemoteCommID()]; msg.RemoteQPN() != want {
						t.Errorf("frame %d: DREQ remote QPN %#x, peer announced %#x", g.frame, msg.RemoteQPN(), want)
					}
				case DREP:
					// tshark calls DREP "drsp".
					c.uint("infiniband.cm.drsp.localcommid", uint64(msg.LocalCommID()))
					c.uint("infiniband.cm.drsp.remotecommid", uint64(msg.RemoteCommID()))
					c.bytes("infiniband.cm.drsp.private", msg.PrivateData())
					conns.checkPair(t, g.frame, msg.LocalCommID(), msg.RemoteCommID())
				case SIDRReq:
					sidrReq = msg
					checkSIDRReq(c, g, msg)
				case SIDRRep:
					sidrRep, sidrRepFrame = msg, g
				default:
					t.Fatalf("frame %d: unexpected %v", g.frame, msg.AttributeID())
				}
				c.unused("infiniband.cm.")
				c.unused("infiniband.mad.")
			}
			if !slices.Equal(attrs, gf.attrs) {
				t.Errorf("messages %v, want %v", attrs, gf.attrs)
			}
			if sidrRep != nil {
				checkSIDRRep(t, sidrReq, sidrRep, sidrRepFrame, pkts, js)
			}
		})
	}
}

// checkTransport compares what tshark shows of the BTH and DETH of a GSI
// packet with our reading, and both with the GSI constants.
func checkTransport(c *checker, g gsiPacket) {
	c.uint("infiniband.bth.opcode", uint64(g.bth[0]))
	c.uint("infiniband.bth.destqp", uint64(get24(g.bth[5:])))
	c.uint("infiniband.deth.q_key", uint64(binary.BigEndian.Uint32(g.deth)))
	c.uint("infiniband.deth.srcqp", uint64(get24(g.deth[5:])))
	if q := binary.BigEndian.Uint32(g.deth); q != GSIQKey {
		c.t.Errorf("frame %d: Q_Key %#x, want GSIQKey", c.frame, q)
	}
	if get24(g.bth[5:]) != GSIQPN || get24(g.deth[5:]) != GSIQPN {
		c.t.Errorf("frame %d: not QP1 to QP1", c.frame)
	}
}

func checkHeader(c *checker, m MAD) {
	c.uint("infiniband.mad.baseversion", uint64(m.BaseVersion()))
	c.uint("infiniband.mad.mgmtclass", uint64(m.MgmtClass()))
	c.uint("infiniband.mad.classversion", uint64(m.ClassVersion()))
	c.uint("infiniband.mad.method", uint64(m.Method()))
	c.uint("infiniband.mad.status", uint64(m.Status()))
	c.uint("infiniband.mad.classspecific", uint64(m.ClassSpecific()))
	c.uint("infiniband.mad.transactionid", m.TransactionID())
	c.uint("infiniband.mad.attributeid", uint64(m.AttributeID()))
	c.uint("infiniband.mad.attributemodifier", uint64(m.AttributeModifier()))
	c.bytes("infiniband.mad.data", m.Data())
	if m.Method() != MethodSend {
		c.t.Errorf("frame %d: method %v", c.frame, m.Method())
	}
}

func checkREQ(c *checker, g gsiPacket, r REQ) {
	const p = "infiniband.cm.req."
	c.uint("infiniband.cm.req", uint64(r.LocalCommID()))
	c.uint(p+"serviceid", r.ServiceID())
	var sid [8]byte
	binary.BigEndian.PutUint64(sid[:], r.ServiceID())
	c.bytes(p+"serviceid.prefix", sid[:5])
	c.uint(p+"serviceid.protocol", r.ServiceID()>>16&0xFF)
	c.uint(p+"serviceid.dport", r.ServiceID()&0xFFFF)
	c.uint(p+"localcaguid", r.LocalCAGUID())
	c.uint(p+"localqkey", uint64(r.LocalQKey()))
	c.uint(p+"localqpn", uint64(r.LocalQPN()))
	c.uint(p+"responderres", uint64(r.ResponderResources()))
	c.uint(p+"localeecn", uint64(r.LocalEECN()))
	c.uint(p+"initdepth", uint64(r.InitiatorDepth()))
	c.uint(p+"remoteeecn", uint64(r.RemoteEECN()))
	c.uint(p+"remoteresptout", uint64(r.RemoteCMResponseTimeout()))
	c.uint(p+"transpsvctype", uint64(r.TransportServiceType()))
	c.bool(p+"e2eflowctrl", r.EndToEndFlowControl())
	c.uint(p+"startpsn", uint64(r.StartingPSN()))
	c.uint(p+"localresptout", uint64(r.LocalCMResponseTimeout()))
	c.uint(p+"retrcount", uint64(r.RetryCount()))
	c.uint(p+"pkey", uint64(r.PKey()))
	c.uint(p+"pppmtu", uint64(r.PathMTU()))
	c.bool(p+"rdcexist", r.RDCExists())
	c.uint(p+"rnrretrcount", uint64(r.RNRRetryCount()))
	c.uint(p+"maxcmretr", uint64(r.MaxCMRetries()))
	c.bool(p+"srq", r.SRQ())
	c.uint(p+"ext_transport", uint64(r.ExtendedTransportType()))

	// Primary path. Over IPv4, tshark shows only the last 4 bytes of each
	// GID; we also check that the GIDs are the IPv4-mapped forms of the
	// packet's own addresses.
	pp := r.PrimaryPath()
	c.uint(p+"prim_locallid", uint64(pp.LocalLID()))
	c.uint(p+"prim_remotelid", uint64(pp.RemoteLID()))
	lg, rg := pp.LocalGID(), pp.RemoteGID()
	c.addr(p+"prim_localgid_ipv4", netip.AddrFrom4([4]byte(lg[12:])))
	c.addr(p+"prim_remotegid_ipv4", netip.AddrFrom4([4]byte(rg[12:])))
	if netip.AddrFrom16(lg) != netip.AddrFrom16(g.src.As16()) || netip.AddrFrom16(rg) != netip.AddrFrom16(g.dst.As16()) {
		c.t.Errorf("frame %d: GIDs %v, %v for a packet %v -> %v", c.frame,
			netip.AddrFrom16(lg), netip.AddrFrom16(rg), g.src, g.dst)
	}
	checkWiresharkFlowLabel(c, "prim", pp)
	c.uint(p+"prim_tfcclass", uint64(pp.TrafficClass()))
	c.uint(p+"prim_hoplim", uint64(pp.HopLimit()))
	c.uint(p+"prim_sl", uint64(pp.SL()))
	c.bool(p+"prim_subnetlocal", pp.SubnetLocal())
	c.uint(p+"prim_localacktout", uint64(pp.LocalACKTimeout()))

	ap := r.AlternatePath()
	c.uint(p+"alt_locallid", uint64(ap.LocalLID()))
	c.uint(p+"alt_remotelid", uint64(ap.RemoteLID()))
	alg, arg := ap.LocalGID(), ap.RemoteGID()
	c.bytes(p+"alt_localgid", alg[:])
	c.bytes(p+"alt_remotegid", arg[:])
	checkWiresharkFlowLabel(c, "alt", ap)
	c.uint(p+"alt_tfcclass", uint64(ap.TrafficClass()))
	c.uint(p+"alt_hoplim", uint64(ap.HopLimit()))
	c.uint(p+"alt_sl", uint64(ap.SL()))
	c.bool(p+"alt_subnetlocal", ap.SubnetLocal())
	c.uint(p+"alt_localacktout", uint64(ap.LocalACKTimeout()))

	// rdma_cm's private data header, which tshark decodes because the
	// service ID is in the TCP port space.
	if ps, port, ok := SplitServiceID(r.ServiceID()); !ok || ps != PortSpaceTCP {
		c.t.Errorf("frame %d: service ID %#x: %v %d %v", c.frame, r.ServiceID(), ps, port, ok)
	}
	c.bytes(p+"ip_cm", r.PrivateData())
	h, err := ParseCMAHeader(r.PrivateData())
	if err != nil {
		c.t.Fatalf("frame %d: %v", c.frame, err)
	}
	c.uint(p+"ip_cm.majv", uint64(h.Version()>>4))
	c.uint(p+"ip_cm.minv", uint64(h.Version()&0xF))
	c.uint(p+"ip_cm.ipv", uint64(h.IPVersion()))
	c.uint(p+"ip_cm.sport", uint64(h.SrcPort()))
	c.addr(p+"ip_cm.sip4", h.SrcAddr())
	c.addr(p+"ip_cm.dip4", h.DstAddr())
	c.bytes(p+"ip_cm.private", r.PrivateData()[CMAHeaderSize:])
	if h.SrcAddr() != g.src || h.DstAddr() != g.dst {
		c.t.Errorf("frame %d: rdma_cm header %v -> %v in a packet %v -> %v", c.frame, h.SrcAddr(), h.DstAddr(), g.src, g.dst)
	}
}

// checkWiresharkFlowLabel compares a path's flow label and packet rate with
// tshark 4.0, which decodes them from the wrong bits: it reads the flow
// label as the top 12 bits of the 3 bytes at the field's start, i.e. our
// 20-bit label shifted right by 8, and takes its "reserved" (2 bits) and
// "packet rate" (6 bits) from the first of those bytes rather than from the
// fourth. tshark never shows the real packet rate; rxe sends 0.
func checkWiresharkFlowLabel(c *checker, which string, path REQPath) {
	p := "infiniband.cm.req." + which + "_"
	fl := uint64(path.FlowLabel())
	c.uint(p+"flowlabel", fl>>8)
	c.uint(p+"reserved0", fl>>18)
	c.uint(p+"pktrate", fl>>12&0x3F)
	if path.PacketRate() != 0 {
		c.t.Errorf("frame %d: %s packet rate %d, rxe sends 0", c.frame, which, path.PacketRate())
	}
}

func checkREP(c *checker, r REP) {
	const p = "infiniband.cm.rep."
	c.uint("infiniband.cm.rep", uint64(r.LocalCommID()))
	c.uint(p+"remotecommid", uint64(r.RemoteCommID()))
	c.uint(p+"localqkey", uint64(r.LocalQKey()))
	c.uint(p+"localqpn", uint64(r.LocalQPN()))
	c.uint(p+"localeecn", uint64(r.LocalEECN()))
	c.uint(p+"startpsn", uint64(r.StartingPSN()))
	c.uint(p+"respres", uint64(r.ResponderResources()))
	c.uint(p+"initdepth", uint64(r.InitiatorDepth()))
	c.uint(p+"tgtackdelay", uint64(r.TargetACKDelay()))
	c.uint(p+"failoveracc", uint64(r.FailoverAccepted()))
	c.bool(p+"e2eflowctrl", r.EndToEndFlowControl())
	c.uint(p+"rnrretrcount", uint64(r.RNRRetryCount()))
	c.bool(p+"srq", r.SRQ())
	c.uint(p+"localcaguid", r.LocalCAGUID())
	c.bytes(p+"private", r.PrivateData())
}

// tshark 4.0 does not decode SIDR messages; it shows the header and raw
// bytes, compared elsewhere. These checks tie the decoded fields to other
// things tshark or the pcap show.
func checkSIDRReq(c *checker, g gsiPacket, r SIDRReq) {
	c.uint("infiniband.bth.p_key", uint64(r.PKey())) // the P_Key the request travels in
	ps, port, ok := SplitServiceID(r.ServiceID())
	if !ok || ps != PortSpaceUDP || port != 7174 {
		c.t.Errorf("frame %d: service ID %#x = %v %d %v, want UDP port 7174", c.frame, r.ServiceID(), ps, port, ok)
	}
	if r.RequestID() == 0 {
		c.t.Errorf("frame %d: request ID 0", c.frame)
	}
	h, err := ParseCMAHeader(r.PrivateData())
	if err != nil {
		c.t.Fatalf("frame %d: %v", c.frame, err)
	}
	if h.IPVersion() != 4 || h.SrcAddr() != g.src || h.DstAddr() != g.dst || h.SrcPort() == 0 {
		c.t.Errorf("frame %d: rdma_cm header %+v in a packet %v -> %v", c.frame, h.Fields(), g.src, g.dst)
	}
	if rest := r.PrivateData()[CMAHeaderSize:]; !bytes.Equal(rest, make([]byte, len(rest))) {
		c.t.Errorf("frame %d: user private data %x, udaddy sends none", c.frame, rest)
	}
}

// checkSIDRRep matches the reply with the request, and its QPN and Q_Key
// with the UD data packets the requester then sends, as tshark decoded
// them.
func checkSIDRRep(t *testing.T, req SIDRReq, rep SIDRRep, g gsiPacket, pkts []rocePacket, js map[int]tsharkFrame) {
	if req == nil {
		t.Fatal("SIDR_REP without SIDR_REQ")
	}
	if rep.RequestID() != req.RequestID() || rep.ServiceID() != req.ServiceID() {
		t.Errorf("SIDR_REP %+v does not answer SIDR_REQ %+v", rep.Fields(), req.Fields())
	}
	if rep.Status() != SIDRSuccess || rep.AdditionalInfoLength() != 0 || rep.QKey() != RDMAUDPQKey {
		t.Errorf("SIDR_REP status %v, info length %d, Q_Key %#x", rep.Status(), rep.AdditionalInfoLength(), rep.QKey())
	}
	n := 0
	for _, p := range pkts {
		// Data from the requester (the SIDR_REP's destination) to the
		// resolved QP.
		if p.src != g.dst || p.payload[0] == opUDSendOnly {
			continue
		}
		n++
		c := &checker{t: t, frame: p.frame, js: js[p.frame], used: map[string]bool{}}
		c.uint("infiniband.bth.destqp", uint64(rep.QPN()))
		c.uint("infiniband.deth.q_key", uint64(rep.QKey()))
	}
	if n == 0 {
		t.Error("no UD data packets after the SIDR_REP")
	}
}

// connTracker remembers who announced which comm ID and QPN, to check that
// later messages refer to each other consistently.
type connTracker struct {
	qpn  map[uint32]wire.QPN // comm ID -> QPN announced with it
	peer map[uint32]uint32   // comm ID -> peer's comm ID
}

func newConnTracker() *connTracker {
	return &connTracker{qpn: map[uint32]wire.QPN{}, peer: map[uint32]uint32{}}
}

func (c *connTracker) add(id uint32, qpn wire.QPN) { c.qpn[id] = qpn }

func (c *connTracker) pair(a, b uint32) { c.peer[a], c.peer[b] = b, a }

func (c *connTracker) checkPair(t *testing.T, frame int, local, remote uint32) {
	t.Helper()
	if c.peer[local] != remote {
		t.Errorf("frame %d: comm IDs %#x and %#x were not paired by a REQ/REP", frame, local, remote)
	}
}
