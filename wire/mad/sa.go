// Subnet administration (SA): the layout of an SA MAD (IBTA volume 1
// section 15.2.1), its methods, attribute IDs and status codes, and the
// component masks that say which fields of a query record must match. The
// records themselves are in sarecords.go, the RMPP header that every SA MAD
// carries in rmpp.go.

package mad

import "fmt"

// Offsets and sizes of the parts of an SA MAD:
//
//	0   MAD header (24)
//	24  RMPP header (12)
//	36  SM_Key (8), AttributeOffset (2), reserved (2), ComponentMask (8)
//	56  SA data (200): one record, or a segment of a table of records
const (
	RMPPHeaderOffset = HeaderSize // 24
	RMPPHeaderSize   = 12
	SAHeaderOffset   = RMPPHeaderOffset + RMPPHeaderSize // 36
	SAHeaderSize     = 20
	SADataOffset     = SAHeaderOffset + SAHeaderSize // 56
	SADataSize       = Size - SADataOffset           // 200
)

// SAClassVersion is the class version of the SA class (ClassSubnAdm).
const SAClassVersion = 2

// Methods of the SA class besides Get, Set, GetResp, Report and ReportResp.
// A table answer travels as GetTableResp, in RMPP segments.
const (
	MethodGetTable      Method = 0x12
	MethodGetTraceTable Method = 0x13
	MethodGetMulti      Method = 0x14
	MethodDelete        Method = 0x15
	MethodGetTableResp  Method = 0x92
	MethodGetMultiResp  Method = 0x94
	MethodDeleteResp    Method = 0x95

	methodResponseBit Method = 0x80
)

// IsResponse reports whether m is a response method (the high bit set).
func (m Method) IsResponse() bool { return m&methodResponseBit != 0 }

// SAMethodName returns the name of an SA method, such as "GetTable", or
// the number.
func SAMethodName(m Method) string {
	switch m {
	case MethodGetTable:
		return "GetTable"
	case MethodGetTraceTable:
		return "GetTraceTable"
	case MethodGetMulti:
		return "GetMulti"
	case MethodDelete:
		return "Delete"
	case MethodGetTableResp:
		return "GetTableResp"
	case MethodGetMultiResp:
		return "GetMultiResp"
	case MethodDeleteResp:
		return "DeleteResp"
	}
	return m.String()
}

// SA attribute IDs (IBTA volume 1 table 199). ClassPortInfo is
// AttrClassPortInfo in every class.
const (
	SAAttrNotice             AttributeID = 0x0002
	SAAttrInformInfo         AttributeID = 0x0003
	SAAttrNodeRecord         AttributeID = 0x0011
	SAAttrPortInfoRecord     AttributeID = 0x0012
	SAAttrSLToVLRecord       AttributeID = 0x0013
	SAAttrSwitchInfoRecord   AttributeID = 0x0014
	SAAttrLinearFTRecord     AttributeID = 0x0015
	SAAttrRandomFTRecord     AttributeID = 0x0016
	SAAttrMulticastFTRecord  AttributeID = 0x0017
	SAAttrSMInfoRecord       AttributeID = 0x0018
	SAAttrInformInfoRecord   AttributeID = 0x00F3
	SAAttrLinkRecord         AttributeID = 0x0020
	SAAttrGUIDInfoRecord     AttributeID = 0x0030
	SAAttrServiceRecord      AttributeID = 0x0031
	SAAttrPKeyTableRecord    AttributeID = 0x0033
	SAAttrPathRecord         AttributeID = 0x0035
	SAAttrVLArbTableRecord   AttributeID = 0x0036
	SAAttrMCMemberRecord     AttributeID = 0x0038
	SAAttrTraceRecord        AttributeID = 0x0039
	SAAttrMultiPathRecord    AttributeID = 0x003A
	SAAttrServiceAssocRecord AttributeID = 0x003B
)

