// A device whose port is an InfiniBand port (a link implementing
// link.InfiniBand): its attributes come from the port as the SM set them,
// its packets are addressed by LID (link.Packet.IB), and the engine is the
// same as on RoCE.

package verbs

import (
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// SMIQPN is the queue pair number of the subnet management interface (QP0)
// of an InfiniBand port.
const SMIQPN = 0

// ibPort is the device's view of its InfiniBand port.
type ibPort struct {
	l    link.InfiniBand
	attr atomic.Pointer[link.IBAttr]
}

// openIB makes d's port an InfiniBand port.
func (d *Device) openIB(l link.InfiniBand) {
	d.ib = &ibPort{l: l}
	a := l.IBAttr()
	d.ib.attr.Store(&a)
	l.NotifyIBAttr(d.ibAttrChanged)
}

// ibAttrChanged follows the port's attributes: the port's LID (or LMC), P_Key
// table or SM changed raise EventLIDChange, EventPKeyChange and
// EventSMChange as the SM's changes do on an HCA. The port state's events
// come from link.StateNotifier (linkState).
func (d *Device) ibAttrChanged() {
	d.portMu.Lock()
	defer d.portMu.Unlock()
	a := d.ib.l.IBAttr()
	old := d.ib.attr.Swap(&a)
	if a.LID != old.LID || a.LMC != old.LMC {
		d.log.Info("port LID changed", "lid", a.LID, "lmc", a.LMC)
		d.postEvent(AsyncEvent{Type: EventLIDChange, Port: 1})
	}
	if !slices.Equal(a.PKeys, old.PKeys) {
		d.postEvent(AsyncEvent{Type: EventPKeyChange, Port: 1})
	}
	if a.SMLID != old.SMLID || a.SMSL != old.SMSL {
		d.postEvent(AsyncEvent{Type: EventSMChange, Port: 1})
	}
}

// ibPortStates maps the PortInfo state to the verbs state.
var ibPortStates = [...]PortState{link.IBPortDown: PortDown, link.IBPortInit: PortInit,
	link.IBPortArmed: PortArmed, link.IBPortActive: PortActive}

// queryIBPort fills what QueryPort reports of an InfiniBand port.
func (d *Device) queryIBPort(pa *PortAttr) {
	a := d.ib.attr.Load()
	pa.State = PortDown
	if int(a.State) < len(ibPortStates) && a.State != 0 {
		pa.State = ibPortStates[a.State]
	}
	pa.LID, pa.SMLID, pa.LMC, pa.SMSL, pa.PhysState = a.LID, a.SMLID, a.LMC, a.SMSL, a.PhysState
	pa.LinkLayer = LinkLayerInfiniBand
	pa.PortCapFlags = 0x00010000 // CM supported
	pa.UDPPort = 0
	if m := mtuFromBytes(a.MTU); m != 0 && m < pa.ActiveMTU {
		pa.ActiveMTU = m
	}
	pa.PKeys = pa.PKeys[:0]
	for _, k := range a.PKeys {
		pa.PKeys = append(pa.PKeys, wire.PKey(k))
	}
	pa.PKeyTableLen = len(pa.PKeys)
	pa.MaxVLNum = a.OperVLs
}

// Link layers, as PortAttr.LinkLayer names them.
const (
	LinkLayerEthernet   = "Ethernet"
	LinkLayerInfiniBand = "InfiniBand"
)

// mtuFromBytes returns the MTU code of n bytes, or 0.
func mtuFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// pkeyTableLen is the length of the port's P_Key table.
func (d *Device) pkeyTableLen() int {
	if d.ib != nil {
		return len(d.ib.attr.Load().PKeys)
	}
	return PKeyTableLen
}

// pkeyAt returns entry i of the port's P_Key table (the default key on
// RoCE, or for an index the table no longer has).
func (d *Device) pkeyAt(i int) wire.PKey {
	if d.ib != nil {
		if t := d.ib.attr.Load().PKeys; i >= 0 && i < len(t) {
			return wire.PKey(t[i])
		}
	}
	return wire.DefaultPKey
}

// pkeyExempt says the QP takes any P_Key its port accepts: QP0 and QP1 of
// an InfiniBand port, whose link checked the key against the port's table
// (QP0: no check at all, IBTA 10.9.3).
func (qp *QP) pkeyExempt() bool { return qp.dev.ib != nil && qp.qpn <= GSIQPN }

// resolveIB turns an address vector into LID addressing: DLID, SL, source
// path bits and, with IsGlobal, a GRH from the source GID at SGIDIndex to
// DGID (its GIDs as the packet's 16-byte source and destination addresses).
func (d *Device) resolveIB(a *AHAttr) (netip.Addr, netip.AddrPort, link.IBAddr, error) {
	var none netip.AddrPort
	if a.DLID == 0 {
		return netip.Addr{}, none, link.IBAddr{}, errf(ErrInvalid, "DLID 0 on an InfiniBand port")
	}
	if a.SL > 15 {
		return netip.Addr{}, none, link.IBAddr{}, errf(ErrInvalid, "SL %d", a.SL)
	}
	ib := link.IBAddr{DLID: a.DLID, SL: a.SL, PathBits: a.SrcPathBits}
	src := netip.AddrFrom16(d.gids[0])
	dst := none
	if a.IsGlobal {
		if a.SGIDIndex < 0 || a.SGIDIndex >= len(d.gids) {
			return netip.Addr{}, none, link.IBAddr{}, errf(ErrInvalid, "source GID index %d (table has %d)", a.SGIDIndex, len(d.gids))
		}
		if a.DGID == (wire.GID{}) {
			return netip.Addr{}, none, link.IBAddr{}, errf(ErrInvalid, "destination GID %v", a.DGID)
		}
		src = netip.AddrFrom16(d.gids[a.SGIDIndex])
		dst = netip.AddrPortFrom(netip.AddrFrom16(a.DGID), 0)
		ib.Global, ib.HopLimit, ib.FlowLabel = true, a.HopLimit, a.FlowLabel&0xFFFFF
	}
	return src, dst, ib, nil
}

// isMulticastLID reports whether lid is a multicast LID.
func isMulticastLID(lid uint16) bool { return lid >= 0xC000 && lid < 0xFFFF }

// udGRH writes the GRH area of a UD receive and reports whether there is
// one: on RoCE always (the IP header, buildGRH), on InfiniBand only if the
// packet came with a GRH, which is then written as it was on the wire.
// n is the transport packet's length, BTH through ICRC.
func (d *Device) udGRH(g *[grhLen]byte, p *link.Packet, n int) bool {
	if d.ib == nil {
		buildGRH(g, p, n)
		return true
	}
	if !p.IB.Global {
		return false
	}
	f := wire.GRHFields{IPVer: wire.GRHIPVersion, TClass: p.TClass, FlowLabel: p.IB.FlowLabel,
		PayLen: uint16(n), NxtHdr: wire.GRHNextHeaderIBA, HopLmt: p.IB.HopLimit,
		SGID: wire.GID(p.Src.Addr().As16()), DGID: wire.GID(p.Dst.Addr().As16())}
	f.Encode(wire.GRH(g[:]))
	return true
}

// udAddr fills the address fields of a UD receive's completion on an
// InfiniBand port: the source LID, the SL and the DLID's path bits.
func (d *Device) udAddr(wc *WC, p *link.Packet) {
	if d.ib != nil {
		wc.SLID, wc.SL, wc.DLIDPath = p.IB.SLID, p.IB.SL, p.IB.PathBits
	}
}

// CreateSMIQP creates the subnet management interface's queue pair of an
// InfiniBand port: a UD QP with QP number 0, whose packets travel on VL15
// and whose receives take any Q_Key and P_Key (IBTA 10.9.3, 3.6.2). init.Type
// must be UD or zero. It fails with ErrNotSupported on a RoCE port (which
// has no QP0) and with ErrBusy while the port's QP0 exists.
func (pd *PD) CreateSMIQP(init QPInitAttr) (*QP, error) {
	if pd.dev.ib == nil {
		return nil, errf(ErrNotSupported, "QP0 on a %s port", LinkLayerEthernet)
	}
	if init.Type != 0 && init.Type != UD {
		return nil, errf(ErrInvalid, "the SMI QP is UD, not %v", init.Type)
	}
	init.Type = UD
	return pd.createQP(init, wire.QPN(SMIQPN))
}
