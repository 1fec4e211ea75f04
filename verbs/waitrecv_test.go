package verbs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

// TestWaitReceive runs a SEND ping-pong over UDP between two goroutines
// that wait with CQ.Wait: each waiter receives on its own goroutine
// (link.Waiter) beside the links' readers. Every message must land and
// complete once, and the waits must have received some packets themselves.
// Then a wait with nothing coming ends with its context, a completion made
// by another goroutine wakes a waiter that is receiving, and destroying the
// CQ ends a wait on it.
func TestWaitReceive(t *testing.T) {
	leakcheck.Check(t)
	da, db := newDevicesUDP(t, false)
	if da.waiter == nil {
		t.Skip("the UDP link cannot wait on the caller's goroutine here")
	}
	p := &pair{t: t, da: da, db: db}
	p.connect(pairOpts{typ: RC, mtu: MTU1024, wr: 16, timeout: 14})
	ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
	waited := func() uint64 {
		return da.link.(kernelHB).polled.Load() + db.link.(kernelHB).polled.Load()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// wait waits on cq for the completions of want, in any order: a
	// request's ACK may come behind the peer's next request (it rides with
	// it, ackanswer.go), so a send's completion may follow the next receive.
	type wcKey struct {
		id uint64
		op WCOpcode
	}
	wait := func(cq *CQ, want ...wcKey) error {
		wc := make([]WC, 1)
		for len(want) > 0 {
			if _, err := cq.Wait(ctx, wc); err != nil {
				return err
			}
			i := slices.Index(want, wcKey{wc[0].WRID, wc[0].Opcode})
			if i < 0 || wc[0].Status != Success {
				return fmt.Errorf("unexpected completion %d %v %v", wc[0].WRID, wc[0].Opcode, wc[0].Status)
			}
			want = slices.Delete(want, i, i+1)
		}
		return nil
	}
	const rounds = 300
	for i := range 4 {
		if err := p.qb.PostRecv([]RecvWR{{ID: uint64(i), SGL: []SGE{mb.SGE(1024+64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostRecv([]RecvWR{{ID: uint64(i), SGL: []SGE{ma.SGE(1024+64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// b answers each SEND with one of its own.
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			for r := range uint64(rounds) {
				want := []wcKey{{r, WCRecv}}
				if r > 0 {
					want = append(want, wcKey{r - 1, WCSend})
				}
				if err := wait(p.cb, want...); err != nil {
					return err
				}
				if got := mb.Buf()[1024+64*(r%4)]; got != byte(r) {
					return errors.New("b: SEND landed wrong")
				}
				if r+4 < rounds {
					if err := p.qb.PostRecv([]RecvWR{{ID: r + 4, SGL: []SGE{mb.SGE(1024+64*int(r%4), 64)}}}); err != nil {
						return err
					}
				}
				mb.Buf()[0] = byte(r + 1)
				if err := p.qb.PostSend([]SendWR{{ID: r, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mb.SGE(0, 64)}}}); err != nil {
					return err
				}
			}
			return wait(p.cb, wcKey{rounds - 1, WCSend})
		}()
	}()
	for r := range uint64(rounds) {
		ma.Buf()[0] = byte(r)
		post(t, p.qa, SendWR{ID: r, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
		if err := wait(p.ca, wcKey{r, WCSend}, wcKey{r, WCRecv}); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if got := ma.Buf()[1024+64*(r%4)]; got != byte(r+1) {
			t.Fatalf("round %d: answer landed wrong", r)
		}
		if r+4 < rounds {
			if err := p.qa.PostRecv([]RecvWR{{ID: r + 4, SGL: []SGE{ma.SGE(1024+64*int(r%4), 64)}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if waited() == 0 {
		t.Errorf("the waits received none of the %d rounds' packets themselves", rounds)
	}

	// Nothing comes: the context ends the wait, within a slice.
	wc := make([]WC, 1)
	cctx, ccancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); ccancel() }()
	start := time.Now()
	if n, err := p.cb.Wait(cctx, wc); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled: %d, %v", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a cancelled Wait returned after %v", d)
	}

	// A completion made by another goroutine, not by a packet (a WRITE
	// completing is one; a CQ of its own that only this goroutine pushes
	// to is simpler): the waiter, asleep in the link, must wake.
	cq, err := da.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := cq.Wait(context.Background(), wc)
		done <- err
	}()
	sleeping := func() { // until the waiter sleeps in the link
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); cq.inline.Load() == 0; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatal("the waiter did not wait in the link")
			}
		}
		time.Sleep(time.Millisecond) // into ppoll (the test passes without it too)
	}
	sleeping()
	cq.push(&WC{WRID: 7, Status: Success}, false)
	select {
	case err := <-done:
		if err != nil || wc[0].WRID != 7 {
			t.Fatalf("woken waiter: %v, wr_id %d", err, wc[0].WRID)
		}
	case <-time.After(500 * time.Millisecond): // a slice is a second
		t.Fatal("a completion pushed by another goroutine did not wake the receiving waiter")
	}

	// Destroying the CQ ends a wait on it at once.
	go func() {
		_, err := cq.Wait(context.Background(), wc)
		done <- err
	}()
	sleeping()
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait on a destroyed CQ: %v, want ErrClosed", err)
		}
	case <-time.After(500 * time.Millisecond):
		t.Fatal("destroying the CQ did not wake the receiving waiter")
	}
}
