// Package rdmacm is the rdma_cm connection model on softrdma devices: IDs
// in the TCP (RC) and UDP (UD) port spaces that resolve addresses and
// routes, listen, connect, accept, reject and disconnect, with the events
// of librdmacm (ADDR_RESOLVED ... TIMEWAIT_EXIT) and their statuses and
// private data.
//
// On the wire it is Linux rdma_cm's protocol: IB CM messages (package cm)
// on QP1 with rdma_cm's IP service IDs (0x0000000001PPpppp: port space and
// port) and its 36-byte private-data header carrying the IP addresses and
// source port, so Linux rdma_cm peers (rping, ucmatose, udaddy, perftest
// -R) understand it.
//
// An ID created with an EventChannel is asynchronous: calls return at once
// and their outcome arrives as an Event. An ID created without one is
// synchronous: ResolveAddr, ResolveRoute, Connect and Accept block until
// done, and a listening ID hands out incoming connections with GetRequest.
//
// Dial and Listen are the Go-style layer: they return a connected RC QP
// with its PD and CQ and honour context cancellation and deadlines.
//
// Differences from Linux: address resolution needs no ARP (the peer's GID
// is its IP address) and picks the source address the kernel would use
// when a device owns it; an active ID announces a local ACK timeout of 14
// (about 67 ms) rather than Linux's 19.
package rdmacm
