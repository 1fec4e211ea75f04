package fabric

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/fabric/vl"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// The data plane: native IB packets (LRH through VCRC) from HCA ports
// through the switches to HCA ports. Every direction of every link is a
// fabric/vl Link (per-VL credits, arbitration, VL15 bypass); the receiving
// end of each direction runs goroutines that take packets out of its
// buffers: a switch port one per data VL and one for VL15 (so that a lane
// blocked downstream holds up only that lane of that input, as a switch's
// per-VL input buffers do), a CA port one that hands packets to the HCA.
// Decisions (checks, forwarding tables, SL2VL, partitions, counters) are
// taken under the fabric's lock with the state the SMA keeps; the
// blocking Send into the next link is made outside it. The data plane
// starts with the first ConnectHCA and stops with Close.

// ErrPortInUse means an HCA is already connected at the port.
var ErrPortInUse = errors.New("fabric: port already has an HCA connected")

// rxBatch is the most packets handed to an HCA's recv in one call.
const rxBatch = 32

// linkCredits is the receive buffer of each data VL of each link, in
// 64-byte credits: eight packets of a 4096-byte MTU with their headers
// (fabric/vl's default holds two, which keeps a hop's pipeline too short
// for the goroutines that move packets: a 64 KiB RC WRITE through two
// switches ran at half the rate).
const linkCredits = 8 * 66

// DataStats counts what the data plane did with packets, fabric-wide. A
// dropped packet is also counted in the PMA counters of the port that
// dropped it (named with each reason).
type DataStats struct {
	Injected  uint64 // packets HCAs put on their links
	Forwarded uint64 // packets a switch sent on (multicast: each copy)
	Delivered uint64 // packets handed to HCAs

	// Malformed: too short, bad link version, LRH length not the packet's,
	// bad VCRC, or arrived on another VL than its LRH says (PortRcvErrors).
	Malformed uint64
	// BadVL15: a data packet on VL15 or a QP0 packet on a data VL
	// (PortRcvErrors; at the sending HCA port, PortXmitDiscards).
	BadVL15 uint64
	// NoRoute: DLID 0, the permissive LID, no LFT or MFT entry, a port
	// out of range, an empty multicast mask (PortRcvSwitchRelayErrors).
	NoRoute uint64
	// ToSwitch: a packet for a switch's own LID that is not for its
	// agents (PortRcvSwitchRelayErrors).
	ToSwitch uint64
	// SwitchAgents: requests for a switch's own LID its agents answered
	// on the data plane, as a real switch's port 0 does: LID-routed SMPs
	// to QP0 (SMA), PerfMgt MADs to QP1 (PMA).
	SwitchAgents uint64
	// Inactive: the output link is down or an end of it not ACTIVE (VL15
	// needs only the link up) (PortXmitDiscards).
	Inactive uint64
	// BadSL: the SL maps to VL15 or to a VL the port does not operate
	// (PortXmitDiscards).
	BadSL uint64
	// PKey: partition enforcement refused the packet's P_Key, or raw
	// filtering a raw packet (PortRcvConstraintErrors inbound,
	// PortXmitConstraintErrors outbound).
	PKey uint64
	// NoHCA: arrived at a CA port with no started HCA connected.
	NoHCA uint64
	// ToClients: GSI MADs that arrived at a CA port for its management
	// clients (an SM's SA), handed to them instead of an HCA.
	ToClients uint64
	// FromClients: GSI MADs clients sent onto the data plane (answers to
	// ToClients' requests, MADs for an HCA's GSI), each counted once
	// whether it left or was dropped (as Inactive, BadSL or ClientDrops).
	FromClients uint64
	// ClientDrops: a MAD for clients with a bad P_Key or Q_Key, none left
	// to take it, or a client's packet beyond the queue for its link.
	ClientDrops uint64
}

type dataStats struct {
	injected, forwarded, delivered                                       atomic.Uint64
	malformed, badVL15, noRoute, toSwitch, inactive, badSL, switchAgents atomic.Uint64
	pkey, noHCA                                                          atomic.Uint64
	toClients, fromClients, clientDrops                                  atomic.Uint64
}

// dataPlane is the running data plane of a fabric.
type dataPlane struct {
	f      *Fabric
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	links  []*vl.Link
	kick   chan struct{} // the SM may have changed attributes: recheck
	stats  dataStats

	// Management clients on the data plane (gsibridge.go).
	mgmtTx chan hop                     // clients' packets for their links
	dpReqs map[dpReqKey]*wire.GRHFields // guarded by f.mu
}

