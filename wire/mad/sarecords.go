// The SA records (IBTA volume 1 section 15.2.5): NodeRecord,
// PortInfoRecord, SwitchInfoRecord, LinkRecord, ServiceRecord, PathRecord
// and MCMemberRecord, each a struct with Parse<Name> and Encode as the SM
// attributes have, the bits of its component mask, and a table of where
// each component lies, which MatchComponents compares a query against.

package mad

// Component is one component of an SA record: the bit of the component
// mask that selects it and where it lies in the record, in bits from the
// first (most significant) bit of byte 0.
type Component struct {
	Bit  uint8
	Name string
	Off  uint16 // bits
	Len  uint16 // bits
}

// MatchComponents reports whether record rec matches query q on every
// component of comps whose bit mask sets. Both are encoded records; bits
// of mask that no component has are ignored.
func MatchComponents(comps []Component, mask uint64, q, rec []byte) bool {
	for _, c := range comps {
		if mask&(1<<c.Bit) == 0 {
			continue
		}
		if !bitsEqual(q, rec, int(c.Off), int(c.Len)) {
			return false
		}
	}
	return true
}

// bitsEqual compares n bits of a and b from bit off.
func bitsEqual(a, b []byte, off, n int) bool {
	for n > 0 {
		i, s := off/8, off%8
		w := min(8-s, n)
		m := byte(0xff>>s) & byte(0xff<<(8-s-w))
		if i >= len(a) || i >= len(b) || (a[i]^b[i])&m != 0 {
			return i >= len(a) && i >= len(b)
		}
		off, n = off+w, n-w
	}
	return true
}

// comp builds a Component from a byte offset, a shift above the least
// significant bit of that byte (for fields inside a byte) and a width.
func comp(bit uint8, name string, byteOff int, shift, width int) Component {
	if width >= 8 {
		return Component{bit, name, uint16(byteOff * 8), uint16(width)}
	}
	return Component{bit, name, uint16(byteOff*8 + 8 - shift - width), uint16(width)}
}

// GID is a 128-bit global identifier: the subnet prefix then the port GUID.
type GID [16]byte

// MakeGID returns the GID of a subnet prefix and a port GUID.
func MakeGID(prefix, guid uint64) GID {
	var g GID
	be.PutUint64(g[:], prefix)
	be.PutUint64(g[8:], guid)
	return g
}

// Prefix returns the GID's subnet prefix (its high 64 bits).
func (g GID) Prefix() uint64 { return be.Uint64(g[:]) }

// GUID returns the GID's interface ID (its low 64 bits).
func (g GID) GUID() uint64 { return be.Uint64(g[8:]) }

// ---- NodeRecord ----

// NodeRecordSize is the size of a NodeRecord.
const NodeRecordSize = 108

// Component mask bits of NodeRecord.
const (
	NodeRecCompLID             = 1 << 0
	NodeRecCompBaseVersion     = 1 << 2
	NodeRecCompClassVersion    = 1 << 3
	NodeRecCompNodeType        = 1 << 4
	NodeRecCompNumPorts        = 1 << 5
	NodeRecCompSystemImageGUID = 1 << 6
	NodeRecCompNodeGUID        = 1 << 7
	NodeRecCompPortGUID        = 1 << 8
	NodeRecCompPartitionCap    = 1 << 9
	NodeRecCompDeviceID        = 1 << 10
	NodeRecCompRevision        = 1 << 11
	NodeRecCompLocalPortNum    = 1 << 12
	NodeRecCompVendorID        = 1 << 13
	NodeRecCompNodeDescription = 1 << 14
)

// NodeRecordComponents lays out NodeRecord's components.
var NodeRecordComponents = []Component{
	comp(0, "LID", 0, 0, 16), comp(1, "Reserved", 2, 0, 16),
	comp(2, "BaseVersion", 4, 0, 8), comp(3, "ClassVersion", 5, 0, 8),
	comp(4, "NodeType", 6, 0, 8), comp(5, "NumPorts", 7, 0, 8),
	comp(6, "SystemImageGUID", 8, 0, 64), comp(7, "NodeGUID", 16, 0, 64),
	comp(8, "PortGUID", 24, 0, 64), comp(9, "PartitionCap", 32, 0, 16),
	comp(10, "DeviceID", 34, 0, 16), comp(11, "Revision", 36, 0, 32),
	comp(12, "LocalPortNum", 40, 0, 8), comp(13, "VendorID", 41, 0, 24),
	comp(14, "NodeDescription", 44, 0, 512),
}

