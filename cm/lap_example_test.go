package cm_test

import (
	"fmt"
	"net/netip"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// A connection whose REQ carries an alternate path (REQParams.AltPath),
// then a LAP proposing another one, which the server accepts with an APR.
// (Loading the paths into the QPs is the application's part: package
// rdmacm does it.)
func ExampleConn_SendLAP() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	open := func(ips ...string) *cm.Manager {
		var addrs []netip.Addr
		for _, ip := range ips {
			addrs = append(addrs, netip.MustParseAddr(ip))
		}
		l, _ := n.Attach(addrs, 4791)
		dev, _ := verbs.Open(l, nil)
		m, _ := cm.New(dev, nil)
		return m
	}
	server, client := open("192.0.2.2", "198.51.100.2"), open("192.0.2.1", "198.51.100.1")
	defer server.Device().Close()
	defer client.Device().Close()
	defer server.Close()
	defer client.Close()
	gid := func(ip string) wire.GID { return wire.GIDFromAddr(netip.MustParseAddr(ip)) }

	serverConn := make(chan *cm.Conn, 1)
	service := mad.ServiceID(mad.PortSpaceTCP, 7471)
	server.Listen(service, func(c *cm.Conn, ev *cm.Event) {
		switch ev.Type {
		case cm.EventREQ:
			c.SendREP(&cm.REPParams{QPN: 0x42, StartingPSN: 1000, ResponderResources: 1, InitiatorDepth: 1})
		case cm.EventEstablished:
			serverConn <- c
		case cm.EventLAP:
			fmt.Println("server: LAP for a path to", ev.AltPath.DGID)
			c.SendAPR(&cm.APRParams{Status: mad.APLoaded})
		}
	})
	answered := make(chan mad.APStatus, 1)
	c, _ := client.NewConn(func(c *cm.Conn, ev *cm.Event) {
		switch ev.Type {
		case cm.EventREP:
			c.SendRTU(nil)
		case cm.EventAPR:
			answered <- ev.APStatus
		}
	})
	c.SendREQ(&cm.REQParams{ServiceID: service, QPType: verbs.RC, QPN: 0x21, StartingPSN: 2000,
		Path:               cm.Path{DGID: gid("192.0.2.2")},
		AltPath:            &cm.Path{SGIDIndex: 1, DGID: gid("198.51.100.2")},
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		PathMTU: verbs.MTU1024, LocalACKTimeout: 14})
	s := <-serverConn
	alt, _ := s.AltPath()
	fmt.Println("server: alternate path from the REQ to", alt.DGID)

	c.SendLAP(&cm.LAPParams{AltPath: cm.Path{DGID: gid("192.0.2.2")}, LocalACKTimeout: 14})
	fmt.Println("client: APR says", <-answered)
	alt, _ = c.AltPath()
	fmt.Println("client: alternate path to", alt.DGID)
	// Output:
	// server: alternate path from the REQ to ::ffff:198.51.100.1
	// server: LAP for a path to ::ffff:192.0.2.1
	// client: APR says AP loaded
	// client: alternate path to ::ffff:192.0.2.2
}
