// The data path: Send seals the caller's packets and writes them with one
// WriteBatch (sendmmsg) per source socket, runs of equal-sized packets to
// one destination as single UDP_SEGMENT (GSO) messages where the kernel
// has it (gso_linux.go); each socket's reader goroutine
// (recv_linux.go, recv_other.go) receives datagrams into pool packets, checks
// them and hands them to the Handler a batch at a time.

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// batchConn is what ipv4.PacketConn and ipv6.PacketConn have in common
// (ipv4.Message and ipv6.Message are the same type).
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

func xnetConn(c *net.UDPConn, is4 bool) batchConn {
	if is4 {
		return ipv4.NewPacketConn(c)
	}
	return ipv6.NewPacketConn(c)
}

// sendScratch is the per-call state of Send, kept in a pool so Send does not
// allocate per packet once warm: msgs[i] describes batch[i], its Buffers is
// bufs[i:i+1] and its Addr is &addrs[i], whose IP points into ips[i].
type sendScratch struct {
	msgs  []ipv4.Message
	bufs  [][]byte // batch[i]'s bytes, or its head if it has an Ext
	ext   [][]byte // batch[i].Ext, and the pad and ICRC behind it (nil without)
	tail  [][]byte
	addrs []net.UDPAddr
	ips   [][16]byte
	fr    []wire.Framing // how batch[i] is framed, for its ICRC
	tc    []uint8        // batch[i]'s traffic class
	sock  []*socket      // the socket batch[i] leaves by, or nil if it is not sent
	idx   []int          // the packets one socket sends, in batch order

	// What one socket writes: a message per packet or per GSO run.
	out   []ipv4.Message
	outAt []int    // out[k] starts at idx[outAt[k]]
	gbufs [][]byte // the buffers of GSO runs (their Buffers point here)
	flat  []byte   // runs of small packets, copied together
	oob   []byte   // the messages' UDP_SEGMENT and IP_TOS/IPV6_TCLASS control messages
	sys   sysScratch
	icrc  wire.ICRCCache // the last flow's masked headers
}

func (s *sendScratch) grow(n int) {
	if cap(s.msgs) >= n {
		s.msgs, s.sock, s.fr, s.tc = s.msgs[:n], s.sock[:n], s.fr[:n], s.tc[:n]
		return
	}
	c := max(n, DefaultBatchSize)
	s.msgs = make([]ipv4.Message, n, c)
	s.out = make([]ipv4.Message, 0, c)
	s.outAt = make([]int, 0, c)
	s.idx = make([]int, 0, c)
	s.bufs = make([][]byte, c)
	s.ext = make([][]byte, c)
	s.tail = make([][]byte, c)
	s.gbufs = make([][]byte, 0, 3*c) // a packet with an Ext is three
	s.oob = make([]byte, 0, c*(gsoSpace+tosSpace))
	s.addrs = make([]net.UDPAddr, c)
	s.ips = make([][16]byte, c)
	s.fr = make([]wire.Framing, n, c)
	s.tc = make([]uint8, n, c)
	s.sock = make([]*socket, n, c)
	for i := range c {
		m := s.msgs[:c]
		m[i].Buffers = s.bufs[i : i+1 : i+1]
		m[i].Addr = &s.addrs[i]
	}
}

// Send seals each packet in place and transmits the batch: packets are
// grouped by source socket and each group goes out with one WriteBatch,
// repeated until all are written. A packet whose Src address is not one of
// the link's, whose Dst is invalid or of the other IP family, or which is
// shorter than a BTH and ICRC is not sent; nor is one the kernel refuses.
// Send tries the rest and returns the first error (wrapping link.ErrAddress
// for address problems) and counts each failed packet in TxErrors. A zero
// Src address picks the link's first address of Dst's family. Each packet
// leaves with its TClass as the IPv4 TOS or IPv6 Traffic Class (a control
// message per datagram on Linux; a GSO run shares one). Send does not
// allocate per packet.
func (l *Link) Send(batch []*link.Packet) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	if len(batch) == 0 {
		return nil
	}
	s, _ := l.scratch.Get().(*sendScratch)
	if s == nil {
		s = new(sendScratch)
	}
	s.grow(len(batch))
	defer l.release(s)

	var first error
	var used *socket // the one socket used so far
	mixed := false   // more than one socket, or a packet not sent
	for i, p := range batch {
		sk, err := l.prepare(s, i, p)
		s.sock[i] = sk
		if err != nil {
			l.ctr.TxErrors.Add(1)
			first = cmp(first, err)
			mixed = true
			continue
		}
		if used == nil {
			used = sk
		} else if sk != used {
			mixed = true
		}
	}
	if !mixed {
		s.idx = s.idx[:0]
		for i := range s.msgs {
			s.idx = append(s.idx, i)
		}
		return l.write(used, s, s.idx)
	}
	// One WriteBatch per socket, in the order each first appears.
	for i := range s.msgs {
		sk := s.sock[i]
		if sk == nil {
			continue
		}
		s.idx = s.idx[:0]
		for j := i; j < len(s.msgs); j++ {
			if s.sock[j] == sk {
				s.idx = append(s.idx, j)
				s.sock[j] = nil
			}
		}
		first = cmp(first, l.write(sk, s, s.idx))
	}
	return first
}

