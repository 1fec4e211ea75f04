// Creating the ID's QP, listening, connecting, accepting, rejecting and
// disconnecting, and the translation of CM events to rdma_cm events.

package rdmacm

import (
	"context"
	"net/netip"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// CreateQP creates the ID's queue pair on pd (rdma_create_qp): RC for the
// TCP port space, UD for UDP. The QP is moved to INIT (a UD QP to RTS with
// Q_Key RDMA_UDP_QKEY), as librdmacm does; Connect and Accept move an RC QP
// the rest of the way.
func (id *ID) CreateQP(pd *verbs.PD, init verbs.QPInitAttr) (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil {
		return nil, errf(ErrState, "ID has no device: resolve an address first")
	}
	if pd.Device() != id.dev.dev {
		return nil, errf(ErrInvalid, "PD of another device")
	}
	if id.qp != nil {
		return nil, errf(ErrState, "ID already has a QP")
	}
	init.Type = verbs.RC
	if id.ps == PortSpaceUDP {
		init.Type = verbs.UD
	}
	qp, err := pd.CreateQP(init)
	if err != nil {
		return nil, err
	}
	a := verbs.QPAttr{State: verbs.StateInit, PKeyIndex: 0, PortNum: 1}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if init.Type == verbs.UD {
		a.QKey = mad.RDMAUDPQKey
		mask |= verbs.AttrQKey
	} else {
		a.AccessFlags = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		mask |= verbs.AttrAccessFlags
	}
	err = qp.Modify(&a, mask)
	if err == nil && init.Type == verbs.UD {
		err = qp.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState)
		if err == nil {
			err = qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: randomPSN()}, verbs.AttrState|verbs.AttrSQPSN)
		}
	}
	if err != nil {
		qp.Destroy()
		return nil, err
	}
	id.qp = qp
	return qp, nil
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	id.mu.Lock()
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	if qp == nil {
		return errf(ErrState, "ID has no QP")
	}
	return qp.Destroy()
}

