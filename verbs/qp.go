// Queue pairs: creation, the IBTA state machine with its table of required
// and optional attributes, Query, and the post calls that validate work
// requests and copy them into fixed queue slots for the engine.

package verbs

import (
	"fmt"
	"github.com/softrdma/softrdma/internal/mem"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// QPCap are the queue sizes of a QP (ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int
}

// QPInitAttr are the creation parameters of a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	// SQSigAll makes every send work request generate a completion.
	SQSigAll bool
	// Context is stored in the QP for the application (qp_context).
	Context any
}

// AttrMask selects the QPAttr fields a Modify call sets (ibv_qp_attr_mask).
type AttrMask int

// Attribute mask bits.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

var attrNames = [...]string{"AttrState", "AttrCurState", "AttrEnSQDAsyncNotify", "AttrAccessFlags",
	"AttrPKeyIndex", "AttrPort", "AttrQKey", "AttrAV", "AttrPathMTU", "AttrTimeout", "AttrRetryCnt",
	"AttrRNRRetry", "AttrRQPSN", "AttrMaxQPRdAtomic", "AttrAltPath", "AttrMinRNRTimer", "AttrSQPSN",
	"AttrMaxDestRdAtomic", "AttrPathMigState", "AttrCap", "AttrDestQPN"}

// String names the mask's bits as the constants do, joined by "|", for
// example "AttrState|AttrPathMTU"; unknown bits print in hex and an empty
// mask prints as "0".
func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b []byte
	for i, name := range attrNames {
		if m&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, name...)
		}
	}
	if rest := m &^ (1<<len(attrNames) - 1); rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = fmt.Appendf(b, "%#x", int(rest))
	}
	return string(b)
}

// QPAttr are a QP's attributes (ibv_qp_attr). Modify reads the fields its
// mask selects; Query fills them all.
type QPAttr struct {
	State            QPState
	CurState         QPState
	PathMTU          MTU
	QKey             wire.QKey
	RQPSN            wire.PSN
	SQPSN            wire.PSN
	DestQPN          wire.QPN
	AccessFlags      Access
	Cap              QPCap
	AH               AHAttr
	PKeyIndex        int
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      int
	MaxDestRdAtomic  int
	MinRNRTimer      uint8
	PortNum          int
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	// The alternate path of a connected QP (AttrAltPath): its address
	// vector, port, P_Key index and local ACK timeout, used once the QP
	// migrates to it; and the path migration state (AttrPathMigState).
	// See apm.go and docs/DESIGN.md's "Path migration".
	AltAH        AHAttr
	AltPortNum   int
	AltPKeyIndex int
	AltTimeout   uint8
	PathMigState MigState
}

