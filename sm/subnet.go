package sm

import "github.com/softrdma/softrdma/wire/mad"

// Subnet is what one sweep found and set: every node reachable from the SM's
// port, their ports, the links between them, the LIDs and the forwarding
// tables. A Subnet is immutable once published: readers (the SA) share it
// without locks, and the SM publishes a new one after each sweep that changed
// something.
type Subnet struct {
	Prefix uint64 // the subnet prefix of every port's GIDs
	SMLID  uint16 // the master SM's LID
	SMKey  uint64
	Sweep  uint64  // the sweep that produced this snapshot (1 = the first)
	Nodes  []*Node // in discovery order; Nodes[0] is the SM's node

	byLID  map[uint16]*Port // base LID of every CA port and switch port 0
	byGUID map[uint64]*Node
	byPort map[uint64]*Port // port GUID
}

// Node is one channel adapter, switch or router of a Subnet.
type Node struct {
	Info   mad.NodeInfo // as read from the node (PortGUID and LocalPortNum of the port the SM reached it by)
	Desc   string       // NodeDescription
	Switch *mad.SwitchInfo
	// Ports is indexed by port number, 0 to Info.NumPorts. Ports[0] is a
	// switch's management port; a CA's Ports[0] is nil.
	Ports []*Port
	// LFT is a switch's linear forwarding table as programmed: the output
	// port for each LID (0xFF: no route), len LinearFDBTop+1.
	LFT []uint8
	// Path is a directed route from the SM's port to the node (the initial
	// path of a DR SMP, port numbers hop by hop; empty for the SM's own node).
	Path []byte
}

// Port is one port of a Node.
type Port struct {
	Node  *Node
	Num   int
	GUID  uint64 // the port GUID (a switch's ports share port 0's)
	Info  mad.PortInfo
	PKeys []uint16 // the P_Key table as read (block 0) or programmed; CA ports and switch port 0
	// SL2VL is the port's SL to VL table as read or programmed, nil if
	// unknown: a CA port's one table, a switch port's (as output port)
	// indexed by input port.
	SL2VL []mad.SLToVLTable
	// VLArb is the port's VL arbitration table as read or programmed: its
	// blocks by selector (mad.VLArbLowEntries0to31 ...), the blocks the
	// port has.
	VLArb map[int]mad.VLArbTable
	// GUIDs is the port's GUID table as read, nil if unknown (its
	// port GUID alone).
	GUIDs []uint64
	// Remote is the port at the other end of this port's link, nil if the
	// link is down or the port is a switch's port 0.
	Remote *Port
	// Path is the directed route the SM reaches the port's node by through
	// this port: a CA's own for each of its ports, the node's Path for a
	// switch's ports.
	Path []byte
}

// LID is the port's base LID: its own for a CA port and switch port 0, the
// switch's for the external ports of a switch.
func (p *Port) LID() uint16 {
	if p.Node.Switch != nil && p.Num != 0 && p.Node.Ports[0] != nil {
		return p.Node.Ports[0].Info.LID
	}
	return p.Info.LID
}

// Index builds the Subnet's lookup tables. The SM calls it once before it
// publishes the snapshot; a Subnet built by hand (in tests) must call it too.
func (s *Subnet) Index() {
	s.byLID = make(map[uint16]*Port)
	s.byGUID = make(map[uint64]*Node)
	s.byPort = make(map[uint64]*Port)
	for _, n := range s.Nodes {
		s.byGUID[n.Info.NodeGUID] = n
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			if n.Switch == nil || p.Num == 0 {
				s.byPort[p.GUID] = p
				if p.Info.LID != 0 {
					for i := uint16(0); i < 1<<p.Info.LMC; i++ {
						s.byLID[p.Info.LID+i] = p
					}
				}
			}
		}
	}
}

// PortByLID returns the CA port or switch port 0 that lid addresses (any LID
// of its LMC range), or nil.
func (s *Subnet) PortByLID(lid uint16) *Port { return s.byLID[lid] }

// NodeByGUID returns the node whose node GUID is g, or nil.
func (s *Subnet) NodeByGUID(g uint64) *Node { return s.byGUID[g] }

// PortByGUID returns the CA port or switch port 0 whose port GUID is g, or nil.
func (s *Subnet) PortByGUID(g uint64) *Port { return s.byPort[g] }
