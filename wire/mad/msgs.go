// The CM messages that follow a REQ (IBTA tables 107 to 113): REP and RTU
// finish the three-way handshake, MRA asks the peer for more time, REJ
// refuses, DREQ and DREP close the connection.

package mad

import "github.com/softrdma/softrdma/wire"

// Private data sizes of the messages in this file.
const (
	MRAPrivateDataSize  = 222
	REJARISize          = 72 // additional reject information
	REJPrivateDataSize  = 148
	REPPrivateDataSize  = 196
	RTUPrivateDataSize  = 224
	DREQPrivateDataSize = 220
	DREPPrivateDataSize = 224
)

// MRA is a view of an MRA (message receipt acknowledgement): DataSize bytes.
type MRA []byte

// AttributeID returns AttrMRA.
func (MRA) AttributeID() AttributeID { return AttrMRA }

// LocalCommID returns the sender's communication ID.
func (b MRA) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b MRA) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// RemoteCommID returns the receiver's communication ID.
func (b MRA) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// SetRemoteCommID sets the receiver's communication ID.
func (b MRA) SetRemoteCommID(v uint32) { be.PutUint32(b[4:], v) }

// MessageMRAed returns which message the MRA acknowledges, 2 bits (MsgREQ,
// MsgREP or MsgOther for a LAP).
func (b MRA) MessageMRAed() MsgKind { return MsgKind(getBits(b[8], 6, 2)) }

// SetMessageMRAed sets the 2-bit acknowledged message kind.
func (b MRA) SetMessageMRAed(v MsgKind) { setBits(&b[8], 6, 2, uint8(v)) }

// ServiceTimeout returns the 5-bit extra time the sender needs before it
// answers: 4.096 us * 2^value.
func (b MRA) ServiceTimeout() uint8 { return getBits(b[9], 3, 5) }

// SetServiceTimeout sets the 5-bit service timeout.
func (b MRA) SetServiceTimeout(v uint8) { setBits(&b[9], 3, 5, v) }

