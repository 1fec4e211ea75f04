package verbs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/wire"
)

// TestReadAnswerPaced: an 8 MiB READ (8192 responses) on one QP and, posted
// right after it, a SEND on another QP between the same devices: the SEND is
// acknowledged while the READ is still being answered. Before the pacer, the
// link's receive goroutine generated the whole answer before it handled the
// SEND, so its ACK came after the READ's last response, every time. On a
// loaded machine the test's goroutine may also be descheduled between the
// two posts for as long as the whole answer takes, so the exchange runs up
// to ten times and one ACK ahead of the answer's end must be seen.
func TestReadAnswerPaced(t *testing.T) {
	leakcheck.Check(t)
	const size = 8 << 20
	p, rx := newObservedPair(t, "loop")
	p2 := &pair{t: t, net: p.net, da: p.da, db: p.db}
	p2.connect(pairOpts{mtu: MTU4096})
	ma, mb := p.reg(p.pa, size), p.reg(p.pb, size)
	for i := range mb.Buf() {
		mb.Buf()[i] = byte(i*31 + i>>12)
	}
	sa, sb := p2.reg(p2.pa, 64), p2.reg(p2.pb, 64)
	var seen []string
	for round := range 10 {
		clear(ma.Buf())
		postRecv(t, p2.qb, RecvWR{ID: 7, SGL: []SGE{sb.SGE(0, 64)}})
		mark := rx.len()
		post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, size)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		post(t, p2.qa, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{sa.SGE(0, 64)}})
		checkWC(t, waitWC(t, p2.ca, 1, waitFor)[0], 2, Success, WCSend)
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCRDMARead)
		if !bytes.Equal(ma.Buf(), mb.Buf()) {
			t.Fatal("READ data differs")
		}
		ack, last := -1, -1
		var lastPSN wire.PSN
		for i, r := range rx.since(mark) {
			switch {
			case r.qpn == p2.qa.qpn && r.op == wire.RCAcknowledge && ack < 0:
				ack = i
			case r.qpn == p.qa.qpn && (r.op == wire.RCReadResponseLast) && last < 0:
				last, lastPSN = i, r.psn
			}
		}
		if ack < 0 || last < 0 {
			t.Fatalf("ACK at %d, last READ response at %d", ack, last)
		}
		if ack < last {
			t.Logf("round %d: ACK after %d of the READ's %d responses", round, ack, size/1024)
			return
		}
		seen = append(seen, fmt.Sprintf("%d > %d (PSN %#x)", ack, last, lastPSN))
	}
	t.Fatalf("the other QP's ACK came after the READ's last response in every round (%v): one READ held the responder", seen)
}

// TestReadAnswerOrder: a long READ, then a SEND, an atomic and a short READ
// on the same QP. Everything the responder sends behind the long answer
// waits for it (IBTA 9.7.5.1.5: responses in PSN order), so the requester
// sees PSNs that only go up, and every request completes once.
func TestReadAnswerOrder(t *testing.T) {
	leakcheck.Check(t)
	const size = 1 << 20
	p, rx := newObservedPair(t, "loop")
	ma, mb := p.reg(p.pa, 2*size), p.reg(p.pb, 2*size)
	for i := range mb.Buf() {
		mb.Buf()[i] = byte(i*17 + i>>11)
	}
	postRecv(t, p.qb, RecvWR{ID: 9, SGL: []SGE{mb.SGE(size+4096, 64)}})
	mark := rx.len()
	post(t, p.qa,
		SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, size)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()},
		SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(size, 64)}},
		SendWR{ID: 3, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(size+64, 8)},
			RemoteAddr: mb.Addr() + size, RKey: mb.RKey(), CompareAdd: 1},
		SendWR{ID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(size+1024, 2048)},
			RemoteAddr: mb.Addr() + 8192, RKey: mb.RKey()})
	wc := waitWC(t, p.ca, 4, waitFor)
	checkWC(t, wc[0], 1, Success, WCRDMARead)
	checkWC(t, wc[1], 2, Success, WCSend)
	checkWC(t, wc[2], 3, Success, WCFetchAdd)
	checkWC(t, wc[3], 4, Success, WCRDMARead)
	if !bytes.Equal(ma.Buf()[:size], mb.Buf()[:size]) || !bytes.Equal(ma.Buf()[size+1024:size+3072], mb.Buf()[8192:10240]) {
		t.Fatal("READ data differs")
	}
	var prev wire.PSN
	for i, r := range rx.since(mark) {
		if i > 0 && r.psn.Diff(prev) < 0 {
			t.Fatalf("response %d (%v) at PSN %#x after PSN %#x: out of order", i, r.op, r.psn, prev)
		}
		prev = r.psn
	}
}
