// The receive path on Linux: recvmmsg called directly through the socket's
// syscall.RawConn, so the reader goroutine still parks in the runtime's
// network poller when the socket is empty. The message headers, I/O vectors
// and source-address buffers are set up once per socket, so receiving
// allocates nothing per datagram (x/net's ReadBatch allocates a
// *net.UDPAddr for each).
//
// With UDP_GRO (Linux 5.0 and later) the kernel may hand over several
// datagrams of one flow as one, with their size in a control message: each
// message then reads into its packet's buffer and, past its end, into an
// overflow buffer of the socket; the first datagram stays in place and the
// others become packets whose buffers are views of where they lie (split),
// each checked as if it had come alone.

package udp

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// mmsghdr is struct mmsghdr: a msghdr and the length recvmmsg received.
// Go pads it as C does.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// receiver is the recvmmsg state of one socket's reader goroutine.
type receiver struct {
	rc    syscall.RawConn
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for IPv4 and IPv6 sources
	pkts  []*link.Packet
	k     int // datagrams the last recvmmsg returned
	// stale is how many of pkts went to the Handler with the last
	// receive: their slots get new packets, and their headers are pointed
	// at them, just before the next recvmmsg (refill), not as the batch
	// is delivered. A ping-pong's side then does that work after it has
	// answered, while it waits for the peer, rather than before.
	stale int
	vlen  int           // the messages the next non-blocking one asks for (want)
	hot   bool          // the last recvmmsg found something (adapt)
	errno syscall.Errno // its error
	read  func(fd uintptr) bool
	zones map[uint32]string // IPv6 scope IDs seen, by interface name
	icrc  wire.ICRCCache    // the last flow's masked headers

	// UDP_GRO
	gro  bool
	over [][]byte // per message: where a coalesced message goes past its packet
	ctrl []byte   // per message: room for the UDP_GRO control message
	segs []*link.Packet
	oks  []bool
	// Packets whose buffers are views of the received datagrams (split),
	// nviews of them in use.
	views  []*link.Packet
	nviews int
	viewed uint64 // views made in all (for tests)
}

// groCtrl is the room for a UDP_GRO control message (an int).
var groCtrl = unix.CmsgSpace(4)

// groMax is the largest coalesced message: one UDP datagram's payload.
const groMax = 65535

// groMsgs is how many messages one recvmmsg takes with GRO: each may hold
// up to 64 KiB (some dozens of packets), and each needs an overflow buffer
// that size.
const groMsgs = 8

// sendFlags are the flags of every sendmmsg: a link's socket may be in
// blocking mode (waitState.blockRecv), and a full send buffer must still
// send the caller to the poller rather than block the thread.
const sendFlags = unix.MSG_DONTWAIT

// groOverflow is the overflow room of one socket's receiver with GRO,
// allocated when the socket is opened so that no reader allocates
// megabytes while traffic has started.
func groOverflow() []byte { return make([]byte, groMsgs*(groMax-link.BufSize+1)) }

func newReceiver(rc syscall.RawConn, pkts []*link.Packet, over []byte) *receiver {
	n := len(pkts)
	gro := over != nil
	if gro {
		n = min(n, groMsgs)
	}
	r := &receiver{rc: rc, hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), pkts: pkts, gro: gro}
	if gro {
		r.iovs = make([]unix.Iovec, 2*n)
		r.over = make([][]byte, n)
		size := groMax - link.BufSize + 1
		for i := range r.over {
			r.over[i] = over[i*size : (i+1)*size : (i+1)*size]
		}
		r.ctrl = make([]byte, n*groCtrl)
	}
	r.read = r.recvmmsg
	return r
}

// enableGRO asks the socket for coalesced receives and reports whether it
// takes them.
func enableGRO(c syscall.Conn) bool {
	return withFD(c, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	}) == nil
}

// recvmmsg is the RawConn.Read callback: it reads what the socket holds
// without blocking, and returns false to wait in the poller if it is empty.
// The call cannot block (MSG_DONTWAIT), so it is made without telling the
// scheduler (RawSyscall6): a poll loop makes it several times a round trip,
// and the scheduler's entry and exit cost a tenth of a microsecond each time.
// Asking for one message it calls recvmsg instead (recvOne).
func (r *receiver) recvmmsg(fd uintptr) bool {
	r.refill()
	for {
		var k uintptr
		var e syscall.Errno
		if r.want() == 1 {
			k, e = r.recvOne(fd)
		} else {
			k, _, e = unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])),
				uintptr(r.want()), unix.MSG_DONTWAIT, 0, 0)
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			r.hot = false
			return false
		}
		r.k, r.errno = int(k), e
		if e != 0 {
			r.k = 0
		}
		r.adapt(r.k)
		return true
	}
}

