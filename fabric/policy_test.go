package fabric

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// This file programs the fabric from package sm/policy's objects with the
// test SM (partitions.conf and opensm.conf QoS options to P_Key tables,
// partition enforcement, SL2VL and VL arbitration), then shows with verbs
// devices that the fabric and the HCAs enforce them.

// smPolicyPort is a port the SM programs: the policy's description of it,
// the DR path to its node and its number.
type smPolicyPort struct {
	ref  policy.PortRef
	path []byte
	num  uint8 // the port number (CA: its own; switch: the port)
	sw   *smNode
}

// policyPorts returns every port the SM swept: CA ports, switches' port 0
// and their linked external ports.
func (sm *testSM) policyPorts(sn *smSubnet) []smPolicyPort {
	sm.t.Helper()
	var out []smPolicyPort
	caRef := func(g uint64) (policy.PortRef, []byte) {
		cp := sn.caPorts[g]
		ni := sn.nodes[cp.node].info
		pi, err := mad.ParsePortInfo(sm.drOK(cp.path, mad.MethodGet, mad.SMAttrPortInfo, uint32(cp.num), nil))
		if err != nil {
			sm.t.Fatal(err)
		}
		ref := policy.EndPortRef(ni, pi, uint8(cp.num), g == sn.caOrder[0])
		ref.PortGUID = g // the node's NodeInfo came through one of its ports
		return ref, cp.path
	}
	for _, g := range sn.caOrder {
		ref, p := caRef(g)
		out = append(out, smPolicyPort{ref: ref, path: p, num: ref.Port})
	}
	for _, g := range sn.order {
		n := sn.nodes[g]
		if n.info.NodeType != mad.NodeTypeSwitch {
			continue
		}
		si, err := mad.ParseSwitchInfo(sm.drOK(n.path, mad.MethodGet, mad.SMAttrSwitchInfo, 0, nil))
		if err != nil {
			sm.t.Fatal(err)
		}
		pi0, _ := mad.ParsePortInfo(sm.drOK(n.path, mad.MethodGet, mad.SMAttrPortInfo, 0, nil))
		out = append(out, smPolicyPort{path: n.path, num: 0, sw: n, ref: policy.SwitchPortRef(n.info, si, pi0, 0, nil)})
		for port := 1; port <= int(n.info.NumPorts); port++ {
			e, linked := n.links[port]
			if !linked {
				continue
			}
			pi, _ := mad.ParsePortInfo(sm.drOK(n.path, mad.MethodGet, mad.SMAttrPortInfo, uint32(port), nil))
			var peer *policy.PortRef
			if sn.nodes[e.guid].info.NodeType != mad.NodeTypeSwitch {
				for pg, cp := range sn.caPorts {
					if cp.node == e.guid && cp.num == e.port {
						r, _ := caRef(pg)
						peer = &r
					}
				}
			}
			ref := policy.SwitchPortRef(n.info, si, pi, uint8(port), peer)
			out = append(out, smPolicyPort{ref: ref, path: n.path, num: uint8(port), sw: n})
		}
	}
	return out
}

