// Subnet management: the SM classes, the methods and attribute IDs they use,
// and the codecs of the node attributes NodeInfo, NodeDescription, PortInfo
// and SwitchInfo (IBTA volume 1 section 14.2.5). The table attributes are in
// smpattr_tables.go, Notice in smpattr_notice.go, the performance management
// class in pma.go.

package mad

import (
	"bytes"
	"fmt"
)

// Management classes of subnet management, subnet administration and
// performance management.
const (
	ClassSubnLID      Class = 0x01 // LID-routed SMPs
	ClassSubnAdm      Class = 0x03 // subnet administration (SA)
	ClassPerf         Class = 0x04 // performance management (PMA)
	ClassSubnDirected Class = 0x81 // directed-route SMPs
)

// Methods of the SM, SA and PMA classes besides Get, Set and GetResp.
const (
	MethodTrap        Method = 0x05 // unsolicited notice to the SM
	MethodReport      Method = 0x06 // SA forwards a notice to a subscriber
	MethodTrapRepress Method = 0x07 // SM tells a trap's sender to stop repeating it
	MethodReportResp  Method = 0x86 // response to Report
)

// SM attribute IDs (IBTA volume 1 table 145). Their values clash with the CM
// ones, so AttributeID.String does not know them; use AttrName.
const (
	SMAttrNotice          AttributeID = 0x0002
	SMAttrNodeDescription AttributeID = 0x0010
	SMAttrNodeInfo        AttributeID = 0x0011
	SMAttrSwitchInfo      AttributeID = 0x0012
	SMAttrGUIDInfo        AttributeID = 0x0014
	SMAttrPortInfo        AttributeID = 0x0015
	SMAttrPKeyTable       AttributeID = 0x0016
	SMAttrSLToVLTable     AttributeID = 0x0017
	SMAttrVLArbTable      AttributeID = 0x0018
	SMAttrLinearFT        AttributeID = 0x0019
	SMAttrMulticastFT     AttributeID = 0x001B
	SMAttrSMInfo          AttributeID = 0x0020
)

var smAttrNames = map[AttributeID]string{
	AttrClassPortInfo:     "ClassPortInfo",
	SMAttrNotice:          "Notice",
	SMAttrNodeDescription: "NodeDescription",
	SMAttrNodeInfo:        "NodeInfo",
	SMAttrSwitchInfo:      "SwitchInfo",
	SMAttrGUIDInfo:        "GUIDInfo",
	SMAttrPortInfo:        "PortInfo",
	SMAttrPKeyTable:       "P_KeyTable",
	SMAttrSLToVLTable:     "SLtoVLMappingTable",
	SMAttrVLArbTable:      "VLArbitrationTable",
	SMAttrLinearFT:        "LinearForwardingTable",
	SMAttrMulticastFT:     "MulticastForwardingTable",
	SMAttrSMInfo:          "SMInfo",
}

// AttrName returns the name of attribute a in class c, such as "PortInfo"
// for SMAttrPortInfo in ClassSubnLID, or the number if the class or the
// attribute is unknown here.
func AttrName(c Class, a AttributeID) string {
	var names map[AttributeID]string
	switch c {
	case ClassCM:
		names = attrNames
	case ClassSubnLID, ClassSubnDirected:
		names = smAttrNames
	case ClassPerf:
		names = perfAttrNames
	case ClassSubnAdm:
		names = saAttrNames
	}
	if s, ok := names[a]; ok {
		return s
	}
	return fmt.Sprintf("AttributeID(0x%04x)", uint16(a))
}

// MAD status codes (IBTA volume 1 table 106), common to every class. The
// top bit of a directed-route SMP's status is its direction bit, not part
// of the status.
const (
	StatusOK                  uint16 = 0x0000
	StatusBusy                uint16 = 0x0001 // temporarily busy, MAD discarded
	StatusRedirect            uint16 = 0x0002 // redirection required
	StatusBadVersion          uint16 = 0x0004 // class or base version not supported
	StatusMethodUnsupported   uint16 = 0x0008 // method not supported
	StatusMethodAttrInvalid   uint16 = 0x000C // method/attribute combination not supported
	StatusInvalidAttrOrModify uint16 = 0x001C // an attribute field or the modifier is invalid
)