// QP is a queue pair.
type QP struct {
	dev      *Device
	pd       *PD
	typ      QPType
	qpn      wire.QPN
	sendCQ   *CQ
	recvCQ   *CQ
	srq      *SRQ
	sqSigAll bool
	// Context is free for the application's use (qp_context).
	Context any

	mu    sync.Mutex
	state QPState
	attr  QPAttr
	dead  bool

	// derived from attributes
	mtu   int
	src   netip.Addr
	dst   netip.AddrPort
	ib    link.IBAddr // InfiniBand addressing (ibport.go)
	pkey  wire.PKey
	sport uint16 // the UDP source port of the QP's packets (wire/srcport.go)
	// Path migration (apm.go): the alternate path, the migration state,
	// and the MigReq bit the QP's packets carry (set by setMigLocked).
	alt    altPath
	mig    MigState
	migReq bool

	sq   sendQueue
	rq   recvQueue
	req  requester.Core
	resp responder
	// lastMR is the region or window the last remote access through the
	// QP found (mem.Table.RemoteQPLast). Guarded by mu.
	lastMR *mem.MR
	// lastLocal is the region the last gather or scatter through the QP's
	// SGEs found (mem.Table.GatherLast). Guarded by mu.
	lastLocal *mem.MR

	out []*link.Packet // packets built under mu, sent by unlockSend

	// listed says the device's pacer has the QP in its run list (for the
	// rest of a READ answer, or to send out; see pace.go). Guarded by mu.
	listed bool
	// sigOut counts the signaled send work requests posted and not yet
	// completed; sigFlush says the PostSend under way posted one while
	// none was (unlockDeferred sends at once then). Guarded by mu.
	sigOut   int
	sigFlush bool
	// ackHeld says the QP is in the device's list of held ACKs
	// (ackdefer.go). Guarded by mu.
	ackHeld bool
	// ackTimed says the held ACK is held for an answer, on the device's
	// ACK timer, and holdSeq numbers such holds; answers says the QP is in
	// answer mode; lastAckAt is when a receive last called for an ACK
	// (QP.now time). See ackanswer.go. Guarded by mu.
	ackTimed  bool
	holdSeq   uint32
	answers   bool
	lastAckAt int64
	// budgetWait says the QP waits for room in the device's in-flight
	// bound (txBudget); the pacer clears it and has the QP progress.
	budgetWait atomic.Bool
	// budgetGrant is room in the bound set aside for the QP when it was
	// woken (its turn, see turns.go), until its requester takes it.
	budgetGrant atomic.Int32
	// budgetH is the QP's handle on the bound (requester.Budget).
	budgetH qpBudget
	// lastPost is when the latest post returned (or, for one left to the
	// pacer, began), clock nanoseconds.
	lastPost atomic.Int64
	// cnt counts the QP's events under rxe's names (Counters).
	cnt hwCounters

	// txMu orders the sends of the QP's packets once they have left mu:
	// unlockSend takes it before releasing mu, so batches go out in the
	// order they were built. Lock order: mu, then txMu; never mu under
	// txMu. txOut is the batch being sent, guarded by txMu.
	txMu    sync.Mutex
	txOut   []*link.Packet
	retryT  *time.Timer
	retryAt int64 // when retryT fires, clock nanoseconds
	rnrT    *time.Timer
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) { return pd.createQP(init, autoQPN) }

// autoQPN asks createQP for the next free QPN.
const autoQPN = wire.QPN(1 << 24)

