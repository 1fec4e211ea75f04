package udp

import (
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
)

// spinRig is a spinner on a socket of its own, with no reader goroutine:
// the tests drive spin by hand.
type spinRig struct {
	l    *Link
	rx   *rxState
	fd   uintptr
	in   *net.UDPConn // the spinner's socket
	out  *net.UDPConn // sends to it
	sp   *spinner
	pkts []*link.Packet
}

func newSpinRig(t *testing.T, max time.Duration) *spinRig {
	t.Helper()
	in, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := net.DialUDP("udp4", nil, in.LocalAddr().(*net.UDPAddr))
	if err != nil {
		in.Close()
		t.Fatal(err)
	}
	rc, err := in.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	g := &spinRig{l: &Link{}, in: in, out: out, sp: &spinner{max: max, fresh: true}, pkts: make([]*link.Packet, 4)}
	for i := range g.pkts {
		g.pkts[i] = link.Get()
	}
	g.rx = &rxState{r: newReceiver(rc, g.pkts, nil)}
	g.rx.r.prepare(len(g.pkts))
	rc.Control(func(fd uintptr) { g.fd = fd })
	t.Cleanup(func() {
		in.Close()
		out.Close()
		for _, p := range g.pkts {
			link.Put(p)
		}
	})
	return g
}

// arm starts a spin as the reader does after its first batch since it
// parked (each spin here that returns false stands for a park).
func (g *spinRig) arm() {
	g.sp.parked()
	g.sp.arm(time.Now())
}

