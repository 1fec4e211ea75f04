// Event subscriptions: Set(InformInfo) subscribes a port to a trap, the
// SA keeps the subscriptions as InformInfoRecords, and it sends each
// subscriber a Report(Notice) when the event happens: a port's GID in or
// out of service (traps 64 and 65, which Observe finds by comparing the
// SM's snapshots), a multicast group created or deleted (66 and 67, when
// the SA's own groups change), and every trap the SM receives (144, 128,
// 256 ..., which Attach forwards), or any notice handed to Report. A
// Report is sent again until the subscriber answers ReportResp, as
// OpenSM does.

package sa

import (
	"sync"
	"time"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// Generic trap numbers the SA reports (IBTA volume 1 section 14.2.5.1).
const (
	TrapGIDInService     = 64
	TrapGIDOutOfService  = 65
	TrapMcastGroupCreate = 66
	TrapMcastGroupDelete = 67
)

// informAll is the wildcard of an InformInfo's TrapNumber and Type, and
// (24 bits) of its ProducerType.
const (
	informAll         = 0xFFFF
	informAllProducer = 0xFFFFFF
)

// subscription is one InformInfo the SA holds, with where its reports go.
type subscription struct {
	rec  mad.InformInfoRecord
	lid  uint16 // the subscriber port's LID
	pkey uint16
}

// pendingReport is a Report waiting for its ReportResp.
type pendingReport struct {
	d     *sm.Datagram
	tries int
	timer *time.Timer
}

// informState is the Server's subscriptions and reports in flight.
type informState struct {
	mu                    sync.Mutex
	subs                  []*subscription
	enum                  uint16
	tid                   uint64
	pending               map[uint64]*pendingReport // by TID
	last                  map[uint64]uint16         // Observe: end port GUIDs -> LID of the last snapshot
	seen                  bool
	reports, resent, lost uint64
}

// InformStats counts the SA's reports.
type InformStats struct {
	Subscriptions int    // InformInfos held
	Reports       uint64 // Reports sent (first sends)
	Resent        uint64 // Reports sent again for want of a ReportResp
	Lost          uint64 // Reports given up after the retries
}

// InformStats returns the subscription and report counters.
func (s *Server) InformStats() InformStats {
	s.inf.mu.Lock()
	defer s.inf.mu.Unlock()
	return InformStats{Subscriptions: len(s.inf.subs), Reports: s.inf.reports, Resent: s.inf.resent, Lost: s.inf.lost}
}

// informInfo answers Set(InformInfo): subscribe, or unsubscribe the same
// InformInfo (GID, LID range, trap, type, producer and QPN equal).
func (s *Server) informInfo(r *request) answer {
	if r.method != mad.MethodSet {
		return fail(mad.StatusMethodAttrInvalid)
	}
	ii, err := mad.ParseInformInfo(r.data)
	if err != nil {
		return fail(mad.SAStatusReqInvalid)
	}
	port := r.subnet.PortByLID(r.d.SLID)
	if port == nil {
		return fail(mad.SAStatusReqInvalid)
	}
	gid := mad.MakeGID(r.subnet.Prefix, port.GUID)
	same := func(x *subscription) bool {
		a, b := x.rec.Info, ii
		a.Subscribe, b.Subscribe = false, false
		a.RespTimeValue, b.RespTimeValue = 0, 0
		return x.rec.SubscriberGID == gid && a == b
	}
	a := answer{size: mad.InformInfoSize}
	s.inf.mu.Lock()
	defer s.inf.mu.Unlock()
	i := -1
	for j, x := range s.inf.subs {
		if same(x) {
			i = j
			break
		}
	}
	switch {
	case ii.Subscribe && i < 0:
		s.inf.enum++
		s.inf.subs = append(s.inf.subs, &subscription{rec: mad.InformInfoRecord{SubscriberGID: gid, Enum: s.inf.enum, Info: ii},
			lid: port.LID(), pkey: r.d.PKey})
	case ii.Subscribe:
		s.inf.subs[i].rec.Info = ii // again: the newest QPN and response time
	case i < 0:
		return fail(mad.SAStatusReqInvalid) // nothing to unsubscribe
	default:
		s.inf.subs = append(s.inf.subs[:i], s.inf.subs[i+1:]...)
	}
	a.records = [][]byte{encode(&ii, mad.InformInfoSize)}
	return a
}

// informInfoRecords answers Get and GetTable(InformInfoRecord).
func (s *Server) informInfoRecords(r *request) answer {
	if r.method != mad.MethodGet && r.method != mad.MethodGetTable {
		return fail(mad.StatusMethodAttrInvalid)
	}
	s.inf.mu.Lock()
	var all [][]byte
	for _, x := range s.inf.subs {
		all = append(all, encode(&x.rec, mad.InformInfoRecordSize))
	}
	s.inf.mu.Unlock()
	return match(r, mad.InformInfoRecordComponents, mad.InformInfoRecordSize, all)
}

// wants reports whether subscription x asks for notice n about gid (zero:
// no GID) from lid.
func (x *subscription) wants(n *mad.Notice, gid mad.GID, lid uint16) bool {
	ii := &x.rec.Info
	if ii.IsGeneric != n.IsGeneric {
		return false
	}
	if ii.TrapNumber != informAll && ii.TrapNumber != n.TrapNumber {
		return false
	}
	if ii.IsGeneric && ii.Type != informAll && ii.Type != uint16(n.Type) {
		return false
	}
	if ii.ProducerType != informAllProducer && ii.ProducerType != n.ProducerType {
		return false
	}
	if ii.GID != (mad.GID{}) {
		return ii.GID == gid
	}
	if ii.LIDRangeBegin == informAll || lid == 0 {
		return true
	}
	end := ii.LIDRangeEnd
	if end == 0 {
		end = ii.LIDRangeBegin
	}
	return lid >= ii.LIDRangeBegin && lid <= end
}

// Report sends notice n to every subscriber whose InformInfo asks for
// it. gid and lid name the port the notice is about (for the subscriptions
// by GID or LID range; zero: none). A zero IssuerLID becomes the SM's
// (the SA's own notices), and a zero IssuerGID the GID of the issuer's
// port. It returns how many Reports it sent.
func (s *Server) Report(n mad.Notice, gid mad.GID, lid uint16) int {
	sn := s.src.Subnet()
	if sn == nil {
		return 0
	}
	if n.IssuerLID == 0 {
		n.IssuerLID = sn.SMLID // the SA's own notice
	}
	if p := sn.PortByLID(n.IssuerLID); p != nil && n.IssuerGID == [16]byte{} {
		n.IssuerGID = mad.MakeGID(sn.Prefix, p.GUID)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0
	}
	s.inf.mu.Lock()
	if s.inf.pending == nil {
		s.inf.pending = map[uint64]*pendingReport{}
	}
	var out []*sm.Datagram
	for _, x := range s.inf.subs {
		if !x.wants(&n, gid, lid) {
			continue
		}
		s.inf.tid++
		tid := s.inf.tid | 0x5A<<56 // the SA's own TIDs, apart from requesters'
		b := make([]byte, mad.Size)
		m, _ := mad.NewSAMAD(b, mad.MethodReport, mad.SAAttrNotice, tid, &mad.SAHeader{})
		n.Encode(m.Data()[:mad.NoticeFullSize])
		d := &sm.Datagram{SLID: sn.SMLID, DLID: x.lid, SQP: mad.GSIQPN, DQP: x.rec.Info.QPN, PKey: x.pkey,
			QKey: mad.GSIQKey, MAD: b}
		pr := &pendingReport{d: d}
		s.inf.pending[tid] = pr
		s.inf.reports++
		out = append(out, s.armReport(tid, pr))
	}
	s.inf.mu.Unlock()
	for _, d := range out {
		s.sendDatagram(d)
	}
	return len(out)
}

// armReport arms a Report's retry and returns a copy to send once
// s.inf.mu is released.
func (s *Server) armReport(tid uint64, pr *pendingReport) *sm.Datagram {
	d := *pr.d
	d.MAD = append([]byte(nil), pr.d.MAD...)
	pr.timer = time.AfterFunc(s.cfg.RMPPTimeout, func() { s.reportTimeout(tid) })
	return &d
}

func (s *Server) sendDatagram(d *sm.Datagram) {
	if err := s.t.Send(d); err != nil {
		s.log.Debug("report send failed", "dlid", d.DLID, "err", err)
	}
}

func (s *Server) reportTimeout(tid uint64) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	s.inf.mu.Lock()
	pr := s.inf.pending[tid]
	if pr == nil {
		s.inf.mu.Unlock()
		return
	}
	if closed || pr.tries >= s.cfg.RMPPRetries {
		delete(s.inf.pending, tid)
		s.inf.lost++
		s.inf.mu.Unlock()
		return
	}
	pr.tries++
	s.inf.resent++
	d := s.armReport(tid, pr)
	s.inf.mu.Unlock()
	s.sendDatagram(d)
}

