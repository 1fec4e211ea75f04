// The core suite over kernel UDP sockets (IPv4 127.0.0.1 <-> 127.0.0.2, IPv6
// ::1 <-> ::1 on two ports), and the benchmarks: RC WRITE bandwidth and SEND
// ping-pong latency over UDP and, for comparison, over link/loop.

package verbs

import (
	"errors"
	"net/netip"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/udp"
)

// newDevicesUDP opens two devices on UDP sockets, closed at cleanup. IPv4:
// 127.0.0.1 and 127.0.0.2 on one ephemeral port. IPv6: ::1 twice, on two
// ephemeral ports, each device told the other's port. Either way no fixed
// port is used, so parallel test processes do not collide.
func newDevicesUDP(t testing.TB, v6 bool) (*Device, *Device) {
	t.Helper()
	return newDevicesUDPWrapped(t, v6, nil)
}

// udpNoGSO makes newDevicesUDP open links that send datagram by datagram
// (benchmarks compare both ways in one run); udpNoPollRecv opens the
// devices with Options.NoPollReceive.
var udpNoGSO, udpNoGRO, udpNoPollRecv bool

// newDevicesUDPWrapped is newDevicesUDP with the first device's link wrapped
// by wrapA, if not nil.
func newDevicesUDPWrapped(t testing.TB, v6 bool, wrapA func(link.Link) link.Link) (*Device, *Device) {
	t.Helper()
	return newDevicesUDPWrapped2(t, v6, wrapA, nil, nil)
}

// newDevicesUDPWrapped2 is newDevicesUDP with the first device's link
// wrapped by wrapA and the second's by wrapB, where not nil, and the UDP
// links' configuration adjusted by cfg, if not nil.
func newDevicesUDPWrapped2(t testing.TB, v6 bool, wrapA, wrapB func(link.Link) link.Link, cfg func(*udp.Config)) (*Device, *Device) {
	t.Helper()
	open := func(a string, port uint16) (*udp.Link, error) {
		c := udp.Config{Addrs: []netip.Addr{netip.MustParseAddr(a)}, Port: port, DisableGSO: udpNoGSO, DisableGRO: udpNoGRO}
		if cfg != nil {
			cfg(&c)
		}
		return udp.Open(c)
	}
	var la, lb *udp.Link
	var err error
	for try := 0; ; try++ {
		if v6 {
			la, err = open("::1", 0)
			if err == nil {
				if lb, err = open("::1", 0); err != nil {
					la.Close()
				}
			}
		} else {
			la, err = open("127.0.0.1", 0)
			if err == nil {
				// The same port on the second address may be taken: try
				// another.
				if lb, err = open("127.0.0.2", la.Port()); err != nil {
					la.Close()
				}
			}
		}
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Skipf("loopback address not usable here: %v", err)
		}
		if try == 20 {
			t.Fatal(err)
		}
	}
	hb := new(atomic.Uint64)
	var a link.Link = kernelHB{la, hb, new(atomic.Uint64)}
	if wrapA != nil {
		a = wrapA(a)
	}
	da, err := Open(a, &Options{Name: "udp_a", RemotePort: lb.Port(), NoPollReceive: udpNoPollRecv})
	if err != nil {
		la.Close()
		lb.Close()
		t.Fatal(err)
	}
	var b link.Link = kernelHB{lb, hb, new(atomic.Uint64)}
	if wrapB != nil {
		b = wrapB(b)
	}
	db, err := Open(b, &Options{Name: "udp_b", RemotePort: la.Port(), NoPollReceive: udpNoPollRecv})
	if err != nil {
		da.Close()
		lb.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		da.Close()
		db.Close()
	})
	return da, db
}

// kernelHB wraps a link to tell the race detector what the kernel
// guarantees: sending a datagram happens before receiving it. The detector
// cannot see through sockets, so without this two devices in one process
// would be reported racing on every buffer the test fills before posting
// and the peer's engine then reads or writes.
type kernelHB struct {
	link.Link
	seq    *atomic.Uint64 // shared by the links of the devices that talk
	polled *atomic.Uint64 // packets received by Poll and PollWait
}

func (l kernelHB) Poll() int {
	n := l.Link.(link.Poller).Poll()
	l.polled.Add(uint64(n))
	return n
}

