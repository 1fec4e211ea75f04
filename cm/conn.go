// Conn: one CM exchange as the API shows it (IBTA 12.9): its states and
// events, and the calls that send REQ, REP, RTU, MRA, REJ, DREQ and DREP.
// The machinery under it (timers, retransmission, time wait) is in
// machine.go; received messages are dispatched in dispatch.go.

package cm

import (
	"fmt"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// State is a Conn's state in the CM state machine.
type State int

// Conn states (IBTA 12.9.6 names).
const (
	StateIdle State = iota
	StateREQSent
	StateREQRcvd
	StateMRAREQRcvd // active: our REQ was MRAed
	StateMRAREQSent // passive: we MRAed the REQ
	StateREPSent
	StateMRAREPRcvd
	StateREPRcvd
	StateEstablished
	StateDREQSent
	StateDREQRcvd
	StateTimeWait
	StateSIDRReqSent
	StateSIDRReqRcvd
	stateClosed
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "REQ_RCVD", "MRA_REQ_RCVD", "MRA_REQ_SENT",
	"REP_SENT", "MRA_REP_RCVD", "REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT",
	"SIDR_REQ_SENT", "SIDR_REQ_RCVD", "CLOSED"}

// String returns the IBTA name of the state, such as "REQ_SENT".
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// EventType is what happened to a Conn.
type EventType int

// Event types.
const (
	// EventREQ: a new passive Conn received a REQ (Event.REQ).
	EventREQ EventType = iota + 1
	// EventREP: the peer accepted our REQ (Event.REP); answer with SendRTU
	// or SendREJ.
	EventREP
	// EventEstablished: the RTU arrived; the connection is up.
	EventEstablished
	// EventREJ: the peer rejected (Event.Reason, Event.ARI).
	EventREJ
	// EventDREQ: the peer disconnects; answer with SendDREP.
	EventDREQ
	// EventDREP: our DREQ was answered (or, with Event.Err, timed out).
	EventDREP
	// EventTimeWaitExit: time wait is over; the Conn is gone.
	EventTimeWaitExit
	// EventTimeout: a REQ, REP, SIDR_REQ or LAP was not answered after
	// all retries (Event.Msg says which, MsgOther for SIDR_REQ and LAP;
	// Event.Err wraps ErrTimeout). A LAP's timeout leaves the connection
	// established.
	EventTimeout
	// EventSIDRReq: a new passive Conn received a SIDR_REQ (Event.SIDRReq);
	// answer with SendSIDRRep.
	EventSIDRReq
	// EventSIDRRep: the answer to our SIDR_REQ (Event.SIDRRep).
	EventSIDRRep
	// EventLAP: the peer proposes a new alternate path (Event.LAP, and
	// Event.AltPath seen from this side); answer with SendAPR.
	EventLAP
	// EventAPR: the answer to our LAP (Event.APStatus; Event.ARI holds
	// the additional information).
	EventAPR
)

var eventNames = map[EventType]string{EventREQ: "REQ", EventREP: "REP", EventEstablished: "ESTABLISHED",
	EventREJ: "REJ", EventDREQ: "DREQ", EventDREP: "DREP", EventTimeWaitExit: "TIMEWAIT_EXIT",
	EventTimeout: "TIMEOUT", EventSIDRReq: "SIDR_REQ", EventSIDRRep: "SIDR_REP",
	EventLAP: "LAP", EventAPR: "APR"}

// String returns the event's name, such as "REP".
func (e EventType) String() string {
	if s, ok := eventNames[e]; ok {
		return s
	}
	return fmt.Sprintf("EventType(%d)", int(e))
}

// Event is delivered to a Conn's Handler.
type Event struct {
	Type EventType
	// From is the path the message came on (EventREQ, EventSIDRReq).
	From Path
	// The received message, for the event types that carry one.
	REQ     *mad.REQFields
	REP     *mad.REPFields
	SIDRReq *mad.SIDRReqFields
	SIDRRep *mad.SIDRRepFields
	LAP     *mad.LAPFields
	// AltPath is the path a LAP proposes, seen from this side (EventLAP).
	AltPath *Path
	// APStatus is the APR's answer (EventAPR).
	APStatus mad.APStatus
	// EventREJ: why, and the additional reject information (EventAPR:
	// the APR's additional information).
	Reason mad.RejectReason
	ARI    []byte
	// Msg is the message a timeout or REJ concerns.
	Msg mad.MsgKind
	// PrivateData is the private data of the message that caused the event.
	PrivateData []byte
	// Err is set for EventTimeout and a timed-out EventDREP.
	Err error
}

// Handler receives a Conn's events.
type Handler func(c *Conn, ev *Event)

// Path says where a peer's GSI QP is: our source GID index and its GID, and
// the GRH fields to use. On an InfiniBand port a path is addressed by LID
// (DLID not 0): SLID, DLID, SL, Rate and PacketLifeTime come from the
// subnet administrator's PathRecord, and the GRH fields are used only if
// Global is set (a path leaving the subnet, PathRecord hop limit above 1).
// On RoCE the LID fields are zero and every packet has a GRH.
type Path struct {
	SGIDIndex    int
	DGID         wire.GID
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8

	// InfiniBand only (zero on RoCE).
	SLID           uint16    // our port's LID, with the path bits chosen
	DLID           uint16    // the peer port's LID
	SL             uint8     // service level, 0..15
	Rate           uint8     // static rate, PathRecord encoding (0: the port's)
	PacketLifeTime uint8     // PathRecord's packet life time exponent
	MTU            verbs.MTU // the path's MTU (PathRecord's; 0: unknown)
	Global         bool      // the path's packets carry a GRH
}

// IsIB reports whether the path is an InfiniBand path, addressed by LID.
func (p *Path) IsIB() bool { return p.DLID != 0 }

// AHAttr returns the address vector of the path, as both QPs of a
// connection and the CM's own MADs use it: on RoCE the GRH fields (a hop
// limit of 0 as 64); on InfiniBand the DLID, SL, source path bits (the
// SLID's bits below the LMC lmc) and a GRH only if the path is global.
func (p *Path) AHAttr(lmc uint8) verbs.AHAttr {
	hop := p.HopLimit
	if hop == 0 {
		hop = 64
	}
	if !p.IsIB() {
		return verbs.AHAttr{DGID: p.DGID, SGIDIndex: p.SGIDIndex, FlowLabel: p.FlowLabel, HopLimit: hop,
			TrafficClass: p.TrafficClass, PortNum: 1}
	}
	a := verbs.AHAttr{DLID: p.DLID, SL: p.SL, SrcPathBits: uint8(p.SLID & (1<<lmc - 1)), StaticRate: p.Rate,
		TrafficClass: p.TrafficClass, PortNum: 1}
	if p.Global {
		a.IsGlobal, a.DGID, a.SGIDIndex, a.FlowLabel, a.HopLimit = true, p.DGID, p.SGIDIndex, p.FlowLabel, hop
	}
	return a
}

// Conn is one CM exchange: a connection (REQ ... DREP) or a service ID
// resolution (SIDR).
type Conn struct {
	m *Manager
	// Context is free for the application's use.
	Context any

	// guarded by m.mu
	handler   Handler
	state     State
	passive   bool
	localID   uint32
	remoteID  uint32
	tid       uint64
	path      Path
	remoteQPN wire.QPN
	alt       Path // the alternate path, if hasAlt (REQParams.AltPath, or a LAP's)
	hasAlt    bool
	// The LAP exchanges (lap.go): ours outstanding (lapOut, proposing
	// lapOutAlt, retransmitted from lapMsg), the peer's waiting for
	// SendAPR (lapIn, proposing lapInAlt; lapTID its transaction ID), and
	// the last APR sent, for the peer's retransmissions.
	lapOut     bool
	lapOutAlt  Path
	lapRetries int
	lapMsg     [mad.Size]byte
	lapIn      bool
	lapInAlt   Path
	lapTID     uint64
	aprMsg     [mad.Size]byte
	hasAPR     bool
	ackTO      uint8 // local ACK timeout of the connection, for time wait
	peerRespT  uint8 // the peer's CM response timeout exponent
	retries    int
	maxRetry   int
	wait       time.Duration
	timer      *time.Timer
	gen        uint64
	msg        [mad.Size]byte // the last request or reply, for retransmission
	reply      [mad.Size]byte // passive SIDR: the reply, for duplicates
	hasReply   bool
	rkey       remKey
	inRemote   bool
	destroyed  bool
}

// NewConn creates an idle active Conn whose events go to h.
func (m *Manager) NewConn(h Handler) (*Conn, error) {
	if h == nil {
		return nil, errf(ErrInvalid, "nil handler")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errf(ErrClosed, "manager")
	}
	c := &Conn{m: m, handler: h, localID: m.newLocalIDLocked(), maxRetry: int(m.opts.MaxRetries)}
	m.conns[c.localID] = c
	return c, nil
}

// SetHandler replaces the Conn's handler (a passive Conn starts with its
// listener's).
func (c *Conn) SetHandler(h Handler) {
	c.m.mu.Lock()
	c.handler = h
	c.m.mu.Unlock()
}

// State returns the Conn's state.
func (c *Conn) State() State {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.state
}

// LocalID returns the local communication ID.
func (c *Conn) LocalID() uint32 { return c.localID }

// RemoteID returns the peer's communication ID (0 until known).
func (c *Conn) RemoteID() uint32 {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.remoteID
}

// Path returns the path to the peer's GSI QP.
func (c *Conn) Path() Path {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.path
}

// Manager returns the Conn's Manager.
func (c *Conn) Manager() *Manager { return c.m }

// REQParams are the contents of a REQ.
type REQParams struct {
	ServiceID uint64
	Path      Path
	// QPType is verbs.RC or verbs.UC.
	QPType verbs.QPType
	QPN    wire.QPN
	// StartingPSN is, as Linux uses it, the PSN the active QP expects to
	// receive first; the passive QP sends from it.
	StartingPSN        wire.PSN
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // 0..7
	RNRRetryCount      uint8 // 0..7
	PathMTU            verbs.MTU
	LocalACKTimeout    uint8 // 0..31
	SRQ                bool
	PrivateData        []byte // at most mad.REQPrivateDataSize bytes
	// AltPath, if not nil, is the connection's alternate path for
	// automatic path migration (IBTA 17.2.8): the REQ's alternate path
	// fields carry it, with LocalACKTimeout, and the passive side's
	// Conn.AltPath returns it seen from there.
	AltPath *Path
}

// SendREQ starts an active connection: it sends a REQ and waits for the
// answer (EventREP, EventREJ or EventTimeout).
func (c *Conn) SendREQ(p *REQParams) error {
	if len(p.PrivateData) > mad.REQPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of REQ private data (at most %d)", len(p.PrivateData), mad.REQPrivateDataSize)
	}
	if p.QPType != verbs.RC && p.QPType != verbs.UC {
		return errf(ErrInvalid, "QP type %v", p.QPType)
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateIdle); err != nil {
		return err
	}
	src, err := m.dev.QueryGID(1, p.Path.SGIDIndex)
	if err != nil {
		return errf(ErrInvalid, "source GID: %v", err)
	}
	f := mad.REQFields{
		LocalCommID: c.localID, ServiceID: p.ServiceID, LocalCAGUID: m.guid,
		LocalQPN: p.QPN, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: m.opts.ResponseTimeout, StartingPSN: p.StartingPSN,
		LocalCMResponseTimeout: m.opts.ResponseTimeout, RetryCount: p.RetryCount,
		PKey: 0xFFFF, PathMTU: uint8(p.PathMTU), RNRRetryCount: p.RNRRetryCount,
		MaxCMRetries: m.opts.MaxRetries, SRQ: p.SRQ,
		PrimaryPath: reqPath(src, &p.Path, p.LocalACKTimeout),
	}
	if p.QPType == verbs.UC {
		f.TransportServiceType = mad.TransportUC
	}
	if alt := p.AltPath; alt != nil {
		asrc, err := m.dev.QueryGID(1, alt.SGIDIndex)
		if err != nil {
			return errf(ErrInvalid, "alternate source GID: %v", err)
		}
		if alt.DGID == (wire.GID{}) {
			return errf(ErrInvalid, "alternate path without a destination GID")
		}
		f.AlternatePath = reqPath(asrc, alt, p.LocalACKTimeout)
		c.alt, c.hasAlt = *alt, true
	}
	copy(f.PrivateData[:], p.PrivateData)
	c.path, c.ackTO, c.peerRespT = p.Path, p.LocalACKTimeout, m.opts.ResponseTimeout
	c.tid = m.nextTIDLocked()
	c.state = StateREQSent
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.startRequestLocked(timeoutOf(m.opts.ResponseTimeout))
	return nil
}

