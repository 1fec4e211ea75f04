// Service ID resolution (IBTA tables 119 and 120): a SIDR_REQ asks which UD
// QP and Q_Key serve a service ID, and the SIDR_REP answers. rdma_cm uses
// them to "connect" UD QPs in the UDP and IPoIB port spaces.

package mad

import "github.com/softrdma/softrdma/wire"

// Sizes of SIDR message parts.
const (
	SIDRReqPrivateDataSize = 216
	SIDRRepAddInfoSize     = 72 // additional information
	SIDRRepPrivateDataSize = 136
)

// SIDRReq is a view of a SIDR_REQ: DataSize bytes.
type SIDRReq []byte

// AttributeID returns AttrSIDRReq.
func (SIDRReq) AttributeID() AttributeID { return AttrSIDRReq }

// RequestID returns the ID the sender uses to match the reply.
func (b SIDRReq) RequestID() uint32 { return be.Uint32(b[0:]) }

// SetRequestID sets the request ID.
func (b SIDRReq) SetRequestID(v uint32) { be.PutUint32(b[0:], v) }

// PKey returns the partition key the UD QP should be in.
func (b SIDRReq) PKey() uint16 { return be.Uint16(b[4:]) }

// SetPKey sets the partition key.
func (b SIDRReq) SetPKey(v uint16) { be.PutUint16(b[4:], v) }

// ServiceID returns the service ID to resolve.
func (b SIDRReq) ServiceID() uint64 { return be.Uint64(b[8:]) }

// SetServiceID sets the service ID.
func (b SIDRReq) SetServiceID(v uint64) { be.PutUint64(b[8:], v) }

// PrivateData returns the SIDRReqPrivateDataSize bytes of private data
// (rdma_cm's CMAHeader first, over IP), aliasing b.
func (b SIDRReq) PrivateData() []byte { return b[16:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than
// SIDRReqPrivateDataSize.
func (b SIDRReq) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b SIDRReq) Fields() SIDRReqFields {
	f := SIDRReqFields{RequestID: b.RequestID(), PKey: b.PKey(), ServiceID: b.ServiceID()}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// SIDRReqFields is the decoded form of a SIDR_REQ.
type SIDRReqFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRReqPrivateDataSize]byte
}

// AttributeID returns AttrSIDRReq.
func (*SIDRReqFields) AttributeID() AttributeID { return AttrSIDRReq }

// Encode writes the message into the first DataSize bytes of b.
func (f *SIDRReqFields) Encode(b []byte) {
	m := SIDRReq(b[:DataSize])
	clear(m)
	m.SetRequestID(f.RequestID)
	m.SetPKey(f.PKey)
	m.SetServiceID(f.ServiceID)
	copy(m.PrivateData(), f.PrivateData[:])
}

// SIDRRep is a view of a SIDR_REP: DataSize bytes.
type SIDRRep []byte

// AttributeID returns AttrSIDRRep.
func (SIDRRep) AttributeID() AttributeID { return AttrSIDRRep }

// RequestID returns the request ID copied from the SIDR_REQ.
func (b SIDRRep) RequestID() uint32 { return be.Uint32(b[0:]) }

// SetRequestID sets the request ID.
func (b SIDRRep) SetRequestID(v uint32) { be.PutUint32(b[0:], v) }

// Status returns the outcome of the resolution.
func (b SIDRRep) Status() SIDRStatus { return SIDRStatus(b[4]) }

// SetStatus sets the outcome of the resolution.
func (b SIDRRep) SetStatus(v SIDRStatus) { b[4] = uint8(v) }

// AdditionalInfoLength returns the number of valid bytes in AdditionalInfo.
func (b SIDRRep) AdditionalInfoLength() uint8 { return b[5] }

// SetAdditionalInfoLength sets the additional information length.
func (b SIDRRep) SetAdditionalInfoLength(v uint8) { b[5] = v }

