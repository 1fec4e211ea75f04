// PollWait and Wake (link.Waiter) on Linux: a goroutine waiting for packets
// holds every socket's receive lock and sleeps in ppoll on the sockets and
// an eventfd that Wake writes. The kernel wakes it directly when a datagram
// arrives; it then receives and handles the packets itself, as Poll does.
// A link with one socket, in a process with one P, sleeps the first part of
// the wait in the receive itself (blockRecv), one system call instead of
// two.
// The reader goroutines may be woken by the same arrival (the runtime's
// poller watches the sockets too); they wait for the lock, find the socket
// drained and park again, so nothing that arrives is left unread whoever
// takes it.

package udp

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// waitState is the link's PollWait state.
type waitState struct {
	efd    int         // the eventfd Wake writes; -1 if there is none
	inPoll atomic.Bool // a PollWait is in ppoll or about to be
	// waking counts Wakes writing efd: closeWait waits for them, so that
	// none writes a descriptor number reused after the close.
	waking atomic.Int32
	gone   atomic.Bool // efd is closed or closing
	// held is set while a PollWait holds the receive locks; missed, by a
	// reader that found it so and parked instead of waiting for the lock.
	held, missed atomic.Bool
	// pfds is the ppoll set: each socket's descriptor, then efd. It is
	// used by the goroutine holding every socket's receive lock.
	pfds []unix.PollFd
	one  [8]byte // the eventfd increment
	buf  [8]byte // where its counter is read
	// blockRecv says the link's one socket is in blocking mode, with a
	// receive timeout of rawWait, for PollWait's first slice (see there).
	// Every other call on it passes MSG_DONTWAIT.
	blockRecv bool
	blockHits atomic.Uint64 // blocking receives that returned datagrams (for tests)
}

// initWait sets up PollWait once the sockets are bound. Without an eventfd
// PollWait reports that it cannot wait.
func (l *Link) initWait() {
	w := &l.wait
	w.efd = -1
	fds := make([]uintptr, len(l.socks))
	for i, s := range l.socks {
		rc, err := s.conn.SyscallConn()
		if err != nil {
			return
		}
		if rc.Control(func(fd uintptr) { fds[i] = fd }) != nil {
			return
		}
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		l.log.Debug("udp: no eventfd: PollWait disabled", "err", err)
		return
	}
	w.efd = efd
	w.pfds = make([]unix.PollFd, len(fds)+1)
	for i, fd := range fds {
		w.pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	w.pfds[len(fds)] = unix.PollFd{Fd: int32(efd), Events: unix.POLLIN}
	binary.NativeEndian.PutUint64(w.one[:], 1)
	if len(fds) == 1 {
		fd := int(fds[0])
		tv := unix.NsecToTimeval(int64(rawWait))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			return
		}
		w.blockRecv = true
	}
}

// PollWait is Poll that waits up to timeout for packets, for Wake or for
// ready (link.Waiter). It reports ok false, without waiting, if a reader
// goroutine or another poller holds a socket's receive lock at that moment,
// or if the link is closed or not started.
func (l *Link) PollWait(timeout time.Duration, ready func() bool) (int, bool) {
	w := &l.wait
	if w.efd < 0 || !l.lockAll() {
		return 0, false
	}
	w.held.Store(true)
	defer l.endWait()
	if l.closed.Load() {
		return 0, false
	}
	w.inPoll.Store(true)
	if ready != nil && ready() {
		w.inPoll.Store(false)
		return 0, true
	}
	for i := range w.pfds {
		w.pfds[i].Revents = 0
	}
	// With one P (GOMAXPROCS=1, as in a process confined to one CPU) the
	// first rawWait of the wait keeps it: a blocking system call gives
	// the P up, the runtime hands it to a thread that polls the network,
	// and that thread, woken by the same datagram, runs the link's reader
	// while this one waits for the P back: a hand-off between threads on
	// every wake-up, which doubled a round trip. The price: the process's
	// other goroutines wait for up to rawWait. With more Ps the hand-off
	// does not happen and holding one measured slower.
	timeout = max(timeout, 0)
	one := runtime.GOMAXPROCS(0) == 1
	// With one socket the first slice sleeps in the receive itself: a
	// blocking recvmmsg (the socket's timeout is rawWait) returns with the
	// datagrams, where ppoll returns and a recvmmsg follows. It does not
	// watch the eventfd, and need not: holding the only P, this goroutine
	// is the only one of the process that can run until the slice ends, so
	// no Wake or Close can come meanwhile. (One that comes between the
	// ready check above and the receive, if this goroutine is preempted
	// there, is seen by the ppoll after the slice: up to rawWait late.)
	// Sleeping so measured 55.6 us against 64.8 a SEND round trip (two
	// pinned processes, -e, medians of six alternated pairs).
	blocked := false
	if one && w.blockRecv && timeout >= rawWait {
		blocked = true
		sk := l.socks[0]
		rx := sk.rx.Load()
		if k, ok := rx.r.recvmmsgWait(uintptr(w.pfds[0].Fd)); ok {
			w.inPoll.Store(false)
			n := 0
			if k > 0 {
				w.blockHits.Add(1)
				n = l.process(sk, rx)
				if k == len(rx.r.hdrs) {
					n += l.drain(sk, uintptr(w.pfds[0].Fd))
				}
			}
			return n, true
		}
		timeout -= rawWait // nothing came: the rest in ppoll
		if timeout == 0 {
			w.inPoll.Store(false)
			return 0, true
		}
	}
	var err error
	if first := min(timeout, rawWait); one && !blocked && first > 0 {
		ts := unix.NsecToTimespec(int64(first))
		r, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&w.pfds[0])), uintptr(len(w.pfds)),
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case errno != 0:
			err = errno
		case r > 0:
			timeout = 0
		default:
			timeout -= first
		}
	}
	if err == nil && timeout > 0 {
		ts := unix.NsecToTimespec(int64(timeout))
		_, err = unix.Ppoll(w.pfds, &ts, nil)
	}
	w.inPoll.Store(false)
	if err != nil {
		return 0, true // EINTR: the caller checks and waits again
	}
	if w.pfds[len(l.socks)].Revents != 0 {
		unix.Read(w.efd, w.buf[:]) // reset the counter; EAGAIN if a racing read took it
	}
	n := 0
	for i, s := range l.socks {
		if w.pfds[i].Revents != 0 {
			n += l.drain(s, uintptr(w.pfds[i].Fd))
		}
	}
	return n, true
}

