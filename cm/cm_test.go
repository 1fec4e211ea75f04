package cm

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

const svc = 0x0106_4e20 // rdma_cm TCP port 20000

type env struct {
	t      testing.TB
	net    *loop.Network
	da, db *verbs.Device
	a, b   *Manager
}

// newEnv connects two devices with a Manager each on a loop network. Tests
// run it in a synctest bubble, so the Managers' timers run on the bubble's
// fake time and fire only when the test lets time pass (advance).
func newEnv(t testing.TB, f loop.Faults) *env {
	t.Helper()
	e := &env{t: t}
	e.net = loop.NewNetwork(loop.Config{Faults: f, Seed: 1})
	la, err := e.net.Attach([]netip.Addr{addrA}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := e.net.Attach([]netip.Addr{addrB}, 4791)
	if err != nil {
		t.Fatal(err)
	}
	if e.da, err = verbs.Open(la, &verbs.Options{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if e.db, err = verbs.Open(lb, &verbs.Options{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if e.a, err = New(e.da, nil); err != nil {
		t.Fatal(err)
	}
	if e.b, err = New(e.db, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.a.Close()
		e.b.Close()
		e.da.Close()
		e.db.Close()
		e.net.Close()
	})
	return e
}

// recorder collects a Conn's events on a channel.
type recorder struct {
	ch chan recEvent
}

type recEvent struct {
	c  *Conn
	ev *Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan recEvent, 64)} }

func (r *recorder) handle(c *Conn, ev *Event) { r.ch <- recEvent{c, ev} }

func (r *recorder) want(t *testing.T, typ EventType) recEvent {
	t.Helper()
	select {
	case x := <-r.ch:
		if x.ev.Type != typ {
			t.Fatalf("event %v (%+v), want %v", x.ev.Type, x.ev, typ)
		}
		return x
	case <-time.After(5 * time.Second):
		t.Fatalf("no %v event", typ)
	}
	return recEvent{}
}

// none checks, in a synctest bubble, that no event has come once
// everything that can happen without time passing has happened.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case x := <-r.ch:
		t.Fatalf("unexpected event %v", x.ev.Type)
	default:
	}
}

func pathTo(a netip.Addr) Path { return Path{DGID: wire.GIDFromAddr(a)} }

func reqParams() *REQParams {
	return &REQParams{ServiceID: svc, Path: pathTo(addrB), QPType: verbs.RC, QPN: 0x21, StartingPSN: 0x123,
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, PathMTU: verbs.MTU1024,
		LocalACKTimeout: 14, PrivateData: []byte("hello")}
}

// acceptor is a listener handler that answers every REQ with a REP.
func acceptor(r *recorder) Handler {
	return func(c *Conn, ev *Event) {
		if ev.Type == EventREQ {
			if err := c.SendREP(&REPParams{QPN: 0x42, StartingPSN: 0x456, ResponderResources: 1,
				InitiatorDepth: 1, RNRRetryCount: 7, PrivateData: []byte("welcome")}); err != nil {
				panic(err)
			}
		}
		r.handle(c, ev)
	}
}

