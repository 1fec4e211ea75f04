// Completion statuses end to end: each test provokes the real condition
// between two devices over link/loop and checks the status on the side that
// errs, both QPs' states afterwards, and the acknowledgement the responder
// put on the wire (peeked with a loop Filter and parsed with wire.Parse).
// Timeouts and RNR waits run in synctest bubbles, on fake time.

package verbs

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// waitFor bounds every wait in these tests.
const waitFor = 5 * time.Second

// tapped is one packet a wireTap saw.
type tapped struct {
	src     netip.Addr
	sport   uint16 // UDP source port
	op      wire.Opcode
	psn     wire.PSN
	aeth    bool
	syn     wire.Syndrome
	payload int
}

// wireTap records every packet a loop network carries and drops the ones its
// drop function picks.
type wireTap struct {
	mu   sync.Mutex
	pkts []tapped
	drop func(*tapped) bool
}

// tap installs a wireTap as the network's Filter.
func (p *pair) tap() *wireTap {
	w := &wireTap{}
	f := p.net.Faults()
	f.Filter = w.filter
	p.net.SetFaults(f)
	return w
}

func (w *wireTap) filter(lp *link.Packet) bool {
	pkt, err := wire.Parse(lp.Data())
	if err != nil {
		return false
	}
	tp := tapped{src: lp.Src.Addr(), sport: lp.Src.Port(), op: pkt.Opcode(), psn: pkt.BTH().PSN(), payload: len(pkt.Payload())}
	if pkt.Info().Has(wire.HdrAETH) {
		tp.aeth, tp.syn = true, pkt.AETH().Syndrome()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pkts = append(w.pkts, tp)
	return w.drop != nil && w.drop(&tp)
}

func (w *wireTap) setDrop(f func(*tapped) bool) {
	w.mu.Lock()
	w.drop = f
	w.mu.Unlock()
}

// all returns the packets seen for which keep is true.
func (w *wireTap) all(keep func(*tapped) bool) []tapped {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []tapped
	for i := range w.pkts {
		if keep(&w.pkts[i]) {
			out = append(out, w.pkts[i])
		}
	}
	return out
}

func from(d *Device) func(*tapped) bool {
	a := d.GIDs()[0].Addr()
	return func(tp *tapped) bool { return tp.src == a }
}

func isNAK(tp *tapped) bool { return tp.aeth && tp.syn.IsNAK() }
func isRNR(tp *tapped) bool { return tp.aeth && tp.syn.IsRNR() }
func isRequest(tp *tapped) bool {
	info := tp.op.Info()
	return info != nil && info.Is(wire.FlagRequest)
}
func both(a, b func(*tapped) bool) func(*tapped) bool {
	return func(tp *tapped) bool { return a(tp) && b(tp) }
}

// expectNAK checks that the responder (d) sent exactly one NAK, with code,
// for a PSN in [first, last], and no other NAK or RNR NAK.
func (w *wireTap) expectNAK(t *testing.T, d *Device, code wire.NAKCode, first, last wire.PSN) {
	t.Helper()
	naks := w.all(both(from(d), func(tp *tapped) bool { return tp.aeth && !tp.syn.IsACK() }))
	if len(naks) != 1 {
		t.Fatalf("responder sent %d NAKs, want 1: %+v", len(naks), naks)
	}
	n := naks[0]
	if !n.syn.IsNAK() || n.syn.NAKCode() != code {
		t.Fatalf("NAK syndrome %v, want NAK (%v)", n.syn, code)
	}
	if n.psn.Before(first) || n.psn.After(last) {
		t.Fatalf("NAK PSN %#x not in the request's [%#x, %#x]", n.psn, first, last)
	}
}

// requestPSNs returns the first and last PSN of the requests d has sent.
func (w *wireTap) requestPSNs(t *testing.T, d *Device) (wire.PSN, wire.PSN) {
	t.Helper()
	reqs := w.all(both(from(d), isRequest))
	if len(reqs) == 0 {
		t.Fatal("no request on the wire")
	}
	return reqs[0].psn, reqs[len(reqs)-1].psn
}

// expectEvent waits for the next async event of d and checks its type.
func expectEvent(t testing.TB, d *Device, typ EventType) AsyncEvent {
	t.Helper()
	select {
	case ev := <-d.Events():
		if ev.Type != typ {
			t.Fatalf("async event %v, want %v", ev.Type, typ)
		}
		return ev
	case <-time.After(waitFor):
		t.Fatalf("no async event, want %v", typ)
	}
	return AsyncEvent{}
}

// expectNoEvent checks that d has no async event queued.
func expectNoEvent(t testing.TB, d *Device) {
	t.Helper()
	select {
	case ev := <-d.Events():
		t.Fatalf("unexpected async event %v (QP %v)", ev.Type, ev.QP != nil)
	default:
	}
}

// expectNoWC checks that cq holds no completion.
func expectNoWC(t testing.TB, cq *CQ) {
	t.Helper()
	var wc [1]WC
	if cq.Poll(wc[:]) != 0 {
		t.Fatalf("unexpected completion %+v", wc[0])
	}
}

func expectState(t testing.TB, qp *QP, s QPState) {
	t.Helper()
	if got := qp.State(); got != s {
		t.Fatalf("QP %d in state %v, want %v", qp.QPN(), got, s)
	}
}

func checkWC(t testing.TB, wc WC, id uint64, s Status, op WCOpcode) {
	t.Helper()
	if wc.WRID != id || wc.Status != s || wc.Opcode != op {
		t.Fatalf("completion {wr_id %d, %v, %v}, want {wr_id %d, %v, %v} (%+v)", wc.WRID, wc.Status, wc.Opcode, id, s, op, wc)
	}
}

func post(t testing.TB, qp *QP, wrs ...SendWR) {
	t.Helper()
	if err := qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t testing.TB, qp *QP, wrs ...RecvWR) {
	t.Helper()
	if err := qp.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
}

// advance lets d of fake time pass in a synctest bubble, then waits until
// every goroutine of the bubble is blocked again: timers due in d have
// fired and what they started has run.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// settled checks, in a synctest bubble, that cond holds once everything
// that can happen without time passing has happened.
func settled(t testing.TB, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf("not so once the bubble settled: %s", what)
	}
}

