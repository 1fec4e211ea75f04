package remote

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
)

// DefaultAddr is where `softrdma fabric` serves HCA ports unless told
// otherwise, and where a client that names no address dials.
const DefaultAddr = "127.0.0.1:4792"

// DefaultKeepAlive is the keep-alive interval when a Config or Dialer
// leaves it zero. A peer that sends nothing for three intervals is dead.
const DefaultKeepAlive = time.Second

// rxBatch is the most packets handed on in one call, each way.
const rxBatch = 32

// Errors of the package.
var (
	// ErrClosed is returned by a closed Server or Port (it wraps
	// ib.ErrClosed).
	ErrClosed = fmt.Errorf("remote: closed (%w)", ib.ErrClosed)
	// ErrRefused means the server refused to attach the port; the error
	// also wraps fabric.ErrNoNode, fabric.ErrNoPort or
	// fabric.ErrPortInUse when that is the reason.
	ErrRefused = errors.New("remote: attach refused")
	// ErrDisconnected means the connection to the fabric was lost: the
	// server went away or stopped answering.
	ErrDisconnected = errors.New("remote: disconnected from the fabric")
)

// Config configures a Server.
type Config struct {
	// Network and Addr are where the server listens: "tcp" (the default)
	// and a host:port (default DefaultAddr), or "unix" and a socket path.
	Network, Addr string
	// KeepAlive is the interval at which each side sends a keep-alive
	// frame (default DefaultKeepAlive); a client silent for three
	// intervals is dead.
	KeepAlive time.Duration
	// DownOnDetach takes a port's link down also when its client detaches
	// on purpose (Close). Without it only a client that dies (its
	// connection breaks or falls silent) pulls the cable; one that
	// detaches leaves the port in the subnet as it was before it
	// attached.
	DownOnDetach bool
	// Logger receives the server's log (default slog.Default()).
	Logger *slog.Logger
}

// ServerStats counts a server's sessions and traffic.
type ServerStats struct {
	Attached  uint64 // sessions that attached a port
	Refused   uint64 // attach requests refused
	Detached  uint64 // sessions the client ended with a detach frame
	Died      uint64 // sessions that ended because the client died or fell silent (link pulled)
	PktsIn    uint64 // packets received from clients and handed to the fabric
	PktsOut   uint64 // packets the fabric delivered that were sent to clients
	BadFrames uint64 // frames dropped as malformed or unexpected
	Overruns  uint64 // data-VL packets a client sent beyond its credits, dropped
}

// Server serves a fabric's HCA ports to remote clients: each connection
// attaches one CA port (ConnectHCA) and carries its packets and attribute
// changes.
type Server struct {
	f   *fabric.Fabric
	cfg Config
	log *slog.Logger
	ln  net.Listener

	mu       sync.Mutex
	sessions map[*session]struct{}
	pulled   map[portKey]bool // links this server took down for dead clients
	closed   bool

	done chan struct{}
	wg   sync.WaitGroup

	attached, refused, detached, died, pktsIn, pktsOut, badFrames, overruns atomic.Uint64
}

type portKey struct {
	n    *fabric.Node
	port int
}

// NewServer listens for clients of f's HCA ports as cfg says. Serve
// accepts them.
func NewServer(f *fabric.Fabric, cfg Config) (*Server, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil fabric", ErrRefused)
	}
	if cfg.Network == "" {
		cfg.Network = "tcp"
	}
	if cfg.Addr == "" && cfg.Network != "unix" {
		cfg.Addr = DefaultAddr
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Network == "unix" {
		// A socket file left by a server that died: remove it, but only
		// if it is a socket and nothing answers on it.
		if fi, err := os.Lstat(cfg.Addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.DialTimeout("unix", cfg.Addr, time.Second); err == nil {
				c.Close()
				return nil, fmt.Errorf("remote: %s: a server already listens there", cfg.Addr)
			}
			os.Remove(cfg.Addr)
		}
	}
	ln, err := net.Listen(cfg.Network, cfg.Addr)
	if err != nil {
		return nil, err
	}
	return &Server{f: f, cfg: cfg, log: cfg.Logger, ln: ln,
		sessions: map[*session]struct{}{}, pulled: map[portKey]bool{}, done: make(chan struct{})}, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts clients until ctx ends or Close is called, then closes
// the server (every session ends, every port attached through it is
// disconnected) and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				s.wg.Wait()
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.Close()
			return err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			continue
		}
		ss := &session{s: s, conn: c, done: make(chan struct{}), inDone: make(chan struct{}),
			attrCh: make(chan struct{}, 1)}
		ss.credits.ready = make(chan struct{}, 1)
		s.sessions[ss] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go ss.run()
	}
}

