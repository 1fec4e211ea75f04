// Duplicate requests at the responder (IBTA 9.7.5.1.1): a stale or forged
// READ or atomic behind the expected PSN is answered only when it repeats
// one the responder executed, and never changes the QP's state. The
// requests are crafted and sent from the requester's link, over link/loop
// and over real UDP sockets; what the responder answers is recorded where
// the requester's device receives it.

package verbs

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// rxRecord is one packet a device received, as an rxLog keeps it.
type rxRecord struct {
	qpn     wire.QPN
	op      wire.Opcode
	psn     wire.PSN
	payload []byte
	atomic  uint64 // AtomicAckETH, for atomic acknowledgements
	at      time.Time
}

// rxLog records every packet a device receives (see observed).
type rxLog struct {
	mu   sync.Mutex
	pkts []rxRecord
}

func (l *rxLog) add(p *link.Packet) {
	pkt, err := wire.Parse(p.Data())
	if err != nil {
		return
	}
	r := rxRecord{qpn: pkt.BTH().DestQP(), op: pkt.Opcode(), psn: pkt.BTH().PSN(), payload: bytes.Clone(pkt.Payload()), at: time.Now()}
	if v := pkt.AtomicAckETH(); v != nil {
		r.atomic = v.Orig()
	}
	l.mu.Lock()
	l.pkts = append(l.pkts, r)
	l.mu.Unlock()
}

// since returns the packets received after the first n.
func (l *rxLog) since(n int) []rxRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rxRecord(nil), l.pkts[n:]...)
}

func (l *rxLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pkts)
}

// observed is a link whose received packets are recorded before the
// device's handler sees them.
type observed struct {
	link.Link
	log *rxLog
}

func (o observed) Start(h link.Handler) error {
	return o.Link.Start(link.HandlerFunc(func(batch []*link.Packet) {
		for _, p := range batch {
			o.log.add(p)
		}
		h.Receive(batch)
	}))
}

// newObservedPair connects an RC pair over transport ("loop", "udp4" or
// "udp6") with the requester's (da's) received packets recorded.
func newObservedPair(t *testing.T, transport string) (*pair, *rxLog) {
	t.Helper()
	log := new(rxLog)
	wrap := func(l link.Link) link.Link { return observed{l, log} }
	p := &pair{t: t}
	switch transport {
	case "loop":
		n := loop.NewNetwork(loop.Config{QueueLen: 8192})
		la, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.2")}, 4791)
		if err != nil {
			t.Fatal(err)
		}
		if p.da, err = Open(wrap(la), nil); err != nil {
			t.Fatal(err)
		}
		if p.db, err = Open(lb, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.da.Close()
			p.db.Close()
			n.Close()
		})
		p.net = n
	default:
		p.da, p.db = newDevicesUDPWrapped(t, transport == "udp6", wrap)
	}
	// An ACK timeout of 134 ms (not the 17 ms default): the checks count
	// the responses to each request, and a retransmission after a
	// scheduling stall on a loaded machine (CI saw a 20 ms one) would
	// answer it twice.
	p.connect(pairOpts{mtu: MTU1024, timeout: 15})
	return p, log
}

// injectRequest sends a request to qb from qa's device and address, as qa
// would, but outside qa's send queue.
func (p *pair) injectRequest(h *wire.Headers) {
	p.t.Helper()
	h.BTH.PKey, h.BTH.DestQP = wire.DefaultPKey, p.qb.qpn
	pk := link.Get()
	defer link.Put(pk)
	hl, err := wire.WriteHeaders(pk.Buf, h, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	pk.N = hl + wire.ICRCLen
	pk.Src, pk.Dst = netipAddrPort(p.qa.src), p.qa.dst
	if err := p.da.Link().Send([]*link.Packet{pk}); err != nil {
		p.t.Fatal(err)
	}
}

func readRequest(psn wire.PSN, rkey wire.RKey, va uint64, n int) *wire.Headers {
	return &wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.RCReadRequest, PSN: psn, AckReq: true},
		RETH: wire.RETHFields{VA: va, RKey: wire.RKey(rkey), DMALen: uint32(n)},
	}
}

