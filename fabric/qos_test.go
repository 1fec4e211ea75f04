package fabric

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// The QoS scenario: three senders on S1, three receivers on S2, one link
// between the switches. H1 (the SM's port) sends 64-byte probes to H4 on
// SL1, H2 and H3 send 4 KiB packets to H5 and H6 on SL0 (or SL2 and SL3
// for the shares), twice what the inter-switch link carries.
const qosTopo = `
Switch 8 "S1"
[1] "H1"[1]
[2] "H2"[1]
[3] "H3"[1]
[4] "S2"[4]

Switch 8 "S2"
[1] "H4"[1]
[2] "H5"[1]
[3] "H6"[1]
[4] "S1"[4]

Hca 2 "H1"
[1] "S1"[1]
Hca 2 "H2"
[1] "S1"[2]
Hca 2 "H3"
[1] "S1"[3]
Hca 2 "H4"
[1] "S2"[1]
Hca 2 "H5"
[1] "S2"[2]
Hca 2 "H6"
[1] "S2"[3]
`

// qosPolicy is the opensm.conf of the scenario: VL1 alone in the high
// table, VL0, VL2 and VL3 in the low one with weights 64:64:192, SL i to
// VL i for SL0-3. oneVL maps every SL to VL0 instead.
func qosPolicy(oneVL bool) string {
	sl2vl := "0,1,2,3,0,0,0,0,0,0,0,0,0,0,0,0"
	if oneVL {
		sl2vl = "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
	}
	return `qos TRUE
qos_max_vls 4
qos_high_limit 4
qos_vlarb_high 1:64
qos_vlarb_low 0:64,2:64,3:192
qos_sl2vl ` + sl2vl + "\n"
}

// qosNet is the scenario's fabric, swept and programmed from a QoS policy.
type qosNet struct {
	t    testing.TB
	f    *Fabric
	q    *policy.QoS
	hcas map[string]*qosHCA
}

type qosHCA struct {
	name   string
	lid    uint16
	send   func([][]byte) error
	close  func() error
	sl2vl  [16]uint8
	bytes  atomic.Int64
	probes chan uint32 // sequence numbers of the probes that arrived
}

