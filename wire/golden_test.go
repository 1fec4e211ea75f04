package wire_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// dissection is one frame of tshark's JSON: every key of every layer with
// all its values, trees flattened. Keys of objects (layer names, trees,
// _ws.expert) are present with no values.
type dissection map[string][]string

// loadDissections reads NAME.json, made by
// tshark -r NAME.pcap -Y infiniband -T json -J "frame infiniband" --no-duplicate-keys.
func loadDissections(tb testing.TB, path string) map[int]dissection {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return parseDissections(tb, path, raw)
}

// parseDissections indexes tshark's JSON output by frame number.
func parseDissections(tb testing.TB, name string, raw []byte) map[int]dissection {
	tb.Helper()
	var frames []struct {
		Source struct {
			Layers map[string]any `json:"layers"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(raw, &frames); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	out := make(map[int]dissection)
	for _, f := range frames {
		d := dissection{}
		d.add("", f.Source.Layers)
		n, err := strconv.Atoi(d.one("frame.number"))
		if err != nil {
			tb.Fatalf("%s: frame.number %q", name, d["frame.number"])
		}
		out[n] = d
	}
	return out
}

func (d dissection) add(key string, v any) {
	switch v := v.(type) {
	case string:
		d[key] = append(d[key], v)
	case []any:
		for _, e := range v {
			d.add(key, e)
		}
	case map[string]any:
		if _, ok := d[key]; !ok && key != "" {
			d[key] = nil
		}
		for k, e := range v {
			d.add(k, e)
		}
	}
}

// one returns the value of key if it has exactly one distinct value.
func (d dissection) one(key string) string {
	v := d[key]
	for _, s := range v {
		if s != v[0] {
			return ""
		}
	}
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// golden compares one decoded packet with tshark's dissection of its frame.
type golden struct {
	t    *testing.T
	what string
	d    dissection
	n    int // fields compared
	// frames whose ICRC tshark does not show because a heuristic dissector
	// failed on the payload
	noICRC int
}

func (g *golden) eq(key, want string) {
	g.t.Helper()
	got, ok := g.d[key]
	switch {
	case !ok:
		g.t.Errorf("%s: tshark gives no %s (want %s)", g.what, key, want)
	case g.d.one(key) != want:
		g.t.Errorf("%s: %s = %q, we decode %s", g.what, key, got, want)
	}
	g.n++
}

func (g *golden) eqUint(key string, v uint64) { g.t.Helper(); g.eq(key, strconv.FormatUint(v, 10)) }

func (g *golden) eqBool(key string, v bool) {
	g.t.Helper()
	g.eq(key, map[bool]string{false: "0", true: "1"}[v])
}

func colonHex(b []byte) string {
	s := make([]string, len(b))
	for i, c := range b {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, ":")
}

// compareBTH checks the BTH fields against tshark's.
func compareBTH(g *golden, bth wire.BTH) {
	g.t.Helper()
	g.eqUint("infiniband.bth.opcode", uint64(bth.Opcode()))
	g.eqBool("infiniband.bth.se", bth.Solicited())
	g.eqBool("infiniband.bth.m", bth.MigReq())
	g.eqUint("infiniband.bth.padcnt", uint64(bth.PadCount()))
	g.eqUint("infiniband.bth.tver", uint64(bth.TVer()))
	g.eqUint("infiniband.bth.p_key", uint64(bth.PKey()))
	g.eq("infiniband.bth.destqp", fmt.Sprintf("0x%06x", uint32(bth.DestQP())))
	g.eqBool("infiniband.bth.a", bth.AckReq())
	g.eqUint("infiniband.bth.psn", uint64(bth.PSN()))
}

// compareDissection checks every field we decode against tshark's.
func compareDissection(g *golden, frameLen int, ipHdrLen int, p wire.Packet) {
	g.t.Helper()
	info := p.Info()
	g.eqUint("frame.len", uint64(frameLen))
	compareBTH(g, p.BTH())
	// tshark shows the ICRC bytes as a big-endian number; ours is the
	// little-endian CRC-32 the IBTA and Linux store. tshark's RPC-over-RDMA
	// heuristic takes some small SEND payloads, throws, and the dissection
	// ends before the ICRC.
	if _, bad := g.d["_ws.malformed"]; bad && g.d.one("frame.protocols") == "eth:ethertype:ip:udp:infiniband:rpcordma" &&
		info.Is(wire.FlagSend) && g.d["infiniband.invariant.crc"] == nil {
		g.noICRC++
	} else {
		g.eq("infiniband.invariant.crc", fmt.Sprintf("0x%08x", bits.ReverseBytes32(p.ICRC())))
	}

	// Each extension header is in tshark's dissection exactly when we parse it.
	for key, h := range map[string]wire.Header{
		"infiniband.reth": wire.HdrRETH, "infiniband.aeth": wire.HdrAETH, "infiniband.deth": wire.HdrDETH,
		"infiniband.immdt": wire.HdrImmDt, "infiniband.ieth": wire.HdrIETH,
		"infiniband.atomiceth": wire.HdrAtomicETH, "infiniband.atomicacketh": wire.HdrAtomicAckETH,
	} {
		if _, ok := g.d[key]; ok != info.Has(h) {
			g.t.Errorf("%s: tshark has %s: %v; %s carries it: %v", g.what, key, ok, info.Name, info.Has(h))
		}
	}
	if r := p.RETH(); r != nil {
		g.eq("infiniband.reth.va", fmt.Sprintf("0x%016x", r.VA()))
		g.eq("infiniband.reth.r_key", fmt.Sprintf("0x%08x", uint32(r.RKey())))
		g.eqUint("infiniband.reth.dmalen", uint64(r.DMALen()))
		if info.Is(wire.FlagWrite|wire.FlagStart|wire.FlagComplete) && int(r.DMALen()) != len(p.Payload()) {
			g.t.Errorf("%s: RDMA WRITE ONLY with %d payload bytes, DMA length %d", g.what, len(p.Payload()), r.DMALen())
		}
	}
	if a := p.AETH(); a != nil {
		s := a.Syndrome()
		g.eqUint("infiniband.aeth.syndrome", uint64(s))
		g.eqUint("infiniband.aeth.msn", uint64(a.MSN()))
		g.eqBool("infiniband.aeth.syndrome.reserved", s.Reserved())
		g.eqUint("infiniband.aeth.syndrome.opcode", uint64(s.Kind()))
		switch {
		case s.IsACK():
			g.eqUint("infiniband.aeth.syndrome.credit_count", uint64(s.Value()))
		case s.IsRNR():
			g.eqUint("infiniband.aeth.syndrome.timer", uint64(s.Value()))
		case s.IsNAK():
			g.eqUint("infiniband.aeth.syndrome.error_code", uint64(s.NAKCode()))
		default:
			g.t.Errorf("%s: reserved syndrome %#x in a capture", g.what, uint8(s))
		}
	}
	if d := p.DETH(); d != nil {
		g.eq("infiniband.deth.q_key", fmt.Sprintf("0x%016x", uint32(d.QKey())))
		g.eq("infiniband.deth.srcqp", fmt.Sprintf("0x%08x", uint32(d.SrcQP())))
	}
	if v, ok := p.Imm(); ok {
		g.eq("infiniband.immdt", colonHex(binary.BigEndian.AppendUint32(nil, v)))
	}
	if v, ok := p.InvRKey(); ok {
		g.eq("infiniband.ieth", colonHex(binary.BigEndian.AppendUint32(nil, uint32(v))))
	}
	if a := p.AtomicETH(); a != nil {
		g.eq("infiniband.reth.va", fmt.Sprintf("0x%016x", a.VA())) // tshark reuses the RETH fields
		g.eq("infiniband.reth.r_key", fmt.Sprintf("0x%08x", uint32(a.RKey())))
		g.eqUint("infiniband.atomiceth.swapdt", a.SwapAdd())
		g.eqUint("infiniband.atomiceth.cmpdt", a.Compare())
	}
	if a := p.AtomicAckETH(); a != nil {
		g.eqUint("infiniband.atomicacketh.origremdt", a.Orig())
	}
	// tshark gives no payload length; derive it from its frame length and pad count.
	pad, _ := strconv.Atoi(g.d.one("infiniband.bth.padcnt"))
	if n := frameLen - 14 - ipHdrLen - 8 - info.HdrLen - pad - wire.ICRCLen; n != len(p.Payload()) {
		g.t.Errorf("%s: payload of %d bytes, tshark's lengths say %d", g.what, len(p.Payload()), n)
	}
}

func TestGolden(t *testing.T) {
	total := 0
	for _, path := range captures(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		t.Run(name, func(t *testing.T) {
			ws := loadDissections(t, strings.TrimSuffix(path, ".pcap")+".json")
			n, fields, noICRC := 0, 0, 0
			for _, fr := range readPcap(t, path) {
				f, ip, pkt, ok := roceFrame(fr.Data)
				d, inJSON := ws[fr.Number]
				if !ok {
					if inJSON {
						t.Errorf("frame %d: tshark decodes infiniband, we find no RoCEv2 packet", fr.Number)
					}
					continue
				}
				what := fmt.Sprintf("%s frame %d", name, fr.Number)
				p, err := wire.Parse(pkt)
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				if !wire.VerifyICRC(&f, pkt) {
					t.Errorf("%s: bad ICRC %#08x, want %#08x", what, p.ICRC(), wire.ICRC(&f, pkt))
				}
				if r := refICRC(ip); r != p.ICRC() {
					t.Errorf("%s: reference ICRC %#08x, packet has %#08x", what, r, p.ICRC())
				}
				if !inJSON {
					t.Errorf("%s: not in tshark's dissection", what)
					continue
				}
				g := &golden{t: t, what: what, d: d}
				ipHdrLen := 40
				if f.IsIPv4() {
					ipHdrLen = 20
				}
				compareDissection(g, len(fr.Data), ipHdrLen, p)
				n++
				fields += g.n
				noICRC += g.noICRC
			}
			if n == 0 || n != len(ws) {
				t.Fatalf("compared %d RoCEv2 packets; tshark's dissection has %d", n, len(ws))
			}
			t.Logf("%d packets, %d fields compared; %d ICRCs hidden by tshark's RPCoRDMA heuristic", n, fields, noICRC)
			total += n
		})
	}
	t.Logf("%d golden packets compared", total)
}

// goldenSeeds returns the IP packets and their RoCEv2 packets of one golden
// frame per IP version, opcode and length, as fuzz seeds: all 2,338 frames
// (TestGolden checks each) would take a 10-second fuzzing run's whole time
// to gather baseline coverage.
func goldenSeeds(tb testing.TB) (ips, pkts [][]byte) {
	seen := map[[3]int]bool{}
	for _, path := range captures(tb) {
		for _, fr := range readPcap(tb, path) {
			_, ip, pkt, ok := roceFrame(fr.Data)
			if !ok {
				continue
			}
			if k := [3]int{int(ip[0] >> 4), int(pkt[0]), len(pkt)}; !seen[k] {
				seen[k] = true
				ips, pkts = append(ips, ip), append(pkts, pkt)
			}
		}
	}
	return ips, pkts
}
