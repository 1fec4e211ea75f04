// The ICRC of a stream: the masked IP and UDP headers hashed once a flow.
//
// Of the 48 (IPv4) or 68 (IPv6) bytes of masked headers the ICRC begins
// with, only the BTH changes from packet to packet of one flow and size:
// the addresses, ports and lengths stay, and the IPv4 Identification (which
// a GSO send numbers per segment) enters the CRC linearly. ICRCCache keeps
// the CRC of the IP and UDP part for the last two flows and sizes it saw
// (a stream, or requests and the ACKs that travel with them), so that
// a packet's ICRC hashes its BTH and payload only; a 64-byte WRITE's costs
// a third less.

package wire

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// ICRCCache computes ICRCs (as ICRC, SealParts and CheckICRCIPv4 do)
// reusing the CRC of the masked IP and UDP headers while the flow (the
// Framing without its IPv4 Identification) and the packet size are one of
// the last two seen: a stream of one flow, or a request and the ACK that
// travels with it. Its zero value is ready; it is not safe for concurrent
// use.
type ICRCCache struct {
	e             [2]icrcEntry // the newest first
	hits, lookups uint64       // for tests
	predictions   uint64       // CheckICRCIPv4's right guesses, for tests
}

// icrcEntry is one flow and size's header CRC.
type icrcEntry struct {
	src, dst     netip.Addr
	sport, dport uint16
	frag         uint16
	size         int
	crc          uint32   // the headers' CRC with Identification 0
	basis        *idBasis // basisFor(size), once asked for
	valid, is4   bool
	// For CheckICRCIPv4: the Identification the last packet that did not
	// verify exactly had (relative to the framing's) and its contribution
	// to the ICRC. A connected sender numbers its datagrams, and their
	// segments, one after the other, so the next packet of the flow and
	// size most likely has the one after.
	lastID    uint16
	lastDiff  uint32
	predicted bool
}

// matches reports whether e holds f's flow for packets of size bytes.
func (e *icrcEntry) matches(f *Framing, size int) bool {
	return e.valid && e.size == size && e.src == f.Src && e.dst == f.Dst && e.sport == f.SrcPort && e.dport == f.DstPort && e.frag == f.IPv4Frag
}

// ipv4HeadLen is the length of the masked headers before the BTH for
// IPv4: eight bytes of ones (the LRH's place), the IPv4 header, the UDP
// header.
const ipv4HeadLen = 8 + 20 + 8

// ipv4IDTab[j][b] is what byte b as byte j of the IPv4 Identification adds
// (XOR) to the CRC of the masked IPv4 and UDP headers: the CRC is affine
// in its input, and the Identification sits at a fixed distance from the
// end of those headers.
var ipv4IDTab = func() (t [2][256]uint32) {
	var z [ipv4HeadLen]byte
	zero := crcUpdate(0, z[:])
	for j := range 2 {
		for b := range 256 {
			z[8+4+j] = byte(b)
			t[j][b] = crcUpdate(0, z[:]) ^ zero
		}
		z[8+4+j] = 0
	}
	return t
}()

// entry returns the entry for f's flow and packets of size bytes, the
// newest, filling it if neither entry is.
func (c *ICRCCache) entry(f *Framing, size int) *icrcEntry {
	c.lookups++
	switch {
	case c.e[0].matches(f, size):
		c.hits++
	case c.e[1].matches(f, size):
		c.hits++
		c.e[0], c.e[1] = c.e[1], c.e[0]
	default:
		g := *f
		g.IPv4ID = 0
		c.e[1] = c.e[0]
		c.e[0] = icrcEntry{src: f.Src, dst: f.Dst, sport: f.SrcPort, dport: f.DstPort, frag: f.IPv4Frag, size: size,
			crc: headersCRC(&g, size), valid: true, is4: g.IsIPv4()}
	}
	return &c.e[0]
}

// headers returns the CRC of the masked IP and UDP headers of a packet of
// size bytes (BTH through ICRC) framed by f.
func (c *ICRCCache) headers(f *Framing, size int) uint32 {
	e := c.entry(f, size)
	crc := e.crc
	if id := f.IPv4ID; id != 0 && e.is4 {
		crc ^= ipv4IDTab[0][id>>8] ^ ipv4IDTab[1][id&0xff]
	}
	return crc
}

// ICRC is the package's ICRC, reusing the cached header CRC.
func (c *ICRCCache) ICRC(f *Framing, pkt []byte) uint32 {
	if len(pkt) < BTHLen+ICRCLen {
		return 0
	}
	return icrcAfter(c.headers(f, len(pkt)), pkt)
}

// Seal is the package's Seal, reusing the cached header CRC.
func (c *ICRCCache) Seal(f *Framing, pkt []byte) {
	if len(pkt) < BTHLen+ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], c.ICRC(f, pkt))
}

// SealParts is the package's SealParts, reusing the cached header CRC.
func (c *ICRCCache) SealParts(f *Framing, head, mid, tail []byte) {
	if len(head) < BTHLen || len(tail) < ICRCLen {
		return
	}
	crc := icrcPartsAfter(c.headers(f, len(head)+len(mid)+len(tail)), head, mid, tail)
	binary.LittleEndian.PutUint32(tail[len(tail)-ICRCLen:], crc)
}

// CheckICRCIPv4 is the package's CheckICRCIPv4 (which is this, with a cache
// of nothing), reusing the cached header CRC and the size's basis. A packet that does not verify exactly is first
// tried with the Identification after the one its flow and size's last such
// packet had (a connected sender's datagrams and GSO segments count up), a
// comparison instead of a reduction against the basis.
func (c *ICRCCache) CheckICRCIPv4(f *Framing, pkt []byte) (exact, some bool) {
	if len(pkt) < BTHLen+ICRCLen {
		return false, false
	}
	e := &c.e[0] // the entry ICRC uses
	diff := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) ^ c.ICRC(f, pkt)
	if diff == 0 {
		e.lastID, e.lastDiff, e.predicted = 0, 0, true // (Identification 0 in a count)
		return true, true
	}
	if !e.is4 {
		return false, false
	}
	if e.basis == nil {
		e.basis = basisFor(len(pkt))
	}
	if e.predicted {
		// The contribution of lastID+1: lastID's, with the bits the
		// increment flips. It lies in the span, so a match is sound.
		next := e.lastDiff ^ e.basis.low[min(bits.TrailingZeros16(^e.lastID), 15)]
		if diff == next {
			c.predictions++
			e.lastID++
			e.lastDiff = diff
			return false, true
		}
	}
	id, ok := e.basis.solve(diff)
	if ok && id < 1<<16 { // Don't Fragment as framed: follow the Identification
		e.lastID, e.lastDiff, e.predicted = uint16(id), diff, true
	}
	return false, ok
}
