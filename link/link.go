// Package link moves transport packets (BTH through ICRC) between devices.
// A Link sends batches of packets to addresses and hands batches of received
// packets to a Handler. Links own the network framing, so they seal the ICRC
// of outgoing packets and check it on incoming ones, by a policy each link
// documents.
//
// Two link layers share this interface. On RoCEv2 a packet's address is a
// UDP endpoint (Packet.Src and Dst) and its IP traffic class (TClass). On
// InfiniBand a packet's address is a LID route (Packet.IB: DLID, SL, source
// path bits) and, when it is routed globally, a GRH whose GIDs are Src's and
// Dst's addresses (16-byte, port 0) and whose traffic class is TClass. A link
// that is an InfiniBand port says so by implementing InfiniBand, which gives
// its port attributes (LID, LMC, SM, state, MTU, P_Keys, GID prefix and port
// GUID) and tells of their changes; a device above it then shows an IB port.
// RoCE links ignore Packet.IB on send and leave it zero on receive.
//
// Implementations: link/udp (RoCEv2 over kernel UDP sockets, IPv4 and IPv6),
// link/loop (an in-process wire with seeded faults, for tests) and link/ib
// (an InfiniBand port over an ib.Port: a cable or a fabric's switch port).
package link

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// BufSize is the capacity of a packet buffer: the largest RoCEv2 packet of a
// 4096-byte path MTU (payload, the longest header chain, pad and ICRC), with
// room to spare.
const BufSize = 4096 + 128

// DefaultPort is the RoCEv2 UDP destination port.
const DefaultPort = 4791

// Packet is one transport packet and its addressing: UDP endpoints on
// RoCEv2, LIDs (and GIDs, if global) on InfiniBand.
type Packet struct {
	// Buf has capacity BufSize; Buf[:N] is the packet, BTH through ICRC.
	// A packet a link hands to a Handler may instead have a buffer of
	// exactly N bytes, a view of the link's receive buffers (see Handler);
	// Put leaves such a packet out of the pool.
	Buf []byte
	N   int
	// Src and Dst are the UDP endpoints. On send, Dst is the peer and Src.Addr
	// one of the link's local addresses (its port is ignored: the link fills
	// it). On receive both are set by the link.
	Src, Dst netip.AddrPort
	// TClass is the IP traffic class the packet leaves with: the IPv4 TOS
	// byte or the IPv6 Traffic Class (DSCP and ECN), which RoCEv2 takes
	// from the GRH's traffic class. Links that cannot see it on receive
	// leave it zero there. On InfiniBand it is the GRH's traffic class.
	TClass uint8
	// IB is the packet's InfiniBand addressing, for links that are IB
	// ports (InfiniBand); other links ignore it and leave it zero.
	IB IBAddr
	// Ext, if not nil, is part of the packet kept outside Buf: its payload,
	// read where it lies (registered memory) instead of copied into Buf.
	// The packet is then Buf[:ExtAt], Ext, Buf[ExtAt:N] (headers, payload,
	// pad and ICRC), Len bytes; Data is not its bytes. Only a link that
	// sends such packets (ExtSender) is given them, and only on send.
	Ext   []byte
	ExtAt int
}

// Len returns the packet's length: N, and Ext's bytes if any.
func (p *Packet) Len() int { return p.N + len(p.Ext) }

// ExtSender is a Link whose Send takes packets with a payload outside Buf
// (Packet.Ext) and sends them from where they are, as one datagram each,
// with no copy of its own; the kernel copies the payload into the socket
// buffer straight from there.
type ExtSender interface {
	SendsExt() bool
}

// IBAddr is the InfiniBand addressing of a packet: what an IB link writes
// into, or read from, the LRH and the GRH. When Global is set the GRH's
// source and destination GIDs are Packet.Src's and Dst's addresses (as
// 16-byte addresses; the ports are 0) and its traffic class Packet.TClass.
type IBAddr struct {
	// DLID is the destination LID (on receive, the LRH's).
	DLID uint16
	// SLID is the LRH's source LID on receive. On send the link fills it:
	// the port's LID with PathBits in its low LMC bits.
	SLID uint16
	// PathBits are, on send, the source path bits (IBTA's
	// src_path_bits); on receive, the DLID's bits below the port's LMC
	// (a work completion's dlid_path_bits).
	PathBits uint8
	// SL is the service level; the link maps it to a virtual lane.
	SL uint8
	// VL is the virtual lane a packet arrived on (set on receive; on send
	// the link chooses it from SL, or VL15 for QP0's packets).
	VL uint8
	// Global says the packet carries a GRH.
	Global bool
	// HopLimit and FlowLabel are the GRH's (with Global).
	HopLimit  uint8
	FlowLabel uint32
}

