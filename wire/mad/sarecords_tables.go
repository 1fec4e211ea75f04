// The SA records that carry an SMP table or SMInfo of a port or switch
// (IBTA volume 1 section 15.2.5): SLtoVLMappingTableRecord,
// VLArbitrationTableRecord, P_KeyTableRecord, LinearForwardingTableRecord,
// MulticastForwardingTableRecord, GuidInfoRecord and SMInfoRecord; and the
// InformInfo attribute with its InformInfoRecord (section 13.4.8.3 and
// 15.2.5.12). Each is laid out as OpenSM and saquery lay it out.

package mad

// ---- SLtoVLMappingTableRecord ----

// SLToVLRecordSize is the size of an SLtoVLMappingTableRecord.
const SLToVLRecordSize = 16

// Component mask bits of SLtoVLMappingTableRecord.
const (
	SLToVLRecCompLID     = 1 << 0
	SLToVLRecCompInPort  = 1 << 1
	SLToVLRecCompOutPort = 1 << 2
)

// SLToVLRecordComponents lays out SLtoVLMappingTableRecord's components.
var SLToVLRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "InPort", 2, 0, 8), comp(2, "OutPort", 3, 0, 8), comp(3, "Reserved", 4, 0, 32),
}

// SLToVLRecord is the SL to VL table of a port: a CA port's (ports 0 and
// 0), or a switch's for one input port and one output port.
type SLToVLRecord struct {
	LID     uint16
	InPort  uint8
	OutPort uint8
	Table   SLToVLTable
}

// ParseSLToVLRecord decodes an SLtoVLMappingTableRecord from the first
// SLToVLRecordSize bytes of b.
func ParseSLToVLRecord(b []byte) (SLToVLRecord, error) {
	if len(b) < SLToVLRecordSize {
		return SLToVLRecord{}, truncated("SLtoVLMappingTableRecord", b, SLToVLRecordSize)
	}
	t, _ := ParseSLToVLTable(b[8:])
	return SLToVLRecord{LID: be.Uint16(b), InPort: b[2], OutPort: b[3], Table: t}, nil
}

// Encode writes x into the first SLToVLRecordSize bytes of b.
func (x *SLToVLRecord) Encode(b []byte) {
	b = b[:SLToVLRecordSize]
	be.PutUint16(b, x.LID)
	b[2], b[3] = x.InPort, x.OutPort
	clear(b[4:8])
	x.Table.Encode(b[8:])
}

// ---- VLArbitrationTableRecord ----

// VLArbRecordSize is the size of a VLArbitrationTableRecord.
const VLArbRecordSize = 72

// Component mask bits of VLArbitrationTableRecord.
const (
	VLArbRecCompLID     = 1 << 0
	VLArbRecCompOutPort = 1 << 1
	VLArbRecCompBlock   = 1 << 2
)

// VLArbRecordComponents lays out VLArbitrationTableRecord's components.
var VLArbRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "OutPort", 2, 0, 8), comp(2, "Block", 3, 0, 8), comp(3, "Reserved", 4, 0, 32),
}

// VLArbRecord is one block of a port's VL arbitration table; Block is the
// VLArb* selector (1 to 4).
type VLArbRecord struct {
	LID     uint16
	OutPort uint8
	Block   uint8
	Table   VLArbTable
}

// ParseVLArbRecord decodes a VLArbitrationTableRecord from the first
// VLArbRecordSize bytes of b.
func ParseVLArbRecord(b []byte) (VLArbRecord, error) {
	if len(b) < VLArbRecordSize {
		return VLArbRecord{}, truncated("VLArbitrationTableRecord", b, VLArbRecordSize)
	}
	t, _ := ParseVLArbTable(b[8:])
	return VLArbRecord{LID: be.Uint16(b), OutPort: b[2], Block: b[3], Table: t}, nil
}

// Encode writes x into the first VLArbRecordSize bytes of b.
func (x *VLArbRecord) Encode(b []byte) {
	b = b[:VLArbRecordSize]
	be.PutUint16(b, x.LID)
	b[2], b[3] = x.OutPort, x.Block
	clear(b[4:8])
	x.Table.Encode(b[8:])
}

// ---- P_KeyTableRecord ----

// PKeyTableRecordSize is the size of a P_KeyTableRecord.
const PKeyTableRecordSize = 72

// Component mask bits of P_KeyTableRecord.
const (
	PKeyTableRecCompLID   = 1 << 0
	PKeyTableRecCompBlock = 1 << 1
	PKeyTableRecCompPort  = 1 << 2
)

// PKeyTableRecordComponents lays out P_KeyTableRecord's components.
var PKeyTableRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "Block", 2, 0, 16), comp(2, "Port", 4, 0, 8), comp(3, "Reserved", 5, 0, 24),
}

