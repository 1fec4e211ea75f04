// Performance management (IBTA volume 1 chapter 16.1): the PMA's attribute
// IDs and the codecs of PortCounters, PortCountersExtended and the generic
// ClassPortInfo that every GS class (SA, PMA, CM) answers.

package mad

// PMA attribute IDs (IBTA volume 1 table 224). ClassPortInfo is
// AttrClassPortInfo in every class.
const (
	PerfAttrPortCounters    AttributeID = 0x0012
	PerfAttrPortCountersExt AttributeID = 0x001D
)

var perfAttrNames = map[AttributeID]string{
	AttrClassPortInfo:       "ClassPortInfo",
	PerfAttrPortCounters:    "PortCounters",
	PerfAttrPortCountersExt: "PortCountersExtended",
}

// Bits of the PMA's ClassPortInfo.CapabilityMask: which counters and
// attributes it supports.
const (
	PerfCapAllPortSelect       uint16 = 1 << 8  // PortSelect 0xFF reads or clears every port
	PerfCapExtendedWidth       uint16 = 1 << 9  // PortCountersExtended answers
	PerfCapExtendedWidthNoIETF uint16 = 1 << 10 // PortCountersExtended, without the unicast/multicast counters
	PerfCapSamplesOnly         uint16 = 1 << 11
	PerfCapXmitWait            uint16 = 1 << 12 // PortCounters' PortXmitWait counts
	PerfCapQP1Dropped          uint16 = 1 << 15 // PortCounters' QP1Dropped counts
)

// Bits of the PMA's ClassPortInfo.CapabilityMask2.
const (
	PerfCap2PMKey                     uint32 = 1 << 0
	PerfCap2AdditionalPortCountersExt uint32 = 1 << 1 // PortCountersExtended has its error counters
)

// PerfDataOffset is where a PMA attribute starts in a MAD: the GS header is
// followed by 40 reserved bytes.
const PerfDataOffset = 64

// PortCountersSize is the size of the PortCounters attribute's fields.
const PortCountersSize = 44

// PortCounters is the PortCounters attribute (IBTA volume 1 section
// 16.1.3.5): one port's error and traffic counters, which saturate at their
// maximum instead of wrapping. A Set with a bit of CounterSelect (and
// CounterSelect2) clears the matching counter; PortSelect 0xFF means all
// ports. Data counters count 4-byte words.
type PortCounters struct {
	PortSelect                   uint8
	CounterSelect                uint16
	SymbolErrorCounter           uint16
	LinkErrorRecoveryCounter     uint8
	LinkDownedCounter            uint8
	PortRcvErrors                uint16
	PortRcvRemotePhysicalErrors  uint16
	PortRcvSwitchRelayErrors     uint16
	PortXmitDiscards             uint16
	PortXmitConstraintErrors     uint8
	PortRcvConstraintErrors      uint8
	CounterSelect2               uint8
	LocalLinkIntegrityErrors     uint8 // 4 bits
	ExcessiveBufferOverrunErrors uint8 // 4 bits
	QP1Dropped                   uint16
	VL15Dropped                  uint16
	PortXmitData                 uint32
	PortRcvData                  uint32
	PortXmitPkts                 uint32
	PortRcvPkts                  uint32
	PortXmitWait                 uint32
}

// ParsePortCounters decodes a PortCounters attribute from the first
// PortCountersSize bytes of b (the PMA data, from PerfDataOffset of the
// MAD).
func ParsePortCounters(b []byte) (PortCounters, error) {
	if len(b) < PortCountersSize {
		return PortCounters{}, truncated("PortCounters", b, PortCountersSize)
	}
	return PortCounters{
		PortSelect:                   b[1],
		CounterSelect:                be.Uint16(b[2:]),
		SymbolErrorCounter:           be.Uint16(b[4:]),
		LinkErrorRecoveryCounter:     b[6],
		LinkDownedCounter:            b[7],
		PortRcvErrors:                be.Uint16(b[8:]),
		PortRcvRemotePhysicalErrors:  be.Uint16(b[10:]),
		PortRcvSwitchRelayErrors:     be.Uint16(b[12:]),
		PortXmitDiscards:             be.Uint16(b[14:]),
		PortXmitConstraintErrors:     b[16],
		PortRcvConstraintErrors:      b[17],
		CounterSelect2:               b[18],
		LocalLinkIntegrityErrors:     getBits(b[19], 4, 4),
		ExcessiveBufferOverrunErrors: getBits(b[19], 0, 4),
		QP1Dropped:                   be.Uint16(b[20:]),
		VL15Dropped:                  be.Uint16(b[22:]),
		PortXmitData:                 be.Uint32(b[24:]),
		PortRcvData:                  be.Uint32(b[28:]),
		PortXmitPkts:                 be.Uint32(b[32:]),
		PortRcvPkts:                  be.Uint32(b[36:]),
		PortXmitWait:                 be.Uint32(b[40:]),
	}, nil
}

