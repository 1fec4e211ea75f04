// The alternate path of a connection, for automatic path migration.

package rdmacm

import (
	"context"
	"net/netip"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
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
//
// On an InfiniBand port the alternate path is a second PathRecord from the
// SA (ibaltpath.go): between the same GIDs, by LIDs other than the
// resolved route's at both ends (the ports need an LMC above 0, and the SM
// routes their LIDs over different links where the fabric has them). The
// REQ's alternate path fields carry its LIDs and SL.
func (id *ID) SetAltPath(src, dst netip.Addr) error {
	check := func() error {
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
		return nil
	}
	id.mu.Lock()
	err := check()
	id.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ibAltTimeout)
	defer cancel()
	ibp, isIB, err := id.ibAltPath(ctx, src, dst)
	if err != nil {
		return err
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if err := check(); err != nil {
		return err
	}
	p := ibp
	if !isIB {
		if p, err = id.altPathFor(src, dst); err != nil {
			return err
		}
	}
	id.alt = &p
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
	if ah, ok := id.ibAH(p); ok { // by LID on an InfiniBand port
		a.AltAH = ah
	}
	a.AltPortNum, a.AltTimeout, a.PathMigState = 1, a.Timeout, verbs.MigRearm
	return mask | verbs.AttrAltPath | verbs.AttrPathMigState
}

// altPathFor resolves the local address src and the peer's address dst of
// the ID's device into an alternate path.
func (id *ID) altPathFor(src, dst netip.Addr) (cm.Path, error) {
	if !dst.IsValid() || dst.IsUnspecified() {
		return cm.Path{}, errf(ErrInvalid, "alternate destination %v", dst)
	}
	idx := id.dev.dev.GIDIndex(wire.GIDFromAddr(src))
	if idx < 0 {
		return cm.Path{}, errf(ErrInvalid, "alternate source %v is not an address of %s", src, id.dev.dev.Name())
	}
	return cm.Path{SGIDIndex: idx, DGID: wire.GIDFromAddr(dst), HopLimit: 64, TrafficClass: id.tos}, nil
}

// LoadAltPath gives an established connection a new alternate path, from
// local address src to the peer's address dst, through the CM's LAP and
// APR (IBTA 12.8.2): the peer's rdmacm loads the path into its QP and
// answers; this side then loads it into its own (both in REARM, or with the
// state unchanged on a QP still ARMED), and the QPs arm with their next
// exchange. It is how an application re-arms after a migration (its old
// primary path back, once the fabric is repaired) without reconnecting.
// It returns when the peer answered: nil, an error wrapping ErrRejected
// (the peer refused, or the QP did not take the path), or ErrUnreachable
// (no answer after the CM's retries). The ID must be established, with its
// QP created by CreateQP on either side (a peer without one refuses).
func (id *ID) LoadAltPath(ctx context.Context, src, dst netip.Addr) error {
	ibp, isIB, err := id.ibAltPath(ctx, src, dst) // ibaltpath.go
	if err != nil {
		return err
	}
	id.mu.Lock()
	if id.state != idEstablished || id.conn == nil || id.ps != PortSpaceTCP {
		id.mu.Unlock()
		return errf(ErrState, "loading an alternate path needs an established RC connection")
	}
	if id.lapDone != nil {
		id.mu.Unlock()
		return errf(ErrState, "an alternate path is being loaded")
	}
	p := ibp
	if !isIB {
		if p, err = id.altPathFor(src, dst); err != nil {
			id.mu.Unlock()
			return err
		}
	}
	timeout := id.ackTimeoutLocked(ackTimeout)
	if id.qp != nil {
		a, _ := id.qp.Query()
		timeout = a.Timeout
	}
	done := make(chan error, 1)
	id.lapDone, id.lapPath, id.lapTimeout = done, p, timeout
	conn := id.conn
	id.mu.Unlock()
	if err := conn.SendLAP(&cm.LAPParams{AltPath: p, LocalACKTimeout: timeout}); err != nil {
		id.mu.Lock()
		id.lapDone = nil
		id.mu.Unlock()
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		id.mu.Lock()
		if id.lapDone == done {
			id.lapDone = nil
		}
		id.mu.Unlock()
		return ctx.Err()
	}
}

// loadAltLocked loads alternate path p with ACK timeout timeout into the
// ID's QP: in REARM, or without touching the migration state of a QP that
// is still ARMED (which REARM may not be set on).
func (id *ID) loadAltLocked(p cm.Path, timeout uint8) error {
	if id.qp == nil {
		return errf(ErrState, "ID has no QP")
	}
	a := verbs.QPAttr{AltAH: verbs.AHAttr{DGID: p.DGID, SGIDIndex: p.SGIDIndex, FlowLabel: p.FlowLabel,
		HopLimit: max(p.HopLimit, 1), TrafficClass: p.TrafficClass, PortNum: 1},
		AltPortNum: 1, AltTimeout: timeout, PathMigState: verbs.MigRearm}
	if ah, ok := id.ibAH(p); ok { // by LID on an InfiniBand port
		a.AltAH = ah
	}
	mask := verbs.AttrAltPath | verbs.AttrPathMigState
	if cur, _ := id.qp.Query(); cur.PathMigState == verbs.MigArmed {
		mask = verbs.AttrAltPath
	}
	return id.qp.Modify(&a, mask)
}

// onLAPLocked answers the peer's LAP: the path goes into the ID's QP, and
// the APR says whether it did.
func (id *ID) onLAPLocked(c *cm.Conn, ev *cm.Event) {
	st := mad.APLoaded
	if id.state != idEstablished {
		st = mad.APRejected
	} else if err := id.loadAltLocked(*ev.AltPath, ev.LAP.AlternatePath.LocalACKTimeout); err != nil {
		st = mad.APRejected
	}
	c.SendAPR(&cm.APRParams{Status: st})
}

// onAPRLocked finishes LoadAltPath with the peer's answer.
func (id *ID) onAPRLocked(ev *cm.Event) {
	done := id.lapDone
	if done == nil {
		return
	}
	id.lapDone = nil
	var err error
	switch {
	case ev.Type == cm.EventTimeout:
		err = errf(ErrUnreachable, "no answer to the LAP: %v", ev.Err)
	case ev.APStatus != mad.APLoaded:
		err = errf(ErrRejected, "the peer did not load the alternate path: %v", ev.APStatus)
	default:
		if e := id.loadAltLocked(id.lapPath, id.lapTimeout); e != nil {
			err = errf(ErrRejected, "loading the alternate path: %v", e)
		}
	}
	done <- err
}
