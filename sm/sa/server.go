// Package sa is softrdma's subnet administrator: it answers the SA MADs
// (management class SubnAdm on QP1) that the subnet manager hands it, from
// the SM's latest [sm.Subnet] snapshot.
//
// It answers Get and GetTable for NodeRecord, PortInfoRecord,
// SwitchInfoRecord, LinkRecord, PathRecord, SLtoVLMappingTableRecord,
// VLArbitrationTableRecord, P_KeyTableRecord, LinearForwardingTableRecord,
// MulticastForwardingTableRecord, GuidInfoRecord and SMInfoRecord,
// matching the query record's components its ComponentMask selects; keeps
// ServiceRecords (Set registers with a lease, Delete removes), multicast
// groups (MCMemberRecord Set joins, creating the group and its MLID,
// Delete leaves) and event subscriptions (Set(InformInfo), listed as
// InformInfoRecords, reported to by Report(Notice)); and answers
// ClassPortInfo. A table answer (GetTableResp) travels
// by RMPP, in segments of 200 bytes under the receiver's window with
// retransmission on timeout, as OpenSM's SA (through the Linux MAD layer)
// sends it, so that saquery and librdmacm read it. Errors carry the SA
// status codes (ERR_NO_RECORDS, ERR_REQ_INVALID, ...).
//
// The SM calls [Server.Handle] for every SA MAD that arrives at its port
// (sm.Config.GMP); answers leave through the same [sm.Transport]'s Send.
package sa

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// Source gives the subnet snapshot to answer from: the SM's latest, nil
// before its first sweep completes. (*sm.Manager) satisfies it.
type Source interface{ Subnet() *sm.Subnet }

// Config tunes a Server. The zero value is usable.
type Config struct {
	// Multicast, if not nil, is called when a multicast group's membership
	// changes, with the group's MLID and its member ports (none when the
	// group is gone), so that the SM can program the switches' multicast
	// forwarding tables. It is called from Handle, outside the Server's
	// locks, and must not block.
	Multicast func(mlid uint16, members []*sm.Port)
	// RMPPTimeout is how long a table transfer waits for an ACK before it
	// sends the window again (default 200 ms); RMPPRetries how many times
	// (default 8) before it aborts.
	RMPPTimeout time.Duration
	RMPPRetries int
	// MaxTransfers bounds the table transfers in flight (default 256); a
	// GetTable beyond it is answered ERR_NO_RESOURCES.
	MaxTransfers int
	// PacketLifeTime is the PathRecord and MCMemberRecord packet lifetime
	// (default 0x12, OpenSM's).
	PacketLifeTime uint8
	// QoSPolicy, if not nil, gives PathRecords (and the paths of
	// MultiPathRecords) their SL: by the query's service ID and QoS
	// class, the path's P_Key and its end ports' GUIDs (OpenSM's
	// qos-policy.conf match rules and qos-ulps). A query that asks for
	// another SL gets no path.
	QoSPolicy *policy.QoSPolicy
	// Now gives the time for service leases (default time.Now).
	Now func() time.Time
	// Logger receives the server's messages (default slog.Default()).
	// Nothing per packet is logged above Debug.
	Logger *slog.Logger
}

// Errors New wraps.
var (
	// ErrConfig means a Config field is invalid.
	ErrConfig = errors.New("sa: invalid configuration")
)

// Stats counts what a Server did.
type Stats struct {
	Requests  uint64 // SA requests answered
	Dropped   uint64 // MADs dropped: malformed, responses, stray RMPP
	Errors    uint64 // answers with a nonzero status
	Transfers uint64 // table transfers completed (last segment acknowledged)
	Aborted   uint64 // table transfers given up, stopped or aborted
	Resent    uint64 // segments sent again after a timeout or a lost one
}

// Server is a subnet administrator. Handle is safe for concurrent use.
type Server struct {
	src Source
	t   sm.Transport
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	closed    bool
	transfers map[transferKey]*transfer
	groups    map[mad.GID]*group
	services  []*service
	mgidSeq   uint64

	done chan struct{}
	wg   sync.WaitGroup

	requests, dropped, errs, completed, aborted, resent atomic.Uint64

	inf informState // InformInfo subscriptions and Reports (inform.go)
}

// New returns a Server answering from src's snapshots through t.
func New(src Source, t sm.Transport, cfg Config) (*Server, error) {
	if src == nil || t == nil {
		return nil, fmt.Errorf("%w: nil Source or Transport", ErrConfig)
	}
	if cfg.RMPPTimeout < 0 || cfg.RMPPRetries < 0 || cfg.MaxTransfers < 0 || cfg.PacketLifeTime > 0x3f {
		return nil, fmt.Errorf("%w: %+v", ErrConfig, cfg)
	}
	if cfg.RMPPTimeout == 0 {
		cfg.RMPPTimeout = 200 * time.Millisecond
	}
	if cfg.RMPPRetries == 0 {
		cfg.RMPPRetries = 8
	}
	if cfg.MaxTransfers == 0 {
		cfg.MaxTransfers = 256
	}
	if cfg.PacketLifeTime == 0 {
		cfg.PacketLifeTime = 0x12
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{src: src, t: t, cfg: cfg, log: log.With("component", "sa"),
		transfers: map[transferKey]*transfer{}, groups: map[mad.GID]*group{},
		done: make(chan struct{})}, nil
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Requests: s.requests.Load(), Dropped: s.dropped.Load(), Errors: s.errs.Load(),
		Transfers: s.completed.Load(), Aborted: s.aborted.Load(), Resent: s.resent.Load()}
}