// createQP creates a QP with the next free QPN, or with QPN fixed if it is
// not autoQPN (the SMI and GSI QPs).
func (pd *PD) createQP(init QPInitAttr, fixed wire.QPN) (*QP, error) {
	d := pd.dev
	switch init.Type {
	case RC, UC, UD:
	default:
		return nil, errf(ErrInvalid, "QP type %v", init.Type)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, errf(ErrInvalid, "send and receive CQs are required")
	}
	if init.SendCQ.dev != d || init.RecvCQ.dev != d {
		return nil, errf(ErrInvalid, "CQ of another device")
	}
	c := init.Cap
	if c.MaxSendWR < 1 || c.MaxSendWR > MaxQPWR {
		return nil, errf(ErrInvalid, "max_send_wr %d (1..%d)", c.MaxSendWR, MaxQPWR)
	}
	if init.SRQ == nil && (c.MaxRecvWR < 1 || c.MaxRecvWR > MaxQPWR) {
		return nil, errf(ErrInvalid, "max_recv_wr %d (1..%d)", c.MaxRecvWR, MaxQPWR)
	}
	if c.MaxSendSGE < 0 || c.MaxSendSGE > MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > MaxSGE {
		return nil, errf(ErrInvalid, "SGE counts %d/%d (0..%d)", c.MaxSendSGE, c.MaxRecvSGE, MaxSGE)
	}
	if c.MaxInlineData < 0 || c.MaxInlineData > MaxInline {
		return nil, errf(ErrInvalid, "max_inline_data %d (0..%d)", c.MaxInlineData, MaxInline)
	}
	if init.SRQ != nil {
		if init.SRQ.pd.dev != d {
			return nil, errf(ErrInvalid, "SRQ of another device")
		}
		// An SRQ serves RC, UC and UD QPs alike, as in Linux rxe.
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if init.SRQ != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	if err := pd.hold(); err != nil {
		return nil, err
	}
	if err := init.SendCQ.hold(); err != nil {
		pd.release()
		return nil, err
	}
	if err := init.RecvCQ.hold(); err != nil {
		init.SendCQ.release()
		pd.release()
		return nil, err
	}
	if init.SRQ != nil {
		init.SRQ.refs.Add(1)
	}
	qp := &QP{dev: d, pd: pd, typ: init.Type, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, sqSigAll: init.SQSigAll, Context: init.Context, state: StateReset}
	qp.attr.Cap = c
	qp.sq.init(c.MaxSendWR, c.MaxSendSGE, c.MaxInlineData)
	qp.req.Init(c.MaxSendWR, (*reqSink)(qp))
	if init.SRQ == nil {
		qp.rq.init(c.MaxRecvWR, c.MaxRecvSGE)
	}
	qp.out = make([]*link.Packet, 0, 64)
	qp.resetLocked()

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.nQP >= MaxQP {
		qp.releaseRefs()
		if d.closed {
			return nil, errf(ErrClosed, "device %s", d.name)
		}
		return nil, errf(ErrLimit, "%d QPs", MaxQP)
	}
	assigned := fixed != autoQPN
	if assigned {
		if _, used := d.qps[fixed]; used {
			qp.releaseRefs()
			return nil, errf(ErrBusy, "QP %d exists", fixed)
		}
		qp.qpn = fixed
	}
	for !assigned {
		n := wire.QPN(d.nextQPN)
		d.nextQPN++
		if d.nextQPN > wire.Mask24 {
			d.nextQPN = 2
		}
		if _, used := d.qps[n]; !used && n >= 2 {
			qp.qpn, assigned = n, true
		}
	}
	qp.sport = wire.QPSourcePort(qp.qpn)
	d.qps[qp.qpn] = qp
	d.nQP++
	d.qpTable.set(qp)
	return qp, nil
}

func (qp *QP) releaseRefs() {
	qp.sendCQ.release()
	qp.recvCQ.release()
	if qp.srq != nil {
		qp.srq.refs.Add(-1)
	}
	qp.pd.release()
}

// QPN returns the queue pair number.
func (qp *QP) QPN() wire.QPN { return qp.qpn }

// Type returns the QP's transport type.
func (qp *QP) Type() QPType { return qp.typ }

// State returns the current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Destroy moves the QP to the error state, flushing its work requests, and
// frees it.
func (qp *QP) Destroy() error {
	qp.mu.Lock()
	if qp.dead {
		qp.mu.Unlock()
		return errf(ErrClosed, "QP already destroyed")
	}
	qp.sendAcksLocked() // ackdefer.go; the requests left for the pacer are dropped
	qp.dead = true
	qp.stopTimersLocked()
	qp.dropRespQueueLocked()
	qp.req.Release()
	qp.state = StateReset
	qp.mu.Unlock()
	d := qp.dev
	d.mcast.detachAll(qp)
	d.mu.Lock()
	delete(d.qps, qp.qpn)
	d.nQP--
	d.qpTable.del(qp.qpn)
	d.mu.Unlock()
	d.mrs.UnbindQP(uint32(qp.qpn)) // its type 2 windows (mw.go)
	qp.releaseRefs()
	return nil
}

// shutdown is Device.Close's teardown of one QP.
func (qp *QP) shutdown() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.stopTimersLocked()
	if !qp.dead && qp.state != StateReset && qp.state != StateErr {
		qp.enterErrorLocked()
	}
	qp.dead = true
}

// Query returns the QP's attributes and creation parameters.
func (qp *QP) Query() (QPAttr, QPInitAttr) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State, a.CurState = qp.state, qp.state
	a.SQPSN = qp.req.PSN()
	a.RQPSN = qp.resp.psn
	a.SQDraining = qp.state == StateSQD && !qp.sq.drainNotified
	return a, QPInitAttr{Type: qp.typ, SendCQ: qp.sendCQ, RecvCQ: qp.recvCQ, SRQ: qp.srq,
		Cap: qp.attr.Cap, SQSigAll: qp.sqSigAll, Context: qp.Context}
}