// dataPort is a port's data plane state.
type dataPort struct {
	tx *vl.Link // the direction leaving the port; nil without a link

	// Arbitration last applied to tx.
	arbHigh, arbLow [64]mad.VLArbEntry
	arbLimit        uint8
	// Link counters already folded into the port's PMA counters.
	waitsSeen, vl15DropSeen uint64
	// triedFull counts an HCA's packets that tried the link's lane
	// directly and found it full: the link counted a wait for each, which
	// is not one (the packet then waits in the HCA's queue, counted again).
	triedFull atomic.Uint64

	hca *hcaPort // the HCA connected at a CA port
}

// vlCount decodes PortInfo's VLCap and OperationalVLs: 1 VL0, 2 VL0-1,
// 3 VL0-3, 4 VL0-7, 5 VL0-14.
func vlCount(code uint8) int {
	switch code {
	case 1, 2, 3, 4:
		return 1 << (code - 1)
	case 5:
		return 15
	}
	return 0
}

// mtuBytes decodes an MTU code (1 256 ... 5 4096).
func mtuBytes(code uint8) int {
	if code < 1 || code > 5 {
		return 0
	}
	return 128 << code
}

// startDataPlane builds a vl.Link for each direction of each link and
// starts the goroutines that drain them. It runs under f.mu.
func (f *Fabric) startDataPlane() (*dataPlane, error) {
	if f.dp != nil {
		return f.dp, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	dp := &dataPlane{f: f, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), mgmtTx: make(chan hop, mgmtTxQueue)}
	for _, n := range f.nodes {
		for _, p := range n.ports {
			if p == nil {
				continue
			}
			p.dp = &dataPort{}
			if p.remote == nil {
				continue
			}
			arb := portArbitration(p)
			l, err := vl.New(vl.Config{DataVLs: max(vlCount(p.pi.VLCap), 1), Credits: linkCredits, Arbitration: &arb, Rate: f.linkRate})
			if err != nil {
				for _, l := range dp.links {
					l.Close()
				}
				cancel()
				return nil, err
			}
			p.dp.tx = l
			p.dp.arbHigh, p.dp.arbLow, p.dp.arbLimit = p.vlHigh, p.vlLow, p.pi.VLHighLimit
			dp.links = append(dp.links, l)
		}
	}
	// The receiving end of each direction: the port at the other end.
	for _, n := range f.nodes {
		for _, p := range n.ports {
			if p == nil || p.remote == nil {
				continue
			}
			in := p.remote
			if in.node.isSwitch() {
				for v := range p.dp.tx.DataVLs() {
					dp.wg.Add(1)
					go dp.switchIn(in, p.dp.tx, uint8(v))
				}
				dp.wg.Add(1)
				go dp.switchIn(in, p.dp.tx, vl.VL15)
			} else {
				dp.wg.Add(1)
				go dp.caIn(in, p.dp.tx)
			}
		}
	}
	dp.wg.Add(2)
	go dp.watch()
	go dp.clientTx()
	f.dp = dp
	return dp, nil
}

// stopDataPlane stops the data plane, if it runs: blocked sends and
// receives fail, every goroutine ends.
func (f *Fabric) stopDataPlane() {
	f.mu.Lock()
	dp := f.dp
	f.mu.Unlock()
	if dp == nil {
		return
	}
	dp.cancel()
	for _, l := range dp.links {
		l.Close()
	}
	dp.wg.Wait()
}

// kickDataPlane tells the data plane that the SM may have changed port
// attributes or tables. It runs under f.mu and never blocks.
func (f *Fabric) kickDataPlane() {
	if f.dp == nil {
		return
	}
	select {
	case f.dp.kick <- struct{}{}:
	default:
	}
}

func portArbitration(p *nodePort) vl.Arbitration {
	conv := func(e []mad.VLArbEntry, capacity uint8) []vl.Entry {
		var out []vl.Entry
		for _, x := range e[:min(int(capacity), len(e))] {
			out = append(out, vl.Entry{VL: x.VL, Weight: x.Weight})
		}
		return out
	}
	return vl.Arbitration{
		High:      conv(p.vlHigh[:], p.pi.VLArbitrationHighCap),
		Low:       conv(p.vlLow[:], p.pi.VLArbitrationLowCap),
		HighLimit: p.pi.VLHighLimit,
	}
}

