package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// checkPacket compares every field of a parsed packet with what was built.
func checkPacket(t *testing.T, p wire.Packet, h *wire.Headers, payload []byte) {
	t.Helper()
	op := h.BTH.Opcode
	info := op.Info()
	if p.Opcode() != op || p.Info() != info {
		t.Errorf("Opcode/Info = %v/%p, want %v/%p", p.Opcode(), p.Info(), op, info)
	}
	want := h.BTH
	want.PadCount = uint8(wire.PadFor(len(payload)))
	if got := p.BTH().Fields(); got != want {
		t.Errorf("BTH = %+v, want %+v", got, want)
	}
	if p.BTH().PadCount() != (4-len(payload)%4)%4 {
		t.Errorf("pad count %d for %d payload bytes", p.BTH().PadCount(), len(payload))
	}
	if v := p.RETH(); info.Has(wire.HdrRETH) != (v != nil) || v != nil && v.Fields() != h.RETH {
		t.Errorf("RETH = %x, want %+v (present %v)", []byte(v), h.RETH, info.Has(wire.HdrRETH))
	}
	if v := p.AETH(); info.Has(wire.HdrAETH) != (v != nil) || v != nil && v.Fields() != h.AETH {
		t.Errorf("AETH = %x, want %+v (present %v)", []byte(v), h.AETH, info.Has(wire.HdrAETH))
	}
	if v := p.DETH(); info.Has(wire.HdrDETH) != (v != nil) || v != nil && v.Fields() != h.DETH {
		t.Errorf("DETH = %x, want %+v (present %v)", []byte(v), h.DETH, info.Has(wire.HdrDETH))
	}
	if v := p.AtomicETH(); info.Has(wire.HdrAtomicETH) != (v != nil) || v != nil && v.Fields() != h.Atomic {
		t.Errorf("AtomicETH = %x, want %+v (present %v)", []byte(v), h.Atomic, info.Has(wire.HdrAtomicETH))
	}
	if v := p.AtomicAckETH(); info.Has(wire.HdrAtomicAckETH) != (v != nil) || v != nil && v.Orig() != h.AtomicAck {
		t.Errorf("AtomicAckETH = %x, want %#x (present %v)", []byte(v), h.AtomicAck, info.Has(wire.HdrAtomicAckETH))
	}
	if v := p.FETH(); info.Has(wire.HdrFETH) != (v != nil) ||
		v != nil && (wire.FETHFields{Selectivity: v.Selectivity(), PlacementType: v.PlacementType()}) != h.FETH {
		t.Errorf("FETH = %x, want %+v (present %v)", []byte(v), h.FETH, info.Has(wire.HdrFETH))
	}
	if v, ok := p.Imm(); ok != info.Has(wire.HdrImmDt) || ok && v != h.Imm {
		t.Errorf("Imm = %#x, %v; want %#x, %v", v, ok, h.Imm, info.Has(wire.HdrImmDt))
	}
	if v, ok := p.InvRKey(); ok != info.Has(wire.HdrIETH) || ok && v != h.InvRKey {
		t.Errorf("InvRKey = %#x, %v; want %#x, %v", v, ok, h.InvRKey, info.Has(wire.HdrIETH))
	}
	if !bytes.Equal(p.Payload(), payload) {
		t.Errorf("payload = %x, want %x", p.Payload(), payload)
	}
}