// Node types of NodeInfo; also the producer types of generic notices.
const (
	NodeTypeCA           = 1
	NodeTypeSwitch       = 2
	NodeTypeRouter       = 3
	NodeTypeClassManager = 4 // a notice's producer only
)

// Logical port states of PortInfo.PortState. NoChange is what a Set writes
// to leave the state alone.
const (
	PortStateNoChange = 0
	PortStateDown     = 1
	PortStateInit     = 2
	PortStateArmed    = 3
	PortStateActive   = 4
)

// Physical port states of PortInfo.PortPhysicalState and
// LinkDownDefaultState (which only takes NoChange, Sleep and Polling).
const (
	PhysStateNoChange     = 0
	PhysStateSleep        = 1
	PhysStatePolling      = 2
	PhysStateDisabled     = 3
	PhysStateTraining     = 4 // PortConfigurationTraining
	PhysStateLinkUp       = 5
	PhysStateErrorRecover = 6 // LinkErrorRecovery
	PhysStatePhyTest      = 7
)

// Bits of PortInfo.CapabilityMask that the fabric and the SM look at.
const (
	PortCapIsSM                       uint32 = 1 << 1
	PortCapIsNoticeSupported          uint32 = 1 << 2
	PortCapIsTrapSupported            uint32 = 1 << 3
	PortCapIsAutomaticMigration       uint32 = 1 << 5
	PortCapIsSLMappingSupported       uint32 = 1 << 6
	PortCapIsSMDisabled               uint32 = 1 << 10
	PortCapIsSystemImageGUIDSupported uint32 = 1 << 11
	PortCapIsExtendedSpeedsSupported  uint32 = 1 << 14
	PortCapIsCapabilityMask2Supported uint32 = 1 << 15
	PortCapIsCMSupported              uint32 = 1 << 16
	PortCapIsVendorClassSupported     uint32 = 1 << 20
	PortCapIsCapabilityMaskNotice     uint32 = 1 << 22
	PortCapIsLinkRoundTripLatency     uint32 = 1 << 24
	PortCapIsClientReregistration     uint32 = 1 << 25
)

// Encoded MTUs of PortInfo's NeighborMTU and MTUCap (as in verbs).
const (
	MTU256  = 1
	MTU512  = 2
	MTU1024 = 3
	MTU2048 = 4
	MTU4096 = 5
)

// Link widths, as bits of PortInfo's LinkWidth fields.
const (
	LinkWidth1X  = 1
	LinkWidth4X  = 2
	LinkWidth8X  = 4
	LinkWidth12X = 8
	LinkWidth2X  = 16
)

// Link speeds, as bits of PortInfo's LinkSpeed fields (LinkSpeedExt fields
// have their own code: 1 FDR, 2 EDR, 4 HDR, 8 NDR).
const (
	LinkSpeedSDR = 1 // 2.5 Gb/s
	LinkSpeedDDR = 2 // 5 Gb/s
	LinkSpeedQDR = 4 // 10 Gb/s
)

// truncated returns the error of a parser given fewer than n bytes.
func truncated(what string, b []byte, n int) error {
	return fmt.Errorf("%w: %s is %d bytes, got %d", ErrTruncated, what, n, len(b))
}

// NodeInfoSize is the size of NodeInfo's fields; the attribute fills the
// rest of an SMP's 64-byte data with zeros.
const NodeInfoSize = 40

// NodeInfo is the NodeInfo attribute (IBTA volume 1 section 14.2.5.3): what
// a node is. LocalPortNum is the port the SMP arrived on.
type NodeInfo struct {
	BaseVersion     uint8
	ClassVersion    uint8
	NodeType        uint8 // NodeTypeCA, NodeTypeSwitch or NodeTypeRouter
	NumPorts        uint8 // physical ports
	SystemImageGUID uint64
	NodeGUID        uint64
	PortGUID        uint64 // of the port the SMP arrived on (switches: port 0's)
	PartitionCap    uint16 // P_Key table entries per port
	DeviceID        uint16
	Revision        uint32
	LocalPortNum    uint8
	VendorID        uint32 // 24 bits
}

