// Asynchronous events, each provoked by its real condition: CQ overflow (and
// the fatal error of the QP whose completion was lost), responder access and
// request errors, the SRQ limit, the last WQE of a QP with an SRQ, and the
// send queue drained, and the port going down and up (a loop link taken
// down).

package verbs

import (
	"testing"
	"testing/synctest"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

func TestEventCQOverflow(t *testing.T) {
	p := newPair(t, pairOpts{cqe: 2})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	write := func(id uint64) SendWR {
		return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()}
	}
	// Four signaled completions for a CQ of two, none polled.
	post(t, p.qa, write(1), write(2), write(3), write(4))

	ev := expectEvent(t, p.da, EventCQErr)
	if ev.CQ != p.ca {
		t.Fatal("CQ error event for the wrong CQ")
	}
	// The QP whose completion was lost cannot go on (IBTA 11.6.3: local
	// work queue catastrophic error) and is in the error state.
	if ev := expectEvent(t, p.da, EventQPFatal); ev.QP != p.qa {
		t.Fatal("QP fatal event for the wrong QP")
	}
	expectState(t, p.qa, StateErr)
	expectNoEvent(t, p.da) // one CQ error per overflow

	// The two completions that fit are intact.
	wc := waitWC(t, p.ca, 2, waitFor)
	checkWC(t, wc[0], 1, Success, WCRDMAWrite)
	checkWC(t, wc[1], 2, Success, WCRDMAWrite)
	expectNoWC(t, p.ca)

	// The send queue's bookkeeping survived: with room in the CQ again, a
	// request posted in the error state is flushed, exactly once.
	post(t, p.qa, write(5))
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 5, WRFlushErr, WCRDMAWrite)
	expectNoWC(t, p.ca)
	a, _ := p.qa.Query()
	if a.State != StateErr {
		t.Fatalf("state %v", a.State)
	}
	// And the QP recovers through RESET.
	if err := p.qa.Modify(&QPAttr{State: StateReset}, AttrState); err != nil {
		t.Fatal(err)
	}
	if err := p.qb.Modify(&QPAttr{State: StateReset}, AttrState); err != nil {
		t.Fatal(err)
	}
	p.bringUp(p.qa, p.db, p.qb, 100, 200)
	p.bringUp(p.qb, p.da, p.qa, 200, 100)
	post(t, p.qa, write(6))
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 6, Success, WCRDMAWrite)
}

func TestEventCQOverflowOnReceive(t *testing.T) {
	// The responder's receive CQ overflows: its QP gets the fatal event.
	p := newPair(t, pairOpts{cqe: 1})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}}, RecvWR{ID: 2, SGL: []SGE{mb.SGE(64, 64)}})
	post(t, p.qa, SendWR{ID: 10, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 8)}},
		SendWR{ID: 11, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 8)}})
	if ev := expectEvent(t, p.db, EventCQErr); ev.CQ != p.cb {
		t.Fatal("CQ error event for the wrong CQ")
	}
	if ev := expectEvent(t, p.db, EventQPFatal); ev.QP != p.qb {
		t.Fatal("QP fatal event for the wrong QP")
	}
	expectState(t, p.qb, StateErr)
	checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 1, Success, WCRecv)
}

func TestEventQPAccessErr(t *testing.T) {
	// An R_Key violation at the responder: IBTA's local access violation
	// work queue error, on the responder's device, for its QP.
	p := newPair(t, pairOpts{})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)},
		RemoteAddr: mb.Addr(), RKey: mb.RKey() ^ 0x80})
	ev := expectEvent(t, p.db, EventQPAccessErr)
	if ev.QP != p.qb || ev.CQ != nil || ev.SRQ != nil {
		t.Fatalf("event %+v, want one for the responder's QP", ev)
	}
	expectState(t, p.qb, StateErr)
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemAccessErr, WCRDMAWrite)
	// The requester gets a completion, not an event.
	expectNoEvent(t, p.da)
	expectNoEvent(t, p.db)
}

func TestEventQPReqErr(t *testing.T) {
	// An invalid request at the responder (a SEND longer than its receive
	// buffer): IBTA's invalid request local work queue error.
	p := newPair(t, pairOpts{})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 16)}})
	post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 17)}})
	if ev := expectEvent(t, p.db, EventQPReqErr); ev.QP != p.qb {
		t.Fatal("event for the wrong QP")
	}
	expectState(t, p.qb, StateErr)
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemInvReqErr, WCSend)
	expectNoEvent(t, p.da)
	expectNoEvent(t, p.db)
}

