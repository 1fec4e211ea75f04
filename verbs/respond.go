// The responder: RC, UC and UD requests that are next in sequence are
// executed here (placement of SEND and WRITE data, READ answers, atomics),
// with RC's acknowledgements and NAKs and the receive completions.

package verbs

import (
	"encoding/binary"
	"net/netip"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// responder is the receive-side state of a QP.
type responder struct {
	psn     wire.PSN // expected PSN
	msn     wire.MSN
	inMsg   bool // inside a multi-packet message
	inSend  bool // ... which is a SEND (else a WRITE)
	wqe     rwqe // receive WQE being filled
	hasWQE  bool
	off     int    // bytes placed in the current message
	wva     uint64 // current WRITE: next address
	wkey    wire.RKey
	wlen    int  // current WRITE: DMA length
	nakSent bool // a PSN sequence NAK is outstanding
	dropMsg bool // UC: drop until the next FIRST/ONLY

	ackPending bool
	ackPSN     wire.PSN

	res    []rdRes // READs and atomics executed, newest at resIdx-1
	resIdx int

	// queue holds what waits behind a READ answer being generated
	// (pace.go); pumpScheduled says the device's pacer is to generate
	// more of it.
	queue         []respItem
	pumpScheduled bool
}

// rdRes is a READ or atomic request the responder has executed, kept so a
// duplicate of it can be answered again (IBTA 9.7.5.1.1). The table holds
// max_dest_rd_atomic of them, as many as the requester may have outstanding;
// the oldest is overwritten first.
type rdRes struct {
	kind   resKind
	psn    wire.PSN // the request's PSN: the first of its responses
	npk    int      // READ: response packets
	rkey   wire.RKey
	va     uint64
	length int         // READ: bytes
	op     wire.Opcode // atomic: RCCompareSwap or RCFetchAdd
	orig   uint64      // atomic: the value it returned
}

type resKind uint8

const (
	resNone resKind = iota
	resRead
	resAtomic
)

func (r *responder) initResources(n int) {
	r.res = make([]rdRes, max(n, 1))
	r.resIdx = 0
}

// remember records an executed READ or atomic in the replay table.
func (r *responder) remember(res rdRes) {
	r.res[r.resIdx] = res
	r.resIdx = (r.resIdx + 1) % len(r.res)
}

// takeRecvLocked moves the next receive WQE into r.wqe.
func (qp *QP) takeRecvLocked() bool {
	r := &qp.resp
	if qp.srq != nil {
		if r.wqe.sgl == nil {
			r.wqe.sgl = make([]mem.SGE, 0, MaxSGE)
		}
		if !qp.srq.take(&r.wqe) {
			return false
		}
	} else {
		if qp.rq.count() == 0 {
			return false
		}
		w := qp.rq.peek()
		r.wqe.id, r.wqe.length = w.id, w.length
		r.wqe.sgl = append(r.wqe.sgl[:0], w.sgl...)
		qp.rq.head++
	}
	r.hasWQE = true
	return true
}

func (qp *QP) completeRecvLocked(wc *WC, solicited bool) {
	qp.resp.hasWQE = false
	wc.WRID = qp.resp.wqe.id
	wc.QPNum = qp.qpn
	if wc.Status == Success {
		qp.count(cntRDMARecvs, 1)
	}
	if !qp.recvCQ.push(wc, solicited) {
		qp.cqOverflowLocked()
	}
}

// flushRecvLocked completes the receive WQE in progress and every posted one
// with WR_FLUSH_ERR (not the SRQ's, which other QPs share).
func (qp *QP) flushRecvLocked() {
	if qp.resp.hasWQE {
		qp.completeRecvLocked(&WC{Status: WRFlushErr, Opcode: WCRecv}, false)
	}
	if qp.srq != nil {
		return
	}
	for qp.rq.count() > 0 {
		w := qp.rq.peek()
		wc := WC{WRID: w.id, Status: WRFlushErr, Opcode: WCRecv, QPNum: qp.qpn}
		qp.rq.head++
		if !qp.recvCQ.push(&wc, false) {
			break
		}
	}
}

// handleRCLocked is the RC responder for one request packet.
func (qp *QP) handleRCLocked(pkt wire.Packet) {
	r := &qp.resp
	bth := pkt.BTH()
	psn := bth.PSN()
	diff := psn.Diff(r.psn)
	switch {
	case diff > 0:
		// IBTA 9.7.5.1.2: a PSN sequence error is NAKed once, with the
		// expected PSN, until the expected packet arrives.
		qp.dev.stats.RxOutOfSeq.Add(1)
		if !r.nakSent {
			qp.count(cntOutOfSeqReq, 1) // as rxe: once, with the NAK
			r.nakSent = true
			qp.sendAckLocked(wire.NAKSyndrome(wire.NAKPSNSequence), r.psn)
		}
		return
	case diff < 0:
		qp.dev.stats.RxDuplicate.Add(1)
		qp.count(cntDupReq, 1)
		qp.duplicateLocked(pkt)
		return
	}
	r.nakSent = false
	info := pkt.Info()
	if !qp.checkSequenceLocked(info) ||
		(info.Has(wire.HdrPayload) && !qp.checkPayloadLen(info, len(pkt.Payload()))) {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	switch {
	case info.Is(wire.FlagSend) || info.Is(wire.FlagWrite):
		e := qp.placeLocked(pkt)
		switch {
		case e == placeOK:
			if info.Is(wire.FlagComplete) {
				r.msn = r.msn.Add(1)
			}
			if bth.AckReq() {
				qp.ackLaterLocked(psn)
			}
		case e == placeRNR:
			qp.sendRNRLocked(psn)
		case e == placeInvalidate:
			qp.invalidateFailedLocked(psn, bth.AckReq())
		default:
			f := placeFailures[e]
			qp.responderErrorLocked(psn, f.nak, f.status, f.ev)
		}
	case info.Is(wire.FlagRead):
		qp.rcReadLocked(pkt)
	case info.Is(wire.FlagAtomic):
		qp.rcAtomicLocked(pkt)
	case info.Is(wire.FlagAtomicWrite):
		qp.rcAtomicWriteLocked(pkt) // flush.go
	case info.Is(wire.FlagFlush):
		qp.rcFlushLocked(pkt) // flush.go
	default:
		// An opcode the responder does not implement: an invalid
		// request, as rxe answers one.
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
	}
}

// checkSequenceLocked enforces the opcode sequence of IBTA 9.8.3: a message
// in progress continues with MIDDLE or LAST of its kind; otherwise only
// FIRST or ONLY may come.
func (qp *QP) checkSequenceLocked(info *wire.OpInfo) bool {
	r := &qp.resp
	cont := info.Is(wire.FlagMiddle) || info.Is(wire.FlagLast)
	if r.inMsg {
		return cont && info.Is(wire.FlagSend) == r.inSend && info.Is(wire.FlagWrite) == !r.inSend
	}
	return !cont
}

// checkPayloadLen enforces the packet length rules: FIRST and MIDDLE carry
// exactly one path MTU, LAST and ONLY at most one.
func (qp *QP) checkPayloadLen(info *wire.OpInfo, n int) bool {
	if info.Is(wire.FlagFirst) || info.Is(wire.FlagMiddle) {
		return n == qp.mtu
	}
	return n <= qp.mtu
}

// placeErr says why a SEND or WRITE packet could not be placed. RC and UC
// place packets alike and differ in what they do about a failure: RC NAKs
// (placeFailures), UC drops the message or fails the QP.
type placeErr uint8

const (
	placeOK      placeErr = iota
	placeRNR              // no receive WQE for a SEND or WRITE with immediate
	placeInvalid          // opcode or length not as the message needs
	placeLength           // a SEND longer than its receive WQE
	placeProt             // the receive WQE's memory refused the data
	placeAccess           // the QP's access flags or the R_Key refused a WRITE
	// placeInvalidate: a SEND_WITH_INV's R_Key could not be invalidated
	// (RC only; mw.go handles it, not placeFailures).
	placeInvalidate
)

// placeFailures is RC's answer to each failure: the NAK, the status of the
// receive WQE in progress (if any) and the async event (IBTA 9.7.5.2.x).
// UC fails the QP, without a NAK, for those with ucFatal; it drops the
// message for the others.
var placeFailures = [...]struct {
	nak     wire.NAKCode
	status  Status
	ev      EventType
	ucFatal bool
}{
	placeInvalid: {wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr, false},
	// IBTA: a local length error for the responder, an invalid request for
	// the requester (Linux rxe 6.1 answers a remote operational error).
	placeLength: {wire.NAKInvalidReq, LocLenErr, EventQPReqErr, true},
	placeProt:   {wire.NAKRemoteOp, LocProtErr, EventQPAccessErr, true},
	placeAccess: {wire.NAKRemoteAccess, 0, EventQPAccessErr, false},
}

// placeLocked places a SEND or WRITE packet that is next in sequence, its
// opcode sequence and length already checked: the data into the receive
// WQE's buffers or the WRITE's memory, the message's progress, and the
// receive completion when the message ends (with immediate data, for a
// SEND or WRITE_WITH_IMM). On a failure the expected PSN does not move.
func (qp *QP) placeLocked(pkt wire.Packet) placeErr {
	r := &qp.resp
	info := pkt.Info()
	payload := pkt.Payload()
	_, hasImm := pkt.Imm()
	if info.Is(wire.FlagSend) {
		if info.Is(wire.FlagStart) {
			if !r.hasWQE && !qp.takeRecvLocked() {
				return placeRNR
			}
			r.off = 0
		}
		if r.off+len(payload) > r.wqe.length {
			return placeLength
		}
		if err := qp.dev.mrs.ScatterLast(&qp.lastLocal, payload, qp.pd.id, r.wqe.sgl, r.off); err != nil {
			return placeProt
		}
		if info.Is(wire.FlagInv) && !qp.invalidateLocked(pkt) {
			return placeInvalidate
		}
	} else {
		if info.Is(wire.FlagStart) {
			reth := pkt.RETH()
			if _, ok := qp.remoteLocked(reth.RKey(), reth.VA(), int(reth.DMALen()), AccessRemoteWrite); !ok {
				return placeAccess
			}
			r.wva, r.wkey, r.wlen, r.off = reth.VA(), reth.RKey(), int(reth.DMALen()), 0
		}
		if r.off+len(payload) > r.wlen || (info.Is(wire.FlagComplete) && r.off+len(payload) != r.wlen) {
			return placeInvalid
		}
		if hasImm && !r.hasWQE && !qp.takeRecvLocked() {
			return placeRNR
		}
		dst, ok := qp.remoteLocked(r.wkey, r.wva+uint64(r.off), len(payload), AccessRemoteWrite)
		if !ok {
			return placeAccess
		}
		copy(dst, payload)
	}
	r.off += len(payload)
	r.psn = pkt.BTH().PSN().Add(1)
	r.inMsg, r.inSend = !info.Is(wire.FlagComplete), info.Is(wire.FlagSend)
	if info.Is(wire.FlagComplete) {
		wc := WC{Status: Success, Opcode: WCRecv, ByteLen: uint32(r.off), SrcQP: qp.attr.DestQPN}
		if !r.inSend {
			wc.Opcode, wc.ByteLen = WCRecvRDMAWithImm, uint32(r.wlen)
		}
		if imm, ok := pkt.Imm(); ok {
			wc.Imm, wc.Flags = imm, WCWithImm
		}
		if rkey, ok := pkt.InvRKey(); ok {
			wc.InvalidatedRKey, wc.Flags = rkey, wc.Flags|WCWithInv
		}
		if r.inSend || hasImm {
			qp.completeRecvLocked(&wc, pkt.BTH().Solicited())
		}
		r.off = 0
	}
	return placeOK
}

// remoteLocked checks that the QP's access flags allow acc and that the
// R_Key gives acc on n bytes at va, and returns those bytes: the one check
// every request naming remote memory goes through (IBTA 9.7.5.1.3; rxe's
// check_rkey). n of 0 needs only the access flag.
func (qp *QP) remoteLocked(rkey wire.RKey, va uint64, n int, acc Access) ([]byte, bool) {
	if qp.attr.AccessFlags&acc == 0 {
		return nil, false
	}
	b, err := qp.dev.mrs.RemoteQPLast(&qp.lastMR, rkey, qp.pd.id, uint32(qp.qpn), va, n, mem.Access(acc))
	return b, err == nil
}

// rcReadLocked executes a new READ request: it checks access, remembers the
// request for duplicates and starts the answer (pace.go).
func (qp *QP) rcReadLocked(pkt wire.Packet) {
	r := &qp.resp
	psn := pkt.BTH().PSN()
	reth := pkt.RETH()
	n := int(reth.DMALen())
	if _, ok := qp.remoteLocked(reth.RKey(), reth.VA(), n, AccessRemoteRead); !ok {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	npk := packetsFor(n, qp.mtu)
	r.msn = r.msn.Add(1)
	r.psn = psn.Add(npk)
	qp.clearAckLocked(psn)
	r.remember(rdRes{kind: resRead, psn: psn, npk: npk, rkey: reth.RKey(), va: reth.VA(), length: n})
	qp.startReadAnswerLocked(psn, psn, reth.RKey(), reth.VA(), n, false)
}

func (qp *QP) rcAtomicLocked(pkt wire.Packet) {
	r := &qp.resp
	psn := pkt.BTH().PSN()
	ae := pkt.AtomicETH()
	if _, ok := qp.remoteLocked(ae.RKey(), ae.VA(), 0, AccessRemoteAtomic); !ok {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	if ae.VA()%8 != 0 {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	b, ok := qp.remoteLocked(ae.RKey(), ae.VA(), 8, AccessRemoteAtomic)
	if !ok {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	var orig uint64
	if pkt.Opcode() == wire.RCCompareSwap {
		orig = mem.CompareSwap(b, ae.Compare(), ae.SwapAdd())
	} else {
		orig = mem.FetchAdd(b, ae.SwapAdd())
	}
	r.remember(rdRes{kind: resAtomic, psn: psn, rkey: ae.RKey(), va: ae.VA(), op: pkt.Opcode(), orig: orig})
	r.msn = r.msn.Add(1)
	r.psn = psn.Add(1)
	qp.clearAckLocked(psn)
	qp.sendAtomicAckLocked(psn, orig)
}

// responderErrorLocked NAKs psn with code and fails the QP
// (responderFailLocked): an RC responder's class C and D errors.
func (qp *QP) responderErrorLocked(psn wire.PSN, code wire.NAKCode, status Status, ev EventType) {
	qp.resp.ackPending = false
	qp.dropRespQueueLocked() // the NAK goes out now; answers in progress end
	qp.sendAckLocked(wire.NAKSyndrome(code), psn)
	qp.responderFailLocked(status, ev)
}

// responderFailLocked completes the receive WQE in progress with status (if
// any and if status is non-zero), raises the async event and moves the QP
// to the error state.
func (qp *QP) responderFailLocked(status Status, ev EventType) {
	if qp.resp.hasWQE && status != 0 {
		qp.completeRecvLocked(&WC{Status: status, Opcode: WCRecv}, false)
	}
	qp.dev.postEvent(AsyncEvent{Type: ev, QP: qp})
	qp.enterErrorLocked()
}

func (qp *QP) sendRNRLocked(psn wire.PSN) {
	qp.resp.ackPending = false
	qp.count(cntSendRNR, 1)
	qp.sendAckLocked(wire.RNRSyndrome(qp.attr.MinRNRTimer), psn)
}

func (qp *QP) ackLaterLocked(psn wire.PSN) {
	r := &qp.resp
	if !r.ackPending || psn.After(r.ackPSN) {
		r.ackPSN = psn
	}
	r.ackPending = true
}

// clearAckLocked drops a pending ACK that a response at psn makes redundant.
func (qp *QP) clearAckLocked(psn wire.PSN) {
	if qp.resp.ackPending && !psn.Before(qp.resp.ackPSN) {
		qp.resp.ackPending = false
	}
}

func (qp *QP) sendPendingAckLocked() {
	if qp.resp.ackPending {
		qp.resp.ackPending = false
		qp.sendAckLocked(wire.SyndromeACKUnlimited, qp.resp.ackPSN)
	}
}

func (qp *QP) sendAckLocked(syn wire.Syndrome, psn wire.PSN) {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: qp.pkey, DestQP: qp.attr.DestQPN, PSN: psn, MigReq: qp.migReq}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: qp.resp.msn}
	p := link.Get()
	hl, _ := wire.WriteHeaders(p.Buf, &h, 0)
	qp.finishPacketLocked(p, hl, 0)
	qp.respOutLocked(p)
}

func (qp *QP) sendAtomicAckLocked(psn wire.PSN, orig uint64) {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.RCAtomicAcknowledge, PKey: qp.pkey, DestQP: qp.attr.DestQPN, PSN: psn, MigReq: qp.migReq}
	h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKUnlimited, MSN: qp.resp.msn}
	h.AtomicAck = orig
	p := link.Get()
	hl, _ := wire.WriteHeaders(p.Buf, &h, 0)
	qp.finishPacketLocked(p, hl, 0)
	qp.respOutLocked(p)
}

// finishPacketLocked pads a packet whose headers and n payload bytes are in
// place (in Buf, or in p.Ext) and addresses it to the connected peer, with
// the traffic class of the QP's address vector.
func (qp *QP) finishPacketLocked(p *link.Packet, hl, n int) {
	padPacket(p, hl, n)
	p.Src = netip.AddrPortFrom(qp.src, qp.sport)
	p.Dst = qp.dst
	p.TClass = qp.attr.AH.TrafficClass
	p.IB = qp.ib
}

// handleUCLocked is the UC responder: no ACKs; a PSN gap drops the rest of
// the message and the responder resynchronises on the next FIRST or ONLY.
func (qp *QP) handleUCLocked(pkt wire.Packet) {
	r := &qp.resp
	info := pkt.Info()
	psn := pkt.BTH().PSN()
	if psn != r.psn || r.dropMsg {
		if psn != r.psn {
			qp.dev.stats.RxOutOfSeq.Add(1)
		}
		r.psn = psn.Add(1)
		r.inMsg = false
		r.off = 0 // a receive WQE in progress is reused for the next message
		if !info.Is(wire.FlagStart) {
			r.dropMsg = true
			return
		}
		r.dropMsg = false
	}
	if !qp.checkSequenceLocked(info) || !qp.checkPayloadLen(info, len(pkt.Payload())) {
		r.psn = psn.Add(1)
		r.inMsg, r.off = false, 0
		r.dropMsg = !info.Is(wire.FlagComplete)
		return
	}
	switch e := qp.placeLocked(pkt); {
	case e == placeOK:
	case placeFailures[e].ucFatal:
		qp.responderFailLocked(placeFailures[e].status, placeFailures[e].ev)
	default:
		// No one to NAK: drop the message, resynchronise on the next FIRST
		// or ONLY.
		r.psn, r.inMsg, r.off = psn.Add(1), false, 0
		r.dropMsg = !info.Is(wire.FlagComplete)
	}
}

// grhLen is the room at the start of a UD receive buffer for the GRH.
const grhLen = 40

// handleUDLocked delivers a UD datagram: Q_Key check, GRH area (the IPv4
// header sits at offset 20 of it), payload after it.
func (qp *QP) handleUDLocked(pkt wire.Packet, p *link.Packet) {
	deth := pkt.DETH()
	if deth.QKey() != qp.attr.QKey && qp.qpn != SMIQPN {
		qp.dev.stats.RxQKeyDrop.Add(1)
		return
	}
	if !qp.takeRecvLocked() {
		qp.dev.stats.RxBadState.Add(1) // no receive posted: UD drops silently
		return
	}
	payload := pkt.Payload()
	if grhLen+len(payload) > qp.resp.wqe.length {
		qp.completeRecvLocked(&WC{Status: LocLenErr, Opcode: WCRecv}, false)
		return
	}
	var grh [grhLen]byte
	hasGRH := qp.dev.udGRH(&grh, p, len(payload)+wire.ICRCLen+pkt.Info().HdrLen+pkt.BTH().PadCount())
	if hasGRH {
		if err := qp.dev.mrs.Scatter(grh[:], qp.pd.id, qp.resp.wqe.sgl, 0); err != nil {
			qp.completeRecvLocked(&WC{Status: LocProtErr, Opcode: WCRecv}, false)
			return
		}
	}
	if err := qp.dev.mrs.Scatter(payload, qp.pd.id, qp.resp.wqe.sgl, grhLen); err != nil {
		qp.completeRecvLocked(&WC{Status: LocProtErr, Opcode: WCRecv}, false)
		return
	}
	wc := WC{Status: Success, Opcode: WCRecv, ByteLen: uint32(grhLen + len(payload)),
		SrcQP: deth.SrcQP()}
	if hasGRH {
		wc.Flags = WCGRH
	}
	qp.dev.udAddr(&wc, p)
	if imm, ok := pkt.Imm(); ok {
		wc.Imm, wc.Flags = imm, wc.Flags|WCWithImm
	}
	qp.completeRecvLocked(&wc, pkt.BTH().Solicited())
}

// buildGRH writes the 40-byte GRH area of a UD receive: an IPv6 header, or
// for IPv4 twenty zero bytes followed by the IPv4 header, as Linux rxe does.
// roceLen is the UDP payload length. Fields the socket cannot see (TTL, ID,
// traffic class) carry the usual defaults.
func buildGRH(g *[grhLen]byte, p *link.Packet, roceLen int) {
	src, dst := p.Src.Addr().Unmap(), p.Dst.Addr().Unmap()
	udpLen := 8 + roceLen
	if src.Is4() {
		h := g[20:]
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen))
		binary.BigEndian.PutUint16(h[6:], wire.IPv4DontFragment)
		h[8] = 64
		h[9] = 17
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(h[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return
	}
	g[0] = 0x60
	binary.BigEndian.PutUint16(g[4:], uint16(udpLen))
	g[6] = 17
	g[7] = 64
	s, d := p.Src.Addr().As16(), p.Dst.Addr().As16()
	copy(g[8:], s[:])
	copy(g[24:], d[:])
}

// packetsFor returns how many PSNs a message of n bytes uses.
func packetsFor(n, mtu int) int {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}
