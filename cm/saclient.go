// The SA client: PathRecord queries to the subnet administrator of an
// InfiniBand port, sent on the CM's own GSI QP (QP1 carries every GMP
// class of the port, as the Linux MAD layer multiplexes ib_cm and ib_sa on
// one QP), with retransmission and RMPP reassembly of table answers.

package cm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// Errors of the SA client.
var (
	// ErrNoSA: the SA did not answer (no SM, the SM's LID unreachable, or
	// every retransmission lost), or the port has none (a RoCE port, or
	// an InfiniBand port without an SM LID).
	ErrNoSA = errors.New("cm: subnet administrator unreachable")
	// ErrNoPath: the SA answered that it has no path matching the query
	// (ERR_NO_RECORDS), or answered with another error status (SAError).
	ErrNoPath = errors.New("cm: no path record")
)

// SAError is an SA answer with an error status; it wraps ErrNoPath.
type SAError struct {
	Status uint16
}

func (e *SAError) Error() string {
	return fmt.Sprintf("cm: SA status %s", mad.SAStatusName(e.Status))
}

// Unwrap returns ErrNoPath.
func (e *SAError) Unwrap() error { return ErrNoPath }

// Defaults of the SA client (librdmacm's route resolution timeout is the
// caller's; these are per attempt).
const (
	DefaultSATimeout = 500 * time.Millisecond
	DefaultSARetries = 3
)

// PathQuery selects PathRecords: the components that are not zero must
// match (SGID/DGID, SLID/DLID, PKey; NumbPath bounds a GetTable's answer).
// Timeout and Retries bound each attempt and the retransmissions (zero:
// DefaultSATimeout, DefaultSARetries).
type PathQuery struct {
	SGID, DGID wire.GID
	SLID, DLID uint16
	PKey       uint16
	NumbPath   uint8
	Timeout    time.Duration
	Retries    int
}

// record is the query's PathRecord and component mask.
func (q *PathQuery) record() (mad.PathRecord, uint64) {
	r := mad.PathRecord{SGID: mad.GID(q.SGID), DGID: mad.GID(q.DGID), SLID: q.SLID, DLID: q.DLID, PKey: q.PKey,
		NumbPath: q.NumbPath, Reversible: true}
	mask := uint64(mad.PathRecCompReversible)
	if q.SGID != (wire.GID{}) {
		mask |= mad.PathRecCompSGID
	}
	if q.DGID != (wire.GID{}) {
		mask |= mad.PathRecCompDGID
	}
	if q.SLID != 0 {
		mask |= mad.PathRecCompSLID
	}
	if q.DLID != 0 {
		mask |= mad.PathRecCompDLID
	}
	if q.PKey != 0 {
		mask |= mad.PathRecCompPKey
	}
	if q.NumbPath != 0 {
		mask |= mad.PathRecCompNumbPath
	}
	return r, mask
}

// saWait is one SA request waiting for its answer: the MADs of its TID.
type saWait struct {
	ch chan []byte
}

// PathRecord asks the port's SA for one path (SubnAdmGet(PathRecord)), as
// rdma_resolve_route does on InfiniBand.
func (m *Manager) PathRecord(ctx context.Context, q *PathQuery) (mad.PathRecord, error) {
	recs, err := m.saQuery(ctx, mad.MethodGet, q)
	if err != nil {
		return mad.PathRecord{}, err
	}
	return recs[0], nil
}

// PathRecords asks the port's SA for every path matching q
// (SubnAdmGetTable(PathRecord)); the answer may come in several RMPP
// segments, reassembled here.
func (m *Manager) PathRecords(ctx context.Context, q *PathQuery) ([]mad.PathRecord, error) {
	return m.saQuery(ctx, mad.MethodGetTable, q)
}

