// Memory windows and invalidation (IBTA 10.6.7, 10.7.2.7; Linux rxe's
// rxe_mw.c): AllocMW, the type 1 bind call, BIND_MW, LOCAL_INV and
// SEND_WITH_INV work requests, and the completion flag WITH_INV. The
// windows themselves live in the memory table (internal/mem/mw.go).

package verbs

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// Access flags for memory windows (ibv_access_flags).
const (
	// AccessMWBind lets memory windows be bound to a region
	// (IBV_ACCESS_MW_BIND).
	AccessMWBind Access = 1 << 4
	// AccessZeroBased makes a type 2 window's addresses start at 0
	// (IBV_ACCESS_ZERO_BASED).
	AccessZeroBased Access = 1 << 5
)

// Work request opcodes of memory windows and invalidation (ibv_wr_opcode).
const (
	// WRLocalInv invalidates the R_Key InvRKey on the local device.
	WRLocalInv WROpcode = 7
	// WRBindMW binds memory window MW as Bind says; the low byte of RKey
	// is the window's new key byte.
	WRBindMW WROpcode = 8
	// WRSendWithInv is a SEND whose receiver invalidates InvRKey (RC).
	WRSendWithInv WROpcode = 9
)

// Completion opcodes of the local work requests (ibv_wc_opcode).
const (
	WCBindMW   WCOpcode = 5
	WCLocalInv WCOpcode = 6
)

// WCWithInv says a receive completion's SEND invalidated
// WC.InvalidatedRKey (IBV_WC_WITH_INV).
const WCWithInv WCFlags = 1 << 3

func init() {
	wcNames[WCBindMW] = "BIND_MW"
	wcNames[WCLocalInv] = "LOCAL_INV"
}

// Device capability flags (ibv_device_cap_flags) the device advertises in
// DeviceAttr.DeviceCapFlags (and DeviceCapFlagsEx).
const (
	DeviceMemWindow DeviceCap = 1 << 17 // IBV_DEVICE_MEM_WINDOW: type 1 windows
	// DeviceMemMgtExtensions: LOCAL_INV and SEND_WITH_INV (and, for
	// kernel consumers, fast registration; IBV_DEVICE_MEM_MGT_EXTENSIONS).
	DeviceMemMgtExtensions DeviceCap = 1 << 21
	DeviceMemWindowType2B  DeviceCap = 1 << 24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
)

// MaxMW is the number of memory windows a device may have: max_mw as
// ibv_devinfo -v shows it for rxe on Linux 6.1 (the interop suite checks).
const MaxMW = 1<<19 - 1

// MWType is a memory window's type (ibv_mw_type).
type MWType int

// The window types.
const (
	// MWType1 windows are bound with QP.BindMW and stay valid until
	// deallocated; a zero-length bind unbinds them. They may not be
	// invalidated by LOCAL_INV or SEND_WITH_INV.
	MWType1 MWType = 1
	// MWType2 windows (IBTA type 2B) are bound by a BIND_MW work request,
	// are valid only on the QP that bound them, and are freed for another
	// bind by LOCAL_INV or SEND_WITH_INV.
	MWType2 MWType = 2
)

// MW is a memory window: a remote key for a part of a registered region,
// with rights of its own, that can be moved and revoked without
// re-registering the region.
type MW struct {
	pd  *PD
	m   *mem.MW
	typ MWType
	mu  sync.Mutex
	// posted is the key the last bind posted gave (type 1: the next bind
	// call counts from it, as libibverbs does from ibv_mw.rkey).
	posted atomic.Uint32
	dead   bool
}

// MWBindInfo says what a window is bound to (ibv_mw_bind_info): Length
// bytes at Addr of MR, with Access (AccessRemoteRead, AccessRemoteWrite,
// AccessRemoteAtomic, and AccessZeroBased for a type 2 window). MR nil and
// Length 0 unbind a type 1 window.
type MWBindInfo struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

// MWBind is a bind call's request (ibv_mw_bind): its work request ID and
// send flags (SendSignaled for a completion, SendFence) and what to bind.
type MWBind struct {
	ID    uint64
	Flags SendFlags
	Info  MWBindInfo
}

// AllocMW allocates a memory window of the given type (ibv_alloc_mw). A
// type 1 window starts valid and unbound, a type 2 window free; neither
// gives access before a bind.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, errf(ErrInvalid, "memory window type %d", typ)
	}
	if err := pd.hold(); err != nil {
		return nil, err
	}
	d := pd.dev
	d.mu.Lock()
	if d.nMW >= MaxMW {
		d.mu.Unlock()
		pd.release()
		return nil, errf(ErrLimit, "%d memory windows", MaxMW)
	}
	d.nMW++
	d.mu.Unlock()
	m, err := d.mrs.AllocMW(pd.id, mem.MWType(typ))
	if err != nil { // not reached: the type is checked above
		d.mu.Lock()
		d.nMW--
		d.mu.Unlock()
		pd.release()
		return nil, errf(ErrInvalid, "%v", err)
	}
	mw := &MW{pd: pd, m: m, typ: typ}
	mw.posted.Store(uint32(d.mrs.MWKey(m)))
	return mw, nil
}

