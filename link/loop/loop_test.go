// Tests of the in-process network: the shared conformance suite, attaching,
// routing, every fault and its reproducibility, backpressure and Close.

package loop

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
)

var (
	ip1 = netip.MustParseAddr("127.0.0.1")
	ip2 = netip.MustParseAddr("127.0.0.2")
	ip6 = netip.MustParseAddr("::1")
)

// pair attaches two links to a fresh network and closes everything at the
// end of the test.
func pair(t *testing.T, cfg Config, aAddrs, bAddrs []netip.Addr) (*Network, *Link, *Link) {
	t.Helper()
	n := NewNetwork(cfg)
	a, err := n.Attach(aAddrs, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Attach(bAddrs, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
		n.Close()
	})
	return n, a, b
}

func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b []netip.Addr
	}{
		{"IPv4", []netip.Addr{ip1}, []netip.Addr{ip2}},
		{"IPv6", []netip.Addr{ip6}, []netip.Addr{ip6}},
		{"Mapped", []netip.Addr{netip.AddrFrom16(ip1.As16())}, []netip.Addr{ip2, ip6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Link, link.Link) {
				_, a, b := pair(t, Config{Seed: 1}, c.a, c.b)
				return a, b
			})
		})
	}
}

// exchange sends n packets of size bytes (seq 0..n-1, one per Send) from
// a to b.
func exchange(t *testing.T, a, b *Link, n int, size int) {
	t.Helper()
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	for i := range uint32(n) {
		linktest.SendAll(t, a, []*link.Packet{linktest.MakePacket(i, size, src, dst)}, 1)
	}
}

func seqs(rs []linktest.Received) []uint32 {
	out := make([]uint32, len(rs))
	for i, r := range rs {
		out[i] = linktest.Seq(r.Data)
	}
	return out
}

// settle waits until the collector has not grown for a while.
func settle(rx *linktest.Collector) []linktest.Received {
	last := -1
	for range 200 {
		time.Sleep(10 * time.Millisecond)
		if n := rx.Len(); n == last {
			break
		} else {
			last = n
		}
	}
	return rx.Packets()
}

func TestAttach(t *testing.T) {
	linktest.NoLeaks(t)
	n := NewNetwork(Config{})
	defer n.Close()
	a, err := n.Attach([]netip.Addr{ip1, ip6}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	if a.Port() != 4791 || !slices.Equal(a.Addrs(), []netip.Addr{ip1, ip6}) {
		t.Errorf("link at %v port %d", a.Addrs(), a.Port())
	}
	bad := []struct {
		name  string
		addrs []netip.Addr
		port  uint16
	}{
		{"same address and port", []netip.Addr{ip1}, 4791},
		{"mapped form of a taken address", []netip.Addr{netip.AddrFrom16(ip1.As16())}, 4791},
		{"one of two taken", []netip.Addr{ip2, ip6}, 4791},
		{"no addresses", nil, 4791},
		{"invalid address", []netip.Addr{{}}, 4791},
		{"address twice", []netip.Addr{ip2, ip2}, 4791},
	}
	for _, c := range bad {
		if _, err := n.Attach(c.addrs, c.port); !errors.Is(err, link.ErrAddress) {
			t.Errorf("%s: Attach = %v, want ErrAddress", c.name, err)
		}
	}
	b, err := n.Attach([]netip.Addr{ip1}, 4792)
	if err != nil {
		t.Fatalf("other port: %v", err)
	}
	c, err := n.Attach([]netip.Addr{ip2}, 4791)
	if err != nil {
		t.Fatalf("other address: %v", err)
	}
	// Port 0 picks distinct ephemeral ports.
	e1, err1 := n.Attach([]netip.Addr{ip1}, 0)
	e2, err2 := n.Attach([]netip.Addr{ip1}, 0)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if e1.Port() < firstEphemeral || e2.Port() < firstEphemeral || e1.Port() == e2.Port() {
		t.Errorf("ephemeral ports %d and %d", e1.Port(), e2.Port())
	}

	// A closed link's address can be attached again.
	a.Close()
	a2, err := n.Attach([]netip.Addr{ip1}, 4791)
	if err != nil {
		t.Fatalf("re-attach after Close: %v", err)
	}
	for _, l := range []*Link{a2, b, c, e1} {
		if err := l.Start(linktest.NewCollector()); err != nil {
			t.Fatal(err)
		}
	}

	// Network.Close closes every link.
	n.Close()
	for _, l := range []*Link{a2, b, c, e1, e2} {
		p := linktest.MakePacket(1, 64, linktest.Endpoint(l), linktest.Endpoint(b))
		if err := l.Send([]*link.Packet{p}); !errors.Is(err, link.ErrClosed) {
			t.Errorf("Send after Network.Close = %v", err)
		}
		link.Put(p)
	}
	if _, err := n.Attach([]netip.Addr{ip1}, 1); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Attach after Close = %v, want ErrClosed", err)
	}
}