// NodeRecord is a node's NodeInfo and NodeDescription, indexed by the LID
// of one of its ports (a switch's: port 0's).
type NodeRecord struct {
	LID  uint16
	Info NodeInfo
	Desc NodeDescription
}

// ParseNodeRecord decodes a NodeRecord from the first NodeRecordSize bytes
// of b.
func ParseNodeRecord(b []byte) (NodeRecord, error) {
	if len(b) < NodeRecordSize {
		return NodeRecord{}, truncated("NodeRecord", b, NodeRecordSize)
	}
	ni, _ := ParseNodeInfo(b[4:])
	nd, _ := ParseNodeDescription(b[44:])
	return NodeRecord{LID: be.Uint16(b), Info: ni, Desc: nd}, nil
}

// Encode writes x into the first NodeRecordSize bytes of b.
func (x *NodeRecord) Encode(b []byte) {
	b = b[:NodeRecordSize]
	be.PutUint16(b, x.LID)
	b[2], b[3] = 0, 0
	x.Info.Encode(b[4:])
	x.Desc.Encode(b[44:])
}

// ---- PortInfoRecord ----

// PortInfoRecordSize is the size of a PortInfoRecord.
const PortInfoRecordSize = 68

// Component mask bits of PortInfoRecord: the record's own fields; bit
// 3+i is PortInfo's i-th field in PortInfoRecordComponents.
const (
	PortInfoRecCompLID       = 1 << 0
	PortInfoRecCompPortNum   = 1 << 1
	PortInfoRecCompOptions   = 1 << 2
	PortInfoRecCompMKey      = 1 << 3
	PortInfoRecCompBaseLID   = 1 << 5
	PortInfoRecCompCapMask   = 1 << 7
	PortInfoRecCompPortState = 1 << 15
	PortInfoRecCompLMC       = 1 << 20
)

// PortInfoRecordComponents lays out PortInfoRecord's components, PortInfo's
// fields shifted by the 4 bytes in front of it.
var PortInfoRecordComponents = func() []Component {
	c := []Component{comp(0, "EndportLID", 0, 0, 16), comp(1, "PortNum", 2, 0, 8), comp(2, "Options", 3, 0, 8)}
	const p = 4
	return append(c, []Component{
		comp(3, "MKey", p+0, 0, 64), comp(4, "GIDPrefix", p+8, 0, 64), comp(5, "LID", p+16, 0, 16),
		comp(6, "MasterSMLID", p+18, 0, 16), comp(7, "CapabilityMask", p+20, 0, 32),
		comp(8, "DiagCode", p+24, 0, 16), comp(9, "MKeyLeasePeriod", p+26, 0, 16),
		comp(10, "LocalPortNum", p+28, 0, 8), comp(11, "LinkWidthEnabled", p+29, 0, 8),
		comp(12, "LinkWidthSupported", p+30, 0, 8), comp(13, "LinkWidthActive", p+31, 0, 8),
		comp(14, "LinkSpeedSupported", p+32, 4, 4), comp(15, "PortState", p+32, 0, 4),
		comp(16, "PortPhysicalState", p+33, 4, 4), comp(17, "LinkDownDefaultState", p+33, 0, 4),
		comp(18, "MKeyProtectBits", p+34, 6, 2), comp(19, "Reserved", p+34, 3, 3), comp(20, "LMC", p+34, 0, 3),
		comp(21, "LinkSpeedActive", p+35, 4, 4), comp(22, "LinkSpeedEnabled", p+35, 0, 4),
		comp(23, "NeighborMTU", p+36, 4, 4), comp(24, "MasterSMSL", p+36, 0, 4),
		comp(25, "VLCap", p+37, 4, 4), comp(26, "InitType", p+37, 0, 4),
		comp(27, "VLHighLimit", p+38, 0, 8), comp(28, "VLArbitrationHighCap", p+39, 0, 8),
		comp(29, "VLArbitrationLowCap", p+40, 0, 8),
		comp(30, "InitTypeReply", p+41, 4, 4), comp(31, "MTUCap", p+41, 0, 4),
		comp(32, "VLStallCount", p+42, 5, 3), comp(33, "HOQLife", p+42, 0, 5),
		comp(34, "OperationalVLs", p+43, 4, 4), comp(35, "PartitionEnforcementInbound", p+43, 3, 1),
		comp(36, "PartitionEnforcementOutbound", p+43, 2, 1), comp(37, "FilterRawInbound", p+43, 1, 1),
		comp(38, "FilterRawOutbound", p+43, 0, 1),
		comp(39, "MKeyViolations", p+44, 0, 16), comp(40, "PKeyViolations", p+46, 0, 16),
		comp(41, "QKeyViolations", p+48, 0, 16), comp(42, "GUIDCap", p+50, 0, 8),
		comp(43, "ClientReregister", p+51, 7, 1), comp(44, "MulticastPKeyTrapSuppressionEnabled", p+51, 5, 2),
		comp(45, "SubnetTimeOut", p+51, 0, 5), comp(46, "Reserved", p+52, 5, 3),
		comp(47, "RespTimeValue", p+52, 0, 5),
		comp(48, "LocalPhyErrors", p+53, 4, 4), comp(49, "OverrunErrors", p+53, 0, 4),
		comp(50, "MaxCreditHint", p+54, 0, 16), comp(51, "Reserved", p+56, 0, 8),
		comp(52, "LinkRoundTripLatency", p+57, 0, 24), comp(53, "CapabilityMask2", p+60, 0, 16),
		comp(54, "LinkSpeedExtActive", p+62, 4, 4), comp(55, "LinkSpeedExtSupported", p+62, 0, 4),
		comp(56, "Reserved", p+63, 5, 3), comp(57, "LinkSpeedExtEnabled", p+63, 0, 5),
	}...)
}()

