// Test traffic for link implementations: numbered RoCEv2-shaped packets go
// out through one link.Link and a Collector on the other copies what its
// Handler receives, so the suite can check content, order, endpoints, ICRC
// and counters the same way for every implementation.

// Package linktest is a conformance suite for link.Link implementations.
// Run exercises two connected links with batches, ordering, concurrent
// senders, Close semantics and counters; implementations call it from their
// tests with a constructor for a fresh pair. The helpers it uses (Collector,
// MakePacket, CheckPacket, NoLeaks) are exported for implementation-specific
// tests.
package linktest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// Timeout bounds every wait in the suite.
const Timeout = 10 * time.Second

// MinSize is the smallest packet MakePacket builds: a BTH, a 4-byte sequence
// number and the ICRC.
const MinSize = wire.BTHLen + 4 + wire.ICRCLen

// MaxSize is the largest packet MakePacket builds: a 4096-byte payload with
// a RETH and ImmDt, as RDMA WRITE ONLY with immediate carries at MTU 4096.
const MaxSize = wire.BTHLen + 16 + 4 + 4096 + wire.ICRCLen

// MakePacket returns a pool packet of size bytes (MinSize..MaxSize, a
// multiple of 4) numbered seq, addressed from src to dst. It looks like an
// RC SEND ONLY to QP 0x11 with PSN seq; the payload starts with seq and is
// filled with a pattern derived from it. The ICRC field is left zero: Send
// seals it.
func MakePacket(seq uint32, size int, src, dst netip.AddrPort) *link.Packet {
	p := link.Get()
	fill(p.Buf[:size], seq)
	p.N = size
	p.Src, p.Dst = src, dst
	return p
}

// MakePackets returns n packets of MakePacket numbered first, first+1, ...
func MakePackets(first uint32, n, size int, src, dst netip.AddrPort) []*link.Packet {
	pkts := make([]*link.Packet, n)
	for i := range pkts {
		pkts[i] = MakePacket(first+uint32(i), size, src, dst)
	}
	return pkts
}

// SendPackets sends n packets of MakePackets from l in one Send and returns
// them to the pool.
func SendPackets(l link.Link, first uint32, n, size int, src, dst netip.AddrPort) error {
	pkts := MakePackets(first, n, size, src, dst)
	err := l.Send(pkts)
	for _, p := range pkts {
		link.Put(p)
	}
	return err
}

func fill(b []byte, seq uint32) {
	clear(b)
	b[0] = 0x04                                     // RC SEND ONLY
	binary.BigEndian.PutUint16(b[2:], 0xFFFF)       // P_Key
	binary.BigEndian.PutUint32(b[4:], 0x000011)     // DestQP
	binary.BigEndian.PutUint32(b[8:], seq&0xFFFFFF) // PSN
	binary.BigEndian.PutUint32(b[wire.BTHLen:], seq)
	for i := wire.BTHLen + 4; i < len(b)-wire.ICRCLen; i++ {
		b[i] = byte(seq*7 + uint32(i))
	}
}

// Seq returns the sequence number of a packet made by MakePacket.
func Seq(data []byte) uint32 {
	if len(data) < MinSize {
		return 0
	}
	return binary.BigEndian.Uint32(data[wire.BTHLen:])
}

// CheckPacket reports what is wrong with r as the packet MakePacket numbered
// seq with the given size, sent from src to dst (unmapped): its bytes apart
// from the ICRC, its endpoints, and its ICRC as framed by IPv4 Identification
// 0 with Don't Fragment (what softrdma links send). It returns "" if r is
// right.
func CheckPacket(r Received, seq uint32, size int, src, dst netip.AddrPort) string {
	var problems []string
	if len(r.Data) != size {
		problems = append(problems, fmt.Sprintf("size %d, want %d", len(r.Data), size))
	} else {
		want := make([]byte, size)
		fill(want, seq)
		if !bytes.Equal(r.Data[:size-wire.ICRCLen], want[:size-wire.ICRCLen]) {
			problems = append(problems, "content differs")
		}
	}
	if r.Src != Unmap(src) {
		problems = append(problems, fmt.Sprintf("Src %s, want %s", r.Src, Unmap(src)))
	}
	if r.Dst != Unmap(dst) {
		problems = append(problems, fmt.Sprintf("Dst %s, want %s", r.Dst, Unmap(dst)))
	}
	fr := wire.Framing{
		Src: r.Src.Addr(), Dst: r.Dst.Addr(), SrcPort: r.Src.Port(), DstPort: r.Dst.Port(),
		IPv4Frag: wire.IPv4DontFragment,
	}
	// A receiver sees neither the IPv4 Identification nor DF (GSO
	// segments and rxe's packets carry Identifications other than 0).
	if !wire.VerifyICRCAnyIPv4ID(&fr, r.Data) {
		problems = append(problems, "ICRC does not verify")
	}
	if len(problems) == 0 {
		return ""
	}
	return fmt.Sprintf("packet %d: %s", seq, strings.Join(problems, "; "))
}