// reqPath is a REQ's path from source GID src along p: on RoCE the LIDs
// are the permissive LID, as Linux sends them, and a hop limit of 0 is sent
// as 64; on InfiniBand the path's LIDs, SL, rate and hop limit, with the
// subnet local bit set unless the path is global (as Linux's CM fills it
// from a PathRecord).
func reqPath(src wire.GID, p *Path, ackTO uint8) mad.REQPathFields {
	if p.IsIB() {
		return mad.REQPathFields{LocalLID: p.SLID, RemoteLID: p.DLID, LocalGID: src, RemoteGID: p.DGID,
			FlowLabel: p.FlowLabel, PacketRate: p.Rate, TrafficClass: p.TrafficClass, HopLimit: p.HopLimit,
			SL: p.SL, SubnetLocal: !p.Global, LocalACKTimeout: ackTO}
	}
	hop := p.HopLimit
	if hop == 0 {
		hop = 64
	}
	return mad.REQPathFields{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: src, RemoteGID: p.DGID,
		FlowLabel: p.FlowLabel, TrafficClass: p.TrafficClass, HopLimit: hop, LocalACKTimeout: ackTO}
}

// pathFromREQ is the path a REQ's path fields f describe, seen from the
// passive side: sgid is the index of f's remote GID in our table. On
// InfiniBand (rp.LocalLID a unicast LID) the LIDs are swapped and the GRH
// is used only if the REQ says the path is not subnet local.
func pathFromREQ(f *mad.REQPathFields, sgid int, ib bool) Path {
	p := Path{SGIDIndex: sgid, DGID: f.LocalGID, FlowLabel: f.FlowLabel, TrafficClass: f.TrafficClass,
		HopLimit: f.HopLimit}
	if ib {
		p.SLID, p.DLID, p.SL, p.Rate, p.Global = f.RemoteLID, f.LocalLID, f.SL, f.PacketRate, !f.SubnetLocal
	}
	return p
}

