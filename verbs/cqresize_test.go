package verbs

import (
	"errors"
	"testing"
	"time"
)

func TestCQResize(t *testing.T) {
	p := newPair(t, pairOpts{cqe: 3})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	write := func(id uint64) SendWR {
		return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()}
	}
	// Empty: down to one, then up to eight.
	if err := p.ca.Resize(1); err != nil || p.ca.Cap() != 1 {
		t.Fatalf("resize to 1: %v, cap %d", err, p.ca.Cap())
	}
	if err := p.ca.Resize(8); err != nil || p.ca.Cap() != 8 {
		t.Fatalf("resize to 8: %v, cap %d", err, p.ca.Cap())
	}
	for _, bad := range []int{0, -1, MaxCQE + 1} {
		if err := p.ca.Resize(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("resize to %d: %v, want ErrInvalid", bad, err)
		}
	}
	// Five completions wrapped around the ring's end (three polled first).
	post(t, p.qa, write(1), write(2), write(3))
	waitWC(t, p.ca, 3, waitFor)
	post(t, p.qa, write(4), write(5), write(6), write(7), write(8))
	for deadline := time.Now().Add(waitFor); p.ca.cqLen() < 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d completions of 5", p.ca.cqLen())
		}
	}
	// Not below what it holds; to exactly that, the completions intact.
	if err := p.ca.Resize(4); !errors.Is(err, ErrInvalid) {
		t.Fatalf("resize below the completions held: %v", err)
	}
	if err := p.ca.Resize(5); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, p.ca, 5, waitFor)
	for i, w := range wc {
		checkWC(t, w, uint64(4+i), Success, WCRDMAWrite)
	}
	// Full again after the resize: the next completion has room once polled.
	post(t, p.qa, write(9))
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 9, Success, WCRDMAWrite)
	if err := p.ca.Resize(2); err != nil {
		t.Fatal(err)
	}
	if err := p.qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := p.ca.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := p.ca.Resize(4); !errors.Is(err, ErrClosed) {
		t.Fatalf("resize after Destroy: %v", err)
	}
}

// cqLen returns the number of completions the CQ holds.
func (cq *CQ) cqLen() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}