func (l kernelHB) PollWait(d time.Duration, ready func() bool) (int, bool) {
	n, ok := l.Link.(link.Waiter).PollWait(d, ready)
	l.polled.Add(uint64(n))
	return n, ok
}

func (l kernelHB) Wake() { l.Link.(link.Waiter).Wake() }

// SetSealHook passes the hook to the UDP link (link.SealHooker), for a
// fault wrapper around kernelHB.
func (l kernelHB) SetSealHook(f func([]byte)) { l.Link.(link.SealHooker).SetSealHook(f) }

func (l kernelHB) Send(batch []*link.Packet) error {
	l.seq.Add(1) // release: everything before this send
	return l.Link.Send(batch)
}

// SendsExt passes the UDP link's answer (link.ExtSender): the suite runs
// with payloads sent from registered memory, as devices on a bare link do.
func (l kernelHB) SendsExt() bool { return l.Link.(link.ExtSender).SendsExt() }

func (l kernelHB) Start(h link.Handler) error {
	return l.Link.Start(link.HandlerFunc(func(batch []*link.Packet) {
		l.seq.Load() // acquire: everything before the sends received
		h.Receive(batch)
	}))
}

// TestUDP runs the core suite between two devices over real UDP sockets:
// SEND with 2 SGEs, WRITE_WITH_IMM, READ, CAS, FAA, 1 MiB RC transfers and a
// UD SEND whose GRH must carry the real addresses.
func TestUDP(t *testing.T) {
	leakcheck.Check(t)
	for _, fam := range []string{"IPv4", "IPv6"} {
		t.Run(fam, func(t *testing.T) {
			da, db := newDevicesUDP(t, fam == "IPv6")
			rc := &pair{t: t, da: da, db: db}
			rc.connect(pairOpts{typ: RC, mtu: MTU1024, sge: MaxSGE, timeout: 14})
			e := newMxEnv(t, rc, RC, MTU1024, 7)
			cases := []struct {
				op        mop
				size, sge int
			}{
				{opSend, 5000, 2}, {opSendImm, 1, 2}, {opWriteImm, 3000, 2}, {opWrite, 0, 1}, {opRead, 10000, 2},
				{opSend, 1 << 20, 2}, {opWrite, 1 << 20, 32}, {opRead, 1 << 20, 1},
			}
			for _, c := range cases {
				t.Run(c.op.String()+"/size="+strconv.Itoa(c.size)+"/sge="+strconv.Itoa(c.sge), func(t *testing.T) {
					e.begin(t)
					e.run(t, c.op, c.size, c.sge)
				})
			}
			// Payloads of an MTU within one SGE leave from the registered
			// memory (link.Packet.Ext): the requests' and the READ answers'.
			if a, b := da.Stats().TxFromMR.Load(), db.Stats().TxFromMR.Load(); a == 0 || b == 0 {
				t.Fatalf("packets sent from registered memory: %d and %d", a, b)
			}
			for _, op := range []mop{opCAS, opFAA} {
				t.Run(op.String(), func(t *testing.T) {
					e.begin(t)
					e.runAtomic(t, op)
				})
			}
			ud := &pair{t: t, da: da, db: db}
			ud.connect(pairOpts{typ: UD, sge: 2})
			eu := newMxEnv(t, ud, UD, MTU4096, 8)
			for _, c := range []struct {
				op        mop
				size, sge int
			}{{opSend, 1000, 2}, {opSendImm, 4096, 2}, {opSend, 0, 1}} {
				t.Run("UD/"+c.op.String()+"/size="+strconv.Itoa(c.size)+"/sge="+strconv.Itoa(c.sge), func(t *testing.T) {
					eu.begin(t)
					eu.run(t, c.op, c.size, c.sge)
				})
			}
			for _, d := range []*Device{da, db} {
				st := d.Link().Stats()
				if st.RxBadICRC != 0 || st.RxMalformed != 0 || st.RxICRCUnchecked != 0 || st.TxErrors != 0 {
					t.Errorf("%s link stats: %+v", d.Name(), st)
				}
			}
		})
	}
}