func TestRouting(t *testing.T) {
	linktest.NoLeaks(t)
	n, a, b := pair(t, Config{}, []netip.Addr{ip1}, []netip.Addr{netip.AddrFrom16(ip2.As16()), ip6})
	rx := linktest.NewCollector()
	b.Start(rx)
	src := linktest.Endpoint(a)

	// To the mapped form, to the plain form, and nowhere.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(ip2.As16()), b.Port())
	plain := netip.AddrPortFrom(ip2, b.Port())
	linktest.SendAll(t, a, []*link.Packet{
		linktest.MakePacket(0, 64, src, mapped),
		linktest.MakePacket(1, 64, src, plain),
		linktest.MakePacket(2, 64, src, netip.AddrPortFrom(ip2, b.Port()+1)),
		linktest.MakePacket(3, 64, src, netip.MustParseAddrPort("127.0.0.9:4791")),
	}, 4)
	got := rx.WaitFor(t, 2)
	for i, r := range got {
		if msg := linktest.CheckPacket(r, uint32(i), 64, src, plain); msg != "" {
			t.Error(msg)
		}
	}
	rx.Quiet(t, 2, 20*time.Millisecond)
	if s := a.Stats(); s.Dropped != 2 || s.TxPackets != 4 {
		t.Errorf("sender: Dropped %d TxPackets %d, want 2 and 4", s.Dropped, s.TxPackets)
	}
	if s := n.Stats(); s.Unroutable != 2 || s.Sent != 4 {
		t.Errorf("network: %+v", s)
	}
}

// faultRun sends n packets through a network with the given faults and
// returns the sequence numbers received, after the network went quiet.
func faultRun(t *testing.T, cfg Config, n, size int) ([]uint32, *Network, *Link, *Link) {
	t.Helper()
	nw, a, b := pair(t, cfg, []netip.Addr{ip1}, []netip.Addr{ip2})
	rx := linktest.NewCollector()
	b.Start(rx)
	exchange(t, a, b, n, size)
	return seqs(settle(rx)), nw, a, b
}

func TestLossReproducible(t *testing.T) {
	linktest.NoLeaks(t)
	const n = 1000
	cfg := Config{Seed: 42, Faults: Faults{Loss: 0.3}}
	first, nw, a, b := faultRun(t, cfg, n, 64)
	again, _, _, _ := faultRun(t, cfg, n, 64)
	other, _, _, _ := faultRun(t, Config{Seed: 43, Faults: cfg.Faults}, n, 64)
	if !slices.Equal(first, again) {
		t.Error("same seed, different losses")
	}
	if slices.Equal(first, other) {
		t.Error("different seeds, same losses")
	}
	if !slices.IsSorted(first) {
		t.Error("loss reordered packets")
	}
	lost := n - len(first)
	if lost < n/5 || lost > n*2/5 {
		t.Errorf("lost %d of %d at Loss 0.3", lost, n)
	}
	if s := a.Stats(); s.Dropped != uint64(lost) {
		t.Errorf("sender Dropped %d, want %d", s.Dropped, lost)
	}
	if s := b.Stats(); s.RxPackets != uint64(len(first)) || s.Dropped != 0 {
		t.Errorf("receiver %+v", s)
	}
	if s := nw.Stats(); s.Lost != uint64(lost) {
		t.Errorf("network Lost %d, want %d", s.Lost, lost)
	}
}

