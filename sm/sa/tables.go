// The table records: SLtoVLMappingTableRecord, VLArbitrationTableRecord,
// P_KeyTableRecord, LinearForwardingTableRecord,
// MulticastForwardingTableRecord, GuidInfoRecord and SMInfoRecord, each
// given in the order OpenSM gives them.

package sa

import (
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// MFTSource is what a Source may also offer: the multicast forwarding
// table blocks the SM programmed in a switch (by block number, 32 MLIDs
// times the switch's positions each, position-major, as
// (*sm.Manager).MulticastFT gives them). Without it the SA has no
// MulticastForwardingTableRecords.
type MFTSource interface {
	MulticastFT(nodeGUID uint64) map[int][]uint16
}

// SMInfoSource is what a Source may also offer: the SMInfo of the SM
// (its SM_Key included). Without it the SA describes the snapshot's
// master SM from the snapshot alone (ActCount 0, priority 0).
type SMInfoSource interface {
	SMInfo() mad.SMInfo
}

// ports lists every port of the snapshot with a LID, node by node.
func lidPorts(s *sm.Subnet) []*sm.Port {
	var out []*sm.Port
	for _, n := range s.Nodes {
		for _, p := range n.Ports {
			if p != nil && p.LID() != 0 {
				out = append(out, p)
			}
		}
	}
	return out
}

func encode[T interface{ Encode([]byte) }](x T, size int) []byte {
	b := make([]byte, size)
	x.Encode(b)
	return b
}

// slToVLRecords gives a CA port's SL to VL table (ports 0 and 0) and a
// switch's for every input and output port pair, output port by output
// port, for the ports whose tables the SM read or programmed.
func slToVLRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, p := range lidPorts(s) {
		if p.Node.Switch == nil {
			if len(p.SL2VL) > 0 {
				out = append(out, encode(&mad.SLToVLRecord{LID: p.LID(), Table: p.SL2VL[0]}, mad.SLToVLRecordSize))
			}
			continue
		}
		for in, t := range p.SL2VL {
			out = append(out, encode(&mad.SLToVLRecord{LID: p.LID(), InPort: uint8(in), OutPort: uint8(p.Num), Table: t},
				mad.SLToVLRecordSize))
		}
	}
	return out
}

// vlArbRecords gives the VL arbitration blocks (1 to 4) that every port
// has, as the SM read or programmed them.
func vlArbRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, p := range lidPorts(s) {
		for sel := mad.VLArbLowEntries0to31; sel <= mad.VLArbHighEntries32to63; sel++ {
			if t, ok := p.VLArb[sel]; ok {
				out = append(out, encode(&mad.VLArbRecord{LID: p.LID(), OutPort: uint8(p.Num), Block: uint8(sel), Table: t},
					mad.VLArbRecordSize))
			}
		}
	}
	return out
}

// pkeyTableRecords gives the P_Key table blocks of every port with a P_Key
// table: as many blocks as the node's PartitionCap (a switch's external
// ports: its PartitionEnforcementCap) holds, the keys the SM knows from
// the first entry on.
func pkeyTableRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, p := range lidPorts(s) {
		if len(p.PKeys) == 0 {
			continue
		}
		capacity := int(p.Node.Info.PartitionCap)
		if p.Node.Switch != nil && p.Num != 0 {
			capacity = int(p.Node.Switch.PartitionEnforcementCap)
		}
		blocks := max((capacity+31)/32, (len(p.PKeys)+31)/32)
		for blk := range blocks {
			r := mad.PKeyTableRecord{LID: p.LID(), Block: uint16(blk), Port: uint8(p.Num)}
			for i := range r.Table.PKey {
				if k := blk*32 + i; k < len(p.PKeys) {
					r.Table.PKey[i] = p.PKeys[k]
				}
			}
			out = append(out, encode(&r, mad.PKeyTableRecordSize))
		}
	}
	return out
}

// linearFTRecords gives every switch's linear forwarding table in blocks
// of 64 LIDs, up to its LinearFDBTop.
func linearFTRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, n := range s.Nodes {
		if n.Switch == nil || len(n.LFT) == 0 || n.Ports[0] == nil || n.Ports[0].LID() == 0 {
			continue
		}
		for blk := 0; blk*64 < len(n.LFT); blk++ {
			r := mad.LinearFTRecord{LID: n.Ports[0].LID(), Block: uint16(blk)}
			for i := range r.Table.Port {
				r.Table.Port[i] = mad.LinearFTNoRoute
				if k := blk*64 + i; k < len(n.LFT) {
					r.Table.Port[i] = n.LFT[k]
				}
			}
			out = append(out, encode(&r, mad.LinearFTRecordSize))
		}
	}
	return out
}

