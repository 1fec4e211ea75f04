// The REQ message (IBTA table 106): the active side's connect request,
// carrying its QP, the transport parameters and up to two paths, and the
// first 92 bytes of private data (rdma_cm's CMAHeader, then the user's).

package mad

import "github.com/softrdma/softrdma/wire"

// Sizes of REQ parts.
const (
	REQPathSize        = 44 // one path description inside a REQ
	REQPrivateDataSize = 92
)

// Offsets inside a REQ.
const (
	reqPrimaryPath   = 52
	reqAlternatePath = reqPrimaryPath + REQPathSize
	reqPrivateData   = reqAlternatePath + REQPathSize // 140
)

// Transport service types of a REQ.
const (
	TransportRC = 0 // reliable connection
	TransportUC = 1 // unreliable connection
	TransportRD = 2 // reliable datagram
	// TransportExtended says ExtendedTransportType holds the type.
	TransportExtended = 3
)

// ExtTransportXRC is the extended transport type of XRC.
const ExtTransportXRC = 1

// REQ is a view of a REQ message: DataSize bytes.
type REQ []byte

// AttributeID returns AttrREQ.
func (REQ) AttributeID() AttributeID { return AttrREQ }

// LocalCommID returns the sender's communication ID for this connection.
func (b REQ) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// SetLocalCommID sets the sender's communication ID.
func (b REQ) SetLocalCommID(v uint32) { be.PutUint32(b[0:], v) }

// VendorID returns the 24-bit vendor ID (IBTA 1.4; zero when unused).
func (b REQ) VendorID() uint32 { return get24(b[5:]) }

// SetVendorID sets the 24-bit vendor ID.
func (b REQ) SetVendorID(v uint32) { put24(b[5:], v) }

// ServiceID returns the service ID the request is for.
func (b REQ) ServiceID() uint64 { return be.Uint64(b[8:]) }

// SetServiceID sets the service ID.
func (b REQ) SetServiceID(v uint64) { be.PutUint64(b[8:], v) }

// LocalCAGUID returns the GUID of the sender's channel adapter.
func (b REQ) LocalCAGUID() uint64 { return be.Uint64(b[16:]) }

// SetLocalCAGUID sets the GUID of the sender's channel adapter.
func (b REQ) SetLocalCAGUID(v uint64) { be.PutUint64(b[16:], v) }

// LocalQKey returns the sender's Q_Key (used by RD only).
func (b REQ) LocalQKey() wire.QKey { return wire.QKey(be.Uint32(b[28:])) }

// SetLocalQKey sets the sender's Q_Key.
func (b REQ) SetLocalQKey(v wire.QKey) { be.PutUint32(b[28:], uint32(v)) }

// LocalQPN returns the sender's 24-bit QP number.
func (b REQ) LocalQPN() wire.QPN { return wire.QPN(get24(b[32:])) }

// SetLocalQPN sets the sender's 24-bit QP number.
func (b REQ) SetLocalQPN(v wire.QPN) { put24(b[32:], uint32(v)) }

// ResponderResources returns how many RDMA reads and atomics the sender
// accepts in flight as responder.
func (b REQ) ResponderResources() uint8 { return b[35] }

// SetResponderResources sets the responder resources.
func (b REQ) SetResponderResources(v uint8) { b[35] = v }

// LocalEECN returns the sender's 24-bit EE context number (RD only).
func (b REQ) LocalEECN() uint32 { return get24(b[36:]) }

// SetLocalEECN sets the sender's EE context number.
func (b REQ) SetLocalEECN(v uint32) { put24(b[36:], v) }

// InitiatorDepth returns how many RDMA reads and atomics the sender will
// have in flight as requester.
func (b REQ) InitiatorDepth() uint8 { return b[39] }

// SetInitiatorDepth sets the initiator depth.
func (b REQ) SetInitiatorDepth(v uint8) { b[39] = v }

// RemoteEECN returns the receiver's 24-bit EE context number (RD only).
func (b REQ) RemoteEECN() uint32 { return get24(b[40:]) }

// SetRemoteEECN sets the receiver's EE context number.
func (b REQ) SetRemoteEECN(v uint32) { put24(b[40:], v) }

// RemoteCMResponseTimeout returns the 5-bit time the receiver's CM may take
// to answer: 4.096 us * 2^value.
func (b REQ) RemoteCMResponseTimeout() uint8 { return getBits(b[43], 3, 5) }

// SetRemoteCMResponseTimeout sets the 5-bit remote CM response timeout.
func (b REQ) SetRemoteCMResponseTimeout(v uint8) { setBits(&b[43], 3, 5, v) }

// TransportServiceType returns the 2-bit transport service type
// (TransportRC, TransportUC, TransportRD or TransportExtended).
func (b REQ) TransportServiceType() uint8 { return getBits(b[43], 1, 2) }