func TestStatusRemAccessErr(t *testing.T) {
	noRemote := func(keep Access) func(p *pair) {
		return func(p *pair) {
			if err := p.qb.Modify(&QPAttr{AccessFlags: AccessLocalWrite | keep}, AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
		}
	}
	type env struct {
		p      *pair
		ma, mb *MR
	}
	write := func(e env, addr uint64, rkey wire.RKey) SendWR {
		return SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{e.ma.SGE(0, 64)}, RemoteAddr: addr, RKey: rkey}
	}
	read := func(e env, addr uint64, rkey wire.RKey) SendWR {
		return SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{e.ma.SGE(0, 64)}, RemoteAddr: addr, RKey: rkey}
	}
	faa := func(e env, addr uint64, rkey wire.RKey) SendWR {
		return SendWR{ID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{e.ma.SGE(0, 8)}, RemoteAddr: addr, RKey: rkey, CompareAdd: 1}
	}
	cas := func(e env, addr uint64, rkey wire.RKey) SendWR {
		return SendWR{ID: 1, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: []SGE{e.ma.SGE(0, 8)}, RemoteAddr: addr, RKey: rkey}
	}
	otherMR := func(e env, access Access) *MR {
		pd := e.p.pb
		mr, err := pd.RegMR(make([]byte, 4096), access)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	cases := []struct {
		name  string
		setup func(p *pair)
		wr    func(e env) SendWR
		op    WCOpcode
	}{
		{"write/bad-rkey", nil, func(e env) SendWR { return write(e, e.mb.Addr(), ^e.mb.RKey()) }, WCRDMAWrite},
		{"read/bad-rkey", nil, func(e env) SendWR { return read(e, e.mb.Addr(), ^e.mb.RKey()) }, WCRDMARead},
		{"fetch-add/bad-rkey", nil, func(e env) SendWR { return faa(e, e.mb.Addr(), ^e.mb.RKey()) }, WCFetchAdd},
		{"cmp-swap/bad-rkey", nil, func(e env) SendWR { return cas(e, e.mb.Addr(), ^e.mb.RKey()) }, WCCompSwap},
		{"write/qp-no-remote-write", noRemote(AccessRemoteRead | AccessRemoteAtomic),
			func(e env) SendWR { return write(e, e.mb.Addr(), e.mb.RKey()) }, WCRDMAWrite},
		{"read/qp-no-remote-read", noRemote(AccessRemoteWrite | AccessRemoteAtomic),
			func(e env) SendWR { return read(e, e.mb.Addr(), e.mb.RKey()) }, WCRDMARead},
		{"atomic/qp-no-remote-atomic", noRemote(AccessRemoteWrite | AccessRemoteRead),
			func(e env) SendWR { return faa(e, e.mb.Addr(), e.mb.RKey()) }, WCFetchAdd},
		{"write/out-of-bounds", nil, func(e env) SendWR { return write(e, e.mb.Addr()+uint64(e.mb.Len())-32, e.mb.RKey()) }, WCRDMAWrite},
		{"read/out-of-bounds", nil, func(e env) SendWR { return read(e, e.mb.Addr()+uint64(e.mb.Len())-32, e.mb.RKey()) }, WCRDMARead},
		{"read/below-region", nil, func(e env) SendWR { return read(e, e.mb.Addr()-64, e.mb.RKey()) }, WCRDMARead},
		{"atomic/out-of-bounds", nil, func(e env) SendWR { return faa(e, e.mb.Addr()+uint64(e.mb.Len()), e.mb.RKey()) }, WCFetchAdd},
		{"write/mr-without-remote-write", nil, func(e env) SendWR {
			mr := otherMR(e, AccessLocalWrite|AccessRemoteRead)
			return write(e, mr.Addr(), mr.RKey())
		}, WCRDMAWrite},
		{"atomic/mr-without-remote-atomic", nil, func(e env) SendWR {
			mr := otherMR(e, AccessLocalWrite|AccessRemoteWrite)
			return faa(e, mr.Addr(), mr.RKey())
		}, WCFetchAdd},
		{"write/mr-of-another-pd", nil, func(e env) SendWR {
			pd, err := e.p.db.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			mr, err := pd.RegMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			return write(e, mr.Addr(), mr.RKey())
		}, WCRDMAWrite},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			e := env{p: p, ma: p.reg(p.pa, 4096), mb: p.reg(p.pb, 4096)}
			if c.setup != nil {
				c.setup(p)
			}
			w := p.tap()
			// A receive at the responder, to see it flushed when the
			// responder's QP enters the error state.
			postRecv(t, p.qb, RecvWR{ID: 77, SGL: []SGE{e.mb.SGE(0, 64)}})
			post(t, p.qa, c.wr(e))

			checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemAccessErr, c.op)
			expectState(t, p.qa, StateErr)
			// IBTA class C: the responder NAKs, raises the local access
			// violation event and moves its QP to the error state.
			expectState(t, p.qb, StateErr)
			first, last := w.requestPSNs(t, p.da)
			w.expectNAK(t, p.db, wire.NAKRemoteAccess, first, last)
			if ev := expectEvent(t, p.db, EventQPAccessErr); ev.QP != p.qb {
				t.Fatalf("event for the wrong QP")
			}
			checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 77, WRFlushErr, WCRecv)
			expectNoWC(t, p.ca)
		})
	}
}

