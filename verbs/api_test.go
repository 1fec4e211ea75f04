// API misuse: every wrong call returns an error wrapping the sentinel that
// names the mistake (ErrInvalid, ErrState, ErrClosed, ErrBusy, ErrQueueFull),
// and the post calls keep libibverbs' bad_wr contract.

package verbs

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
)

// expectErr checks that err wraps sentinel.
func expectErr(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: err %v, want %v", what, err, sentinel)
	}
}

// expectWRErr checks that err is a *WRError for request index with ID id,
// wrapping sentinel.
func expectWRErr(t *testing.T, what string, err error, index int, id uint64, sentinel error) {
	t.Helper()
	expectErr(t, what, err, sentinel)
	var we *WRError
	if !errors.As(err, &we) {
		t.Fatalf("%s: %T is not a *WRError", what, err)
	}
	if we.Index != index || we.WRID != id {
		t.Fatalf("%s: bad_wr index %d wr_id %d, want %d and %d", what, we.Index, we.WRID, index, id)
	}
}

func TestAPIPostSendBeforeRTS(t *testing.T) {
	p := newPair(t, pairOpts{})
	ma := p.reg(p.pa, 4096)
	qp := smQP(t, p, RC)
	wr := SendWR{ID: 5, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 8)}}
	try := func() {
		t.Helper()
		expectWRErr(t, "PostSend in "+qp.State().String(), qp.PostSend([]SendWR{wr}), 0, 5, ErrState)
	}
	try() // RESET
	expectWRErr(t, "PostRecv in RESET", qp.PostRecv([]RecvWR{{ID: 6, SGL: []SGE{ma.SGE(0, 8)}}}), 0, 6, ErrState)
	mustModify(t, qp, QPAttr{State: StateInit, PortNum: 1, AccessFlags: AccessLocalWrite}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags)
	try() // INIT
	// Receives may be posted from INIT on.
	postRecv(t, qp, RecvWR{ID: 6, SGL: []SGE{ma.SGE(0, 8)}})
	mustModify(t, qp, QPAttr{State: StateRTR, PathMTU: MTU1024, DestQPN: p.qb.QPN(), RQPSN: 1,
		AH: AHAttr{DGID: p.db.GIDs()[0]}, MaxDestRdAtomic: 1, MinRNRTimer: 1},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer)
	try() // RTR
	expectNoWC(t, p.ca)
}

func TestAPITooManySGEs(t *testing.T) {
	p := newPair(t, pairOpts{sge: 2})
	ma := p.reg(p.pa, 4096)
	sgl := []SGE{ma.SGE(0, 8), ma.SGE(8, 8), ma.SGE(16, 8)}
	expectWRErr(t, "PostSend", p.qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend, SGL: sgl}}), 0, 1, ErrInvalid)
	expectWRErr(t, "PostRecv", p.qa.PostRecv([]RecvWR{{ID: 2, SGL: sgl}}), 0, 2, ErrInvalid)
	srq, err := p.pa.CreateSRQ(SRQAttr{MaxWR: 4, MaxSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	expectWRErr(t, "SRQ.PostRecv", srq.PostRecv([]RecvWR{{ID: 3, SGL: sgl}}), 0, 3, ErrInvalid)
	// Two are fine.
	mb := p.reg(p.pb, 4096)
	post(t, p.qa, SendWR{ID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sgl[:2], RemoteAddr: mb.Addr(), RKey: mb.RKey()})
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 4, Success, WCRDMAWrite)
}

func TestAPIQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A fake clock and a dead network keep every request outstanding.
		p := newPair(t, pairOpts{wr: 4})
		p.tap().setDrop(func(*tapped) bool { return true })
		ma := p.reg(p.pa, 4096)
		wr := func(id uint64) SendWR { return SendWR{ID: id, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 8)}} }
		post(t, p.qa, wr(1), wr(2))
		err := p.qa.PostSend([]SendWR{wr(3), wr(4), wr(5), wr(6)})
		expectWRErr(t, "PostSend on a full send queue", err, 2, 5, ErrQueueFull)
		expectWRErr(t, "PostSend on a full send queue", p.qa.PostSend([]SendWR{wr(7)}), 0, 7, ErrQueueFull)

		recv := func(id uint64) RecvWR { return RecvWR{ID: id, SGL: []SGE{ma.SGE(0, 8)}} }
		err = p.qb.PostRecv([]RecvWR{recv(1), recv(2), recv(3), recv(4), recv(5)})
		expectWRErr(t, "PostRecv on a full receive queue", err, 4, 5, ErrQueueFull)

		srq, err := p.pa.CreateSRQ(SRQAttr{MaxWR: 2, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		err = srq.PostRecv([]RecvWR{recv(1), recv(2), recv(3)})
		expectWRErr(t, "PostRecv on a full SRQ", err, 2, 3, ErrQueueFull)
	})
}

func TestAPIBadOpcode(t *testing.T) {
	t.Run("RC", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		ma := p.reg(p.pa, 4096)
		for _, op := range []WROpcode{-1, 10, 99} { // 10: IBV_WR_TSO
			err := p.qa.PostSend([]SendWR{{ID: 1, Opcode: op, SGL: []SGE{ma.SGE(0, 8)}}})
			expectWRErr(t, op.String(), err, 0, 1, ErrInvalid)
		}
		// Atomics take exactly one 8-byte SGE.
		for _, sgl := range [][]SGE{nil, {ma.SGE(0, 4)}, {ma.SGE(0, 8), ma.SGE(8, 8)}} {
			err := p.qa.PostSend([]SendWR{{ID: 2, Opcode: WRAtomicFetchAndAdd, SGL: sgl, RemoteAddr: 8, RKey: 1}})
			expectWRErr(t, "atomic SGL", err, 0, 2, ErrInvalid)
		}
	})
	t.Run("UC", func(t *testing.T) {
		p := newPair(t, pairOpts{typ: UC})
		ma := p.reg(p.pa, 4096)
		for op := range WROpcode(len(wrTable)) {
			if info := wrInfoOf(op); info == nil || info.types.has(UC) {
				continue
			}
			err := p.qa.PostSend([]SendWR{{ID: 1, Opcode: op, SGL: []SGE{ma.SGE(0, 8)}, RemoteAddr: ma.Addr(), RKey: ma.RKey()}})
			expectWRErr(t, "UC "+op.String(), err, 0, 1, ErrInvalid)
		}
	})
	t.Run("UD", func(t *testing.T) {
		p := newPair(t, pairOpts{typ: UD})
		ma := p.reg(p.pa, 4096)
		ah, err := p.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0]})
		if err != nil {
			t.Fatal(err)
		}
		for op := range WROpcode(len(wrTable)) {
			if info := wrInfoOf(op); info == nil || info.types.has(UD) {
				continue
			}
			err := p.qa.PostSend([]SendWR{{ID: 1, Opcode: op, SGL: []SGE{ma.SGE(0, 8)}, AH: ah, RemoteQPN: p.qb.QPN()}})
			expectWRErr(t, "UD "+op.String(), err, 0, 1, ErrInvalid)
		}
		// A UD send needs a live address handle of the QP's PD and a
		// 24-bit QPN.
		err = p.qa.PostSend([]SendWR{{ID: 2, Opcode: WRSend, SGL: []SGE{ma.SGE(0, 8)}, RemoteQPN: p.qb.QPN()}})
		expectWRErr(t, "UD send without AH", err, 0, 2, ErrInvalid)
		err = p.qa.PostSend([]SendWR{{ID: 3, Opcode: WRSend, AH: ah, RemoteQPN: 1 << 24}})
		expectWRErr(t, "UD send to QPN 2^24", err, 0, 3, ErrInvalid)
		otherPD, err := p.da.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		ah2, err := otherPD.CreateAH(AHAttr{DGID: p.db.GIDs()[0]})
		if err != nil {
			t.Fatal(err)
		}
		err = p.qa.PostSend([]SendWR{{ID: 4, Opcode: WRSend, AH: ah2, RemoteQPN: p.qb.QPN()}})
		expectWRErr(t, "UD send with another PD's AH", err, 0, 4, ErrInvalid)
		if err := ah.Destroy(); err != nil {
			t.Fatal(err)
		}
		err = p.qa.PostSend([]SendWR{{ID: 5, Opcode: WRSend, AH: ah, RemoteQPN: p.qb.QPN()}})
		expectWRErr(t, "UD send with a destroyed AH", err, 0, 5, ErrInvalid)
		expectErr(t, "AH destroyed twice", ah.Destroy(), ErrClosed)
	})
}

