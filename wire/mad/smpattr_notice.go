// The Notice attribute: what a Trap SMP carries to the SM, and the data
// details of the traps the fabric sends (IBTA volume 1 sections 14.2.5.1
// and 14.2.5.18, notices 128-131 and 144).

package mad

// Notice sizes. An SMP's 64-byte data holds the notice up to and including
// its data details; the issuer GID follows only where the notice travels
// in a larger attribute (the SA's Notice, 80 bytes).
const (
	NoticeSize     = 64
	NoticeFullSize = 80
)

// Notice types (Notice.Type of a generic notice).
const (
	NoticeTypeFatal         = 0
	NoticeTypeUrgent        = 1
	NoticeTypeSecurity      = 2
	NoticeTypeSubnetMgmt    = 3
	NoticeTypeInformational = 4
)

// Generic trap numbers the fabric's agents send.
const (
	TrapLinkStateChange       = 128 // a switch port changed state
	TrapLocalLinkIntegrity    = 129 // local link integrity threshold reached
	TrapExcessiveBufferOverun = 130 // excessive buffer overrun threshold reached
	TrapFlowControlWatchdog   = 131 // flow control update watchdog timer expired
	TrapCapabilityMaskChanged = 144 // capability mask, or another local attribute, changed
	TrapSystemImageGUIDChange = 145
	TrapBadMKey               = 256
	TrapBadPKey               = 257
	TrapBadQKey               = 258
)

// Notice is the Notice attribute. A generic notice (IsGeneric) has a
// Type, the producer's node type (NodeType* or NodeTypeClassManager) and
// a TrapNumber; a vendor notice puts its vendor ID in ProducerType and its
// device ID in TrapNumber. DataDetails hold the trap-specific data, which
// the Trap128 ... Trap144 methods decode.
type Notice struct {
	IsGeneric    bool
	Type         uint8  // 7 bits, NoticeType*
	ProducerType uint32 // 24 bits; the vendor ID of a vendor notice
	TrapNumber   uint16 // the device ID of a vendor notice
	IssuerLID    uint16
	Toggle       bool   // NoticeToggle: flips with each new notice
	Count        uint16 // 15 bits, NoticeCount
	DataDetails  [54]byte
	// IssuerGID is only in notices of NoticeFullSize bytes.
	IssuerGID [16]byte
}

// ParseNotice decodes a Notice from the first NoticeSize bytes of b, and
// its IssuerGID too if b has NoticeFullSize bytes.
func ParseNotice(b []byte) (Notice, error) {
	var x Notice
	if len(b) < NoticeSize {
		return x, truncated("Notice", b, NoticeSize)
	}
	x.IsGeneric = getBit(b[0], 7)
	x.Type = getBits(b[0], 0, 7)
	x.ProducerType = get24(b[1:])
	x.TrapNumber = be.Uint16(b[4:])
	x.IssuerLID = be.Uint16(b[6:])
	x.Toggle = getBit(b[8], 7)
	x.Count = be.Uint16(b[8:]) & 0x7fff
	copy(x.DataDetails[:], b[10:])
	if len(b) >= NoticeFullSize {
		copy(x.IssuerGID[:], b[64:])
	}
	return x, nil
}

// Encode writes x into the first NoticeSize bytes of b, and its IssuerGID
// too if b has NoticeFullSize bytes.
func (x *Notice) Encode(b []byte) {
	b[0] = x.Type & 0x7f
	setBit(&b[0], 7, x.IsGeneric)
	put24(b[1:], x.ProducerType)
	be.PutUint16(b[4:], x.TrapNumber)
	be.PutUint16(b[6:], x.IssuerLID)
	be.PutUint16(b[8:], x.Count&0x7fff)
	setBit(&b[8], 7, x.Toggle)
	copy(b[10:NoticeSize], x.DataDetails[:])
	if len(b) >= NoticeFullSize {
		copy(b[64:NoticeFullSize], x.IssuerGID[:])
	}
}

// Trap128 returns the LID of the switch whose port changed state, from
// the data details of trap 128.
func (x *Notice) Trap128() uint16 { return be.Uint16(x.DataDetails[0:]) }

// SetTrap128 sets the data details of trap 128 (link state change) to
// name the switch with the given LID; the rest of them are zero.
func (x *Notice) SetTrap128(lid uint16) {
	clear(x.DataDetails[:])
	be.PutUint16(x.DataDetails[0:], lid)
}

