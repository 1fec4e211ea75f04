package ibsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config configures a Server. The zero value serves unix clients on
// ibsim's default names.
type Config struct {
	// Network is "unix" (abstract unix datagram sockets, ibsim's default)
	// or "udp" (ibsim -r: clients set IBSIM_SERVER_NAME and
	// IBSIM_SERVER_PORT). Empty means "unix".
	Network string
	// SockName is the base of the unix socket names (IBSIM_SOCKNAME);
	// empty means DefaultBase.
	SockName string
	// Addr is the UDP host:port of the control socket; client slot N is
	// served on the next port + N. Empty means ":7070".
	Addr string
	// Logger receives the server's log; nil means slog.Default().
	Logger *slog.Logger
	// QueueLen bounds each client's queue of MADs waiting for its socket;
	// 0 means 256. A MAD arriving at a full queue is dropped and counted.
	QueueLen int
	// WriteTimeout bounds a write to a client's socket, which blocks while
	// the client does not read; 0 means one second. A write that times out
	// drops its MAD and counts it in Stats.WriteErrors.
	WriteTimeout time.Duration
}

// Errors of the server; test with errors.Is.
var (
	// ErrServerClosed is returned by Serve after Close.
	ErrServerClosed = errors.New("ibsim: server closed")
	// ErrConfig means a Config field is invalid.
	ErrConfig = errors.New("ibsim: bad config")
)

// Stats counts what a server did.
type Stats struct {
	CtlRequests   uint64 // control messages answered
	CtlDropped    uint64 // control messages dropped: bad size, magic or slot
	Connects      uint64 // clients connected
	Requests      uint64 // MAD requests received from clients
	BadRequests   uint64 // datagrams dropped: bad size, no client, unknown sender
	Undeliverable uint64 // MADs the fabric refused, returned with StatusTimeout
	Delivered     uint64 // MADs written to clients
	Unclaimed     uint64 // MADs the fabric delivered that no client takes
	QueueFull     uint64 // MADs dropped at a full client queue
	WriteErrors   uint64 // writes to a client's socket that failed
}

type stats struct {
	ctlRequests, ctlDropped, connects, requests, badRequests, undeliverable,
	delivered, unclaimed, queueFull, writeErrors atomic.Uint64
}

// Server serves ibsim's client protocol over a Backend.
type Server struct {
	b        Backend
	log      *slog.Logger
	unix     bool
	base     string
	queueLen int
	wtimeout time.Duration
	ctl      net.PacketConn
	out      [MaxClients]net.PacketConn

	mu       sync.Mutex
	sessions [MaxClients]*session
	attached map[portKey]*attachment

	st        stats
	wg        sync.WaitGroup
	closed    chan struct{}
	closeOnce sync.Once
	serving   atomic.Bool
	served    chan struct{} // closed when Serve has shut down
}

type portKey struct {
	node Node
	port int
}

// attachment is one fabric attachment, shared by the clients at a port.
type attachment struct {
	key  portKey
	p    Port
	refs int
}

// session is a connected client.
type session struct {
	slot  int
	id    uint32 // the client's pid (unix) or input port (udp)
	addr  net.Addr
	node  Node
	port  int
	qp    uint32
	issm  bool
	att   *attachment
	q     chan []byte
	done  chan struct{}
	gone  sync.Once
	ended sync.WaitGroup
}

