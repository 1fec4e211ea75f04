// Package fault wraps any link.Link in the seeded fault model of link/loop
// (link.Faults: loss, duplication, reordering, delay and jitter, corruption,
// a filter), so that real links such as link/udp can be tested under the
// same faults as the in-process network.
//
// Faults apply on the sending side: a wrapped link's Send draws a verdict
// for each packet (link.Dice, seeded by Config.Seed), drops the packets
// lost, sends the others through the inner link, twice if duplicated, and
// keeps copies of delayed and held-back packets, which a goroutine of the
// wrapper sends when they fall due. Corruption flips one bit after the inner
// link sealed the packet's ICRC (link.SealHooker, which link/udp and
// link/loop implement), so the receiver's ICRC check drops it and counts it
// in its Stats.RxBadICRC; on an inner link without the hook nothing is
// corrupted (Stats.Corrupted stays 0).
//
// Everything else goes to the inner link: Start, Addrs, Port, Close, the
// receive path, and the optional interfaces link.Poller, link.Waiter,
// link.StateNotifier and link.SourcePortReserver. The wrapper implements
// them all; on an inner link without one, Poll returns 0, PollWait reports
// that it cannot wait, the link is always up and reserving a port does
// nothing, which is what a user of a link without them assumes. With no
// faults configured Send is one atomic load and the inner Send.
package fault

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/link"
)

// Config configures a wrapper.
type Config struct {
	// Faults are the initial faults; SetFaults replaces them.
	link.Faults
	// Seed seeds the fault generator.
	Seed uint64
	// MaxHeld bounds the copies of delayed and held packets the wrapper
	// keeps (DefaultMaxHeld if zero); a packet over the bound is dropped
	// and counted in Stats.Overflow.
	MaxHeld int
}

// DefaultMaxHeld is the default bound on delayed and held packets.
const DefaultMaxHeld = 4096

// Stats counts what a wrapper did to the packets sent through it.
type Stats struct {
	Sent       uint64 // packets given to Send
	Filtered   uint64 // dropped by Faults.Filter
	Lost       uint64 // dropped by Faults.Loss
	Duplicated uint64 // extra copies made by Faults.Duplicate
	Reordered  uint64 // packets held back by Faults.Reorder
	Corrupted  uint64 // packets sent with a bit flipped by Faults.Corrupt (a duplicate's copy too)
	Delayed    uint64 // packets given a nonzero delay
	Overflow   uint64 // dropped: more than Config.MaxHeld packets waiting
}

// Link is a link.Link whose outgoing packets go through a fault model
// before the inner link sends them. Its methods are safe for concurrent
// use.
type Link struct {
	inner  link.Link
	dice   *link.Dice
	active atomic.Bool // the faults do something
	max    int

	sent, filtered, lost, duplicated       atomic.Uint64
	reordered, corrupted, delayed, overflw atomic.Uint64

	scratch sync.Pool // *batch: what one Send gives the inner Send

	// Corruption: the packets of Sends in progress whose bytes the seal
	// hook flips, by the address of their first byte.
	cmu     sync.Mutex
	flips   map[*byte]*flip
	nflips  atomic.Int32
	hooking bool // the inner link has the seal hook

	// Delayed and held packets (copies), sent by run.
	qmu       sync.Mutex
	q         []entry // min-heap by (due, seq)
	held      entry   // held.p == nil if none
	heldUntil time.Time
	seq       uint64
	closed    bool
	wake      chan struct{} // capacity 1
	done      chan struct{}
	exited    chan struct{}
	closeOnce sync.Once
}

type flip struct {
	bit, times int
}

type entry struct {
	p    *link.Packet
	due  time.Time
	seq  uint64
	flip int
}

