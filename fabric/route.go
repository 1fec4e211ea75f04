package fabric

import (
	"log/slog"

	"github.com/softrdma/softrdma/wire/mad"
)

// maxTIDOwners bounds the transaction IDs remembered to route responses to
// the client that sent the request; beyond it responses go to every client
// of the port.
const maxTIDOwners = 1 << 16

func isResponse(m mad.MAD) bool { return m.Method()&0x80 != 0 }

func isSMClass(c mad.Class) bool { return c == mad.ClassSubnLID || c == mad.ClassSubnDirected }

// carry takes one datagram through the fabric: to its destination port,
// where the node's agents answer it or clients receive it; answers and
// traps go on pending, deliveries on out. It runs under f.mu.
func (f *Fabric) carry(j job, out *[]delivery, pending *[]job) {
	d := j.d
	m := mad.MAD(d.MAD)
	class := m.MgmtClass()
	resp := isResponse(m)
	drop := func(why string) {
		f.dropped.Add(1)
		f.log.Debug("fabric: MAD dropped", "why", why, "class", class, "method", m.Method(),
			"attr", mad.AttrName(class, m.AttributeID()), "from", j.src.node.name, "port", j.src.num)
		if j.from != nil && !resp {
			delete(f.tidOwner, tidKey{j.src, m.TransactionID()})
			r := *d
			r.MAD = append([]byte(nil), d.MAD...)
			r.Status = StatusTimeout
			*out = append(*out, delivery{j.from, &r})
		}
	}
	if j.from != nil && !resp && len(f.tidOwner) < maxTIDOwners {
		f.tidOwner[tidKey{j.src, m.TransactionID()}] = j.from
	}
	if class == mad.ClassSubnDirected {
		s := mad.SMP(d.MAD)
		if s.Direction() != resp {
			drop("direction bit does not match the method")
			return
		}
		if resp {
			dest, why := f.drBack(j.src, d, s)
			if dest == nil {
				drop(why)
				return
			}
			f.toClients(dest, d, true, out, drop)
			return
		}
		in, why := f.drOut(j.src, d, s)
		if in == nil {
			drop(why)
			return
		}
		f.request(j, in, in.node.smaPort(in), out, pending, drop)
		return
	}
	if d.SLID == 0 {
		d.SLID = j.src.node.smaPort(j.src).pi.LID
	}
	if j.from != nil && f.fromClientDP(j.src, d) {
		return // for an HCA: on the data plane (gsibridge.go)
	}
	dest, in, why := f.lidRoute(j.src, d.DLID, isSMClass(class))
	if dest == nil {
		drop(why)
		return
	}
	if resp {
		f.toClients(dest, d, true, out, drop)
		return
	}
	f.request(j, in, dest, out, pending, drop)
}

// toClients hands d to the clients of port p: a response to the client
// that sent the request if known, anything else to every client.
func (f *Fabric) toClients(p *nodePort, d *Datagram, resp bool, out *[]delivery, drop func(string)) {
	if resp {
		k := tidKey{p, mad.MAD(d.MAD).TransactionID()}
		if c, ok := f.tidOwner[k]; ok {
			delete(f.tidOwner, k)
			*out = append(*out, delivery{c, d})
			return
		}
	}
	if len(p.clients) == 0 {
		drop("no client at the destination port")
		return
	}
	for i, c := range p.clients {
		dd := d
		if i > 0 {
			cp := *d
			cp.MAD = append([]byte(nil), d.MAD...)
			dd = &cp
		}
		*out = append(*out, delivery{c, dd})
	}
}

// request handles a request that reached port dest (arrived on in): the
// SMA or PMA answers it, or the port's clients get it.
func (f *Fabric) request(j job, in, dest *nodePort, out *[]delivery, pending *[]job, drop func(string)) {
	d := j.d
	m := mad.MAD(d.MAD)
	class, method, attr := m.MgmtClass(), m.Method(), m.AttributeID()
	switch {
	case isSMClass(class):
		switch {
		case method == mad.MethodTrapRepress:
			// The SM asks the node to stop repeating a trap: the agents
			// send each trap once, so there is nothing to stop.
			return
		case method == mad.MethodTrap || method == mad.MethodReport:
			f.toClients(dest, d, false, out, drop)
			return
		case attr == mad.SMAttrSMInfo && (method == mad.MethodGet || method == mad.MethodSet):
			// Only an SM answers SMInfo: the port's clients get it when
			// the port says IsSM (SetIsSM), else the SMA refuses it.
			if len(dest.clients) > 0 && dest.pi.CapabilityMask&mad.PortCapIsSM != 0 {
				f.toClients(dest, d, false, out, drop)
				return
			}
			f.answer(j, in, dest, mad.StatusMethodAttrInvalid, nil, pending)
			return
		case method != mad.MethodGet && method != mad.MethodSet:
			f.answer(j, in, dest, mad.StatusMethodUnsupported, nil, pending)
			return
		}
		s := mad.SMP(d.MAD)
		sma := in.node.smaPort(in)
		if !f.mkeyOK(sma, s, method) {
			f.badMKeyTrap(sma, s, pending)
			drop("M_Key violation")
			return
		}
		data := append([]byte(nil), s.Data()...)
		st := f.smaAttr(in, method, attr, m.AttributeModifier(), data, pending)
		f.hideMKey(sma, s, attr, data)
		f.answer(j, in, dest, st, data, pending)
	case class == mad.ClassPerf:
		if method != mad.MethodGet && method != mad.MethodSet {
			f.answer(j, in, dest, mad.StatusMethodUnsupported, nil, pending)
			return
		}
		data := append([]byte(nil), d.MAD[mad.PerfDataOffset:]...)
		st := f.pma(dest, method, attr, data)
		f.answer(j, in, dest, st, data, pending)
	default:
		f.toClients(dest, d, false, out, drop)
	}
}

