package fault_test

import (
	"fmt"
	"net/netip"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/fault"
	"github.com/softrdma/softrdma/link/loop"
)

// Wrapping a link in faults: here a link/loop link (any link.Link will
// do; link/udp is the one to test real sockets) loses about a third of
// what it sends, the same packets for the same seed every run.
func ExampleNew() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	a, _ := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	b, _ := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.2")}, 4791)
	defer b.Close()

	lossy := fault.New(a, fault.Config{Faults: link.Faults{Loss: 0.3}, Seed: 1})
	defer lossy.Close() // closes a too

	for range 100 {
		p := link.Get()
		p.N = 64 // the bytes do not matter here: b has no handler started
		p.Dst = netip.MustParseAddrPort("10.0.0.2:4791")
		_ = lossy.Send([]*link.Packet{p})
		link.Put(p)
	}
	s := lossy.FaultStats()
	fmt.Printf("sent %d, lost %d\n", s.Sent, s.Lost)
	// Output: sent 100, lost 36
}
