// The CM object (the set of devices rdma_cm works over), IDs, address and
// route resolution, port allocation.

package rdmacm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// PortSpace is an rdma_cm port space.
type PortSpace = mad.PortSpace

// Port spaces: TCP gives RC connections, UDP unconnected UD QPs resolved
// with SIDR.
const (
	PortSpaceTCP = mad.PortSpaceTCP
	PortSpaceUDP = mad.PortSpaceUDP
)

// Options configure a CM.
type Options struct {
	// CM configures each device's connection manager (clock, timeouts).
	CM cm.Options
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// CM is rdma_cm over a set of devices: it runs a cm.Manager on each and
// owns the port spaces.
type CM struct {
	devs []*devEntry
	log  *slog.Logger

	mu     sync.Mutex
	closed bool
	ports  map[portKey]*ID
}

type devEntry struct {
	dev *verbs.Device
	mgr *cm.Manager
	mc  ibMembers // the port's SA multicast memberships (ibmcast.go)
}

type portKey struct {
	ps   PortSpace
	port uint16
}

// New starts rdma_cm on devs. The devices stay the caller's; Close stops
// the connection managers but does not close them.
func New(devs []*verbs.Device, opts *Options) (*CM, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(devs) == 0 {
		return nil, errf(ErrInvalid, "no devices")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CM.Logger == nil {
		o.CM.Logger = o.Logger
	}
	s := &CM{log: o.Logger, ports: map[portKey]*ID{}}
	for _, d := range devs {
		m, err := cm.New(d, &o.CM)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.devs = append(s.devs, &devEntry{dev: d, mgr: m})
	}
	return s, nil
}

// devices returns the devices the CM runs on.
func (s *CM) devices() []*verbs.Device {
	out := make([]*verbs.Device, len(s.devs))
	for i, e := range s.devs {
		out[i] = e.dev
	}
	return out
}

// managers returns the connection managers, one per device.
func (s *CM) managers() []*cm.Manager {
	out := make([]*cm.Manager, len(s.devs))
	for i, e := range s.devs {
		out[i] = e.mgr
	}
	return out
}

// Close stops every connection manager. IDs still open stop working.
func (s *CM) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errf(ErrClosed, "CM")
	}
	s.closed = true
	s.mu.Unlock()
	for _, e := range s.devs {
		e.mgr.Close()
	}
	return nil
}

// findGID returns the device and GID index owning address a.
func (s *CM) findGID(a netip.Addr) (*devEntry, int) {
	g := wire.GIDFromAddr(a.Unmap().WithZone(""))
	for _, e := range s.devs {
		if i := e.dev.GIDIndex(g); i >= 0 {
			return e, i
		}
	}
	return nil, -1
}

// selectSource picks the source address for dst: the one the kernel would
// use if a device has it, else the first device address of the same family.
func (s *CM) selectSource(dst netip.Addr) (*devEntry, int, netip.Addr) {
	if c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9))); err == nil {
		la := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
		if e, i := s.findGID(la); e != nil {
			return e, i, la
		}
	}
	for _, e := range s.devs {
		for i, g := range e.dev.GIDs() {
			if a := g.Addr(); a.Is4() == dst.Is4() && !a.IsLinkLocalUnicast() {
				return e, i, a
			}
		}
	}
	return nil, -1, netip.Addr{}
}

// allocPortLocked binds id to port in its port space, or to a free
// ephemeral port if port is 0.
func (s *CM) allocPortLocked(id *ID, port uint16) (uint16, error) {
	if port != 0 {
		k := portKey{id.ps, port}
		if o := s.ports[k]; o != nil && o != id {
			return 0, errf(ErrAddrInUse, "%v port %d", id.ps, port)
		}
		s.ports[k] = id
		return port, nil
	}
	var b [2]byte
	_, _ = rand.Read(b[:])
	const lo, n = 32768, 61000 - 32768
	start := int(binary.BigEndian.Uint16(b[:])) % n
	for i := 0; i < n; i++ {
		p := uint16(lo + (start+i)%n)
		k := portKey{id.ps, p}
		if s.ports[k] == nil {
			s.ports[k] = id
			return p, nil
		}
	}
	return 0, errf(ErrAddrInUse, "no free %v port", id.ps)
}

func (s *CM) releasePort(id *ID, port uint16) {
	if port == 0 {
		return
	}
	s.mu.Lock()
	if k := (portKey{id.ps, port}); s.ports[k] == id {
		delete(s.ports, k)
	}
	s.mu.Unlock()
}

// idState is where an ID is in its life.
type idState int

