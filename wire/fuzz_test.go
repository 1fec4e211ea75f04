package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// headersOf returns the Headers that Build turns back into p.
func headersOf(p wire.Packet) wire.Headers {
	h := wire.Headers{BTH: p.BTH().Fields()}
	if v := p.RETH(); v != nil {
		h.RETH = v.Fields()
	}
	if v := p.AETH(); v != nil {
		h.AETH = v.Fields()
	}
	if v := p.DETH(); v != nil {
		h.DETH = v.Fields()
	}
	if v := p.AtomicETH(); v != nil {
		h.Atomic = v.Fields()
	}
	if v := p.AtomicAckETH(); v != nil {
		h.AtomicAck = v.Orig()
	}
	if v := p.FETH(); v != nil {
		h.FETH = wire.FETHFields{Selectivity: v.Selectivity(), PlacementType: v.PlacementType()}
	}
	h.Imm, _ = p.Imm()
	h.InvRKey, _ = p.InvRKey()
	return h
}

// offsetIn returns where view v, a subslice of b, starts in b.
func offsetIn(b, v []byte) int { return cap(b) - cap(v) }

// clearUnencoded zeroes the bits of a parsed packet that Build does not
// carry over: BTH reserved bits (byte 4 below FECN/BECN, byte 8 below
// AckReq), the DETH reserved byte, the FETH reserved bits, the CNP's
// reserved block, the pad bytes and the ICRC.
func clearUnencoded(b []byte, p wire.Packet) {
	info := p.Info()
	b[4] &= 0xC0
	b[8] &= 0x80
	if v := p.DETH(); v != nil {
		b[offsetIn(p.Bytes(), v)+4] = 0
	}
	if v := p.FETH(); v != nil {
		o := offsetIn(p.Bytes(), v)
		b[o], b[o+1], b[o+2], b[o+3] = 0, 0, 0, b[o+3]&0x3F
	}
	if info.Has(wire.HdrCNPPad) {
		clear(b[wire.BTHLen:info.HdrLen])
	}
	clear(b[info.HdrLen+len(p.Payload()):])
}

func FuzzParse(f *testing.F) {
	for _, bp := range allBuiltPackets(f) {
		wire.Seal(&framing4, bp.pkt)
		f.Add(bp.pkt)
	}
	_, golden := goldenSeeds(f)
	for _, pkt := range golden {
		f.Add(pkt)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := slices.Clone(b)
		p, err := wire.Parse(b)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) || err.Error() == "" {
				t.Fatalf("Parse error %v does not wrap ErrMalformed", err)
			}
			return
		}
		info := p.Info()
		if info == nil || info != p.Opcode().Info() || p.Opcode() != wire.Opcode(b[0]) {
			t.Fatalf("Info %v, Opcode %v", info, p.Opcode())
		}
		if len(p.Bytes()) != len(b) || &p.Bytes()[0] != &b[0] || len(p.BTH()) != wire.BTHLen {
			t.Fatal("Bytes/BTH are not views of the input")
		}
		views := []struct {
			h wire.Header
			v []byte
			n int
		}{
			{wire.HdrRETH, p.RETH(), wire.RETHLen}, {wire.HdrAETH, p.AETH(), wire.AETHLen},
			{wire.HdrDETH, p.DETH(), wire.DETHLen}, {wire.HdrAtomicETH, p.AtomicETH(), wire.AtomicETHLen},
			{wire.HdrAtomicAckETH, p.AtomicAckETH(), wire.AtomicAckETHLen}, {wire.HdrFETH, p.FETH(), wire.FETHLen},
		}
		for _, v := range views {
			if (v.v != nil) != info.Has(v.h) || v.v != nil && (len(v.v) != v.n || offsetIn(b, v.v) < wire.BTHLen ||
				offsetIn(b, v.v)+v.n > info.HdrLen) {
				t.Fatalf("%v: view of header %#x is %d bytes at %d", info.Name, v.h, len(v.v), offsetIn(b, v.v))
			}
		}
		if _, ok := p.Imm(); ok != info.Has(wire.HdrImmDt) {
			t.Fatalf("%v: Imm present %v", info.Name, ok)
		}
		if _, ok := p.InvRKey(); ok != info.Has(wire.HdrIETH) {
			t.Fatalf("%v: InvRKey present %v", info.Name, ok)
		}
		pl := p.Payload()
		if offsetIn(b, pl) != info.HdrLen || info.HdrLen+len(pl)+p.BTH().PadCount()+wire.ICRCLen != len(b) {
			t.Fatalf("%v: payload of %d bytes at %d, pad %d, in %d bytes", info.Name, len(pl), offsetIn(b, pl), p.BTH().PadCount(), len(b))
		}
		if p.ICRC() != binary.LittleEndian.Uint32(b[len(b)-4:]) {
			t.Fatal("ICRC is not the last four bytes")
		}

		h := headersOf(p)
		out := make([]byte, wire.PacketLen(p.Opcode(), len(pl)))
		n, err := wire.Build(out, &h, pl)
		if err != nil || n != len(b) {
			t.Fatalf("rebuilding %v: %d bytes, %v; parsed %d", info.Name, n, err, len(b))
		}
		want := slices.Clone(b)
		clearUnencoded(want, p)
		if !bytes.Equal(out, want) {
			t.Fatalf("rebuilt %v:\n got %x\nwant %x", info.Name, out, want)
		}
		if !bytes.Equal(b, in) {
			t.Fatal("Parse or Build changed the input")
		}
	})
}

