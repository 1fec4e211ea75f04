package sm

import (
	"context"
	"fmt"
	"sync"

	"github.com/softrdma/softrdma/wire/mad"
)

// discovery is one sweep's view of the subnet while it is being found.
type discovery struct {
	nodes map[uint64]*Node
	order []*Node
	links []link
	self  *Port // the SM's port
}

type link struct {
	a, b   uint64 // node GUIDs
	pa, pb int
}

// probe is one directed route to try: the path and the port it leaves
// the previous node by (nil for the SM's own node).
type probe struct {
	path []byte
	from *Port
}

func extend(path []byte, port int) []byte {
	p := make([]byte, len(path)+1)
	copy(p, path)
	p[len(path)] = byte(port)
	return p
}

// discover finds every node reachable from the SM's port, breadth first:
// each level's NodeInfo requests go out together, then the new nodes'
// NodeDescription, SwitchInfo and PortInfo of every port. Each level is
// settled in path order, so that the same subnet is found in the same order
// whatever the timing of the answers.
func (m *Manager) discover(ctx context.Context) (*discovery, error) {
	dc := &discovery{nodes: map[uint64]*Node{}}
	level := []probe{{path: nil}}
	for len(level) > 0 {
		infos := make([]*mad.NodeInfo, len(level))
		parallel(len(level), func(i int) {
			b, err := m.smp(ctx, level[i].path, mad.MethodGet, mad.SMAttrNodeInfo, 0, nil)
			if err != nil {
				m.log.Debug("sm: NodeInfo", "path", level[i].path, "err", err)
				return
			}
			if ni, err := mad.ParseNodeInfo(b); err == nil {
				infos[i] = &ni
			}
		})
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if infos[0] == nil && level[0].from == nil {
			return nil, fmt.Errorf("sm: the SM's own node does not answer NodeInfo: %w", ErrTimeout)
		}
		var newNodes []*Node
		var newCAPorts []*Port
		for i, pr := range level {
			ni := infos[i]
			if ni == nil {
				continue
			}
			if ni.NumPorts == 0 || (ni.NodeType != mad.NodeTypeSwitch && (ni.LocalPortNum == 0 || ni.LocalPortNum > ni.NumPorts)) {
				m.log.Warn("sm: node with a bad NodeInfo ignored", "guid", fmt.Sprintf("%#x", ni.NodeGUID), "path", pr.path)
				continue
			}
			if pr.from != nil {
				dc.links = append(dc.links, link{pr.from.Node.Info.NodeGUID, ni.NodeGUID, pr.from.Num, int(ni.LocalPortNum)})
			}
			n := dc.nodes[ni.NodeGUID]
			if n == nil {
				n = &Node{Info: *ni, Path: pr.path, Ports: make([]*Port, int(ni.NumPorts)+1)}
				dc.nodes[ni.NodeGUID] = n
				dc.order = append(dc.order, n)
				newNodes = append(newNodes, n)
				if ni.NodeType == mad.NodeTypeSwitch {
					n.Switch = &mad.SwitchInfo{}
					for p := range n.Ports {
						n.Ports[p] = &Port{Node: n, Num: p, GUID: ni.PortGUID, Path: pr.path}
					}
				}
			}
			if ni.NodeType != mad.NodeTypeSwitch && n.Ports[ni.LocalPortNum] == nil {
				p := &Port{Node: n, Num: int(ni.LocalPortNum), GUID: ni.PortGUID, Path: pr.path}
				n.Ports[p.Num] = p
				newCAPorts = append(newCAPorts, p)
			}
			if pr.from == nil {
				if ni.NodeType == mad.NodeTypeSwitch {
					dc.self = n.Ports[0]
				} else {
					dc.self = n.Ports[ni.LocalPortNum]
				}
			}
		}
		// The new nodes' attributes, all at once.
		var mu sync.Mutex
		var jobs []func()
		for _, n := range newNodes {
			jobs = append(jobs, func() {
				if b, err := m.smp(ctx, n.Path, mad.MethodGet, mad.SMAttrNodeDescription, 0, nil); err == nil {
					nd, _ := mad.ParseNodeDescription(b)
					mu.Lock()
					n.Desc = nd.Description
					mu.Unlock()
				}
			})
			if n.Switch == nil {
				continue
			}
			jobs = append(jobs, func() {
				b, err := m.smp(ctx, n.Path, mad.MethodGet, mad.SMAttrSwitchInfo, 0, nil)
				if err != nil {
					m.log.Debug("sm: SwitchInfo", "node", fmt.Sprintf("%#x", n.Info.NodeGUID), "err", err)
					return
				}
				si, _ := mad.ParseSwitchInfo(b)
				mu.Lock()
				*n.Switch = si
				mu.Unlock()
			})
			for _, p := range n.Ports {
				jobs = append(jobs, func() { m.readPortInfo(ctx, p, &mu) })
			}
			jobs = append(jobs, func() { m.readPKeys(ctx, n.Ports[0]) })
		}
		for _, p := range newCAPorts {
			jobs = append(jobs, func() { m.readPortInfo(ctx, p, &mu) }, func() { m.readPKeys(ctx, p) })
		}
		parallel(len(jobs), func(i int) { jobs[i]() })
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The next level: every linked port of the new switches but the
		// one the SM came in by, and the SM's own CA port.
		var next []probe
		for i, pr := range level {
			ni := infos[i]
			if ni == nil {
				continue
			}
			n := dc.nodes[ni.NodeGUID]
			if pr.from == nil && n.Switch == nil {
				p := n.Ports[ni.LocalPortNum]
				if p.Info.PortPhysicalState == mad.PhysStateLinkUp {
					next = append(next, probe{path: extend(nil, p.Num), from: p})
				}
			}
		}
		for _, n := range newNodes {
			if n.Switch == nil {
				continue
			}
			for _, p := range n.Ports[1:] {
				if p.Info.PortPhysicalState != mad.PhysStateLinkUp || len(n.Path) >= mad.SMPMaxHopCount {
					continue
				}
				if p.Num == int(n.Info.LocalPortNum) && len(n.Path) > 0 {
					continue // the way in: its link is known
				}
				next = append(next, probe{path: extend(n.Path, p.Num), from: p})
			}
		}
		level = next
	}
	// Join the links found from both ends.
	for _, l := range dc.links {
		a, b := dc.nodes[l.a], dc.nodes[l.b]
		if a == nil || b == nil || l.pa >= len(a.Ports) || l.pb >= len(b.Ports) {
			continue
		}
		pa, pb := a.Ports[l.pa], b.Ports[l.pb]
		if pa == nil || pb == nil {
			continue
		}
		pa.Remote, pb.Remote = pb, pa
	}
	if dc.self == nil {
		return nil, fmt.Errorf("sm: the SM's own port was not found")
	}
	return dc, nil
}

