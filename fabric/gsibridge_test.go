package fabric

import (
	"bytes"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric/vl"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// gsiMAD returns a GMP of class with method and TID (attribute 0x35, the
// PathRecord's, for the SA class).
func gsiMAD(class mad.Class, method mad.Method, tid uint64) []byte {
	b := make([]byte, mad.Size)
	m := mad.MAD(b)
	b[0], b[2] = mad.BaseVersion, 2
	m.SetMgmtClass(class)
	m.SetMethod(method)
	m.SetTransactionID(tid)
	m.SetAttributeID(0x35)
	b[100] = byte(tid) // a payload byte to recognise
	return b
}

// gsiPkt builds a UD SEND_ONLY carrying m from QP srcQP to QP1, on VL 0,
// with a GRH if g is set.
func gsiPkt(t testing.TB, slid, dlid uint16, srcQP wire.QPN, qkey wire.QKey, g *wire.GRHFields, m []byte) []byte {
	t.Helper()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: 1},
		DETH: wire.DETHFields{QKey: qkey, SrcQP: srcQP}}
	b := make([]byte, wire.IBPacketLen(wire.UDSendOnly, len(m), g != nil))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{DLID: dlid, SLID: slid}, GRH: g}, &h, m); err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitClient returns the next datagram the test SM's client gets that is
// not a trap.
func (sm *testSM) awaitClient(t testing.TB) *Datagram {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-sm.ch:
			if mad.MAD(d.MAD).Method() == mad.MethodTrap {
				sm.traps = append(sm.traps, d)
				continue
			}
			return d
		case <-timer.C:
			t.Fatal("nothing reached the client")
			return nil
		}
	}
}

