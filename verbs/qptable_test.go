package verbs

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

func TestQPTable(t *testing.T) {
	var tb qpTable
	qps := map[wire.QPN]*QP{}
	for _, n := range []wire.QPN{2, 3, 4095, 4096, 4097, 0x123456, wire.Mask24} {
		qp := &QP{qpn: n}
		tb.set(qp)
		qps[n] = qp
	}
	for n, qp := range qps {
		if got := tb.get(n); got != qp {
			t.Fatalf("get(%#x) = %p, want %p", n, got, qp)
		}
	}
	for _, n := range []wire.QPN{0, 1, 5, 4098, 0x123457, wire.Mask24 - 1} {
		if got := tb.get(n); got != nil {
			t.Fatalf("get(%#x) = %p, want nil", n, got)
		}
	}
	tb.del(4096)
	tb.del(4096) // twice: no effect
	if tb.get(4096) != nil || tb.get(4097) != qps[4097] || tb.count[1] != 1 {
		t.Fatalf("after del(4096): get(4096) %p, get(4097) %p, chunk count %d", tb.get(4096), tb.get(4097), tb.count[1])
	}
	tb.del(4097)
	if tb.chunks[1].Load() != nil {
		t.Fatal("an empty chunk is kept")
	}
	tb.del(0x999999) // never set, chunk absent
}

// BenchmarkQPSetup creates QP pairs on two devices and brings both sides to
// RTS, connected to each other: ns/op is per pair. It reports the Go heap
// per QP left in use once all are up.
func BenchmarkQPSetup(b *testing.B) {
	for _, n := range []int{1000, 10000, MaxQP/2 - 1} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var heap uint64
			for range b.N {
				b.StopTimer()
				p := &pair{t: b, opts: pairOpts{typ: RC, mtu: MTU1024, sge: 1, wr: 16, timeout: 14, retry: 7, rnr: 7, minRNR: 1}}
				_, p.da, p.db = newDevicesLoop(b, &pairOpts{})
				pa, _ := p.da.AllocPD()
				pb, _ := p.db.AllocPD()
				ca, _ := p.da.CreateCQ(16, nil)
				cb, _ := p.db.CreateCQ(16, nil)
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				b.StartTimer()
				for i := range n {
					init := QPInitAttr{Type: RC, SendCQ: ca, RecvCQ: ca,
						Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
					qa, err := pa.CreateQP(init)
					if err != nil {
						b.Fatal(err)
					}
					init.SendCQ, init.RecvCQ = cb, cb
					qb, err := pb.CreateQP(init)
					if err != nil {
						b.Fatal(err)
					}
					psn := wire.PSN(i)
					p.bringUp(qa, p.db, qb, psn, psn)
					p.bringUp(qb, p.da, qa, psn, psn)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&m1)
				heap = (m1.HeapAlloc - m0.HeapAlloc) / uint64(2*n)
				p.da.Close()
				p.db.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pair")
			b.ReportMetric(float64(heap), "heap-B/QP")
		})
	}
}
