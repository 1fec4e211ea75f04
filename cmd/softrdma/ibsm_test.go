package main

// A tiny subnet manager for the tests, over fabric.Attach: a copy of
// fabric/remote's (fabric/remote/sm_test.go), itself the one package
// fabric's own tests use, on the exported API.

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/wire/mad"
)

// testSM is a tiny subnet manager over Attach and Send: one request at a
// time, each answered (or reported timed out) before the next.
type testSM struct {
	t   testing.TB
	f   *fabric.Fabric
	c   *fabric.Client
	ch  chan *fabric.Datagram
	tid uint64
	lid uint16 // the SM port's LID once assigned
	// traps are the traps that arrived while the SM awaited answers.
	traps []*fabric.Datagram
	// noActivate stops sweep before the port states (route).
	noActivate bool
}

func newSM(t testing.TB, f *fabric.Fabric, node string, port int) *testSM {
	t.Helper()
	sm := &testSM{t: t, f: f, ch: make(chan *fabric.Datagram, 64)}
	c, err := f.Attach(f.NodeByName(node), port, func(d *fabric.Datagram) { sm.ch <- d })
	if err != nil {
		t.Fatal(err)
	}
	sm.c = c
	t.Cleanup(func() { c.Close() })
	return sm
}

// await returns the next datagram for the SM with transaction ID tid;
// anything else (traps) is passed to other.
func (sm *testSM) await(tid uint64, other func(*fabric.Datagram)) *fabric.Datagram {
	sm.t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-sm.ch:
			if mad.MAD(d.MAD).TransactionID() == tid {
				return d
			}
			if other != nil {
				other(d)
			} else if mad.MAD(d.MAD).Method() == mad.MethodTrap {
				sm.traps = append(sm.traps, d)
			} else {
				sm.t.Fatalf("unexpected datagram: %v", mad.MAD(d.MAD).Fields())
			}
		case <-timer.C:
			sm.t.Fatalf("no answer to TID %#x", tid)
			return nil
		}
	}
}

// do sends d and returns the answer: a response, or d itself back with
// StatusTimeout.
func (sm *testSM) do(d *fabric.Datagram) *fabric.Datagram {
	sm.t.Helper()
	if err := sm.c.Send(d); err != nil {
		sm.t.Fatal(err)
	}
	return sm.await(mad.MAD(d.MAD).TransactionID(), nil)
}

// dr sends a directed-route SMP along path and returns the response SMP
// (nil on a timeout).
func (sm *testSM) dr(path []byte, method mad.Method, attr mad.AttributeID, mod uint32, data []byte) mad.SMP {
	sm.t.Helper()
	sm.tid++
	b := make([]byte, mad.Size)
	s, err := mad.NewDirectedSMP(b, method, attr, mod, sm.tid, path)
	if err != nil {
		sm.t.Fatal(err)
	}
	copy(s.Data(), data)
	r := sm.do(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, PKey: 0xFFFF, MAD: b})
	if r.Status != 0 {
		return nil
	}
	rs := mad.SMP(r.MAD)
	if !rs.Direction() || rs.MAD().Method() != mad.MethodGetResp || rs.HopPointer() != 0 {
		sm.t.Fatalf("DR response: D %v method %v hop pointer %d", rs.Direction(), rs.MAD().Method(), rs.HopPointer())
	}
	return rs
}

// drOK is dr that fails the test unless the answer has status 0.
func (sm *testSM) drOK(path []byte, method mad.Method, attr mad.AttributeID, mod uint32, data []byte) []byte {
	sm.t.Helper()
	r := sm.dr(path, method, attr, mod, data)
	if r == nil {
		sm.t.Fatalf("%v %s mod %d along %v: timed out", method, mad.AttrName(mad.ClassSubnDirected, attr), mod, path)
	}
	if r.Status() != 0 {
		sm.t.Fatalf("%v %s mod %d along %v: status %#x", method, mad.AttrName(mad.ClassSubnDirected, attr), mod, path, r.Status())
	}
	return append([]byte(nil), r.Data()...)
}

// lidReq sends a LID-routed MAD of class c (SMP on QP0, or PerfMgt on
// QP1) from the SM's port and returns the answer.
func (sm *testSM) lidReq(dlid uint16, c mad.Class, method mad.Method, attr mad.AttributeID, mod uint32, data []byte) *fabric.Datagram {
	sm.t.Helper()
	sm.tid++
	b := make([]byte, mad.Size)
	m := mad.MAD(b)
	b[0], b[2] = 1, 1
	m.SetMgmtClass(c)
	m.SetMethod(method)
	m.SetTransactionID(sm.tid)
	m.SetAttributeID(attr)
	m.SetAttributeModifier(mod)
	qp := uint32(0)
	if c == mad.ClassPerf {
		qp = 1
		copy(b[mad.PerfDataOffset:], data)
	} else {
		copy(b[mad.SMPDataOffset:], data)
	}
	return sm.do(&fabric.Datagram{SLID: sm.lid, DLID: dlid, DQP: qp, SQP: qp, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b})
}

