// Packets through a loop Link: Send seals the caller's packet, copies it into
// a pool packet, applies the Network's faults and queues the copy on the
// destination link; that link's delivery goroutine takes due packets from its
// queue, checks their ICRC and hands them to the Handler, then returns them
// to the pool.

package loop

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// Link is one endpoint of a Network. It implements link.Link; its methods
// are safe for concurrent use. Received packets have unmapped Src and Dst
// addresses.
type Link struct {
	net   *Network
	addrs []netip.Addr // as attached
	keys  []netip.Addr // unmapped
	port  uint16
	ctr   link.Counters
	self  []*Link // just l: what route returns for a unicast packet, made once

	hook   atomic.Pointer[func([]byte)] // SetSealHook's function
	closed atomic.Bool                  // Send fails once set
	state  link.State                   // SetUp(false): nothing sent or delivered
	wake   chan struct{}                // capacity 1: something was queued
	done   chan struct{}                // closed by Close
	exited chan struct{}                // closed when the delivery goroutine returns

	mu      sync.Mutex // guards started and closing
	started bool
	closing bool

	in inbox
}

// inbox is a link's bounded receive queue: a min-heap of packets ordered by
// due time (then arrival), plus at most one packet held back for reordering.
type inbox struct {
	mu        sync.Mutex
	q         timeHeap
	held      entry // held.p == nil if none
	heldUntil time.Time
	seq       uint64
	closed    bool
}

type entry struct {
	p   *link.Packet
	due time.Time
	seq uint64
}