func TestStatusRemInvReqErr(t *testing.T) {
	t.Run("send-longer-than-receive", func(t *testing.T) {
		for _, c := range []struct {
			name       string
			recv, send int
		}{
			{"only", 100, 200},
			// The first packet fits; the second overflows (as in the
			// recv_too_small capture of Linux rxe).
			{"middle", 1500, 3000},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := newPair(t, pairOpts{mtu: MTU1024})
				ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
				w := p.tap()
				postRecv(t, p.qb, RecvWR{ID: 7, SGL: []SGE{mb.SGE(0, c.recv)}})
				post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, c.send)}})

				checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemInvReqErr, WCSend)
				expectState(t, p.qa, StateErr)
				first, last := w.requestPSNs(t, p.da)
				w.expectNAK(t, p.db, wire.NAKInvalidReq, first, last)
				// The responder's side is TestStatusLocLenErr's.
				expectState(t, p.qb, StateErr)
			})
		}
	})
	t.Run("misaligned-atomic", func(t *testing.T) {
		for _, op := range []WROpcode{WRAtomicFetchAndAdd, WRAtomicCmpAndSwp} {
			t.Run(op.String(), func(t *testing.T) {
				p := newPair(t, pairOpts{})
				ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
				w := p.tap()
				post(t, p.qa, SendWR{ID: 1, Opcode: op, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8)},
					RemoteAddr: mb.Addr() + 4, RKey: mb.RKey()})
				checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemInvReqErr, wrInfoOf(op).wc)
				expectState(t, p.qa, StateErr)
				expectState(t, p.qb, StateErr)
				first, last := w.requestPSNs(t, p.da)
				w.expectNAK(t, p.db, wire.NAKInvalidReq, first, last)
				if ev := expectEvent(t, p.db, EventQPReqErr); ev.QP != p.qb {
					t.Fatal("event for the wrong QP")
				}
				if got := mb.Buf()[:16]; string(got) != string(make([]byte, 16)) {
					t.Fatalf("misaligned atomic changed memory: % x", got)
				}
			})
		}
	})
}

