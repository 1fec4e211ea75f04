// The CM messages that load an alternate path on an established connection
// (IBTA 12.8.2, tables 115 and 116): LAP proposes one, APR answers it.

package mad

import (
	"fmt"

	"github.com/softrdma/softrdma/wire"
)

// Sizes of the LAP's and APR's variable parts.
const (
	LAPPrivateDataSize = 168
	APRAddInfoSize     = 72
	APRPrivateDataSize = 148
)

// LAP is a view of a LAP (load alternate path): DataSize bytes.
type LAP []byte

// AttributeID returns AttrLAP.
func (LAP) AttributeID() AttributeID { return AttrLAP }

// LocalCommID returns the sender's communication ID.
func (b LAP) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// RemoteCommID returns the receiver's communication ID.
func (b LAP) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// RemoteQPN returns the receiver's 24-bit QP number (or EE context number).
func (b LAP) RemoteQPN() wire.QPN { return wire.QPN(get24(b[12:])) }

// RemoteCMResponseTimeout returns the 5-bit time the receiver takes to
// answer: 4.096 us * 2^value.
func (b LAP) RemoteCMResponseTimeout() uint8 { return getBits(b[15], 3, 5) }

// AlternatePath returns the proposed alternate path, from the sender's side
// (its local LID and GID are the sender's).
func (b LAP) AlternatePath() REQPathFields {
	var f REQPathFields
	f.LocalLID, f.RemoteLID = be.Uint16(b[20:]), be.Uint16(b[22:])
	copy(f.LocalGID[:], b[24:40])
	copy(f.RemoteGID[:], b[40:56])
	f.FlowLabel = be.Uint32(b[56:]) >> 12
	f.TrafficClass = b[59]
	f.HopLimit = b[60]
	f.PacketRate = getBits(b[61], 0, 6)
	f.SL = getBits(b[62], 4, 4)
	f.SubnetLocal = getBits(b[62], 3, 1) != 0
	f.LocalACKTimeout = getBits(b[63], 3, 5)
	return f
}

// PrivateData returns the LAPPrivateDataSize bytes of private data,
// aliasing b.
func (b LAP) PrivateData() []byte { return b[64:DataSize] }

// Fields returns the decoded message.
func (b LAP) Fields() LAPFields {
	f := LAPFields{LocalCommID: b.LocalCommID(), RemoteCommID: b.RemoteCommID(), RemoteQPN: b.RemoteQPN(),
		RemoteCMResponseTimeout: b.RemoteCMResponseTimeout(), AlternatePath: b.AlternatePath()}
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// LAPFields is the decoded form of a LAP.
type LAPFields struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               wire.QPN // 24 bits
	RemoteCMResponseTimeout uint8    // 5 bits
	// AlternatePath is the path proposed; its fields are those of a REQ's
	// path, laid out differently in the LAP.
	AlternatePath REQPathFields
	PrivateData   [LAPPrivateDataSize]byte
}

// AttributeID returns AttrLAP.
func (*LAPFields) AttributeID() AttributeID { return AttrLAP }

// Encode writes the message into the first DataSize bytes of b.
func (f *LAPFields) Encode(b []byte) {
	m := LAP(b[:DataSize])
	clear(m)
	be.PutUint32(m[0:], f.LocalCommID)
	be.PutUint32(m[4:], f.RemoteCommID)
	put24(m[12:], uint32(f.RemoteQPN))
	setBits(&m[15], 3, 5, f.RemoteCMResponseTimeout)
	p := &f.AlternatePath
	be.PutUint16(m[20:], p.LocalLID)
	be.PutUint16(m[22:], p.RemoteLID)
	copy(m[24:40], p.LocalGID[:])
	copy(m[40:56], p.RemoteGID[:])
	be.PutUint32(m[56:], (p.FlowLabel&0xFFFFF)<<12|uint32(p.TrafficClass))
	m[60] = p.HopLimit
	setBits(&m[61], 0, 6, p.PacketRate)
	setBits(&m[62], 4, 4, p.SL)
	setBits(&m[62], 3, 1, b2u8(p.SubnetLocal))
	setBits(&m[63], 3, 5, p.LocalACKTimeout)
	copy(m.PrivateData(), f.PrivateData[:])
}

