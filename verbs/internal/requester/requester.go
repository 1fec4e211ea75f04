// Package requester is the requester side of a queue pair's transport as a
// pure state machine: which request packets to send and when, which work
// requests complete and with what status, when to retransmit, and how READ
// responses and atomic results are accepted. It has no clock, no locks and
// no I/O: the caller (verbs' QP) gives it the current time with each event
// (post, progress, ACK, NAK, RNR NAK, READ response, atomic
// acknowledgement, timer expiry) and it calls back a Sink with its actions
// (transmit this request packet, place this response, retire this work
// request, arm the retransmit timer for t, wait for the RNR timer, fail).
//
// Reliability is RC's: go-back-N from the oldest unacknowledged PSN after a
// sequence NAK or an ACK timeout, READ responses placed in any order with
// only the missing ones asked for again, RNR waits, the retry counters and
// a short recovery deadline (Mode). UC and UD requests complete once sent.
package requester

import (
	"math/bits"

	"github.com/softrdma/softrdma/wire"
)

const (
	// MaxUnacked is the PSN window: packets sent and not yet acknowledged
	// (Linux rxe allows 128).
	MaxUnacked = 128
	// AckEvery asks for an ACK at least every this many packets of a
	// message.
	AckEvery = 64
	// MinWindow is the smallest congestion window (see Core.congested).
	MinWindow = 4
	// budgetLow: a requester the budget refuses while holding this many
	// packets or fewer, with no acknowledgement coming to it, sends one
	// packet more asking for one (see take).
	budgetLow = 4
	// RecoveryDivisor sets the short deadline of a recovery: after a NAK
	// or a lost READ or atomic response, a retransmission not acknowledged
	// within 1/RecoveryDivisor of the ACK timeout is sent again once. The
	// responder NAKs a missing PSN once and then stays silent until it
	// arrives (IBTA 9.7.5.1.2), so a retransmission lost again, or the
	// acknowledgement of it, would otherwise stall the QP for a whole ACK
	// timeout. Outside a recovery the deadline is the ACK timeout: a busy
	// peer is not flooded with duplicates.
	RecoveryDivisor = 8
	// ReadReorder is how far past a missing READ response a later one may
	// arrive before the missing one counts as lost (reordering below it is
	// waited out).
	ReadReorder = 16
)

// Transport is the QP's transport service.
type Transport uint8

// The transports.
const (
	RC Transport = iota
	UC
	UD
)

// Class is what a work request does, as far as the requester cares.
type Class uint8

// The classes.
const (
	Send   Class = iota // a message into the peer's receive queue
	Write               // data into the peer's memory
	Read                // data from the peer's memory, in READ responses
	Atomic              // an 8-byte atomic on the peer's memory
	// Local is executed by the requester itself when it reaches it, with
	// no packet and no PSN (BIND_MW, LOCAL_INV): Sink.Local carries it out.
	Local Class = 16
)

// rdAtomic reports whether the request waits for a response carrying data
// and uses one of the QP's READ/atomic credits.
func (c Class) rdAtomic() bool { return c == Read || c == Atomic }

// multiPacket reports whether the message is cut into path-MTU packets.
func (c Class) multiPacket() bool { return c == Send || c == Write }

// Status is how a work request completes. The caller maps it to its own
// completion statuses.
type Status uint8

// The statuses.
const (
	Success Status = iota
	Flushed
	RetryExceeded    // no acknowledgement after retry_cnt timeouts
	RNRRetryExceeded // RNR NAKs beyond rnr_retry
	RemoteInvalid    // NAK: invalid request
	RemoteAccess     // NAK: remote access error
	RemoteOperation  // NAK: remote operational error
	BadResponse      // a READ response of the wrong length or kind
	LocalProtection  // the caller could not read or write local memory
	LocalOperation   // the caller could not build a packet
	// MWBindError: a memory window bind failed (Sink.Local).
	MWBindError Status = 16
)