// SetSealHook makes Send call f with each packet's bytes right after
// sealing them, before they are written to the socket (link.SealHooker).
func (l *Link) SetSealHook(f func(b []byte)) {
	if f == nil {
		l.hook.Store(nil)
		return
	}
	l.hook.Store(&f)
}

// release drops the scratch's references to the caller's buffers and
// returns it to the pool.
func (l *Link) release(s *sendScratch) {
	clear(s.bufs[:len(s.msgs)])
	clear(s.ext[:len(s.msgs)])
	clear(s.tail[:len(s.msgs)])
	clear(s.gbufs)
	clear(s.out)
	s.sys.release()
	s.gbufs, s.out = s.gbufs[:0], s.out[:0]
	l.scratch.Put(s)
}

// cmp returns first, or err if first is nil.
func cmp(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// prepare picks the socket for batch[i] (by its source address and port),
// seals the packet for it and fills s.msgs[i]. It returns the socket.
func (l *Link) prepare(s *sendScratch, i int, p *link.Packet) (*socket, error) {
	if p == nil || p.N < wire.BTHLen+wire.ICRCLen || p.N > len(p.Buf) {
		n := 0
		if p != nil {
			n = p.N
		}
		return nil, fmt.Errorf("udp: send: packet length %d is not in [%d, buffer size]", n, wire.BTHLen+wire.ICRCLen)
	}
	if p.Ext != nil && (p.ExtAt < wire.BTHLen || p.N-p.ExtAt < wire.ICRCLen || p.Len() > len(p.Buf)) {
		return nil, fmt.Errorf("udp: send: a payload outside the buffer at %d of %d bytes (%d outside) is not between the headers and the pad and ICRC", p.ExtAt, p.N, len(p.Ext))
	}
	dst := p.Dst.Addr().Unmap()
	if !dst.IsValid() || p.Dst.Port() == 0 {
		return nil, fmt.Errorf("udp: send: %w: destination %s", link.ErrAddress, p.Dst)
	}
	si, err := l.source(p.Src.Addr(), dst)
	if err != nil {
		return nil, err
	}
	sk := l.sourceSocket(si, l.socks[si], p.Src.Port())
	s.tc[i] = p.TClass
	m := &s.msgs[i]
	if p.Ext != nil && l.hook.Load() != nil {
		// A seal hook may change the bytes (a fault link corrupts them),
		// which must not reach registered memory: the payload is copied
		// into the buffer first, as without Ext.
		p.Flatten()
	}
	if p.Ext != nil {
		s.bufs[i], s.ext[i], s.tail[i] = p.Buf[:p.ExtAt], p.Ext, p.Buf[p.ExtAt:p.N]
	} else {
		s.bufs[i], s.ext[i], s.tail[i] = p.Data(), nil, nil
	}
	// The framing (sealed by segment, which knows the IPv4 Identification
	// it gets) and the destination address. A packet of the previous one's
	// flow copies them from it: built anew, they pass through registers
	// that the compiler stores 8 bytes at a time and copies 16 at a time, a
	// store-forwarding stall that was a twentieth of a 64-byte stream's
	// sender.
	dport := p.Dst.Port()
	if i > 0 && s.sock[i-1] == sk && s.fr[i-1].Dst == dst && s.fr[i-1].DstPort == dport {
		s.fr[i] = s.fr[i-1]
		s.ips[i] = s.ips[i-1]
		s.addrs[i] = s.addrs[i-1]
	} else {
		s.fr[i] = wire.Framing{
			Src: sk.addr, Dst: dst, SrcPort: sk.local.Port(), DstPort: dport,
			IPv4Frag: wire.IPv4DontFragment,
		}
		ua := &s.addrs[i]
		s.ips[i] = dst.As16()
		if sk.is4 {
			ua.IP = s.ips[i][12:16]
		} else {
			ua.IP = s.ips[i][:]
		}
		ua.Port = int(dport)
		ua.Zone = dst.Zone()
	}
	m.N, m.NN, m.Flags = 0, 0, 0
	return sk, nil
}

// source returns the index of the socket a packet from src to dst (both
// unmapped, src possibly zero) leaves by.
func (l *Link) source(src, dst netip.Addr) (int, error) {
	want4 := dst.Is4()
	if !src.IsValid() {
		for i, sk := range l.socks {
			if sk.is4 == want4 {
				return i, nil
			}
		}
		return -1, fmt.Errorf("udp: send: %w: no local address of the family of %s", link.ErrAddress, dst)
	}
	key := src.Unmap().WithZone("")
	for i, sk := range l.socks {
		if sk.key == key {
			if sk.is4 != want4 {
				return -1, fmt.Errorf("udp: send: %w: source %s and destination %s differ in family", link.ErrAddress, src, dst)
			}
			return i, nil
		}
	}
	return -1, fmt.Errorf("udp: send: %w: source %s is not a local address", link.ErrAddress, src)
}

// gsoMaxBytes bounds a GSO run's UDP payload: what one IPv4 (or IPv6)
// datagram may carry.
const (
	gsoMaxBytes4 = 65535 - 20 - 8
	gsoMaxBytes6 = 65535 - 8
)

// flatMax is the largest packet a GSO run copies into one buffer rather
// than passing as an I/O vector of its own. Each I/O vector costs the
// kernel some 26 ns (a run of 64 packets of 112 bytes: 5.3 us sent as 64
// vectors, 3.7 us as one), more than copying a packet this size.
const flatMax = 512

// segment seals the packets idx of one socket and fills s.out with the
// messages that carry them: with GSO, a run of packets to one destination
// and of one traffic class, all of one size but the last (which may be
// shorter), up to the kernel's limits, becomes one message; every other
// packet is a message of its own. A message of packets with a nonzero
// traffic class carries it in an IP_TOS or IPV6_TCLASS control message.
//
// The ICRC covers the IPv4 Identification, so each packet is sealed with
// the one it will have: an unconnected socket sends Don't Fragment
// datagrams with Identification 0, and segmentation numbers a run's
// segments 0, 1, 2, ... (Linux's inet_gso_segment).
//
// A connected socket numbers its datagrams from its counter instead
// (connect.go), and sends those to the address it is connected to without
// an address; sk.cs is held.
func (l *Link) segment(sk *socket, s *sendScratch, idx []int) {
	s.out, s.outAt, s.gbufs, s.oob = s.out[:0], s.outAt[:0], s.gbufs[:0], s.oob[:0]
	c := sk.cs
	var id uint16 // the next datagram's Identification
	connected := c.connected()
	counted := connected && sk.is4
	if counted {
		id = c.next
	}
	s.flat = s.flat[:0]
	gso := sk.gso.Load()
	maxBytes := gsoMaxBytes6
	if sk.is4 {
		maxBytes = gsoMaxBytes4
	}
	for j := 0; j < len(idx); {
		i := idx[j]
		size := s.size(i)
		k, total := 1, size
		for gso && j+k < len(idx) && k < gsoMaxSegments {
			n := idx[j+k]
			ln := s.size(n)
			if ln > size || total+ln > maxBytes || s.ips[n] != s.ips[i] || s.addrs[n].Port != s.addrs[i].Port || s.addrs[n].Zone != s.addrs[i].Zone || s.tc[n] != s.tc[i] {
				break
			}
			total += ln
			k++
			if ln < size {
				break // a shorter segment ends the run
			}
		}
		hook := l.hook.Load()
		exts := false
		for r := range k {
			n := idx[j+r]
			s.fr[n].IPv4ID = id + uint16(r)
			if s.ext[n] == nil {
				s.icrc.Seal(&s.fr[n], s.bufs[n])
				if hook != nil {
					(*hook)(s.bufs[n])
				}
				continue
			}
			exts = true
			s.icrc.SealParts(&s.fr[n], s.bufs[n], s.ext[n], s.tail[n])
		}
		m := s.msgs[i]
		o := len(s.oob)
		switch {
		case k > 1 && !exts && size <= flatMax:
			// Small packets are copied into one buffer: the kernel's cost
			// for an I/O vector is more than the copy's.
			f := len(s.flat)
			for r := range k {
				s.flat = append(s.flat, s.bufs[idx[j+r]]...)
			}
			s.gbufs = append(s.gbufs, s.flat[f:len(s.flat):len(s.flat)])
			m.Buffers = s.gbufs[len(s.gbufs)-1:]
		case k > 1 || exts:
			// The I/O vectors of the run: a packet's bytes, or its head,
			// payload and tail.
			g := len(s.gbufs)
			for r := range k {
				n := idx[j+r]
				s.gbufs = append(s.gbufs, s.bufs[n])
				if s.ext[n] != nil {
					s.gbufs = append(s.gbufs, s.ext[n], s.tail[n])
				}
			}
			m.Buffers = s.gbufs[g:len(s.gbufs):len(s.gbufs)]
		}
		if k > 1 {
			s.oob = append(s.oob, putGSO(s.oob[len(s.oob):len(s.oob)+gsoSpace], size)...)
		}
		if tc := s.tc[i]; tc != 0 {
			s.oob = append(s.oob, putTOS(s.oob[len(s.oob):len(s.oob)+tosSpace], tc, sk.is4)...)
		}
		m.OOB = nil
		if len(s.oob) > o {
			m.OOB = s.oob[o:len(s.oob):len(s.oob)]
		}
		if counted {
			id++
		}
		if connected && c.toPeer(s, i) {
			m.Addr = nil
		}
		m.N, m.NN, m.Flags = 0, 0, 0
		s.out = append(s.out, m)
		s.outAt = append(s.outAt, j)
		j += k
	}
}

// write is the send path of one socket: it seals and groups the packets idx
// (segment) and writes the messages with WriteBatch until all are written
// or refused. If the kernel refuses segmentation on this path, the socket
// stops using it and the packets not yet sent go again, one datagram each.
// A connected socket's write holds its connState throughout.
func (l *Link) write(sk *socket, s *sendScratch, idx []int) error {
	if c := sk.cs; c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		l.prepareConn(sk, c, s, idx[0])
	}
	return l.writeLocked(sk, s, idx)
}

