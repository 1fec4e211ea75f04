package fabric

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// status returns the status of a DR response, failing on a timeout.
func drStatus(t *testing.T, r mad.SMP) uint16 {
	t.Helper()
	if r == nil {
		t.Fatal("timed out, want a response")
	}
	return r.Status()
}

func TestBadAttributesAndModifiers(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net"))
	sm := newSM(t, f, "Hca1", 1)
	sw := path(1)
	cases := []struct {
		name   string
		path   []byte
		method mad.Method
		attr   mad.AttributeID
		mod    uint32
		want   uint16
	}{
		{"unknown attribute", sw, mad.MethodGet, 0x00FF, 0, mad.StatusMethodAttrInvalid},
		{"NodeInfo Set", sw, mad.MethodSet, mad.SMAttrNodeInfo, 0, mad.StatusMethodAttrInvalid},
		{"NodeDescription Set", sw, mad.MethodSet, mad.SMAttrNodeDescription, 0, mad.StatusMethodAttrInvalid},
		{"SwitchInfo of a CA", path(), mad.MethodGet, mad.SMAttrSwitchInfo, 0, mad.StatusMethodAttrInvalid},
		{"LFT of a CA", path(), mad.MethodGet, mad.SMAttrLinearFT, 0, mad.StatusMethodAttrInvalid},
		{"PortInfo of port 9 of 8", sw, mad.MethodGet, mad.SMAttrPortInfo, 9, mad.StatusInvalidAttrOrModify},
		{"PortInfo Set of another CA port", path(), mad.MethodSet, mad.SMAttrPortInfo, 2, mad.StatusInvalidAttrOrModify},
		{"LFT block past the table", sw, mad.MethodGet, mad.SMAttrLinearFT, 768, mad.StatusInvalidAttrOrModify},
		{"MFT block past the table", sw, mad.MethodGet, mad.SMAttrMulticastFT, 32, mad.StatusInvalidAttrOrModify},
		{"P_Key block past the table", path(), mad.MethodGet, mad.SMAttrPKeyTable, 2, mad.StatusInvalidAttrOrModify},
		{"GUIDInfo block 1", path(), mad.MethodGet, mad.SMAttrGUIDInfo, 1, mad.StatusInvalidAttrOrModify},
		{"VLArb selector 5", path(), mad.MethodGet, mad.SMAttrVLArbTable, 5 << 16, mad.StatusInvalidAttrOrModify},
		{"VLArb past the capacity", path(), mad.MethodGet, mad.SMAttrVLArbTable, 2 << 16, mad.StatusInvalidAttrOrModify},
		{"SL2VL of switch port 9", sw, mad.MethodGet, mad.SMAttrSLToVLTable, 9<<8 | 1, mad.StatusInvalidAttrOrModify},
		{"SMInfo with no SM there", sw, mad.MethodGet, mad.SMAttrSMInfo, 0, mad.StatusMethodAttrInvalid},
		{"method Send", sw, mad.MethodSend, mad.SMAttrNodeInfo, 0, mad.StatusMethodUnsupported},
		{"good: P_Key block 1", path(), mad.MethodGet, mad.SMAttrPKeyTable, 1, mad.StatusOK},
		{"good: MFT block 31", sw, mad.MethodGet, mad.SMAttrMulticastFT, 31, mad.StatusOK},
	}
	// SwitchInfo Sets: tops within the tables pass, beyond them fail.
	for _, c := range []struct {
		lft, mft uint16
		want     uint16
	}{
		{0xBFFF, 0, mad.StatusOK}, {100, 0xBFFF, mad.StatusOK}, {100, 0xC3FF, mad.StatusOK},
		{0xC000, 0, mad.StatusInvalidAttrOrModify}, {100, 0xC400, mad.StatusInvalidAttrOrModify},
		{100, 0x1000, mad.StatusInvalidAttrOrModify},
	} {
		si := mad.SwitchInfo{LinearFDBTop: c.lft, MulticastFDBTop: c.mft}
		b := make([]byte, 64)
		si.Encode(b)
		if got := drStatus(t, sm.dr(sw, mad.MethodSet, mad.SMAttrSwitchInfo, 0, b)); got != c.want {
			t.Errorf("SwitchInfo Set LFT top %#x MFT top %#x: status %#x, want %#x", c.lft, c.mft, got, c.want)
		}
	}
	for _, c := range cases {
		r := sm.dr(c.path, c.method, c.attr, c.mod, nil)
		if got := drStatus(t, r); got != c.want {
			t.Errorf("%s: status %#x, want %#x", c.name, got, c.want)
		}
	}
	// Port state transitions the port state machine refuses: ACTIVE from
	// INIT, ARMED on a port with no link; the Set changes nothing.
	for _, c := range []struct {
		path  []byte
		port  uint32
		state uint8
	}{{sw, 1, mad.PortStateActive}, {sw, 5, mad.PortStateArmed}, {path(), 1, mad.PortStateActive}} {
		pi, _ := mad.ParsePortInfo(sm.drOK(c.path, mad.MethodGet, mad.SMAttrPortInfo, c.port, nil))
		pi.PortState = c.state
		pi.LID = 77
		b := make([]byte, 64)
		pi.Encode(b)
		r := sm.dr(c.path, mad.MethodSet, mad.SMAttrPortInfo, c.port, b)
		if drStatus(t, r) != mad.StatusInvalidAttrOrModify {
			t.Errorf("state %d on port %d along %v: status %#x", c.state, c.port, c.path, r.Status())
		}
		got, _ := mad.ParsePortInfo(r.Data())
		if got.PortState == c.state || got.LID == 77 {
			t.Errorf("refused Set changed the port: %+v", got)
		}
	}
	// OperationalVLs beyond VLCap and NeighborMTU beyond MTUCap.
	pi, _ := mad.ParsePortInfo(sm.drOK(path(), mad.MethodGet, mad.SMAttrPortInfo, 1, nil))
	for _, bad := range []func(*mad.PortInfo){
		func(p *mad.PortInfo) { p.OperationalVLs = p.VLCap + 1 },
		func(p *mad.PortInfo) { p.NeighborMTU = p.MTUCap + 1 },
		func(p *mad.PortInfo) { p.LinkWidthEnabled = 0x40 },
	} {
		x := pi
		bad(&x)
		b := make([]byte, 64)
		x.Encode(b)
		if st := drStatus(t, sm.dr(path(), mad.MethodSet, mad.SMAttrPortInfo, 1, b)); st != mad.StatusInvalidAttrOrModify {
			t.Errorf("bad PortInfo Set: status %#x", st)
		}
	}
}