// New wraps inner. The wrapper owns inner: its Close closes it.
func New(inner link.Link, cfg Config) *Link {
	m := cfg.MaxHeld
	if m <= 0 {
		m = DefaultMaxHeld
	}
	l := &Link{
		inner: inner, dice: link.NewDice(cfg.Faults, cfg.Seed), max: m,
		flips:  make(map[*byte]*flip),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	l.active.Store(cfg.Faults.Active())
	if h, ok := inner.(link.SealHooker); ok {
		h.SetSealHook(l.sealed)
		l.hooking = true
	}
	go l.run()
	return l
}

// Inner returns the wrapped link.
func (l *Link) Inner() link.Link { return l.inner }

// SetFaults replaces the faults; packets sent afterwards see the new ones.
// Packets already delayed or held keep their schedule.
func (l *Link) SetFaults(f link.Faults) {
	l.dice.Set(f)
	l.active.Store(f.Active())
}

// Faults returns the current faults.
func (l *Link) Faults() link.Faults { return l.dice.Faults() }

// FaultStats returns counts of what the wrapper did to packets.
func (l *Link) FaultStats() Stats {
	return Stats{
		Sent: l.sent.Load(), Filtered: l.filtered.Load(), Lost: l.lost.Load(),
		Duplicated: l.duplicated.Load(), Reordered: l.reordered.Load(),
		Corrupted: l.corrupted.Load(), Delayed: l.delayed.Load(),
		Overflow: l.overflw.Load(),
	}
}

// Addrs returns the inner link's addresses.
func (l *Link) Addrs() []netip.Addr { return l.inner.Addrs() }

// Port returns the inner link's port.
func (l *Link) Port() uint16 { return l.inner.Port() }

// Start starts the inner link with h.
func (l *Link) Start(h link.Handler) error { return l.inner.Start(h) }

// Stats returns the inner link's counters, with the packets the wrapper
// dropped (lost, filtered, over MaxHeld) added to Dropped.
func (l *Link) Stats() link.Stats {
	s := l.inner.Stats()
	s.Dropped += l.lost.Load() + l.filtered.Load() + l.overflw.Load()
	return s
}

// Close stops the wrapper's goroutine, drops the packets it still holds and
// closes the inner link.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		<-l.exited
		l.qmu.Lock()
		l.closed = true
		for _, e := range l.q {
			link.Put(e.p)
		}
		l.q = nil
		if l.held.p != nil {
			link.Put(l.held.p)
			l.held = entry{}
		}
		l.qmu.Unlock()
	})
	return l.inner.Close()
}

// batch is the scratch of one Send: the packets for the inner Send, the bit
// each is to have flipped (-1: none), and whether the wrapper owns it (a
// copy, returned to the pool after sending).
type batch struct {
	out  []*link.Packet
	flip []int
	own  []bool
}

func (b *batch) add(p *link.Packet, flip int, own bool) {
	b.out = append(b.out, p)
	b.flip = append(b.flip, flip)
	b.own = append(b.own, own)
}

// Send sends the batch through the faults (see the package documentation).
// It returns the inner Send's error; packets the faults drop are not
// errors. With no faults configured it is the inner Send.
func (l *Link) Send(pkts []*link.Packet) error {
	if !l.active.Load() {
		return l.inner.Send(pkts)
	}
	b, _ := l.scratch.Get().(*batch)
	if b == nil {
		b = new(batch)
	}
	now := time.Now()
	for _, p := range pkts {
		if p == nil || p.N <= 0 || p.N > len(p.Buf) {
			b.add(p, -1, false) // the inner link reports it
			continue
		}
		l.sent.Add(1)
		v, filter := l.dice.Roll(p.N)
		if filter != nil && filter(p) {
			l.filtered.Add(1)
			continue
		}
		if v.Lose {
			l.lost.Add(1)
			continue
		}
		if v.Flip >= 0 && (!l.hooking || v.Flip >= p.N*8) {
			v.Flip = -1
		}
		if v.Delay > 0 {
			l.delayed.Add(1)
		}
		copies := 1
		if v.Dup {
			copies = 2
			l.duplicated.Add(1)
		}
		if v.Flip >= 0 {
			l.corrupted.Add(uint64(copies))
		}
		for c := range copies {
			hold := v.Hold && c == 0 && l.canHold()
			if v.Delay <= 0 && !hold {
				if c == 0 {
					b.add(p, v.Flip, false)
				} else {
					b.add(link.Clone(p), v.Flip, true)
				}
				l.release(b, now)
				continue
			}
			l.later(link.Clone(p), v.Flip, now.Add(v.Delay), hold, now.Add(v.HoldFor))
		}
	}
	var err error
	if len(b.out) > 0 {
		err = l.sendOut(b)
	}
	clear(b.out)
	b.out, b.flip, b.own = b.out[:0], b.flip[:0], b.own[:0]
	l.scratch.Put(b)
	return err
}