// PortInfoRecord is one port's PortInfo, indexed by the LID of the port
// (a switch's: the switch's LID) and the port number.
type PortInfoRecord struct {
	EndportLID uint16
	PortNum    uint8
	Options    uint8
	Info       PortInfo
}

// ParsePortInfoRecord decodes a PortInfoRecord from the first
// PortInfoRecordSize bytes of b.
func ParsePortInfoRecord(b []byte) (PortInfoRecord, error) {
	if len(b) < PortInfoRecordSize {
		return PortInfoRecord{}, truncated("PortInfoRecord", b, PortInfoRecordSize)
	}
	pi, _ := ParsePortInfo(b[4:])
	return PortInfoRecord{EndportLID: be.Uint16(b), PortNum: b[2], Options: b[3], Info: pi}, nil
}

// Encode writes x into the first PortInfoRecordSize bytes of b.
func (x *PortInfoRecord) Encode(b []byte) {
	b = b[:PortInfoRecordSize]
	be.PutUint16(b, x.EndportLID)
	b[2], b[3] = x.PortNum, x.Options
	x.Info.Encode(b[4:])
}

// ---- SwitchInfoRecord ----

// SwitchInfoRecordSize is the size of a SwitchInfoRecord.
const SwitchInfoRecordSize = 24

// Component mask bits of SwitchInfoRecord. OpenSM matches only the LID;
// so does package sm/sa.
const (
	SwitchInfoRecCompLID = 1 << 0
)

// SwitchInfoRecordComponents lays out SwitchInfoRecord's components.
var SwitchInfoRecordComponents = []Component{comp(0, "LID", 0, 0, 16), comp(1, "Reserved", 2, 0, 16)}

// SwitchInfoRecord is a switch's SwitchInfo, indexed by its LID.
type SwitchInfoRecord struct {
	LID  uint16
	Info SwitchInfo
}

// ParseSwitchInfoRecord decodes a SwitchInfoRecord from the first
// SwitchInfoRecordSize bytes of b.
func ParseSwitchInfoRecord(b []byte) (SwitchInfoRecord, error) {
	if len(b) < SwitchInfoRecordSize {
		return SwitchInfoRecord{}, truncated("SwitchInfoRecord", b, SwitchInfoRecordSize)
	}
	si, _ := ParseSwitchInfo(b[4:])
	return SwitchInfoRecord{LID: be.Uint16(b), Info: si}, nil
}

// Encode writes x into the first SwitchInfoRecordSize bytes of b.
func (x *SwitchInfoRecord) Encode(b []byte) {
	b = b[:SwitchInfoRecordSize]
	be.PutUint16(b, x.LID)
	b[2], b[3] = 0, 0
	x.Info.Encode(b[4:])
}

// ---- LinkRecord ----

// LinkRecordSize is the size of a LinkRecord.
const LinkRecordSize = 8

