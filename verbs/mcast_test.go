// UD multicast: attach/detach rules and limits, and delivery to every
// attached QP (one copy each, own receive WR, Q_Key checked), over the
// in-process link and over real UDP.

package verbs

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/link/udp"
	"github.com/softrdma/softrdma/wire"
)

// mcQKey is the Q_Key rdma_cm gives multicast QPs (RDMA_UDP_QKEY).
const mcQKey wire.QKey = 0x01234567

// mcastDevicesLoop opens three devices on one loop network, port 4791.
func mcastDevicesLoop(t *testing.T) [3]*Device { return mcastDevicesLoopWith(t, "10.0.0.%d", nil) }

// mcastDevicesLoopWith opens three devices at the addresses format makes of
// 1, 2 and 3, with filter as the network's Filter.
func mcastDevicesLoopWith(t *testing.T, format string, filter func(*link.Packet) bool) [3]*Device {
	t.Helper()
	n := loop.NewNetwork(loop.Config{Seed: 1, Faults: loop.Faults{Filter: filter}})
	var ds [3]*Device
	for i := range ds {
		l, err := n.Attach([]netip.Addr{netip.MustParseAddr(fmt.Sprintf(format, i+1))}, 4791)
		if err != nil {
			t.Fatal(err)
		}
		if ds[i], err = Open(l, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range ds {
			d.Close()
		}
		n.Close()
	})
	return ds
}

// mcastDevicesUDP opens three devices on 127.0.0.1-3 sharing an ephemeral
// port, each sending to that port.
func mcastDevicesUDP(t *testing.T) [3]*Device {
	t.Helper()
	for range 5 {
		var ls []*udp.Link
		var port uint16
		for i := range 3 {
			l, err := udp.Open(udp.Config{Addrs: []netip.Addr{netip.MustParseAddr(fmt.Sprintf("127.0.0.%d", i+1))}, Port: port})
			if err != nil {
				break
			}
			port = l.Port()
			ls = append(ls, l)
		}
		if len(ls) < 3 {
			for _, l := range ls {
				l.Close()
			}
			continue
		}
		var ds [3]*Device
		for i, l := range ls {
			d, err := Open(l, &Options{RemotePort: port})
			if err != nil {
				t.Fatal(err)
			}
			ds[i] = d
		}
		t.Cleanup(func() {
			for _, d := range ds {
				d.Close()
			}
		})
		return ds
	}
	t.Fatal("no ephemeral port free on 127.0.0.1-3")
	return [3]*Device{}
}

// udQP is a UD QP in RTS with its PD, CQ and a registered buffer.
type udQP struct {
	pd *PD
	cq *CQ
	qp *QP
	mr *MR
}

