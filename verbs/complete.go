// The completer: ACKs, NAKs, read responses and atomic ACKs retire send WQEs
// in order; PSN sequence NAKs and ACK timeouts rewind the requester for a
// go-back-N retransmission; RNR NAKs pause it for the RNR timer.

package verbs

import (
	"encoding/binary"
	"math/bits"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// handleResponseLocked processes a response packet at the requester.
func (qp *QP) handleResponseLocked(pkt wire.Packet) {
	if qp.typ != RC || qp.state == StateErr {
		return
	}
	psn := pkt.BTH().PSN()
	// Only PSNs of requests outstanding are meaningful; anything else is a
	// stale duplicate (IBTA 9.7.5.2.?: ghost responses are dropped).
	if psn.Before(qp.req.ackedPSN.Add(-1)) || !psn.Before(qp.sentPSNLocked()) {
		qp.dev.stats.RxDuplicate.Add(1)
		return
	}
	// Any response to an outstanding request restarts the ACK timer, even
	// one that is then ignored (rxe re-arms its retransmit timer whenever the
	// completer has drained its queue): while the responder is still
	// streaming the answer to an older READ request, a timeout would only
	// add another request behind it.
	qp.refreshDeadlineLocked()
	switch pkt.Opcode() {
	case wire.RCAcknowledge:
		qp.handleAckLocked(pkt.AETH().Syndrome(), psn)
	case wire.RCAtomicAcknowledge:
		qp.handleAtomicAckLocked(psn, pkt.AtomicAckETH().Orig())
	default:
		qp.handleReadResponseLocked(pkt)
	}
	if qp.state == StateRTS || qp.state == StateSQD {
		qp.progressLocked()
	}
}

func (qp *QP) handleAckLocked(syn wire.Syndrome, psn wire.PSN) {
	switch {
	case syn.IsACK():
		qp.ackUpToLocked(psn)
	case syn.IsRNR():
		qp.ackUpToLocked(psn.Add(-1))
		w := qp.wqeForPSNLocked(psn)
		if w == nil {
			return
		}
		if qp.attr.RNRRetry != 7 {
			if qp.req.rnrLeft == 0 {
				qp.failSendLocked(w, RNRRetryExcErr)
				return
			}
			qp.req.rnrLeft--
		}
		qp.rewindLocked(psn)
		qp.req.mode = rnrWait
		qp.req.deadline = 0
		if qp.rnrT != nil {
			qp.rnrT.Stop()
		}
		qp.rnrT = qp.dev.clk.AfterFunc(syn.RNRTimer(), qp.onRNRTimer)
	case syn.IsNAK():
		qp.ackUpToLocked(psn.Add(-1))
		if syn.NAKCode() == wire.NAKPSNSequence {
			// Ignored: a NAK for a PSN already acknowledged, which is
			// stale (overtaken by an ACK; rxe drops responses behind
			// comp.psn too); one for a PSN not sent yet; and a second NAK
			// for the PSN the last one rewound to. The responder NAKs an
			// expected PSN once and expects it again only after receiving
			// it, so that is a copy made on the way, and acting on it
			// would send the same packets a third time.
			if psn.Before(qp.req.ackedPSN) || !psn.Before(qp.req.psn) ||
				qp.req.nakPSN == (optPSN{psn, true}) {
				qp.dev.stats.RxDuplicate.Add(1)
				return
			}
			qp.req.nakPSN = optPSN{psn, true}
			qp.rewindLocked(psn)
			qp.recoverLocked()
			return
		}
		w := qp.wqeForPSNLocked(psn)
		if w == nil {
			return
		}
		status := RemOpErr
		switch syn.NAKCode() {
		case wire.NAKInvalidReq:
			status = RemInvReqErr
		case wire.NAKRemoteAccess:
			status = RemAccessErr
		}
		qp.failSendLocked(w, status)
	}
}

// sentPSNLocked returns the PSN after the newest one given to a request:
// req.psn, unless a rewind has moved that back, and the responder may then
// answer (acknowledge, or respond to a READ) PSNs up to the newest.
func (qp *QP) sentPSNLocked() wire.PSN {
	next := qp.req.psn
	for i := qp.sq.cur; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted {
			break
		}
		if w.lastPSN.Add(1).After(next) {
			next = w.lastPSN.Add(1)
		}
	}
	return next
}

