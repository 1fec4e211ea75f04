// Package wire encodes and decodes RoCEv2 packets: the InfiniBand base
// transport header (BTH), its extension headers, the opcode table that says
// which headers each opcode carries, the typed number spaces of the transport
// (PSN, QPN, keys, MSN, AETH syndromes) and the invariant CRC (ICRC).
//
// A RoCEv2 packet is the payload of a UDP datagram sent to port 4791:
//
//	BTH (12) | extension headers | payload | pad (0-3) | ICRC (4)
//
// Headers are named []byte types with accessors and a matching Fields struct
// with an Encode method, in the style of gVisor's tcpip/header. Parse
// validates a whole packet once against the opcode table and returns a
// Packet whose accessors cannot panic. Build writes a packet from Fields
// values into a caller's buffer without allocating.
//
// Native InfiniBand framing wraps the same transport packet in a local route
// header (LRH), an optional global route header (GRH) and a variant CRC
// (VCRC), with an ICRC whose masks are the IB link layer's: see ParseIB,
// BuildIB, IBICRC and VCRC.
//
//	LRH (8) | GRH (40, optional) | BTH ... ICRC (4) | VCRC (2)
//
// The package imports only the standard library.
package wire
