// The QP state machine: modifyAllowed against an independent transcription
// of the IBTA transition table (as Linux has it in qp_state_table,
// drivers/infiniband/core/verbs.c), and QP.Modify end to end through the
// real transitions with Query reading back what was set.

package verbs

import (
	"errors"
	"fmt"
	"testing"
)

// ibtaRule is one legal transition: the attributes it requires and the ones
// it also accepts, per QP type.
type ibtaRule struct {
	req, opt map[QPType]AttrMask
}

func rule(reqRC, reqUC, reqUD, optRC, optUC, optUD AttrMask) ibtaRule {
	return ibtaRule{req: map[QPType]AttrMask{RC: reqRC, UC: reqUC, UD: reqUD},
		opt: map[QPType]AttrMask{RC: optRC, UC: optUC, UD: optUD}}
}

// ibtaTable lists every legal (current, next) state pair for RC, UC and UD.
// Anything not listed is illegal, RESET -> ERR included (Linux rejects it).
var ibtaTable = func() map[[2]QPState]ibtaRule {
	const (
		pkey    = AttrPKeyIndex
		port    = AttrPort
		access  = AttrAccessFlags
		qkey    = AttrQKey
		av      = AttrAV
		mtu     = AttrPathMTU
		dqpn    = AttrDestQPN
		rqpsn   = AttrRQPSN
		sqpsn   = AttrSQPSN
		destRd  = AttrMaxDestRdAtomic
		rd      = AttrMaxQPRdAtomic
		minRNR  = AttrMinRNRTimer
		timeout = AttrTimeout
		retry   = AttrRetryCnt
		rnr     = AttrRNRRetry
		alt     = AttrAltPath
		mig     = AttrPathMigState
		cur     = AttrCurState
		sqd     = AttrEnSQDAsyncNotify
	)
	none := rule(0, 0, 0, 0, 0, 0)
	t := map[[2]QPState]ibtaRule{
		{StateReset, StateReset}: none,
		{StateReset, StateInit}:  rule(pkey|port|access, pkey|port|access, pkey|port|qkey, 0, 0, 0),
		{StateInit, StateInit}:   rule(0, 0, 0, pkey|port|access, pkey|port|access, pkey|port|qkey),
		{StateInit, StateRTR}: rule(av|mtu|dqpn|rqpsn|destRd|minRNR, av|mtu|dqpn|rqpsn, 0,
			alt|access|pkey, alt|access|pkey, pkey|qkey),
		{StateRTR, StateRTS}: rule(timeout|retry|rnr|sqpsn|rd, sqpsn, sqpsn,
			cur|alt|access|minRNR|mig, cur|alt|access|mig, cur|qkey),
		{StateRTS, StateRTS}: rule(0, 0, 0, cur|access|alt|mig|minRNR, cur|access|alt|mig, cur|qkey),
		{StateRTS, StateSQD}: rule(0, 0, 0, sqd, sqd, sqd),
		{StateSQD, StateRTS}: rule(0, 0, 0, cur|alt|access|minRNR|mig, cur|alt|access|mig, cur|qkey),
		{StateSQD, StateSQD}: rule(0, 0, 0,
			port|av|timeout|retry|rnr|rd|destRd|alt|access|pkey|minRNR|mig,
			av|alt|access|pkey|mig, pkey|qkey),
		// RC QPs never enter SQE, but the table lets them leave it.
		{StateSQE, StateRTS}: rule(0, 0, 0, 0, cur|access, cur|qkey),
	}
	for s := StateInit; s <= StateErr; s++ {
		t[[2]QPState{s, StateReset}] = none
		t[[2]QPState{s, StateErr}] = none
	}
	return t
}()

var (
	allStates = []QPState{StateReset, StateInit, StateRTR, StateRTS, StateSQD, StateSQE, StateErr}
	allTypes  = []QPType{RC, UC, UD}
)

// allBits are the attribute mask bits other than AttrState.
var allBits = func() []AttrMask {
	var b []AttrMask
	for m := AttrCurState; m <= AttrDestQPN; m <<= 1 {
		b = append(b, m)
	}
	return b
}()

func bitsOf(m AttrMask) []AttrMask {
	var out []AttrMask
	for _, b := range allBits {
		if m&b != 0 {
			out = append(out, b)
		}
	}
	return out
}