func TestRoundTrip(t *testing.T) {
	n := 0
	for _, bp := range allBuiltPackets(t) {
		op := bp.h.BTH.Opcode
		t.Run(fmt.Sprintf("%v/%d", op, len(bp.payload)), func(t *testing.T) {
			info := op.Info()
			want := info.HdrLen + len(bp.payload) + wire.PadFor(len(bp.payload)) + wire.ICRCLen
			if len(bp.pkt) != want || len(bp.pkt)%4 != 0 {
				t.Errorf("packet is %d bytes, want %d", len(bp.pkt), want)
			}
			p, err := wire.Parse(bp.pkt)
			if err != nil {
				t.Fatal(err)
			}
			checkPacket(t, p, bp.h, bp.payload)
			if !bytes.Equal(p.Bytes(), bp.pkt) || p.ICRC() != 0 {
				t.Errorf("Bytes/ICRC do not match the built packet")
			}
			// Pad and ICRC placeholder are zero, and so is the CNP's reserved block.
			if tail := bp.pkt[info.HdrLen+len(bp.payload):]; slices.ContainsFunc(tail, func(b byte) bool { return b != 0 }) {
				t.Errorf("pad and ICRC = %x, want zeros", tail)
			}
			if info.Has(wire.HdrCNPPad) && !bytes.Equal(bp.pkt[wire.BTHLen:info.HdrLen], make([]byte, wire.CNPPadLen)) {
				t.Errorf("CNP reserved bytes = %x", bp.pkt[wire.BTHLen:info.HdrLen])
			}
			// Every byte is written: building over garbage gives the same packet.
			dirty := bytes.Repeat([]byte{0xA5}, len(bp.pkt)+8)
			if m, err := wire.Build(dirty, bp.h, bp.payload); err != nil || !bytes.Equal(dirty[:m], bp.pkt) {
				t.Errorf("Build over a dirty buffer = %x, %v; want %x", dirty[:m], err, bp.pkt)
			}
			// WriteHeaders writes the same headers and needs room for them only.
			hb := bytes.Repeat([]byte{0x5A}, info.HdrLen)
			if m, err := wire.WriteHeaders(hb, bp.h, len(bp.payload)); err != nil || m != info.HdrLen || !bytes.Equal(hb, bp.pkt[:m]) {
				t.Errorf("WriteHeaders = %d, %v, %x; want %d, %x", m, err, hb, info.HdrLen, bp.pkt[:info.HdrLen])
			}
		})
		n++
	}
	if n < 40*2 {
		t.Fatalf("only %d packets built", n)
	}
}

func TestBuildErrors(t *testing.T) {
	big := make([]byte, 4096)
	for i := range 256 {
		op := wire.Opcode(i)
		h := sampleHeaders(op)
		if !op.Valid() {
			if wire.PacketLen(op, 0) != -1 || op.Info() != nil {
				t.Errorf("%v: PacketLen %d, Info %v for an unknown opcode", op, wire.PacketLen(op, 0), op.Info())
			}
			_, err := wire.Build(big, h, nil)
			wantErr(t, err, wire.ErrBuild, fmt.Sprintf("Build(unknown %v)", op))
			_, err = wire.WriteHeaders(big, h, 0)
			wantErr(t, err, wire.ErrBuild, fmt.Sprintf("WriteHeaders(unknown %v)", op))
			continue
		}
		info := op.Info()
		var bad []int // payload lengths the opcode does not allow
		switch {
		case !info.Has(wire.HdrPayload):
			bad = []int{1, 4, 8}
		case info.FixedPayload >= 0:
			bad = []int{0, info.FixedPayload - 1, info.FixedPayload + 1, info.FixedPayload + 4}
		}
		for _, n := range bad {
			_, err := wire.Build(big, h, make([]byte, n))
			wantErr(t, err, wire.ErrBuild, fmt.Sprintf("Build(%v, %d payload bytes)", op, n))
			_, err = wire.WriteHeaders(big, h, n)
			wantErr(t, err, wire.ErrBuild, fmt.Sprintf("WriteHeaders(%v, %d payload bytes)", op, n))
		}
		for _, n := range payloadSizes(info) {
			p := samplePayload(op, n)
			size := wire.PacketLen(op, n)
			for k := range size {
				buf := make([]byte, k)
				m, err := wire.Build(buf, h, p)
				wantErr(t, err, wire.ErrBuild, fmt.Sprintf("Build(%v, %d payload bytes) into %d bytes", op, n, k))
				if m != 0 {
					t.Errorf("Build into a short buffer returned %d", m)
				}
				_, err = wire.WriteHeaders(buf, h, n)
				if (err != nil) != (k < info.HdrLen) {
					t.Errorf("WriteHeaders(%v) into %d bytes for %d header bytes: %v", op, k, info.HdrLen, err)
				}
				if err != nil {
					wantErr(t, err, wire.ErrBuild, "WriteHeaders")
				}
			}
		}
	}
}

