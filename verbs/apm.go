// Automatic path migration (IBTA 17.2.8): a connected QP's alternate path
// (AttrAltPath), its path migration state (AttrPathMigState: MIGRATED,
// REARM, ARMED), the MigReq bit its packets carry, and the migration
// itself: the requester moves to the alternate path when the retries of
// the primary one run out, the responder when a packet asking for it
// arrives by the alternate path. The engine is the same on RoCE (another
// source GID and destination) and InfiniBand (another DLID, SL, path bits).

package verbs

import (
	"fmt"
	"net/netip"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// MigState is a connected QP's path migration state (ibv_mig_state).
type MigState uint8

// Path migration states, with ibv_mig_state's values. The zero value is
// MigMigrated: a QP without an alternate path.
const (
	// MigMigrated: the QP uses its primary path and has no armed
	// alternate (it never had one, or has migrated to it). Its packets
	// carry MigReq 1.
	MigMigrated MigState = 0
	// MigRearm: an alternate path is loaded and the QP waits for its peer
	// to have one too: the first packet from the peer with MigReq 0 arms
	// it. Its packets carry MigReq 0.
	MigRearm MigState = 1
	// MigArmed: the alternate path may be migrated to. Its packets carry
	// MigReq 0.
	MigArmed MigState = 2
)

// String returns the state's name as rdma-core's man pages write it.
func (m MigState) String() string {
	switch m {
	case MigMigrated:
		return "MIGRATED"
	case MigRearm:
		return "REARM"
	case MigArmed:
		return "ARMED"
	}
	return fmt.Sprintf("MigState(%d)", uint8(m))
}

// altPath is the resolved addressing of a QP's alternate path; its
// attributes are in QPAttr (AltAH, AltPKeyIndex, AltPortNum, AltTimeout).
type altPath struct {
	loaded bool
	src    netip.Addr
	dst    netip.AddrPort
	ib     link.IBAddr
}

// pathMigChange is what a Modify does to the alternate path and the
// migration state, checked before anything changes.
type pathMigChange struct {
	alt     altPath
	state   MigState
	migrate bool // ARMED -> MIGRATED by the caller: move to the alternate now
}

// checkPathMigLocked validates the alternate path and path migration state
// a Modify sets, the alternate like the primary (attributes out of range
// wrap ErrInvalid), and the state's transitions: REARM needs an alternate
// path and a QP not ARMED; MIGRATED is refused from REARM, and from ARMED
// migrates; ARMED is reached only by the peer's packets, never set.
func (qp *QP) checkPathMigLocked(attr *QPAttr, mask AttrMask, next QPState) (pathMigChange, error) {
	c := pathMigChange{alt: qp.alt, state: qp.mig}
	if mask&AttrAltPath != 0 {
		if attr.AltPortNum != 1 {
			return c, errf(ErrInvalid, "alternate port %d", attr.AltPortNum)
		}
		if attr.AltPKeyIndex < 0 || attr.AltPKeyIndex >= qp.dev.pkeyTableLen() {
			return c, errf(ErrInvalid, "alternate P_Key index %d", attr.AltPKeyIndex)
		}
		if attr.AltTimeout > 31 {
			return c, errf(ErrInvalid, "alternate timeout %d", attr.AltTimeout)
		}
		if attr.AltAH.PortNum != 0 && attr.AltAH.PortNum != attr.AltPortNum {
			return c, errf(ErrInvalid, "alternate address vector on port %d, alternate port %d",
				attr.AltAH.PortNum, attr.AltPortNum)
		}
		src, dst, ib, err := qp.dev.resolve(&attr.AltAH)
		if err != nil {
			return c, fmt.Errorf("alternate path: %w", err)
		}
		c.alt = altPath{loaded: true, src: src, dst: dst, ib: ib}
	}
	if mask&AttrPathMigState == 0 {
		return c, nil
	}
	switch attr.PathMigState {
	case MigRearm:
		if qp.mig == MigArmed {
			return c, errf(ErrInvalid, "path migration state REARM on an ARMED QP")
		}
		if !c.alt.loaded {
			return c, errf(ErrInvalid, "path migration state REARM without an alternate path")
		}
		c.state = MigRearm
	case MigMigrated:
		switch qp.mig {
		case MigRearm:
			return c, errf(ErrInvalid, "path migration state MIGRATED on a QP in REARM")
		case MigArmed:
			if next != StateRTS && next != StateSQD {
				return c, errf(ErrInvalid, "migrating in state %v", next)
			}
			c.migrate = true
		}
		c.state = MigMigrated
	default:
		return c, errf(ErrInvalid, "path migration state %v", attr.PathMigState)
	}
	return c, nil
}

// applyPathMigLocked carries out a checked change on a, the attributes
// being set. A migration the caller asked for raises no event here (the
// caller knows); the peer raises EventPathMig when it follows.
func (qp *QP) applyPathMigLocked(attr *QPAttr, mask AttrMask, a *QPAttr, c *pathMigChange) {
	if mask&AttrAltPath != 0 {
		a.AltAH, a.AltPKeyIndex, a.AltPortNum, a.AltTimeout = attr.AltAH, attr.AltPKeyIndex, attr.AltPortNum, attr.AltTimeout
		qp.alt = c.alt
	}
	if c.migrate {
		qp.swapToAltLocked(a)
	}
	qp.setMigLocked(c.state)
}

// setMigLocked sets the path migration state and the MigReq bit the QP's
// packets carry with it: 1 when MIGRATED, 0 when ARMED or in REARM (IBTA
// 9.2.2). UD QPs have no path migration and send 0, as Linux rxe does.
func (qp *QP) setMigLocked(m MigState) {
	qp.mig = m
	qp.attr.PathMigState = m
	qp.migReq = m == MigMigrated && (qp.typ == RC || qp.typ == UC)
}

// swapToAltLocked makes the alternate path the primary one in a: address
// vector, port, P_Key index, timeout and the addressing resolved from
// them. The alternate stays loaded as it was, as in Linux's software
// drivers; the application loads a new one to arm again.
func (qp *QP) swapToAltLocked(a *QPAttr) {
	a.AH, a.PortNum, a.PKeyIndex, a.Timeout = a.AltAH, a.AltPortNum, a.AltPKeyIndex, a.AltTimeout
	qp.src, qp.dst, qp.ib = qp.alt.src, qp.alt.dst, qp.alt.ib
	qp.sport = wire.ConnectedSourcePort(a.AH.FlowLabel, qp.qpn, a.DestQPN)
}

// migrateLocked moves an ARMED QP to its alternate path (MIGRATED), for the
// requester whose retries ran out or the responder that saw the peer
// migrate, and raises EventPathMig.
func (qp *QP) migrateLocked() {
	a := qp.attr
	qp.swapToAltLocked(&a)
	qp.attr = a
	qp.setMigLocked(MigMigrated)
	qp.pkey = qp.dev.pkeyAt(a.PKeyIndex)
	qp.req.Configure(qp.reqConfig())
	qp.dev.stats.PathMigrations.Add(1)
	qp.dev.log.Info("path migrated", "qpn", qp.qpn, "dlid", a.AH.DLID, "dgid", a.AH.DGID)
	qp.dev.postEvent(AsyncEvent{Type: EventPathMig, QP: qp})
}

// altUsableLocked reports why the armed alternate path cannot be used now,
// or nil: its P_Key index must still be in the port's table.
func (qp *QP) altUsableLocked() error {
	if qp.attr.AltPKeyIndex >= qp.dev.pkeyTableLen() {
		return errf(ErrInvalid, "alternate P_Key index %d, table has %d", qp.attr.AltPKeyIndex, qp.dev.pkeyTableLen())
	}
	return nil
}

// Migrate moves an ARMED QP to its alternate path when the requester's
// retries on the primary one ran out (requester.Sink). A QP not ARMED, or
// whose alternate path is no longer usable (EventPathMigErr), fails as
// without one.
func (s *reqSink) Migrate() bool {
	qp := (*QP)(s)
	if qp.mig != MigArmed {
		return false
	}
	if err := qp.altUsableLocked(); err != nil {
		qp.dev.log.Warn("path migration failed", "qpn", qp.qpn, "err", err)
		qp.dev.postEvent(AsyncEvent{Type: EventPathMigErr, QP: qp})
		return false
	}
	qp.migrateLocked()
	return true
}

// pathMigRxLocked follows the peer's migration state from a packet's
// MigReq bit, for a connected QP with an alternate path: in REARM a packet
// with MigReq 0 (the peer has an alternate path too) arms the QP; ARMED, a
// packet with MigReq 1 arriving by the alternate path says the peer has
// migrated, and the QP migrates too (IBTA 17.2.8).
func (qp *QP) pathMigRxLocked(migReq bool, p *link.Packet) {
	switch {
	case qp.mig == MigRearm && !migReq:
		qp.setMigLocked(MigArmed)
		qp.dev.log.Debug("path migration armed", "qpn", qp.qpn)
	case qp.mig == MigArmed && migReq && qp.fromAltLocked(p):
		qp.migrateLocked()
	}
}

// fromAltLocked reports whether p came by the alternate path: on
// InfiniBand from the alternate DLID (the peer's alternate path's source
// LID), on RoCE from the alternate destination GID's address.
func (qp *QP) fromAltLocked(p *link.Packet) bool {
	if qp.dev.ib != nil {
		return p.IB.SLID == qp.alt.ib.DLID
	}
	return p.Src.Addr() == qp.alt.dst.Addr()
}

// altSourceLocked returns the source address and UDP source port the QP's
// packets will leave from once it migrates (for the link to prepare).
func (qp *QP) altSourceLocked() (netip.Addr, uint16) {
	return qp.alt.src, wire.ConnectedSourcePort(qp.attr.AltAH.FlowLabel, qp.qpn, qp.attr.DestQPN)
}
