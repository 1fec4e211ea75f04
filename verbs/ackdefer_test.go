package verbs

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// pollStub is a stubLink that receives only when polled (link.Poller): the
// packets queued for it reach its device on the goroutine that calls
// CQ.Poll or Device.Poll, as with a polling program whose link's reader
// never gets there first. It records what each Send carried.
type pollStub struct {
	*stubLink
	quiet bool // record nothing (allocation tests)
	smu   sync.Mutex
	sends [][]wire.Opcode // the opcodes of each Send's packets
}

func (l *pollStub) Poll() int { return l.pump() }

func (l *pollStub) Send(batch []*link.Packet) error {
	if l.quiet {
		return l.stubLink.Send(batch)
	}
	ops := make([]wire.Opcode, 0, len(batch))
	for _, p := range batch {
		if pkt, err := wire.Parse(p.Data()); err == nil {
			ops = append(ops, pkt.Opcode())
		}
	}
	l.smu.Lock()
	l.sends = append(l.sends, ops)
	l.smu.Unlock()
	return l.stubLink.Send(batch)
}

// taken returns the Sends recorded since the last call.
func (l *pollStub) taken() [][]wire.Opcode {
	l.smu.Lock()
	defer l.smu.Unlock()
	s := l.sends
	l.sends = nil
	return s
}

// heldPair is an RC pair on poll-only stub links.
func heldPair(t *testing.T, timeout, retry uint8) (*pair, *pollStub, *pollStub) {
	t.Helper()
	sa, sb := newStubLinks()
	la, lb := &pollStub{stubLink: sa}, &pollStub{stubLink: sb}
	da, err := Open(la, &Options{Name: "held_a"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(lb, &Options{Name: "held_b"})
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	p := &pair{t: t, da: da, db: db}
	p.connect(pairOpts{mtu: MTU1024, wr: 16, timeout: timeout, retry: retry})
	return p, la, lb
}

// pollFor polls cq until it yields a completion or 5 s pass.
func pollFor(t *testing.T, cq *CQ) WC {
	t.Helper()
	wc := make([]WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for cq.Poll(wc) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no completion in 5 s")
		}
		runtime.Gosched()
	}
	return wc[0]
}

func held(qp *QP) bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.ackHeld
}

