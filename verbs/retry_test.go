package verbs

// Regression tests for the go-back-N and READ retry fixes found by the
// stress harness (stress_test.go). Each runs on a fake clock that the test
// never advances: the requester must recover without its ACK timer, so a
// recovery that needs a timeout leaves the WR pending and the test fails.

import (
	"bytes"
	"encoding/binary"
	"testing"
	"testing/synctest"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

func isReadResp(tp *tapped) bool {
	switch tp.op {
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		return true
	}
	return false
}

func isOp(op wire.Opcode) func(*tapped) bool {
	return func(tp *tapped) bool { return tp.op == op }
}

// injectAck hands d a crafted acknowledgement for qp, as if from its peer.
func injectAck(t *testing.T, d *Device, qp *QP, syn wire.Syndrome, psn wire.PSN) {
	t.Helper()
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQP: qp.qpn, PSN: psn}
	h.AETH = wire.AETHFields{Syndrome: syn}
	p := link.Get()
	defer link.Put(p)
	hl, err := wire.WriteHeaders(p.Buf, &h, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.N = hl + wire.ICRCLen
	d.receive([]*link.Packet{p})
}

// TestReadRetryLosesResponseAgain: the response a READ retry asks for is
// lost again and again. Before the fix the requester asked once, then
// ignored every response until the ACK timer fired, and each such timeout
// used up a retry: losing the same response more than retry_cnt times ended
// the READ with RETRY_EXC_ERR (stress: loss20 seed 141, loss20j seed 300).
// Now the end of each answer without the missing response asks again at
// once, for the missing response only (and the next one, which ends the
// answer), and responses after it are kept.
func TestReadRetryLosesResponseAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const npkts, lost, drops = 64, 10, 9 // drops > retry_cnt (7)
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, npkts*1024), p.reg(p.pb, npkts*1024)
		for i := range mb.Buf() {
			mb.Buf()[i] = byte(i*7 + i>>10)
		}
		w := p.tap()
		first := wire.PSN(0xFFFFFA) // qa's SQ PSN (newPair); the READ wraps it
		dropped := 0
		w.setDrop(func(tp *tapped) bool {
			if isReadResp(tp) && tp.psn == first.Add(lost) && dropped < drops {
				dropped++
				return true
			}
			return false
		})
		post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, npkts*1024)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCRDMARead)
		if !bytes.Equal(ma.Buf(), mb.Buf()) {
			t.Fatal("READ data differs")
		}
		reqs := w.all(both(from(p.da), isRequest))
		resps := w.all(both(from(p.db), isReadResp))
		if dropped != drops || len(reqs) != 1+drops {
			t.Fatalf("%d drops, %d READ requests; want %d and %d", dropped, len(reqs), drops, 1+drops)
		}
		// Each retry asks for the missing response and the one after it, which
		// is in already and ends the answer.
		if len(resps) != npkts+2*drops {
			t.Fatalf("%d READ responses, want %d", len(resps), npkts+2*drops)
		}
		for i, r := range resps[npkts:] {
			want := tapped{op: wire.RCReadResponseFirst, psn: first.Add(lost)}
			if i%2 == 1 {
				want = tapped{op: wire.RCReadResponseLast, psn: first.Add(lost + 1)}
			}
			if r.op != want.op || r.psn != want.psn {
				t.Fatalf("retry answered with %v at %#x, want %v at %#x", r.op, r.psn, want.op, want.psn)
			}
		}
	})
}

// TestStaleNAKIgnored: a PSN sequence NAK for a PSN the responder has since
// acknowledged (overtaken by the ACK on a reordering network) used to rewind
// the requester to the oldest request still outstanding and send it again.
func TestStaleNAKIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
		w := p.tap()
		write := func(id uint64, off int) SendWR {
			return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(off, 4096)},
				RemoteAddr: mb.Addr() + uint64(off), RKey: mb.RKey()}
		}
		post(t, p.qa, write(1, 0))
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCRDMAWrite)
		w.setDrop(func(tp *tapped) bool { return isRequest(tp) }) // the second WRITE stays outstanding
		post(t, p.qa, write(2, 4096))
		before := len(w.all(both(from(p.da), isRequest)))
		first := wire.PSN(0xFFFFFA) // qa's SQ PSN (newPair)
		// WRITE 1's last PSN: the newest one acknowledged (older ones are
		// dropped as ghosts before the NAK is looked at).
		injectAck(t, p.da, p.qa, wire.NAKSyndrome(wire.NAKPSNSequence), first.Add(3))
		if n := len(w.all(both(from(p.da), isRequest))); n != before {
			t.Fatalf("a stale NAK made the requester send %d packets", n-before)
		}
		expectNoWC(t, p.ca)
	})
}

