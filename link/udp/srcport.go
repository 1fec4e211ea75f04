// Per-flow source ports. RoCEv2 senders pick a UDP source port per queue
// pair (wire/srcport.go) so that ECMP and receive-side scaling spread QPs
// over paths and queues. A user-space sender can only choose the source port
// of a datagram by sending it from a socket bound to that port, so the link
// opens one more socket per (local address, source port) a packet asks for,
// on first use: send-only (nothing reads it; RoCEv2 packets are addressed to
// the receiver's port 4791 whatever their source), with the same options as
// the main sockets. Not SO_REUSEPORT: a program that had set it on the same
// port would have the kernel hand some of its datagrams to a socket nothing
// reads. At most Config.MaxSourcePorts such sockets are opened; a packet
// whose port cannot have one (the limit is reached, or the port is bound by
// another program or another device on the same address, which can happen
// since both ends of a QP pair use its port) leaves from the link's port
// and is counted in Stats.TxSourcePortFallback. The sockets are opened
// in the network namespace the link was opened in, whichever thread asks
// (netns_linux.go).

package udp

import (
	"net/netip"
	"sync/atomic"

	"github.com/softrdma/softrdma/wire"
)

// DefaultMaxSourcePorts is the default bound on source-port sockets. Each
// socket a batch's packets leave from costs a system call of its own, so
// past some dozens of QPs a port per QP costs more than the spread it buys:
// with 1,000 QPs streaming, a port each sent 1.1 packets per call, 64 ports
// 3.5.
const DefaultMaxSourcePorts = 64

// sourceRcvBuf is the receive buffer of a source-port socket: nothing is
// meant to arrive there, and nothing reads it.
const sourceRcvBuf = 4096

// numSourcePorts is the size of the dynamic range source ports come from.
const numSourcePorts = 0x10000 - wire.SourcePortBase

// sourcePorts holds the source-port sockets of one local address, by port
// offset from wire.SourcePortBase; noSocket marks a port that could not be
// bound.
type sourcePorts [numSourcePorts]atomic.Pointer[socket]

// noSocket marks a source port that has no socket of its own.
var noSocket = new(socket)

// sourceSocket returns the socket a packet from main's address asking for
// source port port leaves by: its own socket, opened on first use, or main.
func (l *Link) sourceSocket(si int, main *socket, port uint16) *socket {
	return l.pickSource(si, main, port, &l.ctr.TxSourcePortFallback)
}

// pickSource is sourceSocket; it counts a fallback in fallbacks, if not nil.
func (l *Link) pickSource(si int, main *socket, port uint16, fallbacks *atomic.Uint64) *socket {
	if port == 0 || port == l.port || l.fixedPort {
		return main
	}
	if port < wire.SourcePortBase {
		count(fallbacks)
		return main
	}
	if t := l.sports[si].Load(); t != nil {
		if sk := t[port-wire.SourcePortBase].Load(); sk != nil {
			if sk == noSocket {
				count(fallbacks)
				return main
			}
			return sk
		}
	}
	return l.openSourcePort(si, main, port, fallbacks)
}

// openSourcePort opens the socket for port on main's address, or marks the
// port as having none.
func (l *Link) openSourcePort(si int, main *socket, port uint16, fallbacks *atomic.Uint64) *socket {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.sports[si].Load()
	if t == nil {
		t = new(sourcePorts)
		l.sports[si].Store(t)
	}
	slot := &t[port-wire.SourcePortBase]
	if sk := slot.Load(); sk != nil { // opened meanwhile
		if sk == noSocket {
			count(fallbacks)
			return main
		}
		return sk
	}
	if l.closing || l.nSports >= l.maxSports {
		// Not marked: the port may get a socket once others are free
		// (after Close there are none).
		count(fallbacks)
		return main
	}
	sk, err := l.listenSource(netip.AddrPortFrom(main.addr, port), main.is4, main.ifindex)
	if err != nil {
		l.log.Debug("udp: source port not available, sending from the link's port", "addr", main.addr, "port", port, "err", err)
		slot.Store(noSocket)
		count(fallbacks)
		return main
	}
	l.nSports++
	l.extra = append(l.extra, sk)
	slot.Store(sk)
	return sk
}

// listenSource binds a send-only socket at ap, in the network namespace of
// the link's own sockets.
func (l *Link) listenSource(ap netip.AddrPort, is4 bool, ifindex int) (*socket, error) {
	network := "udp6"
	if is4 {
		network = "udp4"
	}
	conn, err := nsIn(l.ns, func() (sockConn, error) {
		return listenSourceUDP(network, ap, is4, l.sockBuf, l.log)
	})
	if err != nil {
		return nil, err
	}
	sk := &socket{addr: ap.Addr(), key: ap.Addr().WithZone(""), local: ap, is4: is4,
		conn: conn, bc: newSourceBatchConn(conn, is4), ifindex: ifindex}
	multicastSend(conn, sk.addr, ifindex, l.log)
	sk.gso.Store(!l.noGSO && probeGSO(conn))
	if !l.noConnect {
		sk.cs = new(connState)
	}
	return sk, nil
}

// SourcePort returns the UDP source port a packet from src, one of the
// link's addresses, asking for port leaves from, opening the port's socket
// if this is its first use. A tap uses it to record what goes on the wire.
func (l *Link) SourcePort(src netip.Addr, port uint16) uint16 {
	key := src.Unmap().WithZone("")
	for i, sk := range l.socks {
		if sk.key == key {
			return l.pickSource(i, sk, port, nil).local.Port()
		}
	}
	return l.port
}

func count(c *atomic.Uint64) {
	if c != nil {
		c.Add(1)
	}
}

// ReserveSourcePort opens the socket for packets from src asking for port,
// if they will need one (link.SourcePortReserver): verbs calls it when a QP
// gets its port, on the caller's thread, so the socket is in the network
// namespace the device was opened in even if the first packet is sent from
// elsewhere.
func (l *Link) ReserveSourcePort(src netip.Addr, port uint16) { l.SourcePort(src, port) }
