package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Automatic path migration: two RC QPs connected over a primary path
// (10.0.0.x) load an alternate one (10.0.1.x) with REARM, arm with their
// first exchange, and when every packet on the primary path is lost the
// requester migrates once its retries run out; the SEND completes and both
// devices raise EventPathMig.
func ExampleQP_Modify_pathMigration() {
	var primaryDown atomic.Bool
	network := loop.NewNetwork(loop.Config{Faults: link.Faults{Filter: func(p *link.Packet) bool {
		return primaryDown.Load() && p.Dst.Addr().As4()[2] == 0 // 10.0.0.x
	}}})
	defer network.Close()
	open := func(name, primary, alternate string) (*verbs.Device, *verbs.PD, *verbs.QP, *verbs.CQ) {
		l, err := network.Attach([]netip.Addr{netip.MustParseAddr(primary), netip.MustParseAddr(alternate)}, 4791)
		if err != nil {
			log.Fatal(err)
		}
		dev, err := verbs.Open(l, &verbs.Options{Name: name})
		if err != nil {
			log.Fatal(err)
		}
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(16, nil)
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxInlineData: 16}})
		if err != nil {
			log.Fatal(err)
		}
		return dev, pd, qp, cq
	}
	devA, _, qpA, cqA := open("a", "10.0.0.1", "10.0.1.1")
	defer devA.Close()
	devB, pdB, qpB, cqB := open("b", "10.0.0.2", "10.0.1.2")
	defer devB.Close()

	connect := func(qp *verbs.QP, peer *verbs.Device, peerQPN wire.QPN) {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: verbs.AccessLocalWrite},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			// RTR: the primary path to the peer's first GID, the
			// alternate to its second, from our second.
			{verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{DGID: peer.GIDs()[0], PortNum: 1},
				AltAH:      verbs.AHAttr{DGID: peer.GIDs()[1], SGIDIndex: 1, PortNum: 1},
				AltPortNum: 1, AltTimeout: 12, PathMTU: verbs.MTU1024, DestQPN: peerQPN, MaxDestRdAtomic: 1},
				verbs.AttrState | verbs.AttrAV | verbs.AttrAltPath | verbs.AttrPathMTU | verbs.AttrDestQPN |
					verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			// RTS: REARM, waiting for the peer to have an alternate too.
			{verbs.QPAttr{State: verbs.StateRTS, Timeout: 12, RetryCnt: 2, RNRRetry: 7, PathMigState: verbs.MigRearm},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
					verbs.AttrMaxQPRdAtomic | verbs.AttrPathMigState},
		}
		for _, s := range steps {
			if err := qp.Modify(&s.attr, s.mask); err != nil {
				log.Fatal(err)
			}
		}
	}
	connect(qpA, devB, qpB.QPN())
	connect(qpB, devA, qpA.QPN())

	// The first exchange arms both ends.
	mr, err := pdB.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	exchange := func(msg string) {
		if err := qpB.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{mr.SGE(0, 64)}}}); err != nil {
			log.Fatal(err)
		}
		if err := qpA.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, Inline: []byte(msg)}}); err != nil {
			log.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		for _, cq := range []*verbs.CQ{cqA, cqB} {
			for cq.Poll(wc) == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			fmt.Println(wc[0].Opcode, wc[0].Status)
		}
	}
	a, _ := qpA.Query()
	fmt.Println("after connecting:", a.PathMigState)
	exchange("arm")
	a, _ = qpA.Query()
	fmt.Println("after an exchange:", a.PathMigState)

	primaryDown.Store(true)
	exchange("fail over")
	for _, dev := range []*verbs.Device{devA, devB} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := dev.GetAsyncEvent(ctx)
		cancel()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(dev.Name(), ev.Type)
	}
	a, _ = qpA.Query()
	fmt.Println("now:", a.PathMigState, "to", a.AH.DGID)
	// Output:
	// after connecting: REARM
	// SEND success
	// RECV success
	// after an exchange: ARMED
	// SEND success
	// RECV success
	// a path migrated
	// b path migrated
	// now: MIGRATED to ::ffff:10.0.1.2
}
