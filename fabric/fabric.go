package fabric

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// StatusTimeout is the Datagram.Status the fabric reports to a client whose
// request it could not deliver (no route, a link down, a directed route
// that does not hold, no one to answer): ETIMEDOUT, as Linux ibsim reports
// it, so the client learns at once what a real subnet would tell it by
// silence. Responses and traps that are lost are dropped silently.
const StatusTimeout = 110

// Sizes of the model.
const (
	linearFDBCap    = 0xC000 // LFT entries: every unicast LID
	multicastFDBCap = 1024   // MFT entries, from LID 0xC000
	pkeyCapCA       = 64     // P_Key table entries of a CA port and a switch's port 0
	pkeyCapSwitch   = 32     // partition enforcement entries of a switch's external port
	guidCap         = 8      // GUID table entries per port (one block)
	// nodeRevision is NodeInfo's Revision: nonzero as on hardware, and
	// ibsim's value, so that both report the same NodeInfo.
	nodeRevision = 0xa1
	maxHops      = 64   // a LID-routed packet crossing more switches is looping
	queueLen     = 1024 // default Options.QueueLen
	madWords     = (8 + 12 + 8 + mad.Size + 4) / 4
)

// Options tune a fabric; nil means the defaults.
type Options struct {
	// Logger receives the fabric's messages (drops at Debug); nil uses
	// slog.Default().
	Logger *slog.Logger
	// QueueLen bounds the datagrams waiting for the fabric's goroutine;
	// Send fails with ErrBusy beyond it. 0 means 1024.
	QueueLen int
	// Now is the clock of the M_Key lease periods; nil means time.Now.
	Now func() time.Time
	// LinkRate is the data plane's wire speed in bytes per second, the
	// same for each direction of every link: a packet holds the wire for
	// its length over the rate, so that the VL arbitration the SM sets
	// shares a busy link as on a real one. 0 (or less) makes the wire
	// take no time.
	LinkRate int64
}

// Fabric is a running emulated subnet built from a topology: its nodes, the
// links between their ports, and one goroutine that carries management
// datagrams. Its methods are safe for concurrent use.
type Fabric struct {
	topo   *Topology
	nodes  []*Node
	byName map[string]*Node
	byGUID map[uint64]*Node
	log    *slog.Logger
	now    func() time.Time
	// linkRate is Options.LinkRate: every data plane link's wire speed.
	linkRate int64

	queue chan job
	done  chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex // guards everything mutable below and in nodes and ports
	closed   bool
	tidOwner map[tidKey]*Client
	trapTID  uint64
	dp       *dataPlane // the data plane (dataplane.go), once started

	dropped   atomic.Uint64
	delivered atomic.Uint64
}

type tidKey struct {
	port *nodePort
	tid  uint64
}

// Node is one node of a fabric: a CA, a switch or a router. Its accessors
// return what never changes; the state the SM sets is read through Query.
type Node struct {
	f        *Fabric
	name     string
	desc     string
	typ      uint8
	guid     uint64
	sysGUID  uint64
	vendor   uint32
	device   uint16
	ports    []*nodePort // ports[0] is a switch's management port; nil on a CA
	sw       *switchState
	esp0     bool
	topoNode *TopoNode
}

// Name returns the node's name in the topology, such as "Hca1".
func (n *Node) Name() string { return n.name }

// Type returns the node type, mad.NodeTypeCA, NodeTypeSwitch or
// NodeTypeRouter.
func (n *Node) Type() uint8 { return n.typ }

// GUID returns the node GUID.
func (n *Node) GUID() uint64 { return n.guid }

// NumPorts returns the number of physical ports.
func (n *Node) NumPorts() int { return len(n.ports) - 1 }

// PortGUID returns the GUID of port (a switch's ports all have the node
// GUID; a CA's port i has GUID+i), or 0 if there is no such port.
func (n *Node) PortGUID(port int) uint64 {
	if port < 0 || port >= len(n.ports) || n.ports[port] == nil {
		return 0
	}
	return n.ports[port].guid
}

func (n *Node) isSwitch() bool { return n.typ == mad.NodeTypeSwitch }