// PKeyTableRecord is one block of 32 P_Keys of a port.
type PKeyTableRecord struct {
	LID   uint16
	Block uint16
	Port  uint8
	Table PKeyTable
}

// ParsePKeyTableRecord decodes a P_KeyTableRecord from the first
// PKeyTableRecordSize bytes of b.
func ParsePKeyTableRecord(b []byte) (PKeyTableRecord, error) {
	if len(b) < PKeyTableRecordSize {
		return PKeyTableRecord{}, truncated("P_KeyTableRecord", b, PKeyTableRecordSize)
	}
	t, _ := ParsePKeyTable(b[8:])
	return PKeyTableRecord{LID: be.Uint16(b), Block: be.Uint16(b[2:]), Port: b[4], Table: t}, nil
}

// Encode writes x into the first PKeyTableRecordSize bytes of b.
func (x *PKeyTableRecord) Encode(b []byte) {
	b = b[:PKeyTableRecordSize]
	be.PutUint16(b, x.LID)
	be.PutUint16(b[2:], x.Block)
	b[4] = x.Port
	clear(b[5:8])
	x.Table.Encode(b[8:])
}

// ---- LinearForwardingTableRecord ----

// LinearFTRecordSize is the size of a LinearForwardingTableRecord.
const LinearFTRecordSize = 72

// Component mask bits of LinearForwardingTableRecord.
const (
	LinearFTRecCompLID   = 1 << 0
	LinearFTRecCompBlock = 1 << 1
)

// LinearFTRecordComponents lays out LinearForwardingTableRecord's
// components.
var LinearFTRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "Block", 2, 0, 16), comp(2, "Reserved", 4, 0, 32),
}

// LinearFTRecord is one block of 64 LIDs of a switch's linear forwarding
// table, indexed by the switch's LID.
type LinearFTRecord struct {
	LID   uint16
	Block uint16
	Table LinearFT
}

// ParseLinearFTRecord decodes a LinearForwardingTableRecord from the first
// LinearFTRecordSize bytes of b.
func ParseLinearFTRecord(b []byte) (LinearFTRecord, error) {
	if len(b) < LinearFTRecordSize {
		return LinearFTRecord{}, truncated("LinearForwardingTableRecord", b, LinearFTRecordSize)
	}
	t, _ := ParseLinearFT(b[8:])
	return LinearFTRecord{LID: be.Uint16(b), Block: be.Uint16(b[2:]), Table: t}, nil
}

// Encode writes x into the first LinearFTRecordSize bytes of b.
func (x *LinearFTRecord) Encode(b []byte) {
	b = b[:LinearFTRecordSize]
	be.PutUint16(b, x.LID)
	be.PutUint16(b[2:], x.Block)
	clear(b[4:8])
	x.Table.Encode(b[8:])
}

// ---- MulticastForwardingTableRecord ----

// MulticastFTRecordSize is the size of a MulticastForwardingTableRecord.
const MulticastFTRecordSize = 72

// Component mask bits of MulticastForwardingTableRecord. Position is the
// top 4 bits of the record's second 16-bit word and BlockNum its low 9
// bits, as OpenSM and saquery lay them out.
const (
	MulticastFTRecCompLID      = 1 << 0
	MulticastFTRecCompPosition = 1 << 1
	MulticastFTRecCompBlock    = 1 << 3
)

// MulticastFTRecordComponents lays out MulticastForwardingTableRecord's
// components.
var MulticastFTRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "Position", 2, 4, 4), comp(2, "Reserved", 2, 1, 3),
	{3, "Block", 23, 9}, comp(4, "Reserved", 4, 0, 32),
}

// MulticastFTRecord is one block (32 MLIDs) of one position (16 ports) of
// a switch's multicast forwarding table.
type MulticastFTRecord struct {
	LID      uint16
	Position uint8  // 4 bits
	Block    uint16 // 9 bits
	Table    MulticastFT
}

// ParseMulticastFTRecord decodes a MulticastForwardingTableRecord from the
// first MulticastFTRecordSize bytes of b.
func ParseMulticastFTRecord(b []byte) (MulticastFTRecord, error) {
	if len(b) < MulticastFTRecordSize {
		return MulticastFTRecord{}, truncated("MulticastForwardingTableRecord", b, MulticastFTRecordSize)
	}
	t, _ := ParseMulticastFT(b[8:])
	w := be.Uint16(b[2:])
	return MulticastFTRecord{LID: be.Uint16(b), Position: uint8(w >> 12), Block: w & 0x1ff, Table: t}, nil
}

