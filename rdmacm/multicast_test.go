package rdmacm

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// mcNode is one mckey-like endpoint: a UD ID resolved to the group, its
// QP, CQ and memory.
type mcNode struct {
	ch *EventChannel
	id *ID
	pd *verbs.PD
	cq *verbs.CQ
	qp *verbs.QP
	mr *verbs.MR
}

func newMcNode(t *testing.T, s *CM, group netip.Addr) *mcNode {
	t.Helper()
	n := &mcNode{ch: NewEventChannel()}
	var err error
	if n.id, err = s.CreateID(n.ch, PortSpaceUDP, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.id.Destroy() })
	if err := n.id.ResolveAddr(ctxT(t), netip.Addr{}, netip.AddrPortFrom(group, 0)); err != nil {
		t.Fatal(err)
	}
	want(t, n.ch, EventAddrResolved)
	if n.pd, err = n.id.Device().AllocPD(); err != nil {
		t.Fatal(err)
	}
	if n.cq, err = n.id.Device().CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	if n.qp, err = n.id.CreateQP(n.pd, verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if n.mr, err = n.pd.RegMR(make([]byte, 8*256), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *mcNode) join(t *testing.T, group netip.Addr) *Event {
	t.Helper()
	if err := n.id.JoinMulticast(ctxT(t), group, "mctx"); err != nil {
		t.Fatal(err)
	}
	ev := want(t, n.ch, EventMulticastJoin)
	gid := wire.GIDFromAddr(group)
	if ev.UD.AH.DGID != gid || ev.UD.QPNum != wire.QPMulticast || ev.UD.QKey != mad.RDMAUDPQKey ||
		ev.UD.AH.HopLimit != McastHopLimit || ev.Multicast != group || ev.McastContext != "mctx" {
		t.Fatalf("join event %+v", ev)
	}
	return ev
}

func testMcastCM(t *testing.T, a, b *CM, group netip.Addr) {
	snd, rcv := newMcNode(t, a, group), newMcNode(t, b, group)
	for i := range 4 {
		if err := rcv.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{rcv.mr.SGE(i*256, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
	rcv.join(t, group)
	ev := snd.join(t, group)
	ah, err := snd.pd.CreateAH(ev.UD.AH)
	if err != nil {
		t.Fatal(err)
	}
	send := func(imm uint32) {
		t.Helper()
		copy(snd.mr.Buf(), "multicast hello")
		if err := snd.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSendWithImm, Imm: imm, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{snd.mr.SGE(0, 15)}, AH: ah, RemoteQPN: ev.UD.QPNum, RemoteQKey: ev.UD.QKey}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, snd.cq, verbs.WCSend)
	}
	send(7)
	wc := waitWC(t, rcv.cq, verbs.WCRecv)
	if wc.Imm != 7 || wc.SrcQP != snd.qp.QPN() || wc.ByteLen != 40+15 || wc.Flags&verbs.WCGRH == 0 ||
		string(rcv.mr.Buf()[wc.WRID*256+40:][:15]) != "multicast hello" {
		t.Fatalf("receive %+v", wc)
	}

	// Joining again, leaving what was not joined, and the wrong kinds of
	// ID or address are refused.
	if err := rcv.id.JoinMulticast(ctxT(t), group, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("join twice: %v", err)
	}
	other := netip.MustParseAddr("239.9.9.9")
	if group.Is6() {
		other = netip.MustParseAddr("ff0e::9")
	}
	if err := rcv.id.LeaveMulticast(other); !errors.Is(err, ErrInvalid) {
		t.Errorf("leave a group not joined: %v", err)
	}
	if err := rcv.id.JoinMulticast(ctxT(t), rcv.id.LocalAddr().Addr(), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("join a unicast address: %v", err)
	}
	tcp, _ := b.CreateID(nil, PortSpaceTCP, nil)
	defer tcp.Destroy()
	if err := tcp.JoinMulticast(ctxT(t), group, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("join on a TCP ID: %v", err)
	}
	idle, _ := b.CreateID(nil, PortSpaceUDP, nil)
	defer idle.Destroy()
	if err := idle.JoinMulticast(ctxT(t), group, nil); !errors.Is(err, ErrState) {
		t.Errorf("join on an ID without an address: %v", err)
	}

	// After leaving, the receiver gets nothing more.
	if err := rcv.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	send(8)
	time.Sleep(50 * time.Millisecond)
	var wcs [1]verbs.WC
	if rcv.cq.Poll(wcs[:]) != 0 {
		t.Errorf("received after leaving: %+v", wcs[0])
	}
	if err := snd.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
}

func TestMulticastLoop(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	testMcastCM(t, h.a, h.b, netip.MustParseAddr("239.0.4.1"))
}

func TestMulticastUDP(t *testing.T) {
	a, b := udpHosts(t, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	testMcastCM(t, a, b, netip.MustParseAddr("239.255.4.2"))
}

// TestMulticastSync joins on a synchronous ID: the call returns when the
// join is done, and the QP created before is attached.
func TestMulticastSync(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	group := netip.MustParseAddr("224.1.2.3")
	id, err := h.b.CreateID(nil, PortSpaceUDP, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(ipB, 0)); err != nil {
		t.Fatal(err)
	}
	pd, _ := id.Device().AllocPD()
	cq, _ := id.Device().CreateCQ(4, nil)
	qp, err := id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := id.JoinMulticast(ctxT(t), group, nil); err != nil {
		t.Fatal(err)
	}
	// Attached: detaching succeeds once, through LeaveMulticast.
	if err := id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := qp.DetachMcast(McastGID(group), 0); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("QP still attached after LeaveMulticast: %v", err)
	}
}

// plainLink hides a link's Multicaster methods.
type plainLink struct{ link.Link }

// TestMulticastError joins on a device whose link cannot join groups: the
// QP cannot be attached, and MULTICAST_ERROR says why (-EOPNOTSUPP).
func TestMulticastError(t *testing.T) {
	n := loop.NewNetwork(loop.Config{})
	l, err := n.Attach([]netip.Addr{ipA}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(plainLink{l}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New([]*verbs.Device{d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	defer d.Close()
	defer s.Close()
	group := netip.MustParseAddr("239.0.0.5")
	node := newMcNode(t, s, group)
	if err := node.id.JoinMulticast(ctxT(t), group, nil); err != nil {
		t.Fatal(err)
	}
	ev := want(t, node.ch, EventMulticastError)
	if ev.Status != StatusNotSupported || ev.Multicast != group {
		t.Errorf("event %+v", ev)
	}
	if err := node.id.LeaveMulticast(group); !errors.Is(err, ErrInvalid) {
		t.Errorf("leave after a failed join: %v", err)
	}
}
