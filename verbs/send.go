// The requester: PostSend validates work requests into send queue slots, and
// progressLocked turns them into packets (FIRST/MIDDLE/LAST/ONLY by path MTU)
// within the PSN window and the read/atomic credits, gathering payload from
// registered memory straight into pooled packet buffers.

package verbs

import (
	"math/bits"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

const (
	// maxUnacked is the PSN window: packets sent and not yet acknowledged
	// (Linux rxe allows 128).
	maxUnacked = 128
	// ackEvery asks for an ACK at least every this many packets of a message.
	ackEvery = 64
)

type requester struct {
	psn wire.PSN // next PSN to send
	// next is the PSN the next new request starts at: the one after the
	// newest PSN given out. psn is behind it while a rewind sends requests
	// again, and stays there if the requests after the last one sent again
	// complete without being sent again.
	next      wire.PSN
	ackedPSN  wire.PSN // oldest PSN not yet acknowledged
	rdAtomic  int      // READ/atomic requests outstanding
	retryLeft int
	rnrLeft   int
	deadline  int64    // retransmit deadline, clock nanoseconds; 0 = none
	mode      recovery // what the deadline is and what its expiry does
	// recoverPSN ends a recovery: the PSN after the newest one sent when
	// it started.
	recoverPSN wire.PSN
	noAckPkts  int // packets since the last AckReq
	// peerAcked is the newest PSN the responder has acknowledged. An
	// acknowledgement cannot complete requests behind a READ or atomic
	// still waiting for its response; they complete from it once that
	// response is in, without being sent again.
	peerAcked optPSN
	// nakPSN is the PSN the last PSN sequence NAK rewound to.
	nakPSN  optPSN
	retryAt int64 // when the armed retry timer fires, clock nanoseconds
}

// recovery is the requester's mode: what its retransmit deadline is and
// what the deadline's expiry does (complete.go).
type recovery uint8

const (
	// steady: the deadline is the ACK timeout; its expiry rewinds to the
	// oldest unacknowledged PSN and uses one of retry_cnt.
	steady recovery = iota
	// recovering: a retransmission is out after a NAK or a lost response
	// (recoverLocked). Until ackedPSN reaches recoverPSN the deadline is
	// 1/recoveryDivisor of the ACK timeout, and its expiry resends without
	// using a retry, then moves to recoveringFired.
	recovering
	// recoveringFired: the short deadline expired once without progress;
	// the next expiry falls back to steady (and uses a retry).
	recoveringFired
	// rnrWait: an RNR NAK paused the requester until its RNR timer fires;
	// nothing is sent and no retransmit deadline runs.
	rnrWait
)

// optPSN is a PSN that may be unset.
type optPSN struct {
	psn wire.PSN
	set bool
}

// PostSend posts send work requests. On error the returned *WRError says
// which request failed; the ones before it were posted.
func (qp *QP) PostSend(wrs []SendWR) error {
	qp.mu.Lock()
	defer qp.unlockSend()
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.checkSendLocked(wr); err != nil {
			return &WRError{Index: i, WRID: wr.ID, Err: err}
		}
		if err := qp.enqueueLocked(wr); err != nil {
			return &WRError{Index: i, WRID: wr.ID, Err: err}
		}
	}
	switch qp.state {
	case StateRTS:
		qp.progressLocked()
	case StateErr:
		qp.flushSendLocked()
	}
	return nil
}

