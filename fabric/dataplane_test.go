package fabric

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric/vl"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// dataNet is a swept fabric with HCAs connected to its CA ports.
type dataNet struct {
	t    testing.TB
	f    *Fabric
	sm   *testSM
	sn   *smSubnet
	hcas map[string]*testHCA
}

// testHCA is a test's HCA: the port ConnectHCA gave, and what arrived.
type testHCA struct {
	name string
	node *Node
	port ib.Port
	lid  uint16
	ch   chan []byte   // copies of the packets received
	gate chan struct{} // while open (not closed), recv blocks: a slow HCA
}

// sweepData opens a fabric, sweeps it with the test SM at Hca1 and
// connects an HCA to port 1 of every CA named.
func sweepData(t testing.TB, text string, cas ...string) *dataNet {
	t.Helper()
	f := openFabric(t, text)
	sm := newSM(t, f, "Hca1", 1)
	sn := sm.sweep()
	dn := &dataNet{t: t, f: f, sm: sm, sn: sn, hcas: map[string]*testHCA{}}
	for _, name := range cas {
		dn.connect(name, nil)
	}
	return dn
}

// connect connects an HCA at port 1 of CA name; a non-nil gate makes it a
// slow receiver until the gate is closed.
func (dn *dataNet) connect(name string, gate chan struct{}) *testHCA {
	t := dn.t
	t.Helper()
	n := dn.f.NodeByName(name)
	p, err := dn.f.ConnectHCA(n, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := &testHCA{name: name, node: n, port: p, lid: dn.sn.caPorts[n.PortGUID(1)].lid, ch: make(chan []byte, 1<<14), gate: gate}
	if err := p.Start(func(pkts [][]byte) {
		if h.gate != nil {
			<-h.gate
		}
		for _, b := range pkts {
			h.ch <- bytes.Clone(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dn.hcas[name] = h
	return h
}

// pkt builds a sealed IB packet: RC SEND_ONLY to QP 0x11 (UD SEND_ONLY to
// QP0 on VL15) carrying seq and then n bytes of pattern.
func pkt(t testing.TB, slid, dlid uint16, sl, v uint8, pkey uint16, seq uint32, n int) []byte {
	t.Helper()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.PKey(pkey), DestQP: 0x11, PSN: wire.PSN(seq & 0xFFFFFF)}}
	if v == wire.VL15 {
		h.BTH.Opcode, h.BTH.DestQP = wire.UDSendOnly, 0
		h.DETH = wire.DETHFields{QKey: 0x80010000, SrcQP: 0}
	}
	payload := make([]byte, 4+n)
	binary.BigEndian.PutUint32(payload, seq)
	for i := range n {
		payload[4+i] = byte(int(seq) + i)
	}
	b := make([]byte, wire.IBPacketLen(h.BTH.Opcode, len(payload), false))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{VL: v, SL: sl, DLID: dlid, SLID: slid}}, &h, payload); err != nil {
		t.Fatal(err)
	}
	return b
}

// expect waits for n packets at h and returns them.
func (h *testHCA) expect(t testing.TB, n int) [][]byte {
	t.Helper()
	var got [][]byte
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for len(got) < n {
		select {
		case b := <-h.ch:
			got = append(got, b)
		case <-timer.C:
			t.Fatalf("%s: %d packets of %d arrived", h.name, len(got), n)
		}
	}
	return got
}

// quiet fails t if anything arrives at h within a short while.
func (h *testHCA) quiet(t testing.TB) {
	t.Helper()
	select {
	case b := <-h.ch:
		t.Fatalf("%s: unexpected packet %x", h.name, b[:min(len(b), 16)])
	case <-time.After(50 * time.Millisecond):
	}
}

func (h *testHCA) send(t testing.TB, pkts ...[]byte) {
	t.Helper()
	if err := h.port.Send(pkts); err != nil {
		t.Fatal(err)
	}
}

// cnt returns a copy of port num of node's counters (links folded in).
func (dn *dataNet) cnt(node string, num int) counters {
	f := dn.f
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.NodeByName(node).port(num)
	f.syncLinkCounters(p)
	return p.cnt
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// switchLID returns the LID the SM gave switch name.
func (dn *dataNet) switchLID(name string) uint16 {
	return dn.sn.nodes[dn.f.NodeByName(name).GUID()].lid
}

func TestConnectHCAAttr(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	hca1 := f.NodeByName("Hca1")
	p, err := f.ConnectHCA(hca1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var notes atomic.Int32
	changed := make(chan struct{}, 1)
	p.NotifyAttr(func() {
		notes.Add(1)
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if a := p.Attr(); a.State != mad.PortStateInit || a.LID != 0 || a.PortGUID != hca1.PortGUID(1) || a.PhysState != mad.PhysStateLinkUp {
		t.Fatalf("before the SM: %+v", a)
	}
	sm := newSM(t, f, "Hca2", 1)
	sn := sm.sweep()
	want := sn.caPorts[hca1.PortGUID(1)].lid
	deadline := time.Now().Add(10 * time.Second)
	for p.Attr().State != mad.PortStateActive || notes.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no notification of ACTIVE: %+v, %d notes", p.Attr(), notes.Load())
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Millisecond):
		}
	}
	a := p.Attr()
	if a.LID != want || a.SMLID != sm.lid || a.MTU != 4096 || a.OperVLs != 8 || a.GIDPrefix != 0xfe80000000000000 ||
		len(a.PKeys) != pkeyCapCA || a.PKeys[0] != 0xFFFF {
		t.Fatalf("after the sweep: %+v (LID want %d, SM %d)", a, want, sm.lid)
	}
	for sl, v := range a.SL2VL {
		if int(v) != sl%8 {
			t.Fatalf("SL2VL %v", a.SL2VL)
		}
	}
	// The SM changes the P_Key table and the SL2VL table: both show, with a
	// notification.
	before := notes.Load()
	pk := make([]byte, 64)
	binary.BigEndian.PutUint16(pk, 0xFFFF)
	binary.BigEndian.PutUint16(pk[2:], 0x8001)
	sm.lidReq(want, mad.ClassSubnLID, mad.MethodSet, mad.SMAttrPKeyTable, 0, pk)
	sm.lidReq(want, mad.ClassSubnLID, mad.MethodSet, mad.SMAttrSLToVLTable, 0, []byte{0x10, 0x32, 0x45, 0x67, 0, 0, 0, 0})
	for {
		a = p.Attr()
		if a.PKeys[1] == 0x8001 && a.SL2VL[0] == 1 && a.SL2VL[1] == 0 && notes.Load() > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("P_Key and SL2VL changes: %+v, %d notes", a, notes.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// Removing the function stops the notifications.
	p.NotifyAttr(nil)
	n := notes.Load()
	f.SetLink(hca1, 1, false)
	if a := p.Attr(); a.State != mad.PortStateDown {
		t.Fatalf("after the link went down: %+v", a)
	}
	time.Sleep(20 * time.Millisecond)
	if notes.Load() != n {
		t.Fatal("notified after NotifyAttr(nil)")
	}
}

func TestConnectHCAErrors(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	if _, err := f.ConnectHCA(f.NodeByName("Switch1"), 1); !errors.Is(err, ErrNoPort) {
		t.Errorf("switch port: %v", err)
	}
	if _, err := f.ConnectHCA(f.NodeByName("Hca1"), 3); !errors.Is(err, ErrNoPort) {
		t.Errorf("port 3 of 2: %v", err)
	}
	if _, err := f.ConnectHCA(nil, 1); !errors.Is(err, ErrNoNode) {
		t.Errorf("nil node: %v", err)
	}
	p, err := f.ConnectHCA(f.NodeByName("Hca1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ConnectHCA(f.NodeByName("Hca1"), 1); !errors.Is(err, ErrPortInUse) {
		t.Errorf("second HCA: %v", err)
	}
	if err := p.Start(func([][]byte) {}); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(func([][]byte) {}); err == nil {
		t.Error("second Start passed")
	}
	// Port 2 of Hca1 has no link: its HCA connects, and what it sends is
	// discarded (the port is DOWN).
	p2, err := f.ConnectHCA(f.NodeByName("Hca1"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if a := p2.Attr(); a.State != mad.PortStateDown {
		t.Errorf("unlinked port: %+v", a)
	}
	if err := p2.Send([][]byte{pkt(t, 1, 2, 0, 0, 0xFFFF, 0, 8)}); err != nil {
		t.Fatal(err)
	}
	if s := f.DataStats(); s.Inactive != 1 || s.Injected != 0 {
		t.Errorf("stats %+v", s)
	}
	p2.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if err := p.Send(nil); err != nil {
		t.Errorf("Send of nothing after Close: %v", err)
	}
	if err := p.Send([][]byte{{0}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	// The port takes a new HCA once the old one left.
	p, err = f.ConnectHCA(f.NodeByName("Hca1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	f.Close()
	if _, err := f.ConnectHCA(f.NodeByName("Hca1"), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("after the fabric's Close: %v", err)
	}
}

// TestUnicast2sw2path4hca: every HCA sends to every other, across one or
// two switches; every packet arrives byte for byte, in order, and the
// PMA counters of every port on the way moved by exactly the traffic.
func TestUnicast2sw2path4hca(t *testing.T) {
	cas := []string{"Hca1", "Hca2", "Hca3", "Hca4"}
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), cas...)
	before := map[string]counters{}
	for _, c := range cas {
		before[c] = dn.cnt(c, 1)
	}
	sw1up := dn.cnt("Switch1", 3)
	const k = 25
	sent := map[string][][]byte{}
	words := map[string]uint64{}
	var wg sync.WaitGroup
	for _, src := range cas {
		var pkts [][]byte
		for _, dst := range cas {
			if dst == src {
				continue
			}
			for i := range k {
				b := pkt(t, dn.hcas[src].lid, dn.hcas[dst].lid, 0, 0, 0xFFFF, uint32(i), (i*173)%4000)
				pkts = append(pkts, b)
				sent[src+">"+dst] = append(sent[src+">"+dst], b)
				words[src] += uint64(len(b)-2) / 4
				words[dst+"<"] += uint64(len(b)-2) / 4
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dn.hcas[src].port.Send(pkts); err != nil {
				t.Error(err)
			}
		}()
	}
	for _, dst := range cas {
		got := dn.hcas[dst].expect(t, k*(len(cas)-1))
		next := map[uint16]int{}
		for _, b := range got {
			p, err := wire.ParseIB(b)
			if err != nil {
				t.Fatalf("%s: %v", dst, err)
			}
			slid := p.LRH().SLID()
			var src string
			for _, c := range cas {
				if dn.hcas[c].lid == slid {
					src = c
				}
			}
			want := sent[src+">"+dst]
			i := next[slid]
			if src == "" || i >= len(want) || !bytes.Equal(b, want[i]) {
				t.Fatalf("%s: packet from LID %d (%s) #%d differs from what was sent", dst, slid, src, i)
			}
			next[slid]++
		}
		dn.hcas[dst].quiet(t)
	}
	wg.Wait()
	for _, c := range cas {
		d := dn.cnt(c, 1)
		b := before[c]
		n := uint64(k * (len(cas) - 1))
		if d.xmitPkts-b.xmitPkts != n || d.rcvPkts-b.rcvPkts != n || d.xmitData-b.xmitData != words[c] || d.rcvData-b.rcvData != words[c+"<"] {
			t.Errorf("%s: counters moved xmit %d/%d rcv %d/%d, want %d packets, %d/%d words", c,
				d.xmitPkts-b.xmitPkts, d.xmitData-b.xmitData, d.rcvPkts-b.rcvPkts, d.rcvData-b.rcvData, n, words[c], words[c+"<"])
		}
	}
	// Everything between the switches took Switch1's port 3 (the SM's
	// min-hop routes take the first of the two links): 2 senders x 2
	// receivers each way.
	if d := dn.cnt("Switch1", 3); d.xmitPkts-sw1up.xmitPkts != 4*k || d.rcvPkts-sw1up.rcvPkts != 4*k {
		t.Errorf("Switch1 port 3: %d out, %d in, want %d", d.xmitPkts-sw1up.xmitPkts, d.rcvPkts-sw1up.rcvPkts, 4*k)
	}
	st := dn.f.DataStats()
	if st.Injected != 12*k || st.Delivered != 12*k || st.Forwarded != 12*k+8*k {
		t.Errorf("stats %+v", st)
	}
	// The PMA answers from the same counters: PortXmitData of Hca3 by a
	// LID-routed PortCounters Get.
	data := make([]byte, 64)
	data[1] = 1
	r := dn.sm.lidReq(dn.hcas["Hca3"].lid, mad.ClassPerf, mad.MethodGet, mad.PerfAttrPortCounters, 0, data)
	pc, _ := mad.ParsePortCounters(r.MAD[mad.PerfDataOffset:])
	// The counters now also hold the response, which left after the PMA
	// read them.
	if c := dn.cnt("Hca3", 1); uint64(pc.PortXmitData)+madWords != c.xmitData || c.xmitData-before["Hca3"].xmitData != words["Hca3"]+madWords {
		t.Errorf("PMA PortXmitData %d, counters %d, data words %d", pc.PortXmitData, c.xmitData, words["Hca3"])
	}
}

// TestFatTree: on the 8-switch, 32-HCA fat tree every HCA sends to the
// HCA at the same place on the next leaf (leaf, spine, leaf: three switch
// hops) and to one on its own leaf; all arrive intact.
func TestFatTree(t *testing.T) {
	var cas []string
	for i := 1; i <= 32; i++ {
		cas = append(cas, fmt.Sprintf("Hca%d", i))
	}
	dn := sweepData(t, fatTree(4, 4, 8), cas...)
	const k = 10
	sent := map[string][][]byte{}
	for i, src := range cas {
		far := cas[(i+8)%32]
		near := cas[(i/8)*8+(i+1)%8]
		var pkts [][]byte
		for j := range k {
			for _, dst := range []string{far, near} {
				b := pkt(t, dn.hcas[src].lid, dn.hcas[dst].lid, uint8(j%4), uint8(j%4), 0xFFFF, uint32(j), 64+j*100)
				pkts = append(pkts, b)
				sent[dst] = append(sent[dst], b)
			}
		}
		go dn.hcas[src].port.Send(pkts)
	}
	for _, dst := range cas {
		got := dn.hcas[dst].expect(t, 2*k)
		want := map[string]bool{}
		for _, b := range sent[dst] {
			want[string(b)] = true
		}
		for _, b := range got {
			if _, err := wire.ParseIB(b); err != nil || !want[string(b)] {
				t.Fatalf("%s: packet not sent (%v)", dst, err)
			}
			delete(want, string(b))
		}
	}
	st := dn.f.DataStats()
	n := uint64(32 * 2 * k)
	if st.Delivered != n || st.Forwarded != 32*k*3+32*k || st.Malformed+st.NoRoute+st.Inactive+st.BadSL+st.PKey+st.NoHCA != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestDrops: what has no route, a bad VCRC, the wrong lane, a port not
// ACTIVE, an SL the port maps to VL15, or a P_Key partition enforcement
// refuses is dropped and counted on the port that dropped it.
func TestDrops(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1", "Hca2", "Hca3")
	h1, h2 := dn.hcas["Hca1"], dn.hcas["Hca2"]
	good := func(seq uint32) []byte { return pkt(t, h1.lid, h2.lid, 0, 0, 0xFFFF, seq, 32) }
	st0 := dn.f.DataStats()
	step := func(name string, field func(DataStats) uint64, node string, port int, ctr func(counters) uint64, send func()) {
		t.Helper()
		s0, c0 := field(dn.f.DataStats()), ctr(dn.cnt(node, port))
		send()
		deadline := time.Now().Add(5 * time.Second)
		for field(dn.f.DataStats()) == s0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not counted", name)
			}
			time.Sleep(time.Millisecond)
		}
		if s, c := field(dn.f.DataStats()), ctr(dn.cnt(node, port)); s != s0+1 || c != c0+1 {
			t.Errorf("%s: stats %d->%d, %s port %d counter %d->%d", name, s0, s, node, port, c0, c)
		}
		// A good packet still passes after it.
		h1.send(t, good(1))
		if b := h2.expect(t, 1)[0]; !bytes.Equal(b, good(1)) {
			t.Fatalf("%s: the next packet arrived changed", name)
		}
	}
	rcvErr := func(c counters) uint64 { return c.rcvErrors }
	relay := func(c counters) uint64 { return c.switchRelayErrors }
	discards := func(c counters) uint64 { return c.xmitDiscards }
	step("bad VCRC", func(s DataStats) uint64 { return s.Malformed }, "Switch1", 1, rcvErr, func() {
		b := good(0)
		b[len(b)-1] ^= 1
		h1.send(t, b)
	})
	step("bad ICRC passes the switches: the HCA checks it", func(s DataStats) uint64 { return s.Delivered }, "Hca2", 1,
		func(c counters) uint64 { return c.rcvPkts }, func() {
			b := good(0)
			b[len(b)-3] ^= 1
			wire.SealVCRC(b)
			h1.send(t, b)
			if _, err := wire.ParseIB(h2.expect(t, 1)[0]); !errors.Is(err, wire.ErrICRC) {
				t.Errorf("corrupt ICRC: %v", err)
			}
		})
	step("LRH length", func(s DataStats) uint64 { return s.Malformed }, "Switch1", 1, rcvErr, func() {
		b := good(0)
		h1.send(t, append(b[:len(b)-2:len(b)-2], 0, 0, 0, 0, b[len(b)-2], b[len(b)-1]))
	})
	step("no LFT entry", func(s DataStats) uint64 { return s.NoRoute }, "Switch1", 1, relay, func() {
		h1.send(t, pkt(t, h1.lid, dn.sn.maxLID+1, 0, 0, 0xFFFF, 0, 8))
	})
	step("DLID 0", func(s DataStats) uint64 { return s.NoRoute }, "Switch1", 1, relay, func() {
		h1.send(t, pkt(t, h1.lid, 0, 0, 0, 0xFFFF, 0, 8))
	})
	step("a switch's LID", func(s DataStats) uint64 { return s.ToSwitch }, "Switch2", 3, relay, func() {
		h1.send(t, pkt(t, h1.lid, dn.switchLID("Switch2"), 0, 0, 0xFFFF, 0, 8))
	})
	step("multicast LID with no MFT entry", func(s DataStats) uint64 { return s.NoRoute }, "Switch1", 1, relay, func() {
		h1.send(t, pkt(t, h1.lid, 0xC005, 0, 0, 0xFFFF, 0, 8))
	})
	// The HCA's transmitter refuses data on VL15 and a VL the port does
	// not operate.
	step("data on VL15 from the HCA", func(s DataStats) uint64 { return s.BadVL15 }, "Hca1", 1, discards, func() {
		b := good(0)
		wire.LRH(b).SetVL(15)
		wire.SealVCRC(b)
		h1.send(t, b)
	})
	step("VL 9 from the HCA", func(s DataStats) uint64 { return s.BadSL }, "Hca1", 1, discards, func() {
		h1.send(t, pkt(t, h1.lid, h2.lid, 9, 9, 0xFFFF, 0, 8))
	})
	// What a switch sees on its input: put straight on Hca1's link.
	inject := func(v uint8, b []byte) {
		dn.f.mu.Lock()
		l := dn.f.NodeByName("Hca1").port(1).dp.tx
		dn.f.mu.Unlock()
		if err := l.Send(t.Context(), v, b); err != nil {
			t.Fatal(err)
		}
	}
	step("data packet on VL15 at a switch", func(s DataStats) uint64 { return s.BadVL15 }, "Switch1", 1, rcvErr, func() {
		b := good(0)
		wire.LRH(b).SetVL(15)
		wire.SealVCRC(b)
		inject(15, b)
	})
	step("QP0 on a data VL at a switch", func(s DataStats) uint64 { return s.BadVL15 }, "Switch1", 1, rcvErr, func() {
		b := pkt(t, h1.lid, h2.lid, 0, 15, 0xFFFF, 0, 8)
		wire.LRH(b).SetVL(0)
		wire.SealVCRC(b)
		inject(0, b)
	})
	step("LRH VL not the lane", func(s DataStats) uint64 { return s.Malformed }, "Switch1", 1, rcvErr, func() {
		inject(1, good(0))
	})
	// QP0 on VL15 is forwarded, and the switches keep VL15.
	h1.send(t, pkt(t, h1.lid, h2.lid, 0, 15, 0xFFFF, 7, 8))
	if b := h2.expect(t, 1)[0]; !bytes.Equal(b, pkt(t, h1.lid, h2.lid, 0, 15, 0xFFFF, 7, 8)) {
		t.Fatal("QP0 packet changed on the way")
	}
	// SL 3 mapped to VL15 on Switch1's ports 3 and 5 from port 1: dropped
	// by the output port.
	for _, out := range []uint32{3, 5} {
		dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrSLToVLTable, 1<<8|out, []byte{0x01, 0x2F, 0x45, 0x67, 0x01, 0x23, 0x45, 0x67})
	}
	step("SL mapped to VL15", func(s DataStats) uint64 { return s.BadSL }, "Switch1", 3, discards, func() {
		h1.send(t, pkt(t, h1.lid, h2.lid, 3, 3, 0xFFFF, 0, 8))
	})
	// SL 2 goes on VL2 from Hca1, Switch1 moves it to VL5 toward Switch2
	// (resealing the VCRC), and Switch2 maps it back to VL2 toward Hca2.
	for _, out := range []uint32{3, 5} {
		dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrSLToVLTable, 1<<8|out, []byte{0x01, 0x5F, 0x45, 0x67, 0x01, 0x23, 0x45, 0x67})
	}
	sw1out := dn.f.NodeByName("Switch1").port(3).dp.tx
	vl5 := sw1out.Stats().Sent[5]
	b := pkt(t, h1.lid, h2.lid, 2, 2, 0xFFFF, 9, 100)
	h1.send(t, b)
	if got := h2.expect(t, 1)[0]; !bytes.Equal(got, b) {
		t.Fatalf("remapped packet: VL %d, changed", wire.LRH(got).VL())
	}
	if sw1out.Stats().Sent[5] != vl5+1 {
		t.Fatal("Switch1 did not send SL2 on VL5")
	}
	// Partition enforcement on Switch1's port 1, inbound: the port's table
	// holds the default partition (0xFFFF) and 0x0002 as a limited member.
	pi, _ := mad.ParsePortInfo(dn.sm.drOK(path(1), mad.MethodGet, mad.SMAttrPortInfo, 1, nil))
	pi.PartitionEnforcementInbound, pi.PortState = true, mad.PortStateNoChange
	pib := make([]byte, 64)
	pi.Encode(pib)
	dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrPortInfo, 1, pib)
	pk := make([]byte, 64)
	binary.BigEndian.PutUint16(pk, 0xFFFF)
	binary.BigEndian.PutUint16(pk[2:], 0x0002)
	dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrPKeyTable, 1<<16, pk)
	step("P_Key not in the inbound table", func(s DataStats) uint64 { return s.PKey }, "Switch1", 1,
		func(c counters) uint64 { return c.rcvConstraintErrors }, func() {
			h1.send(t, pkt(t, h1.lid, h2.lid, 0, 0, 0x8001, 0, 8))
		})
	step("limited member to limited member", func(s DataStats) uint64 { return s.PKey }, "Switch1", 1,
		func(c counters) uint64 { return c.rcvConstraintErrors }, func() {
			h1.send(t, pkt(t, h1.lid, h2.lid, 0, 0, 0x0002, 0, 8))
		})
	// A full member of partition 2 matches the limited entry, and a
	// limited member of the default partition matches 0xFFFF.
	for _, k := range []uint16{0x8002, 0x7FFF} {
		b := pkt(t, h1.lid, h2.lid, 0, 0, k, 0, 8)
		h1.send(t, b)
		if got := h2.expect(t, 1)[0]; !bytes.Equal(got, b) {
			t.Fatalf("P_Key %#x: changed", k)
		}
	}
	// A raw packet (LNH 0: no BTH, no P_Key) passes partition
	// enforcement; with FilterRawInbound set it is dropped.
	raw := make([]byte, wire.LRHLen+16+wire.VCRCLen)
	(&wire.LRHFields{LNH: wire.LNHRaw, DLID: h2.lid, SLID: h1.lid, PktLen: uint16((len(raw) - wire.VCRCLen) / 4)}).Encode(wire.LRH(raw))
	copy(raw[wire.LRHLen:], "a raw IB packet.")
	wire.SealVCRC(raw)
	h1.send(t, raw)
	if got := h2.expect(t, 1)[0]; !bytes.Equal(got, raw) {
		t.Fatal("raw packet changed")
	}
	pi.FilterRawInbound = true
	pi.Encode(pib)
	dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrPortInfo, 1, pib)
	step("raw packet filtered inbound", func(s DataStats) uint64 { return s.PKey }, "Switch1", 1,
		func(c counters) uint64 { return c.rcvConstraintErrors }, func() { h1.send(t, raw) })
	// Outbound enforcement on Switch2's port 1 (toward Hca2).
	pi, _ = mad.ParsePortInfo(dn.sm.drOK(path(1, 3), mad.MethodGet, mad.SMAttrPortInfo, 1, nil))
	pi.PartitionEnforcementOutbound, pi.PortState = true, mad.PortStateNoChange
	pi.Encode(pib)
	dn.sm.drOK(path(1, 3), mad.MethodSet, mad.SMAttrPortInfo, 1, pib)
	step("P_Key not in the outbound table", func(s DataStats) uint64 { return s.PKey }, "Switch2", 1,
		func(c counters) uint64 { return c.xmitConstraintErrors }, func() {
			h1.send(t, pkt(t, h1.lid, h2.lid, 0, 0, 0x8002, 0, 8))
		})
	// A link down: data and VL15 are discarded at the switch; back up
	// (INIT) VL15 passes and data does not, until the SM makes it ACTIVE.
	if err := dn.f.SetLink(dn.f.NodeByName("Hca2"), 1, false); err != nil {
		t.Fatal(err)
	}
	inactive := func(s DataStats) uint64 { return s.Inactive }
	step2 := func(name string, b []byte) {
		t.Helper()
		s0, c0 := dn.f.DataStats().Inactive, dn.cnt("Switch2", 1).xmitDiscards
		h1.send(t, b)
		deadline := time.Now().Add(5 * time.Second)
		for inactive(dn.f.DataStats()) == s0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not counted", name)
			}
			time.Sleep(time.Millisecond)
		}
		if c := dn.cnt("Switch2", 1).xmitDiscards; c != c0+1 {
			t.Errorf("%s: XmitDiscards %d -> %d", name, c0, c)
		}
	}
	step2("data to a link that is down", good(0))
	step2("VL15 to a link that is down", pkt(t, h1.lid, h2.lid, 0, 15, 0xFFFF, 0, 8))
	if err := dn.f.SetLink(dn.f.NodeByName("Hca2"), 1, true); err != nil {
		t.Fatal(err)
	}
	step2("data to a port in INIT", good(0))
	h1.send(t, pkt(t, h1.lid, h2.lid, 0, 15, 0xFFFF, 3, 8))
	h2.expect(t, 1)
	// A CA port with no HCA: Hca4's packets are taken and dropped.
	s0 := dn.f.DataStats().NoHCA
	h1.send(t, pkt(t, h1.lid, dn.sn.caPorts[dn.f.NodeByName("Hca4").PortGUID(1)].lid, 0, 0, 0xFFFF, 0, 8))
	waitFor(t, "a drop at Hca4", func() bool { return dn.f.DataStats().NoHCA > s0 })
	h2.quiet(t)
	dn.hcas["Hca3"].quiet(t)
	if st := dn.f.DataStats(); st.Delivered-st0.Delivered < 10 {
		t.Errorf("stats %+v", st)
	}
}

// TestMulticast: a packet to a multicast LID reaches every port of each
// switch's MFT mask once, never going back out the port it came in by.
func TestMulticast(t *testing.T) {
	cas := []string{"Hca1", "Hca2", "Hca3", "Hca4"}
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), cas...)
	const mlid = 0xC001
	// Both switches: ports 1, 2 (their CAs) and 3 (the first link).
	mft := make([]byte, 64)
	binary.BigEndian.PutUint16(mft[2:], 1<<1|1<<2|1<<3)
	dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrMulticastFT, 0, mft)
	dn.sm.drOK(path(1, 3), mad.MethodSet, mad.SMAttrMulticastFT, 0, mft)
	for i, src := range cas {
		b := pkt(t, dn.hcas[src].lid, mlid, 0, 0, 0xFFFF, uint32(i), 200)
		st0 := dn.f.DataStats()
		dn.hcas[src].send(t, b)
		for _, dst := range cas {
			if dst == src {
				continue
			}
			if got := dn.hcas[dst].expect(t, 1)[0]; !bytes.Equal(got, b) {
				t.Fatalf("%s -> %s: copy differs", src, dst)
			}
		}
		// Two copies at the first switch (a CA and the other switch), two
		// at the second (its two CAs).
		if st := dn.f.DataStats(); st.Forwarded-st0.Forwarded != 4 || st.Delivered-st0.Delivered != 3 {
			t.Errorf("from %s: forwarded %d, delivered %d", src, st.Forwarded-st0.Forwarded, st.Delivered-st0.Delivered)
		}
	}
	for _, h := range dn.hcas {
		h.quiet(t)
	}
	// PortCountersExtended of Switch1's port 2 (to Hca3): the three
	// copies from the others went out multicast; Hca3 received them so.
	data := make([]byte, 64)
	data[1] = 2
	r := dn.sm.lidReq(dn.switchLID("Switch1"), mad.ClassPerf, mad.MethodGet, mad.PerfAttrPortCountersExt, 0, data)
	x, _ := mad.ParsePortCountersExt(r.MAD[mad.PerfDataOffset:])
	if x.PortMulticastXmitPkts != 3 || x.PortMulticastRcvPkts != 1 || x.PortUnicastXmitPkts+3 != x.PortXmitPkts {
		t.Errorf("Switch1 port 2: %+v", x)
	}
	if c := dn.cnt("Hca3", 1); c.mcastRcvPkts != 3 || c.mcastXmitPkts != 1 {
		t.Errorf("Hca3: multicast %d in, %d out", c.mcastRcvPkts, c.mcastXmitPkts)
	}
}

