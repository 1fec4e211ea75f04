// Package ibsim serves the client protocol of Linux ibsim (the InfiniBand
// fabric simulator of linux-rdma/ibsim) over softrdma's emulated fabric, so
// that unmodified management programs run under libumad2sim (ibsim-run:
// OpenSM, smpquery, ibnetdiscover, perfquery, ...) manage softrdma's fabric
// as they manage ibsim's.
//
// The protocol has two kinds of datagram socket, unix (abstract names
// "<base>:ctl", "<base>:out<N>" on the server, "<base>:ctl<pid>" and
// "<base>:in<pid>" on the client) or UDP (the control port, 7070 by
// default, and the control port + N + 1 for client slot N). A client sends
// SIM_CTL messages ([Ctl]) to the control socket: CONNECT gives it a slot
// N, and it then exchanges [Request]s (a MAD and its addressing) with the
// server's socket of slot N. This package holds the codec ([Ctl],
// [ClientInfo], [Request], ...), a [Server] that answers clients from a
// [Backend] (the fabric), and a [Client] that speaks the protocol from Go.
package ibsim
