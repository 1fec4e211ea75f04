package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// ibMcNode is a UD ID on an HCA of the fabric, resolved from its port GID
// to the group, with its QP, CQ and memory.
type ibMcNode struct {
	name string
	ch   *EventChannel
	id   *ID
	dev  *verbs.Device
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
}

func newIBMcNode(t *testing.T, n *ibNet, name string, group netip.Addr) *ibMcNode {
	t.Helper()
	s, d := n.open(name)
	return newIBMcID(t, s, d, name, group)
}

// newIBMcID is newIBMcNode's ID on device d of rdma_cm s.
func newIBMcID(t *testing.T, s *CM, d *verbs.Device, name string, group netip.Addr) *ibMcNode {
	t.Helper()
	x := &ibMcNode{name: name, ch: NewEventChannel(), dev: d}
	var err error
	if x.id, err = s.CreateID(x.ch, PortSpaceUDP, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.id.Destroy() })
	if err := x.id.ResolveAddr(ctxT(t), GIDAddr(d.GIDs()[0]), netip.AddrPortFrom(group, 0)); err != nil {
		t.Fatal(err)
	}
	want(t, x.ch, EventAddrResolved)
	if x.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if x.cq, err = d.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if x.qp, err = x.id.CreateQP(x.pd, verbs.QPInitAttr{SendCQ: x.cq, RecvCQ: x.cq,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if x.mr, err = x.pd.RegMR(make([]byte, 32*512), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return x
}

// waitMFT waits until the SM has programmed group mlid into the switches
// for ports: Switch1 port 2 (Hca3), Switch2 ports 1 and 2 (Hca2, Hca4), and
// one link between the switches; gone waits for the group to be cleared
// instead.
func waitMFT(t *testing.T, n *ibNet, mlid uint16, gone bool) {
	t.Helper()
	mft := func(sw string) uint16 {
		b, err := n.f.Query(n.f.NodeByName(sw), mad.SMAttrMulticastFT, mad.MulticastFTModifier(0, (mlid-sm.MLIDFirst)/32))
		if err != nil {
			t.Fatal(err)
		}
		x, _ := mad.ParseMulticastFT(b)
		return x.PortMask[(mlid-sm.MLIDFirst)%32]
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s1, s2 := mft("Switch1"), mft("Switch2")
		inter := uint16(1<<3 | 1<<5)
		ok := s1&(1<<2) != 0 && s2&(1<<1|1<<2) == 1<<1|1<<2 && s1&inter != 0 && s2&inter != 0
		if gone {
			ok = s1 == 0 && s2 == 0
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MFTs of MLID %#x: Switch1 %#x, Switch2 %#x (gone %v)", mlid, s1, s2, gone)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIBMulticast: rdma_cm multicast on InfiniBand ports of the fabric.
// Hca3 (Switch1) sends, Hca2 and Hca4 (Switch2) receive. Each
// JoinMulticast makes an SA MCMemberRecord join (the first creates the
// group), attaches the QP and reports the group's MLID, SL, Q_Key and MGID
// (IBMcastGID); once the SM has programmed the MFTs every message of the
// sender reaches each receiver exactly once. LeaveMulticast sends the SA
// Delete: with the last member the group and its MFT entries go. A second
// join of the same group, and a join on an ID without an SA, fail as
// documented.
func TestIBMulticast(t *testing.T) {
	n := newIBNet(t, true)
	group := netip.MustParseAddr("ff0e::1:2345")
	mgid := IBMcastGID(group, 0xFFFF)
	var nodes []*ibMcNode
	const count = 8
	for _, name := range []string{"Hca2", "Hca4", "Hca3"} {
		x := newIBMcNode(t, n, name, group)
		if name != "Hca3" {
			for i := range count {
				if err := x.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{x.mr.SGE(i*512, 512)}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		nodes = append(nodes, x)
	}
	var mlid uint16
	var ev *Event
	for _, x := range nodes {
		if err := x.id.JoinMulticast(ctxT(t), group, x.name); err != nil {
			t.Fatal(err)
		}
		ev = want(t, x.ch, EventMulticastJoin)
		ah := ev.UD.AH
		if ah.DLID < sm.MLIDFirst || mlid != 0 && ah.DLID != mlid || !ah.IsGlobal || ah.DGID != mgid ||
			ev.UD.QPNum != wire.QPMulticast || ev.UD.QKey != mad.RDMAUDPQKey || ev.Multicast != group || ev.McastContext != x.name {
			t.Fatalf("%s: join event %+v", x.name, ev)
		}
		mlid = ah.DLID
	}
	groups := n.sa.Groups()
	if len(groups) != 1 || len(groups[0].Members) != 3 || groups[0].Record.MLID != mlid || wire.GID(groups[0].Record.MGID) != mgid ||
		groups[0].Record.QKey != mad.RDMAUDPQKey || ev.UD.AH.SL != groups[0].Record.SL {
		t.Fatalf("SA groups %+v", groups)
	}
	if err := nodes[0].id.JoinMulticast(ctxT(t), group, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a second join: %v, want ErrInvalid", err)
	}
	waitMFT(t, n, mlid, false)

	snd := nodes[2]
	ah, err := snd.pd.CreateAH(ev.UD.AH)
	if err != nil {
		t.Fatal(err)
	}
	for i := range count {
		msg := fmt.Appendf(nil, "message %d to the group", i)
		copy(snd.mr.Buf()[i*512:], msg)
		if err := snd.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{snd.mr.SGE(i*512, len(msg))}, AH: ah, RemoteQPN: ev.UD.QPNum, RemoteQKey: ev.UD.QKey}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, snd.cq, verbs.WCSend)
	}
	for _, x := range nodes[:2] {
		seen := map[string]int{}
		for range count {
			wc := waitWC(t, x.cq, verbs.WCRecv)
			// A UD receive buffer starts with the 40-byte GRH.
			b := x.mr.Buf()[int(wc.WRID)*512+40 : int(wc.WRID)*512+int(wc.ByteLen)]
			seen[string(b)]++
		}
		for i := range count {
			if m := fmt.Sprintf("message %d to the group", i); seen[m] != 1 {
				t.Errorf("%s: %q received %d times", x.name, m, seen[m])
			}
		}
		var wc [1]verbs.WC
		time.Sleep(20 * time.Millisecond)
		if x.cq.Poll(wc[:]) != 0 {
			t.Errorf("%s: a completion beyond the %d messages: %+v", x.name, count, wc[0])
		}
	}

	for _, x := range nodes {
		if err := x.id.LeaveMulticast(group); err != nil {
			t.Fatalf("%s: leave: %v", x.name, err)
		}
	}
	if g := n.sa.Groups(); len(g) != 0 {
		t.Fatalf("SA groups after every member left: %+v", g)
	}
	waitMFT(t, n, mlid, true)
	if err := nodes[0].id.LeaveMulticast(group); !errors.Is(err, ErrInvalid) {
		t.Fatalf("leaving again: %v, want ErrInvalid", err)
	}
}

// TestIBMulticastDestroyLeaves: two IDs of one port joined to a group are
// one member at the SA, which stays until the last leaves; destroying an
// ID leaves its groups at the SA; with no SA a join is
// EventMulticastError wrapping cm.ErrNoSA.
func TestIBMulticastDestroyLeaves(t *testing.T) {
	n := newIBNet(t, true)
	group := netip.MustParseAddr("ff0e::77")
	s, d := n.open("Hca2")
	x, x2 := newIBMcID(t, s, d, "a", group), newIBMcID(t, s, d, "b", group)
	for _, y := range []*ibMcNode{x, x2} {
		if err := y.id.JoinMulticast(ctxT(t), group, nil); err != nil {
			t.Fatal(err)
		}
		want(t, y.ch, EventMulticastJoin)
	}
	if g := n.sa.Groups(); len(g) != 1 || len(g[0].Members) != 1 {
		t.Fatalf("SA groups: %+v", g)
	}
	if err := x2.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if g := n.sa.Groups(); len(g) != 1 {
		t.Fatalf("SA groups after one of two IDs left: %+v", g)
	}
	x.id.Destroy()
	if g := n.sa.Groups(); len(g) != 0 {
		t.Fatalf("SA groups after Destroy: %+v", g)
	}

	n2 := newIBNet(t, false)
	y := newIBMcNode(t, n2, "Hca2", group)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	if err := y.id.JoinMulticast(ctx, group, nil); err != nil {
		t.Fatal(err)
	}
	ev := want(t, y.ch, EventMulticastError)
	if !errors.Is(ev.Err, cm.ErrNoSA) && !errors.Is(ev.Err, context.DeadlineExceeded) {
		t.Fatalf("join without an SA: %+v", ev)
	}
}
