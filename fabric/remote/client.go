package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
)

// Dialer attaches HCA ports of a fabric served by another process.
type Dialer struct {
	// KeepAlive is the keep-alive interval (default DefaultKeepAlive); a
	// server silent for three intervals is lost.
	KeepAlive time.Duration
	// Logger receives the port's log (default slog.Default()).
	Logger *slog.Logger
}

// Dial attaches CA port port of node (a topology node name, or a node or
// port GUID in hex) of the fabric served at addr (host:port for TCP,
// "unix:PATH" or a path with a slash for a unix socket; "" is
// DefaultAddr) with a zero Dialer. The returned ib.Port is what link/ib's
// New takes.
func Dial(ctx context.Context, addr, node string, port int) (ib.Port, error) {
	p, err := (&Dialer{}).Dial(ctx, addr, node, port)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// SplitAddr returns the network ("tcp" or "unix") and address of an
// address as Dial takes it: "unix:PATH" or a path with a slash is a unix
// socket, "tcp:HOST:PORT" or HOST:PORT is TCP, "" is DefaultAddr.
func SplitAddr(addr string) (network, address string) {
	switch {
	case addr == "":
		return "tcp", DefaultAddr
	case strings.HasPrefix(addr, "unix:"):
		return "unix", strings.TrimPrefix(addr, "unix:")
	case strings.HasPrefix(addr, "tcp:"):
		return "tcp", strings.TrimPrefix(addr, "tcp:")
	case strings.Contains(addr, "/"):
		return "unix", addr
	}
	return "tcp", addr
}

// Dial is the package's Dial with d's settings. ctx bounds the connection
// and the attach exchange, not the port's life.
func (d *Dialer) Dial(ctx context.Context, addr, node string, port int) (*Port, error) {
	req := attachReq{Node: node, Port: port}
	body, err := req.encode()
	if err != nil {
		return nil, err
	}
	ka := d.KeepAlive
	if ka <= 0 {
		ka = DefaultKeepAlive
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	network, address := SplitAddr(addr)
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	// The exchange ends with ctx, or after three keep-alive intervals.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	conn.SetDeadline(time.Now().Add(3 * ka))
	fail := func(err error) (*Port, error) {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("remote: attach %s port %d at %s: %w", node, port, addr, ctx.Err())
		}
		return nil, fmt.Errorf("remote: attach %s port %d at %s: %w", node, port, addr, err)
	}
	if _, err := conn.Write(appendFrame(nil, frameAttach, body)); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	typ, b, _, err := readFrame(br, nil)
	if err != nil {
		return fail(err)
	}
	switch typ {
	case frameAttached:
	case frameRefused:
		r, err := parseRefusal(b)
		if err != nil {
			return fail(err)
		}
		var why error
		switch r.Code {
		case refuseNoNode:
			why = fabric.ErrNoNode
		case refuseNoPort:
			why = fabric.ErrNoPort
		case refuseInUse:
			why = fabric.ErrPortInUse
		case refuseClosed:
			why = fabric.ErrClosed
		}
		if why != nil {
			return fail(fmt.Errorf("%w (%w): %s", ErrRefused, why, r.Msg))
		}
		return fail(fmt.Errorf("%w: %s", ErrRefused, r.Msg))
	default:
		return fail(fmt.Errorf("%w: frame type %d in answer to attach", ErrBadFrame, typ))
	}
	a, err := parseAttr(b)
	if err != nil {
		return fail(err)
	}
	if !stop() {
		// Attached, but ctx ended meanwhile: detach, so that the server
		// does not take the port for a dead client's.
		conn.SetDeadline(time.Now().Add(ka))
		conn.Write(appendFrame(nil, frameDetach, nil))
		return fail(ctx.Err())
	}
	conn.SetDeadline(time.Time{})
	return newPort(conn, br, ka, log, fmt.Sprintf("%s/%d@%s", node, port, addr), &a), nil
}

// PortStats counts a remote port's traffic.
type PortStats struct {
	Sent       uint64 // packets Send accepted for the server
	Received   uint64 // packets handed to the receive function
	NotStarted uint64 // packets that arrived before Start, dropped
	SendBad    uint64 // packets Send dropped: shorter than an LRH and VCRC, or longer than ib.MaxFrame
	BadFrames  uint64 // frames from the server dropped as malformed or unexpected
	AttrUpdate uint64 // attribute updates received
}

// maxQueued is how many bytes of frames Send lets wait for the writer,
// and how many of one data VL it lets wait for credits, before it waits
// itself (unless called from the receive function).
const maxQueued = 256 << 10

// Port is an HCA port of a fabric in another process, attached with Dial.
// It implements ib.Port. When the connection is lost its attributes turn
// to DOWN (NotifyAttr's function is called) and Send fails with an error
// wrapping ErrDisconnected.
//
// Frames go out through one writer goroutine. A packet on a data VL goes
// to the writer only with a credit for its VL from the server (one per
// packet the server has room for); without one it waits in the VL's own
// queue, so a VL the fabric holds back does not hold the others, and
// VL15 bypasses credits. Send waits while more than maxQueued bytes wait
// for credits on a VL it sent on, or for the writer, which is how the
// fabric's backpressure reaches the caller; called from the port's
// receive function it never waits (a device answering what it receives
// must not stop its port's reader: two devices streaming at each other
// would deadlock once every buffer between them is full), as the fabric's
// own ports do.
type Port struct {
	conn net.Conn
	br   *bufio.Reader
	ka   time.Duration
	log  *slog.Logger
	name string

	attr   atomic.Pointer[ib.PortAttr]
	notify atomic.Pointer[func()]
	recv   atomic.Pointer[func([][]byte)]
	inRecv atomic.Bool

	qmu           sync.Mutex // guards the fields below
	qcond         *sync.Cond // the queue shrank or the state changed
	queue         [][]byte   // encoded frames waiting for the writer
	queued        int        // bytes in queue
	started       bool
	closed        bool
	detachPending bool // Close queued a detach: close detachWritten once it is out
	// Per data VL: the credits the server has granted and not used, and
	// the frames waiting for one (pend[v][pendHead[v]:], pendBytes[v]
	// bytes).
	credits   [dataVLs]int
	pend      [dataVLs][][]byte
	pendHead  [dataVLs]int
	pendBytes [dataVLs]int

	lost          atomic.Bool
	wake          chan struct{} // cap 1: the writer has work
	detachWritten chan struct{}
	done          chan struct{}
	readerDone    chan struct{}
	wg            sync.WaitGroup

	sent, received, notStarted, sendBad, badFrames, attrUpdates atomic.Uint64
}

func newPort(conn net.Conn, br *bufio.Reader, ka time.Duration, log *slog.Logger, name string, a *ib.PortAttr) *Port {
	p := &Port{conn: conn, br: br, ka: ka, log: log, name: name,
		wake: make(chan struct{}, 1), detachWritten: make(chan struct{}),
		done: make(chan struct{}), readerDone: make(chan struct{})}
	p.qcond = sync.NewCond(&p.qmu)
	p.attr.Store(a)
	p.wg.Add(2)
	go p.reader()
	go p.writer()
	return p
}

// String names the port: node/port@address.
func (p *Port) String() string { return "remote HCA port " + p.name }

// Attr returns the port's attributes as the fabric last reported them.
func (p *Port) Attr() ib.PortAttr { return p.attr.Load().Clone() }

// NotifyAttr registers f, called (from the port's goroutine) after each
// change of Attr; nil removes it.
func (p *Port) NotifyAttr(f func()) {
	if f == nil {
		p.notify.Store(nil)
		return
	}
	p.notify.Store(&f)
}

// Start delivers received packets to recv from the port's goroutine, in
// batches (the slices are valid only during the call; recv must not call
// Close); packets that arrive before Start are dropped and counted.
func (p *Port) Start(recv func(pkts [][]byte)) error {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("%w: %v", ErrClosed, p)
	case p.started:
		return fmt.Errorf("%w: %v", ib.ErrStarted, p)
	case recv == nil:
		return fmt.Errorf("%w: nil receive function", ib.ErrPort)
	}
	p.started = true
	p.recv.Store(&recv)
	return nil
}

