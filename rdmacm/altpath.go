// The alternate path of a connection, for automatic path migration.

package rdmacm

import (
	"net/netip"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// SetAltPath gives the connection the ID initiates an alternate path, from
// local address src (one of the device's GIDs) to the peer's address dst,
// as librdmacm does with a second path record (rdma_set_option
// RDMA_OPTION_IB_PATH with two paths). The REQ carries it; both sides'
// QPs load it on their way to RTS (AttrAltPath, with the ACK timeout of the
// primary path) in path migration state REARM, and arm once each has heard
// the other (verbs: "Path migration"). A QP whose primary path then fails
// migrates to the alternate one and raises verbs.EventPathMig. Set it after
// ResolveRoute and before Connect; the passive side needs nothing: it takes
// the path from the REQ.
func (id *ID) SetAltPath(src, dst netip.Addr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	switch id.state {
	case idDestroyed:
		return errf(ErrClosed, "ID destroyed")
	case idAddrResolved, idRouteResolved:
	default:
		return errf(ErrState, "alternate path set outside address or route resolved")
	}
	if id.dev == nil {
		return errf(ErrState, "ID has no device: resolve an address first")
	}
	if !dst.IsValid() || dst.IsUnspecified() {
		return errf(ErrInvalid, "alternate destination %v", dst)
	}
	idx := id.dev.dev.GIDIndex(wire.GIDFromAddr(src))
	if idx < 0 {
		return errf(ErrInvalid, "alternate source %v is not an address of %s", src, id.dev.dev.Name())
	}
	id.alt = &cm.Path{SGIDIndex: idx, DGID: wire.GIDFromAddr(dst), HopLimit: 64, TrafficClass: id.tos}
	return nil
}

// withAltLocked adds the connection's alternate path, if it has one, to the
// attributes that move its QP from RTR to RTS: the alternate address vector
// with the primary path's ACK timeout, and REARM.
func (id *ID) withAltLocked(a *verbs.QPAttr, mask verbs.AttrMask) verbs.AttrMask {
	if id.conn == nil {
		return mask
	}
	p, ok := id.conn.AltPath()
	if !ok {
		return mask
	}
	a.AltAH = verbs.AHAttr{DGID: p.DGID, SGIDIndex: p.SGIDIndex, FlowLabel: p.FlowLabel, HopLimit: p.HopLimit,
		TrafficClass: p.TrafficClass, PortNum: 1}
	if a.AltAH.HopLimit == 0 {
		a.AltAH.HopLimit = 64
	}
	a.AltPortNum, a.AltTimeout, a.PathMigState = 1, a.Timeout, verbs.MigRearm
	return mask | verbs.AttrAltPath | verbs.AttrPathMigState
}
