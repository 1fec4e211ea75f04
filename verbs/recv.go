// The receive path: packets from the link are parsed once, dispatched by
// destination QPN, and handled by the responder (requests) or the completer
// (ACKs and responses) under the QP's lock. ACKs a batch calls for are
// coalesced to one per QP and sent when the batch is done.

package verbs

import (
	"encoding/binary"
	"net/netip"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

func netipAddrPort(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, 0) }

// rxChunk is how many packets of a batch receive sorts by QP at a time.
const rxChunk = 64

// rxItem is a parsed packet of a batch and the QP it is for.
type rxItem struct {
	qp  *QP
	pkt wire.Packet
	p   *link.Packet
}

// receive is the link's handler. It parses and dispatches a batch, then
// takes each destination QP's lock once for all of that QP's packets, in
// their order of arrival, and sends the ACKs they call for (one per QP) and
// whatever else they produced after releasing it.
func (d *Device) receive(batch []*link.Packet) {
	for len(batch) > 0 {
		n := min(len(batch), rxChunk)
		d.receiveChunk(batch[:n])
		batch = batch[n:]
	}
}

func (d *Device) receiveChunk(batch []*link.Packet) {
	var items [rxChunk]rxItem
	n := 0
	for _, p := range batch {
		pkt, err := wire.Parse(p.Data())
		if err != nil {
			d.stats.RxMalformed.Add(1)
			d.log.Debug("dropping malformed packet", "from", p.Src, "err", err)
			continue
		}
		qp := d.lookupQP(pkt.BTH().DestQP())
		if qp == nil {
			d.stats.RxUnknownQP.Add(1)
			continue
		}
		items[n] = rxItem{qp, pkt, p}
		n++
	}
	for i := range n {
		qp := items[i].qp
		if qp == nil {
			continue // handled with an earlier packet of its QP
		}
		qp.mu.Lock()
		for j := i; j < n; j++ {
			if items[j].qp == qp {
				qp.handleLocked(items[j].pkt, items[j].p)
				items[j].qp = nil
			}
		}
		qp.sendPendingAckLocked()
		qp.unlockSend()
	}
}

func (qp *QP) handleLocked(pkt wire.Packet, p *link.Packet) {
	if qp.dead {
		return
	}
	info := pkt.Info()
	d := qp.dev
	switch qp.state {
	case StateRTR, StateRTS, StateSQD, StateSQE:
	default:
		d.stats.RxBadState.Add(1)
		return
	}
	if pkt.Opcode().Transport() != transportOf(qp.typ) {
		d.stats.RxBadTransport.Add(1)
		return
	}
	if !pkt.BTH().PKey().Matches(qp.pkey) {
		d.stats.RxPKeyDrop.Add(1)
		return
	}
	if info.Is(wire.FlagResponse) {
		if qp.state != StateRTR {
			qp.handleResponseLocked(pkt)
		}
		return
	}
	switch qp.typ {
	case UD:
		qp.handleUDLocked(pkt, p)
	case UC:
		qp.handleUCLocked(pkt)
	default:
		qp.handleRCLocked(pkt)
	}
}

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
	// (pace.go); pumpScheduled says the device's pacer has the QP.
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
	wc.QPNum = uint32(qp.qpn)
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
		wc := WC{WRID: w.id, Status: WRFlushErr, Opcode: WCRecv, QPNum: uint32(qp.qpn)}
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
			r.nakSent = true
			qp.sendAckLocked(wire.NAKSyndrome(wire.NAKPSNSequence), r.psn)
		}
		return
	case diff < 0:
		qp.dev.stats.RxDuplicate.Add(1)
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
	case info.Is(wire.FlagSend):
		qp.rcSendLocked(pkt)
	case info.Is(wire.FlagWrite):
		qp.rcWriteLocked(pkt)
	case info.Is(wire.FlagRead):
		qp.rcReadLocked(pkt)
	case info.Is(wire.FlagAtomic):
		qp.rcAtomicLocked(pkt)
	default:
		// FLUSH and ATOMIC_WRITE come with a later issue.
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

