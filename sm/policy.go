package sm

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// tableKey names one block of a table the SM wrote: the attribute and
// modifier at a port of a node.
type tableKey struct {
	node uint64
	port int
	attr mad.AttributeID
	mod  uint32
}

// policyRefs returns the policy's view of every port the policy may
// program, in discovery order: CA and router ports, switch port 0 and
// switch external ports (with the end port their link leads to).
func policyRefs(dc *discovery) ([]*Port, map[*Port]policy.PortRef) {
	refs := map[*Port]policy.PortRef{}
	var ports []*Port
	endRef := func(p *Port) policy.PortRef {
		if p.Node.Switch != nil {
			return policy.SwitchPortRef(p.Node.Info, *p.Node.Switch, p.Info, 0, nil)
		}
		r := policy.EndPortRef(p.Node.Info, p.Info, uint8(p.Num), p == dc.self)
		r.PortGUID = p.GUID // NodeInfo names the port the SM reached the node by
		return r
	}
	for _, n := range dc.order {
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			var r policy.PortRef
			switch {
			case n.Switch == nil || p.Num == 0:
				r = endRef(p)
			default:
				var peer *policy.PortRef
				if q := p.Remote; q != nil && (q.Node.Switch == nil || q.Num == 0) {
					pr := endRef(q)
					peer = &pr
				}
				r = policy.SwitchPortRef(n.Info, *n.Switch, p.Info, uint8(p.Num), peer)
			}
			refs[p] = r
			ports = append(ports, p)
		}
	}
	return ports, refs
}

