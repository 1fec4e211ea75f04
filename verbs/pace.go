// The responder's output queue and the device's pacer: a READ answer is
// generated a burst at a time, so one large READ cannot hold the link's
// receive goroutine, or the QP lock, for the length of its whole answer.
//
// The responder answers requests in PSN order (IBTA 9.7.5.1.5), so while a
// READ answer is being generated, everything else the responder sends on
// that QP (ACKs, NAKs, atomic responses, later READ answers) waits behind it
// in the QP's output queue. The first burst of an answer is generated where
// the request is handled; the rest by the device's pacer goroutine, which
// serves the QPs with pending output round robin, one burst each in turn,
// and sends each burst after releasing the QP lock. The pacer also sends
// what posts to a streaming QP left in its output (see PostSend).

package verbs

import (
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// readBurst is how many READ response packets are generated under one hold
// of the QP lock.
const readBurst = 32

// maxRespQueue bounds a QP's output queue. A requester keeps at most its PSN
// window of requests outstanding, and each asks for at most one entry, so
// only a misbehaving one fills it; what does not fit is dropped (and, being
// unanswered, asked for again by a well-behaved requester).
const maxRespQueue = 2 * requester.MaxUnacked

// readAnswer is a READ answer in progress: the responses from psn on, for
// n bytes at va (R_Key rkey), next the i-th of npk.
type readAnswer struct {
	first  wire.PSN // of the READ request answered (its replay table entry)
	psn    wire.PSN // of the next response
	rkey   wire.RKey
	va     uint64 // of the next response's data
	n      int    // bytes left
	i, npk int
	dup    bool // answering a duplicate request: a failure drops it silently
}

// respItem is one entry of a QP's output queue: a packet ready to send, or a
// READ answer to generate.
type respItem struct {
	pkt *link.Packet
	ans readAnswer
}

// respOutLocked sends a responder packet, or queues it behind the READ
// answers still being generated.
func (qp *QP) respOutLocked(p *link.Packet) {
	r := &qp.resp
	switch {
	case len(r.queue) == 0:
		qp.queueLocked(p)
	case len(r.queue) < maxRespQueue:
		r.queue = append(r.queue, respItem{pkt: p})
	default:
		link.Put(p)
		qp.dev.stats.RxRespQueueFull.Add(1)
	}
}

// startReadAnswerLocked answers a READ (or a duplicate of one; first is
// the PSN of the executed READ request) for n bytes at va, its first
// response at psn: at once, up to a burst, if nothing else
// is waiting, and the rest later (see pumpLocked). It reports false if the
// queue is full and the answer was dropped.
func (qp *QP) startReadAnswerLocked(first, psn wire.PSN, rkey wire.RKey, va uint64, n int, dup bool) bool {
	r := &qp.resp
	if len(r.queue) >= maxRespQueue {
		qp.dev.stats.RxRespQueueFull.Add(1)
		return false
	}
	r.queue = append(r.queue, respItem{ans: readAnswer{first: first, psn: psn, rkey: rkey, va: va, n: n,
		npk: packetsFor(n, qp.mtu), dup: dup}})
	if len(r.queue) == 1 {
		qp.pumpLocked()
	}
	return true
}

// rewindReadAnswerLocked handles a duplicate of the READ whose request had
// PSN first, asking for n bytes at va from response psn on, against the
// answers to that READ still in the output queue: the original's (if it is
// still being generated) and at most one to a duplicate. A duplicate answer
// already queued is replaced by the one this duplicate asks for, from psn
// to the end of its range, as rxe resets the one answer of a replayed
// request (the requester counts on a re-ask's answer ending, LAST, where
// the re-ask ends: asking again limits its length to a window); the
// original's answer runs on, since what it still has to send is still
// owed. A copy of a request whose answer has not begun changes nothing and
// is dropped (counted in RxDuplicateDropped). It reports false if there is
// no duplicate answer to replace (nor a copy to drop): the caller queues
// one.
//
// So a READ has at most two answers in the queue however often it is asked
// again: a peer repeating a huge READ, or flooding copies of it, makes the
// responder send that READ's responses again at most from where it asks,
// never one whole answer per copy.
func (qp *QP) rewindReadAnswerLocked(first, psn wire.PSN, va uint64, n int) bool {
	r := &qp.resp
	for i := range r.queue {
		a := &r.queue[i].ans
		if r.queue[i].pkt != nil || a.first != first || a.i >= a.npk {
			continue
		}
		if a.i == 0 && psn == a.psn && va == a.va && n == a.n {
			qp.dev.stats.RxDuplicateDropped.Add(1)
			return true
		}
		if a.dup {
			*a = readAnswer{first: first, psn: psn, rkey: a.rkey, va: va, n: n, npk: packetsFor(n, qp.mtu), dup: true}
			return true
		}
	}
	return false
}

// pumpLocked generates up to one burst of the output queue, in order, and
// hands the pacer the QP if anything is left. When the queue empties, a
// coalesced ACK held back behind it goes out.
func (qp *QP) pumpLocked() {
	r := &qp.resp
	budget := readBurst
	done := 0
	for done < len(r.queue) && budget > 0 {
		it := &r.queue[done]
		if it.pkt != nil {
			qp.queueLocked(it.pkt)
			it.pkt = nil
			done++
			continue
		}
		budget -= qp.readPacketsLocked(&it.ans, budget)
		if qp.state == StateErr {
			return // the queue was dropped with the QP's other state
		}
		if it.ans.i < it.ans.npk {
			break
		}
		done++
	}
	n := copy(r.queue, r.queue[done:])
	clear(r.queue[n:])
	r.queue = r.queue[:n]
	if len(r.queue) > 0 {
		qp.schedulePumpLocked()
		return
	}
	qp.sendPendingAckLocked()
}

// readPacketsLocked generates up to max responses of a and returns how many
// it generated. Memory that can no longer be read (its MR deregistered
// meanwhile) ends a duplicate's answer silently and is a remote access
// error for a new request.
func (qp *QP) readPacketsLocked(a *readAnswer, max int) int {
	k := 0
	for ; k < max && a.i < a.npk; k++ {
		m := min(a.n, qp.mtu)
		var op wire.Opcode
		switch {
		case a.npk == 1:
			op = wire.RCReadResponseOnly
		case a.i == 0:
			op = wire.RCReadResponseFirst
		case a.i == a.npk-1:
			op = wire.RCReadResponseLast
		default:
			op = wire.RCReadResponseMiddle
		}
		var h wire.Headers
		h.BTH = wire.BTHFields{Opcode: op, PKey: qp.pkey, DestQP: qp.attr.DestQPN, PSN: a.psn, MigReq: qp.migReq}
		h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKUnlimited, MSN: qp.resp.msn}
		p := link.Get()
		hl, _ := wire.WriteHeaders(p.Buf, &h, m)
		if m > 0 {
			src, ok := qp.remoteLocked(a.rkey, a.va, m, AccessRemoteRead)
			if !ok {
				link.Put(p)
				if a.dup {
					qp.dev.stats.RxDuplicateDropped.Add(1)
					a.i = a.npk
					return k
				}
				qp.responderErrorLocked(a.psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
				return k
			}
			if m >= extMin && qp.dev.extSend {
				qp.dev.payloadFromMR(p, hl, src[:m:m])
			} else {
				copy(p.Buf[hl:], src)
			}
		}
		qp.finishPacketLocked(p, hl, m)
		qp.queueLocked(p)
		a.psn, a.va, a.n, a.i = a.psn.Add(1), a.va+uint64(m), a.n-m, a.i+1
	}
	return k
}

// dropRespQueueLocked discards the output queue (the QP is leaving the
// states in which it answers).
func (qp *QP) dropRespQueueLocked() {
	for _, it := range qp.resp.queue {
		if it.pkt != nil {
			link.Put(it.pkt)
		}
	}
	clear(qp.resp.queue)
	qp.resp.queue = qp.resp.queue[:0]
}

// schedulePumpLocked has the device's pacer generate more of the output
// queue.
func (qp *QP) schedulePumpLocked() {
	qp.resp.pumpScheduled = true
	qp.listLocked()
}

// listLocked hands the QP to the device's pacer, once.
func (qp *QP) listLocked() {
	if qp.listed {
		return
	}
	qp.listed = true
	qp.dev.pacer.add(qp)
}

// pacer is a device's goroutine that generates the rest of READ answers,
// one burst per QP in turn, and sends the packets posts have left to it
// (see PostSend).
type pacer struct {
	mu     sync.Mutex
	run    []*QP // QPs with output left, in turn order
	wake   chan struct{}
	done   chan struct{}
	exited chan struct{}
}

func (p *pacer) start() {
	p.wake = make(chan struct{}, 1)
	p.done = make(chan struct{})
	p.exited = make(chan struct{})
	go p.loop()
}

// stop ends the goroutine and waits for it.
func (p *pacer) stop() {
	close(p.done)
	<-p.exited
}

func (p *pacer) add(qp *QP) {
	p.mu.Lock()
	p.run = append(p.run, qp)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// kick wakes the pacer without listing a QP (for held ACKs).
func (p *pacer) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pacer) next() *QP {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.run) == 0 {
		return nil
	}
	qp := p.run[0]
	n := copy(p.run, p.run[1:])
	p.run[n] = nil
	p.run = p.run[:n]
	return qp
}