// Unmap returns ap with its address unmapped.
func Unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Endpoint returns the address and port a link receives on at its first
// address.
func Endpoint(l link.Link) netip.AddrPort {
	return netip.AddrPortFrom(l.Addrs()[0], l.Port())
}

// Received is a copy of a packet a Collector received.
type Received struct {
	Data     []byte
	Src, Dst netip.AddrPort
}

// Collector is a link.Handler that copies the packets it receives. Make one
// with NewCollector; its methods are safe for concurrent use.
type Collector struct {
	// OnReceive, if set, is called for each batch after it is recorded,
	// from the link's receive goroutine.
	OnReceive func(batch []*link.Packet)

	mu       sync.Mutex
	pkts     []Received
	batches  int
	maxBatch int
	changed  chan struct{}
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector { return &Collector{changed: make(chan struct{}, 1)} }

// Receive records a batch.
func (c *Collector) Receive(batch []*link.Packet) {
	c.mu.Lock()
	for _, p := range batch {
		c.pkts = append(c.pkts, Received{
			Data: append([]byte(nil), p.Data()...), Src: p.Src, Dst: p.Dst,
		})
	}
	c.batches++
	c.maxBatch = max(c.maxBatch, len(batch))
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
	if c.OnReceive != nil {
		c.OnReceive(batch)
	}
}

// Packets returns a copy of the packets received so far.
func (c *Collector) Packets() []Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Received(nil), c.pkts...)
}

// Len returns how many packets were received.
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pkts)
}

// Batches returns the number of Receive calls and the largest batch seen.
func (c *Collector) Batches() (n, largest int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches, c.maxBatch
}

// Wait waits until at least n packets were received or timeout passes, and
// returns the packets received.
func (c *Collector) Wait(n int, timeout time.Duration) []Received {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if c.Len() >= n {
			return c.Packets()
		}
		select {
		case <-c.changed:
		case <-deadline.C:
			return c.Packets()
		}
	}
}

// WaitFor is Wait that fails t if fewer than n packets arrive.
func (c *Collector) WaitFor(t testing.TB, n int) []Received {
	t.Helper()
	got := c.Wait(n, Timeout)
	if len(got) < n {
		t.Fatalf("received %d packets, want %d", len(got), n)
	}
	return got
}

// Quiet waits for d and fails t if more than n packets arrived by then.
func (c *Collector) Quiet(t testing.TB, n int, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	if got := c.Len(); got > n {
		t.Fatalf("received %d packets, want %d", got, n)
	}
}

// NoLeaks records the number of goroutines and, when t's cleanups run,
// fails t if more are left once every cleanup registered after NoLeaks has
// run (waiting up to Timeout for them to exit). Call it first in a test that
// must not leak, and not in parallel tests.
func NoLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(Timeout)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines left, %d before:\n%s", n, before, buf)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// WaitStats polls l's counters until ok accepts them or Timeout passes, and
// returns the last ones read.
func WaitStats(l link.Link, ok func(link.Stats) bool) link.Stats {
	deadline := time.Now().Add(Timeout)
	for {
		s := l.Stats()
		if ok(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SendAll sends pkts through l in batches of batch packets, returns them to
// the pool and fails t on an error.
func SendAll(t testing.TB, l link.Link, pkts []*link.Packet, batch int) {
	t.Helper()
	for len(pkts) > 0 {
		n := min(batch, len(pkts))
		if err := l.Send(pkts[:n]); err != nil {
			t.Fatalf("Send: %v", err)
		}
		for _, p := range pkts[:n] {
			link.Put(p)
		}
		pkts = pkts[n:]
	}
}