func drPath(hops ...int) []byte {
	p := []byte{0}
	for _, h := range hops {
		p = append(p, byte(h))
	}
	return p
}

// discovered is what the SM learns of one node.
type smNode struct {
	info  mad.NodeInfo
	path  []byte
	links map[int]smEnd // switch port -> neighbour
	lid   uint16        // switches: port 0's
}

type smEnd struct {
	guid uint64
	port int
}

type smSubnet struct {
	nodes    map[uint64]*smNode // by node GUID
	order    []uint64
	caPorts  map[uint64]smCAPort // by port GUID
	caOrder  []uint64
	lidOwner map[uint16]uint64 // LID -> port GUID (switch: node GUID)
	maxLID   uint16
}

type smCAPort struct {
	node uint64
	num  int
	path []byte
	sw   smEnd // the switch port it is linked to
	lid  uint16
}

// sweep discovers the subnet by directed route, assigns LIDs, programs
// every LFT and brings every port to ACTIVE, as an SM does.
func (sm *testSM) sweep() *smSubnet {
	sm.t.Helper()
	sn := &smSubnet{nodes: map[uint64]*smNode{}, caPorts: map[uint64]smCAPort{}, lidOwner: map[uint16]uint64{}}
	type item struct {
		path []byte
		from smEnd
	}
	queue := []item{{path: drPath()}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		ni, err := mad.ParseNodeInfo(sm.drOK(it.path, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil))
		if err != nil {
			sm.t.Fatal(err)
		}
		if ni.NodeType == mad.NodeTypeCA {
			if cp, seen := sn.caPorts[ni.PortGUID]; !seen {
				sn.caPorts[ni.PortGUID] = smCAPort{node: ni.NodeGUID, num: int(ni.LocalPortNum), path: it.path, sw: it.from}
				sn.caOrder = append(sn.caOrder, ni.PortGUID)
			} else if cp.sw.guid == 0 {
				// The SM's own port, seen again from its switch.
				cp.sw = it.from
				sn.caPorts[ni.PortGUID] = cp
			}
			if _, seen := sn.nodes[ni.NodeGUID]; !seen {
				sn.nodes[ni.NodeGUID] = &smNode{info: ni, path: it.path, links: map[int]smEnd{}}
				sn.order = append(sn.order, ni.NodeGUID)
			}
			if it.from.guid != 0 {
				sn.nodes[it.from.guid].links[it.from.port] = smEnd{ni.NodeGUID, int(ni.LocalPortNum)}
			} else {
				// The SM's own CA: the subnet starts behind its port.
				queue = append(queue, item{path: drPath(int(ni.LocalPortNum)), from: smEnd{ni.NodeGUID, int(ni.LocalPortNum)}})
			}
			continue
		}
		if it.from.guid != 0 {
			sn.nodes[it.from.guid].links[it.from.port] = smEnd{ni.NodeGUID, int(ni.LocalPortNum)}
		}
		if _, seen := sn.nodes[ni.NodeGUID]; seen {
			continue
		}
		n := &smNode{info: ni, path: it.path, links: map[int]smEnd{}}
		sn.nodes[ni.NodeGUID] = n
		sn.order = append(sn.order, ni.NodeGUID)
		for port := 1; port <= int(ni.NumPorts); port++ {
			pi, err := mad.ParsePortInfo(sm.drOK(it.path, mad.MethodGet, mad.SMAttrPortInfo, uint32(port), nil))
			if err != nil {
				sm.t.Fatal(err)
			}
			if pi.PortPhysicalState != mad.PhysStateLinkUp {
				continue
			}
			queue = append(queue, item{path: append(append([]byte(nil), it.path...), byte(port)), from: smEnd{ni.NodeGUID, port}})
		}
	}
	// LIDs: switches first, then CA ports, in discovery order; the SM's
	// own port gets its LID like any other.
	next := uint16(1)
	for _, g := range sn.order {
		if n := sn.nodes[g]; n.info.NodeType == mad.NodeTypeSwitch {
			n.lid = next
			sn.lidOwner[next] = g
			next++
		}
	}
	for _, g := range sn.caOrder {
		cp := sn.caPorts[g]
		cp.lid = next
		sn.caPorts[g] = cp
		sn.lidOwner[next] = g
		next++
	}
	sn.maxLID = next - 1
	sm.lid = sn.caPorts[sn.caOrder[0]].lid
	setLID := func(p []byte, mod uint32, lid uint16) {
		pi, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrPortInfo, mod, nil))
		pi.LID, pi.MasterSMLID, pi.PortState = lid, sm.lid, mad.PortStateNoChange
		b := make([]byte, 64)
		pi.Encode(b)
		got, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodSet, mad.SMAttrPortInfo, mod, b))
		if got.LID != lid || got.MasterSMLID != sm.lid {
			sm.t.Fatalf("PortInfo Set along %v: LID %d SM LID %d, want %d %d", p, got.LID, got.MasterSMLID, lid, sm.lid)
		}
	}
	for _, g := range sn.order {
		if n := sn.nodes[g]; n.info.NodeType == mad.NodeTypeSwitch {
			setLID(n.path, 0, n.lid)
		}
	}
	for _, g := range sn.caOrder {
		cp := sn.caPorts[g]
		setLID(cp.path, uint32(cp.num), cp.lid)
	}
	// Routes: min-hop from every switch to every switch, then each LID
	// to the switch it hangs off.
	var switches []uint64
	for _, g := range sn.order {
		if sn.nodes[g].info.NodeType == mad.NodeTypeSwitch {
			switches = append(switches, g)
		}
	}
	// nextPort[s][t] is the port of s toward switch t.
	nextPort := map[uint64]map[uint64]int{}
	for _, t := range switches {
		// BFS from t; a switch's port toward t is its link to a switch
		// one hop nearer.
		dist := map[uint64]int{t: 0}
		frontier := []uint64{t}
		for len(frontier) > 0 {
			var nf []uint64
			for _, s := range frontier {
				for _, e := range sn.nodes[s].links {
					if sn.nodes[e.guid].info.NodeType != mad.NodeTypeSwitch {
						continue
					}
					if _, ok := dist[e.guid]; !ok {
						dist[e.guid] = dist[s] + 1
						nf = append(nf, e.guid)
					}
				}
			}
			frontier = nf
		}
		for _, s := range switches {
			if nextPort[s] == nil {
				nextPort[s] = map[uint64]int{}
			}
			best := 0
			for port := 1; port <= int(sn.nodes[s].info.NumPorts); port++ {
				e, ok := sn.nodes[s].links[port]
				if ok && sn.nodes[e.guid].info.NodeType == mad.NodeTypeSwitch && dist[e.guid] == dist[s]-1 {
					best = port
					break
				}
			}
			nextPort[s][t] = best
		}
	}
	for _, s := range switches {
		lft := make([]byte, (int(sn.maxLID)/64+1)*64)
		for i := range lft {
			lft[i] = mad.LinearFTNoRoute
		}
		for lid := uint16(1); lid <= sn.maxLID; lid++ {
			owner := sn.lidOwner[lid]
			var target uint64
			var lastPort int
			if n, ok := sn.nodes[owner]; ok && n.info.NodeType == mad.NodeTypeSwitch {
				target = owner
			} else {
				cp := sn.caPorts[owner]
				target, lastPort = cp.sw.guid, cp.sw.port
			}
			switch {
			case target == s && lastPort == 0:
				lft[lid] = 0
			case target == s:
				lft[lid] = byte(lastPort)
			default:
				lft[lid] = byte(nextPort[s][target])
			}
		}
		n := sn.nodes[s]
		si, _ := mad.ParseSwitchInfo(sm.drOK(n.path, mad.MethodGet, mad.SMAttrSwitchInfo, 0, nil))
		si.LinearFDBTop = sn.maxLID
		b := make([]byte, 64)
		si.Encode(b) // PortStateChange as read: writing 1 clears it
		if got, _ := mad.ParseSwitchInfo(sm.drOK(n.path, mad.MethodSet, mad.SMAttrSwitchInfo, 0, b)); got.PortStateChange || got.LinearFDBTop != sn.maxLID {
			sm.t.Fatalf("SwitchInfo after Set: %+v", got)
		}
		for blk := 0; blk*64 < len(lft); blk++ {
			got := sm.drOK(n.path, mad.MethodSet, mad.SMAttrLinearFT, uint32(blk), lft[blk*64:blk*64+64])
			if string(got) != string(lft[blk*64:blk*64+64]) {
				sm.t.Fatalf("LFT block %d of %#x did not stick", blk, s)
			}
		}
	}
	sm.activate(sn)
	return sn
}