// Listen starts listening for connections on the bound port (rdma_listen).
// At most backlog connect requests wait for Accept or Reject at a time;
// more are rejected. An ID bound to the unspecified address listens on
// every device.
func (id *ID) Listen(backlog int) error {
	if backlog <= 0 {
		backlog = 1024
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if !id.bound || id.state != idIdle {
		return errf(ErrState, "listen needs a bound, idle ID")
	}
	devs := id.s.devs
	if id.dev != nil {
		devs = []*devEntry{id.dev}
	}
	for _, e := range devs {
		l, err := e.mgr.Listen(id.serviceID(id.src.Port()), id.onListenEvent)
		if err != nil {
			for _, l := range id.listeners {
				l.Close()
			}
			id.listeners = nil
			return errf(ErrAddrInUse, "%v", err)
		}
		id.listeners = append(id.listeners, l)
	}
	id.backlog = backlog
	id.state = idListen
	if id.sync {
		id.requests = id.ch
	}
	return nil
}

// GetRequest waits for the next incoming connection of a synchronous
// listening ID (rdma_get_request) and returns its new ID.
func (id *ID) GetRequest(ctx context.Context) (*ID, error) {
	if !id.sync {
		return nil, errf(ErrState, "GetRequest on an ID with an event channel")
	}
	ev, err := id.waitFor(ctx, EventConnectRequest)
	if err != nil {
		return nil, err
	}
	return ev.ID, nil
}

// onListenEvent handles a new passive cm.Conn.
func (id *ID) onListenEvent(c *cm.Conn, ev *cm.Event) {
	id.mu.Lock()
	if id.state != idListen {
		id.mu.Unlock()
		rejectNew(c, ev)
		return
	}
	if id.pending >= id.backlog {
		id.mu.Unlock()
		rejectNew(c, ev)
		return
	}
	var dev *devEntry
	for _, e := range id.s.devs {
		if e.mgr == c.Manager() {
			dev = e
		}
	}
	var pd []byte
	switch ev.Type {
	case cm.EventREQ:
		pd = ev.REQ.PrivateData[:]
	case cm.EventSIDRReq:
		pd = ev.SIDRReq.PrivateData[:]
	default:
		id.mu.Unlock()
		return
	}
	h, err := mad.ParseCMAHeader(pd)
	if err != nil {
		id.mu.Unlock()
		rejectNew(c, ev)
		return
	}
	hf := h.Fields()
	if bound := id.src.Addr(); bound.IsValid() && !bound.IsUnspecified() && hf.DstAddr.Unmap() != bound {
		id.mu.Unlock()
		rejectNew(c, ev)
		return
	}
	child := &ID{s: id.s, ch: id.ch, sync: id.sync, ps: id.ps, parent: id, dev: dev,
		sgid: ev.From.SGIDIndex, conn: c, state: idConnRequest, psn: randomPSN(),
		src: netip.AddrPortFrom(hf.DstAddr.Unmap(), id.src.Port()),
		dst: netip.AddrPortFrom(hf.SrcAddr.Unmap(), hf.SrcPort)}
	if child.sync {
		child.ch = NewEventChannel()
	}
	id.pending++
	id.mu.Unlock()
	c.SetHandler(child.onConnEvent)
	out := &Event{Type: EventConnectRequest, ID: child, ListenID: id}
	if ev.Type == cm.EventREQ {
		r := ev.REQ
		child.req = r
		// Seen from the passive side, as Linux reports them.
		out.Conn = ConnParam{PrivateData: copyBytes(pd[mad.CMAHeaderSize:]),
			ResponderResources: r.InitiatorDepth, InitiatorDepth: r.ResponderResources,
			FlowControl: r.EndToEndFlowControl, RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount,
			SRQ: r.SRQ, QPNum: r.LocalQPN}
	} else {
		child.sidrConn = true
		out.UD = UDParam{PrivateData: copyBytes(pd[mad.CMAHeaderSize:])}
	}
	if id.sync {
		id.requests.post(out)
	} else {
		child.post(out) // on the listener's channel, which the child was given
	}
}

func rejectNew(c *cm.Conn, ev *cm.Event) {
	if ev.Type == cm.EventSIDRReq {
		c.SendSIDRRep(&cm.SIDRRepParams{Status: mad.SIDRReject, ServiceID: ev.SIDRReq.ServiceID})
		return
	}
	c.SendREJ(mad.RejectConsumer, nil, nil)
}

func copyBytes(b []byte) []byte { return append([]byte(nil), b...) }

// Connect connects to the resolved peer (rdma_connect): an RC ID sends a
// REQ, a UDP ID a SIDR_REQ. The outcome is EventEstablished (or
// EventConnectResponse for an RC ID without QP), EventRejected,
// EventUnreachable or EventConnectError; a synchronous ID waits for it.
func (id *ID) Connect(ctx context.Context, p *ConnParam) error {
	var cp ConnParam
	if p != nil {
		cp = *p
	}
	if len(cp.PrivateData) > id.maxPrivateData() {
		return errf(ErrInvalid, "%d bytes of private data (at most %d)", len(cp.PrivateData), id.maxPrivateData())
	}
	id.mu.Lock()
	if id.state != idRouteResolved {
		id.mu.Unlock()
		return errf(ErrState, "connect needs a resolved route")
	}
	c, err := id.dev.mgr.NewConn(id.onConnEvent)
	if err != nil {
		id.mu.Unlock()
		return err
	}
	var pd [mad.REQPrivateDataSize]byte
	hf := mad.CMAHeaderFields{Version: mad.CMAVersion, IPVersion: 4, SrcPort: id.src.Port(),
		SrcAddr: id.src.Addr(), DstAddr: id.dst.Addr()}
	if id.dst.Addr().Is6() {
		hf.IPVersion = 6
	}
	hf.Encode(pd[:])
	n := mad.CMAHeaderSize + copy(pd[mad.CMAHeaderSize:], cp.PrivateData)
	id.conn, id.param, id.state = c, cp, idConnect
	path := id.pathLocked()
	if id.ps == PortSpaceUDP {
		err = c.SendSIDRReq(id.serviceID(id.dst.Port()), path, pd[:n])
	} else {
		var qpn wire.QPN
		mtu := verbs.MTU1024
		if pa, e := id.dev.dev.QueryPort(1); e == nil {
			mtu = pa.ActiveMTU
		}
		if path.MTU != 0 && path.MTU < mtu {
			mtu = path.MTU // InfiniBand: the SA's path MTU
		}
		if id.qp != nil {
			qpn = id.qp.QPN()
		} else {
			qpn = wire.QPN(randomPSN() | 1) // no QP yet: any QPN, as rdma_connect with qp_num
		}
		if cp.QPNum != 0 {
			qpn = cp.QPNum
		}
		id.psn = randomPSN()
		err = c.SendREQ(&cm.REQParams{ServiceID: id.serviceID(id.dst.Port()), Path: path, QPType: verbs.RC,
			QPN: qpn, StartingPSN: id.psn, ResponderResources: cp.ResponderResources,
			InitiatorDepth: cp.InitiatorDepth, RetryCount: min(cp.RetryCount, 7), RNRRetryCount: min(cp.RNRRetryCount, 7),
			PathMTU: mtu, LocalACKTimeout: id.ackTimeoutLocked(ackTimeout), SRQ: cp.SRQ, PrivateData: pd[:n],
			AltPath: id.alt})
	}
	if err != nil {
		id.conn, id.state = nil, idRouteResolved
		c.Destroy()
		id.mu.Unlock()
		return err
	}
	id.mu.Unlock()
	if !id.sync {
		return nil
	}
	_, err = id.waitFor(ctx, EventEstablished)
	if ctx.Err() != nil {
		c.Destroy()
	}
	return err
}

// ackTimeout is the local ACK timeout exponent an active ID gives its QP
// and announces in the REQ: 4.096 µs * 2^14, about 67 ms. (Linux announces
// 19, about 2 s, derived from its RoCE packet lifetime; a shorter one makes
// retransmission and time wait quicker on the low-latency links softrdma
// runs on.) The passive side uses the REQ's value. SetACKTimeout overrides
// either.
const ackTimeout = 14

func (id *ID) maxPrivateData() int {
	switch {
	case id.ps == PortSpaceUDP:
		return mad.SIDRReqPrivateDataSize - mad.CMAHeaderSize
	default:
		return mad.REQPrivateDataSize - mad.CMAHeaderSize
	}
}

// Establish completes a connection made without a QP after
// EventConnectResponse (rdma_establish): it sends the RTU.
func (id *ID) Establish() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != idRepReceived {
		return errf(ErrState, "no connect response to establish")
	}
	if err := id.conn.SendRTU(nil); err != nil {
		return err
	}
	id.state = idEstablished
	return nil
}

