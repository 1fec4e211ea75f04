// FLUSH and ATOMIC WRITE (IBTA 1.5, Annex A19; Linux rxe since 6.2): the
// work requests, their request packets, the responder's execution and
// replay, and what "global" and "persistent" placement mean here.
//
// Both are RC requests answered by a zero-length RDMA READ response ONLY
// (rxe's send_read_response_ack), so the requester treats them as READs of
// no bytes: each takes one of the QP's max_rd_atomic credits (as rxe's
// requester does for ATOMIC WRITE), a fence waits for them, and an ACK
// that passes one without its response means the response was lost. The
// responder keeps them in its READ/atomic replay table (rxe's responder
// resources), so a duplicate is answered again without executing again.

package verbs

import (
	"encoding/binary"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// FlushType is a FLUSH's placement type (enum ibv_placement_type): the
// bits of the FETH's placement type field.
type FlushType uint8

// Placement types.
const (
	// FlushGlobal: the data written before the FLUSH is visible to every
	// reader of the target memory on the responder's host.
	FlushGlobal FlushType = 1 << 0 // IBV_FLUSH_GLOBAL
	// FlushPersistent: that data is also persistent: it survives the
	// responder's process and, as far as the file system's sync does,
	// its host (see RegFile).
	FlushPersistent FlushType = 1 << 1 // IBV_FLUSH_PERSISTENT
)

// FlushLevel is a FLUSH's selectivity level (enum ibv_selectivity_level).
type FlushLevel uint8

// Selectivity levels.
const (
	FlushRange FlushLevel = 0 // IBV_FLUSH_RANGE: Len bytes at the remote address
	FlushMR    FlushLevel = 1 // IBV_FLUSH_MR: the whole region the R_Key names
)

// FlushSpec is what a FLUSH work request flushes (ibv_wr_flush's len, type
// and level): the remote address and R_Key are SendWR's RemoteAddr and
// RKey.
type FlushSpec struct {
	Len   uint32
	Type  FlushType
	Level FlushLevel
}

// DeviceCap is a set of device capabilities: ibv_device_attr's
// device_cap_flags (the low 32 bits) and ibv_device_attr_ex's
// device_cap_flags_ex (all of them); only the bits declared here are
// defined.
type DeviceCap uint64

// Extended device capabilities (IB_UVERBS_DEVICE_*).
const (
	DeviceFlushGlobal     DeviceCap = 1 << 38 // FLUSH with global placement
	DeviceFlushPersistent DeviceCap = 1 << 39 // FLUSH with persistent placement (file-backed regions)
	DeviceAtomicWrite     DeviceCap = 1 << 40 // ATOMIC_WRITE
)

// deviceCaps is what the device honours (see docs/DESIGN.md).
const deviceCaps = DeviceFlushGlobal | DeviceFlushPersistent | DeviceAtomicWrite

// isA19 reports whether op is FLUSH or ATOMIC_WRITE.
func isA19(op WROpcode) bool { return op == WRFlush || op == WRAtomicWrite }

// checkA19Locked validates a FLUSH or ATOMIC_WRITE work request, whose
// opcode and QP type are checked already. ATOMIC_WRITE's 8 bytes are either
// Inline (as ibv_wr_atomic_write copies them from a pointer: not bounded
// by MaxInlineData) or one 8-byte SGE; a FLUSH carries no data.
func (qp *QP) checkA19Locked(wr *SendWR) error {
	if wr.Opcode == WRFlush {
		f := wr.Flush
		switch {
		case len(wr.SGL) > 0 || wr.Inline != nil || wr.Flags&SendInline != 0:
			return errf(ErrInvalid, "FLUSH with data")
		case f.Type == 0 || f.Type&^(FlushGlobal|FlushPersistent) != 0:
			return errf(ErrInvalid, "FLUSH placement type %#x", uint8(f.Type))
		case f.Level != FlushRange && f.Level != FlushMR:
			return errf(ErrInvalid, "FLUSH selectivity level %d", f.Level)
		}
		return nil
	}
	switch {
	case wr.Inline != nil && (len(wr.Inline) != 8 || len(wr.SGL) > 0):
		return errf(ErrInvalid, "ATOMIC_WRITE needs 8 bytes of Inline data or one 8-byte SGE")
	case wr.Inline == nil && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8):
		return errf(ErrInvalid, "ATOMIC_WRITE needs 8 bytes of Inline data or one 8-byte SGE")
	}
	return nil
}

