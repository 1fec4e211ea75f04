// Management on the data plane. A node's management is served in two
// places: the agents the fabric runs itself (a switch's SMA and PMA behind
// its port 0: switchagent.go) and the management clients attached to a
// port (Attach: an SM with its SA, a diag). An HCA reaches either only on
// the data plane, by LID, with a MAD in a UD SEND; both answer there, back
// to the requester's LID and QP. This file holds what the two share (a
// MAD's packet parsed and built) and the bridge for clients:
//
//   - a GSI MAD arriving on the data plane at a CA port that has clients
//     goes to them (toClientsDP) when no HCA is connected there, or when it
//     is for the SA (a SubnAdm request, or a requester's RMPP ACK, STOP or
//     ABORT: a port's clients serve the SA beside the SM) or a response to
//     a request one of them sent;
//   - a GSI MAD a client sends by LID (Client.Send) leaves its port on the
//     data plane (fromClientDP) when it answers a request that came that way
//     (GetResp, every RMPP segment: same requester LID, QP and TID; the
//     request's GRH reversed) or when the LID's port has an HCA connected
//     and no clients (a Report to a subscriber, a request to an HCA's GSI).
//
// Everything else keeps to the management plane (route.go), where
// management clients talk to each other and to the fabric's agents.

package fabric

import (
	"github.com/softrdma/softrdma/fabric/vl"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// madPacket is a MAD carried in a UD SEND on the data plane: the fields of
// the packet's headers that management needs.
type madPacket struct {
	sl         uint8
	slid, dlid uint16
	grh        *wire.GRHFields // nil for a local packet
	pkey       uint16
	destQP     uint32
	srcQP      uint32
	qkey       uint32
	mad        []byte // mad.Size bytes; parseMADPacket's aliases the packet
}

// parseMADPacket parses pkt, a whole IB packet, as a MAD in a UD SEND
// (one packet: SEND Only, a payload of exactly one MAD of base version 1).
func parseMADPacket(pkt []byte) (madPacket, bool) {
	p, err := wire.ParseIB(pkt)
	if err != nil {
		return madPacket{}, false
	}
	t := p.Transport()
	bth, deth := t.BTH(), t.DETH()
	payload := t.Payload()
	if t.Info() == nil || bth.Opcode() != wire.UDSendOnly || deth == nil || len(payload) != mad.Size ||
		payload[0] != mad.BaseVersion {
		return madPacket{}, false
	}
	lrh := p.LRH()
	m := madPacket{
		sl: lrh.SL(), slid: lrh.SLID(), dlid: lrh.DLID(),
		pkey: uint16(bth.PKey()), destQP: uint32(bth.DestQP()),
		srcQP: uint32(deth.SrcQP()), qkey: uint32(deth.QKey()),
		mad: payload,
	}
	if g := p.GRH(); g != nil {
		gf := g.Fields()
		m.grh = &gf
	}
	return m, true
}

// reverseGRH is the GRH of an answer to a request that carried g: the GIDs
// swapped, its traffic class and flow label kept.
func reverseGRH(g *wire.GRHFields) *wire.GRHFields {
	if g == nil {
		return nil
	}
	return &wire.GRHFields{TClass: g.TClass, FlowLabel: g.FlowLabel, HopLmt: 0xFF, SGID: g.DGID, DGID: g.SGID}
}

// build returns m as a whole IB packet on VL v, its VCRC sealed.
func (m *madPacket) build(v uint8) []byte {
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.PKey(m.pkey), DestQP: wire.QPN(m.destQP)},
		DETH: wire.DETHFields{QKey: wire.QKey(m.qkey), SrcQP: wire.QPN(m.srcQP)},
	}
	fr := wire.IBFraming{LRH: wire.LRHFields{VL: v, SL: m.sl, DLID: m.dlid, SLID: m.slid}, GRH: m.grh}
	b := make([]byte, wire.IBPacketLen(wire.UDSendOnly, len(m.mad), m.grh != nil))
	if _, err := wire.BuildIB(b, &fr, &h, m.mad); err != nil {
		return nil // cannot happen: a MAD in a UD SEND fits
	}
	return b
}

// dpReqKey names a request that reached clients on the data plane, for
// the answers that go back the same way: the requester's LID and QP and
// the TID, at the port whose clients got it.
type dpReqKey struct {
	port *nodePort
	lid  uint16
	qp   uint32
	tid  uint64
}

// maxDPRequests bounds the data-plane requests remembered for their
// answers; beyond it an arbitrary one is forgotten (its later answers, if
// any, go by the HCA rule of fromClientDP).
const maxDPRequests = 4096