// establish runs REQ/REP/RTU and returns both Conns with their recorders.
func (e *env) establish(advanceAfter ...EventType) (*Conn, *recorder, *Conn, *recorder) {
	t := e.t
	t.Helper()
	ra, rb := newRecorder(), newRecorder()
	l, err := e.b.Listen(svc, acceptor(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ca, err := e.a.NewConn(func(c *Conn, ev *Event) {
		if ev.Type == EventREP {
			if err := c.SendRTU(nil); err != nil {
				panic(err)
			}
		}
		ra.handle(c, ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.SendREQ(reqParams()); err != nil {
		t.Fatal(err)
	}
	return ca, ra, nil, rb
}

func TestConnectDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		ca, ra, _, rb := e.establish()
		req := rb.want(t, EventREQ)
		if got := string(req.ev.PrivateData[:5]); got != "hello" || req.ev.REQ.LocalQPN != 0x21 || req.ev.REQ.StartingPSN != 0x123 {
			t.Fatalf("REQ %q %+v", got, req.ev.REQ)
		}
		if req.ev.REQ.PrimaryPath.LocalLID != 0xFFFF || req.ev.REQ.PKey != 0xFFFF {
			t.Fatalf("REQ path %+v", req.ev.REQ.PrimaryPath)
		}
		rep := ra.want(t, EventREP)
		if rep.ev.REP.LocalQPN != 0x42 || string(rep.ev.PrivateData[:7]) != "welcome" {
			t.Fatalf("REP %+v", rep.ev.REP)
		}
		rb.want(t, EventEstablished)
		cb := req.c
		if ca.State() != StateEstablished || cb.State() != StateEstablished {
			t.Fatalf("states %v %v", ca.State(), cb.State())
		}
		if ca.RemoteID() != cb.LocalID() || cb.RemoteID() != ca.LocalID() {
			t.Fatal("comm IDs do not match")
		}
		cb.SetHandler(func(c *Conn, ev *Event) {
			if ev.Type == EventDREQ {
				c.SendDREP(nil)
			}
			rb.handle(c, ev)
		})
		if err := ca.SendDREQ([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		if d := rb.want(t, EventDREQ); string(d.ev.PrivateData[:3]) != "bye" {
			t.Fatal("DREQ private data")
		}
		ra.want(t, EventDREP)
		if ca.State() != StateTimeWait || cb.State() != StateTimeWait {
			t.Fatalf("states %v %v", ca.State(), cb.State())
		}
		advance(time.Second)
		ra.want(t, EventTimeWaitExit)
		rb.want(t, EventTimeWaitExit)
		if n := len(e.a.conns) + len(e.b.conns) + len(e.b.remote); n != 0 {
			t.Fatalf("%d conns left", n)
		}
	})
}

func TestRejectUnknownService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		ra := newRecorder()
		ca, _ := e.a.NewConn(ra.handle)
		if err := ca.SendREQ(reqParams()); err != nil {
			t.Fatal(err)
		}
		x := ra.want(t, EventREJ)
		if x.ev.Reason != mad.RejectInvalidServiceID || x.ev.Msg != mad.MsgREQ {
			t.Fatalf("REJ %v %v", x.ev.Reason, x.ev.Msg)
		}
		if ca.State() != stateClosed {
			t.Fatalf("state %v", ca.State())
		}
	})
}

func TestConsumerReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		ra := newRecorder()
		l, _ := e.b.Listen(svc, func(c *Conn, ev *Event) { c.SendREJ(mad.RejectConsumer, nil, []byte("no")) })
		defer l.Close()
		ca, _ := e.a.NewConn(ra.handle)
		ca.SendREQ(reqParams())
		x := ra.want(t, EventREJ)
		if x.ev.Reason != mad.RejectConsumer || string(x.ev.PrivateData[:2]) != "no" {
			t.Fatalf("REJ %v %q", x.ev.Reason, x.ev.PrivateData[:2])
		}
	})
}

func TestDeadPeerTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		ra := newRecorder()
		ca, _ := e.a.NewConn(ra.handle)
		p := reqParams()
		p.Path = pathTo(netip.MustParseAddr("10.0.0.99"))
		if err := ca.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < DefaultMaxRetries; i++ {
			advance(timeoutOf(DefaultResponseTimeout))
			ra.none(t)
		}
		advance(timeoutOf(DefaultResponseTimeout))
		x := ra.want(t, EventTimeout)
		if !errors.Is(x.ev.Err, ErrTimeout) || x.ev.Msg != mad.MsgREQ {
			t.Fatalf("timeout event %+v", x.ev)
		}
		if got := e.a.Stats().Retransmits.Load(); got != DefaultMaxRetries {
			t.Fatalf("%d retransmits, want %d", got, DefaultMaxRetries)
		}
	})
}