func TestModifyAllowedTable(t *testing.T) {
	checks := 0
	try := func(typ QPType, cur, next QPState, mask AttrMask, want bool, why string) {
		t.Helper()
		checks++
		attr := &QPAttr{State: next}
		err := modifyAllowed(typ, cur, attr, mask)
		switch {
		case want && err != nil:
			t.Errorf("%v %v->%v mask %#x (%s): rejected: %v", typ, cur, next, int(mask), why, err)
		case !want && err == nil:
			t.Errorf("%v %v->%v mask %#x (%s): accepted", typ, cur, next, int(mask), why)
		case !want && !errors.Is(err, ErrInvalid):
			t.Errorf("%v %v->%v mask %#x (%s): error %v does not wrap ErrInvalid", typ, cur, next, int(mask), why, err)
		}
	}
	for _, typ := range allTypes {
		for _, cur := range allStates {
			for _, next := range allStates {
				r, legal := ibtaTable[[2]QPState{cur, next}]
				if !legal {
					try(typ, cur, next, AttrState, false, "illegal transition")
					for _, b := range allBits {
						try(typ, cur, next, AttrState|b, false, "illegal transition")
					}
					continue
				}
				req, opt := r.req[typ], r.opt[typ]
				try(typ, cur, next, AttrState|req, true, "required attributes")
				try(typ, cur, next, AttrState|req|opt, true, "required and all optional attributes")
				for _, b := range bitsOf(req) {
					try(typ, cur, next, AttrState|req&^b, false, fmt.Sprintf("required minus %#x", int(b)))
				}
				for _, b := range bitsOf(opt) {
					try(typ, cur, next, AttrState|req|b, true, fmt.Sprintf("required plus optional %#x", int(b)))
				}
				for _, b := range bitsOf(^(req | opt)) {
					try(typ, cur, next, AttrState|req|b, false, fmt.Sprintf("required plus foreign %#x", int(b)))
				}
			}
			// Without AttrState the QP stays in its state (cur -> cur),
			// whatever attr.State says.
			r, legal := ibtaTable[[2]QPState{cur, cur}]
			for _, b := range allBits {
				want := legal && r.req[typ] == 0 && r.opt[typ]&b != 0
				checks++
				err := modifyAllowed(typ, cur, &QPAttr{State: StateErr}, b)
				if want != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
					t.Errorf("%v %v without AttrState, mask %#x: err %v, want allowed=%v", typ, cur, int(b), err, want)
				}
			}
			if err := modifyAllowed(typ, cur, &QPAttr{}, 0); legal != (err == nil) {
				t.Errorf("%v %v with an empty mask: err %v, want allowed=%v", typ, cur, err, legal)
			}
		}
	}
	t.Logf("%d checks", checks)
}

func TestModifyAllowedBadArguments(t *testing.T) {
	for _, c := range []struct {
		typ       QPType
		cur, next QPState
	}{
		{QPType(1), StateReset, StateInit},
		{QPType(5), StateReset, StateInit},
		{RC, QPState(-1), StateErr},
		{RC, QPState(7), StateErr},
		{RC, StateRTS, QPState(7)},
		{UD, StateRTS, QPState(-1)},
	} {
		err := modifyAllowed(c.typ, c.cur, &QPAttr{State: c.next}, AttrState)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%v %v->%v: err %v, want ErrInvalid", c.typ, c.cur, c.next, err)
		}
	}
}

