// The conformance suite: each subtest gets a fresh pair of links from the
// implementation's constructor, drives numbered packets between them and
// checks what arrives and what the counters say.

package linktest

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// Run runs the conformance suite. mk returns two fresh, unstarted links that
// can reach each other at their first addresses (Endpoint) over a network
// that neither loses nor reorders packets, and registers their Close with
// t.Cleanup. Subtests do not run in parallel (they count goroutines).
func Run(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	t.Run("BatchesInOrder", func(t *testing.T) { testBatches(t, mk) })
	t.Run("BeforeStart", func(t *testing.T) { testBeforeStart(t, mk) })
	t.Run("Echo", func(t *testing.T) { testEcho(t, mk) })
	t.Run("ConcurrentSenders", func(t *testing.T) { testConcurrent(t, mk) })
	t.Run("Addressing", func(t *testing.T) { testAddressing(t, mk) })
	t.Run("StartErrors", func(t *testing.T) { testStart(t, mk) })
	t.Run("Close", func(t *testing.T) { testClose(t, mk) })
	t.Run("CloseUnderLoad", func(t *testing.T) { testCloseUnderLoad(t, mk) })
}

// sizes cycles through packet sizes from the smallest to the largest.
var sizes = []int{MinSize, 64, 260, 1024 + 28, 2048 + 16, MaxSize}

func sizeOf(seq uint32) int { return sizes[int(seq)%len(sizes)] }

