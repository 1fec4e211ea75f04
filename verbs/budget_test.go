package verbs

import (
	"bytes"
	"testing"
	"time"
)

// TestInflightBound: four QPs of a device bounded to 8 packets in flight
// each WRITE 64 KiB in 256-byte packets at once, and SEND; the bound makes
// them wait for each other's acknowledgements (counted), every message
// lands whole and completes, and the bound is all given back at the end.
// The loop link loses nothing, so no QP may wait for an ACK timeout: a QP
// the bound refuses always has an acknowledgement coming to it or to
// another (requester.Budget.Expect). (Before that rule, this test counted
// 165 ACK timeouts of 17 ms.)
func TestInflightBound(t *testing.T) {
	// A 2.1 s ACK timeout: one that expires is a stall, not a slow
	// machine (the race detector on a loaded CI host once took a 17 ms
	// timeout's worth to deliver an ACK).
	o := pairOpts{devOpts: &Options{MaxInflight: 8}, mtu: MTU256, timeout: 19}
	n, da, db := newDevicesLoop(t, &o)
	const size = 64 << 10
	type side struct {
		p      *pair
		ma, mb *MR
	}
	var sides []side
	for range 4 {
		p := &pair{t: t, net: n, da: da, db: db}
		p.connect(o)
		s := side{p: p, ma: p.reg(p.pa, size), mb: p.reg(p.pb, size)}
		for i := range s.ma.Buf() {
			s.ma.Buf()[i] = byte(i*7 + len(sides))
		}
		if err := p.qb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{s.mb.SGE(0, 100)}}}); err != nil {
			t.Fatal(err)
		}
		sides = append(sides, s)
	}
	for _, s := range sides {
		post(t, s.p.qa, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s.ma.SGE(0, size)},
			RemoteAddr: s.mb.Addr(), RKey: s.mb.RKey()},
			SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.ma.SGE(size-100, 100)}})
	}
	for i, s := range sides {
		wcs := waitWC(t, s.p.ca, 2, 20*time.Second)
		checkWC(t, wcs[0], 1, Success, WCRDMAWrite)
		checkWC(t, wcs[1], 2, Success, WCSend)
		waitWC(t, s.p.cb, 1, 5*time.Second)
		want := append([]byte(nil), s.ma.Buf()...)
		copy(want, s.ma.Buf()[size-100:]) // the SEND landed over the first 100 bytes
		if !bytes.Equal(s.mb.Buf(), want) {
			t.Fatalf("QP %d: data differ", i)
		}
	}
	if n := da.Stats().TxRetryTimeouts.Load(); n != 0 {
		t.Errorf("%d ACK timeouts on a link that loses nothing", n)
	}
	if w := da.Stats().TxBudgetWaits.Load(); w == 0 {
		t.Error("no QP waited for the bound")
	}
	if a := da.budget.avail.Load(); a != 8 {
		t.Errorf("bound %d after everything completed, want 8 back", a)
	}
}