// NewServer binds the server's sockets: the control socket and one per
// client slot. Serve then answers clients.
func NewServer(b Backend, cfg Config) (*Server, error) {
	s := &Server{b: b, log: cfg.Logger, base: cfg.SockName, queueLen: cfg.QueueLen,
		attached: make(map[portKey]*attachment), closed: make(chan struct{}), served: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.base == "" {
		s.base = DefaultBase
	}
	if s.queueLen <= 0 {
		s.queueLen = 256
	}
	if s.wtimeout = cfg.WriteTimeout; s.wtimeout <= 0 {
		s.wtimeout = time.Second
	}
	if len(b.Nodes()) == 0 {
		return nil, fmt.Errorf("%w: the fabric has no nodes", ErrConfig)
	}
	var err error
	switch cfg.Network {
	case "", "unix":
		if runtime.GOOS != "linux" {
			return nil, fmt.Errorf("%w: ibsim's abstract unix sockets exist on Linux only (use udp)", ErrConfig)
		}
		s.unix = true
		err = s.bindUnix()
	case "udp":
		err = s.bindUDP(cfg.Addr)
	default:
		return nil, fmt.Errorf("%w: network %q (want unix or udp)", ErrConfig, cfg.Network)
	}
	if err != nil {
		s.closeSockets()
		return nil, err
	}
	return s, nil
}

// abstract returns the unix address ibsim's make_name builds: an abstract
// name that ends in a NUL byte.
func abstract(name string) *net.UnixAddr {
	return &net.UnixAddr{Name: "@" + name + "\x00", Net: "unixgram"}
}

// peer returns the address to answer a datagram from: the sender's, where
// an abstract unix name gets back the NUL byte ibsim's clients end it with
// and Go's net package cuts.
func peer(from net.Addr) net.Addr {
	if u, ok := from.(*net.UnixAddr); ok && strings.HasPrefix(u.Name, "@") && !strings.HasSuffix(u.Name, "\x00") {
		return &net.UnixAddr{Name: u.Name + "\x00", Net: u.Net}
	}
	return from
}

func (s *Server) bindUnix() error {
	c, err := net.ListenUnixgram("unixgram", abstract(s.base+":ctl"))
	if err != nil {
		return fmt.Errorf("ibsim: control socket %q: %w", s.base+":ctl", err)
	}
	s.ctl = c
	for i := range s.out {
		c, err := net.ListenUnixgram("unixgram", abstract(s.base+":out"+strconv.Itoa(i)))
		if err != nil {
			return fmt.Errorf("ibsim: client socket %d: %w", i, err)
		}
		s.out[i] = c
	}
	return nil
}

func (s *Server) bindUDP(addr string) error {
	if addr == "" {
		addr = ":" + strconv.Itoa(DefaultPort)
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port <= 0 || port+MaxClients > 65535 {
		return fmt.Errorf("%w: port %q", ErrConfig, ps)
	}
	c, err := net.ListenPacket("udp4", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("ibsim: control socket: %w", err)
	}
	s.ctl = c
	for i := range s.out {
		c, err := net.ListenPacket("udp4", net.JoinHostPort(host, strconv.Itoa(port+i+1)))
		if err != nil {
			return fmt.Errorf("ibsim: client socket %d: %w", i, err)
		}
		s.out[i] = c
	}
	return nil
}

// Addr returns the address of the control socket.
func (s *Server) Addr() net.Addr { return s.ctl.LocalAddr() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		CtlRequests: s.st.ctlRequests.Load(), CtlDropped: s.st.ctlDropped.Load(),
		Connects: s.st.connects.Load(), Requests: s.st.requests.Load(),
		BadRequests: s.st.badRequests.Load(), Undeliverable: s.st.undeliverable.Load(),
		Delivered: s.st.delivered.Load(), Unclaimed: s.st.unclaimed.Load(),
		QueueFull: s.st.queueFull.Load(), WriteErrors: s.st.writeErrors.Load(),
	}
}

// Serve answers clients until ctx ends or Close is called, then
// disconnects every client and detaches from the fabric. It returns nil
// when ctx ended, ErrServerClosed after Close.
func (s *Server) Serve(ctx context.Context) error {
	if !s.serving.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Serve called twice", ErrConfig)
	}
	defer close(s.served)
	select {
	case <-s.closed:
		s.shutdown()
		return ErrServerClosed
	default:
	}
	s.wg.Add(1 + MaxClients)
	go s.ctlLoop()
	for i := range s.out {
		go s.dataLoop(i)
	}
	var err error
	select {
	case <-ctx.Done():
	case <-s.closed:
		err = ErrServerClosed
	}
	s.shutdown()
	return err
}

// Close stops Serve and releases the sockets and the fabric attachments.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	if s.serving.Load() {
		<-s.served
	} else {
		s.shutdown()
	}
	return nil
}

func (s *Server) shutdown() {
	s.closeOnce.Do(func() { close(s.closed) })
	s.closeSockets()
	s.wg.Wait()
	for i := range s.sessions {
		if sess := s.session(uint32(i)); sess != nil {
			s.disconnect(sess, false, true)
		}
	}
}

func (s *Server) closeSockets() {
	if s.ctl != nil {
		s.ctl.Close()
	}
	for _, c := range s.out {
		if c != nil {
			c.Close()
		}
	}
}