func TestBadDirectedRoutes(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	sm := newSM(t, f, "Hca1", 1)
	before := f.Stats().Dropped
	send := func(name string, edit func(s mad.SMP), p []byte) {
		t.Helper()
		sm.tid++
		b := make([]byte, mad.Size)
		s, _ := mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrNodeInfo, 0, sm.tid, p)
		if edit != nil {
			edit(s)
		}
		r := sm.do(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b})
		if r.Status != StatusTimeout {
			t.Errorf("%s: status %d, want StatusTimeout", name, r.Status)
		}
	}
	send("hop count 64", func(s mad.SMP) { s.SetHopCount(64) }, path(1, 3))
	send("hop pointer 1 in a request", func(s mad.SMP) { s.SetHopPointer(1) }, path(1, 3))
	send("D bit on a Get", func(s mad.SMP) { s.SetDirection(true) }, path(1))
	send("leaving the CA by port 2", nil, path(2))
	send("switch port 9 of 8", nil, path(1, 9))
	send("unconnected switch port", nil, path(1, 4))
	send("through a CA", nil, path(1, 1, 1))
	send("hop count past the path's CA", nil, path(1, 2, 1))
	if got := f.Stats().Dropped - before; got != 8 {
		t.Errorf("%d drops counted, want 8", got)
	}
	// A path through a port whose link went down.
	sm.drOK(path(1, 3), mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
	if err := f.SetLink(f.NodeByName("Switch1"), 3, false); err != nil {
		t.Fatal(err)
	}
	send("through a port that is down", nil, path(1, 3))
	sm.drOK(path(1, 5), mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
	pi, _ := mad.ParsePortInfo(mustQuery(t, f, f.NodeByName("Switch1"), mad.SMAttrPortInfo, 3))
	if pi.PortState != mad.PortStateDown || pi.PortPhysicalState != mad.PhysStatePolling {
		t.Errorf("downed port: state %d phys %d", pi.PortState, pi.PortPhysicalState)
	}
	if err := f.SetLink(f.NodeByName("Switch2"), 3, true); err != nil {
		t.Fatal(err)
	}
	sm.drOK(path(1, 3), mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
	pi, _ = mad.ParsePortInfo(mustQuery(t, f, f.NodeByName("Switch1"), mad.SMAttrPortInfo, 3))
	if pi.PortState != mad.PortStateInit || pi.PortPhysicalState != mad.PhysStateLinkUp {
		t.Errorf("link back up: state %d phys %d", pi.PortState, pi.PortPhysicalState)
	}
}

// TestAfterSweep runs what needs a configured subnet: LID-routed drops and
// their counters, trap 128, directed routes with LID-routed ends, M_Key
// protection, SMInfo to an SM client, and several clients on one port.
func TestAfterSweep(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	sm := newSM(t, f, "Hca1", 1)
	sn := sm.sweep()
	var sw1, sw2 uint16
	for _, g := range sn.order {
		switch n := sn.nodes[g]; g {
		case f.NodeByName("Switch1").GUID():
			sw1 = n.lid
		case f.NodeByName("Switch2").GUID():
			sw2 = n.lid
		}
	}
	counters := func(lid uint16, port byte) mad.PortCounters {
		data := make([]byte, 64)
		data[1] = port
		r := sm.lidReq(lid, mad.ClassPerf, mad.MethodGet, mad.PerfAttrPortCounters, 0, data)
		if r.Status != 0 {
			t.Fatalf("PortCounters of LID %d port %d timed out", lid, port)
		}
		pc, _ := mad.ParsePortCounters(r.MAD[mad.PerfDataOffset:])
		return pc
	}

	t.Run("no route", func(t *testing.T) {
		before := counters(sw1, 1).PortRcvSwitchRelayErrors
		if r := sm.lidReq(sn.maxLID+1, mad.ClassSubnLID, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil); r.Status != StatusTimeout {
			t.Fatalf("LID past the LFT top: status %d", r.Status)
		}
		if after := counters(sw1, 1).PortRcvSwitchRelayErrors; after != before+1 {
			t.Errorf("switch relay errors %d -> %d", before, after)
		}
		// PortCounters Set clears what CounterSelect names.
		data := make([]byte, 64)
		data[1] = 1
		be := [2]byte{0, 1 << 5} // PortRcvSwitchRelayErrors
		copy(data[2:], be[:])
		sm.lidReq(sw1, mad.ClassPerf, mad.MethodSet, mad.PerfAttrPortCounters, 0, data)
		if pc := counters(sw1, 1); pc.PortRcvSwitchRelayErrors != 0 || pc.PortRcvPkts == 0 {
			t.Errorf("after clearing: %+v", pc)
		}
	})

	t.Run("LMC", func(t *testing.T) {
		// Hca4 (on Switch2 port 2) takes LIDs 0x40-0x43: base 0x40, LMC 2.
		hca4 := f.NodeByName("Hca4")
		cp := sn.caPorts[hca4.PortGUID(1)]
		pi, _ := mad.ParsePortInfo(sm.drOK(cp.path, mad.MethodGet, mad.SMAttrPortInfo, 1, nil))
		pi.LID, pi.LMC, pi.PortState = 0x40, 2, mad.PortStateNoChange
		b := make([]byte, 64)
		pi.Encode(b)
		sm.drOK(cp.path, mad.MethodSet, mad.SMAttrPortInfo, 1, b)
		for _, sw := range []struct {
			name string
			port byte
		}{{"Switch1", 3}, {"Switch2", 2}} {
			n := sn.nodes[f.NodeByName(sw.name).GUID()]
			si, _ := mad.ParseSwitchInfo(sm.drOK(n.path, mad.MethodGet, mad.SMAttrSwitchInfo, 0, nil))
			si.LinearFDBTop = 0x43
			si.Encode(b)
			sm.drOK(n.path, mad.MethodSet, mad.SMAttrSwitchInfo, 0, b)
			blk := sm.drOK(n.path, mad.MethodGet, mad.SMAttrLinearFT, 1, nil)
			for i := range 4 {
				blk[i] = sw.port
			}
			sm.drOK(n.path, mad.MethodSet, mad.SMAttrLinearFT, 1, blk)
		}
		for lid := uint16(0x40); lid <= 0x44; lid++ {
			r := sm.lidReq(lid, mad.ClassSubnLID, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
			ni, _ := mad.ParseNodeInfo(mad.SMP(r.MAD).Data())
			switch {
			case lid < 0x44 && (r.Status != 0 || ni.PortGUID != hca4.PortGUID(1) || r.SLID != lid):
				t.Errorf("LID %#x: status %d, port %#x, SLID %#x", lid, r.Status, ni.PortGUID, r.SLID)
			case lid == 0x44 && r.Status != StatusTimeout:
				t.Errorf("LID %#x past the LMC range and the LFT top answered", lid)
			}
		}
	})

	t.Run("trap 144 when a port becomes an SM", func(t *testing.T) {
		hca2 := f.NodeByName("Hca2")
		sm.traps = nil
		if err := f.SetIsSM(hca2, 1, true); err != nil {
			t.Fatal(err)
		}
		if err := f.SetIsSM(hca2, 1, true); err != nil { // no change, no trap
			t.Fatal(err)
		}
		sm.drOK(path(), mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
		if len(sm.traps) != 1 {
			t.Fatalf("%d traps, want 1", len(sm.traps))
		}
		d := sm.traps[0]
		nt, _ := mad.ParseNotice(mad.SMP(d.MAD).Data())
		det := nt.Trap144()
		lid := sn.caPorts[hca2.PortGUID(1)].lid
		if nt.TrapNumber != 144 || nt.ProducerType != mad.NodeTypeCA || nt.IssuerLID != lid || det.LID != lid ||
			det.CapabilityMask&mad.PortCapIsSM == 0 || d.SLID != lid || d.DLID != sm.lid {
			t.Errorf("trap %+v details %+v", nt, det)
		}
		sm.traps = nil
	})

	t.Run("trap 128 and a link down", func(t *testing.T) {
		var traps []*Datagram
		if err := f.SetLink(f.NodeByName("Switch1"), 3, false); err != nil {
			t.Fatal(err)
		}
		// The traps arrive before the answer to the next request.
		sm.tid++
		b := make([]byte, mad.Size)
		mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrSwitchInfo, 0, sm.tid, path(1))
		sm.c.Send(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b})
		r := sm.await(sm.tid, func(d *Datagram) { traps = append(traps, d) })
		si, _ := mad.ParseSwitchInfo(mad.SMP(r.MAD).Data())
		if !si.PortStateChange {
			t.Error("SwitchInfo.PortStateChange not set")
		}
		// Switch2's trap is lost: its route to the SM crossed the link that
		// went down, and no SM has routed around it yet.
		if len(traps) != 1 {
			t.Fatalf("%d traps, want Switch1's", len(traps))
		}
		issuers := map[uint16]bool{}
		for _, d := range traps {
			m := mad.MAD(d.MAD)
			nt, _ := mad.ParseNotice(mad.SMP(d.MAD).Data())
			if m.Method() != mad.MethodTrap || m.AttributeID() != mad.SMAttrNotice || !nt.IsGeneric ||
				nt.TrapNumber != 128 || nt.ProducerType != mad.NodeTypeSwitch || d.DLID != sm.lid || nt.Trap128() != nt.IssuerLID {
				t.Errorf("trap %+v notice %+v", m.Fields(), nt)
			}
			issuers[nt.IssuerLID] = true
		}
		if !issuers[sw1] {
			t.Errorf("trap issuers %v, want %d", issuers, sw1)
		}
		// Writing 1 clears PortStateChange.
		b2 := make([]byte, 64)
		si.Encode(b2)
		got, _ := mad.ParseSwitchInfo(sm.drOK(path(1), mad.MethodSet, mad.SMAttrSwitchInfo, 0, b2))
		if got.PortStateChange {
			t.Error("PortStateChange not cleared")
		}
		// A GMP routed through the down port is dropped and counted.
		before := counters(sw1, 3).PortXmitDiscards
		r2 := sm.lidReq(sw2, mad.ClassPerf, mad.MethodGet, mad.AttrClassPortInfo, 0, nil)
		if r2.Status != StatusTimeout {
			t.Errorf("GMP through a down port: status %d", r2.Status)
		}
		if pc := counters(sw1, 3); pc.PortXmitDiscards != before+1 || pc.LinkDownedCounter != 1 {
			t.Errorf("discards %d -> %d, link downed %d", before, pc.PortXmitDiscards, pc.LinkDownedCounter)
		}
		// Up again: both switches' traps arrive; the SM keeps them aside.
		f.SetLink(f.NodeByName("Switch1"), 3, true)
		sm.drOK(path(1), mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
		if len(sm.traps) != 2 {
			t.Errorf("%d traps after the link came back, want 2", len(sm.traps))
		}
	})
}

func TestAPIErrors(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net"))
	g := openFabric(t, readFile(t, "testdata/net"))
	sw, hca := f.NodeByName("Switch1"), f.NodeByName("Hca1")
	deliver := func(*Datagram) {}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"attach to a switch's external port", second(f.Attach(sw, 1, deliver)), ErrNoPort},
		{"attach to CA port 0", second(f.Attach(hca, 0, deliver)), ErrNoPort},
		{"attach to CA port 3", second(f.Attach(hca, 3, deliver)), ErrNoPort},
		{"attach to a nil node", second(f.Attach(nil, 1, deliver)), ErrNoNode},
		{"attach to another fabric's node", second(f.Attach(g.NodeByName("Hca1"), 1, deliver)), ErrNoNode},
		{"query another fabric's node", second(f.Query(g.NodeByName("Hca1"), mad.SMAttrNodeInfo, 0)), ErrNoNode},
		{"query an unknown attribute", second(f.Query(hca, 0x00FF, 0)), ErrAttribute},
		{"SetIsSM on a switch port 2", f.SetIsSM(sw, 2, true), ErrNoPort},
		{"SetLink on an unlinked port", f.SetLink(sw, 7, false), ErrNoPort},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if f.NodeByName("nope") != nil || f.NodeByGUID(1) != nil || f.NodeByGUID(hca.GUID()) != hca {
		t.Error("NodeByName/NodeByGUID")
	}
	if hca.PortGUID(1) != hca.GUID()+1 || sw.PortGUID(3) != sw.GUID() || hca.PortGUID(5) != 0 || hca.NumPorts() != 2 || sw.Type() != mad.NodeTypeSwitch {
		t.Error("node accessors")
	}
	c, err := f.Attach(hca, 1, deliver)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(&Datagram{MAD: make([]byte, 100)}); !errors.Is(err, ErrBadMAD) {
		t.Errorf("short MAD: %v", err)
	}
	if err := c.Send(&Datagram{MAD: make([]byte, mad.Size)}); !errors.Is(err, ErrBadMAD) {
		t.Errorf("base version 0: %v", err)
	}
	if err := f.SetIsSM(hca, 1, true); err != nil {
		t.Fatal(err)
	}
	pi, _ := mad.ParsePortInfo(mustQuery(t, f, hca, mad.SMAttrPortInfo, 1))
	if pi.CapabilityMask&mad.PortCapIsSM == 0 {
		t.Error("IsSM not set")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	b := make([]byte, mad.Size)
	mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrNodeInfo, 0, 1, path())
	if err := c.Send(&Datagram{MAD: b}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if _, err := f.Attach(hca, 1, deliver); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v", err)
	}
	if _, err := f.Query(hca, mad.SMAttrNodeInfo, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Query after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second client Close: %v", err)
	}
	if _, err := New(nil, nil); !errors.Is(err, ErrTopology) {
		t.Errorf("New(nil): %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestConcurrentClients has clients on every CA send at once: each gets
// exactly the answers to its own requests.
func TestConcurrentClients(t *testing.T) {
	f := openFabric(t, fatTree(2, 2, 4))
	const per = 50
	var wg sync.WaitGroup
	for _, n := range f.Nodes() {
		if n.Type() != mad.NodeTypeCA {
			continue
		}
		for k := range 2 { // two clients on the same port
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch := make(chan *Datagram, per)
				c, err := f.Attach(n, 1, func(d *Datagram) { ch <- d })
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				for i := range per {
					b := make([]byte, mad.Size)
					tid := uint64(k)<<32 | uint64(i)
					mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrNodeDescription, 0, tid, path(1))
					for {
						err := c.Send(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b})
						if !errors.Is(err, ErrBusy) {
							if err != nil {
								t.Error(err)
								return
							}
							break
						}
					}
					d := <-ch
					nd, _ := mad.ParseNodeDescription(mad.SMP(d.MAD).Data())
					if got := mad.MAD(d.MAD).TransactionID(); got != tid || !strings.HasPrefix(nd.Description, "Leaf") {
						t.Errorf("%s client %d: TID %#x (want %#x), description %q", n.Name(), k, got, tid, nd.Description)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
}

// TestSMInfoToClient: an SM client at Hca2 receives a directed-route SMInfo
// Get from Hca1 and answers it; the answer walks the return path back.
func TestSMInfoToClient(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	sm := newSM(t, f, "Hca1", 1)
	other, err := f.Attach(f.NodeByName("Hca2"), 1, nil)
	if err == nil {
		t.Fatal("Attach with nil deliver accepted")
	}
	var mu sync.Mutex
	var errs []string
	other, err = f.Attach(f.NodeByName("Hca2"), 1, func(d *Datagram) {
		s := mad.SMP(d.MAD)
		if s.MAD().AttributeID() != mad.SMAttrSMInfo || s.Direction() || s.HopPointer() != s.HopCount()+1 {
			mu.Lock()
			errs = append(errs, fmt.Sprintf("request %+v hp %d", s.MAD().Fields(), s.HopPointer()))
			mu.Unlock()
			return
		}
		r := *d
		r.MAD = append([]byte(nil), d.MAD...)
		rs := mad.SMP(r.MAD)
		rs.MAD().SetMethod(mad.MethodGetResp)
		rs.SetDirection(true)
		info := mad.SMInfo{GUID: 0xABCD, Priority: 3, SMState: mad.SMStateStandby}
		info.Encode(rs.Data())
		r.SLID, r.DLID = d.DLID, d.SLID
		go other.Send(&r) // not from inside deliver: Send never blocks, but be polite
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	p := path(1, 3, 1) // Hca1 -> Switch1 port 3 -> Switch2 port 1 -> Hca2
	// A client that is not an SM does not get SMInfo: the SMA refuses it.
	if st := drStatus(t, sm.dr(p, mad.MethodGet, mad.SMAttrSMInfo, 0, nil)); st != mad.StatusMethodAttrInvalid {
		t.Fatalf("SMInfo to a port without IsSM: status %#x", st)
	}
	if err := f.SetIsSM(f.NodeByName("Hca2"), 1, true); err != nil {
		t.Fatal(err)
	}
	got, _ := mad.ParseSMInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrSMInfo, 0, nil))
	if got.GUID != 0xABCD || got.SMState != mad.SMStateStandby {
		t.Errorf("SMInfo %+v", got)
	}
	// The same SMP to NodeInfo is the SMA's.
	ni, _ := mad.ParseNodeInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil))
	if ni.NodeGUID != f.NodeByName("Hca2").GUID() || ni.LocalPortNum != 1 {
		t.Errorf("NodeInfo %+v", ni)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Error(errs)
	}
}

// TestDirectedRouteLIDEnds sends directed-route SMPs with a LID-routed
// start (DrSLID set) and a LID-routed end (DrDLID set).
func TestDirectedRouteLIDEnds(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	sm := newSM(t, f, "Hca1", 1)
	sn := sm.sweep()
	sw2 := sn.nodes[f.NodeByName("Switch2").GUID()].lid
	hca2 := f.NodeByName("Hca2")
	hca2LID := sn.caPorts[hca2.PortGUID(1)].lid
	do := func(name string, dlid, drslid, drdlid uint16, p []byte) {
		t.Helper()
		sm.tid++
		b := make([]byte, mad.Size)
		s, _ := mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrNodeInfo, 0, sm.tid, p)
		s.SetDrSLID(drslid)
		s.SetDrDLID(drdlid)
		r := sm.do(&Datagram{SLID: sm.lid, DLID: dlid, MAD: b})
		if r.Status != 0 {
			t.Fatalf("%s: timed out", name)
		}
		rs := mad.SMP(r.MAD)
		ni, _ := mad.ParseNodeInfo(rs.Data())
		if rs.Status() != 0 || !rs.Direction() || ni.NodeGUID != hca2.GUID() || rs.HopPointer() != 0 {
			t.Errorf("%s: status %#x D %v hp %d NodeInfo %+v", name, rs.Status(), rs.Direction(), rs.HopPointer(), ni)
		}
	}
	// LID-routed to Switch2, then directed out of its port 1.
	do("LID-routed start", sw2, sm.lid, mad.PermissiveLID, path(1))
	// Directed to Switch1, then LID-routed to Hca2.
	do("LID-routed end", mad.PermissiveLID, mad.PermissiveLID, hca2LID, path(1))
	// Both: LID-routed to Switch2, no directed hops, LID-routed to Hca2.
	do("both ends", sw2, sm.lid, hca2LID, path())
}

// TestMKey protects a port's SMA with an M_Key: Gets without the key are
// dropped at protect bits 2, Sets always, and the violations counted.
func TestMKey(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net"))
	sm := newSM(t, f, "Hca1", 1)
	p := path(1, 2) // Hca2 port 2
	pi, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil))
	pi.MKey, pi.MKeyProtectBits = 0x1234, 1
	b := make([]byte, 64)
	pi.Encode(b)
	sm.drOK(p, mad.MethodSet, mad.SMAttrPortInfo, 0, b)
	// Protect bits 1: a Get without the key passes with the key hidden.
	got, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil))
	if got.MKey != 0 {
		t.Errorf("M_Key shown to a Get without it: %#x", got.MKey)
	}
	// A Set without the key is dropped.
	if r := sm.dr(p, mad.MethodSet, mad.SMAttrPortInfo, 0, b); r != nil {
		t.Errorf("Set without the M_Key answered, status %#x", r.Status())
	}
	withKey := func(method mad.Method, data []byte) mad.SMP {
		sm.tid++
		buf := make([]byte, mad.Size)
		s, _ := mad.NewDirectedSMP(buf, method, mad.SMAttrPortInfo, 0, sm.tid, p)
		s.SetMKey(0x1234)
		copy(s.Data(), data)
		r := sm.do(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: buf})
		if r.Status != 0 {
			t.Fatal("request with the M_Key timed out")
		}
		return mad.SMP(r.MAD)
	}
	pi.MKeyProtectBits = 2
	pi.Encode(b)
	r := withKey(mad.MethodSet, b)
	got, _ = mad.ParsePortInfo(r.Data())
	if r.Status() != 0 || got.MKey != 0x1234 || got.MKeyProtectBits != 2 {
		t.Errorf("Set with the M_Key: status %#x %+v", r.Status(), got)
	}
	// Protect bits 2: a Get without the key is dropped too.
	if r := sm.dr(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil); r != nil {
		t.Error("Get without the M_Key answered at protect bits 2")
	}
	got, _ = mad.ParsePortInfo(withKey(mad.MethodGet, nil).Data())
	if got.MKeyViolations != 2 {
		t.Errorf("MKeyViolations %d, want 2", got.MKeyViolations)
	}
}