func TestSetFaults(t *testing.T) {
	linktest.NoLeaks(t)
	n, a, b := pair(t, Config{Faults: Faults{Loss: 1}}, []netip.Addr{ip1}, []netip.Addr{ip2})
	rx := linktest.NewCollector()
	b.Start(rx)
	exchange(t, a, b, 10, 64)
	rx.Quiet(t, 0, 20*time.Millisecond)
	n.SetFaults(Faults{})
	if f := n.Faults(); f.Loss != 0 {
		t.Errorf("Faults() = %+v after SetFaults", f)
	}
	exchange(t, a, b, 10, 64)
	rx.WaitFor(t, 10)
	n.SetFaults(Faults{Loss: 1})
	exchange(t, a, b, 10, 64)
	rx.Quiet(t, 10, 20*time.Millisecond)
}

func TestDuplicate(t *testing.T) {
	linktest.NoLeaks(t)
	got, nw, _, b := faultRun(t, Config{Faults: Faults{Duplicate: 1}}, 50, 64)
	want := make([]uint32, 0, 100)
	for i := range uint32(50) {
		want = append(want, i, i)
	}
	if !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	if s := nw.Stats(); s.Duplicated != 50 {
		t.Errorf("Duplicated = %d", s.Duplicated)
	}
	if s := b.Stats(); s.RxPackets != 100 {
		t.Errorf("RxPackets = %d", s.RxPackets)
	}
}

func TestReorder(t *testing.T) {
	linktest.NoLeaks(t)
	const timeout = 30 * time.Millisecond
	nw, a, b := pair(t, Config{Faults: Faults{Reorder: 1, ReorderTimeout: timeout}},
		[]netip.Addr{ip1}, []netip.Addr{ip2})
	rx := linktest.NewCollector()
	b.Start(rx)
	exchange(t, a, b, 6, 64)
	got := seqs(rx.WaitFor(t, 6))
	if want := []uint32{1, 0, 3, 2, 5, 4}; !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	if s := nw.Stats(); s.Reordered != 3 {
		t.Errorf("Reordered = %d, want 3", s.Reordered)
	}

	// A held packet with nothing behind it comes after the timeout.
	start := time.Now()
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	linktest.SendAll(t, a, []*link.Packet{linktest.MakePacket(9, 64, src, dst)}, 1)
	rx.WaitFor(t, 7)
	if d := time.Since(start); d < timeout {
		t.Errorf("held packet arrived after %v, before the %v timeout", d, timeout)
	}
}

func TestCorrupt(t *testing.T) {
	linktest.NoLeaks(t)
	const n = 300
	got, nw, _, b := faultRun(t, Config{Seed: 7, Faults: Faults{Corrupt: 1}}, n, 64)
	if len(got) != 0 {
		t.Errorf("%d corrupted packets delivered", len(got))
	}
	if s := b.Stats(); s.RxBadICRC != n || s.RxPackets != 0 {
		t.Errorf("receiver: RxBadICRC %d RxPackets %d, want %d and 0", s.RxBadICRC, s.RxPackets, n)
	}
	if s := nw.Stats(); s.Corrupted != n {
		t.Errorf("Corrupted = %d", s.Corrupted)
	}

	// Half corrupted: the rest arrive intact.
	got, nw, _, b = faultRun(t, Config{Seed: 7, Faults: Faults{Corrupt: 0.5}}, n, 64)
	s, ns := b.Stats(), nw.Stats()
	if uint64(len(got)) != n-ns.Corrupted || s.RxBadICRC != ns.Corrupted || ns.Corrupted == 0 {
		t.Errorf("received %d, corrupted %d, RxBadICRC %d", len(got), ns.Corrupted, s.RxBadICRC)
	}
}

func TestCorruptBitSkipsMaskedByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	seen := make(map[int]bool)
	for range 20000 {
		b := link.CorruptBit(rng, 20)
		if b < 0 || b >= 160 || b/8 == 4 {
			t.Fatalf("bit %d", b)
		}
		seen[b] = true
	}
	if len(seen) != 152 {
		t.Errorf("%d distinct bits chosen, want 152", len(seen))
	}
}

func TestDelay(t *testing.T) {
	linktest.NoLeaks(t)
	const delay = 40 * time.Millisecond
	nw, a, b := pair(t, Config{Faults: Faults{Delay: delay}}, []netip.Addr{ip1}, []netip.Addr{ip2})
	rx := linktest.NewCollector()
	b.Start(rx)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	pkts := make([]*link.Packet, 20)
	for i := range pkts {
		pkts[i] = linktest.MakePacket(uint32(i), 64, src, dst)
	}
	start := time.Now()
	linktest.SendAll(t, a, pkts, 20)
	if d := time.Since(start); d >= delay {
		t.Errorf("Send blocked for %v", d)
	}
	got := seqs(rx.WaitFor(t, 20))
	if d := time.Since(start); d < delay {
		t.Errorf("delayed packets arrived after %v", d)
	}
	if !slices.IsSorted(got) {
		t.Errorf("fixed delay reordered: %v", got)
	}
	if s := nw.Stats(); s.Delayed != 20 {
		t.Errorf("Delayed = %d", s.Delayed)
	}

	// Jitter: every packet arrives, in some order.
	nw.SetFaults(Faults{Delay: time.Millisecond, Jitter: 10 * time.Millisecond})
	exchange(t, a, b, 100, 64)
	got = seqs(rx.WaitFor(t, 120))[20:]
	slices.Sort(got)
	for i, s := range got {
		if s != uint32(i) {
			t.Fatalf("after jitter, sorted packet %d is %d", i, s)
		}
	}
}

func TestFilter(t *testing.T) {
	linktest.NoLeaks(t)
	var mu sync.Mutex
	acks := 0
	var seen []netip.AddrPort
	cfg := Config{Faults: Faults{Filter: func(p *link.Packet) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, p.Src)
		switch p.Buf[0] {
		case 0x11: // ACKNOWLEDGE: drop the first one
			acks++
			return acks == 1
		case 0x0C: // truncate READ REQUESTs
			p.N = 10
		}
		return false
	}}}
	nw, a, b := pair(t, cfg, []netip.Addr{ip1}, []netip.Addr{ip2})
	rx := linktest.NewCollector()
	b.Start(rx)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	var pkts []*link.Packet
	for i, op := range []byte{0x04, 0x11, 0x11, 0x0C, 0x04} {
		p := linktest.MakePacket(uint32(i), linktest.MinSize, src, dst)
		p.Buf[0] = op
		pkts = append(pkts, p)
	}
	linktest.SendAll(t, a, pkts, len(pkts))
	got := seqs(rx.WaitFor(t, 3))
	if want := []uint32{0, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	rx.Quiet(t, 3, 20*time.Millisecond)
	if s := b.Stats(); s.RxMalformed != 1 {
		t.Errorf("RxMalformed = %d, want 1", s.RxMalformed)
	}
	if s := a.Stats(); s.Dropped != 1 {
		t.Errorf("sender Dropped = %d, want 1", s.Dropped)
	}
	if s := nw.Stats(); s.Filtered != 1 {
		t.Errorf("Filtered = %d", s.Filtered)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s != src {
			t.Errorf("Filter saw Src %s, want %s", s, src)
		}
	}
}

