// Cable: two HCA ports wired back to back, with no switch between them, as
// two hosts' HCAs cabled directly with the SM run elsewhere (or by the test:
// SetAttr plays the SM).

package ib

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/link"
)

// CableConfig configures Cable. The zero value cables two Active ports with
// LIDs 1 and 2 (DefaultAttr).
type CableConfig struct {
	// A and B are the two ports' initial attributes; a zero PortAttr (no
	// LID and no state) takes DefaultAttr(1, ...) for A and
	// DefaultAttr(2, ...) for B.
	A, B PortAttr
	// Faults applies to every packet each port sends: Loss, Duplicate and
	// Corrupt (one bit flipped anywhere, so the receiver's VCRC catches
	// it) are drawn from generators seeded by Seed (A) and Seed+1 (B).
	// Reorder, Delay, Jitter and Filter are not supported (use Tamper).
	Faults link.Faults
	Seed   uint64
	// Tamper, if set, sees every packet a port sends (from the sending
	// port's side) before the faults apply; it may change the bytes in
	// place or return true to drop the packet. It is called on the
	// sender's goroutine and must not keep b.
	Tamper func(from *CablePort, b []byte) (drop bool)
	// QueueLen bounds the packets waiting at each receiving port (default
	// 4096); a packet arriving at a full queue is dropped and counted.
	QueueLen int
}

// DefaultAttr returns the attributes of an Active port with the given LID
// and port GUID: LMC 0, the SM at LID 1, MTU 4096, one data VL (every SL on
// VL 0), the default GID prefix and the default P_Key table (0xFFFF).
func DefaultAttr(lid uint16, guid uint64) PortAttr {
	return PortAttr{
		LID: lid, SMLID: 1, State: StateActive, PhysState: PhysLinkUp,
		MTU: 4096, OperVLs: 1, GIDPrefix: link.DefaultGIDPrefix, PortGUID: guid,
		PKeys: []uint16{0xFFFF},
	}
}

var _ Port = (*CablePort)(nil)

// CablePort is one end of a Cable: a Port whose attributes the test sets.
type CablePort struct {
	name string
	peer *CablePort
	cfg  *CableConfig
	dice *link.Dice // nil: no faults

	mu      sync.Mutex // guards attr, started, closed
	attr    PortAttr
	notify  atomic.Pointer[func()]
	started bool
	closed  bool

	rx   chan *[]byte // packets in buffers of bufPool
	done chan struct{}
	wg   sync.WaitGroup

	sent, delivered, dropped atomic.Uint64
}

// Cable returns two ports wired to each other: what one sends, the other
// receives, in order, unless the configuration's faults say otherwise. At
// most one CableConfig is used.
func Cable(cfg ...CableConfig) (*CablePort, *CablePort) {
	var c CableConfig
	if len(cfg) > 0 {
		c = cfg[0]
	}
	if c.A.LID == 0 && c.A.State == 0 {
		c.A = DefaultAttr(1, 0x0002_c903_0000_0001)
	}
	if c.B.LID == 0 && c.B.State == 0 {
		c.B = DefaultAttr(2, 0x0002_c903_0000_0002)
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 4096
	}
	a := newCablePort("A", &c, c.A)
	b := newCablePort("B", &c, c.B)
	a.peer, b.peer = b, a
	if c.Faults.Active() {
		a.dice = link.NewDice(c.Faults, c.Seed)
		b.dice = link.NewDice(c.Faults, c.Seed+1)
	}
	return a, b
}

func newCablePort(name string, c *CableConfig, attr PortAttr) *CablePort {
	return &CablePort{name: name, cfg: c, attr: attr.Clone(),
		rx: make(chan *[]byte, c.QueueLen), done: make(chan struct{})}
}

// bufPool holds the cable's packet buffers (MaxFrame bytes): a packet is
// copied into one on Send and the buffer returns when the receiving port
// has handed it to its recv function.
var bufPool = sync.Pool{New: func() any { b := make([]byte, MaxFrame); return &b }}

// copyPacket returns b in a pool buffer (a fresh one if b is larger).
func copyPacket(b []byte) *[]byte {
	if len(b) > MaxFrame {
		c := append([]byte(nil), b...)
		return &c
	}
	bp := bufPool.Get().(*[]byte)
	*bp = append((*bp)[:0], b...)
	return bp
}