type transition struct {
	ok       bool
	req, opt [5]AttrMask // indexed by QPType (RC=2, UC=3, UD=4)
}

func perType(rc, uc, ud AttrMask) [5]AttrMask { return [5]AttrMask{2: rc, 3: uc, 4: ud} }

// stateTable is the IBTA table of legal QP state transitions with the
// attributes each requires and allows (IBTA 11.2.4.2 / Linux ib_modify_qp_is_ok).
var stateTable = func() (t [7][7]transition) {
	any := transition{ok: true}
	for s := StateReset; s <= StateErr; s++ {
		t[s][StateReset] = any
		if s != StateReset { // Linux's table has no RESET -> ERR
			t[s][StateErr] = any
		}
	}
	t[StateReset][StateInit] = transition{ok: true,
		req: perType(AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrQKey)}
	t[StateInit][StateInit] = transition{ok: true,
		opt: perType(AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrAccessFlags, AttrPKeyIndex|AttrPort|AttrQKey)}
	t[StateInit][StateRTR] = transition{ok: true,
		req: perType(AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN, 0),
		opt: perType(AttrAltPath|AttrAccessFlags|AttrPKeyIndex, AttrAltPath|AttrAccessFlags|AttrPKeyIndex, AttrPKeyIndex|AttrQKey)}
	t[StateRTR][StateRTS] = transition{ok: true,
		req: perType(AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic, AttrSQPSN, AttrSQPSN),
		opt: perType(AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrPathMigState, AttrCurState|AttrQKey)}
	t[StateRTS][StateRTS] = transition{ok: true,
		opt: perType(AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState|AttrMinRNRTimer,
			AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState, AttrCurState|AttrQKey)}
	t[StateRTS][StateSQD] = transition{ok: true,
		opt: perType(AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify)}
	t[StateSQD][StateRTS] = transition{ok: true,
		opt: perType(AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrPathMigState, AttrCurState|AttrQKey)}
	t[StateSQD][StateSQD] = transition{ok: true,
		opt: perType(AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|AttrMaxDestRdAtomic|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrMinRNRTimer|AttrPathMigState,
			AttrAV|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrPathMigState, AttrPKeyIndex|AttrQKey)}
	t[StateSQE][StateRTS] = transition{ok: true,
		opt: perType(0, AttrCurState|AttrAccessFlags, AttrCurState|AttrQKey)}
	return t
}()

// modifyAllowed reports whether moving a QP of type t from state cur with
// attribute mask mask is legal by the IBTA table, and if not, why.
func modifyAllowed(t QPType, cur QPState, attr *QPAttr, mask AttrMask) error {
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	if cur < StateReset || cur > StateErr || next < StateReset || next > StateErr {
		return errf(ErrInvalid, "state %v -> %v", cur, next)
	}
	if t != RC && t != UC && t != UD {
		return errf(ErrInvalid, "QP type %v", t)
	}
	if mask&AttrCurState != 0 && cur != StateRTR && cur != StateRTS && cur != StateSQD && cur != StateSQE {
		return errf(ErrInvalid, "current-state attribute given in state %v", cur)
	}
	tr := stateTable[cur][next]
	if !tr.ok {
		return errf(ErrInvalid, "transition %v -> %v is not allowed", cur, next)
	}
	req, opt := tr.req[t], tr.opt[t]
	if mask&req != req {
		return errf(ErrInvalid, "%v -> %v on %v needs %v; missing %v", cur, next, t, req, req&^mask)
	}
	if extra := mask &^ (req | opt | AttrState); extra != 0 {
		return errf(ErrInvalid, "%v -> %v on %v does not take %v", cur, next, t, extra)
	}
	return nil
}