func TestQueueOverflow(t *testing.T) {
	linktest.NoLeaks(t)
	const queue, n = 100, 400
	nw, a, b := pair(t, Config{QueueLen: queue}, []netip.Addr{ip1}, []netip.Addr{ip2})
	release := make(chan struct{})
	rx := linktest.NewCollector()
	var once sync.Once
	entered := make(chan struct{})
	rx.OnReceive = func([]*link.Packet) {
		once.Do(func() { close(entered) })
		<-release
	}
	b.Start(rx)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	linktest.SendAll(t, a, []*link.Packet{linktest.MakePacket(0, 64, src, dst)}, 1)
	<-entered // the delivery goroutine is stuck in Receive
	start := time.Now()
	for i := uint32(1); i < n; i++ {
		linktest.SendAll(t, a, []*link.Packet{linktest.MakePacket(i, 64, src, dst)}, 1)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Send to a full queue took %v", d)
	}
	close(release)
	got := settle(rx)
	s := b.Stats()
	if len(got) != queue+1 || s.Dropped != n-queue-1 {
		t.Errorf("received %d, receiver dropped %d; want %d and %d", len(got), s.Dropped, queue+1, n-queue-1)
	}
	if !slices.IsSorted(seqs(got)) {
		t.Error("overflow reordered packets")
	}
	if ns := nw.Stats(); ns.Overflow != s.Dropped {
		t.Errorf("Overflow = %d, receiver Dropped = %d", ns.Overflow, s.Dropped)
	}
}

func TestBatchLimit(t *testing.T) {
	linktest.NoLeaks(t)
	_, a, b := pair(t, Config{}, []netip.Addr{ip1}, []netip.Addr{ip2})
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	var pkts []*link.Packet
	for i := range uint32(1000) {
		pkts = append(pkts, linktest.MakePacket(i, 64, src, dst))
	}
	linktest.SendAll(t, a, pkts, 1000)
	rx := linktest.NewCollector()
	b.Start(rx)
	rx.WaitFor(t, 1000)
	if n, largest := rx.Batches(); largest != MaxBatch || n < 1000/MaxBatch {
		t.Errorf("%d batches, largest %d; want at least %d, largest %d", n, largest, 1000/MaxBatch, MaxBatch)
	}
}

func TestCloseDrops(t *testing.T) {
	linktest.NoLeaks(t)
	n, a, b := pair(t, Config{Faults: Faults{Delay: time.Hour, Reorder: 0.5}}, []netip.Addr{ip1}, []netip.Addr{ip2})
	rx := linktest.NewCollector()
	b.Start(rx)
	exchange(t, a, b, 100, 64)
	start := time.Now()
	b.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if rx.Len() != 0 {
		t.Errorf("%d packets delivered", rx.Len())
	}
	n.Close()
}

