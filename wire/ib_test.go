package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

var (
	ibSGID = wire.GID{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x01, 0x02, 0x03}
	ibDGID = wire.GID{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0x0b, 0x0c}
)

// ibFraming returns a framing with every field away from zero; global adds
// a GRH.
func ibFraming(op wire.Opcode, global bool) *wire.IBFraming {
	k := uint16(op)
	f := &wire.IBFraming{LRH: wire.LRHFields{VL: uint8(k % 15), SL: uint8(k+3) % 16, DLID: 0x1200 | k, SLID: 0x0C00 | k}}
	if global {
		f.GRH = &wire.GRHFields{TClass: 0xA5, FlowLabel: 0x9ABCD, HopLmt: 0x3F, SGID: ibSGID, DGID: ibDGID}
	}
	return f
}

// buildIB builds a sealed IB packet and fails the test on error or a length
// other than IBPacketLen.
func buildIB(tb testing.TB, f *wire.IBFraming, h *wire.Headers, payload []byte) []byte {
	tb.Helper()
	n := wire.IBPacketLen(h.BTH.Opcode, len(payload), f.GRH != nil)
	b := make([]byte, n)
	m, err := wire.BuildIB(b, f, h, payload)
	if err != nil || m != n {
		tb.Fatalf("BuildIB %v with %d payload bytes: %d, %v; IBPacketLen %d", h.BTH.Opcode, len(payload), m, err, n)
	}
	return b
}

// allIBPackets is one sealed packet of every opcode and payload size, local
// and global.
func allIBPackets(tb testing.TB) [][]byte {
	var out [][]byte
	for _, bp := range allBuiltPackets(tb) {
		for _, global := range []bool{false, true} {
			out = append(out, buildIB(tb, ibFraming(bp.h.BTH.Opcode, global), bp.h, bp.payload))
		}
	}
	return out
}

func TestLRHRoundTrip(t *testing.T) {
	for _, f := range []wire.LRHFields{
		{},
		{VL: 15, LVer: 15, SL: 15, LNH: wire.LNHIBAGlobal, DLID: 0xFFFF, PktLen: wire.MaxPktLen, SLID: 0xFFFF},
		{VL: 1, LVer: 0, SL: 8, LNH: wire.LNHIBALocal, DLID: 0x0001, PktLen: 0x400, SLID: 0xBFFF},
		{VL: 8, LVer: 1, SL: 1, LNH: wire.LNHIPNonIBA, DLID: 0xC000, PktLen: 1, SLID: 0x8000},
	} {
		b := make([]byte, wire.LRHLen)
		f.Encode(wire.LRH(b))
		if got := wire.LRH(b).Fields(); got != f {
			t.Errorf("LRH round trip: %+v became %+v (% x)", f, got, b)
		}
	}
	// Bit positions, IBTA 7.7: VL|LVer, SL|rsv2|LNH, DLID, rsv5|PktLen, SLID.
	b := make([]byte, wire.LRHLen)
	(&wire.LRHFields{VL: 0xA, LVer: 0x5, SL: 0xC, LNH: 3, DLID: 0x1234, PktLen: 0x567, SLID: 0x89AB}).Encode(wire.LRH(b))
	if want := []byte{0xA5, 0xC3, 0x12, 0x34, 0x05, 0x67, 0x89, 0xAB}; !bytes.Equal(b, want) {
		t.Errorf("LRH bytes % x, want % x", b, want)
	}
	// Reserved bits are ignored on reading.
	b[1] |= 0x0C
	b[4] |= 0xF8
	if f := wire.LRH(b).Fields(); f.LNH != 3 || f.PktLen != 0x567 || f.SL != 0xC {
		t.Errorf("reserved bits leak: %+v", f)
	}
	wire.LRH(b).SetVL(7)
	if f := wire.LRH(b).Fields(); f.VL != 7 || f.LVer != 5 {
		t.Errorf("SetVL(7): %+v", f)
	}
	for n, s := range map[wire.LNH]string{0: "raw", 1: "IP non-IBA", 2: "IBA local", 3: "IBA global", 4: "LNH(4)"} {
		if n.String() != s {
			t.Errorf("LNH(%d).String() = %q", n, n.String())
		}
	}
}

