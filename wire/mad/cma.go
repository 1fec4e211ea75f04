// rdma_cm's own conventions on top of the CM: the service ID that encodes a
// port space and a port, and the 36-byte header (Linux struct cma_hdr) at
// the start of REQ and SIDR_REQ private data that carries the IP addresses
// and source port of the connection.

package mad

import (
	"errors"
	"fmt"
	"net/netip"
)

// PortSpace is an rdma_cm port space: the protocol family of the ports it
// hands out (enum rdma_ucm_port_space in Linux).
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002 // UD, IPoIB-like
	PortSpaceTCP   PortSpace = 0x0106 // RC connections (IP protocol 6)
	PortSpaceUDP   PortSpace = 0x0111 // UD, resolved with SIDR (IP protocol 17)
	PortSpaceIB    PortSpace = 0x013F // native IB, either QP type
)

// String returns "TCP", "UDP", "IB", "IPoIB" or the number.
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "IPoIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return fmt.Sprintf("PortSpace(0x%04x)", uint16(ps))
}

// ServiceID returns the service ID rdma_cm uses for port in port space ps:
// ps<<16 | port. For TCP, UDP and IB the result is 0x0000_0000_01xx_pppp
// (IBTA annex A11); IPoIB has no 0x01 and gives 0x0000_0000_0002_pppp.
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// SplitServiceID splits an rdma_cm service ID into port space and port. ok
// is false if id is not of that form: the high 32 bits must be zero and the
// port space one of the four known ones.
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	ps, port = PortSpace(id>>16), uint16(id)
	if id>>32 != 0 {
		return ps, port, false
	}
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, port, true
	}
	return ps, port, false
}

// CMAHeaderSize is the size of rdma_cm's private-data header.
const CMAHeaderSize = 36

// CMAVersion is the only rdma_cm header version.
const CMAVersion = 0

// Errors ParseCMAHeader wraps.
var (
	// ErrCMAHeaderTruncated means the private data is shorter than a header.
	ErrCMAHeaderTruncated = errors.New("mad: rdma_cm header truncated")
	// ErrCMAVersion means the header version is not CMAVersion.
	ErrCMAVersion = errors.New("mad: unsupported rdma_cm header version")
	// ErrCMAIPVersion means the IP version is neither 4 nor 6.
	ErrCMAIPVersion = errors.New("mad: bad IP version in rdma_cm header")
)

// CMAHeader is a view of rdma_cm's private-data header: CMAHeaderSize
// bytes. rdma_cm puts it in front of the user's private data of every REQ
// and SIDR_REQ whose rdma_cm ID is bound to IP addresses (AF_INET or
// AF_INET6, any port space); REP, RTU and the other messages have none.
//
// Layout: version (1 byte), IP version in the high nibble (1), source port
// (2), source address (16), destination address (16). An IPv4 address sits
// in the last 4 bytes of its 16-byte field after 12 zero bytes (not as an
// IPv4-mapped ::ffff: address, unlike the GIDs of the REQ's path).
type CMAHeader []byte

// ParseCMAHeader checks the start of b (the private data of a REQ or
// SIDR_REQ) as an rdma_cm header and returns a view of its first
// CMAHeaderSize bytes. It fails if b is too short, the version is not
// CMAVersion or the IP version is neither 4 nor 6.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, the header is %d", ErrCMAHeaderTruncated, len(b), CMAHeaderSize)
	}
	h := CMAHeader(b[:CMAHeaderSize])
	if v := h.Version(); v != CMAVersion {
		return nil, fmt.Errorf("%w %d", ErrCMAVersion, v)
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, fmt.Errorf("%w: %d", ErrCMAIPVersion, v)
	}
	return h, nil
}

// Version returns the header version byte.
func (h CMAHeader) Version() uint8 { return h[0] }

// SetVersion sets the header version byte.
func (h CMAHeader) SetVersion(v uint8) { h[0] = v }

// IPVersion returns the 4-bit IP version, 4 or 6 in a valid header.
func (h CMAHeader) IPVersion() uint8 { return getBits(h[1], 4, 4) }

// SetIPVersion sets the 4-bit IP version, leaving the low nibble alone.
func (h CMAHeader) SetIPVersion(v uint8) { setBits(&h[1], 4, 4, v) }

// SrcPort returns the source port of the active side. The destination port
// is the low 16 bits of the service ID.
func (h CMAHeader) SrcPort() uint16 { return be.Uint16(h[2:]) }

// SetSrcPort sets the source port.
func (h CMAHeader) SetSrcPort(v uint16) { be.PutUint16(h[2:], v) }

// SrcAddr returns the source IP address: IPv4 or IPv6 as IPVersion says, or
// the zero netip.Addr if IPVersion is neither 4 nor 6.
func (h CMAHeader) SrcAddr() netip.Addr { return h.addr(h[4:20]) }

// SetSrcAddr writes a to the source address field: an IPv4 address as 12
// zero bytes and its 4 bytes, an IPv6 address (an IPv4-mapped one too) as
// its 16 bytes, the zero Addr as zeros. It does not change IPVersion.
func (h CMAHeader) SetSrcAddr(a netip.Addr) { setAddr(h[4:20], a) }

// DstAddr returns the destination IP address, like SrcAddr.
func (h CMAHeader) DstAddr() netip.Addr { return h.addr(h[20:36]) }

// SetDstAddr writes a to the destination address field; see SetSrcAddr.
func (h CMAHeader) SetDstAddr(a netip.Addr) { setAddr(h[20:36], a) }

func (h CMAHeader) addr(f []byte) netip.Addr {
	switch h.IPVersion() {
	case 4:
		return netip.AddrFrom4([4]byte(f[12:16]))
	case 6:
		return netip.AddrFrom16([16]byte(f))
	}
	return netip.Addr{}
}

func setAddr(f []byte, a netip.Addr) {
	switch {
	case a.Is4():
		clear(f[:12])
		v4 := a.As4()
		copy(f[12:], v4[:])
	case a.Is6():
		v6 := a.As16()
		copy(f, v6[:])
	default:
		clear(f)
	}
}

// Fields returns the decoded header.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{
		Version:   h.Version(),
		IPVersion: h.IPVersion(),
		SrcPort:   h.SrcPort(),
		SrcAddr:   h.SrcAddr(),
		DstAddr:   h.DstAddr(),
	}
}

// CMAHeaderFields is the decoded form of a CMAHeader.
type CMAHeaderFields struct {
	Version   uint8 // CMAVersion
	IPVersion uint8 // 4 or 6; should match the addresses
	SrcPort   uint16
	SrcAddr   netip.Addr
	DstAddr   netip.Addr
}

// Encode writes the header into the first CMAHeaderSize bytes of b. The
// low nibble of the IP version byte is zeroed; IPv6 zones are dropped.
func (f *CMAHeaderFields) Encode(b []byte) {
	h := CMAHeader(b[:CMAHeaderSize])
	h.SetVersion(f.Version)
	h[1] = 0
	h.SetIPVersion(f.IPVersion)
	h.SetSrcPort(f.SrcPort)
	h.SetSrcAddr(f.SrcAddr)
	h.SetDstAddr(f.DstAddr)
}

// RoCEFlowLabel returns the flow label Linux's rdma_cm puts in the path of
// a RoCEv2 connection it initiates (and so in its REQ, and in both QPs'
// address vectors): the rdma_cm source port times 31 plus the destination
// port, in 20 bits. Both ends derive their UDP source port from it
// (wire.FlowSourcePort).
func RoCEFlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & 0xFFFFF
}