// Component mask bits of LinkRecord.
const (
	LinkRecCompFromLID  = 1 << 0
	LinkRecCompFromPort = 1 << 1
	LinkRecCompToPort   = 1 << 2
	LinkRecCompToLID    = 1 << 3
)

// LinkRecordComponents lays out LinkRecord's components.
var LinkRecordComponents = []Component{
	comp(0, "FromLID", 0, 0, 16), comp(1, "FromPort", 2, 0, 8),
	comp(2, "ToPort", 3, 0, 8), comp(3, "ToLID", 4, 0, 16),
}

// LinkRecord is one direction of a link: from a port of the node with
// FromLID to a port of the node with ToLID.
type LinkRecord struct {
	FromLID  uint16
	FromPort uint8
	ToPort   uint8
	ToLID    uint16
}

// ParseLinkRecord decodes a LinkRecord from the first LinkRecordSize bytes
// of b.
func ParseLinkRecord(b []byte) (LinkRecord, error) {
	if len(b) < LinkRecordSize {
		return LinkRecord{}, truncated("LinkRecord", b, LinkRecordSize)
	}
	return LinkRecord{FromLID: be.Uint16(b), FromPort: b[2], ToPort: b[3], ToLID: be.Uint16(b[4:])}, nil
}

// Encode writes x into the first LinkRecordSize bytes of b.
func (x *LinkRecord) Encode(b []byte) {
	b = b[:LinkRecordSize]
	be.PutUint16(b, x.FromLID)
	b[2], b[3] = x.FromPort, x.ToPort
	be.PutUint16(b[4:], x.ToLID)
	b[6], b[7] = 0, 0
}

// ---- ServiceRecord ----

// ServiceRecordSize is the size of a ServiceRecord.
const ServiceRecordSize = 176

// Component mask bits of ServiceRecord; the service data fields follow
// from bit 7 (ServiceRecordComponents).
const (
	ServiceRecCompID     = 1 << 0
	ServiceRecCompGID    = 1 << 1
	ServiceRecCompPKey   = 1 << 2
	ServiceRecCompLease  = 1 << 4
	ServiceRecCompKey    = 1 << 5
	ServiceRecCompName   = 1 << 6
	ServiceRecCompData8  = 1 << 7  // ServiceData8[0]; [i] is bit 7+i
	ServiceRecCompData16 = 1 << 23 // ServiceData16[0]; [i] is bit 23+i
	ServiceRecCompData32 = 1 << 31 // ServiceData32[0]; [i] is bit 31+i
	ServiceRecCompData64 = 1 << 35 // ServiceData64[0]; [i] is bit 35+i
)

// ServiceLeaseInfinite is the ServiceLease of a registration that never
// expires.
const ServiceLeaseInfinite = 0xFFFFFFFF

// ServiceRecordComponents lays out ServiceRecord's components.
var ServiceRecordComponents = func() []Component {
	c := []Component{
		comp(0, "ServiceID", 0, 0, 64), comp(1, "ServiceGID", 8, 0, 128),
		comp(2, "ServicePKey", 24, 0, 16), comp(3, "Reserved", 26, 0, 16),
		comp(4, "ServiceLease", 28, 0, 32), comp(5, "ServiceKey", 32, 0, 128),
		comp(6, "ServiceName", 48, 0, 512),
	}
	for i := range 16 {
		c = append(c, comp(uint8(7+i), "ServiceData8", 112+i, 0, 8))
	}
	for i := range 8 {
		c = append(c, comp(uint8(23+i), "ServiceData16", 128+2*i, 0, 16))
	}
	for i := range 4 {
		c = append(c, comp(uint8(31+i), "ServiceData32", 144+4*i, 0, 32))
	}
	for i := range 2 {
		c = append(c, comp(uint8(35+i), "ServiceData64", 160+8*i, 0, 64))
	}
	return c
}()

// ServiceRecord is a service a port registers with the SA, for clients to
// find by ID or name.
type ServiceRecord struct {
	ID     uint64
	GID    GID
	PKey   uint16
	Lease  uint32 // seconds; ServiceLeaseInfinite: never expires
	Key    [16]byte
	Name   string // up to 64 bytes, NUL-padded
	Data8  [16]uint8
	Data16 [8]uint16
	Data32 [4]uint32
	Data64 [2]uint64
}

