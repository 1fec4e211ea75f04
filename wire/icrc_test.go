package wire_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

func TestSealVerify(t *testing.T) {
	for _, f := range []wire.Framing{framing4, framing6} {
		for _, bp := range allBuiltPackets(t) {
			pkt := slices.Clone(bp.pkt)
			wire.Seal(&f, pkt)
			ip := ipPacket(&f, pkt)
			if !wire.VerifyICRC(&f, pkt) {
				t.Fatalf("%v %v: VerifyICRC false after Seal", f.Src, bp.h.BTH.Opcode)
			}
			if got, want := binary.LittleEndian.Uint32(pkt[len(pkt)-4:]), refICRC(ip); got != want || wire.ICRC(&f, pkt) != want {
				t.Fatalf("%v %v: ICRC %#08x, reference %#08x", f.Src, bp.h.BTH.Opcode, got, want)
			}
			if p, err := wire.Parse(pkt); err != nil || p.ICRC() != wire.ICRC(&f, pkt) {
				t.Fatalf("Parse after Seal: %v, ICRC %#x", err, p.ICRC())
			}
		}
	}
	// IPv4-mapped addresses frame as IPv4.
	m := framing4
	m.Src, m.Dst = netip.AddrFrom16(m.Src.As16()), netip.AddrFrom16(m.Dst.As16())
	pkt := build(t, sampleHeaders(wire.RCSendOnly), []byte("mapped"))
	if !m.IsIPv4() || wire.ICRC(&m, pkt) != wire.ICRC(&framing4, pkt) {
		t.Error("IPv4-mapped framing gives another ICRC than IPv4")
	}
	if wire.ICRC(&framing6, pkt) == wire.ICRC(&framing4, pkt) {
		t.Error("IPv4 and IPv6 framing give the same ICRC")
	}
	// Too short to carry an ICRC.
	short := make([]byte, wire.BTHLen+wire.ICRCLen-1)
	wire.Seal(&framing4, short)
	if wire.ICRC(&framing4, short) != 0 || wire.VerifyICRC(&framing4, short) || !bytes.Equal(short, make([]byte, len(short))) {
		t.Error("ICRC of a packet shorter than BTH and ICRC")
	}
}

// TestICRCBitFlips flips every bit of sealed IPv4 and IPv6 packets: the ICRC
// must stay valid when the bit is in a field routers may change (TOS/traffic
// class, TTL/hop limit, flow label, IPv4 and UDP checksums, FECN/BECN byte)
// and fail everywhere else that SplitIP still accepts (addresses, ports, IPv4
// ID and flags, BTH, extension headers, payload, pad, the ICRC itself).
func TestICRCBitFlips(t *testing.T) {
	ops := []wire.Opcode{wire.RCWriteOnlyImm, wire.UDSendOnlyImm, wire.RCCompareSwap, wire.RCAtomicAcknowledge, wire.RCFlush, wire.CNP}
	for _, f := range []wire.Framing{framing4, framing6} {
		for _, op := range ops {
			f := f
			f.IPv4ID = 0x1234
			n := 0
			if op.Info().Has(wire.HdrPayload) {
				n = 5
			}
			pkt := build(t, sampleHeaders(op), samplePayload(op, n))
			ip := sealedIP(&f, pkt)
			masked, invariant := 0, 0
			for i := range ip {
				for bit := range 8 {
					b := slices.Clone(ip)
					b[i] ^= 1 << bit
					g, l4, err := wire.SplitIP(b)
					if err != nil {
						continue // a length, version or protocol field
					}
					want := icrcMask(ip, i)&(1<<bit) != 0
					if got := wire.VerifyICRC(&g, l4); got != want {
						t.Errorf("%v over %v: flipping bit %d of byte %d: VerifyICRC %v, want %v", op, f.Src, bit, i, got, want)
					}
					if want {
						masked++
					} else {
						invariant++
					}
				}
			}
			wantMasked := 8 * 6 // IPv4: TOS, TTL, checksum (2), UDP checksum (2); BTH byte 4 below
			if !f.IsIPv4() {
				wantMasked = 4 + 8*6 // traffic class, flow label, hop limit, UDP checksum (2)
			}
			if masked != wantMasked+8 || invariant < 8*(len(pkt)-1+12) { // packet, ports, addresses
				t.Errorf("%v over %v: %d masked and %d invariant bits checked", op, f.Src, masked, invariant)
			}
		}
	}
}