func TestAPIInline(t *testing.T) {
	p := newPair(t, pairOpts{}) // max_inline_data 64
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	err := p.qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend, Flags: SendInline, SGL: []SGE{ma.SGE(0, 40), ma.SGE(40, 25)}}})
	expectWRErr(t, "65 inline bytes", err, 0, 1, ErrInvalid)
	err = p.qa.PostSend([]SendWR{{ID: 2, Opcode: WRRDMARead, Flags: SendInline, SGL: []SGE{ma.SGE(0, 8)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}})
	expectWRErr(t, "inline READ", err, 0, 2, ErrInvalid)
	bad := ma.SGE(0, 8)
	bad.LKey = ^bad.LKey
	err = p.qa.PostSend([]SendWR{{ID: 3, Opcode: WRSend, Flags: SendInline, SGL: []SGE{bad}}})
	expectWRErr(t, "inline from a bad lkey", err, 0, 3, ErrInvalid)
	expectState(t, p.qa, StateRTS)
	// 64 bytes inline are fine, and the data is copied at post time.
	copy(ma.Buf(), "inline!")
	postRecv(t, p.qb, RecvWR{ID: 9, SGL: []SGE{mb.SGE(0, 64)}})
	post(t, p.qa, SendWR{ID: 4, Opcode: WRSend, Flags: SendInline | SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
	copy(ma.Buf(), "changed")
	checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 4, Success, WCSend)
	checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 9, Success, WCRecv)
	if string(mb.Buf()[:7]) != "inline!" {
		t.Fatalf("received %q", mb.Buf()[:7])
	}
}

func TestAPIPostRecvWithSRQ(t *testing.T) {
	p := newPair(t, pairOpts{srq: 4})
	mb := p.reg(p.pb, 4096)
	err := p.qb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 8)}}})
	expectWRErr(t, "PostRecv on a QP with an SRQ", err, 0, 1, ErrInvalid)
	// The SRQ is busy while its QP exists.
	expectErr(t, "SRQ.Destroy in use", p.sb.Destroy(), ErrBusy)
	if err := p.qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := p.sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "SRQ destroyed twice", p.sb.Destroy(), ErrClosed)
	expectWRErr(t, "PostRecv on a destroyed SRQ", p.sb.PostRecv([]RecvWR{{ID: 2}}), 0, 2, ErrClosed)
	expectErr(t, "SRQ.Modify after Destroy", p.sb.Modify(SRQAttr{SRQLimit: 1}, SRQLimit), ErrClosed)
}

