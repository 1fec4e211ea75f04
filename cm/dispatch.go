// Dispatch: each received CM message (REQ, MRA, REJ, REP, RTU, DREQ,
// DREP) and each timer expiry moves its Conn through the state machine
// (IBTA 12.9.6), with duplicates and unknown IDs answered as the CM does.

package cm

import (
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

func (m *Manager) onTimer(c *Conn, gen uint64) {
	var ds deliveries
	m.mu.Lock()
	if c.gen != gen || m.closed {
		m.mu.Unlock()
		return
	}
	c.timer = nil
	switch c.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateDREQSent, StateSIDRReqSent:
		if c.retries < c.maxRetry {
			c.retries++
			m.stats.Retransmits.Add(1)
			m.sendLocked(c.path, c.msg[:])
			c.armLocked(c.wait)
			break
		}
		ev := &Event{Type: EventTimeout, Err: errf(ErrTimeout, "no answer to %v after %d retries", c.state, c.retries)}
		switch c.state {
		case StateREQSent, StateMRAREQRcvd:
			ev.Msg = mad.MsgREQ
			c.sendREJLocked(mad.MsgREQ, mad.RejectTimeout, nil, nil)
			ds.add(c, nil, ev)
			c.removeLocked()
		case StateREPSent, StateMRAREPRcvd:
			ev.Msg = mad.MsgREP
			c.sendREJLocked(mad.MsgREP, mad.RejectTimeout, nil, nil)
			ds.add(c, nil, ev)
			c.removeLocked()
		case StateSIDRReqSent:
			ev.Msg = mad.MsgOther
			ds.add(c, nil, ev)
			c.removeLocked()
		case StateDREQSent:
			ds.add(c, nil, &Event{Type: EventDREP, Err: ev.Err})
			c.enterTimeWaitLocked()
		}
	case StateEstablished:
		c.lapTimerLocked(&ds) // lap.go
	case StateTimeWait:
		ds.add(c, nil, &Event{Type: EventTimeWaitExit})
		c.removeLocked()
	case StateSIDRReqRcvd:
		c.removeLocked() // passive SIDR record kept for duplicates
	}
	m.mu.Unlock()
	ds.run()
}

// dispatch handles one received CM MAD from peer from.
func (m *Manager) dispatch(from Path, msg mad.MAD) {
	cmMsg := msg.CM()
	if cmMsg == nil {
		m.stats.Malformed.Add(1)
		return
	}
	var ds deliveries
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	tid := msg.TransactionID()
	switch x := cmMsg.(type) {
	case mad.REQ:
		m.onREQLocked(&ds, from, tid, x)
	case mad.MRA:
		m.onMRALocked(x)
	case mad.REJ:
		m.onREJLocked(&ds, x)
	case mad.REP:
		m.onREPLocked(&ds, from, tid, x)
	case mad.RTU:
		m.onRTULocked(&ds, x)
	case mad.DREQ:
		m.onDREQLocked(&ds, from, tid, x)
	case mad.DREP:
		m.onDREPLocked(&ds, x)
	case mad.SIDRReq:
		m.onSIDRReqLocked(&ds, from, tid, x)
	case mad.SIDRRep:
		m.onSIDRRepLocked(&ds, x)
	case mad.LAP:
		m.onLAPLocked(&ds, tid, x)
	case mad.APR:
		m.onAPRLocked(&ds, x)
	default:
		m.stats.Dropped.Add(1)
	}
	m.mu.Unlock()
	ds.run()
}

func (m *Manager) dup() { m.stats.Duplicates.Add(1) }

// rejectUnknown answers a message that matches no Conn with a REJ.
func (m *Manager) rejectUnknownLocked(to Path, tid uint64, remoteID uint32, kind mad.MsgKind, reason mad.RejectReason) {
	f := mad.REJFields{RemoteCommID: remoteID, MessageRejected: kind, Reason: reason}
	var b [mad.Size]byte
	mad.EncodeCM(b[:], tid, &f)
	m.sendLocked(to, b[:])
}