// Counter names an event the Sink counts.
type Counter uint8

// The counters.
const (
	Duplicate    Counter = iota // a stale or repeated response, ignored
	OutOfOrder                  // a response lost: a request asked for again
	RetryTimeout                // the ACK timeout expired: go-back-N, one retry used
)

// Gate says what the requester may send: nothing (Hold), everything
// (Run: RTS), or only what has started (Drain: SQD).
type Gate uint8

// The gates.
const (
	Hold Gate = iota
	Run
	Drain
)

// Mode is the requester's recovery mode: what its retransmit deadline is
// and what the deadline's expiry does.
type Mode uint8

// The modes and their transitions (docs/DESIGN.md has the table).
const (
	// Steady: the deadline is the ACK timeout; its expiry rewinds to the
	// oldest unacknowledged PSN and uses one of retry_cnt.
	Steady Mode = iota
	// Recovering: a retransmission is out after a NAK or a lost response.
	// Until the oldest unacknowledged PSN reaches the PSN after the newest
	// one sent when the recovery began, the deadline is
	// 1/RecoveryDivisor of the ACK timeout, and its expiry resends
	// without using a retry, then moves to RecoveringFired.
	Recovering
	// RecoveringFired: the short deadline expired once without progress;
	// the next expiry falls back to Steady (and uses a retry).
	RecoveringFired
	// RNRWait: an RNR NAK paused the requester until its RNR timer fires;
	// nothing is sent and no retransmit deadline runs.
	RNRWait
)

// Packet is one request packet the Sink is to build and send.
type Packet struct {
	Seq         uint64   // the work request (Post's sequence number)
	PSN         wire.PSN // its PSN
	First, Last bool     // the message's first and last packet (for the opcode)
	Off, N      int      // SEND/WRITE: the message bytes it carries
	AckReq      bool     // the BTH AckReq bit
	// READ: the part of the message this request asks for (RETH VA offset
	// from the work request's remote address, and DMA length).
	ReadOff, ReadLen int
}

// Sink carries out the requester's actions. Its methods are called with the
// caller's locks held, from inside the Core's methods, and must not call
// back into the Core except where said.
type Sink interface {
	// Transmit builds and sends request packet p. It returns Success, or
	// the status the work request fails with.
	Transmit(p *Packet) Status
	// Place writes a READ response's payload at byte off of work request
	// seq's local memory: Success or the failure status.
	Place(seq uint64, off int, payload []byte) Status
	// Deliver writes an atomic's original value to work request seq's
	// local memory: Success or the failure status.
	Deliver(seq uint64, orig uint64) Status
	// Retire completes work request seq with st. Work requests retire in
	// the order they were posted. Retire may call Flush.
	Retire(seq uint64, st Status)
	// Fatal says a work request failed: the QP goes to the error state,
	// and the caller calls Flush.
	Fatal()
	// ArmRetry asks for Timer to be called at time at (nanoseconds), in
	// nanoseconds from now, or later. A timer set to fire earlier may
	// stay: Timer finds the deadline not reached and asks again.
	ArmRetry(at, in int64)
	// WaitRNR asks for RNRTimer to be called after d nanoseconds,
	// replacing any earlier request.
	WaitRNR(d int64)
	// WaitBudget says the requester has packets to send that its
	// Config.Budget refused: Progress is to be called again once the
	// budget has room. (The requester holds some of it then, so its own
	// acknowledgements or timers call it again in any case.)
	WaitBudget()
	// Count counts an event.
	Count(c Counter)
	// Local carries out work request seq of class Local when the
	// requester reaches it: Success, or the status it fails with (the QP
	// then goes to the error state, as for a failed Transmit).
	Local(seq uint64) Status
	// Migrate says the retries on the current path are exhausted (IBTA
	// 17.2.8 automatic path migration). If the caller has an armed
	// alternate path it moves to it and returns true: the requester then
	// sends again from the oldest unacknowledged PSN with retry_cnt
	// retries anew, instead of failing the work request with
	// RetryExceeded. Migrate may call Configure (the alternate path's ACK
	// timeout), and nothing else of the Core.
	Migrate() bool
}

