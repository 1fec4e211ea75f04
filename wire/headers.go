// Header views: each header is a named []byte with accessors over the bytes
// and a Fields struct whose Encode writes them. Views must be at least the
// header's length; Parse guarantees that for the views it returns.

package wire

import "encoding/binary"

var be = binary.BigEndian

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// BTH is the 12-byte base transport header.
type BTH []byte

// TransportVersion is the only BTH transport header version defined.
const TransportVersion = 0

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// Solicited returns the solicited event bit.
func (b BTH) Solicited() bool { return b[1]&0x80 != 0 }

// MigReq returns the migration request bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount returns the number of pad bytes before the ICRC (0-3).
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[1] & 0x0F }

// PKey returns the partition key.
func (b BTH) PKey() PKey { return PKey(be.Uint16(b[2:])) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// DestQP returns the destination queue pair number.
func (b BTH) DestQP() QPN { return QPN(get24(b[5:])) }

// AckReq returns the acknowledge request bit.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[9:])) }

// SetPSN overwrites the packet sequence number.
func (b BTH) SetPSN(p PSN) { put24(b[9:], uint32(p)) }

// SetAckReq sets or clears the acknowledge request bit.
func (b BTH) SetAckReq(v bool) {
	b[8] &^= 0x80
	if v {
		b[8] |= 0x80
	}
}

// Fields returns the decoded header.
func (b BTH) Fields() BTHFields {
	return BTHFields{Opcode: b.Opcode(), Solicited: b.Solicited(), MigReq: b.MigReq(),
		PadCount: uint8(b.PadCount()), TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(),
		BECN: b.BECN(), DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN()}
}

// BTHFields is the decoded form of a BTH.
type BTHFields struct {
	Opcode    Opcode
	Solicited bool
	MigReq    bool
	PadCount  uint8 // 0-3; Build computes it from the payload length
	TVer      uint8
	PKey      PKey
	FECN      bool
	BECN      bool
	DestQP    QPN
	AckReq    bool
	PSN       PSN
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

// Encode writes f into b, which must hold BTHLen bytes. Reserved bits are 0.
func (f *BTHFields) Encode(b BTH) {
	b[0] = byte(f.Opcode)
	b[1] = bit(f.Solicited, 0x80) | bit(f.MigReq, 0x40) | (f.PadCount&3)<<4 | f.TVer&0x0F
	be.PutUint16(b[2:], uint16(f.PKey))
	b[4] = bit(f.FECN, 0x80) | bit(f.BECN, 0x40)
	put24(b[5:], uint32(f.DestQP)&Mask24)
	b[8] = bit(f.AckReq, 0x80)
	put24(b[9:], uint32(f.PSN)&Mask24)
}

// RETH is the 16-byte RDMA extended transport header.
type RETH []byte

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return be.Uint64(b) }

// RKey returns the remote key.
func (b RETH) RKey() RKey { return RKey(be.Uint32(b[8:])) }

// DMALen returns the length of the whole RDMA operation in bytes.
func (b RETH) DMALen() uint32 { return be.Uint32(b[12:]) }

// Fields returns the decoded header.
func (b RETH) Fields() RETHFields { return RETHFields{VA: b.VA(), RKey: b.RKey(), DMALen: b.DMALen()} }

// RETHFields is the decoded form of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   RKey
	DMALen uint32
}

// Encode writes f into b, which must hold RETHLen bytes.
func (f *RETHFields) Encode(b RETH) {
	be.PutUint64(b, f.VA)
	be.PutUint32(b[8:], uint32(f.RKey))
	be.PutUint32(b[12:], f.DMALen)
}

// AETH is the 4-byte ACK extended transport header.
type AETH []byte

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// MSN returns the message sequence number.
func (b AETH) MSN() MSN { return MSN(get24(b[1:])) }

// Fields returns the decoded header.
func (b AETH) Fields() AETHFields { return AETHFields{Syndrome: b.Syndrome(), MSN: b.MSN()} }

// AETHFields is the decoded form of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      MSN
}

// Encode writes f into b, which must hold AETHLen bytes.
func (f *AETHFields) Encode(b AETH) {
	b[0] = byte(f.Syndrome)
	put24(b[1:], uint32(f.MSN)&Mask24)
}

// DETH is the 8-byte datagram extended transport header.
type DETH []byte

// QKey returns the queue key.
func (b DETH) QKey() QKey { return QKey(be.Uint32(b)) }

// SrcQP returns the source queue pair number.
func (b DETH) SrcQP() QPN { return QPN(get24(b[5:])) }

// Fields returns the decoded header.
func (b DETH) Fields() DETHFields { return DETHFields{QKey: b.QKey(), SrcQP: b.SrcQP()} }

// DETHFields is the decoded form of a DETH.
type DETHFields struct {
	QKey  QKey
	SrcQP QPN
}

// Encode writes f into b, which must hold DETHLen bytes.
func (f *DETHFields) Encode(b DETH) {
	be.PutUint32(b, uint32(f.QKey))
	b[4] = 0
	put24(b[5:], uint32(f.SrcQP)&Mask24)
}

// AtomicETH is the 28-byte atomic extended transport header.
type AtomicETH []byte

// VA returns the remote virtual address (8-byte aligned for a valid request).
func (b AtomicETH) VA() uint64 { return be.Uint64(b) }

// RKey returns the remote key.
func (b AtomicETH) RKey() RKey { return RKey(be.Uint32(b[8:])) }

// SwapAdd returns the swap (compare-swap) or add (fetch-add) operand.
func (b AtomicETH) SwapAdd() uint64 { return be.Uint64(b[12:]) }

// Compare returns the compare operand (compare-swap only).
func (b AtomicETH) Compare() uint64 { return be.Uint64(b[20:]) }

// Fields returns the decoded header.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: b.VA(), RKey: b.RKey(), SwapAdd: b.SwapAdd(), Compare: b.Compare()}
}

// AtomicETHFields is the decoded form of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    RKey
	SwapAdd uint64
	Compare uint64
}

// Encode writes f into b, which must hold AtomicETHLen bytes.
func (f *AtomicETHFields) Encode(b AtomicETH) {
	be.PutUint64(b, f.VA)
	be.PutUint32(b[8:], uint32(f.RKey))
	be.PutUint64(b[12:], f.SwapAdd)
	be.PutUint64(b[20:], f.Compare)
}

// AtomicAckETH is the 8-byte atomic acknowledge header: the original value.
type AtomicAckETH []byte

// Orig returns the value the target held before the atomic operation.
func (b AtomicAckETH) Orig() uint64 { return be.Uint64(b) }

// FETH is the 4-byte FLUSH extended transport header.
type FETH []byte

// Selectivity returns the placement type selectivity level (bits 5:4).
func (b FETH) Selectivity() uint8 { return b[3] >> 4 & 3 }

// PlacementType returns the placement type bits (bits 3:0).
func (b FETH) PlacementType() uint8 { return b[3] & 0x0F }

// FETHFields is the decoded form of a FETH.
type FETHFields struct {
	Selectivity   uint8
	PlacementType uint8
}

// Encode writes f into b, which must hold FETHLen bytes.
func (f *FETHFields) Encode(b FETH) {
	b[0], b[1], b[2] = 0, 0, 0
	b[3] = (f.Selectivity&3)<<4 | f.PlacementType&0x0F
}
