// The send system call on Linux: Send's messages become struct mmsghdr
// entries kept in the call's scratch, and sendmmsg is made directly inside
// the socket's syscall.RawConn.Write, which holds the descriptor and parks
// the caller in the poller if the send buffer is full (a source-port
// socket, which the poller does not know, waits in poll(2) instead). x/net's WriteBatch
// does the same with a marshalling step of its own and through the
// scheduler's system-call entry; on a 64 B round trip the two cost some
// 0.4 us a send more.

package udp

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// sysConn is a socket's batchConn on Linux: x/net's (none for a source
// socket), and the socket's RawConn for writeMsgs.
type sysConn struct {
	batchConn
	raw syscall.RawConn
	// file says the socket is a source socket's file, outside the
	// network poller: a full send buffer is waited for in poll(2).
	file bool
}

// newBatchConn returns the batch interface of c.
func newBatchConn(c *net.UDPConn, is4 bool) batchConn {
	sc := &sysConn{batchConn: xnetConn(c, is4)}
	sc.raw, _ = c.SyscallConn()
	return sc
}

// newSourceBatchConn returns the batch interface of a source socket's
// file (listenSourceUDP): writeMsgs only, since nothing reads the socket
// and the direct sendmmsg takes every destination.
func newSourceBatchConn(c sockConn, _ bool) batchConn {
	sc := &sysConn{batchConn: noBatch{}, file: true}
	sc.raw, _ = c.SyscallConn()
	return sc
}

// noBatch is the batchConn of a socket only writeMsgs's direct call uses.
type noBatch struct{}

var errNoBatch = errors.New("udp: no batch calls on a source socket")

func (noBatch) ReadBatch([]ipv4.Message, int) (int, error)  { return 0, errNoBatch }
func (noBatch) WriteBatch([]ipv4.Message, int) (int, error) { return 0, errNoBatch }

// sysScratch is the system-call form of the messages of one write: a
// header, I/O vectors and a destination address each. It belongs to a
// sendScratch, and so to one Send at a time.
type sysScratch struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // room for either family

	// The RawConn.Write callback, made once (a method value made per call
	// would be allocated per call), and what it saw.
	fn    func(fd uintptr) bool
	sent  int
	errno syscall.Errno
	// For a socket outside the poller: wait for room in poll(2), giving
	// up once stop is set (the link is closing).
	wait bool
	stop *atomic.Bool
	pfd  [1]unix.PollFd
}

// rawSendMax bounds the bytes of one sendmmsg: the call is made without
// telling the scheduler (RawSyscall6), so it holds the goroutine's P for as
// long as the kernel copies (512 KiB, some 80 us here; a batch of 64
// packets of 4 KiB goes in one call), and a larger batch goes in several,
// between which other goroutines may run. Telling the scheduler costs more
// than it saves: a call it sees running past a monitor tick has its P
// handed to another thread, which on a process confined to one CPU preempts
// the call itself (WRITE 64 KiB, 420 KB a call: 2.84 GB/s through
// Syscall6, 3.12 GB/s through RawSyscall6).
const rawSendMax = 512 << 10

// writeMsgs writes msgs, all from sk, with one sendmmsg of at most
// rawSendMax bytes (and at least one message), repeated by the caller
// until all are written: it returns how many messages left and the error
// of the first that could not. A destination with an IPv6 zone goes
// through x/net, which resolves the zone's interface, as does a socket
// whose batchConn is not a sysConn (a test's).
func (l *Link) writeMsgs(sk *socket, s *sendScratch, msgs []ipv4.Message) (int, error) {
	x := &s.sys
	c, ok := sk.bc.(*sysConn)
	if !ok || c.raw == nil || !x.fill(msgs, sk.is4) {
		return sk.bc.WriteBatch(msgs, sendFlags)
	}
	if x.fn == nil {
		x.fn = x.write
	}
	x.sent, x.errno = 0, 0
	x.wait, x.stop = c.file, &l.closed
	if err := c.raw.Write(x.fn); err != nil {
		if errors.Is(err, os.ErrClosed) {
			err = net.ErrClosed // a file's, as the link's sockets report it
		}
		return 0, err
	}
	if x.errno != 0 {
		return x.sent, os.NewSyscallError("sendmmsg", x.errno)
	}
	return x.sent, nil
}