// TestFaultAccounting runs concurrent senders through every fault while
// another goroutine flips the faults, and checks that each packet is
// accounted for exactly once.
func TestFaultAccounting(t *testing.T) {
	linktest.NoLeaks(t)
	faults := Faults{
		Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1,
		Delay: time.Millisecond, Jitter: time.Millisecond, ReorderTimeout: time.Millisecond,
	}
	nw, a, b := pair(t, Config{Seed: 9, Faults: faults}, []netip.Addr{ip1, ip6}, []netip.Addr{ip2, ip6})
	rx := linktest.NewCollector()
	b.Start(rx)
	a.Start(linktest.NewCollector())
	dsts := []netip.AddrPort{netip.AddrPortFrom(ip2, b.Port()), netip.AddrPortFrom(ip6, b.Port())}

	stop := make(chan struct{})
	var flipper sync.WaitGroup
	flipper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if i%2 == 1 {
				nw.SetFaults(Faults{})
			} else {
				nw.SetFaults(faults)
			}
		}
	})
	var wg sync.WaitGroup
	const senders, each = 4, 2000
	for g := range senders {
		wg.Go(func() {
			dst := dsts[g%2]
			for i := range uint32(each) {
				p := linktest.MakePacket(i, 64, netip.AddrPort{}, dst)
				if err := a.Send([]*link.Packet{p}); err != nil {
					t.Error(err)
				}
				link.Put(p)
			}
		})
	}
	wg.Wait()
	close(stop)
	flipper.Wait()

	var as, bs link.Stats
	var ns FaultStats
	for range 500 {
		as, bs, ns = a.Stats(), b.Stats(), nw.Stats()
		if as.Dropped+bs.Dropped+bs.RxBadICRC+bs.RxPackets == ns.Sent+ns.Duplicated {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if as.TxPackets != senders*each || ns.Sent != senders*each {
		t.Errorf("sent %d, network saw %d", as.TxPackets, ns.Sent)
	}
	if as.Dropped+bs.Dropped+bs.RxBadICRC+bs.RxPackets != ns.Sent+ns.Duplicated {
		t.Errorf("unaccounted packets: sender %+v receiver %+v network %+v", as, bs, ns)
	}
	if ns.Lost+ns.Overflow != as.Dropped+bs.Dropped {
		t.Errorf("network %+v disagrees with links: sender %+v receiver %+v", ns, as, bs)
	}
	if uint64(rx.Len()) != bs.RxPackets {
		t.Errorf("collector has %d, RxPackets %d", rx.Len(), bs.RxPackets)
	}
	t.Logf("network: %+v", ns)
}

// TestSetUp takes a link down and up: Send fails with ErrDown, packets for
// it are dropped, the state function sees each change once.
func TestSetUp(t *testing.T) {
	linktest.NoLeaks(t)
	_, a, b := pair(t, Config{}, []netip.Addr{ip1}, []netip.Addr{ip2})
	var _ link.StateNotifier = a
	rx := linktest.NewCollector()
	b.Start(rx)
	var changes []bool
	b.NotifyState(func(up bool) { changes = append(changes, up) })
	send := func(l, to *Link, seq uint32) error {
		p := linktest.MakePacket(seq, 64, linktest.Endpoint(l), linktest.Endpoint(to))
		defer link.Put(p)
		return l.Send([]*link.Packet{p})
	}
	if !b.Up() {
		t.Fatal("a link attaches down")
	}
	b.SetUp(false)
	b.SetUp(false)
	if b.Up() {
		t.Fatal("Up after SetUp(false)")
	}
	if err := send(b, a, 1); !errors.Is(err, link.ErrDown) {
		t.Fatalf("Send on a down link = %v, want ErrDown", err)
	}
	if err := send(a, b, 2); err != nil {
		t.Fatal(err)
	}
	rx.Quiet(t, 0, 20*time.Millisecond)
	if s := b.Stats(); s.Dropped != 1 || s.TxErrors != 1 || s.RxPackets != 0 {
		t.Errorf("down link stats %+v, want 1 dropped, 1 TxError", s)
	}
	b.SetUp(true)
	if err := send(a, b, 3); err != nil {
		t.Fatal(err)
	}
	if msg := linktest.CheckPacket(rx.WaitFor(t, 1)[0], 3, 64, linktest.Endpoint(a), linktest.Endpoint(b)); msg != "" {
		t.Fatal(msg)
	}
	if len(changes) != 2 || changes[0] || !changes[1] {
		t.Fatalf("state changes %v, want [false true]", changes)
	}
	b.NotifyState(nil)
	b.SetUp(false)
	if len(changes) != 2 {
		t.Fatal("NotifyState(nil) did not remove the function")
	}
}

func TestMulticast(t *testing.T) {
	for _, c := range []struct {
		name  string
		group netip.Addr
		addrs [3]netip.Addr
	}{
		{"IPv4", netip.MustParseAddr("239.1.2.3"), [3]netip.Addr{ip1, ip2, netip.MustParseAddr("127.0.0.3")}},
		{"Mapped", netip.MustParseAddr("::ffff:224.0.1.9"), [3]netip.Addr{ip1, ip2, netip.MustParseAddr("127.0.0.3")}},
		{"IPv6", netip.MustParseAddr("ff0e::1:2"), [3]netip.Addr{ip6, netip.MustParseAddr("::2"), netip.MustParseAddr("::3")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.RunMulticast(t, c.group, func(t *testing.T) (a, b, d link.Link) {
				n := NewNetwork(Config{Seed: 1})
				var ls [3]link.Link
				for i, ad := range c.addrs {
					l, err := n.Attach([]netip.Addr{ad}, 4791)
					if err != nil {
						t.Fatal(err)
					}
					ls[i] = l
				}
				t.Cleanup(func() { n.Close() })
				return ls[0], ls[1], ls[2]
			})
		})
	}
}