// Modify changes the QP's attributes and state (ibv_modify_qp).
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	if attr == nil {
		return errf(ErrInvalid, "nil attributes")
	}
	qp.mu.Lock()
	err := qp.modifyLocked(attr, mask)
	src, sport := qp.src, qp.sport
	altSrc, altSport := qp.altSourceLocked()
	qp.unlockSend()
	if err == nil && mask&(AttrAV|AttrAltPath|AttrPathMigState) != 0 && (qp.typ == RC || qp.typ == UC) {
		// The QP's source port is known: let the link prepare it now, on
		// this thread and off the data path (link/udp opens a socket);
		// and the one it will use once it migrates to its alternate path.
		if r, ok := qp.dev.link.(link.SourcePortReserver); ok {
			r.ReserveSourcePort(src, sport)
			if mask&AttrAltPath != 0 {
				r.ReserveSourcePort(altSrc, altSport)
			}
		}
	}
	return err
}

// modifyLocked is Modify under the QP lock.
func (qp *QP) modifyLocked(attr *QPAttr, mask AttrMask) error {
	if qp.dead {
		return errf(ErrClosed, "QP destroyed")
	}
	cur := qp.state
	if mask&AttrCurState != 0 && attr.CurState != cur {
		return errf(ErrInvalid, "current state is %v, attribute says %v", cur, attr.CurState)
	}
	if err := modifyAllowed(qp.typ, cur, attr, mask); err != nil {
		return err
	}
	// Validate values before changing anything.
	a := qp.attr
	var src netip.Addr
	var dst netip.AddrPort
	var ib link.IBAddr
	if mask&AttrPort != 0 && attr.PortNum != 1 {
		return errf(ErrInvalid, "port %d", attr.PortNum)
	}
	if mask&AttrPKeyIndex != 0 && (attr.PKeyIndex < 0 || attr.PKeyIndex >= qp.dev.pkeyTableLen()) {
		return errf(ErrInvalid, "P_Key index %d", attr.PKeyIndex)
	}
	if mask&AttrPathMTU != 0 && (attr.PathMTU.Bytes() == 0 || attr.PathMTU > qp.dev.mtu) {
		return errf(ErrInvalid, "path MTU %v (port MTU %v)", attr.PathMTU, qp.dev.mtu)
	}
	if mask&AttrAV != 0 {
		var err error
		if src, dst, ib, err = qp.dev.resolve(&attr.AH); err != nil {
			return err
		}
	}
	if mask&AttrDestQPN != 0 && attr.DestQPN > wire.Mask24 {
		return errf(ErrInvalid, "dest QPN %#x", attr.DestQPN)
	}
	if mask&AttrRQPSN != 0 && attr.RQPSN > wire.Mask24 {
		return errf(ErrInvalid, "RQ PSN %#x", attr.RQPSN)
	}
	if mask&AttrSQPSN != 0 && attr.SQPSN > wire.Mask24 {
		return errf(ErrInvalid, "SQ PSN %#x", attr.SQPSN)
	}
	if mask&AttrMaxQPRdAtomic != 0 && (attr.MaxRdAtomic < 0 || attr.MaxRdAtomic > MaxQPRdAtom) {
		return errf(ErrInvalid, "max_rd_atomic %d", attr.MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && (attr.MaxDestRdAtomic < 0 || attr.MaxDestRdAtomic > MaxQPRdAtom) {
		return errf(ErrInvalid, "max_dest_rd_atomic %d", attr.MaxDestRdAtomic)
	}
	if mask&AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return errf(ErrInvalid, "min_rnr_timer %d", attr.MinRNRTimer)
	}
	if mask&AttrTimeout != 0 && attr.Timeout > 31 {
		return errf(ErrInvalid, "timeout %d", attr.Timeout)
	}
	if mask&AttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return errf(ErrInvalid, "retry_cnt %d", attr.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return errf(ErrInvalid, "rnr_retry %d", attr.RNRRetry)
	}
	if mask&AttrAccessFlags != 0 && attr.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessFlushGlobal|AccessFlushPersistent) != 0 {
		return errf(ErrInvalid, "QP access flags %#x", uint32(attr.AccessFlags))
	}
	if mask&AttrCap != 0 {
		return errf(ErrNotSupported, "resizing a QP")
	}
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	pm, err := qp.checkPathMigLocked(attr, mask, next)
	if err != nil {
		return err
	}

	// Apply.
	if mask&AttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&AttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&AttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&AttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&AttrAV != 0 {
		a.AH = attr.AH
		qp.src, qp.dst, qp.ib = src, dst, ib
	}
	if mask&AttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
		qp.mtu = attr.PathMTU.Bytes()
	}
	if mask&AttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
	if mask&AttrRQPSN != 0 {
		qp.resp.psn = attr.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		qp.req.SetPSN(attr.SQPSN)
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
		qp.resp.initResources(attr.MaxDestRdAtomic)
	}
	if mask&AttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&AttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
		qp.req.SetRetry(int(attr.RetryCnt))
	}
	if mask&AttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		qp.req.SetRNRRetry(int(attr.RNRRetry))
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	if mask&AttrAV != 0 && (qp.typ == RC || qp.typ == UC) {
		// A connected QP's packets leave from a source port of the QP
		// pair, as Linux chooses it (wire.ConnectedSourcePort).
		qp.sport = wire.ConnectedSourcePort(a.AH.FlowLabel, qp.qpn, a.DestQPN)
	}
	qp.applyPathMigLocked(attr, mask, &a, &pm)
	a.PathMigState = qp.mig
	qp.attr = a
	qp.pkey = qp.dev.pkeyAt(a.PKeyIndex)
	qp.req.Configure(qp.reqConfig())

	if next == StateErr || next == StateReset {
		// An ACK held by a poll (ackdefer.go) was due before this
		// transition: it leaves with Modify's unlockSend, not dropped.
		qp.releaseAckLocked()
	}
	switch {
	case next == StateReset && cur != StateReset:
		qp.stopTimersLocked()
		qp.resetLocked()
	case next == StateErr && cur != StateErr:
		qp.state = StateErr
		qp.enterErrorLocked()
		return nil
	}
	qp.state = next
	switch {
	case next == StateRTS && (cur == StateSQD || cur == StateSQE):
		qp.sq.drainNotified = false
		qp.progressLocked()
	case next == StateSQD && cur == StateRTS:
		qp.sq.drainNotified = false
		qp.checkDrainedLocked()
	}
	return nil
}