// TestCreditBackpressure: Hca2 takes its packets slowly (its receive
// function blocks). Hca1's stream to it fills VL0 on every link of the
// path, Hca1's Send blocks, and nothing is dropped; meanwhile Hca3's
// stream to Hca4 on VL1, over the same link between the switches, flows.
// Once Hca2 reads again, every packet arrives, in order.
func TestCreditBackpressure(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1", "Hca3", "Hca4")
	gate := make(chan struct{})
	h2 := dn.connect("Hca2", gate)
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	t.Cleanup(release) // before the fabric closes: Close waits for recv
	h1, h3, h4 := dn.hcas["Hca1"], dn.hcas["Hca3"], dn.hcas["Hca4"]
	const n = 2000
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := h1.port.Send([][]byte{pkt(t, h1.lid, h2.lid, 0, 0, 0xFFFF, uint32(i), 200)}); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()
	// Wait until the path is backed up: VL0 full on each link of the path
	// (Hca1's, Switch1's port 3, Switch2's port 1: the buffer behind each
	// holds as many 200-byte packets as fit its credits, and a send has
	// waited for room), and Hca1's own VL0 queue full, so that its Send
	// waits. Hca2 not reading, it stays so.
	full := vl.Credits(len(pkt(t, 1, 2, 0, 0, 0, 0, 200)))
	links := []struct {
		node string
		port int
	}{{"Hca1", 1}, {"Switch1", 3}, {"Switch2", 1}}
	hp := h1.port.(*hcaPort)
	waitFor(t, "VL0 backed up from Hca2 to Hca1", func() bool {
		for _, at := range links {
			st := dn.f.NodeByName(at.node).port(at.port).dp.tx.Stats()
			if st.MaxBuffered[0] < linkCredits-full+1 || st.SendWaits == 0 {
				return false
			}
		}
		hp.txMu.Lock()
		defer hp.txMu.Unlock()
		return hp.txQueued[0] >= hcaQueueLen
	})
	for _, at := range links {
		if c := dn.cnt(at.node, at.port); c.xmitWait == 0 {
			t.Errorf("%s port %d: PortXmitWait did not move", at.node, at.port)
		}
	}
	if s := sent.Load(); s == n {
		t.Fatalf("Hca1 sent all %d packets", n)
	}
	// VL1 through the same switch-to-switch link still flows.
	const m = 300
	go func() {
		for i := range m {
			if err := h3.port.Send([][]byte{pkt(t, h3.lid, h4.lid, 1, 1, 0xFFFF, uint32(i), 200)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i, b := range h4.expect(t, m) {
		if binary.BigEndian.Uint32(b[wire.LRHLen+wire.BTHLen:]) != uint32(i) || wire.LRH(b).VL() != 1 {
			t.Fatalf("Hca4: packet %d out of order or off VL1", i)
		}
	}
	if s := sent.Load(); s == n {
		t.Fatal("Hca1 finished while Hca2 was not reading")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, b := range h2.expect(t, n) {
		if binary.BigEndian.Uint32(b[wire.LRHLen+wire.BTHLen:]) != uint32(i) {
			t.Fatalf("Hca2: packet %d out of order", i)
		}
	}
	st := dn.f.DataStats()
	if st.Delivered != n+m || st.Malformed+st.NoRoute+st.Inactive+st.BadSL+st.PKey+st.NoHCA+st.ToSwitch+st.BadVL15 != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCloseDrainsQueue: an HCA that closes right after sending still gets
// the packets its transmit queue holds onto the link: Hca1 sends while
// Hca2 does not read until some wait in Hca1's queue, closes, and Hca2,
// reading again, receives every one.
func TestCloseDrainsQueue(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1")
	gate := make(chan struct{})
	h2 := dn.connect("Hca2", gate)
	h1 := dn.hcas["Hca1"]
	hp := h1.port.(*hcaPort)
	queued := func() bool {
		hp.txMu.Lock()
		defer hp.txMu.Unlock()
		return hp.txQueued[0] > 0
	}
	n := 0
	for !queued() {
		if n == 10000 {
			t.Fatal("10000 packets sent and none waits in Hca1's queue")
		}
		h1.send(t, pkt(t, h1.lid, h2.lid, 0, 0, 0xFFFF, uint32(n), 1000))
		n++
	}
	closed := make(chan error, 1)
	go func() { closed <- h1.port.Close() }()
	waitFor(t, "Hca1 closing", hp.closed.Load)
	time.Sleep(20 * time.Millisecond) // Close is waiting for the queue
	close(gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for i, b := range h2.expect(t, n) {
		if binary.BigEndian.Uint32(b[wire.LRHLen+wire.BTHLen:]) != uint32(i) {
			t.Fatalf("Hca2: packet %d out of order", i)
		}
	}
	h2.quiet(t)
}

// TestCloseWhileBlocked: a Send held up by backpressure, and the
// forwarders behind it, end when the fabric closes (the leak check of
// TestMain sees every goroutine gone).
func TestCloseWhileBlocked(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1")
	// Hca2 connected but never started: its port drops what arrives, so
	// hold the last link instead by never reading: put a gate in recv.
	gate := make(chan struct{})
	h2 := dn.connect("Hca2", gate)
	h1 := dn.hcas["Hca1"]
	errc := make(chan error, 1)
	go func() {
		for i := range 100000 {
			if err := h1.port.Send([][]byte{pkt(t, h1.lid, h2.lid, 0, 0, 0xFFFF, uint32(i), 1000)}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan struct{})
	go func() {
		dn.f.Close()
		close(closed)
	}()
	close(gate) // the one recv in progress may finish: Close waits for it
	<-closed
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Send after Close: %v", err)
	}
}

// TestSwitchIngressTruncated: every truncation of a good packet put on a
// switch's input is dropped as malformed, and counted.
func TestSwitchIngressTruncated(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1", "Hca2")
	b := pkt(t, dn.hcas["Hca1"].lid, dn.hcas["Hca2"].lid, 0, 0, 0xFFFF, 0, 40)
	f := dn.f
	in := f.NodeByName("Switch1").port(1)
	for n := range len(b) {
		f.mu.Lock()
		out := f.dp.route(in, vl.Delivery{VL: 0, Data: bytes.Clone(b[:n])}, frameOK(b[:n]), nil)
		f.mu.Unlock()
		if len(out) != 0 {
			t.Fatalf("%d of %d bytes forwarded", n, len(b))
		}
	}
	if st := f.DataStats(); st.Malformed != uint64(len(b)) {
		t.Errorf("malformed %d, want %d", st.Malformed, len(b))
	}
}

// FuzzSwitchIngress puts arbitrary packets on a switch's input: nothing
// panics, and what goes out is well framed on the VL it is sent on.
func FuzzSwitchIngress(f *testing.F) {
	dn := sweepData(f, readFile(f, "testdata/net.2sw2path4hca"))
	fab := dn.f
	fab.mu.Lock()
	if _, err := fab.startDataPlane(); err != nil {
		f.Fatal(err)
	}
	fab.mu.Unlock()
	lid := func(name string) uint16 { return dn.sn.caPorts[fab.NodeByName(name).PortGUID(1)].lid }
	f.Add(uint8(0), pkt(f, lid("Hca1"), lid("Hca2"), 0, 0, 0xFFFF, 1, 30))
	f.Add(uint8(15), pkt(f, lid("Hca1"), lid("Hca3"), 0, 15, 0xFFFF, 1, 30))
	f.Add(uint8(0), pkt(f, lid("Hca1"), 0xC001, 0, 0, 0xFFFF, 1, 30))
	// Requests for Switch1's own agents (switchagent.go).
	smp := make([]byte, mad.Size)
	if _, err := mad.NewLIDRoutedSMP(smp, mad.MethodGet, mad.SMAttrPortInfo, 1, 1); err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(15), mgmtPkt(f, lid("Hca1"), dn.switchLID("Switch1"), 0, 0, 0, smp))
	perf := make([]byte, mad.Size)
	perf[0], perf[1], perf[2], perf[3] = mad.BaseVersion, byte(mad.ClassPerf), 1, byte(mad.MethodGet)
	f.Add(uint8(0), mgmtPkt(f, lid("Hca1"), dn.switchLID("Switch1"), 1, 1, mad.GSIQKey, perf))
	in := fab.NodeByName("Switch1").port(1)
	f.Fuzz(func(t *testing.T, v uint8, b []byte) {
		v &= 15
		good := frameOK(b) && wire.LRH(b).VL() == v
		fab.mu.Lock()
		out := fab.dp.route(in, vl.Delivery{VL: v, Data: bytes.Clone(b)}, good, nil)
		fab.mu.Unlock()
		prepare(out)
		for _, h := range out {
			if !frameOK(h.pkt) || wire.LRH(h.pkt).VL() != h.vl {
				t.Fatalf("forwarded a bad frame on VL%d", h.vl)
			}
		}
	})
}

// TestIBLinkOverFabric: link/ib's links on HCAs behind different switches
// exchange transport packets by LID through the fabric: link/ib frames
// them (LRH, VL from the SL2VL table the SM left, ICRC, VCRC), the
// switches forward them, and link/ib's receive checks pass them up with
// the addressing they were sent with.
func TestIBLinkOverFabric(t *testing.T) {
	f := openFabric(t, readFile(t, "testdata/net.2sw2path4hca"))
	var links [2]*ib.Link
	got := make(chan *link.Packet, 16)
	for i, name := range []string{"Hca1", "Hca2"} {
		p, err := f.ConnectHCA(f.NodeByName(name), 1)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ib.New(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if err := l.Start(link.HandlerFunc(func(batch []*link.Packet) {
			for _, p := range batch {
				c := *p
				c.Buf = bytes.Clone(p.Buf)
				got <- &c
			}
		})); err != nil {
			t.Fatal(err)
		}
		links[i] = l
	}
	sm := newSM(t, f, "Hca3", 1)
	sn := sm.sweep()
	lid1 := sn.caPorts[f.NodeByName("Hca1").PortGUID(1)].lid
	lid2 := sn.caPorts[f.NodeByName("Hca2").PortGUID(1)].lid
	waitFor(t, "both links up with their LIDs", func() bool {
		return links[0].Up() && links[1].Up() && links[0].IBAttr().LID == lid1 && links[1].IBAttr().LID == lid2
	})
	for i, dir := range []struct {
		from, to int
		dlid     uint16
		slid     uint16
	}{{0, 1, lid2, lid1}, {1, 0, lid1, lid2}} {
		p := link.Get()
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: 0x12, PSN: wire.PSN(i)}}
		payload := []byte(fmt.Sprintf("through two switches, way %d", i))
		n, err := wire.Build(p.Buf, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		p.N = n
		p.IB = link.IBAddr{DLID: dir.dlid, SL: 1}
		want := bytes.Clone(p.Data())
		if err := links[dir.from].Send([]*link.Packet{p}); err != nil {
			t.Fatal(err)
		}
		link.Put(p)
		select {
		case r := <-got:
			if r.IB.SLID != dir.slid || r.IB.DLID != dir.dlid || r.IB.SL != 1 || r.IB.VL != 1 {
				t.Errorf("way %d: addressing %+v", i, r.IB)
			}
			// The ICRC is the link's: compare the transport packet up to it.
			if d := r.Data(); !bytes.Equal(d[:len(d)-wire.ICRCLen], want[:len(want)-wire.ICRCLen]) {
				t.Errorf("way %d: transport packet changed", i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("way %d: nothing arrived; link stats %+v, fabric %+v", i, links[dir.to].Stats(), f.DataStats())
		}
	}
	if st := f.DataStats(); st.Delivered != 2 || st.Forwarded != 4 {
		t.Errorf("stats %+v", st)
	}
}

// TestVL15Dropped: VL15 has no credits; a port whose VL15 buffer is full
// (its HCA is not reading) drops what arrives on VL15, counting
// VL15Dropped, where data VLs would hold the sender back.
func TestVL15Dropped(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1")
	h1 := dn.hcas["Hca1"]
	p2, err := dn.f.ConnectHCA(dn.f.NodeByName("Hca2"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	lid2 := dn.sn.caPorts[dn.f.NodeByName("Hca2").PortGUID(1)].lid
	entered := make(chan int, 1)
	gate := make(chan struct{})
	var got atomic.Int64
	p2.Start(func(pkts [][]byte) {
		select {
		case entered <- len(pkts):
		default:
		}
		<-gate
		got.Add(int64(len(pkts)))
	})
	released := false
	defer func() {
		if !released {
			close(gate)
		}
	}()
	h1.send(t, pkt(t, h1.lid, lid2, 0, 15, 0xFFFF, 0, 8))
	if n := <-entered; n != 1 {
		t.Fatalf("first batch of %d", n)
	}
	before := dn.cnt("Hca2", 1).vl15Dropped
	// One at a time, each to the last link before the next (a burst
	// would overflow the two-packet VL15 buffers on the way too).
	last := dn.f.NodeByName("Switch2").port(1).dp.tx
	sent0 := last.Stats().Sent[15]
	for i := range 10 {
		h1.send(t, pkt(t, h1.lid, lid2, 0, 15, 0xFFFF, uint32(i+1), 8))
		waitFor(t, "the packet on the last link", func() bool { return last.Stats().Sent[15] == sent0+uint64(i)+1 })
	}
	// Two fit the port's VL15 buffer; the other eight are dropped there.
	waitFor(t, "VL15 drops at Hca2", func() bool { return dn.cnt("Hca2", 1).vl15Dropped-before == 8 })
	data := make([]byte, 64)
	data[1] = 1
	r := dn.sm.lidReq(lid2, mad.ClassPerf, mad.MethodGet, mad.PerfAttrPortCounters, 0, data)
	if pc, _ := mad.ParsePortCounters(r.MAD[mad.PerfDataOffset:]); pc.VL15Dropped != 8 {
		t.Errorf("PMA VL15Dropped %d, want 8", pc.VL15Dropped)
	}
	released = true
	close(gate)
	waitFor(t, "the three VL15 packets kept", func() bool { return got.Load() == 3 })
}

// TestArbitrationFollowsSM: a VL arbitration table the SM sets on a port
// reaches the port's link (the watcher applies it).
func TestArbitrationFollowsSM(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"), "Hca1")
	// Switch1's port 3, low-priority entries 0-31: VL1 weight 9, VL3
	// weight 200.
	tbl := mad.VLArbTable{}
	tbl.Entry[0] = mad.VLArbEntry{VL: 1, Weight: 9}
	tbl.Entry[1] = mad.VLArbEntry{VL: 3, Weight: 200}
	b := make([]byte, 64)
	tbl.Encode(b)
	dn.sm.drOK(path(1), mad.MethodSet, mad.SMAttrVLArbTable, mad.VLArbLowEntries0to31<<16|3, b)
	p := dn.f.NodeByName("Switch1").port(3)
	waitFor(t, "the table applied to the link", func() bool {
		dn.f.mu.Lock()
		defer dn.f.mu.Unlock()
		return p.dp.arbLow[0] == tbl.Entry[0] && p.dp.arbLow[1] == tbl.Entry[1]
	})
	dn.f.mu.Lock()
	a := portArbitration(p)
	dn.f.mu.Unlock()
	if len(a.Low) != 8 || a.Low[0] != (vl.Entry{VL: 1, Weight: 9}) || a.Low[1] != (vl.Entry{VL: 3, Weight: 200}) {
		t.Errorf("arbitration %+v", a)
	}
}
