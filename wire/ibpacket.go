// Native InfiniBand packets: LRH, an optional GRH, the transport packet
// that RoCEv2 carries in UDP (BTH through ICRC), and the VCRC.
//
//	LRH (8) | GRH (40, if LNH says so) | BTH ... payload | pad | ICRC (4) | VCRC (2)
//
// ParseIB validates the framing and both CRCs once and hands the transport
// part to Parse; BuildIB writes a sealed packet into a caller's buffer.

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors ParseIB wraps, besides ErrMalformed (which every one of its errors
// wraps): a bad variant CRC, a bad invariant CRC.
var (
	ErrVCRC = errors.New("wire: bad VCRC")
	ErrICRC = errors.New("wire: bad ICRC")
)

// IBPacket is a validated view of a native IB packet. Its accessors do not
// panic; the zero IBPacket returns empty views.
type IBPacket struct {
	b     []byte
	grh   bool
	trans Packet
}

func ibErr(format string, a ...any) error {
	return fmt.Errorf("%w: IB: "+format, append([]any{ErrMalformed}, a...)...)
}

// ParseIB validates b, a whole IB packet from the LRH through the VCRC, and
// returns a view over it. It checks, in this order: that b holds an LRH, the
// link version, that the LRH's packet length matches the bytes present,
// the VCRC, that the LNH announces an IBA transport (raw packets are
// rejected), the GRH's version, next header and payload length when there
// is one, the ICRC, and then the transport packet as Parse does. Every error
// wraps ErrMalformed; CRC errors also wrap ErrVCRC or ErrICRC.
func ParseIB(b []byte) (IBPacket, error) {
	if len(b) < LRHLen+VCRCLen {
		return IBPacket{}, ibErr("%d bytes is shorter than an LRH and VCRC", len(b))
	}
	lrh := LRH(b)
	if v := lrh.LVer(); v != LinkVersion {
		return IBPacket{}, ibErr("link version %d", v)
	}
	if n := int(lrh.PktLen()) * 4; n != len(b)-VCRCLen {
		return IBPacket{}, ibErr("LRH packet length %d words (%d bytes) with %d bytes before the VCRC", lrh.PktLen(), n, len(b)-VCRCLen)
	}
	body := b[:len(b)-VCRCLen]
	if got, want := binary.LittleEndian.Uint16(b[len(body):]), VCRC(body); got != want {
		return IBPacket{}, fmt.Errorf("%w: %w: IB: VCRC 0x%04x, computed 0x%04x", ErrMalformed, ErrVCRC, got, want)
	}
	off := LRHLen
	switch lnh := lrh.LNH(); lnh {
	case LNHIBALocal:
	case LNHIBAGlobal:
		if len(body) < LRHLen+GRHLen {
			return IBPacket{}, ibErr("%d bytes is shorter than an LRH, GRH and VCRC", len(b))
		}
		g := GRH(body[LRHLen:])
		if v := g.IPVer(); v != GRHIPVersion {
			return IBPacket{}, ibErr("GRH IP version %d", v)
		}
		if h := g.NxtHdr(); h != GRHNextHeaderIBA {
			return IBPacket{}, ibErr("GRH next header 0x%02x is not an IBA transport", h)
		}
		if n := int(g.PayLen()); n != len(body)-LRHLen-GRHLen {
			return IBPacket{}, ibErr("GRH payload length %d with %d bytes after the GRH", n, len(body)-LRHLen-GRHLen)
		}
		off += GRHLen
	default:
		return IBPacket{}, ibErr("link next header %v: not an IBA transport packet", lnh)
	}
	if len(body) < off+BTHLen+ICRCLen {
		return IBPacket{}, ibErr("%d bytes after the headers is shorter than a BTH and ICRC", len(body)-off)
	}
	if got, want := binary.LittleEndian.Uint32(body[len(body)-ICRCLen:]), IBICRC(body); got != want {
		return IBPacket{}, fmt.Errorf("%w: %w: IB: ICRC 0x%08x, computed 0x%08x", ErrMalformed, ErrICRC, got, want)
	}
	p, err := Parse(body[off:])
	if err != nil {
		return IBPacket{}, err
	}
	return IBPacket{b: b, grh: off > LRHLen, trans: p}, nil
}

// Bytes returns the whole packet, LRH through VCRC.
func (p *IBPacket) Bytes() []byte { return p.b }

// LRH returns the local route header (nil for the zero IBPacket).
func (p *IBPacket) LRH() LRH {
	if p.b == nil {
		return nil
	}
	return LRH(p.b[:LRHLen])
}

// GRH returns the global route header, or nil for a local packet.
func (p *IBPacket) GRH() GRH {
	if !p.grh {
		return nil
	}
	return GRH(p.b[LRHLen : LRHLen+GRHLen])
}

// Transport returns the transport packet, BTH through ICRC.
func (p *IBPacket) Transport() *Packet { return &p.trans }

// VCRC returns the variant CRC carried at the end of the packet.
func (p *IBPacket) VCRC() uint16 {
	if p.b == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p.b[len(p.b)-VCRCLen:])
}

// IBFraming is what BuildIB puts around a transport packet: the LRH's
// fields and, for a global packet, the GRH's. BuildIB computes the LRH's
// LNH and packet length and the GRH's IP version, next header and payload
// length; the values in these fields are ignored.
type IBFraming struct {
	LRH LRHFields
	GRH *GRHFields // nil for a local packet
}

// IBPacketLen returns the length of a whole IB packet with opcode op and n
// payload bytes, global (with a GRH) or not. It returns -1 for an unknown
// opcode.
func IBPacketLen(op Opcode, n int, global bool) int {
	t := PacketLen(op, n)
	if t < 0 {
		return -1
	}
	t += LRHLen + VCRCLen
	if global {
		t += GRHLen
	}
	return t
}

// BuildIB writes a complete, sealed IB packet (LRH, GRH if f.GRH is set,
// headers, payload, zero pad, ICRC, VCRC) into b and returns its length.
func BuildIB(b []byte, f *IBFraming, h *Headers, payload []byte) (int, error) {
	n := IBPacketLen(h.BTH.Opcode, len(payload), f.GRH != nil)
	if n < 0 {
		return 0, fmt.Errorf("%w: unknown opcode 0x%02x", ErrBuild, uint8(h.BTH.Opcode))
	}
	if len(b) < n {
		return 0, fmt.Errorf("%w: buffer of %d bytes for a %d-byte packet", ErrBuild, len(b), n)
	}
	if (n-VCRCLen)/4 > MaxPktLen {
		return 0, fmt.Errorf("%w: %d bytes exceed the LRH's %d-word packet length", ErrBuild, n-VCRCLen, MaxPktLen)
	}
	off := LRHLen
	lrh := f.LRH
	lrh.LNH = LNHIBALocal
	lrh.PktLen = uint16((n - VCRCLen) / 4)
	if f.GRH != nil {
		lrh.LNH = LNHIBAGlobal
		g := *f.GRH
		g.IPVer, g.NxtHdr = GRHIPVersion, GRHNextHeaderIBA
		g.PayLen = uint16(n - VCRCLen - LRHLen - GRHLen)
		g.Encode(GRH(b[LRHLen:]))
		off += GRHLen
	}
	lrh.Encode(LRH(b))
	if _, err := Build(b[off:n-VCRCLen], h, payload); err != nil {
		return 0, err
	}
	SealIB(b[:n])
	return n, nil
}
