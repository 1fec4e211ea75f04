package ib_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/wire"
)

// Two HCA ports cabled back to back (LIDs 1 and 2): a transport packet sent
// by LID arrives framed, checked and addressed.
func ExampleCable() {
	a, b := ib.Cable()
	la, err := ib.New(a)
	if err != nil {
		log.Fatal(err)
	}
	defer la.Close()
	lb, err := ib.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	got := make(chan string, 1)
	if err := lb.Start(link.HandlerFunc(func(batch []*link.Packet) {
		for _, p := range batch {
			pkt, _ := wire.Parse(p.Data())
			got <- fmt.Sprintf("from LID %d to LID %d on SL %d: %q", p.IB.SLID, p.IB.DLID, p.IB.SL, pkt.Payload())
		}
	})); err != nil {
		log.Fatal(err)
	}
	if err := la.Start(link.HandlerFunc(func([]*link.Packet) {})); err != nil {
		log.Fatal(err)
	}
	p := link.Get()
	defer link.Put(p)
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 7},
		DETH: wire.DETHFields{QKey: 0x1111, SrcQP: 9}}
	if p.N, err = wire.Build(p.Buf, &h, []byte("hello")); err != nil {
		log.Fatal(err)
	}
	p.IB = link.IBAddr{DLID: 2, SL: 1}
	if err := la.Send([]*link.Packet{p}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)
	fmt.Println("port A:", la.IBAttr().LID, "state", la.IBAttr().State, "up", la.Up())
	// Output:
	// from LID 1 to LID 2 on SL 1: "hello"
	// port A: 1 state 4 up true
}

// A link joins a multicast group by its MGID; the switches' forwarding
// tables, which the SM programs from the SA's joins, bring the group's
// packets to the port.
func ExampleLink_JoinGroup() {
	a, b := ib.Cable()
	defer b.Close()
	l, err := ib.New(a)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	mgid := netip.MustParseAddr("ff12:401b:ffff::1")
	fmt.Println(l.JoinGroup(mgid), l.LeaveGroup(mgid))
	// Output:
	// <nil> <nil>
}
