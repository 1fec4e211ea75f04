// rdma_cm mode (perftest's -R, "Connect QPs with rdma_cm and run test on
// those QPs"). Two rdma_cm connections are made on the same port (TCP port
// space), one after the other:
//
//  1. The exchange connection: an RC QP with one receive posted at a time.
//     Every message of the exchange (version, sizes, MTU, keys, reports) is
//     one SEND of exactly the message's size, answered in the order of the
//     TCP exchange (the client sends first). Keys are perftest's struct
//     pingpong_dest in binary (CMDestSize bytes, big-endian), not text, and
//     no "done" ends it.
//  2. After the MTU exchange and one keys message each way, the server
//     listens again on the port and the client connects one rdma_cm QP per
//     test QP (retrying while the server is not listening yet, as perftest
//     does); one more keys message each way follows. The test runs on these
//     QPs: rdma_cm moved them to RTS, so the keys only inform.

package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
)

// cmSyncID is the work request ID perftest gives exchange messages
// (SYNC_SPEC_ID).
const cmSyncID = 5

// Connection retries of the client's test QPs while the server is not
// listening yet (perftest's rdma_cm_client_connection: 10 tries, 100 ms
// apart).
const (
	cmConnectTries = 10
	cmConnectDelay = 100 * time.Millisecond
)

// ErrCM is wrapped by errors about the rdma_cm connections of -R.
var ErrCM = errors.New("rdma_cm")

// cmChannel carries the exchange over an rdma_cm-connected RC QP. One CQ
// serves both directions, so a receive may complete before the send that
// preceded it: completions are counted by kind.
type cmChannel struct {
	ctx      context.Context
	qp       *verbs.QP
	cq       *verbs.CQ
	disc     <-chan struct{} // closed when the peer disconnects
	closeFn  func() error    // disconnects, frees QP, CQ, PD
	mr       *verbs.MR
	gidIndex int
	last     bool // the final exchange runs
	sends    int
	recvs    []verbs.WC
	wc       [4]verbs.WC
}

