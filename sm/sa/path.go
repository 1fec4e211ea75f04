// PathRecords: the route between two ports found by walking the switches'
// forwarding tables in the snapshot, and its properties (the smallest MTU
// and rate along it, a P_Key both ends hold, reversibility), filtered and
// shaped by the query's components and selectors (IBTA volume 1 section
// 15.2.5.16).

package sa

import (
	"errors"
	"fmt"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// ErrNoRoute means the snapshot's forwarding tables do not lead from a
// port to a LID.
var ErrNoRoute = errors.New("sa: no route")

// Path is the route from a port to a LID through a Subnet.
type Path struct {
	// Hops is the number of links the route crosses (0 from a port to
	// itself).
	Hops int
	// Out lists the port each link is left by, the source port first.
	Out []*sm.Port
	// Dest is the port dlid addresses.
	Dest *sm.Port
	// MTU (mad.MTU*) and Rate (mad.Rate*) are the smallest along the
	// route: the neighbor MTU and the active width and speed of each link.
	MTU, Rate uint8
}

// maxHops bounds a walk: a directed route has at most 63 hops, and a loop
// in the forwarding tables must not hang the SA.
const maxHops = 64

// Route follows the forwarding tables of s from src to the port dlid
// addresses. It fails (wrapping ErrNoRoute) where a table has no entry for
// dlid, a link is down or the walk loops.
func Route(s *sm.Subnet, src *sm.Port, dlid uint16) (Path, error) {
	dst := s.PortByLID(dlid)
	if dst == nil {
		return Path{}, fmt.Errorf("%w: no port has LID %d", ErrNoRoute, dlid)
	}
	p := Path{Dest: dst, MTU: portMTU(src), Rate: portRate(src)}
	if src == dst {
		return p, nil
	}
	out := src // the port the next link is left by
	if src.Node.Switch != nil {
		var err error
		if out, err = lftOut(src.Node, dlid); err != nil {
			return Path{}, err
		}
	}
	for p.Hops < maxHops {
		if out.Remote == nil {
			return Path{}, fmt.Errorf("%w: to LID %d: %s port %d has no link", ErrNoRoute, dlid, out.Node.Desc, out.Num)
		}
		p.Out = append(p.Out, out)
		p.Hops++
		p.MTU = min(p.MTU, linkMTU(out, out.Remote))
		if r := linkRate(out, out.Remote); r != 0 && (p.Rate == 0 || mad.RateMbps(r) < mad.RateMbps(p.Rate)) {
			p.Rate = r
		}
		in := out.Remote
		if in == dst {
			return p, nil
		}
		n := in.Node
		if n.Switch == nil {
			return Path{}, fmt.Errorf("%w: to LID %d: reached %s, not a switch", ErrNoRoute, dlid, n.Desc)
		}
		if len(n.Ports) > 0 && n.Ports[0] == dst {
			return p, nil
		}
		var err error
		if out, err = lftOut(n, dlid); err != nil {
			return Path{}, err
		}
	}
	return Path{}, fmt.Errorf("%w: to LID %d: more than %d hops", ErrNoRoute, dlid, maxHops)
}

// lftOut returns the port switch n forwards dlid by.
func lftOut(n *sm.Node, dlid uint16) (*sm.Port, error) {
	if int(dlid) >= len(n.LFT) {
		return nil, fmt.Errorf("%w: %s has no LFT entry for LID %d", ErrNoRoute, n.Desc, dlid)
	}
	o := int(n.LFT[dlid])
	if o == 0 || o >= len(n.Ports) || n.Ports[o] == nil {
		return nil, fmt.Errorf("%w: %s forwards LID %d to port %d", ErrNoRoute, n.Desc, dlid, o)
	}
	return n.Ports[o], nil
}

func portMTU(p *sm.Port) uint8 {
	if p.Info.NeighborMTU != 0 {
		return p.Info.NeighborMTU
	}
	if p.Info.MTUCap != 0 {
		return p.Info.MTUCap
	}
	return mad.MTU256
}

func linkMTU(a, b *sm.Port) uint8 { return min(portMTU(a), portMTU(b)) }

func portRate(p *sm.Port) uint8 {
	return mad.LinkRate(p.Info.LinkWidthActive, p.Info.LinkSpeedActive, p.Info.LinkSpeedExtActive)
}

func linkRate(a, b *sm.Port) uint8 {
	ra, rb := portRate(a), portRate(b)
	switch {
	case ra == 0:
		return rb
	case rb == 0 || mad.RateMbps(ra) <= mad.RateMbps(rb):
		return ra
	}
	return rb
}

// commonPKey chooses the P_Key of a path between a and b: want if asked
// (both must hold it, not both as limited members), else the default
// partition's if both are in it, else the first both share. Ports with no
// P_Key table in the snapshot are taken to hold the default full key.
func commonPKey(a, b *sm.Port, want uint16, asked bool) (uint16, bool) {
	keys := func(p *sm.Port) []uint16 {
		if len(p.PKeys) == 0 {
			return []uint16{0xffff}
		}
		return p.PKeys
	}
	find := func(ks []uint16, k uint16) (full, ok bool) {
		for _, x := range ks {
			if x&0x7fff == k&0x7fff && x&0x7fff != 0 {
				if x&0x8000 != 0 {
					return true, true
				}
				ok = true
			}
		}
		return false, ok
	}
	try := func(k uint16) (uint16, bool) {
		fa, oka := find(keys(a), k)
		fb, okb := find(keys(b), k)
		if !oka || !okb || !fa && !fb {
			return 0, false
		}
		return k&0x7fff | 0x8000, true
	}
	if asked {
		return try(want)
	}
	if k, ok := try(0xffff); ok {
		return k, true
	}
	for _, k := range keys(a) {
		if k, ok := try(k); ok {
			return k, true
		}
	}
	return 0, false
}

// selectValue applies a query's selector to a path's value: the value to
// put in the answer, or false if the path cannot satisfy it. lower reports
// whether a value below the path's can be used instead (MTU can).
func selectValue(sel, want, have uint8, less func(a, b uint8) bool, lower bool) (uint8, bool) {
	switch sel {
	case mad.SelectGreater:
		return have, less(want, have)
	case mad.SelectLess:
		if less(have, want) {
			return have, true
		}
		if lower && want > 1 {
			return want - 1, true
		}
		return 0, false
	case mad.SelectExactly:
		if want == have || lower && want != 0 && less(want, have) {
			return want, true
		}
		return 0, false
	}
	return have, true // SelectBest
}

func mtuLess(a, b uint8) bool  { return a < b }
func rateLess(a, b uint8) bool { return mad.RateMbps(a) < mad.RateMbps(b) }

// pathRecords answers a PathRecord query.
func (s *Server) pathRecords(r *request) answer {
	q, _ := mad.ParsePathRecord(r.data)
	sub, m := r.subnet, r.mask
	end := func(gidBit, lidBit uint64, gid mad.GID, lid uint16) ([]*sm.Port, []uint16, uint16) {
		switch {
		case m&gidBit != 0:
			if gid.Prefix() != sub.Prefix {
				return nil, nil, mad.SAStatusReqInvalidGID
			}
			p := sub.PortByGUID(gid.GUID())
			if p == nil {
				return nil, nil, mad.SAStatusReqInvalidGID
			}
			if m&lidBit != 0 {
				if sub.PortByLID(lid) != p {
					return nil, nil, mad.StatusOK // no path has both
				}
				return []*sm.Port{p}, []uint16{lid}, mad.StatusOK
			}
			return []*sm.Port{p}, nil, mad.StatusOK
		case m&lidBit != 0:
			if p := sub.PortByLID(lid); p != nil {
				return []*sm.Port{p}, []uint16{lid}, mad.StatusOK
			}
			return nil, nil, mad.StatusOK
		}
		return nil, nil, mad.StatusOK
	}
	srcs, slids, st := end(mad.PathRecCompSGID, mad.PathRecCompSLID, q.SGID, q.SLID)
	if st != mad.StatusOK {
		return fail(st)
	}
	if m&(mad.PathRecCompSGID|mad.PathRecCompSLID) == 0 {
		// No source: the requester's port (IBTA C15-0.1.x).
		if p := sub.PortByLID(r.d.SLID); p != nil {
			srcs = []*sm.Port{p}
		}
	}
	dsts, dlids, st := end(mad.PathRecCompDGID, mad.PathRecCompDLID, q.DGID, q.DLID)
	if st != mad.StatusOK {
		return fail(st)
	}
	if m&(mad.PathRecCompDGID|mad.PathRecCompDLID) == 0 {
		for _, p := range endPorts(sub) {
			if p.LID() != 0 {
				dsts = append(dsts, p)
			}
		}
	}
	if m&mad.PathRecCompRawTraffic != 0 && q.RawTraffic {
		return fail(mad.SAStatusReqInvalid) // raw packets have no path record
	}
	limit := 0 // paths per port pair; 0: all
	if m&mad.PathRecCompNumbPath != 0 && q.NumbPath != 0 {
		limit = int(q.NumbPath)
	}
	a := answer{size: mad.PathRecordSize}
	for _, sp := range srcs {
		for _, dp := range dsts {
			n := 0
			for _, pair := range lidPairs(sp, dp, slids, dlids) {
				if limit != 0 && n >= limit {
					break
				}
				rec, ok := s.pathRecord(sub, q, m, sp, dp, pair[0], pair[1])
				if !ok {
					continue
				}
				b := make([]byte, mad.PathRecordSize)
				rec.Encode(b)
				a.records = append(a.records, b)
				n++
			}
		}
	}
	if r.method == mad.MethodGet && len(a.records) > 1 {
		a.records = a.records[:1] // a Get takes the first path
	}
	return a
}

// lidPairs lists the (SLID, DLID) pairs of two ports, the pairs with
// equal LMC offsets first, restricted to the LIDs the query gave.
func lidPairs(sp, dp *sm.Port, slids, dlids []uint16) [][2]uint16 {
	lids := func(p *sm.Port, given []uint16) []uint16 {
		if given != nil {
			return given
		}
		var ls []uint16
		for i := range uint16(1) << p.Info.LMC {
			ls = append(ls, p.LID()+i)
		}
		return ls
	}
	ss, ds := lids(sp, slids), lids(dp, dlids)
	var first, rest [][2]uint16
	for i, s := range ss {
		for j, d := range ds {
			if i == j {
				first = append(first, [2]uint16{s, d})
			} else {
				rest = append(rest, [2]uint16{s, d})
			}
		}
	}
	return append(first, rest...)
}

// pathRecord builds the record of one LID pair, or false if there is no
// path or it does not meet the query.
func (s *Server) pathRecord(sub *sm.Subnet, q mad.PathRecord, m uint64, sp, dp *sm.Port, slid, dlid uint16) (mad.PathRecord, bool) {
	if slid == 0 || dlid == 0 {
		return mad.PathRecord{}, false
	}
	fwd, err := Route(sub, sp, dlid)
	if err != nil {
		return mad.PathRecord{}, false
	}
	_, rerr := Route(sub, dp, slid)
	rec := mad.PathRecord{
		DGID: mad.MakeGID(sub.Prefix, dp.GUID), SGID: mad.MakeGID(sub.Prefix, sp.GUID),
		DLID: dlid, SLID: slid, Reversible: rerr == nil,
		MTUSelector: mad.SelectExactly, MTU: fwd.MTU, RateSelector: mad.SelectExactly, Rate: fwd.Rate,
		LifeSelector: mad.SelectExactly, PacketLifeTime: s.cfg.PacketLifeTime,
	}
	if m&mad.PathRecCompReversible != 0 && q.Reversible && !rec.Reversible {
		return rec, false
	}
	pk, ok := commonPKey(sp, dp, q.PKey, m&mad.PathRecCompPKey != 0)
	if !ok {
		return rec, false
	}
	rec.PKey = pk
	if m&mad.PathRecCompSL != 0 {
		rec.SL = q.SL
	}
	if s.cfg.QoSPolicy != nil {
		sl, ok := s.cfg.QoSPolicy.SL(policy.PathQoS{ServiceID: q.ServiceID, HasServiceID: m&mad.PathRecCompServiceID == mad.PathRecCompServiceID,
			QoSClass: q.QoSClass, HasQoSClass: m&mad.PathRecCompQoSClass != 0, PKey: pk, Source: sp.GUID, Dest: dp.GUID})
		if ok {
			if m&mad.PathRecCompSL != 0 && q.SL != sl {
				return rec, false // the policy gives this path another SL
			}
			rec.SL = sl
		}
	}
	if m&mad.PathRecCompServiceID == mad.PathRecCompServiceID {
		rec.ServiceID = q.ServiceID
	}
	if m&mad.PathRecCompTClass != 0 {
		rec.TClass = q.TClass
	}
	if m&mad.PathRecCompFlowLabel != 0 {
		rec.FlowLabel = q.FlowLabel
	}
	if m&mad.PathRecCompHopLimit != 0 {
		rec.HopLimit = q.HopLimit
	}
	if m&mad.PathRecCompQoSClass != 0 {
		rec.QoSClass = q.QoSClass
	}
	sel := func(selBit uint64, qsel uint8) uint8 {
		if m&selBit != 0 {
			return qsel
		}
		return mad.SelectExactly
	}
	if m&mad.PathRecCompMTU != 0 {
		if rec.MTU, ok = selectValue(sel(mad.PathRecCompMTUSelector, q.MTUSelector), q.MTU, fwd.MTU, mtuLess, true); !ok {
			return rec, false
		}
	}
	if m&mad.PathRecCompRate != 0 {
		if rec.Rate, ok = selectValue(sel(mad.PathRecCompRateSelector, q.RateSelector), q.Rate, fwd.Rate, rateLess, false); !ok {
			return rec, false
		}
	}
	if m&mad.PathRecCompPacketLifeTime != 0 {
		lt, ok := selectValue(sel(mad.PathRecCompLifeSelector, q.LifeSelector), q.PacketLifeTime, s.cfg.PacketLifeTime, mtuLess, false)
		if !ok || lt != s.cfg.PacketLifeTime {
			return rec, false
		}
	}
	return rec, true
}