func TestPadFor(t *testing.T) {
	for n, want := range []int{0, 3, 2, 1, 0, 3, 2, 1, 0} {
		if got := wire.PadFor(n); got != want {
			t.Errorf("PadFor(%d) = %d, want %d", n, got, want)
		}
	}
}

// ibtaOpcodes is the opcode table written out from IBTA volume 1 table 38,
// the RoCEv2 annex (CNP) and the memory placement extensions (FLUSH, ATOMIC
// WRITE): header lengths in bytes, headers and flags.
var ibtaOpcodes = []struct {
	op      wire.Opcode
	name    string
	hdrLen  int
	headers wire.Header
	flags   wire.Flags
}{
	{0x00, "RC SEND_FIRST", 12, pay, req | send | first | start},
	{0x01, "RC SEND_MIDDLE", 12, pay, req | send | middle},
	{0x02, "RC SEND_LAST", 12, pay, req | send | last | complete},
	{0x03, "RC SEND_LAST_WITH_IMMEDIATE", 12 + 4, imm | pay, req | send | last | complete | wire.FlagImm},
	{0x04, "RC SEND_ONLY", 12, pay, req | send | start | complete},
	{0x05, "RC SEND_ONLY_WITH_IMMEDIATE", 12 + 4, imm | pay, req | send | start | complete | wire.FlagImm},
	{0x06, "RC RDMA_WRITE_FIRST", 12 + 16, reth | pay, req | write | first | start},
	{0x07, "RC RDMA_WRITE_MIDDLE", 12, pay, req | write | middle},
	{0x08, "RC RDMA_WRITE_LAST", 12, pay, req | write | last | complete},
	{0x09, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", 12 + 4, imm | pay, req | write | last | complete | wire.FlagImm},
	{0x0A, "RC RDMA_WRITE_ONLY", 12 + 16, reth | pay, req | write | start | complete},
	{0x0B, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", 12 + 16 + 4, reth | imm | pay, req | write | start | complete | wire.FlagImm},
	{0x0C, "RC RDMA_READ_REQUEST", 12 + 16, reth, req | wire.FlagRead | start | complete},
	{0x0D, "RC RDMA_READ_RESPONSE_FIRST", 12 + 4, aeth | pay, resp | first | start},
	{0x0E, "RC RDMA_READ_RESPONSE_MIDDLE", 12, pay, resp | middle},
	{0x0F, "RC RDMA_READ_RESPONSE_LAST", 12 + 4, aeth | pay, resp | last | complete},
	{0x10, "RC RDMA_READ_RESPONSE_ONLY", 12 + 4, aeth | pay, resp | start | complete},
	{0x11, "RC ACKNOWLEDGE", 12 + 4, aeth, resp | start | complete},
	{0x12, "RC ATOMIC_ACKNOWLEDGE", 12 + 4 + 8, aeth | wire.HdrAtomicAckETH, resp | start | complete},
	{0x13, "RC COMPARE_SWAP", 12 + 28, wire.HdrAtomicETH, req | wire.FlagAtomic | start | complete},
	{0x14, "RC FETCH_ADD", 12 + 28, wire.HdrAtomicETH, req | wire.FlagAtomic | start | complete},
	{0x16, "RC SEND_LAST_WITH_INVALIDATE", 12 + 4, wire.HdrIETH | pay, req | send | last | complete | wire.FlagInv},
	{0x17, "RC SEND_ONLY_WITH_INVALIDATE", 12 + 4, wire.HdrIETH | pay, req | send | start | complete | wire.FlagInv},
	{0x1C, "RC FLUSH", 12 + 4 + 16, wire.HdrFETH | reth, req | wire.FlagFlush | start | complete},
	{0x1D, "RC ATOMIC_WRITE", 12 + 16, reth | pay, req | wire.FlagAtomicWrite | start | complete},
	{0x20, "UC SEND_FIRST", 12, pay, req | send | first | start},
	{0x21, "UC SEND_MIDDLE", 12, pay, req | send | middle},
	{0x22, "UC SEND_LAST", 12, pay, req | send | last | complete},
	{0x23, "UC SEND_LAST_WITH_IMMEDIATE", 12 + 4, imm | pay, req | send | last | complete | wire.FlagImm},
	{0x24, "UC SEND_ONLY", 12, pay, req | send | start | complete},
	{0x25, "UC SEND_ONLY_WITH_IMMEDIATE", 12 + 4, imm | pay, req | send | start | complete | wire.FlagImm},
	{0x26, "UC RDMA_WRITE_FIRST", 12 + 16, reth | pay, req | write | first | start},
	{0x27, "UC RDMA_WRITE_MIDDLE", 12, pay, req | write | middle},
	{0x28, "UC RDMA_WRITE_LAST", 12, pay, req | write | last | complete},
	{0x29, "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", 12 + 4, imm | pay, req | write | last | complete | wire.FlagImm},
	{0x2A, "UC RDMA_WRITE_ONLY", 12 + 16, reth | pay, req | write | start | complete},
	{0x2B, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", 12 + 16 + 4, reth | imm | pay, req | write | start | complete | wire.FlagImm},
	{0x64, "UD SEND_ONLY", 12 + 8, wire.HdrDETH | pay, req | send | start | complete},
	{0x65, "UD SEND_ONLY_WITH_IMMEDIATE", 12 + 8 + 4, wire.HdrDETH | imm | pay, req | send | start | complete | wire.FlagImm},
	{0x81, "CNP", 12 + 16, wire.HdrCNPPad, 0},
}

const (
	pay      = wire.HdrPayload
	imm      = wire.HdrImmDt
	reth     = wire.HdrRETH
	aeth     = wire.HdrAETH
	req      = wire.FlagRequest
	resp     = wire.FlagResponse
	send     = wire.FlagSend
	write    = wire.FlagWrite
	first    = wire.FlagFirst
	middle   = wire.FlagMiddle
	last     = wire.FlagLast
	start    = wire.FlagStart
	complete = wire.FlagComplete
)

func TestOpcodeTable(t *testing.T) {
	if got, want := len(allOpcodes()), len(ibtaOpcodes); got != want {
		t.Errorf("%d opcodes in the table, want %d", got, want)
	}
	for _, e := range ibtaOpcodes {
		info := e.op.Info()
		if info == nil || !e.op.Valid() {
			t.Errorf("0x%02x (%s) is not in the table", uint8(e.op), e.name)
			continue
		}
		if info.Name != e.name || e.op.String() != e.name {
			t.Errorf("0x%02x: name %q, String %q, want %q", uint8(e.op), info.Name, e.op.String(), e.name)
		}
		if info.HdrLen != e.hdrLen || info.Headers != e.headers || info.Flags != e.flags {
			t.Errorf("%s: HdrLen %d, Headers %#x, Flags %#x; want %d, %#x, %#x",
				e.name, info.HdrLen, info.Headers, info.Flags, e.hdrLen, e.headers, e.flags)
		}
		if want := map[bool]int{true: -1, false: 0}[info.Has(pay)]; e.op == wire.RCAtomicWrite {
			if info.FixedPayload != 8 {
				t.Errorf("%s: FixedPayload %d, want 8", e.name, info.FixedPayload)
			}
		} else if info.FixedPayload != want {
			t.Errorf("%s: FixedPayload %d, want %d", e.name, info.FixedPayload, want)
		}
		for f := wire.Flags(1); f <= wire.FlagAtomicWrite; f <<= 1 {
			if info.Is(f) != (e.flags&f != 0) {
				t.Errorf("%s: Is(%#x) = %v", e.name, f, info.Is(f))
			}
		}
		for h := wire.Header(1); h <= wire.HdrPayload; h <<= 1 {
			if info.Has(h) != (e.headers&h != 0) {
				t.Errorf("%s: Has(%#x) = %v", e.name, h, info.Has(h))
			}
		}
		if e.op.Transport()|e.op.Operation() != e.op || e.op.Transport()&0x1F != 0 || e.op.Operation() > 0x1F {
			t.Errorf("%s: Transport %#x, Operation %#x", e.name, e.op.Transport(), e.op.Operation())
		}
		wantTransport := map[string]wire.Opcode{"RC": wire.TransportRC, "UC": wire.TransportUC, "UD": wire.TransportUD, "CN": wire.TransportCNP}[e.name[:2]]
		if e.op.Transport() != wantTransport {
			t.Errorf("%s: transport %#x, want %#x", e.name, e.op.Transport(), wantTransport)
		}
	}
	// Named constants agree with the numbers.
	named := map[wire.Opcode]wire.Opcode{
		wire.RCSendFirst: 0x00, wire.RCWriteOnlyImm: 0x0B, wire.RCReadRequest: 0x0C, wire.RCAcknowledge: 0x11,
		wire.RCAtomicAcknowledge: 0x12, wire.RCCompareSwap: 0x13, wire.RCFetchAdd: 0x14, wire.RCSendLastInv: 0x16,
		wire.RCSendOnlyInv: 0x17, wire.RCFlush: 0x1C, wire.RCAtomicWrite: 0x1D, wire.UCSendFirst: 0x20,
		wire.UCWriteOnlyImm: 0x2B, wire.UDSendOnly: 0x64, wire.UDSendOnlyImm: 0x65, wire.CNP: 0x81,
	}
	for c, v := range named {
		if c != v {
			t.Errorf("constant %v = %#x, want %#x", c, uint8(c), uint8(v))
		}
	}
	if s := wire.Opcode(0x15).String(); s != "Opcode(0x15)" {
		t.Errorf("unknown opcode String = %q", s)
	}
	if wire.BTHLen+wire.RETHLen+wire.AETHLen+wire.DETHLen+wire.ImmDtLen+wire.IETHLen+wire.AtomicETHLen+
		wire.AtomicAckETHLen+wire.FETHLen+wire.CNPPadLen+wire.ICRCLen != 12+16+4+8+4+4+28+8+4+16+4 {
		t.Error("header length constants differ from the IBTA")
	}
}

// TestParseTruncated cuts every packet at every length. A RoCEv2 packet has
// no length field of its own, so a prefix that drops a multiple of 4 bytes of
// payload is itself a well-formed packet with a shorter payload; every other
// prefix, and every prefix of a packet without payload or with a fixed-size
// payload, must be rejected.
func TestParseTruncated(t *testing.T) {
	for _, bp := range allBuiltPackets(t) {
		info := bp.h.BTH.Opcode.Info()
		pad := wire.PadFor(len(bp.payload))
		for k := range len(bp.pkt) {
			cut := slices.Clone(bp.pkt[:k]) // exact capacity: no reading past the end
			p, err := parseNoPanic(t, cut)
			rest := k - info.HdrLen - wire.ICRCLen
			fine := rest >= pad && rest%4 == 0 && info.Has(pay) && info.FixedPayload < 0
			switch {
			case !fine:
				wantErr(t, err, wire.ErrMalformed, fmt.Sprintf("Parse(%v with %d bytes cut to %d)", info.Name, len(bp.pkt), k))
				if p.Info() != nil || p.Bytes() != nil {
					t.Errorf("Parse returned a non-zero Packet with error %v", err)
				}
			case err != nil:
				t.Errorf("Parse(%v cut to %d) = %v, want a packet with %d payload bytes", info.Name, k, err, rest-pad)
			case len(p.Payload()) != rest-pad || !bytes.Equal(p.Payload(), bp.payload[:rest-pad]):
				t.Errorf("Parse(%v cut to %d): payload %x", info.Name, k, p.Payload())
			}
		}
	}
}

// TestParseInto: ParseInto fills a Packet in place as Parse returns one,
// and leaves the zero Packet on error whatever the slot held.
func TestParseInto(t *testing.T) {
	var slot wire.Packet
	for _, bp := range allBuiltPackets(t) {
		want, err := wire.Parse(bp.pkt)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ParseInto(&slot, bp.pkt); err != nil || !bytes.Equal(slot.Bytes(), want.Bytes()) || slot.Info() != want.Info() || !bytes.Equal(slot.Payload(), want.Payload()) {
			t.Fatalf("ParseInto(%v): %v, %+v; Parse gave %+v", want.Info().Name, err, slot, want)
		}
		if err := wire.ParseInto(&slot, bp.pkt[:wire.BTHLen]); err == nil || slot.Bytes() != nil || slot.Info() != nil || slot.Payload() != nil {
			t.Fatalf("ParseInto of a truncated %v: %v, left %+v", want.Info().Name, err, slot)
		}
	}
}

func parseNoPanic(t *testing.T, b []byte) (p wire.Packet, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Parse(%x) panicked: %v", b, r)
		}
	}()
	return wire.Parse(b)
}

// TestParseRejects corrupts valid packets in each way Parse must notice.
func TestParseRejects(t *testing.T) {
	reject := func(what string, b []byte) {
		t.Helper()
		_, err := parseNoPanic(t, b)
		wantErr(t, err, wire.ErrMalformed, what)
		var pe *wire.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %T is not a *ParseError", what, err)
		} else if len(b) > 0 && pe.Op != wire.Opcode(b[0]) || !strings.HasPrefix(pe.Error(), "wire: malformed packet") {
			t.Errorf("%s: ParseError %+v: %q", what, pe, pe.Error())
		}
	}
	reject("nil", nil)
	for i := range 256 {
		if op := wire.Opcode(i); !op.Valid() {
			for _, n := range []int{16, 64, 1024} {
				b := make([]byte, n)
				b[0] = byte(op)
				reject(fmt.Sprintf("unknown opcode %#x, %d bytes", i, n), b)
			}
		}
	}
	for _, op := range allOpcodes() {
		info := op.Info()
		h := sampleHeaders(op)
		base := build(t, h, samplePayload(op, payloadSizes(info)[0]))
		for v := 1; v < 16; v++ {
			b := slices.Clone(base)
			b[1] = b[1]&0xF0 | byte(v)
			reject(fmt.Sprintf("%v with transport version %d", op, v), b)
		}
		for pad := 1; pad < 4; pad++ {
			b := slices.Clone(base)
			b[1] |= byte(pad) << 4
			reject(fmt.Sprintf("%v (payload %d) with pad count %d", op, len(base)-info.HdrLen-4, pad), b)
		}
		if !info.Has(pay) {
			for _, n := range []int{1, 3, 4, 8} {
				b := slices.Insert(slices.Clone(base), info.HdrLen, make([]byte, n)...)
				reject(fmt.Sprintf("%v with %d payload bytes", op, n), b)
			}
			continue
		}
		// Payload plus pad must be a multiple of 4, whatever the pad count.
		for _, n := range []int{1, 2, 3, 5, 6, 7, 1025} {
			for pad := range 4 {
				b := slices.Insert(slices.Clone(base), info.HdrLen, make([]byte, n)...)
				b[1] = b[1]&^0x30 | byte(pad)<<4
				reject(fmt.Sprintf("%v with %d more bytes of payload and pad count %d", op, n, pad), b)
			}
		}
		if info.FixedPayload > 0 {
			for _, n := range []int{0, 4, info.FixedPayload + 4} {
				b := make([]byte, info.HdrLen+n+4)
				copy(b, base[:info.HdrLen])
				reject(fmt.Sprintf("%v with %d payload bytes", op, n), b)
			}
		}
	}
}