func TestGRHRoundTrip(t *testing.T) {
	for _, f := range []wire.GRHFields{
		{},
		{IPVer: 6, TClass: 0xFF, FlowLabel: 0xFFFFF, PayLen: 0xFFFF, NxtHdr: 0xFF, HopLmt: 0xFF, SGID: ibSGID, DGID: ibDGID},
		{IPVer: 6, TClass: 0x5A, FlowLabel: 0x12345, PayLen: 4096 + 28, NxtHdr: wire.GRHNextHeaderIBA, HopLmt: 1, SGID: ibDGID, DGID: ibSGID},
	} {
		b := make([]byte, wire.GRHLen)
		f.Encode(wire.GRH(b))
		if got := wire.GRH(b).Fields(); got != f {
			t.Errorf("GRH round trip: %+v became %+v", f, got)
		}
	}
	b := make([]byte, wire.GRHLen)
	(&wire.GRHFields{IPVer: 6, TClass: 0xAB, FlowLabel: 0xCDEF1, PayLen: 0x2345, NxtHdr: 0x1B, HopLmt: 0x40}).Encode(wire.GRH(b))
	if want := []byte{0x6A, 0xBC, 0xDE, 0xF1, 0x23, 0x45, 0x1B, 0x40}; !bytes.Equal(b[:8], want) {
		t.Errorf("GRH bytes % x, want % x (IPv6 layout)", b[:8], want)
	}
}

func TestIBRoundTrip(t *testing.T) {
	for _, bp := range allBuiltPackets(t) {
		op := bp.h.BTH.Opcode
		for _, global := range []bool{false, true} {
			f := ibFraming(op, global)
			b := buildIB(t, f, bp.h, bp.payload)
			p, err := wire.ParseIB(b)
			if err != nil {
				t.Fatalf("%v global %v: %v", op, global, err)
			}
			lf := p.LRH().Fields()
			wantLNH := map[bool]wire.LNH{false: wire.LNHIBALocal, true: wire.LNHIBAGlobal}[global]
			if lf.VL != f.LRH.VL || lf.SL != f.LRH.SL || lf.DLID != f.LRH.DLID || lf.SLID != f.LRH.SLID ||
				lf.LVer != 0 || lf.LNH != wantLNH || int(lf.PktLen)*4 != len(b)-2 {
				t.Errorf("%v: LRH %+v, framing %+v, %d bytes", op, lf, f.LRH, len(b))
			}
			if global {
				g := p.GRH().Fields()
				want := *f.GRH
				want.IPVer, want.NxtHdr, want.PayLen = 6, 0x1B, uint16(len(b)-2-8-40)
				if g != want {
					t.Errorf("%v: GRH %+v, want %+v", op, g, want)
				}
			} else if p.GRH() != nil {
				t.Errorf("%v: local packet has a GRH view", op)
			}
			// The transport part is what Build makes, sealed for IB.
			tr := p.Transport()
			want := slices.Clone(bp.pkt)
			copy(want[len(want)-4:], tr.Bytes()[len(tr.Bytes())-4:])
			if !bytes.Equal(tr.Bytes(), want) || !bytes.Equal(tr.Payload(), bp.payload) {
				t.Errorf("%v: transport\n got %x\nwant %x", op, tr.Bytes(), want)
			}
			if tr.ICRC() != refIBICRC(b[:len(b)-2]) || p.VCRC() != refVCRC(b[:len(b)-2]) {
				t.Errorf("%v: ICRC %08x VCRC %04x, reference %08x %04x", op, tr.ICRC(), p.VCRC(), refIBICRC(b[:len(b)-2]), refVCRC(b[:len(b)-2]))
			}
		}
	}
}

// refIBICRC is the IB ICRC written the long way, from IBTA 7.8.1: a masked
// copy of the whole packet, CRC-32 (IEEE) of it, nothing shared with wire's
// prefix code.
func refIBICRC(pkt []byte) uint32 { return crc32.ChecksumIEEE(icrcMasked(pkt)) }

// registerCRC is a CRC as the IBTA draws its ICRC and VCRC generators
// (7.8.1, 7.8.2): a shift register of the given width and polynomial preset
// to ones, fed each byte least significant bit first, its content
// complemented and bit-swapped into the value, which goes on the wire least
// significant byte first. It runs MSB-first on bit-reversed bytes, unlike
// wire's reflected tables. With width 32 and polynomial 0x04C11DB7 it is the
// ICRC's CRC-32, whose convention interop with Linux rxe pins (see
// TestRegisterModel); width 16 and polynomial 0x100B make the VCRC.
func registerCRC(width int, poly uint32, b []byte) uint32 {
	top := uint32(1) << (width - 1)
	mask := top<<1 - 1
	reg := mask
	for _, v := range b {
		reg ^= uint32(bits.Reverse8(v)) << (width - 8)
		for range 8 {
			if reg&top != 0 {
				reg = (reg<<1 ^ poly) & mask
			} else {
				reg = reg << 1 & mask
			}
		}
	}
	return bits.Reverse32(^reg&mask) >> (32 - width)
}