func TestAPIObjectLifetimes(t *testing.T) {
	p := newPair(t, pairOpts{})
	mr := p.reg(p.pa, 4096)

	expectErr(t, "Dealloc of a PD with objects", p.pa.Dealloc(), ErrBusy)
	expectErr(t, "Destroy of a CQ in use", p.ca.Destroy(), ErrBusy)

	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "Dereg twice", mr.Dereg(), ErrClosed)
	expectErr(t, "Dealloc of a PD with a QP", p.pa.Dealloc(), ErrBusy)

	if err := p.qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "QP destroyed twice", p.qa.Destroy(), ErrClosed)
	expectWRErr(t, "PostSend on a destroyed QP", p.qa.PostSend([]SendWR{{ID: 1, Opcode: WRSend}}), 0, 1, ErrClosed)
	expectWRErr(t, "PostRecv on a destroyed QP", p.qa.PostRecv([]RecvWR{{ID: 2}}), 0, 2, ErrClosed)
	expectErr(t, "Modify of a destroyed QP", p.qa.Modify(&QPAttr{State: StateErr}, AttrState), ErrClosed)

	if err := p.ca.Destroy(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "CQ destroyed twice", p.ca.Destroy(), ErrClosed)
	_, err := p.pa.CreateQP(QPInitAttr{Type: RC, SendCQ: p.ca, RecvCQ: p.ca, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	expectErr(t, "CreateQP on a destroyed CQ", err, ErrClosed)

	if err := p.pa.Dealloc(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "PD deallocated twice", p.pa.Dealloc(), ErrClosed)
	_, err = p.pa.RegMR(make([]byte, 8), AccessLocalWrite)
	expectErr(t, "RegMR in a deallocated PD", err, ErrClosed)

	if err := p.da.Close(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "Device closed twice", p.da.Close(), ErrClosed)
	_, err = p.da.AllocPD()
	expectErr(t, "AllocPD on a closed device", err, ErrClosed)
	_, err = p.da.CreateCQ(1, nil)
	expectErr(t, "CreateCQ on a closed device", err, ErrClosed)
}

func TestAPIInvalidArguments(t *testing.T) {
	p := newPair(t, pairOpts{})
	good := QPInitAttr{Type: RC, SendCQ: p.ca, RecvCQ: p.ca, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	other, err := p.db.CreateCQ(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(a *QPInitAttr)
	}{
		{"type", func(a *QPInitAttr) { a.Type = QPType(1) }},
		{"no send CQ", func(a *QPInitAttr) { a.SendCQ = nil }},
		{"CQ of another device", func(a *QPInitAttr) { a.RecvCQ = other }},
		{"max_send_wr 0", func(a *QPInitAttr) { a.Cap.MaxSendWR = 0 }},
		{"max_recv_wr too big", func(a *QPInitAttr) { a.Cap.MaxRecvWR = MaxQPWR + 1 }},
		{"max_send_sge too big", func(a *QPInitAttr) { a.Cap.MaxSendSGE = MaxSGE + 1 }},
		{"max_inline_data too big", func(a *QPInitAttr) { a.Cap.MaxInlineData = MaxInline + 1 }},
	} {
		a := good
		c.edit(&a)
		_, err := p.pa.CreateQP(a)
		expectErr(t, "CreateQP with bad "+c.name, err, ErrInvalid)
	}
	_, err = p.da.CreateCQ(0, nil)
	expectErr(t, "CreateCQ(0)", err, ErrInvalid)
	_, err = p.da.CreateCQ(MaxCQE+1, nil)
	expectErr(t, "CreateCQ(MaxCQE+1)", err, ErrInvalid)
	_, err = p.da.CreateCQ(1, p.db.CreateCompChannel())
	expectErr(t, "CreateCQ with another device's channel", err, ErrInvalid)
	expectErr(t, "ReqNotify without a channel", p.ca.ReqNotify(false), ErrInvalid)
	_, err = p.pa.RegMR(nil, AccessLocalWrite)
	expectErr(t, "RegMR of nothing", err, ErrInvalid)
	_, err = p.pa.RegMR(make([]byte, 8), AccessRemoteWrite) // remote write needs local write
	expectErr(t, "RegMR with remote write only", err, ErrInvalid)
	_, err = p.pa.CreateSRQ(SRQAttr{MaxWR: 0, MaxSGE: 1})
	expectErr(t, "CreateSRQ with max_wr 0", err, ErrInvalid)
	_, err = p.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0], SGIDIndex: 3})
	expectErr(t, "CreateAH with a bad GID index", err, ErrInvalid)
	_, err = p.pa.CreateAH(AHAttr{})
	expectErr(t, "CreateAH without a destination", err, ErrInvalid)
	expectErr(t, "Modify(nil)", p.qa.Modify(nil, AttrState), ErrInvalid)
	_, err = p.da.QueryPort(2)
	expectErr(t, "QueryPort(2)", err, ErrInvalid)
	_, err = p.da.QueryGID(1, 5)
	expectErr(t, "QueryGID(1, 5)", err, ErrInvalid)
}