// Accept accepts an incoming connection (rdma_accept): an RC ID moves its
// QP to RTS and sends a REP (EventEstablished follows when the RTU
// arrives; a synchronous ID waits for it); a UDP ID sends a SIDR_REP with
// its QP's number and Q_Key.
func (id *ID) Accept(ctx context.Context, p *ConnParam) error {
	var cp ConnParam
	if p != nil {
		cp = *p
	}
	id.mu.Lock()
	if id.state != idConnRequest {
		id.mu.Unlock()
		return errf(ErrState, "no connect request to accept")
	}
	if id.sidrConn {
		err := id.acceptUDLocked(&cp)
		id.mu.Unlock()
		return err
	}
	if len(cp.PrivateData) > mad.REPPrivateDataSize {
		id.mu.Unlock()
		return errf(ErrInvalid, "%d bytes of private data", len(cp.PrivateData))
	}
	r := id.req
	qpn := cp.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
		resp := min(cp.ResponderResources, r.InitiatorDepth)
		init := min(cp.InitiatorDepth, r.ResponderResources)
		if err := id.toRTSLocked(r.LocalQPN, id.psn, r.StartingPSN, verbs.MTU(r.PathMTU), resp, init,
			id.ackTimeoutLocked(r.PrimaryPath.LocalACKTimeout), r.RetryCount, cp.RNRRetryCount); err != nil {
			id.mu.Unlock()
			return err
		}
	}
	id.param = cp
	err := id.conn.SendREP(&cm.REPParams{QPN: qpn, StartingPSN: id.psn,
		ResponderResources: min(cp.ResponderResources, r.InitiatorDepth),
		InitiatorDepth:     min(cp.InitiatorDepth, r.ResponderResources),
		RNRRetryCount:      min(cp.RNRRetryCount, 7), SRQ: cp.SRQ, PrivateData: cp.PrivateData})
	if err != nil {
		id.mu.Unlock()
		return err
	}
	id.state = idAccepting
	id.releasePendingLocked()
	id.mu.Unlock()
	if !id.sync {
		return nil
	}
	_, err = id.waitFor(ctx, EventEstablished)
	return err
}

