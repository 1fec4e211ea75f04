// Loading a new alternate path on an established connection (IBTA 12.8.2):
// either side sends a LAP proposing one, the other answers with an APR
// saying whether it loaded it into its QP. The connection's state does not
// change; only its alternate path (Conn.AltPath) does, once the APR says
// loaded.

package cm

import (
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// LAPParams are the contents of a LAP.
type LAPParams struct {
	// AltPath is the alternate path proposed, seen from this side.
	AltPath Path
	// LocalACKTimeout is the local ACK timeout for the alternate path
	// (0..31).
	LocalACKTimeout uint8
	PrivateData     []byte // at most mad.LAPPrivateDataSize bytes
}

// SendLAP proposes a new alternate path to the peer of an established
// connection. The answer comes as EventAPR (with Event.APStatus; when it is
// mad.APLoaded the peer loaded the path and Conn.AltPath returns it), or
// EventTimeout with Event.Msg MsgOther after the CM's retries. Only one LAP
// is outstanding at a time (ErrState otherwise).
func (c *Conn) SendLAP(p *LAPParams) error {
	if len(p.PrivateData) > mad.LAPPrivateDataSize {
		return errf(ErrInvalid, "%d bytes of LAP private data (at most %d)", len(p.PrivateData), mad.LAPPrivateDataSize)
	}
	if p.LocalACKTimeout > 31 {
		return errf(ErrInvalid, "local ACK timeout %d", p.LocalACKTimeout)
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateEstablished); err != nil {
		return err
	}
	if c.lapOut {
		return errf(ErrState, "a LAP of this side is outstanding")
	}
	src, err := m.dev.QueryGID(1, p.AltPath.SGIDIndex)
	if err != nil {
		return errf(ErrInvalid, "alternate source GID: %v", err)
	}
	if p.AltPath.DGID == (wire.GID{}) {
		return errf(ErrInvalid, "alternate path without a destination GID")
	}
	f := mad.LAPFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN,
		RemoteCMResponseTimeout: m.opts.ResponseTimeout, AlternatePath: reqPath(src, &p.AltPath, p.LocalACKTimeout)}
	copy(f.PrivateData[:], p.PrivateData)
	c.lapOut, c.lapOutAlt, c.lapRetries = true, p.AltPath, 0
	mad.EncodeCM(c.lapMsg[:], m.nextTIDLocked(), &f)
	m.sendLocked(c.path, c.lapMsg[:])
	c.armLocked(timeoutOf(c.peerRespT))
	return nil
}

// APRParams are the contents of an APR.
type APRParams struct {
	// Status is the answer: mad.APLoaded if the application loaded the
	// path into its QP.
	Status         mad.APStatus
	AdditionalInfo []byte // at most mad.APRAddInfoSize bytes
	PrivateData    []byte // at most mad.APRPrivateDataSize bytes
}

// SendAPR answers the peer's LAP (EventLAP). With mad.APLoaded the proposed
// path becomes the connection's alternate path (Conn.AltPath).
func (c *Conn) SendAPR(p *APRParams) error {
	if len(p.PrivateData) > mad.APRPrivateDataSize || len(p.AdditionalInfo) > mad.APRAddInfoSize {
		return errf(ErrInvalid, "APR private data %d bytes, additional information %d", len(p.PrivateData), len(p.AdditionalInfo))
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.checkLocked(StateEstablished); err != nil {
		return err
	}
	if !c.lapIn {
		return errf(ErrState, "no LAP to answer")
	}
	c.sendAPRLocked(p.Status, p.AdditionalInfo, p.PrivateData)
	if p.Status == mad.APLoaded {
		c.alt, c.hasAlt = c.lapInAlt, true
	}
	return nil
}

func (c *Conn) sendAPRLocked(st mad.APStatus, info, priv []byte) {
	f := mad.APRFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, Status: st,
		AdditionalInfoLength: uint8(len(info))}
	copy(f.AdditionalInfo[:], info)
	copy(f.PrivateData[:], priv)
	mad.EncodeCM(c.aprMsg[:], c.lapTID, &f)
	c.hasAPR, c.lapIn = true, false
	c.m.sendLocked(c.path, c.aprMsg[:])
}

func (m *Manager) onLAPLocked(ds *deliveries, tid uint64, r mad.LAP) {
	c := m.conns[r.RemoteCommID()]
	if c == nil || r.LocalCommID() != c.remoteID || c.state != StateEstablished {
		m.stats.Dropped.Add(1)
		return
	}
	if c.lapIn || c.hasAPR && tid == c.lapTID {
		// A retransmission: the application is deciding, or answered
		// already (the APR is sent again).
		m.dup()
		if !c.lapIn {
			m.sendLocked(c.path, c.aprMsg[:])
		}
		return
	}
	f := r.Fields()
	ap := &f.AlternatePath
	c.lapTID = tid
	idx := m.dev.GIDIndex(ap.RemoteGID)
	if idx < 0 || ap.LocalGID == (wire.GID{}) {
		c.sendAPRLocked(mad.APInvalidGID, nil, nil)
		return
	}
	// A LAP of ours may be outstanding too: the two exchanges are
	// independent, each answered by its own APR.
	c.lapIn = true
	c.lapInAlt = Path{SGIDIndex: idx, DGID: ap.LocalGID, FlowLabel: ap.FlowLabel, TrafficClass: ap.TrafficClass,
		HopLimit: ap.HopLimit}
	if m.ib {
		c.lapInAlt = pathFromREQ(ap, idx, true) // its LIDs and SL, seen from here
	}
	alt := c.lapInAlt
	ds.add(c, nil, &Event{Type: EventLAP, LAP: &f, AltPath: &alt, PrivateData: f.PrivateData[:]})
}

func (m *Manager) onAPRLocked(ds *deliveries, r mad.APR) {
	c := m.conns[r.RemoteCommID()]
	if c == nil || r.LocalCommID() != c.remoteID || c.state != StateEstablished || !c.lapOut {
		m.dup()
		return
	}
	c.stopTimerLocked()
	c.lapOut = false
	f := r.Fields()
	if f.Status == mad.APLoaded {
		c.alt, c.hasAlt = c.lapOutAlt, true
	}
	n := min(int(f.AdditionalInfoLength), mad.APRAddInfoSize)
	ds.add(c, nil, &Event{Type: EventAPR, APStatus: f.Status, ARI: f.AdditionalInfo[:n], PrivateData: f.PrivateData[:]})
}

// lapTimerLocked handles the timer of an established Conn: our LAP is sent
// again, or after the retries given up (EventTimeout, Msg MsgOther).
func (c *Conn) lapTimerLocked(ds *deliveries) {
	if !c.lapOut {
		return
	}
	m := c.m
	if c.lapRetries < c.maxRetry {
		c.lapRetries++
		m.stats.Retransmits.Add(1)
		m.sendLocked(c.path, c.lapMsg[:])
		c.armLocked(timeoutOf(c.peerRespT))
		return
	}
	c.lapOut = false
	ds.add(c, nil, &Event{Type: EventTimeout, Msg: mad.MsgOther,
		Err: errf(ErrTimeout, "no APR after %d retries", c.lapRetries)})
}