func TestStatusRemOpErr(t *testing.T) {
	// The responder's receive WQE names memory with a bad lkey: the scatter
	// fails, the responder completes the receive with a local protection
	// error and NAKs with a remote operational error.
	p := newPair(t, pairOpts{})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	w := p.tap()
	bad := mb.SGE(0, 256)
	bad.LKey = ^bad.LKey
	postRecv(t, p.qb, RecvWR{ID: 9, SGL: []SGE{bad}})
	post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}})

	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemOpErr, WCSend)
	expectState(t, p.qa, StateErr)
	checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 9, LocProtErr, WCRecv)
	expectState(t, p.qb, StateErr)
	first, last := w.requestPSNs(t, p.da)
	w.expectNAK(t, p.db, wire.NAKRemoteOp, first, last)
}

func TestStatusLocLenErr(t *testing.T) {
	t.Run("rc-responder", func(t *testing.T) {
		p := newPair(t, pairOpts{mtu: MTU1024})
		ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
		w := p.tap()
		postRecv(t, p.qb, RecvWR{ID: 7, SGL: []SGE{mb.SGE(0, 1500)}}, RecvWR{ID: 8, SGL: []SGE{mb.SGE(4096, 64)}})
		post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 3000)}})

		wb := waitWC(t, p.cb, 2, waitFor)
		checkWC(t, wb[0], 7, LocLenErr, WCRecv)
		checkWC(t, wb[1], 8, WRFlushErr, WCRecv)
		expectState(t, p.qb, StateErr)
		if ev := expectEvent(t, p.db, EventQPReqErr); ev.QP != p.qb {
			t.Fatal("event for the wrong QP")
		}
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RemInvReqErr, WCSend)
		first, last := w.requestPSNs(t, p.da)
		w.expectNAK(t, p.db, wire.NAKInvalidReq, first, last)
	})
	t.Run("ud-receive-too-small", func(t *testing.T) {
		p := newPair(t, pairOpts{typ: UD})
		ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
		ah, err := p.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0]})
		if err != nil {
			t.Fatal(err)
		}
		ud := func(id uint64, n int) SendWR {
			return SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, n)},
				AH: ah, RemoteQPN: p.qb.QPN(), RemoteQKey: 0x11111111}
		}
		// Room for the 40-byte GRH and 50 bytes: a 100-byte datagram does
		// not fit. UD has no acknowledgements: the sender sees success.
		postRecv(t, p.qb, RecvWR{ID: 5, SGL: []SGE{mb.SGE(0, grhLen+50)}})
		post(t, p.qa, ud(1, 100))
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCSend)
		checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 5, LocLenErr, WCRecv)
		// A UD receive error affects only that WQE (IBTA class D; rxe
		// likewise): the QP keeps working.
		expectState(t, p.qb, StateRTS)
		postRecv(t, p.qb, RecvWR{ID: 6, SGL: []SGE{mb.SGE(0, grhLen+100)}})
		post(t, p.qa, ud(2, 100))
		checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 2, Success, WCSend)
		wc := waitWC(t, p.cb, 1, waitFor)[0]
		checkWC(t, wc, 6, Success, WCRecv)
		if wc.ByteLen != grhLen+100 {
			t.Fatalf("byte_len %d", wc.ByteLen)
		}
	})
	t.Run("ud-send-above-port-mtu", func(t *testing.T) {
		// C10-93.1.1: a UD message longer than the port MTU is not sent,
		// and that is not an error (Linux rxe completes it successfully).
		// So this is not a LOC_LEN_ERR, and the QP stays in RTS.
		p := newPair(t, pairOpts{typ: UD, devOpts: &Options{MTU: MTU1024}})
		ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
		w := p.tap()
		ah, err := p.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0]})
		if err != nil {
			t.Fatal(err)
		}
		ud := func(id uint64, n int) SendWR {
			return SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, n)},
				AH: ah, RemoteQPN: p.qb.QPN(), RemoteQKey: 0x11111111}
		}
		postRecv(t, p.qb, RecvWR{ID: 5, SGL: []SGE{mb.SGE(0, 4096)}})
		post(t, p.qa, ud(1, 1025), ud(2, 1024))
		wa := waitWC(t, p.ca, 2, waitFor)
		checkWC(t, wa[0], 1, Success, WCSend)
		checkWC(t, wa[1], 2, Success, WCSend)
		expectState(t, p.qa, StateRTS)
		// Only the 1024-byte datagram (the port MTU) went out and arrived.
		wc := waitWC(t, p.cb, 1, waitFor)[0]
		checkWC(t, wc, 5, Success, WCRecv)
		if wc.ByteLen != grhLen+1024 {
			t.Fatalf("received %d bytes, want the 1024-byte datagram", wc.ByteLen-grhLen)
		}
		if reqs := w.all(both(from(p.da), isRequest)); len(reqs) != 1 || reqs[0].payload != 1024 {
			t.Fatalf("requests on the wire: %+v", reqs)
		}
	})
}