// Encode writes x into the first MulticastFTRecordSize bytes of b.
func (x *MulticastFTRecord) Encode(b []byte) {
	b = b[:MulticastFTRecordSize]
	be.PutUint16(b, x.LID)
	be.PutUint16(b[2:], uint16(x.Position&0xf)<<12|x.Block&0x1ff)
	clear(b[4:8])
	x.Table.Encode(b[8:])
}

// ---- GuidInfoRecord ----

// GUIDInfoRecordSize is the size of a GuidInfoRecord.
const GUIDInfoRecordSize = 72

// Component mask bits of GuidInfoRecord (bits 4 to 11 select GUID 0 to 7
// of the block).
const (
	GUIDInfoRecCompLID   = 1 << 0
	GUIDInfoRecCompBlock = 1 << 1
)

// GUIDInfoRecordComponents lays out GuidInfoRecord's components.
var GUIDInfoRecordComponents = func() []Component {
	c := []Component{comp(0, "LID", 0, 0, 16), comp(1, "Block", 2, 0, 8), comp(2, "Reserved", 3, 0, 8),
		comp(3, "Reserved", 4, 0, 32)}
	for i := range 8 {
		c = append(c, comp(uint8(4+i), "GUID", 8+8*i, 0, 64))
	}
	return c
}()

// GUIDInfoRecord is one block of eight GUIDs of a port's GUID table.
type GUIDInfoRecord struct {
	LID   uint16
	Block uint8
	Table GUIDInfo
}

// ParseGUIDInfoRecord decodes a GuidInfoRecord from the first
// GUIDInfoRecordSize bytes of b.
func ParseGUIDInfoRecord(b []byte) (GUIDInfoRecord, error) {
	if len(b) < GUIDInfoRecordSize {
		return GUIDInfoRecord{}, truncated("GuidInfoRecord", b, GUIDInfoRecordSize)
	}
	t, _ := ParseGUIDInfo(b[8:])
	return GUIDInfoRecord{LID: be.Uint16(b), Block: b[2], Table: t}, nil
}

// Encode writes x into the first GUIDInfoRecordSize bytes of b.
func (x *GUIDInfoRecord) Encode(b []byte) {
	b = b[:GUIDInfoRecordSize]
	be.PutUint16(b, x.LID)
	b[2] = x.Block
	clear(b[3:8])
	x.Table.Encode(b[8:])
}

// ---- SMInfoRecord ----

// SMInfoRecordSize is the size of an SMInfoRecord.
const SMInfoRecordSize = 4 + SMInfoSize

// Component mask bits of SMInfoRecord.
const (
	SMInfoRecCompLID      = 1 << 0
	SMInfoRecCompGUID     = 1 << 2
	SMInfoRecCompSMKey    = 1 << 3
	SMInfoRecCompActCount = 1 << 4
	SMInfoRecCompPriority = 1 << 5
	SMInfoRecCompSMState  = 1 << 6
)

// SMInfoRecordComponents lays out SMInfoRecord's components.
var SMInfoRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "Reserved", 2, 0, 16), comp(2, "GUID", 4, 0, 64),
	comp(3, "SMKey", 12, 0, 64), comp(4, "ActCount", 20, 0, 32), comp(5, "Priority", 24, 4, 4),
	comp(6, "SMState", 24, 0, 4),
}

// SMInfoRecord is an SM's SMInfo, indexed by the LID of its port.
type SMInfoRecord struct {
	LID  uint16
	Info SMInfo
}

// ParseSMInfoRecord decodes an SMInfoRecord from the first
// SMInfoRecordSize bytes of b.
func ParseSMInfoRecord(b []byte) (SMInfoRecord, error) {
	if len(b) < SMInfoRecordSize {
		return SMInfoRecord{}, truncated("SMInfoRecord", b, SMInfoRecordSize)
	}
	si, _ := ParseSMInfo(b[4:])
	return SMInfoRecord{LID: be.Uint16(b), Info: si}, nil
}

// Encode writes x into the first SMInfoRecordSize bytes of b.
func (x *SMInfoRecord) Encode(b []byte) {
	b = b[:SMInfoRecordSize]
	be.PutUint16(b, x.LID)
	b[2], b[3] = 0, 0
	x.Info.Encode(b[4:])
}

// ---- InformInfo and InformInfoRecord ----

// InformInfoSize is the size of the InformInfo attribute.
const InformInfoSize = 36

