// Shared test helpers: sample headers and payloads for every opcode, IP/UDP/
// Ethernet framing, an independent reference ICRC, and pcap reading.

package wire_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/wire"
)

// allOpcodes returns every opcode in the table, in numeric order.
func allOpcodes() []wire.Opcode {
	var ops []wire.Opcode
	for i := range 256 {
		if op := wire.Opcode(i); op.Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

// payloadSizes returns the payload lengths the round-trip tests use for op.
func payloadSizes(info *wire.OpInfo) []int {
	switch {
	case !info.Has(wire.HdrPayload):
		return []int{0}
	case info.FixedPayload >= 0:
		return []int{info.FixedPayload}
	}
	return []int{0, 1, 2, 3, 4, 5, 1024}
}

// samplePayload returns n bytes that differ from each other and from op to op.
func samplePayload(op wire.Opcode, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + byte(op) + 1
	}
	return b
}

// sampleHeaders fills every field of every header with distinct non-zero
// values that depend on op. TVer stays 0, the only version Parse accepts, and
// PadCount is left for Build to compute.
func sampleHeaders(op wire.Opcode) *wire.Headers {
	k := uint32(op) + 1
	return &wire.Headers{
		BTH: wire.BTHFields{Opcode: op, Solicited: true, MigReq: true, PKey: wire.PKey(0xC000 | k),
			FECN: true, BECN: true, DestQP: wire.QPN(0xD00000 | k), AckReq: true, PSN: wire.PSN(0xE00000 | k)},
		RETH:      wire.RETHFields{VA: 0x0102030405060000 | uint64(k), RKey: wire.RKey(0x11220000 | k), DMALen: 0x00330000 | k},
		AETH:      wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKRemoteAccess), MSN: wire.MSN(0xA40000 | k)},
		DETH:      wire.DETHFields{QKey: wire.QKey(0x55660000 | k), SrcQP: wire.QPN(0xB70000 | k)},
		Atomic:    wire.AtomicETHFields{VA: 0x8899AABBCCDD0000 | uint64(k), RKey: wire.RKey(0x77880000 | k), SwapAdd: 0x1122334455660000 | uint64(k), Compare: 0x99AABBCCDDEE0000 | uint64(k)},
		AtomicAck: 0xFEDCBA9876540000 | uint64(k),
		Imm:       0xCAFE0000 | k,
		InvRKey:   wire.RKey(0xBEEF0000 | k),
		FETH:      wire.FETHFields{Selectivity: 2, PlacementType: 5},
	}
}

// build builds a packet and fails the test on error or a length other than
// PacketLen.
func build(tb testing.TB, h *wire.Headers, payload []byte) []byte {
	tb.Helper()
	n := wire.PacketLen(h.BTH.Opcode, len(payload))
	if n < 0 {
		tb.Fatalf("PacketLen(%v) = %d", h.BTH.Opcode, n)
	}
	b := make([]byte, n)
	m, err := wire.Build(b, h, payload)
	if err != nil {
		tb.Fatalf("Build %v with %d payload bytes: %v", h.BTH.Opcode, len(payload), err)
	}
	if m != n {
		tb.Fatalf("Build %v wrote %d bytes, PacketLen says %d", h.BTH.Opcode, m, n)
	}
	return b
}

// builtPacket is one packet of every opcode and payload size.
type builtPacket struct {
	h       *wire.Headers
	payload []byte
	pkt     []byte // unsealed
}

func allBuiltPackets(tb testing.TB) []builtPacket {
	var out []builtPacket
	for _, op := range allOpcodes() {
		for _, n := range payloadSizes(op.Info()) {
			h, p := sampleHeaders(op), samplePayload(op, n)
			out = append(out, builtPacket{h, p, build(tb, h, p)})
		}
	}
	return out
}

var (
	framing4 = wire.Framing{Src: netip.MustParseAddr("198.18.0.2"), Dst: netip.MustParseAddr("198.18.0.3"),
		SrcPort: 0xC0DE, DstPort: wire.UDPPort, IPv4Frag: wire.IPv4DontFragment}
	framing6 = wire.Framing{Src: netip.MustParseAddr("fd00:198:18::2"), Dst: netip.MustParseAddr("fd00:198:18::3"),
		SrcPort: 0xC0DF, DstPort: wire.UDPPort}
)