func (qp *QP) rcSendLocked(pkt wire.Packet) {
	r := &qp.resp
	info := pkt.Info()
	bth := pkt.BTH()
	psn := bth.PSN()
	payload := pkt.Payload()
	if info.Is(wire.FlagInv) {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	if info.Is(wire.FlagStart) {
		if !qp.takeRecvLocked() {
			qp.sendRNRLocked(psn)
			return
		}
		r.off = 0
	}
	if r.off+len(payload) > r.wqe.length {
		// IBTA: a message longer than the receive buffer is a local length
		// error for the responder and an invalid request for the requester.
		// (Linux rxe 6.1 answers with a remote operational error instead.)
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocLenErr, EventQPReqErr)
		return
	}
	if err := qp.dev.mrs.Scatter(payload, qp.pd.id, r.wqe.sgl, r.off); err != nil {
		qp.responderErrorLocked(psn, wire.NAKRemoteOp, LocProtErr, EventQPAccessErr)
		return
	}
	r.off += len(payload)
	r.psn = psn.Add(1)
	r.inMsg, r.inSend = !info.Is(wire.FlagComplete), true
	if info.Is(wire.FlagComplete) {
		r.msn = r.msn.Add(1)
		wc := WC{Status: Success, Opcode: WCRecv, ByteLen: uint32(r.off), SrcQP: qp.attr.DestQPN}
		if imm, ok := pkt.Imm(); ok {
			wc.Imm, wc.Flags = imm, WCWithImm
		}
		qp.completeRecvLocked(&wc, bth.Solicited())
	}
	if bth.AckReq() {
		qp.ackLaterLocked(psn)
	}
}

func (qp *QP) rcWriteLocked(pkt wire.Packet) {
	r := &qp.resp
	info := pkt.Info()
	bth := pkt.BTH()
	psn := bth.PSN()
	payload := pkt.Payload()
	if info.Is(wire.FlagStart) {
		reth := pkt.RETH()
		if qp.attr.AccessFlags&AccessRemoteWrite == 0 {
			qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
			return
		}
		if int(reth.DMALen()) > 0 || len(payload) > 0 {
			if _, err := qp.dev.mrs.Remote(reth.RKey(), qp.pd.id, reth.VA(), int(reth.DMALen()), mem.RemoteWrite); err != nil {
				qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
				return
			}
		}
		r.wva, r.wkey, r.wlen, r.off = reth.VA(), reth.RKey(), int(reth.DMALen()), 0
	}
	if r.off+len(payload) > r.wlen || (info.Is(wire.FlagComplete) && r.off+len(payload) != r.wlen) {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	_, hasImm := pkt.Imm()
	if hasImm && !r.hasWQE && !qp.takeRecvLocked() {
		qp.sendRNRLocked(psn)
		return
	}
	if len(payload) > 0 {
		dst, err := qp.dev.mrs.Remote(r.wkey, qp.pd.id, r.wva+uint64(r.off), len(payload), mem.RemoteWrite)
		if err != nil {
			qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
			return
		}
		copy(dst, payload)
	}
	r.off += len(payload)
	r.psn = psn.Add(1)
	r.inMsg, r.inSend = !info.Is(wire.FlagComplete), false
	if info.Is(wire.FlagComplete) {
		r.msn = r.msn.Add(1)
		if imm, ok := pkt.Imm(); ok {
			wc := WC{Status: Success, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.wlen),
				SrcQP: qp.attr.DestQPN, Imm: imm, Flags: WCWithImm}
			qp.completeRecvLocked(&wc, bth.Solicited())
		}
		r.off = 0
	}
	if bth.AckReq() {
		qp.ackLaterLocked(psn)
	}
}