// watch follows the SM's changes: it applies VL arbitration tables to the
// links and calls the HCAs' NotifyAttr functions when their attributes
// change. Changes coalesce: a function is called once after a burst.
func (dp *dataPlane) watch() {
	defer dp.wg.Done()
	f := dp.f
	var calls []*hcaPort
	for {
		select {
		case <-dp.ctx.Done():
			return
		case <-dp.kick:
		}
		calls = calls[:0]
		f.mu.Lock()
		for _, n := range f.nodes {
			for _, p := range n.ports {
				if p == nil || p.dp == nil {
					continue
				}
				d := p.dp
				if d.tx != nil && (d.arbHigh != p.vlHigh || d.arbLow != p.vlLow || d.arbLimit != p.pi.VLHighLimit) {
					d.arbHigh, d.arbLow, d.arbLimit = p.vlHigh, p.vlLow, p.pi.VLHighLimit
					if err := d.tx.SetArbitration(portArbitration(p)); err != nil {
						f.log.Warn("fabric: VL arbitration not applied", "node", n.name, "port", p.num, "err", err)
					}
				}
				if h := d.hca; h != nil {
					a := h.attrLocked()
					if !attrEqual(a, h.last) {
						h.last = a
						calls = append(calls, h)
					}
				}
			}
		}
		f.mu.Unlock()
		for _, h := range calls {
			h.notifyMu.Lock()
			if fn := h.notify; fn != nil && !h.closed.Load() {
				fn()
			}
			h.notifyMu.Unlock()
		}
		clear(calls)
	}
}

func attrEqual(a, b ib.PortAttr) bool {
	return a.LID == b.LID && a.SMLID == b.SMLID && a.LMC == b.LMC && a.SMSL == b.SMSL &&
		a.State == b.State && a.PhysState == b.PhysState && a.MTU == b.MTU && a.OperVLs == b.OperVLs &&
		a.GIDPrefix == b.GIDPrefix && a.PortGUID == b.PortGUID && a.SL2VL == b.SL2VL &&
		slices.Equal(a.PKeys, b.PKeys)
}

// syncLinkCounters folds the counters the port's links keep into its PMA
// counters: PortXmitWait (sends that waited for the lane's queue, which
// fills only when the next hop has no credits) and VL15Dropped (VL15
// packets dropped for lack of buffer on the way into the port). It runs
// under f.mu.
func (f *Fabric) syncLinkCounters(p *nodePort) {
	d := p.dp
	if d == nil {
		return
	}
	if d.tx != nil {
		tried := d.triedFull.Load() // before the link's count, which moves first
		if w := d.tx.Stats().SendWaits - tried; w > d.waitsSeen {
			p.cnt.xmitWait += w - d.waitsSeen
			d.waitsSeen = w
		}
	}
	if p.remote != nil && p.remote.dp != nil && p.remote.dp.tx != nil {
		x := p.remote.dp.tx.Stats().Dropped[vl.VL15]
		p.cnt.vl15Dropped += x - d.vl15DropSeen
		d.vl15DropSeen = x
	}
}

// frameOK checks what every receiving port checks first: an LRH, the link
// version, the LRH's length against the bytes, the VCRC.
func frameOK(pkt []byte) bool { return frameCheck(pkt, true) }

// frameCheck is frameOK, checking the VCRC only if vcrc is set.
func frameCheck(pkt []byte, vcrc bool) bool {
	if len(pkt) < wire.LRHLen+wire.VCRCLen {
		return false
	}
	l := wire.LRH(pkt)
	if l.LVer() != wire.LinkVersion || int(l.PktLen())*4 != len(pkt)-wire.VCRCLen {
		return false
	}
	return !vcrc || wire.VerifyVCRC(pkt)
}

// checksVCRC reports whether a port checks the VCRC of what arrives at it.
// Every real port does; here a packet a switch sends was checked where it
// entered the fabric from an HCA and sealed again by the switch if its VL
// changed, and no link corrupts it, so the check is made only on links
// whose sending end is a CA: where a bad VCRC can come from. It is the
// most expensive step of forwarding (a CRC over the whole packet).
func checksVCRC(in *nodePort) bool { return !in.remote.node.isSwitch() }

// bthOf returns the packet's BTH, or nil for a raw packet or one too short
// to hold it.
func bthOf(pkt []byte) wire.BTH {
	off := wire.LRHLen
	switch wire.LRH(pkt).LNH() {
	case wire.LNHIBALocal:
	case wire.LNHIBAGlobal:
		off += wire.GRHLen
	default:
		return nil
	}
	if len(pkt) < off+wire.BTHLen+wire.VCRCLen {
		return nil
	}
	return wire.BTH(pkt[off : off+wire.BTHLen])
}

// vl15OK reports whether pkt may travel on (or off) VL15 as it does: VL15
// carries QP0's packets and nothing else.
func vl15OK(pkt []byte, onVL15 bool) bool {
	b := bthOf(pkt)
	qp0 := b != nil && b.DestQP() == 0
	return qp0 == onVL15
}