// TestTables sets and reads back the table attributes.
func TestTables(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net"))
	sm := newSM(t, f, "Hca1", 1)
	sw := path(1)
	rt := func(name string, p []byte, attr mad.AttributeID, mod uint32, data []byte, n int) {
		t.Helper()
		got := sm.drOK(p, mad.MethodSet, attr, mod, data)
		if string(got[:n]) != string(data[:n]) {
			t.Errorf("%s Set answered % x", name, got[:n])
		}
		got = sm.drOK(p, mad.MethodGet, attr, mod, nil)
		if string(got[:n]) != string(data[:n]) {
			t.Errorf("%s reads back % x, want % x", name, got[:n], data[:n])
		}
	}
	seq := func(n int, start byte) []byte {
		b := make([]byte, 64)
		for i := range n {
			b[i] = start + byte(i)
		}
		return b
	}
	rt("switch P_Key table port 3", sw, mad.SMAttrPKeyTable, mad.PKeyTableModifier(3, 0), seq(64, 0x80), 64)
	rt("CA P_Key table block 1", path(), mad.SMAttrPKeyTable, 1, seq(64, 0x10), 64)
	rt("switch SL2VL 1->3", sw, mad.SMAttrSLToVLTable, mad.SLToVLModifier(1, 3), seq(8, 0x11), 8)
	rt("CA SL2VL", path(), mad.SMAttrSLToVLTable, 0, seq(8, 0x22), 8)
	var arb mad.VLArbTable
	for i := range 8 {
		arb.Entry[i] = mad.VLArbEntry{VL: uint8(7 - i), Weight: uint8(10 + i)}
	}
	ab := make([]byte, 64)
	arb.Encode(ab)
	rt("switch VLArb high", sw, mad.SMAttrVLArbTable, mad.VLArbModifier(2, mad.VLArbHighEntries0to31), ab, 16)
	rt("LFT block 1", sw, mad.SMAttrLinearFT, 1, seq(64, 0), 64)
	mft := make([]byte, 64)
	mft[0], mft[1], mft[63] = 0x00, 0x0E, 0x02
	rt("MFT block 3", sw, mad.SMAttrMulticastFT, mad.MulticastFTModifier(0, 3), mft, 64)
	gi := make([]byte, 64)
	copy(gi, sm.drOK(path(), mad.MethodGet, mad.SMAttrGUIDInfo, 0, nil)[:8])
	gi[15] = 0x77
	rt("GUIDInfo entry 1", path(), mad.SMAttrGUIDInfo, 0, gi, 64)
	// The switch's SL2VL 2->3 is still the default.
	if got := sm.drOK(sw, mad.MethodGet, mad.SMAttrSLToVLTable, mad.SLToVLModifier(2, 3), nil); got[0] != 0x01 {
		t.Errorf("untouched SL2VL table % x", got[:8])
	}
	// NodeDescription is the topology's name.
	nd, _ := mad.ParseNodeDescription(sm.drOK(sw, mad.MethodGet, mad.SMAttrNodeDescription, 0, nil))
	if nd.Description != "Switch1" {
		t.Errorf("NodeDescription %q", nd.Description)
	}
}