// applyPolicy writes partitions and QoS to every port, as an SM does after
// a sweep: P_Key tables (end ports, and switch ports that enforce, with
// their enforcement bits), and with qos enabled operational VLs, the high
// limit, SL2VL and VL arbitration tables.
func (sm *testSM) applyPolicy(sn *smSubnet, ps *policy.Partitions, q *policy.QoS) {
	sm.t.Helper()
	b := make([]byte, 64)
	for _, pp := range sm.policyPorts(sn) {
		ref := pp.ref
		isSw := pp.sw != nil
		pkMod := func(block int) uint32 {
			if isSw {
				return mad.PKeyTableModifier(pp.num, uint16(block))
			}
			return uint32(block)
		}
		in, out := ps.Enforce(ref)
		keys := ps.PKeys(ref)
		if keys != nil || !isSw || pp.num == 0 {
			blocks := policy.PKeyTableBlocks(keys)
			capBlocks := max(1, (ref.PKeyCap+31)/32)
			for blk := range capBlocks {
				var x mad.PKeyTable
				if blk < len(blocks) {
					x = blocks[blk]
				}
				clear(b)
				x.Encode(b)
				sm.drOK(pp.path, mad.MethodSet, mad.SMAttrPKeyTable, pkMod(blk), b)
			}
		}
		pi, _ := mad.ParsePortInfo(sm.drOK(pp.path, mad.MethodGet, mad.SMAttrPortInfo, uint32(pp.num), nil))
		pi.PortState = mad.PortStateNoChange
		if isSw && pp.num != 0 {
			pi.PartitionEnforcementInbound, pi.PartitionEnforcementOutbound = in, out
		}
		var pq policy.PortQoS
		if q != nil && q.Enabled && (!isSw || pp.num != 0 || ref.EnhancedPort0) {
			pq = q.Port(ref)
			pi.OperationalVLs, pi.VLHighLimit = pq.OperationalVLs, pq.HighLimit
		}
		clear(b)
		pi.Encode(b)
		sm.drOK(pp.path, mad.MethodSet, mad.SMAttrPortInfo, uint32(pp.num), b)
		if q == nil || !q.Enabled || isSw && pp.num == 0 && !ref.EnhancedPort0 {
			continue
		}
		clear(b)
		pq.SL2VL.Encode(b)
		if !isSw {
			sm.drOK(pp.path, mad.MethodSet, mad.SMAttrSLToVLTable, 0, b)
		} else {
			for inPort := 0; inPort <= int(pp.sw.info.NumPorts); inPort++ {
				sm.drOK(pp.path, mad.MethodSet, mad.SMAttrSLToVLTable, mad.SLToVLModifier(uint8(inPort), pp.num), b)
			}
		}
		for i, blk := range pq.VLArbHigh {
			clear(b)
			blk.Encode(b)
			sm.drOK(pp.path, mad.MethodSet, mad.SMAttrVLArbTable, mad.VLArbModifier(pp.num, uint16(mad.VLArbHighEntries0to31+i)), b)
		}
		for i, blk := range pq.VLArbLow {
			clear(b)
			blk.Encode(b)
			sm.drOK(pp.path, mad.MethodSet, mad.SMAttrVLArbTable, mad.VLArbModifier(pp.num, uint16(mad.VLArbLowEntries0to31+i)), b)
		}
	}
}

// polHCA is a verbs device on a CA port of a policy-programmed fabric,
// with its link (for link/ib's receive counters).
type polHCA struct {
	*e2eHCA
	link *ib.Link
}

// openPolicyHCA opens a verbs device at name's port 1 and waits until its
// port shows the P_Key table the policy gives.
func openPolicyHCA(t testing.TB, dn *dataNet, name string, want []uint16) *polHCA {
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
	d, err := verbs.Open(l, &verbs.Options{Name: "pol-" + name})
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
	if h.mr, err = h.pd.RegMR(make([]byte, 1<<16), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, name+"'s port ACTIVE with the policy's P_Keys", func() bool {
		pa, err := d.QueryPort(1)
		if err != nil || pa.State != verbs.PortActive || pa.LID != h.lid || len(pa.PKeys) < len(want) {
			return false
		}
		for i, k := range want {
			if uint16(pa.PKeys[i]) != k {
				return false
			}
		}
		return true
	})
	return &polHCA{e2eHCA: h, link: l}
}

// pkeyIndex returns the index of key in h's P_Key table.
func (h *polHCA) pkeyIndex(t testing.TB, key uint16) int {
	t.Helper()
	pa, err := h.dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range pa.PKeys {
		if uint16(k) == key {
			return i
		}
	}
	t.Fatalf("P_Key %#x not in the table %v", key, pa.PKeys)
	return -1
}

