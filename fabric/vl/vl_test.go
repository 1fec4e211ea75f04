package vl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/fabric/vl"
)

func newLink(t *testing.T, c vl.Config) *vl.Link {
	t.Helper()
	l, err := vl.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// packet returns a packet of n bytes (n >= 8) numbered i.
func packet(i, n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

func number(b []byte) int { return int(binary.BigEndian.Uint64(b)) }

// TestSlowReceiver: a receiver that reads one packet a millisecond while
// the sender offers 2000 as fast as the wire takes them. Every packet
// arrives, in order; the sender waited (backpressure); queue and buffer
// never grew past their bounds.
func TestSlowReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const total = 2000
		l := newLink(t, vl.Config{DataVLs: 2, Credits: 16, QueueLen: 4, Rate: 1 << 30})
		ctx := t.Context()
		sent := make(chan error, 1)
		go func() {
			for i := range total {
				if err := l.Send(ctx, 1, packet(i, 64+i%400)); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		for i := range total {
			d, err := l.Recv(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if number(d.Data) != i || len(d.Data) != 64+i%400 || d.VL != 1 {
				t.Fatalf("packet %d: got number %d, %d bytes, VL%d", i, number(d.Data), len(d.Data), d.VL)
			}
			time.Sleep(time.Millisecond)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		s := l.Stats()
		if s.Sent[1] != total || s.Received[1] != total || s.Dropped != [16]uint64{} {
			t.Errorf("sent %d, received %d, dropped %v", s.Sent[1], s.Received[1], s.Dropped)
		}
		if s.SendWaits == 0 {
			t.Error("the sender never waited: no backpressure")
		}
		if s.MaxQueued[1] > 4 || s.MaxBuffered[1] > 16 || s.MaxBuffered[1] < 16-7 {
			t.Errorf("queue high-water %d (bound 4), buffer high-water %d credits (bound 16)", s.MaxQueued[1], s.MaxBuffered[1])
		}
	})
}

// TestStalledLane: VL0's receiver never reads, so VL0 runs out of credits
// and its Send blocks; VL1 carries 500 packets meanwhile. Reading VL0 then
// frees its sender.
func TestStalledLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLink(t, vl.Config{DataVLs: 2, Credits: 4, QueueLen: 2, Rate: 1 << 30})
		ctx := t.Context()
		// 4 credits of buffer and 2 queue slots: the 7th packet of 64
		// bytes blocks.
		blocked := make(chan error, 1)
		go func() {
			for i := range 7 {
				if err := l.Send(ctx, 0, packet(i, 64)); err != nil {
					blocked <- err
					return
				}
			}
			blocked <- nil
		}()
		synctest.Wait()
		select {
		case err := <-blocked:
			t.Fatalf("7 packets into 4 credits and 2 queue slots: Send returned %v", err)
		default:
		}
		for i := range 500 {
			if err := l.Send(ctx, 1, packet(i, 200)); err != nil {
				t.Fatal(err)
			}
			d, err := l.Recv(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.VL != 1 || number(d.Data) != i {
				t.Fatalf("VL1 packet %d: got VL%d number %d", i, d.VL, number(d.Data))
			}
		}
		if s := l.Stats(); s.Sent[0] != 4 || s.MaxQueued[0] != 2 {
			t.Errorf("stalled VL0: %d sent (4 credits), queue high-water %d (2 slots)", s.Sent[0], s.MaxQueued[0])
		}
		select {
		case err := <-blocked:
			t.Fatalf("VL0's sender returned %v while its lane was stalled", err)
		default:
		}
		for i := range 7 {
			d, err := l.Recv(ctx, 0)
			if err != nil || number(d.Data) != i {
				t.Fatalf("VL0 packet %d: %v, number %d", i, err, number(d.Data))
			}
		}
		if err := <-blocked; err != nil {
			t.Fatal(err)
		}
		if s := l.Stats(); s.Received[0] != 7 || s.Received[1] != 500 || s.SendWaits == 0 {
			t.Errorf("received %d on VL0, %d on VL1, %d waits", s.Received[0], s.Received[1], s.SendWaits)
		}
	})
}

// TestSendContext: a Send blocked on a full lane returns its context's
// error.
func TestSendContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLink(t, vl.Config{Credits: 1, QueueLen: 1})
		for i := range 2 {
			if err := l.Send(t.Context(), 0, packet(i, 64)); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := l.Send(ctx, 0, packet(2, 64)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send on a full lane: %v", err)
		}
		if s := l.Stats(); s.Sent[0] != 1 {
			t.Errorf("%d sent with 1 credit", s.Sent[0])
		}
	})
}

