// The receive path: packets from the link are parsed once, dispatched by
// destination QPN, and handled by the responder (requests) or the completer
// (ACKs and responses) under the QP's lock. ACKs a batch calls for are
// coalesced to one per QP and sent when the batch is done.

package verbs

import (
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// rxChunk is how many packets of a batch receive sorts by QP at a time.
const rxChunk = 64

// rxItem is a parsed packet of a batch and the QP it is for.
type rxItem struct {
	qp   *QP
	pkt  wire.Packet
	p    *link.Packet
	resp bool // an ACK or a response: for the QP's requester
}

// receive is the link's handler. It parses and dispatches a batch, then
// takes each destination QP's lock once for all of that QP's packets and
// sends the ACKs they call for (one per QP) and whatever else they produced
// after releasing it. A QP's packets are handled in their order of arrival,
// but for one thing: its responses (ACKs, READ and atomic responses) go
// before its requests. The two are ordered only among themselves (each has
// its own PSNs), and a peer answering a request sends its own request and
// the ACK of ours in one segmented datagram, request first (GSO needs the
// larger packet first); handling the ACK first completes our request before
// the receive its answer consumes, the order a program sharing one CQ sees
// from a peer that acknowledges at once.
func (d *Device) receive(batch []*link.Packet) {
	for len(batch) > 0 {
		n := min(len(batch), rxChunk)
		d.receiveChunk(batch[:n])
		batch = batch[n:]
	}
}

func (d *Device) receiveChunk(batch []*link.Packet) {
	// What the QPs send in answer (ACKs, responses, requests an ACK let
	// go) leaves in one call to the link, whatever the number of QPs.
	g := getGather(d)
	defer g.put()
	items, mc := &g.items, &g.mc
	n, nmc, nresp := 0, 0, 0
	for _, p := range batch {
		it := &items[n]
		// Parsed in place (see wire.ParseInto).
		if err := wire.ParseInto(&it.pkt, p.Data()); err != nil {
			d.stats.RxMalformed.Add(1)
			d.log.Debug("dropping malformed packet", "from", p.Src, "err", err)
			continue
		}
		it.p = p
		dqp := it.pkt.BTH().DestQP()
		if dqp == wire.QPMulticast {
			it.qp, it.resp = nil, false
			mc[nmc] = uint8(n)
			n++
			nmc++
			continue
		}
		qp := d.lookupQP(dqp)
		if qp == nil {
			d.stats.RxUnknownQP.Add(1)
			continue
		}
		it.qp, it.resp = qp, it.pkt.Info().Is(wire.FlagResponse)
		if it.resp {
			nresp++
		}
		n++
	}
	defer clear(items[:n]) // no references left in the pool
	mixed := nresp > 0 && nresp < n-nmc
	for i := range n {
		qp := items[i].qp
		if qp == nil {
			continue // handled with an earlier packet of its QP, or multicast
		}
		g.lock(qp)
		if mixed {
			for j := i; j < n; j++ {
				if items[j].qp == qp && items[j].resp {
					qp.handleLocked(items[j].pkt, items[j].p, &g.clk)
					items[j].qp = nil
				}
			}
		}
		for j := i; j < n; j++ {
			if items[j].qp == qp {
				qp.handleLocked(items[j].pkt, items[j].p, &g.clk)
				items[j].qp = nil
			}
		}
		qp.ackLaterOrNowLocked(&g.clk) // ackdefer.go
		g.unlock(qp)
	}
	for _, i := range mc[:nmc] {
		d.receiveMcast(g, items[i].pkt, items[i].p)
	}
}

func (qp *QP) handleLocked(pkt wire.Packet, p *link.Packet, clk *rxClock) {
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
	if qp.mig != MigMigrated {
		qp.pathMigRxLocked(pkt.BTH().MigReq(), p) // apm.go
	}
	if !pkt.BTH().PKey().Matches(qp.pkey) && !qp.pkeyExempt() {
		d.stats.RxPKeyDrop.Add(1)
		return
	}
	qp.count(cntRcvdPkts, 1)
	if info.Is(wire.FlagResponse) {
		if qp.state != StateRTR {
			qp.handleResponseLocked(pkt, clk.now())
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