// activate moves every linked port to ARMED, then to ACTIVE (or through
// the states given).
func (sm *testSM) activate(sn *smSubnet, states ...uint8) {
	sm.t.Helper()
	if sm.noActivate {
		return
	}
	var switches []uint64
	for _, g := range sn.order {
		if sn.nodes[g].info.NodeType == mad.NodeTypeSwitch {
			switches = append(switches, g)
		}
	}
	if len(states) == 0 {
		states = []uint8{mad.PortStateArmed, mad.PortStateActive}
	}
	for _, state := range states {
		set := func(p []byte, mod uint32) {
			pi, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrPortInfo, mod, nil))
			pi.PortState = state
			b := make([]byte, 64)
			pi.Encode(b)
			if r := sm.dr(p, mad.MethodSet, mad.SMAttrPortInfo, mod, b); r == nil || r.Status() != 0 {
				sm.t.Fatalf("set state %d along %v mod %d: from %+v", state, p, mod, pi)
			}
			got, _ := mad.ParsePortInfo(sm.drOK(p, mad.MethodGet, mad.SMAttrPortInfo, mod, nil))
			if got.PortState != state {
				sm.t.Fatalf("port along %v mod %d: state %d, want %d", p, mod, got.PortState, state)
			}
		}
		for _, s := range switches {
			n := sn.nodes[s]
			for port := range n.links {
				set(n.path, uint32(port))
			}
		}
		for _, g := range sn.caOrder {
			cp := sn.caPorts[g]
			set(cp.path, uint32(cp.num))
		}
	}
}