// Trap129 returns the LID and the port number in the data details of
// traps 129, 130 and 131: the port whose threshold was reached.
func (x *Notice) Trap129() (lid uint16, port uint8) {
	return be.Uint16(x.DataDetails[2:]), x.DataDetails[4]
}

// SetTrap129 sets the data details of traps 129, 130 and 131 to a LID
// and a port number; the rest of them are zero.
func (x *Notice) SetTrap129(lid uint16, port uint8) {
	clear(x.DataDetails[:])
	be.PutUint16(x.DataDetails[2:], lid)
	x.DataDetails[4] = port
}

// Bits of Trap144Details.ChangeFlags: which attribute of the port changed
// besides the capability mask.
const (
	Trap144NodeDescriptionChange  = 1 << 0
	Trap144LinkWidthEnabledChange = 1 << 1
	Trap144LinkSpeedEnabledChange = 1 << 2
	Trap144SMPriorityChange       = 1 << 3
	Trap144HierarchyInfoChange    = 1 << 4
	Trap144CapabilityMask2Change  = 1 << 5
)

// Trap144Details are the data details of trap 144: a port's capability
// mask, or another of its local attributes, changed.
type Trap144Details struct {
	LID               uint16
	OtherLocalChanges bool   // something other than the masks changed
	CapabilityMask    uint32 // the new PortInfo.CapabilityMask
	ChangeFlags       uint8  // 6 bits, Trap144* bits
	CapabilityMask2   uint16 // the new PortInfo.CapabilityMask2
}

// Trap144 decodes the data details of trap 144.
func (x *Notice) Trap144() Trap144Details {
	d := x.DataDetails[:]
	return Trap144Details{
		LID:               be.Uint16(d[2:]),
		OtherLocalChanges: getBit(d[5], 0),
		CapabilityMask:    be.Uint32(d[6:]),
		ChangeFlags:       getBits(d[11], 0, 6),
		CapabilityMask2:   be.Uint16(d[12:]),
	}
}

// SetTrap144 sets the data details of trap 144; the reserved bits and the
// rest of them are zero.
func (x *Notice) SetTrap144(t Trap144Details) {
	d := x.DataDetails[:]
	clear(d)
	be.PutUint16(d[2:], t.LID)
	setBit(&d[5], 0, t.OtherLocalChanges)
	be.PutUint32(d[6:], t.CapabilityMask)
	setBits(&d[11], 0, 6, t.ChangeFlags)
	be.PutUint16(d[12:], t.CapabilityMask2)
}

// KeyViolation is the data details of traps 257 (bad P_Key) and 258 (bad
// Q_Key): a port dropped a packet for QP1 whose key it does not accept.
// LID1, GID1 and QP1 are the packet's source, LID2, GID2 and QP2 its
// destination (the port that traps).
type KeyViolation struct {
	LID1, LID2 uint16
	Key        uint32 // the P_Key (low 16 bits) or the Q_Key
	SL         uint8  // 4 bits
	QP1, QP2   uint32 // 24 bits each
	GID1, GID2 [16]byte
}

// KeyViolation decodes the data details of traps 257 and 258.
func (x *Notice) KeyViolation() KeyViolation {
	d := x.DataDetails[:]
	k := KeyViolation{
		LID1: be.Uint16(d[2:]), LID2: be.Uint16(d[4:]), Key: be.Uint32(d[6:]),
		SL: d[10] >> 4, QP1: be.Uint32(d[10:]) & 0xFFFFFF, QP2: be.Uint32(d[14:]) & 0xFFFFFF,
	}
	copy(k.GID1[:], d[18:34])
	copy(k.GID2[:], d[34:50])
	return k
}

// SetKeyViolation sets the data details of trap 257 or 258; the reserved
// bits and the rest of them are zero.
func (x *Notice) SetKeyViolation(k KeyViolation) {
	d := x.DataDetails[:]
	clear(d)
	be.PutUint16(d[2:], k.LID1)
	be.PutUint16(d[4:], k.LID2)
	be.PutUint32(d[6:], k.Key)
	be.PutUint32(d[10:], k.QP1&0xFFFFFF)
	d[10] = k.SL << 4
	be.PutUint32(d[14:], k.QP2&0xFFFFFF)
	copy(d[18:34], k.GID1[:])
	copy(d[34:50], k.GID2[:])
}
