package verbs

import (
	"errors"
	"testing"
	"time"
)

// tsPair connects a second pair of RC QPs on p's devices whose CQs stamp
// completions with ts.
func tsPair(t *testing.T, p *pair, ts WCTimestamps) (qa, qb *QP, ca, cb *CQ, ma, mb *MR) {
	t.Helper()
	mk := func(d *Device, pd *PD) (*QP, *CQ) {
		cq, err := d.CreateCQEx(64, nil, CQAttr{Timestamps: ts})
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq,
			Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return qp, cq
	}
	qa, ca = mk(p.da, p.pa)
	qb, cb = mk(p.db, p.pb)
	p.bringUp(qa, p.db, qb, 100, 200)
	p.bringUp(qb, p.da, qa, 200, 100)
	return qa, qb, ca, cb, p.reg(p.pa, 4096), p.reg(p.pb, 4096)
}

// TestCQTimestamps checks that a CQ created with both timestamp flags
// stamps every completion, send and receive, with the device clock and the
// wall clock of when it was generated: inside the window around the
// exchange, in generation order, and the same instant on both clocks.
func TestCQTimestamps(t *testing.T) {
	p := newPair(t, pairOpts{})
	qa, qb, ca, cb, ma, mb := tsPair(t, p, WCWithCompletionTimestamp|WCWithCompletionTimestampWallclock)
	if ca.Timestamps() != WCWithCompletionTimestamp|WCWithCompletionTimestampWallclock || p.ca.Timestamps() != 0 {
		t.Fatalf("Timestamps() = %v, %v", ca.Timestamps(), p.ca.Timestamps())
	}
	const n = 8
	for i := range n {
		if err := qb.PostRecv([]RecvWR{{ID: uint64(i), SGL: []SGE{mb.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	mono0, wall0 := DeviceClock(), time.Now().UnixNano()
	for i := range n {
		if err := qa.PostSend([]SendWR{{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // spread the stamps
	}
	sends := waitWC(t, ca, n, 5*time.Second)
	recvs := waitWC(t, cb, n, 5*time.Second)
	mono1, wall1 := DeviceClock(), time.Now().UnixNano()
	for _, set := range [][]WC{sends, recvs} {
		var prev uint64
		for i, wc := range set {
			if wc.Status != Success {
				t.Fatalf("completion %d: %v", i, wc.Status)
			}
			if wc.Timestamp < mono0 || wc.Timestamp > mono1 {
				t.Errorf("%v %d: Timestamp %d outside [%d, %d]", wc.Opcode, i, wc.Timestamp, mono0, mono1)
			}
			if int64(wc.WallclockNS) < wall0 || int64(wc.WallclockNS) > wall1 {
				t.Errorf("%v %d: WallclockNS %d outside [%d, %d]", wc.Opcode, i, wc.WallclockNS, wall0, wall1)
			}
			if wc.Timestamp < prev {
				t.Errorf("%v %d: Timestamp %d before the previous completion's %d", wc.Opcode, i, wc.Timestamp, prev)
			}
			prev = wc.Timestamp
			// Both clocks are read once: their offset is the same for
			// every completion (to the clock's resolution, here 1 ms).
			off := int64(wc.WallclockNS) - int64(wc.Timestamp)
			off0 := int64(set[0].WallclockNS) - int64(set[0].Timestamp)
			if d := off - off0; d > int64(time.Millisecond) || d < -int64(time.Millisecond) {
				t.Errorf("%v %d: wall clock - device clock drifted by %v", wc.Opcode, i, time.Duration(d))
			}
		}
		// The sends were posted a millisecond apart: their stamps are.
		if set[n-1].Timestamp-set[0].Timestamp < uint64(n-1)*uint64(time.Millisecond)/2 {
			t.Errorf("stamps span %v for %d sends a millisecond apart", time.Duration(set[n-1].Timestamp-set[0].Timestamp), n)
		}
	}
	// The stamp is taken at generation, not at poll: polling later does
	// not move it.
	if err := qa.PostSend([]SendWR{{ID: 99, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8)},
		RemoteAddr: mb.Addr(), RKey: mb.RKey()}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	queued := func() int { ca.mu.Lock(); defer ca.mu.Unlock(); return ca.n }
	for queued() == 0 && time.Now().Before(deadline) {
		p.da.Poll()
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(20 * time.Millisecond)
	before := DeviceClock()
	wc := waitWC(t, ca, 1, time.Second)[0]
	if wc.Timestamp >= before-uint64(10*time.Millisecond) {
		t.Errorf("WRITE completion stamped %v before the poll, want at least 10ms (stamped at poll?)", time.Duration(before-wc.Timestamp))
	}
}

// TestCQTimestampsSelected checks that each flag sets its field only, and a
// plain CQ sets neither.
func TestCQTimestampsSelected(t *testing.T) {
	for _, tc := range []struct {
		ts         WCTimestamps
		mono, wall bool
	}{{0, false, false}, {WCWithCompletionTimestamp, true, false}, {WCWithCompletionTimestampWallclock, false, true}} {
		p := newPair(t, pairOpts{})
		qa, _, ca, _, ma, mb := tsPair(t, p, tc.ts)
		if err := qa.PostSend([]SendWR{{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 8)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()}}); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, ca, 1, 5*time.Second)[0]
		if (wc.Timestamp != 0) != tc.mono || (wc.WallclockNS != 0) != tc.wall {
			t.Errorf("flags %#x: Timestamp %d, WallclockNS %d", tc.ts, wc.Timestamp, wc.WallclockNS)
		}
	}
}

// TestCreateCQExErrors checks argument checking.
func TestCreateCQExErrors(t *testing.T) {
	_, da, _ := newDevicesLoop(t, &pairOpts{})
	if _, err := da.CreateCQEx(16, nil, CQAttr{Timestamps: 1 << 5}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown flag: %v, want ErrInvalid", err)
	}
	if _, err := da.CreateCQEx(0, nil, CQAttr{Timestamps: WCWithCompletionTimestamp}); !errors.Is(err, ErrInvalid) {
		t.Errorf("depth 0: %v, want ErrInvalid", err)
	}
	a := da.QueryDevice()
	if a.CompletionTimestampMask != CompletionTimestampMask || a.HCACoreClock != HCACoreClockKHz {
		t.Errorf("QueryDevice: mask %#x, clock %d kHz", a.CompletionTimestampMask, a.HCACoreClock)
	}
}

// TestPollAllocsTimestamps checks that stamping allocates nothing.
func TestPollAllocsTimestamps(t *testing.T) {
	_, da, _ := newDevicesLoop(t, &pairOpts{})
	cq, err := da.CreateCQEx(16, nil, CQAttr{Timestamps: WCWithCompletionTimestamp | WCWithCompletionTimestampWallclock})
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]WC, 8)
	if a := testing.AllocsPerRun(1000, func() {
		for i := range 4 {
			cq.push(&WC{WRID: uint64(i)}, false)
		}
		if cq.Poll(wc) != 4 || wc[3].Timestamp == 0 || wc[3].WallclockNS == 0 {
			panic("lost completions or stamps")
		}
	}); a != 0 {
		t.Errorf("push and Poll of 4 stamped completions: %v allocations", a)
	}
}

// BenchmarkCQPush measures a completion's way through the CQ with and
// without timestamps.
func BenchmarkCQPush(b *testing.B) {
	for _, bc := range []struct {
		name string
		ts   WCTimestamps
	}{{"plain", 0}, {"timestamp", WCWithCompletionTimestamp}, {"both", WCWithCompletionTimestamp | WCWithCompletionTimestampWallclock}} {
		b.Run(bc.name, func(b *testing.B) {
			_, da, _ := newDevicesLoop(b, &pairOpts{})
			cq, err := da.CreateCQEx(16, nil, CQAttr{Timestamps: bc.ts})
			if err != nil {
				b.Fatal(err)
			}
			wc := make([]WC, 1)
			in := &WC{WRID: 1}
			b.ReportAllocs()
			for b.Loop() {
				cq.push(in, false)
				cq.poll(wc)
			}
		})
	}
}