func refVCRC(b []byte) uint16 { return uint16(registerCRC(16, 0x100B, b)) }

// TestRegisterModel ties the VCRC's conventions to the ICRC's: the register
// model that gives the VCRC gives, at 32 bits, hash/crc32's IEEE CRC, which
// the RoCE ICRC uses and which the golden captures from rxe confirm
// (TestGolden), byte order included.
func TestRegisterModel(t *testing.T) {
	for _, b := range [][]byte{[]byte("123456789"), {}, {0xFF}, bytes.Repeat([]byte{0xA5, 0x00, 0x3C}, 100)} {
		if got, want := registerCRC(32, 0x04C11DB7, b), crc32.ChecksumIEEE(b); got != want {
			t.Errorf("register model, CRC-32 of %d bytes: %08x, hash/crc32 %08x", len(b), got, want)
		}
	}
	for _, b := range allIBPackets(t)[:20] {
		body := b[:len(b)-2]
		if got, want := binary.LittleEndian.Uint32(body[len(body)-4:]), registerCRC(32, 0x04C11DB7, icrcMasked(body)); got != want {
			t.Errorf("ICRC %08x, register model over the masked packet %08x", got, want)
		}
	}
}

// icrcMasked returns a copy of pkt (LRH through ICRC) without its ICRC and
// with the variant fields set to ones, from IBTA 7.8.1.
func icrcMasked(pkt []byte) []byte {
	m := slices.Clone(pkt[:len(pkt)-4])
	bth := 8
	if m[1]&3 == 3 {
		for i := range 8 {
			m[i] = 0xFF // the whole LRH
		}
		m[8] |= 0x0F // TClass (high nibble of byte 0 is IPVer)
		m[9], m[10], m[11] = 0xFF, 0xFF, 0xFF
		m[15] = 0xFF // HopLmt
		bth += 40
	} else {
		m[0] |= 0xF0 // VL
	}
	m[bth+4] = 0xFF
	return m
}

func TestVCRC(t *testing.T) {
	// The catalogue check value over "123456789" for these parameters
	// (width 16, poly 0x100B, init 0xFFFF, reflected in and out, xorout
	// 0xFFFF), from the register model above.
	check := []byte("123456789")
	if got, ref := wire.VCRC(check), refVCRC(check); got != ref {
		t.Errorf("VCRC(123456789) = %04x, register model %04x", got, ref)
	}
	// A reflected CRC appended least significant byte first leaves a
	// constant residue over the packet and its CRC: the receiver's check.
	var residue uint16
	for i, b := range allIBPackets(t) {
		if !wire.VerifyVCRC(b) {
			t.Fatalf("packet %d: VerifyVCRC false after BuildIB", i)
		}
		r := ^wire.VCRC(b) // the register after the whole packet
		if i == 0 {
			residue = r
		} else if r != residue {
			t.Fatalf("packet %d: residue %04x, first packet %04x", i, r, residue)
		}
		b[len(b)-1] ^= 0x01
		if wire.VerifyVCRC(b) {
			t.Fatalf("packet %d: VerifyVCRC true with a flipped bit", i)
		}
	}
	// Every length and alignment of the slicing loop and its tail.
	rng := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := range 80 {
		for off := range 9 {
			if got, ref := wire.VCRC(buf[off:off+n]), refVCRC(buf[off:off+n]); got != ref {
				t.Fatalf("VCRC of %d bytes at %d: %04x, register model %04x", n, off, got, ref)
			}
		}
	}
	if wire.VerifyVCRC([]byte{1}) {
		t.Error("VerifyVCRC of one byte")
	}
	wire.SealVCRC([]byte{1}) // no panic
}