// TestHeldAckRidesWithAnswer runs SEND ping-pongs on links that receive
// only when polled. The poll that receives a request sends nothing: the
// ACK it calls for is held, and leaves in the same link Send as the
// answer the program then posts, behind it (one segmented datagram on UDP).
// The peer's SEND completes on that ACK, and before the answer's receive
// on their shared CQ: the receive path handles a QP's responses before its
// requests. With one P the pacer (which would send a held ACK the
// program leaves) cannot run between the poll and the post; rounds where
// it did anyway are not counted, and 20 must be.
func TestHeldAckRidesWithAnswer(t *testing.T) {
	leakcheck.Check(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p, la, lb := heldPair(t, 14, 7)
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	counted := 0
	for round := 0; counted < 20; round++ {
		if round == 200 {
			t.Fatalf("only %d of 200 rounds found the ACK held at the post", counted)
		}
		postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}})
		postRecv(t, p.qa, RecvWR{ID: 2, SGL: []SGE{ma.SGE(1024, 64)}})
		la.taken()
		post(t, p.qa, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
		if got := la.taken(); len(got) != 1 || len(got[0]) != 1 || got[0][0] != wire.RCSendOnly {
			t.Fatalf("a's post sent %v, want one SEND_ONLY", got)
		}
		lb.taken()
		if wc := pollFor(t, p.cb); wc.Status != Success || wc.Opcode != WCRecv {
			t.Fatalf("b's completion %+v", wc)
		}
		sentByPoll := lb.taken()
		wasHeld := held(p.qb)
		post(t, p.qb, SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mb.SGE(0, 64)}})
		sentByPost := lb.taken()
		if wasHeld {
			counted++
			// (A retransmission by b's timer may leave meanwhile on a
			// slow machine; an ACK may not.)
			for _, s := range sentByPoll {
				if slices.Contains(s, wire.RCAcknowledge) {
					t.Fatalf("b's poll sent %v with the ACK held", sentByPoll)
				}
			}
			if len(sentByPost) != 1 || len(sentByPost[0]) != 2 || sentByPost[0][0] != wire.RCSendOnly || sentByPost[0][1] != wire.RCAcknowledge {
				t.Fatalf("b's post sent %v, want one Send of [SEND_ONLY ACK]", sentByPost)
			}
			// Both reach a in one batch: its SEND completes first.
			if wc := pollFor(t, p.ca); wc.Status != Success || wc.WRID != 3 || wc.Opcode != WCSend {
				t.Fatalf("a's first completion %+v, want its SEND's", wc)
			}
			if wc := pollFor(t, p.ca); wc.Status != Success || wc.WRID != 2 || wc.Opcode != WCRecv {
				t.Fatalf("a's second completion %+v, want the answer's receive", wc)
			}
		} else {
			// a sees its SEND acknowledged and b's answer, in either order.
			for range 2 {
				wc := pollFor(t, p.ca)
				if wc.Status != Success || (wc.WRID != 2 || wc.Opcode != WCRecv) && (wc.WRID != 3 || wc.Opcode != WCSend) {
					t.Fatalf("a's completion %+v", wc)
				}
			}
		}
		// b's own SEND is acknowledged by a's polls (held, then sent by
		// the next poll or the pacer).
		if wc := pollFor(t, p.cb); wc.Status != Success || wc.WRID != 4 || wc.Opcode != WCSend {
			t.Fatalf("b's send completion %+v", wc)
		}
	}
}

// TestHeldAckLeftByProgram: a program that polls a request in and then
// leaves the device alone still has it acknowledged (by the pacer), once:
// the requester's SEND completes without a retry.
func TestHeldAckLeftByProgram(t *testing.T) {
	leakcheck.Check(t)
	p, la, lb := heldPair(t, 14, 0)
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}})
	post(t, p.qa, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
	if wc := pollFor(t, p.cb); wc.Status != Success || wc.Opcode != WCRecv {
		t.Fatalf("b's completion %+v", wc)
	}
	// Nothing more from b's program: a's polls must find the ACK.
	if wc := pollFor(t, p.ca); wc.Status != Success || wc.WRID != 3 {
		t.Fatalf("a's completion %+v", wc)
	}
	acks := 0
	for _, s := range lb.taken() {
		for _, op := range s {
			if op != wire.RCAcknowledge {
				t.Fatalf("b sent %v", op)
			}
			acks++
		}
	}
	if acks != 1 {
		t.Errorf("b sent %d ACKs, want 1", acks)
	}
	if got := la.taken(); len(got) != 1 || len(got[0]) != 1 {
		t.Errorf("a sent %v, want its SEND once (no retry)", got)
	}
}

// endQP ends qp's part in answering as how says: "destroy" destroys it,
// "error" and "reset" move it to that state, "close" closes its device d.
func endQP(how string, qp *QP, d *Device) error {
	switch how {
	case "destroy":
		return qp.Destroy()
	case "error":
		return qp.Modify(&QPAttr{State: StateErr}, AttrState)
	case "reset":
		return qp.Modify(&QPAttr{State: StateReset}, AttrState)
	}
	return d.Close()
}

