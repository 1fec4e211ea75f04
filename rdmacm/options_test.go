package rdmacm

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
)

// tclassLog records the traffic classes of the QP packets (not QP1's MADs)
// each address sends.
type tclassLog struct {
	mu   sync.Mutex
	seen map[netip.Addr]map[uint8]int
}

func (l *tclassLog) filter(p *link.Packet) bool {
	b := p.Data()
	if len(b) >= 8 && (uint32(b[5])<<16|uint32(b[6])<<8|uint32(b[7])) != 1 { // BTH destination QP
		l.mu.Lock()
		a := p.Src.Addr()
		if l.seen[a] == nil {
			l.seen[a] = map[uint8]int{}
		}
		l.seen[a][p.TClass]++
		l.mu.Unlock()
	}
	return false
}

func (l *tclassLog) classes(a netip.Addr) map[uint8]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uint8]int{}
	for k, v := range l.seen[a] {
		out[k] = v
	}
	return out
}

// TestSetTOS connects with a type of service set on the active ID: the REQ
// carries it as the path's traffic class, both QPs' address vectors take it
// (the passive one from the REQ), and every packet of the connection, in
// both directions, leaves with it. Setting it once connecting fails.
func TestSetTOS(t *testing.T) {
	const tos = 0xb8 // DSCP 46 (EF)
	log := &tclassLog{seen: map[netip.Addr]map[uint8]int{}}
	h := newHosts(t, loop.Faults{Filter: log.filter})
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20001)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
	defer cid.Destroy()
	if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20001)); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventAddrResolved)
	if err := cid.SetTOS(tos); err != nil {
		t.Fatal(err)
	}
	if got := cid.TOS(); got != tos {
		t.Fatalf("TOS %#x after SetTOS(%#x)", got, tos)
	}
	cid.ResolveRoute(ctx)
	want(t, cch, EventRouteResolved)
	pda, _ := cid.Device().AllocPD()
	defer pda.Dealloc()
	cqa, _ := cid.Device().CreateCQ(16, nil)
	defer cqa.Destroy()
	if _, err := cid.CreateQP(pda, verbs.QPInitAttr{SendCQ: cqa, RecvCQ: cqa, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	if err := cid.SetTOS(0x20); !errors.Is(err, ErrState) {
		t.Errorf("SetTOS after Connect: %v, want ErrState", err)
	}
	req := want(t, sch, EventConnectRequest)
	sid := req.ID
	defer sid.Destroy()
	pdb, _ := sid.Device().AllocPD()
	defer pdb.Dealloc()
	cqb, _ := sid.Device().CreateCQ(16, nil)
	defer cqb.Destroy()
	if _, err := sid.CreateQP(pdb, verbs.QPInitAttr{SendCQ: cqb, RecvCQ: cqb, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := sid.Accept(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventEstablished)
	want(t, sch, EventEstablished)
	for _, id := range []*ID{cid, sid} {
		a, _ := id.QP().Query()
		if a.AH.TrafficClass != tos {
			t.Errorf("QP of %v: AH traffic class %#x, want %#x", id.LocalAddr(), a.AH.TrafficClass, tos)
		}
	}
	c := &Conn{ID: cid, QP: cid.QP(), PD: pda, CQ: cqa, RecvCQ: cqa}
	s := &Conn{ID: sid, QP: sid.QP(), PD: pdb, CQ: cqb, RecvCQ: cqb}
	exchange(t, c, s, []byte("ping"))
	exchange(t, s, c, []byte("pong"))
	for _, a := range []netip.Addr{ipA, ipB} {
		got := log.classes(a)
		if len(got) != 1 || got[tos] == 0 {
			t.Errorf("%v sent QP packets with traffic classes (class: count) %v, want all %#x", a, got, tos)
		}
	}
	if err := sid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	want(t, cch, EventDisconnected)
	want(t, sch, EventDisconnected)
}

// TestSetACKTimeout: an active ID's ACK timeout goes on its QP and in the
// REQ, so a passive side that sets none takes it; a passive side that sets
// its own keeps it; out-of-range values and late calls fail.
func TestSetACKTimeout(t *testing.T) {
	for _, c := range []struct {
		name           string
		client, server int // -1: not set
		wantC, wantS   uint8
	}{
		{"defaults", -1, -1, 14, 14},
		{"client", 10, -1, 10, 10},
		{"server", -1, 18, 14, 18},
		{"both", 9, 20, 9, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHosts(t, loop.Faults{})
			ctx := ctxT(t)
			sch, cch := NewEventChannel(), NewEventChannel()
			lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
			defer lid.Destroy()
			if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20002)); err != nil {
				t.Fatal(err)
			}
			if err := lid.Listen(4); err != nil {
				t.Fatal(err)
			}
			if err := lid.SetACKTimeout(3); !errors.Is(err, ErrState) {
				t.Errorf("SetACKTimeout on a listener: %v, want ErrState", err)
			}
			cid, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
			defer cid.Destroy()
			if err := cid.SetACKTimeout(32); !errors.Is(err, ErrInvalid) {
				t.Errorf("SetACKTimeout(32): %v, want ErrInvalid", err)
			}
			if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20002)); err != nil {
				t.Fatal(err)
			}
			want(t, cch, EventAddrResolved)
			if c.client >= 0 {
				if err := cid.SetACKTimeout(uint8(c.client)); err != nil {
					t.Fatal(err)
				}
			}
			cid.ResolveRoute(ctx)
			want(t, cch, EventRouteResolved)
			smallQP(t, cid)
			if err := cid.Connect(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
				t.Fatal(err)
			}
			if err := cid.SetACKTimeout(5); !errors.Is(err, ErrState) {
				t.Errorf("SetACKTimeout after Connect: %v, want ErrState", err)
			}
			sid := want(t, sch, EventConnectRequest).ID
			defer sid.Destroy()
			smallQP(t, sid)
			if c.server >= 0 {
				if err := sid.SetACKTimeout(uint8(c.server)); err != nil {
					t.Fatal(err)
				}
			}
			if err := sid.Accept(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
				t.Fatal(err)
			}
			want(t, cch, EventEstablished)
			want(t, sch, EventEstablished)
			ca, _ := cid.QP().Query()
			sa, _ := sid.QP().Query()
			if ca.Timeout != c.wantC || sa.Timeout != c.wantS {
				t.Errorf("QP ACK timeouts: client %d, server %d; want %d, %d", ca.Timeout, sa.Timeout, c.wantC, c.wantS)
			}
			cid.Disconnect()
			want(t, cch, EventDisconnected)
			want(t, sch, EventDisconnected)
		})
	}
}