func TestEventSRQLimitReached(t *testing.T) {
	p := newPair(t, pairOpts{srq: 16})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	for i := range 5 {
		if err := p.sb.PostRecv([]RecvWR{{ID: uint64(i), SGL: []SGE{mb.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Arm the limit at 4: the event fires when fewer than 4 remain.
	if err := p.sb.Modify(SRQAttr{SRQLimit: 4}, SRQLimit); err != nil {
		t.Fatal(err)
	}
	if got := p.sb.Query().SRQLimit; got != 4 {
		t.Fatalf("SRQ limit %d after Modify", got)
	}
	send := func(id uint64) {
		t.Helper()
		post(t, p.qa, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8)}})
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], id, Success, WCSend)
		checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], id-100, Success, WCRecv)
	}
	send(100) // 4 left: not below the limit
	expectNoEvent(t, p.db)
	send(101) // 3 left
	ev := expectEvent(t, p.db, EventSRQLimitReached)
	if ev.SRQ != p.sb || ev.QP != nil {
		t.Fatalf("event %+v, want one for the SRQ", ev)
	}
	// The event disarms the limit.
	if got := p.sb.Query().SRQLimit; got != 0 {
		t.Fatalf("SRQ limit %d after the event, want 0 (disarmed)", got)
	}
	send(102)
	expectNoEvent(t, p.db)
	// Re-armed above the current count, it fires on the next receive.
	if err := p.sb.Modify(SRQAttr{SRQLimit: 3}, SRQLimit); err != nil {
		t.Fatal(err)
	}
	send(103)
	if ev := expectEvent(t, p.db, EventSRQLimitReached); ev.SRQ != p.sb {
		t.Fatal("event for the wrong SRQ")
	}
	expectNoEvent(t, p.da)
}

func TestEventLastWQEReached(t *testing.T) {
	p := newPair(t, pairOpts{srq: 8})
	mb := p.reg(p.pb, 4096)
	if err := p.sb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 64)}}, {ID: 2, SGL: []SGE{mb.SGE(64, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.qb.Modify(&QPAttr{State: StateErr}, AttrState); err != nil {
		t.Fatal(err)
	}
	if ev := expectEvent(t, p.db, EventQPLastWQEReached); ev.QP != p.qb {
		t.Fatal("event for the wrong QP")
	}
	expectNoEvent(t, p.db)
	// The SRQ's receives belong to every QP sharing it: none is flushed.
	expectNoWC(t, p.cb)
	p.sb.mu.Lock()
	n := p.sb.rq.count()
	p.sb.mu.Unlock()
	if n != 2 {
		t.Fatalf("SRQ holds %d receives, want 2", n)
	}
	// ERR -> ERR is no new transition to the error state: no new event.
	if err := p.qb.Modify(&QPAttr{State: StateErr}, AttrState); err != nil {
		t.Fatal(err)
	}
	expectNoEvent(t, p.db)
	// An error the engine detects raises it too (here a local protection
	// error on the other QP, which also has an SRQ), after the completion.
	ma := p.reg(p.pa, 4096)
	bad := ma.SGE(0, 8)
	bad.LKey = ^bad.LKey
	post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, SGL: []SGE{bad}})
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, LocProtErr, WCSend)
	if ev := expectEvent(t, p.da, EventQPLastWQEReached); ev.QP != p.qa {
		t.Fatal("event for the wrong QP")
	}
	expectNoEvent(t, p.da)
}