func (l *Link) writeLocked(sk *socket, s *sendScratch, idx []int) error {
	c := sk.cs
	l.segment(sk, s, idx)
	msgs := s.out
	var first error
	refused := false // a connected socket's ICMP report was retried
	for done := 0; done < len(msgs); {
		n, err := l.writeMsgs(sk, s, msgs[done:])
		l.ctr.TxCalls.Add(1)
		if n < 0 { // sendmmsg failed on the first message (e.g. EPERM from a firewall)
			n = 0
		}
		if c != nil {
			c.afterSend(n, err)
		}
		var pkts, bytes, gso uint64 // counted once per call, not per packet
		for k := done; k < done+n; k++ {
			c := s.runLen(k, len(idx))
			pkts += uint64(c)
			for _, b := range msgs[k].Buffers {
				bytes += uint64(len(b))
			}
			if c > 1 {
				gso++
			}
		}
		if n > 0 {
			l.ctr.TxPackets.Add(pkts)
			l.ctr.TxBytes.Add(bytes)
			if gso > 0 {
				l.ctr.TxGSOBatches.Add(gso)
			}
		}
		done += n
		if n > 0 && !l.state.Up() && l.watch == nil {
			l.setUp(true, "sent", nil)
		}
		if err == nil {
			if n == 0 { // cannot happen; do not spin if it does
				l.ctr.TxErrors.Add(uint64(len(idx) - s.outAt[done]))
				return cmp(first, fmt.Errorf("udp: send from %s: no progress", sk.local))
			}
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			l.ctr.TxErrors.Add(uint64(len(idx) - s.outAt[done]))
			return cmp(first, link.ErrClosed)
		}
		if c.connected() && !refused && refusedOnce(err) {
			// An ICMP error (the peer's port was closed a moment) reported
			// by this send, which it refused: the datagram goes again.
			refused = true
			continue
		}
		if s.runLen(done, len(idx)) > 1 && gsoRefused(err) {
			// Resend the rest without segmentation, sealed anew (for
			// Identifications numbered anew). Rare: the slice is the
			// caller's idx.
			sk.gso.Store(false)
			l.log.Warn("udp: the kernel refused UDP segmentation; sending datagram by datagram", "from", sk.local, "err", err)
			rest := append([]int(nil), idx[s.outAt[done]:]...)
			if c != nil {
				l.prepareConn(sk, c, s, rest[0])
			}
			return cmp(first, l.writeLocked(sk, s, rest))
		}
		if errors.Is(err, syscall.ENETDOWN) || errors.Is(err, syscall.EADDRNOTAVAIL) {
			l.setUp(false, "send failed", err)
		}
		// sendmmsg reports an error only for the first message it could not
		// send: count its packets as lost and go on with the rest.
		l.ctr.TxErrors.Add(uint64(s.runLen(done, len(idx))))
		to := any(msgs[done].Addr)
		if to == nil && c != nil {
			to = c.peer
		}
		first = cmp(first, fmt.Errorf("udp: send from %s to %v: %w", sk.local, to, err))
		l.log.Debug("udp: send failed", "from", sk.local, "to", to, "err", err)
		done++
		if c.connected() && sk.is4 && done < len(msgs) {
			// The rest were numbered assuming the failed datagram took no
			// Identification: read the counter and seal them again.
			rest := append([]int(nil), idx[s.outAt[done]:]...)
			l.prepareConn(sk, c, s, rest[0])
			return cmp(first, l.writeLocked(sk, s, rest))
		}
	}
	return first
}

