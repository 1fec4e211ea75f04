// The invariant CRC of RoCEv2: CRC-32 (IEEE) over a masked copy of the IP
// and UDP headers and the transport packet, so that fields routers may change
// (TOS/traffic class, TTL/hop limit, flow label, IPv4 checksum, UDP checksum,
// BTH FECN/BECN byte) do not invalidate it. The masked prefix is built on the
// stack and the payload is hashed in place, without allocating, by
// internal/crc (AVX-512 carry-less multiply over four lanes where the CPU has
// it, hash/crc32 otherwise).

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"

	ieee "github.com/softrdma/softrdma/internal/crc"
)

// UDPPort is the IANA port of RoCEv2.
const UDPPort = 4791

// IPv4DontFragment is the IPv4 flags/fragment-offset value with DF set and no
// offset. Linux sends it, with Identification 0, from an unconnected UDP
// socket with IP_PMTUDISC_DO; that makes the ICRC of our IPv4 packets
// computable before the kernel adds the IP header.
const IPv4DontFragment = 0x4000

// Framing is what the ICRC needs to know of a packet's IP and UDP headers.
// Src and Dst are both IPv4 (plain or IPv4-mapped) or both IPv6.
type Framing struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	// IPv4 only: the Identification and the flags/fragment offset field
	// (IPv4DontFragment for packets this stack sends).
	IPv4ID, IPv4Frag uint16
}

// IsIPv4 reports whether the framing is IPv4: both addresses are IPv4
// (plain or IPv4-mapped). Any other pair, a mixed one included (which only
// a forged or corrupt IPv6 header carries), is framed as IPv6.
func (f *Framing) IsIPv4() bool { return f.Src.Unmap().Is4() && f.Dst.Unmap().Is4() }

// ErrFraming is wrapped by errors about IP/UDP framing.
var ErrFraming = errors.New("wire: bad IP/UDP framing")

