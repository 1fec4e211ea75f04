// The MAD header: the 24 bytes in front of every management datagram that
// arrives on QP1, the checks Parse applies to a received MAD, and EncodeCM,
// which writes a whole outgoing CM MAD.

package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

var be = binary.BigEndian

// Sizes of a MAD and of its parts.
const (
	Size       = 256               // a whole MAD
	HeaderSize = 24                // the common MAD header
	DataSize   = Size - HeaderSize // the class data: one CM message
)

// Version numbers Parse accepts.
const (
	BaseVersion    = 1 // MAD base version of InfiniBand MADs
	CMClassVersion = 2 // class version of the Communication Manager class
)

// GSIQPN is the queue pair number of the general services interface, where
// CM MADs are sent and received.
const GSIQPN = 1

// GSIQKey is the well-known Q_Key of QP1; CM MADs carry it in their DETH.
const GSIQKey = 0x80010000

// RDMAUDPQKey is the Q_Key rdma_cm assigns to UD QPs of the UDP and IPoIB
// port spaces (RDMA_UDP_QKEY); SIDR_REP messages announce it.
const RDMAUDPQKey = 0x01234567

// Errors Parse wraps; test with errors.Is.
var (
	// ErrTruncated means the buffer is shorter than a MAD.
	ErrTruncated = errors.New("mad: truncated")
	// ErrTooLong means the buffer is longer than a MAD.
	ErrTooLong = errors.New("mad: too long")
	// ErrBaseVersion means the base version is not BaseVersion.
	ErrBaseVersion = errors.New("mad: unsupported base version")
	// ErrClassVersion means a CM MAD's class version is not CMClassVersion.
	ErrClassVersion = errors.New("mad: unsupported class version")
)

// Class is a management class.
type Class uint8

// ClassCM is the Communication Management class.
const ClassCM Class = 0x07

// String returns the class name, such as "CM" or "SubnDirected", or the
// class number.
func (c Class) String() string {
	switch c {
	case ClassCM:
		return "CM"
	case ClassSubnLID:
		return "SubnLID"
	case ClassSubnDirected:
		return "SubnDirected"
	case ClassSubnAdm:
		return "SubnAdm"
	case ClassPerf:
		return "Perf"
	}
	return fmt.Sprintf("Class(0x%02x)", uint8(c))
}

// Method is a MAD method. The high bit marks a response.
type Method uint8

// MAD methods used by the CM class.
const (
	MethodGet     Method = 0x01 // read an attribute (CM: ClassPortInfo)
	MethodSet     Method = 0x02 // write an attribute
	MethodSend    Method = 0x03 // one-way message: every CM message uses it
	MethodGetResp Method = 0x81 // response to Get or Set
)

// String returns the method name, such as "Send", or its number.
func (m Method) String() string {
	switch m {
	case MethodGet:
		return "Get"
	case MethodSet:
		return "Set"
	case MethodSend:
		return "Send"
	case MethodGetResp:
		return "GetResp"
	case MethodTrap:
		return "Trap"
	case MethodReport:
		return "Report"
	case MethodTrapRepress:
		return "TrapRepress"
	case MethodReportResp:
		return "ReportResp"
	}
	return fmt.Sprintf("Method(0x%02x)", uint8(m))
}

// AttributeID names the attribute a MAD carries; in the CM class it says
// which message the data holds.
type AttributeID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttributeID = 0x0001
	AttrREQ           AttributeID = 0x0010 // connect request
	AttrMRA           AttributeID = 0x0011 // message receipt acknowledgement
	AttrREJ           AttributeID = 0x0012 // reject
	AttrREP           AttributeID = 0x0013 // reply to REQ
	AttrRTU           AttributeID = 0x0014 // ready to use
	AttrDREQ          AttributeID = 0x0015 // disconnect request
	AttrDREP          AttributeID = 0x0016 // reply to DREQ
	AttrSIDRReq       AttributeID = 0x0017 // service ID resolution request
	AttrSIDRRep       AttributeID = 0x0018 // service ID resolution reply
	AttrLAP           AttributeID = 0x0019 // load alternate path
	AttrAPR           AttributeID = 0x001A // alternate path response
)