// rcPair connects an RC QP of a (P_Key index ia) to one of b (index ib),
// with a short retry (two tries of ~4 ms) so that a dropped stream fails
// quickly.
func rcPair(t testing.TB, a, b *polHCA, ia, ib int) (*verbs.QP, *verbs.QP) {
	t.Helper()
	qa, qb := a.qp(t, verbs.RC), b.qp(t, verbs.RC)
	for _, x := range []struct {
		qp   *verbs.QP
		idx  int
		rqpn wire.QPN
		dlid uint16
	}{{qa, ia, qb.QPN(), b.lid}, {qb, ib, qa.QPN(), a.lid}} {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.StateInit, PKeyIndex: x.idx, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.StateRTR, PathMTU: verbs.MTU1024, DestQPN: x.rqpn, RQPSN: 1,
				AH: verbs.AHAttr{DLID: x.dlid, PortNum: 1}, MaxDestRdAtomic: 1, MinRNRTimer: 1},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
					verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1, Timeout: 10, RetryCnt: 1, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := x.qp.Modify(&s.attr, s.mask); err != nil {
				t.Fatalf("RC to %v: %v", s.attr.State, err)
			}
		}
	}
	return qa, qb
}

// udQP returns a UD QP of h at RTS on P_Key index idx with Q_Key qkey.
func udQP(t testing.TB, h *polHCA, idx int, qkey uint32) *verbs.QP {
	t.Helper()
	qp := h.qp(t, verbs.UD)
	for _, s := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		mask := verbs.AttrState
		switch s {
		case verbs.StateInit:
			mask |= verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
		case verbs.StateRTS:
			mask |= verbs.AttrSQPSN
		}
		if err := qp.Modify(&verbs.QPAttr{State: s, PKeyIndex: idx, PortNum: 1, QKey: wire.QKey(qkey)}, mask); err != nil {
			t.Fatal(err)
		}
	}
	return qp
}