func TestStatusLocProtErr(t *testing.T) {
	cases := []struct {
		name    string
		wr      func(p *pair, ma, mb *MR) SendWR
		op      WCOpcode
		onWire  bool // the request goes out; the error is on the response
		peerErr bool
	}{
		{"send/bad-lkey", func(p *pair, ma, mb *MR) SendWR {
			s := ma.SGE(0, 100)
			s.LKey = ^s.LKey
			return SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(200, 10), s}}
		}, WCSend, false, false},
		{"write/bad-lkey", func(p *pair, ma, mb *MR) SendWR {
			s := ma.SGE(0, 3000)
			s.LKey = ^s.LKey
			return SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
		}, WCRDMAWrite, false, false},
		{"send/mr-of-another-pd", func(p *pair, ma, mb *MR) SendWR {
			pd, err := p.da.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			other, err := pd.RegMR(make([]byte, 4096), AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			return SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{other.SGE(0, 100)}}
		}, WCSend, false, false},
		{"send/beyond-mr", func(p *pair, ma, mb *MR) SendWR {
			return SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(ma.Len()-10, 100)}}
		}, WCSend, false, false},
		{"read/bad-lkey-for-response", func(p *pair, ma, mb *MR) SendWR {
			s := ma.SGE(0, 100)
			s.LKey = ^s.LKey
			return SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{s}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
		}, WCRDMARead, true, false},
		{"atomic/bad-lkey-for-response", func(p *pair, ma, mb *MR) SendWR {
			s := ma.SGE(0, 8)
			s.LKey = ^s.LKey
			return SendWR{ID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{s}, RemoteAddr: mb.Addr(), RKey: mb.RKey(), CompareAdd: 1}
		}, WCFetchAdd, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
			w := p.tap()
			postRecv(t, p.qb, RecvWR{ID: 7, SGL: []SGE{mb.SGE(0, 4096)}})
			post(t, p.qa, c.wr(p, ma, mb))
			checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, LocProtErr, c.op)
			expectState(t, p.qa, StateErr)
			reqs := w.all(both(from(p.da), isRequest))
			if c.onWire != (len(reqs) > 0) {
				t.Fatalf("%d requests on the wire", len(reqs))
			}
			if naks := w.all(isNAK); len(naks) != 0 {
				t.Fatalf("NAKs on the wire: %+v", naks)
			}
			// The responder saw nothing wrong.
			expectState(t, p.qb, StateRTS)
			expectNoWC(t, p.cb)
			expectNoEvent(t, p.db)
		})
	}
}