// sendOut gives b.out to the inner Send, with the seal hook flipping the
// bits b.flip asks for, then undoes the flips on the caller's packets and
// returns the copies to the pool.
func (l *Link) sendOut(b *batch) error {
	n := 0
	for i, bit := range b.flip {
		if bit >= 0 {
			if n == 0 {
				l.cmu.Lock()
			}
			l.flips[&b.out[i].Buf[0]] = &flip{bit: bit}
			n++
		}
	}
	if n > 0 {
		l.nflips.Add(int32(n))
		l.cmu.Unlock()
	}
	err := l.inner.Send(b.out)
	if n > 0 {
		l.cmu.Lock()
		for i, bit := range b.flip {
			if bit < 0 {
				continue
			}
			p := b.out[i]
			k := &p.Buf[0]
			if f := l.flips[k]; f != nil && f.times%2 == 1 && !b.own[i] {
				p.Buf[bit/8] ^= 1 << (bit % 8)
			}
			delete(l.flips, k)
		}
		l.nflips.Add(-int32(n))
		l.cmu.Unlock()
	}
	for i, own := range b.own {
		if own {
			link.Put(b.out[i])
		}
	}
	return err
}

// sealed is the inner link's seal hook: it flips the bit asked for in a
// packet being sent.
func (l *Link) sealed(p []byte) {
	if l.nflips.Load() == 0 || len(p) == 0 {
		return
	}
	l.cmu.Lock()
	if f := l.flips[&p[0]]; f != nil && f.bit < len(p)*8 {
		p[f.bit/8] ^= 1 << (f.bit % 8)
		f.times++
	}
	l.cmu.Unlock()
}

// release adds the packet held back, if any and due, to b: a packet sent
// releases it right after itself.
func (l *Link) release(b *batch, now time.Time) {
	l.qmu.Lock()
	if h := l.held; h.p != nil && !h.due.After(now) {
		l.held = entry{}
		b.add(h.p, h.flip, true)
	}
	l.qmu.Unlock()
}

// canHold reports whether no packet is held back now.
func (l *Link) canHold() bool {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return l.held.p == nil
}

