// UD multicast: attaching queue pairs to multicast GIDs, the device's group
// table, and the delivery of a packet sent to a group (destination QP
// 0xFFFFFF) to every queue pair attached to it.

package verbs

import (
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// Multicast limits, as Linux rxe advertises them (rxe_param.h): groups per
// device, queue pairs per group, and attachments in all.
const (
	MaxMcastGrp           = 8192
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = 0x70000
)

// mcastTable is a device's multicast groups. Attach and Detach change it
// under the write lock; the receive path reads it under the read lock. A
// group's slice is replaced, never changed in place, so a reader may use it
// after unlocking.
type mcastTable struct {
	mu     sync.RWMutex
	groups map[netip.Addr][]*QP // key: the group's IP address, unmapped
	total  int
	// limits: the constants, or lower ones a test sets (0: the constant)
	maxGrp, maxQPAttach, maxTotal int
}

// limits returns the table's limits.
func (t *mcastTable) limits() (grp, qpAttach, total int) {
	grp, qpAttach, total = MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAttach
	if t.maxGrp > 0 {
		grp = t.maxGrp
	}
	if t.maxQPAttach > 0 {
		qpAttach = t.maxQPAttach
	}
	if t.maxTotal > 0 {
		total = t.maxTotal
	}
	return grp, qpAttach, total
}

// members returns the QPs attached to group (unmapped), or nil.
func (t *mcastTable) members(group netip.Addr) []*QP {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.groups[group]
}

// mcastAddr returns the IP address a multicast GID stands for: an
// IPv4-mapped GID's IPv4 address (::ffff:224.0.0.0/100) or the GID as an
// IPv6 address (ff00::/8), as RoCEv2 maps them.
func mcastAddr(gid wire.GID) (netip.Addr, bool) {
	a := gid.Addr().Unmap()
	return a, a.IsValid() && a.IsMulticast()
}

// IsMulticastGID reports whether gid is a RoCEv2 multicast GID: an
// IPv4-mapped IPv4 multicast address or an IPv6 multicast address.
func IsMulticastGID(gid wire.GID) bool {
	_, ok := mcastAddr(gid)
	return ok
}

// AttachMcast attaches the QP to the multicast group gid, as
// ibv_attach_mcast: packets sent to the group reach the QP, which needs a
// Q_Key matching theirs and a posted receive for each. The device joins the
// group's IP address on its link (IGMP or MLD on link/udp) when its first
// QP attaches. lid is ignored (RoCE has no LIDs). Attaching a QP already
// attached to gid does nothing, as in rxe.
//
// The error wraps ErrInvalid if the QP is not UD or gid is not a multicast
// GID of the family of one of the device's GIDs, ErrLimit past
// MaxMcastGrp groups, MaxMcastQPAttach QPs in a group or
// MaxTotalMcastQPAttach attachments, ErrNotSupported if the device's link
// cannot join groups (link.Multicaster), and ErrClosed if the QP is
// destroyed.
func (qp *QP) AttachMcast(gid wire.GID, lid uint16) error {
	_ = lid
	if qp.typ != UD {
		return errf(ErrInvalid, "attach to multicast: %v QP (only UD QPs can be attached)", qp.typ)
	}
	g, ok := mcastAddr(gid)
	if !ok {
		return errf(ErrInvalid, "attach to multicast: %v is not a multicast GID", gid)
	}
	d := qp.dev
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	qp.mu.Lock()
	dead := qp.dead
	qp.mu.Unlock()
	if dead {
		return errf(ErrClosed, "attach to multicast: QP destroyed")
	}
	qps := t.groups[g]
	for _, m := range qps {
		if m == qp {
			return nil
		}
	}
	maxGrp, maxQPs, maxTotal := t.limits()
	switch {
	case len(qps) == 0 && len(t.groups) >= maxGrp:
		return errf(ErrLimit, "attach to multicast: %d groups", maxGrp)
	case len(qps) >= maxQPs:
		return errf(ErrLimit, "attach to multicast: %d QPs attached to %v", maxQPs, gid)
	case t.total >= maxTotal:
		return errf(ErrLimit, "attach to multicast: %d attachments", maxTotal)
	}
	if len(qps) == 0 {
		m, ok := d.link.(link.Multicaster)
		if !ok {
			return errf(ErrNotSupported, "attach to multicast: link %T cannot join groups", d.link)
		}
		if err := m.JoinGroup(g); err != nil {
			return errf(ErrInvalid, "attach to multicast %v: %v", gid, err)
		}
		d.log.Debug("joined multicast group", "group", g)
	}
	if t.groups == nil {
		t.groups = make(map[netip.Addr][]*QP)
	}
	t.groups[g] = append(append([]*QP(nil), qps...), qp)
	t.total++
	return nil
}

// DetachMcast detaches the QP from the multicast group gid, as
// ibv_detach_mcast; the device leaves the group's IP address when its last
// QP detaches. lid is ignored. The error wraps ErrInvalid if gid is not a
// multicast GID or the QP is not attached to it.
func (qp *QP) DetachMcast(gid wire.GID, lid uint16) error {
	_ = lid
	g, ok := mcastAddr(gid)
	if !ok {
		return errf(ErrInvalid, "detach from multicast: %v is not a multicast GID", gid)
	}
	t := &qp.dev.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.detachLocked(qp, g) {
		return errf(ErrInvalid, "detach from multicast: QP %#x is not attached to %v", uint32(qp.qpn), gid)
	}
	return nil
}

// detachLocked removes qp from group g, leaving the group on the link if it
// was the last; it reports whether qp was attached. The caller holds t.mu.
func (t *mcastTable) detachLocked(qp *QP, g netip.Addr) bool {
	qps := t.groups[g]
	for i, m := range qps {
		if m != qp {
			continue
		}
		rest := make([]*QP, 0, len(qps)-1)
		rest = append(append(rest, qps[:i]...), qps[i+1:]...)
		t.total--
		if len(rest) > 0 {
			t.groups[g] = rest
			return true
		}
		delete(t.groups, g)
		d := qp.dev
		if m, ok := d.link.(link.Multicaster); ok {
			if err := m.LeaveGroup(g); err != nil {
				d.log.Warn("leaving multicast group", "group", g, "err", err)
			} else {
				d.log.Debug("left multicast group", "group", g)
			}
		}
		return true
	}
	return false
}

// detachAll detaches qp from every group (Destroy, as uverbs does).
func (t *mcastTable) detachAll(qp *QP) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for g := range t.groups {
		t.detachLocked(qp, g)
	}
}

// receiveMcast delivers a packet sent to a multicast group (destination QP
// 0xFFFFFF) to every QP attached to the group its destination address
// names, each under its own lock and with its own receive WR; the Q_Key,
// P_Key, state and transport checks are each QP's, as for unicast (a
// mismatch is dropped and counted). A packet for a group with no QP
// attached is dropped and counted in DeviceStats.RxMcastNoGroup.
func (d *Device) receiveMcast(g *txGather, pkt wire.Packet, p *link.Packet) {
	qps := d.mcast.members(p.Dst.Addr().Unmap().WithZone(""))
	if len(qps) == 0 {
		d.stats.RxMcastNoGroup.Add(1)
		return
	}
	for _, qp := range qps {
		g.lock(qp)
		qp.handleLocked(pkt, p, &g.clk)
		qp.sendPendingAckLocked()
		g.unlock(qp)
	}
}