// benchPair returns a connected RC pair at path MTU 4096 over link/loop or
// over UDP between 127.0.0.1 and 127.0.0.2.
func benchPair(b *testing.B, net string) *pair {
	o := pairOpts{typ: RC, mtu: MTU4096, wr: 64, timeout: 14}
	if net == "loop" {
		return newPair(b, o)
	}
	// udp4: GSO and GRO (the default); udp4-nogro: GSO only; udp4-nogso:
	// neither (on loopback GRO only ever sees GSO sends).
	udpNoGSO, udpNoGRO = net == "udp4-nogso", net == "udp4-nogso" || net == "udp4-nogro"
	udpNoPollRecv = net == "udp4-nopoll"
	da, db := newDevicesUDP(b, false)
	udpNoGSO, udpNoGRO, udpNoPollRecv = false, false, false
	p := &pair{t: b, da: da, db: db}
	p.connect(o)
	return p
}

// pollWait polls cq until it returns completions, failing after 30 s
// without any. It yields between polls, then sleeps: a goroutine that only
// yields keeps both Ps of a 2-core machine busy, so the runtime polls the
// network only every few milliseconds (sysmon) and UDP latency looks like
// that instead of like the stack's.
func pollWait(b *testing.B, cq *CQ, wc []WC) int {
	deadline := time.Time{}
	for i := 0; ; i++ {
		if n := cq.Poll(wc); n > 0 {
			for _, w := range wc[:n] {
				if w.Status != Success {
					b.Fatalf("completion %+v", w)
				}
			}
			return n
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(30 * time.Second)
		} else if time.Now().After(deadline) {
			b.Fatal("no completion for 30 s")
		}
		if i < 20 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Microsecond)
		}
	}
}

// BenchmarkRCWrite64K measures RC WRITE bandwidth with 64 KiB messages and
// 16 outstanding.
func BenchmarkRCWrite64K(b *testing.B) {
	for _, net := range []string{"loop", "udp4", "udp4-nogro", "udp4-nogso"} {
		b.Run(net, func(b *testing.B) {
			const size, depth = 64 << 10, 16
			p := benchPair(b, net)
			ma, mb := p.reg(p.pa, depth*size), p.reg(p.pb, depth*size)
			wrs := make([][]SendWR, depth)
			for i := range wrs {
				wrs[i] = []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(i*size, size)},
					RemoteAddr: mb.Addr() + uint64(i*size), RKey: mb.RKey()}}
			}
			wc := make([]WC, depth)
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			posted, done := 0, 0
			for done < b.N {
				for posted < b.N && posted-done < depth {
					w := wrs[posted%depth]
					w[0].ID = uint64(posted)
					if err := p.qa.PostSend(w); err != nil {
						b.Fatal(err)
					}
					posted++
				}
				done += pollWait(b, p.ca, wc)
			}
		})
	}
}

// BenchmarkSendPingPong64 measures the round trip of a 64-byte SEND and its
// 64-byte answer (ns/op), RC.
func BenchmarkSendPingPong64(b *testing.B) {
	for _, net := range []string{"loop", "udp4", "udp4-nopoll"} {
		b.Run(net, func(b *testing.B) {
			const size = 64
			p := benchPair(b, net)
			ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
			sa := []SendWR{{Opcode: WRSend, SGL: []SGE{ma.SGE(0, size)}}}
			sb := []SendWR{{Opcode: WRSend, SGL: []SGE{mb.SGE(0, size)}}}
			ra := []RecvWR{{SGL: []SGE{ma.SGE(1024, size)}}}
			rb := []RecvWR{{SGL: []SGE{mb.SGE(1024, size)}}}
			for range 8 {
				if err := p.qa.PostRecv(ra); err != nil {
					b.Fatal(err)
				}
				if err := p.qb.PostRecv(rb); err != nil {
					b.Fatal(err)
				}
			}
			wc := make([]WC, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := p.qa.PostSend(sa); err != nil {
					b.Fatal(err)
				}
				pollWait(b, p.cb, wc)
				if err := p.qb.PostRecv(rb); err != nil {
					b.Fatal(err)
				}
				if err := p.qb.PostSend(sb); err != nil {
					b.Fatal(err)
				}
				pollWait(b, p.ca, wc)
				if err := p.qa.PostRecv(ra); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