func (s *Server) ctlLoop() {
	defer s.wg.Done()
	buf := make([]byte, CtlSize+1)
	for {
		n, from, err := s.ctl.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("ibsim: control read", "err", err)
			continue
		}
		c, err := ParseCtl(buf[:n])
		if err != nil {
			s.st.ctlDropped.Add(1)
			s.log.Warn("ibsim: bad control message dropped", "from", from, "err", err)
			continue
		}
		if c.ClientID >= MaxClients && c.Type != CtlConnect {
			s.st.ctlDropped.Add(1)
			s.log.Warn("ibsim: control message for a bad client slot dropped", "slot", c.ClientID, "type", c.Type)
			continue
		}
		from = peer(from)
		s.control(&c, from)
		s.st.ctlRequests.Add(1)
		out := c.Append(make([]byte, 0, CtlSize))
		if _, err := s.ctl.WriteTo(out, from); err != nil {
			s.log.Warn("ibsim: control reply", "to", from, "err", err)
		}
	}
}

// control answers c in place, setting Type to CtlError on failure.
func (s *Server) control(c *Ctl, from net.Addr) {
	var err error
	if c.Type == CtlConnect {
		err = s.connect(c, from)
	} else {
		err = s.query(c)
	}
	if err != nil {
		s.log.Warn("ibsim: control request refused", "type", c.Type, "slot", c.ClientID, "err", err)
		c.Type = CtlError
	}
}

func (s *Server) connect(c *Ctl, from net.Addr) error {
	ci, err := ParseClientInfo(c.Data[:])
	if err != nil {
		return err
	}
	node, err := s.findNode(ci.NodeID)
	if err != nil {
		return err
	}
	port := clientPort(node)
	addr, err := s.clientAddr(ci.ID, from)
	if err != nil {
		return err
	}
	sess := &session{id: ci.ID, addr: addr, node: node, port: port, qp: ci.QP,
		issm: ci.IsSM != 0, q: make(chan []byte, s.queueLen), done: make(chan struct{})}

	s.mu.Lock()
	slot := -1
	for i, o := range s.sessions {
		if o == nil && slot < 0 {
			slot = i
		}
		if o != nil && sess.issm && o.issm && o.node == node {
			s.mu.Unlock()
			return fmt.Errorf("client %d: an SM is already attached at %q", ci.ID, node.Name())
		}
	}
	if slot < 0 {
		s.mu.Unlock()
		return fmt.Errorf("client %d: all %d slots are taken", ci.ID, MaxClients)
	}
	sess.slot = slot
	key := portKey{node, port}
	att := s.attached[key]
	if att == nil {
		att = &attachment{key: key}
		p, err := s.b.Attach(node, port, func(d *Datagram) { s.deliver(att, d) })
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("attach at %q port %d: %w", node.Name(), port, err)
		}
		att.p = p
		s.attached[key] = att
	}
	att.refs++
	sess.att = att
	s.sessions[slot] = sess
	sess.ended.Add(1)
	go s.writer(sess)
	s.mu.Unlock()

	s.st.connects.Add(1)
	s.log.Info("ibsim: client connected", "slot", slot, "id", ci.ID, "node", node.Name(), "port", port, "issm", sess.issm)
	ci.ID = uint32(slot)
	ci.NodeID = node.Name()
	ci.Encode(c.Data[:])
	return nil
}

// findNode finds the node a client names, by topology name first and then
// by NodeDescription, as ibsim does; an empty name is the first node.
func (s *Server) findNode(name string) (Node, error) {
	nodes := s.b.Nodes()
	if name == "" {
		return nodes[0], nil
	}
	for _, n := range nodes {
		if n.Name() == name {
			return n, nil
		}
	}
	for _, n := range nodes {
		d, err := s.b.Query(n, attrNodeDesc, 0)
		if err == nil && cString(d) == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %q in the fabric", name)
}

func (s *Server) clientAddr(id uint32, from net.Addr) (net.Addr, error) {
	if s.unix {
		return abstract(s.base + ":in" + strconv.FormatUint(uint64(id), 10)), nil
	}
	u, ok := from.(*net.UDPAddr)
	if !ok || id == 0 || id > 65535 {
		return nil, fmt.Errorf("client id %d from %v is no UDP port", id, from)
	}
	return &net.UDPAddr{IP: u.IP, Port: int(id)}, nil
}

// disconnect ends sess if it still holds its slot; dead means the client
// vanished without DISCONNECT, which clears its IsSM bit as ibsim does.
// wait waits for the session's writer to end (not from the writer itself).
func (s *Server) disconnect(sess *session, dead, wait bool) {
	s.mu.Lock()
	slot := sess.slot
	if s.sessions[slot] != sess {
		s.mu.Unlock()
		return
	}
	s.sessions[slot] = nil
	att := sess.att
	att.refs--
	last := att.refs == 0
	if last {
		delete(s.attached, att.key)
	}
	s.mu.Unlock()

	sess.gone.Do(func() { close(sess.done) })
	if wait {
		sess.ended.Wait()
	}
	if last {
		if err := att.p.Close(); err != nil {
			s.log.Debug("ibsim: detach", "node", sess.node.Name(), "err", err)
		}
	}
	if dead && sess.issm {
		if err := s.b.SetIsSM(sess.node, sess.port, false); err != nil {
			s.log.Warn("ibsim: clearing IsSM", "node", sess.node.Name(), "err", err)
		}
	}
	s.log.Info("ibsim: client disconnected", "slot", slot, "id", sess.id, "vanished", dead)
}

func (s *Server) session(slot uint32) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot >= MaxClients {
		return nil
	}
	return s.sessions[slot]
}