// Config is the QP's part that the requester follows. A Configure with a
// new one takes effect for what is sent next.
type Config struct {
	Transport   Transport
	MTU         int   // path MTU in bytes
	MaxRdAtomic int   // READ/atomic requests outstanding at once (0 means 1)
	RetryCnt    int   // retries after ACK timeouts
	RNRRetry    int   // retries after RNR NAKs; 7 means without limit
	ACKTimeout  int64 // nanoseconds; 0 means no retransmit timer
	// Budget, if not nil, is an allowance of packets in flight shared
	// with other requesters (RC).
	Budget Budget
}

// Budget is an allowance of packets in flight that several requesters (a
// device's QPs) share: each takes packets for the PSNs it sends first and
// gives them back as they are acknowledged. Its methods are called with the
// caller's lock of one requester held, and must be safe for concurrent use.
type Budget interface {
	// Take reserves n packets, and up to want (want >= n) if there is
	// room: it returns how many it reserved, n or more, or 0 if there was
	// no room for n. With force it reserves n even without (see take).
	// Room set aside for this requester (a turn, see Grant) is taken
	// first.
	Take(n, want int, force bool) int
	// Give returns n packets.
	Give(n int)
	// Grant is how many packets a requester reserves at a time: its turn
	// when the budget is short. A requester waiting is woken with a turn's
	// room set aside for it.
	Grant() int
	// Waiting reports whether requesters wait for room.
	Waiting() bool
	// Expect counts the requesters with an acknowledgement coming: d is
	// +1 when one sends a packet asking for one while none was coming, -1
	// when none is any more. Expected returns the count. A requester that
	// waits trusting another's acknowledgement must be woken when the
	// count reaches zero: the room that acknowledgement gave may have gone
	// to a requester that was not waiting.
	Expect(d int)
	Expected() int
}

const (
	stIdle    = iota
	stPosted  // posted, not started
	stSending // some packets sent
	stSent    // all packets sent, awaiting ACK or response
	stDone    // completed (status set), waiting to be retired in order
)

// wqe is a work request's requester state.
type wqe struct {
	class  Class
	length int
	fence  bool
	// rdHeld: w counts in Core.rdAtomic, from its start until it retires
	// (not when its response completes it: an earlier READ or atomic may
	// still be asked for again, and the responder keeps only the last
	// MaxDestRdAtomic answers to replay).
	rdHeld   bool
	state    uint8
	status   Status
	firstPSN wire.PSN
	lastPSN  wire.PSN
	npkts    int
	sent     int // bytes sent (SEND/WRITE)
	// READ progress, in response packets: readPkts arrived in order (their
	// data is in place); bit i of readSeen says packet readPkts+i (i >= 1)
	// arrived early and is in place too. readEnd is how far the requests
	// believed in flight reach. A lone re-request for the missing packet
	// readPkts (reasked) asked for packets [reaskAt, reaskEnd).
	readPkts int
	readSeen uint64
	readEnd  int
	// readEndSeen: the response at readEnd-1 came as a LAST or ONLY, so no
	// stream of responses in flight goes further.
	readEndSeen bool
	reasked     bool
	reaskAt     int
	reaskEnd    int
}

// optPSN is a PSN that may be unset.
type optPSN struct {
	psn wire.PSN
	set bool
}

