package fabric

import (
	"time"

	"github.com/softrdma/softrdma/wire/mad"
)

// The subnet management agent of every node: Get and Set of the SM
// attributes (IBTA volume 1 section 14.2.5), on the state in the ports and
// switches. Everything here runs under f.mu.

// mkeyOK applies the M_Key check (14.2.4.1) of port p to an SMP: a port
// whose M_Key is 0, or an SMP carrying it, passes; otherwise a Get passes
// only with protect bits 0 or 1 and a Set never. A failing SMP is counted
// in MKeyViolations and dropped, and starts the lease period (14.2.4.2)
// if it is not running: when MKeyLeasePeriod seconds pass with no SMP
// carrying the key, the protect bits drop to 0.
func (f *Fabric) mkeyOK(p *nodePort, s mad.SMP, method mad.Method) bool {
	now := f.now()
	if !p.leaseStart.IsZero() && p.pi.MKeyLeasePeriod != 0 &&
		now.Sub(p.leaseStart) >= time.Duration(p.pi.MKeyLeasePeriod)*time.Second {
		p.pi.MKeyProtectBits = 0
		p.leaseStart = time.Time{}
	}
	if p.pi.MKey == 0 || s.MKey() == p.pi.MKey {
		if p.pi.MKey != 0 {
			p.leaseStart = time.Time{} // the SM holding the key is alive
		}
		return true
	}
	if method == mad.MethodGet && p.pi.MKeyProtectBits <= 1 {
		return true
	}
	if p.pi.MKeyViolations < 0xFFFF {
		p.pi.MKeyViolations++
	}
	if p.leaseStart.IsZero() && p.pi.MKeyLeasePeriod != 0 {
		p.leaseStart = now
	}
	return false
}

// hideMKey zeroes the M_Key of a PortInfo answer to an SMP that did not
// carry it when protect bits are 1 or more (14.2.4.1).
func (f *Fabric) hideMKey(p *nodePort, s mad.SMP, attr mad.AttributeID, data []byte) {
	if attr != mad.SMAttrPortInfo || p.pi.MKey == 0 || s.MKey() == p.pi.MKey || p.pi.MKeyProtectBits == 0 {
		return
	}
	clear(data[0:8])
}