// AltPath returns the connection's alternate path and whether it has one:
// the REQ's alternate path, seen from this side (the active side's
// REQParams.AltPath; on the passive side the REQ's alternate path with its
// GIDs swapped, the source GID found in the device's table).
func (c *Conn) AltPath() (Path, bool) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.alt, c.hasAlt
}

// REPParams are the contents of a REP.
type REPParams struct {
	QPN wire.QPN
	// StartingPSN is the PSN the passive QP expects to receive first; the
	// active QP sends from it.
	StartingPSN        wire.PSN
	ResponderResources uint8
	InitiatorDepth     uint8
	RNRRetryCount      uint8
	SRQ                bool
	PrivateData        []byte // at most mad.REPPrivateDataSize bytes
}

// SendREP accepts a REQ: it sends a REP and waits for the RTU
// (EventEstablished, EventREJ or EventTimeout).
func (c *Conn) SendREP(p *REPParams) error {
	if len(p.PrivateData) > mad.REPPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of REP private data (at most %d)", len(p.PrivateData), mad.REPPrivateDataSize)
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateREQRcvd, StateMRAREQSent); err != nil {
		return err
	}
	f := mad.REPFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: p.QPN,
		StartingPSN: p.StartingPSN, VendorID: 0, ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, TargetACKDelay: m.dev.QueryDevice().LocalCAAckDelay,
		RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, LocalCAGUID: m.guid}
	copy(f.PrivateData[:], p.PrivateData)
	c.state = StateREPSent
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.startRequestLocked(timeoutOf(c.peerRespT))
	return nil
}

