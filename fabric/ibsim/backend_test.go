package ibsim

import (
	"errors"
	"fmt"
	"sync"
)

// testBackend stands in for the fabric where a test must deliver MADs the
// real fabric would not produce on demand (traps to an SM, responses for a
// given slot, floods) or have Send fail at once: two nodes, each with an
// SMA that answers directed-route Gets of hop count 0 for NodeInfo,
// NodeDescription, PortInfo and P_KeyTable. Everything else is refused by
// Send, as unroutable. The other tests run softrdma's fabric.
type testBackend struct {
	nodes []*testNode
	mu    sync.Mutex
	ports map[*testPort]bool
}

type testNode struct {
	name  string
	typ   uint8
	guid  uint64
	ports int
	desc  string
	mu    sync.Mutex
	issm  map[int]bool
}

func (n *testNode) Name() string  { return n.name }
func (n *testNode) Type() uint8   { return n.typ }
func (n *testNode) GUID() uint64  { return n.guid }
func (n *testNode) NumPorts() int { return n.ports }

type testPort struct {
	b       *testBackend
	n       *testNode
	port    int
	deliver func(*Datagram)
}

var errNoRoute = errors.New("test backend: no route")

func newTestBackend() *testBackend {
	return &testBackend{
		nodes: []*testNode{
			{name: "Sw1", typ: 2, guid: 0x0002c90000000100, ports: 8, desc: "test switch"},
			{name: "Hca1", typ: 1, guid: 0x0002c90000000200, ports: 2, desc: "test host Hca1"},
		},
		ports: make(map[*testPort]bool),
	}
}

func (b *testBackend) Nodes() []Node {
	out := make([]Node, len(b.nodes))
	for i, n := range b.nodes {
		out[i] = n
	}
	return out
}

func (b *testBackend) Query(nd Node, attr uint16, mod uint32) ([]byte, error) {
	n := nd.(*testNode)
	d := make([]byte, 64)
	switch attr {
	case attrNodeDesc:
		copy(d, n.desc)
	case attrNodeInfo:
		d[0], d[1], d[2], d[3] = 1, 1, n.typ, byte(n.ports)
		be.PutUint64(d[4:], n.guid)
		be.PutUint64(d[12:], n.guid)
		be.PutUint64(d[20:], n.guid+uint64(clientPort(n)))
		be.PutUint16(d[28:], 8)      // PartitionCap
		be.PutUint16(d[30:], 0xabcd) // DeviceID
		be.PutUint32(d[32:], 0xa1)   // Revision
		be.PutUint32(d[36:], uint32(clientPort(n))<<24|0x0002c9)
	case attrPortInfo:
		if int(mod) > n.ports {
			return nil, fmt.Errorf("test backend: no port %d", mod)
		}
		be.PutUint64(d[8:], 0xfe80000000000000)
		be.PutUint16(d[16:], uint16(0x10+mod)) // a LID the test can tell apart
		caps := uint32(1 << 3)
		n.mu.Lock()
		if n.issm[int(mod)] {
			caps |= 1 << 1
		}
		n.mu.Unlock()
		be.PutUint32(d[20:], caps)
		d[28] = byte(mod)
		d[32] = 0x20 | 2 // speed 2, state Init
	case attrPKeyTable:
		be.PutUint16(d[0:], 0xffff)
		be.PutUint16(d[62:], 0x8001) // beyond PartitionCap: GET_PKEYS omits it
	default:
		return nil, fmt.Errorf("test backend: attribute 0x%x", attr)
	}
	return d, nil
}

func (b *testBackend) SetIsSM(nd Node, port int, on bool) error {
	n := nd.(*testNode)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.issm == nil {
		n.issm = make(map[int]bool)
	}
	n.issm[port] = on
	return nil
}

func (b *testBackend) Attach(nd Node, port int, deliver func(*Datagram)) (Port, error) {
	p := &testPort{b: b, n: nd.(*testNode), port: port, deliver: deliver}
	b.mu.Lock()
	b.ports[p] = true
	b.mu.Unlock()
	return p, nil
}

// attached returns the number of open attachments.
func (b *testBackend) attached() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ports)
}

// inject delivers d at every open attachment of node n, as the fabric
// delivers a MAD arriving there.
func (b *testBackend) inject(n *testNode, d *Datagram) {
	b.mu.Lock()
	var ps []*testPort
	for p := range b.ports {
		if p.n == n {
			ps = append(ps, p)
		}
	}
	b.mu.Unlock()
	for _, p := range ps {
		p.deliver(d)
	}
}

func (p *testPort) Send(d *Datagram) error {
	m := d.MAD
	if len(m) != MADSize || m[madMgmtClass] != classDirected || m[7] != 0 || m[madMethod] != 1 {
		return errNoRoute
	}
	data, err := p.b.Query(p.n, be.Uint16(m[madAttrID:]), be.Uint32(m[madAttrMod:]))
	if err != nil {
		return err
	}
	r := *d
	r.MAD = append([]byte(nil), m...)
	r.MAD[madMethod] = 0x81
	r.MAD[4] |= 0x80 // direction: returning
	copy(r.MAD[64:128], data)
	r.SLID, r.DLID, r.SQP, r.DQP = d.DLID, d.SLID, d.DQP, d.SQP
	p.deliver(&r)
	return nil
}

func (p *testPort) Close() error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if !p.b.ports[p] {
		return errors.New("test backend: closed twice")
	}
	delete(p.b.ports, p)
	return nil
}
