// The link and network headers of native InfiniBand: the Local Route Header
// (LRH, IBTA vol. 1 7.7) that every packet on an IB link starts with, and
// the Global Route Header (GRH, 8.3) that follows it when the packet is
// routed by GID. On RoCEv2 the IP header stands in for the GRH; on IB the
// GRH is on the wire, with next header 0x1B (an IBA transport header).

package wire

import "fmt"

// Lengths of the IB link and network framing, in bytes.
const (
	LRHLen  = 8
	GRHLen  = 40
	VCRCLen = 2
)

// LinkVersion is the only LRH link version (LVer) defined.
const LinkVersion = 0

// VL15 is the management virtual lane: subnet management packets (QP0)
// travel on it and only on it.
const VL15 = 15

// GRHIPVersion is the GRH's IP version field: 6, as in IPv6.
const GRHIPVersion = 6

// GRHNextHeaderIBA is the GRH next header value that says an IBA transport
// header (BTH) follows.
const GRHNextHeaderIBA = 0x1B

// MaxPktLen is the largest LRH packet length: an 11-bit count of 4-byte
// words.
const MaxPktLen = 1<<11 - 1

// LNH is the LRH's 2-bit link next header field: what follows the LRH.
type LNH uint8

// Link next header values.
const (
	LNHRaw       LNH = 0 // a raw packet: no IBA transport, no ICRC
	LNHIPNonIBA  LNH = 1 // a raw IPv6 packet (IP, non-IBA transport)
	LNHIBALocal  LNH = 2 // IBA local: the BTH follows the LRH
	LNHIBAGlobal LNH = 3 // IBA global: a GRH, then the BTH
)

func (n LNH) String() string {
	switch n {
	case LNHRaw:
		return "raw"
	case LNHIPNonIBA:
		return "IP non-IBA"
	case LNHIBALocal:
		return "IBA local"
	case LNHIBAGlobal:
		return "IBA global"
	}
	return fmt.Sprintf("LNH(%d)", uint8(n))
}

// LRH is the 8-byte local route header.
type LRH []byte

// VL returns the virtual lane (4 bits).
func (b LRH) VL() uint8 { return b[0] >> 4 }

// LVer returns the link version (4 bits).
func (b LRH) LVer() uint8 { return b[0] & 0x0F }

// SL returns the service level (4 bits).
func (b LRH) SL() uint8 { return b[1] >> 4 }

// LNH returns the link next header.
func (b LRH) LNH() LNH { return LNH(b[1] & 3) }

// DLID returns the destination local identifier.
func (b LRH) DLID() uint16 { return be.Uint16(b[2:]) }

// PktLen returns the packet length in 4-byte words: the LRH through the
// ICRC, without the VCRC (11 bits).
func (b LRH) PktLen() uint16 { return be.Uint16(b[4:]) & MaxPktLen }

// SLID returns the source local identifier.
func (b LRH) SLID() uint16 { return be.Uint16(b[6:]) }

// SetVL overwrites the virtual lane, as a switch does when its SL-to-VL
// table maps the packet to another lane. The VCRC must then be recomputed
// (see SealVCRC); the ICRC does not cover the VL.
func (b LRH) SetVL(vl uint8) { b[0] = vl<<4 | b[0]&0x0F }

// Fields returns the decoded header.
func (b LRH) Fields() LRHFields {
	return LRHFields{VL: b.VL(), LVer: b.LVer(), SL: b.SL(), LNH: b.LNH(),
		DLID: b.DLID(), PktLen: b.PktLen(), SLID: b.SLID()}
}

// LRHFields is the decoded form of an LRH.
type LRHFields struct {
	VL     uint8 // 0-15
	LVer   uint8 // LinkVersion
	SL     uint8 // 0-15
	LNH    LNH
	DLID   uint16
	PktLen uint16 // in 4-byte words; BuildIB computes it
	SLID   uint16
}

// Encode writes f into b, which must hold LRHLen bytes. Reserved bits are 0.
func (f *LRHFields) Encode(b LRH) {
	b[0] = f.VL<<4 | f.LVer&0x0F
	b[1] = f.SL<<4 | uint8(f.LNH)&3
	be.PutUint16(b[2:], f.DLID)
	be.PutUint16(b[4:], f.PktLen&MaxPktLen)
	be.PutUint16(b[6:], f.SLID)
}

// GRH is the 40-byte global route header.
type GRH []byte

// IPVer returns the IP version field (GRHIPVersion on a valid packet).
func (b GRH) IPVer() uint8 { return b[0] >> 4 }

// TClass returns the traffic class.
func (b GRH) TClass() uint8 { return b[0]<<4 | b[1]>>4 }

// FlowLabel returns the 20-bit flow label.
func (b GRH) FlowLabel() uint32 { return get24(b[1:]) & 0xFFFFF }

// PayLen returns the payload length in bytes: from the end of the GRH
// through the ICRC.
func (b GRH) PayLen() uint16 { return be.Uint16(b[4:]) }

// NxtHdr returns the next header (GRHNextHeaderIBA on an IBA packet).
func (b GRH) NxtHdr() uint8 { return b[6] }

// HopLmt returns the hop limit.
func (b GRH) HopLmt() uint8 { return b[7] }

// SGID returns the source GID.
func (b GRH) SGID() GID { return GID(b[8:24]) }

// DGID returns the destination GID.
func (b GRH) DGID() GID { return GID(b[24:40]) }

// Fields returns the decoded header.
func (b GRH) Fields() GRHFields {
	return GRHFields{IPVer: b.IPVer(), TClass: b.TClass(), FlowLabel: b.FlowLabel(),
		PayLen: b.PayLen(), NxtHdr: b.NxtHdr(), HopLmt: b.HopLmt(), SGID: b.SGID(), DGID: b.DGID()}
}

// GRHFields is the decoded form of a GRH.
type GRHFields struct {
	IPVer     uint8 // GRHIPVersion; BuildIB sets it
	TClass    uint8
	FlowLabel uint32 // 20 bits
	PayLen    uint16 // BuildIB computes it
	NxtHdr    uint8  // GRHNextHeaderIBA; BuildIB sets it
	HopLmt    uint8
	SGID      GID
	DGID      GID
}

// Encode writes f into b, which must hold GRHLen bytes.
func (f *GRHFields) Encode(b GRH) {
	b[0] = f.IPVer<<4 | f.TClass>>4
	put24(b[1:], uint32(f.TClass&0x0F)<<20|f.FlowLabel&0xFFFFF)
	be.PutUint16(b[4:], f.PayLen)
	b[6] = f.NxtHdr
	b[7] = f.HopLmt
	copy(b[8:24], f.SGID[:])
	copy(b[24:40], f.DGID[:])
}