func putPacket(bp *[]byte) {
	if cap(*bp) == MaxFrame {
		bufPool.Put(bp)
	}
}

// String names the end: "A" or "B".
func (p *CablePort) String() string { return "cable port " + p.name }

// Peer returns the other end of the cable.
func (p *CablePort) Peer() *CablePort { return p.peer }

// Attr returns the port's attributes (a copy).
func (p *CablePort) Attr() PortAttr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attr.Clone()
}

// SetAttr replaces the port's attributes, as an SM's Set(PortInfo),
// Set(P_KeyTable) and Set(SLtoVLMappingTable) would, and then calls the
// function registered with NotifyAttr.
func (p *CablePort) SetAttr(a PortAttr) {
	p.mu.Lock()
	p.attr = a.Clone()
	p.mu.Unlock()
	if f := p.notify.Load(); f != nil {
		(*f)()
	}
}

// NotifyAttr registers f, called after each change of Attr (nil removes).
func (p *CablePort) NotifyAttr(f func()) {
	if f == nil {
		p.notify.Store(nil)
		return
	}
	p.notify.Store(&f)
}

// Send transmits whole IB packets to the other end. It copies them: the
// caller may reuse the slices when Send returns. Packets the other end's
// queue has no room for, or that it cannot take because it is closed, are
// dropped and counted (CableStats).
func (p *CablePort) Send(pkts [][]byte) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: %v", ErrClosed, p)
	}
	for _, b := range pkts {
		p.sent.Add(1)
		bp := copyPacket(b)
		c := *bp
		if t := p.cfg.Tamper; t != nil && t(p, c) {
			p.dropped.Add(1)
			putPacket(bp)
			continue
		}
		dup := false
		if p.dice != nil {
			v, _ := p.dice.Roll(len(c))
			if v.Lose {
				p.dropped.Add(1)
				putPacket(bp)
				continue
			}
			if v.Flip >= 0 {
				c[v.Flip/8] ^= 1 << (v.Flip % 8)
			}
			dup = v.Dup
		}
		if dup {
			p.deliver(copyPacket(c))
		}
		p.deliver(bp)
	}
	return nil
}

func (p *CablePort) deliver(bp *[]byte) {
	select {
	case p.peer.rx <- bp:
		p.delivered.Add(1)
	default:
		p.dropped.Add(1)
		putPacket(bp)
	}
}

// Start delivers received packets to recv from the port's goroutine, in
// batches of up to 64.
func (p *CablePort) Start(recv func(pkts [][]byte)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("%w: %v", ErrClosed, p)
	case p.started:
		return fmt.Errorf("%w: %v", ErrStarted, p)
	case recv == nil:
		return fmt.Errorf("%w: nil receive function", ErrPort)
	}
	p.started = true
	p.wg.Add(1)
	go p.run(recv)
	return nil
}

func (p *CablePort) run(recv func(pkts [][]byte)) {
	defer p.wg.Done()
	batch := make([][]byte, 0, 64)
	bufs := make([]*[]byte, 0, 64)
	for {
		select {
		case <-p.done:
			return
		case bp := <-p.rx:
			bufs = append(bufs[:0], bp)
		more:
			for len(bufs) < cap(bufs) {
				select {
				case bp := <-p.rx:
					bufs = append(bufs, bp)
				default:
					break more
				}
			}
			batch = batch[:0]
			for _, bp := range bufs {
				batch = append(batch, *bp)
			}
			recv(batch)
			clear(batch)
			for _, bp := range bufs {
				putPacket(bp)
			}
			clear(bufs)
		}
	}
}

// Close stops the port's goroutine and waits for it. Packets sent to a
// closed port are dropped.
func (p *CablePort) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrClosed, p)
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.wg.Wait()
	p.NotifyAttr(nil)
	return nil
}

// CableStats counts one end's traffic.
type CableStats struct {
	Sent      uint64 // packets given to Send
	Delivered uint64 // queued at the other end (duplicates included)
	Dropped   uint64 // lost to faults, Tamper or a full queue
}

// Stats returns the end's counters.
func (p *CablePort) Stats() CableStats {
	return CableStats{Sent: p.sent.Load(), Delivered: p.delivered.Load(), Dropped: p.dropped.Load()}
}