// TestLinkArbitration: with the link paused, three lanes fill their
// queues; on Resume the wire order follows the weights 1:2:4.
func TestLinkArbitration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		arb := vl.Arbitration{Low: []vl.Entry{{VL: 0, Weight: 1}, {VL: 1, Weight: 2}, {VL: 2, Weight: 4}}}
		l := newLink(t, vl.Config{DataVLs: 3, Credits: 64, QueueLen: 64, Arbitration: &arb, Paused: true, Rate: 1 << 30})
		for i := range 64 {
			for v := range uint8(3) {
				if err := l.Send(t.Context(), v, packet(i, 64)); err != nil {
					t.Fatal(err)
				}
			}
		}
		synctest.Wait()
		if s := l.Stats(); s.Sent != [16]uint64{} {
			t.Fatalf("paused link sent %v", s.Sent)
		}
		l.Resume()
		count := map[uint8]int{}
		for range 3 * 64 {
			d, err := l.RecvAny(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if d.Seq <= 63 {
				count[d.VL]++
			}
		}
		if count[0] != 9 || count[1] != 18 || count[2] != 36 {
			t.Errorf("first 63 packets on the wire: %v, want 9:18:36", count)
		}
	})
}

// TestHighPriorityLimit: a high-priority lane with limit 1 (4 KiB) lets one
// low-priority packet through after every 16 of its 256-byte packets.
func TestHighPriorityLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		arb := vl.Arbitration{High: []vl.Entry{{VL: 1, Weight: 255}}, Low: []vl.Entry{{VL: 0, Weight: 255}}, HighLimit: 1}
		l := newLink(t, vl.Config{DataVLs: 2, Credits: 1024, QueueLen: 128, Arbitration: &arb, Paused: true})
		for i := range 128 {
			for v := range uint8(2) {
				if err := l.Send(t.Context(), v, packet(i, 256)); err != nil {
					t.Fatal(err)
				}
			}
		}
		l.Resume()
		order := make([]uint8, 257)
		for range 256 {
			d, err := l.RecvAny(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			order[d.Seq] = d.VL
		}
		for s := 1; s <= 17*7; s++ {
			want := uint8(1)
			if s%17 == 0 {
				want = 0
			}
			if order[s] != want {
				t.Fatalf("packet %d on the wire is VL%d, want VL%d", s, order[s], want)
			}
		}
	})
}

