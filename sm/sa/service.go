// ServiceRecords: Set registers (or renews) a service for its lease,
// Delete removes the matching registrations, Get and GetTable find them;
// expired registrations go at the next request.

package sa

import (
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// service is one registration.
type service struct {
	rec     mad.ServiceRecord
	expires time.Time // zero: never
}

func (v *service) key() (uint64, mad.GID, uint16) { return v.rec.ID, v.rec.GID, v.rec.PKey }

// encode returns the record with the lease left, in seconds.
func (v *service) encode(now time.Time) []byte {
	rec := v.rec
	if !v.expires.IsZero() {
		rec.Lease = uint32((v.expires.Sub(now) + time.Second - 1) / time.Second)
	}
	b := make([]byte, mad.ServiceRecordSize)
	rec.Encode(b)
	return b
}

func (s *Server) serviceRecord(r *request) answer {
	q, _ := mad.ParseServiceRecord(r.data)
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.services[:0]
	for _, v := range s.services {
		if v.expires.IsZero() || now.Before(v.expires) {
			kept = append(kept, v)
		}
	}
	clear(s.services[len(kept):])
	s.services = kept

	qb := r.data[:mad.ServiceRecordSize]
	a := answer{size: mad.ServiceRecordSize}
	switch r.method {
	case mad.MethodSet:
		if r.mask&mad.ServiceRecCompID == 0 || r.mask&mad.ServiceRecCompGID == 0 {
			return fail(mad.SAStatusReqInsufficientComps)
		}
		if q.GID.Prefix() != r.subnet.Prefix || r.subnet.PortByGUID(q.GID.GUID()) == nil {
			return fail(mad.SAStatusReqInvalidGID)
		}
		if r.mask&mad.ServiceRecCompPKey == 0 {
			q.PKey = 0xffff
		}
		v := &service{rec: q}
		if r.mask&mad.ServiceRecCompLease == 0 {
			v.rec.Lease = mad.ServiceLeaseInfinite
		}
		if v.rec.Lease != mad.ServiceLeaseInfinite {
			v.expires = now.Add(time.Duration(v.rec.Lease) * time.Second)
		}
		replaced := false
		for i, old := range s.services {
			a1, b1, c1 := old.key()
			if a2, b2, c2 := v.key(); a1 == a2 && b1 == b2 && c1 == c2 {
				s.services[i], replaced = v, true
				break
			}
		}
		if !replaced {
			s.services = append(s.services, v)
		}
		a.records = [][]byte{v.encode(now)}
		return a
	case mad.MethodDelete:
		kept := s.services[:0]
		for _, v := range s.services {
			b := v.encode(now)
			if mad.MatchComponents(mad.ServiceRecordComponents, r.mask&^mad.ServiceRecCompLease, qb, b) {
				a.records = append(a.records, b)
				continue
			}
			kept = append(kept, v)
		}
		clear(s.services[len(kept):])
		s.services = kept
		if len(a.records) > 1 {
			a.records = a.records[:1] // the answer shows the first one removed
		}
		return a
	}
	for _, v := range s.services {
		b := v.encode(now)
		if mad.MatchComponents(mad.ServiceRecordComponents, r.mask&^mad.ServiceRecCompLease, qb, b) {
			a.records = append(a.records, b)
		}
	}
	return a
}
