// The SM's table attributes: each SMP carries one 64-byte block of a table,
// chosen by the attribute modifier (IBTA volume 1 section 14.2.5), and
// SMInfo.

package mad

// GUIDInfoSize is the size of one GUIDInfo block.
const GUIDInfoSize = 64

// GUIDInfo is one block of a port's GUID table (section 14.2.5.5): eight
// GUIDs; the modifier is the block number. Entry 0 of block 0 is the port
// GUID.
type GUIDInfo struct {
	GUID [8]uint64
}

// ParseGUIDInfo decodes a GUIDInfo block from the first GUIDInfoSize bytes
// of b.
func ParseGUIDInfo(b []byte) (GUIDInfo, error) {
	var x GUIDInfo
	if len(b) < GUIDInfoSize {
		return x, truncated("GUIDInfo", b, GUIDInfoSize)
	}
	for i := range x.GUID {
		x.GUID[i] = be.Uint64(b[8*i:])
	}
	return x, nil
}

// Encode writes x into the first GUIDInfoSize bytes of b.
func (x *GUIDInfo) Encode(b []byte) {
	b = b[:GUIDInfoSize]
	for i, g := range x.GUID {
		be.PutUint64(b[8*i:], g)
	}
}

// PKeyTableSize is the size of one P_KeyTable block.
const PKeyTableSize = 64

// PKeyTable is one block of a port's partition table (section 14.2.5.7):
// 32 P_Keys. The modifier holds the block number in its low 16 bits and, on
// a switch, the port in bits 16-31. The top bit of a P_Key is the
// membership type (1 full, 0 limited); 0 is an empty entry.
type PKeyTable struct {
	PKey [32]uint16
}

// PKeyTableModifier returns the attribute modifier of a P_KeyTable SMP for
// the given port (switches; 0 on a CA) and block.
func PKeyTableModifier(port uint8, block uint16) uint32 {
	return uint32(port)<<16 | uint32(block)
}

// ParsePKeyTable decodes a P_KeyTable block from the first PKeyTableSize
// bytes of b.
func ParsePKeyTable(b []byte) (PKeyTable, error) {
	var x PKeyTable
	if len(b) < PKeyTableSize {
		return x, truncated("P_KeyTable", b, PKeyTableSize)
	}
	for i := range x.PKey {
		x.PKey[i] = be.Uint16(b[2*i:])
	}
	return x, nil
}

// Encode writes x into the first PKeyTableSize bytes of b.
func (x *PKeyTable) Encode(b []byte) {
	b = b[:PKeyTableSize]
	for i, k := range x.PKey {
		be.PutUint16(b[2*i:], k)
	}
}

// SLToVLTableSize is the size of the SLtoVLMappingTable attribute.
const SLToVLTableSize = 8

// SLToVLTable is the SLtoVLMappingTable attribute (section 14.2.5.8): the
// virtual lane each of the 16 service levels uses on a port, 4 bits each,
// SL 0 in the high nibble of the first byte. On a switch the modifier names
// the input port (bits 8-15) and the output port (bits 0-7).
type SLToVLTable struct {
	VL [16]uint8 // 4 bits each
}

// SLToVLModifier returns the attribute modifier of an SLtoVLMappingTable
// SMP for a switch's input and output ports.
func SLToVLModifier(in, out uint8) uint32 { return uint32(in)<<8 | uint32(out) }

// ParseSLToVLTable decodes an SLtoVLMappingTable from the first
// SLToVLTableSize bytes of b.
func ParseSLToVLTable(b []byte) (SLToVLTable, error) {
	var x SLToVLTable
	if len(b) < SLToVLTableSize {
		return x, truncated("SLtoVLMappingTable", b, SLToVLTableSize)
	}
	for sl := range x.VL {
		x.VL[sl] = getBits(b[sl/2], uint(4*(1-sl%2)), 4)
	}
	return x, nil
}

// Encode writes x into the first SLToVLTableSize bytes of b.
func (x *SLToVLTable) Encode(b []byte) {
	b = b[:SLToVLTableSize]
	for sl, vl := range x.VL {
		setBits(&b[sl/2], uint(4*(1-sl%2)), 4, vl)
	}
}

// VLArbTableSize is the size of one VLArbitrationTable block.
const VLArbTableSize = 64

// VL arbitration table selectors, bits 16-31 of a VLArbitrationTable
// SMP's modifier (bits 0-15 are the output port).
const (
	VLArbLowEntries0to31   = 1 // low-priority table, entries 0-31
	VLArbLowEntries32to63  = 2 // low-priority table, entries 32-63
	VLArbHighEntries0to31  = 3 // high-priority table, entries 0-31
	VLArbHighEntries32to63 = 4 // high-priority table, entries 32-63
)

// VLArbEntry is one entry of a VL arbitration table: a virtual lane and
// how many 64-byte units it may send in its turn (0 skips the entry).
type VLArbEntry struct {
	VL     uint8 // 4 bits
	Weight uint8
}

// VLArbTable is one block of 32 entries of a port's high- or low-priority
// VL arbitration table (section 14.2.5.9).
type VLArbTable struct {
	Entry [32]VLArbEntry
}

