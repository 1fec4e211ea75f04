package fabric

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// This file's test runs softrdma verbs devices on the fabric's HCAs: it
// imports verbs (a package of the same layer) in a test only, which the
// layering allows (internal/archtest checks the packages' own imports).

// e2eHCA is a verbs device on a CA port of the fabric.
type e2eHCA struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	lid uint16
}

func openE2E(t testing.TB, dn *dataNet, name string) *e2eHCA {
	t.Helper()
	n := dn.f.NodeByName(name)
	p, err := dn.f.ConnectHCA(n, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ib.New(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "fab-" + name})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	h := &e2eHCA{dev: d, lid: dn.sn.caPorts[n.PortGUID(1)].lid}
	if h.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = d.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	if h.mr, err = h.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, name+"'s port ACTIVE with its LID", func() bool {
		pa, err := d.QueryPort(1)
		return err == nil && pa.State == verbs.PortActive && pa.LID == h.lid
	})
	return h
}

func (h *e2eHCA) qp(t testing.TB, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// connect takes qp (RC or UC) to RTS toward remote QPN rqpn at LID dlid.
func connectE2E(t testing.TB, qp *verbs.QP, rqpn wire.QPN, dlid uint16, sl uint8) {
	connectMTU(t, qp, rqpn, dlid, sl, verbs.MTU1024)
}

// connectMTU is connectE2E with a path MTU.
func connectMTU(t testing.TB, qp *verbs.QP, rqpn wire.QPN, dlid uint16, sl uint8, mtu verbs.MTU) {
	t.Helper()
	access := verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: access},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: mtu, DestQPN: rqpn, RQPSN: 100,
			AH: verbs.AHAttr{DLID: dlid, SL: sl, PortNum: 1}, MaxDestRdAtomic: 4, MinRNRTimer: 1},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.AttrState | verbs.AttrSQPSN},
	}
	for i, s := range steps {
		m := s.mask
		if qp.Type() == verbs.RC {
			switch i {
			case 1:
				m |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
			case 2:
				m |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
			}
		}
		if err := qp.Modify(&s.attr, m); err != nil {
			t.Fatalf("%v to %v: %v", qp.Type(), s.attr.State, err)
		}
	}
}

// poll waits for one completion on h's CQ and checks it succeeded.
func (h *e2eHCA) poll(t testing.TB, what string) verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(20 * time.Second)
	for h.cq.Poll(wcs) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no completion", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if wcs[0].Status != verbs.Success {
		t.Fatalf("%s: %v", what, wcs[0].Status)
	}
	return wcs[0]
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestVerbsOverFabric: two softrdma verbs devices on HCAs behind different
// switches (Hca1 on Switch1 and Hca2 on Switch2 of net.2sw2path4hca; Hca1
// and Hca32 of the fat tree, leaf to spine to leaf), the subnet swept by
// the test SM, run RC WRITE, SEND and READ, UC WRITE and SEND, and UD SEND
// by LID, at a 1024-byte path MTU so that messages take several packets;
// every byte arrives, and the fabric drops nothing.
func TestVerbsOverFabric(t *testing.T) {
	for _, c := range []struct{ name, topo, a, b string }{
		{"2sw2path4hca", readFile(t, "testdata/net.2sw2path4hca"), "Hca1", "Hca2"},
		{"fattree", fatTree(4, 4, 8), "Hca1", "Hca32"},
	} {
		t.Run(c.name, func(t *testing.T) { verbsOverFabric(t, c.topo, c.a, c.b) })
	}
}