// query answers every control message but CONNECT.
func (s *Server) query(c *Ctl) error {
	sess := s.session(c.ClientID)
	if c.Type == CtlDisconnect {
		if sess != nil {
			s.disconnect(sess, false, true)
		}
		return nil
	}
	if sess == nil {
		return fmt.Errorf("no client in slot %d", c.ClientID)
	}
	switch c.Type {
	case CtlGetPort:
		pi, err := s.b.Query(sess.node, attrPortInfo, uint32(sess.port))
		if err != nil {
			return err
		}
		ps := PortState{LID: be.Uint16(pi[16:]), State: pi[32] & 0x0f}
		ps.Encode(c.Data[:])
	case CtlGetVendor:
		ni, err := s.b.Query(sess.node, attrNodeInfo, 0)
		if err != nil {
			return err
		}
		v := Vendor{VendorID: be.Uint32(ni[36:]) & 0xffffff, VendorPartID: uint32(be.Uint16(ni[30:])),
			HWVersion: be.Uint32(ni[32:]), FWVersion: 1}
		v.Encode(c.Data[:])
	case CtlGetGID:
		pi, err := s.b.Query(sess.node, attrPortInfo, uint32(sess.port))
		if err != nil {
			return err
		}
		copy(c.Data[0:8], pi[8:16])
		host.PutUint64(c.Data[8:], sess.node.GUID())
	case CtlGetGUID:
		host.PutUint64(c.Data[0:], sess.node.GUID())
	case CtlGetNodeInfo:
		ni, err := s.b.Query(sess.node, attrNodeInfo, 0)
		if err != nil {
			return err
		}
		copy(c.Data[:], ni)
	case CtlGetPortInfo:
		pn := int(c.Data[0])
		if pn == 0 || pn > sess.node.NumPorts() {
			pn = sess.port
		}
		pi, err := s.b.Query(sess.node, attrPortInfo, uint32(pn))
		if err != nil {
			return err
		}
		copy(c.Data[:], pi)
	case CtlSetIsSM:
		on := int32(host.Uint32(c.Data[:])) != 0
		if err := s.b.SetIsSM(sess.node, sess.port, on); err != nil {
			return err
		}
		s.mu.Lock()
		sess.issm = on
		s.mu.Unlock()
	case CtlGetPKeys:
		ni, err := s.b.Query(sess.node, attrNodeInfo, 0)
		if err != nil {
			return err
		}
		pk, err := s.b.Query(sess.node, attrPKeyTable, 0)
		if err != nil {
			return err
		}
		n := min(2*int(be.Uint16(ni[28:])), CtlDataSize, len(pk))
		clear(c.Data[:])
		copy(c.Data[:n], pk)
	default:
		return fmt.Errorf("unknown control type %v", c.Type)
	}
	return nil
}

// dataLoop reads the MAD requests of client slot i.
func (s *Server) dataLoop(i int) {
	defer s.wg.Done()
	buf := make([]byte, 2*RequestSize)
	for {
		n, from, err := s.out[i].ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("ibsim: client read", "slot", i, "err", err)
			continue
		}
		sess := s.session(uint32(i))
		if sess == nil || from == nil || peer(from).String() != sess.addr.String() {
			s.st.badRequests.Add(1)
			s.log.Debug("ibsim: datagram from no client dropped", "slot", i, "from", from)
			continue
		}
		r, err := ParseRequest(buf[:n])
		if err != nil {
			s.st.badRequests.Add(1)
			s.log.Warn("ibsim: bad MAD request dropped", "slot", i, "err", err)
			continue
		}
		s.st.requests.Add(1)
		s.send(sess, &r)
	}
}