// pkeyMatch reports whether P_Key k matches an entry of table (IBTA
// 10.9.3: the same 15-bit key, at least one of the two a full member).
func pkeyMatch(table []uint16, k uint16) bool {
	if k&0x7FFF == 0 {
		return false
	}
	for _, e := range table {
		if e&0x7FFF == k&0x7FFF && (e|k)&0x8000 != 0 {
			return true
		}
	}
	return false
}

// isMulticast reports whether lid is a multicast LID (0xC000-0xFFFE).
func isMulticast(lid uint16) bool { return lid >= 0xC000 && lid != mad.PermissiveLID }

func words(pkt []byte) uint64 { return uint64(max(len(pkt)-wire.VCRCLen, 0) / 4) }

// hop is one packet leaving a switch port. route decides it under the
// fabric's lock; the copy for a multicast port and the new VCRC are made
// after (prepare), so that the lock is held for decisions only.
type hop struct {
	eg     *nodePort
	vl     uint8
	pkt    []byte
	clone  bool // a copy for this port (all multicast ports but the last)
	reseal bool // the VL changed: set it and the VCRC
}

// prepare makes the copies and rewrites the VLs of the hops route chose.
func prepare(out []hop) {
	for i := range out {
		if out[i].clone {
			out[i].pkt = slices.Clone(out[i].pkt)
		}
	}
	for _, h := range out {
		if h.reseal {
			wire.LRH(h.pkt).SetVL(h.vl)
			wire.SealVCRC(h.pkt)
		}
	}
}

// switchIn drains lane v of l, the direction arriving at switch port in,
// forwarding each packet.
func (dp *dataPlane) switchIn(in *nodePort, l *vl.Link, v uint8) {
	defer dp.wg.Done()
	var out []hop
	vcrc := checksVCRC(in)
	for {
		d, err := l.Recv(dp.ctx, v)
		if err != nil {
			return
		}
		good := frameCheck(d.Data, vcrc) && wire.LRH(d.Data).VL() == d.VL
		dp.f.mu.Lock()
		out = dp.route(in, d, good, out[:0])
		dp.f.mu.Unlock()
		prepare(out)
		for i, h := range out {
			if err := h.eg.dp.tx.Send(dp.ctx, h.vl, h.pkt); err != nil {
				return
			}
			out[i] = hop{}
		}
	}
}

// route decides where a packet that arrived at switch port in goes, and
// counts; good says it passed frameOK and came on the VL its LRH names.
// It runs under f.mu.
func (dp *dataPlane) route(in *nodePort, d vl.Delivery, good bool, out []hop) []hop {
	st := &dp.stats
	pkt := d.Data
	in.cnt.rcvPkts++
	in.cnt.rcvData += words(pkt)
	if !good {
		in.cnt.rcvErrors++
		st.malformed.Add(1)
		return out
	}
	onVL15 := d.VL == vl.VL15
	if !vl15OK(pkt, onVL15) {
		in.cnt.rcvErrors++
		st.badVL15.Add(1)
		return out
	}
	lrh := wire.LRH(pkt)
	bth := bthOf(pkt)
	raw := lrh.LNH() < wire.LNHIBALocal
	checkPKey := !onVL15 && bth != nil
	if checkPKey && in.pi.PartitionEnforcementInbound && !pkeyMatch(in.pkeys, uint16(bth.PKey())) ||
		raw && in.pi.FilterRawInbound {
		in.cnt.rcvConstraintErrors++
		st.pkey.Add(1)
		return out
	}
	sw := in.node
	dlid := lrh.DLID()
	noRoute := func(c *atomic.Uint64) []hop {
		in.cnt.switchRelayErrors++
		c.Add(1)
		return out
	}
	var egress []*nodePort
	mcast := isMulticast(dlid)
	switch {
	case dlid == 0 || dlid == mad.PermissiveLID:
		return noRoute(&st.noRoute)
	case mcast:
		top := sw.sw.info.MulticastFDBTop
		idx := int(dlid) - 0xC000
		if idx >= multicastFDBCap || top != 0 && dlid > top {
			return noRoute(&st.noRoute)
		}
		for pos, mask := range sw.sw.mft[idx] {
			for bit := range 16 {
				num := pos*16 + bit
				if mask&(1<<bit) == 0 || num == 0 || num == in.num || num >= len(sw.ports) {
					continue
				}
				egress = append(egress, sw.ports[num])
			}
		}
		if len(egress) == 0 {
			return noRoute(&st.noRoute)
		}
	default:
		num := mad.LinearFTNoRoute
		if dlid <= sw.sw.info.LinearFDBTop {
			num = int(sw.sw.lft[dlid])
		}
		if num == 0 || sw.ports[0].lidRange(dlid) {
			// For the switch itself: its agents answer management
			// packets (switchagent.go); anything else is dropped.
			if o, ok := dp.switchAgents(in, pkt, onVL15, out); ok {
				return o
			}
			return noRoute(&st.toSwitch)
		}
		switch {
		case num == mad.LinearFTNoRoute || num >= len(sw.ports):
			return noRoute(&st.noRoute)
		}
		egress = append(egress, sw.ports[num])
	}
	if mcast {
		in.cnt.mcastRcvPkts++
	}
	sl := lrh.SL()
	for i, eg := range egress {
		if !linkUsable(eg, onVL15) {
			eg.cnt.xmitDiscards++
			st.inactive.Add(1)
			continue
		}
		outVL := uint8(vl.VL15)
		if !onVL15 {
			outVL = sl2vl(eg.sl2vl[in.num], sl)
			if int(outVL) >= min(vlCount(eg.pi.OperationalVLs), eg.dp.tx.DataVLs()) {
				eg.cnt.xmitDiscards++
				st.badSL.Add(1)
				continue
			}
		}
		if checkPKey && eg.pi.PartitionEnforcementOutbound && !pkeyMatch(eg.pkeys, uint16(bth.PKey())) ||
			raw && eg.pi.FilterRawOutbound {
			eg.cnt.xmitConstraintErrors++
			st.pkey.Add(1)
			continue
		}
		eg.cnt.xmitPkts++
		eg.cnt.xmitData += words(pkt)
		if mcast {
			eg.cnt.mcastXmitPkts++
		}
		st.forwarded.Add(1)
		out = append(out, hop{eg: eg, vl: outVL, pkt: pkt, clone: i < len(egress)-1, reseal: outVL != d.VL})
	}
	return out
}

