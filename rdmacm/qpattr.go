// The attributes an application needs to move its own QP (rdma_init_qp_attr).

package rdmacm

import (
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire/mad"
)

// InitQPAttr returns the attributes and mask that move a QP the
// application created itself (with verbs, not CreateQP) to state for the
// ID's connection (rdma_init_qp_attr), for QP.Modify:
//
//   - StateInit: P_Key index 0, port 1 and, for RC, the access flags
//     CreateQP gives (local write, remote write, read and atomic); for UD
//     the rdma_cm Q_Key.
//   - StateRTR: the path's address vector (with SetTOS's traffic class),
//     the MTU, the peer's QPN and the PSN to expect, and the responder
//     resources; RC only, once the peer's REQ (passive) or REP (active)
//     has come. For UD, the state alone.
//   - StateRTS: the starting send PSN, the local ACK timeout (rdmacm's
//     default, the REQ's on the passive side, or SetACKTimeout's), retry
//     counts and initiator depth; with an alternate path (SetAltPath, or
//     the REQ's), that path and path migration state REARM; for UD, the
//     state and a send PSN.
//
// The passive side's values come from the REQ, before Accept, as Linux's
// do: a server moves its QP to RTS and then accepts with
// ConnParam.QPNum; the active side connects with ConnParam.QPNum, moves its
// QP on EventConnectResponse and then calls Establish. Other states, or
// RTR and RTS before the peer's message, fail with ErrInvalid or ErrState.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == idDestroyed {
		return verbs.QPAttr{}, 0, errf(ErrClosed, "ID destroyed")
	}
	if id.dev == nil {
		return verbs.QPAttr{}, 0, errf(ErrState, "ID has no device: resolve an address first")
	}
	ud := id.ps == PortSpaceUDP
	switch state {
	case verbs.StateInit:
		a := verbs.QPAttr{State: verbs.StateInit, PKeyIndex: 0, PortNum: 1}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if ud {
			a.QKey = mad.RDMAUDPQKey
			return a, mask | verbs.AttrQKey, nil
		}
		a.AccessFlags = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		return a, mask | verbs.AttrAccessFlags, nil
	case verbs.StateRTR, verbs.StateRTS:
	default:
		return verbs.QPAttr{}, 0, errf(ErrInvalid, "no connection attributes for state %v", state)
	}
	if ud {
		if state == verbs.StateRTR {
			return verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState, nil
		}
		return verbs.QPAttr{State: verbs.StateRTS, SQPSN: id.psn}, verbs.AttrState | verbs.AttrSQPSN, nil
	}
	switch {
	case id.req != nil: // passive: the REQ's values, seen from this side
		r := id.req
		if state == verbs.StateRTR {
			a, mask := id.rtrAttrLocked(r.LocalQPN, id.psn, verbs.MTU(r.PathMTU), r.InitiatorDepth)
			return a, mask, nil
		}
		a, mask := rtsAttr(r.StartingPSN, r.ResponderResources, id.ackTimeoutLocked(r.PrimaryPath.LocalACKTimeout), r.RetryCount, r.RNRRetryCount)
		return a, id.withAltLocked(&a, mask), nil
	case id.rep != nil: // active: the REP's
		r := id.rep
		if state == verbs.StateRTR {
			a, mask := id.rtrAttrLocked(r.LocalQPN, id.psn, 0, min(id.param.ResponderResources, r.InitiatorDepth))
			return a, mask, nil
		}
		a, mask := rtsAttr(r.StartingPSN, min(id.param.InitiatorDepth, r.ResponderResources), id.ackTimeoutLocked(ackTimeout), id.param.RetryCount, r.RNRRetryCount)
		return a, id.withAltLocked(&a, mask), nil
	}
	return verbs.QPAttr{}, 0, errf(ErrState, "%v attributes need the peer's REQ or REP", state)
}