// answer turns the request of j into its response (GetResp, status, data
// at the class's data offset) and queues it from the answering port.
func (f *Fabric) answer(j job, in, dest *nodePort, status uint16, data []byte, pending *[]job) {
	d := j.d
	r := &Datagram{
		SLID: d.DLID, DLID: d.SLID, SQP: d.DQP, DQP: d.SQP, SL: d.SL, PKey: d.PKey, QKey: d.QKey,
		MAD: append([]byte(nil), d.MAD...),
	}
	m := mad.MAD(r.MAD)
	m.SetMethod(mad.MethodGetResp)
	src := dest
	if m.MgmtClass() == mad.ClassSubnDirected {
		s := mad.SMP(r.MAD)
		s.SetStatus(status)
		s.SetDirection(true)
		// The response leaves the way the request came in; a request that
		// ended LID-routed goes back to the switch by LID first.
		src = in
		if s.DrDLID() != mad.PermissiveLID {
			src = dest
		}
	} else {
		m.SetStatus(status)
		if d.SLID == mad.PermissiveLID || d.DLID == mad.PermissiveLID {
			r.SLID = dest.pi.LID
		}
	}
	if data != nil {
		off := mad.SMPDataOffset
		if m.MgmtClass() == mad.ClassPerf {
			off = mad.PerfDataOffset
		}
		copy(r.MAD[off:], data)
	}
	*pending = append(*pending, job{d: r, src: src})
}

// transmit sends one packet out of port eg over its link, counting it on
// both ends; a non-VL15 packet needs both ends ACTIVE.
func (f *Fabric) transmit(eg *nodePort, vl15 bool) bool {
	r := eg.remote
	if r == nil || !eg.physUp() || !r.physUp() {
		eg.cnt.xmitDiscards++
		return false
	}
	if !vl15 && (eg.pi.PortState != mad.PortStateActive || r.pi.PortState != mad.PortStateActive) {
		eg.cnt.xmitDiscards++
		return false
	}
	eg.cnt.xmitPkts++
	eg.cnt.xmitData += madWords
	r.cnt.rcvPkts++
	r.cnt.rcvData += madWords
	return true
}

// lidRoute carries a packet from port from (a CA port it leaves by, or a
// switch port it is in) to the port owning dlid, by the switches' LFTs. It
// returns that port (a switch's port 0 for the switch's LIDs) and the port
// the packet arrived on, or nil and why not.
func (f *Fabric) lidRoute(from *nodePort, dlid uint16, vl15 bool) (dest, in *nodePort, why string) {
	switch {
	case dlid == 0:
		return nil, nil, "DLID 0"
	case dlid == mad.PermissiveLID:
		if !vl15 {
			return nil, nil, "permissive DLID on a GMP"
		}
		return from.node.smaPort(from), from, ""
	case dlid >= 0xC000:
		return nil, nil, "multicast DLID: not routed by the management plane"
	}
	cur := from
	for hop := 0; hop < maxHops; hop++ {
		n := cur.node
		var eg *nodePort
		if n.isSwitch() {
			if n.ports[0].lidRange(dlid) {
				return n.ports[0], cur, ""
			}
			out := mad.LinearFTNoRoute
			if dlid <= n.sw.info.LinearFDBTop {
				out = int(n.sw.lft[dlid])
			}
			if out == mad.LinearFTNoRoute || out == 0 || out >= len(n.ports) {
				if cur.num != 0 {
					cur.cnt.switchRelayErrors++
				}
				return nil, nil, "no LFT entry in " + n.name
			}
			eg = n.ports[out]
		} else {
			if cur.lidRange(dlid) {
				return cur, cur, ""
			}
			if hop > 0 {
				cur.cnt.rcvErrors++
				return nil, nil, "arrived at a CA that does not own the DLID"
			}
			eg = cur
		}
		if !f.transmit(eg, vl15) {
			return nil, nil, "link down or not active at " + n.name
		}
		cur = eg.remote
		if !cur.node.isSwitch() {
			if cur.lidRange(dlid) {
				return cur, cur, ""
			}
			cur.cnt.rcvErrors++
			return nil, nil, "arrived at a CA that does not own the DLID"
		}
	}
	return nil, nil, "routing loop"
}

