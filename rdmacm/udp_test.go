package rdmacm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// freePort returns a UDP port that is free on addr right now.
func freePort(t testing.TB, addr netip.Addr) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Skipf("no UDP on %v: %v", addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
}

// udpHosts opens two devices over real UDP sockets, each with its own CM.
// Devices on the same address use different ports and send to each other's.
func udpHosts(t testing.TB, a, b netip.Addr) (*CM, *CM) {
	t.Helper()
	pa, pb := freePort(t, a), freePort(t, b)
	if a != b {
		// One port on both addresses, free on both.
		for i := 0; i < 20; i++ {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(b, pa)))
			if err == nil {
				c.Close()
				break
			}
			pa = freePort(t, a)
		}
		pb = pa
	}
	da, err := roce.Open([]netip.Addr{a}, &roce.Options{Port: pa, Options: verbs.Options{Name: "a", RemotePort: pb}})
	if err != nil {
		t.Skipf("open device on %v: %v", a, err)
	}
	db, err := roce.Open([]netip.Addr{b}, &roce.Options{Port: pb, Options: verbs.Options{Name: "b", RemotePort: pa}})
	if err != nil {
		da.Close()
		t.Skipf("open device on %v: %v", b, err)
	}
	o := &Options{CM: cm.Options{ResponseTimeout: 16}} // 268 ms: quick retries on a real link
	ca, err := New([]*verbs.Device{da}, o)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := New([]*verbs.Device{db}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ca.Close()
		cb.Close()
		da.Close()
		db.Close()
	})
	return ca, cb
}

func TestUDPLoopback(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "127.0.0.1", "127.0.0.2"},
		{"IPv6", "::1", "::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := netip.MustParseAddr(tc.a), netip.MustParseAddr(tc.b)
			ca, cb := udpHosts(t, a, b)
			ctx := ctxT(t)
			l, err := Listen(ctx, netip.AddrPortFrom(b, 7174), &ConnOptions{CM: cb})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c, err := Dial(ctx, netip.AddrPortFrom(b, 7174), &ConnOptions{CM: ca, Source: a,
				Param: ConnParam{PrivateData: []byte("over udp")}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			exchange(t, c, s, []byte("ping over real UDP"))
			exchange(t, s, c, []byte("pong"))
			s.Close()
			select {
			case <-c.Disconnected():
			case <-time.After(5 * time.Second):
				t.Fatal("client did not see the disconnect")
			}
			c.Close()

			// A port nobody listens on is rejected; a UD exchange works too.
			_, err = Dial(ctx, netip.AddrPortFrom(b, 7175), &ConnOptions{CM: ca, Source: a})
			var ee *ErrEvent
			if !errors.As(err, &ee) || ee.Event.Type != EventRejected {
				t.Fatalf("dial to a closed port: %v", err)
			}
		})
	}
}

// TestConnectLoad establishes and tears down many connections between two
// devices over UDP loopback and checks that goroutines, QPs, CM state and
// memory come back. It reports the connect rate; it does not assert one.
func TestConnectLoad(t *testing.T) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("SOFTRDMA_CONNECT_LOAD")); err == nil && v > 0 {
		n = v // a longer run, to tell growth from a leak
	}
	if testing.Short() {
		n = 100
	}
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	ca, cb := udpHosts(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l, err := Listen(ctx, netip.AddrPortFrom(b, 7174), &ConnOptions{CM: cb, Backlog: 64,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Warm up once, then take the baseline.
	connectOnce := func() error {
		c, err := Dial(ctx, netip.AddrPortFrom(b, 7174), &ConnOptions{CM: ca, Source: a,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			return err
		}
		s, err := l.Accept(ctx)
		if err != nil {
			c.Close()
			return err
		}
		c.Close()
		s.Close()
		return nil
	}
	if err := connectOnce(); err != nil {
		t.Fatal(err)
	}
	settle := func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if ca.managers()[0].NumConns() == 0 && cb.managers()[0].NumConns() == 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	settle()
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0, _ := leakcheck.Count()
	qa0, qb0 := ca.devices()[0].NumQPs(), cb.devices()[0].NumQPs()

	const workers = 8
	var done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Add(1) <= int64(n) {
				// Dial and Accept are matched per worker only loosely: the
				// listener hands out whichever connection is up first, and
				// each worker closes the pair it got.
				if err := connectOnce(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	t.Logf("%d connections established and torn down in %v: %.0f connections/s (%d workers)",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), workers)

	settle()
	t.Logf("all DREQ/DREP exchanges and time waits (%v each) over %v after the first Dial",
		time.Duration(4096<<ackTimeout)*time.Nanosecond, time.Since(start).Round(time.Millisecond))
	if x, y := ca.managers()[0].NumConns(), cb.managers()[0].NumConns(); x != 0 || y != 0 {
		t.Fatalf("CM state left: %d / %d exchanges", x, y)
	}
	if qa, qb := ca.devices()[0].NumQPs(), cb.devices()[0].NumQPs(); qa != qa0 || qb != qb0 {
		t.Fatalf("QPs leaked: %d/%d, were %d/%d", qa, qb, qa0, qb0)
	}
	if g, stacks := leakcheck.Wait(g0, leakcheck.Settle); g > g0 {
		t.Fatalf("goroutines: %d, were %d\n%s", g, g0, stacks)
	}
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	growth := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("heap: %d KiB before, %d KiB after (%+d KiB)", m0.HeapAlloc>>10, m1.HeapAlloc>>10, growth>>10)
	if growth > 16<<20 {
		t.Fatalf("heap grew by %d MiB over %d connections", growth>>20, n)
	}
}

// BenchmarkConnect measures one connection at a time over UDP loopback:
// Dial, Accept and Close of both ends (the DREQ/DREP exchange finishes in
// the background).
func BenchmarkConnect(b *testing.B) {
	a, bb := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	ca, cb := udpHosts(b, a, bb)
	ctx := context.Background()
	l, err := Listen(ctx, netip.AddrPortFrom(bb, 7174), &ConnOptions{CM: cb, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := Dial(ctx, netip.AddrPortFrom(bb, 7174), &ConnOptions{CM: ca, Source: a, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			b.Fatal(err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
}