func (qp *QP) checkSendLocked(wr *SendWR) error {
	if qp.dead {
		return errf(ErrClosed, "QP destroyed")
	}
	switch qp.state {
	case StateRTS, StateSQD, StateErr:
	default:
		return errf(ErrState, "post send in state %v", qp.state)
	}
	if qp.sq.outstanding() == len(qp.sq.slots) {
		return errf(ErrQueueFull, "send queue holds %d", len(qp.sq.slots))
	}
	if len(wr.SGL) > qp.attr.Cap.MaxSendSGE && wr.Flags&SendInline == 0 {
		return errf(ErrInvalid, "%d SGEs, QP allows %d", len(wr.SGL), qp.attr.Cap.MaxSendSGE)
	}
	n := sglLen(wr.SGL)
	info := wrInfoOf(wr.Opcode)
	if info == nil {
		return errf(ErrInvalid, "opcode %v", wr.Opcode)
	}
	if !info.types.has(qp.typ) {
		return errf(ErrInvalid, "opcode %v on a %v QP", wr.Opcode, qp.typ)
	}
	if qp.typ == UD {
		if wr.AH == nil || wr.AH.dead.Load() {
			return errf(ErrInvalid, "UD send without a valid address handle")
		}
		if wr.AH.pd != qp.pd {
			return errf(ErrInvalid, "address handle of another PD")
		}
		if wr.RemoteQPN > wire.Mask24 {
			return errf(ErrInvalid, "remote QPN %#x", wr.RemoteQPN)
		}
	}
	if wr.Flags&SendInline != 0 {
		if int(n) > qp.attr.Cap.MaxInlineData {
			return errf(ErrInvalid, "%d inline bytes, QP allows %d", n, qp.attr.Cap.MaxInlineData)
		}
		if info.rdAtomic() {
			return errf(ErrInvalid, "inline %v", wr.Opcode)
		}
	}
	if n > MaxMsgSize {
		return errf(ErrInvalid, "message of %d bytes", n)
	}
	if info.class == classAtomic {
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return errf(ErrInvalid, "atomic needs one 8-byte SGE")
		}
	}
	return nil
}

func (qp *QP) enqueueLocked(wr *SendWR) error {
	w := qp.sq.at(qp.sq.tail)
	*w = swqe{sgl: w.sgl[:0], inline: w.inline[:0]}
	w.id, w.op, w.info, w.flags, w.imm = wr.ID, wr.Opcode, wrInfoOf(wr.Opcode), wr.Flags, wr.Imm
	w.raddr, w.rkey, w.cmpAdd, w.swap = wr.RemoteAddr, wire.RKey(wr.RKey), wr.CompareAdd, wr.Swap
	w.signaled = qp.sqSigAll || wr.Flags&SendSignaled != 0
	w.length = int(sglLen(wr.SGL))
	if wr.Flags&SendInline != 0 {
		w.isInline = true
		w.inline = w.inline[:w.length]
		w.sgl = appendSGL(w.sgl[:0], wr.SGL)
		err := qp.dev.mrs.Gather(w.inline, qp.pd.id, w.sgl, 0)
		w.sgl = w.sgl[:0]
		if err != nil {
			// libibverbs copies inline data from plain pointers; with keys,
			// a bad SGE is a local protection error at post time.
			return errf(ErrInvalid, "inline data: %v", err)
		}
	} else {
		w.sgl = appendSGL(w.sgl, wr.SGL)
	}
	if qp.typ == UD {
		w.src, w.dst = wr.AH.src, wr.AH.dst
		w.rqpn = wire.QPN(wr.RemoteQPN)
		w.qkey = wire.QKey(wr.RemoteQKey)
		if w.qkey.Controlled() {
			w.qkey = wire.QKey(qp.attr.QKey)
		}
	}
	w.state = wqePosted
	qp.sq.tail++
	return nil
}