// mgmtTxQueue bounds the clients' packets waiting for credits on their
// port's link; beyond it a packet is dropped and counted (NoRoute is not
// it: DataStats.ClientDrops).
const mgmtTxQueue = 1024

// gsiForClients reports whether a MAD that arrived on the data
// plane at CA port p (with HCA h connected, or nil) goes to p's clients.
// It runs under f.mu.
func (f *Fabric) gsiForClients(p *nodePort, h *hcaPort, m mad.MAD) bool {
	if len(p.clients) == 0 {
		return false
	}
	if h == nil || h.closed.Load() {
		return true
	}
	if isResponse(m) {
		// A response is the HCA's (an answer to its own query of the SA
		// here, at its own LID) unless it answers a client's request or
		// is the receiver's side of an SA transfer (RMPP ACK, STOP,
		// ABORT: the SA sends the segments).
		if _, ok := f.tidOwner[tidKey{p, m.TransactionID()}]; ok {
			return true
		}
		return m.MgmtClass() == mad.ClassSubnAdm && rmppReceiverSide(m)
	}
	return m.MgmtClass() == mad.ClassSubnAdm
}

// rmppReceiverSide reports whether m is an RMPP packet of a transfer's
// receiver: an active ACK, STOP or ABORT.
func rmppReceiverSide(m mad.MAD) bool {
	h, err := mad.ParseRMPPHeader(m[mad.RMPPHeaderOffset:])
	return err == nil && h.Active() && (h.Type == mad.RMPPTypeAck || h.Type == mad.RMPPTypeStop || h.Type == mad.RMPPTypeAbort)
}

// toClientsDP takes a packet that arrived on the data plane at CA port p
// (not on VL15; it passed the frame checks) and, when it is a GSI MAD p's
// clients serve, hands it to them (as deliveries on out) and reports true:
// the HCA does not get it. A MAD with a P_Key p does not hold or a Q_Key
// other than the GSI's is dropped and counted (with the trap an HCA's GSI
// would send). It runs under f.mu.
func (dp *dataPlane) toClientsDP(p *nodePort, h *hcaPort, pkt []byte, out *[]delivery) bool {
	f := dp.f
	if len(p.clients) == 0 {
		return false
	}
	b := bthOf(pkt)
	if b == nil || b.DestQP() != mad.GSIQPN || b.Opcode() != wire.UDSendOnly {
		return false
	}
	mp, ok := parseMADPacket(pkt)
	if !ok {
		return false
	}
	m := mad.MAD(mp.mad)
	if isSMClass(m.MgmtClass()) || !f.gsiForClients(p, h, m) {
		return false
	}
	if !pkeyMatch(p.pkeys, mp.pkey) || mp.qkey != mad.GSIQKey {
		f.checkGSIKeys(p, pkt) // counts the violation and traps
		dp.stats.clientDrops.Add(1)
		return true
	}
	if !isResponse(m) || m.MgmtClass() == mad.ClassSubnAdm {
		// Remember where answers go: RMPP ACKs (response methods) of an
		// SA transfer keep it fresh.
		if dp.dpReqs == nil {
			dp.dpReqs = make(map[dpReqKey]*wire.GRHFields)
		}
		k := dpReqKey{p, mp.slid, mp.srcQP, m.TransactionID()}
		if _, ok := dp.dpReqs[k]; !ok && len(dp.dpReqs) >= maxDPRequests {
			for old := range dp.dpReqs {
				delete(dp.dpReqs, old)
				break
			}
		}
		dp.dpReqs[k] = mp.grh
	}
	d := &Datagram{SLID: mp.slid, DLID: mp.dlid, SQP: mp.srcQP, DQP: mp.destQP, SL: mp.sl, PKey: mp.pkey,
		QKey: mp.qkey, MAD: append([]byte(nil), mp.mad...)}
	f.toClients(p, d, isResponse(m), out, func(string) { dp.stats.clientDrops.Add(1) })
	dp.stats.toClients.Add(1)
	return true
}

