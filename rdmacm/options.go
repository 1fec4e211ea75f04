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