// Send queues whole IB packets for the fabric (it copies them: the caller
// may reuse the slices when Send returns): each data-VL packet goes to
// the writer if its VL has a credit, else it waits for one in the VL's
// queue. Send then waits while a VL it sent on has more than maxQueued
// bytes waiting for credits, or the writer as much: the fabric's credits
// push back through the connection to here, VL by VL. Called from the
// receive function it does not wait. Packets too short or too long for an
// IB packet are dropped and counted.
func (p *Port) Send(pkts [][]byte) error {
	size, n := 0, 0
	for _, pkt := range pkts {
		if len(pkt) < 10 || len(pkt) > maxPacket {
			p.sendBad.Add(1)
			continue
		}
		size += 5 + len(pkt)
		n++
	}
	// One buffer for the batch: frames that go to the writer one after
	// the other go as one slice of it.
	b := make([]byte, 0, size)
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if err := p.stateErr(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	run := 0        // start of the frames in b not yet handed on
	var held uint32 // VLs this call queued frames on to wait for credits
	for _, pkt := range pkts {
		if len(pkt) < 10 || len(pkt) > maxPacket {
			continue
		}
		start := len(b)
		b = appendFrame(b, framePacket, pkt)
		v := packetVL(pkt)
		if v >= dataVLs {
			continue // VL15: no credits
		}
		if p.credits[v] > 0 && p.pendHead[v] == len(p.pend[v]) {
			p.credits[v]--
			continue
		}
		if run < start {
			p.enqueue(b[run:start:start])
		}
		run = len(b)
		p.pend[v] = append(p.pend[v], b[start:run:run])
		p.pendBytes[v] += run - start
		held |= 1 << v
	}
	if run < len(b) {
		p.enqueue(b[run:])
	}
	p.sent.Add(uint64(n))
	for (p.queued > maxQueued || p.overHeld(held)) && !p.inRecv.Load() && p.stateErr() == nil {
		p.qcond.Wait()
	}
	return p.stateErr()
}

// overHeld reports whether one of the VLs in mask has more than maxQueued
// bytes waiting for credits (under qmu).
func (p *Port) overHeld(mask uint32) bool {
	for v := 0; mask != 0; v, mask = v+1, mask>>1 {
		if mask&1 != 0 && p.pendBytes[v] > maxQueued {
			return true
		}
	}
	return false
}

// grant adds the credits of a credit frame and hands the writer the
// frames they let go.
func (p *Port) grant(c *[dataVLs]uint16) {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	moved := false
	for v, k := range c {
		if k == 0 {
			continue
		}
		p.credits[v] += int(k)
		q := p.pend[v]
		for p.credits[v] > 0 && p.pendHead[v] < len(q) {
			f := q[p.pendHead[v]]
			q[p.pendHead[v]] = nil
			p.pendHead[v]++
			p.pendBytes[v] -= len(f)
			p.credits[v]--
			p.enqueue(f)
			moved = true
		}
		if p.pendHead[v] == len(q) {
			p.pend[v], p.pendHead[v] = q[:0], 0
		}
	}
	if moved {
		p.qcond.Broadcast()
	}
}

// stateErr is the error Send returns in the port's state (under qmu).
func (p *Port) stateErr() error {
	switch {
	case p.closed:
		return fmt.Errorf("%w: %v", ErrClosed, p)
	case p.lost.Load():
		return fmt.Errorf("%w: %v", ErrDisconnected, p)
	}
	return nil
}

// enqueue hands frames to the writer (under qmu).
func (p *Port) enqueue(b []byte) {
	p.queue = append(p.queue, b)
	p.queued += len(b)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// writer writes what Send and Close queue, and a keep-alive every
// interval, until the port is closed or the connection lost. Its writes
// have no deadline: a write that does not finish is backpressure, and a
// server that is gone is found by the reader (silence), which closes the
// connection and so ends the write.
func (p *Port) writer() {
	defer p.wg.Done()
	t := time.NewTicker(p.ka)
	defer t.Stop()
	keepAlive := appendFrame(nil, frameKeepAlive, nil)
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			p.qmu.Lock()
			p.enqueue(keepAlive)
			p.qmu.Unlock()
		case <-p.wake:
		}
		for {
			p.qmu.Lock()
			bufs := p.queue
			p.queue = nil
			p.qmu.Unlock()
			if len(bufs) == 0 {
				break
			}
			total := 0
			for _, b := range bufs {
				total += len(b)
			}
			nb := net.Buffers(bufs)
			_, err := nb.WriteTo(p.conn)
			p.qmu.Lock()
			p.queued -= total
			if err == nil && p.detachPending && len(p.queue) == 0 {
				p.detachPending = false
				close(p.detachWritten)
			}
			p.qcond.Broadcast()
			p.qmu.Unlock()
			if err != nil {
				p.lose(err)
				return
			}
		}
	}
}