func TestICRCFramingFields(t *testing.T) {
	pkt := build(t, sampleHeaders(wire.RCSendOnly), []byte{1, 2, 3})
	for _, base := range []wire.Framing{framing4, framing6} {
		wire.Seal(&base, pkt)
		change := map[string]func(f *wire.Framing){
			"src":      func(f *wire.Framing) { f.Src = f.Src.Next() },
			"dst":      func(f *wire.Framing) { f.Dst = f.Dst.Prev() },
			"src port": func(f *wire.Framing) { f.SrcPort++ },
			"dst port": func(f *wire.Framing) { f.DstPort = 4792 },
		}
		if base.IsIPv4() {
			change["IPv4 ID"] = func(f *wire.Framing) { f.IPv4ID = 1 }
			change["IPv4 flags"] = func(f *wire.Framing) { f.IPv4Frag = 0 }
		}
		for name, c := range change {
			f := base
			c(&f)
			if wire.VerifyICRC(&f, pkt) {
				t.Errorf("%v: changing the %s keeps the ICRC valid", base.Src, name)
			}
		}
		if !base.IsIPv4() {
			f := base
			f.IPv4ID, f.IPv4Frag = 7, 7 // not part of IPv6
			if !wire.VerifyICRC(&f, pkt) {
				t.Error("IPv4 fields change the ICRC of an IPv6 packet")
			}
		}
	}
}

func TestICRCAllocs(t *testing.T) {
	pkt := build(t, sampleHeaders(wire.RCWriteOnly), make([]byte, 1024))
	for _, f := range []wire.Framing{framing4, framing6} {
		if a := testing.AllocsPerRun(100, func() {
			wire.Seal(&f, pkt)
			if !wire.VerifyICRC(&f, pkt) {
				panic("VerifyICRC")
			}
		}); a != 0 {
			t.Errorf("%v: Seal+VerifyICRC allocate %v times", f.Src, a)
		}
	}
	h := sampleHeaders(wire.RCSendOnly)
	buf, payload := make([]byte, 2048), make([]byte, 1024)
	if a := testing.AllocsPerRun(100, func() {
		n, _ := wire.Build(buf, h, payload)
		if _, err := wire.Parse(buf[:n]); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("Build+Parse allocate %v times", a)
	}
}

// TestICRCParts: a packet held in three parts (headers, a payload kept
// elsewhere, pad and ICRC) gets the ICRC the whole packet gets, whatever
// the split, and SealParts writes it where Seal does; parts that cannot
// hold a BTH and an ICRC give 0 and are left alone. It does not allocate.
func TestICRCParts(t *testing.T) {
	payload := make([]byte, 301)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	pkt := build(t, sampleHeaders(wire.RCWriteFirst), payload)
	for _, f := range []wire.Framing{framing4, framing6} {
		want := wire.ICRC(&f, pkt)
		for a := wire.BTHLen; a <= len(pkt)-wire.ICRCLen; a++ {
			for b := a; b <= len(pkt)-wire.ICRCLen; b += 17 {
				head, mid := pkt[:a], slices.Clone(pkt[a:b])
				tail := slices.Clone(pkt[b:])
				if got := wire.ICRCParts(&f, head, mid, tail); got != want {
					t.Fatalf("%v: split at %d and %d: ICRC %#x, want %#x", f.Src, a, b, got, want)
				}
				clear(tail[len(tail)-wire.ICRCLen:])
				wire.SealParts(&f, head, mid, tail)
				if whole := slices.Concat(head, mid, tail); !wire.VerifyICRC(&f, whole) {
					t.Fatalf("%v: split at %d and %d: SealParts wrote no valid ICRC", f.Src, a, b)
				}
			}
		}
	}
	if got := wire.ICRCParts(&framing4, pkt[:wire.BTHLen-1], nil, pkt[wire.BTHLen-1:]); got != 0 {
		t.Errorf("a head shorter than a BTH: %#x", got)
	}
	short := []byte{1, 2, 3}
	wire.SealParts(&framing4, pkt[:wire.BTHLen], pkt[wire.BTHLen:], short)
	if got := wire.ICRCParts(&framing4, pkt[:wire.BTHLen], pkt[wire.BTHLen:], short); got != 0 || short[0] != 1 || short[2] != 3 {
		t.Errorf("a tail shorter than an ICRC: %#x, tail %v", got, short)
	}
	head, mid, tail := pkt[:40], pkt[40:300], pkt[300:]
	if a := testing.AllocsPerRun(100, func() { wire.SealParts(&framing4, head, mid, tail) }); a != 0 {
		t.Errorf("SealParts allocates %v times", a)
	}
}

func BenchmarkICRC(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		for _, f := range []wire.Framing{framing4, framing6} {
			v := "IPv4"
			if !f.IsIPv4() {
				v = "IPv6"
			}
			b.Run(fmt.Sprintf("%s/%dB", v, size), func(b *testing.B) {
				// size is the whole RoCEv2 packet: BTH + RETH + payload + ICRC.
				pkt := build(b, sampleHeaders(wire.RCWriteOnly), make([]byte, size-wire.BTHLen-wire.RETHLen-wire.ICRCLen))
				b.SetBytes(int64(len(pkt)))
				b.ReportAllocs()
				for b.Loop() {
					wire.Seal(&f, pkt)
				}
			})
		}
	}
}