// ipPacket wraps a UDP payload in the IPv4 or IPv6 and UDP headers f
// describes, as Linux sends them: IPv4 TTL 64 with a valid header checksum
// and UDP checksum 0; IPv6 hop limit 64 and, since a zero UDP checksum is
// illegal over IPv6 (tshark flags it), a valid UDP checksum.
func ipPacket(f *wire.Framing, udpPayload []byte) []byte {
	udpLen := 8 + len(udpPayload)
	var b []byte
	if f.IsIPv4() {
		b = make([]byte, 20+udpLen)
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[4:], f.IPv4ID)
		binary.BigEndian.PutUint16(b[6:], f.IPv4Frag)
		b[8], b[9] = 64, 17
		s, d := f.Src.Unmap().As4(), f.Dst.Unmap().As4()
		copy(b[12:], s[:])
		copy(b[16:], d[:])
		binary.BigEndian.PutUint16(b[10:], ^onesSum(0, b[:20]))
	} else {
		b = make([]byte, 40+udpLen)
		b[0] = 0x60
		binary.BigEndian.PutUint16(b[4:], uint16(udpLen))
		b[6], b[7] = 17, 64
		s, d := f.Src.As16(), f.Dst.As16()
		copy(b[8:], s[:])
		copy(b[24:], d[:])
	}
	u := b[len(b)-udpLen:]
	binary.BigEndian.PutUint16(u[0:], f.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	copy(u[8:], udpPayload)
	if !f.IsIPv4() {
		var ph [8]byte // pseudo-header after the addresses: UDP length, next header
		binary.BigEndian.PutUint32(ph[:4], uint32(udpLen))
		ph[7] = 17
		c := ^onesSum(onesSum(onesSum(0, b[8:40]), ph[:]), u)
		if c == 0 {
			c = 0xFFFF
		}
		binary.BigEndian.PutUint16(u[6:], c)
	}
	return b
}

// onesSum adds b to the 16-bit ones' complement sum s.
func onesSum(s uint16, b []byte) uint16 {
	sum := uint32(s)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// sealedIP builds the IP packet around pkt after sealing pkt with f.
func sealedIP(f *wire.Framing, pkt []byte) []byte {
	wire.Seal(f, pkt)
	return ipPacket(f, pkt)
}

// ethFrame prepends an Ethernet header to an IP packet.
func ethFrame(ip []byte) []byte {
	b := make([]byte, 14+len(ip))
	copy(b, []byte{0x52, 0x54, 0, 0x12, 0x34, 0x57, 0x52, 0x54, 0, 0x12, 0x34, 0x56})
	et := uint16(0x0800)
	if ip[0]>>4 == 6 {
		et = 0x86DD
	}
	binary.BigEndian.PutUint16(b[12:], et)
	copy(b[14:], ip)
	return b
}

// icrcMask returns the bits of byte i of an IP packet carrying a RoCEv2
// packet (IPv4 without options or IPv6, UDP, BTH) that the ICRC leaves out:
// IPv4 TOS, TTL and header checksum, IPv6 traffic class, flow label and hop
// limit, the UDP checksum and BTH byte 4 (FECN, BECN, reserved).
func icrcMask(ip []byte, i int) byte {
	v4, l4 := ip[0]>>4 == 4, 40
	if v4 {
		l4 = 20
	}
	switch {
	case v4 && (i == 1 || i == 8 || i == 10 || i == 11):
		return 0xff
	case !v4 && i == 0:
		return 0x0f
	case !v4 && (i <= 3 || i == 7):
		return 0xff
	case i == l4+6 || i == l4+7 || i == l4+8+4:
		return 0xff
	}
	return 0
}

// refICRC is the ICRC computed the way the IBTA annex describes it, over the
// real bytes of an IP packet: 8 bytes of 0xFF for the LRH, then the IP and
// UDP headers and the transport packet with the variant bits set to ones,
// without the ICRC itself.
func refICRC(ip []byte) uint32 {
	if ip[0]>>4 == 4 {
		ip = ip[:binary.BigEndian.Uint16(ip[2:])]
	} else {
		ip = ip[:40+int(binary.BigEndian.Uint16(ip[4:]))]
	}
	m := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ip...)
	for i := range ip {
		m[8+i] |= icrcMask(ip, i)
	}
	return crc32.ChecksumIEEE(m[:len(m)-wire.ICRCLen])
}

// frame is one packet of a capture; Number counts from 1 as Wireshark does.
type frame struct {
	Number int
	Data   []byte
}

func readPcap(tb testing.TB, path string) []frame {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		tb.Fatalf("%s: link type %v, want Ethernet", path, r.LinkType())
	}
	var out []frame
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			tb.Fatalf("%s: frame %d: %v", path, len(out)+1, err)
		}
		out = append(out, frame{len(out) + 1, data})
	}
}

// roceFrame splits an Ethernet frame; ok is false unless it is IPv4 or IPv6
// carrying UDP to the RoCEv2 port.
func roceFrame(eth []byte) (f wire.Framing, ip, pkt []byte, ok bool) {
	if len(eth) < 14 {
		return f, nil, nil, false
	}
	if et := binary.BigEndian.Uint16(eth[12:]); et != 0x0800 && et != 0x86DD {
		return f, nil, nil, false
	}
	ip = eth[14:]
	f, pkt, err := wire.SplitIP(ip)
	if err != nil || f.DstPort != wire.UDPPort {
		return f, nil, nil, false
	}
	return f, ip, pkt, true
}

// captures returns the golden pcaps, sorted.
func captures(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "captures", "*.pcap"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no golden captures in testdata/captures: %v", err)
	}
	return files
}

// wantErr fails unless err wraps target.
func wantErr(tb testing.TB, err, target error, what string) {
	tb.Helper()
	if !errors.Is(err, target) {
		tb.Errorf("%s: error %v, want one wrapping %v", what, err, target)
	}
}