// TestDuplicateNAKIgnored: a copy of a PSN sequence NAK (duplicated by the
// network) used to rewind the requester a second time for one loss.
func TestDuplicateNAKIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
		w := p.tap()
		first := wire.PSN(0xFFFFFA) // qa's SQ PSN (newPair)
		lostOnce := false
		w.setDrop(func(tp *tapped) bool {
			if isRequest(tp) && tp.psn == first.Add(2) && !lostOnce {
				lostOnce = true
				return true
			}
			// No acknowledgement of the retransmission reaches the requester,
			// so the copy of the NAK below is not yet behind its ackedPSN.
			return tp.aeth && tp.syn.IsACK()
		})
		post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8192)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		settled(t, "the NAK's retransmission", func() bool {
			return len(w.all(both(from(p.da), isRequest))) == 8+6
		})
		if naks := w.all(both(from(p.db), isNAK)); len(naks) != 1 || naks[0].psn != first.Add(2) {
			t.Fatalf("NAKs %+v, want one for %#x", naks, first.Add(2))
		}
		injectAck(t, p.da, p.qa, wire.NAKSyndrome(wire.NAKPSNSequence), first.Add(2))
		if n := len(w.all(both(from(p.da), isRequest))); n != 8+6 {
			t.Fatalf("%d requests after the NAK's copy, want %d: it rewound again", n, 8+6)
		}
	})
}

// TestReadLostBehindWrite: a READ's responses are all lost and the WRITE
// behind it is acknowledged. Only the READ is asked again (it used to rewind
// and send the WRITE again too, go-back-N); the WRITE completes from the
// acknowledgement already received once the READ is in.
func TestReadLostBehindWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8 * 1024
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, 2*n), p.reg(p.pb, 2*n)
		for i := range mb.Buf()[:n] {
			mb.Buf()[i] = byte(i * 3)
		}
		w := p.tap()
		dropped := 0
		w.setDrop(func(tp *tapped) bool {
			if isReadResp(tp) && dropped < n/1024 {
				dropped++
				return true
			}
			return false
		})
		post(t, p.qa,
			SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, n)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()},
			SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(n, 2048)}, RemoteAddr: mb.Addr() + n, RKey: mb.RKey()})
		wc := waitWC(t, p.ca, 2, waitFor)
		checkWC(t, wc[0], 1, Success, WCRDMARead)
		checkWC(t, wc[1], 2, Success, WCRDMAWrite)
		if !bytes.Equal(ma.Buf()[:n], mb.Buf()[:n]) {
			t.Fatal("READ data differs")
		}
		if reads := w.all(both(from(p.da), isOp(wire.RCReadRequest))); len(reads) != 2 {
			t.Fatalf("%d READ requests, want 2", len(reads))
		}
		if writes := w.all(both(from(p.da), func(tp *tapped) bool { return isRequest(tp) && tp.op != wire.RCReadRequest })); len(writes) != 2 {
			t.Fatalf("%d WRITE packets, want 2 (sent once)", len(writes))
		}
	})
}