func start(t *testing.T, l link.Link, h link.Handler) {
	t.Helper()
	if err := l.Start(h); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func testBatches(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	rx := NewCollector()
	start(t, b, rx)
	start(t, a, NewCollector())
	src, dst := Endpoint(a), Endpoint(b)

	const n = 320
	var pkts []*link.Packet
	var bytes uint64
	for i := range uint32(n) {
		pkts = append(pkts, MakePacket(i, sizeOf(i), src, dst))
		bytes += uint64(sizeOf(i))
	}
	// Batches of 1, 7, 64 and the rest.
	for _, k := range []int{1, 7, 64} {
		SendAll(t, a, pkts[:k], k)
		pkts = pkts[k:]
	}
	SendAll(t, a, pkts, 50)

	got := rx.WaitFor(t, n)
	for i, r := range got {
		if Seq(r.Data) != uint32(i) {
			t.Fatalf("packet %d has sequence number %d: out of order", i, Seq(r.Data))
		}
		if msg := CheckPacket(r, uint32(i), sizeOf(uint32(i)), src, dst); msg != "" {
			t.Error(msg)
		}
	}
	if nb, largest := rx.Batches(); nb == 0 || largest < 1 {
		t.Errorf("Batches() = %d, %d", nb, largest)
	}
	rx.Quiet(t, n, 20*time.Millisecond)

	as, bs := a.Stats(), b.Stats()
	if as.TxPackets != n || as.TxBytes != bytes {
		t.Errorf("sender Tx = %d packets, %d bytes; want %d, %d", as.TxPackets, as.TxBytes, n, bytes)
	}
	if bs.RxPackets != n || bs.RxBytes != bytes {
		t.Errorf("receiver Rx = %d packets, %d bytes; want %d, %d", bs.RxPackets, bs.RxBytes, n, bytes)
	}
	for _, s := range []link.Stats{as, bs} {
		if s.TxErrors+s.RxBadICRC+s.RxMalformed+s.RxICRCUnchecked+s.Dropped != 0 {
			t.Errorf("error counters not zero: %+v", s)
		}
	}
	if as.RxPackets != 0 || bs.TxPackets != 0 {
		t.Errorf("traffic in the wrong direction: sender %+v, receiver %+v", as, bs)
	}
}

func testBeforeStart(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	src, dst := Endpoint(a), Endpoint(b)
	var pkts []*link.Packet
	for i := range uint32(20) {
		pkts = append(pkts, MakePacket(i, 128, src, dst))
	}
	SendAll(t, a, pkts, 20)
	rx := NewCollector()
	start(t, b, rx)
	got := rx.WaitFor(t, 20)
	for i, r := range got {
		if msg := CheckPacket(r, uint32(i), 128, src, dst); msg != "" {
			t.Error(msg)
		}
	}
}

// testEcho has b send every packet back from inside its Handler.
func testEcho(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	var echoErr error
	var mu sync.Mutex
	echo := NewCollector()
	echo.OnReceive = func(batch []*link.Packet) {
		out := make([]*link.Packet, len(batch))
		for i, p := range batch {
			q := link.Get()
			q.N = copy(q.Buf, p.Data())
			q.Src, q.Dst = p.Dst, p.Src
			out[i] = q
		}
		if err := b.Send(out); err != nil {
			mu.Lock()
			echoErr = err
			mu.Unlock()
		}
		for _, q := range out {
			link.Put(q)
		}
	}
	start(t, b, echo)
	rx := NewCollector()
	start(t, a, rx)
	src, dst := Endpoint(a), Endpoint(b)

	const n = 100
	for i := range uint32(n) {
		SendAll(t, a, []*link.Packet{MakePacket(i, sizeOf(i), src, dst)}, 1)
	}
	got := rx.WaitFor(t, n)
	mu.Lock()
	if echoErr != nil {
		t.Errorf("echo Send: %v", echoErr)
	}
	mu.Unlock()
	for i, r := range got {
		if msg := CheckPacket(r, uint32(i), sizeOf(uint32(i)), dst, src); msg != "" {
			t.Error(msg)
		}
	}
	if s := a.Stats(); s.TxPackets != n || s.RxPackets != n {
		t.Errorf("a: Tx %d Rx %d, want %d each", s.TxPackets, s.RxPackets, n)
	}
	// b's Send may still be counting the last echo when a has it.
	if s := WaitStats(b, func(s link.Stats) bool { return s.TxPackets == n }); s.TxPackets != n || s.RxPackets != n {
		t.Errorf("b: Tx %d Rx %d, want %d each", s.TxPackets, s.RxPackets, n)
	}
}

func testConcurrent(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	rx := NewCollector()
	start(t, b, rx)
	src, dst := Endpoint(a), Endpoint(b)

	const senders, each, batch = 4, 150, 10
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range uint32(senders) {
		wg.Go(func() {
			for i := 0; i < each; i += batch {
				pkts := make([]*link.Packet, batch)
				for j := range pkts {
					pkts[j] = MakePacket(g<<16|uint32(i+j), 96, src, dst)
				}
				err := a.Send(pkts)
				for _, p := range pkts {
					link.Put(p)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Send: %v", err)
	}
	got := rx.WaitFor(t, senders*each)
	next := make([]uint32, senders)
	for _, r := range got {
		seq := Seq(r.Data)
		g, i := seq>>16, seq&0xFFFF
		if g >= senders {
			t.Fatalf("unexpected sequence number %#x", seq)
		}
		if i != next[g] {
			t.Fatalf("sender %d: got packet %d, want %d", g, i, next[g])
		}
		next[g]++
		if msg := CheckPacket(r, seq, 96, src, dst); msg != "" {
			t.Error(msg)
		}
	}
}

func testAddressing(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	rx := NewCollector()
	start(t, b, rx)
	src, dst := Endpoint(a), Endpoint(b)

	// A zero Src picks a's first address of the destination's family.
	p := MakePacket(1, 64, netip.AddrPort{}, dst)
	SendAll(t, a, []*link.Packet{p}, 1)
	got := rx.WaitFor(t, 1)
	if msg := CheckPacket(got[0], 1, 64, src, dst); msg != "" {
		t.Error(msg)
	}

	// Bad packets fail alone; the good ones in the batch still go.
	notLocal := netip.MustParseAddr("127.0.0.253")
	bad := []struct {
		name    string
		p       *link.Packet
		address bool // error must wrap link.ErrAddress
	}{
		{"source not local", MakePacket(100, 64, netip.AddrPortFrom(notLocal, 1), dst), true},
		{"no destination", MakePacket(101, 64, src, netip.AddrPort{}), true},
		{"destination port 0", MakePacket(102, 64, src, netip.AddrPortFrom(dst.Addr(), 0)), true},
		{"too short", MakePacket(103, 64, src, dst), false},
	}
	bad[3].p.N = wire.BTHLen + wire.ICRCLen - 1
	if src.Addr().Unmap().Is4() {
		bad = append(bad, struct {
			name    string
			p       *link.Packet
			address bool
		}{"family mismatch", MakePacket(104, 64, src, netip.MustParseAddrPort("[::1]:4791")), true})
	}
	for i, c := range bad {
		batch := []*link.Packet{
			MakePacket(uint32(2+2*i), 64, src, dst), c.p, MakePacket(uint32(3+2*i), 64, src, dst),
		}
		err := a.Send(batch)
		if err == nil {
			t.Errorf("%s: Send returned nil", c.name)
		} else if c.address && !errors.Is(err, link.ErrAddress) {
			t.Errorf("%s: Send error %v does not wrap link.ErrAddress", c.name, err)
		}
		for _, p := range batch {
			link.Put(p)
		}
	}
	want := 1 + 2*len(bad)
	got = rx.WaitFor(t, want)
	for i, r := range got[1:] {
		if msg := CheckPacket(r, uint32(2+i), 64, src, dst); msg != "" {
			t.Error(msg)
		}
	}
	rx.Quiet(t, want, 20*time.Millisecond)
	if s := a.Stats(); s.TxErrors != uint64(len(bad)) || s.TxPackets != uint64(want) {
		t.Errorf("Stats: TxErrors %d TxPackets %d, want %d and %d", s.TxErrors, s.TxPackets, len(bad), want)
	}
	if err := a.Send(nil); err != nil {
		t.Errorf("Send(nil) = %v", err)
	}
}

func testStart(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, _ := mk(t)
	if err := a.Start(nil); err == nil {
		t.Error("Start(nil) returned nil")
	}
	start(t, a, NewCollector())
	if err := a.Start(NewCollector()); !errors.Is(err, link.ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
}

func testClose(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	arx, brx := NewCollector(), NewCollector()
	start(t, a, arx)
	start(t, b, brx)
	src, dst := Endpoint(a), Endpoint(b)
	SendAll(t, b, []*link.Packet{MakePacket(1, 64, dst, src)}, 1)
	arx.WaitFor(t, 1)

	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	p := MakePacket(2, 64, src, dst)
	if err := a.Send([]*link.Packet{p}); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	if err := a.Start(NewCollector()); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
	// Sending to a closed link is not an error: the packet is lost.
	p.Src, p.Dst = dst, src
	if err := b.Send([]*link.Packet{p}); err != nil {
		t.Errorf("Send to a closed link = %v, want nil", err)
	}
	link.Put(p)
	arx.Quiet(t, 1, 20*time.Millisecond)
	if s := a.Stats(); s.RxPackets != 1 {
		t.Errorf("closed link's Stats().RxPackets = %d, want 1", s.RxPackets)
	}

	// A link closed without being started.
	_, d := mk(t)
	if err := d.Close(); err != nil {
		t.Errorf("Close of an unstarted link: %v", err)
	}
}

func testCloseUnderLoad(t *testing.T, mk func(t *testing.T) (a, b link.Link)) {
	NoLeaks(t)
	a, b := mk(t)
	rx := NewCollector()
	start(t, b, rx)
	src, dst := Endpoint(a), Endpoint(b)

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		pkts := make([]*link.Packet, 16)
		for i := range pkts {
			pkts[i] = MakePacket(uint32(i), 512, src, dst)
		}
		defer func() {
			for _, p := range pkts {
				link.Put(p)
			}
		}()
		for range 100000 {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := a.Send(pkts); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	rx.Wait(1, Timeout)
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	n := rx.Len()
	close(stop)
	if err := <-done; err != nil {
		t.Errorf("Send to a closing link: %v", err)
	}
	rx.Quiet(t, n, 20*time.Millisecond)
}