// size returns the length of batch[i].
func (s *sendScratch) size(i int) int { return len(s.bufs[i]) + len(s.ext[i]) + len(s.tail[i]) }

// runLen returns the number of packets message k of s.out carries, of
// the n packets the messages carry.
func (s *sendScratch) runLen(k, n int) int {
	if k+1 < len(s.outAt) {
		return s.outAt[k+1] - s.outAt[k]
	}
	return n - s.outAt[k]
}

// SendsExt reports that Send takes packets with a payload outside their
// buffer (link.ExtSender): the payload is one more I/O vector of the
// message (and of a GSO run's), so the kernel copies it from where it is.
func (l *Link) SendsExt() bool { return true }

// deliver hands the accepted packets among pkts (ok says which) to h as one
// batch, then returns every one of pkts to the pool (the Handler may not
// keep them) and clears it; the reader refills its receive slots.
func (l *Link) deliver(h link.Handler, pkts []*link.Packet, ok []bool, batch []*link.Packet) []*link.Packet {
	if len(pkts) > 0 && !l.state.Up() && l.watch == nil {
		l.setUp(true, "received", nil)
	}
	batch = batch[:0]
	for i, p := range pkts {
		if ok[i] {
			batch = append(batch, p)
		}
	}
	if len(batch) > 0 {
		h.Receive(batch)
		clear(batch)
	}
	for _, p := range pkts {
		link.Put(p)
	}
	clear(pkts)
	return batch
}