// port returns the node's port num, or nil.
func (n *Node) port(num int) *nodePort {
	if num < 0 || num >= len(n.ports) {
		return nil
	}
	return n.ports[num]
}

// smaPort returns the port whose LID addresses the node's SMA when a packet
// arrives on in: port 0 of a switch, the arrival port of a CA.
func (n *Node) smaPort(in *nodePort) *nodePort {
	if n.isSwitch() {
		return n.ports[0]
	}
	return in
}

type switchState struct {
	info       mad.SwitchInfo
	lft        []uint8
	mft        [][]uint16 // [mlid-0xC000][position]
	portChange bool
}

// nodePort is one port of a node. Its state (PortInfo and the tables) is
// guarded by the fabric's lock. The data plane will give each port a
// fabric/vl link.
type nodePort struct {
	node   *Node
	num    int
	guid   uint64
	remote *nodePort // the port at the other end of the link, nil if none

	pi         mad.PortInfo // the writable fields and the state; Get fills the rest
	extEnabled uint8        // extended speeds the topology enables
	// leaseStart is when the M_Key lease period started running (at an
	// M_Key violation); zero when it does not run.
	leaseStart time.Time
	pkeys      []uint16
	guids      [guidCap]uint64
	sl2vl      [][mad.SLToVLTableSize]byte // CA: [0]; switch: [in port]
	vlLow      [64]mad.VLArbEntry
	vlHigh     [64]mad.VLArbEntry
	cnt        counters
	dp         *dataPort // the data plane's state (dataplane.go), once started

	clients []*Client
}

// counters are a port's performance counters, kept wide; PortCounters
// saturates them.
type counters struct {
	xmitData, rcvData, xmitPkts, rcvPkts uint64
	rcvErrors, switchRelayErrors         uint64
	xmitDiscards, vl15Dropped            uint64
	linkDowned                           uint64
	// Moved by the data plane (dataplane.go).
	xmitWait, rcvConstraintErrors, xmitConstraintErrors uint64
	mcastXmitPkts, mcastRcvPkts                         uint64
}

func (p *nodePort) lidRange(lid uint16) bool {
	base := p.pi.LID
	return base != 0 && lid >= base && uint32(lid) < uint32(base)+1<<p.pi.LMC
}

func (p *nodePort) physUp() bool { return p.pi.PortPhysicalState == mad.PhysStateLinkUp }