func TestStatusWRFlushErr(t *testing.T) {
	t.Run("after-an-error", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
		postRecv(t, p.qa, RecvWR{ID: 50, SGL: []SGE{ma.SGE(2048, 64)}}, RecvWR{ID: 51, SGL: []SGE{ma.SGE(3072, 64)}})
		postRecv(t, p.qb, RecvWR{ID: 60, SGL: []SGE{mb.SGE(0, 64)}})
		bad := ma.SGE(0, 10)
		bad.LKey = ^bad.LKey
		// The first request fails locally; the rest, signaled or not, are
		// flushed, and so are the receives.
		post(t, p.qa,
			SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{bad}},
			SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 10)}},
			SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 10)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()},
			SendWR{ID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 10)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()},
		)
		wc := waitWC(t, p.ca, 6, waitFor)
		var sends, recvs []WC
		for _, c := range wc {
			if c.Opcode == WCRecv {
				recvs = append(recvs, c)
			} else {
				sends = append(sends, c)
			}
		}
		checkWC(t, sends[0], 1, LocProtErr, WCSend)
		checkWC(t, sends[1], 2, WRFlushErr, WCSend)
		checkWC(t, sends[2], 3, WRFlushErr, WCRDMAWrite)
		checkWC(t, sends[3], 4, WRFlushErr, WCRDMARead)
		checkWC(t, recvs[0], 50, WRFlushErr, WCRecv)
		checkWC(t, recvs[1], 51, WRFlushErr, WCRecv)
		expectState(t, p.qa, StateErr)

		// Requests posted in the error state are flushed at once.
		post(t, p.qa, SendWR{ID: 5, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 10)}})
		postRecv(t, p.qa, RecvWR{ID: 52, SGL: []SGE{ma.SGE(0, 10)}})
		wc = waitWC(t, p.ca, 2, waitFor)
		checkWC(t, wc[0], 5, WRFlushErr, WCSend)
		checkWC(t, wc[1], 52, WRFlushErr, WCRecv)
		expectNoWC(t, p.ca)
		// Nothing reached the peer, whose receive is still posted.
		expectState(t, p.qb, StateRTS)
		expectNoWC(t, p.cb)
	})
	t.Run("modify-to-err", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		mb := p.reg(p.pb, 4096)
		postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}}, RecvWR{ID: 2, SGL: []SGE{mb.SGE(64, 64)}}, RecvWR{ID: 3})
		expectNoWC(t, p.cb)
		if err := p.qb.Modify(&QPAttr{State: StateErr}, AttrState); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, p.cb, 3, waitFor)
		expectNoEvent(t, p.db) // no SRQ: no last-WQE event
		for i, c := range wc {
			checkWC(t, c, uint64(i+1), WRFlushErr, WCRecv)
			if c.QPNum != p.qb.QPN() {
				t.Fatalf("qp_num %d", c.QPNum)
			}
		}
		expectNoWC(t, p.cb)
	})
}