// TestClientsOnDataPlane: GSI MADs an HCA sends on the data plane to the
// LID of a CA port with a management client attached and no HCA (the SM's
// port, where its SA answers) reach the client with their addressing (the
// requester's LID and QP, P_Key, Q_Key); the client's answers (a GetResp,
// several segments of one TID) go back on the data plane to that LID and
// QP, with the request's GRH reversed; a MAD with a bad Q_Key is dropped
// and counted; a client's request to an HCA's LID goes onto the data
// plane, and the HCA's response comes back to that client; a PerfMgt
// request from the client is still answered by the fabric's PMA.
func TestClientsOnDataPlane(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca3", "Hca2")
	h := dn.hcas["Hca3"]
	smLID := dn.sm.lid
	pfx := uint64(0xfe80000000000000)
	gidOf := func(guid uint64) wire.GID {
		var g wire.GID
		for i := range 8 {
			g[i] = byte(pfx >> (56 - 8*i))
			g[8+i] = byte(guid >> (56 - 8*i))
		}
		return g
	}
	grh := &wire.GRHFields{TClass: 0x20, FlowLabel: 0x12345, HopLmt: 1,
		SGID: gidOf(h.node.PortGUID(1)), DGID: gidOf(dn.f.NodeByName("Hca1").PortGUID(1))}

	// Two requests, one local and one with a GRH, from QP 7 (an SA client
	// may use any QP).
	h.send(t, gsiPkt(t, h.lid, smLID, 7, mad.GSIQKey, nil, gsiMAD(mad.ClassSubnAdm, mad.MethodGet, 0x11)))
	h.send(t, gsiPkt(t, h.lid, smLID, 7, mad.GSIQKey, grh, gsiMAD(mad.ClassSubnAdm, mad.MethodGetTable, 0x22)))
	var reqs []*Datagram
	for range 2 {
		reqs = append(reqs, dn.sm.awaitClient(t))
	}
	for i, d := range reqs {
		m := mad.MAD(d.MAD)
		if d.SLID != h.lid || d.DLID != smLID || d.SQP != 7 || d.DQP != 1 || d.PKey != 0xFFFF || d.QKey != mad.GSIQKey ||
			m.MgmtClass() != mad.ClassSubnAdm || d.MAD[100] != byte(m.TransactionID()) {
			t.Fatalf("request %d at the client: %+v %v", i, d, m.Fields())
		}
	}

	// The answers: one GetResp to the first, two segments to the second.
	answer := func(req *Datagram, method mad.Method, mark byte) {
		r := &Datagram{SLID: req.DLID, DLID: req.SLID, SQP: 1, DQP: req.SQP, SL: req.SL, PKey: req.PKey, QKey: req.QKey,
			MAD: append([]byte(nil), req.MAD...)}
		mad.MAD(r.MAD).SetMethod(method)
		r.MAD[101] = mark
		if err := dn.sm.c.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	answer(reqs[0], mad.MethodGetResp, 1)
	answer(reqs[1], mad.MethodGetTableResp, 1)
	answer(reqs[1], mad.MethodGetTableResp, 2)
	got := h.expect(t, 3)
	for i, b := range got {
		p, err := wire.ParseIB(b)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		lrh, tr := p.LRH(), p.Transport()
		m := mad.MAD(tr.Payload())
		if lrh.SLID() != smLID || lrh.DLID() != h.lid || tr.BTH().DestQP() != 7 || tr.DETH().SrcQP() != 1 ||
			tr.DETH().QKey() != mad.GSIQKey || tr.BTH().PKey() != 0xFFFF || len(m) != mad.Size || !wire.VerifyVCRC(b) {
			t.Fatalf("answer %d: LID %d->%d QP %d->%d Q_Key %#x", i, lrh.SLID(), lrh.DLID(), tr.DETH().SrcQP(),
				tr.BTH().DestQP(), tr.DETH().QKey())
		}
		g := p.GRH()
		switch m.TransactionID() {
		case 0x11:
			if g != nil || m.Method() != mad.MethodGetResp {
				t.Errorf("answer to the local request: GRH %v, method %v", g != nil, m.Method())
			}
		case 0x22:
			if g == nil || g.SGID() != grh.DGID || g.DGID() != grh.SGID || g.TClass() != grh.TClass ||
				g.FlowLabel() != grh.FlowLabel || m.Method() != mad.MethodGetTableResp {
				t.Errorf("answer to the global request: GRH %v, method %v", g, m.Method())
			}
		default:
			t.Errorf("answer %d: TID %#x", i, m.TransactionID())
		}
	}
	st := dn.f.DataStats()
	if st.ToClients != 2 || st.FromClients != 3 || st.ClientDrops != 0 {
		t.Errorf("after 2 requests and 3 answers: %+v", st)
	}

	// A bad Q_Key: dropped, counted, and the Hca1 port's Q_Key violations.
	h.send(t, gsiPkt(t, h.lid, smLID, 7, 0x1234, nil, gsiMAD(mad.ClassSubnAdm, mad.MethodGet, 0x33)))
	waitFor(t, "the bad Q_Key counted", func() bool { return dn.f.DataStats().ClientDrops == 1 })
	dn.f.mu.Lock()
	qv := dn.f.NodeByName("Hca1").port(1).pi.QKeyViolations
	dn.f.mu.Unlock()
	if qv != 1 {
		t.Errorf("Q_Key violations at the SM's port: %d", qv)
	}

	// The client's own request to an HCA's GSI (a CM MAD to Hca2) leaves
	// on the data plane; the HCA's response comes back to the client.
	h2 := dn.hcas["Hca2"]
	req := &Datagram{DLID: h2.lid, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: gsiMAD(mad.ClassCM, mad.MethodSend, 0x44)}
	if err := dn.sm.c.Send(req); err != nil {
		t.Fatal(err)
	}
	b := h2.expect(t, 1)[0]
	p, err := wire.ParseIB(b)
	if err != nil || p.LRH().SLID() != smLID || p.Transport().DETH().SrcQP() != 1 || mad.MAD(p.Transport().Payload()).TransactionID() != 0x44 {
		t.Fatalf("the client's request at Hca2: %v", err)
	}
	resp := append([]byte(nil), p.Transport().Payload()...)
	mad.MAD(resp).SetMethod(mad.MethodGetResp)
	h2.send(t, gsiPkt(t, h2.lid, smLID, 1, mad.GSIQKey, nil, resp))
	if d := dn.sm.awaitClient(t); mad.MAD(d.MAD).TransactionID() != 0x44 || d.SLID != h2.lid || mad.MAD(d.MAD).Method() != mad.MethodGetResp {
		t.Fatalf("the response at the client: %+v", d)
	}

	// PerfMgt to an HCA's port: the fabric's PMA answers, on the
	// management plane.
	pm := gsiMAD(mad.ClassPerf, mad.MethodGet, 0x55)
	mad.MAD(pm).SetAttributeID(mad.PerfAttrPortCounters)
	clear(pm[mad.PerfDataOffset:])
	pm[mad.PerfDataOffset+1] = 1
	d := dn.sm.do(&Datagram{DLID: h2.lid, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: pm})
	if d.Status != 0 || mad.MAD(d.MAD).Method() != mad.MethodGetResp || mad.MAD(d.MAD).Status() != 0 {
		t.Fatalf("PortCounters of Hca2: %+v", d)
	}
	h2.quiet(t)
	h.quiet(t)
}

// TestClientsBesideHCA: at a CA port with both an HCA and a management
// client, the HCA keeps its GSI (a CM MAD reaches it), and SA MADs go to
// the client.
func TestClientsBesideHCA(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca3", "Hca1")
	h, h1 := dn.hcas["Hca3"], dn.hcas["Hca1"]
	smLID := dn.sm.lid
	h.send(t, gsiPkt(t, h.lid, smLID, 1, mad.GSIQKey, nil, gsiMAD(mad.ClassCM, mad.MethodSend, 0x66)))
	if b := h1.expect(t, 1)[0]; mad.MAD(b[wire.LRHLen+wire.BTHLen+wire.DETHLen:]).TransactionID() != 0x66 {
		t.Fatalf("the CM MAD at Hca1: %x", b[:40])
	}
	h.send(t, gsiPkt(t, h.lid, smLID, 1, mad.GSIQKey, nil, gsiMAD(mad.ClassSubnAdm, mad.MethodGet, 0x77)))
	if d := dn.sm.awaitClient(t); mad.MAD(d.MAD).TransactionID() != 0x77 {
		t.Fatalf("the SA MAD at the client: %+v", d)
	}
	h1.quiet(t)
}

// TestClientsSelfQuery: an HCA at the SM's port queries the SA at its own
// LID from its QP1: the request goes out and back through the switch to
// the client; the answer, also a SubnAdm MAD to QP1 of that port, reaches
// the HCA and not the client; the HCA's RMPP ACK of an SA transfer goes to
// the client (the SA is the transfer's sender).
func TestClientsSelfQuery(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1")
	h1 := dn.hcas["Hca1"]
	h1.send(t, gsiPkt(t, h1.lid, h1.lid, 1, mad.GSIQKey, nil, gsiMAD(mad.ClassSubnAdm, mad.MethodGetTable, 0x88)))
	d := dn.sm.awaitClient(t)
	if mad.MAD(d.MAD).TransactionID() != 0x88 || d.SLID != h1.lid || d.SQP != 1 {
		t.Fatalf("the SA MAD at the client: %+v", d)
	}
	r := &Datagram{SLID: d.DLID, DLID: d.SLID, SQP: 1, DQP: d.SQP, PKey: d.PKey, QKey: d.QKey, MAD: append([]byte(nil), d.MAD...)}
	mad.MAD(r.MAD).SetMethod(mad.MethodGetTableResp)
	r.MAD[mad.RMPPHeaderOffset], r.MAD[mad.RMPPHeaderOffset+1], r.MAD[mad.RMPPHeaderOffset+2] = 1, byte(mad.RMPPTypeData), mad.RMPPFlagActive|mad.RMPPFlagFirst
	if err := dn.sm.c.Send(r); err != nil {
		t.Fatal(err)
	}
	b := h1.expect(t, 1)[0]
	p, err := wire.ParseIB(b)
	if err != nil || p.Transport().BTH().DestQP() != 1 || mad.MAD(p.Transport().Payload()).Method() != mad.MethodGetTableResp {
		t.Fatalf("the answer at Hca1: %v", err)
	}
	ack := append([]byte(nil), p.Transport().Payload()...)
	ack[mad.RMPPHeaderOffset+1], ack[mad.RMPPHeaderOffset+2] = byte(mad.RMPPTypeAck), mad.RMPPFlagActive
	h1.send(t, gsiPkt(t, h1.lid, h1.lid, 1, mad.GSIQKey, nil, ack))
	if d := dn.sm.awaitClient(t); mad.MAD(d.MAD).TransactionID() != 0x88 || mad.MAD(d.MAD).Method() != mad.MethodGetTableResp {
		t.Fatalf("the ACK at the client: %+v", d)
	}
	h1.quiet(t)
	if st := dn.f.DataStats(); st.ToClients != 2 || st.FromClients != 1 || st.Delivered != 1 {
		t.Errorf("%+v", st)
	}
}

// FuzzClientIngress puts arbitrary packets on the SM's CA port (a
// management client, no HCA): nothing panics, and what reaches the client
// is one well-formed MAD to QP1 with the GSI Q_Key.
func FuzzClientIngress(f *testing.F) {
	dn := sweepData(f, readFile(f, "testdata/net.2sw2path4hca"), "Hca3")
	fab := dn.f
	h := dn.hcas["Hca3"]
	f.Add(uint8(0), gsiPkt(f, h.lid, dn.sm.lid, 7, mad.GSIQKey, nil, gsiMAD(mad.ClassSubnAdm, mad.MethodGet, 1)))
	g := &wire.GRHFields{HopLmt: 1}
	f.Add(uint8(0), gsiPkt(f, h.lid, dn.sm.lid, 1, mad.GSIQKey, g, gsiMAD(mad.ClassSubnAdm, mad.MethodGetTable, 2)))
	f.Add(uint8(0), gsiPkt(f, h.lid, dn.sm.lid, 1, 0x1234, nil, gsiMAD(mad.ClassCM, mad.MethodSend, 3)))
	f.Add(uint8(0), pkt(f, h.lid, dn.sm.lid, 0, 0, 0xFFFF, 1, 30))
	p := fab.NodeByName("Hca1").port(1)
	f.Fuzz(func(t *testing.T, v uint8, b []byte) {
		v &= 15
		good := frameOK(b) && wire.LRH(b).VL() == v
		var out []delivery
		fab.mu.Lock()
		fab.dp.arriveCA(p, nil, vl.Delivery{VL: v, Data: bytes.Clone(b)}, good, &out)
		fab.mu.Unlock()
		for _, d := range out {
			if len(d.d.MAD) != mad.Size || d.d.DQP != 1 || d.d.QKey != mad.GSIQKey {
				t.Fatalf("to the client: %+v", d.d)
			}
		}
	})
}
