// MultiPathRecord: GetMulti asks for paths between several source and
// destination GIDs at once (IBTA volume 1 section 15.2.5.20); the answer
// is PathRecords, by RMPP like a table.

package sa

import (
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// multiPathMask maps MultiPathRecord component bits to PathRecord's.
var multiPathMask = [][2]uint64{
	{mad.MultiPathRecCompRawTraffic, mad.PathRecCompRawTraffic},
	{mad.MultiPathRecCompFlowLabel, mad.PathRecCompFlowLabel},
	{mad.MultiPathRecCompHopLimit, mad.PathRecCompHopLimit},
	{mad.MultiPathRecCompTClass, mad.PathRecCompTClass},
	{mad.MultiPathRecCompReversible, mad.PathRecCompReversible},
	{mad.MultiPathRecCompPKey, mad.PathRecCompPKey},
	{mad.MultiPathRecCompQoSClass, mad.PathRecCompQoSClass},
	{mad.MultiPathRecCompSL, mad.PathRecCompSL},
	{mad.MultiPathRecCompMTUSelector, mad.PathRecCompMTUSelector},
	{mad.MultiPathRecCompMTU, mad.PathRecCompMTU},
	{mad.MultiPathRecCompRateSelector, mad.PathRecCompRateSelector},
	{mad.MultiPathRecCompRate, mad.PathRecCompRate},
	{mad.MultiPathRecCompLifeSelector, mad.PathRecCompLifeSelector},
	{mad.MultiPathRecCompPacketLifeTime, mad.PathRecCompPacketLifeTime},
	{mad.MultiPathRecCompServiceIDMSB, mad.PathRecCompServiceIDMSB},
	{mad.MultiPathRecCompServiceIDLSB, mad.PathRecCompServiceIDLSB},
}

// multiPathRecords answers GetMulti(MultiPathRecord): for each source GID
// and each destination GID, the paths between the two ports (every LID
// pair of their LMC ranges, the pairs with equal offsets first), meeting
// the query's parameters as a PathRecord query would; NumbPath, if given,
// bounds the paths in all, else each GID pair gets one. The independence
// selector is not honoured: the paths are not chosen to be disjoint.
func (s *Server) multiPathRecords(r *request) answer {
	if r.method != mad.MethodGetMulti {
		return fail(mad.StatusMethodAttrInvalid)
	}
	s.ackRequest(r)
	mq, err := mad.ParseMultiPathRecord(r.data)
	if err != nil || len(mq.SGIDs) == 0 || len(mq.DGIDs) == 0 {
		return fail(mad.SAStatusReqInvalid)
	}
	if r.mask&mad.MultiPathRecCompRawTraffic != 0 && mq.RawTraffic {
		return fail(mad.SAStatusReqInvalid)
	}
	var m uint64
	for _, b := range multiPathMask {
		if r.mask&b[0] != 0 {
			m |= b[1]
		}
	}
	q := mad.PathRecord{ServiceID: mq.ServiceID, RawTraffic: mq.RawTraffic, FlowLabel: mq.FlowLabel, HopLimit: mq.HopLimit,
		TClass: mq.TClass, Reversible: mq.Reversible, PKey: mq.PKey, QoSClass: mq.QoSClass, SL: mq.SL,
		MTUSelector: mq.MTUSelector, MTU: mq.MTU, RateSelector: mq.RateSelector, Rate: mq.Rate,
		LifeSelector: mq.LifeSelector, PacketLifeTime: mq.PacketLifeTime}
	sub := r.subnet
	ports := func(gids []mad.GID) ([]*sm.Port, bool) {
		var ps []*sm.Port
		for _, g := range gids {
			p := sub.PortByGUID(g.GUID())
			if g.Prefix() != sub.Prefix || p == nil || p.LID() == 0 {
				return nil, false
			}
			ps = append(ps, p)
		}
		return ps, true
	}
	srcs, ok1 := ports(mq.SGIDs)
	dsts, ok2 := ports(mq.DGIDs)
	if !ok1 || !ok2 {
		return fail(mad.SAStatusReqInvalidGID)
	}
	total := 0
	if r.mask&mad.MultiPathRecCompNumbPath != 0 {
		total = int(mq.NumbPath)
	}
	a := answer{size: mad.PathRecordSize}
	for _, sp := range srcs {
		for _, dp := range dsts {
			for _, pair := range lidPairs(sp, dp, nil, nil) {
				if total != 0 && len(a.records) >= total {
					return a
				}
				rec, ok := s.pathRecord(sub, q, m, sp, dp, pair[0], pair[1])
				if !ok {
					continue
				}
				a.records = append(a.records, encode(&rec, mad.PathRecordSize))
				if total == 0 {
					break // one per GID pair
				}
			}
		}
	}
	return a
}

// ackRequest acknowledges the last (only) RMPP segment of a request sent
// by RMPP, as the receiving side of a transfer does before it answers.
func (s *Server) ackRequest(r *request) {
	rh := r.m.RMPP()
	if !rh.Active() {
		return
	}
	b := make([]byte, mad.Size)
	copy(b, r.m[:mad.SADataOffset])
	ack := mad.SAMAD(b)
	ack.MAD().SetMethod(mad.MethodGetMultiResp)
	ack.SetRMPP(&mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeAck, RRespTime: mad.RMPPNoRespTime,
		Flags: mad.RMPPFlagActive, SegmentNumber: rh.SegmentNumber, Length: rh.SegmentNumber + 1})
	s.send(r.d, ack)
}
