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

// A receiver joins a multicast group and a sender on another host sends it
// a datagram with the address handle its own join reported.
func ExampleID_JoinMulticast() {
	n := loop.NewNetwork(loop.Config{})
	defer n.Close()
	group := netip.MustParseAddr("239.1.2.3")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type host struct {
		dev *verbs.Device
		cm  *rdmacm.CM
		id  *rdmacm.ID
		pd  *verbs.PD
		cq  *verbs.CQ
		mr  *verbs.MR
	}
	open := func(ip string) *host {
		l, _ := n.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
		h := &host{}
		h.dev, _ = verbs.Open(l, nil)
		h.cm, _ = rdmacm.New([]*verbs.Device{h.dev}, nil)
		h.id, _ = h.cm.CreateID(nil, rdmacm.PortSpaceUDP, nil) // synchronous
		if err := h.id.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(group, 0)); err != nil {
			fmt.Println(err)
		}
		h.pd, _ = h.dev.AllocPD()
		h.cq, _ = h.dev.CreateCQ(4, nil)
		h.id.CreateQP(h.pd, verbs.QPInitAttr{SendCQ: h.cq, RecvCQ: h.cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		h.mr, _ = h.pd.RegMR(make([]byte, 128), verbs.AccessLocalWrite)
		return h
	}
	rcv, snd := open("192.0.2.2"), open("192.0.2.1")
	for _, h := range []*host{rcv, snd} {
		defer h.dev.Close()
		defer h.cm.Close()
		defer h.id.Destroy()
	}
	rcv.id.QP().PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{rcv.mr.SGE(0, 128)}}})
	if err := rcv.id.JoinMulticast(ctx, group, nil); err != nil {
		fmt.Println(err)
		return
	}

	// The sender joins too, for the address handle, QPN and Q_Key; an
	// asynchronous ID would read them from the MULTICAST_JOIN event.
	ch := rdmacm.NewEventChannel()
	id, _ := snd.cm.CreateID(ch, rdmacm.PortSpaceUDP, nil)
	defer id.Destroy()
	id.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(group, 0))
	ch.Get(ctx) // ADDR_RESOLVED
	id.JoinMulticast(ctx, group, nil)
	ev, _ := ch.Get(ctx)
	fmt.Println(ev.Type, ev.UD.AH.DGID, ev.UD.QKey == 0x01234567)
	ah, _ := snd.pd.CreateAH(ev.UD.AH)
	copy(snd.mr.Buf(), "hello, group")
	snd.id.QP().PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: []verbs.SGE{snd.mr.SGE(0, 12)},
		AH: ah, RemoteQPN: ev.UD.QPNum, RemoteQKey: ev.UD.QKey}})

	wcs := make([]verbs.WC, 1)
	if _, err := rcv.cq.Wait(ctx, wcs); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q from QP %v\n", rcv.mr.Buf()[40:40+wcs[0].ByteLen-40], wcs[0].SrcQP == snd.id.QP().QPN())
	// Output:
	// RDMA_CM_EVENT_MULTICAST_JOIN ::ffff:239.1.2.3 true
	// "hello, group" from QP true
}
