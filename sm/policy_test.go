package sm

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire/mad"
)

// This file's tests run softrdma verbs devices on the fabric the SM
// manages: verbs is imported by the tests only.

// partitionsConf: Red holds Hca1 (the SM's, on Switch1) and Hca2
// (Switch2), Blue Hca3 (Switch1) and Hca4 (Switch2); in Green Hca1 is a
// full member, Hca2 and Hca4 limited.
func partitionsConf(f *testFabric) string {
	g := func(name string) string { return fmt.Sprintf("%#x", f.NodeByName(name).PortGUID(1)) }
	return fmt.Sprintf(`Default=0x7fff : ALL=limited, SELF=full ;
Red=0x0001 : %s=full, %s=full ;
Blue=0x0002, defmember=full : %s, %s ;
Green=0x0003 : %s=full, %s=limited, %s ;
`, g("Hca1"), g("Hca2"), g("Hca3"), g("Hca4"), g("Hca1"), g("Hca2"), g("Hca4"))
}

func pkeysOf(t testing.TB, f *testFabric, n *fabric.Node) []uint16 {
	t.Helper()
	b, err := f.Query(n, mad.SMAttrPKeyTable, 0)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := mad.ParsePKeyTable(b)
	k := x.PKey[:]
	for len(k) > 0 && k[len(k)-1] == 0 {
		k = k[:len(k)-1]
	}
	return k
}

// udHCA is a verbs device at port 1 of a CA of the fabric.
type udHCA struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	lid uint16
}

func openUD(t *testing.T, f *testFabric, name string, lid uint16) *udHCA {
	t.Helper()
	p, err := f.ConnectHCA(f.NodeByName(name), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ib.New(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "smpol-" + name})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	h := &udHCA{dev: d, lid: lid}
	if h.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = d.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = h.pd.RegMR(make([]byte, 8192), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, name+" ACTIVE", func() bool {
		pa, err := d.QueryPort(1)
		return err == nil && pa.State == verbs.PortActive && pa.LID == lid
	})
	return h
}

// qp returns a UD QP at RTS using the port's P_Key pkey.
func (h *udHCA) qp(t *testing.T, pkey uint16) *verbs.QP {
	t.Helper()
	pa, err := h.dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, k := range pa.PKeys {
		if uint16(k) == pkey {
			idx = i
			break
		}
	}
	if idx < 0 {
		t.Fatalf("P_Key %#x not in the port's table %v", pkey, pa.PKeys)
	}
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		mask := verbs.AttrState
		switch s {
		case verbs.StateInit:
			mask |= verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
		case verbs.StateRTS:
			mask |= verbs.AttrSQPSN
		}
		if err := qp.Modify(&verbs.QPAttr{State: s, PortNum: 1, QKey: 0x1111, PKeyIndex: idx}, mask); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { qp.Destroy() })
	return qp
}

