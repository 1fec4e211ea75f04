package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
)

// A connection with an alternate path: hosts with two addresses each, the
// client's REQ carries the alternate path (SetAltPath) and both QPs load it
// in REARM; later LoadAltPath replaces it through LAP and APR.
func ExampleID_SetAltPath() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	open := func(ips ...string) (*verbs.Device, *rdmacm.CM) {
		var addrs []netip.Addr
		for _, ip := range ips {
			addrs = append(addrs, netip.MustParseAddr(ip))
		}
		l, _ := n.Attach(addrs, 4791)
		dev, _ := verbs.Open(l, nil)
		cm, _ := rdmacm.New([]*verbs.Device{dev}, nil)
		return dev, cm
	}
	serverDev, server := open("192.0.2.2", "198.51.100.2")
	clientDev, client := open("192.0.2.1", "198.51.100.1")
	defer serverDev.Close()
	defer clientDev.Close()
	defer server.Close()
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	l, err := rdmacm.Listen(ctx, netip.MustParseAddrPort("0.0.0.0:7471"), &rdmacm.ConnOptions{CM: server})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	id, _ := client.CreateID(nil, rdmacm.PortSpaceTCP, nil)
	defer id.Destroy()
	if err := id.ResolveAddr(ctx, netip.Addr{}, netip.MustParseAddrPort("192.0.2.2:7471")); err != nil {
		fmt.Println(err)
		return
	}
	id.ResolveRoute(ctx)
	if err := id.SetAltPath(netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")); err != nil {
		fmt.Println(err)
		return
	}
	pd, _ := id.Device().AllocPD()
	defer pd.Dealloc()
	cq, _ := id.Device().CreateCQ(8, nil)
	defer cq.Destroy()
	id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err := id.Connect(ctx, &rdmacm.ConnParam{}); err != nil {
		fmt.Println(err)
		return
	}
	s, _ := l.Accept(ctx)
	defer s.Close()
	show := func() {
		ca, _ := id.QP().Query()
		sa, _ := s.QP.Query()
		fmt.Printf("client %v, alternate to %v; server %v, alternate to %v\n",
			ca.PathMigState, ca.AltAH.DGID, sa.PathMigState, sa.AltAH.DGID)
	}
	show()
	// Propose another alternate path (here the primary path's addresses).
	if err := id.LoadAltPath(ctx, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")); err != nil {
		fmt.Println(err)
		return
	}
	show()
	id.Disconnect()
	// Output:
	// client REARM, alternate to ::ffff:198.51.100.2; server REARM, alternate to ::ffff:198.51.100.1
	// client REARM, alternate to ::ffff:192.0.2.2; server REARM, alternate to ::ffff:192.0.2.1
}
