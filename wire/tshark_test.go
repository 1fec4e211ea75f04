package wire_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/wire"
)

// unknownToTshark are the opcodes tshark 4.0 does not know: it shows their
// headers, payload and ICRC as one "vendor" block.
var unknownToTshark = []wire.Opcode{wire.RCFlush, wire.RCAtomicWrite, wire.CNP}

// TestTshark has tshark decode a packet of every opcode over IPv4 and IPv6,
// with IP and UDP checksum checking on, and compares its fields with ours.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed")
	}
	type sent struct {
		pkt      []byte
		ipHdrLen int
	}
	var frames []sent
	path := filepath.Join(t.TempDir(), "built.pcap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(file)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, op := range allOpcodes() {
		for i, f := range []wire.Framing{framing4, framing6} {
			// Payloads of at least 28 bytes: tshark's RPC-over-RDMA heuristic
			// throws on shorter SEND payloads (see TestGolden).
			n := []int{37, 1026}[i]
			if info := op.Info(); !info.Has(wire.HdrPayload) || info.FixedPayload >= 0 {
				n = max(info.FixedPayload, 0)
			}
			h := sampleHeaders(op)
			if op.Info().Is(wire.FlagWrite | wire.FlagStart | wire.FlagComplete) {
				h.RETH.DMALen = uint32(n) // as compareDissection expects of a WRITE ONLY
			}
			pkt := build(t, h, samplePayload(op, n))
			ip := sealedIP(&f, pkt)
			eth := ethFrame(ip)
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(1795313706, 0), CaptureLength: len(eth), Length: len(eth)}
			if err := w.WritePacket(ci, eth); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, sent{pkt, len(ip) - len(pkt) - 8})
		}
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(tshark, "-r", path, "-T", "json", "--no-duplicate-keys",
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	ws := parseDissections(t, path, out)
	if len(ws) != len(frames) {
		t.Fatalf("tshark decoded %d frames, we wrote %d", len(ws), len(frames))
	}
	for i, s := range frames {
		p, err := wire.Parse(s.pkt)
		if err != nil {
			t.Fatal(err)
		}
		op := p.Opcode()
		g := &golden{t: t, what: fmt.Sprintf("frame %d (%v)", i+1, op), d: ws[i+1]}
		_, expert := g.d["_ws.expert"]
		_, malformed := g.d["_ws.malformed"]
		if expert || malformed {
			t.Errorf("%s: tshark reports malformed %v, expert info %q", g.what, malformed, g.d["_ws.expert.message"])
		}
		if !strings.Contains(g.d.one("frame.protocols"), ":udp:infiniband") {
			t.Errorf("%s: protocols %q", g.what, g.d.one("frame.protocols"))
			continue
		}
		if _, ok := g.d["infiniband.vendor"]; ok && slices.Contains(unknownToTshark, op) {
			// tshark knows the BTH only; the rest is ours byte for byte.
			compareBTH(g, p.BTH())
			if !slices.Contains(g.d["infiniband.vendor"], colonHex(s.pkt[wire.BTHLen:])) {
				t.Errorf("%s: tshark's vendor data %q, we wrote %s", g.what, g.d["infiniband.vendor"], colonHex(s.pkt[wire.BTHLen:]))
			}
			continue
		}
		compareDissection(g, wire.PacketLen(op, len(p.Payload()))+14+s.ipHdrLen+8, s.ipHdrLen, p)
	}
}