// ParseNodeInfo decodes a NodeInfo attribute from the first NodeInfoSize
// bytes of b.
func ParseNodeInfo(b []byte) (NodeInfo, error) {
	if len(b) < NodeInfoSize {
		return NodeInfo{}, truncated("NodeInfo", b, NodeInfoSize)
	}
	return NodeInfo{
		BaseVersion:     b[0],
		ClassVersion:    b[1],
		NodeType:        b[2],
		NumPorts:        b[3],
		SystemImageGUID: be.Uint64(b[4:]),
		NodeGUID:        be.Uint64(b[12:]),
		PortGUID:        be.Uint64(b[20:]),
		PartitionCap:    be.Uint16(b[28:]),
		DeviceID:        be.Uint16(b[30:]),
		Revision:        be.Uint32(b[32:]),
		LocalPortNum:    b[36],
		VendorID:        get24(b[37:]),
	}, nil
}

// Encode writes x into the first NodeInfoSize bytes of b.
func (x *NodeInfo) Encode(b []byte) {
	b = b[:NodeInfoSize]
	b[0], b[1], b[2], b[3] = x.BaseVersion, x.ClassVersion, x.NodeType, x.NumPorts
	be.PutUint64(b[4:], x.SystemImageGUID)
	be.PutUint64(b[12:], x.NodeGUID)
	be.PutUint64(b[20:], x.PortGUID)
	be.PutUint16(b[28:], x.PartitionCap)
	be.PutUint16(b[30:], x.DeviceID)
	be.PutUint32(b[32:], x.Revision)
	b[36] = x.LocalPortNum
	put24(b[37:], x.VendorID)
}

// NodeDescriptionSize is the size of the NodeDescription attribute.
const NodeDescriptionSize = 64

// NodeDescription is the NodeDescription attribute (section 14.2.5.2): a
// node's name as text, such as "Hca1" or "ibsw1 HCA-1".
type NodeDescription struct {
	// Description is the text up to its first NUL byte; Encode keeps at
	// most NodeDescriptionSize bytes of it.
	Description string
}

// ParseNodeDescription decodes a NodeDescription from the first
// NodeDescriptionSize bytes of b.
func ParseNodeDescription(b []byte) (NodeDescription, error) {
	if len(b) < NodeDescriptionSize {
		return NodeDescription{}, truncated("NodeDescription", b, NodeDescriptionSize)
	}
	b = b[:NodeDescriptionSize]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return NodeDescription{Description: string(b)}, nil
}

// Encode writes x into the first NodeDescriptionSize bytes of b, padded
// with NUL bytes.
func (x *NodeDescription) Encode(b []byte) {
	b = b[:NodeDescriptionSize]
	clear(b[copy(b, x.Description):])
}

// PortInfoSize is the size of the PortInfo attribute.
const PortInfoSize = 64

// PortInfo is the PortInfo attribute (section 14.2.5.6): the state and
// configuration of one port, which the SM reads and sets. Fields narrower
// than their type keep their low bits on Encode; the comments give widths.
type PortInfo struct {
	MKey                         uint64
	GIDPrefix                    uint64
	LID                          uint16 // base LID
	MasterSMLID                  uint16
	CapabilityMask               uint32 // PortCap* bits
	DiagCode                     uint16
	MKeyLeasePeriod              uint16
	LocalPortNum                 uint8
	LinkWidthEnabled             uint8
	LinkWidthSupported           uint8
	LinkWidthActive              uint8
	LinkSpeedSupported           uint8 // 4 bits
	PortState                    uint8 // 4 bits, PortState*
	PortPhysicalState            uint8 // 4 bits, PhysState*
	LinkDownDefaultState         uint8 // 4 bits
	MKeyProtectBits              uint8 // 2 bits
	LMC                          uint8 // 3 bits
	LinkSpeedActive              uint8 // 4 bits
	LinkSpeedEnabled             uint8 // 4 bits
	NeighborMTU                  uint8 // 4 bits, MTU*
	MasterSMSL                   uint8 // 4 bits
	VLCap                        uint8 // 4 bits: 1 VL0, 2 VL0-1, 3 VL0-3, 4 VL0-7, 5 VL0-14
	InitType                     uint8 // 4 bits
	VLHighLimit                  uint8
	VLArbitrationHighCap         uint8
	VLArbitrationLowCap          uint8
	InitTypeReply                uint8 // 4 bits
	MTUCap                       uint8 // 4 bits, MTU*
	VLStallCount                 uint8 // 3 bits
	HOQLife                      uint8 // 5 bits
	OperationalVLs               uint8 // 4 bits, coded as VLCap
	PartitionEnforcementInbound  bool
	PartitionEnforcementOutbound bool
	FilterRawInbound             bool
	FilterRawOutbound            bool
	MKeyViolations               uint16
	PKeyViolations               uint16
	QKeyViolations               uint16
	GUIDCap                      uint8
	ClientReregister             bool
	// MulticastPKeyTrapSuppressionEnabled is 2 bits.
	MulticastPKeyTrapSuppressionEnabled uint8
	SubnetTimeOut                       uint8 // 5 bits
	RespTimeValue                       uint8 // 5 bits
	LocalPhyErrors                      uint8 // 4 bits
	OverrunErrors                       uint8 // 4 bits
	MaxCreditHint                       uint16
	LinkSpeedExtActive2                 uint8  // 2 bits (IBTA 1.7, XDR)
	LinkSpeedExtSupported2              uint8  // 2 bits
	LinkSpeedExtEnabled2                uint8  // 3 bits
	LinkRoundTripLatency                uint32 // 24 bits
	CapabilityMask2                     uint16
	LinkSpeedExtActive                  uint8 // 4 bits
	LinkSpeedExtSupported               uint8 // 4 bits
	LinkSpeedExtEnabled                 uint8 // 5 bits
}