// pollAny waits up to d for one completion on h's CQ; ok false if none.
func (h *polHCA) pollAny(d time.Duration) (verbs.WC, bool) {
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(d)
	for h.cq.Poll(wcs) == 0 {
		if time.Now().After(deadline) {
			return verbs.WC{}, false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return wcs[0], true
}

// udSend posts one UD SEND of msg from qa (h) to qpn at dlid with qkey.
func udSend(t testing.TB, h *polHCA, qa *verbs.QP, dlid uint16, qpn wire.QPN, qkey uint32, msg string) {
	t.Helper()
	ah, err := h.pd.CreateAH(verbs.AHAttr{DLID: dlid, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(h.mr.Buf()[1000:], msg)
	if err := qa.PostSend([]verbs.SendWR{{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{h.mr.SGE(1000, len(msg))}, AH: ah, RemoteQPN: qpn, RemoteQKey: wire.QKey(qkey)}}); err != nil {
		t.Fatal(err)
	}
	h.poll(t, "UD SEND")
}

// partitionsConf is the partitions of TestPartitionsOnFabric: Red holds
// Hca1 (the SM's, on Switch1) and Hca2 (Switch2), Blue Hca3 (Switch1) and
// Hca4 (Switch2); in Green Hca1 is a full member, Hca2 and Hca4 limited.
func partitionsConf(f *Fabric) string {
	g := func(name string) string { return fmt.Sprintf("%#x", f.NodeByName(name).PortGUID(1)) }
	return fmt.Sprintf(`# the test's partitions
Default=0x7fff : ALL=limited, SELF=full ;
Red=0x0001 : %s=full, %s=full ;
Blue=0x0002, defmember=full : %s, %s ;
Green=0x0003 : %s=full,
	%s=limited, %s ;
`, g("Hca1"), g("Hca2"), g("Hca3"), g("Hca4"), g("Hca1"), g("Hca2"), g("Hca4"))
}

// TestPartitionsOnFabric: partitions from a partitions.conf, programmed
// by the test SM through package policy on net.2sw2path4hca: RC and UD
// work inside a partition; between partitions the switches drop the
// packets (PortXmitConstraintErrors by PMA, DataStats.PKey) and RC fails
// with retries exhausted; a limited member reaches a full member both
// ways, two limited members cannot talk (the receiving HCA drops it,
// link/ib's RxBadPKey); a QP cannot take a P_Key index its port lacks.
func TestPartitionsOnFabric(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"))
	ps, err := policy.ParsePartitions(strings.NewReader(partitionsConf(dn.f)))
	if err != nil {
		t.Fatal(err)
	}
	dn.sm.applyPolicy(dn.sn, ps, nil)
	h1 := openPolicyHCA(t, dn, "Hca1", []uint16{0xFFFF, 0x8001, 0x8003})
	h2 := openPolicyHCA(t, dn, "Hca2", []uint16{0x7FFF, 0x8001, 0x0003})
	h3 := openPolicyHCA(t, dn, "Hca3", []uint16{0x7FFF, 0x8002})
	h4 := openPolicyHCA(t, dn, "Hca4", []uint16{0x7FFF, 0x8002, 0x0003})
	// The switch ports facing the CAs enforce, those between switches not.
	for _, c := range []struct {
		sw   string
		port int
		want bool
	}{{"Switch1", 1, true}, {"Switch1", 2, true}, {"Switch2", 2, true}, {"Switch1", 3, false}, {"Switch2", 5, false}} {
		pi, _ := mad.ParsePortInfo(mustQuery(t, dn.f, dn.f.NodeByName(c.sw), mad.SMAttrPortInfo, uint32(c.port)))
		if pi.PartitionEnforcementInbound != c.want || pi.PartitionEnforcementOutbound != c.want {
			t.Errorf("%s port %d: enforcement %v/%v, want %v", c.sw, c.port, pi.PartitionEnforcementInbound, pi.PartitionEnforcementOutbound, c.want)
		}
	}
	red1, red2 := h1.pkeyIndex(t, 0x8001), h2.pkeyIndex(t, 0x8001)
	blue3, blue4 := h3.pkeyIndex(t, 0x8002), h4.pkeyIndex(t, 0x8002)

	t.Run("RC inside Red and Blue", func(t *testing.T) {
		for _, pair := range []struct {
			a, b   *polHCA
			ia, ib int
		}{{h1, h2, red1, red2}, {h3, h4, blue3, blue4}} {
			qa, qb := rcPair(t, pair.a, pair.b, pair.ia, pair.ib)
			if err := qb.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{pair.b.mr.SGE(0, 4096)}}}); err != nil {
				t.Fatal(err)
			}
			fill(pair.a.mr.Buf()[:3000], 5)
			if err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{pair.a.mr.SGE(0, 3000)}}}); err != nil {
				t.Fatal(err)
			}
			pair.a.poll(t, "RC SEND")
			if wc := pair.b.poll(t, "RC receive"); wc.ByteLen != 3000 {
				t.Fatalf("received %d bytes", wc.ByteLen)
			}
		}
	})
	t.Run("UD inside Blue", func(t *testing.T) {
		q3, q4 := udQP(t, h3, blue3, 0x1111), udQP(t, h4, blue4, 0x1111)
		if err := q4.PostRecv([]verbs.RecvWR{{ID: 3, SGL: []verbs.SGE{h4.mr.SGE(8000, 1100)}}}); err != nil {
			t.Fatal(err)
		}
		udSend(t, h3, q3, h4.lid, q4.QPN(), 0x1111, "blue")
		if wc := h4.poll(t, "UD receive"); wc.SLID != h3.lid {
			t.Fatalf("from LID %d", wc.SLID)
		}
	})
	t.Run("RC and UD between Red and Blue are dropped", func(t *testing.T) {
		before := dn.f.DataStats().PKey
		sw2p2 := dn.cnt("Switch2", 2).xmitConstraintErrors
		// RC: Hca1 (Red) to Hca4 (Blue), the request crossing both
		// switches: Switch2's port facing Hca4 refuses it.
		qa, qb := rcPair(t, h1, h4, red1, blue4)
		if err := qb.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{h4.mr.SGE(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{h1.mr.SGE(0, 100)}}}); err != nil {
			t.Fatal(err)
		}
		wc, ok := h1.pollAny(10 * time.Second)
		if !ok || wc.Status != verbs.RetryExcErr {
			t.Fatalf("RC SEND across partitions: completion %v %+v, want retry exceeded", ok, wc)
		}
		if wc, ok := h4.pollAny(50 * time.Millisecond); ok {
			t.Fatalf("Hca4 received across partitions: %+v", wc)
		}
		// UD: Hca3 (Blue) to Hca1 (Red) on the same switch.
		q3, q1 := udQP(t, h3, blue3, 0x2222), udQP(t, h1, red1, 0x2222)
		if err := q1.PostRecv([]verbs.RecvWR{{ID: 3, SGL: []verbs.SGE{h1.mr.SGE(8000, 1100)}}}); err != nil {
			t.Fatal(err)
		}
		sw1p1 := dn.cnt("Switch1", 1).xmitConstraintErrors
		udSend(t, h3, q3, h1.lid, q1.QPN(), 0x2222, "blue to red")
		if wc, ok := h1.pollAny(100 * time.Millisecond); ok {
			t.Fatalf("Hca1 received across partitions: %+v", wc)
		}
		// The drops are counted: DataStats, the ports' counters, and
		// the PMA's PortXmitConstraintErrors as an SM or perfquery
		// reads them.
		st := dn.f.DataStats()
		if st.PKey < before+3 { // the RC request and its retry, the UD
			t.Errorf("DataStats.PKey %d, was %d", st.PKey, before)
		}
		if got := dn.cnt("Switch2", 2).xmitConstraintErrors; got < sw2p2+2 {
			t.Errorf("Switch2 port 2 xmit constraint errors %d, was %d", got, sw2p2)
		}
		if got := dn.cnt("Switch1", 1).xmitConstraintErrors; got != sw1p1+1 {
			t.Errorf("Switch1 port 1 xmit constraint errors %d, was %d", got, sw1p1)
		}
		data := make([]byte, 64)
		data[1] = 1
		r := dn.sm.lidReq(dn.switchLID("Switch1"), mad.ClassPerf, mad.MethodGet, mad.PerfAttrPortCounters, 0, data)
		pc, _ := mad.ParsePortCounters(r.MAD[mad.PerfDataOffset:])
		if r.Status != 0 || pc.PortXmitConstraintErrors == 0 {
			t.Errorf("PMA of Switch1 port 1: status %d, %+v", r.Status, pc)
		}
	})
	t.Run("limited members", func(t *testing.T) {
		g1, g2, g4 := h1.pkeyIndex(t, 0x8003), h2.pkeyIndex(t, 0x0003), h4.pkeyIndex(t, 0x0003)
		q1, q2, q4 := udQP(t, h1, g1, 0x3333), udQP(t, h2, g2, 0x3333), udQP(t, h4, g4, 0x3333)
		for _, x := range []struct {
			h  *polHCA
			qp *verbs.QP
		}{{h1, q1}, {h2, q2}, {h4, q4}} {
			if err := x.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{x.h.mr.SGE(8000, 1100)}}}); err != nil {
				t.Fatal(err)
			}
		}
		// Limited Hca2 to full Hca1, and back.
		udSend(t, h2, q2, h1.lid, q1.QPN(), 0x3333, "limited to full")
		if wc := h1.poll(t, "full member's receive"); wc.SLID != h2.lid {
			t.Fatalf("from LID %d", wc.SLID)
		}
		udSend(t, h1, q1, h2.lid, q2.QPN(), 0x3333, "full to limited")
		if wc := h2.poll(t, "limited member's receive"); wc.SLID != h1.lid {
			t.Fatalf("from LID %d", wc.SLID)
		}
		// Limited Hca2 to limited Hca4: the switches pass it (the
		// partition is theirs), Hca4's port refuses it.
		bad := h4.link.Stats().RxBadPKey
		udSend(t, h2, q2, h4.lid, q4.QPN(), 0x3333, "limited to limited")
		if wc, ok := h4.pollAny(100 * time.Millisecond); ok {
			t.Fatalf("limited member received from a limited member: %+v", wc)
		}
		waitFor(t, "Hca4's RxBadPKey", func() bool { return h4.link.Stats().RxBadPKey == bad+1 })
		// RC between the limited Hca2 and the full Hca1 works.
		qa, qb := rcPair(t, h2, h1, g2, g1)
		if err := qb.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{h1.mr.SGE(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{h2.mr.SGE(0, 2000)}}}); err != nil {
			t.Fatal(err)
		}
		h2.poll(t, "RC SEND limited to full")
		h1.poll(t, "RC receive from a limited member")
	})
	t.Run("P_Key index the port lacks", func(t *testing.T) {
		pa, err := h3.dev.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []verbs.QPType{verbs.RC, verbs.UD} {
			qp := h3.qp(t, typ)
			attr := verbs.QPAttr{State: verbs.StateInit, PKeyIndex: len(pa.PKeys), PortNum: 1, QKey: 1}
			mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
			if typ == verbs.UD {
				mask |= verbs.AttrQKey
			}
			if err := qp.Modify(&attr, mask); !errors.Is(err, verbs.ErrInvalid) {
				t.Errorf("%v QP on P_Key index %d of %d: %v", typ, attr.PKeyIndex, len(pa.PKeys), err)
			}
		}
	})
}

