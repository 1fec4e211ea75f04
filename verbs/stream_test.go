package verbs

import (
	"bytes"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/verbs/internal/requester"
)

// TestStreamingPosts posts WRITEs and SENDs one work request per PostSend
// in a tight loop, as a bandwidth test does: posts to a QP with requests
// outstanding leave their packets to the device's pacer, which must send
// them in order, so every message lands where it should and completes once,
// in posting order.
func TestStreamingPosts(t *testing.T) {
	const msgs, size = 600, 100
	p := newPair(t, pairOpts{wr: 64, mtu: MTU256})
	ma, mb := p.reg(p.pa, msgs*size), p.reg(p.pb, msgs*size)
	rbuf := p.reg(p.pb, msgs/10*size)
	for i := range ma.Buf() {
		ma.Buf()[i] = byte(i*13 + i/size)
	}
	// Every 10th message is a SEND of its slice, into its own receive.
	for r := range msgs / 10 {
		if err := p.qb.PostRecv([]RecvWR{{ID: uint64(r), SGL: []SGE{rbuf.SGE(r*size, size)}}}); err != nil {
			t.Fatal(err)
		}
	}
	deferred := p.da.Stats().TxDeferred.Load()
	var got []WC
	wcs := make([]WC, 16)
	next := uint64(0)
	deadline := time.Now().Add(20 * time.Second)
	for posted := 0; len(got) < msgs; {
		for posted < msgs && posted-len(got) < 64 {
			wr := SendWR{ID: uint64(posted), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{ma.SGE(posted*size, size)}, RemoteAddr: mb.Addr() + uint64(posted*size), RKey: mb.RKey()}
			if posted%10 == 9 {
				wr.Opcode, wr.RemoteAddr, wr.RKey = WRSend, 0, 0
			}
			if err := p.qa.PostSend([]SendWR{wr}); err != nil {
				t.Fatalf("post %d: %v", posted, err)
			}
			posted++
		}
		n := p.ca.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != Success || wc.WRID != next {
				t.Fatalf("completion %d: %+v", next, wc)
			}
			next++
		}
		got = append(got, wcs[:n]...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions", len(got), msgs)
		}
	}
	for i := range msgs {
		want := ma.Buf()[i*size : (i+1)*size]
		if i%10 == 9 {
			continue // a SEND, checked below
		}
		if !bytes.Equal(mb.Buf()[i*size:(i+1)*size], want) {
			t.Fatalf("WRITE %d landed wrong", i)
		}
	}
	for r, wc := range waitWC(t, p.cb, msgs/10, 5*time.Second) {
		if wc.Status != Success || wc.WRID != uint64(r) || wc.ByteLen != size {
			t.Fatalf("receive %d: %+v", r, wc)
		}
		i := r*10 + 9
		if !bytes.Equal(rbuf.Buf()[r*size:(r+1)*size], ma.Buf()[i*size:(i+1)*size]) {
			t.Fatalf("SEND %d landed wrong", i)
		}
	}
	if d := p.da.Stats().TxDeferred.Load() - deferred; d == 0 {
		t.Errorf("no post was left to the pacer: the streaming path was not tested")
	}
}

// TestStreamingPostSentByPacer checks that a post left to the pacer is sent
// without waiting for anything else to happen on the QP: in a bubble whose
// clock stands still, with the peer's acknowledgements dropped, the second
// of two back-to-back posts (a stream) must be on the wire once everything
// has settled, not only when the retransmit timer would fire.
func TestStreamingPostSentByPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ma, mb := p.reg(p.pa, 256), p.reg(p.pb, 256)
		w := p.tap()
		w.setDrop(func(tp *tapped) bool { return !isRequest(tp) }) // no ACKs come back
		deferred := p.da.Stats().TxDeferred.Load()
		for i := range 2 {
			post(t, p.qa, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{ma.SGE(i*128, 128)}, RemoteAddr: mb.Addr() + uint64(i*128), RKey: mb.RKey()})
		}
		synctest.Wait()
		if d := p.da.Stats().TxDeferred.Load() - deferred; d != 1 {
			t.Fatalf("%d posts left to the pacer, want the second", d)
		}
		if n := len(w.all(both(from(p.da), isRequest))); n != 2 {
			t.Fatalf("%d requests on the wire, want 2", n)
		}
	})
}