// Encode writes x into the first PortCountersSize bytes of b, with the
// reserved byte zero.
func (x *PortCounters) Encode(b []byte) {
	b = b[:PortCountersSize]
	b[0], b[1] = 0, x.PortSelect
	be.PutUint16(b[2:], x.CounterSelect)
	be.PutUint16(b[4:], x.SymbolErrorCounter)
	b[6], b[7] = x.LinkErrorRecoveryCounter, x.LinkDownedCounter
	be.PutUint16(b[8:], x.PortRcvErrors)
	be.PutUint16(b[10:], x.PortRcvRemotePhysicalErrors)
	be.PutUint16(b[12:], x.PortRcvSwitchRelayErrors)
	be.PutUint16(b[14:], x.PortXmitDiscards)
	b[16], b[17], b[18] = x.PortXmitConstraintErrors, x.PortRcvConstraintErrors, x.CounterSelect2
	b[19] = x.LocalLinkIntegrityErrors<<4 | x.ExcessiveBufferOverrunErrors&0xf
	be.PutUint16(b[20:], x.QP1Dropped)
	be.PutUint16(b[22:], x.VL15Dropped)
	be.PutUint32(b[24:], x.PortXmitData)
	be.PutUint32(b[28:], x.PortRcvData)
	be.PutUint32(b[32:], x.PortXmitPkts)
	be.PutUint32(b[36:], x.PortRcvPkts)
	be.PutUint32(b[40:], x.PortXmitWait)
}

// Sizes of the PortCountersExtended attribute: the eight 64-bit traffic
// counters, and with the 64-bit error counters that follow them (present
// when the PMA's ClassPortInfo.CapabilityMask2 says so).
const (
	PortCountersExtSize     = 72
	PortCountersExtFullSize = 184
)

// PortCountersExt is the PortCountersExtended attribute (section
// 16.1.4.11): 64-bit counters that do not saturate in practice. Errors is
// decoded only from a buffer of PortCountersExtFullSize bytes.
type PortCountersExt struct {
	PortSelect            uint8
	CounterSelect         uint16
	CounterSelect2        uint32
	PortXmitData          uint64
	PortRcvData           uint64
	PortXmitPkts          uint64
	PortRcvPkts           uint64
	PortUnicastXmitPkts   uint64
	PortUnicastRcvPkts    uint64
	PortMulticastXmitPkts uint64
	PortMulticastRcvPkts  uint64
	Errors                PortErrorCountersExt
}

// PortErrorCountersExt are the 64-bit error counters of
// PortCountersExtended, at bytes 72-183.
type PortErrorCountersExt struct {
	SymbolErrorCounter           uint64
	LinkErrorRecoveryCounter     uint64
	LinkDownedCounter            uint64
	PortRcvErrors                uint64
	PortRcvRemotePhysicalErrors  uint64
	PortRcvSwitchRelayErrors     uint64
	PortXmitDiscards             uint64
	PortXmitConstraintErrors     uint64
	PortRcvConstraintErrors      uint64
	LocalLinkIntegrityErrors     uint64
	ExcessiveBufferOverrunErrors uint64
	VL15Dropped                  uint64
	PortXmitWait                 uint64
	QP1Dropped                   uint64
}

// counters returns pointers to the counters in their wire order.
func (e *PortErrorCountersExt) counters() [14]*uint64 {
	return [14]*uint64{&e.SymbolErrorCounter, &e.LinkErrorRecoveryCounter, &e.LinkDownedCounter,
		&e.PortRcvErrors, &e.PortRcvRemotePhysicalErrors, &e.PortRcvSwitchRelayErrors,
		&e.PortXmitDiscards, &e.PortXmitConstraintErrors, &e.PortRcvConstraintErrors,
		&e.LocalLinkIntegrityErrors, &e.ExcessiveBufferOverrunErrors, &e.VL15Dropped,
		&e.PortXmitWait, &e.QP1Dropped}
}

// traffic returns pointers to x's 64-bit traffic counters in their wire
// order.
func (x *PortCountersExt) traffic() [8]*uint64 {
	return [8]*uint64{&x.PortXmitData, &x.PortRcvData, &x.PortXmitPkts, &x.PortRcvPkts,
		&x.PortUnicastXmitPkts, &x.PortUnicastRcvPkts, &x.PortMulticastXmitPkts, &x.PortMulticastRcvPkts}
}

// ParsePortCountersExt decodes a PortCountersExtended attribute from the
// first PortCountersExtSize bytes of b, and its error counters too if b has
// PortCountersExtFullSize bytes.
func ParsePortCountersExt(b []byte) (PortCountersExt, error) {
	var x PortCountersExt
	if len(b) < PortCountersExtSize {
		return x, truncated("PortCountersExtended", b, PortCountersExtSize)
	}
	x.PortSelect = b[1]
	x.CounterSelect = be.Uint16(b[2:])
	x.CounterSelect2 = be.Uint32(b[4:])
	for i, p := range x.traffic() {
		*p = be.Uint64(b[8+8*i:])
	}
	if len(b) >= PortCountersExtFullSize {
		for i, p := range x.Errors.counters() {
			*p = be.Uint64(b[PortCountersExtSize+8*i:])
		}
	}
	return x, nil
}