// InfiniBand is implemented by links that are InfiniBand ports: the device
// above shows link layer InfiniBand, takes its LID, port state and P_Key
// table from IBAttr and addresses packets by LID (Packet.IB). Such a link's
// Addrs are its GIDs (GIDPrefix:PortGUID first) as 16-byte addresses, and
// its Port is 0. It usually implements StateNotifier too, up meaning
// state Active.
type InfiniBand interface {
	// IBAttr returns the port's attributes as the subnet manager set them.
	IBAttr() IBAttr
	// NotifyIBAttr registers f to be called after each change of IBAttr,
	// replacing any earlier f (nil removes it). f is called without the
	// link's locks held and must not block.
	NotifyIBAttr(f func())
}

// IB port states (IBTA PortInfo PortState), as IBAttr.State holds them.
const (
	IBPortDown   = 1
	IBPortInit   = 2
	IBPortArmed  = 3
	IBPortActive = 4
)

// DefaultGIDPrefix is the link-local subnet prefix (fe80::/64) a port
// uses until the SM sets another.
const DefaultGIDPrefix = 0xFE80_0000_0000_0000

// IBAttr is an InfiniBand port's management state.
type IBAttr struct {
	LID, SMLID uint16
	LMC, SMSL  uint8
	State      uint8 // IBPortDown .. IBPortActive
	PhysState  uint8
	MTU        int // active MTU in bytes
	OperVLs    int
	GIDPrefix  uint64
	PortGUID   uint64
	PKeys      []uint16 // the P_Key table; index 0 first
}

// Data returns the packet bytes, Buf[:N].
func (p *Packet) Data() []byte { return p.Buf[:p.N] }

var pool = sync.Pool{New: func() any { return &Packet{Buf: make([]byte, BufSize)} }}

// Get returns an empty packet from the shared pool: no bytes, no
// endpoints and traffic class 0, whatever the packet carried when it was put back.
func Get() *Packet {
	p := pool.Get().(*Packet)
	p.N = 0
	p.Ext, p.ExtAt = nil, 0
	p.Src, p.Dst = netip.AddrPort{}, netip.AddrPort{}
	p.TClass = 0
	p.IB = IBAddr{}
	return p
}

// Clone returns a packet from the shared pool holding a copy of p: its
// bytes (Ext's too, in Buf), endpoints, traffic class and IB addressing.
func Clone(p *Packet) *Packet {
	q := Get()
	q.N = copy(q.Buf, p.Data())
	q.Ext, q.ExtAt = p.Ext, p.ExtAt
	q.Flatten()
	q.Src, q.Dst, q.TClass, q.IB = p.Src, p.Dst, p.TClass, p.IB
	return q
}

// Flatten moves a packet's Ext into Buf, between the headers and what
// follows them there, so that Data is the packet's bytes again. Buf must
// have room for Len bytes.
func (p *Packet) Flatten() {
	if p.Ext == nil {
		return
	}
	end := p.ExtAt + len(p.Ext)
	t := copy(p.Buf[end:], p.Buf[p.ExtAt:p.N]) // (copy moves overlapping bytes right)
	copy(p.Buf[p.ExtAt:], p.Ext)
	p.N = end + t
	p.Ext, p.ExtAt = nil, 0
}

// Put returns a packet to the shared pool. The caller must not use it again.
func Put(p *Packet) {
	if p == nil || cap(p.Buf) < BufSize {
		return
	}
	p.Buf = p.Buf[:BufSize]
	p.Ext = nil // no reference to registered memory from the pool
	pool.Put(p)
}