// linkUsable reports whether a packet may leave by port eg: the link up
// and, for a data packet, both ends ACTIVE.
func linkUsable(eg *nodePort, onVL15 bool) bool {
	r := eg.remote
	if r == nil || eg.dp == nil || eg.dp.tx == nil || !eg.physUp() || !r.physUp() {
		return false
	}
	return onVL15 || eg.pi.PortState == mad.PortStateActive && r.pi.PortState == mad.PortStateActive
}

// sl2vl looks sl up in an SL-to-VL table (two SLs a byte, the even one in
// the high nibble).
func sl2vl(t [mad.SLToVLTableSize]byte, sl uint8) uint8 {
	b := t[sl/2&7]
	if sl%2 == 0 {
		return b >> 4
	}
	return b & 0x0F
}

// caIn drains l, the direction arriving at CA port p, and hands what it
// receives to the HCA connected there, in batches.
func (dp *dataPlane) caIn(p *nodePort, l *vl.Link) {
	defer dp.wg.Done()
	batch := make([][]byte, 0, rxBatch)
	ds := make([]vl.Delivery, 0, rxBatch)
	var good [rxBatch]bool
	var mgmt []delivery // MADs for the port's management clients
	vcrc := checksVCRC(p)
	for {
		d, err := l.RecvAny(dp.ctx)
		if err != nil {
			return
		}
		batch = batch[:0]
		ds = append(ds[:0], d)
		for len(ds) < rxBatch {
			if d, err = l.RecvAny(doneCtx); err != nil { // only what is there
				break
			}
			ds = append(ds, d)
		}
		for i, d := range ds {
			good[i] = frameCheck(d.Data, vcrc) && wire.LRH(d.Data).VL() == d.VL
		}
		dp.f.mu.Lock()
		h := p.dp.hca
		var recv func([][]byte)
		if h != nil {
			recv = h.recv
		}
		mgmt = mgmt[:0]
		for i, d := range ds {
			if dp.arriveCA(p, h, d, good[i], &mgmt) {
				batch = append(batch, d.Data)
			}
		}
		dp.f.mu.Unlock()
		for i, d := range mgmt {
			if !d.c.closed.Load() {
				dp.f.delivered.Add(1)
				d.c.deliver(d.d)
			}
			mgmt[i] = delivery{}
		}
		if len(batch) > 0 {
			h.deliver(recv, batch)
		}
	}
}