var attrNames = map[AttributeID]string{
	AttrClassPortInfo: "ClassPortInfo",
	AttrREQ:           "REQ",
	AttrMRA:           "MRA",
	AttrREJ:           "REJ",
	AttrREP:           "REP",
	AttrRTU:           "RTU",
	AttrDREQ:          "DREQ",
	AttrDREP:          "DREP",
	AttrSIDRReq:       "SIDR_REQ",
	AttrSIDRRep:       "SIDR_REP",
	AttrLAP:           "LAP",
	AttrAPR:           "APR",
}

// String returns the message name, such as "REQ", or the number.
func (a AttributeID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("AttributeID(0x%04x)", uint16(a))
}

// MAD is a view of a whole MAD: the header followed by the class data.
type MAD []byte

// Parse checks that b is one InfiniBand MAD and returns a view of it.
//
// b must be exactly Size bytes: the RoCEv2 payload of a GSI packet is one
// MAD with no pad, so any other length means the packet is cut short or the
// caller left something on (such as the ICRC). The base version must be
// BaseVersion, and a MAD of class CM must have class version CMClassVersion.
// MADs of other classes are returned with their header unchecked beyond
// that; MAD.CM gives the typed CM message, if any.
func Parse(b []byte) (MAD, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("%w: %d bytes, a MAD is %d", ErrTruncated, len(b), Size)
	}
	if len(b) > Size {
		return nil, fmt.Errorf("%w: %d bytes, a MAD is %d", ErrTooLong, len(b), Size)
	}
	m := MAD(b)
	if v := m.BaseVersion(); v != BaseVersion {
		return nil, fmt.Errorf("%w %d, want %d", ErrBaseVersion, v, BaseVersion)
	}
	if m.MgmtClass() == ClassCM && m.ClassVersion() != CMClassVersion {
		return nil, fmt.Errorf("%w %d for class CM, want %d", ErrClassVersion, m.ClassVersion(), CMClassVersion)
	}
	return m, nil
}

// BaseVersion returns the MAD base version.
func (m MAD) BaseVersion() uint8 { return m[0] }

// SetBaseVersion sets the MAD base version.
func (m MAD) SetBaseVersion(v uint8) { m[0] = v }

// MgmtClass returns the management class.
func (m MAD) MgmtClass() Class { return Class(m[1]) }

// SetMgmtClass sets the management class.
func (m MAD) SetMgmtClass(c Class) { m[1] = uint8(c) }

// ClassVersion returns the version of the management class.
func (m MAD) ClassVersion() uint8 { return m[2] }

// SetClassVersion sets the version of the management class.
func (m MAD) SetClassVersion(v uint8) { m[2] = v }

// Method returns the method.
func (m MAD) Method() Method { return Method(m[3]) }

// SetMethod sets the method.
func (m MAD) SetMethod(v Method) { m[3] = uint8(v) }

// Status returns the status field (zero in CM Send MADs).
func (m MAD) Status() uint16 { return be.Uint16(m[4:]) }

// SetStatus sets the status field.
func (m MAD) SetStatus(v uint16) { be.PutUint16(m[4:], v) }

// ClassSpecific returns the class-specific field.
func (m MAD) ClassSpecific() uint16 { return be.Uint16(m[6:]) }

// SetClassSpecific sets the class-specific field.
func (m MAD) SetClassSpecific(v uint16) { be.PutUint16(m[6:], v) }

// TransactionID returns the transaction ID. The CM keeps one per exchange:
// a REP, RTU or REJ repeats the ID of the REQ it answers.
func (m MAD) TransactionID() uint64 { return be.Uint64(m[8:]) }

// SetTransactionID sets the transaction ID.
func (m MAD) SetTransactionID(v uint64) { be.PutUint64(m[8:], v) }

// AttributeID returns the attribute ID.
func (m MAD) AttributeID() AttributeID { return AttributeID(be.Uint16(m[16:])) }

// SetAttributeID sets the attribute ID.
func (m MAD) SetAttributeID(a AttributeID) { be.PutUint16(m[16:], uint16(a)) }

// AttributeModifier returns the attribute modifier.
func (m MAD) AttributeModifier() uint32 { return be.Uint32(m[20:]) }

// SetAttributeModifier sets the attribute modifier.
func (m MAD) SetAttributeModifier(v uint32) { be.PutUint32(m[20:], v) }

// Data returns the DataSize bytes of class data after the header.
func (m MAD) Data() []byte { return m[HeaderSize:Size] }

