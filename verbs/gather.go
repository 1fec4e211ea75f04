package verbs

import (
	"sync"

	"github.com/softrdma/softrdma/link"
)

// txGather collects the packets several QPs built into one send: the
// device's pacer and the receive path, which each visit many QPs in a
// row, send what those visits produced in one call to the link instead of
// one call per QP.
//
// A QP's batches must leave in the order they were built, so the gatherer
// holds each QP's txMu from taking its packets until the send, as
// unlockSend does for one QP. Holding several txMus, a gatherer never
// waits for a lock: when a QP's lock or txMu is not free at once it first
// sends what it has, releasing every txMu it holds, and only then waits.
// Whoever it waits for therefore never waits for it.
type txGather struct {
	dev   *Device
	batch []*link.Packet
	held  []*QP
	// The receive path's sorting space (receiveChunk), here rather than
	// on its stack, which Go would zero on every call: 4 KiB, some 0.4% of
	// a polling ping-pong's time.
	items [rxChunk]rxItem
	mc    [rxChunk]uint8 // indexes in items of the multicast packets (qp nil)
	clk   rxClock
}

// rxClock is the clock of one received chunk, read when first asked for:
// the responses of a chunk and the ACKs it calls for take one reading
// between them (a reading is some tens of nanoseconds here, and a
// ping-pong's side made two a round trip before it answered).
type rxClock struct {
	t    int64
	read bool
}

// now returns the chunk's time (clockNow's; a flag, not a zero value,
// says it was read, since a synctest bubble's clock reads negative).
func (c *rxClock) now() int64 {
	if !c.read {
		c.t, c.read = clockNow(), true
	}
	return c.t
}

var gatherPool = sync.Pool{New: func() any { return new(txGather) }}

// getGather returns an empty gatherer for d's QPs.
func getGather(d *Device) *txGather {
	g := gatherPool.Get().(*txGather)
	g.dev = d
	g.clk = rxClock{}
	return g
}

// gatherFor returns g if it gathers for d's QPs; otherwise it sends and
// puts back g (if not nil) and returns a new gatherer for d. A loop over
// QPs of several devices sends each device's packets in one call so.
func gatherFor(g *txGather, d *Device) *txGather {
	if g != nil && g.dev == d {
		return g
	}
	if g != nil {
		g.put()
	}
	return getGather(d)
}

// put sends what g holds and returns it to the pool.
func (g *txGather) put() {
	g.flush()
	g.dev = nil
	gatherPool.Put(g)
}

// lock takes qp's lock. A QP met again is sent first: its txMu must not
// be held under its lock (flushLocked takes it there).
func (g *txGather) lock(qp *QP) {
	for _, h := range g.held {
		if h == qp {
			g.flush()
			break
		}
	}
	if !qp.mu.TryLock() {
		g.flush()
		qp.mu.Lock()
	}
}

// unlock takes the packets built under qp's lock and releases it.
func (g *txGather) unlock(qp *QP) {
	if len(qp.out) > 0 {
		if !qp.txMu.TryLock() {
			g.flush()
			qp.txMu.Lock()
		}
		g.held = append(g.held, qp)
		g.batch = append(g.batch, qp.out...)
		clear(qp.out)
		qp.out = qp.out[:0]
	}
	qp.mu.Unlock()
	if len(g.batch) >= gatherMax {
		g.flush()
	}
}

// gatherMax is how many packets a gatherer holds before it sends them.
const gatherMax = 256

// flush sends the packets gathered and releases the QPs' txMus.
func (g *txGather) flush() {
	if len(g.batch) > 0 {
		if err := g.dev.link.Send(g.batch); err != nil {
			g.dev.cnt[cntSendErr].Add(uint64(len(g.batch)))
			g.dev.log.Debug("link send", "err", err)
		}
		for _, p := range g.batch {
			link.Put(p)
		}
		clear(g.batch)
		g.batch = g.batch[:0]
	}
	for _, qp := range g.held {
		qp.txMu.Unlock()
	}
	clear(g.held)
	g.held = g.held[:0]
}
