package sm

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// mftEntry reads a switch's MFT entry (ports 0-15) for mlid.
func mftEntry(t *testing.T, f *testFabric, sw string, mlid uint16) uint16 {
	t.Helper()
	b, err := f.Query(f.NodeByName(sw), mad.SMAttrMulticastFT, mad.MulticastFTModifier(0, (mlid-MLIDFirst)/32))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := mad.ParseMulticastFT(b)
	return x.PortMask[(mlid-MLIDFirst)%32]
}

// SetMulticast programs a group's tree into the MFTs without blocking; a
// heavy sweep after an inter-switch link died moves the tree to the other
// link; a group without members is cleared; an unchanged group costs no
// SMP.
func TestMulticastMFT(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{})
	sweep(t, m)
	sn := m.Subnet()
	port := func(name string) *Port { return sn.PortByGUID(f.NodeByName(name).PortGUID(1)) }
	const mlid = 0xC021 // block 1
	m.SetMulticast(mlid, []*Port{port("Hca3"), port("Hca4"), port("Hca2")})
	m.SetMulticast(0x1234, []*Port{port("Hca3")}) // not a multicast LID: ignored
	want := func(s1, s2 uint16) {
		t.Helper()
		waitFor(t, 5*time.Second, "MFTs", func() bool {
			return mftEntry(t, f, "Switch1", mlid) == s1 && mftEntry(t, f, "Switch2", mlid) == s2
		})
	}
	// Hca3 is on Switch1 port 2; Hca2 and Hca4 on Switch2 ports 1, 2; the
	// first link between the switches found breadth first is port 3.
	want(1<<2|1<<3, 1<<1|1<<2|1<<3)
	sent := m.Stats().Sent
	m.kickMcast()
	time.Sleep(50 * time.Millisecond)
	if got := m.Stats().Sent; got != sent {
		t.Errorf("reprogramming an unchanged group sent %d SMPs", got-sent)
	}
	if err := f.SetLink(f.NodeByName("Switch1"), 3, false); err != nil {
		t.Fatal(err)
	}
	sweep(t, m)
	want(1<<2|1<<5, 1<<1|1<<2|1<<5)
	m.SetMulticast(mlid, nil)
	want(0, 0)
	if g := m.MulticastGroups(); len(g) != 0 {
		t.Errorf("groups left: %v", g)
	}
}