func TestZeroPacket(t *testing.T) {
	var p wire.Packet
	if p.Opcode() != 0 || p.Info() != nil || p.BTH() != nil || p.RETH() != nil || p.AETH() != nil ||
		p.DETH() != nil || p.AtomicETH() != nil || p.AtomicAckETH() != nil || p.FETH() != nil ||
		p.Payload() != nil || p.ICRC() != 0 || p.Bytes() != nil {
		t.Error("zero Packet has non-zero accessors")
	}
	if _, ok := p.Imm(); ok {
		t.Error("zero Packet has Imm")
	}
	if _, ok := p.InvRKey(); ok {
		t.Error("zero Packet has InvRKey")
	}
}

func TestBTHSetters(t *testing.T) {
	b := build(t, sampleHeaders(wire.RCSendOnly), nil)
	bth := wire.BTH(b)
	bth.SetPSN(0x123456)
	bth.SetAckReq(false)
	if bth.PSN() != 0x123456 || bth.AckReq() {
		t.Errorf("after SetPSN/SetAckReq(false): %+v", bth.Fields())
	}
	bth.SetAckReq(true)
	if !bth.AckReq() || bth.PSN() != 0x123456 {
		t.Errorf("after SetAckReq(true): %+v", bth.Fields())
	}
}