// Close stops accepting, ends every session (their ports are disconnected
// from the fabric; the links stay as they are) and waits for the
// server's goroutines. The fabric is the caller's to close.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	close(s.done)
	var ss []*session
	for x := range s.sessions {
		ss = append(ss, x)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, x := range ss {
		x.abort()
	}
	s.wg.Wait()
	return nil
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Attached: s.attached.Load(), Refused: s.refused.Load(), Detached: s.detached.Load(),
		Died: s.died.Load(), PktsIn: s.pktsIn.Load(), PktsOut: s.pktsOut.Load(),
		BadFrames: s.badFrames.Load(), Overruns: s.overruns.Load(),
	}
}

// resolve finds the node a client names: a topology name, or a node GUID
// or port GUID in hex (with or without 0x).
func (s *Server) resolve(name string) *fabric.Node {
	if n := s.f.NodeByName(name); n != nil {
		return n
	}
	g, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(name), "0x"), 16, 64)
	if err != nil {
		return nil
	}
	if n := s.f.NodeByGUID(g); n != nil {
		return n
	}
	for _, n := range s.f.Nodes() {
		for p := 1; p <= n.NumPorts(); p++ {
			if n.PortGUID(p) == g {
				return n
			}
		}
	}
	return nil
}

// session is one client connection.
type session struct {
	s    *Server
	conn net.Conn
	hca  ib.Port
	key  portKey

	wmu  sync.Mutex // one frame batch at a time on conn
	wbuf []byte

	done   chan struct{}
	attrCh chan struct{}
	live   bool // attached: writes have no deadline (under wmu)

	// Per-VL flow control (lane.go): the reader puts each data-VL packet
	// in its VL's lane and never waits; the lanes' goroutines (lw) feed
	// the fabric and free credits, which go back to the client.
	lanes   [dataVLs]*lane // made by the reader on a VL's first packet
	lw      sync.WaitGroup
	inDone  chan struct{} // closed when the reader has ended: lanes drain and end
	credits sessionCredits
}

// abort ends the session from outside its reader: the connection is
// closed and the port disconnected, which also ends a Send blocked on the
// fabric's credits.
func (ss *session) abort() {
	ss.conn.Close()
	ss.s.mu.Lock()
	h := ss.hca
	ss.s.mu.Unlock()
	if h != nil {
		h.Close()
	}
}

func (ss *session) deadline() time.Time { return time.Now().Add(3 * ss.s.cfg.KeepAlive) }

// write sends frames already encoded; an error closes the connection, so
// the reader ends the session. Before the port is attached a write has
// three keep-alive intervals; after, none: a write blocks while the client
// does not read, which is the backpressure of a slow HCA, and a client
// that is gone is found by the reader (silence), which closes the
// connection and so ends the write.
func (ss *session) write(b []byte) error {
	if !ss.live {
		ss.conn.SetWriteDeadline(ss.deadline())
	}
	if _, err := ss.conn.Write(b); err != nil {
		ss.conn.Close()
		return err
	}
	return nil
}

func (ss *session) writeFrame(typ byte, body []byte) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	ss.wbuf = appendFrame(ss.wbuf[:0], typ, body)
	return ss.write(ss.wbuf)
}

func (ss *session) refuse(code byte, err error) {
	ss.s.refused.Add(1)
	ss.s.log.Info("remote: attach refused", "client", ss.conn.RemoteAddr(), "err", err)
	ss.writeFrame(frameRefused, refusal{Code: code, Msg: err.Error()}.encode())
}