// rcReadLocked executes a new READ request: it checks access, remembers the
// request for duplicates and starts the answer (pace.go).
func (qp *QP) rcReadLocked(pkt wire.Packet) {
	r := &qp.resp
	psn := pkt.BTH().PSN()
	reth := pkt.RETH()
	n := int(reth.DMALen())
	if qp.attr.AccessFlags&AccessRemoteRead == 0 {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	if n > 0 {
		if _, err := qp.dev.mrs.Remote(reth.RKey(), qp.pd.id, reth.VA(), n, mem.RemoteRead); err != nil {
			qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
			return
		}
	}
	npk := packetsFor(n, qp.mtu)
	r.msn = r.msn.Add(1)
	r.psn = psn.Add(npk)
	qp.clearAckLocked(psn)
	r.remember(rdRes{kind: resRead, psn: psn, npk: npk, rkey: reth.RKey(), va: reth.VA(), length: n})
	qp.startReadAnswerLocked(psn, reth.RKey(), reth.VA(), n, false)
}

func (qp *QP) rcAtomicLocked(pkt wire.Packet) {
	r := &qp.resp
	psn := pkt.BTH().PSN()
	ae := pkt.AtomicETH()
	if qp.attr.AccessFlags&AccessRemoteAtomic == 0 {
		qp.responderErrorLocked(psn, wire.NAKRemoteAccess, 0, EventQPAccessErr)
		return
	}
	if ae.VA()%8 != 0 {
		qp.responderErrorLocked(psn, wire.NAKInvalidReq, LocQPOpErr, EventQPReqErr)
		return
	}
	b, err := qp.dev.mrs.Remote(ae.RKey(), qp.pd.id, ae.VA(), 8, mem.RemoteAtomic)
	if err != nil {
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

// duplicateLocked answers a request with a PSN already seen (IBTA 9.7.5.1.1).
// A duplicate never changes the QP's state: SEND and WRITE are acknowledged
// again; a READ or atomic is answered again only if it repeats one in the
// replay table (see matchReadLocked and matchAtomicLocked); anything else,
// and a READ whose memory is gone, is dropped and counted in
// DeviceStats.RxDuplicateDropped.
func (qp *QP) duplicateLocked(pkt wire.Packet) {
	info := pkt.Info()
	switch {
	case info.Is(wire.FlagRead):
		reth := pkt.RETH()
		psn, n := pkt.BTH().PSN(), int(reth.DMALen())
		if !qp.matchReadLocked(psn, reth.RKey(), reth.VA(), n) || !qp.readableLocked(reth.RKey(), reth.VA(), n) ||
			!qp.startReadAnswerLocked(psn, reth.RKey(), reth.VA(), n, true) {
			qp.dev.stats.RxDuplicateDropped.Add(1)
		}
	case info.Is(wire.FlagAtomic):
		if res := qp.matchAtomicLocked(pkt); res != nil {
			qp.sendAtomicAckLocked(res.psn, res.orig)
			return
		}
		qp.dev.stats.RxDuplicateDropped.Add(1)
	case info.Is(wire.FlagSend) || info.Is(wire.FlagWrite):
		qp.ackLaterLocked(qp.resp.psn.Add(-1))
	default:
		qp.dev.stats.RxDuplicateDropped.Add(1)
	}
}

// matchReadLocked reports whether a duplicate READ request for n bytes at va
// repeats an executed READ, in whole or from the middle of its response
// stream, as a requester asks again for responses it lost: the same R_Key,
// its PSN one of the original's responses k, its VA the original's plus k
// path MTUs, and its range inside the original's. A stale or forged request
// matches nothing, so it cannot make the responder read other memory, or
// more of it, than the READ it claims to repeat.
func (qp *QP) matchReadLocked(psn wire.PSN, rkey wire.RKey, va uint64, n int) bool {
	for i := range qp.resp.res {
		res := &qp.resp.res[i]
		if res.kind != resRead {
			continue
		}
		k := int(psn.Diff(res.psn))
		if k < 0 || k >= res.npk {
			continue
		}
		off := k * qp.mtu
		return rkey == res.rkey && va == res.va+uint64(off) && n <= res.length-off
	}
	return false
}

// readableLocked reports whether n bytes at va can be read with rkey.
func (qp *QP) readableLocked(rkey wire.RKey, va uint64, n int) bool {
	if n == 0 {
		return true
	}
	_, err := qp.dev.mrs.Remote(rkey, qp.pd.id, va, n, mem.RemoteRead)
	return err == nil
}

// matchAtomicLocked returns the executed atomic that a duplicate atomic
// request repeats (same PSN, opcode, R_Key and VA), or nil.
func (qp *QP) matchAtomicLocked(pkt wire.Packet) *rdRes {
	psn, ae := pkt.BTH().PSN(), pkt.AtomicETH()
	for i := range qp.resp.res {
		res := &qp.resp.res[i]
		if res.kind == resAtomic && res.psn == psn {
			if res.op == pkt.Opcode() && res.rkey == ae.RKey() && res.va == ae.VA() {
				return res
			}
			return nil
		}
	}
	return nil
}

// responderErrorLocked NAKs psn with code, completes the receive WQE in
// progress with status (if any and if status is non-zero), raises the async
// event and moves the QP to the error state (IBTA class C/D responder errors).
func (qp *QP) responderErrorLocked(psn wire.PSN, code wire.NAKCode, status Status, ev EventType) {
	qp.resp.ackPending = false
	qp.dropRespQueueLocked() // the NAK goes out now; answers in progress end
	qp.sendAckLocked(wire.NAKSyndrome(code), psn)
	if qp.resp.hasWQE && status != 0 {
		qp.completeRecvLocked(&WC{Status: status, Opcode: WCRecv}, false)
	}
	qp.dev.postEvent(AsyncEvent{Type: ev, QP: qp})
	qp.enterErrorLocked()
}

func (qp *QP) sendRNRLocked(psn wire.PSN) {
	qp.resp.ackPending = false
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
	h.BTH = wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: qp.pkey, DestQP: wire.QPN(qp.attr.DestQPN), PSN: psn}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: qp.resp.msn}
	p := link.Get()
	hl, _ := wire.WriteHeaders(p.Buf, &h, 0)
	qp.finishPacketLocked(p, hl, 0)
	qp.respOutLocked(p)
}

func (qp *QP) sendAtomicAckLocked(psn wire.PSN, orig uint64) {
	var h wire.Headers
	h.BTH = wire.BTHFields{Opcode: wire.RCAtomicAcknowledge, PKey: qp.pkey, DestQP: wire.QPN(qp.attr.DestQPN), PSN: psn}
	h.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKUnlimited, MSN: qp.resp.msn}
	h.AtomicAck = orig
	p := link.Get()
	hl, _ := wire.WriteHeaders(p.Buf, &h, 0)
	qp.finishPacketLocked(p, hl, 0)
	qp.respOutLocked(p)
}