// send injects a client's MAD into the fabric. A request's transaction ID
// carries the client's slot in its top 16 bits, as ibsim marks it, so that
// the response finds its way back to the same client.
func (s *Server) send(sess *session, r *Request) {
	if !r.IsResponse() {
		r.SetTID(r.TID()&(1<<48-1) | uint64(sess.slot)<<48)
	}
	if r.SLID == 0 && r.MAD[madMgmtClass] != classDirected {
		if pi, err := s.b.Query(sess.node, attrPortInfo, uint32(sess.port)); err == nil {
			r.SLID = be.Uint16(pi[16:])
		}
	}
	d := &Datagram{SLID: r.SLID, DLID: r.DLID, SQP: r.SQP, DQP: r.DQP, MAD: make([]byte, MADSize)}
	copy(d.MAD, r.MAD[:])
	if err := sess.att.p.Send(d); err != nil {
		s.st.undeliverable.Add(1)
		s.log.Debug("ibsim: MAD undeliverable", "slot", sess.slot, "dlid", r.DLID, "err", err)
		r.Status = StatusTimeout
		s.enqueue(sess, r.Append(make([]byte, 0, RequestSize)))
	}
}

// deliver hands a MAD the fabric delivered at att's port to a client there,
// chosen as ibsim's find_client chooses: a response (or a request the
// fabric returns with a status) goes to the client whose slot its
// transaction ID carries; a MAD for a QP above 1 to the
// client serving that QP; a request for QP0 or QP1 to the port's SM.
func (s *Server) deliver(att *attachment, d *Datagram) {
	r := Request{DLID: d.DLID, SLID: d.SLID, DQP: d.DQP, SQP: d.SQP, Status: uint32(d.Status), Length: MADSize}
	copy(r.MAD[:], d.MAD)
	resp := r.IsResponse()
	var to *session
	s.mu.Lock()
	// A response, or a request of ours the fabric reports undeliverable,
	// goes back to the client whose slot the TID carries.
	if resp || r.Status != 0 {
		if i := r.TID() >> 48; i < MaxClients {
			if o := s.sessions[i]; o != nil && o.att == att {
				to = o
			}
		}
	}
	for _, o := range s.sessions {
		if to != nil {
			break
		}
		if o == nil || o.att != att {
			continue
		}
		if r.DQP > 1 {
			if r.DQP == o.qp {
				to = o
			}
		} else if !resp && o.issm {
			to = o
		}
	}
	s.mu.Unlock()
	if to == nil {
		s.st.unclaimed.Add(1)
		s.log.Debug("ibsim: MAD for no client dropped", "node", att.key.node.Name(),
			"class", r.MAD[madMgmtClass], "attr", be.Uint16(r.MAD[madAttrID:]))
		return
	}
	s.enqueue(to, r.Append(make([]byte, 0, RequestSize)))
}

func (s *Server) enqueue(sess *session, b []byte) {
	select {
	case <-sess.done:
	case sess.q <- b:
	default:
		s.st.queueFull.Add(1)
		s.log.Debug("ibsim: client queue full, MAD dropped", "slot", sess.slot)
	}
}

// writer writes a client's queued MADs to its socket. A client whose
// socket is gone is disconnected.
func (s *Server) writer(sess *session) {
	defer sess.ended.Done()
	for {
		select {
		case <-sess.done: // before anything queued
			return
		default:
		}
		select {
		case <-sess.done:
			return
		case b := <-sess.q:
			// A client that does not read fills its socket's queue; the
			// write gives up after the write timeout rather than hold the
			// session (and a DISCONNECT waiting for it) forever.
			s.out[sess.slot].SetWriteDeadline(time.Now().Add(s.wtimeout))
			if _, err := s.out[sess.slot].WriteTo(b, sess.addr); err != nil {
				s.st.writeErrors.Add(1)
				if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
					s.log.Warn("ibsim: client vanished, disconnecting", "slot", sess.slot, "id", sess.id)
					s.disconnect(sess, true, false)
					return
				}
				if errors.Is(err, net.ErrClosed) {
					return
				}
				s.log.Debug("ibsim: write to client", "slot", sess.slot, "err", err)
				continue
			}
			s.st.delivered.Add(1)
		}
	}
}
