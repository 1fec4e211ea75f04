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
		return fail(ctx.Err())
	}
	conn.SetDeadline(time.Time{})
	p := &Port{conn: conn, br: br, ka: ka, log: log, name: fmt.Sprintf("%s/%d@%s", node, port, addr),
		done: make(chan struct{}), readerDone: make(chan struct{})}
	p.attr.Store(&a)
	p.wg.Add(2)
	go p.reader()
	go p.keepAlive()
	return p, nil
}

// PortStats counts a remote port's traffic.
type PortStats struct {
	Sent       uint64 // packets written to the server
	Received   uint64 // packets handed to the receive function
	NotStarted uint64 // packets that arrived before Start, dropped
	SendBad    uint64 // packets Send dropped: shorter than an LRH and VCRC, or longer than ib.MaxFrame
	BadFrames  uint64 // frames from the server dropped as malformed or unexpected
	AttrUpdate uint64 // attribute updates received
}

// Port is an HCA port of a fabric in another process, attached with Dial.
// It implements ib.Port. When the connection is lost its attributes turn
// to DOWN (NotifyAttr's function is called) and Send fails with an error
// wrapping ErrDisconnected.
type Port struct {
	conn net.Conn
	br   *bufio.Reader
	ka   time.Duration
	log  *slog.Logger
	name string

	attr   atomic.Pointer[ib.PortAttr]
	notify atomic.Pointer[func()]
	recv   atomic.Pointer[func([][]byte)]

	wmu  sync.Mutex // one frame batch at a time on conn
	wbuf []byte

	mu      sync.Mutex // guards started, closed
	started bool
	closed  bool
	lost    atomic.Bool

	done       chan struct{}
	readerDone chan struct{}
	wg         sync.WaitGroup

	sent, received, notStarted, sendBad, badFrames, attrUpdates atomic.Uint64
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
	p.mu.Lock()
	defer p.mu.Unlock()
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

// Send writes whole IB packets to the fabric, in one write. It blocks
// while the connection does (the fabric's credits push back through it),
// until the packets are written or the connection is lost or closed.
// Packets too short or too long for an IB packet are dropped and counted.
func (p *Port) Send(pkts [][]byte) error {
	if p.lost.Load() {
		return fmt.Errorf("%w: %v", ErrDisconnected, p)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.isClosed() {
		return fmt.Errorf("%w: %v", ErrClosed, p)
	}
	b := p.wbuf[:0]
	n := 0
	for _, pkt := range pkts {
		if len(pkt) < 10 || len(pkt) > maxPacket {
			p.sendBad.Add(1)
			continue
		}
		b = appendFrame(b, framePacket, pkt)
		n++
	}
	p.wbuf = b
	if n == 0 {
		return nil
	}
	if err := p.write(b); err != nil {
		return err
	}
	p.sent.Add(uint64(n))
	return nil
}

func (p *Port) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// write sends encoded frames under p.wmu; a failure loses the
// connection. It has no deadline: it blocks while the fabric pushes back,
// however long; a server that is gone is found by the reader (silence),
// which closes the connection and so ends the write.
func (p *Port) write(b []byte) error {
	if _, err := p.conn.Write(b); err != nil {
		p.conn.Close()
		if p.isClosed() {
			return fmt.Errorf("%w: %v", ErrClosed, p)
		}
		return fmt.Errorf("%w: %v: %w", ErrDisconnected, p, err)
	}
	return nil
}

func (p *Port) writeFrame(typ byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.write(appendFrame(nil, typ, nil))
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
			case frameKeepAlive:
			default:
				p.badFrames.Add(1)
			}
		}
		if len(batch) > 0 {
			if f := p.recv.Load(); f != nil {
				(*f)(batch)
				p.received.Add(uint64(len(batch)))
			} else {
				p.notStarted.Add(uint64(len(batch)))
			}
			clear(batch)
		}
	}
	if errors.Is(err, ErrBadFrame) {
		p.badFrames.Add(1)
	}
	if p.isClosed() {
		return
	}
	// The server went away, broke the stream or fell silent: the cable
	// is as good as pulled.
	p.lost.Store(true)
	p.conn.Close()
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

// keepAlive sends a keep-alive frame every interval.
func (p *Port) keepAlive() {
	defer p.wg.Done()
	t := time.NewTicker(p.ka)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			if p.lost.Load() {
				return
			}
			if p.writeFrame(frameKeepAlive) != nil {
				return
			}
		}
	}
}

// Close detaches the port (the server disconnects it from the fabric; its
// link stays up unless the server runs with DownOnDetach), stops the
// port's goroutines and waits for them. A Send blocked on the fabric's
// backpressure fails; the detach cannot follow it (the stream may hold
// part of a frame), so the server then sees the client die and takes the
// link down.
func (p *Port) Close() error {
	return p.close(true)
}

// close ends the port; detach says whether to tell the server first (a
// process that dies does not).
func (p *Port) close(detach bool) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrClosed, p)
	}
	p.closed = true
	p.mu.Unlock()
	if detach {
		if !p.lockSoon(50 * time.Millisecond) {
			// A Send is blocked on the fabric's backpressure: interrupt
			// it. It may have written part of a frame, so no detach can
			// follow: the server sees the port's client die.
			p.conn.SetWriteDeadline(time.Unix(1, 0))
			p.wmu.Lock()
			detach = false
		}
		var err error
		if detach && !p.lost.Load() {
			p.conn.SetWriteDeadline(time.Now().Add(p.ka))
			_, err = p.conn.Write(appendFrame(nil, frameDetach, nil))
		}
		p.wmu.Unlock()
		if detach && err == nil {
			// The server closes the connection after a detach: wait for
			// that (bounded), so that closing does not reset the stream
			// before the server has read the detach.
			t := time.NewTimer(p.ka)
			select {
			case <-p.readerDone:
			case <-t.C:
			}
			t.Stop()
		}
	}
	p.conn.Close()
	close(p.done)
	p.wg.Wait()
	p.NotifyAttr(nil)
	return nil
}

// lockSoon takes p.wmu if it is free within d.
func (p *Port) lockSoon(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.wmu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Stats returns the port's counters.
func (p *Port) Stats() PortStats {
	return PortStats{Sent: p.sent.Load(), Received: p.received.Load(), NotStarted: p.notStarted.Load(),
		SendBad: p.sendBad.Load(), BadFrames: p.badFrames.Load(), AttrUpdate: p.attrUpdates.Load()}
}
