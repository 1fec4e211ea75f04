// The completer: ACKs, NAKs, READ responses and atomic acknowledgements
// retire work requests in order; PSN sequence NAKs and ACK timeouts rewind
// the requester for a go-back-N retransmission; RNR NAKs pause it for the
// RNR timer.

package requester

import (
	"math/bits"

	"github.com/softrdma/softrdma/wire"
)

// response is the part every response shares: it reports whether the
// response is for a request outstanding (anything else is a stale
// duplicate, counted and ignored).
func (c *Core) response(now int64, psn wire.PSN) bool {
	c.now = now
	if c.cfg.Transport != RC {
		return false
	}
	// Only PSNs of requests outstanding are meaningful; anything else is a
	// stale duplicate (IBTA 9.7.5.1.1: the requester ignores responses
	// outside its outstanding requests).
	if psn.Before(c.ackedPSN.Add(-1)) || !psn.Before(c.sentPSN()) {
		c.sink.Count(Duplicate)
		if psn.Before(c.ackedPSN.Add(-1)) && c.deadline != 0 {
			// A response to a request already complete (the rest of a
			// READ answered twice, an atomic's answer repeated) is still
			// the responder answering in PSN order: what this requester
			// waits for comes after it, so the silence the ACK timeout
			// measures has not begun (rxe re-arms its retransmit timer
			// for every packet its completer handles). Without this a
			// responder working through a long duplicate READ answer
			// ran out the timer of an atomic queued behind it seven
			// times (TestMatrix, MTU 256, under the race detector).
			// The responder's queue is bounded, so this waits, at most,
			// until it is drained.
			c.refreshDeadline()
		}
		return false
	}
	// Any response to an outstanding request restarts the ACK timer, even
	// one that is then ignored (rxe re-arms its retransmit timer whenever
	// the completer has drained its queue): while the responder is still
	// streaming the answer to an older READ request, a timeout would only
	// add another request behind it.
	c.refreshDeadline()
	return true
}

// Ack handles an ACK, NAK or RNR NAK (an Acknowledge packet with syndrome
// syn) for psn, then sends what it allows under g.
func (c *Core) Ack(now int64, g Gate, syn wire.Syndrome, psn wire.PSN) {
	if !c.response(now, psn) {
		return
	}
	c.ack(syn, psn)
	c.progress(g)
}

func (c *Core) ack(syn wire.Syndrome, psn wire.PSN) {
	switch {
	case syn.IsACK():
		c.ackUpTo(psn)
	case syn.IsRNR():
		if psn.Before(c.ackedPSN) {
			// Stale: overtaken by an acknowledgement of its PSN. Acting on
			// it would send acknowledged packets again and wait for
			// nothing.
			c.sink.Count(Duplicate)
			return
		}
		c.ackUpTo(psn.Add(-1))
		_, w := c.wqeForPSN(psn)
		if w == nil {
			return
		}
		if c.cfg.RNRRetry != 7 {
			if c.rnrLeft == 0 {
				c.fail(w, RNRRetryExceeded)
				return
			}
			c.rnrLeft--
		}
		c.rewind(psn)
		c.mode = RNRWait
		c.deadline = 0
		c.sink.WaitRNR(int64(syn.RNRTimer()))
	case syn.IsNAK():
		c.ackUpTo(psn.Add(-1))
		if syn.NAKCode() == wire.NAKPSNSequence {
			// Ignored: a NAK for a PSN already acknowledged, which is
			// stale (overtaken by an ACK; rxe drops responses behind
			// comp.psn too); one for a PSN not sent yet; and a second NAK
			// for the PSN the last one rewound to. The responder NAKs an
			// expected PSN once and expects it again only after receiving
			// it, so that is a copy made on the way, and acting on it
			// would send the same packets a third time.
			if psn.Before(c.ackedPSN) || !psn.Before(c.psn) || c.nakPSN == (optPSN{psn, true}) {
				c.sink.Count(Duplicate)
				return
			}
			c.nakPSN = optPSN{psn, true}
			if c.mode == Steady {
				c.congested(false) // once per recovery
			}
			c.rewind(psn)
			c.recover()
			return
		}
		_, w := c.wqeForPSN(psn)
		if w == nil {
			return
		}
		st := RemoteOperation
		switch syn.NAKCode() {
		case wire.NAKInvalidReq:
			st = RemoteInvalid
		case wire.NAKRemoteAccess:
			st = RemoteAccess
		}
		c.fail(w, st)
	}
}