// oldestOutstandingLocked returns the oldest started WQE not yet completed.
func (qp *QP) oldestOutstandingLocked() *swqe {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted {
			return nil
		}
		if w.state != wqeDone {
			return w
		}
	}
	return nil
}

// wqeForPSNLocked returns the outstanding WQE whose PSN range holds psn.
func (qp *QP) wqeForPSNLocked(psn wire.PSN) *swqe {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted {
			return nil
		}
		if w.state == wqeDone {
			continue
		}
		if !psn.Before(w.firstPSN) && !psn.After(w.lastPSN) {
			return w
		}
	}
	return nil
}

// ackUpToLocked applies an acknowledgement of every PSN up to psn. SEND and
// WRITE requests it covers complete. A READ or atomic before psn still
// without its response lost it (IBTA 9.7.5.1.5: the responder answers in
// PSN order): it is asked for again, alone, and the acknowledgement is kept
// in peerAcked for the requests behind it, which need not be sent again.
func (qp *QP) ackUpToLocked(psn wire.PSN) {
	if psn.Before(qp.req.ackedPSN) {
		return // nothing new
	}
	if !qp.req.peerAcked.set || psn.After(qp.req.peerAcked.psn) {
		qp.req.peerAcked = optPSN{psn, true}
	}
	acked := qp.req.ackedPSN
	progress := false
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted {
			break
		}
		if w.state == wqeDone {
			continue
		}
		if psn.Before(w.firstPSN) {
			break
		}
		if w.info.rdAtomic() {
			if psn.After(w.lastPSN) || (w.info.class == classAtomic && !psn.Before(w.firstPSN)) {
				qp.responseLostLocked(w)
			}
			break
		}
		if psn.Before(w.lastPSN) {
			break // partly acknowledged
		}
		qp.completeSendLocked(w, Success)
		progress = true
	}
	qp.ackedTo(psn.Add(1))
	// The retry counters restart on every acknowledgement that moves
	// forward, not only when a message completes (rxe's
	// reset_retry_counters): a long message on a lossy path would
	// otherwise run out of retries while making progress.
	if progress || qp.req.ackedPSN != acked {
		qp.req.retryLeft = int(qp.attr.RetryCnt)
		qp.req.rnrLeft = int(qp.attr.RNRRetry)
	}
}

// responseLostLocked handles an acknowledgement of a PSN after the READ or
// atomic w while w has no response: the request or its response was lost.
// The request is sent again alone, once until the next timeout; a READ whose
// responses have begun to arrive finds its own gaps (handleReadResponseLocked).
func (qp *QP) responseLostLocked(w *swqe) {
	if w.state != wqeSent || w.reasked || (w.info.class == classRead && (w.readPkts > 0 || w.readSeen != 0)) {
		return
	}
	qp.dev.stats.RxOutOfSeq.Add(1)
	w.reasked, w.reaskAt = true, w.readPkts
	qp.emitRequestLocked(w, w.firstPSN.Add(w.readPkts), 0, 0)
	qp.recoverLocked()
}

// afterRdAtomicLocked runs when a READ or atomic completes: requests behind
// it that the responder acknowledged meanwhile complete too.
func (qp *QP) afterRdAtomicLocked() {
	if pa := qp.req.peerAcked; pa.set && !pa.psn.Before(qp.req.ackedPSN) {
		qp.ackUpToLocked(pa.psn)
	}
}

// ackedTo moves the oldest unacknowledged PSN forward to p, but not past
// the first response a READ or atomic still waits for: an acknowledgement
// of the PSNs of later requests (or of a READ's last PSN) does not deliver
// it, and a retry starts from the oldest unacknowledged PSN.
func (qp *QP) ackedTo(p wire.PSN) {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted || !p.After(w.firstPSN) {
			break
		}
		if w.state != wqeDone && w.info.rdAtomic() {
			if lim := w.firstPSN.Add(w.readPkts); p.After(lim) {
				p = lim
			}
			break
		}
	}
	if p.After(qp.req.ackedPSN) && !p.After(qp.req.psn) {
		qp.req.ackedPSN = p
		if m := qp.req.mode; m == recovering || m == recoveringFired {
			// Progress: a recovery goes on until recoverPSN is reached.
			qp.req.mode = steady
			if p.Before(qp.req.recoverPSN) {
				qp.req.mode = recovering
			}
		}
		qp.refreshDeadlineLocked()
	}
}