const (
	idIdle idState = iota
	idAddrResolved
	idRouteResolved
	idListen
	idConnect     // REQ or SIDR_REQ sent
	idConnRequest // passive, waiting for Accept or Reject
	idAccepting   // passive, REP sent
	idRepReceived // active without QP: waiting for Establish
	idEstablished
	idDisconnected
	idDestroyed
)

// ID is an rdma_cm identifier (struct rdma_cm_id): an endpoint that
// resolves, listens or connects.
type ID struct {
	s *CM
	// chMu guards ch, which MigrateID changes, and orders each post with
	// a migration. Lock order: mu, chMu, then a channel's mu.
	chMu sync.Mutex
	ch   *EventChannel
	sync bool // no event channel given: calls block
	ps   PortSpace
	// Context is free for the application's use.
	Context any

	mu        sync.Mutex
	state     idState
	dev       *devEntry
	sgid      int
	src, dst  netip.AddrPort
	bound     bool
	qp        *verbs.QP
	conn      *cm.Conn
	listeners []*cm.Listener
	backlog   int
	pending   int
	parent    *ID
	psn       wire.PSN
	param     ConnParam // ours, from Connect/Accept
	req       *mad.REQFields
	rep       *mad.REPFields // active: the peer's REP
	peerUD    UDParam
	sidrConn  bool
	dreqSent  bool                    // Disconnect sent a DREQ whose EventDisconnected is due
	requests  *EventChannel           // sync listener: CONNECT_REQUEST queue
	mcast     map[netip.Addr]bool     // joined groups (multicast.go); true: the QP is attached
	ibMcast   map[netip.Addr]*ibGroup // of those, the ones joined through the SA (ibmcast.go)
	tos       uint8                   // SetTOS: the traffic class of the connections it initiates
	ackTO     uint8                   // SetACKTimeout: the local ACK timeout of its QP
	ackTOSet  bool
	alt       *cm.Path // SetAltPath: the alternate path of the connection it initiates
	route     *cm.Path // InfiniBand: the SA's path to dst (ResolveRoute, ib.go)
	// LoadAltPath in progress: where its result goes, and the path and
	// ACK timeout it proposed.
	lapDone    chan error
	lapPath    cm.Path
	lapTimeout uint8
}

// CreateID creates an ID in port space ps (rdma_create_id). With a nil
// channel the ID is synchronous: ResolveAddr, ResolveRoute, Connect and
// Accept block until done and incoming connections are taken with
// GetRequest.
func (s *CM) CreateID(ch *EventChannel, ps PortSpace, ctx any) (*ID, error) {
	if ps != PortSpaceTCP && ps != PortSpaceUDP {
		return nil, errf(ErrInvalid, "port space %v", ps)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errf(ErrClosed, "CM")
	}
	id := &ID{s: s, ch: ch, ps: ps, Context: ctx}
	if ch == nil {
		id.sync = true
		id.ch = NewEventChannel()
	}
	return id, nil
}

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QP returns the ID's queue pair, if it has one.
func (id *ID) QP() *verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

// Device returns the device the ID is bound to (nil before binding).
func (id *ID) Device() *verbs.Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil {
		return nil
	}
	return id.dev.dev
}

// LocalAddr returns the local address and port (rdma_get_local_addr).
func (id *ID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.src
}

// PeerAddr returns the peer's address and port (rdma_get_peer_addr).
func (id *ID) PeerAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dst
}

// SGIDIndex returns the index of the source GID in the device's table.
func (id *ID) SGIDIndex() int {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.sgid
}

func (id *ID) post(ev *Event) {
	ev.ID = id
	id.chMu.Lock()
	ch := id.ch
	queued := ch.enqueue(ev)
	id.chMu.Unlock()
	if !queued {
		ch.post(ev) // a channel with a handler (Dial's, Listen's): never migrated
	}
}

