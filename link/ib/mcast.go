package ib

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/link"
)

// mcastGroups is the set of multicast groups (MGIDs) a link joined.
type mcastGroups struct {
	mu     sync.Mutex
	groups map[netip.Addr]bool
}

// JoinGroup records that the port is a member of multicast group g, an
// MGID given as an IPv6 multicast address (what verbs' AttachMcast passes
// for the group's GID). On InfiniBand nothing goes on the wire: the SA
// join (MCMemberRecord) is the application's, and the switches' multicast
// forwarding tables, which the SM programs from the SA's groups, decide
// which ports a group's packets reach. The port takes every packet for a
// multicast LID (with a GRH, IBTA 8.4.1); the device hands it to each QP
// attached to the group its GRH's DGID names. The error wraps
// link.ErrAddress if g is not a multicast address or is joined already,
// ErrClosed if the link is closed.
func (l *Link) JoinGroup(g netip.Addr) error {
	if l.closed.Load() {
		return ErrClosed
	}
	g, err := link.CheckGroup(g, l.Addrs())
	if err != nil {
		return err
	}
	l.mcast.mu.Lock()
	defer l.mcast.mu.Unlock()
	if l.mcast.groups[g] {
		return fmt.Errorf("%w: group %s joined already", link.ErrAddress, g)
	}
	if l.mcast.groups == nil {
		l.mcast.groups = map[netip.Addr]bool{}
	}
	l.mcast.groups[g] = true
	return nil
}

// LeaveGroup forgets membership of group g. The error wraps
// link.ErrAddress if g is not joined.
func (l *Link) LeaveGroup(g netip.Addr) error {
	l.mcast.mu.Lock()
	defer l.mcast.mu.Unlock()
	g = g.Unmap().WithZone("")
	if !l.mcast.groups[g] {
		return fmt.Errorf("%w: group %s not joined", link.ErrAddress, g)
	}
	delete(l.mcast.groups, g)
	return nil
}

var _ link.Multicaster = (*Link)(nil)