// recvOne is recvmmsg's call for one message: recvmsg into the first
// header, whose length it sets as recvmmsg would; it returns the messages
// received (1) and the error. recvmmsg's own loop over its messages costs
// the kernel more than one recvmsg: an empty poll 482 against 455 ns, and a
// ping-pong of udpfloor's datagrams ran 6.88-6.92 us a round trip with
// recvmsg and sendmsg, 7.10-7.27 with recvmmsg and sendmmsg (alternated
// pairs); softrdma's own round trip moved less than that resolves.
func (r *receiver) recvOne(fd uintptr) (uintptr, syscall.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0].hdr)), unix.MSG_DONTWAIT, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	r.hdrs[0].n = uint32(n)
	return 1, 0
}

// want is how many messages the next non-blocking recvmmsg asks for.
func (r *receiver) want() int {
	if r.vlen == 0 {
		r.vlen = len(r.hdrs)
	}
	return r.vlen
}

// adapt sets the messages the next non-blocking recvmmsg asks for from the
// k the last one received: as many if it found fewer than it asked for
// (the socket was drained), twice as many if it filled them, up to the
// headers there are; but one message found where one was asked for, by a
// call that came after one that found the socket empty, is a ping-pong's
// receive, and the next call asks for one again. After a receive for the
// kernel, each message asked for and not there costs an attempt that fails
// (some 0.2 us): a ping-pong finds one message a call, a stream fills
// them. (Asking for two after every one, a ping-pong's side paid that
// attempt every other round trip.) A stream's calls find something call
// after call, and grow from one at the second.
func (r *receiver) adapt(k int) {
	switch {
	case k >= r.vlen && (r.vlen > 1 || r.hot):
		r.vlen = min(2*r.vlen, len(r.hdrs))
	case k >= r.vlen: // one of one, after an empty socket
	default:
		r.vlen = max(k, 1)
	}
	r.hot = k > 0
}

// recvmmsgWait is PollWait's blocking receive on a socket in blocking mode
// (waitState.blockRecv): it sleeps until a datagram comes or the socket's
// receive timeout passes, then takes what else is there without waiting.
// It reports the messages received and true, or false if none came in
// time. An error or a signal (EINTR) also returns true, with no messages:
// the caller's caller waits again, and the reader sees an error again.
func (r *receiver) recvmmsgWait(fd uintptr) (int, bool) {
	r.refill()
	k, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])),
		uintptr(r.want()), unix.MSG_WAITFORONE, 0, 0)
	switch e {
	case 0:
		r.k, r.errno = int(k), 0
		r.adapt(r.k)
		return int(k), true
	case unix.EAGAIN:
		r.hot = false
		return 0, false
	}
	return 0, true
}

// refill gives the slots of the packets the last receive delivered new
// packets and prepares their headers (stale).
func (r *receiver) refill() {
	if r.stale == 0 {
		return
	}
	for i := range r.stale {
		r.pkts[i] = link.Get()
	}
	r.prepare(r.stale)
	r.stale = 0
}

// prepare points the first k headers at their packets' buffers and address
// slots (the others are as the last prepare left them).
func (r *receiver) prepare(k int) {
	per := 1 // I/O vectors per message: the packet, and with GRO the overflow
	if r.gro {
		per = 2
	}
	for i := range min(k, len(r.hdrs)) {
		iov := r.iovs[per*i : per*i+per]
		iov[0].Base = &r.pkts[i].Buf[0]
		iov[0].SetLen(link.BufSize)
		h := &r.hdrs[i].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.names[i])), Namelen: uint32(unsafe.Sizeof(r.names[i])), Iov: &iov[0]}
		h.SetIovlen(per)
		if r.gro {
			iov[1].Base = &r.over[i][0]
			iov[1].SetLen(len(r.over[i]))
			h.Control = &r.ctrl[i*groCtrl]
			h.SetControllen(groCtrl)
		}
		r.hdrs[i].n = 0
	}
}