// ParseServiceRecord decodes a ServiceRecord from the first
// ServiceRecordSize bytes of b.
func ParseServiceRecord(b []byte) (ServiceRecord, error) {
	var x ServiceRecord
	if len(b) < ServiceRecordSize {
		return x, truncated("ServiceRecord", b, ServiceRecordSize)
	}
	x.ID = be.Uint64(b)
	copy(x.GID[:], b[8:24])
	x.PKey = be.Uint16(b[24:])
	x.Lease = be.Uint32(b[28:])
	copy(x.Key[:], b[32:48])
	nd, _ := ParseNodeDescription(b[48:])
	x.Name = nd.Description
	copy(x.Data8[:], b[112:128])
	for i := range x.Data16 {
		x.Data16[i] = be.Uint16(b[128+2*i:])
	}
	for i := range x.Data32 {
		x.Data32[i] = be.Uint32(b[144+4*i:])
	}
	for i := range x.Data64 {
		x.Data64[i] = be.Uint64(b[160+8*i:])
	}
	return x, nil
}

// Encode writes x into the first ServiceRecordSize bytes of b; a Name
// longer than 64 bytes is cut.
func (x *ServiceRecord) Encode(b []byte) {
	b = b[:ServiceRecordSize]
	be.PutUint64(b, x.ID)
	copy(b[8:24], x.GID[:])
	be.PutUint16(b[24:], x.PKey)
	b[26], b[27] = 0, 0
	be.PutUint32(b[28:], x.Lease)
	copy(b[32:48], x.Key[:])
	nd := NodeDescription{Description: x.Name}
	nd.Encode(b[48:])
	copy(b[112:128], x.Data8[:])
	for i, v := range x.Data16 {
		be.PutUint16(b[128+2*i:], v)
	}
	for i, v := range x.Data32 {
		be.PutUint32(b[144+4*i:], v)
	}
	for i, v := range x.Data64 {
		be.PutUint64(b[160+8*i:], v)
	}
}

// ---- PathRecord ----

// PathRecordSize is the size of a PathRecord.
const PathRecordSize = 64

// Component mask bits of PathRecord.
const (
	PathRecCompServiceIDMSB    = 1 << 0
	PathRecCompServiceIDLSB    = 1 << 1
	PathRecCompServiceID       = PathRecCompServiceIDMSB | PathRecCompServiceIDLSB
	PathRecCompDGID            = 1 << 2
	PathRecCompSGID            = 1 << 3
	PathRecCompDLID            = 1 << 4
	PathRecCompSLID            = 1 << 5
	PathRecCompRawTraffic      = 1 << 6
	PathRecCompFlowLabel       = 1 << 8
	PathRecCompHopLimit        = 1 << 9
	PathRecCompTClass          = 1 << 10
	PathRecCompReversible      = 1 << 11
	PathRecCompNumbPath        = 1 << 12
	PathRecCompPKey            = 1 << 13
	PathRecCompQoSClass        = 1 << 14
	PathRecCompSL              = 1 << 15
	PathRecCompMTUSelector     = 1 << 16
	PathRecCompMTU             = 1 << 17
	PathRecCompRateSelector    = 1 << 18
	PathRecCompRate            = 1 << 19
	PathRecCompLifeSelector    = 1 << 20
	PathRecCompPacketLifeTime  = 1 << 21
	PathRecCompPreference      = 1 << 22
	pathRecReversibleBit       = 0x80
	pathRecNumbPathMask        = 0x7F
	pathRecSelectorShift       = 6
	pathRecValueMask           = 0x3F
	pathRecFlowLabelMask       = 0xFFFFF
	pathRecRawTrafficBit       = 1 << 31
	pathRecQoSClassShift       = 4
	pathRecServiceIDWordLength = 32
)

// Selectors of PathRecord's and MCMemberRecord's MTU, Rate and
// PacketLifeTime in a query.
const (
	SelectGreater = 0 // greater than the value
	SelectLess    = 1 // less than the value
	SelectExactly = 2 // exactly the value
	SelectBest    = 3 // the largest available (MTU, Rate), the smallest (PacketLifeTime)
)

