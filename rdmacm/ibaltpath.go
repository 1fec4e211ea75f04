// Alternate paths on InfiniBand: a second PathRecord from the SA, between
// the same GIDs but by other LIDs at both ends (the ports' LMC gives them
// several, and the SM routes a port's LIDs over different links where it
// can), as an application using librdmacm on IB asks the SA for two paths
// and hands both to rdma_set_option(RDMA_OPTION_IB_PATH).

package rdmacm

import (
	"context"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// ibAltTimeout bounds SetAltPath's SA query (it takes no context).
const ibAltTimeout = 5 * time.Second

// ibAltPaths is how many PathRecords the alternate path is chosen from.
const ibAltPaths = 16

// ibAltPath resolves the alternate path from src to dst on an InfiniBand
// port: the first PathRecord the SA gives (GetTable by the two GIDs) whose
// source and destination LIDs both differ from the connection's primary
// path (the route ResolveRoute found, or the path an established
// connection's QP uses now). ok is false on RoCE (altPathFor's case). The error wraps
// ErrInvalid if src is not the device's or no such record exists (ports
// with LMC 0 have one LID each), or is the SA client's (cm.ErrNoSA, ...).
func (id *ID) ibAltPath(ctx context.Context, src, dst netip.Addr) (p cm.Path, ok bool, err error) {
	id.mu.Lock()
	e, route, conn, qp := id.dev, id.route, id.conn, id.qp
	id.mu.Unlock()
	if e == nil || !e.isIB() {
		return cm.Path{}, false, nil
	}
	var primary cm.Path
	switch {
	case conn != nil:
		primary = conn.Path()
		if qp != nil {
			// After a migration the QP's path is what was the
			// alternate: the new one must avoid that.
			if a, _ := qp.Query(); a.State >= verbs.StateRTR && a.AH.DLID != 0 {
				if pa, err := e.dev.QueryPort(1); err == nil {
					primary.SLID, primary.DLID = pa.LID|uint16(a.AH.SrcPathBits), a.AH.DLID
				}
			}
		}
	case route != nil:
		primary = *route
	default:
		return cm.Path{}, true, errf(ErrState, "an alternate path on InfiniBand needs the route resolved first")
	}
	if !dst.IsValid() || dst.IsUnspecified() {
		return cm.Path{}, true, errf(ErrInvalid, "alternate destination %v", dst)
	}
	sgid := e.dev.GIDIndex(wire.GIDFromAddr(src))
	if sgid < 0 {
		return cm.Path{}, true, errf(ErrInvalid, "alternate source %v is not an address of %s", src, e.dev.Name())
	}
	recs, err := e.mgr.PathRecords(ctx, &cm.PathQuery{SGID: wire.GIDFromAddr(src), DGID: wire.GIDFromAddr(dst), NumbPath: ibAltPaths})
	if err != nil {
		return cm.Path{}, true, err
	}
	for i := range recs {
		if r := &recs[i]; r.SLID != primary.SLID && r.DLID != primary.DLID {
			return pathFromRecord(r, sgid), true, nil
		}
	}
	return cm.Path{}, true, errf(ErrInvalid, "no path from %v to %v by LIDs other than %d -> %d among the SA's %d (an LMC of 0 gives a port one LID)",
		src, dst, primary.SLID, primary.DLID, len(recs))
}