// finishPacketLocked pads a packet whose headers and n payload bytes are in
// place and addresses it to the connected peer.
func (qp *QP) finishPacketLocked(p *link.Packet, hl, n int) {
	end := hl + n + wire.PadFor(n)
	clear(p.Buf[hl+n : end])
	p.N = end + wire.ICRCLen
	p.Src = netipAddrPort(qp.src)
	p.Dst = qp.dst
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
	payload := pkt.Payload()
	bth := pkt.BTH()
	if info.Is(wire.FlagSend) {
		if info.Is(wire.FlagStart) && !r.hasWQE && !qp.takeRecvLocked() {
			r.psn = psn.Add(1)
			r.dropMsg = !info.Is(wire.FlagComplete)
			return
		}
		if info.Is(wire.FlagStart) {
			r.off = 0
		}
		if r.off+len(payload) > r.wqe.length {
			qp.completeRecvLocked(&WC{Status: LocLenErr, Opcode: WCRecv}, false)
			qp.dev.postEvent(AsyncEvent{Type: EventQPReqErr, QP: qp})
			qp.enterErrorLocked()
			return
		}
		if err := qp.dev.mrs.Scatter(payload, qp.pd.id, r.wqe.sgl, r.off); err != nil {
			qp.completeRecvLocked(&WC{Status: LocProtErr, Opcode: WCRecv}, false)
			qp.dev.postEvent(AsyncEvent{Type: EventQPAccessErr, QP: qp})
			qp.enterErrorLocked()
			return
		}
		r.off += len(payload)
		r.psn = psn.Add(1)
		r.inMsg, r.inSend = !info.Is(wire.FlagComplete), true
		if info.Is(wire.FlagComplete) {
			wc := WC{Status: Success, Opcode: WCRecv, ByteLen: uint32(r.off), SrcQP: qp.attr.DestQPN}
			if imm, ok := pkt.Imm(); ok {
				wc.Imm, wc.Flags = imm, WCWithImm
			}
			qp.completeRecvLocked(&wc, bth.Solicited())
		}
		return
	}
	// WRITE: an access error drops the message silently (no one to NAK).
	if info.Is(wire.FlagStart) {
		reth := pkt.RETH()
		r.wva, r.wkey, r.wlen, r.off = reth.VA(), reth.RKey(), int(reth.DMALen()), 0
		if qp.attr.AccessFlags&AccessRemoteWrite == 0 {
			r.psn, r.dropMsg = psn.Add(1), !info.Is(wire.FlagComplete)
			return
		}
	}
	_, hasImm := pkt.Imm()
	if r.off+len(payload) > r.wlen || (hasImm && !r.hasWQE && !qp.takeRecvLocked()) {
		r.psn, r.dropMsg, r.inMsg = psn.Add(1), !info.Is(wire.FlagComplete), false
		return
	}
	if len(payload) > 0 {
		dst, err := qp.dev.mrs.Remote(r.wkey, qp.pd.id, r.wva+uint64(r.off), len(payload), mem.RemoteWrite)
		if err != nil {
			r.psn, r.dropMsg, r.inMsg = psn.Add(1), !info.Is(wire.FlagComplete), false
			return
		}
		copy(dst, payload)
	}
	r.off += len(payload)
	r.psn = psn.Add(1)
	r.inMsg, r.inSend = !info.Is(wire.FlagComplete), false
	if info.Is(wire.FlagComplete) {
		if imm, ok := pkt.Imm(); ok {
			wc := WC{Status: Success, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.wlen),
				SrcQP: qp.attr.DestQPN, Imm: imm, Flags: WCWithImm}
			qp.completeRecvLocked(&wc, bth.Solicited())
		}
		r.off = 0
	}
}

