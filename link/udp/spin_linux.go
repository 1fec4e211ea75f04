// The reader's bounded spin (Linux): after a batch, a reader whose socket is
// empty looks again for a short while before it parks in the runtime's
// network poller, so that a stream whose batches follow each other closely
// is received without a park and wake-up per batch.

package udp

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spinner is one reader goroutine's spin state. Only that goroutine uses it.
type spinner struct {
	max   time.Duration // Config.RxSpin; 0: never spin
	armed bool          // a batch was just handled: the next empty socket spins
	from  time.Time     // when that batch was handled
	skip  int           // batches to pass without spinning, after spins that found nothing
	miss  int           // spins in a row that found nothing
	inq   int32         // SIOCINQ's answer
	// streak is when the reader's first batch after it last parked was
	// handled: with one P a reader that keeps spinning keeps the scheduler
	// from polling the network for the process's other goroutines, so it
	// parks at least every streakMax. fresh: it parked since.
	streak time.Time
	fresh  bool
}

// Spin tuning.
const (
	// spinBackoff bounds the batches a reader passes without spinning
	// after spins that found nothing: a spin that keeps failing (the
	// sender waits for this side's answer) costs a spin every that many
	// batches at most.
	spinBackoff = 64
	// streakMax is how long a reader with one P spins from batch to batch
	// before it parks once, letting the scheduler poll the network.
	streakMax = time.Millisecond
)

// arm follows a batch handled at now: the next empty socket spins, unless
// spins have been failing.
func (s *spinner) arm(now time.Time) {
	if s.max <= 0 {
		return
	}
	if s.fresh {
		s.streak, s.fresh = now, false
	}
	if s.skip > 0 {
		s.skip--
		return
	}
	s.armed, s.from = true, now
}

// disarm follows a receive error: no spin.
func (s *spinner) disarm() { s.armed = false }

// parked records that the reader goes back to the poller.
func (s *spinner) parked() { s.armed, s.fresh = false, true }

// spin is the reader's RawConn.Read callback's last step when the socket is
// empty and the receive lock has been let go. If a batch was just handled it
// looks at the socket (SIOCINQ, without the lock) until a datagram is there
// or max has passed since that batch, yielding to the process's other
// goroutines between looks. It returns true, holding rx.mu with the
// datagrams received, as the callback does, or false to park.
//
// The receive lock: a spinning reader does not hold it while it looks, so
// that Poll and PollWait take it as they would from a parked reader. If it
// finds the lock held when it has seen a datagram, it parks: the holder
// receives, and any datagram that arrived since the reader's RawConn.Read
// began has readied the socket in the poller, which wakes the reader at
// once if something is left (it then takes the lock as a woken reader does,
// marking missed if a PollWait holds it).
func (s *spinner) spin(l *Link, rx *rxState, fd uintptr) bool {
	if !s.armed {
		return false
	}
	s.armed = false
	one := runtime.GOMAXPROCS(0) == 1
	for {
		runtime.Gosched()
		now := time.Now()
		if now.Sub(s.from) > s.max {
			l.spinMisses.Add(1)
			s.failed()
			return false
		}
		if l.closed.Load() || (one && now.Sub(s.streak) > streakMax) {
			return false
		}
		if !s.readable(fd) {
			continue
		}
		if !rx.mu.TryLock() {
			return false
		}
		if rx.r.recvmmsg(fd) {
			l.spinHits.Add(1)
			s.miss = 0
			return true
		}
		rx.mu.Unlock()
	}
}

// failed counts a spin that found nothing: after several in a row, the next
// batches pass without one (more of them each time, up to spinBackoff).
func (s *spinner) failed() {
	s.miss++
	if s.miss > 1 {
		s.skip = min(1<<min(s.miss-2, 6), spinBackoff)
	}
}

// readable reports whether the socket holds a datagram (SIOCINQ: the size
// of the first one; a zero-length datagram reads as none and waits for the
// poller).
func (s *spinner) readable(fd uintptr) bool {
	s.inq = 0
	_, _, e := unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&s.inq)))
	return e == 0 && s.inq > 0
}