// TestIBICRCMasks changes each variant field and checks that the ICRC
// holds, and each invariant one and checks that it does not.
func TestIBICRCMasks(t *testing.T) {
	h := sampleHeaders(wire.RCSendOnly)
	pl := samplePayload(wire.RCSendOnly, 33)
	type change struct {
		name string
		off  int
		mask byte
		keep bool
	}
	for _, global := range []bool{false, true} {
		b := buildIB(t, ibFraming(wire.RCSendOnly, global), h, pl)
		bth := 8 + map[bool]int{false: 0, true: 40}[global]
		changes := []change{
			{"LRH VL", 0, 0xF0, true},
			{"BTH Resv8a", bth + 4, 0xFF, true},
			{"BTH opcode-adjacent SE", bth + 1, 0x80, false},
			{"BTH DestQP", bth + 7, 0x01, false},
			{"payload", bth + 12, 0x40, false},
		}
		if global {
			changes = append(changes,
				change{"LRH SL", 1, 0xF0, true}, change{"LRH DLID", 3, 0xFF, true}, change{"LRH SLID", 6, 0x0F, true},
				change{"GRH TClass", 8, 0x0F, true}, change{"GRH TClass low", 9, 0xF0, true},
				change{"GRH FlowLabel", 10, 0xFF, true}, change{"GRH HopLmt", 15, 0xFF, true},
				change{"GRH PayLen", 12, 0x01, false}, change{"GRH SGID", 20, 0x01, false},
				change{"GRH DGID", 47, 0x80, false})
		} else {
			changes = append(changes, change{"LRH SL", 1, 0x10, false}, change{"LRH DLID", 3, 0x01, false},
				change{"LRH SLID", 7, 0x80, false})
		}
		for _, c := range changes {
			m := slices.Clone(b)
			m[c.off] ^= c.mask
			body := m[:len(m)-2]
			kept := binary.LittleEndian.Uint32(body[len(body)-4:]) == wire.IBICRC(body)
			if kept != c.keep {
				t.Errorf("global %v: changing %s: ICRC still valid %v, want %v", global, c.name, kept, c.keep)
			}
		}
	}
	// Raw packets and short ones have no ICRC.
	b := buildIB(t, ibFraming(wire.RCSendOnly, false), h, pl)
	b[1] &^= 3
	if wire.IBICRC(b) != 0 {
		t.Error("IBICRC of a raw packet")
	}
	for _, n := range []int{0, 7, 8 + 12 + 3} {
		if c := wire.IBICRC(make([]byte, n)); c != 0 {
			t.Errorf("IBICRC of %d bytes = %08x", n, c)
		}
	}
}

func TestParseIBRejects(t *testing.T) {
	h := sampleHeaders(wire.UDSendOnly)
	pl := samplePayload(wire.UDSendOnly, 64)
	local := buildIB(t, ibFraming(wire.UDSendOnly, false), h, pl)
	global := buildIB(t, ibFraming(wire.UDSendOnly, true), h, pl)
	reseal := func(b []byte) []byte { wire.SealIB(b); return b }
	revcrc := func(b []byte) []byte { wire.SealVCRC(b); return b }
	for _, c := range []struct {
		name   string
		b      []byte
		target error
	}{
		{"link version 1", revcrc(edit(local, func(b []byte) { b[0] |= 1 })), wire.ErrMalformed},
		{"length field short", revcrc(edit(local, func(b []byte) { b[5]-- })), wire.ErrMalformed},
		{"length field long", revcrc(edit(local, func(b []byte) { b[5]++ })), wire.ErrMalformed},
		{"extra bytes", revcrc(append(slices.Clone(local), 0, 0, 0, 0)), wire.ErrMalformed},
		{"bad VCRC", edit(local, func(b []byte) { b[len(b)-1] ^= 0x80 }), wire.ErrVCRC},
		{"payload bit, VCRC resealed", revcrc(edit(local, func(b []byte) { b[40] ^= 0x04 })), wire.ErrICRC},
		{"bad ICRC", revcrc(edit(global, func(b []byte) { b[len(b)-3] ^= 0x10 })), wire.ErrICRC},
		{"GRH SGID, VCRC resealed", revcrc(edit(global, func(b []byte) { b[20] ^= 1 })), wire.ErrICRC},
		{"raw LNH", revcrc(edit(local, func(b []byte) { b[1] &^= 3 })), wire.ErrMalformed},
		{"IP non-IBA LNH", revcrc(edit(local, func(b []byte) { b[1] = b[1]&^3 | 1 })), wire.ErrMalformed},
		{"GRH IP version 4", reseal(edit(global, func(b []byte) { b[8] = 0x40 | b[8]&0x0F })), wire.ErrMalformed},
		{"GRH next header UDP", reseal(edit(global, func(b []byte) { b[14] = 17 })), wire.ErrMalformed},
		{"GRH payload length", reseal(edit(global, func(b []byte) { b[13]-- })), wire.ErrMalformed},
		{"global LNH on a local packet", reseal(edit(local, func(b []byte) { b[1] |= 3 })), wire.ErrMalformed},
		{"unknown opcode", reseal(edit(local, func(b []byte) { b[8] = 0x1F })), wire.ErrMalformed},
	} {
		_, err := parseIBNoPanic(t, c.b)
		wantErr(t, err, c.target, c.name)
		if err != nil && !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v does not wrap ErrMalformed", c.name, err)
		}
	}
	if errors.Is(mustErr(parseIBNoPanic(t, edit(local, func(b []byte) { b[len(b)-1] ^= 1 }))), wire.ErrICRC) {
		t.Error("a VCRC error also says ICRC")
	}
}

