// Management packets for a switch's own LID on the data plane: a real
// switch's port 0 has its agents behind it, so an SMP (QP0) or a PerfMgt
// MAD (QP1) sent by an HCA to the switch's LID is answered, not dropped.

package fabric

import (
	"github.com/softrdma/softrdma/wire/mad"
)

// switchAgents hands pkt, a packet for switch in.node's own LID that
// arrived at port in (onVL15: on VL15), to the switch's agents when it is
// a request they take: a LID-routed SMP to QP0 for the SMA, a PerfMgt MAD
// to QP1 with the GSI Q_Key for the PMA. The answer leaves by the LFT
// toward the requester's LID, as a hop appended to out. ok is false for
// any other packet (the caller drops it as ToSwitch); an answer that has
// no way out is dropped and counted on its port. It runs under f.mu.
func (dp *dataPlane) switchAgents(in *nodePort, pkt []byte, onVL15 bool, out []hop) (_ []hop, ok bool) {
	f := dp.f
	mp, ok := parseMADPacket(pkt)
	if !ok || mp.grh != nil {
		return out, false
	}
	req := mp.mad
	m := mad.MAD(req)
	qp, class, method, attr := mp.destQP, m.MgmtClass(), m.Method(), m.AttributeID()
	switch {
	case qp == 0 && class == mad.ClassSubnLID:
	case qp == 1 && class == mad.ClassPerf && mp.qkey == mad.GSIQKey:
	default:
		return out, false
	}
	if isResponse(m) || method == mad.MethodTrap || method == mad.MethodTrapRepress {
		return out, false // nothing for an agent to answer
	}
	resp := append([]byte(nil), req...)
	rm := mad.MAD(resp)
	rm.SetMethod(mad.MethodGetResp)
	sma := in.node.smaPort(in)
	var pending []job
	switch {
	case method != mad.MethodGet && method != mad.MethodSet:
		rm.SetStatus(mad.StatusMethodUnsupported)
	case qp == 0 && attr == mad.SMAttrSMInfo:
		// A switch port is no SM (SMInfo goes to an SM's own port).
		rm.SetStatus(mad.StatusMethodAttrInvalid)
	case qp == 0:
		s := mad.SMP(req)
		if !f.mkeyOK(sma, s, method) {
			return out, true // an M_Key violation is dropped, as by the management plane
		}
		data := append([]byte(nil), s.Data()...)
		st := f.smaAttr(in, method, attr, m.AttributeModifier(), data, &pending)
		f.hideMKey(sma, s, attr, data)
		rm.SetStatus(st)
		copy(resp[mad.SMPDataOffset:], data)
	default:
		data := append([]byte(nil), req[mad.PerfDataOffset:]...)
		rm.SetStatus(f.pma(sma, method, attr, data))
		copy(resp[mad.PerfDataOffset:], data)
	}
	f.queueTraps(pending)
	f.kickDataPlane()
	dp.stats.switchAgents.Add(1)

	// The answer, from the switch's LID to the requester's.
	eg, v, b := dp.agentAnswer(in, &mp, resp, onVL15)
	if eg == nil || b == nil {
		return out, true
	}
	eg.cnt.xmitPkts++
	eg.cnt.xmitData += words(b)
	return append(out, hop{eg: eg, vl: v, pkt: b}), true
}
