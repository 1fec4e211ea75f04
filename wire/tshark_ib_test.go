package wire_test

import (
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/wire"
)

// linkTypeUser0 is DLT_USER0. tshark 4.0 (Debian 12) does not read pcap
// files of link type 247 (LINKTYPE_INFINIBAND: "network type 247 unknown or
// unsupported"), so the test writes the packets as DLT_USER0 and maps that
// to the InfiniBand dissector, which then starts at the LRH as it does for
// type 247.
const linkTypeUser0 = 147

const userDLTInfiniband = `uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0",""`

// TestTsharkIB has tshark dissect native IB packets of every opcode it
// knows, local and global, and compares the LRH, GRH and BTH fields and the
// positions of the ICRC and VCRC with ours. tshark 4.0 shows the two CRCs
// but does not check them (its dissector has no CRC code): their values are
// checked against the reference models in ib_test.go instead.
func TestTsharkIB(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed")
	}
	var pkts [][]byte
	for _, op := range allOpcodes() {
		if slices.Contains(unknownToTshark, op) {
			continue
		}
		for i, global := range []bool{false, true} {
			n := []int{37, 1026}[i]
			if info := op.Info(); !info.Has(wire.HdrPayload) || info.FixedPayload >= 0 {
				n = max(info.FixedPayload, 0)
			}
			h := sampleHeaders(op)
			if op.Info().Is(wire.FlagWrite | wire.FlagStart | wire.FlagComplete) {
				h.RETH.DMALen = uint32(n)
			}
			pkts = append(pkts, buildIB(t, ibFraming(op, global), h, samplePayload(op, n)))
		}
	}
	path := filepath.Join(t.TempDir(), "ib.pcap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(file)
	if err := w.WriteFileHeader(65536, layers.LinkType(linkTypeUser0)); err != nil {
		t.Fatal(err)
	}
	for _, b := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1795313706, 0), CaptureLength: len(b), Length: len(b)}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tshark, "-r", path, "-o", userDLTInfiniband, "-T", "json", "--no-duplicate-keys")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	ws := parseDissections(t, path, out)
	if len(ws) != len(pkts) {
		t.Fatalf("tshark decoded %d frames, we wrote %d", len(ws), len(pkts))
	}
	crcs := 0
	for i, b := range pkts {
		p, err := wire.ParseIB(b)
		if err != nil {
			t.Fatal(err)
		}
		g := &golden{t: t, what: fmt.Sprintf("frame %d (%v)", i+1, p.Transport().Opcode()), d: ws[i+1]}
		if _, malformed := g.d["_ws.malformed"]; malformed && g.d.one("frame.protocols") != "user_dlt:infiniband:rpcordma" {
			t.Errorf("%s: tshark reports it malformed: %q", g.what, g.d["_ws.expert.message"])
		}
		l := p.LRH()
		g.eq("infiniband.lrh.vl", fmt.Sprintf("0x%02x", l.VL()))
		g.eqUint("infiniband.lrh.lver", uint64(l.LVer()))
		g.eqUint("infiniband.lrh.sl", uint64(l.SL()))
		g.eq("infiniband.lrh.lnh", fmt.Sprintf("0x%02x", uint8(l.LNH())))
		g.eqUint("infiniband.lrh.dlid", uint64(l.DLID()))
		g.eqUint("infiniband.lrh.pktlen", uint64(l.PktLen()))
		g.eqUint("infiniband.lrh.slid", uint64(l.SLID()))
		if gr := p.GRH(); gr != nil {
			g.eqUint("infiniband.grh.ipver", uint64(gr.IPVer()))
			g.eqUint("infiniband.grh.tclass", uint64(gr.TClass()))
			g.eqUint("infiniband.grh.flowlabel", uint64(gr.FlowLabel()))
			g.eqUint("infiniband.grh.paylen", uint64(gr.PayLen()))
			g.eqUint("infiniband.grh.nxthdr", uint64(gr.NxtHdr()))
			g.eqUint("infiniband.grh.hoplmt", uint64(gr.HopLmt()))
			g.eq("infiniband.grh.sgid", gr.SGID().String())
			g.eq("infiniband.grh.dgid", gr.DGID().String())
		} else if _, ok := g.d["infiniband.grh"]; ok {
			t.Errorf("%s: tshark finds a GRH in a local packet", g.what)
		}
		compareBTH(g, p.Transport().BTH())
		// tshark shows both CRCs as big-endian numbers; ours are carried
		// least significant byte first. Its RPC-over-RDMA heuristic takes
		// some SEND payloads and the dissection ends before the CRCs.
		if _, ok := g.d["infiniband.invariant.crc"]; ok {
			g.eq("infiniband.invariant.crc", fmt.Sprintf("0x%08x", bits.ReverseBytes32(p.Transport().ICRC())))
			g.eq("infiniband.variant.crc", fmt.Sprintf("0x%04x", bits.ReverseBytes16(p.VCRC())))
			crcs++
		}
	}
	if crcs < len(pkts)*3/4 {
		t.Errorf("tshark showed the CRCs of %d of %d frames", crcs, len(pkts))
	}
	t.Logf("tshark dissected %d IB packets; CRC fields at the right place in %d", len(pkts), crcs)
}
