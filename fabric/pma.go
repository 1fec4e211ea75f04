package fabric

import (
	"math"

	"github.com/softrdma/softrdma/wire/mad"
)

// The performance management agent of every node (IBTA volume 1 16.1):
// ClassPortInfo, PortCounters and PortCountersExtended from the counters
// the fabric moves as MADs cross ports. It runs under f.mu.

// pma answers a PMA Get or Set of attr at the node of port at; data is the
// MAD from PerfDataOffset on, and gets the answer.
func (f *Fabric) pma(at *nodePort, method mad.Method, attr mad.AttributeID, data []byte) uint16 {
	n := at.node
	switch attr {
	case mad.AttrClassPortInfo:
		if method != mad.MethodGet {
			return mad.StatusMethodAttrInvalid
		}
		cpi := mad.ClassPortInfo{BaseVersion: 1, ClassVersion: 1, RespTimeValue: 0x12,
			// PortXmitWait stays 0: the management plane never waits for
			// credits (ibsim claims the same bits).
			CapabilityMask: mad.PerfCapExtendedWidth | mad.PerfCapXmitWait}
		if n.isSwitch() {
			cpi.CapabilityMask |= mad.PerfCapAllPortSelect
		}
		clear(data)
		cpi.Encode(data)
		return mad.StatusOK
	case mad.PerfAttrPortCounters, mad.PerfAttrPortCountersExt:
	default:
		return mad.StatusMethodAttrInvalid
	}
	sel := int(data[1])
	var ports []*nodePort
	switch {
	case sel == 0xFF && n.isSwitch():
		ports = append(ports, n.ports[1:]...)
	case sel == 0xFF:
		return mad.StatusInvalidAttrOrModify
	case sel == 0 && !n.isSwitch():
		ports = []*nodePort{at}
	default:
		p := n.port(sel)
		if p == nil {
			return mad.StatusInvalidAttrOrModify
		}
		ports = []*nodePort{p}
	}
	if attr == mad.PerfAttrPortCounters {
		x, err := mad.ParsePortCounters(data)
		if err != nil {
			return mad.StatusInvalidAttrOrModify
		}
		if method == mad.MethodSet {
			for _, p := range ports {
				clearCounters(&p.cnt, x.CounterSelect)
			}
		}
		var sum counters
		for _, p := range ports {
			f.syncLinkCounters(p)
			addCounters(&sum, &p.cnt)
		}
		y := mad.PortCounters{
			PortSelect:               uint8(sel),
			CounterSelect:            x.CounterSelect,
			LinkDownedCounter:        uint8(sat(sum.linkDowned, math.MaxUint8)),
			PortRcvErrors:            uint16(sat(sum.rcvErrors, math.MaxUint16)),
			PortRcvSwitchRelayErrors: uint16(sat(sum.switchRelayErrors, math.MaxUint16)),
			PortXmitDiscards:         uint16(sat(sum.xmitDiscards, math.MaxUint16)),
			VL15Dropped:              uint16(sat(sum.vl15Dropped, math.MaxUint16)),
			PortXmitData:             uint32(sat(sum.xmitData, math.MaxUint32)),
			PortRcvData:              uint32(sat(sum.rcvData, math.MaxUint32)),
			PortXmitPkts:             uint32(sat(sum.xmitPkts, math.MaxUint32)),
			PortRcvPkts:              uint32(sat(sum.rcvPkts, math.MaxUint32)),
			PortXmitWait:             uint32(sat(sum.xmitWait, math.MaxUint32)),
			PortXmitConstraintErrors: uint8(sat(sum.xmitConstraintErrors, math.MaxUint8)),
			PortRcvConstraintErrors:  uint8(sat(sum.rcvConstraintErrors, math.MaxUint8)),
		}
		clear(data)
		y.Encode(data)
		return mad.StatusOK
	}
	x, err := mad.ParsePortCountersExt(data)
	if err != nil {
		return mad.StatusInvalidAttrOrModify
	}
	if method == mad.MethodSet {
		for _, p := range ports {
			c := &p.cnt
			for bit, v := range []*uint64{&c.xmitData, &c.rcvData, &c.xmitPkts, &c.rcvPkts} {
				if x.CounterSelect&(1<<bit) != 0 {
					*v = 0
				}
			}
		}
	}
	var sum counters
	for _, p := range ports {
		if method == mad.MethodSet {
			// Multicast packets are counted apart (the data plane's), and
			// go with the totals.
			if x.CounterSelect&(1<<2|1<<6) != 0 {
				p.cnt.mcastXmitPkts = 0
			}
			if x.CounterSelect&(1<<3|1<<7) != 0 {
				p.cnt.mcastRcvPkts = 0
			}
		}
		addCounters(&sum, &p.cnt)
	}
	mx, mr := min(sum.mcastXmitPkts, sum.xmitPkts), min(sum.mcastRcvPkts, sum.rcvPkts)
	y := mad.PortCountersExt{
		PortSelect: uint8(sel), CounterSelect: x.CounterSelect,
		PortXmitData: sum.xmitData, PortRcvData: sum.rcvData,
		PortXmitPkts: sum.xmitPkts, PortRcvPkts: sum.rcvPkts,
		// MADs are unicast; the data plane counts multicast packets.
		PortUnicastXmitPkts: sum.xmitPkts - mx, PortUnicastRcvPkts: sum.rcvPkts - mr,
		PortMulticastXmitPkts: mx, PortMulticastRcvPkts: mr,
	}
	clear(data)
	y.Encode(data[:mad.PortCountersExtSize])
	return mad.StatusOK
}

func sat(v, limit uint64) uint64 { return min(v, limit) }

func addCounters(a, b *counters) {
	a.xmitData += b.xmitData
	a.rcvData += b.rcvData
	a.xmitPkts += b.xmitPkts
	a.rcvPkts += b.rcvPkts
	a.rcvErrors += b.rcvErrors
	a.switchRelayErrors += b.switchRelayErrors
	a.xmitDiscards += b.xmitDiscards
	a.vl15Dropped += b.vl15Dropped
	a.linkDowned += b.linkDowned
	a.xmitWait += b.xmitWait
	a.rcvConstraintErrors += b.rcvConstraintErrors
	a.xmitConstraintErrors += b.xmitConstraintErrors
	a.mcastXmitPkts += b.mcastXmitPkts
	a.mcastRcvPkts += b.mcastRcvPkts
}

// clearCounters clears the counters PortCounters' CounterSelect names.
func clearCounters(c *counters, sel uint16) {
	bits := []struct {
		bit uint
		v   *uint64
	}{
		{2, &c.linkDowned}, {3, &c.rcvErrors}, {5, &c.switchRelayErrors}, {6, &c.xmitDiscards},
		{7, &c.xmitConstraintErrors}, {8, &c.rcvConstraintErrors},
		{11, &c.vl15Dropped}, {12, &c.xmitData}, {13, &c.rcvData}, {14, &c.xmitPkts}, {15, &c.rcvPkts},
	}
	for _, b := range bits {
		if sel&(1<<b.bit) != 0 {
			*b.v = 0
		}
	}
}