// sentPSN returns the PSN after the newest one sent: psn, unless a rewind
// has moved that back, and the responder may then answer (acknowledge, or
// respond to a READ) PSNs up to the newest.
func (c *Core) sentPSN() wire.PSN { return c.sentTo }

// oldestOutstanding returns the oldest started work request not yet
// completed.
func (c *Core) oldestOutstanding() *wqe {
	for i := c.head; i != c.tail; i++ {
		w := c.at(i)
		if w.state == stPosted {
			return nil
		}
		if w.state != stDone {
			return w
		}
	}
	return nil
}

// wqeForPSN returns the outstanding work request whose PSN range holds psn.
func (c *Core) wqeForPSN(psn wire.PSN) (uint64, *wqe) {
	for i := c.head; i != c.tail; i++ {
		w := c.at(i)
		if w.state == stPosted {
			return 0, nil
		}
		if w.state == stDone {
			continue
		}
		if !psn.Before(w.firstPSN) && !psn.After(w.lastPSN) {
			return i, w
		}
	}
	return 0, nil
}

// ackUpTo applies an acknowledgement of every PSN up to psn. SEND and
// WRITE requests it covers complete. A READ or atomic before psn still
// without its response lost it (IBTA 9.7.5.1.5: the responder answers in
// PSN order): it is asked for again, alone, and the acknowledgement is kept
// in peerAcked for the requests behind it, which need not be sent again.
func (c *Core) ackUpTo(psn wire.PSN) {
	if psn.Before(c.ackedPSN) {
		return // nothing new
	}
	if !c.peerAcked.set || psn.After(c.peerAcked.psn) {
		c.peerAcked = optPSN{psn, true}
	}
	acked := c.ackedPSN
	progress := false
	for i := c.head; i != c.tail; i++ {
		w := c.at(i)
		if w.state == stPosted {
			break
		}
		if w.state == stDone || w.state == stIdle {
			// Done, or retired meanwhile: completing a request retires
			// the done ones behind it, before the loop reaches them.
			continue
		}
		if psn.Before(w.firstPSN) {
			break
		}
		if w.class.rdAtomic() {
			if psn.After(w.lastPSN) || (w.class == Atomic && !psn.Before(w.firstPSN)) {
				c.responseLost(i, w)
			}
			break
		}
		if psn.Before(w.lastPSN) {
			break // partly acknowledged
		}
		c.complete(w, Success)
		progress = true
	}
	c.ackedTo(psn.Add(1))
	// The retry counters restart on every acknowledgement that moves
	// forward, not only when a message completes (rxe's
	// reset_retry_counters): a long message on a lossy path would
	// otherwise run out of retries while making progress.
	if progress || c.ackedPSN != acked {
		c.retryLeft = c.cfg.RetryCnt
		c.rnrLeft = c.cfg.RNRRetry
	}
}

// responseLost handles an acknowledgement of a PSN after the READ or atomic
// w while w has no response: the request or its response was lost. The
// request is sent again alone, once until the next timeout; a READ whose
// responses have begun to arrive finds its own gaps (ReadResponse).
func (c *Core) responseLost(seq uint64, w *wqe) {
	if w.state != stSent || w.reasked || (w.class == Read && (w.readPkts > 0 || w.readSeen != 0)) {
		return
	}
	c.sink.Count(OutOfOrder)
	if c.mode == Steady {
		c.congested(false)
	}
	w.reasked, w.reaskAt = true, w.readPkts
	c.emit(seq, w, w.firstPSN.Add(w.readPkts), 0, 0)
	c.recover()
}

// afterRdAtomic runs when a READ or atomic completes: requests behind it
// that the responder acknowledged meanwhile complete too.
func (c *Core) afterRdAtomic() {
	if pa := c.peerAcked; pa.set && !pa.psn.Before(c.ackedPSN) {
		c.ackUpTo(pa.psn)
	}
}

