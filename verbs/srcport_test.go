package verbs

import (
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// TestSourcePorts checks the UDP source port of every packet a connected QP
// sends, requests and responses alike: the QP pair's port as Linux picks it
// (wire.ConnectedSourcePort), the same in both directions. A QP with no
// destination (UD) uses the hash of its own number.
func TestSourcePorts(t *testing.T) {
	for _, typ := range []QPType{RC, UC} {
		t.Run(typ.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{typ: typ})
			w := p.tap()
			ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
			wrs := []SendWR{{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 5000)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}}
			if typ == RC {
				wrs = append(wrs, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 5000)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()})
			}
			if err := p.qa.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			waitWC(t, p.ca, len(wrs), waitFor)
			want := wire.ConnectedSourcePort(0, p.qa.qpn, p.qb.qpn)
			if want != wire.ConnectedSourcePort(0, p.qb.qpn, p.qa.qpn) {
				t.Fatal("the pair's source port is not symmetric")
			}
			all := w.all(func(*tapped) bool { return true })
			fromB := 0
			for _, tp := range all {
				if tp.sport != want {
					t.Errorf("%v from %v left from port %#x, want %#x", tp.op, tp.src, tp.sport, want)
				}
				if from(p.db)(&tp) {
					fromB++
				}
			}
			if typ == RC && fromB == 0 {
				t.Error("no packets from the responder")
			}
		})
	}
	t.Run("UD", func(t *testing.T) {
		_, da, _ := newDevicesLoop(t, &pairOpts{})
		pd, _ := da.AllocPD()
		cq, _ := da.CreateCQ(4, nil)
		qp, err := pd.CreateQP(QPInitAttr{Type: UD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if want := wire.QPSourcePort(qp.qpn); qp.sport != want {
			t.Errorf("UD QP %#x: source port %#x, want %#x", qp.qpn, qp.sport, want)
		}
	})
}