func TestStatusRetryExcErr(t *testing.T) {
	for _, retry := range []uint8{1, 3, 7} {
		t.Run(fmt.Sprintf("retry_cnt=%d", retry), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t, pairOpts{retry: retry, timeout: 12})
				ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
				w := p.tap()
				w.setDrop(func(*tapped) bool { return true }) // the peer is gone
				postRecv(t, p.qb, RecvWR{ID: 9, SGL: []SGE{mb.SGE(0, 4096)}})
				post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}})
				sent := func() int { return len(w.all(both(from(p.da), isRequest))) }
				if n := sent(); n != 1 {
					t.Fatalf("%d packets sent, want 1", n)
				}
				timeout := wire.ACKTimeout(12)
				for i := 1; i <= int(retry); i++ {
					advance(timeout)
					if n := sent(); n != 1+i {
						t.Fatalf("after %d timeouts: %d packets sent, want %d", i, n, 1+i)
					}
					expectNoWC(t, p.ca)
					expectState(t, p.qa, StateRTS)
				}
				advance(timeout)
				checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RetryExcErr, WCSend)
				expectState(t, p.qa, StateErr)
				if n := sent() - 1; n != int(retry) {
					t.Fatalf("%d retransmissions, want retry_cnt = %d", n, retry)
				}
				// No response reached anyone; the peer's receive is untouched.
				if acks := w.all(func(tp *tapped) bool { return tp.aeth }); len(acks) != 0 {
					t.Fatalf("acknowledgements on the wire: %+v", acks)
				}
				advance(10 * timeout)
				if n := sent() - 1; n != int(retry) {
					t.Fatalf("retransmitted after the error: %d", n)
				}
				expectState(t, p.qb, StateRTS)
				expectNoWC(t, p.cb)
			})
		})
	}
}

// waitRNRWait checks, in a synctest bubble, that qp's requester has taken an RNR NAK and is waiting
// for its RNR timer once the bubble settles.
func waitRNRWait(t *testing.T, qp *QP) {
	t.Helper()
	settled(t, "the requester takes the RNR NAK", func() bool {
		qp.mu.Lock()
		defer qp.mu.Unlock()
		return qp.req.Mode() == requester.RNRWait
	})
}

func TestStatusRNRRetryExcErr(t *testing.T) {
	for _, rnr := range []uint8{1, 2, 6} {
		t.Run(fmt.Sprintf("rnr_retry=%d", rnr), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const minRNR = 14 // 1.28 ms
				p := newPair(t, pairOpts{rnr: rnr, minRNR: minRNR})
				ma := p.reg(p.pa, 4096)
				w := p.tap()
				// No receive is posted at the responder.
				post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}})
				for i := 1; i <= int(rnr); i++ {
					waitRNRWait(t, p.qa)
					expectNoWC(t, p.ca)
					advance(wire.RNRTimerDuration(minRNR))
				}
				checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, RNRRetryExcErr, WCSend)
				expectState(t, p.qa, StateErr)
				// RNR is IBTA class B: the responder's QP is unaffected.
				expectState(t, p.qb, StateRTS)
				expectNoEvent(t, p.db)

				rnrs := w.all(both(from(p.db), isRNR))
				reqs := w.all(both(from(p.da), isRequest))
				if len(rnrs) != int(rnr)+1 || len(reqs) != int(rnr)+1 {
					t.Fatalf("%d requests and %d RNR NAKs, want %d of each (rnr_retry %d)", len(reqs), len(rnrs), rnr+1, rnr)
				}
				for i, n := range rnrs {
					if n.syn.Value() != minRNR || n.psn != reqs[i].psn {
						t.Fatalf("RNR NAK %d: %v PSN %#x, want timer code %d PSN %#x", i, n.syn, n.psn, minRNR, reqs[i].psn)
					}
				}
				if naks := w.all(isNAK); len(naks) != 0 {
					t.Fatalf("NAKs: %+v", naks)
				}
			})
		})
	}
}