func (p *pacer) loop() {
	defer close(p.exited)
	for {
		select {
		case <-p.done:
			return
		case <-p.wake:
		}
		if !p.serve() {
			return
		}
	}
}

// serve gives each listed QP its turn: what posts left, the budget's
// grants, the next burst of READ answers, all in one call to the link
// where it can. The pacer's goroutine runs it when woken, and a post that
// leaves deferMax packets waiting while little is in flight runs it itself
// (see unlockDeferred); the two may run at once, each taking other QPs off
// the list. It reports false if the pacer was stopped meanwhile.
func (p *pacer) serve() bool {
	flushAcks() // held ACKs the application left (ackdefer.go)
	var g *txGather
	for qp := p.next(); qp != nil; qp = p.next() {
		if g == nil {
			g = getGather(qp.dev)
		}
		g.lock(qp)
		qp.listed = false
		if qp.budgetWait.CompareAndSwap(true, false) && !qp.dead {
			qp.progressLocked()
		}
		if qp.resp.pumpScheduled {
			qp.resp.pumpScheduled = false
			if !qp.dead && len(qp.resp.queue) > 0 {
				qp.pumpLocked()
			}
		}
		g.unlock(qp) // the packets of several QPs go out in one call
		// Woken with a turn it did not take (it had nothing more to
		// send, another path sent it meanwhile, or it is gone): the
		// room goes to the next waiter, or it would stay set aside.
		if r := qp.budgetGrant.Swap(0); r > 0 {
			qp.dev.budget.Give(int(r))
		}
		select {
		case <-p.done:
			g.put()
			return false
		default:
		}
	}
	if g != nil {
		g.put()
	}
	return true
}

