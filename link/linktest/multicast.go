// The multicast part of the conformance suite: links that implement
// link.Multicaster deliver packets sent to a joined group, one copy per
// member, with the group as Dst, and stop when they leave.

package linktest

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
)

// RunMulticast checks a link.Multicaster implementation. mk returns three
// links, not started, on one port (a sends, b and c receive) whose first
// addresses are of group's family; group is a multicast address the links
// can join where the test runs.
func RunMulticast(t *testing.T, group netip.Addr, mk func(t *testing.T) (a, b, c link.Link)) {
	t.Run("Members", func(t *testing.T) { testMembers(t, group, mk) })
	t.Run("Errors", func(t *testing.T) { testGroupErrors(t, group, mk) })
}

func multicaster(t *testing.T, l link.Link) link.Multicaster {
	t.Helper()
	m, ok := l.(link.Multicaster)
	if !ok {
		t.Fatalf("%T is not a link.Multicaster", l)
	}
	return m
}

func testMembers(t *testing.T, group netip.Addr, mk func(t *testing.T) (a, b, c link.Link)) {
	a, b, c := mk(t)
	ca, cb, cc := NewCollector(), NewCollector(), NewCollector()
	start(t, a, ca)
	start(t, b, cb)
	start(t, c, cc)
	if err := multicaster(t, b).JoinGroup(group); err != nil {
		t.Fatalf("b JoinGroup(%s): %v", group, err)
	}
	if err := multicaster(t, c).JoinGroup(group); err != nil {
		t.Fatalf("c JoinGroup(%s): %v", group, err)
	}
	dst := netip.AddrPortFrom(group, a.Port())
	src := netip.AddrPortFrom(a.Addrs()[0].Unmap(), 0)
	want := netip.AddrPortFrom(a.Addrs()[0].Unmap(), a.Port())
	const n = 4
	for i := range uint32(n) {
		SendAll(t, a, []*link.Packet{MakePacket(i, sizeOf(i), src, dst)}, 1)
	}
	for name, col := range map[string]*Collector{"b": cb, "c": cc} {
		got := col.WaitFor(t, n)
		for i, r := range got[:n] {
			seq := Seq(r.Data)
			if p := CheckPacket(r, seq, sizeOf(seq), want, Unmap(dst)); p != "" {
				t.Errorf("%s, packet %d: %s", name, i, p)
			}
		}
	}
	if ca.Len() != 0 {
		t.Errorf("the sender, not joined, received %d packets", ca.Len())
	}

	// c leaves: only b receives the next packet.
	if err := multicaster(t, c).LeaveGroup(group); err != nil {
		t.Fatalf("c LeaveGroup: %v", err)
	}
	SendAll(t, a, []*link.Packet{MakePacket(n, MinSize, src, dst)}, 1)
	cb.WaitFor(t, n+1)
	cc.Quiet(t, n, 100*time.Millisecond)
	if err := multicaster(t, b).LeaveGroup(group); err != nil {
		t.Fatalf("b LeaveGroup: %v", err)
	}
	SendAll(t, a, []*link.Packet{MakePacket(n+1, MinSize, src, dst)}, 1)
	cb.Quiet(t, n+1, 100*time.Millisecond)
}

func testGroupErrors(t *testing.T, group netip.Addr, mk func(t *testing.T) (a, b, c link.Link)) {
	a, _, _ := mk(t)
	start(t, a, NewCollector())
	m := multicaster(t, a)
	other := netip.MustParseAddr("ff02::1:3")
	if group.Is6() && !group.Is4In6() {
		other = netip.MustParseAddr("224.0.0.251")
	}
	for _, bad := range []netip.Addr{{}, a.Addrs()[0], other} {
		if err := m.JoinGroup(bad); !errors.Is(err, link.ErrAddress) {
			t.Errorf("JoinGroup(%v) = %v, want link.ErrAddress", bad, err)
		}
	}
	if err := m.LeaveGroup(group); !errors.Is(err, link.ErrAddress) {
		t.Errorf("LeaveGroup before joining = %v, want link.ErrAddress", err)
	}
	if err := m.JoinGroup(group); err != nil {
		t.Fatalf("JoinGroup: %v", err)
	}
	if err := m.JoinGroup(group); !errors.Is(err, link.ErrAddress) {
		t.Errorf("JoinGroup twice = %v, want link.ErrAddress", err)
	}
	if err := m.LeaveGroup(group); err != nil {
		t.Errorf("LeaveGroup: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.JoinGroup(group); !errors.Is(err, link.ErrClosed) {
		t.Errorf("JoinGroup after Close = %v, want link.ErrClosed", err)
	}
}
