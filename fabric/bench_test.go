package fabric

import (
	"strings"
	"testing"

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