// reportResp takes a subscriber's ReportResp.
func (s *Server) reportResp(m mad.SAMAD) {
	s.inf.mu.Lock()
	defer s.inf.mu.Unlock()
	if pr := s.inf.pending[m.MAD().TransactionID()]; pr != nil {
		pr.timer.Stop()
		delete(s.inf.pending, m.MAD().TransactionID())
		return
	}
	s.dropped.Add(1)
}

// stopReports ends the Reports in flight (Close).
func (s *Server) stopReports() {
	s.inf.mu.Lock()
	defer s.inf.mu.Unlock()
	for tid, pr := range s.inf.pending {
		pr.timer.Stop()
		delete(s.inf.pending, tid)
	}
}

// gidNotice is the notice of traps 64 to 67: the GID in its data details.
func gidNotice(trap uint16, gid mad.GID) mad.Notice {
	n := mad.Notice{IsGeneric: true, Type: mad.NoticeTypeInformational, ProducerType: mad.NodeTypeClassManager,
		TrapNumber: trap}
	copy(n.DataDetails[6:22], gid[:])
	return n
}

// Observe compares snapshot sn with the one it saw last and reports the
// CA ports and switch ports 0 that came into service (trap 64) or went
// out of it (65). The SM's owner calls it after each sweep (Attach's SA
// watches the Manager's snapshots and calls it itself); the first call
// only takes note.
func (s *Server) Observe(sn *sm.Subnet) {
	if sn == nil {
		return
	}
	now := map[uint64]uint16{}
	for _, p := range endPorts(sn) {
		if p.LID() != 0 {
			now[p.GUID] = p.LID()
		}
	}
	s.inf.mu.Lock()
	last, seen := s.inf.last, s.inf.seen
	s.inf.last, s.inf.seen = now, true
	s.inf.mu.Unlock()
	if !seen {
		return
	}
	for g, lid := range now {
		if _, ok := last[g]; !ok {
			gid := mad.MakeGID(sn.Prefix, g)
			s.Report(gidNotice(TrapGIDInService, gid), gid, lid)
		}
	}
	for g, lid := range last {
		if _, ok := now[g]; !ok {
			gid := mad.MakeGID(sn.Prefix, g)
			s.Report(gidNotice(TrapGIDOutOfService, gid), gid, lid)
		}
	}
}

