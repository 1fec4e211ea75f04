// Multicast on an InfiniBand port, as Linux's rdma_cm does it there
// (cma_join_ib_multicast): the group address maps to an MGID, the port
// joins it with an SA MCMemberRecord Set (which creates the group if it
// does not exist: the SA chooses its MLID, and its MTU, rate and SL from
// the port), the ID's QP is attached to the MGID and MLID, and the join
// event carries the address handle to send to the group: the MLID, the
// group's SL, a GRH to the MGID, and the group's Q_Key. Leaving (or
// destroying the ID) sends the SA Delete.

package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// ibGroup is a group an ID joined on an InfiniBand port.
type ibGroup struct {
	e    *devEntry
	mgid wire.GID
	port wire.GID // our port GID, the member
	qp   *verbs.QP
	mlid uint16
}

// ibMembers counts the IDs of a device that joined each group through the
// SA: the port is one member however many IDs joined (as the Linux SA
// client's multicast module shares a port's membership), so the SA
// Delete goes with the last of them.
type ibMembers struct {
	mu   sync.Mutex
	refs map[wire.GID]int
}

// add counts one more ID in group mgid.
func (m *ibMembers) add(mgid wire.GID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs == nil {
		m.refs = make(map[wire.GID]int)
	}
	m.refs[mgid]++
}

// drop counts one ID out of group mgid and reports whether it was the
// last.
func (m *ibMembers) drop(mgid wire.GID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs[mgid]--; m.refs[mgid] > 0 {
		return false
	}
	delete(m.refs, mgid)
	return true
}

// ibLeaveTimeout bounds the SA Delete a leave (or Destroy) sends.
const ibLeaveTimeout = 2 * time.Second

// IBMcastGID returns the MGID rdma_cm joins on an InfiniBand port for the
// multicast address group in partition pkey, as Linux's rdma_cm maps
// addresses of the UDP port space (the IPoIB mapping with the rdma_cm
// signature, link-local scope): an IPv4 group a.b.c.d is
// ff12:4001:PKEY::a.b.c.d; an IPv6 group keeps its last ten bytes behind
// ff12:6001:PKEY; an IPv6 address that is already an SA-assigned MGID
// (ff1x:a01b::/32) is used as it is.
func IBMcastGID(group netip.Addr, pkey uint16) wire.GID {
	g := group.Unmap()
	a := g.As16()
	if g.Is6() && a[0] == 0xff && a[1]&0xf0 == 0x10 && a[2] == 0xa0 && a[3] == 0x1b {
		return wire.GID(a)
	}
	var m wire.GID
	m[0], m[1], m[3], m[4], m[5] = 0xff, 0x12, 0x01, byte(pkey>>8), byte(pkey)
	if g.Is4() {
		m[2] = 0x40
		copy(m[12:], a[12:])
		return m
	}
	m[2] = 0x60
	copy(m[6:], a[6:])
	return m
}

// ibDevice returns the ID's device if it is on an InfiniBand port.
func (id *ID) ibDevice() *devEntry {
	id.mu.Lock()
	e := id.dev
	id.mu.Unlock()
	if e != nil && e.isIB() {
		return e
	}
	return nil
}

// joinIB is JoinMulticast on an InfiniBand port: the checks, then the SA
// join (on a goroutine for an asynchronous ID).
func (id *ID) joinIB(ctx context.Context, e *devEntry, addr netip.Addr, mctx any) error {
	g := addr.Unmap()
	id.mu.Lock()
	switch {
	case id.ps != PortSpaceUDP:
		id.mu.Unlock()
		return errf(ErrInvalid, "multicast needs a UDP port space ID, not %v", id.ps)
	case !g.IsValid() || !g.IsMulticast():
		id.mu.Unlock()
		return errf(ErrInvalid, "%v is not a multicast address", addr)
	case id.state == idDestroyed:
		id.mu.Unlock()
		return errf(ErrClosed, "ID")
	case id.state != idAddrResolved && id.state != idIdle:
		id.mu.Unlock()
		return errf(ErrState, "multicast join needs an ID with a resolved or bound address")
	case hasKey(id.mcast, g):
		id.mu.Unlock()
		return errf(ErrInvalid, "group %v already joined", g)
	}
	if id.mcast == nil {
		id.mcast = make(map[netip.Addr]bool)
	}
	id.mcast[g] = false // taken while the SA answers
	sgid, qp := id.sgid, id.qp
	id.mu.Unlock()
	if !id.sync {
		go func() { id.post(id.saJoin(ctx, e, sgid, qp, g, mctx)) }()
		return nil
	}
	id.post(id.saJoin(ctx, e, sgid, qp, g, mctx))
	_, err := id.waitFor(ctx, EventMulticastJoin)
	return err
}