// SetTransportServiceType sets the 2-bit transport service type.
func (b REQ) SetTransportServiceType(v uint8) { setBits(&b[43], 1, 2, v) }

// EndToEndFlowControl reports whether the sender's receive queue generates
// end-to-end flow control credits.
func (b REQ) EndToEndFlowControl() bool { return getBit(b[43], 0) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (b REQ) SetEndToEndFlowControl(v bool) { setBit(&b[43], 0, v) }

// StartingPSN returns the 24-bit PSN the sender's first request will carry.
func (b REQ) StartingPSN() wire.PSN { return wire.PSN(get24(b[44:])) }

// SetStartingPSN sets the 24-bit starting PSN.
func (b REQ) SetStartingPSN(v wire.PSN) { put24(b[44:], uint32(v)) }

// LocalCMResponseTimeout returns the 5-bit time the sender's CM may take to
// answer: 4.096 us * 2^value.
func (b REQ) LocalCMResponseTimeout() uint8 { return getBits(b[47], 3, 5) }

// SetLocalCMResponseTimeout sets the 5-bit local CM response timeout.
func (b REQ) SetLocalCMResponseTimeout(v uint8) { setBits(&b[47], 3, 5, v) }

// RetryCount returns the 3-bit transport retry count for timeouts.
func (b REQ) RetryCount() uint8 { return getBits(b[47], 0, 3) }

// SetRetryCount sets the 3-bit retry count.
func (b REQ) SetRetryCount(v uint8) { setBits(&b[47], 0, 3, v) }

// PKey returns the partition key.
func (b REQ) PKey() uint16 { return be.Uint16(b[48:]) }

// SetPKey sets the partition key.
func (b REQ) SetPKey(v uint16) { be.PutUint16(b[48:], v) }

// PathMTU returns the 4-bit path MTU code (1 = 256 bytes ... 5 = 4096).
func (b REQ) PathMTU() uint8 { return getBits(b[50], 4, 4) }

// SetPathMTU sets the 4-bit path MTU code.
func (b REQ) SetPathMTU(v uint8) { setBits(&b[50], 4, 4, v) }

// RDCExists reports whether the sender has an RD channel for the
// connection (RD only).
func (b REQ) RDCExists() bool { return getBit(b[50], 3) }

// SetRDCExists sets the RDC exists bit.
func (b REQ) SetRDCExists(v bool) { setBit(&b[50], 3, v) }

// RNRRetryCount returns the 3-bit RNR NAK retry count (7 = forever).
func (b REQ) RNRRetryCount() uint8 { return getBits(b[50], 0, 3) }

// SetRNRRetryCount sets the 3-bit RNR retry count.
func (b REQ) SetRNRRetryCount(v uint8) { setBits(&b[50], 0, 3, v) }

// MaxCMRetries returns the 4-bit number of times the sender's CM resends a
// REQ before it gives up.
func (b REQ) MaxCMRetries() uint8 { return getBits(b[51], 4, 4) }

// SetMaxCMRetries sets the 4-bit maximum CM retries.
func (b REQ) SetMaxCMRetries(v uint8) { setBits(&b[51], 4, 4, v) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (b REQ) SRQ() bool { return getBit(b[51], 3) }

// SetSRQ sets the SRQ bit.
func (b REQ) SetSRQ(v bool) { setBit(&b[51], 3, v) }

// ExtendedTransportType returns the 3-bit extended transport type, used when
// TransportServiceType is TransportExtended (ExtTransportXRC).
func (b REQ) ExtendedTransportType() uint8 { return getBits(b[51], 0, 3) }

// SetExtendedTransportType sets the 3-bit extended transport type.
func (b REQ) SetExtendedTransportType(v uint8) { setBits(&b[51], 0, 3, v) }

// PrimaryPath returns a view of the primary path.
func (b REQ) PrimaryPath() REQPath { return REQPath(b[reqPrimaryPath:reqAlternatePath]) }

// AlternatePath returns a view of the alternate path (all zero when there
// is none).
func (b REQ) AlternatePath() REQPath { return REQPath(b[reqAlternatePath:reqPrivateData]) }

// SAPSupported reports whether the sender supports symmetric alternate
// path migration (IBTA 1.3; a bit beside the alternate local ACK timeout).
func (b REQ) SAPSupported() bool { return getBit(b[139], 2) }

// SetSAPSupported sets the SAP supported bit.
func (b REQ) SetSAPSupported(v bool) { setBit(&b[139], 2, v) }

// PrivateData returns the REQPrivateDataSize bytes of private data. The
// slice aliases b, so writing to it changes the message.
func (b REQ) PrivateData() []byte { return b[reqPrivateData:DataSize] }

// SetPrivateData copies p into the private data and zeroes the rest. It
// reports false, changing nothing, if p is longer than REQPrivateDataSize.
func (b REQ) SetPrivateData(p []byte) bool { return setBytes(b.PrivateData(), p) }

// Fields returns the decoded message.
func (b REQ) Fields() REQFields {
	f := REQFields{
		LocalCommID:             b.LocalCommID(),
		VendorID:                b.VendorID(),
		ServiceID:               b.ServiceID(),
		LocalCAGUID:             b.LocalCAGUID(),
		LocalQKey:               b.LocalQKey(),
		LocalQPN:                b.LocalQPN(),
		ResponderResources:      b.ResponderResources(),
		LocalEECN:               b.LocalEECN(),
		InitiatorDepth:          b.InitiatorDepth(),
		RemoteEECN:              b.RemoteEECN(),
		RemoteCMResponseTimeout: b.RemoteCMResponseTimeout(),
		TransportServiceType:    b.TransportServiceType(),
		EndToEndFlowControl:     b.EndToEndFlowControl(),
		StartingPSN:             b.StartingPSN(),
		LocalCMResponseTimeout:  b.LocalCMResponseTimeout(),
		RetryCount:              b.RetryCount(),
		PKey:                    b.PKey(),
		PathMTU:                 b.PathMTU(),
		RDCExists:               b.RDCExists(),
		RNRRetryCount:           b.RNRRetryCount(),
		MaxCMRetries:            b.MaxCMRetries(),
		SRQ:                     b.SRQ(),
		ExtendedTransportType:   b.ExtendedTransportType(),
		PrimaryPath:             b.PrimaryPath().Fields(),
		AlternatePath:           b.AlternatePath().Fields(),
		SAPSupported:            b.SAPSupported(),
	}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// REQFields is the decoded form of a REQ. Fields narrower than their Go
// type keep only their low bits when encoded.
type REQFields struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               wire.QKey
	LocalQPN                wire.QPN // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportServiceType    uint8  // 2 bits
	EndToEndFlowControl     bool
	StartingPSN             wire.PSN // 24 bits
	LocalCMResponseTimeout  uint8    // 5 bits
	RetryCount              uint8    // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	PrimaryPath             REQPathFields
	AlternatePath           REQPathFields
	SAPSupported            bool
	PrivateData             [REQPrivateDataSize]byte
}

// AttributeID returns AttrREQ.
func (*REQFields) AttributeID() AttributeID { return AttrREQ }

// Encode writes the message into the first DataSize bytes of b.
func (f *REQFields) Encode(b []byte) {
	m := REQ(b[:DataSize])
	clear(m)
	m.SetLocalCommID(f.LocalCommID)
	m.SetVendorID(f.VendorID)
	m.SetServiceID(f.ServiceID)
	m.SetLocalCAGUID(f.LocalCAGUID)
	m.SetLocalQKey(f.LocalQKey)
	m.SetLocalQPN(f.LocalQPN)
	m.SetResponderResources(f.ResponderResources)
	m.SetLocalEECN(f.LocalEECN)
	m.SetInitiatorDepth(f.InitiatorDepth)
	m.SetRemoteEECN(f.RemoteEECN)
	m.SetRemoteCMResponseTimeout(f.RemoteCMResponseTimeout)
	m.SetTransportServiceType(f.TransportServiceType)
	m.SetEndToEndFlowControl(f.EndToEndFlowControl)
	m.SetStartingPSN(f.StartingPSN)
	m.SetLocalCMResponseTimeout(f.LocalCMResponseTimeout)
	m.SetRetryCount(f.RetryCount)
	m.SetPKey(f.PKey)
	m.SetPathMTU(f.PathMTU)
	m.SetRDCExists(f.RDCExists)
	m.SetRNRRetryCount(f.RNRRetryCount)
	m.SetMaxCMRetries(f.MaxCMRetries)
	m.SetSRQ(f.SRQ)
	m.SetExtendedTransportType(f.ExtendedTransportType)
	f.PrimaryPath.Encode(m.PrimaryPath())
	f.AlternatePath.Encode(m.AlternatePath())
	m.SetSAPSupported(f.SAPSupported)
	copy(m.PrivateData(), f.PrivateData[:])
}

// REQPath is a view of one path inside a REQ: REQPathSize bytes.
type REQPath []byte

// LocalLID returns the sender's port LID (0xFFFF, the permissive LID, on
// RoCE).
func (p REQPath) LocalLID() uint16 { return be.Uint16(p[0:]) }

// SetLocalLID sets the sender's port LID.
func (p REQPath) SetLocalLID(v uint16) { be.PutUint16(p[0:], v) }

// RemoteLID returns the receiver's port LID.
func (p REQPath) RemoteLID() uint16 { return be.Uint16(p[2:]) }

// SetRemoteLID sets the receiver's port LID.
func (p REQPath) SetRemoteLID(v uint16) { be.PutUint16(p[2:], v) }

// LocalGID returns the sender's port GID. On RoCEv2 with IPv4 it is the
// IPv4-mapped IPv6 address (::ffff:a.b.c.d).
func (p REQPath) LocalGID() (g wire.GID) { copy(g[:], p[4:20]); return g }

// SetLocalGID sets the sender's port GID.
func (p REQPath) SetLocalGID(g wire.GID) { copy(p[4:20], g[:]) }

// RemoteGID returns the receiver's port GID.
func (p REQPath) RemoteGID() (g wire.GID) { copy(g[:], p[20:36]); return g }

// SetRemoteGID sets the receiver's port GID.
func (p REQPath) SetRemoteGID(g wire.GID) { copy(p[20:36], g[:]) }

// FlowLabel returns the 20-bit flow label.
func (p REQPath) FlowLabel() uint32 { return be.Uint32(p[36:]) >> 12 }

// SetFlowLabel sets the 20-bit flow label.
func (p REQPath) SetFlowLabel(v uint32) {
	be.PutUint32(p[36:], be.Uint32(p[36:])&0xFFF|v<<12)
}

// PacketRate returns the 6-bit static rate code.
func (p REQPath) PacketRate() uint8 { return getBits(p[39], 0, 6) }

// SetPacketRate sets the 6-bit packet rate.
func (p REQPath) SetPacketRate(v uint8) { setBits(&p[39], 0, 6, v) }

// TrafficClass returns the traffic class.
func (p REQPath) TrafficClass() uint8 { return p[40] }

// SetTrafficClass sets the traffic class.
func (p REQPath) SetTrafficClass(v uint8) { p[40] = v }

// HopLimit returns the hop limit.
func (p REQPath) HopLimit() uint8 { return p[41] }

// SetHopLimit sets the hop limit.
func (p REQPath) SetHopLimit(v uint8) { p[41] = v }

// SL returns the 4-bit service level.
func (p REQPath) SL() uint8 { return getBits(p[42], 4, 4) }

// SetSL sets the 4-bit service level.
func (p REQPath) SetSL(v uint8) { setBits(&p[42], 4, 4, v) }

// SubnetLocal reports whether the path stays inside the sender's subnet.
func (p REQPath) SubnetLocal() bool { return getBit(p[42], 3) }

// SetSubnetLocal sets the subnet local bit.
func (p REQPath) SetSubnetLocal(v bool) { setBit(&p[42], 3, v) }

// LocalACKTimeout returns the 5-bit transport ACK timeout:
// 4.096 us * 2^value.
func (p REQPath) LocalACKTimeout() uint8 { return getBits(p[43], 3, 5) }

// SetLocalACKTimeout sets the 5-bit local ACK timeout.
func (p REQPath) SetLocalACKTimeout(v uint8) { setBits(&p[43], 3, 5, v) }

// Fields returns the decoded path.
func (p REQPath) Fields() REQPathFields {
	return REQPathFields{
		LocalLID:        p.LocalLID(),
		RemoteLID:       p.RemoteLID(),
		LocalGID:        p.LocalGID(),
		RemoteGID:       p.RemoteGID(),
		FlowLabel:       p.FlowLabel(),
		PacketRate:      p.PacketRate(),
		TrafficClass:    p.TrafficClass(),
		HopLimit:        p.HopLimit(),
		SL:              p.SL(),
		SubnetLocal:     p.SubnetLocal(),
		LocalACKTimeout: p.LocalACKTimeout(),
	}
}

// REQPathFields is the decoded form of a REQPath.
type REQPathFields struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        wire.GID
	RemoteGID       wire.GID
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits
}

// Encode writes the path into the first REQPathSize bytes of b. It leaves
// the bits of b that are not path fields as they are: in the alternate path
// one of them is the REQ's SAP supported bit.
func (f *REQPathFields) Encode(b []byte) {
	p := REQPath(b[:REQPathSize])
	p.SetLocalLID(f.LocalLID)
	p.SetRemoteLID(f.RemoteLID)
	p.SetLocalGID(f.LocalGID)
	p.SetRemoteGID(f.RemoteGID)
	p.SetFlowLabel(f.FlowLabel)
	p.SetPacketRate(f.PacketRate)
	p.SetTrafficClass(f.TrafficClass)
	p.SetHopLimit(f.HopLimit)
	p.SetSL(f.SL)
	p.SetSubnetLocal(f.SubnetLocal)
	p.SetLocalACKTimeout(f.LocalACKTimeout)
}