// gmp builds a UD packet for QP1 (a GMP's frame) from slid to dlid with
// the given P_Key and Q_Key.
func gmp(t testing.TB, slid, dlid uint16, pkey uint16, qkey uint32) []byte {
	t.Helper()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.PKey(pkey), DestQP: 1},
		DETH: wire.DETHFields{QKey: wire.QKey(qkey), SrcQP: 1}}
	payload := make([]byte, mad.Size)
	b := make([]byte, wire.IBPacketLen(h.BTH.Opcode, len(payload), false))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{SL: 2, DLID: dlid, SLID: slid}}, &h, payload); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKeyViolationTraps: a CA port that receives a packet for QP1 with a
// P_Key its table does not match, or with a Q_Key other than the GSI's,
// counts it in PortInfo's P_KeyViolations or Q_KeyViolations and sends
// trap 257 or 258 to its SM, naming the source, the destination and the
// key; a good GMP does neither.
func TestKeyViolationTraps(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"))
	ps, err := policy.ParsePartitions(strings.NewReader(partitionsConf(dn.f)))
	if err != nil {
		t.Fatal(err)
	}
	dn.sm.applyPolicy(dn.sn, ps, nil)
	h2, h4 := dn.connect("Hca2", nil), dn.connect("Hca4", nil)
	hca4 := dn.f.NodeByName("Hca4")
	nextTrap := func(what string) mad.Notice {
		t.Helper()
		select {
		case d := <-dn.sm.ch:
			if m := mad.MAD(d.MAD); m.Method() != mad.MethodTrap || m.AttributeID() != mad.SMAttrNotice || d.SLID != h4.lid || d.DLID != dn.sm.lid {
				t.Fatalf("%s: got %v from LID %d to %d", what, m.Fields(), d.SLID, d.DLID)
			}
			nt, err := mad.ParseNotice(mad.SMP(d.MAD).Data())
			if err != nil {
				t.Fatal(err)
			}
			return nt
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no trap", what)
		}
		return mad.Notice{}
	}
	violations := func() (uint16, uint16) {
		pi, err := mad.ParsePortInfo(mustQuery(t, dn.f, hca4, mad.SMAttrPortInfo, 1))
		if err != nil {
			t.Fatal(err)
		}
		return pi.PKeyViolations, pi.QKeyViolations
	}
	// A limited member's GMP to a limited member: the switches pass it
	// (the partition is theirs), Hca4's port refuses the key.
	h2.send(t, gmp(t, h2.lid, h4.lid, 0x0003, mad.GSIQKey))
	nt := nextTrap("bad P_Key")
	k := nt.KeyViolation()
	if nt.TrapNumber != mad.TrapBadPKey || nt.Type != mad.NoticeTypeSecurity || nt.IssuerLID != h4.lid ||
		k.LID1 != h2.lid || k.LID2 != h4.lid || k.Key != 0x0003 || k.SL != 2 || k.QP1 != 1 || k.QP2 != 1 {
		t.Errorf("trap %d type %d issuer %d: %+v", nt.TrapNumber, nt.Type, nt.IssuerLID, k)
	}
	if p, q := violations(); p != 1 || q != 0 {
		t.Errorf("violations P_Key %d Q_Key %d, want 1 0", p, q)
	}
	h4.expect(t, 1) // the fabric delivers; the HCA's link drops it
	// A good P_Key with a Q_Key not the GSI's.
	h2.send(t, gmp(t, h2.lid, h4.lid, 0xFFFF, 0x1234))
	nt = nextTrap("bad Q_Key")
	if k := nt.KeyViolation(); nt.TrapNumber != mad.TrapBadQKey || k.Key != 0x1234 || k.LID1 != h2.lid {
		t.Errorf("trap %d: %+v", nt.TrapNumber, k)
	}
	if p, q := violations(); p != 1 || q != 1 {
		t.Errorf("violations P_Key %d Q_Key %d, want 1 1", p, q)
	}
	h4.expect(t, 1)
	// A good GMP: no trap, nothing counted.
	h2.send(t, gmp(t, h2.lid, h4.lid, 0xFFFF, mad.GSIQKey))
	h4.expect(t, 1)
	select {
	case d := <-dn.sm.ch:
		t.Fatalf("after a good GMP: %v", mad.MAD(d.MAD).Fields())
	case <-time.After(50 * time.Millisecond):
	}
	if p, q := violations(); p != 1 || q != 1 {
		t.Errorf("violations P_Key %d Q_Key %d after a good GMP", p, q)
	}
}

