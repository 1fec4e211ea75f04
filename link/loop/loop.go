// The Network: which attached Link owns which address and port, the seeded
// fault configuration, and the per-packet fault decisions every Send draws
// from it. Packets themselves flow through link.go.

// Package loop is an in-process RoCEv2 network for tests. Links attached to
// one Network exchange packets without sockets: Send seals each packet's ICRC
// (IPv4 Identification 0 and Don't Fragment, as link/udp sends), copies it
// into a pool packet and queues it on the destination link, whose delivery
// goroutine checks the ICRC and hands batches of up to MaxBatch packets to
// its Handler.
//
// On the way, the Network can lose, duplicate, reorder, corrupt and delay
// packets, or drop the ones a Filter picks. The decisions come from a PCG
// generator seeded with Config.Seed, so a single-sender test sees the same
// faults on every run. SetFaults changes them while links run.
//
// Where drops are counted: loss, Filter and an unknown destination count in
// the sending link's Stats.Dropped; a full destination queue counts in the
// receiving link's Stats.Dropped; a corrupted packet reaches the receiver and
// is dropped there as RxBadICRC. Network.Stats breaks the faults down.
package loop

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/link"
)

// MaxBatch is the largest batch a Link hands to its Handler.
const MaxBatch = 64

// DefaultQueueLen is the default bound on a link's receive queue.
const DefaultQueueLen = 4096

// DefaultReorderTimeout is how long a reordered packet waits for a later
// packet to overtake it when Faults.ReorderTimeout is zero.
const DefaultReorderTimeout = link.DefaultReorderTimeout

// Ephemeral port range Attach picks from when asked for port 0.
const (
	firstEphemeral = 49152
	lastEphemeral  = 65535
)

// Faults describes what the network does to packets: link.Faults, the
// model link/fault applies to any link. On a Network, a reordered packet is
// held until the next packet to the same destination link, a delayed one
// waits in the destination's holding queue, and Filter sees the network's
// sealed copy, with Src (including the sender's port) and Dst set.
type Faults = link.Faults

// Config configures a Network.
type Config struct {
	// Faults are the initial faults; SetFaults replaces them.
	Faults
	// Seed seeds the fault generator.
	Seed uint64
	// QueueLen bounds each link's receive queue (packets waiting for
	// delivery, delayed or held ones included); DefaultQueueLen if zero.
	// A packet arriving at a full queue is dropped and counted.
	QueueLen int
}

// FaultStats counts what a Network did to the packets sent through it.
type FaultStats struct {
	Sent       uint64 // packets accepted by Send
	Filtered   uint64 // dropped by Faults.Filter
	Lost       uint64 // dropped by Faults.Loss
	Duplicated uint64 // extra copies made by Faults.Duplicate
	Reordered  uint64 // packets held back by Faults.Reorder
	Corrupted  uint64 // packets with a bit flipped by Faults.Corrupt
	Delayed    uint64 // packets given a nonzero delay
	Unroutable uint64 // dropped: no link attached at the destination
	Overflow   uint64 // dropped: the destination's queue was full
}

type faultCounters struct {
	sent, filtered, lost, duplicated, reordered atomic.Uint64
	corrupted, delayed, unroutable, overflow    atomic.Uint64
}

// Network is an in-process network of Links. Its methods are safe for
// concurrent use.
type Network struct {
	queueLen int
	stats    faultCounters

	mu       sync.RWMutex
	links    map[netip.AddrPort]*Link // keys have unmapped addresses
	attached map[*Link]struct{}
	groups   map[netip.AddrPort][]*Link // multicast group and port: the links joined
	nextPort uint16
	closed   bool

	dice *link.Dice // the faults and their seeded generator
}

// NewNetwork returns an empty network with the given faults and seed.
func NewNetwork(cfg Config) *Network {
	q := cfg.QueueLen
	if q <= 0 {
		q = DefaultQueueLen
	}
	return &Network{
		queueLen: q,
		links:    make(map[netip.AddrPort]*Link),
		attached: make(map[*Link]struct{}),
		groups:   make(map[netip.AddrPort][]*Link),
		nextPort: firstEphemeral,
		dice:     link.NewDice(cfg.Faults, cfg.Seed),
	}
}

// SetFaults replaces the network's faults; packets sent afterwards see the
// new ones. Packets already held or delayed keep their schedule.
func (n *Network) SetFaults(f Faults) { n.dice.Set(f) }

// Faults returns the current faults.
func (n *Network) Faults() Faults { return n.dice.Faults() }