// saPath is the path to the port's SA: the SM's LID and SL.
func (m *Manager) saPath() (Path, error) {
	if !m.ib {
		return Path{}, errf(ErrNoSA, "%s is not an InfiniBand port", m.dev.Name())
	}
	pa, err := m.dev.QueryPort(1)
	if err != nil {
		return Path{}, errf(ErrNoSA, "%v", err)
	}
	if pa.SMLID == 0 || pa.State != verbs.PortActive {
		return Path{}, errf(ErrNoSA, "%s: port %v, SM LID %d", m.dev.Name(), pa.State, pa.SMLID)
	}
	return Path{DLID: pa.SMLID, SL: pa.SMSL, SLID: pa.LID}, nil
}

func (m *Manager) saQuery(ctx context.Context, method mad.Method, q *PathQuery) ([]mad.PathRecord, error) {
	to, err := m.saPath()
	if err != nil {
		return nil, err
	}
	timeout, retries := q.Timeout, q.Retries
	if timeout <= 0 {
		timeout = DefaultSATimeout
	}
	if retries <= 0 {
		retries = DefaultSARetries
	}
	if dl, ok := ctx.Deadline(); ok {
		// Every try within the caller's time, so that running out of it
		// is reported as the SA's silence.
		if per := time.Until(dl) * 9 / 10 / time.Duration(retries+1); per < timeout {
			timeout = max(per, time.Millisecond)
		}
	}
	rec, mask := q.record()
	w := &saWait{ch: make(chan []byte, 64)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errf(ErrClosed, "manager")
	}
	tid := m.nextTIDLocked()
	m.sa[tid] = w
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.sa, tid)
		m.mu.Unlock()
	}()
	var req [mad.Size]byte
	s, _ := mad.NewSAMAD(req[:], method, mad.SAAttrPathRecord, tid, &mad.SAHeader{ComponentMask: mask})
	rec.Encode(s.Data())
	var tab table
	for try := 0; try <= retries; try++ {
		if tab.expect <= 1 {
			m.send(to, req[:])
		}
		timer := time.NewTimer(timeout)
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, saSilent(ctx, to.DLID, try+1)
			case <-timer.C:
				break wait
			case b := <-w.ch:
				recs, done, err := m.saAnswer(to, method, &tab, mad.SAMAD(b))
				if done || err != nil {
					timer.Stop()
					return recs, err
				}
				timer.Reset(timeout) // a table segment: the transfer goes on
			}
		}
	}
	return nil, errf(ErrNoSA, "no answer from the SA at LID %d after %d tries of %v", to.DLID, retries+1, timeout)
}

// saSilent is the error of an SA query whose context ended while it waited
// for an answer: past the deadline, the SA was silent for all the time the
// caller gave (the tries share it), which is ErrNoSA as well as the
// context's error; a cancelled query is only the context's.
func saSilent(ctx context.Context, dlid uint16, sent int) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	return fmt.Errorf("%w: no answer from the SA at LID %d before the deadline (%d tries sent): %w", ErrNoSA, dlid, sent, ctx.Err())
}

// table is the reassembly of an RMPP table answer: the next segment
// expected, the window we opened, the payload so far and the record size.
type table struct {
	expect, window uint32
	payload        []byte
	offset         int
}

// rmppWindow is how many segments the client takes before acknowledging.
const rmppWindow = 16