// arriveCA checks a packet arriving at CA port p for HCA h (nil if none)
// and counts it; good is as for route. A GSI MAD for the port's management
// clients goes on mgmt instead (gsibridge.go). It runs under f.mu.
func (dp *dataPlane) arriveCA(p *nodePort, h *hcaPort, d vl.Delivery, good bool, mgmt *[]delivery) bool {
	st := &dp.stats
	p.cnt.rcvPkts++
	p.cnt.rcvData += words(d.Data)
	if good && isMulticast(wire.LRH(d.Data).DLID()) {
		p.cnt.mcastRcvPkts++
	}
	switch {
	case !good:
		p.cnt.rcvErrors++
		st.malformed.Add(1)
		return false
	case !vl15OK(d.Data, d.VL == vl.VL15):
		p.cnt.rcvErrors++
		st.badVL15.Add(1)
		return false
	case d.VL != vl.VL15 && dp.toClientsDP(p, h, d.Data, mgmt):
		return false
	case h == nil || h.recv == nil || h.closed.Load():
		st.noHCA.Add(1)
		return false
	}
	if d.VL != vl.VL15 {
		dp.f.checkGSIKeys(p, d.Data)
	}

	st.delivered.Add(1)
	return true
}

// DataStats returns the data plane's counts so far (zero before the first
// ConnectHCA).
func (f *Fabric) DataStats() DataStats {
	f.mu.Lock()
	dp := f.dp
	f.mu.Unlock()
	if dp == nil {
		return DataStats{}
	}
	s := &dp.stats
	return DataStats{
		Injected: s.injected.Load(), Forwarded: s.forwarded.Load(), Delivered: s.delivered.Load(),
		Malformed: s.malformed.Load(), BadVL15: s.badVL15.Load(), NoRoute: s.noRoute.Load(),
		ToSwitch: s.toSwitch.Load(), SwitchAgents: s.switchAgents.Load(), Inactive: s.inactive.Load(), BadSL: s.badSL.Load(),
		PKey: s.pkey.Load(), NoHCA: s.noHCA.Load(),
		ToClients: s.toClients.Load(), FromClients: s.fromClients.Load(), ClientDrops: s.clientDrops.Load(),
	}
}

// hcaPort is an HCA's view of its CA port: what ConnectHCA returns.
type hcaPort struct {
	f      *Fabric
	dp     *dataPlane
	p      *nodePort
	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool

	// Guarded by f.mu.
	recv func([][]byte)
	// notifyMu serialises notify's calls with NotifyAttr: once NotifyAttr
	// returns, no call of the function it replaced runs or is running.
	notifyMu sync.Mutex
	notify   func()      // guarded by notifyMu
	last     ib.PortAttr // what the last notification reported

	recvMu sync.Mutex  // held while recv runs
	inRecv atomic.Bool // recv is running: Send must not wait

	// The HCA's transmit queues, one per VL, each drained into the link
	// by a goroutine of its own (txLane): Send returns once a packet is
	// queued, so that the HCA's receive path, which sends
	// acknowledgements and responses, never waits for credits.
	txMu     sync.Mutex
	txq      [16][][]byte
	txQueued [16]int       // packets queued or being sent, per VL
	txRoom   chan struct{} // closed when a lane makes room (made by a waiter)
	txWake   [16]chan struct{}
}

// hcaQueueLen is how many packets a VL of an HCA's transmit queue holds
// before Send waits (unless called from the HCA's receive function).
const hcaQueueLen = 256