func TestStatusRNRRecovery(t *testing.T) {
	for _, rnr := range []uint8{7, 3} {
		t.Run(fmt.Sprintf("rnr_retry=%d", rnr), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const minRNR = 1 // 10 us
				p := newPair(t, pairOpts{rnr: rnr, minRNR: minRNR})
				ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
				copy(ma.Buf(), "not ready yet")
				w := p.tap()
				post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 13)}})
				for range 2 {
					waitRNRWait(t, p.qa)
					advance(wire.RNRTimerDuration(minRNR))
				}
				waitRNRWait(t, p.qa)
				postRecv(t, p.qb, RecvWR{ID: 2, SGL: []SGE{mb.SGE(0, 64)}})
				advance(wire.RNRTimerDuration(minRNR))

				checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCSend)
				wc := waitWC(t, p.cb, 1, waitFor)[0]
				checkWC(t, wc, 2, Success, WCRecv)
				if wc.ByteLen != 13 || string(mb.Buf()[:13]) != "not ready yet" {
					t.Fatalf("received %d bytes %q", wc.ByteLen, mb.Buf()[:13])
				}
				if n := len(w.all(both(from(p.db), isRNR))); n != 3 {
					t.Fatalf("%d RNR NAKs, want 3", n)
				}
				expectState(t, p.qa, StateRTS)
				expectState(t, p.qb, StateRTS)
			})
		})
	}
}

func TestStatusBadRespErr(t *testing.T) {
	// A responder answering a 100-byte READ with a 50-byte READ_RESPONSE_ONLY
	// is a malformed response. The loop Filter rewrites the real response
	// and reseals its ICRC.
	p := newPair(t, pairOpts{})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	var rewritten atomic.Int32
	var buildErr atomic.Value
	p.net.SetFaults(loop.Faults{Filter: func(lp *link.Packet) bool {
		pkt, err := wire.Parse(lp.Data())
		if err != nil || pkt.Opcode() != wire.RCReadResponseOnly {
			return false
		}
		h := wire.Headers{BTH: pkt.BTH().Fields(), AETH: pkt.AETH().Fields()}
		payload := append([]byte(nil), pkt.Payload()[:50]...)
		n, err := wire.Build(lp.Buf, &h, payload)
		if err != nil {
			buildErr.Store(err)
			return true
		}
		lp.N = n
		fr := wire.Framing{Src: lp.Src.Addr(), Dst: lp.Dst.Addr(), SrcPort: lp.Src.Port(), DstPort: lp.Dst.Port(),
			IPv4Frag: wire.IPv4DontFragment}
		wire.Seal(&fr, lp.Data())
		rewritten.Add(1)
		return false
	}})
	post(t, p.qa,
		SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()},
		SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()},
	)
	wc := waitWC(t, p.ca, 2, waitFor)
	if err, _ := buildErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	if rewritten.Load() != 1 {
		t.Fatalf("%d responses rewritten", rewritten.Load())
	}
	checkWC(t, wc[0], 1, BadRespErr, WCRDMARead)
	// The WRITE after it may have reached the responder, but its
	// completion is flushed: the requester is in the error state.
	checkWC(t, wc[1], 2, WRFlushErr, WCRDMAWrite)
	expectState(t, p.qa, StateErr)
	expectState(t, p.qb, StateRTS)
}