func b2u8(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// APStatus is an APR's answer to a LAP (IBTA table 117).
type APStatus uint8

// AP statuses.
const (
	APLoaded            APStatus = 0 // the alternate path was loaded
	APInvalidCommID     APStatus = 1
	APNotSupported      APStatus = 2
	APRejected          APStatus = 3
	APRedirect          APStatus = 4
	APIsCurrent         APStatus = 5 // the proposed path is the current one
	APInvalidQPN        APStatus = 6
	APInvalidLID        APStatus = 7
	APInvalidGID        APStatus = 8
	APInvalidFlowLabel  APStatus = 9
	APInvalidTClass     APStatus = 10
	APInvalidHopLimit   APStatus = 11
	APInvalidPacketRate APStatus = 12
	APInvalidSL         APStatus = 13
)

var apStatusNames = [...]string{"AP loaded", "invalid communication ID", "AP not supported", "AP rejected",
	"redirect", "AP is current", "invalid QPN", "invalid LID", "invalid GID", "invalid flow label",
	"invalid traffic class", "invalid hop limit", "invalid packet rate", "invalid SL"}

// String names the status.
func (s APStatus) String() string {
	if int(s) < len(apStatusNames) {
		return apStatusNames[s]
	}
	return fmt.Sprintf("APStatus(%d)", uint8(s))
}

// APR is a view of an APR (alternate path response): DataSize bytes.
type APR []byte

// AttributeID returns AttrAPR.
func (APR) AttributeID() AttributeID { return AttrAPR }

// LocalCommID returns the sender's communication ID.
func (b APR) LocalCommID() uint32 { return be.Uint32(b[0:]) }

// RemoteCommID returns the receiver's communication ID.
func (b APR) RemoteCommID() uint32 { return be.Uint32(b[4:]) }

// AdditionalInfoLength returns how many bytes of AdditionalInfo are used.
func (b APR) AdditionalInfoLength() uint8 { return b[8] }

// Status returns the answer to the LAP.
func (b APR) Status() APStatus { return APStatus(b[9]) }

// AdditionalInfo returns the APRAddInfoSize bytes of additional
// information, aliasing b.
func (b APR) AdditionalInfo() []byte { return b[12:84] }

// PrivateData returns the APRPrivateDataSize bytes of private data,
// aliasing b.
func (b APR) PrivateData() []byte { return b[84:DataSize] }

// Fields returns the decoded message.
func (b APR) Fields() APRFields {
	f := APRFields{LocalCommID: b.LocalCommID(), RemoteCommID: b.RemoteCommID(),
		AdditionalInfoLength: b.AdditionalInfoLength(), Status: b.Status()}
	copy(f.AdditionalInfo[:], b.AdditionalInfo())
	copy(f.PrivateData[:], b.PrivateData())
	return f
}

// APRFields is the decoded form of an APR.
type APRFields struct {
	LocalCommID          uint32
	RemoteCommID         uint32
	AdditionalInfoLength uint8
	Status               APStatus
	AdditionalInfo       [APRAddInfoSize]byte
	PrivateData          [APRPrivateDataSize]byte
}

// AttributeID returns AttrAPR.
func (*APRFields) AttributeID() AttributeID { return AttrAPR }

// Encode writes the message into the first DataSize bytes of b.
func (f *APRFields) Encode(b []byte) {
	m := APR(b[:DataSize])
	clear(m)
	be.PutUint32(m[0:], f.LocalCommID)
	be.PutUint32(m[4:], f.RemoteCommID)
	m[8], m[9] = f.AdditionalInfoLength, uint8(f.Status)
	copy(m.AdditionalInfo(), f.AdditionalInfo[:])
	copy(m.PrivateData(), f.PrivateData[:])
}