// dropFirst returns a loop filter that drops the first n CM MADs with the
// given attribute ID.
func dropFirst(attr mad.AttributeID, n int) (func(*link.Packet) bool, *atomic.Int32) {
	var dropped atomic.Int32
	var mu sync.Mutex
	return func(p *link.Packet) bool {
		pkt, err := wire.Parse(p.Data())
		if err != nil || pkt.BTH().DestQP() != 1 {
			return false
		}
		pl := pkt.Payload()
		if len(pl) < mad.Size || mad.MAD(pl[:mad.Size]).AttributeID() != attr {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if int(dropped.Load()) < n {
			dropped.Add(1)
			return true
		}
		return false
	}, &dropped
}

func TestLostMessagesAreRetried(t *testing.T) {
	for _, attr := range []mad.AttributeID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP} {
		t.Run(attr.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, dropped := dropFirst(attr, 2)
				e := newEnv(t, loop.Faults{Filter: f})
				ca, ra, _, rb := e.establish()
				wait := timeoutOf(DefaultResponseTimeout)
				var cb *Conn
				switch attr {
				case mad.AttrREQ:
					rb.none(t)
					advance(wait)
					rb.none(t)
					advance(wait)
					cb = rb.want(t, EventREQ).c
					ra.want(t, EventREP)
				case mad.AttrREP:
					cb = rb.want(t, EventREQ).c
					ra.none(t)
					advance(wait)
					advance(wait)
					ra.want(t, EventREP)
				case mad.AttrRTU:
					cb = rb.want(t, EventREQ).c
					ra.want(t, EventREP)
					rb.none(t)
					// The REP is repeated; the active side repeats its RTU.
					advance(wait)
					rb.none(t)
					advance(wait)
				default:
					cb = rb.want(t, EventREQ).c
					ra.want(t, EventREP)
				}
				rb.want(t, EventEstablished)
				cb.SetHandler(func(c *Conn, ev *Event) {
					if ev.Type == EventDREQ {
						c.SendDREP(nil)
					}
					rb.handle(c, ev)
				})
				if err := ca.SendDREQ(nil); err != nil {
					t.Fatal(err)
				}
				switch attr {
				case mad.AttrDREQ:
					advance(wait)
					advance(wait)
					rb.want(t, EventDREQ)
					ra.want(t, EventDREP)
				case mad.AttrDREP:
					rb.want(t, EventDREQ)
					ra.none(t)
					// Duplicate DREQs reach the passive side in time wait: it
					// answers each with a DREP.
					advance(wait)
					advance(wait)
					x := ra.want(t, EventDREP)
					if x.ev.Err != nil {
						t.Fatal(x.ev.Err)
					}
				default:
					rb.want(t, EventDREQ)
					ra.want(t, EventDREP)
				}
				if dropped.Load() != 2 {
					t.Fatalf("dropped %d %v, want 2", dropped.Load(), attr)
				}
				if ca.State() != StateTimeWait {
					t.Fatalf("active state %v", ca.State())
				}
			})
		})
	}
}

func TestDuplicatesAreHarmless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{Duplicate: 1})
		ca, ra, _, rb := e.establish()
		cb := rb.want(t, EventREQ).c
		ra.want(t, EventREP)
		rb.want(t, EventEstablished)
		ra.none(t)
		rb.none(t)
		if ca.State() != StateEstablished || cb.State() != StateEstablished {
			t.Fatalf("states %v %v", ca.State(), cb.State())
		}
		if e.a.Stats().Duplicates.Load()+e.b.Stats().Duplicates.Load() == 0 {
			t.Fatal("no duplicates counted")
		}
		cb.SetHandler(func(c *Conn, ev *Event) {
			if ev.Type == EventDREQ {
				c.SendDREP(nil)
			}
			rb.handle(c, ev)
		})
		ca.SendDREQ(nil)
		rb.want(t, EventDREQ)
		ra.want(t, EventDREP)
		ra.none(t)
		rb.none(t)
		advance(time.Second)
		ra.want(t, EventTimeWaitExit)
		rb.want(t, EventTimeWaitExit)
	})
}

func TestDuplicatedRTUKeepsConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := func(p *link.Packet) bool { return false }
		e := newEnv(t, loop.Faults{Filter: f})
		ca, ra, _, rb := e.establish()
		cb := rb.want(t, EventREQ).c
		ra.want(t, EventREP)
		rb.want(t, EventEstablished)
		// Replay the RTU the active side sent.
		e.a.mu.Lock()
		rtu := ca.msg
		e.a.mu.Unlock()
		if mad.MAD(rtu[:]).AttributeID() != mad.AttrRTU {
			t.Fatal("last active message is not the RTU")
		}
		e.a.send(ca.Path(), rtu[:])
		e.a.send(ca.Path(), rtu[:])
		rb.none(t)
		if cb.State() != StateEstablished {
			t.Fatalf("passive state %v after duplicated RTU", cb.State())
		}
		if e.b.Stats().Duplicates.Load() < 2 {
			t.Fatalf("%d duplicates", e.b.Stats().Duplicates.Load())
		}
	})
}

func TestREPTimeoutRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := dropFirst(mad.AttrREP, 100)
		e := newEnv(t, loop.Faults{Filter: f})
		_, ra, _, rb := e.establish()
		rb.want(t, EventREQ)
		for i := 0; i <= DefaultMaxRetries; i++ {
			advance(timeoutOf(DefaultResponseTimeout))
		}
		x := rb.want(t, EventTimeout)
		if x.ev.Msg != mad.MsgREP {
			t.Fatalf("timeout of %v", x.ev.Msg)
		}
		// The active side gives up too: by its own timer or by the passive
		// side's REJ (timeout), whichever comes first.
		select {
		case y := <-ra.ch:
			if !(y.ev.Type == EventTimeout || y.ev.Type == EventREJ && y.ev.Reason == mad.RejectTimeout) {
				t.Fatalf("active event %v %v", y.ev.Type, y.ev.Reason)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("active side still waiting")
		}
	})
}

func TestMRAExtendsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		rb := newRecorder()
		l, _ := e.b.Listen(svc, func(c *Conn, ev *Event) {
			if ev.Type == EventREQ {
				c.SendMRA(24, nil) // about 69 s
			}
			rb.handle(c, ev)
		})
		defer l.Close()
		ra := newRecorder()
		ca, _ := e.a.NewConn(ra.handle)
		ca.SendREQ(reqParams())
		cb := rb.want(t, EventREQ).c
		deadline := time.Now().Add(5 * time.Second)
		for ca.State() != StateMRAREQRcvd && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if ca.State() != StateMRAREQRcvd {
			t.Fatalf("active state %v", ca.State())
		}
		// Far longer than the retries would last without the MRA.
		advance(16 * timeoutOf(DefaultResponseTimeout))
		ra.none(t)
		if err := cb.SendREP(&REPParams{QPN: 5}); err != nil {
			t.Fatal(err)
		}
		ra.want(t, EventREP)
	})
}

