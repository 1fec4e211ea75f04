package sm

import (
	"context"
	"slices"

	"github.com/softrdma/softrdma/wire/mad"
)

// Multicast LIDs (IBTA 4.1.1): the multicast forwarding tables of the
// switches start at MLIDFirst.
const (
	MLIDFirst = 0xC000
	MLIDLast  = 0xFFFE
)

// SetMulticast tells the SM that multicast group mlid has members (CA
// ports, or switches' port 0, of a published snapshot; none: the group
// is gone). It never blocks: the SM programs the switches' multicast
// forwarding tables on its own goroutine, after any sweep in progress,
// and again after every heavy sweep (members are kept by port GUID, so a
// group follows its ports across sweeps). It is what the SA's
// Config.Multicast calls.
func (m *Manager) SetMulticast(mlid uint16, members []*Port) {
	if mlid < MLIDFirst || mlid > MLIDLast {
		return
	}
	var guids []uint64
	for _, p := range members {
		if p != nil && !slices.Contains(guids, p.GUID) {
			guids = append(guids, p.GUID)
		}
	}
	m.mu.Lock()
	if len(guids) == 0 {
		delete(m.groups, mlid)
	} else {
		m.groups[mlid] = guids
	}
	m.mu.Unlock()
	m.kickMcast()
}

// MulticastGroups returns the groups the SM programs: each MLID's member
// port GUIDs.
func (m *Manager) MulticastGroups() map[uint16][]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint16][]uint64, len(m.groups))
	for k, v := range m.groups {
		out[k] = slices.Clone(v)
	}
	return out
}

func (m *Manager) kickMcast() {
	select {
	case m.mcast <- struct{}{}:
	default:
	}
}

// mcastLoop programs the multicast forwarding tables each time the groups
// or the subnet changed.
func (m *Manager) mcastLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.mcast:
		}
		m.sweepMu.Lock()
		sn := m.Subnet()
		if sn != nil && m.State() == mad.SMStateMaster {
			if err := m.programMFTs(m.ctx, sn); err != nil && m.ctx.Err() == nil {
				m.log.Warn("sm: multicast forwarding tables", "err", err)
			}
		}
		m.sweepMu.Unlock()
	}
}

// mcastTree returns, for one group, the ports of each switch its packets
// leave by: a spanning tree of the switches between the members (the
// breadth-first paths from every member's switch to the first member's),
// plus the ports leading to member CAs, as OpenSM builds a group's tree.
func mcastTree(sn *Subnet, guids []uint64) map[*Node][]int {
	out := map[*Node][]int{}
	add := func(n *Node, port int) {
		if !slices.Contains(out[n], port) {
			out[n] = append(out[n], port)
		}
	}
	var sws []*Node
	for _, g := range guids {
		p := sn.PortByGUID(g)
		if p == nil {
			continue
		}
		var sw *Node
		switch {
		case p.Node.Switch != nil:
			sw = p.Node
			add(sw, 0)
		case p.Remote != nil && p.Remote.Node.Switch != nil:
			sw = p.Remote.Node
			add(sw, p.Remote.Num)
		default:
			continue
		}
		if !slices.Contains(sws, sw) {
			sws = append(sws, sw)
		}
	}
	if len(sws) < 2 {
		return out
	}
	// Breadth first from the root over live links between switches.
	type hop struct {
		parent *Node
		out    int // the parent's port toward the node
		in     int // the node's port toward the parent
	}
	root := sws[0]
	seen := map[*Node]hop{root: {}}
	queue := []*Node{root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, p := range n.Ports[1:] {
			if p == nil {
				continue
			}
			r := p.Remote
			if r == nil || r.Node.Switch == nil || p.Info.PortState != mad.PortStateActive {
				continue
			}
			if _, ok := seen[r.Node]; ok {
				continue
			}
			seen[r.Node] = hop{parent: n, out: p.Num, in: r.Num}
			queue = append(queue, r.Node)
		}
	}
	for _, sw := range sws[1:] {
		for n := sw; n != root; {
			h, ok := seen[n]
			if !ok {
				break // not connected to the root
			}
			add(n, h.in)
			add(h.parent, h.out)
			n = h.parent
		}
	}
	return out
}

// programMFTs writes every switch's MFT blocks that differ from what the
// SM last wrote, for the groups as they are now.
func (m *Manager) programMFTs(ctx context.Context, sn *Subnet) error {
	groups := m.MulticastGroups()
	want := map[*Node]map[uint16][]int{}
	for mlid, guids := range groups {
		for n, ports := range mcastTree(sn, guids) {
			if want[n] == nil {
				want[n] = map[uint16][]int{}
			}
			want[n][mlid] = ports
		}
	}
	var firstErr error
	for _, n := range sn.Nodes {
		if n.Switch == nil {
			continue
		}
		npos := int(n.Info.NumPorts)/16 + 1
		table := map[int][]uint16{} // by block: 32 MLIDs x npos masks
		for mlid, ports := range want[n] {
			blk, i := int(mlid-MLIDFirst)/32, int(mlid-MLIDFirst)%32
			if table[blk] == nil {
				table[blk] = make([]uint16, 32*npos)
			}
			for _, p := range ports {
				table[blk][(p/16)*32+i] |= 1 << (p % 16)
			}
		}
		m.mu.Lock()
		old := m.mfts[n.Info.NodeGUID]
		m.mu.Unlock()
		blocks := map[int]bool{}
		for b := range table {
			blocks[b] = true
		}
		for b := range old {
			blocks[b] = true
		}
		next := map[int][]uint16{}
		for b := range blocks {
			cur := table[b]
			if cur == nil {
				cur = make([]uint16, 32*npos)
			}
			prev := old[b]
			for pos := range npos {
				seg := cur[pos*32 : (pos+1)*32]
				if prev != nil && slices.Equal(prev[pos*32:(pos+1)*32], seg) {
					continue
				}
				if prev == nil && !slices.ContainsFunc(seg, func(x uint16) bool { return x != 0 }) {
					continue
				}
				var x mad.MulticastFT
				copy(x.PortMask[:], seg)
				data := make([]byte, mad.SMPDataSize)
				x.Encode(data)
				if _, err := m.smp(ctx, n.Path, mad.MethodSet, mad.SMAttrMulticastFT, mad.MulticastFTModifier(uint8(pos), uint16(b)), data); err != nil {
					if firstErr == nil {
						firstErr = err
					}
					cur = nil // unknown: written again next time
					break
				}
			}
			if cur != nil && (table[b] != nil || prev != nil) {
				next[b] = cur
			}
		}
		m.mu.Lock()
		m.mfts[n.Info.NodeGUID] = next
		m.mu.Unlock()
	}
	return firstErr
}