// Core is one QP's requester. The zero value is unusable: call Init.
type Core struct {
	cfg  Config
	sink Sink
	now  int64 // the time of the event being handled

	q               []wqe  // ring of work requests, by sequence number (nil until the first Post)
	depth           int    // len(q) once allocated
	head, cur, tail uint64 // oldest not retired; next to send; next free

	psn wire.PSN // next PSN to send
	// next is the PSN the next new request starts at: the one after the
	// newest PSN given out. psn is behind it while a rewind sends requests
	// again, and stays there if the requests after the last one sent again
	// complete without being sent again.
	next     wire.PSN
	ackedPSN wire.PSN // oldest PSN not yet acknowledged
	// sentTo is the PSN after the newest one sent (for a READ request,
	// after the last PSN of its responses). psn is behind it while a
	// rewind sends requests again; responses to PSNs from sentTo on are
	// answers to nothing sent.
	sentTo    wire.PSN
	rdAtomic  int // READ/atomic requests outstanding
	retryLeft int
	rnrLeft   int
	deadline  int64 // retransmit deadline, nanoseconds; 0 = none
	mode      Mode
	// recoverPSN ends a recovery: the PSN after the newest one sent when
	// it started.
	recoverPSN wire.PSN
	noAckPkts  int  // packets since the last AckReq
	ackNext    bool // the next packet asks for an ACK (take)
	// ackReq is the newest PSN sent asking for an ACK, set while it is
	// not acknowledged: an ACK is coming (Budget.Expect).
	ackReq optPSN
	// peerAcked is the newest PSN the responder has acknowledged. An
	// acknowledgement cannot complete requests behind a READ or atomic
	// still waiting for its response; they complete from it once that
	// response is in, without being sent again.
	peerAcked optPSN
	// nakPSN is the PSN the last PSN sequence NAK rewound to.
	nakPSN optPSN

	// The congestion window (RC): cwnd packets at most in flight, besides
	// the PSN window; ssthresh is where its growth turns from one packet
	// per packet acknowledged to one per window; acc counts the packets
	// acknowledged towards the next. See congested.
	cwnd, ssthresh, acc int
	// held is how many packets the requester has of Config.Budget: one
	// per PSN from ackedPSN to sentTo.
	held int
	// credit is what the requester reserved of Config.Budget and has not
	// sent yet: the rest of its turn, given back when progress stops.
	credit int

	pkt Packet // scratch for Transmit
}

// Init sets up a requester for a send queue of depth work requests. Its
// queue is allocated by the first Post.
func (c *Core) Init(depth int, sink Sink) {
	*c = Core{depth: depth, sink: sink, cwnd: MaxUnacked, ssthresh: MaxUnacked}
}

// Reset returns the requester to its state after Init (the QP's RESET).
func (c *Core) Reset() {
	c.Release()
	q, depth, sink, cfg := c.q, c.depth, c.sink, c.cfg
	clear(q)
	*c = Core{q: q, depth: depth, sink: sink, cfg: cfg, cwnd: MaxUnacked, ssthresh: MaxUnacked}
}

// Configure sets the QP attributes the requester follows.
func (c *Core) Configure(cfg Config) { c.cfg = cfg }

// SetPSN sets the next PSN to send (the QP's sq_psn).
func (c *Core) SetPSN(p wire.PSN) {
	c.Release()
	c.psn, c.ackedPSN, c.next, c.sentTo = p, p, p, p
}

// SetRetry sets retry_cnt and restarts the count of retries left.
func (c *Core) SetRetry(n int) { c.cfg.RetryCnt, c.retryLeft = n, n }

// SetRNRRetry sets rnr_retry and restarts the count of RNR retries left.
func (c *Core) SetRNRRetry(n int) { c.cfg.RNRRetry, c.rnrLeft = n, n }

// PSN returns the next PSN to send.
func (c *Core) PSN() wire.PSN { return c.psn }

// AckedPSN returns the oldest PSN not yet acknowledged.
func (c *Core) AckedPSN() wire.PSN { return c.ackedPSN }

// Mode returns the recovery mode.
func (c *Core) Mode() Mode { return c.mode }

// Deadline returns the retransmit deadline in nanoseconds, 0 if none.
func (c *Core) Deadline() int64 { return c.deadline }

// Outstanding returns how many posted work requests have not retired.
func (c *Core) Outstanding() int { return int(c.tail - c.head) }

