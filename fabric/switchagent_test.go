package fabric

import (
	"testing"

	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// mgmtPkt builds a UD SEND_ONLY carrying m from QP srcQP to QP destQP
// (QP0 on VL15, anything else on VL 0) with Q_Key qkey.
func mgmtPkt(t testing.TB, slid, dlid uint16, destQP, srcQP wire.QPN, qkey wire.QKey, m []byte) []byte {
	t.Helper()
	v := uint8(0)
	if destQP == 0 {
		v = wire.VL15
	}
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: destQP},
		DETH: wire.DETHFields{QKey: qkey, SrcQP: srcQP}}
	b := make([]byte, wire.IBPacketLen(wire.UDSendOnly, len(m), false))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{VL: v, DLID: dlid, SLID: slid}}, &h, m); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSwitchAgentsOnDataPlane: an HCA's SMP to a switch's LID (QP0,
// VL15) and its PerfMgt MAD (QP1, GSI Q_Key, a data VL) reach the
// switch's SMA and PMA through the data plane, as on a real switch, and
// the answers come back by the LFTs to the requester's LID and QP; what
// is not a request for them (a wrong Q_Key, a response) is still dropped
// as ToSwitch.
func TestSwitchAgentsOnDataPlane(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca3")
	h := dn.hcas["Hca3"] // behind Switch1: the requests cross to Switch2
	sw2 := dn.switchLID("Switch2")
	answer := func(what string, wantVL uint8, wantQP wire.QPN) mad.MAD {
		t.Helper()
		b := h.expect(t, 1)[0]
		p, err := wire.ParseIB(b)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		lrh, tr := p.LRH(), p.Transport()
		if lrh.SLID() != sw2 || lrh.DLID() != h.lid || lrh.VL() != wantVL || tr.BTH().Opcode() != wire.UDSendOnly ||
			tr.BTH().DestQP() != wantQP || tr.DETH().SrcQP() != wantQP || len(tr.Payload()) != mad.Size {
			t.Fatalf("%s: answer from LID %d to %d on VL %d, %v to QP %d from QP %d, %d bytes",
				what, lrh.SLID(), lrh.DLID(), lrh.VL(), tr.BTH().Opcode(), tr.BTH().DestQP(), tr.DETH().SrcQP(), len(tr.Payload()))
		}
		m := mad.MAD(tr.Payload())
		if m.Method() != mad.MethodGetResp {
			t.Fatalf("%s: method %v", what, m.Method())
		}
		return m
	}

	// SMA: NodeInfo of Switch2.
	b := make([]byte, mad.Size)
	if _, err := mad.NewLIDRoutedSMP(b, mad.MethodGet, mad.SMAttrNodeInfo, 0, 0x1234); err != nil {
		t.Fatal(err)
	}
	h.send(t, mgmtPkt(t, h.lid, sw2, 0, 0, 0, b))
	m := answer("NodeInfo", wire.VL15, 0)
	ni, err := mad.ParseNodeInfo(mad.SMP(m).Data())
	if err != nil || m.Status() != 0 || m.TransactionID() != 0x1234 || ni.NodeGUID != dn.f.NodeByName("Switch2").GUID() || ni.NodeType != mad.NodeTypeSwitch {
		t.Fatalf("NodeInfo answer: status %#x TID %#x %+v, %v", m.Status(), m.TransactionID(), ni, err)
	}

	// PMA: PortCounters of Switch2's port 3 (toward Switch1).
	b = make([]byte, mad.Size)
	pm := mad.MAD(b)
	b[0], b[2] = mad.BaseVersion, 1
	pm.SetMgmtClass(mad.ClassPerf)
	pm.SetMethod(mad.MethodGet)
	pm.SetTransactionID(0x5678)
	pm.SetAttributeID(mad.PerfAttrPortCounters)
	b[mad.PerfDataOffset+1] = 3
	before := dn.cnt("Switch2", 3)
	h.send(t, mgmtPkt(t, h.lid, sw2, 1, 1, mad.GSIQKey, b))
	m = answer("PortCounters", 0, 1)
	pc, err := mad.ParsePortCounters(m[mad.PerfDataOffset:])
	if err != nil || m.Status() != 0 || pc.PortSelect != 3 || uint64(pc.PortRcvPkts) != before.rcvPkts+1 {
		// The test SM routes Switch1 -> Switch2 by port 3: this MAD came
		// in there, and is counted before the PMA reads the counters.
		t.Fatalf("PortCounters answer: status %#x %+v (port 3 had received %d), %v", m.Status(), pc, before.rcvPkts, err)
	}

	// A method the agents do not serve is answered with its status.
	b = make([]byte, mad.Size)
	if _, err := mad.NewLIDRoutedSMP(b, mad.MethodSend, mad.SMAttrNodeInfo, 0, 1); err != nil {
		t.Fatal(err)
	}
	h.send(t, mgmtPkt(t, h.lid, sw2, 0, 0, 0, b))
	if m := answer("Send", wire.VL15, 0); m.Status() != mad.StatusMethodUnsupported {
		t.Errorf("a Send to the SMA: status %#x", m.Status())
	}
	if st := dn.f.DataStats(); st.SwitchAgents != 3 || st.ToSwitch != 0 {
		t.Errorf("after three requests: %+v", st)
	}

	// Not for the agents: a PerfMgt MAD with another Q_Key, an SMP
	// response, a packet to another QP.
	bad := mgmtPkt(t, h.lid, sw2, 1, 1, 0x1111, pm)
	resp := append([]byte(nil), b...)
	mad.MAD(resp).SetMethod(mad.MethodGetResp)
	h.send(t, bad, mgmtPkt(t, h.lid, sw2, 0, 0, 0, resp), mgmtPkt(t, h.lid, sw2, 5, 1, mad.GSIQKey, pm))
	waitFor(t, "three drops", func() bool { return dn.f.DataStats().ToSwitch == 3 })
	h.quiet(t)
	if st := dn.f.DataStats(); st.SwitchAgents != 3 {
		t.Errorf("agents answered what is not theirs: %+v", st)
	}
}