// newCMChannel registers the message buffers (receive slot, then send
// slot) in pd and posts the first receive on qp.
func newCMChannel(ctx context.Context, pd *verbs.PD, qp *verbs.QP, cq *verbs.CQ, gidIndex int) (*cmChannel, error) {
	mr, err := pd.AllocMR(2*CMDestSize, verbs.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	m := &cmChannel{ctx: ctx, qp: qp, cq: cq, mr: mr, gidIndex: gidIndex}
	if err := m.postRecv(); err != nil {
		mr.Dereg()
		return nil, err
	}
	return m, nil
}

func (m *cmChannel) postRecv() error {
	err := m.qp.PostRecv([]verbs.RecvWR{{ID: cmSyncID, SGL: []verbs.SGE{m.mr.SGE(0, CMDestSize)}}})
	if err != nil {
		return fmt.Errorf("%w: posting the exchange receive: %v", ErrCM, err)
	}
	return nil
}

func (m *cmChannel) exchange(mine []byte, n int, what string, client bool) ([]byte, error) {
	if client {
		if err := m.send(mine, what); err != nil {
			return nil, err
		}
		return m.recv(n, what)
	}
	b, err := m.recv(n, what)
	if err != nil {
		return nil, err
	}
	return b, m.send(mine, what)
}

func (m *cmChannel) send(b []byte, what string) error {
	if len(b) > CMDestSize {
		return fmt.Errorf("%w: %s message of %d bytes is above %d", ErrUsage, what, len(b), CMDestSize)
	}
	copy(m.mr.Buf()[CMDestSize:], b)
	err := m.qp.PostSend([]verbs.SendWR{{ID: cmSyncID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{m.mr.SGE(CMDestSize, len(b))}}})
	if err != nil {
		return fmt.Errorf("%w: sending %s: %v", ErrCM, what, err)
	}
	for m.sends == 0 {
		if err := m.poll("sending " + what); err != nil {
			if m.last && errors.Is(err, errFlushed) {
				// The peer received the last message and
				// disconnected before our QP saw its ACK.
				return nil
			}
			return err
		}
	}
	m.sends--
	return nil
}

func (m *cmChannel) recv(n int, what string) ([]byte, error) {
	for len(m.recvs) == 0 {
		if err := m.poll("receiving " + what); err != nil {
			return nil, err
		}
	}
	wc := m.recvs[0]
	m.recvs = m.recvs[1:]
	if int(wc.ByteLen) != n {
		return nil, exErr("%s message has %d bytes, want %d", what, wc.ByteLen, n)
	}
	out := append([]byte(nil), m.mr.Buf()[:n]...)
	if err := m.postRecv(); err != nil {
		return nil, err
	}
	return out, nil
}

// poll waits for completions and sorts them. It spins (yielding) for a
// moment, then sleeps between polls: a server may wait here for a whole
// test of the client.
func (m *cmChannel) poll(what string) error {
	start := time.Now()
	for i := 0; ; i++ {
		n := m.cq.Poll(m.wc[:])
		for _, wc := range m.wc[:n] {
			if wc.Status == verbs.WRFlushErr {
				return fmt.Errorf("%w: %s: the connection was closed (%w)", ErrCM, what, errFlushed)
			}
			if wc.Status != verbs.Success {
				return fmt.Errorf("%w: %s: completion status %d (%v): the peer went away?", ErrCM, what, int(wc.Status), wc.Status)
			}
			switch wc.Opcode {
			case verbs.WCSend:
				m.sends++
			case verbs.WCRecv:
				m.recvs = append(m.recvs, wc)
			default:
				return fmt.Errorf("%w: %s: unexpected completion opcode %v", ErrCM, what, wc.Opcode)
			}
		}
		if n > 0 {
			return nil
		}
		if i&0xff == 0 {
			select {
			case <-m.ctx.Done():
				return m.ctx.Err()
			case <-m.disc:
				return fmt.Errorf("%w: %s: the peer disconnected", ErrCM, what)
			default:
			}
		}
		if time.Since(start) < 5*time.Millisecond {
			osYield()
		} else {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// errFlushed: a work request of the exchange QP was flushed, because the
// peer disconnected.
var errFlushed = errors.New("the peer disconnected")

// finish runs the final exchange (ctx_close_connection, without "done" in
// this mode). The server sends the last message; the client lingers until
// the server disconnects (or a moment passes) so that the ACK of that
// message leaves before the client's QP is torn down.
func (m *cmChannel) finish(sync func() error, client bool) error {
	m.last = true
	if err := sync(); err != nil {
		return err
	}
	if client {
		select {
		case <-m.disc:
		case <-m.ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

func (m *cmChannel) close() error {
	m.mr.Dereg()
	return m.closeFn()
}

// cmOptions are the client's exchange connection's: one message in
// flight each way.
func (s *side) cmOptions() *rdmacm.ConnOptions {
	return &rdmacm.ConnOptions{CM: s.cm, Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxInlineData: 1}}
}

// cmListen is the server's exchange connection: listen on every address,
// accept one client with a receive already posted (as perftest), stop
// listening.
func (s *side) cmListen(ctx context.Context) (*Conn, error) {
	c := s.cfg
	ch := rdmacm.NewEventChannel()
	lid, err := s.cm.CreateID(ch, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		ch.Close()
		return nil, err
	}
	listenErr := func(err error) (*Conn, error) {
		lid.Destroy()
		ch.Close()
		return nil, fmt.Errorf("%w: couldn't listen on rdma_cm port %d: %v", ErrCM, c.Port, err)
	}
	if err := lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(c.Port))); err != nil {
		return listenErr(err)
	}
	if err := lid.Listen(1); err != nil {
		return listenErr(err)
	}
	if s.hooks.CMListening != nil {
		s.hooks.CMListening(lid.LocalAddr())
	}
	m, err := s.cmAcceptExchange(ctx, ch)
	lid.Destroy()
	if err != nil {
		ch.Close()
		return nil, err
	}
	// Watch for the client's disconnect while the exchange lasts.
	disc, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		closed := false
		for {
			ev, err := ch.Get(context.Background())
			if err != nil {
				return
			}
			if ev.Type == rdmacm.EventDisconnected && !closed {
				close(disc)
				closed = true
			}
		}
	}()
	inner := m.closeFn
	m.disc = disc
	m.closeFn = func() error {
		err := inner()
		ch.Close()
		<-done
		return err
	}
	return &Conn{m: m}, nil
}

// cmAcceptExchange accepts the first connection request on ch (refusing
// others meanwhile) and waits until it is established.
func (s *side) cmAcceptExchange(ctx context.Context, ch *rdmacm.EventChannel) (*cmChannel, error) {
	var id *rdmacm.ID
	var m *cmChannel
	fail := func(err error) (*cmChannel, error) {
		if m != nil {
			m.close()
		} else if id != nil {
			id.Destroy()
		}
		return nil, err
	}
	for {
		ev, err := ch.Get(ctx)
		if err != nil {
			return fail(err)
		}
		switch {
		case ev.Type == rdmacm.EventConnectRequest && id != nil:
			ev.ID.Reject(nil)
			ev.ID.Destroy()
		case ev.Type == rdmacm.EventConnectRequest:
			id = ev.ID
			pd, err := s.dev.AllocPD()
			if err != nil {
				id.Reject(nil)
				return fail(err)
			}
			cq, err := s.dev.CreateCQ(8, nil)
			if err != nil {
				pd.Dealloc()
				id.Reject(nil)
				return fail(err)
			}
			qp, err := id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
				Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err == nil {
				m, err = newCMChannel(ctx, pd, qp, cq, s.gidIndex)
			}
			if err != nil {
				id.Reject(nil)
				id.Destroy()
				cq.Destroy()
				pd.Dealloc()
				return nil, err
			}
			cid := id
			m.closeFn = func() error {
				cid.Disconnect()
				err := cid.Destroy()
				cq.Destroy()
				pd.Dealloc()
				return err
			}
			if err := id.Accept(ctx, &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
				return fail(fmt.Errorf("%w: accepting the exchange connection: %v", ErrCM, err))
			}
		case ev.ID == id && ev.Type == rdmacm.EventEstablished:
			return m, nil
		case ev.ID == id:
			return fail(fmt.Errorf("%w: exchange connection failed: %v", ErrCM, ev))
		}
	}
}

// cmServerAddr resolves the server's name, preferring IPv4 as perftest
// (which only looks up IPv4 addresses in this mode).
func (s *side) cmServerAddr(ctx context.Context) (netip.AddrPort, error) {
	c := s.cfg
	host := strings.TrimSuffix(strings.TrimPrefix(c.Server, "["), "]")
	a, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil || len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("%w: couldn't resolve %q: %v", ErrCM, c.Server, lerr)
		}
		a = ips[0]
		for _, ip := range ips {
			if ip.Unmap().Is4() {
				a = ip
				break
			}
		}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(c.Port)), nil
}

// cmDial is the client's exchange connection.
func (s *side) cmDial(ctx context.Context) (*Conn, error) {
	dst, err := s.cmServerAddr(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := rdmacm.Dial(ctx, dst, s.cmOptions())
	if err != nil {
		return nil, cmConnectError(dst, err)
	}
	m, err := newCMChannel(ctx, conn.PD, conn.QP, conn.CQ, s.gidIndex)
	if err != nil {
		conn.Close()
		return nil, err
	}
	m.disc, m.closeFn = conn.Disconnected(), conn.Close
	return &Conn{m: m, client: true}, nil
}

// cmConnectError explains a failed rdma_cm connection in rdmacm's words
// (which the other tools print too), with perftest's own hint.
func cmConnectError(dst netip.AddrPort, err error) error {
	var ev *rdmacm.ErrEvent
	if errors.As(err, &ev) && ev.RejectReason() == rdmacm.RejectConsumer && dst.Addr().Is6() {
		return fmt.Errorf("%w: couldn't connect to %v (perftest's rdma_cm mode listens on IPv4 only): %w", ErrCM, dst, err)
	}
	return fmt.Errorf("%w: couldn't connect to %v: %w", ErrCM, dst, err)
}

// cmParam are the test QPs' connection parameters, as perftest's.
func (s *side) cmParam() *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if v := s.cfg.Test.Verb; v == Read || v == Atomic {
		r := uint8(min(s.outReads, 255))
		p.ResponderResources, p.InitiatorDepth = r, r
	}
	return p
}

// cmConnectQPs connects the test QPs with rdma_cm between two keys
// messages (create_rdma_cm_connection) and fills in this side's keys.
func (s *side) cmConnectQPs(ctx context.Context) error {
	var zero Dest
	if err := s.conn.Sync(&zero); err != nil {
		return err
	}
	s.cmCh = rdmacm.NewEventChannel()
	var err error
	if s.cfg.IsServer() {
		err = s.cmAcceptQPs(ctx)
	} else {
		err = s.cmDialQPs(ctx)
	}
	if err != nil {
		return err
	}
	if err := s.conn.Sync(&zero); err != nil {
		return err
	}
	// The source GID rdma_cm chose is the one the test uses.
	s.gidIndex = s.ids[0].SGIDIndex()
	if g, err := s.dev.QueryGID(1, s.gidIndex); err == nil {
		s.gid = g
	}
	s.fillDests()
	return nil
}

// nextCMEvent returns the next event on the test QPs' channel.
func (s *side) nextCMEvent(ctx context.Context) (*rdmacm.Event, error) {
	ev, err := s.cmCh.Get(ctx)
	if err != nil {
		return nil, err
	}
	return ev, nil
}

// expectCM waits for event want on id, skipping events of other IDs.
func (s *side) expectCM(ctx context.Context, id *rdmacm.ID, want rdmacm.EventType) error {
	for {
		ev, err := s.nextCMEvent(ctx)
		if err != nil {
			return err
		}
		if ev.ID != id {
			continue
		}
		if ev.Type != want {
			return &rdmacm.ErrEvent{Event: ev, Want: want}
		}
		return nil
	}
}

func (s *side) cmDialQPs(ctx context.Context) error {
	dst, err := s.cmServerAddr(ctx)
	if err != nil {
		return err
	}
	for i := 0; i < s.cfg.NumQPs; i++ {
		for try := 1; ; try++ {
			id, err := s.cmDialQP(ctx, dst)
			if err == nil {
				s.ids = append(s.ids, id)
				s.qps = append(s.qps, id.QP())
				break
			}
			if !errors.Is(err, rdmacm.ErrRejected) || try == cmConnectTries {
				return fmt.Errorf("connecting test QP %d (try %d): %w", i, try, cmConnectError(dst, err))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cmConnectDelay):
			}
		}
	}
	return nil
}