func FuzzSplitIP(f *testing.F) {
	for _, bp := range allBuiltPackets(f) {
		f.Add(sealedIP(&framing4, bp.pkt))
		f.Add(sealedIP(&framing6, bp.pkt))
	}
	golden, _ := goldenSeeds(f)
	for _, ip := range golden {
		f.Add(ip)
	}
	f.Add([]byte{0x45})
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, ip []byte) {
		fr, l4, err := wire.SplitIP(ip)
		if err != nil {
			if !errors.Is(err, wire.ErrFraming) {
				t.Fatalf("SplitIP error %v does not wrap ErrFraming", err)
			}
			return
		}
		hl, v := 40, byte(6)
		if fr.IsIPv4() {
			hl, v = 20, 4
		}
		if ip[0]>>4 != v || offsetIn(ip, l4) != hl+8 || hl+8+len(l4) > len(ip) {
			t.Fatalf("UDP payload of %d bytes at %d in %d bytes of IPv%d", len(l4), offsetIn(ip, l4), len(ip), ip[0]>>4)
		}
		u := ip[hl:]
		if fr.SrcPort != binary.BigEndian.Uint16(u) || fr.DstPort != binary.BigEndian.Uint16(u[2:]) ||
			int(binary.BigEndian.Uint16(u[4:])) != 8+len(l4) {
			t.Fatalf("ports or length wrong: %+v", fr)
		}
		var want wire.Framing
		if fr.IsIPv4() {
			want = wire.Framing{Src: netip.AddrFrom4([4]byte(ip[12:])), Dst: netip.AddrFrom4([4]byte(ip[16:])),
				IPv4ID: binary.BigEndian.Uint16(ip[4:]), IPv4Frag: binary.BigEndian.Uint16(ip[6:])}
		} else {
			want = wire.Framing{Src: netip.AddrFrom16([16]byte(ip[8:])), Dst: netip.AddrFrom16([16]byte(ip[24:]))}
		}
		want.SrcPort, want.DstPort = fr.SrcPort, fr.DstPort
		if fr != want {
			t.Fatalf("framing %+v, want %+v", fr, want)
		}
		// The ICRC from the framing equals the IBTA computation over the real bytes.
		if len(l4) >= wire.BTHLen+wire.ICRCLen && wire.ICRC(&fr, l4) != refICRC(ip) {
			t.Fatalf("ICRC %#08x, over the IP bytes %#08x", wire.ICRC(&fr, l4), refICRC(ip))
		}
		// What ipPacket rebuilds from the framing splits the same way.
		fr2, l42, err := wire.SplitIP(ipPacket(&fr, l4))
		if err != nil || fr2 != fr || !bytes.Equal(l42, l4) {
			t.Fatalf("SplitIP of the rebuilt packet: %+v, %v", fr2, err)
		}
	})
}

func FuzzPSN(f *testing.F) {
	f.Add(uint32(0), uint32(0), int32(0))
	f.Add(uint32(0xFFFFFF), uint32(0), int32(1))
	f.Add(uint32(0x800000), uint32(0), int32(-0x800000))
	f.Add(uint32(0xFFFFFFFF), uint32(0x7FFFFF), int32(0x7FFFFFFF))
	f.Fuzz(func(t *testing.T, a, b uint32, n int32) {
		p, q := wire.PSN(a&wire.Mask24), wire.PSN(b&wire.Mask24)
		d := p.Diff(q)
		if d < -1<<23 || d >= 1<<23 || q.Add(int(d)) != p {
			t.Fatalf("PSN(%#x).Diff(%#x) = %d", p, q, d)
		}
		if wire.PSN(a).Diff(wire.PSN(b)) != d || wire.PSN(a).Add(0) != p {
			t.Fatal("bits above 24 are not ignored")
		}
		if p.Before(q) != (d < 0) || p.After(q) != (d > 0) || d != -1<<23 && p.Before(q) != q.After(p) {
			t.Fatalf("PSN(%#x) vs %#x: Diff %d Before %v After %v", p, q, d, p.Before(q), p.After(q))
		}
		r := p.Add(int(n))
		if !r.Valid() || r.Add(-int(n)) != p || r != wire.PSN((int64(p)+int64(n))&wire.Mask24) {
			t.Fatalf("PSN(%#x).Add(%d) = %#x", p, n, r)
		}
		if m := int(n) % (1 << 23); p.Add(m).Diff(p) != int32(m) {
			t.Fatalf("PSN(%#x).Add(%d).Diff = %d", p, m, p.Add(m).Diff(p))
		}
	})
}