// TestDuplicateRequests: stale and forged duplicates of a READ and of an
// atomic, each followed by a legitimate READ, WRITE and SEND that must
// complete with the right data on the same QPs.
func TestDuplicateRequests(t *testing.T) {
	leakcheck.Check(t)
	for _, tr := range []string{"loop", "udp4", "udp6"} {
		t.Run(tr, func(t *testing.T) { testDuplicateRequests(t, tr) })
	}
}

func testDuplicateRequests(t *testing.T, transport string) {
	p, rx := newObservedPair(t, transport)
	const readLen, readOff = 4 * 1024, 1024
	ma, mb, mc := p.reg(p.pa, 64*1024), p.reg(p.pb, 64*1024), p.reg(p.pb, 64*1024)
	for i := range mb.Buf() {
		mb.Buf()[i] = byte(i*7 + i>>10)
	}
	for i := range mc.Buf() {
		mc.Buf()[i] = 0xC5 // must never reach the requester
	}

	// legit runs a READ, a WRITE and a SEND on the pair and checks the data,
	// showing the connection is alive after whatever came before.
	legitID := uint64(100)
	legit := func() {
		t.Helper()
		legitID += 10
		id := legitID
		buf := ma.Buf()[32*1024:]
		postRecv(t, p.qb, RecvWR{ID: id, SGL: []SGE{mb.SGE(48*1024, 1024)}})
		for i := range buf[:3*1024] {
			buf[i] = byte(int(id) + i)
		}
		post(t, p.qa,
			SendWR{ID: id, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(40*1024, 2048)},
				RemoteAddr: mb.Addr() + 8*1024, RKey: mb.RKey()},
			SendWR{ID: id + 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(32*1024, 2048)},
				RemoteAddr: mb.Addr() + 32*1024, RKey: mb.RKey()},
			SendWR{ID: id + 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(34*1024, 1024)}})
		wc := waitWC(t, p.ca, 3, waitFor)
		checkWC(t, wc[0], id, Success, WCRDMARead)
		checkWC(t, wc[1], id+1, Success, WCRDMAWrite)
		checkWC(t, wc[2], id+2, Success, WCSend)
		checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], id, Success, WCRecv)
		if !bytes.Equal(ma.Buf()[40*1024:42*1024], mb.Buf()[8*1024:10*1024]) ||
			!bytes.Equal(mb.Buf()[32*1024:34*1024], buf[:2048]) ||
			!bytes.Equal(mb.Buf()[48*1024:49*1024], buf[2048:3072]) {
			t.Fatal("data differs after a duplicate request")
		}
		expectState(t, p.qa, StateRTS)
		expectState(t, p.qb, StateRTS)
		expectNoEvent(t, p.da)
		expectNoEvent(t, p.db)
	}

	// The READ that the duplicates below repeat, or pretend to.
	mark := rx.len()
	t0 := time.Now()
	post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, readLen)},
		RemoteAddr: mb.Addr() + readOff, RKey: mb.RKey()})
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 1, Success, WCRDMARead)
	resps := rx.since(mark)
	if len(resps) != 4 || resps[0].op != wire.RCReadResponseFirst {
		for _, r := range resps {
			t.Logf("op %v psn %#x payload %d at +%v", r.op, r.psn, len(r.payload), r.at.Sub(t0))
		}
		for _, d := range []*Device{p.da, p.db} {
			st := d.Stats()
			t.Logf("%s: dup %d outofseq %d dupdropped %d link %+v", d.Name(), st.RxDuplicate.Load(), st.RxOutOfSeq.Load(), st.RxDuplicateDropped.Load(), d.link.Stats())
		}
		t.Fatalf("READ answered with %d packets", len(resps))
	}
	first := resps[0].psn
	legit()

	dropped := func() uint64 { return p.db.Stats().RxDuplicateDropped.Load() }
	// answers injects h and returns what the responder sent for it: the
	// packets with PSNs in the span of the request it repeats, [first,
	// first+span). The legitimate transfer after it is answered only once
	// the injected request has been handled (one socket, one QP, in order).
	span := 4
	answers := func(h *wire.Headers) []rxRecord {
		t.Helper()
		mark := rx.len()
		p.injectRequest(h)
		legit()
		var out []rxRecord
		for _, r := range rx.since(mark) {
			if d := r.psn.Diff(first); d >= 0 && d < int32(span) {
				out = append(out, r)
			}
		}
		return out
	}
	expectDropped := func(what string, h *wire.Headers) {
		t.Helper()
		before := dropped()
		if got := answers(h); len(got) != 0 {
			t.Fatalf("%s: answered with %d packets, want none", what, len(got))
		}
		if dropped() != before+1 {
			t.Fatalf("%s: RxDuplicateDropped %d, want %d", what, dropped(), before+1)
		}
	}

	va := mb.Addr() + readOff
	expectDropped("invalid R_Key", readRequest(first, mb.RKey()^0x80, va, readLen))
	expectDropped("another MR's R_Key", readRequest(first, mc.RKey(), mc.Addr(), readLen))
	expectDropped("more than the original", readRequest(first, mb.RKey(), va, 4*readLen))
	expectDropped("range past the original's end", readRequest(first.Add(2), mb.RKey(), va+2048, 3*1024))
	expectDropped("VA not the PSN's offset", readRequest(first.Add(2), mb.RKey(), va, 1024))
	expectDropped("PSN outside every executed READ", readRequest(first.Add(-3), mb.RKey(), va, readLen))

	// A requester that lost responses asks again from the middle: the
	// answer starts at that PSN and holds exactly the range asked for.
	got := answers(readRequest(first.Add(2), mb.RKey(), va+2048, 1024))
	if len(got) != 1 || got[0].op != wire.RCReadResponseOnly || got[0].psn != first.Add(2) ||
		!bytes.Equal(got[0].payload, mb.Buf()[readOff+2048:readOff+3072]) {
		t.Fatalf("re-ask of response 2: answered %+v", got)
	}
	got = answers(readRequest(first.Add(1), mb.RKey(), va+1024, 3*1024))
	if len(got) != 3 || got[0].op != wire.RCReadResponseFirst || got[2].op != wire.RCReadResponseLast {
		t.Fatalf("re-ask of responses 1-3: answered %d packets", len(got))
	}
	for i, r := range got {
		off := readOff + (1+i)*1024
		if r.psn != first.Add(1+i) || !bytes.Equal(r.payload, mb.Buf()[off:off+1024]) {
			t.Fatalf("re-ask response %d: PSN %#x, data right %v", i, r.psn, bytes.Equal(r.payload, mb.Buf()[off:off+1024]))
		}
	}
	if got = answers(readRequest(first, mb.RKey(), va, readLen)); len(got) != 4 {
		t.Fatalf("exact duplicate answered with %d packets, want 4", len(got))
	}

	// A READ whose memory has been deregistered since: dropped, the QP lives.
	md := p.reg(p.pb, 8192)
	mark = rx.len()
	post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 2048)},
		RemoteAddr: md.Addr(), RKey: md.RKey()})
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 2, Success, WCRDMARead)
	first, span = rx.since(mark)[0].psn, 2
	if err := md.Dereg(); err != nil {
		t.Fatal(err)
	}
	expectDropped("MR deregistered", readRequest(first, md.RKey(), md.Addr(), 2048))

	// Atomics: a duplicate is answered with the saved result, not executed
	// again, and only if it repeats the executed one.
	binary.NativeEndian.PutUint64(mb.Buf()[56*1024:], 40)
	mark = rx.len()
	post(t, p.qa, SendWR{ID: 3, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8)},
		RemoteAddr: mb.Addr() + 56*1024, RKey: mb.RKey(), CompareAdd: 2})
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 3, Success, WCFetchAdd)
	first, span = rx.since(mark)[0].psn, 1
	faa := func(rkey wire.RKey, va uint64) *wire.Headers {
		return &wire.Headers{
			BTH:    wire.BTHFields{Opcode: wire.RCFetchAdd, PSN: first, AckReq: true},
			Atomic: wire.AtomicETHFields{VA: va, RKey: wire.RKey(rkey), SwapAdd: 2},
		}
	}
	expectDropped("atomic at another VA", faa(mb.RKey(), mb.Addr()+56*1024+8))
	expectDropped("atomic with another R_Key", faa(mc.RKey(), mc.Addr()))
	if got := answers(faa(mb.RKey(), mb.Addr()+56*1024)); len(got) != 1 || got[0].op != wire.RCAtomicAcknowledge || got[0].atomic != 40 {
		t.Fatalf("duplicate atomic answered %+v, want its saved result 40", got)
	}
	if v := binary.NativeEndian.Uint64(mb.Buf()[56*1024:]); v != 42 {
		t.Fatalf("target holds %d after a duplicate atomic, want 42 (executed once)", v)
	}
}

