package rdmacm_test

import (
	"context"
	"errors"
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

// exampleCM is a CM over one device on an in-process network.
func exampleCM(n *loop.Network, ip string) (*verbs.Device, *rdmacm.CM) {
	l, _ := n.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
	dev, _ := verbs.Open(l, nil)
	cm, _ := rdmacm.New([]*verbs.Device{dev}, nil)
	return dev, cm
}

// An ID moves to another event channel: the event it had queued on the
// first moves with it.
func ExampleID_MigrateID() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	dev, cm := exampleCM(n, "192.0.2.1")
	defer dev.Close()
	defer cm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	first, second := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	id, _ := cm.CreateID(first, rdmacm.PortSpaceTCP, nil)
	defer id.Destroy()
	id.ResolveAddr(ctx, netip.Addr{}, netip.MustParseAddrPort("192.0.2.2:7471")) // queues ADDR_RESOLVED on first
	if err := id.MigrateID(second); err != nil {
		fmt.Println(err)
		return
	}
	ev, _ := second.Get(ctx)
	fmt.Println(ev.Type, ev.ID == id)
	// Output:
	// RDMA_CM_EVENT_ADDR_RESOLVED true
}

// The attributes that bring a QP the application created with verbs to
// INIT for an ID (rping -q does this, then RTR and RTS once the peer's
// REQ or REP has come).
func ExampleID_InitQPAttr() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	dev, cm := exampleCM(n, "192.0.2.1")
	defer dev.Close()
	defer cm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	id, _ := cm.CreateID(nil, rdmacm.PortSpaceTCP, nil) // synchronous
	defer id.Destroy()
	if err := id.ResolveAddr(ctx, netip.Addr{}, netip.MustParseAddrPort("192.0.2.2:7471")); err != nil {
		fmt.Println(err)
		return
	}
	pd, _ := dev.AllocPD()
	defer pd.Dealloc()
	cq, _ := dev.CreateCQ(8, nil)
	defer cq.Destroy()
	qp, _ := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	defer qp.Destroy()
	a, mask, _ := id.InitQPAttr(verbs.StateInit)
	if err := qp.Modify(&a, mask); err != nil {
		fmt.Println(err)
		return
	}
	_, _, err := id.InitQPAttr(verbs.StateRTR)
	fmt.Println(qp.State(), "remote read:", a.AccessFlags&verbs.AccessRemoteRead != 0)
	fmt.Println("RTR before the peer answers:", errors.Is(err, rdmacm.ErrState))
	// Output:
	// INIT remote read: true
	// RTR before the peer answers: true
}

// An ID's QP gets a local ACK timeout of 4.096 µs × 2^18 (about 1 s)
// instead of rdmacm's 14; set it before Connect, or before Accept on the
// passive side.
func ExampleID_SetACKTimeout() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	dev, cm := exampleCM(n, "192.0.2.1")
	defer dev.Close()
	defer cm.Close()
	id, _ := cm.CreateID(rdmacm.NewEventChannel(), rdmacm.PortSpaceTCP, nil)
	defer id.Destroy()
	fmt.Println(id.SetACKTimeout(18))
	fmt.Println(errors.Is(id.SetACKTimeout(32), rdmacm.ErrInvalid))
	// Output:
	// <nil>
	// true
}