// Close stops the table transfers in flight and waits for them; Handle
// drops what arrives afterwards. It does not close the Transport.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.stopReports()
	s.wg.Wait()
	return nil
}

// request is one SA request being answered.
type request struct {
	d      *sm.Datagram
	m      mad.SAMAD
	method mad.Method
	attr   mad.AttributeID
	mask   uint64
	data   []byte // the query record
	subnet *sm.Subnet
}

// answer is what a request gets: a status and records (all of one size).
type answer struct {
	status  uint16
	records [][]byte
	size    int // record size, for AttributeOffset
	// notify lists multicast changes to report once the locks are off.
	notify []mcastChange
}

func fail(status uint16) answer { return answer{status: status} }

// Handle takes one MAD that arrived at the SM's port for the SA: a request
// it answers, or an ACK, STOP or ABORT of a table transfer in flight. It
// does not block on the network beyond the Transport's Send.
func (s *Server) Handle(d *sm.Datagram) {
	if d == nil {
		s.dropped.Add(1)
		return
	}
	m, err := mad.ParseSA(d.MAD)
	if err != nil {
		s.dropped.Add(1)
		s.log.Debug("dropped a MAD", "slid", d.SLID, "err", err)
		return
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.dropped.Add(1)
		return
	}
	rh := m.RMPP()
	if rh.Active() && rh.Type != mad.RMPPTypeData {
		s.rmppControl(d, m, rh)
		return
	}
	method := m.MAD().Method()
	if method == mad.MethodReportResp {
		s.reportResp(m)
		return
	}
	if method.IsResponse() {
		s.dropped.Add(1)
		s.log.Debug("dropped a response", "slid", d.SLID, "method", mad.SAMethodName(method))
		return
	}
	r := &request{d: d, m: m, method: method, attr: m.MAD().AttributeID(), mask: m.Header().ComponentMask,
		data: m.Data()}
	s.requests.Add(1)
	var a answer
	switch {
	case m.MAD().ClassVersion() != mad.SAClassVersion:
		a = fail(mad.StatusBadVersion)
	case rh.Active() && rh.Flags&(mad.RMPPFlagFirst|mad.RMPPFlagLast) != mad.RMPPFlagFirst|mad.RMPPFlagLast:
		// A request in several segments: none of the records this SA
		// takes needs one.
		a = fail(mad.SAStatusReqInvalid)
	default:
		r.subnet = s.src.Subnet()
		var before map[mad.GID]bool
		if r.attr == mad.SAAttrMCMemberRecord && r.subnet != nil {
			before = s.groupSet()
		}
		a = s.dispatch(r)
		if before != nil {
			defer s.reportGroups(before, s.groupSet())
		}
	}
	s.respond(r, a)
	for _, c := range a.notify {
		if s.cfg.Multicast != nil {
			s.cfg.Multicast(c.mlid, c.members)
		}
	}
}

// dispatch answers a request by method and attribute.
func (s *Server) dispatch(r *request) answer {
	switch r.method {
	case mad.MethodGet, mad.MethodGetTable, mad.MethodSet, mad.MethodDelete, mad.MethodGetMulti:
	default:
		return fail(mad.StatusMethodUnsupported)
	}
	if (r.method == mad.MethodGetMulti) != (r.attr == mad.SAAttrMultiPathRecord) {
		return fail(mad.StatusMethodAttrInvalid) // GetMulti is for MultiPathRecord alone
	}
	if r.attr == mad.AttrClassPortInfo {
		if r.method != mad.MethodGet {
			return fail(mad.StatusMethodAttrInvalid)
		}
		return s.classPortInfo()
	}
	if r.subnet == nil {
		return fail(mad.StatusBusy) // no sweep has completed
	}
	switch r.attr {
	case mad.SAAttrServiceRecord:
		return s.serviceRecord(r)
	case mad.SAAttrMCMemberRecord:
		return s.mcMemberRecord(r)
	case mad.SAAttrInformInfo:
		return s.informInfo(r)
	case mad.SAAttrInformInfoRecord:
		return s.informInfoRecords(r)
	}
	if r.attr == mad.SAAttrMultiPathRecord {
		return s.multiPathRecords(r)
	}
	if r.method != mad.MethodGet && r.method != mad.MethodGetTable {
		return fail(mad.StatusMethodAttrInvalid)
	}
	switch r.attr {
	case mad.SAAttrNodeRecord:
		return match(r, mad.NodeRecordComponents, mad.NodeRecordSize, nodeRecords(r.subnet))
	case mad.SAAttrPortInfoRecord:
		// The M_Key goes only to a requester that knows the SM_Key, as
		// OpenSM does it; nor may others search by it.
		trusted := r.m.Header().SMKey == r.subnet.SMKey
		if !trusted {
			r.mask &^= mad.PortInfoRecCompMKey
		}
		return match(r, mad.PortInfoRecordComponents, mad.PortInfoRecordSize, portInfoRecords(r.subnet, trusted))
	case mad.SAAttrSwitchInfoRecord:
		return match(r, mad.SwitchInfoRecordComponents, mad.SwitchInfoRecordSize, switchInfoRecords(r.subnet))
	case mad.SAAttrLinkRecord:
		return match(r, mad.LinkRecordComponents, mad.LinkRecordSize, linkRecords(r.subnet))
	case mad.SAAttrPathRecord:
		return s.pathRecords(r)
	}
	if a, ok := s.tableRecord(r); ok {
		return a
	}
	return fail(mad.StatusMethodAttrInvalid)
}