// smaAttr answers a Get or Set of attr with modifier mod that arrived on
// port in: on Set it applies data, and in both cases writes the
// attribute's current value into data. It returns the MAD status.
func (f *Fabric) smaAttr(in *nodePort, method mad.Method, attr mad.AttributeID, mod uint32, data []byte, pending *[]job) uint16 {
	n := in.node
	set := method == mad.MethodSet
	switch attr {
	case mad.SMAttrNodeInfo:
		ni := mad.NodeInfo{
			BaseVersion: 1, ClassVersion: 1, NodeType: n.typ, NumPorts: uint8(n.NumPorts()),
			SystemImageGUID: n.sysGUID, NodeGUID: n.guid, PortGUID: in.guid,
			PartitionCap: pkeyCapCA, DeviceID: n.device, Revision: nodeRevision, LocalPortNum: uint8(in.num), VendorID: n.vendor,
		}
		clear(data)
		ni.Encode(data)
		if set {
			return mad.StatusMethodAttrInvalid
		}
	case mad.SMAttrNodeDescription:
		nd := mad.NodeDescription{Description: n.desc}
		nd.Encode(data)
		if set {
			return mad.StatusMethodAttrInvalid
		}
	case mad.SMAttrPortInfo:
		return f.portInfo(in, set, mod, data, pending)
	case mad.SMAttrSwitchInfo:
		if n.sw == nil {
			return mad.StatusMethodAttrInvalid
		}
		st := mad.StatusOK
		if set {
			x, err := mad.ParseSwitchInfo(data)
			switch {
			case err != nil:
				st = mad.StatusInvalidAttrOrModify
			case int(x.LinearFDBTop) >= linearFDBCap,
				// MulticastFDBTop: 0 (not used), 0xBFFF (no entries) or an
				// entry the table has.
				x.MulticastFDBTop != 0 && (x.MulticastFDBTop < 0xBFFF || int(x.MulticastFDBTop) >= 0xC000+multicastFDBCap):
				st = mad.StatusInvalidAttrOrModify
			default:
				sw := &n.sw.info
				sw.LinearFDBTop = x.LinearFDBTop
				sw.MulticastFDBTop = x.MulticastFDBTop
				sw.DefaultPort = x.DefaultPort
				sw.DefaultMulticastPrimaryPort = x.DefaultMulticastPrimaryPort
				sw.DefaultMulticastNotPrimaryPort = x.DefaultMulticastNotPrimaryPort
				sw.LifeTimeValue = x.LifeTimeValue
				sw.OptimizedSLtoVLMappingProgramming = x.OptimizedSLtoVLMappingProgramming
				if x.PortStateChange {
					n.sw.portChange = false // written 1: cleared
				}
			}
		}
		x := n.sw.info
		x.PortStateChange = n.sw.portChange
		clear(data)
		x.Encode(data)
		return st
	case mad.SMAttrGUIDInfo:
		p := n.smaPort(in)
		if mod != 0 {
			return mad.StatusInvalidAttrOrModify
		}
		if set {
			g, err := mad.ParseGUIDInfo(data)
			if err != nil {
				return mad.StatusInvalidAttrOrModify
			}
			// Entry 0 is the port GUID, read-only; entries past GUIDCap
			// do not exist.
			copy(p.guids[1:max(int(p.pi.GUIDCap), 1)], g.GUID[1:])
		}
		g := mad.GUIDInfo{GUID: p.guids}
		g.Encode(data)
	case mad.SMAttrPKeyTable:
		p := n.smaPort(in)
		if n.isSwitch() {
			if p = n.port(int(mod >> 16)); p == nil {
				return mad.StatusInvalidAttrOrModify
			}
		}
		block := int(mod & 0xFFFF)
		if block*32 >= len(p.pkeys) {
			return mad.StatusInvalidAttrOrModify
		}
		tbl := p.pkeys[block*32 : min(len(p.pkeys), block*32+32)]
		if set {
			x, err := mad.ParsePKeyTable(data)
			if err != nil {
				return mad.StatusInvalidAttrOrModify
			}
			copy(tbl, x.PKey[:])
		}
		var x mad.PKeyTable
		copy(x.PKey[:], tbl)
		x.Encode(data)
	case mad.SMAttrSLToVLTable:
		p, idx := n.smaPort(in), 0
		if n.isSwitch() {
			inPort, outPort := int(mod>>8&0xFF), int(mod&0xFF)
			if n.port(inPort) == nil || n.port(outPort) == nil {
				return mad.StatusInvalidAttrOrModify
			}
			p, idx = n.ports[outPort], inPort
		}
		if set {
			copy(p.sl2vl[idx][:], data[:mad.SLToVLTableSize])
		}
		clear(data)
		copy(data, p.sl2vl[idx][:])
	case mad.SMAttrVLArbTable:
		p := n.smaPort(in)
		if n.isSwitch() {
			if p = n.port(int(mod & 0xFFFF)); p == nil {
				return mad.StatusInvalidAttrOrModify
			}
		}
		sel := mod >> 16
		var tbl []mad.VLArbEntry
		var capacity int
		switch sel {
		case mad.VLArbLowEntries0to31, mad.VLArbLowEntries32to63:
			tbl, capacity = p.vlLow[:], int(p.pi.VLArbitrationLowCap)
		case mad.VLArbHighEntries0to31, mad.VLArbHighEntries32to63:
			tbl, capacity = p.vlHigh[:], int(p.pi.VLArbitrationHighCap)
		default:
			return mad.StatusInvalidAttrOrModify
		}
		first := 0
		if sel == mad.VLArbLowEntries32to63 || sel == mad.VLArbHighEntries32to63 {
			first = 32
		}
		if first >= capacity {
			return mad.StatusInvalidAttrOrModify
		}
		blk := tbl[first : first+32]
		if set {
			x, err := mad.ParseVLArbTable(data)
			if err != nil {
				return mad.StatusInvalidAttrOrModify
			}
			for i := range min(32, capacity-first) {
				blk[i] = x.Entry[i]
			}
		}
		var x mad.VLArbTable
		copy(x.Entry[:min(32, capacity-first)], blk)
		x.Encode(data)
	case mad.SMAttrLinearFT:
		if n.sw == nil {
			return mad.StatusMethodAttrInvalid
		}
		if int(mod)*64 >= linearFDBCap {
			return mad.StatusInvalidAttrOrModify
		}
		blk := n.sw.lft[mod*64 : mod*64+64]
		if set {
			copy(blk, data[:64])
		}
		copy(data, blk)
	case mad.SMAttrMulticastFT:
		if n.sw == nil {
			return mad.StatusMethodAttrInvalid
		}
		pos, block := int(mod>>28), int(mod&0x1FF)
		if block*32 >= multicastFDBCap || pos > n.NumPorts()/16 {
			return mad.StatusInvalidAttrOrModify
		}
		var x mad.MulticastFT
		if set {
			y, err := mad.ParseMulticastFT(data)
			if err != nil {
				return mad.StatusInvalidAttrOrModify
			}
			for i, m := range y.PortMask {
				e := &n.sw.mft[block*32+i]
				if len(*e) == 0 {
					*e = make([]uint16, n.NumPorts()/16+1)
				}
				(*e)[pos] = m
			}
		}
		for i := range x.PortMask {
			if e := n.sw.mft[block*32+i]; len(e) > pos {
				x.PortMask[i] = e[pos]
			}
		}
		x.Encode(data)
	default:
		return mad.StatusMethodAttrInvalid
	}
	return mad.StatusOK
}