// VendorID returns the 24-bit vendor ID (IBTA 1.4): 16 bits before QPN and
// 8 bits after it.
func (b SIDRRep) VendorID() uint32 { return uint32(be.Uint16(b[6:]))<<8 | uint32(b[11]) }

// SetVendorID sets the 24-bit vendor ID.
func (b SIDRRep) SetVendorID(v uint32) { be.PutUint16(b[6:], uint16(v>>8)); b[11] = byte(v) }

// QPN returns the 24-bit number of the UD QP that serves the service.
func (b SIDRRep) QPN() wire.QPN { return wire.QPN(get24(b[8:])) }

// SetQPN sets the 24-bit QP number.
func (b SIDRRep) SetQPN(v wire.QPN) { put24(b[8:], uint32(v)) }

// ServiceID returns the resolved service ID.
func (b SIDRRep) ServiceID() uint64 { return be.Uint64(b[12:]) }

// SetServiceID sets the service ID.
func (b SIDRRep) SetServiceID(v uint64) { be.PutUint64(b[12:], v) }

// QKey returns the Q_Key of the serving QP (RDMAUDPQKey for rdma_cm).
func (b SIDRRep) QKey() wire.QKey { return wire.QKey(be.Uint32(b[20:])) }

// SetQKey sets the Q_Key.
func (b SIDRRep) SetQKey(v wire.QKey) { be.PutUint32(b[20:], uint32(v)) }

// AdditionalInfo returns the SIDRRepAddInfoSize bytes of additional
// information (a redirect's class port info, say), aliasing b.
func (b SIDRRep) AdditionalInfo() []byte { return b[24:96] }

// SetAdditionalInfo copies p into the additional information and zeroes the
// rest; it does not set AdditionalInfoLength. It reports false, changing
// nothing, if p is longer than SIDRRepAddInfoSize.
func (b SIDRRep) SetAdditionalInfo(p []byte) bool { return setBytes(b.AdditionalInfo(), p) }

// PrivateData returns the SIDRRepPrivateDataSize bytes of private data,
// aliasing b.
func (b SIDRRep) PrivateData() []byte { return b[96:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than
// SIDRRepPrivateDataSize.
func (b SIDRRep) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b SIDRRep) Fields() SIDRRepFields {
	f := SIDRRepFields{
		RequestID:            b.RequestID(),
		Status:               b.Status(),
		AdditionalInfoLength: b.AdditionalInfoLength(),
		VendorID:             b.VendorID(),
		QPN:                  b.QPN(),
		ServiceID:            b.ServiceID(),
		QKey:                 b.QKey(),
	}
	copy(f.AdditionalInfo[:], b.AdditionalInfo())
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// SIDRRepFields is the decoded form of a SIDR_REP.
type SIDRRepFields struct {
	RequestID            uint32
	Status               SIDRStatus
	AdditionalInfoLength uint8
	VendorID             uint32   // 24 bits
	QPN                  wire.QPN // 24 bits
	ServiceID            uint64
	QKey                 wire.QKey
	AdditionalInfo       [SIDRRepAddInfoSize]byte
	PrivateData          [SIDRRepPrivateDataSize]byte
}

// AttributeID returns AttrSIDRRep.
func (*SIDRRepFields) AttributeID() AttributeID { return AttrSIDRRep }

// Encode writes the message into the first DataSize bytes of b.
func (f *SIDRRepFields) Encode(b []byte) {
	m := SIDRRep(b[:DataSize])
	clear(m)
	m.SetRequestID(f.RequestID)
	m.SetStatus(f.Status)
	m.SetAdditionalInfoLength(f.AdditionalInfoLength)
	m.SetVendorID(f.VendorID)
	m.SetQPN(f.QPN)
	m.SetServiceID(f.ServiceID)
	m.SetQKey(f.QKey)
	copy(m.AdditionalInfo(), f.AdditionalInfo[:])
	copy(m.PrivateData(), f.PrivateData[:])
}