func (m *Manager) onREQLocked(ds *deliveries, from Path, tid uint64, r mad.REQ) {
	key := remKey{gid: from.DGID, lid: from.DLID, id: r.LocalCommID()}
	if c := m.remote[key]; c != nil {
		m.dup()
		switch c.state {
		case StateREQRcvd:
			c.sendMRALocked(m.opts.ResponseTimeout, nil)
		case StateMRAREQSent, StateREPSent:
			m.sendLocked(c.path, c.msg[:])
		case StateTimeWait:
			c.sendREJLocked(mad.MsgREQ, mad.RejectStaleConnection, nil, nil)
		}
		return
	}
	l := m.listeners[r.ServiceID()]
	if l == nil {
		m.rejectUnknownLocked(from, tid, r.LocalCommID(), mad.MsgREQ, mad.RejectInvalidServiceID)
		return
	}
	if t := r.TransportServiceType(); t != mad.TransportRC && t != mad.TransportUC {
		m.rejectUnknownLocked(from, tid, r.LocalCommID(), mad.MsgREQ, mad.RejectInvalidTransportType)
		return
	}
	f := r.Fields()
	var alt Path
	hasAlt := f.AlternatePath.RemoteGID != (wire.GID{})
	if hasAlt {
		// The REQ's alternate path seen from here: its remote GID must be
		// one of this port's.
		ap := &f.AlternatePath
		idx := m.dev.GIDIndex(ap.RemoteGID)
		if idx < 0 || ap.LocalGID == (wire.GID{}) {
			m.rejectUnknownLocked(from, tid, r.LocalCommID(), mad.MsgREQ, mad.RejectInvalidAltGID)
			return
		}
		alt = Path{SGIDIndex: idx, DGID: ap.LocalGID, FlowLabel: ap.FlowLabel, TrafficClass: ap.TrafficClass,
			HopLimit: ap.HopLimit}
		if m.ib {
			alt = pathFromREQ(ap, idx, true)
		}
	}
	c := &Conn{alt: alt, hasAlt: hasAlt, m: m, handler: l.handler, passive: true, localID: m.newLocalIDLocked(),
		remoteID: f.LocalCommID, tid: tid, path: from, remoteQPN: f.LocalQPN,
		ackTO: f.PrimaryPath.LocalACKTimeout, peerRespT: f.RemoteCMResponseTimeout,
		maxRetry: int(min(f.MaxCMRetries, m.opts.MaxRetries)), state: StateREQRcvd, rkey: key, inRemote: true}
	c.path.FlowLabel, c.path.TrafficClass = f.PrimaryPath.FlowLabel, f.PrimaryPath.TrafficClass
	if f.PrimaryPath.HopLimit != 0 {
		c.path.HopLimit = f.PrimaryPath.HopLimit
	}
	if m.ib {
		// On InfiniBand the connection's path is the REQ's primary path
		// (its LIDs, SL, rate, GRH or not), not the CM MAD's addressing.
		pp := &f.PrimaryPath
		sgid := m.dev.GIDIndex(pp.RemoteGID)
		if sgid < 0 {
			sgid = 0
		}
		c.path = pathFromREQ(pp, sgid, true)
	}
	m.conns[c.localID] = c
	m.remote[key] = c
	ds.add(c, nil, &Event{Type: EventREQ, From: c.path, REQ: &f, PrivateData: f.PrivateData[:]})
}

func (m *Manager) onMRALocked(r mad.MRA) {
	c := m.conns[r.RemoteCommID()]
	if c == nil {
		m.stats.Dropped.Add(1)
		return
	}
	wait := timeoutOf(r.ServiceTimeout()) + timeoutOf(c.peerRespT)
	switch {
	case r.MessageMRAed() == mad.MsgREQ && c.state == StateREQSent:
		c.state = StateMRAREQRcvd
	case r.MessageMRAed() == mad.MsgREP && c.state == StateREPSent:
		c.state = StateMRAREPRcvd
	case c.state == StateMRAREQRcvd || c.state == StateMRAREPRcvd:
		m.dup()
	default:
		m.stats.Dropped.Add(1)
		return
	}
	// The peer is alive and working on it: wait longer, count afresh.
	c.retries = 0
	c.wait = wait
	c.armLocked(wait)
}