var saAttrNames = map[AttributeID]string{
	AttrClassPortInfo:        "ClassPortInfo",
	SAAttrNotice:             "Notice",
	SAAttrInformInfo:         "InformInfo",
	SAAttrNodeRecord:         "NodeRecord",
	SAAttrPortInfoRecord:     "PortInfoRecord",
	SAAttrSLToVLRecord:       "SLtoVLMappingTableRecord",
	SAAttrSwitchInfoRecord:   "SwitchInfoRecord",
	SAAttrLinearFTRecord:     "LinearForwardingTableRecord",
	SAAttrRandomFTRecord:     "RandomForwardingTableRecord",
	SAAttrMulticastFTRecord:  "MulticastForwardingTableRecord",
	SAAttrSMInfoRecord:       "SMInfoRecord",
	SAAttrInformInfoRecord:   "InformInfoRecord",
	SAAttrLinkRecord:         "LinkRecord",
	SAAttrGUIDInfoRecord:     "GuidInfoRecord",
	SAAttrServiceRecord:      "ServiceRecord",
	SAAttrPKeyTableRecord:    "P_KeyTableRecord",
	SAAttrPathRecord:         "PathRecord",
	SAAttrVLArbTableRecord:   "VLArbitrationTableRecord",
	SAAttrMCMemberRecord:     "MCMemberRecord",
	SAAttrTraceRecord:        "TraceRecord",
	SAAttrMultiPathRecord:    "MultiPathRecord",
	SAAttrServiceAssocRecord: "ServiceAssociationRecord",
}

// SA status codes: the class-specific bits 8 to 14 of the MAD status
// (IBTA volume 1 table 200), alongside the common codes (Status*).
const (
	SAStatusNoResources           uint16 = 0x0100 // ERR_NO_RESOURCES
	SAStatusReqInvalid            uint16 = 0x0200 // ERR_REQ_INVALID
	SAStatusNoRecords             uint16 = 0x0300 // ERR_NO_RECORDS
	SAStatusTooManyRecords        uint16 = 0x0400 // ERR_TOO_MANY_RECORDS
	SAStatusReqInvalidGID         uint16 = 0x0500 // ERR_REQ_INVALID_GID
	SAStatusReqInsufficientComps  uint16 = 0x0600 // ERR_REQ_INSUFFICIENT_COMPONENTS
	SAStatusReqDenied             uint16 = 0x0700 // ERR_REQ_DENIED
	SAStatusReqPriorityUnsuitable uint16 = 0x0800 // ERR_REQ_PRIORITY_UNSUITABLE

	saStatusClassSpecificMask uint16 = 0x7F00
)

var saStatusNames = map[uint16]string{
	SAStatusNoResources:           "ERR_NO_RESOURCES",
	SAStatusReqInvalid:            "ERR_REQ_INVALID",
	SAStatusNoRecords:             "ERR_NO_RECORDS",
	SAStatusTooManyRecords:        "ERR_TOO_MANY_RECORDS",
	SAStatusReqInvalidGID:         "ERR_REQ_INVALID_GID",
	SAStatusReqInsufficientComps:  "ERR_REQ_INSUFFICIENT_COMPONENTS",
	SAStatusReqDenied:             "ERR_REQ_DENIED",
	SAStatusReqPriorityUnsuitable: "ERR_REQ_PRIORITY_UNSUITABLE",
}

// SAStatusName returns the name of an SA MAD status's class-specific code,
// such as "ERR_NO_RECORDS", "OK" for zero, or the number.
func SAStatusName(s uint16) string {
	if s == StatusOK {
		return "OK"
	}
	if n, ok := saStatusNames[s&saStatusClassSpecificMask]; ok && s&^saStatusClassSpecificMask == 0 {
		return n
	}
	return fmt.Sprintf("SAStatus(0x%04x)", s)
}