func (s *side) cmDialQP(ctx context.Context, dst netip.AddrPort) (*rdmacm.ID, error) {
	id, err := s.cm.CreateID(s.cmCh, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		return nil, err
	}
	err = func() error {
		if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
			return err
		}
		if err := s.expectCM(ctx, id, rdmacm.EventAddrResolved); err != nil {
			return err
		}
		if err := id.ResolveRoute(ctx); err != nil {
			return err
		}
		if err := s.expectCM(ctx, id, rdmacm.EventRouteResolved); err != nil {
			return err
		}
		if _, err := id.CreateQP(s.pd, s.qpInit()); err != nil {
			return err
		}
		if err := id.Connect(ctx, s.cmParam()); err != nil {
			return err
		}
		return s.expectCM(ctx, id, rdmacm.EventEstablished)
	}()
	if err != nil {
		id.Destroy()
		return nil, err
	}
	return id, nil
}

// cmAcceptQPs listens on the port again and accepts one connection per
// test QP; further requests are rejected.
func (s *side) cmAcceptQPs(ctx context.Context) error {
	c := s.cfg
	lid, err := s.cm.CreateID(s.cmCh, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(c.Port))); err != nil {
		return fmt.Errorf("%w: couldn't listen on rdma_cm port %d for the test QPs: %v", ErrCM, c.Port, err)
	}
	if err := lid.Listen(c.NumQPs); err != nil {
		return fmt.Errorf("%w: couldn't listen on rdma_cm port %d for the test QPs: %v", ErrCM, c.Port, err)
	}
	accepted := map[*rdmacm.ID]bool{}
	established := 0
	for established < c.NumQPs {
		ev, err := s.nextCMEvent(ctx)
		if err != nil {
			return err
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			id := ev.ID
			if len(s.ids) == c.NumQPs {
				id.Reject(nil)
				id.Destroy()
				continue
			}
			if _, err := id.CreateQP(s.pd, s.qpInit()); err != nil {
				id.Reject(nil)
				id.Destroy()
				return fmt.Errorf("%w: creating a test QP: %v", ErrCM, err)
			}
			s.ids = append(s.ids, id)
			s.qps = append(s.qps, id.QP())
			accepted[id] = true
			if err := id.Accept(ctx, s.cmParam()); err != nil {
				return fmt.Errorf("%w: accepting test QP %d: %v", ErrCM, len(s.ids)-1, err)
			}
		case rdmacm.EventEstablished:
			if accepted[ev.ID] {
				established++
			}
		case rdmacm.EventRejected, rdmacm.EventUnreachable, rdmacm.EventConnectError, rdmacm.EventDisconnected:
			if accepted[ev.ID] {
				return fmt.Errorf("%w: test QP connection failed: %v", ErrCM, ev)
			}
		}
	}
	return nil
}

// cmTeardown disconnects the test QPs and releases their IDs (which
// destroy the QPs).
func (s *side) cmTeardown() {
	if len(s.ids) > 0 {
		s.qps = nil // destroyed with their IDs below
	}
	for _, id := range s.ids {
		id.Disconnect()
		id.Destroy()
	}
	s.ids = nil
	if s.cmCh != nil {
		s.cmCh.Close()
	}
}
