// The sending side of RMPP (IBTA volume 1 section 13.6): a table answer
// cut into segments of 200 bytes of records, each with the SA header, sent
// as far as the receiver's window allows, the window moved on by its ACKs,
// the unacknowledged segments sent again on a timeout, and the transfer
// ended by the ACK of the last segment, a STOP or an ABORT.

package sa

import (
	"time"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// transferKey identifies a transfer: the requester and its transaction.
type transferKey struct {
	lid uint16
	qp  uint32
	tid uint64
}

// transfer is one table answer in flight.
type transfer struct {
	key  transferKey
	d    *sm.Datagram // the request, for the answers' addressing
	segs []mad.SAMAD  // segment i+1 is segs[i]
	ctl  chan mad.RMPPHeader
}

// segments cuts the records into RMPP DATA segments based on the template
// header tmpl.
func segments(tmpl mad.SAMAD, a answer) []mad.SAMAD {
	stride := mad.RecordStride(a.size)
	payload := make([]byte, stride*len(a.records))
	for i, rec := range a.records {
		copy(payload[i*stride:], rec)
	}
	n := max(1, (len(payload)+mad.SADataSize-1)/mad.SADataSize)
	segs := make([]mad.SAMAD, n)
	for i := range n {
		b := make([]byte, mad.Size)
		copy(b, tmpl)
		seg := mad.SAMAD(b)
		h := mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeData, RRespTime: mad.RMPPNoRespTime,
			Flags: mad.RMPPFlagActive, SegmentNumber: uint32(i + 1)}
		last := len(payload) - i*mad.SADataSize // bytes from this segment on
		if i == 0 {
			h.Flags |= mad.RMPPFlagFirst
			// The whole payload, counting each segment's SA header, as
			// the Linux MAD layer counts it.
			h.Length = uint32(len(payload) + n*mad.SAHeaderSize)
		}
		if i == n-1 {
			h.Flags |= mad.RMPPFlagLast
			h.Length = uint32(mad.SAHeaderSize + last)
		}
		seg.SetRMPP(&h)
		copy(seg.Data(), payload[min(i*mad.SADataSize, len(payload)):])
		segs[i] = seg
	}
	return segs
}

// startTransfer sends a table answer by RMPP.
func (s *Server) startTransfer(r *request, tmpl mad.SAMAD, a answer) {
	k := transferKey{r.d.SLID, r.d.SQP, r.m.MAD().TransactionID()}
	addr := *r.d // the caller may reuse its Datagram once Handle returns
	addr.MAD = nil
	t := &transfer{key: k, d: &addr, segs: segments(tmpl, a), ctl: make(chan mad.RMPPHeader, 16)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if _, busy := s.transfers[k]; busy {
		// The requester sent its request again while we answer it.
		s.mu.Unlock()
		s.log.Debug("duplicate GetTable while its answer is in flight", "slid", k.lid, "tid", k.tid)
		return
	}
	if len(s.transfers) >= s.cfg.MaxTransfers {
		s.mu.Unlock()
		s.errs.Add(1)
		tmpl.MAD().SetStatus(mad.SAStatusNoResources)
		tmpl.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeData, RRespTime: mad.RMPPNoRespTime,
			Flags: mad.RMPPFlagActive | mad.RMPPFlagFirst | mad.RMPPFlagLast, SegmentNumber: 1, Length: mad.SAHeaderSize})
		s.send(r.d, tmpl)
		return
	}
	s.transfers[k] = t
	s.wg.Add(1)
	s.mu.Unlock()
	go s.run(t)
}

// rmppControl hands an ACK, STOP or ABORT to its transfer.
func (s *Server) rmppControl(d *sm.Datagram, m mad.SAMAD, h mad.RMPPHeader) {
	k := transferKey{d.SLID, d.SQP, m.MAD().TransactionID()}
	s.mu.Lock()
	t := s.transfers[k]
	s.mu.Unlock()
	if t == nil {
		s.dropped.Add(1)
		s.log.Debug("RMPP packet for no transfer", "slid", d.SLID, "tid", k.tid, "type", h.Type)
		return
	}
	select {
	case t.ctl <- h:
	default:
		s.dropped.Add(1)
	}
}

// run drives one transfer until the last segment is acknowledged, the
// receiver stops or aborts it, the retries run out or the server closes.
func (s *Server) run(t *transfer) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.transfers, t.key)
		s.mu.Unlock()
	}()
	n := uint32(len(t.segs))
	var acked, sent uint32 // last segment acknowledged, last sent
	window := uint32(1)    // the last segment the receiver takes
	sendWindow := func() {
		for sent < min(window, n) {
			sent++
			s.send(t.d, t.segs[sent-1])
		}
	}
	sendWindow()
	timer := time.NewTimer(s.cfg.RMPPTimeout)
	defer timer.Stop()
	retries := 0
	for {
		select {
		case <-s.done:
			return
		case h := <-t.ctl:
			switch h.Type {
			case mad.RMPPTypeAck:
				a, w := h.SegmentNumber, h.Length
				switch {
				case a > sent:
					s.abort(t, mad.RMPPStatusSegTooBig)
					return
				case w < a:
					s.abort(t, mad.RMPPStatusBadWindow)
					return
				}
				if a >= n {
					s.completed.Add(1)
					return
				}
				if a > acked {
					acked, retries = a, 0
				} else if a < sent {
					// No progress: the segments after a were lost.
					s.resent.Add(uint64(sent - a))
					sent = a
				}
				window = max(window, w)
				sendWindow()
				timer.Reset(s.cfg.RMPPTimeout)
			case mad.RMPPTypeStop, mad.RMPPTypeAbort:
				s.aborted.Add(1)
				s.log.Debug("RMPP transfer ended by the receiver", "slid", t.key.lid, "type", h.Type, "status", h.Status)
				return
			default:
				s.abort(t, mad.RMPPStatusBadType)
				return
			}
		case <-timer.C:
			retries++
			if retries > s.cfg.RMPPRetries {
				s.abort(t, mad.RMPPStatusTooManyRetries)
				return
			}
			s.resent.Add(uint64(sent - acked))
			sent = acked
			sendWindow()
			timer.Reset(s.cfg.RMPPTimeout)
		}
	}
}

// abort ends a transfer with an ABORT to the receiver.
func (s *Server) abort(t *transfer, status uint8) {
	s.aborted.Add(1)
	b := make([]byte, mad.Size)
	copy(b, t.segs[0][:mad.SADataOffset])
	m := mad.SAMAD(b)
	m.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeAbort, RRespTime: mad.RMPPNoRespTime,
		Flags: mad.RMPPFlagActive, Status: status})
	s.send(t.d, m)
	s.log.Debug("RMPP transfer aborted", "slid", t.key.lid, "tid", t.key.tid, "status", status)
}