// SendRTU completes an active connection after EventREP.
func (c *Conn) SendRTU(privateData []byte) error {
	if len(privateData) > mad.RTUPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of RTU private data", len(privateData))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateREPRcvd); err != nil {
		return err
	}
	f := mad.RTUFields{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	copy(f.PrivateData[:], privateData)
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.state = StateEstablished
	m.sendLocked(c.path, c.msg[:])
	return nil
}

// SendMRA tells the peer its REQ arrived and an answer will take up to
// 4.096 µs * 2^serviceTimeout.
func (c *Conn) SendMRA(serviceTimeout uint8, privateData []byte) error {
	if len(privateData) > mad.MRAPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of MRA private data", len(privateData))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateREQRcvd, StateMRAREQSent); err != nil {
		return err
	}
	c.sendMRALocked(serviceTimeout, privateData)
	return nil
}

func (c *Conn) sendMRALocked(serviceTimeout uint8, privateData []byte) {
	f := mad.MRAFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageMRAed: mad.MsgREQ,
		ServiceTimeout: serviceTimeout}
	copy(f.PrivateData[:], privateData)
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.state = StateMRAREQSent
	c.m.sendLocked(c.path, c.msg[:])
}

// SendREJ refuses a REQ (passive) or a REP (active) and ends the Conn.
func (c *Conn) SendREJ(reason mad.RejectReason, ari, privateData []byte) error {
	if len(privateData) > mad.REJPrivateDataSize || len(ari) > mad.REJARISize {
		return errf(ErrInvalid, "REJ private data %d or ARI %d bytes too long", len(privateData), len(ari))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateREQRcvd, StateMRAREQSent, StateREPRcvd); err != nil {
		return err
	}
	kind := mad.MsgREQ
	if c.state == StateREPRcvd {
		kind = mad.MsgREP
	}
	c.sendREJLocked(kind, reason, ari, privateData)
	c.removeLocked()
	return nil
}

