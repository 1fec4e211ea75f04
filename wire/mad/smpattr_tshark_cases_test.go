package mad

import "net/netip"

// tsharkFrames returns one frame per codec: its sample in the MAD tshark
// expects it in, and the comparison of every field tshark 4.0 shows. What
// tshark 4.0 does not show (PortInfo's fields after LinkRoundTripLatency,
// SwitchInfo's MulticastFDBTop, PortCounters' CounterSelect2, QP1Dropped
// and PortXmitWait, PortCountersExtended's CounterSelect2 and error
// counters, ClassPortInfo's TrapHL, MulticastFT entries after the 16th) is
// covered by TestAttrLayout and the infiniband-diags comparison.
func tsharkFrames() []ibFrame {
	smp := func(name string, attr AttributeID, mod uint32, enc func([]byte), check func(*wsCheck)) ibFrame {
		return ibFrame{name: name, class: ClassSubnDirected, method: MethodGetResp, attr: attr, mod: mod,
			encode: func(b []byte) { enc(b[:64]) }, check: check}
	}
	ni, pi, si := sampleNodeInfo(), samplePortInfo(), sampleSwitchInfo()
	gi, pk, sl, va := sampleGUIDInfo(), samplePKeyTable(), sampleSLToVL(), sampleVLArb()
	lft, mft, sm, nt := sampleLinearFT(), sampleMulticastFT(), sampleSMInfo(), sampleNotice()
	pc, pcx, cpi := samplePortCounters(), samplePortCountersExt(), sampleClassPortInfo()
	nd := NodeDescription{Description: "softrdma switch 7"}
	frames := []ibFrame{
		smp("NodeInfo", SMAttrNodeInfo, 0, ni.Encode, func(c *wsCheck) {
			p := "infiniband.nodeinfo."
			c.uint(p+"baseversion", uint64(ni.BaseVersion))
			c.uint(p+"classversion", uint64(ni.ClassVersion))
			c.uint(p+"nodetype", uint64(ni.NodeType))
			c.uint(p+"numports", uint64(ni.NumPorts))
			c.uint(p+"systemimageguid", ni.SystemImageGUID)
			c.uint(p+"nodeguid", ni.NodeGUID)
			c.uint(p+"portguid", ni.PortGUID)
			c.uint(p+"partitioncap", uint64(ni.PartitionCap))
			c.uint(p+"deviceid", uint64(ni.DeviceID))
			c.uint(p+"revision", uint64(ni.Revision))
			c.uint(p+"localportnum", uint64(ni.LocalPortNum))
			c.uint(p+"vendorid", uint64(ni.VendorID))
			c.unused(p)
		}),
		smp("NodeDescription", SMAttrNodeDescription, 0, nd.Encode, func(c *wsCheck) {
			if v := c.values("infiniband.nodedescription.nodestring"); len(v) != 1 || v[0] != nd.Description {
				c.t.Errorf("NodeDescription: tshark shows %q", v)
			}
		}),
		smp("PortInfo", SMAttrPortInfo, 9, pi.Encode, func(c *wsCheck) {
			p := "infiniband.portinfo."
			c.uint(p+"m_key", pi.MKey)
			c.uint(p+"guid", pi.GIDPrefix) // tshark's name for the GID prefix
			c.uint(p+"lid", uint64(pi.LID))
			c.uint(p+"mastersmlid", uint64(pi.MasterSMLID))
			c.uint(p+"capabilitymask", uint64(pi.CapabilityMask))
			c.bool(p+"capabilitymask.issm", pi.CapabilityMask&PortCapIsSM != 0)
			c.bool(p+"capabilitymask.trapsupported", pi.CapabilityMask&PortCapIsTrapSupported != 0)
			c.bool(p+"capabilitymask.clientregistrationsupported", pi.CapabilityMask&PortCapIsClientReregistration != 0)
			c.bool(p+"capabilitymask.communicationmanagementsupported", pi.CapabilityMask&PortCapIsCMSupported != 0)
			c.uint(p+"diagcode", uint64(pi.DiagCode))
			c.uint(p+"m_keyleaseperiod", uint64(pi.MKeyLeasePeriod))
			c.uint(p+"localportnum", uint64(pi.LocalPortNum))
			c.uint(p+"linkwidthenabled", uint64(pi.LinkWidthEnabled))
			c.uint(p+"linkwidthsupported", uint64(pi.LinkWidthSupported))
			c.uint(p+"linkwidthactive", uint64(pi.LinkWidthActive))
			c.uint(p+"linkspeedsupported", uint64(pi.LinkSpeedSupported))
			c.uint(p+"portstate", uint64(pi.PortState))
			c.uint(p+"portphysicalstate", uint64(pi.PortPhysicalState))
			c.uint(p+"linkdowndefaultstate", uint64(pi.LinkDownDefaultState))
			c.uint(p+"m_keyprotectbits", uint64(pi.MKeyProtectBits))
			c.uint(p+"lmc", uint64(pi.LMC))
			c.uint(p+"linkspeedactive", uint64(pi.LinkSpeedActive))
			c.uint(p+"linkspeedenabled", uint64(pi.LinkSpeedEnabled))
			c.uint(p+"neighbormtu", uint64(pi.NeighborMTU))
			c.uint(p+"mastersmsl", uint64(pi.MasterSMSL))
			c.uint(p+"vlcap", uint64(pi.VLCap))
			c.uint(p+"inittype", uint64(pi.InitType))
			c.uint(p+"vlhighlimit", uint64(pi.VLHighLimit))
			c.uint(p+"vlarbitrationhighcap", uint64(pi.VLArbitrationHighCap))
			c.uint(p+"vlarbitrationlowcap", uint64(pi.VLArbitrationLowCap))
			c.uint(p+"inittypereply", uint64(pi.InitTypeReply))
			c.uint(p+"mtucap", uint64(pi.MTUCap))
			c.uint(p+"vlstallcount", uint64(pi.VLStallCount))
			c.uint(p+"hoqlife", uint64(pi.HOQLife))
			c.uint(p+"operationalvls", uint64(pi.OperationalVLs))
			c.bool(p+"partitionenforcementinbound", pi.PartitionEnforcementInbound)
			c.bool(p+"partitionenforcementoutbound", pi.PartitionEnforcementOutbound)
			c.bool(p+"filterrawinbound", pi.FilterRawInbound)
			c.bool(p+"filterrawoutbound", pi.FilterRawOutbound)
			c.uint(p+"m_keyviolations", uint64(pi.MKeyViolations))
			c.uint(p+"p_keyviolations", uint64(pi.PKeyViolations))
			c.uint(p+"q_keyviolations", uint64(pi.QKeyViolations))
			c.uint(p+"guidcap", uint64(pi.GUIDCap))
			c.bool(p+"clientreregister", pi.ClientReregister)
			c.uint(p+"subnettimeout", uint64(pi.SubnetTimeOut))
			c.uint(p+"resptimevalue", uint64(pi.RespTimeValue))
			c.uint(p+"localphyerrors", uint64(pi.LocalPhyErrors))
			c.uint(p+"overrunerrors", uint64(pi.OverrunErrors))
			c.uint(p+"maxcredithint", uint64(pi.MaxCreditHint))
			c.uint(p+"linkroundtriplatency", uint64(pi.LinkRoundTripLatency))
			// The other capability bits tshark splits out are compared
			// through the whole mask above.
			for k := range c.f {
				if len(k) > len(p+"capabilitymask.") && k[:len(p+"capabilitymask.")] == p+"capabilitymask." {
					c.used[k] = true
				}
			}
			c.unused(p)
		}),
		smp("SwitchInfo", SMAttrSwitchInfo, 0, si.Encode, func(c *wsCheck) {
			p := "infiniband.switchinfo."
			c.uint(p+"linearfdbcap", uint64(si.LinearFDBCap))
			c.uint(p+"randomfdbcap", uint64(si.RandomFDBCap))
			c.uint(p+"multicastfdbcap", uint64(si.MulticastFDBCap))
			c.uint(p+"linearfdbtop", uint64(si.LinearFDBTop))
			c.uint(p+"defaultport", uint64(si.DefaultPort))
			c.uint(p+"defaultmulticastprimaryport", uint64(si.DefaultMulticastPrimaryPort))
			c.uint(p+"defaultmulticastnotprimaryport", uint64(si.DefaultMulticastNotPrimaryPort))
			c.uint(p+"lifetimevalue", uint64(si.LifeTimeValue))
			c.bool(p+"portstatechange", si.PortStateChange)
			c.uint(p+"optimizedsltovlmappingprogramming", uint64(si.OptimizedSLtoVLMappingProgramming))
			c.uint(p+"lidsperport", uint64(si.LIDsPerPort))
			c.uint(p+"partitionenforcementcap", uint64(si.PartitionEnforcementCap))
			c.bool(p+"inboundenforcementcap", si.InboundEnforcementCap)
			c.bool(p+"outboundenforcementcap", si.OutboundEnforcementCap)
			c.bool(p+"filterrawinboundcap", si.FilterRawInboundCap)
			c.bool(p+"filterrawoutboundcap", si.FilterRawOutboundCap)
			c.bool(p+"enhancedportzero", si.EnhancedPort0)
			c.unused(p)
		}),
		smp("GUIDInfo", SMAttrGUIDInfo, 0, gi.Encode, func(c *wsCheck) {
			// tshark files GUIDInfo's GUIDs under a switchinfo name.
			c.uints("infiniband.switchinfo.guid", gi.GUID[:]...)
		}),
		smp("PKeyTable", SMAttrPKeyTable, PKeyTableModifier(0, 1), pk.Encode, func(c *wsCheck) {
			var member, base []uint64
			for _, k := range pk.PKey {
				member, base = append(member, uint64(k>>15)), append(base, uint64(k&0x7fff))
			}
			c.uints("infiniband.p_keytable.membershiptype", member...)
			c.uints("infiniband.p_keytable.p_keybase", base...)
			c.used["infiniband.p_keytable.p_keytableblock"] = true
			c.unused("infiniband.p_keytable.")
		}),
		smp("SLToVLTable", SMAttrSLToVLTable, SLToVLModifier(1, 2), sl.Encode, func(c *wsCheck) {
			var hi, lo []uint64
			for i, vl := range sl.VL {
				if i%2 == 0 {
					hi = append(hi, uint64(vl))
				} else {
					lo = append(lo, uint64(vl))
				}
			}
			c.uints("infiniband.sltovlmappingtable.sltovlhighbits", hi...)
			c.uints("infiniband.sltovlmappingtable.sltovllowbits", lo...)
		}),
		smp("VLArbTable", SMAttrVLArbTable, VLArbModifier(3, VLArbLowEntries0to31), va.Encode, func(c *wsCheck) {
			var vls, ws []uint64
			for _, e := range va.Entry {
				vls, ws = append(vls, uint64(e.VL)), append(ws, uint64(e.Weight))
			}
			c.uints("infiniband.vlarbitrationtable.vl", vls...)
			c.uints("infiniband.vlarbitrationtable.weight", ws...)
		}),
		smp("LinearFT", SMAttrLinearFT, 2, lft.Encode, func(c *wsCheck) {
			var ports []uint64
			for _, p := range lft.Port {
				ports = append(ports, uint64(p))
			}
			c.uints("infiniband.linearforwardingtable.port", ports...)
		}),
		smp("MulticastFT", SMAttrMulticastFT, MulticastFTModifier(1, 3), mft.Encode, func(c *wsCheck) {
			var masks []uint64
			for _, m := range mft.PortMask[:16] { // tshark 4.0 shows the first 16
				masks = append(masks, uint64(m))
			}
			c.uints("infiniband.multicastforwardingtable.portmask", masks...)
		}),
		smp("SMInfo", SMAttrSMInfo, 0, sm.Encode, func(c *wsCheck) {
			p := "infiniband.sminfo."
			c.uint(p+"guid", sm.GUID)
			c.uint(p+"sm_key", sm.SMKey)
			c.uint(p+"actcount", uint64(sm.ActCount))
			c.uint(p+"priority", uint64(sm.Priority))
			c.uint(p+"smstate", uint64(sm.SMState))
			c.unused(p)
		}),
		{name: "Notice", class: ClassSubnLID, method: MethodTrap, attr: SMAttrNotice,
			encode: func(b []byte) { nt.Encode(b[:NoticeSize]) }, check: func(c *wsCheck) {
				p := "infiniband.notice."
				c.bool(p+"isgeneric", nt.IsGeneric)
				c.uint(p+"type", uint64(nt.Type))
				c.uint(p+"producertypevendorid", uint64(nt.ProducerType))
				c.uint(p+"trapnumberdeviceid", uint64(nt.TrapNumber))
				c.uint(p+"issuerlid", uint64(nt.IssuerLID))
				c.bool(p+"noticetoggle", nt.Toggle)
				c.uint(p+"noticecount", uint64(nt.Count))
				c.hex(p+"datadetails", nt.DataDetails[:])
				c.unused(p)
				d := nt.Trap144()
				c.uint("infiniband.trap.lidaddr", uint64(d.LID))
				c.bool("infiniband.trap.otherlocalchanges", d.OtherLocalChanges)
				c.uint("infiniband.trap.capabilitymask", uint64(d.CapabilityMask))
				c.bool("infiniband.trap.linkspeecenabledchange", d.ChangeFlags&Trap144LinkSpeedEnabledChange != 0)
				c.bool("infiniband.trap.linkwidthenabledchange", d.ChangeFlags&Trap144LinkWidthEnabledChange != 0)
				c.bool("infiniband.trap.nodedescriptionchange", d.ChangeFlags&Trap144NodeDescriptionChange != 0)
				c.unused("infiniband.trap.")
			}},
		trapFrame(128, func(n *Notice) { n.SetTrap128(0x0042) }, func(c *wsCheck) {
			c.uint("infiniband.trap.lidaddr", 0x0042)
			c.unused("infiniband.trap.")
		}),
		trapFrame(129, func(n *Notice) { n.SetTrap129(0x0043, 17) }, func(c *wsCheck) {
			c.uint("infiniband.trap.lidaddr", 0x0043)
			c.uint("infiniband.trap.portno", 17)
			c.unused("infiniband.trap.")
		}),
		trapFrame(131, func(n *Notice) { n.SetTrap129(0x0044, 3) }, func(c *wsCheck) {
			c.uint("infiniband.trap.lidaddr", 0x0044)
			c.uint("infiniband.trap.portno", 3)
			c.unused("infiniband.trap.")
		}),
		{name: "PortCounters", class: ClassPerf, method: MethodGetResp, attr: PerfAttrPortCounters,
			encode: pc.Encode, check: func(c *wsCheck) {
				p := "infiniband.portcounters."
				c.uint(p+"portselect", uint64(pc.PortSelect))
				c.uint(p+"counterselect", uint64(pc.CounterSelect))
				c.uint(p+"symbolerrorcounter", uint64(pc.SymbolErrorCounter))
				c.uint(p+"linkerrorrecoverycounter", uint64(pc.LinkErrorRecoveryCounter))
				c.uint(p+"linkdownedcounter", uint64(pc.LinkDownedCounter))
				c.uint(p+"portrcverrors", uint64(pc.PortRcvErrors))
				c.uint(p+"portrcvremotephysicalerrors", uint64(pc.PortRcvRemotePhysicalErrors))
				c.uint(p+"portrcvswitchrelayerrors", uint64(pc.PortRcvSwitchRelayErrors))
				c.uint(p+"portxmitdiscards", uint64(pc.PortXmitDiscards))
				c.uint(p+"portxmitconstrainterrors", uint64(pc.PortXmitConstraintErrors))
				c.uint(p+"portrcvconstrainterrors", uint64(pc.PortRcvConstraintErrors))
				c.uint(p+"locallinkintegrityerrors", uint64(pc.LocalLinkIntegrityErrors))
				c.uint(p+"excessivebufferoverrunerrors", uint64(pc.ExcessiveBufferOverrunErrors))
				c.uint(p+"vl15dropped", uint64(pc.VL15Dropped))
				c.uint(p+"portxmitdata", uint64(pc.PortXmitData))
				c.uint(p+"portrcvdata", uint64(pc.PortRcvData))
				c.uint(p+"portxmitpkts", uint64(pc.PortXmitPkts))
				c.uint(p+"portrcvpkts", uint64(pc.PortRcvPkts))
				c.unused(p)
			}},
		{name: "PortCountersExt", class: ClassPerf, method: MethodGetResp, attr: PerfAttrPortCountersExt,
			encode: pcx.Encode, check: func(c *wsCheck) {
				p := "infiniband.portcounters_ext."
				c.uint(p+"portselect", uint64(pcx.PortSelect))
				c.uint(p+"counterselect", uint64(pcx.CounterSelect))
				c.uint(p+"portxmitdata", pcx.PortXmitData)
				c.uint(p+"portrcvdata", pcx.PortRcvData)
				c.uint(p+"portxmitpkts", pcx.PortXmitPkts)
				c.uint(p+"portrcvpkts", pcx.PortRcvPkts)
				c.uint(p+"portunicastxmitpkts", pcx.PortUnicastXmitPkts)
				c.uint(p+"portunicastrcvpkts", pcx.PortUnicastRcvPkts)
				c.uint(p+"portmulticastxmitpkts", pcx.PortMulticastXmitPkts)
				c.uint(p+"portmulticastrcvpkts", pcx.PortMulticastRcvPkts)
				c.unused(p)
			}},
		{name: "ClassPortInfo", class: ClassPerf, method: MethodGetResp, attr: AttrClassPortInfo,
			encode: cpi.Encode, check: func(c *wsCheck) {
				p := "infiniband.classportinfo."
				c.uint(p+"baseversion", uint64(cpi.BaseVersion))
				c.uint(p+"classversion", uint64(cpi.ClassVersion))
				c.uint(p+"capabilitymask", uint64(cpi.CapabilityMask))
				c.uint(p+"capabilitymask2", uint64(cpi.CapabilityMask2))
				c.uint(p+"resptimevalue", uint64(cpi.RespTimeValue))
				c.gid(p+"redirectgid", cpi.RedirectGID)
				c.uint(p+"redirecttc", uint64(cpi.RedirectTC))
				c.uint(p+"redirectsl", uint64(cpi.RedirectSL))
				c.uint(p+"redirectfl", uint64(cpi.RedirectFL))
				c.uint(p+"redirectlid", uint64(cpi.RedirectLID))
				c.uint(p+"redirectpkey", uint64(cpi.RedirectPKey))
				c.uint(p+"redirectqp", uint64(cpi.RedirectQP))
				c.uint(p+"redirectqkey", uint64(cpi.RedirectQKey))
				c.gid(p+"trapgid", cpi.TrapGID)
				c.uint(p+"traptc", uint64(cpi.TrapTC))
				c.uint(p+"trapsl", uint64(cpi.TrapSL))
				c.uint(p+"trapfl", uint64(cpi.TrapFL))
				c.uint(p+"traplid", uint64(cpi.TrapLID))
				c.uint(p+"trappkey", uint64(cpi.TrapPKey))
				c.uint(p+"trapqp", uint64(cpi.TrapQP))
				c.uint(p+"trapqkey", uint64(cpi.TrapQKey))
				// tshark 4.0 calls TrapHL, the byte before TrapQP, reserved;
				// the first reserved it shows is the byte before RedirectQP.
				c.uints(p+"reserved", 0, uint64(cpi.TrapHL))
				c.unused(p)
			}},
	}
	return frames
}

// trapFrame is a generic trap SMP whose data details set sets.
func trapFrame(num uint16, set func(*Notice), check func(*wsCheck)) ibFrame {
	n := Notice{IsGeneric: true, Type: NoticeTypeUrgent, ProducerType: NodeTypeSwitch, TrapNumber: num,
		IssuerLID: 0x0009, Count: 1}
	set(&n)
	return ibFrame{name: "trap " + itoa(int(num)), class: ClassSubnLID, method: MethodTrap, attr: SMAttrNotice,
		encode: func(b []byte) { n.Encode(b[:NoticeSize]) }, check: func(c *wsCheck) {
			c.uint("infiniband.notice.trapnumberdeviceid", uint64(num))
			c.hex("infiniband.notice.datadetails", n.DataDetails[:])
			check(c)
		}}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// gid compares a GID tshark shows in IPv6 text form.
func (c *wsCheck) gid(key string, want [16]byte) {
	c.t.Helper()
	v := c.values(key)
	if len(v) != 1 {
		return
	}
	if a, err := netip.ParseAddr(v[0]); err != nil || a.As16() != want {
		c.t.Errorf("%s: %s: tshark shows %q, we set %x", c.what, key, v[0], want)
	}
}
