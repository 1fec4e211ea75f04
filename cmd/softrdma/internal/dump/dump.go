// Package dump decodes captured frames into RoCEv2 packets with the
// project's own parsers (wire.Parse, wire/mad) and prints them one line
// each, for "softrdma dump".
package dump

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// ErrNotRoCE is returned by Decode for a frame that is not a UDP datagram to
// the RoCEv2 port (ARP, neighbour discovery, TCP of the tools' exchange...).
var ErrNotRoCE = errors.New("not RoCEv2")

// Record is one decoded RoCEv2 packet.
type Record struct {
	Framing wire.Framing
	// Packet is the validated packet; its Bytes are the UDP payload.
	Packet wire.Packet
	// ICRCOK reports whether the ICRC verifies for the captured IP header.
	ICRCOK bool
	// MAD is set for a UD packet to QP1 (a management datagram) that
	// wire/mad accepts; MADErr says why one was not accepted.
	MAD    mad.MAD
	MADErr error
}

// Decode decodes one captured frame of link type lt. port is the RoCEv2 UDP
// destination port (wire.UDPPort). A frame that is not UDP to port gives an
// error wrapping ErrNotRoCE; a RoCEv2 frame that does not parse gives an error
// wrapping wire.ErrFraming or wire.ErrMalformed.
func Decode(lt layers.LinkType, frame []byte, port uint16) (Record, error) {
	ip, err := networkLayer(lt, frame)
	if err != nil {
		return Record{}, err
	}
	// Not RoCE unless it is UDP to port; check before the strict split so
	// that other traffic is not reported as malformed.
	if !isUDPTo(ip, port) {
		return Record{}, fmt.Errorf("%w: not UDP to port %d", ErrNotRoCE, port)
	}
	fr, payload, err := wire.SplitIP(ip)
	if err != nil {
		return Record{}, err
	}
	pkt, err := wire.Parse(payload)
	if err != nil {
		return Record{Framing: fr}, err
	}
	r := Record{Framing: fr, Packet: pkt, ICRCOK: wire.VerifyICRC(&fr, payload)}
	if pkt.BTH().DestQP() == mad.GSIQPN && pkt.DETH() != nil {
		r.MAD, r.MADErr = mad.Parse(pkt.Payload())
	}
	return r, nil
}

// networkLayer returns the IP packet in a frame.
func networkLayer(lt layers.LinkType, frame []byte) ([]byte, error) {
	switch lt {
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return frame, nil
	}
	p := gopacket.NewPacket(frame, lt, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	nl := p.NetworkLayer()
	if nl == nil {
		if el := p.ErrorLayer(); el != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotRoCE, el.Error())
		}
		return nil, fmt.Errorf("%w: no IP header", ErrNotRoCE)
	}
	if _, ok := nl.(*layers.IPv4); !ok {
		if _, ok := nl.(*layers.IPv6); !ok {
			return nil, fmt.Errorf("%w: network layer %v", ErrNotRoCE, nl.LayerType())
		}
	}
	// The IP packet is the rest of the frame from the network header on:
	// skip the contents of the layers before it.
	off := 0
	for _, l := range p.Layers() {
		if l == gopacket.Layer(nl) {
			break
		}
		off += len(l.LayerContents())
	}
	if off >= len(frame) {
		return nil, fmt.Errorf("%w: cannot locate IP header", ErrNotRoCE)
	}
	return frame[off:], nil
}

// isUDPTo reports whether the IP packet ip carries UDP to port, looking no
// further than the fixed headers.
func isUDPTo(ip []byte, port uint16) bool {
	p, ok := udpDstPort(ip)
	return ok && p == port
}

// UDPDstPort returns the UDP destination port of a frame, if it is UDP.
func UDPDstPort(lt layers.LinkType, frame []byte) (uint16, bool) {
	ip, err := networkLayer(lt, frame)
	if err != nil {
		return 0, false
	}
	return udpDstPort(ip)
}