// fromClientDP sends d, a LID-routed GSI MAD from a client at port src, on
// the data plane when it is for an HCA there (see the file's comment), and
// reports whether it took it. The packet leaves src's link toward the
// switches as an HCA's would (SL to VL by src's SL2VL table, the link
// ACTIVE); one that cannot is dropped and counted. It runs under f.mu.
func (f *Fabric) fromClientDP(src *nodePort, d *Datagram) bool {
	dp := f.dp
	m := mad.MAD(d.MAD)
	if dp == nil || src.node.isSwitch() || isSMClass(m.MgmtClass()) || d.DQP == 0 ||
		d.DLID == 0 || d.DLID >= 0xC000 {
		return false
	}
	grh, answer := dp.dpReqs[dpReqKey{src, d.DLID, d.DQP, m.TransactionID()}]
	if !answer {
		dest := f.caPortOfLID(d.DLID)
		if dest == nil || dest.dp == nil || dest.dp.hca == nil || len(dest.clients) > 0 {
			return false
		}
		if m.MgmtClass() == mad.ClassPerf && !isResponse(m) {
			return false // the fabric's PMA answers it on the management plane
		}
	}
	st := &dp.stats
	st.fromClients.Add(1)
	if !linkUsable(src, false) {
		src.cnt.xmitDiscards++
		st.inactive.Add(1)
		return true
	}
	v := sl2vl(src.sl2vl[0], d.SL)
	if int(v) >= min(vlCount(src.pi.OperationalVLs), src.dp.tx.DataVLs()) {
		src.cnt.xmitDiscards++
		st.badSL.Add(1)
		return true
	}
	qkey := d.QKey
	if qkey == 0 {
		qkey = mad.GSIQKey
	}
	slid := d.SLID
	if slid == 0 {
		slid = src.pi.LID
	}
	pkey := d.PKey
	if pkey == 0 {
		pkey = 0xFFFF
	}
	mp := madPacket{sl: d.SL, slid: slid, dlid: d.DLID, grh: reverseGRH(grh), pkey: pkey,
		destQP: d.DQP, srcQP: mad.GSIQPN, qkey: qkey, mad: d.MAD}
	pkt := mp.build(v)
	if pkt == nil {
		return true
	}
	select {
	case dp.mgmtTx <- hop{eg: src, vl: v, pkt: pkt}:
		src.cnt.xmitPkts++
		src.cnt.xmitData += words(pkt)
		st.injected.Add(1)
	default:
		src.cnt.xmitDiscards++
		st.clientDrops.Add(1)
	}
	return true
}

// caPortOfLID returns the CA port that owns lid (its LID range), or nil.
// It runs under f.mu.
func (f *Fabric) caPortOfLID(lid uint16) *nodePort {
	for _, n := range f.nodes {
		if n.isSwitch() {
			continue
		}
		for _, p := range n.ports {
			if p != nil && p.lidRange(lid) {
				return p
			}
		}
	}
	return nil
}

// clientTx moves the clients' data-plane packets into their ports' links,
// waiting for credits there.
func (dp *dataPlane) clientTx() {
	defer dp.wg.Done()
	for {
		select {
		case <-dp.ctx.Done():
			return
		case h := <-dp.mgmtTx:
			if err := h.eg.dp.tx.Send(dp.ctx, h.vl, h.pkt); err != nil {
				return
			}
		}
	}
}

// agentAnswer returns the packet that answers req (a MAD packet for a
// node's agents, arrived at in) with resp, from the answering QP to the
// requester's LID and QP, leaving switch in.node by its LFT; eg is the port
// it leaves by, or nil when it has no way out (counted). It runs under
// f.mu.
func (dp *dataPlane) agentAnswer(in *nodePort, req *madPacket, resp []byte, onVL15 bool) (eg *nodePort, v uint8, pkt []byte) {
	sw := in.node
	num := mad.LinearFTNoRoute
	if req.slid != 0 && req.slid <= sw.sw.info.LinearFDBTop {
		num = int(sw.sw.lft[req.slid])
	}
	if num == 0 || num == mad.LinearFTNoRoute || num >= len(sw.ports) {
		dp.stats.noRoute.Add(1)
		return nil, 0, nil
	}
	eg = sw.ports[num]
	if !linkUsable(eg, onVL15) {
		eg.cnt.xmitDiscards++
		dp.stats.inactive.Add(1)
		return nil, 0, nil
	}
	v = vl.VL15
	if !onVL15 {
		v = sl2vl(eg.sl2vl[0], req.sl)
		if int(v) >= min(vlCount(eg.pi.OperationalVLs), eg.dp.tx.DataVLs()) {
			eg.cnt.xmitDiscards++
			dp.stats.badSL.Add(1)
			return nil, 0, nil
		}
	}
	a := madPacket{sl: req.sl, slid: req.dlid, dlid: req.slid, grh: reverseGRH(req.grh), pkey: req.pkey,
		destQP: req.srcQP, srcQP: req.destQP, qkey: req.qkey, mad: resp}
	return eg, v, a.build(v)
}
