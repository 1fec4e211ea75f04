package cm

import (
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// established runs establish and returns both Conns once both are
// established.
func (e *env) established(t *testing.T) (*Conn, *recorder, *Conn, *recorder) {
	t.Helper()
	ca, ra, _, rb := e.establish()
	req := rb.want(t, EventREQ)
	ra.want(t, EventREP)
	rb.want(t, EventEstablished)
	return ca, ra, req.c, rb
}

// TestLAP: a LAP proposes an alternate path on an established connection;
// the peer sees it from its side (EventLAP), answers with an APR, and with
// AP loaded both Conns have the path. One LAP at a time, an APR only for a
// LAP, and an alternate GID the peer does not have is answered by its CM
// (invalid GID) without bothering the application.
func TestLAP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, loop.Faults{})
		ca, ra, cb, rb := e.established(t)
		if _, ok := ca.AltPath(); ok {
			t.Fatal("an alternate path before any LAP")
		}
		if err := cb.SendAPR(&APRParams{Status: mad.APLoaded}); !errors.Is(err, ErrState) {
			t.Fatalf("APR without a LAP: %v", err)
		}
		p := &LAPParams{AltPath: pathTo(addrB), LocalACKTimeout: 15, PrivateData: []byte("lap")}
		if err := ca.SendLAP(p); err != nil {
			t.Fatal(err)
		}
		if err := ca.SendLAP(p); !errors.Is(err, ErrState) {
			t.Fatalf("second LAP: %v", err)
		}
		x := rb.want(t, EventLAP)
		if x.ev.AltPath.DGID != wire.GIDFromAddr(addrA) || x.ev.LAP.AlternatePath.LocalACKTimeout != 15 ||
			x.ev.LAP.RemoteQPN != 0x42 || string(x.ev.PrivateData[:3]) != "lap" {
			t.Fatalf("LAP %+v, path %+v", x.ev.LAP, x.ev.AltPath)
		}
		if err := cb.SendAPR(&APRParams{Status: mad.APLoaded, PrivateData: []byte("apr")}); err != nil {
			t.Fatal(err)
		}
		y := ra.want(t, EventAPR)
		if y.ev.APStatus != mad.APLoaded || string(y.ev.PrivateData[:3]) != "apr" {
			t.Fatalf("APR %+v", y.ev)
		}
		if p, ok := ca.AltPath(); !ok || p.DGID != wire.GIDFromAddr(addrB) {
			t.Fatalf("active side's alternate path %+v %v", p, ok)
		}
		if p, ok := cb.AltPath(); !ok || p.DGID != wire.GIDFromAddr(addrA) {
			t.Fatalf("passive side's alternate path %+v %v", p, ok)
		}
		if ca.State() != StateEstablished || cb.State() != StateEstablished {
			t.Fatalf("states %v %v", ca.State(), cb.State())
		}
		// A path to a GID the peer does not have.
		if err := ca.SendLAP(&LAPParams{AltPath: pathTo(netip.MustParseAddr("10.0.0.77"))}); err != nil {
			t.Fatal(err)
		}
		if y := ra.want(t, EventAPR); y.ev.APStatus != mad.APInvalidGID {
			t.Fatalf("APR %v, want invalid GID", y.ev.APStatus)
		}
		rb.none(t)
		if err := ca.SendLAP(&LAPParams{AltPath: Path{SGIDIndex: 5, DGID: wire.GIDFromAddr(addrB)}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("LAP from GID index 5: %v", err)
		}
		if err := ca.SendLAP(&LAPParams{AltPath: pathTo(addrB), LocalACKTimeout: 32}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("LAP with timeout 32: %v", err)
		}
	})
}

// TestLAPLost: a lost LAP is sent again on the timer, a lost APR is sent
// again when the LAP comes again (the application answers once), and a LAP
// never answered ends in EventTimeout (MsgOther) with the connection still
// established.
func TestLAPLost(t *testing.T) {
	for _, attr := range []mad.AttributeID{mad.AttrLAP, mad.AttrAPR} {
		t.Run(attr.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, dropped := dropFirst(attr, 1)
				e := newEnv(t, loop.Faults{Filter: f})
				ca, ra, cb, rb := e.established(t)
				if err := ca.SendLAP(&LAPParams{AltPath: pathTo(addrB)}); err != nil {
					t.Fatal(err)
				}
				if attr == mad.AttrLAP {
					rb.none(t)
					advance(timeoutOf(DefaultResponseTimeout))
				}
				rb.want(t, EventLAP)
				if err := cb.SendAPR(&APRParams{Status: mad.APLoaded}); err != nil {
					t.Fatal(err)
				}
				if attr == mad.AttrAPR {
					ra.none(t)
					advance(timeoutOf(DefaultResponseTimeout))
				}
				ra.want(t, EventAPR)
				rb.none(t)
				if dropped.Load() != 1 {
					t.Fatalf("%d dropped", dropped.Load())
				}
			})
		})
	}
	t.Run("unanswered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f, _ := dropFirst(mad.AttrLAP, 100)
			e := newEnv(t, loop.Faults{Filter: f})
			ca, ra, _, rb := e.established(t)
			if err := ca.SendLAP(&LAPParams{AltPath: pathTo(addrB)}); err != nil {
				t.Fatal(err)
			}
			for range DefaultMaxRetries {
				advance(timeoutOf(DefaultResponseTimeout))
				ra.none(t)
			}
			advance(timeoutOf(DefaultResponseTimeout))
			x := ra.want(t, EventTimeout)
			if x.ev.Msg != mad.MsgOther || !errors.Is(x.ev.Err, ErrTimeout) || ca.State() != StateEstablished {
				t.Fatalf("timeout %+v in state %v", x.ev, ca.State())
			}
			rb.none(t)
			if _, ok := ca.AltPath(); ok {
				t.Fatal("alternate path set without an APR")
			}
		})
	})
}