// smQP creates a QP of type typ on p's device A in the RESET state.
func smQP(t *testing.T, p *pair, typ QPType) *QP {
	t.Helper()
	qp, err := p.pa.CreateQP(QPInitAttr{Type: typ, SendCQ: p.ca, RecvCQ: p.ca,
		Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

func mustModify(t *testing.T, qp *QP, attr QPAttr, mask AttrMask) {
	t.Helper()
	if err := qp.Modify(&attr, mask); err != nil {
		t.Fatalf("%v->%v: %v", qp.State(), attr.State, err)
	}
}

func rejectModify(t *testing.T, qp *QP, attr QPAttr, mask AttrMask) {
	t.Helper()
	before, _ := qp.Query()
	err := qp.Modify(&attr, mask)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Modify(%+v, %#x) in %v: err %v, want ErrInvalid", attr, int(mask), before.State, err)
	}
	if after, _ := qp.Query(); after != before {
		t.Fatalf("a rejected Modify changed the QP:\n%+v\n%+v", before, after)
	}
}

func TestModifyEndToEnd(t *testing.T) {
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{})
			qp := smQP(t, p, typ)
			peer := p.db.GIDs()[0]
			if a, _ := qp.Query(); a.State != StateReset {
				t.Fatalf("new QP in %v", a.State)
			}
			rejectModify(t, qp, QPAttr{State: StateErr}, AttrState) // not from RESET
			rejectModify(t, qp, QPAttr{State: StateRTR}, AttrState)
			rejectModify(t, qp, QPAttr{State: StateInit}, AttrState) // required attributes missing

			// RESET -> INIT
			initMask := AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags
			if typ == UD {
				initMask = AttrState | AttrPKeyIndex | AttrPort | AttrQKey
			}
			rejectModify(t, qp, QPAttr{State: StateInit, PortNum: 2, QKey: 1, AccessFlags: AccessLocalWrite}, initMask)
			rejectModify(t, qp, QPAttr{State: StateInit, PortNum: 1, PKeyIndex: 1, QKey: 1}, initMask)
			mustModify(t, qp, QPAttr{State: StateInit, PortNum: 1, QKey: 0x1234, AccessFlags: AccessLocalWrite | AccessRemoteRead}, initMask)
			a, _ := qp.Query()
			if a.State != StateInit || a.CurState != StateInit || a.PortNum != 1 || a.PKeyIndex != 0 {
				t.Fatalf("INIT: %+v", a)
			}
			if typ == UD && a.QKey != 0x1234 || typ != UD && a.AccessFlags != AccessLocalWrite|AccessRemoteRead {
				t.Fatalf("INIT: qkey %#x access %v", a.QKey, a.AccessFlags)
			}
			// INIT -> INIT changes what it may.
			if typ == UD {
				mustModify(t, qp, QPAttr{QKey: 0x5678}, AttrQKey)
			} else {
				mustModify(t, qp, QPAttr{AccessFlags: AccessLocalWrite | AccessRemoteWrite}, AttrAccessFlags)
			}
			rejectModify(t, qp, QPAttr{State: StateRTS, SQPSN: 1}, AttrState|AttrSQPSN) // INIT -> RTS skips RTR

			// INIT -> RTR
			rtr := QPAttr{State: StateRTR, PathMTU: MTU2048, DestQPN: 0xABCDE, RQPSN: 0x123456,
				AH: AHAttr{DGID: peer, PortNum: 1, HopLimit: 64}, MaxDestRdAtomic: 4, MinRNRTimer: 12}
			rtrMask := map[QPType]AttrMask{
				RC: AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
				UC: AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
				UD: AttrState,
			}[typ]
			if typ != UD {
				bad := rtr
				bad.PathMTU = MTU(9)
				rejectModify(t, qp, bad, rtrMask)
				bad = rtr
				bad.DestQPN = 1 << 24
				rejectModify(t, qp, bad, rtrMask)
				bad = rtr
				bad.AH.SGIDIndex = 5
				rejectModify(t, qp, bad, rtrMask)
			}
			mustModify(t, qp, rtr, rtrMask)
			a, _ = qp.Query()
			if a.State != StateRTR {
				t.Fatalf("RTR: %+v", a)
			}
			if typ != UD && (a.PathMTU != MTU2048 || a.DestQPN != 0xABCDE || a.RQPSN != 0x123456 || a.AH.DGID != peer || a.AH.HopLimit != 64) {
				t.Fatalf("RTR: %+v", a)
			}
			if typ == RC && (a.MaxDestRdAtomic != 4 || a.MinRNRTimer != 12) {
				t.Fatalf("RTR: %+v", a)
			}

			// RTR -> RTS, naming the current state (IBTA allows it from RTR).
			rts := QPAttr{State: StateRTS, CurState: StateRTR, SQPSN: 0x654321, Timeout: 14, RetryCnt: 5, RNRRetry: 6, MaxRdAtomic: 8}
			rtsMask := AttrState | AttrCurState | AttrSQPSN
			if typ == RC {
				rtsMask |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
				bad := rts
				bad.RetryCnt = 8
				rejectModify(t, qp, bad, rtsMask)
				bad = rts
				bad.Timeout = 32
				rejectModify(t, qp, bad, rtsMask)
			}
			bad := rts
			bad.CurState = StateInit // wrong: the QP is in RTR
			rejectModify(t, qp, bad, rtsMask)
			mustModify(t, qp, rts, rtsMask)
			a, _ = qp.Query()
			if a.State != StateRTS || a.SQPSN != 0x654321 {
				t.Fatalf("RTS: %+v", a)
			}
			if typ == RC && (a.Timeout != 14 || a.RetryCnt != 5 || a.RNRRetry != 6 || a.MaxRdAtomic != 8) {
				t.Fatalf("RTS: %+v", a)
			}
			rejectModify(t, qp, QPAttr{State: StateRTR}, AttrState) // no way back
			rejectModify(t, qp, QPAttr{State: StateInit}, AttrState)

			// RTS -> SQD -> SQD -> RTS
			mustModify(t, qp, QPAttr{State: StateSQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify)
			if ev := expectEvent(t, p.da, EventSQDrained); ev.QP != qp {
				t.Fatal("drained event for the wrong QP")
			}
			switch typ {
			case RC:
				mustModify(t, qp, QPAttr{Timeout: 10, RetryCnt: 2}, AttrTimeout|AttrRetryCnt)
			case UC:
				mustModify(t, qp, QPAttr{AccessFlags: AccessLocalWrite}, AttrAccessFlags)
			case UD:
				mustModify(t, qp, QPAttr{QKey: 0x9999}, AttrQKey)
			}
			a, _ = qp.Query()
			if a.State != StateSQD || a.SQDraining || !a.EnSQDAsyncNotify {
				t.Fatalf("SQD: %+v", a)
			}
			switch {
			case typ == RC && (a.Timeout != 10 || a.RetryCnt != 2):
				t.Fatalf("SQD->SQD: %+v", a)
			case typ == UC && a.AccessFlags != AccessLocalWrite:
				t.Fatalf("SQD->SQD: %+v", a)
			case typ == UD && a.QKey != 0x9999:
				t.Fatalf("SQD->SQD: %+v", a)
			}
			mustModify(t, qp, QPAttr{State: StateRTS, CurState: StateSQD}, AttrState|AttrCurState)
			expectState(t, qp, StateRTS)
			rejectModify(t, qp, QPAttr{State: StateSQE}, AttrState) // only the device enters SQE

			// RTS -> ERR -> RESET -> INIT
			mustModify(t, qp, QPAttr{State: StateErr}, AttrState)
			expectState(t, qp, StateErr)
			rejectModify(t, qp, QPAttr{State: StateRTS}, AttrState)
			mustModify(t, qp, QPAttr{State: StateErr}, AttrState)
			mustModify(t, qp, QPAttr{State: StateReset}, AttrState)
			a, _ = qp.Query()
			if a.State != StateReset || a.SQPSN != 0 || a.RQPSN != 0 || a.DestQPN != 0 || a.EnSQDAsyncNotify {
				t.Fatalf("RESET did not reset the attributes: %+v", a)
			}
			mustModify(t, qp, QPAttr{State: StateInit, PortNum: 1, QKey: 1}, initMask)
			mustModify(t, qp, QPAttr{State: StateReset}, AttrState)
			mustModify(t, qp, QPAttr{State: StateReset}, AttrState) // RESET -> RESET
			expectState(t, qp, StateReset)
			expectNoEvent(t, p.da)
		})
	}
}