// ConnectHCA attaches an HCA (a softrdma device's InfiniBand port, through
// link/ib) at CA port port of node n, starting the fabric's data plane if
// it is not running. The returned Port carries whole IB packets between
// the HCA and the subnet (Send queues per VL and blocks once a VL's queue
// is full because the link has no credits: backpressure; never from the
// port's receive function), reports the port's attributes as the
// node's SMA holds them (Attr) and calls its NotifyAttr function when the
// SM changes them. Close disconnects the HCA; the port stays in the
// subnet, and what arrives for it is dropped until an HCA connects again.
// It fails with ErrNoNode, ErrNoPort (not a CA port), ErrPortInUse or
// ErrClosed.
func (f *Fabric) ConnectHCA(n *Node, port int) (ib.Port, error) {
	if err := f.checkNode(n); err != nil {
		return nil, err
	}
	p := n.port(port)
	if p == nil || n.isSwitch() {
		return nil, fmt.Errorf("%w: %s port %d is not a CA port", ErrNoPort, n.name, port)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	dp, err := f.startDataPlane()
	if err != nil {
		return nil, err
	}
	if p.dp.hca != nil {
		return nil, fmt.Errorf("%w: %s port %d", ErrPortInUse, n.name, port)
	}
	ctx, cancel := context.WithCancel(dp.ctx)
	h := &hcaPort{f: f, dp: dp, p: p, ctx: ctx, cancel: cancel}
	h.last = h.attrLocked()
	p.dp.hca = h
	if tx := p.dp.tx; tx != nil {
		for v := range tx.DataVLs() {
			h.txWake[v] = make(chan struct{}, 1)
			dp.wg.Add(1)
			go h.txLane(tx, uint8(v))
		}
	}
	return h, nil
}

// txLane moves lane v of the HCA's transmit queue into the link, waiting
// for credits there.
func (h *hcaPort) txLane(tx *vl.Link, v uint8) {
	defer h.dp.wg.Done()
	for {
		h.txMu.Lock()
		if len(h.txq[v]) == 0 {
			h.txMu.Unlock()
			select {
			case <-h.txWake[v]:
				continue
			case <-h.ctx.Done():
				return
			}
		}
		pkt := h.txq[v][0]
		h.txq[v][0] = nil
		h.txq[v] = h.txq[v][1:]
		h.txMu.Unlock()
		err := tx.Send(h.ctx, v, pkt)
		h.txMu.Lock()
		h.txQueued[v]--
		if h.txRoom != nil {
			close(h.txRoom)
			h.txRoom = nil
		}
		h.txMu.Unlock()
		if err != nil {
			return
		}
	}
}

// hcaDrainMax bounds Close's wait for an HCA's transmit queue.
const hcaDrainMax = time.Second

// drainTx waits until the HCA's transmit queue is empty (its packets are
// in the link, which the subnet drains whether or not the HCA stays), max
// has passed or the data plane is closing. The last packets of an HCA that
// disconnects right after sending (a process's last ACKs as it exits)
// would otherwise be dropped from the queue unseen.
func (h *hcaPort) drainTx(max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	h.txMu.Lock()
	for h.txQueuedAny() {
		ch := h.roomLocked()
		h.txMu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return
		case <-h.ctx.Done():
			return
		}
		h.txMu.Lock()
	}
	h.txMu.Unlock()
}

// roomLocked returns the channel closed when the transmit queue next moves
// a packet into the link (under txMu).
func (h *hcaPort) roomLocked() <-chan struct{} {
	if h.txRoom == nil {
		h.txRoom = make(chan struct{})
	}
	return h.txRoom
}

// txQueuedAny reports whether a lane of the transmit queue holds a packet
// (under txMu).
func (h *hcaPort) txQueuedAny() bool {
	for _, n := range h.txQueued {
		if n > 0 {
			return true
		}
	}
	return false
}

// doneCtx is a context that is already done: vl.Link.Send with it queues
// a packet only if the lane has room, without waiting.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// enqueue puts pkt on lane v of the transmit queue, waiting for room
// unless the HCA's receive function is running. With nothing queued on
// the lane it goes straight into the link if the link's lane has room.
func (h *hcaPort) enqueue(tx *vl.Link, v uint8, pkt []byte) error {
	h.txMu.Lock()
	if h.txQueued[v] == 0 {
		if tx.Send(doneCtx, v, pkt) == nil {
			h.txMu.Unlock()
			return nil
		}
		h.p.dp.triedFull.Add(1)
	}
	for h.txQueued[v] >= hcaQueueLen && !h.inRecv.Load() {
		ch := h.roomLocked()
		h.txMu.Unlock()
		select {
		case <-ch:
		case <-h.ctx.Done():
			return h.ctx.Err()
		}
		h.txMu.Lock()
	}
	h.txq[v] = append(h.txq[v], pkt)
	h.txQueued[v]++
	h.txMu.Unlock()
	select {
	case h.txWake[v] <- struct{}{}:
	default:
	}
	return nil
}

// attrLocked reads the port's attributes from the SMA's state. It runs
// under f.mu.
func (h *hcaPort) attrLocked() ib.PortAttr {
	p := h.p
	var a ib.PortAttr
	a.LID, a.SMLID, a.LMC, a.SMSL = p.pi.LID, p.pi.MasterSMLID, p.pi.LMC, p.pi.MasterSMSL
	a.State, a.PhysState = p.pi.PortState, p.pi.PortPhysicalState
	a.MTU = mtuBytes(min(p.pi.NeighborMTU, p.pi.MTUCap))
	a.OperVLs = vlCount(p.pi.OperationalVLs)
	a.GIDPrefix, a.PortGUID = p.pi.GIDPrefix, p.guid
	a.PKeys = slices.Clone(p.pkeys)
	for sl := range a.SL2VL {
		a.SL2VL[sl] = sl2vl(p.sl2vl[0], uint8(sl))
	}
	return a
}

// Attr returns the port's attributes as the node's SMA holds them.
func (h *hcaPort) Attr() ib.PortAttr {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.attrLocked()
}