// TestLinkNegotiation: a link's active width and speed are the best both
// ends enable, as the topology's options and comments set them.
func TestLinkNegotiation(t *testing.T) {
	f := openFabric(t, `Switch 3 "S"
[1] "A"[1] # "a" lid 1 4xDDR
[2] "A"[2] # "a" lid 1 12xEDR
[3] "A"[3] w=1

Hca 3 "A"
[1] "S"[1]
[2] "S"[2] # lid 5 lmc 1 "S" lid 1 4xFDR
[3] "S"[3]
`)
	s, a := f.NodeByName("S"), f.NodeByName("A")
	want := []struct{ w, s, e uint8 }{
		{mad.LinkWidth4X, mad.LinkSpeedSDR, 0}, // A port 1 enables SDR only
		{mad.LinkWidth4X, mad.LinkSpeedQDR, 1},
		{mad.LinkWidth1X, mad.LinkSpeedSDR, 0},
	}
	for i, w := range want {
		for _, n := range []*Node{s, a} {
			pi, _ := mad.ParsePortInfo(mustQuery(t, f, n, mad.SMAttrPortInfo, uint32(i+1)))
			if pi.LinkWidthActive != w.w || pi.LinkSpeedActive != w.s || pi.LinkSpeedExtActive != w.e {
				t.Errorf("%s port %d: width %d speed %d ext %d, want %+v", n.Name(), i+1, pi.LinkWidthActive, pi.LinkSpeedActive, pi.LinkSpeedExtActive, w)
			}
		}
	}
	// The LID and LMC the file gives a CA port are set, as ibsim sets them.
	pi, _ := mad.ParsePortInfo(mustQuery(t, f, a, mad.SMAttrPortInfo, 2))
	if pi.LID != 5 || pi.LMC != 1 {
		t.Errorf("A port 2: LID %d LMC %d", pi.LID, pi.LMC)
	}
}