// PathRecordComponents lays out PathRecord's components.
var PathRecordComponents = []Component{
	comp(0, "ServiceID(MSB)", 0, 0, pathRecServiceIDWordLength),
	comp(1, "ServiceID(LSB)", 4, 0, pathRecServiceIDWordLength),
	comp(2, "DGID", 8, 0, 128), comp(3, "SGID", 24, 0, 128),
	comp(4, "DLID", 40, 0, 16), comp(5, "SLID", 42, 0, 16),
	comp(6, "RawTraffic", 44, 7, 1), comp(7, "Reserved", 44, 4, 3),
	{8, "FlowLabel", 44*8 + 4, 20}, comp(9, "HopLimit", 47, 0, 8),
	comp(10, "TClass", 48, 0, 8), comp(11, "Reversible", 49, 7, 1),
	comp(12, "NumbPath", 49, 0, 7), comp(13, "PKey", 50, 0, 16),
	{14, "QoSClass", 52 * 8, 12}, comp(15, "SL", 53, 0, 4),
	comp(16, "MTUSelector", 54, 6, 2), comp(17, "MTU", 54, 0, 6),
	comp(18, "RateSelector", 55, 6, 2), comp(19, "Rate", 55, 0, 6),
	comp(20, "PacketLifeTimeSelector", 56, 6, 2), comp(21, "PacketLifeTime", 56, 0, 6),
	comp(22, "Preference", 57, 0, 8),
}

// PathRecord is a path between two ports: the addressing (GIDs, LIDs, SL,
// P_Key) and the properties (MTU, rate, packet lifetime) to use on it.
type PathRecord struct {
	ServiceID  uint64
	DGID, SGID GID
	DLID, SLID uint16
	RawTraffic bool
	FlowLabel  uint32 // 20 bits
	HopLimit   uint8
	TClass     uint8
	Reversible bool
	NumbPath   uint8  // 7 bits: in a query, how many paths at most
	PKey       uint16 //
	QoSClass   uint16 // 12 bits
	SL         uint8  // 4 bits
	// MTUSelector, RateSelector and LifeSelector are 2 bits (Select*);
	// MTU (MTU*), Rate (Rate*) and PacketLifeTime 6 bits.
	MTUSelector    uint8
	MTU            uint8
	RateSelector   uint8
	Rate           uint8
	LifeSelector   uint8
	PacketLifeTime uint8
	Preference     uint8
}

// ParsePathRecord decodes a PathRecord from the first PathRecordSize bytes
// of b.
func ParsePathRecord(b []byte) (PathRecord, error) {
	var x PathRecord
	if len(b) < PathRecordSize {
		return x, truncated("PathRecord", b, PathRecordSize)
	}
	x.ServiceID = be.Uint64(b)
	copy(x.DGID[:], b[8:24])
	copy(x.SGID[:], b[24:40])
	x.DLID, x.SLID = be.Uint16(b[40:]), be.Uint16(b[42:])
	w := be.Uint32(b[44:])
	x.RawTraffic, x.FlowLabel, x.HopLimit = w&pathRecRawTrafficBit != 0, w>>8&pathRecFlowLabelMask, uint8(w)
	x.TClass = b[48]
	x.Reversible, x.NumbPath = b[49]&pathRecReversibleBit != 0, b[49]&pathRecNumbPathMask
	x.PKey = be.Uint16(b[50:])
	q := be.Uint16(b[52:])
	x.QoSClass, x.SL = q>>pathRecQoSClassShift, uint8(q&0xF)
	x.MTUSelector, x.MTU = b[54]>>pathRecSelectorShift, b[54]&pathRecValueMask
	x.RateSelector, x.Rate = b[55]>>pathRecSelectorShift, b[55]&pathRecValueMask
	x.LifeSelector, x.PacketLifeTime = b[56]>>pathRecSelectorShift, b[56]&pathRecValueMask
	x.Preference = b[57]
	return x, nil
}

func selector(sel, v uint8) byte { return sel<<pathRecSelectorShift | v&pathRecValueMask }

// Encode writes x into the first PathRecordSize bytes of b, with the
// reserved bits zero.
func (x *PathRecord) Encode(b []byte) {
	b = b[:PathRecordSize]
	clear(b)
	be.PutUint64(b, x.ServiceID)
	copy(b[8:24], x.DGID[:])
	copy(b[24:40], x.SGID[:])
	be.PutUint16(b[40:], x.DLID)
	be.PutUint16(b[42:], x.SLID)
	w := (x.FlowLabel&pathRecFlowLabelMask)<<8 | uint32(x.HopLimit)
	if x.RawTraffic {
		w |= pathRecRawTrafficBit
	}
	be.PutUint32(b[44:], w)
	b[48] = x.TClass
	b[49] = x.NumbPath & pathRecNumbPathMask
	if x.Reversible {
		b[49] |= pathRecReversibleBit
	}
	be.PutUint16(b[50:], x.PKey)
	be.PutUint16(b[52:], (x.QoSClass&0xFFF)<<pathRecQoSClassShift|uint16(x.SL&0xF))
	b[54] = selector(x.MTUSelector, x.MTU)
	b[55] = selector(x.RateSelector, x.Rate)
	b[56] = selector(x.LifeSelector, x.PacketLifeTime)
	b[57] = x.Preference
}