// TestStreamingPostSendsItself checks that a poster that never yields does
// not keep its stream from the wire: with one P the pacer cannot run while
// the test posts, so the posts themselves must send once deferMax packets
// wait. The peer's ACKs are dropped, so every post after the first finds
// a request outstanding and is part of a stream.
func TestStreamingPostSendsItself(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := newPair(t, pairOpts{wr: 2 * deferMax, mtu: MTU256})
	ma, mb := p.reg(p.pa, 64), p.reg(p.pb, 64)
	w := p.tap()
	w.setDrop(func(tp *tapped) bool { return !isRequest(tp) })
	deferred := p.da.Stats().TxDeferred.Load()
	const posts = deferMax + 2
	for i := range posts {
		wr := SendWR{ID: uint64(i), Opcode: WRRDMAWrite, SGL: []SGE{ma.SGE(0, 64)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
		if err := p.qa.PostSend([]SendWR{wr}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	// Read before anything yields: what is on the wire now was sent by the
	// posts (or by a pacer that got the CPU anyway, which is no failure).
	// Each post left to the pacer leaves one packet; fewer than deferMax
	// may wait.
	sent := len(w.all(both(from(p.da), isRequest)))
	d := p.da.Stats().TxDeferred.Load() - deferred
	if d < deferMax {
		t.Fatalf("%d of %d posts were part of a stream, want at least %d", d, posts, deferMax)
	}
	if posts-sent >= deferMax {
		t.Fatalf("%d of %d requests on the wire when the last post returned: %d wait for the pacer", sent, posts, posts-sent)
	}
}

// TestPeerStarving: a post sends what waits for the pacer only while the
// device has less than a PSN window of request packets in flight besides
// them; with more, the pacer's batches keep the peers busy.
func TestPeerStarving(t *testing.T) {
	p := newPair(t, pairOpts{})
	b := p.da.budget
	if b == nil {
		t.Fatal("the device has no in-flight bound")
	}
	avail := b.avail.Load()
	defer b.avail.Store(avail)
	for _, c := range []struct {
		held, n int
		want    bool
	}{
		{0, deferMax, true},
		{deferMax + requester.MaxUnacked - 1, deferMax, true},
		{deferMax + requester.MaxUnacked, deferMax, false},
		{8 * requester.MaxUnacked, deferMax, false},
	} {
		b.avail.Store(b.total - int64(c.held))
		if got := p.qa.peerStarving(c.n); got != c.want {
			t.Errorf("%d packets held, %d waiting: peerStarving %v, want %v", c.held, c.n, got, c.want)
		}
	}
}

// TestStreamingPostSendsBeforeWaiting checks the posts that send at once,
// before deferMax packets wait, because their poster is about to wait for
// them: one that makes the only signaled request outstanding, and one that
// fills the send queue. With one P the pacer cannot run while the test
// posts, and the peer's ACKs are dropped, so every post after the first is
// part of a stream and nothing completes.
func TestStreamingPostSendsBeforeWaiting(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// The second post has one request outstanding, so it is part of a
	// stream only within streamGap of the first; under the race detector a
	// post can take longer (CI saw 14 of 15 once).
	gap := streamGap
	streamGap = time.Hour
	defer func() { streamGap = gap }()
	const depth = 16 // < deferMax: only the rules under test send early
	p := newPair(t, pairOpts{wr: depth, mtu: MTU256})
	ma, mb := p.reg(p.pa, 64), p.reg(p.pb, 64)
	w := p.tap()
	w.setDrop(func(tp *tapped) bool { return !isRequest(tp) })
	onWire := func() int { return len(w.all(both(from(p.da), isRequest))) }
	wr := func(id uint64, flags SendFlags) SendWR {
		return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: flags, SGL: []SGE{ma.SGE(0, 64)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
	}
	deferred := p.da.Stats().TxDeferred.Load()
	id := uint64(0)
	postN := func(n int, flags SendFlags) {
		for range n {
			if err := p.qa.PostSend([]SendWR{wr(id, flags)}); err != nil {
				t.Fatalf("post %d: %v", id, err)
			}
			id++
		}
	}
	// An unsignaled post, three more in a stream, then a signaled one: it
	// is the only signaled request outstanding, so all five leave with it.
	postN(4, 0)
	postN(1, SendSignaled)
	if n := onWire(); n != 5 {
		t.Fatalf("%d requests on the wire after the signaled post, want 5", n)
	}
	// Unsignaled posts up to the depth: the one that fills the queue sends.
	postN(depth-5, 0)
	if n := onWire(); n != depth {
		t.Fatalf("%d requests on the wire after the post that filled the queue, want %d", n, depth)
	}
	if d := p.da.Stats().TxDeferred.Load() - deferred; d != depth-1 {
		t.Fatalf("%d posts were part of a stream, want %d", d, depth-1)
	}
}

// TestSignaledCount checks the count of signaled requests outstanding that
// unlockDeferred's rule reads: back to zero once they complete, once the
// error state flushes them and after a reset, which drops them without
// completions.
func TestSignaledCount(t *testing.T) {
	p := newPair(t, pairOpts{wr: 32, mtu: MTU256})
	ma, mb := p.reg(p.pa, 64), p.reg(p.pb, 64)
	count := func() int {
		p.qa.mu.Lock()
		defer p.qa.mu.Unlock()
		return p.qa.sigOut
	}
	wr := func(id uint64, flags SendFlags) SendWR {
		return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: flags, SGL: []SGE{ma.SGE(0, 64)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
	}
	for i := range 20 {
		flags := SendFlags(0)
		if i%3 == 0 {
			flags = SendSignaled
		}
		post(t, p.qa, wr(uint64(i), flags))
	}
	waitWC(t, p.ca, 7, 5*time.Second)
	if n := count(); n != 0 {
		t.Fatalf("%d signaled requests counted after their completions", n)
	}
	// Unanswered, then flushed by the error state.
	w := p.tap()
	w.setDrop(func(tp *tapped) bool { return true })
	for i := range 5 {
		post(t, p.qa, wr(uint64(100+i), SendSignaled))
	}
	if n := count(); n != 5 {
		t.Fatalf("%d signaled requests counted, want 5", n)
	}
	mustModify(t, p.qa, QPAttr{State: StateErr}, AttrState)
	for _, wc := range waitWC(t, p.ca, 5, 5*time.Second) {
		if wc.Status != WRFlushErr {
			t.Fatalf("completion %+v, want flushed", wc)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d signaled requests counted after the flush", n)
	}
	// A reset from RTS drops what is outstanding.
	q := newPair(t, pairOpts{wr: 32, mtu: MTU256})
	qa, qb := q.reg(q.pa, 64), q.reg(q.pb, 64)
	q.tap().setDrop(func(tp *tapped) bool { return true })
	for i := range 3 {
		post(t, q.qa, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{qa.SGE(0, 64)}, RemoteAddr: qb.Addr(), RKey: qb.RKey()})
	}
	mustModify(t, q.qa, QPAttr{State: StateReset}, AttrState)
	q.qa.mu.Lock()
	n := q.qa.sigOut
	q.qa.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d signaled requests counted after a reset", n)
	}
}