// packetsFor returns how many PSNs a message of n bytes uses.
func packetsFor(n, mtu int) int {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// progressLocked sends what the window and credits allow.
func (qp *QP) progressLocked() {
	if qp.req.mode == rnrWait {
		return // an RNR NAK pauses the requester until its timer fires
	}
	for (qp.state == StateRTS || qp.state == StateSQD) && qp.sq.cur != qp.sq.tail {
		idx := qp.sq.cur
		w := qp.sq.at(idx)
		if w.state == wqePosted {
			if qp.state == StateSQD {
				return // draining starts nothing new
			}
			if !qp.startLocked(w) {
				return
			}
		}
		if !qp.sendPacketsLocked(w) {
			return
		}
		if qp.sq.cur == idx {
			qp.sq.cur++
		}
	}
}

// startLocked decides whether w may start now and assigns its PSNs.
func (qp *QP) startLocked(w *swqe) bool {
	if qp.typ == RC {
		if w.flags&SendFence != 0 && qp.req.rdAtomic > 0 {
			return false
		}
		if w.info.rdAtomic() {
			if qp.req.rdAtomic >= max(qp.attr.MaxRdAtomic, 1) {
				return false
			}
			qp.req.rdAtomic++
		}
	}
	if qp.typ == UD && w.length > qp.mtu {
		// IBTA C10-93.1.1: a UD message longer than the port MTU emits no
		// packet and is not an error; Linux rxe completes it successfully.
		qp.completeSendLocked(w, Success)
		return true // nothing left to send: sendPacketsLocked passes over it
	}
	w.npkts = 1
	if w.info.class == classRead || w.info.multiPacket() && qp.typ != UD {
		w.npkts = packetsFor(w.length, qp.mtu)
	}
	// Every request before w has been sent or has completed
	// (progressLocked reached w), but a rewind leaves psn after the last
	// one it sent again: requests behind that one that completed meanwhile
	// are passed over without moving psn. w starts after the newest PSN
	// given out; starting at psn would reuse a PSN the responder has seen,
	// and it would take w for a duplicate (an atomic would get another
	// one's saved result, without being executed).
	qp.req.psn = qp.req.next
	if qp.typ == RC && qp.oldestOutstandingLocked() == nil {
		// Nothing before w is outstanding: every PSN before it is
		// acknowledged, even if the acknowledgements that said so could
		// not move ackedPSN (a READ or atomic response completing a
		// request behind one still missing its response).
		qp.ackedTo(qp.req.psn)
	}
	w.firstPSN = qp.req.psn
	w.lastPSN = qp.req.psn.Add(w.npkts - 1)
	qp.req.next = w.lastPSN.Add(1)
	w.sent = 0
	w.readPkts, w.readSeen, w.readEnd, w.reasked = 0, 0, 0, false
	w.state = wqeSending
	return true
}

// sendPacketsLocked emits w's remaining packets within the window. It
// reports true when every packet of w has been sent.
func (qp *QP) sendPacketsLocked(w *swqe) bool {
	if w.info.rdAtomic() {
		if w.state != wqeSending {
			return true
		}
		if !qp.windowOpenLocked(w.npkts) {
			return false
		}
		qp.emitRequestLocked(w, w.firstPSN.Add(w.readPkts), 0, 0)
		w.state = wqeSent
		qp.req.psn = w.lastPSN.Add(1)
		return true
	}
	for w.state == wqeSending {
		if qp.typ == RC && !qp.windowOpenLocked(1) {
			return false
		}
		off := w.sent
		n := min(w.length-off, qp.mtu)
		psn := w.firstPSN.Add(off / qp.mtu)
		if !qp.emitRequestLocked(w, psn, off, n) {
			return true // failed and completed with an error
		}
		w.sent += n
		qp.req.psn = psn.Add(1)
		if w.sent >= w.length {
			w.state = wqeSent
			if qp.typ != RC {
				qp.completeSendLocked(w, Success)
			}
		}
	}
	return true
}

func (qp *QP) windowOpenLocked(n int) bool {
	if qp.typ != RC {
		return true
	}
	inFlight := int(qp.req.psn.Diff(qp.req.ackedPSN))
	return inFlight == 0 || inFlight+n <= maxUnacked
}

// emitRequestLocked builds one request packet of w at psn carrying bytes
// [off, off+n) of the message. It reports false if the WQE failed.
func (qp *QP) emitRequestLocked(w *swqe, psn wire.PSN, off, n int) bool {
	var h wire.Headers
	first := off == 0
	last := off+n >= w.length
	op := w.info.requestOpcode(qp.typ, first, last)
	h.BTH = wire.BTHFields{Opcode: op, PKey: qp.pkey, DestQP: wire.QPN(qp.attr.DestQPN), PSN: psn}
	dst, src := qp.dst, qp.src
	switch w.info.class {
	case classWrite:
		h.RETH = wire.RETHFields{VA: w.raddr, RKey: w.rkey, DMALen: uint32(w.length)}
	case classRead:
		done := w.readPkts * qp.mtu
		n := w.length - done
		if w.readPkts > 0 || w.readSeen != 0 {
			// The responder has executed the request (a response came), so
			// this one is a duplicate to it, answered from memory. Ask for
			// at most a window of responses (asking for the whole rest
			// after each lost response would cost traffic quadratic in the
			// message length), and only up to the first one already in,
			// included: its second copy ends the answer, so its arrival
			// without the ones before it says they were lost again.
			// Never before a response has come: a part sent first would be
			// executed as a shorter READ, leaving the responder's expected
			// PSN inside this one's range.
			k := min(packetsFor(n, qp.mtu), maxUnacked)
			if w.readSeen != 0 {
				k = min(k, bits.TrailingZeros64(w.readSeen)+1)
			}
			n = min(n, k*qp.mtu)
		}
		w.reaskEnd = w.readPkts + packetsFor(n, qp.mtu)
		if w.reaskEnd > w.readEnd {
			w.readEnd, w.readEndSeen = w.reaskEnd, false
		}
		h.RETH = wire.RETHFields{VA: w.raddr + uint64(done), RKey: w.rkey, DMALen: uint32(n)}
	case classAtomic:
		h.Atomic = wire.AtomicETHFields{VA: w.raddr, RKey: w.rkey, SwapAdd: w.cmpAdd}
		if w.op == WRAtomicCmpAndSwp {
			h.Atomic.SwapAdd, h.Atomic.Compare = w.swap, w.cmpAdd
		}
	}
	h.Imm = w.imm
	if qp.typ == UD {
		h.BTH.DestQP = w.rqpn
		h.DETH = wire.DETHFields{QKey: w.qkey, SrcQP: qp.qpn}
		dst, src = w.dst, w.src
	}
	if last && w.flags&SendSolicited != 0 && w.info.solicitable() {
		h.BTH.Solicited = true
	}
	if qp.typ == RC {
		qp.req.noAckPkts++
		if last || qp.req.noAckPkts >= ackEvery || w.info.class == classRead {
			h.BTH.AckReq = true
			qp.req.noAckPkts = 0
		}
	}
	p := link.Get()
	hl, err := wire.WriteHeaders(p.Buf, &h, n)
	if err != nil {
		link.Put(p)
		qp.dev.log.Error("building request", "qpn", qp.qpn, "err", err)
		qp.failSendLocked(w, LocQPOpErr)
		return false
	}
	if n > 0 {
		var gerr error
		if w.isInline {
			copy(p.Buf[hl:hl+n], w.inline[off:off+n])
		} else {
			gerr = qp.dev.mrs.Gather(p.Buf[hl:hl+n], qp.pd.id, w.sgl, off)
		}
		if gerr != nil {
			link.Put(p)
			qp.failSendLocked(w, LocProtErr)
			return false
		}
	}
	end := hl + n + wire.PadFor(n)
	clear(p.Buf[hl+n : end])
	p.N = end + wire.ICRCLen
	p.Src = netipAddrPort(src)
	p.Dst = dst
	qp.queueLocked(p)
	if qp.typ == RC {
		qp.armRetryLocked()
	}
	return true
}

// queueLocked adds a packet to the QP's outgoing batch.
func (qp *QP) queueLocked(p *link.Packet) {
	qp.out = append(qp.out, p)
	if len(qp.out) >= maxOut {
		qp.flushLocked()
	}
}

// maxOut bounds the packets one hold of the QP lock may build before they
// are sent under it. The PSN window (maxUnacked) and the responder's READ
// bursts (readBurst) keep a hold well below it; it is a backstop for memory.
const maxOut = 4 * maxUnacked

// unlockSend releases the QP lock and then sends the packets built under
// it. txMu, taken before mu is released, keeps the QP's batches in the
// order they were built, while the lock is free for the receive path and
// other posters during the system call.
func (qp *QP) unlockSend() {
	if len(qp.out) == 0 {
		qp.mu.Unlock()
		return
	}
	qp.txMu.Lock()
	qp.out, qp.txOut = qp.txOut[:0], qp.out
	qp.mu.Unlock()
	qp.sendBatch(qp.txOut)
	clear(qp.txOut)
	qp.txOut = qp.txOut[:0]
	qp.txMu.Unlock()
}

// flushLocked sends the packets built so far without releasing the QP
// lock (see maxOut).
func (qp *QP) flushLocked() {
	if len(qp.out) == 0 {
		return
	}
	qp.txMu.Lock()
	qp.sendBatch(qp.out)
	qp.txMu.Unlock()
	clear(qp.out)
	qp.out = qp.out[:0]
}

// sendBatch hands batch to the link and returns its packets to the pool.
func (qp *QP) sendBatch(batch []*link.Packet) {
	if err := qp.dev.link.Send(batch); err != nil {
		qp.dev.log.Debug("link send", "qpn", qp.qpn, "err", err)
	}
	for _, p := range batch {
		link.Put(p)
	}
}

// completeSendLocked marks w done with status s and retires every finished
// WQE at the head of the queue, in order.
func (qp *QP) completeSendLocked(w *swqe, s Status) {
	if w.state == wqeDone {
		return
	}
	w.state = wqeDone
	w.status = s
	if qp.typ == RC && w.info.rdAtomic() && qp.req.rdAtomic > 0 {
		qp.req.rdAtomic--
	}
	qp.retireLocked()
}

func (qp *QP) retireLocked() {
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		if w.state != wqeDone {
			break
		}
		emit := w.signaled || w.status != Success
		wc := WC{WRID: w.id, Status: w.status, Opcode: w.info.wc, QPNum: uint32(qp.qpn)}
		if w.status == Success {
			switch w.info.class {
			case classRead:
				wc.ByteLen = uint32(w.length)
			case classAtomic:
				wc.ByteLen = 8
			}
		}
		// Retire before pushing: a CQ overflow moves the QP to the error
		// state, whose flush retires the rest of the queue re-entrantly.
		w.state = wqeIdle
		qp.sq.head++
		if qp.sq.cur < qp.sq.head {
			qp.sq.cur = qp.sq.head
		}
		if emit && !qp.sendCQ.push(&wc, false) {
			qp.cqOverflowLocked()
		}
	}
	qp.checkDrainedLocked()
}

// failSendLocked completes w with an error and moves the QP to ERR, which
// flushes everything after it.
func (qp *QP) failSendLocked(w *swqe, s Status) {
	qp.completeSendLocked(w, s)
	if qp.state != StateErr {
		qp.enterErrorLocked()
	}
}

// flushSendLocked completes every outstanding send WQE with WR_FLUSH_ERR.
func (qp *QP) flushSendLocked() {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state != wqeDone {
			w.state = wqeDone
			w.status = WRFlushErr
		}
	}
	qp.req.rdAtomic = 0
	qp.retireLocked()
}

func (qp *QP) checkDrainedLocked() {
	if qp.state != StateSQD || qp.sq.drainNotified {
		return
	}
	// Drained when nothing started is still outstanding.
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		if qp.sq.at(i).state != wqePosted {
			return
		}
	}
	qp.sq.drainNotified = true
	if qp.attr.EnSQDAsyncNotify {
		qp.dev.postEvent(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

func (qp *QP) cqOverflowLocked() {
	if qp.state == StateErr {
		return
	}
	qp.dev.postEvent(AsyncEvent{Type: EventQPFatal, QP: qp})
	qp.enterErrorLocked()
}
