// ACKs held for an answer: a QP whose application answers the requests it
// receives (it posts a request of its own soon after each one arrives, as
// both sides of a ping-pong do) holds the ACK those requests call for,
// whoever received them (the link's reader, a CQ.Wait, a poll), until its
// next post, which sends it right behind the answer's packets, or until
// ackHoldMax has passed, when the device's ACK timer sends it by itself.
//
// This is what lets a program that waits by polling memory, and so calls
// nothing while it waits (ib_write_lat over the C library), run as fast as
// one that polls the device: its peer's poll for the send completion is
// still polling when the answer arrives, because the ACK it waits for comes
// behind the answer, so the answer is placed by that poll, not by the
// reader goroutine of a process whose only CPU the program is spinning on.
// It also spares the peer a packet per round trip.
//
// A QP is in this mode (QP.answers) from a post that comes within
// ackHoldMax of a receive that called for an ACK, until a held ACK's time
// runs out with no post: the application then does not answer (or not
// soon enough), and its ACKs go at once again, or are held only by its
// polls (ackdefer.go). A bound passing costs the peer ackHoldMax once.

package verbs

import (
	"sync"
	"sync/atomic"
	"time"
)

// defaultAckHold is the longest an ACK is held for an answer. It is a
// small fraction of the ACK timeouts peers use in practice (4.096 us x
// 2^timeout: 67 ms at perftest's 14) and well above the time a program
// polling memory takes to see a WRITE and post its answer (a few
// microseconds).
const defaultAckHold = 50 * time.Microsecond

// ackHoldMax is defaultAckHold, as nanoseconds; tests change it.
var ackHoldMax atomic.Int64

func holdMax() int64 { return ackHoldMax.Load() }

// ackTimer is the timer for ACKs held for an answer, of every device: a
// poll of any device also sends those whose time has passed (with one P, a
// program spinning on polls would keep the timer's goroutine from running).
type ackTimer struct {
	live atomic.Int32 // holds not yet ended; read without mu
	mu   sync.Mutex
	t    *time.Timer
	// armed says t is set to go off (or its call has yet to take mu).
	armed bool
	q     []timedAck // holds in the order they were made (so of their deadlines)
	relMu sync.Mutex // one releaser at a time, held through its release
	spare []timedAck // the releaser's list, reused; guarded by relMu
}

// timedAck is one hold: the QP and which of its holds (QP.holdSeq).
type timedAck struct {
	qp  *QP
	seq uint32
	due int64 // QP.now time
}

// answerHolds is the one ackTimer.
var answerHolds = new(ackTimer)

func init() {
	ackHoldMax.Store(int64(defaultAckHold))
	a := answerHolds
	a.t = time.AfterFunc(time.Hour, func() { a.expire(true) })
	a.t.Stop()
}

// add starts the timer for qp's hold seq made at now. It reports false if
// the QP's device is closing; the caller then sends the ACK at once.
func (a *ackTimer) add(qp *QP, seq uint32, now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if qp.dev.holdsClosed {
		return false
	}
	hold := holdMax()
	a.q = append(a.q, timedAck{qp, seq, now + hold})
	a.live.Add(1)
	if !a.armed {
		a.t.Reset(time.Duration(hold))
		a.armed = true
	}
	return true
}

// done says a hold ended before its time (a post, a destroy, ...). With
// none left the list empties, but the timer is left to go off for nothing:
// a ping-pong makes and ends a hold every round trip, and stopping the
// timer each time and setting it again at the next hold cost two timer
// operations a round trip; left set, it is set again only after it has
// gone off, at most once per ackHoldMax.
func (a *ackTimer) done() {
	a.mu.Lock()
	if a.live.Add(-1) == 0 {
		clear(a.q)
		a.q = a.q[:0]
	}
	a.mu.Unlock()
}

// poll is a poll's part: it sends the held ACKs whose time has passed.
// Without holds it costs an atomic load.
func (a *ackTimer) poll() {
	if a.live.Load() > 0 {
		a.expire(false)
	}
}

// expire sends the held ACKs whose time has come and ends their QPs'
// answer mode. The timer's call waits for a release in progress; a poll's
// leaves the work to it.
func (a *ackTimer) expire(timer bool) {
	if timer {
		a.relMu.Lock()
	} else if !a.relMu.TryLock() {
		return
	}
	a.mu.Lock()
	if timer {
		a.armed = false
	}
	now := clockNow()
	i := 0
	for i < len(a.q) && a.q[i].due <= now {
		i++
	}
	n := len(a.q) - i
	if n > 0 && !a.armed {
		a.t.Reset(time.Duration(a.q[i].due - now))
		a.armed = true
	}
	if i == 0 {
		a.mu.Unlock()
		a.relMu.Unlock()
		return
	}
	due := append(a.spare[:0], a.q[:i]...)
	copy(a.q, a.q[i:])
	clear(a.q[n:])
	a.q = a.q[:n]
	a.mu.Unlock()
	release(due, true)
	clear(due)
	a.spare = due[:0]
	a.relMu.Unlock()
}

// release ends the holds of list that are still current, sending their
// ACKs, each device's in one link call; timedOut also ends the QPs' answer
// mode.
func release(list []timedAck, timedOut bool) {
	var g *txGather
	for _, e := range list {
		qp := e.qp
		g = gatherFor(g, qp.dev)
		g.lock(qp)
		if qp.ackTimed && qp.holdSeq == e.seq {
			if timedOut {
				qp.answers = false
			}
			qp.releaseAckLocked()
		}
		g.unlock(qp)
	}
	if g != nil {
		g.put()
	}
}

// closeDevice sends every ACK that d's QPs hold for an answer and refuses
// new holds for d: the device is closing, and the peers wait for them.
func (a *ackTimer) closeDevice(d *Device) {
	a.mu.Lock()
	d.holdsClosed = true
	var list []timedAck // (the timer may go off for nothing)
	for _, e := range a.q {
		if e.qp.dev == d {
			list = append(list, e)
		}
	}
	a.mu.Unlock()
	// A release in progress holds relMu to its end: wait for it (a
	// WaitGroup here was misused: a timer's release could Add while this
	// Waited, which the race detector caught).
	a.relMu.Lock()
	//lint:ignore SA2001 a barrier: a release in progress has ended
	a.relMu.Unlock()
	release(list, false)
}

// holdForAnswerLocked holds the QP's pending ACK for its next post (or
// ackHoldMax). It reports false, holding nothing, if the device is closing.
func (qp *QP) holdForAnswerLocked(now int64) bool {
	qp.holdSeq++
	if !answerHolds.add(qp, qp.holdSeq, now) {
		return false
	}
	qp.ackHeld, qp.ackTimed = true, true
	return true
}

// noteAnswerLocked is a post's part: a post within ackHoldMax of a receive
// that called for an ACK (held or not) puts the QP in answer mode.
func (qp *QP) noteAnswerLocked(now int64) {
	if qp.lastAckAt != 0 && now-qp.lastAckAt <= holdMax() {
		qp.answers = true
	}
}