// readFailed handles an unexpected receive error (e.g. a pending ICMP
// error): it logs some and backs off a little so a persistent error cannot
// spin. It reports whether the loop must stop (the socket is closed).
func (l *Link) readFailed(sk *socket, err error, errs *int) bool {
	if l.closed.Load() {
		return true
	}
	if errors.Is(err, net.ErrClosed) && sk.gone.Load() {
		return true // a group left
	}
	if errors.Is(err, net.ErrClosed) {
		// Closed, but not by Close: this socket is gone for good.
		l.setUp(false, "socket closed", err)
		return true
	}
	if *errs++; *errs <= 10 || *errs%1000 == 0 {
		l.log.Warn("udp: receive failed", "on", sk.local, "err", err, "count", *errs)
	}
	time.Sleep(time.Millisecond)
	return false
}

// accept fills p, holding a datagram of n bytes from src, and reports
// whether it passes the framing and ICRC checks, counting it either way.
// c is the calling reader's cache of the ICRC's header part.
func (l *Link) accept(sk *socket, c *wire.ICRCCache, p *link.Packet, n int, src netip.AddrPort) bool {
	if n < wire.BTHLen+wire.ICRCLen || n >= link.BufSize || !src.Addr().IsValid() {
		l.ctr.RxMalformed.Add(1)
		return false
	}
	p.N = n
	p.Src = src
	p.Dst = sk.local

	if sk.is4 && l.policy == NoICRCCheck {
		l.ctr.RxICRCUnchecked.Add(1)
	} else {
		fr := wire.Framing{
			Src: src.Addr(), Dst: sk.addr, SrcPort: src.Port(), DstPort: sk.local.Port(),
			IPv4Frag: wire.IPv4DontFragment,
		}
		// One CRC answers both questions.
		if exact, some := c.CheckICRCIPv4(&fr, p.Data()); !exact {
			switch {
			case !sk.is4 || l.policy == StrictIPv4:
				l.ctr.RxBadICRC.Add(1)
				return false
			case l.policy == VerifyIPv4Zero:
				l.ctr.RxICRCUnchecked.Add(1)
			case some:
				l.ctr.RxICRCAnyID.Add(1)
			default:
				l.ctr.RxBadICRC.Add(1)
				return false
			}
		}
	}
	l.ctr.RxPackets.Add(1)
	l.ctr.RxBytes.Add(uint64(p.N))
	return true
}
