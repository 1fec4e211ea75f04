// The records read straight from the snapshot: NodeRecord, PortInfoRecord,
// SwitchInfoRecord and LinkRecord, each encoded for MatchComponents.

package sa

import (
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// endPorts returns the ports that have a NodeRecord and a PathRecord end:
// every CA port and every switch's port 0.
func endPorts(s *sm.Subnet) []*sm.Port {
	var ps []*sm.Port
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p == nil || (n.Switch != nil && p.Num != 0) {
				continue
			}
			ps = append(ps, p)
		}
	}
	return ps
}

// nodeRecords gives one NodeRecord per end port with a LID, its NodeInfo
// naming that port, as OpenSM gives them.
func nodeRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, p := range endPorts(s) {
		if p.LID() == 0 {
			continue
		}
		r := mad.NodeRecord{LID: p.LID(), Info: p.Node.Info, Desc: mad.NodeDescription{Description: p.Node.Desc}}
		if p.Node.Switch == nil {
			r.Info.PortGUID, r.Info.LocalPortNum = p.GUID, uint8(p.Num)
		}
		b := make([]byte, mad.NodeRecordSize)
		r.Encode(b)
		out = append(out, b)
	}
	return out
}

// portInfoRecords gives a PortInfoRecord for every port the snapshot has,
// indexed by the LID of the port (a switch's ports: the switch's), with
// the M_Key zeroed unless trusted.
func portInfoRecords(s *sm.Subnet, trusted bool) [][]byte {
	var out [][]byte
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p == nil || p.LID() == 0 {
				continue
			}
			r := mad.PortInfoRecord{EndportLID: p.LID(), PortNum: uint8(p.Num), Info: p.Info}
			if !trusted {
				r.Info.MKey = 0
			}
			b := make([]byte, mad.PortInfoRecordSize)
			r.Encode(b)
			out = append(out, b)
		}
	}
	return out
}

// switchInfoRecords gives each switch's SwitchInfo by its LID.
func switchInfoRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, n := range s.Nodes {
		if n.Switch == nil || len(n.Ports) == 0 || n.Ports[0] == nil || n.Ports[0].LID() == 0 {
			continue
		}
		r := mad.SwitchInfoRecord{LID: n.Ports[0].LID(), Info: *n.Switch}
		b := make([]byte, mad.SwitchInfoRecordSize)
		r.Encode(b)
		out = append(out, b)
	}
	return out
}

// linkRecords gives both directions of every link whose two ends have
// LIDs.
func linkRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p == nil || p.Remote == nil || p.LID() == 0 || p.Remote.LID() == 0 {
				continue
			}
			r := mad.LinkRecord{FromLID: p.LID(), FromPort: uint8(p.Num), ToPort: uint8(p.Remote.Num), ToLID: p.Remote.LID()}
			b := make([]byte, mad.LinkRecordSize)
			r.Encode(b)
			out = append(out, b)
		}
	}
	return out
}