func (id *ID) acceptUDLocked(cp *ConnParam) error {
	if id.qp == nil && cp.QPNum == 0 {
		return errf(ErrState, "UD accept needs a QP")
	}
	qpn := cp.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	err := id.conn.SendSIDRRep(&cm.SIDRRepParams{Status: mad.SIDRSuccess, QPN: qpn, QKey: mad.RDMAUDPQKey,
		ServiceID: id.serviceID(id.src.Port()), PrivateData: cp.PrivateData})
	if err != nil {
		return err
	}
	id.state = idEstablished
	id.releasePendingLocked()
	return nil
}

func (id *ID) releasePendingLocked() {
	if p := id.parent; p != nil {
		id.parent = nil
		p.mu.Lock()
		p.pending--
		p.mu.Unlock()
	}
}

// toRTSLocked moves the RC QP through RTR to RTS.
//
// The starting PSNs follow Linux's CM: the PSN in a REQ or REP is the one
// its sender expects to receive, so each side sends from the PSN in the
// other side's message (and a Linux peer NAKs anything else).
func (id *ID) toRTSLocked(destQPN wire.QPN, rqPSN, sqPSN wire.PSN, mtu verbs.MTU, maxDestRd, maxRd, timeout, retry, rnr uint8) error {
	a, mask := id.rtrAttrLocked(destQPN, rqPSN, mtu, maxDestRd)
	if err := id.qp.Modify(&a, mask); err != nil {
		return err
	}
	a, mask = rtsAttr(sqPSN, maxRd, timeout, retry, rnr)
	mask = id.withAltLocked(&a, mask)
	return id.qp.Modify(&a, mask)
}

// rtrAttrLocked are the attributes that move the ID's RC QP to RTR: the
// path's address vector, the MTU (at most the port's), the peer's QPN and
// the PSN expected from it.
func (id *ID) rtrAttrLocked(destQPN wire.QPN, rqPSN wire.PSN, mtu verbs.MTU, maxDestRd uint8) (verbs.QPAttr, verbs.AttrMask) {
	if pa, err := id.dev.dev.QueryPort(1); err == nil && (mtu == 0 || mtu > pa.ActiveMTU) {
		mtu = pa.ActiveMTU
	}
	ah := verbs.AHAttr{DGID: wire.GIDFromAddr(id.dst.Addr()), SGIDIndex: id.sgid, HopLimit: 64, PortNum: 1}
	if id.conn != nil {
		p := id.conn.Path()
		ah.DGID, ah.SGIDIndex, ah.FlowLabel, ah.TrafficClass = p.DGID, p.SGIDIndex, p.FlowLabel, p.TrafficClass
		if a, ok := id.ibAH(p); ok { // ib.go: by LID on an InfiniBand port
			ah = a
		}
	}
	return verbs.QPAttr{State: verbs.StateRTR, AH: ah, PathMTU: mtu, DestQPN: destQPN,
			RQPSN: rqPSN, MaxDestRdAtomic: int(max(maxDestRd, 1)), MinRNRTimer: 12},
		verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
}

