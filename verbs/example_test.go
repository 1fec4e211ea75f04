// Runnable examples of the main API: two devices on an in-process network
// (link/loop), memory registration, connecting RC queue pairs, SEND/RECV,
// RDMA WRITE and polling for completions. Over real UDP the only difference
// is how the devices are opened (package roce: Open or OpenInterface).

package verbs_test

import (
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Opening a device on each end of an in-process network.
func ExampleOpen() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()

	for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		l, err := network.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
		if err != nil {
			log.Fatal(err)
		}
		dev, err := verbs.Open(l, &verbs.Options{Name: "rxe_" + ip, MTU: verbs.MTU1024})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close()

		port, err := dev.QueryPort(1)
		if err != nil {
			log.Fatal(err)
		}
		// A RoCEv2 GID is the IP address, here IPv4-mapped.
		gid, _ := dev.QueryGID(1, 0)
		fmt.Printf("%s: port %v, MTU %v, GID %v\n", dev.Name(), port.State, port.ActiveMTU, gid)
	}
	// Output:
	// rxe_10.0.0.1: port PORT_ACTIVE, MTU 1024, GID ::ffff:10.0.0.1
	// rxe_10.0.0.2: port PORT_ACTIVE, MTU 1024, GID ::ffff:10.0.0.2
}