func TestEventSQDrained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ma, mb := p.reg(p.pa, 1<<16), p.reg(p.pb, 1<<16)
		w := p.tap()
		// The responder is unreachable while the first two requests go out,
		// so they are outstanding when the QP is asked to drain.
		w.setDrop(func(*tapped) bool { return true })
		write := func(id uint64, off int) SendWR {
			return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(off, 3000)},
				RemoteAddr: mb.Addr() + uint64(off), RKey: mb.RKey()}
		}
		for i := range 3 * 3000 {
			ma.Buf()[i] = byte(i*7 + 1)
		}
		post(t, p.qa, write(1, 0), write(2, 3000))
		reqs := w.all(both(from(p.da), isRequest))
		lastPSN := reqs[len(reqs)-1].psn
		if err := p.qa.Modify(&QPAttr{State: StateSQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify); err != nil {
			t.Fatal(err)
		}
		a, _ := p.qa.Query()
		if a.State != StateSQD || !a.SQDraining || !a.EnSQDAsyncNotify {
			t.Fatalf("after RTS->SQD: state %v draining %v notify %v", a.State, a.SQDraining, a.EnSQDAsyncNotify)
		}
		// Posting is allowed in SQD, but nothing new starts.
		post(t, p.qa, write(3, 6000))
		if n := len(w.all(both(from(p.da), isRequest))); n != len(reqs) {
			t.Fatalf("%d requests sent, want %d: the one posted in SQD went out", n, len(reqs))
		}
		expectNoEvent(t, p.da)
		expectNoWC(t, p.ca)

		// The network heals; the ACK timeout retransmits what is outstanding.
		w.setDrop(nil)
		advance(wire.ACKTimeout(p.opts.timeout))
		ev := expectEvent(t, p.da, EventSQDrained)
		if ev.QP != p.qa {
			t.Fatal("event for the wrong QP")
		}
		// Both outstanding requests completed before the event was raised.
		var wc [4]WC
		if n := p.ca.Poll(wc[:]); n != 2 {
			t.Fatalf("%d completions when drained, want 2: %+v", n, wc[:n])
		}
		checkWC(t, wc[0], 1, Success, WCRDMAWrite)
		checkWC(t, wc[1], 2, Success, WCRDMAWrite)
		a, _ = p.qa.Query()
		if a.State != StateSQD || a.SQDraining {
			t.Fatalf("drained: state %v draining %v", a.State, a.SQDraining)
		}
		// The third request never left: only the first two were retransmitted.
		for _, tp := range w.all(both(from(p.da), isRequest)) {
			if tp.psn.After(lastPSN) {
				t.Fatalf("a request posted in SQD was sent: %+v", tp)
			}
		}
		if string(mb.Buf()[6000:9000]) == string(ma.Buf()[6000:9000]) {
			t.Fatal("the request posted in SQD was executed")
		}
		expectNoEvent(t, p.da)

		// Back to RTS: the third request goes.
		if err := p.qa.Modify(&QPAttr{State: StateRTS}, AttrState); err != nil {
			t.Fatal(err)
		}
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 3, Success, WCRDMAWrite)
		if string(mb.Buf()[:9000]) != string(ma.Buf()[:9000]) {
			t.Fatal("remote memory differs")
		}
		expectNoEvent(t, p.da)
	})
}

func TestEventSQDrainedWithoutNotify(t *testing.T) {
	// Without EnSQDAsyncNotify the drain is silent; with it and nothing
	// outstanding, the event comes at once.
	p := newPair(t, pairOpts{})
	if err := p.qa.Modify(&QPAttr{State: StateSQD}, AttrState); err != nil {
		t.Fatal(err)
	}
	expectState(t, p.qa, StateSQD)
	expectNoEvent(t, p.da)
	if err := p.qb.Modify(&QPAttr{State: StateSQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	if ev := expectEvent(t, p.db, EventSQDrained); ev.QP != p.qb {
		t.Fatal("event for the wrong QP")
	}
}

// portState returns port 1's state.
func portState(t *testing.T, d *Device) PortState {
	t.Helper()
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return pa.State
}

// TestEventPort takes the requester's link down and up again, as a cable
// pulled and plugged back: the port goes DOWN with EventPortErr and ACTIVE
// with EventPortActive; the QP stays in RTS (as with rxe), a SEND posted
// while the port is down is retried and completes once it is up, and one
// posted while it stays down past the retry budget fails with
// RETRY_EXC_ERR.
func TestEventPort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, pairOpts{retry: 3, timeout: 12})
		ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
		la := p.da.Link().(*loop.Link)
		if s := portState(t, p.da); s != PortActive {
			t.Fatalf("port %v at open, want ACTIVE", s)
		}
		la.SetUp(false)
		if ev := expectEvent(t, p.da, EventPortErr); ev.Port != 1 || ev.QP != nil {
			t.Fatalf("event %+v, want port 1", ev)
		}
		la.SetUp(false) // no change, no event
		expectNoEvent(t, p.da)
		expectNoEvent(t, p.db)
		if s := portState(t, p.da); s != PortDown {
			t.Fatalf("port %v while the link is down, want DOWN", s)
		}
		postRecv(t, p.qb, RecvWR{ID: 7, SGL: []SGE{mb.SGE(0, 4096)}})
		post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}})
		timeout := wire.ACKTimeout(12)
		advance(timeout) // one retry, lost too
		expectNoWC(t, p.ca)
		expectState(t, p.qa, StateRTS)

		la.SetUp(true)
		if ev := expectEvent(t, p.da, EventPortActive); ev.Port != 1 {
			t.Fatalf("event %+v, want port 1", ev)
		}
		if s := portState(t, p.da); s != PortActive {
			t.Fatalf("port %v after the link came back, want ACTIVE", s)
		}
		advance(timeout)
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCSend)
		checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 7, Success, WCRecv)

		la.SetUp(false)
		expectEvent(t, p.da, EventPortErr)
		post(t, p.qa, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}})
		for range 4 { // retry_cnt 3: the fourth timeout ends it
			advance(timeout)
		}
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 2, RetryExcErr, WCSend)
		expectState(t, p.qa, StateErr)
		expectNoEvent(t, p.da) // RETRY_EXC_ERR raises no async event
	})
}
