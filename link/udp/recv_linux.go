// The receive path on Linux: recvmmsg called directly through the socket's
// syscall.RawConn, so the reader goroutine still parks in the runtime's
// network poller when the socket is empty. The message headers, I/O vectors
// and source-address buffers are set up once per socket, so receiving
// allocates nothing per datagram (x/net's ReadBatch allocates a
// *net.UDPAddr for each).

package udp

import (
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/link"
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
	k     int           // datagrams the last recvmmsg returned
	errno syscall.Errno // its error
	read  func(fd uintptr) bool
	zones map[uint32]string // IPv6 scope IDs seen, by interface name
}

func newReceiver(rc syscall.RawConn, pkts []*link.Packet) *receiver {
	n := len(pkts)
	r := &receiver{rc: rc, hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), pkts: pkts}
	r.read = r.recvmmsg
	return r
}

// recvmmsg is the RawConn.Read callback: it reads what the socket holds
// without blocking, and returns false to wait in the poller if it is empty.
func (r *receiver) recvmmsg(fd uintptr) bool {
	for {
		k, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])),
			uintptr(len(r.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.k, r.errno = int(k), e
		if e != 0 {
			r.k = 0
		}
		return true
	}
}

// prepare points the first k headers at their packets' buffers and address
// slots (the others are as the last prepare left them).
func (r *receiver) prepare(k int) {
	for i := range k {
		iov := &r.iovs[i]
		iov.Base = &r.pkts[i].Buf[0]
		iov.SetLen(link.BufSize)
		h := &r.hdrs[i].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.names[i])), Namelen: uint32(unsafe.Sizeof(r.names[i])), Iov: iov}
		h.SetIovlen(1)
		r.hdrs[i].n = 0
	}
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
// until the socket is closed.
func (l *Link) readLoop(sk *socket, h link.Handler) {
	defer l.wg.Done()
	n := l.batch
	pkts := make([]*link.Packet, n)
	ok := make([]bool, n)
	batch := make([]*link.Packet, 0, n)
	for i := range pkts {
		pkts[i] = link.Get()
	}
	defer func() {
		for _, p := range pkts {
			link.Put(p)
		}
	}()
	rc, err := sk.conn.SyscallConn()
	if err != nil {
		l.log.Error("udp: receive: no raw socket", "on", sk.local, "err", err)
		return
	}
	r := newReceiver(rc, pkts)
	r.prepare(n)
	var errs int
	for {
		err := r.rc.Read(r.read)
		if err == nil && r.errno != 0 {
			err = r.errno
		}
		if err != nil {
			if l.readFailed(sk, err, &errs) {
				return
			}
			continue
		}
		for i := range r.k {
			ok[i] = l.accept(sk, pkts[i], int(r.hdrs[i].n), r.source(i))
		}
		batch = l.deliver(h, pkts, ok, batch, r.k)
		r.prepare(r.k) // the packets delivered were replaced
	}
}