// TestAtomicPSNNotReusedAfterRewind: the first of two atomics loses its
// response, the second one's response arrives and completes it, and the
// request for the lost response is answered too late, so the short recovery
// timer rewinds to the first atomic. The rewind resends the first one and
// passes over the second, already complete. Before the fix the requester's
// next PSN stayed at the end of the first atomic, so the next request was
// given the second atomic's PSN: the responder took it for a duplicate and
// answered it with the second atomic's saved result, without executing it
// (stress: TestMatrixLossy/RC/MTU256/FAA, a wrong value returned by a
// FETCH_AND_ADD).
func TestAtomicPSNNotReusedAfterRewind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, 64), p.reg(p.pb, 64)
		const v0, a, b, c = 0x1000, 0x10, 0x200, 0x3000
		binary.NativeEndian.PutUint64(mb.Buf(), v0)
		faa := func(id uint64, off int, add uint64) SendWR {
			return SendWR{ID: id, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(off, 8)},
				RemoteAddr: mb.Addr(), RKey: mb.RKey(), CompareAdd: add}
		}
		w := p.tap()
		first := wire.PSN(0xFFFFFA) // qa's SQ PSN (newPair)
		isFirstAck := func(tp *tapped) bool { return tp.op == wire.RCAtomicAcknowledge && tp.psn == first }
		dropped := 0
		w.setDrop(func(tp *tapped) bool {
			// The first atomic's response, and the answer to the request
			// for it again.
			if isFirstAck(tp) && dropped < 2 {
				dropped++
				return true
			}
			return false
		})
		post(t, p.qa, faa(1, 0, a), faa(2, 8, b))
		settled(t, "the first atomic's response is lost twice", func() bool {
			return len(w.all(isFirstAck)) == 2
		})
		// Let the second atomic's response and everything else in flight land.
		settled(t, "the second atomic's response", func() bool {
			return len(w.all(func(tp *tapped) bool { return tp.op == wire.RCAtomicAcknowledge && tp.psn == first.Add(1) })) == 1
		})
		synctest.Wait()
		expectNoWC(t, p.ca)
		// The short recovery deadline resends the first atomic.
		advance(wire.ACKTimeout(p.opts.timeout) / 8)
		wc := waitWC(t, p.ca, 2, waitFor)
		checkWC(t, wc[0], 1, Success, WCFetchAdd)
		checkWC(t, wc[1], 2, Success, WCFetchAdd)
		if got := binary.NativeEndian.Uint64(ma.Buf()); got != v0 {
			t.Fatalf("first atomic returned %#x, want %#x", got, v0)
		}
		if got := binary.NativeEndian.Uint64(ma.Buf()[8:]); got != v0+a {
			t.Fatalf("second atomic returned %#x, want %#x", got, v0+a)
		}
		post(t, p.qa, faa(3, 16, c))
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 3, Success, WCFetchAdd)
		if got := binary.NativeEndian.Uint64(ma.Buf()[16:]); got != v0+a+b {
			t.Fatalf("third atomic returned %#x, want %#x", got, v0+a+b)
		}
		if got := binary.NativeEndian.Uint64(mb.Buf()); got != v0+a+b+c {
			t.Fatalf("target holds %#x, want %#x", got, v0+a+b+c)
		}
		reqs := w.all(both(from(p.da), isRequest))
		if last := reqs[len(reqs)-1]; last.psn != first.Add(2) {
			t.Fatalf("third atomic sent at PSN %#x, want %#x", last.psn, first.Add(2))
		}
	})
}

// TestLongReadAfterAtomicRecovery: the first of two atomics loses its
// response, the second one's response completes it, and the first one's
// response, asked for again, completes the first. Every request is then
// complete, and a READ longer than the PSN window must go out at once.
// Before the fix the oldest unacknowledged PSN stayed at the second atomic
// (its own response did not move it past the first's, still missing), so
// the window counted one PSN in flight and a READ of more than 127 packets
// waited for an acknowledgement that could not come.
func TestLongReadAfterAtomicRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const npkts = 200
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, npkts*1024), p.reg(p.pb, npkts*1024)
		for i := range mb.Buf() {
			mb.Buf()[i] = byte(i*13 + i>>9)
		}
		w := p.tap()
		first := wire.PSN(0xFFFFFA) // qa's SQ PSN (newPair)
		dropped := false
		w.setDrop(func(tp *tapped) bool {
			if tp.op == wire.RCAtomicAcknowledge && tp.psn == first && !dropped {
				dropped = true
				return true
			}
			return false
		})
		cas := func(id uint64, off int) SendWR {
			return SendWR{ID: id, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: []SGE{ma.SGE(off, 8)},
				RemoteAddr: mb.Addr() + 8, RKey: mb.RKey()}
		}
		post(t, p.qa, cas(1, 0), cas(2, 8))
		wc := waitWC(t, p.ca, 2, waitFor)
		checkWC(t, wc[0], 1, Success, WCCompSwap)
		checkWC(t, wc[1], 2, Success, WCCompSwap)
		want := bytes.Clone(mb.Buf())
		post(t, p.qa, SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, npkts*1024)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 3, Success, WCRDMARead)
		if !bytes.Equal(ma.Buf(), want) {
			t.Fatal("READ data differs")
		}
	})
}
