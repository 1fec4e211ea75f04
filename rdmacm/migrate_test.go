package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/loop"
)

// noEvent checks that ch holds no event now.
func noEvent(t *testing.T, ch *EventChannel, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if ev, err := ch.Get(ctx); err == nil {
		t.Errorf("%s: unexpected %v for %p", what, ev.Type, ev.ID)
	}
}

// TestMigrateID moves IDs between channels at each stage of a connection:
// a client ID with its ADDR_RESOLVED still queued (it moves; another ID's
// event stays), a listener with a CONNECT_REQUEST still queued (it moves,
// and so does the new ID's later ESTABLISHED), and both connected IDs
// before they disconnect (their DISCONNECTED and TIMEWAIT_EXIT come on
// the new channels).
func TestMigrateID(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	sch, cch := NewEventChannel(), NewEventChannel()
	sch2, cch2 := NewEventChannel(), NewEventChannel()
	lid, _ := h.b.CreateID(sch, PortSpaceTCP, nil)
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20003)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
	defer cid.Destroy()
	other, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
	defer other.Destroy()
	for _, id := range []*ID{cid, other} {
		if err := id.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20003)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cid.MigrateID(cch2); err != nil {
		t.Fatal(err)
	}
	if ev := want(t, cch2, EventAddrResolved); ev.ID != cid {
		t.Fatalf("ADDR_RESOLVED on the new channel is for %p, want the migrated %p", ev.ID, cid)
	}
	if ev := want(t, cch, EventAddrResolved); ev.ID != other {
		t.Fatalf("ADDR_RESOLVED left on the old channel is for %p, want %p", ev.ID, other)
	}
	noEvent(t, cch, "old client channel")
	cid.ResolveRoute(ctx)
	want(t, cch2, EventRouteResolved)
	smallQP(t, cid)
	if err := cid.Connect(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	// Let the CONNECT_REQUEST arrive on sch, then move the listener.
	deadline := time.Now().Add(5 * time.Second)
	for {
		sch.mu.Lock()
		n := len(sch.q)
		sch.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := lid.MigrateID(sch2); err != nil {
		t.Fatal(err)
	}
	req := want(t, sch2, EventConnectRequest)
	if req.ListenID != lid {
		t.Fatalf("CONNECT_REQUEST for listener %p, want %p", req.ListenID, lid)
	}
	sid := req.ID
	defer sid.Destroy()
	smallQP(t, sid)
	if err := sid.Accept(ctx, &ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	want(t, sch2, EventEstablished)
	want(t, cch2, EventEstablished)
	noEvent(t, sch, "old server channel")

	// Connected: move both IDs back to the first channels and disconnect.
	if err := cid.MigrateID(cch); err != nil {
		t.Fatal(err)
	}
	if err := sid.MigrateID(sch); err != nil {
		t.Fatal(err)
	}
	if err := cid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if ev := want(t, sch, EventDisconnected); ev.ID != sid {
		t.Fatalf("DISCONNECTED for %p, want %p", ev.ID, sid)
	}
	want(t, cch, EventDisconnected)
	want(t, cch, EventTimewaitExit)
	want(t, sch, EventTimewaitExit)
	noEvent(t, cch2, "client channel left")
	noEvent(t, sch2, "server channel left")
}

// TestMigrateIDErrors: a nil or closed channel, a synchronous ID, a
// destroyed one and a Dial connection's ID cannot be migrated.
func TestMigrateIDErrors(t *testing.T) {
	h := newHosts(t, loop.Faults{})
	ch := NewEventChannel()
	id, _ := h.a.CreateID(ch, PortSpaceTCP, nil)
	if err := id.MigrateID(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("MigrateID(nil): %v, want ErrInvalid", err)
	}
	closed := NewEventChannel()
	closed.Close()
	if err := id.MigrateID(closed); !errors.Is(err, ErrClosed) {
		t.Errorf("MigrateID(closed channel): %v, want ErrClosed", err)
	}
	if err := id.MigrateID(ch); err != nil {
		t.Errorf("MigrateID to its own channel: %v", err)
	}
	id.Destroy()
	if err := id.MigrateID(NewEventChannel()); !errors.Is(err, ErrClosed) {
		t.Errorf("MigrateID of a destroyed ID: %v, want ErrClosed", err)
	}
	syncID, _ := h.a.CreateID(nil, PortSpaceTCP, nil)
	defer syncID.Destroy()
	if err := syncID.MigrateID(NewEventChannel()); !errors.Is(err, ErrState) {
		t.Errorf("MigrateID of a synchronous ID: %v, want ErrState", err)
	}
	ctx := ctxT(t)
	l, err := Listen(ctx, netip.AddrPortFrom(ipB, 7480), &ConnOptions{CM: h.b})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Dial(ctx, netip.AddrPortFrom(ipB, 7480), &ConnOptions{CM: h.a})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.ID.MigrateID(NewEventChannel()); !errors.Is(err, ErrState) {
		t.Errorf("MigrateID of a Dial connection's ID: %v, want ErrState", err)
	}
}

// TestMigrateIDWhileRequestsArrive moves a listener back and forth between
// two channels while connection requests arrive: every request shows up
// exactly once, on one channel or the other.
func TestMigrateIDWhileRequestsArrive(t *testing.T) {
	const n = 16
	h := newHosts(t, loop.Faults{})
	ctx := ctxT(t)
	chs := [2]*EventChannel{NewEventChannel(), NewEventChannel()}
	lid, _ := h.b.CreateID(chs[0], PortSpaceTCP, nil)
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(ipB, 20004)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(n); err != nil {
		t.Fatal(err)
	}
	cch := NewEventChannel()
	var cids []*ID
	for range n {
		cid, _ := h.a.CreateID(cch, PortSpaceTCP, nil)
		t.Cleanup(func() { cid.Destroy() })
		if err := cid.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(ipB, 20004)); err != nil {
			t.Fatal(err)
		}
		cids = append(cids, cid)
	}
	for range n {
		want(t, cch, EventAddrResolved)
	}
	for _, cid := range cids {
		cid.ResolveRoute(ctx)
		want(t, cch, EventRouteResolved)
	}
	done := make(chan struct{})
	migrated := make(chan int, 1)
	go func() {
		k := 0
		defer func() { migrated <- k }()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := lid.MigrateID(chs[(i+1)%2]); err != nil {
				t.Errorf("migration %d: %v", i, err)
				return
			}
			k++
			time.Sleep(50 * time.Microsecond)
		}
	}()
	stop := sync.OnceValue(func() int { close(done); return <-migrated })
	defer stop()
	// Connect (REQs without QPs) while the listener moves.
	for _, cid := range cids {
		if err := cid.Connect(ctx, &ConnParam{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[*ID]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		for _, ch := range chs {
			c, cancel := context.WithTimeout(ctx, time.Millisecond)
			ev, err := ch.Get(c)
			cancel()
			if err != nil {
				continue
			}
			if ev.Type != EventConnectRequest || seen[ev.ID] {
				t.Fatalf("%v for %p (seen before: %v)", ev.Type, ev.ID, seen[ev.ID])
			}
			seen[ev.ID] = true
			t.Cleanup(func() { ev.ID.Destroy() })
		}
	}
	k := stop()
	if len(seen) != n {
		t.Fatalf("%d connection requests seen, want %d (listener migrated %d times)", len(seen), n, k)
	}
	for _, ch := range chs {
		noEvent(t, ch, "after all requests")
	}
	t.Logf("%d requests while the listener migrated %d times", n, k)
}
