package verbs

// Regression tests for the go-back-N and READ retry fixes found by the
// stress harness (stress_test.go). Each runs on a fake clock that the test
// never advances: the requester must recover without its ACK timer, so a
// recovery that needs a timeout leaves the WR pending and the test fails.

import (
	"bytes"
	"testing"

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
	const npkts, lost, drops = 64, 10, 9 // drops > retry_cnt (7)
	p, _ := newFakePair(t, pairOpts{mtu: MTU1024})
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
}

// TestStaleNAKIgnored: a PSN sequence NAK for a PSN the responder has since
// acknowledged (overtaken by the ACK on a reordering network) used to rewind
// the requester to the oldest request still outstanding and send it again.
func TestStaleNAKIgnored(t *testing.T) {
	p, _ := newFakePair(t, pairOpts{mtu: MTU1024})
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
}

// TestDuplicateNAKIgnored: a copy of a PSN sequence NAK (duplicated by the
// network) used to rewind the requester a second time for one loss.
func TestDuplicateNAKIgnored(t *testing.T) {
	p, _ := newFakePair(t, pairOpts{mtu: MTU1024})
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
	eventually(t, "the NAK's retransmission", func() bool {
		return len(w.all(both(from(p.da), isRequest))) == 8+6
	})
	if naks := w.all(both(from(p.db), isNAK)); len(naks) != 1 || naks[0].psn != first.Add(2) {
		t.Fatalf("NAKs %+v, want one for %#x", naks, first.Add(2))
	}
	injectAck(t, p.da, p.qa, wire.NAKSyndrome(wire.NAKPSNSequence), first.Add(2))
	if n := len(w.all(both(from(p.da), isRequest))); n != 8+6 {
		t.Fatalf("%d requests after the NAK's copy, want %d: it rewound again", n, 8+6)
	}
}

// TestReadLostBehindWrite: a READ's responses are all lost and the WRITE
// behind it is acknowledged. Only the READ is asked again (it used to rewind
// and send the WRITE again too, go-back-N); the WRITE completes from the
// acknowledgement already received once the READ is in.
func TestReadLostBehindWrite(t *testing.T) {
	const n = 8 * 1024
	p, _ := newFakePair(t, pairOpts{mtu: MTU1024})
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
}