func (qp *QP) handleAtomicAckLocked(psn wire.PSN, orig uint64) {
	w := qp.wqeForPSNLocked(psn)
	if w == nil || w.info.class != classAtomic || w.state != wqeSent {
		qp.dev.stats.RxDuplicate.Add(1)
		return
	}
	// The response acknowledges every request before it (an earlier READ or
	// atomic without its response is asked for again); this one's result is
	// final whatever happens to them.
	qp.ackUpToLocked(psn.Add(-1))
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], orig)
	if err := qp.dev.mrs.Scatter(b[:], qp.pd.id, w.sgl, 0); err != nil {
		qp.failSendLocked(w, LocProtErr)
		return
	}
	qp.completeSendLocked(w, Success)
	qp.ackedTo(psn.Add(1))
	qp.req.retryLeft = int(qp.attr.RetryCnt)
	qp.req.rnrLeft = int(qp.attr.RNRRetry)
	qp.afterRdAtomicLocked()
}

// readReorder is how far past a missing READ response a later one may
// arrive before the missing one counts as lost (reordering below it is
// waited out).
const readReorder = 16

// handleReadResponseLocked places a READ response. Responses carry their
// offset in their PSN, so one arriving early (reordered, or after a lost one)
// goes straight to memory and is remembered in readSeen; only the missing
// ones are asked for again.
func (qp *QP) handleReadResponseLocked(pkt wire.Packet) {
	psn := pkt.BTH().PSN()
	info := pkt.Info()
	w := qp.wqeForPSNLocked(psn)
	if w == nil || w.info.class != classRead || (w.state != wqeSent && w.state != wqeSending) {
		qp.dev.stats.RxDuplicate.Add(1)
		return
	}
	d := int(psn.Diff(w.firstPSN.Add(w.readPkts)))
	if d < 0 || d < 64 && w.readSeen&(1<<d) != 0 {
		qp.dev.stats.RxDuplicate.Add(1)
		if d > 0 {
			qp.readGapLocked(w, psn, info) // may end a retry's answer
		}
		return
	}
	// The responder has executed this READ, so every request before it
	// (IBTA 9.7.5.1.5: responses come in PSN order, a READ response
	// acknowledges the requests before it).
	qp.ackUpToLocked(w.firstPSN.Add(-1))
	if d >= 64 {
		qp.readGapLocked(w, psn, info)
		return
	}
	idx := w.readPkts + d
	off := idx * qp.mtu
	rem := w.length - off
	payload := pkt.Payload()
	// Only the message's last response must be LAST or ONLY: before it a
	// LAST may end a retry's partial request.
	if len(payload) != min(rem, qp.mtu) || rem <= qp.mtu && !info.Is(wire.FlagComplete) {
		if d > 0 {
			qp.dev.stats.RxDuplicate.Add(1) // judged when it is the one expected
			return
		}
		qp.failSendLocked(w, BadRespErr)
		return
	}
	if len(payload) > 0 {
		if err := qp.dev.mrs.Scatter(payload, qp.pd.id, w.sgl, off); err != nil {
			qp.failSendLocked(w, LocProtErr)
			return
		}
	}
	if idx == w.readEnd-1 && info.Is(wire.FlagComplete) {
		w.readEndSeen = true
	}
	if d > 0 {
		w.readSeen |= 1 << d
		qp.readGapLocked(w, psn, info)
		return
	}
	w.readPkts++
	w.readSeen >>= 1
	for w.readSeen&1 != 0 {
		w.readPkts++
		w.readSeen >>= 1
	}
	if w.reasked && w.readPkts > w.reaskAt {
		w.reasked = false
	}
	// Now missing while responses readReorder or more beyond it are in:
	// lost too (a retry's answer filled the gap before it), ask at once
	// rather than wait for more responses or the timer.
	gap := w.readSeen != 0 && 63-bits.LeadingZeros64(w.readSeen) >= readReorder
	qp.req.retryLeft = int(qp.attr.RetryCnt)
	// A response acknowledges its PSN (rxe moves comp.psn past it): a
	// rewind to the next response then finds the PSN window open instead
	// of waiting for the ACK timer with the whole READ counted in flight.
	qp.ackedTo(w.firstPSN.Add(w.readPkts))
	qp.refreshDeadlineLocked()
	switch {
	case w.readPkts == w.npkts:
		qp.completeSendLocked(w, Success)
		qp.ackedTo(w.lastPSN.Add(1))
		qp.afterRdAtomicLocked()
	case gap && w.state == wqeSent:
		qp.dev.stats.RxOutOfSeq.Add(1)
		w.reasked, w.reaskAt = true, w.readPkts
		qp.emitRequestLocked(w, w.firstPSN.Add(w.readPkts), 0, 0)
		qp.recoverLocked()
	case w.readPkts >= w.readEnd && w.readEndSeen && w.state == wqeSent:
		// The requests in flight are answered (the last answer has
		// ended: a longer, older one may still be coming, and asking
		// again while it does would only double it): ask for the next
		// part.
		qp.emitRequestLocked(w, w.firstPSN.Add(w.readPkts), 0, 0)
	}
}

