// ID options (rdma_set_option with RDMA_OPTION_ID).

package rdmacm

// SetTOS sets the type of service of the connections the ID initiates
// (rdma_set_option RDMA_OPTION_ID_TOS): the path's traffic class, which
// the CM REQ carries to the peer and both QPs' address vectors take, so
// that every packet of the connection leaves with tos as its IPv4 TOS byte
// or IPv6 Traffic Class (DSCP in the upper six bits, ECN in the lower
// two). Set it before Connect (as rdma-core's tools do once the address is
// resolved); it does not change a connection already requested. The side
// that accepts takes the traffic class from the REQ, as Linux's rdma_cm
// does, whatever its own IDs' TOS. The default is 0.
func (id *ID) SetTOS(tos uint8) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	switch id.state {
	case idIdle, idAddrResolved, idRouteResolved, idListen:
		id.tos = tos
		return nil
	case idDestroyed:
		return errf(ErrClosed, "ID destroyed")
	}
	return errf(ErrState, "TOS set after the connection was requested")
}

// TOS returns the type of service SetTOS gave the ID (0 if none).
func (id *ID) TOS() uint8 {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.tos
}

// SetACKTimeout sets the local ACK timeout of the ID's QP (rdma_set_option
// RDMA_OPTION_ID_ACK_TIMEOUT): 4.096 µs × 2^timeout, 0 to 31, 0 meaning
// no timeout. It overrides the rdmacm default on either side: an active ID
// gives its QP this value instead of 14 and announces it in the REQ (Linux
// announces a value derived from it and the device's ACK delay); a passive
// ID, set before Accept, gives its QP this value instead of the REQ's. It
// is not negotiated: the peer's QP keeps its own. Set it before Connect or
// Accept; it does not change a QP already connected.
func (id *ID) SetACKTimeout(timeout uint8) error {
	if timeout > 31 {
		return errf(ErrInvalid, "ACK timeout %d (0 to 31)", timeout)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	switch id.state {
	case idIdle, idAddrResolved, idRouteResolved, idConnRequest:
		id.ackTO, id.ackTOSet = timeout, true
		return nil
	case idDestroyed:
		return errf(ErrClosed, "ID destroyed")
	}
	return errf(ErrState, "ACK timeout set after the connection was requested or accepted")
}

// ackTimeoutLocked is the local ACK timeout for the ID's QP: SetACKTimeout's,
// or def.
func (id *ID) ackTimeoutLocked(def uint8) uint8 {
	if id.ackTOSet {
		return id.ackTO
	}
	return def
}