// Static rates of PathRecord.Rate and MCMemberRecord.Rate (IBTA volume 1
// table 225): the link's data rate.
const (
	Rate2_5Gbps = 2
	Rate10Gbps  = 3
	Rate30Gbps  = 4
	Rate5Gbps   = 5
	Rate20Gbps  = 6
	Rate40Gbps  = 7
	Rate60Gbps  = 8
	Rate80Gbps  = 9
	Rate120Gbps = 10
	Rate14Gbps  = 11
	Rate56Gbps  = 12
	Rate112Gbps = 13
	Rate168Gbps = 14
	Rate25Gbps  = 15
	Rate100Gbps = 16
	Rate200Gbps = 17
	Rate300Gbps = 18
)

// rateMbps is the data rate of each Rate code, in Mb/s.
var rateMbps = map[uint8]int{
	Rate2_5Gbps: 2500, Rate10Gbps: 10000, Rate30Gbps: 30000, Rate5Gbps: 5000,
	Rate20Gbps: 20000, Rate40Gbps: 40000, Rate60Gbps: 60000, Rate80Gbps: 80000,
	Rate120Gbps: 120000, Rate14Gbps: 14000, Rate56Gbps: 56000, Rate112Gbps: 112000,
	Rate168Gbps: 168000, Rate25Gbps: 25000, Rate100Gbps: 100000, Rate200Gbps: 200000,
	Rate300Gbps: 300000,
}

// RateMbps returns the data rate of a Rate code in Mb/s, or 0 if the code
// is unknown.
func RateMbps(rate uint8) int { return rateMbps[rate] }

// LinkRate returns the Rate code of a link from PortInfo's LinkWidthActive
// and LinkSpeedActive (LinkSpeedExtActive when nonzero: 1 FDR, 2 EDR), or 0
// if no code has that rate.
func LinkRate(widthActive, speedActive, speedExtActive uint8) uint8 {
	lanes := map[uint8]int{LinkWidth1X: 1, LinkWidth2X: 2, LinkWidth4X: 4, LinkWidth8X: 8, LinkWidth12X: 12}[widthActive]
	var lane int // Mb/s
	switch {
	case speedExtActive == 1:
		lane = 14000
	case speedExtActive == 2:
		lane = 25000
	case speedActive == LinkSpeedSDR:
		lane = 2500
	case speedActive == LinkSpeedDDR:
		lane = 5000
	case speedActive == LinkSpeedQDR:
		lane = 10000
	}
	want := lanes * lane
	for code, r := range rateMbps {
		if r == want && want != 0 {
			return code
		}
	}
	return 0
}

// ---- MCMemberRecord ----

// MCMemberRecordSize is the size of an MCMemberRecord.
const MCMemberRecordSize = 52

// Component mask bits of MCMemberRecord.
const (
	MCMemberRecCompMGID         = 1 << 0
	MCMemberRecCompPortGID      = 1 << 1
	MCMemberRecCompQKey         = 1 << 2
	MCMemberRecCompMLID         = 1 << 3
	MCMemberRecCompMTUSelector  = 1 << 4
	MCMemberRecCompMTU          = 1 << 5
	MCMemberRecCompTClass       = 1 << 6
	MCMemberRecCompPKey         = 1 << 7
	MCMemberRecCompRateSelector = 1 << 8
	MCMemberRecCompRate         = 1 << 9
	MCMemberRecCompLifeSelector = 1 << 10
	MCMemberRecCompLife         = 1 << 11
	MCMemberRecCompSL           = 1 << 12
	MCMemberRecCompFlowLabel    = 1 << 13
	MCMemberRecCompHopLimit     = 1 << 14
	MCMemberRecCompScope        = 1 << 15
	MCMemberRecCompJoinState    = 1 << 16
	MCMemberRecCompProxyJoin    = 1 << 17
)

// JoinState bits of MCMemberRecord.
const (
	JoinFullMember    = 1 << 0
	JoinNonMember     = 1 << 1
	JoinSendOnlyNon   = 1 << 2
	JoinSendOnlyFull  = 1 << 3
	joinStateAllBits  = 0xF
	mcmProxyJoinBit   = 0x80
	mcmFlowLabelShift = 8
)

