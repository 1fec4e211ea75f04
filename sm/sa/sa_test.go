package sa

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func caPorts(s *sm.Subnet) []*sm.Port {
	var ps []*sm.Port
	for _, p := range endPorts(s) {
		if p.Node.Switch == nil && p.LID() != 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

func switches(s *sm.Subnet) []*sm.Node {
	var ns []*sm.Node
	for _, n := range s.Nodes {
		if n.Switch != nil {
			ns = append(ns, n)
		}
	}
	return ns
}

func TestNodeRecord(t *testing.T) {
	s := topoSubnet(t, "net", 0)
	_, _, c := newTestServer(t, s, Config{})
	st, recs := c.getTable(mad.SAAttrNodeRecord, 0, nil)
	if st != mad.StatusOK || len(recs) != len(caPorts(s))+len(switches(s)) {
		t.Fatalf("GetTable NodeRecord: status %s, %d records", mad.SAStatusName(st), len(recs))
	}
	seen := map[uint16]bool{}
	for _, b := range recs {
		r, err := mad.ParseNodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		p := s.PortByLID(r.LID)
		if p == nil || seen[r.LID] {
			t.Fatalf("record for LID %d: port %v, seen %v", r.LID, p, seen[r.LID])
		}
		seen[r.LID] = true
		want := p.Node.Info
		if p.Node.Switch == nil {
			want.PortGUID, want.LocalPortNum = p.GUID, uint8(p.Num)
		}
		if r.Info != want || r.Desc.Description != p.Node.Desc {
			t.Errorf("LID %d: %+v %q, want %+v %q", r.LID, r.Info, r.Desc.Description, want, p.Node.Desc)
		}
	}
	// One by LID, one by node GUID, by NodeType.
	hca := caPorts(s)[1]
	st, b := c.get(mad.MethodGet, mad.SAAttrNodeRecord, mad.NodeRecCompLID, enc(&mad.NodeRecord{LID: hca.LID()}, mad.NodeRecordSize))
	if r, _ := mad.ParseNodeRecord(b); st != mad.StatusOK || r.Info.PortGUID != hca.GUID || r.Desc.Description != hca.Node.Desc {
		t.Errorf("Get by LID %d: %s %+v", hca.LID(), mad.SAStatusName(st), r)
	}
	sw := switches(s)[1]
	q := mad.NodeRecord{Info: mad.NodeInfo{NodeGUID: sw.Info.NodeGUID}}
	st, b = c.get(mad.MethodGet, mad.SAAttrNodeRecord, mad.NodeRecCompNodeGUID, enc(&q, mad.NodeRecordSize))
	if r, _ := mad.ParseNodeRecord(b); st != mad.StatusOK || r.LID != sw.Ports[0].LID() {
		t.Errorf("Get by node GUID: %s %+v", mad.SAStatusName(st), r)
	}
	q = mad.NodeRecord{Info: mad.NodeInfo{NodeType: mad.NodeTypeSwitch}}
	if st, recs := c.getTable(mad.SAAttrNodeRecord, mad.NodeRecCompNodeType, enc(&q, mad.NodeRecordSize)); st != 0 || len(recs) != len(switches(s)) {
		t.Errorf("GetTable switches: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	// Two switches match: a Get is too many; a LID nobody has, none.
	if st, _ := c.get(mad.MethodGet, mad.SAAttrNodeRecord, mad.NodeRecCompNodeType, enc(&q, mad.NodeRecordSize)); st != mad.SAStatusTooManyRecords {
		t.Errorf("Get of 2 switches: %s", mad.SAStatusName(st))
	}
	none := enc(&mad.NodeRecord{LID: 999}, mad.NodeRecordSize)
	if st, _ := c.get(mad.MethodGet, mad.SAAttrNodeRecord, mad.NodeRecCompLID, none); st != mad.SAStatusNoRecords {
		t.Errorf("Get of LID 999: %s", mad.SAStatusName(st))
	}
	if st, recs := c.getTable(mad.SAAttrNodeRecord, mad.NodeRecCompLID, none); st != mad.StatusOK || len(recs) != 0 {
		t.Errorf("GetTable of LID 999: %s, %d records", mad.SAStatusName(st), len(recs))
	}
}

func TestPortInfoAndSwitchInfoRecords(t *testing.T) {
	s := topoSubnet(t, "net", 0)
	_, _, c := newTestServer(t, s, Config{})
	sw := switches(s)[0]
	q := mad.PortInfoRecord{EndportLID: sw.Ports[0].LID()}
	st, recs := c.getTable(mad.SAAttrPortInfoRecord, mad.PortInfoRecCompLID, enc(&q, mad.PortInfoRecordSize))
	if st != 0 || len(recs) != int(sw.Info.NumPorts)+1 {
		t.Fatalf("switch ports: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	for i, b := range recs {
		r, _ := mad.ParsePortInfoRecord(b)
		if int(r.PortNum) != i || r.Info != sw.Ports[i].Info {
			t.Errorf("record %d: port %d %+v", i, r.PortNum, r.Info)
		}
	}
	q.PortNum = 3
	st, b := c.get(mad.MethodGet, mad.SAAttrPortInfoRecord, mad.PortInfoRecCompLID|mad.PortInfoRecCompPortNum, enc(&q, mad.PortInfoRecordSize))
	if r, _ := mad.ParsePortInfoRecord(b); st != 0 || r.PortNum != 3 || r.Info != sw.Ports[3].Info {
		t.Errorf("Get port 3: %s %+v", mad.SAStatusName(st), r)
	}
	// The M_Key only for a requester with the SM_Key.
	s.SMKey = 0x5eed
	sw.Ports[3].Info.MKey = 0x1234
	mk := mad.PortInfoRecord{PortNum: 3, Info: mad.PortInfo{MKey: 0x1234}}
	for _, key := range []uint64{0, 0x5eed} {
		c.smKey = key
		_, b := c.get(mad.MethodGet, mad.SAAttrPortInfoRecord, mad.PortInfoRecCompLID|mad.PortInfoRecCompPortNum, enc(&q, mad.PortInfoRecordSize))
		r, _ := mad.ParsePortInfoRecord(b)
		_, byKey := c.getTable(mad.SAAttrPortInfoRecord, mad.PortInfoRecCompMKey|mad.PortInfoRecCompPortNum, enc(&mk, mad.PortInfoRecordSize))
		if trusted := key == s.SMKey; trusted != (r.Info.MKey == 0x1234) || trusted != (len(byKey) == 1) {
			t.Errorf("SM_Key %#x: M_Key %#x, %d records by M_Key", key, r.Info.MKey, len(byKey))
		}
	}
	c.smKey, sw.Ports[3].Info.MKey = 0, 0
	s.SMKey = 0
	// By a PortInfo field: the ports in state Active.
	q = mad.PortInfoRecord{Info: mad.PortInfo{PortState: mad.PortStateActive}}
	_, recs = c.getTable(mad.SAAttrPortInfoRecord, mad.PortInfoRecCompPortState, enc(&q, mad.PortInfoRecordSize))
	n := 0
	for _, nd := range s.Nodes {
		for _, p := range nd.Ports {
			if p != nil && p.LID() != 0 && p.Info.PortState == mad.PortStateActive {
				n++
			}
		}
	}
	if len(recs) != n {
		t.Errorf("Active ports: %d records, want %d", len(recs), n)
	}

	st, recs = c.getTable(mad.SAAttrSwitchInfoRecord, 0, nil)
	if st != 0 || len(recs) != len(switches(s)) {
		t.Fatalf("SwitchInfoRecord: %s, %d", mad.SAStatusName(st), len(recs))
	}
	for i, b := range recs {
		r, _ := mad.ParseSwitchInfoRecord(b)
		if sw := switches(s)[i]; r.LID != sw.Ports[0].LID() || r.Info != *sw.Switch {
			t.Errorf("SwitchInfoRecord %d: %+v", i, r)
		}
	}
	sq := mad.SwitchInfoRecord{LID: switches(s)[1].Ports[0].LID()}
	if st, b := c.get(mad.MethodGet, mad.SAAttrSwitchInfoRecord, mad.SwitchInfoRecCompLID, enc(&sq, mad.SwitchInfoRecordSize)); st != 0 {
		t.Errorf("Get SwitchInfoRecord: %s", mad.SAStatusName(st))
	} else if r, _ := mad.ParseSwitchInfoRecord(b); r.LID != sq.LID {
		t.Errorf("Get SwitchInfoRecord: LID %d", r.LID)
	}
}

func TestLinkRecord(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 0)
	_, _, c := newTestServer(t, s, Config{})
	links := 0
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p != nil && p.Remote != nil {
				links++
			}
		}
	}
	st, recs := c.getTable(mad.SAAttrLinkRecord, 0, nil)
	if st != 0 || len(recs) != links {
		t.Fatalf("LinkRecord: %s, %d records, want %d (both directions)", mad.SAStatusName(st), len(recs), links)
	}
	for _, b := range recs {
		r, _ := mad.ParseLinkRecord(b)
		from := s.PortByLID(r.FromLID).Node.Ports[r.FromPort]
		if from.Remote == nil || from.Remote.LID() != r.ToLID || from.Remote.Num != int(r.ToPort) {
			t.Errorf("link %+v is not in the subnet", r)
		}
	}
	hca := caPorts(s)[0]
	q := mad.LinkRecord{FromLID: hca.LID(), FromPort: uint8(hca.Num)}
	st, b := c.get(mad.MethodGet, mad.SAAttrLinkRecord, mad.LinkRecCompFromLID|mad.LinkRecCompFromPort, enc(&q, mad.LinkRecordSize))
	if r, _ := mad.ParseLinkRecord(b); st != 0 || r.ToLID != hca.Remote.LID() || int(r.ToPort) != hca.Remote.Num {
		t.Errorf("link from %d: %s %+v", hca.LID(), mad.SAStatusName(st), r)
	}
	q = mad.LinkRecord{ToLID: hca.LID()}
	if st, recs := c.getTable(mad.SAAttrLinkRecord, mad.LinkRecCompToLID, enc(&q, mad.LinkRecordSize)); st != 0 || len(recs) != 1 {
		t.Errorf("links to %d: %d", hca.LID(), len(recs))
	}
}

// bfsHops is the number of links between two ports, found without the
// LFTs.
func bfsHops(a, b *sm.Port) int {
	if a == b {
		return 0
	}
	type item struct {
		n *sm.Node
		d int
	}
	start := a.Node
	d0 := 0
	if a.Node.Switch == nil {
		start, d0 = a.Remote.Node, 1
	}
	seen := map[*sm.Node]bool{start: true}
	q := []item{{start, d0}}
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		if it.n == b.Node {
			return it.d
		}
		for _, p := range it.n.Ports {
			if p == nil || p.Remote == nil {
				continue
			}
			if p.Remote == b {
				return it.d + 1
			}
			if m := p.Remote.Node; m.Switch != nil && !seen[m] {
				seen[m] = true
				q = append(q, item{m, it.d + 1})
			}
		}
	}
	return -1
}

func TestRouteHops(t *testing.T) {
	s := topoSubnet(t, "fattree.ibnetdiscover", 0)
	ends := endPorts(s)
	for _, a := range ends {
		for _, b := range ends {
			p, err := Route(s, a, b.LID())
			if err != nil {
				t.Fatalf("%s -> %s: %v", a.Node.Desc, b.Node.Desc, err)
			}
			if want := bfsHops(a, b); p.Hops != want || len(p.Out) != p.Hops || p.Dest != b {
				t.Fatalf("%s -> %s: %d hops, want %d", a.Node.Desc, b.Node.Desc, p.Hops, want)
			}
		}
	}
	// A hole in an LFT, a loop, a LID nobody has.
	a, b := caPorts(s)[0], caPorts(s)[len(caPorts(s))-1]
	leaf := a.Remote.Node
	old := leaf.LFT[b.LID()]
	leaf.LFT[b.LID()] = 0xff
	if _, err := Route(s, a, b.LID()); !errors.Is(err, ErrNoRoute) {
		t.Errorf("through a hole: %v", err)
	}
	leaf.LFT[b.LID()] = uint8(a.Remote.Num) // back to the CA: not a switch
	if _, err := Route(s, a, b.LID()); !errors.Is(err, ErrNoRoute) {
		t.Errorf("back to the source: %v", err)
	}
	spine := leaf.Ports[old].Remote
	leaf.LFT[b.LID()] = old
	spineOld := spine.Node.LFT[b.LID()]
	spine.Node.LFT[b.LID()] = uint8(spine.Num) // spine sends it back to the leaf: a loop
	if _, err := Route(s, a, b.LID()); !errors.Is(err, ErrNoRoute) {
		t.Errorf("loop: %v", err)
	}
	spine.Node.LFT[b.LID()] = spineOld
	if _, err := Route(s, a, 0x7000); !errors.Is(err, ErrNoRoute) {
		t.Errorf("unknown LID: %v", err)
	}
}

func pathQuery(p mad.PathRecord) []byte { return enc(&p, mad.PathRecordSize) }

func parsePaths(t *testing.T, recs [][]byte) []mad.PathRecord {
	var out []mad.PathRecord
	for _, b := range recs {
		r, err := mad.ParsePathRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestPathRecord(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 0)
	_, _, c := newTestServer(t, s, Config{})
	cas := caPorts(s)
	a, b := cas[0], cas[len(cas)-1]
	gid := func(p *sm.Port) mad.GID { return mad.MakeGID(testPrefix, p.GUID) }
	byGID := pathQuery(mad.PathRecord{SGID: gid(a), DGID: gid(b), NumbPath: 1})
	mask := uint64(mad.PathRecCompSGID | mad.PathRecCompDGID | mad.PathRecCompNumbPath)
	st, recs := c.getTable(mad.SAAttrPathRecord, mask, byGID)
	if st != 0 || len(recs) != 1 {
		t.Fatalf("path by GIDs: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	r := parsePaths(t, recs)[0]
	want := mad.PathRecord{DGID: gid(b), SGID: gid(a), DLID: b.LID(), SLID: a.LID(), Reversible: true, PKey: 0xffff,
		MTUSelector: mad.SelectExactly, MTU: mad.MTU4096, RateSelector: mad.SelectExactly, Rate: mad.Rate10Gbps,
		LifeSelector: mad.SelectExactly, PacketLifeTime: 0x12}
	if r != want {
		t.Errorf("path:\n got %+v\nwant %+v", r, want)
	}
	// The same by LIDs, with Get.
	byLID := pathQuery(mad.PathRecord{SLID: a.LID(), DLID: b.LID()})
	st, rb := c.get(mad.MethodGet, mad.SAAttrPathRecord, mad.PathRecCompSLID|mad.PathRecCompDLID, byLID)
	if got, _ := mad.ParsePathRecord(rb); st != 0 || got != want {
		t.Errorf("path by LIDs: %s %+v", mad.SAStatusName(st), got)
	}
	// No source: the requester's port. No destination: every end port.
	_, recs = c.getTable(mad.SAAttrPathRecord, mad.PathRecCompDLID, pathQuery(mad.PathRecord{DLID: b.LID()}))
	if ps := parsePaths(t, recs); len(ps) != 1 || ps[0].SLID != c.lid {
		t.Errorf("path from the requester: %+v", ps)
	}
	_, recs = c.getTable(mad.SAAttrPathRecord, mad.PathRecCompSLID, pathQuery(mad.PathRecord{SLID: a.LID()}))
	withLID := 0
	for _, p := range endPorts(s) {
		if p.LID() != 0 {
			withLID++
		}
	}
	if len(recs) != withLID {
		t.Errorf("paths from %d: %d records, want %d", a.LID(), len(recs), withLID)
	}

	// The smallest MTU and rate on the path: lower one link in the middle.
	p, err := Route(s, a, b.LID())
	if err != nil || p.Hops < 2 {
		t.Fatalf("route: %v %+v", err, p)
	}
	mid := p.Out[1]
	mid.Info.NeighborMTU, mid.Remote.Info.NeighborMTU = mad.MTU1024, mad.MTU1024
	mid.Info.LinkWidthActive, mid.Remote.Info.LinkWidthActive = mad.LinkWidth1X, mad.LinkWidth1X
	_, recs = c.getTable(mad.SAAttrPathRecord, mask, byGID)
	if r := parsePaths(t, recs)[0]; r.MTU != mad.MTU1024 || r.Rate != mad.Rate2_5Gbps {
		t.Errorf("path over a 1x link of MTU 1024: MTU %d rate %d", r.MTU, r.Rate)
	}
	// MTU selectors: exactly 2048 is refused, exactly 512 and less than
	// 2048 give what was asked or less, greater than 512 the path's.
	for _, sc := range []struct {
		sel, mtu uint8
		ok       bool
		want     uint8
	}{
		{mad.SelectExactly, mad.MTU2048, false, 0},
		{mad.SelectExactly, mad.MTU512, true, mad.MTU512},
		{mad.SelectLess, mad.MTU2048, true, mad.MTU1024},
		{mad.SelectGreater, mad.MTU512, true, mad.MTU1024},
		{mad.SelectGreater, mad.MTU1024, false, 0},
		{mad.SelectBest, mad.MTU256, true, mad.MTU1024},
	} {
		q := mad.PathRecord{SGID: gid(a), DGID: gid(b), MTUSelector: sc.sel, MTU: sc.mtu}
		_, recs := c.getTable(mad.SAAttrPathRecord, mask|mad.PathRecCompMTU|mad.PathRecCompMTUSelector, pathQuery(q))
		if ps := parsePaths(t, recs); sc.ok != (len(ps) == 1) || sc.ok && ps[0].MTU != sc.want {
			t.Errorf("MTU selector %d value %d: %+v", sc.sel, sc.mtu, ps)
		}
	}
	// Rate: exactly 10 Gb/s over a 2.5 Gb/s link is refused.
	q := mad.PathRecord{SGID: gid(a), DGID: gid(b), RateSelector: mad.SelectExactly, Rate: mad.Rate10Gbps}
	if _, recs := c.getTable(mad.SAAttrPathRecord, mask|mad.PathRecCompRate|mad.PathRecCompRateSelector, pathQuery(q)); len(recs) != 0 {
		t.Errorf("10 Gb/s over 2.5: %d records", len(recs))
	}

	// Reversibility: break the way back.
	back := b.Remote.Node
	old := back.LFT[a.LID()]
	back.LFT[a.LID()] = 0xff
	_, recs = c.getTable(mad.SAAttrPathRecord, mask, byGID)
	if ps := parsePaths(t, recs); len(ps) != 1 || ps[0].Reversible {
		t.Errorf("one-way path: %+v", ps)
	}
	q = mad.PathRecord{SGID: gid(a), DGID: gid(b), Reversible: true}
	if _, recs := c.getTable(mad.SAAttrPathRecord, mask|mad.PathRecCompReversible, pathQuery(q)); len(recs) != 0 {
		t.Errorf("reversible paths only: %d records", len(recs))
	}
	back.LFT[a.LID()] = old

	// P_Keys: the path takes a key both ends hold.
	a.PKeys, b.PKeys = []uint16{0x8001, 0x7fff}, []uint16{0x0001}
	_, recs = c.getTable(mad.SAAttrPathRecord, mask, byGID)
	if ps := parsePaths(t, recs); len(ps) != 1 || ps[0].PKey != 0x8001 {
		t.Errorf("P_Key of a full and a limited member of 0x0001: %+v", ps)
	}
	b.PKeys = []uint16{0x0001, 0x0002}
	a.PKeys = []uint16{0x0001, 0x8003}
	if _, recs = c.getTable(mad.SAAttrPathRecord, mask, byGID); len(recs) != 0 {
		t.Errorf("two limited members: %d records", len(recs))
	}
	a.PKeys, b.PKeys = nil, nil

	// Unknown GID, bad prefix.
	bad := pathQuery(mad.PathRecord{SGID: gid(a), DGID: mad.MakeGID(testPrefix, 0xdead)})
	if st, _ := c.getTable(mad.SAAttrPathRecord, mask, bad); st != mad.SAStatusReqInvalidGID {
		t.Errorf("unknown DGID: %s", mad.SAStatusName(st))
	}
	bad = pathQuery(mad.PathRecord{SGID: mad.MakeGID(0xfe80000000000001, a.GUID), DGID: gid(b)})
	if st, _ := c.getTable(mad.SAAttrPathRecord, mask, bad); st != mad.SAStatusReqInvalidGID {
		t.Errorf("other subnet: %s", mad.SAStatusName(st))
	}
}

func TestPathRecordLMC(t *testing.T) {
	s := topoSubnet(t, "net", 1)
	_, _, c := newTestServer(t, s, Config{})
	a, b := caPorts(s)[0], caPorts(s)[1]
	gids := mad.PathRecord{SGID: mad.MakeGID(testPrefix, a.GUID), DGID: mad.MakeGID(testPrefix, b.GUID)}
	mask := uint64(mad.PathRecCompSGID | mad.PathRecCompDGID)
	_, recs := c.getTable(mad.SAAttrPathRecord, mask, pathQuery(gids))
	ps := parsePaths(t, recs)
	if len(ps) != 4 || ps[0].SLID != a.LID() || ps[0].DLID != b.LID() || ps[1].SLID != a.LID()+1 || ps[1].DLID != b.LID()+1 {
		t.Fatalf("LMC 1: %d paths %+v", len(ps), ps)
	}
	gids.NumbPath = 2
	_, recs = c.getTable(mad.SAAttrPathRecord, mask|mad.PathRecCompNumbPath, pathQuery(gids))
	if len(recs) != 2 {
		t.Errorf("NumbPath 2: %d paths", len(recs))
	}
}

func TestRMPPLossy(t *testing.T) {
	s := topoSubnet(t, "fattree.ibnetdiscover", 0)
	_, _, clean := newTestServer(t, s, Config{})
	st, want := clean.getTable(mad.SAAttrPortInfoRecord, 0, nil)
	if st != 0 || len(want)*72 < 10*mad.SADataSize {
		t.Fatalf("PortInfoRecord table: %s, %d records (want at least 10 segments)", mad.SAStatusName(st), len(want))
	}
	for seed := uint64(1); seed <= 3; seed++ {
		tr := newMemTransport(seed, 0.15)
		srv, err := New(&fixedSource{s: s}, tr, Config{RMPPTimeout: 5 * time.Millisecond, RMPPRetries: 50})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, srv, tr, caPorts(s)[0].LID())
		c.ackLoss = 0.15
		c.window = uint32(seed * 3)
		st, got := c.getTable(mad.SAAttrPortInfoRecord, 0, nil)
		if st != 0 || len(got) != len(want) {
			t.Fatalf("seed %d: %s, %d records, want %d", seed, mad.SAStatusName(st), len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("seed %d: record %d differs", seed, i)
			}
		}
		// The transfer ends once the final ACK gets through; the client
		// sends it again on the repeated last segment as Linux does.
		deadline := time.Now().Add(5 * time.Second)
		for srv.Stats().Transfers+srv.Stats().Aborted == 0 && time.Now().Before(deadline) {
			select {
			case d := <-tr.out:
				m := mad.SAMAD(d.MAD)
				if m.RMPP().Flags&mad.RMPPFlagLast != 0 {
					c.ack(m, m.RMPP().SegmentNumber, m.RMPP().SegmentNumber)
				}
			case <-time.After(10 * time.Millisecond):
			}
		}
		stats := srv.Stats()
		if stats.Transfers != 1 || stats.Resent == 0 || tr.drops == 0 {
			t.Errorf("seed %d: %+v, %d segments dropped", seed, stats, tr.drops)
		}
		srv.Close()
	}
}

func TestRMPPAbortAndStop(t *testing.T) {
	s := topoSubnet(t, "fattree.ibnetdiscover", 0)
	srv, tr, c := newTestServer(t, s, Config{RMPPTimeout: 2 * time.Millisecond, RMPPRetries: 3})
	// Nobody acknowledges: the first segment goes 1+3 times, then ABORT.
	c.request(mad.MethodGetTable, mad.SAAttrPortInfoRecord, 0, nil)
	var types []mad.RMPPType
	for len(types) < 5 {
		types = append(types, c.recv().RMPP().Type)
	}
	if want := []mad.RMPPType{1, 1, 1, 1, mad.RMPPTypeAbort}; !slices.Equal(types, want) {
		t.Errorf("unacknowledged transfer sent %v, want %v", types, want)
	}
	// A STOP from the receiver ends the transfer at once.
	c.request(mad.MethodGetTable, mad.SAAttrPortInfoRecord, 0, nil)
	first := c.recv()
	b := make([]byte, mad.Size)
	copy(b, first[:mad.SADataOffset])
	m := mad.SAMAD(b)
	m.MAD().SetMethod(mad.MethodGetTable)
	m.SetRMPP(&mad.RMPPHeader{Version: 1, Type: mad.RMPPTypeStop, Flags: mad.RMPPFlagActive, Status: mad.RMPPStatusResourcesGone})
	srv.Handle(&sm.Datagram{SLID: c.lid, SQP: 1, MAD: b})
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().Aborted < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := srv.Stats(); st.Aborted != 2 || st.Transfers != 0 {
		t.Errorf("stats %+v", st)
	}
	for len(tr.out) > 0 {
		<-tr.out
	}
	// An ACK of a segment never sent aborts. A server of its own, whose
	// retries take a second: with the 2 ms above, a loaded machine (CI's
	// parallel packages) let the retries run out before the ACK came, and
	// the ABORT said so (status 126) instead.
	_, tr, c = newTestServer(t, s, Config{RMPPTimeout: time.Second, RMPPRetries: 3})
	c.request(mad.MethodGetTable, mad.SAAttrPortInfoRecord, 0, nil)
	c.ack(c.recv(), 5, 10)
	for {
		if h := c.recv().RMPP(); h.Type == mad.RMPPTypeAbort {
			if h.Status != mad.RMPPStatusSegTooBig {
				t.Errorf("abort status %d", h.Status)
			}
			break
		}
	}
	for len(tr.out) > 0 {
		<-tr.out
	}
}

func TestServiceRecord(t *testing.T) {
	s := topoSubnet(t, "net", 0)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	_, _, c := newTestServer(t, s, Config{Now: clock})
	a := caPorts(s)[0]
	sr := mad.ServiceRecord{ID: 0x1000, GID: mad.MakeGID(testPrefix, a.GUID), PKey: 0xffff, Lease: 10, Name: "svc-a"}
	m := uint64(mad.ServiceRecCompID | mad.ServiceRecCompGID | mad.ServiceRecCompPKey | mad.ServiceRecCompLease | mad.ServiceRecCompName)
	if st, b := c.get(mad.MethodSet, mad.SAAttrServiceRecord, m, enc(&sr, mad.ServiceRecordSize)); st != 0 {
		t.Fatalf("register: %s", mad.SAStatusName(st))
	} else if r, _ := mad.ParseServiceRecord(b); r.Name != "svc-a" || r.Lease != 10 {
		t.Errorf("register answer %+v", r)
	}
	forever := sr
	forever.ID, forever.Name = 0x2000, "svc-b"
	if st, _ := c.get(mad.MethodSet, mad.SAAttrServiceRecord, m&^mad.ServiceRecCompLease, enc(&forever, mad.ServiceRecordSize)); st != 0 {
		t.Fatalf("register: %s", mad.SAStatusName(st))
	}
	byName := mad.ServiceRecord{Name: "svc-a"}
	st, b := c.get(mad.MethodGet, mad.SAAttrServiceRecord, mad.ServiceRecCompName, enc(&byName, mad.ServiceRecordSize))
	if r, _ := mad.ParseServiceRecord(b); st != 0 || r.ID != 0x1000 {
		t.Errorf("find by name: %s %+v", mad.SAStatusName(st), r)
	}
	if _, recs := c.getTable(mad.SAAttrServiceRecord, 0, nil); len(recs) != 2 {
		t.Errorf("all services: %d", len(recs))
	}
	mu.Lock()
	now = now.Add(4 * time.Second)
	mu.Unlock()
	_, b = c.get(mad.MethodGet, mad.SAAttrServiceRecord, mad.ServiceRecCompName, enc(&byName, mad.ServiceRecordSize))
	if r, _ := mad.ParseServiceRecord(b); r.Lease != 6 {
		t.Errorf("lease left after 4 s: %d", r.Lease)
	}
	mu.Lock()
	now = now.Add(7 * time.Second)
	mu.Unlock()
	if st, _ := c.get(mad.MethodGet, mad.SAAttrServiceRecord, mad.ServiceRecCompName, enc(&byName, mad.ServiceRecordSize)); st != mad.SAStatusNoRecords {
		t.Errorf("expired service: %s", mad.SAStatusName(st))
	}
	byID := mad.ServiceRecord{ID: 0x2000}
	if st, _ := c.get(mad.MethodDelete, mad.SAAttrServiceRecord, mad.ServiceRecCompID, enc(&byID, mad.ServiceRecordSize)); st != 0 {
		t.Errorf("delete: %s", mad.SAStatusName(st))
	}
	if _, recs := c.getTable(mad.SAAttrServiceRecord, 0, nil); len(recs) != 0 {
		t.Errorf("after delete: %d", len(recs))
	}
	if st, _ := c.get(mad.MethodSet, mad.SAAttrServiceRecord, mad.ServiceRecCompID, enc(&sr, mad.ServiceRecordSize)); st != mad.SAStatusReqInsufficientComps {
		t.Errorf("register without GID: %s", mad.SAStatusName(st))
	}
	sr.GID = mad.MakeGID(testPrefix, 0xbad)
	if st, _ := c.get(mad.MethodSet, mad.SAAttrServiceRecord, m, enc(&sr, mad.ServiceRecordSize)); st != mad.SAStatusReqInvalidGID {
		t.Errorf("register for an unknown port: %s", mad.SAStatusName(st))
	}
}

func TestMCMember(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 0)
	type call struct {
		mlid    uint16
		members []uint64
	}
	var calls []call
	hook := func(mlid uint16, ms []*sm.Port) {
		c := call{mlid: mlid}
		for _, p := range ms {
			c.members = append(c.members, p.GUID)
		}
		calls = append(calls, c)
	}
	srv, _, c := newTestServer(t, s, Config{Multicast: hook})
	cas := caPorts(s)
	mgid := mad.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 1}
	join := func(p *sm.Port, state uint8, extra uint64, q mad.MCMemberRecord) (uint16, mad.MCMemberRecord) {
		q.MGID, q.PortGID, q.JoinState = mgid, mad.MakeGID(testPrefix, p.GUID), state
		st, b := c.get(mad.MethodSet, mad.SAAttrMCMemberRecord,
			mad.MCMemberRecCompMGID|mad.MCMemberRecCompPortGID|mad.MCMemberRecCompJoinState|extra, enc(&q, mad.MCMemberRecordSize))
		r, _ := mad.ParseMCMemberRecord(b)
		return st, r
	}
	// A non-member cannot create the group.
	if st, _ := join(cas[0], mad.JoinNonMember, 0, mad.MCMemberRecord{}); st != mad.SAStatusReqInvalid {
		t.Errorf("non-member creates: %s", mad.SAStatusName(st))
	}
	st, r := join(cas[0], mad.JoinFullMember, mad.MCMemberRecCompQKey|mad.MCMemberRecCompPKey,
		mad.MCMemberRecord{QKey: 0x0b1b, PKey: 0xffff})
	if st != 0 || r.MLID != MLIDFirst || r.QKey != 0x0b1b || r.PKey != 0xffff || r.MTU != mad.MTU4096 || r.Rate != mad.Rate10Gbps || r.JoinState != mad.JoinFullMember {
		t.Fatalf("create: %s %+v", mad.SAStatusName(st), r)
	}
	// A join with another Q_Key is refused; a matching one joins.
	if st, _ := join(cas[1], mad.JoinFullMember, mad.MCMemberRecCompQKey, mad.MCMemberRecord{QKey: 7}); st != mad.SAStatusReqInvalid {
		t.Errorf("join with another Q_Key: %s", mad.SAStatusName(st))
	}
	if st, r := join(cas[1], mad.JoinFullMember, mad.MCMemberRecCompQKey, mad.MCMemberRecord{QKey: 0x0b1b}); st != 0 || r.MLID != MLIDFirst {
		t.Errorf("second join: %s %+v", mad.SAStatusName(st), r)
	}
	// A second group gets the next MLID, with an MGID the SA chose.
	q := mad.MCMemberRecord{PortGID: mad.MakeGID(testPrefix, cas[2].GUID), JoinState: mad.JoinFullMember}
	st, b := c.get(mad.MethodSet, mad.SAAttrMCMemberRecord, mad.MCMemberRecCompPortGID|mad.MCMemberRecCompJoinState, enc(&q, mad.MCMemberRecordSize))
	r2, _ := mad.ParseMCMemberRecord(b)
	if st != 0 || r2.MLID != MLIDFirst+1 || r2.MGID[0] != 0xff || r2.MGID == mgid {
		t.Errorf("group with a chosen MGID: %s %+v", mad.SAStatusName(st), r2)
	}
	_, recs := c.getTable(mad.SAAttrMCMemberRecord, 0, nil)
	if len(recs) != 3 {
		t.Errorf("members: %d records", len(recs))
	}
	byMGID := mad.MCMemberRecord{MGID: mgid}
	if _, recs = c.getTable(mad.SAAttrMCMemberRecord, mad.MCMemberRecCompMGID, enc(&byMGID, mad.MCMemberRecordSize)); len(recs) != 2 {
		t.Errorf("members of the first group: %d", len(recs))
	}
	leave := func(p *sm.Port) uint16 {
		q := mad.MCMemberRecord{MGID: mgid, PortGID: mad.MakeGID(testPrefix, p.GUID), JoinState: mad.JoinFullMember}
		st, _ := c.get(mad.MethodDelete, mad.SAAttrMCMemberRecord,
			mad.MCMemberRecCompMGID|mad.MCMemberRecCompPortGID|mad.MCMemberRecCompJoinState, enc(&q, mad.MCMemberRecordSize))
		return st
	}
	if st := leave(cas[0]); st != 0 {
		t.Errorf("leave: %s", mad.SAStatusName(st))
	}
	if st := leave(cas[0]); st != mad.SAStatusReqInvalid {
		t.Errorf("leave twice: %s", mad.SAStatusName(st))
	}
	if st := leave(cas[1]); st != 0 {
		t.Errorf("last leave: %s", mad.SAStatusName(st))
	}
	if gs := srv.Groups(); len(gs) != 1 || gs[0].Record.MLID != MLIDFirst+1 || len(gs[0].Members) != 1 ||
		gs[0].Members[0] != cas[2] || gs[0].JoinStates[0] != mad.JoinFullMember {
		t.Errorf("groups left: %+v", gs)
	}
	want := []call{
		{MLIDFirst, []uint64{cas[0].GUID}},
		{MLIDFirst, []uint64{cas[0].GUID, cas[1].GUID}},
		{MLIDFirst + 1, []uint64{cas[2].GUID}},
		{MLIDFirst, []uint64{cas[1].GUID}},
		{MLIDFirst, nil},
	}
	if len(calls) != len(want) {
		t.Fatalf("Multicast calls %+v, want %+v", calls, want)
	}
	for i := range want {
		if calls[i].mlid != want[i].mlid || !slices.Equal(calls[i].members, want[i].members) {
			t.Errorf("Multicast call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
	// The MLID is free again: a new group takes it.
	mgid[15] = 2
	if st, r := join(cas[3], mad.JoinFullMember, 0, mad.MCMemberRecord{}); st != 0 || r.MLID != MLIDFirst {
		t.Errorf("group after the first went: %s MLID %#x", mad.SAStatusName(st), r.MLID)
	}
}

func TestErrorsAndClassPortInfo(t *testing.T) {
	s := topoSubnet(t, "net", 0)
	srv, tr, c := newTestServer(t, s, Config{})
	st, b := c.get(mad.MethodGet, mad.AttrClassPortInfo, 0, nil)
	cpi, _ := mad.ParseClassPortInfo(b)
	if st != 0 || cpi.ClassVersion != mad.SAClassVersion || cpi.BaseVersion != 1 {
		t.Errorf("ClassPortInfo: %s %+v", mad.SAStatusName(st), cpi)
	}
	if st, _ := c.get(mad.MethodSet, mad.SAAttrNodeRecord, 0, nil); st != mad.StatusMethodAttrInvalid {
		t.Errorf("Set NodeRecord: %s", mad.SAStatusName(st))
	}
	if st, _ := c.get(mad.MethodGet, 0x7777, 0, nil); st != mad.StatusMethodAttrInvalid {
		t.Errorf("unknown attribute: %s", mad.SAStatusName(st))
	}
	// Malformed, a response, an ACK for nothing: dropped and counted.
	srv.Handle(&sm.Datagram{MAD: make([]byte, 100)})
	resp := make([]byte, mad.Size)
	mad.NewSAMAD(resp, mad.MethodGetResp, mad.SAAttrNodeRecord, 1, &mad.SAHeader{})
	srv.Handle(&sm.Datagram{MAD: resp})
	ack := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(ack, mad.MethodGetTable, mad.SAAttrNodeRecord, 99, &mad.SAHeader{})
	m.SetRMPP(&mad.RMPPHeader{Version: 1, Type: mad.RMPPTypeAck, Flags: mad.RMPPFlagActive, SegmentNumber: 1, Length: 1})
	srv.Handle(&sm.Datagram{MAD: ack})
	srv.Handle(nil)
	if st := srv.Stats(); st.Dropped != 4 {
		t.Errorf("dropped %d, want 4", st.Dropped)
	}
	// Another class version.
	c.tid++
	bv := make([]byte, mad.Size)
	m, _ = mad.NewSAMAD(bv, mad.MethodGet, mad.SAAttrNodeRecord, c.tid, &mad.SAHeader{})
	m.MAD().SetClassVersion(1)
	srv.Handle(&sm.Datagram{SLID: c.lid, SQP: 1, MAD: bv})
	if a := c.recv(); a.MAD().Status() != mad.StatusBadVersion {
		t.Errorf("class version 1: %s", mad.SAStatusName(a.MAD().Status()))
	}
	if len(tr.out) != 0 {
		t.Errorf("%d unexpected answers", len(tr.out))
	}
	// Before the first sweep: busy.
	srv2, _, c2 := newTestServer(t, nil, Config{})
	_ = srv2
	if st, _ := c2.get(mad.MethodGet, mad.SAAttrNodeRecord, 0, nil); st != mad.StatusBusy {
		t.Errorf("no subnet: %s", mad.SAStatusName(st))
	}
	if _, err := New(nil, tr, Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("nil source: %v", err)
	}
	if _, err := New(&fixedSource{}, tr, Config{PacketLifeTime: 0x40}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad lifetime: %v", err)
	}
}

// TestCloseStopsTransfers checks that Close ends the transfers in flight
// and what arrives afterwards is dropped.
func TestCloseStopsTransfers(t *testing.T) {
	leakcheck.Check(t)
	s := topoSubnet(t, "fattree.ibnetdiscover", 0)
	tr := newMemTransport(1, 0)
	srv, err := New(&fixedSource{s: s}, tr, Config{RMPPTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv, tr, caPorts(s)[0].LID())
	for range 5 {
		c.request(mad.MethodGetTable, mad.SAAttrPortInfoRecord, 0, nil)
	}
	srv.Close()
	n := srv.Stats().Dropped
	c.request(mad.MethodGetTable, mad.SAAttrPortInfoRecord, 0, nil)
	if srv.Stats().Dropped != n+1 {
		t.Error("a request after Close was not dropped")
	}
	srv.Close()
}