// ackedTo moves the oldest unacknowledged PSN forward to p, but not past
// the first response a READ or atomic still waits for: an acknowledgement
// of the PSNs of later requests (or of a READ's last PSN) does not deliver
// it, and a retry starts from the oldest unacknowledged PSN.
func (c *Core) ackedTo(p wire.PSN) {
	for i := c.head; i != c.tail; i++ {
		w := c.at(i)
		if w.state == stPosted || !p.After(w.firstPSN) {
			break
		}
		if w.state != stDone && w.class.rdAtomic() {
			if lim := w.firstPSN.Add(w.readPkts); p.After(lim) {
				p = lim
			}
			break
		}
	}
	if p.After(c.psn) {
		// Acknowledged beyond what a rewind has sent again: the packets
		// up to psn are. (The ones after it go again; the responder
		// answers them as duplicates. Refusing the acknowledgement would
		// stall a requester whose congestion window allows fewer
		// packets than lie between psn and the responder's newest PSN.)
		p = c.psn
	}
	if p.After(c.ackedPSN) {
		c.opened(int(p.Diff(c.ackedPSN)))
		c.give(int(p.Diff(c.ackedPSN)))
		// The room first, then the expectation: requesters waiting on
		// this acknowledgement are woken by the room, or, if it was the
		// last one coming, by the count's reaching zero (Budget.Expect).
		if c.ackReq.set && c.ackReq.psn.Before(p) {
			c.setAckReq(optPSN{})
		}
		c.ackedPSN = p
		if m := c.mode; m == Recovering || m == RecoveringFired {
			// Progress: a recovery goes on until recoverPSN is reached.
			c.mode = Steady
			if p.Before(c.recoverPSN) {
				c.mode = Recovering
			}
		}
		c.refreshDeadline()
	}
}

// AtomicAck handles the first part of an atomic acknowledgement for psn:
// it reports whether the response is accepted, in which case the Sink has
// been asked to Deliver orig and, if that succeeded, the atomic has
// completed. Then it sends what it allows under g.
func (c *Core) AtomicAck(now int64, g Gate, psn wire.PSN, orig uint64) {
	if !c.response(now, psn) {
		return
	}
	c.atomicAck(psn, orig)
	c.progress(g)
}

func (c *Core) atomicAck(psn wire.PSN, orig uint64) {
	seq, w := c.wqeForPSN(psn)
	if w == nil || w.class != Atomic || w.state != stSent {
		c.sink.Count(Duplicate)
		return
	}
	// The response acknowledges every request before it (an earlier READ
	// or atomic without its response is asked for again); this one's
	// result is final whatever happens to them.
	c.ackUpTo(psn.Add(-1))
	if st := c.sink.Deliver(seq, orig); st != Success {
		c.fail(w, st)
		return
	}
	c.complete(w, Success)
	c.ackedTo(psn.Add(1))
	c.retryLeft = c.cfg.RetryCnt
	c.rnrLeft = c.cfg.RNRRetry
	c.afterRdAtomic()
}

// ReadResponse handles a READ response packet for psn carrying payload;
// last says it is a READ response LAST or ONLY. Responses carry their
// offset in their PSN, so one arriving early (reordered, or after a lost
// one) goes straight to memory (Sink.Place) and is remembered; only the
// missing ones are asked for again. Then it sends what it allows under g.
func (c *Core) ReadResponse(now int64, g Gate, psn wire.PSN, payload []byte, last bool) {
	if !c.response(now, psn) {
		return
	}
	c.readResponse(psn, payload, last)
	c.progress(g)
}

