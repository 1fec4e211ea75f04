// The requester's shell: PostSend validates work requests into send queue
// slots and posts them to the QP's requester core (internal/requester),
// which decides what is sent, retransmitted and completed; reqSink carries
// out its actions: request packets built from the slots (gathering payload
// from registered memory straight into pooled packet buffers), READ
// responses and atomic results placed in memory, completions, timers.

package verbs

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// PostSend posts send work requests. On error the returned *WRError says
// which request failed; the ones before it were posted.
func (qp *QP) PostSend(wrs []SendWR) error {
	// A hold for an answer that this post ends leaves the timer's list
	// after the send (the deferred calls run in reverse order): its
	// bookkeeping is not on the way of the answer.
	var timed bool
	defer func() {
		if timed {
			answerHolds.done()
		}
	}()
	qp.mu.Lock()
	// A QP posted to in a stream has its packets left for the device's
	// pacer to send, so that the next post overlaps the system call and
	// the pacer sends what several posts built at once. A post after a
	// pause (a ping-pong) sends at once, for the least latency.
	now := qp.now()
	qp.sigFlush = false
	if n := qp.req.Outstanding(); n >= streamOutstanding || n > 0 && now-qp.lastPost.Load() < int64(streamGap) {
		qp.lastPost.Store(now)
		qp.dev.stats.TxDeferred.Add(1)
		defer qp.unlockDeferred()
	} else {
		defer qp.unlockPosted()
	}
	// An ACK held by a poll or for an answer leaves with the request, in
	// the same system call (ackdefer.go, ackanswer.go), behind it: the
	// two then make one segmented datagram (the larger packet first), one
	// receive at the peer, which handles the ACK first (recv.go). A peer
	// polling for its own request's completion then has the answer placed
	// by the time that completion ends its wait.
	qp.noteAnswerLocked(now)
	err := qp.postSendLocked(wrs, now)
	if qp.ackHeld && qp.ackTimed {
		qp.ackTimed, timed = false, true // releaseAckLocked leaves done to us
	}
	qp.releaseAckLocked()
	return err
}

