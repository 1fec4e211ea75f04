// Connected source-port sockets. A datagram sent from an unconnected socket
// costs the kernel a route lookup and the copy of its address; one sent from
// a connected socket to the address it is connected to costs neither (the
// socket keeps its route). On a 64-byte round trip between two processes
// that is about 1 us of some 14 (perf write_lat, docs/PERFORMANCE.md).
//
// Source-port sockets send only, and a port is a queue pair's (srcport.go),
// so nearly all of a source socket's packets go to one peer: on Linux the
// link connects each source-port socket to the unicast destination of its
// first send (an IPv6 one without a zone) and sends packets for that
// destination without an address (others still go out with theirs).
//
// An IPv6 header has nothing the sender does not know. The price, for IPv4,
// is the Identification, which the ICRC covers. An
// unconnected Don't Fragment datagram has Identification 0; a connected
// socket's datagrams are numbered from a counter of the socket's that
// starts at a value the sender cannot choose and moves by one a datagram
// (its GSO segments are numbered on from the datagram's value, as they are
// from 0 without a connection). The link reads the counter back before the
// first send and then about once a second: a datagram the socket sends to
// its own address (it never leaves the host) asking for a software
// transmit timestamp comes back on the socket's error queue with its
// headers (SO_TIMESTAMPING without SOF_TIMESTAMPING_OPT_TSONLY). The first
// read-back also checks that the counter moves as expected, GSO datagram
// included. A socket whose counter cannot be read, or is found twice where
// it was not predicted, is disconnected again and sends as before; a
// prediction found wrong is counted in Stats.TxIDMismatch. Any failed send
// makes the next one read the counter first.

package udp

