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
// with its PD and CQ and honour context cancellation and deadlines. By
// default each connection has its own PD and one CQ without a completion
// channel (wait on it with CQ.Wait, or poll); ConnOptions can supply the
// program's PD (shared by all its connections, so memory is registered
// once, before connecting), its CQs or a completion channel. A listener
// accepts by itself unless ConnOptions.AcceptControl is set: then
// Listener.Request hands out each request, whose private data the
// program reads before it prepares the QP, posts receives, and accepts or
// rejects.
//
// Queue pairs: CreateQP (and so Dial and Listen) moves an RC QP to INIT
// with local write, remote write, remote read and remote atomic access,
// so what a peer may do is decided by the keys of the memory regions it
// is given; a UD QP gets the Q_Key 0x01234567 (RDMA_UDP_QKEY).
//
// Private data: a peer's private data arrives zero-padded to the room its
// CM message has for it after rdma_cm's 36-byte header (56 bytes in a
// connect request, 196 in a reply, 148 in a rejection), as librdmacm
// delivers it; the length sent is not carried. A protocol whose private
// data varies in length says the length in its own bytes (or uses a
// fixed-size encoding, as the test of AcceptControl does with an address
// and an rkey).
//
// Rejections: Dial and the synchronous calls fail with an *ErrEvent that
// matches ErrRejected and says why (RejectText), for example "rdmacm:
// connection rejected: no server listens on that port (reason 8)".
//
// Differences from Linux: address resolution needs no ARP (the peer's GID
// is its IP address) and picks the source address the kernel would use
// when a device owns it; an active ID announces a local ACK timeout of 14
// (about 67 ms) rather than Linux's 19.
package rdmacm