// reader reads the server's frames until the connection ends.
func (p *Port) reader() {
	defer p.wg.Done()
	defer close(p.readerDone)
	bufs := make([][]byte, rxBatch)
	batch := make([][]byte, 0, rxBatch)
	var err error
	for err == nil {
		batch = batch[:0]
		for len(batch) < rxBatch {
			if len(batch) > 0 && p.br.Buffered() < 4 {
				break
			}
			if p.br.Buffered() == 0 {
				p.conn.SetReadDeadline(time.Now().Add(3 * p.ka))
			}
			var typ byte
			var body []byte
			typ, body, bufs[len(batch)], err = readFrame(p.br, bufs[len(batch)])
			if err != nil {
				break
			}
			switch typ {
			case framePacket:
				if checkPacket(body) != nil {
					p.badFrames.Add(1)
					continue
				}
				batch = append(batch, body)
			case frameAttr:
				a, e := parseAttr(body)
				if e != nil {
					p.badFrames.Add(1)
					continue
				}
				p.attrUpdates.Add(1)
				p.setAttr(&a)
			case frameCredit:
				c, e := parseCredits(body)
				if e != nil {
					p.badFrames.Add(1)
					continue
				}
				p.grant(&c)
			case frameKeepAlive:
			default:
				p.badFrames.Add(1)
			}
		}
		if len(batch) > 0 {
			if f := p.recv.Load(); f != nil {
				// Counted before the hand-over, so a receiver that has
				// seen a packet sees it counted.
				p.received.Add(uint64(len(batch)))
				p.inRecv.Store(true)
				(*f)(batch)
				p.inRecv.Store(false)
			} else {
				p.notStarted.Add(uint64(len(batch)))
			}
			clear(batch)
		}
	}
	if errors.Is(err, ErrBadFrame) {
		p.badFrames.Add(1)
	}
	p.lose(err)
}

