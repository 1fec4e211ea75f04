// Multicast on a UD ID: rdma_join_multicast and rdma_leave_multicast for
// RoCE (InfiniBand ports join through the SA: ibmcast.go), where there is
// no subnet administrator to ask: the join is local,
// as Linux's rdma_cm does it for RoCE (cma_iboe_join_multicast). The group
// address maps to its multicast GID, the ID's QP (if it has one) is
// attached to it, as librdmacm does on the join event, and the device joins
// the IP group on its interface (IGMP or MLD) with the attachment.

package rdmacm

import (
	"context"
	"errors"
	"net/netip"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// McastHopLimit is the hop limit of the address handle a multicast join
// reports: IPv6's default, which Linux's rdma_cm gives RoCEv2 groups.
const McastHopLimit = 64

// McastGID returns the multicast GID of an IP multicast address, as
// rdma_cm maps it for RoCEv2: an IPv4 group as the IPv4-mapped address
// ::ffff:a.b.c.d, an IPv6 group as itself.
func McastGID(group netip.Addr) wire.GID { return wire.GIDFromAddr(group.Unmap()) }

// JoinMulticast joins the multicast group addr (rdma_join_multicast) on a
// UDP port space ID whose address is resolved (ResolveAddr, usually to addr
// itself) or bound to a device's address. The ID's QP, if it has one, is
// attached to the group's GID. EventMulticastJoin follows, with the address
// handle attributes to send to the group (UD.AH), QP number 0xFFFFFF and
// the Q_Key RDMA_UDP_QKEY (UD.QKey), and mctx as Event.McastContext; on a
// synchronous ID JoinMulticast waits for it and returns its error.
//
// IPv6 groups are joined too, where Linux's rdma_cm refuses them on RoCEv2
// (EOPNOTSUPP): a Linux peer cannot be a member of one.
//
// On an InfiniBand port the join is the SA's: an MCMemberRecord Set for
// the group's MGID (IBMcastGID) from the ID's port GID with the Q_Key
// RDMA_UDP_QKEY, creating the group if it does not exist; the QP is
// attached to the MGID and the MLID the SA gives, and the event's address
// handle is the MLID with the group's SL and a GRH to the MGID, with the
// group's Q_Key. The SA's silence or refusal is EventMulticastError with
// Event.Err wrapping cm.ErrNoSA or cm.ErrMcastRefused.
//
// The error wraps ErrInvalid if the ID is not of the UDP port space, addr
// is not a multicast address of the ID's family, or the group is joined
// already, and ErrState if the ID has no device yet. A failure to attach
// the QP is reported as EventMulticastError with its status.
func (id *ID) JoinMulticast(ctx context.Context, addr netip.Addr, mctx any) error {
	if e := id.ibDevice(); e != nil {
		return id.joinIB(ctx, e, addr, mctx) // ibmcast.go
	}
	ev, err := id.join(addr, mctx)
	if err != nil {
		return err
	}
	id.post(ev)
	if !id.sync {
		return nil
	}
	_, err = id.waitFor(ctx, EventMulticastJoin)
	return err
}

func (id *ID) join(addr netip.Addr, mctx any) (*Event, error) {
	g := addr.Unmap()
	id.mu.Lock()
	defer id.mu.Unlock()
	switch {
	case id.ps != PortSpaceUDP:
		return nil, errf(ErrInvalid, "multicast needs a UDP port space ID, not %v", id.ps)
	case !g.IsValid() || !g.IsMulticast():
		return nil, errf(ErrInvalid, "%v is not a multicast address", addr)
	case id.state == idDestroyed:
		return nil, errf(ErrClosed, "ID")
	case id.dev == nil || (id.state != idAddrResolved && id.state != idIdle):
		return nil, errf(ErrState, "multicast join needs an ID with a resolved or bound address")
	case id.src.Addr().IsValid() && id.src.Addr().Is4() != g.Is4():
		return nil, errf(ErrInvalid, "group %v and the ID's address %v differ in IP version", g, id.src.Addr())
	case hasKey(id.mcast, g):
		return nil, errf(ErrInvalid, "group %v already joined", g)
	}
	gid := McastGID(g)
	ev := &Event{Type: EventMulticastJoin, Multicast: g, McastContext: mctx}
	attached := false
	if id.qp != nil {
		if err := id.qp.AttachMcast(gid, 0); err != nil {
			ev.Type, ev.Status = EventMulticastError, StatusInvalid
			switch {
			case errors.Is(err, verbs.ErrNotSupported):
				ev.Status = StatusNotSupported
			case errors.Is(err, verbs.ErrLimit):
				ev.Status = StatusNoMemory
			}
			id.s.log.Debug("rdmacm: multicast join failed", "group", g, "err", err)
			return ev, nil
		}
		attached = true
	}
	if id.mcast == nil {
		id.mcast = make(map[netip.Addr]bool)
	}
	id.mcast[g] = attached
	ev.UD = UDParam{
		AH:    verbs.AHAttr{DGID: gid, SGIDIndex: id.sgid, HopLimit: McastHopLimit, PortNum: 1},
		QPNum: wire.QPMulticast, QKey: mad.RDMAUDPQKey,
	}
	return ev, nil
}

func hasKey(m map[netip.Addr]bool, k netip.Addr) bool {
	_, ok := m[k]
	return ok
}

// LeaveMulticast leaves a group JoinMulticast joined
// (rdma_leave_multicast): the ID's QP is detached from it; on an
// InfiniBand port the SA Delete follows (waited for, a few seconds at
// most, its failure returned). Destroy leaves the SA's groups too. The error wraps
// ErrInvalid if the ID has not joined addr.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	g := addr.Unmap()
	if ok, err := id.leaveIB(g); ok {
		return err
	}
	id.mu.Lock()
	attached, ok := id.mcast[g]
	delete(id.mcast, g)
	qp := id.qp
	id.mu.Unlock()
	if !ok {
		return errf(ErrInvalid, "group %v not joined", addr)
	}
	if attached && qp != nil {
		return qp.DetachMcast(McastGID(g), 0)
	}
	return nil
}
