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

// A REQ/REP/RTU exchange between the CMs of two devices. The passive side
// accepts every REQ for its service ID; the active side answers the REP
// with an RTU. (The QPs themselves are the application's business: package
// rdmacm moves them to RTS with what the REQ and REP carry.)
func Example() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	open := func(ip string) *cm.Manager {
		l, _ := n.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
		dev, _ := verbs.Open(l, nil)
		m, _ := cm.New(dev, nil)
		return m
	}
	server, client := open("192.0.2.2"), open("192.0.2.1")
	defer server.Device().Close()
	defer client.Device().Close()
	defer server.Close()
	defer client.Close()

	established := make(chan string, 1)
	service := mad.ServiceID(mad.PortSpaceTCP, 7471)
	server.Listen(service, func(c *cm.Conn, ev *cm.Event) {
		switch ev.Type {
		case cm.EventREQ:
			c.SendREP(&cm.REPParams{QPN: 0x42, StartingPSN: 1000, ResponderResources: 1, InitiatorDepth: 1})
		case cm.EventEstablished:
			established <- c.State().String()
		}
	})
	done := make(chan wire.QPN, 1)
	c, _ := client.NewConn(func(c *cm.Conn, ev *cm.Event) {
		if ev.Type == cm.EventREP {
			c.SendRTU(nil)
			done <- ev.REP.LocalQPN
		}
	})
	c.SendREQ(&cm.REQParams{ServiceID: service, QPType: verbs.RC, QPN: 0x21, StartingPSN: 2000,
		Path:               cm.Path{DGID: wire.GIDFromAddr(netip.MustParseAddr("192.0.2.2"))},
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		PathMTU: verbs.MTU1024, LocalACKTimeout: 14})
	fmt.Printf("peer QP %#x\n", <-done)
	fmt.Println("server:", <-established, "client:", c.State())
	// Output:
	// peer QP 0x42
	// server: ESTABLISHED client: ESTABLISHED
}