func udpDstPort(ip []byte) (uint16, bool) {
	if len(ip) < 1 {
		return 0, false
	}
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < 20 || ip[9] != 17 {
			return 0, false
		}
		hl := int(ip[0]&0x0F) * 4
		if hl < 20 || len(ip) < hl {
			return 0, false
		}
		l4 = ip[hl:]
	case 6:
		if len(ip) < 40 || ip[6] != 17 {
			return 0, false
		}
		l4 = ip[40:]
	default:
		return 0, false
	}
	if len(l4) < 4 {
		return 0, false
	}
	return uint16(l4[2])<<8 | uint16(l4[3]), true
}

// Format writes r as one line: time t (seconds since the first packet),
// endpoints, transport and opcode, BTH fields, extension headers, payload
// length and the ICRC check.
func Format(w io.Writer, t time.Duration, r *Record) error {
	var b strings.Builder
	fr := &r.Framing
	fmt.Fprintf(&b, "%11.6f %s > %s", t.Seconds(),
		netip.AddrPortFrom(fr.Src, fr.SrcPort), netip.AddrPortFrom(fr.Dst, fr.DstPort))
	p := r.Packet
	bth := p.BTH()
	fmt.Fprintf(&b, " %s qpn %s psn %#06x", p.Info().Name, bth.DestQP(), uint32(bth.PSN()))
	if bth.AckReq() {
		b.WriteString(" ackreq")
	}
	if bth.Solicited() {
		b.WriteString(" se")
	}
	if bth.MigReq() {
		b.WriteString(" migreq")
	}
	if bth.FECN() || bth.BECN() {
		fmt.Fprintf(&b, " fecn %t becn %t", bth.FECN(), bth.BECN())
	}
	if k := bth.PKey(); k != wire.DefaultPKey {
		fmt.Fprintf(&b, " pkey %s", k)
	}
	if h := p.FETH(); h != nil {
		fmt.Fprintf(&b, " feth[sel %d type %d]", h.Selectivity(), h.PlacementType())
	}
	if h := p.RETH(); h != nil {
		fmt.Fprintf(&b, " reth[va 0x%x rkey 0x%08x len %d]", h.VA(), uint32(h.RKey()), h.DMALen())
	}
	if h := p.AETH(); h != nil {
		fmt.Fprintf(&b, " aeth[%s msn %d]", h.Syndrome(), h.MSN())
	}
	if h := p.DETH(); h != nil {
		fmt.Fprintf(&b, " deth[qkey 0x%08x srcqp %s]", uint32(h.QKey()), h.SrcQP())
	}
	if h := p.AtomicETH(); h != nil {
		fmt.Fprintf(&b, " atomic[va 0x%x rkey 0x%08x swap/add 0x%x cmp 0x%x]", h.VA(), uint32(h.RKey()), h.SwapAdd(), h.Compare())
	}
	if h := p.AtomicAckETH(); h != nil {
		fmt.Fprintf(&b, " atomicack[orig 0x%x]", h.Orig())
	}
	if imm, ok := p.Imm(); ok {
		fmt.Fprintf(&b, " imm 0x%08x", imm)
	}
	if k, ok := p.InvRKey(); ok {
		fmt.Fprintf(&b, " inv-rkey 0x%08x", uint32(k))
	}
	fmt.Fprintf(&b, " payload %d", len(p.Payload()))
	if r.ICRCOK {
		b.WriteString(" icrc ok")
	} else {
		fmt.Fprintf(&b, " icrc BAD (0x%08x)", p.ICRC())
	}
	switch {
	case r.MAD != nil:
		fmt.Fprintf(&b, " mad[%s %s %s tid 0x%x", r.MAD.MgmtClass(), r.MAD.Method(), r.MAD.AttributeID(), r.MAD.TransactionID())
		if s := r.MAD.Status(); s != 0 {
			fmt.Fprintf(&b, " status 0x%04x", s)
		}
		b.WriteString("]")
	case r.MADErr != nil:
		fmt.Fprintf(&b, " mad[%v]", r.MADErr)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
