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

// Two hosts on an in-process network: the server listens on port 7471, the
// client dials it and both get connected RC queue pairs.
func Example() {
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
	l, err := rdmacm.Listen(ctx, netip.MustParseAddrPort("0.0.0.0:7471"),
		&rdmacm.ConnOptions{CM: server, Param: rdmacm.ConnParam{PrivateData: []byte("welcome")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	c, err := rdmacm.Dial(ctx, netip.MustParseAddrPort("192.0.2.2:7471"), &rdmacm.ConnOptions{CM: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := l.Accept(ctx)
	fmt.Printf("client QP %v, server QP %v, server said %q\n", c.QP.State(), s.QP.State(), c.Peer.PrivateData[:7])
	c.Close()
	<-s.Disconnected()
	fmt.Println("server saw the disconnect")
	s.Close()
	// Output:
	// client QP RTS, server QP RTS, server said "welcome"
	// server saw the disconnect
}