// TestHeldAckDestroyClose: an ACK held when its QP is destroyed, moved to
// the error or reset state (rdma_disconnect's modify, say), or its device
// closed, is sent then, not dropped: the requester's SEND
// completes successfully (with no retries allowed, a lost ACK would fail
// it with RETRY_EXC_ERR). With one P the pacer cannot send it first; a
// run where it did anyway says so and proves nothing, so the test looks
// for the ACK held before it destroys or closes.
func TestHeldAckDestroyClose(t *testing.T) {
	for _, how := range []string{"destroy", "error", "reset", "close"} {
		t.Run(how, func(t *testing.T) {
			leakcheck.Check(t)
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			p, _, _ := heldPair(t, 8, 0)
			ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
			postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}})
			post(t, p.qa, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
			if wc := pollFor(t, p.cb); wc.Status != Success || wc.Opcode != WCRecv {
				t.Fatalf("b's completion %+v", wc)
			}
			if !held(p.qb) {
				t.Fatal("the ACK was not held after the poll (the pacer ran first)")
			}
			if err := endQP(how, p.qb, p.db); err != nil {
				t.Fatal(err)
			}
			if wc := pollFor(t, p.ca); wc.Status != Success || wc.WRID != 3 {
				t.Fatalf("a's completion %+v, want success", wc)
			}
		})
	}
}

// TestHeldAckAllocs: a SEND ping-pong whose ACKs are held and ride with
// the answers allocates nothing once warm.
func TestHeldAckAllocs(t *testing.T) {
	if raceEnabled() {
		t.Skip("sync.Pool drops items under the race detector")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p, la, lb := heldPair(t, 14, 7)
	la.quiet, lb.quiet = true, true
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	ra := []RecvWR{{ID: 2, SGL: []SGE{ma.SGE(1024, 64)}}}
	rb := []RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 64)}}}
	sa := []SendWR{{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}}}
	sb := []SendWR{{ID: 4, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mb.SGE(0, 64)}}}
	wc := make([]WC, 4)
	var failed string
	wait := func(cq *CQ, n int) {
		for got, spins := 0, 0; got < n; spins++ {
			got += cq.Poll(wc[:n-got])
			if spins > 1_000_000 {
				failed = "no completion"
				return
			}
		}
	}
	round := func() {
		if p.qb.PostRecv(rb) != nil || p.qa.PostRecv(ra) != nil || p.qa.PostSend(sa) != nil {
			failed = "post failed"
			return
		}
		wait(p.cb, 1)
		if p.qb.PostSend(sb) != nil {
			failed = "post failed"
			return
		}
		wait(p.ca, 2)
		wait(p.cb, 1)
	}
	for range 20 {
		round()
	}
	if a := testing.AllocsPerRun(200, round); a > 0 {
		t.Errorf("%v allocations per round", a)
	}
	if failed != "" {
		t.Fatal(failed)
	}
}

// TestDestroySendsLeftAcks: of the packets a post left for the pacer, a
// QP's Destroy sends the acknowledgements (a post releases a held ACK into
// them) and drops the requests, which die with the QP's work requests.
func TestDestroySendsLeftAcks(t *testing.T) {
	p := newPair(t, pairOpts{})
	qb := p.qb
	qb.mu.Lock()
	req := link.Get()
	hl, err := wire.WriteHeaders(req.Buf, &wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, DestQP: qb.attr.DestQPN}}, 0)
	if err != nil {
		qb.mu.Unlock()
		t.Fatal(err)
	}
	qb.finishPacketLocked(req, hl, 0)
	qb.queueLocked(req)
	qb.sendAckLocked(wire.SyndromeACKUnlimited, qb.resp.psn.Add(-1))
	if len(qb.out) != 2 || !isAcknowledge(qb.out[1]) || isAcknowledge(qb.out[0]) {
		qb.mu.Unlock()
		t.Fatalf("left for the pacer: %d packets, want a request and an ACK", len(qb.out))
	}
	qb.mu.Unlock() // as unlockDeferred leaves them
	before := p.db.Link().Stats().TxPackets
	if err := qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if sent := p.db.Link().Stats().TxPackets - before; sent != 1 {
		t.Errorf("Destroy sent %d packets, want the ACK alone", sent)
	}
}
