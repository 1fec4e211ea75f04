// The completer: ACKs, NAKs, read responses and atomic ACKs retire send WQEs
// in order; PSN sequence NAKs and ACK timeouts rewind the requester for a
// go-back-N retransmission; RNR NAKs pause it for the RNR timer.

package verbs

import (
	"encoding/binary"
	"time"

	"github.com/softrdma/softrdma/wire"
)

func isRdAtomic(op WROpcode) bool {
	return op == WRRDMARead || op == WRAtomicCmpAndSwp || op == WRAtomicFetchAndAdd
}

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
		qp.req.rnrWait = true
		qp.req.deadline = 0
		if qp.rnrT != nil {
			qp.rnrT.Stop()
		}
		qp.rnrT = qp.dev.clk.AfterFunc(syn.RNRTimer(), qp.onRNRTimer)
	case syn.IsNAK():
		qp.ackUpToLocked(psn.Add(-1))
		if syn.NAKCode() == wire.NAKPSNSequence {
			if !psn.Before(qp.req.psn) {
				return
			}
			qp.rewindLocked(psn)
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

// ackUpToLocked applies an acknowledgement of every PSN up to psn. It
// reports whether a read or atomic before psn turned out to lack its
// response, so that the requester was rewound to ask for it again: a
// response to a later request must then be dropped, as it will come again
// (rxe's COMPST_ERROR_RETRY).
func (qp *QP) ackUpToLocked(psn wire.PSN) (rewound bool) {
	if psn.Before(qp.req.ackedPSN) {
		return false // nothing new
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
		if isRdAtomic(w.op) {
			// A later PSN is acknowledged but this read or atomic has no
			// response yet: the response was lost. Ask again.
			if psn.After(w.lastPSN) || (w.op != WRRDMARead && !psn.Before(w.firstPSN)) {
				qp.ackedTo(w.firstPSN.Add(w.readPkts))
				qp.rewindLocked(w.firstPSN.Add(w.readPkts))
				return true
			}
			break
		}
		if psn.Before(w.lastPSN) || w.state != wqeSent {
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
	return false
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
		if w.state != wqeDone && isRdAtomic(w.op) {
			if lim := w.firstPSN.Add(w.readPkts); p.After(lim) {
				p = lim
			}
			break
		}
	}
	if p.After(qp.req.ackedPSN) && !p.After(qp.req.psn) {
		qp.req.ackedPSN = p
		qp.refreshDeadlineLocked()
	}
}

func (qp *QP) handleAtomicAckLocked(psn wire.PSN, orig uint64) {
	w := qp.wqeForPSNLocked(psn)
	if w == nil || (w.op != WRAtomicCmpAndSwp && w.op != WRAtomicFetchAndAdd) || w.state != wqeSent {
		qp.dev.stats.RxDuplicate.Add(1)
		return
	}
	if qp.ackUpToLocked(psn.Add(-1)) {
		return // an earlier read or atomic is asked again, and this one with it
	}
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
}

func (qp *QP) handleReadResponseLocked(pkt wire.Packet) {
	psn := pkt.BTH().PSN()
	info := pkt.Info()
	w := qp.wqeForPSNLocked(psn)
	if w == nil || w.op != WRRDMARead || (w.state != wqeSent && w.state != wqeSending) {
		qp.dev.stats.RxDuplicate.Add(1)
		return
	}
	want := w.firstPSN.Add(w.readPkts)
	if psn != want {
		if psn.After(want) && !qp.req.readRetry {
			// Responses were lost: ask for the rest again, once.
			qp.dev.stats.RxOutOfSeq.Add(1)
			qp.req.readRetry = true
			qp.rewindLocked(want)
		}
		return
	}
	qp.req.readRetry = false
	if qp.ackUpToLocked(w.firstPSN.Add(-1)) {
		return // an earlier read or atomic is asked again, and this one with it
	}
	payload := pkt.Payload()
	off := w.readPkts * qp.mtu
	rem := w.length - off
	last := rem <= qp.mtu
	// Only the message's last response must be LAST or ONLY: before it a
	// LAST may end a retry's partial request, and the responses to an
	// older request, with the same data, may still be coming in.
	if len(payload) != min(rem, qp.mtu) || last && !info.Is(wire.FlagComplete) {
		qp.failSendLocked(w, BadRespErr)
		return
	}
	if len(payload) > 0 {
		if err := qp.dev.mrs.Scatter(payload, qp.pd.id, w.sgl, off); err != nil {
			qp.failSendLocked(w, LocProtErr)
			return
		}
	}
	w.readPkts++
	qp.req.retryLeft = int(qp.attr.RetryCnt)
	// A response acknowledges its PSN (rxe moves comp.psn past it): a
	// rewind to the next response then finds the PSN window open instead
	// of waiting for the ACK timer with the whole READ counted in flight.
	qp.ackedTo(psn.Add(1))
	qp.refreshDeadlineLocked()
	switch {
	case last:
		qp.completeSendLocked(w, Success)
		qp.ackedTo(w.lastPSN.Add(1))
	case w.readPkts == w.readEnd:
		// A retry's partial request is answered: ask for the next part.
		qp.emitRequestLocked(w, w.firstPSN.Add(w.readPkts), 0, 0)
	}
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
			if !isRdAtomic(w.op) {
				w.sent = int(qp.req.psn.Diff(w.firstPSN)) * qp.mtu
			}
			continue
		}
		w.state = wqeSending
		w.sent = 0
		if w.op == WRRDMARead {
			w.readPkts = 0
		}
	}
	qp.req.noAckPkts = 0
}

// armRetryLocked starts the local ACK timer if it is not running.
func (qp *QP) armRetryLocked() {
	d := ACKTimeoutOf(qp.attr.Timeout)
	if d == 0 || qp.req.rnrWait {
		return
	}
	qp.req.deadline = qp.dev.clk.Now().Add(d).UnixNano()
	if qp.retryT == nil {
		qp.retryT = qp.dev.clk.AfterFunc(d, qp.onRetryTimer)
	}
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
	defer qp.mu.Unlock()
	defer qp.flushLocked()
	qp.retryT = nil
	if qp.dead || (qp.state != StateRTS && qp.state != StateSQD) || qp.req.rnrWait {
		return
	}
	if qp.req.deadline == 0 || qp.req.ackedPSN == qp.req.psn {
		return
	}
	now := qp.dev.clk.Now().UnixNano()
	if now < qp.req.deadline {
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
	defer qp.mu.Unlock()
	defer qp.flushLocked()
	qp.rnrT = nil
	if qp.dead || !qp.req.rnrWait {
		return
	}
	qp.req.rnrWait = false
	if qp.state == StateRTS || qp.state == StateSQD {
		qp.progressLocked()
	}
}
