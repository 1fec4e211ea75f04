package cm

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// wireLog records the CM MADs a loop network carries.
type wireLog struct {
	mu   sync.Mutex
	mads []mad.MAD
}

func (w *wireLog) filter(p *link.Packet) bool {
	pkt, err := wire.Parse(p.Data())
	if err != nil || pkt.BTH().DestQP() != 1 || len(pkt.Payload()) < mad.Size {
		return false
	}
	m := append(mad.MAD(nil), pkt.Payload()[:mad.Size]...)
	w.mu.Lock()
	w.mads = append(w.mads, m)
	w.mu.Unlock()
	return false
}

// waitFor waits for a MAD matching ok and returns it.
func (w *wireLog) waitFor(t *testing.T, what string, ok func(mad.MAD) bool) mad.MAD {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for _, m := range w.mads {
			if ok(m) {
				w.mu.Unlock()
				return m
			}
		}
		w.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no %s on the wire", what)
	return nil
}

func rejWith(reason mad.RejectReason) func(mad.MAD) bool {
	return func(m mad.MAD) bool {
		r, ok := m.CM().(mad.REJ)
		return ok && r.Reason() == reason
	}
}

func TestStaleMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w wireLog
		e := newEnv(t, loop.Faults{Filter: w.filter})
		var b [mad.Size]byte
		toB := pathTo(addrB)

		// A REP nobody asked for: REJ "invalid comm ID".
		e.a.send(toB, mad.EncodeCM(b[:], 9, &mad.REPFields{LocalCommID: 77, RemoteCommID: 12345}))
		w.waitFor(t, "REJ invalid comm ID", rejWith(mad.RejectInvalidCommID))

		// A DREQ for an unknown connection still gets a DREP.
		e.a.send(toB, mad.EncodeCM(b[:], 10, &mad.DREQFields{LocalCommID: 78, RemoteCommID: 54321}))
		w.waitFor(t, "DREP", func(m mad.MAD) bool {
			d, ok := m.CM().(mad.DREP)
			return ok && d.RemoteCommID() == 78
		})

		// A REQ repeated after the connection ended (passive side in time
		// wait): REJ "stale connection".
		ca, ra, _, rb := e.establish()
		cb := rb.want(t, EventREQ).c
		ra.want(t, EventREP)
		rb.want(t, EventEstablished)
		cb.SetHandler(func(c *Conn, ev *Event) {
			if ev.Type == EventDREQ {
				c.SendDREP(nil)
			}
			rb.handle(c, ev)
		})
		ca.SendDREQ(nil)
		rb.want(t, EventDREQ)
		ra.want(t, EventDREP)
		if cb.State() != StateTimeWait {
			t.Fatalf("passive state %v", cb.State())
		}
		req := reqParams()
		f := mad.REQFields{LocalCommID: ca.LocalID(), ServiceID: req.ServiceID, LocalQPN: req.QPN}
		e.a.send(toB, mad.EncodeCM(b[:], 11, &f))
		w.waitFor(t, "REJ stale connection", rejWith(mad.RejectStaleConnection))
		ra.none(t)
		rb.none(t)
	})
}