// rtsAttr are the attributes that move an RC QP from RTR to RTS.
func rtsAttr(sqPSN wire.PSN, maxRd, timeout, retry, rnr uint8) (verbs.QPAttr, verbs.AttrMask) {
	return verbs.QPAttr{State: verbs.StateRTS, SQPSN: sqPSN, Timeout: timeout,
			RetryCnt: min(retry, 7), RNRRetry: min(rnr, 7), MaxRdAtomic: int(max(maxRd, 1))},
		verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
}

// Reject refuses an incoming connection (rdma_reject) with private data;
// the peer gets EventRejected with reason "consumer reject" (28).
func (id *ID) Reject(privateData []byte) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != idConnRequest {
		return errf(ErrState, "no connect request to reject")
	}
	var err error
	if id.sidrConn {
		err = id.conn.SendSIDRRep(&cm.SIDRRepParams{Status: mad.SIDRReject, ServiceID: id.serviceID(id.src.Port()),
			PrivateData: privateData})
	} else {
		err = id.conn.SendREJ(mad.RejectConsumer, nil, privateData)
	}
	id.state = idDisconnected
	id.releasePendingLocked()
	return err
}

// Disconnect tears the connection down (rdma_disconnect): the QP goes to
// the error state (flushing its work requests) and a DREQ is sent, or a
// DREP if the peer disconnected first. EventDisconnected follows (at once
// if the peer disconnected first), then EventTimewaitExit.
func (id *ID) Disconnect() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp != nil {
		id.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	}
	switch id.state {
	case idEstablished, idAccepting:
		if id.sidrConn || id.ps == PortSpaceUDP {
			id.state = idDisconnected
			return nil
		}
		if err := id.conn.SendDREQ(nil); err != nil {
			// The peer's DREQ has reached the CM but not yet this ID's
			// event handler: answer it, as rdma_disconnect sends a DREP
			// when it cannot send a DREQ. The handler still reports the
			// DREQ as EventDisconnected, once.
			if id.conn.SendDREP(nil) != nil {
				return err
			}
		}
		id.state = idDisconnected
		id.dreqSent = true // EventDisconnected follows: DREP, the peer's DREQ or a timeout
		return nil
	case idDisconnected:
		return nil
	}
	return errf(ErrState, "not connected")
}

// Destroy releases the ID (rdma_destroy_id): a pending exchange is ended
// as the CM does (REJ or DREQ), the port is released. The QP, if any, is
// destroyed too.
func (id *ID) Destroy() error {
	id.mu.Lock()
	if id.state == idDestroyed {
		id.mu.Unlock()
		return errf(ErrClosed, "ID")
	}
	id.state = idDestroyed
	c, ls, qp := id.conn, id.listeners, id.qp
	id.listeners, id.qp = nil, nil
	port := id.src.Port()
	isChild := id.parent != nil || id.req != nil || id.sidrConn
	id.releasePendingLocked()
	id.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	if c != nil {
		c.Destroy()
	}
	if qp != nil {
		qp.Destroy()
	}
	id.leaveIBAll() // ibmcast.go
	if !isChild {
		id.s.releasePort(id, port)
	}
	if id.sync {
		id.ch.Close()
	}
	return nil
}

