// A flood of duplicate READ requests at the responder: each repeat of a READ
// with an answer to a duplicate still queued replaces that answer instead of
// queueing another whole one, so the work and memory a peer can cause stay
// those of two answers per executed READ.

package verbs

import (
	"bytes"
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// TestDuplicateReadFlood posts a 4 MiB READ (4096 responses at path MTU
// 1024) and, once its answer has begun, injects 100 exact duplicates of the
// request and 100 re-asks from its middle, as fast as the link takes them.
// The READ must complete with the right data; the responder's output queue
// must hold at most two answers for it at any time (the original's and one
// to a duplicate); and the responses sent for the READ's PSNs must stay
// within two whole answers plus a burst per duplicate (queueing each duplicate's answer would send up to 200 whole
// answers: 800,000 packets).
func TestDuplicateReadFlood(t *testing.T) {
	for _, tr := range []string{"loop", "udp4"} {
		t.Run(tr, func(t *testing.T) { testDuplicateReadFlood(t, tr) })
	}
}

func testDuplicateReadFlood(t *testing.T, transport string) {
	p, rx := newObservedPair(t, transport)
	const size, mtu, dups = 4 << 20, 1024, 100
	const npk = size / mtu
	ma, mb := p.reg(p.pa, size), p.reg(p.pb, size)
	for i := range mb.Buf() {
		mb.Buf()[i] = byte(i*13 + i>>12)
	}
	mark := rx.len()
	post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, size)},
		RemoteAddr: mb.Addr(), RKey: mb.RKey()})
	deadline := time.Now().Add(waitFor)
	for rx.len() == mark {
		if time.Now().After(deadline) {
			t.Fatal("no READ response")
		}
		time.Sleep(10 * time.Microsecond)
	}
	first := rx.since(mark)[0].psn
	dropped0 := p.db.Stats().RxDuplicateDropped.Load()
	maxQueued := 0
	queued := func() {
		p.qb.mu.Lock()
		n := 0
		for _, it := range p.qb.resp.queue {
			if it.pkt == nil {
				n++
			}
		}
		p.qb.mu.Unlock()
		maxQueued = max(maxQueued, n)
	}
	for i := range dups {
		p.injectRequest(readRequest(first, mb.RKey(), mb.Addr(), size))
		k := npk / 2
		p.injectRequest(readRequest(first.Add(k), mb.RKey(), mb.Addr()+uint64(k*mtu), size-k*mtu))
		if i%10 == 0 {
			queued()
		}
	}
	queued()
	checkWC(t, waitWC(t, p.ca, 1, 30*time.Second)[0], 1, Success, WCRDMARead)
	if !bytes.Equal(ma.Buf(), mb.Buf()) {
		t.Fatal("READ data differs")
	}
	// Let the answers run out, then count them.
	for n := -1; n != rx.len(); {
		n = rx.len()
		time.Sleep(200 * time.Millisecond)
	}
	resps := 0
	for _, r := range rx.since(mark) {
		if d := r.psn.Diff(first); d >= 0 && d < npk {
			resps++
		}
	}
	t.Logf("%d responses for a READ of %d packets and %d duplicates; %d duplicates dropped, at most %d answers queued",
		resps, npk, 2*dups, p.db.Stats().RxDuplicateDropped.Load()-dropped0, maxQueued)
	if maxQueued > 2 {
		t.Errorf("%d answers queued for one READ", maxQueued)
	}
	if limit := 2*npk + 2*dups*readBurst; resps > limit {
		t.Errorf("%d responses, want at most %d", resps, limit)
	}
	// The QP is alive: another READ completes.
	post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 4096)},
		RemoteAddr: mb.Addr() + 8192, RKey: mb.RKey()})
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 2, Success, WCRDMARead)
}

// TestRewindReadAnswer: a duplicate READ replaces the queued answer to an
// earlier duplicate of the same READ with exactly what it asks for (the
// requester expects the answer to a re-ask to end where the re-ask does),
// leaves the original's answer running, and a copy of a request whose
// answer has not begun is dropped.
func TestRewindReadAnswer(t *testing.T) {
	p := newPair(t, pairOpts{mtu: MTU1024})
	qp := p.qb
	const base, mtu = 1 << 20, 1024
	first := wire.PSN(100)
	qp.mu.Lock()
	defer qp.mu.Unlock()
	orig := readAnswer{first: first, psn: first.Add(50), rkey: 7, va: base + 50*mtu, n: 50 * mtu, i: 3, npk: 50}
	qp.resp.queue = []respItem{{ans: orig}}
	defer func() { qp.resp.queue = qp.resp.queue[:0] }()

	// No duplicate answer queued: the caller queues one.
	if qp.rewindReadAnswerLocked(first, first.Add(10), base+10*mtu, 5*mtu) {
		t.Fatal("a re-ask with only the original's answer queued was taken")
	}
	dup := readAnswer{first: first, psn: first.Add(10), rkey: 7, va: base + 10*mtu, n: 5 * mtu, npk: 5, dup: true}
	qp.resp.queue = append(qp.resp.queue, respItem{ans: dup})
	// A copy of that re-ask before its answer began: dropped.
	dropped := p.db.Stats().RxDuplicateDropped.Load()
	if !qp.rewindReadAnswerLocked(first, first.Add(10), base+10*mtu, 5*mtu) || qp.resp.queue[1].ans != dup {
		t.Fatalf("a copy of the queued re-ask changed it: %+v", qp.resp.queue[1].ans)
	}
	if p.db.Stats().RxDuplicateDropped.Load() != dropped+1 {
		t.Error("the copy was not counted as dropped")
	}
	// Another re-ask: it replaces the duplicate answer, not the original's.
	if !qp.rewindReadAnswerLocked(first, first.Add(20), base+20*mtu, 8*mtu) {
		t.Fatal("the duplicate answer was not replaced")
	}
	if want := (readAnswer{first: first, psn: first.Add(20), rkey: 7, va: base + 20*mtu, n: 8 * mtu, npk: 8, dup: true}); qp.resp.queue[1].ans != want {
		t.Fatalf("duplicate answer %+v, want %+v", qp.resp.queue[1].ans, want)
	}
	if qp.resp.queue[0].ans != orig {
		t.Fatalf("the original's answer changed: %+v", qp.resp.queue[0].ans)
	}
	if qp.rewindReadAnswerLocked(first.Add(1000), first.Add(1000), base, mtu) {
		t.Error("an answer to another READ was taken")
	}
}