// enqueueA19Locked fills send queue slot w, its common fields set, from a
// FLUSH or ATOMIC_WRITE work request: ATOMIC_WRITE's 8 bytes are copied now
// (from Inline, or gathered from the SGE: a bad SGE fails the post, as for
// inline data), so the slot holds no SGL and the core a READ of 0 bytes.
func (qp *QP) enqueueA19Locked(w *swqe, wr *SendWR) error {
	w.length, w.flush = 0, wr.Flush
	if wr.Opcode == WRAtomicWrite {
		if wr.Inline != nil {
			copy(w.aw[:], wr.Inline)
		} else {
			w.sgl = appendSGL(w.sgl[:0], wr.SGL)
			err := qp.dev.mrs.Gather(w.aw[:], qp.pd.id, w.sgl, 0)
			w.sgl = w.sgl[:0]
			if err != nil {
				return errf(ErrInvalid, "ATOMIC_WRITE data: %v", err)
			}
		}
	}
	qp.req.Post(classRead, 0, w.flags&SendFence != 0)
	return nil
}

// a19RequestLocked sets the headers of a FLUSH or ATOMIC_WRITE request and
// returns its payload (ATOMIC_WRITE's 8 bytes, or nil).
func a19RequestLocked(w *swqe, h *wire.Headers) []byte {
	if w.op == WRFlush {
		h.RETH = wire.RETHFields{VA: w.raddr, RKey: w.rkey, DMALen: w.flush.Len}
		h.FETH = wire.FETHFields{Selectivity: uint8(w.flush.Level), PlacementType: uint8(w.flush.Type)}
		return nil
	}
	h.RETH = wire.RETHFields{VA: w.raddr, RKey: w.rkey, DMALen: 8}
	return w.aw[:]
}

// Responder-resource kinds of FLUSH and ATOMIC_WRITE, beside resRead and
// resAtomic (respond.go).
const (
	resAtomicWrite resKind = iota + 16
	resFlush
)

