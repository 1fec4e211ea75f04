package udp

import (
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
)

// TestPollWait waits for packets on the test's goroutine while the link's
// reader goroutine also receives: every packet must arrive once and in
// order, whichever took it, and PollWait some. It cannot wait before Start
// or after Close; it ends by timeout, by Wake, and by ready. With one P the
// wait's first slice is a blocking receive that no goroutine of the process
// can interrupt: the sender and Wake run once it has timed out, while the
// rest of the wait sleeps in ppoll.
func TestPollWait(t *testing.T) {
	t.Run("any", testPollWait)
	t.Run("oneP", func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		testPollWait(t)
	})
}

func testPollWait(t *testing.T) {
	linktest.NoLeaks(t)
	a, b := pair4(t, Config{})
	if _, ok := b.PollWait(time.Millisecond, nil); ok {
		t.Fatal("PollWait waited on a link not started")
	}
	rx := collect(t, b)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	const per = 8
	waited, seq := 0, uint32(0)
	for round := 0; round < 200 && (waited == 0 || round < 20); round++ {
		got := make(chan struct{})
		base := seq
		go func() {
			defer close(got)
			pkts := linktest.MakePackets(base, per, 200, src, dst)
			time.Sleep(100 * time.Microsecond)
			if err := a.Send(pkts); err != nil {
				t.Error(err)
			}
			for _, p := range pkts {
				link.Put(p)
			}
		}()
		seq += per
		deadline := time.Now().Add(linktest.Timeout)
		for rx.Len() < int(seq) && time.Now().Before(deadline) {
			n, _ := b.PollWait(10*time.Millisecond, nil)
			waited += n
		}
		<-got
	}
	waitInOrder(t, rx, seq, src, dst)
	if waited == 0 {
		t.Fatalf("PollWait took none of %d packets", seq)
	}

	// Nothing comes: the timeout ends it.
	start := time.Now()
	for {
		n, ok := b.PollWait(20*time.Millisecond, nil)
		if ok && n == 0 {
			break
		}
		if time.Since(start) > linktest.Timeout {
			t.Fatal("PollWait never waited for nothing")
		}
	}
	// ready true: no wait.
	if n, ok := b.PollWait(time.Hour, func() bool { return true }); !ok || n != 0 {
		t.Fatalf("PollWait with ready: %d, %v", n, ok)
	}
	// Wake ends a wait; so does Close, after which it cannot wait.
	for _, end := range []func(){b.Wake, func() { b.Close() }} {
		in := make(chan struct{}, 1)
		done := make(chan bool, 1)
		go func() {
			for {
				// ok is false without waiting if the reader holds a lock
				// at that moment: try again until it waits.
				if _, ok := b.PollWait(time.Hour, func() bool { in <- struct{}{}; return false }); ok {
					done <- true
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		<-in
		time.Sleep(2 * time.Millisecond) // into ppoll (the test passes without it too)
		end()
		select {
		case <-done:
		case <-time.After(linktest.Timeout):
			t.Fatal("PollWait not ended")
		}
	}
	if _, ok := b.PollWait(time.Millisecond, nil); ok {
		t.Fatal("PollWait waited on a closed link")
	}
}

// TestPollWaitBlockingReceive: in a process with one P, a link with one
// socket sleeps the first slice of a wait in a blocking recvmmsg
// (waitState.blockRecv). Datagrams queued before the wait are received
// and handled by it; a wait with nothing to receive lasts its timeout,
// the blocking slice's and the ppoll's after it; sends and Wake, which
// pass MSG_DONTWAIT or write the eventfd, work on the blocking socket.
func TestPollWaitBlockingReceive(t *testing.T) {
	linktest.NoLeaks(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a, b := pair4(t, Config{})
	if !b.wait.blockRecv {
		t.Fatal("a link with one socket did not set up the blocking receive")
	}
	rx := collect(t, b)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	const per = 8
	waited, seq := 0, uint32(0)
	for round := 0; round < 200 && (waited == 0 || round < 20); round++ {
		// Sent from this goroutine, then waited for at once: the reader,
		// parked in the network poller, only runs when this goroutine
		// gives the P up, so the wait usually finds the datagrams queued.
		pkts := linktest.MakePackets(seq, per, 200, src, dst)
		if err := a.Send(pkts); err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			link.Put(p)
		}
		seq += per
		deadline := time.Now().Add(linktest.Timeout)
		for rx.Len() < int(seq) && time.Now().Before(deadline) {
			n, _ := b.PollWait(time.Second, nil)
			waited += n
		}
	}
	waitInOrder(t, rx, seq, src, dst)
	if waited == 0 || b.wait.blockHits.Load() == 0 {
		t.Fatalf("PollWait took %d of %d packets, %d blocking receives returned some", waited, seq, b.wait.blockHits.Load())
	}
	if st := b.Stats(); st.RxMalformed != 0 {
		t.Fatalf("%d malformed datagrams counted", st.RxMalformed)
	}

	// Nothing comes: the wait lasts the blocking slice and the rest. A
	// signal (the runtime preempting a goroutine it sees running for long,
	// as the blocking receive looks to it) ends a wait early, as it ends a
	// ppoll: the caller waits again. One wait in 20 must last.
	const d = rawWait + 20*time.Millisecond
	var took []time.Duration
	for len(took) < 20 {
		start := time.Now()
		n, ok := b.PollWait(d, nil)
		if !ok || n != 0 {
			continue // a reader held the lock, or a late datagram came
		}
		if took = append(took, time.Since(start)); took[len(took)-1] >= d {
			return
		}
	}
	t.Fatalf("every empty wait of %v returned early: %v", d, took)
}