// udReaches sends one UD message from a (with P_Key ka) to b (with kb)
// and reports whether it arrived within wait.
func udReaches(t *testing.T, a, b *udHCA, ka, kb uint16, wait time.Duration) bool {
	t.Helper()
	qa, qb := a.qp(t, ka), b.qp(t, kb)
	if err := qb.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 1024)}}}); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAH(verbs.AHAttr{DLID: b.lid, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	msg := fmt.Appendf(nil, "from LID %d key %#x", a.lid, ka)
	copy(a.mr.Buf()[4096:], msg)
	if err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(4096, len(msg))}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x1111}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for a.cq.Poll(wcs) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("UD send: no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
	deadline = time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if b.cq.Poll(wcs) == 1 {
			if wcs[0].Status != verbs.Success || !bytes.Equal(b.mr.Buf()[40:40+len(msg)], msg) {
				t.Fatalf("UD receive %+v: %q", wcs[0], b.mr.Buf()[40:40+len(msg)])
			}
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
	return false
}

// TestPartitionsBySM: the SM programs a partitions.conf on
// net.2sw2path4hca: the CAs' P_Key tables (read back from the fabric and
// in the snapshot), the switch ports facing CAs enforce and those between
// switches do not; a sweep of the unchanged subnet sets nothing. Verbs
// devices then show it: UD inside Red and Blue arrives, across them the
// switches drop it, a limited member reaches a full one both ways but not
// another limited member.
func TestPartitionsBySM(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	ps, err := policy.ParsePartitions(strings.NewReader(partitionsConf(f)))
	if err != nil {
		t.Fatal(err)
	}
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{Partitions: ps})
	sweep(t, m)
	sn := m.Subnet()
	want := map[string][]uint16{
		"Hca1": {0xFFFF, 0x8001, 0x8003}, "Hca2": {0x7FFF, 0x8001, 0x0003},
		"Hca3": {0x7FFF, 0x8002}, "Hca4": {0x7FFF, 0x8002, 0x0003},
	}
	lids := map[string]uint16{}
	for name, w := range want {
		n := f.NodeByName(name)
		if got := pkeysOf(t, f, n); !slices.Equal(got, w) {
			t.Errorf("%s's P_Key table %#x, want %#x", name, got, w)
		}
		p := sn.PortByGUID(n.PortGUID(1))
		if got := slices.DeleteFunc(slices.Clone(p.PKeys), func(k uint16) bool { return k == 0 }); !slices.Equal(got, w) {
			t.Errorf("%s's P_Keys in the snapshot %#x, want %#x", name, got, w)
		}
		lids[name] = p.LID()
	}
	for _, c := range []struct {
		sw   string
		port int
		want bool
	}{{"Switch1", 1, true}, {"Switch1", 2, true}, {"Switch2", 1, true}, {"Switch2", 2, true}, {"Switch1", 3, false}, {"Switch2", 5, false}} {
		pi := portInfo(t, f, f.NodeByName(c.sw), c.port)
		if pi.PartitionEnforcementInbound != c.want || pi.PartitionEnforcementOutbound != c.want {
			t.Errorf("%s port %d: enforcement %v/%v, want %v", c.sw, c.port, pi.PartitionEnforcementInbound, pi.PartitionEnforcementOutbound, c.want)
		}
	}
	sweep(t, m)
	if st := m.Stats(); st.LastSets != 0 {
		t.Errorf("the second sweep of an unchanged subnet sent %d Sets", st.LastSets)
	}

	h := map[string]*udHCA{}
	for _, name := range []string{"Hca1", "Hca2", "Hca3", "Hca4"} {
		h[name] = openUD(t, f, name, lids[name])
	}
	const long, short = 5 * time.Second, 300 * time.Millisecond
	for _, c := range []struct {
		what     string
		from, to string
		ka, kb   uint16
		reach    bool
	}{
		{"Red", "Hca1", "Hca2", 0x8001, 0x8001, true},
		{"Blue", "Hca4", "Hca3", 0x8002, 0x8002, true},
		{"Red to Blue", "Hca1", "Hca3", 0x8001, 0x8002, false},
		{"Blue to Red", "Hca4", "Hca2", 0x8002, 0x8001, false},
		{"Green limited to full", "Hca2", "Hca1", 0x0003, 0x8003, true},
		{"Green full to limited", "Hca1", "Hca4", 0x8003, 0x0003, true},
		{"Green limited to limited", "Hca2", "Hca4", 0x0003, 0x0003, false},
	} {
		wait := short
		if c.reach {
			wait = long
		}
		if got := udReaches(t, h[c.from], h[c.to], c.ka, c.kb, wait); got != c.reach {
			t.Errorf("%s (%s -> %s): arrived %v, want %v", c.what, c.from, c.to, got, c.reach)
		}
	}
	if st := f.DataStats(); st.PKey == 0 {
		t.Errorf("the switches dropped no packet for its P_Key: %+v", st)
	}
}

// max_op_vls 3 has every port operate VL0-3 (qos_max_vls does not, as in
// OpenSM).
const qosConf = `max_op_vls 3
qos TRUE
qos_max_vls 4
qos_high_limit 4
qos_vlarb_high 1:64
qos_vlarb_low 0:64,2:64,3:192
qos_sl2vl 0,1,2,3,0,0,0,0,0,0,0,0,0,0,0,15
`