// TestInitialPortStateChange: a switch whose ports came up when the fabric
// started says so in SwitchInfo, as after power-on.
func TestInitialPortStateChange(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net"))
	for _, name := range []string{"Switch1", "Switch2"} {
		si, _ := mad.ParseSwitchInfo(mustQuery(t, f, f.NodeByName(name), mad.SMAttrSwitchInfo, 0))
		if !si.PortStateChange || si.LinearFDBCap != linearFDBCap || si.LinearFDBTop != 0 {
			t.Errorf("%s: %+v", name, si)
		}
	}
}

// TestConcurrentFlaps has clients query their leaf switches while spine
// links go down and up and other goroutines read the fabric's state: the
// leaf queries never cross a spine link, so every one is answered.
func TestConcurrentFlaps(t *testing.T) {
	f := openFabric(t, fatTree(2, 2, 4))
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(2)
	go func() {
		defer side.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			leaf := f.NodeByName(fmt.Sprintf("Leaf%d", 1+i%2))
			if err := f.SetLink(leaf, 5+i%2, i%4 < 2); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer side.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range f.Nodes() {
				if _, err := f.Query(n, mad.SMAttrPortInfo, 1); err != nil {
					t.Error(err)
					return
				}
				if n.Type() == mad.NodeTypeSwitch {
					if _, err := f.Query(n, mad.SMAttrSwitchInfo, 0); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for _, n := range f.Nodes() {
		if n.Type() != mad.NodeTypeCA {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := make(chan *Datagram, 16)
			c, err := f.Attach(n, 1, func(d *Datagram) { ch <- d })
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for i := range 100 {
				b := make([]byte, mad.Size)
				mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrPortInfo, 5, uint64(i), path(1))
				for errors.Is(c.Send(&Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b}), ErrBusy) {
				}
				d := <-ch
				if d.Status != 0 || mad.MAD(d.MAD).TransactionID() != uint64(i) || mad.SMP(d.MAD).Status() != 0 {
					t.Errorf("%s: answer %d: status %d/%#x TID %d", n.Name(), i, d.Status, mad.SMP(d.MAD).Status(), mad.MAD(d.MAD).TransactionID())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	side.Wait()
}

// TestSMPsBeforeActive: with LIDs and LFTs set but every port still INIT,
// LID-routed SMPs (VL15) reach every LID while GMPs (the PMA's) are
// dropped at the first link; ARMED is not enough for them either, ACTIVE
// is.
func TestSMPsBeforeActive(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	sm := newSM(t, f, "Hca1", 1)
	sn := sm.route()
	far := sn.caPorts[f.NodeByName("Hca2").PortGUID(1)].lid
	if r := sm.lidReq(far, mad.ClassSubnLID, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil); r.Status != 0 {
		t.Fatal("LID-routed SMP through INIT ports dropped")
	}
	pma := func() int {
		data := make([]byte, 64)
		data[1] = 1
		return sm.lidReq(far, mad.ClassPerf, mad.MethodGet, mad.PerfAttrPortCounters, 0, data).Status
	}
	if st := pma(); st != StatusTimeout {
		t.Fatalf("GMP through INIT ports: status %d", st)
	}
	sm.noActivate = false
	sm.activate(sn, mad.PortStateArmed)
	if st := pma(); st != StatusTimeout {
		t.Fatalf("GMP through ARMED ports: status %d", st)
	}
	sm.activate(sn, mad.PortStateActive)
	if st := pma(); st != 0 {
		t.Fatalf("GMP through ACTIVE ports: status %d", st)
	}
}

// TestMKeyLease: at a violation the lease period starts; when it passes
// with no SMP carrying the key, the protect bits drop to 0 and Gets pass
// again (the key itself stays).
func TestMKeyLease(t *testing.T) {
	topo, err := ParseTopology(strings.NewReader(readFile(t, "testdata/net")), "net")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	f, err := New(topo, &Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	sm := newSM(t, f, "Hca1", 1)
	p := path(1, 2)
	pi, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil))
	pi.MKey, pi.MKeyProtectBits, pi.MKeyLeasePeriod = 0x55, 2, 10
	b := make([]byte, 64)
	pi.Encode(b)
	sm.drOK(p, mad.MethodSet, mad.SMAttrPortInfo, 0, b)
	if sm.dr(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil) != nil {
		t.Fatal("Get without the key answered at protect bits 2")
	}
	advance(9 * time.Second)
	if sm.dr(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil) != nil {
		t.Fatal("answered before the lease ran out")
	}
	advance(2 * time.Second)
	r := sm.dr(p, mad.MethodGet, mad.SMAttrPortInfo, 0, nil)
	if r == nil {
		t.Fatal("still protected after the lease ran out")
	}
	got, _ := mad.ParsePortInfo(r.Data())
	if got.MKeyProtectBits != 0 || got.MKey != 0x55 {
		t.Errorf("after the lease: protect bits %d, M_Key %#x", got.MKeyProtectBits, got.MKey)
	}
}