// later queues the copy p to be sent at due, or holds it back (until
// holdUntil at the latest) if hold is set and nothing is held yet.
func (l *Link) later(p *link.Packet, flip int, due time.Time, hold bool, holdUntil time.Time) {
	l.qmu.Lock()
	n := len(l.q)
	if l.held.p != nil {
		n++
	}
	if l.closed || n >= l.max {
		l.qmu.Unlock()
		link.Put(p)
		l.overflw.Add(1)
		return
	}
	l.seq++
	e := entry{p: p, due: due, seq: l.seq, flip: flip}
	if hold && l.held.p == nil {
		l.held = e
		l.heldUntil = holdUntil
		l.reordered.Add(1)
	} else {
		l.push(e)
	}
	l.qmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run sends delayed packets when they fall due, and held ones when their
// hold runs out.
func (l *Link) run() {
	defer close(l.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	b := new(batch)
	for {
		next := l.take(b, time.Now())
		if len(b.out) > 0 {
			_ = l.sendOut(b) // lost, as the network would lose it
			clear(b.out)
			b.out, b.flip, b.own = b.out[:0], b.flip[:0], b.own[:0]
			continue
		}
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			tc = timer.C
		}
		select {
		case <-l.done:
			timer.Stop()
			return
		case <-l.wake:
		case <-tc:
		}
		timer.Stop()
	}
}

// maxRunBatch bounds the packets run sends at once.
const maxRunBatch = 64

// take moves the due packets (up to maxRunBatch, an overdue held one first)
// into b and returns when the next one falls due (zero: nothing waits).
func (l *Link) take(b *batch, now time.Time) time.Time {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if h := l.held; h.p != nil && !now.Before(l.heldUntil) && !now.Before(h.due) {
		l.held = entry{}
		b.add(h.p, h.flip, true)
	}
	for len(b.out) < maxRunBatch && len(l.q) > 0 && !l.q[0].due.After(now) {
		e := l.pop()
		b.add(e.p, e.flip, true)
	}
	var next time.Time
	if len(l.q) > 0 {
		next = l.q[0].due
	}
	if h := l.held; h.p != nil {
		at := l.heldUntil
		if h.due.After(at) {
			at = h.due
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

func (l *Link) less(i, j int) bool {
	if l.q[i].due.Equal(l.q[j].due) {
		return l.q[i].seq < l.q[j].seq
	}
	return l.q[i].due.Before(l.q[j].due)
}

func (l *Link) push(e entry) {
	l.q = append(l.q, e)
	for i := len(l.q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !l.less(i, parent) {
			break
		}
		l.q[i], l.q[parent] = l.q[parent], l.q[i]
		i = parent
	}
}

func (l *Link) pop() entry {
	top := l.q[0]
	last := len(l.q) - 1
	l.q[0] = l.q[last]
	l.q[last] = entry{}
	l.q = l.q[:last]
	for i := 0; ; {
		a, c, m := 2*i+1, 2*i+2, i
		if a < len(l.q) && l.less(a, m) {
			m = a
		}
		if c < len(l.q) && l.less(c, m) {
			m = c
		}
		if m == i {
			break
		}
		l.q[i], l.q[m] = l.q[m], l.q[i]
		i = m
	}
	return top
}

// Poll is the inner link's Poll (link.Poller), or 0 if it has none.
func (l *Link) Poll() int {
	if p, ok := l.inner.(link.Poller); ok {
		return p.Poll()
	}
	return 0
}

// PollWait is the inner link's PollWait (link.Waiter); ok is false if it
// has none.
func (l *Link) PollWait(timeout time.Duration, ready func() bool) (n int, ok bool) {
	if w, ok := l.inner.(link.Waiter); ok {
		return w.PollWait(timeout, ready)
	}
	return 0, false
}

// Wake is the inner link's Wake (link.Waiter), if it has one.
func (l *Link) Wake() {
	if w, ok := l.inner.(link.Waiter); ok {
		w.Wake()
	}
}

// Up is the inner link's state (link.StateNotifier), or true if it has
// none.
func (l *Link) Up() bool {
	if s, ok := l.inner.(link.StateNotifier); ok {
		return s.Up()
	}
	return true
}

// NotifyState registers f with the inner link (link.StateNotifier), if it
// knows its state.
func (l *Link) NotifyState(f func(up bool)) {
	if s, ok := l.inner.(link.StateNotifier); ok {
		s.NotifyState(f)
	}
}

// ReserveSourcePort passes the reservation to the inner link
// (link.SourcePortReserver), if it takes them.
func (l *Link) ReserveSourcePort(src netip.Addr, port uint16) {
	if r, ok := l.inner.(link.SourcePortReserver); ok {
		r.ReserveSourcePort(src, port)
	}
}

// The interfaces the wrapper forwards.
var (
	_ link.Link               = (*Link)(nil)
	_ link.Waiter             = (*Link)(nil)
	_ link.StateNotifier      = (*Link)(nil)
	_ link.SourcePortReserver = (*Link)(nil)
)