// Connecting two RC queue pairs by hand: each QP goes RESET -> INIT -> RTR
// -> RTS with its peer's GID, QPN and starting PSN, the values a connection
// manager would exchange.
func ExampleQP_Modify() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	devA, qpA := openWithQP(network, "10.0.0.1")
	defer devA.Close()
	devB, qpB := openWithQP(network, "10.0.0.2")
	defer devB.Close()

	connect := func(qp *verbs.QP, peer *verbs.Device, peerQPN wire.QPN, recvPSN, sendPSN wire.PSN) error {
		// INIT: port, P_Key and what the peer may do to our memory.
		err := qp.Modify(&verbs.QPAttr{
			State:       verbs.StateInit,
			PortNum:     1,
			PKeyIndex:   0,
			AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		}, verbs.AttrState|verbs.AttrPort|verbs.AttrPKeyIndex|verbs.AttrAccessFlags)
		if err != nil {
			return err
		}
		// RTR (ready to receive): where the peer is and what it sends.
		err = qp.Modify(&verbs.QPAttr{
			State:           verbs.StateRTR,
			AH:              verbs.AHAttr{DGID: peer.GIDs()[0], PortNum: 1},
			PathMTU:         verbs.MTU1024,
			DestQPN:         peerQPN,
			RQPSN:           recvPSN,
			MaxDestRdAtomic: 1,
			MinRNRTimer:     12,
		}, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|
			verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
		if err != nil {
			return err
		}
		// RTS (ready to send): our PSN and the retransmission policy.
		return qp.Modify(&verbs.QPAttr{
			State:       verbs.StateRTS,
			SQPSN:       sendPSN,
			Timeout:     14, // 4.096 us * 2^14 = 67 ms
			RetryCnt:    7,
			RNRRetry:    7, // retry forever while the peer has no receive posted
			MaxRdAtomic: 1,
		}, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|
			verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	}
	if err := connect(qpA, devB, qpB.QPN(), 1000, 2000); err != nil {
		log.Fatal(err)
	}
	if err := connect(qpB, devA, qpA.QPN(), 2000, 1000); err != nil {
		log.Fatal(err)
	}
	a, _ := qpA.Query()
	fmt.Println("A:", a.State, "path MTU", a.PathMTU, "sends from PSN", a.SQPSN)
	fmt.Println("B:", qpB.State())
	// Output:
	// A: RTS path MTU 1024 sends from PSN 2000
	// B: RTS
}

// openWithQP opens a device at ip on network and creates an RC QP on it with
// a CQ for both queues.
func openWithQP(network *loop.Network, ip string) (*verbs.Device, *verbs.QP) {
	l, err := network.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
	if err != nil {
		log.Fatal(err)
	}
	dev, err := verbs.Open(l, nil)
	if err != nil {
		log.Fatal(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := dev.CreateCQ(16, nil)
	if err != nil {
		log.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	return dev, qp
}

// The whole path: two devices, registered memory, a connected pair of RC
// QPs, a SEND matched by a posted RECV, an RDMA WRITE into the peer's
// memory, and completions polled from the CQs.
func Example() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()

	// One device per end, each with a protection domain, a completion
	// queue, registered memory and an RC queue pair.
	type end struct {
		dev *verbs.Device
		cq  *verbs.CQ
		mr  *verbs.MR
		qp  *verbs.QP
	}
	open := func(ip string) end {
		l, err := network.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
		if err != nil {
			log.Fatal(err)
		}
		dev, err := verbs.Open(l, &verbs.Options{MTU: verbs.MTU1024})
		if err != nil {
			log.Fatal(err)
		}
		pd, err := dev.AllocPD()
		if err != nil {
			log.Fatal(err)
		}
		// The peer may write into this memory, so it is registered with
		// remote write access (which needs local write access).
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			log.Fatal(err)
		}
		cq, err := dev.CreateCQ(16, nil)
		if err != nil {
			log.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		return end{dev, cq, mr, qp}
	}
	a, b := open("10.0.0.1"), open("10.0.0.2")
	defer a.dev.Close()
	defer b.dev.Close()

	// Connect: RESET -> INIT -> RTR -> RTS on both sides (see
	// ExampleQP_Modify for each step).
	connect := func(local, remote end, rqPSN, sqPSN wire.PSN) {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.StateInit, PortNum: 1,
				AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
				verbs.AttrState | verbs.AttrPort | verbs.AttrPKeyIndex | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{DGID: remote.dev.GIDs()[0]},
				PathMTU: verbs.MTU1024, DestQPN: remote.qp.QPN(), RQPSN: rqPSN, MaxDestRdAtomic: 1, MinRNRTimer: 12},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
					verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.StateRTS, SQPSN: sqPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt |
					verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := local.qp.Modify(&s.attr, s.mask); err != nil {
				log.Fatal(err)
			}
		}
	}
	connect(a, b, 100, 200)
	connect(b, a, 200, 100)

	// poll waits for the next completion on cq. Poll never blocks; a
	// program that would rather sleep arms the CQ with ReqNotify and
	// waits on a CompChannel.
	poll := func(cq *verbs.CQ) verbs.WC {
		wc := make([]verbs.WC, 1)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if cq.Poll(wc) == 1 {
				return wc[0]
			}
			time.Sleep(100 * time.Microsecond)
		}
		log.Fatal("no completion")
		return verbs.WC{}
	}

	// SEND/RECV: B posts a receive buffer first, then A sends into it.
	msg := "hello, RDMA"
	if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}}); err != nil {
		log.Fatal(err)
	}
	copy(a.mr.Buf(), msg)
	err := a.qp.PostSend([]verbs.SendWR{{
		ID:     2,
		Opcode: verbs.WRSend,
		Flags:  verbs.SendSignaled, // ask for a completion
		SGL:    []verbs.SGE{a.mr.SGE(0, len(msg))},
	}})
	if err != nil {
		log.Fatal(err)
	}
	sent, recv := poll(a.cq), poll(b.cq)
	fmt.Printf("A: wr %d %v %v\n", sent.WRID, sent.Opcode, sent.Status)
	fmt.Printf("B: wr %d %v %v, %d bytes: %q\n", recv.WRID, recv.Opcode, recv.Status, recv.ByteLen, b.mr.Buf()[:recv.ByteLen])

	// RDMA WRITE: A writes into B's memory at an address and R_Key B has
	// told it. B's CPU is not involved and B gets no completion.
	copy(a.mr.Buf()[100:], "written by A")
	err = a.qp.PostSend([]verbs.SendWR{{
		ID:         3,
		Opcode:     verbs.WRRDMAWrite,
		Flags:      verbs.SendSignaled,
		SGL:        []verbs.SGE{a.mr.SGE(100, 12)},
		RemoteAddr: b.mr.Addr() + 1000,
		RKey:       b.mr.RKey(),
	}})
	if err != nil {
		log.Fatal(err)
	}
	wrote := poll(a.cq)
	fmt.Printf("A: wr %d %v %v\n", wrote.WRID, wrote.Opcode, wrote.Status)
	fmt.Printf("B's memory: %q\n", b.mr.Buf()[1000:1012])

	// Output:
	// A: wr 2 SEND success
	// B: wr 1 RECV success, 11 bytes: "hello, RDMA"
	// A: wr 3 RDMA_WRITE success
	// B's memory: "written by A"
}