// portInfo answers PortInfo: Get of any port (modifier: the port on a
// switch; 0 or the arrival port on a CA), Set of the fields an SM writes,
// with the port state machine's transitions (14.2.5.6, and as Linux ibsim
// allows them: ARMED from INIT, ACTIVE from ARMED, each with the neighbour
// no more than one state away; DOWN retrains the link to INIT). A Set
// with an invalid field changes nothing and answers status 0x1C.
func (f *Fabric) portInfo(in *nodePort, set bool, mod uint32, data []byte, pending *[]job) uint16 {
	n := in.node
	// Bit 31 of the modifier asks for the port's own timing data on some
	// attributes; PortInfo's port is the rest.
	num := int(mod & 0x7FFFFFFF)
	if num == 0 && !n.isSwitch() {
		num = in.num
	}
	p := n.port(num)
	if p == nil {
		return mad.StatusInvalidAttrOrModify
	}
	st := mad.StatusOK
	if set {
		if !n.isSwitch() && p != in {
			st = mad.StatusInvalidAttrOrModify
		} else if x, err := mad.ParsePortInfo(data); err != nil {
			st = mad.StatusInvalidAttrOrModify
		} else {
			st = f.setPortInfo(p, &x, pending)
		}
	}
	x := p.pi
	x.LocalPortNum = uint8(in.num)
	if n.isSwitch() && p.num != 0 {
		// An external port has no LID of its own: the switch's is port 0's.
		x.LID, x.LMC, x.MasterSMLID = 0, 0, 0
	}
	x.Encode(data)
	return st
}

func (f *Fabric) setPortInfo(p *nodePort, x *mad.PortInfo, pending *[]job) uint16 {
	n := p.node
	bad := uint16(mad.StatusInvalidAttrOrModify)
	ext := n.isSwitch() && p.num != 0 // an external switch port
	// Validate everything first: an invalid Set changes nothing.
	if x.NeighborMTU != 0 && x.NeighborMTU > p.pi.MTUCap {
		return bad
	}
	if x.OperationalVLs > p.pi.VLCap {
		return bad
	}
	width := x.LinkWidthEnabled
	switch {
	case width == 0:
		width = p.pi.LinkWidthEnabled
	case width == 0xFF:
		width = p.pi.LinkWidthSupported
	case width&^p.pi.LinkWidthSupported != 0:
		return bad
	}
	speed := x.LinkSpeedEnabled
	switch {
	case speed == 0:
		speed = p.pi.LinkSpeedEnabled
	case speed == 0xF:
		speed = p.pi.LinkSpeedSupported
	case speed&^p.pi.LinkSpeedSupported != 0:
		return bad
	}
	// PortPhysicalState: Disabled takes the link down, Polling brings a
	// disabled one back; anything else (SMs write back what Get gave,
	// LinkUp) changes nothing, as in ibsim.
	phys := x.PortPhysicalState
	newState := p.pi.PortState
	down := false
	switch x.PortState {
	case mad.PortStateNoChange:
	case mad.PortStateDown:
		down = p.remote != nil && p.physUp()
	case mad.PortStateInit:
		// Not a state an SM can set; ibsim lets it pass unchanged.
	case mad.PortStateArmed, mad.PortStateActive:
		if n.isSwitch() && p.num == 0 {
			break // port 0 is always ACTIVE
		}
		want := x.PortState
		r := p.remote
		if r == nil || !p.physUp() {
			return bad
		}
		if want != p.pi.PortState {
			if want != p.pi.PortState+1 || int(r.pi.PortState) < int(want)-1 {
				return bad
			}
			newState = want
		}
	default:
		return bad
	}
	// Apply.
	p.pi.MKey = x.MKey
	p.pi.GIDPrefix = x.GIDPrefix
	if !ext {
		p.pi.LID = x.LID
		p.pi.LMC = x.LMC
		p.pi.MasterSMLID = x.MasterSMLID
		p.pi.MasterSMSL = x.MasterSMSL
		p.pi.MKeyLeasePeriod = x.MKeyLeasePeriod
		p.pi.MKeyProtectBits = x.MKeyProtectBits
		p.pi.SubnetTimeOut = x.SubnetTimeOut
		p.pi.ClientReregister = false // the port acts on it at once
	}
	p.pi.LinkWidthEnabled = width
	p.pi.LinkSpeedEnabled = speed
	if x.LinkDownDefaultState != 0 {
		p.pi.LinkDownDefaultState = x.LinkDownDefaultState
	}
	if x.NeighborMTU != 0 {
		p.pi.NeighborMTU = x.NeighborMTU
	}
	if x.OperationalVLs != 0 {
		p.pi.OperationalVLs = x.OperationalVLs
	}
	p.pi.VLHighLimit = x.VLHighLimit
	p.pi.HOQLife = x.HOQLife
	p.pi.VLStallCount = x.VLStallCount
	if ext {
		p.pi.PartitionEnforcementInbound = x.PartitionEnforcementInbound
		p.pi.PartitionEnforcementOutbound = x.PartitionEnforcementOutbound
		p.pi.FilterRawInbound = x.FilterRawInbound
		p.pi.FilterRawOutbound = x.FilterRawOutbound
	}
	p.pi.LocalPhyErrors = x.LocalPhyErrors
	p.pi.OverrunErrors = x.OverrunErrors
	p.pi.PortState = newState
	switch {
	case phys == mad.PhysStateDisabled && p.remote != nil && p.physUp():
		p.pi.PortPhysicalState = mad.PhysStateDisabled
		p.pi.PortState = mad.PortStateDown
		p.remote.pi.PortPhysicalState = mad.PhysStatePolling
		p.remote.pi.PortState = mad.PortStateDown
		p.cnt.linkDowned++
		p.remote.cnt.linkDowned++
		f.portChanged(p.remote, pending)
	case phys == mad.PhysStatePolling && p.pi.PortPhysicalState == mad.PhysStateDisabled:
		p.pi.PortPhysicalState = mad.PhysStatePolling
		if p.remote != nil {
			f.linkUp(p)
			f.portChanged(p.remote, pending)
		}
	case down:
		// The link goes down and trains again: both ends come back in
		// INIT. The neighbour's switch notices; this one was told.
		p.pi.PortState = mad.PortStateInit
		p.remote.pi.PortState = mad.PortStateInit
		p.cnt.linkDowned++
		p.remote.cnt.linkDowned++
		f.portChanged(p.remote, pending)
	}
	return mad.StatusOK
}