func openQoS(t testing.TB, conf string, rate int64) *qosNet {
	t.Helper()
	topo, err := ParseTopology(strings.NewReader(qosTopo), "qos")
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(topo, &Options{LinkRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	q, err := policy.ParseQoS(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	sm := newSM(t, f, "H1", 1)
	sn := sm.sweep()
	sm.applyPolicy(sn, nil, q)
	qn := &qosNet{t: t, f: f, q: q, hcas: map[string]*qosHCA{}}
	for _, name := range []string{"H1", "H2", "H3", "H4", "H5", "H6"} {
		n := f.NodeByName(name)
		p, err := f.ConnectHCA(n, 1)
		if err != nil {
			t.Fatal(err)
		}
		h := &qosHCA{name: name, lid: sn.caPorts[n.PortGUID(1)].lid, send: p.Send, close: p.Close, probes: make(chan uint32, 1024)}
		h.sl2vl = q.Port(policy.PortRef{NodeType: mad.NodeTypeCA, Port: 1, VLCap: 4}).SL2VL.VL
		if err := p.Start(func(pkts [][]byte) {
			for _, b := range pkts {
				h.bytes.Add(int64(len(b)))
				if len(b) < 512 { // a probe, not a 4 KiB bulk packet
					select {
					case h.probes <- binary.BigEndian.Uint32(b[wire.LRHLen+wire.BTHLen:]):
					default:
					}
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		qn.hcas[name] = h
	}
	return qn
}

// packet builds a packet from h to dst on sl, with the VL h's SL2VL table
// gives, as an HCA does.
func (qn *qosNet) packet(h, dst *qosHCA, sl uint8, seq uint32, payload int) []byte {
	return pkt(qn.t, h.lid, dst.lid, sl, h.sl2vl[sl], 0xFFFF, seq, payload-4)
}

// bulk keeps h sending 4 KiB packets to dst on sl until ctx ends.
func (qn *qosNet) bulk(ctx context.Context, wg *sync.WaitGroup, h, dst *qosHCA, sl uint8) {
	batch := make([][]byte, 8)
	for i := range batch {
		batch[i] = qn.packet(h, dst, sl, uint32(i), 4096)
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := h.send(batch); err != nil {
				return
			}
		}
	})
}

// probe sends one 64-byte packet from H1 to H4 on SL1 and returns the time
// it took to arrive.
func (qn *qosNet) probe(seq uint32) time.Duration {
	t := qn.t
	h1, h4 := qn.hcas["H1"], qn.hcas["H4"]
	p := qn.packet(h1, h4, 1, seq, 64)
	start := time.Now()
	if err := h1.send([][]byte{p}); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case s := <-h4.probes:
			if s == seq {
				return time.Since(start)
			}
		case <-timer.C:
			t.Fatalf("probe %d did not arrive", seq)
		}
	}
}

// qosResult is what one run of the scenario measured.
type qosResult struct {
	p50, p99, max time.Duration
	bulkRate      float64 // bytes/s of the bulk traffic into H5 and H6
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// latencyRun measures n probes, gap apart, while H2 and H3 saturate the
// inter-switch link on SL0 (bulk false: the link idle).
func (qn *qosNet) latencyRun(n int, gap time.Duration, bulk bool) qosResult {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	h := qn.hcas
	if bulk {
		qn.bulk(ctx, &wg, h["H2"], h["H5"], 0)
		qn.bulk(ctx, &wg, h["H3"], h["H6"], 0)
		time.Sleep(2 * time.Millisecond) // queues fill
	}
	b0, start := h["H5"].bytes.Load()+h["H6"].bytes.Load(), time.Now()
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = qn.probe(uint32(i))
		time.Sleep(gap)
	}
	r := qosResult{bulkRate: float64(h["H5"].bytes.Load()+h["H6"].bytes.Load()-b0) / time.Since(start).Seconds()}
	cancel()
	wg.Wait()
	r.p50, r.p99, r.max = percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat)
	return r
}

// shareRun runs H2 on SL2 (VL2, weight 64) and H3 on SL3 (VL3, weight
// 192) through the inter-switch link for d and returns the bytes each
// delivered.
func (qn *qosNet) shareRun(d time.Duration) (a, b int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	h := qn.hcas
	qn.bulk(ctx, &wg, h["H2"], h["H5"], 2)
	qn.bulk(ctx, &wg, h["H3"], h["H6"], 3)
	time.Sleep(2 * time.Millisecond)
	a0, b0 := h["H5"].bytes.Load(), h["H6"].bytes.Load()
	time.Sleep(d)
	a, b = h["H5"].bytes.Load()-a0, h["H6"].bytes.Load()-b0
	cancel()
	wg.Wait()
	return a, b
}

// qosRate is the scenario's wire: 1 GB/s, a 4 KiB packet in about 4 µs.
const qosRate = 1e9

// TestQoSOnFabric runs the scenario on synctest's clock (the links' wire
// time is virtual, so the figures are the model's, not the machine's): a
// QoS policy from an opensm.conf, programmed by the test SM through
// package policy, keeps the SL1 probes' latency near the idle link's
// while the bulk traffic on SL0 saturates the inter-switch link, where
// with every SL on VL0 the probes wait behind the bulk queue; and two bulk
// flows on VL2 and VL3 share the link 1:3 as the weights 64:192 say.
func TestQoSOnFabric(t *testing.T) {
	const n, gap = 50, 50 * time.Microsecond
	var idle, sep, one qosResult
	synctest.Test(t, func(t *testing.T) {
		qn := openQoS(t, qosPolicy(false), qosRate)
		idle = qn.latencyRun(n, gap, false)
		sep = qn.latencyRun(n, gap, true)
	})
	synctest.Test(t, func(t *testing.T) {
		qn := openQoS(t, qosPolicy(false), qosRate)
		a, b := qn.shareRun(5 * time.Millisecond)
		ratio := float64(b) / float64(a)
		t.Logf("shares: VL2 %d bytes, VL3 %d bytes: 1:%.2f; together %.0f MB/s", a, b, ratio, float64(a+b)/5e-3/1e6)
		if ratio < 2.7 || ratio > 3.3 {
			t.Errorf("VL3:VL2 = %.2f, want 3 (weights 192:64)", ratio)
		}
		if rate := float64(a+b) / 5e-3; rate < 0.9*qosRate {
			t.Errorf("two bulk flows moved %.0f B/s over a %.0f B/s link", rate, float64(qosRate))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		qn := openQoS(t, qosPolicy(true), qosRate)
		one = qn.latencyRun(n, gap, true)
	})
	for _, c := range []struct {
		name string
		r    qosResult
	}{{"idle link", idle}, {"bulk on VL0, probes on high-priority VL1", sep}, {"bulk and probes on VL0", one}} {
		t.Logf("%-42s probe latency p50 %8v p99 %8v max %8v, bulk %6.0f MB/s", c.name, c.r.p50, c.r.p99, c.r.max, c.r.bulkRate/1e6)
	}
	// The bulk saturates the link in both runs.
	for _, r := range []qosResult{sep, one} {
		if r.bulkRate < 0.9*qosRate {
			t.Errorf("bulk at %.0f B/s, not saturating the %.0f B/s link", r.bulkRate, float64(qosRate))
		}
	}
	// High priority: at most one bulk packet ahead of a probe per hop
	// (4 KiB at 1 GB/s is 4.1 µs); on one VL the probe waits behind the
	// queues, many times longer.
	if sep.p99 > idle.p99+3*5*time.Microsecond {
		t.Errorf("probes on VL1: p99 %v, idle %v", sep.p99, idle.p99)
	}
	if one.p50 < 5*sep.p99 {
		t.Errorf("probes on VL0 behind the bulk: p50 %v, not far above VL1's p99 %v", one.p50, sep.p99)
	}
}

// BenchmarkQoSLatency runs the scenario on the machine's clock with an
// instant wire (LinkRate 0: the switches' goroutines are the bottleneck):
// b.N probes from H1 to H4 on SL1 while H2 and H3 send 4 KiB packets on
// SL0 as fast as the fabric takes them, with SL1 on the high-priority VL1
// ("separate-VLs") or every SL on VL0 ("one-VL"), and on an idle fabric.
// It reports the probes' median and p99 latency and the bulk rate.
func BenchmarkQoSLatency(b *testing.B) {
	for _, c := range []struct {
		name        string
		oneVL, bulk bool
	}{{"idle", false, false}, {"separate-VLs", false, true}, {"one-VL", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			qn := openQoS(b, qosPolicy(c.oneVL), 0)
			b.ResetTimer()
			r := qn.latencyRun(b.N, 0, c.bulk)
			b.StopTimer()
			b.ReportMetric(float64(r.p50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(r.p99.Nanoseconds()), "p99-ns")
			b.ReportMetric(r.bulkRate/1e6, "bulk-MB/s")
		})
	}
}

// BenchmarkQoSShares runs H2 (SL2, VL2, weight 64) and H3 (SL3, VL3,
// weight 192) through the inter-switch link for 200 ms an iteration (run
// it with -benchtime=5x or so) on a wire of nominally 256 MB/s in machine
// time, and reports the VL3:VL2 ratio of the bytes delivered (the weights
// say 3) and the total rate, which the wire's per-packet timers (the
// machine's timer granularity) keep well below the nominal rate.
func BenchmarkQoSShares(b *testing.B) {
	qn := openQoS(b, qosPolicy(false), 256e6)
	var a, c int64
	for b.Loop() {
		x, y := qn.shareRun(200 * time.Millisecond)
		a, c = a+x, c+y
	}
	b.ReportMetric(float64(c)/float64(a), "VL3:VL2")
	b.ReportMetric(float64(a+c)/1e6/b.Elapsed().Seconds(), "MB/s")
}
