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

// A client sets a type of service on its ID before connecting: both QPs'
// address vectors get it as their traffic class (the server's from the
// REQ), and every packet of the connection leaves with it as its IP TOS.
func ExampleID_SetTOS() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	open := func(ip string) (*verbs.Device, *rdmacm.CM) {
		l, _ := n.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
		dev, _ := verbs.Open(l, nil)
		cm, _ := rdmacm.New([]*verbs.Device{dev}, nil)
		return dev, cm
	}
	serverDev, server := open("192.0.2.2")
	clientDev, client := open("192.0.2.1")
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

	// A synchronous ID (no event channel): each call waits for its event.
	id, _ := client.CreateID(nil, rdmacm.PortSpaceTCP, nil)
	defer id.Destroy()
	if err := id.ResolveAddr(ctx, netip.Addr{}, netip.MustParseAddrPort("192.0.2.2:7471")); err != nil {
		fmt.Println(err)
		return
	}
	id.SetTOS(0xb8) // DSCP 46 (expedited forwarding)
	id.ResolveRoute(ctx)
	pd, _ := id.Device().AllocPD()
	defer pd.Dealloc()
	cq, _ := id.Device().CreateCQ(8, nil)
	defer cq.Destroy()
	id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err := id.Connect(ctx, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		fmt.Println(err)
		return
	}
	s, _ := l.Accept(ctx)
	defer s.Close()
	ca, _ := id.QP().Query()
	sa, _ := s.QP.Query()
	fmt.Printf("client traffic class %#x, server traffic class %#x\n", ca.AH.TrafficClass, sa.AH.TrafficClass)
	id.Disconnect()
	// Output:
	// client traffic class 0xb8, server traffic class 0xb8
}