// MCMemberRecordComponents lays out MCMemberRecord's components.
var MCMemberRecordComponents = []Component{
	comp(0, "MGID", 0, 0, 128), comp(1, "PortGID", 16, 0, 128),
	comp(2, "QKey", 32, 0, 32), comp(3, "MLID", 36, 0, 16),
	comp(4, "MTUSelector", 38, 6, 2), comp(5, "MTU", 38, 0, 6),
	comp(6, "TClass", 39, 0, 8), comp(7, "PKey", 40, 0, 16),
	comp(8, "RateSelector", 42, 6, 2), comp(9, "Rate", 42, 0, 6),
	comp(10, "PacketLifeTimeSelector", 43, 6, 2), comp(11, "PacketLifeTime", 43, 0, 6),
	comp(12, "SL", 44, 4, 4), {13, "FlowLabel", 44*8 + 4, 20}, comp(14, "HopLimit", 47, 0, 8),
	comp(15, "Scope", 48, 4, 4), comp(16, "JoinState", 48, 0, 4),
	comp(17, "ProxyJoin", 49, 7, 1),
}

// MCMemberRecord is one port's membership of a multicast group, or, in a
// join's answer, the group's parameters.
type MCMemberRecord struct {
	MGID, PortGID  GID
	QKey           uint32
	MLID           uint16
	MTUSelector    uint8 // 2 bits
	MTU            uint8 // 6 bits
	TClass         uint8
	PKey           uint16
	RateSelector   uint8 // 2 bits
	Rate           uint8 // 6 bits
	LifeSelector   uint8 // 2 bits
	PacketLifeTime uint8 // 6 bits
	SL             uint8 // 4 bits
	FlowLabel      uint32
	HopLimit       uint8
	Scope          uint8 // 4 bits
	JoinState      uint8 // 4 bits: Join*
	ProxyJoin      bool
}

// ParseMCMemberRecord decodes an MCMemberRecord from the first
// MCMemberRecordSize bytes of b.
func ParseMCMemberRecord(b []byte) (MCMemberRecord, error) {
	var x MCMemberRecord
	if len(b) < MCMemberRecordSize {
		return x, truncated("MCMemberRecord", b, MCMemberRecordSize)
	}
	copy(x.MGID[:], b[0:16])
	copy(x.PortGID[:], b[16:32])
	x.QKey, x.MLID = be.Uint32(b[32:]), be.Uint16(b[36:])
	x.MTUSelector, x.MTU = b[38]>>pathRecSelectorShift, b[38]&pathRecValueMask
	x.TClass, x.PKey = b[39], be.Uint16(b[40:])
	x.RateSelector, x.Rate = b[42]>>pathRecSelectorShift, b[42]&pathRecValueMask
	x.LifeSelector, x.PacketLifeTime = b[43]>>pathRecSelectorShift, b[43]&pathRecValueMask
	w := be.Uint32(b[44:])
	x.SL, x.FlowLabel, x.HopLimit = uint8(w>>28), w>>mcmFlowLabelShift&pathRecFlowLabelMask, uint8(w)
	x.Scope, x.JoinState = b[48]>>4, b[48]&joinStateAllBits
	x.ProxyJoin = b[49]&mcmProxyJoinBit != 0
	return x, nil
}

// Encode writes x into the first MCMemberRecordSize bytes of b, with the
// reserved bits zero.
func (x *MCMemberRecord) Encode(b []byte) {
	b = b[:MCMemberRecordSize]
	clear(b)
	copy(b[0:16], x.MGID[:])
	copy(b[16:32], x.PortGID[:])
	be.PutUint32(b[32:], x.QKey)
	be.PutUint16(b[36:], x.MLID)
	b[38], b[39] = selector(x.MTUSelector, x.MTU), x.TClass
	be.PutUint16(b[40:], x.PKey)
	b[42], b[43] = selector(x.RateSelector, x.Rate), selector(x.LifeSelector, x.PacketLifeTime)
	be.PutUint32(b[44:], uint32(x.SL&0xF)<<28|(x.FlowLabel&pathRecFlowLabelMask)<<mcmFlowLabelShift|uint32(x.HopLimit))
	b[48] = x.Scope<<4 | x.JoinState&joinStateAllBits
	if x.ProxyJoin {
		b[49] = mcmProxyJoinBit
	}
}