func newLink(n *Network, addrs, keys []netip.Addr, port uint16) *Link {
	l := &Link{
		net: n, addrs: addrs, keys: keys, port: port,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	l.self = []*Link{l}
	return l
}

// Addrs returns the addresses the link was attached with.
func (l *Link) Addrs() []netip.Addr { return append([]netip.Addr(nil), l.addrs...) }

// Port returns the link's UDP port.
func (l *Link) Port() uint16 { return l.port }

// Stats returns the link's counters.
func (l *Link) Stats() link.Stats { return l.ctr.Snapshot() }

// Send seals each packet in place (IPv4: Identification 0, Don't Fragment),
// then passes a copy through the network's faults to the link attached at
// its Dst. A packet whose Src address is not one of the link's, whose Dst is
// invalid or of the other IP family, or which is shorter than a BTH and ICRC
// is not sent; Send tries the rest and returns the first such error
// (wrapping link.ErrAddress for address problems) and counts them as
// TxErrors. A zero Src address picks the link's first address of Dst's
// family. Packets to a destination where no link is attached are dropped
// silently and counted in Stats.Dropped. Send never blocks on receivers.
func (l *Link) Send(batch []*link.Packet) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	if !l.state.Up() {
		l.ctr.TxErrors.Add(uint64(len(batch)))
		return link.ErrDown
	}
	l.ctr.TxCalls.Add(1)
	var first error
	for _, p := range batch {
		if err := l.send1(p); err != nil {
			l.ctr.TxErrors.Add(1)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

func (l *Link) send1(p *link.Packet) error {
	if p == nil || p.N < wire.BTHLen+wire.ICRCLen || p.N > len(p.Buf) {
		n := 0
		if p != nil {
			n = p.N
		}
		return fmt.Errorf("loop: send: packet length %d is not in [%d, buffer size]", n, wire.BTHLen+wire.ICRCLen)
	}
	dst := netip.AddrPortFrom(p.Dst.Addr().Unmap(), p.Dst.Port())
	if !dst.Addr().IsValid() || dst.Port() == 0 {
		return fmt.Errorf("loop: send: %w: destination %s", link.ErrAddress, p.Dst)
	}
	src, err := l.source(p.Src.Addr(), dst.Addr())
	if err != nil {
		return err
	}
	sport := l.port // the packet's own source port if it asks for one
	if p.Src.Port() != 0 {
		sport = p.Src.Port()
	}
	fr := wire.Framing{
		Src: src, Dst: dst.Addr(), SrcPort: sport, DstPort: dst.Port(),
		IPv4Frag: wire.IPv4DontFragment,
	}
	wire.Seal(&fr, p.Data())
	if h := l.hook.Load(); h != nil {
		(*h)(p.Data())
	}
	l.ctr.TxPackets.Add(1)
	l.ctr.TxBytes.Add(uint64(p.N))
	n := l.net
	n.stats.sent.Add(1)

	q := link.Get()
	q.N = copy(q.Buf, p.Data())
	q.Src = netip.AddrPortFrom(src, sport)
	q.Dst = dst
	q.TClass = p.TClass

	v, filter := n.dice.Roll(q.N)
	if filter != nil && filter(q) {
		link.Put(q)
		l.ctr.Dropped.Add(1)
		n.stats.filtered.Add(1)
		return nil
	}
	if v.Lose {
		link.Put(q)
		l.ctr.Dropped.Add(1)
		n.stats.lost.Add(1)
		return nil
	}
	if v.Flip >= 0 && v.Flip < q.N*8 {
		q.Buf[v.Flip/8] ^= 1 << (v.Flip % 8)
		n.stats.corrupted.Add(1)
	}
	var q2 *link.Packet
	if v.Dup {
		q2 = link.Clone(q)
		n.stats.duplicated.Add(1)
	}
	if v.Delay > 0 {
		n.stats.delayed.Add(1)
	}

	tos := n.route(dst)
	now := time.Now()
	due := now.Add(v.Delay)
	for i, pk := range [2]*link.Packet{q, q2} {
		if pk == nil {
			continue
		}
		if len(tos) == 0 {
			link.Put(pk)
			l.ctr.Dropped.Add(1)
			n.stats.unroutable.Add(1)
			continue
		}
		// A multicast packet reaches every member: each gets its own copy,
		// the last one the packet itself.
		for j, to := range tos {
			c := pk
			if j < len(tos)-1 {
				c = link.Clone(pk)
			}
			if !to.enqueue(c, due, v.Hold && i == 0, now.Add(v.HoldFor)) {
				link.Put(c)
				l.ctr.Dropped.Add(1)
				n.stats.unroutable.Add(1)
			}
		}
	}
	return nil
}

// JoinGroup makes the link receive packets sent to group at its port
// (link.Multicaster). Every link joined to a group gets a copy of each
// packet sent to it, the sending link included, with the network's faults
// drawn once for the packet. The error wraps link.ErrAddress if group is
// not a multicast address of the family of one of the link's addresses or
// is already joined, link.ErrClosed if the link is closed.
func (l *Link) JoinGroup(group netip.Addr) error {
	g, err := link.CheckGroup(group, l.keys)
	if err != nil {
		return fmt.Errorf("loop: join: %w", err)
	}
	return l.net.join(l, g)
}

// LeaveGroup stops the link receiving packets sent to group
// (link.Multicaster). The error wraps link.ErrAddress if it had not joined.
func (l *Link) LeaveGroup(group netip.Addr) error {
	g := group.Unmap().WithZone("")
	if !l.net.leave(l, g) {
		return fmt.Errorf("loop: leave: %w: %s is not joined", link.ErrAddress, group)
	}
	return nil
}

// source returns the unmapped local address a packet is sent from: src if it
// is one of the link's, or the first address of dst's family if src is zero.
func (l *Link) source(src, dst netip.Addr) (netip.Addr, error) {
	want4 := dst.Is4()
	if !src.IsValid() {
		for _, k := range l.keys {
			if k.Is4() == want4 {
				return k, nil
			}
		}
		return netip.Addr{}, fmt.Errorf("loop: send: %w: no local address of the family of %s", link.ErrAddress, dst)
	}
	s := src.Unmap()
	for _, k := range l.keys {
		if k == s {
			if k.Is4() != want4 {
				return netip.Addr{}, fmt.Errorf("loop: send: %w: source %s and destination %s differ in family", link.ErrAddress, src, dst)
			}
			return k, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("loop: send: %w: source %s is not a local address", link.ErrAddress, src)
}

// enqueue queues p for delivery at due, or holds it back (until holdUntil at
// the latest) if hold is set and nothing is held yet. A packet arriving while
// another is held releases it right after itself. It reports false if the
// link is closed; a full queue drops p itself and counts it.
func (l *Link) enqueue(p *link.Packet, due time.Time, hold bool, holdUntil time.Time) bool {
	in := &l.in
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return false
	}
	if hold && in.held.p == nil {
		if l.fullLocked() {
			in.mu.Unlock()
			l.overflow(p)
			return true
		}
		in.seq++
		in.held = entry{p, due, in.seq}
		in.heldUntil = holdUntil
		l.net.stats.reordered.Add(1)
	} else {
		if l.fullLocked() {
			in.mu.Unlock()
			l.overflow(p)
			return true
		}
		in.seq++
		in.q.push(entry{p, due, in.seq})
		if h := in.held; h.p != nil {
			in.held = entry{}
			in.seq++
			in.q.push(entry{h.p, laterOf(h.due, due), in.seq})
		}
	}
	in.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

func (l *Link) fullLocked() bool {
	n := len(l.in.q)
	if l.in.held.p != nil {
		n++
	}
	return n >= l.net.queueLen
}

func (l *Link) overflow(p *link.Packet) {
	link.Put(p)
	l.ctr.Dropped.Add(1)
	l.net.stats.overflow.Add(1)
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Start starts the delivery goroutine, which hands received packets to h in
// batches of up to MaxBatch. Packets that arrived before Start are queued
// (up to Config.QueueLen) and delivered first.
func (l *Link) Start(h link.Handler) error {
	if h == nil {
		return fmt.Errorf("loop: start: nil handler")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return link.ErrClosed
	}
	if l.started {
		return link.ErrStarted
	}
	l.started = true
	go l.run(h)
	return nil
}

// Close detaches the link, stops its delivery goroutine (waiting for a
// Receive in progress to return, so it must not be called from the
// Handler), and returns the packets still queued to the pool undelivered.
// Later Sends and Starts return link.ErrClosed; closing again returns nil.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return nil
	}
	l.closing = true
	started := l.started
	l.mu.Unlock()

	l.closed.Store(true)
	l.net.detach(l)
	close(l.done)
	if started {
		<-l.exited
	}
	in := &l.in
	in.mu.Lock()
	in.closed = true
	for _, e := range in.q {
		link.Put(e.p)
	}
	clear(in.q)
	in.q = nil
	if in.held.p != nil {
		link.Put(in.held.p)
		in.held = entry{}
	}
	in.mu.Unlock()
	return nil
}

// run is the delivery goroutine.
func (l *Link) run(h link.Handler) {
	defer close(l.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]*link.Packet, 0, MaxBatch)
	good := make([]*link.Packet, 0, MaxBatch)
	for {
		var next time.Time
		batch, next = l.take(batch[:0], time.Now())
		if len(batch) > 0 {
			l.deliver(h, batch, good[:0])
			clear(batch)
			select {
			case <-l.done:
				return
			default:
			}
			continue
		}
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			tc = timer.C
		}
		select {
		case <-l.done:
			timer.Stop()
			return
		case <-l.wake:
		case <-tc:
		}
		timer.Stop()
	}
}

// take moves up to MaxBatch due packets into batch (releasing an overdue
// held packet first) and returns the time the next packet falls due, or the
// zero time if nothing is waiting.
func (l *Link) take(batch []*link.Packet, now time.Time) ([]*link.Packet, time.Time) {
	in := &l.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.held.p != nil && !now.Before(in.heldUntil) {
		h := in.held
		in.held = entry{}
		in.seq++
		in.q.push(entry{h.p, laterOf(h.due, in.heldUntil), in.seq})
	}
	for len(batch) < MaxBatch && len(in.q) > 0 && !in.q[0].due.After(now) {
		batch = append(batch, in.q.pop().p)
	}
	var next time.Time
	if len(in.q) > 0 {
		next = in.q[0].due
	}
	if in.held.p != nil && (next.IsZero() || in.heldUntil.Before(next)) {
		next = in.heldUntil
	}
	return batch, next
}

// SetSealHook makes Send call f with each packet's bytes right after
// sealing them, before the network copies the packet (link.SealHooker).
func (l *Link) SetSealHook(f func(b []byte)) {
	if f == nil {
		l.hook.Store(nil)
		return
	}
	l.hook.Store(&f)
}

// Up reports whether the link is up (link.StateNotifier); links attach up.
func (l *Link) Up() bool { return l.state.Up() }

// NotifyState registers f to be called with the new state when SetUp
// changes it (link.StateNotifier).
func (l *Link) NotifyState(f func(up bool)) { l.state.NotifyState(f) }

// SetUp takes the link down (false) or up again (true), as pulling and
// plugging a cable would: while it is down, Send fails with link.ErrDown and
// counts the packets in TxErrors, and packets arriving for it are dropped
// and counted in Stats.Dropped. A change calls the NotifyState function, on
// the caller's goroutine.
func (l *Link) SetUp(up bool) {
	if l.state.Set(up) {
		l.state.Notify(up)
	}
}

// deliver checks the batch's framing and ICRC, hands the good packets to h
// and returns every packet to the pool.
func (l *Link) deliver(h link.Handler, batch, good []*link.Packet) {
	down := !l.state.Up()
	for _, p := range batch {
		if down {
			l.ctr.Dropped.Add(1)
			continue
		}
		if p.N < wire.BTHLen+wire.ICRCLen {
			l.ctr.RxMalformed.Add(1)
			continue
		}
		fr := wire.Framing{
			Src: p.Src.Addr(), Dst: p.Dst.Addr(), SrcPort: p.Src.Port(), DstPort: p.Dst.Port(),
			IPv4Frag: wire.IPv4DontFragment,
		}
		if !wire.VerifyICRC(&fr, p.Data()) {
			l.ctr.RxBadICRC.Add(1)
			continue
		}
		l.ctr.RxPackets.Add(1)
		l.ctr.RxBytes.Add(uint64(p.N))
		good = append(good, p)
	}
	if len(good) > 0 {
		l.ctr.RxCalls.Add(1)
		h.Receive(good)
	}
	clear(good)
	for _, p := range batch {
		link.Put(p)
	}
}

// timeHeap is a min-heap of entries ordered by (due, seq).
type timeHeap []entry

func (h timeHeap) less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}

func (h *timeHeap) push(e entry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *timeHeap) pop() entry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = entry{}
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
