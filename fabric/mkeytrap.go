package fabric

import "github.com/softrdma/softrdma/wire/mad"

// badMKeyTrap sends trap 256 from port p (a CA port, or a switch's port
// 0, whose M_Key check s failed) to its SM: the SMP's method, attribute
// and M_Key, and for a directed-route SMP its DrSLID and return path.
// Like every trap it goes only from a port with a LID and an SM LID.
func (f *Fabric) badMKeyTrap(p *nodePort, s mad.SMP, pending *[]job) {
	m := s.MAD()
	prod := uint32(mad.NodeTypeCA)
	if p.node.isSwitch() {
		prod = mad.NodeTypeSwitch
	}
	t := mad.BadMKey{LID: p.pi.LID, Method: m.Method(), AttributeID: m.AttributeID(), AttributeModifier: m.AttributeModifier(),
		MKey: s.MKey()}
	if s.Directed() {
		t.DRNotice, t.DrSLID = true, s.DrSLID()
		hops := int(s.HopCount())
		if hops > len(t.DRReturnPath) {
			t.DRPathTruncated, hops = true, len(t.DRReturnPath)
		}
		t.DRHopCount = uint8(hops)
		copy(t.DRReturnPath[:hops], s.ReturnPath())
	}
	nt := mad.Notice{IsGeneric: true, Type: mad.NoticeTypeSecurity, ProducerType: prod, TrapNumber: mad.TrapBadMKey,
		IssuerLID: p.pi.LID}
	nt.SetBadMKey(t)
	f.trap(p, &nt, pending)
}
