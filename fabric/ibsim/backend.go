package ibsim

// Node is a node of the fabric as the server sees it. *fabric.Node
// satisfies it.
type Node interface {
	Name() string // the topology's name, e.g. "Hca1", which SIM_HOST selects
	Type() uint8  // NodeInfo's NodeType: 1 CA, 2 switch, 3 router
	GUID() uint64
	NumPorts() int
}

// Datagram is a MAD travelling through the fabric with its addressing: the
// fabric's datagram, as the server hands it over and receives it.
type Datagram struct {
	SLID, DLID uint16
	SQP, DQP   uint32
	Status     int    // ibsim's status: 0, or an error the fabric reports
	MAD        []byte // 256 bytes
}

// Port is a management client's attachment to a port of the fabric.
type Port interface {
	// Send injects a MAD at the port: directed-route SMPs along their
	// path, LID-routed MADs by the switches' forwarding tables. An error
	// means the MAD went nowhere.
	Send(d *Datagram) error
	// Close detaches the port; no delivery follows its return.
	Close() error
}

// Backend is what the server needs of the fabric. The fabric package's
// adapter (FabricBackend) implements it over *fabric.Fabric.
type Backend interface {
	// Nodes returns the fabric's nodes in topology order; the first is the
	// node of a client that names none, as ibsim's default port is the
	// first of its net file.
	Nodes() []Node
	// Query returns the 64 bytes of attribute attr (an SM attribute ID:
	// NodeInfo 0x11, NodeDescription 0x10, PortInfo 0x15, P_KeyTable 0x16)
	// with modifier mod, as the node's SMA answers a Get.
	Query(n Node, attr uint16, mod uint32) ([]byte, error)
	// SetIsSM sets or clears the IsSM capability bit of the port.
	SetIsSM(n Node, port int, on bool) error
	// Attach attaches a management client at the port (a CA's port, port
	// 0 of a switch). The fabric calls deliver with every MAD arriving for
	// the port's QP0 or QP1 that the node's agents do not consume; deliver
	// does not block.
	Attach(n Node, port int, deliver func(*Datagram)) (Port, error)
}

// SM attribute IDs the server queries.
const (
	attrNodeDesc  = 0x0010
	attrNodeInfo  = 0x0011
	attrPortInfo  = 0x0015
	attrPKeyTable = 0x0016
)

// clientPort is the port a client attaches at: port 0 of a switch, the
// first port of a CA or router (ibsim's node_get_port(node, 0)).
func clientPort(n Node) int {
	if n.Type() == nodeTypeSwitch {
		return 0
	}
	return 1
}

const nodeTypeSwitch = 2