// rcAtomicWriteLocked executes a new ATOMIC_WRITE request, following rxe's
// order of checks: the QP must allow remote writes (else an invalid
// request, rxe's check_qp_attr_access), the RETH must say 8 bytes (else an
// invalid request), the R_Key must give remote write on them (else a
// remote access error) and the address must be 8-byte aligned (else an
// invalid request, rxe's RESPST_ERR_MISALIGNED_ATOMIC). The store is one
// atomic 64-bit store: no concurrent atomic or aligned load sees half of it.
func (qp *QP) rcAtomicWriteLocked(pkt wire.Packet) {
	r := &qp.resp
	psn := pkt.BTH().PSN()
	reth := pkt.RETH()
	if qp.attr.AccessFlags&AccessRemoteWrite == 0 || reth.DMALen() != 8 {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	b, ok := qp.remoteLocked(reth.RKey(), reth.VA(), 8, AccessRemoteWrite)
	if !ok {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	var v [8]byte
	copy(v[:], pkt.Payload())
	if reth.VA()%8 != 0 || mem.AtomicWrite(b, &v) != nil {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	r.remember(rdRes{kind: resAtomicWrite, psn: psn, rkey: reth.RKey(), va: reth.VA()})
	qp.a19DoneLocked(psn)
}

// rcFlushLocked executes a new FLUSH request. The QP must allow the
// placement types asked for (else an invalid request, as rxe), the
// placement type and selectivity must be defined values (else an invalid
// request: rxe treats type 0 as a no-op and any level but RANGE as MR),
// and the R_Key must name a region of the QP's PD with the FLUSH access of
// each type asked for, the range inside it unless the whole region is
// asked for (else a remote access error, rxe's check_rkey). Global
// placement needs nothing more: every request before this one has been
// executed, in PSN order, by CPU stores into the memory itself, visible to
// any reader that synchronises with the device. Persistent placement
// calls the region's Persist (msync for RegFile); a failure is a remote
// access error, as rxe answers a failed pmem flush.
func (qp *QP) rcFlushLocked(pkt wire.Packet) {
	psn := pkt.BTH().PSN()
	feth, reth := pkt.FETH(), pkt.RETH()
	typ, level := FlushType(feth.PlacementType()), FlushLevel(feth.Selectivity())
	var need Access
	if typ&FlushGlobal != 0 {
		need |= AccessFlushGlobal
	}
	if typ&FlushPersistent != 0 {
		need |= AccessFlushPersistent
	}
	if need == 0 || typ&^(FlushGlobal|FlushPersistent) != 0 || level > FlushMR || qp.attr.AccessFlags&need != need {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	mr, b, err := qp.dev.mrs.FlushRange(reth.RKey(), qp.pd.id, reth.VA(), uint64(reth.DMALen()), level == FlushMR, mem.Access(need))
	if err == nil && typ&FlushPersistent != 0 {
		err = mr.Persist(b)
	}
	if err != nil {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	qp.resp.remember(rdRes{kind: resFlush, psn: psn, rkey: reth.RKey(), va: reth.VA()})
	qp.a19DoneLocked(psn)
}

// a19DoneLocked ends an executed FLUSH or ATOMIC_WRITE: the next message,
// and its answer.
func (qp *QP) a19DoneLocked(psn wire.PSN) {
	r := &qp.resp
	r.msn = r.msn.Add(1)
	r.psn = psn.Add(1)
	qp.clearAckLocked(psn)
	qp.sendReadResponseAckLocked(psn)
}

// duplicateA19Locked answers a duplicate FLUSH or ATOMIC_WRITE that
// repeats one in the replay table (same PSN, kind, R_Key and address)
// again, without executing it again: oA19-14 and oA19-15 for FLUSH, and an
// ATOMIC_WRITE retried after its response was lost does not store its
// value a second time over what later requests wrote. Anything else is
// dropped and counted, as rxe drops a duplicate it has no resource for.
func (qp *QP) duplicateA19Locked(pkt wire.Packet) {
	psn, reth := pkt.BTH().PSN(), pkt.RETH()
	kind := resFlush
	if pkt.Info().Is(wire.FlagAtomicWrite) {
		kind = resAtomicWrite
	}
	for i := range qp.resp.res {
		res := &qp.resp.res[i]
		if res.psn == psn && res.kind == kind && res.rkey == reth.RKey() && res.va == reth.VA() {
			qp.sendReadResponseAckLocked(psn)
			return
		}
	}
	qp.dev.stats.RxDuplicateDropped.Add(1)
}

// sendReadResponseAckLocked answers a FLUSH or ATOMIC_WRITE at psn: an RDMA
// READ response ONLY of no payload with an ACK syndrome, as rxe does. It
// goes out behind any READ answer still being generated.
func (qp *QP) sendReadResponseAckLocked(psn wire.PSN) {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.RCReadResponseOnly, PKey: qp.pkey, DestQP: qp.attr.DestQPN, PSN: psn, MigReq: qp.migReq}
	h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKUnlimited, MSN: qp.resp.msn}
	p := link.Get()
	hl, _ := wire.WriteHeaders(p.Buf, &h, 0)
	qp.finishPacketLocked(p, hl, 0)
	qp.respOutLocked(p)
}

// AtomicWriteValue returns v as ATOMIC_WRITE's 8 bytes in host order, for
// SendWR.Inline: the remote word then holds v on a host of this byte
// order, as when a C program passes a pointer to a uint64_t to
// ibv_wr_atomic_write. The bytes travel as they are; the responder stores
// them unconverted.
func AtomicWriteValue(v uint64) []byte {
	return binary.NativeEndian.AppendUint64(make([]byte, 0, 8), v)
}
