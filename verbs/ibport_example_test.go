package verbs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/verbs"
)

// Two devices whose ports are InfiniBand ports cabled back to back: the
// port shows the LID the SM gave, and a UD datagram goes by LID, without a
// GRH; the receive completion names the sender's LID.
func ExampleOpen_infiniBand() {
	ca, cb := ib.Cable() // ports with LIDs 1 and 2, Active
	var devs [2]*verbs.Device
	for i, port := range []ib.Port{ca, cb} {
		l, err := ib.New(port)
		if err != nil {
			log.Fatal(err)
		}
		if devs[i], err = verbs.Open(l, &verbs.Options{Name: fmt.Sprintf("ibdev%d", i)}); err != nil {
			log.Fatal(err)
		}
		defer devs[i].Close()
	}
	pa, _ := devs[1].QueryPort(1)
	fmt.Println(pa.LinkLayer, "LID", pa.LID, pa.State, "GID", devs[1].GIDs()[0])

	var qps [2]*verbs.QP
	var cqs [2]*verbs.CQ
	var mrs [2]*verbs.MR
	var pds [2]*verbs.PD
	for i, d := range devs {
		pd, err := d.AllocPD()
		pds[i] = pd
		if err != nil {
			log.Fatal(err)
		}
		if cqs[i], err = d.CreateCQ(8, nil); err != nil {
			log.Fatal(err)
		}
		if qps[i], err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cqs[i], RecvCQ: cqs[i],
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
			log.Fatal(err)
		}
		for _, s := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
			mask := verbs.AttrState
			switch s {
			case verbs.StateInit:
				mask |= verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
			case verbs.StateRTS:
				mask |= verbs.AttrSQPSN
			}
			if err := qps[i].Modify(&verbs.QPAttr{State: s, PortNum: 1, QKey: 0x2222}, mask); err != nil {
				log.Fatal(err)
			}
		}
		if mrs[i], err = pd.RegMR(make([]byte, 256), verbs.AccessLocalWrite); err != nil {
			log.Fatal(err)
		}
	}
	if err := qps[1].PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mrs[1].SGE(0, 256)}}}); err != nil {
		log.Fatal(err)
	}
	ah, err := pds[0].CreateAH(verbs.AHAttr{DLID: pa.LID, SL: 0, PortNum: 1})
	if err != nil {
		log.Fatal(err)
	}
	copy(mrs[0].Buf(), "by LID")
	if err := qps[0].PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{mrs[0].SGE(0, 6)},
		AH: ah, RemoteQPN: qps[1].QPN(), RemoteQKey: 0x2222}}); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	for {
		if n := cqs[1].Poll(wcs); n == 1 {
			break
		}
		if ctx.Err() != nil {
			log.Fatal("no completion")
		}
		time.Sleep(time.Millisecond)
	}
	wc := wcs[0]
	fmt.Printf("%v from LID %d, SL %d, GRH %v: %q\n", wc.Status, wc.SLID, wc.SL, wc.Flags&verbs.WCGRH != 0,
		mrs[1].Buf()[40:40+wc.ByteLen-40])
	// Output:
	// InfiniBand LID 2 PORT_ACTIVE GID fe80::2:c903:0:2
	// success from LID 1, SL 0, GRH false: "by LID"
}
