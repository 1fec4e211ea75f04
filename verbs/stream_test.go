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