// RKey returns the window's R_Key as its last bind executed made it (the
// key byte changes with every bind).
func (mw *MW) RKey() wire.RKey { return mw.pd.dev.mrs.MWKey(mw.m) }

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Dealloc frees the window (ibv_dealloc_mw). As in Linux rxe, a bound window
// may be deallocated: its binding ends with it, and its key stops working.
// It fails with ErrClosed if the window is already deallocated.
func (mw *MW) Dealloc() error {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.dead {
		return errf(ErrClosed, "memory window already deallocated")
	}
	d := mw.pd.dev
	if err := d.mrs.DeallocMW(mw.m); err != nil {
		return errf(ErrClosed, "%v", err)
	}
	mw.dead = true
	d.mu.Lock()
	d.nMW--
	d.mu.Unlock()
	mw.pd.release()
	return nil
}

// nextKey returns k with its key byte incremented (libibverbs'
// ibv_inc_rkey).
func nextKey(k wire.RKey) wire.RKey { return k&^0xff | (k+1)&0xff }

// BindMW binds a type 1 window through the QP (ibv_bind_mw): it posts a
// BIND_MW work request, which the QP executes in order with its other send
// work requests, and returns the window's new R_Key (the key byte after the
// last one posted). The bind completes with WCBindMW, with an error status
// (MWBindErr, the QP then in the error state) if the device refused it, or
// without a completion if unsignaled and successful. It fails at once, as
// libibverbs does, with ErrInvalid for a type 2 window, a range without a
// region, or a zero-based window, and for a region of another protection
// domain than the window's.
func (qp *QP) BindMW(mw *MW, b MWBind) (wire.RKey, error) {
	if mw == nil || mw.typ != MWType1 {
		return 0, errf(ErrInvalid, "bind call on a window that is not of type 1")
	}
	bi := &b.Info
	if bi.MR == nil && (bi.Addr != 0 || bi.Length != 0) {
		return 0, errf(ErrInvalid, "bind: a range without a memory region")
	}
	if bi.Access&AccessZeroBased != 0 {
		return 0, errf(ErrInvalid, "bind: zero-based type 1 window")
	}
	if bi.MR != nil && bi.MR.pd != mw.pd {
		return 0, errf(ErrInvalid, "bind: memory region of another protection domain (EPERM)")
	}
	key := nextKey(wire.RKey(mw.posted.Load()))
	err := qp.PostSend([]SendWR{{ID: b.ID, Opcode: WRBindMW, Flags: b.Flags, MW: mw, Bind: b.Info, RKey: key}})
	if err != nil {
		return 0, err
	}
	mw.posted.Store(uint32(key))
	return key, nil
}

// checkLocalWR checks what posting a BIND_MW work request needs: a window
// of this device that is allocated, and a region of this device.
func (qp *QP) checkLocalWR(wr *SendWR) error {
	if wr.Opcode != WRBindMW {
		return nil
	}
	if wr.MW == nil || wr.MW.pd.dev != qp.dev {
		return errf(ErrInvalid, "BIND_MW without a memory window of this device")
	}
	if mr := wr.Bind.MR; mr != nil && mr.pd.dev != qp.dev {
		return errf(ErrInvalid, "BIND_MW to a memory region of another device")
	}
	return nil
}

// Local executes a BIND_MW or LOCAL_INV work request when the requester
// reaches it (requester.Sink), as rxe's rxe_do_local_ops: a refused bind
// completes with MW_BIND_ERR, a refused invalidation with LOC_QP_OP_ERR.
func (s *reqSink) Local(seq uint64) requester.Status {
	qp := (*QP)(s)
	w := qp.sq.at(seq)
	switch w.op {
	case WRBindMW:
		b := mem.Bind{Addr: w.bind.Addr, Length: w.bind.Length, Access: mem.Access(w.bind.Access), KeyByte: uint8(w.rkey)}
		if w.bind.MR != nil {
			b.MR = w.bind.MR.m
		}
		if err := qp.dev.mrs.BindMW(w.mw.m, uint32(qp.qpn), qp.pd.id, b); err != nil {
			qp.dev.log.Debug("BIND_MW refused", "qpn", qp.qpn, "err", err)
			return requester.MWBindError
		}
	case WRLocalInv:
		if err := qp.dev.mrs.Invalidate(w.invRKey); err != nil {
			qp.dev.log.Debug("LOCAL_INV refused", "qpn", qp.qpn, "rkey", w.invRKey, "err", err)
			return requester.LocalOperation
		}
	default:
		return requester.LocalOperation
	}
	return requester.Success
}

