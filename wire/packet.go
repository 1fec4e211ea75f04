// Parse and Build: a received RoCEv2 UDP payload is validated once against the
// opcode table and becomes a Packet view; an outgoing packet is written from
// Fields values into a caller's buffer.

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error Parse returns.
var ErrMalformed = errors.New("wire: malformed packet")

// ParseError says why a packet was rejected.
type ParseError struct {
	Op     Opcode
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("wire: malformed packet (opcode 0x%02x): %s", uint8(e.Op), e.Reason)
}

// Unwrap makes errors.Is(err, ErrMalformed) true.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// Packet is a validated view of a RoCEv2 packet: the UDP payload from the BTH
// through the ICRC. Its accessors do not panic. A header accessor returns an
// empty view when the opcode does not carry that header; use Info().Has to
// ask first.
type Packet struct {
	b    []byte
	info *OpInfo
	plen int // payload length without pad
}

// Parse validates b, a RoCEv2 UDP payload including the trailing ICRC, and
// returns a view over it. It checks that the opcode is known, the transport
// version is 0, the packet is long enough for the opcode's headers and its
// ICRC, the pad count fits, and fixed-size payloads have their size. It does
// not check the ICRC (see ICRC and VerifyICRC) nor transport state.
func Parse(b []byte) (Packet, error) {
	var p Packet
	err := ParseInto(&p, b)
	return p, err
}

// ParseInto is Parse storing the view in *p (the zero Packet on error). A
// receive path that parses into the slot the packet is kept in saves a
// copy: a Packet returned in registers and copied on is stored and
// reloaded in pieces of different widths, which stalls the CPU.
func ParseInto(p *Packet, b []byte) error {
	*p = Packet{}
	if len(b) < BTHLen+ICRCLen {
		op := Opcode(0)
		if len(b) > 0 {
			op = Opcode(b[0])
		}
		return &ParseError{op, fmt.Sprintf("%d bytes is shorter than BTH and ICRC", len(b))}
	}
	bth := BTH(b)
	op := bth.Opcode()
	info := op.Info()
	if info == nil {
		return &ParseError{op, "unknown opcode"}
	}
	if v := bth.TVer(); v != TransportVersion {
		return &ParseError{op, fmt.Sprintf("transport version %d", v)}
	}
	if len(b) < info.HdrLen+ICRCLen {
		return &ParseError{op, fmt.Sprintf("%d bytes is shorter than the %d header bytes and ICRC of %s", len(b), info.HdrLen, info.Name)}
	}
	pad := bth.PadCount()
	rest := len(b) - info.HdrLen - ICRCLen
	if !info.Has(HdrPayload) {
		if rest != 0 || pad != 0 {
			return &ParseError{op, fmt.Sprintf("%s carries no payload but has %d extra bytes and pad %d", info.Name, rest, pad)}
		}
		p.b, p.info = b, info
		return nil
	}
	if rest < pad {
		return &ParseError{op, fmt.Sprintf("pad count %d exceeds the %d bytes after the headers", pad, rest)}
	}
	if rest%4 != 0 {
		return &ParseError{op, fmt.Sprintf("payload plus pad is %d bytes, not a multiple of 4", rest)}
	}
	plen := rest - pad
	if info.FixedPayload >= 0 && plen != info.FixedPayload {
		return &ParseError{op, fmt.Sprintf("%s needs a %d-byte payload, got %d", info.Name, info.FixedPayload, plen)}
	}
	p.b, p.info, p.plen = b, info, plen
	return nil
}

// Bytes returns the whole packet, BTH through ICRC.
func (p *Packet) Bytes() []byte { return p.b }

// Info returns the opcode's table entry (nil for the zero Packet).
func (p *Packet) Info() *OpInfo { return p.info }

// Opcode returns the opcode.
func (p *Packet) Opcode() Opcode {
	if p.info == nil {
		return 0
	}
	return Opcode(p.b[0])
}

// BTH returns the base transport header.
func (p *Packet) BTH() BTH {
	if p.info == nil {
		return nil
	}
	return BTH(p.b[:BTHLen])
}

func (p *Packet) view(off int8, n int) []byte {
	if p.info == nil || off < 0 {
		return nil
	}
	return p.b[off : int(off)+n]
}

// RETH returns the RDMA extended header, or nil.
func (p *Packet) RETH() RETH { return RETH(p.view(p.infoOff().offRETH, RETHLen)) }

// AETH returns the ACK extended header, or nil.
func (p *Packet) AETH() AETH { return AETH(p.view(p.infoOff().offAETH, AETHLen)) }

// DETH returns the datagram extended header, or nil.
func (p *Packet) DETH() DETH { return DETH(p.view(p.infoOff().offDETH, DETHLen)) }

// AtomicETH returns the atomic extended header, or nil.
func (p *Packet) AtomicETH() AtomicETH {
	return AtomicETH(p.view(p.infoOff().offAtomic, AtomicETHLen))
}

// AtomicAckETH returns the atomic acknowledge header, or nil.
func (p *Packet) AtomicAckETH() AtomicAckETH {
	return AtomicAckETH(p.view(p.infoOff().offAtomicAck, AtomicAckETHLen))
}

// FETH returns the flush extended header, or nil.
func (p *Packet) FETH() FETH { return FETH(p.view(p.infoOff().offFETH, FETHLen)) }

// Imm returns the immediate data and whether the opcode carries it.
func (p *Packet) Imm() (uint32, bool) {
	v := p.view(p.infoOff().offImm, ImmDtLen)
	if v == nil {
		return 0, false
	}
	return binary.BigEndian.Uint32(v), true
}