// ParsePortInfo decodes a PortInfo attribute from the first PortInfoSize
// bytes of b.
func ParsePortInfo(b []byte) (PortInfo, error) {
	if len(b) < PortInfoSize {
		return PortInfo{}, truncated("PortInfo", b, PortInfoSize)
	}
	return PortInfo{
		MKey:                                be.Uint64(b[0:]),
		GIDPrefix:                           be.Uint64(b[8:]),
		LID:                                 be.Uint16(b[16:]),
		MasterSMLID:                         be.Uint16(b[18:]),
		CapabilityMask:                      be.Uint32(b[20:]),
		DiagCode:                            be.Uint16(b[24:]),
		MKeyLeasePeriod:                     be.Uint16(b[26:]),
		LocalPortNum:                        b[28],
		LinkWidthEnabled:                    b[29],
		LinkWidthSupported:                  b[30],
		LinkWidthActive:                     b[31],
		LinkSpeedSupported:                  getBits(b[32], 4, 4),
		PortState:                           getBits(b[32], 0, 4),
		PortPhysicalState:                   getBits(b[33], 4, 4),
		LinkDownDefaultState:                getBits(b[33], 0, 4),
		MKeyProtectBits:                     getBits(b[34], 6, 2),
		LMC:                                 getBits(b[34], 0, 3),
		LinkSpeedActive:                     getBits(b[35], 4, 4),
		LinkSpeedEnabled:                    getBits(b[35], 0, 4),
		NeighborMTU:                         getBits(b[36], 4, 4),
		MasterSMSL:                          getBits(b[36], 0, 4),
		VLCap:                               getBits(b[37], 4, 4),
		InitType:                            getBits(b[37], 0, 4),
		VLHighLimit:                         b[38],
		VLArbitrationHighCap:                b[39],
		VLArbitrationLowCap:                 b[40],
		InitTypeReply:                       getBits(b[41], 4, 4),
		MTUCap:                              getBits(b[41], 0, 4),
		VLStallCount:                        getBits(b[42], 5, 3),
		HOQLife:                             getBits(b[42], 0, 5),
		OperationalVLs:                      getBits(b[43], 4, 4),
		PartitionEnforcementInbound:         getBit(b[43], 3),
		PartitionEnforcementOutbound:        getBit(b[43], 2),
		FilterRawInbound:                    getBit(b[43], 1),
		FilterRawOutbound:                   getBit(b[43], 0),
		MKeyViolations:                      be.Uint16(b[44:]),
		PKeyViolations:                      be.Uint16(b[46:]),
		QKeyViolations:                      be.Uint16(b[48:]),
		GUIDCap:                             b[50],
		ClientReregister:                    getBit(b[51], 7),
		MulticastPKeyTrapSuppressionEnabled: getBits(b[51], 5, 2),
		SubnetTimeOut:                       getBits(b[51], 0, 5),
		RespTimeValue:                       getBits(b[52], 0, 5),
		LocalPhyErrors:                      getBits(b[53], 4, 4),
		OverrunErrors:                       getBits(b[53], 0, 4),
		MaxCreditHint:                       be.Uint16(b[54:]),
		LinkSpeedExtActive2:                 getBits(b[56], 5, 2),
		LinkSpeedExtSupported2:              getBits(b[56], 3, 2),
		LinkSpeedExtEnabled2:                getBits(b[56], 0, 3),
		LinkRoundTripLatency:                get24(b[57:]),
		CapabilityMask2:                     be.Uint16(b[60:]),
		LinkSpeedExtActive:                  getBits(b[62], 4, 4),
		LinkSpeedExtSupported:               getBits(b[62], 0, 4),
		LinkSpeedExtEnabled:                 getBits(b[63], 0, 5),
	}, nil
}

