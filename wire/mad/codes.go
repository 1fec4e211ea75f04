// Code spaces carried inside CM messages: which message an MRA or REJ
// refers to, why a REJ refuses and how a SIDR_REP answers.

package mad

import "fmt"

// MsgKind says which message an MRA acknowledges or a REJ rejects.
type MsgKind uint8

// Message kinds.
const (
	MsgREQ   MsgKind = 0
	MsgREP   MsgKind = 1
	MsgOther MsgKind = 2 // a LAP for MRA; anything else for REJ
)

// String returns "REQ", "REP", "other" or the number.
func (k MsgKind) String() string {
	switch k {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other"
	}
	return fmt.Sprintf("MsgKind(%d)", uint8(k))
}

// RejectReason is the reason code of a REJ.
type RejectReason uint16

// Reject reasons. The ARI of some of them carries more detail, such as the
// acceptable value.
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4
	RejectUnsupported               RejectReason = 5 // request not supported
	RejectInvalidCommID             RejectReason = 6
	RejectInvalidCommInstance       RejectReason = 7
	RejectInvalidServiceID          RejectReason = 8 // nobody listens on it
	RejectInvalidTransportType      RejectReason = 9
	RejectStaleConnection           RejectReason = 10
	RejectRDCNotExist               RejectReason = 11
	RejectInvalidGID                RejectReason = 12
	RejectInvalidLID                RejectReason = 13
	RejectInvalidSL                 RejectReason = 14
	RejectInvalidTrafficClass       RejectReason = 15
	RejectInvalidHopLimit           RejectReason = 16
	RejectInvalidPacketRate         RejectReason = 17
	RejectInvalidAltGID             RejectReason = 18
	RejectInvalidAltLID             RejectReason = 19
	RejectInvalidAltSL              RejectReason = 20
	RejectInvalidAltTrafficClass    RejectReason = 21
	RejectInvalidAltHopLimit        RejectReason = 22
	RejectInvalidAltPacketRate      RejectReason = 23
	RejectPortCMRedirect            RejectReason = 24
	RejectPortRedirect              RejectReason = 25
	RejectInvalidMTU                RejectReason = 26
	RejectInsufficientRespResources RejectReason = 27
	RejectConsumer                  RejectReason = 28 // the application said no (rdma_reject)
	RejectInvalidRNRRetry           RejectReason = 29
	RejectDuplicateLocalCommID      RejectReason = 30
	RejectInvalidClassVersion       RejectReason = 31
	RejectInvalidFlowLabel          RejectReason = 32
	RejectInvalidAltFlowLabel       RejectReason = 33
	RejectVendorOptionNotSupported  RejectReason = 35
)

var rejectNames = map[RejectReason]string{
	RejectNoQP:                      "no QP",
	RejectNoEEC:                     "no EEC",
	RejectNoResources:               "no resources",
	RejectTimeout:                   "timeout",
	RejectUnsupported:               "unsupported request",
	RejectInvalidCommID:             "invalid comm ID",
	RejectInvalidCommInstance:       "invalid comm instance",
	RejectInvalidServiceID:          "invalid service ID",
	RejectInvalidTransportType:      "invalid transport service type",
	RejectStaleConnection:           "stale connection",
	RejectRDCNotExist:               "RDC does not exist",
	RejectInvalidGID:                "invalid primary GID",
	RejectInvalidLID:                "invalid primary LID",
	RejectInvalidSL:                 "invalid primary SL",
	RejectInvalidTrafficClass:       "invalid primary traffic class",
	RejectInvalidHopLimit:           "invalid primary hop limit",
	RejectInvalidPacketRate:         "invalid primary packet rate",
	RejectInvalidAltGID:             "invalid alternate GID",
	RejectInvalidAltLID:             "invalid alternate LID",
	RejectInvalidAltSL:              "invalid alternate SL",
	RejectInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejectInvalidAltHopLimit:        "invalid alternate hop limit",
	RejectInvalidAltPacketRate:      "invalid alternate packet rate",
	RejectPortCMRedirect:            "port and CM redirection",
	RejectPortRedirect:              "port redirection",
	RejectInvalidMTU:                "invalid path MTU",
	RejectInsufficientRespResources: "insufficient responder resources",
	RejectConsumer:                  "consumer reject",
	RejectInvalidRNRRetry:           "invalid RNR retry count",
	RejectDuplicateLocalCommID:      "duplicate local comm ID",
	RejectInvalidClassVersion:       "unsupported class version",
	RejectInvalidFlowLabel:          "invalid primary flow label",
	RejectInvalidAltFlowLabel:       "invalid alternate flow label",
	RejectVendorOptionNotSupported:  "vendor option not supported",
}

// String returns a short description of the reason, or its number.
func (r RejectReason) String() string {
	if s, ok := rejectNames[r]; ok {
		return s
	}
	return fmt.Sprintf("RejectReason(%d)", uint16(r))
}

// SIDRStatus is the status of a SIDR_REP.
type SIDRStatus uint8

// SIDR_REP status codes.
const (
	SIDRSuccess            SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2 // the service provider refused
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // ask elsewhere: see AdditionalInfo
	SIDRUnsupportedVersion SIDRStatus = 5 // class version not supported
)

var sidrNames = [...]string{
	SIDRSuccess:            "success",
	SIDRUnsupported:        "service ID not supported",
	SIDRReject:             "rejected",
	SIDRNoQP:               "no QP",
	SIDRRedirect:           "redirect",
	SIDRUnsupportedVersion: "class version not supported",
}

// String returns a short description of the status, or its number.
func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}