func newUDQP(t *testing.T, d *Device, qkey wire.QKey) *udQP {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: UD, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    QPAttr
		mask AttrMask
	}{
		{QPAttr{State: StateInit, PortNum: 1, QKey: qkey}, AttrState | AttrPKeyIndex | AttrPort | AttrQKey},
		{QPAttr{State: StateRTR}, AttrState},
		{QPAttr{State: StateRTS}, AttrState | AttrSQPSN},
	} {
		if err := qp.Modify(&m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	mr, err := pd.RegMR(make([]byte, 16*256), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return &udQP{pd, cq, qp, mr}
}

// postRecvs posts n receives of 256 bytes (GRH area and payload).
func (u *udQP) postRecvs(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if err := u.qp.PostRecv([]RecvWR{{ID: uint64(i), SGL: []SGE{u.mr.SGE(i*256, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// quiet fails t if cq holds a completion after a short wait.
func quiet(t *testing.T, name string, cq *CQ) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	var wc [1]WC
	if cq.Poll(wc[:]) != 0 {
		t.Errorf("%s: unexpected completion %+v", name, wc[0])
	}
}

func TestMcastLoop(t *testing.T) { testMcastDelivery(t, mcastDevicesLoop(t), "239.1.2.3") }
func TestMcastLoopIPv6(t *testing.T) {
	testMcastDelivery(t, mcastDevicesLoopWith(t, "fd00::%d", nil), "ff0e::4791")
}
func TestMcastUDP(t *testing.T) { testMcastDelivery(t, mcastDevicesUDP(t), "239.255.47.91") }

// testMcastDelivery sends from device 0 to a group two QPs of device 1 and
// one of device 2 are attached to, plus a QP of device 1 with another
// Q_Key: each matching QP gets every message once, with the GRH and the
// sender's QPN, the other Q_Key's none (counted); detaching and destroying
// stop delivery.
func testMcastDelivery(t *testing.T, ds [3]*Device, group string) {
	gaddr := netip.MustParseAddr(group)
	gid := wire.GIDFromAddr(gaddr)
	s := newUDQP(t, ds[0], mcQKey)
	b1, b2 := newUDQP(t, ds[1], mcQKey), newUDQP(t, ds[1], mcQKey)
	bad := newUDQP(t, ds[1], mcQKey+1)
	c := newUDQP(t, ds[2], mcQKey)
	for _, u := range []*udQP{b1, b2, bad, c} {
		u.postRecvs(t, 8)
		if err := u.qp.AttachMcast(gid, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Attaching again changes nothing: still one copy per QP.
	if err := b1.qp.AttachMcast(gid, 0); err != nil {
		t.Fatalf("attach twice: %v", err)
	}
	ah, err := s.pd.CreateAH(AHAttr{DGID: gid, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int, from int) {
		t.Helper()
		for i := range n {
			msg := s.mr.Buf()[i*64 : i*64+64]
			for j := range msg {
				msg[j] = byte(from + i + j)
			}
			// RemoteQPN is what the application says; a multicast AH
			// sends to 0xFFFFFF whatever it is.
			err := s.qp.PostSend([]SendWR{{ID: uint64(i), Opcode: WRSendWithImm, Imm: uint32(from + i),
				Flags: SendSignaled, SGL: []SGE{s.mr.SGE(i*64, 64)}, AH: ah, RemoteQPN: 0x123, RemoteQKey: mcQKey}})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, wc := range waitWC(t, s.cq, n, 5*time.Second) {
			if wc.Status != Success {
				t.Fatalf("send completion %+v", wc)
			}
		}
	}
	check := func(name string, u *udQP, n, from int) {
		t.Helper()
		for i, wc := range waitWC(t, u.cq, n, 5*time.Second) {
			if wc.Status != Success || wc.Opcode != WCRecv || wc.Flags&WCGRH == 0 || wc.Flags&WCWithImm == 0 ||
				wc.SrcQP != s.qp.QPN() || wc.ByteLen != grhLen+64 || wc.Imm != uint32(from+i) {
				t.Errorf("%s: completion %d: %+v", name, i, wc)
				continue
			}
			buf := u.mr.Buf()[wc.WRID*256:]
			// The GRH area (an IPv6 header, or an IPv4 one at offset 20)
			// names the group as destination and the sender as source.
			src, dst := netip.AddrFrom16([16]byte(buf[8:24])), netip.AddrFrom16([16]byte(buf[24:40]))
			if gaddr.Is4() {
				src, dst = netip.AddrFrom4([4]byte(buf[32:36])), netip.AddrFrom4([4]byte(buf[36:40]))
			}
			if dst != gaddr || src != ds[0].GIDs()[0].Addr().Unmap() {
				t.Errorf("%s: GRH %s -> %s, want %s -> %s", name, src, dst, ds[0].GIDs()[0].Addr(), gaddr)
			}
			for j := range 64 {
				if buf[grhLen+j] != byte(from+i+j) {
					t.Errorf("%s: message %d byte %d = %d", name, i, j, buf[grhLen+j])
					break
				}
			}
		}
	}
	qkeyDrops := ds[1].Stats().RxQKeyDrop.Load()
	send(3, 0)
	check("b1", b1, 3, 0)
	check("b2", b2, 3, 0)
	check("c", c, 3, 0)
	quiet(t, "b1 (attached twice)", b1.cq)
	quiet(t, "the QP with another Q_Key", bad.cq)
	if got := ds[1].Stats().RxQKeyDrop.Load() - qkeyDrops; got != 3 {
		t.Errorf("Q_Key drops %d, want 3", got)
	}

	// b2 detaches, c's QP is destroyed (which detaches it): b1 alone
	// receives; device 2 has left the group.
	if err := b2.qp.DetachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	noGroup := ds[2].Stats().RxMcastNoGroup.Load()
	send(2, 100)
	check("b1 after detaches", b1, 2, 100)
	quiet(t, "b2 detached", b2.cq)
	if got := ds[2].Stats().RxMcastNoGroup.Load(); got != noGroup {
		t.Errorf("device 2 received %d packets for the group it left", got-noGroup)
	}

	// A packet for a group the link joined but no QP is attached to is
	// dropped and counted.
	other := netip.MustParseAddr("239.1.9.9")
	if !gaddr.Is4() {
		other = netip.MustParseAddr("ff0e::1:9")
	}
	if err := ds[1].Link().(link.Multicaster).JoinGroup(other); err != nil {
		t.Fatal(err)
	}
	ah2, err := s.pd.CreateAH(AHAttr{DGID: wire.GIDFromAddr(other)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.qp.PostSend([]SendWR{{ID: 9, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.mr.SGE(0, 8)}, AH: ah2, RemoteQKey: mcQKey}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, s.cq, 1, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for ds[1].Stats().RxMcastNoGroup.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ds[1].Stats().RxMcastNoGroup.Load() != 1 {
		t.Errorf("RxMcastNoGroup = %d, want 1", ds[1].Stats().RxMcastNoGroup.Load())
	}
}

// TestMcastWire checks the packet a multicast send puts on the wire: to the
// group's address at the RoCEv2 port, DestQP 0xFFFFFF whatever the WR's
// RemoteQPN, the WR's Q_Key, the sender's QPN.
func TestMcastWire(t *testing.T) {
	pkts := make(chan []byte, 16)
	ds := mcastDevicesLoopWith(t, "10.0.0.%d", func(p *link.Packet) bool {
		if p.Dst.Addr().IsMulticast() {
			if p.Dst != netip.MustParseAddrPort("224.0.1.200:4791") {
				t.Errorf("sent to %s", p.Dst)
			}
			pkts <- append([]byte(nil), p.Data()...)
		}
		return false
	})
	s := newUDQP(t, ds[0], mcQKey)
	ah, err := s.pd.CreateAH(AHAttr{DGID: wire.GIDFromAddr(netip.MustParseAddr("224.0.1.200"))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.qp.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.mr.SGE(0, 16)},
		AH: ah, RemoteQPN: 0x42, RemoteQKey: mcQKey}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, s.cq, 1, 5*time.Second)
	select {
	case b := <-pkts:
		pkt, err := wire.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if q := pkt.BTH().DestQP(); q != wire.QPMulticast {
			t.Errorf("DestQP %#x, want 0xFFFFFF", uint32(q))
		}
		if k, src := pkt.DETH().QKey(), pkt.DETH().SrcQP(); k != mcQKey || src != s.qp.QPN() {
			t.Errorf("DETH Q_Key %#x, source QP %#x", uint32(k), uint32(src))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no multicast packet sent")
	}
}

// TestMcastAttachRules checks AttachMcast's and DetachMcast's errors and
// limits.
func TestMcastAttachRules(t *testing.T) {
	ds := mcastDevicesLoop(t)
	d := ds[0]
	u := newUDQP(t, d, mcQKey)
	gid := func(s string) wire.GID { return wire.GIDFromAddr(netip.MustParseAddr(s)) }
	g := gid("239.0.0.1")

	// Only UD QPs; only multicast GIDs of the device's families.
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(4, nil)
	rc, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	expectErr(t, "attach an RC QP", rc.AttachMcast(g, 0), ErrInvalid)
	expectErr(t, "attach to a unicast GID", u.qp.AttachMcast(gid("10.0.0.9"), 0), ErrInvalid)
	expectErr(t, "attach to an IPv6 group on an IPv4 device", u.qp.AttachMcast(gid("ff0e::1"), 0), ErrInvalid)
	expectErr(t, "detach when not attached", u.qp.DetachMcast(g, 0), ErrInvalid)
	expectErr(t, "detach from a unicast GID", u.qp.DetachMcast(gid("10.0.0.9"), 0), ErrInvalid)
	if err := u.qp.AttachMcast(g, 0); err != nil {
		t.Fatal(err)
	}
	if err := u.qp.DetachMcast(g, 0); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "detach twice", u.qp.DetachMcast(g, 0), ErrInvalid)

	// The device advertises rxe's limits.
	a := d.QueryDevice()
	if a.MaxMcastGrp != 8192 || a.MaxMcastQPAttach != 56 || a.MaxTotalMcastQPAttach != 0x70000 {
		t.Errorf("multicast limits %d, %d, %#x", a.MaxMcastGrp, a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach)
	}

	// QPs per group: MaxMcastQPAttach, then ErrLimit.
	var qps []*udQP
	for range MaxMcastQPAttach {
		v := newUDQP(t, d, mcQKey)
		if err := v.qp.AttachMcast(g, 0); err != nil {
			t.Fatal(err)
		}
		qps = append(qps, v)
	}
	expectErr(t, "one QP too many in a group", u.qp.AttachMcast(g, 0), ErrLimit)
	// Groups: MaxMcastGrp, then ErrLimit (one is taken by g).
	for i := range MaxMcastGrp - 1 {
		if err := u.qp.AttachMcast(gid(fmt.Sprintf("239.1.%d.%d", i/256, i%256)), 0); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	expectErr(t, "one group too many", u.qp.AttachMcast(gid("239.2.0.0"), 0), ErrLimit)
	// Destroying a QP detaches it from all its groups, freeing them.
	if err := u.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := qps[0].qp.AttachMcast(gid("239.2.0.0"), 0); err != nil {
		t.Fatalf("after Destroy freed the groups: %v", err)
	}
	expectErr(t, "attach a destroyed QP", u.qp.AttachMcast(g, 0), ErrClosed)

	// Attachments in all: a lower bound set on the table, as the constant
	// would take 458752 attachments.
	d.mcast.mu.Lock()
	d.mcast.maxTotal = d.mcast.total
	d.mcast.mu.Unlock()
	expectErr(t, "one attachment too many", qps[1].qp.AttachMcast(gid("239.3.0.0"), 0), ErrLimit)
	if err := qps[1].qp.DetachMcast(g, 0); err != nil {
		t.Fatal(err)
	}
	if err := qps[1].qp.AttachMcast(gid("239.3.0.0"), 0); err != nil {
		t.Fatalf("after a detach: %v", err)
	}
}

// noMcastLink hides a link's Multicaster methods.
type noMcastLink struct{ link.Link }

func TestMcastLinkWithoutGroups(t *testing.T) {
	n := loop.NewNetwork(loop.Config{})
	l, err := n.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(noMcastLink{l}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	defer d.Close()
	u := newUDQP(t, d, mcQKey)
	expectErr(t, "attach on a link without groups", u.qp.AttachMcast(wire.GIDFromAddr(netip.MustParseAddr("239.0.0.1")), 0), ErrNotSupported)
}
