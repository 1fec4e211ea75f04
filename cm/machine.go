// The machinery under a Conn: state checks, sending, the retransmission
// and time-wait timers, removal from the Manager's tables, and the events
// collected under the lock and delivered after it.

package cm

import "time"

func (c *Conn) checkLocked(ok ...State) error {
	if c.m.closed || c.state == stateClosed || c.destroyed {
		return errf(ErrClosed, "conn")
	}
	for _, s := range ok {
		if c.state == s {
			return nil
		}
	}
	return errf(ErrState, "conn in state %v", c.state)
}

func (m *Manager) sendLocked(p Path, b []byte) {
	// Sending takes sendMu, never mu: safe under mu.
	m.send(p, b)
}

// startRequestLocked sends c.msg and arms the retransmission timer.
func (c *Conn) startRequestLocked(wait time.Duration) {
	c.retries = 0
	c.wait = wait
	c.m.sendLocked(c.path, c.msg[:])
	c.armLocked(wait)
}

func (c *Conn) armLocked(d time.Duration) {
	c.stopTimerLocked()
	c.gen++
	gen := c.gen
	m := c.m
	m.wg.Add(1)
	c.timer = time.AfterFunc(d, func() {
		defer m.wg.Done()
		m.onTimer(c, gen)
	})
}

func (c *Conn) stopTimerLocked() {
	if c.timer != nil {
		if c.timer.Stop() {
			c.m.wg.Done()
		}
		c.timer = nil
	}
	c.gen++
}

func (c *Conn) removeLocked() {
	c.stopTimerLocked()
	c.state = stateClosed
	m := c.m
	if m.conns[c.localID] == c {
		delete(m.conns, c.localID)
	}
	if c.inRemote && m.remote[c.rkey] == c {
		delete(m.remote, c.rkey)
	}
}

func (c *Conn) enterTimeWaitLocked() {
	c.stopTimerLocked()
	c.state = StateTimeWait
	d := c.m.opts.TimeWait
	if d == 0 {
		d = timeoutOf(c.ackTO)
	}
	c.armLocked(d)
}

// deliveries collects events to hand out once the lock is released.
type deliveries []delivery

type delivery struct {
	h  Handler
	c  *Conn
	ev *Event
}

func (ds *deliveries) add(c *Conn, h Handler, ev *Event) {
	if h == nil {
		h = c.handler
	}
	if h == nil || c.destroyed {
		return
	}
	*ds = append(*ds, delivery{h, c, ev})
}

func (ds deliveries) run() {
	for _, d := range ds {
		d.h(d.c, d.ev)
	}
}