// VLArbModifier returns the attribute modifier of a VLArbitrationTable SMP
// for a port and a VLArb* selector.
func VLArbModifier(port uint8, selector uint16) uint32 { return uint32(selector)<<16 | uint32(port) }

// ParseVLArbTable decodes a VLArbitrationTable block from the first
// VLArbTableSize bytes of b.
func ParseVLArbTable(b []byte) (VLArbTable, error) {
	var x VLArbTable
	if len(b) < VLArbTableSize {
		return x, truncated("VLArbitrationTable", b, VLArbTableSize)
	}
	for i := range x.Entry {
		x.Entry[i] = VLArbEntry{VL: getBits(b[2*i], 0, 4), Weight: b[2*i+1]}
	}
	return x, nil
}

// Encode writes x into the first VLArbTableSize bytes of b, with the
// reserved bits zero.
func (x *VLArbTable) Encode(b []byte) {
	b = b[:VLArbTableSize]
	for i, e := range x.Entry {
		b[2*i] = e.VL & 0xf
		b[2*i+1] = e.Weight
	}
}

// LinearFTSize is the size of one LinearForwardingTable block.
const LinearFTSize = 64

// LinearFT is one block of a switch's linear forwarding table (section
// 14.2.5.10): the output port of 64 consecutive LIDs, starting at 64 times
// the block number the modifier holds. Port 255 drops the packet.
type LinearFT struct {
	Port [64]uint8
}

// LinearFTNoRoute is the LFT entry of a LID with no route.
const LinearFTNoRoute = 0xFF

// ParseLinearFT decodes a LinearForwardingTable block from the first
// LinearFTSize bytes of b.
func ParseLinearFT(b []byte) (LinearFT, error) {
	var x LinearFT
	if len(b) < LinearFTSize {
		return x, truncated("LinearForwardingTable", b, LinearFTSize)
	}
	copy(x.Port[:], b)
	return x, nil
}

// Encode writes x into the first LinearFTSize bytes of b.
func (x *LinearFT) Encode(b []byte) { copy(b[:LinearFTSize], x.Port[:]) }

// MulticastFTSize is the size of one MulticastForwardingTable block.
const MulticastFTSize = 64

// MulticastFT is one block of a switch's multicast forwarding table
// (section 14.2.5.12): for 32 consecutive multicast LIDs, a mask of 16
// ports each (bit i is port 16*position + i). The modifier holds the
// position in bits 28-31 and the block number (LID-0xC000)/32 in bits 0-8.
type MulticastFT struct {
	PortMask [32]uint16
}

// MulticastFTModifier returns the attribute modifier of a
// MulticastForwardingTable SMP for a position (port group) and block.
func MulticastFTModifier(position uint8, block uint16) uint32 {
	return uint32(position&0xf)<<28 | uint32(block&0x1ff)
}

// ParseMulticastFT decodes a MulticastForwardingTable block from the first
// MulticastFTSize bytes of b.
func ParseMulticastFT(b []byte) (MulticastFT, error) {
	var x MulticastFT
	if len(b) < MulticastFTSize {
		return x, truncated("MulticastForwardingTable", b, MulticastFTSize)
	}
	for i := range x.PortMask {
		x.PortMask[i] = be.Uint16(b[2*i:])
	}
	return x, nil
}

// Encode writes x into the first MulticastFTSize bytes of b.
func (x *MulticastFT) Encode(b []byte) {
	b = b[:MulticastFTSize]
	for i, m := range x.PortMask {
		be.PutUint16(b[2*i:], m)
	}
}

// SMInfoSize is the size of SMInfo's fields; the rest of the SMP data is
// reserved.
const SMInfoSize = 21

// SM states of SMInfo.SMState.
const (
	SMStateNotActive   = 0
	SMStateDiscovering = 1
	SMStateStandby     = 2
	SMStateMaster      = 3
)

// SMInfo is the SMInfo attribute (section 14.2.5.13): what one SM tells
// another about itself when they negotiate the master.
type SMInfo struct {
	GUID     uint64 // port GUID of the SM
	SMKey    uint64 // zero unless the requester is trusted
	ActCount uint32 // grows while the SM works, so others see it alive
	Priority uint8  // 4 bits
	SMState  uint8  // 4 bits, SMState*
}

// ParseSMInfo decodes an SMInfo from the first SMInfoSize bytes of b.
func ParseSMInfo(b []byte) (SMInfo, error) {
	if len(b) < SMInfoSize {
		return SMInfo{}, truncated("SMInfo", b, SMInfoSize)
	}
	return SMInfo{
		GUID:     be.Uint64(b[0:]),
		SMKey:    be.Uint64(b[8:]),
		ActCount: be.Uint32(b[16:]),
		Priority: getBits(b[20], 4, 4),
		SMState:  getBits(b[20], 0, 4),
	}, nil
}

// Encode writes x into the first SMInfoSize bytes of b.
func (x *SMInfo) Encode(b []byte) {
	b = b[:SMInfoSize]
	be.PutUint64(b[0:], x.GUID)
	be.PutUint64(b[8:], x.SMKey)
	be.PutUint32(b[16:], x.ActCount)
	b[20] = 0
	setBits(&b[20], 4, 4, x.Priority)
	setBits(&b[20], 0, 4, x.SMState)
}