// TestBuildBytes pins the byte layout of opcodes that neither the golden
// captures nor tshark 4.0 decode field by field, and of the UD header order.
func TestBuildBytes(t *testing.T) {
	bth := wire.BTHFields{PKey: 0xFFFF, DestQP: 0x12, AckReq: true, PSN: 0x345678}
	with := func(op wire.Opcode) wire.BTHFields { b := bth; b.Opcode = op; return b }
	reth := wire.RETHFields{VA: 0x1122334455667788, RKey: 0xABC, DMALen: 64}
	for _, c := range []struct {
		h       wire.Headers
		payload []byte
		want    string
	}{
		{wire.Headers{BTH: with(wire.RCFlush), RETH: reth, FETH: wire.FETHFields{Selectivity: 1, PlacementType: 2}}, nil,
			"1c00ffff0000001280345678" + "00000012" + "1122334455667788" + "00000abc" + "00000040" + "00000000"},
		{wire.Headers{BTH: with(wire.RCAtomicWrite), RETH: reth}, []byte{1, 2, 3, 4, 5, 6, 7, 8},
			"1d00ffff0000001280345678" + "1122334455667788" + "00000abc" + "00000040" + "0102030405060708" + "00000000"},
		{wire.Headers{BTH: wire.BTHFields{Opcode: wire.CNP, PKey: 0xFFFF, BECN: true, DestQP: 0x12}}, nil,
			"8100ffff4000001200000000" + strings.Repeat("00", 16) + "00000000"},
		{wire.Headers{BTH: with(wire.UDSendOnlyImm), DETH: wire.DETHFields{QKey: 0x80010000, SrcQP: 1}, Imm: 0xDEADBEEF}, []byte{9},
			"6530ffff0000001280345678" + "8001000000000001" + "deadbeef" + "09000000" + "00000000"},
		{wire.Headers{BTH: with(wire.RCAtomicAcknowledge), AETH: wire.AETHFields{Syndrome: 0x1F, MSN: 0x10203}, AtomicAck: 0x0102030405060708}, nil,
			"1200ffff0000001280345678" + "1f010203" + "0102030405060708" + "00000000"},
		{wire.Headers{BTH: with(wire.RCSendOnlyInv), InvRKey: 0xCAFEF00D}, []byte{1, 2, 3, 4},
			"1700ffff0000001280345678" + "cafef00d" + "01020304" + "00000000"},
	} {
		if got := fmt.Sprintf("%x", build(t, &c.h, c.payload)); got != c.want {
			t.Errorf("%v:\n got %s\nwant %s", c.h.BTH.Opcode, got, c.want)
		}
	}
}