// Tail returns the sequence number the next Post gives.
func (c *Core) Tail() uint64 { return c.tail }

// Depth returns the number of work requests the send queue holds.
func (c *Core) Depth() int { return c.depth }

// Drained reports whether nothing started is still outstanding (SQD's
// drained condition).
func (c *Core) Drained() bool {
	for i := c.head; i != c.tail; i++ {
		if c.at(i).state != stPosted {
			return false
		}
	}
	return true
}

func (c *Core) at(seq uint64) *wqe { return &c.q[seq%uint64(len(c.q))] }

// Post queues a work request and returns its sequence number; the caller
// keeps its data in a slot of its own under the same number (modulo
// Depth). The queue must not be full.
func (c *Core) Post(class Class, length int, fence bool) uint64 {
	if c.q == nil {
		c.q = make([]wqe, c.depth)
	}
	seq := c.tail
	*c.at(seq) = wqe{class: class, length: length, fence: fence, state: stPosted}
	c.tail++
	return seq
}

// packetsFor returns how many PSNs a message of n bytes uses.
func packetsFor(n, mtu int) int {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// Progress sends what the window and credits allow.
func (c *Core) Progress(now int64, g Gate) {
	c.now = now
	c.progress(g)
}

func (c *Core) progress(g Gate) {
	c.sendSome(g)
	if c.credit > 0 {
		// The rest of the turn goes back to the budget (and to a waiter):
		// room kept between calls would be held with nothing in flight
		// to give it back.
		c.cfg.Budget.Give(c.credit)
		c.credit = 0
	}
}

func (c *Core) sendSome(g Gate) {
	if c.mode == RNRWait || g == Hold {
		return // an RNR NAK pauses the requester until its timer fires
	}
	for c.cur != c.tail {
		idx := c.cur
		w := c.at(idx)
		if w.state == stPosted {
			if g == Drain {
				return // draining starts nothing new
			}
			if !c.start(idx, w) {
				return
			}
		}
		if !c.sendPackets(idx, w) {
			return
		}
		if c.cur == idx {
			c.cur++
		}
	}
}

// start decides whether w may start now and assigns its PSNs.
func (c *Core) start(seq uint64, w *wqe) bool {
	if c.cfg.Transport == RC {
		if w.fence && c.rdAtomic > 0 {
			return false
		}
		if w.class.rdAtomic() {
			if c.rdAtomic >= max(c.cfg.MaxRdAtomic, 1) {
				return false
			}
			c.rdAtomic++
			w.rdHeld = true
		}
	}
	if w.class == Local {
		return c.startLocal(seq, w)
	}
	if c.cfg.Transport == UD && w.length > c.cfg.MTU {
		// IBTA C10-93.1.1: a UD message longer than the port MTU emits no
		// packet and is not an error; Linux rxe completes it successfully.
		c.complete(w, Success)
		return true // nothing left to send: sendPackets passes over it
	}
	w.npkts = 1
	if w.class == Read || w.class.multiPacket() && c.cfg.Transport != UD {
		w.npkts = packetsFor(w.length, c.cfg.MTU)
	}
	// Every request before w has been sent or has completed (progress
	// reached w), but a rewind leaves psn after the last one it sent
	// again: requests behind that one that completed meanwhile are passed
	// over without moving psn. w starts after the newest PSN given out;
	// starting at psn would reuse a PSN the responder has seen, and it
	// would take w for a duplicate (an atomic would get another one's
	// saved result, without being executed).
	c.psn = c.next
	if c.cfg.Transport == RC && c.oldestOutstanding() == nil {
		// Nothing before w is outstanding: every PSN before it is
		// acknowledged, even if the acknowledgements that said so could
		// not move ackedPSN (a READ or atomic response completing a
		// request behind one still missing its response).
		c.ackedTo(c.psn)
	}
	w.firstPSN = c.psn
	w.lastPSN = c.psn.Add(w.npkts - 1)
	c.next = w.lastPSN.Add(1)
	w.sent = 0
	w.readPkts, w.readSeen, w.readEnd, w.reasked = 0, 0, 0, false
	w.state = stSending
	return true
}

// sendPackets emits w's remaining packets within the window. It reports
// true when every packet of w has been sent.
func (c *Core) sendPackets(seq uint64, w *wqe) bool {
	if w.class.rdAtomic() {
		if w.state != stSending {
			return true
		}
		// From psn to the end of its responses: all of them the first
		// time, the rest when a rewind asks again for part of a READ
		// (counting all would take budget for PSNs past sentTo that no
		// acknowledgement gives back).
		if !c.windowOpen(max(int(w.lastPSN.Add(1).Diff(c.psn)), 1)) {
			return false
		}
		c.emit(seq, w, w.firstPSN.Add(w.readPkts), 0, 0)
		w.state = stSent
		c.psn = w.lastPSN.Add(1)
		return true
	}
	mtu := c.cfg.MTU
	for w.state == stSending {
		if c.cfg.Transport == RC && !c.windowOpen(1) {
			return false
		}
		off := w.sent
		n := min(w.length-off, mtu)
		psn := w.firstPSN.Add(off / mtu)
		if !c.emit(seq, w, psn, off, n) {
			return true // failed and completed with an error
		}
		w.sent += n
		c.psn = psn.Add(1)
		if w.sent >= w.length {
			w.state = stSent
			if c.cfg.Transport != RC {
				c.complete(w, Success)
			}
		}
	}
	return true
}

func (c *Core) windowOpen(n int) bool {
	if c.cfg.Transport != RC {
		return true
	}
	inFlight := int(c.psn.Diff(c.ackedPSN))
	idle := inFlight == 0
	if !idle {
		if inFlight+n > MaxUnacked {
			return false
		}
		k := c.unacked()
		if k > 0 && k+n > c.cwnd {
			return false
		}
		idle = k <= 0
	}
	return c.take(n, idle)
}

// take reserves from the budget the packets of n PSNs from psn on that are
// sent for the first time (resent ones are held already).
//
// It reserves a turn at a time (Budget.Grant), kept as credit for the
// packets that follow; when others wait, the packet that ends the turn asks
// for an acknowledgement, which gives the turn's packets back. So when many
// requesters share a short budget, each sends a turn's run of packets, one
// acknowledgement for the run, instead of a packet or two each, every other
// one asking for an ACK.
func (c *Core) take(n int, idle bool) bool {
	b := c.cfg.Budget
	if b == nil {
		return true
	}
	k := int(c.psn.Add(n).Diff(c.sentTo))
	if k <= 0 {
		return true
	}
	if c.credit < k {
		if c.credit > 0 {
			b.Give(c.credit)
			c.credit = 0
		}
		got := b.Take(k, max(k, b.Grant()), false)
		if got == 0 {
			return c.refused(b, k, idle)
		}
		c.credit = got
	}
	c.credit -= k
	c.held += k
	if c.credit == 0 && b.Waiting() {
		c.ackNext = true // the end of a turn while others wait
	}
	return true
}

// refused handles a refusal of k packets by the budget: the requester
// waits for room if an acknowledgement is coming that gives some, or sends
// the packet anyway, asking for one.
func (c *Core) refused(b Budget, k int, idle bool) bool {
	if c.ackReq.set || b.Expected() > 0 && (c.held == 0 || c.held > budgetLow && !idle) {
		// An acknowledgement is coming, this requester's, or another's:
		// it gives the budget room and wakes the waiters. A requester
		// holding none waits its turn too (it used to send regardless,
		// so that with many requesters the budget was always overdrawn,
		// each sending a packet or two, every other one asking for an
		// ACK).
		c.sink.WaitBudget()
		return false
	}
	// Refused with no acknowledgement coming: the responder acknowledges
	// only packets that ask (rxe too), so this requester's packets would
	// hold their part of the budget until something else made it send
	// again, or the ACK timeout, and if every requester holding some were
	// so, all would wait for it. This packet goes anyway, asking for one:
	// the bound is overdrawn by a packet per requester at most. A
	// requester holding more than budgetLow packets trusts another's
	// acknowledgement to wake it (it holds enough to finish a message,
	// whose last packet asks); one holding fewer does not wait on others:
	// each of its packets would wait for a wake-up. One with nothing in
	// flight (idle: a rewind's PSNs held, or none) has nothing coming to
	// it either.
	b.Take(k, k, true)
	c.ackNext = true
	c.held += k
	return true
}

// give returns to the budget the packets of n PSNs acknowledged.
func (c *Core) give(n int) {
	if n = min(n, c.held); n > 0 {
		c.held -= n
		c.cfg.Budget.Give(n)
	}
}

// Release gives back all of the budget the requester holds. Flush and
// Reset call it; the caller calls it for a requester it drops otherwise.
func (c *Core) Release() {
	c.setAckReq(optPSN{})
	if c.held+c.credit > 0 && c.cfg.Budget != nil {
		c.cfg.Budget.Give(c.held + c.credit)
	}
	c.held, c.credit = 0, 0
}

// setAckReq records the newest PSN with an acknowledgement coming, or none,
// counting the change in Budget.Expect.
func (c *Core) setAckReq(p optPSN) {
	was := c.ackReq.set
	c.ackReq = p
	if b := c.cfg.Budget; b != nil && was != p.set {
		if p.set {
			b.Expect(1)
		} else {
			b.Expect(-1)
		}
	}
}

// unacked returns how many packets sent are not acknowledged by the peer:
// from psn back to the newest PSN it acknowledged, or to ackedPSN. It is
// negative while a rewind resends behind PSNs the peer acknowledged (which
// ackedPSN, held back by a READ or atomic still waiting for its response,
// or by psn itself, may not show).
func (c *Core) unacked() int {
	from := c.ackedPSN
	if pa := c.peerAcked; pa.set && pa.psn.Add(1).After(from) {
		from = pa.psn.Add(1)
	}
	return int(c.psn.Diff(from))
}

// Window returns the congestion window: how many packets may be in flight
// (at most MaxUnacked).
func (c *Core) Window() int { return c.cwnd }

// congested shrinks the congestion window after a loss: to half, or to
// MinWindow packets after an ACK timeout (hard). A responder drops requests
// only when they come faster than it takes them: its socket buffer
// overflows when many QPs send to it at once. Every QP then retransmitting
// its whole PSN window, at the same moment, would lose them again, until
// the retry counts ran out; a window that halves at each loss and grows
// again with the acknowledgements (by one packet per packet acknowledged up
// to ssthresh, by one per window above it) lets them share the receiver. A
// QP alone on a path that loses nothing keeps its whole window. The window
// stays at MinWindow or more, every packet asking for an acknowledgement
// there: one packet alone, or its acknowledgement, lost on a lossy path
// would cost a retry each time.
func (c *Core) congested(hard bool) {
	c.ssthresh = max(c.cwnd/2, MinWindow)
	c.cwnd = c.ssthresh
	if hard {
		c.cwnd = MinWindow
	}
	c.acc = 0
}

// opened grows the congestion window for k packets acknowledged.
func (c *Core) opened(k int) {
	if c.cwnd >= MaxUnacked {
		return
	}
	if c.cwnd < c.ssthresh {
		c.cwnd = min(c.cwnd+k, c.ssthresh)
		return
	}
	c.acc += k
	for c.acc >= c.cwnd && c.cwnd < MaxUnacked {
		c.acc -= c.cwnd
		c.cwnd++
	}
}

// emit has the Sink send one request packet of w at psn carrying bytes
// [off, off+n) of the message. It reports false if the request failed.
func (c *Core) emit(seq uint64, w *wqe, psn wire.PSN, off, n int) bool {
	p := &c.pkt
	*p = Packet{Seq: seq, PSN: psn, First: off == 0, Last: off+n >= w.length, Off: off, N: n}
	if w.class == Read {
		mtu := c.cfg.MTU
		done := w.readPkts * mtu
		rn := w.length - done
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
			k := min(packetsFor(rn, mtu), MaxUnacked)
			if w.readSeen != 0 {
				k = min(k, bits.TrailingZeros64(w.readSeen)+1)
			}
			rn = min(rn, k*mtu)
		}
		w.reaskEnd = w.readPkts + packetsFor(rn, mtu)
		if w.reaskEnd > w.readEnd {
			w.readEnd, w.readEndSeen = w.reaskEnd, false
		}
		p.ReadOff, p.ReadLen = done, rn
	}
	if c.cfg.Transport == RC {
		c.noAckPkts++
		// The packet that fills a reduced congestion window asks too:
		// nothing more is sent until an acknowledgement comes; and at the
		// smallest window, every packet does.
		if p.Last || c.ackNext || c.noAckPkts >= AckEvery || w.class == Read || c.cwnd < MaxUnacked && (c.cwnd <= MinWindow || c.unacked() >= c.cwnd-1) {
			p.AckReq = true
			c.noAckPkts = 0
			c.ackNext = false
			if !c.ackReq.set || psn.After(c.ackReq.psn) {
				c.setAckReq(optPSN{psn, true})
			}
		}
	}
	if st := c.sink.Transmit(p); st != Success {
		c.fail(w, st)
		return false
	}
	end := psn.Add(1)
	if w.class == Read {
		end = w.lastPSN.Add(1)
	}
	if end.After(c.sentTo) {
		c.sentTo = end
	}
	if c.cfg.Transport == RC {
		c.armRetry()
	}
	return true
}