func TestSIDR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{Duplicate: 1})
		rb := newRecorder()
		l, _ := e.b.Listen(mad.ServiceID(mad.PortSpaceUDP, 7174), func(c *Conn, ev *Event) {
			if ev.Type == EventSIDRReq {
				c.SendSIDRRep(&SIDRRepParams{Status: mad.SIDRSuccess, QPN: 0x77, QKey: mad.RDMAUDPQKey,
					ServiceID: ev.SIDRReq.ServiceID})
			}
			rb.handle(c, ev)
		})
		defer l.Close()
		ra := newRecorder()
		ca, _ := e.a.NewConn(ra.handle)
		if err := ca.SendSIDRReq(mad.ServiceID(mad.PortSpaceUDP, 7174), pathTo(addrB), []byte("x")); err != nil {
			t.Fatal(err)
		}
		rb.want(t, EventSIDRReq)
		x := ra.want(t, EventSIDRRep)
		if x.ev.SIDRRep.QPN != 0x77 || x.ev.SIDRRep.QKey != mad.RDMAUDPQKey || x.ev.SIDRRep.Status != mad.SIDRSuccess {
			t.Fatalf("SIDR_REP %+v", x.ev.SIDRRep)
		}
		ra.none(t)
		rb.none(t)
		// Nobody listens on another port.
		c2, _ := e.a.NewConn(ra.handle)
		c2.SendSIDRReq(mad.ServiceID(mad.PortSpaceUDP, 1), pathTo(addrB), nil)
		if x := ra.want(t, EventSIDRRep); x.ev.SIDRRep.Status != mad.SIDRUnsupported {
			t.Fatalf("status %v", x.ev.SIDRRep.Status)
		}
	})
}

func TestStateErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		ca, _ := e.a.NewConn(func(*Conn, *Event) {})
		if err := ca.SendRTU(nil); !errors.Is(err, ErrState) {
			t.Fatalf("RTU from idle: %v", err)
		}
		if err := ca.SendDREQ(nil); !errors.Is(err, ErrState) {
			t.Fatalf("DREQ from idle: %v", err)
		}
		p := reqParams()
		p.PrivateData = make([]byte, 93)
		if err := ca.SendREQ(p); !errors.Is(err, ErrInvalid) {
			t.Fatalf("long private data: %v", err)
		}
		if _, err := e.a.Listen(svc, func(*Conn, *Event) {}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.a.Listen(svc, func(*Conn, *Event) {}); !errors.Is(err, ErrInUse) {
			t.Fatalf("second listener: %v", err)
		}
		ca.Destroy()
		if err := ca.SendREQ(reqParams()); !errors.Is(err, ErrClosed) {
			t.Fatalf("REQ after destroy: %v", err)
		}
	})
}

func TestSIDRLostRequestAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, dropped := dropFirst(mad.AttrSIDRReq, 1)
		e := newEnv(t, loop.Faults{Filter: f})
		sid := mad.ServiceID(mad.PortSpaceUDP, 7174)
		l, _ := e.b.Listen(sid, func(c *Conn, ev *Event) {
			if ev.Type == EventSIDRReq {
				c.SendSIDRRep(&SIDRRepParams{Status: mad.SIDRSuccess, QPN: 5, QKey: mad.RDMAUDPQKey, ServiceID: sid})
			}
		})
		defer l.Close()
		ra := newRecorder()
		ca, _ := e.a.NewConn(ra.handle)
		ca.SendSIDRReq(sid, pathTo(addrB), nil)
		ra.none(t)
		advance(timeoutOf(DefaultResponseTimeout))
		if x := ra.want(t, EventSIDRRep); x.ev.SIDRRep.QPN != 5 || dropped.Load() != 1 {
			t.Fatalf("SIDR_REP %+v after %d drops", x.ev.SIDRRep, dropped.Load())
		}
		// Nobody there: the SIDR_REQ times out.
		c2, _ := e.a.NewConn(ra.handle)
		c2.SendSIDRReq(sid, pathTo(netip.MustParseAddr("10.0.0.77")), nil)
		for i := 0; i <= DefaultMaxRetries; i++ {
			advance(timeoutOf(DefaultResponseTimeout))
		}
		if x := ra.want(t, EventTimeout); x.ev.Msg != mad.MsgOther {
			t.Fatalf("timeout %+v", x.ev)
		}
	})
}

// advance lets d of fake time pass in a synctest bubble, then waits until
// every goroutine of the bubble is blocked again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