var ffPrefix = [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ICRC computes the invariant CRC of pkt (BTH through ICRC; the last four
// bytes, the ICRC itself, are not hashed) as framed by f. It returns 0 for a
// packet shorter than a BTH and its ICRC.
func ICRC(f *Framing, pkt []byte) uint32 {
	if len(pkt) < BTHLen+ICRCLen {
		return 0
	}
	return icrcAfter(headersCRC(f, len(pkt)), pkt)
}

// ICRCParts is ICRC for a packet held in three parts, head, mid and tail
// in that order (headers, a payload kept elsewhere, pad and ICRC); head
// holds the BTH and tail the ICRC. It returns 0 if they do not.
func ICRCParts(f *Framing, head, mid, tail []byte) uint32 {
	if len(head) < BTHLen || len(tail) < ICRCLen {
		return 0
	}
	return icrcPartsAfter(headersCRC(f, len(head)+len(mid)+len(tail)), head, mid, tail)
}

// icrcAfter is the ICRC of pkt, at least a BTH and an ICRC long, given
// hcrc, the CRC of its masked headers before the BTH (headersCRC).
func icrcAfter(hcrc uint32, pkt []byte) uint32 {
	return crcRest(bthHeadCRC(hcrc, pkt), pkt[bthMasked+1:len(pkt)-ICRCLen])
}

// crcRest continues crc with p: fewer than 16 bytes (an ACK's 11) a byte
// at a time through the table bthHeadCRC uses, which hash/crc32 would do
// through a second 1 KiB table of its own; more through internal/crc
// (folding from 64 bytes, hash/crc32's slicing by eight below: byte by
// byte, a 64-byte packet's 55 bytes took 163 ns against 79).
func crcRest(crc uint32, p []byte) uint32 {
	if len(p) >= 16 {
		return ieee.Update(crc, p)
	}
	return crcBytes(crc, p)
}

// crcBytes continues crc with p a byte at a time through crc32.IEEETable.
func crcBytes(crc uint32, p []byte) uint32 {
	tab := crc32.IEEETable
	crc = ^crc
	for _, v := range p {
		crc = tab[byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// icrcPartsAfter is icrcAfter for a packet in three parts (ICRCParts).
func icrcPartsAfter(hcrc uint32, head, mid, tail []byte) uint32 {
	crc := ieee.Update(bthHeadCRC(hcrc, head), head[bthMasked+1:])
	crc = ieee.Update(crc, mid)
	return ieee.Update(crc, tail[:len(tail)-ICRCLen])
}

// bthMasked is the BTH byte the ICRC masks: FECN, BECN and reserved bits.
const bthMasked = 4

// bthHeadCRC continues crc with the BTH's bytes up to the masked one and
// that byte as the ICRC takes it (all ones). The rest of the packet is then
// hashed where it lies, in one piece with the payload: a 64-byte WRITE's
// 87 bytes take the folding path (internal/crc), and only five bytes go a
// byte at a time, through one 1 KiB table. Copying the BTH out to mask it
// and hashing its 12 bytes by slicing (eight tables, 8 KiB, mostly out of
// cache between a ping-pong's packets) cost some 45 ns a packet.
func bthHeadCRC(crc uint32, bth []byte) uint32 {
	return crcBytes(crcBytes(crc, bth[:bthMasked]), bthMask[:])
}

// bthMask is the masked BTH byte as the ICRC takes it.
var bthMask = [1]byte{0xff}

// SealParts computes the ICRC of a packet in three parts (ICRCParts) and
// stores it in the last four bytes of tail.
func SealParts(f *Framing, head, mid, tail []byte) {
	if len(head) < BTHLen || len(tail) < ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(tail[len(tail)-ICRCLen:], ICRCParts(f, head, mid, tail))
}

// headersCRC is the CRC of the masked headers before the BTH of a packet of
// size bytes (BTH through ICRC) with framing f: eight bytes of ones, then
// the IP and UDP headers.
func headersCRC(f *Framing, size int) uint32 {
	var hdr [8 + 40 + 8]byte
	copy(hdr[:8], ffPrefix[:])
	n := 8
	udpLen := 8 + size
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	if f.IsIPv4() {
		h := hdr[n : n+20]
		h[0] = 0x45
		h[1] = 0xff // TOS
		binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen))
		binary.BigEndian.PutUint16(h[4:], f.IPv4ID)
		binary.BigEndian.PutUint16(h[6:], f.IPv4Frag)
		h[8] = 0xff // TTL
		h[9] = 17
		h[10], h[11] = 0xff, 0xff // header checksum
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		n += 20
	} else {
		h := hdr[n : n+40]
		h[0], h[1], h[2], h[3] = 0x6f, 0xff, 0xff, 0xff // version, TC, flow label
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = 17
		h[7] = 0xff // hop limit
		s, d := f.Src.As16(), f.Dst.As16()
		copy(h[8:], s[:])
		copy(h[24:], d[:])
		n += 40
	}
	u := hdr[n : n+8]
	binary.BigEndian.PutUint16(u[0:], f.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xff, 0xff // UDP checksum
	n += 8
	return crcUpdate(0, hdr[:n])
}

// crcUpdate is crc32.Update with the IEEE polynomial for the short masked
// prefix. hash/crc32 calls its CPU-specific code through a function
// variable, which makes any slice it is given escape: hashing hdr with it
// would move hdr to the heap on every call. It takes eight bytes a step
// (slicing by eight), then one at a time.
func crcUpdate(crc uint32, p []byte) uint32 {
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = slicing8[0][p[7]] ^ slicing8[1][p[6]] ^ slicing8[2][p[5]] ^ slicing8[3][p[4]] ^
			slicing8[4][crc>>24] ^ slicing8[5][crc>>16&0xff] ^ slicing8[6][crc>>8&0xff] ^ slicing8[7][crc&0xff]
		p = p[8:]
	}
	tab := crc32.IEEETable
	for _, v := range p {
		crc = tab[byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// slicing8[k][b] is the CRC state after byte b followed by k zero bytes.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// Seal computes the ICRC of pkt and stores it in its last four bytes.
func Seal(f *Framing, pkt []byte) {
	if len(pkt) < BTHLen+ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], ICRC(f, pkt))
}

// VerifyICRC reports whether the ICRC carried in pkt is right for framing f.
func VerifyICRC(f *Framing, pkt []byte) bool {
	if len(pkt) < BTHLen+ICRCLen {
		return false
	}
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == ICRC(f, pkt)
}

// SplitIP parses an IPv4 or IPv6 packet carrying UDP (no IPv4 options, no
// IPv6 extension headers) and returns its framing and the UDP payload. It is
// for packets read from captures or raw sockets.
func SplitIP(ip []byte) (Framing, []byte, error) {
	var f Framing
	if len(ip) < 1 {
		return f, nil, fmt.Errorf("%w: empty packet", ErrFraming)
	}
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < 20 {
			return f, nil, fmt.Errorf("%w: %d bytes is shorter than an IPv4 header", ErrFraming, len(ip))
		}
		if ip[0]&0x0F != 5 {
			return f, nil, fmt.Errorf("%w: IPv4 header length %d words (options unsupported)", ErrFraming, ip[0]&0x0F)
		}
		if ip[9] != 17 {
			return f, nil, fmt.Errorf("%w: IPv4 protocol %d is not UDP", ErrFraming, ip[9])
		}
		tl := int(binary.BigEndian.Uint16(ip[2:]))
		if tl < 28 || tl > len(ip) {
			return f, nil, fmt.Errorf("%w: IPv4 total length %d with %d bytes present", ErrFraming, tl, len(ip))
		}
		f.Src = netip.AddrFrom4([4]byte(ip[12:16]))
		f.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
		f.IPv4ID = binary.BigEndian.Uint16(ip[4:])
		f.IPv4Frag = binary.BigEndian.Uint16(ip[6:])
		l4 = ip[20:tl]
	case 6:
		if len(ip) < 40 {
			return f, nil, fmt.Errorf("%w: %d bytes is shorter than an IPv6 header", ErrFraming, len(ip))
		}
		if ip[6] != 17 {
			return f, nil, fmt.Errorf("%w: IPv6 next header %d is not UDP", ErrFraming, ip[6])
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if pl < 8 || 40+pl > len(ip) {
			return f, nil, fmt.Errorf("%w: IPv6 payload length %d with %d bytes present", ErrFraming, pl, len(ip)-40)
		}
		f.Src = netip.AddrFrom16([16]byte(ip[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
		l4 = ip[40 : 40+pl]
	default:
		return f, nil, fmt.Errorf("%w: IP version %d", ErrFraming, ip[0]>>4)
	}
	if len(l4) < 8 {
		return f, nil, fmt.Errorf("%w: %d bytes is shorter than a UDP header", ErrFraming, len(l4))
	}
	ul := int(binary.BigEndian.Uint16(l4[4:]))
	if ul != len(l4) {
		return f, nil, fmt.Errorf("%w: UDP length %d, IP says %d", ErrFraming, ul, len(l4))
	}
	f.SrcPort = binary.BigEndian.Uint16(l4[0:])
	f.DstPort = binary.BigEndian.Uint16(l4[2:])
	return f, l4[8:], nil
}
