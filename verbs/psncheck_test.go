// Invariants the stress harness checks on every run (runPipeline): PSNs are
// never reused for a different request, and the responder's replay table
// stays consistent. They were proposed to tell a protocol bug from
// legitimate retry exhaustion in the rare RETRY_EXC_ERR of the loss
// profiles (docs/DESIGN.md, "Liveness under loss").

package verbs

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// psnChecker watches every request packet on the wire (a loop Filter) and
// records, per destination QP and PSN, a digest of what the packet asks:
// its opcode and everything after the BTH (extension headers and payload).
// A retransmission of a request carries the same PSN and the same bytes (a
// READ asked again from response k uses PSN first+k and the VA that k
// implies, every time; its length may be shorter), so a PSN seen again with other contents
// means the requester gave one PSN to two different requests, which the
// responder would take for a duplicate of the first.
type psnChecker struct {
	mu   sync.Mutex
	seen map[uint64]uint64 // QPN<<24 | PSN -> digest
	errs []string
}

func newPSNChecker() *psnChecker { return &psnChecker{seen: make(map[uint64]uint64)} }

// filter is the loop Filter: it drops nothing.
func (c *psnChecker) filter(p *link.Packet) bool {
	pkt, err := wire.Parse(p.Data())
	if err != nil || pkt.Info().Is(wire.FlagResponse) {
		return false
	}
	b := pkt.Bytes()
	h := fnv.New64a()
	h.Write([]byte{byte(pkt.Opcode())})
	if pkt.Opcode() == wire.RCReadRequest {
		// A READ asked again may ask for part of the rest only (a
		// requester limits a re-ask's length); where it starts is fixed.
		r := pkt.RETH()
		fmt.Fprint(h, r.VA(), r.RKey())
	} else {
		h.Write(b[wire.BTHLen : len(b)-wire.ICRCLen])
	}
	d := h.Sum64()
	key := uint64(pkt.BTH().DestQP())<<24 | uint64(pkt.BTH().PSN())
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.seen[key]; !ok {
		c.seen[key] = d
	} else if old != d && len(c.errs) < 10 {
		c.errs = append(c.errs, fmt.Sprintf("QP %#x PSN %#x: a %v with other contents than the request first sent with it",
			pkt.BTH().DestQP(), pkt.BTH().PSN(), pkt.Opcode()))
	}
	return false
}

func (c *psnChecker) check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error("PSN reused: " + e)
	}
}

// checkReplayTable checks the responder's replay table of qp: every READ
// and atomic in it lies before the next PSN expected and within the last
// 2^23 PSNs, and no two overlap (each PSN belongs to one request).
func checkReplayTable(t testing.TB, qp *QP) {
	t.Helper()
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.resp
	for i, a := range r.res {
		if a.kind == resNone {
			continue
		}
		n := 1
		if a.kind == resRead {
			n = a.npk
		}
		if end := a.psn.Add(n); end.After(r.psn) || r.psn.Diff(a.psn) < 0 {
			t.Errorf("replay table %d: PSNs %#x+%d not before the expected PSN %#x", i, a.psn, n, r.psn)
		}
		for j, b := range r.res[i+1:] {
			if b.kind == resNone {
				continue
			}
			m := 1
			if b.kind == resRead {
				m = b.npk
			}
			if a.psn.Diff(b.psn) < int32(m) && b.psn.Diff(a.psn) < int32(n) {
				t.Errorf("replay table %d (PSN %#x+%d) and %d (PSN %#x+%d) overlap", i, a.psn, n, i+1+j, b.psn, m)
			}
		}
	}
}