// Encode writes x into the first PortCountersExtSize bytes of b, and its
// error counters too if b has PortCountersExtFullSize bytes.
func (x *PortCountersExt) Encode(b []byte) {
	_ = b[PortCountersExtSize-1]
	b[0], b[1] = 0, x.PortSelect
	be.PutUint16(b[2:], x.CounterSelect)
	be.PutUint32(b[4:], x.CounterSelect2)
	for i, p := range x.traffic() {
		be.PutUint64(b[8+8*i:], *p)
	}
	if len(b) >= PortCountersExtFullSize {
		for i, p := range x.Errors.counters() {
			be.PutUint64(b[PortCountersExtSize+8*i:], *p)
		}
	}
}

// ClassPortInfoSize is the size of the ClassPortInfo attribute.
const ClassPortInfoSize = 72

// ClassPortInfo is the generic ClassPortInfo attribute (IBTA volume 1
// section 13.4.8.1) that every GS class answers, the PMA and the SA among
// them: the class's version and capabilities, where to redirect requests
// and where to send traps.
type ClassPortInfo struct {
	BaseVersion     uint8
	ClassVersion    uint8
	CapabilityMask  uint16
	CapabilityMask2 uint32 // 27 bits
	RespTimeValue   uint8  // 5 bits
	RedirectGID     [16]byte
	RedirectTC      uint8
	RedirectSL      uint8  // 4 bits
	RedirectFL      uint32 // 20 bits
	RedirectLID     uint16
	RedirectPKey    uint16
	RedirectQP      uint32 // 24 bits
	RedirectQKey    uint32
	TrapGID         [16]byte
	TrapTC          uint8
	TrapSL          uint8  // 4 bits
	TrapFL          uint32 // 20 bits
	TrapLID         uint16
	TrapPKey        uint16
	TrapHL          uint8
	TrapQP          uint32 // 24 bits
	TrapQKey        uint32
}

// ParseClassPortInfo decodes a ClassPortInfo from the first
// ClassPortInfoSize bytes of b.
func ParseClassPortInfo(b []byte) (ClassPortInfo, error) {
	var x ClassPortInfo
	if len(b) < ClassPortInfoSize {
		return x, truncated("ClassPortInfo", b, ClassPortInfoSize)
	}
	x.BaseVersion, x.ClassVersion = b[0], b[1]
	x.CapabilityMask = be.Uint16(b[2:])
	w := be.Uint32(b[4:])
	x.CapabilityMask2, x.RespTimeValue = w>>5, uint8(w&0x1f)
	copy(x.RedirectGID[:], b[8:24])
	w = be.Uint32(b[24:])
	x.RedirectTC, x.RedirectSL, x.RedirectFL = uint8(w>>24), uint8(w>>20&0xf), w&0xfffff
	x.RedirectLID = be.Uint16(b[28:])
	x.RedirectPKey = be.Uint16(b[30:])
	x.RedirectQP = get24(b[33:])
	x.RedirectQKey = be.Uint32(b[36:])
	copy(x.TrapGID[:], b[40:56])
	w = be.Uint32(b[56:])
	x.TrapTC, x.TrapSL, x.TrapFL = uint8(w>>24), uint8(w>>20&0xf), w&0xfffff
	x.TrapLID = be.Uint16(b[60:])
	x.TrapPKey = be.Uint16(b[62:])
	x.TrapHL = b[64]
	x.TrapQP = get24(b[65:])
	x.TrapQKey = be.Uint32(b[68:])
	return x, nil
}

// Encode writes x into the first ClassPortInfoSize bytes of b, with the
// reserved byte zero.
func (x *ClassPortInfo) Encode(b []byte) {
	b = b[:ClassPortInfoSize]
	b[0], b[1] = x.BaseVersion, x.ClassVersion
	be.PutUint16(b[2:], x.CapabilityMask)
	be.PutUint32(b[4:], x.CapabilityMask2<<5|uint32(x.RespTimeValue&0x1f))
	copy(b[8:24], x.RedirectGID[:])
	be.PutUint32(b[24:], uint32(x.RedirectTC)<<24|uint32(x.RedirectSL&0xf)<<20|x.RedirectFL&0xfffff)
	be.PutUint16(b[28:], x.RedirectLID)
	be.PutUint16(b[30:], x.RedirectPKey)
	b[32] = 0
	put24(b[33:], x.RedirectQP)
	be.PutUint32(b[36:], x.RedirectQKey)
	copy(b[40:56], x.TrapGID[:])
	be.PutUint32(b[56:], uint32(x.TrapTC)<<24|uint32(x.TrapSL&0xf)<<20|x.TrapFL&0xfffff)
	be.PutUint16(b[60:], x.TrapLID)
	be.PutUint16(b[62:], x.TrapPKey)
	b[64] = x.TrapHL
	put24(b[65:], x.TrapQP)
	be.PutUint32(b[68:], x.TrapQKey)
}