// Encode writes x into the first PortInfoSize bytes of b, with the reserved
// bits zero.
func (x *PortInfo) Encode(b []byte) {
	b = b[:PortInfoSize]
	clear(b)
	be.PutUint64(b[0:], x.MKey)
	be.PutUint64(b[8:], x.GIDPrefix)
	be.PutUint16(b[16:], x.LID)
	be.PutUint16(b[18:], x.MasterSMLID)
	be.PutUint32(b[20:], x.CapabilityMask)
	be.PutUint16(b[24:], x.DiagCode)
	be.PutUint16(b[26:], x.MKeyLeasePeriod)
	b[28], b[29], b[30], b[31] = x.LocalPortNum, x.LinkWidthEnabled, x.LinkWidthSupported, x.LinkWidthActive
	setBits(&b[32], 4, 4, x.LinkSpeedSupported)
	setBits(&b[32], 0, 4, x.PortState)
	setBits(&b[33], 4, 4, x.PortPhysicalState)
	setBits(&b[33], 0, 4, x.LinkDownDefaultState)
	setBits(&b[34], 6, 2, x.MKeyProtectBits)
	setBits(&b[34], 0, 3, x.LMC)
	setBits(&b[35], 4, 4, x.LinkSpeedActive)
	setBits(&b[35], 0, 4, x.LinkSpeedEnabled)
	setBits(&b[36], 4, 4, x.NeighborMTU)
	setBits(&b[36], 0, 4, x.MasterSMSL)
	setBits(&b[37], 4, 4, x.VLCap)
	setBits(&b[37], 0, 4, x.InitType)
	b[38], b[39], b[40] = x.VLHighLimit, x.VLArbitrationHighCap, x.VLArbitrationLowCap
	setBits(&b[41], 4, 4, x.InitTypeReply)
	setBits(&b[41], 0, 4, x.MTUCap)
	setBits(&b[42], 5, 3, x.VLStallCount)
	setBits(&b[42], 0, 5, x.HOQLife)
	setBits(&b[43], 4, 4, x.OperationalVLs)
	setBit(&b[43], 3, x.PartitionEnforcementInbound)
	setBit(&b[43], 2, x.PartitionEnforcementOutbound)
	setBit(&b[43], 1, x.FilterRawInbound)
	setBit(&b[43], 0, x.FilterRawOutbound)
	be.PutUint16(b[44:], x.MKeyViolations)
	be.PutUint16(b[46:], x.PKeyViolations)
	be.PutUint16(b[48:], x.QKeyViolations)
	b[50] = x.GUIDCap
	setBit(&b[51], 7, x.ClientReregister)
	setBits(&b[51], 5, 2, x.MulticastPKeyTrapSuppressionEnabled)
	setBits(&b[51], 0, 5, x.SubnetTimeOut)
	setBits(&b[52], 0, 5, x.RespTimeValue)
	setBits(&b[53], 4, 4, x.LocalPhyErrors)
	setBits(&b[53], 0, 4, x.OverrunErrors)
	be.PutUint16(b[54:], x.MaxCreditHint)
	setBits(&b[56], 5, 2, x.LinkSpeedExtActive2)
	setBits(&b[56], 3, 2, x.LinkSpeedExtSupported2)
	setBits(&b[56], 0, 3, x.LinkSpeedExtEnabled2)
	put24(b[57:], x.LinkRoundTripLatency)
	be.PutUint16(b[60:], x.CapabilityMask2)
	setBits(&b[62], 4, 4, x.LinkSpeedExtActive)
	setBits(&b[62], 0, 4, x.LinkSpeedExtSupported)
	setBits(&b[63], 0, 5, x.LinkSpeedExtEnabled)
}