// segSize returns the size of the datagrams coalesced in message i of n
// bytes: the UDP_GRO control message's, or n.
func (r *receiver) segSize(i, n int) int {
	h := &r.hdrs[i].hdr
	c := r.ctrl[i*groCtrl : i*groCtrl+groCtrl]
	if int(h.Controllen) < unix.CmsgLen(4) {
		return n
	}
	ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if ch.Level != unix.IPPROTO_UDP || ch.Type != unix.UDP_GRO {
		return n
	}
	s := int(*(*int32)(unsafe.Pointer(&c[unix.CmsgLen(0)])))
	if s <= 0 || s > n {
		return n
	}
	return s
}

// copySeg copies bytes [off, off+n) of message i, which continue from its
// packet's buffer into its overflow buffer, to dst.
func (r *receiver) copySeg(dst []byte, i, off, n int) {
	b0 := r.pkts[i].Buf[:link.BufSize]
	c := 0
	if off < len(b0) {
		c = copy(dst[:n], b0[off:])
	}
	if c < n {
		copy(dst[c:n], r.over[i][off+c-len(b0):])
	}
}

// split turns the k messages received into packets: each message's first
// datagram stays in its packet; the others are views of where they were
// received (in the packet's buffer past the first, or in the overflow
// buffer), but for one that straddles the two, which is copied into a new
// packet. Each is checked. It returns the packets and their verdicts, in
// order. A view's buffer is exactly its datagram (it has no room past it,
// and link.Put leaves it out of the pool); it is valid until the next
// receive, and so as long as the Handler may hold it.
func (l *Link) split(sk *socket, r *receiver, k int) ([]*link.Packet, []bool) {
	segs, oks := r.segs[:0], r.oks[:0]
	r.nviews = 0
	for i := range k {
		n := int(r.hdrs[i].n)
		src := r.source(i)
		s := r.segSize(i, n)
		if s < n {
			l.ctr.RxGROBatches.Add(1)
		}
		segs = append(segs, r.pkts[i])
		oks = append(oks, l.accept(sk, &r.icrc, r.pkts[i], min(n, s), src))
		for off := s; off < n; off += s {
			ln := min(s, n-off)
			if ln >= link.BufSize {
				l.ctr.RxMalformed.Add(1)
				continue
			}
			var p *link.Packet
			switch {
			case off+ln <= link.BufSize:
				p = r.view(r.pkts[i].Buf[off : off+ln : off+ln])
			case off >= link.BufSize:
				o := off - link.BufSize
				p = r.view(r.over[i][o : o+ln : o+ln])
			default:
				p = link.Get()
				r.copySeg(p.Buf, i, off, ln)
			}
			segs = append(segs, p)
			oks = append(oks, l.accept(sk, &r.icrc, p, ln, src))
		}
	}
	r.segs, r.oks = segs, oks
	return segs, oks
}

// view returns a packet whose buffer is b, a datagram received with
// others: one of the receiver's packets kept for views, reset as link.Get
// resets a packet.
func (r *receiver) view(b []byte) *link.Packet {
	if r.nviews == len(r.views) {
		r.views = append(r.views, new(link.Packet))
	}
	p := r.views[r.nviews]
	r.nviews++
	r.viewed++
	*p = link.Packet{Buf: b}
	return p
}

// source decodes the sender of message i.
func (r *receiver) source(i int) netip.AddrPort {
	sa := &r.names[i]
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port(sa4.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr).Unmap()
		if sa.Scope_id != 0 && a.Is6() {
			a = a.WithZone(r.zone(sa.Scope_id))
		}
		return netip.AddrPortFrom(a, port(sa.Port))
	}
	return netip.AddrPort{}
}

// port converts a sockaddr port, kept in network byte order, to a number.
func port(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// zone names the interface of an IPv6 scope ID, as package net does; it
// looks each one up once.
func (r *receiver) zone(id uint32) string {
	if z, ok := r.zones[id]; ok {
		return z
	}
	z := strconv.FormatUint(uint64(id), 10)
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		z = ifi.Name
	}
	if r.zones == nil {
		r.zones = make(map[uint32]string)
	}
	r.zones[id] = z
	return z
}