func verbsOverFabric(t *testing.T, topo, nameA, nameB string) {
	dn := sweepData(t, topo)
	a, b := openE2E(t, dn, nameA), openE2E(t, dn, nameB)
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			qa, qb := a.qp(t, typ), b.qp(t, typ)
			connectE2E(t, qa, qb.QPN(), b.lid, 1)
			connectE2E(t, qb, qa.QPN(), a.lid, 1)
			// WRITE 20,000 bytes: 20 packets through two switches.
			src, dst := a.mr.Buf()[:20000], b.mr.Buf()[:20000]
			fill(src, byte(typ))
			clear(dst)
			if err := qa.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(0, len(src))}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
			a.poll(t, "WRITE")
			// RC completes a WRITE once acknowledged; UC at once, and
			// the SEND behind it (same path, same VL) arriving says the
			// WRITE did.
			if typ == verbs.RC && !bytes.Equal(src, dst) {
				t.Fatal("WRITE: data differs")
			}
			// SEND 5,000 bytes into a posted receive.
			if err := qb.PostRecv([]verbs.RecvWR{{ID: 2, SGL: []verbs.SGE{b.mr.SGE(30000, 8000)}}}); err != nil {
				t.Fatal(err)
			}
			fill(a.mr.Buf()[20000:25000], 0x40)
			if err := qa.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(20000, 5000)}}}); err != nil {
				t.Fatal(err)
			}
			a.poll(t, "SEND")
			if wc := b.poll(t, "SEND's receive"); wc.ByteLen != 5000 {
				t.Fatalf("received %d bytes", wc.ByteLen)
			}
			if !bytes.Equal(b.mr.Buf()[30000:35000], a.mr.Buf()[20000:25000]) {
				t.Fatal("SEND: data differs")
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("WRITE: data differs")
			}
			if typ == verbs.UC {
				return
			}
			// READ 12,000 bytes of Hca2's memory back.
			fill(b.mr.Buf()[40000:52000], 0x99)
			if err := qa.PostSend([]verbs.SendWR{{ID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(40000, 12000)}, RemoteAddr: b.mr.Addr() + 40000, RKey: b.mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
			a.poll(t, "READ")
			if !bytes.Equal(a.mr.Buf()[40000:52000], b.mr.Buf()[40000:52000]) {
				t.Fatal("READ: data differs")
			}
		})
	}
	t.Run("UD", func(t *testing.T) {
		qa, qb := a.qp(t, verbs.UD), b.qp(t, verbs.UD)
		for _, qp := range []*verbs.QP{qa, qb} {
			for _, s := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
				mask := verbs.AttrState
				switch s {
				case verbs.StateInit:
					mask |= verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
				case verbs.StateRTS:
					mask |= verbs.AttrSQPSN
				}
				if err := qp.Modify(&verbs.QPAttr{State: s, PortNum: 1, QKey: 0x1111}, mask); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := qb.PostRecv([]verbs.RecvWR{{ID: 5, SGL: []verbs.SGE{b.mr.SGE(60000, 1100)}}}); err != nil {
			t.Fatal(err)
		}
		ah, err := a.pd.CreateAH(verbs.AHAttr{DLID: b.lid, SL: 2, PortNum: 1})
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte(fmt.Sprintf("UD by LID %d through the switches", b.lid))
		copy(a.mr.Buf()[59000:], msg)
		if err := qa.PostSend([]verbs.SendWR{{ID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(59000, len(msg))}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x1111}}); err != nil {
			t.Fatal(err)
		}
		a.poll(t, "UD SEND")
		wc := b.poll(t, "UD receive")
		// The first 40 bytes of a UD receive are the GRH's room.
		if wc.SLID != a.lid || wc.SL != 2 || !bytes.Equal(b.mr.Buf()[60040:60040+len(msg)], msg) {
			t.Fatalf("UD: from LID %d SL %d: %q", wc.SLID, wc.SL, b.mr.Buf()[60040:60040+len(msg)])
		}
	})
	st := dn.f.DataStats()
	if st.Delivered == 0 || st.Malformed+st.BadVL15+st.NoRoute+st.ToSwitch+st.Inactive+st.BadSL+st.PKey+st.NoHCA != 0 {
		t.Errorf("fabric: %+v", st)
	}
	t.Logf("fabric: %+v", st)
}

// TestVerbsBidirectional: two RC QPs stream WRITEs at each other at once
// (120 messages of 32 KiB, 32 packets each, with their acknowledgements
// coming back through the same lanes): the credit loops through the HCAs
// do not deadlock, every message completes and the data is there.
func TestVerbsBidirectional(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"))
	a, b := openE2E(t, dn, "Hca1"), openE2E(t, dn, "Hca2")
	qa, qb := a.qp(t, verbs.RC), b.qp(t, verbs.RC)
	connectE2E(t, qa, qb.QPN(), b.lid, 0)
	connectE2E(t, qb, qa.QPN(), a.lid, 0)
	const n, size = 60, 32768
	fill(a.mr.Buf()[:size], 1)
	fill(b.mr.Buf()[:size], 2)
	for i := range n {
		for _, x := range []struct {
			h, r *e2eHCA
			q    *verbs.QP
		}{{a, b, qa}, {b, a, qb}} {
			if err := x.q.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{x.h.mr.SGE(0, size)}, RemoteAddr: x.r.mr.Addr() + size, RKey: x.r.mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range n {
		a.poll(t, "Hca1's WRITE")
		b.poll(t, "Hca2's WRITE")
	}
	if !bytes.Equal(a.mr.Buf()[size:2*size], b.mr.Buf()[:size]) || !bytes.Equal(b.mr.Buf()[size:2*size], a.mr.Buf()[:size]) {
		t.Fatal("data differs")
	}
	st := dn.f.DataStats()
	if st.Injected < 2*n*size/1024 || st.Delivered != st.Injected {
		t.Errorf("fabric: %+v", st)
	}
}

// BenchmarkVerbsRCWrite64K: RC WRITEs of 64 KiB at a 4096-byte path MTU
// from a verbs device on Hca1 to one on Hca2 of net.2sw2path4hca (two
// switches between them), 16 in flight; bytes/s is the goodput.
func BenchmarkVerbsRCWrite64K(b *testing.B) {
	dn := sweepData(b, readFile(b, "testdata/net.2sw2path4hca"))
	x, y := openE2E(b, dn, "Hca1"), openE2E(b, dn, "Hca2")
	qx, qy := x.qp(b, verbs.RC), y.qp(b, verbs.RC)
	connectMTU(b, qx, qy.QPN(), y.lid, 0, verbs.MTU4096)
	connectMTU(b, qy, qx.QPN(), x.lid, 0, verbs.MTU4096)
	const size, depth = 65536, 16
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{x.mr.SGE(0, size)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	b.SetBytes(size)
	b.ResetTimer()
	inflight := 0
	for i := range b.N {
		for inflight >= depth {
			x.poll(b, "WRITE")
			inflight--
		}
		wr[0].ID = uint64(i)
		if err := qx.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		x.poll(b, "WRITE")
	}
}