// saJoin joins group g through the SA and attaches qp (if not nil); it
// returns the event to post.
func (id *ID) saJoin(ctx context.Context, e *devEntry, sgid int, qp *verbs.QP, g netip.Addr, mctx any) *Event {
	fail := func(st int, err error) *Event {
		id.mu.Lock()
		delete(id.mcast, g)
		id.mu.Unlock()
		id.s.log.Debug("rdmacm: multicast join failed", "group", g, "err", err)
		return &Event{Type: EventMulticastError, Status: st, Multicast: g, McastContext: mctx, Err: err}
	}
	gids := e.dev.GIDs()
	if sgid < 0 || sgid >= len(gids) {
		return fail(StatusInvalid, errf(ErrInvalid, "source GID index %d", sgid))
	}
	mgid := IBMcastGID(g, uint16(wire.DefaultPKey))
	q := mad.MCMemberRecord{MGID: mad.GID(mgid), PortGID: mad.GID(gids[sgid]), QKey: mad.RDMAUDPQKey,
		JoinState: mad.JoinFullMember}
	rec, err := e.mgr.JoinMulticast(ctx, q, mad.MCMemberRecCompMGID|mad.MCMemberRecCompPortGID|
		mad.MCMemberRecCompQKey|mad.MCMemberRecCompJoinState)
	switch {
	case errors.Is(err, cm.ErrMcastRefused):
		return fail(StatusInvalid, err)
	case err != nil:
		return fail(StatusHostUnreach, err)
	}
	grp := &ibGroup{e: e, mgid: wire.GID(rec.MGID), port: gids[sgid], mlid: rec.MLID}
	e.mc.add(grp.mgid)
	if qp != nil {
		if err := qp.AttachMcast(grp.mgid, rec.MLID); err != nil {
			grp.leave()
			st := StatusInvalid
			if errors.Is(err, verbs.ErrLimit) {
				st = StatusNoMemory
			}
			return fail(st, err)
		}
		grp.qp = qp
	}
	id.mu.Lock()
	if id.state == idDestroyed || !hasKey(id.mcast, g) {
		id.mu.Unlock()
		grp.detach()
		grp.leave()
		return &Event{Type: EventMulticastError, Status: StatusInvalid, Multicast: g, McastContext: mctx}
	}
	id.mcast[g] = grp.qp != nil
	if id.ibMcast == nil {
		id.ibMcast = make(map[netip.Addr]*ibGroup)
	}
	id.ibMcast[g] = grp
	id.mu.Unlock()
	return &Event{Type: EventMulticastJoin, Multicast: g, McastContext: mctx, UD: UDParam{
		AH: verbs.AHAttr{DLID: rec.MLID, SL: rec.SL, IsGlobal: true, DGID: grp.mgid, SGIDIndex: sgid,
			FlowLabel: rec.FlowLabel, HopLimit: rec.HopLimit, TrafficClass: rec.TClass, StaticRate: rec.Rate, PortNum: 1},
		QPNum: wire.QPMulticast, QKey: wire.QKey(rec.QKey),
	}}
}

// detach detaches the group's QP, if one was attached.
func (grp *ibGroup) detach() error {
	if grp.qp == nil {
		return nil
	}
	return grp.qp.DetachMcast(grp.mgid, grp.mlid)
}

// leave counts the ID out of the group and, if it was the port's last in
// it, sends the SA Delete of the port's full membership.
func (grp *ibGroup) leave() error {
	if !grp.e.mc.drop(grp.mgid) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ibLeaveTimeout)
	defer cancel()
	return grp.e.mgr.LeaveMulticast(ctx, mad.MCMemberRecord{MGID: mad.GID(grp.mgid), PortGID: mad.GID(grp.port),
		JoinState: mad.JoinFullMember}, mad.MCMemberRecCompMGID|mad.MCMemberRecCompPortGID|mad.MCMemberRecCompJoinState)
}

// leaveIB is LeaveMulticast for a group joined on an InfiniBand port: the
// QP detached, then the SA Delete (waited for, at most ibLeaveTimeout).
// ok is false if g is not such a group.
func (id *ID) leaveIB(g netip.Addr) (ok bool, err error) {
	id.mu.Lock()
	grp := id.ibMcast[g]
	if grp != nil {
		delete(id.ibMcast, g)
		delete(id.mcast, g)
	}
	id.mu.Unlock()
	if grp == nil {
		return false, nil
	}
	return true, errors.Join(grp.detach(), grp.leave())
}

// leaveIBAll leaves every group the ID joined on an InfiniBand port (its
// Destroy).
func (id *ID) leaveIBAll() {
	id.mu.Lock()
	groups := id.ibMcast
	id.ibMcast = nil
	id.mu.Unlock()
	for _, grp := range groups {
		grp.leave()
	}
}