// txBudget is a device's bound on the request packets its QPs have in
// flight (Options.MaxInflight), shared through their requesters
// (requester.Budget). A QP refused waits in a list; packets given back wake
// the list's QPs through the pacer, which has each send what it may.
type txBudget struct {
	dev   *Device
	avail atomic.Int64
	nwait atomic.Int32
	// expect counts the QPs with an acknowledgement coming.
	expect atomic.Int64
	mu     sync.Mutex
	wait   []*QP // oldest first; guarded by mu
	grant  int   // a turn: see turns.go
	total  int64 // Options.MaxInflight
}

func newTxBudget(d *Device, n int) *txBudget {
	b := &txBudget{dev: d, grant: grantFor(n), total: int64(n)}
	b.avail.Store(int64(n))
	return b
}

// held returns how many request packets the device's QPs have built and
// not yet had acknowledged, and the room set aside for turns in progress.
func (b *txBudget) held() int { return int(b.total - b.avail.Load()) }

// Give returns n packets and wakes waiting QPs, oldest first, a turn's
// room (grant) set aside for each (requester.Budget).
func (b *txBudget) Give(n int) {
	avail := b.avail.Add(int64(n))
	if avail < int64(b.grant) || b.nwait.Load() == 0 {
		return
	}
	b.mu.Lock()
	k := b.wakeTurns()
	m := copy(b.wait, b.wait[k:])
	clear(b.wait[m:])
	b.wait = b.wait[:m]
	b.nwait.Store(int32(m))
	b.mu.Unlock()
}

// Expect counts the QPs with an acknowledgement coming
// (requester.Budget).
func (b *txBudget) Expect(d int) {
	if b.expect.Add(int64(d)) == 0 && d < 0 && b.nwait.Load() > 0 {
		b.wakeAll()
	}
}

// wakeAll wakes every waiting QP: none has an acknowledgement coming to
// give it room, so each must look again (and, refused, send a packet
// asking for one).
func (b *txBudget) wakeAll() {
	b.mu.Lock()
	for _, qp := range b.wait {
		b.dev.pacer.add(qp)
	}
	clear(b.wait)
	b.wait = b.wait[:0]
	b.nwait.Store(0)
	b.mu.Unlock()
}

// Expected returns how many QPs have an acknowledgement coming
// (requester.Budget).
func (b *txBudget) Expected() int { return int(b.expect.Load()) }

// waitFor lists qp for a wake-up, once. The caller holds qp's lock.
func (b *txBudget) waitFor(qp *QP) {
	b.dev.stats.TxBudgetWaits.Add(1)
	if !qp.budgetWait.CompareAndSwap(false, true) {
		return
	}
	b.mu.Lock()
	b.wait = append(b.wait, qp)
	b.nwait.Add(1)
	b.mu.Unlock()
	// A Give or the last Expect(-1) between the refusal and the listing
	// saw no waiter and woke nobody: look again now that qp is listed.
	// (They change avail or expect, then load nwait; this adds to nwait,
	// then loads them: one of the two sees the other.) Without this a QP
	// whose room came back in that gap waited for its ACK timeout.
	switch {
	case b.expect.Load() == 0:
		b.wakeAll()
	case b.avail.Load() > 0:
		b.Give(0)
	}
}
