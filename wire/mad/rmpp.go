// The RMPP header (IBTA volume 1 section 13.6.2): the 12 bytes after the
// MAD header of classes that send more than one MAD's worth of data, the SA
// among them, which segment, acknowledge, stop and abort a transfer.

package mad

import "fmt"

// RMPPVersion is the version of the reliable multi-packet protocol.
const RMPPVersion = 1

// RMPPType is the type of an RMPP packet.
type RMPPType uint8

// RMPP packet types.
const (
	RMPPTypeData  RMPPType = 1 // a segment of the payload
	RMPPTypeAck   RMPPType = 2 // the receiver acknowledges and opens its window
	RMPPTypeStop  RMPPType = 3 // the receiver stops the transfer (resources)
	RMPPTypeAbort RMPPType = 4 // either side ends the transfer on an error
)

// String returns "DATA", "ACK", "STOP", "ABORT" or the number.
func (t RMPPType) String() string {
	switch t {
	case RMPPTypeData:
		return "DATA"
	case RMPPTypeAck:
		return "ACK"
	case RMPPTypeStop:
		return "STOP"
	case RMPPTypeAbort:
		return "ABORT"
	}
	return fmt.Sprintf("RMPPType(%d)", uint8(t))
}

// Bits of RMPPHeader.Flags.
const (
	RMPPFlagActive = 1 << 0 // the MAD is part of an RMPP transfer
	RMPPFlagFirst  = 1 << 1 // the first DATA segment
	RMPPFlagLast   = 1 << 2 // the last DATA segment
)

// RMPPNoRespTime is the RRespTime value that says no time is given.
const RMPPNoRespTime = 0x1F

// RMPP status codes of STOP and ABORT packets (IBTA volume 1 table 171).
const (
	RMPPStatusOK              = 0
	RMPPStatusResourcesGone   = 1   // STOP: the receiver ran out of resources
	RMPPStatusTotalTimeTooBig = 118 // T2L: the transfer took too long
	RMPPStatusBadLength       = 119 // Last flag and PayloadLength disagree
	RMPPStatusBadFirst        = 120 // First flag and segment number disagree
	RMPPStatusBadType         = 121
	RMPPStatusBadWindow       = 122 // NewWindowLast smaller than the segment acknowledged
	RMPPStatusSegTooBig       = 123 // acknowledged a segment never sent
	RMPPStatusIllegalStatus   = 124
	RMPPStatusBadVersion      = 125
	RMPPStatusTooManyRetries  = 126
	RMPPStatusUnspecified     = 127
)

// RMPPHeader is the RMPP header. Its two 32-bit data words mean different
// things by type: a DATA segment carries its SegmentNumber (from 1) and
// the payload length (in the first segment, the whole payload's bytes
// counting each segment's class header; in the last, that segment's; else
// 0); an ACK carries the last segment received in order and NewWindowLast,
// the last segment the receiver will take; STOP and ABORT carry neither.
type RMPPHeader struct {
	Version   uint8
	Type      RMPPType
	RRespTime uint8 // 5 bits; RMPPNoRespTime: none given
	Flags     uint8 // 3 bits: RMPPFlag*
	Status    uint8
	// SegmentNumber is the DATA segment's number or, in an ACK, the last
	// segment received in order.
	SegmentNumber uint32
	// Length is a DATA segment's PayloadLength, or an ACK's NewWindowLast.
	Length uint32
}

// Active reports whether the RMPP Active flag is set.
func (h *RMPPHeader) Active() bool { return h.Flags&RMPPFlagActive != 0 }

// ParseRMPPHeader decodes an RMPP header from the first RMPPHeaderSize
// bytes of b (a MAD's bytes from RMPPHeaderOffset).
func ParseRMPPHeader(b []byte) (RMPPHeader, error) {
	if len(b) < RMPPHeaderSize {
		return RMPPHeader{}, truncated("RMPP header", b, RMPPHeaderSize)
	}
	return RMPPHeader{
		Version:       b[0],
		Type:          RMPPType(b[1]),
		RRespTime:     getBits(b[2], 3, 5),
		Flags:         getBits(b[2], 0, 3),
		Status:        b[3],
		SegmentNumber: be.Uint32(b[4:]),
		Length:        be.Uint32(b[8:]),
	}, nil
}

// Encode writes h into the first RMPPHeaderSize bytes of b.
func (h *RMPPHeader) Encode(b []byte) {
	b = b[:RMPPHeaderSize]
	b[0], b[1], b[2], b[3] = h.Version, uint8(h.Type), 0, h.Status
	setBits(&b[2], 3, 5, h.RRespTime)
	setBits(&b[2], 0, 3, h.Flags)
	be.PutUint32(b[4:], h.SegmentNumber)
	be.PutUint32(b[8:], h.Length)
}
