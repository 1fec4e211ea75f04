package fabric

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// BenchmarkDirectedGet measures a client's directed-route NodeInfo Get
// round trip across the fat tree (Hca1 -> leaf -> spine -> leaf -> Hca9:
// four hops out, four back), one request at a time.
func BenchmarkDirectedGet(b *testing.B) {
	topo, _ := ParseTopology(strings.NewReader(fatTree(4, 4, 8)), "fat")
	f, err := New(topo, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ch := make(chan *Datagram, 1)
	c, err := f.Attach(f.NodeByName("Hca1"), 1, func(d *Datagram) { ch <- d })
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, mad.Size)
	for b.Loop() {
		mad.NewDirectedSMP(buf, mad.MethodGet, mad.SMAttrNodeInfo, 0, 1, path(1, 9, 2, 1))
		if err := c.Send(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: buf}); err != nil {
			b.Fatal(err)
		}
		if d := <-ch; d.Status != 0 {
			b.Fatal("timed out")
		}
	}
}

// BenchmarkForward2Switch measures the data plane's packet rate from Hca1
// to Hca2 of net.2sw2path4hca: three links and two switches, each hop a
// fabric/vl link with credits, sent in batches of 32 and counted on
// arrival (b.N packets each way through, reported as packets/s).
func BenchmarkForward2Switch(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			dn := sweepData(b, readFile(b, "testdata/net.2sw2path4hca"))
			var got atomic.Int64
			arrived := make(chan struct{}, 1)
			var want atomic.Int64
			rx, err := dn.f.ConnectHCA(dn.f.NodeByName("Hca2"), 1)
			if err != nil {
				b.Fatal(err)
			}
			defer rx.Close()
			rx.Start(func(pkts [][]byte) {
				if got.Add(int64(len(pkts))) >= want.Load() {
					select {
					case arrived <- struct{}{}:
					default:
					}
				}
			})
			tx, err := dn.f.ConnectHCA(dn.f.NodeByName("Hca1"), 1)
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Close()
			lid := func(n string) uint16 { return dn.sn.caPorts[dn.f.NodeByName(n).PortGUID(1)].lid }
			p := pkt(b, lid("Hca1"), lid("Hca2"), 0, 0, 0xFFFF, 0, size-4)
			batch := make([][]byte, 32)
			for i := range batch {
				batch[i] = p
			}
			want.Store(1 << 62)
			b.SetBytes(int64(len(p)))
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += len(batch) {
				if err := tx.Send(batch[:min(len(batch), b.N-sent)]); err != nil {
					b.Fatal(err)
				}
			}
			want.Store(int64(b.N))
			for got.Load() < int64(b.N) {
				select {
				case <-arrived:
				case <-time.After(time.Millisecond):
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
		})
	}
}