// TestUDQKeysOnFabric: the Q_Key rules of UD (IBTA 10.2.4, 11.4.1.1)
// between verbs devices on the fabric: a receive whose DETH Q_Key is not
// the QP's is dropped and counted (rx_qkey_drop); a send whose work
// request names a controlled Q_Key (high bit set) carries the sending QP's
// own Q_Key instead, so it arrives when that one matches and is dropped
// when it does not.
func TestUDQKeysOnFabric(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"))
	a := &polHCA{e2eHCA: openE2E(t, dn, "Hca1")}
	b := &polHCA{e2eHCA: openE2E(t, dn, "Hca2")}
	qa, qb := udQP(t, a, 0, 0x1111), udQP(t, b, 0, 0x1111)
	for i := range 4 {
		if err := qb.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(8000+2000*i, 1100)}}}); err != nil {
			t.Fatal(err)
		}
	}
	drops := func() uint64 { return b.dev.Stats().RxQKeyDrop.Load() }
	for _, c := range []struct {
		name    string
		qkey    uint32 // the work request's
		ownQKey uint32 // the sending QP's, set before
		arrives bool
	}{
		{"matching Q_Key", 0x1111, 0x1111, true},
		{"other Q_Key", 0x2222, 0x1111, false},
		{"controlled Q_Key: the QP's own, matching", 0x80000000, 0x1111, true},
		{"controlled Q_Key: the QP's own, not matching", 0xFFFFFFFF, 0x3333, false},
	} {
		if err := qa.Modify(&verbs.QPAttr{State: verbs.StateRTS, QKey: wire.QKey(c.ownQKey)}, verbs.AttrQKey); err != nil {
			t.Fatal(err)
		}
		before := drops()
		udSend(t, a, qa, b.lid, qb.QPN(), c.qkey, c.name)
		if c.arrives {
			b.poll(t, c.name)
			if drops() != before {
				t.Errorf("%s: counted a Q_Key drop", c.name)
			}
			continue
		}
		waitFor(t, c.name+": the Q_Key drop", func() bool { return drops() == before+1 })
		if wc, ok := b.pollAny(20 * time.Millisecond); ok {
			t.Errorf("%s: received %+v", c.name, wc)
		}
	}
}