// FuzzStaleRequests sends sequences of requests behind the responder's
// expected PSN (READs, atomics, SENDs and WRITEs, with PSNs inside and
// outside the executed READ's and atomic's, right and wrong R_Keys, VAs and
// lengths) and checks that none changes the QP's state or answers from
// memory other than what was executed, and that the connection then still
// carries a READ and an atomic correctly. Each 8 input bytes make one
// request.
func FuzzStaleRequests(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 16})
	f.Add([]byte{0, 2, 0, 2, 0, 0, 0, 4, 1, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 1, 0, 0, 0, 0, 16, 2, 3, 2, 5, 9, 9, 9, 9, 3, 200, 0, 0, 0, 0, 0, 1})
	p := newPair(f, pairOpts{mtu: MTU1024})
	ma, mb, mc := p.reg(p.pa, 64*1024), p.reg(p.pb, 64*1024), p.reg(p.pb, 64*1024)
	for i := range mb.Buf() {
		mb.Buf()[i] = byte(i*7 + i>>10)
	}
	for i := range mc.Buf() {
		mc.Buf()[i] = 0xC5 // must never reach the requester
	}
	// Executed once, so the replay table holds a READ and an atomic.
	post(f, p.qa, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 4096)},
		RemoteAddr: mb.Addr() + 1024, RKey: mb.RKey()},
		SendWR{ID: 2, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(8192, 8)},
			RemoteAddr: mb.Addr() + 60*1024, RKey: mb.RKey(), CompareAdd: 1})
	waitWC(f, p.ca, 2, waitFor)
	// And an ATOMIC_WRITE and a FLUSH (flush.go).
	awValue := AtomicWriteValue(0x5A5A_1234_8765_A5A5)
	post(f, p.qa, SendWR{ID: 3, Opcode: WRAtomicWrite, Flags: SendSignaled, Inline: awValue, RemoteAddr: mb.Addr() + 62*1024, RKey: mb.RKey()},
		SendWR{ID: 4, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: mb.Addr(), RKey: mb.RKey(),
			Flush: FlushSpec{Len: 4096, Type: FlushGlobal}})
	waitWC(f, p.ca, 2, waitFor)
	pattern := bytes.Clone(mb.Buf()[:60*1024])
	p.qb.mu.Lock()
	res := append([]rdRes(nil), p.qb.resp.res...)
	p.qb.mu.Unlock()
	var readRes, atomicRes, awRes, flushRes rdRes
	for _, r := range res {
		switch r.kind {
		case resRead:
			readRes = r
		case resAtomic:
			atomicRes = r
		case resAtomicWrite:
			awRes = r
		case resFlush:
			flushRes = r
		}
	}
	ops := []wire.Opcode{wire.RCReadRequest, wire.RCFetchAdd, wire.RCCompareSwap, wire.RCSendOnly,
		wire.RCSendFirst, wire.RCSendMiddle, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCSendOnlyInv,
		wire.RCAtomicWrite, wire.RCFlush}
	id := uint64(10)
	f.Fuzz(func(t *testing.T, data []byte) {
		for len(data) >= 8 {
			c := data[:8]
			data = data[8:]
			p.qb.mu.Lock()
			expected := p.qb.resp.psn
			p.qb.mu.Unlock()
			var h wire.Headers
			h.BTH = wire.BTHFields{Opcode: ops[int(c[0])%len(ops)], PKey: wire.DefaultPKey, DestQP: p.qb.qpn, AckReq: c[1]&1 != 0}
			// A PSN inside the executed READ's, atomic's, ATOMIC_WRITE's
			// or FLUSH's, or any behind.
			switch c[2] % 5 {
			case 0:
				h.BTH.PSN = readRes.psn.Add(int(c[1]) % 6)
			case 1:
				h.BTH.PSN = atomicRes.psn.Add(int(c[1])%3 - 1)
			case 2:
				h.BTH.PSN = awRes.psn.Add(int(c[1])%3 - 1)
			case 3:
				h.BTH.PSN = flushRes.psn.Add(int(c[1])%3 - 1)
			default:
				h.BTH.PSN = expected.Add(-1 - int(c[1]))
			}
			if h.BTH.PSN.Diff(expected) >= 0 {
				continue // not stale: this target is about duplicates
			}
			rkeys := []wire.RKey{mb.RKey(), mc.RKey(), mb.RKey() ^ 0x80, wire.RKey(binary.BigEndian.Uint32(c[4:]))}
			rkey := wire.RKey(rkeys[int(c[3])%len(rkeys)])
			va := mb.Addr() + uint64(c[5])*256
			if c[3]&4 != 0 {
				va = mc.Addr() + uint64(c[5])*256
			}
			n := int(c[7]) * 256
			info := h.BTH.Opcode.Info()
			switch {
			case info.Is(wire.FlagAtomic):
				h.Atomic = wire.AtomicETHFields{VA: va &^ 7, RKey: rkey, SwapAdd: uint64(c[6]), Compare: 1}
			case info.Has(wire.HdrRETH):
				h.RETH = wire.RETHFields{VA: va, RKey: rkey, DMALen: uint32(n)}
			}
			if c[3]&8 != 0 && info.Is(wire.FlagAtomicWrite) {
				h.RETH.VA = mb.Addr() + 62*1024 // the executed one's target
			}
			h.FETH = wire.FETHFields{Selectivity: c[6] >> 4 & 3, PlacementType: c[6] & 0xF}
			payload := 0
			if info.Has(wire.HdrPayload) && !info.Is(wire.FlagRead) {
				payload = min(n, 1024)
			}
			if info.FixedPayload >= 0 {
				payload = info.FixedPayload
			}
			pk := link.Get()
			hl, err := wire.WriteHeaders(pk.Buf, &h, payload)
			if err != nil {
				link.Put(pk)
				t.Fatal(err)
			}
			end := hl + payload + wire.PadFor(payload)
			clear(pk.Buf[hl:end])
			if info.Is(wire.FlagAtomicWrite) {
				copy(pk.Buf[hl:], "stale!!!") // never to be stored
			}
			pk.N = end + wire.ICRCLen
			pk.Src, pk.Dst = netipAddrPort(p.qa.src), p.qa.dst
			p.db.receive([]*link.Packet{pk})
			link.Put(pk)
		}
		expectState(t, p.qb, StateRTS)
		expectNoEvent(t, p.db)
		// The connection still works, and READ answers only what it should.
		id += 2
		want := binary.NativeEndian.Uint64(mb.Buf()[60*1024:])
		post(t, p.qa, SendWR{ID: id, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(16*1024, 2048)},
			RemoteAddr: mb.Addr() + 2048, RKey: mb.RKey()},
			SendWR{ID: id + 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(8192, 8)},
				RemoteAddr: mb.Addr() + 60*1024, RKey: mb.RKey(), CompareAdd: 1})
		wc := waitWC(t, p.ca, 2, waitFor)
		checkWC(t, wc[0], id, Success, WCRDMARead)
		checkWC(t, wc[1], id+1, Success, WCFetchAdd)
		if !bytes.Equal(ma.Buf()[16*1024:18*1024], mb.Buf()[2048:4096]) {
			t.Fatal("READ data differs after stale requests")
		}
		if got := binary.NativeEndian.Uint64(ma.Buf()[8192:]); got != want {
			t.Fatalf("FETCH_AND_ADD returned %d, want %d", got, want)
		}
		if bytes.Contains(ma.Buf(), bytes.Repeat([]byte{0xC5}, 8)) {
			t.Fatal("another MR's memory reached the requester")
		}
		// No stale WRITE or ATOMIC_WRITE was executed.
		if !bytes.Equal(mb.Buf()[:60*1024], pattern) || !bytes.Equal(mb.Buf()[62*1024:62*1024+8], awValue) {
			t.Fatal("a stale request changed the responder's memory")
		}
		expectState(t, p.qa, StateRTS)
		expectNoEvent(t, p.da)
	})
}
