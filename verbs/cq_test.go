package verbs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCQWait covers the blocking wait on a CQ without a completion
// channel: it returns what arrives, ends with its context without losing
// completions, wakes several waiters, and fails once the CQ is destroyed.
func TestCQWait(t *testing.T) {
	p := newPair(t, pairOpts{})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	wc := make([]WC, 4)

	if _, err := p.cb.Wait(context.Background(), nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Wait with no room: %v, want ErrInvalid", err)
	}

	// Nothing arrives: the context ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	n, err := p.cb.Wait(ctx, wc)
	cancel()
	if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %d, %v; want 0, DeadlineExceeded", n, err)
	}

	// Two goroutines wait on the receiver's CQ; two SENDs wake both.
	for i := range 2 {
		if err := p.qb.PostRecv([]RecvWR{{ID: uint64(10 + i), SGL: []SGE{mb.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	type res struct {
		wc  []WC
		err error
	}
	got := make(chan res, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			buf := make([]WC, 1)
			n, err := p.cb.Wait(ctx, buf)
			got <- res{buf[:n], err}
		}()
	}
	time.Sleep(10 * time.Millisecond) // let both block (the test passes without it too)
	for i := range 2 {
		if err := p.qa.PostSend([]SendWR{{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{ma.SGE(0, 32)}}}); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[uint64]bool{}
	for range 2 {
		r := <-got
		if r.err != nil || len(r.wc) != 1 || r.wc[0].Status != Success || r.wc[0].Opcode != WCRecv {
			t.Fatalf("waiter: %v %v", r.wc, r.err)
		}
		ids[r.wc[0].WRID] = true
	}
	if !ids[10] || !ids[11] {
		t.Fatalf("waiters got WRIDs %v, want 10 and 11", ids)
	}

	// The sender's completions are there already: Wait returns at once,
	// with both of them.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	total := 0
	for total < 2 {
		n, err := p.ca.Wait(ctx, wc)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}

	// Destroying the CQ ends a wait on it.
	cq, err := p.da.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := cq.Wait(context.Background(), wc)
		errc <- err
	}()
	time.Sleep(5 * time.Millisecond)
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait on a destroyed CQ: %v, want ErrClosed", err)
	}
}