// postSendLocked checks and queues wrs, building what may leave now; now
// is the clock PostSend read on entry (one clock read a post: at tens of
// nanoseconds a read on a VM, a second one was 6% of the poster's CPU in a
// stream of 64-byte WRITEs).
func (qp *QP) postSendLocked(wrs []SendWR, now int64) error {
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.checkSendLocked(wr); err != nil {
			return &WRError{Index: i, WRID: wr.ID, Err: err}
		}
		if err := qp.enqueueLocked(wr); err != nil {
			return &WRError{Index: i, WRID: wr.ID, Err: err}
		}
		if qp.signaled(wr) {
			// The only signaled request outstanding: the poster will
			// wait for its completion (see unlockDeferred).
			qp.sigFlush = qp.sigFlush || qp.sigOut == 0
			qp.sigOut++
		}
	}
	switch qp.state {
	case StateRTS:
		qp.req.Progress(now, qp.gate())
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
	if qp.req.Outstanding() == qp.req.Depth() {
		return errf(ErrQueueFull, "send queue holds %d", qp.sq.n)
	}
	if len(wr.SGL) > qp.attr.Cap.MaxSendSGE && wr.Flags&SendInline == 0 {
		return errf(ErrInvalid, "%d SGEs, QP allows %d", len(wr.SGL), qp.attr.Cap.MaxSendSGE)
	}
	n := sglLen(wr.SGL)
	inline := wr.Flags&SendInline != 0
	if wr.Inline != nil {
		if len(wr.SGL) > 0 {
			return errf(ErrInvalid, "both Inline data and an SGL")
		}
		n, inline = uint64(len(wr.Inline)), true
	}
	info := wrInfoOf(wr.Opcode)
	if info == nil {
		return errf(ErrInvalid, "opcode %v", wr.Opcode)
	}
	if !info.types.has(qp.typ) {
		return errf(ErrInvalid, "opcode %v on a %v QP", wr.Opcode, qp.typ)
	}
	if err := qp.checkLocalWR(wr); err != nil {
		return err
	}
	if isA19(wr.Opcode) {
		return qp.checkA19Locked(wr)
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
	if inline {
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

// signaled reports whether wr completes with a work completion on success
// (IBV_SEND_SIGNALED, or a QP created with sq_sig_all).
func (qp *QP) signaled(wr *SendWR) bool { return qp.sqSigAll || wr.Flags&SendSignaled != 0 }

func (qp *QP) enqueueLocked(wr *SendWR) error {
	qp.sq.ensure()
	w := qp.sq.at(qp.req.Tail())
	*w = swqe{sgl: w.sgl[:0], inline: w.inline[:0]}
	w.id, w.op, w.info, w.flags, w.imm = wr.ID, wr.Opcode, wrInfoOf(wr.Opcode), wr.Flags, wr.Imm
	w.raddr, w.rkey, w.cmpAdd, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.signaled = qp.signaled(wr)
	w.length = int(sglLen(wr.SGL))
	if isA19(wr.Opcode) {
		return qp.enqueueA19Locked(w, wr)
	}
	if wr.Inline != nil {
		w.isInline = true
		w.flags |= SendInline
		w.length = len(wr.Inline)
		w.inline = append(w.inline[:0], wr.Inline...)
	} else if wr.Flags&SendInline != 0 {
		w.isInline = true
		w.inline = w.inline[:w.length]
		w.sgl = appendSGL(w.sgl[:0], wr.SGL)
		err := qp.dev.mrs.GatherLast(&qp.lastLocal, w.inline, qp.pd.id, w.sgl, 0)
		w.sgl = w.sgl[:0]
		if err != nil {
			// libibverbs copies inline data from plain pointers; with keys,
			// a bad SGE is a local protection error at post time.
			return errf(ErrInvalid, "inline data: %v", err)
		}
	} else {
		w.sgl = appendSGL(w.sgl, wr.SGL)
	}
	w.invRKey, w.mw, w.bind = wr.InvRKey, wr.MW, wr.Bind
	if w.info.class == classLocal {
		w.length = 0
	}
	if qp.typ == UD {
		w.src, w.dst, w.tclass, w.ib = wr.AH.src, wr.AH.dst, wr.AH.attr.TrafficClass, wr.AH.ib
		w.rqpn = wr.RemoteQPN
		if wr.AH.mcast {
			w.rqpn = wire.QPMulticast // IBTA: a multicast packet's DestQP
		}
		w.qkey = wr.RemoteQKey
		if w.qkey.Controlled() {
			w.qkey = qp.attr.QKey
		}
	}
	qp.req.Post(w.info.class, w.length, w.flags&SendFence != 0)
	return nil
}

// gate says what the QP's state lets the requester send.
func (qp *QP) gate() requester.Gate {
	switch qp.state {
	case StateRTS:
		return requester.Run
	case StateSQD:
		return requester.Drain
	}
	return requester.Hold
}

// now returns the device clock's time in nanoseconds, for the requester:
// monotonic (a step of the wall clock moves no timer), and one clock read
// where time.Now makes two.
func (qp *QP) now() int64 { return clockNow() }

// clockNow is the device clock's time: nanoseconds since clockEpoch
// (negative inside a synctest bubble, whose clock starts before it).
func clockNow() int64 { return int64(time.Since(clockEpoch)) }

// clockEpoch is the zero of QP.now.
var clockEpoch = time.Now()

// progressLocked sends what the window and credits allow.
func (qp *QP) progressLocked() { qp.req.Progress(qp.now(), qp.gate()) }

// reqSink is the QP as its requester core's Sink (a type of its own, so the
// Sink's methods are not methods of QP).
type reqSink QP

// coreStatus maps the requester core's statuses to completion statuses.
var coreStatus = [...]Status{
	requester.Success:          Success,
	requester.Flushed:          WRFlushErr,
	requester.RetryExceeded:    RetryExcErr,
	requester.RNRRetryExceeded: RNRRetryExcErr,
	requester.RemoteInvalid:    RemInvReqErr,
	requester.RemoteAccess:     RemAccessErr,
	requester.RemoteOperation:  RemOpErr,
	requester.BadResponse:      BadRespErr,
	requester.LocalProtection:  LocProtErr,
	requester.LocalOperation:   LocQPOpErr,
	requester.MWBindError:      MWBindErr,
}

// Transmit builds request packet rp of its work request and queues it for
// sending (requester.Sink).
func (s *reqSink) Transmit(rp *requester.Packet) requester.Status {
	qp := (*QP)(s)
	w := qp.sq.at(rp.Seq)
	var h wire.Headers
	op := w.info.requestOpcode(qp.typ, rp.First, rp.Last)
	// Field by field: a composite literal is built on the stack in narrow
	// stores and copied in 16-byte loads, a store-forwarding stall (a
	// third of this function's time in a 64-byte stream).
	b := &h.BTH
	b.Opcode, b.PKey, b.DestQP, b.PSN, b.AckReq, b.MigReq = op, qp.pkey, qp.attr.DestQPN, rp.PSN, rp.AckReq, qp.migReq
	dst, src, tclass, ib := qp.dst, qp.src, qp.attr.AH.TrafficClass, &qp.ib
	switch w.info.class {
	case classWrite:
		h.RETH.VA, h.RETH.RKey, h.RETH.DMALen = w.raddr, w.rkey, uint32(w.length)
	case classRead:
		h.RETH.VA, h.RETH.RKey, h.RETH.DMALen = w.raddr+uint64(rp.ReadOff), w.rkey, uint32(rp.ReadLen)
	case classAtomic:
		h.Atomic = wire.AtomicETHFields{VA: w.raddr, RKey: w.rkey, SwapAdd: w.cmpAdd}
		if w.op == WRAtomicCmpAndSwp {
			h.Atomic.SwapAdd, h.Atomic.Compare = w.swap, w.cmpAdd
		}
	}
	var a19 []byte
	if isA19(w.op) {
		a19 = a19RequestLocked(w, &h)
	}
	h.Imm = w.imm
	if qp.typ == UD {
		h.BTH.DestQP = w.rqpn
		h.DETH = wire.DETHFields{QKey: w.qkey, SrcQP: qp.qpn}
		dst, src, tclass, ib = w.dst, w.src, w.tclass, &w.ib
	}
	if rp.Last && w.op == WRSendWithInv {
		h.InvRKey = w.invRKey
	}
	if rp.Last && w.flags&SendSolicited != 0 && w.info.solicitable() {
		h.BTH.Solicited = true
	}
	off, n := rp.Off, rp.N
	if a19 != nil {
		n = len(a19)
	}
	p := link.Get()
	hl, err := wire.WriteHeaders(p.Buf, &h, n)
	if err != nil {
		link.Put(p)
		qp.dev.log.Error("building request", "qpn", qp.qpn, "err", err)
		return requester.LocalOperation
	}
	if n > 0 {
		var gerr error
		switch {
		case a19 != nil:
			copy(p.Buf[hl:hl+n], a19)
		case w.isInline:
			copy(p.Buf[hl:hl+n], w.inline[off:off+n])
		default:
			// A payload of extMin or more in one SGE stays in the
			// registered memory (link.Packet.Ext); one across SGEs is
			// gathered.
			ok := false
			if n >= extMin && qp.dev.extSend {
				var view []byte
				if view, ok, gerr = qp.dev.mrs.View(qp.pd.id, w.sgl, off, n); ok && gerr == nil {
					qp.dev.payloadFromMR(p, hl, view)
				}
			}
			if !ok {
				gerr = qp.dev.mrs.GatherLast(&qp.lastLocal, p.Buf[hl:hl+n], qp.pd.id, w.sgl, off)
			}
		}
		if gerr != nil {
			link.Put(p)
			return requester.LocalProtection
		}
	}
	padPacket(p, hl, n)
	p.Src = netip.AddrPortFrom(src, qp.sport)
	p.Dst = dst
	p.TClass = tclass
	p.IB = *ib
	qp.queueLocked(p)
	return requester.Success
}

// extMin is the least payload a request sends from registered memory
// rather than copied into its packet (Device.extSend): below it the copy
// costs less than the kernel's two more I/O vectors.
const extMin = 1024

// payloadFromMR makes b, registered memory, the payload of p, whose headers
// end at hl: the link sends it from there (link.Packet.Ext).
func (d *Device) payloadFromMR(p *link.Packet, hl int, b []byte) {
	p.Ext, p.ExtAt = b, hl
	d.stats.TxFromMR.Add(1)
}

// padPacket ends a packet whose headers end at hl and whose n payload bytes
// follow them in Buf or lie in p.Ext: it clears the pad and sets N, the
// ICRC's room included.
func padPacket(p *link.Packet, hl, n int) {
	if p.Ext != nil {
		n = 0 // the pad follows the headers in Buf
	}
	end := hl + n + wire.PadFor(n+len(p.Ext))
	clear(p.Buf[hl+n : end])
	p.N = end + wire.ICRCLen
}

// queueLocked adds a packet to the QP's outgoing batch.
func (qp *QP) queueLocked(p *link.Packet) {
	qp.count(cntSentPkts, 1)
	qp.out = append(qp.out, p)
	if len(qp.out) >= maxOut {
		qp.flushLocked()
	}
}

// maxOut bounds the packets one hold of the QP lock may build before they
// are sent under it. The PSN window (requester.MaxUnacked) and the responder's READ
// bursts (readBurst) keep a hold well below it; it is a backstop for memory.
const maxOut = 4 * requester.MaxUnacked

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

// A post is part of a stream (see PostSend) if it finds streamOutstanding
// work requests outstanding, or one that was posted less than streamGap
// before. A ping-pong posts a round trip apart and keeps at most one request
// outstanding, its acknowledgement in flight.
const streamOutstanding = 2

// streamGap is a variable only so that a test can widen it: under the race
// detector a post can take longer than 2 us.
var streamGap = 2 * time.Microsecond

// unlockPosted is unlockSend for a post that sends its packets itself: it
// notes when the post returns.
func (qp *QP) unlockPosted() {
	qp.unlockSend()
	qp.lastPost.Store(qp.now())
}

// unlockDeferred releases the QP lock and leaves the packets built under it
// for the device's pacer to send, or, once deferMax wait and the peers may
// be starving, runs the pacer's round itself.
//
// A post also sends at once, with fewer packets waiting, when its poster is
// about to wait for them: when it made the only signaled request
// outstanding (the poster waits for that completion, which needs the
// request on the wire and its ACK back) or filled the send queue (the
// poster can post nothing more until a completion). Left to the pacer,
// they would leave only when the poster yielded, and the acknowledgement
// it waits for would start its way only then. The same applies only while
// the peers may be starving: with a window's worth in flight the pacer's
// batches across QPs cost less.
func (qp *QP) unlockDeferred() {
	n := len(qp.out)
	if n > 0 {
		qp.listLocked()
	}
	waits := qp.sigFlush || qp.req.Outstanding() == qp.req.Depth()
	qp.sigFlush = false
	qp.mu.Unlock()
	if n > 0 && (waits || n >= deferMax) && qp.peerStarving(n) {
		qp.dev.pacer.serve()
	}
}

// peerStarving reports whether the device has fewer request packets on
// the wire than one QP's PSN window (requester.MaxUnacked), besides the n a
// post of qp left: so few that its peers may run out of work before the
// pacer runs. With more in flight (many QPs streaming) the pacer's larger
// batches cost less and lose nothing. Without the bound of
// Options.MaxInflight, or for a QP without acknowledgements, nothing
// tells, and the answer is yes.
func (qp *QP) peerStarving(n int) bool {
	b := qp.dev.budget
	return b == nil || qp.typ != RC || b.held()-n < requester.MaxUnacked
}

// deferMax is how many packets a streaming QP leaves for the pacer before a
// post sends them itself, with those of every QP waiting for the pacer, if
// the peers may be starving (peerStarving). A program that posts without
// yielding (a polling loop in a process with one CPU) keeps the pacer from
// running: its peer would get nothing until the program stopped to poll,
// and the two processes would take turns instead of working at once.
// 64 B WRITEs with perftest's defaults (128 deep, a completion every 100),
// two pinned processes: 1.14-1.15 M msg/s left to the pacer, 1.41-1.58 so;
// 8 QPs 1.82-1.89 and 1.83-2.07; 512 deep, 2.0-2.3 M/s either way. Sending
// at deferMax whatever the packets in flight cost 8 QPs a tenth (1.58-1.82).
// 64 rather than 32 since posts that are about to wait send at once (see
// unlockDeferred): a window of 100 posts then leaves in three calls (64, up
// to the signaled one, the rest) instead of four, the signaled request
// still early (1 QP 1.68 -> 1.87-1.91 M msg/s in a slow minute, 8 QPs and
// 512 deep unchanged; docs/PERFORMANCE.md).
const deferMax = 64

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
		qp.count(cntSendErr, uint64(len(batch)))
		qp.dev.log.Debug("link send", "qpn", qp.qpn, "err", err)
	}
	for _, p := range batch {
		link.Put(p)
	}
}

// Retire completes work request seq with st: its completion goes to the
// send CQ if it is signaled or failed (requester.Sink).
func (s *reqSink) Retire(seq uint64, st requester.Status) {
	qp := (*QP)(s)
	w := qp.sq.at(seq)
	status := coreStatus[st]
	switch {
	case status == Success && w.info.class == classSend:
		qp.count(cntRDMASends, 1)
	case status == RetryExcErr:
		qp.count(cntRetryExceeded, 1)
	case status == RNRRetryExcErr:
		qp.count(cntRNRRetryExceeded, 1)
	}
	if w.signaled {
		qp.sigOut--
	}
	if w.signaled || status != Success {
		wc := WC{WRID: w.id, Status: status, Opcode: w.info.wc, QPNum: qp.qpn}
		if status == Success {
			wc.ByteLen = sendByteLen(w)
		}
		// The core has retired w already: a CQ overflow moves the QP to
		// the error state, whose flush retires the rest of the queue
		// re-entrantly.
		if !qp.sendCQ.push(&wc, false) {
			qp.cqOverflowLocked()
		}
	}
	qp.checkDrainedLocked()
}

// sendByteLen is a successful send completion's byte_len, as rxe reports
// it (its WQE's DMA length): the bytes a SEND, WRITE or READ moved, 8 for an
// atomic or an ATOMIC_WRITE, the range of a FLUSH, 0 for a local operation.
// IBTA defines it for READ and atomics only; programs written against rxe
// may read it for the others too.
func sendByteLen(w *swqe) uint32 {
	switch {
	case w.op == WRFlush:
		return w.flush.Len
	case w.op == WRAtomicWrite, w.info.class == classAtomic:
		return 8
	}
	return uint32(w.length)
}

// Fatal moves the QP to the error state after a work request failed
// (requester.Sink).
func (s *reqSink) Fatal() {
	qp := (*QP)(s)
	if qp.state != StateErr {
		qp.enterErrorLocked()
	}
}

// Place writes a READ response's payload into work request seq's local
// memory (requester.Sink).
func (s *reqSink) Place(seq uint64, off int, payload []byte) requester.Status {
	qp := (*QP)(s)
	if err := qp.dev.mrs.Scatter(payload, qp.pd.id, qp.sq.at(seq).sgl, off); err != nil {
		return requester.LocalProtection
	}
	return requester.Success
}

// Deliver writes an atomic's original value into work request seq's local
// memory, in host order (requester.Sink).
func (s *reqSink) Deliver(seq uint64, orig uint64) requester.Status {
	qp := (*QP)(s)
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], orig)
	if err := qp.dev.mrs.Scatter(b[:], qp.pd.id, qp.sq.at(seq).sgl, 0); err != nil {
		return requester.LocalProtection
	}
	return requester.Success
}

// Count counts a requester event in the device's statistics
// (requester.Sink).
func (s *reqSink) Count(c requester.Counter) {
	qp := (*QP)(s)
	switch c {
	case requester.Duplicate:
		qp.dev.stats.RxDuplicate.Add(1)
	case requester.OutOfOrder:
		qp.dev.stats.RxOutOfSeq.Add(1)
	case requester.RetryTimeout:
		qp.dev.stats.TxRetryTimeouts.Add(1)
		qp.count(cntCompRetry, 1)
		qp.dev.log.Debug("ACK timeout: retransmitting", "qpn", qp.qpn, "psn", qp.req.AckedPSN(), "next", qp.req.PSN(), "cwnd", qp.req.Window(), "mode", qp.req.Mode(), "out", qp.req.Outstanding())
	}
}

// flushSendLocked completes every outstanding send work request with
// WR_FLUSH_ERR.
func (qp *QP) flushSendLocked() { qp.req.Flush() }

func (qp *QP) checkDrainedLocked() {
	if qp.state != StateSQD || qp.sq.drainNotified {
		return
	}
	if !qp.req.Drained() {
		return
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
