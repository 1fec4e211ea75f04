package verbs

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// pair is two connected QPs on two devices, with their PDs, CQs and memory.
type pair struct {
	t      testing.TB
	net    *loop.Network
	da, db *Device
	pa, pb *PD
	ca, cb *CQ
	qa, qb *QP
	sa, sb *SRQ     // with pairOpts.srq
	opts   pairOpts // as completed by connect
}

type pairOpts struct {
	typ     QPType
	mtu     MTU
	faults  loop.Faults
	seed    uint64
	sge     int
	wr      int
	timeout uint8
	retry   uint8
	rnr     uint8
	minRNR  uint8
	devOpts *Options
	cqe     int      // CQ depth; 0 means 4*wr
	srq     int      // if > 0, each QP receives from its own SRQ of this many WRs
	queue   int      // loop.Config.QueueLen; 0 means loop's default
	tclass  [2]uint8 // the traffic class of qa's and qb's address vectors
	ib      *ibOpts  // open the devices over an InfiniBand cable (ibport_test.go)
}

func newDevicesLoop(t testing.TB, o *pairOpts) (*loop.Network, *Device, *Device) {
	t.Helper()
	n := loop.NewNetwork(loop.Config{Faults: o.faults, Seed: o.seed, QueueLen: o.queue})
	la, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.2")}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	var opts Options
	if o.devOpts != nil {
		opts = *o.devOpts
	}
	da, err := Open(la, &opts)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(lb, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		da.Close()
		db.Close()
		n.Close()
	})
	return n, da, db
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	if o.ib != nil {
		return newPairIB(t, o)
	}
	n, da, db := newDevicesLoop(t, &o)
	p := &pair{t: t, net: n, da: da, db: db}
	p.connect(o)
	return p
}

func (p *pair) connect(o pairOpts) {
	t := p.t
	if o.typ == 0 {
		o.typ = RC
	}
	if o.mtu == 0 {
		o.mtu = MTU1024
	}
	if o.sge == 0 {
		o.sge = 4
	}
	if o.wr == 0 {
		o.wr = 64
	}
	if o.timeout == 0 {
		o.timeout = 12
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnr == 0 {
		o.rnr = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.cqe == 0 {
		o.cqe = 4 * o.wr
	}
	mk := func(d *Device) (*PD, *CQ, *QP, *SRQ) {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(o.cqe, nil)
		if err != nil {
			t.Fatal(err)
		}
		var srq *SRQ
		if o.srq > 0 {
			if srq, err = pd.CreateSRQ(SRQAttr{MaxWR: o.srq, MaxSGE: o.sge}); err != nil {
				t.Fatal(err)
			}
		}
		qp, err := pd.CreateQP(QPInitAttr{Type: o.typ, SendCQ: cq, RecvCQ: cq, SRQ: srq,
			Cap: QPCap{MaxSendWR: o.wr, MaxRecvWR: o.wr, MaxSendSGE: o.sge, MaxRecvSGE: o.sge, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
		return pd, cq, qp, srq
	}
	p.pa, p.ca, p.qa, p.sa = mk(p.da)
	p.pb, p.cb, p.qb, p.sb = mk(p.db)
	p.opts = o
	// Start PSNs near the wrap to exercise 24-bit arithmetic.
	p.bringUp(p.qa, p.db, p.qb, 0xFFFFF0, 0xFFFFFA)
	p.bringUp(p.qb, p.da, p.qa, 0xFFFFFA, 0xFFFFF0)
}

// bringUp moves qp from RESET through INIT and RTR to RTS, connected (RC,
// UC) to peerQP on peer, with the pair's options.
func (p *pair) bringUp(qp *QP, peer *Device, peerQP *QP, rqpsn, sqpsn wire.PSN) {
	t, o := p.t, p.opts
	t.Helper()
	access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal
	a := QPAttr{State: StateInit, PKeyIndex: 0, PortNum: 1, AccessFlags: access, QKey: 0x11111111}
	mask := AttrState | AttrPKeyIndex | AttrPort
	if o.typ == UD {
		mask |= AttrQKey
	} else {
		mask |= AttrAccessFlags
	}
	if err := qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
	a = QPAttr{State: StateRTR}
	mask = AttrState
	if o.typ != UD {
		a.PathMTU, a.DestQPN, a.RQPSN = o.mtu, peerQP.QPN(), rqpsn
		a.AH = AHAttr{DGID: peer.GIDs()[0], PortNum: 1, TrafficClass: o.tclass[0]}
		if qp == p.qb {
			a.AH.TrafficClass = o.tclass[1]
		}
		if o.ib != nil {
			a.AH = o.ib.ah(peer, a.AH.TrafficClass)
		}
		mask |= AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		if o.typ == RC {
			a.MaxDestRdAtomic, a.MinRNRTimer = 16, o.minRNR
			mask |= AttrMaxDestRdAtomic | AttrMinRNRTimer
		}
	}
	if err := qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
	a = QPAttr{State: StateRTS, SQPSN: sqpsn}
	mask = AttrState | AttrSQPSN
	if o.typ == RC {
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = o.timeout, o.retry, o.rnr, 16
		mask |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	}
	if err := qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
}

func (p *pair) reg(pd *PD, n int) *MR {
	p.t.Helper()
	mr, err := pd.RegMR(make([]byte, n), AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessFlushGlobal)
	if err != nil {
		p.t.Fatal(err)
	}
	return mr
}

// waitWC polls cq until n completions arrive or the deadline passes.
func waitWC(t testing.TB, cq *CQ, n int, d time.Duration) []WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]WC, 0, n)
	buf := make([]WC, 16)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("got %d of %d completions: %v", len(out), n, out)
			case <-time.After(50 * time.Microsecond):
			}
		}
	}
	return out
}

// TestMain fails the package if goroutines outlive the tests: after every
// device and network is closed, the count must return to what it was before
// (the links' readers and delivery goroutines, timers and handlers all gone).
func TestMain(m *testing.M) { leakcheck.Main(m) }

// netipAddrPort is a as a packet source whose port the link chooses.
func netipAddrPort(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, 0) }
