// Tests of the fault wrapper: the link conformance suite through it, each
// fault over real UDP (corruption caught by the receiver's ICRC check),
// reproducibility, the forwarded interfaces and an allocation-free pass
// through.

package fault

import (
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/link/udp"
)

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2")
)

// udpPair opens UDP links on 127.0.0.1 and 127.0.0.2 sharing a port and
// wraps the first (the sender) in cfg's faults.
func udpPair(t testing.TB, cfg Config) (*Link, *udp.Link) {
	t.Helper()
	for range 5 {
		a, err := udp.Open(udp.Config{Addrs: []netip.Addr{lo1}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := udp.Open(udp.Config{Addrs: []netip.Addr{lo2}, Port: a.Port()})
		if err != nil {
			a.Close()
			continue
		}
		w := New(a, cfg)
		t.Cleanup(func() {
			w.Close()
			b.Close()
		})
		return w, b
	}
	t.Fatal("no ephemeral port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil
}

// run sends n packets of 64 bytes from w to b (with a collector started) in
// batches of 8 and returns what b received once quiet.
func run(t *testing.T, w *Link, b link.Link, n int) []linktest.Received {
	t.Helper()
	c := linktest.NewCollector()
	if err := b.Start(c); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(link.HandlerFunc(func([]*link.Packet) {})); err != nil {
		t.Fatal(err)
	}
	src, dst := linktest.Endpoint(w), linktest.Endpoint(b)
	pkts := make([]*link.Packet, n)
	for i := range pkts {
		pkts[i] = linktest.MakePacket(uint32(i), 64, src, dst)
	}
	linktest.SendAll(t, w, pkts, 8)
	return settle(c)
}

// settle waits until c has received nothing new for 150 ms and returns
// what it has.
func settle(c *linktest.Collector) []linktest.Received {
	n := -1
	for deadline := time.Now().Add(linktest.Timeout); c.Len() != n && time.Now().Before(deadline); {
		n = c.Len()
		time.Sleep(150 * time.Millisecond)
	}
	return c.Packets()
}

func seqs(got []linktest.Received) []uint32 {
	out := make([]uint32, len(got))
	for i, r := range got {
		out[i] = linktest.Seq(r.Data)
	}
	return out
}

func TestConformanceUDP(t *testing.T) {
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link) {
		a, b := udpPair(t, Config{Seed: 1})
		return a, b
	})
}

func TestConformanceLoop(t *testing.T) {
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link) {
		n := loop.NewNetwork(loop.Config{})
		a, err := n.Attach([]netip.Addr{lo1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.Attach([]netip.Addr{lo2}, 0)
		if err != nil {
			t.Fatal(err)
		}
		wa, wb := New(a, Config{}), New(b, Config{})
		t.Cleanup(func() {
			wa.Close()
			wb.Close()
			n.Close()
		})
		return wa, wb
	})
}

// TestLossUDP: about the configured share is lost, the rest arrives, and
// the same seed loses the same packets.
func TestLossUDP(t *testing.T) {
	const n = 2000
	var lost [2][]uint32
	for i := range lost {
		w, b := udpPair(t, Config{Seed: 42, Faults: link.Faults{Loss: 0.3}})
		got := seqs(run(t, w, b, n))
		s := w.FaultStats()
		if s.Sent != n || int(s.Lost)+len(got) != n {
			t.Fatalf("sent %d, lost %d, received %d of %d", s.Sent, s.Lost, len(got), n)
		}
		if math.Abs(float64(s.Lost)/n-0.3) > 0.05 {
			t.Errorf("lost %d of %d, want about 30%%", s.Lost, n)
		}
		if d := w.Stats().Dropped; d != s.Lost {
			t.Errorf("Stats().Dropped = %d, want %d", d, s.Lost)
		}
		for j := range uint32(n) {
			if !slices.Contains(got, j) {
				lost[i] = append(lost[i], j)
			}
		}
	}
	if !slices.Equal(lost[0], lost[1]) {
		t.Error("the same seed lost different packets")
	}
}

func TestDuplicateUDP(t *testing.T) {
	w, b := udpPair(t, Config{Seed: 5, Faults: link.Faults{Duplicate: 1}})
	got := seqs(run(t, w, b, 100))
	if len(got) != 200 || w.FaultStats().Duplicated != 100 {
		t.Fatalf("received %d, duplicated %d; want 200, 100", len(got), w.FaultStats().Duplicated)
	}
	for i := range uint32(100) {
		if c := len(slices.DeleteFunc(slices.Clone(got), func(s uint32) bool { return s != i })); c != 2 {
			t.Fatalf("packet %d received %d times", i, c)
		}
	}
}

// TestReorderUDP: with Reorder 1 every other packet is held and released
// right after the next one, so the order is swapped pairwise and nothing
// is lost.
func TestReorderUDP(t *testing.T) {
	w, b := udpPair(t, Config{Seed: 5, Faults: link.Faults{Reorder: 1, ReorderTimeout: 50 * time.Millisecond}})
	got := seqs(run(t, w, b, 100))
	if len(got) != 100 {
		t.Fatalf("received %d of 100", len(got))
	}
	if slices.IsSorted(got) {
		t.Fatal("nothing reordered")
	}
	for i := 0; i+1 < len(got); i += 2 {
		if got[i] != uint32(i+1) || got[i+1] != uint32(i) {
			t.Fatalf("order %v, want pairs swapped", got[:min(len(got), 10)])
		}
	}
	if s := w.FaultStats(); s.Reordered != 50 {
		t.Errorf("Reordered = %d, want 50", s.Reordered)
	}
}

// TestReorderTimeout: a held packet with nothing after it leaves when its
// hold runs out.
func TestReorderTimeout(t *testing.T) {
	w, b := udpPair(t, Config{Faults: link.Faults{Reorder: 1, ReorderTimeout: 20 * time.Millisecond}})
	got := seqs(run(t, w, b, 1))
	if len(got) != 1 {
		t.Fatalf("received %d of 1", len(got))
	}
}

// TestDelayJitterUDP: delayed packets all arrive, later than the delay;
// jitter reorders them.
func TestDelayJitterUDP(t *testing.T) {
	const delay = 30 * time.Millisecond
	w, b := udpPair(t, Config{Seed: 3, Faults: link.Faults{Delay: delay, Jitter: 20 * time.Millisecond}})
	c := linktest.NewCollector()
	if err := b.Start(c); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	src, dst := linktest.Endpoint(w), linktest.Endpoint(b)
	pkts := make([]*link.Packet, 50)
	for i := range pkts {
		pkts[i] = linktest.MakePacket(uint32(i), 64, src, dst)
	}
	linktest.SendAll(t, w, pkts, 50)
	if c.Len() != 0 {
		t.Fatal("delayed packets arrived at once")
	}
	got := seqs(c.WaitFor(t, 50))
	if time.Since(start) < delay {
		t.Errorf("arrived after %v, before the delay %v", time.Since(start), delay)
	}
	if slices.IsSorted(got) {
		t.Error("jitter reordered nothing")
	}
	if s := w.FaultStats(); s.Delayed != 50 {
		t.Errorf("Delayed = %d, want 50", s.Delayed)
	}
}

// TestCorruptUDP: every corrupted packet is dropped by the receiving UDP
// link's ICRC check and counted there; the caller's packets are left as
// sent.
func TestCorruptUDP(t *testing.T) {
	const n = 400
	w, b := udpPair(t, Config{Seed: 7, Faults: link.Faults{Corrupt: 0.5}})
	c := linktest.NewCollector()
	if err := b.Start(c); err != nil {
		t.Fatal(err)
	}
	src, dst := linktest.Endpoint(w), linktest.Endpoint(b)
	for i := range uint32(n) {
		p := linktest.MakePacket(i, 64, src, dst)
		want := slices.Clone(p.Data())
		if err := w.Send([]*link.Packet{p}); err != nil {
			t.Fatal(err)
		}
		// Sending sealed the ICRC (the last 4 bytes); the rest is the caller's.
		if got := p.Data(); !slices.Equal(got[:len(got)-4], want[:len(want)-4]) {
			t.Fatalf("packet %d changed by Send", i)
		}
		link.Put(p)
	}
	s := w.FaultStats()
	bs := linktest.WaitStats(b, func(st link.Stats) bool { return st.RxBadICRC+st.RxPackets >= n })
	if s.Corrupted < n/3 || s.Corrupted > 2*n/3 {
		t.Errorf("corrupted %d of %d, want about half", s.Corrupted, n)
	}
	if bs.RxBadICRC != s.Corrupted || bs.RxPackets != n-s.Corrupted {
		t.Errorf("receiver: RxBadICRC %d, RxPackets %d; corrupted %d of %d", bs.RxBadICRC, bs.RxPackets, s.Corrupted, n)
	}
	for _, r := range c.Packets() {
		if msg := linktest.CheckPacket(r, linktest.Seq(r.Data), 64, src, dst); msg != "" {
			t.Error(msg)
		}
	}
}

// TestCorruptDelayedDuplicated: corruption also reaches copies the wrapper
// sends later (delayed, held, duplicated).
func TestCorruptDelayedDuplicated(t *testing.T) {
	w, b := udpPair(t, Config{Seed: 8, Faults: link.Faults{Corrupt: 1, Duplicate: 1, Reorder: 0.5, Jitter: time.Millisecond}})
	got := run(t, w, b, 64)
	bs := linktest.WaitStats(b, func(st link.Stats) bool { return st.RxBadICRC >= 128 })
	if len(got) != 0 || bs.RxBadICRC != 128 {
		t.Errorf("received %d, RxBadICRC %d; want 0, 128", len(got), bs.RxBadICRC)
	}
}

// TestForwarding: the wrapper forwards the UDP link's Poller and Waiter
// (packets received on the caller's goroutine) and its state.
func TestForwarding(t *testing.T) {
	a, b := udpPair(t, Config{})
	wb := New(b, Config{})
	t.Cleanup(func() { wb.Close() })
	c := linktest.NewCollector()
	if err := wb.Start(c); err != nil {
		t.Fatal(err)
	}
	if !wb.Up() {
		t.Error("not up")
	}
	pkt := linktest.MakePacket(1, 64, linktest.Endpoint(a), linktest.Endpoint(b))
	linktest.SendAll(t, a, []*link.Packet{pkt}, 1)
	deadline := time.Now().Add(linktest.Timeout)
	for c.Len() == 0 && time.Now().Before(deadline) {
		if _, ok := wb.PollWait(10*time.Millisecond, func() bool { return false }); !ok {
			wb.Poll()
			time.Sleep(time.Millisecond)
		}
	}
	if c.Len() != 1 {
		t.Fatalf("received %d", c.Len())
	}
	// Over a loop link (no Poller), Poll and PollWait decline.
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	l, err := n.Attach([]netip.Addr{lo1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	wl := New(l, Config{})
	defer wl.Close()
	if _, ok := wl.PollWait(time.Millisecond, nil); ok || wl.Poll() != 0 {
		t.Error("PollWait or Poll on a loop link")
	}
}

// TestPassThroughAllocs: with no faults, Send allocates no more than the
// inner link's Send.
func TestPassThroughAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	a, _ := n.Attach([]netip.Addr{lo1}, 0)
	b, _ := n.Attach([]netip.Addr{lo2}, 0)
	w := New(a, Config{})
	defer w.Close()
	defer b.Close()
	if err := b.Start(link.HandlerFunc(func([]*link.Packet) {})); err != nil {
		t.Fatal(err)
	}
	p := linktest.MakePacket(1, 64, linktest.Endpoint(a), linktest.Endpoint(b))
	batch := []*link.Packet{p}
	inner := testing.AllocsPerRun(200, func() { _ = a.Send(batch) })
	wrapped := testing.AllocsPerRun(200, func() { _ = w.Send(batch) })
	if wrapped > inner {
		t.Errorf("wrapped Send: %.1f allocations, inner %.1f", wrapped, inner)
	}
}

// TestSameVerdictsAsLoop: the wrapper draws the same faults as a loop
// Network given the same seed and configuration (one mechanism).
func TestSameVerdictsAsLoop(t *testing.T) {
	f := link.Faults{Loss: 0.25}
	nw := loop.NewNetwork(loop.Config{Faults: f, Seed: 11})
	defer nw.Close()
	a, _ := nw.Attach([]netip.Addr{lo1}, 0)
	b, _ := nw.Attach([]netip.Addr{lo2}, 0)
	c := linktest.NewCollector()
	if err := b.Start(c); err != nil {
		t.Fatal(err)
	}
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	pkts := make([]*link.Packet, 300)
	for i := range pkts {
		pkts[i] = linktest.MakePacket(uint32(i), 64, src, dst)
	}
	linktest.SendAll(t, a, pkts, 8)
	viaLoop := seqs(settle(c))
	slices.Sort(viaLoop)

	w, ub := udpPair(t, Config{Seed: 11, Faults: f})
	viaUDP := seqs(run(t, w, ub, 300))
	slices.Sort(viaUDP)
	if !slices.Equal(viaLoop, viaUDP) {
		t.Errorf("loop delivered %d packets, the wrapper over UDP %d, or different ones", len(viaLoop), len(viaUDP))
	}
}