// capabilityChanged sends trap 144 (14.2.5.1: a port's CapabilityMask
// changed) from port p to its SM, if the port has a LID and an SM LID.
func (f *Fabric) capabilityChanged(p *nodePort, pending *[]job) {
	nt := mad.Notice{
		IsGeneric: true, Type: mad.NoticeTypeInformational, ProducerType: uint32(p.node.typ),
		TrapNumber: mad.TrapCapabilityMaskChanged, IssuerLID: p.pi.LID,
	}
	nt.SetTrap144(mad.Trap144Details{LID: p.pi.LID, CapabilityMask: p.pi.CapabilityMask})
	f.trap(p, &nt, pending)
}

// trap sends notice nt from port p (a CA port or a switch's port 0)
// LID-routed to the port's SM, if it has a LID and an SM LID.
func (f *Fabric) trap(p *nodePort, nt *mad.Notice, pending *[]job) {
	if p.pi.LID == 0 || p.pi.MasterSMLID == 0 {
		return
	}
	f.trapTID++
	b := make([]byte, mad.Size)
	s, _ := mad.NewLIDRoutedSMP(b, mad.MethodTrap, mad.SMAttrNotice, 0, f.trapTID)
	nt.Encode(s.Data())
	f.logTrap(p, nt.TrapNumber)
	*pending = append(*pending, job{
		d:   &Datagram{SLID: p.pi.LID, DLID: p.pi.MasterSMLID, SL: p.pi.MasterSMSL, PKey: 0xFFFF, MAD: b},
		src: p,
	})
}

// portChanged records that switch port p went down or came up: the switch
// sets PortStateChange and sends trap 128 to its SM, if it has a LID and
// an SM LID.
func (f *Fabric) portChanged(p *nodePort, pending *[]job) {
	n := p.node
	if n.sw == nil {
		return
	}
	n.sw.portChange = true
	p0 := n.ports[0]
	nt := mad.Notice{
		IsGeneric: true, Type: mad.NoticeTypeUrgent, ProducerType: mad.NodeTypeSwitch,
		TrapNumber: mad.TrapLinkStateChange, IssuerLID: p0.pi.LID,
	}
	nt.SetTrap128(p0.pi.LID)
	f.trap(p0, &nt, pending)
}