func (ss *session) run() {
	s := ss.s
	defer s.wg.Done()
	defer func() {
		ss.conn.Close()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
	br := bufio.NewReaderSize(ss.conn, 64<<10)
	ss.conn.SetReadDeadline(ss.deadline())
	typ, body, _, err := readFrame(br, nil)
	if err != nil {
		if errors.Is(err, ErrBadFrame) {
			s.badFrames.Add(1)
		}
		s.log.Debug("remote: no attach", "client", ss.conn.RemoteAddr(), "err", err)
		return
	}
	if typ != frameAttach {
		s.badFrames.Add(1)
		ss.refuse(refuseBadRequest, fmt.Errorf("%w: frame type %d before attach", ErrBadFrame, typ))
		return
	}
	req, err := parseAttach(body)
	if err != nil {
		s.badFrames.Add(1)
		ss.refuse(refuseBadRequest, err)
		return
	}
	if !ss.attach(req) {
		return
	}
	ss.serve(br)
}

// attach connects the HCA port req names and answers the client.
func (ss *session) attach(req attachReq) bool {
	s := ss.s
	n := s.resolve(req.Node)
	if n == nil {
		ss.refuse(refuseNoNode, fmt.Errorf("%w: %q", fabric.ErrNoNode, req.Node))
		return false
	}
	key := portKey{n, req.Port}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.refuse(refuseClosed, ErrClosed)
		return false
	}
	if s.pulled[key] {
		// The port's last client died and this server pulled its cable:
		// plug it in again (the SM sees trap 128 and brings it up).
		if err := s.f.SetLink(n, req.Port, true); err == nil {
			delete(s.pulled, key)
		}
	}
	s.mu.Unlock()
	h, err := s.f.ConnectHCA(n, req.Port)
	if err != nil {
		code := byte(refuseOther)
		switch {
		case errors.Is(err, fabric.ErrNoPort):
			code = refuseNoPort
		case errors.Is(err, fabric.ErrPortInUse):
			code = refuseInUse
		case errors.Is(err, fabric.ErrNoNode):
			code = refuseNoNode
		case errors.Is(err, fabric.ErrClosed):
			code = refuseClosed
		}
		ss.refuse(code, err)
		return false
	}
	s.mu.Lock()
	ss.hca, ss.key = h, key
	closed := s.closed
	s.mu.Unlock()
	if closed {
		h.Close()
		return false
	}
	// Attribute changes are sent by the keep-alive goroutine, so that the
	// fabric's goroutine that reports them never waits on the network.
	h.NotifyAttr(func() {
		select {
		case ss.attrCh <- struct{}{}:
		default:
		}
	})
	a := h.Attr()
	s.attached.Add(1)
	// The port is started before the client hears it is attached: a
	// packet the fabric delivers from then on reaches the client (deliver
	// waits for wmu, so it follows the attached frame). Started later (in
	// serve), a peer told of the port at once (a pingpong's TCP exchange)
	// could send into it first, and the fabric dropped that (NoHCA): a UD
	// pingpong then waited forever for the lost message.
	ss.wmu.Lock()
	if err := h.Start(ss.deliver); err != nil {
		ss.wmu.Unlock()
		h.Close()
		return false
	}
	// The client's first credits go with the attached frame.
	ss.wbuf = appendFrame(appendFrame(ss.wbuf[:0], frameAttached, appendAttr(nil, &a)), frameCredit, initialCredits)
	err = ss.write(ss.wbuf)
	ss.wmu.Unlock()
	if err != nil {
		h.Close()
		return false
	}
	s.log.Info("remote: HCA port attached", "node", n.Name(), "port", req.Port, "client", ss.conn.RemoteAddr())
	return true
}

// deliver sends packets the fabric delivered at the port to the client,
// and the credits collected so far with them. It runs on the fabric's
// goroutine for the port and blocks while the connection does:
// backpressure into the fabric's credits.
func (ss *session) deliver(pkts [][]byte) {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	b := ss.wbuf[:0]
	for _, p := range pkts {
		b = appendFrame(b, framePacket, p)
	}
	b = ss.appendCreditFrame(b)
	ss.wbuf = b
	if ss.write(b) == nil {
		ss.s.pktsOut.Add(uint64(len(pkts)))
	}
}

// keepAlive sends a keep-alive frame every interval, the port's
// attributes after each change, and credits once a VL has collected
// creditReturn of them, until the session ends.
func (ss *session) keepAlive() {
	t := time.NewTicker(ss.s.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-ss.done:
			return
		case <-t.C:
			if ss.writeFrame(frameKeepAlive, nil) != nil {
				ss.abort()
				return
			}
		case <-ss.credits.ready:
			ss.wmu.Lock()
			ss.wbuf = ss.appendCreditFrame(ss.wbuf[:0])
			var err error
			if len(ss.wbuf) > 0 {
				err = ss.write(ss.wbuf)
			}
			ss.wmu.Unlock()
			if err != nil {
				ss.abort()
				return
			}
		case <-ss.attrCh:
			a := ss.hca.Attr()
			if ss.writeFrame(frameAttr, appendAttr(nil, &a)) != nil {
				ss.abort()
				return
			}
		}
	}
}

