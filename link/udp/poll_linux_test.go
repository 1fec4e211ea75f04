package udp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
)

// waitInOrder waits for n 200-byte packets numbered 0 to n-1, from src to
// dst, and checks that they arrived once each and in order.
func waitInOrder(t *testing.T, rx *linktest.Collector, n uint32, src, dst netip.AddrPort) {
	t.Helper()
	got := rx.WaitFor(t, int(n))
	for i, r := range got {
		if msg := linktest.CheckPacket(r, uint32(i), 200, src, dst); msg != "" {
			t.Fatalf("packet %d: %s", i, msg)
		}
	}
	if len(got) != int(n) {
		t.Fatalf("%d packets, want %d", len(got), n)
	}
}

// TestPoll receives with Poll on the test's goroutine while the link's
// reader goroutine also receives: every packet must arrive once and in
// order, whichever of them took it, and Poll must take some (rounds are
// sent until it has, 200 at most: the reader wakes later than a spinning
// poller, so Poll takes most of them).
func TestPoll(t *testing.T) {
	for _, gro := range []bool{true, false} {
		name := "gro"
		if !gro {
			name = "nogro"
		}
		t.Run(name, func(t *testing.T) {
			linktest.NoLeaks(t)
			a, b := pair4(t, Config{DisableGRO: !gro})
			rx := collect(t, b)
			src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
			const per = 16
			polled, seq := 0, uint32(0)
			for round := 0; round < 200 && (polled == 0 || round < 20); round++ {
				if err := linktest.SendPackets(a, seq, per, 200, src, dst); err != nil {
					t.Fatal(err)
				}
				seq += per
				deadline := time.Now().Add(linktest.Timeout)
				for rx.Len() < int(seq) && time.Now().Before(deadline) {
					polled += b.Poll()
				}
			}
			waitInOrder(t, rx, seq, src, dst)
			if polled == 0 {
				t.Fatalf("Poll took none of %d packets", seq)
			}
			if s := b.Stats(); s.RxPackets != uint64(seq) {
				t.Errorf("RxPackets %d, want %d", s.RxPackets, seq)
			}
			t.Logf("Poll took %d of %d packets", polled, seq)
		})
	}
}

// TestPollBeforeStartAndAfterClose: Poll takes nothing from a link not
// started, and nothing, without failing, from a closed one.
func TestPollBeforeStartAndAfterClose(t *testing.T) {
	linktest.NoLeaks(t)
	a, b := pair4(t, Config{})
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	p := linktest.MakePacket(0, 100, src, dst)
	defer link.Put(p)
	if err := a.Send([]*link.Packet{p}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if n := b.Poll(); n != 0 {
		t.Errorf("Poll before Start took %d packets", n)
	}
	rx := collect(t, b)
	rx.WaitFor(t, 1) // sent before Start: waits in the socket for the reader
	b.Close()
	if n := b.Poll(); n != 0 {
		t.Errorf("Poll after Close took %d packets", n)
	}
}