// lose ends the connection after err, unless the port is being closed:
// the server went away, broke the stream or fell silent, and the cable is
// as good as pulled. The attributes turn DOWN and the NotifyAttr function
// is called; Send fails from now on.
func (p *Port) lose(err error) {
	p.qmu.Lock()
	closed := p.closed
	p.qmu.Unlock()
	if closed || p.lost.Swap(true) {
		return
	}
	p.conn.Close()
	p.qmu.Lock()
	p.qcond.Broadcast()
	p.qmu.Unlock()
	p.log.Warn("remote: connection to the fabric lost", "port", p.name, "err", err)
	a := p.Attr()
	a.State, a.PhysState = ib.StateDown, ib.PhysPolling
	p.setAttr(&a)
}

func (p *Port) setAttr(a *ib.PortAttr) {
	p.attr.Store(a)
	if f := p.notify.Load(); f != nil {
		(*f)()
	}
}

// Close detaches the port (the server disconnects it from the fabric; its
// link stays up unless the server runs with DownOnDetach), stops the
// port's goroutines and waits for them; a Send waiting on backpressure
// fails with ErrClosed. If the writer cannot get the detach out within a
// keep-alive interval (the fabric is pushing back), Close interrupts it:
// the stream may then end inside a frame, and the server sees the client
// die and takes the link down.
func (p *Port) Close() error {
	return p.close(true)
}

// close ends the port; detach says whether to tell the server first (a
// process that dies does not).
func (p *Port) close(detach bool) error {
	p.qmu.Lock()
	if p.closed {
		p.qmu.Unlock()
		return fmt.Errorf("%w: %v", ErrClosed, p)
	}
	p.closed = true
	detach = detach && !p.lost.Load()
	if detach {
		p.sendPendingLocked()
		p.detachPending = true
		p.enqueue(appendFrame(nil, frameDetach, nil))
	}
	p.qcond.Broadcast()
	p.qmu.Unlock()
	if detach {
		t := time.NewTimer(p.ka)
		select {
		case <-p.detachWritten:
			// The server closes the connection after a detach: wait
			// for that (bounded), so that closing does not reset the
			// stream before the server has read the detach.
			select {
			case <-p.readerDone:
			case <-t.C:
			}
		case <-t.C:
			p.conn.SetWriteDeadline(time.Unix(1, 0))
		}
		t.Stop()
	}
	p.conn.Close()
	close(p.done)
	p.wg.Wait()
	p.NotifyAttr(nil)
	return nil
}

// sendPendingLocked is Close's wait, under qmu, for the frames that wait
// for credits (Send queued them; the credits come back as the server's
// lanes hand packets to the fabric): they go to the writer before the
// detach, after which the server reads nothing more, so that a program's
// last packets (the ACKs of what it received before closing) are not lost
// behind it. The wait ends when none is left, the connection is lost or a
// keep-alive interval has passed; what is left then is dropped.
func (p *Port) sendPendingLocked() {
	expired := false
	t := time.AfterFunc(p.ka, func() {
		p.qmu.Lock()
		expired = true
		p.qcond.Broadcast()
		p.qmu.Unlock()
	})
	defer t.Stop()
	for p.pending() && !expired && !p.lost.Load() {
		p.qcond.Wait()
	}
}

// pending reports whether frames wait for credits (under qmu).
func (p *Port) pending() bool {
	for v := range p.pend {
		if p.pendHead[v] < len(p.pend[v]) {
			return true
		}
	}
	return false
}

// Stats returns the port's counters.
func (p *Port) Stats() PortStats {
	return PortStats{Sent: p.sent.Load(), Received: p.received.Load(), NotStarted: p.notStarted.Load(),
		SendBad: p.sendBad.Load(), BadFrames: p.badFrames.Load(), AttrUpdate: p.attrUpdates.Load()}
}