// resetLocked returns the QP to its freshly created condition: empty queues,
// default attributes.
func (qp *QP) resetLocked() {
	c := qp.attr.Cap
	qp.attr = QPAttr{Cap: c, PathMTU: MTU256, PortNum: 1, MaxRdAtomic: 1, MaxDestRdAtomic: 1}
	qp.mtu = MTU256.Bytes()
	if qp.typ == UD {
		// UD has no path MTU attribute: it sends up to the port MTU (as
		// rxe's get_mtu does).
		qp.attr.PathMTU, qp.mtu = qp.dev.mtu, qp.dev.mtu.Bytes()
	}
	qp.answers, qp.lastAckAt = false, 0
	qp.state = StateReset
	if qp.srq == nil {
		qp.rq.reset()
	}
	qp.req.Reset() // drops the send queue without completions
	qp.sigOut = 0
	qp.req.Configure(qp.reqConfig())
	qp.dropRespQueueLocked()
	qp.resp = responder{queue: qp.resp.queue}
	qp.resp.initResources(1)
	qp.pkey = qp.dev.pkeyAt(0)
	qp.alt = altPath{}
	qp.setMigLocked(MigMigrated)
}

func (qp *QP) stopTimersLocked() {
	if qp.retryT != nil {
		qp.retryT.Stop()
		qp.retryT = nil
	}
	if qp.rnrT != nil {
		qp.rnrT.Stop()
		qp.rnrT = nil
	}
}

// enterErrorLocked flushes every outstanding work request with WR_FLUSH_ERR
// (the caller has already completed the failing one with its own status).
func (qp *QP) enterErrorLocked() {
	qp.state = StateErr
	qp.dropRespQueueLocked()
	qp.stopTimersLocked()
	qp.flushSendLocked()
	qp.flushRecvLocked()
	if qp.srq != nil {
		qp.dev.postEvent(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
	}
}