func (c *Conn) sendREJLocked(kind mad.MsgKind, reason mad.RejectReason, ari, privateData []byte) {
	f := mad.REJFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: kind,
		RejectInfoLength: uint8(len(ari)), Reason: reason}
	copy(f.ARI[:], ari)
	copy(f.PrivateData[:], privateData)
	var b [mad.Size]byte
	mad.EncodeCM(b[:], c.tid, &f)
	c.m.sendLocked(c.path, b[:])
}

// SendDREQ starts disconnecting an established connection; EventDREP
// follows (after the DREP or, with Event.Err, after the retries).
func (c *Conn) SendDREQ(privateData []byte) error {
	if len(privateData) > mad.DREQPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of DREQ private data", len(privateData))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	// A passive side whose RTU was lost but whose QP already carries
	// traffic may disconnect from REP_SENT.
	if err := c.checkLocked(StateEstablished, StateREPSent, StateMRAREPRcvd); err != nil {
		return err
	}
	c.stopTimerLocked()
	f := mad.DREQFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
	copy(f.PrivateData[:], privateData)
	c.tid = m.nextTIDLocked()
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.state = StateDREQSent
	c.startRequestLocked(timeoutOf(c.peerRespT))
	return nil
}

// SendDREP answers a DREQ (after EventDREQ) and enters time wait.
func (c *Conn) SendDREP(privateData []byte) error {
	if len(privateData) > mad.DREPPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of DREP private data", len(privateData))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state == StateTimeWait {
		return nil // a DREQ crossed ours: the DREP went out already
	}
	if err := c.checkLocked(StateDREQRcvd); err != nil {
		return err
	}
	c.sendDREPLocked(privateData)
	c.enterTimeWaitLocked()
	return nil
}

func (c *Conn) sendDREPLocked(privateData []byte) {
	f := mad.DREPFields{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	copy(f.PrivateData[:], privateData)
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.m.sendLocked(c.path, c.msg[:])
}

// Destroy ends the Conn whatever its state, telling the peer as the CM
// does: a pending REQ or REP is rejected, an established connection gets a
// DREQ, a received DREQ its DREP. A disconnecting Conn stays in the tables
// (without handler) until its DREQ is answered or out of retries and time
// wait has ended, so the peer learns of the disconnect and duplicates are
// answered. No more events are delivered.
func (c *Conn) Destroy() {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.destroyed || c.state == stateClosed {
		c.destroyed = true
		return
	}
	c.destroyed = true
	c.handler = nil
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
		c.sendREJLocked(mad.MsgREQ, mad.RejectTimeout, nil, nil)
	case StateREQRcvd, StateMRAREQSent:
		c.sendREJLocked(mad.MsgREQ, mad.RejectConsumer, nil, nil)
	case StateREPSent, StateMRAREPRcvd, StateREPRcvd:
		c.sendREJLocked(mad.MsgREP, mad.RejectConsumer, nil, nil)
	case StateEstablished:
		// Disconnect in the background: the DREQ is retransmitted until
		// answered or out of retries, then time wait runs its course.
		f := mad.DREQFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
		c.tid = m.nextTIDLocked()
		mad.EncodeCM(c.msg[:], c.tid, &f)
		c.state = StateDREQSent
		c.startRequestLocked(timeoutOf(c.peerRespT))
		return
	case StateDREQSent:
		return // the DREQ keeps being retransmitted
	case StateDREQRcvd:
		c.sendDREPLocked(nil)
		c.enterTimeWaitLocked()
		return
	case StateTimeWait:
		return
	case StateSIDRReqRcvd:
		if !c.hasReply {
			c.sendSIDRRepLocked(&SIDRRepParams{Status: mad.SIDRReject})
		}
		// keep the record briefly for duplicates
		return
	}
	c.removeLocked()
}