// Fields returns the decoded header.
func (m MAD) Fields() HeaderFields {
	return HeaderFields{
		BaseVersion:       m.BaseVersion(),
		MgmtClass:         m.MgmtClass(),
		ClassVersion:      m.ClassVersion(),
		Method:            m.Method(),
		Status:            m.Status(),
		ClassSpecific:     m.ClassSpecific(),
		TransactionID:     m.TransactionID(),
		AttributeID:       m.AttributeID(),
		AttributeModifier: m.AttributeModifier(),
	}
}

// CM returns the CM message m carries: a REQ, MRA, REJ, REP, RTU, DREQ,
// DREP, SIDRReq or SIDRRep view of m's data. It returns nil if m is shorter
// than Size, is not of class CM, or has another attribute (ClassPortInfo,
// LAP, APR or an unknown one).
func (m MAD) CM() Message {
	if len(m) < Size || m.MgmtClass() != ClassCM {
		return nil
	}
	d := m[HeaderSize:Size]
	switch m.AttributeID() {
	case AttrREQ:
		return REQ(d)
	case AttrMRA:
		return MRA(d)
	case AttrREJ:
		return REJ(d)
	case AttrREP:
		return REP(d)
	case AttrRTU:
		return RTU(d)
	case AttrDREQ:
		return DREQ(d)
	case AttrDREP:
		return DREP(d)
	case AttrSIDRReq:
		return SIDRReq(d)
	case AttrSIDRRep:
		return SIDRRep(d)
	case AttrLAP:
		return LAP(d)
	case AttrAPR:
		return APR(d)
	}
	return nil
}

// HeaderFields is the decoded MAD header.
type HeaderFields struct {
	BaseVersion       uint8
	MgmtClass         Class
	ClassVersion      uint8
	Method            Method
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttributeID
	AttributeModifier uint32
}

// Encode writes the header into the first HeaderSize bytes of b, with the
// reserved field zero.
func (f *HeaderFields) Encode(b []byte) {
	m := MAD(b[:HeaderSize])
	m.SetBaseVersion(f.BaseVersion)
	m.SetMgmtClass(f.MgmtClass)
	m.SetClassVersion(f.ClassVersion)
	m.SetMethod(f.Method)
	m.SetStatus(f.Status)
	m.SetClassSpecific(f.ClassSpecific)
	m.SetTransactionID(f.TransactionID)
	m.SetAttributeID(f.AttributeID)
	m[18], m[19] = 0, 0
	m.SetAttributeModifier(f.AttributeModifier)
}

// Message is a view of one CM message, as returned by MAD.CM. Its dynamic
// type is REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDRReq or SIDRRep.
type Message interface {
	// AttributeID returns the attribute ID that selects the message.
	AttributeID() AttributeID
}

// Fields is the decoded form of a CM message: *REQFields, *MRAFields and so
// on. Encode writes the DataSize message bytes into b, zeroing reserved bits.
type Fields interface {
	AttributeID() AttributeID
	Encode(b []byte)
}

// EncodeCM writes a whole CM MAD into b, which must hold at least Size
// bytes: a Send header with base and class versions set, transaction ID tid
// and f's attribute ID, followed by f. It returns the MAD, b[:Size].
func EncodeCM(b []byte, tid uint64, f Fields) MAD {
	h := HeaderFields{
		BaseVersion:   BaseVersion,
		MgmtClass:     ClassCM,
		ClassVersion:  CMClassVersion,
		Method:        MethodSend,
		TransactionID: tid,
		AttributeID:   f.AttributeID(),
	}
	h.Encode(b)
	f.Encode(b[HeaderSize:Size])
	return MAD(b[:Size])
}

// Bit-field helpers. Fields are big-endian; shift counts bits above the
// least significant bit of the byte that holds the field.

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func getBits(b byte, shift, width uint) uint8 { return b >> shift & (1<<width - 1) }

func setBits(b *byte, shift, width uint, v uint8) {
	mask := byte(1<<width-1) << shift
	*b = *b&^mask | v<<shift&mask
}

func getBit(b byte, shift uint) bool { return b>>shift&1 != 0 }

func setBit(b *byte, shift uint, v bool) {
	*b &^= 1 << shift
	if v {
		*b |= 1 << shift
	}
}

// setBytes copies p into dst and zeroes the rest of dst. It copies nothing
// and reports false if p does not fit.
func setBytes(dst, p []byte) bool {
	if len(p) > len(dst) {
		return false
	}
	n := copy(dst, p)
	clear(dst[n:])
	return true
}