func TestModifyReconnect(t *testing.T) {
	// A connected pair errs, is reset and connected again, and carries data.
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{typ: typ})
			ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
			for _, qp := range []*QP{p.qa, p.qb} {
				mustModify(t, qp, QPAttr{State: StateErr}, AttrState)
				mustModify(t, qp, QPAttr{State: StateReset}, AttrState)
			}
			p.bringUp(p.qa, p.db, p.qb, 0x10, 0x20)
			p.bringUp(p.qb, p.da, p.qa, 0x20, 0x10)
			copy(ma.Buf(), "again")
			postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}})
			wr := SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 5)}}
			if typ == UD {
				ah, err := p.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0]})
				if err != nil {
					t.Fatal(err)
				}
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, p.qb.QPN(), 0x11111111
			}
			post(t, p.qa, wr)
			checkWC(t, waitWC(t, p.ca, 1, waitFor)[0], 2, Success, WCSend)
			wc := waitWC(t, p.cb, 1, waitFor)[0]
			checkWC(t, wc, 1, Success, WCRecv)
			off := 0
			if typ == UD {
				off = grhLen
			}
			if got := string(mb.Buf()[off : off+5]); got != "again" {
				t.Fatalf("received %q", got)
			}
			if a, _ := p.qa.Query(); typ != UD && a.SQPSN != 0x21 {
				t.Fatalf("SQ PSN %#x after one packet from 0x20", a.SQPSN)
			}
		})
	}
}