func mustErr(_ wire.IBPacket, err error) error { return err }

func edit(b []byte, f func([]byte)) []byte {
	b = slices.Clone(b)
	f(b)
	return b
}

func parseIBNoPanic(t *testing.T, b []byte) (p wire.IBPacket, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("ParseIB(% x) panicked: %v", b, r)
		}
	}()
	return wire.ParseIB(b)
}

// TestParseIBTruncated parses every proper prefix of local and global
// packets: each is rejected. Then, where the length allows, it makes the LRH
// length, the GRH payload length and the CRCs fit the prefix, so that the
// transport checks see the truncation.
func TestParseIBTruncated(t *testing.T) {
	for _, b := range allIBPackets(t)[:40] {
		for n := range len(b) {
			_, err := parseIBNoPanic(t, b[:n])
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("%d of %d bytes: %v", n, len(b), err)
			}
			if n >= 10 && n%4 == 2 {
				c := slices.Clone(b[:n])
				binary.BigEndian.PutUint16(c[4:], uint16((n-2)/4))
				if c[1]&3 == 3 && n >= 50 {
					binary.BigEndian.PutUint16(c[12:], uint16(n-2-48))
				}
				wire.SealIB(c)
				wire.SealVCRC(c)
				// A shorter packet may be valid (a SEND FIRST without payload):
				// then every view must lie inside it.
				p, err := parseIBNoPanic(t, c)
				if err == nil && (len(p.Bytes()) != n || len(p.Transport().Bytes()) != n-2-(n-len(c))-8-len(p.GRH())) {
					t.Fatalf("%d of %d bytes, resealed: parsed as %d bytes, transport %d", n, len(b), len(p.Bytes()), len(p.Transport().Bytes()))
				} else if err != nil && !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("%d of %d bytes, resealed: %v", n, len(b), err)
				}
			}
		}
	}
	var z wire.IBPacket
	if z.LRH() != nil || z.GRH() != nil || z.Bytes() != nil || z.VCRC() != 0 || z.Transport().Info() != nil {
		t.Error("zero IBPacket has views")
	}
}

func TestBuildIBErrors(t *testing.T) {
	h := sampleHeaders(wire.RCSendOnly)
	f := ibFraming(wire.RCSendOnly, false)
	if _, err := wire.BuildIB(make([]byte, 20), f, h, nil); !errors.Is(err, wire.ErrBuild) {
		t.Errorf("short buffer: %v", err)
	}
	bad := *h
	bad.BTH.Opcode = 0x1F
	if _, err := wire.BuildIB(make([]byte, 100), f, &bad, nil); !errors.Is(err, wire.ErrBuild) {
		t.Errorf("unknown opcode: %v", err)
	}
	if wire.IBPacketLen(0x1F, 0, false) != -1 {
		t.Error("IBPacketLen of an unknown opcode")
	}
	big := make([]byte, 8200)
	if _, err := wire.BuildIB(make([]byte, 9000), f, h, big); !errors.Is(err, wire.ErrBuild) {
		t.Errorf("%d-byte payload past the LRH length: %v", len(big), err)
	}
	ack := sampleHeaders(wire.RCAcknowledge)
	if _, err := wire.BuildIB(make([]byte, 100), f, ack, []byte{1}); !errors.Is(err, wire.ErrBuild) {
		t.Errorf("payload on an ACK: %v", err)
	}
}

