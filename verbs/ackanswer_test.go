package verbs

import (
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/wire"
)

// setAckHold sets how long ACKs are held for an answer for the rest of
// the test.
func setAckHold(t *testing.T, d time.Duration) {
	old := ackHoldMax.Swap(int64(d))
	t.Cleanup(func() { ackHoldMax.Store(old) })
}

func answers(qp *QP) bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.answers
}

// wantSends fails unless got is exactly want (one []Opcode per link Send).
func wantSends(t testing.TB, who string, got [][]wire.Opcode, want ...[]wire.Opcode) {
	t.Helper()
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("%s sent %v, want %v", who, got, want)
	}
}

// answerPair is heldPair with a WRITE ping-pong's buffers, driven by hand:
// a pump of a stub link delivers its packets as the link's reader would
// (no poll of the application's is receiving).
type answerPair struct {
	*pair
	la, lb *pollStub
	ma, mb *MR
}

func newAnswerPair(t *testing.T, retry uint8) *answerPair {
	p, la, lb := heldPair(t, 14, retry)
	return &answerPair{pair: p, la: la, lb: lb, ma: p.reg(p.pa, 4096), mb: p.reg(p.pb, 4096)}
}

// writeAB and writeBA post a signaled 64-byte WRITE from a to b and from b
// to a.
func (p *answerPair) writeAB(id uint64) {
	post(p.t, p.qa, SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 64)}, RemoteAddr: p.mb.Addr() + 64, RKey: p.mb.RKey()})
}

func (p *answerPair) writeBA(id uint64) {
	post(p.t, p.qb, SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{p.mb.SGE(0, 64)}, RemoteAddr: p.ma.Addr() + 64, RKey: p.ma.RKey()})
}

// completes pumps l (as its reader) and then wants cq's next completion to
// be a successful id.
func (p *answerPair) completes(l *pollStub, cq *CQ, id uint64) {
	p.t.Helper()
	l.pump()
	wc := make([]WC, 1)
	if cq.poll(wc) != 1 || wc[0].Status != Success || wc[0].WRID != id {
		p.t.Fatalf("want WR %d completed, got %+v", id, wc[0])
	}
}

// warm runs one WRITE ping-pong round by hand, which puts both QPs in
// answer mode (each posts right after a receive that called for an ACK).
// Neither held anything yet: each ACK left at once, by itself.
func (p *answerPair) warm() {
	t := p.t
	ack, write := []wire.Opcode{wire.RCAcknowledge}, []wire.Opcode{wire.RCWriteOnly}
	p.la.taken()
	p.lb.taken()
	p.writeAB(1)
	wantSends(t, "a's first post", p.la.taken(), write)
	p.lb.pump()
	wantSends(t, "b's reader", p.lb.taken(), ack)
	p.completes(p.la, p.ca, 1)
	p.writeBA(2)
	wantSends(t, "b's first post", p.lb.taken(), write)
	if !answers(p.qb) {
		t.Fatal("b posted right after a receive and is not in answer mode")
	}
	p.la.pump()
	wantSends(t, "a's reader", p.la.taken(), ack)
	p.completes(p.lb, p.cb, 2)
	p.writeAB(3)
	wantSends(t, "a's second post", p.la.taken(), write)
	if !answers(p.qa) {
		t.Fatal("a posted right after a receive and is not in answer mode")
	}
}

// TestAnswerHold: in answer mode the ACK of a request the reader receives
// is held and leaves behind the QP's next request, in the same link Send;
// the peer's receive of that Send completes its request and places the
// answer, and holds its own ACK in turn. No ACK travels alone.
func TestAnswerHold(t *testing.T) {
	leakcheck.Check(t)
	setAckHold(t, time.Hour)
	p := newAnswerPair(t, 7)
	p.warm()
	both := []wire.Opcode{wire.RCWriteOnly, wire.RCAcknowledge}
	for i := range uint64(20) {
		p.lb.pump() // a's WRITE 3+2i
		wantSends(t, "b's reader", p.lb.taken())
		if !held(p.qb) {
			t.Fatal("b's ACK is not held")
		}
		p.writeBA(4 + 2*i)
		wantSends(t, "b's answer", p.lb.taken(), both)
		p.completes(p.la, p.ca, 3+2*i)
		wantSends(t, "a's reader", p.la.taken())
		p.writeAB(5 + 2*i)
		wantSends(t, "a's answer", p.la.taken(), both)
		p.completes(p.lb, p.cb, 4+2*i)
	}
}

// TestAnswerHoldExpires: a QP in answer mode whose program does not answer
// in time has the held ACK sent by itself (by the timer, or by any
// device's poll once the time has passed), once, and leaves answer mode:
// the requester's WRITE completes with no retry allowed.
func TestAnswerHoldExpires(t *testing.T) {
	for _, by := range []string{"timer", "poll"} {
		t.Run(by, func(t *testing.T) {
			leakcheck.Check(t)
			setAckHold(t, time.Hour)
			p := newAnswerPair(t, 0)
			p.warm()
			p.lb.pump() // a's WRITE 3: held
			if !held(p.qb) {
				t.Fatal("b's ACK is not held")
			}
			answerHolds.mu.Lock() // its time has come
			for i := range answerHolds.q {
				answerHolds.q[i].due = 0
			}
			if by == "timer" {
				answerHolds.t.Reset(time.Millisecond)
			}
			answerHolds.mu.Unlock()
			var sent [][]wire.Opcode
			if by == "timer" {
				// The hold ends under b's lock; the link Send follows
				// it: wait for the Send, not for the hold's end.
				deadline := time.Now().Add(5 * time.Second)
				for len(sent) == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
					sent = p.lb.taken()
				}
				time.Sleep(10 * time.Millisecond) // a second ACK would show
				sent = append(sent, p.lb.taken()...)
			} else {
				p.da.Poll() // a's poll sends b's ACK
				sent = p.lb.taken()
			}
			wantSends(t, "b", sent, []wire.Opcode{wire.RCAcknowledge})
			if answers(p.qb) {
				t.Error("b is still in answer mode")
			}
			p.completes(p.la, p.ca, 3)
			wantSends(t, "a", p.la.taken())
		})
	}
}

// TestAnswerHoldDestroyClose: an ACK held for an answer when its QP is
// destroyed, moved to the error or reset state, or its device closed, is
// sent then (with no retries allowed, a lost ACK would fail the WRITE).
func TestAnswerHoldDestroyClose(t *testing.T) {
	for _, how := range []string{"destroy", "error", "reset", "close"} {
		t.Run(how, func(t *testing.T) {
			leakcheck.Check(t)
			setAckHold(t, time.Hour)
			p := newAnswerPair(t, 0)
			p.warm()
			p.lb.pump()
			if !held(p.qb) {
				t.Fatal("b's ACK is not held")
			}
			if err := endQP(how, p.qb, p.db); err != nil {
				t.Fatal(err)
			}
			if s := p.lb.taken(); len(s) == 0 || s[0][0] != wire.RCAcknowledge {
				t.Fatalf("b sent %v, want its ACK first", s)
			}
			p.completes(p.la, p.ca, 3)
			answerHolds.mu.Lock()
			live := answerHolds.live.Load()
			answerHolds.mu.Unlock()
			if live != 0 {
				t.Errorf("%d holds still counted", live)
			}
		})
	}
}
