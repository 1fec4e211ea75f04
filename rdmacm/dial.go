// The Go-style layer: Dial and Listen return connected RC queue pairs with
// their PD and CQ, honouring contexts.

package rdmacm

import (
	"context"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// ConnOptions configure Dial and Listen.
type ConnOptions struct {
	// CM is the rdma_cm instance to use (required).
	CM *CM
	// Source is Dial's source address; unset means the route's.
	Source netip.Addr
	// Cap sizes the QP (default 64 WRs each way, 1 SGE, 64 inline bytes).
	Cap verbs.QPCap
	// CQE is the CQ depth (default MaxSendWR + MaxRecvWR). One CQ serves
	// sends and receives.
	CQE int
	// Param are the connection parameters: private data, responder
	// resources, initiator depth, retry and RNR retry counts. Zero
	// resources and depth mean 1; zero retry counts mean 7.
	Param ConnParam
	// Backlog bounds the connections a Listener holds before Accept
	// (default 128).
	Backlog int
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
	return x
}

// Conn is a connected RC queue pair with its PD and CQ.
type Conn struct {
	ID *ID
	PD *verbs.PD
	CQ *verbs.CQ
	QP *verbs.QP
	// Peer are the peer's connection parameters, with its private data.
	Peer ConnParam

	ch        *EventChannel // Dial's own channel; nil for accepted Conns
	l         *Listener     // the listener of an accepted Conn
	disc      chan struct{}
	discOnce  sync.Once
	closeOnce sync.Once
	done      chan struct{} // Dial's event goroutine ended
}

// Disconnected is closed when the peer disconnects (or the connection
// fails).
func (c *Conn) Disconnected() <-chan struct{} { return c.disc }

func (c *Conn) markDisconnected() { c.discOnce.Do(func() { close(c.disc) }) }

// Close disconnects and frees the QP, CQ, PD and ID.
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
			<-c.done
		}
		c.CQ.Destroy()
		c.PD.Dealloc()
		c.markDisconnected()
		if c.l != nil {
			last = c.l.forget(c.ID)
		}
	})
	return err
}

func newResources(id *ID, o *ConnOptions) (*verbs.PD, *verbs.CQ, error) {
	dev := id.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	cq, err := dev.CreateCQ(o.CQE, nil)
	if err != nil {
		pd.Dealloc()
		return nil, nil, err
	}
	if _, err := id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: o.Cap}); err != nil {
		cq.Destroy()
		pd.Dealloc()
		return nil, nil, err
	}
	return pd, cq, nil
}

// Dial connects an RC QP to the rdma_cm listener at addr (TCP port
// space). It returns when the connection is established, fails, or ctx
// ends; a cancelled attempt is abandoned with a REJ.
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
	fail := func(err error) (*Conn, error) {
		id.Destroy()
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
	pd, cq, err := newResources(id, &o)
	if err != nil {
		return fail(err)
	}
	failRes := func(err error) (*Conn, error) {
		id.Destroy()
		cq.Destroy()
		pd.Dealloc()
		ch.Close()
		return nil, err
	}
	if err := id.Connect(ctx, &o.Param); err != nil {
		return failRes(err)
	}
	ev, err := next(EventEstablished)
	if err != nil {
		return failRes(err)
	}
	c := &Conn{ID: id, PD: pd, CQ: cq, QP: id.QP(), Peer: ev.Conn, ch: ch,
		disc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			ev, err := ch.Get(context.Background())
			if err != nil {
				return
			}
			if ev.Type == EventDisconnected {
				c.markDisconnected()
			}
		}
	}()
	return c, nil
}

// Listener accepts RC connections on an rdma_cm port (TCP port space).
type Listener struct {
	id   *ID
	ch   *EventChannel
	o    ConnOptions
	q    chan *Conn
	stop chan struct{} // closed by Close: Accept returns ErrClosed
	done chan struct{} // closed when run has returned

	mu      sync.Mutex
	closed  bool
	chDone  bool          // ch closed: run is ending
	pending map[*ID]*Conn // accepted, waiting for ESTABLISHED
	live    map[*ID]*Conn // established and not closed, for DISCONNECTED
}

// Listen listens on addr (an unspecified address listens on every device
// of opts.CM). Incoming connections are accepted in the background (QP,
// PD and CQ created, REP sent) and handed out by Accept once established.
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
	l := &Listener{id: id, ch: ch, o: o, q: make(chan *Conn, o.Backlog), stop: make(chan struct{}), done: make(chan struct{}),
		pending: map[*ID]*Conn{}, live: map[*ID]*Conn{}}
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
			if c == nil {
				continue
			}
			if closed {
				c.close(false)
				continue
			}
			select {
			case l.q <- c:
			default:
				c.close(false) // nobody accepts: the queue is full
			}
		case EventRejected, EventUnreachable, EventConnectError:
			l.mu.Lock()
			c := l.pending[ev.ID]
			delete(l.pending, ev.ID)
			l.mu.Unlock()
			if c != nil {
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
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		id.Reject(nil)
		id.Destroy()
		return
	}
	pd, cq, err := newResources(id, &l.o)
	if err != nil {
		id.Reject(nil)
		id.Destroy()
		return
	}
	c := &Conn{ID: id, PD: pd, CQ: cq, QP: id.QP(), Peer: ev.Conn, disc: make(chan struct{}), l: l}
	l.mu.Lock()
	l.pending[id] = c
	l.mu.Unlock()
	if err := id.Accept(context.Background(), &l.o.Param); err != nil {
		l.mu.Lock()
		delete(l.pending, id)
		l.mu.Unlock()
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

// Accept returns the next established connection.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.q:
		return c, nil
	case <-l.stop:
		return nil, errf(ErrClosed, "listener")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening and closes connections not yet accepted.
// Connections already accepted stay open and keep receiving their events
// (DISCONNECTED) until they are closed.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errf(ErrClosed, "listener")
	}
	l.closed = true
	pend := make([]*Conn, 0, len(l.pending))
	for _, c := range l.pending {
		pend = append(pend, c)
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
