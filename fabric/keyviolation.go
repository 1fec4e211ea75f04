package fabric

import (
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// checkGSIKeys is a CA port's check of a packet for QP1, the general
// services interface (IBTA 14.2.5.6, 13.4.6.2): a P_Key that matches no
// entry of the port's table counts in PortInfo's P_KeyViolations and
// sends trap 257 to the port's SM, a Q_Key other than the GSI's counts in
// Q_KeyViolations and sends trap 258. The counters stop at 0xFFFF. The
// packet still goes to the HCA, which drops it (link/ib's RxBadPKey,
// verbs' RxQKeyDrop). A trap that finds the fabric's queue full is
// dropped and counted, so a flood of bad packets cannot block the data
// plane. It runs under f.mu.
func (f *Fabric) checkGSIKeys(p *nodePort, pkt []byte) {
	b := bthOf(pkt)
	if b == nil || b.DestQP() != 1 || b.Opcode()&0xE0 != wire.TransportUD {
		return
	}
	off := wire.LRHLen
	lrh := wire.LRH(pkt)
	var grh wire.GRH
	if lrh.LNH() == wire.LNHIBAGlobal {
		grh = wire.GRH(pkt[wire.LRHLen : wire.LRHLen+wire.GRHLen])
		off += wire.GRHLen
	}
	off += wire.BTHLen
	if len(pkt) < off+wire.DETHLen+wire.ICRCLen+wire.VCRCLen {
		return // the HCA drops it as malformed
	}
	deth := wire.DETH(pkt[off : off+wire.DETHLen])
	k := mad.KeyViolation{LID1: lrh.SLID(), LID2: lrh.DLID(), SL: lrh.SL(), QP1: uint32(deth.SrcQP()), QP2: 1}
	if grh != nil {
		k.GID1, k.GID2 = grh.SGID(), grh.DGID()
	}
	var trap uint16
	switch {
	case !pkeyMatch(p.pkeys, uint16(b.PKey())):
		if p.pi.PKeyViolations < 0xFFFF {
			p.pi.PKeyViolations++
		}
		trap, k.Key = mad.TrapBadPKey, uint32(b.PKey())
	case deth.QKey() != mad.GSIQKey:
		if p.pi.QKeyViolations < 0xFFFF {
			p.pi.QKeyViolations++
		}
		trap, k.Key = mad.TrapBadQKey, uint32(deth.QKey())
	default:
		return
	}
	nt := mad.Notice{IsGeneric: true, Type: mad.NoticeTypeSecurity, ProducerType: mad.NodeTypeCA,
		TrapNumber: trap, IssuerLID: p.pi.LID}
	nt.SetKeyViolation(k)
	var traps []job
	f.trap(p, &nt, &traps)
	f.queueTraps(traps)
}
