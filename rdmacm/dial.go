// The Go-style layer: Dial and Listen return connected RC queue pairs with
// their PD and CQ, honouring contexts; a listener can also hand out the
// requests themselves, for the program to accept or reject.

package rdmacm

import (
	"context"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// ConnOptions configure Dial and Listen.
//
// The resources of a connection are the connection's own unless the
// caller supplies them: with PD set, every connection made with these
// options shares that protection domain, so memory registered before
// connecting (and its keys, sent in private data) serves all of them.
// Supplied objects stay the caller's: Conn.Close leaves them, and the
// caller frees them after the last connection using them is closed.
type ConnOptions struct {
	// CM is the rdma_cm instance to use (required).
	CM *CM
	// Source is Dial's source address; unset means the route's.
	Source netip.Addr
	// Cap sizes the QP (default 64 WRs each way, 1 SGE, 64 inline bytes).
	Cap verbs.QPCap
	// PD is the protection domain to create the QP in. It must belong to
	// the device the connection uses (the one owning the source address).
	// Unset: each connection allocates its own.
	PD *verbs.PD
	// SendCQ and RecvCQ are CQs for the QP's sends and receives. Setting
	// one alone uses it for both. Unset: the connection creates one CQ of
	// depth CQE for both, attached to CompChannel.
	SendCQ, RecvCQ *verbs.CQ
	// CompChannel is the completion channel of the CQ the connection
	// creates, so that a program can sleep on CQ events (ReqNotify and
	// CompChannel.Get). Unset: none; CQ.Wait and CQ.Poll need none.
	CompChannel *verbs.CompChannel
	// CQE is the depth of the CQ the connection creates (default
	// MaxSendWR + MaxRecvWR).
	CQE int
	// Param are the connection parameters: private data, responder
	// resources, initiator depth, retry and RNR retry counts. Zero
	// resources and depth mean 1; zero retry counts mean 7.
	Param ConnParam
	// Backlog bounds the connections a Listener holds before Accept, or
	// the requests before Request (default 128).
	Backlog int
	// AcceptControl makes a Listener hand out each incoming request with
	// Request instead of accepting it by itself: the program reads the
	// peer's private data, may create the QP and post receives first,
	// then accepts or rejects (librdmacm's model). Listener.Accept is not
	// used then.
	AcceptControl bool
}

func (o *ConnOptions) withDefaults() ConnOptions {
	x := *o
	if x.Cap.MaxSendWR == 0 {
		x.Cap.MaxSendWR = 64
	}
	if x.Cap.MaxRecvWR == 0 {
		x.Cap.MaxRecvWR = 64
	}
	if x.Cap.MaxSendSGE == 0 {
		x.Cap.MaxSendSGE = 1
	}
	if x.Cap.MaxRecvSGE == 0 {
		x.Cap.MaxRecvSGE = 1
	}
	if x.Cap.MaxInlineData == 0 {
		x.Cap.MaxInlineData = 64
	}
	if x.CQE == 0 {
		x.CQE = x.Cap.MaxSendWR + x.Cap.MaxRecvWR
	}
	if x.Param.ResponderResources == 0 {
		x.Param.ResponderResources = 1
	}
	if x.Param.InitiatorDepth == 0 {
		x.Param.InitiatorDepth = 1
	}
	if x.Param.RetryCount == 0 {
		x.Param.RetryCount = 7
	}
	if x.Param.RNRRetryCount == 0 {
		x.Param.RNRRetryCount = 7
	}
	if x.Backlog == 0 {
		x.Backlog = 128
	}
	if x.SendCQ == nil {
		x.SendCQ = x.RecvCQ
	}
	if x.RecvCQ == nil {
		x.RecvCQ = x.SendCQ
	}
	return x
}

// Conn is a connected RC queue pair with its PD and CQs.
type Conn struct {
	ID *ID
	PD *verbs.PD
	// CQ is the CQ of the QP's sends, and of its receives too unless
	// ConnOptions gave a separate RecvCQ.
	CQ *verbs.CQ
	// RecvCQ is the CQ of the QP's receives (the same as CQ unless
	// ConnOptions gave two).
	RecvCQ *verbs.CQ
	QP     *verbs.QP
	// Peer are the peer's connection parameters, with its private data.
	Peer ConnParam

	ownPD, ownCQ bool          // made by the connection, freed by Close
	ch           *EventChannel // Dial's own channel; nil for accepted Conns
	l            *Listener     // the listener of an accepted Conn
	est          chan error    // AcceptControl: the outcome of accepting
	disc         chan struct{}
	discOnce     sync.Once
	closeOnce    sync.Once
}

// Disconnected is closed when the peer disconnects (or the connection
// fails).
func (c *Conn) Disconnected() <-chan struct{} { return c.disc }

// signal hands the outcome of accepting to Request.Accept; only the
// first counts.
func (c *Conn) signal(err error) {
	select {
	case c.est <- err:
	default:
	}
}

func (c *Conn) markDisconnected() { c.discOnce.Do(func() { close(c.disc) }) }

// Close disconnects and frees the QP and ID, and the PD and CQ if the
// connection made them.
func (c *Conn) Close() error { return c.close(true) }

// close closes c; wait says whether to wait for the listener's event loop
// to end when c was the last connection of a closed listener (false on
// that loop's own goroutine).
func (c *Conn) close(wait bool) error {
	var err error
	last := false
	defer func() {
		if last && wait {
			<-c.l.done // outside closeOnce: the loop may be closing c too
		}
	}()
	c.closeOnce.Do(func() {
		c.ID.Disconnect()
		err = c.ID.Destroy()
		if c.ch != nil {
			c.ch.Close()
		}
		c.freeResources()
		c.markDisconnected()
		if c.l != nil {
			last = c.l.forget(c.ID)
		}
	})
	return err
}

// createResources makes c's QP on its ID, in the PD and CQs of o or new
// ones. On failure it leaves nothing behind.
func (c *Conn) createResources(o *ConnOptions) error {
	dev := c.ID.Device()
	c.PD, c.CQ, c.RecvCQ = o.PD, o.SendCQ, o.RecvCQ
	if c.PD == nil {
		pd, err := dev.AllocPD()
		if err != nil {
			return err
		}
		c.PD, c.ownPD = pd, true
	}
	if c.CQ == nil {
		cq, err := dev.CreateCQ(o.CQE, o.CompChannel)
		if err != nil {
			c.freeResources()
			return err
		}
		c.CQ, c.RecvCQ, c.ownCQ = cq, cq, true
	}
	qp, err := c.ID.CreateQP(c.PD, verbs.QPInitAttr{SendCQ: c.CQ, RecvCQ: c.RecvCQ, Cap: o.Cap})
	if err != nil {
		c.freeResources()
		return err
	}
	c.QP = qp
	return nil
}

// freeResources frees the CQ and PD c made (its ID destroys the QP).
func (c *Conn) freeResources() {
	if c.ownCQ {
		c.CQ.Destroy()
		c.ownCQ = false
	}
	if c.ownPD {
		c.PD.Dealloc()
		c.ownPD = false
	}
}

// Dial connects an RC QP to the rdma_cm listener at addr (TCP port
// space). It returns when the connection is established, fails, or ctx
// ends; a cancelled attempt is abandoned with a REJ. A rejection is an
// *ErrEvent matching ErrRejected that says why (RejectText).
func Dial(ctx context.Context, addr netip.AddrPort, opts *ConnOptions) (*Conn, error) {
	if opts == nil || opts.CM == nil {
		return nil, errf(ErrInvalid, "ConnOptions.CM is required")
	}
	o := opts.withDefaults()
	ch := NewEventChannel()
	id, err := o.CM.CreateID(ch, PortSpaceTCP, nil)
	if err != nil {
		return nil, err
	}
	c := &Conn{ID: id, ch: ch, disc: make(chan struct{})}
	fail := func(err error) (*Conn, error) {
		id.Destroy()
		c.freeResources()
		ch.Close()
		return nil, err
	}
	next := func(want EventType) (*Event, error) {
		ev, err := ch.Get(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type != want {
			return ev, &ErrEvent{Event: ev, Want: want}
		}
		return ev, nil
	}
	if err := id.ResolveAddr(ctx, o.Source, addr); err != nil {
		return fail(err)
	}
	if _, err := next(EventAddrResolved); err != nil {
		return fail(err)
	}
	if err := id.ResolveRoute(ctx); err != nil {
		return fail(err)
	}
	if _, err := next(EventRouteResolved); err != nil {
		return fail(err)
	}
	if err := c.createResources(&o); err != nil {
		return fail(err)
	}
	if err := id.Connect(ctx, &o.Param); err != nil {
		return fail(err)
	}
	ev, err := next(EventEstablished)
	if err != nil {
		return fail(err)
	}
	c.Peer = ev.Conn
	// Later events are handled as they come, on the CM's goroutine: only
	// the disconnection matters.
	ch.handleWith(func(ev *Event) {
		if ev.Type == EventDisconnected {
			c.markDisconnected()
		}
	})
	return c, nil
}

// Listener accepts RC connections on an rdma_cm port (TCP port space).
type Listener struct {
	id   *ID
	ch   *EventChannel
	o    ConnOptions
	q    chan *Conn    // established connections for Accept
	reqs chan *Request // AcceptControl: requests for Request
	stop chan struct{} // closed by Close: Accept returns ErrClosed
	done chan struct{} // closed when run has returned

	mu      sync.Mutex
	closed  bool
	chDone  bool          // ch closed: run is ending
	pending map[*ID]*Conn // requested or accepted, not yet established
	live    map[*ID]*Conn // established and not closed, for DISCONNECTED
}

// Listen listens on addr (an unspecified address listens on every device
// of opts.CM). Incoming connections are accepted in the background (QP,
// PD and CQ created, REP sent) and handed out by Accept once established;
// with opts.AcceptControl, requests are handed out by Request instead.
func Listen(ctx context.Context, addr netip.AddrPort, opts *ConnOptions) (*Listener, error) {
	if opts == nil || opts.CM == nil {
		return nil, errf(ErrInvalid, "ConnOptions.CM is required")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	ch := NewEventChannel()
	id, err := o.CM.CreateID(ch, PortSpaceTCP, nil)
	if err != nil {
		return nil, err
	}
	if err := id.BindAddr(addr); err != nil {
		id.Destroy()
		return nil, err
	}
	if err := id.Listen(o.Backlog); err != nil {
		id.Destroy()
		return nil, err
	}
	l := &Listener{id: id, ch: ch, o: o, q: make(chan *Conn, o.Backlog), reqs: make(chan *Request, o.Backlog),
		stop: make(chan struct{}), done: make(chan struct{}), pending: map[*ID]*Conn{}, live: map[*ID]*Conn{}}
	go l.run()
	return l, nil
}

// Addr returns the address and port the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

func (l *Listener) run() {
	defer close(l.done)
	for {
		ev, err := l.ch.Get(context.Background())
		if err != nil {
			return
		}
		switch ev.Type {
		case EventConnectRequest:
			l.onRequest(ev)
		case EventEstablished:
			l.mu.Lock()
			c := l.pending[ev.ID]
			delete(l.pending, ev.ID)
			if c != nil {
				l.live[ev.ID] = c
			}
			closed := l.closed
			l.mu.Unlock()
			switch {
			case c == nil:
			case c.est != nil:
				c.signal(nil) // Request.Accept waits for it
			case closed:
				c.close(false)
			default:
				select {
				case l.q <- c:
				default:
					c.close(false) // nobody accepts: the queue is full
				}
			}
		case EventRejected, EventUnreachable, EventConnectError:
			l.mu.Lock()
			c := l.pending[ev.ID]
			l.mu.Unlock()
			switch {
			case c == nil:
			case c.est != nil:
				c.signal(&ErrEvent{Event: ev, Want: EventEstablished})
			default:
				c.close(false)
			}
		case EventDisconnected:
			// The Conn stays in live until it is closed, so that the
			// listener's events keep flowing to it after Listener.Close.
			l.mu.Lock()
			c := l.live[ev.ID]
			l.mu.Unlock()
			if c != nil {
				c.markDisconnected()
			}
		}
	}
}

func (l *Listener) onRequest(ev *Event) {
	id := ev.ID
	c := &Conn{ID: id, Peer: ev.Conn, disc: make(chan struct{}), l: l}
	l.mu.Lock()
	closed := l.closed
	if !closed {
		l.pending[id] = c
	}
	l.mu.Unlock()
	if closed {
		id.Reject(nil)
		id.Destroy()
		return
	}
	if l.o.AcceptControl {
		c.est = make(chan error, 1)
		select {
		case l.reqs <- &Request{l: l, c: c}:
		default:
			id.Reject(nil) // the backlog is full
			c.close(false)
		}
		return
	}
	if err := c.createResources(&l.o); err != nil {
		id.Reject(nil)
		c.close(false)
		return
	}
	if err := id.Accept(context.Background(), &l.o.Param); err != nil {
		c.close(false)
	}
}

// forget drops a closed Conn from the listener's tables. The event
// channel, which carries the events of every connection the listener
// accepted, closes once the listener is closed and its last Conn is.
func (l *Listener) forget(id *ID) (end bool) {
	l.mu.Lock()
	delete(l.pending, id)
	delete(l.live, id)
	end = l.endLocked()
	l.mu.Unlock()
	if end {
		l.ch.Close()
	}
	return end
}

// endLocked reports whether the event channel should close now: the
// listener is closed and no Conn it made is open. It reports true once.
func (l *Listener) endLocked() bool {
	if !l.closed || l.chDone || len(l.pending) > 0 || len(l.live) > 0 {
		return false
	}
	l.chDone = true
	return true
}

// Accept returns the next established connection. With AcceptControl it
// fails with ErrState: use Request.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	if l.o.AcceptControl {
		return nil, errf(ErrState, "the listener has AcceptControl: take requests with Request")
	}
	select {
	case c := <-l.q:
		return c, nil
	case <-l.stop:
		return nil, errf(ErrClosed, "listener")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Request returns the next connect request of a listener made with
// AcceptControl, for the program to accept or reject. It fails with
// ErrState on a listener without AcceptControl.
func (l *Listener) Request(ctx context.Context) (*Request, error) {
	if !l.o.AcceptControl {
		return nil, errf(ErrState, "the listener accepts by itself: set ConnOptions.AcceptControl to take requests")
	}
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.stop:
		return nil, errf(ErrClosed, "listener")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening and closes connections not yet accepted and
// requests not yet taken. Connections already accepted, and requests
// already taken, stay the program's: they keep receiving their events
// (DISCONNECTED) until they are closed.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errf(ErrClosed, "listener")
	}
	l.closed = true
	var pend []*Conn
	for _, c := range l.pending {
		if c.est == nil {
			pend = append(pend, c)
		}
	}
	l.mu.Unlock()
	close(l.stop)
	err := l.id.Destroy()
	for _, c := range pend {
		c.Close()
	}
	for {
		select {
		case c := <-l.q:
			c.Close()
			continue
		case r := <-l.reqs:
			r.Reject(nil)
			continue
		default:
		}
		break
	}
	l.mu.Lock()
	end := l.endLocked()
	l.mu.Unlock()
	if end {
		l.ch.Close()
	}
	if l.chDoneNow() {
		<-l.done
	}
	return err
}

// chDoneNow reports whether the event channel has been closed.
func (l *Listener) chDoneNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chDone
}

// Request is an incoming connect request on a listener with
// AcceptControl. Accept or Reject it; until then the peer waits (its CM
// retries its request for a while, then gives up).
type Request struct {
	l    *Listener
	c    *Conn
	mu   sync.Mutex
	done bool // accepted or rejected
}

// Peer returns the connecting side's parameters. Its private data is
// zero-padded to the room a CM request has for it (56 bytes), as
// librdmacm delivers it: a protocol that needs the real length carries it
// in its own bytes.
func (r *Request) Peer() ConnParam { return r.c.Peer }

// PeerAddr returns the connecting side's address and port.
func (r *Request) PeerAddr() netip.AddrPort { return r.c.ID.PeerAddr() }

// Device returns the device the request arrived on: the one the PD and
// CQs given to Prepare must belong to.
func (r *Request) Device() *verbs.Device { return r.c.ID.Device() }

// Prepare creates the connection's QP, in INIT, with opts's PD, CQs, Cap
// and CQE (nil: the listener's options), so that the program can post
// receives before accepting; the peer's first SEND then finds them. It
// returns the connection, which is established once Accept returns.
func (r *Request) Prepare(opts *ConnOptions) (*Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil, errf(ErrState, "request already answered")
	}
	if r.c.QP != nil {
		return nil, errf(ErrState, "request already prepared")
	}
	o := r.l.o
	if opts != nil {
		o = opts.withDefaults()
	}
	if err := r.c.createResources(&o); err != nil {
		return nil, err
	}
	return r.c, nil
}

// Accept accepts the request with p's parameters and private data (nil:
// the listener's), preparing the QP first if Prepare was not called, and
// waits for the connection to be established. If it fails or ctx ends
// first, the connection is closed.
func (r *Request) Accept(ctx context.Context, p *ConnParam) (*Conn, error) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return nil, errf(ErrState, "request already answered")
	}
	r.done = true
	c := r.c
	if c.QP == nil {
		if err := c.createResources(&r.l.o); err != nil {
			r.mu.Unlock()
			c.ID.Reject(nil)
			c.Close()
			return nil, err
		}
	}
	r.mu.Unlock()
	param := r.l.o.Param
	if p != nil {
		param = *p
	}
	if err := c.ID.Accept(ctx, &param); err != nil {
		c.Close()
		return nil, err
	}
	select {
	case err := <-c.est:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// Reject refuses the request (rdma_reject) with private data for the
// peer, whose Dial fails with ErrRejected and reason RejectConsumer.
func (r *Request) Reject(privateData []byte) error {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return errf(ErrState, "request already answered")
	}
	r.done = true
	r.mu.Unlock()
	err := r.c.ID.Reject(privateData)
	r.c.Close()
	return err
}