// readLoop is the receive path of one socket, run by its reader goroutine
// until the socket is closed. It parks in the runtime's network poller
// while the socket is empty (after a bounded spin if it has just received);
// Poll may receive from the socket meanwhile, one of them at a time
// (rxState.mu).
func (l *Link) readLoop(sk *socket, rx *rxState) {
	defer l.wg.Done()
	defer rx.release()
	r := rx.r
	sp := &spinner{max: l.rxSpin, fresh: true}
	// read takes the receive lock for a recvmmsg and keeps it if packets
	// came, for their delivery. If the socket is empty right after a batch
	// it spins a while before parking (spin_linux.go).
	read := func(fd uintptr) bool {
		if !rx.mu.TryLock() {
			// A PollWait holding the lock receives what woke this reader:
			// park again rather than queue behind it for an empty socket
			// (it drains again if this came too late for it: unlockAll).
			l.wait.missed.Store(true)
			if l.wait.held.Load() {
				sp.parked()
				return false
			}
			rx.mu.Lock()
		}
		if r.recvmmsg(fd) {
			return true
		}
		rx.mu.Unlock()
		if sp.spin(l, rx, fd) {
			return true
		}
		sp.parked()
		return false
	}
	for {
		if err := r.rc.Read(read); err != nil { // the lock is not held
			sp.disarm()
			if l.readFailed(sk, err, &rx.errs) {
				return
			}
			continue
		}
		if r.errno != 0 {
			err := r.errno
			rx.mu.Unlock()
			sp.disarm()
			if l.readFailed(sk, err, &rx.errs) {
				return
			}
			continue
		}
		l.process(sk, rx)
		rx.mu.Unlock()
		if sp.max > 0 {
			sp.arm(time.Now())
		}
	}
}

// rxState is one socket's receive state: its packets, the receiver and the
// batch handed to the Handler, used by the reader goroutine and by Poll
// under mu.
type rxState struct {
	mu     sync.Mutex
	h      link.Handler
	r      *receiver
	pkts   []*link.Packet
	ok     []bool
	batch  []*link.Packet
	errs   int
	closed bool
	// poll is Poll's non-blocking recvmmsg, made once (a closure made per
	// call would be allocated per call); polled is its result.
	poll   func(fd uintptr)
	polled bool
}

// newRx sets up the receive state of sk for h.
func (l *Link) newRx(sk *socket, h link.Handler) (*rxState, error) {
	rc, err := sk.conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	n := l.batch
	rx := &rxState{h: h, pkts: make([]*link.Packet, n), ok: make([]bool, n), batch: make([]*link.Packet, 0, n)}
	for i := range rx.pkts {
		rx.pkts[i] = link.Get()
	}
	rx.r = newReceiver(rc, rx.pkts, sk.groBuf)
	rx.r.prepare(n)
	rx.poll = func(fd uintptr) { rx.polled = rx.r.recvmmsg(fd) }
	return rx, nil
}

// release returns the receive buffers to the pool once the socket is
// closed: those the last receive did not hand to the Handler.
func (rx *rxState) release() {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	rx.closed = true
	for _, p := range rx.pkts[rx.r.stale:] {
		link.Put(p)
	}
}

// process checks and delivers what the last recvmmsg received and returns
// the number of packets it handed to the Handler. The caller holds rx.mu.
func (l *Link) process(sk *socket, rx *rxState) int {
	r := rx.r
	l.ctr.RxCalls.Add(1)
	got, oks := rx.pkts[:r.k], rx.ok[:r.k]
	if r.gro {
		got, oks = l.split(sk, r, r.k)
	} else {
		for i := range r.k {
			oks[i] = l.accept(sk, &r.icrc, rx.pkts[i], int(r.hdrs[i].n), r.source(i))
		}
	}
	n := len(got)
	rx.batch = l.deliver(rx.h, got, oks, rx.batch)
	r.stale = r.k // the delivered ones went back to the pool (refill)
	return n
}

// pollSocket receives what sk holds now, without waiting, and delivers it
// on the caller's goroutine; it returns the packets delivered. It gives way
// (returns 0) while the reader goroutine is receiving.
func (l *Link) pollSocket(sk *socket) int {
	rx := sk.rx.Load()
	if rx == nil || !rx.mu.TryLock() {
		return 0
	}
	defer rx.mu.Unlock()
	if rx.closed {
		return 0
	}
	rx.polled = false
	if rx.r.rc.Control(rx.poll) != nil || !rx.polled || rx.r.errno != 0 {
		return 0 // an error is the reader's to see again on its next call
	}
	return l.process(sk, rx)
}
