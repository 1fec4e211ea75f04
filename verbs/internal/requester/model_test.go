package requester

import (
	"fmt"
	"slices"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// The model tests run a requester Core against a model RC responder over a
// network that a script of operations drops, duplicates and reorders, with
// timers fired at will. Whatever the script did, a clean network afterwards
// must complete every work request successfully, exactly once, in order,
// with every READ byte placed exactly once with the right data and every
// atomic's result delivered once.

// response is a packet from the model responder.
type response struct {
	kind   uint8 // respAck, respAtomic or respRead
	syn    wire.Syndrome
	psn    wire.PSN
	orig   uint64
	seq    uint64 // READ: the work request, for the payload's pattern
	off, n int    // READ: the bytes of the message it carries
	last   bool
}

const (
	respAck = iota
	respAtomic
	respRead
)

// posted is what the model knows of a work request.
type posted struct {
	class  Class
	length int
}

// world is a requester, its network and the model responder.
type world struct {
	t     testing.TB
	r     *rec
	wrs   []posted
	now   int64
	toRsp []Packet   // requests in flight, oldest first
	toReq []response // responses in flight, oldest first
	fatal bool

	// The model responder (IBTA 9.7.5: in-order execution, one NAK per
	// missing PSN, duplicates answered from what was executed).
	ePSN     wire.PSN
	nakSent  bool
	rnrNext  bool                // NAK the next new SEND with RNR, once
	atomics  map[wire.PSN]uint64 // executed atomics' results by PSN
	placed   map[[2]int]int      // (seq, off) -> times placed
	timers   int
	maxTimer int
	budget   *budget // shared allowance, held by this requester alone
}

// modelBudget is the model requester's budget: small, so that it gates
// (smaller than a READ of the workload).
const modelBudget = 2

func origOf(seq uint64) uint64 { return seq*1000 + 7 }

func payloadByte(seq uint64, off int) byte { return byte(seq*31 + uint64(off/mtu)) }

func newWorld(t testing.TB, depth int) *world {
	b := &budget{avail: modelBudget}
	cfg := Config{Transport: RC, MTU: mtu, MaxRdAtomic: 2, RetryCnt: 7, RNRRetry: 7, ACKTimeout: timeout, Budget: b}
	w := &world{t: t, atomics: map[wire.PSN]uint64{}, placed: map[[2]int]int{}, ePSN: psn0, maxTimer: 5, budget: b}
	w.r = newRec(t, depth, cfg)
	w.r.c.SetPSN(psn0)
	w.r.check = w.checkPacket
	return w
}

// checkPacket checks each request the core transmits against its state.
func (w *world) checkPacket(p *Packet) {
	c := w.r.c
	if w.fatal {
		w.t.Errorf("transmitted PSN %v after a fatal error", p.PSN)
	}
	if p.PSN.Before(c.AckedPSN()) || !p.PSN.Before(c.next) {
		w.t.Errorf("transmitted PSN %v outside [%v, %v)", p.PSN, c.AckedPSN(), c.next)
	}

	if c.rdAtomic > max(c.cfg.MaxRdAtomic, 1) {
		w.t.Errorf("%d READ/atomic requests outstanding", c.rdAtomic)
	}
	if p.Seq >= uint64(len(w.wrs)) {
		w.t.Fatalf("transmitted work request %d of %d", p.Seq, len(w.wrs))
	}
	w.toRsp = append(w.toRsp, *p)
}

// checkHeld: the budget held is one packet per PSN from ackedPSN to sentTo
// at most (less after an idle requester released it).
func (w *world) checkHeld() {
	c := w.r.c
	if d := int(c.sentTo.Diff(c.ackedPSN)); c.held > max(d, 0) {
		w.t.Fatalf("holds %d of the budget for PSNs [%v, %v)", c.held, c.ackedPSN, c.sentTo)
	}
}

func (w *world) post(class Class, length int) {
	if w.r.c.Outstanding() == w.r.c.Depth() {
		return
	}
	if class == Atomic {
		length = 8
	}
	w.wrs = append(w.wrs, posted{class, length})
	w.r.c.Post(class, length, false)
	w.r.c.Progress(w.now, Run)
}

// respond is the model responder receiving request p.
func (w *world) respond(p Packet) {
	wr := w.wrs[p.Seq]
	switch {
	case p.PSN.After(w.ePSN):
		if !w.nakSent {
			w.nakSent = true
			w.toReq = append(w.toReq, response{kind: respAck, syn: wire.NAKSyndrome(wire.NAKPSNSequence), psn: w.ePSN})
		}
	case p.PSN == w.ePSN:
		w.nakSent = false
		switch wr.class {
		case Send, Write:
			if w.rnrNext && wr.class == Send && p.First {
				w.rnrNext = false
				w.toReq = append(w.toReq, response{kind: respAck, syn: wire.RNRSyndrome(1), psn: p.PSN})
				return
			}
			w.ePSN = w.ePSN.Add(1)
			if p.AckReq {
				w.toReq = append(w.toReq, response{kind: respAck, syn: ack, psn: p.PSN})
			}
		case Read:
			w.answerRead(p, wr)
			w.ePSN = w.ePSN.Add(packetsFor(p.ReadLen, mtu))
		case Atomic:
			w.atomics[p.PSN] = origOf(p.Seq)
			w.toReq = append(w.toReq, response{kind: respAtomic, psn: p.PSN, orig: origOf(p.Seq)})
			w.ePSN = w.ePSN.Add(1)
		}
	default: // a duplicate
		switch wr.class {
		case Send, Write:
			w.toReq = append(w.toReq, response{kind: respAck, syn: ack, psn: w.ePSN.Add(-1)})
		case Read:
			w.answerRead(p, wr)
		case Atomic:
			if orig, ok := w.atomics[p.PSN]; ok {
				w.toReq = append(w.toReq, response{kind: respAtomic, psn: p.PSN, orig: orig})
			}
		}
	}
}

// answerRead queues the responses to a READ request for its range.
func (w *world) answerRead(p Packet, wr posted) {
	if p.ReadOff+p.ReadLen > wr.length {
		w.t.Fatalf("READ request %+v beyond the message's %d bytes", p, wr.length)
	}
	k := packetsFor(p.ReadLen, mtu)
	for j := range k {
		off := p.ReadOff + j*mtu
		n := min(p.ReadLen-j*mtu, mtu)
		w.toReq = append(w.toReq, response{kind: respRead, psn: p.PSN.Add(j), seq: p.Seq, off: off, n: n, last: j == k-1})
	}
}

// deliver gives response x to the requester.
func (w *world) deliver(x response) {
	c := w.r.c
	switch x.kind {
	case respAck:
		c.Ack(w.now, Run, x.syn, x.psn)
	case respAtomic:
		c.AtomicAck(w.now, Run, x.psn, x.orig)
	case respRead:
		pl := make([]byte, x.n)
		for i := range pl {
			pl[i] = payloadByte(x.seq, x.off)
		}
		c.ReadResponse(w.now, Run, x.psn, pl, x.last)
	}
}

// fireTimers advances time to the next timer and fires it.
func (w *world) fireTimers() {
	c := w.r.c
	w.timers++
	if c.Mode() == RNRWait {
		w.now += w.r.rnr
		c.RNRTimer(w.now, Run)
		return
	}
	if d := c.Deadline(); d > w.now {
		w.now = d
	}
	c.Timer(w.now, Run)
}

// step runs one scripted operation; b and arg are script bytes.
func (w *world) step(b, arg byte) {
	switch b % 9 {
	case 0: // deliver the oldest request
		if len(w.toRsp) > 0 {
			p := w.toRsp[0]
			w.toRsp = w.toRsp[1:]
			w.respond(p)
		}
	case 1: // lose it
		if len(w.toRsp) > 0 {
			w.toRsp = w.toRsp[1:]
		}
	case 2: // deliver a copy of it, keeping it
		if len(w.toRsp) > 0 {
			w.respond(w.toRsp[0])
		}
	case 3: // deliver the oldest response
		if len(w.toReq) > 0 {
			x := w.toReq[0]
			w.toReq = w.toReq[1:]
			w.deliver(x)
		}
	case 4: // lose it
		if len(w.toReq) > 0 {
			w.toReq = w.toReq[1:]
		}
	case 5: // deliver a later response first
		if len(w.toReq) > 0 {
			i := int(arg) % len(w.toReq)
			x := w.toReq[i]
			w.toReq = slices.Delete(w.toReq, i, i+1)
			w.deliver(x)
		}
	case 6: // a timer fires
		if w.timers < w.maxTimer {
			w.fireTimers()
		}
	case 7: // post a work request
		classes := [...]Class{Send, Write, Read, Atomic}
		w.post(classes[arg%4], int(arg/4)%5*mtu+int(arg)%3)
	case 8: // the responder is not ready for the next SEND
		w.rnrNext = true
	}
}

// drain runs a clean network until every work request has retired, and
// checks the outcome.
func (w *world) drain() {
	c := w.r.c
	w.rnrNext = false
	for i := 0; c.Outstanding() > 0; i++ {
		if i > 10000 {
			var st []string
			for i := c.head; i != c.tail; i++ {
				q := c.at(i)
				st = append(st, fmt.Sprintf("%d: %+v", i, *q))
			}
			w.t.Fatalf("no completion after %d clean rounds: mode %v, acked %v, psn %v, next %v, sent to %v, cur %d; outstanding %v; posted %v",
				i, c.Mode(), c.AckedPSN(), c.PSN(), c.next, c.sentTo, c.cur, st, w.wrs)
		}
		switch {
		case len(w.toRsp) > 0:
			p := w.toRsp[0]
			w.toRsp = w.toRsp[1:]
			w.respond(p)
		case len(w.toReq) > 0:
			x := w.toReq[0]
			w.toReq = w.toReq[1:]
			w.deliver(x)
		default:
			w.fireTimers()
		}
	}
	if len(w.r.ret) != len(w.wrs) {
		w.t.Fatalf("%d of %d work requests retired", len(w.r.ret), len(w.wrs))
	}
	if w.budget.avail != modelBudget {
		w.t.Fatalf("budget %d after every request retired, want %d back", w.budget.avail, modelBudget)
	}
	for i, x := range w.r.ret {
		if x.st != Success {
			w.t.Fatalf("work request %d (%+v) completed %v", i, w.wrs[i], x.st)
		}
	}
	for seq, wr := range w.wrs {
		switch wr.class {
		case Read:
			for off := 0; off < wr.length; off += mtu {
				if n := w.placed[[2]int{seq, off}]; n != 1 {
					w.t.Fatalf("READ %d: byte %d placed %d times", seq, off, n)
				}
			}
		case Atomic:
			if got := w.r.orig[uint64(seq)]; got != origOf(uint64(seq)) {
				w.t.Fatalf("atomic %d delivered %d, want %d", seq, got, origOf(uint64(seq)))
			}
		}
	}
}

// run plays script on a fresh world after posting workload.
func run(t testing.TB, workload []posted, script []byte) {
	w := newWorld(t, 8)
	w.r.place = func(seq uint64, off int, payload []byte) {
		for _, b := range payload {
			if b != payloadByte(seq, off) {
				t.Fatalf("READ %d: wrong data placed at %d", seq, off)
			}
		}
		w.placed[[2]int{int(seq), off}]++
	}
	for _, p := range workload {
		w.post(p.class, p.length)
	}
	for i := 0; i+1 < len(script); i += 2 {
		w.step(script[i], script[i+1])
		w.checkHeld()
		if w.r.fatal > 0 {
			t.Fatalf("fatal error during the script: retired %v", w.r.ret)
		}
	}
	w.drain()
}

// TestModelExhaustive plays every script of scriptLen operations (with the
// argument fixed) over a fixed workload.
func TestModelExhaustive(t *testing.T) {
	workload := []posted{{Send, 2 * mtu}, {Read, 3 * mtu}, {Atomic, 8}, {Write, mtu + 1}, {Read, 10}}
	ops := []byte{0, 1, 2, 3, 4, 5, 6, 8}
	const scriptLen = 6
	if testing.Short() {
		t.Skip("exhaustive: skipped in -short mode")
	}
	script := make([]byte, 2*scriptLen)
	n := 1
	for range scriptLen {
		n *= len(ops)
	}
	for k := range n {
		x := k
		for i := range scriptLen {
			script[2*i] = ops[x%len(ops)]
			script[2*i+1] = 1
			x /= len(ops)
		}
		func() {
			defer func() {
				if t.Failed() {
					t.Logf("script %v", script)
				}
			}()
			run(t, workload, script)
		}()
		if t.Failed() {
			return
		}
	}
}

// FuzzModel plays scripts the fuzzer chooses, including posts.
func FuzzModel(f *testing.F) {
	f.Add([]byte{7, 0, 7, 9, 7, 2, 0, 0, 3, 0})
	f.Add([]byte{7, 2, 7, 2, 7, 3, 1, 0, 0, 0, 0, 0, 3, 0, 5, 3, 6, 0, 4, 0})
	f.Add([]byte{8, 0, 7, 4, 0, 0, 3, 0, 6, 0, 0, 0, 3, 0})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 400 {
			return
		}
		run(t, nil, script)
	})
}

func (p posted) String() string { return fmt.Sprintf("%d/%d", p.class, p.length) }
