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

// Memory windows: B registers a buffer once, with MW_BIND access, and
// hands A a window on part of it instead of the region's own R_Key. A type
// 2 window is bound by a BIND_MW work request on B's QP and is valid on
// that QP only; A's SEND_WITH_INV revokes it when A is done (B's receive
// completion says which key went), and B can bind it again elsewhere. A
// type 1 window is bound with QP.BindMW instead and revoked by binding it
// again.
func ExampleMW() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	a, b := openEnd(network, "10.0.0.1"), openEnd(network, "10.0.0.2")
	defer a.dev.Close()
	defer b.dev.Close()
	connectEnds(a, b)

	// B: a region windows may be bound to, and a type 2 window.
	region, err := b.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessMWBind)
	if err != nil {
		log.Fatal(err)
	}
	mw, err := b.pd.AllocMW(verbs.MWType2)
	if err != nil {
		log.Fatal(err)
	}
	// Bind 256 bytes at offset 1024 for remote writes, with the next key
	// byte (ibv_inc_rkey).
	key := mw.RKey()&^0xff | (mw.RKey()+1)&0xff
	err = b.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: mw, RKey: key,
		Bind: verbs.MWBindInfo{MR: region, Addr: region.Addr() + 1024, Length: 256, Access: verbs.AccessRemoteWrite}}})
	if err != nil {
		log.Fatal(err)
	}
	wc := pollOne(b.cq)
	fmt.Printf("B: %v %v, key byte changed: %v\n", wc.Opcode, wc.Status, mw.RKey() == key)

	// A writes through the window (B told it the window's address and key).
	src, err := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	copy(src.Buf(), "through a window")
	err = a.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, 16)}, RemoteAddr: region.Addr() + 1024, RKey: key}})
	if err != nil {
		log.Fatal(err)
	}
	wc = pollOne(a.cq)
	fmt.Printf("A: %v %v; B's memory: %q\n", wc.Opcode, wc.Status, region.Buf()[1024:1040])

	// The region stays registered while the window is bound.
	fmt.Println("B: deregister while bound:", region.Dereg())

	// A is done: its SEND_WITH_INV invalidates the window at B.
	recvBuf, err := b.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 3, SGL: []verbs.SGE{recvBuf.SGE(0, 64)}}}); err != nil {
		log.Fatal(err)
	}
	err = a.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
		Inline: []byte("done"), InvRKey: key}})
	if err != nil {
		log.Fatal(err)
	}
	pollOne(a.cq)
	wc = pollOne(b.cq)
	fmt.Printf("B: %v %q, invalidated key is the window's: %v\n", wc.Opcode, recvBuf.Buf()[:wc.ByteLen],
		wc.Flags&verbs.WCWithInv != 0 && wc.InvalidatedRKey == key)
	if err := mw.Dealloc(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("B: deregister after:", region.Dereg())

	// Output:
	// B: BIND_MW success, key byte changed: true
	// A: RDMA_WRITE success; B's memory: "through a window"
	// B: deregister while bound: verbs: resource busy: mem: memory region in use
	// B: RECV "done", invalidated key is the window's: true
	// B: deregister after: <nil>
}

type exEnd struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
}

func openEnd(network *loop.Network, ip string) exEnd {
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
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		log.Fatal(err)
	}
	return exEnd{dev, pd, cq, qp}
}

// connectEnds brings both QPs to RTS, connected to each other.
func connectEnds(a, b exEnd) {
	for _, e := range [][2]exEnd{{a, b}, {b, a}} {
		local, remote := e[0], e[1]
		for _, s := range []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
				verbs.AttrState | verbs.AttrPort | verbs.AttrPKeyIndex | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{DGID: remote.dev.GIDs()[0]}, PathMTU: verbs.MTU1024,
				DestQPN: remote.qp.QPN(), RQPSN: wire.PSN(0), MaxDestRdAtomic: 1, MinRNRTimer: 12},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
					verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		} {
			if err := local.qp.Modify(&s.attr, s.mask); err != nil {
				log.Fatal(err)
			}
		}
	}
}

func pollOne(cq *verbs.CQ) verbs.WC {
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