// New builds a fabric from a topology and starts it: every connected port
// comes up LinkUp in state INIT, unconnected ports are DOWN (Polling), a
// switch's port 0 is ACTIVE; no LIDs are set and the LFTs route nothing
// until an SM programs them (LIDs the topology gives are set, as ibsim
// does).
func New(t *Topology, opts *Options) (*Fabric, error) {
	if t == nil || len(t.Nodes) == 0 {
		return nil, fmt.Errorf("%w: empty topology", ErrTopology)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.QueueLen <= 0 {
		o.QueueLen = queueLen
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &Fabric{
		topo:     t,
		byName:   make(map[string]*Node),
		byGUID:   make(map[uint64]*Node),
		log:      o.Logger,
		now:      o.Now,
		linkRate: max(o.LinkRate, 0),
		queue:    make(chan job, o.QueueLen),
		done:     make(chan struct{}),
		tidOwner: make(map[tidKey]*Client),
	}
	for _, tn := range t.Nodes {
		n := f.newNode(tn)
		if _, dup := f.byName[n.name]; dup {
			return nil, fmt.Errorf("%w: node %q twice", ErrTopology, n.name)
		}
		f.nodes = append(f.nodes, n)
		f.byName[n.name] = n
		f.byGUID[n.guid] = n
	}
	for _, n := range f.nodes {
		for i, tp := range n.topoNode.Ports {
			if i == 0 || tp.Remote == "" {
				continue
			}
			r := f.byName[tp.Remote]
			if r == nil || r.port(tp.RemotePort) == nil {
				return nil, fmt.Errorf("%w: %q port %d: no remote %q port %d", ErrTopology, n.name, i, tp.Remote, tp.RemotePort)
			}
			n.ports[i].remote = r.ports[tp.RemotePort]
		}
	}
	for _, n := range f.nodes {
		for _, p := range n.ports {
			if p != nil && p.remote != nil {
				if p.remote.remote != p {
					return nil, fmt.Errorf("%w: %q port %d: link not symmetric", ErrTopology, n.name, p.num)
				}
				f.linkUp(p)
				if n.sw != nil {
					// Ports came up: the SM's first sweep sees the change.
					n.sw.portChange = true
				}
			}
		}
	}
	f.wg.Add(1)
	go f.run()
	return f, nil
}

func (f *Fabric) newNode(tn *TopoNode) *Node {
	n := &Node{
		f: f, name: tn.ID, desc: tn.Desc, typ: tn.Type, guid: tn.GUID, sysGUID: tn.SysGUID,
		vendor: tn.VendorID, device: tn.DeviceID, esp0: tn.ESP0 > 0, topoNode: tn,
	}
	n.ports = make([]*nodePort, len(tn.Ports))
	if n.isSwitch() {
		n.sw = &switchState{
			info: mad.SwitchInfo{
				LinearFDBCap:                   linearFDBCap,
				MulticastFDBCap:                multicastFDBCap,
				DefaultPort:                    0,
				DefaultMulticastPrimaryPort:    0xFF,
				DefaultMulticastNotPrimaryPort: 0xFF,
				LifeTimeValue:                  0x10,
				LIDsPerPort:                    0,
				PartitionEnforcementCap:        pkeyCapSwitch,
				// The data plane enforces partitions and filters raw
				// packets (dataplane.go).
				InboundEnforcementCap: true, OutboundEnforcementCap: true,
				FilterRawInboundCap: true, FilterRawOutboundCap: true,
				EnhancedPort0: n.esp0,
			},
			lft: make([]uint8, linearFDBCap),
			mft: make([][]uint16, multicastFDBCap),
		}
		for i := range n.sw.lft {
			n.sw.lft[i] = mad.LinearFTNoRoute
		}
	}
	for i := range n.ports {
		if i == 0 && !n.isSwitch() {
			continue
		}
		p := &nodePort{node: n, num: i, guid: n.guid}
		if !n.isSwitch() {
			p.guid = n.guid + uint64(i)
		}
		p.guids[0] = p.guid
		tp := tn.Ports[i]
		p.extEnabled = tp.ExtSpeedEnabled
		p.pi = mad.PortInfo{
			GIDPrefix:            0xfe80000000000000,
			LocalPortNum:         uint8(i),
			LinkWidthEnabled:     tp.WidthEnabled,
			LinkWidthSupported:   mad.LinkWidth1X | mad.LinkWidth2X | mad.LinkWidth4X | mad.LinkWidth8X | mad.LinkWidth12X,
			LinkWidthActive:      mad.LinkWidth4X,
			LinkSpeedSupported:   mad.LinkSpeedSDR | mad.LinkSpeedDDR | mad.LinkSpeedQDR,
			LinkSpeedEnabled:     tp.SpeedEnabled,
			LinkSpeedActive:      mad.LinkSpeedSDR,
			PortState:            mad.PortStateDown,
			PortPhysicalState:    mad.PhysStatePolling,
			LinkDownDefaultState: mad.PhysStatePolling,
			NeighborMTU:          mad.MTU4096,
			MTUCap:               mad.MTU4096,
			VLCap:                4, // VL0-7
			OperationalVLs:       4,
			VLArbitrationHighCap: 8,
			VLArbitrationLowCap:  8,
			GUIDCap:              guidCap,
			HOQLife:              0x10,
			SubnetTimeOut:        0x12,
			RespTimeValue:        0x08,
			LID:                  tp.LID,
			LMC:                  tp.LMC,
		}
		switch {
		case n.isSwitch() && i == 0:
			p.pi.GUIDCap = 1 // a switch has one GUID, its port 0's
			p.pi.LID, p.pi.LMC = tn.LID, tn.LMC
			p.pi.PortState, p.pi.PortPhysicalState = mad.PortStateActive, mad.PhysStateLinkUp
			p.pi.CapabilityMask = mad.PortCapIsTrapSupported | mad.PortCapIsSLMappingSupported |
				mad.PortCapIsSystemImageGUIDSupported | mad.PortCapIsCapabilityMaskNotice
			p.pkeys = make([]uint16, pkeyCapCA)
		case n.isSwitch():
			// An external port has no GUID table and no GID prefix of
			// its own (the fields are reserved): 0, as switches and
			// ibsim report them.
			p.pi.GUIDCap, p.pi.GIDPrefix = 0, 0
			p.pkeys = make([]uint16, pkeyCapSwitch)
		default:
			p.pi.CapabilityMask = mad.PortCapIsTrapSupported | mad.PortCapIsSLMappingSupported |
				mad.PortCapIsSystemImageGUIDSupported | mad.PortCapIsCMSupported | mad.PortCapIsCapabilityMaskNotice
			p.pkeys = make([]uint16, pkeyCapCA)
		}
		p.pkeys[0] = 0xFFFF
		tables := 1
		if n.isSwitch() {
			tables = len(n.ports)
		}
		p.sl2vl = make([][mad.SLToVLTableSize]byte, tables)
		for t := range p.sl2vl {
			// SL i to VL i (mod 8), SL15 to VL7... as ibsim's default.
			p.sl2vl[t] = [8]byte{0x01, 0x23, 0x45, 0x67, 0x01, 0x23, 0x45, 0x67}
		}
		for v := range 8 {
			p.vlLow[v] = mad.VLArbEntry{VL: uint8(v), Weight: 4}
		}
		p.vlHigh[0] = mad.VLArbEntry{VL: 0, Weight: 4}
		n.ports[i] = p
	}
	return n
}

// linkUp brings p's link up: both ends LinkUp and INIT, width and speed
// the best both enable.
func (f *Fabric) linkUp(p *nodePort) {
	r := p.remote
	for _, q := range []*nodePort{p, r} {
		q.pi.PortPhysicalState = mad.PhysStateLinkUp
		q.pi.PortState = mad.PortStateInit
	}
	w := bestBit(p.pi.LinkWidthEnabled&r.pi.LinkWidthEnabled, []uint8{mad.LinkWidth12X, mad.LinkWidth8X, mad.LinkWidth4X, mad.LinkWidth2X, mad.LinkWidth1X})
	s := bestBit(p.pi.LinkSpeedEnabled&r.pi.LinkSpeedEnabled, []uint8{mad.LinkSpeedQDR, mad.LinkSpeedDDR, mad.LinkSpeedSDR})
	if w == 0 {
		w = mad.LinkWidth1X
	}
	if s == 0 {
		s = mad.LinkSpeedSDR
	}
	p.pi.LinkWidthActive, r.pi.LinkWidthActive = w, w
	p.pi.LinkSpeedActive, r.pi.LinkSpeedActive = s, s
	// Extended speeds (FDR 1, EDR 2, HDR 4, NDR 8) show only on a link
	// both ends enable one of, as in ibsim.
	e := bestBit(p.extEnabled&r.extEnabled, []uint8{8, 4, 2, 1})
	for _, q := range []*nodePort{p, r} {
		q.pi.LinkSpeedExtActive = e
		q.pi.LinkSpeedExtEnabled, q.pi.LinkSpeedExtSupported = 0, 0
		if e != 0 {
			q.pi.LinkSpeedExtEnabled, q.pi.LinkSpeedExtSupported = q.extEnabled, 15
		}
	}
}

func bestBit(mask uint8, order []uint8) uint8 {
	for _, b := range order {
		if mask&b != 0 {
			return b
		}
	}
	return 0
}

// Close stops the fabric's goroutine; clients get nothing more and Send
// fails with ErrClosed.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.closed = true
	close(f.done)
	f.mu.Unlock()
	f.wg.Wait()
	f.stopDataPlane()
	return nil
}

// Nodes returns the nodes in topology order.
func (f *Fabric) Nodes() []*Node { return append([]*Node(nil), f.nodes...) }

// NodeByName returns the node the topology names s, or nil.
func (f *Fabric) NodeByName(s string) *Node { return f.byName[s] }

// NodeByGUID returns the node whose node GUID is g, or nil.
func (f *Fabric) NodeByGUID(g uint64) *Node { return f.byGUID[g] }

// Stats counts the fabric's datagrams: delivered to clients, and dropped
// (no route, a link down, a bad directed route, an M_Key violation, no
// one to take it).
type Stats struct {
	Delivered, Dropped uint64
}

// Stats returns the fabric's counts so far.
func (f *Fabric) Stats() Stats {
	return Stats{Delivered: f.delivered.Load(), Dropped: f.dropped.Load()}
}

func (f *Fabric) checkNode(n *Node) error {
	if n == nil || n.f != f {
		return ErrNoNode
	}
	return nil
}

// Query runs the node's SMA for a Get of attr with modifier mod as if the
// node itself asked (arriving on port 1 of a CA, port 0 of a switch, or
// the port a PortInfo modifier names), and returns the 64 bytes of
// attribute data. An attribute the SMA refuses gives an error wrapping
// ErrAttribute with the MAD status.
func (f *Fabric) Query(n *Node, attr mad.AttributeID, mod uint32) ([]byte, error) {
	if err := f.checkNode(n); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	in := n.ports[0]
	if !n.isSwitch() {
		in = n.ports[1]
		if attr == mad.SMAttrPortInfo && mod >= 1 && int(mod) < len(n.ports) {
			in = n.ports[mod]
		}
	}
	data := make([]byte, mad.SMPDataSize)
	var traps []job
	st := f.smaAttr(in, mad.MethodGet, attr, mod, data, &traps)
	if st != mad.StatusOK {
		return nil, fmt.Errorf("%w: %s modifier %#x: status %#x", ErrAttribute, mad.AttrName(mad.ClassSubnLID, attr), mod, st)
	}
	return data, nil
}

// SetIsSM sets or clears the IsSM capability bit of port's PortInfo (a CA
// port, or port 0 of a switch). A change sends trap 144 to the port's SM,
// once the port has a LID and an SM LID.
func (f *Fabric) SetIsSM(n *Node, port int, on bool) error {
	if err := f.checkNode(n); err != nil {
		return err
	}
	p, err := clientPort(n, port)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	old := p.pi.CapabilityMask
	if on {
		p.pi.CapabilityMask |= mad.PortCapIsSM
	} else {
		p.pi.CapabilityMask &^= mad.PortCapIsSM
	}
	if p.pi.CapabilityMask != old {
		var traps []job
		f.capabilityChanged(p, &traps)
		f.queueTraps(traps)
		f.kickDataPlane()
	}
	return nil
}

// queueTraps hands traps raised outside the fabric's goroutine to it; a
// trap that finds the queue full is dropped and counted. It runs under
// f.mu.
func (f *Fabric) queueTraps(traps []job) {
	for _, j := range traps {
		select {
		case f.queue <- j:
		default:
			f.dropped.Add(1)
		}
	}
}

// SetLink takes the link at port of n down (both ends DOWN, Polling) or
// brings it up again (both ends LinkUp, INIT), as pulling and plugging a
// cable would; switches with a port on the link set PortStateChange and
// send trap 128 to their SM LID. It fails with ErrNoPort if the port has no
// link in the topology.
func (f *Fabric) SetLink(n *Node, port int, up bool) error {
	if err := f.checkNode(n); err != nil {
		return err
	}
	p := n.port(port)
	if p == nil || p.remote == nil {
		return fmt.Errorf("%w: %s port %d has no link", ErrNoPort, n.name, port)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if up == p.physUp() {
		return nil
	}
	if up {
		f.linkUp(p)
	} else {
		for _, q := range []*nodePort{p, p.remote} {
			q.pi.PortPhysicalState = mad.PhysStatePolling
			q.pi.PortState = mad.PortStateDown
			q.cnt.linkDowned++
		}
	}
	var traps []job
	f.portChanged(p, &traps)
	f.portChanged(p.remote, &traps)
	f.queueTraps(traps)
	f.kickDataPlane()
	return nil
}

// clientPort returns the port a client may attach to: a CA's port, or a
// switch's port 0.
func clientPort(n *Node, port int) (*nodePort, error) {
	p := n.port(port)
	if p == nil || (n.isSwitch() && port != 0) {
		return nil, fmt.Errorf("%w: %s port %d (clients attach to a CA port or a switch's port 0)", ErrNoPort, n.name, port)
	}
	return p, nil
}

// Datagram is a MAD with the addressing it travels with, as a client sends
// it and as the fabric delivers it.
type Datagram struct {
	SLID, DLID uint16 // DR SMPs: as sent (DLID permissive)
	SQP, DQP   uint32 // 0 or 1 for management
	SL         uint8
	PKey       uint16
	QKey       uint32
	Status     int    // 0, or StatusTimeout for a request the fabric could not deliver
	MAD        []byte // 256 bytes
}

// Client is a management client attached at a port: an SM, a diag.
type Client struct {
	f       *Fabric
	port    *nodePort
	deliver func(*Datagram)
	closed  atomic.Bool
}

// Attach attaches a management client at port of n (a CA port, or port 0
// of a switch). The fabric calls deliver, from its own goroutine, with
// every MAD that arrives for that port's QP0 or QP1 and that the node's
// agents (SMA, PMA) do not consume: responses to the client's requests (to
// the client that sent the request, when several share the port), traps,
// SMInfo if the port is an SM's (SetIsSM), and other requests (to every
// client of the port), and StatusTimeout
// reports of its requests that were dropped; at a CA port, also the GSI
// MADs HCAs send to it on the data plane that the clients serve (see the
// package documentation). deliver must not block long,
// and must not call Fabric.Close (which waits for the goroutine calling
// it); it may call Send, Query and Client.Close.
func (f *Fabric) Attach(n *Node, port int, deliver func(*Datagram)) (*Client, error) {
	if err := f.checkNode(n); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, fmt.Errorf("fabric: Attach with a nil deliver function")
	}
	p, err := clientPort(n, port)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	c := &Client{f: f, port: p, deliver: deliver}
	p.clients = append(p.clients, c)
	return c, nil
}

// Send sends d from the client's port: directed-route SMPs along their
// path, LID-routed MADs by the switches' LFTs (on the data plane, from a CA
// port, when they answer an HCA's request that came that way or are for an
// HCA's GSI). The fabric copies d; the
// result arrives later through deliver. It fails with ErrBadMAD if d.MAD is
// not one MAD, ErrBusy if the fabric's queue is full, ErrClosed after
// Close.
func (c *Client) Send(d *Datagram) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if d == nil || len(d.MAD) != mad.Size {
		return fmt.Errorf("%w: want %d bytes", ErrBadMAD, mad.Size)
	}
	if d.MAD[0] != mad.BaseVersion {
		return fmt.Errorf("%w: base version %d", ErrBadMAD, d.MAD[0])
	}
	cp := *d
	cp.MAD = append([]byte(nil), d.MAD...)
	cp.Status = 0
	select {
	case <-c.f.done:
		return ErrClosed
	default:
	}
	select {
	case c.f.queue <- job{d: &cp, src: c.port, from: c}:
		return nil
	case <-c.f.done:
		return ErrClosed
	default:
		return ErrBusy
	}
}

// Close detaches the client: nothing more is delivered to it.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return ErrClosed
	}
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	p := c.port
	for i, x := range p.clients {
		if x == c {
			p.clients = append(p.clients[:i:i], p.clients[i+1:]...)
			break
		}
	}
	for k, v := range f.tidOwner {
		if v == c {
			delete(f.tidOwner, k)
		}
	}
	return nil
}

// job is one datagram for the fabric's goroutine: sent by a client (from)
// at src, or a trap a node sends (from nil).
type job struct {
	d    *Datagram
	src  *nodePort
	from *Client
}

// delivery is one datagram for one client.
type delivery struct {
	c *Client
	d *Datagram
}

func (f *Fabric) run() {
	defer f.wg.Done()
	var out []delivery
	for {
		select {
		case <-f.done:
			return
		case j := <-f.queue:
			out = out[:0]
			f.mu.Lock()
			pending := []job{j}
			for len(pending) > 0 {
				j := pending[0]
				pending = pending[1:]
				f.carry(j, &out, &pending)
			}
			f.kickDataPlane()
			f.mu.Unlock()
			for _, d := range out {
				if !d.c.closed.Load() {
					f.delivered.Add(1)
					d.c.deliver(d.d)
				}
			}
		}
	}
}