// write is the RawConn.Write callback: one sendmmsg of the headers. It
// returns false to wait in the poller when the send buffer is full.
func (x *sysScratch) write(fd uintptr) bool {
	for {
		var k uintptr
		var e syscall.Errno
		if len(x.hdrs) == 1 {
			// One message (a ping-pong's request and ACK, one GSO
			// datagram): sendmsg, which costs less than sendmmsg's loop.
			if _, _, e = unix.RawSyscall6(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&x.hdrs[0].hdr)), sendFlags, 0, 0, 0); e == 0 {
				k = 1
			}
		} else {
			k, _, e = unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&x.hdrs[0])), uintptr(len(x.hdrs)), sendFlags, 0, 0)
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if x.wait && x.room(fd) {
				continue
			}
			if !x.wait {
				return false
			}
			x.errno = e // the link is closing
		case 0:
			x.sent = int(k)
		default:
			x.errno = e
		}
		return true
	}
}

// roomWait bounds one poll(2) for room to write, so that a send waiting
// for a buffer that does not drain notices the link closing.
const roomWait = 50 // milliseconds

// room waits until fd, a socket outside the network poller, can be
// written, and reports false if the link closes first.
func (x *sysScratch) room(fd uintptr) bool {
	for !x.stop.Load() {
		x.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
		if n, err := unix.Poll(x.pfd[:], roomWait); n > 0 || (err != nil && err != unix.EINTR) {
			return true // writable, or an error the send will report
		}
	}
	return false
}

// fill builds the headers of msgs for a socket of the family is4 says, as
// many as one call carries (rawSendMax). It reports false, building
// nothing, if a destination has an IPv6 zone that names no interface.
func (x *sysScratch) fill(msgs []ipv4.Message, is4 bool) bool {
	nv, n, bytes := 0, 0, 0
	for i := range msgs {
		if a, _ := msgs[i].Addr.(*net.UDPAddr); a != nil && a.Zone != "" {
			if _, err := zoneIndex(a.Zone); err != nil {
				return false
			}
		}
		mb := 0
		for _, b := range msgs[i].Buffers {
			mb += len(b)
		}
		if n > 0 && bytes+mb > rawSendMax {
			break
		}
		bytes += mb
		nv += len(msgs[i].Buffers)
		n++
	}
	msgs = msgs[:n]
	if cap(x.hdrs) < len(msgs) {
		x.hdrs = make([]mmsghdr, len(msgs))
		x.names = make([]unix.RawSockaddrInet6, len(msgs))
	}
	if cap(x.iovs) < nv {
		x.iovs = make([]unix.Iovec, nv)
	}
	x.hdrs, x.names, x.iovs = x.hdrs[:len(msgs)], x.names[:len(msgs)], x.iovs[:nv]
	v := 0
	for i := range msgs {
		m := &msgs[i]
		first := v
		for _, b := range m.Buffers {
			if len(b) == 0 {
				continue
			}
			x.iovs[v].Base = &b[0]
			x.iovs[v].SetLen(len(b))
			v++
		}
		h := &x.hdrs[i].hdr
		*h = unix.Msghdr{}
		if v > first {
			h.Iov = &x.iovs[first]
			h.SetIovlen(v - first)
		}
		if len(m.OOB) > 0 {
			h.Control = &m.OOB[0]
			h.SetControllen(len(m.OOB))
		}
		a, _ := m.Addr.(*net.UDPAddr)
		if a == nil { // to the address a connected socket is connected to
			x.hdrs[i].n = 0
			continue
		}
		sa := &x.names[i]
		h.Name = (*byte)(unsafe.Pointer(sa))
		if is4 {
			sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
			*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET}
			putPort(&sa4.Port, a.Port)
			copy(sa4.Addr[:], a.IP.To4())
			h.Namelen = unix.SizeofSockaddrInet4
		} else {
			*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6}
			putPort(&sa.Port, a.Port)
			copy(sa.Addr[:], a.IP.To16())
			if a.Zone != "" {
				sa.Scope_id, _ = zoneIndex(a.Zone) // known: checked above
			}
			h.Namelen = unix.SizeofSockaddrInet6
		}
		x.hdrs[i].n = 0
	}
	return true
}

// release drops the headers' references to the caller's buffers.
func (x *sysScratch) release() {
	clear(x.iovs)
	for i := range x.hdrs {
		x.hdrs[i].hdr = unix.Msghdr{}
	}
}

// putPort stores port in a sockaddr's port field, in network byte order.
func putPort(p *uint16, port int) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}