// complete marks w done with status st and retires every finished work
// request at the head of the queue, in order.
func (c *Core) complete(w *wqe, st Status) {
	if w.state == stDone {
		return
	}
	w.state = stDone
	w.status = st
	c.retire()
}

func (c *Core) retire() {
	for c.head != c.tail {
		seq := c.head
		w := c.at(seq)
		if w.state != stDone {
			break
		}
		// Retire before telling the Sink: a completion queue overflow
		// moves the QP to the error state, whose Flush retires the rest
		// of the queue re-entrantly.
		st := w.status
		w.state = stIdle
		if w.rdHeld {
			// Retired in order: every READ and atomic before it has its
			// answer, so the responder need not replay this one.
			w.rdHeld = false
			if c.rdAtomic > 0 {
				c.rdAtomic--
			}
		}
		c.head++
		if c.cur < c.head {
			c.cur = c.head
		}
		c.sink.Retire(seq, st)
	}
	if c.head == c.tail {
		// Every request is complete, so every PSN sent is acknowledged,
		// whether or not ackedPSN shows it yet (a READ or atomic
		// completed by its response; start catches up with it): nothing
		// of the budget stays held by an idle requester.
		c.Release()
	} else if w := c.at(c.head); c.cfg.Transport == RC && (w.state == stSending || w.state == stSent) && w.firstPSN.After(c.ackedPSN) {
		// Every request before the oldest one left is complete, so every
		// PSN before its first is acknowledged. Without this, ackedPSN
		// could stay behind a request completed by its response while the
		// next one has started: the window would count PSNs nobody will
		// acknowledge, and the budget keep them.
		c.ackedTo(w.firstPSN)
	}
}

// fail completes w with an error and has the QP move to the error state,
// which flushes everything after it.
func (c *Core) fail(w *wqe, st Status) {
	c.complete(w, st)
	c.sink.Fatal()
}

// Flush completes every outstanding work request with Flushed (the QP's
// error state).
func (c *Core) Flush() {
	c.Release()
	for i := c.head; i != c.tail; i++ {
		w := c.at(i)
		if w.state != stDone {
			w.state = stDone
			w.status = Flushed
		}
	}
	c.rdAtomic = 0
	c.retire()
}