// groupSet returns the MGIDs of the SA's multicast groups.
func (s *Server) groupSet() map[mad.GID]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[mad.GID]bool, len(s.groups))
	for g := range s.groups {
		out[g] = true
	}
	return out
}

// reportGroups reports the groups created (66) and deleted (67) between
// two group sets.
func (s *Server) reportGroups(before, after map[mad.GID]bool) {
	for g := range after {
		if !before[g] {
			s.Report(gidNotice(TrapMcastGroupCreate, g), g, 0)
		}
	}
	for g := range before {
		if !after[g] {
			s.Report(gidNotice(TrapMcastGroupDelete, g), g, 0)
		}
	}
}

// watchEvery is how often an attached SA looks for a new snapshot.
const watchEvery = 50 * time.Millisecond

// watch calls Observe with each new snapshot of the Source until Close.
func (s *Server) watch() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		var last *sm.Subnet
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			if sn := s.src.Subnet(); sn != nil && sn != last {
				last = sn
				s.Observe(sn)
			}
		}
	}()
}

// pendingTIDs lists the Reports waiting for a ReportResp.
func (x *informState) pendingTIDs() []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []uint64
	for tid := range x.pending {
		out = append(out, tid)
	}
	return out
}

// forwardTraps returns the sm.Config.Notice of an attached SA: every trap
// the SM receives goes to the subscribers, about its issuer's port, as
// OpenSM forwards them; next, if set, is called too.
func forwardTraps(srv interface{ Load() *Server }, next func(mad.Notice)) func(mad.Notice) {
	return func(n mad.Notice) {
		if s := srv.Load(); s != nil {
			var gid mad.GID
			if sn := s.src.Subnet(); sn != nil {
				if p := sn.PortByLID(n.IssuerLID); p != nil {
					gid = mad.MakeGID(sn.Prefix, p.GUID)
				}
			}
			s.Report(n, gid, n.IssuerLID)
		}
		if next != nil {
			next(n)
		}
	}
}