// drOut walks a directed-route request (IBTA 14.2.2.2, C14-9) from src: a
// LID-routed part first if DrSLID is not permissive, then hop by hop along
// the initial path, recording the return path, then LID-routed to DrDLID
// if that is not permissive. It returns the port the request arrived on at
// its destination, or nil and why not.
func (f *Fabric) drOut(src *nodePort, d *Datagram, s mad.SMP) (*nodePort, string) {
	hc, hp := int(s.HopCount()), int(s.HopPointer())
	if hc > mad.SMPMaxHopCount {
		return nil, "hop count over 63"
	}
	if hp != 0 {
		return nil, "request sent with a hop pointer not 0"
	}
	cur := src
	if s.DrSLID() != mad.PermissiveLID {
		p, _, why := f.lidRoute(src, d.DLID, true)
		if p == nil {
			return nil, why
		}
		if !p.node.isSwitch() {
			return nil, "directed route starting at a CA reached by LID"
		}
		cur = p
	}
	path, ret := s.InitialPath(), s.ReturnPath()
	for {
		n := cur.node
		switch {
		case hp < hc:
			if hp > 0 && !n.isSwitch() {
				return nil, "directed route through a CA"
			}
			hp++
			s.SetHopPointer(uint8(hp))
			out := int(path[hp])
			var eg *nodePort
			if n.isSwitch() {
				if out < 1 || out >= len(n.ports) {
					return nil, "initial path names a port the switch does not have"
				}
				eg = n.ports[out]
			} else {
				if out != cur.num {
					return nil, "initial path leaves a CA by another port"
				}
				eg = cur
			}
			if !f.transmit(eg, true) {
				return nil, "directed route through a port that is down"
			}
			cur = eg.remote
			ret[hp] = byte(cur.num)
		case hp == hc:
			hp++
			s.SetHopPointer(uint8(hp))
			if s.DrDLID() == mad.PermissiveLID {
				return cur, ""
			}
			if !n.isSwitch() {
				return nil, "LID-routed end of a directed route from a CA"
			}
			d.SLID = n.ports[0].pi.LID
			d.DLID = s.DrDLID()
			_, in, why := f.lidRoute(n.ports[0], s.DrDLID(), true)
			return in, why
		default:
			return nil, "hop pointer past the hop count"
		}
	}
}

// drBack walks a directed-route response (C14-13) from src, the port the
// request arrived on: LID-routed back to the switch that ended the
// directed route if DrDLID is not permissive, then hop by hop along the
// return path, then LID-routed to DrSLID if that is not permissive. It
// returns the port whose clients get the response.
func (f *Fabric) drBack(src *nodePort, d *Datagram, s mad.SMP) (*nodePort, string) {
	hc, hp := int(s.HopCount()), int(s.HopPointer())
	if hc > mad.SMPMaxHopCount {
		return nil, "hop count over 63"
	}
	cur := src
	if s.DrDLID() != mad.PermissiveLID {
		p, _, why := f.lidRoute(src, d.DLID, true)
		if p == nil {
			return nil, why
		}
		if !p.node.isSwitch() {
			return nil, "returning directed route resumes at a CA"
		}
		cur = p
	}
	ret := s.ReturnPath()
	for {
		n := cur.node
		switch {
		case hc > 0 && hp == hc+1, 2 <= hp && hp <= hc:
			if hp <= hc && !n.isSwitch() {
				return nil, "returning directed route through a CA"
			}
			hp--
			s.SetHopPointer(uint8(hp))
			out := int(ret[hp])
			var eg *nodePort
			if n.isSwitch() {
				if out < 1 || out >= len(n.ports) {
					return nil, "return path names a port the switch does not have"
				}
				eg = n.ports[out]
			} else {
				if out != cur.num {
					return nil, "return path leaves a CA by another port"
				}
				eg = cur
			}
			if !f.transmit(eg, true) {
				return nil, "returning directed route through a port that is down"
			}
			cur = eg.remote
		case hp == 1:
			hp = 0
			s.SetHopPointer(0)
			if s.DrSLID() == mad.PermissiveLID {
				return n.smaPort(cur), ""
			}
			if !n.isSwitch() {
				return nil, "LID-routed end of a returning directed route from a CA"
			}
			d.SLID = n.ports[0].pi.LID
			d.DLID = s.DrSLID()
			p, _, why := f.lidRoute(n.ports[0], s.DrSLID(), true)
			return p, why
		default:
			return nil, "hop pointer out of range in a response"
		}
	}
}

// logTrap logs a trap a node sends.
func (f *Fabric) logTrap(p *nodePort, num uint16) {
	f.log.Debug("fabric: trap", slog.String("node", p.node.name), slog.Int("port", p.num), slog.Int("trap", int(num)))
}
