package dump_test

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/dump"
	"github.com/softrdma/softrdma/link/pcap"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

type frame struct {
	lt   layers.LinkType
	data []byte
}

// captureFrames reads the rxe captures kept in wire/testdata.
func captureFrames(tb testing.TB) []frame {
	tb.Helper()
	paths, err := filepath.Glob("../../../../wire/testdata/captures/*.pcap")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no captures: %v", err)
	}
	var out []frame
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			tb.Fatal(err)
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			tb.Fatal(err)
		}
		for {
			data, _, err := r.ReadPacketData()
			if err != nil {
				break
			}
			out = append(out, frame{r.LinkType(), data})
		}
		f.Close()
	}
	return out
}

func TestDecodeCaptures(t *testing.T) {
	var roce, mads int
	for i, f := range captureFrames(t) {
		r, err := dump.Decode(f.lt, f.data, wire.UDPPort)
		if errors.Is(err, dump.ErrNotRoCE) {
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		roce++
		if !r.ICRCOK {
			t.Errorf("frame %d: ICRC does not verify", i)
		}
		if r.MAD != nil {
			mads++
		}
		if r.MADErr != nil {
			t.Errorf("frame %d: MAD: %v", i, r.MADErr)
		}
		var b bytes.Buffer
		if err := dump.Format(&b, 0, &r); err != nil || !strings.HasSuffix(b.String(), "\n") {
			t.Fatalf("Format: %v %q", err, b.String())
		}
	}
	if roce < 1000 || mads == 0 {
		t.Errorf("decoded %d RoCEv2 packets, %d MADs: want the captures' thousands and their CM MADs", roce, mads)
	}
}

// The same packet as raw IP (what the tap writes) and inside Ethernet with
// a VLAN tag decodes the same.
func TestDecodeLinkTypes(t *testing.T) {
	h := &wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnlyImm, PKey: wire.DefaultPKey, DestQP: 0x123, PSN: 5},
		DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x44}, Imm: 0xdeadbeef}
	buf := make([]byte, 256)
	n, err := wire.Build(buf, h, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	src, dst := mustAP("192.0.2.1:50000"), mustAP("192.0.2.2:4791")
	fr := wire.Framing{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(), IPv4Frag: wire.IPv4DontFragment}
	wire.Seal(&fr, buf[:n])
	ip, err := pcap.Frame(src, dst, buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	vlan := append([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x00, 0x07, 0x08, 0x00}, ip...)
	for _, f := range []frame{{layers.LinkTypeRaw, ip}, {layers.LinkTypeEthernet, vlan}} {
		r, err := dump.Decode(f.lt, f.data, wire.UDPPort)
		if err != nil {
			t.Fatalf("%v: %v", f.lt, err)
		}
		var b bytes.Buffer
		if err := dump.Format(&b, 1500*time.Millisecond, &r); err != nil {
			t.Fatal(err)
		}
		want := "   1.500000 192.0.2.1:50000 > 192.0.2.2:4791 UD SEND_ONLY_WITH_IMMEDIATE qpn 0x000123 psn 0x000005 deth[qkey 0x11111111 srcqp 0x000044] imm 0xdeadbeef payload 7 icrc ok\n"
		if b.String() != want {
			t.Errorf("%v:\n got %q\nwant %q", f.lt, b.String(), want)
		}
	}
	// Another port is not RoCE; a corrupted payload fails the ICRC.
	if _, err := dump.Decode(layers.LinkTypeRaw, ip, 4792); !errors.Is(err, dump.ErrNotRoCE) {
		t.Errorf("port 4792: %v", err)
	}
	bad := append([]byte(nil), ip...)
	bad[len(bad)-6] ^= 1
	if r, err := dump.Decode(layers.LinkTypeRaw, bad, wire.UDPPort); err != nil || r.ICRCOK {
		t.Errorf("corrupted packet: err %v, ICRC ok %v", err, r.ICRCOK)
	}
}

// A FLUSH shows its FETH (selectivity and placement type) before its RETH.
func TestFormatFlush(t *testing.T) {
	h := &wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCFlush, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 9, AckReq: true},
		FETH: wire.FETHFields{Selectivity: 1, PlacementType: 2}, RETH: wire.RETHFields{VA: 0x1000, RKey: 0xabc, DMALen: 64}}
	buf := make([]byte, 256)
	n, err := wire.Build(buf, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := mustAP("192.0.2.1:50000"), mustAP("192.0.2.2:4791")
	wire.Seal(&wire.Framing{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(), IPv4Frag: wire.IPv4DontFragment}, buf[:n])
	ip, err := pcap.Frame(src, dst, buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	r, err := dump.Decode(layers.LinkTypeRaw, ip, wire.UDPPort)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := dump.Format(&b, 0, &r); err != nil {
		t.Fatal(err)
	}
	want := "   0.000000 192.0.2.1:50000 > 192.0.2.2:4791 RC FLUSH qpn 0x000011 psn 0x000009 ackreq feth[sel 1 type 2] reth[va 0x1000 rkey 0x00000abc len 64] payload 0 icrc ok\n"
	if b.String() != want {
		t.Errorf("\n got %q\nwant %q", b.String(), want)
	}
}

func mustAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// Every prefix of a RoCEv2 frame is an error (the IP lengths no longer fit)
// or, for Ethernet padding cut off, the same packet; nothing panics.
func TestDecodeTruncated(t *testing.T) {
	checked := 0
	for _, f := range captureFrames(t) {
		full, err := dump.Decode(f.lt, f.data, wire.UDPPort)
		if err != nil {
			continue
		}
		want := len(full.Packet.Bytes())
		for n := range len(f.data) {
			r, err := dump.Decode(f.lt, f.data[:n], wire.UDPPort)
			if err == nil && len(r.Packet.Bytes()) != want {
				t.Fatalf("prefix %d of %d decoded as a %d-byte packet, want an error", n, len(f.data), len(r.Packet.Bytes()))
			}
			if err != nil && !errors.Is(err, dump.ErrNotRoCE) && !errors.Is(err, wire.ErrFraming) && !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("prefix %d: error %v wraps no sentinel", n, err)
			}
		}
		if checked++; checked == 40 {
			break
		}
	}
	if checked == 0 {
		t.Fatal("no RoCEv2 frames to truncate")
	}
}

func FuzzDecode(f *testing.F) {
	for i, fr := range captureFrames(f) {
		if i%7 == 0 {
			f.Add(uint16(fr.lt), fr.data)
		}
	}
	f.Fuzz(func(t *testing.T, lt uint16, data []byte) {
		r, err := dump.Decode(layers.LinkType(lt), data, wire.UDPPort)
		if err != nil {
			return
		}
		if len(r.Packet.Bytes()) > len(data) {
			t.Fatalf("packet of %d bytes from a %d-byte frame", len(r.Packet.Bytes()), len(data))
		}
		if r.MAD != nil && len(r.MAD) != mad.Size {
			t.Fatalf("MAD of %d bytes", len(r.MAD))
		}
		var b bytes.Buffer
		if err := dump.Format(&b, 0, &r); err != nil {
			t.Fatal(err)
		}
	})
}
