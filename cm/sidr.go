// Service ID resolution (IBTA 12.11): how a UD client learns the QPN and
// Q_Key behind a service ID.

package cm

import (
	"time"

	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// sidrLinger is how long a passive SIDR exchange is remembered after the
// reply, so duplicate SIDR_REQs get the same reply.
const sidrLinger = 5 * time.Second

// SendSIDRReq asks the peer on path for the QP behind serviceID; the answer
// comes as EventSIDRRep, or EventTimeout.
func (c *Conn) SendSIDRReq(serviceID uint64, path Path, privateData []byte) error {
	if len(privateData) > mad.SIDRReqPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of SIDR_REQ private data", len(privateData))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateIdle); err != nil {
		return err
	}
	if _, err := m.dev.QueryGID(1, path.SGIDIndex); err != nil {
		return errf(ErrInvalid, "source GID: %v", err)
	}
	f := mad.SIDRReqFields{RequestID: c.localID, PKey: 0xFFFF, ServiceID: serviceID}
	copy(f.PrivateData[:], privateData)
	c.path, c.peerRespT = path, m.opts.ResponseTimeout
	c.tid = m.nextTIDLocked()
	c.state = StateSIDRReqSent
	mad.EncodeCM(c.msg[:], c.tid, &f)
	c.startRequestLocked(timeoutOf(m.opts.ResponseTimeout))
	return nil
}

// SIDRRepParams are the contents of a SIDR_REP.
type SIDRRepParams struct {
	Status      mad.SIDRStatus
	QPN         wire.QPN
	QKey        wire.QKey
	ServiceID   uint64
	PrivateData []byte // at most mad.SIDRRepPrivateDataSize bytes
}

// SendSIDRRep answers a SIDR_REQ (after EventSIDRReq).
func (c *Conn) SendSIDRRep(p *SIDRRepParams) error {
	if len(p.PrivateData) > mad.SIDRRepPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of SIDR_REP private data", len(p.PrivateData))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateSIDRReqRcvd); err != nil {
		return err
	}
	if c.hasReply {
		return errf(ErrState, "SIDR_REQ already answered")
	}
	c.sendSIDRRepLocked(p)
	return nil
}

func (c *Conn) sendSIDRRepLocked(p *SIDRRepParams) {
	f := mad.SIDRRepFields{RequestID: c.remoteID, Status: p.Status, QPN: p.QPN, QKey: p.QKey,
		ServiceID: p.ServiceID}
	copy(f.PrivateData[:], p.PrivateData)
	mad.EncodeCM(c.reply[:], c.tid, &f)
	c.hasReply = true
	c.m.sendLocked(c.path, c.reply[:])
	c.armLocked(sidrLinger)
}

func (m *Manager) onSIDRReqLocked(ds *deliveries, from Path, tid uint64, r mad.SIDRReq) {
	key := remKey{gid: from.DGID, lid: from.DLID, id: r.RequestID(), sidr: true}
	if c := m.remote[key]; c != nil {
		m.dup()
		if c.hasReply {
			m.sendLocked(c.path, c.reply[:])
		}
		return
	}
	f := r.Fields()
	l := m.listeners[f.ServiceID]
	if l == nil {
		rep := mad.SIDRRepFields{RequestID: f.RequestID, Status: mad.SIDRUnsupported, ServiceID: f.ServiceID}
		var b [mad.Size]byte
		mad.EncodeCM(b[:], tid, &rep)
		m.sendLocked(from, b[:])
		return
	}
	c := &Conn{m: m, handler: l.handler, passive: true, localID: m.newLocalIDLocked(), remoteID: f.RequestID,
		tid: tid, path: from, state: StateSIDRReqRcvd, rkey: key, inRemote: true}
	m.conns[c.localID] = c
	m.remote[key] = c
	ds.add(c, nil, &Event{Type: EventSIDRReq, From: from, SIDRReq: &f, PrivateData: f.PrivateData[:]})
}

func (m *Manager) onSIDRRepLocked(ds *deliveries, r mad.SIDRRep) {
	c := m.conns[r.RequestID()]
	if c == nil || c.state != StateSIDRReqSent {
		m.dup()
		return
	}
	f := r.Fields()
	ds.add(c, nil, &Event{Type: EventSIDRRep, SIDRRep: &f, PrivateData: f.PrivateData[:]})
	c.removeLocked()
}