// InvRKey returns the R_Key to invalidate (IETH) and whether it is present.
func (p *Packet) InvRKey() (RKey, bool) {
	v := p.view(p.infoOff().offIETH, IETHLen)
	if v == nil {
		return 0, false
	}
	return RKey(binary.BigEndian.Uint32(v)), true
}

// Payload returns the payload without pad.
func (p *Packet) Payload() []byte {
	if p.info == nil {
		return nil
	}
	return p.b[p.info.HdrLen : p.info.HdrLen+p.plen]
}

// ICRC returns the invariant CRC carried at the end of the packet.
func (p *Packet) ICRC() uint32 {
	if p.info == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p.b[len(p.b)-ICRCLen:])
}

var noInfo = OpInfo{offRETH: -1, offAETH: -1, offDETH: -1, offImm: -1, offIETH: -1,
	offAtomic: -1, offAtomicAck: -1, offFETH: -1}

func (p *Packet) infoOff() *OpInfo {
	if p.info == nil {
		return &noInfo
	}
	return p.info
}

// Headers holds the values of every header a packet may carry. Build uses
// only the ones the opcode in BTH calls for.
type Headers struct {
	BTH       BTHFields
	RETH      RETHFields
	AETH      AETHFields
	DETH      DETHFields
	Atomic    AtomicETHFields
	AtomicAck uint64 // original remote value, ATOMIC_ACKNOWLEDGE
	Imm       uint32 // immediate data, *_WITH_IMMEDIATE
	InvRKey   RKey   // R_Key to invalidate, SEND_*_WITH_INVALIDATE
	FETH      FETHFields
}

// PadFor returns the number of pad bytes that align a payload of n bytes.
func PadFor(n int) int { return -n & 3 }

// PacketLen returns the length of a packet with opcode op and n payload
// bytes: headers, payload, pad and ICRC. It returns -1 for an unknown opcode.
func PacketLen(op Opcode, n int) int {
	info := op.Info()
	if info == nil {
		return -1
	}
	return info.HdrLen + n + PadFor(n) + ICRCLen
}

// ErrBuild is wrapped by the errors Build and WriteHeaders return.
var ErrBuild = errors.New("wire: cannot build packet")

// WriteHeaders writes the BTH and the extension headers h.BTH.Opcode calls
// for into b, with the pad count set for a payload of payloadLen bytes, and
// returns the header length. The caller then writes the payload at that
// offset, zeroes the pad and sets the ICRC (see Seal).
func WriteHeaders(b []byte, h *Headers, payloadLen int) (int, error) {
	info := h.BTH.Opcode.Info()
	if info == nil {
		return 0, fmt.Errorf("%w: unknown opcode 0x%02x", ErrBuild, uint8(h.BTH.Opcode))
	}
	if !info.Has(HdrPayload) && payloadLen != 0 {
		return 0, fmt.Errorf("%w: %s carries no payload", ErrBuild, info.Name)
	}
	if info.FixedPayload >= 0 && payloadLen != info.FixedPayload {
		return 0, fmt.Errorf("%w: %s needs a %d-byte payload", ErrBuild, info.Name, info.FixedPayload)
	}
	if len(b) < info.HdrLen {
		return 0, fmt.Errorf("%w: buffer of %d bytes for %d header bytes", ErrBuild, len(b), info.HdrLen)
	}
	bf := h.BTH
	bf.PadCount = uint8(PadFor(payloadLen))
	bf.Encode(BTH(b))
	if o := info.offRETH; o >= 0 {
		h.RETH.Encode(RETH(b[o:]))
	}
	if o := info.offAETH; o >= 0 {
		h.AETH.Encode(AETH(b[o:]))
	}
	if o := info.offDETH; o >= 0 {
		h.DETH.Encode(DETH(b[o:]))
	}
	if o := info.offAtomic; o >= 0 {
		h.Atomic.Encode(AtomicETH(b[o:]))
	}
	if o := info.offAtomicAck; o >= 0 {
		binary.BigEndian.PutUint64(b[o:], h.AtomicAck)
	}
	if o := info.offImm; o >= 0 {
		binary.BigEndian.PutUint32(b[o:], h.Imm)
	}
	if o := info.offIETH; o >= 0 {
		binary.BigEndian.PutUint32(b[o:], uint32(h.InvRKey))
	}
	if o := info.offFETH; o >= 0 {
		h.FETH.Encode(FETH(b[o:]))
	}
	if info.Has(HdrCNPPad) {
		clear(b[BTHLen : BTHLen+CNPPadLen])
	}
	return info.HdrLen, nil
}

// Build writes a complete packet (headers, payload, zero pad and a zero ICRC
// placeholder) into b and returns its length. Seal it with Seal once the
// addresses are known.
func Build(b []byte, h *Headers, payload []byte) (int, error) {
	n := PacketLen(h.BTH.Opcode, len(payload))
	if n < 0 {
		return 0, fmt.Errorf("%w: unknown opcode 0x%02x", ErrBuild, uint8(h.BTH.Opcode))
	}
	if len(b) < n {
		return 0, fmt.Errorf("%w: buffer of %d bytes for a %d-byte packet", ErrBuild, len(b), n)
	}
	hl, err := WriteHeaders(b, h, len(payload))
	if err != nil {
		return 0, err
	}
	copy(b[hl:], payload)
	clear(b[hl+len(payload) : n])
	return n, nil
}
