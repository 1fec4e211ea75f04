// Acknowledgements held for the application's answer: when a poll on the
// application's goroutine (CQ.Poll, Device.Poll) receives requests that
// call for an ACK, the coalesced ACK is not sent by that poll. It is held
// on the QP, and leaves with the next thing that goroutine does with the
// device: a post to the QP sends it ahead of the request it builds, in the
// same system call, and the next CQ.Poll, Device.Poll or CQ.Wait sends the
// ones still held. A ping-pong's side thus answers a request and
// acknowledges it with one send where it made two, and the application
// sees the request's completion one system call sooner. The device's
// pacer sends whatever an application leaves held when it stops calling
// the device (it is woken for it at once), so an ACK is never held longer
// than the application takes to come back or yield its processor.
//
// Only a poll on the application's goroutine holds ACKs: the link's reader
// goroutine, and a CQ.Wait receiving while it sleeps, send them at once, as
// before (nothing on their goroutine would carry them sooner).

package verbs

import (
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// ackHold is a device's part in holding ACKs: whether one of its polls is
// receiving.
type ackHold struct {
	// polling counts the polls on application goroutines in progress:
	// while it is nonzero, the receive path holds ACKs.
	polling atomic.Int32
}

// heldAcks is the list of QPs holding an ACK, of every device: a program
// polling one device sends what its polls of another held.
var heldAcks struct {
	n       atomic.Int32 // len(qps), read without mu
	mu      sync.Mutex
	qps     []*QP      // guarded by mu
	flushMu sync.Mutex // one flusher at a time; others leave it the work
	spare   []*QP      // the flusher's list, reused; guarded by flushMu
}

// pollHolding is Device.Poll with the ACKs it calls for held (see
// ackdefer.go's header).
func (d *Device) pollHolding() int {
	if d.poller == nil {
		return 0
	}
	d.acks.polling.Add(1)
	n := d.poller.Poll()
	d.acks.polling.Add(-1)
	return n
}

// ackLaterOrNowLocked is what the receive path does, once a batch's
// packets for qp are handled (at clk's time), with the ACK they call for: hold it while an
// application's poll is receiving, send it otherwise. An ACK waiting
// behind a READ answer (the responder's output queue) is left to it.
func (qp *QP) ackLaterOrNowLocked(clk *rxClock) {
	if !qp.resp.ackPending {
		return
	}
	if len(qp.resp.queue) > 0 {
		qp.sendPendingAckLocked()
		return
	}
	now := clk.now()
	qp.lastAckAt = now
	if qp.answers { // ackanswer.go
		if qp.ackHeld || qp.holdForAnswerLocked(now) {
			return
		}
		qp.sendPendingAckLocked()
		return
	}
	if qp.dev.acks.polling.Load() == 0 {
		qp.sendPendingAckLocked()
		return
	}
	if qp.ackHeld {
		return
	}
	qp.ackHeld = true
	a := &heldAcks
	a.mu.Lock()
	a.qps = append(a.qps, qp)
	a.n.Add(1)
	a.mu.Unlock()
	qp.dev.pacer.kick()
}

// releaseAckLocked queues the QP's held ACK, if any, for sending with the
// QP's next batch. A QP no longer in a state that answers requests drops it.
func (qp *QP) releaseAckLocked() {
	if !qp.ackHeld {
		return
	}
	qp.ackHeld = false
	if qp.ackTimed {
		qp.ackTimed = false
		answerHolds.done()
	}
	switch qp.state {
	case StateRTR, StateRTS, StateSQD, StateSQE:
		if !qp.dead {
			qp.sendPendingAckLocked()
			return
		}
	}
	qp.resp.ackPending = false
}

// sendAcksLocked is Destroy's last word to the peer: of the packets posts
// left for the pacer (qp.out) it sends the acknowledgements, which a post
// released from a hold (ACKs and NAKs, atomic ACKs), and then the ACK the QP
// holds, if any; the requests go with the QP, as a destroyed QP's work
// requests do. The program has seen the messages those ACKs acknowledge
// arrive, and the peer waits for them: a program that posts its last SEND
// and tears down before the pacer runs (ibv_srq_pingpong's client, whose
// posts beyond its count are left for the pacer with the ACK they
// released) would otherwise leave the peer retrying into a QP that is
// gone.
func (qp *QP) sendAcksLocked() {
	keep := 0
	for _, p := range qp.out {
		if isAcknowledge(p) {
			qp.out[keep] = p
			keep++
		} else {
			link.Put(p)
		}
	}
	clear(qp.out[keep:])
	qp.out = qp.out[:keep]
	qp.releaseAckLocked() // behind them: the newest PSN last
	if len(qp.out) > 0 {
		qp.txMu.Lock()
		qp.sendBatch(qp.out)
		qp.txMu.Unlock()
		clear(qp.out)
		qp.out = qp.out[:0]
	}
}

// isAcknowledge reports whether p is an RC ACKNOWLEDGE (an ACK or a NAK)
// or ATOMIC ACKNOWLEDGE packet.
func isAcknowledge(p *link.Packet) bool {
	if p.N < wire.BTHLen {
		return false
	}
	op := wire.Opcode(p.Buf[0])
	return op == wire.RCAcknowledge || op == wire.RCAtomicAcknowledge
}

// flushAcks sends every held ACK, of every device, each device's in one
// call to its link. It returns at once if none is held, or if another
// goroutine is flushing (that one, or the pacer it was woken for, sends
// what this one would have).
func flushAcks() {
	a := &heldAcks
	if a.n.Load() == 0 || !a.flushMu.TryLock() {
		return
	}
	flushAcksLocked()
}

// sendHeldAcks sends every held ACK, waiting for a flush in progress: a
// device being closed sends what its polls held (the peers wait for it)
// rather than drop it.
func sendHeldAcks() {
	heldAcks.flushMu.Lock()
	flushAcksLocked()
}

// flushAcksLocked is flushAcks; the caller holds flushMu, which it releases.
func flushAcksLocked() {
	a := &heldAcks
	a.mu.Lock()
	qps := a.qps
	a.qps = a.spare[:0]
	a.n.Store(0)
	a.mu.Unlock()
	var g *txGather
	for _, qp := range qps {
		g = gatherFor(g, qp.dev)
		g.lock(qp)
		qp.releaseAckLocked()
		g.unlock(qp)
	}
	if g != nil {
		g.put()
	}
	clear(qps)
	a.spare = qps[:0]
	a.flushMu.Unlock()
	if a.n.Load() > 0 { // held while this one sent: a pacer takes them
		a.mu.Lock()
		var d *Device
		if len(a.qps) > 0 {
			d = a.qps[0].dev
		}
		a.mu.Unlock()
		if d != nil {
			d.pacer.kick()
		}
	}
}
