// rdma_cm on InfiniBand ports: addresses are GIDs (IPoIB does not exist
// here), and the route is the SA's PathRecord between the two GIDs, as
// librdmacm's rdma_resolve_route gets it on InfiniBand.

package rdmacm

import (
	"context"
	"net/netip"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// isIB reports whether e's port is an InfiniBand port.
func (e *devEntry) isIB() bool {
	pa, err := e.dev.QueryPort(1)
	return err == nil && pa.LinkLayer == verbs.LinkLayerInfiniBand
}

// selectIB picks the source for a destination GID dst: the first
// InfiniBand device whose port's GID has dst's subnet prefix, and that GID.
func (s *CM) selectIB(dst netip.Addr) (*devEntry, int, netip.Addr) {
	if !dst.Is6() || dst.Is4In6() {
		return nil, -1, netip.Addr{}
	}
	d := dst.As16()
	for _, e := range s.devs {
		if !e.isIB() {
			continue
		}
		for i, g := range e.dev.GIDs() {
			if [8]byte(g[:8]) == [8]byte(d[:8]) {
				return e, i, netip.AddrFrom16(g)
			}
		}
	}
	return nil, -1, netip.Addr{}
}

// GIDAddr returns the address rdma_cm uses for an InfiniBand port's GID:
// the GID as an IPv6 address (as AF_IB and the GID of a RoCE port are).
// ResolveAddr, Dial and Listen take it for a peer on the fabric.
func GIDAddr(g wire.GID) netip.Addr { return netip.AddrFrom16(g) }

// resolveIBRoute asks the SA of the ID's InfiniBand port for the path to
// the destination GID and keeps it as the route of the connection the ID
// initiates. It posts EventRouteResolved or EventRouteError (with Err
// wrapping cm.ErrNoSA or cm.ErrNoPath).
func (id *ID) resolveIBRoute(ctx context.Context, e *devEntry, sgid int, dst netip.Addr) *Event {
	gids := e.dev.GIDs()
	if sgid < 0 || sgid >= len(gids) {
		return &Event{Type: EventRouteError, Status: StatusInvalid}
	}
	rec, err := e.mgr.PathRecord(ctx, &cm.PathQuery{SGID: gids[sgid], DGID: wire.GIDFromAddr(dst), NumbPath: 1})
	if err != nil {
		return &Event{Type: EventRouteError, Status: StatusHostUnreach, Err: err}
	}
	p := pathFromRecord(&rec, sgid)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != idAddrResolved {
		return &Event{Type: EventRouteError, Status: StatusInvalid}
	}
	id.route = &p
	id.state = idRouteResolved
	return &Event{Type: EventRouteResolved}
}

// pathFromRecord is the CM path of a PathRecord from our GID at sgid.
func pathFromRecord(r *mad.PathRecord, sgid int) cm.Path {
	return cm.Path{SGIDIndex: sgid, DGID: wire.GID(r.DGID), FlowLabel: r.FlowLabel, HopLimit: r.HopLimit,
		TrafficClass: r.TClass, SLID: r.SLID, DLID: r.DLID, SL: r.SL, Rate: r.Rate,
		PacketLifeTime: r.PacketLifeTime, Global: r.HopLimit > 1, MTU: verbs.MTU(r.MTU)}
}

// Route returns the path ResolveRoute found on an InfiniBand port (the
// SA's PathRecord), and false on RoCE or before the route is resolved.
func (id *ID) Route() (cm.Path, bool) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.route == nil {
		return cm.Path{}, false
	}
	return *id.route, true
}

// ibAH is the address vector of path p on an InfiniBand port, or false if
// p is a RoCE path.
func (id *ID) ibAH(p cm.Path) (verbs.AHAttr, bool) {
	if !p.IsIB() {
		return verbs.AHAttr{}, false
	}
	var lmc uint8
	if pa, err := id.dev.dev.QueryPort(1); err == nil {
		lmc = pa.LMC
	}
	return p.AHAttr(lmc), true
}
