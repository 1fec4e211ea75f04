package remote

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/verbs"
)

// rcEnd is one verbs device on a remote port with an RC QP.
type rcEnd struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
	lid uint16
}

func (e *rcEnd) wait(t *testing.T, what string) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if _, err := e.cq.Wait(ctx, wc); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if wc[0].Status != verbs.Success {
		t.Fatalf("%s: status %v", what, wc[0].Status)
	}
	return wc[0]
}

// syncEnds sends an empty SEND from one end to the other and waits for
// both completions. The race detector does not see the order a socket
// gives, so what a WRITE placed at to is read only after this: to's
// receive completion follows the WRITE's placement on to's own goroutine.
func syncEnds(t *testing.T, from, to *rcEnd) {
	t.Helper()
	if err := to.qp.PostRecv([]verbs.RecvWR{{ID: 99}}); err != nil {
		t.Fatal(err)
	}
	if err := from.qp.PostSend([]verbs.SendWR{{ID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}}); err != nil {
		t.Fatal(err)
	}
	from.wait(t, "the sync SEND")
	to.wait(t, "the sync receive")
}

// rcPair opens two softrdma devices, each on a remote HCA port of s
// behind a different switch (Hca1, Hca2), brings the subnet up and
// connects an RC QP on each to the other by LID.
func rcPair(t *testing.T, s *served) (a, b *rcEnd) {
	var ends [2]*rcEnd
	for i, name := range []string{"Hca1", "Hca2"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := (&Dialer{Logger: quiet}).Dial(ctx, s.addr, name, 1)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		l, err := ib.New(p)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := verbs.Open(l, &verbs.Options{Name: fmt.Sprintf("ib%d", i), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		e := &rcEnd{dev: dev}
		if e.pd, err = dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if e.cq, err = dev.CreateCQ(256, nil); err != nil {
			t.Fatal(err)
		}
		if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		if e.mr, err = e.pd.RegMR(make([]byte, 128<<10), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		ends[i] = e
	}
	sm := newSM(t, s.f, "Hca3", 1)
	sm.sweep()
	for _, e := range ends {
		waitFor(t, "the device's port ACTIVE", func() bool {
			pa, err := e.dev.QueryPort(1)
			return err == nil && pa.State == verbs.PortActive && pa.LID != 0
		})
		pa, _ := e.dev.QueryPort(1)
		e.lid = pa.LID
	}
	for i, e := range ends {
		peer := ends[1-i]
		for _, st := range []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
				verbs.AttrState | verbs.AttrPort | verbs.AttrPKeyIndex | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{DLID: peer.lid, PortNum: 1}, PathMTU: verbs.MTU2048,
				DestQPN: peer.qp.QPN(), RQPSN: 1, MaxDestRdAtomic: 4, MinRNRTimer: 1},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
					verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt |
					verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		} {
			if err := e.qp.Modify(&st.attr, st.mask); err != nil {
				t.Fatalf("modify to %v: %v", st.attr.State, err)
			}
		}
	}
	return ends[0], ends[1]
}

// TestVerbsRC: two softrdma devices, each on a remote HCA port behind a
// different switch of the served fabric, run RC SEND, RDMA WRITE and RDMA
// READ by LID: the engine over link/ib over this package.
func TestVerbsRC(t *testing.T) {
	s := serve(t, Config{})
	a, b := rcPair(t, s)
	const n = 10000 // five 2 KiB packets
	for i := range n {
		a.mr.Buf()[i] = byte(i * 7)
	}
	// SEND a -> b.
	if err := b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, n)}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, n)}}}); err != nil {
		t.Fatal(err)
	}
	a.wait(t, "SEND completion")
	if wc := b.wait(t, "receive completion"); wc.ByteLen != n || !bytes.Equal(b.mr.Buf()[:n], a.mr.Buf()[:n]) {
		t.Fatalf("SEND: %d bytes, data equal %v", wc.ByteLen, bytes.Equal(b.mr.Buf()[:n], a.mr.Buf()[:n]))
	}
	// WRITE a -> b at offset 20000.
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	a.wait(t, "WRITE completion")
	syncEnds(t, a, b)
	if !bytes.Equal(b.mr.Buf()[20000:20000+n], a.mr.Buf()[:n]) {
		t.Fatal("WRITE: data differs")
	}
	// READ b's offset 20000 into a's offset 40000.
	if err := a.qp.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(40000, n)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	a.wait(t, "READ completion")
	if !bytes.Equal(a.mr.Buf()[40000:40000+n], a.mr.Buf()[:n]) {
		t.Fatal("READ: data differs")
	}
	if st := s.f.DataStats(); st.Delivered == 0 || st.Malformed != 0 {
		t.Errorf("fabric data stats %+v", st)
	}
}

// TestVerbsBidirectional: both devices stream RDMA WRITEs at each other at
// once (100 of 32 KiB each way, over a unix socket), each answering the
// other's (ACKs) from its port's receive function.
func TestVerbsBidirectional(t *testing.T) {
	// A unix socket's buffers are small and fixed: they fill first.
	s := serve(t, Config{Network: "unix", Addr: filepath.Join(t.TempDir(), "fabric.sock")})
	a, b := rcPair(t, s)
	const n, size = 100, 32768
	for i := range size {
		a.mr.Buf()[i], b.mr.Buf()[i] = byte(i), byte(i*3+1)
	}
	for i := range n {
		for _, x := range [][2]*rcEnd{{a, b}, {b, a}} {
			if err := x[0].qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{x[0].mr.SGE(0, size)}, RemoteAddr: x[1].mr.Addr() + size, RKey: x[1].mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range n {
		a.wait(t, "Hca1's WRITE")
		b.wait(t, "Hca2's WRITE")
	}
	syncEnds(t, a, b)
	syncEnds(t, b, a)
	if !bytes.Equal(a.mr.Buf()[size:2*size], b.mr.Buf()[:size]) || !bytes.Equal(b.mr.Buf()[size:2*size], a.mr.Buf()[:size]) {
		t.Fatal("data differs")
	}
}