// Handler receives batches of packets from a link. It is called from the
// link's receive goroutine(s); the batch and its packets belong to the link
// and are valid only until Receive returns. A packet's buffer may end at N
// (a view of what one receive call took in, as link/udp's GRO receive
// makes them): a handler that needs room past N, or the packet after
// Receive returns, takes a Clone.
type Handler interface {
	Receive(batch []*Packet)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(batch []*Packet)

// Receive calls f(batch).
func (f HandlerFunc) Receive(batch []*Packet) { f(batch) }

// Link is a bidirectional packet transport for one device.
type Link interface {
	// Addrs returns the local IP addresses, in the order the device lists
	// them as GIDs.
	Addrs() []netip.Addr
	// Port returns the local UDP port packets are sent from and received on.
	Port() uint16
	// Send seals each packet's ICRC and transmits the batch. It does not
	// retain the packets; the caller may reuse them when Send returns. An
	// error reports packets that could not be handed to the network; RoCE
	// treats them as lost.
	Send(batch []*Packet) error
	// Start begins delivering received packets to h. It may be called once.
	Start(h Handler) error
	// Stats returns counters of the link's traffic and drops.
	Stats() Stats
	// Close stops the link; its goroutines have exited when Close returns.
	Close() error
}

// StateNotifier is implemented by links that know whether they can carry
// packets, as a NIC knows its carrier: a device shows it as its port state
// and raises port events when it changes. A link that does not implement it
// is always up.
type StateNotifier interface {
	// Up reports whether the link can carry packets now.
	Up() bool
	// NotifyState registers f to be called with the new state each time it
	// changes, replacing any earlier f (nil removes it). f is called from
	// whatever goroutine saw the change, without the link's locks held; it
	// must not block.
	NotifyState(f func(up bool))
}

// State is the up/down state of a link and the function told of its
// changes: the part of StateNotifier every link implements the same way.
// The zero State is up.
type State struct {
	down   atomic.Bool
	notify atomic.Pointer[func(up bool)]
}

// Up reports whether the state is up.
func (s *State) Up() bool { return !s.down.Load() }

// NotifyState registers f to be called by Notify (nil removes it).
func (s *State) NotifyState(f func(up bool)) {
	if f == nil {
		s.notify.Store(nil)
		return
	}
	s.notify.Store(&f)
}

// Set records the state and reports whether it changed.
func (s *State) Set(up bool) bool { return s.down.Swap(!up) != !up }

// Notify calls the registered function, if any, with up.
func (s *State) Notify(up bool) {
	if f := s.notify.Load(); f != nil {
		(*f)(up)
	}
}

// Stats counts a link's traffic.
type Stats struct {
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	TxErrors           uint64 // packets the network refused
	RxBadICRC          uint64 // dropped: ICRC mismatch
	RxMalformed        uint64 // dropped: too short or bad framing
	RxICRCUnchecked    uint64 // accepted without an ICRC check (see the link's policy)
	Dropped            uint64 // dropped by fault injection (loop only)
	// TxSourcePortFallback counts packets that asked for a source port
	// (Packet.Src's port) and left from the link's own port instead.
	TxSourcePortFallback uint64
	// RxICRCAnyID counts IPv4 packets whose ICRC verified only with an IP
	// Identification or Don't Fragment flag other than 0 and set, which a
	// UDP socket cannot see (link/udp's VerifyIPv4 policy).
	RxICRCAnyID uint64
	// TxIDMismatch counts read-backs of a connected socket's IPv4
	// Identification counter that found it other than predicted (link/udp
	// connects its source-port sockets; the ICRC covers the field).
	TxIDMismatch uint64
	// TxGSOBatches counts sends that carried several packets as one
	// segmented datagram (UDP GSO); TxPackets counts their packets.
	TxGSOBatches uint64
	// RxGROBatches counts receives that carried several packets coalesced
	// by the kernel (UDP GRO); RxPackets counts their packets.
	RxGROBatches uint64
	// TxCalls and RxCalls count the system calls (or other link
	// operations) that sent packets and that received them: packets per
	// call is what batching achieves.
	TxCalls, RxCalls uint64
	// InfiniBand links (link/ib) drop and count by reason what IBTA's
	// link and transport checks reject: a bad VCRC, a link version other
	// than 0, a DLID that is not the port's (by LMC) nor multicast, a
	// P_Key not in the port's table, a packet on VL15 that is not for QP0
	// or one for QP0 on another lane, and packets the port's state does not
	// let it receive (not Active or Armed, except on VL15). A bad ICRC
	// counts in RxBadICRC, other bad framing in RxMalformed. TxNotActive
	// counts packets not sent because the port was not Active (VL15
	// excepted).
	RxBadVCRC, RxBadLinkVersion, RxBadDLID, RxBadPKey uint64
	RxBadVL, RxPortState, TxNotActive                 uint64
}

// Counters is a set of atomic counters a link can embed and snapshot.
type Counters struct {
	TxPackets, TxBytes, RxPackets, RxBytes, TxErrors  atomic.Uint64
	RxBadICRC, RxMalformed, RxICRCUnchecked, Dropped  atomic.Uint64
	TxSourcePortFallback, TxGSOBatches, RxICRCAnyID   atomic.Uint64
	RxGROBatches, TxCalls, RxCalls                    atomic.Uint64
	RxBadVCRC, RxBadLinkVersion, RxBadDLID, RxBadPKey atomic.Uint64
	RxBadVL, RxPortState, TxNotActive                 atomic.Uint64
	TxIDMismatch                                      atomic.Uint64
}

// Snapshot returns the current values.
func (c *Counters) Snapshot() Stats {
	return Stats{
		TxPackets: c.TxPackets.Load(), TxBytes: c.TxBytes.Load(),
		RxPackets: c.RxPackets.Load(), RxBytes: c.RxBytes.Load(),
		TxErrors: c.TxErrors.Load(), RxBadICRC: c.RxBadICRC.Load(),
		RxMalformed: c.RxMalformed.Load(), RxICRCUnchecked: c.RxICRCUnchecked.Load(),
		Dropped: c.Dropped.Load(), TxSourcePortFallback: c.TxSourcePortFallback.Load(),
		TxGSOBatches: c.TxGSOBatches.Load(), RxICRCAnyID: c.RxICRCAnyID.Load(),
		RxGROBatches: c.RxGROBatches.Load(),
		TxCalls:      c.TxCalls.Load(), RxCalls: c.RxCalls.Load(),
		RxBadVCRC: c.RxBadVCRC.Load(), RxBadLinkVersion: c.RxBadLinkVersion.Load(),
		RxBadDLID: c.RxBadDLID.Load(), RxBadPKey: c.RxBadPKey.Load(),
		RxBadVL: c.RxBadVL.Load(), RxPortState: c.RxPortState.Load(),
		TxNotActive: c.TxNotActive.Load(), TxIDMismatch: c.TxIDMismatch.Load(),
	}
}

// Errors returned by links.
var (
	ErrClosed  = errors.New("link: closed")
	ErrStarted = errors.New("link: already started")
	ErrAddress = errors.New("link: address not usable")
	// ErrDown is returned by Send on a link that is down (StateNotifier).
	ErrDown = errors.New("link: down")
)

// Poller is a link that can receive on the caller's goroutine: Poll takes
// what the link holds now, without waiting, hands it to the Handler as the
// link's own receive path would, one batch at a time and in order with it,
// and returns how many packets it handed over. A busy-polling device calls
// it while its program waits for completions, so that packets are handled
// without waking another goroutine. It must not be called from the Handler.
type Poller interface {
	Poll() int
}

// Waiter is a Poller that can also wait: a goroutine about to sleep until
// packets come (a program waiting for a completion) receives them itself,
// woken by the kernel, instead of being woken by the link's receive
// goroutine after it has handled them. On a machine with few cores each
// hand-off between goroutines costs tens of microseconds; a round trip has
// several.
type Waiter interface {
	Poller
	// PollWait is Poll, except that when nothing is there it waits up to
	// timeout for packets, for Wake, or for ready to report true, and then
	// hands over what came. ready is called after the waiter is
	// registered, so a Wake meant for it is not missed; it must not block.
	// ok is false if the link could not wait for the caller (another
	// goroutine is receiving or waiting, or the link is closed or not
	// started): the caller then waits in its other way.
	PollWait(timeout time.Duration, ready func() bool) (n int, ok bool)
	// Wake ends a PollWait in progress early (it does nothing if none
	// is): for events that do not come as packets, such as a completion
	// made by a timer or another goroutine. Whoever makes such an event
	// makes it visible to ready before calling Wake.
	Wake()
}

// SourcePortReserver is a link that can prepare a UDP source port before
// packets ask for it (Packet.Src's port): a QP's port is known when it is
// connected, so the link can open what it needs then, on the caller's
// thread and off the data path.
type SourcePortReserver interface {
	ReserveSourcePort(src netip.Addr, port uint16)
}

// Multicaster is a link that can receive packets sent to IP multicast
// groups, as a NIC joins a multicast address on its interface. After
// JoinGroup(g), packets sent to g at the link's port are handed to the
// Handler like unicast ones, with Dst set to g and that port. A device
// counts the queue pairs attached to a group and joins it once; links do not
// count joins. Both methods are safe for concurrent use with Send and the
// receive path.
type Multicaster interface {
	// JoinGroup starts receiving packets sent to group, an IPv4 or IPv6
	// multicast address (IPv4-mapped is taken as IPv4) of the family of one
	// of the link's addresses. The error wraps ErrAddress if group is not
	// such an address or is already joined, ErrClosed if the link is
	// closed.
	JoinGroup(group netip.Addr) error
	// LeaveGroup stops receiving packets sent to group. The error wraps
	// ErrAddress if group is not joined.
	LeaveGroup(group netip.Addr) error
}

// CheckGroup returns group unmapped if it is a multicast address of the
// family of one of addrs, else an error wrapping ErrAddress: the argument
// check every Multicaster makes.
func CheckGroup(group netip.Addr, addrs []netip.Addr) (netip.Addr, error) {
	g := group.Unmap()
	if !g.IsValid() || !g.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("%w: %s is not a multicast address", ErrAddress, group)
	}
	for _, a := range addrs {
		if a.Unmap().Is4() == g.Is4() {
			return g.WithZone(""), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no local address of the family of %s", ErrAddress, group)
}