// A CQ whose completions carry the time they were generated: the device
// clock (monotonic nanoseconds, for intervals) and the wall clock.
func ExampleDevice_CreateCQEx() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	l, err := network.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		log.Fatal(err)
	}
	dev, err := verbs.Open(l, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	attr := dev.QueryDevice()
	fmt.Printf("device clock: %d kHz, mask %#x\n", attr.HCACoreClock, attr.CompletionTimestampMask)

	cq, err := dev.CreateCQEx(16, nil, verbs.CQAttr{
		Timestamps: verbs.WCWithCompletionTimestamp | verbs.WCWithCompletionTimestampWallclock})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Destroy()
	// ... QPs on cq post work; each completion polled then has
	// wc.Timestamp (compare with verbs.DeviceClock()) and wc.WallclockNS
	// (time.Unix(0, int64(wc.WallclockNS))).
	fmt.Println("stamps:", cq.Timestamps() == verbs.WCWithCompletionTimestamp|verbs.WCWithCompletionTimestampWallclock)
	// Output:
	// device clock: 1000000 kHz, mask 0x7fffffffffffffff
	// stamps: true
}

// Attaching UD queue pairs to a multicast group: one datagram sent to the
// group reaches each of them.
func ExampleQP_AttachMcast() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	open := func(ip string) *verbs.Device {
		l, err := network.Attach([]netip.Addr{netip.MustParseAddr(ip)}, 4791)
		if err != nil {
			log.Fatal(err)
		}
		d, err := verbs.Open(l, nil)
		if err != nil {
			log.Fatal(err)
		}
		return d
	}
	sender, receiver := open("10.0.0.1"), open("10.0.0.2")
	defer sender.Close()
	defer receiver.Close()
	const qkey = 0x01234567
	group := wire.GIDFromAddr(netip.MustParseAddr("239.0.0.7"))
	udQP := func(d *verbs.Device) (*verbs.PD, *verbs.CQ, *verbs.QP, *verbs.MR) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(8, nil)
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		qp.Modify(&verbs.QPAttr{State: verbs.StateInit, PortNum: 1, QKey: qkey}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey)
		qp.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState)
		qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState|verbs.AttrSQPSN)
		mr, _ := pd.RegMR(make([]byte, 256), verbs.AccessLocalWrite)
		return pd, cq, qp, mr
	}
	var cqs []*verbs.CQ
	for range 2 {
		_, cq, qp, mr := udQP(receiver)
		qp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{mr.SGE(0, 256)}}})
		if err := qp.AttachMcast(group, 0); err != nil {
			log.Fatal(err)
		}
		cqs = append(cqs, cq)
	}
	pd, cq, qp, mr := udQP(sender)
	ah, err := pd.CreateAH(verbs.AHAttr{DGID: group})
	if err != nil {
		log.Fatal(err)
	}
	err = qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mr.SGE(0, 32)},
		AH: ah, RemoteQPN: wire.QPMulticast, RemoteQKey: qkey}})
	if err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for _, c := range append(cqs, cq) {
		for c.Poll(wc) == 0 {
			time.Sleep(time.Millisecond)
		}
		fmt.Println(wc[0].Opcode, wc[0].Status, wc[0].ByteLen)
	}
	// Output:
	// RECV success 72
	// RECV success 72
	// SEND success 32
}