// SAHeader is the SA class header that follows the RMPP header.
type SAHeader struct {
	SMKey uint64
	// AttributeOffset is the distance between records of a table, in
	// 8-byte units (RecordStride/8); zero in requests.
	AttributeOffset uint16
	// ComponentMask has bit i set when component i of the record in a
	// query must match; the record types' *Comp* constants name the bits.
	ComponentMask uint64
}

// ParseSAHeader decodes an SA header from the first SAHeaderSize bytes of b
// (a MAD's bytes from SAHeaderOffset).
func ParseSAHeader(b []byte) (SAHeader, error) {
	if len(b) < SAHeaderSize {
		return SAHeader{}, truncated("SA header", b, SAHeaderSize)
	}
	return SAHeader{SMKey: be.Uint64(b), AttributeOffset: be.Uint16(b[8:]), ComponentMask: be.Uint64(b[12:])}, nil
}

// Encode writes h into the first SAHeaderSize bytes of b, with the
// reserved field zero.
func (h *SAHeader) Encode(b []byte) {
	b = b[:SAHeaderSize]
	be.PutUint64(b, h.SMKey)
	be.PutUint16(b[8:], h.AttributeOffset)
	b[10], b[11] = 0, 0
	be.PutUint64(b[12:], h.ComponentMask)
}

// SAMAD is a view of a whole SA MAD: the common header, the RMPP header,
// the SA header and the 200 bytes of SA data.
type SAMAD []byte

// ErrClass means a MAD is not of the class the parser expects.
var ErrClass = fmt.Errorf("mad: unexpected management class")

// ParseSA checks that b is one whole MAD (Size bytes, base version
// BaseVersion) of class ClassSubnAdm and returns a view of it. It does not
// check the class version: an SA answers another version with
// StatusBadVersion, so the caller looks at it.
func ParseSA(b []byte) (SAMAD, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if c := m.MgmtClass(); c != ClassSubnAdm {
		return nil, fmt.Errorf("%w %s, want SubnAdm", ErrClass, c)
	}
	return SAMAD(m), nil
}

// MAD returns the SA MAD as a MAD, for the accessors of the common header.
func (s SAMAD) MAD() MAD { return MAD(s) }

// RMPP returns the decoded RMPP header.
func (s SAMAD) RMPP() RMPPHeader {
	h, _ := ParseRMPPHeader(s[RMPPHeaderOffset:])
	return h
}

// SetRMPP writes the RMPP header.
func (s SAMAD) SetRMPP(h *RMPPHeader) { h.Encode(s[RMPPHeaderOffset:]) }

// Header returns the decoded SA header.
func (s SAMAD) Header() SAHeader {
	h, _ := ParseSAHeader(s[SAHeaderOffset:])
	return h
}

// SetHeader writes the SA header.
func (s SAMAD) SetHeader(h *SAHeader) { h.Encode(s[SAHeaderOffset:]) }

// Data returns the SADataSize bytes of SA data.
func (s SAMAD) Data() []byte { return s[SADataOffset:Size] }

// NewSAMAD writes into b (Size bytes) an SA MAD with the given method,
// attribute, transaction ID and SA header, an unused RMPP header and zero
// data, and returns the view.
func NewSAMAD(b []byte, method Method, attr AttributeID, tid uint64, h *SAHeader) (SAMAD, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("%w: %d bytes, a MAD is %d", ErrTruncated, len(b), Size)
	}
	s := SAMAD(b[:Size])
	clear(s)
	hf := HeaderFields{BaseVersion: BaseVersion, MgmtClass: ClassSubnAdm, ClassVersion: SAClassVersion,
		Method: method, TransactionID: tid, AttributeID: attr}
	hf.Encode(s)
	s.SetHeader(h)
	return s, nil
}

// RecordStride returns the distance between records of size bytes in a
// table answer: the size rounded up to 8 bytes (AttributeOffset*8).
func RecordStride(size int) int { return (size + 7) &^ 7 }