// SwitchInfoSize is the size of SwitchInfo's fields; the rest of the SMP
// data is reserved.
const SwitchInfoSize = 20

// SwitchInfo is the SwitchInfo attribute (section 14.2.5.4): a switch's
// forwarding table sizes and switch-wide settings.
type SwitchInfo struct {
	LinearFDBCap                   uint16 // LFT entries the switch has
	RandomFDBCap                   uint16
	MulticastFDBCap                uint16
	LinearFDBTop                   uint16 // highest LID the LFT forwards
	DefaultPort                    uint8
	DefaultMulticastPrimaryPort    uint8
	DefaultMulticastNotPrimaryPort uint8
	LifeTimeValue                  uint8 // 5 bits
	PortStateChange                bool  // a port changed state; the SM clears it by writing 1
	// OptimizedSLtoVLMappingProgramming is 2 bits.
	OptimizedSLtoVLMappingProgramming uint8
	LIDsPerPort                       uint16
	PartitionEnforcementCap           uint16
	InboundEnforcementCap             bool
	OutboundEnforcementCap            bool
	FilterRawInboundCap               bool
	FilterRawOutboundCap              bool
	EnhancedPort0                     bool
	MulticastFDBTop                   uint16
}

// ParseSwitchInfo decodes a SwitchInfo from the first SwitchInfoSize bytes
// of b.
func ParseSwitchInfo(b []byte) (SwitchInfo, error) {
	if len(b) < SwitchInfoSize {
		return SwitchInfo{}, truncated("SwitchInfo", b, SwitchInfoSize)
	}
	return SwitchInfo{
		LinearFDBCap:                      be.Uint16(b[0:]),
		RandomFDBCap:                      be.Uint16(b[2:]),
		MulticastFDBCap:                   be.Uint16(b[4:]),
		LinearFDBTop:                      be.Uint16(b[6:]),
		DefaultPort:                       b[8],
		DefaultMulticastPrimaryPort:       b[9],
		DefaultMulticastNotPrimaryPort:    b[10],
		LifeTimeValue:                     getBits(b[11], 3, 5),
		PortStateChange:                   getBit(b[11], 2),
		OptimizedSLtoVLMappingProgramming: getBits(b[11], 0, 2),
		LIDsPerPort:                       be.Uint16(b[12:]),
		PartitionEnforcementCap:           be.Uint16(b[14:]),
		InboundEnforcementCap:             getBit(b[16], 7),
		OutboundEnforcementCap:            getBit(b[16], 6),
		FilterRawInboundCap:               getBit(b[16], 5),
		FilterRawOutboundCap:              getBit(b[16], 4),
		EnhancedPort0:                     getBit(b[16], 3),
		MulticastFDBTop:                   be.Uint16(b[18:]),
	}, nil
}

// Encode writes x into the first SwitchInfoSize bytes of b, with the
// reserved bits zero.
func (x *SwitchInfo) Encode(b []byte) {
	b = b[:SwitchInfoSize]
	clear(b)
	be.PutUint16(b[0:], x.LinearFDBCap)
	be.PutUint16(b[2:], x.RandomFDBCap)
	be.PutUint16(b[4:], x.MulticastFDBCap)
	be.PutUint16(b[6:], x.LinearFDBTop)
	b[8], b[9], b[10] = x.DefaultPort, x.DefaultMulticastPrimaryPort, x.DefaultMulticastNotPrimaryPort
	setBits(&b[11], 3, 5, x.LifeTimeValue)
	setBit(&b[11], 2, x.PortStateChange)
	setBits(&b[11], 0, 2, x.OptimizedSLtoVLMappingProgramming)
	be.PutUint16(b[12:], x.LIDsPerPort)
	be.PutUint16(b[14:], x.PartitionEnforcementCap)
	setBit(&b[16], 7, x.InboundEnforcementCap)
	setBit(&b[16], 6, x.OutboundEnforcementCap)
	setBit(&b[16], 5, x.FilterRawInboundCap)
	setBit(&b[16], 4, x.FilterRawOutboundCap)
	setBit(&b[16], 3, x.EnhancedPort0)
	be.PutUint16(b[18:], x.MulticastFDBTop)
}