func TestSplitIP(t *testing.T) {
	pkt := build(t, sampleHeaders(wire.UDSendOnly), samplePayload(wire.UDSendOnly, 9))
	for _, f := range []wire.Framing{framing4, framing6} {
		f.IPv4ID = 0x4321
		if !f.IsIPv4() {
			f.IPv4ID, f.IPv4Frag = 0, 0
		}
		ip := sealedIP(&f, slices.Clone(pkt))
		g, l4, err := wire.SplitIP(ip)
		if err != nil || g != f || !bytes.Equal(l4, ip[len(ip)-len(pkt):]) {
			t.Fatalf("SplitIP = %+v, %x, %v; want %+v", g, l4, err, f)
		}
		// Ethernet padding after the IP packet is not UDP payload.
		g, l4, err = wire.SplitIP(append(slices.Clone(ip), 0, 0, 0, 0, 0, 0))
		if err != nil || g != f || len(l4) != len(pkt) || !wire.VerifyICRC(&g, l4) {
			t.Errorf("SplitIP with trailing padding = %+v, %d bytes, %v", g, len(l4), err)
		}
		for k := range len(ip) {
			_, _, err := splitNoPanic(t, slices.Clone(ip[:k]))
			wantErr(t, err, wire.ErrFraming, fmt.Sprintf("SplitIP(%v packet cut to %d of %d bytes)", f.Src, k, len(ip)))
		}
		bad := map[string]func(b []byte){
			"IP version 5": func(b []byte) { b[0] = 0x55 },
			"UDP length":   func(b []byte) { b[len(b)-len(pkt)-4]++ },
			"short UDP length": func(b []byte) {
				binary.BigEndian.PutUint16(b[len(b)-len(pkt)-4:], uint16(len(pkt)+4))
			},
		}
		if f.IsIPv4() {
			bad["IPv4 options"] = func(b []byte) { b[0] = 0x46 }
			bad["protocol TCP"] = func(b []byte) { b[9] = 6 }
			bad["total length too big"] = func(b []byte) { binary.BigEndian.PutUint16(b[2:], uint16(len(b)+1)) }
			bad["total length < 28"] = func(b []byte) { binary.BigEndian.PutUint16(b[2:], 27) }
		} else {
			bad["next header TCP"] = func(b []byte) { b[6] = 6 }
			bad["payload length too big"] = func(b []byte) { binary.BigEndian.PutUint16(b[4:], uint16(len(b)-39)) }
			bad["payload length < 8"] = func(b []byte) { binary.BigEndian.PutUint16(b[4:], 7) }
		}
		for name, corrupt := range bad {
			b := slices.Clone(ip)
			corrupt(b)
			_, _, err := splitNoPanic(t, b)
			wantErr(t, err, wire.ErrFraming, fmt.Sprintf("SplitIP(%v, %s)", f.Src, name))
		}
	}
}

func splitNoPanic(t *testing.T, b []byte) (f wire.Framing, l4 []byte, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("SplitIP(%x) panicked: %v", b, r)
		}
	}()
	return wire.SplitIP(b)
}

// TestICRCMixedFraming: a framing with one IPv4 and one IPv6 address (only
// a forged or corrupt IPv6 header carries an IPv4-mapped address beside a
// native one) is framed as IPv6 with both addresses as sent; it must not
// panic, and the seal verifies.
func TestICRCMixedFraming(t *testing.T) {
	pkt := make([]byte, wire.BTHLen+8+wire.ICRCLen)
	pkt[0] = 0x04
	for _, f := range []wire.Framing{
		{Src: netip.MustParseAddr("::ffff:198.18.0.1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 0xC001, DstPort: 4791},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("198.18.0.2"), SrcPort: 0xC001, DstPort: 4791},
	} {
		if f.IsIPv4() {
			t.Errorf("%v -> %v: framed as IPv4", f.Src, f.Dst)
		}
		wire.Seal(&f, pkt)
		if !wire.VerifyICRC(&f, pkt) {
			t.Errorf("%v -> %v: the seal does not verify", f.Src, f.Dst)
		}
		six := f
		six.Src, six.Dst = netip.AddrFrom16(f.Src.As16()), netip.AddrFrom16(f.Dst.As16())
		if wire.ICRC(&f, pkt) != wire.ICRC(&six, pkt) {
			t.Errorf("%v -> %v: not the IPv6 framing of the same addresses", f.Src, f.Dst)
		}
	}
}