// NotifyAttr registers fn, called (from the data plane's goroutine) after
// the SM changes the port's attributes; nil removes it. When NotifyAttr
// returns, the function it replaced is neither running nor called again;
// fn must not call NotifyAttr itself.
func (h *hcaPort) NotifyAttr(fn func()) {
	h.notifyMu.Lock()
	defer h.notifyMu.Unlock()
	h.notify = fn
	h.f.mu.Lock()
	h.last = h.attrLocked()
	h.f.mu.Unlock()
}

// Start sets the function that receives the packets arriving at the port.
func (h *hcaPort) Start(recv func(pkts [][]byte)) error {
	if recv == nil {
		return fmt.Errorf("fabric: Start with a nil function")
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	switch {
	case h.closed.Load():
		return ErrClosed
	case h.recv != nil:
		return fmt.Errorf("fabric: HCA port %s/%d already started", h.p.node.name, h.p.num)
	}
	h.recv = recv
	return nil
}

// deliver calls recv, the HCA's function when the batch was taken, unless
// the port has been closed since.
func (h *hcaPort) deliver(recv func([][]byte), batch [][]byte) {
	h.recvMu.Lock()
	defer h.recvMu.Unlock()
	if h.closed.Load() {
		return
	}
	h.inRecv.Store(true)
	defer h.inRecv.Store(false)
	recv(batch)
}

// Send puts whole IB packets on the port's link, each on the VL its LRH
// names, after the checks of a transmitting port (link version, VL15 only
// for QP0, the VL operational, the port ACTIVE for data); a packet that
// fails them is dropped and counted, not an error. The fabric copies the
// packets into the HCA's transmit queue, one per VL, which goroutines
// drain into the link as its credits allow. Send blocks while the VL's
// queue holds hcaQueueLen packets, except when called from the port's
// receive function (an HCA answering what it receives must not wait on
// the subnet, or two HCAs streaming at each other would deadlock once the
// buffers between them are full). It fails with ErrClosed once the port
// or the fabric is closed.
func (h *hcaPort) Send(pkts [][]byte) error {
	st := &h.dp.stats
	for _, b := range pkts {
		if h.closed.Load() {
			return fmt.Errorf("%w (%w)", ErrClosed, ib.ErrClosed)
		}
		cp := slices.Clone(b)
		f := h.f
		f.mu.Lock()
		p := h.p
		ok := false
		var v uint8
		switch {
		case len(cp) < wire.LRHLen+wire.VCRCLen || wire.LRH(cp).LVer() != wire.LinkVersion:
			p.cnt.xmitDiscards++
			st.malformed.Add(1)
		case !vl15OK(cp, wire.LRH(cp).VL() == vl.VL15):
			p.cnt.xmitDiscards++
			st.badVL15.Add(1)
		case !linkUsable(p, wire.LRH(cp).VL() == vl.VL15):
			p.cnt.xmitDiscards++
			st.inactive.Add(1)
		default:
			v = wire.LRH(cp).VL()
			if v != vl.VL15 && int(v) >= min(vlCount(p.pi.OperationalVLs), p.dp.tx.DataVLs()) {
				p.cnt.xmitDiscards++
				st.badSL.Add(1)
				break
			}
			ok = true
			p.cnt.xmitPkts++
			p.cnt.xmitData += words(cp)
			if isMulticast(wire.LRH(cp).DLID()) {
				p.cnt.mcastXmitPkts++
			}
			st.injected.Add(1)
		}
		tx := p.dp.tx
		f.mu.Unlock()
		if !ok {
			continue
		}
		var err error
		if v == vl.VL15 {
			err = tx.Send(h.ctx, v, cp) // never waits
		} else {
			err = h.enqueue(tx, v, cp)
		}
		if err != nil {
			return fmt.Errorf("%w (%w): %w", ErrClosed, ib.ErrClosed, err)
		}
	}
	return nil
}

// Close disconnects the HCA: Send fails, nothing more is delivered, and
// Close waits for a recv call in progress (recv must not call Close).
// The packets Send has accepted still leave: Close waits, up to
// hcaDrainMax, for the transmit queue to drain into the link (what the
// subnet holds back longer is dropped).
func (h *hcaPort) Close() error {
	if h.closed.Swap(true) {
		return ErrClosed
	}
	h.drainTx(hcaDrainMax)
	h.cancel()
	h.f.mu.Lock()
	if h.p.dp.hca == h {
		h.p.dp.hca = nil
	}
	h.recv = nil
	h.f.mu.Unlock()
	h.recvMu.Lock()
	defer h.recvMu.Unlock()
	return nil
}
