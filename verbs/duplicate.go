// Duplicate requests at the RC responder (IBTA 9.7.5.1.1).

package verbs

import "github.com/softrdma/softrdma/wire"

// duplicateLocked answers a request with a PSN already seen (IBTA 9.7.5.1.1).
// A duplicate never changes the QP's state: SEND and WRITE are acknowledged
// again; a READ or atomic is answered again only if it repeats one in the
// replay table (see matchReadLocked and matchAtomicLocked), and a READ
// with an answer to an earlier duplicate still queued replaces that answer
// instead of queueing another (rewindReadAnswerLocked); anything else,
// and a READ whose memory is gone, is dropped and counted in
// DeviceStats.RxDuplicateDropped.
func (qp *QP) duplicateLocked(pkt wire.Packet) {
	info := pkt.Info()
	switch {
	case info.Is(wire.FlagRead):
		reth := pkt.RETH()
		psn, n := pkt.BTH().PSN(), int(reth.DMALen())
		res := qp.matchReadLocked(psn, reth.RKey(), reth.VA(), n)
		switch {
		case res == nil || !qp.readableLocked(reth.RKey(), reth.VA(), n):
			qp.dev.stats.RxDuplicateDropped.Add(1)
		case qp.rewindReadAnswerLocked(res.psn, psn, reth.VA(), n):
			// Answered by the duplicate answer it replaced, or dropped.
		case !qp.startReadAnswerLocked(res.psn, psn, reth.RKey(), reth.VA(), n, true):
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
	case info.Is(wire.FlagFlush) || info.Is(wire.FlagAtomicWrite):
		qp.duplicateA19Locked(pkt) // flush.go
	default:
		qp.dev.stats.RxDuplicateDropped.Add(1)
	}
}

// matchReadLocked returns the executed READ that a duplicate READ request
// for n bytes at va repeats (nil if none), in whole or from the middle of its response
// stream, as a requester asks again for responses it lost: the same R_Key,
// its PSN one of the original's responses k, its VA the original's plus k
// path MTUs, and its range inside the original's. A stale or forged request
// matches nothing, so it cannot make the responder read other memory, or
// more of it, than the READ it claims to repeat.
func (qp *QP) matchReadLocked(psn wire.PSN, rkey wire.RKey, va uint64, n int) *rdRes {
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
		if rkey == res.rkey && va == res.va+uint64(off) && n <= res.length-off {
			return res
		}
		return nil
	}
	return nil
}

// readableLocked reports whether n bytes at va can be read with rkey.
func (qp *QP) readableLocked(rkey wire.RKey, va uint64, n int) bool {
	_, ok := qp.remoteLocked(rkey, va, n, AccessRemoteRead)
	return ok
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