// readGapLocked handles a READ response at psn that arrived while the one
// expected has not: the expected one is counted lost, and asked for again
// alone, once it is far enough behind (readReorder) or a stream of responses
// has ended (LAST or ONLY) without it. While such a request is out, only the
// end of its own answer without the missing response asks again; the
// retransmit timer covers a lost request.
func (qp *QP) readGapLocked(w *swqe, psn wire.PSN, info *wire.OpInfo) {
	if w.state != wqeSent {
		return // being sent again anyway
	}
	d := int(psn.Diff(w.firstPSN.Add(w.readPkts)))
	end := info.Is(wire.FlagComplete)
	if w.reasked && w.reaskAt == w.readPkts {
		if !end || psn != w.firstPSN.Add(w.reaskEnd-1) {
			return
		}
	} else if d < readReorder && !end {
		return
	}
	qp.dev.stats.RxOutOfSeq.Add(1)
	w.reasked, w.reaskAt = true, w.readPkts
	qp.emitRequestLocked(w, w.firstPSN.Add(w.readPkts), 0, 0)
	qp.recoverLocked()
}

// rewindLocked goes back to psn: the WQE holding it and every later started
// WQE will be sent again from there (go-back-N). PSNs of WQEs do not change.
func (qp *QP) rewindLocked(psn wire.PSN) {
	found := false
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted {
			break
		}
		if w.state == wqeDone {
			continue
		}
		if !found {
			if psn.After(w.lastPSN) {
				continue
			}
			found = true
			qp.sq.cur = i
			qp.req.psn = psn
			if psn.Before(w.firstPSN) {
				qp.req.psn = w.firstPSN
			}
			w.state = wqeSending
			if !w.info.rdAtomic() {
				w.sent = int(qp.req.psn.Diff(w.firstPSN)) * qp.mtu
			}
			w.readEnd, w.reasked = w.readPkts, false
			continue
		}
		// READ responses already in stay: their data is in place, and the
		// request sent again asks only for the rest.
		w.state = wqeSending
		w.sent = 0
		w.readEnd, w.reasked = w.readPkts, false
	}
	// The first packet sent again asks for an acknowledgement, so a
	// recovery learns quickly that it worked.
	qp.req.noAckPkts = ackEvery - 1
}

// recoveryDivisor sets the short deadline of a recovery: after a NAK or a
// lost READ or atomic response, a retransmission not acknowledged within
// 1/recoveryDivisor of the ACK timeout is sent again once. The responder NAKs
// a missing PSN once and then stays silent until it arrives (IBTA
// 9.7.5.1.2), so a retransmission lost again, or the acknowledgement of it,
// would otherwise stall the QP for a whole ACK timeout. Outside a recovery
// the deadline is the ACK timeout: a busy peer is not flooded with
// duplicates.
const recoveryDivisor = 8