// invOpcode returns the opcode of a SEND_WITH_INV's last packet (op is that
// of a SEND's): SEND_LAST_WITH_INVALIDATE or SEND_ONLY_WITH_INVALIDATE.
func invOpcode(op wire.Opcode) wire.Opcode {
	switch op {
	case wire.RCSendOnly:
		return wire.RCSendOnlyInv
	case wire.RCSendLast:
		return wire.RCSendLastInv
	}
	return op
}

// invalidateLocked invalidates the R_Key of a SEND_WITH_INV's last packet
// (rxe's execute: after its data is placed, before the message completes).
func (qp *QP) invalidateLocked(pkt wire.Packet) bool {
	rkey, _ := pkt.InvRKey()
	if err := qp.dev.mrs.Invalidate(rkey); err != nil {
		qp.dev.log.Debug("SEND_WITH_INV: R_Key not invalidated", "qpn", qp.qpn, "rkey", rkey, "err", err)
		return false
	}
	return true
}

// invalidateFailedLocked is rxe's answer to a SEND_WITH_INV whose R_Key
// cannot be invalidated (RESPST_ERR_INVALIDATE_RKEY, class J): the receive
// work request completes with REM_INV_REQ_ERR and the QP goes to the error
// state, but the packet is acknowledged as received (rxe's acknowledge
// sends the ACK its AckReq asks for, with no NAK syndrome set), so the
// sender's SEND completes successfully. No async event is raised.
func (qp *QP) invalidateFailedLocked(psn wire.PSN, ackReq bool) {
	qp.resp.ackPending = false
	qp.dropRespQueueLocked()
	if ackReq {
		qp.sendAckLocked(wire.SyndromeACKUnlimited, psn)
	}
	if qp.resp.hasWQE {
		qp.completeRecvLocked(&WC{Status: RemInvReqErr, Opcode: WCRecv}, false)
	}
	qp.enterErrorLocked()
}

// ReRegFlags say what MR.ReReg changes (ibv_rereg_mr_flags).
type ReRegFlags int

// The reregistration flags.
const (
	// ReRegTranslation: a new buffer. Linux rxe does not support it, nor
	// does softrdma (ErrNotSupported): register a new region instead.
	ReRegTranslation ReRegFlags = 1 << 0
	// ReRegPD moves the region to another protection domain.
	ReRegPD ReRegFlags = 1 << 1
	// ReRegAccess changes the region's access.
	ReRegAccess ReRegFlags = 1 << 2
)

// ReReg changes the region's protection domain (ReRegPD) and access
// (ReRegAccess) in place, as ibv_rereg_mr on Linux rxe does: the memory,
// address and L_Key stay, and the R_Key is the L_Key if the new access has
// a remote flag, else 0 (as at registration). Flags 0 change nothing. It
// fails with ErrNotSupported for ReRegTranslation, ErrInvalid for unknown
// flags, a PD of another device or access RegMR would refuse, ErrBusy
// while memory windows are bound to the region, and ErrClosed if it is
// deregistered. It must not run concurrently with other calls on the MR.
func (mr *MR) ReReg(flags ReRegFlags, pd *PD, access Access) error {
	if flags&ReRegTranslation != 0 {
		return errf(ErrNotSupported, "reregistration with a new translation")
	}
	if flags&^(ReRegPD|ReRegAccess) != 0 {
		return errf(ErrInvalid, "reregistration flags %#x", int(flags))
	}
	if flags == 0 {
		return nil
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dead {
		return errf(ErrClosed, "MR deregistered")
	}
	newPD, newAccess := mr.pd, mr.Access()
	if flags&ReRegAccess != 0 {
		newAccess = access
	}
	if flags&ReRegPD != 0 {
		if pd == nil || pd.dev != mr.pd.dev {
			return errf(ErrInvalid, "reregistration to a PD of another device")
		}
		if err := pd.hold(); err != nil {
			return err
		}
		newPD = pd
	}
	m, err := mr.pd.dev.mrs.Reregister(mr.m, newPD.id, mem.Access(newAccess))
	if err != nil {
		if newPD != mr.pd {
			newPD.release()
		}
		if errors.Is(err, mem.ErrBusy) {
			return errf(ErrBusy, "memory windows are bound to the region")
		}
		return errf(ErrInvalid, "%v", err)
	}
	if newPD != mr.pd {
		mr.pd.release()
	}
	mr.pd, mr.m = newPD, m
	return nil
}

// deviceCapFlags is the set of ibv_device_cap_flags the device honours.
const deviceCapFlags = DeviceMemWindow | DeviceMemMgtExtensions | DeviceMemWindowType2B