// readPortInfo reads p's PortInfo along p.Path.
func (m *Manager) readPortInfo(ctx context.Context, p *Port, mu *sync.Mutex) {
	b, err := m.smp(ctx, p.Path, mad.MethodGet, mad.SMAttrPortInfo, uint32(p.Num), nil)
	if err != nil {
		m.log.Debug("sm: PortInfo", "node", fmt.Sprintf("%#x", p.Node.Info.NodeGUID), "port", p.Num, "err", err)
		return
	}
	pi, _ := mad.ParsePortInfo(b)
	mu.Lock()
	p.Info = pi
	mu.Unlock()
}

// readPKeys reads the first block of p's P_Key table (a CA port's, or a
// switch's port 0) into p.PKeys: at most 32 entries, as many as the node's
// PartitionCap.
func (m *Manager) readPKeys(ctx context.Context, p *Port) {
	b, err := m.smp(ctx, p.Path, mad.MethodGet, mad.SMAttrPKeyTable, mad.PKeyTableModifier(0, 0), nil)
	if err != nil {
		m.log.Debug("sm: P_KeyTable", "node", fmt.Sprintf("%#x", p.Node.Info.NodeGUID), "port", p.Num, "err", err)
		return
	}
	t, _ := mad.ParsePKeyTable(b)
	n := min(len(t.PKey), max(int(p.Node.Info.PartitionCap), 1))
	p.PKeys = append([]uint16(nil), t.PKey[:n]...)
}