// recoverLocked starts a recovery for the retransmission just sent: until
// ackedPSN reaches the PSN after the newest one sent, the deadline is the
// short one, restarted by each acknowledgement that moves ackedPSN.
func (qp *QP) recoverLocked() {
	qp.req.mode = recovering
	qp.req.recoverPSN = qp.sentPSNLocked()
	qp.armRetryLocked()
}

// armRetryLocked sets the retransmit deadline from now: the ACK timeout, or
// the short deadline in fast mode. The timer is re-armed lazily: one set to
// fire before the deadline re-arms itself when it fires.
func (qp *QP) armRetryLocked() {
	d := ACKTimeoutOf(qp.attr.Timeout)
	if d == 0 || qp.req.mode == rnrWait {
		return
	}
	if qp.req.mode == recovering || qp.req.mode == recoveringFired {
		d /= recoveryDivisor
	}
	now := qp.dev.clk.Now().UnixNano()
	qp.req.deadline = now + int64(d)
	if qp.retryT != nil {
		if qp.req.retryAt <= qp.req.deadline {
			return
		}
		qp.retryT.Stop()
	}
	qp.req.retryAt = qp.req.deadline
	qp.retryT = qp.dev.clk.AfterFunc(d, qp.onRetryTimer)
}

// refreshDeadlineLocked restarts the ACK timeout after progress.
func (qp *QP) refreshDeadlineLocked() {
	if qp.req.ackedPSN == qp.req.psn {
		qp.req.deadline = 0
		return
	}
	qp.armRetryLocked()
}

// ACKTimeoutOf returns the local ACK timeout for a QP's timeout attribute:
// 4.096 us x 2^t, 0 meaning none.
func ACKTimeoutOf(t uint8) time.Duration { return wire.ACKTimeout(t) }

func (qp *QP) onRetryTimer() {
	qp.mu.Lock()
	defer qp.unlockSend()
	qp.retryT = nil
	if qp.dead || (qp.state != StateRTS && qp.state != StateSQD) || qp.req.mode == rnrWait {
		return
	}
	if qp.req.deadline == 0 || qp.req.ackedPSN == qp.req.psn {
		return
	}
	now := qp.dev.clk.Now().UnixNano()
	if now < qp.req.deadline {
		qp.req.retryAt = qp.req.deadline
		qp.retryT = qp.dev.clk.AfterFunc(time.Duration(qp.req.deadline-now), qp.onRetryTimer)
		return
	}
	w := qp.wqeForPSNLocked(qp.req.ackedPSN)
	if w == nil {
		// The oldest unacknowledged PSN can lie before the oldest request
		// still outstanding (one completed by its response while the
		// requester was rewound behind it): that request is the one to
		// retry. Returning here would leave no timer armed.
		if w = qp.oldestOutstandingLocked(); w == nil {
			return
		}
	}
	switch qp.req.mode {
	case recovering:
		// The peer was answering, but not lately: a packet, or the NAK or
		// acknowledgement it caused, was lost. Send again from the oldest
		// unacknowledged PSN, once, without using a retry.
		qp.req.mode = recoveringFired
		qp.rewindLocked(qp.req.ackedPSN)
		qp.armRetryLocked()
		qp.progressLocked()
		return
	case recoveringFired:
		// Still nothing: from here on, ACK timeouts and the retry count.
		qp.req.mode = steady
	}
	if qp.req.retryLeft == 0 {
		qp.failSendLocked(w, RetryExcErr)
		return
	}
	qp.req.retryLeft--
	qp.dev.log.Debug("ACK timeout: retransmitting", "qpn", qp.qpn, "psn", qp.req.ackedPSN)
	qp.rewindLocked(qp.req.ackedPSN)
	qp.armRetryLocked()
	qp.progressLocked()
}

func (qp *QP) onRNRTimer() {
	qp.mu.Lock()
	defer qp.unlockSend()
	qp.rnrT = nil
	if qp.dead || qp.req.mode != rnrWait {
		return
	}
	qp.req.mode = steady
	if qp.state == StateRTS || qp.state == StateSQD {
		qp.progressLocked()
	}
}