// TestVL15 bypasses flow control: with the data lane stalled and paused,
// management packets still go, first; past the receiver's VL15 buffer they
// are dropped and counted, and Send on VL15 never blocks.
func TestVL15(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLink(t, vl.Config{Credits: 1, QueueLen: 1, VL15Packets: 2})
		ctx := t.Context()
		for i := range 2 {
			if err := l.Send(ctx, 0, packet(i, 64)); err != nil {
				t.Fatal(err)
			}
		}
		l.Pause()
		for i := range 5 {
			if err := l.Send(ctx, vl.VL15, packet(100+i, 256)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		s := l.Stats()
		if s.Sent[vl.VL15] != 5 || s.Dropped[vl.VL15] != 3 || s.Sent[0] != 1 {
			t.Errorf("VL15 sent %d dropped %d; VL0 sent %d", s.Sent[vl.VL15], s.Dropped[vl.VL15], s.Sent[0])
		}
		for i := range 2 {
			d, err := l.RecvAny(ctx)
			if err != nil || d.VL != vl.VL15 || number(d.Data) != 100+i {
				t.Fatalf("RecvAny %d: %v VL%d number %d", i, err, d.VL, number(d.Data))
			}
		}
		// VL15 goes before data packets that were queued first: while one
		// data packet holds a slow wire (1 s), another data packet and then
		// a VL15 packet queue up; VL15 gets the wire next.
		slow := newLink(t, vl.Config{Rate: 64})
		for _, p := range []struct {
			vl uint8
			n  int
		}{{0, 1}, {0, 2}, {vl.VL15, 3}} {
			if err := slow.Send(ctx, p.vl, packet(p.n, 64)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		var order []int
		for range 3 {
			d, err := slow.RecvAny(ctx)
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, number(d.Data))
		}
		if order[0] != 1 || order[1] != 3 || order[2] != 2 {
			t.Errorf("wire order %v, want [1 3 2]: VL15 first once the wire is free", order)
		}
		// A full VL15 send queue drops rather than blocks.
		l2 := newLink(t, vl.Config{QueueLen: 1, VL15Packets: 1, Rate: 1})
		for range 3 {
			if err := l2.Send(ctx, vl.VL15, make([]byte, 256)); err != nil {
				t.Fatal(err)
			}
		}
		if s := l2.Stats(); s.Dropped[vl.VL15] == 0 {
			t.Errorf("a slow wire and a 1-packet queue dropped no VL15 packet: %+v", s)
		}
	})
}

func TestSL2VL(t *testing.T) {
	l := newLink(t, vl.Config{DataVLs: 4})
	for sl := range uint8(16) {
		if v, ok := l.VLOf(sl); !ok || v != sl%4 {
			t.Errorf("default SL%d -> VL%d %v", sl, v, ok)
		}
	}
	tab := vl.SL2VL{0, 0, 1, 1, 2, 2, 3, 3, 15, 15, 15, 15, 15, 15, 15, 0}
	if err := l.SetSL2VL(tab); err != nil {
		t.Fatal(err)
	}
	if v, ok := l.VLOf(5); !ok || v != 2 {
		t.Errorf("SL5 -> VL%d %v", v, ok)
	}
	if _, ok := l.VLOf(9); ok {
		t.Error("SL9 maps to VL15 and must drop")
	}
	if _, ok := l.VLOf(16); ok {
		t.Error("SL16")
	}
	tab[3] = 4
	if err := l.SetSL2VL(tab); !errors.Is(err, vl.ErrConfig) {
		t.Errorf("SL3 -> VL4 on 4 data VLs: %v", err)
	}
	if l.DataVLs() != 4 {
		t.Error("DataVLs")
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []vl.Config{
		{DataVLs: 16}, {DataVLs: -1}, {QueueLen: -1}, {Credits: -1}, {Rate: -1}, {VL15Packets: -1},
		{DataVLs: 2, VLCredits: []int{1}}, {DataVLs: 2, VLCredits: []int{1, 0}},
		{DataVLs: 2, SL2VL: &vl.SL2VL{5}},
		{Arbitration: &vl.Arbitration{High: make([]vl.Entry, 65)}},
	} {
		if l, err := vl.New(c); !errors.Is(err, vl.ErrConfig) {
			t.Errorf("New(%+v): %v", c, err)
			if l != nil {
				l.Close()
			}
		}
	}
	l := newLink(t, vl.Config{DataVLs: 2, VLCredits: []int{2, 4}})
	ctx := t.Context()
	if err := l.Send(ctx, 2, nil); !errors.Is(err, vl.ErrVL) {
		t.Errorf("Send on VL2: %v", err)
	}
	if _, err := l.Recv(ctx, 14); !errors.Is(err, vl.ErrVL) {
		t.Errorf("Recv on VL14: %v", err)
	}
	if err := l.Send(ctx, 0, make([]byte, 129)); !errors.Is(err, vl.ErrSize) {
		t.Errorf("3 credits on a 2-credit lane: %v", err)
	}
	if err := l.Send(ctx, 1, make([]byte, 256)); err != nil {
		t.Errorf("4 credits on a 4-credit lane: %v", err)
	}
	if err := l.SetArbitration(vl.Arbitration{Low: make([]vl.Entry, 65)}); !errors.Is(err, vl.ErrConfig) {
		t.Errorf("SetArbitration with 65 entries: %v", err)
	}
	if err := l.SetArbitration(vl.Arbitration{Low: []vl.Entry{{VL: 1, Weight: 1}}}); err != nil {
		t.Error(err)
	}
	if vl.Credits(0) != 0 || vl.Credits(1) != 1 || vl.Credits(64) != 1 || vl.Credits(65) != 2 {
		t.Error("Credits")
	}
}

// TestClose: Close fails blocked Send and Recv calls and later ones with
// ErrClosed, stops the transmitter (leakcheck in TestMain), and is
// idempotent.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := vl.New(vl.Config{Credits: 1, QueueLen: 1, Rate: 100})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		errs := make(chan error, 4)
		go func() {
			for i := range 4 {
				if err := l.Send(ctx, 0, packet(i, 64)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
		go func() {
			_, err := l.Recv(ctx, vl.VL15)
			errs <- err
		}()
		synctest.Wait()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-errs; !errors.Is(err, vl.ErrClosed) {
				t.Errorf("blocked call after Close: %v", err)
			}
		}
		if err := l.Send(ctx, 0, nil); !errors.Is(err, vl.ErrClosed) {
			t.Errorf("Send after Close: %v", err)
		}
		if _, err := l.RecvAny(ctx); !errors.Is(err, vl.ErrClosed) {
			t.Errorf("RecvAny after Close: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}