func (g *spinRig) send(t *testing.T) {
	t.Helper()
	if _, err := g.out.Write(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
}

// TestSpinUnit drives one spinner by hand: it spins only after a batch,
// ends by itself when nothing comes (counted as a miss, and repeated misses
// make the next batches skip their spin), returns holding the receive lock
// with what came during the spin, parks without the lock when another
// goroutine holds it (the datagram left for that one), and with one P ends
// early once it has kept the reader from the poller for streakMax.
func TestSpinUnit(t *testing.T) {
	const max = streakMax / 2 // with one P the streak would end a longer one first
	g := newSpinRig(t, max)

	// Not armed: no spin.
	if g.sp.spin(g.l, g.rx, g.fd) {
		t.Fatal("spun without a batch before")
	}
	if g.l.spinMisses.Load() != 0 {
		t.Fatal("a spin without a batch counted")
	}

	// Armed, nothing comes: ends after max, a miss; not armed again.
	g.arm()
	start := time.Now()
	if g.sp.spin(g.l, g.rx, g.fd) {
		t.Fatal("spin returned true with nothing sent")
	}
	if d := time.Since(start); d < max {
		t.Fatalf("spin ended after %v, before its %v", d, max)
	}
	if g.l.spinMisses.Load() != 1 || g.sp.armed {
		t.Fatalf("after a miss: misses %d, armed %v", g.l.spinMisses.Load(), g.sp.armed)
	}

	// A datagram during the spin: true, holding the lock, with it received
	// (a long bound, so that a loaded machine cannot make it run out first).
	g.sp.max = time.Second
	g.arm()
	go g.out.Write(make([]byte, 64)) // runs while spin yields, or beside it
	if !g.sp.spin(g.l, g.rx, g.fd) {
		t.Fatal("spin missed a datagram sent during it")
	}
	g.sp.max = max
	if g.rx.mu.TryLock() {
		t.Fatal("spin returned true without the receive lock")
	}
	if g.rx.r.k != 1 || g.rx.r.errno != 0 || g.rx.r.hdrs[0].n != 64 {
		t.Fatalf("received %d datagrams (errno %v, first %d bytes), want one of 64", g.rx.r.k, g.rx.r.errno, g.rx.r.hdrs[0].n)
	}
	g.rx.r.prepare(1)
	g.rx.mu.Unlock()
	if g.l.spinHits.Load() != 1 || g.sp.miss != 0 {
		t.Fatalf("after a hit: hits %d, misses in a row %d", g.l.spinHits.Load(), g.sp.miss)
	}

	// The lock held elsewhere (a Poll or PollWait receiving): park, leaving
	// the datagram to the holder.
	g.send(t)
	g.rx.mu.Lock()
	g.arm()
	if g.sp.spin(g.l, g.rx, g.fd) {
		t.Fatal("spin returned true while another goroutine held the lock")
	}
	g.rx.mu.Unlock()
	if !g.sp.readable(g.fd) {
		t.Fatal("the datagram left for the lock's holder is gone")
	}
	g.rx.mu.Lock()
	if !g.rx.r.recvmmsg(g.fd) || g.rx.r.k != 1 {
		t.Fatal("the holder could not receive the datagram")
	}
	g.rx.r.prepare(1)
	g.rx.mu.Unlock()

	// Misses in a row: the batches after them skip their spin, more each time.
	g.sp.miss = 0
	skips := []int{0, 1, 2, 4, 8}
	for i, want := range skips {
		g.arm()
		if g.sp.spin(g.l, g.rx, g.fd) {
			t.Fatal("spin returned true with nothing sent")
		}
		if g.sp.skip != want {
			t.Fatalf("after %d misses in a row: skip %d batches, want %d", i+1, g.sp.skip, want)
		}
		for range want {
			g.arm()
			if g.sp.armed {
				t.Fatalf("after %d misses in a row: a batch to skip armed a spin", i+1)
			}
		}
	}
	g.arm()
	if !g.sp.armed {
		t.Fatal("not armed after the skipped batches")
	}
	g.sp.disarm()

	// A closed link ends a spin at once, without a miss.
	g.l.closed.Store(true)
	g.sp.max = time.Hour
	g.arm()
	misses := g.l.spinMisses.Load()
	if g.sp.spin(g.l, g.rx, g.fd) || g.l.spinMisses.Load() != misses {
		t.Fatal("a closed link's spin")
	}
	g.l.closed.Store(false)

	// One P: a reader that has gone streakMax without parking parks, however
	// long its spin; with more Ps it spins on.
	g.sp.parked()
	g.sp.skip, g.sp.miss = 0, 0
	g.sp.arm(time.Now().Add(-2 * streakMax)) // first batch after the park: the streak began then
	g.sp.arm(time.Now())                     // a later batch
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if g.sp.spin(g.l, g.rx, g.fd) || g.l.spinMisses.Load() != misses {
		t.Fatal("a spin past the streak with one P returned true or counted a miss")
	}
}

// TestSpinStream sends batches in rounds, each as soon as the previous one
// was delivered: the receiver's reader finds the next batch while it spins
// (the spin is long, so every round should be caught), every packet arrives
// once and in order, and once the stream stops the spin ends by itself and
// the reader parks in the poller. With the spin off nothing spins.
func TestSpinStream(t *testing.T) {
	for _, c := range []struct {
		name string
		spin time.Duration
	}{{"spin", 20 * time.Millisecond}, {"off", -1}} {
		t.Run(c.name, func(t *testing.T) {
			linktest.NoLeaks(t)
			a, b := pair4(t, Config{RxSpin: c.spin})
			rx := collect(t, b)
			src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
			const rounds, per = 50, 8
			seq := uint32(0)
			for range rounds {
				if err := linktest.SendPackets(a, seq, per, 200, src, dst); err != nil {
					t.Fatal(err)
				}
				seq += per
				rx.WaitFor(t, int(seq))
			}
			waitInOrder(t, rx, seq, src, dst)
			hits := b.spinHits.Load()
			t.Logf("%d rounds: %d spins caught the next, %d ran out", rounds, hits, b.spinMisses.Load())
			if c.spin < 0 {
				if hits != 0 || b.spinMisses.Load() != 0 {
					t.Fatalf("spin off: %d hits, %d misses", hits, b.spinMisses.Load())
				}
				return
			}
			if hits == 0 {
				t.Fatalf("no spin caught a round of %d", rounds)
			}
			// The stream has stopped: the last spin runs out (with one P
			// it may end first because the reader has not parked for
			// streakMax) and the reader parks in the poller (its goroutine
			// waits for I/O).
			deadline := time.Now().Add(linktest.Timeout)
			for !readerParked() {
				if time.Now().After(deadline) {
					t.Fatalf("the reader did not park after the stream: misses %d", b.spinMisses.Load())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// readerParked reports whether some reader goroutine waits in the poller
// (the tests in this file run one link receiving at a time).
func readerParked() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, ").readLoop(") && strings.Contains(g, "[IO wait") {
			return true
		}
	}
	return false
}

// TestSpinPollWait streams to a link whose reader spins long while the
// test's goroutine receives with PollWait and Poll, which must take the
// receive lock from a spinning reader as from a parked one: every packet
// arrives once and in order, whoever took it, and the waiter takes some.
func TestSpinPollWait(t *testing.T) {
	linktest.NoLeaks(t)
	a, b := pair4(t, Config{RxSpin: 5 * time.Millisecond})
	rx := collect(t, b)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	const per = 8
	took, seq := 0, uint32(0)
	for round := 0; round < 200 && (took == 0 || round < 40); round++ {
		done := make(chan struct{})
		base := seq
		go func() {
			defer close(done)
			pkts := linktest.MakePackets(base, per, 200, src, dst)
			time.Sleep(50 * time.Microsecond)
			if err := a.Send(pkts[:per/2]); err != nil {
				t.Error(err)
			}
			time.Sleep(20 * time.Microsecond)
			if err := a.Send(pkts[per/2:]); err != nil {
				t.Error(err)
			}
			for _, p := range pkts {
				link.Put(p)
			}
		}()
		seq += per
		deadline := time.Now().Add(linktest.Timeout)
		for rx.Len() < int(seq) && time.Now().Before(deadline) {
			if round%2 == 0 {
				n, _ := b.PollWait(5*time.Millisecond, nil)
				took += n
			} else {
				took += b.Poll()
			}
		}
		<-done
	}
	waitInOrder(t, rx, seq, src, dst)
	t.Logf("the waiter took %d of %d packets; spins: %d caught, %d ran out", took, seq, b.spinHits.Load(), b.spinMisses.Load())
	if took == 0 {
		t.Fatalf("PollWait and Poll took none of %d packets", seq)
	}
}

// TestSpinClose closes a link while its reader spins (a long spin, a batch
// just delivered): Close returns and the reader goroutine ends.
func TestSpinClose(t *testing.T) {
	linktest.NoLeaks(t)
	a, b := pair4(t, Config{RxSpin: time.Hour})
	rx := collect(t, b)
	src, dst := linktest.Endpoint(a), linktest.Endpoint(b)
	p := linktest.MakePacket(0, 200, src, dst)
	defer link.Put(p)
	if err := a.Send([]*link.Packet{p}); err != nil {
		t.Fatal(err)
	}
	rx.WaitFor(t, 1)
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(linktest.Timeout):
		t.Fatal("Close did not return while the reader spun")
	}
}

// TestRxSpinConfig: a negative RxSpin turns the spin off, zero takes the
// default or SOFTRDMA_RXSPIN.
func TestRxSpinConfig(t *testing.T) {
	for _, c := range []struct {
		env  string
		cfg  time.Duration
		want time.Duration
	}{
		{"", 0, DefaultRxSpin},
		{"", -1, 0},
		{"", 30 * time.Microsecond, 30 * time.Microsecond},
		{"20us", 0, 20 * time.Microsecond},
		{"75", 0, 75 * time.Microsecond},
		{"0", 0, 0},
		{"bogus", 0, DefaultRxSpin},
		{"20us", 30 * time.Microsecond, 30 * time.Microsecond},
	} {
		t.Setenv("SOFTRDMA_RXSPIN", c.env)
		if c.env == "" {
			syscall.Unsetenv("SOFTRDMA_RXSPIN")
		}
		if got := rxSpin(c.cfg); got != c.want {
			t.Errorf("SOFTRDMA_RXSPIN=%q, RxSpin %v: %v, want %v", c.env, c.cfg, got, c.want)
		}
	}
}