// grhLen is the room at the start of a UD receive buffer for the GRH.
const grhLen = 40

// handleUDLocked delivers a UD datagram: Q_Key check, GRH area (the IPv4
// header sits at offset 20 of it), payload after it.
func (qp *QP) handleUDLocked(pkt wire.Packet, p *link.Packet) {
	deth := pkt.DETH()
	if deth.QKey() != wire.QKey(qp.attr.QKey) {
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
	buildGRH(&grh, p, len(payload)+wire.ICRCLen+pkt.Info().HdrLen+pkt.BTH().PadCount())
	if err := qp.dev.mrs.Scatter(grh[:], qp.pd.id, qp.resp.wqe.sgl, 0); err != nil {
		qp.completeRecvLocked(&WC{Status: LocProtErr, Opcode: WCRecv}, false)
		return
	}
	if err := qp.dev.mrs.Scatter(payload, qp.pd.id, qp.resp.wqe.sgl, grhLen); err != nil {
		qp.completeRecvLocked(&WC{Status: LocProtErr, Opcode: WCRecv}, false)
		return
	}
	wc := WC{Status: Success, Opcode: WCRecv, ByteLen: uint32(grhLen + len(payload)),
		SrcQP: uint32(deth.SrcQP()), Flags: WCGRH}
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
