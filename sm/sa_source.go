package sm

import "github.com/softrdma/softrdma/wire/mad"

// MulticastFT returns the multicast forwarding table blocks the SM last
// wrote to the switch whose node GUID is nodeGUID: by block number, 32
// MLIDs times the switch's positions (16 ports each), position-major.
// The SA answers MulticastForwardingTableRecords from it.
func (m *Manager) MulticastFT(nodeGUID uint64) map[int][]uint16 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int][]uint16, len(m.mfts[nodeGUID]))
	for b, masks := range m.mfts[nodeGUID] {
		out[b] = append([]uint16(nil), masks...)
	}
	return out
}

// SMInfo returns what this SM says of itself in SMInfo, its SM_Key
// included. The SA answers SMInfoRecords from it.
func (m *Manager) SMInfo() mad.SMInfo { return m.smInfo(true) }
