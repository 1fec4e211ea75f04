package cm

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// rawSender is a UD QP on a device that sends arbitrary payloads to a
// peer's QP1, with the GSI Q_Key.
type rawSender struct {
	qp *verbs.QP
	ah *verbs.AH
	mr *verbs.MR
	cq *verbs.CQ
}

func newRawSender(t *testing.T, d *verbs.Device, to wire.GID) *rawSender {
	t.Helper()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(64, nil)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, QKey: verbs.GSIQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := qp.Modify(&st.a, st.m); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := pd.CreateAH(verbs.AHAttr{DGID: to, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 4096), 0)
	return &rawSender{qp: qp, ah: ah, mr: mr, cq: cq}
}

func (r *rawSender) send(t *testing.T, payload []byte) {
	t.Helper()
	copy(r.mr.Buf(), payload)
	if err := r.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.mr.SGE(0, len(payload))}, AH: r.ah, RemoteQPN: 1, RemoteQKey: verbs.GSIQKey}}); err != nil {
		t.Fatal(err)
	}
	var wc [4]verbs.WC
	r.cq.Poll(wc[:])
}

// Malformed MADs on QP1 are dropped and counted; the CM keeps working.
func TestMalformedMADs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		r := newRawSender(t, e.da, wire.GIDFromAddr(addrB))
		var good [mad.Size]byte
		mad.EncodeCM(good[:], 1, &mad.RTUFields{LocalCommID: 5, RemoteCommID: 6})
		bad := [][]byte{
			make([]byte, mad.Size),   // base version 0
			good[:100],               // truncated
			append(good[:], 1, 2, 3), // too long
			func() []byte { b := good; b[1] = 0x03; return b[:] }(), // not the CM class
			func() []byte { b := good; b[2] = 1; return b[:] }(),    // CM class version 1
			func() []byte { b := good; b[3] = 0x81; return b[:] }(), // not a Send
		}
		for _, b := range bad {
			r.send(t, b)
		}
		deadline := time.Now().Add(5 * time.Second)
		for e.b.Stats().Malformed.Load() < uint64(len(bad)) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := e.b.Stats().Malformed.Load(); got != uint64(len(bad)) {
			t.Fatalf("%d malformed MADs counted, want %d", got, len(bad))
		}
		// A well-formed RTU for nobody is dropped without an answer.
		r.send(t, good[:])
		// The CM still connects.
		_, ra, _, rb := e.establish()
		rb.want(t, EventREQ)
		ra.want(t, EventREP)
		rb.want(t, EventEstablished)
	})
}

// FuzzDispatch feeds arbitrary CM MADs to a Manager with a listener: it
// must neither panic nor wedge.
func FuzzDispatch(f *testing.F) {
	var b [mad.Size]byte
	for _, m := range []mad.Fields{&mad.REQFields{ServiceID: svc, LocalCommID: 1}, &mad.REPFields{RemoteCommID: 2},
		&mad.DREQFields{}, &mad.SIDRReqFields{ServiceID: svc}, &mad.MRAFields{}, &mad.REJFields{}} {
		f.Add(append([]byte(nil), mad.EncodeCM(b[:], 7, m)...))
	}
	e := newEnv(f, loop.Faults{})
	e.b.Listen(svc, func(c *Conn, ev *Event) {
		switch ev.Type {
		case EventREQ:
			c.SendREP(&REPParams{QPN: 9})
		case EventSIDRReq:
			c.SendSIDRRep(&SIDRRepParams{})
		case EventDREQ:
			c.SendDREP(nil)
		}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := mad.Parse(data)
		if err != nil {
			return
		}
		var cp [mad.Size]byte
		copy(cp[:], msg)
		e.b.dispatch(Path{DGID: wire.GIDFromAddr(addrA)}, mad.MAD(cp[:]))
	})
}