// drain receives and handles what sk holds, batch after batch until it is
// empty: a reader woken meanwhile would find nothing, so nothing may be
// left behind. The caller holds sk's receive lock.
func (l *Link) drain(sk *socket, fd uintptr) int {
	rx := sk.rx.Load()
	n := 0
	for !rx.closed && rx.r.recvmmsg(fd) && rx.r.errno == 0 {
		full := rx.r.k == len(rx.r.hdrs)
		n += l.process(sk, rx)
		if !full {
			break
		}
	}
	return n
}

// endWait gives the receive locks back after a PollWait. A reader that
// parked meanwhile (missed) may have been woken by a datagram that arrived
// after the last drain, and will not be woken for it again: what the
// sockets hold is received here once more.
func (l *Link) endWait() {
	w := &l.wait
	w.held.Store(false)
	l.unlockAll()
	if !w.missed.Swap(false) || l.closed.Load() || !l.lockAll() {
		return // a lock taken: its holder receives
	}
	for i, s := range l.socks {
		l.drain(s, uintptr(w.pfds[i].Fd))
	}
	l.unlockAll()
}

// lockAll takes every socket's receive lock, or none: it reports false if
// the link is not started or a lock is held.
func (l *Link) lockAll() bool {
	for i, s := range l.socks {
		rx := s.rx.Load()
		if rx == nil || !rx.mu.TryLock() {
			for _, s := range l.socks[:i] {
				s.rx.Load().mu.Unlock()
			}
			return false
		}
		if rx.closed {
			for _, s := range l.socks[:i+1] {
				s.rx.Load().mu.Unlock()
			}
			return false
		}
	}
	return true
}

func (l *Link) unlockAll() {
	for _, s := range l.socks {
		s.rx.Load().mu.Unlock()
	}
}

// Wake ends a PollWait in progress (link.Waiter).
func (l *Link) Wake() {
	w := &l.wait
	if !w.inPoll.Load() {
		return
	}
	w.waking.Add(1)
	if !w.gone.Load() {
		unix.Write(w.efd, w.one[:])
	}
	w.waking.Add(-1)
}

// stopWait ends a PollWait in progress and waits until none is, so that
// the sockets can be closed: Close calls it after setting closed.
func (l *Link) stopWait() {
	w := &l.wait
	if w.efd < 0 {
		return
	}
	unix.Write(w.efd, w.one[:])
	for _, s := range l.socks {
		if rx := s.rx.Load(); rx != nil {
			rx.mu.Lock()
			//lint:ignore SA2001 a barrier: any PollWait that held it has returned
			rx.mu.Unlock()
		}
	}
}

// closeWait frees the eventfd once nothing can use it.
func (l *Link) closeWait() {
	w := &l.wait
	if w.efd < 0 {
		return
	}
	w.gone.Store(true)
	for w.waking.Load() != 0 {
		runtime.Gosched()
	}
	unix.Close(w.efd)
}

// rawWait is how long a PollWait in a process with one P sleeps at first
// without giving the P up.
const rawWait = 500 * time.Microsecond