// TestPSNCheckerCatchesReuse: the checker flags a PSN sent again with
// other contents, and not a plain retransmission.
func TestPSNCheckerCatchesReuse(t *testing.T) {
	mk := func(op wire.Opcode, psn wire.PSN, payload byte) *link.Packet {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, DestQP: 0x12, PSN: psn}}
		p := link.Get()
		hl, err := wire.WriteHeaders(p.Buf, &h, 4)
		if err != nil {
			t.Fatal(err)
		}
		clear(p.Buf[hl : hl+4+wire.ICRCLen]) // pool packets hold old bytes
		p.Buf[hl] = payload
		p.N = hl + 4 + wire.ICRCLen
		return p
	}
	c := newPSNChecker()
	for _, p := range []*link.Packet{mk(wire.RCSendOnly, 5, 1), mk(wire.RCSendOnly, 5, 1), mk(wire.RCSendOnly, 6, 2)} {
		c.filter(p)
		link.Put(p)
	}
	if len(c.errs) != 0 {
		t.Fatalf("retransmissions flagged: %v", c.errs)
	}
	p := mk(wire.RCSendOnly, 5, 9)
	c.filter(p)
	link.Put(p)
	if len(c.errs) != 1 {
		t.Fatalf("reuse of PSN 5 not flagged: %v", c.errs)
	}
}

// pipeTrace, with SOFTRDMA_STRESS_TRACE set, records the last packets of a
// runPipeline run in both directions, drawing the loss itself (instead of
// Faults.Loss) so that each record says whether the packet was lost; a run
// that fails logs them with the requester's state, to tell a stall the
// losses explain from one they do not.
type pipeTrace struct {
	mu     sync.Mutex
	rng    *rand.Rand
	loss   float64
	start  time.Time
	events []string   // a ring of the last size
	qpns   []wire.QPN // the destination QP of each event
	next   int
	size   int
}

func newPipeTrace(seed uint64, loss float64, size int) *pipeTrace {
	return &pipeTrace{rng: rand.New(rand.NewPCG(seed, 7)), loss: loss, start: time.Now(),
		events: make([]string, 0, size), qpns: make([]wire.QPN, 0, size), size: size}
}

func (c *pipeTrace) filter(p *link.Packet) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	lost := c.rng.Float64() < c.loss
	pkt, err := wire.Parse(p.Data())
	if err != nil {
		return lost
	}
	e := fmt.Sprintf("%9.3fms %s -> QP %#x %-28v PSN %#06x", float64(time.Since(c.start).Microseconds())/1000,
		p.Src.Addr(), pkt.BTH().DestQP(), pkt.Opcode(), pkt.BTH().PSN())
	if pkt.BTH().AckReq() {
		e += " ackreq"
	}
	if a := pkt.AETH(); a != nil {
		e += fmt.Sprintf(" %v MSN %d", a.Syndrome(), a.MSN())
	}
	if lost {
		e += " LOST"
	}
	if len(c.events) < c.size {
		c.events = append(c.events, e)
		c.qpns = append(c.qpns, pkt.BTH().DestQP())
	} else {
		c.events[c.next] = e
		c.qpns[c.next] = pkt.BTH().DestQP()
		c.next = (c.next + 1) % c.size
	}
	return lost
}

// log logs the requester state of qp and the last max events of the
// packets to qp or to peer (its partner QP).
func (c *pipeTrace) log(t testing.TB, qp *QP, peer wire.QPN, max int) {
	t.Helper()
	c.mu.Lock()
	var evs []string
	for k := range len(c.events) {
		i := (c.next + k) % len(c.events)
		if q := c.qpns[i]; q == qp.qpn || q == peer {
			evs = append(evs, c.events[i])
		}
	}
	c.mu.Unlock()
	if len(evs) > max {
		evs = evs[len(evs)-max:]
	}
	qp.mu.Lock()
	r := &qp.req
	t.Logf("requester at %.3fms: mode %v, PSN %#x, acked %#x, outstanding %d, window %d, deadline in %v",
		float64(time.Since(c.start).Microseconds())/1000, r.Mode(), r.PSN(), r.AckedPSN(), r.Outstanding(), r.Window(),
		time.Duration(r.Deadline()-qp.now()))
	qp.mu.Unlock()
	for _, e := range evs {
		t.Log(e)
	}
}