func TestAPIBadWRContract(t *testing.T) {
	// PostSend of five requests whose third is bad: the first two are
	// posted (and complete), the failing one and the two after it are not.
	p := newPair(t, pairOpts{sge: 2})
	ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
	w := p.tap()
	write := func(id uint64, sgl ...SGE) SendWR {
		return SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sgl, RemoteAddr: mb.Addr() + id*16, RKey: mb.RKey()}
	}
	for i := range 64 {
		ma.Buf()[i] = byte(i + 1)
	}
	wrs := []SendWR{
		write(101, ma.SGE(0, 16)),
		write(102, ma.SGE(16, 16)),
		write(103, ma.SGE(0, 4), ma.SGE(4, 4), ma.SGE(8, 4)), // three SGEs, the QP allows two
		write(104, ma.SGE(32, 16)),
		write(105, ma.SGE(48, 16)),
	}
	err := p.qa.PostSend(wrs)
	expectWRErr(t, "PostSend", err, 2, 103, ErrInvalid)

	// A marker request posted later completes after the first two, and
	// nothing else completes: 103-105 were never posted.
	post(t, p.qa, write(106, ma.SGE(0, 16)))
	wc := waitWC(t, p.ca, 3, waitFor)
	for i, id := range []uint64{101, 102, 106} {
		checkWC(t, wc[i], id, Success, WCRDMAWrite)
	}
	expectNoWC(t, p.ca)
	if n := len(w.all(both(from(p.da), isRequest))); n != 3 {
		t.Fatalf("%d requests on the wire, want 3", n)
	}
	for _, id := range []uint64{104, 105} {
		if off := id * 16; string(mb.Buf()[off:off+16]) != string(make([]byte, 16)) {
			t.Fatalf("request %d reached the responder", id)
		}
	}
	expectState(t, p.qa, StateRTS)

	// The same for receives.
	recvs := []RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 8)}}, {ID: 2, SGL: []SGE{mb.SGE(0, 8), mb.SGE(8, 8), mb.SGE(16, 8)}}, {ID: 3}}
	expectWRErr(t, "PostRecv", p.qb.PostRecv(recvs), 1, 2, ErrInvalid)
	mustModify(t, p.qb, QPAttr{State: StateErr}, AttrState)
	checkWC(t, waitWC(t, p.cb, 1, waitFor)[0], 1, WRFlushErr, WCRecv)
	expectNoWC(t, p.cb)
}

// TestWCErr: a failed completion as an error matches ErrCompletion and its
// status with errors.Is; a successful one has none.
func TestWCErr(t *testing.T) {
	ok := WC{WRID: 1, Status: Success}
	if err := ok.Err(); err != nil {
		t.Fatalf("successful completion: %v", err)
	}
	bad := WC{WRID: 7, Status: RetryExcErr, Opcode: WCSend, QPNum: 0x12}
	err := bad.Err()
	var ce *CompletionError
	if !errors.Is(err, ErrCompletion) || !errors.Is(err, RetryExcErr) || errors.Is(err, RemAccessErr) || !errors.As(err, &ce) || ce.WRID != 7 {
		t.Fatalf("failed completion: %v", err)
	}
	if want := "verbs: work request 7 (SEND) on QP 0x12 failed: transport retry counter exceeded (12)"; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

// TestDefaultNames: devices opened without a name get distinct ones.
func TestDefaultNames(t *testing.T) {
	_, da, db := newDevicesLoop(t, &pairOpts{})
	if da.Name() == db.Name() || !strings.HasPrefix(da.Name(), "softrdma") || !strings.HasPrefix(db.Name(), "softrdma") {
		t.Fatalf("names %q and %q", da.Name(), db.Name())
	}
}