// onConnEvent turns the CM's events into rdma_cm events.
func (id *ID) onConnEvent(c *cm.Conn, ev *cm.Event) {
	id.mu.Lock()
	if id.state == idDestroyed {
		id.mu.Unlock()
		return
	}
	var out *Event
	switch ev.Type {
	case cm.EventREP:
		out = id.onREPLocked(c, ev)
	case cm.EventEstablished:
		if id.state == idAccepting {
			id.state = idEstablished
			out = &Event{Type: EventEstablished, Conn: id.peerParamLocked()}
		}
	case cm.EventREJ:
		id.state = idDisconnected
		st := int(ev.Reason)
		out = &Event{Type: EventRejected, Status: st}
		if id.ps == PortSpaceUDP {
			out.UD.PrivateData = copyBytes(ev.PrivateData)
		} else {
			out.Conn.PrivateData = copyBytes(ev.PrivateData)
		}
		if id.qp != nil {
			id.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}
	case cm.EventLAP:
		id.onLAPLocked(c, ev) // altpath.go
	case cm.EventAPR:
		id.onAPRLocked(ev)
	case cm.EventTimeout:
		if ev.Msg == mad.MsgOther && id.state == idEstablished {
			id.onAPRLocked(ev) // a LAP unanswered; the connection stays
			break
		}
		id.state = idDisconnected
		out = &Event{Type: EventUnreachable, Status: StatusTimedOut}
		if id.qp != nil {
			id.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}
	case cm.EventDREQ:
		if id.qp != nil {
			id.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}
		c.SendDREP(nil)
		// Both sides disconnecting at once: the peer's DREQ ends ours
		// (the CM answers it and no DREP follows), so it is the event.
		if id.state != idDisconnected || id.dreqSent {
			out = &Event{Type: EventDisconnected}
		}
		id.state = idDisconnected
		id.dreqSent = false
	case cm.EventDREP:
		if id.state != idDisconnected || id.dreqSent {
			out = &Event{Type: EventDisconnected}
		}
		id.state = idDisconnected
		id.dreqSent = false
	case cm.EventTimeWaitExit:
		out = &Event{Type: EventTimewaitExit}
	case cm.EventSIDRRep:
		r := ev.SIDRRep
		if r.Status != mad.SIDRSuccess {
			id.state = idDisconnected
			out = &Event{Type: EventUnreachable, Status: StatusConnReset}
			out.UD.PrivateData = copyBytes(ev.PrivateData)
			break
		}
		id.state = idEstablished
		p := c.Path()
		id.peerUD = UDParam{PrivateData: copyBytes(ev.PrivateData),
			AH:    verbs.AHAttr{DGID: p.DGID, SGIDIndex: p.SGIDIndex, HopLimit: 64, TrafficClass: p.TrafficClass, PortNum: 1},
			QPNum: r.QPN, QKey: r.QKey}
		if a, ok := id.ibAH(p); ok {
			id.peerUD.AH = a
		}
		out = &Event{Type: EventEstablished, UD: id.peerUD}
	}
	id.mu.Unlock()
	if out != nil {
		id.post(out)
	}
}

func (id *ID) peerParamLocked() ConnParam {
	r := id.req
	if r == nil {
		return ConnParam{}
	}
	return ConnParam{ResponderResources: r.InitiatorDepth, InitiatorDepth: r.ResponderResources,
		RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount, SRQ: r.SRQ, QPNum: r.LocalQPN}
}

func (id *ID) onREPLocked(c *cm.Conn, ev *cm.Event) *Event {
	if id.state != idConnect {
		return nil
	}
	r := ev.REP
	id.rep = r
	peer := ConnParam{PrivateData: copyBytes(ev.PrivateData), ResponderResources: r.ResponderResources,
		InitiatorDepth: r.InitiatorDepth, FlowControl: r.EndToEndFlowControl, RNRRetryCount: r.RNRRetryCount,
		SRQ: r.SRQ, QPNum: r.LocalQPN}
	if id.qp == nil {
		id.state = idRepReceived
		return &Event{Type: EventConnectResponse, Conn: peer}
	}
	mtu := verbs.MTU1024
	if pa, err := id.dev.dev.QueryPort(1); err == nil {
		mtu = pa.ActiveMTU
	}
	err := id.toRTSLocked(r.LocalQPN, id.psn, r.StartingPSN, mtu,
		min(id.param.ResponderResources, r.InitiatorDepth), min(id.param.InitiatorDepth, r.ResponderResources),
		id.ackTimeoutLocked(ackTimeout), id.param.RetryCount, r.RNRRetryCount)
	if err != nil {
		c.SendREJ(mad.RejectConsumer, nil, nil)
		id.state = idDisconnected
		return &Event{Type: EventConnectError, Status: StatusInvalid}
	}
	if err := c.SendRTU(nil); err != nil {
		id.state = idDisconnected
		return &Event{Type: EventConnectError, Status: StatusInvalid}
	}
	id.state = idEstablished
	return &Event{Type: EventEstablished, Conn: peer}
}
