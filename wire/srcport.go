// UDP source ports. RoCEv2 packets go to UDP port 4791 from a source port
// the sender chooses per flow, so that ECMP routing and receive-side scaling
// see each queue pair as its own flow while its packets stay in order. Linux
// (rdma_rxe and the RoCE NIC drivers) derives the port from the GRH flow
// label, or, where the flow label is 0, from a hash of the two QP numbers;
// a QP with no destination yet (UD, QP1) uses a hash of its own number.
// Ports lie in 0xC000-0xFFFF, the dynamic range.

package wire

// SourcePortBase is the lowest RoCEv2 UDP source port.
const SourcePortBase = 0xC000

// FlowLabel returns the 20-bit flow label Linux gives a connected QP whose
// address has none (rdma_calc_flow_label): the product of the two QP
// numbers, folded. It is symmetric, so both ends of a connection pick the
// same label and source port.
func FlowLabel(lqpn, rqpn QPN) uint32 {
	v := uint64(lqpn&Mask24) * uint64(rqpn&Mask24)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// FlowSourcePort returns the UDP source port for a 20-bit flow label: its
// low 14 bits, with its high 6 bits folded into the lowest 6, in the dynamic
// range (Linux's rdma_flow_label_to_udp_sport).
func FlowSourcePort(fl uint32) uint16 {
	fl &= 0xFFFFF
	return uint16(SourcePortBase | (fl&0x3FFF ^ fl>>14))
}

// QPSourcePort returns the UDP source port of a QP that has no destination
// QP (a UD QP, or any QP before it is connected), as Linux rxe picks it: the
// top 14 bits of its QP number times the 32-bit golden ratio (hash_32).
func QPSourcePort(qpn QPN) uint16 {
	const goldenRatio32 = 0x61C88647
	h := uint32(qpn&Mask24) * goldenRatio32
	return uint16(SourcePortBase + h>>(32-14))
}

// ConnectedSourcePort returns the UDP source port of a connected QP: from
// its flow label, or, if that is 0, from the two QP numbers
// (rdma_get_udp_sport).
func ConnectedSourcePort(flowLabel uint32, lqpn, rqpn QPN) uint16 {
	if flowLabel&0xFFFFF == 0 {
		flowLabel = FlowLabel(lqpn, rqpn)
	}
	return FlowSourcePort(flowLabel)
}
