// Package clock lets the transport engine read time and arm timers through an
// interface, so tests can drive retransmission and RNR timers by hand.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock is a source of time and timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer armed by AfterFunc.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it was armed.
	Stop() bool
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manual clock for tests: time moves only when Advance is called,
// and due timers fire synchronously, in order, inside Advance.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	seq    uint64
}

// NewFake returns a fake clock starting at a fixed instant.
func NewFake() *Fake { return &Fake{now: time.Unix(1_700_000_000, 0)} }

type fakeTimer struct {
	c     *Fake
	when  time.Time
	seq   uint64
	f     func()
	armed bool
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that fires when Advance passes now+d.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f, armed: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

// Advance moves time forward by d, firing every timer that falls due, in
// order of deadline, with the clock set to each deadline as it fires.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.armed {
				live = append(live, t)
			}
		}
		c.timers = live
		sort.Slice(c.timers, func(i, j int) bool {
			a, b := c.timers[i], c.timers[j]
			if !a.when.Equal(b.when) {
				return a.when.Before(b.when)
			}
			return a.seq < b.seq
		})
		if len(c.timers) == 0 || c.timers[0].when.After(end) {
			break
		}
		t := c.timers[0]
		t.armed = false
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// Pending returns the number of armed timers.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.armed {
			n++
		}
	}
	return n
}