// TestQoSBySM: with a QoS policy the SM writes OperationalVLs,
// VLHighLimit, SL2VL and VL arbitration tables of CA ports and switch
// ports, as read back from the fabric; a second sweep sets nothing.
func TestQoSBySM(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	q, err := policy.ParseQoS(strings.NewReader(qosConf))
	if err != nil {
		t.Fatal(err)
	}
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{QoS: q})
	sweep(t, m)
	wantSL := mad.SLToVLTable{VL: [16]uint8{0, 1, 2, 3, 15: 15}}
	for _, c := range []struct {
		node     string
		port, in int
	}{{"Hca2", 1, 0}, {"Switch1", 3, 1}, {"Switch2", 2, 5}, {"Switch1", 1, 0}} {
		n := f.NodeByName(c.node)
		pi := portInfo(t, f, n, c.port)
		if pi.OperationalVLs != 3 || pi.VLHighLimit != 4 {
			t.Errorf("%s port %d: OperationalVLs %d VLHighLimit %d, want 3 (VL0-3) and 4", c.node, c.port, pi.OperationalVLs, pi.VLHighLimit)
		}
		mod := uint32(0)
		if n.Type() == mad.NodeTypeSwitch {
			mod = mad.SLToVLModifier(uint8(c.in), uint8(c.port))
		}
		b, err := f.Query(n, mad.SMAttrSLToVLTable, mod)
		if err != nil {
			t.Fatal(err)
		}
		if sl, _ := mad.ParseSLToVLTable(b); sl != wantSL {
			t.Errorf("%s SL2VL %d->%d: %v, want %v", c.node, c.in, c.port, sl.VL, wantSL.VL)
		}
		b, err = f.Query(n, mad.SMAttrVLArbTable, mad.VLArbModifier(uint8(c.port), mad.VLArbHighEntries0to31))
		if err != nil {
			t.Fatal(err)
		}
		if hi, _ := mad.ParseVLArbTable(b); hi.Entry[0] != (mad.VLArbEntry{VL: 1, Weight: 64}) || hi.Entry[1].Weight != 0 {
			t.Errorf("%s port %d VL arbitration high %v", c.node, c.port, hi.Entry[:4])
		}
		b, err = f.Query(n, mad.SMAttrVLArbTable, mad.VLArbModifier(uint8(c.port), mad.VLArbLowEntries0to31))
		if err != nil {
			t.Fatal(err)
		}
		lo, _ := mad.ParseVLArbTable(b)
		if w := []mad.VLArbEntry{{VL: 0, Weight: 64}, {VL: 2, Weight: 64}, {VL: 3, Weight: 192}, {}}; !slices.Equal(lo.Entry[:4], w) {
			t.Errorf("%s port %d VL arbitration low %v, want %v", c.node, c.port, lo.Entry[:4], w)
		}
	}
	sweep(t, m)
	if st := m.Stats(); st.LastSets != 0 {
		t.Errorf("the second sweep of an unchanged subnet sent %d Sets", st.LastSets)
	}
}

// BenchmarkSweepFatTreePolicy: the first heavy sweep of the 40-node and
// 612-node fat trees with a partition policy (two partitions over every CA, switch
// enforcement) and QoS (qosConf), against none; sets/op counts the Set
// SMPs.
func BenchmarkSweepFatTreePolicy(b *testing.B) {
	ps, err := policy.ParsePartitions(strings.NewReader("Default=0x7fff : ALL=full ;\nWeb=0x0005 : ALL_CAS=limited, SELF=full ;\nDB=0x0006 : ALL_CAS=full ;\n"))
	if err != nil {
		b.Fatal(err)
	}
	q, err := policy.ParseQoS(strings.NewReader(qosConf))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name, text string
		cfg        Config
	}{
		{"fattree40/none", readTopo(b, "../fabric/testdata/fattree.ibnetdiscover"), Config{}},
		{"fattree40/partitions", readTopo(b, "../fabric/testdata/fattree.ibnetdiscover"), Config{Partitions: ps}},
		{"fattree40/partitions+qos", readTopo(b, "../fabric/testdata/fattree.ibnetdiscover"), Config{Partitions: ps, QoS: q}},
		{"fattree612/none", fatTree(12, 24, 24), Config{}},
		{"fattree612/partitions+qos", fatTree(12, 24, 24), Config{Partitions: ps, QoS: q}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var sets uint64
			for b.Loop() {
				b.StopTimer()
				f := openTopo(b, tc.text)
				cfg := tc.cfg
				cfg.Logger = quiet
				tr, _ := FabricTransport(f.Fabric, f.firstCA(b), 1)
				m, _ := New(tr, cfg)
				b.StartTimer()
				if err := m.Sweep(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				sets += m.Stats().LastSets
				m.Close()
				f.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(sets)/float64(b.N), "sets/op")
		})
	}
}
