package verbs_test

import (
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// A peer stores into a file-backed region with ATOMIC_WRITE and makes the
// store persistent with FLUSH: when the FLUSH completes, the file holds the
// value (RegFile's mapping was written back with msync).
func ExamplePD_RegFile() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite |
		verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
	devA, _, cqA, qpA := openRC(network, "10.0.0.1")
	defer devA.Close()
	devB, pdB, _, qpB := openRC(network, "10.0.0.2")
	defer devB.Close()
	connectRC(qpA, devB, qpB.QPN(), access)
	connectRC(qpB, devA, qpA.QPN(), access)

	// B: a region backed by the first page of a file.
	dir, err := os.MkdirTemp("", "softrdma-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "log")
	if err := os.WriteFile(path, make([]byte, os.Getpagesize()), 0o600); err != nil {
		log.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pdB.RegFile(f, 0, os.Getpagesize(), access)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Dereg()

	// A: store 8 bytes atomically, then flush them to persistence. The
	// FLUSH's completion says the store is in the file.
	err = qpA.PostSend([]verbs.SendWR{
		{ID: 1, Opcode: verbs.WRAtomicWrite, Inline: []byte("8 bytes!"),
			RemoteAddr: mr.Addr() + 64, RKey: mr.RKey()},
		{ID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled,
			RemoteAddr: mr.Addr() + 64, RKey: mr.RKey(),
			Flush: verbs.FlushSpec{Len: 8, Type: verbs.FlushPersistent, Level: verbs.FlushRange}},
	})
	if err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); cqA.Poll(wc) == 0; {
		if time.Now().After(deadline) {
			log.Fatal("no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
	fmt.Println("A:", wc[0].WRID, wc[0].Opcode, wc[0].Status)
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("file: %q\n", data[64:72])
	fmt.Println("device honours persistent FLUSH:", devB.QueryDevice().DeviceCapFlagsEx&verbs.DeviceFlushPersistent != 0)
	// Output:
	// A: 2 FLUSH success
	// file: "8 bytes!"
	// device honours persistent FLUSH: true
}

// openRC opens a device at ip with a PD, a CQ and an RC QP.
func openRC(network *loop.Network, ip string) (*verbs.Device, *verbs.PD, *verbs.CQ, *verbs.QP) {
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
	return dev, pd, cq, qp
}

// connectRC brings qp to RTS, connected to peerQPN on peer, the peer
// allowed access.
func connectRC(qp *verbs.QP, peer *verbs.Device, peerQPN wire.QPN, access verbs.Access) {
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: access},
			verbs.AttrState | verbs.AttrPort | verbs.AttrPKeyIndex | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{DGID: peer.GIDs()[0]},
			PathMTU: verbs.MTU1024, DestQPN: peerQPN, RQPSN: 1, MaxDestRdAtomic: 4, MinRNRTimer: 12},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt |
				verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			log.Fatal(err)
		}
	}
}
