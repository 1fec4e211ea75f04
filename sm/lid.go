package sm

// Unicast LIDs (IBTA 4.1.3).
const (
	minUnicastLID = 0x0001
	maxUnicastLID = 0xBFFF
)

// endpoints returns the ports that get LIDs, in discovery order: every
// switch's port 0 and every CA port found.
func endpoints(nodes []*Node) []*Port {
	var eps []*Port
	for _, n := range nodes {
		if n.Switch != nil {
			eps = append(eps, n.Ports[0])
			continue
		}
		for _, p := range n.Ports[1:] {
			if p != nil {
				eps = append(eps, p)
			}
		}
	}
	return eps
}

// lmcOf is the LMC a port gets: Config.LMC for CA ports, 0 for switches
// (a base switch port 0 has one LID).
func (m *Manager) lmcOf(p *Port) uint8 {
	if p.Node.Switch != nil {
		return 0
	}
	return m.cfg.LMC
}

// assignLIDs gives every endpoint its base LID, aligned to its LMC, and
// returns them by port GUID. A port keeps the LID it had from an earlier
// sweep of this SM (the Manager remembers them by port GUID, gone ports
// included, as OpenSM's guid2lid file does); a port new to the SM keeps
// the LID it already has if that range is free and aligned (another SM, an
// earlier run); the others get the lowest free aligned range.
func (m *Manager) assignLIDs(eps []*Port) (map[uint64]uint16, uint16) {
	used := map[uint16]uint64{}
	take := func(lid uint16, lmc uint8, g uint64) {
		for i := uint16(0); i < 1<<lmc; i++ {
			used[lid+i] = g
		}
	}
	free := func(lid uint16, lmc uint8, g uint64) bool {
		size := uint16(1) << lmc
		if lid < minUnicastLID || lid&(size-1) != 0 || uint32(lid)+uint32(size)-1 > maxUnicastLID {
			return false
		}
		for i := uint16(0); i < size; i++ {
			if o, ok := used[lid+i]; ok && o != g {
				return false
			}
		}
		return true
	}
	for g, r := range m.lids {
		take(r.lid, r.lmc, g) // a remembered port keeps its range
	}
	lids := map[uint64]uint16{}
	var top uint16
	note := func(p *Port, lid uint16) {
		lids[p.GUID] = lid
		m.lids[p.GUID] = lidRange{lid, m.lmcOf(p)}
		take(lid, m.lmcOf(p), p.GUID)
		if end := lid + (1 << m.lmcOf(p)) - 1; end > top {
			top = end
		}
	}
	var rest []*Port
	for _, p := range eps {
		if _, done := lids[p.GUID]; done {
			continue
		}
		if r, ok := m.lids[p.GUID]; ok && free(r.lid, m.lmcOf(p), p.GUID) {
			note(p, r.lid)
			continue
		}
		rest = append(rest, p)
	}
	var later []*Port
	for _, p := range rest {
		if lid := p.Info.LID; lid != 0 && free(lid, m.lmcOf(p), p.GUID) {
			note(p, lid)
			continue
		}
		later = append(later, p)
	}
	next := uint16(minUnicastLID)
	for _, p := range later {
		size := uint16(1) << m.lmcOf(p)
		lid := (next + size - 1) &^ (size - 1)
		for !free(lid, m.lmcOf(p), p.GUID) {
			lid += size
			if uint32(lid) > maxUnicastLID {
				m.log.Error("sm: no LIDs left", "port", p.GUID)
				return lids, top
			}
		}
		note(p, lid)
		next = lid + size
	}
	return lids, top
}

// lidRange is a port's base LID and LMC as the SM gave them.
type lidRange struct {
	lid uint16
	lmc uint8
}

// portLIDsOK reports whether p's PortInfo already says what the SM sets
// (LIDs, SM LID, prefix, and the M_Key if the SM has one).
func (m *Manager) portLIDsOK(p *Port, lid, smLID uint16) bool {
	pi := &p.Info
	return pi.LID == lid && pi.LMC == m.lmcOf(p) && pi.MasterSMLID == smLID && pi.GIDPrefix == m.cfg.Prefix &&
		(m.cfg.MKey == 0 || pi.MKey == m.cfg.MKey && pi.MKeyProtectBits == m.cfg.MKeyProtectBits &&
			pi.MKeyLeasePeriod == m.cfg.MKeyLeasePeriod)
}