// serve runs an attached session: it reads the client's frames, puts
// each data-VL packet in its VL's lane (which feeds the fabric) and hands
// VL15 packets to the fabric itself, in batches; it ends on a detach
// frame, a broken or silent connection, or the server's Close. It never
// waits for the fabric: a client with credits for a packet has a slot
// for it in the lane.
func (ss *session) serve(br *bufio.Reader) {
	s := ss.s
	ss.wmu.Lock()
	ss.live = true
	ss.conn.SetWriteDeadline(time.Time{})
	ss.wmu.Unlock()
	var kw sync.WaitGroup
	kw.Add(1)
	go func() { defer kw.Done(); ss.keepAlive() }()

	bufs := make([][]byte, rxBatch) // VL15 packets and other frames
	mgmt := make([][]byte, 0, rxBatch)
	var scratch []byte // frames beyond a lane's credits, read and dropped
	detached := false
	var err error
	for err == nil && !detached {
		mgmt = mgmt[:0]
		var kicked uint32 // lanes given packets in this batch
		for got := 0; got < rxBatch && !detached && err == nil; got++ {
			if got > 0 && br.Buffered() < 4 {
				break // hand on what we have rather than wait
			}
			if br.Buffered() == 0 {
				ss.conn.SetReadDeadline(ss.deadline())
			}
			// A packet frame of a data VL is read straight into its
			// lane: its length, type and first LRH byte say which.
			var h []byte
			if h, err = br.Peek(4); err != nil {
				break
			}
			if n := binary.BigEndian.Uint32(h); n >= 11 && n <= maxFrameLen {
				if h, err = br.Peek(6); err != nil {
					break
				}
				if v := packetVL(h[5:]); h[4] == framePacket && v < dataVLs {
					l := ss.laneFor(v)
					i, buf, ok := l.tail()
					if !ok {
						// Beyond the client's credits: a broken client.
						s.overruns.Add(1)
						_, _, scratch, err = readFrame(br, scratch)
						continue
					}
					var body []byte
					if _, body, buf, err = readFrame(br, buf); err != nil {
						break
					}
					l.commit(i, buf, body)
					kicked |= 1 << v
					continue
				}
			}
			var typ byte
			var body []byte
			k := len(mgmt)
			typ, body, bufs[k], err = readFrame(br, bufs[k])
			if err != nil {
				break
			}
			switch typ {
			case framePacket:
				if checkPacket(body) != nil {
					s.badFrames.Add(1)
					continue
				}
				mgmt = append(mgmt, body)
			case frameKeepAlive:
			case frameDetach:
				detached = true
			default:
				s.badFrames.Add(1)
			}
		}
		for v := range dataVLs {
			if kicked&(1<<v) != 0 {
				ss.lanes[v].kick()
			}
		}
		if len(mgmt) > 0 {
			// VL15 never waits in the fabric (it drops when VL15's
			// buffer is full, as the fabric does).
			if e := ss.hca.Send(mgmt); e != nil && err == nil {
				err = e
				break
			}
			s.pktsIn.Add(uint64(len(mgmt)))
		}
	}
	// The lanes hand on what they hold, for up to half a keep-alive
	// interval (a VL the fabric holds back may not drain); then the
	// port closes, which ends a lane still waiting in the fabric.
	close(ss.inDone)
	drained := make(chan struct{})
	go func() { ss.lw.Wait(); close(drained) }()
	t := time.NewTimer(s.cfg.KeepAlive / 2)
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	close(ss.done)
	if detached {
		// Release the port before the client sees the connection end
		// (its Close waits for that): a client attaching right after
		// finds it free. Writes to the client still go through.
		ss.hca.Close()
	}
	ss.conn.Close()
	kw.Wait()
	ss.hca.Close() // a second Close (after a detach) does nothing
	<-drained
	if errors.Is(err, ErrBadFrame) {
		s.badFrames.Add(1)
	}
	n, port := ss.key.n, ss.key.port
	select {
	case <-s.done:
		s.log.Info("remote: HCA port disconnected (server closing)", "node", n.Name(), "port", port)
		return
	default:
	}
	// The counters move after the link, so that a reader of Stats sees
	// the port as the session left it.
	if detached {
		defer s.detached.Add(1)
		s.log.Info("remote: HCA port detached", "node", n.Name(), "port", port)
		if !s.cfg.DownOnDetach {
			return
		}
	} else {
		defer s.died.Add(1)
		s.log.Warn("remote: HCA port's client lost: link down", "node", n.Name(), "port", port, "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.f.SetLink(n, port, false); err != nil {
		s.log.Warn("remote: cannot take the link down", "node", n.Name(), "port", port, "err", err)
		return
	}
	s.pulled[ss.key] = true
}