func FuzzParseIB(f *testing.F) {
	for _, b := range allIBPackets(f) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 10))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := slices.Clone(b)
		p, err := wire.ParseIB(b)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) || err.Error() == "" {
				t.Fatalf("ParseIB error %v does not wrap ErrMalformed", err)
			}
			return
		}
		off := 8 + len(p.GRH())
		tr := p.Transport().Bytes()
		if len(p.Bytes()) != len(b) || &p.Bytes()[0] != &b[0] || offsetIn(b, tr) != off || off+len(tr)+2 != len(b) {
			t.Fatalf("views: %d bytes, transport %d at %d", len(p.Bytes()), len(tr), offsetIn(b, tr))
		}
		if !wire.VerifyVCRC(b) || wire.IBICRC(b[:len(b)-2]) != p.Transport().ICRC() || int(p.LRH().PktLen())*4+2 != len(b) {
			t.Fatal("accepted a packet whose CRCs or length do not check")
		}
		fr := wire.IBFraming{LRH: p.LRH().Fields()}
		if g := p.GRH(); g != nil {
			gf := g.Fields()
			fr.GRH = &gf
		}
		h := headersOf(*p.Transport())
		out := make([]byte, len(b))
		n, err := wire.BuildIB(out, &fr, &h, p.Transport().Payload())
		if err != nil || n != len(b) {
			t.Fatalf("rebuilding: %d bytes, %v; parsed %d", n, err, len(b))
		}
		want := slices.Clone(b)
		want[1] &^= 0x0C // LRH reserved bits
		want[4] &= 0x07
		clearUnencoded(want[off:len(want)-2], *p.Transport())
		wire.SealIB(want)
		if !bytes.Equal(out, want) {
			t.Fatalf("rebuilt:\n got %x\nwant %x", out, want)
		}
		if !bytes.Equal(b, in) {
			t.Fatal("ParseIB or BuildIB changed the input")
		}
	})
}

// TestIBPinned pins two packets byte for byte: an RC ACK from LID 1 to LID
// 2, local and global. The CRCs in them are our own (no independent
// implementation of the IB link layer's CRCs runs on this machine: tshark
// shows them without checking), so this catches changes, not errors; the
// reference models above are what check the CRCs.
func TestIBPinned(t *testing.T) {
	h := &wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: 0xFFFF, DestQP: 0x000012, PSN: 0x000345},
		AETH: wire.AETHFields{Syndrome: 0x1F, MSN: 7}}
	for _, c := range []struct {
		grh  *wire.GRHFields
		want string
	}{
		{nil, "00020002000700011100ffff00000012000003451f000007b3714cf381d7"},
		{&wire.GRHFields{HopLmt: 64, SGID: ibSGID, DGID: ibDGID},
			"00030002001100016000000000141b40fe800000000000000002c90300010203fe800000000000000002c903000a0b0c" +
				"1100ffff00000012000003451f000007dd68e06dbc1f"},
	} {
		b := buildIB(t, &wire.IBFraming{LRH: wire.LRHFields{DLID: 2, SLID: 1}, GRH: c.grh}, h, nil)
		if got := fmt.Sprintf("%x", b); got != c.want {
			t.Errorf("global %v:\n got %s\nwant %s", c.grh != nil, got, c.want)
		}
	}
}

func TestIBAllocs(t *testing.T) {
	h := sampleHeaders(wire.RCWriteOnly)
	pl := make([]byte, 1024)
	f := ibFraming(wire.RCWriteOnly, true)
	b := make([]byte, wire.IBPacketLen(wire.RCWriteOnly, len(pl), true))
	if a := testing.AllocsPerRun(100, func() {
		if _, err := wire.BuildIB(b, f, h, pl); err != nil {
			panic(err)
		}
		if _, err := wire.ParseIB(b); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("BuildIB+ParseIB allocate %v times", a)
	}
}

// BenchmarkParseIB measures ParseIB, which checks both CRCs, on whole IB
// packets (LRH through VCRC) of the given sizes, local and global.
func BenchmarkParseIB(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		for _, global := range []bool{false, true} {
			name := map[bool]string{false: "local", true: "global"}[global]
			b.Run(fmt.Sprintf("%s/%dB", name, size), func(b *testing.B) {
				hdr := wire.IBPacketLen(wire.RCWriteOnly, 0, global)
				pkt := buildIB(b, ibFraming(wire.RCWriteOnly, global), sampleHeaders(wire.RCWriteOnly), make([]byte, max(size-hdr, 0)))
				b.SetBytes(int64(len(pkt)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := wire.ParseIB(pkt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkVCRC(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			p := make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				wire.VCRC(p)
			}
		})
	}
}