import (
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// idCheckEvery is how often a connected socket's counter is read back (a
// variable: tests shorten it).
var idCheckEvery = time.Second

// maxIDMismatches is how many wrong predictions a socket may have before it
// is disconnected for good.
const maxIDMismatches = 2

// connState is the connection of a source-port socket, guarded by mu, which
// a write holds from sealing its packets to sending them so that datagrams
// leave in the order of the Identifications they were sealed with.
type connState struct {
	mu sync.Mutex
	// tried: connecting was tried (once, on the first unicast send).
	tried bool
	// peer is the destination the socket is connected to (invalid if not).
	peer netip.AddrPort
	ip   [16]byte // peer's address as sendScratch.ips holds it
	// next is the Identification of the next datagram; stale says it must
	// be read back before the next send.
	next  uint16
	stale bool
	// checked is when the counter was last read back; writes counts the
	// writes since the clock was last read.
	checked  time.Time
	writes   int
	mismatch int
}

// clockEvery is how many writes pass between two looks at the clock for
// the next read-back (a clock read is some 60 ns on a virtual machine, a
// twentieth of a round trip's own work).
const clockEvery = 16

// errNoReadBack says a socket's IPv4 Identification could not be read back.
var errNoReadBack = errors.New("udp: the socket's IPv4 Identification cannot be read back")

// connected reports whether the socket is connected (an IPv4 one's
// datagrams are then numbered by its counter); the caller holds c.mu.
func (c *connState) connected() bool { return c != nil && c.peer.IsValid() }

// prepareConn is the start of a write from sk (c is sk.cs, held) whose
// first packet is s's i: it connects the socket on its first unicast send
// and reads its counter back when due. A socket that cannot connect or be
// read back sends unconnected.
func (l *Link) prepareConn(sk *socket, c *connState, s *sendScratch, i int) {
	if !c.tried {
		dst := netip.AddrPortFrom(netip.AddrFrom16(s.ips[i]).Unmap(), uint16(s.addrs[i].Port))
		a := dst.Addr()
		if a.Is4() != sk.is4 || a.IsMulticast() || a.IsUnspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || s.addrs[i].Zone != "" {
			// Multicast or broadcast: wait for a unicast destination. (A
			// link-local IPv6 one with its zone stays unconnected.)
			return
		}
		c.tried = true
		if err := l.connect(sk, c, dst); err != nil {
			l.log.Debug("udp: sending unconnected", "from", sk.local, "to", dst, "err", err)
		}
		return
	}
	if !c.connected() || !sk.is4 {
		return // (an IPv6 socket has no counter to follow)
	}
	if c.writes++; !c.stale && c.writes < clockEvery && idCheckEvery > 0 {
		return
	}
	c.writes = 0
	now := time.Now()
	if !c.stale && now.Sub(c.checked) < idCheckEvery {
		return
	}
	id, err := readBackID(sk)
	if err != nil {
		l.disconnect(sk, c, err)
		return
	}
	if id != c.next && !c.stale {
		l.ctr.TxIDMismatch.Add(1)
		c.mismatch++
		l.log.Debug("udp: IPv4 Identification not as predicted", "from", sk.local, "to", c.peer, "predicted", c.next, "found", id)
		if c.mismatch >= maxIDMismatches {
			l.disconnect(sk, c, errors.New("udp: IPv4 Identification mispredicted"))
			return
		}
	}
	c.next, c.stale, c.checked = id+1, false, now
}

// connect connects sk to dst and learns its counter, checking that it moves
// by one a datagram, GSO or not; on failure sk stays unconnected.
func (l *Link) connect(sk *socket, c *connState, dst netip.AddrPort) error {
	if err := connectSocket(sk, dst); err != nil {
		return err
	}
	c.peer = dst
	c.ip = dst.Addr().As16()
	if !sk.is4 {
		l.log.Debug("udp: source socket connected", "from", sk.local, "to", dst)
		return nil
	}
	a, err := readBackID(sk)
	if err == nil && sk.gso.Load() {
		var b uint16
		if b, err = readBackIDGSO(sk); err == nil && b != a+1 {
			err = errors.New("udp: the IPv4 Identification of a GSO datagram is not one more than the last")
		}
		a = b
	}
	var z uint16
	if err == nil {
		if z, err = readBackID(sk); err == nil && z != a+1 {
			err = errors.New("udp: the IPv4 Identification does not move by one a datagram")
		}
	}
	if err != nil {
		l.disconnect(sk, c, err)
		return err
	}
	c.next, c.checked = z+1, time.Now()
	l.log.Debug("udp: source socket connected", "from", sk.local, "to", dst, "next_id", c.next)
	return nil
}

// disconnect dissolves sk's connection for good: it sends unconnected
// again, its datagrams with Identification 0.
func (l *Link) disconnect(sk *socket, c *connState, why error) {
	if err := disconnectSocket(sk); err != nil {
		// (Linux's UDP disconnect does not fail on a socket it connected.)
		l.log.Warn("udp: cannot disconnect a source socket", "from", sk.local, "err", err)
	}
	l.log.Debug("udp: source socket disconnected", "from", sk.local, "to", c.peer, "why", why)
	c.peer = netip.AddrPort{}
}

// afterSend is a write's part after a sendmmsg that sent n of its messages
// and failed with err (nil if it did not): the counter moved by n. After
// an error it must be read again, since whether the failed datagram took
// an Identification depends on where the kernel refused it, unless the
// error is an ICMP error's report (refusedOnce), given before the datagram
// took one.
func (c *connState) afterSend(n int, err error) {
	if !c.connected() { // (for IPv6 the counter is unused)
		return
	}
	c.next += uint16(n)
	if err != nil && !refusedOnce(err) {
		c.stale = true
	}
}

// toPeer reports whether s's packet i goes to the address c is connected
// to, and so leaves without one.
func (c *connState) toPeer(s *sendScratch, i int) bool {
	return c.connected() && s.ips[i] == c.ip && s.addrs[i].Port == int(c.peer.Port()) && s.addrs[i].Zone == ""
}

// refusedOnce reports whether err is the report of an ICMP error that a
// connected socket gives on its next send (ECONNREFUSED and the like): the
// datagram was refused before it took an Identification and may go again.
func refusedOnce(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTDOWN)
}