// match keeps the records that match the query on the masked components.
func match(r *request, comps []mad.Component, size int, all [][]byte) answer {
	a := answer{size: size}
	for _, rec := range all {
		if mad.MatchComponents(comps, r.mask, r.data[:size], rec) {
			a.records = append(a.records, rec)
		}
	}
	return a
}

func (s *Server) classPortInfo() answer {
	// As OpenSM fills it: no redirection (QP1 and the GSI Q_Key named
	// anyway), the capabilities this SA has.
	c := mad.ClassPortInfo{BaseVersion: mad.BaseVersion, ClassVersion: mad.SAClassVersion,
		CapabilityMask: s.capabilities(), RespTimeValue: 0x12, RedirectQP: mad.GSIQPN, RedirectQKey: mad.GSIQKey,
		TrapQKey: mad.GSIQKey}
	b := make([]byte, mad.ClassPortInfoSize)
	c.Encode(b)
	return answer{records: [][]byte{b}, size: mad.ClassPortInfoSize}
}

// respond sends the answer: GetResp (or SetResp/DeleteResp) with one
// record or a status, or a GetTableResp by RMPP.
func (s *Server) respond(r *request, a answer) {
	multi := r.method == mad.MethodGetTable || r.method == mad.MethodGetMulti
	if a.status == mad.StatusOK && !multi {
		switch len(a.records) {
		case 0:
			a.status = mad.SAStatusNoRecords
		case 1:
		default:
			a.status = mad.SAStatusTooManyRecords
		}
	}
	if a.status != mad.StatusOK {
		s.errs.Add(1)
		s.log.Debug("SA error", "slid", r.d.SLID, "method", mad.SAMethodName(r.method),
			"attr", mad.AttrName(mad.ClassSubnAdm, r.attr), "status", mad.SAStatusName(a.status))
	}
	respMethod := mad.MethodGetResp
	switch r.method {
	case mad.MethodGetTable:
		respMethod = mad.MethodGetTableResp
	case mad.MethodDelete:
		respMethod = mad.MethodDeleteResp
	case mad.MethodGetMulti:
		respMethod = mad.MethodGetMultiResp
	}
	attr := r.attr
	if attr == mad.SAAttrMultiPathRecord && a.status == mad.StatusOK {
		attr = mad.SAAttrPathRecord // o15-0.2.7: the answer is PathRecords
	}
	hdr := r.m.Header()
	hdr.SMKey = 0
	hdr.AttributeOffset = uint16(mad.RecordStride(a.size) / 8)
	if len(a.records) == 0 {
		// An empty table has no record size, as OpenSM answers it: saquery
		// and libibmad read AttributeOffset 0 as no record.
		hdr.AttributeOffset = 0
	}
	b := make([]byte, mad.Size)
	out, _ := mad.NewSAMAD(b, respMethod, attr, r.m.MAD().TransactionID(), &hdr)
	out.MAD().SetClassVersion(r.m.MAD().ClassVersion())
	out.MAD().SetAttributeModifier(r.m.MAD().AttributeModifier())
	out.MAD().SetStatus(a.status)
	if multi && a.status == mad.StatusOK {
		s.startTransfer(r, out, a)
		return
	}
	if a.status == mad.StatusOK {
		copy(out.Data(), a.records[0])
	} else {
		copy(out.Data(), r.data) // as OpenSM: the query comes back
	}
	if multi {
		// An error answer to GetTable or GetMulti is one RMPP segment too.
		out.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeData, RRespTime: mad.RMPPNoRespTime,
			Flags: mad.RMPPFlagActive | mad.RMPPFlagFirst | mad.RMPPFlagLast, SegmentNumber: 1,
			Length: mad.SAHeaderSize})
	}
	s.send(r.d, out)
}

// send answers the requester of d with m.
func (s *Server) send(d *sm.Datagram, m mad.SAMAD) {
	// A copy each time: a transfer sends its segments again.
	out := &sm.Datagram{SLID: d.DLID, DLID: d.SLID, SQP: mad.GSIQPN, DQP: d.SQP, SL: d.SL, PKey: d.PKey,
		QKey: mad.GSIQKey, MAD: append([]byte(nil), m...)}
	if err := s.t.Send(out); err != nil {
		s.log.Debug("send failed", "dlid", d.SLID, "err", err)
	}
}
