// Multicast groups: MCMemberRecord Set joins a port to a group, creating
// it (and choosing its MLID) when the first full member joins; Delete
// takes join states away and the group goes with its last member;
// Get and GetTable list each member's record.

package sa

import (
	"slices"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// Multicast LIDs the SA hands out.
const (
	MLIDFirst = 0xC000
	MLIDLast  = 0xFFFE
)

// group is one multicast group.
type group struct {
	rec     mad.MCMemberRecord // the group's parameters; PortGID and JoinState zero
	members map[mad.GID]uint8  // port GID -> join state
	order   []mad.GID          // members in the order they joined
}

// mcastChange is a group's membership after a change, for Config.Multicast.
type mcastChange struct {
	mlid    uint16
	members []*sm.Port
}

// change gives the group's members in snapshot sub (the one the request
// was answered from), for Config.Multicast.
func (g *group) change(sub *sm.Subnet) mcastChange {
	c := mcastChange{mlid: g.rec.MLID}
	for _, gid := range g.order {
		if p := sub.PortByGUID(gid.GUID()); p != nil {
			c.members = append(c.members, p)
		}
	}
	return c
}

// Group is a multicast group as the SA keeps it.
type Group struct {
	// Record holds the group's parameters (MGID, MLID, Q_Key, P_Key, MTU,
	// rate, SL, ...); its PortGID and JoinState are zero.
	Record mad.MCMemberRecord
	// Members are the member ports in the order they joined, found by
	// their port GUIDs in the Source's current snapshot (a member whose
	// port is not in it is left out), and their join states.
	Members    []*sm.Port
	JoinStates []uint8
}

// Groups returns the multicast groups ordered by MLID, with their members
// in the current snapshot: what the SM programs the switches' multicast
// forwarding tables from after a sweep.
func (s *Server) Groups() []Group {
	sub := s.src.Subnet()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Group
	for _, g := range s.groups {
		x := Group{Record: g.rec}
		for _, gid := range g.order {
			var p *sm.Port
			if sub != nil {
				p = sub.PortByGUID(gid.GUID())
			}
			if p != nil {
				x.Members, x.JoinStates = append(x.Members, p), append(x.JoinStates, g.members[gid])
			}
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b Group) int { return int(a.Record.MLID) - int(b.Record.MLID) })
	return out
}

func (s *Server) mcMemberRecord(r *request) answer {
	q, _ := mad.ParseMCMemberRecord(r.data)
	switch r.method {
	case mad.MethodSet:
		return s.join(r, q)
	case mad.MethodDelete:
		return s.leave(r, q)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := answer{size: mad.MCMemberRecordSize}
	mlids := make([]*group, 0, len(s.groups))
	for _, g := range s.groups {
		mlids = append(mlids, g)
	}
	slices.SortFunc(mlids, func(a, b *group) int { return int(a.rec.MLID) - int(b.rec.MLID) })
	qb := r.data[:mad.MCMemberRecordSize]
	for _, g := range mlids {
		for _, gid := range g.order {
			rec := g.rec
			rec.PortGID, rec.JoinState = gid, g.members[gid]
			b := make([]byte, mad.MCMemberRecordSize)
			rec.Encode(b)
			if mad.MatchComponents(mad.MCMemberRecordComponents, r.mask, qb, b) {
				a.records = append(a.records, b)
			}
		}
	}
	return a
}

// join handles a Set: the port joins the group, which is created if it
// does not exist.
func (s *Server) join(r *request, q mad.MCMemberRecord) answer {
	m := r.mask
	if m&mad.MCMemberRecCompPortGID == 0 || m&mad.MCMemberRecCompJoinState == 0 || q.JoinState == 0 {
		return fail(mad.SAStatusReqInsufficientComps)
	}
	if q.PortGID.Prefix() != r.subnet.Prefix {
		return fail(mad.SAStatusReqInvalidGID)
	}
	port := r.subnet.PortByGUID(q.PortGID.GUID())
	if port == nil {
		return fail(mad.SAStatusReqInvalidGID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var g *group
	if m&mad.MCMemberRecCompMGID != 0 && q.MGID != (mad.GID{}) {
		if q.MGID[0] != 0xff {
			return fail(mad.SAStatusReqInvalid) // not a multicast GID
		}
		g = s.groups[q.MGID]
	}
	if g == nil {
		if q.JoinState&mad.JoinFullMember == 0 {
			return fail(mad.SAStatusReqInvalid) // only a full member creates a group
		}
		var st uint16
		if g, st = s.createGroup(r, q, port); st != mad.StatusOK {
			return fail(st)
		}
	} else if !compatible(g.rec, q, m) {
		return fail(mad.SAStatusReqInvalid)
	}
	old := g.members[q.PortGID]
	if _, ok := g.members[q.PortGID]; !ok {
		g.order = append(g.order, q.PortGID)
	}
	g.members[q.PortGID] = old | q.JoinState
	rec := g.rec
	rec.PortGID, rec.JoinState = q.PortGID, g.members[q.PortGID]
	b := make([]byte, mad.MCMemberRecordSize)
	rec.Encode(b)
	a := answer{records: [][]byte{b}, size: mad.MCMemberRecordSize}
	if old == 0 {
		a.notify = []mcastChange{g.change(r.subnet)}
		s.log.Debug("multicast join", "mlid", g.rec.MLID, "port", port.GUID)
	}
	return a
}

// createGroup makes a group for q with the first free MLID.
func (s *Server) createGroup(r *request, q mad.MCMemberRecord, port *sm.Port) (*group, uint16) {
	m := r.mask
	used := map[uint16]bool{}
	for _, g := range s.groups {
		used[g.rec.MLID] = true
	}
	mlid := uint16(0)
	for l := MLIDFirst; l <= MLIDLast; l++ {
		if !used[uint16(l)] {
			mlid = uint16(l)
			break
		}
	}
	if mlid == 0 {
		return nil, mad.SAStatusNoResources
	}
	rec := mad.MCMemberRecord{MGID: q.MGID, MLID: mlid, PKey: 0xffff, MTUSelector: mad.SelectExactly,
		MTU: portMTU(port), RateSelector: mad.SelectExactly, Rate: portRate(port),
		LifeSelector: mad.SelectExactly, PacketLifeTime: s.cfg.PacketLifeTime}
	if m&mad.MCMemberRecCompMGID == 0 || q.MGID == (mad.GID{}) {
		// The SA names the group: ff12:a01b:<P_Key>::<sequence>.
		s.mgidSeq++
		rec.MGID = mad.GID{0xff, 0x12, 0xa0, 0x1b}
		be16(rec.MGID[4:], q.PKey|0x8000)
		for i := range 8 {
			rec.MGID[8+i] = byte(s.mgidSeq >> (56 - 8*i))
		}
	}
	rec.Scope = rec.MGID[1] & 0xf
	if m&mad.MCMemberRecCompQKey != 0 {
		rec.QKey = q.QKey
	}
	if m&mad.MCMemberRecCompPKey != 0 {
		pk, ok := commonPKey(port, port, q.PKey, true)
		if !ok {
			return nil, mad.SAStatusReqInvalid
		}
		rec.PKey = pk
	}
	if m&mad.MCMemberRecCompTClass != 0 {
		rec.TClass = q.TClass
	}
	if m&mad.MCMemberRecCompSL != 0 {
		rec.SL = q.SL
	}
	if m&mad.MCMemberRecCompFlowLabel != 0 {
		rec.FlowLabel = q.FlowLabel
	}
	if m&mad.MCMemberRecCompHopLimit != 0 {
		rec.HopLimit = q.HopLimit
	}
	sel := func(bit uint64, qsel uint8) uint8 {
		if m&bit != 0 {
			return qsel
		}
		return mad.SelectExactly
	}
	var ok bool
	if m&mad.MCMemberRecCompMTU != 0 {
		if rec.MTU, ok = selectValue(sel(mad.MCMemberRecCompMTUSelector, q.MTUSelector), q.MTU, rec.MTU, mtuLess, true); !ok {
			return nil, mad.SAStatusReqInvalid
		}
	}
	if m&mad.MCMemberRecCompRate != 0 {
		if rec.Rate, ok = selectValue(sel(mad.MCMemberRecCompRateSelector, q.RateSelector), q.Rate, rec.Rate, rateLess, true); !ok {
			return nil, mad.SAStatusReqInvalid
		}
	}
	if _, dup := s.groups[rec.MGID]; dup {
		return nil, mad.SAStatusReqInvalid
	}
	g := &group{rec: rec, members: map[mad.GID]uint8{}}
	s.groups[rec.MGID] = g
	s.log.Debug("multicast group created", "mlid", mlid)
	return g, mad.StatusOK
}

func be16(b []byte, v uint16) { b[0], b[1] = byte(v>>8), byte(v) }

// compatible reports whether a join's masked parameters fit the group.
func compatible(g, q mad.MCMemberRecord, m uint64) bool {
	if m&mad.MCMemberRecCompQKey != 0 && q.QKey != g.QKey ||
		m&mad.MCMemberRecCompPKey != 0 && q.PKey&0x7fff != g.PKey&0x7fff ||
		m&mad.MCMemberRecCompMLID != 0 && q.MLID != 0 && q.MLID != g.MLID ||
		m&mad.MCMemberRecCompSL != 0 && q.SL != g.SL ||
		m&mad.MCMemberRecCompTClass != 0 && q.TClass != g.TClass ||
		m&mad.MCMemberRecCompFlowLabel != 0 && q.FlowLabel != g.FlowLabel {
		return false
	}
	sel := func(bit uint64, qsel uint8) uint8 {
		if m&bit != 0 {
			return qsel
		}
		return mad.SelectExactly
	}
	if m&mad.MCMemberRecCompMTU != 0 {
		if v, ok := selectValue(sel(mad.MCMemberRecCompMTUSelector, q.MTUSelector), q.MTU, g.MTU, mtuLess, false); !ok || v != g.MTU {
			return false
		}
	}
	if m&mad.MCMemberRecCompRate != 0 {
		if v, ok := selectValue(sel(mad.MCMemberRecCompRateSelector, q.RateSelector), q.Rate, g.Rate, rateLess, false); !ok || v != g.Rate {
			return false
		}
	}
	return true
}

// leave handles a Delete: the port gives up the join states asked (all if
// JoinState is not in the mask); the group goes with its last member.
func (s *Server) leave(r *request, q mad.MCMemberRecord) answer {
	m := r.mask
	if m&mad.MCMemberRecCompMGID == 0 || m&mad.MCMemberRecCompPortGID == 0 {
		return fail(mad.SAStatusReqInsufficientComps)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[q.MGID]
	if g == nil {
		return fail(mad.SAStatusReqInvalid)
	}
	state, ok := g.members[q.PortGID]
	if !ok {
		return fail(mad.SAStatusReqInvalid)
	}
	drop := uint8(0xf)
	if m&mad.MCMemberRecCompJoinState != 0 {
		drop = q.JoinState
	}
	if state&drop == 0 {
		return fail(mad.SAStatusReqInvalid)
	}
	rec := g.rec
	rec.PortGID, rec.JoinState = q.PortGID, state&drop
	b := make([]byte, mad.MCMemberRecordSize)
	rec.Encode(b)
	a := answer{records: [][]byte{b}, size: mad.MCMemberRecordSize}
	if state &^= drop; state != 0 {
		g.members[q.PortGID] = state
		return a
	}
	delete(g.members, q.PortGID)
	g.order = slices.DeleteFunc(g.order, func(x mad.GID) bool { return x == q.PortGID })
	if len(g.members) == 0 {
		delete(s.groups, q.MGID)
		s.log.Debug("multicast group deleted", "mlid", g.rec.MLID)
	}
	a.notify = []mcastChange{g.change(r.subnet)}
	return a
}