// PrivateData returns the MRAPrivateDataSize bytes of private data,
// aliasing b.
func (b MRA) PrivateData() []byte { return b[10:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than MRAPrivateDataSize.
func (b MRA) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b MRA) Fields() MRAFields {
	f := MRAFields{
		LocalCommID:    b.LocalCommID(),
		RemoteCommID:   b.RemoteCommID(),
		MessageMRAed:   b.MessageMRAed(),
		ServiceTimeout: b.ServiceTimeout(),
	}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// MRAFields is the decoded form of an MRA.
type MRAFields struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MsgKind // 2 bits
	ServiceTimeout uint8   // 5 bits
	PrivateData    [MRAPrivateDataSize]byte
}

// AttributeID returns AttrMRA.
func (*MRAFields) AttributeID() AttributeID { return AttrMRA }

// Encode writes the message into the first DataSize bytes of b.
func (f *MRAFields) Encode(b []byte) {
	m := MRA(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	m.SetMessageMRAed(f.MessageMRAed)
	m.SetServiceTimeout(f.ServiceTimeout)
	copy(m.PrivateData(), f.PrivateData[:])
}

// REJ is a view of a REJ (reject): DataSize bytes.
type REJ []byte

// AttributeID returns AttrREJ.
func (REJ) AttributeID() AttributeID { return AttrREJ }

// LocalCommID returns the sender's communication ID.
func (b REJ) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b REJ) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// RemoteCommID returns the receiver's communication ID, taken from the
// local comm ID of the message being rejected.
func (b REJ) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// SetRemoteCommID sets the receiver's communication ID.
func (b REJ) SetRemoteCommID(v uint32) { be.PutUint32(b[4:], v) }

// MessageRejected returns which message is rejected, 2 bits (MsgREQ, MsgREP
// or MsgOther).
func (b REJ) MessageRejected() MsgKind { return MsgKind(getBits(b[8], 6, 2)) }

// SetMessageRejected sets the 2-bit rejected message kind.
func (b REJ) SetMessageRejected(v MsgKind) { setBits(&b[8], 6, 2, uint8(v)) }

// RejectInfoLength returns the 7-bit number of valid bytes in the ARI.
func (b REJ) RejectInfoLength() uint8 { return getBits(b[9], 1, 7) }

// SetRejectInfoLength sets the 7-bit reject info length.
func (b REJ) SetRejectInfoLength(v uint8) { setBits(&b[9], 1, 7, v) }

// Reason returns the reject reason.
func (b REJ) Reason() RejectReason { return RejectReason(be.Uint16(b[10:])) }

// SetReason sets the reject reason.
func (b REJ) SetReason(v RejectReason) { be.PutUint16(b[10:], uint16(v)) }

// ARI returns the REJARISize bytes of additional reject information, whose
// first RejectInfoLength bytes are valid; the slice aliases b.
func (b REJ) ARI() []byte { return b[12:84] }

// SetARI copies p into the ARI field and zeroes the rest; it does not set
// RejectInfoLength. It reports false, changing nothing, if p is longer than
// REJARISize.
func (b REJ) SetARI(p []byte) bool { return setBytes(b.ARI(), p) }

// PrivateData returns the REJPrivateDataSize bytes of private data,
// aliasing b.
func (b REJ) PrivateData() []byte { return b[84:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than REJPrivateDataSize.
func (b REJ) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b REJ) Fields() REJFields {
	f := REJFields{
		LocalCommID:      b.LocalCommID(),
		RemoteCommID:     b.RemoteCommID(),
		MessageRejected:  b.MessageRejected(),
		RejectInfoLength: b.RejectInfoLength(),
		Reason:           b.Reason(),
	}
	copy(f.ARI[:], b.ARI())
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// REJFields is the decoded form of a REJ.
type REJFields struct {
	LocalCommID      uint32
	RemoteCommID     uint32
	MessageRejected  MsgKind // 2 bits
	RejectInfoLength uint8   // 7 bits
	Reason           RejectReason
	ARI              [REJARISize]byte
	PrivateData      [REJPrivateDataSize]byte
}

// AttributeID returns AttrREJ.
func (*REJFields) AttributeID() AttributeID { return AttrREJ }

// Encode writes the message into the first DataSize bytes of b.
func (f *REJFields) Encode(b []byte) {
	m := REJ(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	m.SetMessageRejected(f.MessageRejected)
	m.SetRejectInfoLength(f.RejectInfoLength)
	m.SetReason(f.Reason)
	copy(m.ARI(), f.ARI[:])
	copy(m.PrivateData(), f.PrivateData[:])
}

// REP is a view of a REP (reply to a REQ): DataSize bytes.
type REP []byte

// AttributeID returns AttrREP.
func (REP) AttributeID() AttributeID { return AttrREP }

// LocalCommID returns the sender's (the passive side's) communication ID.
func (b REP) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b REP) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// RemoteCommID returns the receiver's communication ID, from its REQ.
func (b REP) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// SetRemoteCommID sets the receiver's communication ID.
func (b REP) SetRemoteCommID(v uint32) { be.PutUint32(b[4:], v) }

// LocalQKey returns the sender's Q_Key (used by RD only).
func (b REP) LocalQKey() wire.QKey { return wire.QKey(be.Uint32(b[8:])) }

// SetLocalQKey sets the sender's Q_Key.
func (b REP) SetLocalQKey(v wire.QKey) { be.PutUint32(b[8:], uint32(v)) }

// LocalQPN returns the sender's 24-bit QP number.
func (b REP) LocalQPN() wire.QPN { return wire.QPN(get24(b[12:])) }

// SetLocalQPN sets the sender's 24-bit QP number.
func (b REP) SetLocalQPN(v wire.QPN) { put24(b[12:], uint32(v)) }

// LocalEECN returns the sender's 24-bit EE context number (RD only; XRC
// puts the SRQ number here).
func (b REP) LocalEECN() uint32 { return get24(b[16:]) }

// SetLocalEECN sets the sender's 24-bit EE context number.
func (b REP) SetLocalEECN(v uint32) { put24(b[16:], v) }

// StartingPSN returns the 24-bit PSN the sender's first request will carry.
func (b REP) StartingPSN() wire.PSN { return wire.PSN(get24(b[20:])) }

// SetStartingPSN sets the 24-bit starting PSN.
func (b REP) SetStartingPSN(v wire.PSN) { put24(b[20:], uint32(v)) }

// VendorID returns the 24-bit vendor ID (IBTA 1.4), which the REP spreads
// over the bytes after LocalQPN, LocalEECN and StartingPSN.
func (b REP) VendorID() uint32 { return uint32(b[15])<<16 | uint32(b[19])<<8 | uint32(b[23]) }

// SetVendorID sets the 24-bit vendor ID.
func (b REP) SetVendorID(v uint32) { b[15], b[19], b[23] = byte(v>>16), byte(v>>8), byte(v) }

// ResponderResources returns how many RDMA reads and atomics the sender
// accepts in flight as responder.
func (b REP) ResponderResources() uint8 { return b[24] }

// SetResponderResources sets the responder resources.
func (b REP) SetResponderResources(v uint8) { b[24] = v }

// InitiatorDepth returns how many RDMA reads and atomics the sender will
// have in flight as requester.
func (b REP) InitiatorDepth() uint8 { return b[25] }

// SetInitiatorDepth sets the initiator depth.
func (b REP) SetInitiatorDepth(v uint8) { b[25] = v }

// TargetACKDelay returns the 5-bit maximum delay before the sender's HCA
// acknowledges a request: 4.096 us * 2^value.
func (b REP) TargetACKDelay() uint8 { return getBits(b[26], 3, 5) }

// SetTargetACKDelay sets the 5-bit target ACK delay.
func (b REP) SetTargetACKDelay(v uint8) { setBits(&b[26], 3, 5, v) }

// FailoverAccepted returns the 2-bit answer to the REQ's alternate path:
// 0 accepted, 1 failover not supported, 2 rejected.
func (b REP) FailoverAccepted() uint8 { return getBits(b[26], 1, 2) }

// SetFailoverAccepted sets the 2-bit failover accepted field.
func (b REP) SetFailoverAccepted(v uint8) { setBits(&b[26], 1, 2, v) }

// EndToEndFlowControl reports whether the sender's receive queue generates
// end-to-end flow control credits.
func (b REP) EndToEndFlowControl() bool { return getBit(b[26], 0) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (b REP) SetEndToEndFlowControl(v bool) { setBit(&b[26], 0, v) }

// RNRRetryCount returns the 3-bit RNR NAK retry count (7 = forever).
func (b REP) RNRRetryCount() uint8 { return getBits(b[27], 5, 3) }

// SetRNRRetryCount sets the 3-bit RNR retry count.
func (b REP) SetRNRRetryCount(v uint8) { setBits(&b[27], 5, 3, v) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (b REP) SRQ() bool { return getBit(b[27], 4) }

// SetSRQ sets the SRQ bit.
func (b REP) SetSRQ(v bool) { setBit(&b[27], 4, v) }

// LocalCAGUID returns the GUID of the sender's channel adapter.
func (b REP) LocalCAGUID() uint64 { return be.Uint64(b[28:]) }

// SetLocalCAGUID sets the GUID of the sender's channel adapter.
func (b REP) SetLocalCAGUID(v uint64) { be.PutUint64(b[28:], v) }

// PrivateData returns the REPPrivateDataSize bytes of private data,
// aliasing b.
func (b REP) PrivateData() []byte { return b[36:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than REPPrivateDataSize.
func (b REP) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b REP) Fields() REPFields {
	f := REPFields{
		LocalCommID:         b.LocalCommID(),
		RemoteCommID:        b.RemoteCommID(),
		LocalQKey:           b.LocalQKey(),
		LocalQPN:            b.LocalQPN(),
		LocalEECN:           b.LocalEECN(),
		StartingPSN:         b.StartingPSN(),
		VendorID:            b.VendorID(),
		ResponderResources:  b.ResponderResources(),
		InitiatorDepth:      b.InitiatorDepth(),
		TargetACKDelay:      b.TargetACKDelay(),
		FailoverAccepted:    b.FailoverAccepted(),
		EndToEndFlowControl: b.EndToEndFlowControl(),
		RNRRetryCount:       b.RNRRetryCount(),
		SRQ:                 b.SRQ(),
		LocalCAGUID:         b.LocalCAGUID(),
	}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// REPFields is the decoded form of a REP.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           wire.QKey
	LocalQPN            wire.QPN // 24 bits
	LocalEECN           uint32   // 24 bits
	StartingPSN         wire.PSN // 24 bits
	VendorID            uint32   // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataSize]byte
}

// AttributeID returns AttrREP.
func (*REPFields) AttributeID() AttributeID { return AttrREP }

// Encode writes the message into the first DataSize bytes of b.
func (f *REPFields) Encode(b []byte) {
	m := REP(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	m.SetLocalQKey(f.LocalQKey)
	m.SetLocalQPN(f.LocalQPN)
	m.SetLocalEECN(f.LocalEECN)
	m.SetStartingPSN(f.StartingPSN)
	m.SetVendorID(f.VendorID)
	m.SetResponderResources(f.ResponderResources)
	m.SetInitiatorDepth(f.InitiatorDepth)
	m.SetTargetACKDelay(f.TargetACKDelay)
	m.SetFailoverAccepted(f.FailoverAccepted)
	m.SetEndToEndFlowControl(f.EndToEndFlowControl)
	m.SetRNRRetryCount(f.RNRRetryCount)
	m.SetSRQ(f.SRQ)
	m.SetLocalCAGUID(f.LocalCAGUID)
	copy(m.PrivateData(), f.PrivateData[:])
}

// RTU is a view of an RTU (ready to use): DataSize bytes.
type RTU []byte

// AttributeID returns AttrRTU.
func (RTU) AttributeID() AttributeID { return AttrRTU }

// LocalCommID returns the sender's communication ID.
func (b RTU) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b RTU) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// RemoteCommID returns the receiver's communication ID.
func (b RTU) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// SetRemoteCommID sets the receiver's communication ID.
func (b RTU) SetRemoteCommID(v uint32) { be.PutUint32(b[4:], v) }

// PrivateData returns the RTUPrivateDataSize bytes of private data,
// aliasing b.
func (b RTU) PrivateData() []byte { return b[8:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than RTUPrivateDataSize.
func (b RTU) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b RTU) Fields() RTUFields {
	f := RTUFields{LocalCommID: b.LocalCommID(), RemoteCommID: b.RemoteCommID()}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// RTUFields is the decoded form of an RTU.
type RTUFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataSize]byte
}

// AttributeID returns AttrRTU.
func (*RTUFields) AttributeID() AttributeID { return AttrRTU }

// Encode writes the message into the first DataSize bytes of b.
func (f *RTUFields) Encode(b []byte) {
	m := RTU(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	copy(m.PrivateData(), f.PrivateData[:])
}

// DREQ is a view of a DREQ (disconnect request): DataSize bytes.
type DREQ []byte

// AttributeID returns AttrDREQ.
func (DREQ) AttributeID() AttributeID { return AttrDREQ }

// LocalCommID returns the sender's communication ID.
func (b DREQ) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b DREQ) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// RemoteCommID returns the receiver's communication ID.
func (b DREQ) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// SetRemoteCommID sets the receiver's communication ID.
func (b DREQ) SetRemoteCommID(v uint32) { be.PutUint32(b[4:], v) }

// RemoteQPN returns the receiver's 24-bit QP number (or EE context number
// for RD), which lets it check that the DREQ is for the right connection.
func (b DREQ) RemoteQPN() wire.QPN { return wire.QPN(get24(b[8:])) }

// SetRemoteQPN sets the receiver's 24-bit QP or EE context number.
func (b DREQ) SetRemoteQPN(v wire.QPN) { put24(b[8:], uint32(v)) }

// PrivateData returns the DREQPrivateDataSize bytes of private data,
// aliasing b.
func (b DREQ) PrivateData() []byte { return b[12:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than DREQPrivateDataSize.
func (b DREQ) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b DREQ) Fields() DREQFields {
	f := DREQFields{LocalCommID: b.LocalCommID(), RemoteCommID: b.RemoteCommID(), RemoteQPN: b.RemoteQPN()}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// DREQFields is the decoded form of a DREQ.
type DREQFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    wire.QPN // 24 bits, QPN or EECN
	PrivateData  [DREQPrivateDataSize]byte
}

// AttributeID returns AttrDREQ.
func (*DREQFields) AttributeID() AttributeID { return AttrDREQ }

// Encode writes the message into the first DataSize bytes of b.
func (f *DREQFields) Encode(b []byte) {
	m := DREQ(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	m.SetRemoteQPN(f.RemoteQPN)
	copy(m.PrivateData(), f.PrivateData[:])
}

// DREP is a view of a DREP (reply to a DREQ): DataSize bytes.
type DREP []byte

// AttributeID returns AttrDREP.
func (DREP) AttributeID() AttributeID { return AttrDREP }

// LocalCommID returns the sender's communication ID.
func (b DREP) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b DREP) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// RemoteCommID returns the receiver's communication ID.
func (b DREP) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// SetRemoteCommID sets the receiver's communication ID.
func (b DREP) SetRemoteCommID(v uint32) { be.PutUint32(b[4:], v) }

// PrivateData returns the DREPPrivateDataSize bytes of private data,
// aliasing b.
func (b DREP) PrivateData() []byte { return b[8:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than DREPPrivateDataSize.
func (b DREP) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b DREP) Fields() DREPFields {
	f := DREPFields{LocalCommID: b.LocalCommID(), RemoteCommID: b.RemoteCommID()}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// DREPFields is the decoded form of a DREP.
type DREPFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataSize]byte
}

// AttributeID returns AttrDREP.
func (*DREPFields) AttributeID() AttributeID { return AttrDREP }

// Encode writes the message into the first DataSize bytes of b.
func (f *DREPFields) Encode(b []byte) {
	m := DREP(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	copy(m.PrivateData(), f.PrivateData[:])
}