// Stats returns counts of what the network did to packets.
func (n *Network) Stats() FaultStats {
	c := &n.stats
	return FaultStats{
		Sent: c.sent.Load(), Filtered: c.filtered.Load(), Lost: c.lost.Load(),
		Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load(),
		Corrupted: c.corrupted.Load(), Delayed: c.delayed.Load(),
		Unroutable: c.unroutable.Load(), Overflow: c.overflow.Load(),
	}
}

// Attach adds a link owning addrs (IPv4, IPv4-mapped or IPv6; compared
// after Unmap) at UDP port port. Port 0 picks a port in 49152-65535 that is
// free on all addrs. The error wraps link.ErrAddress if an address is
// invalid, repeated, or already attached at that port, and link.ErrClosed
// if the network is closed. A closed link's addresses can be attached again.
func (n *Network) Attach(addrs []netip.Addr, port uint16) (*Link, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("loop: attach: %w: no addresses", link.ErrAddress)
	}
	keys := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("loop: attach: %w: invalid address at index %d", link.ErrAddress, i)
		}
		keys[i] = a.Unmap()
		for _, k := range keys[:i] {
			if k == keys[i] {
				return nil, fmt.Errorf("loop: attach: %w: %s listed twice", link.ErrAddress, a)
			}
		}
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("loop: attach: %w", link.ErrClosed)
	}
	if port == 0 {
		port = n.freePortLocked(keys)
		if port == 0 {
			return nil, fmt.Errorf("loop: attach: %w: no free port on %v", link.ErrAddress, addrs)
		}
	}
	for _, k := range keys {
		if _, taken := n.links[netip.AddrPortFrom(k, port)]; taken {
			return nil, fmt.Errorf("loop: attach: %w: %s is in use",
				link.ErrAddress, netip.AddrPortFrom(k, port))
		}
	}
	l := newLink(n, append([]netip.Addr(nil), addrs...), keys, port)
	for _, k := range keys {
		n.links[netip.AddrPortFrom(k, port)] = l
	}
	n.attached[l] = struct{}{}
	return l, nil
}

// freePortLocked returns a port free on all keys, scanning the ephemeral
// range round-robin like a kernel would, or 0 if there is none.
func (n *Network) freePortLocked(keys []netip.Addr) uint16 {
	const span = lastEphemeral - firstEphemeral + 1
	for range span {
		p := n.nextPort
		if n.nextPort == lastEphemeral {
			n.nextPort = firstEphemeral
		} else {
			n.nextPort++
		}
		free := true
		for _, k := range keys {
			if _, taken := n.links[netip.AddrPortFrom(k, p)]; taken {
				free = false
				break
			}
		}
		if free {
			return p
		}
	}
	return 0
}

// Close closes every attached link; later Attach calls fail with
// link.ErrClosed.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	ls := make([]*Link, 0, len(n.attached))
	for l := range n.attached {
		ls = append(ls, l)
	}
	n.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	return nil
}

// route returns the links a packet to dst (whose address is unmapped)
// reaches: the one attached there, or for a multicast group every link
// joined to it at that port, the sender's own included (as a socket with
// IP_MULTICAST_LOOP sees its own packets). The slice is the network's: the
// caller must not change it.
func (n *Network) route(dst netip.AddrPort) []*Link {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if dst.Addr().IsMulticast() {
		return n.groups[dst]
	}
	if l := n.links[dst]; l != nil {
		return l.self
	}
	return nil
}

// join adds l to the members of group at its port.
func (n *Network) join(l *Link, group netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || l.closed.Load() {
		return link.ErrClosed
	}
	k := netip.AddrPortFrom(group, l.port)
	for _, m := range n.groups[k] {
		if m == l {
			return fmt.Errorf("loop: join: %w: %s already joined", link.ErrAddress, group)
		}
	}
	// A new slice: route's callers may be reading the old one.
	n.groups[k] = append(append([]*Link(nil), n.groups[k]...), l)
	return nil
}

// leave removes l from the members of group, reporting whether it was one.
func (n *Network) leave(l *Link, group netip.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaveLocked(l, netip.AddrPortFrom(group, l.port))
}

func (n *Network) leaveLocked(l *Link, k netip.AddrPort) bool {
	ms := n.groups[k]
	for i, m := range ms {
		if m == l {
			rest := make([]*Link, 0, len(ms)-1)
			rest = append(append(rest, ms[:i]...), ms[i+1:]...)
			if len(rest) == 0 {
				delete(n.groups, k)
			} else {
				n.groups[k] = rest
			}
			return true
		}
	}
	return false
}

// detach removes l's addresses, if they are still l's, and its groups.
func (n *Network) detach(l *Link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k := range n.groups {
		n.leaveLocked(l, k)
	}
	for _, k := range l.keys {
		ap := netip.AddrPortFrom(k, l.port)
		if n.links[ap] == l {
			delete(n.links, ap)
		}
	}
	delete(n.attached, l)
}