// saAnswer takes one answer MAD: a Get's response, or a segment of a
// table's (acknowledged as the Linux MAD layer does, in order only).
func (m *Manager) saAnswer(to Path, method mad.Method, t *table, s mad.SAMAD) ([]mad.PathRecord, bool, error) {
	st := s.MAD().Status()
	if method == mad.MethodGet {
		if s.MAD().Method() != mad.MethodGetResp {
			return nil, false, nil
		}
		if st != mad.StatusOK {
			return nil, true, &SAError{Status: st}
		}
		r, err := mad.ParsePathRecord(s.Data())
		if err != nil {
			return nil, true, errf(ErrNoPath, "%v", err)
		}
		return []mad.PathRecord{r}, true, nil
	}
	if s.MAD().Method() != mad.MethodGetTableResp {
		return nil, false, nil
	}
	h := s.RMPP()
	if !h.Active() {
		// A single-MAD error answer without RMPP.
		if st != mad.StatusOK {
			return nil, true, &SAError{Status: st}
		}
		return nil, false, nil
	}
	if h.Type != mad.RMPPTypeData {
		if h.Type == mad.RMPPTypeStop || h.Type == mad.RMPPTypeAbort {
			return nil, true, errf(ErrNoPath, "the SA ended the transfer (RMPP %v, status %d)", h.Type, h.Status)
		}
		return nil, false, nil
	}
	if t.expect == 0 {
		t.expect, t.window = 1, 1
	}
	if h.SegmentNumber != t.expect {
		m.saAck(to, s, t.expect-1, t.window) // out of order or a repeat
		return nil, false, nil
	}
	if t.expect == 1 {
		if h.Flags&mad.RMPPFlagFirst == 0 {
			return nil, false, nil
		}
		t.offset = int(s.Header().AttributeOffset) * 8
	}
	last := h.Flags&mad.RMPPFlagLast != 0
	data := s.Data()
	if last {
		n := int(h.Length) - mad.SAHeaderSize
		if n < 0 || n > len(data) {
			return nil, true, errf(ErrNoPath, "last RMPP segment's payload length %d", h.Length)
		}
		data = data[:n]
	}
	t.payload = append(t.payload, data...)
	if !last {
		if t.expect == t.window || t.expect == 1 {
			t.window = t.expect + rmppWindow
			m.saAck(to, s, t.expect, t.window)
		}
		t.expect++
		return nil, false, nil
	}
	m.saAck(to, s, t.expect, t.expect)
	if st != mad.StatusOK {
		return nil, true, &SAError{Status: st}
	}
	if t.offset < mad.PathRecordSize {
		if len(t.payload) == 0 {
			return nil, true, &SAError{Status: mad.SAStatusNoRecords}
		}
		return nil, true, errf(ErrNoPath, "table's attribute offset %d", t.offset)
	}
	var recs []mad.PathRecord
	for i := 0; i+t.offset <= len(t.payload); i += t.offset {
		r, err := mad.ParsePathRecord(t.payload[i:])
		if err != nil {
			return nil, true, errf(ErrNoPath, "%v", err)
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return nil, true, &SAError{Status: mad.SAStatusNoRecords}
	}
	return recs, true, nil
}

// saAck acknowledges a table's segments through seg, opening the window
// to window (an RMPP ACK: the request's method, the answer's header).
func (m *Manager) saAck(to Path, tmpl mad.SAMAD, seg, window uint32) {
	var b [mad.Size]byte
	copy(b[:], tmpl[:mad.SADataOffset])
	a := mad.SAMAD(b[:])
	a.MAD().SetMethod(mad.MethodGetTable)
	a.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeAck, RRespTime: mad.RMPPNoRespTime,
		Flags: mad.RMPPFlagActive, SegmentNumber: seg, Length: window})
	m.send(to, b[:])
}

// onSA hands an SA answer to the query waiting for its TID, and reports
// whether one was waiting.
func (m *Manager) onSA(msg mad.MAD) bool {
	m.mu.Lock()
	w := m.sa[msg.TransactionID()]
	m.mu.Unlock()
	if w == nil || len(msg) < mad.Size {
		return false
	}
	select {
	case w.ch <- msg[:mad.Size]:
	default:
		m.stats.Dropped.Add(1)
	}
	return true
}

// SendGMP sends one MAD (mad.Size bytes, any management class) to the GSI
// QP at the end of path to, with the GSI Q_Key: the answer to a MAD that
// Options.GMP received, for example.
func (m *Manager) SendGMP(to Path, b []byte) error {
	if len(b) != mad.Size {
		return errf(ErrInvalid, "a MAD of %d bytes (want %d)", len(b), mad.Size)
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return errf(ErrClosed, "manager")
	}
	m.send(to, b)
	return nil
}
