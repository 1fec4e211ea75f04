package sa

import (
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

// mftSource is a fixedSource that also offers programmed MFT blocks and
// an SMInfo.
type mftSource struct {
	fixedSource
	mft  map[uint64]map[int][]uint16
	info mad.SMInfo
}

func (m *mftSource) MulticastFT(g uint64) map[int][]uint16 { return m.mft[g] }
func (m *mftSource) SMInfo() mad.SMInfo                    { return m.info }

func TestTableRecords(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 0)
	s.SMKey = 0x55
	sw := switches(s)[0]
	hca := caPorts(s)[0]
	// Tables as the SM would have read or programmed them.
	vl := mad.SLToVLTable{VL: [16]uint8{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}}
	hca.SL2VL = []mad.SLToVLTable{vl}
	for _, p := range sw.Ports {
		p.SL2VL = make([]mad.SLToVLTable, len(sw.Ports))
		for in := range p.SL2VL {
			p.SL2VL[in] = vl
			p.SL2VL[in].VL[15] = uint8(in % 4)
		}
	}
	arb := mad.VLArbTable{}
	arb.Entry[0] = mad.VLArbEntry{VL: 1, Weight: 64}
	hca.VLArb = map[int]mad.VLArbTable{1: arb, 2: {}, 3: arb, 4: {}}
	hca.PKeys = []uint16{0xffff, 0x8001}
	hca.Info.GUIDCap = 16
	src := &mftSource{fixedSource: fixedSource{s: s}, info: mad.SMInfo{GUID: 0x77, SMKey: 0x55, ActCount: 9, Priority: 3, SMState: mad.SMStateMaster},
		mft: map[uint64]map[int][]uint16{sw.Info.NodeGUID: {1: make([]uint16, 32)}}}
	src.mft[sw.Info.NodeGUID][1][5] = 0x0006
	tr := newMemTransport(1, 0)
	srv, err := New(src, tr, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := newClient(t, srv, tr, hca.LID())

	// SL to VL: the CA's one table, then the switch's 9 x 9 by output port.
	st, b := c.get(mad.MethodGet, mad.SAAttrSLToVLRecord, mad.SLToVLRecCompLID, enc(&mad.SLToVLRecord{LID: hca.LID()}, mad.SLToVLRecordSize))
	if r, _ := mad.ParseSLToVLRecord(b); st != mad.StatusOK || r.Table != vl || r.InPort != 0 || r.OutPort != 0 {
		t.Errorf("SLtoVL of the CA: %s %+v", mad.SAStatusName(st), r)
	}
	swLID := sw.Ports[0].LID()
	st, recs := c.getTable(mad.SAAttrSLToVLRecord, mad.SLToVLRecCompLID, enc(&mad.SLToVLRecord{LID: swLID}, mad.SLToVLRecordSize))
	if n := len(sw.Ports); st != mad.StatusOK || len(recs) != n*n {
		t.Fatalf("SLtoVL of the switch: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	if r, _ := mad.ParseSLToVLRecord(recs[len(sw.Ports)+2]); r.OutPort != 1 || r.InPort != 2 || r.Table.VL[15] != 2 {
		t.Errorf("SLtoVL order: record %d is %+v", len(sw.Ports)+2, r)
	}
	st, b = c.get(mad.MethodGet, mad.SAAttrSLToVLRecord, mad.SLToVLRecCompLID|mad.SLToVLRecCompInPort|mad.SLToVLRecCompOutPort,
		enc(&mad.SLToVLRecord{LID: swLID, InPort: 3, OutPort: 5}, mad.SLToVLRecordSize))
	if r, _ := mad.ParseSLToVLRecord(b); st != mad.StatusOK || r.InPort != 3 || r.OutPort != 5 || r.Table.VL[15] != 3 {
		t.Errorf("SLtoVL 3->5: %s %+v", mad.SAStatusName(st), r)
	}

	// VL arbitration: four blocks of the CA's port, one by block.
	st, recs = c.getTable(mad.SAAttrVLArbTableRecord, mad.VLArbRecCompLID, enc(&mad.VLArbRecord{LID: hca.LID()}, mad.VLArbRecordSize))
	if st != mad.StatusOK || len(recs) != 4 {
		t.Errorf("VLArb of the CA: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	st, b = c.get(mad.MethodGet, mad.SAAttrVLArbTableRecord, mad.VLArbRecCompLID|mad.VLArbRecCompBlock,
		enc(&mad.VLArbRecord{LID: hca.LID(), Block: 3}, mad.VLArbRecordSize))
	if r, _ := mad.ParseVLArbRecord(b); st != mad.StatusOK || r.Table != arb || r.OutPort != uint8(hca.Num) {
		t.Errorf("VLArb block 3: %s %+v", mad.SAStatusName(st), r)
	}
	if st, _ := c.getTable(mad.SAAttrVLArbTableRecord, mad.VLArbRecCompLID, enc(&mad.VLArbRecord{LID: swLID}, mad.VLArbRecordSize)); st != mad.StatusOK {
		t.Errorf("VLArb of a switch the SM never read: %s", mad.SAStatusName(st))
	}

	// P_Keys: only for a trusted requester; PartitionCap 16 is one block.
	q := enc(&mad.PKeyTableRecord{LID: hca.LID()}, mad.PKeyTableRecordSize)
	if st, _ := c.getTable(mad.SAAttrPKeyTableRecord, mad.PKeyTableRecCompLID, q); st != mad.SAStatusReqInvalid {
		t.Errorf("P_KeyTableRecord untrusted: %s", mad.SAStatusName(st))
	}
	c.smKey = 0x55
	st, recs = c.getTable(mad.SAAttrPKeyTableRecord, mad.PKeyTableRecCompLID, q)
	if r, _ := mad.ParsePKeyTableRecord(recs[0]); st != mad.StatusOK || len(recs) != 1 || r.Table.PKey[0] != 0xffff || r.Table.PKey[1] != 0x8001 || r.Port != uint8(hca.Num) {
		t.Errorf("P_KeyTableRecord: %s, %d records, %+v", mad.SAStatusName(st), len(recs), r)
	}

	// SMInfo: the key only to the trusted.
	st, b = c.get(mad.MethodGet, mad.SAAttrSMInfoRecord, 0, nil)
	if r, _ := mad.ParseSMInfoRecord(b); st != mad.StatusOK || r.Info != src.info || r.LID != s.SMLID {
		t.Errorf("SMInfoRecord trusted: %s %+v", mad.SAStatusName(st), r)
	}
	c.smKey = 0
	st, b = c.get(mad.MethodGet, mad.SAAttrSMInfoRecord, mad.SMInfoRecCompSMKey, enc(&mad.SMInfoRecord{Info: mad.SMInfo{SMKey: 0x55}}, mad.SMInfoRecordSize))
	if r, _ := mad.ParseSMInfoRecord(b); st != mad.StatusOK || r.Info.SMKey != 0 || r.Info.ActCount != 9 {
		t.Errorf("SMInfoRecord untrusted: %s %+v", mad.SAStatusName(st), r)
	}

	// LFT: every block up to LinearFDBTop, the LIDs past it unrouted.
	st, recs = c.getTable(mad.SAAttrLinearFTRecord, mad.LinearFTRecCompLID, enc(&mad.LinearFTRecord{LID: swLID}, mad.LinearFTRecordSize))
	if st != mad.StatusOK || len(recs) != (len(sw.LFT)+63)/64 {
		t.Fatalf("LFT: %s, %d records for %d LIDs", mad.SAStatusName(st), len(recs), len(sw.LFT))
	}
	r, _ := mad.ParseLinearFTRecord(recs[0])
	for lid, port := range sw.LFT {
		if r.Table.Port[lid] != port {
			t.Errorf("LFT LID %d: port %d, want %d", lid, r.Table.Port[lid], port)
		}
	}
	if len(sw.LFT) < 64 && r.Table.Port[len(sw.LFT)] != mad.LinearFTNoRoute {
		t.Error("an LFT entry past LinearFDBTop is routed")
	}

	if st, recs := c.getTable(mad.SAAttrLinearFTRecord, mad.LinearFTRecCompLID|mad.LinearFTRecCompBlock,
		enc(&mad.LinearFTRecord{LID: swLID, Block: 9}, mad.LinearFTRecordSize)); st != mad.StatusOK || len(recs) != 0 {
		t.Errorf("LFT block 9: %s, %d records", mad.SAStatusName(st), len(recs))
	}

	// MFT: blocks 0 and 1 (the highest in use) of the one position.
	st, recs = c.getTable(mad.SAAttrMulticastFTRecord, 0, nil)
	if st != mad.StatusOK || len(recs) != 2 {
		t.Fatalf("MFT: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	st, b = c.get(mad.MethodGet, mad.SAAttrMulticastFTRecord, mad.MulticastFTRecCompLID|mad.MulticastFTRecCompBlock|mad.MulticastFTRecCompPosition,
		enc(&mad.MulticastFTRecord{LID: swLID, Block: 1}, mad.MulticastFTRecordSize))
	if m, _ := mad.ParseMulticastFTRecord(b); st != mad.StatusOK || m.Table.PortMask[5] != 6 || m.Block != 1 {
		t.Errorf("MFT block 1: %s %+v", mad.SAStatusName(st), m)
	}

	// GUIDInfo: GUIDCap 16 is two blocks, the port GUID at index 0.
	st, recs = c.getTable(mad.SAAttrGUIDInfoRecord, mad.GUIDInfoRecCompLID, enc(&mad.GUIDInfoRecord{LID: hca.LID()}, mad.GUIDInfoRecordSize))
	if g, _ := mad.ParseGUIDInfoRecord(recs[0]); st != mad.StatusOK || len(recs) != 2 || g.Table.GUID[0] != hca.GUID || g.Table.GUID[1] != 0 {
		t.Errorf("GUIDInfo: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	st, recs = c.getTable(mad.SAAttrGUIDInfoRecord, 0, nil)
	if want := len(caPorts(s)) + len(switches(s)) + 1; st != mad.StatusOK || len(recs) != want {
		t.Errorf("GUIDInfo table: %s, %d records, want %d", mad.SAStatusName(st), len(recs), want)
	}
}