// InformInfo subscribes a port to (Subscribe) or unsubscribes it from the
// SA's reports of a trap. A generic subscription names a TrapNumber (or
// 0xFFFF: all), a notice Type (0xFFFF: all) and ProducerType (0xFFFFFF:
// all); a vendor subscription puts the device ID in TrapNumber and the
// vendor ID in ProducerType. GID, or else the LID range (0xFFFF: all),
// names the ports whose events are reported. QPN is the subscriber's QP
// the reports go to; RespTimeValue how long it takes to answer one.
type InformInfo struct {
	GID           GID
	LIDRangeBegin uint16
	LIDRangeEnd   uint16
	IsGeneric     bool
	Subscribe     bool
	Type          uint16
	TrapNumber    uint16 // the device ID of a vendor subscription
	QPN           uint32 // 24 bits
	RespTimeValue uint8  // 5 bits
	ProducerType  uint32 // 24 bits; the vendor ID of a vendor subscription
}

// ParseInformInfo decodes an InformInfo from the first InformInfoSize
// bytes of b.
func ParseInformInfo(b []byte) (InformInfo, error) {
	if len(b) < InformInfoSize {
		return InformInfo{}, truncated("InformInfo", b, InformInfoSize)
	}
	x := InformInfo{LIDRangeBegin: be.Uint16(b[16:]), LIDRangeEnd: be.Uint16(b[18:]), IsGeneric: b[22]&1 != 0,
		Subscribe: b[23]&1 != 0, Type: be.Uint16(b[24:]), TrapNumber: be.Uint16(b[26:]),
		QPN: be.Uint32(b[28:]) >> 8, RespTimeValue: b[31] & 0x1f, ProducerType: be.Uint32(b[32:]) & 0xffffff}
	copy(x.GID[:], b)
	return x, nil
}

// Encode writes x into the first InformInfoSize bytes of b.
func (x *InformInfo) Encode(b []byte) {
	b = b[:InformInfoSize]
	copy(b, x.GID[:])
	be.PutUint16(b[16:], x.LIDRangeBegin)
	be.PutUint16(b[18:], x.LIDRangeEnd)
	b[20], b[21] = 0, 0
	b[22], b[23] = boolByte(x.IsGeneric), boolByte(x.Subscribe)
	be.PutUint16(b[24:], x.Type)
	be.PutUint16(b[26:], x.TrapNumber)
	be.PutUint32(b[28:], x.QPN<<8|uint32(x.RespTimeValue&0x1f))
	be.PutUint32(b[32:], x.ProducerType&0xffffff)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// InformInfoRecordSize is the size of an InformInfoRecord.
const InformInfoRecordSize = 24 + InformInfoSize

// Component mask bits of InformInfoRecord (OpenSM matches the subscriber
// GID and Enum).
const (
	InformInfoRecCompSubscriberGID = 1 << 0
	InformInfoRecCompEnum          = 1 << 1
)

// InformInfoRecordComponents lays out InformInfoRecord's components.
var InformInfoRecordComponents = []Component{
	comp(0, "SubscriberGID", 0, 0, 128), comp(1, "Enum", 16, 0, 16), comp(2, "Reserved", 18, 0, 48),
	comp(3, "GID", 24, 0, 128), comp(4, "LIDRangeBegin", 40, 0, 16), comp(5, "LIDRangeEnd", 42, 0, 16),
	comp(6, "Reserved", 44, 0, 16), comp(7, "IsGeneric", 46, 0, 8), comp(8, "Subscribe", 47, 0, 8),
	comp(9, "Type", 48, 0, 16), comp(10, "TrapNumber", 50, 0, 16), comp(11, "QPN", 52, 0, 24),
	comp(12, "Reserved", 55, 5, 3), comp(13, "RespTimeValue", 55, 0, 5), comp(14, "Reserved", 56, 0, 8),
	comp(15, "ProducerType", 57, 0, 24),
}

// InformInfoRecord is one subscription the SA holds: the subscriber's port
// GID, an enumerator telling its subscriptions apart, and the InformInfo.
type InformInfoRecord struct {
	SubscriberGID GID
	Enum          uint16
	Info          InformInfo
}

// ParseInformInfoRecord decodes an InformInfoRecord from the first
// InformInfoRecordSize bytes of b.
func ParseInformInfoRecord(b []byte) (InformInfoRecord, error) {
	if len(b) < InformInfoRecordSize {
		return InformInfoRecord{}, truncated("InformInfoRecord", b, InformInfoRecordSize)
	}
	ii, _ := ParseInformInfo(b[24:])
	x := InformInfoRecord{Enum: be.Uint16(b[16:]), Info: ii}
	copy(x.SubscriberGID[:], b)
	return x, nil
}

// Encode writes x into the first InformInfoRecordSize bytes of b.
func (x *InformInfoRecord) Encode(b []byte) {
	b = b[:InformInfoRecordSize]
	copy(b, x.SubscriberGID[:])
	be.PutUint16(b[16:], x.Enum)
	clear(b[18:24])
	x.Info.Encode(b[24:])
}