// programPolicy writes the partition and QoS policy (Config.Partitions,
// Config.QoS) to every port, before the ports are armed: P_Key tables of
// end ports and of the switch ports that enforce, the enforcement bits,
// and with QoS enabled OperationalVLs, VLHighLimit, SL2VL and VL
// arbitration tables. It writes only what differs: end ports' first P_Key
// block and PortInfo fields are compared with what discovery read, other
// tables with what this SM last wrote. The snapshot's Port.PKeys is set
// to the programmed table.
func (m *Manager) programPolicy(ctx context.Context, dc *discovery, fail func(error)) {
	ps, q := m.cfg.Partitions, m.cfg.QoS
	qos := q != nil && q.Enabled
	if ps == nil && !qos {
		return
	}
	ports, refs := policyRefs(dc)
	var mu sync.Mutex
	// set writes one block unless it holds what this SM wrote last
	// (or, with have, what was read).
	set := func(p *Port, attr mad.AttributeID, mod uint32, data []byte, have []byte) bool {
		k := tableKey{p.Node.Info.NodeGUID, p.Num, attr, mod}
		m.mu.Lock()
		old, ok := m.tables[k]
		m.mu.Unlock()
		if have != nil && bytes.Equal(have, data) || have == nil && ok && bytes.Equal(old, data) {
			m.mu.Lock()
			m.tables[k] = data
			m.mu.Unlock()
			return true
		}
		if _, err := m.smp(ctx, p.Path, mad.MethodSet, attr, mod, data); err != nil {
			m.mu.Lock()
			delete(m.tables, k)
			m.mu.Unlock()
			fail(err)
			return false
		}
		m.mu.Lock()
		m.tables[k] = data
		m.mu.Unlock()
		return true
	}
	parallel(len(ports), func(i int) {
		p := ports[i]
		ref := refs[p]
		n := p.Node
		isSw := n.Switch != nil
		external := isSw && p.Num != 0
		linked := p.Remote != nil && p.Info.PortPhysicalState == mad.PhysStateLinkUp
		if external && !linked {
			return
		}
		pi := p.Info
		if ps != nil {
			keys := ps.PKeys(ref)
			in, out := ps.Enforce(ref)
			if external {
				pi.PartitionEnforcementInbound, pi.PartitionEnforcementOutbound = in, out
			}
			if keys != nil || !external {
				blocks := policy.PKeyTableBlocks(keys)
				for blk := range max(1, (ref.PKeyCap+31)/32) {
					var x mad.PKeyTable
					if blk < len(blocks) {
						x = blocks[blk]
					}
					b := make([]byte, mad.SMPDataSize)
					x.Encode(b)
					mod := uint32(blk)
					if isSw {
						mod = mad.PKeyTableModifier(uint8(p.Num), uint16(blk))
					}
					var have []byte
					if blk == 0 && !external && p.PKeys != nil {
						var r mad.PKeyTable
						copy(r.PKey[:], p.PKeys)
						have = make([]byte, mad.SMPDataSize)
						r.Encode(have)
						// Entries past what was read (the node's
						// capacity) are compared as written.
						if len(p.PKeys) < len(r.PKey) {
							copy(have[2*len(p.PKeys):], b[2*len(p.PKeys):])
						}
					}
					if !set(p, mad.SMAttrPKeyTable, mod, b, have) {
						break
					}
					if blk == 0 && !external {
						nk := min(len(x.PKey), max(int(n.Info.PartitionCap), 1))
						mu.Lock()
						p.PKeys = append([]uint16(nil), x.PKey[:nk]...)
						mu.Unlock()
					}
				}
			}
		}
		var pq policy.PortQoS
		withQoS := qos && (!isSw || external || ref.EnhancedPort0)
		if withQoS {
			pq = q.Port(ref)
			pi.OperationalVLs, pi.VLHighLimit = pq.OperationalVLs, pq.HighLimit
		}
		if pi.PartitionEnforcementInbound != p.Info.PartitionEnforcementInbound ||
			pi.PartitionEnforcementOutbound != p.Info.PartitionEnforcementOutbound ||
			pi.OperationalVLs != p.Info.OperationalVLs || pi.VLHighLimit != p.Info.VLHighLimit {
			pi.PortState, pi.PortPhysicalState = mad.PortStateNoChange, mad.PhysStateNoChange
			pi.LinkWidthEnabled, pi.LinkSpeedEnabled = 0, 0
			b := make([]byte, mad.SMPDataSize)
			pi.Encode(b)
			r, err := m.smp(ctx, p.Path, mad.MethodSet, mad.SMAttrPortInfo, uint32(p.Num), b)
			if err != nil {
				fail(err)
			} else {
				got, _ := mad.ParsePortInfo(r)
				mu.Lock()
				p.Info = got
				mu.Unlock()
				if got.OperationalVLs != pi.OperationalVLs || got.PartitionEnforcementInbound != pi.PartitionEnforcementInbound {
					fail(fmt.Errorf("sm: %s port %d kept OperationalVLs %d, enforcement %v after Set", n.Desc, p.Num, got.OperationalVLs, got.PartitionEnforcementInbound))
				}
			}
		}
		if !withQoS {
			return
		}
		b := make([]byte, mad.SMPDataSize)
		pq.SL2VL.Encode(b)
		// What was written goes in the snapshot for the SA's
		// SLtoVLMappingTableRecords and VLArbitrationTableRecords.
		var sl2vl []mad.SLToVLTable
		if !isSw {
			if set(p, mad.SMAttrSLToVLTable, 0, b, nil) {
				sl2vl = append(sl2vl, pq.SL2VL)
			}
		} else {
			for in := 0; in <= int(n.Info.NumPorts); in++ {
				if set(p, mad.SMAttrSLToVLTable, mad.SLToVLModifier(uint8(in), uint8(p.Num)), b, nil) {
					sl2vl = append(sl2vl, pq.SL2VL)
				}
			}
		}
		vlarb := map[int]mad.VLArbTable{}
		for sel, blocks := range map[int][]mad.VLArbTable{mad.VLArbHighEntries0to31: pq.VLArbHigh, mad.VLArbLowEntries0to31: pq.VLArbLow} {
			for i, blk := range blocks {
				b := make([]byte, mad.SMPDataSize)
				blk.Encode(b)
				if set(p, mad.SMAttrVLArbTable, mad.VLArbModifier(uint8(p.Num), uint16(sel+i)), b, nil) {
					vlarb[sel+i] = blk
				}
			}
		}
		mu.Lock()
		if len(sl2vl) == 1 || len(sl2vl) == int(n.Info.NumPorts)+1 {
			p.SL2VL = sl2vl
		}
		p.VLArb = vlarb
		mu.Unlock()
	})
}