// multicastFTRecords gives every switch's multicast forwarding table as
// programmed: blocks 0 up to the highest in use, each position (16 ports)
// of the switch, block by block.
func multicastFTRecords(s *sm.Subnet, src MFTSource) [][]byte {
	if src == nil {
		return nil
	}
	var out [][]byte
	for _, n := range s.Nodes {
		if n.Switch == nil || n.Ports[0] == nil || n.Ports[0].LID() == 0 {
			continue
		}
		tbl := src.MulticastFT(n.Info.NodeGUID)
		npos := int(n.Info.NumPorts)/16 + 1
		top := -1
		for blk, masks := range tbl {
			for _, m := range masks {
				if m != 0 {
					top = max(top, blk)
					break
				}
			}
		}
		for blk := 0; blk <= top; blk++ {
			masks := tbl[blk]
			for pos := range npos {
				r := mad.MulticastFTRecord{LID: n.Ports[0].LID(), Position: uint8(pos), Block: uint16(blk)}
				if len(masks) >= (pos+1)*32 {
					copy(r.Table.PortMask[:], masks[pos*32:(pos+1)*32])
				}
				out = append(out, encode(&r, mad.MulticastFTRecordSize))
			}
		}
	}
	return out
}

// guidInfoRecords gives the GUID table of every CA port and switch port 0
// with a LID: the GUIDs the SM read, or else the port GUID alone at index
// 0, in as many blocks of eight as the port's GUIDCap holds.
func guidInfoRecords(s *sm.Subnet) [][]byte {
	var out [][]byte
	for _, p := range endPorts(s) {
		if p.LID() == 0 {
			continue
		}
		guids := p.GUIDs
		if guids == nil {
			guids = []uint64{p.GUID}
		}
		blocks := max((int(p.Info.GUIDCap)+7)/8, (len(guids)+7)/8)
		for blk := range blocks {
			r := mad.GUIDInfoRecord{LID: p.LID(), Block: uint8(blk)}
			for i := range r.Table.GUID {
				if k := blk*8 + i; k < len(guids) {
					r.Table.GUID[i] = guids[k]
				}
			}
			out = append(out, encode(&r, mad.GUIDInfoRecordSize))
		}
	}
	return out
}

// smInfoRecords gives the master SM's SMInfo, its SM_Key only to a
// trusted requester.
func (s *Server) smInfoRecords(sn *sm.Subnet, trusted bool) [][]byte {
	p := sn.PortByLID(sn.SMLID)
	if p == nil {
		return nil
	}
	info := mad.SMInfo{GUID: p.GUID, SMKey: sn.SMKey, SMState: mad.SMStateMaster}
	if src, ok := s.src.(SMInfoSource); ok {
		info = src.SMInfo()
	}
	if !trusted {
		info.SMKey = 0
	}
	return [][]byte{encode(&mad.SMInfoRecord{LID: sn.SMLID, Info: info}, mad.SMInfoRecordSize)}
}

// tableRecord answers the table records; ok is false for another
// attribute.
func (s *Server) tableRecord(r *request) (answer, bool) {
	trusted := r.m.Header().SMKey == r.subnet.SMKey
	switch r.attr {
	case mad.SAAttrSLToVLRecord:
		return match(r, mad.SLToVLRecordComponents, mad.SLToVLRecordSize, slToVLRecords(r.subnet)), true
	case mad.SAAttrVLArbTableRecord:
		return match(r, mad.VLArbRecordComponents, mad.VLArbRecordSize, vlArbRecords(r.subnet)), true
	case mad.SAAttrPKeyTableRecord:
		// P_KeyTableRecords go only to trusted requesters (IBTA
		// 15.2.5.11), as OpenSM gives them.
		if !trusted {
			return fail(mad.SAStatusReqInvalid), true
		}
		return match(r, mad.PKeyTableRecordComponents, mad.PKeyTableRecordSize, pkeyTableRecords(r.subnet)), true
	case mad.SAAttrLinearFTRecord:
		return match(r, mad.LinearFTRecordComponents, mad.LinearFTRecordSize, linearFTRecords(r.subnet)), true
	case mad.SAAttrMulticastFTRecord:
		src, _ := s.src.(MFTSource)
		return match(r, mad.MulticastFTRecordComponents, mad.MulticastFTRecordSize, multicastFTRecords(r.subnet, src)), true
	case mad.SAAttrGUIDInfoRecord:
		return match(r, mad.GUIDInfoRecordComponents, mad.GUIDInfoRecordSize, guidInfoRecords(r.subnet)), true
	case mad.SAAttrSMInfoRecord:
		if !trusted {
			r.mask &^= mad.SMInfoRecCompSMKey
		}
		return match(r, mad.SMInfoRecordComponents, mad.SMInfoRecordSize, s.smInfoRecords(r.subnet, trusted)), true
	}
	return answer{}, false
}

// SA ClassPortInfo CapabilityMask bits (IBTA volume 1 table 201, as
// OpenSM names them).
const (
	capGetSetNotice = 1 << 1  // Get/Set(InformInfo), Reports
	capUDMulticast  = 1 << 9  // MCMemberRecord, multicast
	capMultiPath    = 1 << 10 // MultiPathRecord
)

// capabilities is what the SA's ClassPortInfo claims.
func (s *Server) capabilities() uint16 { return capUDMulticast | capGetSetNotice | capMultiPath }
