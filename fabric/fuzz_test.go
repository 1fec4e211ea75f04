package fabric

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// FuzzSend sends arbitrary MADs into a fabric from a client: nothing
// panics, and a good request sent after each one is still answered
// rightly.
func FuzzSend(f *testing.F) {
	seed := func(edit func(s mad.SMP), p []byte) []byte {
		b := make([]byte, mad.Size)
		s, _ := mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrPortInfo, 1, 7, p)
		if edit != nil {
			edit(s)
		}
		return b
	}
	f.Add(seed(nil, path(1, 3, 1)), uint16(0xFFFF))
	f.Add(seed(func(s mad.SMP) { s.MAD().SetMethod(mad.MethodSet) }, path(1)), uint16(0xFFFF))
	f.Add(seed(func(s mad.SMP) { s.SetDrDLID(3); s.SetDrSLID(1) }, path(1)), uint16(2))
	f.Add(seed(func(s mad.SMP) { s.MAD().SetMgmtClass(mad.ClassPerf) }, path()), uint16(1))
	f.Add(seed(func(s mad.SMP) { s.MAD().SetMethod(mad.MethodGetResp); s.SetDirection(true); s.SetHopPointer(3) }, path(1, 3)), uint16(0xFFFF))

	var once sync.Once
	var fab *Fabric
	var c *Client
	ch := make(chan *Datagram, 1024)
	f.Cleanup(func() {
		if fab != nil {
			fab.Close()
		}
	})
	f.Fuzz(func(t *testing.T, b []byte, dlid uint16) {
		once.Do(func() {
			topo, err := ParseTopology(strings.NewReader(readFile(t, "testdata/net.2sw2path4hca")), "fuzz")
			if err != nil {
				t.Fatal(err)
			}
			if fab, err = New(topo, nil); err != nil {
				t.Fatal(err)
			}
			if c, err = fab.Attach(fab.NodeByName("Hca1"), 1, func(d *Datagram) { ch <- d }); err != nil {
				t.Fatal(err)
			}
		})
		m := make([]byte, mad.Size)
		copy(m, b)
		m[0] = mad.BaseVersion
		mad.MAD(m).SetTransactionID(mad.MAD(m).TransactionID() &^ (1 << 63))
		if err := c.Send(&Datagram{SLID: 0, DLID: dlid, MAD: m}); err != nil {
			t.Fatal(err)
		}
		probe := make([]byte, mad.Size)
		mad.NewDirectedSMP(probe, mad.MethodGet, mad.SMAttrNodeInfo, 0, 1<<63, path(1, 3))
		if err := c.Send(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: probe}); err != nil {
			t.Fatal(err)
		}
		timer := time.NewTimer(5 * time.Second)
		defer timer.Stop()
		for {
			select {
			case d := <-ch:
				if mad.MAD(d.MAD).TransactionID() != 1<<63 {
					continue
				}
				ni, _ := mad.ParseNodeInfo(mad.SMP(d.MAD).Data())
				// The fuzzed MAD may have taken a link down or moved a
				// state, so the probe may time out; if answered it is right.
				if d.Status == 0 && ni.NodeGUID != fab.NodeByName("Switch2").GUID() {
					t.Fatalf("probe answered by %#x", ni.NodeGUID)
				}
				return
			case <-timer.C:
				t.Fatal("probe not answered")
			}
		}
	})
}