// waitFor waits, on a synchronous ID, for the event that ends a call.
func (id *ID) waitFor(ctx context.Context, want EventType) (*Event, error) {
	for {
		ev, err := id.ch.Get(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type == want {
			return ev, nil
		}
		if ev.Type == EventTimewaitExit {
			continue
		}
		return ev, &ErrEvent{Event: ev, Want: want}
	}
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address binds to every device (for Listen); port 0 picks a
// free port.
func (id *ID) BindAddr(a netip.AddrPort) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != idIdle || id.bound {
		return errf(ErrState, "ID already bound")
	}
	return id.bindLocked(a)
}

func (id *ID) bindLocked(a netip.AddrPort) error {
	ip := a.Addr().Unmap()
	if ip.IsValid() && !ip.IsUnspecified() {
		e, i := id.s.findGID(ip)
		if e == nil {
			return errf(ErrNoDevice, "%v", ip)
		}
		id.dev, id.sgid = e, i
	}
	s := id.s
	s.mu.Lock()
	port, err := s.allocPortLocked(id, a.Port())
	s.mu.Unlock()
	if err != nil {
		return err
	}
	id.src = netip.AddrPortFrom(ip, port)
	id.bound = true
	return nil
}

// ResolveAddr resolves dst (and src, if given) to a device and source GID
// (rdma_resolve_addr), binding the ID to an ephemeral port if it is not
// bound. RoCE needs no address resolution beyond that, so the result is
// immediate: EventAddrResolved, or EventAddrError if no device has a
// usable address.
func (id *ID) ResolveAddr(ctx context.Context, src netip.Addr, dst netip.AddrPort) error {
	ev := id.resolveAddr(src, dst)
	if !id.sync {
		id.post(ev)
		return nil
	}
	id.post(ev)
	_, err := id.waitFor(ctx, EventAddrResolved)
	return err
}

func (id *ID) resolveAddr(src netip.Addr, dst netip.AddrPort) *Event {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != idIdle {
		return &Event{Type: EventAddrError, Status: StatusInvalid}
	}
	d := dst.Addr().Unmap()
	if !d.IsValid() || d.IsUnspecified() {
		return &Event{Type: EventAddrError, Status: StatusInvalid}
	}
	var e *devEntry
	var sgid int
	switch {
	case src.IsValid() && !src.IsUnspecified():
		e, sgid = id.s.findGID(src)
	case id.dev != nil:
		e, sgid = id.dev, id.sgid
		src = id.src.Addr()
	default:
		if e, sgid, src = id.s.selectIB(d); e == nil { // ib.go
			e, sgid, src = id.s.selectSource(d)
		}
	}
	if e == nil {
		return &Event{Type: EventAddrError, Status: StatusAddrNotAvail}
	}
	if src.Unmap().Is4() != d.Is4() {
		return &Event{Type: EventAddrError, Status: StatusAddrNotAvail}
	}
	if !id.bound {
		if err := id.bindLocked(netip.AddrPortFrom(src.Unmap(), 0)); err != nil {
			return &Event{Type: EventAddrError, Status: StatusAddrNotAvail}
		}
	}
	id.dev, id.sgid = e, sgid
	id.src = netip.AddrPortFrom(src.Unmap(), id.src.Port())
	id.dst = netip.AddrPortFrom(d, dst.Port())
	id.state = idAddrResolved
	return &Event{Type: EventAddrResolved}
}

// ResolveRoute resolves the path to the peer (rdma_resolve_route). On
// RoCEv2 the route is the IP route: the ID's source GID, the peer's GID and
// the default hop limit. EventRouteResolved follows.
func (id *ID) ResolveRoute(ctx context.Context) error {
	id.mu.Lock()
	if e := id.dev; id.state == idAddrResolved && e != nil && e.isIB() {
		sgid, dst := id.sgid, id.dst.Addr()
		id.mu.Unlock()
		if !id.sync {
			go func() { id.post(id.resolveIBRoute(ctx, e, sgid, dst)) }()
			return nil
		}
		id.post(id.resolveIBRoute(ctx, e, sgid, dst))
		_, err := id.waitFor(ctx, EventRouteResolved)
		return err
	}
	ev := &Event{Type: EventRouteResolved}
	if id.state != idAddrResolved {
		ev = &Event{Type: EventRouteError, Status: StatusInvalid}
	} else {
		id.state = idRouteResolved
	}
	id.mu.Unlock()
	id.post(ev)
	if !id.sync {
		return nil
	}
	_, err := id.waitFor(ctx, EventRouteResolved)
	return err
}

// pathLocked is the path of a connection the ID initiates, with the flow
// label Linux's rdma_cm gives it (from the two rdma_cm ports), which the
// REQ carries to the peer: both QPs send from the UDP source port it gives.
// Its traffic class is the ID's type of service (SetTOS), which the REQ
// carries too.
func (id *ID) pathLocked() cm.Path {
	if id.route != nil {
		p := *id.route
		if id.tos != 0 {
			p.TrafficClass = id.tos
		}
		return p
	}
	return cm.Path{SGIDIndex: id.sgid, DGID: wire.GIDFromAddr(id.dst.Addr()), HopLimit: 64,
		FlowLabel: mad.RoCEFlowLabel(id.src.Port(), id.dst.Port()), TrafficClass: id.tos}
}

func (id *ID) serviceID(port uint16) uint64 { return mad.ServiceID(id.ps, port) }

func randomPSN() wire.PSN {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return wire.PSN(binary.BigEndian.Uint32(b[:]) & 0xFFFFFF)
}