func (c *Core) readResponse(psn wire.PSN, payload []byte, last bool) {
	seq, w := c.wqeForPSN(psn)
	if w == nil || w.class != Read || (w.state != stSent && w.state != stSending) {
		c.sink.Count(Duplicate)
		return
	}
	d := int(psn.Diff(w.firstPSN.Add(w.readPkts)))
	if d < 0 || d < 64 && w.readSeen&(1<<d) != 0 {
		c.sink.Count(Duplicate)
		if d > 0 {
			c.readGap(seq, w, psn, last) // may end a retry's answer
		}
		return
	}
	// The responder has executed this READ, so every request before it
	// (IBTA 9.7.5.1.5: responses come in PSN order, a READ response
	// acknowledges the requests before it).
	c.ackUpTo(w.firstPSN.Add(-1))
	if d >= 64 {
		c.readGap(seq, w, psn, last)
		return
	}
	mtu := c.cfg.MTU
	idx := w.readPkts + d
	off := idx * mtu
	rem := w.length - off
	// Only the message's last response must be LAST or ONLY: before it a
	// LAST may end a retry's partial request.
	if len(payload) != min(rem, mtu) || rem <= mtu && !last {
		if d > 0 {
			c.sink.Count(Duplicate) // judged when it is the one expected
			return
		}
		c.fail(w, BadResponse)
		return
	}
	if len(payload) > 0 {
		if st := c.sink.Place(seq, off, payload); st != Success {
			c.fail(w, st)
			return
		}
	}
	if idx == w.readEnd-1 && last {
		w.readEndSeen = true
	}
	if d > 0 {
		w.readSeen |= 1 << d
		c.readGap(seq, w, psn, last)
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
	// Now missing while responses ReadReorder or more beyond it are in:
	// lost too (a retry's answer filled the gap before it), ask at once
	// rather than wait for more responses or the timer.
	gap := w.readSeen != 0 && 63-bits.LeadingZeros64(w.readSeen) >= ReadReorder
	c.retryLeft = c.cfg.RetryCnt
	// A response acknowledges its PSN (rxe moves comp.psn past it): a
	// rewind to the next response then finds the PSN window open instead
	// of waiting for the ACK timer with the whole READ counted in flight.
	c.ackedTo(w.firstPSN.Add(w.readPkts))
	c.refreshDeadline()
	switch {
	case w.readPkts == w.npkts:
		c.complete(w, Success)
		c.ackedTo(w.lastPSN.Add(1))
		c.afterRdAtomic()
	case gap && w.state == stSent:
		c.sink.Count(OutOfOrder)
		w.reasked, w.reaskAt = true, w.readPkts
		c.emit(seq, w, w.firstPSN.Add(w.readPkts), 0, 0)
		c.recover()
	case w.readPkts >= w.readEnd && w.readEndSeen && w.state == stSent:
		// The requests in flight are answered (the last answer has
		// ended: a longer, older one may still be coming, and asking
		// again while it does would only double it): ask for the next
		// part.
		c.emit(seq, w, w.firstPSN.Add(w.readPkts), 0, 0)
	}
}

// readGap handles a READ response at psn that arrived while the one
// expected has not: the expected one is counted lost, and asked for again
// alone, once it is far enough behind (ReadReorder) or a stream of
// responses has ended (LAST or ONLY) without it. While such a request is
// out, only the end of its own answer without the missing response asks
// again; the retransmit timer covers a lost request.
func (c *Core) readGap(seq uint64, w *wqe, psn wire.PSN, last bool) {
	if w.state != stSent {
		return // being sent again anyway
	}
	d := int(psn.Diff(w.firstPSN.Add(w.readPkts)))
	if w.reasked && w.reaskAt == w.readPkts {
		if !last || psn != w.firstPSN.Add(w.reaskEnd-1) {
			return
		}
	} else if d < ReadReorder && !last {
		return
	}
	c.sink.Count(OutOfOrder)
	if c.mode == Steady {
		c.congested(false)
	}
	w.reasked, w.reaskAt = true, w.readPkts
	c.emit(seq, w, w.firstPSN.Add(w.readPkts), 0, 0)
	c.recover()
}

// rewind goes back to psn: the work request holding it and every later
// started one will be sent again from there (go-back-N). PSNs of work
// requests do not change.
func (c *Core) rewind(psn wire.PSN) {
	found := false
	for i := c.head; i != c.tail; i++ {
		w := c.at(i)
		if w.state == stPosted {
			break
		}
		if w.state == stDone {
			continue
		}
		if !found {
			if psn.After(w.lastPSN) {
				continue
			}
			found = true
			c.cur = i
			c.psn = psn
			if psn.Before(w.firstPSN) {
				c.psn = w.firstPSN
				// Every request before w is complete, so every PSN before
				// its first is acknowledged: a READ or atomic completed
				// by its response can leave ackedPSN behind, and the
				// window would count those PSNs in flight for good and
				// keep w from going again (retire catches up only when
				// c.psn allows it; a rewind had moved c.psn back).
				c.ackedTo(w.firstPSN)
			}
			w.state = stSending
			if !w.class.rdAtomic() {
				w.sent = int(c.psn.Diff(w.firstPSN)) * c.cfg.MTU
			}
			w.readEnd, w.reasked = w.readPkts, false
			continue
		}
		// READ responses already in stay: their data is in place, and the
		// request sent again asks only for the rest.
		w.state = stSending
		w.sent = 0
		w.readEnd, w.reasked = w.readPkts, false
	}
	// The first packet sent again asks for an acknowledgement, so a
	// recovery learns quickly that it worked. Until then none is coming:
	// the responder dropped what followed the lost packet, AckReq or not.
	c.noAckPkts = AckEvery - 1
	c.setAckReq(optPSN{})
}

// recover starts a recovery for the retransmission just sent: until
// ackedPSN reaches the PSN after the newest one sent, the deadline is the
// short one, restarted by each acknowledgement that moves ackedPSN.
func (c *Core) recover() {
	c.mode = Recovering
	c.recoverPSN = c.sentPSN()
	c.armRetry()
}

// armRetry sets the retransmit deadline from now: the ACK timeout, or the
// short deadline in a recovery.
func (c *Core) armRetry() {
	d := c.cfg.ACKTimeout
	if d == 0 || c.mode == RNRWait {
		return
	}
	if c.mode == Recovering || c.mode == RecoveringFired {
		d /= RecoveryDivisor
	}
	c.deadline = c.now + d
	c.sink.ArmRetry(c.deadline, d)
}

// refreshDeadline restarts the ACK timeout after progress.
func (c *Core) refreshDeadline() {
	if c.ackedPSN == c.psn {
		c.deadline = 0
		return
	}
	c.armRetry()
}

// Timer handles the retransmit timer firing at now, then sends what it
// allows under g. Before the deadline it only asks for the timer again.
func (c *Core) Timer(now int64, g Gate) {
	c.now = now
	if g == Hold || c.mode == RNRWait {
		return
	}
	if c.deadline == 0 || c.ackedPSN == c.psn {
		return
	}
	if now < c.deadline {
		c.sink.ArmRetry(c.deadline, c.deadline-now)
		return
	}
	_, w := c.wqeForPSN(c.ackedPSN)
	if w == nil {
		// The oldest unacknowledged PSN can lie before the oldest request
		// still outstanding (one completed by its response while the
		// requester was rewound behind it): that request is the one to
		// retry. Returning here would leave no timer armed.
		if w = c.oldestOutstanding(); w == nil {
			return
		}
	}
	switch c.mode {
	case Recovering:
		// The peer was answering, but not lately: a packet, or the NAK or
		// acknowledgement it caused, was lost. Send again from the oldest
		// unacknowledged PSN, once, without using a retry.
		c.mode = RecoveringFired
		c.congested(false)
		c.rewind(c.ackedPSN)
		c.armRetry()
		c.progress(g)
		return
	case RecoveringFired:
		// Still nothing: from here on, ACK timeouts and the retry count.
		c.mode = Steady
	}
	if c.retryLeft == 0 {
		if !c.sink.Migrate() {
			c.fail(w, RetryExceeded)
			return
		}
		// The path failed and the caller moved to its alternate path:
		// everything unacknowledged goes again on the new path, with a
		// fresh retry count and window.
		c.retryLeft = c.cfg.RetryCnt
		c.cwnd, c.ssthresh, c.acc = MaxUnacked, MaxUnacked, 0
		c.rewind(c.ackedPSN)
		c.armRetry()
		c.progress(g)
		return
	}
	c.retryLeft--
	c.sink.Count(RetryTimeout)
	c.congested(true)
	c.rewind(c.ackedPSN)
	c.armRetry()
	c.progress(g)
}

// RNRTimer handles the RNR timer firing at now: the requester resumes and
// sends what it allows under g.
func (c *Core) RNRTimer(now int64, g Gate) {
	c.now = now
	if c.mode != RNRWait {
		return
	}
	c.mode = Steady
	c.progress(g)
}