func (m *Manager) onREJLocked(ds *deliveries, r mad.REJ) {
	c := m.conns[r.RemoteCommID()]
	if c == nil || (c.remoteID != 0 && r.LocalCommID() != 0 && r.LocalCommID() != c.remoteID) {
		m.stats.Dropped.Add(1)
		return
	}
	switch c.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREPRcvd, StateREQRcvd, StateMRAREQSent:
	default:
		m.stats.Dropped.Add(1)
		return
	}
	f := r.Fields()
	ds.add(c, nil, &Event{Type: EventREJ, Reason: f.Reason, Msg: f.MessageRejected,
		ARI: append([]byte(nil), f.ARI[:min(int(f.RejectInfoLength), len(f.ARI))]...), PrivateData: f.PrivateData[:]})
	c.removeLocked()
}

func (m *Manager) onREPLocked(ds *deliveries, from Path, tid uint64, r mad.REP) {
	c := m.conns[r.RemoteCommID()]
	if c == nil {
		m.rejectUnknownLocked(from, tid, r.LocalCommID(), mad.MsgREP, mad.RejectInvalidCommID)
		return
	}
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
	case StateEstablished:
		m.dup()
		if r.LocalCommID() == c.remoteID {
			m.sendLocked(c.path, c.msg[:]) // our RTU was lost: send it again
		}
		return
	default:
		m.dup()
		return
	}
	c.stopTimerLocked()
	f := r.Fields()
	c.remoteID, c.remoteQPN, c.state = f.LocalCommID, f.LocalQPN, StateREPRcvd
	ds.add(c, nil, &Event{Type: EventREP, REP: &f, PrivateData: f.PrivateData[:]})
}

func (m *Manager) onRTULocked(ds *deliveries, r mad.RTU) {
	c := m.conns[r.RemoteCommID()]
	if c == nil || r.LocalCommID() != c.remoteID {
		m.stats.Dropped.Add(1)
		return
	}
	if c.state != StateREPSent && c.state != StateMRAREPRcvd {
		m.dup()
		return
	}
	c.stopTimerLocked()
	c.state = StateEstablished
	f := r.Fields()
	ds.add(c, nil, &Event{Type: EventEstablished, PrivateData: f.PrivateData[:]})
}

func (m *Manager) onDREQLocked(ds *deliveries, from Path, tid uint64, r mad.DREQ) {
	c := m.conns[r.RemoteCommID()]
	if c == nil || r.LocalCommID() != c.remoteID {
		// Unknown or stale: answer so the peer can finish.
		f := mad.DREPFields{RemoteCommID: r.LocalCommID(), LocalCommID: r.RemoteCommID()}
		var b [mad.Size]byte
		mad.EncodeCM(b[:], tid, &f)
		m.sendLocked(from, b[:])
		return
	}
	f := r.Fields()
	switch c.state {
	case StateEstablished, StateREPSent, StateMRAREPRcvd, StateREPRcvd:
		c.stopTimerLocked()
		c.tid = tid
		c.state = StateDREQRcvd
		ds.add(c, nil, &Event{Type: EventDREQ, PrivateData: f.PrivateData[:]})
	case StateDREQSent:
		// Both sides disconnect at once: answer and wait.
		c.tid = tid
		c.sendDREPLocked(nil)
		ds.add(c, nil, &Event{Type: EventDREQ, PrivateData: f.PrivateData[:]})
		c.enterTimeWaitLocked()
	case StateTimeWait:
		m.dup()
		c.tid = tid
		c.sendDREPLocked(nil)
	default:
		m.dup()
	}
}

func (m *Manager) onDREPLocked(ds *deliveries, r mad.DREP) {
	c := m.conns[r.RemoteCommID()]
	if c == nil || c.state != StateDREQSent || r.LocalCommID() != c.remoteID {
		m.dup()
		return
	}
	f := r.Fields()
	ds.add(c, nil, &Event{Type: EventDREP, PrivateData: f.PrivateData[:]})
	c.enterTimeWaitLocked()
}
